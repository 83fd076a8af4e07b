// fsdpsim's own shared modules, opened with dlopen by the commands that need them.
//
// Why modules: a library linked into the fsdpsim binary is loaded, relocated and initialised by
// every process, whatever its command. SimGrid (with ns-3's static initialisers) cost about
// 21 ms of CPU per process; NCCL with the CUDA runtime about 5.5 ms and Open MPI about 4 ms
// (an empty main() linked with each, docs/benchmarks.md, "Session 19"), several times an
// `estimate`. Only `simulate` needs SimGrid, and only the cuda backend and the mpi launcher
// need CUDA, NCCL and MPI, so each lives in a module the binary opens on first use:
//   fsdpsim_simgrid.so  the SimGrid engine's step (sim/simgrid_module.h)
//   fsdpsim_cuda.so     the runtime's cuda backend (runtime/internal/modules.h)
//   fsdpsim_mpi.so      the runtime's mpi launcher (runtime/internal/modules.h)
// A module resolves the fsdpsim functions it calls against the binary that opened it (the
// binary exports its symbols: tools/CMakeLists.txt). The tests and benchmarks link the same
// sources instead: each module's entry is declared weak, so where it is linked in its address
// is the definition and nothing is opened.
#pragma once

#include <string>

namespace fsdpsim::models {

struct ModuleSpec {
  const char* file;          // "fsdpsim_cuda.so"
  const char* path_env;      // the environment variable that names another path
  const char* entry;         // the C symbol to look up
  const char* what;          // "the cuda backend's module", for errors
  const char* needed_for;    // "running the cuda backend", for errors
};

// Opens the module, found at $path_env when set, else next to the running binary at the
// relative path modules are installed under (FSDPSIM_MODULE_DIR_FROM_BIN: ../lib/fsdpsim for
// `cmake --install`, the .deb and the build tree alike), with RTLD_NOW | RTLD_LOCAL (a symbol it
// cannot resolve is reported here, and its libraries' symbols stay out of the process's global
// scope), and returns its entry. The module stays open for the life of the process. Throws
// std::runtime_error naming the path and why it failed.
void* open_module_entry(const ModuleSpec& spec);

}  // namespace fsdpsim::models
