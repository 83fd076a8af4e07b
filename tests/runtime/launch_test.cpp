// The launcher's choice, and the form in which an mpi launch sends each rank's result to
// rank 0 (it must come back whole: rank 0 reports from it).
#include <gtest/gtest.h>

#include <cstdlib>
#include <stdexcept>

#include "runtime/launch.h"
#include "runtime/runtime.h"
#include "runtime_scenarios.h"

namespace fsdpsim::runtime {
namespace {

TEST(Launch, SingleUnlessSeveralProcessesWereStartedTogether) {
  ASSERT_EQ(std::getenv("OMPI_COMM_WORLD_SIZE"), nullptr) << "run this test outside mpirun";
  const Launch single = resolve_launch("single");
  EXPECT_EQ(single.launcher, "single");
  EXPECT_FALSE(single.mpi());
  EXPECT_EQ(single.processes, 1);
  const Launch automatic = resolve_launch("auto");
  EXPECT_EQ(automatic.launcher, "single") << automatic.detected_from;
  EXPECT_THROW(resolve_launch("slurm"), InputError);
  // No mpirun or srun started this process: mpi is refused (built or not) before MPI starts.
  EXPECT_THROW(resolve_launch("mpi"), InputError);
}

TEST(Launch, RankResultsRoundTripThroughJsonWhole) {
  const planner::Schedule s = testing::plan(testing::scenario(1, 2, {{"version", 2}}));
  RunOptions o = testing::fast_host(s);
  o.steps = 2;
  const RunResult r = run_schedule(s, o);
  ASSERT_EQ(r.launcher, "single");
  ASSERT_TRUE(r.reports());
  for (const RankResult& rank : r.ranks) {
    // Through text, as MPI_Gatherv carries it.
    const RankResult back = rank_result_from_json(nlohmann::json::parse(rank_result_to_json(rank).dump()));
    EXPECT_EQ(back.rank, rank.rank);
    ASSERT_EQ(back.steps.size(), 2u);
    for (std::size_t k = 0; k < rank.steps.size(); ++k) {
      ASSERT_EQ(back.steps[k].size(), rank.steps[k].size());
      for (std::size_t i = 0; i < rank.steps[k].size(); ++i) {
        EXPECT_EQ(back.steps[k][i].start_seconds, rank.steps[k][i].start_seconds);
        EXPECT_EQ(back.steps[k][i].end_seconds, rank.steps[k][i].end_seconds);
      }
    }
    EXPECT_EQ(back.step_seconds, rank.step_seconds);
    EXPECT_EQ(back.allocated_at_start_bytes, rank.allocated_at_start_bytes);
    EXPECT_EQ(back.peak_allocated_bytes, rank.peak_allocated_bytes);
    EXPECT_EQ(back.peak_op, rank.peak_op);
    EXPECT_EQ(back.peak_reserved_bytes, rank.peak_reserved_bytes);
    EXPECT_EQ(back.allocator_retries, rank.allocator_retries);
    EXPECT_EQ(back.allocated_at_op, rank.allocated_at_op);
    ASSERT_EQ(back.memory.size(), rank.memory.size());
    ASSERT_FALSE(rank.memory.empty());
    for (std::size_t i = 0; i < rank.memory.size(); ++i) {
      EXPECT_EQ(back.memory[i].time_seconds, rank.memory[i].time_seconds);
      EXPECT_EQ(back.memory[i].op, rank.memory[i].op);
      EXPECT_EQ(back.memory[i].allocated_bytes, rank.memory[i].allocated_bytes);
      EXPECT_EQ(back.memory[i].reserved_bytes, rank.memory[i].reserved_bytes);
    }
    EXPECT_EQ(back.device_used_before_bytes, rank.device_used_before_bytes);
    EXPECT_EQ(back.device_used_peak_bytes, rank.device_used_peak_bytes);
    EXPECT_EQ(back.scratch_bytes, rank.scratch_bytes);
    EXPECT_EQ(back.collectives_checked, rank.collectives_checked);
    EXPECT_GT(back.collectives_checked, 0);
  }
  // Host peaks (CPU offload's state) travel too: they were dropped by the gather (session-38 audit).
  RankResult offloaded = r.ranks.at(0);
  offloaded.peak_host_pinned_bytes = 3 << 20;
  offloaded.peak_host_pageable_bytes = 5 << 20;
  offloaded.peak_host_bytes = 7 << 20;  // the sum's peak, not the peaks' sum
  const RankResult back = rank_result_from_json(nlohmann::json::parse(rank_result_to_json(offloaded).dump()));
  EXPECT_EQ(back.peak_host_pinned_bytes, 3 << 20);
  EXPECT_EQ(back.peak_host_pageable_bytes, 5 << 20);
  EXPECT_EQ(back.peak_host_bytes, 7 << 20);
}

}  // namespace
}  // namespace fsdpsim::runtime
