// Predicted against measured: what `fsdpsim verify` prints.
//
// A Prediction is per-op durations, the timeline they give under the schedule's constraints,
// and the memory replay. The caller makes it from the same (Schedule, OpCosts) the runtime
// plays: `fsdpsim verify` times them with the analytic engine (sim/analytic.h), so verify
// compares the runtime against exactly what the simulator predicts.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "planner/device_memory.h"
#include "planner/memory.h"
#include "planner/schedule.h"
#include "runtime/runtime.h"

namespace fsdpsim::runtime {

struct Prediction {
  std::string source;              // where the durations came from, in words
  std::vector<double> op_seconds;  // per op, alone on its stream
  std::vector<OpTiming> timeline;  // from the step start
  double step_seconds = 0;
  // CPU issue in the timeline (sim::StepTiming): summed over the ops, and on the critical path.
  double cpu_issue_seconds = 0;
  double cpu_issue_on_critical_path_seconds = 0;
  planner::MemoryReport memory;  // planner::replay_memory
  // What the GPU holds outside the allocator, part by part, as `estimate` counts it
  // (planner::device_overhead); absent when nothing names the hardware (a schedule file played
  // with --durations and no --cluster): the device row then adds the assumed
  // planner::kDefaultDeviceOverheadBytes and says so.
  std::optional<planner::DeviceOverhead> device_overhead;
};

// all-gather, reduce-scatter, all-reduce, all-to-all, forward (compute_fwd), backward
// (compute_bwd and recompute), optimizer, copies (copy-in/out, h2d, d2h), NVMe swaps (nvme_read,
// nvme_write), wait.
std::string op_class(planner::OpKind kind);

struct VerifyRow {
  std::string name;
  int ops = 0;  // ops in the class (0 for the step and memory rows)
  double predicted = 0;
  double measured = 0;
  // (predicted - measured) / measured, in percent; nullopt when nothing was measured.
  std::optional<double> error_percent() const;
};

struct VerifyReport {
  std::string prediction_source;
  std::string backend, device;
  int ranks_played = 0;
  // Seconds summed over the class's ops, mean over ranks and steps: one row per class the
  // schedule has, so the rows' ops add up to the schedule's.
  std::vector<VerifyRow> op_classes;
  VerifyRow step;                           // seconds
  VerifyRow peak_allocated, peak_reserved;  // bytes (highest rank)
  // Host memory (pinned, pageable, their sum at its highest), bytes, highest rank: empty when
  // neither the replay nor the run holds any (no offload).
  std::vector<VerifyRow> host_memory;
  std::optional<VerifyRow>
      device_memory;  // cuda: reserved + the device overhead vs cudaMemGetInfo minus runtime scratch
  // The prediction's CPU issue that the backend did not play (the host backend sleeps the ops'
  // durations and takes no issue cost, docs/architecture.md "The executor contract"): summed over
  // the ops and on the predicted critical path; absent where the backend issues for real (cuda)
  // or the costs hold none (--durations).
  struct IssueNotPlayed {
    double cpu_issue_seconds = 0;
    double on_critical_path_seconds = 0;
  };
  std::optional<IssueNotPlayed> issue_not_played;
  std::vector<std::string> notes;
};

VerifyReport compare(const planner::Schedule& schedule, const Prediction& prediction, const RunResult& result);

// The host backend waits exactly each op's modelled duration (x the time scale), so what its ops
// measure beyond that is this host's overhead (threads waking, collectives' hand-offs, copies),
// not the model's error. When that overhead, summed over the op classes, reaches half the
// modelled durations (`kHostOverheadWarningFraction`), a warning saying so, in wall time and per
// op, and what to change (a larger --time-scale); nullopt otherwise and for other backends.
constexpr double kHostOverheadWarningFraction = 0.5;
std::optional<std::string> host_overhead_warning(const VerifyReport& report, double time_scale);
nlohmann::json verify_json(const VerifyReport& report);

}  // namespace fsdpsim::runtime
