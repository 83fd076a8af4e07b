// [Near capacity] (planner/device_memory.h): a step that fits with less to spare than the
// reserved-memory model's tolerance (5% of the predicted reserved bytes) is warned about.
// Figures worked by hand.
#include <gtest/gtest.h>

#include "planner/device_memory.h"
#include "planner/memory.h"
#include "planner/schedule.h"
#include "synthetic.h"

namespace fsdpsim::planner {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

TEST(NearCapacity, WarnsWithinTheReservedModelsTolerance) {
  // 80 GiB GPU, 77 GiB reserved, 79 GiB on the device: 1 GiB = 1,024 MiB spare, under 5% of
  // 77 GiB = 3.85 GiB = 3,942 MiB (3,942.4 rounded).
  const std::string w = near_capacity_warning(80 * kGiB, 79 * kGiB, 77 * kGiB);
  EXPECT_NE(w.find("1024 MiB to spare"), std::string::npos) << w;
  EXPECT_NE(w.find("5% of the predicted reserved 78848 MiB = 3942 MiB"), std::string::npos) << w;
  EXPECT_NE(w.find("num_alloc_retries"), std::string::npos) << w;
}

TEST(NearCapacity, SilentWithTheToleranceToSpareOrWhenTheStepDoesNotFit) {
  // Spare exactly 5% of the reserved bytes: 40 GiB reserved, 2 GiB spare.
  EXPECT_EQ(near_capacity_warning(80 * kGiB, 78 * kGiB, 40 * kGiB), "");
  // Just under it: warned.
  EXPECT_NE(near_capacity_warning(80 * kGiB, 78 * kGiB + 1024, 40 * kGiB), "");
  // Over the GPU: the step does not fit, which is reported apart.
  EXPECT_EQ(near_capacity_warning(80 * kGiB, 81 * kGiB, 77 * kGiB), "");
  // Nothing reserved and the GPU nearly full of overhead: no tolerance to be within.
  EXPECT_EQ(near_capacity_warning(80 * kGiB, 79 * kGiB, 0), "");
}

// The replay freed its cache to fit (MemoryReport::allocator_retries): warned with any margin,
// the count said; with none, as before.
TEST(NearCapacity, WarnsWhenTheReplayRetriedWhateverTheMargin) {
  // 40 GiB reserved, 10 GiB = 10,240 MiB spare (well over 5% = 2,048 MiB), 2 retries.
  const std::string roomy = near_capacity_warning(80 * kGiB, 70 * kGiB, 40 * kGiB, 2);
  EXPECT_NE(roomy.find("10240 MiB to spare, but the caching-allocator model fits it only by freeing its cache 2 times"),
            std::string::npos) << roomy;
  EXPECT_EQ(roomy.find("tolerance"), std::string::npos) << roomy;
  EXPECT_EQ(near_capacity_warning(80 * kGiB, 70 * kGiB, 40 * kGiB, 0), "");
  // Within the tolerance too: both said.
  const std::string tight = near_capacity_warning(80 * kGiB, 79 * kGiB, 77 * kGiB, 1);
  EXPECT_NE(tight.find("= 3942 MiB), and the caching-allocator model fits it only by freeing its cache 1 time"),
            std::string::npos) << tight;
  // A step that does not fit: reported apart, retries or not.
  EXPECT_EQ(near_capacity_warning(80 * kGiB, 81 * kGiB, 77 * kGiB, 3), "");
}

// MemoryReport::allocator_retries counts the step's retries, not the job prelude's. Capacity
// 120 MiB, by hand. Prelude: a 100 MiB init temporary on the compute stream, freed (a cached
// 100 MiB segment), then the 50 MiB persistent shard on the all-gather stream: 150 > 120, so the
// cache is freed first (a retry; 50 reserved). Step: 40 MiB on the compute stream, freed (cached:
// 90), then 40 MiB on the copy stream: 130 > 120, the cache freed again (the step's one retry;
// 90 reserved).
TEST(NearCapacity, TheReplaysRetriesAreTheStepsNotThePreludes) {
  constexpr std::int64_t kMiB = 1 << 20;
  Schedule s;
  auto allocation = [&](std::int64_t mib, Stream stream, bool persistent) {
    return fsdpsim::testing::add_allocation(s, mib * kMiB, persistent, stream);
  };
  const int init = allocation(100, Stream::compute, false), shard = allocation(50, Stream::all_gather, true);
  const int first = allocation(40, Stream::compute, false), second = allocation(40, Stream::copy, false);
  s.prelude = {{init, false}, {init, true}, {shard, false}};
  for (const int a : {first, second}) {
    Op op;
    op.id = static_cast<int>(s.ops.size());
    op.stream = s.allocations[a].stream;
    op.allocs = {a};
    op.frees = {a};
    s.ops.push_back(op);
  }
  const MemoryReport r = replay_memory(s, 120.0 * kMiB);
  EXPECT_EQ(r.allocator_retries, 1);
  EXPECT_EQ(r.allocated_at_start, 50 * kMiB);
}

}  // namespace
}  // namespace fsdpsim::planner
