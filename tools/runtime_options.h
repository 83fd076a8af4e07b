// What `run`, `verify` and `calibrate` share: the micro-runtime's command-line options, and
// running a verb under a launcher (one process, or one per rank under mpirun/srun).
#pragma once

#include <CLI/CLI.hpp>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "planner/device_memory.h"
#include "planner/op_costs.h"
#include "planner/schedule.h"
#include "runtime/launch.h"
#include "runtime/runtime.h"
#include "tools/scenario_input.h"

namespace fsdpsim::tools {

struct RuntimeCommandOptions {
  std::string schedule, durations, trace;
  // --scenario or the one-line form (--model NAME --gpus 64xH100), the short options and --set;
  // its --cluster is the one-line scenario's (refused with --schedule).
  ScenarioInputOptions input;
  bool json = false, no_check_data = false;
  runtime::RunOptions run;
  std::string launcher = "auto";
  CLI::Option* device = nullptr;
  CLI::Option* memory_capacity = nullptr;  // given: both sides of verify hold at most this reserved
};

// Registers the options `run` and `verify` share.
void add_runtime_options(CLI::App* cmd, RuntimeCommandOptions& o);

// What `run` and `verify` play (the executor contract: a schedule and its op costs):
// - the schedule: a --schedule file, or a scenario planned now (--scenario FILE or the one-line
//   form, with --set overrides);
// - its costs: --durations (a file of seconds per op), else the scenario's cost model. A schedule
//   file needs --durations: it does not carry what its pricing needs (the model's kernels, the
//   execution mode, the optimizer and attention kernels, the calibration), and --cluster is refused
//   with it rather than price it differently from its scenario.
struct PlayableStep {
  planner::Schedule schedule;
  planner::OpCosts costs;
  std::string file;  // the schedule's or scenario's file
  // The device overhead `estimate` adds (planner/device_memory.h), for verify's device row:
  // from the scenario; absent for a schedule file, which names no hardware.
  std::optional<planner::DeviceOverhead> device_overhead;
  // Reserved bytes a rank may hold, for the prediction's replay and the host backend alike (0:
  // unbounded): --memory-capacity when given, else what `estimate` replays with, the GPU's memory
  // less the device overhead, where a scenario names the GPU. `capacity_source` says
  // which, in words.
  double capacity_bytes = 0;
  std::string capacity_source;
};
PlayableStep load_playable_step(const RuntimeCommandOptions& o);

// The step's capacity in words: "a capacity of 78.11 GiB (...) of reserved memory per rank (the
// GPU's memory less ...)", or "no capacity (--memory-capacity 0)".
std::string capacity_text(const PlayableStep& step);

// The RunOptions the command line asks for under `launch`, to play `step`.
runtime::RunOptions run_options(const RuntimeCommandOptions& o, const PlayableStep& step,
                                const runtime::Launch& launch);

// Writes the measured steps as a Chrome trace.
void write_trace(const std::string& path, const planner::Schedule& s, const runtime::RunResult& r);

// Resolves `launcher` and runs `verb`. Under mpirun/srun every process runs it: process 0
// alone reports, and an error ends every process with one message (runtime/launch.h), exit
// status 2 for bad input and 1 otherwise.
void run_under_launcher(const std::string& launcher, const std::function<void(const runtime::Launch&)>& verb);

}  // namespace fsdpsim::tools
