// The cuda backend builds wherever the CUDA toolkit and NCCL are found. Without a GPU it
// must say so plainly; with one it must measure the planned memory.
#include <gtest/gtest.h>

#include "planner/memory.h"
#include "runtime/runtime.h"
#include "runtime_scenarios.h"

namespace fsdpsim::runtime {
namespace {

RunOptions cuda_options(const planner::Schedule& s) {
  RunOptions o;
  o.backend = "cuda";
  o.costs = planner::costs_from_durations(s, std::vector<double>(s.ops.size(), 0.0), "zero durations (tests)");
  o.timeout_seconds = 60;
  o.gemm_dim = 1024;
  o.copy_chunk_bytes = 8 << 20;
  return o;
}

#if FSDPSIM_WITH_CUDA

TEST(CudaBackend, RunsOnAGpuOrSaysThereIsNone) {
  const planner::Schedule s = testing::plan(testing::scenario(1, 2, {{"version", 2}}));
  const planner::MemoryReport predicted = planner::replay_memory(s);
  RunOptions o = cuda_options(s);
  o.virtual_world = s.world_size;  // one GPU is enough
  try {
    const RunResult r = run_schedule(s, o);
    ASSERT_EQ(r.ranks.size(), 1u);
    EXPECT_EQ(r.ranks[0].peak_allocated_bytes, predicted.peak_allocated_bytes);
    EXPECT_EQ(r.ranks[0].peak_reserved_bytes, predicted.peak_reserved_bytes);
    EXPECT_GT(r.ranks[0].device_used_peak_bytes, 0);
    EXPECT_GT(r.step_seconds(), 0);
  } catch (const RuntimeError& e) {
    // No GPU here (CI): the run must fail at once, with one clear line.
    EXPECT_EQ(e.kind(), FaultKind::device) << e.what();
    EXPECT_EQ(std::string(e.what()).rfind("no CUDA device: ", 0), 0u) << e.what();
    GTEST_SKIP() << "no GPU: " << e.what();
  }
}

TEST(CudaBackend, PlaysEveryRankWhenTheNodeHasTheGpus) {
  const planner::Schedule s = testing::plan(testing::scenario(1, 2, {{"version", 2}}));
  RunOptions o = cuda_options(s);
  try {
    const RunResult r = run_schedule(s, o);
    ASSERT_EQ(r.ranks.size(), 2u);
    for (const RankResult& rank : r.ranks)
      EXPECT_EQ(rank.peak_allocated_bytes, planner::replay_memory(s).peak_allocated_bytes);
  } catch (const RuntimeError& e) {
    EXPECT_EQ(e.kind(), FaultKind::device) << e.what();
    GTEST_SKIP() << e.what();
  }
}

#else

TEST(CudaBackend, NotBuiltIsAClearError) {
  const planner::Schedule s = testing::plan(testing::scenario(1, 2, {{"version", 2}}));
  try {
    run_schedule(s, cuda_options(s));
    FAIL() << "the cuda backend ran although it is not built";
  } catch (const RuntimeError& e) {
    EXPECT_NE(std::string(e.what()).find("not built"), std::string::npos) << e.what();
  }
}

#endif

}  // namespace
}  // namespace fsdpsim::runtime
