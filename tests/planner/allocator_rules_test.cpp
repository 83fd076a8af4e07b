// The planner's caching-allocator model (planner/memory.cpp) against PyTorch's rules worked by
// hand (caching_allocator_rules.h names the source lines): rounding, segment sizes, pools,
// per-stream reuse, splitting and merging.
#include <gtest/gtest.h>

#include "caching_allocator_rules.h"
#include "planner/memory.h"

namespace fsdpsim::testing {
namespace {

using planner::CachingAllocatorModel;

// round_size and get_allocation_size themselves (CUDACachingAllocator.cpp; values by hand).
TEST(CachingAllocatorModelRules, RoundSizeIs512ByteGranular) {
  EXPECT_EQ(CachingAllocatorModel::round_size(1), 512);
  EXPECT_EQ(CachingAllocatorModel::round_size(511), 512);
  EXPECT_EQ(CachingAllocatorModel::round_size(512), 512);
  EXPECT_EQ(CachingAllocatorModel::round_size(513), 1024);
  EXPECT_EQ(CachingAllocatorModel::round_size(5 * kMiB + 1), 5 * kMiB + 512);
}

TEST(CachingAllocatorModelRules, SegmentSizeByRequestSize) {
  auto segment = [](std::int64_t bytes) {
    return CachingAllocatorModel::segment_size(CachingAllocatorModel::round_size(bytes));
  };
  EXPECT_EQ(segment(1), 2 * kMiB);                // small pool: kSmallBuffer
  EXPECT_EQ(segment(kMiB), 2 * kMiB);             // kSmallSize is still small
  EXPECT_EQ(segment(kMiB + 1), 20 * kMiB);        // 1 MiB < size < 10 MiB: kLargeBuffer
  EXPECT_EQ(segment(5 * kMiB), 20 * kMiB);
  EXPECT_EQ(segment(10 * kMiB - 512), 20 * kMiB);
  EXPECT_EQ(segment(10 * kMiB), 10 * kMiB);       // >= kMinLargeAlloc: own size, 2 MiB multiple
  EXPECT_EQ(segment(11 * kMiB), 12 * kMiB);
  EXPECT_EQ(segment(10 * kMiB + 512), 12 * kMiB);
}

INSTANTIATE_TYPED_TEST_SUITE_P(PlannerModel, CachingAllocatorRules, ::testing::Types<CachingAllocatorModel>);

}  // namespace
}  // namespace fsdpsim::testing
