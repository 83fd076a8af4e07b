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
    "#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#d62728", "#9467bd", "#c5b0d5", "#8c564b", "#7f7f7f", "#bcbd22"};

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
    case OpKind::all_to_all: return {"all-to-all", "#17becf"};
    case OpKind::optimizer: return {"optimizer", "#eeca3b"};
    case OpKind::h2d:
    case OpKind::d2h: return {"host <-> device", "#ff9da6"};
    case OpKind::nvme_read:
    case OpKind::nvme_write: return {"NVMe swap", "#8c6d31"};
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

// Allocated bytes, per category and in all, from `seconds` on.
struct MemoryPoint {
  double seconds;
  std::array<std::int64_t, kCats> cat;
  std::int64_t total;
};

// The memory timeline on the Gantt chart's clock (GPU time), with the memory report's values:
// the allocator's sequence (ops in CPU issue order: each op's allocations, then its frees, as
// planner::replay_memory counts them, so the peak is the report's) drawn with each op's
// allocations from when it starts on its stream and its frees from when it ends. Times are
// kept non-decreasing (an op issued later but starting earlier on another stream is drawn where
// the one before it left off). A temporary an op allocates and frees itself so spans the op's
// run, and shows.
struct MemoryCurve {
  std::vector<MemoryPoint> points;
  MemoryPoint peak;
  int peak_op = -1;
};

MemoryCurve memory_curve(const Schedule& s, const StepTiming& t) {
  MemoryCurve curve;
  MemoryPoint cur{0.0, {}, 0};
  for (const planner::Allocation& a : s.allocations)
    if (a.persistent && !planner::on_host(a.placement)) {  // device memory only
      cur.cat[static_cast<int>(a.category)] += a.bytes;
      cur.total += a.bytes;
    }
  curve.points.push_back(cur);
  curve.peak = cur;
  double clock = 0;
  for (const Op& op : s.ops) {  // issue order: ops[i].id == i
    if (op.allocs.empty() && op.frees.empty()) continue;
    const OpTiming& ot = t.ops[op.id];
    clock = std::max(clock, ot.start);
    cur.seconds = clock;
    for (int a : op.allocs) {
      if (planner::on_host(s.allocations[a].placement)) continue;
      cur.cat[static_cast<int>(s.allocations[a].category)] += s.allocations[a].bytes;
      cur.total += s.allocations[a].bytes;
    }
    curve.points.push_back(cur);
    if (cur.total > curve.peak.total) {
      curve.peak = cur;
      curve.peak_op = op.id;
    }
    if (op.frees.empty()) continue;
    clock = std::max(clock, ot.end);
    cur.seconds = clock;
    for (int a : op.frees) {
      if (planner::on_host(s.allocations[a].placement)) continue;
      cur.cat[static_cast<int>(s.allocations[a].category)] -= s.allocations[a].bytes;
      cur.total -= s.allocations[a].bytes;
    }
    curve.points.push_back(cur);
  }
  return curve;
}

// Entries of the op-kind legend: the CPU issue (when issuing takes time) and each op kind's label.
int op_legend_entries(const Schedule& s, const StepTiming& t) {
  std::vector<std::string> labels;
  for (const OpTiming& ot : t.ops)
    if (ot.issue_seconds > 0) {
      labels.push_back("CPU issue");
      break;
    }
  for (const Op& op : s.ops)
    if (std::find(labels.begin(), labels.end(), style_of(op.kind).label) == labels.end()) labels.push_back(style_of(op.kind).label);
  return static_cast<int>(labels.size());
}

// The Gantt chart's rows: the CPU issue thread (-1), then every stream some op uses (host ops
// draw on the CPU row).
std::vector<std::pair<std::string, int>> gantt_rows(const Schedule& s) {
  std::array<bool, planner::kStreamCount> used{};
  for (const Op& op : s.ops)
    if (op.stream != Stream::host) used[static_cast<int>(op.stream)] = true;
  std::vector<std::pair<std::string, int>> rows = {{"CPU issue", -1}};
  for (int st = 0; st < planner::kStreamCount; ++st)
    if (used[st]) rows.push_back({planner::to_string(static_cast<Stream>(st)), st});
  return rows;
}

// One drawing: the layout (pixels) is fixed by the constructor, then draw() writes the panels
// top to bottom, each on the shared time axis.
class TimelineSvg {
 public:
  TimelineSvg(const Schedule& s, const StepTiming& t, const SvgOptions& o);
  std::string draw();

 private:
  double X(double seconds) const { return left_ + pw_ * std::clamp(seconds / step_, 0.0, 1.0); }
  double Y(double bytes) const { return mem_top_ + mem_h_ - mem_h_ * (bytes / kGiB) / y_max_gib_; }
  int row_of(int stream) const;
  void thin_to_quarter_pixels();
  void choose_memory_scale();

  void title();
  void time_axis(double y_axis, double top);
  void memory_panel();
  void memory_grid();
  void category_bands();
  void total_outline();
  void capacity_line();
  void peak_marker();
  void gantt_panel();
  void bar(int row, double a, double b, const char* color, const std::string& tip);
  void legends();

  const Schedule& s_;
  const StepTiming& t_;
  const SvgOptions& o_;
  // Layout: a plot `pw_` wide from `left_`, the legends to its right; the memory panel, then the
  // Gantt chart `gantt_h_` high (one `row_h_` per row) below it.
  const double W_, left_ = 116, right_legend_ = 230, pw_, mem_top_ = 84, mem_h_ = 250;
  const double step_;  // seconds the time axis spans
  const MemoryCurve curve_;
  std::vector<MemoryPoint> shown_;  // what is drawn: per quarter pixel the highest point and the last
  std::array<bool, kCats> cat_used_{};
  double y_max_gib_ = 0, y_step_gib_ = 0;
  bool capacity_on_scale_ = false;
  const std::vector<std::pair<std::string, int>> rows_;
  const double row_h_ = 26, gantt_top_, gantt_h_, H_;
  std::ostringstream svg_;
};

TimelineSvg::TimelineSvg(const Schedule& s, const StepTiming& t, const SvgOptions& o)
    : s_(s),
      t_(t),
      o_(o),
      W_(std::max(600.0, o.width)),
      pw_(W_ - left_ - right_legend_),
      step_(t.step_seconds > 0 ? t.step_seconds : 1e-9),
      curve_(memory_curve(s, t)),
      rows_(gantt_rows(s)),
      gantt_top_(mem_top_ + mem_h_ + 78),
      gantt_h_(row_h_ * static_cast<double>(rows_.size())),
      // Room for the op-kind legend beside the Gantt chart, as long as it is (no blank band below).
      H_(std::max(gantt_top_ + gantt_h_ + 52, gantt_top_ + 12 + 18 * op_legend_entries(s, t) + 6)) {
  thin_to_quarter_pixels();
  choose_memory_scale();
  for (const MemoryPoint& p : curve_.points)
    for (int c = 0; c < kCats; ++c)
      if (p.cat[c] != 0) cat_used_[c] = true;
}

// Thousands of points would draw on the same pixels: per quarter pixel keep the highest point
// (the peak stays visible) and the last one (where the curve goes on from).
void TimelineSvg::thin_to_quarter_pixels() {
  const std::vector<MemoryPoint>& points = curve_.points;
  for (std::size_t k = 0; k < points.size();) {
    const double px = std::round(X(points[k].seconds) * 4);
    std::size_t j = k, best = k;
    while (j < points.size() && std::round(X(points[j].seconds) * 4) == px) {
      if (points[j].total > points[best].total) best = j;
      ++j;
    }
    shown_.push_back(points[best]);
    if (j - 1 != best) shown_.push_back(points[j - 1]);
    k = j;
  }
}

// The GiB axis: 15% above the peak, stretched to the usable GPU memory when that is within twice
// the peak (else the line would squash the curve), rounded up to a nice tick step.
void TimelineSvg::choose_memory_scale() {
  const double peak = static_cast<double>(curve_.peak.total);
  double y_max_bytes = std::max<double>(1.0, peak * 1.15);
  if (o_.capacity_bytes > 0 && o_.capacity_bytes <= 2.0 * peak) {
    y_max_bytes = std::max(y_max_bytes, o_.capacity_bytes * 1.05);
    capacity_on_scale_ = true;
  }
  y_step_gib_ = nice_step(y_max_bytes / kGiB, 5);
  y_max_gib_ = std::ceil(y_max_bytes / kGiB / y_step_gib_) * y_step_gib_;
}

int TimelineSvg::row_of(int stream) const {
  for (std::size_t r = 0; r < rows_.size(); ++r)
    if (rows_[r].second == stream) return static_cast<int>(r);
  return 0;
}

std::string TimelineSvg::draw() {
  svg_ << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n";
  svg_ << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << num(W_, 0) << "\" height=\"" << num(H_, 0)
       << "\" viewBox=\"0 0 " << num(W_, 0) << " " << num(H_, 0) << "\" font-family=\"DejaVu Sans, Arial, sans-serif\" font-size=\"12\">\n";
  svg_ << "<rect x=\"0\" y=\"0\" width=\"" << num(W_, 0) << "\" height=\"" << num(H_, 0) << "\" fill=\"white\"/>\n";
  title();
  memory_panel();
  gantt_panel();
  legends();
  svg_ << "</svg>\n";
  return svg_.str();
}

// The options' title or the schedule's name, step time and peak; below it the step's breakdown.
void TimelineSvg::title() {
  const std::string title = !o_.title.empty() ? o_.title
                                              : s_.name + ": step " + human_seconds(t_.step_seconds) +
                                                    ", peak allocated " +
                                                    num(static_cast<double>(curve_.peak.total) / kGiB, 2) + " GiB";
  svg_ << "<text x=\"" << num(left_, 1) << "\" y=\"26\" font-size=\"16\" font-weight=\"bold\">" << esc(title) << "</text>\n";
  svg_ << "<text x=\"" << num(left_, 1) << "\" y=\"46\" fill=\"#444\">compute " << human_seconds(t_.compute_seconds)
       << ", exposed communication " << human_seconds(t_.exposed_comm_seconds) << ", optimizer "
       << human_seconds(t_.optimizer_seconds) << ", other " << human_seconds(t_.exposed_other_seconds);
  if (t_.mfu > 0) svg_ << ", MFU " << num(100 * t_.mfu, 1) << "%";
  svg_ << "</text>\n";
}

// The time axis under a panel whose plot spans `top` to `y_axis`: grid lines, ticks, seconds.
void TimelineSvg::time_axis(double y_axis, double top) {
  const double x_step = nice_step(step_, 8);
  const int x_dec = decimals_for(x_step);
  svg_ << "<line x1=\"" << num(left_, 1) << "\" y1=\"" << num(y_axis, 1) << "\" x2=\"" << num(left_ + pw_, 1)
       << "\" y2=\"" << num(y_axis, 1) << "\" stroke=\"black\"/>\n";
  for (double v = 0; v <= step_ * (1 + 1e-9); v += x_step) {
    const double x = X(v);
    svg_ << "<line x1=\"" << num(x, 1) << "\" y1=\"" << num(top, 1) << "\" x2=\"" << num(x, 1) << "\" y2=\""
         << num(y_axis, 1) << "\" stroke=\"#e6e6e6\"/>\n";
    svg_ << "<line x1=\"" << num(x, 1) << "\" y1=\"" << num(y_axis, 1) << "\" x2=\"" << num(x, 1) << "\" y2=\""
         << num(y_axis + 5, 1) << "\" stroke=\"black\"/>\n";
    svg_ << "<text x=\"" << num(x, 1) << "\" y=\"" << num(y_axis + 18, 1) << "\" text-anchor=\"middle\">"
         << num(v, x_dec) << "</text>\n";
  }
  svg_ << "<text x=\"" << num(left_ + pw_ / 2, 1) << "\" y=\"" << num(y_axis + 36, 1)
       << "\" text-anchor=\"middle\">time (s)</text>\n";
}

void TimelineSvg::memory_panel() {
  svg_ << "<text x=\"" << num(left_, 1) << "\" y=\"" << num(mem_top_ - 8, 1)
       << "\" font-weight=\"bold\">Memory allocated (the replay's, on the streams' clock: an op's allocations from its "
         "start, its frees from its end)</text>\n";
  memory_grid();
  category_bands();
  total_outline();
  svg_ << "<rect x=\"" << num(left_, 1) << "\" y=\"" << num(mem_top_, 1) << "\" width=\"" << num(pw_, 1)
       << "\" height=\"" << num(mem_h_, 1) << "\" fill=\"none\" stroke=\"black\"/>\n";
  capacity_line();
  peak_marker();
  time_axis(mem_top_ + mem_h_, mem_top_);
}

void TimelineSvg::memory_grid() {
  for (double g = 0; g <= y_max_gib_ * (1 + 1e-9); g += y_step_gib_) {
    const double y = Y(g * kGiB);
    svg_ << "<line x1=\"" << num(left_, 1) << "\" y1=\"" << num(y, 1) << "\" x2=\"" << num(left_ + pw_, 1)
         << "\" y2=\"" << num(y, 1) << "\" stroke=\"#e6e6e6\"/>\n";
    svg_ << "<text x=\"" << num(left_ - 8, 1) << "\" y=\"" << num(y + 4, 1) << "\" text-anchor=\"end\">"
         << num(g, decimals_for(y_step_gib_)) << "</text>\n";
  }
  svg_ << "<text transform=\"translate(" << num(left_ - 62, 1) << "," << num(mem_top_ + mem_h_ / 2, 1)
       << ") rotate(-90)\" text-anchor=\"middle\">allocated (GiB)</text>\n";
}

// Stacked category bands as step functions: each band's top edge left to right, then the band
// below's top edge right to left.
void TimelineSvg::category_bands() {
  std::vector<std::int64_t> below(shown_.size(), 0);
  for (int c = 0; c < kCats; ++c) {
    if (!cat_used_[c]) continue;
    std::ostringstream top, bottom;
    std::vector<std::int64_t> above(shown_.size());
    for (std::size_t k = 0; k < shown_.size(); ++k) above[k] = below[k] + shown_[k].cat[c];
    for (std::size_t k = 0; k < shown_.size(); ++k) {
      const double x0 = X(shown_[k].seconds);
      const double x1 = k + 1 < shown_.size() ? X(shown_[k + 1].seconds) : X(step_);
      top << (k == 0 ? "M" : "L") << num(x0, 2) << "," << num(Y(static_cast<double>(above[k])), 2) << " L" << num(x1, 2)
          << "," << num(Y(static_cast<double>(above[k])), 2) << " ";
    }
    for (std::size_t kk = shown_.size(); kk-- > 0;) {
      const double x0 = X(shown_[kk].seconds);
      const double x1 = kk + 1 < shown_.size() ? X(shown_[kk + 1].seconds) : X(step_);
      bottom << "L" << num(x1, 2) << "," << num(Y(static_cast<double>(below[kk])), 2) << " L" << num(x0, 2) << ","
             << num(Y(static_cast<double>(below[kk])), 2) << " ";
    }
    svg_ << "<path d=\"" << top.str() << bottom.str() << "Z\" fill=\"" << kCategoryColors[c]
         << "\" stroke=\"none\" opacity=\"0.9\"><title>" << esc(planner::to_string(static_cast<MemCategory>(c)))
         << "</title></path>\n";
    below = above;
  }
}

void TimelineSvg::total_outline() {
  std::ostringstream d;
  for (std::size_t k = 0; k < shown_.size(); ++k) {
    const double x0 = X(shown_[k].seconds);
    const double x1 = k + 1 < shown_.size() ? X(shown_[k + 1].seconds) : X(step_);
    d << (k == 0 ? "M" : "L") << num(x0, 2) << "," << num(Y(static_cast<double>(shown_[k].total)), 2) << " L"
      << num(x1, 2) << "," << num(Y(static_cast<double>(shown_[k].total)), 2) << " ";
  }
  svg_ << "<path d=\"" << d.str() << "\" fill=\"none\" stroke=\"black\" stroke-width=\"1\"/>\n";
}

// The usable GPU memory: a dashed line where it is on the scale, else a label saying it is above.
void TimelineSvg::capacity_line() {
  if (capacity_on_scale_) {
    const double y = Y(o_.capacity_bytes);
    svg_ << "<line x1=\"" << num(left_, 1) << "\" y1=\"" << num(y, 1) << "\" x2=\"" << num(left_ + pw_, 1)
         << "\" y2=\"" << num(y, 1) << "\" stroke=\"#c00000\" stroke-dasharray=\"6,4\"/>\n";
    svg_ << "<text x=\"" << num(left_ + pw_ - 4, 1) << "\" y=\"" << num(y - 5, 1)
         << "\" text-anchor=\"end\" fill=\"#c00000\">usable GPU memory " << num(o_.capacity_bytes / kGiB, 1)
         << " GiB</text>\n";
  } else if (o_.capacity_bytes > 0) {
    svg_ << "<text x=\"" << num(left_ + pw_ - 4, 1) << "\" y=\"" << num(mem_top_ + 14, 1)
         << "\" text-anchor=\"end\" fill=\"#c00000\">usable GPU memory " << num(o_.capacity_bytes / kGiB, 1)
         << " GiB (above this scale)</text>\n";
  }
}

// The peak: a dashed vertical, a dot, and its size, time and op (the label flips to the left in
// the right part of the plot so that it stays inside).
void TimelineSvg::peak_marker() {
  const MemoryPoint& peak = curve_.peak;
  const double x = X(peak.seconds), y = Y(static_cast<double>(peak.total));
  svg_ << "<line x1=\"" << num(x, 1) << "\" y1=\"" << num(mem_top_, 1) << "\" x2=\"" << num(x, 1) << "\" y2=\""
       << num(mem_top_ + mem_h_, 1) << "\" stroke=\"black\" stroke-dasharray=\"3,3\"/>\n";
  svg_ << "<circle cx=\"" << num(x, 1) << "\" cy=\"" << num(y, 1) << "\" r=\"4\" fill=\"black\"/>\n";
  const bool flip = x > left_ + pw_ * 0.6;
  svg_ << "<text x=\"" << num(flip ? x - 8 : x + 8, 1) << "\" y=\"" << num(std::max(mem_top_ + 14, y - 8), 1)
       << "\" text-anchor=\"" << (flip ? "end" : "start") << "\" font-weight=\"bold\">peak "
       << num(static_cast<double>(peak.total) / kGiB, 2) << " GiB at " << human_seconds(peak.seconds)
       << (curve_.peak_op >= 0 ? " (" + esc(s_.ops[curve_.peak_op].name) + ")" : std::string()) << "</text>\n";
}

// One row per stream under the CPU issue thread's; every op a bar from its start to its end (its
// CPU issue, when it takes time, a bar on the CPU row).
void TimelineSvg::gantt_panel() {
  svg_ << "<text x=\"" << num(left_, 1) << "\" y=\"" << num(gantt_top_ - 8, 1)
       << "\" font-weight=\"bold\">CPU issue thread and streams (each op from its start to its end)</text>\n";
  for (std::size_t r = 0; r < rows_.size(); ++r) {
    const double y = gantt_top_ + row_h_ * static_cast<double>(r);
    svg_ << "<rect x=\"" << num(left_, 1) << "\" y=\"" << num(y, 1) << "\" width=\"" << num(pw_, 1) << "\" height=\""
         << num(row_h_, 1) << "\" fill=\"" << (r % 2 ? "#fafafa" : "#f0f0f0") << "\"/>\n";
    svg_ << "<text x=\"" << num(left_ - 8, 1) << "\" y=\"" << num(y + row_h_ / 2 + 4, 1) << "\" text-anchor=\"end\">"
         << esc(rows_[r].first) << "</text>\n";
  }
  for (const Op& op : s_.ops) {
    const OpTiming& ot = t_.ops[op.id];
    if (ot.issue_seconds > 0)
      bar(0, ot.issue_start, ot.issue_start + ot.issue_seconds, kIssueColor,
          "issue " + op.name + ": " + human_seconds(ot.issue_seconds));
    const int row = op.stream == Stream::host ? 0 : row_of(static_cast<int>(op.stream));
    if (ot.end > ot.start || op.kind != OpKind::wait)
      bar(row, ot.start, ot.end, style_of(op.kind).color,
          op.name + ": " + human_seconds(ot.end - ot.start) + " (from " + human_seconds(ot.start) + ")");
  }
  svg_ << "<rect x=\"" << num(left_, 1) << "\" y=\"" << num(gantt_top_, 1) << "\" width=\"" << num(pw_, 1)
       << "\" height=\"" << num(gantt_h_, 1) << "\" fill=\"none\" stroke=\"black\"/>\n";
  time_axis(gantt_top_ + gantt_h_, gantt_top_);
}

// A bar at least 0.6 px wide (a short op stays visible) with a tooltip.
void TimelineSvg::bar(int row, double a, double b, const char* color, const std::string& tip) {
  const double x0 = X(a), x1 = X(b);
  const double y = gantt_top_ + row_h_ * row + 3;
  svg_ << "<rect x=\"" << num(x0, 2) << "\" y=\"" << num(y, 1) << "\" width=\"" << num(std::max(0.6, x1 - x0), 2)
       << "\" height=\"" << num(row_h_ - 6, 1) << "\" fill=\"" << color << "\"><title>" << esc(tip)
       << "</title></rect>\n";
}

// Beside the memory panel the categories drawn (top band first); beside the Gantt chart the op
// kinds in order of first appearance.
void TimelineSvg::legends() {
  const double lx = left_ + pw_ + 24;
  double ly = mem_top_ + 4;
  svg_ << "<text x=\"" << num(lx, 1) << "\" y=\"" << num(ly, 1) << "\" font-weight=\"bold\">memory category</text>\n";
  ly += 8;
  for (int c = kCats - 1; c >= 0; --c) {
    if (!cat_used_[c]) continue;
    svg_ << "<rect x=\"" << num(lx, 1) << "\" y=\"" << num(ly, 1) << "\" width=\"12\" height=\"12\" fill=\""
         << kCategoryColors[c] << "\"/>\n";
    svg_ << "<text x=\"" << num(lx + 18, 1) << "\" y=\"" << num(ly + 10, 1) << "\">"
         << esc(planner::to_string(static_cast<MemCategory>(c))) << "</text>\n";
    ly += 18;
  }
  ly = gantt_top_ + 4;
  svg_ << "<text x=\"" << num(lx, 1) << "\" y=\"" << num(ly, 1) << "\" font-weight=\"bold\">op kind</text>\n";
  ly += 8;
  std::vector<std::string> seen;
  auto legend_item = [&](const char* label, const char* color) {
    if (std::find(seen.begin(), seen.end(), label) != seen.end()) return;
    seen.push_back(label);
    svg_ << "<rect x=\"" << num(lx, 1) << "\" y=\"" << num(ly, 1) << "\" width=\"12\" height=\"12\" fill=\"" << color
         << "\"/>\n";
    svg_ << "<text x=\"" << num(lx + 18, 1) << "\" y=\"" << num(ly + 10, 1) << "\">" << esc(label) << "</text>\n";
    ly += 18;
  };
  bool any_issue = false;
  for (const OpTiming& ot : t_.ops) any_issue = any_issue || ot.issue_seconds > 0;
  if (any_issue) legend_item("CPU issue", kIssueColor);
  for (const Op& op : s_.ops) legend_item(style_of(op.kind).label, style_of(op.kind).color);
}

}  // namespace

std::string timeline_svg(const Schedule& s, const StepTiming& t, const SvgOptions& o) {
  return TimelineSvg(s, t, o).draw();
}

std::string timeline_svg(const Estimate& e, SvgOptions options) {
  if (options.capacity_bytes == 0) options.capacity_bytes = e.gpu_memory_bytes - e.device_overhead_bytes;
  return timeline_svg(e.plan.schedule, e.timing, options);
}

}  // namespace fsdpsim::sim
