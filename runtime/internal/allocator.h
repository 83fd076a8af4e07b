// The runtime's caching allocator: PyTorch's policy (c10/cuda/CUDACachingAllocator.cpp) as
// planner::CachingAllocatorModel implements it (the same object the planner's replay uses,
// so the two cannot drift apart), over segments from a SegmentSource (real cudaMalloc'd
// memory on the cuda backend, bookkeeping only on the host backend).
//
// 512-byte rounding; a small pool (requests <= 1 MiB, 2 MiB segments) and a large pool
// (20 MiB segments below 10 MiB, else the size rounded to 2 MiB); best-fit reuse of a cached
// block of the same stream and pool; splitting, and merging of free neighbours. When a new
// segment cannot be had, every fully free cached segment is released and the segment tried
// again (a "retry", as torch counts num_alloc_retries); if it still fails, OutOfMemory.
//
// With expandable segments (the schedule's AllocatorSettings) segments are address space
// reserved from the source and backed page range by page range.
//
// allocated = the sum of live requests (what replay_memory counts: the planner's sizes are
// already rounded to 512 B where PyTorch rounds); reserved = the sum of segments.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/memory.h"

namespace fsdpsim::runtime {

class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  // A new segment of `bytes`, or nullptr when the device cannot supply it.
  virtual void* map(std::int64_t bytes) = 0;
  virtual void unmap(void* base, std::int64_t bytes) = 0;
  // Expandable segments (planner::CachingAllocatorModel): `bytes` of address space, and pages
  // mapped and unmapped in it. A backend without them (the cuda backend backs segments with
  // cudaMalloc, not cuMemMap) leaves these, and the executor refuses such a schedule.
  virtual bool supports_expandable_segments() const { return false; }
  virtual void* reserve(std::int64_t) { return nullptr; }
  virtual bool map_pages(void*, std::int64_t /*offset*/, std::int64_t /*bytes*/) { return false; }
  virtual void unmap_pages(void*, std::int64_t /*offset*/, std::int64_t /*bytes*/) {}
};

// Bookkeeping only: addresses are made up and never dereferenced. Fails beyond capacity.
class TrackingSegments : public SegmentSource {
 public:
  explicit TrackingSegments(double capacity_bytes = 0) : capacity_bytes_(capacity_bytes) {}
  void* map(std::int64_t bytes) override;
  void unmap(void* base, std::int64_t bytes) override;
  bool supports_expandable_segments() const override { return true; }
  void* reserve(std::int64_t bytes) override;
  bool map_pages(void* base, std::int64_t offset, std::int64_t bytes) override;
  void unmap_pages(void* base, std::int64_t offset, std::int64_t bytes) override;

 private:
  double capacity_bytes_;
  std::int64_t mapped_ = 0;
  std::uintptr_t next_ = 1 << 16;
};

struct OutOfMemory : std::runtime_error {
  OutOfMemory(std::int64_t requested, std::int64_t segment, std::int64_t allocated, std::int64_t reserved);
  std::int64_t requested_bytes, segment_bytes, allocated_bytes, reserved_bytes;
};

class CachingAllocator : private planner::CachingAllocatorModel::SegmentProvider {
 public:
  explicit CachingAllocator(SegmentSource& source, planner::AllocatorSettings settings = {})
      : source_(source), model_(0, this, settings) {}
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;
  ~CachingAllocator() override;

  // Returns a handle; throws OutOfMemory.
  int allocate(std::int64_t bytes, int stream);
  void free(int handle);
  // recordStream (planner::CachingAllocatorModel::free_after): freed now, reusable once the CPU
  // knows `event_op` of `stream` has finished (completed_through).
  void free_after(int handle, int stream, int event_op);
  void completed_through(const planner::StreamClock& clock) { model_.completed_through(clock); }
  void* pointer(int handle) const;
  std::int64_t size(int handle) const { return requested_.at(handle); }

  std::int64_t allocated_bytes() const { return allocated_; }
  std::int64_t peak_allocated_bytes() const { return peak_allocated_; }
  std::int64_t reserved_bytes() const { return model_.reserved_bytes(); }
  std::int64_t peak_reserved_bytes() const { return model_.peak_reserved_bytes(); }
  std::int64_t retries() const { return model_.retries(); }
  void reset_peak_allocated() { peak_allocated_ = allocated_; }
  // Returns every cached (fully free) segment to the source (torch.cuda.empty_cache()).
  void release_cached_segments() { model_.release_cached_segments(); }

 private:
  bool map(int segment, std::int64_t bytes) override;
  void unmap(int segment, std::int64_t bytes) override;
  bool map_pages(int segment, std::int64_t address_space_bytes, std::int64_t offset, std::int64_t bytes) override;
  void unmap_pages(int segment, std::int64_t offset, std::int64_t bytes) override;
  char* base_of(int segment);  // nullptr when not mapped or reserved

  SegmentSource& source_;
  planner::CachingAllocatorModel model_;
  std::vector<char*> segment_base_;      // per model segment; nullptr once released
  std::vector<std::int64_t> requested_;  // per handle: the bytes asked for (0: free)
  std::int64_t allocated_ = 0, peak_allocated_ = 0;
};

}  // namespace fsdpsim::runtime
