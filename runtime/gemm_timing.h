// One cuBLAS GEMM of a given shape, timed on a CUDA device: what `fsdpsim calibrate --backend
// cuda` sweeps to write a calibration's measured gemm_table (docs/calibration.md). bf16 operands
// and output, fp32 accumulation (cublasGemmEx, CUBLAS_COMPUTE_32F), C[m,n] = A[m,k] B[k,n] in
// row-major terms; CUDA events around each call after `warmup` untimed calls.
#pragma once

#include <cstdint>
#include <vector>

namespace fsdpsim::runtime {

// Seconds of each of `repetitions` calls. Throws std::runtime_error when the cuda backend is not
// built, there is no such device, or a CUDA / cuBLAS call fails (the message names it).
std::vector<double> time_bf16_gemm(int device, std::int64_t m, std::int64_t n, std::int64_t k, int warmup,
                                   int repetitions);

}  // namespace fsdpsim::runtime
