#include "sim/scenario_loader.h"

#include "models/json_input.h"

namespace fsdpsim::sim {

SimgridOptions simgrid_options(const planner::Scenario& scenario) {
  SimgridOptions options = parse_simgrid_options(scenario.simulation, scenario.file);
  validate_simgrid_options(options, scenario, scenario.file);
  return options;
}

planner::Scenario load_scenario(const std::string& path, const std::vector<std::string>& overrides) {
  planner::Scenario scenario = planner::load_scenario(path, overrides);
  simgrid_options(scenario);  // a bad "simulation" object is an error in every command
  return scenario;
}

SimgridScenario parse_simgrid_scenario(const nlohmann::json& json, const std::string& file,
                                       const std::vector<std::string>& overrides) {
  SimgridScenario out{planner::parse_scenario(json, file, overrides), {}};
  out.options = simgrid_options(out.scenario);
  return out;
}

void validate_simgrid_options(const SimgridOptions& o, const planner::Scenario& scenario, const std::string& file) {
  const int world = scenario.world_size();
  for (std::size_t i = 0; i < o.stragglers.size(); ++i)
    if (o.stragglers[i].rank >= world)
      throw InputError(file, "simulation.stragglers[" + std::to_string(i) + "].rank",
                       "rank " + std::to_string(o.stragglers[i].rank) + " is outside the world of " +
                           std::to_string(world) + " ranks");
  if (o.report_rank >= world)
    throw InputError(file, "simulation.report_rank",
                     "rank " + std::to_string(o.report_rank) + " is outside the world of " + std::to_string(world) + " ranks");
}

}  // namespace fsdpsim::sim
