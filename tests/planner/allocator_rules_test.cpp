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

// The model under PYTORCH_CUDA_ALLOC_CONF's settings (no capacity).
struct ModelWithSettings {
  CachingAllocatorModel model;
  explicit ModelWithSettings(planner::AllocatorSettings s) : model(0, nullptr, s) {}
  int allocate(std::int64_t bytes, int stream) { return model.allocate(bytes, stream); }
  void free(int handle) { model.free(handle); }
  void release_cached_segments() { model.release_cached_segments(); }
  std::int64_t reserved_bytes() const { return model.reserved_bytes(); }
};
INSTANTIATE_TYPED_TEST_SUITE_P(PlannerModel, AllocatorSettingsRules, ::testing::Types<ModelWithSettings>);

// Over capacity with max_split_size_mb:40 (release_available_cached_blocks): a 30 MiB request
// that may not take the cached 100 MiB block needs a 30 MiB segment, past a 120 MiB capacity
// (130); the oversize segment is released first (the best fit for max(30, 40) MiB) and that is
// enough: 30 MiB reserved, no full retry. Unlimited, the cached block serves it: 100 MiB.
TEST(CachingAllocatorModelRules, OverCapacityReleasesOversizeSegmentsFirst) {
  CachingAllocatorModel limited(120.0 * kMiB, nullptr, max_split_mib(40));
  limited.free(limited.allocate(100 * kMiB, 0));
  limited.allocate(30 * kMiB, 0);
  EXPECT_EQ(limited.reserved_bytes(), 30 * kMiB);
  EXPECT_EQ(limited.retries(), 0);
}

// Over capacity with expandable segments: 40 MiB mapped on stream 0 and freed; stream 1's
// 30 MiB needs 40 MiB more, past a 60 MiB capacity: the cache is released (stream 0's two
// free pages unmapped, one retry) and stream 1 maps its 40: 40 MiB.
TEST(CachingAllocatorModelRules, OverCapacityUnmapsFreeExpandablePages) {
  CachingAllocatorModel a(60.0 * kMiB, nullptr, expandable());
  a.free(a.allocate(30 * kMiB, 0));
  a.allocate(30 * kMiB, 1);
  EXPECT_EQ(a.reserved_bytes(), 40 * kMiB);
  EXPECT_EQ(a.retries(), 1);
}

}  // namespace
}  // namespace fsdpsim::testing
