// What the planner and the cost model compute once and share (docs/benchmarks.md, session 29):
//  - [Module tables] (planner/cost_model.cpp): the cost models of one model share what they
//    hold of its modules where the execution, the blocks' types and the default eager factor
//    agree;
//  - a layout's shards by (shard group, FSDP version, expert parallel) (planner/plan.cpp,
//    unit_shards), reused by the plans of a PlanCache.
// Either must price and plan exactly as if built alone: each case is checked against a
// scenario parsed on its own (its own model object, so its own table and layout).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "tests/planner/llama1b_scenario.h"

namespace fsdpsim::planner {
namespace {

Scenario llama1b(const std::vector<std::string>& overrides = {}) {
  return testing::llama1b_scenario("shared_tables_test", overrides);
}

// What a cost model says of every op of `schedule` that reads its module table.
struct Prices {
  std::vector<double> memory_bound, kernels, issue;
  std::vector<int> classes;
};

Prices prices(const CostModel& cost, const Schedule& schedule) {
  Prices p;
  for (const Op& op : schedule.ops) {
    if (op.module.empty()) continue;
    p.memory_bound.push_back(cost.memory_bound_seconds(op));
    p.kernels.push_back(cost.kernels(op));
    p.issue.push_back(cost.issue_seconds(op));
    p.classes.push_back(cost.module_class(op.module));
  }
  return p;
}

// The cases differ in what a module table depends on: the execution (unstated, eager,
// compiled), the blocks' types (here the final norm, which has no eager factor of its own, made
// a block) and the calibration's default eager factor. Run in an order where each follows one
// that differs from it in one of them, and each against its own model.
TEST(ModuleTables, CostModelsOfOneModelPriceAsIfBuiltAlone) {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"training.torch_compile=false"},
      {"training.torch_compile=true"},
      {"training.torch_compile=false", R"(fsdp.wrap.block_types=["LlamaRMSNorm"])"},
      {"training.torch_compile=false", R"(fsdp.wrap.block_types=["LlamaRMSNorm"])",
       "calibration.eager_memory_bound_factor=2.0"},
      {"training.torch_compile=false"},
      {},
  };
  const Scenario shared_model = llama1b();
  const Schedule schedule = plan_step(shared_model).schedule;
  std::vector<Prices> seen;
  for (const auto& overrides : cases) {
    const Scenario alone = llama1b(overrides);
    Scenario shared = alone;
    shared.model = shared_model.model;  // the one model object of every case
    ASSERT_EQ(shared.model.address(), shared_model.model.address());
    ASSERT_NE(alone.model.address(), shared_model.model.address());
    const Prices a = prices(CostModel(alone), schedule), s = prices(CostModel(shared), schedule);
    ASSERT_FALSE(a.memory_bound.empty());
    EXPECT_EQ(s.memory_bound, a.memory_bound) << ::testing::PrintToString(overrides);
    EXPECT_EQ(s.kernels, a.kernels) << ::testing::PrintToString(overrides);
    EXPECT_EQ(s.issue, a.issue) << ::testing::PrintToString(overrides);
    EXPECT_EQ(s.classes, a.classes) << ::testing::PrintToString(overrides);
    seen.push_back(a);
  }
  // The cases do price differently, so a table taken from the case before would show.
  for (std::size_t i = 1; i + 2 < cases.size(); ++i) {
    const bool differs = seen[i].memory_bound != seen[i - 1].memory_bound || seen[i].issue != seen[i - 1].issue ||
                         seen[i].kernels != seen[i - 1].kernels;
    EXPECT_TRUE(differs) << "case " << i << " prices as case " << i - 1;
  }
}

// A model freed and another parsed with the same settings: the second's cost model holds the
// second's modules, even where the allocator gives the new model the freed one's address (a
// memo keyed on the address, or on the settings alone, would hand Llama-3.1-8B the 1B's table,
// which has no block 16 to 31).
TEST(ModuleTables, AModelFreedIsNotTakenForTheNextOne) {
  const std::vector<std::string> eager = {"training.torch_compile=false"};
  std::vector<std::string> eager_8b = eager;
  eager_8b.push_back("model=models/llama3.1-8b.json");
  std::vector<Prices> seen;
  for (int i = 0; i < 4; ++i) {
    {
      const Scenario first = llama1b(eager);
      const CostModel cost(first);
      EXPECT_GE(cost.module_class("model.layers.15"), 0);
      EXPECT_EQ(cost.module_class("model.layers.31"), -1);  // the 1B has 16 blocks
    }
    const Scenario next = llama1b(eager_8b);
    const CostModel cost(next);
    EXPECT_GE(cost.module_class("model.layers.31"), 0) << i;  // the 8B has 32
    seen.push_back(prices(cost, plan_step(next).schedule));
    EXPECT_EQ(seen.back().memory_bound, seen.front().memory_bound) << i;
    EXPECT_EQ(seen.back().classes, seen.front().classes) << i;
  }
}

// Each case planned alone (its own model) and through one PlanCache on one model object: the
// same shards and allocations; `common` overrides go with every case.
void expect_cached_plans_equal_plans_alone(const std::vector<std::vector<std::string>>& cases,
                                           const std::vector<std::string>& common) {
  auto with_common = [&](std::vector<std::string> o) {
    o.insert(o.begin(), common.begin(), common.end());
    return o;
  };
  const Scenario base = llama1b(with_common({}));
  PlanCache cache;
  for (const auto& overrides : cases) {
    Scenario s = llama1b(with_common(overrides));
    PlanCache none_yet;
    const Plan alone = plan_step(s, none_yet);
    s.model = base.model;  // one model: the cache keeps one layout for every case
    const Plan cached = plan_step(s, cache);
    ASSERT_EQ(cached.shards.size(), alone.shards.size());
    for (std::size_t u = 0; u < alone.shards.size(); ++u) {
      EXPECT_EQ(cached.shards[u].numel, alone.shards[u].numel) << u;
      EXPECT_EQ(cached.shards[u].local_numel, alone.shards[u].local_numel) << u;
      EXPECT_EQ(cached.shards[u].gathered_numel, alone.shards[u].gathered_numel) << u;
      EXPECT_EQ(cached.shards[u].optimizer_numel, alone.shards[u].optimizer_numel) << u;
    }
    ASSERT_EQ(cached.schedule.allocations.size(), alone.schedule.allocations.size());
    for (std::size_t a = 0; a < alone.schedule.allocations.size(); ++a)
      EXPECT_EQ(cached.schedule.allocations[a].bytes, alone.schedule.allocations[a].bytes) << a;
  }
  EXPECT_EQ(cache.layouts_built(), 1u);
}

// Plans of one PlanCache across worlds, shard groups and FSDP versions, back and forth, each
// equal to the plan made alone: 18 shardings, more than a layout keeps (16), so entries are
// dropped and made again.
TEST(LayoutShards, PlansAcrossShardingsEqualPlansMadeAlone) {
  std::vector<std::vector<std::string>> cases;
  auto at = [](int nodes, std::vector<std::string> more) {
    more.push_back("cluster.nodes=" + std::to_string(nodes));
    more.push_back("training.global_batch=" + std::to_string(nodes * 8 * 2));  // one micro-step
    return more;
  };
  for (int nodes : {1, 2, 4, 8, 16, 32, 64})
    for (const char* version : {"fsdp.version=2", "fsdp.version=1"}) cases.push_back(at(nodes, {version}));
  for (const char* group : {"fsdp.shard_group_size=2", "fsdp.shard_group_size=4"})
    for (const char* version : {"fsdp.version=2", "fsdp.version=1"})
      cases.push_back(at(2, {"fsdp.strategy=HYBRID_SHARD", group, version}));
  cases.push_back(at(1, {"fsdp.version=2"}));  // long since dropped, made again
  cases.push_back(at(2, {"fsdp.strategy=HYBRID_SHARD", "fsdp.shard_group_size=4", "fsdp.version=1"}));
  expect_cached_plans_equal_plans_alone(cases, {});
}

// The same across expert parallel sizes (Qwen1.5-MoE-A2.7B's 60 routed experts on 8 GPUs), which
// shard the expert units over the expert-sharded group.
TEST(LayoutShards, ExpertParallelSizesEqualPlansMadeAlone) {
  expect_cached_plans_equal_plans_alone(
      {{"fsdp.expert_parallel=2"}, {"fsdp.expert_parallel=4"}, {"fsdp.expert_parallel=2"}},
      {"model=models/qwen1.5-moe-a2.7b.json"});
}

}  // namespace
}  // namespace fsdpsim::planner
