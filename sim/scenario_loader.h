// The one scenario loader of every command, and a scenario's SimGrid options.
//
// planner::load_scenario reads a scenario and keeps its "simulation" object as JSON; here that
// object becomes SimgridOptions (sim/simgrid_options.h), checked against the scenario's world.
// Every command loads through sim::load_scenario, so estimate, sweep, simulate, schedule, run
// and verify accept exactly the same files. (Apart from the executors: the SimGrid engine
// takes a Schedule, OpCosts and options, never a Scenario.)
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/scenario.h"
#include "sim/simgrid_options.h"

namespace fsdpsim::sim {

// The options in a scenario's "simulation" object, checked against its world.
SimgridOptions simgrid_options(const planner::Scenario& scenario);

// The one scenario loader of the commands: planner::load_scenario, then the "simulation"
// object read and checked.
planner::Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides = {});

// A scenario and its SimGrid options, from a JSON document (tests, tools that build scenarios).
struct SimgridScenario {
  planner::Scenario scenario;
  SimgridOptions options;
};
SimgridScenario parse_simgrid_scenario(const nlohmann::json& json, const std::string& file,
                                       const std::vector<std::string>& overrides = {});

// Checks options against a scenario (straggler ranks inside the world, ...).
void validate_simgrid_options(const SimgridOptions& options, const planner::Scenario& scenario,
                              const std::string& file);

}  // namespace fsdpsim::sim
