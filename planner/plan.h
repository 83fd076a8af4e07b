// From a scenario to one step's Schedule: units from the wrap policy, shards with FSDP's
// padding, and the ops FSDP1/FSDP2 (or ZeRO-1/2 style data parallelism) issue in a step:
// forward, backward (with recompute under activation checkpointing), every gradient
// accumulation micro-step, and the optimizer step.
#pragma once

#include <memory>
#include <vector>

#include "planner/memory.h"
#include "planner/scenario.h"
#include "planner/schedule.h"
#include "planner/sharding.h"
#include "planner/units.h"

namespace fsdpsim::planner {

struct Plan {
  std::vector<Unit> units;
  std::vector<UnitShard> shards;  // parallel to units
  Schedule schedule;
  // Set (>= 0) only when plan_step was given a `stop_above_bytes` and stopped ([Hopeless plans]):
  // the bytes the replay is sure to hold, past that bound. The schedule then holds the persistent
  // state and the prelude, and the first micro-step's forward when it stopped after it.
  std::int64_t stopped_holding_bytes = -1;
};

// The rule that cuts the scenario's shards (planner/sharding.h: FSDP1's flat parameter, FSDP2's
// rows, DeepSpeed ZeRO-3's flattened parameters under DeepSpeed's layout).
int shard_rule_of(const Scenario& scenario);

Plan plan_step(const Scenario& scenario);

// Whether ops and allocations get their readable names ("fwd model.layers.3", "activations
// of ..."). Only people read them (traces, reports, errors); a sweep, which keeps only each
// point's figures, plans without them. Timing and memory do not depend on them.
enum class Naming { readable, none };

// What planning derives from the model, the wrap policy and activation checkpointing alone
// (the units, the forward program, which parameters each module uses), kept between plans:
// a sweep plans thousands of points of one model, and this was a third of each plan. It
// keeps one layout per wrap policy and checkpointing seen (the last 16).
// A layout holds the parsed model it was built for (models::SharedModel) and serves only
// scenarios holding that same model (the same parse, not an equal one).
class PlanCache {
 public:
  PlanCache();
  ~PlanCache();
  PlanCache(PlanCache&&) noexcept;
  PlanCache& operator=(PlanCache&&) noexcept;
  void clear();
  std::size_t layouts_built() const { return layouts_built_; }  // how often it missed

  struct Layout;  // planner/plan_layout.h

 private:
  friend Plan plan_step(const Scenario& scenario, PlanCache& cache, Naming naming, std::int64_t stop_above_bytes);
  std::vector<std::unique_ptr<Layout>> layouts_;  // most recently used last
  std::size_t layouts_built_ = 0;
};

// As plan_step(scenario), reusing `cache` when it was built for this model, wrap and checkpointing.
//
// [Hopeless plans] `stop_above_bytes` (planner::kNeverGiveUp: never): for the searches whose
// memory replays give up past a bound (replay_memory's give_up_above_reserved; the advice,
// sim/advice.h), the plan stops where its replay is already sure to hold more device memory than
// that, and Plan::stopped_holding_bytes says how much. Reserved memory is never below the
// allocations it holds, so given that bound, or any above it, the replay of the whole plan would
// give up by then. Two points are checked:
//  - before the step's ops: the state the step starts with (state_bytes_before_first_op,
//    planner/memory.h), held at its first op;
//  - after the first micro-step's forward: that state and everything the forward's ops left
//    allocated on the device (what it saves for the backward, what is still gathered or in
//    flight), all held at the forward's last op: no later free is attached to an op planned by
//    then ([Frees in planning order], planner/internal/plan_policy.h, checked in every plan).
// Many of the advice's candidates for a large model stop at one of them (Llama-3.1-405B on
// 1,024 H100s: hybrid sharding over a node alone holds an eighth of the fp32 parameters, 202 GB,
// and no checkpointing saves 126 blocks' activations); their plans were a sixth of that
// `estimate` (docs/benchmarks.md, session 28).
Plan plan_step(const Scenario& scenario, PlanCache& cache, Naming naming = Naming::readable,
               std::int64_t stop_above_bytes = kNeverGiveUp);

// The calling thread's PlanCache: what plan_step(scenario) plans with, and the sweeps' evaluators
// on that thread, so that `estimate`'s own plan and its advice's candidates (swept on the calling
// thread) share their layouts. It holds the models of its layouts (the last 16) until the
// thread ends.
PlanCache& thread_plan_cache();

}  // namespace fsdpsim::planner
