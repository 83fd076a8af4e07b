// The memory of a training job outside the step: host memory per node under each offload
// option, the peaks of building and sharding the model (the scenario's `init`), and of saving a
// checkpoint (its `checkpoint`). The step itself is the Schedule's replay (planner/memory.h);
// these phases are one pass over the units each, worked from the frameworks' code as cited in
// job_memory.cpp and docs/memory-model.md ("Outside the step").
#pragma once

#include <string>
#include <vector>

#include "planner/collectives.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"

namespace fsdpsim::planner {

// Host memory per node that one offload option needs between steps (its state and staging
// buffers), and what it leaves on each GPU. Nodes are alike: each holds gpus_per_node ranks'
// partitions (rank 0's partition sizes, which padding makes the largest).
struct OffloadOption {
  std::string name;            // "none", "fsdp cpu_offload", "offload_optimizer=cpu", ...
  bool is_scenario = false;    // the scenario's own setting
  double pinned_bytes_per_node = 0;
  double pageable_bytes_per_node = 0;
  double nvme_bytes_per_node = 0;  // state kept on NVMe (ZeRO-Infinity)
  double device_state_bytes = 0;   // per GPU: parameters, gradients and optimizer state kept on it
  double host_bytes_per_node() const { return pinned_bytes_per_node + pageable_bytes_per_node; }
};
// The options of the scenario's framework: FSDP (none, cpu_offload) or, for DeepSpeed's layout
// (training.master_weights optimizer_state), none and the offload_optimizer / offload_param
// variants that its ZeRO stage allows.
std::vector<OffloadOption> offload_options(const Scenario& scenario, const Plan& plan);

// One phase of the job and its highest point: per GPU (allocated bytes, device overhead not
// included) and per node (host bytes; rank 0's node, which holds the most).
struct PhasePeak {
  std::string phase;              // "step", "init", "checkpoint save"
  double device_bytes = 0;
  std::string device_at;          // what holds the device peak, in words
  double host_bytes_per_node = 0;
  std::string host_at;
};

// Building the model and sharding it, under the scenario's `init`.
PhasePeak init_peak(const Scenario& scenario, const Plan& plan);

// Saving a checkpoint under the scenario's `checkpoint`: the peaks, and the bytes and time of
// the save. `pcie_gbps`: the device-to-host copy bandwidth (the calibration's).
struct CheckpointSave {
  PhasePeak peak;
  double rank0_host_bytes = 0;      // what rank 0's CPU holds at once
  double bytes_written_per_node = 0;  // the node that writes most (rank 0's for a full save)
  double bytes_written_total = 0;
  double gather_seconds = 0;   // full: the units' all-gathers, one after another (NCCL's model)
  double copy_seconds = 0;     // device-to-host copies on the writing node's busiest path
  double write_seconds = -1;   // bytes_written_per_node / storage bandwidth; -1: bandwidth not stated
  // Gather, copy and write in turn (the state dict is built unit by unit, then written).
  double seconds() const { return write_seconds < 0 ? -1 : gather_seconds + copy_seconds + write_seconds; }
};
// `nccl`: the calibration's NCCL figures, to time the full save's all-gathers (nullptr: not timed).
CheckpointSave checkpoint_save(const Scenario& scenario, const Plan& plan, const MemoryReport& step, double pcie_gbps,
                               const NcclParams* nccl = nullptr);

// The whole job against the hardware: each phase's device peak plus the device overhead against
// the GPU's memory, and its host bytes per node against the node's (when the cluster states
// it). The binding phase is the one with the least room (or the most overage).
struct JobFit {
  std::vector<PhasePeak> phases;  // step first
  bool fits = true;
  std::string binding_phase;
  std::string binding_resource;  // "GPU" or "host"
  double binding_margin_bytes = 0;  // negative: by how much it does not fit
};
JobFit job_fit(const std::vector<PhasePeak>& phases, double device_overhead_bytes, double gpu_memory_bytes,
               double host_memory_bytes);

// What the scenario could change to bring the job's binding phase down, when the step does not
// bind (the step's own changes are `estimate`'s advice): e.g. "checkpoint.offload_to_cpu true
// (each clone goes to the host as it is made)". Empty when the job fits, the step binds or no
// setting of that phase helps.
std::string job_remedy(const Scenario& sc, const JobFit& fit);

}  // namespace fsdpsim::planner
