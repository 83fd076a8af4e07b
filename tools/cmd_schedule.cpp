// `fsdpsim schedule`: export the step's Schedule IR as JSON (what `run` executes), and with
// --durations-out the cost model's seconds per op, so that `run`/`verify --schedule FILE
// --durations FILE` play the file as the scenario's costs price it (a schedule file carries no
// costs: docs/runtime.md, "Modeled durations").
#include <iostream>

#include "models/json_format.h"
#include "models/json_input.h"
#include "planner/cost_model.h"
#include "planner/op_costs.h"
#include "planner/plan.h"
#include "tools/commands.h"
#include "tools/output_file.h"
#include "tools/scenario_input.h"

namespace fsdpsim::tools {

void add_schedule_command(CLI::App& app) {
  struct Options {
    ScenarioInputOptions input;  // --scenario, or --model with --gpus (tools/scenario_input.h)
    std::string output;
    std::string durations_output;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("schedule", "Export one step's schedule (ops, streams, dependencies, memory events) as JSON");
  add_scenario_input_options(cmd, o->input);
  cmd->add_option("-o,--output", o->output, "Write to this file instead of stdout");
  cmd->add_option("--durations-out", o->durations_output,
                  "Also write the cost model's seconds per op ({\"durations_seconds\": [...]}), for run/verify "
                  "--schedule FILE --durations FILE");
  cmd->callback([o] {
    const ScenarioInput input = resolve_scenario_input(o->input);
    const ParsedScenarioInput parsed = parse_scenario_input(input);
    const planner::Scenario& scenario = *parsed.scenario;
    planner::Plan plan = planner::plan_step(scenario);
    if (!o->durations_output.empty()) {
      const planner::OpCosts costs = planner::price_ops(plan.schedule, planner::CostModel(scenario));
      const nlohmann::json durations = {
          {"_source", "fsdpsim schedule --durations-out: the cost model's seconds per op (on its stream, nothing "
                      "else running) for " + input.file + "; CPU issue costs are not durations"},
          {"durations_seconds", costs.duration_seconds}};
      write_output_file(o->durations_output, durations.dump(1) + "\n", "the durations file");
      std::cerr << "wrote " << costs.duration_seconds.size() << " durations to " << o->durations_output << "\n";
    }
    std::string text = models::format_json(planner::schedule_to_json(plan.schedule), 1, 160) + "\n";
    if (o->output.empty()) {
      std::cout << text;
      return;
    }
    write_output_file(o->output, text, "the schedule file");
    std::cerr << "wrote " << plan.schedule.ops.size() << " ops, " << plan.schedule.allocations.size()
              << " allocations to " << o->output << "\n";
  });
}

}  // namespace fsdpsim::tools
