// OpCosts: what every executor needs, besides the Schedule, to time a step.
//
// The executor contract (docs/architecture.md): the analytic engine (sim/analytic.h), the
// SimGrid engine (sim/simgrid_engine.h) and the micro-runtime (runtime/runtime.h) each take a
// Schedule, its OpCosts and their own platform/options, and nothing else: never a Scenario,
// never a planner call. OpCosts is made once, here, from the cost model (or from a file of
// measured or hand-given durations), so the three play the same numbers.
#pragma once

#include <map>
#include <string>
#include <tuple>
#include <vector>

#include "planner/cost_model.h"
#include "planner/schedule.h"

namespace fsdpsim::planner {

struct OpCosts {
  std::string source;  // where the numbers come from, in words (reports print it)
  // Per op, parallel to schedule.ops.
  std::vector<double> duration_seconds;  // on its stream when nothing else runs
  std::vector<double> issue_seconds;     // CPU time to issue it
  // [Kernel pipelining] The part of issue_seconds the GPU waits for before it runs the op's
  // kernels back to back (CostModel::issue_lead_seconds): the op starts no earlier than its
  // issue start plus this, while the CPU stays busy for the whole issue. Empty: the whole issue.
  std::vector<double> issue_lead_seconds;
  // For collectives, the latency part of duration_seconds (NCCL's latency term); the rest is
  // transfer, which concurrent collectives on different communicators share. Empty: none.
  std::vector<double> latency_seconds;
  // Kernels each op launches (empty: unknown, the launch queue is then unbounded).
  std::vector<double> kernels;
  // Op i's issue lead (issue_lead_seconds[i], or its whole issue when that is empty).
  double issue_lead(std::size_t i) const { return issue_lead_seconds.empty() ? issue_seconds[i] : issue_lead_seconds[i]; }
  // CUDA's launch queue: kernels one stream holds before a launch blocks the CPU (0: unbounded).
  double launch_queue_kernels = 0;
  // Compute runs this much slower while a collective is in flight (0.1 = 10%).
  double compute_slowdown_under_comm = 0;
  // Collectives transferring at once (on different communicators: [Communicator order]) share
  // the links, each progressing at 1/k while k transfer.
  bool share_bandwidth = true;
  // The dense bf16 peak MFU and HFU divide by (0: unknown).
  double bf16_peak_flops = 0;
};

// NCCL estimates by (collective kind, bytes, group ranks, group nodes): a step repeats the same
// collective for every block, and a sweep repeats them from point to point. Valid for one cost
// model (the estimate depends on nothing else); a sweep worker keeps one per cost model.
using CollectiveMemo = std::map<std::tuple<int, double, int, int>, CollectiveEstimate>;

// The cost model's NCCL estimate of collective `op` (one with a group of the schedule), from
// `memo` (which must belong to `cost`) or priced and kept there.
const CollectiveEstimate& memoized_collective(const Op& op, const Schedule& schedule, const CostModel& cost,
                                              CollectiveMemo& memo);

// Prices every op with the cost model; collective estimates are memoised in `memo` (which must
// belong to `cost`), or per call when it is null.
OpCosts price_ops(const Schedule& schedule, const CostModel& cost, CollectiveMemo* memo = nullptr);

// Costs from per-op durations alone (a durations file, measured op times): no issue cost, no
// latency split, no interference, unbounded launch queue. Throws std::invalid_argument when
// the count does not match the schedule or a duration is negative or not finite.
OpCosts costs_from_durations(const Schedule& schedule, std::vector<double> duration_seconds, std::string source);

// Throws std::invalid_argument when `costs` does not fit `schedule` (lengths) or holds a
// negative or non-finite number: what every executor checks before it plays.
void check_costs(const Schedule& schedule, const OpCosts& costs);

}  // namespace fsdpsim::planner
