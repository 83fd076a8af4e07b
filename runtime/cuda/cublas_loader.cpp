#include "runtime/cuda/cublas_loader.h"

#include <dlfcn.h>

#include <mutex>
#include <stdexcept>

namespace fsdpsim::runtime::detail {

namespace {

// The soname of the toolkit the backend was compiled against, then the unversioned name.
void* open_cublas(std::string* tried) {
  const std::string versioned = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);
  for (const std::string& name : {versioned, std::string("libcublas.so")}) {
    if (void* h = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)) return h;
    *tried += (tried->empty() ? "" : ", ") + name + " (" + dlerror() + ")";
  }
  return nullptr;
}

template <typename F>
void resolve(void* lib, const char* symbol, F* out) {
  void* p = dlsym(lib, symbol);
  if (!p) throw std::runtime_error(std::string("cuBLAS: symbol ") + symbol + " not found in the loaded libcublas");
  *out = reinterpret_cast<F>(p);
}

Cublas load() {
  std::string tried;
  void* lib = open_cublas(&tried);
  if (!lib) throw std::runtime_error("cuBLAS could not be opened: tried " + tried);
  Cublas c;
  resolve(lib, "cublasCreate_v2", &c.create);
  resolve(lib, "cublasDestroy_v2", &c.destroy);
  resolve(lib, "cublasSetStream_v2", &c.set_stream);
  resolve(lib, "cublasSetWorkspace_v2", &c.set_workspace);
  resolve(lib, "cublasGemmEx", &c.gemm_ex);
  return c;  // the library stays open for the life of the process
}

}  // namespace

const Cublas& cublas() {
  static std::once_flag once;
  static Cublas table;
  std::call_once(once, [] { table = load(); });
  return table;
}

}  // namespace fsdpsim::runtime::detail
