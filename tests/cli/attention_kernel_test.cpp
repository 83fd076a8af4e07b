// `estimate` names the attention kernel it priced and prices the one training.attention names:
// FlashAttention-3 runs faster than FlashAttention-2 on an H100 (the FA3 paper's tables,
// docs/cost-model.md section 8), and a kernel that does not run on the GPU is an error naming
// training.attention.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"

namespace fsdpsim::testing {
namespace {

const std::string kScenario = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json";

nlohmann::json estimate(const std::string& sets) {
  const CommandResult r = run_cli("estimate --json --scenario " + kScenario + " " + sets);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  return nlohmann::json::parse(r.out);
}

TEST(AttentionKernel, EstimateNamesAndPricesTheChosenKernel) {
  const nlohmann::json def = estimate("");
  const nlohmann::json fa3 = estimate("--set training.attention=flash3");
  EXPECT_EQ(def["attention_kernel"], "flash2");  // what PyTorch's SDPA picks on an H100 without cuDNN preferred
  EXPECT_EQ(fa3["attention_kernel"], "flash3");
  EXPECT_LT(fa3["time"]["compute_seconds"].get<double>(), def["time"]["compute_seconds"].get<double>());
  // Memory does not depend on which fused kernel runs.
  EXPECT_EQ(fa3["memory"]["peak_allocated_bytes"], def["memory"]["peak_allocated_bytes"]);
  const CommandResult a100 = run_cli("estimate --scenario " + kScenario +
                                     " --set cluster=scenarios/clusters/dgx-a100.json --set training.attention=flash3");
  EXPECT_EQ(a100.exit_code, 2);
  EXPECT_NE(a100.err.find("training.attention"), std::string::npos) << a100.err;
  EXPECT_NE(a100.err.find("flash3 does not"), std::string::npos) << a100.err;
}

// A model costed for eager attention (the ColossalAI GPT-2 XL row) runs no fused kernel: the
// estimate says so rather than naming the kernel SDPA would have picked.
TEST(AttentionKernel, AnEagerModelIsNamedEager) {
  const CommandResult r = run_cli("estimate --json --scenario " + std::string(FSDPSIM_SOURCE_ROOT) +
                                  "/scenarios/published/r295-colossalai-deepspeed-zero3-gpt2-xl-4xa100-40gb.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out)["attention_kernel"], "eager");
}

}  // namespace
}  // namespace fsdpsim::testing
