// The runtime's modules (runtime/internal/modules.h, models/module_loader.h): the fsdpsim binary
// links neither NCCL, the CUDA runtime nor MPI, and opens fsdpsim_cuda.so or fsdpsim_mpi.so only
// when a command runs the cuda backend or launches over MPI.
#include <string>

#include <gtest/gtest.h>

#include "cli_helpers.h"

namespace fsdpsim::testing {
namespace {

std::string needed_libraries() { return run_command("readelf -d " + cli_binary()).out; }

const std::string kMissing = "/nonexistent/fsdpsim_module.so";

TEST(RuntimeModules, TheBinaryLinksNoCudaNcclOrMpi) {
  const std::string needed = needed_libraries();
  ASSERT_NE(needed.find("NEEDED"), std::string::npos) << "readelf printed no dynamic section:\n" << needed;
  for (const char* lib : {"libnccl", "libcudart", "libcuda.", "libmpi"})
    EXPECT_EQ(needed.find(lib), std::string::npos) << lib << " is linked:\n" << needed;
}

// Opening the module is what the cuda backend does first: with the module missing, the run
// fails naming it (and the variable that names another path); with it, the run reaches CUDA.
TEST(RuntimeModules, TheCudaBackendOpensItsModule) {
  if (!FSDPSIM_CLI_CUDA) GTEST_SKIP() << "built without the cuda backend";
  const std::string run = " run --backend cuda --virtual-world 8 --scenario " + quick_start_scenario();
  const CommandResult missing = run_command("FSDPSIM_CUDA_MODULE=" + kMissing + " " + cli_binary() + run);
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find(kMissing), std::string::npos) << missing.err;
  EXPECT_NE(missing.err.find("FSDPSIM_CUDA_MODULE"), std::string::npos) << missing.err;
  const CommandResult opened = run_command(cli_binary() + run);
  EXPECT_EQ(opened.err.find("module could not be opened"), std::string::npos) << opened.err;
  if (opened.exit_code != 0) {  // no GPU here: the backend itself says so
    EXPECT_NE(opened.err.find("no CUDA device"), std::string::npos) << opened.err;
  }
}

TEST(RuntimeModules, TheMpiLauncherOpensItsModule) {
  if (!FSDPSIM_CLI_MPI) GTEST_SKIP() << "built without MPI";
  const std::string run = " run --backend host --launcher mpi --time-scale 0.001 --timeout 20 --json --scenario " +
                          quick_start_scenario();
  // One process under mpirun (without it, --launcher mpi is refused before any module is opened:
  // VerifyCommand.RuntimeOptionErrorsExitTwo).
  auto under_mpirun = [&](const std::string& env) {
    return run_command("env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_plm_rsh_agent= " + env +
                       " timeout 60 " + std::string(FSDPSIM_TEST_MPIEXEC) + " --allow-run-as-root -np 1 " +
                       cli_binary() + run);
  };
  const CommandResult missing = under_mpirun("FSDPSIM_MPI_MODULE=" + kMissing);
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.err.find(kMissing), std::string::npos) << missing.err;
  // With the module: it opens, MPI starts, and the schedule's world of 8 is refused by the
  // launcher, not by the loader.
  const CommandResult opened = under_mpirun("");
  EXPECT_EQ(opened.err.find("module could not be opened"), std::string::npos) << opened.err;
  EXPECT_NE(opened.err.find("MPI started 1 processes"), std::string::npos) << opened.err;
}

TEST(RuntimeModules, EstimateOpensNoModule) {
  const CommandResult r = run_command("FSDPSIM_CUDA_MODULE=" + kMissing + " FSDPSIM_MPI_MODULE=" + kMissing +
                                      " FSDPSIM_SIMGRID_MODULE=" + kMissing + " " + cli_binary() +
                                      " estimate --scenario " + quick_start_scenario());
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

}  // namespace
}  // namespace fsdpsim::testing
