// Randomized fuzzing of the Schedule JSON reader (what `fsdpsim run --schedule` and `verify`
// read from users): whatever the mutation, schedule_from_json either accepts a schedule that
// memory replay can walk, or throws an InputError naming the file. Never a crash, never
// another exception.
#include <gtest/gtest.h>

#include <random>

#include "models/json_input.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "planner/schedule.h"
#include "json_mutation.h"
#include "synthetic.h"

namespace fsdpsim::planner {
namespace {

nlohmann::json seed_schedule() {
  const nlohmann::json scenario = {
      {"model", testing::block_model(3, {64, 32}, 128.0, {100, 32})},
      {"cluster", testing::cluster(1, 4)},
      {"training", {{"global_batch", 8}, {"micro_batch", 1}, {"seq_len", 128}, {"activation_checkpointing", "full"}}},
      {"fsdp", {{"version", 1}, {"strategy", "FULL_SHARD"}, {"limit_all_gathers", true}}}};
  return schedule_to_json(plan_step(parse_scenario(scenario, "seed.json")).schedule);
}

nlohmann::json random_value(std::mt19937& rng, int ops) {
  switch (rng() % 10) {
    case 0: return nullptr;
    case 1: return true;
    case 2: return static_cast<int>(rng() % (ops + 4)) - 2;  // ids near and beyond the range
    case 3: return -static_cast<std::int64_t>(rng() % 1000);
    case 4: return 1e300;
    case 5: return std::string("all_gather");
    case 6: return std::string("no_such_value");
    case 7: return nlohmann::json::array({static_cast<int>(rng() % ops)});
    case 8: return nlohmann::json::array({static_cast<int>(rng() % ops), "x"});
    default: return nlohmann::json::object();
  }
}

// Mutates one random node: replace a value, delete or add a key, or point a dependency at a
// later op (a cycle or a wait on an op not issued yet).
void mutate(nlohmann::json& doc, std::mt19937& rng) {
  // An earlier mutation may have replaced or emptied "ops".
  const bool has_ops = doc.contains("ops") && doc["ops"].is_array() && !doc["ops"].empty();
  const int ops = has_ops ? static_cast<int>(doc["ops"].size()) : 1;
  if (has_ops && doc["ops"][0].is_object() && rng() % 4 == 0) {
    const int a = static_cast<int>(rng() % ops), b = static_cast<int>(rng() % ops);
    nlohmann::json& op = doc["ops"][std::min(a, b)];
    const char* key = rng() % 2 ? "deps" : "cpu_waits";
    if (op.is_object() && (!op.contains(key) || op[key].is_array())) {
      op[key].push_back(std::max(a, b));
      return;
    }
  }
  nlohmann::json* node = testing::random_node(doc, rng, 5, 4);
  if (node->is_object() && !node->empty() && rng() % 2 == 0) {
    auto it = testing::random_member(*node, rng);
    if (rng() % 3 == 0) node->erase(it);
    else it.value() = random_value(rng, ops);
  } else if (node->is_object()) {
    (*node)["unknown_key"] = random_value(rng, ops);
  } else {
    *node = random_value(rng, ops);
  }
}

TEST(ScheduleFuzz, OnlyInputErrorsEscapeAndAcceptedSchedulesReplay) {
  const nlohmann::json seed = seed_schedule();
  ASSERT_GT(seed["ops"].size(), 20u);
  std::mt19937 rng(20261121);
  int accepted = 0, refused = 0;
  for (int i = 0; i < 2000; ++i) {
    nlohmann::json doc = seed;
    const int mutations = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < mutations; ++m) mutate(doc, rng);
    try {
      const Schedule s = schedule_from_json(doc, "fuzz.json");
      const MemoryReport r = replay_memory(s);
      EXPECT_GE(r.peak_allocated_bytes, 0);
      ++accepted;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("fuzz.json"), std::string::npos) << "no file named: " << e.what();
      ++refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << i << " threw a non-InputError: " << e.what();
    }
  }
  // Both paths must be exercised for the fuzzing to mean anything.
  // (About 5% of mutations leave a valid schedule: a changed size, name or stream.)
  EXPECT_GT(accepted, 50);
  EXPECT_GT(refused, 1000);
}

}  // namespace
}  // namespace fsdpsim::planner
