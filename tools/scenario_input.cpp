#include "tools/scenario_input.h"

#include <algorithm>
#include <cstdlib>

#include "models/json_input.h"
#include "planner/catalog.h"
#include "sim/scenario_loader.h"

namespace fsdpsim::tools {

void add_scenario_input_options(CLI::App* cmd, ScenarioInputOptions& o) {
  cmd->add_option("-s,--scenario", o.scenario, "Scenario JSON file (the full interface; or --model with --gpus)");
  cmd->add_option("--set", o.overrides, "Override a scenario field: a.b.c=value (repeatable)");
  cmd->add_option("--model", o.model,
                  "Model: a catalog name (`fsdpsim models`), a model JSON file or hf:config.json");
  cmd->add_option("--gpus", o.gpus, "GPUs: 64xH100, 16xdgx-a100, or a count with --cluster");
  cmd->add_option("--cluster", o.cluster, "Cluster: a catalog name (`fsdpsim clusters`) or a cluster JSON file");
  cmd->add_option("--strategy", o.strategy,
                  "fsdp.strategy: FULL_SHARD, SHARD_GRAD_OP, HYBRID_SHARD, HYBRID_SHARD_ZERO2, NO_SHARD, ZERO1");
  cmd->add_option("--seq-len", o.seq_len, "training.seq_len")->check(CLI::Range(1, 1 << 24));
  cmd->add_option("--micro-batch", o.micro_batch, "training.micro_batch")->check(CLI::Range(1, 1 << 20));
  cmd->add_option("--global-batch", o.global_batch, "training.global_batch")->check(CLI::Range(std::int64_t{1}, std::int64_t{1} << 40));
  cmd->add_option("--checkpointing", o.checkpointing, "training.activation_checkpointing: none, full, selective or k");
  cmd->add_option("--fsdp-version", o.fsdp_version, "fsdp.version: 1 or 2")->check(CLI::Range(1, 2));
}

namespace {

std::vector<std::string> shorthand_overrides(const ScenarioInputOptions& o) {
  std::vector<std::string> sets;
  if (!o.strategy.empty()) sets.push_back("fsdp.strategy=" + o.strategy);
  if (o.fsdp_version) sets.push_back("fsdp.version=" + std::to_string(o.fsdp_version));
  if (o.seq_len) sets.push_back("training.seq_len=" + std::to_string(o.seq_len));
  if (o.micro_batch) sets.push_back("training.micro_batch=" + std::to_string(o.micro_batch));
  if (o.global_batch) sets.push_back("training.global_batch=" + std::to_string(o.global_batch));
  if (!o.checkpointing.empty()) sets.push_back("training.activation_checkpointing=" + o.checkpointing);
  return sets;
}

// --gpus N is a GPU count: a --set that changes the GPUs per node without the nodes keeps it
// (N / K nodes of K), as the form itself sizes the nodes from the cluster file's GPUs per node.
// It read N / G nodes of K GPUs: --gpus 64 --set cluster.gpus_per_node=2 planned 16 GPUs.
void keep_the_gpu_count(const std::vector<std::string>& sets, ScenarioInput& in) {
  std::string per_node;
  for (const std::string& set : sets) {
    if (set.rfind("cluster.nodes=", 0) == 0 || set.rfind("cluster=", 0) == 0) return;  // the user sized it
    if (set.rfind("cluster.gpus_per_node=", 0) == 0) per_node = set.substr(std::string("cluster.gpus_per_node=").size());
  }
  if (per_node.empty()) return;
  const int count = in.gpu_count;
  char* end = nullptr;
  const long k = std::strtol(per_node.c_str(), &end, 10);
  if (end == per_node.c_str() || *end != '\0' || k < 1) return;  // the scenario's reader names what is wrong
  if (count % k != 0)
    throw InputError::option("--gpus", std::to_string(count) + " GPUs do not fill whole nodes of " + per_node +
                                           " (--set cluster.gpus_per_node=" + per_node + "); give a multiple of " + per_node +
                                           ", or --set cluster.nodes too");
  in.overrides.push_back("cluster.nodes=" + std::to_string(count / k));
}

bool one_line_form(const ScenarioInputOptions& o) { return !o.model.empty() || !o.gpus.empty() || !o.cluster.empty(); }

}  // namespace

bool names_a_scenario(const ScenarioInputOptions& o) { return !o.scenario.empty() || one_line_form(o); }

std::vector<std::string> command_line_overrides(const ScenarioInputOptions& o) {
  std::vector<std::string> sets = shorthand_overrides(o);
  sets.insert(sets.end(), o.overrides.begin(), o.overrides.end());
  return sets;
}

ScenarioInput resolve_scenario_input(const ScenarioInputOptions& o) {
  ScenarioInput in;
  const bool one_line = one_line_form(o);
  if (!o.scenario.empty() && one_line)
    throw InputError::option("--scenario", "give a scenario file or --model with --gpus, not both "
                                           "(to change a scenario's model or cluster: --set model=NAME.json)");
  const std::vector<std::string> shorthands = shorthand_overrides(o);
  if (!o.scenario.empty()) {
    in.file = o.scenario;
    in.document = load_json_file(o.scenario);
    in.overrides = shorthands;
    in.source = o.scenario;
  } else {
    if (o.model.empty())
      throw InputError::option("--model", "give a scenario (--scenario FILE) or a model and GPUs (--model NAME --gpus 64xH100)");
    planner::QuickScenarioDocument q = planner::quick_scenario({o.model, o.cluster, o.gpus, shorthands});
    in.file = planner::kCommandLineFile;
    in.document = q.document;
    in.overrides = q.overrides;
    in.form_overrides = q.overrides.size() - shorthands.size();  // quick_scenario's: the shape, then the sets
    in.source = "--model " + o.model + (o.cluster.empty() ? "" : " --cluster " + o.cluster) +
                (o.gpus.empty() ? "" : " --gpus " + o.gpus);
    if (!o.gpus.empty()) in.gpu_count = q.gpus;  // the world quick_scenario sized: --gpus's count
  }
  in.overrides.insert(in.overrides.end(), o.overrides.begin(), o.overrides.end());
  if (in.gpu_count > 0) keep_the_gpu_count(o.overrides, in);
  return in;
}

ParsedScenarioInput parse_scenario_input(const ScenarioInput& input) {
  ParsedScenarioInput parsed;
  // sim::parse_simgrid_scenario's checks: the scenario, then its "simulation" object.
  auto scenario = std::make_shared<planner::Scenario>(
      planner::parse_scenario(input.document, input.file, input.overrides, &parsed.documents));
  sim::simgrid_options(*scenario);
  // --gpus N is a count: a cluster replaced with other GPUs per node keeps the form's node count,
  // which no longer makes N GPUs (--gpus 64xH100 --set cluster=kempner-h200-2nodes read 32). The
  // nodes are the user's to state then.
  if (input.gpu_count > 0 && scenario->world_size() != input.gpu_count) {
    const bool nodes_stated = std::any_of(input.overrides.begin() + static_cast<std::ptrdiff_t>(input.form_overrides),
                                          input.overrides.end(),
                                          [](const std::string& o) { return o.rfind("cluster.nodes=", 0) == 0; });
    const int per_node = scenario->cluster.gpus_per_node;
    if (!nodes_stated)
      throw InputError::option(
          "--gpus", std::to_string(input.gpu_count) + " GPUs asked, but the cluster has " + std::to_string(per_node) +
                        " GPUs per node, so the form's " + std::to_string(scenario->cluster.nodes) + " nodes make " +
                        std::to_string(scenario->world_size()) + ": give --set cluster.nodes" +
                        (input.gpu_count % per_node == 0 ? "=" + std::to_string(input.gpu_count / per_node) : "") +
                        ", or --gpus with that cluster");
  }
  parsed.scenario = std::move(scenario);
  return parsed;
}

std::shared_ptr<const planner::ScenarioTemplate> scenario_template(const ScenarioInput& input, ParsedScenarioInput& parsed) {
  return planner::ScenarioTemplate::from_parsed(parsed.scenario, std::move(parsed.documents), input.file, input.overrides);
}

}  // namespace fsdpsim::tools
