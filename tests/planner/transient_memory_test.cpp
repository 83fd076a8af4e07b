// Transient memory in the planned step (models' forward_transient_bytes and
// backward_transient_bytes) and gradient accumulation without communication, against hand
// arithmetic on synthetic models.
#include <gtest/gtest.h>

#include <algorithm>

#include "models/json_input.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "planner/internal/schedule_graph.h"
#include "synthetic.h"

namespace fsdpsim::planner {
namespace {

using testing::block_model;
using testing::cluster;

// 4 blocks of one [64, 1024] weight, 8 GPUs, micro-batch 2 x seq 16 = 32 tokens. Every
// block saves 100 bytes per token; its input is 8 bytes per token (synthetic.h).
nlohmann::json scenario(double forward_transient, double backward_transient) {
  nlohmann::json model = block_model(4, {64, 1024}, 100);
  nlohmann::json& costs = model["root"]["children"][0]["children"][0]["costs"];
  if (forward_transient > 0) costs["forward_transient_bytes"] = {{"b*s", forward_transient}};
  if (backward_transient > 0) costs["backward_transient_bytes"] = {{"b*s", backward_transient}};
  return {{"model", model},
          {"cluster", cluster(1, 8)},
          {"training", {{"micro_batch", 2}, {"seq_len", 16}, {"optimizer", "adamw"}}},
          {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}}}};
}

Plan plan_of(const nlohmann::json& j) {
  Scenario s = parse_scenario(j, "test.json");
  Plan plan = plan_step(s);
  validate_schedule(plan.schedule, "test.json");
  return plan;
}

// A forward op holds its transient on top of everything else (+ F x 32 bytes) and frees it
// at once; a backward op holds the backward transient in place of the planner's own
// input-gradient temporary (8 bytes per token): + (B - 8) x 32. Nothing else moves.
TEST(TransientMemory, EachComputeOpHoldsItsTransientByHand) {
  const double F = 1000, B = 5000, tokens = 32;
  Plan without = plan_of(scenario(0, 0));
  Plan with = plan_of(scenario(F, B));
  ASSERT_EQ(without.schedule.ops.size(), with.schedule.ops.size());
  MemoryReport a = replay_memory(without.schedule), b = replay_memory(with.schedule);
  int forward_ops = 0, backward_ops = 0;
  for (std::size_t i = 0; i < with.schedule.ops.size(); ++i) {
    const Op& op = with.schedule.ops[i];
    const double delta = static_cast<double>(b.allocated_at_op[i] - a.allocated_at_op[i]);
    SCOPED_TRACE(op.name);
    if (op.kind == OpKind::compute_fwd) {
      EXPECT_EQ(delta, F * tokens);
      ++forward_ops;
    } else if (op.kind == OpKind::compute_bwd) {
      EXPECT_EQ(delta, (B - 8) * tokens);
      ++backward_ops;
    } else {
      EXPECT_EQ(delta, 0);
    }
  }
  EXPECT_EQ(forward_ops, 4);
  EXPECT_EQ(backward_ops, 4);
  // The backward transient is the largest thing added: the peak is a backward op, higher by it.
  ASSERT_GE(b.peak_op, 0);
  EXPECT_EQ(with.schedule.ops[b.peak_op].kind, OpKind::compute_bwd);
  EXPECT_EQ(b.peak_allocated_bytes, a.allocated_at_op[b.peak_op] + static_cast<std::int64_t>((B - 8) * tokens));
}

// With transient_tensor_bytes L the transient T is allocated as ceil(T / L) tensors (L, ...,
// remainder), all freed at the op: the same allocated bytes, and a backward of 5000 bytes per
// token in tensors of at most 2000: 2000 + 2000 + 1000 per token.
TEST(TransientMemory, SplitIntoTensorsOfTheLargestTransientTensor) {
  nlohmann::json whole = scenario(1000, 5000), split = scenario(1000, 5000);
  split["model"]["root"]["children"][0]["children"][0]["costs"]["transient_tensor_bytes"] = {{"b*s", 2000}};
  Plan a = plan_of(whole), b = plan_of(split);
  MemoryReport ma = replay_memory(a.schedule), mb = replay_memory(b.schedule);
  EXPECT_EQ(ma.allocated_at_op, mb.allocated_at_op);
  for (const Op& op : b.schedule.ops) {
    if (op.kind != OpKind::compute_bwd) continue;
    std::vector<std::int64_t> sizes;
    for (int id : op.allocs)
      if (b.schedule.allocations[id].category == MemCategory::temporary) sizes.push_back(b.schedule.allocations[id].bytes);
    EXPECT_EQ(sizes, (std::vector<std::int64_t>{2000 * 32, 2000 * 32, 1000 * 32})) << op.name;
    for (int id : op.allocs) {
      if (b.schedule.allocations[id].category == MemCategory::temporary) {
        EXPECT_NE(std::find(op.frees.begin(), op.frees.end(), id), op.frees.end());
      }
    }
  }
}

// [Gradients after the loss] A module with backward_transient_after_grads_bytes (T_after = 1000
// per token; T_all = 5000) runs its backward as two ops: "bwd M (loss)" holds T_all (5000 x 32 =
// 160,000 bytes) and frees it, with the module's memory-bound bytes and no FLOPs; "bwd M" then
// holds its gradients (the [64, 1024] fp32 weight's 262,144 bytes in bf16: 131,072) beside
// T_after (1000 x 32 = 32,000 bytes), with the FLOPs (2 x 1e6 x 32 = 6.4e7) and no bytes.
TEST(TransientMemory, GradientsAfterTheLossMakeTwoBackwardOps) {
  nlohmann::json j = scenario(1000, 5000);
  nlohmann::json& costs = j["model"]["root"]["children"][0]["children"][0]["costs"];
  costs["backward_transient_after_grads_bytes"] = {{"b*s", 1000}};
  costs["forward_hbm_bytes"] = {{"b*s", 10}};
  j["training"]["param_dtype"] = "bf16";
  Plan p = plan_of(j);
  const MemoryReport m = replay_memory(p.schedule);
  int pairs = 0;
  for (std::size_t i = 0; i + 1 < p.schedule.ops.size(); ++i) {
    const Op& loss = p.schedule.ops[i];
    if (loss.kind != OpKind::compute_bwd || loss.name.find(" (loss)") == std::string::npos) continue;
    const Op& projection = p.schedule.ops[i + 1];
    SCOPED_TRACE(loss.name);
    EXPECT_EQ(projection.name + " (loss)", loss.name);
    EXPECT_EQ(loss.flops, 0);
    EXPECT_EQ(loss.hbm_bytes, 2 * 10 * 32.0);
    EXPECT_EQ(projection.flops, 2 * 1e6 * 32);
    EXPECT_EQ(projection.hbm_bytes, 0);
    std::int64_t temporary = 0, grads = 0;
    for (int id : loss.allocs) temporary += p.schedule.allocations[id].bytes;
    EXPECT_EQ(temporary, 160000);
    EXPECT_EQ(loss.frees.size(), loss.allocs.size());
    temporary = 0;
    for (int id : projection.allocs) {
      const Allocation& a = p.schedule.allocations[id];
      (a.category == MemCategory::unsharded_grad ? grads : temporary) += a.bytes;
    }
    EXPECT_EQ(grads, 131072);
    EXPECT_EQ(temporary, 32000);
    // Over what both find (the loss op frees only its transient): T_all at the loss op, G +
    // T_after at the projection's: 160,000 - (131,072 + 32,000) = -3,072 bytes apart.
    EXPECT_EQ(m.allocated_at_op[i] - m.allocated_at_op[i + 1], -3072);
    ++pairs;
  }
  EXPECT_EQ(pairs, 4);
}

// A transient N times its largest tensor is N allocations per op: a coefficient 1e12 times
// the tensor's made a planner that never returned. Up to 1024 tensors are planned; past that
// (here 2048) the model is refused, naming the module and the cost.
TEST(TransientMemory, RefusesMoreThan1024TensorsAliveAtOnce) {
  nlohmann::json ok = scenario(1000, 5000);
  ok["model"]["root"]["children"][0]["children"][0]["costs"]["transient_tensor_bytes"] = {{"b*s", 5}};
  Plan a = plan_of(ok);  // 5000 / 5 = 1000 tensors per backward op: planned
  for (const Op& op : a.schedule.ops) {
    if (op.kind != OpKind::compute_bwd) continue;
    const auto temporaries = std::count_if(op.allocs.begin(), op.allocs.end(), [&](int id) {
      return a.schedule.allocations[id].category == MemCategory::temporary;
    });
    EXPECT_EQ(temporaries, 1000) << op.name;
  }
  nlohmann::json huge = scenario(1000, 2048);
  huge["model"]["root"]["children"][0]["children"][0]["costs"]["transient_tensor_bytes"] = {{"b*s", 1}};
  try {
    plan_of(huge);
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.file(), "test.json");
    EXPECT_NE(what.find("costs.backward_transient_bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("transient_tensor_bytes"), std::string::npos) << what;
    EXPECT_NE(what.find("more than 1024 tensors"), std::string::npos) << what;
  }
}

// Under full checkpointing the recompute runs the forward again, transients included.
TEST(TransientMemory, RecomputeHoldsTheForwardTransient) {
  const double F = 1000, tokens = 32;
  nlohmann::json j0 = scenario(0, 0), j1 = scenario(F, 0);
  j0["training"]["activation_checkpointing"] = "full";
  j1["training"]["activation_checkpointing"] = "full";
  Plan without = plan_of(j0), with = plan_of(j1);
  MemoryReport a = replay_memory(without.schedule), b = replay_memory(with.schedule);
  int recomputes = 0;
  for (std::size_t i = 0; i < with.schedule.ops.size(); ++i) {
    if (with.schedule.ops[i].kind != OpKind::recompute) continue;
    EXPECT_EQ(static_cast<double>(b.allocated_at_op[i] - a.allocated_at_op[i]), F * tokens);
    ++recomputes;
  }
  EXPECT_EQ(recomputes, 4);
}

// grad_sync last_micro_step (FSDP2 set_requires_gradient_sync(False) on every micro-step
// but the last): one reduce-scatter per unit per step instead of one per micro-step, and
// each unit's unsharded gradient held in the reduce dtype (fp32: 64 x 1024 x 4 = 262,144
// bytes) from its first backward to the last micro-step's reduce-scatter copy-in.
TEST(GradSync, LastMicroStepReducesOnceAndHoldsFp32UnshardedGrads) {
  nlohmann::json j = scenario(0, 0);
  j["training"]["global_batch"] = 2 * 8 * 3;  // 3 micro-steps
  Plan every = plan_of(j);
  j["fsdp"]["grad_sync"] = "last_micro_step";
  Plan last = plan_of(j);
  auto count = [](const Plan& p, OpKind kind) {
    return std::count_if(p.schedule.ops.begin(), p.schedule.ops.end(), [&](const Op& o) { return o.kind == kind; });
  };
  EXPECT_EQ(count(every, OpKind::reduce_scatter), 4 * 3);
  EXPECT_EQ(count(last, OpKind::reduce_scatter), 4);
  int held = 0;
  for (const Allocation& a : last.schedule.allocations) {
    if (a.label.rfind("accumulated unsharded grads of ", 0) != 0) continue;
    EXPECT_EQ(a.bytes, 64 * 1024 * 4);
    EXPECT_EQ(a.category, MemCategory::unsharded_grad);
    ++held;
  }
  EXPECT_EQ(held, 4);
  // Held across micro-steps: more memory than reducing every micro-step.
  EXPECT_GT(replay_memory(last.schedule).peak_allocated_bytes, replay_memory(every.schedule).peak_allocated_bytes);
  // Without accumulation the option changes nothing.
  nlohmann::json one = scenario(0, 0);
  Plan a = plan_of(one);
  one["fsdp"]["grad_sync"] = "last_micro_step";
  Plan b = plan_of(one);
  EXPECT_EQ(a.schedule.ops.size(), b.schedule.ops.size());
  EXPECT_EQ(replay_memory(a.schedule).peak_allocated_bytes, replay_memory(b.schedule).peak_allocated_bytes);
}

// Op-level SAC: each block keeps sac_saved_activation_bytes (60 per token here); compiled, it
// drops sac_unread_bytes (16 per token) of them: 4 blocks x 16 x 32 tokens fewer bytes alive
// once the forward is done.
TEST(CompiledSelectiveCheckpointing, DropsTheUnreadSavedOutputs) {
  nlohmann::json j = scenario(0, 0);
  nlohmann::json& costs = j["model"]["root"]["children"][0]["children"][0]["costs"];
  costs["sac_saved_activation_bytes"] = {{"b*s", 60}};
  costs["sac_recompute_flops"] = {{"b*s", 1e5}};
  costs["sac_unread_bytes"] = {{"b*s", 16}};
  j["model"]["root"]["children"][0]["children"][0]["type"] = "Block";
  j["training"]["activation_checkpointing"] = "selective";
  j["training"]["torch_compile"] = false;
  Plan eager = plan_of(j);
  j["training"]["torch_compile"] = true;
  Plan compiled = plan_of(j);
  MemoryReport a = replay_memory(eager.schedule), b = replay_memory(compiled.schedule);
  ASSERT_EQ(eager.schedule.ops.size(), compiled.schedule.ops.size());
  int last_forward = -1;
  for (std::size_t i = 0; i < eager.schedule.ops.size(); ++i)
    if (eager.schedule.ops[i].kind == OpKind::compute_fwd) last_forward = static_cast<int>(i);
  ASSERT_GE(last_forward, 0);
  EXPECT_EQ(a.allocated_at_op[last_forward] - b.allocated_at_op[last_forward], 4 * 16 * 32);
}

TEST(GradSync, BadValueNamesThePath) {
  nlohmann::json j = scenario(0, 0);
  j["fsdp"]["grad_sync"] = "sometimes";
  try {
    parse_scenario(j, "test.json");
    FAIL() << "expected an InputError";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("fsdp.grad_sync"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fsdpsim::planner
