// A sorted sequence kept as consecutive sorted chunks of at most
// 2 x kChunk elements, for the caching-allocator model's free lists (planner/memory.h).
// A sorted vector moves its whole tail on every insert and erase; the free lists grow with the
// model's depth (Llama-3.1-405B on 1,024 GPUs: 128 to 512 entries), and those moves were a
// fifth of a 405B sweep's instructions (docs/benchmarks.md, issue 19). Here a move is bounded
// by a chunk. The order of the elements, and where an insert goes among equals, are those of
// the one sorted vector it replaces, so every search finds the same element.
#pragma once

#include <algorithm>
#include <cstddef>
#include <functional>
#include <iterator>
#include <vector>

namespace fsdpsim::planner {

template <class T>
class SortedChunks {
 public:
  static constexpr std::size_t kChunk = 64;

  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = T;
    using difference_type = std::ptrdiff_t;
    using pointer = const T*;
    using reference = const T&;
    const_iterator() = default;
    const T& operator*() const { return (*chunks_)[chunk_][pos_]; }
    const T* operator->() const { return &**this; }
    const_iterator& operator++() {
      if (++pos_ == (*chunks_)[chunk_].size()) {
        ++chunk_;
        pos_ = 0;
      }
      return *this;
    }
    bool operator==(const const_iterator& o) const { return chunk_ == o.chunk_ && pos_ == o.pos_; }
    bool operator!=(const const_iterator& o) const { return !(*this == o); }

   private:
    friend class SortedChunks;
    const_iterator(const std::vector<std::vector<T>>* chunks, std::size_t chunk, std::size_t pos)
        : chunks_(chunks), chunk_(chunk), pos_(pos) {}
    const std::vector<std::vector<T>>* chunks_ = nullptr;
    std::size_t chunk_ = 0, pos_ = 0;  // end: chunk_ == the number of chunks, pos_ == 0
  };

  bool empty() const { return chunks_.empty() || chunks_.front().empty(); }
  const_iterator begin() const { return empty() ? end() : const_iterator{&chunks_, 0, 0}; }
  const_iterator end() const { return {&chunks_, chunks_.size(), 0}; }
  const T& back() const { return chunks_.back().back(); }

  // The first element e with !less(e, key), as std::lower_bound over the whole sequence.
  template <class Key, class Less>
  const_iterator lower_bound(const Key& key, Less less) const {
    if (empty()) return end();
    // Chunks whose last element is below the key lie wholly below it; no chunk is empty.
    const auto chunk = std::partition_point(chunks_.begin(), chunks_.end(),
                                            [&](const std::vector<T>& c) { return less(c.back(), key); });
    if (chunk == chunks_.end()) return end();
    const auto pos = std::lower_bound(chunk->begin(), chunk->end(), key, less);
    return {&chunks_, static_cast<std::size_t>(chunk - chunks_.begin()), static_cast<std::size_t>(pos - chunk->begin())};
  }
  const_iterator lower_bound(const T& value) const { return lower_bound(value, std::less<T>()); }

  // Inserts `value` before the first element not less than it (before its equals).
  void insert(const T& value) {
    if (empty()) {
      if (chunks_.empty()) chunks_.emplace_back();
      chunks_.front().push_back(value);
      return;
    }
    const_iterator at = lower_bound(value);
    if (at == end()) at = {&chunks_, chunks_.size() - 1, chunks_.back().size()};  // after the last
    std::vector<T>& c = chunks_[at.chunk_];
    c.insert(c.begin() + static_cast<std::ptrdiff_t>(at.pos_), value);
    if (c.size() > 2 * kChunk) {  // split in halves
      std::vector<T> upper(c.begin() + static_cast<std::ptrdiff_t>(kChunk), c.end());
      c.resize(kChunk);
      chunks_.insert(chunks_.begin() + static_cast<std::ptrdiff_t>(at.chunk_) + 1, std::move(upper));
    }
  }

  // The sequence erase(at) then insert(value) leaves, the elements between the two places moved
  // once instead of the chunk's tail twice. The caching-allocator model's free lists change an
  // entry's key in place at most allocations (a split leaves the remainder where the block was)
  // and frees (a merge grows the free neighbour's block). Across a chunk boundary: erase, insert.
  void replace(const_iterator at, const T& value) {
    std::vector<T>& c = chunks_[at.chunk_];
    const std::size_t p = at.pos_;
    const bool fits_after_previous_chunk = at.chunk_ == 0 || chunks_[at.chunk_ - 1].back() < value;
    const bool fits_before_next_chunk = at.chunk_ + 1 == chunks_.size() || !(chunks_[at.chunk_ + 1].front() < value);
    if (!fits_after_previous_chunk || !fits_before_next_chunk) {
      erase(at);
      insert(value);
      return;
    }
    const auto begin = c.begin();
    const auto here = begin + static_cast<std::ptrdiff_t>(p);
    if (p > 0 && !(c[p - 1] < value)) {  // moves towards the front: before its first non-smaller
      const auto to = std::lower_bound(begin, here, value);
      std::move_backward(to, here, here + 1);
      *to = value;
    } else if (p + 1 < c.size() && c[p + 1] < value) {  // towards the back: after the smaller ones
      const auto to = std::lower_bound(here + 1, c.end(), value);
      std::move(here + 1, to, here);
      *(to - 1) = value;
    } else {
      *here = value;
    }
  }

  void erase(const_iterator at) {
    std::vector<T>& c = chunks_[at.chunk_];
    c.erase(c.begin() + static_cast<std::ptrdiff_t>(at.pos_));
    // The last chunk left stays, empty, with its memory (a list empties and fills again often).
    if (c.empty() && chunks_.size() > 1) chunks_.erase(chunks_.begin() + static_cast<std::ptrdiff_t>(at.chunk_));
  }

 private:
  // Each sorted and non-empty (but a sole chunk, which may be empty); together, sorted.
  std::vector<std::vector<T>> chunks_;
};

}  // namespace fsdpsim::planner
