// What an op costs: the interface every engine (analytic, SimGrid) and the runtime's
// `verify` share. Compute from FLOPs and bytes at calibrated efficiencies, collectives
// from NCCL's own model (planner/collectives.h), CPU issue overhead per op, and the
// slowdown compute suffers while NCCL kernels run beside it.
//
// Every constant lives in a Calibration. Defaults per GPU type ship in
// scenarios/hardware/calibration.json with their sources; a scenario's "calibration"
// (a file `fsdpsim calibrate` wrote, or an inline object) overrides any of them.
#pragma once

#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "models/json_input.h"
#include "planner/collectives.h"
#include "planner/hardware.h"
#include "planner/schedule.h"

namespace fsdpsim::planner {

struct Scenario;

struct Calibration {
  std::string name;  // where it came from: "defaults for H100-SXM-80GB" or the calibrate run
  // Compute: achieved fraction of the dtype's dense peak.
  double matmul_efficiency = 0;     // the model's GEMMs
  double attention_efficiency = 0;  // fused (flash) attention, FLOPs counted without causal discount
  double causal_attention_work = 0.5;  // fraction of that work a causal kernel actually does
  double hbm_efficiency = 0;        // memory-bound kernels: achieved fraction of HBM bandwidth
  // CPU: time to issue one op's kernels (Python, autograd, FSDP hooks, launch).
  double op_issue_seconds = 0;
  // Interference: compute runs this much slower while a collective is in flight (0.1 = 10%).
  double compute_slowdown_under_comm = 0;
  // Host <-> device copies (CPU offload) and the CPU optimizer step.
  double pcie_gbps = 0;
  double host_optimizer_bytes_per_second = 0;
  // GPU memory outside PyTorch's allocator (CUDA context, NCCL buffers).
  double device_overhead_bytes = 0;
  NcclParams nccl;
  std::map<std::string, std::string> sources;  // field -> where its value comes from

  nlohmann::json to_json() const;
};

// The shipped defaults for the cluster's GPU type, then the scenario's calibration on top.
Calibration default_calibration(const ClusterSpec& cluster);
Calibration calibration_for(const Scenario& scenario);
// Reads a calibration object over `base` (fields it does not name keep base's values).
Calibration read_calibration(const nlohmann::json& json, const std::string& file, const Calibration& base);

class CostModel {
 public:
  CostModel(const ClusterSpec& cluster, Calibration calibration, models::DType compute_dtype);
  explicit CostModel(const Scenario& scenario);

  // Seconds the op takes on its stream when nothing else runs.
  double duration_seconds(const Op& op, const Schedule& schedule) const;
  // For collectives: NCCL's choice and its cost.
  CollectiveEstimate collective(const Op& op, const Schedule& schedule) const;
  // CPU seconds to issue the op.
  double issue_seconds(const Op& op) const;
  double compute_slowdown_under_comm() const { return calibration_.compute_slowdown_under_comm; }
  const Calibration& calibration() const { return calibration_; }
  const ClusterSpec& cluster() const { return cluster_; }
  double peak_flops() const { return peak_flops_; }  // dense peak of the compute dtype

 private:
  ClusterSpec cluster_;
  Calibration calibration_;
  double peak_flops_ = 0;
};

}  // namespace fsdpsim::planner
