// The job outside the step (planner/job_memory.h) against hand arithmetic: a 70B-parameter
// model's full and sharded checkpoint saves, meta versus CPU init, and the host memory of FSDP's
// and DeepSpeed's offload options, compared with DeepSpeed's own estimator.
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "planner/job_memory.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "synthetic.h"

namespace fsdpsim::planner {
namespace {

using testing::block_model;
using testing::cluster;

// A 70B-class model: 80 blocks of [8000, 109375] (875,000,000 parameters each: 70e9) and a root
// embedding of [64000, 8192] (524,288,000), on 8 nodes x 8 GPUs (W = 64). Every dim 0 and every
// unit divides by 64, so FSDP1 and FSDP2 add no padding and the arithmetic is exact.
constexpr double kBlock = 875000000.0;
constexpr double kRoot = 524288000.0;
constexpr double kN = 80 * kBlock + kRoot;  // 70,524,288,000
constexpr double kW = 64, kGpn = 8, kNodes = 8;

nlohmann::json seventy_b(nlohmann::json fsdp, nlohmann::json training = nlohmann::json::object()) {
  nlohmann::json t = {{"micro_batch", 1}, {"seq_len", 16}, {"param_dtype", "bf16"}, {"reduce_dtype", "fp32"},
                      {"master_dtype", "fp32"}, {"optimizer", "adamw"}};
  t.update(training);
  return {{"model", block_model(80, {8000, 109375}, 0, {64000, 8192})},
          {"cluster", cluster(8, 8, 80)},
          {"training", t},
          {"fsdp", fsdp}};
}

struct Planned {
  Scenario scenario;
  Plan plan;
  MemoryReport memory;
};

Planned plan_of(const nlohmann::json& json, std::vector<std::string> overrides = {}) {
  Planned p{parse_scenario(json, "test.json", overrides), {}, {}};
  p.plan = plan_step(p.scenario);
  p.memory = replay_memory(p.plan.schedule);
  return p;
}

// [Pinned host blocks] (planner/sharding.h) FSDP2's cpu_offload pins each parameter's fp32 shard
// on its own, and PyTorch's CachingHostAllocator rounds each pinned block up to a power of two:
// a block's shard of 125 rows x 109,375 x 4 B = 54,687,500 B takes 64 MiB, the root's 1,000 rows
// x 8,192 x 4 B = 32,768,000 B takes 32 MiB: 80 x 2^26 + 2^25 = 5,402,263,552 B a rank (4 N / 64
// = 4,407,768,000 B unrounded, 22.6% less).
constexpr double kPinnedParamShards = 80.0 * (1 << 26) + (1 << 25);

// PyTorch's two cuBLAS workspaces (2 x 32 MiB on the H100s here), made at the first GEMMs and
// kept: part of what a GPU holds between steps ([cuBLAS workspaces] in planner/plan_context.cpp).
constexpr double kCublasWorkspaces = static_cast<double>(testing::kCublasWorkspacesHopper);

// FSDP1 FULL_SHARD, FULL_STATE_DICT with rank0_only and offload_to_cpu.
// Between steps each GPU holds its fp32 shard and AdamW's two fp32 states: 12 N / 64 bytes,
// and the cuBLAS workspaces.
// Rank 0's CPU ends with the whole fp32 model (4 N) and, saving the optimizer, its two states
// (8 N): 12 N = 846.3 GB. The GPU: the root stays unsharded (its pre-state-dict hook runs first,
// its post hook last) while each block is gathered in fp32: state + (root + block) x 4 bytes.
TEST(FullStateDict, SeventyBRankZeroOnly) {
  const nlohmann::json fsdp = {{"version", 1}, {"strategy", "FULL_SHARD"}};
  nlohmann::json scenario = seventy_b(fsdp);
  scenario["checkpoint"] = {{"state_dict", "full"}, {"rank0_only", true}, {"offload_to_cpu", true}, {"optimizer", false}};
  scenario["cluster"]["storage"] = {{"write_gbps", 5}};
  Planned p = plan_of(scenario);
  const double state = 12 * kN / kW + kCublasWorkspaces;  // 13,223,304,000 + 67,108,864
  EXPECT_DOUBLE_EQ(static_cast<double>(p.memory.allocated_at_start), state);

  CheckpointSave model_only = checkpoint_save(p.scenario, p.plan, p.memory, 50);
  EXPECT_DOUBLE_EQ(model_only.rank0_host_bytes, 4 * kN);  // 282.1 GB
  EXPECT_DOUBLE_EQ(model_only.peak.host_bytes_per_node, 4 * kN);  // rank 0's node only
  EXPECT_DOUBLE_EQ(model_only.peak.device_bytes, state + (kRoot + kBlock) * 4);  // + 5.6 GB
  EXPECT_DOUBLE_EQ(model_only.bytes_written_per_node, 4 * kN);
  EXPECT_DOUBLE_EQ(model_only.copy_seconds, 4 * kN / 50e9);   // 5.6 s over PCIe
  EXPECT_DOUBLE_EQ(model_only.write_seconds, 4 * kN / 5e9);   // 56.4 s at 5 GB/s
  EXPECT_EQ(model_only.gather_seconds, 0);  // not timed without NCCL's figures

  // With them: the root and each of the 80 blocks all-gathered once, in fp32, over the 64
  // ranks of 8 nodes, one after another, before the copies and the write.
  const NcclParams nccl = NcclParams::defaults_for(p.scenario.cluster);
  const CheckpointSave timed = checkpoint_save(p.scenario, p.plan, p.memory, 50, &nccl);
  const CollectiveGroup group{64, 8};
  const double expected_gathers =
      80 * estimate_collective(CollectiveKind::all_gather, kBlock * 4, group, p.scenario.cluster, nccl).seconds +
      estimate_collective(CollectiveKind::all_gather, kRoot * 4, group, p.scenario.cluster, nccl).seconds;
  EXPECT_NEAR(timed.gather_seconds, expected_gathers, 1e-12 * expected_gathers);  // summed in another order
  // A bound by hand: every node must take in 7/8 of each gathered buffer (the other nodes'
  // shards) through its 8 NICs of 50 GB/s: 4 N x 7/8 / 400 GB/s = 0.62 s at least.
  EXPECT_GT(timed.gather_seconds, 4 * kN * 7 / 8 / (8 * 50e9));
  EXPECT_DOUBLE_EQ(timed.seconds(), timed.gather_seconds + timed.copy_seconds + timed.write_seconds);

  // With the optimizer state: 12 N on rank 0's CPU, and the GPU's highest point becomes one
  // block's two gathered fp32 states (875e6 x 8 bytes) on top of the state.
  Planned q = plan_of(scenario, {"checkpoint.optimizer=true"});
  CheckpointSave full = checkpoint_save(q.scenario, q.plan, q.memory, 50);
  EXPECT_DOUBLE_EQ(full.rank0_host_bytes, 12 * kN);  // 846.3 GB: more than many nodes have
  EXPECT_DOUBLE_EQ(full.peak.device_bytes, state + kBlock * 2 * 4);

  // Without rank0_only every rank keeps the gathered copy: 8 ranks' on each node.
  Planned all = plan_of(scenario, {"checkpoint.rank0_only=false"});
  EXPECT_DOUBLE_EQ(checkpoint_save(all.scenario, all.plan, all.memory, 50).peak.host_bytes_per_node, kGpn * 4 * kN);
  // Without offload_to_cpu the clones stay on the GPU: the whole fp32 model on top (the classic OOM).
  Planned gpu = plan_of(scenario, {"checkpoint.offload_to_cpu=false"});
  const CheckpointSave on_gpu = checkpoint_save(gpu.scenario, gpu.plan, gpu.memory, 50);
  EXPECT_DOUBLE_EQ(on_gpu.peak.device_bytes, state + (kRoot + kBlock) * 4 + 4 * kN);
  // ... and none of it on the host (FSDP1's param_hook clones the unsharded parameter where it
  // is; the session-36 audit found it counted on the GPU and on the host at once).
  EXPECT_EQ(on_gpu.rank0_host_bytes, 0);
  EXPECT_EQ(on_gpu.peak.host_bytes_per_node, 0);
  EXPECT_DOUBLE_EQ(on_gpu.bytes_written_total, 4 * kN);  // rank 0 still writes it
}

// FSDP2's get_state_dict gathers tensor by tensor (torch/distributed/checkpoint/state_dict.py
// _gather_state_dict: full_tensor() per DTensor, moved to the CPU before the next), its optimizer
// state's tensors alike: the GPU holds its state + the largest parameter whole, 875e6 fp32
// elements (3.5 GB), not FSDP1's root and largest unit at once (the session-36 audit: 30.1 GB for
// 17.4 GB on a 70B model). Without offload_to_cpu the clones stay: + 4 N (+ 8 N with AdamW's).
TEST(FullStateDict, Fsdp2GathersOneTensorAtATime) {
  nlohmann::json scenario = seventy_b({{"version", 2}, {"strategy", "FULL_SHARD"}});
  scenario["checkpoint"] = {{"state_dict", "full"}};
  Planned p = plan_of(scenario);
  const double state = 12 * kN / kW + kCublasWorkspaces;
  const CheckpointSave save = checkpoint_save(p.scenario, p.plan, p.memory, 50);
  EXPECT_DOUBLE_EQ(save.peak.device_bytes, state + kBlock * 4);
  EXPECT_DOUBLE_EQ(save.rank0_host_bytes, 12 * kN);
  Planned gpu = plan_of(scenario, {"checkpoint.offload_to_cpu=false"});
  EXPECT_DOUBLE_EQ(checkpoint_save(gpu.scenario, gpu.plan, gpu.memory, 50).peak.device_bytes,
                   state + kBlock * 4 + 12 * kN);
}

// DeepSpeed ZeRO-3's save_checkpoint: each rank's fp32 flat groups and AdamW's two states, 12 N
// in all; its 16-bit partitions are not saved (stage3.py _rigid_state_dict: OPTIMIZER_STATE_DICT
// and FP32_FLAT_GROUPS). ZeRO-1/2's layout saves the 16-bit model beside them (14 N).
TEST(ShardedStateDict, DeepSpeedZero3SavesItsFp32PartitionsNotItsSixteenBitOnes) {
  for (const char* strategy : {"FULL_SHARD", "SHARD_GRAD_OP"}) {
    nlohmann::json scenario = seventy_b({{"version", 1}, {"strategy", strategy}}, {{"master_weights", "optimizer_state"}});
    scenario["checkpoint"] = {{"state_dict", "sharded"}};
    Planned p = plan_of(scenario);
    const CheckpointSave s = checkpoint_save(p.scenario, p.plan, p.memory, 50);
    EXPECT_DOUBLE_EQ(s.bytes_written_total, (std::string(strategy) == "FULL_SHARD" ? 12 : 14) * kN) << strategy;
    // torch.save stages one storage at a time, and DeepSpeed's are flat. ZeRO-3: its first
    // optimizer sub-group (stage3.py _create_fp16_sub_groups closes a group at the parameter whose
    // partitions reach sub_group_size 1e9): the root's 524,288,000 / 64 = 8,192,000 and 73
    // blocks' 875e6 / 64 = 13,671,875 each, 1,006,238,875 fp32 elements. ZeRO-2: the rank's whole
    // fp32 partition, N / 64 = 1,101,942,000 elements. A node's 8 ranks at once.
    const double staged = std::string(strategy) == "FULL_SHARD" ? 1006238875.0 * 4 : kN / kW * 4;
    EXPECT_DOUBLE_EQ(s.peak.host_bytes_per_node, kGpn * staged) << strategy;
  }
}

// SHARDED_STATE_DICT / DCP: each rank writes its fp32 shard and its states, 12 N / 64 bytes;
// a node's 8 ranks write 12 N / 8; the cluster 12 N. Nothing is gathered: the GPU holds its
// state only (and the cuBLAS workspaces). Host: each rank stages its largest tensor (a block's
// shard, 875e6 / 64 x 4 bytes).
TEST(ShardedStateDict, EachRankWritesItsShards) {
  nlohmann::json scenario = seventy_b({{"version", 1}, {"strategy", "FULL_SHARD"}});
  scenario["checkpoint"] = {{"state_dict", "sharded"}};
  scenario["cluster"]["storage"] = {{"write_gbps", 5}};
  Planned p = plan_of(scenario);
  CheckpointSave s = checkpoint_save(p.scenario, p.plan, p.memory, 50);
  EXPECT_DOUBLE_EQ(s.bytes_written_per_node, kGpn * 12 * kN / kW);
  EXPECT_DOUBLE_EQ(s.bytes_written_total, 12 * kN);
  EXPECT_DOUBLE_EQ(s.peak.device_bytes, 12 * kN / kW + kCublasWorkspaces);
  EXPECT_DOUBLE_EQ(s.peak.host_bytes_per_node, kGpn * kBlock / kW * 4);
  EXPECT_DOUBLE_EQ(s.write_seconds, kGpn * 12 * kN / kW / 5e9);  // 16.5 s against 169 s for the full save
  EXPECT_DOUBLE_EQ(s.copy_seconds, 12 * kN / kW / 50e9);
}

// A checkpoint holds every expert whatever the expert parallelism, and DCP writes each tensor's
// own elements once. The tiny MoE of synthetic.h: 2 blocks of w [8, 16] (128) and experts
// [4, 16, 16] (1,024): 2,304 parameters; fp32 with AdamW: 4 + 2 x 4 = 12 bytes each, 27,648
// bytes. (The session-30 audit: a full save of Mixtral at EP 8 counted rank 0's experts only,
// 81 GiB of 522; a sharded save at EP 1 on 64 GPUs counted FSDP2's dim-0 padding, 4,050 GiB;
// replicas each counted their copy.)
constexpr double kTinyMoe = 2 * (8 * 16 + 4 * 16 * 16);  // 2,304

nlohmann::json tiny_moe(int nodes, const std::string& state_dict) {
  nlohmann::json sc = testing::moe_scenario();
  sc["cluster"] = cluster(nodes, 4);
  sc["training"]["optimizer"] = "adamw";
  sc["checkpoint"] = {{"state_dict", state_dict}};
  return sc;
}

// On the GPU (offload_to_cpu) FSDP2 gathers one tensor at a time, the largest the experts'
// [4, 16, 16] whole over the shard group and the expert-parallel group (full_tensor() on both
// mesh dimensions): 1,024 x 4 bytes beside the state at every EP (rank 0 holds 512 of the 1,024
// at EP 2, 256 at EP 4). (Before session 36, FSDP1's unit-at-a-time figure: the unit's two AdamW
// states, 1,152 x 2 x 4 at EP 1.)
TEST(FullStateDict, EveryExpertAtAnyExpertParallelism) {
  for (int ep : {1, 2, 4}) {
    Planned p = plan_of(tiny_moe(1, "full"), {"fsdp.expert_parallel=" + std::to_string(ep)});
    const CheckpointSave s = checkpoint_save(p.scenario, p.plan, p.memory, 50);
    EXPECT_DOUBLE_EQ(s.bytes_written_total, 12 * kTinyMoe) << "EP " << ep;
    EXPECT_DOUBLE_EQ(s.rank0_host_bytes, 12 * kTinyMoe) << "EP " << ep;
    EXPECT_DOUBLE_EQ(s.peak.device_bytes - static_cast<double>(p.memory.allocated_at_start), 1024 * 4) << "EP " << ep;
  }
}

// Sharded: on 8 ranks at EP 1 the experts' 4 rows give every rank one row, half of it padding
// (rank 0 holds 2 x (16 + 256) = 544 elements where an even split is 288), yet the save writes
// the model once. HYBRID_SHARD over 2 replicas of 4 ranks writes it once too (dedup_save_plans).
TEST(ShardedStateDict, WritesTheModelOnceWithoutPaddingOrReplicas) {
  for (const std::vector<std::string>& overrides :
       std::vector<std::vector<std::string>>{{}, {"fsdp.strategy=HYBRID_SHARD", "fsdp.shard_group_size=4"}}) {
    Planned p = plan_of(tiny_moe(2, "sharded"), overrides);
    if (overrides.empty()) {
      double held = 0;
      for (const UnitShard& sh : p.plan.shards) held += static_cast<double>(sh.local_numel);
      EXPECT_EQ(held, 544);  // the padding is there to leave out
    }
    const CheckpointSave s = checkpoint_save(p.scenario, p.plan, p.memory, 50);
    EXPECT_DOUBLE_EQ(s.bytes_written_total, 12 * kTinyMoe) << overrides.size();
    EXPECT_DOUBLE_EQ(s.bytes_written_per_node, 12 * kTinyMoe / 2) << overrides.size();
    EXPECT_DOUBLE_EQ(s.copy_seconds, 12 * kTinyMoe / 8 / 50e9) << overrides.size();
  }
}

// Init. meta under FSDP1 (param_init_fn): unit by unit, a block is materialised (875e6 x 4)
// and flattened into a FlatParameter (as much again), beside the shards: S + 2 x 3.5 GB.
// meta under FSDP2: fully_shard first, to_empty allocates the shards only: S.
// cpu: each of a node's 8 ranks builds the fp32 model, 8 x 4 N = 2.26 TB per node; with
// sync_module_states only rank 0 does, and a 250 MiB broadcast bucket is added on the GPU.
TEST(Init, MetaAgainstCpu) {
  const double shards = 4 * kN / kW;  // the fp32 sharded parameters: 4.41 GB
  Planned fsdp1 = plan_of(seventy_b({{"version", 1}}), {"init=meta"});
  PhasePeak meta1 = init_peak(fsdp1.scenario, fsdp1.plan);
  EXPECT_DOUBLE_EQ(meta1.device_bytes, shards + 2 * kBlock * 4);
  EXPECT_DOUBLE_EQ(meta1.host_bytes_per_node, 0);

  Planned fsdp2 = plan_of(seventy_b({{"version", 2}}), {"init=meta"});
  EXPECT_DOUBLE_EQ(init_peak(fsdp2.scenario, fsdp2.plan).device_bytes, shards);
  // FSDP2 from the CPU: fully_shard moves a block to the GPU whole (3.5 GB), then makes its
  // shard (875e6 / 64 x 4 bytes) before the whole one is freed.
  Planned fsdp2_cpu = plan_of(seventy_b({{"version", 2}}), {"init=cpu"});
  EXPECT_DOUBLE_EQ(init_peak(fsdp2_cpu.scenario, fsdp2_cpu.plan).device_bytes,
                   shards + kBlock * 4 + kBlock / kW * 4);

  Planned cpu = plan_of(seventy_b({{"version", 1}}), {"init=cpu"});
  PhasePeak cpu1 = init_peak(cpu.scenario, cpu.plan);
  EXPECT_DOUBLE_EQ(cpu1.host_bytes_per_node, kGpn * 4 * kN);  // 2,256,777,216,000
  EXPECT_DOUBLE_EQ(cpu1.device_bytes, meta1.device_bytes);

  Planned synced = plan_of(seventy_b({{"version", 1}}), {"init={\"device\": \"cpu\", \"sync_module_states\": true}"});
  PhasePeak sync1 = init_peak(synced.scenario, synced.plan);
  EXPECT_DOUBLE_EQ(sync1.host_bytes_per_node, 4 * kN);
  EXPECT_DOUBLE_EQ(sync1.device_bytes, meta1.device_bytes + 250.0 * 1024 * 1024);

  // cuda: the whole fp32 model on each GPU (282 GB) plus the largest unit's flat copy.
  Planned cuda = plan_of(seventy_b({{"version", 1}}), {"init=cuda"});
  EXPECT_DOUBLE_EQ(init_peak(cuda.scenario, cuda.plan).device_bytes, 4 * kN + 4 * kBlock);
}

// Init by framework (session 33's audit):
// - DeepSpeed's layout built on the CPU (no zero.Init): the engine moves the whole 16-bit model to
//   each GPU (2 N = 141 GB), and ZeRO-3's partitions (2 N / 64) are made beside it. It was priced
//   as zero.Init, S + 2 blocks.
// - FSDP2 with cpu_offload built on the CPU: each rank's whole fp32 model (4 N) and its offloaded
//   parameter shard (4 N / 64) on the host; torch.optim's states (8 N / 64) are made at the first
//   step, not at init (they were counted), and so are the gradients.
// - sync_module_states is FSDP1's: refused for FSDP2 and DeepSpeed, and not advised for them.
// - FSDP2 with expert parallelism built on the CPU: refused (each rank's experts reach the GPU
//   whole before fully_shard).
TEST(Init, WhatEachFrameworkHoldsAtInit) {
  const nlohmann::json ds = {{"master_weights", "optimizer_state"}};
  Planned zero3 = plan_of(seventy_b({{"version", 2}, {"strategy", "FULL_SHARD"}}, ds), {"init=cpu"});
  EXPECT_DOUBLE_EQ(init_peak(zero3.scenario, zero3.plan).device_bytes, 2 * kN + 2 * kN / kW);
  Planned zero3_meta = plan_of(seventy_b({{"version", 2}, {"strategy", "FULL_SHARD"}}, ds), {"init=meta"});
  // zero.Init ([zero.Init], planner/job_memory.cpp): a block's one weight made in fp32 and cast to
  // bf16 beside the partitions, 875e6 x (4 + 2) B, no flat copy (it read 2 x 875e6 x 4).
  EXPECT_DOUBLE_EQ(init_peak(zero3_meta.scenario, zero3_meta.plan).device_bytes, 2 * kN / kW + kBlock * (4 + 2));
  // ZeRO-1/2 have no zero.Init: the engine moves the whole 16-bit model whatever init says.
  Planned zero2_meta = plan_of(seventy_b({{"version", 2}, {"strategy", "SHARD_GRAD_OP"}}, ds), {"init=meta"});
  EXPECT_DOUBLE_EQ(init_peak(zero2_meta.scenario, zero2_meta.plan).device_bytes, 2 * kN);

  Planned offloaded = plan_of(seventy_b({{"version", 2}, {"cpu_offload", true}}), {"init=cpu"});
  EXPECT_DOUBLE_EQ(init_peak(offloaded.scenario, offloaded.plan).host_bytes_per_node,
                   kGpn * (4 * kN + kPinnedParamShards));
  // What holds the host memory is named with it: the ranks' models and their offloaded state,
  // and on meta the offloaded state alone (it read "nothing" beside 263 GiB).
  EXPECT_EQ(init_peak(offloaded.scenario, offloaded.plan).host_at,
            std::to_string(static_cast<int>(kGpn)) + " ranks' whole models + the offloaded state of " + std::to_string(static_cast<int>(kGpn)) + " ranks");
  Planned offloaded_meta = plan_of(seventy_b({{"version", 2}, {"cpu_offload", true}}), {"init=meta"});
  EXPECT_EQ(init_peak(offloaded_meta.scenario, offloaded_meta.plan).host_at,
            "the offloaded state of " + std::to_string(static_cast<int>(kGpn)) + " ranks");
  EXPECT_DOUBLE_EQ(init_peak(offloaded_meta.scenario, offloaded_meta.plan).host_bytes_per_node, kGpn * kPinnedParamShards);
  Planned on_gpu_meta = plan_of(seventy_b({{"version", 2}}), {"init=meta"});
  EXPECT_EQ(init_peak(on_gpu_meta.scenario, on_gpu_meta.plan).host_at, "nothing (the model is not built on the CPU)");

  auto error_path = [](const nlohmann::json& json, std::vector<std::string> overrides) {
    try {
      (void)parse_scenario(json, "test.json", overrides);
    } catch (const InputError& e) {
      return e.json_path();
    }
    return std::string("no error");
  };
  const std::string synced = "init={\"device\": \"cpu\", \"sync_module_states\": true}";
  EXPECT_EQ(error_path(seventy_b({{"version", 2}}), {synced}), "init.sync_module_states");
  EXPECT_EQ(error_path(seventy_b({{"version", 1}}, ds), {synced}), "init.sync_module_states");
  EXPECT_EQ(error_path(seventy_b({{"version", 1}}), {synced}), "no error");
  EXPECT_EQ(error_path(tiny_moe(2, "sharded"), {"fsdp.expert_parallel=2", "init=cpu"}), "init");
  EXPECT_EQ(error_path(tiny_moe(2, "sharded"), {"fsdp.expert_parallel=2", "init=meta"}), "no error");
  // The host-bound CPU init of FSDP2 is advised meta, not FSDP1's sync_module_states.
  JobFit host_bound;
  host_bound.fits = false;
  host_bound.binding_phase = "init";
  host_bound.binding_resource = "host";
  Planned fsdp2_cpu = plan_of(seventy_b({{"version", 2}}), {"init=cpu"});
  EXPECT_EQ(job_remedy(fsdp2_cpu.scenario, host_bound).find("sync_module_states"), std::string::npos);
  Planned fsdp1_cpu = plan_of(seventy_b({{"version", 1}}), {"init=cpu"});
  EXPECT_NE(job_remedy(fsdp1_cpu.scenario, host_bound).find("sync_module_states"), std::string::npos);
}

// [zero.Init] Parameter by parameter within a module, partitioned when the module's __init__
// returns: a module of a [1000, 1000] and then b [2000, 1000] peaks while b exists in fp32 and
// bf16 beside a in bf16: 2e6 + 2e6 x (4 + 2) = 14e6 B; written b first, 12e6 (b alone in both
// dtypes; then a in both beside b's 4e6: 10e6). Two ranks, FULL_SHARD: the partitions 3e6 x 2 / 2.
TEST(Init, ZeroInitMakesEachParameterInFp32AndCastsIt) {
  auto scenario = [](nlohmann::json params) {
    nlohmann::json layer = {{"name", "0"}, {"type", "Block"}, {"repeat", 1}, {"params", params},
                            {"costs", {{"forward_flops", {{"b*s", 1e6}}}, {"input_bytes", {{"b*s", 8.0}}}}}};
    nlohmann::json root = {{"name", ""}, {"type", "Model"},
                           {"children", {{{"name", "blocks"}, {"type", "ModuleList"}, {"children", {layer}}}}}};
    return nlohmann::json{{"model", {{"name", "two-params"}, {"root", root}}},
                          {"cluster", cluster(1, 2, 80)},
                          {"training", {{"micro_batch", 1}, {"seq_len", 16}, {"param_dtype", "bf16"}, {"master_dtype", "fp32"},
                                        {"optimizer", "adamw"}, {"master_weights", "optimizer_state"}}},
                          {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}}}};
  };
  const nlohmann::json a = {{"name", "a"}, {"shape", {1000, 1000}}};
  const nlohmann::json b = {{"name", "b"}, {"shape", {2000, 1000}}};
  const double partitions = 3e6 * 2 / 2;
  Planned a_first = plan_of(scenario({a, b}), {"init=meta"});
  EXPECT_DOUBLE_EQ(init_peak(a_first.scenario, a_first.plan).device_bytes, partitions + 14e6);
  Planned b_first = plan_of(scenario({b, a}), {"init=meta"});
  EXPECT_DOUBLE_EQ(init_peak(b_first.scenario, b_first.plan).device_bytes, partitions + 12e6);
}

// ZeRO-1 is no FSDP mode: its optimizer partitions are a flat buffer's under fsdp.version 2 too.
// The tiny MoE on 8 ranks: per block unit ceil(1,152 / 8) = 144, 288 in all, where FSDP2's rows
// give each rank one row of every tensor, 544 (the sharded-save test's figure).
TEST(ZeroOne, PartitionsAFlatBufferUnderEitherVersion) {
  Planned zero1 = plan_of(tiny_moe(2, "sharded"), {"fsdp.strategy=ZERO1"});
  double held = 0;
  for (const UnitShard& sh : zero1.plan.shards) held += static_cast<double>(sh.local_numel);
  EXPECT_EQ(held, 288);
}

// The offload options' host memory per node, and the step's replay agreeing with them (two
// methods: the option's closed form and the schedule's host allocations).
const OffloadOption& option(const std::vector<OffloadOption>& options, const std::string& name) {
  for (const OffloadOption& o : options)
    if (o.name == name) return o;
  throw std::runtime_error("no option " + name);
}

// FSDP CPU offload: the fp32 parameter shard and gradient shard pinned, AdamW's state in
// ordinary memory: per node 8 x 2 x 5,402,263,552 B pinned (each parameter's shard in its
// power-of-two block, kPinnedParamShards: 86.4 GB against 70.5 GB unrounded) and 8 x 8 N / 64
// pageable (35.3 GB). FSDP1 pins one flat shard a unit: a block's 875e6 / 64 x 4 B = 54,687,500 B
// and the root's 32,768,000 B round as FSDP2's do here (one parameter a unit).
TEST(OffloadHostMemory, FsdpCpuOffload) {
  Planned p = plan_of(seventy_b({{"version", 2}, {"cpu_offload", true}}));
  const auto options = offload_options(p.scenario, p.plan);
  const OffloadOption& o = option(options, "fsdp cpu_offload");
  EXPECT_TRUE(o.is_scenario);
  EXPECT_DOUBLE_EQ(o.pinned_bytes_per_node, kGpn * 2 * kPinnedParamShards);
  EXPECT_DOUBLE_EQ(o.pageable_bytes_per_node, kGpn * 8 * kN / kW);
  EXPECT_DOUBLE_EQ(o.device_state_bytes, 0);
  // The step's replay holds the same on the host at its highest (the optimizer step: params,
  // grads and state all alive).
  EXPECT_DOUBLE_EQ(static_cast<double>(p.memory.peak_host_pinned_bytes) * kGpn, o.pinned_bytes_per_node);
  EXPECT_DOUBLE_EQ(static_cast<double>(p.memory.peak_host_pageable_bytes) * kGpn, o.pageable_bytes_per_node);
  EXPECT_EQ(p.memory.model_state_bytes, 0);  // nothing of it on the GPU
}

// DeepSpeed's estimator (deepspeedai/DeepSpeed@edaa722):
//   deepspeed/runtime/zero/stage3.py estimate_zero3_model_states_mem_needs:
//     cpu_offload and cpu_offload_params, zero_init: cpu_mem = N x 18 x (1/nodes) x 1.5
//     cpu_offload only, zero_init:                    cpu_mem = N x 16 x (1/nodes) x 1.5
//     not zero_init: cpu_mem = N x max(4 x gpus_per_node, 18 or 16 x 1/nodes) x 1.5
//   deepspeed/runtime/zero/stage_1_and_2.py estimate_zero2_model_states_mem_needs:
//     cpu_offload: cpu_mem = N x max(4 x total_gpus, 16) x 1.5
// fsdpsim counts what the offloaded partitions are: per element an fp32 master, two fp32 Adam
// states and an fp32 gradient (16 bytes), ZeRO-3's gradient partitions in bf16 (2: stage3.py
// _setup_for_real_optimizer's grad_partitions_flat_buffer, on the host under offload), plus the
// bf16 parameter (2) under offload_param, times the node's share N / nodes. Pinned (pin_memory's
// default): the fp32 and bf16 gradients and the offloaded parameter (8 bytes); ZeRO-3's master
// and DeepSpeedCPUAdam's states are ordinary memory ([DeepSpeed's host buffers]). Where it differs:
// - the estimator leaves ZeRO-3's bf16 gradient buffer out (18 and 20 bytes here, 16 and 18 there);
// - no additional_buffer_factor 1.5: DeepSpeed's is a flat margin, not memory anything holds;
// - not zero_init's 4 x gpus_per_node x N: that is every process loading the fp32 model before
//   partitioning, an init peak, reported under init (cpu) rather than added to the step;
// - ZeRO-2: DeepSpeed's formula neither divides by the nodes (each node holds only its ranks'
//   partitions) nor by the ranks in its 4 x total_gpus term, so past 4 GPUs it grows with the
//   cluster: for 64 GPUs 384 N bytes "per CPU", against 16 N / 8 per node here.
// [DeepSpeed's pinned blocks] And the host allocator holds the pinned optimizer buffers in powers
// of two, which the estimator does not count: ZeRO-3's bf16 gradient partitions, 2 x
// 1,101,942,000 B, in a 2^32 block, and the fp32 gradients of its two sub-groups (1,006,238,875
// and 95,703,125 elements, below) in 2^32 and 2^29: 2^33 + 2^29 B a rank where the exact sizes
// are 6 N / 64 (the session-36 audit's 73.0 GB a node for Llama-3.1-70B); ZeRO-2's fp32 master
// and gradient, 4 x 1,101,942,000 B each, in 2^33 each.
TEST(OffloadHostMemory, DeepSpeedVariantsAgainstItsEstimator) {
  const nlohmann::json ds = {{"master_weights", "optimizer_state"}};
  const double z3_pinned = std::ldexp(1.0, 33) + std::ldexp(1.0, 29), z2_pinned = std::ldexp(1.0, 34);
  const double z3_blocks = kGpn * (z3_pinned - 6 * kN / kW), z2_blocks = kGpn * (z2_pinned - 8 * kN / kW);
  Planned z3 = plan_of(seventy_b({{"version", 2}, {"strategy", "FULL_SHARD"}}, ds));
  const auto options = offload_options(z3.scenario, z3.plan);
  const double additional_buffer_factor = 1.5, gpus_factor = 1 / kNodes;
  const double ds_optimizer_and_params = kN * 18 * gpus_factor * additional_buffer_factor;
  const double ds_optimizer_only = kN * 16 * gpus_factor * additional_buffer_factor;
  const OffloadOption& both = option(options, "offload_optimizer=cpu, offload_param=cpu");
  const OffloadOption& opt = option(options, "offload_optimizer=cpu");
  EXPECT_DOUBLE_EQ((both.host_bytes_per_node() - z3_blocks) * additional_buffer_factor, ds_optimizer_and_params * 20 / 18);
  EXPECT_DOUBLE_EQ((opt.host_bytes_per_node() - z3_blocks) * additional_buffer_factor, ds_optimizer_only * 18 / 16);
  // pin_memory's default true; the offloaded parameters' pinned partitions at their exact size.
  EXPECT_DOUBLE_EQ(both.pinned_bytes_per_node, kGpn * (z3_pinned + 2 * kN / kW));
  EXPECT_DOUBLE_EQ(both.pageable_bytes_per_node, kGpn * 12 * kN / kW);
  // The step's replay holds the same on the host.
  EXPECT_DOUBLE_EQ(static_cast<double>(z3.memory.peak_host_pinned_bytes) * kGpn, 0);  // the scenario offloads nothing
  Planned z3_off = plan_of(seventy_b({{"version", 2}, {"strategy", "FULL_SHARD"}, {"offload_optimizer", "cpu"}}, ds));
  EXPECT_DOUBLE_EQ(static_cast<double>(z3_off.memory.peak_host_pinned_bytes) * kGpn, kGpn * z3_pinned);
  // Without pinning, the exact sizes in ordinary memory.
  Planned z3_pageable = plan_of(
      seventy_b({{"version", 2}, {"strategy", "FULL_SHARD"}, {"offload_optimizer", "cpu"}, {"offload_pin_memory", false}}, ds));
  EXPECT_DOUBLE_EQ(static_cast<double>(z3_pageable.memory.peak_host_pinned_bytes), 0);
  EXPECT_DOUBLE_EQ(static_cast<double>(z3_pageable.memory.peak_host_pageable_bytes) * kGpn, kGpn * 18 * kN / kW);
  EXPECT_DOUBLE_EQ(static_cast<double>(z3_off.memory.peak_host_pageable_bytes) * kGpn, kGpn * 12 * kN / kW);
  EXPECT_DOUBLE_EQ(both.device_state_bytes, 0);
  EXPECT_DOUBLE_EQ(opt.device_state_bytes, 2 * kN / kW);  // the bf16 partition stays on the GPU
  // DeepSpeed's GPU side for offload without params: 2 x total_params / total_gpus (+ the largest layer).
  EXPECT_DOUBLE_EQ(opt.device_state_bytes, 2 * kN / (kGpn * kNodes));

  // NVMe: the state goes to NVMe (18 N / nodes); the host keeps DeepSpeed's pinned swap buffers:
  // 4 fp32 buffers of the largest optimizer sub-group (stage3.py _configure_tensor_swapping) and
  // 5 x 1e8 bf16 per rank. The sub-groups (sub_group_size 1e9, _create_fp16_sub_groups): the
  // embedding's partition (524,288,000 / 64 = 8,192,000 elements, first in module order), then
  // blocks of 13,671,875 until 1e9 is reached: 8,192,000 + 73 x 13,671,875 = 1,006,238,875 (72
  // blocks make 992,567,000), then the other 7 blocks.
  const OffloadOption& nvme = option(options, "offload_optimizer=nvme, offload_param=nvme");
  EXPECT_DOUBLE_EQ(nvme.nvme_bytes_per_node, kGpn * 18 * kN / kW);
  EXPECT_DOUBLE_EQ(nvme.pinned_bytes_per_node, kGpn * (4 * 1006238875.0 * 4 + 5 * 1e8 * 2));

  // ZeRO-2 with optimizer offload: fsdpsim 16 N / nodes; DeepSpeed's formula 384 N.
  Planned z2 = plan_of(seventy_b({{"version", 2}, {"strategy", "SHARD_GRAD_OP"}}, ds));
  const std::vector<OffloadOption> z2_options = offload_options(z2.scenario, z2.plan);
  const OffloadOption& z2_opt = option(z2_options, "offload_optimizer=cpu");
  EXPECT_DOUBLE_EQ(z2_opt.host_bytes_per_node() - z2_blocks, 16 * kN / kNodes);
  // ZeRO-1/2 pins its fp32 master and gradient (stage_1_and_2.py), not DeepSpeedCPUAdam's states.
  EXPECT_DOUBLE_EQ(z2_opt.pinned_bytes_per_node, kGpn * z2_pinned);
  EXPECT_DOUBLE_EQ(z2_opt.pageable_bytes_per_node, 8 * kN / kNodes);
  const double ds_zero2 = kN * std::max(4 * kGpn * kNodes, 16.0) * additional_buffer_factor;
  EXPECT_DOUBLE_EQ(ds_zero2 / (z2_opt.host_bytes_per_node() - z2_blocks), 384.0 / 2.0);
  EXPECT_DOUBLE_EQ(z2_opt.device_state_bytes, 2 * kN);  // ZeRO-2 keeps the whole bf16 model

  // Not zero_init: DeepSpeed's 4 x gpus_per_node x N is fsdpsim's cpu init of an fp32 model.
  Planned cpu_init = plan_of(seventy_b({{"version", 2}, {"strategy", "FULL_SHARD"}}, ds), {"init=cpu"});
  EXPECT_DOUBLE_EQ(init_peak(cpu_init.scenario, cpu_init.plan).host_bytes_per_node,
                   4 * kGpn * kN);

  // And the planned step holds, per rank, what its option says.
  Planned planned = plan_of(seventy_b({{"version", 2}, {"offload_optimizer", "cpu"}, {"offload_param", "cpu"}}, ds));
  EXPECT_DOUBLE_EQ(static_cast<double>(planned.memory.peak_host_bytes) * kGpn, both.host_bytes_per_node());
}

// The verdict covers every phase and names the binding one: a 2 TB node fits the step and
// a sharded save, but not 8 ranks each building the fp32 70B model on the CPU.
TEST(JobFit, NamesTheBindingPhase) {
  nlohmann::json scenario = seventy_b({{"version", 1}});
  scenario["cluster"]["host_memory_gb"] = 2000;
  Planned p = plan_of(scenario, {"init=cpu"});
  PhasePeak step{"step", static_cast<double>(p.memory.peak_reserved_bytes), "", 0, ""};
  const JobFit fit = job_fit({step, init_peak(p.scenario, p.plan)}, 1 << 30,
                             p.scenario.cluster.gpu.memory_bytes, p.scenario.cluster.host_memory_bytes);
  EXPECT_FALSE(fit.fits);
  EXPECT_EQ(fit.binding_phase, "init");
  EXPECT_EQ(fit.binding_resource, "host");
  EXPECT_DOUBLE_EQ(fit.binding_margin_bytes, 2000e9 - kGpn * 4 * kN);
  Planned meta = plan_of(scenario, {"init=meta"});
  const JobFit ok = job_fit({step, init_peak(meta.scenario, meta.plan)}, 1 << 30,
                            meta.scenario.cluster.gpu.memory_bytes, meta.scenario.cluster.host_memory_bytes);
  EXPECT_TRUE(ok.fits);
  EXPECT_EQ(ok.binding_resource, "GPU");
  // What brings the binding phase down: init on the host without sync_module_states (each of
  // the node's ranks builds the model) -> rank 0 alone, or meta.
  EXPECT_EQ(job_remedy(p.scenario, fit).rfind("init.sync_module_states true", 0), 0u) << job_remedy(p.scenario, fit);
  EXPECT_EQ(job_remedy(meta.scenario, ok), "");  // it fits
}

// The remedy for each checkpoint binding (planner::job_remedy): the setting that takes the
// binding resource's peak down, in the order a user would try them.
TEST(JobFit, TheRemedyNamesTheSettingThatBindsThePhase) {
  auto scenario_with = [](nlohmann::json checkpoint) {
    nlohmann::json sc = seventy_b({{"version", 1}});
    sc["checkpoint"] = std::move(checkpoint);
    return parse_scenario(sc, "test.json", {});
  };
  const JobFit save_gpu{{}, false, "checkpoint save", "GPU", -1};
  const JobFit save_host{{}, false, "checkpoint save", "host", -1};
  const JobFit step{{}, false, "step", "GPU", -1};
  const Scenario clones_on_gpu = scenario_with({{"state_dict", "full"}, {"offload_to_cpu", false}});
  EXPECT_EQ(job_remedy(clones_on_gpu, save_gpu).rfind("checkpoint.offload_to_cpu true", 0), 0u);
  const Scenario offloaded = scenario_with({{"state_dict", "full"}});
  EXPECT_EQ(job_remedy(offloaded, save_gpu).rfind("checkpoint.state_dict sharded", 0), 0u);
  const Scenario every_rank = scenario_with({{"state_dict", "full"}, {"rank0_only", false}});
  EXPECT_EQ(job_remedy(every_rank, save_host).rfind("checkpoint.rank0_only true", 0), 0u);
  EXPECT_EQ(job_remedy(offloaded, save_host).rfind("checkpoint.state_dict sharded", 0), 0u);
  EXPECT_EQ(job_remedy(clones_on_gpu, step), "");  // the step's own changes are the advice
}

TEST(JobScenario, BadOffloadSettingsNameTheField) {
  const nlohmann::json ds = {{"master_weights", "optimizer_state"}};
  auto error_of = [](const nlohmann::json& j) -> std::string {
    try {
      parse_scenario(j, "test.json");
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  };
  EXPECT_NE(error_of(seventy_b({{"offload_optimizer", "cpu"}})).find("master_weights"), std::string::npos);
  EXPECT_NE(error_of(seventy_b({{"strategy", "SHARD_GRAD_OP"}, {"offload_optimizer", "cpu"}, {"offload_param", "cpu"}}, ds))
                .find("fsdp.offload_param"),
            std::string::npos);
  EXPECT_NE(error_of(seventy_b({{"cpu_offload", true}, {"offload_optimizer", "cpu"}}, ds)).find("fsdp.cpu_offload"),
            std::string::npos);
  nlohmann::json bad_checkpoint = seventy_b({{"version", 1}});
  bad_checkpoint["checkpoint"] = {{"state_dict", "sharded"}, {"rank0_only", true}};
  EXPECT_NE(error_of(bad_checkpoint).find("checkpoint.rank0_only"), std::string::npos);
}

}  // namespace
}  // namespace fsdpsim::planner
