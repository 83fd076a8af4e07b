// Advice when a configuration does not fit (`estimate`, printed when it does not fit or with
// --advise): the few cheapest changes that make it fit, each with its peak and throughput.
//
// Built from the sweep machinery, not a second search: the candidate changes are sweep axis
// values (planner::expand_axis: activation checkpointing, a smaller micro-batch keeping the
// global batch, each sharding strategy), plus resharding after forward, CPU offload and more
// nodes (2x to 32x, keeping the global batch where it divides, else saying it grows). They go as one axis
// (each value a change) to sim::run_sweep; when fewer than three single changes fit, pairs of
// changes of different kinds are swept too. "Cheapest" is the most tokens/s per GPU (GPU-hours
// per token), single changes before pairs, then the most memory to spare. The candidates are swept memory-first
// (make_memory_first_evaluator): one that does not fit is not timed; when none fits, the closest
// alone is timed afterwards. A candidate's memory replay stops once it is sure to be further from
// fitting than the closest so far (sim/sweep.h, ClosestOverage).
#pragma once

#include <memory>
#include <optional>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/job_memory.h"
#include "planner/sweep_space.h"
#include "sim/sweep.h"

namespace fsdpsim::sim {

// The most micro-steps a smaller-micro-batch change may make the step (the global batch kept):
// each is planned and replayed op by op, so the candidate's cost grows with them; a step of more
// than 256 accumulated micro-steps is not advised.
constexpr std::int64_t kAdviceMaxMicroSteps = 256;

struct AdviceItem {
  std::string change;                  // "activation checkpointing full + micro-batch 1 (grad accum 8)"
  std::vector<std::string> overrides;  // the --set assignments that make it
  int changes = 1;                     // how many changes it combines
  PointMetrics metrics;
  double spare_bytes = 0;              // GPU memory - device peak - headroom (>= 0: it fits)
  int gpus = 0;                        // the world size with the change
  // It fits only near capacity ([Near capacity], planner/device_memory.h): listed after every
  // change that fits with a margin.
  bool near_capacity = false;
  // The whole job's verdict with the change ([Advice and the job], sim/advice.cpp): set for the
  // advised changes where a phase besides the step is judged (a checkpoint, an init on cpu or
  // cuda, the host's memory); the step alone decides which changes are advised.
  std::optional<planner::JobFit> job;
};

struct Advice {
  // Best first, at most `limit`, and then, when none of those keeps the scenario's GPU count,
  // the best change that does (`kept_gpus_added`).
  std::vector<AdviceItem> fitting;
  bool kept_gpus_added = false;
  std::size_t candidates = 0;           // configurations evaluated (singles, and pairs when swept)
  bool pairs_swept = false;
  std::optional<AdviceItem> closest;    // when nothing fits: the smallest overage
  double headroom_bytes = 0;
  // Candidates whose memory replay gave up, sure to be further from fitting than the closest
  // (advise's give_up_past_closest). Not printed: how many depends on the threads' interleaving.
  std::size_t given_up = 0;
  std::size_t plans_stopped = 0;  // of those, the ones not even planned whole ([Hopeless plans])
};

// The advice's order, cheapest first: changes that fit with a margin before those that fit only
// near capacity; then the most tokens/s per GPU, changes within 1% of the faster one's counting
// as the same cost, of which the fewest GPUs first; then fewer changes; then the most to spare.
void order_cheapest_first(std::vector<AdviceItem>& items);

// The changes to `base` that fit with `headroom_bytes` to spare. `threads` 0: the machine's.
// One by default: the advice sweeps tens of candidates, too few to repay a second worker's cold
// start (its own cost models and plan layouts, and fresh allocator arenas whose pages fault in).
// Measured as `estimate` processes on the 2-core machine (docs/benchmarks.md, "Session 19"):
// Llama-3.1-405B on 1,024 GPUs (46 candidates) 53-56 ms of CPU and 55-59 ms wall on one thread,
// 101-109 ms and 70-74 ms on two; Llama-3.1-8B at micro-batch 16 (72) 55-57 / 56-60 ms against
// 91-98 / 62 ms.
//
// `give_up_past_closest`: a candidate's memory replay stops once it is sure to be further from
// fitting than the closest candidate so far, or not to fit once one does (sim/sweep.h,
// ClosestOverage): the advice is the same, for less work (the replay is most of a candidate's
// cost, and in a configuration far from fitting the peak comes early). False: every candidate
// in full (the tests' independent check).
//
// `base_overage`: the overage of `base` itself, already estimated (`estimate` passes it). Above
// 0, it is the first bound the candidates give up past, as if the base were a candidate: the
// changes that only make it worse, often the first ones swept, then stop early instead of being
// evaluated in full (Llama-3.1-405B on 1,024 H100s: 9% fewer instructions). When no candidate
// comes closer than the base, the closest is among those given up, and the candidates are swept
// again without it: the advice is the same either way.
Advice advise(std::shared_ptr<const planner::ScenarioTemplate> base, double headroom_bytes, std::size_t limit = 5,
              int threads = 1, bool give_up_past_closest = true, std::optional<double> base_overage = std::nullopt);

std::string advice_text(const Advice& advice);
nlohmann::json advice_json(const Advice& advice);

}  // namespace fsdpsim::sim
