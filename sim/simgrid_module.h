// Where the SimGrid engine's step comes from: SimGrid is loaded only by the commands that
// simulate. The half of the engine that includes SimGrid (sim/internal/simgrid_setup.h) is a
// module, fsdpsim_simgrid.so, that the fsdpsim binary opens the first time a simulation runs
// (models/module_loader.h says why and where it is looked for; FSDPSIM_SIMGRID_MODULE names
// another path). Executables that link that half instead (the tests, the benchmarks) use it
// directly.
#pragma once

#include "planner/op_costs.h"
#include "planner/schedule.h"
#include "sim/simgrid_engine.h"

namespace fsdpsim::sim {

using SimgridStepRunner = void (*)(const planner::Schedule&, const planner::OpCosts&, const ClusterPlatform&,
                                   const SimgridOptions&, SimgridResult&);

// The step runner, opening the module on the first call. Throws std::runtime_error naming
// every path tried and why it failed when the module cannot be opened.
SimgridStepRunner simgrid_step_runner();

}  // namespace fsdpsim::sim
