// Attention kernel costs worked by hand where one term is the bound: the HBM traffic of a fused
// kernel on a device with little bandwidth, and eager attention's batched matmuls. Each test
// names the tools/mutants.txt mutant it kills.
#include <gtest/gtest.h>

#include "planner/attention_model.h"
#include "planner/cost_model.h"
#include "planner/scenario.h"
#include "synthetic.h"

namespace fsdpsim::planner {
namespace {

// FlashAttention-2 (Dao 2023, arXiv:2307.08691): the forward (Algorithm 1) reads Q, K, V and
// writes O; the backward (Algorithm 2) reads Q, K, V, O, dO and writes dQ, dK, dV, each once.
// On a device with 1 GB/s of HBM the kernel is bound by those bytes. A grouped-query shape,
// batch 1, 8 query heads, 2 KV heads, seq 128, head dim 64, 16-bit:
//   query-like tensors (Q, O, dO, dQ): 1 x 8 x 128 x 64 x 2 B = 131,072 B each
//   key-like tensors (K, V, dK, dV):   1 x 2 x 128 x 64 x 2 B =  32,768 B each
//   forward  2 x 131,072 + 2 x 32,768 = 327,680 B -> 327.68 us
//   backward 4 x 131,072 + 4 x 32,768 = 655,360 B -> 655.36 us
// (the compute bound here is about 12 us: 8 CTAs of one 128 x 128 tile and the kernel's fixed cost).
// Kills attn.backward-bytes-as-forward.
TEST(HandWorkedAttention, MemoryBoundFusedPassesMoveEachTensorOnce) {
  AttentionDevice device;
  device.arch = "hopper";
  device.sm_count = 132;
  device.peak_flops = 989.4e12;
  device.hbm_bytes_per_second = 1e9;
  const AttentionShape shape{1, 128, 128, 8, 2, 64, false, 0};
  for (AttentionKernel kernel : {AttentionKernel::flash2, AttentionKernel::flash3, AttentionKernel::cudnn}) {
    SCOPED_TRACE(to_string(kernel));
    EXPECT_DOUBLE_EQ(estimate_attention(shape, AttentionPass::forward, kernel, device).seconds, 327680 / 1e9);
    EXPECT_DOUBLE_EQ(estimate_attention(shape, AttentionPass::backward, kernel, device).seconds, 655360 / 1e9);
  }
}

// Eager attention (a model costed with materialised scores): QK^T and PV are batched matmuls
// over every (query, key) pair, one GEMM of b x heads problems each; the backward of a matmul
// C = A B runs two (dA = dC B^T, dB = A^T dC), so the backward's four bmm (dP, dV, dQ, dK) are
// twice the forward's two. Batch 2, 16 heads, seq 1024, head dim 64 on an H100: each of the six
// moves, per problem, one 1024 x 1024 score matrix and two 1024 x 64 operands, 2 bytes each:
// 32 x (1024^2 + 2 x 1024 x 64) x 2 = 75,497,472 bytes, 25.04 us at 3.35 TB/s x 0.9, against
// 32 x 2 x 1024^2 x 64 = 4.3 GFLOP, 5.4 us at 989.4 TFLOP/s x 0.8 (plus 1 us per 128 x 128 tile
// wave): HBM-bound, each GEMM 25.04 us + the 4.8 us kernel floor.
// Kills cost.eager-backward-as-forward.
TEST(HandWorkedAttention, EagerBackwardRunsTwiceTheForwardMatmuls) {
  const nlohmann::json scenario = {{"model", testing::block_model(2, {64, 64})},
                                   {"cluster", testing::cluster(1, 8)},
                                   {"training", {{"micro_batch", 2}, {"seq_len", 1024}}},
                                   {"calibration", {{"matmul_efficiency", 0.8}}}};
  const CostModel cost(parse_scenario(scenario, "test.json"));
  KernelSet k;
  k.has_attention = true;
  k.scores_materialized = true;
  k.attention = {2, 1024, 1024, 16, 16, 64, true, 0};
  const double one_gemm = 32.0 * (1024 * 1024 + 2 * 1024 * 64) * 2 / (3.35e12 * 0.9) + 4.8e-6;
  k.attention_pass = AttentionPass::forward;
  EXPECT_NEAR(cost.kernel_set_seconds(k), 2 * one_gemm, 1e-12);
  k.attention_pass = AttentionPass::backward;
  EXPECT_NEAR(cost.kernel_set_seconds(k), 4 * one_gemm, 1e-12);
}

}  // namespace
}  // namespace fsdpsim::planner
