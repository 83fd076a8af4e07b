// From a scenario to one step's Schedule: units from the wrap policy, shards with FSDP's
// padding, and the ops FSDP1/FSDP2 (or ZeRO-1/2 style data parallelism) issue in a step:
// forward, backward (with recompute under activation checkpointing), every gradient
// accumulation micro-step, and the optimizer step.
#pragma once

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

}  // namespace fsdpsim::planner
