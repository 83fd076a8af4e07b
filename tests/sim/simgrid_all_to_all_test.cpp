// Expert-parallel all-to-alls on a simulated fat tree: every rank sends to every member of its
// group, so the traffic that leaves a leaf is a large share of all of it, and an oversubscribed
// spine slows the all-to-all by the ratio of the bottlenecks, worked out by hand below. The
// busiest link is named. Schedules are written here as a planner would emit them (one
// all-to-all op on an "ep" group); the platform is the catalog's DGX H100 fat tree.
#include <gtest/gtest.h>

#include <string>

#include "models/json_input.h"
#include "planner/cost_model.h"
#include "planner/op_costs.h"
#include "planner/scenario.h"
#include "sim/analytic.h"
#include "sim/simgrid_engine.h"
#include "sim/internal/simgrid_flows.h"
#include "sim/simgrid_platform.h"

namespace fsdpsim::sim {
namespace {

constexpr double MiB = 1024.0 * 1024.0;
constexpr double kSendBytes = 256 * MiB;  // one rank's dispatch buffer

planner::ClusterSpec catalog_cluster(const std::string& name, int nodes) {
  const std::string file = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/clusters/" + name;
  planner::ClusterSpec c = planner::parse_cluster(load_json_file(file), file, "");
  c.nodes = nodes;
  return c;
}

// One all-to-all of kSendBytes per rank on groups of `ep` consecutive ranks.
planner::Schedule ep_all_to_all(int world, int ep) {
  planner::Schedule s;
  s.name = "ep all-to-all";
  s.world_size = world;
  s.groups = {{"ep", ep, ep / 8, 1}};
  planner::Allocation recv;
  recv.id = 0;
  recv.label = "dispatch receive buffer";
  recv.bytes = static_cast<std::int64_t>(kSendBytes);
  recv.category = planner::MemCategory::activation;
  recv.stream = planner::Stream::all_to_all;
  s.allocations = {recv};
  planner::Op op;
  op.id = 0;
  op.kind = planner::OpKind::all_to_all;
  op.stream = planner::Stream::all_to_all;
  op.name = "dispatch";
  op.group = 0;
  op.comm_bytes = kSendBytes;
  op.allocs = {0};
  s.ops = {op};
  planner::validate_schedule(s, "ep all-to-all");
  return s;
}

struct AllToAllRun {
  double nccl_seconds = 0;     // the cost model's time (what the analytic engine plays)
  double latency_seconds = 0;  // its latency part
  double analytic_seconds = 0;
  double simgrid_seconds = 0;
  std::string busiest_link, busiest_kind;
};

AllToAllRun simulate_on(const planner::ClusterSpec& cluster, const planner::Schedule& s, int nodes_per_leaf) {
  planner::Calibration calibration;
  calibration.nccl = planner::NcclParams::defaults_for(cluster);
  const planner::CostModel model(cluster, calibration, models::DType::bf16);
  const planner::OpCosts costs = planner::price_ops(s, model);
  SimgridOptions options;
  options.flow_mode = FlowMode::aggregated;
  options.fabric.nodes_per_leaf = nodes_per_leaf;
  const SimgridResult r = simulate_simgrid(s, costs, {cluster, calibration.nccl}, options);
  AllToAllRun run;
  run.nccl_seconds = costs.duration_seconds[0];
  run.latency_seconds = costs.latency_seconds[0];
  const StepTiming analytic = simulate(s, costs);
  run.analytic_seconds = analytic.ops[0].end - analytic.ops[0].start;
  run.simgrid_seconds = r.timing.ops[0].end - r.timing.ops[0].start;
  if (!r.links.empty()) {
    run.busiest_link = r.links.front().name;
    run.busiest_kind = r.links.front().kind;
  }
  return run;
}

void expect_rel_near(double actual, double expected, double rel, const std::string& what) {
  EXPECT_NEAR(actual, expected, std::abs(expected) * rel) << what;
}

// 4 DGX H100 nodes, each under its own leaf (simulation.fabric.nodes_per_leaf = 1), expert
// parallelism over 2 nodes (groups of 16 ranks: nodes 0-1 and 2-3). S = 256 MiB per rank.
//   Each rank sends S/16 to each of its 15 peers; 8 of them are on the other node, under
//   another leaf: a node sends 8 ranks x 8 peers x S/16 = 4S through its leaf's uplink.
//   Below the spine, each node's traffic to the other node leaves through its 8 GPUs' PCIe
//   paths to their NICs: 8 x 48 GB/s = 384 GB/s (NCCL's Gen5 x16 rating; the NICs are 8 x 50).
//   That is NCCL's bound (planner: 4S / 384 GB/s). Leaf uplink: 8 NICs x 50 GB/s = 400 GB/s
//   at 1:1 (not the bottleneck), 200 GB/s at 2:1 (the bottleneck).
//   Per flow (max-min sharing): 1:1, PCIe 48/8 = 6 GB/s < uplink 400/64 = 6.25 GB/s; 2:1,
//   uplink 200/64 = 3.125 GB/s. Transfer ratio 2:1 / 1:1 = 384 / 200 = 1.92; the latency
//   part (NCCL's 22.4 us) does not change.
TEST(SimgridAllToAll, TwoToOneSpineSlowsAnEpAllToAllAcrossLeavesBy384Over200) {
  const planner::Schedule s = ep_all_to_all(32, 16);
  const AllToAllRun one = simulate_on(catalog_cluster("dgx-h100-fat-tree.json", 4), s, 1);
  const AllToAllRun two = simulate_on(catalog_cluster("dgx-h100-fat-tree-2to1.json", 4), s, 1);
  // The cost model's price (both clusters alike: NCCL knows no spine).
  expect_rel_near(one.nccl_seconds - one.latency_seconds, 4 * kSendBytes / 384e9, 1e-9, "NCCL transfer");
  expect_rel_near(one.latency_seconds, 22.4e-6, 1e-9, "NCCL latency");
  EXPECT_DOUBLE_EQ(two.nccl_seconds, one.nccl_seconds);
  EXPECT_DOUBLE_EQ(two.analytic_seconds, one.analytic_seconds);
  // SimGrid: alone on the non-blocking tree the all-to-all takes NCCL's time; at 2:1 its
  // transfer takes 1.92x as long.
  const double transfer = one.nccl_seconds - one.latency_seconds;
  expect_rel_near(one.simgrid_seconds, one.nccl_seconds, 0.005, "1:1");
  expect_rel_near(two.simgrid_seconds, one.latency_seconds + transfer * 384.0 / 200.0, 0.005, "2:1");
  // The busiest link: a GPU's PCIe path to its NIC at 1:1, a leaf's spine link at 2:1.
  EXPECT_EQ(one.busiest_kind.rfind("pcie", 0), 0u) << one.busiest_link;
  EXPECT_EQ(two.busiest_kind.rfind("leaf", 0), 0u) << two.busiest_link;
  EXPECT_EQ(two.busiest_link.rfind("leaf", 0), 0u) << two.busiest_link;
}

// 8 DGX H100 nodes in the default leaves of 4 nodes (32 leaf ports down / 8 NICs), expert
// parallelism over all 64 ranks. S = 256 MiB per rank, S/64 to each of 63 peers.
//   A node sends to the 56 ranks of the 7 other nodes: 8 x 56 x S/64 = 7S through 384 GB/s
//   (NCCL's bound, as above): each GPU's PCIe uplink carries 56 flows of S/64 (to its rail on
//   the 7 other nodes). 32 of them go to the other leaf: a leaf's 4 nodes send 4 x 8 x 32 x
//   S/64 = 16S, 1024 flows, over an uplink of 4 x 8 x 50 = 1600 GB/s at 1:1, 800 GB/s at 2:1.
//   SimGrid's CM02 model shares a link in inverse proportion to each flow's route latency
//   (simgrid/simgrid v3.32, commit e8d2ff8d, src/kernel/resource/models/network_cm02.cpp:
//   "action->sharing_penalty_ = latency"): a cross-leaf flow crosses two 5 us hops (NIC and
//   leaf uplink: 10 us), a same-leaf flow one (5 us) and gets twice the rate. On a PCIe uplink:
//   32 r + 24 x 2r = 48 GB/s, r = 0.6 GB/s (the leaf uplink would allow 1600/1024 or 800/1024
//   = 0.78 GB/s: PCIe binds first). The same-leaf flows finish after (S/64) / 1.2 GB/s, when
//   the cross-leaf flows have sent half; these then get min(PCIe 48/32 = 1.5, uplink):
//     1:1: 1.5 GB/s      T = (S/64) (1/1.2 + 0.5/1.5)     = (S/64) x 7/6  = 7S / 384 GB/s (NCCL's)
//     2:1: 0.78125 GB/s  T = (S/64) (1/1.2 + 0.5/0.78125) = (S/64) x 1.47333
//   Ratio 1.47333 / (7/6) = 1.262857. (With equal shares, as InfiniBand's credit-based flow
//   control gives, it would be (16S / 800) / (7S / 384) = 1.097: only 32 of a rank's 56 remote
//   peers sit under the other leaf.)
TEST(SimgridAllToAll, TwoToOneSpineSlowsAWorldAllToAllOnTwoLeavesByTheCrossLeafShare) {
  const planner::Schedule s = ep_all_to_all(64, 64);
  const AllToAllRun one = simulate_on(catalog_cluster("dgx-h100-fat-tree.json", 8), s, 0);
  const AllToAllRun two = simulate_on(catalog_cluster("dgx-h100-fat-tree-2to1.json", 8), s, 0);
  expect_rel_near(one.nccl_seconds - one.latency_seconds, 7 * kSendBytes / 384e9, 1e-9, "NCCL transfer");
  const double transfer = one.nccl_seconds - one.latency_seconds;
  expect_rel_near(one.simgrid_seconds, one.nccl_seconds, 0.005, "1:1");
  const double ratio = (1 / 1.2 + 0.5 / 0.78125) / (7.0 / 6.0);
  expect_rel_near(two.simgrid_seconds, one.latency_seconds + transfer * ratio, 0.005, "2:1");
  EXPECT_EQ(two.busiest_kind.rfind("leaf", 0), 0u) << two.busiest_link;
}

// The flows themselves: n(n-1) per group, each 1/(n-1) of the per-rank wire bytes, none merged.
TEST(SimgridAllToAll, EveryMemberSendsToEveryOtherMember) {
  const planner::ClusterSpec cluster = catalog_cluster("dgx-h100-fat-tree.json", 2);
  const Platform p = Platform::build(cluster, planner::NcclParams::defaults_for(cluster), FabricOptions{});
  const GroupLayout layout{16, 1, false};
  const std::vector<RingEdge> edges = all_to_all_edges(layout, 0, p);
  ASSERT_EQ(edges.size(), 16u * 15u);
  double out_of_rank_0 = 0;
  for (const RingEdge& e : edges) {
    EXPECT_NE(e.src, e.dst);
    EXPECT_DOUBLE_EQ(e.fraction, 1.0 / 15.0);
    if (e.src == 0) out_of_rank_0 += e.fraction;
  }
  EXPECT_DOUBLE_EQ(out_of_rank_0, 1.0);  // rank 0 sends its wire bytes once
  EXPECT_EQ(ring_steps(planner::OpKind::all_to_all, 16), 1);
  EXPECT_EQ(collective_edges(FlowPattern::ring, layout, 0, p).size(), ring_edges(layout, 0, p).size());
}

}  // namespace
}  // namespace fsdpsim::sim
