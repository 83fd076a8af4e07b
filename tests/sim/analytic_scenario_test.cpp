// The analytic engine on planned steps (planner::plan_step on inline scenarios, as
// tests/planner/synthetic.h builds them), with calibration overrides making communication
// cheap or dear: what nothing can hide, what serialises, what overlaps; MFU's convention;
// the critical path; and memory on the step's clock against the untimed replay.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "planner/cost_model.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "sim/analytic.h"
#include "sim/estimate.h"
#include "tests/planner/synthetic.h"

namespace fsdpsim::sim {
namespace {

using planner::Op;
using planner::OpKind;
using planner::Phase;
using planner::Stream;

// 8 blocks of [4096, 4096] bf16-computed weights (32 MiB gathered per block), each block's
// forward 1e9 FLOPs per token; micro-batch 1 x 8192 tokens: ~8.2e12 FLOPs a block.
nlohmann::json scenario_json(int version, const nlohmann::json& calibration, double flops_per_token = 1e9,
                             int nodes = 1) {
  nlohmann::json model = testing::block_model(8, {4096, 4096});
  for (auto& child : model["root"]["children"][0]["children"])
    child["costs"]["forward_flops"] = {{"b*s", flops_per_token}};
  return {{"model", model},
          {"cluster", testing::cluster(nodes, 8)},
          {"training", {{"micro_batch", 1}, {"seq_len", 8192}, {"param_dtype", "bf16"}, {"reduce_dtype", "fp32"}}},
          {"fsdp", {{"version", version}, {"strategy", "FULL_SHARD"}}},
          {"calibration", calibration}};
}

planner::Scenario parse(const nlohmann::json& j, std::vector<std::string> overrides = {}) {
  return planner::parse_scenario(j, "test.json", overrides);
}

// No CPU cost and no interference, so the identities below are exact.
nlohmann::json quiet(nlohmann::json nccl) {
  return {{"op_issue_seconds", 0}, {"kernel_issue_seconds", 0}, {"compute_slowdown_under_comm", 0}, {"nccl", nccl}};
}

const Op* find_op(const planner::Schedule& s, OpKind kind, const std::string& name_part, Phase phase) {
  for (const Op& op : s.ops)
    if (op.kind == kind && op.phase == phase && op.name.find(name_part) != std::string::npos) return &op;
  return nullptr;
}

TEST(AnalyticScenario, CheapCommunicationLeavesOnlyTheFirstAllGatherAndLastReduceScatterExposed) {
  // NCCL 100x faster than its model: a block's all-gather ~35 us against ~10 ms of compute.
  for (int version : {1, 2}) {
    const planner::Scenario sc = parse(scenario_json(version, quiet({{"bandwidth_efficiency", 100}})));
    const planner::Plan plan = planner::plan_step(sc);
    const planner::CostModel cost(sc);
    const planner::OpCosts in = planner::price_ops(plan.schedule, cost);
    const StepTiming t = simulate(plan.schedule, in);
    const auto& ops = plan.schedule.ops;
    double compute = 0, optimizer = 0;
    int first_copy_in = -1, first_ag = -1, last_rs = -1;
    for (const Op& op : ops) {
      if (op.stream == Stream::compute) (op.kind == OpKind::optimizer ? optimizer : compute) += in.duration_seconds[op.id];
      if (op.kind == OpKind::copy_in && op.stream != Stream::compute && first_copy_in < 0) first_copy_in = op.id;
      if (op.kind == OpKind::all_gather && first_ag < 0) first_ag = op.id;
      if (op.kind == OpKind::reduce_scatter) last_rs = op.id;
    }
    ASSERT_GE(first_ag, 0);
    ASSERT_GE(last_rs, 0);
    // The step: the first unshard (copy-in + all-gather, nothing to hide it), every compute
    // stream op back to back, the last reduce-scatter (the optimizer needs it), the optimizer.
    const double first_unshard = (first_copy_in >= 0 ? in.duration_seconds[first_copy_in] : 0.0) +
                                 in.duration_seconds[first_ag];
    const double expected = first_unshard + compute + in.duration_seconds[last_rs] + optimizer;
    EXPECT_NEAR(t.step_seconds, expected, 1e-9 * expected) << "FSDP" << version;
    EXPECT_NEAR(t.compute_seconds, compute, 1e-9 * compute);
    EXPECT_NEAR(t.optimizer_seconds, optimizer, 1e-12);
    EXPECT_NEAR(t.exposed_comm_seconds, in.duration_seconds[first_ag] + in.duration_seconds[last_rs], 1e-12)
        << "FSDP" << version;
    // Communication is cheap: < 1% of the step.
    EXPECT_LT(t.comm_seconds, 0.01 * t.step_seconds);
  }
}

TEST(AnalyticScenario, DearCommunicationApproachesTheSumOfCollectives) {
  // NCCL at 1% of its model's bandwidth and next to no compute: the step is the
  // collectives back to back: FSDP1's all-gathers and reduce-scatters share one stream;
  // FSDP2's run on two streams but on one communicator.
  for (int version : {1, 2}) {
    const planner::Scenario sc = parse(scenario_json(version, quiet({{"bandwidth_efficiency", 0.01}}), 1.0));
    const planner::Plan plan = planner::plan_step(sc);
    const planner::CostModel cost(sc);
    const planner::OpCosts in = planner::price_ops(plan.schedule, cost);
    double collectives = 0;
    for (const Op& op : plan.schedule.ops)
      if (planner::is_collective(op.kind)) collectives += in.duration_seconds[op.id];
    const StepTiming t = simulate(plan.schedule, in);
    EXPECT_GE(t.step_seconds, collectives * 0.999) << "FSDP" << version;
    EXPECT_LT(t.step_seconds, collectives * 1.02) << "FSDP" << version;
    EXPECT_GT(t.exposed_comm_seconds, 0.98 * t.step_seconds) << "FSDP" << version;
    // FSDP2's all-gather and reduce-scatter streams use one process group, one NCCL
    // communicator: they run back to back even if links were not shared ([Communicator order]).
    planner::OpCosts unshared = in;
    unshared.share_bandwidth = false;
    EXPECT_GE(simulate(plan.schedule, unshared).step_seconds, collectives * 0.999) << "FSDP" << version;
  }
}

TEST(AnalyticScenario, Fsdp1BackwardPrefetchOverlapsTheNextAllGatherWithTheReduceScatter) {
  // Communication about as costly as compute (2 nodes, NCCL at its model's bandwidth, a
  // light block): without backward prefetch FSDP1 issues block k's all-gather after block
  // k+1's reduce-scatter on the one NCCL stream, so they serialise; BACKWARD_PRE issues the
  // all-gather first, and it overlaps block k+1's backward.
  auto run = [&](const std::string& prefetch) {
    nlohmann::json j = scenario_json(1, quiet(nlohmann::json::object()), 2e7, 2);
    j["fsdp"]["backward_prefetch"] = prefetch;
    const planner::Scenario sc = parse(j);
    planner::Plan plan = planner::plan_step(sc);
    const planner::CostModel cost(sc);
    StepTiming t = time_step(plan.schedule, cost);
    return std::make_pair(std::move(plan), std::move(t));
  };
  const auto [plan_none, none] = run("NONE");
  const auto [plan_pre, pre] = run("BACKWARD_PRE");
  EXPECT_GT(none.step_seconds, 1.15 * pre.step_seconds);
  for (int k = 1; k <= 5; ++k) {
    auto name_of = [](int b) { return "blocks." + std::to_string(b); };
    const Op* ag_none = find_op(plan_none.schedule, OpKind::all_gather, name_of(k), Phase::backward);
    const Op* rs_none = find_op(plan_none.schedule, OpKind::reduce_scatter, name_of(k + 1), Phase::backward);
    const Op* ag_pre = find_op(plan_pre.schedule, OpKind::all_gather, name_of(k), Phase::backward);
    const Op* bwd_pre = find_op(plan_pre.schedule, OpKind::compute_bwd, name_of(k + 1), Phase::backward);
    ASSERT_TRUE(ag_none && rs_none && ag_pre && bwd_pre) << k;
    // NONE: the all-gather starts after the reduce-scatter ends (same stream, issued after).
    EXPECT_GE(none.ops[ag_none->id].start, none.ops[rs_none->id].end - 1e-12) << k;
    EXPECT_EQ(ag_none->stream, rs_none->stream);
    // PRE: it runs while block k+1's backward computes.
    EXPECT_LT(pre.ops[ag_pre->id].start, pre.ops[bwd_pre->id].end) << k;
    EXPECT_GT(pre.ops[ag_pre->id].end, pre.ops[bwd_pre->id].start) << k;
  }
}

TEST(AnalyticScenario, MfuAndThroughputFollowTheStatedConvention) {
  const planner::Scenario sc = parse(scenario_json(2, nlohmann::json::object()));
  const Estimate e = estimate_step(sc);
  const double tokens = 1.0 * 8192;
  // 6N + attention convention: 3 x forward FLOPs; the block model's forward: 8 x 1e9 x tokens.
  const double model_flops = 3.0 * 8 * 1e9 * tokens;
  EXPECT_NEAR(e.plan.schedule.model_flops_per_rank, model_flops, 1e-6 * model_flops);
  EXPECT_NEAR(e.timing.mfu, model_flops / (e.timing.step_seconds * 989.4e12), 1e-12);
  EXPECT_NEAR(e.timing.tokens_per_second_per_gpu, tokens / e.timing.step_seconds, 1e-9);
  // No checkpointing: the GPU executes forward + 2 x forward = the model FLOPs.
  EXPECT_NEAR(e.timing.hfu, e.timing.mfu, 1e-9);
  // Full checkpointing recomputes the forward: hardware FLOPs 4 x forward.
  const Estimate ac = estimate_step(parse(scenario_json(2, nlohmann::json::object()),
                                          {"training.activation_checkpointing=full"}));
  EXPECT_NEAR(ac.timing.hfu / ac.timing.mfu, 4.0 / 3.0, 1e-9);
}

// HFU counts what the kernels execute (planner::executed_flops). Llama-3.2-1B (16 layers, 32
// heads of 64: attention_flops' b*s^2 term 4 x 32 x 64 = 8,192 a layer), one micro-batch of
// 2,048 tokens, no recompute. A fused causal kernel executes the half of the square that MFU's
// model FLOPs count, so HFU equals MFU. Eager attention multiplies the whole square: it executes
// the other half too, forward and backward, 3 x 0.5 x 16 x 8,192 x 2,048^2 = 8.246e11 FLOPs more,
// while the model FLOPs stay the same. (Before, every attention op counted its whole square:
// HFU passed MFU with no recompute at all, 0.88 against 0.64 for Llama-3.1-8B at 32k on A100.)
TEST(AnalyticScenario, HfuCountsTheHalfACausalKernelExecutes) {
  auto run = [](const std::string& attention) {
    const nlohmann::json j = {
        {"model", "hf:" + std::string(FSDPSIM_SOURCE_ROOT) + "/models/hf/llama3.2-1b.json"},
        {"cluster", std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/clusters/dgx-h100.json"},
        {"training",
         {{"global_batch", 8}, {"micro_batch", 1}, {"seq_len", 2048}, {"attention", attention},
          {"activation_checkpointing", "none"}}}};
    return estimate_step(parse(j));
  };
  const Estimate fused = run("flash2");
  const Estimate eager = run("eager");
  EXPECT_GT(fused.timing.hardware_flops, 0);
  EXPECT_NEAR(fused.timing.hardware_flops, fused.timing.model_flops, 1e-12 * fused.timing.model_flops);
  EXPECT_NEAR(fused.timing.hfu, fused.timing.mfu, 1e-12);
  EXPECT_NEAR(eager.timing.model_flops, fused.timing.model_flops, 1e-12 * fused.timing.model_flops);
  const double whole_square_extra = 3 * 0.5 * 16 * 8192.0 * 2048.0 * 2048.0;
  EXPECT_NEAR(eager.timing.hardware_flops - eager.timing.model_flops, whole_square_extra, 1e-9 * whole_square_extra);
}

TEST(AnalyticScenario, CriticalPathTilesTheStep) {
  const std::string file = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json";
  for (const std::vector<std::string>& o :
       {std::vector<std::string>{}, {"fsdp.version=1"}, {"fsdp.version=1", "fsdp.backward_prefetch=NONE"},
        {"training.micro_batch=1", "training.seq_len=256", "training.global_batch=8"}}) {
    const Estimate e = estimate_step(planner::load_scenario(file, o));
    const StepTiming& t = e.timing;
    ASSERT_FALSE(t.critical_path.empty());
    EXPECT_NEAR(t.critical_path.front().start, 0.0, 1e-12);
    EXPECT_NEAR(t.critical_path.back().end, t.step_seconds, 1e-9 * t.step_seconds);
    double sum = 0;
    for (std::size_t k = 0; k < t.critical_path.size(); ++k) {
      sum += t.critical_path[k].end - t.critical_path[k].start;
      if (k > 0) {
        EXPECT_NEAR(t.critical_path[k].start, t.critical_path[k - 1].end, 1e-9 * t.step_seconds) << k;
      }
    }
    EXPECT_NEAR(sum, t.step_seconds, 1e-9 * t.step_seconds);
    const CriticalPathSummary& c = t.critical_path_summary;
    EXPECT_NEAR(c.compute_seconds + c.communication_seconds + c.other_gpu_seconds + c.cpu_issue_seconds + c.host_seconds,
                t.step_seconds, 1e-9 * t.step_seconds);
    // The breakdown adds up too.
    EXPECT_NEAR(t.compute_seconds + t.optimizer_seconds + t.exposed_comm_seconds + t.exposed_other_seconds,
                t.step_seconds, 1e-9 * t.step_seconds);
  }
}

TEST(AnalyticScenario, TinyModelIsCpuBound) {
  // A light model (1e5 FLOPs per token, small weights) at the default calibration: the
  // CPU issuing kernels bounds the step, not the GPU.
  nlohmann::json j = scenario_json(2, nlohmann::json::object(), 1e5);
  j["model"] = testing::block_model(8, {256, 256});
  const Estimate e = estimate_step(parse(j));
  EXPECT_GT(e.timing.critical_path_summary.cpu_issue_seconds, 0.5 * e.timing.step_seconds);
  EXPECT_GT(e.timing.exposed_other_seconds, e.timing.compute_seconds);
}

TEST(AnalyticScenario, TimedPeakMemoryEqualsTheUntimedReplay) {
  // Memory events at their ops' CPU issue times, replayed in time order, reach the same
  // peak, at the same op, as planner::replay_memory's issue order.
  const std::string file = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json";
  const std::vector<std::vector<std::string>> variants = {
      {},
      {"fsdp.version=1"},
      {"fsdp.version=1", "fsdp.limit_all_gathers=false", "fsdp.forward_prefetch=true"},
      {"training.activation_checkpointing=none", "training.micro_batch=1"},
      {"training.grad_accum=2", "training.global_batch=32"},
      {"fsdp.reshard_after_forward=false"},
      {"fsdp.strategy=SHARD_GRAD_OP", "fsdp.reshard_after_forward=false"},
      {"fsdp.version=1", "fsdp.cpu_offload=true"},
  };
  for (const auto& o : variants) {
    const planner::Scenario sc = planner::load_scenario(file, o);
    const planner::Plan plan = planner::plan_step(sc);
    const StepTiming t = time_step(plan.schedule, planner::CostModel(sc));
    const TimedMemory timed = timed_memory(plan.schedule, t);
    const planner::MemoryReport untimed = planner::replay_memory(plan.schedule);
    std::string what;
    for (const auto& s : o) what += s + " ";
    EXPECT_EQ(timed.peak_allocated_bytes, untimed.peak_allocated_bytes) << what;
    EXPECT_EQ(timed.peak_op, untimed.peak_op) << what;
    EXPECT_DOUBLE_EQ(timed.peak_seconds, t.ops[untimed.peak_op].issue_start) << what;
    // Issue times never go backwards: the allocator sees the events in issue order.
    for (std::size_t i = 1; i < t.ops.size(); ++i) ASSERT_GE(t.ops[i].issue_start, t.ops[i - 1].issue_start) << what;
    EXPECT_LE(timed.points.back().seconds, t.step_seconds);
  }
}

TEST(AnalyticScenario, DeeperPrefetchDoesNotSlowACommBoundStep) {
  // NCCL at 0.1% of its model's bandwidth: a block's 32 MiB all-gather (~82 ms) outlasts its
  // ~8.2e12 FLOPs of compute (~10 ms), so the collectives on the shard group's one
  // communicator set the step. Prefetching further ahead (fsdp.prefetch_depth, FSDP2) issues
  // the same collectives earlier: the communication time is the same at every depth, and the
  // step may not grow by more than the copy-ins the deeper prefetch puts between back-to-back
  // all-gathers at the start of backward: the planner runs FSDP2's copy-in on the all-gather
  // stream (PyTorch has a separate all_gather_copy_in_stream), so each extra unit ahead leaves
  // the communicator idle for one copy-in (4.2 us here) that no reduce-scatter fills. Measured:
  // exactly one copy-in per unit of depth, 1.6e-6 of the 2.61 s step.
  for (const char* forward_prefetch : {"fsdp.forward_prefetch=false", "fsdp.forward_prefetch=true"}) {
    struct Point {
      StepTiming timing;
      double copy_in_seconds = 0;  // one block's copy-in on the all-gather stream
    };
    auto run = [&](int depth) {
      const planner::Scenario sc = parse(scenario_json(2, quiet({{"bandwidth_efficiency", 0.001}})),
                                         {forward_prefetch, "fsdp.prefetch_depth=" + std::to_string(depth)});
      const planner::Plan plan = planner::plan_step(sc);
      const planner::CostModel cost(sc);
      const planner::OpCosts in = planner::price_ops(plan.schedule, cost);
      Point p{simulate(plan.schedule, in)};
      const Op* copy_in = find_op(plan.schedule, OpKind::copy_in, "blocks.3", Phase::backward);
      EXPECT_TRUE(copy_in != nullptr && copy_in->stream == Stream::all_gather);
      if (copy_in != nullptr) p.copy_in_seconds = in.duration_seconds[copy_in->id];
      // Comm-bound indeed: the collectives outlast the compute.
      EXPECT_GT(p.timing.comm_seconds, 2 * p.timing.compute_seconds) << forward_prefetch << " depth " << depth;
      return p;
    };
    const Point d1 = run(1);
    for (int depth : {2, 3}) {
      const Point dk = run(depth);
      EXPECT_NEAR(dk.timing.comm_seconds, d1.timing.comm_seconds, 1e-12 * d1.timing.comm_seconds);
      EXPECT_LE(dk.timing.step_seconds, d1.timing.step_seconds + (depth - 1) * d1.copy_in_seconds * (1 + 1e-9))
          << forward_prefetch << " depth " << depth;
      EXPECT_LT(dk.timing.step_seconds, d1.timing.step_seconds * (1 + 1e-5)) << forward_prefetch << " depth " << depth;
    }
  }
}

}  // namespace
}  // namespace fsdpsim::sim
