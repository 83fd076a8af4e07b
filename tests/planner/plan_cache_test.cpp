// planner::PlanCache: a plan made with a cached per-model layout is the plan made without it,
// byte for byte, as the wrap policy, checkpointing and strategy change between plans and
// when the model is replaced; a layout is built exactly when none seen fits.
#include <gtest/gtest.h>

#include <thread>

#include "planner/plan.h"
#include "planner/scenario.h"

namespace fsdpsim::planner {
namespace {

const std::string kRoot = FSDPSIM_SOURCE_ROOT;

// GPT-2 ties its LM head to the token embedding, so the tied-parameter path is exercised.
Scenario gpt2(const std::vector<std::string>& overrides = {}) {
  const nlohmann::json j = {{"model", "models/gpt2.json"},
                            {"cluster", "scenarios/clusters/dgx-h100.json"},
                            {"training", {{"global_batch", 32}, {"micro_batch", 2}, {"seq_len", 1024}}},
                            {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}}}};
  return parse_scenario(j, kRoot + "/scenarios/plan_cache_test.json", overrides);
}

std::string dump(const Plan& p) { return schedule_to_json(p.schedule).dump(); }

// A plan made with no layout seen before: plan_step(scenario) plans with the thread's cache.
Plan fresh_plan(const Scenario& s) {
  PlanCache none_yet;
  return plan_step(s, none_yet);
}

TEST(PlanCache, CachedPlansEqualFreshOnesAsTheConfigurationChanges) {
  Scenario s = gpt2();
  PlanCache cache;
  struct Step {
    const char* what;
    void (*apply)(Scenario&);
    bool rebuilds;
  };
  const Step steps[] = {
      {"first plan", [](Scenario&) {}, true},
      {"same configuration", [](Scenario&) {}, false},
      {"FSDP1, no prefetch (layout unchanged)",
       [](Scenario& x) {
         x.fsdp.version = 1;
         x.fsdp.backward_prefetch = BackwardPrefetch::none;
       },
       false},
      {"ZeRO-2 style SHARD_GRAD_OP", [](Scenario& x) { x.fsdp.strategy = Strategy::SHARD_GRAD_OP; }, false},
      {"full checkpointing", [](Scenario& x) { x.training.checkpointing = Checkpointing::full; }, true},
      {"every 2nd block",
       [](Scenario& x) {
         x.training.checkpointing = Checkpointing::every_k;
         x.training.checkpoint_every = 2;
       },
       true},
      {"every 3 blocks per unit",
       [](Scenario& x) {
         x.fsdp.wrap.policy = WrapPolicy::every_k_blocks;
         x.fsdp.wrap.every = 3;
       },
       true},
      {"back to one block per unit (seen before)", [](Scenario& x) { x.fsdp.wrap = WrapSpec{}; }, false},
      {"root only", [](Scenario& x) { x.fsdp.wrap.policy = WrapPolicy::root; }, true},
      {"blocks without checkpointing (the first layout)",
       [](Scenario& x) {
         x.fsdp.wrap = WrapSpec{};
         x.training.checkpointing = Checkpointing::none;
       },
       false},
      // The layout keeps the model's forward FLOPs per (micro-batch, sequence): each pair its own.
      {"micro-batch 4 (layout unchanged)", [](Scenario& x) { x.training.micro_batch = 4; }, false},
      {"sequence 2048 (layout unchanged)", [](Scenario& x) { x.training.seq_len = 2048; }, false},
      {"micro-batch 2 again at sequence 2048", [](Scenario& x) { x.training.micro_batch = 2; }, false},
  };
  std::size_t expected_builds = 0;
  for (const Step& step : steps) {
    step.apply(s);
    const Plan cached = plan_step(s, cache);
    const Plan fresh = fresh_plan(s);
    if (step.rebuilds) ++expected_builds;
    EXPECT_EQ(cache.layouts_built(), expected_builds) << step.what;
    EXPECT_EQ(dump(cached), dump(fresh)) << step.what;
    ASSERT_EQ(cached.units.size(), fresh.units.size()) << step.what;
    for (std::size_t u = 0; u < fresh.units.size(); ++u) {
      EXPECT_EQ(cached.units[u].name, fresh.units[u].name) << step.what;
      EXPECT_EQ(cached.units[u].params, fresh.units[u].params) << step.what;
      EXPECT_EQ(cached.shards[u].local_numel, fresh.shards[u].local_numel) << step.what;
    }
  }
}

// Without names a plan is the same plan: every op and allocation, every size, stream, cost
// input and dependency, with empty names and labels.
TEST(PlanCache, PlansWithoutNamesDifferOnlyInNames) {
  for (const char* strategy : {"FULL_SHARD", "HYBRID_SHARD", "NO_SHARD"}) {
    const Scenario s = gpt2({std::string("fsdp.strategy=") + strategy, "training.activation_checkpointing=2"});
    PlanCache cache;
    const Plan unnamed = plan_step(s, cache, Naming::none);
    Plan named = fresh_plan(s);
    ASSERT_FALSE(named.schedule.ops.empty());
    EXPECT_FALSE(named.schedule.ops.front().name.empty());
    for (Op& op : named.schedule.ops) op.name.clear();
    for (Allocation& a : named.schedule.allocations) a.label.clear();
    EXPECT_EQ(dump(unnamed), dump(named)) << strategy;
  }
}

TEST(PlanCache, AnotherModelIsReplannedFromScratch) {
  PlanCache cache;
  const Scenario small = gpt2();
  const Plan a = plan_step(small, cache);
  const Scenario bigger = gpt2({"model=models/gpt2-medium.json"});  // 24 blocks, other addresses
  const Plan b = plan_step(bigger, cache);
  EXPECT_EQ(cache.layouts_built(), 2u);
  EXPECT_EQ(dump(b), dump(fresh_plan(bigger)));
  EXPECT_EQ(b.units.size(), 25u);  // the root and 24 blocks
  EXPECT_EQ(a.units.size(), 13u);  // the root and 12 blocks
}

// A layout serves the scenarios that hold its parse of the model (a scenario's copies share
// it: models::SharedModel), whatever other models were planned in between; an equal model
// parsed again is another model. Counted by layouts_built: a mutant that matched any model
// would plan the bigger model with the small one's units (checked by the dumps).
TEST(PlanCache, LayoutsAreKeptPerModelParse) {
  PlanCache cache;
  const Scenario small = gpt2();
  const Scenario bigger = gpt2({"model=models/gpt2-medium.json"});
  const Scenario small_copy = small;  // shares small's model
  EXPECT_EQ(small_copy.model.address(), small.model.address());
  const Scenario small_again = gpt2();  // parsed again: an equal model, not the same
  EXPECT_NE(small_again.model.address(), small.model.address());
  plan_step(small, cache);
  EXPECT_EQ(dump(plan_step(bigger, cache)), dump(fresh_plan(bigger)));
  EXPECT_EQ(dump(plan_step(small_copy, cache)), dump(fresh_plan(small)));
  EXPECT_EQ(cache.layouts_built(), 2u);  // small's layout was kept beside bigger's
  EXPECT_EQ(dump(plan_step(small_again, cache)), dump(fresh_plan(small)));
  EXPECT_EQ(cache.layouts_built(), 3u);
}

// plan_step(scenario) plans with the calling thread's cache (thread_plan_cache): a second plan
// of the same model, wrap and checkpointing builds no layout and is the same plan; another
// thread has a cache of its own.
TEST(PlanCache, PlanStepAlonePlansWithTheThreadsCache) {
  const Scenario s = gpt2();
  PlanCache& mine = thread_plan_cache();
  const std::size_t before = mine.layouts_built();
  const std::string first = dump(plan_step(s));
  EXPECT_EQ(mine.layouts_built(), before + 1);  // a model parsed here: no layout of it yet
  EXPECT_EQ(dump(plan_step(s)), first);
  EXPECT_EQ(mine.layouts_built(), before + 1);
  EXPECT_EQ(first, dump(fresh_plan(s)));
  const PlanCache* theirs = nullptr;
  std::size_t built_there = 0;
  std::thread([&] {
    theirs = &thread_plan_cache();
    (void)plan_step(s);
    built_there = theirs->layouts_built();
  }).join();
  EXPECT_NE(theirs, &mine);
  EXPECT_EQ(built_there, 1u);
}

}  // namespace
}  // namespace fsdpsim::planner
