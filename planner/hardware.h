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
  std::map<std::string, std::string> sources;  // field -> where the figure comes from
};

enum class IntraNodeKind { nvswitch, pcie };
enum class InterNodeTopology { rail_optimized, fat_tree };

struct ClusterSpec {
  std::string name;
  GpuSpec gpu;
  int nodes = 1;
  int gpus_per_node = 8;
  IntraNodeKind intra_kind = IntraNodeKind::nvswitch;
  double intra_bandwidth_gbps = 0;  // per GPU, one direction (NVSwitch port or PCIe link)
  double nic_bandwidth_gbps = 0;    // per NIC, one direction (400 Gb/s = 50 GB/s)
  int nics_per_node = 8;
  double inter_latency_seconds = 0;  // one network hop, end to end
  InterNodeTopology inter_topology = InterNodeTopology::rail_optimized;
  double oversubscription = 1.0;  // leaf-to-spine, 1 = non-blocking
  std::map<std::string, std::string> sources;

  int world_size() const { return nodes * gpus_per_node; }
};

}  // namespace fsdpsim::planner
