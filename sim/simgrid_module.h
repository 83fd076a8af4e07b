// Where the SimGrid engine's step comes from: SimGrid is loaded only by the commands that
// simulate.
//
// Linking libsimgrid cost every fsdpsim process about 21 ms of CPU before main (SimGrid built
// with ns-3, whose libraries register their types and log components in static initialisers;
// docs/benchmarks.md, "Issue 19"), on `estimate` and `--help` alike. So the half of the engine
// that includes SimGrid (sim/internal/simgrid_setup.h) is a module, fsdpsim_simgrid.so, that the
// fsdpsim binary opens with dlopen the first time a simulation runs, as the cuda backend opens
// cuBLAS (runtime/cuda/cublas_loader.h). Executables that link that half instead (the tests,
// the benchmarks) use it directly.
//
// The module is looked for at $FSDPSIM_SIMGRID_MODULE when set, else next to the binary at the
// relative path it is installed under (FSDPSIM_MODULE_DIR_FROM_BIN: ../lib/fsdpsim for
// `cmake --install`, the .deb and the build tree alike; tools/CMakeLists.txt).
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
