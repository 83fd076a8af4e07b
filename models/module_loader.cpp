#include "models/module_loader.h"

#include <dlfcn.h>
#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <stdexcept>

#ifndef FSDPSIM_MODULE_DIR_FROM_BIN
#define FSDPSIM_MODULE_DIR_FROM_BIN "../lib/fsdpsim"
#endif

namespace fsdpsim::models {

namespace {

// The folder of the running binary (/proc/self/exe), "" when it cannot be read.
std::string binary_dir() {
  char path[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", path, sizeof path - 1);
  if (n <= 0) return "";
  const std::string exe(path, static_cast<std::size_t>(n));
  const std::size_t slash = exe.rfind('/');
  return slash == std::string::npos ? "" : exe.substr(0, slash);
}

std::string module_path(const ModuleSpec& spec) {
  if (const char* env = std::getenv(spec.path_env); env && *env) return env;
  return binary_dir() + "/" FSDPSIM_MODULE_DIR_FROM_BIN "/" + spec.file;
}

}  // namespace

void* open_module_entry(const ModuleSpec& spec) {
  const std::string path = module_path(spec);
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib)
    throw std::runtime_error(std::string(spec.what) + " could not be opened (" + dlerror() + "); " + spec.needed_for +
                             " needs " + spec.file + ", installed with fsdpsim under <prefix>/lib/fsdpsim (" +
                             spec.path_env + " names another path)");
  void* entry = dlsym(lib, spec.entry);
  if (!entry) throw std::runtime_error(path + " is not " + spec.what + ": it has no " + spec.entry);
  return entry;
}

}  // namespace fsdpsim::models
