#include "runtime/allocator.h"

#include <algorithm>

#include "models/checked_arithmetic.h"
#include "planner/memory.h"

namespace fsdpsim::runtime {

namespace {
constexpr std::int64_t kMinBlockSize = 512;   // CUDACachingAllocator kMinBlockSize
constexpr std::int64_t kSmallSize = 1 << 20;  // kSmallSize
}  // namespace

void* TrackingSegments::map(std::int64_t bytes) {
  const std::int64_t mapped_after = checked_add(mapped_, bytes, "mapped segment bytes");
  if (capacity_bytes_ > 0 && static_cast<double>(mapped_after) > capacity_bytes_) return nullptr;
  mapped_ = mapped_after;
  void* base = reinterpret_cast<void*>(next_);
  next_ += static_cast<std::uintptr_t>(bytes) + 4096;
  return base;
}

void TrackingSegments::unmap(void*, std::int64_t bytes) { mapped_ -= bytes; }

OutOfMemory::OutOfMemory(std::int64_t requested, std::int64_t segment, std::int64_t allocated, std::int64_t reserved)
    : std::runtime_error("out of memory"),
      requested_bytes(requested),
      segment_bytes(segment),
      allocated_bytes(allocated),
      reserved_bytes(reserved) {}

CachingAllocator::~CachingAllocator() {
  for (Segment& seg : segments_)
    if (!seg.released) source_.unmap(seg.base, seg.size);
}

int CachingAllocator::find_free_block(std::int64_t size, int stream, bool small) const {
  int best = -1;
  for (const Segment& seg : segments_) {
    if (seg.released || seg.stream != stream || seg.small != small) continue;
    for (int b : seg.blocks) {
      const Block& blk = blocks_[b];
      if (blk.free && blk.size >= size && (best < 0 || blk.size < blocks_[best].size)) best = b;
    }
  }
  return best;
}

void CachingAllocator::split(int block, std::int64_t size) {
  Block& blk = blocks_[block];
  const bool small = segments_[blk.segment].small;
  const std::int64_t remaining = blk.size - size;
  const bool should_split = small ? remaining >= kMinBlockSize : remaining > kSmallSize;
  if (!should_split) return;
  Block rest{blk.segment, blk.offset + size, remaining, 0, true};
  blk.size = size;
  blocks_.push_back(rest);
  const int rest_id = static_cast<int>(blocks_.size()) - 1;
  auto& list = segments_[rest.segment].blocks;
  list.insert(std::find(list.begin(), list.end(), block) + 1, rest_id);
}

void CachingAllocator::release_cached_segments() {
  for (Segment& seg : segments_) {
    if (seg.released) continue;
    const bool all_free = std::all_of(seg.blocks.begin(), seg.blocks.end(), [&](int b) { return blocks_[b].free; });
    if (all_free) {
      seg.released = true;
      reserved_ -= seg.size;
      source_.unmap(seg.base, seg.size);
    }
  }
}

int CachingAllocator::allocate(std::int64_t bytes, int stream) {
  const std::int64_t size = planner::CachingAllocatorModel::round_size(bytes);
  const bool small = size <= kSmallSize;
  int block = find_free_block(size, stream, small);
  if (block < 0) {
    const std::int64_t seg_size = planner::CachingAllocatorModel::segment_size(size);
    void* base = source_.map(seg_size);
    if (!base) {
      // As PyTorch does when cudaMalloc fails: free the cache and try once more.
      release_cached_segments();
      ++retries_;
      base = source_.map(seg_size);
      if (!base) throw OutOfMemory(bytes, seg_size, allocated_, reserved_);
    }
    segments_.push_back(Segment{stream, small, seg_size, static_cast<char*>(base), {}});
    blocks_.push_back(Block{static_cast<int>(segments_.size()) - 1, 0, seg_size, 0, true});
    block = static_cast<int>(blocks_.size()) - 1;
    segments_.back().blocks.push_back(block);
    reserved_ = checked_add(reserved_, seg_size, "reserved bytes");
    peak_reserved_ = std::max(peak_reserved_, reserved_);
  }
  split(block, size);
  blocks_[block].free = false;
  blocks_[block].requested = bytes;
  allocated_ = checked_add(allocated_, bytes, "bytes allocated at once");
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  return block;
}

void CachingAllocator::free(int handle) {
  Block& blk = blocks_[handle];
  allocated_ -= blk.requested;
  blk.requested = 0;
  blk.free = true;
  auto& list = segments_[blk.segment].blocks;
  auto it = std::find(list.begin(), list.end(), handle);
  if (it + 1 != list.end() && blocks_[*(it + 1)].free) {
    blocks_[handle].size += blocks_[*(it + 1)].size;
    list.erase(it + 1);
    it = std::find(list.begin(), list.end(), handle);
  }
  if (it != list.begin() && blocks_[*(it - 1)].free) {
    blocks_[*(it - 1)].size += blocks_[handle].size;
    list.erase(it);
  }
}

void* CachingAllocator::pointer(int handle) const {
  const Block& blk = blocks_[handle];
  return segments_[blk.segment].base + blk.offset;
}

}  // namespace fsdpsim::runtime
