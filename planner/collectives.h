// Collective costs: a faithful copy of NCCL's own cost model.
//
// NCCL picks an (algorithm, protocol) for every collective call from a table it builds at
// communicator init (src/graph/tuning.cc: ncclTopoTuneModel) and evaluates per call
// (ncclTopoGetAlgoTime):
//
//     time_us = latency[coll][algo][proto] + nBytes / (1000 * bandwidth[coll][algo][proto])
//
// where bandwidth is an *algorithm* bandwidth (GB/s) derived from the bus bandwidth of the
// topology graphs NCCL searched (src/graph/search.cc: nChannels x bwIntra / bwInter). This
// file reproduces both halves: a small model of the graph search (channels and per-channel
// bandwidth for the ring / tree and NVLS graphs of a process group on a ClusterSpec) and the
// tuning tables with every refinement NCCL applies. Constants are NCCL 2.28.3's (identical to
// 2.23-2.27 except where docs/collectives.md says otherwise); each names its source.
//
// AMD GPUs: RCCL (ROCm's fork of NCCL) keeps NCCL's structure but replaces the bandwidth
// refinements with its own tuning tables (src/graph/tuning.cc tuning_model_N: hop latencies
// and a bus-bandwidth ratio per algorithm x protocol) and, on an MI300-class node, builds its
// rings from a fixed model of the xGMI mesh (src/graph/rome_models.cc). NcclParams.library =
// "rccl" selects that variant; defaults_for() picks it for a cluster of xGMI GPUs.
//
// All-to-all: NCCL 2.28 has no all-to-all collective and no cost for it; callers (nccl-tests
// src/alltoall.cu, PyTorch's ProcessGroupNCCL alltoall_base) issue one ncclSend and one
// ncclRecv per peer inside ncclGroupStart/End, and NCCL schedules them as point-to-point work
// (src/enqueue.cc scheduleP2pTasksToPlan, addP2pToPlan; channels from src/graph/paths.cc
// ncclTopoComputeP2pChannels). nccl_all_to_all_model prices that mechanism: per-peer
// messages of bytes/n, NVLink for the peers on the node and the node's NICs for the others,
// one hop latency per batch of peers NCCL runs concurrently (docs/collectives.md).
//
// Scope: Ring (all four collectives), Tree (all-reduce), NVLS (NVLink SHARP, single node:
// all-reduce, all-gather, reduce-scatter) x LL, LL128, Simple. Not modelled: PAT (used by
// NCCL only with one GPU per node), CollNet/SHARP, NVLS-Tree (multi-node NVLS) and the
// symmetric-memory kernels of 2.27+. See docs/collectives.md.
#pragma once

#include <array>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/json_input.h"
#include "planner/hardware.h"

namespace fsdpsim::planner {

// all_to_all: `bytes` is one rank's whole SEND buffer (nccl-tests' count x nranks x
// typesize; PyTorch's all_to_all_single input). Each rank sends bytes/n to every rank of the
// group (itself included: a local copy), so (n-1)/n of it leaves the rank, and receives
// bytes/n from each, into a receive buffer as large as the send buffer (even splits).
// nccl-tests: algbw = bytes / time, busbw = algbw x (n-1)/n.
enum class CollectiveKind { all_gather, reduce_scatter, all_reduce, broadcast, all_to_all };
std::string collective_name(CollectiveKind kind);  // "all_gather", ..., "all_to_all"
std::optional<CollectiveKind> collective_kind_from_name(std::string_view name);
// Bus bytes per buffer byte as nccl-tests count them over n ranks: (n-1)/n all-gather,
// reduce-scatter and all-to-all, 2(n-1)/n all-reduce, 1 broadcast (busbw = algbw x this).
double bus_factor(CollectiveKind kind, int n);

// A process group: `ranks` GPUs spread evenly over `nodes` nodes (ranks/nodes per node).
struct CollectiveGroup {
  int ranks = 1;
  int nodes = 1;
};

// NCCL's algorithm and protocol indices, in NCCL's own order (the selection loop visits them
// in this order and keeps the first strictly fastest, as NCCL does).
enum class NcclAlgorithm { tree = 0, ring = 1, nvls = 2 };
enum class NcclProtocol { ll = 0, ll128 = 1, simple = 2 };
std::string nccl_algorithm_name(NcclAlgorithm a);  // "Tree", "Ring", "NVLS"
std::string nccl_protocol_name(NcclProtocol p);    // "LL", "LL128", "Simple"

// Per algorithm x protocol table, indexed [NcclAlgorithm][NcclProtocol].
using NcclTable = std::array<std::array<double, 3>, 3>;
// A constant NCCL tabulates per communicator scale: {1 node, 2 nodes, >= 4 nodes}
// (NCCL's index2 = nNodes <= 2 ? nNodes-1 : 2).
using NcclScaleRow = std::array<double, 3>;

// Constants of NCCL's model. Default-constructed values are NCCL's tables for a Hopper GPU
// with hardware bandwidths left at 0 ("take them from the ClusterSpec"); defaults_for() fills
// every field for a given cluster. JSON (to_json / from_json) uses the same field names.
struct NcclParams {
  // The NCCL release whose model this is: selects the NVLS bandwidth formula (2.28+ uses
  // nvls_efficiency; 2.23-2.27 min(bwIntra, bwInter) x 5/6). Tables are explicit fields below.
  std::string nccl_version = "2.28.3";
  // "nccl", or "rccl": RCCL's table (rccl_bandwidth_ratio instead of NCCL's LL / LL128 /
  // tree refinements, no ring plateau, Tree/Simple off on one node, RCCL's latency steps).
  std::string library = "nccl";
  // GPU architecture NCCL keys its tables on ("volta", "ampere", "hopper", "blackwell";
  // "cdna3" for AMD MI300X / MI325X, whose tables are RCCL's);
  // empty = derive from cluster.gpu.
  std::string gpu_arch = "hopper";
  // CPU vendor of the hosts ("intel", "amd", "arm"): NCCL keys the multi-node LL cap and the
  // network post overhead on it.
  std::string cpu_vendor = "intel";

  // --- algorithm and protocol enables (NCCL_ALGO / NCCL_PROTO) ---
  bool enable_ring = true;
  bool enable_tree = true;
  bool enable_nvls = true;   // effective only where the GPU has NVLS (gpu.nvls), on one node
  bool enable_ll = true;
  bool enable_ll128 = true;  // NCCL enables LL128 by default only over NVLink (defaults_for)
  bool enable_simple = true;

  // --- latencies, microseconds ---
  NcclTable base_latency_us{};    // tuning.cc baseLatencies
  NcclTable nvlink_latency_us{};  // tuning.cc hwLatencies[NCCL_HW_NVLINK]
  NcclTable pcie_latency_us{};    // hwLatencies[NCCL_HW_PCI]
  NcclTable net_latency_us{};     // hwLatencies[NCCL_HW_NET]
  double net_overhead_us = 1.0;       // getNetOverhead(): 1.0 Intel/other, 2.0 AMD; x3 for Simple
  double net_latency_inter_us = 0.0;  // graph->latencyInter: the net plugin's reported latency
  double ring_plateau_factor = 1.4;   // ncclTopoGetAlgoTime: multi-node ring/Simple AR latency x

  // --- graph inputs (bandwidth per direction, GB/s, as NCCL's topology sees it) ---
  // 0 = derive from the cluster at estimate time.
  std::string intra_link = "";        // "nvlink", "pcie" or "xgmi"; empty = from cluster.intra_kind
  double intra_bandwidth_gbps = 0;    // per GPU: NVLink (xGMI) links x the library's per-link rate, or the PCIe link
  // xGMI mesh: ring channels per link on a whole node (RCCL rome_models.cc: 28 channels over
  // the 7 links of an MI300X, each directed link carrying 4).
  int xgmi_channels_per_link = 4;
  double nic_bandwidth_gbps = 0;      // per NIC (NCCL: port speed / 8000)
  int nics_per_node = 0;
  double gpu_pcie_bandwidth_gbps = 0; // GPU's PCIe link (bounds GPU->NIC paths)
  std::vector<double> speed_array_intra_gbps;  // search.cc: per-channel speeds tried, one node
  std::vector<double> speed_array_inter_gbps;  // ... and when the group spans nodes
  int max_ring_channels = 32;   // init.cc: ringGraph->maxChannels = MAXCHANNELS/2 (64/2)
  int max_nvls_channels = 32;   // NCCL_MAX_NVLS_ARITY (NVLS graph channels = min(this, ranks/node))
  bool ring_same_channels = true;  // graph->sameChannels (broadcast latency)

  // --- bandwidth refinements (tuning.cc) ---
  NcclScaleRow ll_max_bandwidth_gbps{};           // llMaxBws[index1][index2]
  NcclScaleRow per_channel_max_ring_ll128_gbps{};  // perChMaxRingLL128Bws[arch]
  NcclScaleRow per_channel_max_tree_ll128_gbps{};  // perChMaxTreeLL128Bws[arch]
  NcclScaleRow per_channel_max_tree_gbps{};        // perChMaxTreeBws[arch]
  double ll_bandwidth_factor = 0.5;                // ring LL: busBw * .5
  double ll128_bandwidth_factor = 0.92;            // ring LL128: busBw * 0.92
  double tree_bandwidth_factor = 0.92;             // tree AR: busBw * .92
  double tree_ll_factor = 1.0 / 3.8;               // tree LL: busBw / 3.8
  double tree_ll128_factor_single_node = 7.0 / 9.0;
  double tree_ll128_factor_multi_node = 120.0 / 128.0;
  double nvls_efficiency = 0.85;                   // nvlsEfficiency[arch]
  // treeCorrectionFactor[proto][log2(nBytes/64)], 64 B .. 256 MiB (23 entries per protocol).
  std::array<std::vector<double>, 3> tree_correction;

  // RCCL only (library "rccl"): bus bandwidth x this ratio, [<= 2 nodes, > 2 nodes][algo][proto]
  // (RCCL tuning.cc tuningModel.bwRatio); 0 = the (algorithm, protocol) is not used.
  std::array<NcclTable, 2> rccl_bandwidth_ratio{};

  // --- point-to-point (all-to-all) ---
  // NCCL_NCHANNELS_PER_NET_PEER: channels per remote peer; 0 = NCCL's default rule (2,
  // halved while 2 x nRanks > 4 x p2p channels, at least the NICs that cover the GPU's PCIe
  // link; src/graph/paths.cc ncclTopoGetNchannels).
  int nchannels_per_net_peer = 0;
  // NCCL_P2P_LL_THRESHOLD (src/enqueue.cc, default 16384): a send of at most this x its
  // channels uses the LL protocol, larger ones Simple.
  double p2p_ll_threshold_bytes = 16384;

  // Overall achieved fraction of the modelled bandwidth. 1.0 = NCCL's model as is (no CSV row
  // was used to set it); calibration may set another value.
  double bandwidth_efficiency = 1.0;

  std::map<std::string, std::string> sources;  // field -> where the value comes from

  NcclParams();
  static NcclParams defaults_for(const ClusterSpec& cluster);
  // The tables of another NCCL release: "2.23" .. "2.27.x" use the pre-2.28 NVLS bandwidth
  // formula and Blackwell per-channel caps (docs/collectives.md); throws std::invalid_argument
  // outside 2.23 .. 2.28.
  static NcclParams defaults_for(const ClusterSpec& cluster, const std::string& nccl_version);
  // Reads a full or partial object on top of NcclParams{} (or `base`); unknown fields and
  // negative numbers are InputErrors naming the JSON path.
  static NcclParams from_json(JsonReader& reader);
  static NcclParams from_json(JsonReader& reader, const NcclParams& base);
  nlohmann::json to_json() const;
};

struct CollectiveEstimate {
  double seconds = 0;
  std::string algorithm;  // "Ring", "Tree", "NVLS", "P2P" (all-to-all); "none" for 1-rank groups / 0 bytes
  std::string protocol;   // "LL", "LL128", "Simple"; "none" likewise
  int channels = 0;       // channels of the graph NCCL's table used (all-to-all: per send)
  double latency_seconds = 0;       // the latency term of the chosen (algorithm, protocol)
  // What nccl-tests would print for this size: algbw = bytes / seconds; busbw = algbw x
  // (n-1)/n (all-gather, reduce-scatter, all-to-all), 2(n-1)/n (all-reduce), 1 (broadcast).
  double bus_bandwidth_gbps = 0;
  double alg_bandwidth_gbps = 0;
  // The bus bandwidth of the transfer alone, the latency term left out: what the call's data
  // takes of the links it crosses (busbw x seconds / (seconds - latency)); 0 without a transfer.
  double transfer_bus_bandwidth_gbps() const {
    const double transfer = seconds - latency_seconds;
    return transfer > 0 && bus_bandwidth_gbps > 0 ? bus_bandwidth_gbps * seconds / transfer : 0.0;
  }
};

// bytes = the whole buffer as NCCL and nccl-tests count it (gathered size for all-gather and
// reduce-scatter, buffer size for all-reduce and broadcast, one rank's send buffer for
// all-to-all). 1-rank groups and 0 bytes cost 0.
// Throws std::invalid_argument for impossible groups (ranks not a multiple of nodes, more
// ranks per node than the cluster's GPUs per node) and negative sizes.
CollectiveEstimate estimate_collective(CollectiveKind kind, double bytes, const CollectiveGroup& group,
                                       const ClusterSpec& cluster, const NcclParams& params);

// Every enabled (algorithm, protocol) NCCL would consider for this call, in NCCL's order,
// each costed; estimate_collective returns the fastest. Empty for 1-rank groups. All-to-all
// has one candidate: P2P with the protocol NCCL's p2p path picks for the size.
std::vector<CollectiveEstimate> collective_candidates(CollectiveKind kind, double bytes,
                                                      const CollectiveGroup& group,
                                                      const ClusterSpec& cluster,
                                                      const NcclParams& params);

// ---- Model internals, exposed for tests and reports ----

// A topology graph as NCCL's search leaves it: channels and per-channel bandwidth (GB/s).
struct NcclGraph {
  int channels = 0;
  double bw_intra_gbps = 0;
  double bw_inter_gbps = 0;
};
// The ring graph (also used for the tree: NCCL pins the tree's channel count to the ring's).
NcclGraph nccl_ring_graph(const CollectiveGroup& group, const ClusterSpec& cluster,
                          const NcclParams& params);
// The NVLS graph of a single-node group (channels = 0 where NVLS is not available).
NcclGraph nccl_nvls_graph(const CollectiveGroup& group, const ClusterSpec& cluster,
                          const NcclParams& params);
// The table entry NCCL builds at init: latency (us) and algorithm bandwidth (GB/s), before
// the per-call corrections of ncclTopoGetAlgoTime. bandwidth 0 = not available.
struct NcclTableEntry {
  double latency_us = 0;
  double bandwidth_gbps = 0;
  int channels = 0;
};
NcclTableEntry nccl_table_entry(CollectiveKind kind, NcclAlgorithm algorithm, NcclProtocol protocol,
                                const CollectiveGroup& group, const ClusterSpec& cluster,
                                const NcclParams& params);

// An all-to-all as NCCL 2.28's point-to-point path runs it (grouped ncclSend/ncclRecv, one
// pair per peer), and its price. Every figure is per call of one rank.
struct NcclAllToAllModel {
  // src/graph/paths.cc ncclTopoComputeP2pChannels: the communicator's p2p channels,
  // pow2Up(min(collective channels, NCCL_MAX_P2P_NCHANNELS = MAXCHANNELS = 64)) ...
  int p2p_channels = 0;
  // ... and channels per peer: pow2Up(min over peers of ncclTopoGetNchannels), at most p2p_channels.
  int channels_per_peer = 0;
  // src/enqueue.cc addP2pToPlan: channels one send is split over.
  int channels_per_send = 0;
  // Peers served at once: p2p_channels / channels_per_send x NCCL_MAX_DEV_WORK_P2P_PER_BATCH (8).
  int concurrent_peers = 0;
  int batches = 0;  // ceil((n-1) / concurrent_peers): peer batches run one after another
  NcclProtocol protocol = NcclProtocol::simple;  // LL or Simple (P2P_LL_THRESHOLD)
  double peer_bytes = 0;            // bytes / n, one message
  double intra_bytes = 0;           // bytes one rank sends over NVLink (PCIe, xGMI): (ppn-1) x peer_bytes
  double inter_bytes_per_node = 0;  // bytes one node sends through its NICs: ppn x (n-ppn) x peer_bytes
  double intra_gbps = 0;  // the GPU's intra-node bandwidth as NCCL rates it (per direction), x protocol
  double inter_gbps = 0;  // the node's NIC bandwidth, min(NICs x NIC, ppn x GPU PCIe), x protocol
  double latency_us = 0;  // kernel base latency + batches x hop latency
  double seconds = 0;     // latency + max(intra, inter transfer) / bandwidth_efficiency
};
NcclAllToAllModel nccl_all_to_all_model(double bytes, const CollectiveGroup& group, const ClusterSpec& cluster,
                                        const NcclParams& params);

}  // namespace fsdpsim::planner
