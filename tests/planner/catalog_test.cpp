// planner/catalog.h: name matching, close names, GPU counts, the cluster a GPU kind stands for
// and the one-line scenario's overrides.
#include <gtest/gtest.h>

#include "models/json_input.h"
#include "planner/catalog.h"
#include "planner/scenario.h"

namespace fsdpsim::planner {
namespace {

TEST(Catalog, CloseNamesRankByEditDistanceAndContainment) {
  const std::vector<std::string> names = {"llama2-70b", "llama3.1-70b", "llama3.1-8b", "gpt2", "mistral-7b"};
  const std::vector<std::string> close = close_names("llama-70b", names);
  ASSERT_GE(close.size(), 2u);
  EXPECT_EQ(close[0], "llama2-70b");  // one edit after normalising ("llama70b" -> "llama270b")
  EXPECT_NE(std::find(close.begin(), close.end(), "llama3.1-70b"), close.end());
  EXPECT_EQ(std::find(close.begin(), close.end(), "gpt2"), close.end());
  EXPECT_TRUE(close_names("qwen", names).empty());
}

TEST(Catalog, GpuCountsParseOrSayWhatIsExpected) {
  EXPECT_EQ(parse_gpu_count("64xH100").count, 64);
  EXPECT_EQ(parse_gpu_count("64xH100").what, "H100");
  EXPECT_EQ(parse_gpu_count("16Xdgx-a100").what, "dgx-a100");
  EXPECT_EQ(parse_gpu_count("8").what, "");
  for (const char* bad : {"", "x8", "64x", "64H100", "0xH100", "99999999xH100", "-8"})
    EXPECT_THROW(parse_gpu_count(bad), InputError) << bad;
}

TEST(Catalog, GpuKindsResolveToClusters) {
  EXPECT_EQ(cluster_for_gpu_kind("H100"), "scenarios/clusters/dgx-h100.json");
  EXPECT_EQ(cluster_for_gpu_kind("h200"), "scenarios/clusters/dgx-h200.json");
  EXPECT_EQ(cluster_for_gpu_kind("dgx-a100-fat-tree"), "scenarios/clusters/dgx-a100-fat-tree.json");
  EXPECT_EQ(cluster_for_gpu_kind("MI300X"), "scenarios/clusters/mi300x-8gpu.json");  // MI300X-192GB
  EXPECT_EQ(cluster_for_gpu_kind("L40S-48GB"), "scenarios/clusters/l40s-8gpu-pcie.json");
  EXPECT_THROW(cluster_for_gpu_kind("V100"), InputError);
}

TEST(Catalog, OneLineScenarioIsReferencesAndOverrides) {
  const QuickScenarioDocument q = quick_scenario({"Llama-3.1-8B", "", "32xH100", {"fsdp.strategy=HYBRID_SHARD"}});
  EXPECT_EQ(q.document["model"], "models/llama3.1-8b.json");
  EXPECT_EQ(q.document["cluster"], "scenarios/clusters/dgx-h100.json");
  EXPECT_EQ(q.gpus, 32);
  ASSERT_EQ(q.overrides.size(), 2u);
  EXPECT_EQ(q.overrides[0], "cluster.nodes=4");
  EXPECT_EQ(q.overrides[1], "fsdp.strategy=HYBRID_SHARD");
  const Scenario s = parse_scenario(q.document, kCommandLineFile, q.overrides);
  EXPECT_EQ(s.world_size(), 32);
  EXPECT_EQ(s.fsdp.shard_group_size, 8);  // HYBRID_SHARD's default: a node
  // Fewer GPUs than a node: one node of that many, with no more NICs than GPUs.
  const QuickScenarioDocument small = quick_scenario({"gpt2", "dgx-h100", "2", {}});
  EXPECT_EQ(parse_scenario(small.document, kCommandLineFile, small.overrides).world_size(), 2);
}

}  // namespace
}  // namespace fsdpsim::planner
