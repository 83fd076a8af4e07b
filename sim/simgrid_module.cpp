#include "sim/simgrid_module.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <mutex>
#include <stdexcept>
#include <string>

#include "sim/internal/simgrid_setup.h"

#ifndef FSDPSIM_MODULE_DIR_FROM_BIN
#define FSDPSIM_MODULE_DIR_FROM_BIN "../lib/fsdpsim"
#endif

namespace fsdpsim::sim {

namespace {

constexpr const char* kModuleFile = "fsdpsim_simgrid.so";
constexpr const char* kEntry = "fsdpsim_simgrid_run_step";

// The folder of the running binary (/proc/self/exe), "" when it cannot be read.
std::string binary_dir() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return "";
  const std::string exe(path, static_cast<std::size_t>(n));
  const std::size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "" : exe.substr(0, slash);
}

std::string module_path() {
  if (const char* env = std::getenv("FSDPSIM_SIMGRID_MODULE"); env && *env) return env;
  return binary_dir() + "/" FSDPSIM_MODULE_DIR_FROM_BIN "/" + kModuleFile;
}

SimgridStepRunner open_module() {
  const std::string path = module_path();
  // RTLD_NOW: a symbol the module needs from this binary and cannot find is reported here, not
  // mid-simulation. RTLD_LOCAL: SimGrid's symbols (its SMPI exports MPI_*) stay out of the
  // process's global scope.
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    throw std::runtime_error(std::string("the SimGrid engine module could not be opened (") + dlerror() +
                             "); simulating needs " + kModuleFile + ", installed with fsdpsim under <prefix>/lib/fsdpsim "
                             "(FSDPSIM_SIMGRID_MODULE names another path)");
  void* entry = dlsym(lib, kEntry);
  if (!entry) throw std::runtime_error(path + " is not fsdpsim's SimGrid engine module: it has no " + kEntry);
  return reinterpret_cast<SimgridStepRunner>(entry);  // the module stays open for the life of the process
}

}  // namespace

SimgridStepRunner simgrid_step_runner() {
  // Linked in (tests, benchmarks): the weak reference is the definition.
  if (&fsdpsim_simgrid_run_step != nullptr) return &fsdpsim_simgrid_run_step;
  static std::mutex mutex;
  static SimgridStepRunner runner = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (!runner) runner = open_module();
  return runner;
}

}  // namespace fsdpsim::sim
