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

// DeepSeek-V2-Lite's latent attention has q/k head dim 192 and v 128: SDPA's flash backend
// refuses unequal head dims (sdp_utils.cpp check_head_dim_size_flash), so SDPA runs the
// memory-efficient kernel, slower at 16k tokens (the session-37 audit: fsdpsim priced
// FlashAttention-2, which no stack runs at these dims).
TEST(AttentionKernel, LatentAttentionsUnequalHeadDimsGetSdpasMemoryEfficientKernel) {
  const std::string ds = "estimate --json --scenario " + std::string(FSDPSIM_SOURCE_ROOT) +
                         "/scenarios/deepseek-v2-lite-8xh100-fsdp2.json --set training.seq_len=16384 "
                         "--set training.micro_batch=1 --set training.global_batch=8";
  const CommandResult automatic = run_cli(ds);
  const CommandResult flash2 = run_cli(ds + " --set training.attention=flash2");
  ASSERT_EQ(automatic.exit_code, 0) << automatic.err;
  ASSERT_EQ(flash2.exit_code, 0) << flash2.err;
  const nlohmann::json a = nlohmann::json::parse(automatic.out), f = nlohmann::json::parse(flash2.out);
  EXPECT_EQ(a["attention_kernel"], "mem_efficient");
  EXPECT_GT(a["time"]["compute_seconds"].get<double>(), f["time"]["compute_seconds"].get<double>());
}

// [SDPA and sliding windows] Mistral-7B's 4096-token window at 8192 tokens: priced with
// FlashAttention-2's local attention, which transformers' default sdpa does not run; the
// estimate says so, and the SDPA kernels it names price the dense mask (no warning then). At
// 4096 tokens the window holds every key. gpt-oss: its sinks take neither kernel, said instead.
TEST(AttentionKernel, SlidingWindowsAndSinksSayWhichStackRunsThem) {
  auto warned = [](const std::string& cmd, const std::string& words) {
    const CommandResult r = run_cli(cmd + " --json");
    EXPECT_EQ(r.exit_code, 0) << cmd << "\n" << r.err;
    const nlohmann::json out = nlohmann::json::parse(r.out);
    for (const auto& w : out["warnings"])
      if (w.get<std::string>().find(words) != std::string::npos) return true;
    return false;
  };
  const std::string mistral = "estimate --model mistral-7b --gpus 8xH100 --micro-batch 1 --seq-len ";
  const std::string window = "sliding-window layers are priced with flash2's local attention";
  EXPECT_TRUE(warned(mistral + "8192", window));
  EXPECT_FALSE(warned(mistral + "8192 --set training.attention=mem_efficient", "sliding-window"));
  EXPECT_FALSE(warned(mistral + "4096", "sliding-window"));
  const std::string oss = "estimate --scenario " + std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/gpt-oss-20b-8xh100-fsdp2-ep8.json";
  EXPECT_TRUE(warned(oss, "gpt-oss's attention sinks are priced as flash2 without them"));
  EXPECT_FALSE(warned(oss, "sliding-window"));
  EXPECT_FALSE(warned(oss + " --set model=hf:" + std::string(FSDPSIM_SOURCE_ROOT) +
                          "/models/hf/gpt-oss-20b.json --set training.attention=eager",
                      "sinks"));
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
