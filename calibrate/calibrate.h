// `fsdpsim calibrate`: micro-benchmarks through the runtime's backends, and the fits that
// turn them into a calibration the cost model reads (planner::Calibration, the schema of
// scenarios/hardware/calibration.json and of a scenario's "calibration").
//
//   measure(scenario, options)  GEMMs (bf16, fp32) over the model's layer shapes and a square
//                               grid, memory copy bandwidth, all-gather / reduce-scatter /
//                               all-reduce over a size grid for every process-group span the
//                               scenario's schedule uses, per-op launch overhead, and a GEMM's
//                               slowdown beside a collective. Warm-up, repetitions, medians.
//   fit(scenario, measurements) per collective and span a robust latency + bandwidth line
//                               t = alpha + bytes * factor / busbw, split into up to three
//                               segments (NCCL's LL / LL128 / Simple protocols) where the data
//                               says so; the GEMM model's ceiling (planner/gemm_model.h)
//                               solved on the largest measured GEMM, every other measured
//                               shape a check of the model; the interference factor.
//   calibration_json(fit)       the calibration object, with a "fit" section (goodness of fit:
//                               the written model's error against every measurement).
//
// Backends: "cuda" plays every benchmark as a Schedule through runtime::run_schedule (cuBLAS
// GEMMs, device copies, NCCL) on the GPUs of one node; spans across nodes need a multi-node
// launch the runtime does not have and are skipped with a note. "host" plays the collectives
// and the launch overhead through the runtime's host backend (threads as ranks, shared-memory
// collectives that move real bytes) and runs GEMMs and copies as real CPU work here, since the
// host backend's compute only waits; its numbers describe this CPU, not a GPU. docs/calibration.md.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/bytes_text.h"  // bytes_text: buffer sizes in progress lines, notes and tables
#include "planner/collectives.h"
#include "planner/cost_model.h"
#include "planner/scenario.h"
#include "planner/schedule.h"

namespace fsdpsim::calibrate {

// ---- measurements -----------------------------------------------------------------------------

// Repetitions of one benchmark: the median and the spread around it.
struct Stats {
  double median_seconds = 0;
  double min_seconds = 0;
  double max_seconds = 0;
  int repetitions = 0;
  double spread() const { return median_seconds > 0 ? (max_seconds - min_seconds) / median_seconds : 0; }
};
Stats stats_of(std::vector<double> seconds);

struct GemmShape {
  std::int64_t m = 0, n = 0, k = 0;  // C[m,n] = A[m,k] B[k,n]
  std::string label;                 // "layers.*.mlp.up_proj" or "square 1024"
  double flops() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k); }
  std::string dims() const { return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k); }  // "MxNxK"
};

struct GemmMeasurement {
  GemmShape shape;
  std::string dtype;  // "bf16" or "fp32"
  Stats time;
  double peak_flops = 0;  // the scenario GPU's dense peak for the dtype (the efficiency's denominator)
  double efficiency() const { return time.median_seconds > 0 ? shape.flops() / time.median_seconds / peak_flops : 0; }
};

struct CopyMeasurement {
  double bytes = 0;  // copied; the traffic is 2x (read + write)
  Stats time;
  double bytes_per_second() const { return time.median_seconds > 0 ? 2 * bytes / time.median_seconds : 0; }
};

struct CollectiveMeasurement {
  planner::CollectiveKind kind = planner::CollectiveKind::all_gather;
  planner::CollectiveGroup span;  // ranks over nodes
  double bytes = 0;               // the buffer as NCCL counts it (gathered size for all-gather)
  Stats time;
};

struct InterferenceMeasurement {
  Stats gemm_alone;
  Stats gemm_beside_collective;
  std::string collective;  // what ran beside it
};

struct Measurements {
  std::string backend;  // "host" or "cuda"
  std::string device;   // what ran it, in words
  std::string gpu;      // the scenario's GPU (whose peaks the efficiencies divide by)
  std::vector<GemmMeasurement> gemms;
  // cuda: the GEMMs of the scenario's step at their own shapes (step_gemm_shapes), timed one by
  // one: calibration_json writes them as the calibration's measured "gemm_table".
  std::vector<GemmMeasurement> step_gemms;
  std::vector<CopyMeasurement> copies;
  std::vector<CollectiveMeasurement> collectives;
  Stats launch;  // seconds per op for a stream of trivial ops (issue + launch + completion)
  int launch_ops = 0;
  std::vector<InterferenceMeasurement> interference;
  std::vector<std::string> notes;  // what was capped or skipped, and why
  bool reports = true;             // false on the processes other than 0 of an mpi launch
  // True when every instance of a span's group ran at once (mpi: the scenario's whole world),
  // false when one instance ran alone (one process): decides how NIC sharing is read.
  bool side_by_side = false;
  nlohmann::json to_json() const;
};

struct Options {
  std::string backend = "host";  // "host" or "cuda"
  int warmup = 1;                // repetitions before timing
  int repetitions = 5;           // timed repetitions (medians over these)
  double min_bytes = 1024;       // collective sizes: min_bytes, x size_step, ... up to max_bytes
  double max_bytes = 4.0 * (1ull << 30);
  double size_step = 2;
  // host: collectives larger than this are not run (real bytes through shared memory on this
  // CPU); said in the notes. 0 = no cap.
  double host_max_bytes = 16 << 20;
  // host: GEMM shapes are scaled down (every dimension by one factor) to at most this many
  // FLOPs, and copies to at most host_max_copy_bytes; said in the notes.
  double host_max_gemm_flops = 2e8;
  double host_max_copy_bytes = 64 << 20;
  int host_max_ranks = 16;  // host: spans with more ranks (threads) are skipped
  std::vector<std::int64_t> square_gemm_dims = {256, 512, 1024, 2048, 4096, 8192};
  double timeout_seconds = 120;  // any single wait inside the runtime
  int first_device = 0;          // cuda
  // How ranks map to processes (runtime/launch.h), resolved by the caller: "single" (this
  // process plays every rank of each benchmark) or "mpi" (one process per rank of the
  // scenario's world under mpirun / srun: every benchmark schedule spans the whole world, its
  // process groups tiled over it as in the scenario; process 0 alone gets every rank's times).
  std::string launcher = "single";
  int processes = 1;
  int process_rank = 0;
  std::function<void(const std::string&)> progress;  // one line per benchmark (stderr in the CLI)
};

// The GEMMs of one micro-batch of the scenario's model: one per distinct 2-D weight shape of a
// linear layer (M = micro_batch x seq_len tokens, K = in features, N = out features).
std::vector<GemmShape> model_gemm_shapes(const planner::Scenario& scenario);

// The distinct GEMMs the scenario's step runs (the kernel sets of its plan: every projection's
// forward, input-gradient and weight-gradient GEMM, by (m, n, k) and whether it is fp8).
std::vector<planner::GemmShape> step_gemm_shapes(const planner::Scenario& scenario);

// The measured gemm_table of a calibration (planner::Calibration::gemm_table's schema) from
// Measurements::step_gemms: one row per shape, median seconds. Empty array when none.
nlohmann::json gemm_table_json(const Measurements& measurements);

// The process-group spans the scenario's schedule uses (distinct ranks/nodes with > 1 rank),
// each with the name of the first group that has it (which fixes how its instances tile the
// world: runtime::group_instances).
std::vector<planner::ProcessGroup> scenario_spans(const planner::Scenario& scenario);

// Runs every benchmark. Throws runtime::RuntimeError / std::runtime_error when the backend
// cannot run (no CUDA device, the runtime built without CUDA), InputError for bad options.
Measurements measure(const planner::Scenario& scenario, const Options& options);

// ---- fits ---------------------------------------------------------------------------------------

// t = alpha + x * inv_bandwidth (x: bytes on the bus, bytes x factor), fitted by iteratively
// reweighted least squares on relative residuals (Huber weights), alpha >= 0.
struct LineFit {
  double alpha_seconds = 0;
  double seconds_per_byte = 0;  // 1 / bandwidth
  int points = 0;
  double bandwidth_bytes_per_second() const { return seconds_per_byte > 0 ? 1 / seconds_per_byte : 0; }
  double at(double x) const { return alpha_seconds + x * seconds_per_byte; }
};
LineFit fit_line(const std::vector<double>& x, const std::vector<double>& t);

// Up to `max_segments` contiguous segments over x (sorted), each its own line, chosen by BIC:
// NCCL's protocols (LL, LL128, Simple) each give one line and NCCL runs the fastest, so the
// measured curve is piecewise linear, each later segment with more bandwidth and more latency.
// crossovers_x: where consecutive segments' lines meet.
struct PiecewiseFit {
  std::vector<LineFit> segments;
  std::vector<double> segment_min_x, segment_max_x;
  std::vector<double> crossovers_x;
  double at(double x) const;  // the segment whose range holds x (nearest at the ends)
};
PiecewiseFit fit_piecewise(const std::vector<double>& x, const std::vector<double>& t, int max_segments = 3,
                           int min_points_per_segment = 3);

// The GEMM model's ceiling (planner/gemm_model.h: large_gemm_efficiency, what the cost model's
// matmul_efficiency feeds) that makes the model give one measured GEMM's time: the model with
// this ceiling reproduces that measurement, and every other measured shape is a held-out check
// of the model on this GPU. `device` is the GPU's GemmDevice (its ceiling is ignored). Capped at
// 1 (`capped`) when the measurement is faster than the model can be at the dense peak.
struct GemmCeiling {
  double efficiency = 0;
  bool capped = false;
};
GemmCeiling solve_gemm_ceiling(const planner::GemmShape& shape, double measured_seconds, planner::GemmDevice device);

// Per measured dtype: the ceiling, the GEMM it was solved on and how many were measured.
struct GemmCeilingFit {
  std::string dtype;
  GemmCeiling ceiling;
  GemmShape solved_on;
  int points = 0;
};

// Compute slowdown under a collective: median over pairs of with / alone, minus 1, >= 0.
double fit_interference(const std::vector<double>& alone_seconds, const std::vector<double>& beside_seconds);

struct CollectiveFit {
  planner::CollectiveKind kind;
  planner::CollectiveGroup span;
  PiecewiseFit fit;  // x = bytes x bus_factor
};

struct FitError {
  std::string what;  // "all_gather 8 ranks / 1 node", "gemm bf16", ...
  std::string item;  // size or shape
  double measured = 0;
  double fitted = 0;
  double error() const { return measured != 0 ? (fitted - measured) / measured : 0; }
};

struct FitResult {
  planner::Calibration calibration;  // the defaults for the scenario's GPU with every fitted field set
  std::vector<CollectiveFit> collectives;
  std::vector<GemmCeilingFit> gemm_ceilings;  // per measured dtype
  double hbm_bytes_per_second = 0;
  double launch_seconds = 0;
  double interference = 0;
  std::vector<FitError> errors;  // the written calibration against every measurement
  std::vector<std::string> notes;
  std::vector<std::string> fitted_fields;  // the calibration fields the measurements set
};
FitResult fit(const planner::Scenario& scenario, const Measurements& measurements);

// The calibration object (same schema as a scenario's "calibration") plus "gpu", "fit"
// (fits, goodness of fit, the measurements' medians) and "sources" for every fitted field.
nlohmann::json calibration_json(const FitResult& fit, const Measurements& measurements);

// The goodness-of-fit table: per group, measurements, max and median |error|; then each row.
std::string fit_table(const FitResult& fit, bool every_row);

// "16 ranks / 2 nodes": a process-group span.
std::string span_text(const planner::CollectiveGroup& span);

// Max and median |error| per group of FitResult::errors, in first-seen order.
struct ErrorSummary {
  std::string what;
  int points = 0;
  double max_abs_error = 0;
  double median_abs_error = 0;
};
std::vector<ErrorSummary> summarize_errors(const std::vector<FitError>& errors);

}  // namespace fsdpsim::calibrate
