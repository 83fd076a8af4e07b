// The executor shared by the backends (internal to runtime/): one CPU thread per rank
// plays the schedule's issue order against a RankDevice (the backend's streams, events,
// collectives and compute) and a CachingAllocator over the device's segments. RunControl
// holds what the ranks share: the first fault, the abort, progress for diagnosing hangs.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "planner/schedule.h"
#include "runtime/allocator.h"
#include "runtime/runtime.h"

namespace fsdpsim::runtime::detail {

using Clock = std::chrono::steady_clock;

// Thrown to unwind a thread once the run is aborted; the fault that aborted it is kept in
// RunControl.
struct Aborted {};

// A reusable barrier whose waits end on timeout or abort (the members are fixed).
class Barrier {
 public:
  enum class Result { ok, timeout, aborted };
  explicit Barrier(int count) : count_(count), here_(count, 0) {}
  Result wait(int member, Clock::time_point deadline, const std::atomic<bool>& abort);
  std::vector<int> absent() const;  // members not yet waiting in the current round
  void wake();                      // lets waiters see an abort

 private:
  mutable std::mutex m_;
  std::condition_variable cv_;
  int count_;
  int waiting_ = 0;
  std::uint64_t generation_ = 0;
  std::vector<char> here_;
};

class RankDevice;

class RunControl {
 public:
  RunControl(const planner::Schedule& schedule, const RunOptions& options, std::vector<int> played);

  const planner::Schedule& schedule;
  const RunOptions& options;
  const std::vector<int> played;     // world ranks played, by position
  std::vector<RankDevice*> devices;  // by position

  bool aborted() const { return aborted_.load(); }
  const std::atomic<bool>& abort_flag() const { return aborted_; }
  Clock::time_point deadline() const;
  // Records the fault (the first one wins) and aborts the run.
  void fail(const RuntimeError& error);
  void abort();
  void add_waker(std::function<void()> wake);
  // Sleeps until the run is aborted (true) or `until` passes (false).
  bool wait_for_abort(Clock::time_point until);
  // A wait on rank `position` ran out of time: finds what hangs (a collective some rank never
  // joined, or the rank's earliest unfinished op), fails the run with it, throws Aborted.
  [[noreturn]] void timeout(int position, int waited_op, const std::string& what);
  // The CPU of `position` issued `op` of `step` (for the diagnosis).
  void issued(int position, int step, int op);
  void begin_step(int position, int step);
  Barrier::Result step_barrier(int position);
  std::optional<RuntimeError> error() const;
  std::string op_text(int op) const;  // op 5 "all-gather layers.0"

 private:
  std::atomic<bool> aborted_{false};
  mutable std::mutex m_;
  std::mutex abort_m_;
  std::condition_variable abort_cv_;
  std::optional<RuntimeError> error_;
  std::vector<std::function<void()>> wakers_;
  std::unique_ptr<std::atomic<std::int64_t>[]> issued_;  // by position: step * ops + op + 1
  std::unique_ptr<std::atomic<int>[]> step_;
  Barrier step_barrier_;
};

// One rank's device: its streams, events, collectives and compute.
class RankDevice {
 public:
  virtual ~RankDevice() = default;
  virtual SegmentSource& segments() = 0;
  virtual void thread_init() {}  // on the rank's CPU thread, before anything else
  virtual void begin_step(int step) = 0;
  // Queues the op on its stream behind its deps; `pointers` has each live allocation's address.
  virtual void issue(const planner::Op& op, const std::vector<void*>& pointers) = 0;
  virtual void wait_done(int op) = 0;  // the CPU blocks until the op has finished
  virtual bool done(int op) = 0;
  // Waits for every op of the step; their times in modeled seconds from the step start.
  virtual std::vector<OpTiming> end_step() = 0;
  virtual double now_seconds() = 0;  // modeled seconds since the step start (CPU clock)
  virtual void finish(RankResult& result) {}
};

// Plays the schedule on the devices (one per played rank) and collects the results; throws
// the run's first fault.
RunResult execute(RunControl& control, std::vector<std::unique_ptr<RankDevice>>& devices, const std::string& backend,
                  const std::string& device_text);

// The modeled durations the run uses (options', else nominal), checked against the schedule.
std::vector<double> durations_for(const planner::Schedule& schedule, const RunOptions& options);

// Data the host backend's collectives carry, so outputs can be checked exactly in fp32
// (small integers: sums over up to 256 ranks stay below 2^24).
inline float pattern_value(int rank, int op, std::size_t index) {
  return static_cast<float>((rank % 61 + 1) * static_cast<int>(index % 1021 + 1) + op % 13);
}

#if FSDPSIM_WITH_CUDA
RunResult run_cuda(const planner::Schedule& schedule, const RunOptions& options);
#endif
RunResult run_host(const planner::Schedule& schedule, const RunOptions& options);

}  // namespace fsdpsim::runtime::detail
