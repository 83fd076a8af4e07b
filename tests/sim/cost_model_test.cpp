// The cost model (planner/cost_model.h) as the engines see it: collectives through an op's
// process group give NCCL's formulas worked by hand; compute ops give FLOPs / (peak x
// efficiency) + bytes / (bandwidth x efficiency); issue costs follow the kernel estimate;
// calibration files are read with errors that name the JSON path.
#include <gtest/gtest.h>

#include <cmath>

#include "models/json_input.h"
#include "planner/cost_model.h"
#include "planner/scenario.h"
#include "sim/analytic.h"
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
  EXPECT_DOUBLE_EQ(cost.bf16_peak_flops(), 989.4e12);
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
}

TEST(Calibration, EveryShippedGpuHasSourcedDefaultsInRange) {
  const nlohmann::json gpus = load_json_file(std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/hardware/gpus.json");
  const std::vector<std::string> fields = {"matmul_efficiency", "attention_efficiency", "causal_attention_work",
                                           "attention_backward_work", "hbm_efficiency", "op_issue_seconds",
                                           "kernel_issue_seconds", "kernels_per_parameter_tensor",
                                           "launch_queue_kernels", "compute_slowdown_under_comm", "pcie_gbps",
                                           "host_optimizer_bytes_per_second", "cuda_context_bytes"};
  int checked = 0;
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
    ++checked;
  }
  EXPECT_GE(checked, 7);
  // The H100 figure is the workplace's measured 8192^3 GEMM: 798 / 989.4 TFLOP/s.
  planner::ClusterSpec h100;
  h100.gpu = planner::find_gpu("H100-SXM-80GB");
  EXPECT_NEAR(planner::default_calibration(h100).matmul_efficiency, 798.0 / 989.4, 5e-4);
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
  EXPECT_EQ(error_path({{"matmul_eficiency", 0.5}}), "calibration.matmul_eficiency");
  EXPECT_EQ(error_path({{"nccl", {{"bandwidth_efficiency", -2}}}}), "calibration.nccl.bandwidth_efficiency");
}

}  // namespace
}  // namespace fsdpsim::sim
