// Internal to the SimGrid engine: the step summary computed from op timings (the same
// definitions as the analytic engine's StepTiming: breakdown, exposed communication by unit
// and phase, critical path from the constraints that set each start, throughput).
#pragma once

#include "planner/schedule.h"
#include "sim/analytic.h"

namespace fsdpsim::sim {

// `t.ops` holds every op's times and constraints; `cpu_end` is when the CPU finished issuing.
// Fills every other field of `t`.
void summarize_step(const planner::Schedule& schedule, StepTiming& t, double cpu_end, double bf16_peak_flops);

}  // namespace fsdpsim::sim
