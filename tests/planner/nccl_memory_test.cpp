// The device overhead outside the step's allocations (planner/device_memory.h): NCCL's buffers
// per communicator, cuBLAS's workspaces and the CUDA context, each worked by hand from the
// sources planner/device_memory.h cites (NVIDIA/nccl@5067397c, pytorch/pytorch@26a39059); and
// the scenario's `nccl` object read with InputErrors naming file and JSON path.
#include <gtest/gtest.h>

#include <string>

#include "models/json_input.h"
#include "planner/cost_model.h"
#include "planner/device_memory.h"
#include "planner/op_costs.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "input_error_of.h"
#include "synthetic.h"

namespace fsdpsim::planner {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

nlohmann::json scenario_json(int nodes = 1) {
  return {{"model", testing::block_model(4, {4096, 4096}, 64)},
          {"cluster", testing::cluster(nodes, 8)},
          {"training", {{"micro_batch", 1}, {"seq_len", 256}}},
          {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}}}};
}

DeviceOverhead overhead_of(const Scenario& s) {
  const Plan plan = plan_step(s);
  return device_overhead(s, plan.schedule, CostModel(s));
}

const DeviceOverheadPart* part(const DeviceOverhead& o, const std::string& name) {
  for (const DeviceOverheadPart& p : o.parts)
    if (p.name == name) return &p;
  return nullptr;
}

InputError error_of(const std::vector<std::string>& overrides) {
  return testing::input_error_of([&] { parse_scenario(scenario_json(), "s.json", overrides); });
}

TEST(NcclMemory, DefaultBuffersAreNcclsConstants) {
  // src/init.cc: LL 8 x 512 x 8 x 16 = 524,288; LL128 120 x 640 x 8 x 8 = 4,915,200; Simple 1 << 22.
  const NcclBufferSettings s;
  EXPECT_EQ(s.ll_buffsize_bytes, 524288);
  EXPECT_EQ(s.ll128_buffsize_bytes, 4915200);
  EXPECT_EQ(s.buffsize_bytes, 4194304);
  EXPECT_EQ(s.connection_bytes(), 9633792);
}

TEST(NcclMemory, OneChannelIsASendAndAReceiveAllocationRoundedTo2MiB) {
  NcclBufferSettings s;
  // Write (Hopper): send = ALIGN(4096, 2 MiB) = 2,097,152; receive = ALIGN(4096 + 524,288 +
  // 4,915,200 + 4,194,304 = 9,637,888, 2,097,152) = 5 x 2 MiB = 10,485,760. Sum 12 MiB.
  EXPECT_EQ(nccl_p2p_channel_bytes(s, false), 12582912);
  // Read (A100 over NVLink): send = ALIGN(4096 + 4,194,304 = 4,198,400) = 3 x 2 MiB = 6,291,456;
  // receive = ALIGN(4096 + 524,288 + 4,915,200 = 5,443,584) = 3 x 2 MiB = 6,291,456. Sum 12 MiB.
  EXPECT_EQ(nccl_p2p_channel_bytes(s, true), 12582912);
  // NCCL_BUFFSIZE = 8 MiB, write: receive = ALIGN(4096 + 524,288 + 4,915,200 + 8,388,608 =
  // 13,832,192) = 7 x 2 MiB = 14,680,064; + send 2,097,152 = 16,777,216.
  s.buffsize_bytes = 8 * kMiB;
  EXPECT_EQ(nccl_p2p_channel_bytes(s, false), 16777216);
  // Read with 8 MiB: send ALIGN(8,392,704) = 5 x 2 MiB; receive ALIGN(5,443,584) = 3 x 2 MiB: 16 MiB.
  EXPECT_EQ(nccl_p2p_channel_bytes(s, true), 16777216);
  // NCCL_BUFFSIZE = 1 MiB, write: receive ALIGN(4096 + 524,288 + 4,915,200 + 1,048,576 =
  // 6,492,160) = 4 x 2 MiB; + 2 MiB = 10 MiB.
  s.buffsize_bytes = 1 * kMiB;
  EXPECT_EQ(nccl_p2p_channel_bytes(s, false), 10 * kMiB);
  // A ring of C channels holds C such pairs; an all-to-all peers x channels per peer of them.
  EXPECT_EQ(nccl_ring_buffer_bytes(24, NcclBufferSettings{}, false), 24 * 12582912.0);
  EXPECT_EQ(nccl_p2p_buffer_bytes(7, 4, NcclBufferSettings{}, false), 7 * 4 * 12582912.0);
}

TEST(NcclMemory, CommunicatorChannelsFollowNcclTopoPostset) {
  const NcclBufferSettings none;
  // Duplication: 2 x the graph's channels, at most MAXCHANNELS 64.
  EXPECT_EQ(nccl_communicator_channels({12, 30, 30}, 1, true, none), 24);
  EXPECT_EQ(nccl_communicator_channels({40, 10, 10}, 1, true, none), 64);
  // Across nodes on compute capability >= 9.0 with bwIntra > 45 and < 16 channels: doubled again.
  EXPECT_EQ(nccl_communicator_channels({4, 50, 25}, 2, true, none), 16);
  EXPECT_EQ(nccl_communicator_channels({4, 45, 25}, 2, true, none), 8);   // bwIntra not > 45
  EXPECT_EQ(nccl_communicator_channels({4, 50, 25}, 1, true, none), 8);   // one node
  EXPECT_EQ(nccl_communicator_channels({4, 50, 25}, 2, false, none), 8);  // Ampere
  EXPECT_EQ(nccl_communicator_channels({8, 50, 25}, 2, true, none), 16);  // 16 is not < 16
  // NCCL_MAX_NCHANNELS caps, NCCL_MIN_NCHANNELS raises.
  NcclBufferSettings capped;
  capped.max_nchannels = 8;
  EXPECT_EQ(nccl_communicator_channels({12, 30, 30}, 1, true, capped), 8);
  NcclBufferSettings raised;
  raised.min_nchannels = 32;
  EXPECT_EQ(nccl_communicator_channels({12, 30, 30}, 1, true, raised), 32);
}

TEST(NcclMemory, CublasWorkspacesPerThreadArePyTorchsDefaults) {
  // CublasHandlePool.cpp: sm 9.0 4096 KiB x 8 = 32 MiB, else 4096 KiB x 2 + 16 KiB x 8 =
  // 8,519,680 B; cuBLASLt shares it (PyTorch 2.11 on an H100 allocated exactly 2 x 32 MiB for
  // two threads: tests/data/hardware/memory-h100-2026-11-27.csv process_baseline_allocated_bytes).
  // ROCm gfx94x: 128 MiB + hipBLASLt 76 MiB.
  EXPECT_EQ(cublas_workspace_bytes_per_thread("hopper"), 32 * kMiB);
  EXPECT_EQ(cublas_workspace_bytes_per_thread("ampere"), 8519680);
  EXPECT_EQ(cublas_workspace_bytes_per_thread("blackwell"), 8519680);
  EXPECT_EQ(cublas_workspace_bytes_per_thread("cdna3"), 204 * kMiB);
}

TEST(NcclMemory, EightGpusFsdpOnOneNodeHoldOneRingCommunicator) {
  const Scenario s = parse_scenario(scenario_json(), "s.json");
  const DeviceOverhead o = overhead_of(s);
  EXPECT_FALSE(o.measured);
  // The ring graph NCCL's search finds on 8 NVSwitch Hopper GPUs at 450 GB/s: 12 channels
  // (tests/planner/collectives_test.cpp works the search), so the communicator connects
  // 2 x 12 = 24 channels, each a 2 MiB send and a 10 MiB receive allocation:
  // 24 x 12,582,912 = 301,989,888 B.
  const CostModel cost(s);
  ASSERT_EQ(cost.ring_graph({"shard", 8, 1, 1}).channels, 12);
  const DeviceOverheadPart* shard = part(o, "NCCL shard");
  ASSERT_NE(shard, nullptr);
  EXPECT_EQ(shard->bytes, 301989888);
  // cuBLAS's workspaces are not a part: they are allocations of the step (in torch's allocated
  // memory; [cuBLAS workspaces] in planner/plan_context.cpp).
  EXPECT_EQ(part(o, "cuBLAS workspaces"), nullptr);
  // CUDA context: the calibration's assumption, 1 GiB as shipped for a GPU without a measurement
  // (this test cluster's; the H100 SXM's is measured: scenarios/hardware/calibration.json).
  ASSERT_NE(part(o, "CUDA context"), nullptr);
  EXPECT_EQ(part(o, "CUDA context")->bytes, 1024 * kMiB);
  EXPECT_EQ(o.parts.size(), 2u);
  EXPECT_EQ(o.total_bytes, 1024 * kMiB + 301989888);
}

TEST(NcclMemory, BufferSizeAndChannelKnobsChangeTheCommunicatorsBuffers) {
  // NCCL_BUFFSIZE 8 MiB: 24 x 16 MiB = 402,653,184.
  const Scenario big = parse_scenario(scenario_json(), "s.json", {"nccl.buffsize=8388608"});
  EXPECT_EQ(part(overhead_of(big), "NCCL shard")->bytes, 24 * 16 * kMiB);
  // NCCL_MAX_NCHANNELS 4: 4 x 12 MiB.
  const Scenario few = parse_scenario(scenario_json(), "s.json", {"nccl.max_nchannels=4"});
  EXPECT_EQ(part(overhead_of(few), "NCCL shard")->bytes, 4 * 12 * kMiB);
  // LL and LL128 halved: receive ALIGN(4096 + 262,144 + 2,457,600 + 4,194,304 = 6,918,144) =
  // 4 x 2 MiB; + 2 MiB send = 10 MiB per channel, x 24.
  const Scenario small = parse_scenario(scenario_json(), "s.json", {"nccl.ll_buffsize=262144", "nccl.ll128_buffsize=2457600"});
  EXPECT_EQ(part(overhead_of(small), "NCCL shard")->bytes, 24 * 10 * kMiB);
}

TEST(NcclMemory, HsdpAddsTheReplicateCommunicator) {
  // 2 nodes x 8, HYBRID_SHARD: the shard group (8 on a node, 24 channels as above) and the
  // replicate group (2 ranks, one per node), whose all-reduce runs on its own communicator.
  const Scenario s = parse_scenario(scenario_json(2), "s.json", {"fsdp.strategy=HYBRID_SHARD"});
  const DeviceOverhead o = overhead_of(s);
  const CostModel cost(s);
  ASSERT_NE(part(o, "NCCL shard"), nullptr);
  EXPECT_EQ(part(o, "NCCL shard")->bytes, 301989888);
  const DeviceOverheadPart* replicate = part(o, "NCCL replicate");
  ASSERT_NE(replicate, nullptr);
  // Its channels: 2 x its ring graph's, doubled once more when that graph's bwIntra > 45 GB/s
  // with fewer than 16 (two nodes, Hopper); each channel 12 MiB (priced as P2P, said so).
  const NcclGraph g = cost.ring_graph({"replicate", 2, 2, 8});
  int channels = 2 * g.channels;
  if (g.bw_intra_gbps > 45 && channels < 16) channels *= 2;
  EXPECT_EQ(replicate->bytes, channels * 12 * kMiB);
  EXPECT_EQ(o.total_bytes, 1024 * kMiB + 301989888 + channels * 12 * kMiB);
  EXPECT_FALSE(o.not_counted.empty());  // the node-crossing connections are named
}

TEST(NcclMemory, ACollectiveMemoGivesTheSameOverheadAndTiming) {
  // The overhead's NCCL estimates through a memo (a sweep worker's, estimate_step's), which
  // price_ops then reads: the same parts as without it, and the same op costs.
  const Scenario s = parse_scenario(scenario_json(2), "s.json", {"fsdp.strategy=HYBRID_SHARD"});
  const Plan plan = plan_step(s);
  const CostModel cost(s);
  CollectiveMemo memo;
  const DeviceOverhead with = device_overhead(s, plan.schedule, cost, &memo);
  const DeviceOverhead without = device_overhead(s, plan.schedule, cost);
  EXPECT_FALSE(memo.empty());
  EXPECT_EQ(with.total_bytes, without.total_bytes);
  ASSERT_EQ(with.parts.size(), without.parts.size());
  for (std::size_t k = 0; k < with.parts.size(); ++k) {
    EXPECT_EQ(with.parts[k].name, without.parts[k].name);
    EXPECT_EQ(with.parts[k].bytes, without.parts[k].bytes);
    EXPECT_EQ(with.parts[k].detail, without.parts[k].detail);
  }
  EXPECT_EQ(with.not_counted, without.not_counted);
  const OpCosts from_memo = price_ops(plan.schedule, cost, &memo), alone = price_ops(plan.schedule, cost);
  EXPECT_EQ(from_memo.duration_seconds, alone.duration_seconds);
  EXPECT_EQ(from_memo.latency_seconds, alone.latency_seconds);
}

TEST(NcclMemory, AMeasuredTotalReplacesTheModel) {
  nlohmann::json j = scenario_json();
  j["calibration"] = {{"device_overhead_bytes", 2e9}};
  const DeviceOverhead o = overhead_of(parse_scenario(j, "s.json"));
  EXPECT_TRUE(o.measured);
  EXPECT_EQ(o.total_bytes, 2e9);
  ASSERT_EQ(o.parts.size(), 1u);
  // And the context assumption is a calibration field a user sets.
  j["calibration"] = {{"cuda_context_bytes", 5e8}};
  const DeviceOverhead set = overhead_of(parse_scenario(j, "s.json"));
  EXPECT_EQ(part(set, "CUDA context")->bytes, 5e8);
  EXPECT_EQ(set.total_bytes, 5e8 + 301989888);
}

TEST(NcclMemory, BadSettingsNameFileAndPath) {
  for (const auto& [bad, path] : std::vector<std::pair<std::string, std::string>>{
           {"nccl.buffsize=-1", "nccl.buffsize"},
           {"nccl.buffsize=0", "nccl.buffsize"},
           {"nccl.ll_buffsize=\"big\"", "nccl.ll_buffsize"},
           {"nccl.ll128_buffsize=1e400", "nccl.ll128_buffsize"},
           {"nccl.max_nchannels=65", "nccl.max_nchannels"},
           {"nccl.min_nchannels=0", "nccl.min_nchannels"},
           {"nccl.max_nchannels=2.5", "nccl.max_nchannels"},
           {"nccl.nchannels=4", "nccl.nchannels"}}) {
    const InputError e = error_of({bad});
    EXPECT_EQ(e.file(), "s.json") << bad;
    EXPECT_EQ(e.json_path(), path) << bad << ": " << e.what();
  }
  const InputError e = error_of({"nccl.min_nchannels=16", "nccl.max_nchannels=8"});
  EXPECT_EQ(e.json_path(), "nccl.min_nchannels") << e.what();
}

}  // namespace
}  // namespace fsdpsim::planner
