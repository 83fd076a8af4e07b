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

// A config that says how its catalog entry was imported ("_import_options": eager attention,
// a loss on 16-bit logits) gives that entry through `import-hf` and an hf: reference too (the
// session-30 audit: hf:models/hf/kempnerforge-7b.json peaked at 44.7 GB where the catalog's
// kempnerforge-7b does at 32.1, its loss upcast to fp32 by default).
TEST(CatalogModels, ImportOptionsOfTheConfigGiveTheCatalogEntry) {
  const std::string root = FSDPSIM_SOURCE_ROOT;
  for (const char* name : {"kempnerforge-7b", "colossalai-gpt2-xl"}) {
    SCOPED_TRACE(name);
    const CommandResult imported = run_cli("import-hf " + root + "/models/hf/" + name + ".json");
    ASSERT_EQ(imported.exit_code, 0) << imported.err;
    nlohmann::json catalog = load_json_file(root + "/models/" + name + ".json");
    nlohmann::json mine = nlohmann::json::parse(imported.out);
    // "source" names the config by the path it was given (here absolute).
    EXPECT_NE(mine["source"].get<std::string>().find("imported by fsdpsim with"), std::string::npos);
    catalog.erase("source");
    mine.erase("source");
    EXPECT_EQ(mine, catalog);
    const std::string base = "estimate --scenario " + root + "/scenarios/llama3.1-8b-8xh100.json --set model=";
    const nlohmann::json by_config = run_cli_json(base + "hf:" + root + "/models/hf/" + name + ".json");
    const nlohmann::json by_name = run_cli_json(base + root + "/models/" + name + ".json");
    EXPECT_EQ(by_config["memory"]["peak_allocated_bytes"], by_name["memory"]["peak_allocated_bytes"]);
    EXPECT_EQ(by_config["time"]["step_seconds"], by_name["time"]["step_seconds"]);
  }
}

// `import-hf --liger` writes a model costed for Liger-Kernel's blocks (docs/memory-model.md,
// "Liger-Kernel's blocks"): "liger": true, its loss Liger's fused linear cross-entropy, and an
// estimate of it says so (text and JSON) and peaks lower than the eager import's. --liger with
// --loss is refused (Liger's loss replaces the one named), and a family Liger does not patch is
// bad input naming the config's model_type (exit 2).
TEST(CatalogModels, ImportHfWithLigerAndItsRefusals) {
  const std::string root = FSDPSIM_SOURCE_ROOT;
  const std::string config = root + "/models/hf/llama3.2-1b.json";
  const CommandResult imported = run_cli("import-hf " + config + " --liger");
  ASSERT_EQ(imported.exit_code, 0) << imported.err;
  const nlohmann::json model = nlohmann::json::parse(imported.out);
  EXPECT_EQ(model["liger"], true);
  EXPECT_EQ(model["root"]["children"].back()["costs"]["loss"]["kind"], "chunked");
  const std::string base = "estimate --scenario " + root + "/scenarios/llama3.1-8b-8xh100.json --set model=hf:" + config;
  const nlohmann::json liger = run_cli_json(base + " --set training.liger=true");
  const nlohmann::json eager = run_cli_json(base);
  EXPECT_EQ(liger["liger"], true);
  EXPECT_EQ(eager["liger"], false);
  EXPECT_LT(liger["memory"]["peak_allocated_bytes"].get<double>(), eager["memory"]["peak_allocated_bytes"].get<double>());
  const CommandResult text = run_cli(base + " --set training.liger=true");
  EXPECT_NE(text.out.find("blocks: Liger-Kernel's RMSNorm, rotary and gated activation"), std::string::npos) << text.out;
  const CommandResult both = run_cli("import-hf " + config + " --liger --loss bf16");
  EXPECT_NE(both.exit_code, 0);
  EXPECT_NE(both.err.find("excludes"), std::string::npos) << both.err;
  const CommandResult falcon = run_cli("import-hf " + root + "/models/hf/falcon-7b.json --liger");
  EXPECT_EQ(falcon.exit_code, 2) << falcon.err;
  EXPECT_NE(falcon.err.find("model_type"), std::string::npos) << falcon.err;
}

}  // namespace
}  // namespace fsdpsim::testing
