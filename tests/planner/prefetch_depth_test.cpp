// fsdp.prefetch_depth (FSDP2's explicit prefetch lists of the next k units): the all-gather
// outputs alive at the backward peak, worked by hand for depth 1, 2 and 3; the forward
// all-gathers issued ahead with forward_prefetch; FSDP1 refused.
#include <gtest/gtest.h>

#include <string>

#include "models/json_input.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "planner/sweep_space.h"
#include "planner/internal/schedule_graph.h"
#include "synthetic.h"

namespace fsdpsim::planner {
namespace {

using testing::block_model;
using testing::cluster;

// fp32 everywhere (no casts), no optimizer state, 4 blocks of one [1024, 2048] weight (8 MiB,
// sharded over 8 ranks with no padding), a root-owned [4096, 256] embedding, 16 MiB of saved
// activations per block (16384 bytes/token x 1024 tokens), so that the step peaks at the last
// block's backward, every activation still saved.
nlohmann::json four_block_scenario() {
  return {{"model", block_model(4, {1024, 2048}, 16384.0, {4096, 256})},
          {"cluster", cluster(1, 8)},
          {"training", {{"micro_batch", 1}, {"seq_len", 1024}, {"param_dtype", "fp32"}, {"reduce_dtype", "fp32"},
                        {"master_dtype", "fp32"}, {"optimizer", "none"}}},
          {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}}}};
}

constexpr std::int64_t kBlockBytes = 1024LL * 2048 * 4;  // one block's fp32 weight, gathered

Plan plan_with(const std::vector<std::string>& overrides) {
  Plan plan = plan_step(parse_scenario(four_block_scenario(), "test.json", overrides));
  validate_schedule(plan.schedule, "test.json");
  return plan;
}

MemoryReport replay_with(int depth) {
  return replay_memory(plan_with({"fsdp.prefetch_depth=" + std::to_string(depth)}).schedule);
}

TEST(PrefetchDepth, BackwardPeakHoldsOneAllGatherOutputPerUnitAhead) {
  // At the last block's backward (the peak: all 4 x 16 MiB activations saved) its pre-backward
  // has gathered it (its all-gather output freed at the copy-out) and prefetched the next
  // `depth` blocks in backward order: blocks 2, 1, 0, each an 8 MiB all-gather output.
  //   depth 1: AG(2)                 =  8 MiB of all-gather buffers
  //   depth 2: AG(2) + AG(1)         = 16 MiB
  //   depth 3: AG(2) + AG(1) + AG(0) = 24 MiB
  // Everything else at that op (root and block 3 unsharded, block 3's gradients, the
  // activations, the gradient-input temporary) is the same at every depth, so the peak grows
  // by one block's bytes per unit of depth.
  const MemoryReport d1 = replay_with(1), d2 = replay_with(2), d3 = replay_with(3);
  const int ag = static_cast<int>(MemCategory::all_gather_buffer);
  EXPECT_EQ(d1.breakdown_at_peak[ag], 1 * kBlockBytes);
  EXPECT_EQ(d2.breakdown_at_peak[ag], 2 * kBlockBytes);
  EXPECT_EQ(d3.breakdown_at_peak[ag], 3 * kBlockBytes);
  EXPECT_EQ(d2.peak_allocated_bytes - d1.peak_allocated_bytes, kBlockBytes);
  EXPECT_EQ(d3.peak_allocated_bytes - d1.peak_allocated_bytes, 2 * kBlockBytes);
  // Only three blocks lie ahead of the last one: depth 5 prefetches the same three.
  EXPECT_EQ(replay_with(5).peak_allocated_bytes, d3.peak_allocated_bytes);
}

TEST(PrefetchDepth, DefaultIsTheImplicitOneUnitPrefetch) {
  // Depth 1 stated is the schedule of no depth stated, op for op.
  const Plan stated = plan_with({"fsdp.prefetch_depth=1"});
  const Plan unstated = plan_with({});
  ASSERT_EQ(stated.schedule.ops.size(), unstated.schedule.ops.size());
  for (std::size_t i = 0; i < stated.schedule.ops.size(); ++i)
    EXPECT_EQ(stated.schedule.ops[i].name, unstated.schedule.ops[i].name) << i;
}

// Forward all-gathers issued before the first forward compute op: the root's own, then (with
// forward_prefetch) the next `depth` blocks'.
int forward_gathers_before_first_compute(const Plan& plan) {
  int gathers = 0;
  for (const Op& op : plan.schedule.ops) {
    if (op.kind == OpKind::compute_fwd) return gathers;
    if (op.kind == OpKind::all_gather && op.phase == Phase::forward) ++gathers;
  }
  return gathers;
}

TEST(PrefetchDepth, ForwardPrefetchIssuesDepthUnitsAhead) {
  for (int depth : {1, 2, 3}) {
    const std::string d = "fsdp.prefetch_depth=" + std::to_string(depth);
    EXPECT_EQ(forward_gathers_before_first_compute(plan_with({d, "fsdp.forward_prefetch=true"})), 1 + depth) << depth;
    // Without forward_prefetch the forward has no explicit list: depth reaches backward only.
    EXPECT_EQ(forward_gathers_before_first_compute(plan_with({d})), 1) << depth;
  }
}

void expect_input_error(const std::vector<std::string>& overrides, const std::string& fragment) {
  try {
    parse_scenario(four_block_scenario(), "test.json", overrides);
    ADD_FAILURE() << "expected an InputError for " << overrides.back();
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("fsdp.prefetch_depth"), std::string::npos) << what;
    EXPECT_NE(what.find(fragment), std::string::npos) << what;
  }
}

TEST(PrefetchDepth, Fsdp1AndNonPositiveDepthsAreRefused) {
  // FSDP1's limit_all_gathers hard-codes two all-gathers in flight (_limiter_utils.py).
  expect_input_error({"fsdp.version=1", "fsdp.prefetch_depth=2"}, "limit_all_gathers");
  expect_input_error({"fsdp.prefetch_depth=0"}, "");
  // FSDP1 with the default depth stays valid.
  EXPECT_NO_THROW(parse_scenario(four_block_scenario(), "test.json", {"fsdp.version=1", "fsdp.prefetch_depth=1"}));
}

TEST(PrefetchDepth, SweepableAsAnAxis) {
  // `sweep --axis fsdp.prefetch_depth=1,2,3`: each point's override reaches the scenario.
  const Axis a = expand_axis(parse_axis_spec("fsdp.prefetch_depth=1,2,3"), {8, 8});
  ASSERT_EQ(a.values.size(), 3u);
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(parse_scenario(four_block_scenario(), "s.json", a.values[i].overrides).fsdp.prefetch_depth, i + 1);
}

}  // namespace
}  // namespace fsdpsim::planner
