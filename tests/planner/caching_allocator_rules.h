// PyTorch's caching-allocator rules worked by hand, as a type-parameterised GoogleTest suite
// that any allocator with allocate(bytes, stream) -> handle, free(handle) and reserved_bytes()
// instantiates: the planner's model (tests/planner/allocator_rules_test.cpp) and the runtime's
// allocator (tests/runtime/allocator_rules_test.cpp) each meet the same hand-worked values.
// Comparing the two with each other cannot catch an error in the rules they share
// (runtime/allocator.cpp calls planner::CachingAllocatorModel::round_size and segment_size);
// these values come from PyTorch's source, not from either implementation.
//
// Source: pytorch/pytorch c10/cuda/CUDACachingAllocator.cpp (the constants as at commit 001074d2):
//   kMinBlockSize = 512 ("all sizes are rounded to at least 512 bytes"), kSmallSize = 1 MiB
//   ("largest small allocation"), kSmallBuffer = 2 MiB ("small allocations are packed in 2 MiB
//   blocks"), kLargeBuffer = 20 MiB, kMinLargeAlloc = 10 MiB ("allocations between 1 and 10 MiB
//   may use kLargeBuffer"), kRoundLarge = 2 MiB;
//   round_size: size < kMinBlockSize ? kMinBlockSize : kMinBlockSize * ceil(size / kMinBlockSize)
//     (without the roundup_power2_divisions option);
//   get_allocation_size: size <= kSmallSize ? kSmallBuffer : size < kMinLargeAlloc ? kLargeBuffer
//     : kRoundLarge * ceil(size / kRoundLarge);
//   get_pool: size <= kSmallSize ? small_blocks : large_blocks;
//   should_split: small pool remaining >= kMinBlockSize, large pool remaining > kSmallSize;
//   get_free_block: the smallest cached block of the pool that fits, only if it belongs to the
//     requesting stream; free_block merges the freed block with free neighbours (try_merge_blocks).
// PyTorch's own test of the segment sizes: test/test_cuda.py,
// test_graph_memory_stats_and_use_result_after_destroy_graph: 512 B -> kSmallBuffer; kSmallSize
// -> small pool; kSmallSize + 512 and kMinLargeAlloc - 512 -> kLargeBuffer; kMinLargeAlloc + 512
// -> kRoundLarge * ceil((kMinLargeAlloc + 512) / kRoundLarge) = 12 MiB.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace fsdpsim::testing {

constexpr std::int64_t kKiB = 1024;
constexpr std::int64_t kMiB = 1024 * 1024;

// Reserved bytes after one request of `bytes` on a fresh allocator.
template <class Allocator>
std::int64_t segment_for(std::int64_t bytes) {
  Allocator a;
  a.allocate(bytes, 0);
  return a.reserved_bytes();
}

template <class Allocator>
class CachingAllocatorRules : public ::testing::Test {};
TYPED_TEST_SUITE_P(CachingAllocatorRules);

// 1 B is rounded to 512 B in a 2 MiB small segment: 2 MiB / 512 B = 4096 one-byte requests
// fill it exactly and the 4097th opens a second segment.
TYPED_TEST_P(CachingAllocatorRules, OneByteTakes512BytesOfA2MiBSegment) {
  TypeParam a;
  a.allocate(1, 0);
  EXPECT_EQ(a.reserved_bytes(), 2 * kMiB);
  for (int i = 1; i < 4096; ++i) a.allocate(1, 0);
  EXPECT_EQ(a.reserved_bytes(), 2 * kMiB);
  a.allocate(1, 0);
  EXPECT_EQ(a.reserved_bytes(), 4 * kMiB);
}

// 513 B rounds to 1024 B: 2048 of them fill a 2 MiB segment, the 2049th opens another. (Kept
// at 513 B each, 4088 would fit.)
TYPED_TEST_P(CachingAllocatorRules, RequestsRoundUpToMultiplesOf512Bytes) {
  TypeParam a;
  for (int i = 0; i < 2048; ++i) a.allocate(513, 0);
  EXPECT_EQ(a.reserved_bytes(), 2 * kMiB);
  a.allocate(513, 0);
  EXPECT_EQ(a.reserved_bytes(), 4 * kMiB);
}

// A small segment's remainder of exactly 512 B is split off and serves a 512 B request:
// 1 MiB + (1 MiB - 512) + 512 fill one 2 MiB segment.
TYPED_TEST_P(CachingAllocatorRules, SmallPoolSplitsRemaindersOf512Bytes) {
  TypeParam a;
  a.allocate(kMiB, 0);
  a.allocate(kMiB - 512, 0);
  a.allocate(512, 0);
  EXPECT_EQ(a.reserved_bytes(), 2 * kMiB);
  a.allocate(1, 0);
  EXPECT_EQ(a.reserved_bytes(), 4 * kMiB);
}

// Exactly 1 MiB (kSmallSize) is still small: two share one 2 MiB segment, a third opens another.
TYPED_TEST_P(CachingAllocatorRules, OneMiBRequestsShareA2MiBSegment) {
  TypeParam a;
  a.allocate(kMiB, 0);
  EXPECT_EQ(a.reserved_bytes(), 2 * kMiB);
  a.allocate(kMiB, 0);
  EXPECT_EQ(a.reserved_bytes(), 2 * kMiB);
  a.allocate(kMiB, 0);
  EXPECT_EQ(a.reserved_bytes(), 4 * kMiB);
}

// Above 1 MiB and below 10 MiB a request gets a 20 MiB segment (kLargeBuffer), which later
// requests of the same stream share: four 5 MiB requests fill one (each split leaves more than
// 1 MiB until the last takes the remaining 5 MiB whole), the fifth opens a second.
TYPED_TEST_P(CachingAllocatorRules, OneToTenMiBRequestsShare20MiBSegments) {
  EXPECT_EQ(segment_for<TypeParam>(kMiB + 1), 20 * kMiB);  // rounds to 1 MiB + 512: large pool
  EXPECT_EQ(segment_for<TypeParam>(kMiB + 512), 20 * kMiB);
  EXPECT_EQ(segment_for<TypeParam>(5 * kMiB), 20 * kMiB);
  EXPECT_EQ(segment_for<TypeParam>(10 * kMiB - 512), 20 * kMiB);
  TypeParam a;
  for (int i = 0; i < 4; ++i) a.allocate(5 * kMiB, 0);
  EXPECT_EQ(a.reserved_bytes(), 20 * kMiB);
  a.allocate(5 * kMiB, 0);
  EXPECT_EQ(a.reserved_bytes(), 40 * kMiB);
}

// From 10 MiB (kMinLargeAlloc) a request gets a segment of its own size rounded up to 2 MiB.
TYPED_TEST_P(CachingAllocatorRules, TenMiBAndAboveGetTheirOwnSizeRoundedTo2MiB) {
  EXPECT_EQ(segment_for<TypeParam>(10 * kMiB), 10 * kMiB);
  EXPECT_EQ(segment_for<TypeParam>(10 * kMiB + 512), 12 * kMiB);
  EXPECT_EQ(segment_for<TypeParam>(11 * kMiB), 12 * kMiB);
  EXPECT_EQ(segment_for<TypeParam>(12 * kMiB), 12 * kMiB);
  EXPECT_EQ(segment_for<TypeParam>(100 * kMiB + 1), 102 * kMiB);
}

// A freed block is reused only by its own stream: another stream's request opens a segment.
TYPED_TEST_P(CachingAllocatorRules, CachedBlocksServeOnlyTheirStream) {
  TypeParam a;
  a.free(a.allocate(5 * kMiB, 0));
  EXPECT_EQ(a.reserved_bytes(), 20 * kMiB);  // cached, not returned
  a.allocate(5 * kMiB, 1);
  EXPECT_EQ(a.reserved_bytes(), 40 * kMiB);
  a.allocate(5 * kMiB, 0);  // stream 0's cached segment serves it
  EXPECT_EQ(a.reserved_bytes(), 40 * kMiB);
}

// Freed neighbours merge: A = [0, 5) and B = [5, 10) MiB of one 20 MiB segment, the rest
// [10, 20) free. Freeing A, then B, merges B with the free block after it and with A before
// it: one 20 MiB free block, which an 18 MiB request fits. Without either merge it would not.
TYPED_TEST_P(CachingAllocatorRules, FreedNeighboursMergeOnBothSides) {
  TypeParam a;
  const int first = a.allocate(5 * kMiB, 0);
  const int second = a.allocate(5 * kMiB, 0);
  a.free(first);
  a.free(second);
  a.allocate(18 * kMiB, 0);
  EXPECT_EQ(a.reserved_bytes(), 20 * kMiB);
}

REGISTER_TYPED_TEST_SUITE_P(CachingAllocatorRules, OneByteTakes512BytesOfA2MiBSegment,
                            RequestsRoundUpToMultiplesOf512Bytes, SmallPoolSplitsRemaindersOf512Bytes,
                            OneMiBRequestsShareA2MiBSegment, OneToTenMiBRequestsShare20MiBSegments,
                            TenMiBAndAboveGetTheirOwnSizeRoundedTo2MiB, CachedBlocksServeOnlyTheirStream,
                            FreedNeighboursMergeOnBothSides);

}  // namespace fsdpsim::testing
