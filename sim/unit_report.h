// An estimate per FSDP unit (`estimate --by-unit`, and `units[]` in `--json`): what each
// fully_shard / FullyShardedDataParallel unit holds and moves, and its time. PyTorch's
// FSDPMemTracker reports memory per module; this is the same question asked of the plan.
//
// Every figure is a sum over the schedule's allocations (Allocation::unit) and ops (Op::unit),
// so the rows plus the "outside any unit" row add up to the step's totals: parameters to the
// model's, persistent bytes to the memory at the start of the step, compute, communication and
// exposed communication seconds to the step timing's (tests/sim/unit_report_test.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "sim/estimate.h"

namespace fsdpsim::sim {

struct UnitRow {
  int unit = -1;              // -1: outside any unit (the step's other ops)
  std::string name;           // the unit's first wrapped module ("<root>"), or "(outside units)"
  int parent = -1;
  std::int64_t parameters = 0;  // parameters the unit owns (unpadded)
  // Persistent, per rank: parameters (sharded; replicated under NO_SHARD/ZERO1), optimizer
  // state (with a master copy when there is one), replicated gradient buffers (NO_SHARD/ZERO1);
  // on the GPU, or in host memory when offloaded (the offload's host bytes count here too).
  std::int64_t sharded_param_bytes = 0;
  std::int64_t optimizer_state_bytes = 0;
  std::int64_t replicated_grad_bytes = 0;
  // One gathered copy of the unit's parameters (the all-gather output, padding included; the
  // replicated parameters under NO_SHARD/ZERO1). 0 when never gathered.
  std::int64_t unsharded_param_bytes = 0;
  // Gradients per rank after reduction: the reduce-scatter's output (sharded), or the
  // replicated buffer.
  std::int64_t grad_bytes = 0;
  // What the unit's modules save for backward in one micro-step's forward (under checkpointing:
  // the checkpointed blocks' inputs).
  std::int64_t saved_activation_bytes = 0;
  // Per step (every micro-step), as NCCL counts them (all-gather: the output buffer).
  double all_gather_bytes = 0;
  double reduce_scatter_bytes = 0;
  double all_reduce_bytes = 0;
  int all_gathers = 0, reduce_scatters = 0, all_reduces = 0;
  // Time per step: its compute ops on the compute stream (forward, backward, recompute;
  // slowdown beside NCCL included), its communication ops (collectives and host copies, alone),
  // and the part of that communication the compute stream waited for.
  double compute_seconds = 0;
  double comm_seconds = 0;
  double exposed_comm_seconds = 0;
};

struct UnitReport {
  std::vector<UnitRow> units;  // by unit index (forward order)
  UnitRow outside;             // ops and allocations of no unit (the optimizer step, inputs, ...)
};

UnitReport unit_report(const Estimate& estimate);

// The report as a table ("Per FSDP unit (rank 0)"); units of equal figures in a row ("model.layers.0
// .. model.layers.31 (32 units, each)") are merged when `merge_equal` is set.
std::string unit_report_text(const UnitReport& report, bool merge_equal = true);
// `units[]` of estimate's --json: one object per unit, then the outside row.
nlohmann::json unit_report_json(const UnitReport& report);

}  // namespace fsdpsim::sim
