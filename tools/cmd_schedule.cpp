// `fsdpsim schedule`: export the step's Schedule IR as JSON (what `run` executes).
#include <iostream>

#include "models/json_format.h"
#include "models/json_input.h"
#include "planner/plan.h"
#include "sim/scenario_loader.h"
#include "tools/commands.h"
#include "tools/output_file.h"

namespace fsdpsim::tools {

void add_schedule_command(CLI::App& app) {
  struct Options {
    std::string scenario, output;
    std::vector<std::string> overrides;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = app.add_subcommand("schedule", "Export one step's schedule (ops, streams, dependencies, memory events) as JSON");
  cmd->add_option("-s,--scenario", o->scenario, "Scenario JSON file")->required();
  cmd->add_option("--set", o->overrides, "Override a scenario field: a.b.c=value (repeatable)");
  cmd->add_option("-o,--output", o->output, "Write to this file instead of stdout");
  cmd->callback([o] {
    planner::Plan plan = planner::plan_step(sim::load_scenario(o->scenario, o->overrides));
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
