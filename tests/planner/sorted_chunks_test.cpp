// planner/sorted_chunks.h: the chunked free list holds what the one sorted vector it
// replaced held, in the same order, and finds the same elements (checked against that vector,
// std::lower_bound and vector::insert, through thousands of random inserts and erases that
// split chunks, empty them and fill them again).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "planner/sorted_chunks.h"

namespace fsdpsim::planner {
namespace {

// A key with a tag that the order ignores: equal keys keep their insertion order (each new
// one before its equals), which the test can see.
struct Entry {
  std::int64_t key;
  int tag;
  bool operator<(const Entry& o) const { return key < o.key; }
};

std::vector<Entry> contents(const SortedChunks<Entry>& s) {
  std::vector<Entry> out;
  for (auto it = s.begin(); it != s.end(); ++it) out.push_back(*it);
  return out;
}

void expect_same(const std::vector<Entry>& want, const SortedChunks<Entry>& got) {
  const std::vector<Entry> g = contents(got);
  ASSERT_EQ(g.size(), want.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    EXPECT_EQ(g[i].key, want[i].key) << i;
    EXPECT_EQ(g[i].tag, want[i].tag) << i;
  }
  EXPECT_EQ(got.empty(), want.empty());
  if (!want.empty()) {
    EXPECT_EQ(got.back().tag, want.back().tag);
  }
}

TEST(SortedChunks, SameOrderAndSearchesAsOneSortedVector) {
  std::mt19937 rng(19);
  SortedChunks<Entry> chunks;
  std::vector<Entry> vec;
  int tag = 0;
  // Phases that grow the list past several chunks, shrink it to nothing and grow it again;
  // keys from a small range so that many are equal.
  for (const int target : {600, 0, 300, 5, 900, 0}) {
    for (int step = 0; step < 3000; ++step) {
      const bool grow = static_cast<int>(vec.size()) < target ? rng() % 4 != 0 : rng() % 4 == 0;
      if (grow) {
        const Entry e{static_cast<std::int64_t>(rng() % 97), tag++};
        chunks.insert(e);
        vec.insert(std::lower_bound(vec.begin(), vec.end(), e), e);
      } else if (!vec.empty()) {
        // Erase the first element not below a random key, as the allocator's unlist does.
        const Entry probe{static_cast<std::int64_t>(rng() % 100), -1};
        const auto v = std::lower_bound(vec.begin(), vec.end(), probe);
        const auto c = chunks.lower_bound(probe);
        ASSERT_EQ(v == vec.end(), c == chunks.end());
        if (v == vec.end()) continue;
        EXPECT_EQ(c->tag, v->tag);
        vec.erase(v);
        chunks.erase(c);
      }
      // A search by key alone, as the allocator's best fit does.
      const std::int64_t want = static_cast<std::int64_t>(rng() % 100);
      auto by_key = [](const Entry& e, std::int64_t k) { return e.key < k; };
      const auto v = std::lower_bound(vec.begin(), vec.end(), want, by_key);
      const auto c = chunks.lower_bound(want, by_key);
      ASSERT_EQ(v == vec.end(), c == chunks.end());
      if (v != vec.end()) {
        EXPECT_EQ(c->tag, v->tag);
      }
    }
    expect_same(vec, chunks);
  }
}

// replace(at, value) leaves what erase(at) then insert(value) leaves: the same elements in the
// same order (equal keys: the new one before its equals), whether the value moves towards the
// front, towards the back, stays, or crosses into another chunk (the list grows past several).
TEST(SortedChunks, ReplaceIsEraseThenInsert) {
  std::mt19937 rng(22);
  SortedChunks<Entry> chunks;
  std::vector<Entry> vec;
  int tag = 0;
  int moved_front = 0, moved_back = 0;
  for (const int target : {40, 700, 3, 300}) {
    for (int step = 0; step < 4000; ++step) {
      if (static_cast<int>(vec.size()) < target || vec.empty()) {
        const Entry e{static_cast<std::int64_t>(rng() % 997), tag++};
        chunks.insert(e);
        vec.insert(std::lower_bound(vec.begin(), vec.end(), e), e);
        continue;
      }
      const Entry probe{static_cast<std::int64_t>(rng() % 1000), -1};
      auto v = std::lower_bound(vec.begin(), vec.end(), probe);
      if (v == vec.end()) v = vec.begin();
      const auto c = chunks.lower_bound(*v);  // the first of v's equals: the same element
      ASSERT_EQ(c->tag, vec[static_cast<std::size_t>(std::lower_bound(vec.begin(), vec.end(), *v) - vec.begin())].tag);
      const std::size_t at = static_cast<std::size_t>(std::lower_bound(vec.begin(), vec.end(), *v) - vec.begin());
      // Mostly small moves (an allocator's split or merge), sometimes far, sometimes onto equals.
      const std::int64_t delta = rng() % 3 == 0 ? static_cast<std::int64_t>(rng() % 997) - 498
                                                : static_cast<std::int64_t>(rng() % 7) - 3;
      const Entry e{std::clamp<std::int64_t>(vec[at].key + delta, 0, 996), tag++};
      moved_front += e.key < vec[at].key;
      moved_back += e.key > vec[at].key;
      vec.erase(vec.begin() + static_cast<std::ptrdiff_t>(at));
      vec.insert(std::lower_bound(vec.begin(), vec.end(), e), e);
      chunks.replace(c, e);
    }
    expect_same(vec, chunks);
  }
  EXPECT_GT(moved_front, 1000);
  EXPECT_GT(moved_back, 1000);
}

}  // namespace
}  // namespace fsdpsim::planner
