// From a scenario to one step's Schedule: units from the wrap policy, shards with FSDP's
// padding, and the ops FSDP1/FSDP2 (or ZeRO-1/2 style data parallelism) issue in a step:
// forward, backward (with recompute under activation checkpointing), every gradient
// accumulation micro-step, and the optimizer step.
#pragma once

#include <memory>
#include <vector>

#include "planner/scenario.h"
#include "planner/schedule.h"
#include "planner/sharding.h"
#include "planner/units.h"

namespace fsdpsim::planner {

struct Plan {
  std::vector<Unit> units;
  std::vector<UnitShard> shards;  // parallel to units
  Schedule schedule;
};

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
  friend Plan plan_step(const Scenario& scenario, PlanCache& cache, Naming naming);
  std::vector<std::unique_ptr<Layout>> layouts_;  // most recently used last
  std::size_t layouts_built_ = 0;
};

// As plan_step(scenario), reusing `cache` when it was built for this model, wrap and checkpointing.
Plan plan_step(const Scenario& scenario, PlanCache& cache, Naming naming = Naming::readable);

}  // namespace fsdpsim::planner
