// How the ranks of a run are spread over processes.
//
//   single  one process plays every rank of the schedule (threads as ranks on host; one
//           thread per GPU on cuda, communicators from ncclCommInitAll).
//   mpi     one process per rank, started by mpirun or srun: each process plays its MPI world
//           rank only (cuda: on the device of its local rank; communicators from
//           ncclCommInitRank with ncclUniqueIds that rank 0 makes and broadcasts; host:
//           collectives over MPI communicators, one per process-group instance). The ranks'
//           results are gathered on rank 0, which alone reports. A fault in any process ends
//           every process (MPI_Abort) after rank 0 has printed it, once.
//
// "auto" picks mpi when the environment says several processes were started together
// (OMPI_COMM_WORLD_SIZE: Open MPI's mpirun; PMI_SIZE: MPICH/hydra or srun --mpi=pmi2;
// SLURM_NTASKS with SLURM_STEP_ID: srun; PMIX_RANK: a PMIx launch such as srun --mpi=pmix or
// Open MPI 5's mpirun) and MPI, once initialised, agrees (world size > 1).
#pragma once

#include <string>
#include <vector>

namespace fsdpsim::runtime {

struct Launch {
  std::string launcher = "single";  // "single" or "mpi"
  int process_rank = 0;             // MPI world rank (0 under single)
  int processes = 1;                // MPI world size
  std::string detected_from;        // what chose it, in words ("OMPI_COMM_WORLD_SIZE=4", "--launcher mpi")
  bool mpi() const { return launcher == "mpi"; }
};

// True where fsdpsim was built with MPI (FSDPSIM_WITH_MPI).
bool mpi_built();

// Resolves "auto", "single" or "mpi"; initialises MPI (MPI_THREAD_MULTIPLE, finalised at exit)
// when the answer is mpi. Throws InputError (an option error) for an unknown name, for mpi asked
// for in a process no mpirun or srun started, or where MPI was not built; std::invalid_argument
// for several processes detected under auto where MPI was not built. Idempotent.
Launch resolve_launch(const std::string& requested);

// Every process's `text` on process 0, in process order (an empty list on the others), under an
// mpi launch; {text} otherwise. Each text must be under 2 GiB (MPI counts are ints): throws
// std::invalid_argument past that. Used by a sweep split over mpirun's processes.
std::vector<std::string> gather_text_on_process0(const std::string& text, const Launch& launch);

// Ends a multi-process run with an error seen before (or outside) the executor, the same way
// a fault does: process 0 prints `error: MESSAGE` once on stderr and every process ends with
// `exit_code` (MPI_Abort). Only under an mpi launch; does not return.
[[noreturn]] void end_all_processes(const std::string& message, int exit_code);

}  // namespace fsdpsim::runtime
