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
