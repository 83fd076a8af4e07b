// `fsdpsim sweep`: evaluate many configurations (points of a planner::SweepSpace) on a
// thread pool over the analytic engine, rank them, find the Pareto front of memory vs
// throughput and recommend one.
//
// Determinism: results are stored by point index and every ordering breaks ties by index,
// so the output is the same for any number of threads. Each worker owns its evaluator
// (and its caches) and a ScenarioInstancer (its copy of the model).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "planner/scenario.h"
#include "planner/sweep_space.h"

namespace fsdpsim::sim {

// What a sweep reports of one configuration.
struct PointMetrics {
  std::int64_t peak_allocated_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;
  std::int64_t model_state_bytes = 0;
  double device_overhead_bytes = 0;  // CUDA context + NCCL, outside the caching allocator
  double gpu_memory_bytes = 0;
  double device_peak_bytes = 0;      // reserved + device overhead: what must fit in the GPU
  double step_seconds = 0;
  double compute_seconds = 0;
  double exposed_comm_seconds = 0;
  double optimizer_seconds = 0;
  double tokens_per_second_per_gpu = 0;
  double mfu = 0;
  int units = 0;
  std::vector<double> exposed_comm_by_unit;  // index = unit (0 = root)
};

// Times one scenario. One instance per worker thread; it may keep caches between calls.
class Evaluator {
 public:
  virtual ~Evaluator() = default;
  // `cost_key` names everything the cost model depends on (cluster, calibration, compute
  // dtype, model): equal keys may share a cost model. "" means "do not cache".
  virtual PointMetrics evaluate(const planner::Scenario& scenario, const std::string& cost_key = "") = 0;
  virtual std::string name() const = 0;
};
using EvaluatorFactory = std::function<std::unique_ptr<Evaluator>()>;

// plan_step + replay_memory + the analytic engine: what sim::estimate_step computes
// (without the timed memory timeline), with the cost model, its NCCL estimates and the
// planner's layouts (planner::PlanCache) cached per cost_key.
std::unique_ptr<Evaluator> make_analytic_evaluator();
// The metrics of a full estimate (for comparison with estimate_step).
PointMetrics metrics_of(const planner::Scenario& scenario);

enum class Objective { throughput, step_time, memory };
std::string to_string(Objective o);
Objective parse_objective(const std::string& name);  // throws std::invalid_argument

struct SweepOptions {
  int threads = 0;              // 0: std::thread::hardware_concurrency()
  double headroom_bytes = 0;    // fits: device peak + headroom <= GPU memory
  Objective objective = Objective::throughput;
  // The recommendation prefers the configuration with the least memory among those within
  // this fraction of the best objective value (0: strictly the best).
  double tolerance = 0.01;
  const std::atomic<bool>* cancel = nullptr;  // set (e.g. on SIGINT): finish the points in hand, stop
  // Called after each point from the worker that finished it (keep it cheap and thread-safe).
  std::function<void(std::size_t done, std::size_t total)> progress;
  EvaluatorFactory evaluator;  // default: make_analytic_evaluator
};

enum class PointStatus { ok, skipped, failed, not_run };
std::string to_string(PointStatus s);

struct PointResult {
  std::size_t index = 0;
  std::vector<int> choice;             // value index per axis
  std::vector<std::string> overrides;  // the point's --set assignments (after the base ones)
  std::string label;
  PointStatus status = PointStatus::not_run;
  std::string reason;                  // skipped / failed: why
  PointMetrics metrics;
  bool fits = false;
  double overage_bytes = 0;            // device peak + headroom - GPU memory (> 0: does not fit)
  // The top points re-simulated by another engine (SimGrid): its timing, when it ran.
  std::optional<PointMetrics> resimulated;
  std::string resimulation_note;       // which engine, or why it did not run
};

struct Recommendation {
  bool found = false;
  std::size_t point = 0;
  std::string why;
};

struct SweepResult {
  planner::SweepSpace space;         // the axes (labels for reports)
  std::vector<PointResult> points;   // in point order
  std::vector<std::size_t> ranking;  // evaluated points, best first: those that fit by the objective, then the rest by overage
  std::vector<std::size_t> pareto;   // memory vs throughput front (of the points that fit; of all when none fits), memory ascending
  Recommendation recommendation;
  std::optional<std::size_t> smallest_overage;  // when nothing fits: the point closest to fitting
  std::vector<std::size_t> resimulated_ranking;  // the re-simulated points, best first by their new timing
  std::size_t evaluated = 0, skipped = 0, failed = 0, fitting = 0;
  bool interrupted = false;
  int threads = 1;
  double wall_seconds = 0;
  double headroom_bytes = 0;
  Objective objective = Objective::throughput;
};

// Evaluates every point of `space` over `base` (base overrides first, then the point's).
SweepResult run_sweep(std::shared_ptr<const planner::ScenarioTemplate> base, const planner::SweepSpace& space,
                      const SweepOptions& options);

// Ranking, Pareto front, recommendation and smallest overage from the points' metrics
// (run_sweep calls it; call again after re-simulation).
void rank_points(SweepResult& result, double tolerance);

// Re-simulation of the top points by a more detailed engine (SimGrid). The hook returns the
// engine's metrics for a point, or nullopt with `note` saying why it could not. Memory comes
// from the schedule and is the same in every engine; the timing is replaced.
using Resimulator = std::function<std::optional<PointMetrics>(const PointResult& point, std::string& note)>;
// Re-simulates the first `k` points of the ranking that fit, then orders them by the new
// timing (resimulated_ranking) and recommends the best of them.
void resimulate_top(SweepResult& result, std::size_t k, const Resimulator& resimulate, double tolerance);

// The SimGrid engine as a Resimulator (sim/sweep_resimulate.cpp): each point's scenario
// (`base` with the point's overrides) is planned and priced here and played by
// simulate_simgrid, which runs every simulation in its own forked child.
Resimulator simgrid_resimulator(std::shared_ptr<const planner::ScenarioTemplate> base);

// When nothing fits: "No configuration fits: every evaluated point exceeds X GiB (GPU ... -
// headroom ...). The smallest overage is Y GiB at #k (label) (device peak Z GiB)." ("" otherwise).
std::string no_fit_message(const SweepResult& result);

// The key an evaluator may cache cost models under: the point's overrides that can change
// the cost model (all but the training batch / checkpointing fields and fsdp.* other than
// fsdp.wrap, whose block types the eager factor reads).
std::string cost_key_of(const std::vector<std::string>& overrides);

}  // namespace fsdpsim::sim
