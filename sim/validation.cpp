#include "sim/scenario_loader.h"
#include "sim/validation.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "models/json_input.h"
#include "planner/scenario.h"
#include "sim/estimate.h"

namespace fsdpsim::sim {

namespace {

std::optional<double> number(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_number()) return std::nullopt;
  return it->get<double>();
}

// "r217-torchtitan-llama3.1-8b-..." -> "torchtitan"; the publisher is the second token.
std::string source_of(const std::string& file) {
  std::string stem = std::filesystem::path(file).stem().string();
  auto first = stem.find('-');
  if (first == std::string::npos) return stem;
  auto second = stem.find('-', first + 1);
  return stem.substr(first + 1, second == std::string::npos ? std::string::npos : second - first - 1);
}

// The figures a row is judged on, checked before anything is estimated (the session-30 audit:
// a throughput of 0 printed "+inf%" and exit 0, -1 an error of 1,582,994%, an MFU of 2 and an
// unknown memory metric passed, and a figure written as a string was silently not compared).
// Each present figure is a positive finite number; a memory figure names its metric; an MFU is
// a fraction of the peak.
void check_published_figures(const nlohmann::json& p, const std::string& file) {
  for (const char* key : {"tokens_per_second_per_gpu", "step_time_seconds", "peak_memory_bytes", "mfu"}) {
    if (!p.contains(key) || p[key].is_null()) continue;  // null: not published
    const nlohmann::json& v = p[key];
    if (!v.is_number() || !std::isfinite(v.get<double>()) || !(v.get<double>() > 0))
      throw InputError(file, std::string("published.") + key, "expected a positive number, got " + v.dump());
  }
  if (p.contains("mfu") && p["mfu"].is_number() && p["mfu"].get<double>() > 1)
    throw InputError(file, "published.mfu", "expected a fraction of the peak (0 to 1), got " + p["mfu"].dump());
  const bool has_memory = p.contains("peak_memory_bytes") && !p["peak_memory_bytes"].is_null();
  if ((p.contains("peak_memory_metric") && !p["peak_memory_metric"].is_null()) || has_memory) {
    const nlohmann::json metric = p.value("peak_memory_metric", nlohmann::json());
    if (!(metric == "allocated" || metric == "reserved"))
      throw InputError(file, "published.peak_memory_metric",
                       "expected \"allocated\" or \"reserved\"" + std::string(has_memory ? " beside peak_memory_bytes" : "") +
                           (metric.is_null() ? std::string() : ", got " + metric.dump()));
    if (!has_memory)
      throw InputError(file, "published.peak_memory_bytes", "expected the figure peak_memory_metric names");
  }
}

}  // namespace

RowValidation validate_scenario(const std::string& file, const std::vector<std::string>& overrides) {
  RowValidation row;
  row.file = file;
  row.source = source_of(file);
  try {
    planner::Scenario scenario = sim::load_scenario(file, overrides);
    row.name = scenario.name;
    row.gpu = scenario.cluster.gpu.name;
    if (scenario.calibration.is_object())
      for (const auto& [key, value] : scenario.calibration.items()) row.scenario_calibration_fields.push_back(key);
    const nlohmann::json& p = scenario.published;
    if (!p.is_object()) throw InputError(file, "published", "a validation scenario needs the published figures");
    row.row_id = static_cast<int>(number(p, "row_id").value_or(0));
    row.holdout = p.value("holdout", false);
    if (p.contains("oom") && p["oom"].is_boolean()) row.published_oom = p["oom"].get<bool>();
    std::set<std::string> excluded;
    if (p.contains("excluded")) {
      const nlohmann::json& x = p["excluded"];
      if (!x.is_object()) throw InputError(file, "published.excluded", "expected an object {metric: reason}");
      for (const auto& [metric, reason] : x.items()) {
        if (metric != "tokens_per_second_per_gpu" && metric != "step_time_seconds" && metric != "peak_memory_bytes")
          throw InputError(file, "published.excluded." + metric,
                           "expected tokens_per_second_per_gpu, step_time_seconds or peak_memory_bytes");
        if (!reason.is_string() || reason.get<std::string>().empty())
          throw InputError(file, "published.excluded." + metric, "expected the reason, a non-empty string");
        excluded.insert(metric);
        row.excluded.emplace_back(metric, reason.get<std::string>());
      }
    }
    check_published_figures(p, file);
    auto number = [&](const nlohmann::json& j, const char* key) -> std::optional<double> {
      if (excluded.count(key)) return std::nullopt;
      return fsdpsim::sim::number(j, key);
    };
    Estimate e = estimate_step(scenario);
    row.predicted_fits = e.fits();
    row.predicted_mfu = e.timing.mfu;
    row.published_mfu = fsdpsim::sim::number(p, "mfu");
    if (auto tps = number(p, "tokens_per_second_per_gpu"))
      row.metrics.push_back({"tokens_per_second_per_gpu", *tps, e.timing.tokens_per_second_per_gpu});
    if (auto step = number(p, "step_time_seconds"))
      row.metrics.push_back({"step_time_seconds", *step, e.timing.step_seconds});
    if (auto mem = number(p, "peak_memory_bytes")) {
      if (p.value("peak_memory_metric", "") == "allocated")
        row.metrics.push_back({"peak_allocated_bytes", *mem, static_cast<double>(e.memory.peak_allocated_bytes)});
      else
        row.metrics.push_back({"peak_reserved_bytes", *mem, static_cast<double>(e.memory.peak_reserved_bytes)});
    }
  } catch (const std::exception& ex) {
    row.error = ex.what();
    row.failure = std::current_exception();
  }
  return row;
}

MetricSummary summarise(const std::vector<RowValidation>& rows, const std::string& metric, double bound,
                        const std::string& source, std::optional<bool> holdout) {
  MetricSummary s;
  double sum = 0;
  for (const RowValidation& r : rows) {
    if (!source.empty() && r.source != source) continue;
    if (holdout && r.holdout != *holdout) continue;
    for (const MetricComparison& m : r.metrics) {
      if (m.metric != metric) continue;
      const double err = m.signed_error();
      ++s.rows;
      sum += std::fabs(err);
      if (std::fabs(err) <= bound) ++s.within_bound;
      if (std::fabs(err) > std::fabs(s.worst_error)) {
        s.worst_error = err;
        s.worst_row = r.name;
      }
    }
  }
  s.mean_abs_error = s.rows ? sum / s.rows : 0;
  return s;
}

std::vector<std::string> check_bounds(const std::vector<RowValidation>& rows, const AccuracyBounds& b) {
  std::vector<std::string> violations;
  for (const RowValidation& r : rows)
    if (!r.error.empty()) violations.push_back(r.file + ": could not be estimated: " + r.error);
  MetricSummary tps = summarise(rows, "tokens_per_second_per_gpu", b.throughput_row_bound);
  if (tps.rows > 0) {
    const double fraction = static_cast<double>(tps.within_bound) / tps.rows;
    if (fraction < b.throughput_fraction)
      violations.push_back("throughput: " + std::to_string(tps.within_bound) + " of " + std::to_string(tps.rows) +
                           " rows within " + std::to_string(static_cast<int>(b.throughput_row_bound * 100)) +
                           "% (need " + std::to_string(static_cast<int>(b.throughput_fraction * 100)) + "%)");
    if (tps.mean_abs_error >= b.throughput_mean_bound)
      violations.push_back("throughput: mean absolute error " + std::to_string(tps.mean_abs_error * 100) +
                           "% (need < " + std::to_string(b.throughput_mean_bound * 100) + "%)");
  }
  for (const RowValidation& r : rows)
    for (const MetricComparison& m : r.metrics)
      if ((m.metric == "peak_allocated_bytes" || m.metric == "peak_reserved_bytes") &&
          std::fabs(m.signed_error()) > b.memory_row_bound)
        violations.push_back(r.name + ": " + m.metric + " off by " + std::to_string(m.signed_error() * 100) + "%");
  for (const RowValidation& r : rows)
    if (r.published_oom && *r.published_oom && r.predicted_fits)
      violations.push_back(r.name + ": published as out of memory, predicted to fit");
  return violations;
}

nlohmann::json validation_json(const std::vector<RowValidation>& rows) {
  nlohmann::json out;
  out["rows"] = nlohmann::json::array();
  std::set<std::string> sources;
  for (const RowValidation& r : rows) {
    sources.insert(r.source);
    // A row that could not be estimated predicts nothing: null, never a default "fits".
    const bool predicted = r.error.empty();
    nlohmann::json j = {{"file", r.file},
                        {"name", r.name},
                        {"source", r.source},
                        {"row_id", r.row_id},
                        {"holdout", r.holdout},
                        {"predicted_fits", predicted ? nlohmann::json(r.predicted_fits) : nlohmann::json(nullptr)},
                        {"predicted_mfu", predicted ? nlohmann::json(r.predicted_mfu) : nlohmann::json(nullptr)}};
    for (const auto& [metric, reason] : r.excluded) j["excluded"][metric] = reason;
    if (r.published_oom) j["published_oom"] = *r.published_oom;
    if (r.published_mfu) j["published_mfu"] = *r.published_mfu;
    if (!r.error.empty()) j["error"] = r.error;
    for (const MetricComparison& m : r.metrics)
      j["metrics"][m.metric] = {{"published", m.published}, {"predicted", m.predicted}, {"signed_error", m.signed_error()}};
    out["rows"].push_back(j);
  }
  auto summary = [&](const std::string& metric, double bound, const std::string& source, std::optional<bool> holdout) {
    MetricSummary s = summarise(rows, metric, bound, source, holdout);
    return nlohmann::json{{"rows", s.rows}, {"mean_abs_error", s.mean_abs_error}, {"worst_error", s.worst_error},
                          {"worst_row", s.worst_row}, {"within_bound", s.within_bound}, {"bound", bound}};
  };
  for (const char* metric : {"tokens_per_second_per_gpu", "peak_allocated_bytes", "peak_reserved_bytes"}) {
    const double bound = std::string(metric) == "tokens_per_second_per_gpu" ? 0.15 : 0.10;
    out["summary"][metric]["overall"] = summary(metric, bound, "", std::nullopt);
    out["summary"][metric]["holdout"] = summary(metric, bound, "", true);
    out["summary"][metric]["not_holdout"] = summary(metric, bound, "", false);
    for (const std::string& s : sources) out["summary"][metric]["by_source"][s] = summary(metric, bound, s, std::nullopt);
  }
  out["violations"] = check_bounds(rows);
  return out;
}

// ---- Leave one source out ------------------------------------------------------------------

namespace {

constexpr const char* kThroughput = "tokens_per_second_per_gpu";
constexpr const char* kObjective = "mean |tokens/s error|";

const MetricComparison* throughput_of(const RowValidation& row) {
  for (const MetricComparison& m : row.metrics)
    if (m.metric == kThroughput) return &m;
  return nullptr;
}

bool contains(const std::vector<std::string>& list, const std::string& x) {
  return std::find(list.begin(), list.end(), x) != list.end();
}

// Runs body(i) for i in [0, n) on `threads` threads; after each, on_done(done) under a lock.
// The first exception a body throws is rethrown here once every thread has stopped.
void parallel_for(int n, int threads, const std::function<void(int)>& body, const std::function<void(int)>& on_done) {
  if (n <= 0) return;
  if (threads <= 0) threads = static_cast<int>(std::thread::hardware_concurrency());
  threads = std::max(1, std::min(threads, n));
  std::atomic<int> next{0};
  std::mutex mutex;
  int done = 0;
  std::exception_ptr failure;
  auto worker = [&] {
    for (int i = next++; i < n; i = next++) {
      try {
        body(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!failure) failure = std::current_exception();
        next = n;  // stop handing out work
      }
      std::lock_guard<std::mutex> lock(mutex);
      ++done;
      if (on_done) on_done(done);
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
  if (failure) std::rethrow_exception(failure);
}

}  // namespace

std::vector<double> FittedConstant::grid() const {
  std::vector<double> values;
  const int n = static_cast<int>(std::floor((grid_to - grid_from) / grid_step + 1e-9));
  // Rounded to 1e-9 so that 0.40 + 45 x 0.01 is the 0.85 a catalog writes.
  for (int i = 0; i <= n; ++i) values.push_back(std::round((grid_from + i * grid_step) * 1e9) / 1e9);
  return values;
}

bool FittedConstant::applies_to(const RowValidation& row) const {
  if (contains(row.scenario_calibration_fields, field)) return false;
  if (entry == "defaults") return !contains(entries_setting_field, row.gpu);
  return row.gpu == entry || contains(copied_to, row.gpu);
}

std::string FittedConstant::override_for(double value) const {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.17g", value);
  return "calibration." + field + "=" + buf;
}

std::vector<FittedConstant> read_fitted_constants(const nlohmann::json& catalog, const std::string& file) {
  std::vector<FittedConstant> out;
  if (!catalog.is_object() || !catalog.contains("fitted")) return out;
  const nlohmann::json& list = catalog["fitted"];
  if (!list.is_array()) throw InputError(file, "fitted", "expected an array of fit declarations, got " + describe_json(list));
  auto is_entry = [&](const std::string& name) {
    return name != "fitted" && name != "_comment" && catalog.contains(name) && catalog[name].is_object();
  };
  for (std::size_t i = 0; i < list.size(); ++i) {
    JsonReader r(list[i], file, join_json_path("fitted", i));
    FittedConstant f;
    f.file = file;
    f.json_path = r.path();
    f.field = r.string("field");
    f.entry = r.string("entry");
    if (!is_entry(f.entry)) r.fail("entry", "a calibration entry of this file (a GPU name or \"defaults\"), got \"" + f.entry + "\"");
    const nlohmann::json& entry = catalog[f.entry];
    if (!entry.contains(f.field) || !entry[f.field].is_number())
      r.fail("field", "a number the entry \"" + f.entry + "\" sets; \"" + f.field + "\" is not set there");
    f.shipped_value = entry[f.field].get<double>();
    if (r.has("copied_to")) {
      const nlohmann::json& copies = r.array("copied_to");
      for (std::size_t c = 0; c < copies.size(); ++c) {
        const std::string path = join_json_path(join_json_path(r.path(), "copied_to"), c);
        if (!copies[c].is_string() || !is_entry(copies[c].get<std::string>()) || copies[c] == "defaults")
          throw InputError(file, path, "expected the name of a GPU entry of this file, got " + describe_json(copies[c]));
        const nlohmann::json& copy = catalog[copies[c].get<std::string>()];
        if (!copy.contains(f.field) || copy[f.field] != entry[f.field])
          throw InputError(file, path, "expected an entry that sets " + f.field + " to the fitted value " + describe_json(entry[f.field]));
        f.copied_to.push_back(copies[c].get<std::string>());
      }
    } else {
      r.ignore("copied_to");
    }
    JsonReader g = r.object("grid");
    f.grid_from = g.number("from");
    f.grid_to = g.number("to");
    f.grid_step = g.positive_number("step");
    if (!(f.grid_to >= f.grid_from)) g.fail("to", "a value >= from");
    g.finish();
    f.objective = r.choice("objective", {kObjective});
    f.min_rows = r.int_in_or("min_rows", 1, 1000000, 1);
    const nlohmann::json& rows = r.array("rows");
    for (std::size_t k = 0; k < rows.size(); ++k) {
      if (!rows[k].is_number_integer() || rows[k].get<std::int64_t>() <= 0 || rows[k].get<std::int64_t>() > 1000000)
        throw InputError(file, join_json_path(join_json_path(r.path(), "rows"), k),
                         "expected a published row id (an integer from 1 to 1000000), got " + describe_json(rows[k]));
      f.rows.push_back(rows[k].get<int>());
    }
    if (f.rows.empty()) r.fail("rows", "the row ids the value was fitted on (a non-empty array)");
    r.ignore("_comment");
    r.finish();
    if (f.entry == "defaults") {
      f.unfitted_value = f.shipped_value;
      for (const auto& [name, value] : catalog.items())
        if (name != "defaults" && is_entry(name) && value.contains(f.field)) f.entries_setting_field.push_back(name);
    } else {
      const nlohmann::json& defaults = catalog.contains("defaults") ? catalog["defaults"] : nlohmann::json();
      if (!defaults.is_object() || !defaults.contains(f.field) || !defaults[f.field].is_number())
        r.fail("field", "a field the \"defaults\" entry sets too (the value without this fit)");
      f.unfitted_value = defaults[f.field].get<double>();
    }
    for (const FittedConstant& other : out)
      if (other.field == f.field && (other.entry == f.entry || contains(other.copied_to, f.entry)))
        r.fail("entry", "one declaration per field and entry; " + f.label() + " is declared twice");
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<FittedConstant> shipped_fitted_constants() {
  const std::string file = (std::filesystem::path(planner::catalog_root()) / "scenarios/hardware/calibration.json").string();
  return read_fitted_constants(load_json_file(file), file);
}

Refit refit_on_grid(const std::vector<double>& grid, const std::vector<GridRow>& rows,
                    const std::string& left_out_source, int min_rows, double unfitted_value) {
  Refit best;
  best.value = unfitted_value;
  std::vector<const GridRow*> training;
  for (const GridRow& row : rows)
    if (left_out_source.empty() || row.source != left_out_source) training.push_back(&row);
  best.rows = static_cast<int>(training.size());
  if (best.rows < std::max(min_rows, 1)) return best;
  best.fitted = true;
  best.mean_abs_error = INFINITY;
  for (std::size_t g = 0; g < grid.size(); ++g) {
    double sum = 0;
    for (const GridRow* row : training) sum += std::fabs(row->predicted.at(g) / row->published - 1);
    const double mean = sum / best.rows;
    if (mean < best.mean_abs_error) {  // strict: the lowest grid value wins a tie
      best.mean_abs_error = mean;
      best.value = grid[g];
    }
  }
  return best;
}

LosoResult leave_one_source_out(const std::vector<std::string>& files, const std::vector<FittedConstant>& fitted,
                                int threads, const LosoProgress& progress) {
  LosoResult result;
  result.fitted = fitted;
  auto report = [&](const char* phase, int total) {
    return [&progress, phase, total](int done) {
      if (progress) progress(phase, done, total);
    };
  };

  // 1. Plain validation: the shipped values, and each row's source and GPU.
  result.in_sample.resize(files.size());
  parallel_for(static_cast<int>(files.size()), threads,
               [&](int i) { result.in_sample[i] = validate_scenario(files[i]); },
               report("validate", static_cast<int>(files.size())));

  // 2. Each constant's training rows at each of its grid points.
  std::vector<std::vector<GridRow>> grid_rows(fitted.size());
  std::vector<std::vector<double>> grids(fitted.size());
  struct GridTask {
    std::size_t constant, row;
    int point;
    const RowValidation* validated;
  };
  std::vector<GridTask> tasks;
  result.full_refit_rows_missing.assign(fitted.size(), 0);
  for (std::size_t k = 0; k < fitted.size(); ++k) {
    const FittedConstant& f = fitted[k];
    grids[k] = f.grid();
    for (int id : f.rows) {
      const RowValidation* row = nullptr;
      for (const RowValidation& r : result.in_sample)
        if (r.row_id == id && r.error.empty() && throughput_of(r)) row = &r;
      if (!row) {
        ++result.full_refit_rows_missing[k];
        continue;
      }
      if (!f.applies_to(*row))
        throw InputError(f.file, join_json_path(f.json_path, "rows"), "row " + std::to_string(id) + " (" + row->file + ", GPU " + row->gpu +
                                                ") is declared a training row of " + f.label() +
                                                ", but that value does not reach it");
      grid_rows[k].push_back({row->row_id, row->source, throughput_of(*row)->published,
                              std::vector<double>(grids[k].size(), 0.0)});
      for (std::size_t g = 0; g < grids[k].size(); ++g)
        tasks.push_back({k, grid_rows[k].size() - 1, static_cast<int>(g), row});
    }
  }
  parallel_for(
      static_cast<int>(tasks.size()), threads,
      [&](int i) {
        const GridTask& t = tasks[i];
        const double value = grids[t.constant][t.point];
        RowValidation r = validate_scenario(t.validated->file, {fitted[t.constant].override_for(value)});
        const MetricComparison* tps = throughput_of(r);
        if (!r.error.empty() || !tps)
          throw std::runtime_error(t.validated->file + " with " + fitted[t.constant].override_for(value) +
                                   ": could not be estimated: " + r.error);
        grid_rows[t.constant][t.row].predicted[t.point] = tps->predicted;
      },
      report("grid", static_cast<int>(tasks.size())));

  // 3. The refits: one per source left out, and one on every training row (the shipped fit).
  std::set<std::string> sources;
  for (const RowValidation& r : result.in_sample) sources.insert(r.source);
  for (std::size_t k = 0; k < fitted.size(); ++k)
    result.full_refits.push_back(refit_on_grid(grids[k], grid_rows[k], "", fitted[k].min_rows, fitted[k].unfitted_value));
  std::map<std::string, const SourceFold*> fold_of;
  for (const std::string& s : sources) {
    SourceFold fold{s, {}};
    for (std::size_t k = 0; k < fitted.size(); ++k)
      fold.refits.push_back(refit_on_grid(grids[k], grid_rows[k], s, fitted[k].min_rows, fitted[k].unfitted_value));
    result.folds.push_back(std::move(fold));
  }
  for (const SourceFold& fold : result.folds) fold_of[fold.source] = &fold;

  // 4. Each row predicted with its own source's refits (rows no refitted value reaches, or
  //    whose refits equal the shipped values, keep their plain prediction).
  result.loso = result.in_sample;
  std::vector<std::pair<std::size_t, std::vector<std::string>>> predictions;
  for (std::size_t i = 0; i < result.in_sample.size(); ++i) {
    const RowValidation& row = result.in_sample[i];
    if (!row.error.empty()) continue;
    std::vector<std::string> overrides;
    bool changed = false;
    for (std::size_t k = 0; k < fitted.size(); ++k) {
      if (!fitted[k].applies_to(row)) continue;
      const double value = fold_of.at(row.source)->refits[k].value;
      overrides.push_back(fitted[k].override_for(value));
      changed = changed || value != fitted[k].shipped_value;
    }
    if (changed) predictions.emplace_back(i, overrides);
  }
  parallel_for(
      static_cast<int>(predictions.size()), threads,
      [&](int i) {
        const auto& [index, overrides] = predictions[i];
        RowValidation r = validate_scenario(result.in_sample[index].file, overrides);
        r.scenario_calibration_fields = result.in_sample[index].scenario_calibration_fields;
        result.loso[index] = std::move(r);
      },
      report("predict", static_cast<int>(predictions.size())));
  return result;
}

ThroughputSummary summarise_throughput(const std::vector<RowValidation>& rows, double bound, const std::string& source,
                                       std::optional<bool> holdout) {
  ThroughputSummary s;
  double abs_sum = 0, signed_sum = 0;
  for (const RowValidation& r : rows) {
    if (!source.empty() && r.source != source) continue;
    if (holdout && r.holdout != *holdout) continue;
    const MetricComparison* m = throughput_of(r);
    if (!m) continue;
    const double err = m->signed_error();
    ++s.rows;
    abs_sum += std::fabs(err);
    signed_sum += err;
    if (std::fabs(err) <= bound) ++s.within_bound;
  }
  if (s.rows) {
    s.mean_abs_error = abs_sum / s.rows;
    s.mean_signed_error = signed_sum / s.rows;
  }
  return s;
}

std::vector<std::string> check_loso_bounds(const LosoResult& result, const LosoBounds& b) {
  std::vector<std::string> violations;
  char buf[256];
  for (const RowValidation& r : result.loso)
    if (!r.error.empty()) violations.push_back(r.file + ": could not be estimated: " + r.error);
  const ThroughputSummary dev = summarise_throughput(result.loso, b.row_bound, "", false);
  if (dev.rows == 0) return violations;
  if (dev.mean_abs_error > b.mean_abs_error) {
    std::snprintf(buf, sizeof buf, "mean |tokens/s error| on the %d dev rows is %.1f%% (need <= %.1f%%)",
                  dev.rows, dev.mean_abs_error * 100, b.mean_abs_error * 100);
    violations.push_back(buf);
  }
  if (dev.within_bound < b.within_fraction * dev.rows - 1e-9) {
    std::snprintf(buf, sizeof buf, "%d of %d dev rows (%.0f%%) within %.0f%% (need >= %.0f%%)",
                  dev.within_bound, dev.rows, 100.0 * dev.within_bound / dev.rows, b.row_bound * 100,
                  b.within_fraction * 100);
    violations.push_back(buf);
  }
  for (const SourceFold& fold : result.folds) {
    const ThroughputSummary s = summarise_throughput(result.loso, b.row_bound, fold.source, false);
    if (s.rows > 0 && std::fabs(s.mean_signed_error) > b.source_bias) {
      std::snprintf(buf, sizeof buf, "source %s has a mean signed error of %+.1f%% on its %d dev rows (need within +-%.1f%%)",
                    fold.source.c_str(), s.mean_signed_error * 100, s.rows, b.source_bias * 100);
      violations.push_back(buf);
    }
  }
  return violations;
}

nlohmann::json loso_json(const LosoResult& result, const LosoBounds& b) {
  auto summary = [&](const std::vector<RowValidation>& rows, const std::string& source, std::optional<bool> holdout) {
    const ThroughputSummary s = summarise_throughput(rows, b.row_bound, source, holdout);
    return nlohmann::json{{"rows", s.rows}, {"mean_abs_error", s.mean_abs_error},
                          {"mean_signed_error", s.mean_signed_error}, {"within_bound", s.within_bound}};
  };
  auto refit_json = [](const Refit& r) {
    return nlohmann::json{{"value", r.value}, {"rows", r.rows}, {"fitted", r.fitted}, {"mean_abs_error", r.mean_abs_error}};
  };
  nlohmann::json out;
  out["nothing_fitted"] = result.fitted.empty();
  out["row_bound"] = b.row_bound;
  out["fitted"] = nlohmann::json::array();
  for (std::size_t k = 0; k < result.fitted.size(); ++k) {
    const FittedConstant& f = result.fitted[k];
    nlohmann::json j = {{"field", f.field}, {"entry", f.entry}, {"copied_to", f.copied_to},
                        {"grid", {{"from", f.grid_from}, {"to", f.grid_to}, {"step", f.grid_step}}},
                        {"objective", f.objective}, {"min_rows", f.min_rows}, {"rows", f.rows},
                        {"shipped_value", f.shipped_value}, {"unfitted_value", f.unfitted_value},
                        {"refit_on_all_rows", refit_json(result.full_refits[k])},
                        {"declared_rows_missing", result.full_refit_rows_missing[k]}};
    if (result.full_refit_rows_missing[k] == 0) j["reproduces_shipped_value"] = result.full_refits[k].value == f.shipped_value;
    out["fitted"].push_back(j);
  }
  for (const SourceFold& fold : result.folds) {
    nlohmann::json j;
    j["leave_one_source_out"] = summary(result.loso, fold.source, std::nullopt);
    j["leave_one_source_out_dev"] = summary(result.loso, fold.source, false);
    j["in_sample"] = summary(result.in_sample, fold.source, std::nullopt);
    j["refits"] = nlohmann::json::object();
    for (std::size_t k = 0; k < result.fitted.size(); ++k) j["refits"][result.fitted[k].label()] = refit_json(fold.refits[k]);
    out["by_source"][fold.source] = j;
  }
  for (const auto& [name, holdout] : {std::pair<const char*, std::optional<bool>>{"all", std::nullopt},
                                      {"dev", false}, {"holdout", true}}) {
    out["overall"]["leave_one_source_out"][name] = summary(result.loso, "", holdout);
    out["overall"]["in_sample"][name] = summary(result.in_sample, "", holdout);
  }
  out["rows"] = nlohmann::json::array();
  for (std::size_t i = 0; i < result.loso.size(); ++i) {
    const MetricComparison* plain = throughput_of(result.in_sample[i]);
    const MetricComparison* loso = throughput_of(result.loso[i]);
    if (!plain || !loso) continue;
    out["rows"].push_back({{"row_id", result.loso[i].row_id}, {"name", result.loso[i].name},
                           {"source", result.loso[i].source}, {"gpu", result.loso[i].gpu},
                           {"holdout", result.loso[i].holdout}, {"published", plain->published},
                           {"in_sample_predicted", plain->predicted}, {"in_sample_error", plain->signed_error()},
                           {"predicted", loso->predicted}, {"signed_error", loso->signed_error()}});
  }
  out["bounds"] = {{"mean_abs_error", b.mean_abs_error}, {"row_bound", b.row_bound},
                   {"within_fraction", b.within_fraction}, {"source_bias", b.source_bias}, {"rows", "dev (not holdout)"}};
  out["violations"] = check_loso_bounds(result, b);
  return out;
}

}  // namespace fsdpsim::sim
