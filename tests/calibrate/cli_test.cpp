// `fsdpsim calibrate` end to end on the host backend (threads, shared memory: runs anywhere),
// its output loading into the next estimate, and its errors.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "../cli/cli_helpers.h"
#include "planner/cost_model.h"
#include "planner/scenario.h"

namespace fsdpsim::testing {
namespace {

const std::string kScenario = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json";
// Small and quick: 4 ranks per node on 2 nodes, HSDP (a shard span inside a node and a
// replicate span across nodes), sizes 1 KiB .. 1 MiB by 4x, three repetitions.
const std::string kQuick =
    " --set cluster.gpus_per_node=4 --set cluster.nodes=2 --set training.global_batch=16"
    " --set fsdp.strategy=HYBRID_SHARD --set fsdp.shard_group_size=4"
    " --reps 3 --warmup 1 --size-step 4 --host-max-bytes 1048576 --host-max-gemm-flops 1e7"
    " --host-max-copy-bytes 4194304";

std::string temp_path(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("fsdpsim_calibrate_cli_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  return (dir / name).string();
}

TEST(CalibrateCli, HostBackendWritesACalibrationTheNextEstimateReads) {
  const std::string out = temp_path("host.json");
  const CommandResult r = run_cli("calibrate --scenario " + kScenario + kQuick + " --backend host -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err << r.out;
  EXPECT_NE(r.err.find("calibrate: all_gather 4 ranks / 1 node"), std::string::npos) << r.err;  // progress
  EXPECT_NE(r.out.find("goodness of fit"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("capped at 1 MiB"), std::string::npos) << r.out;  // says the host cap
  std::ifstream in(out);
  const nlohmann::json j = nlohmann::json::parse(in);
  for (const char* field : {"matmul_efficiency", "hbm_efficiency", "kernel_issue_seconds",
                            "compute_slowdown_under_comm", "nccl", "sources", "fit"})
    EXPECT_TRUE(j.contains(field)) << field;
  EXPECT_EQ(j["gpu"], "H100-SXM-80GB");
  // Every span measured (shard 4/1, replicate 2/2, world 8/2), each collective: 9 fits;
  // goodness of fit per group with max and median.
  EXPECT_EQ(j["fit"]["collectives"].size(), 9u);
  ASSERT_FALSE(j["fit"]["goodness"].empty());
  for (const auto& g : j["fit"]["goodness"]) {
    EXPECT_GE(g["max_abs_error"].get<double>(), g["median_abs_error"].get<double>());
    EXPECT_GT(g["points"].get<int>(), 0);
  }
  // It loads as a scenario's calibration, and the next estimate runs with it.
  const planner::Scenario s = planner::load_scenario(
      kScenario, {"cluster.gpus_per_node=4", "cluster.nodes=2", "training.global_batch=16", "calibration=" + out});
  const planner::Calibration c = planner::calibration_for(s);
  EXPECT_DOUBLE_EQ(c.matmul_efficiency, j["matmul_efficiency"].get<double>());
  EXPECT_DOUBLE_EQ(c.kernel_issue_seconds, j["kernel_issue_seconds"].get<double>());
  const CommandResult e = run_cli("estimate --scenario " + kScenario +
                                  " --set cluster.gpus_per_node=4 --set cluster.nodes=2 --set training.global_batch=16"
                                  " --set calibration=" + out + " --json");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_GT(nlohmann::json::parse(e.out)["time"]["step_seconds"].get<double>(), 0);
}

TEST(CalibrateCli, JsonSummary) {
  const std::string out = temp_path("summary.json");
  const CommandResult r = run_cli("calibrate --scenario " + kScenario + kQuick + " -q --json -o " + out);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;  // --quiet: no progress
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["output"], out);
  EXPECT_EQ(j["backend"], "host");
  EXPECT_TRUE(j["fitted"].contains("matmul_efficiency"));
  EXPECT_FALSE(j["goodness"].empty());
}

TEST(CalibrateCli, CudaWithoutAGpuFailsCleanly) {
  const std::string out = temp_path("cuda.json");
  const CommandResult r = run_cli("calibrate --scenario " + kScenario + " --backend cuda -o " + out);
  if (r.exit_code == 0) GTEST_SKIP() << "a CUDA device is present: the cuda backend ran";
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("cuda"), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;  // one line
}

TEST(CalibrateCli, BadInputIsOneErrorLine) {
  const std::string out = temp_path("bad.json");
  CommandResult r = run_cli("calibrate --scenario /nonexistent/scenario.json -o " + out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("/nonexistent/scenario.json"), std::string::npos) << r.err;

  r = run_cli("calibrate --scenario " + kScenario + " --reps 0 -o " + out);
  EXPECT_NE(r.exit_code, 0);

  r = run_cli("calibrate --scenario " + kScenario + " --backend tpu -o " + out);
  EXPECT_NE(r.exit_code, 0);

  r = run_cli("calibrate --scenario " + kScenario + " --size-step 1 -o " + out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("--size-step"), std::string::npos) << r.err;

  r = run_cli("calibrate --scenario " + kScenario + " -o /nonexistent/dir/calib.json");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent/dir/calib.json"), std::string::npos) << r.err;

  r = run_cli("calibrate --scenario " + kScenario);  // no -o
  EXPECT_NE(r.exit_code, 0);
}

}  // namespace
}  // namespace fsdpsim::testing

namespace fsdpsim::testing {
namespace {

// Under mpirun, one process per rank of the scenario's world (2 nodes x 2): every span, the
// ones across nodes included, runs over MPI communicators between processes; process 0 alone
// writes the calibration.
TEST(CalibrateCli, MpiLaunchMeasuresEverySpanAcrossProcesses) {
#if FSDPSIM_WITH_MPI
  const std::string scenario = temp_path("mpi_scenario.json");
  std::ofstream(scenario) << R"({"model": "models/gpt2.json",
    "cluster": {"gpu": "H100-SXM-80GB", "nodes": 2, "gpus_per_node": 2,
                "intra_node": {"kind": "nvswitch", "bandwidth_gbps": 450},
                "inter_node": {"nic_gbps": 50, "nics_per_node": 2}},
    "training": {"global_batch": 8, "micro_batch": 1, "seq_len": 512},
    "fsdp": {"strategy": "HYBRID_SHARD", "shard_group_size": 2}})";
  const std::string out = temp_path("mpi.json");
  const std::string mpirun =
      "env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1 "
      "OMPI_MCA_plm_rsh_agent= OMPI_MCA_btl_vader_single_copy_mechanism=none timeout 120 " +
      std::string(FSDPSIM_MPIEXEC) + " --allow-run-as-root --oversubscribe -np 4 ";
  const std::string err_file = temp_path("mpi.err");
  const std::string command = mpirun + FSDPSIM_CLI + " calibrate --launcher mpi --backend host --scenario " + scenario +
                              " --reps 3 --size-step 4 --host-max-bytes 1048576 --host-max-gemm-flops 1e7"
                              " --host-max-copy-bytes 4194304 -q -o " + out + " > /dev/null 2>" + err_file;
  const int status = std::system(command.c_str());
  std::ifstream err_in(err_file);
  const std::string err((std::istreambuf_iterator<char>(err_in)), std::istreambuf_iterator<char>());
  ASSERT_EQ(status, 0) << err;
  std::ifstream in(out);
  const nlohmann::json j = nlohmann::json::parse(in);
  // shard 2 ranks / 1 node, replicate 2 ranks / 2 nodes, world 4 ranks / 2 nodes; 3 collectives each.
  EXPECT_EQ(j["fit"]["collectives"].size(), 9u);
  int across = 0;
  for (const auto& c : j["fit"]["collectives"]) across += c["nodes"].get<int>() > 1;
  EXPECT_EQ(across, 6);
  bool said_mpi = false;
  for (const auto& n : j["fit"]["notes"]) said_mpi = said_mpi || n.get<std::string>().rfind("mpi: 4 processes", 0) == 0;
  EXPECT_TRUE(said_mpi) << j["fit"]["notes"].dump();
  EXPECT_NO_THROW(planner::read_calibration(j, out, planner::Calibration{}));
  // A world the processes do not match is one error.
  const std::string bad = mpirun + FSDPSIM_CLI + " calibrate --launcher mpi --backend host --scenario " + kScenario +
                          " -o " + out + " > /dev/null 2>" + err_file;
  EXPECT_NE(std::system(bad.c_str()), 0);
  std::ifstream bad_in(err_file);
  const std::string bad_err((std::istreambuf_iterator<char>(bad_in)), std::istreambuf_iterator<char>());
  EXPECT_NE(bad_err.find("error: calibrate under mpi: the scenario's world has 8 ranks but 4 processes"),
            std::string::npos)
      << bad_err;
#else
  GTEST_SKIP() << "fsdpsim was built without MPI";
#endif
}

}  // namespace
}  // namespace fsdpsim::testing
