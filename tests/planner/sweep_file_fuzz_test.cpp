// Randomized fuzzing of the sweep file reader, the axis shorthands and point instantiation:
// whatever the sweep file says, the only failure is an InputError naming the file.
#include <gtest/gtest.h>

#include <random>

#include "models/json_input.h"
#include "planner/plan.h"
#include "planner/sweep_space.h"
#include "json_mutation.h"
#include "synthetic.h"

namespace fsdpsim::planner {
namespace {

const std::string kFile = "fuzz_sweep.json";

nlohmann::json seed_sweep() {
  return {{"scenario",
           {{"model", testing::block_model(4, {64, 32}, 128.0, {100, 32})},
            {"cluster", testing::cluster(2, 4)},
            {"training", {{"global_batch", 16}, {"micro_batch", 2}, {"seq_len", 128}}},
            {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}}}}},
          {"set", {"training.optimizer=adamw"}},
          {"axes",
           {{{"key", "fsdp.strategy"}, {"values", {"FULL_SHARD", "HYBRID_SHARD:*", "ZERO1"}}},
            {{"key", "fsdp.wrap"}, {"values", {"block", "every:2", "size:1000", "root"}}},
            {{"key", "training.activation_checkpointing"}, {"values", {"none", "full", "every:2"}}},
            {{"key", "training.micro_batch"}, {"values", {1, 2}}}}},
          {"headroom_gib", 1},
          {"objective", "throughput"},
          {"top", 5}};
}

// Values that probe the shorthands and the types the reader expects.
nlohmann::json random_value(std::mt19937& rng) {
  static const char* const words[] = {"HYBRID_SHARD:*", "HYBRID_SHARD:3", "HYBRID_SHARD:x", "every:0", "every:-2",
                                      "every:", "size:-5", "size:1e3", "none", "full", "{", "[1,", "FULL_SHARD:8",
                                      "model=missing.json", "cluster.nodes=0", "fsdp.version=3", ""};
  switch (rng() % 8) {
    case 0: return nullptr;
    case 1: return static_cast<std::int64_t>(rng() % 20) - 5;
    case 2: return 1e300;
    case 3: return std::string(words[rng() % (sizeof words / sizeof *words)]);
    case 4: return nlohmann::json::array({std::string(words[rng() % (sizeof words / sizeof *words)]), 2});
    case 5: return nlohmann::json::array();
    case 6: return nlohmann::json::object({{"key", "fsdp.strategy"}, {"values", {"NO_SHARD"}}});
    default: return rng() % 2 == 1;
  }
}

void mutate(nlohmann::json& doc, std::mt19937& rng) {
  nlohmann::json* node = testing::random_node(doc, rng, 6, 3);
  if (node->is_object() && !node->empty() && rng() % 2 == 0) {
    auto it = testing::random_member(*node, rng);
    if (rng() % 2) node->erase(it);
    else it.value() = random_value(rng);
  } else if (node->is_array() && rng() % 2 == 0) {
    node->push_back(random_value(rng));
  } else if (node->is_object()) {
    (*node)[rng() % 2 ? "unknown_key" : "values"] = random_value(rng);
  } else {
    *node = random_value(rng);
  }
}

TEST(SweepFileFuzz, OnlyInputErrorsEscape) {
  std::mt19937 rng(20261121);
  int accepted = 0, refused = 0, points = 0;
  for (int i = 0; i < 4000; ++i) {
    nlohmann::json doc = seed_sweep();
    const int mutations = 1 + static_cast<int>(rng() % 3);
    for (int m = 0; m < mutations; ++m) mutate(doc, rng);
    try {
      const SweepFile f = parse_sweep_file(doc, kFile);
      if (f.scenario_inline.is_null()) throw InputError(kFile, "scenario", "(the fuzz keeps scenarios inline)");
      auto t = ScenarioTemplate::from_json(f.scenario_inline, kFile, f.overrides);
      const SweepSpace space = make_space(f.axes, t->context());
      // The first points and the last: each either plans or is refused with a reason.
      for (std::size_t p : {std::size_t{0}, std::size_t{1}, space.size() - 1}) {
        if (p >= space.size()) continue;
        try {
          const Plan plan = plan_step(t->instantiate(space.overrides(space.choice(p))));
          EXPECT_FALSE(plan.schedule.ops.empty());
          ++points;
        } catch (const InputError& e) {
          EXPECT_NE(std::string(e.what()).find(kFile), std::string::npos) << "no file named: " << e.what();
        }
      }
      ++accepted;
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find(kFile), std::string::npos) << "no file named: " << e.what();
      ++refused;
    } catch (const std::exception& e) {
      ADD_FAILURE() << "iteration " << i << " threw a non-InputError: " << e.what() << "\n" << doc.dump();
    }
  }
  // Both paths must be exercised for the fuzzing to mean anything.
  EXPECT_GT(accepted, 100);
  EXPECT_GT(refused, 100);
  EXPECT_GT(points, 100);
}

// Axis specs as typed on the command line: random splices of the shorthand vocabulary.
TEST(SweepFileFuzz, AxisSpecsOnlyRaiseInputErrors) {
  std::mt19937 rng(11);
  const std::string pieces[] = {"fsdp.strategy", "=", ",", "HYBRID_SHARD:", "*", "{", "}", "[", "]", "\"",
                                "every:", "size:", "3", "-1", "training.micro_batch", "fsdp.wrap", "block", "x"};
  int ok = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string text;
    const int n = 1 + static_cast<int>(rng() % 8);
    for (int k = 0; k < n; ++k) text += pieces[rng() % (sizeof pieces / sizeof *pieces)];
    try {
      const Axis a = expand_axis(parse_axis_spec(text), {16, 64});
      EXPECT_FALSE(a.values.empty()) << text;
      ++ok;
    } catch (const InputError&) {
    } catch (const std::exception& e) {
      ADD_FAILURE() << "\"" << text << "\" threw a non-InputError: " << e.what();
    }
  }
  EXPECT_GT(ok, 100);
}

// A headroom is at most a pebibyte (2^20 GiB): 1e308 GiB overflowed to infinity once in bytes (the
// session-38 input audit: "inf GiB" to spare and JSON nulls).
TEST(SweepFile, HeadroomAtMostAPebibyte) {
  nlohmann::json doc = seed_sweep();
  doc["headroom_gib"] = 1048576;
  EXPECT_EQ(*parse_sweep_file(doc, kFile).headroom_gib, 1048576);
  for (double bad : {1e308, 1048577.0, -1.0}) {
    doc["headroom_gib"] = bad;
    try {
      parse_sweep_file(doc, kFile);
      ADD_FAILURE() << bad << " was accepted";
    } catch (const InputError& e) {
      EXPECT_NE(std::string(e.what()).find("headroom_gib: expected a number of GiB from 0 to 1048576"), std::string::npos)
          << e.what();
    }
  }
}

}  // namespace
}  // namespace fsdpsim::planner
