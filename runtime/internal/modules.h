// The runtime's two modules (models/module_loader.h says why they are modules):
//   fsdpsim_cuda.so  the cuda backend (runtime/cuda/): CUDA runtime and NCCL;
//   fsdpsim_mpi.so   the mpi launcher (runtime/mpi/): Open MPI.
// Each exports one C entry that returns its table of functions. The rest of the runtime calls
// them only through cuda_module() and mpi_module(), which open the module on first use; the
// modules call back into the binary (the mpi launcher plays its rank with run_host, or with the
// cuda backend through cuda_module()).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/internal/executor.h"

namespace fsdpsim::runtime::detail {

struct CudaModule {
  // The backend; with a link (an mpi launch) it plays the link's rank only (executor.h).
  RunResult (*run)(const planner::Schedule& schedule, const RunOptions& options, ProcessLink* link);
  // runtime/gemm_timing.h's time_bf16_gemm.
  std::vector<double> (*time_bf16_gemm)(int device, std::int64_t m, std::int64_t n, std::int64_t k, int warmup,
                                        int repetitions);
};

struct MpiWorld {
  int rank = 0, size = 1, local_rank = 0, nodes = 1;
};

struct MpiModule {
  // This process in the MPI world (MPI initialised on first use, with MPI_THREAD_MULTIPLE,
  // finalised at exit).
  MpiWorld (*world)();
  // launch.h's end_all_processes: does not return.
  void (*end)(const std::string& message, int exit_code);
  // Every process's text on rank 0 in rank order (empty elsewhere): launch.h's gather_text_on_process0.
  std::vector<std::string> (*gather_text)(const std::string& text);
  // Plays this process's rank with the options' backend and gathers every rank's result on rank 0.
  RunResult (*run)(const planner::Schedule& schedule, const RunOptions& options);
};

// The tables, the module opened on the first call. Throw RuntimeError (FaultKind::device) when
// the backend was not built, std::runtime_error naming the path when the module cannot be opened.
const CudaModule& cuda_module();
const MpiModule& mpi_module();

}  // namespace fsdpsim::runtime::detail

// The modules' entries. Weak: where a module's sources are linked in (the tests) the address is
// the definition, elsewhere null and the module is opened (runtime/modules.cpp).
extern "C" const fsdpsim::runtime::detail::CudaModule* fsdpsim_cuda_module() __attribute__((weak));
extern "C" const fsdpsim::runtime::detail::MpiModule* fsdpsim_mpi_module() __attribute__((weak));
