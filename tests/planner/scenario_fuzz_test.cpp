// Randomized fuzzing of the scenario parser and the planner behind it: whatever the
// input, the only failure is an InputError (which the CLI prints as one `error:` line).
#include <gtest/gtest.h>

#include <random>

#include "models/json_input.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "json_mutation.h"
#include "synthetic.h"

namespace fsdpsim::planner {
namespace {

nlohmann::json seed_scenario() {
  return {{"model", testing::block_model(4, {64, 32}, 128.0, {100, 32})},
          {"cluster", testing::cluster(2, 4)},
          {"training", {{"global_batch", 16}, {"micro_batch", 2}, {"seq_len", 128}, {"param_dtype", "bf16"},
                        {"reduce_dtype", "fp32"}, {"master_dtype", "fp32"}, {"optimizer", "adamw"},
                        {"activation_checkpointing", "full"}}},
          {"fsdp", {{"version", 2}, {"strategy", "HYBRID_SHARD"}, {"shard_group_size", 4},
                    {"wrap", {{"policy", "block"}}}, {"reshard_after_forward", 2}, {"forward_prefetch", false},
                    {"backward_prefetch", "BACKWARD_PRE"}, {"limit_all_gathers", true}, {"cpu_offload", false}}}};
}

nlohmann::json random_value(std::mt19937& rng) {
  switch (rng() % 9) {
    case 0: return nullptr;
    case 1: return static_cast<int>(rng() % 2) == 1;
    case 2: return static_cast<std::int64_t>(rng() % 20) - 5;
    case 3: return static_cast<std::int64_t>(rng());
    case 4: return -1.5e300;
    case 5: return std::string("FULL_SHARD");
    case 6: return std::string(1, static_cast<char>('a' + rng() % 26));
    case 7: return nlohmann::json::array({1, "x"});
    default: return nlohmann::json::object({{"policy", "every_k_blocks"}, {"every", static_cast<int>(rng() % 4)}});
  }
}

// Picks a random node of the document (objects and arrays) and mutates it.
void mutate(nlohmann::json& doc, std::mt19937& rng) {
  nlohmann::json* node = testing::random_node(doc, rng, 6, 3);
  if (node->is_object() && !node->empty() && rng() % 2 == 0) {
    auto it = testing::random_member(*node, rng);
    if (rng() % 2) node->erase(it);
    else it.value() = random_value(rng);
  } else if (node->is_object()) {
    (*node)[rng() % 2 ? "unknown_key" : "every"] = random_value(rng);
  } else {
    *node = random_value(rng);
  }
}

TEST(ScenarioFuzz, OnlyInputErrorsEscape) {
  std::mt19937 rng(20261121);
  int accepted = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    nlohmann::json doc = seed_scenario();
    const int mutations = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < mutations; ++m) mutate(doc, rng);
    try {
      Scenario s = parse_scenario(doc, "fuzz.json");
      Plan plan = plan_step(s);
      MemoryReport r = replay_memory(plan.schedule);
      EXPECT_GE(r.peak_allocated_bytes, 0);
      ++accepted;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("fuzz.json"), std::string::npos) << "no file named: " << e.what();
      ++refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << i << " threw a non-InputError: " << e.what() << "\n" << doc.dump();
    }
  }
  // Both paths must be exercised for the fuzzing to mean anything.
  EXPECT_GT(accepted, 100);
  EXPECT_GT(refused, 100);
}

// Random bytes spliced into the text: the JSON reader must say where it broke.
TEST(ScenarioFuzz, CorruptedTextReportsLineAndColumn) {
  std::mt19937 rng(7);
  const std::string text = seed_scenario().dump(2);
  for (int i = 0; i < 500; ++i) {
    std::string corrupted = text;
    corrupted[rng() % corrupted.size()] = "{}[],:\"x\\"[rng() % 9];
    try {
      nlohmann::json j = nlohmann::json::parse(corrupted);
      parse_scenario(j, "fuzz.json");
    } catch (const nlohmann::json::parse_error&) {
      // load_json_file turns this into an InputError with line and column (tested in cli).
    } catch (const InputError&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

}  // namespace
}  // namespace fsdpsim::planner
