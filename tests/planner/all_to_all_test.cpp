// The all-to-all collective (Mixture-of-Experts expert parallelism): its cost, worked by hand
// from NCCL 2.28.3's point-to-point path (NVIDIA/nccl tag v2.28.3-1, commit f1308997), its
// name and its schedule JSON.
#include <gtest/gtest.h>

#include <cmath>

#include "models/json_input.h"
#include "planner/collectives.h"
#include "planner/cost_model.h"
#include "planner/schedule.h"

namespace fsdpsim::planner {
namespace {

constexpr double KiB = 1024.0;
constexpr double MiB = 1024.0 * KiB;
constexpr double GiB = 1024.0 * MiB;

// An H100 SXM node as tests/planner/collectives_test.cpp builds it: NVIDIA H100 datasheet,
// 18 NVLink4 links, 450 GB/s per direction, NVSwitch; 8 x 400 Gb/s NICs (DGX H100: 8 x
// ConnectX-7), one per GPU.
ClusterSpec h100_cluster(int nodes) {
  ClusterSpec c;
  c.name = "H100 x" + std::to_string(nodes);
  c.gpu.name = "H100-SXM-80GB";
  c.gpu.nvlink_generation = "hopper";
  c.gpu.nvlink_links = 18;
  c.gpu.nvlink_bandwidth_gbps = 450;
  c.gpu.nvls = true;
  c.nodes = nodes;
  c.gpus_per_node = 8;
  c.intra_kind = IntraNodeKind::nvswitch;
  c.intra_bandwidth_gbps = 450;
  c.nic_bandwidth_gbps = 50;
  c.nics_per_node = 8;
  c.inter_latency_seconds = 5e-6;
  return c;
}

void expect_rel_near(double actual, double expected, double rel, const std::string& what) {
  EXPECT_NEAR(actual, expected, std::abs(expected) * rel) << what;
}

// One node, 8 ranks, 1 GiB send buffer per rank.
//   NCCL's NVLink per GPU: 18 links x 20.6 GB/s (topo.h SM90_NVLINK_BW) = 370.8 GB/s.
//   Collective channels: the ring graph's 12 (collectives_test.cpp RingGraphsOfAHopperNode).
//   p2p channels (paths.cc ncclTopoComputeP2pChannels) = pow2Up(min(12, 64)) = 16.
//   Per peer: an NVLink peer gets 2 x floor(370.8 / 20.6) = 36 (ncclTopoGetNchannels);
//     pow2Up(min(16, 36)) = 16.
//   One message = 2^30 / 8 = 128 MiB > 16 x 16 KiB (P2P_LL_THRESHOLD x channels): Simple.
//   addP2pToPlan: step = NVLink p2p chunk 512 KiB; one node: minPart = step/8 = 64 KiB,
//     maxPart = 32 x step = 16 MiB; nChannelsMin = 16 halved while x 8 ranks > 16: 2;
//     channels = min(2, 128 MiB / 64 KiB) = 2, parts 64 MiB > 16 MiB -> 4 (32 MiB) -> 8
//     (16 MiB, not > 16 MiB): 8 channels per send.
//   Concurrent peers = 16 / 8 x 8 (NCCL_MAX_DEV_WORK_P2P_PER_BATCH) = 16 >= 7: one batch.
//   Transfer: 7 x 128 MiB = 896 MiB over 370.8 GB/s. No NIC.
//   Latency: Ring/Simple base 8.4 us + 1 batch x NVLink Ring/Simple hop 3.4 us = 11.8 us.
TEST(AllToAllCost, EightRanksOnOneNodeByHand) {
  const ClusterSpec c = h100_cluster(1);
  const NcclParams p = NcclParams::defaults_for(c);
  const NcclAllToAllModel m = nccl_all_to_all_model(1 * GiB, {8, 1}, c, p);
  EXPECT_EQ(m.p2p_channels, 16);
  EXPECT_EQ(m.channels_per_peer, 16);
  EXPECT_EQ(m.channels_per_send, 8);
  EXPECT_EQ(m.concurrent_peers, 16);
  EXPECT_EQ(m.batches, 1);
  EXPECT_EQ(m.protocol, NcclProtocol::simple);
  EXPECT_DOUBLE_EQ(m.intra_bytes, 7 * 128 * MiB);
  EXPECT_DOUBLE_EQ(m.inter_bytes_per_node, 0);
  const double expected_s = 11.8e-6 + 7 * 128 * MiB / 370.8e9;
  expect_rel_near(m.seconds, expected_s, 1e-9, "model");
  const CollectiveEstimate e = estimate_collective(CollectiveKind::all_to_all, 1 * GiB, {8, 1}, c, p);
  EXPECT_EQ(e.algorithm, "P2P");
  EXPECT_EQ(e.protocol, "Simple");
  EXPECT_EQ(e.channels, 8);
  expect_rel_near(e.seconds, expected_s, 1e-9, "estimate");
  expect_rel_near(e.latency_seconds, 11.8e-6, 1e-9, "latency");
  // nccl-tests (src/alltoall.cu AlltoAllGetBw): algbw = bytes / time, busbw = algbw x 7/8;
  // for a large buffer it approaches the NVLink rate: 2^30 x 7/8 / (7 x 2^27 / 370.8) = 370.8.
  expect_rel_near(e.bus_bandwidth_gbps, 1 * GiB / expected_s / 1e9 * 7.0 / 8.0, 1e-9, "busbw");
  EXPECT_NEAR(e.bus_bandwidth_gbps, 370.8, 2.0);
}

// Two nodes, 16 ranks, 1 GiB send buffer per rank.
//   Collective channels: the ring graph's 8 (RingGraphsOfAHopperNode) -> p2p channels 8.
//   Per peer: NVLink peers 36; a network peer (NCCL_NCHANNELS_PER_NET_PEER unset) starts at 2,
//     halved while 2 x 16 ranks > 8 x 4: 32 > 32 is false, stays 2; NICs to cover the GPU's
//     PCIe (48 GB/s Gen5, NCCL's rating) with one 50 GB/s NIC: 1; max(1, 2) = 2.
//     min(8, 36, 2) = 2 per peer.
//   One message = 2^30 / 16 = 64 MiB: Simple. Step = net p2p chunk 128 KiB; multi-node:
//     minPart 64 KiB, maxPart 128 KiB; nChannelsMin = 2 halved while x 16 > 8: 1; 1 channel,
//     part 64 MiB > 128 KiB -> 2 (the per-peer limit): 2 channels per send.
//   Concurrent peers = 8 / 2 x 8 = 32 >= 15: one batch.
//   Intra: 7 x 64 MiB = 448 MiB over 370.8 GB/s = 1.267 ms.
//   Inter: each node's 8 ranks send 8 x 64 MiB to the other node: 8 x 8 x 64 MiB = 4 GiB
//     through min(8 NICs x 50, 8 GPUs x 48 PCIe) = 384 GB/s = 11.18 ms (the bound).
//   Latency: 8.4 + 1 x max(NET Ring/Simple hop 14.0, net overhead 1.0 x 3) = 22.4 us.
TEST(AllToAllCost, SixteenRanksOnTwoNodesByHand) {
  const ClusterSpec c = h100_cluster(2);
  const NcclParams p = NcclParams::defaults_for(c);
  const NcclAllToAllModel m = nccl_all_to_all_model(1 * GiB, {16, 2}, c, p);
  EXPECT_EQ(m.p2p_channels, 8);
  EXPECT_EQ(m.channels_per_peer, 2);
  EXPECT_EQ(m.channels_per_send, 2);
  EXPECT_EQ(m.concurrent_peers, 32);
  EXPECT_EQ(m.batches, 1);
  EXPECT_DOUBLE_EQ(m.intra_bytes, 7 * 64 * MiB);
  EXPECT_DOUBLE_EQ(m.inter_bytes_per_node, 4 * GiB);
  EXPECT_DOUBLE_EQ(m.inter_gbps, 384.0);
  const double expected_s = 22.4e-6 + 4 * GiB / 384e9;
  const CollectiveEstimate e = estimate_collective(CollectiveKind::all_to_all, 1 * GiB, {16, 2}, c, p);
  EXPECT_EQ(e.algorithm, "P2P");
  EXPECT_EQ(e.protocol, "Simple");
  expect_rel_near(e.seconds, expected_s, 1e-9, "estimate");
  // busbw = algbw x 15/16 = (2^30 / 11.2 ms) x 15/16 ~ 89.9 GB/s: the node's 384 GB/s carries
  // half of every rank's buffer (8 of 16 peers), 48 GB/s per GPU x 16/8 x 15/16 = 90.
  expect_rel_near(e.bus_bandwidth_gbps, 1 * GiB / expected_s / 1e9 * 15.0 / 16.0, 1e-9, "busbw");
}

// A small message takes NCCL's LL protocol (P2P_LL_THRESHOLD 16384 x channels per peer) at
// half the link rate with LL's latencies: 8 ranks, 64 KiB buffer = 8 KiB per peer <= 16 x 16 KiB.
//   Latency: Ring/LL base 6.6 us + NVLink Ring/LL hop 0.6 us = 7.2 us.
//   Transfer: 7 x 8 KiB over 370.8 x 0.5 GB/s.
TEST(AllToAllCost, SmallMessagesUseLL) {
  const ClusterSpec c = h100_cluster(1);
  const NcclParams p = NcclParams::defaults_for(c);
  const CollectiveEstimate e = estimate_collective(CollectiveKind::all_to_all, 64 * KiB, {8, 1}, c, p);
  EXPECT_EQ(e.protocol, "LL");
  expect_rel_near(e.seconds, 7.2e-6 + 7 * 8 * KiB / (370.8e9 * 0.5), 1e-9, "LL all-to-all");
}

TEST(AllToAllCost, TrivialGroupsCostNothingAndNchannelsPerNetPeerIsRead) {
  const ClusterSpec c = h100_cluster(2);
  NcclParams p = NcclParams::defaults_for(c);
  EXPECT_EQ(estimate_collective(CollectiveKind::all_to_all, 1 * GiB, {1, 1}, c, p).seconds, 0);
  EXPECT_EQ(estimate_collective(CollectiveKind::all_to_all, 0, {16, 2}, c, p).seconds, 0);
  // NCCL_NCHANNELS_PER_NET_PEER=1 lowers the per-peer channels below the default 2.
  const nlohmann::json j = {{"nchannels_per_net_peer", 1}};
  JsonReader r(j, "x.json", "nccl");
  p = NcclParams::from_json(r, p);
  EXPECT_EQ(nccl_all_to_all_model(1 * GiB, {16, 2}, c, p).channels_per_peer, 1);
  const nlohmann::json back = p.to_json();
  EXPECT_EQ(back["nchannels_per_net_peer"], 1);
  const nlohmann::json bad = {{"nchannels_per_net_peer", 65}};
  JsonReader rb(bad, "x.json", "nccl");
  EXPECT_THROW(NcclParams::from_json(rb, p), InputError);
}

TEST(AllToAllNames, CollectiveAndOpKindNamesRoundTrip) {
  EXPECT_EQ(collective_name(CollectiveKind::all_to_all), "all_to_all");
  EXPECT_EQ(collective_kind_from_name("all_to_all"), CollectiveKind::all_to_all);
  EXPECT_EQ(to_string(OpKind::all_to_all), "all_to_all");
  EXPECT_EQ(to_string(Stream::all_to_all), "all_to_all");
  EXPECT_TRUE(is_collective(OpKind::all_to_all));
  EXPECT_EQ(collective_kind_of(OpKind::all_to_all), CollectiveKind::all_to_all);
}

// A two-op expert-parallel schedule: dispatch and combine on an 8-rank "ep" group.
Schedule ep_schedule() {
  Schedule s;
  s.name = "ep";
  s.world_size = 8;
  s.groups.push_back({"ep", 8, 1, 1});
  s.allocations.push_back({0, "dispatch receive buffer", static_cast<std::int64_t>(64 * MiB),
                           MemCategory::activation, Stream::all_to_all, false, false});
  s.allocations.push_back({1, "combine receive buffer", static_cast<std::int64_t>(64 * MiB),
                           MemCategory::activation, Stream::all_to_all, false, false});
  Op dispatch;
  dispatch.id = 0;
  dispatch.kind = OpKind::all_to_all;
  dispatch.stream = Stream::all_to_all;
  dispatch.name = "dispatch";
  dispatch.comm_bytes = 64 * MiB;
  dispatch.group = 0;
  dispatch.allocs = {0};
  Op combine = dispatch;
  combine.id = 1;
  combine.name = "combine";
  combine.allocs = {1};
  combine.frees = {0};
  combine.deps = {0};
  s.ops = {dispatch, combine};
  return s;
}

TEST(AllToAllSchedule, JsonRoundTripAndPricing) {
  const Schedule s = ep_schedule();
  const nlohmann::json j = schedule_to_json(s);
  EXPECT_EQ(j["ops"][0]["kind"], "all_to_all");
  EXPECT_EQ(j["ops"][0]["stream"], "all_to_all");
  const Schedule back = schedule_from_json(j, "ep.json");
  EXPECT_EQ(schedule_to_json(back), j);
  EXPECT_EQ(back.ops[1].kind, OpKind::all_to_all);
  // The cost model prices it as the all-to-all of its group.
  const ClusterSpec c = h100_cluster(1);
  const CostModel model(c, Calibration{}, models::DType::bf16);
  const double expected =
      estimate_collective(CollectiveKind::all_to_all, 64 * MiB, {8, 1}, c, Calibration{}.nccl).seconds;
  EXPECT_GT(expected, 0);
  EXPECT_DOUBLE_EQ(model.duration_seconds(back.ops[0], back), expected);
}

TEST(AllToAllSchedule, NeedsAProcessGroup) {
  nlohmann::json j = schedule_to_json(ep_schedule());
  j["ops"][0].erase("group");
  try {
    schedule_from_json(j, "ep.json");
    FAIL() << "accepted an all-to-all without a group";
  } catch (const InputError& e) {
    EXPECT_EQ(e.json_path(), "ops[0].group");
  }
}

}  // namespace
}  // namespace fsdpsim::planner
