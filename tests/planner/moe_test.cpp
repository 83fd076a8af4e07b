// Mixture-of-Experts in the planner: expert routing with imbalance, grouped GEMMs, expert
// parallelism's sharding, groups and all-to-alls, each against hand arithmetic.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "models/json_input.h"
#include "planner/ep_dispatch.h"
#include "planner/gemm_model.h"
#include "planner/memory.h"
#include "planner/moe.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "planner/schedule.h"
#include "planner/sharding.h"
#include "synthetic.h"

namespace fsdpsim::planner {
namespace {

using testing::cluster;
using testing::moe_scenario;
using testing::kCublasWorkspacesHopper;

// E = 8 experts, top 2, 1000 tokens per rank, EP 4, the busiest expert twice the mean:
// each expert's mean = 1000 x 2 x 4 / 8 = 1000 copies (from the 4 ranks of its group); the
// busiest 2000; the other 7 share the rest, (8 - 2)/7 x 1000 = 857.142857 each
// (8 x 1000 = 2000 + 7 x 857.14). The busiest rank holds the busiest expert and
// one other: (2000 + 857.142857) / (2 x 1000) = 1.4285714.
TEST(ExpertRouting, ImbalanceLoadsTheBusiestRank) {
  const models::MoeSpec moe{8, 2, 4096};
  const ExpertRouting r = expert_routing(moe, 1000, 4, 2.0);
  EXPECT_EQ(r.local_experts, 2);
  EXPECT_DOUBLE_EQ(r.mean_tokens_per_expert, 1000);
  EXPECT_DOUBLE_EQ(r.busiest_expert_tokens, 2000);
  EXPECT_NEAR(r.other_expert_tokens, 6000.0 / 7, 1e-9);
  EXPECT_NEAR(r.rank_load_factor, (2000 + 6000.0 / 7) / 2000, 1e-12);
  // Without expert parallelism one rank holds every expert: the imbalance moves tokens between
  // its experts but not the rank's total (8 x 250 = 2000 = 1000 tokens x top 2).
  const ExpertRouting all = expert_routing(moe, 1000, 1, 2.0);
  EXPECT_EQ(all.local_experts, 8);
  EXPECT_DOUBLE_EQ(all.mean_tokens_per_expert, 250);
  EXPECT_NEAR(all.rank_load_factor, 1.0, 1e-12);
}

GemmDevice h100() {
  GemmDevice d;
  d.sm_count = 132;
  d.peak_flops = 989.4e12;
  d.hbm_bytes_per_second = 3.35e12;
  d.hbm_efficiency = 0.9;
  d.large_gemm_efficiency = 0.7;
  return d;
}

// A grouped GEMM of one group is the shape model's GEMM when the latter does not split K (4096^3:
// 512 output tiles of 128 x 128 fill the 132 SMs, no split). Eight experts of 512 rows tile
// exactly as one GEMM of 4096 rows (every tile height divides 512): same CTAs, same waves, same
// operand bytes but the weights (8 x n x k instead of n x k), so at most the weights' extra
// traffic slower. With 8 rows per expert the tiles are mostly empty: far below.
TEST(GroupedGemm, ComesFromTheShapeModel) {
  const GemmDevice d = h100();
  const GemmShape square{4096, 4096, 4096};
  EXPECT_DOUBLE_EQ(estimate_grouped_gemm({{square}, {1}}, d).seconds, estimate_gemm(square, d).seconds);
  const GemmShape one_expert{512, 4096, 4096};
  const double grouped = estimate_grouped_gemm({{one_expert}, {8}}, d).seconds;
  EXPECT_GE(grouped, estimate_gemm(square, d).seconds * (1 - 1e-12));
  EXPECT_LT(grouped, estimate_gemm(square, d).seconds * 1.2);
  const GroupedGemmShape few{{{8, 4096, 4096}}, {8}};
  const double few_efficiency = few.flops() / estimate_grouped_gemm(few, d).seconds / d.peak_flops;
  EXPECT_LT(few_efficiency, 0.1) << "8 tokens per expert use 8 rows of each 64-row tile at most";
}

std::int64_t persistent_param_bytes(const Schedule& s) {
  std::int64_t bytes = 0;
  for (const Allocation& a : s.allocations)
    if (a.persistent && a.category == MemCategory::sharded_param) bytes += a.bytes;
  return bytes;
}

// Sharded parameters by hand, 4 ranks. Without EP each block's unit holds w (8 rows / 4 = 2
// rows x 16 = 32 elements) and the experts (4 experts / 4 = 1 x 256 = 256): 288 x 4 bytes x 2
// blocks = 2304 bytes. With EP 2 the experts are a unit of their own: 2 local experts per
// rank, sharded over the 2 ranks holding the same experts (efsdp = 4 / 2); efsdp x ep = 4 is
// not above 4 experts, so on dim 0: 1 expert x 256 = 256 elements, and w still 32: the same
// 2304 bytes, but the experts' all-gather runs over 2 ranks (512 elements gathered, not 1024).
TEST(ExpertParallel, ShardsTheExpertsOverTheExpertDataParallelGroup) {
  const Plan dense = plan_step(parse_scenario(moe_scenario(), "test.json"));
  const Plan ep = plan_step(parse_scenario(moe_scenario(), "test.json", {"fsdp.expert_parallel=2"}));
  EXPECT_EQ(persistent_param_bytes(dense.schedule), 2 * (32 + 256) * 4);
  EXPECT_EQ(persistent_param_bytes(ep.schedule), 2 * (32 + 256) * 4);
  EXPECT_EQ(dense.units.size(), 3u);  // root, 2 blocks
  EXPECT_EQ(ep.units.size(), 5u);     // root, 2 blocks, 2 experts modules
  int expert_gathers = 0;
  for (const Op& op : ep.schedule.ops) {
    if (op.kind != OpKind::all_gather) continue;
    const ProcessGroup& g = ep.schedule.groups.at(op.group);
    if (g.name != "expert_shard") continue;
    ++expert_gathers;
    EXPECT_EQ(g.ranks, 2);
    EXPECT_EQ(g.stride, 2);  // the ranks holding the same experts are ep = 2 apart
    EXPECT_EQ(op.comm_bytes, 512 * 4);
  }
  EXPECT_EQ(expert_gathers, 4);  // each experts unit in forward and in backward
}

// The split sizes' all-to-all that precedes each forward dispatch (planner/ep_dispatch.h).
bool is_split_exchange(const Op& op) { return op.name.rfind("all-to-all split sizes ", 0) == 0; }

// Dispatch and combine per MoE block in forward, their reverse in backward, on the EP group:
// one rank's send buffer is its 10 tokens x top 2 copies x 16 features x 4 bytes = 1280 bytes;
// the busiest expert at 2x the mean loads the busiest rank (2 local experts of 4) by
// (2 + (4 - 2)/3) / 2 = 4/3.
TEST(ExpertParallel, AllToAllsCarryTheDispatchedCopies) {
  const Plan ep = plan_step(parse_scenario(moe_scenario(), "test.json", {"fsdp.expert_parallel=2"}));
  int all_to_alls = 0, split_exchanges = 0;
  for (const Op& op : ep.schedule.ops) {
    if (op.kind != OpKind::all_to_all) continue;
    EXPECT_EQ(ep.schedule.groups.at(op.group).name, "expert");
    EXPECT_EQ(ep.schedule.groups.at(op.group).ranks, 2);
    if (is_split_exchange(op)) {
      ++split_exchanges;  // ExpertParallel.TorchtitansDefaultDispatchByHand
      continue;
    }
    ++all_to_alls;
    EXPECT_DOUBLE_EQ(op.comm_bytes, 1280);
  }
  EXPECT_EQ(all_to_alls, 2 * 2 * 2);  // 2 blocks x (forward, backward) x (dispatch, combine)
  EXPECT_EQ(split_exchanges, 2);      // before each forward dispatch
  const Plan skewed =
      plan_step(parse_scenario(moe_scenario(), "test.json", {"fsdp.expert_parallel=2", "training.moe_imbalance=2"}));
  for (const Op& op : skewed.schedule.ops) {
    if (op.kind == OpKind::all_to_all && !is_split_exchange(op)) {
      EXPECT_NEAR(op.comm_bytes, 1280 * 4.0 / 3, 1e-9);
    }
  }
  const Plan dense = plan_step(parse_scenario(moe_scenario(), "test.json"));
  for (const Op& op : dense.schedule.ops) EXPECT_NE(op.kind, OpKind::all_to_all);
}

// [EP explicit prefetch] torchtitan sets each block's prefetch lists under expert parallelism:
// forward [next block, its experts], backward [previous block, its experts]. So layers.1's and
// layers.1.experts' all-gathers are issued at layers.0's pre-forward, before layers.0's forward
// and its dispatch's device-to-host sync; and layers.0.experts' at layers.1's pre-backward,
// before layers.1's backward and its reduce-scatter (without it, on the same communicator, the
// all-gather queued behind the reduce-scatter). Without EP, FSDP2's defaults: no forward
// prefetch, and backward prefetch of the next unit only.
TEST(ExpertParallel, TorchtitansExplicitPrefetchUnderEp) {
  const Plan ep = plan_step(parse_scenario(moe_scenario(), "test.json", {"fsdp.expert_parallel=2"}));
  auto first = [&](OpKind kind, const std::string& name, Phase phase) {
    for (const Op& op : ep.schedule.ops)
      if (op.kind == kind && op.name == name && op.phase == phase) return op.id;
    ADD_FAILURE() << name;
    return -1;
  };
  const int fwd0 = first(OpKind::compute_fwd, "fwd layers.0", Phase::forward);
  EXPECT_LT(first(OpKind::all_gather, "all-gather layers.1", Phase::forward), fwd0);
  EXPECT_LT(first(OpKind::all_gather, "all-gather layers.1.experts", Phase::forward), fwd0);
  const int bwd1 = first(OpKind::compute_bwd, "bwd layers.1", Phase::backward);
  EXPECT_LT(first(OpKind::all_gather, "all-gather layers.0", Phase::backward), bwd1);
  EXPECT_LT(first(OpKind::all_gather, "all-gather layers.0.experts", Phase::backward), bwd1);
  // The same model without EP (one unit a block): the next block's all-gather follows this
  // block's forward (implicit prefetch: issued at its own pre-forward).
  const Plan dense = plan_step(parse_scenario(moe_scenario(), "test.json"));
  int dense_fwd0 = -1, dense_ag1 = -1;
  for (const Op& op : dense.schedule.ops) {
    if (op.name == "fwd layers.0") dense_fwd0 = op.id;
    if (op.name == "all-gather layers.1" && op.phase == Phase::forward) dense_ag1 = op.id;
  }
  EXPECT_GT(dense_ag1, dense_fwd0);
}

// The whole step's peak by hand, 4 ranks, FSDP2 FULL_SHARD, fp32 (no casts), no optimizer
// state, 10 tokens per rank (micro_batch 1 x seq_len 10). Per block: w [8, 16] = 128 elements,
// the experts [4, 16, 16] = 1024 elements; saved activations 64 B/token x 10 x (4/2 for fp32)
// = 1280 B, the input gradient 32 x 10 x 2 = 640 B, the token ids 8 x 10 = 80 B.
//
// Without EP a block's unit holds w and all 4 experts: sharded 1152 elements / 4 = 288 x 4 B =
// 1152 B per block, persistent 2304 B; unsharded 1152 x 4 = 4608 B. The peak is layers.1's
// backward (the first backward op): persistent 2304 + token ids 80 + both blocks' activations
// 2560 + layers.1's unsharded params 4608 + layers.0's prefetched all-gather output 4608 +
// layers.1's gradients 4608 + its input gradient 640 = 19408 B, and PyTorch's two cuBLAS
// workspaces (kCublasWorkspacesHopper, 64 MiB) in both cases.
//
// With EP 2 each experts module is a unit of its own holding 2 of the 4 experts (persistent the
// same 2304 B: w's 32 + the experts' 256 elements per block). Forward is highest at layers.0's
// combine all-to-all, since layers.0's pre-forward prefetched layers.1 and its experts ([EP
// explicit prefetch], planner/plan_fsdp2.cpp): persistent 2304 + token ids 80 + layers.0's
// activations 1280 + its unsharded w 512 and experts (2 x 256 x 4 B) 2048 + the experts'
// all-gather output 2048 (FSDP2 keeps the last all-gather output until the next one's copy-out)
// + layers.1's all-gather outputs, w 512 and experts 2048 + the dispatch's and the combine's
// receive buffers, 10 tokens x top 2 x 16 x 4 B = 1280 B each (planner/collectives.h: the
// all-to-all allocates its receive buffer) = 13392 B. (Before the explicit prefetch, 12112 B at
// layers.1's combine.) The step peaks in backward, at layers.1's dispatch all-to-all: layers.1's pre-backward
// prefetched layers.0 and its experts ([EP explicit prefetch], planner/plan_fsdp2.cpp), so
// persistent 2304 + token ids 80 + layers.0's activations 1280 + layers.1's unsharded w 512
// and experts 2048 + layers.0's all-gather outputs, w 512 and experts 2048 + layers.1's
// gradients, w 512 and its 2 experts 2048 + the combine-backward's and the dispatch-backward's
// receive buffers 2 x 1280 (the first is freed at the op that allocates the second) = 13904 B.
TEST(ExpertParallel, WholeStepPeakByHand) {
  const MemoryReport dense = replay_memory(plan_step(parse_scenario(moe_scenario(), "test.json")).schedule);
  EXPECT_EQ(dense.peak_allocated_bytes, 2304 + 80 + 2560 + 4608 + 4608 + 4608 + 640 + kCublasWorkspacesHopper);
  const Plan ep = plan_step(parse_scenario(moe_scenario(), "test.json", {"fsdp.expert_parallel=2"}));
  validate_schedule(ep.schedule, "test.json");
  const MemoryReport m = replay_memory(ep.schedule);
  EXPECT_EQ(m.peak_allocated_bytes,
            2304 + 80 + 1280 + 512 + 2048 + 512 + 2048 + 512 + 2048 + 2 * 1280 + kCublasWorkspacesHopper);
  EXPECT_EQ(ep.schedule.ops.at(m.peak_op).name, "all-to-all dispatch backward layers.1");
  // The forward's highest point, the combine of layers.0, as worked above.
  std::int64_t forward_highest = 0;
  for (std::size_t i = 0; i < ep.schedule.ops.size(); ++i)
    if (ep.schedule.ops[i].phase == Phase::forward) forward_highest = std::max(forward_highest, m.allocated_at_op[i]);
  EXPECT_EQ(forward_highest, 2304 + 80 + 1280 + 512 + 2048 + 2048 + 512 + 2048 + 2 * 1280 + kCublasWorkspacesHopper);
  // Every all-to-all allocates its 1280-byte receive buffer (the split sizes' exchange its
  // 4 experts x 8 bytes, freed by the permutation before the combine).
  for (const Op& op : ep.schedule.ops) {
    if (op.kind != OpKind::all_to_all) continue;
    ASSERT_EQ(op.allocs.size(), 1u) << op.name;
    EXPECT_EQ(ep.schedule.allocations.at(op.allocs[0]).bytes, is_split_exchange(op) ? 32 : 1280) << op.name;
  }
  std::int64_t largest_grad = 0;
  for (const Allocation& a : ep.schedule.allocations)
    if (a.category == MemCategory::unsharded_grad) largest_grad = std::max(largest_grad, a.bytes);
  EXPECT_EQ(largest_grad, 2 * 256 * 4) << "a rank's expert gradients cover its 2 local experts";
}

// HYBRID_SHARD with expert parallelism, torchtitan's HSDP + EP layout, on 2 nodes of 4 GPUs (the
// 2-block model above, fp32). The shard group is a node (ranks 0-3); EP 2 splits the 4 experts
// over consecutive pairs {0,1} and {2,3}, so ranks 0 and 2 hold experts 0-1 and shard them over
// the 2 of them (expert_shard: 2 ranks, stride 2); the replicas of every shard are the same
// ranks of the other node (replicate: ranks r and r + 4). Per block, by hand:
//   w [8, 16]: 128 elements = 512 bytes gathered and reduce-scattered over the node's 4 ranks, the
//     rank's 32-element shard (128 bytes) all-reduced with its replica;
//   experts: 2 local experts x 256 = 512 elements = 2048 bytes gathered and reduce-scattered over
//     expert_shard, the rank's 1-expert shard (1024 bytes) all-reduced over the same replicate
//     group as w (torchtitan's dp_replicate mesh dimension is shared);
//   dispatch and combine: 10 tokens x top 2 x 16 features x 4 bytes = 1280 bytes on the EP pair,
//     inside the node; the split sizes 4 experts x 8 bytes = 32.
// Sharded parameters: (32 + 256) elements x 4 bytes x 2 blocks = 2304 bytes, as on one node.
TEST(ExpertParallel, HybridShardGroupsByHand) {
  nlohmann::json j = moe_scenario();
  j["cluster"] = cluster(2, 4);
  j["fsdp"]["strategy"] = "HYBRID_SHARD";
  const Plan p = plan_step(parse_scenario(j, "test.json", {"fsdp.expert_parallel=2"}));
  validate_schedule(p.schedule, "test.json");
  EXPECT_EQ(persistent_param_bytes(p.schedule), 2 * (32 + 256) * 4);
  auto group = [&](const Op& op) -> const ProcessGroup& { return p.schedule.groups.at(op.group); };
  std::map<std::string, int> count;
  for (const Op& op : p.schedule.ops) {
    if (!is_collective(op.kind) && op.kind != OpKind::all_to_all) continue;
    const ProcessGroup& g = group(op);
    const bool experts = op.name.find(".experts") != std::string::npos;
    const std::string what = to_string(op.kind) + std::string(experts ? " experts" : "") + " on " + g.name;
    ++count[what];
    if (op.kind == OpKind::all_to_all) {
      EXPECT_EQ(g.name, "expert");
      EXPECT_EQ(g.ranks, 2);
      EXPECT_EQ(g.nodes, 1);
      EXPECT_DOUBLE_EQ(op.comm_bytes, is_split_exchange(op) ? 32 : 1280) << op.name;
    } else if (op.kind == OpKind::all_reduce) {
      EXPECT_EQ(g.name, "replicate") << op.name;
      EXPECT_EQ(g.ranks, 2);
      EXPECT_EQ(g.nodes, 2);
      EXPECT_EQ(g.stride, 4);
      EXPECT_DOUBLE_EQ(op.comm_bytes, experts ? 1024 : 128) << op.name;
      // The replicas reduce the shard the reduce-scatter just made.
      ASSERT_EQ(op.deps.size(), 1u) << op.name;
      EXPECT_EQ(p.schedule.ops.at(op.deps[0]).kind, OpKind::reduce_scatter) << op.name;
      EXPECT_EQ(p.schedule.ops.at(op.deps[0]).module, op.module) << op.name;
    } else if (experts) {
      EXPECT_EQ(g.name, "expert_shard") << op.name;
      EXPECT_EQ(g.ranks, 2);
      EXPECT_EQ(g.stride, 2);
      EXPECT_EQ(g.nodes, 1);
      EXPECT_DOUBLE_EQ(op.comm_bytes, 2048) << op.name;
    } else {
      EXPECT_EQ(g.name, "shard") << op.name;
      EXPECT_EQ(g.ranks, 4);
      EXPECT_EQ(g.nodes, 1);
      EXPECT_DOUBLE_EQ(op.comm_bytes, 512) << op.name;
    }
  }
  // 2 blocks: gathered in forward and again in backward (resharded after forward), reduced once.
  EXPECT_EQ(count["all_gather on shard"], 4);
  EXPECT_EQ(count["all_gather experts on expert_shard"], 4);
  EXPECT_EQ(count["reduce_scatter on shard"], 2);
  EXPECT_EQ(count["reduce_scatter experts on expert_shard"], 2);
  EXPECT_EQ(count["all_reduce on replicate"], 2);
  EXPECT_EQ(count["all_reduce experts on replicate"], 2);
  EXPECT_EQ(count["all_to_all on expert"], 2 * (1 + 2 + 2));  // split sizes, dispatch, combine; both ways
  EXPECT_EQ(count.size(), 7u);
}

// DeepSeek-V2-Lite (scenarios/deepseek-v2-lite-8xh100-fsdp2{,-ep8}.json; MLA, layer 0 dense, 26 MoE
// layers of 64 experts, top 6), micro-batch 2 x 4096 tokens, 2 micro-steps, full checkpointing.
// With EP 8 each MoE layer runs dispatch and combine in forward, again in the recompute, and
// their reverse in backward: 6 all-to-alls per MoE layer per micro-step, 26 x 6 x 2 = 312, the
// dense layer none. A rank's dispatch sends its 8192 tokens x top 6 copies x h 2048 x 2 bytes =
// 201,326,592 bytes. The sharded parameters are the model's 15,706,484,224 fp32 elements over 8
// ranks either way (EP 8 x an expert shard group of 1), 7,853,242,112 bytes, plus FSDP2's
// dim-0 padding (under 0.01% here).
TEST(ExpertParallel, DeepSeekV2LiteScenariosByHand) {
  const std::string root = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/";
  const Plan fsdp = plan_step(load_scenario(root + "deepseek-v2-lite-8xh100-fsdp2.json"));
  const Plan ep = plan_step(load_scenario(root + "deepseek-v2-lite-8xh100-fsdp2-ep8.json"));
  int all_to_alls = 0, split_exchanges = 0;
  for (const Op& op : ep.schedule.ops) {
    if (op.kind != OpKind::all_to_all) continue;
    if (is_split_exchange(op)) {
      ++split_exchanges;
      continue;
    }
    ++all_to_alls;
    const std::string dense_layer = "model.layers.0";
    EXPECT_FALSE(op.name.size() >= dense_layer.size() &&
                 op.name.compare(op.name.size() - dense_layer.size(), dense_layer.size(), dense_layer) == 0)
        << op.name;
    EXPECT_DOUBLE_EQ(op.comm_bytes, 8192.0 * 6 * 2048 * 2) << op.name;
  }
  EXPECT_EQ(all_to_alls, 26 * 6 * 2);
  EXPECT_EQ(split_exchanges, 26 * 2 * 2);  // before the forward's and the recompute's dispatch
  for (const Op& op : fsdp.schedule.ops) EXPECT_NE(op.kind, OpKind::all_to_all);
  for (const Plan* plan : {&fsdp, &ep}) {
    const MemoryReport m = replay_memory(plan->schedule);
    const double sharded = static_cast<double>(m.breakdown_at_peak[static_cast<int>(MemCategory::sharded_param)]);
    EXPECT_GE(sharded, 15'706'484'224.0 * 4 / 8);
    EXPECT_LT(sharded, 15'706'484'224.0 * 4 / 8 * 1.0001);
    EXPECT_LT(m.peak_allocated_bytes, 80LL << 30);  // fits an 80 GB H100
  }
}

// gpt-oss-20b and Llama-4 Scout plan with expert parallelism 8 (scenarios/gpt-oss-20b-8xh100-fsdp2-ep8.json,
// scenarios/llama4-scout-64xh100-fsdp2-ep8.json), one micro-step each, full checkpointing: 6
// all-to-alls per MoE layer (dispatch and combine in forward, recompute and backward).
//   gpt-oss-20b: 24 MoE layers -> 144; a dispatch sends micro-batch 4 x 4096 tokens x top 4 x
//     h 2880 x 2 bytes = 377,487,360 bytes; the sharded parameters are 20,914,757,184 fp32
//     elements over 8 ranks (EP 8 x an expert shard group of 1).
//   Scout: 48 MoE layers -> 288; 8192 tokens x top 1 x h 5120 x 2 = 83,886,080 bytes; its
//     107,769,861,120 elements over 64 ranks (the 16 experts over EP 8, each pair of experts over
//     an expert shard group of 8; everything else over 64), plus FSDP2's dim-0 padding of the
//     routers: 16 rows over 64 ranks pad to 64 rows, 48 x 48 x 5120 fp32 elements / 64 = 737,280
//     bytes per rank. gpt-oss's dims all divide 8: no padding.
TEST(ExpertParallel, GptOssAndLlama4ScenariosByHand) {
  const std::string root = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/";
  struct Case {
    const char* scenario;
    int all_to_alls;
    double dispatch_bytes;
    double parameters;
    int ranks;
    double padding_bytes;
  };
  for (const Case& c : {Case{"gpt-oss-20b-8xh100-fsdp2-ep8.json", 24 * 6, 16384.0 * 4 * 2880 * 2, 20'914'757'184.0, 8, 0},
                        Case{"llama4-scout-64xh100-fsdp2-ep8.json", 48 * 6, 8192.0 * 1 * 5120 * 2, 107'769'861'120.0, 64,
                             48.0 * 48 * 5120 * 4 / 64}}) {
    SCOPED_TRACE(c.scenario);
    const Plan plan = plan_step(load_scenario(root + c.scenario));
    int all_to_alls = 0;
    for (const Op& op : plan.schedule.ops) {
      if (op.kind != OpKind::all_to_all || is_split_exchange(op)) continue;
      ++all_to_alls;
      EXPECT_DOUBLE_EQ(op.comm_bytes, c.dispatch_bytes) << op.name;
    }
    EXPECT_EQ(all_to_alls, c.all_to_alls);
    const MemoryReport m = replay_memory(plan.schedule);
    const double sharded = static_cast<double>(m.breakdown_at_peak[static_cast<int>(MemCategory::sharded_param)]);
    EXPECT_DOUBLE_EQ(sharded, c.parameters * 4 / c.ranks + c.padding_bytes);
    EXPECT_LT(m.peak_allocated_bytes, 80LL << 30);  // fits an 80 GB H100
  }
}

// torchtitan's default dispatch besides the all-to-alls (planner/ep_dispatch.h), by hand on the
// test model with EP 2 (fp32: 4-byte rows of h = 16, so 64 bytes a row; 10 tokens x top 2 = R =
// 20 rows received per block; 2 local experts):
//   R_p = round_up(20 + 2 x 8, 8) = 40 (permuted_indices' length);
//   forward permutation 2R + 3 + 4R_p = 203 rows = 12,992 bytes;
//   backward 4R + 2 + 5R_p = 282 rows = 18,048 bytes;
//   split sizes: 4 experts x 8 bytes = 32 sent per rank; 2 x EP 2 x 8 = 32 bytes to the host.
// Forward per block: split sizes all-to-all, the host copy (the CPU waits for it before it
// issues the dispatch), dispatch, permutation (waits for the dispatch; the combine waits for
// it), combine, wait. Backward: combine backward, permutation backward, dispatch backward, wait.
TEST(ExpertParallel, TorchtitansDefaultDispatchByHand) {
  const TokenPermutation p = ep_token_permutation(20, 16, 2, 4);
  EXPECT_EQ(p.rows, 20);
  EXPECT_EQ(p.padded_rows, 40);
  EXPECT_EQ(p.forward_hbm_bytes, 12'992);
  EXPECT_EQ(p.backward_hbm_bytes, 18'048);
  EXPECT_EQ(ep_token_permutation(20, 16, 1, 4).padded_rows, 32);   // 20 + 8 = 28 -> 32
  EXPECT_EQ(ep_token_permutation(19.5, 16, 1, 2).rows, 20);        // an imbalanced share rounds up
  EXPECT_EQ(ep_token_permutation(20, 16, 2, 2).forward_hbm_bytes, 203.0 * 32);  // bf16 rows
  EXPECT_EQ(split_sizes_send_bytes(4), 32);
  EXPECT_EQ(split_sizes_host_bytes(2), 32);

  const Plan ep = plan_step(parse_scenario(moe_scenario(), "test.json", {"fsdp.expert_parallel=2"}));
  const auto& ops = ep.schedule.ops;
  auto find = [&](const std::string& name) {
    for (const Op& op : ops)
      if (op.name == name) return op.id;
    ADD_FAILURE() << "no op " << name;
    return 0;
  };
  for (const char* block : {"layers.0", "layers.1"}) {
    SCOPED_TRACE(block);
    const std::string b = block;
    const Op& splits = ops[find("all-to-all split sizes " + b)];
    const Op& host = ops[find("split sizes to the host " + b)];
    const Op& dispatch = ops[find("all-to-all dispatch " + b)];
    const Op& permute = ops[find("token permutation " + b)];
    const Op& combine = ops[find("all-to-all combine " + b)];
    EXPECT_EQ(splits.kind, OpKind::all_to_all);
    EXPECT_DOUBLE_EQ(splits.comm_bytes, 32);
    EXPECT_EQ(host.kind, OpKind::d2h);
    EXPECT_EQ(host.stream, Stream::compute);
    EXPECT_DOUBLE_EQ(host.comm_bytes, 32);
    EXPECT_EQ(host.deps, IdList{splits.id});
    EXPECT_EQ(dispatch.cpu_waits, IdList{host.id});  // the device-to-host sync
    EXPECT_EQ(dispatch.deps, IdList{host.id});
    EXPECT_EQ(permute.stream, Stream::compute);
    EXPECT_DOUBLE_EQ(permute.hbm_bytes, 12'992);
    EXPECT_EQ(permute.deps, IdList{dispatch.id});
    EXPECT_EQ(combine.deps, IdList{permute.id});
    EXPECT_TRUE(combine.cpu_waits.empty());
    EXPECT_LT(splits.id, host.id);
    EXPECT_LT(host.id, dispatch.id);
    EXPECT_LT(dispatch.id, permute.id);
    EXPECT_LT(permute.id, combine.id);
    const Op& back = ops[find("token permutation backward " + b)];
    EXPECT_DOUBLE_EQ(back.hbm_bytes, 18'048);
    EXPECT_EQ(back.deps, IdList{find("all-to-all combine backward " + b)});
    EXPECT_EQ(ops[find("all-to-all dispatch backward " + b)].deps, IdList{back.id});
    EXPECT_TRUE(ops[find("all-to-all combine backward " + b)].cpu_waits.empty());  // the saved split lists
  }
  // Without expert parallelism none of it.
  const Plan dense = plan_step(parse_scenario(moe_scenario(), "test.json"));
  for (const Op& op : dense.schedule.ops) {
    EXPECT_NE(op.kind, OpKind::d2h) << op.name;
    EXPECT_EQ(op.name.find("token permutation"), std::string::npos) << op.name;
  }
}

// MoE without expert parallelism under FSDP1 (FlatParameter, use_orig_params=False): a block's
// unit flattens w and all 4 experts into one flat parameter, so each all-gather carries every
// expert. On 5 ranks (so that the padding shows), fp32: N = 8 x 16 + 4 x 16 x 16 = 128 + 1024 =
// 1152 elements, padded to 1155 (the next multiple of 5), shard s = 231 elements = 924 B per rank
// and block (persistent 2 x 924 = 1848 B); the all-gather writes the padded flat parameter,
// 1155 x 4 B = 4620 B, and takes a 924-byte shard-sized input buffer; the reduce-scatter reduces
// the padded 1155-element flat gradient (4620 B, fp32). Each block is gathered in forward and
// again in backward (FULL_SHARD frees a non-root unit after forward): 4 all-gathers. FSDP2 pads
// per parameter on dim 0 instead: w ceil(8/5) = 2 rows x 16 = 32, the experts ceil(4/5) = 1 x
// 256 = 256; s_g = 288, gathered 5 x 288 = 1440 elements = 5760 B.
TEST(MoeWithoutExpertParallel, Fsdp1FlatParameterCarriesEveryExpert) {
  nlohmann::json five = moe_scenario();
  five["cluster"] = cluster(1, 5);
  const Plan fsdp1 = plan_step(parse_scenario(five, "test.json", {"fsdp.version=1"}));
  validate_schedule(fsdp1.schedule, "test.json");
  EXPECT_EQ(fsdp1.units.size(), 3u);  // root, 2 blocks: the experts are in their block's flat parameter
  int blocks = 0;
  for (std::size_t u = 0; u < fsdp1.units.size(); ++u) {
    if (fsdp1.shards[u].numel == 0) continue;  // the root holds no parameters
    ++blocks;
    EXPECT_EQ(fsdp1.shards[u].numel, 1152);
    EXPECT_EQ(fsdp1.shards[u].local_numel, 231);
    EXPECT_EQ(fsdp1.shards[u].gathered_numel, 1155);
  }
  EXPECT_EQ(blocks, 2);
  EXPECT_EQ(persistent_param_bytes(fsdp1.schedule), 2 * 924);
  int gathers = 0, reductions = 0;
  for (const Op& op : fsdp1.schedule.ops) {
    EXPECT_NE(op.kind, OpKind::all_to_all);
    if (op.kind == OpKind::all_gather) {
      ++gathers;
      EXPECT_DOUBLE_EQ(op.comm_bytes, 4620) << op.name;
      EXPECT_EQ(fsdp1.schedule.groups.at(op.group).ranks, 5) << op.name;
    }
    if (op.kind == OpKind::reduce_scatter) {
      ++reductions;
      EXPECT_DOUBLE_EQ(op.comm_bytes, 4620) << op.name;
    }
  }
  EXPECT_EQ(gathers, 4);
  EXPECT_EQ(reductions, 2);
  int flat_params = 0, inputs = 0;
  for (const Allocation& a : fsdp1.schedule.allocations) {
    if (a.label.rfind("unsharded flat param of ", 0) == 0) {
      ++flat_params;
      EXPECT_EQ(a.bytes, 4620) << a.label;
    }
    if (a.label.rfind("all-gather input of ", 0) == 0) {
      ++inputs;
      EXPECT_EQ(a.bytes, 924) << a.label;
    }
  }
  EXPECT_EQ(flat_params, 4);
  EXPECT_EQ(inputs, 4);
  const Plan fsdp2 = plan_step(parse_scenario(five, "test.json"));
  for (const Op& op : fsdp2.schedule.ops) {
    if (op.kind == OpKind::all_gather) {
      EXPECT_DOUBLE_EQ(op.comm_bytes, 5760) << op.name;
    }
  }
}

void expect_input_error(const std::vector<std::string>& overrides, const std::string& path) {
  try {
    plan_step(parse_scenario(moe_scenario(), "test.json", overrides));
    FAIL() << "expected an InputError at " << path;
  } catch (const InputError& e) {
    EXPECT_EQ(e.json_path(), path) << e.what();
  }
}

TEST(ExpertParallel, ImpossibleConfigurationsNameTheField) {
  expect_input_error({"fsdp.expert_parallel=3"}, "fsdp.expert_parallel");  // divides neither 4 ranks nor 4 experts
  expect_input_error({"training.moe_imbalance=5"}, "training.moe_imbalance");  // above 4 experts
  expect_input_error({"training.moe_imbalance=0.5"}, "training.moe_imbalance");
  expect_input_error({"fsdp.expert_parallel=2", "fsdp.version=1"}, "fsdp.expert_parallel");
  // A dense model has no expert to overload (accepted silently before session 38's input audit).
  nlohmann::json dense = moe_scenario();
  dense["model"] = testing::block_model(2, {64, 32}, 128.0, {100, 32});
  try {
    plan_step(parse_scenario(dense, "dense.json", {"training.moe_imbalance=2"}));
    FAIL() << "a routing imbalance on a dense model was accepted";
  } catch (const InputError& e) {
    EXPECT_EQ(e.json_path(), "training.moe_imbalance") << e.what();
  }
  EXPECT_NO_THROW(plan_step(parse_scenario(dense, "dense.json", {"training.moe_imbalance=1"})));
}

}  // namespace
}  // namespace fsdpsim::planner
