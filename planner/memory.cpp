#include "planner/memory.h"

#include <algorithm>

#include "models/checked_arithmetic.h"

namespace fsdpsim::planner {

namespace {
constexpr std::int64_t kMinBlockSize = 512;              // kMinBlockSize
constexpr std::int64_t kSmallSize = 1 << 20;             // kSmallSize: 1 MiB
constexpr std::int64_t kSmallBuffer = 2 << 20;           // kSmallBuffer: 2 MiB
constexpr std::int64_t kMinLargeAlloc = 10 << 20;        // kMinLargeAlloc: 10 MiB
constexpr std::int64_t kLargeBuffer = 20 << 20;          // kLargeBuffer: 20 MiB
constexpr std::int64_t kRoundLarge = 2 << 20;            // kRoundLarge: 2 MiB
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

std::vector<CachingAllocatorModel::FreeEntry>& CachingAllocatorModel::free_list(int stream, bool small) {
  const std::size_t i = 2 * static_cast<std::size_t>(stream) + (small ? 1 : 0);
  if (i >= free_lists_.size()) free_lists_.resize(i + 1);
  return free_lists_[i];
}

CachingAllocatorModel::FreeEntry CachingAllocatorModel::free_entry(int block) const {
  const Block& b = blocks_[block];
  return {b.size, b.segment, b.offset, block};
}

void CachingAllocatorModel::mark_free(int block) {
  blocks_[block].free = true;
  if (blocks_[block].prev < 0 && blocks_[block].next < 0) wholly_free_candidates_.push_back(blocks_[block].segment);
  const Segment& seg = segments_[blocks_[block].segment];
  auto& list = free_list(seg.stream, seg.small);
  const FreeEntry e = free_entry(block);
  list.insert(std::lower_bound(list.begin(), list.end(), e), e);
}

void CachingAllocatorModel::unlist(int block) {
  const Segment& seg = segments_[blocks_[block].segment];
  auto& list = free_list(seg.stream, seg.small);
  const FreeEntry e = free_entry(block);
  auto it = std::lower_bound(list.begin(), list.end(), e);
  if (it != list.end() && it->block == block) list.erase(it);
}

void CachingAllocatorModel::mark_used(int block) {
  unlist(block);
  blocks_[block].free = false;
}

// Best fit: the smallest free block of the stream's pool that is large enough; among equal
// sizes the first in segment and address order.
int CachingAllocatorModel::find_free_block(std::int64_t size, int stream, bool small) {
  const auto& list = free_list(stream, small);
  auto it = std::lower_bound(list.begin(), list.end(), size, [](const FreeEntry& e, std::int64_t s) { return e.size < s; });
  return it == list.end() ? -1 : it->block;
}

// Cuts `size` bytes off the front of a block in use; the rest, when worth keeping apart,
// becomes a free block right after it.
void CachingAllocatorModel::split(int block, std::int64_t size) {
  const Block& blk = blocks_[block];
  const bool small = segments_[blk.segment].small;
  const std::int64_t remaining = blk.size - size;
  const bool should_split = small ? remaining >= kMinBlockSize : remaining > kSmallSize;
  if (!should_split) return;
  const int rest = static_cast<int>(blocks_.size());
  blocks_.push_back({blk.segment, blk.offset + size, remaining, false, block, blk.next});
  Block& b = blocks_[block];  // push_back may have moved it
  if (b.next >= 0) blocks_[b.next].prev = rest;
  b.next = rest;
  b.size = size;
  mark_free(rest);
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

void CachingAllocatorModel::release_cached_segments() {
  // In segment order, as a scan of every segment would release (and unmap) them.
  std::vector<int> candidates;
  candidates.swap(wholly_free_candidates_);
  std::sort(candidates.begin(), candidates.end());
  candidates.erase(std::unique(candidates.begin(), candidates.end()), candidates.end());
  for (const int i : candidates) {
    Segment& seg = segments_[i];
    if (seg.released) continue;
    bool all_free = true;
    for (int b = seg.first; b >= 0 && all_free; b = blocks_[b].next) all_free = blocks_[b].free;
    if (!all_free) continue;
    for (int b = seg.first; b >= 0; b = blocks_[b].next) unlist(b);
    seg.released = true;
    reserved_ -= seg.size;
    if (provider_) provider_->unmap(i, seg.size);
  }
}

std::vector<std::pair<int, std::int64_t>> CachingAllocatorModel::live_segments() const {
  std::vector<std::pair<int, std::int64_t>> out;
  for (std::size_t i = 0; i < segments_.size(); ++i)
    if (!segments_[i].released) out.push_back({static_cast<int>(i), segments_[i].size});
  return out;
}

// When a segment cannot be had, PyTorch frees its cached segments and tries once more
// (num_alloc_retries). Without a provider the model makes the segment anyway: the replay
// reports reserved memory past the capacity rather than failing.
bool CachingAllocatorModel::obtain_segment(int segment, std::int64_t bytes) {
  if (provider_) {
    if (provider_->map(segment, bytes)) return true;
    release_pending();
    release_cached_segments();
    ++retries_;
    return provider_->map(segment, bytes);
  }
  const std::int64_t reserved_after = checked_add(reserved_, bytes, "reserved bytes");
  if (capacity_bytes_ > 0 && static_cast<double>(reserved_after) > capacity_bytes_) {
    release_pending();
    release_cached_segments();
    ++retries_;
  }
  return true;
}

int CachingAllocatorModel::allocate(std::int64_t bytes, int stream) {
  const std::int64_t size = round_size(bytes);
  const bool small = size <= kSmallSize;
  int block = find_free_block(size, stream, small);
  if (block >= 0) {
    mark_used(block);
  } else {
    const std::int64_t seg_size = segment_size(size);
    const int segment = static_cast<int>(segments_.size());
    if (!obtain_segment(segment, seg_size)) throw OutOfSegments(seg_size);
    block = static_cast<int>(blocks_.size());
    segments_.push_back({stream, small, seg_size, block, false});
    blocks_.push_back({segment, 0, seg_size, false});
    reserved_ = checked_add(reserved_, seg_size, "reserved bytes");
    peak_reserved_ = std::max(peak_reserved_, reserved_);
  }
  split(block, size);
  return block;
}

void CachingAllocatorModel::free(int handle) {
  // Merge with free neighbours in the same segment.
  const int next = blocks_[handle].next;
  if (next >= 0 && blocks_[next].free) {
    mark_used(next);  // leaves the free list; absorbed
    Block& b = blocks_[handle];
    b.size += blocks_[next].size;
    b.next = blocks_[next].next;
    if (b.next >= 0) blocks_[b.next].prev = handle;
  }
  const int prev = blocks_[handle].prev;
  if (prev >= 0 && blocks_[prev].free) {
    mark_used(prev);
    Block& p = blocks_[prev];
    p.size += blocks_[handle].size;
    p.next = blocks_[handle].next;
    if (p.next >= 0) blocks_[p.next].prev = prev;
    mark_free(prev);
    return;
  }
  mark_free(handle);
}

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

MemoryReport replay_memory(const Schedule& s, double capacity_bytes) {
  MemoryReport r;
  CachingAllocatorModel allocator(capacity_bytes);
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
  for (const Allocation& a : s.allocations)
    if (a.persistent) make(a.id);
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
    for (int id : op.frees) release(id);
    r.peak_pending_bytes = std::max(r.peak_pending_bytes, allocator.pending_bytes());
  }
  r.peak_reserved_bytes = allocator.peak_reserved_bytes();
  r.allocator_retries = allocator.retries();
  return r;
}

}  // namespace fsdpsim::planner
