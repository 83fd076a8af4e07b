// time_bf16_gemm without the cuda backend (runtime/cuda/gemm_timing.cpp has the real one).
#include "runtime/gemm_timing.h"

#include <stdexcept>

#ifndef FSDPSIM_WITH_CUDA
namespace fsdpsim::runtime {

std::vector<double> time_bf16_gemm(int, std::int64_t, std::int64_t, std::int64_t, int, int) {
  throw std::runtime_error("timing a GEMM needs the cuda backend, which this build does not have (no CUDA toolkit "
                           "and NCCL at configure time)");
}

}  // namespace fsdpsim::runtime
#endif
