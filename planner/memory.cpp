#include "planner/memory.h"

#include <algorithm>
#include <limits>

#include "models/checked_arithmetic.h"

namespace fsdpsim::planner {

namespace {
constexpr std::int64_t kMinBlockSize = 512;              // kMinBlockSize
constexpr std::int64_t kSmallSize = 1 << 20;             // kSmallSize: 1 MiB
constexpr std::int64_t kSmallBuffer = 2 << 20;           // kSmallBuffer: 2 MiB
constexpr std::int64_t kMinLargeAlloc = 10 << 20;        // kMinLargeAlloc: 10 MiB
constexpr std::int64_t kLargeBuffer = 20 << 20;          // kLargeBuffer: 20 MiB
constexpr std::int64_t kRoundLarge = 2 << 20;            // kRoundLarge: 2 MiB
// An expandable segment's address space: 256 TiB, the figure Note [Expandable Segments] gives
// for the address space there is (PyTorch reserves 1 1/8 of the GPU's memory of it).
constexpr std::int64_t kExpandableAddressSpace = std::int64_t{1} << 48;
}  // namespace

std::int64_t CachingAllocatorModel::round_size(std::int64_t bytes) {
  if (bytes < kMinBlockSize) return kMinBlockSize;
  return checked_round_up(bytes, kMinBlockSize, "an allocation's size rounded to 512 bytes");
}

std::int64_t CachingAllocatorModel::segment_size(std::int64_t size) {
  if (size <= kSmallSize) return kSmallBuffer;
  if (size < kMinLargeAlloc) return kLargeBuffer;
  return checked_round_up(size, kRoundLarge, "a segment's size rounded to 2 MiB");
}

std::int64_t CachingAllocatorModel::expandable_page_size(bool small) { return small ? kSmallBuffer : kLargeBuffer; }

std::int64_t CachingAllocatorModel::expandable_address_space(bool small) {
  const std::int64_t page = expandable_page_size(small);
  return kExpandableAddressSpace / page * page;
}

void CachingAllocatorModel::grow_free_lists(std::size_t lists) { free_lists_.resize(lists); }

CachingAllocatorModel::FreeEntry CachingAllocatorModel::free_entry(int block) const {
  const Block& b = blocks_[block];
  return {b.size, b.offset, b.segment, block};
}

// Unmapped blocks are free but in no list: only mapped memory can be handed out as it is.
void CachingAllocatorModel::mark_free(int block) {
  blocks_[block].free = true;
  if (blocks_[block].prev < 0 && blocks_[block].next < 0) wholly_free_candidates_.push_back(blocks_[block].segment);
  if (!blocks_[block].mapped) return;
  const Segment& seg = segments_[blocks_[block].segment];
  auto& list = free_list(seg.stream, seg.small);
  const FreeEntry e = free_entry(block);
  list.insert(e);  // before its equals
}

void CachingAllocatorModel::unlist(int block) {
  const Segment& seg = segments_[blocks_[block].segment];
  auto& list = free_list(seg.stream, seg.small);
  const FreeEntry e = free_entry(block);
  auto it = list.lower_bound(e);
  if (it != list.end() && it->block == block) list.erase(it);
}

void CachingAllocatorModel::mark_used(int block) {
  unlist(block);
  blocks_[block].free = false;
}

// get_free_block: best fit, the smallest free block of the stream's pool that is large
// enough (among equal sizes the first in segment and address order), then the expandable and
// max_split_size rules. The block found leaves the list here, where the search already holds
// its place (a second search for it was a sixth of a sweep's replay).
int CachingAllocatorModel::take_free_block(std::int64_t size, int stream, bool small) {
  auto& list = free_list(stream, small);
  auto it = list.lower_bound(size, [](const FreeEntry& e, std::int64_t s) { return e.size < s; });
  if (it == list.end()) return -1;
  if (settings_.expandable_segments) {
    // A block followed by unmapped space counts as the size it can grow to, so a larger
    // block that cannot grow is taken before it.
    auto expandable_size = [&](const FreeEntry& e) {
      const Block& b = blocks_[e.block];
      return b.size + (b.next >= 0 && !blocks_[b.next].mapped ? blocks_[b.next].size : 0);
    };
    for (auto next = std::next(it); next != list.end() && expandable_size(*next) < expandable_size(*it); ++next) it = next;
  }
  const std::int64_t max_split = settings_.max_split_size_bytes;
  const std::int64_t found = blocks_[it->block].size;
  if (size < max_split && found >= max_split) return -1;  // "Do not return an oversized block for a large request"
  if (size >= max_split && found >= size + kLargeBuffer) return -1;  // oversize: rounded up by less than kLargeBuffer
  const int block = it->block;
  blocks_[block].free = false;
  // split: the rest keeps the block's place in the list under its own key (SortedChunks::replace,
  // what erasing the block and listing the rest leaves); else the block leaves the list.
  if (should_split(block, size)) split(block, size, &it);
  else list.erase(it);
  return block;
}

// should_split: small-pool blocks and every block of expandable segments split when 512 B
// or more remain; large-pool blocks of fixed segments when the request is below
// max_split_size and more than 1 MiB (kSmallSize) remains.
bool CachingAllocatorModel::should_split(int block, std::int64_t size) const {
  const std::int64_t remaining = blocks_[block].size - size;
  if (segments_[blocks_[block].segment].small || settings_.expandable_segments) return remaining >= kMinBlockSize;
  return size < settings_.max_split_size_bytes && remaining > kSmallSize;
}

void CachingAllocatorModel::split(int block, std::int64_t size, const FreeList::const_iterator* listed) {
  if (!should_split(block, size)) return;  // (take_free_block passes `listed` only to a split)
  const Block& blk = blocks_[block];
  const std::int64_t remaining = blk.size - size;
  const int rest = static_cast<int>(blocks_.size());
  blocks_.push_back({blk.segment, blk.offset + size, remaining, false, block, blk.next});
  Block& b = blocks_[block];  // push_back may have moved it
  if (b.next >= 0) blocks_[b.next].prev = rest;
  b.next = rest;
  b.size = size;
  if (!listed) return mark_free(rest);
  blocks_[rest].free = true;  // mark_free's flag; the rest has a neighbour, so no candidate
  const Segment& seg = segments_[b.segment];
  free_list(seg.stream, seg.small).replace(*listed, free_entry(rest));
}

void CachingAllocatorModel::free_after(int handle, int stream, int event_op) {
  if (event_op < 0) return free(handle);  // nothing queued on the stream: reusable at once
  pending_.push_back({handle, stream, event_op});
  pending_bytes_ += blocks_[handle].size;
}

void CachingAllocatorModel::completed_through(const StreamClock& clock) {
  std::size_t kept = 0;
  for (const Pending& p : pending_) {
    if (p.stream < kStreamCount && clock[p.stream] >= p.event_op) {
      pending_bytes_ -= blocks_[p.block].size;
      free(p.block);
    } else {
      pending_[kept++] = p;
    }
  }
  pending_.resize(kept);
}

void CachingAllocatorModel::release_pending() {
  for (const Pending& p : pending_) free(p.block);
  pending_.clear();
  pending_bytes_ = 0;
}

void CachingAllocatorModel::release_segment(int segment) {
  Segment& seg = segments_[segment];
  for (int b = seg.first; b >= 0; b = blocks_[b].next) unlist(b);
  seg.released = true;
  reserved_ -= seg.size;
  if (provider_) provider_->unmap(segment, seg.size);
}

// release_blocks: fixed segments whose blocks are all free go back whole; in expandable
// segments the whole pages inside free blocks are unmapped, and a segment left with no page
// mapped goes (release_expandable_segment).
void CachingAllocatorModel::release_cached_segments() {
  // Fixed segments: only those that were one free block since the last release can be
  // wholly free (wholly_free_candidates_); in segment order, as a scan of every segment would
  // release (and unmap) them. Expandable segments (one per stream and pool, all of them when
  // the setting is on): each, for the whole pages inside its free blocks.
  std::vector<int>& candidates = release_candidates_;
  candidates.clear();
  candidates.swap(wholly_free_candidates_);  // which keeps the cleared list's room for the next ones
  if (settings_.expandable_segments) {
    candidates.resize(segments_.size());
    for (std::size_t i = 0; i < segments_.size(); ++i) candidates[i] = static_cast<int>(i);
  }
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  for (const int i : candidates) {
    const Segment& seg = segments_[i];
    if (seg.released) continue;
    if (seg.expandable) {
      std::vector<int> free_blocks;
      for (int b = seg.first; b >= 0; b = blocks_[b].next)
        if (blocks_[b].free && blocks_[b].mapped) free_blocks.push_back(b);
      // Two free mapped blocks are never neighbours (they merge), so unmapping one never
      // absorbs another of the list.
      for (int b : free_blocks) unmap_free_pages(b);
      const Block& first = blocks_[segments_[i].first];
      if (!first.mapped && first.next < 0) segments_[i].released = true;
      continue;
    }
    bool all_free = true;
    for (int b = seg.first; b >= 0 && all_free; b = blocks_[b].next) all_free = blocks_[b].free;
    if (all_free) release_segment(i);
  }
}

std::vector<std::pair<int, std::int64_t>> CachingAllocatorModel::live_segments() const {
  std::vector<std::pair<int, std::int64_t>> out;
  for (std::size_t i = 0; i < segments_.size(); ++i)
    if (!segments_[i].released && !segments_[i].expandable) out.push_back({static_cast<int>(i), segments_[i].size});
  return out;
}

std::array<std::int64_t, kStreamCount> CachingAllocatorModel::reserved_by_stream() const {
  std::array<std::int64_t, kStreamCount> out{};
  for (const Segment& seg : segments_)
    if (!seg.released && seg.stream >= 0 && seg.stream < kStreamCount)
      out[static_cast<std::size_t>(seg.stream)] += seg.expandable ? seg.mapped_bytes : seg.size;
  return out;
}

std::vector<CachingAllocatorModel::PageRange> CachingAllocatorModel::mapped_pages() const {
  std::vector<PageRange> out;
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    const Segment& seg = segments_[i];
    if (seg.released || !seg.expandable) continue;
    for (int b = seg.first; b >= 0; b = blocks_[b].next) {
      if (!blocks_[b].mapped) continue;
      const Block& blk = blocks_[b];
      if (!out.empty() && out.back().segment == static_cast<int>(i) &&
          out.back().offset + out.back().bytes == blk.offset)
        out.back().bytes += blk.size;
      else
        out.push_back({static_cast<int>(i), blk.offset, blk.size});
    }
  }
  return out;
}

// release_available_cached_blocks (with max_split_size only): the best-fitting cached
// oversize block for max(size, max_split_size), or else the largest ones until that much is
// freed. A block of max_split_size or more is never split, so it is a whole segment.
bool CachingAllocatorModel::release_oversize_segments(std::int64_t size, int stream, bool small) {
  if (!settings_.max_split_size_set()) return false;
  const std::int64_t key = std::max(size, settings_.max_split_size_bytes);
  const auto& cached = free_list(stream, small);
  auto it = cached.lower_bound(key, [](const FreeEntry& e, std::int64_t s) { return e.size < s; });
  if (it != cached.end()) {
    release_segment(blocks_[it->block].segment);
    return true;
  }
  std::int64_t released = 0;
  while (released < key && !cached.empty() && cached.back().size >= settings_.max_split_size_bytes) {
    released += cached.back().size;
    release_segment(blocks_[cached.back().block].segment);  // takes it off the list
  }
  return released >= key;
}

// When a segment cannot be had, PyTorch frees oversize cached segments (max_split_size set),
// then all its cached segments, and tries once more (num_alloc_retries). Without a provider
// the model makes the segment anyway: the replay reports reserved memory past the capacity
// rather than failing.
bool CachingAllocatorModel::obtain_segment(int segment, std::int64_t bytes, std::int64_t size, int stream, bool small) {
  if (provider_) {
    if (provider_->map(segment, bytes)) return true;
    if (release_oversize_segments(size, stream, small) && provider_->map(segment, bytes)) return true;
    release_pending();
    release_cached_segments();
    ++retries_;
    return provider_->map(segment, bytes);
  }
  auto fits = [&] {
    const std::int64_t reserved_after = checked_add(reserved_, bytes, "reserved bytes");
    return capacity_bytes_ <= 0 || static_cast<double>(reserved_after) <= capacity_bytes_;
  };
  if (fits()) return true;
  if (release_oversize_segments(size, stream, small) && fits()) return true;
  release_pending();
  release_cached_segments();
  ++retries_;
  return true;
}

int CachingAllocatorModel::allocate_segment(std::int64_t size, int stream, bool small) {
  const std::int64_t seg_size = segment_size(size);
  const int segment = static_cast<int>(segments_.size());
  if (!obtain_segment(segment, seg_size, size, stream, small)) throw OutOfSegments(seg_size);
  const int block = static_cast<int>(blocks_.size());
  segments_.push_back({stream, small, seg_size, block, false});
  blocks_.push_back({segment, 0, seg_size, false});
  reserved_ = checked_add(reserved_, seg_size, "reserved bytes");
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  return block;
}

// find_expandable_block: the lowest unmapped block of the stream's pool from which (with the
// free block before it) enough free and unmapped space runs; else a new segment.
int CachingAllocatorModel::find_expandable_block(std::int64_t size, int stream, bool small) {
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    const Segment& seg = segments_[i];
    if (seg.released || !seg.expandable || seg.stream != stream || seg.small != small) continue;
    for (int b = seg.first; b >= 0; b = blocks_[b].next) {
      if (blocks_[b].mapped) continue;
      int candidate = b;
      if (blocks_[b].prev >= 0 && blocks_[blocks_[b].prev].free) candidate = blocks_[b].prev;
      std::int64_t room = 0;
      for (int x = candidate; x >= 0 && room < size && blocks_[x].free; x = blocks_[x].next) room += blocks_[x].size;
      if (room >= size) return candidate;
    }
  }
  const int segment = static_cast<int>(segments_.size());
  const int block = static_cast<int>(blocks_.size());
  const std::int64_t space = expandable_address_space(small);
  segments_.push_back({stream, small, space, block, false, true, 0});
  blocks_.push_back({segment, 0, space, true, -1, -1, false});
  return block;
}

bool CachingAllocatorModel::map_within_capacity(int segment, std::int64_t offset, std::int64_t bytes,
                                                bool after_release) {
  if (provider_) return provider_->map_pages(segment, segments_[segment].size, offset, bytes);
  if (after_release || capacity_bytes_ <= 0) return true;
  return static_cast<double>(checked_add(reserved_, bytes, "reserved bytes")) <= capacity_bytes_;
}

// map_block: whole pages from the block's start (ExpandableSegment::map rounds the end up to
// a page); the rest of the block stays unmapped after it. The mapped block merges with its
// free neighbours (try_merge_blocks).
int CachingAllocatorModel::map_block(int block, std::int64_t bytes, bool after_release) {
  const int segment = blocks_[block].segment;
  const std::int64_t page = expandable_page_size(segments_[segment].small);
  const std::int64_t mapped = std::min(checked_round_up(bytes, page, "mapped pages"), blocks_[block].size);
  if (!map_within_capacity(segment, blocks_[block].offset, mapped, after_release)) return -1;
  if (mapped < blocks_[block].size) {
    const int rest = static_cast<int>(blocks_.size());
    const Block b = blocks_[block];
    blocks_.push_back({segment, b.offset + mapped, b.size - mapped, true, block, b.next, false});
    if (b.next >= 0) blocks_[b.next].prev = rest;
    blocks_[block].next = rest;
    blocks_[block].size = mapped;
  }
  blocks_[block].mapped = true;
  segments_[segment].mapped_bytes += mapped;
  reserved_ = checked_add(reserved_, mapped, "reserved bytes");
  peak_reserved_ = std::max(peak_reserved_, reserved_);
  return coalesce(block);
}

// try_allocate_expandable_block: map the candidate if unmapped, then the unmapped space after
// it until the block holds `size`.
int CachingAllocatorModel::allocate_expandable(std::int64_t size, int stream, bool small, bool after_release) {
  int candidate = find_expandable_block(size, stream, small);
  if (!blocks_[candidate].mapped) {
    candidate = map_block(candidate, std::min(blocks_[candidate].size, size), after_release);
    if (candidate < 0) return -1;
  }
  while (blocks_[candidate].size < size) {
    const int next = blocks_[candidate].next;  // unmapped
    candidate = map_block(next, std::min(size - blocks_[candidate].size, blocks_[next].size), after_release);
    if (candidate < 0) return -1;
  }
  mark_used(candidate);
  return candidate;
}

// unmap_block: the whole pages inside a free block go back; the partial pages at its ends
// stay mapped as free blocks.
void CachingAllocatorModel::unmap_free_pages(int block) {
  const Block b = blocks_[block];
  const std::int64_t page = expandable_page_size(segments_[b.segment].small);
  const std::int64_t begin = (b.offset + page - 1) / page * page;
  const std::int64_t end = (b.offset + b.size) / page * page;
  if (end <= begin) return;
  unlist(block);
  if (begin > b.offset) {
    const int before = static_cast<int>(blocks_.size());
    blocks_.push_back({b.segment, b.offset, begin - b.offset, true, b.prev, block});
    if (b.prev >= 0) blocks_[b.prev].next = before;
    else segments_[b.segment].first = before;
    blocks_[block].prev = before;
    mark_free(before);
  }
  if (end < b.offset + b.size) {
    const int after = static_cast<int>(blocks_.size());
    blocks_.push_back({b.segment, end, b.offset + b.size - end, true, block, b.next});
    if (b.next >= 0) blocks_[b.next].prev = after;
    blocks_[block].next = after;
    mark_free(after);
  }
  Block& u = blocks_[block];
  u.offset = begin;
  u.size = end - begin;
  u.mapped = false;
  segments_[b.segment].mapped_bytes -= end - begin;
  reserved_ -= end - begin;
  if (provider_) provider_->unmap_pages(b.segment, begin, end - begin);
  coalesce(block);
}

int CachingAllocatorModel::allocate(std::int64_t bytes, int stream) {
  const std::int64_t size = round_size(bytes);
  const bool small = size <= kSmallSize;
  int block = take_free_block(size, stream, small);  // off its free list, in use, split
  if (block >= 0) return block;
  if (!settings_.expandable_segments) {
    block = allocate_segment(size, stream, small);
  } else {
    // malloc's retry for expandable segments: release the cache (release_cached_blocks) and
    // map again. release_available_cached_blocks is left out: it cudaFrees whole blocks, which
    // expandable segments do not have (release_block asserts !expandable_segment_).
    block = allocate_expandable(size, stream, small, false);
    if (block < 0) {
      release_pending();
      release_cached_segments();
      ++retries_;
      block = allocate_expandable(size, stream, small, true);
      if (block < 0) throw OutOfSegments(checked_round_up(size, expandable_page_size(small), "mapped pages"));
    }
  }
  split(block, size);
  return block;
}

// `left` takes over the range of `right`, the block after it.
void CachingAllocatorModel::absorb(int left, int right) {
  Block& l = blocks_[left];
  l.size += blocks_[right].size;
  l.next = blocks_[right].next;
  if (l.next >= 0) blocks_[l.next].prev = left;
}

// Merges a free block with its free neighbours of the same kind (mapped or not;
// try_merge_blocks) and lists the result; returns the block that holds it.
int CachingAllocatorModel::coalesce(int block) {
  if (blocks_[block].mapped) return coalesce_listed(block);
  const int next = blocks_[block].next;
  if (next >= 0 && blocks_[next].free && !blocks_[next].mapped) {
    mark_used(next);  // leaves the free list; absorbed
    absorb(block, next);
  }
  const int prev = blocks_[block].prev;
  if (prev >= 0 && blocks_[prev].free && !blocks_[prev].mapped) {
    mark_used(prev);
    absorb(prev, block);
    mark_free(prev);
    return prev;
  }
  mark_free(block);
  return block;
}

// coalesce for a mapped block (every block but expandable segments' address space): the result
// takes the free-list entry of the neighbour it absorbs, replaced in place (SortedChunks::replace),
// instead of that entry's removal and the result's insertion; the list ends as coalesce's
// unlisting and listing leave it.
int CachingAllocatorModel::coalesce_listed(int block) {
  const int next = blocks_[block].next;
  const int prev = blocks_[block].prev;
  const bool merge_next = next >= 0 && blocks_[next].free && blocks_[next].mapped;
  const bool merge_prev = prev >= 0 && blocks_[prev].free && blocks_[prev].mapped;
  const Segment& seg = segments_[blocks_[block].segment];
  FreeList& list = free_list(seg.stream, seg.small);
  if (merge_next && merge_prev) unlist(next);
  const int kept = merge_prev ? prev : block;  // the block that holds the merged range
  const int absorbed_entry = merge_prev ? prev : merge_next ? next : -1;  // whose entry the result takes
  FreeList::const_iterator listed = list.end();
  if (absorbed_entry >= 0) listed = list.lower_bound(free_entry(absorbed_entry));
  // A free mapped block is always listed; were one not, the result is listed anew (as unlist
  // and mark_free would do).
  const bool replace = listed != list.end() && listed->block == absorbed_entry;
  if (merge_next) {
    blocks_[next].free = false;  // absorbed
    absorb(block, next);
  }
  if (merge_prev) absorb(prev, block);
  Block& k = blocks_[kept];
  k.free = true;
  if (k.prev < 0 && k.next < 0) wholly_free_candidates_.push_back(k.segment);
  if (replace) list.replace(listed, free_entry(kept));
  else list.insert(free_entry(kept));
  return kept;
}

void CachingAllocatorModel::free(int handle) { coalesce(handle); }

std::vector<StreamClock> completion_clocks(const Schedule& s) {
  StreamClock none;
  none.fill(-1);
  std::vector<StreamClock> clock(s.ops.size(), none);
  std::vector<int> last_on_stream(kStreamCount, -1);
  const std::vector<int> previous_collective = previous_on_communicator(s);
  auto merge = [](StreamClock& into, const StreamClock& from) {
    for (int k = 0; k < kStreamCount; ++k) into[k] = std::max(into[k], from[k]);
  };
  for (const Op& op : s.ops) {  // deps point to earlier ops (validate_schedule)
    StreamClock& c = clock[op.id];
    const int stream = static_cast<int>(op.stream);
    if (last_on_stream[stream] >= 0) merge(c, clock[last_on_stream[stream]]);
    for (int d : op.deps) merge(c, clock[d]);
    if (previous_collective[op.id] >= 0) merge(c, clock[previous_collective[op.id]]);
    c[stream] = op.id;
    last_on_stream[stream] = op.id;
  }
  return clock;
}

std::int64_t state_bytes_before_first_op(const Schedule& s) {
  const std::vector<char> from_prelude = made_in_prelude(s);
  std::int64_t bytes = 0;
  for (const Allocation& a : s.allocations)
    if (a.persistent && !on_host(a.placement) && a.category != MemCategory::optimizer_state && !from_prelude[a.id])
      bytes = checked_add(bytes, a.bytes, "the step's persistent device bytes");
  return bytes;
}

std::vector<std::int64_t> prelude_segments(const Schedule& s) {
  CachingAllocatorModel allocator(0, nullptr, s.allocator);
  std::vector<int> handle(s.allocations.size(), -1);
  for (const PreludeEvent& e : s.prelude) {
    const Allocation& a = s.allocations[e.allocation];
    if (e.free) allocator.free(handle[a.id]);
    else handle[a.id] = allocator.allocate(a.bytes, static_cast<int>(a.stream));
  }
  std::vector<std::int64_t> bytes;
  for (const auto& [segment, size] : allocator.live_segments()) bytes.push_back(size);
  std::sort(bytes.begin(), bytes.end());
  return bytes;
}

namespace {

// A replay stopped past its give_up_above_reserved (replay_memory): the allocator's figures as
// they stand.
MemoryReport gave_up(MemoryReport& r, const CachingAllocatorModel& allocator, int op, bool first_step) {
  r.peak_reserved_bytes = allocator.peak_reserved_bytes();
  r.reserved_by_stream_at_end = allocator.reserved_by_stream();
  r.allocator_retries = allocator.retries();
  r.gave_up = true;
  r.gave_up_at_op = op;
  r.gave_up_in_first_step = first_step;
  return std::move(r);
}

}  // namespace

MemoryReport replay_memory(const Schedule& s, double capacity_bytes, std::int64_t give_up_above_reserved) {
  MemoryReport r;
  CachingAllocatorModel allocator(capacity_bytes, nullptr, s.allocator);
  std::vector<int> handle(s.allocations.size(), -1);
  // Running totals per category, so a new peak is recorded in O(categories).
  std::array<std::int64_t, kMemCategoryCount> by_category{};
  std::int64_t allocated = 0, model_state = 0;
  std::array<std::int64_t, kPlacementCount> host{};  // index: Placement (device unused)
  // Checked sums: a schedule whose allocations overflow an int64 must not lose them from
  // the peak (schedule_from_json and the planner bound the total; this is the backstop).
  auto account = [&](int id, std::int64_t sign) {
    const Allocation& a = s.allocations[id];
    const std::int64_t bytes = sign * a.bytes;
    if (on_host(a.placement)) {
      std::int64_t& total = host[static_cast<int>(a.placement)];
      total = checked_add(total, bytes, "host bytes allocated at once");
      const auto pinned = host[static_cast<int>(Placement::pinned_host)];
      const auto pageable = host[static_cast<int>(Placement::pageable_host)];
      r.peak_host_pinned_bytes = std::max(r.peak_host_pinned_bytes, pinned);
      r.peak_host_pageable_bytes = std::max(r.peak_host_pageable_bytes, pageable);
      r.peak_host_bytes = std::max(r.peak_host_bytes, pinned + pageable);
      return;
    }
    allocated = checked_add(allocated, bytes, "bytes allocated at once");
    by_category[static_cast<int>(a.category)] += bytes;  // each category's total <= allocated
    if (a.model_state) {
      model_state += bytes;  // <= allocated
      r.model_state_bytes = std::max(r.model_state_bytes, model_state);
    }
  };
  auto make = [&](int id) {
    account(id, +1);
    const Allocation& a = s.allocations[id];
    if (!on_host(a.placement)) handle[id] = allocator.allocate(a.bytes, static_cast<int>(a.stream));
  };
  // [recordStream] The event a recorded free waits for: the last op queued on the recorded
  // stream when the op that frees it is issued.
  std::vector<int> last_on_stream(kStreamCount, -1);
  auto release = [&](int id) {
    account(id, -1);
    const Allocation& a = s.allocations[id];
    if (on_host(a.placement)) return;
    if (a.recorded_stream >= 0 && a.recorded_stream < kStreamCount)
      allocator.free_after(handle[id], a.recorded_stream, last_on_stream[a.recorded_stream]);
    else
      allocator.free(handle[id]);
  };
  auto snapshot = [&](int op) {
    r.peak_allocated_bytes = allocated;
    r.peak_op = op;
    r.breakdown_at_peak = by_category;
  };
  // Only a schedule with recorded frees needs the clocks (a sweep replays thousands of plans).
  const bool any_recorded = std::any_of(s.allocations.begin(), s.allocations.end(),
                                        [](const Allocation& a) { return a.recorded_stream >= 0; });
  const std::vector<StreamClock> clocks = any_recorded ? completion_clocks(s) : std::vector<StreamClock>{};
  const bool made_at_first_step = makes_state_at_first_step(s);
  // [Job prelude] Before the first step: what it leaves is its persistent state and the
  // allocator's segments. Its own peaks are not the step's (snapshot(-1) below starts over).
  for (const PreludeEvent& e : s.prelude) e.free ? release(e.allocation) : make(e.allocation);
  const std::vector<char> from_prelude = made_in_prelude(s);
  for (const Allocation& a : s.allocations)
    if (a.persistent && a.first_step_op < 0 && !from_prelude[a.id]) make(a.id);
  if (made_at_first_step) {
    // [State made at the first step] The job's first step, with that state made at its op: the
    // segments the caching allocator keeps from it are those every later step runs in, and
    // nothing returns them (no empty_cache), so reserved memory is the larger of the two steps'.
    std::vector<char> alive(s.allocations.size(), 0);
    for (const Allocation& a : s.allocations) alive[a.id] = a.persistent && a.first_step_op < 0;
    const std::vector<std::vector<int>> made_at = made_at_first_step_by_op(s);
    for (const Op& op : s.ops) {
      if (any_recorded)
        for (int w : op.cpu_waits) allocator.completed_through(clocks[w]);
      last_on_stream[static_cast<int>(op.stream)] = op.id;
      for (int id : made_at[op.id]) make(id), alive[id] = 1;
      for (int id : op.allocs) make(id), alive[id] = 1;
      if (allocator.peak_reserved_bytes() > give_up_above_reserved) return gave_up(r, allocator, op.id, true);
      for (int id : op.frees) release(id), alive[id] = 0;
    }
    StreamClock all;
    all.fill(std::numeric_limits<int>::max());
    allocator.completed_through(all);
    // Back to the state the step starts from: what the step left allocated goes, persistent
    // state it freed comes back (as the runtime's executor does between steps).
    for (const Allocation& a : s.allocations)
      if (alive[a.id] && !a.persistent) release(a.id);
    for (const Allocation& a : s.allocations)
      if (a.persistent && !alive[a.id]) make(a.id);
    last_on_stream.assign(kStreamCount, -1);
    // The report's figures are the second step's: the first step's peaks of host memory and
    // model state (kept by `account`) are never above them, its device peaks are not recorded.
  }
  const std::int64_t retries_before_step = allocator.retries();
  r.allocated_at_start = allocated;
  r.allocated_at_start_host = host[static_cast<int>(Placement::pinned_host)] + host[static_cast<int>(Placement::pageable_host)];
  snapshot(-1);
  r.allocated_at_op.reserve(s.ops.size());
  r.reserved_at_op.reserve(s.ops.size());
  for (const Op& op : s.ops) {
    if (any_recorded)
      for (int w : op.cpu_waits) allocator.completed_through(clocks[w]);
    last_on_stream[static_cast<int>(op.stream)] = op.id;
    for (int id : op.allocs) make(id);
    r.allocated_at_op.push_back(allocated);
    r.reserved_at_op.push_back(allocator.reserved_bytes());
    if (allocated > r.peak_allocated_bytes) snapshot(op.id);
    if (allocator.peak_reserved_bytes() > give_up_above_reserved) return gave_up(r, allocator, op.id, false);
    for (int id : op.frees) release(id);
    r.peak_pending_bytes = std::max(r.peak_pending_bytes, allocator.pending_bytes());
  }
  r.peak_reserved_bytes = allocator.peak_reserved_bytes();
  r.reserved_by_stream_at_end = allocator.reserved_by_stream();
  r.allocator_retries = allocator.retries() - retries_before_step;
  return r;
}

}  // namespace fsdpsim::planner
