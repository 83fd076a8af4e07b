// Opening the runtime's modules (runtime/internal/modules.h).
#include "runtime/internal/modules.h"

#include <mutex>

#include "models/module_loader.h"
#include "runtime/runtime.h"

namespace fsdpsim::runtime::detail {

namespace {

// The table of a module: linked in (`linked` is the weak entry's definition), else opened once.
template <class Table>
const Table& module_table(const Table* (*linked)(), const models::ModuleSpec& spec) {
  if (linked != nullptr) return *linked();
  static std::mutex mutex;
  static const Table* table = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (!table) table = reinterpret_cast<const Table* (*)()>(models::open_module_entry(spec))();
  return *table;
}

}  // namespace

const CudaModule& cuda_module() {
#if FSDPSIM_WITH_CUDA
  static constexpr models::ModuleSpec spec{"fsdpsim_cuda.so", "FSDPSIM_CUDA_MODULE", "fsdpsim_cuda_module",
                                           "the cuda backend's module", "the cuda backend"};
  return module_table(&fsdpsim_cuda_module, spec);
#else
  throw RuntimeError(FaultKind::device, -1, -1,
                     "the cuda backend is not built: the CUDA toolkit or NCCL was not found when fsdpsim was configured");
#endif
}

const MpiModule& mpi_module() {
#if FSDPSIM_WITH_MPI
  static constexpr models::ModuleSpec spec{"fsdpsim_mpi.so", "FSDPSIM_MPI_MODULE", "fsdpsim_mpi_module",
                                           "the mpi launcher's module", "a launch over MPI"};
  return module_table(&fsdpsim_mpi_module, spec);
#else
  throw RuntimeError(FaultKind::device, -1, -1, "the mpi launcher is not built: MPI was not found when fsdpsim was configured");
#endif
}

}  // namespace fsdpsim::runtime::detail
