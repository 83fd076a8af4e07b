// GPU memory outside the step's allocations: NCCL's communicator buffers, cuBLAS's workspaces
// and the CUDA context. The step's peak on the device is the caching-allocator replay's
// reserved bytes (planner/memory.h) plus this overhead.
//
// Each part is worked from the source that allocates it (cited next to each figure, here and in
// device_memory.cpp; docs/memory-model.md, "Outside the allocator"):
// - NCCL: for every process group of the schedule (one NCCL communicator each), the
//   connections of the algorithms the cost model picks for its collectives (NCCL connects an
//   algorithm when it is first used, NCCL_RUNTIME_CONNECT=1), each with one buffer per protocol.
// - cuBLAS: PyTorch's workspace per (handle, stream), which lives in the caching allocator but
//   is not one of the schedule's allocations.
// - The CUDA context: no public figure; an assumption the calibration states and a user sets.
// A calibration that states `device_overhead_bytes` (a measured total) replaces all three.
#pragma once

#include <string>
#include <vector>

#include "models/json_input.h"
#include "planner/collectives.h"
#include "planner/op_costs.h"

namespace fsdpsim::planner {

class CostModel;
struct Scenario;
struct Schedule;

// NCCL's buffer and channel settings (the scenario's `nccl` object: the environment variables
// of the same names). Defaults are NCCL's own, NVIDIA/nccl@5067397c (NCCL 2.30):
struct NcclBufferSettings {
  // src/init.cc DEFAULT_LL_BUFFSIZE = NCCL_LL_LINES_PER_THREAD 8 x NCCL_LL_MAX_NTHREADS 512 x
  // NCCL_STEPS 8 x sizeof(ncclLLFifoLine) 16 (constants in src/include/device.h) = 512 KiB.
  double ll_buffsize_bytes = 8.0 * 512 * 8 * 16;
  // src/init.cc DEFAULT_LL128_BUFFSIZE = NCCL_LL128_ELEMS_PER_THREAD 120 x
  // NCCL_LL128_MAX_NTHREADS 640 x NCCL_STEPS 8 x sizeof(uint64_t) 8 = 4,915,200 B.
  double ll128_buffsize_bytes = 120.0 * 640 * 8 * 8;
  // src/init.cc DEFAULT_BUFFSIZE (1 << 22), the Simple protocol's buffer (NCCL_BUFFSIZE).
  double buffsize_bytes = 4.0 * 1024 * 1024;
  // NCCL_MIN_NCHANNELS / NCCL_MAX_NCHANNELS (src/graph/connect.cc ncclMinNchannels,
  // ncclMaxNchannels); 0 = unset.
  int min_nchannels = 0;
  int max_nchannels = 0;

  // One connection's protocol buffers, all three (src/transport/p2p.cc p2pRecvSetup sums
  // comm->buffSizes[p] over the protocols).
  double connection_bytes() const { return ll_buffsize_bytes + ll128_buffsize_bytes + buffsize_bytes; }
};
// Reads the scenario's `nccl` object; values out of range are InputErrors naming the path.
NcclBufferSettings parse_nccl_buffer_settings(JsonReader& reader);

// The channels a communicator connects its rings over (comm->nChannels after
// src/graph/connect.cc ncclTopoPostset), from the ring graph the cost model searched:
// doubled ("Duplication should be complete now": min(MAXCHANNELS 64, 2 x graph channels)),
// doubled again on compute capability >= 9.0 across nodes when the graph's bwIntra > 45 GB/s
// and fewer than 16 channels ("Use 4 compute channels per search channel"), then capped at
// NCCL_MAX_NCHANNELS and raised to NCCL_MIN_NCHANNELS.
int nccl_communicator_channels(const NcclGraph& ring_graph, int nodes, bool compute_capability_90_or_newer,
                               const NcclBufferSettings& settings);

// Device bytes one rank allocates for one P2P (intra-node) channel connection pair: its send
// side to one peer and its receive side from one peer (src/transport/p2p.cc):
//   send    = ALIGN(sizeof(ncclSendMem) 4096 [+ Simple under P2P read], CUDA_IPC_MIN 2 MiB)
//   receive = ALIGN(sizeof(ncclRecvMem) 4096 + LL + LL128 [+ Simple without read], 2 MiB)
// (p2pSendSetup / p2pRecvSetup; the proxy allocates req.size with ncclP2pAllocateShareableBuffer;
// CUDA_IPC_MIN and the two structs, padded to MEM_ALIGN 4096, in src/include/comm.h). P2P read
// is on by default only between compute capability 8.0 GPUs over NVLink (src/graph/paths.cc
// ncclTopoCheckP2p: "Enable P2P Read for Ampere/NVLink only").
// Default buffers: 2 MiB + 10 MiB = 12 MiB without read; 6 MiB + 6 MiB with it.
double nccl_p2p_channel_bytes(const NcclBufferSettings& settings, bool p2p_read);

// Ring buffers one rank holds for a communicator: per channel a rank connects to its ring's
// prev (receive) and next (send) (src/transport/generic.cc ncclTransportRingConnect), so
// channels x nccl_p2p_channel_bytes. Every connection is priced as P2P (NVLink or PCIe); the
// node-crossing ones of a multi-node ring use the net transport instead (not modelled apart).
double nccl_ring_buffer_bytes(int channels, const NcclBufferSettings& settings, bool p2p_read);

// Point-to-point buffers (all-to-all): a send and a receive connection per peer on the rank's
// node and per channel of that peer (src/enqueue.cc marks p2pnChannelsPerPeer channels per
// peer for connection, connector 1; p2p.cc sizes them as the collectives' connections).
double nccl_p2p_buffer_bytes(int intra_node_peers, int channels_per_peer, const NcclBufferSettings& settings,
                             bool p2p_read);

// PyTorch's cuBLAS workspace for one thread that runs GEMMs (one cuBLAS handle per thread,
// one workspace per handle and stream), allocated through the caching allocator, so inside
// torch.cuda.memory_allocated: pytorch/pytorch@26a39059 aten/src/ATen/cuda/CublasHandlePool.cpp
// getChosenWorkspaceSize (CUBLAS_WORKSPACE_CONFIG unset) 4096 KiB x 8 = 32 MiB on compute
// capability 9.0, else 4096 KiB x 2 + 16 KiB x 8. cuBLASLt shares it: PyTorch 2.11 on
// an H100 allocated exactly 2 x 32 MiB for a forward and a backward GEMM
// (tests/data/hardware/memory-h100-2026-11-27.csv, process_baseline_allocated_bytes 67108864),
// no separate 1 MiB Lt workspace. ROCm: 32 MiB, 128 MiB on gfx94x/gfx95x (cdna3), and
// hipBLASLt's 76 MiB.
double cublas_workspace_bytes_per_thread(const std::string& gpu_arch);

struct DeviceOverheadPart {
  std::string name;    // "CUDA context", "cuBLAS workspaces", "NCCL shard", ...
  double bytes = 0;
  std::string detail;  // how it was worked out, in words (channels, connections, source)
};

struct DeviceOverhead {
  std::vector<DeviceOverheadPart> parts;
  // What NCCL allocates that the model does not count (NVLS, Tree, network send buffers ...).
  std::vector<std::string> not_counted;
  bool measured = false;  // the calibration's device_overhead_bytes replaced the model
  double total_bytes = 0;
};

// The device overhead of one rank of the schedule: the calibration's measured total when it
// states one, else the CUDA context (calibration.cuda_context_bytes) + the cuBLAS workspaces of
// the forward thread and of autograd's backward thread for the device + NCCL's buffers per
// communicator (the scenario's `nccl` settings, the channels of the cost model's ring graph).
// The collectives' NCCL estimates (which algorithm each uses) come through `memo` when given
// (it must belong to `cost`, as price_ops's; the estimates are the same either way).
DeviceOverhead device_overhead(const Scenario& scenario, const Schedule& schedule, const CostModel& cost,
                               CollectiveMemo* memo = nullptr);
// The same from the NCCL settings alone (what the scenario's overload reads of it): NCCL's
// buffers from `nccl` (the scenario's `nccl` object; NCCL's defaults when it has none).
DeviceOverhead device_overhead(const NcclBufferSettings& nccl, const Schedule& schedule, const CostModel& cost,
                               CollectiveMemo* memo = nullptr);

// [Near capacity] The fraction of the predicted reserved memory within which a step that fits
// is not sure to: the tolerance the caching-allocator model is held to against PyTorch's own
// allocator (issue 20: reserved within 5%, tests/hardware/hardware_check.h kReservedTolerance;
// docs/accuracy.md "Hardware" gives the errors measured, mean 2.4% on FSDP2, 3.9% on FSDP1).
inline constexpr double kReservedModelTolerance = 0.05;

// A warning ("" for none) when the step fits with less to spare than kReservedModelTolerance
// of its predicted reserved memory, or when the replay itself had to free the allocator's cache
// to fit (`allocator_retries`, MemoryReport::allocator_retries, in the step): a real run may then
// free the cache and retry (cudaFree and cudaMalloc again, which synchronize the device;
// torch.cuda.memory_stats num_alloc_retries) or run out of memory, and the step time includes
// neither. A step that does not fit gets its own message, not this one.
std::string near_capacity_warning(double gpu_memory_bytes, double device_peak_bytes, double peak_reserved_bytes,
                                  std::int64_t allocator_retries = 0);

// Whether a step that fits gets that warning: its fit is not sure, and its step time leaves out
// what a near miss costs. Sweeps and the advice recommend such a point only when no other fits.
bool near_capacity(double gpu_memory_bytes, double device_peak_bytes, double peak_reserved_bytes,
                   std::int64_t allocator_retries);

}  // namespace fsdpsim::planner
