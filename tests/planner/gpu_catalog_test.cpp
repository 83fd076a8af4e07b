// The GPU catalog (scenarios/hardware/gpus.json) and the cluster files (scenarios/clusters):
// every entry parses and names a source for each figure; and the collective model on the
// node kinds the 2026 parts brought in, worked by hand: an AMD MI300X xGMI mesh (RCCL's
// tables) and a PCIe-only L40S server (NCCL's PCIe path).
#include <gtest/gtest.h>

#include <functional>

#include <filesystem>
#include <set>
#include <string>

#include "models/json_input.h"
#include "planner/collectives.h"
#include "planner/scenario.h"
#include "synthetic.h"

namespace fsdpsim::planner {
namespace {

namespace fs = std::filesystem;

constexpr double KiB = 1024.0;
constexpr double MiB = 1024.0 * 1024.0;
constexpr double GiB = 1024.0 * 1024.0 * 1024.0;

const std::string kRoot = FSDPSIM_SOURCE_ROOT;

ClusterSpec load_cluster(const std::string& name) {
  const std::string file = kRoot + "/scenarios/clusters/" + name;
  return parse_cluster(load_json_file(file), file, "");
}

// ===================== the catalog =====================

TEST(GpuCatalog, EveryGpuParsesAndNamesASourceForEachFigure) {
  const std::string file = kRoot + "/scenarios/hardware/gpus.json";
  const nlohmann::json catalog = load_json_file(file);
  int gpus = 0;
  for (const auto& [name, entry] : catalog.items()) {
    if (name.rfind("_", 0) == 0) continue;
    ++gpus;
    SCOPED_TRACE(name);
    const GpuSpec g = parse_gpu(entry, name, file, name);
    EXPECT_GT(g.memory_bytes, 0);
    EXPECT_GT(g.sm_count, 0);
    EXPECT_GT(g.peak_flops.at("bf16"), 0);
    EXPECT_GT(g.hbm_bandwidth_bytes_per_second, 0);
    // Every figure of the entry has a non-empty source, and every source names a figure.
    for (const auto& [field, value] : entry.items()) {
      if (field == "sources" || field == "name") continue;
      ASSERT_TRUE(g.sources.count(field)) << field << " has no source";
      EXPECT_GT(g.sources.at(field).size(), 20u) << field << ": a source says where the figure comes from";
    }
    for (const auto& [field, text] : g.sources) EXPECT_TRUE(entry.contains(field)) << "source for no figure: " << field;
    // A GPU talks to its peers over NVLink or xGMI, never both.
    EXPECT_FALSE(g.nvlink_links > 0 && g.xgmi_links > 0);
  }
  EXPECT_GE(gpus, 14);  // 7 parts before 2026 + GB200, H100 PCIe, H100 NVL, MI300X, MI325X, L40S, A10G
}

// The A10G's peak is derived, not quoted (no NVIDIA or AWS document found gives a dense bf16
// figure): 80 SMs x 4 tensor cores x 128 FLOPs per clock (GA102 at GeForce's rate with FP32
// accumulation, karpathy/llm.c llmc/mfu.h AMPERE_CONSUMER: 80 TFLOPS / (336 x 1.86 GHz) = 128)
// x 1.710 GHz = 70.04 TFLOPS, shipped rounded to 70.0; TF32 is half the 16-bit rate.
TEST(GpuCatalog, TheA10GPeakIsSmsTimesTheGa102TensorRateTimesItsClock) {
  const std::string file = kRoot + "/scenarios/hardware/gpus.json";
  const nlohmann::json catalog = load_json_file(file);
  const GpuSpec g = parse_gpu(catalog.at("A10G-24GB"), "A10G-24GB", file, "A10G-24GB");
  const double per_tensor_core_per_clock = 80e12 / (336 * 1.86e9);
  EXPECT_NEAR(per_tensor_core_per_clock, 128.0, 0.01);
  EXPECT_EQ(g.sm_count, 80);
  EXPECT_NEAR(g.peak_flops.at("bf16"), 80 * 4 * 128 * 1.710e9, 0.05e12);
  EXPECT_DOUBLE_EQ(g.peak_flops.at("fp32"), g.peak_flops.at("bf16") / 2);
  EXPECT_DOUBLE_EQ(g.hbm_bandwidth_bytes_per_second, 600e9);
  EXPECT_EQ(g.arch, "ampere");
  EXPECT_EQ(g.peak_flops.count("fp8"), 0u);  // Ampere has no fp8 tensor cores
}

TEST(GpuCatalog, EveryClusterFileParsesAndSourcesItsLinks) {
  int clusters = 0;
  for (const auto& f : fs::directory_iterator(kRoot + "/scenarios/clusters")) {
    if (f.path().extension() != ".json") continue;
    ++clusters;
    SCOPED_TRACE(f.path().filename().string());
    const nlohmann::json json = load_json_file(f.path().string());
    const ClusterSpec c = parse_cluster(json, f.path().string(), "");
    EXPECT_GT(c.intra_bandwidth_gbps, 0);
    for (const char* block : {"intra_node", "inter_node"}) {
      if (json.contains(block)) {
        EXPECT_TRUE(c.sources.count(block)) << block << " has no source";
      }
    }
  }
  EXPECT_GE(clusters, 25);
}

TEST(GpuCatalog, AnXgmiNodeParsesAsAMeshAndRejectsWhatAMeshCannotBe) {
  const ClusterSpec c = load_cluster("mi300x-8gpu.json");
  EXPECT_EQ(c.intra_kind, IntraNodeKind::xgmi);
  EXPECT_EQ(c.gpu.xgmi_links, 7);
  EXPECT_EQ(c.gpu.sm_count, 304);  // compute units
  nlohmann::json json = load_json_file(kRoot + "/scenarios/clusters/mi300x-8gpu.json");
  // Without an intra_node block the GPU's xGMI links make the node a mesh.
  nlohmann::json implicit = json;
  implicit.erase("intra_node");
  const ClusterSpec ci = parse_cluster(implicit, "implicit.json", "");
  EXPECT_EQ(ci.intra_kind, IntraNodeKind::xgmi);
  EXPECT_EQ(ci.intra_bandwidth_gbps, 448);
  // Nine GPUs cannot be fully connected by seven links each.
  nlohmann::json nine = json;
  nine["gpus_per_node"] = 9;
  EXPECT_THROW(parse_cluster(nine, "nine.json", ""), InputError);
  // An MI300X node has no NVSwitch.
  nlohmann::json switched = json;
  switched["intra_node"]["kind"] = "nvswitch";
  try {
    parse_cluster(switched, "switched.json", "");
    FAIL() << "an NVSwitch node of MI300X parsed";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("intra_node.kind"), std::string::npos) << e.what();
  }
  // An NVIDIA GPU has no xGMI links to mesh.
  nlohmann::json nvidia = json;
  nvidia["gpu"] = "H100-SXM-80GB";
  EXPECT_THROW(parse_cluster(nvidia, "nvidia.json", ""), InputError);
}

// Impossible GPU figures are errors naming the field (the session-38 input audit): an SM of more
// than 100 dense bf16 TFLOP/s (sm_count 1 at an H100's peak, or a peak of 1e300 TFLOP/s) had
// reached the GEMM model as "GemmDevice: kernel floor and tile ramps exceed an 8192^3 GEMM's
// time" with no file; memory_mib 1e300 and power_limit_watts -1 were accepted.
TEST(GpuCatalog, ImpossibleFiguresNameTheirField) {
  auto error_of = [](const std::function<void(nlohmann::json&)>& edit) -> std::string {
    nlohmann::json j = fsdpsim::testing::cluster(1, 8);
    edit(j["gpu"]);
    try {
      parse_cluster(j, "c.json", "");
    } catch (const InputError& e) {
      return e.json_path();
    }
    return "accepted";
  };
  EXPECT_EQ(error_of([](nlohmann::json&) {}), "accepted");
  EXPECT_EQ(error_of([](nlohmann::json& g) { g["sm_count"] = 1; }), "gpu.peak_tflops.bf16");
  EXPECT_EQ(error_of([](nlohmann::json& g) { g["sm_count"] = 10; }), "accepted");  // 98.9 TFLOP/s an SM
  EXPECT_EQ(error_of([](nlohmann::json& g) { g["peak_tflops"]["bf16"] = 1e300; }), "gpu.peak_tflops.bf16");
  EXPECT_EQ(error_of([](nlohmann::json& g) { g["memory_mib"] = 1e300; }), "gpu.memory_mib");
  EXPECT_EQ(error_of([](nlohmann::json& g) { g["memory_mib"] = 1073741824; }), "accepted");  // 2^30 MiB
  EXPECT_EQ(error_of([](nlohmann::json& g) { g["power_limit_watts"] = -1; }), "gpu.power_limit_watts");
}

// ===================== AMD MI300X node: RCCL over xGMI =====================
//
// Hand-worked from RCCL's sources (ROCm/rccl@0cbce2a7): rome_models.cc rome_model_79 (8 GPUs,
// 7 xGMI links each, 28 ring channels, "tuning=5"); topo.h GFX94X_XGMI_WIDTH = 48 GB/s per
// link, so the GPU's total is 7 x 48 = 336 GB/s and each channel 336 / 28 = 12 GB/s;
// tuning.cc baseLat {LL 12, Simple 17} us, tuning_model_5 xGMI ring hop {LL 0.8, Simple 2.1} us,
// bwRatio ring {LL 0.08, Simple 1.0}.

TEST(CollectivesXgmi, Mi300xNodeUsesRcclTablesAndXgmiLinks) {
  const ClusterSpec c = load_cluster("mi300x-8gpu.json");
  const NcclParams p = NcclParams::defaults_for(c);
  EXPECT_EQ(p.library, "rccl");
  EXPECT_EQ(p.gpu_arch, "cdna3");
  EXPECT_EQ(p.intra_link, "xgmi");
  EXPECT_DOUBLE_EQ(p.intra_bandwidth_gbps, 7 * 48.0);
  EXPECT_FALSE(p.enable_ll128);
  EXPECT_FALSE(p.enable_nvls);
  const NcclGraph g = nccl_ring_graph({8, 1}, c, p);
  EXPECT_EQ(g.channels, 28);
  EXPECT_DOUBLE_EQ(g.bw_intra_gbps, 12.0);
  // Two GPUs of the node share one link: 4 channels x 12 GB/s.
  const NcclGraph pair = nccl_ring_graph({2, 1}, c, p);
  EXPECT_EQ(pair.channels, 4);
  EXPECT_DOUBLE_EQ(pair.channels * pair.bw_intra_gbps, 48.0);
}

TEST(CollectivesXgmi, Mi300xRingAllGatherBusBandwidthByHand) {
  const ClusterSpec c = load_cluster("mi300x-8gpu.json");
  const NcclParams p = NcclParams::defaults_for(c);
  // 1 GiB all-gather over the 8 GPUs, Ring/Simple: bus bandwidth 28 x 12 x 1.0 = 336 GB/s,
  // algorithm bandwidth 336 x 8/7 = 384 GB/s; latency 17 + 7 x 2.1 = 31.7 us.
  const double bytes = 1 * GiB;
  const double time_us = 31.7 + bytes / (1000.0 * 384.0);
  const CollectiveEstimate e = estimate_collective(CollectiveKind::all_gather, bytes, {8, 1}, c, p);
  EXPECT_EQ(e.algorithm, "Ring");
  EXPECT_EQ(e.protocol, "Simple");
  EXPECT_EQ(e.channels, 28);
  EXPECT_NEAR(e.seconds, time_us * 1e-6, 1e-9);
  EXPECT_NEAR(e.latency_seconds, 31.7e-6, 1e-12);
  // nccl-tests' busbw = algbw x 7/8: just under the 336 GB/s the links give RCCL.
  EXPECT_NEAR(e.bus_bandwidth_gbps, bytes / (time_us * 1e-6) / 1e9 * 7.0 / 8.0, 1e-6);
  EXPECT_NEAR(e.bus_bandwidth_gbps, 336.0, 4.0);
  // Small messages take LL: 12 + 7 x 0.8 = 17.6 us, bus 336 x 0.08 = 26.88 GB/s (alg 30.72).
  // LL and Simple cross where 17.6 + S/30720 = 31.7 + S/384000 (us, S in bytes): S = 470.8 kB.
  const CollectiveEstimate small = estimate_collective(CollectiveKind::all_gather, 256 * KiB, {8, 1}, c, p);
  EXPECT_EQ(small.protocol, "LL");
  EXPECT_NEAR(small.seconds, (17.6 + 256 * KiB / (1000.0 * 30.72)) * 1e-6, 1e-12);
  EXPECT_EQ(estimate_collective(CollectiveKind::all_gather, 1 * MiB, {8, 1}, c, p).protocol, "Simple");
}

TEST(CollectivesXgmi, Mi300xAllReduceHasNoTreeSimpleOnOneNode) {
  const ClusterSpec c = load_cluster("mi300x-8gpu.json");
  const NcclParams p = NcclParams::defaults_for(c);
  // RCCL tuning.cc skips Tree/Simple on a single gfx94x node; the ring takes 1 GiB:
  // 2 x 7 steps, algorithm bandwidth 336 x 8/14 = 192 GB/s, latency 17 + 14 x 2.1 = 46.4 us.
  for (const CollectiveEstimate& cand : collective_candidates(CollectiveKind::all_reduce, 1 * GiB, {8, 1}, c, p))
    EXPECT_FALSE(cand.algorithm == "Tree" && cand.protocol == "Simple");
  const CollectiveEstimate e = estimate_collective(CollectiveKind::all_reduce, 1 * GiB, {8, 1}, c, p);
  EXPECT_EQ(e.algorithm, "Ring");
  EXPECT_EQ(e.protocol, "Simple");
  EXPECT_NEAR(e.seconds, (46.4 + GiB / (1000.0 * 192.0)) * 1e-6, 1e-9);
}

// [RCCL's network hop] (planner/collectives.cpp) Across nodes a network step is priced as
// NCCL 2.28.3 prices it (hwLatencies[NET], Ring/Simple 14 us): RCCL's 320 us is a weight of its
// protocol choice. A 256 MiB all-gather over 64 MI300X nodes (512 ranks), Ring/Simple on 14
// channels x 24 GB/s = 336 GB/s: latency 17 + 448 intra-node steps x max(2.1 xGMI hop, 3 x 1 us
// net overhead) + 63 network steps x 14 = 2,243 us; transfer 2^28 B / (336 x 512/511 GB/s) =
// 797.4 us: 3,040.4 us (the session-36 audit's hand figure; 11,025 us on Ring/LL before, 3.6x an
// all-reduce of the same buffer).
TEST(CollectivesXgmi, Mi300xNetworkStepsArePricedAsTheFabricsNotAsRcclsChoiceWeight) {
  ClusterSpec c = load_cluster("mi300x-8gpu.json");
  c.nodes = 64;
  const NcclParams p = NcclParams::defaults_for(c);
  EXPECT_DOUBLE_EQ(p.net_latency_us[1][2], 14.0);
  const double bytes = 256 * MiB;
  const CollectiveEstimate e = estimate_collective(CollectiveKind::all_gather, bytes, {512, 64}, c, p);
  EXPECT_EQ(e.algorithm, "Ring");
  EXPECT_EQ(e.protocol, "Simple");
  EXPECT_EQ(e.channels, 14);
  EXPECT_NEAR(e.latency_seconds, 2243e-6, 1e-12);
  EXPECT_NEAR(e.seconds, (2243.0 + bytes / (1000.0 * 336.0 * 512.0 / 511.0)) * 1e-6, 1e-10);
}

TEST(CollectivesXgmi, NvidiaNodesKeepNcclsModel) {
  const NcclParams h = NcclParams::defaults_for(load_cluster("dgx-h100.json"));
  EXPECT_EQ(h.library, "nccl");
  EXPECT_EQ(h.intra_link, "nvlink");
  EXPECT_DOUBLE_EQ(h.base_latency_us[1][2], 8.4);  // NCCL's Ring/Simple base latency
}

// ===================== PCIe-only L40S server: NCCL's PCIe path =====================

TEST(CollectivesPcie, L40sNodeRingAllGatherByHand) {
  ClusterSpec c = load_cluster("l40s-8gpu-pcie.json");
  // Under one PCIe root (the shipped file's two sockets are the next test's).
  c.sockets = 1;
  c.cpu_link_gbps = 0;
  const NcclParams p = NcclParams::defaults_for(c);
  EXPECT_EQ(p.library, "nccl");
  EXPECT_EQ(p.intra_link, "pcie");
  EXPECT_EQ(p.gpu_arch, "ampere");  // Ada (sm89): NCCL's compCapIndex puts 8.x in the Ampere row
  EXPECT_FALSE(p.enable_ll128);     // LL128 only over NVLink
  EXPECT_FALSE(p.enable_nvls);
  // Ring search on a 24 GB/s PCIe link with NCCL's generic speed array {40, 30, 20, 18, 15,
  // 12, ...}: 20, 18 and 15 fit one channel; 12 fits two (2 x 12 = 24 = the link: stop); no
  // duplication below 25 GB/s; pass 2 finds no faster speed with two channels.
  const NcclGraph g = nccl_ring_graph({8, 1}, c, p);
  EXPECT_EQ(g.channels, 2);
  EXPECT_DOUBLE_EQ(g.bw_intra_gbps, 12.0);
  // 1 GiB all-gather, Ring/Simple: bus 24 GB/s, algorithm 24 x 8/7 GB/s; latency = base 8.4 +
  // 7 PCI hops x 5.7 = 48.3 us (NCCL tuning.cc baseLatencies, hwLatencies[NCCL_HW_PCI]).
  const double bytes = 1 * GiB;
  const double time_us = 48.3 + bytes / (1000.0 * 24.0 * 8.0 / 7.0);
  const CollectiveEstimate e = estimate_collective(CollectiveKind::all_gather, bytes, {8, 1}, c, p);
  EXPECT_EQ(e.algorithm, "Ring");
  EXPECT_EQ(e.protocol, "Simple");
  EXPECT_NEAR(e.seconds, time_us * 1e-6, 1e-9);
  EXPECT_NEAR(e.bus_bandwidth_gbps, 24.0, 0.1);
  // Small: LL at min(llMaxBw 87.7, 24 x 0.5) = 12 GB/s bus, latency 6.6 + 7 x 1.0 = 13.6 us.
  const CollectiveEstimate small = estimate_collective(CollectiveKind::all_gather, 4 * KiB, {8, 1}, c, p);
  EXPECT_EQ(small.protocol, "LL");
  EXPECT_NEAR(small.seconds, (13.6 + 4 * KiB / (1000.0 * 12.0 * 8.0 / 7.0)) * 1e-6, 1e-12);
}

// [PCIe across sockets] (planner/collectives.cpp) 8 H100 PCIe under two Sapphire Rapids
// sockets (the shipped h100-pcie-8gpu.json): a ring over the 8 crosses the CPUs' UPI link, which
// NCCL rates at 22 GB/s (topo.h SRP_QPI_BW), under the 48 GB/s Gen5 links. The ring search with
// Hopper's intra speeds {60, 50, 40, 30, 24, 20, 15, 12, 11, ...} from the first <= 22: 20 fits one
// channel, 15 and 12 one, 11 two (2 x 11 = 22: stop); no duplication below 25 GB/s. 1 GiB
// all-gather, Ring/Simple: 48.3 us (8.4 + 7 PCI hops x 5.7) + 2^30 B / (22 x 8/7 GB/s) = 42,753.6
// us (the session-36 audit's 42.7 ms; 19.6 ms at the PCIe link's 48 GB/s before). Four GPUs fit
// under one socket: their ring keeps the PCIe links.
TEST(CollectivesPcie, ARingAcrossTwoSocketsCrossesTheCpusLink) {
  const ClusterSpec c = load_cluster("h100-pcie-8gpu.json");
  ASSERT_EQ(c.sockets, 2);
  ASSERT_DOUBLE_EQ(c.cpu_link_gbps, 22.0);
  const NcclParams p = NcclParams::defaults_for(c);
  const NcclGraph g = nccl_ring_graph({8, 1}, c, p);
  EXPECT_EQ(g.channels, 2);
  EXPECT_DOUBLE_EQ(g.bw_intra_gbps, 11.0);
  const double bytes = 1 * GiB;
  const CollectiveEstimate e = estimate_collective(CollectiveKind::all_gather, bytes, {8, 1}, c, p);
  EXPECT_EQ(e.protocol, "Simple");
  EXPECT_NEAR(e.seconds, (48.3 + bytes / (1000.0 * 22.0 * 8.0 / 7.0)) * 1e-6, 1e-9);
  const NcclGraph half = nccl_ring_graph({4, 1}, c, p);
  EXPECT_GT(half.channels * half.bw_intra_gbps, 22.0);
}

}  // namespace
}  // namespace fsdpsim::planner
