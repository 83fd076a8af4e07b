// Predicted against published: the accuracy check behind `fsdpsim validate`.
//
// Each published scenario carries the figures of a real run ("published": tokens/s per
// GPU, step time, peak memory with its metric). We predict the same step and compare like
// with like: throughput with throughput, allocated with allocated, reserved with reserved.
// Rows marked "holdout" never informed any constant; they are summarised apart.
#pragma once

#include <exception>
#include <functional>
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
  std::string gpu;     // the cluster's GPU type (the calibration entry that applies to it)
  // Fields the scenario's own "calibration" sets: a catalog value of these does not reach the row.
  std::vector<std::string> scenario_calibration_fields;
  int row_id = 0;
  bool holdout = false;
  std::vector<MetricComparison> metrics;
  // Published figures left out of the comparison, with the reason (the scenario's
  // "published.excluded": {metric: reason}), e.g. a figure the source's own caveats make
  // unusable. Shown, never scored.
  std::vector<std::pair<std::string, std::string>> excluded;
  // Runs the publisher reports as out of memory: we check that we predict no fit.
  std::optional<bool> published_oom;
  bool predicted_fits = true;  // meaningful only without an error (JSON: null then)
  double predicted_mfu = 0;
  // The published MFU, shown beside the prediction and never scored: sources count MFU's FLOPs
  // differently (torchtitan counts attention's whole square, fsdpsim the pairs a causal kernel
  // computes; some leave attention out), so a row is judged on tokens/s, which they all measure.
  std::optional<double> published_mfu;
  std::string error;  // set when the scenario could not be estimated
  // What ended the estimate, for the command line to rethrow once the report is out: a file
  // that cannot be estimated is bad input (exit 2), not a row that merely missed its bound.
  std::exception_ptr failure;
};

// `overrides` as `fsdpsim estimate --set` takes them ("calibration.step_matmul_fraction=0.8").
RowValidation validate_scenario(const std::string& file, const std::vector<std::string>& overrides = {});

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

// ---- Leave one source out (issue 13) ---------------------------------------------------------
// End-to-end rows judge the model; where a constant was fitted to them, the figure that counts
// is one on rows the fit did not see. For each source S, every declared constant is refitted on
// its training rows not from S (same grid, same objective), and S's rows are predicted with the
// refitted values. Each constant is refitted on its own, every other value as shipped, as the
// shipped fits were made.

// One calibration value fitted to published rows, as scenarios/hardware/calibration.json
// declares it under "fitted".
struct FittedConstant {
  std::string file, json_path;         // where it is declared, for errors
  std::string field;                   // a calibration field, e.g. "step_matmul_fraction"
  std::string entry;                   // the catalog entry it is set in: a GPU name, or "defaults"
  std::vector<std::string> copied_to;  // entries that carry the fitted value without a fit of their own
  double grid_from = 0, grid_to = 0, grid_step = 0;
  std::string objective;   // "mean |tokens/s error|", the only one
  std::vector<int> rows;   // the rows the shipped value was fitted on: the training rows
  int min_rows = 1;        // with fewer training rows there is no fit: the field takes unfitted_value
  double shipped_value = 0;
  // The value without this fit: the "defaults" entry's (a "defaults" fit keeps its shipped value,
  // and says so, since the catalog has nothing under it).
  double unfitted_value = 0;
  // For a "defaults" fit: the GPU entries that set the field themselves (their rows are out of scope).
  std::vector<std::string> entries_setting_field;

  std::string label() const { return field + "@" + entry; }
  std::vector<double> grid() const;
  // Whether the row's prediction uses this value: the row's GPU is the entry (or carries its copy;
  // for "defaults", its GPU's entry does not set the field) and its scenario does not set the field.
  bool applies_to(const RowValidation& row) const;
  std::string override_for(double value) const;  // "calibration.<field>=<value>"
};

// The "fitted" array of a calibration catalog (InputErrors name `file` and the JSON path).
std::vector<FittedConstant> read_fitted_constants(const nlohmann::json& catalog, const std::string& file);
// Those of the shipped scenarios/hardware/calibration.json.
std::vector<FittedConstant> shipped_fitted_constants();

// One training row of a constant: its throughput predicted at every grid point.
struct GridRow {
  int row_id = 0;
  std::string source;
  double published = 0;            // tokens/s per GPU
  std::vector<double> predicted;   // tokens/s per GPU, one per grid point
};

struct Refit {
  double value = 0;
  int rows = 0;             // training rows used
  bool fitted = false;      // false: fewer than min_rows rows, value is the unfitted one
  double mean_abs_error = 0;  // on the training rows, at `value`
};

// The grid value with the least mean |tokens/s error| over `rows` not from `left_out_source`
// (empty: every row); the lowest such value on a tie.
Refit refit_on_grid(const std::vector<double>& grid, const std::vector<GridRow>& rows,
                    const std::string& left_out_source, int min_rows, double unfitted_value);

struct SourceFold {
  std::string source;
  std::vector<Refit> refits;  // one per fitted constant, in declaration order
};

struct LosoResult {
  std::vector<FittedConstant> fitted;
  std::vector<RowValidation> in_sample;  // plain validate: the shipped values
  std::vector<RowValidation> loso;       // the same rows, each predicted with its source's refits
  std::vector<SourceFold> folds;         // by source name
  // Per constant: the refit on all its training rows that were loaded. With every declared row
  // loaded it must give the shipped value, or the declaration is not how the value was made.
  std::vector<Refit> full_refits;
  std::vector<int> full_refit_rows_missing;  // per constant: declared rows not among the files
};

// phase: "validate", "grid", "predict"; done of total in that phase. Called from one thread.
using LosoProgress = std::function<void(const std::string& phase, int done, int total)>;

// Runs plain validation, the grids and the refitted predictions on `threads` threads (0: all cores).
LosoResult leave_one_source_out(const std::vector<std::string>& files, const std::vector<FittedConstant>& fitted,
                                int threads = 0, const LosoProgress& progress = {});

// Throughput figures of one group of rows.
struct ThroughputSummary {
  int rows = 0;
  double mean_abs_error = 0;
  double mean_signed_error = 0;  // the bias: + over-predicts
  int within_bound = 0;
};
// Over the rows with a throughput figure, of `source` (empty: all) and holdout flag (nullopt: both).
ThroughputSummary summarise_throughput(const std::vector<RowValidation>& rows, double bound,
                                       const std::string& source = "", std::optional<bool> holdout = std::nullopt);

// The bounds `validate --leave-one-source-out --check` enforces on the development (non-holdout)
// rows' leave-one-source-out predictions (issue 13).
struct LosoBounds {
  double mean_abs_error = 0.07;  // mean |tokens/s error| at most this
  double row_bound = 0.15;       // a row is "within" when |error| <= this ...
  double within_fraction = 0.85; // ... and at least this share of rows is
  double source_bias = 0.08;     // no source's mean signed error beyond +-this
};
// Empty when every bound holds, else one line per violation.
std::vector<std::string> check_loso_bounds(const LosoResult& result, const LosoBounds& bounds = {});

nlohmann::json loso_json(const LosoResult& result, const LosoBounds& bounds = {});

}  // namespace fsdpsim::sim
