// Synthetic models, scenarios and hand-made schedules for planner tests: sizes chosen so that
// hand arithmetic gives the expected bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/schedule.h"

namespace fsdpsim::testing {

// Appends an allocation of `bytes` to a hand-made schedule; returns its id.
inline int add_allocation(planner::Schedule& s, std::int64_t bytes, bool persistent,
                          planner::Stream stream = planner::Stream::compute,
                          planner::MemCategory category = planner::MemCategory::temporary) {
  planner::Allocation a;
  a.id = static_cast<int>(s.allocations.size());
  a.bytes = bytes;
  a.stream = stream;
  a.category = category;
  a.persistent = persistent;
  s.allocations.push_back(a);
  return a.id;
}

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

// PyTorch's two cuBLAS workspaces (the forward thread's and autograd's backward thread's), 32 MiB
// each on compute capability 9.0 (CublasHandlePool.cpp getChosenWorkspaceSize): persistent
// allocations of every step on cluster()'s Hopper GPUs ([cuBLAS workspaces] in
// planner/plan_context.cpp; measured on an H100: tests/data/hardware/memory-h100-2026-11-27.csv).
constexpr std::int64_t kCublasWorkspacesHopper = 2LL * 32 * 1024 * 1024;

inline nlohmann::json cluster(int nodes, int gpus_per_node, double memory_gib = 80) {
  return {{"name", "test cluster"},
          {"gpu", {{"memory_mib", memory_gib * 1024}, {"arch", "hopper"}, {"sm_count", 132}, {"peak_tflops", {{"bf16", 989.4}, {"fp32", 494.7}}},
                   {"hbm_bandwidth_tbps", 3.35}, {"nvlink", {{"generation", "hopper"}, {"links", 18}, {"bandwidth_gbps", 450}}}}},
          {"nodes", nodes}, {"gpus_per_node", gpus_per_node},
          {"intra_node", {{"kind", "nvswitch"}, {"bandwidth_gbps", 450}}},
          {"inter_node", {{"nic_gbps", 50}, {"nics_per_node", gpus_per_node}, {"latency_us", 5}}}};
}

// A 2-block MoE model written by hand: each block owns w [8, 16] and an experts module of 4
// experts [4, 16, 16]; fp32 everything, no optimizer state.
inline nlohmann::json moe_model() {
  nlohmann::json experts = {{"name", "experts"}, {"type", "Experts"}, {"experts", 4},
                            {"params", {{{"name", "w"}, {"shape", {4, 16, 16}}, {"dtype", "fp32"}}}}};
  nlohmann::json block = {{"name", "{i}"}, {"type", "Block"}, {"repeat", 2},
                          {"params", {{{"name", "w"}, {"shape", {8, 16}}, {"dtype", "fp32"}}}},
                          {"costs", {{"forward_flops", {{"b*s", 1000}}},
                                     {"saved_activation_bytes", {{"b*s", 64}}},
                                     {"input_bytes", {{"b*s", 32}}},
                                     {"moe", {{"experts", 4}, {"top_k", 2}, {"hidden_size", 16}}}}},
                          {"children", {experts}}};
  return {{"name", "tiny-moe"}, {"root", {{"name", ""}, {"type", "Model"},
                                          {"children", {{{"name", "layers"}, {"type", "ModuleList"}, {"children", {block}}}}}}}};
}

// On one node of 4 GPUs, FSDP2 FULL_SHARD, 10 tokens per rank (tests/planner/moe_test.cpp works
// its peak by hand).
inline nlohmann::json moe_scenario() {
  return {{"model", moe_model()},
          {"cluster", cluster(1, 4)},
          {"training", {{"micro_batch", 1}, {"seq_len", 10}, {"param_dtype", "fp32"}, {"reduce_dtype", "fp32"},
                        {"master_dtype", "fp32"}, {"optimizer", "none"}}},
          {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}}}};
}

}  // namespace fsdpsim::testing
