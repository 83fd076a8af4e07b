// `fsdpsim sweep`: many configurations at once over the analytic engine (a thread pool),
// ranked, with the Pareto front of memory vs throughput and a recommendation; or, with
// --wrap-search, the optimal wrapping of one configuration (sim/wrap_search.h).
//
// The top points can be re-simulated with SimGrid (--resimulate-top K): planned and priced in
// this process, each simulation in the SimGrid engine's own forked child
// (sim::simgrid_resimulator; SimGrid keeps one engine per process).
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <mutex>
#include <set>
#include <sstream>
#include <unistd.h>

#include "models/json_input.h"
#include "planner/catalog.h"
#include "planner/device_memory.h"
#include "planner/sweep_space.h"
#include "runtime/launch.h"
#include "sim/resource_guard.h"
#include "sim/scenario_loader.h"
#include "sim/sweep.h"
#include "sim/wrap_search.h"
#include "tools/commands.h"
#include "tools/format.h"
#include "tools/option_checks.h"
#include "tools/output_file.h"
#include "tools/scenario_input.h"


namespace fsdpsim::tools {

void add_sweep_command(CLI::App& app);

namespace {

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
// Ranks are 32-bit (sim/sweep.h); past that a sweep is refused whatever its budget.
constexpr std::size_t kMaxPoints = 4'294'967'295;

struct SweepOptionsCli {
  ScenarioInputOptions input;  // --scenario or the one-line form, the shorthands and --set
  std::string sweep_file;
  std::vector<std::string> axes;
  double headroom_gib = 0;
  std::string objective = "throughput";
  double tolerance = 0.01;
  int top = 10;
  std::string csv;
  bool json = false;
  int threads = 0;
  bool progress = false;
  int resimulate_top = 0;
  // --wrap-search
  bool wrap_search = false;
  std::string wrap_objective = "exposed_comm";
  int wrap_candidates = 8;
  int wrap_max_unit = 0;
  int wrap_local_search = 300;
  bool brute_force = false;
  // The resource guard (sim/resource_guard.h).
  double max_memory_gib = -1;
  double max_seconds = -1;
  bool estimate_cost = false;
  // Distributed sweeps (docs/sweep.md): this process's shard "i/N", or the shard files to merge.
  std::string shard;
  std::vector<std::string> merge;
  // Which options the command line gave (the sweep file fills the others).
  CLI::Option* headroom_opt = nullptr;
  CLI::Option* objective_opt = nullptr;
  CLI::Option* tolerance_opt = nullptr;
  CLI::Option* top_opt = nullptr;
};

// ---- Ctrl-C -------------------------------------------------------------------------------

std::atomic<bool> g_interrupted{false};

extern "C" void on_sigint(int) {
  g_interrupted.store(true);
  std::signal(SIGINT, SIG_DFL);  // a second Ctrl-C ends the process
}

// ---- progress -----------------------------------------------------------------------------

class Progress {
 public:
  Progress(bool enabled, bool tty) : enabled_(enabled), tty_(tty), start_(std::chrono::steady_clock::now()) {}
  void update(std::size_t done, std::size_t total) {
    if (!enabled_) return;
    const auto now = std::chrono::steady_clock::now();
    std::lock_guard<std::mutex> lock(mutex_);
    const double since = std::chrono::duration<double>(now - last_).count();
    if (done < total && since < (tty_ ? 0.1 : 2.0)) return;
    last_ = now;
    const double elapsed = std::chrono::duration<double>(now - start_).count();
    const double fraction = total ? static_cast<double>(done) / static_cast<double>(total) : 1.0;
    const double eta = done ? elapsed * (static_cast<double>(total - done) / static_cast<double>(done)) : 0;
    constexpr int kWidth = 30;
    const int filled = static_cast<int>(fraction * kWidth);
    char line[256];
    std::snprintf(line, sizeof line, "[%s%s] %zu/%zu %3.0f%%  %.1f s elapsed, ETA %.1f s  ",
                  std::string(filled, '#').c_str(), std::string(kWidth - filled, '.').c_str(), done, total,
                  100 * fraction, elapsed, eta);
    std::cerr << (tty_ ? "\r" : "") << line << (tty_ ? "" : "\n") << std::flush;
    drawn_ = true;
  }
  void finish() {
    if (enabled_ && drawn_ && tty_) std::cerr << "\n" << std::flush;
  }

 private:
  bool enabled_, tty_, drawn_ = false;
  std::chrono::steady_clock::time_point start_, last_{};
  std::mutex mutex_;
};

// ---- output ---------------------------------------------------------------------------------

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string csv_field(const std::string& s) {
  if (s.find_first_of(",\"\n") == std::string::npos) return s;
  std::string q = "\"";
  for (char c : s) q += c == '"' ? std::string("\"\"") : std::string(1, c);
  return q + "\"";
}

std::string shell_quote(const std::string& s) {
  if (s.find_first_of(" \"'{}[]*$;&|<>()\\") == std::string::npos) return s;
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string set_args(const std::vector<std::string>& overrides) {
  std::string out;
  for (const std::string& o : overrides) out += " --set " + shell_quote(o);
  return out;
}

nlohmann::json metrics_json(const sim::PointMetrics& m) {
  return {{"memory",
           {{"peak_allocated_bytes", m.peak_allocated_bytes},
            {"peak_reserved_bytes", m.peak_reserved_bytes},
            {"model_state_bytes", m.model_state_bytes},
            {"device_overhead_bytes", m.device_overhead_bytes},
            {"device_peak_bytes", m.device_peak_bytes},
            {"gpu_memory_bytes", m.gpu_memory_bytes},
            {"allocator_retries", m.allocator_retries}}},
          {"time",
           {{"step_seconds", m.step_seconds},
            {"compute_seconds", m.compute_seconds},
            {"exposed_comm_seconds", m.exposed_comm_seconds},
            {"optimizer_seconds", m.optimizer_seconds}}},
          {"throughput", {{"tokens_per_second_per_gpu", m.tokens_per_second_per_gpu}, {"mfu", m.mfu}}},
          {"units", m.units}};
}

// ---- every point, streamed ------------------------------------------------------------------
// The CSV and the JSON's "points" list every point. The sweep keeps only the report's points
// (sim/sweep.h), so each point is written to a side file as the sweep finishes it, without
// what is known only at the end (its rank, whether it is on the Pareto front, its
// re-simulation); a last pass copies the side file to the output adding those.

// A side file in `dir`, unlinked as soon as it is open: it goes away with the process however
// that ends (a kill included).
class SideFile {
 public:
  explicit SideFile(const std::string& dir) {
    std::string path = (dir.empty() ? std::string("/tmp") : dir) + "/.fsdpsim_sweep_XXXXXX";
    const int fd = ::mkstemp(path.data());
    if (fd < 0) throw InputError(path, "", "cannot create a temporary file beside the output");
    ::close(fd);
    file_.open(path, std::ios::in | std::ios::out | std::ios::binary | std::ios::trunc);
    ::unlink(path.c_str());
    if (!file_) throw InputError(path, "", "cannot open a temporary file beside the output");
  }
  std::ostream& out() { return file_; }
  // Back to the start for the last pass.
  std::istream& reopen() {
    file_.flush();
    if (!file_) throw InputError("", "", "cannot write the sweep's temporary file (is the disk full?)");
    file_.seekg(0);
    return file_;
  }

 private:
  std::fstream file_;
};

std::string directory_of(const std::string& path) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  return dir.empty() ? "." : dir;
}

std::string temporary_directory() {
  const char* tmp = std::getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

std::string csv_number(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

std::string whole_bytes(double v) { return std::to_string(std::llround(v)); }

// --csv FILE: `index`, the axes, status, reason, the metrics, then rank, pareto and the
// re-simulation (docs/sweep.md).
class CsvPoints {
 public:
  CsvPoints(const std::string& path, const planner::SweepSpace& space)
      : path_(path), space_(space), side_(directory_of(path)) {
    check_writable(path, "the CSV file");  // an unwritable path fails before the sweep runs
  }

  // The row up to `units`. Records are length-prefixed: a quoted reason may hold newlines.
  void add(const sim::PointResult& p) {
    std::string row = std::to_string(p.index);
    for (std::size_t k = 0; k < space_.axes.size(); ++k) row += "," + csv_field(space_.axes[k].values[p.choice[k]].label);
    row += "," + sim::to_string(p.status) + "," + csv_field(p.reason);
    if (p.status == sim::PointStatus::ok) {
      const sim::PointMetrics& m = p.metrics;
      // Bytes as whole numbers, as the other byte columns (the overhead made them doubles).
      row += std::string(",") + (p.fits ? "true" : "false") + "," + (p.near_capacity ? "true" : "false") + "," +
             whole_bytes(m.device_peak_bytes) + "," + std::to_string(m.peak_reserved_bytes) + "," +
             std::to_string(m.peak_allocated_bytes) + "," + whole_bytes(std::max(0.0, p.overage_bytes)) + "," +
             csv_number(m.step_seconds) + "," +
             csv_number(m.tokens_per_second_per_gpu) + "," + csv_number(m.mfu) + "," +
             csv_number(m.exposed_comm_seconds) + "," + csv_number(m.compute_seconds) + "," + std::to_string(m.units);
    } else {
      row += ",,,,,,,,,,,,";
    }
    side_.out() << row.size() << "\n" << row;
  }

  void finish(const sim::SweepResult& r) {
    std::istream& in = side_.reopen();
    std::ofstream out(path_, std::ios::trunc);
    if (!out) throw InputError(path_, "", "cannot write the CSV file");
    out << "index";
    for (const planner::Axis& a : r.space.axes) out << "," << csv_field(a.key);
    out << ",status,reason,fits,near_capacity,device_peak_bytes,peak_reserved_bytes,peak_allocated_bytes,overage_bytes,step_seconds,"
           "tokens_per_second_per_gpu,mfu,exposed_comm_seconds,compute_seconds,units,rank,pareto,"
           "resimulated_step_seconds,resimulated_tokens_per_second_per_gpu,resimulated_mfu\n";
    std::string row;
    std::size_t length = 0;
    for (std::size_t i = 0; in >> length && in.get() == '\n'; ++i) {
      row.resize(length);
      in.read(row.data(), static_cast<std::streamsize>(length));
      out << row;
      const std::size_t rank = r.rank_of(i);
      if (rank > 0) out << "," << rank << "," << (r.on_pareto_front(i) ? "true" : "false");
      else out << ",,";
      const auto kept = r.points.find(i);
      if (kept != r.points.end() && kept->second.resimulated) {
        const sim::PointMetrics& m = *kept->second.resimulated;
        out << "," << csv_number(m.step_seconds) << "," << csv_number(m.tokens_per_second_per_gpu) << ","
            << csv_number(m.mfu);
      } else {
        out << ",,,";
      }
      out << "\n";
    }
    if (!out.flush()) throw InputError(path_, "", "cannot write the CSV file (is the disk full?)");
  }

 private:
  std::string path_;
  const planner::SweepSpace& space_;
  SideFile side_;
};

// --json: the points of `points`, one compact object per line of the side file.
class JsonPoints {
 public:
  explicit JsonPoints(const planner::SweepSpace& space) : space_(space), side_(temporary_directory()) {}

  void add(const sim::PointResult& p) {
    nlohmann::json values = nlohmann::json::object();
    for (std::size_t k = 0; k < space_.axes.size(); ++k)
      values[space_.axes[k].key] = space_.axes[k].values[p.choice[k]].label;
    nlohmann::json pj = {{"index", p.index}, {"label", p.label}, {"values", values}, {"overrides", p.overrides},
                         {"status", sim::to_string(p.status)}};
    if (p.status != sim::PointStatus::ok) {
      pj["reason"] = p.reason;
    } else {
      pj.update(metrics_json(p.metrics));
      pj["fits"] = p.fits;
      pj["near_capacity"] = p.near_capacity;
      pj["overage_bytes"] = std::max(0.0, p.overage_bytes);
    }
    side_.out() << pj.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }

  // The array, as nlohmann's dump(2) prints it at `depth` (each element on its own lines).
  void write_array(std::ostream& out, const sim::SweepResult& r, int depth) {
    std::istream& in = side_.reopen();
    const std::string pad(2 * depth, ' ');
    std::string line;
    bool first = true;
    for (std::size_t i = 0; std::getline(in, line); ++i) {
      nlohmann::json pj = nlohmann::json::parse(line);
      if (const std::size_t rank = r.rank_of(i); rank > 0) {
        pj["rank"] = rank;
        pj["pareto"] = r.on_pareto_front(i);
      }
      const auto kept = r.points.find(i);
      if (kept != r.points.end()) {
        if (kept->second.resimulated) pj["resimulated"] = metrics_json(*kept->second.resimulated);
        if (!kept->second.resimulation_note.empty()) pj["resimulation_note"] = kept->second.resimulation_note;
      }
      out << (first ? "[\n" : ",\n") << pad << "  " << indent(pj.dump(2), pad + "  ");
      first = false;
    }
    out << (first ? "[]" : "\n" + pad + "]");
  }

 private:
  static std::string indent(const std::string& text, const std::string& pad) {
    std::string out;
    for (char c : text) {
      out += c;
      if (c == '\n') out += pad;
    }
    return out;
  }

  const planner::SweepSpace& space_;
  SideFile side_;
};

// The whole ranking (every evaluated point, best first) from the points' ranks.
void write_ranking(std::ostream& out, const sim::SweepResult& r, int depth) {
  std::vector<std::uint32_t> order(r.evaluated);
  for (std::size_t i = 0; i < r.ranks.size(); ++i)
    if (r.ranks[i] > 0 && r.ranks[i] <= order.size()) order[r.ranks[i] - 1] = static_cast<std::uint32_t>(i);
  const std::string pad(2 * depth, ' ');
  if (order.empty()) {
    out << "[]";
    return;
  }
  out << "[";
  for (std::size_t k = 0; k < order.size(); ++k) out << (k ? ",\n" : "\n") << pad << "  " << order[k];
  out << "\n" << pad << "]";
}

// The JSON report; `points` lists every point (streamed) and `ranking` every evaluated one.
void write_sweep_json(std::ostream& out, const sim::SweepResult& r, const planner::ScenarioTemplate& base,
                      JsonPoints& points) {
  nlohmann::json j;
  j["scenario"] = base.file();
  j["base_overrides"] = base.base_overrides();
  nlohmann::json axes = nlohmann::json::array();
  for (const planner::Axis& a : r.space.axes) {
    nlohmann::json values = nlohmann::json::array();
    for (const planner::AxisValue& v : a.values) values.push_back({{"label", v.label}, {"overrides", v.overrides}});
    axes.push_back({{"key", a.key}, {"values", values}});
  }
  j["axes"] = axes;
  j["objective"] = sim::to_string(r.objective);
  j["headroom_bytes"] = r.headroom_bytes;
  j["threads"] = r.threads;
  j["wall_seconds"] = r.wall_seconds;
  j["interrupted"] = r.interrupted;
  j["counts"] = {{"points", r.total}, {"evaluated", r.evaluated}, {"skipped", r.skipped},
                 {"failed", r.failed}, {"fitting", r.fitting}};
  const std::string kPoints = "\x01points\x01", kRanking = "\x01ranking\x01";
  j["points"] = kPoints;
  j["ranking"] = kRanking;
  j["pareto"] = r.pareto;
  j["resimulated_ranking"] = r.resimulated_ranking;
  if (r.recommendation.found) {
    const sim::PointResult& p = r.point(r.recommendation.point);
    j["recommendation"] = {{"point", p.index}, {"label", p.label}, {"overrides", p.overrides}, {"why", r.recommendation.why}};
  } else {
    j["recommendation"] = nullptr;
  }
  if (r.smallest_overage) {
    const sim::PointResult& p = r.point(*r.smallest_overage);
    j["smallest_overage"] = {{"point", p.index}, {"label", p.label}, {"overage_bytes", p.overage_bytes}};
  } else {
    j["smallest_overage"] = nullptr;
  }
  // The report with the two long lists spliced in where their placeholders print.
  const std::string text = j.dump(2);
  const std::string points_mark = nlohmann::json(kPoints).dump(), ranking_mark = nlohmann::json(kRanking).dump();
  std::size_t at = 0;
  while (at < text.size()) {
    const std::size_t p = text.find(points_mark, at), q = text.find(ranking_mark, at);
    const std::size_t next = std::min(p, q);
    out << text.substr(at, next == std::string::npos ? std::string::npos : next - at);
    if (next == std::string::npos) break;
    if (next == p) points.write_array(out, r, 1);
    else write_ranking(out, r, 1);
    at = next + (next == p ? points_mark.size() : ranking_mark.size());
  }
  out << "\n";
}

std::vector<std::string> axis_cells(const sim::SweepResult& r, const sim::PointResult& p) {
  std::vector<std::string> cells;
  for (std::size_t k = 0; k < r.space.axes.size(); ++k) cells.push_back(r.space.axes[k].values[p.choice[k]].label);
  return cells;
}

std::vector<std::string> header_with_axes(const sim::SweepResult& r, std::vector<std::string> before,
                                          const std::vector<std::string>& after) {
  for (const planner::Axis& a : r.space.axes) before.push_back(a.key);
  before.insert(before.end(), after.begin(), after.end());
  return before;
}

// The sweep's base scenario: where it comes from and how to run one of its points.
struct SweepBase {
  std::string file;            // the scenario file, the sweep file (inline scenario) or planner::kCommandLineFile
  nlohmann::json inline_doc;   // the scenario document when it is not read from `file`
  std::vector<std::string> overrides;  // the one-line form's shape, the sweep file's "set", the command line's
  std::size_t form_overrides = 0;      // of `overrides`, the one-line form's own (--gpus stands for them)
  // What `fsdpsim estimate` is given to run a point ("--scenario FILE" or "--model .. --gpus .."); empty
  // for a sweep file's inline scenario, which no command line names.
  std::string run_source;
};

// Which scenario the sweep runs on: the command line's (a file or the one-line form), else the
// sweep file's. The sweep file's "set" comes after the one-line form's shape and before the
// command line's shorthands and --set.
SweepBase resolve_sweep_base(const SweepOptionsCli& o, const std::optional<planner::SweepFile>& f) {
  SweepBase b;
  std::vector<std::string> file_sets = f ? f->overrides : std::vector<std::string>{};
  if (names_a_scenario(o.input)) {
    ScenarioInput in = resolve_scenario_input(o.input);
    b.file = in.file;
    b.form_overrides = in.form_overrides;
    b.overrides.assign(in.overrides.begin(), in.overrides.begin() + static_cast<std::ptrdiff_t>(in.form_overrides));
    b.overrides.insert(b.overrides.end(), file_sets.begin(), file_sets.end());
    b.overrides.insert(b.overrides.end(), in.overrides.begin() + static_cast<std::ptrdiff_t>(in.form_overrides),
                       in.overrides.end());
    if (in.file == planner::kCommandLineFile) {
      b.inline_doc = std::move(in.document);
      b.run_source = "--model " + shell_quote(o.input.model);
      if (!o.input.cluster.empty()) b.run_source += " --cluster " + shell_quote(o.input.cluster);
      if (!o.input.gpus.empty()) b.run_source += " --gpus " + shell_quote(o.input.gpus);
    } else {
      b.run_source = "--scenario " + shell_quote(in.file);
    }
    return b;
  }
  if (!f) throw InputError::option("--scenario", "no scenario: give --scenario FILE, or --model NAME --gpus 64xH100");
  if (f->scenario.empty() && f->scenario_inline.is_null())
    throw InputError(o.sweep_file, "scenario",
                     "no scenario: give --scenario FILE, or --model NAME --gpus 64xH100 (or \"scenario\" in the sweep file)");
  b.overrides = file_sets;
  const std::vector<std::string> command_line = command_line_overrides(o.input);
  b.overrides.insert(b.overrides.end(), command_line.begin(), command_line.end());
  if (!f->scenario_inline.is_null()) {
    b.file = o.sweep_file;
    b.inline_doc = f->scenario_inline;
  } else {
    b.file = f->scenario;
    b.run_source = "--scenario " + shell_quote(f->scenario);
  }
  return b;
}

// The file errors about the sweep as a whole name.
std::string sweep_error_file(const SweepOptionsCli& o, const SweepBase& b) {
  return o.sweep_file.empty() ? b.file : o.sweep_file;
}

// " --headroom-gib G" for a sweep judged with headroom, so that the run: line's estimate judges its
// fit the same way; "" without.
std::string headroom_arg(double headroom_bytes) {
  if (!(headroom_bytes > 0)) return "";
  char buf[64];
  std::snprintf(buf, sizeof buf, " --headroom-gib %.15g", headroom_bytes / kGiB);
  return buf;
}

std::string sweep_text(const sim::SweepResult& r, const planner::ScenarioTemplate& base, int top, const SweepBase& from) {
  std::ostringstream out;
  const planner::Scenario& sc = base.base();
  const double gpu = sc.cluster.gpu.memory_bytes;
  out << "Sweep of " << sc.model->name << " (" << fixed(sc.model->parameter_count() / 1e9, 2) << "B params) on "
      << sc.world_size() << " x " << sc.cluster.gpu.name << " (" << sc.cluster.nodes << " x " << sc.cluster.gpus_per_node
      << "): " << r.total << " point" << (r.total == 1 ? "" : "s") << " over " << r.space.axes.size()
      << " ax" << (r.space.axes.size() == 1 ? "is" : "es") << "\n";
  out << "evaluated " << r.evaluated << ", skipped " << r.skipped << " (invalid combinations), failed " << r.failed
      << "; " << r.threads << " thread" << (r.threads == 1 ? "" : "s") << ", " << seconds_text(r.wall_seconds) << " ("
      << fixed(r.wall_seconds > 0 ? static_cast<double>(r.evaluated + r.skipped + r.failed) / r.wall_seconds : 0, 0)
      << " points/s)\n";
  // A cluster (or GPU) axis gives points GPUs of other sizes: each is judged by its own.
  const bool gpu_varies = r.space.gpu_varies();
  out << "fits: device peak (reserved + CUDA/NCCL overhead) + headroom " << gib(r.headroom_bytes) << " <= "
      << (gpu_varies ? "the point's GPU memory (the base's " + gib(gpu) + ")" : "GPU " + gib(gpu)) << "; "
      << r.fitting << " of " << r.evaluated << " fit";
  if (r.fitting_near_capacity > 0)
    out << ", " << r.fitting_near_capacity << " of them only near capacity (within the reserved model's "
        << static_cast<int>(planner::kReservedModelTolerance * 100)
        << "% tolerance of the GPU, or by freeing the allocator's cache: not recommended while another fits)";
  out << "\n";
  if (r.interrupted)
    out << "INTERRUPTED: " << (r.evaluated + r.skipped + r.failed) << " of " << r.total
        << " points done; the results below cover those\n";

  auto metric_cells = [&](const sim::PointResult& p) {
    const sim::PointMetrics& m = p.metrics;
    return std::vector<std::string>{p.fits ? (p.near_capacity ? "near capacity" : "yes") : "no (+" + gib(p.overage_bytes) + ")",
                                    gib(m.device_peak_bytes),
                                    seconds_text(m.step_seconds),
                                    fixed(m.tokens_per_second_per_gpu, 0),
                                    percent(m.mfu),
                                    seconds_text(m.exposed_comm_seconds)};
  };
  const std::vector<std::string> metric_header = {"fits", "device peak", "step", "tokens/s/GPU", "MFU", "exposed comm"};
  if (!r.ranking.empty()) {
    const std::string by = r.objective == sim::Objective::throughput ? "tokens/s/GPU"
                         : r.objective == sim::Objective::step_time  ? "step time"
                                                                     : "device peak memory";
    out << "\nRanked by " << by << ", those that fit first (top " << std::min<std::size_t>(top, r.ranking.size())
        << " of " << r.evaluated << ")\n";
    Table t(header_with_axes(r, {"rank", "#"}, metric_header));
    for (std::size_t k = 0; k < r.ranking.size() && k < static_cast<std::size_t>(top); ++k) {
      const sim::PointResult& p = r.point(r.ranking[k]);
      std::vector<std::string> row = {std::to_string(k + 1), std::to_string(p.index)};
      for (auto& c : axis_cells(r, p)) row.push_back(c);
      for (auto& c : metric_cells(p)) row.push_back(c);
      t.add(row);
    }
    out << t.str();
  }
  if (!r.pareto.empty()) {
    out << "\nPareto front: device peak memory vs tokens/s/GPU (" << (r.fitting ? "points that fit" : "all points; none fits")
        << ", memory ascending)\n";
    Table t(header_with_axes(r, {"#", "rank"}, {"device peak", "tokens/s/GPU", "MFU"}));
    for (std::size_t i : r.pareto) {
      const sim::PointResult& p = r.point(i);
      std::vector<std::string> row = {std::to_string(p.index), std::to_string(r.rank_of(p.index))};
      for (auto& c : axis_cells(r, p)) row.push_back(c);
      row.push_back(gib(p.metrics.device_peak_bytes));
      row.push_back(fixed(p.metrics.tokens_per_second_per_gpu, 0));
      row.push_back(percent(p.metrics.mfu));
      t.add(row);
    }
    out << t.str();
  }
  if (!r.resimulated_ranking.empty()) {
    out << "\nTop " << r.resimulated_ranking.size() << " re-simulated with SimGrid\n";
    Table t(header_with_axes(r, {"#"}, {"analytic step", "SimGrid step", "SimGrid tokens/s/GPU", "SimGrid MFU"}));
    for (std::size_t i : r.resimulated_ranking) {
      const sim::PointResult& p = r.point(i);
      std::vector<std::string> row = {std::to_string(p.index)};
      for (auto& c : axis_cells(r, p)) row.push_back(c);
      row.push_back(seconds_text(p.metrics.step_seconds));
      row.push_back(seconds_text(p.resimulated->step_seconds));
      row.push_back(fixed(p.resimulated->tokens_per_second_per_gpu, 0));
      row.push_back(percent(p.resimulated->mfu));
      t.add(row);
    }
    out << t.str();
  } else {
    for (const auto& [index, p] : r.points)
      if (!p.resimulation_note.empty()) {
        out << "\n" << p.resimulation_note << "\n";
        break;
      }
  }

  out << "\n";
  if (r.recommendation.found) {
    const sim::PointResult& p = r.point(r.recommendation.point);
    out << "Recommended: #" << p.index << (p.label.empty() ? " (the base scenario)" : " " + p.label) << "\n";
    out << "  why: " << r.recommendation.why << "\n";
    const std::vector<std::string> user_sets(base.base_overrides().begin() + static_cast<std::ptrdiff_t>(from.form_overrides),
                                             base.base_overrides().end());
    if (from.run_source.empty())
      out << "  on the sweep file's scenario:" << set_args(user_sets) << set_args(p.overrides) << "\n";
    else
      out << "  run: fsdpsim estimate " << from.run_source << set_args(user_sets) << set_args(p.overrides)
          << headroom_arg(r.headroom_bytes) << "\n";
  } else if (r.smallest_overage) {
    out << sim::no_fit_message(r) << "\n";
    out << "  try: more GPUs (--set cluster.nodes=...), activation checkpointing, a smaller micro-batch, FULL_SHARD, or "
           "CPU offload\n";
  } else {
    out << "No configuration was evaluated.\n";
  }

  const std::size_t bad = r.skipped + r.failed;
  if (bad > 0) {
    out << "\nSkipped or failed (" << bad << ")\n";
    for (std::size_t i : r.not_evaluated) {
      const sim::PointResult& p = r.point(i);
      out << "  #" << p.index << (p.label.empty() ? "" : " " + p.label) << ": "
          << (p.status == sim::PointStatus::failed ? "failed: " : "") << p.reason << "\n";
    }
    if (bad > r.not_evaluated.size())
      out << "  ... and " << bad - r.not_evaluated.size() << " more (--csv or --json lists them all)\n";
  }
  return out.str();
}

// ---- wrap search ----------------------------------------------------------------------------

nlohmann::json candidate_json(const sim::WrapCandidate& c) {
  nlohmann::json j = {{"partition", c.partition},
                      {"units", sim::partition_text(c.partition)},
                      {"model", {{"objective_seconds", c.model_objective_seconds},
                                 {"exposed_comm_seconds", c.model_exposed_seconds},
                                 {"step_seconds", c.model_step_seconds},
                                 {"device_peak_bytes", c.model_peak_bytes},
                                 {"fits", c.model_fits}}}};
  if (c.engine) {
    nlohmann::json e = metrics_json(*c.engine);
    e["fits"] = c.engine_fits;
    e["objective_seconds"] = c.engine_objective_seconds;
    j["engine"] = e;
  }
  return j;
}

void run_wrap_search(const SweepOptionsCli& o, const SweepBase& from, double headroom_bytes) {
  const std::string& scenario_file = from.file;
  const std::vector<std::string>& overrides = from.overrides;
  const planner::Scenario sc = from.inline_doc.is_null()
                                   ? sim::load_scenario(scenario_file, overrides)
                                   : planner::parse_scenario(from.inline_doc, scenario_file, overrides);
  sim::WrapSearchOptions w;
  if (o.wrap_objective == "step_time") w.objective = sim::WrapObjective::step_time;
  else if (o.wrap_objective == "exposed_comm") w.objective = sim::WrapObjective::exposed_comm;
  else throw InputError::option("--wrap-objective", "expected exposed_comm or step_time, got \"" + o.wrap_objective + "\"");
  w.headroom_bytes = headroom_bytes;
  w.candidates = std::max(1, o.wrap_candidates);
  w.max_blocks_per_unit = o.wrap_max_unit;
  w.local_search = std::max(0, o.wrap_local_search);
  const sim::WrapSearchResult r = sim::search_wrapping(sc, w);
  std::optional<sim::BruteForceResult> bf;
  if (o.brute_force) {
    if (r.blocks.size() > 14)
      throw InputError::option("--brute-force", "the model has " + std::to_string(r.blocks.size()) +
                                                " blocks: 2^" + std::to_string(r.blocks.size() - 1) +
                                                " wrappings are too many to time with the engine (at most 14 blocks)");
    bf = sim::brute_force_wrapping(sc, w, true);
  }
  const auto same = [](const sim::WrapCandidate& a, const sim::WrapCandidate& b) {
    return std::abs(a.engine_objective_seconds - b.engine_objective_seconds) <=
           1e-9 * std::max(std::abs(a.engine_objective_seconds), std::abs(b.engine_objective_seconds));
  };
  if (o.json) {
    nlohmann::json j;
    j["scenario"] = scenario_file;
    j["overrides"] = overrides;
    j["objective"] = sim::to_string(w.objective);
    j["headroom_bytes"] = headroom_bytes;
    j["blocks"] = r.blocks;
    j["dp"] = {{"states", r.dp_states}, {"seconds", r.dp_seconds}, {"build_seconds", r.build_seconds},
               {"model_found_fit", r.model_found_fit}};
    nlohmann::json cands = nlohmann::json::array();
    for (const auto& c : r.candidates) cands.push_back(candidate_json(c));
    j["candidates"] = cands;
    j["dp_choice"] = r.dp_choice;
    j["per_block"] = candidate_json(r.per_block);
    j["found"] = r.found;
    j["best"] = candidate_json(r.best);
    j["best_from"] = r.best_from;
    j["wrap"] = r.wrap;
    j["engine_evaluations"] = r.engine_evaluations;
    j["refine_seconds"] = r.refine_seconds;
    if (bf) {
      const auto& all = bf->all;
      j["brute_force"] = {
          {"partitions", all.size()},
          {"model_best", bf->model_best >= 0 ? candidate_json(all[bf->model_best]) : nlohmann::json(nullptr)},
          {"engine_best", bf->engine_best >= 0 ? candidate_json(all[bf->engine_best]) : nlohmann::json(nullptr)},
          {"model_rank_of_engine_best", bf->model_rank_of_engine_best},
          {"search_equals_engine_best", bf->engine_best >= 0 && r.found && same(r.best, all[bf->engine_best])}};
    }
    std::cout << j.dump(2) << "\n";
    return;
  }
  std::ostringstream out;
  out << "Wrapping search for " << sc.model->name << " on " << sc.world_size() << " x " << sc.cluster.gpu.name << ": "
      << r.blocks.size() << " blocks (" << r.blocks.front() << " ... " << r.blocks.back() << "), objective "
      << sim::to_string(w.objective) << ", fits: device peak + " << gib(headroom_bytes) << " <= "
      << gib(sc.cluster.gpu.memory_bytes) << "\n";
  out << "dynamic program: " << r.dp_states << " states, " << seconds_text(r.dp_seconds) << " (model built in "
      << seconds_text(r.build_seconds) << "); " << r.engine_evaluations << " engine evaluations in "
      << seconds_text(r.refine_seconds) << "\n";
  if (!r.model_found_fit) out << "the model finds no wrapping that fits; the candidates below ignore memory\n";
  Table t({"", "units (blocks each)", "model exposed", "model peak", "exposed comm", "step", "device peak", "fits"});
  auto row = [&](const std::string& name, const sim::WrapCandidate& c) {
    std::string units = sim::partition_text(c.partition);
    if (units.size() > 48) units = units.substr(0, 45) + "...";
    t.add({name, units, seconds_text(c.model_exposed_seconds), gib(c.model_peak_bytes),
           seconds_text(c.engine->exposed_comm_seconds), seconds_text(c.engine->step_seconds),
           gib(c.engine->device_peak_bytes), c.engine_fits ? "yes" : "no"});
  };
  for (std::size_t i = 0; i < r.candidates.size(); ++i)
    row("DP " + std::to_string(i + 1) + (static_cast<int>(i) == r.dp_choice ? " *" : ""), r.candidates[i]);
  row("per block", r.per_block);
  row("best", r.best);
  out << t.str();
  out << "(model: the separable cost the DP optimises; the rest: full planner + analytic engine; * the engine's best "
         "of the DP's candidates)\n";
  if (r.found) {
    out << "\nbest wrapping (from the " << r.best_from << "): " << sim::partition_text(r.best.partition) << " = "
        << r.best.partition.size() << " units; exposed communication " << seconds_text(r.best.engine->exposed_comm_seconds)
        << " vs " << seconds_text(r.per_block.engine->exposed_comm_seconds) << " with one unit per block, step "
        << seconds_text(r.best.engine->step_seconds) << " vs " << seconds_text(r.per_block.engine->step_seconds) << "\n";
    out << "  --set " << shell_quote("fsdp.wrap=" + r.wrap.dump()) << "\n";
  } else {
    out << "\nno wrapping found that fits in GPU memory with " << gib(headroom_bytes) << " headroom\n";
  }
  if (bf) {
    const auto& all = bf->all;
    out << "\nBrute force over all " << all.size() << " wrappings (full planner + engine each):\n";
    if (bf->engine_best >= 0) {
      const auto& eb = all[bf->engine_best];
      out << "  engine's best: " << sim::partition_text(eb.partition) << ", " << seconds_text(eb.engine_objective_seconds)
          << "; the search's best " << (r.found && same(r.best, eb) ? "equals it" : "differs") << "\n";
      out << "  in the model's order the engine's best is #" << bf->model_rank_of_engine_best + 1
          << " (1 = the DP's first choice)\n";
    } else {
      out << "  no wrapping fits by the engine\n";
    }
    if (bf->model_best >= 0)
      out << "  the model's best: " << sim::partition_text(all[bf->model_best].partition) << " (model "
          << seconds_text(all[bf->model_best].model_objective_seconds) << ", the DP's first: "
          << (r.candidates.empty() ? std::string("none")
                                   : seconds_text(r.candidates.front().model_objective_seconds))
          << ")\n";
  }
  std::cout << out.str();
}

// ---- distributed sweeps -----------------------------------------------------------------------
// A shard file (`sweep --shard i/N`, and what each mpirun process sends to process 0): a header
// line (JSON: the format, the shard, the sweep's points and fingerprint), one record per point
// of the shard in point order (sim::point_record), and a trailer line (JSON: the shard's
// threads and wall time). A file without its trailer is a shard that did not finish.

constexpr const char* kShardFormat = "fsdpsim-sweep-shard-1";

// What must be equal for shards to belong to one sweep: the scenario (its path and the
// documents read from it and its references: an edit between two shards' runs made a merged
// recommendation no sweep gives, the session-30 audit), the base overrides and the axes (FNV-1a
// over their text). Files an axis value names (model=...) are read per point, not hashed. The
// headroom, objective, tolerance and top are the merge's own: they rank the points, they do not
// change them.
std::string sweep_fingerprint(const planner::ScenarioTemplate& base, const planner::SweepSpace& space) {
  std::uint64_t h = 1469598103934665603ULL;
  auto add = [&h](const std::string& text) {
    for (unsigned char c : text) h = (h ^ c) * 1099511628211ULL;
    h = (h ^ 0xff) * 1099511628211ULL;  // a separator no text holds
  };
  add(base.file());
  add(base.documents_text());
  for (const std::string& o : base.base_overrides()) add("set " + o);
  for (const planner::Axis& a : space.axes) {
    add("axis " + a.key);
    for (const planner::AxisValue& v : a.values) {
      add("value " + v.label);
      for (const std::string& o : v.overrides) add(o);
    }
  }
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

std::string shard_header(const sim::Shard& shard, std::size_t points, const std::string& fingerprint) {
  return nlohmann::json{{"format", kShardFormat},
                        {"shard", std::to_string(shard.index) + "/" + std::to_string(shard.count)},
                        {"points", points},
                        {"sweep", fingerprint}}
             .dump();
}

std::string shard_trailer(const sim::SweepResult& r) {
  char wall[48];
  std::snprintf(wall, sizeof wall, "%a", r.wall_seconds);
  return nlohmann::json{{"end", true}, {"threads", r.threads}, {"wall_seconds", wall}, {"interrupted", r.interrupted}}
      .dump();
}

// One line of a shard file (its header or its trailer) as JSON, through the one JSON reader
// (models/json_input.h): nesting past kMaxJsonDepth, a key twice and numbers past a double are
// refused like any input file's, naming the file, the JSON path and the line.
nlohmann::json parse_shard_line(const std::string& line, const std::string& file, std::size_t line_number,
                                const char* what) {
  try {
    return parse_json_text(line, file);
  } catch (const InputError& e) {
    // The text after "FILE: PATH: " is what was expected; the line is the file's, not 1.
    std::string expected = e.what();
    const std::string prefix = file + ": " + (e.json_path().empty() ? "" : e.json_path() + ": ");
    if (expected.rfind(prefix, 0) == 0) expected = expected.substr(prefix.size());
    const std::string line_one = "at line 1, column";
    const auto at = expected.find(line_one);
    if (at != std::string::npos)  // a syntax error says where it is: at the file's line
      expected.replace(at, line_one.size(), "at line " + std::to_string(line_number) + ", column");
    throw InputError(file, e.json_path(),
                     expected + (at != std::string::npos ? " (" : " (line " + std::to_string(line_number) + ", ") +
                         "the shard's " + what + ")");
  }
}

// Reads shard files back, each in its shard's point order.
class ShardReader {
 public:
  ShardReader(std::string name, std::unique_ptr<std::istream> in) : name_(std::move(name)), in_(std::move(in)) {}
  const std::string& name() const { return name_; }

  sim::Shard read_header(std::size_t points, const std::string& fingerprint) {
    std::string line;
    if (!next_line(line)) throw InputError(name_, "", "empty: not a sweep shard file");
    if (line.empty() || line.front() != '{')
      throw InputError(name_, "", "not a sweep shard file (its first line is not the shard's JSON header)");
    const nlohmann::json h = parse_shard_line(line, name_, line_number_, "header");
    if (!h.is_object() || !h.contains("format") || h["format"] != kShardFormat)
      throw InputError(name_, "format", std::string("expected \"") + kShardFormat + "\": not a sweep shard file");
    JsonReader r(h, name_);
    r.string("format");
    const std::string sweep = r.string("sweep");
    const std::int64_t count = r.integer("points");
    const std::string shard = r.string("shard");
    r.finish();
    if (sweep != fingerprint || count < 0 || static_cast<std::uint64_t>(count) != points)
      throw InputError(name_, "sweep",
                       "a shard of another sweep: merge with the scenario, --set and axes the shards ran with "
                       "(and the files as they were then: the scenario or a file it references changed since)");
    try {
      return sim::parse_shard(shard);
    } catch (const std::invalid_argument& e) {
      throw InputError(name_, "shard", e.what());
    }
  }

  sim::PointResult next_point(std::size_t expected, const planner::SweepSpace& space) {
    std::string line;
    if (!next_line(line) || line.rfind("p ", 0) != 0)
      throw InputError(name_, "", "ends before point " + std::to_string(expected) +
                                      " (the shard did not finish: run it again)");
    try {
      sim::PointResult p = sim::parse_point_record(line, space);
      if (p.index != expected)
        throw std::invalid_argument("point " + std::to_string(p.index) + " where point " + std::to_string(expected) +
                                    " was due");
      return p;
    } catch (const std::invalid_argument& e) {
      throw InputError(name_, "", std::string(e.what()) + " (line " + std::to_string(line_number_) + ")");
    }
  }

  // The trailer: (threads, wall seconds).
  std::pair<int, double> read_trailer() {
    std::string line;
    if (!next_line(line) || line.empty() || line.front() != '{')
      throw InputError(name_, "", "has no trailer after its points (the shard did not finish: run it again)");
    const nlohmann::json t = parse_shard_line(line, name_, line_number_, "trailer");
    if (!t.is_object() || !t.contains("end") || t["end"] != true)
      throw InputError(name_, "", "has no trailer after its points (the shard did not finish: run it again)");
    JsonReader r(t, name_);
    r.boolean_or("end", false);
    r.boolean_or("interrupted", false);
    const int threads = r.int_in_or("threads", 1, 1 << 20, 1);
    const std::string wall_text = r.string_or("wall_seconds", "0");
    r.finish();
    char* end = nullptr;
    const double wall = std::strtod(wall_text.c_str(), &end);
    if (wall_text.empty() || *end != '\0' || !std::isfinite(wall) || wall < 0)
      r.fail("wall_seconds", "expected a finite, non-negative number of seconds (as %a writes it), got \"" +
                                 wall_text + "\"");
    return {threads, wall};
  }

 private:
  bool next_line(std::string& line) {
    if (!std::getline(*in_, line)) return false;
    ++line_number_;
    return true;
  }

  std::string name_;
  std::unique_ptr<std::istream> in_;
  std::size_t line_number_ = 0;
};

// Merges the shards (every one of 0..N-1 once) into one result, the sinks fed in point order.
// Its threads: every shard's together; its wall time: the slowest shard's.
sim::SweepResult merge_shards(std::vector<ShardReader>& readers, const planner::SweepSpace& space,
                              const std::string& fingerprint, sim::SweepOptions options) {
  const std::size_t n = space.size();
  std::vector<ShardReader*> by_index;
  for (ShardReader& r : readers) {
    const sim::Shard shard = r.read_header(n, fingerprint);
    if (by_index.empty()) by_index.assign(shard.count, nullptr);
    if (shard.count != by_index.size())
      throw InputError(r.name(), "shard", "a shard of " + std::to_string(shard.count) + " where the first file said " +
                                              std::to_string(by_index.size()));
    if (by_index[shard.index])
      throw InputError(r.name(), "shard", "shard " + std::to_string(shard.index) + " given twice (also " +
                                              by_index[shard.index]->name() + ")");
    by_index[shard.index] = &r;
  }
  for (std::size_t i = 0; i < by_index.size(); ++i)
    if (!by_index[i])
      throw InputError::option("--merge", "shard " + std::to_string(i) + "/" + std::to_string(by_index.size()) +
                                              " is missing: give every shard's file");
  std::size_t i = 0;
  sim::SweepResult result = sim::merge_sweep(space, options, [&]() -> std::optional<sim::PointResult> {
    if (i >= n) return std::nullopt;
    const std::size_t index = i++;
    return by_index[index % by_index.size()]->next_point(index, space);
  });
  int threads = 0;
  double wall = 0;
  for (ShardReader* r : by_index) {
    const auto [t, w] = r->read_trailer();
    threads += t;
    wall = std::max(wall, w);
  }
  result.threads = threads;
  result.wall_seconds = wall;
  return result;
}

// ---- resource guard ---------------------------------------------------------------------------

// Estimates the sweep's memory and time (a sample of its points timed) and refuses to start
// past the budget; --estimate-cost prints the estimate instead.
// Returns the points its sample evaluated, for the sweep to take (SweepOptions::evaluated).
std::shared_ptr<const std::map<std::size_t, sim::PointResult>> guard_sweep(
    const SweepOptionsCli& o, const std::shared_ptr<const planner::ScenarioTemplate>& base,
    const planner::SweepSpace& space, const sim::SweepOptions& so) {
  const std::size_t n = space.size();
  // Small sweeps take a second or less: their memory is estimated, their time is not sampled.
  sim::SweepCost cost = sim::estimate_sweep_cost(base, space, so, n > 256 ? 1.0 : 0.0);
  if (so.shard.count > 1) {  // this process evaluates its shard alone
    cost.seconds *= static_cast<double>(so.shard.points(n)) / static_cast<double>(std::max<std::size_t>(n, 1));
    cost.time_basis += ", shard " + std::to_string(so.shard.index) + "/" + std::to_string(so.shard.count) + " of them";
  }
  const sim::ResourceEstimate expected{cost.memory_bytes, cost.seconds, cost.memory_basis, cost.time_basis};
  if (o.estimate_cost) {
    std::cout << "sweep would take about " << sim::duration_text(cost.seconds) << " and "
              << sim::bytes_text(cost.memory_bytes) << " of memory: " << cost.time_basis << "; " << cost.memory_basis
              << "\n";
    return nullptr;
  }
  const sim::ResourceBudget budget = sim::budget_from_options(o.max_memory_gib, o.max_seconds);
  if (const std::string over = sim::over_budget(expected, budget); !over.empty())
    throw InputError(o.sweep_file.empty() ? base->file() : o.sweep_file, "",
                     "not swept: it would need " + over +
                         ". To go further: raise --max-time (seconds; 0: no limit) or --max-memory (GiB); run fewer "
                         "points at a time (fix an axis with --set and run each of its values); or more --threads "
                         "on a machine with more cores. Ctrl-C stops a sweep and reports the points done");
  if (cost.seconds > 30)
    std::cerr << "sweep: " << n << " points, expected to take about " << sim::duration_text(cost.seconds) << " and "
              << sim::bytes_text(cost.memory_bytes) << " of memory (" << cost.time_basis << ")\n";
  return cost.sampled_points;
}

// `sweep --shard i/N`: the shard's points to stdout as a shard file (for `sweep --merge`).
void run_shard(const std::shared_ptr<const planner::ScenarioTemplate>& base, const planner::SweepSpace& space,
               sim::SweepOptions so, const std::string& fingerprint) {
  std::cout << shard_header(so.shard, space.size(), fingerprint) << "\n";
  so.sink = [](const sim::PointResult& p) { std::cout << sim::point_record(p) << "\n"; };
  g_interrupted.store(false);
  so.cancel = &g_interrupted;
  auto previous = std::signal(SIGINT, on_sigint);
  const sim::SweepResult result = sim::run_sweep(base, space, so);
  std::signal(SIGINT, previous == SIG_ERR ? SIG_DFL : previous);
  std::cout << shard_trailer(result) << "\n" << std::flush;
  if (!std::cout) throw InputError("", "", "cannot write the shard's points (is the disk full?)");
  if (result.interrupted) {
    std::cerr << "interrupted: the shard's file lists the points not done; --merge reports them as not run\n";
    std::exit(130);
  }
}

// Under mpirun / srun: this process evaluates its shard (so.shard) into memory; process 0
// gathers every shard and merges them into `result` (true); the others return false. An error
// in any process ends them all (a process left waiting in the gather would hang).
bool run_mpi_share(const std::shared_ptr<const planner::ScenarioTemplate>& base, const planner::SweepSpace& space,
                   sim::SweepOptions so, const std::string& fingerprint, const runtime::Launch& launch,
                   sim::SweepResult& result) {
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> texts;
  try {
    std::string text = shard_header(so.shard, space.size(), fingerprint) + "\n";
    sim::SweepOptions mine = so;
    mine.sink = [&text](const sim::PointResult& p) { text += sim::point_record(p) + "\n"; };
    mine.progress = nullptr;
    const sim::SweepResult part = sim::run_sweep(base, space, mine);
    text += shard_trailer(part) + "\n";
    texts = runtime::gather_text_on_process0(text, launch);
    if (launch.process_rank != 0) return false;
    std::vector<ShardReader> readers;
    for (std::size_t i = 0; i < texts.size(); ++i)
      readers.emplace_back("process " + std::to_string(i) + "'s shard", std::make_unique<std::istringstream>(std::move(texts[i])));
    result = merge_shards(readers, space, fingerprint, so);
  } catch (const std::exception& e) {
    runtime::end_all_processes(e.what(), 1);
  }
  // The sweep's wall time: process 0's, from its start to the merged result.
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return true;
}

// ---- the sweep ------------------------------------------------------------------------------

void run_sweep_command(const SweepOptionsCli& o) {
  std::vector<planner::AxisSpec> specs;
  double headroom_gib = o.headroom_gib;
  std::string objective = o.objective;
  double tolerance = o.tolerance;
  int top = o.top;
  std::optional<planner::SweepFile> file;
  if (!o.sweep_file.empty()) {
    file = planner::load_sweep_file(o.sweep_file);
    const planner::SweepFile& f = *file;
    specs = f.axes;
    if (f.headroom_gib && !o.headroom_opt->count()) headroom_gib = *f.headroom_gib;
    if (f.objective && !o.objective_opt->count()) objective = *f.objective;
    if (f.tolerance && !o.tolerance_opt->count()) tolerance = *f.tolerance;
    if (f.top && !o.top_opt->count()) top = *f.top;
  }
  const SweepBase from = resolve_sweep_base(o, file);
  for (const std::string& a : o.axes) specs.push_back(planner::parse_axis_spec(a));
  // The sweep file's headroom is checked where it is read (planner/sweep_space.cpp); this
  // guards the sum of both sources.
  if (!(headroom_gib >= 0) || !(headroom_gib <= planner::kMaxHeadroomGiB))
    throw InputError::option("--headroom-gib", "expected a number of GiB from 0 to 1048576 (a pebibyte)");
  const double headroom_bytes = headroom_gib * kGiB;

  if (o.wrap_search) {
    if (!specs.empty())
      throw InputError::option("--wrap-search", "searches the wrapping of one configuration: drop the axes (use --set)");
    if (!o.shard.empty() || !o.merge.empty())
      throw InputError::option("--wrap-search", "runs in one process: drop --shard and --merge");
    // The resource guard sizes sweeps of points; the wrap search times a bounded number of
    // candidate wrappings (--wrap-candidates) and has no estimate to print: it ran in full.
    if (o.estimate_cost)
      throw InputError::option("--estimate-cost", "estimates a sweep's points, not the wrap search's: drop it");
    run_wrap_search(o, from, headroom_bytes);
    return;
  }

  const auto base = from.inline_doc.is_null() ? planner::ScenarioTemplate::load(from.file, from.overrides)
                                              : planner::ScenarioTemplate::from_json(from.inline_doc, from.file, from.overrides);
  sim::simgrid_options(base->base());  // the "simulation" object is checked as every command checks it
  const planner::SweepSpace space = planner::make_space(specs, base->context());
  const std::size_t n = space.size();
  if (n > kMaxPoints)
    throw InputError(sweep_error_file(o, from), "axes", "the sweep has " + (n == SIZE_MAX ? std::string("too many") : std::to_string(n)) +
                                               " points; at most " + std::to_string(kMaxPoints) +
                                               " (split it: fix one axis with --set and run each value)");
  sim::SweepOptions so;
  so.threads = o.threads;
  so.headroom_bytes = headroom_bytes;
  try {
    so.objective = sim::parse_objective(objective);
  } catch (const std::invalid_argument& e) {
    throw InputError::option("--objective", e.what());
  }
  so.tolerance = tolerance;
  so.keep_top = static_cast<std::size_t>(std::max({top, o.resimulate_top, 1}));
  // Ranks of every point: the CSV's and JSON's `rank`, and the Pareto table's (16 bytes a point).
  so.rank_every_point = true;

  // Which part of the sweep this process does: its --shard, the --merge of shards, its share
  // under mpirun / srun (process 0 merges), or all of it.
  const bool merging = !o.merge.empty();
  if (!o.shard.empty() || merging) {
    const std::string option = merging ? "--merge" : "--shard";
    if (!o.shard.empty() && merging) throw InputError::option("--merge", "merges shards: drop --shard");
    if (o.estimate_cost && merging) throw InputError::option("--merge", "evaluates nothing: drop --estimate-cost");
    if (!o.shard.empty() && (o.json || !o.csv.empty() || o.resimulate_top > 0))
      throw InputError::option("--shard", "writes the shard's points for --merge: give --json, --csv and "
                                          "--resimulate-top to the merge");
  }
  if (!o.shard.empty()) {
    try {
      so.shard = sim::parse_shard(o.shard);
    } catch (const std::invalid_argument& e) {
      throw InputError::option("--shard", e.what());
    }
  }
  runtime::Launch launch;
  if (o.shard.empty() && !merging) {
    try {
      launch = runtime::resolve_launch("auto");
    } catch (const std::invalid_argument& e) {
      throw InputError::option("sweep", e.what());
    }
    if (launch.mpi())
      so.shard = sim::Shard{static_cast<std::size_t>(launch.process_rank), static_cast<std::size_t>(launch.processes)};
  }
  const std::string fingerprint = sweep_fingerprint(*base, space);
  if (!merging && launch.mpi()) {
    // Every process judges its own share; a process refused while the others sweep would leave
    // them waiting in the gather, so a refusal ends them all. --estimate-cost: process 0 tells.
    if (o.estimate_cost && launch.process_rank != 0) return;
    try {
      so.evaluated = guard_sweep(o, base, space, so);
    } catch (const std::exception& e) {
      runtime::end_all_processes(e.what(), 2);
    }
    if (o.estimate_cost) return;
  } else if (!merging) {
    so.evaluated = guard_sweep(o, base, space, so);
    if (o.estimate_cost) return;
  }
  if (!o.shard.empty()) {
    run_shard(base, space, so, fingerprint);
    return;
  }
  const bool root = launch.process_rank == 0;
  // Every point goes to the CSV and the JSON as it is finished; the sweep keeps only the report's.
  std::optional<CsvPoints> csv;
  if (!o.csv.empty() && root) csv.emplace(o.csv, space);
  std::optional<JsonPoints> json_points;
  if (o.json && root) json_points.emplace(space);
  if (csv || json_points) {
    so.sink = [&csv, &json_points](const sim::PointResult& p) {
      if (csv) csv->add(p);
      if (json_points) json_points->add(p);
    };
  }
  Progress progress(root && (o.progress || ::isatty(2)), ::isatty(2));
  so.progress = [&progress](std::size_t done, std::size_t total) { progress.update(done, total); };
  g_interrupted.store(false);
  so.cancel = &g_interrupted;
  auto previous = std::signal(SIGINT, on_sigint);
  sim::SweepResult result;
  if (merging) {
    std::vector<ShardReader> readers;
    for (const std::string& path : o.merge) {
      auto in = std::make_unique<std::ifstream>(path, std::ios::binary);
      if (!*in) throw InputError(path, "", "cannot read the shard file");
      readers.emplace_back(path, std::move(in));
    }
    result = merge_shards(readers, space, fingerprint, so);
  } else if (launch.mpi()) {
    if (!run_mpi_share(base, space, so, fingerprint, launch, result)) return;  // not process 0: it reports nothing
  } else {
    result = sim::run_sweep(base, space, so);
  }
  progress.finish();
  if (!g_interrupted.load() && o.resimulate_top > 0) {
    sim::resimulate_top(result, static_cast<std::size_t>(o.resimulate_top),
                        sim::simgrid_resimulator(base, sim::budget_from_options(o.max_memory_gib, o.max_seconds)),
                        tolerance);
  }
  std::signal(SIGINT, previous == SIG_ERR ? SIG_DFL : previous);

  if (csv) csv->finish(result);
  if (json_points) write_sweep_json(std::cout, result, *base, *json_points);
  else std::cout << sweep_text(result, *base, top, from);
  if (csv && !o.json) std::cout << "wrote " << result.total << " rows to " << o.csv << "\n";
  if (result.interrupted || g_interrupted.load()) {
    std::cout << std::flush;
    std::cerr << "interrupted: " << (result.evaluated + result.skipped + result.failed) << " of " << result.total
              << " points done\n"
              << std::flush;
    std::exit(130);
  }
  // Nothing could be evaluated (every point invalid or failed): the report says why per
  // point; scripts get a failing exit status.
  if (result.evaluated == 0 && result.total > 0)
    throw InputError(sweep_error_file(o, from), "",
                     "none of the " + std::to_string(result.total) + " points could be evaluated (reasons above)");
}

}  // namespace

void add_sweep_command(CLI::App& app) {
  auto o = std::make_shared<SweepOptionsCli>();
  CLI::App* cmd = app.add_subcommand(
      "sweep", "Evaluate many configurations (a product of axes) and recommend one; or search the optimal wrapping");
  add_scenario_input_options(cmd, o->input);
  cmd->add_option("--sweep", o->sweep_file, "Sweep JSON file: scenario, set, axes, headroom_gib, objective, top");
  cmd->add_option("--axis", o->axes,
                  "An axis: key=v1,v2,... e.g. fsdp.strategy=FULL_SHARD,SHARD_GRAD_OP,HYBRID_SHARD:* or "
                  "training.micro_batch=1,2,4 (repeatable; see docs/sweep.md)");
  o->headroom_opt = cmd->add_option("--headroom-gib", o->headroom_gib,
                                    "Memory to keep free: fits when device peak + headroom <= GPU memory (default 0)")
                        ->check(headroom_gib());
  o->objective_opt = cmd->add_option("--objective", o->objective, "Rank by throughput (default), step_time or memory")
                         ->check(CLI::IsMember({"throughput", "step_time", "memory"}));
  o->tolerance_opt = cmd->add_option(
      "--tolerance", o->tolerance,
      "Recommend the least memory among points within this fraction of the best (default 0.01)")
                         ->check(fraction_below_one());
  o->top_opt = cmd->add_option("--top", o->top, "Rows of the ranked table (default 10)")->check(CLI::Range(1, 1000000));
  cmd->add_option("--csv", o->csv, "Write every point (skipped ones with their reason) to this CSV file");
  cmd->add_flag("--json", o->json, "Print one JSON object for tools");
  // More workers than 256 gives nothing on any machine this runs on, and each holds an evaluator
  // with its plan caches.
  cmd->add_option("--threads", o->threads, "Worker threads (default: hardware concurrency)")->check(CLI::Range(1, 256));
  cmd->add_flag("--progress", o->progress, "Show progress and ETA on stderr even when it is not a terminal");
  cmd->add_option("--resimulate-top", o->resimulate_top,
                  "Re-simulate the K best points with SimGrid (`fsdpsim simulate`, one process each)")
      ->check(CLI::Range(0, 1000));
  cmd->add_flag("--wrap-search", o->wrap_search,
                "Search the optimal wrapping (unit boundaries over the blocks) of the base configuration");
  cmd->add_option("--wrap-objective", o->wrap_objective, "Wrap search: exposed_comm (default) or step_time")
      ->check(CLI::IsMember({"exposed_comm", "step_time"}));
  cmd->add_option("--wrap-candidates", o->wrap_candidates,
                  "Wrap search: the DP's K best wrappings re-evaluated with the engine (default 8)")
      ->check(CLI::Range(1, 10000));
  cmd->add_option("--wrap-max-unit", o->wrap_max_unit, "Wrap search: at most this many blocks per unit")
      ->check(CLI::Range(1, 1000000));
  cmd->add_option("--wrap-local-search", o->wrap_local_search,
                  "Wrap search: engine evaluations of local search from the best candidate (default 300; 0: none)")
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--max-memory", o->max_memory_gib,
                  "Refuse to start a sweep expected to need more GiB than this (default: half the machine's memory)")
      ->check(non_negative_number());
  cmd->add_option("--max-time", o->max_seconds,
                  "Refuse to start a sweep expected to take longer, in seconds (default 3600; 0: no limit)")
      ->check(non_negative_number());
  cmd->add_flag("--estimate-cost", o->estimate_cost,
                "Print the sweep's expected memory and time (timing a sample of its points) and stop");
  cmd->add_option("--shard", o->shard,
                  "Evaluate only shard i of N (\"i/N\": the points whose index % N == i) and print them for "
                  "--merge (a Slurm job array: $SLURM_ARRAY_TASK_ID/$SLURM_ARRAY_TASK_COUNT)");
  cmd->add_option("--merge", o->merge,
                  "Merge the shard files of one sweep (give every shard, with the shards' scenario, --set and axes) "
                  "and report as one process would")
      ->expected(1, -1);
  cmd->add_flag("--brute-force", o->brute_force,
                "Wrap search: also time every wrapping (at most 14 blocks) and compare with the search");
  // The wrap search's options mean nothing to a sweep: given without --wrap-search they were
  // silently ignored (the session-30 audit); now they name what they need.
  cmd->callback([o, cmd] {
    if (!o->wrap_search)
      for (const char* name : {"--wrap-objective", "--wrap-candidates", "--wrap-max-unit", "--wrap-local-search",
                               "--brute-force"})
        if (cmd->count(name) > 0) throw InputError::option(name, "is an option of the wrap search: add --wrap-search");
    run_sweep_command(*o);
  });
}

}  // namespace fsdpsim::tools
