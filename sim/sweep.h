// `fsdpsim sweep`: evaluate many configurations (points of a planner::SweepSpace) on a
// thread pool over the analytic engine, rank them, find the Pareto front of memory vs
// throughput and recommend one.
//
// Streaming: a sweep keeps only what its report needs (the top of the ranking, the Pareto
// front, the points that can still be recommended, the first skipped ones), never every point;
// each finished point goes, in point order, to an optional sink (a CSV or JSON writer), so
// memory does not grow with the number of points (docs/reliability.md: 10^6 points in
// well under 1 GiB). Ranks of every point, for the CSV's and JSON's `rank` column, cost
// 16 bytes a point when asked for (SweepOptions::rank_every_point).
//
// Determinism: points reach the ranking in point order whatever thread finished them, and every
// ordering breaks ties by index, so the output is the same for any number of threads. Each
// worker owns its evaluator (and its caches); the points share the template's parsed models.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "planner/scenario.h"
#include "planner/sweep_space.h"
#include "sim/resource_guard.h"

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
  // The memory replay gave up past a ClosestOverage (make_memory_first_evaluator): the memory
  // figures are lower bounds, the overage too, and it is more than the closest one's.
  bool memory_lower_bound = false;
  // Times the allocator model freed its cache to fit the step (MemoryReport::allocator_retries).
  std::int64_t allocator_retries = 0;
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
// (without the timed memory timeline), with the cost model and its NCCL estimates cached per
// cost_key, and the planner's layouts per model, wrap and checkpointing (the calling thread's,
// planner::thread_plan_cache).
std::unique_ptr<Evaluator> make_analytic_evaluator();
// The same, but a point that does not fit with `headroom_bytes` to spare (as the sweep judges
// the fit) is not timed: its memory figures and units only, every timing figure 0. For searches
// that look only at the points that fit and at the overage of the rest (sim/advice.h), where
// timing is most of a point that does not fit. Its errors are the memory's alone: a point whose
// timing would fail is evaluated when it does not fit.
//
// With a ClosestOverage shared by the sweep's evaluators, a point's memory replay also gives up
// as soon as the point is sure to be further from fitting than the closest point evaluated so
// far (or, once any point fits, as soon as it is sure not to fit): its figures are then lower
// bounds (PointMetrics::memory_lower_bound). The points that fit, and the closest of those that
// do not, are evaluated in full whatever the order, so the closest is the one a full sweep
// finds (the ranking breaks ties by index, and a point given up is strictly further).
struct ClosestOverage {
  // The smallest overage (device peak + headroom - GPU memory) of a point evaluated in full,
  // never below 0: a point that fits is never given up. Infinity: none yet.
  std::atomic<double> bytes{std::numeric_limits<double>::infinity()};
  std::atomic<std::size_t> given_up{0};  // points whose replay stopped early
  // Of those, the points not even planned whole: their plan stopped where it was sure to pass the
  // bound (planner::plan_step's stop_above_bytes, [Hopeless plans]).
  std::atomic<std::size_t> plans_stopped{0};
};
std::unique_ptr<Evaluator> make_memory_first_evaluator(double headroom_bytes,
                                                       std::shared_ptr<ClosestOverage> closest = nullptr);
// The most reserved memory whose overage, computed as the sweep computes it (reserved + device
// overhead + headroom - GPU memory, in doubles), is at most `bound`: the edge past which a
// replay gives up. planner::kNeverGiveUp for an infinite bound, -1 when none is within it.
std::int64_t reserved_within_overage(double gpu_bytes, double overhead_bytes, double headroom_bytes, double bound);
// The metrics of a full estimate (for comparison with estimate_step).
PointMetrics metrics_of(const planner::Scenario& scenario);

enum class Objective { throughput, step_time, memory };
std::string to_string(Objective o);
Objective parse_objective(const std::string& name);  // throws std::invalid_argument

struct PointResult;

// A share of a sweep's points for one process of a distributed sweep (docs/sweep.md): point i
// belongs to shard i % count. Interleaved rather than in blocks, so every shard gets a like mix
// of the space's cheap and dear points (the last axes vary fastest).
struct Shard {
  std::size_t index = 0, count = 1;
  bool owns(std::size_t point) const { return point % count == index; }
  // How many of `total` points it owns.
  std::size_t points(std::size_t total) const { return total > index ? (total - index + count - 1) / count : 0; }
  std::size_t point(std::size_t k) const { return index + k * count; }  // its k-th point
};
// "i/N" with 0 <= i < N; throws std::invalid_argument naming what was expected.
Shard parse_shard(const std::string& text);

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
  // Every point, finished or not run (interrupted), in point order, one call at a time: for
  // writers that stream every point out (CSV, JSON). May be empty.
  std::function<void(const PointResult& point)> sink;
  // How many of the best points the result keeps ranked (the report's table, re-simulation).
  std::size_t keep_top = 10;
  // Keep every evaluated point's rank (SweepResult::rank_of): 16 bytes a point during the
  // sweep, 4 after.
  bool rank_every_point = false;
  // Evaluate only this shard's points (the sink gets them alone, in point order; the result
  // ranks them alone). merge_sweep puts the shards back together.
  Shard shard;
  // Points already evaluated, by index in the space (estimate_sweep_cost's sample): taken as
  // they are instead of evaluated again. Exact: an evaluation depends on the point alone, not
  // on what its evaluator evaluated before (the caches it keeps give the figures of a fresh
  // one: sweeps on any number of threads already rest on that). Their fit is judged here.
  std::shared_ptr<const std::map<std::size_t, PointResult>> evaluated;
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
  // It fits, but only near capacity (planner::near_capacity: within the reserved model's
  // tolerance of the GPU, or by freeing the allocator's cache): recommended only when no point
  // fits with a margin.
  bool near_capacity = false;
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
  std::size_t total = 0;             // points in the space
  // The points the report needs, by index (not every point: see the file comment): those
  // of `ranking`, `pareto`, the recommendation, `smallest_overage` and `not_evaluated`.
  std::map<std::size_t, PointResult> points;
  // The best `keep_top` evaluated points: those that fit by the objective, then the rest by
  // overage. The whole ranking has `evaluated` points.
  std::vector<std::size_t> ranking;
  std::vector<std::size_t> pareto;   // memory vs throughput front (of the points that fit; of all when none fits), memory ascending
  Recommendation recommendation;
  std::optional<std::size_t> smallest_overage;  // when nothing fits: the point closest to fitting
  std::vector<std::size_t> resimulated_ranking;  // the re-simulated points, best first by their new timing
  std::vector<std::size_t> not_evaluated;        // the first skipped or failed points (at most 8)
  std::size_t evaluated = 0, skipped = 0, failed = 0, fitting = 0;
  std::size_t fitting_near_capacity = 0;  // of `fitting`
  bool interrupted = false;
  int threads = 1;
  double wall_seconds = 0;
  double headroom_bytes = 0;
  Objective objective = Objective::throughput;
  // With SweepOptions::rank_every_point: the 1-based rank of each point (0: not evaluated).
  std::vector<std::uint32_t> ranks;

  // A kept point (throws std::out_of_range for one the sweep did not keep).
  const PointResult& point(std::size_t index) const { return points.at(index); }
  PointResult& point(std::size_t index) { return points.at(index); }
  // Its rank in the whole ranking, 1-based: from `ranks`, else its place in `ranking`; 0 when unknown.
  std::size_t rank_of(std::size_t index) const;
  bool on_pareto_front(std::size_t index) const;
};

// Evaluates every point of `space` over `base` (base overrides first, then the point's).
SweepResult run_sweep(std::shared_ptr<const planner::ScenarioTemplate> base, const planner::SweepSpace& space,
                      const SweepOptions& options);

// ---- distributed sweeps ----------------------------------------------------------------------
// The shards of a sweep, evaluated by separate processes (a Slurm job array, mpirun ranks), each
// write their points as records; merge_sweep feeds the records, in point order, through the
// same sink and ranking as run_sweep, so the merged report equals one process's byte for byte
// (but for wall_seconds and threads, which the caller sets).

// One evaluated (or skipped, failed, not run) point as one line of text, exactly: the index,
// status, reason and metrics, every double in hexadecimal (%a) so that it reads back to the
// same bits. The choice, overrides and label are the space's; fits and the overage are judged
// again from the headroom on merging.
std::string point_record(const PointResult& point);
// Reads a record of `space`; throws std::invalid_argument saying what is wrong.
PointResult parse_point_record(const std::string& line, const planner::SweepSpace& space);

// Ranks points from `next` (each point of the space once, in point order; nullopt after the
// last) with options' headroom, objective, tolerance, keep_top, rank_every_point and sink, as
// run_sweep ranks the points it evaluates. Throws std::invalid_argument where a point is out
// of order or missing.
SweepResult merge_sweep(const planner::SweepSpace& space, const SweepOptions& options,
                        const std::function<std::optional<PointResult>()>& next);

// What a sweep will cost, before it runs (the resource guard of `fsdpsim sweep`;
// docs/reliability.md): points spread evenly over the space are timed for up to
// `sample_seconds` on as many workers as the sweep will run (its threads); memory is this
// process's now, plus what each worker grew by in the sample
// (its model copy and caches, scaled to the cost keys the space has), plus the ranks of every
// point and the points in flight.
struct SweepCost {
  std::size_t points = 0;
  std::size_t sampled = 0;
  double seconds_per_point = 0;  // one thread
  double seconds = 0;            // the sweep on its threads
  double memory_bytes = 0;
  int threads = 1;
  std::string memory_basis, time_basis;
  // The sampled points' results, for SweepOptions::evaluated: a sweep that follows the
  // estimate does not evaluate them twice (64 of the 360 points of
  // scenarios/sweeps/llama3.1-8b-64xh100.json).
  std::shared_ptr<const std::map<std::size_t, PointResult>> sampled_points;
};
SweepCost estimate_sweep_cost(std::shared_ptr<const planner::ScenarioTemplate> base, const planner::SweepSpace& space,
                              const SweepOptions& options, double sample_seconds = 1.0);

// This process's resident memory now, in bytes (/proc/self/statm; 0 where unreadable).
double resident_bytes();

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
// Each point is refused, with a note, past `budget` (the resource guard of `simulate`; no
// limit by default).
Resimulator simgrid_resimulator(std::shared_ptr<const planner::ScenarioTemplate> base,
                                const ResourceBudget& budget = {});

// When nothing fits: "No configuration fits: every evaluated point exceeds X GiB (GPU ... -
// headroom ...). The smallest overage is Y GiB at #k (label) (device peak Z GiB)." ("" otherwise).
std::string no_fit_message(const SweepResult& result);

// The key an evaluator may cache cost models under: the point's overrides that can change
// the cost model (all but the training batch / checkpointing fields and fsdp.* other than
// fsdp.wrap, whose block types the eager factor reads).
std::string cost_key_of(const std::vector<std::string>& overrides);

}  // namespace fsdpsim::sim
