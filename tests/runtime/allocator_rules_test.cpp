// The runtime's caching allocator (runtime/allocator.cpp) against PyTorch's rules worked by
// hand: the same values as the planner's model meets (tests/planner/caching_allocator_rules.h
// names the PyTorch source lines), not the planner's replay, which shares the rounding
// functions and so could not catch an error in them.
#include <gtest/gtest.h>

#include "../planner/caching_allocator_rules.h"
#include "runtime/internal/allocator.h"

namespace fsdpsim::testing {
namespace {

// The allocator over bookkeeping-only segments (no capacity: never out of memory).
struct RuntimeAllocator {
  runtime::TrackingSegments segments;
  runtime::CachingAllocator allocator{segments};
  int allocate(std::int64_t bytes, int stream) { return allocator.allocate(bytes, stream); }
  void free(int handle) { allocator.free(handle); }
  std::int64_t reserved_bytes() const { return allocator.reserved_bytes(); }
};

INSTANTIATE_TYPED_TEST_SUITE_P(RuntimeAllocator, CachingAllocatorRules, ::testing::Types<RuntimeAllocator>);

// Under PYTORCH_CUDA_ALLOC_CONF's settings: expandable segments are address space from the
// source with pages mapped in it.
struct RuntimeAllocatorWithSettings {
  runtime::TrackingSegments segments;
  runtime::CachingAllocator allocator;
  explicit RuntimeAllocatorWithSettings(planner::AllocatorSettings s) : allocator(segments, s) {}
  int allocate(std::int64_t bytes, int stream) { return allocator.allocate(bytes, stream); }
  void free(int handle) { allocator.free(handle); }
  void release_cached_segments() { allocator.release_cached_segments(); }
  std::int64_t reserved_bytes() const { return allocator.reserved_bytes(); }
};
INSTANTIATE_TYPED_TEST_SUITE_P(RuntimeAllocator, AllocatorSettingsRules, ::testing::Types<RuntimeAllocatorWithSettings>);

// Pointers into an expandable segment are its reserved base plus the block's offset: two
// 30 MiB blocks lie 30 MiB apart in one address range.
TEST(RuntimeAllocatorRules, ExpandableBlocksShareOneAddressRange) {
  RuntimeAllocatorWithSettings a{expandable()};
  const int first = a.allocate(30 * kMiB, 0);
  const int second = a.allocate(30 * kMiB, 0);
  EXPECT_EQ(static_cast<char*>(a.allocator.pointer(second)) - static_cast<char*>(a.allocator.pointer(first)),
            30 * kMiB);
}

// With a capacity the source refuses pages past it; the allocator unmaps its free pages and
// tries again (one retry), then reports out of memory.
TEST(RuntimeAllocatorRules, ExpandablePagesPastTheCapacityAreOutOfMemory) {
  runtime::TrackingSegments segments(60.0 * kMiB);
  runtime::CachingAllocator allocator(segments, expandable());
  allocator.free(allocator.allocate(30 * kMiB, 0));  // 40 MiB mapped, free
  allocator.allocate(30 * kMiB, 1);                  // needs 40 more: stream 0's pages go
  EXPECT_EQ(allocator.reserved_bytes(), 40 * kMiB);
  EXPECT_EQ(allocator.retries(), 1);
  allocator.allocate(30 * kMiB, 1);  // the free 10 MiB and one more page: 60 MiB
  EXPECT_EQ(allocator.reserved_bytes(), 60 * kMiB);
  EXPECT_THROW(allocator.allocate(30 * kMiB, 1), runtime::OutOfMemory);  // two more pages: 100 > 60
}

// allocated counts the live requests as made (runtime/allocator.h), reserved the segments; a
// freed block's segment stays reserved until the cache is emptied.
TEST(RuntimeAllocatorRules, AllocatedIsTheRequestsReservedTheSegments) {
  RuntimeAllocator a;
  const int one = a.allocate(513, 0);
  a.allocate(5 * kMiB, 0);
  EXPECT_EQ(a.allocator.allocated_bytes(), 513 + 5 * kMiB);
  EXPECT_EQ(a.reserved_bytes(), 2 * kMiB + 20 * kMiB);
  a.free(one);
  EXPECT_EQ(a.allocator.allocated_bytes(), 5 * kMiB);
  EXPECT_EQ(a.reserved_bytes(), 22 * kMiB);  // the small segment stays cached
  a.allocator.release_cached_segments();     // torch.cuda.empty_cache()
  EXPECT_EQ(a.reserved_bytes(), 20 * kMiB);
}

}  // namespace
}  // namespace fsdpsim::testing
