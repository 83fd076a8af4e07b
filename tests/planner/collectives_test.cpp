// Tests of planner/collectives: NCCL's cost model, checked (a) against NCCL's formulas worked
// by hand, (b) against published bus bandwidths (tests/data/validation/public_collectives.csv, a copy of shared/validation),
// (c) on protocol choice, (d) on trivial groups, (e) on JSON input errors.
#include "planner/collectives.h"
#include "planner/published_collectives.h"

#include <gtest/gtest.h>

#include <cctype>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>
#include <sstream>

namespace fsdpsim::planner {
namespace {

constexpr double KiB = 1024.0;
constexpr double MiB = 1024.0 * 1024.0;
constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

// ---- hardware used by the tests (GPU figures from the vendors' datasheets) ----

GpuSpec hopper_gpu(const std::string& name) {
  GpuSpec g;
  g.name = name;
  // NVIDIA H100 / H200 SXM datasheets: 18 NVLink4 links, 900 GB/s bidirectional = 450 GB/s
  // per direction; NVLink SHARP through third-generation NVSwitch (HGX/DGX H100, HGX H200).
  g.nvlink_generation = "hopper";
  g.nvlink_links = 18;
  g.nvlink_bandwidth_gbps = 450;
  g.nvls = true;
  return g;
}

GpuSpec a100_gpu() {
  GpuSpec g;
  g.name = "A100-SXM-80GB";
  // NVIDIA A100 datasheet: 12 NVLink3 links, 600 GB/s bidirectional = 300 GB/s per direction;
  // no NVLink SHARP (second-generation NVSwitch).
  g.nvlink_generation = "ampere";
  g.nvlink_links = 12;
  g.nvlink_bandwidth_gbps = 300;
  g.nvls = false;
  return g;
}

GpuSpec b200_gpu() {
  GpuSpec g;
  g.name = "B200-SXM-180GB";
  // NVIDIA HGX B200 datasheet: NVLink5, 1.8 TB/s bidirectional per GPU = 900 GB/s per
  // direction over 18 links; NVLink SHARP in the fifth-generation NVSwitch.
  g.nvlink_generation = "blackwell";
  g.nvlink_links = 18;
  g.nvlink_bandwidth_gbps = 900;
  g.nvls = true;
  return g;
}

ClusterSpec make_cluster(const GpuSpec& gpu, int nodes, double nic_gbps = 50, int nics = 8) {
  ClusterSpec c;
  c.name = gpu.name + " x" + std::to_string(nodes);
  c.gpu = gpu;
  c.nodes = nodes;
  c.gpus_per_node = 8;
  c.intra_kind = IntraNodeKind::nvswitch;
  c.intra_bandwidth_gbps = gpu.nvlink_bandwidth_gbps;
  // 400 Gb/s InfiniBand (DGX H100 / HGX H200: 8 x ConnectX-7) or EFA (P6-B200: 8 x 400 Gb/s),
  // one NIC per GPU, rail-optimized.
  c.nic_bandwidth_gbps = nic_gbps;
  c.nics_per_node = nics;
  c.inter_latency_seconds = 5e-6;
  return c;
}

// NCCL_ALGO=Ring: the model's choice restricted to the ring, as nccl-tests runs with it.
NcclParams ring_only(const ClusterSpec& c) {
  NcclParams p = NcclParams::defaults_for(c);
  p.enable_tree = false;
  p.enable_nvls = false;
  return p;
}

void expect_rel_near(double actual, double expected, double rel, const std::string& what) {
  EXPECT_NEAR(actual, expected, std::abs(expected) * rel) << what;
}

// ===================== (a) NCCL's formulas worked by hand =====================
//
// Hopper node (H100/H200 SXM), as NCCL sees it:
//   NVLink per GPU = 18 links x 20.6 GB/s (topo.h SM90_NVLINK_BW) = 370.8 GB/s.
// Ring graph, one node (search.cc, sm90SpeedArrayIntra = 60, 50, 40, 30, 24, ...):
//   60 -> floor(370.8/60) = 6 channels (360);  50 -> 7 (350);  40 -> 9 (360, a tie keeps
//   the first);  30 -> 12 (360, tie);  24/60 = .4 < .49 stops.  Best 6 x 60.
//   ncclTopoDupChannels (bw 60 >= 50): 12 channels x 30 GB/s.  Pass 2: 40 fits only 9 < 12.
//   => busBw = 12 x 30 = 360 GB/s.
// Ring graph, >= 2 nodes (sm90SpeedArrayInter = 48, 45, 42, 40, 30, 24, 22, ...); the
// GPU->NIC path is min(NIC 50, GPU PCIe Gen5 x16 = 48) = 48 GB/s:
//   48 -> NVLink floor(370.8/48) = 7, NICs 8 x floor(48/48) = 8 => 7 (336);
//   45 -> min(8, 8) = 8 (360);  42 -> 8 (336);  40 -> 8 (320);  30 -> 8 (240);
//   24 -> min(15, 16) = 15 (360, tie);  22/45 = .489 < .49 stops.  Best 8 x 45.
//   No dup (compute capability > 80, bw 45 < 50 and 8 > 4 channels).  => busBw = 360.
// Ring latency (tuning.cc): base(Simple) 8.4 + (nsteps - nInter) x max(NVLink hop 3.4,
// netOverhead 1.0 x 3) + nInter x NET hop 14.0; algBw = busBw x nRanks / nsteps.

// nccl-tests' bus factors (src/all_gather.cu AllGatherGetBw, reduce_scatter.cu, all_reduce.cu,
// alltoall.cu AlltoAllGetBw, broadcast.cu): (n-1)/n, (n-1)/n, 2(n-1)/n, (n-1)/n, 1. The one
// definition the cost model's busbw and calibrate's line fits share.
TEST(CollectivesHandWorked, BusFactorsAreNcclTests) {
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::all_gather, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::reduce_scatter, 4), 3.0 / 4);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::all_reduce, 8), 14.0 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::all_to_all, 8), 7.0 / 8);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::broadcast, 8), 1.0);
  EXPECT_DOUBLE_EQ(bus_factor(CollectiveKind::all_gather, 1), 0);
}

TEST(CollectivesHandWorked, RingGraphsOfAHopperNode) {
  const ClusterSpec c = make_cluster(hopper_gpu("H100-SXM-80GB"), 16);
  const NcclParams p = NcclParams::defaults_for(c);
  EXPECT_NEAR(p.intra_bandwidth_gbps, 370.8, 1e-9);
  const NcclGraph one = nccl_ring_graph({8, 1}, c, p);
  EXPECT_EQ(one.channels, 12);
  EXPECT_DOUBLE_EQ(one.bw_intra_gbps, 30.0);
  for (int nodes : {2, 16}) {
    const NcclGraph g = nccl_ring_graph({8 * nodes, nodes}, c, p);
    EXPECT_EQ(g.channels, 8) << nodes << " nodes";
    EXPECT_DOUBLE_EQ(g.bw_inter_gbps, 45.0) << nodes << " nodes";
  }
}

// [Stated node bandwidth] (planner/collectives.cpp): the cluster's intra-node figure, a
// datasheet figure per GPU and direction, caps NCCL's link figure where it states less than the
// GPU's links carry. Hopper: 25 GB/s per link on the datasheet, 20.6 in NCCL (topo.h).
//   450 GB/s = 18 x 25: the 18 links', 18 x 20.6 = 370.8 (unchanged, bit for bit);
//   200 GB/s (an H800's 8 links): 200 x 20.6 / 25 = 164.8;
//   900 GB/s: never more than the links, 370.8.
// Ring graph of one node at 164.8 (search.cc, sm90SpeedArrayIntra 60, 50, 40, 30, ...):
//   60 -> floor(164.8/60) = 2 channels (120); 50 -> 3 (150); 40 -> 4 (160); 30 -> 5 (150);
//   24/60 = .4 < .49 stops. Best 4 x 40; ncclTopoDupChannels doubles it (40 >= 25, and on
//   cc > 80 it declines only past 4 channels): 8 x 20 = 160 GB/s, against 12 x 30 = 360 at 450.
TEST(CollectivesHandWorked, StatedNodeBandwidthCapsTheLinks) {
  ClusterSpec c = make_cluster(hopper_gpu("H100-SXM-80GB"), 1);
  c.intra_bandwidth_gbps = 450;
  EXPECT_EQ(NcclParams::defaults_for(c).intra_bandwidth_gbps, 18 * 20.6);
  c.intra_bandwidth_gbps = 900;
  EXPECT_EQ(NcclParams::defaults_for(c).intra_bandwidth_gbps, 18 * 20.6);
  c.intra_bandwidth_gbps = 200;
  const NcclParams p = NcclParams::defaults_for(c);
  EXPECT_NEAR(p.intra_bandwidth_gbps, 164.8, 1e-9);
  EXPECT_NE(p.sources.at("intra_bandwidth_gbps").find("capped by cluster.intra_bandwidth_gbps"), std::string::npos);
  const NcclGraph one = nccl_ring_graph({8, 1}, c, p);
  EXPECT_EQ(one.channels, 8);
  EXPECT_DOUBLE_EQ(one.bw_intra_gbps, 20.0);
  // And the all-gather of 1 GiB is the slower for it: busBw 160 against 360.
  ClusterSpec full = c;
  full.intra_bandwidth_gbps = 450;
  const double bytes = 1 * GiB;
  const double slow = estimate_collective(CollectiveKind::all_gather, bytes, {8, 1}, c, ring_only(c)).seconds;
  const double fast = estimate_collective(CollectiveKind::all_gather, bytes, {8, 1}, full, ring_only(full)).seconds;
  EXPECT_GT(slow, 2 * fast);
}

TEST(CollectivesHandWorked, RingOneNodeEightGpus) {
  const ClusterSpec c = make_cluster(hopper_gpu("H100-SXM-80GB"), 1);
  const NcclParams p = ring_only(c);
  const double bytes = 1 * GiB;
  // All-gather / reduce-scatter: nsteps = 7, no inter steps.
  //   latency = 8.4 + 7 x 3.4 = 32.2 us; algBw = 360 x 8/7 = 411.428... GB/s
  //   time = 32.2 + 2^30 / (1000 x 411.428...) us
  const double ag_us = 32.2 + bytes / (1000.0 * (360.0 * 8.0 / 7.0));
  for (auto kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter}) {
    const CollectiveEstimate e = estimate_collective(kind, bytes, {8, 1}, c, p);
    EXPECT_EQ(e.algorithm, "Ring");
    EXPECT_EQ(e.protocol, "Simple");
    EXPECT_EQ(e.channels, 12);
    expect_rel_near(e.seconds, ag_us * 1e-6, 1e-9, collective_name(kind));
    expect_rel_near(e.latency_seconds, 32.2e-6, 1e-9, collective_name(kind));
  }
  // All-reduce: nsteps = 2 x 7 = 14.
  //   latency = 8.4 + 14 x 3.4 = 56.0 us; algBw = 360 x 8/14 = 205.714... GB/s
  const double ar_us = 56.0 + bytes / (1000.0 * (360.0 * 8.0 / 14.0));
  const CollectiveEstimate ar = estimate_collective(CollectiveKind::all_reduce, bytes, {8, 1}, c, p);
  EXPECT_EQ(ar.algorithm, "Ring");
  EXPECT_EQ(ar.protocol, "Simple");
  expect_rel_near(ar.seconds, ar_us * 1e-6, 1e-9, "all_reduce");
  // nccl-tests' busbw of that run: algbw x 2 x 7/8.
  expect_rel_near(ar.bus_bandwidth_gbps, bytes / (ar_us * 1e-6) / 1e9 * 14.0 / 8.0, 1e-9, "busbw");
  // Broadcast: nsteps = nRanks, ratio 1; one hop of latency (sameChannels): 8.4 + 3.4 us.
  const double bc_us = 8.4 + 3.4 + bytes / (1000.0 * 360.0);
  const CollectiveEstimate bc = estimate_collective(CollectiveKind::broadcast, bytes, {8, 1}, c, p);
  EXPECT_EQ(bc.algorithm, "Ring");
  expect_rel_near(bc.seconds, bc_us * 1e-6, 1e-9, "broadcast");
}

TEST(CollectivesHandWorked, RingTwoNodes) {
  const ClusterSpec c = make_cluster(hopper_gpu("H100-SXM-80GB"), 2);
  const NcclParams p = ring_only(c);
  const double bytes = 1 * GiB;
  // 16 ranks; nNodes <= 2 reads bwIntra = 45 -> busBw 8 x 45 = 360.
  // All-gather / reduce-scatter: nsteps 15, inter steps 1:
  //   latency = 8.4 + 14 x max(3.4, 3.0) + 1 x 14.0 = 70.0 us; algBw = 360 x 16/15 = 384
  const double ag_us = 70.0 + bytes / (1000.0 * 384.0);
  for (auto kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter}) {
    const CollectiveEstimate e = estimate_collective(kind, bytes, {16, 2}, c, p);
    EXPECT_EQ(e.algorithm, "Ring");
    EXPECT_EQ(e.protocol, "Simple");
    EXPECT_EQ(e.channels, 8);
    expect_rel_near(e.seconds, ag_us * 1e-6, 1e-9, collective_name(kind));
  }
  // All-reduce: nsteps 30, inter steps 2 x (2-1) = 2:
  //   latency = 8.4 + 28 x 3.4 + 2 x 14.0 = 131.6 us, x 1.4 (ring plateau, multi-node
  //   Simple all-reduce, compute capability >= 80) = 184.24 us; algBw = 360 x 16/30 = 192
  const double ar_us = 131.6 * 1.4 + bytes / (1000.0 * 192.0);
  const CollectiveEstimate ar = estimate_collective(CollectiveKind::all_reduce, bytes, {16, 2}, c, p);
  EXPECT_EQ(ar.algorithm, "Ring");
  EXPECT_EQ(ar.protocol, "Simple");
  expect_rel_near(ar.seconds, ar_us * 1e-6, 1e-9, "all_reduce");
  expect_rel_near(ar.latency_seconds, 184.24e-6, 1e-9, "all_reduce latency");
}

// A NIC of any speed past the GPU's PCIe path is that path (min(NIC, 48 GB/s) above): 1e12 and
// 1e300 GB/s price as 50 does. The link budget's channel count overflowed an int past ~2e9 GB/s,
// and the search fell back to one 0.1 GB/s channel (session 32: a 582 s step).
TEST(CollectivesHandWorked, ANicFasterThanItsPciePathIsThatPath) {
  const GpuSpec h100 = hopper_gpu("H100-SXM-80GB");
  const ClusterSpec base = make_cluster(h100, 2);
  const NcclParams p = ring_only(base);
  const CollectiveEstimate expected = estimate_collective(CollectiveKind::all_gather, 1 * GiB, {16, 2}, base, p);
  for (double nic : {1e12, 1e300}) {
    const ClusterSpec c = make_cluster(h100, 2, nic);
    const CollectiveEstimate e = estimate_collective(CollectiveKind::all_gather, 1 * GiB, {16, 2}, c, ring_only(c));
    EXPECT_EQ(e.channels, expected.channels) << nic;
    EXPECT_DOUBLE_EQ(e.seconds, expected.seconds) << nic;
  }
}

TEST(CollectivesHandWorked, RingSixteenNodes) {
  const ClusterSpec c = make_cluster(hopper_gpu("H100-SXM-80GB"), 16);
  const NcclParams p = ring_only(c);
  const double bytes = 1 * GiB;
  // 128 ranks; nNodes > 2 reads bwInter = 45 -> busBw 360.
  // All-gather / reduce-scatter: nsteps 127, inter steps 15:
  //   latency = 8.4 + 112 x 3.4 + 15 x 14.0 = 599.2 us; algBw = 360 x 128/127
  const double ag_us = 599.2 + bytes / (1000.0 * (360.0 * 128.0 / 127.0));
  for (auto kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter}) {
    const CollectiveEstimate e = estimate_collective(kind, bytes, {128, 16}, c, p);
    EXPECT_EQ(e.algorithm, "Ring");
    EXPECT_EQ(e.protocol, "Simple");
    expect_rel_near(e.seconds, ag_us * 1e-6, 1e-9, collective_name(kind));
  }
  // All-reduce: nsteps 254, inter steps 30:
  //   latency = (8.4 + 224 x 3.4 + 30 x 14.0) x 1.4 = 1190.0 x 1.4 = 1666.0 us;
  //   algBw = 360 x 128/254
  const double ar_us = 1190.0 * 1.4 + bytes / (1000.0 * (360.0 * 128.0 / 254.0));
  const CollectiveEstimate ar = estimate_collective(CollectiveKind::all_reduce, bytes, {128, 16}, c, p);
  EXPECT_EQ(ar.algorithm, "Ring");
  EXPECT_EQ(ar.protocol, "Simple");
  expect_rel_near(ar.seconds, ar_us * 1e-6, 1e-9, "all_reduce");
}

TEST(CollectivesHandWorked, TreeWinsAllReduceOnSixteenNodesAt256MiB) {
  const ClusterSpec c = make_cluster(hopper_gpu("H100-SXM-80GB"), 16);
  const NcclParams p = NcclParams::defaults_for(c);
  const double bytes = 256 * MiB;
  // Tree/Simple: busBw = min(360 x .92, 8 ch x perChMaxTreeBw[Hopper][>=4 nodes] 36.0) = 288,
  //   x .5 -> 144 GB/s; treeCorrectionFactor[Simple][log2(2^28/64) = 22] = .9 -> 129.6.
  //   latency = 8.4 + 2 x ((8-1) x 4.0 + log2(16) x 14.0) = 176.4 us.
  const double tree_us = 176.4 + bytes / (1000.0 * 129.6);
  // Ring/Simple for comparison: 1666.0 + 2^28 / (1000 x 360 x 128/254) us = 3145.7 us.
  const CollectiveEstimate e = estimate_collective(CollectiveKind::all_reduce, bytes, {128, 16}, c, p);
  EXPECT_EQ(e.algorithm, "Tree");
  EXPECT_EQ(e.protocol, "Simple");
  expect_rel_near(e.seconds, tree_us * 1e-6, 1e-9, "tree all_reduce");
}

TEST(CollectivesHandWorked, NvlsAllReduceOnAHopperNode) {
  const ClusterSpec c = make_cluster(hopper_gpu("H200-SXM-141GB"), 1);
  const NcclParams p = NcclParams::defaults_for(c);
  // NVLS graph (search.cc ncclTopoSearchTryNvls: the head GPU of a channel moves 2 x bw,
  // the others 1 x; 8 channels, one head each): (8 + 1) x s <= 370.8. The first speed tried
  // is 50 (60 x 8 > 370.8 x 8/7), 9 x 50 = 450 does not fit, 9 x 40 = 360 does: bwIntra 40.
  // Pass 2 raises bwInter while < 2 x bwIntra: 50, then 60 (top of the array).
  const NcclGraph g = nccl_nvls_graph({8, 1}, c, p);
  EXPECT_EQ(g.channels, 8);
  EXPECT_DOUBLE_EQ(g.bw_intra_gbps, 40.0);
  EXPECT_DOUBLE_EQ(g.bw_inter_gbps, 60.0);
  // busBw per channel = min(40 x nvlsEfficiency .85 x 7/8 x 2 (all-reduce), 60) = 59.5;
  // busBw = 8 x 59.5 = 476; algBw = 476 x 8/14 = 272; latency = NVLink NVLS hop 25 us.
  const double bytes = 16 * GiB;
  const double us = 25.0 + bytes / (1000.0 * 272.0);
  const CollectiveEstimate e = estimate_collective(CollectiveKind::all_reduce, bytes, {8, 1}, c, p);
  EXPECT_EQ(e.algorithm, "NVLS");
  EXPECT_EQ(e.protocol, "Simple");
  expect_rel_near(e.seconds, us * 1e-6, 1e-9, "nvls all_reduce");
}

TEST(CollectivesHandWorked, NvlsBeforeNccl228) {
  // NCCL 2.23-2.27 (the CSV's runs used 2.27.7): NVLS all-reduce bandwidth =
  // nChannels x min(bwIntra, bwInter) x 5/6, no nvlsEfficiency.
  //   H200: 8 x min(40, 60) = 320 -> algBw 320 x 5/6 = 266.67 GB/s (nccl-tests busbw 466.7)
  //   B200: NVLink 18 x 40.1 = 721.8; NVLS graph (sm100 speeds 90, 80, ...): 9 x 90 > 721.8,
  //         9 x 80 = 720 fits -> bwIntra 80, bwInter 90 -> 8 x 80 x 5/6 = 533.3 GB/s.
  const double bytes = 16 * GiB;
  struct Case {
    GpuSpec gpu;
    double alg_bw;
  };
  for (const Case& k : {Case{hopper_gpu("H200-SXM-141GB"), 320.0 * 5 / 6}, Case{b200_gpu(), 640.0 * 5 / 6}}) {
    const ClusterSpec c = make_cluster(k.gpu, 1);
    const NcclParams p = NcclParams::defaults_for(c, "2.27.7");
    const CollectiveEstimate e = estimate_collective(CollectiveKind::all_reduce, bytes, {8, 1}, c, p);
    EXPECT_EQ(e.algorithm, "NVLS") << k.gpu.name;
    expect_rel_near(e.seconds, (25.0 + bytes / (1000.0 * k.alg_bw)) * 1e-6, 1e-9, k.gpu.name);
  }
  // With 2.28's nvlsEfficiency the B200 figure is min(80 x .74 x 7/8 x 2, 90) x 8 = 720 busBw
  // -> algBw 720 x 8/14.
  const ClusterSpec b = make_cluster(b200_gpu(), 1);
  const CollectiveEstimate e28 =
      estimate_collective(CollectiveKind::all_reduce, bytes, {8, 1}, b, NcclParams::defaults_for(b));
  expect_rel_near(e28.seconds, (25.0 + bytes / (1000.0 * 720.0 * 8 / 14)) * 1e-6, 1e-9, "B200 2.28");
  EXPECT_THROW(NcclParams::defaults_for(b, "2.18.1"), std::invalid_argument);
}

// ===================== algorithm choice stated by the CSV =====================

TEST(CollectivesChoice, H200AllReduceSwitchesFromRingLLToNvlsBetween1And2MiB) {
  // public_collectives.csv rows 1-20 (NCCL 2.27.7 on 8 x H200): "Ring/LL up to 1MiB,
  // NVLS/SIMPLE from 2MiB".
  //   1 MiB: Ring/LL 6.6 + 14 x 0.6 = 15.0 us + 2^20 / (1000 x min(141, 360 x .5) x 8/14)
  //          = 28.0 us;  NVLS 25 + 2^20 / (1000 x 272) = 28.9 us.
  //   2 MiB: Ring/LL 41.0 us;  NVLS 32.7 us.
  const ClusterSpec c = make_cluster(hopper_gpu("H200-SXM-141GB"), 1);
  const NcclParams p = NcclParams::defaults_for(c);
  const CollectiveEstimate a = estimate_collective(CollectiveKind::all_reduce, 1 * MiB, {8, 1}, c, p);
  EXPECT_EQ(a.algorithm + "/" + a.protocol, "Ring/LL");
  const CollectiveEstimate b = estimate_collective(CollectiveKind::all_reduce, 2 * MiB, {8, 1}, c, p);
  EXPECT_EQ(b.algorithm + "/" + b.protocol, "NVLS/Simple");
}

TEST(CollectivesChoice, FsdpAllGatherAndReduceScatterStayOnRing) {
  // Rows 23, 24 (nccl-tests, 8 x H200, 16 GiB): all-gather and reduce-scatter ran Ring; the
  // CSV notes "FSDP all-gather/reduce-scatter do not get NVLS". NCCL 2.28's table does offer
  // NVLS for them on one node, but at min(40 x .85 x 7/8 x 7/8, 60) x 8 = 208 GB/s, which
  // loses to the ring's 360 x 8/7 = 411 GB/s.
  for (const GpuSpec& gpu : {hopper_gpu("H200-SXM-141GB"), b200_gpu()}) {
    const ClusterSpec c = make_cluster(gpu, 1);
    const NcclParams p = NcclParams::defaults_for(c);
    for (auto kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter}) {
      for (double bytes : {64 * KiB, 4 * MiB, 256 * MiB, 16 * GiB}) {
        const CollectiveEstimate e = estimate_collective(kind, bytes, {8, 1}, c, p);
        EXPECT_EQ(e.algorithm, "Ring") << gpu.name << " " << collective_name(kind) << " " << bytes;
      }
      bool nvls_offered = false;
      for (const auto& cand : collective_candidates(kind, 16 * GiB, {8, 1}, c, p))
        nvls_offered |= cand.algorithm == "NVLS";
      EXPECT_TRUE(nvls_offered) << "NCCL 2.28 tables list NVLS for one-node " << collective_name(kind);
    }
  }
  // Where NVLS is absent (A100, row 25 "no NVLS on A100") it is never offered.
  const ClusterSpec a100 = make_cluster(a100_gpu(), 1);
  for (const auto& cand :
       collective_candidates(CollectiveKind::all_reduce, 1 * GiB, {8, 1}, a100, NcclParams::defaults_for(a100)))
    EXPECT_NE(cand.algorithm, "NVLS");
  // Nor across nodes (NVLS needs CollNet there).
  const ClusterSpec h2 = make_cluster(hopper_gpu("H200-SXM-141GB"), 2);
  for (const auto& cand :
       collective_candidates(CollectiveKind::all_reduce, 1 * GiB, {16, 2}, h2, NcclParams::defaults_for(h2)))
    EXPECT_NE(cand.algorithm, "NVLS");
}

// ===================== (c) protocol choice =====================

TEST(CollectivesProtocol, SmallMessagesPickLLLargePickSimple) {
  const ClusterSpec c = make_cluster(hopper_gpu("H100-SXM-80GB"), 2);
  const NcclParams p = NcclParams::defaults_for(c);
  struct Case {
    CollectiveKind kind;
    CollectiveGroup group;
  };
  for (const Case& k : {Case{CollectiveKind::all_gather, {8, 1}}, Case{CollectiveKind::reduce_scatter, {8, 1}},
                        Case{CollectiveKind::all_gather, {16, 2}}, Case{CollectiveKind::all_reduce, {16, 2}}}) {
    const std::string what = collective_name(k.kind) + " over " + std::to_string(k.group.ranks);
    EXPECT_EQ(estimate_collective(k.kind, 4 * KiB, k.group, c, p).protocol, "LL") << what;
    EXPECT_EQ(estimate_collective(k.kind, 4 * GiB, k.group, c, p).protocol, "Simple") << what;
  }
  // In between, LL128 wins on one Hopper node: all-gather of 8 MiB,
  //   LL 10.8 + 52.1 = 62.9 us, LL128 27.3 + 22.2 = 49.5 us, Simple 32.2 + 20.4 = 52.6 us.
  EXPECT_EQ(estimate_collective(CollectiveKind::all_gather, 8 * MiB, {8, 1}, c, p).protocol, "LL128");
  // Without NVLink (PCIe node) NCCL leaves LL128 off by default.
  ClusterSpec pcie = c;
  pcie.intra_kind = IntraNodeKind::pcie;
  pcie.intra_bandwidth_gbps = 24;
  pcie.gpu.nvls = false;
  const NcclParams pp = NcclParams::defaults_for(pcie);
  EXPECT_FALSE(pp.enable_ll128);
  for (double bytes : {4 * KiB, 1 * MiB, 64 * MiB, 4 * GiB})
    EXPECT_NE(estimate_collective(CollectiveKind::all_gather, bytes, {8, 1}, pcie, pp).protocol, "LL128");
}

// ===================== (d) trivial groups =====================

TEST(CollectivesTrivial, OneRankGroupCostsNothing) {
  const ClusterSpec c = make_cluster(hopper_gpu("H100-SXM-80GB"), 4);
  const NcclParams p = NcclParams::defaults_for(c);
  for (auto kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter, CollectiveKind::all_reduce,
                    CollectiveKind::broadcast}) {
    const CollectiveEstimate e = estimate_collective(kind, 1 * GiB, {1, 1}, c, p);
    EXPECT_EQ(e.seconds, 0.0) << collective_name(kind);
    EXPECT_EQ(e.latency_seconds, 0.0);
    EXPECT_EQ(e.algorithm, "none");
    EXPECT_EQ(estimate_collective(kind, 0, {8, 1}, c, p).seconds, 0.0);
    EXPECT_GT(estimate_collective(kind, 1, {8, 1}, c, p).seconds, 0.0);
  }
  EXPECT_THROW(estimate_collective(CollectiveKind::all_gather, 1 * MiB, {12, 8}, c, p), std::invalid_argument);
  EXPECT_THROW(estimate_collective(CollectiveKind::all_gather, 1 * MiB, {32, 2}, c, p), std::invalid_argument);
  EXPECT_THROW(estimate_collective(CollectiveKind::all_gather, -1, {8, 1}, c, p), std::invalid_argument);
}

// ===================== (e) JSON =====================

NcclParams parse(const std::string& text, const NcclParams& base) {
  const nlohmann::json j = nlohmann::json::parse(text);
  JsonReader r(j, "scenario.json", "nccl");
  return NcclParams::from_json(r, base);
}

std::string error_path(const std::string& text) {
  try {
    parse(text, NcclParams{});
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "scenario.json");
    return e.json_path();
  }
  ADD_FAILURE() << "no InputError for " << text;
  return "";
}

TEST(CollectivesJson, RoundTripAndOverrides) {
  const ClusterSpec c = make_cluster(b200_gpu(), 1);
  const NcclParams d = NcclParams::defaults_for(c);
  const nlohmann::json j = d.to_json();
  JsonReader r(j, "x.json", "nccl");
  EXPECT_EQ(NcclParams::from_json(r).to_json(), j);
  EXPECT_EQ(j["gpu_arch"], "blackwell");
  EXPECT_NEAR(j["intra_bandwidth_gbps"].get<double>(), 18 * 40.1, 1e-9);
  EXPECT_TRUE(j["sources"].contains("intra_bandwidth_gbps"));
  const NcclParams o = parse(R"({"algorithms": {"nvls": false}, "hw_latency_us": {"net": {"ring": [3, 5, 20]}},
                                 "bandwidth_efficiency": 0.9})",
                             d);
  EXPECT_FALSE(o.enable_nvls);
  EXPECT_DOUBLE_EQ(o.net_latency_us[1][2], 20.0);
  EXPECT_DOUBLE_EQ(o.net_latency_us[0][2], d.net_latency_us[0][2]);
  EXPECT_DOUBLE_EQ(o.bandwidth_efficiency, 0.9);
  EXPECT_NE(estimate_collective(CollectiveKind::all_reduce, 1 * GiB, {8, 1}, c, o).algorithm, "NVLS");
}

TEST(CollectivesJson, RejectsUnknownFieldsAndNegativeNumbers) {
  EXPECT_EQ(error_path(R"({"net_overhead": 1})"), "nccl.net_overhead");
  EXPECT_EQ(error_path(R"({"algorithms": {"collnet": true}})"), "nccl.algorithms.collnet");
  EXPECT_EQ(error_path(R"({"hw_latency_us": {"infiniband": {}}})"), "nccl.hw_latency_us.infiniband");
  EXPECT_EQ(error_path(R"({"net_overhead_us": -1})"), "nccl.net_overhead_us");
  EXPECT_EQ(error_path(R"({"intra_bandwidth_gbps": -370.8})"), "nccl.intra_bandwidth_gbps");
  EXPECT_EQ(error_path(R"({"nics_per_node": -8})"), "nccl.nics_per_node");
  EXPECT_EQ(error_path(R"({"hw_latency_us": {"net": {"ring": [2.7, -4, 14]}}})"), "nccl.hw_latency_us.net.ring[1]");
  EXPECT_EQ(error_path(R"({"ll_max_bandwidth_gbps": [1, 2]})"), "nccl.ll_max_bandwidth_gbps");
  EXPECT_EQ(error_path(R"({"speed_array_intra_gbps": [40, 60]})"), "nccl.speed_array_intra_gbps[1]");
  EXPECT_EQ(error_path(R"({"bandwidth_efficiency": 0})"), "nccl.bandwidth_efficiency");
  EXPECT_EQ(error_path(R"({"gpu_arch": "rubin"})"), "nccl.gpu_arch");
  EXPECT_EQ(error_path(R"({"nvls_efficiency": "high"})"), "nccl.nvls_efficiency");
  EXPECT_EQ(error_path(R"({"nccl_version": "3.1"})"), "nccl.nccl_version");
  EXPECT_EQ(parse(R"({"nccl_version": "2.27.7"})", NcclParams{}).nccl_version, "2.27.7");
}

// ===================== (b) published bus bandwidths =====================

// A published row as the test runs it: the row (planner/published_collectives.h, the reader
// the `collectives` command uses) on the test's own hardware (the datasheet figures above).
struct PublishedCase {
  PublishedCollective row;
  std::string setup;
  ClusterSpec cluster;
  CollectiveGroup group;
};

std::string size_label(double b) {
  char buf[32];
  if (b >= GiB) std::snprintf(buf, sizeof buf, "%gGiB", b / GiB);
  else if (b >= MiB) std::snprintf(buf, sizeof buf, "%gMiB", b / MiB);
  else std::snprintf(buf, sizeof buf, "%gKiB", b / KiB);
  return buf;
}

std::vector<PublishedCase> load_published(const std::string& path) {
  std::vector<PublishedCase> out;
  for (const PublishedCollective& row : load_published_collectives(path)) {
    PublishedCase pc;
    pc.row = row;
    GpuSpec spec = row.gpu.find("A100") != std::string::npos   ? a100_gpu()
                   : row.gpu.find("B200") != std::string::npos ? b200_gpu()
                   : row.gpu.find("H100") != std::string::npos ? hopper_gpu("H100-SXM-80GB")
                                                               : hopper_gpu("H200-SXM-141GB");
    // P6-B200: 8 x 400 Gb/s EFA v4 per node, 50 GB/s per GPU (the row's inter_node column).
    pc.cluster = make_cluster(spec, row.nodes, 50, 8);
    pc.group = {row.ranks, row.nodes};
    pc.setup = spec.name.substr(0, 4) + " " + std::to_string(row.ranks) + " GPU";
    out.push_back(pc);
  }
  return out;
}

TEST(CollectivesPublished, LargeMessageBusBandwidthWithin10Percent) {
  // A copy of shared/validation/public_collectives.csv (each row cites its source) ships in
  // tests/data so the test runs on every clone.
  const std::string path = std::string(FSDPSIM_SOURCE_ROOT) + "/tests/data/validation/public_collectives.csv";
  ASSERT_TRUE(std::filesystem::exists(path)) << path << " not found";
  const std::vector<PublishedCase> cases = load_published(path);
  ASSERT_GE(cases.size(), 60u);
  // Rows at >= 256 MiB the model misses; they are printed, not asserted (docs/collectives.md):
  //  53: 4 x 8 B200 over EFA at 256 MiB, still in the ramp (busbw 229 vs 327 at 512 MiB):
  //      NCCL's latency constants (IB hops) cannot produce the ~0.9 ms it implies.
  //  62, 64: 8 x B200 at 8 and 16 GiB jump 13% above the 4 GiB row (741 -> 839 GB/s) on the
  //      same node; the model's NVLS bandwidth is size-independent (8 x 90 = 720 GB/s).
  const std::set<std::string> known_misses = {"53", "62", "64"};
  int asserted = 0;
  std::printf("| row | setup | collective | size | published busbw | model busbw | error | model algo | "
              "NCCL 2.27.7 model busbw (error) |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (const PublishedCase& pc : cases) {
    NcclParams p = NcclParams::defaults_for(pc.cluster);
    if (pc.row.nvls_off) p.enable_nvls = false;  // NCCL_NVLS_ENABLE=0 / NCCL_ALGO=Ring in the source
    const CollectiveEstimate e = estimate_collective(pc.row.kind, pc.row.bytes, pc.group, pc.cluster, p);
    const double err = (e.bus_bandwidth_gbps - pc.row.busbw_gbps) / pc.row.busbw_gbps;
    NcclParams p27 = NcclParams::defaults_for(pc.cluster, "2.27.7");  // informational column
    if (pc.row.nvls_off) p27.enable_nvls = false;
    const CollectiveEstimate e27 = estimate_collective(pc.row.kind, pc.row.bytes, pc.group, pc.cluster, p27);
    const bool large = pc.row.bytes >= 256 * MiB;
    const bool checked = large && !known_misses.count(pc.row.row_id);
    std::printf("| %s | %s x%d node | %s | %s | %.2f | %.1f | %+.1f%%%s | %s/%s | %.1f (%+.1f%%) |\n",
                pc.row.row_id.c_str(), pc.setup.c_str(), pc.group.nodes, collective_name(pc.row.kind).c_str(),
                size_label(pc.row.bytes).c_str(), pc.row.busbw_gbps, e.bus_bandwidth_gbps, 100 * err,
                checked ? "" : large ? " (known miss)" : " (small)", e.algorithm.c_str(), e.protocol.c_str(),
                e27.bus_bandwidth_gbps, 100 * (e27.bus_bandwidth_gbps - pc.row.busbw_gbps) / pc.row.busbw_gbps);
    if (!checked) continue;
    ++asserted;
    EXPECT_LE(std::abs(err), 0.10) << "row " << pc.row.row_id << ": model " << e.bus_bandwidth_gbps
                                   << " GB/s vs published " << pc.row.busbw_gbps << " GB/s (" << e.algorithm << "/"
                                   << e.protocol << ")";
  }
  EXPECT_GE(asserted, 25);
}

}  // namespace
}  // namespace fsdpsim::planner
