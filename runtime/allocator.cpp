#include "runtime/internal/allocator.h"

#include <algorithm>

#include "models/checked_arithmetic.h"
#include "planner/memory.h"

namespace fsdpsim::runtime {

void* TrackingSegments::map(std::int64_t bytes) {
  const std::int64_t mapped_after = checked_add(mapped_, bytes, "mapped segment bytes");
  if (capacity_bytes_ > 0 && static_cast<double>(mapped_after) > capacity_bytes_) return nullptr;
  mapped_ = mapped_after;
  void* base = reinterpret_cast<void*>(next_);
  next_ += static_cast<std::uintptr_t>(bytes) + 4096;
  return base;
}

void TrackingSegments::unmap(void*, std::int64_t bytes) { mapped_ -= bytes; }

// Address space costs nothing here; only mapped pages count against the capacity.
void* TrackingSegments::reserve(std::int64_t bytes) {
  void* base = reinterpret_cast<void*>(next_);
  next_ += static_cast<std::uintptr_t>(bytes) + 4096;
  return base;
}

bool TrackingSegments::map_pages(void*, std::int64_t, std::int64_t bytes) {
  const std::int64_t mapped_after = checked_add(mapped_, bytes, "mapped page bytes");
  if (capacity_bytes_ > 0 && static_cast<double>(mapped_after) > capacity_bytes_) return false;
  mapped_ = mapped_after;
  return true;
}

void TrackingSegments::unmap_pages(void*, std::int64_t, std::int64_t bytes) { mapped_ -= bytes; }

OutOfMemory::OutOfMemory(std::int64_t requested, std::int64_t segment, std::int64_t allocated, std::int64_t reserved)
    : std::runtime_error("out of memory"),
      requested_bytes(requested),
      segment_bytes(segment),
      allocated_bytes(allocated),
      reserved_bytes(reserved) {}

CachingAllocator::~CachingAllocator() {
  for (const auto& [segment, bytes] : model_.live_segments()) source_.unmap(segment_base_[segment], bytes);
  for (const auto& r : model_.mapped_pages()) source_.unmap_pages(segment_base_[r.segment], r.offset, r.bytes);
}

char* CachingAllocator::base_of(int segment) {
  return static_cast<std::size_t>(segment) < segment_base_.size() ? segment_base_[segment] : nullptr;
}

// An expandable segment's address space is reserved when its first pages are mapped.
bool CachingAllocator::map_pages(int segment, std::int64_t address_space_bytes, std::int64_t offset,
                                 std::int64_t bytes) {
  if (!base_of(segment)) {
    void* base = source_.reserve(address_space_bytes);
    if (!base) return false;
    if (segment_base_.size() <= static_cast<std::size_t>(segment)) segment_base_.resize(segment + 1, nullptr);
    segment_base_[segment] = static_cast<char*>(base);
  }
  return source_.map_pages(segment_base_[segment], offset, bytes);
}

void CachingAllocator::unmap_pages(int segment, std::int64_t offset, std::int64_t bytes) {
  source_.unmap_pages(segment_base_[segment], offset, bytes);
}

bool CachingAllocator::map(int segment, std::int64_t bytes) {
  void* base = source_.map(bytes);
  if (!base) return false;
  if (segment_base_.size() <= static_cast<std::size_t>(segment)) segment_base_.resize(segment + 1, nullptr);
  segment_base_[segment] = static_cast<char*>(base);
  return true;
}

void CachingAllocator::unmap(int segment, std::int64_t bytes) {
  source_.unmap(segment_base_[segment], bytes);
  segment_base_[segment] = nullptr;
}

int CachingAllocator::allocate(std::int64_t bytes, int stream) {
  int handle;
  try {
    handle = model_.allocate(bytes, stream);
  } catch (const planner::CachingAllocatorModel::OutOfSegments& e) {
    throw OutOfMemory(bytes, e.segment_bytes, allocated_, model_.reserved_bytes());
  }
  if (requested_.size() <= static_cast<std::size_t>(handle)) requested_.resize(handle + 1, 0);
  requested_[handle] = bytes;
  allocated_ = checked_add(allocated_, bytes, "bytes allocated at once");
  peak_allocated_ = std::max(peak_allocated_, allocated_);
  return handle;
}

void CachingAllocator::free(int handle) {
  allocated_ -= requested_.at(handle);
  requested_[handle] = 0;
  model_.free(handle);
}

void CachingAllocator::free_after(int handle, int stream, int event_op) {
  allocated_ -= requested_.at(handle);
  requested_[handle] = 0;
  model_.free_after(handle, stream, event_op);
}

void* CachingAllocator::pointer(int handle) const {
  return segment_base_[model_.segment_of(handle)] + model_.offset_of(handle);
}

}  // namespace fsdpsim::runtime
