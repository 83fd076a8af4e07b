// [Hopeless plans] (planner/plan.h): the device state a step starts with
// (state_bytes_before_first_op) is a lower bound of what the memory replay holds at the step's
// first op, so a replay given a bound below it gives up there; plan_step stops before the step's
// ops when that state passes the bound it is given, after the first forward when that state and
// what the forward's ops left allocated pass it, where the whole plan's replay gives up too; and
// the plan is otherwise unchanged.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "tests/planner/llama1b_scenario.h"

namespace fsdpsim::planner {
namespace {

Scenario llama1b(const std::vector<std::string>& overrides = {}) {
  return testing::llama1b_scenario("hopeless_plans_test", overrides);
}

std::int64_t bytes_of(const Schedule& s, MemCategory category) {
  std::int64_t total = 0;
  for (const Allocation& a : s.allocations)
    if (a.persistent && a.category == category && !on_host(a.placement)) total += a.bytes;
  return total;
}

// Llama-3.2-1B (1,235,814,400 parameters, every dim 0 a multiple of 8: no padding) under FSDP2
// on 8 GPUs: the step starts with each rank's eighth of the fp32 parameters, 1,235,814,400 x 4 /
// 8 = 617,907,200 bytes, and the two cuBLAS workspaces; not the AdamW state (2 x 4 bytes an
// element, twice as much), which torch.optim makes at the first step.
TEST(HopelessPlans, TheStartingStateIsTheShardedParametersNotTheOptimizerState) {
  const Scenario s = llama1b();
  ASSERT_EQ(s.model->parameter_count(), 1235814400);
  const Plan plan = plan_step(s);
  const std::int64_t workspaces = bytes_of(plan.schedule, MemCategory::workspace);
  EXPECT_GT(workspaces, 0);
  EXPECT_EQ(bytes_of(plan.schedule, MemCategory::sharded_param), 617907200);
  EXPECT_EQ(bytes_of(plan.schedule, MemCategory::optimizer_state), 2 * 617907200);
  EXPECT_EQ(state_bytes_before_first_op(plan.schedule), 617907200 + workspaces);
  // Offloaded to the CPU, the parameters and the optimizer state are host memory.
  EXPECT_EQ(state_bytes_before_first_op(plan_step(llama1b({"fsdp.cpu_offload=true"})).schedule), workspaces);
}

// Against the replay, across frameworks: FSDP2, FSDP1 building its flat parameters in a prelude,
// replicated gradients (NO_SHARD), hybrid sharding, DeepSpeed ZeRO-3 (its state made before the
// step), CPU offload. A replay whose bound is one byte under the starting state gives up at the
// step's first op (in the first step, where a torch.optim plan replays one).
TEST(HopelessPlans, AReplayBoundBelowTheStartingStateGivesUpAtTheFirstOp) {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"fsdp.version=1"},
      {"fsdp.version=1", "init=cuda"},
      {"fsdp.strategy=NO_SHARD"},
      {"fsdp.strategy=HYBRID_SHARD"},
      {"fsdp.cpu_offload=true"},
      {"training.optimizer_kernel=fused", "training.activation_checkpointing=full"},
      {"deepspeed.reduce_bucket_size=200000000", "training.master_weights=optimizer_state"},
  };
  for (const auto& overrides : cases) {
    std::string what;
    for (const std::string& o : overrides) what += o + " ";
    const Plan plan = plan_step(llama1b(overrides));
    const std::int64_t state = state_bytes_before_first_op(plan.schedule);
    ASSERT_GT(state, 0) << what;
    const MemoryReport below = replay_memory(plan.schedule, 0, state - 1);
    EXPECT_TRUE(below.gave_up) << what;
    EXPECT_EQ(below.gave_up_at_op, 0) << what;
    EXPECT_EQ(below.gave_up_in_first_step, makes_state_at_first_step(plan.schedule)) << what;
    EXPECT_GE(below.peak_reserved_bytes, state) << what;
  }
}

// plan_step's two stops, against the whole plan's replay (the independent method), across
// frameworks and checkpointing: one byte under the starting state, the plan stops before the step
// holding that state. At the starting state, it goes on to the first forward's end, and stops there
// holding more than the state when the forward saved anything; the whole plan's replay, one byte
// under what it holds, gives up by the last op the stopped plan has (the forward's). At what it
// holds, the plan is the plan made without a bound, byte for byte.
TEST(HopelessPlans, PlanStepStopsOnlyWhereTheWholePlansReplayGivesUp) {
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"training.activation_checkpointing=none"},
      {"training.activation_checkpointing=full", "fsdp.version=1", "init=cuda"},
      {"fsdp.strategy=NO_SHARD"},
      {"fsdp.cpu_offload=true", "training.grad_accum=2", "training.global_batch=null"},
      {"deepspeed.reduce_bucket_size=200000000", "training.master_weights=optimizer_state"},
  };
  int stopped_after_forward = 0;
  for (const auto& overrides : cases) {
    std::string what;
    for (const std::string& o : overrides) what += o + " ";
    const Scenario s = llama1b(overrides);
    const Plan full = plan_step(s);
    const std::string full_json = schedule_to_json(full.schedule).dump();
    EXPECT_EQ(full.stopped_holding_bytes, -1) << what;
    const std::int64_t state = state_bytes_before_first_op(full.schedule);
    PlanCache cache;
    const Plan before = plan_step(s, cache, Naming::readable, state - 1);
    EXPECT_EQ(before.stopped_holding_bytes, state) << what;
    EXPECT_TRUE(before.schedule.ops.empty()) << what;
    const Plan after = plan_step(s, cache, Naming::readable, state);
    std::int64_t held = after.stopped_holding_bytes;
    if (held >= 0) {
      ++stopped_after_forward;
      EXPECT_GT(held, state) << what;
      ASSERT_FALSE(after.schedule.ops.empty()) << what;
      ASSERT_LT(after.schedule.ops.size(), full.schedule.ops.size()) << what;
      const MemoryReport replay = replay_memory(full.schedule, 0, held - 1);
      EXPECT_TRUE(replay.gave_up) << what;
      EXPECT_LT(replay.gave_up_at_op, static_cast<int>(after.schedule.ops.size())) << what;
      if (makes_state_at_first_step(full.schedule)) {
        EXPECT_TRUE(replay.gave_up_in_first_step) << what;
      }
      EXPECT_EQ(plan_step(s, cache, Naming::readable, held - 1).stopped_holding_bytes, held) << what;
    } else {
      held = state;
    }
    const Plan whole = plan_step(s, cache, Naming::readable, held);
    EXPECT_EQ(whole.stopped_holding_bytes, -1) << what;
    EXPECT_EQ(schedule_to_json(whole.schedule).dump(), full_json) << what;
  }
  EXPECT_EQ(stopped_after_forward, static_cast<int>(cases.size()));  // every forward saves something
}

}  // namespace
}  // namespace fsdpsim::planner
