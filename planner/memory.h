// Memory of a step: replay the Schedule's allocation events in CPU issue order (what
// PyTorch's caching allocator counts as allocated), find the peak and what holds it, and
// estimate reserved memory with a model of the caching allocator.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <utility>
#include <string>
#include <vector>

#include "planner/schedule.h"
#include "planner/sorted_chunks.h"

namespace fsdpsim::planner {

struct MemoryReport {
  std::int64_t peak_allocated_bytes = 0;
  int peak_op = -1;  // the op during whose issue the peak is reached (-1: before the step)
  std::array<std::int64_t, kMemCategoryCount> breakdown_at_peak{};
  // The most parameter, gradient and optimizer-state memory live at once (what ZeRO's
  // arithmetic counts): sharded state plus what the strategy keeps unsharded.
  std::int64_t model_state_bytes = 0;
  std::int64_t peak_reserved_bytes = 0;  // caching allocator segments (torch.cuda.max_memory_reserved)
  // The segments held when the step ends, per stream pool (Stream order): where reserved memory
  // sits (torch.cuda.memory_snapshot()'s segments, summed by their stream).
  std::array<std::int64_t, kStreamCount> reserved_by_stream_at_end{};
  // Times the allocator had to free its cache to fit (PyTorch's num_alloc_retries) in the step
  // the report is of: a torch.optim plan's first step, replayed before it, not counted.
  std::int64_t allocator_retries = 0;
  // Per op, the allocated bytes right after its allocations (its high-water mark).
  std::vector<std::int64_t> allocated_at_op;
  // Per op, the caching-allocator model's reserved bytes right after its allocations.
  std::vector<std::int64_t> reserved_at_op;
  std::int64_t allocated_at_start = 0;  // persistent state
  // Host memory of this rank (Placement pinned_host / pageable_host: CPU offload's state and
  // staging), counted apart from the device: the highest each reaches in the step, and the
  // highest of their sum. Host allocations are exact sizes (no caching allocator on the host).
  std::int64_t peak_host_pinned_bytes = 0;
  std::int64_t peak_host_pageable_bytes = 0;
  std::int64_t peak_host_bytes = 0;
  std::int64_t allocated_at_start_host = 0;  // persistent host state (offloaded params, optimizer)
  // Blocks freed under recordStream that were still waiting for their stream's work, at most
  // (reserved but neither allocated nor reusable).
  std::int64_t peak_pending_bytes = 0;
  // The replay stopped once reserved memory passed replay_memory's give_up_above_reserved:
  // every figure is then what it was when it stopped, a lower bound of the step's (the peaks
  // only grow), and the per-op figures stop there.
  bool gave_up = false;
  // Where it stopped: the op whose allocations passed the bound, and whether in the first step a
  // torch.optim plan replays before the one reported ([State made at the first step]).
  int gave_up_at_op = -1;
  bool gave_up_in_first_step = false;
};

// [recordStream] What the CPU knows has finished on the GPU. After it waits for op w
// (cpu_waits: FSDP1's rate limiter, event.synchronize()), every op w depends on has finished:
// w's stream's earlier ops, its deps and, through them, theirs, and the earlier collectives of
// its communicator (planner/schedule.h, [Communicator order]). Per op, per stream, the last op
// of that stream so covered (-1: none).
using StreamClock = std::array<int, kStreamCount>;
std::vector<StreamClock> completion_clocks(const Schedule& schedule);

// `capacity_bytes` bounds the reserved model (0: unbounded); when a new segment would
// exceed it the allocator releases its unused cached segments first, as PyTorch does.
// The allocator follows the schedule's AllocatorSettings (PYTORCH_CUDA_ALLOC_CONF).
// `give_up_above_reserved`: stop as soon as the peak of reserved memory passes it (the report
// says gave_up). For searches that need only to know a configuration is further from fitting
// than one already found (sim/advice.h): past that, the rest of its replay cannot change that.
constexpr std::int64_t kNeverGiveUp = std::numeric_limits<std::int64_t>::max();
MemoryReport replay_memory(const Schedule& schedule, double capacity_bytes = 0,
                           std::int64_t give_up_above_reserved = kNeverGiveUp);
// A lower bound of the device memory replay_memory holds when it checks give_up_above_reserved
// at the step's first op, known once the persistent state and the prelude are planned (the
// step's ops need not exist): the persistent device allocations it makes before that op, but
// the prelude's (which the prelude may free) and the optimizer state (torch.optim makes it at
// the first step, [State made at the first step]). Reserved memory is never below the
// allocations it holds, so a replay given a give_up_above_reserved below this gives up at the
// first op at the latest ([Hopeless plans], planner/plan.h).
std::int64_t state_bytes_before_first_op(const Schedule& schedule);
// [Job prelude] The caching allocator's segments (bytes each, ascending) once the schedule's
// prelude has run: what the job has reserved before its first step.
std::vector<std::int64_t> prelude_segments(const Schedule& schedule);

// PyTorch's caching allocator (c10/cuda/CUDACachingAllocator.cpp), reduced to what sets
// reserved memory: 512-byte rounding, a small pool (<= 1 MiB, 2 MiB segments) and a large
// pool (20 MiB segments below 10 MiB, else rounded to 2 MiB), best-fit reuse of cached
// blocks of the same stream and pool, block splitting and merging of free neighbours.
//
// max_split_size_mb (AllocatorSettings::max_split_size_bytes; DeviceCachingAllocator::
// get_free_block, should_split, release_available_cached_blocks): a block of at least that
// size is never split; a request below it never takes a cached block of at least that size,
// and a request of at least that size takes a cached block only if it is less than
// kLargeBuffer (20 MiB) larger. Over capacity, such oversize cached segments are released
// first (enough of them, the largest first) before the whole cache is.
//
// expandable_segments:True (Note [Expandable Segments], ExpandableSegment,
// find_expandable_block, map_block, try_allocate_expandable_block, unmap_block): instead of
// one cudaMalloc per segment, one segment per stream and pool over a large virtual address
// range, of which pages are mapped as needed: 2 MiB pages (kSmallBuffer) in the small pool,
// 20 MiB pages (kLargeBuffer) in the large one. A request no cached block fits maps pages at
// the lowest address where free and unmapped space together fit it (normally the end),
// merging with the free block before them; every block may then be split (remaining >=
// 512 B). Best fit counts a block followed by unmapped space as that much larger, so it is
// taken last. Releasing the cache unmaps the whole pages inside free blocks. Reserved is the
// mapped pages, so it stays within a page per stream and pool of what the blocks need.
//
// The one implementation of these rules: the planner's replay uses it alone (segments are
// bookkeeping, a capacity bounds them), and the micro-runtime's allocator
// (runtime/allocator.h) uses it with a SegmentProvider that backs each segment with memory.
class CachingAllocatorModel {
 public:
  // Where segments come from when they are real: map() backs a new segment (numbered in
  // creation order) or says it cannot; unmap() takes back a released one. An expandable
  // segment is `bytes` of address space whose pages map_pages() backs and unmap_pages() takes
  // back (offsets from the segment's start; a released expandable segment has none mapped).
  class SegmentProvider {
   public:
    virtual ~SegmentProvider() = default;
    virtual bool map(int segment, std::int64_t bytes) = 0;
    virtual void unmap(int segment, std::int64_t bytes) = 0;
    virtual bool map_pages(int segment, std::int64_t address_space_bytes, std::int64_t offset, std::int64_t bytes) = 0;
    virtual void unmap_pages(int segment, std::int64_t offset, std::int64_t bytes) = 0;
  };
  // allocate() with a provider that cannot back a new segment even after the cached ones
  // are released (PyTorch's OOM after its one retry).
  struct OutOfSegments : std::runtime_error {
    explicit OutOfSegments(std::int64_t bytes) : std::runtime_error("no segment"), segment_bytes(bytes) {}
    std::int64_t segment_bytes;
  };

  // Without a provider, `capacity_bytes` bounds reserved memory (0: unbounded): past it the
  // cached segments are released first, as PyTorch does when cudaMalloc fails, and the
  // segment is made anyway (the replay reports the overage). With one, the provider decides.
  explicit CachingAllocatorModel(double capacity_bytes = 0, SegmentProvider* provider = nullptr,
                                 AllocatorSettings settings = {})
      : free_lists_(2 * kStreamCount), capacity_bytes_(capacity_bytes), provider_(provider), settings_(settings) {}
  // Returns a handle for free(); throws OutOfSegments (only with a provider).
  int allocate(std::int64_t bytes, int stream);
  void free(int handle);
  // [recordStream] A free of a block whose tensor was record_stream()ed on `stream`: the block
  // leaves allocated memory now but joins the pool only once `event_op`, the last op queued on
  // `stream` when it was freed, is known to have finished (completed_through). PyTorch's free()
  // inserts a CUDA event per recorded stream (insert_events) and process_events() returns the
  // block at a later malloc once they have completed; when a segment cannot be had it waits for
  // all of them first (synchronize_and_free_events in release_cached_blocks), and so does this
  // model before its retry (c10/cuda/CUDACachingAllocator.cpp, DeviceCachingAllocator::free,
  // process_events, release_cached_blocks).
  void free_after(int handle, int stream, int event_op);
  // Every op of each stream up to clock[stream] has finished: blocks waiting on them return.
  void completed_through(const StreamClock& clock);
  std::int64_t pending_bytes() const { return pending_bytes_; }
  std::int64_t reserved_bytes() const { return reserved_; }
  std::int64_t peak_reserved_bytes() const { return peak_reserved_; }
  std::int64_t retries() const { return retries_; }
  // Where a live block lies: its segment and its offset in it.
  int segment_of(int handle) const { return blocks_[handle].segment; }
  std::int64_t offset_of(int handle) const { return blocks_[handle].offset; }
  // Every segment whose blocks are all free goes back (torch.cuda.empty_cache()).
  void release_cached_segments();
  // Fixed segments not released, as (segment, bytes).
  std::vector<std::pair<int, std::int64_t>> live_segments() const;
  // Per stream pool, the bytes its fixed segments and its expandable segments' mapped pages hold.
  std::array<std::int64_t, kStreamCount> reserved_by_stream() const;
  // The mapped pages of expandable segments, as runs of adjacent pages.
  struct PageRange {
    int segment;
    std::int64_t offset;
    std::int64_t bytes;
  };
  std::vector<PageRange> mapped_pages() const;

  static std::int64_t round_size(std::int64_t bytes);          // 512-byte granularity
  static std::int64_t segment_size(std::int64_t rounded_bytes);  // what cudaMalloc gets
  // An expandable segment's page: kSmallBuffer (2 MiB) in the small pool, kLargeBuffer (20 MiB)
  // in the large (Note [Expandable Segments]: "we use 2MiB pages for our small pool and 20MiB
  // pages for our large pool"; find_expandable_block's segment_size).
  static std::int64_t expandable_page_size(bool small);
  // Its address space: a multiple of the page, far beyond any GPU (PyTorch reserves 1 1/8 of
  // the GPU's memory; the model does not know the GPU, and more than the GPU holds is never
  // mapped, so the exact figure does not change what is reserved).
  static std::int64_t expandable_address_space(bool small);

 private:
  // A segment's blocks form a list in address order (prev/next), so merging a freed block
  // with its neighbours is O(1).
  // An unmapped block (expandable segments only) is address space without pages: free, but
  // in no free list.
  struct Block {
    int segment;
    std::int64_t offset;
    std::int64_t size;
    bool free;
    int prev = -1;
    int next = -1;
    bool mapped = true;
  };
  struct Segment {
    int stream;
    bool small;
    std::int64_t size;  // an expandable segment: its address space
    int first = -1;  // its lowest block
    bool released = false;
    bool expandable = false;
    std::int64_t mapped_bytes = 0;  // an expandable segment's pages
  };
  // The best-fitting free block for `size`, taken off its free list, marked in use and split;
  // -1: none.
  int take_free_block(std::int64_t size, int stream, bool small);
  // A new segment's bytes from the provider, or within the capacity; false: none to be had.
  bool obtain_segment(int segment, std::int64_t bytes, std::int64_t request_size, int stream, bool small);
  // Fixed segments: a new cudaMalloc'd segment holding a block of `size`; -1: none to be had.
  int allocate_segment(std::int64_t size, int stream, bool small);
  // Expandable segments (try_allocate_expandable_block): maps pages for a block of `size`;
  // -1: the pages could not be had (those mapped on the way stay, free).
  int allocate_expandable(std::int64_t size, int stream, bool small, bool after_release);
  int find_expandable_block(std::int64_t size, int stream, bool small);
  // Maps the pages for the first `bytes` of unmapped block `block` (map_block); returns the
  // free block they join, or -1.
  int map_block(int block, std::int64_t bytes, bool after_release);
  bool map_within_capacity(int segment, std::int64_t offset, std::int64_t bytes, bool after_release);
  void unmap_free_pages(int block);  // unmap_block
  // release_available_cached_blocks: frees cached oversize segments (>= max_split_size) of the
  // stream's pool, the best fit for max(size, max_split_size) or else the largest until that
  // much is freed; true when it freed enough.
  bool release_oversize_segments(std::int64_t size, int stream, bool small);
  void release_segment(int segment);
  bool should_split(int block, std::int64_t size) const;
  // Free blocks of live segments, one list per (stream, pool) ordered as the best-fit
  // search visits them: by size, then segment and address (the first of equal sizes wins,
  // as in a scan). Sorted vectors rather than one std::set: a step splits and frees blocks
  // thousands of times, the set's node allocations and six-field comparisons were most of
  // the replay (a sweep replays thousands of steps). The vectors are cut in chunks
  // (planner/sorted_chunks.h): the lists grow with the model's depth.
  struct FreeEntry {  // 24 bytes, the two ints side by side: inserts move fewer bytes
    std::int64_t size;
    std::int64_t offset;
    int segment;
    int block;
    bool operator<(const FreeEntry& o) const {
      if (size != o.size) return size < o.size;
      if (segment != o.segment) return segment < o.segment;
      return offset < o.offset;
    }
  };
  using FreeList = SortedChunks<FreeEntry>;
  // Cuts `size` bytes off the front of a block in use; the rest, when worth keeping apart, is a
  // free block after it. `listed`: the block's own free-list entry, given only when it splits,
  // which the rest's then replaces (the block leaves the list).
  void split(int block, std::int64_t size, const FreeList::const_iterator* listed = nullptr);
  FreeList& free_list(int stream, bool small) {  // inline: called at every list operation
    const std::size_t i = 2 * static_cast<std::size_t>(stream) + (small ? 1 : 0);
    if (i >= free_lists_.size()) grow_free_lists(i + 1);  // a stream beyond the schedule's
    return free_lists_[i];
  }
  void grow_free_lists(std::size_t lists);
  void release_pending();  // synchronize_and_free_events: every pending block joins the pool
  struct Pending {
    int block;
    int stream;
    int event_op;
  };
  std::vector<Pending> pending_;
  std::int64_t pending_bytes_ = 0;
  FreeEntry free_entry(int block) const;
  void mark_free(int block);
  void mark_used(int block);
  int coalesce(int block);
  int coalesce_listed(int block);  // coalesce for a mapped block
  void absorb(int left, int right);  // left's range grows over right's, the block after it
  void unlist(int block);  // out of its free list (the flag unchanged)
  std::vector<FreeList> free_lists_;  // index 2 * stream + small
  // Segments that were one free block at some moment since the last release_cached_segments:
  // freeing merges neighbours, so a segment is wholly free only as one free block, and every
  // such block went through mark_free with no neighbour. release_cached_segments checks these
  // alone instead of every segment (a replay past the capacity retries at each new segment,
  // and scanning them all made it quadratic: 17% of `fsdpsim estimate` of 405B on 1,024 GPUs).
  std::vector<int> wholly_free_candidates_;
  // release_cached_segments' list, kept between calls: past the capacity every new segment
  // releases the cached ones first, and a fresh vector each time was a malloc and a free per call.
  std::vector<int> release_candidates_;

  double capacity_bytes_;
  SegmentProvider* provider_;
  AllocatorSettings settings_;
  std::vector<Block> blocks_;
  std::vector<Segment> segments_;
  std::int64_t reserved_ = 0;
  std::int64_t peak_reserved_ = 0;
  std::int64_t retries_ = 0;
};

}  // namespace fsdpsim::planner

namespace fsdpsim::planner {

// The one assumed figure `fsdpsim verify` adds to the runtime's reserved memory for the GPU
// memory outside PyTorch's caching allocator. The planner's estimates no longer use it: they
// model that memory part by part (planner/device_memory.h: NCCL's buffers per communicator,
// cuBLAS's workspaces, and the CUDA context, whose 1 GiB calibration.cuda_context_bytes
// assumption is this same figure).
constexpr double kDefaultDeviceOverheadBytes = 1024.0 * 1024.0 * 1024.0;

}  // namespace fsdpsim::planner
