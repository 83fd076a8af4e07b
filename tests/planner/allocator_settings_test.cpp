// The scenario's `allocator` object (PYTORCH_CUDA_ALLOC_CONF): read with InputErrors that name
// the file and JSON path, carried by the plan's schedule (and its JSON) to the memory replay,
// and sweepable as axes. The allocator rules themselves are worked by hand in
// caching_allocator_rules.h.
#include <gtest/gtest.h>

#include <string>

#include "models/json_input.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "planner/schedule.h"
#include "planner/sweep_space.h"
#include "input_error_of.h"
#include "synthetic.h"

namespace fsdpsim::planner {
namespace {

constexpr std::int64_t kMiB = std::int64_t{1} << 20;

// Four blocks of a 4096 x 4096 weight (32 MiB in bf16, 8 MiB per rank of 4): all-gather
// buffers of 32 MiB, so the large pool and its segment rules are exercised.
nlohmann::json scenario_json() {
  return {{"model", testing::block_model(4, {4096, 4096}, 64)},
          {"cluster", testing::cluster(1, 4)},
          {"training", {{"micro_batch", 1}, {"seq_len", 256}}},
          {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}}}};
}

InputError error_of(const std::vector<std::string>& overrides) {
  return testing::input_error_of([&] { parse_scenario(scenario_json(), "s.json", overrides); });
}

TEST(AllocatorSettings, DefaultsArePyTorchs) {
  const Scenario s = parse_scenario(scenario_json(), "s.json");
  EXPECT_FALSE(s.allocator.expandable_segments);
  EXPECT_FALSE(s.allocator.max_split_size_set());
}

TEST(AllocatorSettings, ReadFromTheScenario) {
  const Scenario s =
      parse_scenario(scenario_json(), "s.json", {"allocator.expandable_segments=true", "allocator.max_split_size_mb=64"});
  EXPECT_TRUE(s.allocator.expandable_segments);
  EXPECT_EQ(s.allocator.max_split_size_bytes, 64 * kMiB);
}

TEST(AllocatorSettings, BadValuesNameFileAndPath) {
  for (const char* bad : {"allocator.max_split_size_mb=19", "allocator.max_split_size_mb=0",
                          "allocator.max_split_size_mb=1e20", "allocator.max_split_size_mb=\"big\""}) {
    const InputError e = error_of({bad});
    EXPECT_EQ(e.file(), "s.json") << bad;
    EXPECT_EQ(e.json_path(), "allocator.max_split_size_mb") << bad << ": " << e.what();
  }
  EXPECT_EQ(error_of({"allocator.expandable_segments=\"yes\""}).json_path(), "allocator.expandable_segments");
  // Not modelled: refused, not ignored, and the message says why (PyTorch applies it only under a
  // memory fraction, which the planner does not have), not "unknown field".
  const InputError gc = error_of({"allocator.garbage_collection_threshold=0.6"});
  EXPECT_EQ(gc.json_path(), "allocator.garbage_collection_threshold");
  EXPECT_NE(std::string(gc.what()).find("set_per_process_memory_fraction"), std::string::npos) << gc.what();
  EXPECT_EQ(std::string(gc.what()).find("unknown field"), std::string::npos) << gc.what();
  EXPECT_EQ(error_of({"allocator=3"}).json_path(), "allocator");
}

// The plan's schedule carries the settings, through its JSON too, and the replay follows them.
TEST(AllocatorSettings, TheScheduleCarriesThemToTheReplay) {
  const Scenario fixed = parse_scenario(scenario_json(), "s.json");
  const Scenario grown = parse_scenario(scenario_json(), "s.json", {"allocator.expandable_segments=true"});
  const Schedule a = plan_step(fixed).schedule;
  const Schedule b = plan_step(grown).schedule;
  EXPECT_FALSE(a.allocator.expandable_segments);
  EXPECT_TRUE(b.allocator.expandable_segments);
  EXPECT_FALSE(schedule_to_json(a).contains("allocator"));  // defaults: the file reads as before
  const Schedule back = schedule_from_json(schedule_to_json(b), "b.json");
  EXPECT_TRUE(back.allocator.expandable_segments);
  EXPECT_FALSE(back.allocator.max_split_size_set());
  // Same allocations, different reserved model: allocated agrees, reserved is whole 20 MiB
  // pages in the large pool (2 MiB in the small: both multiples of 2 MiB) with expandable
  // segments.
  const MemoryReport ra = replay_memory(a), rb = replay_memory(b);
  EXPECT_EQ(ra.peak_allocated_bytes, rb.peak_allocated_bytes);
  EXPECT_NE(ra.peak_reserved_bytes, rb.peak_reserved_bytes);
  EXPECT_EQ(rb.peak_reserved_bytes % (2 * kMiB), 0);
}

TEST(AllocatorSettings, BadScheduleJsonNamesThePath) {
  nlohmann::json j = schedule_to_json(plan_step(parse_scenario(scenario_json(), "s.json")).schedule);
  j["allocator"] = {{"max_split_size_mb", 8}};
  try {
    schedule_from_json(j, "x.json");
    ADD_FAILURE() << "no InputError";
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "x.json");
    EXPECT_EQ(e.json_path(), "allocator.max_split_size_mb");
  }
}

// Sweep axes: each value is an override the scenario reads (a bad one fails when its point is
// parsed, naming the override's path).
TEST(AllocatorSettings, SweepableAsAxes) {
  const Axis e = expand_axis(parse_axis_spec("allocator.expandable_segments=false,true"), {4, 4});
  ASSERT_EQ(e.values.size(), 2u);
  EXPECT_EQ(e.values[1].overrides, std::vector<std::string>{"allocator.expandable_segments=true"});
  const Axis m = expand_axis(parse_axis_spec("allocator.max_split_size_mb=64,512"), {4, 4});
  ASSERT_EQ(m.values.size(), 2u);
  const Scenario s = parse_scenario(scenario_json(), "s.json", m.values[1].overrides);
  EXPECT_EQ(s.allocator.max_split_size_bytes, 512 * kMiB);
  const Axis bad = expand_axis(parse_axis_spec("allocator.max_split_size_mb=8"), {4, 4});
  EXPECT_EQ(error_of(bad.values[0].overrides).json_path(), "allocator.max_split_size_mb");
}

}  // namespace
}  // namespace fsdpsim::planner
