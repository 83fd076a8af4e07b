// [Job prelude] (planner/schedule.h): FSDP1 building its flat parameters before the first step,
// and its lazy init; the schedule's events, what the caching allocator keeps of them, and the
// schedule file's "prelude" (round trip and refusals).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "models/json_input.h"
#include "planner/job_memory.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "planner/schedule.h"
#include "synthetic.h"

namespace fsdpsim::planner {
namespace {

using testing::block_model;
using testing::cluster;
constexpr std::int64_t MiB = 1 << 20;

// Two blocks of one 50 MiB fp32 weight ([3200, 4096]) and a root embedding of 100 MiB
// ([6400, 4096]), FSDP1 FULL_SHARD over 4 ranks, fp32 throughout (no parameter mixed
// precision), built on the meta device.
Plan two_block_plan(const std::vector<std::string>& overrides = {}) {
  nlohmann::json scenario = {
      {"model", block_model(2, {3200, 4096}, 0, {6400, 4096})},
      {"cluster", cluster(1, 4)},
      {"training", {{"micro_batch", 1}, {"seq_len", 16}, {"param_dtype", "fp32"}, {"reduce_dtype", "fp32"},
                    {"master_dtype", "fp32"}, {"optimizer", "none"}}},
      {"fsdp", {{"version", 1}, {"strategy", "FULL_SHARD"}}}};
  return plan_step(parse_scenario(scenario, "test.json", overrides));
}

struct Event {
  bool free;
  std::int64_t bytes;
  bool persistent;
};
std::vector<Event> events(const Schedule& s) {
  std::vector<Event> out;
  for (const PreludeEvent& e : s.prelude)
    out.push_back({e.free, s.allocations[e.allocation].bytes, s.allocations[e.allocation].persistent});
  return out;
}

TEST(JobPrelude, Fsdp1BuildsEachUnitInnermostFirstThenSizesItsBuffers) {
  const Plan plan = two_block_plan();
  const std::vector<Event> e = events(plan.schedule);
  // Per unit (blocks.0, blocks.1, then the root that encloses them): the weight materialised,
  // the flat copy, the shard cloned out of it (persistent), the flat copy and the weight freed.
  // Then the lazy init: each unit's unsharded flat parameter sized and freed, the root first.
  const std::vector<Event> expected = {
      {false, 50 * MiB, false}, {false, 50 * MiB, false}, {false, 50 * MiB / 4, true}, {true, 50 * MiB, false}, {true, 50 * MiB, false},
      {false, 50 * MiB, false}, {false, 50 * MiB, false}, {false, 50 * MiB / 4, true}, {true, 50 * MiB, false}, {true, 50 * MiB, false},
      {false, 100 * MiB, false}, {false, 100 * MiB, false}, {false, 100 * MiB / 4, true}, {true, 100 * MiB, false}, {true, 100 * MiB, false},
      {false, 100 * MiB, false}, {true, 100 * MiB, false},
      {false, 50 * MiB, false}, {true, 50 * MiB, false},
      {false, 50 * MiB, false}, {true, 50 * MiB, false}};
  ASSERT_EQ(e.size(), expected.size());
  for (std::size_t i = 0; i < e.size(); ++i) {
    EXPECT_EQ(e[i].free, expected[i].free) << "event " << i;
    EXPECT_EQ(e[i].bytes, expected[i].bytes) << "event " << i;
    EXPECT_EQ(e[i].persistent, expected[i].persistent) << "event " << i;
  }
}

TEST(JobPrelude, ItsSegmentsStayReservedWorkedByHand) {
  const Plan plan = two_block_plan();
  // PyTorch's rules (planner/memory.h): blocks of 10 MiB or more get a segment rounded up to
  // 2 MiB, and a free cached block is reused best-fit, split when larger.
  //  blocks.0: weight 50 (new), flat 50 (new), shard 12.5 -> 14 (new); both 50s freed.
  //  blocks.1: weight and flat reuse the two 50s; its shard finds no free block: 14 (new).
  //  root:     weight 100 (new), flat 100 (new), shard 25 splits a free 50.
  //  lazy init: 100, 50, 50 reuse cached blocks.
  // 50 + 50 + 14 + 14 + 100 + 100 = 328 MiB.
  const std::vector<std::int64_t> segments = prelude_segments(plan.schedule);
  const std::vector<std::int64_t> by_hand = {14 * MiB, 14 * MiB, 50 * MiB, 50 * MiB, 100 * MiB, 100 * MiB};
  EXPECT_EQ(segments, by_hand);

  // The step runs in them: the replay's reserved memory holds them, and without the prelude
  // (the persistent shards made as the step starts) it reserves less.
  Schedule without = plan.schedule;
  without.prelude.clear();
  EXPECT_GE(replay_memory(plan.schedule).peak_reserved_bytes, 328 * MiB);
  EXPECT_LT(replay_memory(without).peak_reserved_bytes, replay_memory(plan.schedule).peak_reserved_bytes);
  // Allocated memory is the step's alone.
  EXPECT_EQ(replay_memory(without).peak_allocated_bytes, replay_memory(plan.schedule).peak_allocated_bytes);
}

TEST(JobPrelude, EachUnitIsMaterialisedBreadthFirst) {
  // A block whose children are attn (holding proj, one level down) then norm:
  // _get_modules_to_materialize walks breadth-first, so norm's weight (depth 1) comes before
  // attn.proj's (depth 2), though module order has proj first.
  nlohmann::json proj = {{"name", "proj"}, {"type", "Linear"}, {"params", {{{"name", "weight"}, {"shape", {1024, 1024}}}}}};
  nlohmann::json attn = {{"name", "attn"}, {"type", "Attention"}, {"children", {proj}}};
  nlohmann::json norm = {{"name", "norm"}, {"type", "Norm"}, {"params", {{{"name", "weight"}, {"shape", {1024}}}}}};
  nlohmann::json block = {{"name", "{i}"}, {"repeat", 2}, {"type", "Block"}, {"children", {attn, norm}},
                          {"costs", {{"forward_flops", {{"b*s", 1e6}}}, {"input_bytes", {{"b*s", 8.0}}}}}};
  nlohmann::json model = {{"name", "bfs"},
                          {"root", {{"name", ""}, {"type", "Model"},
                                    {"children", {{{"name", "blocks"}, {"type", "ModuleList"}, {"children", {block}}}}}}}};
  nlohmann::json scenario = {
      {"model", model},
      {"cluster", cluster(1, 4)},
      {"training", {{"micro_batch", 1}, {"seq_len", 16}, {"param_dtype", "fp32"}, {"reduce_dtype", "fp32"},
                    {"master_dtype", "fp32"}, {"optimizer", "none"}}},
      {"fsdp", {{"version", 1}, {"strategy", "FULL_SHARD"}}}};
  const Plan plan = plan_step(parse_scenario(scenario, "test.json"));
  const Schedule& s = plan.schedule;
  ASSERT_GE(s.prelude.size(), 2u);
  EXPECT_EQ(s.allocations[s.prelude[0].allocation].bytes, 1024 * 4);         // blocks.0's norm
  EXPECT_EQ(s.allocations[s.prelude[1].allocation].bytes, 1024 * 1024 * 4);  // then attn.proj
  EXPECT_EQ(s.allocations[s.prelude[2].allocation].bytes, (1024 * 1024 + 1024) * 4);  // the flat copy
  // After the shard and the flat copy's free, the weights are freed last made first.
  EXPECT_TRUE(s.prelude[5].free);
  EXPECT_EQ(s.allocations[s.prelude[5].allocation].bytes, 1024 * 1024 * 4);
  EXPECT_EQ(s.allocations[s.prelude[6].allocation].bytes, 1024 * 4);
}

TEST(JobPrelude, AModelBuiltOnTheGpuHasEveryWeightFirst) {
  const std::vector<Event> e = events(two_block_plan({"init=cuda"}).schedule);
  // Every weight at construction (module order: the embedding, then the blocks), then per
  // unit the flat copy, the shard, the flat copy freed and the unit's weight freed.
  ASSERT_GE(e.size(), 3u);
  EXPECT_EQ(e[0].bytes, 100 * MiB);
  EXPECT_EQ(e[1].bytes, 50 * MiB);
  EXPECT_EQ(e[2].bytes, 50 * MiB);
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(e[i].free);
  std::int64_t peak = 0, live = 0;
  for (const Event& x : e) {
    if (x.persistent) continue;
    live += x.free ? -x.bytes : x.bytes;
    peak = std::max(peak, live);
  }
  EXPECT_EQ(peak, 200 * MiB + 50 * MiB);  // the whole model and the first unit's flat copy
}

TEST(JobPrelude, MixedPrecisionSizesTheLowPrecisionBuffersToo) {
  // bf16 compute, fp32 stored: the lazy init sizes _mp_shard (bf16 shard), _full_param_padded
  // (bf16, gathered) and _full_prec_full_param_padded (fp32, gathered) per unit.
  const Plan plan = two_block_plan({"training.param_dtype=bf16"});
  const std::vector<Event> e = events(plan.schedule);
  ASSERT_EQ(e.size(), 15u + 3 * 6);
  const std::vector<std::int64_t> root = {100 * MiB / 4 / 2, 100 * MiB / 2, 100 * MiB};
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(e[15 + 2 * i].bytes, root[i]);
    EXPECT_FALSE(e[15 + 2 * i].free);
    EXPECT_TRUE(e[16 + 2 * i].free);
  }
}

TEST(JobPrelude, OnlyFsdp1BuildsFlatParameters) {
  EXPECT_TRUE(two_block_plan({"fsdp.version=2"}).schedule.prelude.empty());
  EXPECT_TRUE(two_block_plan({"fsdp.cpu_offload=true"}).schedule.prelude.empty());
}

// Two methods, one figure: job_memory.cpp's init peak (the sharded parameters + the largest unit
// materialised and flattened, worked from FSDP1's code) and the prelude's own high-water mark of
// allocated bytes, when the largest unit (here the root's 100 MiB) is built last, after every
// other unit's shard exists.
TEST(JobPrelude, ItsPeakIsTheInitPeakOfJobMemory) {
  const Scenario sc = parse_scenario(nlohmann::json{
      {"model", block_model(2, {3200, 4096}, 0, {6400, 4096})},
      {"cluster", cluster(1, 4)},
      {"training", {{"micro_batch", 1}, {"seq_len", 16}, {"param_dtype", "fp32"}, {"reduce_dtype", "fp32"},
                    {"master_dtype", "fp32"}, {"optimizer", "none"}}},
      {"fsdp", {{"version", 1}, {"strategy", "FULL_SHARD"}}}}, "test.json");
  const Plan plan = plan_step(sc);
  std::int64_t live = 0, peak = 0;
  for (const PreludeEvent& e : plan.schedule.prelude) {
    live += (e.free ? -1 : 1) * plan.schedule.allocations[e.allocation].bytes;
    peak = std::max(peak, live);

  }
  EXPECT_EQ(peak, 200 * MiB + 2 * (50 * MiB / 4) + 100 * MiB / 4);  // the root twice, three shards
  const PhasePeak init = init_peak(sc, plan);
  EXPECT_DOUBLE_EQ(init.device_bytes, static_cast<double>(peak)) << init.device_at;
}

TEST(JobPrelude, TheScheduleFileCarriesIt) {
  const Schedule s = two_block_plan().schedule;
  const nlohmann::json j = schedule_to_json(s);
  ASSERT_TRUE(j.contains("prelude"));
  EXPECT_EQ(j["prelude"][0], nlohmann::json({{"allocate", s.prelude[0].allocation}}));
  EXPECT_EQ(j["prelude"][3], nlohmann::json({{"free", s.prelude[3].allocation}}));
  const Schedule back = schedule_from_json(j, "s.json");
  EXPECT_EQ(schedule_to_json(back), j);
  EXPECT_EQ(replay_memory(back).peak_reserved_bytes, replay_memory(s).peak_reserved_bytes);
}

std::string refusal(nlohmann::json j) {
  try {
    schedule_from_json(j, "s.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(JobPrelude, ABadPreludeIsRefusedByPath) {
  const Schedule s = two_block_plan().schedule;
  const nlohmann::json good = schedule_to_json(s);
  const int transient = s.prelude[0].allocation;
  int persistent = -1;
  for (const PreludeEvent& e : s.prelude)
    if (s.allocations[e.allocation].persistent) persistent = e.allocation;
  ASSERT_GE(persistent, 0);

  nlohmann::json j = good;
  j["prelude"][0] = {{"allocate", 99999}};
  EXPECT_NE(refusal(j).find("prelude[0].allocate"), std::string::npos) << refusal(j);
  EXPECT_NE(refusal(j).find("unknown allocation 99999"), std::string::npos);

  j = good;
  j["prelude"].insert(j["prelude"].begin(), nlohmann::json{{"free", transient}});
  EXPECT_NE(refusal(j).find("before it makes it"), std::string::npos) << refusal(j);

  j = good;
  j["prelude"].push_back({{"free", persistent}});
  EXPECT_NE(refusal(j).find("is persistent"), std::string::npos) << refusal(j);

  j = good;
  j["prelude"].erase(j["prelude"].begin() + 3);  // the first flat copy never freed
  EXPECT_NE(refusal(j).find("never freed"), std::string::npos) << refusal(j);

  j = good;
  j["prelude"][1] = {{"allocate", 1}, {"free", 1}};
  EXPECT_NE(refusal(j).find("prelude[1]"), std::string::npos) << refusal(j);
  EXPECT_NE(refusal(j).find("expected {\"allocate\": id} or {\"free\": id}"), std::string::npos);

  j = good;
  j["prelude"].push_back(good["prelude"][0]);  // made twice
  EXPECT_NE(refusal(j).find("made twice"), std::string::npos) << refusal(j);

  // An op making what the prelude made and freed: made twice.
  j = good;
  j["ops"][0]["allocs"].push_back(transient);
  EXPECT_NE(refusal(j).find("made twice"), std::string::npos) << refusal(j);
}

}  // namespace
}  // namespace fsdpsim::planner
