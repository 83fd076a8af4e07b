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
  // the links of their domain max-min fairly: each takes its link_load of the domain's link
  // alone, and while those loads add up past the link, each gets the same share of it or its
  // whole load if smaller (k collectives that each saturate it progress at 1/k).
  bool share_bandwidth = true;
  // [Link domains] For collectives, the links their transfers are bound by, numbered: only
  // collectives of one domain share bandwidth. Empty: every collective in one domain.
  std::vector<int> link_domain;
  // [Link loads] For collectives, the fraction of its domain's link a transfer takes when it
  // runs alone, in (0, 1]: 1 where the domain's link bounds it; less for a collective bound
  // elsewhere that crosses it (HSDP's all-reduce across PCIe nodes, bound by its share of the
  // NIC, crosses its GPU's PCIe link at a tenth of that link's speed). Empty: 1 for all.
  std::vector<double> link_load;
  // The dense peak MFU and HFU divide by (CostModel::mfu_peak_flops; 0: unknown).
  double mfu_peak_flops = 0;
};

// NCCL estimates by (collective kind, bytes, group ranks, group nodes): a step repeats the same
// collective for every block, and a sweep repeats them from point to point. Valid for one cost
// model (the estimate depends on nothing else); a sweep worker keeps one per cost model.
using CollectiveMemo = std::map<std::tuple<int, double, int, int>, CollectiveEstimate>;

// The cost model's NCCL estimate of collective `op` (one with a group of the schedule), from
// `memo` (which must belong to `cost`) or priced and kept there.
const CollectiveEstimate& memoized_collective(const Op& op, const Schedule& schedule, const CostModel& cost,
                                              CollectiveMemo& memo);

// [Link domains] What bounds a collective of `group`'s transfers, as OpCosts::link_domain numbers
// it: kNodeFabric, the node's own GPU links, for a group within one node, and for any group where
// the GPUs talk over PCIe (the NICs hang off the same PCIe switches and host bridge that carry
// the GPUs' own traffic); kNetwork, the NICs and the fabric between nodes, for a group across
// NVLink or xGMI nodes. A cross-node ring's hops inside a node also use the node's links, but at
// the NIC's rate, a small share of NVLink's (50 of 450 GB/s per GPU on a DGX H100), so it is
// counted in the network's domain alone. HSDP's all-reduce across nodes then transfers beside
// the reduce-scatter and all-gathers inside a node at full speed, as the SimGrid engine's
// flows on the built platform do.
constexpr int kNodeFabric = 0, kNetwork = 1;
int link_domain(const ProcessGroup& group, const ClusterSpec& cluster);

// [Link loads] The share of its domain's link a collective of `group` takes alone, given its
// NCCL estimate: on PCIe nodes a group across nodes crosses each GPU's PCIe link at its bus
// bandwidth (the transfer's, the latency aside) out of the link's; 1 everywhere else (the
// domain's link is what bounds the transfer).
double link_load(const ProcessGroup& group, const ClusterSpec& cluster, const CollectiveEstimate& estimate);

// Prices every op with the cost model; collective estimates are memoised in `memo` (which must
// belong to `cost`), or per call when it is null.
OpCosts price_ops(const Schedule& schedule, const CostModel& cost, CollectiveMemo* memo = nullptr);

// Costs from per-op durations alone (a durations file, measured op times): no issue cost, no
// latency split, no interference, no link sharing (share_bandwidth false: each collective takes
// its duration, as given, whatever runs beside it), unbounded launch queue. Throws std::invalid_argument when
// the count does not match the schedule or a duration is negative or not finite.
OpCosts costs_from_durations(const Schedule& schedule, std::vector<double> duration_seconds, std::string source);

// Throws std::invalid_argument when `costs` does not fit `schedule` (lengths) or holds a
// negative or non-finite number: what every executor checks before it plays.
void check_costs(const Schedule& schedule, const OpCosts& costs);

}  // namespace fsdpsim::planner
