// One step estimated end to end: plan the schedule, replay its memory, time it with the
// analytic engine. This is what `estimate`, `sweep` and `validate` call per point.
#pragma once

#include <string>
#include <vector>

#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"

namespace fsdpsim::sim {

struct Estimate {
  planner::Plan plan;
  planner::MemoryReport memory;
  double device_overhead_bytes = 0;  // CUDA context + NCCL, outside the caching allocator
  double gpu_memory_bytes = 0;
  // Reserved memory plus the device overhead must fit in the GPU.
  double device_peak_bytes() const { return static_cast<double>(memory.peak_reserved_bytes) + device_overhead_bytes; }
  bool fits() const { return device_peak_bytes() <= gpu_memory_bytes; }
};

Estimate estimate_step(const planner::Scenario& scenario);

struct MicroBatchSearch {
  std::int64_t largest_fitting = 0;  // 0: not even micro-batch 1 fits
  std::vector<std::pair<std::int64_t, double>> tried;  // micro-batch -> device peak bytes
  double gpu_memory_bytes = 0;
};

// The largest micro-batch that fits, keeping the scenario's gradient accumulation (the
// global batch follows). Doubling, then bisection.
MicroBatchSearch find_max_micro_batch(const std::string& scenario_file, const std::vector<std::string>& overrides);

}  // namespace fsdpsim::sim
