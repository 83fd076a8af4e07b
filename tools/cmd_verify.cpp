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

// The prediction `verify` checks: the analytic engine's timeline of the same schedule and op
// costs the runtime plays (the executor contract), and the planner's memory replay within the
// capacity the runtime plays with (estimate's, unless --memory-capacity says otherwise).
runtime::Prediction predict(const PlayableStep& step) {
  const planner::Schedule& s = step.schedule;
  const planner::OpCosts& costs = step.costs;
  const sim::StepTiming timing = sim::simulate(s, costs);
  runtime::Prediction p;
  p.source = costs.source + ", timed by the analytic engine";
  p.op_seconds = costs.duration_seconds;
  p.timeline.reserve(timing.ops.size());
  for (const sim::OpTiming& t : timing.ops) p.timeline.push_back({t.start, t.end});
  p.step_seconds = timing.step_seconds;
  p.cpu_issue_seconds = timing.cpu_issue_seconds;
  p.cpu_issue_on_critical_path_seconds = timing.critical_path_summary.cpu_issue_seconds;
  p.memory = planner::replay_memory(s, step.capacity_bytes);
  p.device_overhead = step.device_overhead;
  return p;
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
  for (const runtime::VerifyRow& row : v.host_memory)
    t.add({row.name, "", gib(row.predicted), gib(row.measured), error_text(row)});
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
  add_runtime_options(cmd, *o);
  cmd->callback([o] { run_under_launcher(o->launcher, [&](const runtime::Launch& launch) { run_verify(*o, launch); }); });
}

void run_verify(const RuntimeCommandOptions& o, const runtime::Launch& launch) {
  PlayableStep loaded = load_playable_step(o);
  const runtime::Prediction prediction = predict(loaded);
  runtime::RunOptions run = run_options(o, loaded, launch);
  run.costs = std::move(loaded.costs);  // the host backend waits exactly the predicted durations
  runtime::RunResult result = runtime::run_schedule(loaded.schedule, run);
  if (!result.reports()) return;
  if (!o.trace.empty()) write_trace(o.trace, loaded.schedule, result);
  runtime::VerifyReport report = runtime::compare(loaded.schedule, prediction, result);
  report.notes.push_back("memory: predicted within " + capacity_text(loaded) +
                         (result.backend == "host" ? ", which the host backend played too" : ""));
  const std::optional<std::string> overhead = runtime::host_overhead_warning(report, result.time_scale);
  if (o.json) {
    nlohmann::json j = runtime::verify_json(report);
    j["warnings"] = overhead ? nlohmann::json::array({*overhead}) : nlohmann::json::array();
    j["schedule"] = loaded.schedule.name;
    j["world_size"] = loaded.schedule.world_size;
    std::cout << j.dump(2) << "\n";
  } else {
    print_report(loaded.schedule, report);
    if (overhead) std::cout << "WARNING: " << *overhead << "\n";
  }
}

}  // namespace fsdpsim::tools
