// The hardware a scenario runs on: a GPU type from the catalog (scenarios/hardware/gpus.json)
// and a cluster (nodes x GPUs per node, the links inside and between nodes).
//
// Every figure that stands for the real world carries its source in the catalog entry;
// the structs keep those source strings so reports can show them.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

namespace fsdpsim::planner {

struct GpuSpec {
  std::string name;                  // catalog key, e.g. "H100-SXM-80GB"
  std::string arch;                  // "ampere", "ada", "hopper", "blackwell", "cdna3": which kernels run (attention)
  double memory_bytes = 0;           // HBM capacity
  int sm_count = 0;                  // streaming multiprocessors (compute units): the kernels' waves
  // Dense peak FLOP/s by dtype name ("bf16", "fp16", "fp32" (tf32 tensor cores where the
  // framework uses them), "fp8").
  std::map<std::string, double> peak_flops;
  double hbm_bandwidth_bytes_per_second = 0;
  std::string nvlink_generation;     // "ampere", "hopper", "blackwell", "" (no NVLink)
  int nvlink_links = 0;              // NVLink links per GPU
  double nvlink_bandwidth_gbps = 0;  // unidirectional GB/s per GPU into the switch
  bool nvls = false;                 // NVLink SHARP (NVSwitch gen3+) available
  // AMD Infinity Fabric (xGMI): links from this GPU to its peers, which form a fully
  // connected mesh inside a node (no switch), and their per-direction bandwidth summed over
  // the links (MI300X: 7 links x 64 GB/s = 448). 0 = no xGMI.
  int xgmi_links = 0;
  double xgmi_bandwidth_gbps = 0;
  std::map<std::string, std::string> sources;  // field -> where the figure comes from
};

// How the GPUs of a node reach each other: an NVSwitch (any GPU to any at its NVLink
// bandwidth), PCIe (through the host's switches), or an xGMI mesh (AMD: one direct link to
// every peer, no switch).
enum class IntraNodeKind { nvswitch, pcie, xgmi };
enum class InterNodeTopology { rail_optimized, fat_tree };

struct ClusterSpec {
  std::string name;
  GpuSpec gpu;
  int nodes = 1;
  int gpus_per_node = 8;
  IntraNodeKind intra_kind = IntraNodeKind::nvswitch;
  double intra_bandwidth_gbps = 0;  // per GPU, one direction (NVSwitch port, PCIe link, all xGMI links)
  // PCIe nodes: the CPU sockets the GPUs hang under (evenly) and the CPUs' link, one direction, as
  // NCCL rates it ([PCIe across sockets], planner/collectives.cpp); 1 and 0: one root or switch.
  int sockets = 1;
  double cpu_link_gbps = 0;
  double nic_bandwidth_gbps = 0;    // per NIC, one direction (400 Gb/s = 50 GB/s)
  int nics_per_node = 8;
  double inter_latency_seconds = 0;  // one network hop, end to end
  InterNodeTopology inter_topology = InterNodeTopology::rail_optimized;
  double oversubscription = 1.0;  // leaf-to-spine, 1 = non-blocking
  // Per node, 0 when the cluster file does not state it: the host's memory (what CPU offload,
  // CPU init and a rank-0 full state dict must fit in) and the write bandwidth a checkpoint
  // reaches to its storage (cluster.host_memory_gb, cluster.storage.write_gbps).
  double host_memory_bytes = 0;
  double storage_write_gbps = 0;
  // The node's local NVMe, all its drives together (cluster.nvme.read_gbps / write_gbps; 0 when
  // not stated): what ZeRO-Infinity's swaps (offload_*=nvme) read and write at, shared by the
  // node's ranks.
  double nvme_read_gbps = 0, nvme_write_gbps = 0;
  std::map<std::string, std::string> sources;

  int world_size() const { return nodes * gpus_per_node; }
};

}  // namespace fsdpsim::planner
