// `fsdpsim verify`: predict a step, run it with the micro-runtime, and print predicted
// against measured per op class (all-gather, reduce-scatter, forward, backward, optimizer,
// ...), step time and peak memory, with errors in percent.
#include <cstdio>
#include <fstream>
#include <iostream>

#include "models/json_input.h"
#include "runtime/launch.h"
#include "runtime/runtime.h"
#include "runtime/verify.h"
#include "sim/analytic.h"
#include "planner/cost_model.h"
#include "tools/commands.h"
#include "tools/format.h"

namespace fsdpsim::tools {

namespace {

struct VerifyCommandOptions {
  std::string schedule, scenario, durations, trace;
  std::vector<std::string> overrides;
  bool json = false, no_check_data = false;
  runtime::RunOptions run;
  std::string launcher = "auto";
  CLI::Option* device = nullptr;
};

// The options `run` and `verify` share (registered alike in tools/cmd_run.cpp).
void add_runtime_options(CLI::App* cmd, VerifyCommandOptions& o) {
  cmd->add_option("--schedule", o.schedule, "Schedule JSON file (what `fsdpsim schedule` writes)");
  cmd->add_option("-s,--scenario", o.scenario, "Scenario JSON file: plan it, then run the schedule");
  cmd->add_option("--set", o.overrides, "Override a scenario field: a.b.c=value (repeatable)");
  cmd->add_option("--backend", o.run.backend, "host (threads, shared memory) or cuda (GPUs, NCCL)")
      ->check(CLI::IsMember({"host", "cuda"}))
      ->capture_default_str();
  cmd->add_option(
      "--virtual-world", o.run.virtual_world,
      "Play rank 0 of a world of N (the schedule's world size) on one device; collectives become local copies");
  cmd->add_option(
      "--durations", o.durations,
      "JSON file: modeled seconds per op (an array, or {\"durations_seconds\": [...]}); default: the cost model "
      "(with --scenario) or nominal rates (a bare --schedule)");
  cmd->add_option("--time-scale", o.run.time_scale, "host: wall seconds per modeled second (0.01 plays 100x faster)")
      ->capture_default_str();
  cmd->add_option("--byte-scale", o.run.byte_scale, "host: real bytes a collective moves per planned byte")
      ->capture_default_str();
  cmd->add_option("--max-buffer-bytes", o.run.max_buffer_bytes,
                  "host: cap on real bytes per collective buffer (0: none)")
      ->capture_default_str();
  cmd->add_flag("--no-check-data", o.no_check_data, "host: do not check collective outputs");
  cmd->add_option("--memory-capacity", o.run.capacity_bytes, "host: reserved bytes a rank may hold (0: unbounded)");
  cmd->add_option("--timeout", o.run.timeout_seconds, "Seconds any one wait may last before the run is aborted")
      ->capture_default_str();
  cmd->add_option("--warmup", o.run.warmup_steps, "Steps played before measuring (default: 0 on host, 1 on cuda)");
  cmd->add_option("--steps", o.run.steps, "Measured steps")->capture_default_str();
  cmd->add_option("--launcher", o.launcher,
                  "single (this process plays every rank), mpi (one process per rank under mpirun/srun; rank 0 "
                  "reports), or auto (mpi when mpirun/srun started several processes)")
      ->check(CLI::IsMember({"auto", "single", "mpi"}))
      ->capture_default_str();
  o.device = cmd->add_option("--device", o.run.first_device,
                             "cuda: rank r runs on device N + r (mpi launcher: this process runs on device N; "
                             "default: its local rank on the node)")
                 ->capture_default_str();
  cmd->add_option("--gemm-dim", o.run.gemm_dim, "cuda: compute as bf16 GEMMs of this size cubed")
      ->capture_default_str();
  cmd->add_option("--trace", o.trace, "Write a Chrome trace (chrome://tracing, Perfetto) of the measured steps");
  cmd->add_flag("--json", o.json, "Print one JSON object for tools");
  // Fault injection for the tests (tests/runtime/mpi_test.cpp); not shown in --help.
  cmd->add_option("--test-stall-rank", o.run.hooks.stall_rank)->group("");
  cmd->add_option("--test-stall-op", o.run.hooks.stall_op)->group("");
  cmd->add_option("--test-corrupt-rank", o.run.hooks.corrupt_rank)->group("");
  cmd->add_option("--test-corrupt-op", o.run.hooks.corrupt_op)->group("");
}

// The prediction `verify` checks, and the per-op durations the host backend plays:
// - a --durations file: those durations, played through the schedule's constraints;
// - a scenario: the cost model's durations (the scenario's calibration) and the analytic
//   engine's timeline, exactly what `fsdpsim estimate` predicts for it;
// - a bare schedule file: nominal rates (runtime::NominalRates), which need no scenario.
struct PredictionAndDurations {
  runtime::Prediction prediction;
  std::vector<double> durations;
};

PredictionAndDurations predict(const VerifyCommandOptions& o, const runtime::LoadedSchedule& loaded) {
  const planner::Schedule& s = loaded.schedule;
  if (!o.durations.empty()) {
    std::vector<double> d = runtime::load_durations(o.durations, s);
    return {runtime::predict_from_durations(s, d, "durations from " + o.durations + ", played through the schedule"),
            d};
  }
  if (!loaded.scenario) {
    std::vector<double> d = runtime::nominal_durations(s);
    return {runtime::predict_from_durations(
                s, d, "nominal rates (runtime::NominalRates; no scenario, so no cost model), played through the schedule"),
            d};
  }
  const planner::CostModel cost(*loaded.scenario);
  const sim::EngineInputs inputs = sim::engine_inputs(s, cost);
  const sim::StepTiming timing = sim::simulate(s, inputs, cost.bf16_peak_flops());
  runtime::Prediction p;
  p.source = "cost model (calibration: " + cost.calibration().name + ") timed by the analytic engine";
  p.op_seconds = inputs.duration_seconds;
  p.timeline.reserve(timing.ops.size());
  for (const sim::OpTiming& t : timing.ops) p.timeline.push_back({t.start, t.end});
  p.step_seconds = timing.step_seconds;
  p.memory = planner::replay_memory(s);
  return {std::move(p), inputs.duration_seconds};
}

std::string error_text(const runtime::VerifyRow& row) {
  auto e = row.error_percent();
  if (!e) return "n/a";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", *e);
  return buf;
}

void print_report(const planner::Schedule& s, const runtime::VerifyReport& v) {
  std::cout << "verify: " << (s.name.empty() ? std::string("schedule") : s.name) << ", " << s.ops.size()
            << " ops, world of " << s.world_size << "\n";
  std::cout << "measured: backend " << v.backend << " (" << v.device << ")\n";
  std::cout << "predicted: " << v.prediction_source << "\n\n";
  Table t({"", "ops", "predicted", "measured", "error"});
  for (const runtime::VerifyRow& row : v.op_classes)
    t.add(
        {row.name, std::to_string(row.ops), seconds_text(row.predicted), seconds_text(row.measured), error_text(row)});
  t.add({v.step.name, "", seconds_text(v.step.predicted), seconds_text(v.step.measured), error_text(v.step)});
  for (const runtime::VerifyRow* row : {&v.peak_allocated, &v.peak_reserved})
    t.add({row->name, "", gib(row->predicted), gib(row->measured), error_text(*row)});
  if (v.device_memory)
    t.add({v.device_memory->name, "", gib(v.device_memory->predicted), gib(v.device_memory->measured),
           error_text(*v.device_memory)});
  std::cout << t.str();
  std::cout << "\nop classes: seconds summed over the class's ops (each alone on its stream), mean over ranks; "
               "error = (predicted - measured) / measured\n";
  for (const std::string& n : v.notes) std::cout << "note: " << n << "\n";
}

}  // namespace

void run_verify(const VerifyCommandOptions& o, const runtime::Launch& launch);

void add_verify_command(CLI::App& app) {
  auto o = std::make_shared<VerifyCommandOptions>();
  CLI::App* cmd =
      app.add_subcommand("verify", "Predict a step, run it with the micro-runtime, print predicted vs measured");
  add_runtime_options(cmd, *o);
  cmd->callback([o] {
    // Under mpirun/srun every process runs this: process 0 alone reports, and an error ends
    // every process with one message (runtime/launch.h).
    const runtime::Launch launch = runtime::resolve_launch(o->launcher);
    try {
      run_verify(*o, launch);
    } catch (const InputError& e) {
      if (launch.mpi()) runtime::end_all_processes(e.what(), 2);
      throw;
    } catch (const std::exception& e) {
      if (launch.mpi()) runtime::end_all_processes(e.what(), 1);
      throw;
    }
  });
}

void run_verify(const VerifyCommandOptions& opts, const runtime::Launch& launch) {
  const VerifyCommandOptions* o = &opts;
  {
    runtime::LoadedSchedule loaded = runtime::load_schedule_or_scenario(o->schedule, o->scenario, o->overrides);
    auto [prediction, durations] = predict(*o, loaded);
    runtime::RunOptions run = o->run;
    run.launcher = launch.launcher;
    if (o->device->count() > 0) run.mpi_device = run.first_device;
    run.check_data = !o->no_check_data;
    run.durations_seconds = durations;  // the host backend waits exactly the predicted durations
    runtime::RunResult result = runtime::run_schedule(loaded.schedule, run);
    if (!result.reports()) return;
    if (!o->trace.empty()) {
      std::ofstream out(o->trace);
      if (!out) throw InputError(o->trace, "", "cannot write the file");
      out << runtime::trace_json(loaded.schedule, result).dump() << "\n";
    }
    runtime::VerifyReport report = runtime::compare(loaded.schedule, prediction, result);
    if (o->json) {
      nlohmann::json j = runtime::verify_json(report);
      j["schedule"] = loaded.schedule.name;
      j["world_size"] = loaded.schedule.world_size;
      std::cout << j.dump(2) << "\n";
    } else {
      print_report(loaded.schedule, report);
    }
  }
}

}  // namespace fsdpsim::tools
