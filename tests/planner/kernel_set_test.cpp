// The kernels a compute op carries (planner/schedule.h KernelSet) and the FLOPs MFU counts,
// against shapes and sums worked out by hand for Llama-3.1-8B (models/llama3.1-8b.json:
// h 4096, 32 query heads and 8 key/value heads of 128, FFN 14336, vocab 128256, 32 layers).
#include <gtest/gtest.h>

#include <string>

#include "models/json_input.h"
#include "planner/plan.h"
#include "planner/scenario.h"

namespace fsdpsim::planner {
namespace {

Plan llama8b(int micro_batch, int seq_len, const std::string& checkpointing) {
  const nlohmann::json j = {{"model", "models/llama3.1-8b.json"},
                            {"cluster", "scenarios/clusters/dgx-h100.json"},
                            {"training", {{"micro_batch", micro_batch}, {"seq_len", seq_len}, {"global_batch", 8 * micro_batch},
                                          {"activation_checkpointing", checkpointing}}}};
  return plan_step(parse_scenario(j, "test.json"));
}

const Op& op_named(const Schedule& s, const std::string& name) {
  for (const Op& op : s.ops)
    if (op.name == name) return op;
  throw std::runtime_error("no op " + name);
}

bool has_gemm(const KernelSet& k, double m, double n, double kk) {
  for (const GemmShape& g : k.gemms)
    if (g.m == m && g.n == n && g.k == kk) return true;
  return false;
}

TEST(KernelSets, ForwardRunsEachProjectionOnTheTokensAndBackwardItsTwoGradients) {
  const Plan p = llama8b(2, 4096, "none");
  const Schedule& s = p.schedule;
  const double tokens = 2 * 4096;
  const KernelSet& fwd = s.kernel_sets.at(op_named(s, "fwd model.layers.3").kernel_set);
  ASSERT_EQ(fwd.gemms.size(), 7u);  // q, k, v, o, gate, up, down
  EXPECT_TRUE(has_gemm(fwd, tokens, 1024, 4096));   // k projection: 4096 -> 1024
  EXPECT_TRUE(has_gemm(fwd, tokens, 14336, 4096));  // gate
  EXPECT_TRUE(has_gemm(fwd, tokens, 4096, 14336));  // down
  ASSERT_TRUE(fwd.has_attention);
  EXPECT_EQ(fwd.attention.heads, 32);
  EXPECT_EQ(fwd.attention.kv_heads, 8);
  EXPECT_EQ(fwd.attention.head_dim, 128);
  EXPECT_EQ(fwd.attention.seq_q, 4096);
  EXPECT_EQ(fwd.attention.batch, 2);
  EXPECT_TRUE(fwd.attention.causal);
  const KernelSet& bwd = s.kernel_sets.at(op_named(s, "bwd model.layers.3").kernel_set);
  ASSERT_EQ(bwd.gemms.size(), 14u);
  EXPECT_TRUE(has_gemm(bwd, tokens, 4096, 1024));   // k projection's input gradient: dY[T,1024] W[1024,4096]
  EXPECT_TRUE(has_gemm(bwd, 1024, 4096, tokens));   // its weight gradient: dY^T[1024,T] X[T,4096]
  EXPECT_EQ(bwd.attention_pass, AttentionPass::backward);
  // The set's FLOPs are the op's: 2 x 218,103,808 per token forward, attention 4 x 4096 per pair.
  const Op& f = op_named(s, "fwd model.layers.3");
  EXPECT_DOUBLE_EQ(fwd.flops(), f.flops);
  EXPECT_DOUBLE_EQ(f.flops, 2.0 * 218103808 * tokens + 4.0 * 4096 * 2 * 4096.0 * 4096);
  EXPECT_DOUBLE_EQ(bwd.flops(), op_named(s, "bwd model.layers.3").flops);
  // Every layer shares the forward set: 32 identical blocks, one set.
  EXPECT_EQ(op_named(s, "fwd model.layers.0").kernel_set, op_named(s, "fwd model.layers.31").kernel_set);
}

// torchtitan's op-level SAC saves the odd-numbered mm outputs (q, v, gate, down) and recomputes
// k, o and up; the flash attention output is saved, so attention does not run again.
TEST(KernelSets, SelectiveRecomputeRunsTheUnsavedProjectionsOnly) {
  const Plan p = llama8b(1, 2048, "selective");
  const Schedule& s = p.schedule;
  const KernelSet& re = s.kernel_sets.at(op_named(s, "recompute model.layers.5").kernel_set);
  ASSERT_EQ(re.gemms.size(), 3u);
  EXPECT_TRUE(has_gemm(re, 2048, 1024, 4096));   // k
  EXPECT_TRUE(has_gemm(re, 2048, 4096, 4096));   // o
  EXPECT_TRUE(has_gemm(re, 2048, 14336, 4096));  // up
  EXPECT_FALSE(re.has_attention);
}

// MFU's model FLOPs per micro-step: 3 x (matmuls + causal attention at half the square).
// Per token: 32 blocks x 436,207,616 + the output layer 2 x 4096 x 128256 = 1,050,804,224;
// attention: 32 x 4 x 4096 x s^2 x b, halved for the causal mask.
TEST(KernelSets, ModelFlopsCountCausalAttentionAtHalfTheSquare) {
  const double b = 1, seq = 16384;
  const Plan p = llama8b(1, 16384, "full");
  const double per_token = 32.0 * 436207616 + 2.0 * 4096 * 128256;
  const double attention = 32.0 * 4 * 4096 * seq * seq * b;
  const double expected = 3 * (per_token * b * seq + 0.5 * attention) * p.schedule.micro_steps;
  EXPECT_NEAR(p.schedule.model_flops_per_rank, expected, 1e-9 * expected);
}

// Gemma-2-9B (models/gemma2-9b.json): 42 layers, the even ones with a 4096-token window. At
// s = 8192 a sliding layer's causal band keeps (4096 x 8192 - 4096^2 / 2) / 8192^2 = 0.375 of
// the square against the full layers' 0.5. Per token: 42 blocks x 2 x 198,180,864 matmul
// weights (q 3584x4096, k and v 3584x2048, o 4096x3584, three 3584x14336) + the output layer
// 2 x 3584 x 256,000; attention per layer 4 x 4096 x s^2 x b.
TEST(KernelSets, SlidingWindowLayersCountTheirBand) {
  const double b = 1, seq = 8192;
  const nlohmann::json j = {{"model", "models/gemma2-9b.json"},
                            {"cluster", "scenarios/clusters/dgx-h100.json"},
                            {"training", {{"micro_batch", 1}, {"seq_len", 8192}, {"global_batch", 8},
                                          {"activation_checkpointing", "full"}}}};
  const Plan p = plan_step(parse_scenario(j, "test.json"));
  const double per_token = 42.0 * 2 * 198180864 + 2.0 * 3584 * 256000;
  const double square = 4.0 * 4096 * seq * seq * b;
  const double expected = 3 * (per_token * b * seq + 21 * square * (0.375 + 0.5)) * p.schedule.micro_steps;
  EXPECT_NEAR(p.schedule.model_flops_per_rank, expected, 1e-9 * expected);
  // The fused kernel of a sliding layer runs 0.375 / 0.5 = 3/4 of the full layer's attention.
  const Op& sliding = op_named(p.schedule, "fwd model.layers.0");
  const Op& full = op_named(p.schedule, "fwd model.layers.1");
  EXPECT_DOUBLE_EQ(full.attention_flops, square);
  EXPECT_DOUBLE_EQ(sliding.attention_flops, 0.75 * square);
  EXPECT_DOUBLE_EQ(full.flops - sliding.flops, 0.25 * square);
  EXPECT_NE(sliding.kernel_set, full.kernel_set);
  EXPECT_EQ(p.schedule.kernel_sets.at(sliding.kernel_set).attention.window, 4096);
  EXPECT_EQ(sliding.kernel_set, op_named(p.schedule, "fwd model.layers.40").kernel_set);
}

// [SDPA and sliding windows] (planner/attention_model.h) SDPA has no window argument: a sliding
// layer reaches its cuDNN and memory-efficient backends as a dense mask, every pair of the square
// computed (no causal skip), and the mask's 16-bit bias, batch x 1 x s x s x 2 bytes, is kept for
// the backward. Gemma-2-9B at s = 8192 (window 4096), no checkpointing: a sliding layer runs the
// whole square, 4 x 4096 x s^2 FLOPs executed (FlashAttention-2: 0.375 of it) and saves
// 8192^2 x 2 = 134,217,728 bytes more; the full layers and the FLOPs MFU counts are unchanged.
// At s = 4096 the window holds every key: nothing changes.
TEST(KernelSets, SdpaBackendsRunASlidingLayerAsADenseMask) {
  auto plan = [](const std::string& kernel, int seq) {
    const nlohmann::json j = {{"model", "models/gemma2-9b.json"},
                              {"cluster", "scenarios/clusters/dgx-h100.json"},
                              {"training", {{"micro_batch", 1}, {"seq_len", seq}, {"global_batch", 8},
                                            {"activation_checkpointing", "none"}, {"attention", kernel}}}};
    return plan_step(parse_scenario(j, "test.json"));
  };
  auto saved_bytes = [](const Plan& p, const std::string& name) {
    for (const Allocation& a : p.schedule.allocations)
      if (a.label == name) return a.bytes;
    throw std::runtime_error("no allocation " + name);
  };
  const double seq = 8192, square = 4.0 * 4096 * seq * seq;
  const Plan flash = plan("flash2", 8192);
  for (const std::string kernel : {"cudnn", "mem_efficient"}) {
    const Plan sdpa = plan(kernel, 8192);
    const Op& sliding = op_named(sdpa.schedule, "fwd model.layers.0");
    const KernelSet& k = sdpa.schedule.kernel_sets.at(sliding.kernel_set);
    EXPECT_FALSE(k.attention.causal) << kernel;
    EXPECT_EQ(k.attention.window, 0) << kernel;
    EXPECT_DOUBLE_EQ(sliding.attention_flops, square) << kernel;
    EXPECT_DOUBLE_EQ(executed_flops(sliding, sdpa.schedule) - executed_flops(op_named(flash.schedule, "fwd model.layers.0"), flash.schedule),
                     (1 - 0.375) * square)
        << kernel;
    const Op& full = op_named(sdpa.schedule, "fwd model.layers.1");
    EXPECT_TRUE(sdpa.schedule.kernel_sets.at(full.kernel_set).attention.causal) << kernel;
    EXPECT_DOUBLE_EQ(full.attention_flops, op_named(flash.schedule, "fwd model.layers.1").attention_flops) << kernel;
    EXPECT_DOUBLE_EQ(sdpa.schedule.model_flops_per_rank, flash.schedule.model_flops_per_rank) << kernel;
    EXPECT_EQ(saved_bytes(sdpa, "activations of model.layers.0") - saved_bytes(flash, "activations of model.layers.0"),
              8192LL * 8192 * 2)
        << kernel;
    EXPECT_EQ(saved_bytes(sdpa, "activations of model.layers.1"), saved_bytes(flash, "activations of model.layers.1")) << kernel;
  }
  const Plan at_window = plan("cudnn", 4096);
  const KernelSet& k = at_window.schedule.kernel_sets.at(op_named(at_window.schedule, "fwd model.layers.0").kernel_set);
  EXPECT_TRUE(k.attention.causal);
  EXPECT_EQ(k.attention.window, 4096);
}

TEST(KernelSets, ScheduleJsonRoundTripsThem) {
  const Plan p = llama8b(1, 1024, "selective");
  const Schedule back = schedule_from_json(schedule_to_json(p.schedule), "s.json");
  ASSERT_EQ(back.kernel_sets.size(), p.schedule.kernel_sets.size());
  EXPECT_EQ(schedule_to_json(back), schedule_to_json(p.schedule));
  nlohmann::json bad = schedule_to_json(p.schedule);
  bad["kernel_sets"][0]["gemms"][0] = {1, 0, 3};
  EXPECT_THROW(schedule_from_json(bad, "s.json"), InputError);
  bad = schedule_to_json(p.schedule);
  bad["ops"][1]["kernel_set"] = 99999;
  EXPECT_THROW(schedule_from_json(bad, "s.json"), InputError);
}

}  // namespace
}  // namespace fsdpsim::planner
