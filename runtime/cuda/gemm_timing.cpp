// time_bf16_gemm on a CUDA device (runtime/gemm_timing.h says what it measures), in the cuda
// module (runtime/internal/modules.h): the binary reaches it through cuda_module().
#include "runtime/gemm_timing.h"

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#include "runtime/cuda/cublas_loader.h"
#include "runtime/internal/cuda_entries.h"

namespace fsdpsim::runtime {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("CUDA error timing a GEMM: ") + what + ": " + cudaGetErrorString(e));
}

// Frees what the timing allocated, whatever way it leaves.
struct GemmBuffers {
  void *a = nullptr, *b = nullptr, *c = nullptr;
  cublasHandle_t handle = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  ~GemmBuffers() {
    if (handle) detail::cublas().destroy(handle);
    for (void* p : {a, b, c})
      if (p) cudaFree(p);
    if (start) cudaEventDestroy(start);
    if (stop) cudaEventDestroy(stop);
  }
};

}  // namespace

std::vector<double> detail::cuda_time_bf16_gemm(int device, std::int64_t m, std::int64_t n, std::int64_t k, int warmup,
                                   int repetitions) {
  if (m <= 0 || n <= 0 || k <= 0 || repetitions <= 0 || warmup < 0)
    throw std::invalid_argument("time_bf16_gemm: m, n, k and repetitions must be positive");
  check(cudaSetDevice(device), "cudaSetDevice");
  constexpr std::size_t kBf16Bytes = 2;
  GemmBuffers g;
  check(cudaMalloc(&g.a, static_cast<std::size_t>(m * k) * kBf16Bytes), "cudaMalloc A");
  check(cudaMalloc(&g.b, static_cast<std::size_t>(k * n) * kBf16Bytes), "cudaMalloc B");
  check(cudaMalloc(&g.c, static_cast<std::size_t>(m * n) * kBf16Bytes), "cudaMalloc C");
  // Zeros would let the tensor cores idle at lower power than real data; a fixed non-zero
  // byte pattern (0x3c3c: bf16 ~0.0115) is enough to keep them busy.
  check(cudaMemset(g.a, 0x3c, static_cast<std::size_t>(m * k) * kBf16Bytes), "cudaMemset A");
  check(cudaMemset(g.b, 0x3c, static_cast<std::size_t>(k * n) * kBf16Bytes), "cudaMemset B");
  if (detail::cublas().create(&g.handle) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublasCreate failed");
  check(cudaEventCreate(&g.start), "cudaEventCreate");
  check(cudaEventCreate(&g.stop), "cudaEventCreate");
  const float alpha = 1, beta = 0;
  // Row-major C[m,n] = A[m,k] B[k,n] is column-major C^T[n,m] = B^T[n,k] A^T[k,m].
  auto gemm = [&] {
    const cublasStatus_t r = detail::cublas().gemm_ex(
        g.handle, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, g.b,
        CUDA_R_16BF, static_cast<int>(n), g.a, CUDA_R_16BF, static_cast<int>(k), &beta, g.c, CUDA_R_16BF,
        static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    if (r != CUBLAS_STATUS_SUCCESS)
      throw std::runtime_error("cublasGemmEx failed with status " + std::to_string(static_cast<int>(r)) + " for " +
                               std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k));
  };
  for (int i = 0; i < warmup; ++i) gemm();
  std::vector<double> seconds;
  for (int i = 0; i < repetitions; ++i) {
    check(cudaEventRecord(g.start), "cudaEventRecord");
    gemm();
    check(cudaEventRecord(g.stop), "cudaEventRecord");
    check(cudaEventSynchronize(g.stop), "cudaEventSynchronize");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, g.start, g.stop), "cudaEventElapsedTime");
    seconds.push_back(ms * 1e-3);
  }
  return seconds;
}

}  // namespace fsdpsim::runtime
