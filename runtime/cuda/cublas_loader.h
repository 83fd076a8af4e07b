// cuBLAS, opened on first use instead of linked.
//
// Why: linking libcublas makes every fsdpsim process pay its load time (about 110 ms on the
// CI machine, measured with an empty main() linked against -lcublas, CUDA 13.0), several times
// the whole `estimate` of Llama-3.1-405B on 1024 GPUs (~15 ms). Only the cuda backend's GEMMs
// need it, so the CLI opens libcublas.so when the first GEMM-bearing run starts.
#pragma once

#include <cublas_v2.h>

#include <string>

namespace fsdpsim::runtime::detail {

// The five cuBLAS entry points the backend uses, resolved from the shared library.
struct Cublas {
  decltype(&cublasCreate_v2) create = nullptr;
  decltype(&cublasDestroy_v2) destroy = nullptr;
  decltype(&cublasSetStream_v2) set_stream = nullptr;
  decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;
  // cublasGemmEx is overloaded in C++ (a cudaDataType compute-type variant), so the exported
  // C signature is spelled out.
  using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                    const void*, const void*, cudaDataType, int, const void*, cudaDataType, int,
                                    const void*, void*, cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
  GemmEx gemm_ex = nullptr;
};

// The process-wide table, loaded once. Throws std::runtime_error naming the library and the
// missing symbol when cuBLAS cannot be opened.
const Cublas& cublas();

}  // namespace fsdpsim::runtime::detail
