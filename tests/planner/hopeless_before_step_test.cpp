// [Hopeless before the step] (planner/plan.h): the device state a step starts with
// (state_bytes_before_first_op) is a lower bound of what the memory replay holds at the step's
// first op, so a replay given a bound below it gives up there; and plan_step stops before the
// step's ops exactly when that state passes the bound it is given, the plan otherwise unchanged.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"

namespace fsdpsim::planner {
namespace {

const std::string kRoot = FSDPSIM_SOURCE_ROOT;

Scenario llama1b(const std::vector<std::string>& overrides = {}) {
  const nlohmann::json j = {{"model", "models/llama3.2-1b.json"},
                            {"cluster", "scenarios/clusters/dgx-h100.json"},
                            {"training", {{"global_batch", 16}, {"micro_batch", 2}, {"seq_len", 2048}}},
                            {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}}}};
  return parse_scenario(j, kRoot + "/scenarios/hopeless_before_step_test.json", overrides);
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
TEST(HopelessBeforeTheStep, TheStartingStateIsTheShardedParametersNotTheOptimizerState) {
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
TEST(HopelessBeforeTheStep, AReplayBoundBelowTheStartingStateGivesUpAtTheFirstOp) {
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

// plan_step stops before the step's ops exactly when the starting state passes the bound; at the
// bound the plan is the plan made without one, byte for byte.
TEST(HopelessBeforeTheStep, PlanStepStopsOnlyAboveTheStartingState) {
  for (const auto& overrides : std::vector<std::vector<std::string>>{{}, {"fsdp.version=1", "init=cuda"}}) {
    const Scenario s = llama1b(overrides);
    const Plan full = plan_step(s);
    const std::int64_t state = state_bytes_before_first_op(full.schedule);
    EXPECT_EQ(full.stopped_at_state_bytes, -1);
    PlanCache cache;
    const Plan stopped = plan_step(s, cache, Naming::readable, state - 1);
    EXPECT_EQ(stopped.stopped_at_state_bytes, state);
    EXPECT_TRUE(stopped.schedule.ops.empty());
    EXPECT_EQ(state_bytes_before_first_op(stopped.schedule), state);
    const Plan at = plan_step(s, cache, Naming::readable, state);
    EXPECT_EQ(at.stopped_at_state_bytes, -1);
    EXPECT_EQ(schedule_to_json(at.schedule).dump(), schedule_to_json(full.schedule).dump());
  }
}

}  // namespace
}  // namespace fsdpsim::planner
