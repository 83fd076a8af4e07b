#include "sim/validation.h"

#include <cmath>
#include <filesystem>
#include <set>

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

}  // namespace

RowValidation validate_scenario(const std::string& file) {
  RowValidation row;
  row.file = file;
  row.source = source_of(file);
  try {
    planner::Scenario scenario = planner::load_scenario(file);
    row.name = scenario.name;
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
    auto number = [&](const nlohmann::json& j, const char* key) -> std::optional<double> {
      if (excluded.count(key)) return std::nullopt;
      return fsdpsim::sim::number(j, key);
    };
    Estimate e = estimate_step(scenario);
    row.predicted_fits = e.fits();
    row.predicted_mfu = e.timing.mfu;
    if (auto tps = number(p, "tokens_per_second_per_gpu"))
      row.metrics.push_back({"tokens_per_second_per_gpu", *tps, e.timing.tokens_per_second_per_gpu});
    if (auto step = number(p, "step_time_seconds"))
      row.metrics.push_back({"step_time_seconds", *step, e.timing.step_seconds});
    if (auto mem = number(p, "peak_memory_bytes")) {
      const std::string metric = p.value("peak_memory_metric", "");
      if (metric == "allocated")
        row.metrics.push_back({"peak_allocated_bytes", *mem, static_cast<double>(e.memory.peak_allocated_bytes)});
      else if (metric == "reserved")
        row.metrics.push_back({"peak_reserved_bytes", *mem, static_cast<double>(e.memory.peak_reserved_bytes)});
      else
        throw InputError(file, "published.peak_memory_metric", "expected \"allocated\" or \"reserved\"");
    }
  } catch (const std::exception& ex) {
    row.error = ex.what();
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
    nlohmann::json j = {{"file", r.file}, {"name", r.name}, {"source", r.source}, {"row_id", r.row_id},
                        {"holdout", r.holdout}, {"predicted_fits", r.predicted_fits}, {"predicted_mfu", r.predicted_mfu}};
    for (const auto& [metric, reason] : r.excluded) j["excluded"][metric] = reason;
    if (r.published_oom) j["published_oom"] = *r.published_oom;
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

}  // namespace fsdpsim::sim
