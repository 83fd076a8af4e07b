// What the cuda module's table (runtime/internal/modules.h, CudaModule) points at: defined in
// runtime/cuda/, reached by the rest of fsdpsim only through detail::cuda_module().
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/internal/executor.h"

namespace fsdpsim::runtime::detail {

RunResult run_cuda(const planner::Schedule& schedule, const RunOptions& options, ProcessLink* link);
std::vector<double> cuda_time_bf16_gemm(int device, std::int64_t m, std::int64_t n, std::int64_t k, int warmup,
                                        int repetitions);

}  // namespace fsdpsim::runtime::detail
