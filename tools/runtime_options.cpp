#include "tools/runtime_options.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <optional>
#include <stdexcept>

#include "planner/cost_model.h"
#include "planner/device_memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "sim/scenario_loader.h"
#include "tools/format.h"
#include "tools/option_checks.h"
#include "tools/output_file.h"

namespace fsdpsim::tools {

void add_runtime_options(CLI::App* cmd, RuntimeCommandOptions& o) {
  cmd->add_option("--schedule", o.schedule, "Schedule JSON file (what `fsdpsim schedule` writes)");
  add_scenario_input_options(cmd, o.input);
  cmd->get_option("--cluster")
      ->description("Cluster: a catalog name (`fsdpsim clusters`) or a cluster JSON file, the one-line scenario's "
                    "(with --gpus)");
  cmd->add_option("--backend", o.run.backend, "host (threads, shared memory) or cuda (GPUs, NCCL)")
      ->check(CLI::IsMember({"host", "cuda"}))
      ->capture_default_str();
  cmd->add_option(
      "--virtual-world", o.run.virtual_world,
      "Play rank 0 of a world of N (the schedule's world size) on one device; collectives become local copies")
      ->check(CLI::Range(1, 1 << 20));
  cmd->add_option(
      "--durations", o.durations,
      "JSON file: modeled seconds per op (an array, or {\"durations_seconds\": [...]}); default: the cost model's");
  // From 1e-6 (a modelled millisecond slept for a nanosecond: every op is the host's own overhead)
  // to 1e6: `run --time-scale 1e-300` printed a step of 63 digits with no warning (the session-38
  // input audit).
  cmd->add_option("--time-scale", o.run.time_scale,
                  "host: wall seconds per modeled second, from 1e-6 to 1e6 (0.01 plays 100x faster)")
      ->check(number_within(1e-6, false, 1e6,
                            "a positive finite number from 1e-6 to 1e6 (wall seconds per modelled second)",
                            "SCALE in [1e-6, 1e6]"))
      ->capture_default_str();
  cmd->add_option("--byte-scale", o.run.byte_scale, "host: real bytes a collective moves per planned byte")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--max-buffer-bytes", o.run.max_buffer_bytes,
                  "host: cap on real bytes per collective buffer (0: none)")
      ->check(CLI::Range(std::int64_t{0}, std::int64_t{1} << 40))
      ->capture_default_str();
  cmd->add_flag("--no-check-data", o.no_check_data, "host: do not check collective outputs");
  o.memory_capacity = cmd->add_option("--memory-capacity", o.run.capacity_bytes,
                                      "Reserved bytes a rank may hold (0: unbounded); default: estimate's, the GPU's "
                                      "memory less the device overhead, where a scenario names the GPU")
                          ->check(non_negative_number());
  cmd->add_option("--timeout", o.run.timeout_seconds, "Seconds any one wait may last before the run is aborted")
      ->check(positive_number())
      ->capture_default_str();
  cmd->add_option("--warmup", o.run.warmup_steps, "Steps played before measuring (default: 1 on cuda; on host 1 when the schedule makes optimizer state at its first step, else 0)")
      ->check(CLI::Range(0, 1000000));
  cmd->add_option("--steps", o.run.steps, "Measured steps")->check(CLI::Range(1, 1000000))->capture_default_str();
  cmd->add_option("--launcher", o.launcher,
                  "single (this process plays every rank), mpi (one process per rank under mpirun/srun; rank 0 "
                  "reports), or auto (mpi when mpirun/srun started several processes)")
      ->check(CLI::IsMember({"auto", "single", "mpi"}))
      ->capture_default_str();
  o.device = cmd->add_option("--device", o.run.first_device,
                             "cuda: rank r runs on device N + r (mpi launcher: this process runs on device N; "
                             "default: its local rank on the node)")
                 ->check(CLI::Range(0, 1023))
                 ->capture_default_str();
  cmd->add_option("--gemm-dim", o.run.gemm_dim, "cuda: compute as bf16 GEMMs of this size cubed")
      ->check(CLI::Range(64, 65536))
      ->capture_default_str();
  cmd->add_option("--trace", o.trace, "Write a Chrome trace (chrome://tracing, Perfetto) of the measured steps");
  cmd->add_flag("--json", o.json, "Print one JSON object for tools");
  // Fault injection for the tests (tests/runtime/mpi_test.cpp); not shown in --help.
  cmd->add_option("--test-stall-rank", o.run.hooks.stall_rank)->check(CLI::Range(0, INT_MAX))->group("");
  cmd->add_option("--test-stall-op", o.run.hooks.stall_op)->check(CLI::Range(0, INT_MAX))->group("");
  cmd->add_option("--test-corrupt-rank", o.run.hooks.corrupt_rank)->check(CLI::Range(0, INT_MAX))->group("");
  cmd->add_option("--test-corrupt-op", o.run.hooks.corrupt_op)->check(CLI::Range(0, INT_MAX))->group("");
}

namespace {

// The scenario options a bare --schedule cannot take: it names no model, and its GPUs are its own.
void refuse_scenario_options_for_a_schedule(const ScenarioInputOptions& in) {
  if (!in.scenario.empty() || !in.model.empty() || !in.gpus.empty())
    throw InputError::option("--schedule", "give either --schedule FILE or a scenario (--scenario FILE, or --model "
                                           "NAME --gpus 64xH100), not both");
  if (!command_line_overrides(in).empty())
    throw InputError::option("--set (and --seq-len, --micro-batch, ...)",
                             "applies to a scenario, not to a schedule file (plan it again: fsdpsim schedule ... --set "
                             "... -o FILE)");
}

// A schedule file holds the ops, not what pricing them needs: the model's kernel lists, its
// execution mode (torch.compile), the optimizer kernel, the attention kernel, the calibration. A
// cluster's cost model without them priced GPT-2 on 8 H100s at 6.03 ms against the scenario's
// 20.09 ms (the session-38 audit), so a schedule file is played with given durations only.
constexpr const char* kPricingNeedsTheScenario =
    "a schedule file does not carry what pricing its ops needs (the model's kernels, torch.compile, the optimizer "
    "and attention kernels, the calibration), so it would be priced differently from the scenario that planned it: "
    "give that scenario instead (--scenario FILE, or --model NAME --gpus 8xH100 with its options) or --durations FILE "
    "(seconds per op)";

// The one capacity both sides of `verify` replay and play with (PlayableStep::capacity_bytes):
// --memory-capacity, else estimate's (sim/estimate.cpp), else unbounded.
void set_capacity(PlayableStep& step, const RuntimeCommandOptions& o, double gpu_memory_bytes) {
  if (o.memory_capacity && o.memory_capacity->count() > 0) {
    step.capacity_bytes = o.run.capacity_bytes;
    step.capacity_source = step.capacity_bytes > 0 ? "--memory-capacity" : "--memory-capacity 0";
  } else if (gpu_memory_bytes > 0 && step.device_overhead) {
    step.capacity_bytes = std::max(0.0, gpu_memory_bytes - step.device_overhead->total_bytes);
    step.capacity_source = "the GPU's memory less the device overhead, as estimate replays";
  } else {
    step.capacity_source = "a schedule file names no GPU; --memory-capacity sets one";
  }
}

}  // namespace

PlayableStep load_playable_step(const RuntimeCommandOptions& o) {
  if (o.schedule.empty() && !names_a_scenario(o.input))
    throw InputError::option("--schedule", "give --schedule FILE, or a scenario: --scenario FILE, or --model NAME "
                                           "--gpus 64xH100");
  PlayableStep step;
  std::optional<planner::CostModel> cost;
  double gpu_memory_bytes = 0;  // 0: nothing names the GPU
  if (!o.schedule.empty()) {
    refuse_scenario_options_for_a_schedule(o.input);
    step.file = o.schedule;
    step.schedule = runtime::load_schedule(o.schedule);
    if (!o.input.cluster.empty()) throw InputError::option("--cluster", kPricingNeedsTheScenario);
    if (o.durations.empty()) throw InputError::option("--schedule", kPricingNeedsTheScenario);
  } else {
    const ScenarioInput input = resolve_scenario_input(o.input);
    const planner::Scenario scenario = *parse_scenario_input(input).scenario;
    step.file = input.file;
    step.schedule = planner::plan_step(scenario).schedule;
    runtime::check_playable(step.schedule, input.file);
    if (o.durations.empty()) cost.emplace(scenario);
    step.device_overhead = cost ? planner::device_overhead(scenario, step.schedule, *cost)
                                : planner::device_overhead(scenario, step.schedule, planner::CostModel(scenario));
    gpu_memory_bytes = scenario.cluster.gpu.memory_bytes;
  }
  set_capacity(step, o, gpu_memory_bytes);
  if (cost) step.costs = planner::price_ops(step.schedule, *cost);
  else
    step.costs = planner::costs_from_durations(step.schedule, runtime::load_durations(o.durations, step.schedule),
                                               "durations from " + o.durations);
  return step;
}

std::string capacity_text(const PlayableStep& step) {
  if (step.capacity_bytes <= 0) return "no capacity (" + step.capacity_source + ")";
  return "a capacity of " + gib_and_bytes(static_cast<std::int64_t>(step.capacity_bytes)) +
         " of reserved memory per rank (" + step.capacity_source + ")";
}

runtime::RunOptions run_options(const RuntimeCommandOptions& o, const PlayableStep& step,
                                const runtime::Launch& launch) {
  runtime::RunOptions run = o.run;
  run.capacity_bytes = step.capacity_bytes;
  run.launcher = launch.launcher;
  if (o.device->count() > 0) run.mpi_device = run.first_device;
  run.check_data = !o.no_check_data;
  return run;
}

void write_trace(const std::string& path, const planner::Schedule& s, const runtime::RunResult& r) {
  write_output_file(path, runtime::trace_json(s, r).dump() + "\n", "the trace file");
}

void run_under_launcher(const std::string& launcher, const std::function<void(const runtime::Launch&)>& verb) {
  const runtime::Launch launch = runtime::resolve_launch(launcher);
  try {
    verb(launch);
  } catch (const InputError& e) {
    if (launch.mpi()) runtime::end_all_processes(e.what(), 2);
    throw;
  } catch (const std::exception& e) {
    if (launch.mpi()) runtime::end_all_processes(e.what(), 1);
    throw;
  }
}

}  // namespace fsdpsim::tools
