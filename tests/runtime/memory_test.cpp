// The host backend's measured memory against the planner's replay: the executor makes and
// releases every allocation where the schedule puts them, on every rank, so its allocator's
// high-water mark must equal replay_memory's prediction to the byte.
#include "planner/memory.h"

#include <gtest/gtest.h>

#include <map>

#include "runtime/internal/allocator.h"
#include "runtime/runtime.h"
#include "runtime_scenarios.h"
#include "../planner/first_step_example.h"

namespace fsdpsim::runtime {
namespace {

struct Case {
  std::string name;
  nlohmann::json scenario;
};
// gtest prints the parameter in test listings (and CTest names): the case name, not raw bytes.
void PrintTo(const Case& c, std::ostream* out) { *out << c.name; }

// `json` with `key` set to `value` (the scenario's top-level objects beside fsdp and training).
nlohmann::json with(nlohmann::json json, const std::string& key, const nlohmann::json& value) {
  json[key] = value;
  return json;
}

std::vector<Case> cases() {
  using testing::scenario;
  return {
      // The allocator's settings: the executor's allocator maps expandable segments' pages and
      // keeps oversize blocks whole exactly as the replay does.
      {"fsdp2_expandable_segments",
       with(scenario(1, 4, {{"version", 2}, {"strategy", "FULL_SHARD"}}), "allocator", {{"expandable_segments", true}})},
      // 2048 x 4096 weights: 16 MiB gathered in bf16, so the large pool's 20 MiB pages and the
      // oversize rules (max_split_size_mb:20) are exercised, not only the small pool.
      {"fsdp2_expandable_segments_large_pool",
       with(scenario(1, 4, {{"version", 2}, {"strategy", "FULL_SHARD"}}, {}, 4, {2048, 4096}), "allocator",
                      {{"expandable_segments", true}})},
      {"fsdp1_expandable_segments_record_stream",
       with(scenario(1, 4, {{"version", 1}, {"strategy", "FULL_SHARD"}, {"forward_prefetch", true}}), "allocator",
                      {{"expandable_segments", true}})},
      {"fsdp2_max_split_size",
       with(scenario(1, 4, {{"version", 2}, {"strategy", "FULL_SHARD"}}, {}, 4, {2048, 4096}), "allocator",
                      {{"max_split_size_mb", 20}})},
      {"fsdp2_full_shard", scenario(1, 4, {{"version", 2}, {"strategy", "FULL_SHARD"}})},
      {"fsdp1_full_shard_padded",
       scenario(1, 4, {{"version", 1}, {"strategy", "FULL_SHARD"}, {"forward_prefetch", true}}, {}, 3, {250, 333})},
      {"fsdp2_zero2_checkpointed",
       scenario(1, 4, {{"version", 2}, {"strategy", "SHARD_GRAD_OP"}}, {{"activation_checkpointing", "full"}})},
      {"fsdp2_hybrid_2x2", scenario(2, 2, {{"version", 2}, {"strategy", "HYBRID_SHARD"}})},
      {"no_shard", scenario(1, 2, {{"version", 1}, {"strategy", "NO_SHARD"}})},
      {"zero1", scenario(1, 4, {{"version", 2}, {"strategy", "ZERO1"}})},
      {"grad_accumulation", scenario(1, 2, {{"version", 2}, {"strategy", "FULL_SHARD"}}, {{"grad_accum", 2}})},
      {"fsdp2_no_reshard", scenario(1, 4, {{"version", 2}, {"reshard_after_forward", false}})},
      {"cpu_offload", scenario(1, 2, {{"version", 2}, {"cpu_offload", true}})},
      {"fsdp1_cpu_offload", scenario(1, 2, {{"version", 1}, {"cpu_offload", true}})},
      // DeepSpeed's offload: the reduced gradients copied to the host, the optimizer step on the
      // CPU (a host-stream op), the updated partitions copied back (ZeRO-2: then all-gathered).
      {"deepspeed_zero3_offload_optimizer",
       scenario(1, 4, {{"version", 2}, {"strategy", "FULL_SHARD"}, {"offload_optimizer", "cpu"}},
                {{"master_weights", "optimizer_state"}})},
      {"deepspeed_zero2_offload_optimizer",
       scenario(1, 4, {{"version", 2}, {"strategy", "SHARD_GRAD_OP"}, {"offload_optimizer", "cpu"}},
                {{"master_weights", "optimizer_state"}})},
      {"deepspeed_zero3_offload_param_pageable",
       scenario(1, 2,
                {{"version", 2}, {"offload_optimizer", "cpu"}, {"offload_param", "cpu"}, {"offload_pin_memory", false}},
                {{"master_weights", "optimizer_state"}})},
      // Buffer sizes (issue 21): DDP's gradient buckets (first bucket 1 MiB, then 0.5 MiB: five
      // all-reduces and five persistent bucket tensors beside the gradients) and DeepSpeed ZeRO-1's
      // reduce buckets with overlap_comm (two bucket buffers alive through backward), ZeRO-2's
      // (autograd's gradients freed into the bucket buffer, one partition gradient buffer).
      {"ddp_buckets", with(scenario(1, 2, {{"version", 1}, {"strategy", "NO_SHARD"}}), "ddp", {{"bucket_cap_mb", 0.5}})},
      {"deepspeed_zero1_buckets",
       with(scenario(1, 4, {{"version", 2}, {"strategy", "ZERO1"}}, {{"master_weights", "optimizer_state"}}),
            "deepspeed", {{"reduce_bucket_size", 300000}, {"overlap_comm", true}})},
      {"deepspeed_zero2_buckets",
       with(scenario(1, 4, {{"version", 2}, {"strategy", "SHARD_GRAD_OP"}}, {{"master_weights", "optimizer_state"}}),
            "deepspeed", {{"reduce_bucket_size", 300000}})},
      // DeepSpeed ZeRO-3's coordinator (plan_zero3.cpp): 256,000-element blocks gathered and
      // released by stage3_max_live_parameters / prefetch / reuse distance, with the persistent ipg
      // bucket buffer and gradient partition buffer, over 2 micro-steps; and every block kept whole
      // under the persistence threshold (no gather in the step, one all-gather after the optimizer).
      {"deepspeed_zero3_buckets",
       with(scenario(1, 4, {{"version", 2}, {"strategy", "FULL_SHARD"}},
                     {{"master_weights", "optimizer_state"}, {"grad_accum", 2}}),
            "deepspeed",
            {{"reduce_bucket_size", 300000}, {"stage3_max_live_parameters", 512000},
             {"stage3_prefetch_bucket_size", 256000}, {"stage3_max_reuse_distance", 0}})},
      {"deepspeed_zero3_persistent",
       with(scenario(1, 4, {{"version", 2}, {"strategy", "FULL_SHARD"}}, {{"master_weights", "optimizer_state"}}),
            "deepspeed", {{"stage3_param_persistence_threshold", 256000}, {"reduce_bucket_size", 300000}})},
      // FSDP2's explicit prefetch two units ahead (fsdp.prefetch_depth 2, forward and backward):
      // three all-gather outputs alive beside the running unit's.
      {"fsdp2_prefetch_depth_2",
       scenario(1, 4, {{"version", 2}, {"strategy", "FULL_SHARD"}, {"prefetch_depth", 2}, {"forward_prefetch", true}})},
      // DDP with gradient_as_bucket_view: the gradients are views of the bucket tensors (no second copy).
      {"ddp_gradient_as_bucket_view",
       with(scenario(1, 2, {{"version", 1}, {"strategy", "NO_SHARD"}}), "ddp",
            {{"bucket_cap_mb", 0.5}, {"gradient_as_bucket_view", true}})},
      // DeepSpeed ZeRO-2 with overlap_comm: two bucket buffers, reductions on their own stream.
      {"deepspeed_zero2_overlap_comm",
       with(scenario(1, 4, {{"version", 2}, {"strategy", "SHARD_GRAD_OP"}}, {{"master_weights", "optimizer_state"}}),
            "deepspeed", {{"reduce_bucket_size", 300000}, {"overlap_comm", true}})},
      // DeepSpeed ZeRO-3's optimizer sub-groups (sub_group_size): each sub-group's concatenated and
      // fp32 gradients made and freed in the optimizer step, one sub-group after another.
      {"deepspeed_zero3_sub_groups",
       with(scenario(1, 4, {{"version", 2}, {"strategy", "FULL_SHARD"}}, {{"master_weights", "optimizer_state"}}),
            "deepspeed", {{"reduce_bucket_size", 300000}, {"sub_group_size", 100000}})},
      // ZeRO-3 without contiguous_gradients: no bucket buffer, autograd's gradients wait for their
      // bucket's reduction; the flat reduce-scatter inputs of several gradients.
      {"deepspeed_zero3_loose_gradients",
       with(scenario(1, 4, {{"version", 2}, {"strategy", "FULL_SHARD"}}, {{"master_weights", "optimizer_state"}}),
            "deepspeed", {{"reduce_bucket_size", 600000}, {"contiguous_gradients", false}})},
      {"deepspeed_zero3_nvme", scenario(1, 2, {{"version", 2}, {"offload_optimizer", "nvme"}, {"offload_param", "nvme"}},
                                        {{"master_weights", "optimizer_state"}})},
  };
}

class HostMemory : public ::testing::TestWithParam<Case> {};

TEST_P(HostMemory, MeasuredPeakEqualsReplayToTheByte) {
  const planner::Schedule s = testing::plan(GetParam().scenario);
  const planner::MemoryReport predicted = planner::replay_memory(s);
  ASSERT_GT(predicted.peak_allocated_bytes, predicted.allocated_at_start);

  RunOptions o = testing::fast_host(s);
  const RunResult r = run_schedule(s, o);
  ASSERT_EQ(r.ranks.size(), static_cast<std::size_t>(s.world_size));
  int collectives = 0;
  for (const auto& op : s.ops) collectives += planner::is_collective(op.kind) && op.comm_bytes > 0;
  for (const RankResult& rank : r.ranks) {
    SCOPED_TRACE("rank " + std::to_string(rank.rank));
    EXPECT_EQ(rank.allocated_at_start_bytes, predicted.allocated_at_start);
    EXPECT_EQ(rank.peak_allocated_bytes, predicted.peak_allocated_bytes);
    EXPECT_EQ(rank.peak_op, predicted.peak_op);
    EXPECT_EQ(rank.allocated_at_op, predicted.allocated_at_op);
    // Same caching-allocator policy as the planner's model (recordStream included): reserved
    // agrees too.
    EXPECT_EQ(rank.peak_reserved_bytes, predicted.peak_reserved_bytes);
    // Host memory (offloaded state, staging) as the executor made and freed it.
    EXPECT_EQ(rank.peak_host_pinned_bytes, predicted.peak_host_pinned_bytes);
    EXPECT_EQ(rank.peak_host_pageable_bytes, predicted.peak_host_pageable_bytes);
    EXPECT_EQ(rank.peak_host_bytes, predicted.peak_host_bytes);
    // Every collective moved data and its output was checked.
    EXPECT_EQ(rank.collectives_checked, collectives * testing::steps_played_by_default(s));
    ASSERT_EQ(rank.steps.size(), 1u);
    for (const OpTiming& t : rank.steps[0]) EXPECT_LE(t.start_seconds, t.end_seconds);
  }
}

INSTANTIATE_TEST_SUITE_P(Scenarios, HostMemory, ::testing::ValuesIn(cases()),
                         [](const ::testing::TestParamInfo<Case>& info) { return info.param.name; });

// The DeepSpeed offload schedules carry the copies and the CPU optimizer step as ops the host
// runtime plays, and host memory the plan holds: the measured host peak is not zero by accident.
TEST(HostMemory, OffloadScheduleHasCopiesAndAHostOptimizerStep) {
  const planner::Schedule s =
      testing::plan(testing::scenario(1, 4, {{"version", 2}, {"strategy", "FULL_SHARD"}, {"offload_optimizer", "cpu"}},
                                      {{"master_weights", "optimizer_state"}}));
  int d2h = 0, h2d = 0, host_optimizer = 0;
  for (const auto& op : s.ops) {
    d2h += op.kind == planner::OpKind::d2h;
    h2d += op.kind == planner::OpKind::h2d;
    host_optimizer += op.kind == planner::OpKind::optimizer && op.stream == planner::Stream::host;
  }
  EXPECT_EQ(d2h, 5);  // one per unit: 4 blocks and the root's embedding
  EXPECT_EQ(h2d, 1);  // the updated partitions back to the GPU
  EXPECT_EQ(host_optimizer, 1);
  const planner::MemoryReport predicted = planner::replay_memory(s);
  // Per rank: 4 blocks of 256 x 1000 and a 1000 x 64 embedding over 4 ranks = 272,000 elements.
  // ZeRO-3 pins (DeepSpeed's pin_memory default) the fp32 gradient and its gradient partitions in
  // the model's bf16 (4 + 2 bytes); its fp32 master and DeepSpeedCPUAdam's two states are in
  // ordinary memory (4 + 8 bytes) ([DeepSpeed's host buffers], planner/plan.cpp). The host
  // allocator holds each pinned block in a power of two ([DeepSpeed's pinned blocks]): the bf16
  // partitions' 544,000 B in 2^20, the one sub-group's fp32 gradient 1,088,000 B in 2^21.
  const std::int64_t pinned = (1 << 20) + (1 << 21);
  EXPECT_EQ(predicted.peak_host_pinned_bytes, pinned);
  EXPECT_EQ(predicted.peak_host_pageable_bytes, 272000 * 12);
  const RunResult r = run_schedule(s, testing::fast_host(s));
  for (const RankResult& rank : r.ranks) {
    EXPECT_EQ(rank.peak_host_pinned_bytes, pinned);
    EXPECT_EQ(rank.peak_host_pageable_bytes, 272000 * 12);
  }
}

TEST(HostMemory, RepeatedStepsMeasureTheSamePeak) {
  const planner::Schedule s = testing::plan(testing::scenario(1, 2, {{"version", 2}}));
  RunOptions o = testing::fast_host(s);
  o.warmup_steps = 1;
  o.steps = 2;
  const RunResult r = run_schedule(s, o);
  const planner::MemoryReport predicted = planner::replay_memory(s);
  for (const RankResult& rank : r.ranks) {
    EXPECT_EQ(rank.steps.size(), 2u);
    EXPECT_EQ(rank.peak_allocated_bytes, predicted.peak_allocated_bytes);
    EXPECT_EQ(rank.peak_reserved_bytes, predicted.peak_reserved_bytes);  // cached segments are reused
  }
}

// [State made at the first step] The hand-worked schedule of tests/planner/first_step_example.h:
// the executor makes the optimizer state at its op in the first step played, so the step it
// measures after that warm-up (the host default for such a schedule) runs in the segments the
// first one left: 280 MiB reserved, as the planner's replay finds; measuring the first step
// itself (--warmup 0) finds the first step's 180 MiB (X's and Y's segments; S and T fit X's).
TEST(HostMemory, StateMadeAtTheFirstStepAsThePlannersReplay) {
  constexpr std::int64_t MiB = 1 << 20;
  const planner::Schedule s = fsdpsim::testing::first_step_example(true);
  RunOptions o = testing::fast_host(s);
  const RunResult r = run_schedule(s, o);
  ASSERT_EQ(r.ranks.size(), 1u);
  EXPECT_EQ(r.ranks[0].peak_reserved_bytes, 280 * MiB);
  EXPECT_EQ(r.ranks[0].peak_reserved_bytes, planner::replay_memory(s).peak_reserved_bytes);
  EXPECT_EQ(r.ranks[0].allocated_at_start_bytes, 60 * MiB);
  EXPECT_EQ(r.ranks[0].peak_allocated_bytes, 240 * MiB);
  o.warmup_steps = 0;
  const RunResult first = run_schedule(s, o);
  EXPECT_EQ(first.ranks[0].peak_reserved_bytes, 180 * MiB);
  EXPECT_EQ(first.ranks[0].allocated_at_start_bytes, 0);
  EXPECT_EQ(first.ranks[0].peak_allocated_bytes, 180 * MiB);
}

TEST(HostMemory, VirtualWorldPlaysRankZeroWithTheSameMemory) {
  const planner::Schedule s = testing::plan(testing::scenario(2, 4, {{"version", 2}}));
  RunOptions o = testing::fast_host(s);
  o.virtual_world = s.world_size;
  const RunResult r = run_schedule(s, o);
  ASSERT_EQ(r.ranks.size(), 1u);
  EXPECT_TRUE(r.virtual_world);
  EXPECT_EQ(r.ranks[0].peak_allocated_bytes, planner::replay_memory(s).peak_allocated_bytes);
  o.virtual_world = s.world_size * 2;
  EXPECT_THROW(run_schedule(s, o), InputError);  // an option error: the CLI exits 2
}

// The runtime's allocator and the planner's model follow the same policy: on a random
// sequence of allocations and frees over two streams they reserve the same bytes.
TEST(CachingAllocator, AgreesWithThePlannersModel) {
  TrackingSegments segments;
  CachingAllocator allocator(segments);
  planner::CachingAllocatorModel model;
  std::uint64_t state = 42;
  auto next = [&] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    return state >> 33;
  };
  std::vector<std::pair<int, int>> live;  // (runtime handle, model handle)
  std::int64_t allocated = 0;
  std::vector<std::int64_t> sizes;
  for (int i = 0; i < 4000; ++i) {
    if (live.empty() || next() % 3 != 0) {
      const std::int64_t sizes_by_class[] = {
          static_cast<std::int64_t>(next() % 4096), static_cast<std::int64_t>(next() % (1 << 20)),
          static_cast<std::int64_t>(next() % (12 << 20)), static_cast<std::int64_t>(next() % (64 << 20))};
      const std::int64_t bytes = sizes_by_class[next() % 4];
      const int stream = static_cast<int>(next() % 2);
      live.push_back({allocator.allocate(bytes, stream), model.allocate(bytes, stream)});
      sizes.push_back(bytes);
      allocated += bytes;
    } else {
      const std::size_t k = next() % live.size();
      allocator.free(live[k].first);
      model.free(live[k].second);
      allocated -= sizes[k];
      live.erase(live.begin() + static_cast<long>(k));
      sizes.erase(sizes.begin() + static_cast<long>(k));
    }
    ASSERT_EQ(allocator.reserved_bytes(), model.reserved_bytes()) << "after event " << i;
    ASSERT_EQ(allocator.allocated_bytes(), allocated);
  }
  EXPECT_EQ(allocator.peak_reserved_bytes(), model.peak_reserved_bytes());
}

TEST(CachingAllocator, ReleasesItsCacheBeforeGivingUp) {
  TrackingSegments segments(64 << 20);
  CachingAllocator allocator(segments);
  const int a = allocator.allocate(40 << 20, 0);
  allocator.free(a);  // cached: 40 MiB reserved, nothing allocated
  EXPECT_EQ(allocator.reserved_bytes(), 40 << 20);
  const int b = allocator.allocate(30 << 20, 1);  // other stream: cache cannot serve it; release, retry
  EXPECT_EQ(allocator.retries(), 1);
  EXPECT_EQ(allocator.reserved_bytes(), 30 << 20);
  EXPECT_THROW(allocator.allocate(40 << 20, 1), OutOfMemory);
  allocator.free(b);
}

// The cuda backend hands cuBLAS the plan's workspaces (cublasSetWorkspace), as PyTorch gives each
// GEMM thread's handle its own ([cuBLAS workspaces], planner/plan_context.cpp): forward ops the
// main thread's, backward and recompute ops autograd's. Which allocation is which, on a planned
// schedule with checkpointing (so it has recompute ops) and on one without workspaces.
TEST(CublasWorkspaces, EachOpRunsInItsThreadsWorkspace) {
  const planner::Schedule s = testing::plan(
      testing::scenario(1, 2, {{"version", 2}, {"strategy", "FULL_SHARD"}}, {{"activation_checkpointing", "full"}}));
  const CublasWorkspaces w = cublas_workspaces(s);
  ASSERT_GE(w.main_thread, 0);
  ASSERT_GE(w.backward_thread, 0);
  EXPECT_NE(w.main_thread, w.backward_thread);
  EXPECT_NE(s.allocations[w.main_thread].label.find("forward thread"), std::string::npos);
  EXPECT_NE(s.allocations[w.backward_thread].label.find("backward thread"), std::string::npos);
  std::map<planner::OpKind, int> seen;
  for (const planner::Op& op : s.ops) {
    if (op.flops <= 0) continue;
    const bool autograd = op.kind == planner::OpKind::compute_bwd || op.kind == planner::OpKind::recompute;
    EXPECT_EQ(cublas_workspace_of(w, op), autograd ? w.backward_thread : w.main_thread) << op.name;
    ++seen[op.kind];
  }
  EXPECT_GT(seen[planner::OpKind::compute_fwd], 0);
  EXPECT_GT(seen[planner::OpKind::compute_bwd], 0);
  EXPECT_GT(seen[planner::OpKind::recompute], 0);

  planner::Schedule bare = s;  // a hand-written schedule without workspaces: cuBLAS keeps its own
  for (auto& a : bare.allocations)
    if (a.category == planner::MemCategory::workspace) a.category = planner::MemCategory::temporary;
  EXPECT_EQ(cublas_workspace_of(cublas_workspaces(bare), s.ops.front()), -1);
}

}  // namespace
}  // namespace fsdpsim::runtime
