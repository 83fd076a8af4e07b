// The host backend: ranks and streams are threads. A stream thread takes its ops in order,
// waits for each op's deps, does the work (compute: waits the modeled duration; collectives:
// shared-memory collectives on real fp32 data, padded to the modeled duration), and marks
// the op done. Memory goes through the caching allocator over bookkeeping-only segments.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <system_error>
#include <thread>

#include "runtime/internal/executor.h"
#include "runtime/internal/host_comm.h"

namespace fsdpsim::runtime {

using planner::Op;
using planner::OpKind;
using planner::Schedule;

// ---- HostCommunicator ---------------------------------------------------------------------------

std::string collective_text(const HostGroupComm::Call& call) {
  char planned[32];
  std::snprintf(planned, sizeof planned, "%.0f", call.planned_bytes);
  return "op " + std::to_string(call.op) + " (" + planner::to_string(call.kind) + ", " +
         std::to_string(call.send_count) + " elements in, " + planned + " bytes planned)";
}

HostCommunicator::HostCommunicator(std::vector<int> ranks)
    : ranks_(std::move(ranks)),
      slots_(ranks_.size()),
      arrive_(static_cast<int>(ranks_.size())),
      leave_(static_cast<int>(ranks_.size())) {}

std::vector<int> HostCommunicator::absent() const {
  std::vector<int> out;
  for (int m : arrive_.absent()) out.push_back(ranks_[m]);
  return out;
}

void HostCommunicator::wake() {
  arrive_.wake();
  leave_.wake();
}

detail::Barrier::Result HostCommunicator::run(int member, const Call& call, detail::Clock::time_point deadline,
                                              const std::atomic<bool>& abort) {
  slots_[member] = call;
  auto r = arrive_.wait(member, deadline, abort);
  if (r != detail::Barrier::Result::ok) return r;
  const std::size_t k = ranks_.size();
  for (std::size_t j = 0; j < k; ++j) {
    const Call& other = slots_[j];
    if (other.op != call.op || other.kind != call.kind || other.send_count != call.send_count ||
        other.recv_count != call.recv_count || other.planned_bytes != call.planned_bytes) {
      throw RuntimeError(FaultKind::mismatch, ranks_[member], call.op,
                         "collective mismatch: rank " + std::to_string(ranks_[member]) + " joined " +
                             collective_text(call) + " while rank " + std::to_string(ranks_[j]) + " joined " +
                             collective_text(other));
    }
  }
  switch (call.kind) {
    case OpKind::all_gather: {
      const std::size_t n = call.send_count;
      for (std::size_t j = 0; j < k; ++j) std::memcpy(call.recv + j * n, slots_[j].send, n * sizeof(float));
      break;
    }
    case OpKind::reduce_scatter: {
      const std::size_t n = call.recv_count;
      const std::size_t offset = static_cast<std::size_t>(member) * n;
      std::memcpy(call.recv, slots_[0].send + offset, n * sizeof(float));
      for (std::size_t j = 1; j < k; ++j) {
        const float* in = slots_[j].send + offset;
        for (std::size_t i = 0; i < n; ++i) call.recv[i] += in[i];
      }
      break;
    }
    case OpKind::all_reduce: {
      const std::size_t n = call.recv_count;
      std::memcpy(call.recv, slots_[0].send, n * sizeof(float));
      for (std::size_t j = 1; j < k; ++j) {
        const float* in = slots_[j].send;
        for (std::size_t i = 0; i < n; ++i) call.recv[i] += in[i];
      }
      break;
    }
    case OpKind::all_to_all: {
      // This member's chunk of every member's send buffer, in member order.
      const std::size_t c = call.recv_count / k;
      const std::size_t offset = static_cast<std::size_t>(member) * c;
      for (std::size_t j = 0; j < k; ++j) std::memcpy(call.recv + j * c, slots_[j].send + offset, c * sizeof(float));
      break;
    }
    default:
      break;
  }
  // Nobody may reuse its input before every member has read it.
  return leave_.wait(member, deadline, abort);
}

namespace detail {

namespace {

struct CommRef {
  HostGroupComm* comm = nullptr;
  int member = 0;
};

class HostRankDevice : public RankDevice {
 public:
  HostRankDevice(RunControl& c, int position, const std::vector<double>& durations, std::vector<CommRef> comms)
      : c_(c),
        s_(c.schedule),
        o_(c.options),
        position_(position),
        rank_(c.played[position]),
        durations_(durations),
        comms_(std::move(comms)),
        previous_in_group_(planner::previous_on_communicator(s_)),
        segments_(c.options.capacity_bytes),
        done_(s_.ops.size(), 0),
        start_(s_.ops.size(), -1),
        end_(s_.ops.size(), -1) {
    std::vector<bool> used(planner::kStreamCount, false);
    for (const Op& op : s_.ops) used[static_cast<int>(op.stream)] = true;
    try {
      for (int i = 0; i < planner::kStreamCount; ++i) {
        if (!used[i]) continue;
        workers_[i] = std::make_unique<Worker>();
        Worker* w = workers_[i].get();
        w->thread = std::thread([this, w] { worker_main(*w); });
      }
    } catch (const std::system_error& e) {
      // The system refused another thread (a process limit, an address-space limit): the
      // workers already started are stopped and joined, so the error reaches the user as one
      // line instead of std::terminate on a joinable thread (the session-30 audit: 1,024 ranks
      // under an 8 GiB address-space limit died with SIGABRT).
      stop_workers();
      throw std::runtime_error("cannot start the host backend's stream threads (" + std::string(e.what()) +
                               "): the schedule's ranks x streams are threads of this process; run fewer ranks "
                               "(--virtual-world plays one) or raise the process's limits");
    }
    c_.add_waker([this] { wake(); });
  }

  ~HostRankDevice() override { stop_workers(); }

  void stop_workers() {
    for (auto& w : workers_) {
      if (!w || !w->thread.joinable()) continue;
      {
        std::lock_guard<std::mutex> lock(w->m);
        w->stop = true;
      }
      w->cv.notify_all();
      w->thread.join();
    }
  }

  SegmentSource& segments() override { return segments_; }

  void begin_step(int) override {
    std::lock_guard<std::mutex> lock(m_);
    std::fill(done_.begin(), done_.end(), 0);
    std::fill(start_.begin(), start_.end(), -1.0);
    std::fill(end_.begin(), end_.end(), -1.0);
    step_base_ = Clock::now();
  }

  void issue(const Op& op, const std::vector<void*>&) override {
    Worker& w = *workers_[static_cast<int>(op.stream)];
    {
      std::lock_guard<std::mutex> lock(w.m);
      w.queue.push_back(op.id);
    }
    w.cv.notify_one();
  }

  void wait_done(int op) override {
    wait_for(op, "op " + std::to_string(op) + " \"" + s_.ops[op].name + "\" to finish");
  }

  bool done(int op) override {
    std::lock_guard<std::mutex> lock(m_);
    return done_[op] != 0;
  }

  std::vector<OpTiming> end_step() override {
    for (const Op& op : s_.ops) wait_done(op.id);
    std::lock_guard<std::mutex> lock(m_);
    std::vector<OpTiming> out(s_.ops.size());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = {start_[i], end_[i]};
    return out;
  }

  double now_seconds() override { return seconds_since_base(Clock::now()); }

  void finish(RankResult& result) override {
    result.collectives_checked = checked_.load();
    std::int64_t scratch = 0;
    for (auto& w : workers_)
      if (w) scratch += static_cast<std::int64_t>((w->send.capacity() + w->recv.capacity()) * sizeof(float));
    result.scratch_bytes = scratch;
  }

 private:
  struct Worker {
    std::thread thread;
    std::mutex m;
    std::condition_variable cv;
    std::deque<int> queue;
    bool stop = false;
    std::vector<float> send, recv;
  };

  double seconds_since_base(Clock::time_point t) const {
    return std::chrono::duration<double>(t - step_base_).count() / o_.time_scale;
  }

  void wake() {
    {
      std::lock_guard<std::mutex> lock(m_);
      cv_.notify_all();
    }
    for (auto& w : workers_) {
      if (!w) continue;
      std::lock_guard<std::mutex> lock(w->m);
      w->cv.notify_all();
    }
  }

  void wait_for(int op, const std::string& what) {
    std::unique_lock<std::mutex> lock(m_);
    const auto deadline = c_.deadline();
    while (!done_[op]) {
      if (c_.aborted()) throw Aborted{};
      if (cv_.wait_until(lock, deadline) == std::cv_status::timeout && !done_[op]) {
        lock.unlock();
        c_.timeout(position_, op, what);
      }
    }
  }

  // Waits until `until` unless the run is aborted.
  void sleep_until(Clock::time_point until) {
    std::unique_lock<std::mutex> lock(m_);
    cv_.wait_until(lock, until, [&] { return c_.aborted(); });
    if (c_.aborted()) throw Aborted{};
  }

  void worker_main(Worker& w) {
    try {
      for (;;) {
        int op;
        {
          std::unique_lock<std::mutex> lock(w.m);
          w.cv.wait(lock, [&] { return w.stop || !w.queue.empty() || c_.aborted(); });
          if (w.stop || c_.aborted()) return;
          op = w.queue.front();
          w.queue.pop_front();
        }
        run_op(s_.ops[op], w);
      }
    } catch (const Aborted&) {
    } catch (const RuntimeError& e) {
      c_.fail(e);
    } catch (const std::exception& e) {
      c_.fail(RuntimeError(FaultKind::internal, rank_, -1, "rank " + std::to_string(rank_) + ": " + e.what()));
    }
  }

  void run_op(const Op& op, Worker& w) {
    if (const int prev = previous_in_group_[op.id]; prev >= 0)
      wait_for(prev, c_.op_text(prev) + ", the collective before " + c_.op_text(op.id) + " in group \"" +
                         s_.groups[op.group].name + "\"");
    for (int d : op.deps)
      wait_for(d, "op " + std::to_string(d) + " \"" + s_.ops[d].name + "\", which " + c_.op_text(op.id) +
                      " on stream " + planner::to_string(op.stream) + " waits on");
    const Clock::time_point start = Clock::now();
    {
      std::lock_guard<std::mutex> lock(m_);
      start_[op.id] = seconds_since_base(start);
    }
    if (planner::is_collective(op.kind)) collective(op, w);
    const Clock::duration modeled = clock_seconds(durations_[op.id] * o_.time_scale);
    if (modeled.count() > 0) sleep_until(start + modeled);
    {
      std::lock_guard<std::mutex> lock(m_);
      end_[op.id] = seconds_since_base(Clock::now());
      done_[op.id] = 1;
      cv_.notify_all();
    }
  }

  void collective(const Op& op, Worker& w) {
    const CollectiveBytes b = collective_bytes(s_, op);
    const std::size_t k = static_cast<std::size_t>(b.ranks);
    auto scaled_elements = [&](double bytes) {
      return static_cast<std::size_t>(std::floor(host_buffer_bytes(bytes, o_) / sizeof(float)));
    };
    if (o_.virtual_world > 0 || op.comm_bytes <= 0) {
      // A local copy of the bytes this rank would send and receive.
      const std::size_t n = scaled_elements(b.traffic_bytes);
      w.send.resize(std::max(w.send.size(), n));
      w.recv.resize(std::max(w.recv.size(), n));
      if (n) std::memcpy(w.recv.data(), w.send.data(), n * sizeof(float));
      return;
    }
    std::size_t total = scaled_elements(op.comm_bytes) / k * k;
    if (total < k) total = k;  // at least one element from each member
    const std::size_t per = total / k;
    HostCommunicator::Call call;
    call.op = op.id;
    call.kind = op.kind;
    call.send_count = op.kind == OpKind::all_gather ? per : total;
    call.recv_count = op.kind == OpKind::reduce_scatter ? per : total;
    if (w.send.size() < call.send_count) w.send.resize(call.send_count);
    if (w.recv.size() < call.recv_count) w.recv.resize(call.recv_count);
    call.send = w.send.data();
    call.recv = w.recv.data();
    call.planned_bytes = op.comm_bytes;
    if (o_.check_data)
      for (std::size_t i = 0; i < call.send_count; ++i) w.send[i] = pattern_value(rank_, op.id, i);
    const CommRef& ref = comms_[op.group];
    switch (ref.comm->run(ref.member, call, c_.deadline(), c_.abort_flag())) {
      case Barrier::Result::ok:
        break;
      case Barrier::Result::aborted:
        throw Aborted{};
      case Barrier::Result::timeout:
        c_.timeout(position_, op.id,
                   "the other ranks of group \"" + s_.groups[op.group].name + "\" in " + c_.op_text(op.id));
    }
    if (rank_ == o_.hooks.corrupt_rank && op.id == o_.hooks.corrupt_op) w.recv[call.recv_count / 2] += 1;
    if (o_.check_data) check(op, call, ref);
  }

  void check(const Op& op, const HostCommunicator::Call& call, const CommRef& ref) {
    const std::vector<int>& members = ref.comm->ranks();
    const std::size_t k = members.size();
    const std::size_t chunk = call.recv_count / k;  // all-to-all: elements from each member
    auto expected_at = [&](std::size_t i) {
      if (op.kind == OpKind::all_gather) return pattern_value(members[i / call.send_count], op.id, i % call.send_count);
      if (op.kind == OpKind::all_to_all)
        return pattern_value(members[i / chunk], op.id, static_cast<std::size_t>(ref.member) * chunk + i % chunk);
      const std::size_t index = op.kind == OpKind::reduce_scatter ? ref.member * call.recv_count + i : i;
      float sum = 0;
      for (std::size_t j = 0; j < k; ++j) sum += pattern_value(members[j], op.id, index);
      return sum;
    };
    for (std::size_t i = 0; i < call.recv_count; ++i) {
      const float expected = expected_at(i);
      if (call.recv[i] == expected) continue;
      std::string from;
      if (op.kind == OpKind::all_gather) {
        from = "element " + std::to_string(i % call.send_count) + " of rank " +
               std::to_string(members[i / call.send_count]) + "'s input";
      } else if (op.kind == OpKind::all_to_all) {
        from = "element " + std::to_string(static_cast<std::size_t>(ref.member) * chunk + i % chunk) + " of rank " +
               std::to_string(members[i / chunk]) + "'s input";
      } else {
        const std::size_t index = op.kind == OpKind::reduce_scatter ? ref.member * call.recv_count + i : i;
        from = "the sum over " + std::to_string(k) + " ranks of input element " + std::to_string(index);
      }
      throw RuntimeError(FaultKind::data, rank_, op.id,
                         "data check failed: rank " + std::to_string(rank_) + ", " + c_.op_text(op.id) + ": element " +
                             std::to_string(i) + " of the " + planner::to_string(op.kind) + " output is " +
                             std::to_string(call.recv[i]) + ", expected " + std::to_string(expected) + " (" + from +
                             ")");
    }
    ++checked_;
  }

  RunControl& c_;
  const Schedule& s_;
  const RunOptions& o_;
  const int position_;
  const int rank_;
  const std::vector<double>& durations_;
  std::vector<CommRef> comms_;  // by group index
  const std::vector<int> previous_in_group_;
  TrackingSegments segments_;
  std::mutex m_;
  std::condition_variable cv_;
  std::vector<char> done_;
  std::vector<double> start_, end_;
  Clock::time_point step_base_ = Clock::now();
  std::unique_ptr<Worker> workers_[planner::kStreamCount];
  std::atomic<std::int64_t> checked_{0};
};

}  // namespace

RunResult run_host(const Schedule& s, const RunOptions& options, ProcessLink* link) {
  RunOptions o = options;
  // The steady step is measured: after the first when that one makes state ([State made at the
  // first step], planner/schedule.h), as the planner's replay does.
  if (o.warmup_steps < 0) o.warmup_steps = planner::makes_state_at_first_step(s) ? 1 : 0;
  const bool virtual_world = o.virtual_world > 0;
  if (!link && !virtual_world && s.world_size > 1024)
    throw std::invalid_argument("the host backend plays at most 1024 ranks as threads; the schedule has " +
                                std::to_string(s.world_size) + " (use --virtual-world " + std::to_string(s.world_size) +
                                " to play rank 0 alone)");
  const std::vector<double> durations = durations_for(s, o);
  std::vector<int> played;
  if (link)
    played.push_back(link->rank());  // mpi: this process plays its world rank
  else
    for (int r = 0; r < (virtual_world ? 1 : s.world_size); ++r) played.push_back(r);

  // One communicator per process-group instance; each rank finds its own. Under an mpi launch,
  // this process's instance of each group, over MPI.
  std::vector<std::unique_ptr<HostGroupComm>> comms;
  std::vector<std::vector<CommRef>> refs(played.size(), std::vector<CommRef>(s.groups.size()));
  if (link && !virtual_world) {
    const std::vector<bool> used = groups_with_collectives(s);
    for (std::size_t g = 0; g < s.groups.size(); ++g) {
      if (!used[g]) continue;
      for (const auto& instance : group_instances(s, static_cast<int>(g))) {
        auto it = std::find(instance.begin(), instance.end(), link->rank());
        if (it == instance.end()) continue;
        comms.push_back(link->group_comm(static_cast<int>(g), instance));
        refs[0][g] = {comms.back().get(), static_cast<int>(it - instance.begin())};
      }
    }
  } else if (!virtual_world) {
    const std::vector<bool> used = groups_with_collectives(s);
    for (std::size_t g = 0; g < s.groups.size(); ++g) {
      if (!used[g]) continue;
      for (const auto& instance : group_instances(s, static_cast<int>(g))) {
        comms.push_back(std::make_unique<HostCommunicator>(instance));
        for (std::size_t m = 0; m < instance.size(); ++m)
          refs[instance[m]][g] = {comms.back().get(), static_cast<int>(m)};
      }
    }
  }
  RunControl control(s, o, played, link);
  control.add_waker([&comms] {
    for (auto& comm : comms) comm->wake();
  });
  std::vector<std::unique_ptr<RankDevice>> devices;
  for (std::size_t p = 0; p < played.size(); ++p)
    devices.push_back(std::make_unique<HostRankDevice>(control, static_cast<int>(p), durations, refs[p]));
  std::string text = link ? "host: rank " + std::to_string(link->rank()) +
                                 " in this process, streams as threads, collectives over MPI"
                           : "host: " + std::to_string(played.size()) + (played.size() == 1 ? " rank" : " ranks") +
                                 " as threads, streams as threads, collectives through shared memory";
  RunResult result = execute(control, devices, "host", text);
  if (virtual_world)
    result.notes.push_back("virtual world: " +
                           (link ? "each process plays its own rank of " : std::string("rank 0 of ")) +
                           std::to_string(s.world_size) +
                           " alone; collectives are local copies of the bytes a rank sends and receives");
  char buf[200];
  std::snprintf(
      buf, sizeof buf,
      "collectives move planned bytes x %g, at most %lld bytes per buffer; memory is accounted at planned sizes",
      o.byte_scale, static_cast<long long>(o.max_buffer_bytes));
  result.notes.push_back(buf);
  result.notes.push_back(
      std::string("compute waits for each op's modeled duration x the time scale; collectives are padded to it") +
      " (durations: " + o.costs.source + ")");
  return result;
}

}  // namespace detail
}  // namespace fsdpsim::runtime
