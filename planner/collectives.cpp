// NCCL's cost model (see collectives.h and docs/collectives.md).
//
// Source of every constant: NVIDIA/nccl 2.28.3 (read at github.com/zhanglin496/nccl-2.28.3-1,
// a copy of the 2.28.3-1 release), files src/graph/tuning.cc (ncclTunerConstantsDefaults,
// nvlsEfficiency, ncclTopoTuneModel, treeCorrectionFactor, ncclTopoGetAlgoTime),
// src/graph/search.cc (speed arrays, ncclTopoCompute, ncclTopoDupChannels,
// ncclTopoSearchTryNvls), src/graph/topo.h (SMxx_NVLINK_BW), src/graph/topo.cc
// (kvDictPciGen: PCIe link = width x GT/s / 80). The numbers were written down from reading
// that code; no code was copied.
#include "planner/collectives.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <sstream>
#include <stdexcept>

namespace fsdpsim::planner {

namespace {

constexpr int kTree = static_cast<int>(NcclAlgorithm::tree);
constexpr int kRing = static_cast<int>(NcclAlgorithm::ring);
constexpr int kNvls = static_cast<int>(NcclAlgorithm::nvls);
constexpr int kLL = static_cast<int>(NcclProtocol::ll);
constexpr int kLL128 = static_cast<int>(NcclProtocol::ll128);
constexpr int kSimple = static_cast<int>(NcclProtocol::simple);

const char* const kSrcTuning = "NCCL 2.28.3 src/graph/tuning.cc";
const char* const kSrcSearch = "NCCL 2.28.3 src/graph/search.cc";
const char* const kSrcEnqueue = "NCCL 2.28.3 src/enqueue.cc";

// ---- architecture-keyed tables (tuning.cc ncclTunerConstantsDefaults, nvlsEfficiency;
// ---- search.cc speed arrays; topo.h NVLink per-link bandwidth) ----

// cdna3 (AMD MI300X / MI325X, gfx942) has no row in NCCL's architecture-keyed tables: its
// constants are RCCL's (apply_rccl_tables), so the kXxx[arch] tables below are never read for it.
enum class Arch { volta = 0, ampere = 1, hopper = 2, blackwell = 3, cdna3 = 4 };

Arch arch_from_name(const std::string& s) {
  if (s == "volta") return Arch::volta;
  if (s == "ampere") return Arch::ampere;
  if (s == "blackwell") return Arch::blackwell;
  if (s == "cdna3") return Arch::cdna3;
  return Arch::hopper;
}

std::string arch_name(Arch a) {
  switch (a) {
    case Arch::volta: return "volta";
    case Arch::ampere: return "ampere";
    case Arch::hopper: return "hopper";
    case Arch::blackwell: return "blackwell";
    case Arch::cdna3: return "cdna3";
  }
  return "hopper";
}

bool contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

// The GPU architecture NCCL would see (its compute capability). From the NVLink generation
// when the catalog gives one, else from the GPU's name.
std::pair<Arch, std::string> derive_arch(const GpuSpec& gpu) {
  const std::string& g = gpu.nvlink_generation;
  if (g == "volta" || g == "ampere" || g == "hopper" || g == "blackwell")
    return {arch_from_name(g), "gpu.nvlink_generation \"" + g + "\""};
  const std::string& n = gpu.name;
  if (gpu.xgmi_links > 0 || contains(n, "MI300") || contains(n, "MI325"))
    return {Arch::cdna3, "GPU \"" + n + "\" (AMD CDNA3, xGMI links: RCCL)"};
  if (contains(n, "B200") || contains(n, "B100") || contains(n, "B300"))
    return {Arch::blackwell, "GPU name \"" + n + "\""};
  if (contains(n, "H100") || contains(n, "H200") || contains(n, "H800") || contains(n, "H20"))
    return {Arch::hopper, "GPU name \"" + n + "\""};
  if (contains(n, "A100") || contains(n, "A800") || contains(n, "A10") || contains(n, "A30") ||
      contains(n, "A40"))
    return {Arch::ampere, "GPU name \"" + n + "\""};
  // Ada (compute capability 8.9): NCCL's tables index it with Ampere (compCapIndex: >= 80).
  if (contains(n, "L40") || contains(n, "L4-") || contains(n, "RTX"))
    return {Arch::ampere, "GPU name \"" + n + "\" (Ada, sm89: NCCL's Ampere rows)"};
  if (contains(n, "V100")) return {Arch::volta, "GPU name \"" + n + "\""};
  return {Arch::hopper, "unknown GPU \"" + n + "\": Hopper tables assumed"};
}

// topo.h: SM70/SM80 20.0, SM90 20.6, SM100 40.1 GB/s per NVLink link (ncclTopoNVLinkBw);
// RCCL topo.h GFX94X_XGMI_WIDTH 48.0 GB/s per xGMI link of a gfx94x GPU (ncclTopoXGMISpeed).
double nccl_nvlink_bw_per_link(Arch a) {
  switch (a) {
    case Arch::volta: return 20.0;
    case Arch::ampere: return 20.0;
    case Arch::hopper: return 20.6;
    case Arch::blackwell: return 40.1;
    case Arch::cdna3: return 48.0;
  }
  return 20.6;
}

// Datasheet NVLink rate per link and direction, only to infer a link count when the catalog
// lacks one: NVLink2/3/4 25 GB/s, NVLink5 50 GB/s (NVIDIA V100/A100/H100/B200 datasheets).
// xGMI on MI300X: 64 GB/s per link and direction (AMD MI300X data sheet: 128 GB/s
// bidirectional per Infinity Fabric link).
double spec_nvlink_bw_per_link(Arch a) {
  return a == Arch::cdna3 ? 64.0 : a == Arch::blackwell ? 50.0 : 25.0;
}

// A GPU's own PCIe link as NCCL rates it (topo.cc: width x GT/s-per-lane / 80): Gen3 x16 12,
// Gen4 x16 24 (A100), Gen5 x16 48 (H100/H200/B200, MI300X: PCIe Gen5 x16 per its data sheet) GB/s.
double nccl_gpu_pcie_bw(Arch a) {
  switch (a) {
    case Arch::volta: return 12.0;
    case Arch::ampere: return 24.0;
    case Arch::hopper: return 48.0;
    case Arch::blackwell: return 48.0;
    case Arch::cdna3: return 48.0;
  }
  return 48.0;
}

const std::vector<double>& speed_array_intra(Arch a) {
  static const std::vector<double> generic = {40.0, 30.0, 20.0, 18.0, 15.0, 12.0, 10.0,
                                              9.0,  7.0,  6.0,  5.0,  4.0,  3.0};
  static const std::vector<double> sm90 = {60.0, 50.0, 40.0, 30.0, 24.0, 20.0,
                                           15.0, 12.0, 11.0, 6.0,  3.0};
  static const std::vector<double> sm100 = {90.0, 80.0, 70.0, 60.0, 50.0, 40.0,
                                            30.0, 24.0, 20.0, 19.0, 18.0};
  return a == Arch::blackwell ? sm100 : a == Arch::hopper ? sm90 : generic;
}

const std::vector<double>& speed_array_inter(Arch a) {
  static const std::vector<double> generic = {48.0, 30.0, 28.0, 24.0, 20.0, 18.0, 15.0,
                                              12.0, 10.0, 9.0,  7.0,  6.0,  5.0,  4.0,
                                              3.0,  2.4,  1.2,  0.24, 0.12};
  static const std::vector<double> sm90 = {48.0, 45.0, 42.0, 40.0, 30.0, 24.0,
                                           22.0, 20.0, 17.5, 15.0, 12.0, 6.0,
                                           3.0,  2.4,  1.2,  0.24, 0.12};
  static const std::vector<double> sm100 = {96.0, 48.0, 45.1, 42.0, 40.0, 30.0,
                                            24.0, 22.0, 20.0, 17.5, 15.0, 12.0,
                                            6.0,  3.0,  2.4,  1.2,  0.24, 0.12};
  return a == Arch::blackwell ? sm100 : a == Arch::hopper ? sm90 : generic;
}

// llMaxBws rows: Volta/Intel, Ampere/AMD, Hopper, Blackwell. Single node reads the GPU's row,
// multi-node the CPU vendor's row (index1 in ncclTopoTuneModel).
constexpr std::array<NcclScaleRow, 4> kLlMaxBws = {{{39.0, 39.0, 20.4},
                                                   {87.7, 22.5, 19.0},
                                                   {141.0, 45.0, 35.0},
                                                   {2 * 141.0, 2 * 45.0, 2 * 35.0}}};
constexpr std::array<NcclScaleRow, 4> kPerChMaxRingLL128 = {{{20.0, 20.0, 20.0},
                                                            {20.0, 20.0, 20.0},
                                                            {36.7, 36.7, 36.7},
                                                            {2 * 36.7, 2 * 36.7, 2 * 36.7}}};
constexpr std::array<NcclScaleRow, 4> kPerChMaxTreeLL128 = {{{20.0, 20.0, 20.0},
                                                            {20.0, 20.0, 20.0},
                                                            {36.7, 36.7, 29.0},
                                                            {55.6, 31.67, 20.0}}};
constexpr std::array<NcclScaleRow, 4> kPerChMaxTree = {{{26.5, 18.5, 10.0},
                                                       {24.0, 23.6, 17.8},
                                                       {38.7, 41.4, 36.0},
                                                       {70.0, 42.8, 24.0}}};
constexpr std::array<double, 4> kNvlsEfficiency = {0.0, 0.0, 0.85, 0.74};
// NCCL 2.25-2.27 (before tuning.cc moved to ncclTunerConstants in 2.28) gave Blackwell twice
// Hopper's per-channel caps: {2*36.7 x3}, {2*36.7, 2*36.7, 2*29.0}, {2*38.7, 2*41.4, 2*36.0}.
constexpr NcclScaleRow kPerChMaxTreeLL128Blackwell227 = {2 * 36.7, 2 * 36.7, 2 * 29.0};
constexpr NcclScaleRow kPerChMaxTreeBlackwell227 = {2 * 38.7, 2 * 41.4, 2 * 36.0};

// "2.28.3" -> {2, 28}; nullopt when it does not parse.
std::optional<std::pair<int, int>> parse_version(const std::string& v) {
  int major = 0, minor = 0;
  char dot = 0;
  std::istringstream in(v);
  if (!(in >> major >> dot >> minor) || dot != '.') return std::nullopt;
  return std::make_pair(major, minor);
}

// NCCL 2.28 replaced the NVLS bandwidth formula (nvlsEfficiency); earlier releases use
// min(bwIntra, bwInter) with a 5/6 bus->algorithm ratio.
bool nvls_efficiency_model(const std::string& version) {
  const auto v = parse_version(version);
  return !v || v->first > 2 || (v->first == 2 && v->second >= 28);
}

void apply_arch_tables(NcclParams& p, Arch a, const std::string& why) {
  const int i = static_cast<int>(a);
  p.gpu_arch = arch_name(a);
  const NcclScaleRow& cpu_row = kLlMaxBws[p.cpu_vendor == "amd" ? 1 : 0];
  p.ll_max_bandwidth_gbps = {kLlMaxBws[i][0], cpu_row[1], cpu_row[2]};
  p.per_channel_max_ring_ll128_gbps = kPerChMaxRingLL128[i];
  p.per_channel_max_tree_ll128_gbps = kPerChMaxTreeLL128[i];
  p.per_channel_max_tree_gbps = kPerChMaxTree[i];
  const bool v228 = nvls_efficiency_model(p.nccl_version);
  if (a == Arch::blackwell && !v228) {
    p.per_channel_max_tree_ll128_gbps = kPerChMaxTreeLL128Blackwell227;
    p.per_channel_max_tree_gbps = kPerChMaxTreeBlackwell227;
  }
  p.nvls_efficiency = v228 ? kNvlsEfficiency[i] : 0.0;
  p.speed_array_intra_gbps = speed_array_intra(a);
  p.speed_array_inter_gbps = speed_array_inter(a);
  // ncclTopoGetAlgoTime: minCompCap < 80 ? 1.9 : 1.4.
  p.ring_plateau_factor = a == Arch::volta ? 1.9 : 1.4;
  p.net_overhead_us = p.cpu_vendor == "amd" ? 2.0 : 1.0;

  const std::string arch = arch_name(a);
  p.sources["gpu_arch"] = arch + " (from " + why + ")";
  p.sources["ll_max_bandwidth_gbps"] =
      std::string(kSrcTuning) + " llMaxBws: 1 node from the " + arch + " row, 2 / >=4 nodes from the " +
      (p.cpu_vendor == "amd" ? "AMD" : "Intel") + " CPU row";
  p.sources["per_channel_max_ring_ll128_gbps"] =
      std::string(kSrcTuning) + " perChMaxRingLL128Bws, " + arch + " row";
  p.sources["per_channel_max_tree_ll128_gbps"] =
      std::string(kSrcTuning) + " perChMaxTreeLL128Bws, " + arch + " row";
  p.sources["per_channel_max_tree_gbps"] =
      std::string(kSrcTuning) + " perChMaxTreeBws, " + arch + " row";
  p.sources["nvls_efficiency"] = v228 ? std::string(kSrcTuning) + " nvlsEfficiency, " + arch
                                      : "unused before NCCL 2.28 (NVLS bandwidth = min(bwIntra, bwInter))";
  if (a == Arch::blackwell && !v228) {
    p.sources["per_channel_max_tree_ll128_gbps"] = "NCCL 2.25-2.27 tuning.cc: Blackwell = 2 x Hopper row";
    p.sources["per_channel_max_tree_gbps"] = "NCCL 2.25-2.27 tuning.cc: Blackwell = 2 x Hopper row";
  }
  p.sources["speed_array_intra_gbps"] =
      std::string(kSrcSearch) + (a == Arch::blackwell ? " sm100SpeedArrayIntra"
                                 : a == Arch::hopper  ? " sm90SpeedArrayIntra"
                                                      : " speedArrayIntra");
  p.sources["speed_array_inter_gbps"] =
      std::string(kSrcSearch) + (a == Arch::blackwell ? " sm100SpeedArrayInter"
                                 : a == Arch::hopper  ? " sm90SpeedArrayInter"
                                                      : " speedArrayInter");
  p.sources["ring_plateau_factor"] =
      std::string(kSrcTuning) + " ncclTopoGetAlgoTime: 'plateau effect of ring', minCompCap < 80 ? 1.9 : 1.4";
  p.sources["net_overhead_us"] = std::string(kSrcTuning) +
                                 " getNetOverhead: 1 us (Intel x86, ARM), 2 us (AMD x86); x3 for Simple";
}

// RCCL's constants for an MI300-class node (gfx942). Source: ROCm/rccl @0cbce2a7 (2024-10-24),
// src/graph/tuning.cc (baseLat, tuning_model_5) and src/graph/rome_models.cc (rome_model_79:
// 8 GPUs, 7 xGMI links each, fully connected, options "tuning=5"; rome_model_81, the same node
// with 8 NICs, also "tuning=5").
const char* const kSrcRccl = "ROCm/rccl@0cbce2a7 src/graph/tuning.cc";

void apply_rccl_tables(NcclParams& p, const std::string& why) {
  p.library = "rccl";
  p.gpu_arch = "cdna3";
  // baseLat: Tree and Ring alike { LL 12, LL128 12, Simple 17 } us; NVLS 0.
  p.base_latency_us = {{{12.0, 12.0, 17.0}, {12.0, 12.0, 17.0}, {0.0, 0.0, 0.0}}};
  // tuning_model_5.hwLat: NVLINK (RCCL's xGMI links are LINK_NVL), PCI, NET.
  p.nvlink_latency_us = {{{0.9, 0.0, 2.3}, {0.8, 0.0, 2.1}, {0.0, 0.0, 0.0}}};
  p.pcie_latency_us = {{{2.2, 2.2, 5.7}, {2.2, 2.2, 5.7}, {0.0, 0.0, 0.0}}};
  // [RCCL's network hop] net_latency_us stays NCCL 2.28.3's (NcclParams()): RCCL's own
  // tuning_model_5.hwLat[NET] (Tree 10.5 / - / 25, Ring 9.5 / - / 320 us) is a weight of its
  // protocol choice, paired with its per-size ringCorrectionFactor (Simple x0.1 below 512 MiB
  // across nodes): taken as a time, 320 us a network step priced a 256 MiB all-gather over 64
  // MI300X nodes at 11.0 ms on Ring/LL, 3.6x an all-reduce of the same buffer (the session-36
  // audit). A network hop is the fabric's, so it is priced as NCCL prices it.
  // tuning_model_5.bwRatio [2 nodes or fewer / more than 2 nodes]: Tree, Ring x LL, LL128, Simple.
  p.rccl_bandwidth_ratio[0] = {{{0.06, 0.0, 0.11}, {0.08, 0.0, 1.00}, {0.0, 0.0, 0.0}}};
  p.rccl_bandwidth_ratio[1] = {{{0.06, 0.0, 0.59}, {0.08, 0.0, 1.00}, {0.0, 0.0, 0.0}}};
  // RCCL's per-size corrections (tuning_model_5.treeCorrectionFactor / ringCorrectionFactor)
  // are not applied: they weight RCCL's protocol choice (e.g. Simple ring x0.1 below 512 MiB
  // across nodes) and would price a 64 MiB two-node all-gather at a tenth of its links.
  for (auto& row : p.tree_correction) row.clear();
  p.ring_plateau_factor = 1.0;  // ncclTopoGetAlgoTime's ring plateau is NVIDIA-only (#else branch)
  p.enable_ll128 = false;       // RCCL enables LL128 by default only on gfx90a
  p.enable_nvls = false;        // no NVLink SHARP
  p.speed_array_intra_gbps = speed_array_intra(Arch::cdna3);
  p.speed_array_inter_gbps = speed_array_inter(Arch::cdna3);
  p.net_overhead_us = p.cpu_vendor == "amd" ? 2.0 : 1.0;

  p.sources["library"] = std::string("rccl (from ") + why + ")";
  p.sources["gpu_arch"] = "cdna3 (from " + why + ")";
  p.sources["base_latency_us"] = std::string(kSrcRccl) + " baseLat";
  p.sources["nvlink_latency_us"] = std::string(kSrcRccl) +
                                   " tuning_model_5.hwLat[NVLINK] (xGMI hops; rome_models.cc rome_model_79 'tuning=5')";
  p.sources["pcie_latency_us"] = std::string(kSrcRccl) + " tuning_model_5.hwLat[PCI]";
  p.sources["net_latency_us"] = std::string(kSrcTuning) +
                               " hwLatencies[NCCL_HW_NET]: a network hop is the fabric's (RCCL's tuning_model_5.hwLat[NET], "
                               "320 us for Ring/Simple, weighs its protocol choice with its ringCorrectionFactor; "
                               "[RCCL's network hop], docs/collectives.md)";
  p.sources["rccl_bandwidth_ratio"] = std::string(kSrcRccl) + " tuning_model_5.bwRatio";
  p.sources["tree_correction"] =
      "none: RCCL's per-size correction factors are protocol-selection weights, not times (docs/collectives.md)";
  p.sources["ring_plateau_factor"] = std::string(kSrcRccl) + " ncclTopoGetAlgoTime: no ring plateau under HIP";
  p.sources["enable_ll128"] = std::string(kSrcRccl) + ": LL128 on by default only on gfx90a (ENABLE_LL128)";
  p.sources["speed_array_intra_gbps"] =
      "NCCL 2.28.3 search.cc speedArrayIntra (unused on one xGMI node: RCCL's ring model is fixed)";
  p.sources["speed_array_inter_gbps"] =
      "NCCL 2.28.3 search.cc speedArrayInter, assumed for RCCL's multi-node rings (rome_model_81 not modelled)";
  p.sources["xgmi_channels_per_link"] =
      "ROCm/rccl@0cbce2a7 src/graph/rome_models.cc rome_model_79: 28 rings over 56 directed xGMI links, "
      "each link in 4 of them";
  for (const char* k : {"ll_max_bandwidth_gbps", "per_channel_max_ring_ll128_gbps", "per_channel_max_tree_ll128_gbps",
                        "per_channel_max_tree_gbps", "nvls_efficiency"})
    p.sources[k] = "unused by RCCL (NCCL-only refinement, #else branch of tuning.cc)";
}

// ---- hardware the graph model works on ----

struct Hw {
  bool nvlink = true;    // intra-node link kind (NVLink latencies, LL128 rule); xGMI counts as NVLink
  int mesh_links = 0;    // xGMI mesh: links per GPU (each to one peer); 0 = switched or PCIe
  double intra = 0;      // per GPU per direction
  double nic = 0;        // per NIC per direction
  int nics = 0;          // per node
  double pcie = 0;       // GPU's PCIe link
  Arch arch = Arch::hopper;
  int sockets = 1;       // PCIe: CPU sockets the GPUs hang under
  double cpu_link = 0;   // PCIe: the CPUs' link
  // [PCIe across sockets] A ring over more of a PCIe node's GPUs than one socket holds crosses
  // the CPUs' link (both directions of the ring once), which bounds every channel together:
  // NCCL's path to a GPU under the other CPU is the SYS link (topo.h SRP_QPI_BW and kin).
  double intra_for(int ranks_per_node, int gpus_per_node) const {
    if (nvlink || mesh_links > 0 || sockets <= 1 || cpu_link <= 0) return intra;
    return ranks_per_node > gpus_per_node / sockets ? std::min(intra, cpu_link) : intra;
  }
};

// [Stated node bandwidth] NCCL rates a GPU's NVLink (or xGMI) by its link count times its own
// per-link figure (topo.h ncclTopoNVLinkBw), which already counts the protocol's overhead. The
// cluster file's intra-node bandwidth is a datasheet figure per GPU and direction (DGX H100: 18
// links x 25 GB/s = 450). Where it states less than the GPU's links carry (an H800's 8 links, a
// node wired with fewer, a what-if), it is read as that many datasheet links' worth and caps
// NCCL's figure at the same rate per datasheet GB/s: 200 GB/s on Hopper gives 8 x 20.6 = 164.8
// GB/s. It never raises the figure past the GPU's links. Every shipped cluster states exactly
// links x datasheet rate, so their figures are the links' (the audit of session 30 found the
// stated figure ignored: an NVSwitch node at 5 GB/s priced as at 450).
// The comparison is made in datasheet GB/s, where shipped figures are exact (450 = 18 x 25), so
// a stated figure equal to the links' gives the links' NCCL figure bit for bit.
constexpr const char* kStatedCapNote =
    ", capped by cluster.intra_bandwidth_gbps read as datasheet links ([Stated node bandwidth])";

bool stated_below_links(int links, const ClusterSpec& c, Arch a) {
  return c.intra_bandwidth_gbps > 0 && c.intra_bandwidth_gbps < links * spec_nvlink_bw_per_link(a);
}

double stated_node_cap(int links, const ClusterSpec& c, Arch a) {
  if (stated_below_links(links, c, a))
    return c.intra_bandwidth_gbps * nccl_nvlink_bw_per_link(a) / spec_nvlink_bw_per_link(a);
  return links * nccl_nvlink_bw_per_link(a);
}

Hw resolve_hw(const NcclParams& p, const ClusterSpec& c) {
  Hw hw;
  const Arch cluster_arch = derive_arch(c.gpu).first;
  hw.arch = p.gpu_arch.empty() ? cluster_arch : arch_from_name(p.gpu_arch);
  const bool mesh = p.intra_link.empty() ? c.intra_kind == IntraNodeKind::xgmi : p.intra_link == "xgmi";
  if (!p.intra_link.empty())
    hw.nvlink = p.intra_link != "pcie";
  else
    hw.nvlink = c.intra_kind != IntraNodeKind::pcie;
  if (mesh) hw.mesh_links = c.gpu.xgmi_links > 0 ? c.gpu.xgmi_links : std::max(1, c.gpus_per_node - 1);
  hw.intra = p.intra_bandwidth_gbps;
  if (hw.intra <= 0) {
    if (mesh) {
      hw.intra = c.gpu.xgmi_links > 0 ? stated_node_cap(c.gpu.xgmi_links, c, cluster_arch) : c.intra_bandwidth_gbps;
    } else if (hw.nvlink) {
      int links = c.gpu.nvlink_links;
      if (links <= 0 && c.gpu.nvlink_bandwidth_gbps > 0)
        links = static_cast<int>(std::lround(c.gpu.nvlink_bandwidth_gbps /
                                             spec_nvlink_bw_per_link(cluster_arch)));
      hw.intra = links > 0 ? stated_node_cap(links, c, cluster_arch) : c.intra_bandwidth_gbps;
    } else {
      hw.intra = c.intra_bandwidth_gbps;
    }
  }
  hw.sockets = c.sockets;
  hw.cpu_link = c.cpu_link_gbps;
  hw.nic = p.nic_bandwidth_gbps > 0 ? p.nic_bandwidth_gbps : c.nic_bandwidth_gbps;
  hw.nics = p.nics_per_node > 0 ? p.nics_per_node : c.nics_per_node;
  hw.pcie = p.gpu_pcie_bandwidth_gbps;
  if (hw.pcie <= 0) hw.pcie = hw.nvlink ? nccl_gpu_pcie_bw(cluster_arch) : c.intra_bandwidth_gbps;
  return hw;
}

void check_group(const CollectiveGroup& g, const ClusterSpec& c) {
  if (g.ranks < 1 || g.nodes < 1)
    throw std::invalid_argument("collective group needs ranks >= 1 and nodes >= 1, got ranks=" +
                                std::to_string(g.ranks) + " nodes=" + std::to_string(g.nodes));
  if (g.ranks % g.nodes != 0)
    throw std::invalid_argument("collective group: ranks (" + std::to_string(g.ranks) +
                                ") must spread evenly over nodes (" + std::to_string(g.nodes) + ")");
  if (c.gpus_per_node > 0 && g.ranks / g.nodes > c.gpus_per_node)
    throw std::invalid_argument("collective group: " + std::to_string(g.ranks / g.nodes) +
                                " ranks per node, but the cluster has " +
                                std::to_string(c.gpus_per_node) + " GPUs per node");
}

bool cluster_is_pcie(const ClusterSpec& c) { return c.intra_kind == IntraNodeKind::pcie; }

constexpr double kEps = 1e-6;  // search.cc rounds link budgets to 1e-3 (SUB_ROUND)

int floor_div(double capacity, double per_channel) {
  if (per_channel <= 0) return 0;
  // How many channels a link's budget fits, past any channel count NCCL uses (MAXCHANNELS 64):
  // a budget of 1e12 GB/s made the quotient overflow an int, and the search fell back to one
  // 0.1 GB/s channel (a 582 s step).
  constexpr double kMoreThanAnyChannelCount = 1 << 20;
  return static_cast<int>(std::min(std::floor(capacity / per_channel + kEps), kMoreThanAnyChannelCount));
}

// Channels a ring (or tree) search fits at per-channel bandwidth s (search.cc followPath on
// each link): every channel crosses each GPU's intra-node link once per direction, and when
// the group spans nodes it enters and leaves each node through one NIC (one GPU->NIC PCIe
// path per direction; PXN lets a GPU reach another GPU's NIC, so the budgets are per node).
int ring_channels_at(double s, int ppn, int nodes, const Hw& hw, int max_channels) {
  int ch = max_channels;
  if (ppn >= 2) ch = std::min(ch, floor_div(hw.intra, s));
  if (nodes > 1) {
    const int nic_ch = std::max(hw.nics, 1) * floor_div(hw.nic, s);
    const int pcie_ch = ppn * floor_div(hw.pcie, s);
    ch = std::min(ch, std::min(nic_ch, pcie_ch));
  }
  return std::max(ch, 0);
}

// RCCL's ring graph on one xGMI node (rome_models.cc rome_model_79 for 8 MI300X): fixed rings
// that use every directed link equally, `channels_per_link` rings per link; parseGraph sets
// each channel's bandwidth to the GPU's total link bandwidth / nChannels. A group of fewer
// GPUs reaches its ppn-1 peers over ppn-1 of the links (assumed: same rings per link).
NcclGraph xgmi_mesh_ring_graph(int ppn, const Hw& hw, const NcclParams& params) {
  const int links = std::min(ppn - 1, hw.mesh_links);
  // RCCL lets gfx94x use all of MAXCHANNELS (connect.cc), twice NCCL's ring cap.
  const int channels = std::max(1, std::min(params.max_ring_channels * 2, links * params.xgmi_channels_per_link));
  const double per_link = hw.intra / hw.mesh_links;
  const double bw = links * per_link / channels;
  return {channels, bw, bw};
}

// Highest NVLS channel count k with every GPU head of one channel (search.cc
// ncclTopoSearchTryNvls: the head moves 2x the channel bandwidth to and from the NVSwitch,
// the others 1x): (k + 1) * s <= intra.
int nvls_channels_at(double s, const Hw& hw, int max_channels) {
  return std::min(max_channels, floor_div(hw.intra, s) - 1);
}

int log2i(double x) {
  if (x < 1) return -1;
  return static_cast<int>(std::floor(std::log2(x) + 1e-12));
}

const NcclTable& hw_latency_table(const NcclParams& p, bool nvlink) {
  return nvlink ? p.nvlink_latency_us : p.pcie_latency_us;
}

bool algo_enabled(const NcclParams& p, int a) {
  return a == kTree ? p.enable_tree : a == kRing ? p.enable_ring : p.enable_nvls;
}
bool proto_enabled(const NcclParams& p, int pr) {
  return pr == kLL ? p.enable_ll : pr == kLL128 ? p.enable_ll128 : p.enable_simple;
}

CollectiveEstimate zero_estimate() {
  CollectiveEstimate e;
  e.algorithm = "none";
  e.protocol = "none";
  return e;
}

}  // namespace

double bus_factor(CollectiveKind kind, int n) {
  switch (kind) {
    case CollectiveKind::all_gather:
    case CollectiveKind::reduce_scatter:
    case CollectiveKind::all_to_all: return static_cast<double>(n - 1) / n;  // nccl-tests AlltoAllGetBw
    case CollectiveKind::all_reduce: return 2.0 * (n - 1) / n;
    case CollectiveKind::broadcast: return 1.0;
  }
  return 1.0;
}

// ---------------------------------------------------------------------------------------

std::string collective_name(CollectiveKind kind) {
  switch (kind) {
    case CollectiveKind::all_gather: return "all_gather";
    case CollectiveKind::reduce_scatter: return "reduce_scatter";
    case CollectiveKind::all_reduce: return "all_reduce";
    case CollectiveKind::broadcast: return "broadcast";
    case CollectiveKind::all_to_all: return "all_to_all";
  }
  return "unknown";
}

std::optional<CollectiveKind> collective_kind_from_name(std::string_view name) {
  for (auto k : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter,
                 CollectiveKind::all_reduce, CollectiveKind::broadcast, CollectiveKind::all_to_all})
    if (collective_name(k) == name) return k;
  return std::nullopt;
}

std::string nccl_algorithm_name(NcclAlgorithm a) {
  switch (a) {
    case NcclAlgorithm::tree: return "Tree";
    case NcclAlgorithm::ring: return "Ring";
    case NcclAlgorithm::nvls: return "NVLS";
  }
  return "?";
}

std::string nccl_protocol_name(NcclProtocol p) {
  switch (p) {
    case NcclProtocol::ll: return "LL";
    case NcclProtocol::ll128: return "LL128";
    case NcclProtocol::simple: return "Simple";
  }
  return "?";
}

NcclParams::NcclParams() {
  // tuning.cc ncclTunerConstantsDefaults.baseLatencies (us): Tree, Ring; NVLS has none.
  base_latency_us = {{{6.8, 14.0, 8.4}, {6.6, 14.0, 8.4}, {0.0, 0.0, 0.0}}};
  // hwLatencies[NCCL_HW_NVLINK / PCI / NET] (us per hop), Tree, Ring, NVLS (Simple only).
  nvlink_latency_us = {{{0.6, 1.25, 4.0}, {0.6, 1.9, 3.4}, {0.0, 0.0, 25.0}}};
  pcie_latency_us = {{{1.0, 1.9, 4.0}, {1.0, 2.5, 5.7}, {0.0, 0.0, 0.0}}};
  net_latency_us = {{{5.0, 8.5, 14.0}, {2.7, 4.0, 14.0}, {0.0, 0.0, 18.0}}};
  // treeCorrectionFactor[proto][log2(nBytes >> 6)], 64 B .. 256 MB.
  tree_correction[kLL] = {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5,
                          .4,  .4,  .5,  .6,  .7, .8, .9, 1.0, 1.0, 1.0, 1.0};
  tree_correction[kLL128] = {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6,
                             .6,  .6,  .6,  .6,  .8,  .9, .9, .9, .9, 1.0, 1.0};
  tree_correction[kSimple] = {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5,
                              .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9};
  apply_arch_tables(*this, Arch::hopper, "NcclParams{} default");

  sources["nccl_version"] = "NCCL release whose tables these are (2.28.3-1; same constants as 2.23-2.27 "
                            "except the NVLS bandwidth formula, see docs/collectives.md)";
  sources["base_latency_us"] = std::string(kSrcTuning) + " ncclTunerConstantsDefaults.baseLatencies";
  sources["nvlink_latency_us"] = std::string(kSrcTuning) + " hwLatencies[NCCL_HW_NVLINK]";
  sources["pcie_latency_us"] = std::string(kSrcTuning) + " hwLatencies[NCCL_HW_PCI]";
  sources["net_latency_us"] = std::string(kSrcTuning) + " hwLatencies[NCCL_HW_NET]";
  sources["net_latency_inter_us"] =
      "graph->latencyInter = the net plugin's ncclNetProperties.latency; NCCL's IB transport "
      "reports 0 (src/transport/net_ib.cc 'props->latency = 0; // Not set')";
  sources["tree_correction"] = std::string(kSrcTuning) + " treeCorrectionFactor";
  sources["ll_bandwidth_factor"] = std::string(kSrcTuning) + " ring LL: min(llMaxBw, busBw * .5)";
  sources["ll128_bandwidth_factor"] =
      std::string(kSrcTuning) + " ring LL128: min(busBw * 0.92, nChannels * perChMaxRingLL128Bw)";
  sources["tree_bandwidth_factor"] =
      std::string(kSrcTuning) + " tree all-reduce: min(busBw * .92, nChannels * perChMaxTreeBw)";
  sources["tree_ll_factor"] = std::string(kSrcTuning) + " tree LL: min(busBw / 3.8, llMaxBw)";
  sources["tree_ll128_factor_single_node"] = std::string(kSrcTuning) + " tree LL128: nNodes == 1 ? 7/9";
  sources["tree_ll128_factor_multi_node"] = std::string(kSrcTuning) + " tree LL128: : 120/128";
  sources["max_ring_channels"] = "NCCL init.cc: ringGraph->maxChannels = MAXCHANNELS/2, MAXCHANNELS = 64 (device.h)";
  sources["max_nvls_channels"] = "NCCL search.cc: NVLS maxChannels = min(NCCL_MAX_NVLS_ARITY, local GPUs)";
  sources["ring_same_channels"] =
      "search.cc tries sameChannels first; on NVSwitch nodes that first result is kept";
  sources["bandwidth_efficiency"] =
      "1.0: none applied (NCCL's tables already include protocol overheads); fitted by calibration only";
  sources["intra_bandwidth_gbps"] = "0: derived from the cluster at estimate time";
  sources["nic_bandwidth_gbps"] = "0: cluster.nic_bandwidth_gbps at estimate time";
  sources["gpu_pcie_bandwidth_gbps"] = "0: derived from the GPU architecture at estimate time";
  sources["enable_ll128"] =
      std::string(kSrcTuning) + ": LL128 on by default only when intra-node paths are NVLink (PATH_NVB or better)";
  sources["enable_nvls"] = "NVLS needs NVSwitch gen3+ with NVLink SHARP (gpu.nvls) and, without CollNet, one node";
  sources["nchannels_per_net_peer"] =
      "0 = NCCL's default (NCCL_NCHANNELS_PER_NET_PEER unset): src/graph/paths.cc ncclTopoGetNchannels";
  sources["p2p_ll_threshold_bytes"] = std::string(kSrcEnqueue) + " NCCL_PARAM(P2pLLThreshold, \"P2P_LL_THRESHOLD\", 16384)";
}

NcclParams NcclParams::defaults_for(const ClusterSpec& cluster) { return defaults_for(cluster, "2.28.3"); }

NcclParams NcclParams::defaults_for(const ClusterSpec& cluster, const std::string& nccl_version) {
  const auto v = parse_version(nccl_version);
  if (!v || v->first != 2 || v->second < 23 || v->second > 28)
    throw std::invalid_argument("NCCL model version \"" + nccl_version +
                                "\": tables are known for 2.23 .. 2.28 (default 2.28.3)");
  NcclParams p;
  p.nccl_version = nccl_version;
  auto [arch, why] = derive_arch(cluster.gpu);
  if (arch == Arch::cdna3)
    apply_rccl_tables(p, why);
  else
    apply_arch_tables(p, arch, why);

  const bool xgmi = cluster.intra_kind == IntraNodeKind::xgmi;
  const bool nvswitch = cluster.intra_kind == IntraNodeKind::nvswitch;
  p.intra_link = xgmi ? "xgmi" : nvswitch ? "nvlink" : "pcie";
  p.sources["intra_link"] = "cluster.intra_kind = " + std::string(xgmi ? "xgmi" : nvswitch ? "nvswitch" : "pcie");

  const Hw hw = resolve_hw(NcclParams{}, cluster);  // cluster-derived figures
  p.intra_bandwidth_gbps = hw.intra;
  if (xgmi) {
    p.sources["intra_bandwidth_gbps"] =
        cluster.gpu.xgmi_links > 0
            ? std::to_string(cluster.gpu.xgmi_links) +
                  " xGMI links (gpu.xgmi.links) x 48.0 GB/s (RCCL topo.h GFX94X_XGMI_WIDTH, ncclTopoXGMISpeed)" +
                  (stated_below_links(cluster.gpu.xgmi_links, cluster, arch) ? kStatedCapNote : "")
            : "cluster.intra_bandwidth_gbps as is (the GPU lists no xGMI links)";
  } else if (nvswitch) {
    int links = cluster.gpu.nvlink_links;
    std::string how = "gpu.nvlink_links = " + std::to_string(links);
    if (links <= 0 && cluster.gpu.nvlink_bandwidth_gbps > 0) {
      links = static_cast<int>(std::lround(cluster.gpu.nvlink_bandwidth_gbps / spec_nvlink_bw_per_link(arch)));
      how = "links inferred from gpu.nvlink_bandwidth_gbps / datasheet rate per link";
    }
    if (links > 0) {
      char buf[64];
      std::snprintf(buf, sizeof buf, "%.1f", nccl_nvlink_bw_per_link(arch));
      p.sources["intra_bandwidth_gbps"] = std::to_string(links) + " NVLink links (" + how + ") x " + buf +
                                          " GB/s (NCCL topo.h ncclTopoNVLinkBw, " + arch_name(arch) + ")";
      if (stated_below_links(links, cluster, arch)) p.sources["intra_bandwidth_gbps"] += kStatedCapNote;
    } else {
      p.sources["intra_bandwidth_gbps"] =
          "cluster.intra_bandwidth_gbps as is (the GPU lists no NVLink links)";
    }
  } else {
    p.sources["intra_bandwidth_gbps"] =
        "cluster.intra_bandwidth_gbps taken as NCCL's PCIe link figure (topo.cc: width x GT/s / 80, "
        "e.g. 24 GB/s for Gen4 x16)";
  }
  p.nic_bandwidth_gbps = hw.nic;
  p.nics_per_node = hw.nics;
  p.sources["nic_bandwidth_gbps"] =
      "cluster.nic_bandwidth_gbps (NCCL: NIC port speed in Mb/s / 8000, 400 Gb/s -> 50 GB/s)";
  p.sources["nics_per_node"] = "cluster.nics_per_node";
  p.gpu_pcie_bandwidth_gbps = hw.pcie;
  p.sources["gpu_pcie_bandwidth_gbps"] =
      !cluster_is_pcie(cluster) ? "GPU PCIe link as NCCL rates it (topo.cc width x GT/s / 80): " + arch_name(arch) +
                     (arch == Arch::ampere ? " Gen4 x16 = 24 GB/s" : arch == Arch::volta ? " Gen3 x16 = 12 GB/s"
                                                                                        : " Gen5 x16 = 48 GB/s")
               : "cluster.intra_bandwidth_gbps (PCIe node)";

  // LL128: tuning.cc enables it by default when the intra-node path is NVLink (typeIntra <=
  // PATH_NVB) and the NIC is reached through PCIe switches (or PXN on Hopper+).
  if (arch == Arch::cdna3) return p;  // RCCL: LL128 and NVLS set by apply_rccl_tables
  p.enable_ll128 = nvswitch;
  p.enable_nvls = nvswitch && cluster.gpu.nvls && kNvlsEfficiency[static_cast<int>(arch)] > 0;
  p.sources["enable_nvls"] =
      std::string(p.enable_nvls ? "on" : "off") + ": gpu.nvls = " + (cluster.gpu.nvls ? "true" : "false") +
      ", intra-node " + (nvswitch ? "NVSwitch" : "PCIe") + " (NVLS needs NVLink SHARP; single node without CollNet)";
  return p;
}

// ---- graph model ----

NcclGraph nccl_ring_graph(const CollectiveGroup& group, const ClusterSpec& cluster,
                          const NcclParams& params) {
  check_group(group, cluster);
  Hw hw = resolve_hw(params, cluster);
  const int nodes = group.nodes;
  const int ppn = group.ranks / group.nodes;
  hw.intra = hw.intra_for(ppn, cluster.gpus_per_node);  // [PCIe across sockets]
  if (hw.mesh_links > 0 && nodes == 1 && ppn >= 2) return xgmi_mesh_ring_graph(ppn, hw, params);
  const std::vector<double>& speeds =
      nodes > 1 ? (params.speed_array_inter_gbps.empty() ? speed_array_inter(hw.arch)
                                                         : params.speed_array_inter_gbps)
                : (params.speed_array_intra_gbps.empty() ? speed_array_intra(hw.arch)
                                                         : params.speed_array_intra_gbps);
  const int max_ch = std::max(1, params.max_ring_channels);
  const int n_speeds = static_cast<int>(speeds.size());
  if (n_speeds == 0) return {1, 0.1, 0.1};

  // search.cc ncclTopoSearchInit: maxBw = best GPU->GPU path (one node) or GPU->NET path;
  // totalBw = the GPU's NVLink (or PCIe) bandwidth.
  const double max_bw = nodes > 1 ? std::min(hw.nic, hw.pcie) : hw.intra;
  const double total_bw = hw.intra;

  // Pass 1: from the highest speed that fits, decrease while no solution or while the next
  // speed is more than .49 of the best one's; keep the best nChannels x bw (ties keep the
  // earlier, fewer-hop graph); stop at maxChannels or once nChannels x bw >= totalBw.
  int idx = 0;
  while (idx < n_speeds - 1 && speeds[idx] > max_bw + kEps) ++idx;
  int best_ch = 0;
  double best_bw = 0;
  while (true) {
    const double s = speeds[idx];
    const int ch = ring_channels_at(s, ppn, nodes, hw, max_ch);
    if (ch >= 1 && ch * s > best_ch * best_bw + kEps) {
      best_ch = ch;
      best_bw = s;
    }
    if (best_ch > 0 && (best_ch == max_ch || best_ch * best_bw >= total_bw - kEps)) break;
    if (idx < n_speeds - 1 && (best_ch == 0 || speeds[idx + 1] / best_bw > 0.49)) {
      ++idx;
      continue;
    }
    break;
  }
  if (best_ch == 0) return {1, 0.1, 0.1};  // search.cc: "falling back to simple order"

  // ncclTopoDupChannels: double the channels at half the bandwidth, unless bw < 25, or on
  // compute capability > 80 when bw < 50 with more than 4 channels.
  const bool cc_above_80 = hw.arch == Arch::hopper || hw.arch == Arch::blackwell;
  if (best_bw >= 25.0 && !(cc_above_80 && best_bw < 50.0 && best_ch > 4)) {
    const int dup = std::min(best_ch * 2, max_ch);
    const int factor = (dup + best_ch - 1) / best_ch;
    best_bw /= factor;
    best_ch = dup;
  }

  // Pass 2 (ring pattern): with minChannels = the channels found, try every higher speed.
  int idx2 = 0;
  while (idx2 < n_speeds - 1 && speeds[idx2] > best_bw + kEps) ++idx2;
  while (idx2 > 0) {
    --idx2;
    const double s = speeds[idx2];
    const int ch = ring_channels_at(s, ppn, nodes, hw, max_ch);
    if (ch >= best_ch && ch * s > best_ch * best_bw + kEps) {
      best_ch = ch;
      best_bw = s;
    }
  }
  return {best_ch, best_bw, best_bw};
}

NcclGraph nccl_nvls_graph(const CollectiveGroup& group, const ClusterSpec& cluster,
                          const NcclParams& params) {
  check_group(group, cluster);
  const int ppn = group.ranks / group.nodes;
  // NVLS needs NVLink SHARP; without CollNet NCCL disables it on more than one node
  // (tuning.cc: collnetEnable == 0 && nNodes > 1), and a single local GPU has nothing to do.
  if (!params.enable_nvls || !cluster.gpu.nvls || group.nodes != 1 || ppn < 2) return {};
  const Hw hw = resolve_hw(params, cluster);
  if (!hw.nvlink) return {};
  const std::vector<double>& speeds = params.speed_array_intra_gbps.empty()
                                          ? speed_array_intra(hw.arch)
                                          : params.speed_array_intra_gbps;
  const int n_speeds = static_cast<int>(speeds.size());
  if (n_speeds == 0) return {};
  const int max_ch = std::max(1, std::min(params.max_nvls_channels, ppn));
  const int min_ch = max_ch;  // one node: "force intra-node NVLS algorithm to pull evenly from all GPUs"
  // Non-ring patterns scale totalBw by ngpus/(ngpus-1) when picking the first speed.
  const double total_bw = hw.intra * ppn / (ppn - 1.0);
  int idx = 0;
  while (idx < n_speeds - 1 &&
         (speeds[idx] > hw.intra + kEps || speeds[idx] * min_ch > total_bw + kEps))
    ++idx;
  while (nvls_channels_at(speeds[idx], hw, max_ch) < min_ch) {
    if (idx == n_speeds - 1) return {};
    ++idx;
  }
  NcclGraph g;
  g.channels = max_ch;
  g.bw_intra_gbps = speeds[idx];
  // Pass 2 for NVLS raises bwInter only, while it is below 2 x bwIntra; on one node no link
  // carries bwInter, so every step succeeds up to the top of the speed array.
  double inter = speeds[idx];
  int j = idx;
  while (j > 0 && inter < 2 * g.bw_intra_gbps - kEps) inter = speeds[--j];
  g.bw_inter_gbps = inter;
  return g;
}

// ---- tuning table (ncclTopoTuneModel) ----

NcclTableEntry nccl_table_entry(CollectiveKind kind, NcclAlgorithm algorithm, NcclProtocol protocol,
                                const CollectiveGroup& group, const ClusterSpec& cluster,
                                const NcclParams& params) {
  check_group(group, cluster);
  NcclTableEntry e;
  const int n = group.ranks;
  if (n <= 1) return e;
  const int a = static_cast<int>(algorithm);
  const int pr = static_cast<int>(protocol);
  const bool ar = kind == CollectiveKind::all_reduce;
  const bool ag_rs = kind == CollectiveKind::all_gather || kind == CollectiveKind::reduce_scatter;
  const bool bcast = kind == CollectiveKind::broadcast;
  // All-to-all is no NCCL collective: grouped send/recv, no tuning-table entry
  // (nccl_all_to_all_model prices it).
  if (kind == CollectiveKind::all_to_all) return e;
  // Which algorithms serve which collective (tuning.cc): broadcast Ring only; all-gather and
  // reduce-scatter Ring, NVLS (and PAT, CollNetDirect: not modelled); all-reduce all.
  if (bcast && a != kRing) return e;
  if (ag_rs && a == kTree) return e;
  if (a == kNvls && pr != kSimple) return e;
  if (!algo_enabled(params, a) || !proto_enabled(params, pr)) return e;
  const bool rccl = params.library == "rccl";
  // RCCL tuning.cc: no Tree/Simple when every rank is on one gfx94x node.
  if (rccl && a == kTree && pr == kSimple && group.nodes == 1) return e;

  const Hw hw = resolve_hw(params, cluster);
  const int nodes = group.nodes;
  const int ppn = n / nodes;
  const int scale = nodes <= 2 ? nodes - 1 : 2;
  const int nsteps = ar ? 2 * (n - 1) : ag_rs ? n - 1 : n;

  // Bandwidth.
  double bus_bw = 0;
  int channels = 0;
  if (a == kNvls) {
    const NcclGraph g = nccl_nvls_graph(group, cluster, params);
    if (g.channels < 2) return e;  // "NVLS/NVLStree needs at least 2 channels"
    channels = g.channels;
    double bw = 0;
    if (nvls_efficiency_model(params.nccl_version)) {
      // 2.28: busBW per channel = bwIntra x nvlsEfficiency x (nCh-1)/nCh; all-reduce
      // pipelines two operations (x2), all-gather / reduce-scatter move (ppn-1)/ppn of it.
      double intra_bw = g.bw_intra_gbps * params.nvls_efficiency * (channels - 1) / channels;
      intra_bw *= ar ? 2.0 : (ppn - 1.0) / ppn;
      bw = std::min(intra_bw, g.bw_inter_gbps);
    } else {
      // 2.23-2.27: all-reduce min(bwIntra, bwInter); all-gather / reduce-scatter
      // min(bwIntra x (ppn-1)/ppn, bwInter x 0.9).
      bw = ar ? std::min(g.bw_intra_gbps, g.bw_inter_gbps)
              : std::min(g.bw_intra_gbps * (ppn - 1.0) / ppn, g.bw_inter_gbps * 0.9);
    }
    bus_bw = channels * bw;
  } else {
    const NcclGraph g = nccl_ring_graph(group, cluster, params);
    channels = g.channels;
    const double bw = nodes <= 2 ? g.bw_intra_gbps : g.bw_inter_gbps;
    bus_bw = channels * bw;
    if (rccl) {
      // RCCL replaces every refinement below with one ratio per (algorithm, protocol), and
      // favours Ring/LL broadcast on a single gfx94x node (x1.65).
      bus_bw *= params.rccl_bandwidth_ratio[nodes <= 2 ? 0 : 1][a][pr];
      if (a == kRing && pr == kLL && bcast && nodes == 1) bus_bw *= 1.65;
    } else if (a == kRing && pr == kLL)
      bus_bw = std::min(params.ll_max_bandwidth_gbps[scale], bus_bw * params.ll_bandwidth_factor);
    if (!rccl && a == kRing && pr == kLL128)
      bus_bw = std::min(bus_bw * params.ll128_bandwidth_factor,
                        channels * params.per_channel_max_ring_ll128_gbps[scale]);
    if (!rccl && a == kTree) {
      bus_bw = std::min(bus_bw * params.tree_bandwidth_factor,
                        channels * params.per_channel_max_tree_gbps[scale]);
      if (pr == kLL) bus_bw = std::min(bus_bw * params.tree_ll_factor, params.ll_max_bandwidth_gbps[scale]);
      if (pr == kLL128)
        bus_bw = std::min(bus_bw * (nodes == 1 ? params.tree_ll128_factor_single_node
                                               : params.tree_ll128_factor_multi_node),
                          channels * params.per_channel_max_tree_ll128_gbps[scale]);
    }
  }
  // Bus bandwidth -> algorithm bandwidth (not for NVLS all-gather / reduce-scatter).
  if (!(a != kRing && ag_rs)) {
    double ratio = 0.5;
    if (a == kRing) ratio = static_cast<double>(n) / nsteps;
    if (a == kNvls) ratio = nvls_efficiency_model(params.nccl_version) ? static_cast<double>(n) / nsteps : 5.0 / 6.0;
    bus_bw *= ratio;
  }
  if (!(bus_bw > 0)) return e;

  // Latency.
  const NcclTable& intra_table = hw_latency_table(params, hw.nvlink);
  double lat = params.base_latency_us[a][pr];
  double intra_lat = intra_table[a][pr];
  // "With ppn=1 latencies are fully exposed, use the Tree network latency." (NCCL 2.19+; not in RCCL)
  double inter_lat = (ppn == 1 && !rccl ? params.net_latency_us[kTree][pr] : params.net_latency_us[a][pr]) +
                     params.net_latency_inter_us;
  if (pr == kSimple) inter_lat += params.net_latency_inter_us;  // the flush
  if (a == kRing) {
    if (bcast) {
      const NcclTable& hop_table = nodes == 1 ? intra_table : params.net_latency_us;
      if (params.ring_same_channels) {
        lat += hop_table[kRing][pr];
      } else {
        lat += nsteps * (pr == kSimple ? hop_table[kTree][pr] : hop_table[kRing][pr]);
      }
    } else {
      double net_overhead = 0;
      if (nodes > 1) net_overhead = params.net_overhead_us * (pr == kSimple ? 3 : 1);
      intra_lat = std::max(intra_lat, net_overhead);
      // RCCL counts 2 x nNodes network steps for a multi-node all-reduce, NCCL 2 x (nNodes - 1).
      const int inter_steps = nodes == 1 ? 0 : ar ? 2 * (rccl ? nodes : nodes - 1) : nodes - 1;
      lat += (nsteps - inter_steps) * intra_lat + inter_steps * inter_lat;
    }
  } else if (a == kTree) {
    lat += 2 * ((ppn - 1) * intra_lat + log2i(nodes) * inter_lat);
  } else {  // NVLS: the latency is the hop latency alone
    lat = intra_lat;
    if (nodes > 1) lat += inter_lat;
  }
  e.latency_us = lat;
  e.bandwidth_gbps = bus_bw;
  e.channels = channels;
  return e;
}

// ---- all-to-all: grouped point-to-point (NCCL 2.28.3, read at NVIDIA/nccl tag v2.28.3-1,
// ---- commit f1308997d0420148b1be1c24d63f19d902ae589b) ----

namespace {

// src/include/device.h: MAXCHANNELS 64 (NCCL_MAX_P2P_NCHANNELS defaults to it, paths.cc);
// NCCL_MAX_DEV_WORK_P2P_PER_BATCH 8 (p2p works one channel runs at once); NCCL_STEPS 8.
constexpr int kMaxChannels = 64;
constexpr int kP2pWorkPerBatch = 8;
constexpr int kNcclSteps = 8;
// src/init.cc: NCCL_P2P_NET_CHUNKSIZE 128 KiB, NCCL_P2P_NVL_CHUNKSIZE 512 KiB,
// NCCL_P2P_PCI_CHUNKSIZE 128 KiB (comm->p2pChunkSize: the net one when nNodes > 1, NVLink
// when every local path is NVLink); DEFAULT_LL_BUFFSIZE = NCCL_LL_LINES_PER_THREAD (8) x
// NCCL_LL_MAX_NTHREADS (512) x NCCL_STEPS (8) x 16-byte lines = 512 KiB.
constexpr double kP2pNetChunkBytes = 1 << 17;
constexpr double kP2pNvlChunkBytes = 1 << 19;
constexpr double kP2pPciChunkBytes = 1 << 17;
constexpr double kLLBufferBytes = 8.0 * 512 * kNcclSteps * 16;

int pow2_up(int x) {
  int p = 1;
  while (p < x) p *= 2;
  return p;
}

// ncclTopoGetNchannels (src/graph/paths.cc) for a peer on the same node: NVLink paths get 2
// channels per NVLink of the path (path bw / ncclTopoNVLinkBw), other paths 2.
int channels_for_local_peer(const Hw& hw) {
  if (!hw.nvlink) return 2;
  if (hw.mesh_links > 0) return 2;  // xGMI mesh: one link to each peer
  const double per_link = nccl_nvlink_bw_per_link(hw.arch);
  return 2 * std::max(1, static_cast<int>(std::floor(hw.intra / per_link + kEps)));
}

// ... and for a peer on another node: NCCL_NCHANNELS_PER_NET_PEER, else 2 halved while
// 2 x nRanks > 4 x p2p channels ("avoid overloading channels with 8+ operations"), at least
// the GPU's local NICs it takes to cover its PCIe link (topo.cc getLocalNetCountByBw).
int channels_for_net_peer(int ranks, int p2p_channels, const Hw& hw, int gpus_per_node, const NcclParams& p) {
  if (p.nchannels_per_net_peer > 0) return p.nchannels_per_net_peer;
  int max_channels = 2;
  while (max_channels * ranks > p2p_channels * 4 && max_channels > 1) max_channels /= 2;
  const int local_nics = std::max(1, hw.nics / std::max(1, gpus_per_node));
  int by_bw = 0;
  double covered = 0;
  while (by_bw < local_nics && covered < hw.pcie - kEps) {
    covered += hw.nic;
    ++by_bw;
  }
  return std::max(std::max(by_bw, 1), max_channels);
}

}  // namespace

NcclAllToAllModel nccl_all_to_all_model(double bytes, const CollectiveGroup& group, const ClusterSpec& cluster,
                                        const NcclParams& params) {
  check_group(group, cluster);
  if (!(bytes >= 0)) throw std::invalid_argument("collective size must be >= 0 bytes");
  NcclAllToAllModel m;
  const int n = group.ranks;
  if (n <= 1 || bytes == 0) return m;
  const int nodes = group.nodes;
  const int ppn = n / nodes;
  Hw hw = resolve_hw(params, cluster);
  hw.intra = hw.intra_for(ppn, cluster.gpus_per_node);  // [PCIe across sockets]

  // Channels (paths.cc ncclTopoComputeP2pChannels): p2p channels from the communicator's
  // collective channels; per peer, the fewest any peer gets, both rounded up to powers of 2.
  m.p2p_channels = pow2_up(std::min(std::max(1, nccl_ring_graph(group, cluster, params).channels), kMaxChannels));
  int min_channels = m.p2p_channels;
  if (ppn > 1) min_channels = std::min(min_channels, channels_for_local_peer(hw));
  if (nodes > 1)
    min_channels = std::min(min_channels, channels_for_net_peer(n, m.p2p_channels, hw, cluster.gpus_per_node, params));
  m.channels_per_peer = std::min(pow2_up(min_channels), m.p2p_channels);

  // One send (enqueue.cc addP2pToPlan): LL when at most P2P_LL_THRESHOLD x channels, else
  // Simple; its step is the p2p chunk (Simple) or the LL buffer / NCCL_STEPS; it starts on
  // nChannelsMin channels (per peer, halved while nChannelsMin x nRanks > p2p channels) and
  // doubles them while a part is larger than the largest part.
  m.peer_bytes = bytes / n;
  const bool ll = m.peer_bytes <= m.channels_per_peer * params.p2p_ll_threshold_bytes && params.enable_ll;
  m.protocol = ll ? NcclProtocol::ll : NcclProtocol::simple;
  const double chunk = nodes > 1 ? kP2pNetChunkBytes : hw.nvlink ? kP2pNvlChunkBytes : kP2pPciChunkBytes;
  const double step = ll ? kLLBufferBytes / kNcclSteps : chunk;
  const double min_part = nodes > 1 ? step / 2 : step / 8;
  const double max_part = nodes > 1 ? step : step * 32;
  int channels_min = m.channels_per_peer;
  while (channels_min * n > m.p2p_channels && channels_min > 1) channels_min /= 2;
  int channels = std::max(1, std::min(channels_min, static_cast<int>(std::ceil(m.peer_bytes / min_part))));
  double part = std::max(min_part, std::ceil(m.peer_bytes / channels));
  while (part > max_part && channels <= m.channels_per_peer / 2) {
    channels *= 2;
    part = std::ceil(m.peer_bytes / channels);
  }
  m.channels_per_send = channels;
  // "Each task is striped across nChannelsMax of p2pnChannels channels. Each channel runs
  // up to NCCL_MAX_DEV_WORK_P2P_PER_BATCH tasks concurrently." (enqueue.cc)
  m.concurrent_peers = std::max(1, m.p2p_channels / channels) * kP2pWorkPerBatch;
  m.batches = (n - 1 + m.concurrent_peers - 1) / m.concurrent_peers;

  // Transfer: the peers on the node over the GPU's intra-node links, the others through the
  // node's NICs (every local rank's remote share together; PXN lets a GPU use any local NIC,
  // and each GPU reaches the NICs over its PCIe link). LL carries 8 data bytes per 16-byte
  // line (the factor NCCL's ring LL uses, ll_bandwidth_factor).
  const double protocol_factor = ll ? params.ll_bandwidth_factor : 1.0;
  m.intra_bytes = (ppn - 1) * m.peer_bytes;
  m.inter_bytes_per_node = static_cast<double>(ppn) * (n - ppn) * m.peer_bytes;
  m.intra_gbps = hw.intra * protocol_factor;
  m.inter_gbps = std::min(std::max(hw.nics, 1) * hw.nic, ppn * hw.pcie) * protocol_factor;
  const double intra_s = m.intra_bytes > 0 ? m.intra_bytes / (m.intra_gbps * 1e9) : 0.0;
  const double inter_s = m.inter_bytes_per_node > 0 ? m.inter_bytes_per_node / (m.inter_gbps * 1e9) : 0.0;

  // Latency. NCCL has no latency figure for point-to-point (tuning.cc tables are per
  // collective algorithm); this borrows the Ring row of its tables for the protocol: the
  // kernel's base latency once, and one hop per batch of peers (the network hop when any
  // peer is remote, NVLink/PCIe otherwise; a net hop is at least NCCL's net overhead).
  const int a = kRing;
  const int pr = static_cast<int>(m.protocol);
  double hop = hw_latency_table(params, hw.nvlink)[a][pr];
  if (nodes > 1)
    hop = std::max(params.net_latency_us[a][pr] + params.net_latency_inter_us,
                   params.net_overhead_us * (pr == kSimple ? 3 : 1));
  m.latency_us = params.base_latency_us[a][pr] + m.batches * hop;
  m.seconds = m.latency_us * 1e-6 + std::max(intra_s, inter_s) / params.bandwidth_efficiency;
  return m;
}

// ---- per-call time (ncclTopoGetAlgoTime) and selection ----

std::vector<CollectiveEstimate> collective_candidates(CollectiveKind kind, double bytes,
                                                      const CollectiveGroup& group,
                                                      const ClusterSpec& cluster,
                                                      const NcclParams& params) {
  check_group(group, cluster);
  if (!(bytes >= 0)) throw std::invalid_argument("collective size must be >= 0 bytes");
  std::vector<CollectiveEstimate> out;
  const int n = group.ranks;
  if (n <= 1) return out;
  if (!(params.bandwidth_efficiency > 0))
    throw std::invalid_argument("nccl.bandwidth_efficiency must be > 0");
  if (kind == CollectiveKind::all_to_all) {
    const NcclAllToAllModel m = nccl_all_to_all_model(bytes, group, cluster, params);
    CollectiveEstimate e;
    e.seconds = m.seconds;
    e.algorithm = "P2P";
    e.protocol = nccl_protocol_name(m.protocol);
    e.channels = m.channels_per_send;
    e.latency_seconds = m.latency_us * 1e-6;
    if (e.seconds > 0) {
      e.alg_bandwidth_gbps = bytes / e.seconds / 1e9;
      e.bus_bandwidth_gbps = e.alg_bandwidth_gbps * bus_factor(kind, n);
    }
    out.push_back(e);
    return out;
  }
  const int ring_channels = nccl_ring_graph(group, cluster, params).channels;
  for (int a = 0; a < 3; ++a) {
    for (int pr = 0; pr < 3; ++pr) {
      const NcclTableEntry t = nccl_table_entry(kind, static_cast<NcclAlgorithm>(a),
                                                static_cast<NcclProtocol>(pr), group, cluster, params);
      if (!(t.bandwidth_gbps > 0)) continue;
      double bw = t.bandwidth_gbps * params.bandwidth_efficiency;
      double lat = t.latency_us;
      if (a == kTree && kind == CollectiveKind::all_reduce) {
        const int log_size = log2i(std::floor(bytes / 64.0));
        const auto& corr = params.tree_correction[pr];
        if (log_size >= 0 && log_size < static_cast<int>(corr.size())) bw *= corr[log_size];
      }
      if (params.library != "rccl" && a == kRing && pr == kSimple && group.nodes > 1 &&
          kind == CollectiveKind::all_reduce &&
          bytes / (static_cast<double>(ring_channels) * n) >= 64)
        lat *= params.ring_plateau_factor;  // "plateau effect of ring"
      const double time_us = lat + bytes / (1000.0 * bw);
      CollectiveEstimate e;
      e.seconds = time_us * 1e-6;
      e.algorithm = nccl_algorithm_name(static_cast<NcclAlgorithm>(a));
      e.protocol = nccl_protocol_name(static_cast<NcclProtocol>(pr));
      e.channels = t.channels;
      e.latency_seconds = lat * 1e-6;
      if (e.seconds > 0) {
        e.alg_bandwidth_gbps = bytes / e.seconds / 1e9;
        e.bus_bandwidth_gbps = e.alg_bandwidth_gbps * bus_factor(kind, n);
      }
      out.push_back(e);
    }
  }
  return out;
}

CollectiveEstimate estimate_collective(CollectiveKind kind, double bytes, const CollectiveGroup& group,
                                       const ClusterSpec& cluster, const NcclParams& params) {
  check_group(group, cluster);
  if (!(bytes >= 0)) throw std::invalid_argument("collective size must be >= 0 bytes");
  if (group.ranks <= 1 || bytes == 0) return zero_estimate();
  const auto candidates = collective_candidates(kind, bytes, group, cluster, params);
  if (candidates.empty())
    throw std::invalid_argument("no NCCL algorithm/protocol is enabled for " + collective_name(kind));
  const CollectiveEstimate* best = &candidates.front();
  for (const auto& c : candidates)
    if (c.seconds < best->seconds) best = &c;  // strictly faster: NCCL keeps the first minimum
  return *best;
}

// ---- JSON ----

namespace {

const char* const kAlgoKeys[3] = {"tree", "ring", "nvls"};
const char* const kProtoKeys[3] = {"ll", "ll128", "simple"};

nlohmann::json table_json(const NcclTable& t) {
  nlohmann::json j = nlohmann::json::object();
  for (int a = 0; a < 3; ++a) j[kAlgoKeys[a]] = {t[a][0], t[a][1], t[a][2]};
  return j;
}

int read_nonneg_int(JsonReader& r, const std::string& key, int fallback) {
  const std::int64_t v = r.integer_or(key, fallback);
  if (v < 0) r.fail(key, "expected a non-negative integer, got " + std::to_string(v));
  if (v > 1000000) r.fail(key, "expected an integer <= 1000000, got " + std::to_string(v));
  return static_cast<int>(v);
}

std::vector<double> read_numbers(JsonReader& r, const std::string& key, std::size_t exact_size) {
  const nlohmann::json& arr = r.array(key);
  const std::string path = r.path_of(key);
  if (exact_size > 0 && arr.size() != exact_size)
    throw InputError(r.file(), path,
                     "expected an array of " + std::to_string(exact_size) + " numbers, got " +
                         std::to_string(arr.size()));
  if (exact_size == 0 && arr.empty()) throw InputError(r.file(), path, "expected a non-empty array of numbers");
  std::vector<double> out;
  for (std::size_t i = 0; i < arr.size(); ++i) {
    const nlohmann::json& v = arr[i];
    if (!v.is_number() || !std::isfinite(v.get<double>()))
      throw InputError(r.file(), join_json_path(path, i), "expected a number, got " + describe_json(v));
    const double d = v.get<double>();
    if (d < 0)
      throw InputError(r.file(), join_json_path(path, i),
                       "expected a non-negative number, got " + describe_json(v));
    out.push_back(d);
  }
  return out;
}

NcclScaleRow read_row(JsonReader& r, const std::string& key, const NcclScaleRow& fallback) {
  if (!r.has(key)) {
    r.ignore(key);
    return fallback;
  }
  const auto v = read_numbers(r, key, 3);
  return {v[0], v[1], v[2]};
}

NcclTable read_table(JsonReader& r, const std::string& key, const NcclTable& fallback) {
  if (!r.has(key)) {
    r.ignore(key);
    return fallback;
  }
  NcclTable t = fallback;
  JsonReader sub = r.object(key);
  for (int a = 0; a < 3; ++a) {
    if (!sub.has(kAlgoKeys[a])) {
      sub.ignore(kAlgoKeys[a]);
      continue;
    }
    const auto v = read_numbers(sub, kAlgoKeys[a], 3);
    t[a] = {v[0], v[1], v[2]};
  }
  sub.finish();
  return t;
}

}  // namespace

nlohmann::json NcclParams::to_json() const {
  nlohmann::json j;
  j["nccl_version"] = nccl_version;
  j["library"] = library;
  j["gpu_arch"] = gpu_arch;
  j["cpu_vendor"] = cpu_vendor;
  j["algorithms"] = {{"ring", enable_ring}, {"tree", enable_tree}, {"nvls", enable_nvls}};
  j["protocols"] = {{"ll", enable_ll}, {"ll128", enable_ll128}, {"simple", enable_simple}};
  j["base_latency_us"] = table_json(base_latency_us);
  j["hw_latency_us"] = {{"nvlink", table_json(nvlink_latency_us)},
                        {"pcie", table_json(pcie_latency_us)},
                        {"net", table_json(net_latency_us)}};
  j["net_overhead_us"] = net_overhead_us;
  j["net_latency_inter_us"] = net_latency_inter_us;
  j["ring_plateau_factor"] = ring_plateau_factor;
  j["intra_link"] = intra_link;
  j["intra_bandwidth_gbps"] = intra_bandwidth_gbps;
  j["xgmi_channels_per_link"] = xgmi_channels_per_link;
  j["nic_bandwidth_gbps"] = nic_bandwidth_gbps;
  j["nics_per_node"] = nics_per_node;
  j["gpu_pcie_bandwidth_gbps"] = gpu_pcie_bandwidth_gbps;
  j["speed_array_intra_gbps"] = speed_array_intra_gbps;
  j["speed_array_inter_gbps"] = speed_array_inter_gbps;
  j["max_ring_channels"] = max_ring_channels;
  j["max_nvls_channels"] = max_nvls_channels;
  j["ring_same_channels"] = ring_same_channels;
  j["ll_max_bandwidth_gbps"] = ll_max_bandwidth_gbps;
  j["per_channel_max_ring_ll128_gbps"] = per_channel_max_ring_ll128_gbps;
  j["per_channel_max_tree_ll128_gbps"] = per_channel_max_tree_ll128_gbps;
  j["per_channel_max_tree_gbps"] = per_channel_max_tree_gbps;
  j["ll_bandwidth_factor"] = ll_bandwidth_factor;
  j["ll128_bandwidth_factor"] = ll128_bandwidth_factor;
  j["tree_bandwidth_factor"] = tree_bandwidth_factor;
  j["tree_ll_factor"] = tree_ll_factor;
  j["tree_ll128_factor_single_node"] = tree_ll128_factor_single_node;
  j["tree_ll128_factor_multi_node"] = tree_ll128_factor_multi_node;
  j["nvls_efficiency"] = nvls_efficiency;
  j["tree_correction"] = {{"ll", tree_correction[kLL]},
                          {"ll128", tree_correction[kLL128]},
                          {"simple", tree_correction[kSimple]}};
  j["rccl_bandwidth_ratio"] = {table_json(rccl_bandwidth_ratio[0]), table_json(rccl_bandwidth_ratio[1])};
  j["nchannels_per_net_peer"] = nchannels_per_net_peer;
  j["p2p_ll_threshold_bytes"] = p2p_ll_threshold_bytes;
  j["bandwidth_efficiency"] = bandwidth_efficiency;
  j["sources"] = sources;
  return j;
}

NcclParams NcclParams::from_json(JsonReader& reader) { return from_json(reader, NcclParams{}); }

NcclParams NcclParams::from_json(JsonReader& r, const NcclParams& base) {
  NcclParams p = base;
  if (r.has("nccl_version")) {
    const std::string v = r.string("nccl_version");
    const auto parsed = parse_version(v);
    if (!parsed || parsed->first != 2 || parsed->second < 23 || parsed->second > 28)
      r.fail("nccl_version", "expected an NCCL release 2.23 .. 2.28 (e.g. \"2.28.3\", \"2.27.7\"), got \"" + v + "\"");
    p.nccl_version = v;
  } else {
    r.ignore("nccl_version");
  }
  p.library = r.choice_or("library", {"nccl", "rccl"}, p.library);
  p.gpu_arch = r.choice_or("gpu_arch", {"", "volta", "ampere", "hopper", "blackwell", "cdna3"}, p.gpu_arch);
  p.cpu_vendor = r.choice_or("cpu_vendor", {"intel", "amd", "arm"}, p.cpu_vendor);
  if (r.has("algorithms")) {
    JsonReader s = r.object("algorithms");
    p.enable_ring = s.boolean_or("ring", p.enable_ring);
    p.enable_tree = s.boolean_or("tree", p.enable_tree);
    p.enable_nvls = s.boolean_or("nvls", p.enable_nvls);
    s.finish();
  } else {
    r.ignore("algorithms");
  }
  if (r.has("protocols")) {
    JsonReader s = r.object("protocols");
    p.enable_ll = s.boolean_or("ll", p.enable_ll);
    p.enable_ll128 = s.boolean_or("ll128", p.enable_ll128);
    p.enable_simple = s.boolean_or("simple", p.enable_simple);
    s.finish();
  } else {
    r.ignore("protocols");
  }
  p.base_latency_us = read_table(r, "base_latency_us", p.base_latency_us);
  if (r.has("hw_latency_us")) {
    JsonReader s = r.object("hw_latency_us");
    p.nvlink_latency_us = read_table(s, "nvlink", p.nvlink_latency_us);
    p.pcie_latency_us = read_table(s, "pcie", p.pcie_latency_us);
    p.net_latency_us = read_table(s, "net", p.net_latency_us);
    s.finish();
  } else {
    r.ignore("hw_latency_us");
  }
  p.net_overhead_us = r.nonnegative_number_or("net_overhead_us", p.net_overhead_us);
  p.net_latency_inter_us = r.nonnegative_number_or("net_latency_inter_us", p.net_latency_inter_us);
  p.ring_plateau_factor = r.nonnegative_number_or("ring_plateau_factor", p.ring_plateau_factor);
  p.intra_link = r.choice_or("intra_link", {"", "nvlink", "pcie", "xgmi"}, p.intra_link);
  p.intra_bandwidth_gbps = r.nonnegative_number_or("intra_bandwidth_gbps", p.intra_bandwidth_gbps);
  if (r.has("xgmi_channels_per_link"))
    p.xgmi_channels_per_link = r.int_in("xgmi_channels_per_link", 1, 64);
  else
    r.ignore("xgmi_channels_per_link");
  p.nic_bandwidth_gbps = r.nonnegative_number_or("nic_bandwidth_gbps", p.nic_bandwidth_gbps);
  p.nics_per_node = read_nonneg_int(r, "nics_per_node", p.nics_per_node);
  p.gpu_pcie_bandwidth_gbps = r.nonnegative_number_or("gpu_pcie_bandwidth_gbps", p.gpu_pcie_bandwidth_gbps);
  for (const char* key : {"speed_array_intra_gbps", "speed_array_inter_gbps"}) {
    if (!r.has(key)) {
      r.ignore(key);
      continue;
    }
    std::vector<double> v = read_numbers(r, key, 0);
    for (std::size_t i = 0; i < v.size(); ++i) {
      if (!(v[i] > 0))
        throw InputError(r.file(), join_json_path(r.path_of(key), i), "expected a positive speed (GB/s)");
      if (i > 0 && !(v[i] < v[i - 1]))
        throw InputError(r.file(), join_json_path(r.path_of(key), i),
                         "expected speeds in decreasing order, as NCCL's search tries them");
    }
    (std::string(key) == "speed_array_intra_gbps" ? p.speed_array_intra_gbps : p.speed_array_inter_gbps) = v;
  }
  if (r.has("max_ring_channels")) p.max_ring_channels = r.int_in("max_ring_channels", 1, 1024);
  else r.ignore("max_ring_channels");
  if (r.has("max_nvls_channels")) p.max_nvls_channels = r.int_in("max_nvls_channels", 1, 1024);
  else r.ignore("max_nvls_channels");
  p.ring_same_channels = r.boolean_or("ring_same_channels", p.ring_same_channels);
  p.ll_max_bandwidth_gbps = read_row(r, "ll_max_bandwidth_gbps", p.ll_max_bandwidth_gbps);
  p.per_channel_max_ring_ll128_gbps =
      read_row(r, "per_channel_max_ring_ll128_gbps", p.per_channel_max_ring_ll128_gbps);
  p.per_channel_max_tree_ll128_gbps =
      read_row(r, "per_channel_max_tree_ll128_gbps", p.per_channel_max_tree_ll128_gbps);
  p.per_channel_max_tree_gbps = read_row(r, "per_channel_max_tree_gbps", p.per_channel_max_tree_gbps);
  p.ll_bandwidth_factor = r.nonnegative_number_or("ll_bandwidth_factor", p.ll_bandwidth_factor);
  p.ll128_bandwidth_factor = r.nonnegative_number_or("ll128_bandwidth_factor", p.ll128_bandwidth_factor);
  p.tree_bandwidth_factor = r.nonnegative_number_or("tree_bandwidth_factor", p.tree_bandwidth_factor);
  p.tree_ll_factor = r.nonnegative_number_or("tree_ll_factor", p.tree_ll_factor);
  p.tree_ll128_factor_single_node =
      r.nonnegative_number_or("tree_ll128_factor_single_node", p.tree_ll128_factor_single_node);
  p.tree_ll128_factor_multi_node =
      r.nonnegative_number_or("tree_ll128_factor_multi_node", p.tree_ll128_factor_multi_node);
  p.nvls_efficiency = r.nonnegative_number_or("nvls_efficiency", p.nvls_efficiency);
  if (r.has("tree_correction")) {
    JsonReader s = r.object("tree_correction");
    for (int pr = 0; pr < 3; ++pr) {
      if (!s.has(kProtoKeys[pr])) {
        s.ignore(kProtoKeys[pr]);
        continue;
      }
      p.tree_correction[pr] = read_numbers(s, kProtoKeys[pr], 0);
    }
    s.finish();
  } else {
    r.ignore("tree_correction");
  }
  if (r.has("rccl_bandwidth_ratio")) {
    const nlohmann::json& rows = r.array("rccl_bandwidth_ratio");
    if (rows.size() != 2)
      throw InputError(r.file(), r.path_of("rccl_bandwidth_ratio"),
                       "expected two tables: [<= 2 nodes, > 2 nodes], got " + std::to_string(rows.size()));
    for (std::size_t i = 0; i < 2; ++i) {
      JsonReader row(rows[i], r.file(), join_json_path(r.path_of("rccl_bandwidth_ratio"), i));
      NcclTable t = p.rccl_bandwidth_ratio[i];
      for (int a = 0; a < 3; ++a) {
        if (!row.has(kAlgoKeys[a])) {
          row.ignore(kAlgoKeys[a]);
          continue;
        }
        const auto v = read_numbers(row, kAlgoKeys[a], 3);
        t[a] = {v[0], v[1], v[2]};
      }
      row.finish();
      p.rccl_bandwidth_ratio[i] = t;
    }
  } else {
    r.ignore("rccl_bandwidth_ratio");
  }
  if (r.has("nchannels_per_net_peer"))  // NCCL accepts 1 .. MAXCHANNELS (init.cc); 0 = NCCL's default rule
    p.nchannels_per_net_peer = r.int_in("nchannels_per_net_peer", 0, 64);
  else
    r.ignore("nchannels_per_net_peer");
  p.p2p_ll_threshold_bytes = r.nonnegative_number_or("p2p_ll_threshold_bytes", p.p2p_ll_threshold_bytes);
  p.bandwidth_efficiency = r.positive_number_or("bandwidth_efficiency", p.bandwidth_efficiency);
  if (r.has("sources")) {
    JsonReader s = r.object("sources");
    const nlohmann::json& obj = r.raw("sources");
    for (auto it = obj.begin(); it != obj.end(); ++it) p.sources[it.key()] = s.string(it.key());
    s.finish();
  } else {
    r.ignore("sources");
  }
  r.finish();
  return p;
}

}  // namespace fsdpsim::planner
