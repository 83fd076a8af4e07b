// The planned step against FSDP's and DDP's documented behaviour, worked by hand on synthetic
// models (synthetic.h): weights of 64 x 64 (4096 elements, 8 rows per rank on 8 GPUs, no
// padding), 1024 tokens per micro-step, activations written for 16-bit (act_scale 1 at bf16).
// Each test names the source of the rule it pins and the mutant of tools/mutants.txt it kills.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "planner/memory.h"
#include "planner/cost_model.h"
#include "planner/op_costs.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "input_error_of.h"
#include "synthetic.h"

namespace fsdpsim::planner {
namespace {

using testing::block_model;
using testing::cluster;

constexpr std::int64_t kTokens = 1024;      // micro_batch 1 x seq_len 1024
constexpr std::int64_t kWeight = 64 * 64;   // elements of one block's weight
constexpr std::int64_t kCublasWorkspaces = testing::kCublasWorkspacesHopper;  // synthetic.h

nlohmann::json scenario(int blocks, double activation_bytes_per_token, nlohmann::json fsdp,
                        nlohmann::json training = nlohmann::json::object(), std::vector<std::int64_t> root = {},
                        int nodes = 1, int gpus = 8, std::vector<std::int64_t> shape = {64, 64}) {
  nlohmann::json t = {{"micro_batch", 1}, {"seq_len", kTokens}, {"param_dtype", "bf16"}, {"reduce_dtype", "fp32"},
                      {"master_dtype", "fp32"}, {"optimizer", "none"}};
  if (training.is_object()) t.update(training);
  return {{"model", block_model(blocks, shape, activation_bytes_per_token, root)},
          {"cluster", cluster(nodes, gpus)},
          {"training", t},
          {"fsdp", fsdp}};
}

Plan plan(const nlohmann::json& json, std::vector<std::string> overrides = {}) {
  return plan_step(parse_scenario(json, "test.json", overrides));
}

int count_ops(const Schedule& s, OpKind kind, int micro_step = -1) {
  return static_cast<int>(std::count_if(s.ops.begin(), s.ops.end(), [&](const Op& op) {
    return op.kind == kind && (micro_step < 0 || op.micro_step == micro_step);
  }));
}

const Op& first_op(const Schedule& s, OpKind kind) {
  for (const Op& op : s.ops)
    if (op.kind == kind) return op;
  throw std::logic_error("no op of kind " + to_string(kind));
}

// Allocations live while `at` is issued (after its allocations, before its frees).
std::vector<bool> live_at(const Schedule& s, int at) {
  std::vector<bool> live(s.allocations.size(), false);
  for (const Allocation& a : s.allocations) live[a.id] = a.persistent;
  for (const Op& op : s.ops) {
    for (int a : op.allocs) live[a] = true;
    if (op.id == at) break;
    for (int a : op.frees) live[a] = false;
  }
  return live;
}

std::int64_t live_bytes(const Schedule& s, int at, MemCategory category) {
  const std::vector<bool> live = live_at(s, at);
  std::int64_t bytes = 0;
  for (const Allocation& a : s.allocations)
    if (live[a.id] && a.category == category) bytes += a.bytes;
  return bytes;
}

// ---- gradient synchronisation -----------------------------------------------------------
// DDP (torch/nn/parallel/distributed.py, DistributedDataParallel.no_sync: "Within this
// context, gradients will be accumulated on module variables, which will later be
// synchronized in the first forward-backward pass exiting the context") and FSDP's NO_SHARD
// (torch/distributed/fsdp/api.py: "synchronizes them (via all-reduce) after the backward
// computation"; FullyShardedDataParallel.no_sync): under gradient accumulation the micro-steps
// but the last run under no_sync, so a step all-reduces each bucket (here: each unit's
// replicated gradient) once, in the last micro-step, whatever the accumulation.
// Kills sync.ddp-all-reduce-every-micro-step.
TEST(HandWorkedGradSync, NoShardAllReducesEachUnitOncePerStepUnderAccumulation) {
  const Plan p = plan(scenario(4, 0, {{"strategy", "NO_SHARD"}}, {{"grad_accum", 2}}));
  const Schedule& s = p.schedule;
  ASSERT_EQ(s.micro_steps, 2);
  EXPECT_EQ(count_ops(s, OpKind::all_reduce), 4);  // 4 block units; the root owns no parameter
  EXPECT_EQ(count_ops(s, OpKind::all_reduce, 1), 4);
  for (const Op& op : s.ops) {
    if (op.kind != OpKind::all_reduce) continue;
    EXPECT_EQ(op.comm_bytes, kWeight * 4.0) << op.name;  // the unit's whole gradient, fp32 reduce dtype
    EXPECT_EQ(s.groups[op.group].ranks, 8) << op.name;
  }
  EXPECT_EQ(count_ops(s, OpKind::reduce_scatter), 0);
}

// [Gradient sync by strategy] NO_SHARD's once-per-step reduction is DDP's no_sync() idiom, and
// the default; a stated grad_sync every_micro_step is DDP without no_sync: 4 units x 2
// micro-steps of all-reduces (it was ignored, and the step planned as no_sync: session 33's
// audit). ZeRO-1 reduces at DeepSpeed's accumulation boundary only: the statement is refused.
// FSDP's CPU offload is planned for the sharded strategies only: NO_SHARD's (the whole model
// copied in) and ZeRO-1's are refused naming the field (they were planned with a 1/world
// parameter slice on the host and none on the GPU).
TEST(HandWorkedGradSync, NoShardHonoursAStatedSyncInEveryMicroStep) {
  const Plan every = plan(scenario(4, 0, {{"strategy", "NO_SHARD"}, {"grad_sync", "every_micro_step"}}, {{"grad_accum", 2}}));
  EXPECT_EQ(count_ops(every.schedule, OpKind::all_reduce, 0), 4);
  EXPECT_EQ(count_ops(every.schedule, OpKind::all_reduce, 1), 4);
  const Plan last = plan(scenario(4, 0, {{"strategy", "NO_SHARD"}, {"grad_sync", "last_micro_step"}}, {{"grad_accum", 2}}));
  EXPECT_EQ(count_ops(last.schedule, OpKind::all_reduce, 0), 0);
  EXPECT_EQ(count_ops(last.schedule, OpKind::all_reduce, 1), 4);
  auto error_path = [](const nlohmann::json& json) {
    return testing::input_error_of([&] { (void)parse_scenario(json, "test.json"); }).json_path();
  };
  EXPECT_EQ(error_path(scenario(4, 0, {{"strategy", "ZERO1"}, {"grad_sync", "every_micro_step"}}, {{"grad_accum", 2}})),
            "fsdp.grad_sync");
  EXPECT_EQ(error_path(scenario(4, 0, {{"strategy", "NO_SHARD"}, {"cpu_offload", true}})), "fsdp.cpu_offload");
  EXPECT_EQ(error_path(scenario(4, 0, {{"strategy", "ZERO1"}, {"cpu_offload", true}})), "fsdp.cpu_offload");
  // The sharded strategies take it as before.
  EXPECT_NO_THROW((void)parse_scenario(scenario(4, 0, {{"strategy", "FULL_SHARD"}, {"cpu_offload", true}}), "test.json"));
}

// The plan takes DeepSpeed's partition rule under its layout: a block's one [1, 100] weight over
// 8 ranks is ceil(100/8) = 13 elements a rank under ZeRO-3 (FULL_SHARD, master_weights
// optimizer_state), one whole row (100) under FSDP2's rows, ceil(100/8) = 13 under FSDP1's flat
// parameter and ZeRO-1's flat partition.
TEST(HandWorkedShards, DeepSpeedsLayoutTakesItsPartitionRule) {
  auto block_shard = [](const nlohmann::json& fsdp, const nlohmann::json& training) {
    const Plan p = plan(scenario(4, 0, fsdp, training, {}, 1, 8, {1, 100}));
    for (std::size_t u = 0; u < p.units.size(); ++u)
      if (p.shards[u].numel == 100) return p.shards[u].local_numel;
    return std::int64_t{-1};
  };
  const nlohmann::json deepspeed = {{"master_weights", "optimizer_state"}};
  EXPECT_EQ(block_shard({{"strategy", "FULL_SHARD"}, {"version", 2}}, deepspeed), 13);
  EXPECT_EQ(block_shard({{"strategy", "FULL_SHARD"}, {"version", 2}}, nlohmann::json::object()), 100);
  EXPECT_EQ(block_shard({{"strategy", "FULL_SHARD"}, {"version", 1}}, nlohmann::json::object()), 13);
  EXPECT_EQ(block_shard({{"strategy", "ZERO1"}, {"version", 2}}, deepspeed), 13);
}

// ZeRO-1 (DeepSpeed's stage 1: only the optimizer state is partitioned; ZeRO paper Sec. 5.1)
// reduces the gradient once per step as well: one reduce-scatter per unit, in the last
// micro-step, of the whole padded gradient (NCCL's nBytes: the input buffer).
// Kills sync.zero1-reduce-every-micro-step and comm.zero1-reduce-scatter-bytes-shard.
TEST(HandWorkedGradSync, Zero1ReduceScattersEachUnitOncePerStep) {
  const Plan p = plan(scenario(4, 0, {{"strategy", "ZERO1"}}, {{"grad_accum", 2}}));
  const Schedule& s = p.schedule;
  EXPECT_EQ(count_ops(s, OpKind::reduce_scatter), 4);
  EXPECT_EQ(count_ops(s, OpKind::reduce_scatter, 1), 4);
  for (const Op& op : s.ops) {
    if (op.kind == OpKind::reduce_scatter) {
      EXPECT_EQ(op.comm_bytes, kWeight * 4.0) << op.name;
    }
  }
}

// FSDP's sharded strategies reduce-scatter every micro-step by default (FSDP2's
// set_requires_gradient_sync(True), FSDP1 outside no_sync): 4 units x 2 micro-steps.
TEST(HandWorkedGradSync, FullShardReduceScattersEveryMicroStepByDefault) {
  const Plan p = plan(scenario(4, 0, {{"strategy", "FULL_SHARD"}}, {{"grad_accum", 2}}));
  EXPECT_EQ(count_ops(p.schedule, OpKind::reduce_scatter, 0), 4);
  EXPECT_EQ(count_ops(p.schedule, OpKind::reduce_scatter, 1), 4);
}

// [End of backward] (planner/plan_fsdp2.cpp) FSDP2 at grad accum 2 reduce-scatters in both
// micro-steps. Its root post-backward callback (FSDPState._root_post_backward_final_callback)
// makes the compute stream wait for the last reduce-scatter and clears its state, so no
// reduce-scatter input of micro-step 0 is alive in micro-step 1: the fp32 input of the last
// unit reduced (4096 x 4 B here) was carried to micro-step 1's first reduce-scatter before.
TEST(HandWorkedFsdp2, NoReduceScatterInputOutlivesItsBackward) {
  const Plan p = plan(scenario(4, 16, {{"version", 2}, {"strategy", "FULL_SHARD"}}, {{"grad_accum", 2}}));
  const Schedule& s = p.schedule;
  int wait = -1, last_reduce_scatter = -1, first_forward_1 = -1;
  for (const Op& op : s.ops) {
    if (op.micro_step == 0 && op.kind == OpKind::reduce_scatter) last_reduce_scatter = op.id;
    if (op.micro_step == 0 && op.kind == OpKind::wait && op.name == "wait for the last reduce-scatter") wait = op.id;
    if (op.micro_step == 1 && op.kind == OpKind::compute_fwd && first_forward_1 < 0) first_forward_1 = op.id;
  }
  ASSERT_GE(wait, 0);
  EXPECT_EQ(s.ops[wait].stream, Stream::compute);
  ASSERT_EQ(s.ops[wait].deps.size(), 1u);
  EXPECT_EQ(s.ops[wait].deps[0], last_reduce_scatter);
  EXPECT_LT(wait, first_forward_1);
  ASSERT_GE(first_forward_1, 0);
  EXPECT_EQ(live_bytes(s, first_forward_1, MemCategory::reduce_scatter_buffer), 0);
  EXPECT_EQ(live_bytes(s, wait, MemCategory::reduce_scatter_buffer), kWeight * 4);  // freed as it is issued
  // The last micro-step's is released before the optimizer step, as before: one wait op only.
  EXPECT_EQ(count_ops(s, OpKind::wait), 1);
}

// [FSDP2 offload accumulation] (planner/plan_fsdp_grads.cpp) FSDP2 with CPU offload at grad accum
// 2 (reduce-scatter in both micro-steps): micro-step 0 copies each reduced shard into the pinned
// host gradient (non_blocking); micro-step 1 finds it there, so foreach_reduce's copy is blocking
// into a new pageable tensor and the CPU adds it in. By hand, per block: a shard of 4,096 / 8 =
// 512 fp32 elements, 2,048 B; the host add reads both and writes the sum, 6,144 B, at the host's
// rate (host_optimizer_bytes_per_second); the staged copy is pageable, freed by the add.
TEST(HandWorkedFsdp2, OffloadedGradientsAccumulateOnTheCpuAfterABlockingCopy) {
  const Scenario sc = parse_scenario(scenario(4, 0, {{"version", 2}, {"strategy", "FULL_SHARD"}, {"cpu_offload", true}},
                                              {{"grad_accum", 2}, {"optimizer", "adamw"}}),
                                     "test.json");
  const Plan p = plan_step(sc);
  const Schedule& s = p.schedule;
  const CostModel cost(sc);
  const OpCosts priced = price_ops(s, cost);
  int adds = 0;
  for (const Op& op : s.ops) {
    if (op.name.rfind("accumulate host grads", 0) != 0) continue;
    ++adds;
    EXPECT_EQ(op.micro_step, 1) << op.name;
    EXPECT_EQ(op.stream, Stream::host);
    EXPECT_EQ(op.hbm_bytes, 3.0 * 2048);
    // The CPU's work at the host's rate, no kernel launched.
    EXPECT_DOUBLE_EQ(priced.duration_seconds[op.id], 3.0 * 2048 / cost.calibration().host_optimizer_bytes_per_second);
    EXPECT_EQ(priced.kernels[op.id], 0.0);
    ASSERT_EQ(op.deps.size(), 1u);
    const Op& copy = s.ops[op.deps[0]];
    EXPECT_EQ(copy.kind, OpKind::d2h);
    EXPECT_EQ(copy.comm_bytes, 2048.0);
    ASSERT_EQ(copy.allocs.size(), 1u);
    const Allocation& staged = s.allocations[copy.allocs[0]];
    EXPECT_EQ(staged.placement, Placement::pageable_host);
    EXPECT_EQ(staged.bytes, 2048);
    EXPECT_EQ(std::count(op.frees.begin(), op.frees.end(), staged.id), 1);
  }
  EXPECT_EQ(adds, 4);
  // Without accumulation nothing is added on the host; nor under FSDP1, whose offload accumulates
  // under no_sync() only (the unsharded gradients on the GPU, reduced once).
  const Plan once = plan(scenario(4, 0, {{"version", 2}, {"strategy", "FULL_SHARD"}, {"cpu_offload", true}},
                                  {{"optimizer", "adamw"}}));
  for (const Op& op : once.schedule.ops) EXPECT_NE(op.name.rfind("accumulate host grads", 0), 0u) << op.name;
}

// [Mistargeted prefetch] (planner/plan_fsdp1.cpp) FSDP1 with BACKWARD_POST: each unit's
// post-backward prefetches the next unit in backward order, but the root's runs last (its
// embeddings' gradient comes last), after every unit's pre-backward, and PyTorch unshards a
// target only while its pre-backward has not run (_needs_pre_backward_unshard). So a step
// gathers each of the 4 blocks twice, forward and backward (the root holds no parameters here):
// 8 all-gathers, and nothing gathered is still alive at the optimizer step. Before, the root's
// post-backward gathered blocks.3 a third time and never freed it.
TEST(HandWorkedFsdp1, BackwardPostPrefetchesNothingAfterTheRootsPostBackward) {
  const Plan p = plan(scenario(4, 16, {{"version", 1}, {"strategy", "FULL_SHARD"}, {"backward_prefetch", "BACKWARD_POST"}}));
  const Schedule& s = p.schedule;
  EXPECT_EQ(count_ops(s, OpKind::all_gather), 8);
  int optimizer = -1;
  for (const Op& op : s.ops)
    if (op.kind == OpKind::optimizer && optimizer < 0) optimizer = op.id;
  ASSERT_GE(optimizer, 0);
  EXPECT_EQ(live_bytes(s, optimizer, MemCategory::unsharded_param), 0);
}

// ---- activation checkpointing -----------------------------------------------------------
// Full activation checkpointing (torch.utils.checkpoint; Chen et al. 2016, "Training Deep Nets
// with Sublinear Memory Cost", Sec. 3; Korthikanti et al. 2022, Sec. 5): forward keeps only each
// block's input; backward recomputes one block at a time, so the backward peak holds every
// block's checkpointed input, ONE block's recomputed activations and the gradients.
// NO_SHARD keeps parameters and gradients replicated and persistent, so nothing else moves:
//   persistent  4 blocks x 4096 x 4 B (fp32 params) + 4 x 4096 x 4 B (fp32 grads) = 131,072
//   inputs      token ids 8 B/token x 1024                                      =   8,192
//   checkpoints 4 blocks x input_bytes 8 B/token x 1024                          =  32,768
//   recomputed  one block: 1024 B/token x 1024 tokens                           = 1,048,576
//   temporary   the gradient w.r.t. the block's input, 8 B/token x 1024          =   8,192
//   workspaces  cuBLAS's, 2 x 32 MiB                                             = 67,108,864
// at the last block's backward op (block 2's holds one checkpoint less): 68,337,664 bytes.
// Kills ckpt.recompute-recreates-nothing and ckpt.blocks-keep-full-activations.
TEST(HandWorkedCheckpointing, BackwardPeakIsCheckpointsPlusOneRecomputedBlockPlusGradients) {
  const Plan p = plan(scenario(4, 1024, {{"strategy", "NO_SHARD"}}, {{"activation_checkpointing", "full"}}));
  const MemoryReport m = replay_memory(p.schedule);
  const std::int64_t params = 4 * kWeight * 4, grads = 4 * kWeight * 4;
  const std::int64_t checkpoints = 4 * 8 * kTokens, recomputed = 1024 * kTokens;
  EXPECT_EQ(m.peak_allocated_bytes,
            params + grads + 8 * kTokens + checkpoints + recomputed + 8 * kTokens + kCublasWorkspaces);
  ASSERT_GE(m.peak_op, 0);
  EXPECT_EQ(p.schedule.ops[m.peak_op].name, "bwd blocks.3");
  EXPECT_EQ(m.breakdown_at_peak[static_cast<int>(MemCategory::activation)], checkpoints + recomputed);
  EXPECT_EQ(m.breakdown_at_peak[static_cast<int>(MemCategory::unsharded_grad)], grads);
  // The forward keeps only the checkpointed inputs: no block's full activations.
  int last_forward = -1;
  for (const Op& op : p.schedule.ops)
    if (op.kind == OpKind::compute_fwd) last_forward = op.id;
  EXPECT_EQ(live_bytes(p.schedule, last_forward, MemCategory::activation), checkpoints);
}

// Checkpointing every 2nd block (activation_checkpointing: 2) keeps blocks 0 and 2 as inputs
// and blocks 1 and 3 whole: at the last block's backward op, 2 checkpoints (2 x 8,192) and two
// blocks' activations (block 1 saved, block 3 saved: 2 x 1,048,576); block 2's backward then
// holds block 2 recomputed instead of block 3, the same total.
// Kills ckpt.every-k-checkpoints-every-block.
TEST(HandWorkedCheckpointing, EveryKthBlockKeepsTheOthersWhole) {
  const Plan p = plan(scenario(4, 1024, {{"strategy", "NO_SHARD"}}, {{"activation_checkpointing", 2}}));
  const MemoryReport m = replay_memory(p.schedule);
  const std::int64_t persistent = 2 * 4 * kWeight * 4;
  EXPECT_EQ(m.peak_allocated_bytes,
            persistent + 8 * kTokens + 2 * 8 * kTokens + 2 * 1024 * kTokens + 8 * kTokens + kCublasWorkspaces);
  EXPECT_EQ(count_ops(p.schedule, OpKind::recompute), 2);
}

// ---- parameters kept unsharded ------------------------------------------------------------
// SHARD_GRAD_OP (torch/distributed/fsdp/api.py@acd8c9e7, ShardingStrategy: "this strategy
// unshards before the forward, does not reshard them after the forward, and only reshards them
// after the backward computation"; FSDP2's equivalent is fully_shard(reshard_after_forward=False)):
// by default every unit's gathered parameters stay from its forward to its backward, so at the
// first backward op all of them are live (root 128 x 64 + 4 blocks x 64 x 64, bf16), and each
// unit is all-gathered once per step. FULL_SHARD at the same op holds the root and the last block.
// Kills default.shard-grad-op-reshards-after-forward.
TEST(HandWorkedDefaults, ShardGradOpKeepsEveryUnitGatheredThroughForward) {
  const nlohmann::json zero2 = scenario(4, 16, {{"strategy", "SHARD_GRAD_OP"}}, {}, {128, 64});
  const Scenario parsed = parse_scenario(zero2, "test.json");
  EXPECT_EQ(parsed.fsdp.reshard_after_forward, 0);
  const Plan p = plan(zero2);
  const int first_backward = first_op(p.schedule, OpKind::compute_bwd).id;
  const std::int64_t root = 128 * 64 * 2, block = kWeight * 2;
  EXPECT_EQ(live_bytes(p.schedule, first_backward, MemCategory::unsharded_param), root + 4 * block);
  EXPECT_EQ(count_ops(p.schedule, OpKind::all_gather), 5);  // root + 4 blocks, forward only

  const Plan full = plan(zero2, {"fsdp.strategy=FULL_SHARD"});
  EXPECT_EQ(parse_scenario(zero2, "test.json", {"fsdp.strategy=FULL_SHARD"}).fsdp.reshard_after_forward, 8);
  EXPECT_EQ(live_bytes(full.schedule, first_op(full.schedule, OpKind::compute_bwd).id, MemCategory::unsharded_param),
            root + block);
  EXPECT_EQ(count_ops(full.schedule, OpKind::all_gather), 1 + 2 * 4);  // blocks gathered again in backward
}

// FSDP1 under mixed precision all-gathers from a low-precision copy of the shard (_mp_shard),
// which post_unshard frees right after the all-gather (torch/distributed/fsdp/_flat_param.py
// FlatParamHandle._free_low_precision_sharded_param; [Low-precision shard] in
// planner/plan_fsdp1.cpp): at the first backward op of SHARD_GRAD_OP (every unit still
// gathered) no such buffer is live, where keeping each to its reshard would hold the root's
// (128 x 64 / 8 x 2 B = 2,048 B) and the 4 blocks' (4 x 512 x 2 B = 4,096 B). Without mixed
// precision (fp32 parameters) the FSDP notes' shard-sized buffer stays beside each unsharded unit.
// Measured on an H100 (tests/data/hardware/memory-h100-2026-11-27.csv): FSDP1's forward peak is
// FSDP2's minus one block's parameters, with no shard-sized buffers on top.
// Kills hw-mem.fsdp1-low-precision-shard-held.
TEST(HandWorkedDefaults, Fsdp1FreesItsLowPrecisionShardAfterTheAllGather) {
  const nlohmann::json fsdp1 = scenario(4, 16, {{"version", 1}, {"strategy", "SHARD_GRAD_OP"}}, {}, {128, 64});
  const Plan p = plan(fsdp1);
  const int first_backward = first_op(p.schedule, OpKind::compute_bwd).id;
  EXPECT_EQ(live_bytes(p.schedule, first_backward, MemCategory::unsharded_param), 128 * 64 * 2 + 4 * kWeight * 2);
  EXPECT_EQ(live_bytes(p.schedule, first_backward, MemCategory::all_gather_buffer), 0);
  const Plan fp32 = plan(fsdp1, {"training.param_dtype=fp32"});
  EXPECT_EQ(live_bytes(fp32.schedule, first_op(fp32.schedule, OpKind::compute_bwd).id, MemCategory::all_gather_buffer),
            (128 * 64 / 8 + 4 * kWeight / 8) * 4);
}

// The root unit keeps its parameters from forward to backward (FSDP2
// torch/distributed/fsdp/_fully_shard/_fsdp_state.py, FSDPState._lazy_init: "For the root, do
// not reshard after forward since for training, the parameters would be freed and all-gathered
// immediately"; FSDP1 _runtime_utils.py _post_forward_reshard: "Do not free the root's
// parameters in the post-forward"): under FULL_SHARD the root's unsharded parameters live at
// the first backward op are the allocation its forward made, and the root is gathered once.
// Kills default.root-reshards-after-forward.
TEST(HandWorkedDefaults, RootKeepsItsForwardGatheredParametersIntoBackward) {
  for (int version : {1, 2}) {
    SCOPED_TRACE("FSDP" + std::to_string(version));
    const Plan p = plan(scenario(4, 16, {{"version", version}, {"strategy", "FULL_SHARD"}}, {}, {128, 64}));
    const Schedule& s = p.schedule;
    const int first_backward = first_op(s, OpKind::compute_bwd).id;
    const std::vector<bool> live = live_at(s, first_backward);
    int root_params = -1;
    for (const Op& op : s.ops)
      for (int a : op.allocs)
        if (s.allocations[a].category == MemCategory::unsharded_param && op.unit == 0 && root_params < 0) {
          root_params = a;
          EXPECT_EQ(op.phase, Phase::forward);
        }
    ASSERT_GE(root_params, 0);
    EXPECT_TRUE(live[root_params]) << s.allocations[root_params].label;
    int root_gathers = 0;
    for (const Op& op : s.ops) root_gathers += op.kind == OpKind::all_gather && op.unit == 0;
    EXPECT_EQ(root_gathers, 1);
  }
}

// ---- FSDP1's rate limiter -----------------------------------------------------------------
// limit_all_gathers (default True, torch/distributed/fsdp/fully_sharded_data_parallel.py):
// FSDP1's _FreeEventQueue (torch/distributed/fsdp/_limiter_utils.py@e6401a21) enqueues a free
// event at each reshard and, before an unshard, dequeue_if_needed() returns the oldest once
// len(queue) >= _max_num_inflight_all_gathers = 2; the CPU synchronizes on it
// (_runtime_utils.py _unshard). So in forward, block k (k >= 2) is issued after the free of
// block k - 2's flat parameter; blocks 0 and 1 wait on nothing.
// Kills default.limit-all-gathers-depth-3 and default.limit-all-gathers-off.
TEST(HandWorkedDefaults, Fsdp1RateLimiterWaitsForTheFreeTwoUnitsBack) {
  const nlohmann::json fsdp1 = scenario(6, 16, {{"version", 1}, {"strategy", "FULL_SHARD"}});
  const Plan p = plan(fsdp1);
  const Schedule& s = p.schedule;
  // The forward op that frees each block's flat parameter, by block.
  std::map<std::string, int> freed_by;
  for (const Op& op : s.ops)
    for (int a : op.frees) {
      const std::string& label = s.allocations[a].label;
      const std::string prefix = "unsharded flat param of ";
      if (op.phase == Phase::forward && label.rfind(prefix, 0) == 0) freed_by.emplace(label.substr(prefix.size()), op.id);
    }
  ASSERT_EQ(freed_by.size(), 6u);
  int copy_ins = 0;
  for (const Op& op : s.ops) {
    if (op.kind != OpKind::copy_in || op.phase != Phase::forward) continue;
    const int k = copy_ins++;
    SCOPED_TRACE(op.name);
    if (k < 2) {
      EXPECT_TRUE(op.cpu_waits.empty());
    } else {
      ASSERT_EQ(op.cpu_waits.size(), 1u);
      EXPECT_EQ(op.cpu_waits[0], freed_by.at("blocks." + std::to_string(k - 2)));
    }
  }
  EXPECT_EQ(copy_ins, 6);
  // limit_all_gathers=false: the CPU never waits.
  const Plan unlimited = plan(fsdp1, {"fsdp.limit_all_gathers=false"});
  for (const Op& op : unlimited.schedule.ops) EXPECT_TRUE(op.cpu_waits.empty()) << op.name;
}

// ---- FSDP1's flat gradient ----------------------------------------------------------------
// FSDP1 (REFERENCE.md, "FSDP1 (FlatParameter)"; torch/distributed/fsdp/_flat_param.py: the
// parameters are views of the flat parameter): autograd makes each parameter's gradient as its
// own tensor and concatenates them into the flat gradient (the split's backward), so at the
// reduce-scatter copy-in both are live (2x the unit's gradient in param_dtype). Autograd then
// releases the parameters' gradients before the flat parameter's AccumulateGrad hook, which
// casts the flat gradient to the reduce dtype beside it ([FSDP1 flat gradient],
// planner/plan_fsdp1.cpp): at the reduce-scatter the flat gradient and its cast, not the
// parameters' gradients. One 64 x 64 block on 8 GPUs (no padding: 4096 = 8 x 512), bf16 grads,
// fp32 reduce: unsharded grads 2 x 4096 x 2 B at the copy-in; 4096 x 2 B and the cast 4096 x 4 B
// at the reduce-scatter (8 bytes an element before: the cast beside both).
// Kills buf.fsdp1-flat-grad-copy-dropped.
TEST(HandWorkedFsdp1, FlatGradientIsTransientlyASecondCopy) {
  const Plan p = plan(scenario(4, 16, {{"version", 1}, {"strategy", "FULL_SHARD"}}));
  const Schedule& s = p.schedule;
  int copy_in = -1, reduce_scatter = -1;
  for (const Op& op : s.ops) {
    if (op.name == "reduce-scatter copy-in blocks.3") copy_in = op.id;
    if (op.name == "reduce-scatter blocks.3") reduce_scatter = op.id;
  }
  ASSERT_GE(copy_in, 0);
  ASSERT_GT(reduce_scatter, copy_in);
  EXPECT_EQ(live_bytes(s, copy_in, MemCategory::unsharded_grad), 2 * kWeight * 2);
  EXPECT_EQ(live_bytes(s, copy_in, MemCategory::reduce_scatter_buffer), 0);
  EXPECT_EQ(live_bytes(s, reduce_scatter, MemCategory::unsharded_grad), kWeight * 2);
  EXPECT_EQ(live_bytes(s, reduce_scatter, MemCategory::reduce_scatter_buffer), kWeight * 4);
}

// ---- HSDP ---------------------------------------------------------------------------------
// HYBRID_SHARD on 2 nodes x 4 GPUs: parameters sharded over the node (default shard group:
// one node), replicated across nodes. FSDP2's foreach_reduce
// (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py@010ae4a8) reduce-scatters into
// reduce_output (reduce_scatter_input_numel // world_size elements, reduce_dtype) and then
// dist.all_reduce(reduce_output, group=all_reduce_group): the all-reduce moves the local
// shard. A 66 x 64 weight pads to ceil(66/4) = 17 rows per rank: shard 17 x 64 = 1088
// elements, 4352 bytes at fp32; the reduce-scatter input is 4 x 1088 elements.
// Kills comm.hsdp-all-reduce-whole-unit, comm.hsdp-replicate-group-world and
// default.hybrid-shard-group-world.
TEST(HandWorkedHsdp, ReplicateAllReduceMovesTheLocalShardInTheReduceDtype) {
  const nlohmann::json hsdp = scenario(2, 16, {{"strategy", "HYBRID_SHARD"}}, {}, {}, 2, 4, {66, 64});
  const Plan p = plan(hsdp);
  const Schedule& s = p.schedule;
  const std::int64_t shard = 17 * 64;
  EXPECT_EQ(count_ops(s, OpKind::all_reduce), 2);  // one per unit per step
  for (const Op& op : s.ops) {
    if (op.kind == OpKind::all_reduce) {
      EXPECT_EQ(op.comm_bytes, shard * 4.0) << op.name;
      EXPECT_EQ(s.groups[op.group].ranks, 2) << op.name;  // one rank per node
      EXPECT_EQ(s.groups[op.group].nodes, 2) << op.name;
    }
    if (op.kind == OpKind::reduce_scatter) {
      EXPECT_EQ(op.comm_bytes, 4 * shard * 4.0) << op.name;
      EXPECT_EQ(s.groups[op.group].ranks, 4) << op.name;
      EXPECT_EQ(s.groups[op.group].nodes, 1) << op.name;
    }
  }
  const Plan bf16 = plan(hsdp, {"training.reduce_dtype=bf16"});
  for (const Op& op : bf16.schedule.ops) {
    if (op.kind == OpKind::all_reduce) {
      EXPECT_EQ(op.comm_bytes, shard * 2.0) << op.name;
    }
  }
}

}  // namespace
}  // namespace fsdpsim::planner

namespace fsdpsim::planner {
namespace {

// ---- the optimizer step -------------------------------------------------------------------
// torch.optim.AdamW's foreach implementation (torch/optim/adam.py, _multi_tensor_adam, the
// default on CUDA: `foreach` is chosen when every tensor is on a CUDA device) works on lists of
// tensors: exp_avg_sq_sqrt = torch._foreach_sqrt(device_exp_avg_sqs) materialises a new list as
// large as the parameters it updates, in the state's dtype (fp32). So the step holds one fp32
// copy of this rank's parameter shards as a temporary. By hand: 4 blocks of a 64 x 64 weight
// on 8 ranks, FSDP2 dim-0 shards of 64 / 8 = 8 rows x 64 = 512 elements each: 4 x 512 x 4 B =
// 8192 B of foreach intermediates, live at the optimizer step and freed by it.
// Kills opt.foreach-temporary-dropped.
TEST(HandWorkedOptimizer, AdamForeachIntermediatesAreOneFp32CopyOfTheShards) {
  const Plan p = plan(scenario(4, 16, {{"version", 2}, {"strategy", "FULL_SHARD"}}, {{"optimizer", "adamw"}}));
  const Schedule& s = p.schedule;
  const Op& step = first_op(s, OpKind::optimizer);
  EXPECT_EQ(live_bytes(s, step.id, MemCategory::temporary), 4 * 512 * 4);
  std::int64_t freed_temporaries = 0;
  for (int a : step.frees)
    if (s.allocations[a].category == MemCategory::temporary) freed_temporaries += s.allocations[a].bytes;
  EXPECT_EQ(freed_temporaries, 4 * 512 * 4);
}

// The step's HBM bytes, by hand, on the same 2,048 fp32 shard elements (fp32 gradients): a fused
// kernel reads the parameter, the gradient and each state and writes the parameter and the states
// (pytorch fused_adam_utils.cuh FusedAdamMathFunctor), (2 + 2k) x 4 + 4 B an element: AdamW 28 B,
// SGD with momentum 20 B. torch.optim's foreach list ops, op by op in torch/optim/adamw.py
// _multi_tensor_adamw (decay mul_ 2, lerp_ 2 + g, mul_ 2, addcmul_ 2 + g (the gradient list passed
// twice, read once), sqrt 2, div_ 2, add_ 2, addcdiv_ 4): 18 fp32 accesses and 2 gradient reads for
// AdamW (80 B); Adam (adam.py, no decay op) 16 and 2 (72 B); sgd.py _multi_tensor_sgd (mul_ 2,
// add_ 2 + g, add_ 3) 7 and 1 (32 B).
// Kills opt.foreach-bytes-as-fused, opt.foreach-adamw-decay-dropped, opt.fused-bytes-without-states,
// opt.foreach-addcmul-grad-read-twice.
TEST(HandWorkedOptimizer, StepBytesByKernel) {
  struct Case {
    const char* optimizer;
    const char* kernel;
    double bytes_per_element;
  };
  for (const Case& c : {Case{"adamw", "foreach", 80}, Case{"adamw", "fused", 28}, Case{"adam", "foreach", 72},
                        Case{"sgd_momentum", "foreach", 32}, Case{"sgd_momentum", "fused", 20}}) {
    const Plan p = plan(scenario(4, 16, {{"version", 2}, {"strategy", "FULL_SHARD"}},
                                 {{"optimizer", c.optimizer}, {"optimizer_kernel", c.kernel}}));
    EXPECT_EQ(first_op(p.schedule, OpKind::optimizer).hbm_bytes, c.bytes_per_element * 2048)
        << c.optimizer << " " << c.kernel;
  }
}

// A fused optimizer (training.optimizer_kernel fused: torch.optim's fused=True, DeepSpeed's
// FusedAdam) updates each element in one kernel: the same step holds no temporary, so its
// allocated total is 8192 B lower than the foreach step's above. Kills opt.fused-keeps-intermediates.
TEST(HandWorkedOptimizer, FusedAdamHoldsNoIntermediates) {
  const Plan foreach_plan = plan(scenario(4, 16, {{"version", 2}, {"strategy", "FULL_SHARD"}}, {{"optimizer", "adamw"}}));
  const Plan fused_plan = plan(scenario(4, 16, {{"version", 2}, {"strategy", "FULL_SHARD"}},
                                        {{"optimizer", "adamw"}, {"optimizer_kernel", "fused"}}));
  const Schedule& s = fused_plan.schedule;
  const Op& step = first_op(s, OpKind::optimizer);
  EXPECT_EQ(live_bytes(s, step.id, MemCategory::temporary), 0);
  const MemoryReport fused = replay_memory(s), foreach_memory = replay_memory(foreach_plan.schedule);
  const Op& foreach_step = first_op(foreach_plan.schedule, OpKind::optimizer);
  EXPECT_EQ(foreach_memory.allocated_at_op[foreach_step.id] - fused.allocated_at_op[step.id], 4 * 512 * 4);
}

// [CPU optimizer kernels] and [CPU optimizer threads] (planner/plan.cpp, planner/cost_model.cpp).
// 4 blocks of 4,096 elements on 8 GPUs: 2,048 optimizer elements per rank, fp32 master and
// gradients. FSDP's cpu_offload steps torch.optim's AdamW on CPU tensors: foreach is off there
// (torch/optim/optimizer.py _default_to_fused_or_foreach), and _single_tensor_adamw moves the
// foreach count, 80 B an element, unless fused=True (one pass, 28 B). torchrun's OMP_NUM_THREADS=1
// gives each rank one thread; a rank never gets more than its eighth of the node's bandwidth.
TEST(HandWorkedCpuOptimizer, TorchOnTheCpuIsTheSingleTensorLoopOnOneThreadByDefault) {
  struct Case {
    nlohmann::json training;
    double bytes_per_element;
    double threads;  // 0: every hardware thread
  };
  for (const Case& c : {Case{{{"optimizer", "adamw"}}, 80, 1}, Case{{{"optimizer", "adamw"}, {"optimizer_kernel", "fused"}}, 28, 1},
                        Case{{{"optimizer", "adamw"}, {"host_threads_per_rank", 2}}, 80, 2},
                        Case{{{"optimizer", "adamw"}, {"host_threads_per_rank", 0}}, 80, 0},
                        Case{{{"optimizer", "sgd_momentum"}}, 32, 1}}) {
    const Scenario sc = parse_scenario(scenario(4, 0, {{"version", 2}, {"strategy", "FULL_SHARD"}, {"cpu_offload", true}}, c.training),
                                       "test.json");
    const Plan p = plan_step(sc);
    const CostModel cost(sc);
    const Calibration& cal = cost.calibration();
    // The shipped figures make one or two threads slower than a rank's share of the node, so the
    // cases below tell the two bounds apart.
    ASSERT_LT(2 * cal.host_optimizer_bytes_per_second, cal.host_memory_bytes_per_second / 8);
    const double rate = c.threads == 0 ? cal.host_memory_bytes_per_second / 8 : c.threads * cal.host_optimizer_bytes_per_second;
    const Op& step = first_op(p.schedule, OpKind::optimizer);
    EXPECT_EQ(step.stream, Stream::host);
    EXPECT_EQ(step.hbm_bytes, c.bytes_per_element * 2048) << c.training.dump();
    EXPECT_DOUBLE_EQ(price_ops(p.schedule, cost).duration_seconds[step.id], c.bytes_per_element * 2048 / rate) << c.training.dump();
    // The threads travel with the schedule file.
    EXPECT_EQ(schedule_from_json(schedule_to_json(p.schedule), "back.json").host_threads_per_rank, c.threads);
  }
  // Many threads: the node's bandwidth bounds the rank, 64 threads are its eighth.
  const Scenario many = parse_scenario(scenario(4, 0, {{"version", 2}, {"strategy", "FULL_SHARD"}, {"cpu_offload", true}},
                                                {{"optimizer", "adamw"}, {"host_threads_per_rank", 64}}),
                                       "test.json");
  const CostModel cost(many);
  const Plan p = plan_step(many);
  const Op& step = first_op(p.schedule, OpKind::optimizer);
  EXPECT_DOUBLE_EQ(price_ops(p.schedule, cost).duration_seconds[step.id],
                   80.0 * 2048 / (cost.calibration().host_memory_bytes_per_second / 8));
}

// DeepSpeed's offload steps AdamW with DeepSpeedCPUAdam: one fused AVX pass (cpu_adam.h Step_AVX
// loads grad, exp_avg, exp_avg_sq and param and stores the last three: 28 B), plus the 16-bit
// partition the step writes (master_weights optimizer_state: 2 B), on every hardware thread by
// default (deepspeed's launcher leaves OMP_NUM_THREADS unset): the rank's eighth of the node.
TEST(HandWorkedCpuOptimizer, DeepSpeedCpuAdamIsOneFusedPassOnTheNodesShare) {
  for (const int threads : {-1, 1}) {
    nlohmann::json training = {{"optimizer", "adamw"}, {"master_weights", "optimizer_state"}};
    if (threads > 0) training["host_threads_per_rank"] = threads;
    const Scenario sc = parse_scenario(
        scenario(4, 0, {{"version", 2}, {"strategy", "FULL_SHARD"}, {"offload_optimizer", "cpu"}}, training), "test.json");
    const Plan p = plan_step(sc);
    const CostModel cost(sc);
    const Op& step = first_op(p.schedule, OpKind::optimizer);
    EXPECT_EQ(step.stream, Stream::host);
    EXPECT_EQ(step.hbm_bytes, 30.0 * 2048);
    const double rate = threads > 0 ? cost.calibration().host_optimizer_bytes_per_second
                                    : cost.calibration().host_memory_bytes_per_second / 8;
    EXPECT_DOUBLE_EQ(price_ops(p.schedule, cost).duration_seconds[step.id], 30.0 * 2048 / rate) << threads;
    EXPECT_EQ(p.schedule.host_threads_per_rank, threads > 0 ? threads : 0);
  }
}

// [Pinned host blocks] (planner/sharding.h) PyTorch's CachingHostAllocator pins in powers of two.
// Four blocks of two weights, [24, 64] and [40, 64], 4,096 elements, on 8 GPUs, fp32 shards:
// FSDP2 pins each parameter's shard: 3 rows x 64 x 4 B = 768 B -> 1,024 and 5 x 64 x 4 = 1,280 B
// -> 2,048: 3,072 B a block; FSDP1 the flat shard, 512 x 4 = 2,048 B, already a power of two.
// Parameters and gradients alike.
TEST(HandWorkedOffload, PinnedShardsTakePowerOfTwoBlocks) {
  nlohmann::json json = scenario(4, 0, {{"strategy", "FULL_SHARD"}, {"cpu_offload", true}});
  json["model"]["root"]["children"][0]["children"][0]["params"] = {{{"name", "w1"}, {"shape", {24, 64}}},
                                                                   {{"name", "w2"}, {"shape", {40, 64}}}};
  for (const int version : {1, 2}) {
    json["fsdp"]["version"] = version;
    const Plan p = plan(json);
    int params = 0, grads = 0;
    for (const Allocation& a : p.schedule.allocations) {
      if (a.placement != Placement::pinned_host) continue;
      EXPECT_EQ(a.bytes, version == 2 ? 3072 : 2048) << a.label;
      params += a.label.rfind("host sharded params", 0) == 0;
      grads += a.label.rfind("host sharded grads", 0) == 0;
    }
    EXPECT_EQ(params, 4) << version;
    EXPECT_EQ(grads, 4) << version;
  }
}

}  // namespace
}  // namespace fsdpsim::planner
