// `fsdpsim validate`: predicted vs published figures for the scenarios that carry them.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <unistd.h>
#include <iostream>
#include <set>

#include "models/json_input.h"
#include "planner/scenario.h"
#include "sim/validation.h"
#include "tools/commands.h"
#include "tools/format.h"

namespace fsdpsim::tools {

namespace {

// A row's name in the tables: its row_id in ../shared/validation/public_runs.csv, or, for a row
// added since that has none (row_id 0: the MoE rows), its file name's prefix ("m01").
std::string row_label(const sim::RowValidation& r) {
  if (r.row_id > 0) return std::to_string(r.row_id);
  const std::string stem = std::filesystem::path(r.file).stem().string();
  return stem.substr(0, stem.find('-'));
}


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

// The refitted values that reach the source's rows ("entry value"; "(unfitted)": too few rows).
std::string refitted_values(const sim::LosoResult& result, const sim::SourceFold& fold) {
  std::string text;
  for (std::size_t k = 0; k < fold.refits.size(); ++k) {
    const bool reaches = std::any_of(result.in_sample.begin(), result.in_sample.end(), [&](const sim::RowValidation& r) {
      return r.source == fold.source && r.error.empty() && result.fitted[k].applies_to(r);
    });
    if (!reaches) continue;
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s%s %.2f%s", text.empty() ? "" : ", ", result.fitted[k].label().c_str(),
                  fold.refits[k].value, fold.refits[k].fitted ? "" : " (unfitted)");
    text += buf;
  }
  return text.empty() ? "(none reaches its rows)" : text;
}

// The leave-one-source-out report: per row, per source (beside the plain in-sample figures),
// overall, and the declarations with their reproduction check.
void print_loso(const sim::LosoResult& result, const sim::LosoBounds& bounds) {
  std::cout << "leave one source out (docs/accuracy.md): each source's rows predicted with every fitted constant "
               "refitted on the other sources' training rows\n";
  if (result.fitted.empty())
    std::cout << "nothing is declared fitted (scenarios/hardware/calibration.json \"fitted\" is empty): "
                 "the leave-one-source-out predictions are the plain ones\n";
  std::cout << "\n";
  Table rows({"row", "scenario", "gpu", "published", "in-sample", "error", "LOSO", "error"});
  for (std::size_t i = 0; i < result.loso.size(); ++i) {
    const sim::RowValidation& r = result.loso[i];
    const sim::RowValidation& plain = result.in_sample[i];
    if (!r.error.empty()) {
      rows.add({row_label(r), r.name.empty() ? r.file : r.name, "", "", "", "", "error", r.error});
      continue;
    }
    for (std::size_t m = 0; m < r.metrics.size(); ++m) {
      if (r.metrics[m].metric != "tokens_per_second_per_gpu") continue;
      rows.add({row_label(r) + (r.holdout ? "*" : ""), r.name, r.gpu,
                value_text(r.metrics[m].metric, r.metrics[m].published),
                value_text(r.metrics[m].metric, plain.metrics[m].predicted), signed_percent(plain.metrics[m].signed_error()),
                value_text(r.metrics[m].metric, r.metrics[m].predicted), signed_percent(r.metrics[m].signed_error())});
    }
  }
  std::cout << "tokens_per_second_per_gpu\n" << rows.str() << "(* holdout rows)\n\n";

  const std::string within = "within " + std::to_string(static_cast<int>(std::lround(bounds.row_bound * 100))) + "%";
  Table t({"source", "n", "in-sample |error|", "bias", within, "LOSO |error|", "bias", "dev bias", within,
           "refitted on the other sources' rows"});
  auto fraction = [](const sim::ThroughputSummary& s) { return std::to_string(s.within_bound) + "/" + std::to_string(s.rows); };
  auto add = [&](const std::string& label, const std::string& source, std::optional<bool> holdout, const std::string& values) {
    const sim::ThroughputSummary plain = sim::summarise_throughput(result.in_sample, bounds.row_bound, source, holdout);
    const sim::ThroughputSummary loso = sim::summarise_throughput(result.loso, bounds.row_bound, source, holdout);
    if (loso.rows == 0 && plain.rows == 0) return;
    const sim::ThroughputSummary dev = sim::summarise_throughput(result.loso, bounds.row_bound, source, false);
    t.add({label, std::to_string(loso.rows), percent(plain.mean_abs_error), signed_percent(plain.mean_signed_error),
           fraction(plain), percent(loso.mean_abs_error), signed_percent(loso.mean_signed_error),
           dev.rows ? signed_percent(dev.mean_signed_error) : "", fraction(loso), values});
  };
  for (const sim::SourceFold& fold : result.folds) add(fold.source, fold.source, std::nullopt, refitted_values(result, fold));
  add("dev rows", "", false, "");
  add("holdout rows", "", true, "");
  add("all", "", std::nullopt, "");
  std::cout << t.str();

  for (std::size_t k = 0; k < result.fitted.size(); ++k) {
    const sim::FittedConstant& f = result.fitted[k];
    const sim::Refit& full = result.full_refits[k];
    char buf[512];
    std::snprintf(buf, sizeof buf, "fitted: %s (grid %.2f..%.2f step %.2f, %s, %zu declared rows): shipped %.2f; ",
                  f.label().c_str(), f.grid_from, f.grid_to, f.grid_step, f.objective.c_str(), f.rows.size(), f.shipped_value);
    std::cout << buf;
    if (result.full_refit_rows_missing[k] > 0)
      std::cout << result.full_refit_rows_missing[k] << " declared rows not among the files: not re-checked\n";
    else {
      std::snprintf(buf, sizeof buf, "refit on its declared rows %.2f (%s)\n", full.value,
                    full.value == f.shipped_value ? "reproduces the shipped value" : "DOES NOT reproduce the shipped value");
      std::cout << buf;
    }
  }
  std::cout << "\n";
}

// The progress line rewrites itself with a carriage return and an erase-line code: only for a
// person at a terminal, never into a log file or a pipe.
bool stderr_is_terminal() { return ::isatty(2) != 0; }

// After the report: a file that could not be estimated ends the command as the bad input it
// is (exit 2, its error line), whether or not --check was given; the report lists every such row.
void fail_on_unestimated_rows(const std::vector<sim::RowValidation>& rows) {
  for (const sim::RowValidation& r : rows)
    if (r.failure) std::rethrow_exception(r.failure);
}

void run_leave_one_source_out(const std::vector<std::string>& files, bool json, bool check) {
  const sim::LosoBounds bounds;
  const std::vector<sim::FittedConstant> fitted = sim::shipped_fitted_constants();
  const sim::LosoResult result =
      sim::leave_one_source_out(files, fitted, 0, [](const std::string& phase, int done, int total) {
        if (stderr_is_terminal()) std::cerr << "\r[" << phase << " " << done << "/" << total << "]\033[K" << std::flush;
      });
  if (stderr_is_terminal()) std::cerr << "\r\033[K" << std::flush;
  const std::vector<std::string> violations = sim::check_loso_bounds(result, bounds);
  if (json) {
    nlohmann::json out = sim::validation_json(result.in_sample);
    out["leave_one_source_out"] = sim::loso_json(result, bounds);
    std::cout << out.dump(2) << "\n";
  } else {
    print_loso(result, bounds);
    if (violations.empty()) std::cout << "leave-one-source-out bounds: met\n";
    for (const auto& v : violations) std::cout << "leave-one-source-out bound not met: " << v << "\n";
  }
  std::cout << std::flush;
  fail_on_unestimated_rows(result.in_sample);
  if (check && !violations.empty()) throw CLI::RuntimeError(1);
}

}  // namespace

void add_validate_command(CLI::App& app) {
  struct Options {
    std::vector<std::string> files;
    bool json = false;
    bool check = false;
    bool leave_one_source_out = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("validate", "Predicted vs published figures of real runs (scenarios/published by default)");
  cmd->add_option("files", o->files, "Published scenario files (default: every scenarios/published/*.json)");
  cmd->add_flag("--json", o->json, "Print one JSON object for tools");
  cmd->add_flag("--check", o->check, "Exit 1 when the accuracy bounds are not met (throughput within 15% for 80% of rows, mean |error| < 10%; memory within 10%)");
  cmd->add_flag("--leave-one-source-out", o->leave_one_source_out,
                 "Refit every constant scenarios/hardware/calibration.json declares \"fitted\" on the other sources' "
                 "rows and predict each source with its refit; with --check, enforce the leave-one-source-out bounds "
                 "on the dev (non-holdout) rows: mean |error| <= 7%, >= 85% within 15%, no source's bias beyond +-8%");
  cmd->callback([o] {
    std::vector<std::string> files = o->files.empty() ? default_files() : o->files;
    if (files.empty()) throw InputError("scenarios/published", "", "no published scenarios found");
    // A file named on the command line that is not there is a usage error, not a row that
    // failed to predict.
    for (const std::string& f : o->files) {
      if (!std::filesystem::exists(f)) throw InputError(f, "", "cannot open the file (does it exist?)");
      if (!std::filesystem::is_regular_file(f))
        throw InputError(f, "", "is not a regular file (a directory, a device or a pipe): expected a scenario JSON file");
    }
    if (o->leave_one_source_out) {
      run_leave_one_source_out(files, o->json, o->check);
      return;
    }
    std::vector<sim::RowValidation> rows;
    for (std::size_t i = 0; i < files.size(); ++i) {
      if (!o->json && stderr_is_terminal()) std::cerr << "\r[" << i + 1 << "/" << files.size() << "] " << files[i] << "\033[K" << std::flush;
      rows.push_back(sim::validate_scenario(files[i]));
    }
    if (!o->json && stderr_is_terminal()) std::cerr << "\r\033[K";
    std::vector<std::string> violations = sim::check_bounds(rows);
    if (o->json) {
      std::cout << sim::validation_json(rows).dump(2) << "\n";
    } else {
      Table t({"row", "scenario", "metric", "published", "predicted", "error"});
      for (const auto& r : rows) {
        std::string label = row_label(r) + (r.holdout ? "*" : "");
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
        // A row that publishes an MFU and nothing scored: said, not silently left out
        // (RowValidation::published_mfu says why MFU is not scored).
        if (r.metrics.empty() && r.excluded.empty() && !r.published_oom && r.published_mfu)
          t.add({label, r.name, "mfu", percent(*r.published_mfu), percent(r.predicted_mfu),
                 "not scored (FLOP conventions differ)"});
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
          std::cout << "excluded: row " << row_label(r) << " (" << metrics << "): " << reason << "\n";
      }
      print_summary(rows);
      std::cout << "\n";
      if (violations.empty()) std::cout << "accuracy bounds: met\n";
      for (const auto& v : violations) std::cout << "accuracy bound not met: " << v << "\n";
    }
    std::cout << std::flush;
    fail_on_unestimated_rows(rows);
    if (o->check && !violations.empty()) throw CLI::RuntimeError(1);
  });
}

}  // namespace fsdpsim::tools
