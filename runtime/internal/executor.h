// The executor shared by the backends (internal to runtime/): one CPU thread per rank
// plays the schedule's issue order against a RankDevice (the backend's streams, events,
// collectives and compute) and a CachingAllocator over the device's segments. RunControl
// holds what the ranks share: the first fault, the abort, progress for diagnosing hangs.
#pragma once

#include <algorithm>
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
#include "runtime/internal/allocator.h"
#include "runtime/runtime.h"

namespace fsdpsim::runtime {
class HostGroupComm;  // runtime/host_comm.h
}

namespace fsdpsim::runtime::detail {

using Clock = std::chrono::steady_clock;

// The bytes a host-backend buffer holds for `planned_bytes` of a collective: scaled by
// byte_scale, at most max_buffer_bytes (0: no cap). What the host backend allocates, and what
// [Host buffers] (runtime/executor.cpp) sizes a run by before it starts.
inline double host_buffer_bytes(double planned_bytes, const RunOptions& o) {
  const double scaled = planned_bytes * o.byte_scale;
  return o.max_buffer_bytes > 0 ? std::min(scaled, static_cast<double>(o.max_buffer_bytes)) : scaled;
}

// A wait of `seconds` as the clock counts it. The clock's nanosecond count overflows past about
// 292 years, and a modeled op of 1e10 s was not waited for at all, nor a --timeout of 1e10 s
// kept (the session-30 audit). Past a billion seconds (31 years) a wait is as good as forever:
// it is saturated there, so a run's timeout fires as it should.
inline Clock::duration clock_seconds(double seconds) {
  constexpr double kForever = 1e9;
  return std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(std::min(seconds, kForever)));
}

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
class RunControl;

// How far a rank's CPU got: the step it is in, and step x ops + op + 1 of the last op it
// issued (0: nothing yet).
struct Progress {
  int step = 0;
  std::int64_t issued = 0;
};

// A multi-process launch (runtime/mpi/): what the executor and the backends need from the
// other processes. Each process plays one rank, its world rank.
class ProcessLink {
 public:
  virtual ~ProcessLink() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual int local_rank() const = 0;  // among the processes of this node
  // The run whose progress this process reports when another one asks (nullptr: none).
  virtual void attach(RunControl* control) = 0;
  // Every process meets (the start of each step); ends as Barrier::wait does.
  virtual Barrier::Result barrier(Clock::time_point deadline, const std::atomic<bool>& abort) = 0;
  // Another process's progress, asked for by message; nullopt if it did not answer in time.
  virtual std::optional<Progress> progress(int rank) = 0;
  // Ends every process with the run's first fault (called after the local abort): rank 0
  // prints it once, MPI_Abort ends them all. Does not return.
  [[noreturn]] virtual void fault(const RuntimeError& error) = 0;
  // Rank 0's `bytes` to every process (collective: every process calls it).
  virtual void broadcast(void* data, std::size_t bytes) = 0;
  // A communicator for this process's instance of a process group (`ranks`, in order,
  // this rank among them) for the host backend. Collective: every process calls it, group by
  // group in the same order.
  virtual std::unique_ptr<HostGroupComm> group_comm(int group, const std::vector<int>& ranks) = 0;
  // A blocking call that cannot time out by itself (ncclCommInitRank): past the run's timeout
  // (at least 60 s: set-up across nodes is slow) the run ends with "timeout: rank R waited T s
  // for WHAT".
  virtual void watch(const std::string& what) = 0;
  virtual void unwatch() = 0;
};

class RunControl {
 public:
  // `link`: the other processes of an mpi launch (nullptr: this process plays every rank).
  RunControl(const planner::Schedule& schedule, const RunOptions& options, std::vector<int> played,
             ProcessLink* link = nullptr);
  ~RunControl();
  ProcessLink* const link;

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
  Progress progress(int position) const;
  Barrier::Result step_barrier(int position);
  std::optional<RuntimeError> error() const;
  std::string op_text(int op) const;  // op 5 "all-gather layers.0"

 private:
  std::atomic<bool> aborted_{false};
  mutable std::mutex m_;
  // Held while abort() runs the wakers, which reach into the devices: execute() takes it before
  // the devices are torn down, so an abort a stream thread is in the middle of finishes first.
  std::mutex abort_running_m_;
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

// The host backend. With a link (an mpi launch) it plays the link's rank only and returns its
// result; the mpi launcher gathers them. The cuda backend and the mpi launcher are modules
// (runtime/internal/modules.h).
RunResult run_host(const planner::Schedule& schedule, const RunOptions& options, ProcessLink* link = nullptr);

}  // namespace fsdpsim::runtime::detail
