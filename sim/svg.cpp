#include "sim/svg.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "sim/estimate.h"

namespace fsdpsim::sim {

using planner::MemCategory;
using planner::Op;
using planner::OpKind;
using planner::Schedule;
using planner::Stream;

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
constexpr int kCats = planner::kMemCategoryCount;

const std::array<const char*, kCats> kCategoryColors = {
    "#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#d62728", "#9467bd", "#c5b0d5", "#8c564b", "#7f7f7f"};

struct KindStyle {
  const char* label;
  const char* color;
};
KindStyle style_of(OpKind k) {
  switch (k) {
    case OpKind::compute_fwd: return {"forward", "#4c78a8"};
    case OpKind::compute_bwd: return {"backward", "#f58518"};
    case OpKind::recompute: return {"recompute", "#72b7b2"};
    case OpKind::copy_in:
    case OpKind::copy_out: return {"copy-in / copy-out", "#b279a2"};
    case OpKind::all_gather: return {"all-gather", "#54a24b"};
    case OpKind::reduce_scatter: return {"reduce-scatter", "#e45756"};
    case OpKind::all_reduce: return {"all-reduce", "#9d755d"};
    case OpKind::optimizer: return {"optimizer", "#eeca3b"};
    case OpKind::h2d:
    case OpKind::d2h: return {"host <-> device", "#ff9da6"};
    case OpKind::wait: return {"wait", "#cccccc"};
  }
  return {"?", "#000000"};
}
constexpr const char* kIssueColor = "#9e9e9e";

std::string esc(const std::string& s) {
  std::string o;
  o.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': o += "&amp;"; break;
      case '<': o += "&lt;"; break;
      case '>': o += "&gt;"; break;
      case '"': o += "&quot;"; break;
      default: o += c;
    }
  }
  return o;
}

std::string num(double v, int decimals = 2) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

// A "nice" tick step (1, 2, 2.5, 5 x 10^k) giving about `target` ticks over `range`.
double nice_step(double range, int target) {
  if (!(range > 0)) return 1;
  const double raw = range / target;
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 2.5, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

int decimals_for(double step) {
  int d = 0;
  for (double scaled = step; d < 6 && std::fabs(std::round(scaled) - scaled) > 1e-6 * scaled; scaled *= 10) ++d;
  return d;
}

std::string human_seconds(double s) {
  if (s >= 1) return num(s, 3) + " s";
  if (s >= 1e-3) return num(s * 1e3, 3) + " ms";
  return num(s * 1e6, 1) + " us";
}

}  // namespace

std::string timeline_svg(const Schedule& s, const StepTiming& t, const SvgOptions& o) {
  const double W = std::max(600.0, o.width);
  const double left = 116, right_legend = 230;
  const double pw = W - left - right_legend;
  const double mem_top = 84, mem_h = 250;
  const double step = t.step_seconds > 0 ? t.step_seconds : 1e-9;

  // ---- memory points on the step's clock -------------------------------------------------
  struct Point {
    double seconds;
    std::array<std::int64_t, kCats> cat;
    std::int64_t total;
  };
  std::vector<Point> points;
  Point cur{0.0, {}, 0};
  for (const planner::Allocation& a : s.allocations)
    if (a.persistent) {
      cur.cat[static_cast<int>(a.category)] += a.bytes;
      cur.total += a.bytes;
    }
  points.push_back(cur);
  std::vector<int> order(s.ops.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return t.ops[a].issue_start < t.ops[b].issue_start; });
  Point peak = cur;
  int peak_op = -1;
  for (int i : order) {
    const Op& op = s.ops[i];
    if (op.allocs.empty() && op.frees.empty()) continue;
    cur.seconds = t.ops[i].issue_start;
    for (int a : op.allocs) {
      cur.cat[static_cast<int>(s.allocations[a].category)] += s.allocations[a].bytes;
      cur.total += s.allocations[a].bytes;
    }
    points.push_back(cur);
    if (cur.total > peak.total) {
      peak = cur;
      peak_op = i;
    }
    if (op.frees.empty()) continue;
    for (int a : op.frees) {
      cur.cat[static_cast<int>(s.allocations[a].category)] -= s.allocations[a].bytes;
      cur.total -= s.allocations[a].bytes;
    }
    points.push_back(cur);
  }

  auto X = [&](double seconds) { return left + pw * std::clamp(seconds / step, 0.0, 1.0); };
  // Keep per quarter pixel the highest point and the last one.
  std::vector<Point> shown;
  for (std::size_t k = 0; k < points.size();) {
    const double px = std::round(X(points[k].seconds) * 4);
    std::size_t j = k, best = k;
    while (j < points.size() && std::round(X(points[j].seconds) * 4) == px) {
      if (points[j].total > points[best].total) best = j;
      ++j;
    }
    shown.push_back(points[best]);
    if (j - 1 != best) shown.push_back(points[j - 1]);
    k = j;
  }

  double y_max_bytes = std::max<double>(1.0, static_cast<double>(peak.total) * 1.15);
  bool capacity_on_scale = false;
  if (o.capacity_bytes > 0 && o.capacity_bytes <= 2.0 * static_cast<double>(peak.total)) {
    y_max_bytes = std::max(y_max_bytes, o.capacity_bytes * 1.05);
    capacity_on_scale = true;
  }
  const double y_step_gib = nice_step(y_max_bytes / kGiB, 5);
  const double y_max_gib = std::ceil(y_max_bytes / kGiB / y_step_gib) * y_step_gib;
  auto Y = [&](double bytes) { return mem_top + mem_h - mem_h * (bytes / kGiB) / y_max_gib; };

  // ---- Gantt rows ----------------------------------------------------------------------------
  std::array<bool, planner::kStreamCount> used{};
  for (const Op& op : s.ops)
    if (op.stream != Stream::host) used[static_cast<int>(op.stream)] = true;
  std::vector<std::pair<std::string, int>> rows = {{"CPU issue", -1}};
  for (int st = 0; st < planner::kStreamCount; ++st)
    if (used[st]) rows.push_back({planner::to_string(static_cast<Stream>(st)), st});
  const double row_h = 26, gantt_top = mem_top + mem_h + 78;
  const double gantt_h = row_h * static_cast<double>(rows.size());
  // Room for the op-kind legend beside the Gantt chart (at most 11 entries).
  const double H = std::max(gantt_top + gantt_h + 70, gantt_top + 12 + 18 * 11 + 10);
  auto row_of = [&](int stream) {
    for (std::size_t r = 0; r < rows.size(); ++r)
      if (rows[r].second == stream) return static_cast<int>(r);
    return 0;
  };

  std::ostringstream svg;
  svg << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(W, 0) << "\" height=\"" << num(H, 0)
      << "\" viewBox=\"0 0 " << num(W, 0) << " " << num(H, 0) << "\" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\">\n";
  svg << "<rect x=\"0\" y=\"0\" width=\"" << num(W, 0) << "\" height=\"" << num(H, 0) << "\" fill=\"white\"/>\n";
  const std::string title = !o.title.empty() ? o.title
                                             : s.name + ": step " + human_seconds(t.step_seconds) + ", peak allocated " +
                                                   num(static_cast<double>(peak.total) / kGiB, 2) + " GiB";
  svg << "<text x=\"" << num(left, 1) << "\" y=\"26\" font-size=\"16\" font-weight=\"bold\">" << esc(title) << "</text>\n";
  svg << "<text x=\"" << num(left, 1) << "\" y=\"46\" fill=\"#444\">compute " << human_seconds(t.compute_seconds)
      << ", exposed communication " << human_seconds(t.exposed_comm_seconds) << ", optimizer "
      << human_seconds(t.optimizer_seconds) << ", other " << human_seconds(t.exposed_other_seconds);
  if (t.mfu > 0) svg << ", MFU " << num(100 * t.mfu, 1) << "%";
  svg << "</text>\n";

  // ---- time axis ticks (shared) -----------------------------------------------------------
  const double x_step = nice_step(step, 8);
  const int x_dec = decimals_for(x_step);
  auto time_axis = [&](double y_axis, double top) {
    svg << "<line x1=\"" << num(left, 1) << "\" y1=\"" << num(y_axis, 1) << "\" x2=\"" << num(left + pw, 1)
        << "\" y2=\"" << num(y_axis, 1) << "\" stroke=\"black\"/>\n";
    for (double v = 0; v <= step * (1 + 1e-9); v += x_step) {
      const double x = X(v);
      svg << "<line x1=\"" << num(x, 1) << "\" y1=\"" << num(top, 1) << "\" x2=\"" << num(x, 1) << "\" y2=\""
          << num(y_axis, 1) << "\" stroke=\"#e6e6e6\"/>\n";
      svg << "<line x1=\"" << num(x, 1) << "\" y1=\"" << num(y_axis, 1) << "\" x2=\"" << num(x, 1) << "\" y2=\""
          << num(y_axis + 5, 1) << "\" stroke=\"black\"/>\n";
      svg << "<text x=\"" << num(x, 1) << "\" y=\"" << num(y_axis + 18, 1) << "\" text-anchor=\"middle\">"
          << num(v, x_dec) << "</text>\n";
    }
    svg << "<text x=\"" << num(left + pw / 2, 1) << "\" y=\"" << num(y_axis + 36, 1)
        << "\" text-anchor=\"middle\">time (s)</text>\n";
  };

  // ---- memory panel -----------------------------------------------------------------------------
  svg << "<text x=\"" << num(left, 1) << "\" y=\"" << num(mem_top - 8, 1)
      << "\" font-weight=\"bold\">Memory allocated (PyTorch's view, at each op's CPU issue)</text>\n";
  for (double g = 0; g <= y_max_gib * (1 + 1e-9); g += y_step_gib) {
    const double y = Y(g * kGiB);
    svg << "<line x1=\"" << num(left, 1) << "\" y1=\"" << num(y, 1) << "\" x2=\"" << num(left + pw, 1) << "\" y2=\""
        << num(y, 1) << "\" stroke=\"#e6e6e6\"/>\n";
    svg << "<text x=\"" << num(left - 8, 1) << "\" y=\"" << num(y + 4, 1) << "\" text-anchor=\"end\">"
        << num(g, decimals_for(y_step_gib)) << "</text>\n";
  }
  svg << "<text transform=\"translate(" << num(left - 62, 1) << "," << num(mem_top + mem_h / 2, 1)
      << ") rotate(-90)\" text-anchor=\"middle\">allocated (GiB)</text>\n";
  // Stacked category bands as step functions.
  std::array<bool, kCats> cat_used{};
  for (const Point& p : points)
    for (int c = 0; c < kCats; ++c)
      if (p.cat[c] != 0) cat_used[c] = true;
  std::vector<std::int64_t> below(shown.size(), 0);
  for (int c = 0; c < kCats; ++c) {
    if (!cat_used[c]) continue;
    std::ostringstream top, bottom;
    std::vector<std::int64_t> above(shown.size());
    for (std::size_t k = 0; k < shown.size(); ++k) above[k] = below[k] + shown[k].cat[c];
    for (std::size_t k = 0; k < shown.size(); ++k) {
      const double x0 = X(shown[k].seconds);
      const double x1 = k + 1 < shown.size() ? X(shown[k + 1].seconds) : X(step);
      top << (k == 0 ? "M" : "L") << num(x0, 2) << "," << num(Y(static_cast<double>(above[k])), 2) << " L" << num(x1, 2)
          << "," << num(Y(static_cast<double>(above[k])), 2) << " ";
    }
    for (std::size_t kk = shown.size(); kk-- > 0;) {
      const double x0 = X(shown[kk].seconds);
      const double x1 = kk + 1 < shown.size() ? X(shown[kk + 1].seconds) : X(step);
      bottom << "L" << num(x1, 2) << "," << num(Y(static_cast<double>(below[kk])), 2) << " L" << num(x0, 2) << ","
             << num(Y(static_cast<double>(below[kk])), 2) << " ";
    }
    svg << "<path d=\"" << top.str() << bottom.str() << "Z\" fill=\"" << kCategoryColors[c]
        << "\" stroke=\"none\" opacity=\"0.9\"><title>" << planner::to_string(static_cast<MemCategory>(c))
        << "</title></path>\n";
    below = above;
  }
  // Total outline.
  {
    std::ostringstream d;
    for (std::size_t k = 0; k < shown.size(); ++k) {
      const double x0 = X(shown[k].seconds);
      const double x1 = k + 1 < shown.size() ? X(shown[k + 1].seconds) : X(step);
      d << (k == 0 ? "M" : "L") << num(x0, 2) << "," << num(Y(static_cast<double>(shown[k].total)), 2) << " L"
        << num(x1, 2) << "," << num(Y(static_cast<double>(shown[k].total)), 2) << " ";
    }
    svg << "<path d=\"" << d.str() << "\" fill=\"none\" stroke=\"black\" stroke-width=\"1\"/>\n";
  }
  svg << "<rect x=\"" << num(left, 1) << "\" y=\"" << num(mem_top, 1) << "\" width=\"" << num(pw, 1) << "\" height=\""
      << num(mem_h, 1) << "\" fill=\"none\" stroke=\"black\"/>\n";
  if (capacity_on_scale) {
    const double y = Y(o.capacity_bytes);
    svg << "<line x1=\"" << num(left, 1) << "\" y1=\"" << num(y, 1) << "\" x2=\"" << num(left + pw, 1) << "\" y2=\""
        << num(y, 1) << "\" stroke=\"#c00000\" stroke-dasharray=\"6,4\"/>\n";
    svg << "<text x=\"" << num(left + pw - 4, 1) << "\" y=\"" << num(y - 5, 1)
        << "\" text-anchor=\"end\" fill=\"#c00000\">usable GPU memory " << num(o.capacity_bytes / kGiB, 1)
        << " GiB</text>\n";
  } else if (o.capacity_bytes > 0) {
    svg << "<text x=\"" << num(left + pw - 4, 1) << "\" y=\"" << num(mem_top + 14, 1)
        << "\" text-anchor=\"end\" fill=\"#c00000\">usable GPU memory " << num(o.capacity_bytes / kGiB, 1)
        << " GiB (above this scale)</text>\n";
  }
  // The peak.
  {
    const double x = X(peak.seconds), y = Y(static_cast<double>(peak.total));
    svg << "<line x1=\"" << num(x, 1) << "\" y1=\"" << num(mem_top, 1) << "\" x2=\"" << num(x, 1) << "\" y2=\""
        << num(mem_top + mem_h, 1) << "\" stroke=\"black\" stroke-dasharray=\"3,3\"/>\n";
    svg << "<circle cx=\"" << num(x, 1) << "\" cy=\"" << num(y, 1) << "\" r=\"4\" fill=\"black\"/>\n";
    const bool flip = x > left + pw * 0.6;
    svg << "<text x=\"" << num(flip ? x - 8 : x + 8, 1) << "\" y=\"" << num(std::max(mem_top + 14, y - 8), 1)
        << "\" text-anchor=\"" << (flip ? "end" : "start") << "\" font-weight=\"bold\">peak "
        << num(static_cast<double>(peak.total) / kGiB, 2) << " GiB at " << human_seconds(peak.seconds)
        << (peak_op >= 0 ? " (" + esc(s.ops[peak_op].name) + ")" : std::string()) << "</text>\n";
  }
  time_axis(mem_top + mem_h, mem_top);

  // ---- Gantt ---------------------------------------------------------------------------------
  svg << "<text x=\"" << num(left, 1) << "\" y=\"" << num(gantt_top - 8, 1)
      << "\" font-weight=\"bold\">CPU issue thread and streams (each op from its start to its end)</text>\n";
  for (std::size_t r = 0; r < rows.size(); ++r) {
    const double y = gantt_top + row_h * static_cast<double>(r);
    svg << "<rect x=\"" << num(left, 1) << "\" y=\"" << num(y, 1) << "\" width=\"" << num(pw, 1) << "\" height=\""
        << num(row_h, 1) << "\" fill=\"" << (r % 2 ? "#fafafa" : "#f0f0f0") << "\"/>\n";
    svg << "<text x=\"" << num(left - 8, 1) << "\" y=\"" << num(y + row_h / 2 + 4, 1) << "\" text-anchor=\"end\">"
        << esc(rows[r].first) << "</text>\n";
  }
  auto bar = [&](int row, double a, double b, const char* color, const std::string& tip) {
    const double x0 = X(a), x1 = X(b);
    const double y = gantt_top + row_h * row + 3;
    svg << "<rect x=\"" << num(x0, 2) << "\" y=\"" << num(y, 1) << "\" width=\"" << num(std::max(0.6, x1 - x0), 2)
        << "\" height=\"" << num(row_h - 6, 1) << "\" fill=\"" << color << "\"><title>" << esc(tip)
        << "</title></rect>\n";
  };
  for (const Op& op : s.ops) {
    const OpTiming& ot = t.ops[op.id];
    if (ot.issue_seconds > 0)
      bar(0, ot.issue_start, ot.enqueue, kIssueColor, "issue " + op.name + ": " + human_seconds(ot.issue_seconds));
    const int row = op.stream == Stream::host ? 0 : row_of(static_cast<int>(op.stream));
    if (ot.end > ot.start || op.kind != OpKind::wait)
      bar(row, ot.start, ot.end, style_of(op.kind).color,
          op.name + ": " + human_seconds(ot.end - ot.start) + " (from " + human_seconds(ot.start) + ")");
  }
  svg << "<rect x=\"" << num(left, 1) << "\" y=\"" << num(gantt_top, 1) << "\" width=\"" << num(pw, 1)
      << "\" height=\"" << num(gantt_h, 1) << "\" fill=\"none\" stroke=\"black\"/>\n";
  time_axis(gantt_top + gantt_h, gantt_top);

  // ---- legends -------------------------------------------------------------------------------
  const double lx = left + pw + 24;
  double ly = mem_top + 4;
  svg << "<text x=\"" << num(lx, 1) << "\" y=\"" << num(ly, 1) << "\" font-weight=\"bold\">memory category</text>\n";
  ly += 8;
  for (int c = kCats - 1; c >= 0; --c) {
    if (!cat_used[c]) continue;
    svg << "<rect x=\"" << num(lx, 1) << "\" y=\"" << num(ly, 1) << "\" width=\"12\" height=\"12\" fill=\""
        << kCategoryColors[c] << "\"/>\n";
    svg << "<text x=\"" << num(lx + 18, 1) << "\" y=\"" << num(ly + 10, 1) << "\">"
        << planner::to_string(static_cast<MemCategory>(c)) << "</text>\n";
    ly += 18;
  }
  ly = gantt_top + 4;
  svg << "<text x=\"" << num(lx, 1) << "\" y=\"" << num(ly, 1) << "\" font-weight=\"bold\">op kind</text>\n";
  ly += 8;
  std::vector<std::string> seen;
  auto legend_item = [&](const char* label, const char* color) {
    if (std::find(seen.begin(), seen.end(), label) != seen.end()) return;
    seen.push_back(label);
    svg << "<rect x=\"" << num(lx, 1) << "\" y=\"" << num(ly, 1) << "\" width=\"12\" height=\"12\" fill=\"" << color
        << "\"/>\n";
    svg << "<text x=\"" << num(lx + 18, 1) << "\" y=\"" << num(ly + 10, 1) << "\">" << label << "</text>\n";
    ly += 18;
  };
  bool any_issue = false;
  for (const OpTiming& ot : t.ops) any_issue = any_issue || ot.issue_seconds > 0;
  if (any_issue) legend_item("CPU issue", kIssueColor);
  for (const Op& op : s.ops) legend_item(style_of(op.kind).label, style_of(op.kind).color);
  svg << "</svg>\n";
  return svg.str();
}

std::string timeline_svg(const Estimate& e, SvgOptions options) {
  if (options.capacity_bytes == 0) options.capacity_bytes = e.gpu_memory_bytes - e.device_overhead_bytes;
  return timeline_svg(e.plan.schedule, e.timing, options);
}

}  // namespace fsdpsim::sim
