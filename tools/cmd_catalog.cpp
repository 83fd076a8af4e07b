// `fsdpsim models` and `fsdpsim clusters`: the shipped catalogs (planner/catalog.h), the names
// `estimate --model NAME --gpus 64xH100` and `--cluster NAME` take.
#include <cstdio>
#include <iostream>

#include "planner/catalog.h"
#include "planner/scenario.h"
#include "tools/commands.h"
#include "tools/format.h"

namespace fsdpsim::tools {

namespace {

std::string billions(std::int64_t parameters) {
  char buf[32];
  std::snprintf(buf, sizeof buf, parameters >= 1e9 ? "%.1fB" : "%.0fM", parameters >= 1e9 ? parameters / 1e9 : parameters / 1e6);
  return buf;
}

void print_models(bool json) {
  const std::vector<planner::ModelEntry> entries = planner::model_catalog();
  if (json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& e : entries) {
      nlohmann::json j = {{"name", e.name}, {"file", e.file}};
      if (e.error.empty()) {
        j.update({{"family", e.family}, {"parameters", e.parameters}, {"num_layers", e.num_layers}, {"hidden_size", e.hidden_size}});
      } else {
        j["error"] = e.error;
      }
      list.push_back(j);
    }
    std::cout << nlohmann::json{{"root", planner::catalog_root()}, {"models", list}}.dump(2) << "\n";
    return;
  }
  Table t({"name", "family", "params", "layers", "hidden", "note"});
  for (const auto& e : entries) {
    if (!e.error.empty()) t.add({e.name, "", "", "", "", "does not load: " + e.error});
    else t.add({e.name, e.family, billions(e.parameters), std::to_string(e.num_layers), std::to_string(e.hidden_size), ""});
  }
  std::cout << t.str() << entries.size() << " models in " << planner::catalog_root()
            << "/models; any Hugging Face config.json also works: --model hf:path/config.json\n";
}

void print_clusters(bool json) {
  const std::vector<planner::ClusterEntry> entries = planner::cluster_catalog();
  if (json) {
    nlohmann::json list = nlohmann::json::array();
    for (const auto& e : entries) {
      nlohmann::json j = {{"name", e.name}, {"file", e.file}};
      if (e.error.empty()) {
        j.update({{"title", e.title}, {"gpu", e.gpu}, {"gpu_memory_bytes", e.gpu_memory_bytes}, {"nodes", e.nodes},
                  {"gpus_per_node", e.gpus_per_node}, {"intra_node", e.intra_node}, {"inter_node", e.inter_node}});
      } else {
        j["error"] = e.error;
      }
      list.push_back(j);
    }
    std::cout << nlohmann::json{{"root", planner::catalog_root()}, {"clusters", list}}.dump(2) << "\n";
    return;
  }
  Table t({"name", "GPU", "memory", "nodes x GPUs", "intra-node", "inter-node (per node)"});
  for (const auto& e : entries) {
    if (!e.error.empty()) t.add({e.name, "does not load: " + e.error, "", "", "", ""});
    else
      t.add({e.name, e.gpu, gib(e.gpu_memory_bytes), std::to_string(e.nodes) + " x " + std::to_string(e.gpus_per_node),
             e.intra_node, e.inter_node.empty() ? "-" : e.inter_node});
  }
  std::cout << t.str() << entries.size() << " clusters in " << planner::catalog_root()
            << "/scenarios/clusters; `estimate --cluster NAME --gpus N` scales one to N GPUs, "
               "`--gpus 64xH100` picks dgx-h100\n";
}

}  // namespace

void add_catalog_commands(CLI::App& app) {
  auto json = std::make_shared<bool>(false);
  CLI::App* models = app.add_subcommand("models", "List the model catalog (names for estimate --model)");
  models->add_flag("--json", *json, "Print one JSON object for tools");
  models->callback([json] { print_models(*json); });
  auto cjson = std::make_shared<bool>(false);
  CLI::App* clusters = app.add_subcommand("clusters", "List the cluster catalog (names for --cluster, --gpus NxKIND)");
  clusters->add_flag("--json", *cjson, "Print one JSON object for tools");
  clusters->callback([cjson] { print_clusters(*cjson); });
}

}  // namespace fsdpsim::tools
