#include "sim/simgrid_module.h"

#include <mutex>

#include "models/module_loader.h"
#include "sim/internal/simgrid_setup.h"

namespace fsdpsim::sim {

namespace {

// RTLD_LOCAL (models::open_module_entry) matters here: SimGrid's SMPI exports MPI_*, which must
// not shadow Open MPI's for the mpi launcher.
constexpr models::ModuleSpec kModule{"fsdpsim_simgrid.so", "FSDPSIM_SIMGRID_MODULE", "fsdpsim_simgrid_run_step",
                                     "the SimGrid engine module", "simulating"};

}  // namespace

SimgridStepRunner simgrid_step_runner() {
  // Linked in (tests, benchmarks): the weak reference is the definition.
  if (&fsdpsim_simgrid_run_step != nullptr) return &fsdpsim_simgrid_run_step;
  static std::mutex mutex;
  static SimgridStepRunner runner = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (!runner) runner = reinterpret_cast<SimgridStepRunner>(models::open_module_entry(kModule));
  return runner;
}

}  // namespace fsdpsim::sim
