#include "runtime/internal/executor.h"

#include <unistd.h>

#include <algorithm>
#include <limits>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>
#include <system_error>
#include <thread>

#include "models/bytes_text.h"
#include "models/json_input.h"
#include "runtime/internal/modules.h"
#include "runtime/launch.h"

namespace fsdpsim::runtime {

using planner::Op;
using planner::Schedule;

namespace detail {

namespace {

std::string rank_list(const std::vector<int>& ranks) {
  if (ranks.empty()) return "";
  bool consecutive = true;
  for (std::size_t i = 1; i < ranks.size(); ++i) consecutive = consecutive && ranks[i] == ranks[i - 1] + 1;
  if (consecutive && ranks.size() > 2) return std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
  std::string out;
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(ranks[i]);
  }
  return out;
}

}  // namespace

// ---- Barrier ---------------------------------------------------------------------------------

Barrier::Result Barrier::wait(int member, Clock::time_point deadline, const std::atomic<bool>& abort) {
  std::unique_lock<std::mutex> lock(m_);
  const std::uint64_t generation = generation_;
  here_[member] = 1;
  if (++waiting_ == count_) {
    waiting_ = 0;
    std::fill(here_.begin(), here_.end(), 0);
    ++generation_;
    cv_.notify_all();
    return Result::ok;
  }
  while (generation_ == generation) {
    if (abort.load()) return Result::aborted;
    if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && generation_ == generation)
      return abort.load() ? Result::aborted : Result::timeout;
  }
  return Result::ok;
}

std::vector<int> Barrier::absent() const {
  std::lock_guard<std::mutex> lock(m_);
  std::vector<int> out;
  for (int i = 0; i < count_; ++i)
    if (!here_[i]) out.push_back(i);
  return out;
}

void Barrier::wake() {
  std::lock_guard<std::mutex> lock(m_);
  cv_.notify_all();
}

// ---- RunControl ----------------------------------------------------------------------------------

RunControl::RunControl(const Schedule& s, const RunOptions& o, std::vector<int> p, ProcessLink* l)
    : link(l),
      schedule(s),
      options(o),
      played(std::move(p)),
      devices(played.size(), nullptr),
      issued_(new std::atomic<std::int64_t>[played.size()]),
      step_(new std::atomic<int>[played.size()]),
      step_barrier_(static_cast<int>(played.size())) {
  for (std::size_t i = 0; i < played.size(); ++i) {
    issued_[i] = 0;
    step_[i] = 0;
  }
  add_waker([this] { step_barrier_.wake(); });
  if (link) link->attach(this);
}

RunControl::~RunControl() {
  if (link) link->attach(nullptr);
}

Clock::time_point RunControl::deadline() const {
  return Clock::now() + clock_seconds(options.timeout_seconds);
}

void RunControl::fail(const RuntimeError& e) {
  bool first = false;
  {
    std::lock_guard<std::mutex> lock(m_);
    if (!error_) {
      error_ = e;
      first = true;
    }
  }
  abort();
  // Another process cannot see this one's exception: the link ends them all (after the local
  // abort above, which on cuda has aborted the NCCL communicators).
  if (first && link) link->fault(e);
}

void RunControl::abort() {
  std::lock_guard<std::mutex> running(abort_running_m_);
  if (aborted_.exchange(true)) return;
  std::vector<std::function<void()>> wakers;
  {
    std::lock_guard<std::mutex> lock(m_);
    wakers = wakers_;
  }
  for (auto& w : wakers) w();
  std::lock_guard<std::mutex> lock(abort_m_);
  abort_cv_.notify_all();
}

bool RunControl::wait_for_abort(Clock::time_point until) {
  std::unique_lock<std::mutex> lock(abort_m_);
  return abort_cv_.wait_until(lock, until, [&] { return aborted(); });
}

void RunControl::add_waker(std::function<void()> wake) {
  std::lock_guard<std::mutex> lock(m_);
  wakers_.push_back(std::move(wake));
}

std::optional<RuntimeError> RunControl::error() const {
  std::lock_guard<std::mutex> lock(m_);
  return error_;
}

std::string RunControl::op_text(int op) const {
  if (op < 0 || op >= static_cast<int>(schedule.ops.size())) return "op " + std::to_string(op);
  return "op " + std::to_string(op) + " \"" + schedule.ops[op].name + "\"";
}

void RunControl::issued(int position, int step, int op) {
  issued_[position] = static_cast<std::int64_t>(step) * static_cast<std::int64_t>(schedule.ops.size()) + op + 1;
}

void RunControl::begin_step(int position, int step) { step_[position] = step; }

Progress RunControl::progress(int position) const { return {step_[position].load(), issued_[position].load()}; }

Barrier::Result RunControl::step_barrier(int position) {
  Barrier::Result r = step_barrier_.wait(position, deadline(), aborted_);
  if (r == Barrier::Result::ok && link) r = link->barrier(deadline(), aborted_);
  return r;
}

void RunControl::timeout(int position, int waited_op, const std::string& what) {
  if (aborted()) throw Aborted{};
  const int rank = played[position];
  const std::int64_t n = static_cast<std::int64_t>(schedule.ops.size());
  const int step = step_[position];
  const int last_issued = static_cast<int>(std::min<std::int64_t>(issued_[position] - step * n - 1, n - 1));
  char waited[64];
  std::snprintf(waited, sizeof waited, "%g s", options.timeout_seconds);
  RankDevice* device = devices[position];
  auto unfinished = [&](bool collectives_only) {
    for (int op = 0; op <= last_issued; ++op) {
      if (collectives_only && !planner::is_collective(schedule.ops[op].kind)) continue;
      if (device && !device->done(op)) return op;
    }
    return -1;
  };
  const int stuck = options.virtual_world ? -1 : unfinished(true);
  // How far rank q got: from this process, or (mpi launch) asked of the process playing it.
  auto progress_of = [&](int q) -> std::optional<Progress> {
    auto it = std::find(played.begin(), played.end(), q);
    if (it != played.end()) return progress(static_cast<int>(it - played.begin()));
    if (link) return link->progress(q);
    return std::nullopt;
  };
  auto last_issued_text = [&](std::int64_t issued) {
    const std::int64_t last = issued - step * n - 1;
    return (last >= 0 && last < n ? op_text(static_cast<int>(last)) : std::string("nothing")) + " in step " +
           std::to_string(step);
  };
  std::string message;
  int blame_rank = rank, blame_op = waited_op;
  if (stuck >= 0) {
    const Op& op = schedule.ops[stuck];
    std::vector<int> members;
    for (const auto& instance : group_instances(schedule, op.group))
      if (std::find(instance.begin(), instance.end(), rank) != instance.end()) members = instance;
    std::vector<int> missing, unknown;
    std::int64_t missing_issued = 0;
    for (int q : members) {
      const auto p = progress_of(q);
      if (!p) unknown.push_back(q);
      if (!p || p->issued > step * n + stuck) continue;
      if (missing.empty()) missing_issued = p->issued;
      missing.push_back(q);
    }
    const std::string where = planner::to_string(op.kind) + " over group \"" + schedule.groups[op.group].name +
                              "\" (ranks " + rank_list(members) + ")";
    blame_op = stuck;
    if (!missing.empty()) {
      blame_rank = missing.front();
      message = "timeout: rank " + rank_list(missing) + " never joined " + op_text(stuck) + " (" + where + "); rank " +
                std::to_string(rank) + " waited " + waited + " for " + what + " (rank " +
                std::to_string(missing.front()) + " last issued " + last_issued_text(missing_issued) + ")";
    } else if (!unknown.empty()) {
      message = "timeout: " + op_text(stuck) + " (" + where + ") did not complete on rank " + std::to_string(rank) +
                " within " + waited + "; the process of rank " + rank_list(unknown) +
                " did not say how far it got (rank " + std::to_string(rank) + " was waiting for " + what + ")";
    } else {
      message = "timeout: " + op_text(stuck) + " (" + where + ") did not complete on rank " + std::to_string(rank) +
                " within " + waited + " although every rank of its group issued it (rank " + std::to_string(rank) +
                " was waiting for " + what + ")";
    }
  } else if (waited_op < 0) {
    // The step barrier: which ranks never started this step (at most 8 named).
    std::vector<int> ranks = played;
    if (link) {
      ranks.clear();
      for (int q = 0; q < link->size(); ++q) ranks.push_back(q);
    }
    std::vector<int> absent;
    std::int64_t absent_issued = 0;
    for (int q : ranks) {
      if (q == rank) continue;
      const auto p = progress_of(q);
      if (!p || p->step >= step) continue;
      if (absent.empty()) absent_issued = p->issued;
      absent.push_back(q);
      if (absent.size() == 8) break;
    }
    message = "timeout: rank " + std::to_string(rank) + " waited " + waited + " for " + what;
    if (!absent.empty()) {
      blame_rank = absent.front();
      const int absent_step = static_cast<int>(absent_issued > 0 ? (absent_issued - 1) / n : 0);
      const std::int64_t last = absent_issued - static_cast<std::int64_t>(absent_step) * n - 1;
      message = "timeout: rank " + rank_list(absent) + " never started step " + std::to_string(step) + "; " +
                message.substr(std::string("timeout: ").size()) + " (rank " + std::to_string(absent.front()) +
                " last issued " + (last >= 0 ? op_text(static_cast<int>(last)) : std::string("nothing")) +
                " in step " + std::to_string(absent_step) + ")";
    }
  } else {
    const int first = unfinished(false);
    message = "timeout: rank " + std::to_string(rank) + " waited " + waited + " for " + what;
    if (first >= 0 && first != waited_op) message += "; its earliest unfinished op is " + op_text(first);
  }
  fail(RuntimeError(FaultKind::timeout, blame_rank, blame_op, message));
  throw Aborted{};
}

// ---- the rank's CPU thread -------------------------------------------------------------------------

namespace {

// The handle of a host allocation (no device block).
constexpr int kHostHandle = -2;

// A rank's host memory by placement, and the highest each reached (and their sum) since the
// last reset.
struct HostMemoryCount {
  std::int64_t pinned = 0, pageable = 0;
  std::int64_t peak_pinned = 0, peak_pageable = 0, peak_total = 0;
  void add(planner::Placement p, std::int64_t bytes) {
    (p == planner::Placement::pinned_host ? pinned : pageable) += bytes;
    peak_pinned = std::max(peak_pinned, pinned);
    peak_pageable = std::max(peak_pageable, pageable);
    peak_total = std::max(peak_total, pinned + pageable);
  }
  void reset_peaks() {
    peak_pinned = pinned;
    peak_pageable = pageable;
    peak_total = pinned + pageable;
  }
};

void rank_main(RunControl& c, RankDevice& device, int position, RankResult& result) {
  const Schedule& s = c.schedule;
  const RunOptions& o = c.options;
  const int rank = c.played[position];
  const int n_ops = static_cast<int>(s.ops.size());
  const int n_allocs = static_cast<int>(s.allocations.size());
  result.rank = rank;
  // A fault aborts the run before the allocator unwinds, so a backend can leave memory a
  // stuck stream may still use alone (the cuda backend does not free after an abort).
  auto fail_and_unwind = [&](const RuntimeError& e) {
    c.fail(e);
    throw Aborted{};
  };
  try {
    device.thread_init();
    if (s.allocator.expandable_segments && !device.segments().supports_expandable_segments())
      fail_and_unwind(RuntimeError(FaultKind::device, rank, -1,
                                   "the schedule asks for expandable segments (allocator.expandable_segments), "
                                   "which the " + o.backend + " backend does not provide (its segments are "
                                   "cudaMalloc'd; the host backend plays them)"));
    CachingAllocator allocator(device.segments(), s.allocator);
    try {
      std::vector<int> handle(n_allocs, -1);
      std::vector<void*> pointer(n_allocs, nullptr);
      HostMemoryCount host;
      auto make = [&](int a, int op) {
        const auto& al = s.allocations[a];
        if (planner::on_host(al.placement)) {
          host.add(al.placement, al.bytes);
          handle[a] = kHostHandle;
          return;
        }
        try {
          handle[a] = allocator.allocate(al.bytes, static_cast<int>(al.stream));
        } catch (const OutOfMemory& e) {
          std::string text = "out of memory: rank " + std::to_string(rank) + ", " +
                             (op >= 0 ? c.op_text(op) : std::string("before the step")) + " allocates " +
                             gib_or_mib(static_cast<double>(al.bytes)) + " (allocation " + std::to_string(a) + " \"" +
                             al.label + "\", " + planner::to_string(al.category) + " on stream " +
                             planner::to_string(al.stream) + "): a new " +
                             gib_or_mib(static_cast<double>(e.segment_bytes)) + " segment did not fit; allocated " +
                             gib_or_mib(static_cast<double>(e.allocated_bytes)) + ", reserved " +
                             gib_or_mib(static_cast<double>(e.reserved_bytes));
          if (o.backend == "host" && o.capacity_bytes > 0) text += " of a capacity of " + gib_or_mib(o.capacity_bytes);
          throw RuntimeError(FaultKind::out_of_memory, rank, op, text);
        }
        pointer[a] = allocator.pointer(handle[a]);
      };
      // recordStream: a recorded free waits for the last op queued on its stream when it is
      // freed, and comes back when the CPU has waited for an op that covers it (the planner's
      // replay follows the same rule: planner/memory.h, [recordStream]).
      std::vector<int> last_on_stream(planner::kStreamCount, -1);
      const bool any_recorded = std::any_of(s.allocations.begin(), s.allocations.end(),
                                            [](const planner::Allocation& al) { return al.recorded_stream >= 0; });
      const std::vector<planner::StreamClock> clocks =
          any_recorded ? planner::completion_clocks(s) : std::vector<planner::StreamClock>{};
      auto release = [&](int a) {
        const auto& al = s.allocations[a];
        if (planner::on_host(al.placement)) {
          host.add(al.placement, -al.bytes);
        } else if (al.recorded_stream >= 0 && al.recorded_stream < planner::kStreamCount) {
          allocator.free_after(handle[a], al.recorded_stream, last_on_stream[al.recorded_stream]);
        } else {
          allocator.free(handle[a]);
        }
        handle[a] = -1;
        pointer[a] = nullptr;
      };
      // [State made at the first step] (planner/schedule.h): such state is made by its op in the
      // first step played, and is alive from the start of every later one.
      const std::vector<std::vector<int>> made_at_first_step = planner::made_at_first_step_by_op(s);
      // [Job prelude] (planner/schedule.h): played before the first step, as the replay does.
      for (const planner::PreludeEvent& e : s.prelude) e.free ? release(e.allocation) : make(e.allocation, -1);
      const std::vector<char> from_prelude = planner::made_in_prelude(s);
      for (const auto& al : s.allocations)
        if (al.persistent && al.first_step_op < 0 && !from_prelude[al.id]) make(al.id, -1);
      const int warmup = std::max(0, o.warmup_steps);
      for (int step = 0; step < warmup + o.steps; ++step) {
        const bool measured = step >= warmup;
        c.begin_step(position, step);
        switch (c.step_barrier(position)) {
          case Barrier::Result::ok:
            break;
          case Barrier::Result::aborted:
            throw Aborted{};
          case Barrier::Result::timeout:
            c.timeout(position, -1, "the other ranks to start step " + std::to_string(step));
        }
        device.begin_step(step);
        if (measured) {
          allocator.reset_peak_allocated();
          host.reset_peaks();
          if (step == warmup) {
            result.allocated_at_start_bytes = allocator.allocated_bytes();
            result.peak_allocated_bytes = allocator.allocated_bytes();
            result.peak_op = -1;
          }
          result.allocated_at_op.assign(n_ops, 0);
          result.memory.clear();
        }
        for (const Op& op : s.ops) {
          if (rank == o.hooks.stall_rank && op.id == o.hooks.stall_op) {
            // Test hook: this rank's CPU never issues the op (as if stuck outside the step).
            c.wait_for_abort(c.deadline() + clock_seconds(o.timeout_seconds));
            if (c.aborted()) throw Aborted{};
            throw RuntimeError(
                FaultKind::timeout, rank, op.id,
                "timeout: rank " + std::to_string(rank) + " was stalled by a test hook before " + c.op_text(op.id));
          }
          for (int w : op.cpu_waits) {
            device.wait_done(w);
            if (any_recorded) allocator.completed_through(clocks[w]);
          }
          last_on_stream[static_cast<int>(op.stream)] = op.id;
          if (step == 0)
            for (int a : made_at_first_step[op.id]) make(a, op.id);
          for (int a : op.allocs) make(a, op.id);
          if (measured) {
            result.allocated_at_op[op.id] = allocator.allocated_bytes();
            if (allocator.allocated_bytes() > result.peak_allocated_bytes) {
              result.peak_allocated_bytes = allocator.allocated_bytes();
              result.peak_op = op.id;
            }
            result.memory.push_back(
                {device.now_seconds(), op.id, allocator.allocated_bytes(), allocator.reserved_bytes()});
          }
          device.issue(op, pointer);
          c.issued(position, step, op.id);
          // [Host ops block the CPU] A host-stream op (the CPU optimizer step, FSDP2's host
          // gradient accumulation, DeepSpeed's NVMe swaps) is a synchronous call in PyTorch: the
          // CPU issues nothing more until it returns, as the analytic engine plays it.
          if (op.stream == planner::Stream::host) device.wait_done(op.id);
          for (int a : op.frees) release(a);
        }
        std::vector<OpTiming> timings = device.end_step();
        if (any_recorded) {  // every op has finished: recorded frees come back
          planner::StreamClock all;
          all.fill(std::numeric_limits<int>::max());
          allocator.completed_through(all);
        }
        if (measured) {
          double end = 0;
          for (const OpTiming& t : timings) end = std::max(end, t.end_seconds);
          result.steps.push_back(std::move(timings));
          result.step_seconds.push_back(end);
          // The allocator's own high-water mark is the measurement; the scan above names the op.
          result.peak_allocated_bytes = std::max(result.peak_allocated_bytes, allocator.peak_allocated_bytes());
        }
        // Back to the state before the step: what the step left allocated goes, persistent
        // state it freed comes back.
        for (int a = 0; a < n_allocs; ++a)
          if (handle[a] != -1 && !s.allocations[a].persistent) release(a);
        for (const auto& al : s.allocations)
          if (al.persistent && handle[al.id] == -1) make(al.id, -1);
      }
      result.peak_reserved_bytes = allocator.peak_reserved_bytes();
      result.allocator_retries = allocator.retries();
      result.peak_host_pinned_bytes = host.peak_pinned;
      result.peak_host_pageable_bytes = host.peak_pageable;
      result.peak_host_bytes = host.peak_total;
      device.finish(result);
    } catch (const RuntimeError& e) {
      fail_and_unwind(e);
    } catch (const std::exception& e) {
      fail_and_unwind(RuntimeError(FaultKind::internal, rank, -1, "rank " + std::to_string(rank) + ": " + e.what()));
    }
  } catch (const Aborted&) {
  } catch (const RuntimeError& e) {
    c.fail(e);
  } catch (const std::exception& e) {
    c.fail(RuntimeError(FaultKind::internal, rank, -1, "rank " + std::to_string(rank) + ": " + e.what()));
  }
}

}  // namespace

RunResult execute(RunControl& c, std::vector<std::unique_ptr<RankDevice>>& devices, const std::string& backend,
                  const std::string& device_text) {
  for (std::size_t i = 0; i < devices.size(); ++i) c.devices[i] = devices[i].get();
  std::vector<RankResult> results(devices.size());
  std::vector<std::thread> threads;
  try {
    for (std::size_t i = 0; i < devices.size(); ++i)
      threads.emplace_back([&, i] { rank_main(c, *devices[i], static_cast<int>(i), results[i]); });
  } catch (const std::system_error& e) {
    // The system refused another rank thread: the run is aborted and the ranks started are
    // joined, so the error is one line, not std::terminate on a joinable thread.
    c.abort();
    for (auto& t : threads) t.join();
    throw std::runtime_error("cannot start rank thread " + std::to_string(threads.size()) + " of " +
                             std::to_string(devices.size()) + " (" + e.what() +
                             "): run fewer ranks (--virtual-world plays one) or raise the process's limits");
  }
  for (auto& t : threads) t.join();
  if (auto e = c.error()) {
    // The stream thread that recorded the fault may still be in abort(), waking the devices the
    // caller destroys once this throws (a use after free that hung the host backend under CPU
    // contention): abort() here waits for it, or aborts first so that it returns at once.
    c.abort();
    throw *e;
  }
  RunResult r;
  r.backend = backend;
  r.device = device_text;
  r.world_size = c.schedule.world_size;
  r.virtual_world = c.options.virtual_world > 0;
  r.time_scale = backend == "host" ? c.options.time_scale : 1.0;
  r.ranks = std::move(results);
  return r;
}

std::vector<double> durations_for(const Schedule& s, const RunOptions& o) {
  if (o.costs.duration_seconds.empty())
    throw std::invalid_argument(
        "the runtime needs the ops' costs (RunOptions::costs: planner::price_ops from a cost model, or "
        "planner::costs_from_durations from a durations file); it has no rates of its own");
  planner::check_costs(s, o.costs);
  return o.costs.duration_seconds;
}

}  // namespace detail

namespace {

// [Host buffers] The host backend's ranks are threads of this process (one with
// --virtual-world), each with a send and a receive buffer as large as the largest collective it
// runs: its planned bytes x byte_scale, at most max_buffer_bytes (0: no cap). Refused before
// anything is allocated when they would take more than half this machine's memory (the
// session-30 audit: --byte-scale 1e4 with a 1 TiB cap grew to 23.6 GB and was killed by the
// kernel; 1e30 wrapped the element count and "passed" its data checks).
void check_host_buffers(const Schedule& schedule, const RunOptions& options) {
  double largest = 0;
  for (const planner::Op& op : schedule.ops)
    if (planner::is_collective(op.kind))
      largest = std::max({largest, op.comm_bytes, collective_bytes(schedule, op).traffic_bytes});
  const double per_buffer = detail::host_buffer_bytes(largest, options);
  const double ranks = options.virtual_world > 0 ? 1 : schedule.world_size;
  const double needed = ranks * 2 * per_buffer;
  const double memory = static_cast<double>(::sysconf(_SC_PHYS_PAGES)) * static_cast<double>(::sysconf(_SC_PAGESIZE));
  if (memory > 0 && needed > memory / 2) {
    char scale[32];
    std::snprintf(scale, sizeof scale, "%g", options.byte_scale);
    throw InputError::option(
        std::string("--byte-scale ") + scale + " / --max-buffer-bytes " + std::to_string(options.max_buffer_bytes),
        "the host backend's buffers would take " + bytes_text(needed) + " (" +
        std::to_string(static_cast<long long>(ranks)) + " ranks x 2 buffers of the largest collective, " +
        bytes_text(per_buffer) + "), more than half this machine's memory (" + bytes_text(memory) +
        "): lower --byte-scale or cap the buffers with --max-buffer-bytes");
  }
}

}  // namespace

RunResult run_schedule(const Schedule& schedule, const RunOptions& options) {
  check_playable(schedule, schedule.name.empty() ? "<schedule>" : schedule.name);
  const Launch launch = resolve_launch(options.launcher);
  if (options.backend != "host" && options.backend != "cuda")
    throw InputError::option("--backend", "expected host or cuda, got \"" + options.backend + "\"");
  if (options.virtual_world < 0 || (options.virtual_world > 0 && options.virtual_world != schedule.world_size))
    throw InputError::option(
        "--virtual-world " + std::to_string(options.virtual_world), "the schedule was planned for a world of " +
        std::to_string(schedule.world_size) +
        " ranks (plan it for another world with --set cluster.nodes=... / cluster.gpus_per_node=...)");
  // Finite as well as positive: an infinite time scale divides every measured time to 0.
  if (!(options.time_scale > 0) || !std::isfinite(options.time_scale))
    throw std::invalid_argument("the time scale must be a positive finite number");
  if (!(options.byte_scale > 0) || !std::isfinite(options.byte_scale))
    throw std::invalid_argument("the byte scale must be a positive finite number");
  if (options.max_buffer_bytes < 0) throw std::invalid_argument("the buffer cap must be non-negative");
  if (options.backend != "cuda") check_host_buffers(schedule, options);
  if (!(options.capacity_bytes >= 0) || !std::isfinite(options.capacity_bytes))
    throw std::invalid_argument("the memory capacity must be a non-negative finite number of bytes");
  if (!(options.timeout_seconds > 0) || !std::isfinite(options.timeout_seconds))
    throw std::invalid_argument("the timeout must be a positive finite number of seconds");
  if (options.warmup_steps < -1) throw std::invalid_argument("the warm-up steps must be non-negative");
  if (options.steps < 1) throw std::invalid_argument("at least one measured step is needed");
  if (options.gemm_dim < 64) throw std::invalid_argument("the GEMM dimension must be at least 64");
  if (options.copy_chunk_bytes < (1 << 20)) throw std::invalid_argument("the copy chunk must be at least 1 MiB");
  if (launch.mpi()) return detail::mpi_module().run(schedule, options);
  if (options.backend == "cuda") return detail::cuda_module().run(schedule, options, nullptr);
  return detail::run_host(schedule, options);
}

}  // namespace fsdpsim::runtime
