// [FSDP1 at one rank] (planner/scenario.cpp): FullyShardedDataParallel runs NO_SHARD when its
// process group has one rank (torch/distributed/fsdp/_init_utils.py, _init_core_state: "FSDP is
// switching to use `NO_SHARD` instead of ... since the world size is 1").
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "input_error_of.h"
#include "planner/plan.h"
#include "planner/scenario.h"

namespace fsdpsim::planner {
namespace {

const std::string kScenario = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json";

Scenario one_gpu(const std::string& version, const std::string& strategy) {
  std::vector<std::string> o = {"model=hf:models/hf/llama3.2-1b.json", "cluster.gpus_per_node=1",
                                "training.global_batch=2", "fsdp.version=" + version, "fsdp.strategy=" + strategy};
  if (strategy == "SHARD_GRAD_OP") o.push_back("fsdp.reshard_after_forward=false");  // the base says true
  return load_scenario(kScenario, o);
}

int count_kind(const Schedule& s, OpKind kind) {
  int n = 0;
  for (const Op& op : s.ops) n += op.kind == kind;
  return n;
}

// On one GPU, FSDP1 FULL_SHARD and SHARD_GRAD_OP are NO_SHARD: the plan is NO_SHARD's op for op
// (no all-gather, no reduce-scatter: one rank's all-reduce is all the gradient needs), and the
// scenario remembers what was asked for (estimate's warning says so).
TEST(Fsdp1AtOneRank, EveryStrategyRunsNoShard) {
  const Plan no_shard = plan_step(one_gpu("1", "NO_SHARD"));
  EXPECT_EQ(count_kind(no_shard.schedule, OpKind::all_gather), 0);
  for (const std::string strategy : {"FULL_SHARD", "SHARD_GRAD_OP"}) {
    const Scenario s = one_gpu("1", strategy);
    EXPECT_EQ(s.fsdp.strategy, Strategy::NO_SHARD) << strategy;
    ASSERT_TRUE(s.fsdp.requested_strategy.has_value());
    EXPECT_EQ(strategy_name(*s.fsdp.requested_strategy), strategy);
    EXPECT_EQ(s.fsdp.reshard_after_forward, 0);
    const Plan p = plan_step(s);
    EXPECT_EQ(count_kind(p.schedule, OpKind::all_gather), 0) << strategy;
    EXPECT_EQ(count_kind(p.schedule, OpKind::reduce_scatter), 0) << strategy;
    ASSERT_EQ(p.schedule.ops.size(), no_shard.schedule.ops.size()) << strategy;
    for (std::size_t i = 0; i < p.schedule.ops.size(); ++i) {
      EXPECT_EQ(p.schedule.ops[i].name, no_shard.schedule.ops[i].name) << strategy << " op " << i;
      EXPECT_EQ(p.schedule.ops[i].kind, no_shard.schedule.ops[i].kind) << strategy << " op " << i;
    }
  }
  // NO_SHARD itself is not "replaced".
  EXPECT_FALSE(one_gpu("1", "NO_SHARD").fsdp.requested_strategy.has_value());
}

// FSDP2 has no such clamp: fully_shard on one rank still gathers (a one-rank all-gather) into
// its unsharded parameters. Two GPUs are not clamped either.
TEST(Fsdp1AtOneRank, OnlyFsdp1OnOneRank) {
  const Scenario fsdp2 = one_gpu("2", "FULL_SHARD");
  EXPECT_EQ(fsdp2.fsdp.strategy, Strategy::FULL_SHARD);
  EXPECT_FALSE(fsdp2.fsdp.requested_strategy.has_value());
  EXPECT_GT(count_kind(plan_step(fsdp2).schedule, OpKind::all_gather), 0);
  const Scenario two = load_scenario(kScenario, {"model=hf:models/hf/llama3.2-1b.json", "cluster.gpus_per_node=2",
                                                 "training.global_batch=4", "fsdp.version=1"});
  EXPECT_EQ(two.fsdp.strategy, Strategy::FULL_SHARD);
}

// A hybrid strategy with a one-rank shard group in a larger world is clamped too, but NO_SHARD
// then reduces over that one-rank group: the replicas never synchronize (pytorch/pytorch#154888).
// Refused, naming the field and what to use instead.
TEST(Fsdp1AtOneRank, HybridShardOfOneRankIsRefused) {
  const InputError e = testing::input_error_of([] {
    load_scenario(kScenario, {"fsdp.version=1", "fsdp.strategy=HYBRID_SHARD", "fsdp.shard_group_size=1"});
  });
  EXPECT_EQ(e.json_path(), "fsdp.shard_group_size");
  const std::string what = e.what();
  EXPECT_NE(what.find("never all-reduced across the 8 replicas"), std::string::npos) << what;
  EXPECT_NE(what.find("pytorch/pytorch#154888"), std::string::npos) << what;
  // FSDP2's HSDP over a one-rank shard group all-reduces over the replicate group: planned.
  const Scenario fsdp2 =
      load_scenario(kScenario, {"fsdp.version=2", "fsdp.strategy=HYBRID_SHARD", "fsdp.shard_group_size=1"});
  EXPECT_EQ(fsdp2.fsdp.strategy, Strategy::HYBRID_SHARD);
  EXPECT_GT(count_kind(plan_step(fsdp2).schedule, OpKind::all_reduce), 0);
}

}  // namespace
}  // namespace fsdpsim::planner
