// The cuda module's entry (runtime/internal/modules.h).
#include "runtime/internal/cuda_entries.h"
#include "runtime/internal/modules.h"

extern "C" const fsdpsim::runtime::detail::CudaModule* fsdpsim_cuda_module() {
  static const fsdpsim::runtime::detail::CudaModule table{&fsdpsim::runtime::detail::run_cuda,
                                                          &fsdpsim::runtime::detail::cuda_time_bf16_gemm};
  return &table;
}
