// The planner's side of issue 16 ("never crash, never a silent wrong answer"): sizes that
// would wrap, schedules whose allocations overflow, costs that overflow once evaluated, and
// the valid 1-layer model that was refused. Each case was seen to fail before the fix (the
// numbered item is the issue's); the CLI-level cases are in tests/cli/bad_input_test.cpp.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "models/checked_arithmetic.h"
#include "models/json_input.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "planner/schedule.h"
#include "planner/units.h"
#include "input_error_of.h"
#include "synthetic.h"

namespace fsdpsim::planner {
namespace {

nlohmann::json scenario_of(const nlohmann::json& model, int nodes = 1, int gpus_per_node = 4) {
  return {{"model", model},
          {"cluster", testing::cluster(nodes, gpus_per_node)},
          {"training", {{"micro_batch", 1}, {"seq_len", 128}}},
          {"fsdp", {{"strategy", "FULL_SHARD"}}}};
}

template <typename F>
InputError error_of(F f) {
  return testing::input_error_of(f);
}

// Item 1: nodes = 2^62 was narrowed to an int (0): nodes x GPUs = 0 and a later division
// raised SIGFPE. Each count is read with its range, the product checked.
TEST(ClusterSizes, HugeCountsAreRefusedNotNarrowed) {
  const nlohmann::json s = scenario_of(testing::block_model(2, {64, 64}));
  for (const char* key : {"cluster.nodes=4611686018427387904", "cluster.gpus_per_node=4611686018427387904",
                          "cluster.nodes=4294967296"}) {
    const InputError e = error_of([&] { parse_scenario(s, "s.json", {key}); });
    EXPECT_NE(std::string(e.what()).find("expected a positive integer (at most"), std::string::npos) << key << ": " << e.what();
  }
  // Each within its range, the product past 2^20 GPUs.
  const InputError e = error_of([&] { parse_scenario(s, "s.json", {"cluster.nodes=2048", "cluster.gpus_per_node=1024"}); });
  EXPECT_EQ(e.json_path(), "cluster.nodes");
  EXPECT_NE(std::string(e.what()).find("2048 x 1024 = 2097152"), std::string::npos) << e.what();
}

// Item 12: grad_accum = 1e8 was blamed on training.global_batch.
TEST(TrainingSizes, GradAccumIsBlamedOnItself) {
  nlohmann::json s = scenario_of(testing::block_model(2, {64, 64}));
  const InputError e = error_of([&] { parse_scenario(s, "s.json", {"training.grad_accum=100000000"}); });
  EXPECT_EQ(e.json_path(), "training.grad_accum");
}

// Item 13: a model of one layer is valid; its block is the block ("repeat": 1).
TEST(OneLayerModel, ItsBlockIsWrappedAndPlanned) {
  const Scenario s = parse_scenario(scenario_of(testing::block_model(1, {64, 64}, 16.0)), "s.json");
  EXPECT_EQ(block_types(*s.model, s.fsdp.wrap), std::vector<std::string>{"Block"});
  const Plan plan = plan_step(s);
  ASSERT_EQ(plan.units.size(), 2u);  // the root and the one block
  EXPECT_EQ(plan.units[1].params.size(), 1u);
  // Full checkpointing finds the block too (it also said "no transformer blocks").
  EXPECT_NO_THROW(plan_step(parse_scenario(scenario_of(testing::block_model(1, {64, 64}, 16.0)), "s.json",
                                           {"training.activation_checkpointing=full"})));
}

// Item 12: a cost of 1e308 per token overflowed to inf only once multiplied by b x s, and an
// engine then reported "op 7 has a negative or non-finite duration", naming no file or path.
TEST(ModelCosts, CostsThatOverflowWhenEvaluatedAreNamedAtTheCosts) {
  nlohmann::json model = testing::block_model(2, {64, 64});
  model["root"]["children"][0]["children"][0]["costs"]["forward_hbm_bytes"] = {{"b*s", 1e308}};
  const Scenario s = parse_scenario(scenario_of(model), "s.json");
  const InputError e = error_of([&] { plan_step(s); });
  EXPECT_EQ(e.json_path(), "root.children[0].children[0].costs") << e.what();
  EXPECT_NE(std::string(e.what()).find("hbm_bytes = inf"), std::string::npos) << e.what();
}

Schedule two_allocations(std::int64_t a, std::int64_t b) {
  Schedule s;
  s.world_size = 1;
  s.allocations = {{0, "a", a, MemCategory::temporary, Stream::compute, true, false},
                   {1, "b", b, MemCategory::temporary, Stream::compute, true, false}};
  return s;
}

// Item 7: allocation sizes overflowed: bytes = 2^63 - 1 vanished from the peak, and two of 2^62
// gave reserved < allocated. The replay's sums are checked (the backstop for schedules built in
// code); the reader refuses such files naming the allocation.
TEST(ScheduleSizes, ReplayRefusesToWrap) {
  EXPECT_THROW(replay_memory(two_allocations(std::int64_t{1} << 62, std::int64_t{1} << 62)), ArithmeticOverflow);
  EXPECT_THROW(replay_memory(two_allocations(INT64_MAX, 0)), ArithmeticOverflow);
  // Below the bound the totals are exact: 2^61 + 2^61 = 2^62 allocated, reserved rounded to 2 MiB.
  const MemoryReport ok = replay_memory(two_allocations(std::int64_t{1} << 61, std::int64_t{1} << 61));
  EXPECT_EQ(ok.peak_allocated_bytes, std::int64_t{1} << 62);
  EXPECT_GE(ok.peak_reserved_bytes, ok.peak_allocated_bytes);
}

nlohmann::json small_schedule() {
  const nlohmann::json scenario = {
      {"model", testing::block_model(3, {64, 32}, 128.0)},
      {"cluster", testing::cluster(1, 4)},
      {"training", {{"global_batch", 4}, {"micro_batch", 1}, {"seq_len", 128}}},
      {"fsdp", {{"strategy", "FULL_SHARD"}}}};
  return schedule_to_json(plan_step(parse_scenario(scenario, "seed.json")).schedule);
}

int first_collective(const nlohmann::json& s) {
  for (const auto& op : s["ops"])
    if (op.contains("comm_bytes")) return op["id"];
  return -1;
}

TEST(ScheduleReader, OverflowingAllocationsAreRefusedNamingThem) {
  nlohmann::json j = small_schedule();
  j["allocations"][1]["bytes"] = INT64_MAX;
  EXPECT_EQ(error_of([&] { schedule_from_json(j, "s.json"); }).json_path(), "allocations[1].bytes");
  j = small_schedule();
  j["allocations"][0]["bytes"] = std::int64_t{1} << 62;
  j["allocations"][1]["bytes"] = std::int64_t{1} << 62;
  const InputError e = error_of([&] { schedule_from_json(j, "s.json"); });
  EXPECT_EQ(e.json_path(), "allocations[1].bytes");
  EXPECT_NE(std::string(e.what()).find("add up to more than 2^62"), std::string::npos) << e.what();
}

// Item 12: comm_bytes = -5 was reported at ops[1].flops; each cost is checked where it is.
TEST(ScheduleReader, EachCostIsCheckedWhereItIs) {
  nlohmann::json j = small_schedule();
  const int c = first_collective(j);
  ASSERT_GE(c, 0);
  j["ops"][c]["comm_bytes"] = -5;
  const InputError e = error_of([&] { schedule_from_json(j, "s.json"); });
  EXPECT_EQ(e.json_path(), "ops[" + std::to_string(c) + "].comm_bytes");
  EXPECT_NE(std::string(e.what()).find("got -5"), std::string::npos) << e.what();
}

// Item 12: a self-dependency was reported as a cycle through unrelated ops.
TEST(ScheduleReader, ASelfDependencyIsNamedAsOne) {
  nlohmann::json j = small_schedule();
  j["ops"][5]["deps"] = {5};
  const InputError e = error_of([&] { schedule_from_json(j, "s.json"); });
  EXPECT_EQ(e.json_path(), "ops[5].deps");
  EXPECT_NE(std::string(e.what()).find("depends on itself"), std::string::npos) << e.what();
}

// Session 31 (the second session-30 audit's "unchecked schedule fields"): a unit id sizes the
// per-unit reports, so unit 2e9 made the analytic engine ask for 16 GB of exposure counters; a
// micro-step past micro_steps was taken as it stood. Both are refused where they are written.
TEST(ScheduleReader, UnitsAndMicroStepsOutsideTheScheduleAreRefused) {
  const nlohmann::json base = small_schedule();
  const int n_ops = static_cast<int>(base["ops"].size());
  nlohmann::json j = base;
  j["ops"][3]["unit"] = 2000000000;
  InputError e = error_of([&] { schedule_from_json(j, "s.json"); });
  EXPECT_EQ(e.json_path(), "ops[3].unit");
  EXPECT_NE(std::string(e.what()).find("from -1 to " + std::to_string(n_ops - 1)), std::string::npos) << e.what();
  j = base;
  j["ops"][3]["unit"] = n_ops - 1;  // the largest id a schedule of n_ops ops can have
  EXPECT_NO_THROW(schedule_from_json(j, "s.json"));
  j = base;
  j["allocations"][1]["unit"] = n_ops;
  EXPECT_EQ(error_of([&] { schedule_from_json(j, "s.json"); }).json_path(), "allocations[1].unit");
  j = base;
  const int micro_steps = j.value("micro_steps", 1);
  j["ops"][2]["micro_step"] = micro_steps;
  e = error_of([&] { schedule_from_json(j, "s.json"); });
  EXPECT_EQ(e.json_path(), "ops[2].micro_step");
  EXPECT_NE(std::string(e.what()).find("from 0 to " + std::to_string(micro_steps - 1)), std::string::npos) << e.what();
  j["ops"][2]["micro_step"] = micro_steps - 1;
  EXPECT_NO_THROW(schedule_from_json(j, "s.json"));
}

// A collective without its buffer (comm_bytes absent or 0) was priced as its latency alone, a
// step that moved nothing (session 32): refused at the op's comm_bytes. Other ops need none.
TEST(ScheduleReader, ACollectiveWithoutItsBufferIsRefused) {
  const nlohmann::json base = small_schedule();
  int collective = -1, compute = -1;
  for (std::size_t i = 0; i < base["ops"].size(); ++i) {
    const std::string kind = base["ops"][i]["kind"];
    if (collective < 0 && (kind == "all_gather" || kind == "reduce_scatter" || kind == "all_reduce")) collective = int(i);
    if (compute < 0 && kind == "compute_fwd") compute = int(i);
  }
  ASSERT_GE(collective, 0);
  ASSERT_GE(compute, 0);
  const std::string path = "ops[" + std::to_string(collective) + "].comm_bytes";
  nlohmann::json j = base;
  j["ops"][collective].erase("comm_bytes");
  InputError e = error_of([&] { schedule_from_json(j, "s.json"); });
  EXPECT_EQ(e.json_path(), path);
  EXPECT_NE(std::string(e.what()).find("got none"), std::string::npos) << e.what();
  j["ops"][collective]["comm_bytes"] = 0;
  EXPECT_EQ(error_of([&] { schedule_from_json(j, "s.json"); }).json_path(), path);
  j["ops"][collective]["comm_bytes"] = 1;
  EXPECT_NO_THROW(schedule_from_json(j, "s.json"));
  j = base;
  j["ops"][compute].erase("comm_bytes");  // a compute op moves no buffer
  EXPECT_NO_THROW(schedule_from_json(j, "s.json"));
}

// Item 10's schedule form: attention FLOPs are a part of an op's FLOPs.
TEST(ScheduleReader, AttentionFlopsAboveFlopsAreRefused) {
  nlohmann::json j = small_schedule();
  for (auto& op : j["ops"])
    if (op.contains("flops")) {
      op["attention_flops"] = op["flops"].get<double>() * 2;
      break;
    }
  EXPECT_NE(error_of([&] { schedule_from_json(j, "s.json"); }).json_path().find("attention_flops"), std::string::npos);
}

}  // namespace
}  // namespace fsdpsim::planner
