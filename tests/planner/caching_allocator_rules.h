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

#include "planner/schedule.h"

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

// PYTORCH_CUDA_ALLOC_CONF's expandable_segments and max_split_size_mb, worked by hand from the
// same file (commit 001074d2): Note [Expandable Segments] ("we use 2MiB pages for our small pool
// and 20MiB pages for our large pool"); find_expandable_block, map_block (ExpandableSegment::map
// rounds the end up to a page), try_allocate_expandable_block; get_free_block's oversize rules
// ("Do not return an oversized block for a large request"; an oversize request takes a cached
// block only if it is less than kLargeBuffer larger); should_split (expandable: remaining >=
// kMinBlockSize; else size < max_split_size && remaining > kSmallSize); release_blocks /
// unmap_block (whole free pages are unmapped). An allocator type for these tests is
// constructible from planner::AllocatorSettings and has release_cached_segments().
template <class Allocator>
class AllocatorSettingsRules : public ::testing::Test {};
TYPED_TEST_SUITE_P(AllocatorSettingsRules);

inline planner::AllocatorSettings expandable() {
  planner::AllocatorSettings s;
  s.expandable_segments = true;
  return s;
}
inline planner::AllocatorSettings max_split_mib(std::int64_t mib) {
  planner::AllocatorSettings s;
  s.max_split_size_bytes = mib * kMiB;
  return s;
}

// The "N + 1" pattern of Note [Expandable Segments]: eight 30 MiB tensors live, freed, then
// eight 32 MiB ones. Fixed segments: eight 30 MiB segments (>= kMinLargeAlloc: own size), none
// of which fits 32 MiB, then eight 32 MiB segments: 240 + 256 = 496 MiB reserved for 256 MiB
// allocated. Expandable: 8 x 30 = 240 MiB is 12 pages of 20 MiB exactly; freed, it is one
// 240 MiB block; seven 32 MiB requests split it (224 MiB), the eighth finds 16 MiB free before
// the unmapped space, maps one 20 MiB page (36 MiB), takes 32: 260 MiB reserved, 4 MiB over.
TYPED_TEST_P(AllocatorSettingsRules, ExpandableSegmentsDoNotFragmentWhereFixedSegmentsDo) {
  auto play = [](TypeParam& a) {
    std::vector<int> live;
    for (int i = 0; i < 8; ++i) live.push_back(a.allocate(30 * kMiB, 0));
    for (int h : live) a.free(h);
    for (int i = 0; i < 8; ++i) a.allocate(32 * kMiB, 0);
  };
  TypeParam fixed{planner::AllocatorSettings{}};
  play(fixed);
  EXPECT_EQ(fixed.reserved_bytes(), 496 * kMiB);
  TypeParam grown{expandable()};
  play(grown);
  EXPECT_EQ(grown.reserved_bytes(), 260 * kMiB);
}

// Growing by whole 20 MiB pages: 30 MiB maps 40; a second 30 MiB takes the 10 MiB left and
// maps one more page (60); a third maps two (100). Freeing the first leaves a free block at
// [0, 30 MiB); emptying the cache unmaps the one whole page inside it, [0, 20 MiB): 80 MiB.
TYPED_TEST_P(AllocatorSettingsRules, ExpandableSegmentsMapAndUnmapWholePages) {
  TypeParam a{expandable()};
  const int first = a.allocate(30 * kMiB, 0);
  EXPECT_EQ(a.reserved_bytes(), 40 * kMiB);
  a.allocate(30 * kMiB, 0);
  EXPECT_EQ(a.reserved_bytes(), 60 * kMiB);
  a.allocate(30 * kMiB, 0);
  EXPECT_EQ(a.reserved_bytes(), 100 * kMiB);
  a.free(first);
  EXPECT_EQ(a.reserved_bytes(), 100 * kMiB);  // cached until released
  a.release_cached_segments();
  EXPECT_EQ(a.reserved_bytes(), 80 * kMiB);
  // The unmapped hole at [0, 20 MiB) is the lowest address with room for 20 MiB (no cached
  // block holds it: the free ones are 10 MiB): it is mapped again and merges with the free
  // 10 MiB after it: 100 MiB.
  a.allocate(20 * kMiB, 0);
  EXPECT_EQ(a.reserved_bytes(), 100 * kMiB);
}

// Every block of an expandable segment may be split (remaining >= 512 B), so requests pack
// across page boundaries: forty 19.5 MiB requests use 780 MiB = 39 pages exactly. Fixed
// segments give each its own 20 MiB segment (>= kMinLargeAlloc: rounded to 2 MiB; the 0.5 MiB
// left is not split off, being <= kSmallSize): 800 MiB.
TYPED_TEST_P(AllocatorSettingsRules, ExpandableSegmentsPackSubPageRemainders) {
  const std::int64_t size = 39 * kMiB / 2;
  TypeParam fixed{planner::AllocatorSettings{}};
  TypeParam grown{expandable()};
  for (int i = 0; i < 40; ++i) {
    fixed.allocate(size, 0);
    grown.allocate(size, 0);
  }
  EXPECT_EQ(fixed.reserved_bytes(), 800 * kMiB);
  EXPECT_EQ(grown.reserved_bytes(), 780 * kMiB);
}

// Best fit takes a block followed by unmapped space last (it "can expand to" that much). A at
// [0, 24) and B at [24, 40) fill two pages; C maps two more, [40, 70), leaving [70, 80) free
// before the unmapped space. A freed: free blocks of 24 MiB (inside) and 10 MiB (the tail). A
// 10 MiB request takes the 24 MiB block, not the tail; a 20 MiB request then fits neither (14
// and 10) and maps one page after the tail: 100 MiB. Taking the tail first would leave the
// 24 MiB block for it: 80 MiB.
TYPED_TEST_P(AllocatorSettingsRules, ExpandableBestFitTakesTheGrowableTailLast) {
  TypeParam a{expandable()};
  const int first = a.allocate(24 * kMiB, 0);
  a.allocate(16 * kMiB, 0);
  a.allocate(30 * kMiB, 0);
  EXPECT_EQ(a.reserved_bytes(), 80 * kMiB);
  a.free(first);
  a.allocate(10 * kMiB, 0);
  EXPECT_EQ(a.reserved_bytes(), 80 * kMiB);
  a.allocate(20 * kMiB, 0);
  EXPECT_EQ(a.reserved_bytes(), 100 * kMiB);
}

// Small pool: 2 MiB pages. 600 KiB requests: the first maps one page (2 MiB), three fit in it
// (1800 KiB), the fourth needs 400 KiB more than the 248 KiB left: a second page, 4 MiB.
TYPED_TEST_P(AllocatorSettingsRules, ExpandableSmallPoolGrowsBy2MiBPages) {
  TypeParam a{expandable()};
  for (int i = 0; i < 3; ++i) a.allocate(600 * kKiB, 0);
  EXPECT_EQ(a.reserved_bytes(), 2 * kMiB);
  a.allocate(600 * kKiB, 0);
  EXPECT_EQ(a.reserved_bytes(), 4 * kMiB);
}

// One segment per stream: a second stream maps its own pages.
TYPED_TEST_P(AllocatorSettingsRules, ExpandableSegmentsArePerStream) {
  TypeParam a{expandable()};
  const int h = a.allocate(30 * kMiB, 0);
  a.free(h);
  a.allocate(30 * kMiB, 1);  // stream 0's free 40 MiB is not stream 1's
  EXPECT_EQ(a.reserved_bytes(), 80 * kMiB);
}

// max_split_size_mb:40. A cached 100 MiB block (>= 40 MiB: oversize) is not given to a 30 MiB
// request, which gets its own 30 MiB segment: 130 MiB (without the option the 100 MiB block
// is split: 100 MiB).
TYPED_TEST_P(AllocatorSettingsRules, MaxSplitSizeKeepsOversizeBlocksFromSmallerRequests) {
  auto play = [](TypeParam& a) {
    a.free(a.allocate(100 * kMiB, 0));
    a.allocate(30 * kMiB, 0);
  };
  TypeParam unlimited{planner::AllocatorSettings{}};
  play(unlimited);
  EXPECT_EQ(unlimited.reserved_bytes(), 100 * kMiB);
  TypeParam limited{max_split_mib(40)};
  play(limited);
  EXPECT_EQ(limited.reserved_bytes(), 130 * kMiB);
}

// An oversize request takes a cached oversize block only if it is less than kLargeBuffer
// (20 MiB) larger, and never splits it: with max_split_size_mb:40, a 90 MiB request takes the
// cached 100 MiB block whole (100 < 90 + 20); freed, a 70 MiB request does not (100 >= 70 +
// 20) and gets a 70 MiB segment: 170 MiB. Unlimited: the 100 MiB block serves both.
TYPED_TEST_P(AllocatorSettingsRules, MaxSplitSizeReusesOversizeBlocksWithinKLargeBuffer) {
  auto play = [](TypeParam& a) {
    a.free(a.allocate(100 * kMiB, 0));
    const int ninety = a.allocate(90 * kMiB, 0);
    EXPECT_EQ(a.reserved_bytes(), 100 * kMiB);
    a.free(ninety);
    a.allocate(70 * kMiB, 0);
  };
  TypeParam unlimited{planner::AllocatorSettings{}};
  play(unlimited);
  EXPECT_EQ(unlimited.reserved_bytes(), 100 * kMiB);
  TypeParam limited{max_split_mib(40)};
  play(limited);
  EXPECT_EQ(limited.reserved_bytes(), 170 * kMiB);
}

// An oversize block is never split: with max_split_size_mb:40 a 90 MiB request takes the
// cached 100 MiB block whole, so a 10 MiB request needs a segment of its own (10 MiB: >=
// kMinLargeAlloc): 110 MiB. Unlimited, the 10 MiB left after the split serves it: 100 MiB.
TYPED_TEST_P(AllocatorSettingsRules, MaxSplitSizeDoesNotSplitOversizeBlocks) {
  auto play = [](TypeParam& a) {
    a.free(a.allocate(100 * kMiB, 0));
    a.allocate(90 * kMiB, 0);
    a.allocate(10 * kMiB, 0);
  };
  TypeParam unlimited{planner::AllocatorSettings{}};
  play(unlimited);
  EXPECT_EQ(unlimited.reserved_bytes(), 100 * kMiB);
  TypeParam limited{max_split_mib(40)};
  play(limited);
  EXPECT_EQ(limited.reserved_bytes(), 110 * kMiB);
}

// Below max_split_size blocks split as before: a 30 MiB segment serves 12 and then 18 MiB.
TYPED_TEST_P(AllocatorSettingsRules, MaxSplitSizeStillSplitsSmallerBlocks) {
  TypeParam a{max_split_mib(40)};
  a.free(a.allocate(30 * kMiB, 0));
  a.allocate(12 * kMiB, 0);
  a.allocate(18 * kMiB, 0);
  EXPECT_EQ(a.reserved_bytes(), 30 * kMiB);
}

REGISTER_TYPED_TEST_SUITE_P(AllocatorSettingsRules, ExpandableSegmentsDoNotFragmentWhereFixedSegmentsDo,
                            ExpandableSegmentsMapAndUnmapWholePages, ExpandableSegmentsPackSubPageRemainders,
                            ExpandableBestFitTakesTheGrowableTailLast, ExpandableSmallPoolGrowsBy2MiBPages,
                            ExpandableSegmentsArePerStream, MaxSplitSizeKeepsOversizeBlocksFromSmallerRequests,
                            MaxSplitSizeReusesOversizeBlocksWithinKLargeBuffer, MaxSplitSizeDoesNotSplitOversizeBlocks,
                            MaxSplitSizeStillSplitsSmallerBlocks);

}  // namespace fsdpsim::testing
