// Small scenarios for the runtime tests: a model of repeated blocks on a one- or two-node
// cluster, planned by the planner and exported through the schedule JSON the CLI reads.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "planner/plan.h"
#include "planner/scenario.h"
#include "planner/schedule.h"
#include "runtime/runtime.h"

namespace fsdpsim::runtime::testing {

// `blocks` "Block" modules with one weight of `shape` each, plus a root-owned embedding.
inline nlohmann::json block_model(int blocks, std::vector<std::int64_t> shape) {
  nlohmann::json block = {{"name", "{i}"},
                          {"repeat", blocks},
                          {"type", "Block"},
                          {"params", {{{"name", "weight"}, {"shape", shape}}}},
                          {"costs",
                           {{"forward_flops", {{"b*s", 2e6}}},
                            {"saved_activation_bytes", {{"b*s", 4096.0}}},
                            {"input_bytes", {{"b*s", 8.0}}}}}};
  nlohmann::json embed = {{"name", "embed"},
                          {"type", "Embedding"},
                          {"params", {{{"name", "weight"}, {"shape", {1000, 64}}}}},
                          {"costs", {{"forward_flops", {{"b*s", 1.0}}}}}};
  nlohmann::json root = {{"name", ""},
                         {"type", "Model"},
                         {"children", {embed, {{"name", "blocks"}, {"type", "ModuleList"}, {"children", {block}}}}}};
  return {{"name", "runtime-test"}, {"root", root}};
}

inline nlohmann::json cluster(int nodes, int gpus_per_node) {
  return {{"name", "test cluster"},
          {"gpu",
           {{"memory_mib", 80 * 1024},
            {"arch", "hopper"}, {"sm_count", 132},
            {"peak_tflops", {{"bf16", 989.4}, {"fp32", 494.7}}},
            {"hbm_bandwidth_tbps", 3.35},
            {"nvlink", {{"generation", "hopper"}, {"links", 18}, {"bandwidth_gbps", 450}}}}},
          {"nodes", nodes},
          {"gpus_per_node", gpus_per_node},
          {"intra_node", {{"kind", "nvswitch"}, {"bandwidth_gbps", 450}}},
          {"inter_node", {{"nic_gbps", 50}, {"nics_per_node", gpus_per_node}, {"latency_us", 5}}}};
}

// A scenario on `nodes` x `gpus` ranks; `fsdp` and `training` are merged over the defaults.
inline nlohmann::json scenario(int nodes, int gpus, const nlohmann::json& fsdp, const nlohmann::json& training = {},
                               int blocks = 4, std::vector<std::int64_t> shape = {256, 1000}) {
  nlohmann::json t = {{"micro_batch", 1}, {"seq_len", 128}, {"optimizer", "adamw"}};
  if (training.is_object()) t.update(training);
  return {{"model", block_model(blocks, shape)}, {"cluster", cluster(nodes, gpus)}, {"training", t}, {"fsdp", fsdp}};
}

// Plans the scenario and passes the schedule through its JSON form (what `run` reads).
inline planner::Schedule plan(const nlohmann::json& json) {
  planner::Scenario s = planner::parse_scenario(json, "test.json");
  planner::Plan p = planner::plan_step(s);
  planner::Schedule schedule = planner::schedule_from_json(planner::schedule_to_json(p.schedule), "test-schedule.json");
  check_playable(schedule, "test-schedule.json");
  return schedule;
}

// Host options for fast tests: no modeled waits, small real buffers, a short timeout.
// Steps the host backend plays by default: one, after a warm-up step when the schedule makes
// state at its first step (runtime/host_backend.cpp; planner/schedule.h, [State made at the
// first step]). What counts per step played (collectives checked) is that many times a step's.
inline int steps_played_by_default(const planner::Schedule& s) { return planner::makes_state_at_first_step(s) ? 2 : 1; }

inline RunOptions fast_host(const planner::Schedule& s) {
  RunOptions o;
  o.backend = "host";
  o.costs = planner::costs_from_durations(s, std::vector<double>(s.ops.size(), 0.0), "zero durations (tests)");
  o.max_buffer_bytes = 64 << 10;
  o.timeout_seconds = 5;
  return o;
}

}  // namespace fsdpsim::runtime::testing
