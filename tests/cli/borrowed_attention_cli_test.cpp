// estimate says when the attention kernel it prices has no published rows on the run's GPU
// (planner/cost_model.h borrowed_attention_warning): SDPA's mem-efficient kernel on Hopper is
// priced from the FlashAttention-2 paper's A100 xformers bars carried to Hopper by
// FlashAttention-2's own A100-to-H100 ratio, and measured 6-33% slower on this workplace's H100 and
// H200 (docs/accuracy.md); FlashAttention-2 on the L40S (Ada) borrows the A100's constants.
// Kernels with their own rows on the GPU (flash2 and cuDNN on Hopper, flash2 on the B200) say
// nothing.
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
  // FlashAttention-2 on the B200 has published rows of its own (session 38): no warning; its
  // memory-efficient kernel is carried by them.
  const std::string b200 = " --set cluster=" + std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/clusters/dgx-b200.json";
  EXPECT_TRUE(warnings_of(b200).empty());
  const std::vector<std::string> b200_mem = warnings_of(b200 + " --set training.attention=mem_efficient");
  ASSERT_EQ(b200_mem.size(), 1u);
  EXPECT_NE(b200_mem[0].find("mem_efficient on B200-SXM-180GB (blackwell)"), std::string::npos) << b200_mem[0];
  EXPECT_NE(b200_mem[0].find("carried to blackwell by flash2's ampere-to-blackwell ratio"), std::string::npos)
      << b200_mem[0];
  const std::vector<std::string> l40s =
      warnings_of(" --set cluster=" + std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/clusters/l40s-8gpu-pcie.json" +
                  " --set training.seq_len=2048");
  ASSERT_EQ(l40s.size(), 1u);
  EXPECT_NE(l40s[0].find("flash2 on L40S-48GB (ada)"), std::string::npos) << l40s[0];
  EXPECT_NE(l40s[0].find("borrowed from flash2 on ampere"), std::string::npos) << l40s[0];
  EXPECT_EQ(l40s[0].find("slower at head dim"), std::string::npos) << l40s[0];
  EXPECT_TRUE(warnings_of(" --set training.attention=flash2").empty());
  EXPECT_TRUE(warnings_of(" --set training.attention=cudnn").empty());
  // Eager attention materialises the scores: no fused kernel, no warning.
  EXPECT_TRUE(warnings_of(" --set model=" + std::string(FSDPSIM_SOURCE_ROOT) +
                          "/models/colossalai-gpt2-xl.json --set training.attention=eager --set training.seq_len=1024")
                  .empty());
}

}  // namespace
}  // namespace fsdpsim::testing
