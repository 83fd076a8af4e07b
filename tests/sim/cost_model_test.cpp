// The cost model (planner/cost_model.h) as the engines see it: collectives through an op's
// process group give NCCL's formulas worked by hand; compute ops give FLOPs / (peak x
// efficiency) + bytes / (bandwidth x efficiency); issue costs follow the kernel estimate;
// calibration files are read with errors that name the JSON path.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "models/json_input.h"
#include "planner/cost_model.h"
#include "planner/op_costs.h"
#include "planner/scenario.h"
#include "planner/plan.h"
#include "sim/analytic.h"
#include "sim/estimate.h"
#include "tests/planner/synthetic.h"

namespace fsdpsim::sim {
namespace {

using planner::CostModel;
using planner::Op;
using planner::OpKind;
using planner::Schedule;
using planner::Stream;

constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

// A scenario on `nodes` DGX-H100-like nodes (tests/planner/synthetic.h: 989.4 TFLOP/s bf16,
// 3.35 TB/s, NVLink4 18 x 450 GB/s, one 50 GB/s NIC per GPU) with an inline calibration.
planner::Scenario scenario_on(int nodes, const nlohmann::json& calibration,
                              const std::string& param_dtype = "bf16") {
  nlohmann::json j = {{"model", testing::block_model(2, {1024, 1024})},
                      {"cluster", testing::cluster(nodes, 8)},
                      {"training", {{"micro_batch", 1}, {"seq_len", 1024}, {"param_dtype", param_dtype}}},
                      {"calibration", calibration}};
  return planner::parse_scenario(j, "test.json");
}

Op collective(int id, OpKind kind, double bytes, int group) {
  Op op;
  op.id = id;
  op.kind = kind;
  op.stream = kind == OpKind::all_gather ? Stream::all_gather
              : kind == OpKind::reduce_scatter ? Stream::reduce_scatter
                                               : Stream::all_reduce;
  op.name = planner::to_string(kind);
  op.comm_bytes = bytes;
  op.group = group;
  return op;
}

// NCCL_ALGO=Ring, as the hand calculation of tests/planner/collectives_test.cpp assumes.
const nlohmann::json kRingOnly = {{"nccl", {{"algorithms", {{"tree", false}, {"nvls", false}}}}}};

// The hand-worked ring times of tests/planner/collectives_test.cpp (NCCL 2.28 tuning.cc):
// one node busBw 12 x 30 = 360 GB/s; >= 2 nodes 8 x 45 = 360 GB/s; latency = 8.4 + intra
// steps x 3.4 + inter steps x 14.0 us (x 1.4 for a multi-node Simple all-reduce).
struct HandCase {
  int ranks, nodes;
  double ag_us, ar_us;
};
std::vector<HandCase> hand_cases() {
  const double B = 1 * GiB;
  return {
      {8, 1, 32.2 + B / (1000.0 * (360.0 * 8.0 / 7.0)), 56.0 + B / (1000.0 * (360.0 * 8.0 / 14.0))},
      {16, 2, 70.0 + B / (1000.0 * 384.0), 131.6 * 1.4 + B / (1000.0 * 192.0)},
      {128, 16, 599.2 + B / (1000.0 * (360.0 * 128.0 / 127.0)), 1190.0 * 1.4 + B / (1000.0 * (360.0 * 128.0 / 254.0))},
  };
}

TEST(CostModelCollectives, OpWithAGroupGetsNcclsRingFormula) {
  const planner::Scenario sc = scenario_on(16, kRingOnly);
  const CostModel cost(sc);
  for (const HandCase& h : hand_cases()) {
    Schedule s;
    s.groups = {{"g", h.ranks, h.nodes}};
    s.ops = {collective(0, OpKind::all_gather, 1 * GiB, 0), collective(1, OpKind::reduce_scatter, 1 * GiB, 0),
             collective(2, OpKind::all_reduce, 1 * GiB, 0)};
    const std::string what = std::to_string(h.ranks) + " ranks on " + std::to_string(h.nodes) + " nodes";
    EXPECT_NEAR(cost.duration_seconds(s.ops[0], s), h.ag_us * 1e-6, h.ag_us * 1e-15) << what;
    EXPECT_NEAR(cost.duration_seconds(s.ops[1], s), h.ag_us * 1e-6, h.ag_us * 1e-15) << what;
    EXPECT_NEAR(cost.duration_seconds(s.ops[2], s), h.ar_us * 1e-6, h.ar_us * 1e-15) << what;
    EXPECT_EQ(cost.collective(s.ops[0], s).algorithm, "Ring");
  }
}

TEST(CostModelCollectives, EngineTimesALoneCollectiveAtItsNcclCost) {
  // The same numbers through engine_inputs + simulate (latency split, memoisation, streams).
  planner::Scenario sc = scenario_on(16, {{"nccl", kRingOnly["nccl"]}, {"op_issue_seconds", 0}, {"kernel_issue_seconds", 0}});
  const CostModel cost(sc);
  for (const HandCase& h : hand_cases()) {
    Schedule s;
    s.groups = {{"g", h.ranks, h.nodes}};
    s.ops = {collective(0, OpKind::all_reduce, 1 * GiB, 0)};
    const StepTiming t = time_step(s, cost);
    EXPECT_NEAR(t.step_seconds, h.ar_us * 1e-6, h.ar_us * 1e-15);
    EXPECT_NEAR(t.exposed_comm_seconds, h.ar_us * 1e-6, h.ar_us * 1e-15);
  }
}

TEST(CostModelCollectives, OpWithoutAGroupIsRefused) {
  const CostModel cost(scenario_on(1, nlohmann::json::object()));
  Schedule s;
  s.ops = {collective(0, OpKind::all_gather, 1e6, 3)};
  EXPECT_THROW(cost.duration_seconds(s.ops[0], s), std::invalid_argument);
}

TEST(CostModelCompute, FlopsAndBytesAtTheCalibratedEfficiencies) {
  const nlohmann::json cal = {{"matmul_efficiency", 0.5}, {"attention_efficiency", 0.25}, {"causal_attention_work", 0.5},
                              {"attention_backward_work", 1.25}, {"hbm_efficiency", 0.8},
                              {"memory_bound_efficiency", 0.8}};
  const CostModel cost(scenario_on(1, cal));
  Schedule s;
  Op fwd;
  fwd.kind = OpKind::compute_fwd;
  fwd.flops = 3e12;
  fwd.attention_flops = 1e12;
  fwd.hbm_bytes = 6.7e9;
  // 2e12 / (989.4e12 x 0.5) + 1e12 x 0.5 / (989.4e12 x 0.25) + 6.7e9 / (3.35e12 x 0.8)
  const double fwd_s = 2e12 / 494.7e12 + 0.5e12 / 247.35e12 + 6.7e9 / 2.68e12;
  EXPECT_NEAR(cost.duration_seconds(fwd, s), fwd_s, 1e-15);
  Op bwd = fwd;  // the planner doubles the forward's FLOPs and bytes
  bwd.kind = OpKind::compute_bwd;
  bwd.flops = 6e12;
  bwd.attention_flops = 2e12;
  bwd.hbm_bytes = 13.4e9;
  // attention part x 1.25 (FlashAttention's backward: 2.5 x forward, not 2 x)
  const double bwd_s = 4e12 / 494.7e12 + 2e12 * 0.5 * 1.25 / 247.35e12 + 13.4e9 / 2.68e12;
  EXPECT_NEAR(cost.duration_seconds(bwd, s), bwd_s, 1e-15);
  Op re = fwd;
  re.kind = OpKind::recompute;
  EXPECT_NEAR(cost.duration_seconds(re, s), fwd_s, 1e-15);
  // Memory-bound only: the optimizer step, copies.
  Op opt;
  opt.kind = OpKind::optimizer;
  opt.hbm_bytes = 2.68e9;
  EXPECT_NEAR(cost.duration_seconds(opt, s), 1e-3, 1e-15);
}

TEST(CostModelCompute, Fp32ComputeUsesTheTf32Peak) {
  const CostModel cost(scenario_on(1, {{"matmul_efficiency", 1.0}}, "fp32"));
  Op op;
  op.kind = OpKind::compute_fwd;
  op.flops = 494.7e12;  // the test GPU's fp32 (TF32 tensor core) peak
  EXPECT_NEAR(cost.duration_seconds(op, Schedule{}), 1.0, 1e-12);
  EXPECT_DOUBLE_EQ(cost.mfu_peak_flops(), 989.4e12);
}

TEST(CostModelIssue, KernelEstimateFromTheModulesParameterTensors) {
  // Llama-3.1-8B's decoder layer owns 9 parameter tensors (q, k, v, o, gate, up, down, 2 norms).
  const std::string file = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json";
  nlohmann::json j = load_json_file(file);
  j["calibration"] = {{"kernel_issue_seconds", 1e-5}, {"op_issue_seconds", 3e-5}, {"kernels_per_parameter_tensor", 4}};
  const planner::Scenario sc = planner::parse_scenario(j, file);
  const CostModel cost(sc);
  Op fwd;
  fwd.kind = OpKind::compute_fwd;
  fwd.module = "model.layers.7";
  EXPECT_DOUBLE_EQ(cost.kernels(fwd), 36);
  EXPECT_NEAR(cost.issue_seconds(fwd), 36 * 1e-5, 1e-15);
  Op bwd = fwd;
  bwd.kind = OpKind::compute_bwd;
  EXPECT_DOUBLE_EQ(cost.kernels(bwd), 72);
  Op ag;
  ag.kind = OpKind::all_gather;
  EXPECT_NEAR(cost.issue_seconds(ag), 3e-5 + 1e-5, 1e-15);
  // foreach AdamW: 10 ops x ceil(291 tensors / 64) launches (1 embedding + 32 x 9 + norm + lm_head).
  Op opt;
  opt.kind = OpKind::optimizer;
  EXPECT_DOUBLE_EQ(cost.kernels(opt), 50);
  // A fused AdamW (fused=True, FusedAdam) launches one kernel per 36 tensors of its depth-4 lists
  // (params, grads, exp_avg, exp_avg_sq; MultiTensorApply.cuh depth_to_max_tensors[3] = 36):
  // ceil(291 / 36) = 9. SGD with momentum has depth 3 (48 tensors): ceil(291 / 48) = 7.
  j["training"]["optimizer_kernel"] = "fused";
  EXPECT_DOUBLE_EQ(CostModel(planner::parse_scenario(j, file)).kernels(opt), 9);
  j["training"]["optimizer"] = "sgd_momentum";
  EXPECT_DOUBLE_EQ(CostModel(planner::parse_scenario(j, file)).kernels(opt), 7);
  j["training"]["optimizer_kernel"] = "foreach";
  EXPECT_DOUBLE_EQ(CostModel(planner::parse_scenario(j, file)).kernels(opt), 50);
}

// Llama-3.1-8B's scenario with training.torch_compile set (or left unstated: null) and the
// calibration's issue and memory-bound constants fixed for hand calculation.
planner::Scenario llama8b(const nlohmann::json& torch_compile) {
  const std::string file = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json";
  nlohmann::json j = load_json_file(file);
  j["calibration"] = {{"kernel_issue_seconds", 1e-5},
                      {"eager_forward_kernel_issue_seconds", 4e-5},
                      {"eager_backward_kernel_issue_seconds", 2.5e-5},
                      {"op_issue_seconds", 3e-5},
                      {"kernels_per_parameter_tensor", 4},
                      {"eager_kernels_per_fused_kernel", 4},
                      {"memory_bound_efficiency", 0.5},
                      {"eager_memory_bound_factor", 3.2},
                      {"memory_bound_kernel_floor_seconds", 2e-6}};
  if (!torch_compile.is_null()) j["training"]["torch_compile"] = torch_compile;
  return planner::parse_scenario(j, file);
}

// A block costed for Liger-Kernel's kernels (training.liger) launches its listed kernels once each
// eagerly, but for repeat_kv's two copies (models::liger_eager_kernels_per_fused_kernel: 8 for the
// 6 listed): forward 7 GEMMs + 1 attention + 8 = 16 against Hugging Face's 32, backward 17 + 16 =
// 33 against 65; issue at the eager rates.
TEST(CostModelIssue, LigerBlocksLaunchTheirKernelsOnceEachEagerly) {
  planner::Scenario eager = llama8b(false);
  nlohmann::json j = load_json_file(std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json");
  j["calibration"] = {{"kernel_issue_seconds", 1e-5},
                      {"eager_forward_kernel_issue_seconds", 4e-5},
                      {"eager_backward_kernel_issue_seconds", 2.5e-5},
                      {"eager_kernels_per_fused_kernel", 4}};
  j["training"]["torch_compile"] = false;
  j["training"]["liger"] = true;
  j["model"] = "hf:models/hf/llama3.1-8b.json";
  const CostModel liger(planner::parse_scenario(j, std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json"));
  Op fwd;
  fwd.kind = OpKind::compute_fwd;
  fwd.module = "model.layers.7";
  Op bwd = fwd;
  bwd.kind = OpKind::compute_bwd;
  EXPECT_DOUBLE_EQ(liger.kernels(fwd), 16);
  EXPECT_DOUBLE_EQ(liger.kernels(bwd), 33);
  EXPECT_NEAR(liger.issue_seconds(fwd), 16 * 4e-5, 1e-15);
  EXPECT_DOUBLE_EQ(CostModel(eager).kernels(fwd), 32);
}

TEST(CostModelIssue, KernelsAreCountedWhenTheRunSaysWhetherItIsCompiled) {
  // A Llama block's costs list 7 matmuls, one attention call and 6 fused memory-bound kernels
  // (attention norm, rotary, residual add, MLP norm, SwiGLU product, residual add).
  Op fwd;
  fwd.kind = OpKind::compute_fwd;
  fwd.module = "model.layers.7";
  Op bwd = fwd;
  bwd.kind = OpKind::compute_bwd;
  Op re = fwd;
  re.kind = OpKind::recompute;
  // Compiled: forward 7 GEMMs + 1 attention + 6 = 14; backward 14 GEMMs (input and weight
  // gradients) + FlashAttention-2's 3 backward kernels + 2 x 6 = 29; a recompute as the forward.
  const CostModel compiled(llama8b(true));
  EXPECT_DOUBLE_EQ(compiled.kernels(fwd), 14);
  EXPECT_DOUBLE_EQ(compiled.kernels(bwd), 29);
  EXPECT_DOUBLE_EQ(compiled.kernels(re), 14);
  EXPECT_NEAR(compiled.issue_seconds(fwd), 14 * 1e-5, 1e-15);
  // Eager: each fused kernel is 4 eager ones: forward 8 + 24 = 32, backward 17 + 48 = 65.
  const CostModel eager(llama8b(false));
  EXPECT_DOUBLE_EQ(eager.kernels(fwd), 32);
  EXPECT_DOUBLE_EQ(eager.kernels(bwd), 65);
  // Eager dispatch per kernel: Python's forward (and a checkpoint's recompute, also Python)
  // 40 us, the autograd engine's backward 25 us; the collectives keep the hook's 30 us plus one
  // 10 us launch.
  EXPECT_NEAR(eager.issue_seconds(fwd), 32 * 4e-5, 1e-15);
  EXPECT_NEAR(eager.issue_seconds(re), 32 * 4e-5, 1e-15);
  EXPECT_NEAR(eager.issue_seconds(bwd), 65 * 2.5e-5, 1e-15);
  Op ag;
  ag.kind = OpKind::all_gather;
  EXPECT_NEAR(eager.issue_seconds(ag), 3e-5 + 1e-5, 1e-15);
  EXPECT_NEAR(compiled.issue_seconds(bwd), 29 * 1e-5, 1e-15);
  // Unstated: the assumed 4 per parameter tensor (9 tensors), as before.
  const CostModel unstated(llama8b(nullptr));
  EXPECT_DOUBLE_EQ(unstated.kernels(fwd), 36);
  EXPECT_DOUBLE_EQ(unstated.kernels(bwd), 72);
  EXPECT_NEAR(unstated.issue_seconds(bwd), 72 * 1e-5, 1e-15);  // priced as the fused kernels it is costed as
  // A module whose costs list no kernels (the output layer) keeps the per-tensor count.
  Op head = fwd;
  head.module = "lm_head";
  EXPECT_DOUBLE_EQ(compiled.kernels(head), 4);
}

TEST(CostModelMemoryBound, EachListedKernelTakesAtLeastTheFloor) {
  // A Llama-8B block over 64 tokens (h 4096, q 4096, kv 1024, f 14336, 2-byte activations):
  // per token the norms move 2x2x4096 = 16384 bytes each, rotary 2x2x(4096+1024) = 20480,
  // the residual adds 3x2x4096 = 24576 each, SwiGLU's product 3x2x14336 = 86016; 188416 in all.
  // At 0.5 x 3.35 TB/s = 1.675e12 B/s: norm 1,048,576 B = 0.626 us, rotary 0.783 us, residual
  // 0.939 us, all under the 2 us floor; SwiGLU 5,505,024 B = 3.2866 us.
  // Forward: 5 x 2 us + 3.2866 us = 13.2866 us (one lump would be 7.199 us).
  const double tokens = 64, rate = 0.5 * 3.35e12;
  Op fwd;
  fwd.kind = OpKind::compute_fwd;
  fwd.module = "model.layers.3";
  fwd.hbm_bytes = 188416 * tokens;
  const double swiglu = 86016 * tokens / rate;
  const CostModel compiled(llama8b(true));
  EXPECT_NEAR(compiled.memory_bound_seconds(fwd), 5 * 2e-6 + swiglu, 1e-12);
  EXPECT_NEAR(swiglu, 3.2866e-6, 1e-10);
  // Score-matrix bytes (eager attention's score chain) are priced apart, no floor, at the
  // streaming rate hbm_efficiency (H100's measured copy, 0.896 x 3.35 TB/s: calibration.json):
  // the listed kernels share only the rest.
  Op with_scores = fwd;
  with_scores.score_hbm_bytes = 1e6;
  with_scores.hbm_bytes += 1e6;
  EXPECT_NEAR(compiled.memory_bound_seconds(with_scores), 1e6 / (0.896 * 3.35e12) + 5 * 2e-6 + swiglu, 1e-12);
  // Unstated execution: the same fused kernels on the GPU.
  EXPECT_NEAR(CostModel(llama8b(nullptr)).memory_bound_seconds(fwd), 5 * 2e-6 + swiglu, 1e-12);
  // Backward: twice the bytes over two kernels per forward kernel, each with a forward
  // kernel's bytes: 2 x (5 x 2 us + 3.2866 us).
  Op bwd = fwd;
  bwd.kind = OpKind::compute_bwd;
  bwd.hbm_bytes = 2 * fwd.hbm_bytes;
  EXPECT_NEAR(compiled.memory_bound_seconds(bwd), 2 * (5 * 2e-6 + swiglu), 1e-12);
  // Eager: the block's own factor, 626,688 / 188,416 = 3.326 (its kernels op by op:
  // EagerScoreChain.EagerFactorCountsEachFamilysKernels; the calibration's 3.2 is the fallback),
  // over 4 kernels per fused one, each 0.8315 x the fused kernel's bytes: the small kernels are
  // 4 floors each (8 us), SwiGLU's four 0.8315 x 3.2866 = 2.733 us each.
  const CostModel eager(llama8b(false));
  const double eager_share = 626'688.0 / 188'416.0 / 4;
  EXPECT_NEAR(eager.memory_bound_seconds(fwd), 5 * 4 * 2e-6 + 4 * eager_share * swiglu, 1e-12);
  // Many tokens: every kernel above its floor, the sum is the lump bytes / rate.
  fwd.hbm_bytes = 188416 * 8192.0;
  EXPECT_NEAR(compiled.memory_bound_seconds(fwd), fwd.hbm_bytes / rate, 1e-12);
}

TEST(CostModelIssue, ASmallEagerModelIsBoundByIssuingItsKernels) {
  // GPT-2 (124M: 12 blocks, each 4 matmuls, attention and 7 fused memory-bound kernels: ln_1,
  // the attention-output dropout, the residual add, ln_2, GELU, the MLP-output dropout and the
  // residual add) on one H100, eager (training.torch_compile false), micro-batch 1 x 128
  // tokens, no checkpointing; shipped calibration (eager dispatch measured on the H100 host at
  // 46.2 us a kernel in forward and 32.9 us in backward, eager_kernels_per_fused_kernel 4). Per
  // block the CPU issues 4 + 1 + 7 x 4 = 33 kernels in forward (1,524.6 us) and
  // 8 + 3 + 2 x 7 x 4 = 67 in backward (2,204.3 us): 12 x 3,728.9 us = 44.75 ms of issue for
  // the blocks alone, more than their GPU time, so the step is at least the CPU's issue time and
  // most of its critical path is the CPU issuing: the launch-bound regime the issue names for
  // small models (docs/cost-model.md, "CPU issue cost").
  const std::string file = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json";
  nlohmann::json j = load_json_file(file);
  nlohmann::json cluster = load_json_file(std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/clusters/dgx-h100.json");
  cluster["gpus_per_node"] = 1;
  j["cluster"] = cluster;
  j["model"] = "models/gpt2.json";
  j["training"]["global_batch"] = 1;
  j["training"]["micro_batch"] = 1;
  j["training"]["seq_len"] = 128;
  j["training"]["activation_checkpointing"] = "none";
  j["training"]["torch_compile"] = false;
  const planner::Scenario sc = planner::parse_scenario(j, file);
  const planner::Plan plan = planner::plan_step(sc);
  const CostModel cost(sc);
  const StepTiming t = time_step(plan.schedule, cost);
  double block_issue = 0, block_gpu = 0, all_issue = 0;
  int blocks_fwd = 0;
  for (const Op& op : plan.schedule.ops) {
    all_issue += cost.issue_seconds(op);
    const bool block = op.module.rfind("transformer.h.", 0) == 0;
    if (block && (op.kind == OpKind::compute_fwd || op.kind == OpKind::compute_bwd)) {
      block_issue += cost.issue_seconds(op);
      block_gpu += cost.duration_seconds(op, plan.schedule);
      if (op.kind == OpKind::compute_fwd) ++blocks_fwd;
    }
  }
  EXPECT_EQ(blocks_fwd, 12);
  EXPECT_NEAR(block_issue, 12 * (33 * 46.2e-6 + 67 * 32.9e-6), 1e-12);
  EXPECT_LT(block_gpu, block_issue);
  EXPECT_GE(t.step_seconds, all_issue);
  EXPECT_GT(t.critical_path_summary.cpu_issue_seconds, 0.5 * t.step_seconds);
  std::printf("gpt2 eager 128 tokens: step %.3f ms, CPU issue %.3f ms (blocks %.3f ms), blocks on the GPU %.3f ms, "
              "critical path CPU issue %.3f ms\n",
              t.step_seconds * 1e3, all_issue * 1e3, block_issue * 1e3, block_gpu * 1e3,
              t.critical_path_summary.cpu_issue_seconds * 1e3);
}

TEST(Calibration, EveryShippedGpuHasSourcedDefaultsInRange) {
  const nlohmann::json gpus = load_json_file(std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/hardware/gpus.json");
  const std::vector<std::string> fields = {"matmul_efficiency", "attention_efficiency", "causal_attention_work",
                                           "attention_backward_work", "hbm_efficiency", "op_issue_seconds",
                                           "kernel_issue_seconds", "eager_forward_kernel_issue_seconds",
                                           "eager_backward_kernel_issue_seconds", "kernels_per_parameter_tensor",
                                           "eager_kernels_per_fused_kernel", "launch_queue_kernels", "compute_slowdown_under_comm", "pcie_gbps",
                                           "host_optimizer_bytes_per_second", "host_memory_bytes_per_second", "cuda_context_bytes"};
  int checked = 0, hopper = 0;
  for (const auto& [name, entry] : gpus.items()) {
    if (name.rfind("_", 0) == 0) continue;
    planner::ClusterSpec c;
    c.gpu = planner::find_gpu(name);
    const planner::Calibration cal = planner::default_calibration(c);
    EXPECT_EQ(cal.name, "defaults for " + name);
    for (const std::string& f : fields) {
      ASSERT_TRUE(cal.sources.count(f)) << name << ": no source for " << f;
      EXPECT_FALSE(cal.sources.at(f).empty()) << name << ": " << f;
    }
    for (double eff : {cal.matmul_efficiency, cal.attention_efficiency, cal.hbm_efficiency}) {
      EXPECT_GT(eff, 0.2) << name;
      EXPECT_LE(eff, 1.0) << name;
    }
    // [GEMMs beside NCCL] Hopper's cuBLAS GEMMs, and only theirs, carry a slowdown of their own.
    EXPECT_EQ(cal.gemm_slowdown_under_comm.has_value(), c.gpu.arch == "hopper") << name;
    if (cal.gemm_slowdown_under_comm) {
      EXPECT_TRUE(cal.sources.count("gemm_slowdown_under_comm")) << name;
      ++hopper;
    }
    ++checked;
  }
  EXPECT_GE(checked, 7);
  EXPECT_EQ(hopper, 5);  // H100 SXM 80 and 96 GB, H100 PCIe, H100 NVL, H200
  // The H100 figure is the workplace's measured 8192^3 GEMM: 798 / 989.4 TFLOP/s.
  planner::ClusterSpec h100;
  h100.gpu = planner::find_gpu("H100-SXM-80GB");
  EXPECT_NEAR(planner::default_calibration(h100).matmul_efficiency, 798.0 / 989.4, 5e-4);
}

// Each part's GEMM ceiling is its own published maximum achievable matmul (MAMF) row over the
// catalog's dense bf16 peak (S. Bekman, ml-engineering compute/accelerator/README.md@744d01e1,
// BF16 table): MI300X 668.4 / 1307.4 = 0.511, MI325X 784.9 / 1307.4 = 0.600, GB200 1822.0 / 2500 =
// 0.729. Until session 38 the MI300X read the table's superseded first-version 781.9 (0.598, 17%
// faster on every GEMM) and the MI325X and GB200 borrowed their die twins' fractions. Llama-3.1-8B
// at 4,096 tokens on 8 GPUs is mostly GEMMs: the MI325X (same peak, 17% higher ceiling, faster HBM)
// is at least 10% faster than the MI300X and less than the ceilings' 17.4% apart.
TEST(Calibration, EachPartTakesItsOwnMaximumAchievableMatmul) {
  for (const auto& [part, mamf_tflops] : std::vector<std::pair<std::string, double>>{
           {"MI300X-192GB", 668.4}, {"MI325X-256GB", 784.9}, {"GB200-186GB", 1822.0}}) {
    planner::ClusterSpec c;
    c.gpu = planner::find_gpu(part);
    const planner::Calibration cal = planner::default_calibration(c);
    EXPECT_NEAR(cal.matmul_efficiency, mamf_tflops * 1e12 / c.gpu.peak_flops.at("bf16"), 0.0005) << part;
    ASSERT_TRUE(cal.sources.count("matmul_efficiency")) << part;
    EXPECT_NE(cal.sources.at("matmul_efficiency").find("Maximum Achievable Matmul"), std::string::npos) << part;
  }
  const std::string file = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json";
  auto tokens = [&](const std::string& cluster) {
    return sim::estimate_step(planner::load_scenario(file, {"cluster=" + cluster, "training.micro_batch=1",
                                                           "training.seq_len=4096", "training.global_batch=8"}))
        .timing.tokens_per_second_per_gpu;
  };
  const double mi325x = tokens("scenarios/clusters/mi325x-8gpu.json"), mi300x = tokens("scenarios/clusters/mi300x-8gpu.json");
  EXPECT_GT(mi325x, 1.10 * mi300x);
  EXPECT_LT(mi325x, (784.9 / 668.4) * mi300x);
}

// [Catalog twin] (planner/cost_model.cpp): a GPU written out under its own name with a catalog
// GPU's figures is that part and takes its calibration; before session 31 it got the generic
// defaults meant for parts never measured (Mixtral at EP 8 read 7% faster). One figure changed,
// it is another part: the generic defaults, named as such.
TEST(Calibration, AGpuWithACatalogPartsFiguresIsThatPart) {
  planner::ClusterSpec catalog, twin;
  catalog.gpu = twin.gpu = planner::find_gpu("H100-SXM-80GB");
  twin.gpu.name = "my-h100";
  twin.gpu.sources.clear();
  const planner::Calibration expected = planner::default_calibration(catalog);
  const planner::Calibration got = planner::default_calibration(twin);
  EXPECT_EQ(got.name, "defaults for H100-SXM-80GB (GPU \"my-h100\" has its figures: [Catalog twin])");
  nlohmann::json a = got.to_json(), b = expected.to_json();
  a.erase("name");
  b.erase("name");
  EXPECT_EQ(a, b);
  twin.gpu.sm_count = 131;
  const planner::Calibration other = planner::default_calibration(twin);
  EXPECT_EQ(other.name, "generic defaults (no calibration entry for GPU \"my-h100\")");
  EXPECT_NE(other.matmul_efficiency, expected.matmul_efficiency);
}

TEST(Calibration, ScenarioOverridesFieldsAndNcclParams) {
  const planner::Scenario sc = scenario_on(2, {{"name", "my cluster, calibrated"},
                                               {"matmul_efficiency", 0.61},
                                               {"nccl", {{"bandwidth_efficiency", 0.9}}}});
  const planner::Calibration c = planner::calibration_for(sc);
  EXPECT_EQ(c.name, "my cluster, calibrated");
  EXPECT_DOUBLE_EQ(c.matmul_efficiency, 0.61);
  EXPECT_DOUBLE_EQ(c.nccl.bandwidth_efficiency, 0.9);
  // Untouched fields keep the defaults, NCCL's constants included.
  EXPECT_DOUBLE_EQ(c.compute_slowdown_under_comm, planner::default_calibration(sc.cluster).compute_slowdown_under_comm);
  EXPECT_NEAR(c.nccl.intra_bandwidth_gbps, 18 * 20.6, 1e-9);
}

TEST(Calibration, BadValuesNameTheJsonPath) {
  auto error_path = [](const nlohmann::json& cal) -> std::string {
    try {
      planner::calibration_for(scenario_on(1, cal));
    } catch (const InputError& e) {
      return e.json_path();
    }
    return "(no error)";
  };
  EXPECT_EQ(error_path({{"matmul_efficiency", 1.5}}), "calibration.matmul_efficiency");
  EXPECT_EQ(error_path({{"op_issue_seconds", -1}}), "calibration.op_issue_seconds");
  EXPECT_EQ(error_path({{"gemm_slowdown_under_comm", -0.5}}), "calibration.gemm_slowdown_under_comm");
  EXPECT_EQ(error_path({{"matmul_eficiency", 0.5}}), "calibration.matmul_eficiency");
  EXPECT_EQ(error_path({{"nccl", {{"bandwidth_efficiency", -2}}}}), "calibration.nccl.bandwidth_efficiency");
}


// [Kernel pipelining] (planner/cost_model.h issue_lead_seconds), worked by hand: one block of a
// 1000^3 GEMM (30 us, from a measured table) and two memory-bound kernels, 1,000 tokens,
// compiled (one launch per fused kernel, c = 10 us each), the memory-bound kernels at 0.5 x 3.35
// TB/s = 1.675 TB/s: 6,700 bytes per token take 4 us, 10,050 take 6 us, 33,500 take 20 us. A
// backward runs each kernel twice: a fused kernel's two launches share twice its forward bytes
// (the backward's default 2x), the GEMM's input and weight gradients are 1000^3 each.
struct PipelinedBlock {
  planner::OpCosts costs;
  int fwd = -1, bwd = -1;
  int second_fwd = -1, second_bwd = -1;
};
nlohmann::json pipelined_block_json(const std::string& name, const std::string& order, double first_bytes,
                                    double second_bytes, bool with_order) {
  nlohmann::json costs = {{"forward_flops", {{"b*s", 2e6}}},
                          {"forward_hbm_bytes", {{"b*s", first_bytes + second_bytes}}},
                          {"memory_bound_kernels", {{{"b*s", first_bytes}}, {{"b*s", second_bytes}}}},
                          {"matmuls", {{{"name", "proj"}, {"in", 1000}, {"out", 1000}}}},
                          {"input_bytes", {{"b*s", 2000}}}};
  if (with_order) costs["launch_order"] = order;
  return {{"name", name}, {"repeat", 1}, {"type", "Block"},
          {"params", {{{"name", "weight"}, {"shape", {1000, 1000}}}}}, {"costs", costs}};
}

// Blocks "0" (and "1" when `second_order` is given: the same kernels in another order).
PipelinedBlock pipelined_block(const std::string& order, double first_bytes, double second_bytes,
                               bool with_order = true, const std::string& second_order = "") {
  nlohmann::json blocks = {pipelined_block_json("0", order, first_bytes, second_bytes, with_order)};
  if (!second_order.empty()) blocks.push_back(pipelined_block_json("1", second_order, first_bytes, second_bytes, true));
  nlohmann::json model = {
      {"name", "pipelined"},
      {"root", {{"name", ""}, {"type", "Model"},
                {"children", {{{"name", "blocks"}, {"type", "ModuleList"}, {"children", blocks}}}}}}};
  nlohmann::json j = {{"model", model},
                      {"cluster", testing::cluster(1, 1)},
                      {"training", {{"micro_batch", 1}, {"seq_len", 1000}, {"param_dtype", "bf16"},
                                    {"torch_compile", true}}},
                      {"calibration", {{"kernel_issue_seconds", 1e-5},
                                       {"memory_bound_efficiency", 0.5},
                                       {"memory_bound_kernel_floor_seconds", 2e-6},
                                       {"gemm_table", {{{"m", 1000}, {"n", 1000}, {"k", 1000}, {"seconds", 30e-6}}}}}}};
  const planner::Scenario scenario = planner::parse_scenario(j, "test.json");
  const Schedule s = planner::plan_step(scenario).schedule;
  PipelinedBlock b;
  b.costs = planner::price_ops(s, CostModel(scenario));
  for (const Op& op : s.ops) {
    if (op.name == "fwd blocks.0") b.fwd = op.id;
    if (op.name == "bwd blocks.0") b.bwd = op.id;
    if (op.name == "fwd blocks.1") b.second_fwd = op.id;
    if (op.name == "bwd blocks.1") b.second_bwd = op.id;
  }
  EXPECT_GE(b.fwd, 0);
  EXPECT_GE(b.bwd, 0);
  return b;
}

TEST(CostModelIssue, TheGpuWaitsForTheIssueLeadOnly) {
  // "mgm": kernels of 4, 30 and 6 us, issued at 10, 20 and 30 us:
  //   lead = max(10 - 0, 20 - 4, 30 - 34) = 16 us of the 30 us issue; D = 40 us.
  // Backward, the order reversed: 6, 6, 30, 30, 4, 4 us (D = 80 us) issued at 10 .. 60 us:
  //   lead = max(10, 20 - 6, 30 - 12, 40 - 42, 50 - 72, 60 - 76) = 18 us of the 60 us issue.
  const PipelinedBlock a = pipelined_block("mgm", 6700, 10050);
  ASSERT_GE(a.fwd, 0);
  ASSERT_GE(a.bwd, 0);
  EXPECT_NEAR(a.costs.duration_seconds[a.fwd], 40e-6, 1e-12);
  EXPECT_NEAR(a.costs.issue_seconds[a.fwd], 30e-6, 1e-15);
  EXPECT_NEAR(a.costs.issue_lead_seconds[a.fwd], 16e-6, 1e-12);
  EXPECT_NEAR(a.costs.duration_seconds[a.bwd], 80e-6, 1e-12);
  EXPECT_NEAR(a.costs.issue_seconds[a.bwd], 60e-6, 1e-15);
  EXPECT_NEAR(a.costs.issue_lead_seconds[a.bwd], 18e-6, 1e-12);
  // "gmm" (the GEMM first, two 4 us kernels): forward lead = max(10, 20 - 30, 30 - 34) = 10 us.
  // Backward opens with the memory-bound kernels (4 us a launch) and ends with the GEMM's two:
  //   lead = max(10, 20 - 4, 30 - 8, 40 - 12, 50 - 16, 60 - 46) = 34 us.
  const PipelinedBlock b = pipelined_block("gmm", 6700, 6700);
  EXPECT_NEAR(b.costs.issue_lead_seconds[b.fwd], 10e-6, 1e-12);
  EXPECT_NEAR(b.costs.issue_lead_seconds[b.bwd], 34e-6, 1e-12);
  // "mgm" with a 20 us last kernel: backward opens with its two 20 us launches, each longer
  // than an issue: lead = max(10, 20 - 20, 30 - 40, ...) = 10 us, the first kernel's issue.
  const PipelinedBlock c = pipelined_block("mgm", 6700, 33500);
  EXPECT_NEAR(c.costs.issue_lead_seconds[c.bwd], 10e-6, 1e-12);
  // Two blocks with the same kernels (one kernel set) in the orders "mgm" and "gmm": price_ops
  // walks each block's lead once per distinct kernel list, and each keeps its own (16 and 10 us
  // forward; 18 us backward for "mgm", and for "gmm", whose backward runs the 6 us kernel's two
  // launches, the 4 us kernel's, then the GEMM's: max(10, 20 - 6, 30 - 12, 40 - 16, 50 - 20,
  // 60 - 50) = 30 us).
  const PipelinedBlock two = pipelined_block("mgm", 6700, 10050, true, "gmm");
  ASSERT_GE(two.second_fwd, 0);
  ASSERT_GE(two.second_bwd, 0);
  EXPECT_NEAR(two.costs.issue_lead_seconds[two.fwd], 16e-6, 1e-12);
  EXPECT_NEAR(two.costs.issue_lead_seconds[two.bwd], 18e-6, 1e-12);
  EXPECT_NEAR(two.costs.issue_lead_seconds[two.second_fwd], 10e-6, 1e-12);
  EXPECT_NEAR(two.costs.issue_lead_seconds[two.second_bwd], 30e-6, 1e-12);
  // Without the launch order the GPU waits for the whole issue, as for one kernel.
  const PipelinedBlock u = pipelined_block("", 6700, 10050, false);
  EXPECT_DOUBLE_EQ(u.costs.issue_lead_seconds[u.fwd], u.costs.issue_seconds[u.fwd]);
  EXPECT_DOUBLE_EQ(u.costs.issue_lead_seconds[u.bwd], u.costs.issue_seconds[u.bwd]);
}

// [Op signature] (planner/op_costs.cpp): price_ops prices each signature once, so every op must
// still cost what the cost model says of it alone. Llama-3.1-8B, eager (the eager factors and
// the blocks' kernel lists are read) with torch.optim's foreach step on 2 nodes (HSDP, so
// collectives of two groups share a size). Then, in a copy of the schedule, one op of a
// repeated signature at a time gets one field of another op's (or a changed value): the memo
// must not hand it the first op's costs.
TEST(PriceOps, EveryOpCostsWhatTheCostModelSaysOfItAlone) {
  const planner::Scenario sc = planner::load_scenario(
      std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json",
      {"cluster.nodes=2", "training.global_batch=32", "training.torch_compile=false", "fsdp.strategy=HYBRID_SHARD"});
  const CostModel cost(sc);
  const Schedule base = planner::plan_step(sc).schedule;
  auto expect_alone = [&](const Schedule& s, const std::string& what) {
    const planner::OpCosts c = planner::price_ops(s, cost);
    for (const Op& op : s.ops) {
      const double duration = planner::is_collective(op.kind) ? cost.collective(op, s).seconds : cost.duration_seconds(op, s);
      ASSERT_EQ(c.duration_seconds[op.id], duration) << what << ": " << op.name;
      ASSERT_EQ(c.issue_seconds[op.id], cost.issue_seconds(op)) << what << ": " << op.name;
      ASSERT_EQ(c.issue_lead_seconds[op.id], cost.issue_lead_seconds(op, s)) << what << ": " << op.name;
      ASSERT_EQ(c.kernels[op.id], cost.kernels(op)) << what << ": " << op.name;
    }
  };
  expect_alone(base, "as planned");
  // The second forward of a block (its signature already priced) and ops to borrow fields from.
  int fwd = -1, first_fwd = -1, bwd = -1, head = -1, gather = -1, other_gather = -1;
  for (const Op& op : base.ops) {
    if (op.kind == OpKind::compute_fwd && op.module.find("layers.") != std::string::npos) (first_fwd < 0 ? first_fwd : fwd) = op.id;
    if (op.kind == OpKind::compute_bwd && op.module.find("layers.") != std::string::npos && bwd < 0) bwd = op.id;
    if (op.kind == OpKind::compute_fwd && op.module.find("lm_head") != std::string::npos) head = op.id;
    if (op.kind == OpKind::all_gather) (gather < 0 ? gather : other_gather) = op.id;
  }
  ASSERT_TRUE(fwd >= 0 && bwd >= 0 && head >= 0 && gather >= 0 && other_gather >= 0);
  ASSERT_NE(cost.module_class(base.ops[fwd].module), cost.module_class(base.ops[head].module));
  auto changed = [&](int id, const std::string& what, auto&& change) {
    Schedule s = base;
    change(s.ops[id]);
    expect_alone(s, what);
  };
  changed(fwd, "flops", [](Op& op) { op.flops *= 1.5; });
  changed(fwd, "attention_flops", [](Op& op) { op.attention_flops *= 0.5; });
  changed(fwd, "hbm_bytes", [](Op& op) { op.hbm_bytes *= 2; });
  changed(fwd, "score_hbm_bytes", [&](Op& op) { op.score_hbm_bytes = op.hbm_bytes / 2; });
  changed(fwd, "kernel_set", [&](Op& op) { op.kernel_set = base.ops[head].kernel_set; });
  changed(fwd, "kind", [](Op& op) { op.kind = OpKind::compute_bwd; });
  changed(fwd, "module", [&](Op& op) { op.module = base.ops[head].module; });
  // The step's optimizer on the CPU (the optimizer's signature but its stream, priced first).
  int optimizer = -1;
  for (const Op& op : base.ops)
    if (op.kind == OpKind::optimizer) optimizer = op.id;
  ASSERT_GT(optimizer, fwd);
  changed(fwd, "stream", [&](Op& op) {
    const Op& o = base.ops[optimizer];
    op.kind = o.kind;
    op.kernel_set = o.kernel_set;
    op.flops = o.flops;
    op.attention_flops = o.attention_flops;
    op.hbm_bytes = o.hbm_bytes;
    op.score_hbm_bytes = o.score_hbm_bytes;
    op.comm_bytes = o.comm_bytes;
    op.stream = Stream::host;
  });
  changed(other_gather, "comm_bytes", [](Op& op) { op.comm_bytes *= 3; });
  // A copy is priced by its bytes alone: two host-to-device copies, the second three times the first.
  Schedule copies = base;
  for (int id : {fwd, bwd}) {
    Op& op = copies.ops[id];
    op = Op{};  // nothing but the kind and the bytes, so the two differ in their bytes alone
    op.id = id;
    op.name = "copy";
    op.kind = OpKind::h2d;
    op.stream = base.ops[id].stream;
    op.comm_bytes = id == fwd ? 1e8 : 3e8;
  }
  expect_alone(copies, "copy bytes");
  changed(other_gather, "kind", [](Op& op) { op.kind = OpKind::reduce_scatter; });
  Schedule two_groups = base;
  two_groups.ops[other_gather].comm_bytes = base.ops[gather].comm_bytes;
  for (const Op& op : base.ops)
    if (op.kind == OpKind::all_reduce) two_groups.ops[other_gather].group = op.group;  // the replicate group
  ASSERT_NE(two_groups.ops[other_gather].group, base.ops[gather].group);
  expect_alone(two_groups, "group");
  // A collective naming no group of the schedule is an error, even where its signature is priced.
  Schedule no_group = base;
  no_group.ops[other_gather].group = static_cast<int>(base.groups.size());
  EXPECT_THROW(planner::price_ops(no_group, cost), std::invalid_argument);
}

// [GEMMs beside NCCL] (planner/cost_model.h) By hand: module compute of two ops, a forward of
// GEMMs alone (494.7 GFLOP at 0.5 of the 989.4 TFLOP/s peak: 1 ms) and a backward of memory-bound
// bytes alone (5.025 GB at 0.5 of 3.35 TB/s: 3 ms), and a copy-out, which is not module compute
// and is not weighed. GEMMs slow by 0.70 beside a collective, the other kernels by 0.19:
// (0.70 x 1 + 0.19 x 3) / 4 = 0.3175, the slowdown the engines apply.
TEST(GemmsBesideNccl, TheGemmsShareOfModuleComputeWeighsTheTwoSlowdowns) {
  const nlohmann::json calibration = {{"matmul_efficiency", 0.5},
                                      {"memory_bound_efficiency", 0.5},
                                      {"memory_bound_kernel_floor_seconds", 0},
                                      {"compute_slowdown_under_comm", 0.19},
                                      {"gemm_slowdown_under_comm", 0.70}};
  Schedule s;
  auto add = [&](OpKind kind, double flops, double bytes) {
    Op& op = s.ops.emplace_back();
    op.id = static_cast<int>(s.ops.size()) - 1;
    op.kind = kind;
    op.stream = Stream::compute;
    op.flops = flops;
    op.hbm_bytes = bytes;
  };
  add(OpKind::compute_fwd, 494.7e9, 0);
  add(OpKind::compute_bwd, 0, 5.025e9);
  add(OpKind::copy_out, 0, 1e11);
  const planner::OpCosts c = planner::price_ops(s, CostModel(scenario_on(1, calibration)));
  EXPECT_NEAR(c.duration_seconds[0], 1e-3, 1e-15);
  EXPECT_NEAR(c.duration_seconds[1], 3e-3, 1e-15);
  EXPECT_NEAR(c.compute_slowdown_under_comm, 0.3175, 1e-12);
  // A recompute is module compute as the forward is: the same share, the same slowdown.
  s.ops[0].kind = OpKind::recompute;
  EXPECT_NEAR(planner::price_ops(s, CostModel(scenario_on(1, calibration))).compute_slowdown_under_comm, 0.3175, 1e-12);
  // Without a GEMM figure of their own the GEMMs slow as the rest do: the calibration's 0.19.
  nlohmann::json plain = calibration;
  plain.erase("gemm_slowdown_under_comm");
  EXPECT_EQ(planner::price_ops(s, CostModel(scenario_on(1, plain))).compute_slowdown_under_comm, 0.19);
}

// The shipped calibration gives Hopper's GEMMs 0.70 and no other GPU a figure of its own; on an
// H100 the slowdown is the two weighed by the GEMMs' share of the step's module compute, counted
// here from the cost model's kernel-set times (an independent walk of the ops: price_ops keeps
// its own memo); on an A100 it is the other kernels' 0.19 whatever the share.
// DeepSeek-V2-Lite's routed experts run grouped GEMMs, counted as GEMMs too.
TEST(GemmsBesideNccl, ShippedHopperSlowdownFollowsTheStepsGemmShare) {
  const std::string file = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json";
  for (const std::string& scenario : {file, std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/deepseek-v2-lite-8xh100-fsdp2-ep8.json"}) {
    const planner::Scenario h100 = planner::load_scenario(scenario, {});
    const CostModel cost(h100);
    ASSERT_TRUE(cost.calibration().gemm_slowdown_under_comm.has_value());
    EXPECT_EQ(*cost.calibration().gemm_slowdown_under_comm, 0.70);
    EXPECT_EQ(cost.calibration().compute_slowdown_under_comm, 0.19);
    const Schedule s = planner::plan_step(h100).schedule;
    double gemm = 0, grouped = 0, all = 0;
    for (const Op& op : s.ops) {
      if (!planner::is_module_compute(op.kind)) continue;
      all += cost.duration_seconds(op, s);
      if (op.kernel_set < 0) continue;
      const planner::KernelSetTimes t = cost.kernel_set_times(s.kernel_sets[op.kernel_set]);
      for (double g : t.gemms) gemm += g;
      for (double g : t.grouped_gemms) grouped += g;
    }
    const double share = (gemm + grouped) / all;
    std::printf("[ info ] %s: GEMMs %.1f%% of module compute (grouped %.1f%%)\n", h100.model->name.c_str(),
                100 * share, 100 * grouped / all);
    // GEMMs are the largest part of a block at 4-8k tokens (DeepSeek's 38.5%: its latent
    // attention runs SDPA's memory-efficient kernel, resolve_attention_kernel) ...
    EXPECT_GT(share, 0.35);
    EXPECT_LT(share, 0.95);  // ... and not only: attention and the memory-bound kernels
    if (scenario != file) {
      EXPECT_GT(grouped / all, 0.05);  // the routed experts' grouped GEMMs
    }
    EXPECT_NEAR(planner::price_ops(s, cost).compute_slowdown_under_comm, 0.70 * share + 0.19 * (1 - share), 1e-12);
  }
  // A scenario that states the compute's slowdown alone states it for all compute, GEMMs included
  // (a calibration file from before the GEMMs had their own figure; --set ...=0 turns it off).
  const planner::Scenario stated = planner::load_scenario(file, {"calibration.compute_slowdown_under_comm=0.3"});
  EXPECT_FALSE(planner::calibration_for(stated).gemm_slowdown_under_comm.has_value());
  EXPECT_EQ(planner::price_ops(planner::plan_step(stated).schedule, CostModel(stated)).compute_slowdown_under_comm, 0.3);
  const planner::Scenario a100 = planner::load_scenario(file, {"cluster=" + std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/clusters/dgx-a100.json"});
  const CostModel a100_cost(a100);
  EXPECT_FALSE(a100_cost.calibration().gemm_slowdown_under_comm.has_value());
  EXPECT_EQ(planner::price_ops(planner::plan_step(a100).schedule, a100_cost).compute_slowdown_under_comm, 0.19);
}

// CostModel::module_class: blocks alike in what prices their ops share a class; a different
// eager factor, kernel list or (for a module without one) parameter tensor count each makes
// another (eager execution, so every one is read), and price_ops gives each block's ops what the cost model says of them.
// [Link domains] HSDP on two DGX H100 nodes: the shard group (8 ranks, one node) moves over
// NVLink, the replicate group (2 ranks, one per node) over the NICs, so their collectives are in
// different domains; on PCIe nodes the NICs hang off the GPUs' own PCIe switches, one domain.
TEST(PriceOps, CollectivesAcrossNvlinkNodesAreInTheNetworksDomain) {
  planner::ClusterSpec nvswitch, pcie;
  pcie.intra_kind = planner::IntraNodeKind::pcie;
  const planner::ProcessGroup shard{"shard", 8, 1, 1}, replicate{"replicate", 2, 2, 8};
  EXPECT_EQ(planner::link_domain(shard, nvswitch), planner::kNodeFabric);
  EXPECT_EQ(planner::link_domain(replicate, nvswitch), planner::kNetwork);
  EXPECT_EQ(planner::link_domain(shard, pcie), planner::kNodeFabric);
  EXPECT_EQ(planner::link_domain(replicate, pcie), planner::kNodeFabric);

  const std::string file = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json";
  for (const bool on_pcie : {false, true}) {
    std::vector<std::string> sets = {"cluster.nodes=2", "training.global_batch=32", "fsdp.strategy=HYBRID_SHARD"};
    if (on_pcie) sets.push_back("cluster.intra_node.kind=pcie");
    const planner::Scenario sc = planner::load_scenario(file, sets);
    const Schedule s = planner::plan_step(sc).schedule;
    const planner::OpCosts c = planner::price_ops(s, CostModel(sc));
    int across = 0, within = 0;
    for (const Op& op : s.ops) {
      if (!planner::is_collective(op.kind)) continue;
      const bool crosses = s.groups[op.group].nodes > 1;
      (crosses ? across : within) += 1;
      EXPECT_EQ(c.link_domain[op.id], crosses && !on_pcie ? planner::kNetwork : planner::kNodeFabric) << op.name;
    }
    EXPECT_GT(across, 0);  // the replicate group's all-reduces
    EXPECT_GT(within, 0);  // the shard group's all-gathers and reduce-scatters
  }
}

// HSDP on two nodes: the replicate group has one rank per node, so 8 of its instances (one per
// local rank) cross each node's NICs at once. With 8 NICs (DGX) each has one; with 1 or 4 they
// share them, and the cost model prices each with its share (CostModel::nccl_view): 50 GB/s x
// 1 / 8 = 6.25 GB/s, 50 x 4 / 8 = 25 GB/s. The warning says so, and which cluster figure the
// share rests on (it said "priced as if each had the NICs alone" before session 33, which was
// not what the cost model did). FULL_SHARD's one group has one instance per node: nothing to share.
TEST(SharedNicWarning, NamesTheInstancesThatShareANodesNics) {
  const std::string file = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json";
  auto warning = [&](const std::string& strategy, int nics) {
    const planner::Scenario sc = planner::load_scenario(
        file, {"cluster.nodes=2", "training.global_batch=32", "fsdp.strategy=" + strategy,
               "cluster.inter_node.nics_per_node=" + std::to_string(nics)});
    return planner::shared_nic_warning(sc.cluster, planner::plan_step(sc).schedule);
  };
  EXPECT_EQ(warning("HYBRID_SHARD", 8), "");
  const std::string one = warning("HYBRID_SHARD", 1);
  EXPECT_NE(one.find("8 instances of the replicate group (2 ranks over 2 nodes)"), std::string::npos) << one;
  EXPECT_NE(one.find("each node's 1 NIC:"), std::string::npos) << one;
  EXPECT_NE(one.find("priced with its share, 6.25 GB/s"), std::string::npos) << one;
  EXPECT_NE(warning("HYBRID_SHARD", 4).find("its share, 25 GB/s"), std::string::npos);
  EXPECT_EQ(warning("FULL_SHARD", 1), "");
}

TEST(PriceOps, ModulesShareAClassOnlyWhenPricedAlike) {
  auto block = [](const std::string& name) {
    nlohmann::json b = pipelined_block_json(name, "mgm", 6700, 10050, true);
    b["costs"]["eager_hbm_factor"] = 2.0;
    return b;
  };
  // Without a kernel list a module's launches are counted by its parameter tensors (5 and 6).
  auto unlisted = [&](const std::string& name) {
    nlohmann::json b = block(name);
    b["costs"].erase("memory_bound_kernels");
    b["costs"].erase("launch_order");
    return b;
  };
  nlohmann::json blocks = {block("0"), block("1"), block("2"), block("4"), unlisted("5"), unlisted("6"), block("7")};
  blocks[2]["costs"]["eager_hbm_factor"] = 3.0;
  blocks[6]["costs"]["eager_kernels_per_fused_kernel"] = 1.5;  // a Liger block's own count
  blocks[3]["costs"]["memory_bound_kernels"] = {{{"b*s", 10050}}, {{"b*s", 6700}}};
  blocks[5]["params"].push_back({{"name", "bias"}, {"shape", {1000}}});
  nlohmann::json model = {
      {"name", "classes"},
      {"root", {{"name", ""}, {"type", "Model"}, {"children", {{{"name", "blocks"}, {"type", "ModuleList"}, {"children", blocks}}}}}}};
  nlohmann::json j = {{"model", model},
                      {"cluster", testing::cluster(1, 1)},
                      {"training", {{"micro_batch", 1}, {"seq_len", 1000}, {"param_dtype", "bf16"}, {"torch_compile", false}}}};
  const planner::Scenario sc = planner::parse_scenario(j, "test.json");
  const CostModel cost(sc);
  auto cls = [&](const std::string& b) { return cost.module_class("blocks." + b); };
  EXPECT_GE(cls("0"), 0);
  EXPECT_EQ(cls("0"), cls("1"));
  for (const std::string a : {"0", "2", "4", "5", "6", "7"})
    for (const std::string b : {"0", "2", "4", "5", "6", "7"})
      if (a != b) {
        EXPECT_NE(cls(a), cls(b)) << a << " " << b;
      }
  EXPECT_EQ(cost.module_class("no such module"), -1);
  const Schedule s = planner::plan_step(sc).schedule;
  const planner::OpCosts c = planner::price_ops(s, cost);
  std::map<std::string, double> fwd;
  for (const Op& op : s.ops) {
    if (op.kind != OpKind::compute_fwd) continue;
    EXPECT_EQ(c.duration_seconds[op.id], cost.duration_seconds(op, s)) << op.name;
    EXPECT_EQ(c.issue_seconds[op.id], cost.issue_seconds(op)) << op.name;
    EXPECT_EQ(c.issue_lead_seconds[op.id], cost.issue_lead_seconds(op, s)) << op.name;
    EXPECT_EQ(c.kernels[op.id], cost.kernels(op)) << op.name;
    fwd[op.module] = c.duration_seconds[op.id] + c.issue_seconds[op.id] + c.issue_lead_seconds[op.id] + c.kernels[op.id];
  }
  // Each difference shows in the costs (else a class could ignore it and no test would tell).
  ASSERT_EQ(fwd.size(), 7u);
  EXPECT_EQ(fwd["blocks.0"], fwd["blocks.1"]);
  for (const std::string b : {"2", "4", "7"}) EXPECT_NE(fwd["blocks.0"], fwd["blocks." + b]) << b;
  EXPECT_NE(fwd["blocks.5"], fwd["blocks.6"]);
}

}  // namespace
}  // namespace fsdpsim::sim
