// `fsdpsim estimate` on each cluster file of the 2026 parts (DGX B200, GB200 NVL72, MI300X,
// MI325X, L40S, H100 PCIe, H100 NVL): the scenario runs end to end, and the GPU memory the
// planner fits the step into is the catalog's memory_mib for that GPU.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "models/json_input.h"

namespace fsdpsim::testing {
namespace {

const std::string kRoot = FSDPSIM_SOURCE_ROOT;
const std::string kScenario = kRoot + "/scenarios/llama3.1-8b-8xh100.json";

struct ClusterCase {
  std::string file;  // under scenarios/clusters/
  int gpus;          // world size: the global batch is micro_batch 2 x GPUs (one micro-step)
};

TEST(CatalogClusters, EstimateRunsOnEachNewClusterWithTheCatalogsMemory) {
  const nlohmann::json gpus = load_json_file(kRoot + "/scenarios/hardware/gpus.json");
  for (const ClusterCase& k : {ClusterCase{"dgx-b200.json", 8}, ClusterCase{"gb200-nvl72.json", 72},
                               ClusterCase{"mi300x-8gpu.json", 8}, ClusterCase{"mi325x-8gpu.json", 8},
                               ClusterCase{"l40s-8gpu-pcie.json", 8}, ClusterCase{"h100-pcie-8gpu.json", 8},
                               ClusterCase{"h100-nvl-8gpu.json", 8}}) {
    SCOPED_TRACE(k.file);
    const std::string cluster_file = "scenarios/clusters/" + k.file;
    const nlohmann::json cluster = load_json_file(kRoot + "/" + cluster_file);
    const std::string gpu = cluster["gpu"].get<std::string>();
    // GPT-2 small keeps the run short; the batch gives every GPU one micro-batch of 2.
    const CommandResult r = run_cli("estimate --scenario " + kScenario + " --set cluster=" + cluster_file +
                                    " --set model=models/gpt2.json --set training.seq_len=1024" +
                                    " --set training.global_batch=" + std::to_string(2 * k.gpus) + " --json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json e = nlohmann::json::parse(r.out);
    const double memory_mib = gpus[gpu]["memory_mib"].get<double>();
    EXPECT_EQ(e["memory"]["gpu_memory_bytes"].get<double>(), memory_mib * 1024 * 1024) << gpu;
    EXPECT_GT(e["time"]["step_seconds"].get<double>(), 0);
    // GPT-2 small with FSDP over 8+ GPUs fits in any of these GPUs.
    EXPECT_TRUE(e["memory"]["fits"].get<bool>());
    // The gradients are reduce-scattered: some collective time is there.
    EXPECT_GT(e["time"]["comm_seconds"].get<double>(), 0);
  }
}

}  // namespace
}  // namespace fsdpsim::testing
