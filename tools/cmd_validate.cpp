// `fsdpsim validate`: predicted vs published figures for the scenarios that carry them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>

#include "models/json_input.h"
#include "planner/scenario.h"
#include "sim/validation.h"
#include "tools/commands.h"
#include "tools/format.h"

namespace fsdpsim::tools {

namespace {

std::string signed_percent(double e) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", e * 100);
  return buf;
}

std::string value_text(const std::string& metric, double v) {
  char buf[64];
  if (metric.find("bytes") != std::string::npos) return gib(v);
  if (metric == "step_time_seconds") return seconds_text(v);
  std::snprintf(buf, sizeof buf, "%.0f", v);
  return buf;
}

std::vector<std::string> default_files() {
  std::vector<std::string> files;
  const auto dir = std::filesystem::path(planner::catalog_root()) / "scenarios/published";
  if (std::filesystem::is_directory(dir))
    for (const auto& entry : std::filesystem::directory_iterator(dir))
      if (entry.path().extension() == ".json") files.push_back(entry.path().string());
  std::sort(files.begin(), files.end());
  return files;
}

void print_summary(const std::vector<sim::RowValidation>& rows) {
  std::set<std::string> sources;
  for (const auto& r : rows) sources.insert(r.source);
  for (const auto& [metric, bound] : {std::pair<std::string, double>{"tokens_per_second_per_gpu", 0.15},
                                      {"peak_allocated_bytes", 0.10}, {"peak_reserved_bytes", 0.10}}) {
    Table t({"rows", "n", "mean |error|", "worst", "within " + std::to_string(static_cast<int>(bound * 100)) + "%"});
    auto add = [&](const std::string& label, const sim::MetricSummary& s) {
      if (s.rows == 0) return;
      t.add({label, std::to_string(s.rows), percent(s.mean_abs_error), signed_percent(s.worst_error) + " (" + s.worst_row + ")",
             std::to_string(s.within_bound) + "/" + std::to_string(s.rows)});
    };
    for (const std::string& s : sources) add(s, sim::summarise(rows, metric, bound, s));
    add("holdout rows", sim::summarise(rows, metric, bound, "", true));
    add("other rows", sim::summarise(rows, metric, bound, "", false));
    add("all", sim::summarise(rows, metric, bound));
    if (sim::summarise(rows, metric, bound).rows == 0) continue;
    std::cout << "\n" << metric << "\n" << t.str();
  }
}

}  // namespace

void add_validate_command(CLI::App& app) {
  struct Options {
    std::vector<std::string> files;
    bool json = false;
    bool check = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("validate", "Predicted vs published figures of real runs (scenarios/published by default)");
  cmd->add_option("files", o->files, "Published scenario files (default: every scenarios/published/*.json)");
  cmd->add_flag("--json", o->json, "Print one JSON object for tools");
  cmd->add_flag("--check", o->check, "Exit 1 when the accuracy bounds are not met (throughput within 15% for 80% of rows, mean |error| < 10%; memory within 10%)");
  cmd->callback([o] {
    std::vector<std::string> files = o->files.empty() ? default_files() : o->files;
    if (files.empty()) throw InputError("scenarios/published", "", "no published scenarios found");
    // A file named on the command line that is not there is a usage error, not a row that
    // failed to predict.
    for (const std::string& f : o->files)
      if (!std::filesystem::is_regular_file(f)) throw InputError(f, "", "cannot open the file (does it exist?)");
    std::vector<sim::RowValidation> rows;
    for (std::size_t i = 0; i < files.size(); ++i) {
      if (!o->json) std::cerr << "\r[" << i + 1 << "/" << files.size() << "] " << files[i] << "\033[K" << std::flush;
      rows.push_back(sim::validate_scenario(files[i]));
    }
    if (!o->json) std::cerr << "\r\033[K";
    std::vector<std::string> violations = sim::check_bounds(rows);
    if (o->json) {
      std::cout << sim::validation_json(rows).dump(2) << "\n";
    } else {
      Table t({"row", "scenario", "metric", "published", "predicted", "error"});
      for (const auto& r : rows) {
        std::string label = std::to_string(r.row_id) + (r.holdout ? "*" : "");
        if (!r.error.empty()) {
          t.add({label, r.name.empty() ? r.file : r.name, "error", "", "", r.error});
          continue;
        }
        for (const auto& m : r.metrics)
          t.add({label, r.name, m.metric, value_text(m.metric, m.published), value_text(m.metric, m.predicted),
                 signed_percent(m.signed_error())});
        for (const auto& [metric, reason] : r.excluded) {
          (void)reason;
          t.add({label, r.name, metric, "excluded", "", "(see below)"});
        }
        if (r.published_oom)
          t.add({label, r.name, "out of memory", *r.published_oom ? "yes" : "no", r.predicted_fits ? "no" : "yes",
                 (*r.published_oom == !r.predicted_fits) ? "agrees" : "DISAGREES"});
      }
      std::cout << t.str() << "(* holdout rows: never used to set a constant)\n";
      for (const auto& r : rows) {
        // One line per reason, naming every metric it excludes.
        std::vector<std::pair<std::string, std::string>> by_reason;  // reason -> metrics
        for (const auto& [metric, reason] : r.excluded) {
          auto it = std::find_if(by_reason.begin(), by_reason.end(), [&](const auto& x) { return x.first == reason; });
          if (it == by_reason.end()) by_reason.push_back({reason, metric});
          else it->second += ", " + metric;
        }
        for (const auto& [reason, metrics] : by_reason)
          std::cout << "excluded: row " << r.row_id << " (" << metrics << "): " << reason << "\n";
      }
      print_summary(rows);
      std::cout << "\n";
      if (violations.empty()) std::cout << "accuracy bounds: met\n";
      for (const auto& v : violations) std::cout << "accuracy bound not met: " << v << "\n";
    }
    if (o->check && !violations.empty()) throw CLI::RuntimeError(1);
  });
}

}  // namespace fsdpsim::tools
