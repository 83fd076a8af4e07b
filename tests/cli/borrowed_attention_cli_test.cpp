// estimate says when the attention kernel it prices has no published rows on the run's GPU
// (planner/cost_model.h borrowed_attention_warning): SDPA's mem-efficient kernel on Hopper is
// priced from the FlashAttention-2 paper's A100 xformers bars carried to Hopper by
// FlashAttention-2's own A100-to-H100 ratio, and measured 6-33% slower on this workplace's H100 and
// H200 (docs/accuracy.md); FlashAttention-2 on Blackwell borrows the H100's
// constants. Kernels with their own rows on the GPU (flash2 and cuDNN on Hopper) say nothing.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"

namespace fsdpsim::testing {
namespace {

std::vector<std::string> warnings_of(const std::string& sets) {
  const nlohmann::json j = run_cli_json("estimate --scenario " + quick_start_scenario() + sets + " --json");
  return j["warnings"].get<std::vector<std::string>>();
}

TEST(BorrowedAttentionCli, EstimateWarnsWhenTheKernelsConstantsComeFromElsewhere) {
  const std::vector<std::string> mem = warnings_of(" --set training.attention=mem_efficient");
  ASSERT_EQ(mem.size(), 1u);
  EXPECT_NE(mem[0].find("attention kernel mem_efficient on H100-SXM-80GB (hopper)"), std::string::npos) << mem[0];
  EXPECT_NE(mem[0].find("borrowed from mem_efficient on ampere"), std::string::npos) << mem[0];
  EXPECT_NE(mem[0].find("carried to hopper by flash2's ampere-to-hopper ratio"), std::string::npos) << mem[0];
  EXPECT_NE(mem[0].find("19-33% slower at head dim 64"), std::string::npos) << mem[0];
  const std::vector<std::string> b200 =
      warnings_of(" --set cluster=" + std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/clusters/dgx-b200.json");
  ASSERT_EQ(b200.size(), 1u);
  EXPECT_NE(b200[0].find("flash2 on B200-SXM-180GB (blackwell)"), std::string::npos) << b200[0];
  EXPECT_NE(b200[0].find("borrowed from flash2 on hopper"), std::string::npos) << b200[0];
  EXPECT_EQ(b200[0].find("slower at head dim"), std::string::npos) << b200[0];
  EXPECT_TRUE(warnings_of(" --set training.attention=flash2").empty());
  EXPECT_TRUE(warnings_of(" --set training.attention=cudnn").empty());
  // Eager attention materialises the scores: no fused kernel, no warning.
  EXPECT_TRUE(warnings_of(" --set model=" + std::string(FSDPSIM_SOURCE_ROOT) +
                          "/models/colossalai-gpt2-xl.json --set training.attention=eager --set training.seq_len=1024")
                  .empty());
}

}  // namespace
}  // namespace fsdpsim::testing
