// The cost-model terms added for accuracy against published runs (docs/accuracy.md): eager
// memory-bound traffic and its efficiency, matrix FLOPs without shapes, NIC sharing
// between the per-rank instances of a process group, and validate's excluded figures.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "models/json_input.h"
#include "planner/collectives.h"
#include "planner/cost_model.h"
#include "planner/scenario.h"
#include "sim/validation.h"
#include "tests/planner/synthetic.h"

namespace fsdpsim::sim {
namespace {

using planner::CostModel;
using planner::Op;
using planner::OpKind;
using planner::Schedule;

nlohmann::json scenario_json(const nlohmann::json& calibration) {
  return {{"model", testing::block_model(2, {1024, 1024}, 0, {4096, 1024})},
          {"cluster", testing::cluster(1, 8)},
          {"training", {{"micro_batch", 1}, {"seq_len", 1024}}},
          {"calibration", calibration}};
}

Op compute(OpKind kind, const std::string& module, double flops, double bytes) {
  Op op;
  op.kind = kind;
  op.module = module;
  op.flops = flops;
  op.hbm_bytes = bytes;
  return op;
}

// 3.35e12 B/s x 0.8 = 2.68e12 B/s: 2.68e9 bytes take 1 ms fused, eager_memory_bound_factor
// (2.5 here) x that when the scenario states eager execution, on transformer blocks only.
TEST(EagerMemoryBound, BlocksOfEagerScenariosMoveTheFactorTimesTheFusedBytes) {
  const nlohmann::json cal = {{"hbm_efficiency", 0.8}, {"memory_bound_efficiency", 0.8}, {"eager_memory_bound_factor", 2.5}};
  nlohmann::json eager = scenario_json(cal), compiled = scenario_json(cal), unstated = scenario_json(cal);
  eager["training"]["torch_compile"] = false;
  compiled["training"]["torch_compile"] = true;
  const CostModel e(planner::parse_scenario(eager, "test.json"));
  const CostModel c(planner::parse_scenario(compiled, "test.json"));
  const CostModel u(planner::parse_scenario(unstated, "test.json"));
  Schedule s;
  for (OpKind kind : {OpKind::compute_fwd, OpKind::compute_bwd, OpKind::recompute}) {
    const Op block = compute(kind, "blocks.1", 0, 2.68e9);
    EXPECT_NEAR(e.duration_seconds(block, s), 2.5e-3, 1e-15);
    EXPECT_NEAR(c.duration_seconds(block, s), 1e-3, 1e-15);
    EXPECT_NEAR(u.duration_seconds(block, s), 1e-3, 1e-15);
  }
  // Not a block (the embedding), and not a module compute (a copy): fused bytes either way.
  EXPECT_NEAR(e.duration_seconds(compute(OpKind::compute_fwd, "embed", 0, 2.68e9), s), 1e-3, 1e-15);
  EXPECT_NEAR(e.duration_seconds(compute(OpKind::copy_out, "blocks.1", 0, 2.68e9), s), 1e-3, 1e-15);
}

// A module's memory-bound kernels run at memory_bound_efficiency of the HBM bandwidth; copies
// and the optimizer (streaming kernels) at hbm_efficiency. 3.35e12 B/s x 0.4 = 1.34e12 B/s:
// 1.34e9 bytes of a block's forward take 1 ms; 3.35e12 x 0.8: 2.68e9 bytes of a copy take 1 ms.
TEST(MemoryBoundEfficiency, AppliesToModuleComputeAndHbmEfficiencyToCopiesAndTheOptimizer) {
  const CostModel cost(planner::parse_scenario(
      scenario_json({{"memory_bound_efficiency", 0.4}, {"hbm_efficiency", 0.8}}), "test.json"));
  Schedule s;
  for (OpKind kind : {OpKind::compute_fwd, OpKind::compute_bwd, OpKind::recompute})
    EXPECT_NEAR(cost.duration_seconds(compute(kind, "blocks.0", 0, 1.34e9), s), 1e-3, 1e-15);
  EXPECT_NEAR(cost.duration_seconds(compute(OpKind::optimizer, "", 0, 2.68e9), s), 1e-3, 1e-15);
  EXPECT_NEAR(cost.duration_seconds(compute(OpKind::copy_in, "blocks.0", 0, 2.68e9), s), 1e-3, 1e-15);
  EXPECT_THROW(planner::read_calibration({{"memory_bound_efficiency", 1.5}}, "c.json", planner::Calibration{}), InputError);
}

// Eager attention's score-matrix traffic (the s^2 terms) is listed kernel by kernel in the
// model files: the eager factor, which stands for per-token elementwise chains, leaves it alone,
// and it streams at hbm_efficiency. 2.68e9 bytes of which 1.34e9 are scores, factor 2.5:
// 2.5 x 1.34e9 / (3.35e12 x 0.8) + 1.34e9 / (3.35e12 x 0.5) = 1.25 + 0.8 = 2.05 ms.
TEST(EagerMemoryBound, ScoreBytesAreNotMultipliedByTheEagerFactor) {
  nlohmann::json j = scenario_json(
      {{"memory_bound_efficiency", 0.8}, {"hbm_efficiency", 0.5}, {"eager_memory_bound_factor", 2.5}});
  j["training"]["torch_compile"] = false;
  const CostModel cost(planner::parse_scenario(j, "test.json"));
  Schedule s;
  Op op = compute(OpKind::compute_bwd, "blocks.1", 0, 2.68e9);
  op.score_hbm_bytes = 1.34e9;
  EXPECT_NEAR(cost.duration_seconds(op, s), 2.05e-3, 1e-15);
}

// Matrix FLOPs of an op without shapes (a hand-written model): at the GEMM ceiling, with no
// per-GPU step fraction. 989.4e12 x 0.8 = 791.52e12 FLOP/s: 7.9152e12 FLOPs take 10 ms.
TEST(ComputeWithoutShapes, MatrixFlopsRunAtTheGemmCeiling) {
  const CostModel cost(planner::parse_scenario(scenario_json({{"matmul_efficiency", 0.8}}), "test.json"));
  Schedule s;
  EXPECT_NEAR(cost.duration_seconds(compute(OpKind::compute_fwd, "blocks.0", 7.9152e12, 0), s), 1e-2, 1e-14);
}

// 4 nodes x 8 GPUs, one 50 GB/s NIC per node. HSDP's replicate group has one rank per node,
// so every node runs 8 instances of it at once (one per local rank): each gets 50/8 GB/s of
// the NIC. [Shared NIC sharers] Each instance's communicator picks its algorithm on the NIC
// whole (NCCL does not know of the others), and its transfer then runs at its fair share of the
// NIC: the bus bandwidth of the transfer is 6.25 GB/s exactly, where searching NCCL's speed
// arrays at 6.25 rounded it down (6.0). A group with all 8 GPUs of each node (one instance per
// node) keeps the NIC.
TEST(NicSharing, ReplicateGroupInstancesShareTheNodesNics) {
  nlohmann::json j = scenario_json(nlohmann::json::object());
  j["cluster"] = testing::cluster(4, 8);
  j["cluster"]["inter_node"]["nics_per_node"] = 1;
  const planner::Scenario sc = planner::parse_scenario(j, "test.json");
  const CostModel cost(sc);
  Schedule s;
  s.groups = {{"replicate", 4, 4}, {"world", 32, 4}};
  Op ar;
  ar.kind = OpKind::all_reduce;
  ar.stream = planner::Stream::all_reduce;
  ar.comm_bytes = 1e9;
  ar.group = 0;
  const planner::NcclParams& nccl = cost.calibration().nccl;
  const double nic = nccl.nic_bandwidth_gbps > 0 ? nccl.nic_bandwidth_gbps : sc.cluster.nic_bandwidth_gbps;
  const planner::CollectiveEstimate alone =
      planner::estimate_collective(planner::CollectiveKind::all_reduce, 1e9, {4, 4}, sc.cluster, nccl);
  const planner::CollectiveEstimate shared = cost.collective(ar, s);
  EXPECT_EQ(shared.algorithm, alone.algorithm);  // chosen on the NIC whole
  EXPECT_EQ(shared.channels, alone.channels);
  EXPECT_DOUBLE_EQ(shared.latency_seconds, alone.latency_seconds);
  const double transfer = shared.seconds - shared.latency_seconds;
  EXPECT_NEAR(shared.bus_bandwidth_gbps * shared.seconds / transfer, nic / 8, 1e-9);
  // The stretch: the transfer alone, at its own bus bandwidth, over the share.
  const double alone_transfer = alone.seconds - alone.latency_seconds;
  EXPECT_NEAR(transfer, alone_transfer * (alone.bus_bandwidth_gbps * alone.seconds / alone_transfer) / (nic / 8), 1e-12);
  EXPECT_GT(shared.seconds, 4 * alone.seconds);  // bandwidth-bound at 1 GB: nearly 8x
  ar.group = 1;
  EXPECT_DOUBLE_EQ(cost.collective(ar, s).seconds,
                   planner::estimate_collective(planner::CollectiveKind::all_reduce, 1e9, {32, 4}, sc.cluster,
                                                cost.calibration().nccl).seconds);
}

// 4 nodes x 8 GPUs with 4 NICs per node. A group with 2 ranks per node has 4 instances per
// node: as many as the NICs, so each gets one NIC of its own at the full NIC bandwidth (not all
// 4); with 4 ranks per node, 2 instances of 2 NICs each. Priced as the group on a cluster of that
// many NICs per node. Here the NICs, not the GPUs' PCIe links, bound the rings, so the share
// shows. Kills cost.nics-not-shared (tools/mutants.txt).
TEST(NicSharing, InstancesSplitTheNicsWhenThereAreEnough) {
  nlohmann::json j = scenario_json(nlohmann::json::object());
  j["cluster"] = testing::cluster(4, 8);
  j["cluster"]["inter_node"]["nics_per_node"] = 4;
  const planner::Scenario sc = planner::parse_scenario(j, "test.json");
  const CostModel cost(sc);
  Schedule s;
  s.groups = {{"two per node", 8, 4}, {"four per node", 16, 4}};
  Op ar;
  ar.kind = OpKind::all_reduce;
  ar.stream = planner::Stream::all_reduce;
  ar.comm_bytes = 1e9;
  for (int nics : {1, 2}) {
    ar.group = nics - 1;
    const planner::ProcessGroup& g = s.groups[ar.group];
    planner::ClusterSpec shared = sc.cluster;
    planner::NcclParams nccl = cost.calibration().nccl;
    shared.nics_per_node = nccl.nics_per_node = nics;
    const double expected = planner::estimate_collective(planner::CollectiveKind::all_reduce, 1e9, {g.ranks, g.nodes},
                                                         shared, nccl).seconds;
    EXPECT_DOUBLE_EQ(cost.collective(ar, s).seconds, expected) << g.name;
    const double all_nics = planner::estimate_collective(planner::CollectiveKind::all_reduce, 1e9, {g.ranks, g.nodes},
                                                         sc.cluster, cost.calibration().nccl).seconds;
    EXPECT_GT(expected, all_nics) << g.name;  // fewer NICs: slower, so the sharing is visible
  }
}

std::string write_scenario(const std::string& name, const nlohmann::json& j) {
  const std::string path = (std::filesystem::temp_directory_path() / name).string();
  std::ofstream(path) << j.dump(2);
  return path;
}

// A published figure the source's caveats make unusable is shown with its reason, never scored.
TEST(ValidationExcluded, ExcludedFiguresAreListedNotCompared) {
  nlohmann::json j = scenario_json(nlohmann::json::object());
  j["published"] = {{"row_id", 7},
                    {"tokens_per_second_per_gpu", 1000},
                    {"step_time_seconds", 1.0},
                    {"excluded", {{"tokens_per_second_per_gpu", "the source's column cannot be read"}}}};
  const RowValidation row = validate_scenario(write_scenario("fsdpsim_excluded_test.json", j));
  ASSERT_TRUE(row.error.empty()) << row.error;
  ASSERT_EQ(row.metrics.size(), 1u);
  EXPECT_EQ(row.metrics[0].metric, "step_time_seconds");
  ASSERT_EQ(row.excluded.size(), 1u);
  EXPECT_EQ(row.excluded[0].first, "tokens_per_second_per_gpu");
  EXPECT_EQ(row.excluded[0].second, "the source's column cannot be read");
  EXPECT_EQ(summarise({row}, "tokens_per_second_per_gpu", 0.15).rows, 0);
  j["published"]["excluded"] = {{"mfu", "x"}};
  const RowValidation bad = validate_scenario(write_scenario("fsdpsim_excluded_bad_test.json", j));
  EXPECT_NE(bad.error.find("published.excluded.mfu"), std::string::npos) << bad.error;
  j["published"]["excluded"] = {{"step_time_seconds", ""}};
  const RowValidation empty = validate_scenario(write_scenario("fsdpsim_excluded_empty_test.json", j));
  EXPECT_NE(empty.error.find("published.excluded.step_time_seconds"), std::string::npos) << empty.error;
}

}  // namespace
}  // namespace fsdpsim::sim
