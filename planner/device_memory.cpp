#include "planner/device_memory.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <tuple>

#include "planner/cost_model.h"
#include "planner/scenario.h"
#include "planner/schedule.h"

namespace fsdpsim::planner {

namespace {

// src/include/device.h MAXCHANNELS.
constexpr int kNcclMaxChannels = 64;

std::string mib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

bool compute_capability_90_or_newer(const std::string& gpu_arch) {
  return gpu_arch == "hopper" || gpu_arch == "blackwell";
}

// src/graph/paths.cc ncclTopoCheckP2p: read between two compute capability 8.0 GPUs joined by
// NVLink (the catalog's Ampere parts with NVLink are A100s, 8.0).
bool uses_p2p_read(const CostModel& cost) {
  return cost.calibration().nccl.gpu_arch == "ampere" && cost.cluster().intra_kind == IntraNodeKind::nvswitch;
}

// What the cost model picks for a group's collectives: NCCL connects an algorithm when a
// collective first uses it (src/init.cc NCCL_RUNTIME_CONNECT default 1; src/group.cc
// ncclCollPreconnect connects Ring, Tree or NVLS as a call needs it).
struct GroupUse {
  std::set<std::string> algorithms;
  int p2p_channels_per_peer = 0;  // all-to-all: p2pnChannelsPerPeer
};

std::map<int, GroupUse> algorithms_per_group(const Schedule& schedule, const CostModel& cost, CollectiveMemo& memo) {
  std::map<int, GroupUse> uses;
  std::set<std::tuple<int, int, double>> seen;  // (group, kind, bytes): price each call once
  for (const Op& op : schedule.ops) {
    if (!is_collective(op.kind) || op.group < 0 || op.group >= static_cast<int>(schedule.groups.size())) continue;
    if (schedule.groups[op.group].ranks <= 1 || op.comm_bytes <= 0) continue;
    if (!seen.emplace(op.group, static_cast<int>(op.kind), op.comm_bytes).second) continue;
    GroupUse& use = uses[op.group];
    if (op.kind == OpKind::all_to_all) {
      use.algorithms.insert("P2P");
      use.p2p_channels_per_peer = std::max(use.p2p_channels_per_peer, cost.all_to_all_model(op, schedule).channels_per_peer);
    } else {
      use.algorithms.insert(memoized_collective(op, schedule, cost, memo).algorithm);
    }
  }
  return uses;
}

// One communicator's buffers on this rank, and what of it the model leaves out.
DeviceOverheadPart communicator_part(const ProcessGroup& group, const GroupUse& use, const CostModel& cost,
                                     const NcclBufferSettings& settings, std::vector<std::string>& not_counted) {
  DeviceOverheadPart part;
  part.name = "NCCL " + group.name;
  std::string detail;
  const std::string who = group.name + " (" + std::to_string(group.ranks) + " ranks x " + std::to_string(group.nodes) + " nodes)";
  const bool read = uses_p2p_read(cost);
  if (use.algorithms.count("Ring")) {
    const NcclGraph graph = cost.ring_graph(group);
    const int channels = nccl_communicator_channels(graph, group.nodes,
                                                    compute_capability_90_or_newer(cost.calibration().nccl.gpu_arch), settings);
    part.bytes += nccl_ring_buffer_bytes(channels, settings, read);
    detail = "ring: " + std::to_string(channels) + " channels (graph " + std::to_string(graph.channels) + ") x " +
             mib(nccl_p2p_channel_bytes(settings, read)) + " (send + receive, LL + LL128 + Simple" +
             (read ? ", P2P read" : "") + ")";
    // NCCL runs a ring's node-crossing connections over its net transport, which sizes its device
    // buffers its own way (src/transport/net.cc sendProxySetup / recvProxySetup); they are counted
    // as the P2P connections above. The report names this without the source path.
    if (group.nodes > 1)
      not_counted.push_back(who + ": the ring's node-crossing connections are counted as on-node ones; NCCL's "
                                  "network transport sizes their buffers its own way (not modelled)");
  }
  if (use.algorithms.count("P2P")) {
    const int ranks_per_node = std::max(1, group.ranks / std::max(1, group.nodes));
    const int peers = ranks_per_node - 1;
    part.bytes += nccl_p2p_buffer_bytes(peers, use.p2p_channels_per_peer, settings, read);
    if (!detail.empty()) detail += "; ";
    detail += "p2p: " + std::to_string(peers) + " peers on the node x " + std::to_string(use.p2p_channels_per_peer) +
              " channels x " + mib(nccl_p2p_channel_bytes(settings, read));
    if (group.nodes > 1)
      not_counted.push_back(who + ": p2p connections to peers on other nodes (net transport, shared buffers)");
  }
  // Tree: src/transport/generic.cc ncclTransportTreeConnect (a parent and up to NCCL_MAX_TREE_ARITY
  // children per channel). NVLS: src/transport/nvls.cc ncclNvlsBufferSetup (nvlsChannels x 2 x
  // NCCL_NVLS_CHUNKSIZE x NCCL_STEPS x heads, rounded to the multicast granularity).
  if (use.algorithms.count("Tree"))
    not_counted.push_back(who + ": Tree connections (a parent and up to 3 children per channel; not modelled)");
  if (use.algorithms.count("NVLS"))
    not_counted.push_back(who + ": NVLS multicast buffers (not modelled)");
  part.detail = detail.empty() ? "no Ring or p2p connection" : detail;
  return part;
}

}  // namespace

NcclBufferSettings parse_nccl_buffer_settings(JsonReader& r) {
  NcclBufferSettings s;
  // Bytes, as NCCL_BUFFSIZE and its LL kin take them: whole numbers (1.5 was accepted).
  auto bytes_or = [&](const char* key, double fallback) {
    return r.has(key) ? static_cast<double>(r.positive_integer(key)) : fallback;
  };
  s.ll_buffsize_bytes = bytes_or("ll_buffsize", s.ll_buffsize_bytes);
  s.ll128_buffsize_bytes = bytes_or("ll128_buffsize", s.ll128_buffsize_bytes);
  s.buffsize_bytes = bytes_or("buffsize", s.buffsize_bytes);
  s.min_nchannels = r.int_in_or("min_nchannels", 1, kNcclMaxChannels, 0);
  s.max_nchannels = r.int_in_or("max_nchannels", 1, kNcclMaxChannels, 0);
  if (s.min_nchannels > 0 && s.max_nchannels > 0 && s.min_nchannels > s.max_nchannels)
    r.fail("min_nchannels", "at most max_nchannels (" + std::to_string(s.max_nchannels) + "), got " +
                                std::to_string(s.min_nchannels));
  r.finish();
  return s;
}

int nccl_communicator_channels(const NcclGraph& ring_graph, int nodes, bool compute_capability_90_or_newer,
                               const NcclBufferSettings& settings) {
  // src/graph/connect.cc ncclTopoPostset: "Duplication should be complete now".
  int channels = std::min(kNcclMaxChannels, 2 * ring_graph.channels);
  // "Use 4 compute channels per search channel to reach peak BW on <8 PPN".
  if (compute_capability_90_or_newer && nodes > 1 && ring_graph.bw_intra_gbps > 45.0 && channels < 16) channels *= 2;
  // "Honor NCCL_MIN_NRINGS/NCCL_MAX_NRINGS": cap first, then copy channels up to the minimum.
  if (settings.max_nchannels > 0) channels = std::min(channels, settings.max_nchannels);
  if (settings.min_nchannels > 0) channels = std::max(channels, settings.min_nchannels);
  return channels;
}

double nccl_p2p_channel_bytes(const NcclBufferSettings& settings, bool p2p_read) {
  // src/include/comm.h: sizeof(ncclSendMem) = sizeof(ncclRecvMem) = MEM_ALIGN 4096; CUDA_IPC_MIN.
  constexpr double kConnectionMemBytes = 4096;
  constexpr double kIpcAlignBytes = 2097152;
  auto align = [](double bytes) { return std::ceil(bytes / kIpcAlignBytes) * kIpcAlignBytes; };
  const double send = align(kConnectionMemBytes + (p2p_read ? settings.buffsize_bytes : 0));
  const double receive = align(kConnectionMemBytes + settings.ll_buffsize_bytes + settings.ll128_buffsize_bytes +
                               (p2p_read ? 0 : settings.buffsize_bytes));
  return send + receive;
}

double nccl_ring_buffer_bytes(int channels, const NcclBufferSettings& settings, bool p2p_read) {
  return channels * nccl_p2p_channel_bytes(settings, p2p_read);
}

double nccl_p2p_buffer_bytes(int intra_node_peers, int channels_per_peer, const NcclBufferSettings& settings,
                             bool p2p_read) {
  return static_cast<double>(intra_node_peers) * channels_per_peer * nccl_p2p_channel_bytes(settings, p2p_read);
}

double cublas_workspace_bytes_per_thread(const std::string& gpu_arch) {
  constexpr double KiB = 1024.0;
  if (gpu_arch == "cdna3") return 128 * 1024 * KiB + 76 * 1024 * KiB;
  return gpu_arch == "hopper" ? 4096 * 8 * KiB : 4096 * KiB * 2 + 16 * KiB * 8;
}

DeviceOverhead device_overhead(const Scenario& scenario, const Schedule& schedule, const CostModel& cost,
                               CollectiveMemo* memo) {
  return device_overhead(scenario.nccl, schedule, cost, memo);
}

DeviceOverhead device_overhead(const NcclBufferSettings& nccl, const Schedule& schedule, const CostModel& cost,
                               CollectiveMemo* memo) {
  DeviceOverhead o;
  const Calibration& cal = cost.calibration();
  if (cal.device_overhead_bytes) {
    o.measured = true;
    o.parts.push_back({"measured", *cal.device_overhead_bytes, "the calibration's device_overhead_bytes (replaces the model)"});
    o.total_bytes = *cal.device_overhead_bytes;
    return o;
  }
  // Measured for some GPUs (scenarios/hardware/calibration.json says where), else assumed.
  const auto source = cal.sources.find("cuda_context_bytes");
  const bool measured = source != cal.sources.end() && source->second.rfind("measured", 0) == 0;
  o.parts.push_back({"CUDA context", cal.cuda_context_bytes,
                     std::string(measured ? "measured" : "assumed") + " (calibration.cuda_context_bytes)"});
  // The cuBLAS workspaces are not here: they are persistent allocations of the step (the
  // caching allocator holds them; planner/plan_context.cpp, [cuBLAS workspaces]).
  if (cal.nccl.library == "rccl") {
    o.not_counted.push_back("RCCL's buffers (its connect.cc and buffer defaults are not modelled)");
  } else {
    CollectiveMemo local;
    for (const auto& [group, use] : algorithms_per_group(schedule, cost, memo ? *memo : local))
      o.parts.push_back(communicator_part(schedule.groups[group], use, cost, nccl, o.not_counted));
  }
  for (const DeviceOverheadPart& p : o.parts) o.total_bytes += p.bytes;
  return o;
}

bool near_capacity(double gpu_memory_bytes, double device_peak_bytes, double peak_reserved_bytes,
                   std::int64_t allocator_retries) {
  const double spare = gpu_memory_bytes - device_peak_bytes;
  return spare >= 0 && (spare < kReservedModelTolerance * peak_reserved_bytes || allocator_retries > 0);
}

std::string near_capacity_warning(double gpu_memory_bytes, double device_peak_bytes, double peak_reserved_bytes,
                                  std::int64_t allocator_retries) {
  if (!near_capacity(gpu_memory_bytes, device_peak_bytes, peak_reserved_bytes, allocator_retries)) return "";
  const double spare = gpu_memory_bytes - device_peak_bytes;
  const double tolerance = kReservedModelTolerance * peak_reserved_bytes;
  const bool within_tolerance = spare < tolerance;
  auto mib = [](double b) { return std::to_string(static_cast<long long>(std::llround(b / (1024.0 * 1024.0)))) + " MiB"; };
  std::string w = "the step fits with " + mib(spare) + " to spare";
  if (within_tolerance)
    w += ", less than the reserved-memory model's tolerance (" +
         std::to_string(static_cast<int>(std::lround(kReservedModelTolerance * 100))) + "% of the predicted reserved " +
         mib(peak_reserved_bytes) + " = " + mib(tolerance) + ")";
  if (allocator_retries > 0)
    w += (within_tolerance ? ", and " : ", but ") + std::string("the caching-allocator model fits it only by freeing its cache ") +
         std::to_string(allocator_retries) + (allocator_retries == 1 ? " time" : " times") + " in the step";
  return w + ": the run may retry allocations (the caching allocator frees its cache and calls cudaMalloc again, "
             "which synchronizes the device; num_alloc_retries in torch.cuda.memory_stats) or run out of memory, "
             "and the step time includes neither";
}

}  // namespace fsdpsim::planner
