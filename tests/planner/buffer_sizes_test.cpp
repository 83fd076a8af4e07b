// Buffer sizes as knobs (issue 21): DDP's gradient buckets (`ddp`) and DeepSpeed ZeRO-1's
// reduce buckets (`deepspeed`), worked by hand on a synthetic model (synthetic.h): 4 blocks
// of one 512 x 512 weight (262,144 elements; 1 MiB in fp32, 512 KiB in bf16), no activations,
// 8 GPUs on one node. Backward reaches the blocks in the order blocks.3, .2, .1, .0, then the
// root (which owns no parameter).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "models/json_input.h"
#include "planner/internal/plan_policy.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "synthetic.h"

namespace fsdpsim::planner {
namespace {

using testing::block_model;
using testing::cluster;

constexpr std::int64_t kWeight = 512 * 512;  // elements of one block's weight
constexpr std::int64_t MiB = 1024 * 1024;

nlohmann::json scenario(const std::string& strategy, bool deepspeed_layout = false) {
  nlohmann::json t = {{"micro_batch", 1}, {"seq_len", 1024}, {"param_dtype", "bf16"}, {"reduce_dtype", "fp32"},
                      {"master_dtype", "fp32"}, {"optimizer", "none"}};
  if (deepspeed_layout) t["master_weights"] = "optimizer_state";
  return {{"model", block_model(4, {512, 512}, 0)},
          {"cluster", cluster(1, 8)},
          {"training", t},
          {"fsdp", {{"strategy", strategy}}}};
}

Plan plan(const nlohmann::json& json) { return plan_step(parse_scenario(json, "test.json")); }

std::vector<const Op*> ops_of(const Schedule& s, OpKind kind) {
  std::vector<const Op*> out;
  for (const Op& op : s.ops)
    if (op.kind == kind) out.push_back(&op);
  return out;
}

int op_named(const Schedule& s, const std::string& name) {
  for (const Op& op : s.ops)
    if (op.name == name) return op.id;
  throw std::logic_error("no op " + name);
}

std::int64_t persistent_bytes(const Schedule& s, MemCategory category) {
  std::int64_t bytes = 0;
  for (const Allocation& a : s.allocations)
    if (a.persistent && a.category == category) bytes += a.bytes;
  return bytes;
}

// ---- DDP ---------------------------------------------------------------------------------
// DDP's Reducer rebuilds its buckets after the first iteration in the order gradients became
// ready, with the limits [1 MiB, bucket_cap_mb] (torch/nn/parallel/distributed.py
// _ddp_init_helper; reducer.cpp compute_bucket_assignment_by_size: a bucket closes once its
// bytes reach the limit, the crossing parameter included). fp32 gradients (the stored dtype):
//   default 25 MiB cap: [blocks.3] = 1 MiB >= 1 MiB closes the first bucket; blocks.2..0 = 3 MiB
//     < 25 MiB stay open until backward ends: 2 all-reduces, 1 MiB and 3 MiB;
//   bucket_cap_mb 1: every block closes its own bucket: 4 all-reduces of 1 MiB.
// The first all-reduce is issued as soon as blocks.3's backward is done, before blocks.2's.
TEST(DdpBuckets, DefaultCapMakesAOneMiBFirstBucketThenOneFor25MiB) {
  nlohmann::json j = scenario("NO_SHARD");
  j["ddp"] = nlohmann::json::object();
  const Plan p = plan(j);
  const auto ar = ops_of(p.schedule, OpKind::all_reduce);
  ASSERT_EQ(ar.size(), 2u);
  EXPECT_EQ(ar[0]->comm_bytes, 1.0 * MiB);
  EXPECT_EQ(ar[1]->comm_bytes, 3.0 * MiB);
  EXPECT_LT(ar[0]->id, op_named(p.schedule, "bwd blocks.2"));
  EXPECT_GT(ar[1]->id, op_named(p.schedule, "bwd blocks.0"));
}

TEST(DdpBuckets, OneMiBCapReducesEachBlockAsItsBackwardEnds) {
  nlohmann::json j = scenario("NO_SHARD");
  j["ddp"] = {{"bucket_cap_mb", 1}};
  const Plan p = plan(j);
  const auto ar = ops_of(p.schedule, OpKind::all_reduce);
  ASSERT_EQ(ar.size(), 4u);
  for (const Op* op : ar) EXPECT_EQ(op->comm_bytes, 1.0 * MiB) << op->name;
  // blocks.1's bucket goes out before blocks.0's backward: only 1 MiB is left after the last
  // backward compute, against 3 MiB under the default cap.
  EXPECT_LT(ar[2]->id, op_named(p.schedule, "bwd blocks.0"));
  EXPECT_GT(ar[3]->id, op_named(p.schedule, "bwd blocks.0"));
}

// Gradient memory: the parameters' .grad (4 x 1 MiB, persistent, accumulated in place) and,
// without gradient_as_bucket_view, the bucket tensors as well (another 4 MiB: the Reducer copies
// each gradient into its bucket, reducer.cpp mark_variable_ready_dense); with it the .grad are
// views of the buckets: 4 MiB.
TEST(DdpBuckets, GradientsAreHeldTwiceUnlessTheyAreBucketViews) {
  nlohmann::json j = scenario("NO_SHARD");
  j["ddp"] = nlohmann::json::object();
  EXPECT_EQ(persistent_bytes(plan(j).schedule, MemCategory::unsharded_grad), 8 * MiB);
  j["ddp"]["gradient_as_bucket_view"] = true;
  EXPECT_EQ(persistent_bytes(plan(j).schedule, MemCategory::unsharded_grad), 4 * MiB);
  // Without the object: FSDP's NO_SHARD, one all-reduce per unit, one copy (as before).
  EXPECT_EQ(persistent_bytes(plan(scenario("NO_SHARD")).schedule, MemCategory::unsharded_grad), 4 * MiB);
  EXPECT_EQ(ops_of(plan(scenario("NO_SHARD")).schedule, OpKind::all_reduce).size(), 4u);
}

// ---- DeepSpeed ZeRO-1 ----------------------------------------------------------------------
// stage_1_and_2.py (deepspeedai/DeepSpeed@edaa722), reduce_independent_p_g_buckets_and_remove_grads:
// the bucket is reduced before a gradient is added when elements + numel > reduce_bucket_size.
// reduce_bucket_size = 2 x 262,144 = 524,288: blocks.3 + blocks.2 fill it exactly (not more), so
// blocks.1 flushes it; blocks.1 + blocks.0 are reduced at the end: 2 reductions of 524,288 bf16
// elements (the bucket buffer's 16-bit dtype) = 1 MiB each. overlap_comm is False by default
// below stage 3 (config.py overlap_comm_valid), so both go after the whole backward
// (reduce_gradients); the bucket buffer (setup_buckets: reduce_bucket_size elements, 16-bit) is
// 1 MiB, alive from the start of backward until the epilogue after the last reduction.
TEST(DeepSpeedZero1Buckets, ReduceBucketSizeSplitsTheGradientsAfterBackward) {
  nlohmann::json j = scenario("ZERO1", true);
  j["deepspeed"] = {{"reduce_bucket_size", 2 * kWeight}};
  const Plan p = plan(j);
  const Schedule& s = p.schedule;
  const auto rs = ops_of(s, OpKind::reduce_scatter);
  ASSERT_EQ(rs.size(), 2u);
  for (const Op* op : rs) {
    EXPECT_EQ(op->comm_bytes, 1.0 * MiB) << op->name;
    EXPECT_GT(op->id, op_named(s, "bwd blocks.0")) << op->name;
  }
  std::int64_t buffer = 0;
  for (const Allocation& a : s.allocations)
    if (a.label == "DeepSpeed ipg bucket buffers") buffer += a.bytes;
  EXPECT_EQ(buffer, 1 * MiB);
  // Freed by the last reduction's epilogue, not before.
  bool freed_after_last = false;
  for (const Op& op : s.ops)
    for (int a : op.frees)
      if (s.allocations[a].label == "DeepSpeed ipg bucket buffers") freed_after_last = op.id >= rs.back()->id;
  EXPECT_TRUE(freed_after_last);
}

// overlap_comm: two bucket buffers (2 MiB, "double buffers") and the first bucket reduced as soon
// as blocks.2's gradients complete it, before blocks.1's backward.
TEST(DeepSpeedZero1Buckets, OverlapCommDoublesTheBufferAndReducesDuringBackward) {
  nlohmann::json j = scenario("ZERO1", true);
  j["deepspeed"] = {{"reduce_bucket_size", 2 * kWeight}, {"overlap_comm", true}};
  const Plan p = plan(j);
  const auto rs = ops_of(p.schedule, OpKind::reduce_scatter);
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_LT(rs[0]->id, op_named(p.schedule, "bwd blocks.1"));
  std::int64_t buffer = 0;
  for (const Allocation& a : p.schedule.allocations)
    if (a.label == "DeepSpeed ipg bucket buffers") buffer += a.bytes;
  EXPECT_EQ(buffer, 2 * MiB);
}

// A parameter larger than the bucket is reduced alone (extra_large_param_to_reduce): a bucket of
// 100,000 elements gives one reduction per 262,144-element block.
TEST(DeepSpeedZero1Buckets, AParameterLargerThanTheBucketIsReducedAlone) {
  nlohmann::json j = scenario("ZERO1", true);
  j["deepspeed"] = {{"reduce_bucket_size", 100000}};
  const Plan p = plan(j);  // kept alive: ops_of points into its schedule
  const auto rs = ops_of(p.schedule, OpKind::reduce_scatter);
  ASSERT_EQ(rs.size(), 4u);
  for (const Op* op : rs) EXPECT_EQ(op->comm_bytes, kWeight * 2.0) << op->name;
}

// The defaults are DeepSpeed's (config.py): 5e8-element buckets, overlap off below stage 3,
// contiguous gradients on; 5e7 written as a JSON float (what `sweep --axis` passes) is read whole.
TEST(DeepSpeedZero1Buckets, DefaultsAreDeepSpeedsAndFloatsThatAreWholeAreRead) {
  nlohmann::json j = scenario("ZERO1", true);
  j["deepspeed"] = nlohmann::json::object();
  const Scenario d = parse_scenario(j, "test.json");
  EXPECT_EQ(d.deepspeed.reduce_bucket_size, 500000000);
  EXPECT_FALSE(d.deepspeed.overlap_comm);
  EXPECT_TRUE(d.deepspeed.contiguous_gradients);
  const Scenario s = parse_scenario(j, "test.json", {"deepspeed.reduce_bucket_size=5e7"});
  EXPECT_EQ(s.deepspeed.reduce_bucket_size, 50000000);
}

// ---- DeepSpeed ZeRO-2 ----------------------------------------------------------------------
// Stage 2 (partition_gradients) reduces its buckets in every micro-step; each gradient is copied
// into the bucket buffer and replaced by a view of it, so autograd's bf16 gradient (512 KiB a
// block) is gone once its unit's backward ends; the rank's part of each reduced bucket goes to
// grads_in_partition: the rank's partition, 4 blocks x 262,144 / 8 ranks = 131,072 bf16
// elements = 256 KiB, made at the first reduction and freed by the optimizer step.
// reduce_bucket_size 524,288 as above: 2 buckets per micro-step, 2 micro-steps: 4 reductions of
// 1 MiB.
TEST(DeepSpeedZero2Buckets, EveryMicroStepReducesItsBucketsIntoOnePartitionBuffer) {
  nlohmann::json j = scenario("SHARD_GRAD_OP", true);
  j["training"]["grad_accum"] = 2;
  j["deepspeed"] = {{"reduce_bucket_size", 2 * kWeight}};
  const Plan p = plan(j);
  const Schedule& s = p.schedule;
  const auto rs = ops_of(s, OpKind::reduce_scatter);
  ASSERT_EQ(rs.size(), 4u);
  EXPECT_EQ(rs[0]->micro_step, 0);
  EXPECT_EQ(rs[3]->micro_step, 1);
  for (const Op* op : rs) EXPECT_EQ(op->comm_bytes, 1.0 * MiB) << op->name;
  int partitions = 0;
  for (const Allocation& a : s.allocations) {
    if (a.label != "DeepSpeed grads_in_partition") continue;
    ++partitions;
    EXPECT_EQ(a.bytes, 256 * 1024);
    EXPECT_EQ(a.category, MemCategory::sharded_grad);
  }
  EXPECT_EQ(partitions, 1);
  // Stage 2 reduces from its gradient hooks even without overlap_comm (process_gradients), on the
  // current stream: the first bucket goes as soon as blocks.2's gradients complete it, and a wait
  // on the compute stream holds blocks.1's backward behind it.
  EXPECT_LT(rs[0]->id, op_named(s, "bwd blocks.1"));
  const Op& after = s.ops[rs[0]->id + 1];
  EXPECT_EQ(after.kind, OpKind::wait);
  EXPECT_EQ(after.stream, Stream::compute);
  EXPECT_EQ(std::count(after.deps.begin(), after.deps.end(), rs[0]->id), 1);
  // When the first bucket is reduced, no autograd gradient is left: blocks.3's and .2's were
  // copied into the bucket buffer, blocks.1's and .0's are not made yet.
  std::vector<bool> live(s.allocations.size(), false);
  for (const Op& op : s.ops) {
    for (int a : op.allocs) live[a] = true;
    if (op.id == rs[0]->id) break;
    for (int a : op.frees) live[a] = false;
  }
  std::int64_t unsharded = 0;
  for (const Allocation& a : s.allocations)
    if (live[a.id] && a.category == MemCategory::unsharded_grad) unsharded += a.bytes;
  EXPECT_EQ(unsharded, 0);
  // Without the object: FSDP-style, one reduce-scatter per unit and micro-step (as before).
  j.erase("deepspeed");
  EXPECT_EQ(ops_of(plan(j).schedule, OpKind::reduce_scatter).size(), 8u);
}

// DeepSpeed ZeRO-3 fetches each module's parameters in its own hooks: outside the blocks the
// embedding is gathered for its forward and released (its next use, in backward, is past the
// reuse distance), the final norm is persistent (4,096 elements, under 1e5), the output layer
// is gathered after the last block. The planner's root unit held embedding and output layer
// together from the first op to the embedding's backward: 2 x 128,256 x 4,096 = 1.05e9 elements,
// past stage3_max_live_parameters (1e9), so min(max_live - available, bucket) was negative and
// no block was ever prefetched (the session-35 audit: 59 ms of exposed all-gathers for about 8).
// With the modules outside the blocks as units of their own, the blocks are prefetched. A tied
// embedding (GPT-2's wte and lm_head) stays in the root unit, where the tie keeps it.
TEST(DeepSpeedZero3Buffers, ModulesOutsideTheBlocksAreFetchedInTheirOwnHooks) {
  const std::string scenario = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json";
  const std::vector<std::string> ds = {"training.master_weights=optimizer_state", "training.reduce_dtype=bf16",
                                       "deepspeed={}"};
  auto unit_names = [](const Plan& p) {
    std::set<std::string> names;
    for (const Unit& u : p.units)
      if (!u.params.empty()) names.insert(u.name);
    return names;
  };
  // A prefetch: layers.1's all-gather issued before layers.0's forward (in its fetch), not at
  // its own.
  auto prefetched = [](const Plan& p) {
    return op_named(p.schedule, "all-gather model.layers.1") < op_named(p.schedule, "fwd model.layers.0");
  };
  const Plan zero3 = plan_step(load_scenario(scenario, ds));
  const std::set<std::string> names = unit_names(zero3);
  for (const char* m : {"model.embed_tokens", "model.norm", "lm_head", "model.layers.0"})
    EXPECT_EQ(names.count(m), 1u) << m;
  EXPECT_TRUE(zero3.units[0].params.empty());  // the root keeps nothing
  EXPECT_TRUE(prefetched(zero3));
  // FSDP's root unit holds them, as fully_shard(model) does.
  const Plan fsdp = plan_step(load_scenario(scenario, {}));
  EXPECT_EQ(unit_names(fsdp).count("lm_head"), 0u);
  EXPECT_EQ(fsdp.units[0].params.size(), 3u);  // embed_tokens, norm, lm_head weights
  // GPT-2: wte is tied to lm_head (the root keeps it); wpe and ln_f are their own units.
  std::vector<std::string> gpt2 = ds;
  gpt2.push_back("model=" + std::string(FSDPSIM_SOURCE_ROOT) + "/models/gpt2-xl.json");
  const Plan tied = plan_step(load_scenario(scenario, gpt2));
  const std::set<std::string> tied_names = unit_names(tied);
  EXPECT_EQ(tied_names.count("transformer.wpe"), 1u);
  EXPECT_EQ(tied_names.count("transformer.wte"), 0u);
  EXPECT_EQ(tied_names.count("lm_head"), 0u);
  EXPECT_FALSE(tied.units[0].params.empty());
  EXPECT_TRUE(tied_weight_warnings(tied.units).empty());  // no wrap request was refused: none was made
}

// [DeepSpeed's all-reduce fallback] contiguous_gradients false (stage_1_and_2.py,
// deepspeedai/DeepSpeed@edaa722: reduce_ipg_grads -> buffered_reduce_fallback(None, ...) ->
// allreduce_and_copy): no ipg bucket buffer; autograd's gradients wait in the bucket; each bucket
// is flattened into a temporary, all-reduced (rank None: dist.all_reduce) and copied back. The
// session-35 audit found it planned as the contiguous path's reduce-scatter, without the
// waiting gradients. By hand, buckets of 2 blocks ([blocks.3, .2], [.1, .0]), bf16 gradients:
//   2 all-reduces of 2 x 512 KiB = 1 MiB, no reduce-scatter;
//   each with a 1 MiB flattened temporary, freed by its copy back (2 x 1 MiB of HBM traffic);
//   at the first all-reduce blocks.3's and .2's autograd gradients are alive: 1 MiB (the
//     contiguous path has copied them into its buffer: 0);
//   the rank's partition gradients: 4 x 262,144 x 2 B / 8 = 256 KiB.
TEST(DeepSpeedZero2Buckets, WithoutContiguousGradientsBucketsAreAllReducedFromAutogradsGradients) {
  nlohmann::json j = scenario("SHARD_GRAD_OP", true);
  j["deepspeed"] = {{"reduce_bucket_size", 2 * kWeight}, {"contiguous_gradients", false}};
  const Plan p = plan(j);
  const Schedule& s = p.schedule;
  EXPECT_TRUE(ops_of(s, OpKind::reduce_scatter).empty());
  const auto ar = ops_of(s, OpKind::all_reduce);
  ASSERT_EQ(ar.size(), 2u);
  for (const Op* op : ar) {
    EXPECT_EQ(op->comm_bytes, 1.0 * MiB) << op->name;
    ASSERT_EQ(op->allocs.size(), 1u) << op->name;
    const Allocation& flat = s.allocations[op->allocs[0]];
    EXPECT_EQ(flat.bytes, 1 * MiB);
    const Op& copy = s.ops[op->id + 1];
    EXPECT_EQ(copy.kind, OpKind::copy_out);
    EXPECT_EQ(copy.hbm_bytes, 2.0 * MiB);
    EXPECT_EQ(std::count(copy.frees.begin(), copy.frees.end(), flat.id), 1);
  }
  for (const Allocation& a : s.allocations) EXPECT_EQ(a.label.find("ipg bucket"), std::string::npos) << a.label;
  auto autograd_grads_at = [&](const Schedule& sched, int at) {
    std::vector<bool> live(sched.allocations.size(), false);
    for (const Op& op : sched.ops) {
      for (int a : op.allocs) live[a] = true;
      if (op.id == at) break;
      for (int a : op.frees) live[a] = false;
    }
    std::int64_t bytes = 0;
    for (const Allocation& a : sched.allocations)
      if (live[a.id] && a.category == MemCategory::unsharded_grad) bytes += a.bytes;
    return bytes;
  };
  EXPECT_EQ(autograd_grads_at(s, ar[0]->id), 1 * MiB);
  int partitions = 0;
  for (const Allocation& a : s.allocations)
    if (a.label == "DeepSpeed gradients of the partition") {
      ++partitions;
      EXPECT_EQ(a.bytes, 256 * 1024);
    }
  EXPECT_EQ(partitions, 1);
  // Every autograd gradient is freed in the step (none left to the optimizer).
  std::vector<bool> freed(s.allocations.size(), false);
  for (const Op& op : s.ops)
    for (int a : op.frees) freed[a] = true;
  for (const Allocation& a : s.allocations)
    if (a.category == MemCategory::unsharded_grad && !a.persistent) {
      EXPECT_TRUE(freed[a.id]) << a.label;
    }
  // The contiguous path, beside it: reduce-scatters, the gradients already copied away.
  j["deepspeed"]["contiguous_gradients"] = true;
  const Plan contiguous = plan(j);
  const auto rs = ops_of(contiguous.schedule, OpKind::reduce_scatter);
  ASSERT_EQ(rs.size(), 2u);
  EXPECT_EQ(autograd_grads_at(contiguous.schedule, rs[0]->id), 0);
  // ZeRO-1 falls back the same way (its gradients stay whole: nothing waits).
  nlohmann::json z1 = scenario("ZERO1", true);
  z1["deepspeed"] = {{"reduce_bucket_size", 2 * kWeight}, {"contiguous_gradients", false}};
  EXPECT_EQ(ops_of(plan(z1).schedule, OpKind::all_reduce).size(), 2u);
  EXPECT_TRUE(ops_of(plan(z1).schedule, OpKind::reduce_scatter).empty());
}

// ---- DeepSpeed ZeRO-3 ----------------------------------------------------------------------
// partitioned_param_coordinator.py (deepspeedai/DeepSpeed@edaa722), worked on the 4-block model:
// each block's weight is 262,144 elements, above the default persistence threshold (1e5), so it
// is partitioned and gathered whole in bf16 (512 KiB) for its module. The fetch trace is
// root, blocks.0..3 (forward), root, blocks.3..0 (backward): steps 0..9; the root owns nothing.
// With stage3_max_reuse_distance 0 every gathered block is released after its use unless a
// prefetch already walked past a later use (__params_to_release); the prefetch bucket is
// unbounded (1e9) so stage3_max_live_parameters alone limits it:
//   max_live 0: no prefetch (min(0 - available, ...) <= 0): each block gathered at its own
//     fetch and released after it: 1 block alive at most.
//   max_live 2 blocks (524,288): step 0 prefetches while fewer than min(2 blocks - 0, 1e9)
//     elements are on their way: blocks.0 and blocks.1; blocks.0's fetch finds no room
//     (2 - 2), its release leaves 1, so blocks.1's fetch prefetches one more (blocks.2), and so
//     on: 2 blocks alive at most.
//   max_live 3 blocks: 3 alive at most (step 0 gathers blocks.0..2).
//   max_live 1e9 (DeepSpeed's default): step 0 gathers all 4 blocks in one coalesced all-gather
//     and the prefetch walks the whole trace, past every block's backward use, so none is
//     released in forward (most_recent_step_id_param_fetched_for > step_id): 4 blocks alive.
std::int64_t max_live_bytes(const Schedule& s, const std::string& label_prefix) {
  std::int64_t live = 0, peak = 0;
  for (const Op& op : s.ops) {
    for (int a : op.allocs)
      if (s.allocations[a].label.rfind(label_prefix, 0) == 0) live += s.allocations[a].bytes;
    peak = std::max(peak, live);
    for (int a : op.frees)
      if (s.allocations[a].label.rfind(label_prefix, 0) == 0) live -= s.allocations[a].bytes;
  }
  return peak;
}

nlohmann::json zero3(const nlohmann::json& deepspeed) {
  nlohmann::json j = scenario("FULL_SHARD", true);
  j["deepspeed"] = deepspeed;
  return j;
}

TEST(DeepSpeedZero3Buffers, PeakFallsAsMaxLiveParametersShrinks) {
  constexpr std::int64_t kBlockBytes = kWeight * 2;  // 512 KiB gathered in bf16
  std::int64_t previous_peak = -1;
  const std::vector<std::pair<std::int64_t, std::int64_t>> live_and_blocks = {
      {1000000000, 4}, {3 * kWeight, 3}, {2 * kWeight, 2}, {0, 1}};
  for (const auto& [max_live, blocks] : live_and_blocks) {
    SCOPED_TRACE("stage3_max_live_parameters " + std::to_string(max_live));
    // One bucket per block (a block's gradient alone, divisible by the 8 ranks: reduce-scattered in
    // place, no flat copy), so only the gathered blocks move the peak.
    const Plan p = plan(zero3({{"stage3_max_reuse_distance", 0},
                               {"stage3_prefetch_bucket_size", 1000000000},
                               {"stage3_max_live_parameters", max_live},
                               {"reduce_bucket_size", kWeight}}));
    EXPECT_EQ(max_live_bytes(p.schedule, "gathered params of "), blocks * kBlockBytes);
    // The replayed peak is at blocks.3's backward, the first backward compute: the gathered blocks
    // beside blocks.3's bf16 gradient and what lives all step (the 262,144-element ipg buffer,
    // 512 KiB; the partitions). Each block fewer alive lowers it by exactly 512 KiB.
    const MemoryReport m = replay_memory(p.schedule);
    EXPECT_EQ(p.schedule.ops[m.peak_op].name, "bwd blocks.3");
    EXPECT_EQ(m.breakdown_at_peak[static_cast<int>(MemCategory::unsharded_param)], blocks * kBlockBytes);
    EXPECT_EQ(m.breakdown_at_peak[static_cast<int>(MemCategory::unsharded_grad)], kBlockBytes);
    EXPECT_EQ(m.breakdown_at_peak[static_cast<int>(MemCategory::reduce_scatter_buffer)], kBlockBytes);
    if (previous_peak >= 0) {
      EXPECT_EQ(previous_peak - m.peak_allocated_bytes, kBlockBytes);
    }
    previous_peak = m.peak_allocated_bytes;
  }
}

// stage3_max_reuse_distance: with DeepSpeed's default (1e9 elements, more than this whole
// 2.1M-element trace) every block is kept from its forward to its backward even without any
// prefetch (the reuse walk finds its backward use), so each block is gathered once per step: 4
// all-gathers; with 0, each block is gathered again for its backward: 8.
TEST(DeepSpeedZero3Buffers, ReuseDistanceKeepsBlocksFromForwardToBackward) {
  const Plan kept = plan(zero3({{"stage3_prefetch_bucket_size", 0}}));
  EXPECT_EQ(ops_of(kept.schedule, OpKind::all_gather).size(), 4u);
  EXPECT_EQ(max_live_bytes(kept.schedule, "gathered params of "), 4 * kWeight * 2);
  const Plan released = plan(zero3({{"stage3_prefetch_bucket_size", 0}, {"stage3_max_reuse_distance", 0}}));
  EXPECT_EQ(ops_of(released.schedule, OpKind::all_gather).size(), 8u);
  EXPECT_EQ(max_live_bytes(released.schedule, "gathered params of "), kWeight * 2);
}

// stage3_param_persistence_threshold (parameter_offload.py mark_persistent_parameters: numel <=
// threshold). The model gets a root-owned embedding of 1,000 x 64 = 64,000 elements (<= 1e5, the
// default): it is kept whole on every rank, 64,000 x 2 = 128,000 bytes in bf16 beside its
// partition, never all-gathered for its modules, and all-gathered once after the optimizer step
// (stage3.py _post_step). No prefetch and no reuse, so each partitioned unit is gathered at each
// use: the 4 blocks twice = 8 all-gathers in forward and backward, plus the post-step one of
// 128,000 bytes. With threshold 0 the embedding is partitioned like the blocks: its unit (the
// root) is gathered in forward and backward too (10 all-gathers, 128,000 bytes each for the
// root) and nothing is whole.
TEST(DeepSpeedZero3Buffers, SmallParametersStayWholeUnderThePersistenceThreshold) {
  nlohmann::json j = zero3({{"stage3_prefetch_bucket_size", 0}, {"stage3_max_reuse_distance", 0}});
  j["model"] = block_model(4, {512, 512}, 0, {1000, 64});
  const Plan p = plan(j);
  const Schedule& s = p.schedule;
  std::int64_t whole = 0;
  for (const Allocation& a : s.allocations)
    if (a.label == "DeepSpeed persistent params (whole)") {
      whole += a.bytes;
      EXPECT_TRUE(a.persistent);
    }
  EXPECT_EQ(whole, 128000);
  const auto gathers = ops_of(s, OpKind::all_gather);
  ASSERT_EQ(gathers.size(), 9u);
  for (std::size_t i = 0; i + 1 < gathers.size(); ++i) {
    EXPECT_EQ(gathers[i]->comm_bytes, kWeight * 2.0) << gathers[i]->name;
    EXPECT_NE(gathers[i]->phase, Phase::optimizer);
  }
  EXPECT_EQ(gathers.back()->comm_bytes, 128000.0);
  EXPECT_EQ(gathers.back()->phase, Phase::optimizer);

  // A threshold equal to a block's 262,144 elements keeps the blocks whole too (numel <= threshold):
  // nothing is gathered in the step, one post-step all-gather of 4 x 524,288 + 128,000 bytes.
  j["deepspeed"]["stage3_param_persistence_threshold"] = kWeight;
  const Plan whole_blocks = plan(j);
  const auto only_post_step = ops_of(whole_blocks.schedule, OpKind::all_gather);
  ASSERT_EQ(only_post_step.size(), 1u);
  EXPECT_EQ(only_post_step[0]->comm_bytes, 4.0 * kWeight * 2 + 128000);

  j["deepspeed"]["stage3_param_persistence_threshold"] = 0;
  const Plan q = plan(j);
  const auto all = ops_of(q.schedule, OpKind::all_gather);
  ASSERT_EQ(all.size(), 10u);
  EXPECT_EQ(std::count_if(all.begin(), all.end(), [](const Op* op) { return op->comm_bytes == 128000.0; }), 2);
  for (const Allocation& a : q.schedule.allocations) EXPECT_NE(a.label, "DeepSpeed persistent params (whole)");
}

// reduce_bucket_size under ZeRO-3 (stage3.py reduce_independent_p_g_buckets_and_remove_grads, the
// same rule as stage 1/2): 2 x 262,144 = 524,288 elements: blocks.3 + blocks.2, then blocks.1 +
// blocks.0: 2 reduce-scatters of 1 MiB (bf16) per micro-step, the first before blocks.1's
// backward (overlap_comm, True by default at stage 3). Made at init and alive all step: the ipg
// bucket buffer, 524,288 x 2 = 1 MiB, and grad_partitions_flat_buffer, the rank's partition of
// 4 x 262,144 / 8 = 131,072 elements x 2 = 256 KiB.
TEST(DeepSpeedZero3Buffers, ReduceBucketsAndTheirBuffers) {
  const Plan p = plan(zero3({{"reduce_bucket_size", 2 * kWeight}}));
  const Schedule& s = p.schedule;
  const auto rs = ops_of(s, OpKind::reduce_scatter);
  ASSERT_EQ(rs.size(), 2u);
  for (const Op* op : rs) EXPECT_EQ(op->comm_bytes, 1.0 * MiB) << op->name;
  EXPECT_LT(rs[0]->id, op_named(s, "bwd blocks.1"));
  EXPECT_EQ(rs[0]->stream, Stream::reduce_scatter);
  EXPECT_EQ(persistent_bytes(s, MemCategory::reduce_scatter_buffer), 1 * MiB);
  EXPECT_EQ(persistent_bytes(s, MemCategory::sharded_grad), 256 * 1024);
  // The defaults are DeepSpeed's: a 5e8-element bucket buffer (1e9 bytes in bf16) made at init.
  const Scenario d = parse_scenario(zero3(nlohmann::json::object()), "test.json");
  EXPECT_TRUE(d.deepspeed.overlap_comm);
  EXPECT_EQ(d.deepspeed.stage3_param_persistence_threshold, 100000);
  EXPECT_EQ(persistent_bytes(plan(zero3(nlohmann::json::object())).schedule, MemCategory::reduce_scatter_buffer),
            1000000000);
}

// sub_group_size (stage3.py, deepspeedai/DeepSpeed@edaa722): the optimizer steps the partition one
// sub-group at a time, and _prepare_fp32_grad_for_sub_group makes each sub-group's gradient anew:
// `self.flatten(self.averaged_gradients[i]).to(fp32)`, a torch.cat of the sub-group's bf16 views
// of grad_partitions_flat_buffer (a view when the sub-group has one parameter) cast to fp32, alive
// until _release_sub_group. _create_fp16_sub_groups cuts the parameters in order, closing a
// sub-group once it holds >= sub_group_size partition elements, the crossing parameter included.
// 8 blocks of 262,144 elements on 8 ranks: each block's partition is 32,768 elements (65,536 B in
// bf16, 131,072 B in fp32); the rank's partition 262,144 elements. AdamW, so torch.optim's foreach
// intermediates (the planner's convention, docs/memory-model.md "Optimizer step") are per
// sub-group too: each step is one optimizer.step() on one flat fp32 tensor.
//   1e9 (DeepSpeed's default, config.py pp_int(1e9)) >= 262,144: one sub-group of 8 parameters:
//     concatenation 524,288 B + fp32 1,048,576 B, then fp32 + intermediates 1,048,576 B each:
//     2 MiB above the step's persistent state, the highest of the step (backward holds one 512 KiB
//     gathered block and its 512 KiB gradient at most: no prefetch, no reuse, one bucket per block
//     reduce-scattered in place);
//   100,000: blocks 0-3 reach 131,072 >= 100,000 (the fourth crosses): 2 sub-groups of 4: 1 MiB;
//   1 (or 0): one parameter each, so no concatenation: 131,072 B + 131,072 B = 256 KiB.
TEST(DeepSpeedZero3Buffers, SubGroupSizeBoundsTheOptimizerStepsFp32Gradients) {
  nlohmann::json base = zero3({{"stage3_prefetch_bucket_size", 0}, {"stage3_max_reuse_distance", 0},
                               {"stage3_max_live_parameters", 0}, {"reduce_bucket_size", kWeight}});
  base["model"] = block_model(8, {512, 512}, 0);
  base["training"]["optimizer"] = "adamw";
  struct Case {
    std::int64_t sub_group_size;
    std::size_t groups;
    std::int64_t fp32_grad_bytes, flat_bytes, transient_bytes;
  };
  const std::vector<Case> cases = {{1000000000, 1, 1048576, 524288, 2 * MiB},
                                   {100000, 2, 524288, 262144, 1 * MiB},
                                   {1, 8, 131072, 0, 256 * 1024},
                                   {0, 8, 131072, 0, 256 * 1024}};
  std::int64_t default_peak = 0;
  for (const Case& c : cases) {
    SCOPED_TRACE("sub_group_size " + std::to_string(c.sub_group_size));
    nlohmann::json j = base;
    j["deepspeed"]["sub_group_size"] = c.sub_group_size;
    const Plan p = plan(j);
    const Schedule& s = p.schedule;
    EXPECT_EQ(ops_of(s, OpKind::optimizer).size(), c.groups);
    std::size_t fp32 = 0, flat = 0;
    for (const Allocation& a : s.allocations) {
      if (a.label.rfind("fp32 grads of optimizer sub-group ", 0) == 0) {
        EXPECT_EQ(a.bytes, c.fp32_grad_bytes) << a.label;
        EXPECT_EQ(a.category, MemCategory::sharded_grad);
        ++fp32;
      }
      if (a.label.rfind("flattened grads of optimizer sub-group ", 0) == 0) {
        EXPECT_EQ(a.bytes, c.flat_bytes) << a.label;
        ++flat;
      }
    }
    EXPECT_EQ(fp32, c.groups);
    EXPECT_EQ(flat, c.flat_bytes > 0 ? c.groups : 0u);
    const MemoryReport m = replay_memory(s);
    std::int64_t optimizer_high = 0;
    for (const Op& op : s.ops)
      if (op.phase == Phase::optimizer) optimizer_high = std::max(optimizer_high, m.allocated_at_op[op.id]);
    EXPECT_EQ(optimizer_high - m.allocated_at_start, c.transient_bytes);
    if (c.sub_group_size == 1000000000) {
      EXPECT_EQ(s.ops[m.peak_op].phase, Phase::optimizer);
      EXPECT_EQ(m.peak_allocated_bytes, optimizer_high);
      default_peak = m.peak_allocated_bytes;
    } else {
      // Smaller sub-groups lower the step's peak (to backward's, once the optimizer is below it).
      EXPECT_LT(m.peak_allocated_bytes, default_peak);
      EXPECT_EQ(default_peak - optimizer_high, 2 * MiB - c.transient_bytes);
    }
  }
  // Without the object ZeRO-3 is planned as before: one optimizer op over every shard.
  nlohmann::json plain = base;
  plain.erase("deepspeed");
  EXPECT_EQ(ops_of(plan(plain).schedule, OpKind::optimizer).size(), 1u);
  EXPECT_EQ(parse_scenario(zero3(nlohmann::json::object()), "test.json").deepspeed.sub_group_size, 1000000000);
}

// The same step with DeepSpeed's FusedAdam (training.optimizer_kernel fused): no intermediates, so
// the step's transient is the sub-group's gradient copies alone. Default sub_group_size, one group
// of n = 262,144 elements: the fp16 concatenation (n x 2 = 0.5 MiB) and the fp32 copy (n x 4 = 1 MiB)
// live together while the gradient is prepared, 1.5 MiB, against foreach's 2 n x 4 = 2 MiB at the
// step. One parameter per sub-group (sub_group_size 1): no concatenation, so the fp32 copy alone,
// 32,768 x 4 = 128 KiB, against foreach's 256 KiB.
TEST(DeepSpeedZero3Buffers, FusedAdamLeavesOnlyTheSubGroupsGradientCopies) {
  nlohmann::json base = zero3({{"stage3_prefetch_bucket_size", 0}, {"stage3_max_reuse_distance", 0},
                               {"stage3_max_live_parameters", 0}, {"reduce_bucket_size", kWeight}});
  base["model"] = block_model(8, {512, 512}, 0);
  base["training"]["optimizer"] = "adamw";
  base["training"]["optimizer_kernel"] = "fused";
  for (const auto& [sub_group_size, transient] :
       std::vector<std::pair<std::int64_t, std::int64_t>>{{1000000000, 3 * MiB / 2}, {1, 128 * 1024}}) {
    SCOPED_TRACE("sub_group_size " + std::to_string(sub_group_size));
    nlohmann::json j = base;
    j["deepspeed"]["sub_group_size"] = sub_group_size;
    const Plan p = plan(j);
    const Schedule& s = p.schedule;
    for (const Allocation& a : s.allocations) EXPECT_EQ(a.label.find("intermediates"), std::string::npos) << a.label;
    const MemoryReport m = replay_memory(s);
    std::int64_t optimizer_high = 0;
    for (const Op& op : s.ops)
      if (op.phase == Phase::optimizer) optimizer_high = std::max(optimizer_high, m.allocated_at_op[op.id]);
    EXPECT_EQ(optimizer_high - m.allocated_at_start, transient);
  }
}

// _create_fp16_sub_groups on the rank's partitions, ceil(numel / W): a 1,000 x 64 embedding first
// (module pre-order: 64,000 / 8 = 8,000 elements), then the 4 blocks (32,768 each).
TEST(DeepSpeedZero3Buffers, SubGroupsCloseOnTheCrossingParameter) {
  const models::Model m = models::parse_model(block_model(4, {512, 512}, 0, {1000, 64}), "m.json");
  auto numels = [&](std::int64_t size, int ranks) {
    std::vector<std::int64_t> out;
    for (const OptimizerSubGroup& g : deepspeed_sub_groups(m, ranks, size)) out.push_back(g.numel);
    return out;
  };
  using V = std::vector<std::int64_t>;
  EXPECT_EQ(numels(1000000000, 8), (V{8000 + 4 * 32768}));  // >= the partition: one
  EXPECT_EQ(numels(8000 + 4 * 32768, 8), (V{8000 + 4 * 32768}));
  EXPECT_EQ(numels(40000, 8), (V{8000 + 32768, 2 * 32768, 32768}));  // 40,768 >= 40,000 closes
  EXPECT_EQ(numels(40768, 8), (V{8000 + 32768, 2 * 32768, 32768}));  // reaching it exactly closes too
  EXPECT_EQ(numels(40769, 8), (V{8000 + 2 * 32768, 2 * 32768}));
  EXPECT_EQ(numels(0, 8), (V{8000, 32768, 32768, 32768, 32768}));
  // Padding: 64,000 on 7 ranks is ceil(9,142.86) = 9,143; 262,144 / 7 -> 37,450.
  EXPECT_EQ(numels(1, 7), (V{9143, 37450, 37450, 37450, 37450}));
}

// contiguous_gradients false (stage3.py, deepspeedai/DeepSpeed@edaa722): no ipg bucket buffer is made
// (`if self.contiguous_gradients: bucket.buffer = torch.empty(...)`), and autograd's gradient is not
// copied into it (__add_grad_to_ipg_bucket) but waits in the bucket until partition_grads drops it
// after the reduction. Either way a bucket of several gradients is reduce-scattered from a flat
// torch.cat of their padded chunks (__avg_scatter_grads -> reduce_scatter_coalesced, DeepSpeed's
// default reduce_scatter True). 4 blocks, 2-block buckets (524,288 elements): [blocks.3, blocks.2]
// reduced after blocks.2's backward, [blocks.1, blocks.0] after blocks.0's; each flat input is
// 524,288 x 2 B = 1 MiB. No prefetch, no reuse: one 512 KiB gathered block at a time.
//   contiguous: autograd's gradients (512 KiB each) freed at their unit's post-backward: one at a
//     time; the 1 MiB ipg buffer all step;
//   not contiguous: blocks.3's gradient waits for blocks.2's: 2 x 512 KiB at once, freed by the
//     bucket's partition copy; no ipg buffer. The highest moment is that bucket's reduction: both
//     gradients and the 1 MiB flat input.
TEST(DeepSpeedZero3Buffers, WithoutContiguousGradientsAutogradsGradientsWaitForTheirBucket) {
  nlohmann::json ds = {{"stage3_prefetch_bucket_size", 0}, {"stage3_max_reuse_distance", 0},
                       {"stage3_max_live_parameters", 0}, {"reduce_bucket_size", 2 * kWeight}};
  const Plan contiguous = plan(zero3(ds));
  ds["contiguous_gradients"] = false;
  const Plan loose = plan(zero3(ds));
  EXPECT_EQ(persistent_bytes(contiguous.schedule, MemCategory::reduce_scatter_buffer), 1 * MiB);
  EXPECT_EQ(persistent_bytes(loose.schedule, MemCategory::reduce_scatter_buffer), 0);
  EXPECT_EQ(max_live_bytes(contiguous.schedule, "grads of blocks."), kWeight * 2);
  EXPECT_EQ(max_live_bytes(loose.schedule, "grads of blocks."), 2 * kWeight * 2);
  for (const Plan* p : {&contiguous, &loose}) {
    const Schedule& s = p->schedule;
    std::vector<std::int64_t> flat;
    for (const Allocation& a : s.allocations)
      if (a.label.rfind("reduce-scatter input of the bucket ending in ", 0) == 0) {
        flat.push_back(a.bytes);
        EXPECT_EQ(a.category, MemCategory::reduce_scatter_buffer);
      }
    EXPECT_EQ(flat, (std::vector<std::int64_t>{1 * MiB, 1 * MiB}));
  }
  // blocks.3's gradient is freed by the partition copy of the bucket ending in blocks.2.
  const Schedule& s = loose.schedule;
  const Op& copy = s.ops[op_named(s, "partition grads of the bucket ending in blocks.2")];
  bool freed = false;
  for (int a : copy.frees) freed = freed || s.allocations[a].label == "grads of blocks.3";
  EXPECT_TRUE(freed);
  const MemoryReport m = replay_memory(s);
  EXPECT_EQ(s.ops[m.peak_op].name, "reduce-scatter bucket ending in blocks.2");
  EXPECT_EQ(m.breakdown_at_peak[static_cast<int>(MemCategory::unsharded_grad)], 2 * kWeight * 2);
  EXPECT_EQ(m.breakdown_at_peak[static_cast<int>(MemCategory::reduce_scatter_buffer)], 1 * MiB);
}

// ---- bad input -------------------------------------------------------------------------------
std::string path_of_error(const nlohmann::json& j, std::vector<std::string> overrides = {}) {
  try {
    parse_scenario(j, "bad.json", overrides);
  } catch (const InputError& e) {
    EXPECT_EQ(e.file(), "bad.json");
    return e.json_path();
  }
  ADD_FAILURE() << "no InputError";
  return "";
}

TEST(BufferSizeInput, BadValuesNameTheField) {
  nlohmann::json ds = scenario("ZERO1", true);
  ds["deepspeed"] = nlohmann::json::object();
  EXPECT_EQ(path_of_error(ds, {"deepspeed.reduce_bucket_size=0"}), "deepspeed.reduce_bucket_size");
  EXPECT_EQ(path_of_error(ds, {"deepspeed.reduce_bucket_size=1.5"}), "deepspeed.reduce_bucket_size");
  EXPECT_EQ(path_of_error(ds, {"deepspeed.reduce_bucket_size=big"}), "deepspeed.reduce_bucket_size");
  EXPECT_EQ(path_of_error(ds, {"deepspeed.reduce_bucket_size=1e18"}), "deepspeed.reduce_bucket_size");
  EXPECT_EQ(path_of_error(ds, {"deepspeed.overlap_comm=3"}), "deepspeed.overlap_comm");
  EXPECT_EQ(path_of_error(ds, {"deepspeed.reduce_bucket=5"}), "deepspeed.reduce_bucket");
  // ZeRO-3's knobs under ZeRO-1 are DeepSpeed no-ops: refused.
  EXPECT_EQ(path_of_error(ds, {"deepspeed.stage3_max_live_parameters=1e8"}), "deepspeed.stage3_max_live_parameters");
  EXPECT_EQ(path_of_error(ds, {"deepspeed.allgather_bucket_size=5e8"}), "deepspeed.allgather_bucket_size");
  EXPECT_EQ(path_of_error(ds, {"deepspeed.sub_group_size=1e8"}), "deepspeed.sub_group_size");
  try {  // the reason, not "unknown field"
    parse_scenario(ds, "bad.json", {"deepspeed.sub_group_size=1e8"});
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("ZeRO-3's optimizer sub-group"), std::string::npos) << e.what();
  }

  nlohmann::json ddp = scenario("NO_SHARD");
  ddp["ddp"] = nlohmann::json::object();
  EXPECT_EQ(path_of_error(ddp, {"ddp.bucket_cap_mb=0"}), "ddp.bucket_cap_mb");
  EXPECT_EQ(path_of_error(ddp, {"ddp.bucket_cap_mb=-25"}), "ddp.bucket_cap_mb");
  EXPECT_EQ(path_of_error(ddp, {"ddp.bucket_cap_mb=1e-9"}), "ddp.bucket_cap_mb");
  EXPECT_EQ(path_of_error(ddp, {"ddp.gradient_as_bucket_view=\"yes\""}), "ddp.gradient_as_bucket_view");
}

TEST(BufferSizeInput, TheObjectsBelongToTheirFrameworks) {
  // deepspeed on an FSDP scenario (FSDP's layout), and on DDP.
  nlohmann::json fsdp = scenario("FULL_SHARD");
  fsdp["deepspeed"] = {{"reduce_bucket_size", 5e8}};
  EXPECT_EQ(path_of_error(fsdp), "deepspeed");
  nlohmann::json ddp = scenario("NO_SHARD", true);
  ddp["deepspeed"] = nlohmann::json::object();
  EXPECT_EQ(path_of_error(ddp), "deepspeed");
  // ZeRO-3: allgather_bucket_size is ZeRO-1/2's, and offload is not modelled with the object yet:
  // refused, not read and ignored.
  nlohmann::json zero3 = scenario("FULL_SHARD", true);
  zero3["deepspeed"] = nlohmann::json::object();
  EXPECT_EQ(path_of_error(zero3, {"deepspeed.allgather_bucket_size=5e8"}), "deepspeed.allgather_bucket_size");
  EXPECT_EQ(path_of_error(zero3, {"deepspeed.contiguous_gradients=3"}), "deepspeed.contiguous_gradients");
  EXPECT_EQ(path_of_error(zero3, {"deepspeed.stage3_max_live_parameters=-1"}), "deepspeed.stage3_max_live_parameters");
  EXPECT_EQ(path_of_error(zero3, {"deepspeed.sub_group_size=-1"}), "deepspeed.sub_group_size");
  EXPECT_EQ(path_of_error(zero3, {"deepspeed.sub_group_size=1.5"}), "deepspeed.sub_group_size");
  EXPECT_EQ(path_of_error(zero3, {"fsdp.offload_optimizer=\"cpu\""}), "deepspeed");
  // FSDP's cpu_offload is not DeepSpeed's: refused at the field itself under DeepSpeed's layout,
  // object or not (session 33; it was refused at the object, and without it planned a host
  // copy of a parameter shard that DeepSpeed does not keep).
  EXPECT_EQ(path_of_error(zero3, {"fsdp.cpu_offload=true"}), "fsdp.cpu_offload");
  EXPECT_EQ(path_of_error(scenario("SHARD_GRAD_OP", true), {"fsdp.cpu_offload=true"}), "fsdp.cpu_offload");
  // FSDP's gathering fields have no effect under DeepSpeed's coordinator: refused, not ignored.
  EXPECT_EQ(path_of_error(zero3, {"fsdp.reshard_after_forward=false"}), "deepspeed");
  EXPECT_EQ(path_of_error(zero3, {"fsdp.forward_prefetch=true"}), "deepspeed");
  EXPECT_EQ(path_of_error(zero3, {"fsdp.prefetch_depth=2"}), "deepspeed");
  // ZeRO-2 reduces every micro-step: no_sync-style accumulation does not apply.
  nlohmann::json zero2 = scenario("SHARD_GRAD_OP", true);
  zero2["deepspeed"] = nlohmann::json::object();
  zero2["fsdp"]["grad_sync"] = "last_micro_step";
  EXPECT_EQ(path_of_error(zero2), "deepspeed");
  zero2["fsdp"].erase("grad_sync");
  EXPECT_EQ(path_of_error(zero2, {"deepspeed.stage3_prefetch_bucket_size=5e7"}), "deepspeed.stage3_prefetch_bucket_size");
  // ddp on a sharded strategy.
  nlohmann::json sharded = scenario("FULL_SHARD");
  sharded["ddp"] = {{"bucket_cap_mb", 25}};
  EXPECT_EQ(path_of_error(sharded), "ddp");
}

}  // namespace
}  // namespace fsdpsim::planner
