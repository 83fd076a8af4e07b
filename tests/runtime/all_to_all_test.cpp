// The host backend plays all-to-alls (Mixture-of-Experts dispatch and combine) like every other
// collective: member m's chunk j lands in member j's output at m, every output is checked, a
// corrupted one is caught, and the memory it measures is the planner's to the byte, on a
// hand-built MoE layer and on the planner's own expert-parallel step.
#include <gtest/gtest.h>

#include <numeric>
#include <thread>

#include "planner/memory.h"
#include "runtime/internal/host_comm.h"
#include "runtime/runtime.h"
#include "runtime_scenarios.h"
#include "../planner/synthetic.h"

namespace fsdpsim::runtime {
namespace {

using detail::Barrier;
using planner::MemCategory;
using planner::Op;
using planner::OpKind;
using planner::Stream;

TEST(HostAllToAll, ChunkJOfMemberMLandsInMemberJAtM) {
  const int k = 4;
  const std::size_t c = 250;  // elements per member pair
  std::vector<std::vector<float>> in(k, std::vector<float>(c * k));
  for (int m = 0; m < k; ++m)
    for (std::size_t i = 0; i < c * k; ++i) in[m][i] = static_cast<float>(m * 100000 + static_cast<int>(i));
  std::vector<int> ranks(k);
  std::iota(ranks.begin(), ranks.end(), 20);
  HostCommunicator comm(ranks);
  std::atomic<bool> abort{false};
  std::vector<std::vector<float>> out(k, std::vector<float>(c * k, -1.0f));
  std::vector<Barrier::Result> results(k);
  std::vector<std::thread> threads;
  for (int j = 0; j < k; ++j)
    threads.emplace_back([&, j] {
      HostCommunicator::Call call{3, OpKind::all_to_all, in[j].data(), c * k, out[j].data(), c * k};
      results[j] = comm.run(j, call, detail::Clock::now() + std::chrono::seconds(5), abort);
    });
  for (auto& t : threads) t.join();
  for (auto r : results) EXPECT_EQ(r, Barrier::Result::ok);
  for (int j = 0; j < k; ++j)
    for (int m = 0; m < k; ++m)
      for (std::size_t i = 0; i < c; ++i)
        ASSERT_EQ(out[j][m * c + i], in[m][j * c + i]) << "member " << j << " from member " << m << " element " << i;
}

constexpr std::int64_t MiB = 1 << 20;

// One MoE layer's forward on a world of 8 in two expert-parallel groups of 4 ranks ("ep",
// stride 1: ranks 0-3 and 4-7), as a planner would emit it:
//   op 0 compute  route and permute the tokens: allocates the dispatch send buffer A (3 MiB)
//   op 1 a2a      dispatch (comm_bytes 3 MiB): allocates its receive buffer B (3 MiB)
//   op 2 compute  the local experts: allocates their output C (3 MiB), frees A
//   op 3 a2a      combine (3 MiB): allocates its receive buffer D (3 MiB), frees B
//   op 4 compute  unpermute: frees C and D
// Persistent: the rank's experts, 10 MiB. Allocated by hand: 10 + 3 (op 0) + 3 (op 1) + 3
// (op 2, before it frees A) = 19 MiB, the peak, first reached at op 2 (op 3 reaches it again).
planner::Schedule moe_layer() {
  planner::Schedule s;
  s.name = "moe layer";
  s.world_size = 8;
  s.groups = {{"ep", 4, 1, 1}};
  auto alloc = [&](const char* label, std::int64_t bytes, MemCategory c, Stream st, bool persistent) {
    const int id = fsdpsim::testing::add_allocation(s, bytes, persistent, st, c);
    s.allocations[id].label = label;
    s.allocations[id].model_state = persistent;
    return id;
  };
  const int experts = alloc("experts", 10 * MiB, MemCategory::sharded_param, Stream::compute, true);
  (void)experts;
  const int a = alloc("dispatch send", 3 * MiB, MemCategory::activation, Stream::compute, false);
  const int b = alloc("dispatch receive", 3 * MiB, MemCategory::activation, Stream::all_to_all, false);
  const int c = alloc("expert output", 3 * MiB, MemCategory::activation, Stream::compute, false);
  const int d = alloc("combine receive", 3 * MiB, MemCategory::activation, Stream::all_to_all, false);
  auto op = [&](OpKind kind, Stream st, const char* name, planner::IdList allocs, planner::IdList frees) {
    Op o;
    o.id = static_cast<int>(s.ops.size());
    o.kind = kind;
    o.stream = st;
    o.name = name;
    o.unit = 0;
    o.allocs = allocs;
    o.frees = frees;
    if (o.id > 0) o.deps = {o.id - 1};
    if (kind == OpKind::all_to_all) {
      o.group = 0;
      o.comm_bytes = 3 * MiB;
    } else {
      o.flops = 1e9;
    }
    s.ops.push_back(o);
  };
  op(OpKind::compute_fwd, Stream::compute, "route and permute", {a}, {});
  op(OpKind::all_to_all, Stream::all_to_all, "dispatch", {b}, {});
  op(OpKind::compute_fwd, Stream::compute, "experts", {c}, {a});
  op(OpKind::all_to_all, Stream::all_to_all, "combine", {d}, {b});
  op(OpKind::compute_fwd, Stream::compute, "unpermute", {}, {c, d});
  planner::validate_schedule(s, "moe layer");
  return s;
}

TEST(HostAllToAll, PlannedMoeLayerChecksEveryAllToAllAndMeasuresThePlannedPeak) {
  const planner::Schedule s = moe_layer();
  check_playable(s, "moe layer");
  RunOptions o = testing::fast_host(s);
  o.max_buffer_bytes = 4096;  // 1024 floats: 256 to each of the 4 members
  const RunResult r = run_schedule(s, o);
  const planner::MemoryReport predicted = planner::replay_memory(s);
  EXPECT_EQ(predicted.peak_allocated_bytes, 19 * MiB);
  EXPECT_EQ(predicted.peak_op, 2);
  ASSERT_EQ(r.ranks.size(), 8u);
  for (const RankResult& rank : r.ranks) {
    EXPECT_EQ(rank.collectives_checked, 2) << "rank " << rank.rank;
    EXPECT_EQ(rank.peak_allocated_bytes, 19 * MiB) << "rank " << rank.rank;
    EXPECT_EQ(rank.peak_op, 2) << "rank " << rank.rank;
    EXPECT_EQ(rank.peak_reserved_bytes, predicted.peak_reserved_bytes) << "rank " << rank.rank;
  }
  // The CUDA backend's buffers: the dispatch sends from A and receives into B, the combine
  // sends from C and receives into D (bind_collective_buffers).
  const std::vector<CollectiveBinding> bind = bind_collective_buffers(s);
  EXPECT_EQ(bind[1].main_alloc, 1);
  EXPECT_EQ(bind[1].output_alloc, 2);
  EXPECT_EQ(bind[3].main_alloc, 3);
  EXPECT_EQ(bind[3].output_alloc, 4);
}

// The planner's expert-parallel step of the tiny MoE model (tests/planner/synthetic.h; its
// peak worked out by hand in tests/planner/moe_test.cpp, ExpertParallel.WholeStepPeakByHand:
// 13904 B at layers.1's backward dispatch all-to-all, and the two cuBLAS workspaces the schedule
// holds from its start, 2 x 32 MiB on Hopper), through the schedule JSON the CLI reads:
// the 4 ranks play its 8 token all-to-alls and the 2 split-size exchanges before the forward
// dispatches (planner/ep_dispatch.h) on 2 EP groups and measure that peak to the byte.
TEST(HostAllToAll, PlannerExpertParallelStepMeasuresThePlannedPeak) {
  nlohmann::json scenario = fsdpsim::testing::moe_scenario();
  scenario["fsdp"]["expert_parallel"] = 2;
  const planner::Schedule s = testing::plan(scenario);
  const planner::MemoryReport predicted = planner::replay_memory(s);
  const std::int64_t peak = 13904 + fsdpsim::testing::kCublasWorkspacesHopper;
  ASSERT_EQ(predicted.peak_allocated_bytes, peak);
  int all_to_alls = 0, collectives = 0;
  for (const Op& op : s.ops) {
    all_to_alls += op.kind == OpKind::all_to_all;
    collectives += planner::is_collective(op.kind) && op.comm_bytes > 0;
  }
  ASSERT_EQ(all_to_alls, 8 + 2);
  const RunResult r = run_schedule(s, testing::fast_host(s));
  ASSERT_EQ(r.ranks.size(), 4u);
  for (const RankResult& rank : r.ranks) {
    SCOPED_TRACE("rank " + std::to_string(rank.rank));
    EXPECT_EQ(rank.collectives_checked, collectives);
    EXPECT_EQ(rank.peak_allocated_bytes, peak);
    EXPECT_EQ(rank.peak_op, predicted.peak_op);
    EXPECT_EQ(rank.allocated_at_op, predicted.allocated_at_op);
    EXPECT_EQ(rank.peak_reserved_bytes, predicted.peak_reserved_bytes);
  }
  // Each all-to-all receives into the buffer it allocates. The forward ones and the backward
  // dispatch send from a buffer made before them (the block's activations; the combine
  // backward's receive buffer); the combine backward sends the block's output gradient, which
  // the plan does not hold past the block's backward op (its input gradient is allocated and
  // freed there), so it has no send buffer of the plan's: the host backend sends from its own.
  const std::vector<CollectiveBinding> bind = bind_collective_buffers(s);
  for (const Op& op : s.ops) {
    if (op.kind != OpKind::all_to_all) continue;
    const bool combine_backward = op.name.rfind("all-to-all combine backward", 0) == 0;
    EXPECT_EQ(bind[op.id].main_alloc >= 0, !combine_backward) << op.name;
    EXPECT_EQ(bind[op.id].output_alloc, op.allocs.at(0)) << op.name;
  }
}

TEST(HostAllToAll, ACorruptedAllToAllOutputIsCaught) {
  const planner::Schedule s = moe_layer();
  RunOptions o = testing::fast_host(s);
  o.max_buffer_bytes = 4096;
  o.hooks.corrupt_rank = 5;
  o.hooks.corrupt_op = 3;
  try {
    run_schedule(s, o);
    FAIL() << "a corrupted all-to-all output went unnoticed";
  } catch (const RuntimeError& e) {
    EXPECT_EQ(e.kind(), FaultKind::data);
    EXPECT_EQ(e.rank(), 5);
    EXPECT_EQ(e.op(), 3);
    EXPECT_NE(std::string(e.what()).find("all_to_all"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace fsdpsim::runtime
