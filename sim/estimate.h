// One step estimated end to end: plan the schedule, price its ops, replay its memory, time it
// with the analytic engine. This is what `estimate`, `simulate` and `validate` call per point;
// `simulate` then plays the same schedule and costs on the SimGrid engine (simulate_estimate).
#pragma once

#include <optional>

#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "planner/device_memory.h"
#include "planner/job_memory.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "planner/sweep_space.h"
#include "sim/analytic.h"
#include "sim/simgrid_engine.h"
#include "sim/simgrid_options.h"

namespace fsdpsim::sim {

struct Estimate {
  planner::Plan plan;
  planner::MemoryReport memory;
  // Outside the step's allocations: CUDA context, cuBLAS workspaces, NCCL's buffers per
  // communicator (planner/device_memory.h); device_overhead_bytes is its total.
  planner::DeviceOverhead overhead;
  double device_overhead_bytes = 0;
  double gpu_memory_bytes = 0;
  // Time: the calibration used, the ops' costs, the analytic engine's timing and memory on its clock.
  planner::ClusterSpec cluster;
  planner::Calibration calibration;
  planner::OpCosts costs;
  std::string attention_kernel;  // the fused attention kernel the cost model priced ("flash2", ...)
  std::string mfu_peak_dtype;    // the dense peak MFU divides by: "fp8" where some linear runs in fp8, else "bf16"
  // Distinct GEMM shapes (with dtype) the step runs, and how many of them the calibration's
  // measured gemm_table priced (the rest: the shape model).
  int gemm_shapes = 0;
  int gemm_shapes_from_table = 0;
  StepTiming timing;
  TimedMemory timed_memory;
  // The job outside the step (planner/job_memory.h): host memory per node under each offload
  // option, the init and checkpoint-save peaks, and the verdict over every phase.
  std::vector<planner::OffloadOption> offload_options;
  planner::PhasePeak init;
  std::optional<planner::CheckpointSave> checkpoint;  // when the scenario has a `checkpoint`
  planner::JobFit job;
  // The step's reserved memory plus the device overhead must fit in the GPU (`job` judges the
  // other phases and the host too).
  double device_peak_bytes() const { return static_cast<double>(memory.peak_reserved_bytes) + device_overhead_bytes; }
  bool fits() const { return device_peak_bytes() <= gpu_memory_bytes; }
};

// Plans, replays memory (capacity: GPU memory minus the device overhead) and
// times the step with the analytic engine (sim/analytic.h) and the scenario's cost model.
Estimate estimate_step(const planner::Scenario& scenario);

// The estimate's schedule and op costs on the SimGrid engine (nothing planned or priced again),
// with the estimate's analytic timing beside it (compare_with_analytic).
SimgridResult simulate_estimate(const Estimate& estimate, const SimgridOptions& options);

// estimate_step + simulate_estimate.
SimgridResult simulate_scenario(const planner::Scenario& scenario, const SimgridOptions& options);

// The largest value of one setting that fits with `headroom_bytes` to spare (device peak + headroom
// <= GPU memory), the scenario otherwise kept: doubling from the smallest value, then bisection
// (memory grows with the setting, so the values between a fitting and a failing one are bisected).
struct FitSearch {
  struct Trial {
    std::int64_t value = 0;
    double device_peak_bytes = 0;
    bool fits = false;  // device peak + headroom <= GPU memory
    bool near_capacity = false;  // it fits, but within the reserved model's tolerance (planner::near_capacity)
    int order = 0;      // when it was tried (0 first)
  };
  std::int64_t largest_fitting = 0;  // 0: not even the smallest value fits
  std::vector<Trial> tried;          // by value, ascending
  double gpu_memory_bytes = 0;
  double headroom_bytes = 0;
  bool capped = false;  // the largest value searched fits: the search stopped there
  std::string cap;      // what the largest value searched is, in words (set when it is not the search's own limit)
  std::int64_t global_batch_kept = 0;  // micro-batch search: the stated global batch it kept (0: accumulation kept)
};

// The largest micro-batch searched.
constexpr std::int64_t kMaxMicroBatchSearched = 4096;

// The largest micro-batch that fits. A stated global batch is kept: the micro-batches that divide
// each rank's share of it (the accumulation follows). Otherwise the scenario's gradient
// accumulation is kept (the global batch follows), values 1 up to kMaxMicroBatchSearched. Doubling
// over the values, then bisection.
FitSearch find_max_micro_batch(const planner::ScenarioTemplate& base, double headroom_bytes = 0);

// Sequences are searched in multiples of this: the query and key block of FlashAttention's
// kernels (planner/attention_model.h, kAttentionBlockRows), and the granularity training configs
// pick lengths at.
constexpr std::int64_t kSeqLenSearchStep = 128;
// The longest sequence searched when the model states no context: 2^21 tokens.
constexpr std::int64_t kMaxSeqLenSearched = std::int64_t{1} << 21;

// The longest sequence (a multiple of kSeqLenSearchStep) that fits, keeping the micro-batch,
// gradient accumulation and global batch in sequences. Up to the model's context where it states
// one (planner::model_context: a learned position table cannot go past it; a rotary model's stated
// context needs a length extension past it, which the model file does not describe), else up to
// kMaxSeqLenSearched; FitSearch::cap says which.
FitSearch find_max_seq_len(const planner::ScenarioTemplate& base, double headroom_bytes = 0);

}  // namespace fsdpsim::sim
