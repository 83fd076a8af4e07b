// A timed step as a Chrome / Perfetto trace (the Trace Event Format's JSON object form:
// {"traceEvents": [...], "displayTimeUnit": "ms", "otherData": {...}}), openable in
// ui.perfetto.dev or chrome://tracing.
//
// Layout: one process per rank class; in it one thread for the CPU issue thread (tid 0:
// each op's issue, and host ops such as the CPU optimizer) and one per stream the step uses
// (tid 1 + planner::Stream). Ops are complete events ("ph": "X") named after the op and its
// module ("fwd layers.3", "all-gather layers.3"), category = op kind, with args: op id,
// kind, unit, module, phase, micro-step, FLOPs, attention FLOPs, HBM bytes, collective
// bytes and process group, nominal and actual microseconds, what started it, and the bytes
// it allocates and frees. Memory is a counter track ("ph": "C") of allocated bytes, and one
// of bytes by category (stacked in chrome://tracing), sampled at each op's issue time; an
// instant event marks the peak. Times are microseconds from the start of the step.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/schedule.h"
#include "sim/analytic.h"

namespace fsdpsim::sim {

struct Estimate;

struct TraceProcess {
  std::string name;  // e.g. "rank class 0 (1024 ranks): llama3.1-70b"
  const planner::Schedule* schedule = nullptr;
  const StepTiming* timing = nullptr;
};

nlohmann::json chrome_trace(const std::vector<TraceProcess>& processes);
// One rank class: the estimate's schedule and timing; `process_name` defaults to
// "rank class 0 (N ranks): <schedule name>".
nlohmann::json chrome_trace(const Estimate& estimate, const std::string& process_name = "");

}  // namespace fsdpsim::sim
