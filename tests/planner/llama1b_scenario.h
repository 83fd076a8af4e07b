// For the planner's tests: Llama-3.2-1B under FSDP2 FULL_SHARD on one DGX H100 node (8 GPUs),
// global batch 16, micro-batch 2, 2,048 tokens: a small model whose plans are quick, with
// `overrides` as --set gives them. `test` names the scenario file errors would cite.
#pragma once

#include <string>
#include <vector>

#include "planner/scenario.h"

namespace fsdpsim::testing {

inline planner::Scenario llama1b_scenario(const std::string& test, const std::vector<std::string>& overrides = {}) {
  const nlohmann::json j = {{"model", "models/llama3.2-1b.json"},
                            {"cluster", "scenarios/clusters/dgx-h100.json"},
                            {"training", {{"global_batch", 16}, {"micro_batch", 2}, {"seq_len", 2048}}},
                            {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}}}};
  return planner::parse_scenario(j, std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/" + test + ".json", overrides);
}

}  // namespace fsdpsim::testing
