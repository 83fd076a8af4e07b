// Where a command's scenario comes from: a scenario file (--scenario, the full interface) or
// the one-line form (--model NAME --gpus 64xH100 [--strategy ...]) resolved from the catalogs
// (planner/catalog.h). Either way the command gets a scenario document, the file its errors
// name and the overrides, and loads it as the one loader does (planner::parse_scenario, then
// sim::simgrid_options: sim/scenario_loader.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "planner/scenario.h"
#include "planner/sweep_space.h"

namespace fsdpsim::tools {

struct ScenarioInputOptions {
  std::string scenario;
  std::vector<std::string> overrides;  // --set
  // The one-line form.
  std::string model, cluster, gpus;
  // Shorthands for the common --set overrides (with either form).
  std::string strategy, checkpointing;
  std::int64_t seq_len = 0, micro_batch = 0, global_batch = 0;
  int fsdp_version = 0;
};

// Registers --scenario, --set, --model, --cluster, --gpus, --strategy, --seq-len,
// --micro-batch, --global-batch, --checkpointing and --fsdp-version on `cmd`.
void add_scenario_input_options(CLI::App* cmd, ScenarioInputOptions& o);

struct ScenarioInput {
  nlohmann::json document;
  std::string file;                    // the scenario file, or planner::kCommandLineFile
  std::vector<std::string> overrides;  // the one-liner's, the shorthands', then --set
  // How many of `overrides` come first from the one-line form itself (the cluster's shape):
  // what stands for --gpus, not what the user set. 0 for a scenario file.
  std::size_t form_overrides = 0;
  int gpu_count = 0;                   // --gpus's count (the one-line form's), 0 when none was given
  std::string source;                  // for reports: "scenarios/x.json" or "--model ... --gpus ..."
};
// Whether the options name a scenario: a file, or the one-line form.
bool names_a_scenario(const ScenarioInputOptions& o);
// Throws InputError: neither or both forms, an unknown name (with the close ones).
ScenarioInput resolve_scenario_input(const ScenarioInputOptions& o);
// The shorthands' overrides, then --set: what the command line sets on any scenario (`sweep`
// applies them to its sweep file's scenario when the command line names none).
std::vector<std::string> command_line_overrides(const ScenarioInputOptions& o);

// The scenario parsed once (and its "simulation" object checked, as sim::load_scenario does),
// with what a template of it needs: `estimate` estimates it and advises from a template built
// without a second parse.
struct ParsedScenarioInput {
  std::shared_ptr<const planner::Scenario> scenario;
  planner::ScenarioDocuments documents;
};
ParsedScenarioInput parse_scenario_input(const ScenarioInput& input);
// The template of `parsed`, which it consumes (its documents are moved into the template).
std::shared_ptr<const planner::ScenarioTemplate> scenario_template(const ScenarioInput& input, ParsedScenarioInput& parsed);

}  // namespace fsdpsim::tools
