// `fsdpsim schedule`: export the step's Schedule IR as JSON (what `run` executes).
#include <iostream>

#include "models/json_format.h"
#include "models/json_input.h"
#include "planner/plan.h"
#include "tools/commands.h"
#include "tools/output_file.h"
#include "tools/scenario_input.h"

namespace fsdpsim::tools {

void add_schedule_command(CLI::App& app) {
  struct Options {
    ScenarioInputOptions input;  // --scenario, or --model with --gpus (tools/scenario_input.h)
    std::string output;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("schedule", "Export one step's schedule (ops, streams, dependencies, memory events) as JSON");
  add_scenario_input_options(cmd, o->input);
  cmd->add_option("-o,--output", o->output, "Write to this file instead of stdout");
  cmd->callback([o] {
    planner::Plan plan = planner::plan_step(*parse_scenario_input(resolve_scenario_input(o->input)).scenario);
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
