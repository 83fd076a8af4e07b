// Synthetic models and scenarios for planner tests: sizes chosen so that hand
// arithmetic gives the expected bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fsdpsim::testing {

// A model of `blocks` repeated "Block" modules, each with one weight of `shape`, plus an
// optional root-owned embedding; activations as given (bytes per b*s, 16-bit).
inline nlohmann::json block_model(int blocks, std::vector<std::int64_t> shape,
                                  double activation_bytes_per_token = 0,
                                  std::vector<std::int64_t> root_param = {}) {
  nlohmann::json block = {
      {"name", "{i}"}, {"repeat", blocks}, {"type", "Block"},
      {"params", {{{"name", "weight"}, {"shape", shape}}}},
      {"costs", {{"forward_flops", {{"b*s", 1e6}}},
                 {"saved_activation_bytes", {{"b*s", activation_bytes_per_token}}},
                 {"input_bytes", {{"b*s", 8.0}}}}}};
  if (blocks == 1) block["name"] = "0";
  nlohmann::json root = {{"name", ""}, {"type", "Model"},
                         {"children", {{{"name", "blocks"}, {"type", "ModuleList"}, {"children", {block}}}}}};
  if (!root_param.empty()) {
    nlohmann::json embed = {{"name", "embed"}, {"type", "Embedding"},
                             {"params", {{{"name", "weight"}, {"shape", root_param}}}},
                             {"costs", {{"forward_flops", {{"b*s", 1.0}}}}}};
    root["children"].insert(root["children"].begin(), embed);
  }
  return {{"name", "synthetic"}, {"root", root}};
}

inline nlohmann::json cluster(int nodes, int gpus_per_node, double memory_gib = 80) {
  return {{"name", "test cluster"},
          {"gpu", {{"memory_mib", memory_gib * 1024}, {"arch", "hopper"}, {"sm_count", 132}, {"peak_tflops", {{"bf16", 989.4}, {"fp32", 494.7}}},
                   {"hbm_bandwidth_tbps", 3.35}, {"nvlink", {{"generation", "hopper"}, {"links", 18}, {"bandwidth_gbps", 450}}}}},
          {"nodes", nodes}, {"gpus_per_node", gpus_per_node},
          {"intra_node", {{"kind", "nvswitch"}, {"bandwidth_gbps", 450}}},
          {"inter_node", {{"nic_gbps", 50}, {"nics_per_node", gpus_per_node}, {"latency_us", 5}}}};
}

}  // namespace fsdpsim::testing
