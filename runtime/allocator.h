// The runtime's caching allocator: PyTorch's policy (c10/cuda/CUDACachingAllocator.cpp), the
// same one planner::CachingAllocatorModel models, over segments from a SegmentSource (real
// cudaMalloc'd memory on the cuda backend, bookkeeping only on the host backend).
//
// 512-byte rounding; a small pool (requests <= 1 MiB, 2 MiB segments) and a large pool
// (20 MiB segments below 10 MiB, else the size rounded to 2 MiB); best-fit reuse of a cached
// block of the same stream and pool; splitting, and merging of free neighbours. When a new
// segment cannot be had, every fully free cached segment is released and the segment tried
// again (a "retry", as torch counts num_alloc_retries); if it still fails, OutOfMemory.
//
// allocated = the sum of live requests (what replay_memory counts: the planner's sizes are
// already rounded to 512 B where PyTorch rounds); reserved = the sum of segments.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace fsdpsim::runtime {

class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  // A new segment of `bytes`, or nullptr when the device cannot supply it.
  virtual void* map(std::int64_t bytes) = 0;
  virtual void unmap(void* base, std::int64_t bytes) = 0;
};

// Bookkeeping only: addresses are made up and never dereferenced. Fails beyond capacity.
class TrackingSegments : public SegmentSource {
 public:
  explicit TrackingSegments(double capacity_bytes = 0) : capacity_bytes_(capacity_bytes) {}
  void* map(std::int64_t bytes) override;
  void unmap(void* base, std::int64_t bytes) override;

 private:
  double capacity_bytes_;
  std::int64_t mapped_ = 0;
  std::uintptr_t next_ = 1 << 16;
};

struct OutOfMemory : std::runtime_error {
  OutOfMemory(std::int64_t requested, std::int64_t segment, std::int64_t allocated, std::int64_t reserved);
  std::int64_t requested_bytes, segment_bytes, allocated_bytes, reserved_bytes;
};

class CachingAllocator {
 public:
  explicit CachingAllocator(SegmentSource& source) : source_(source) {}
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;
  ~CachingAllocator();

  // Returns a handle; throws OutOfMemory.
  int allocate(std::int64_t bytes, int stream);
  void free(int handle);
  void* pointer(int handle) const;
  std::int64_t size(int handle) const { return blocks_[handle].requested; }

  std::int64_t allocated_bytes() const { return allocated_; }
  std::int64_t peak_allocated_bytes() const { return peak_allocated_; }
  std::int64_t reserved_bytes() const { return reserved_; }
  std::int64_t peak_reserved_bytes() const { return peak_reserved_; }
  std::int64_t retries() const { return retries_; }
  void reset_peak_allocated() { peak_allocated_ = allocated_; }
  // Returns every cached (fully free) segment to the source (torch.cuda.empty_cache()).
  void release_cached_segments();

 private:
  struct Block {
    int segment;
    std::int64_t offset;
    std::int64_t size;
    std::int64_t requested;
    bool free;
  };
  struct Segment {
    int stream;
    bool small;
    std::int64_t size;
    char* base;
    std::vector<int> blocks;  // address order
    bool released = false;
  };
  int find_free_block(std::int64_t size, int stream, bool small) const;
  void split(int block, std::int64_t size);

  SegmentSource& source_;
  std::vector<Block> blocks_;
  std::vector<Segment> segments_;
  std::int64_t allocated_ = 0, peak_allocated_ = 0;
  std::int64_t reserved_ = 0, peak_reserved_ = 0;
  std::int64_t retries_ = 0;
};

}  // namespace fsdpsim::runtime
