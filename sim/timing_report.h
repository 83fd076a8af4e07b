// The step-time part of `fsdpsim estimate`'s output, for the CLI to print: a JSON object
// with the stable keys (time.*, throughput.*) and a human-readable table.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "sim/estimate.h"

namespace fsdpsim::sim {

// The one writer of a step's timing in the CLI's JSON (estimate's, and simulate's for each
// engine): {"time": {step_seconds, compute_seconds, exposed_comm_seconds, optimizer_seconds,
//                    exposed_other_seconds, comm_seconds, interference_seconds,
//                    cpu_issue_seconds, exposed_comm_by_unit_seconds (per unit id),
//                    exposed_comm_by_phase: {forward, backward, optimizer},
//                    critical_path: {compute_seconds, communication_seconds, other_gpu_seconds,
//                                    cpu_issue_seconds, host_seconds, segments}},
//           "throughput": {tokens_per_second_per_gpu, mfu, hfu, model_flops_per_step,
//                          hardware_flops_per_step, peak_flops, flop_convention}}
// (model and hardware FLOPs are one rank's per step).
nlohmann::json timing_json(const StepTiming& timing);

// A table: the step and its breakdown (compute, exposed communication, optimizer, other),
// throughput and MFU, what the critical path is made of, the units with the most exposed
// communication (up to `top_units`), and the calibration's name.
std::string timing_text(const Estimate& estimate, int top_units = 5);

// Every op: id, stream, name, issue, start, end, nominal and actual milliseconds and what
// started it. For --verbose output and debugging.
std::string op_timing_table(const Estimate& estimate);

}  // namespace fsdpsim::sim
