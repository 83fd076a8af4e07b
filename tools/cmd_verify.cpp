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
#include "tools/runtime_options.h"

namespace fsdpsim::tools {

namespace {

// The prediction `verify` checks, and the per-op durations the host backend plays:
// - a --durations file: those durations, played through the schedule's constraints;
// - a scenario: the cost model's durations (the scenario's calibration) and the analytic
//   engine's timeline, exactly what `fsdpsim estimate` predicts for it;
// - a bare schedule file: nominal rates (runtime::NominalRates), which need no scenario.
struct PredictionAndDurations {
  runtime::Prediction prediction;
  std::vector<double> durations;
};

PredictionAndDurations predict(const RuntimeCommandOptions& o, const runtime::LoadedSchedule& loaded) {
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

void run_verify(const RuntimeCommandOptions& o, const runtime::Launch& launch);

void add_verify_command(CLI::App& app) {
  auto o = std::make_shared<RuntimeCommandOptions>();
  CLI::App* cmd =
      app.add_subcommand("verify", "Predict a step, run it with the micro-runtime, print predicted vs measured");
  add_runtime_options(cmd, *o, "the cost model (with --scenario) or nominal rates (a bare --schedule)");
  cmd->callback([o] { run_under_launcher(o->launcher, [&](const runtime::Launch& launch) { run_verify(*o, launch); }); });
}

void run_verify(const RuntimeCommandOptions& o, const runtime::Launch& launch) {
  runtime::LoadedSchedule loaded = runtime::load_schedule_or_scenario(o.schedule, o.scenario, o.overrides);
  auto [prediction, durations] = predict(o, loaded);
  runtime::RunOptions run = run_options(o, launch);
  run.durations_seconds = durations;  // the host backend waits exactly the predicted durations
  runtime::RunResult result = runtime::run_schedule(loaded.schedule, run);
  if (!result.reports()) return;
  if (!o.trace.empty()) write_trace(o.trace, loaded.schedule, result);
  runtime::VerifyReport report = runtime::compare(loaded.schedule, prediction, result);
  if (o.json) {
    nlohmann::json j = runtime::verify_json(report);
    j["schedule"] = loaded.schedule.name;
    j["world_size"] = loaded.schedule.world_size;
    std::cout << j.dump(2) << "\n";
  } else {
    print_report(loaded.schedule, report);
  }
}

}  // namespace fsdpsim::tools
