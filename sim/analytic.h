// The analytic engine: an event-driven list scheduler over a Schedule's streams.
//
// Semantics (docs/cost-model.md, "The analytic engine"):
// - One CPU issue thread walks the ops in issue order. Issuing op i costs issue_seconds[i]
//   of CPU time; before it, the CPU blocks until every op in op.cpu_waits has finished
//   (FSDP1's limit_all_gathers). Allocations and frees of op i happen when its issue
//   begins (what PyTorch's caching allocator sees). Ops on Stream::host (the CPU
//   optimizer under cpu_offload) run on this thread: it waits for their deps, then runs them.
// - CUDA queues a bounded number of launches per stream: when the op's kernels would not fit
//   in its stream's queue (launch_queue_kernels), the CPU blocks until enough queued ops end.
// - Every other stream runs its ops one at a time in issue order. An op starts at
//   max(its issue start + its issue lead, the previous op on its stream ends, its deps end):
//   the issue lead (OpCosts::issue_lead_seconds, [Kernel pipelining] in planner/cost_model.h)
//   is the part of its issue the GPU waits for; the whole issue unless the kernels are known.
// - While any NCCL collective (all-gather, reduce-scatter, all-reduce) is running, ops on
//   the compute stream progress at 1/(1 + compute_slowdown_under_comm) of their speed; the
//   slowdown applies to exactly the overlapped portion. Compute does not slow collectives.
// - Collectives of one process group (one NCCL communicator) run one at a time in issue order,
//   whichever stream issues them (planner/schedule.h, [Communicator order]).
// - A collective first spends its latency term (NCCL's model), then transfers; collectives
//   transferring at once (on different communicators) in one link domain share its link
//   max-min fairly by their link loads (planner/op_costs.h, [Link loads]): k that each
//   saturate it progress at 1/k (processor sharing); one that takes a small share alone keeps
//   it, and the others share the rest.
// - The step ends when the last op ends (or the CPU finishes issuing, if later).
// The critical path follows, from the last op back to time 0, the constraint that actually
// set each start (CPU issue, the previous op on the stream, a dependency, a CPU wait), so
// its segments tile [0, step] without gaps.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <tuple>
#include <vector>

#include "planner/cost_model.h"
#include "planner/op_costs.h"
#include "planner/schedule.h"

namespace fsdpsim::sim {

// What set a time: the start of an op on its stream, or the start of its CPU issue.
enum class Constraint {
  step_start,      // nothing before it (the first issue)
  cpu_issue,       // GPU op: it started as soon as it was issued
  previous_issue,  // CPU: it began issuing as soon as the previous op was issued
  stream_order,    // GPU op: the previous op on its stream ended
  dependency,      // a cross-stream event (or, for host ops, a dep) ended
  communicator,    // GPU collective: the previous collective on its communicator ended ([Communicator order])
  cpu_wait,        // CPU: it blocked until the named op ended (limit_all_gathers)
  launch_queue     // CPU: its stream's launch queue was full until the named op ended
};
const char* to_string(Constraint c);

// [Link loads] Max-min fair sharing of one link (capacity 1) among `count` transfers that each
// take loads[i] of it alone: the level L each gets (its own load when that is less), L being
// such that the shares, min(load, L), add up to the link; infinity when the loads fit alone.
double fair_share_level(const double* loads, int count);

struct OpTiming {
  double issue_start = 0;    // the CPU begins issuing it; allocations and frees happen here
  double enqueue = 0;        // issue_start + its issue lead (OpCosts): on its stream from then on
  double start = 0;          // runs on its stream (host ops: on the CPU) ...
  double end = 0;            // ... until here
  double nominal_seconds = 0;  // its duration alone (the cost model's)
  double issue_seconds = 0;
  Constraint started_by = Constraint::cpu_issue;  // what set `start`
  int started_by_op = -1;                          // the op behind it (stream predecessor, dep)
  Constraint issued_by = Constraint::step_start;   // what set `issue_start`
  int issued_by_op = -1;                           // previous op issued, or the op waited for
};

struct PathSegment {
  enum class Kind { gpu, cpu_issue, host };
  int op = -1;
  Kind kind = Kind::gpu;
  double start = 0;
  double end = 0;
};
const char* to_string(PathSegment::Kind k);

// Seconds of the critical path by what runs on it.
struct CriticalPathSummary {
  double compute_seconds = 0;        // ops on the compute stream
  double communication_seconds = 0;  // collectives, h2d, d2h
  double other_gpu_seconds = 0;      // copies on communication streams
  double cpu_issue_seconds = 0;      // the CPU issuing (CPU-bound stretches)
  double host_seconds = 0;           // host ops (CPU optimizer)
};

struct StepTiming {
  double step_seconds = 0;
  // Breakdown: step = compute + optimizer + exposed_comm + exposed_other.
  double compute_seconds = 0;        // the compute stream busy, optimizer excluded (interference included)
  double optimizer_seconds = 0;      // optimizer ops running (GPU or host)
  double exposed_comm_seconds = 0;   // communication running while the compute stream is idle
  double exposed_other_seconds = 0;  // the rest: CPU-bound gaps, exposed copies on other streams
  double comm_seconds = 0;           // every communication op's duration, summed
  double interference_seconds = 0;   // compute time added by collectives running beside it
  double cpu_issue_seconds = 0;      // CPU time spent issuing, summed
  // Exposed communication per FSDP unit (index = unit id) and outside units; when several
  // communication ops run in an exposed stretch they share it equally.
  std::vector<double> exposed_comm_by_unit;
  double exposed_comm_outside_units = 0;
  std::array<double, 3> exposed_comm_by_phase{};  // planner::Phase: forward, backward, optimizer
  // Throughput (0 where the schedule or peak does not say).
  double tokens_per_second_per_gpu = 0;
  double model_flops = 0;     // schedule.model_flops_per_rank: 3 x forward (6N + attention, causal attention halved)
  double hardware_flops = 0;  // FLOPs the GPU executes: forward, backward, recompute
  double mfu = 0;             // model_flops / (step x mfu_peak_flops)
  double hfu = 0;             // hardware_flops / (step x mfu_peak_flops)
  double mfu_peak_flops = 0;  // the peak MFU and HFU divide by: dense bf16, or fp8 for fp8 matmuls
  std::vector<OpTiming> ops;  // parallel to schedule.ops
  std::vector<PathSegment> critical_path;  // in time order
  CriticalPathSummary critical_path_summary;
};

// Times the schedule with its op costs (the executor contract: planner/op_costs.h). MFU and HFU
// use costs.mfu_peak_flops (0: not computed). Throws std::invalid_argument when the costs do
// not match the schedule or the schedule deadlocks (an op waits for one issued after it).
StepTiming simulate(const planner::Schedule& schedule, const planner::OpCosts& costs);

// The step summary from op timings, shared by the analytic and SimGrid engines: `t.ops` holds
// every op's times and constraints, `cpu_end` is when the CPU finished issuing; fills every
// other field of `t` (breakdown, exposed communication by unit and phase, critical path from
// the constraints that set each start, throughput, MFU/HFU with `mfu_peak_flops`).
void summarize_step(const planner::Schedule& schedule, StepTiming& t, double cpu_end, double mfu_peak_flops);

// planner::price_ops + simulate.
StepTiming time_step(const planner::Schedule& schedule, const planner::CostModel& cost,
                     planner::CollectiveMemo* memo = nullptr);

// Memory on the step's clock: the schedule's allocation events at their ops' issue times.
struct MemoryPoint {
  double seconds = 0;
  int op = -1;                    // -1: the persistent state at the start
  std::int64_t allocated_bytes = 0;
};
struct TimedMemory {
  std::int64_t peak_allocated_bytes = 0;
  double peak_seconds = 0;
  int peak_op = -1;
  std::vector<MemoryPoint> points;  // per op with events: after its allocations, then after its frees
};
// Replays allocations and frees ordered by (time, issue order); the peak is taken after each
// op's allocations, as planner::replay_memory takes it.
TimedMemory timed_memory(const planner::Schedule& schedule, const StepTiming& timing);

}  // namespace fsdpsim::sim
