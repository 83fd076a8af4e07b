// Predicted against published: the accuracy check behind `fsdpsim validate`.
//
// Each published scenario carries the figures of a real run ("published": tokens/s per
// GPU, step time, peak memory with its metric). We predict the same step and compare like
// with like: throughput with throughput, allocated with allocated, reserved with reserved.
// Rows marked "holdout" never informed any constant; they are summarised apart.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace fsdpsim::sim {

struct MetricComparison {
  std::string metric;  // "tokens_per_second_per_gpu", "step_time_seconds", "peak_allocated_bytes", "peak_reserved_bytes"
  double published = 0;
  double predicted = 0;
  double signed_error() const { return (predicted - published) / published; }
};

struct RowValidation {
  std::string file;
  std::string name;
  std::string source;  // the publisher group (torchtitan, ibm-blog, ...)
  int row_id = 0;
  bool holdout = false;
  std::vector<MetricComparison> metrics;
  // Published figures left out of the comparison, with the reason (the scenario's
  // "published.excluded": {metric: reason}), e.g. a figure the source's own caveats make
  // unusable. Shown, never scored.
  std::vector<std::pair<std::string, std::string>> excluded;
  // Runs the publisher reports as out of memory: we check that we predict no fit.
  std::optional<bool> published_oom;
  bool predicted_fits = true;
  double predicted_mfu = 0;
  std::string error;  // set when the scenario could not be estimated
};

RowValidation validate_scenario(const std::string& file);

struct MetricSummary {
  int rows = 0;
  double mean_abs_error = 0;  // mean |signed error|
  double worst_error = 0;     // signed, largest magnitude
  std::string worst_row;
  double within(double bound, const std::vector<double>& errors) const;
  int within_bound = 0;  // rows with |error| <= the metric's bound
};

// Summary of one metric over rows (filtered by source and/or holdout).
MetricSummary summarise(const std::vector<RowValidation>& rows, const std::string& metric, double bound,
                        const std::string& source = "", std::optional<bool> holdout = std::nullopt);

// The bounds the accuracy CTest enforces (issue "Accuracy against published runs"):
// throughput within 15% for >= 80% of rows and mean |error| < 10%; memory within 10%.
struct AccuracyBounds {
  double throughput_row_bound = 0.15;
  double throughput_fraction = 0.80;
  double throughput_mean_bound = 0.10;
  double memory_row_bound = 0.10;
};
// Empty when every bound holds, else one line per violation.
std::vector<std::string> check_bounds(const std::vector<RowValidation>& rows, const AccuracyBounds& bounds = {});

nlohmann::json validation_json(const std::vector<RowValidation>& rows);

}  // namespace fsdpsim::sim
