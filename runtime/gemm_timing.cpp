// time_bf16_gemm: the cuda module's (runtime/cuda/gemm_timing.cpp), opened on first use.
#include "runtime/gemm_timing.h"

#include <stdexcept>

#include "runtime/internal/modules.h"

namespace fsdpsim::runtime {

std::vector<double> time_bf16_gemm(int device, std::int64_t m, std::int64_t n, std::int64_t k, int warmup,
                                   int repetitions) {
#if FSDPSIM_WITH_CUDA
  return detail::cuda_module().time_bf16_gemm(device, m, n, k, warmup, repetitions);
#else
  (void)device, (void)m, (void)n, (void)k, (void)warmup, (void)repetitions;
  throw std::runtime_error("timing a GEMM needs the cuda backend, which this build does not have (no CUDA toolkit "
                           "and NCCL at configure time)");
#endif
}

}  // namespace fsdpsim::runtime
