// The launcher: single, or mpi (the mpi module, runtime/mpi/, where MPI was built).
#include "runtime/launch.h"

#include <cstdlib>
#include <stdexcept>

#include "models/json_input.h"
#include "runtime/internal/modules.h"

namespace fsdpsim::runtime {

namespace {

// Several processes started together, by the environment: (what says so, how many; -1 where
// the environment says a process manager started this one but not how many).
std::pair<std::string, int> launched_processes() {
  auto number = [](const char* name) {
    const char* v = std::getenv(name);
    return v && *v ? std::atoi(v) : 0;
  };
  if (int n = number("OMPI_COMM_WORLD_SIZE"); n > 0) return {"OMPI_COMM_WORLD_SIZE=" + std::to_string(n), n};
  if (int n = number("PMI_SIZE"); n > 0) return {"PMI_SIZE=" + std::to_string(n), n};
  if (int n = number("SLURM_NTASKS"); n > 0 && std::getenv("SLURM_STEP_ID"))
    return {"SLURM_NTASKS=" + std::to_string(n) + " in a srun step", n};
  if (std::getenv("PMIX_RANK")) return {"PMIX_RANK (a PMIx launch)", -1};
  return {"", 0};
}

}  // namespace

bool mpi_built() {
#if FSDPSIM_WITH_MPI
  return true;
#else
  return false;
#endif
}

Launch resolve_launch(const std::string& requested) {
  if (requested != "auto" && requested != "single" && requested != "mpi")
    throw InputError::option("--launcher", "expected auto, single or mpi, got \"" + requested + "\"");
  Launch launch;
  if (requested == "single") {
    launch.detected_from = "--launcher single";
    return launch;
  }
  const auto [source, count] = launched_processes();
  // MPI started by hand, without mpirun or srun, is one process: what --launcher single does,
  // through an MPI singleton whose teardown prints Open MPI's errors. Refused before MPI starts.
  if (requested == "mpi" && count == 0)
    throw InputError::option("--launcher mpi",
                             "this process was not started by mpirun or srun (no OMPI_COMM_WORLD_SIZE, PMI_SIZE, "
                             "srun step or PMIx rank in its environment): start it with mpirun -np N or srun -n N, or "
                             "use --launcher single (with --virtual-world N to play one rank of N)");  if (requested == "auto" && (count == 0 || count == 1)) {
    launch.detected_from = "no multi-process launch in the environment";
    return launch;
  }
  if (!mpi_built()) {
    if (requested == "mpi")
      throw InputError::option("--launcher mpi", "this fsdpsim was built without MPI (install libopenmpi-dev and reconfigure)");
    if (count < 0) {  // a PMIx launch of unknown size: without MPI, say nothing and play every rank
      launch.detected_from = source + ", but fsdpsim was built without MPI";
      return launch;
    }
    throw std::invalid_argument(
        "launched as " + std::to_string(count) + " processes (" + source +
        ") but this fsdpsim was built without MPI, so each process would play every rank: rebuild with MPI "
        "(libopenmpi-dev), or pass --launcher single to do that on purpose");
  }
#if FSDPSIM_WITH_MPI
  const detail::MpiWorld world = detail::mpi_module().world();
  if (requested == "auto" && world.size <= 1) {
    launch.detected_from = source + ", but MPI sees one process";
    return launch;
  }
  launch.launcher = "mpi";
  launch.process_rank = world.rank;
  launch.processes = world.size;
  launch.detected_from = requested == "mpi" ? std::string("--launcher mpi") : source;
#endif
  return launch;
}

std::vector<std::string> gather_text_on_process0(const std::string& text, const Launch& launch) {
  if (!launch.mpi()) return {text};
  return detail::mpi_module().gather_text(text);
}

void end_all_processes(const std::string& message, int exit_code) {
  detail::mpi_module().end(message, exit_code);
  std::abort();  // end does not return
}

}  // namespace fsdpsim::runtime
