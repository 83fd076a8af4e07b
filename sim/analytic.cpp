#include "sim/analytic.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>

namespace fsdpsim::sim {

using planner::Op;
using planner::OpKind;
using planner::Schedule;
using planner::Stream;

const char* to_string(Constraint c) {
  switch (c) {
    case Constraint::step_start: return "step_start";
    case Constraint::cpu_issue: return "cpu_issue";
    case Constraint::previous_issue: return "previous_issue";
    case Constraint::stream_order: return "stream_order";
    case Constraint::dependency: return "dependency";
    case Constraint::communicator: return "communicator";
    case Constraint::cpu_wait: return "cpu_wait";
    case Constraint::launch_queue: return "launch_queue";
  }
  return "?";
}

const char* to_string(PathSegment::Kind k) {
  switch (k) {
    case PathSegment::Kind::gpu: return "gpu";
    case PathSegment::Kind::cpu_issue: return "cpu_issue";
    case PathSegment::Kind::host: return "host";
  }
  return "?";
}

namespace {

// Host allocations (offloaded state) are not GPU memory: the device timelines leave them out.
std::int64_t device_bytes(const planner::Allocation& a) { return planner::on_host(a.placement) ? 0 : a.bytes; }


bool is_communication(OpKind k) {
  return planner::is_collective(k) || k == OpKind::h2d || k == OpKind::d2h;
}

constexpr double kInf = std::numeric_limits<double>::infinity();

}  // namespace

double fair_share_level(const double* loads, int count) {
  // Water-filling: the smallest loads are served whole while they are below an equal split of
  // what is left; the rest split it equally.
  std::array<double, planner::kStreamCount> sorted{};
  const int m = std::min(count, planner::kStreamCount);
  std::copy(loads, loads + m, sorted.begin());
  std::sort(sorted.begin(), sorted.begin() + m);
  double left = 1.0;
  for (int k = 0; k < m; ++k) {
    const double equal = left / (m - k);
    if (sorted[k] > equal) return equal;
    left -= sorted[k];
  }
  return kInf;
}

void summarize_step(const planner::Schedule& s, StepTiming& r, double cpu_end, double mfu_peak_flops) {
  const int n = static_cast<int>(s.ops.size());
  std::vector<OpTiming>& t = r.ops;
  double step = cpu_end;
  int last = -1;
  for (int i = 0; i < n; ++i)
    if (last < 0 || t[i].end >= t[last].end) last = i;
  if (last >= 0) step = std::max(step, t[last].end);
  r.step_seconds = step;
  r.compute_seconds = r.optimizer_seconds = r.exposed_comm_seconds = r.exposed_other_seconds = 0;
  r.comm_seconds = r.interference_seconds = r.cpu_issue_seconds = r.hardware_flops = 0;
  r.exposed_comm_outside_units = 0;
  r.exposed_comm_by_phase = {};
  r.critical_path.clear();
  r.critical_path_summary = {};

  int max_unit = -1;
  for (const Op& op : s.ops) max_unit = std::max(max_unit, op.unit);
  r.exposed_comm_by_unit.assign(max_unit + 1, 0.0);
  for (const Op& op : s.ops) {
    const OpTiming& ot = t[op.id];
    r.cpu_issue_seconds += ot.issue_seconds;
    if (op.kind == OpKind::optimizer) r.optimizer_seconds += ot.end - ot.start;
    else if (op.stream == Stream::compute) r.compute_seconds += ot.end - ot.start;
    if (op.stream == Stream::compute) r.interference_seconds += (ot.end - ot.start) - ot.nominal_seconds;
    if (is_communication(op.kind)) r.comm_seconds += ot.nominal_seconds;
    if (planner::is_module_compute(op.kind))
      r.hardware_flops += planner::executed_flops(op, s);
  }
  // An op never runs faster than its nominal time; what the sum of end - start - nominal leaves
  // below zero is the rounding of the ops' absolute times (-1e-14 s seen), not a time.
  r.interference_seconds = std::max(0.0, r.interference_seconds);

  // Exposed communication: communication running while neither the compute stream nor a
  // host op runs; concurrent communication ops share the stretch equally.
  {
    struct Edge {
      double time;
      int delta;
      int op;
    };
    auto before = [](const Edge& a, const Edge& b) {
      return a.time < b.time || (a.time == b.time && a.delta < b.delta);
    };
    // The edges stream by stream: a stream runs one op at a time in its order, so each
    // stream's edges are already in time order and merging the runs replaces a sort of them
    // all (a sweep times every point). A run found out of order is sorted first. Edges that
    // tie in time and direction may come out in another order than a sort's; nothing below
    // depends on it: between them no time passes, so nothing is added, and later each
    // running communication op adds the same `share`, so the order of `comm` changes no sum.
    std::vector<Edge> edges;
    edges.reserve(2 * n);
    std::array<std::vector<int>, planner::kStreamCount> on_stream;
    for (const Op& op : s.ops) {
      const OpTiming& ot = t[op.id];
      if (ot.end <= ot.start) continue;
      if (op.stream == Stream::compute || is_communication(op.kind) || op.stream == Stream::host)
        on_stream[static_cast<int>(op.stream)].push_back(op.id);
    }
    for (const std::vector<int>& ids : on_stream) {
      const std::size_t run = edges.size();
      for (int i : ids) {
        edges.push_back({t[i].start, +1, i});
        edges.push_back({t[i].end, -1, i});
      }
      if (!std::is_sorted(edges.begin() + run, edges.end(), before)) std::sort(edges.begin() + run, edges.end(), before);
      std::inplace_merge(edges.begin(), edges.begin() + run, edges.end(), before);
    }
    int busy = 0;
    std::vector<int> comm;
    double prev = 0;
    for (const Edge& e : edges) {
      if (e.time > prev && busy == 0 && !comm.empty()) {
        const double dt = e.time - prev;
        r.exposed_comm_seconds += dt;
        const double share = dt / static_cast<double>(comm.size());
        for (int c : comm) {
          const Op& op = s.ops[c];
          if (op.unit >= 0) r.exposed_comm_by_unit[op.unit] += share;
          else r.exposed_comm_outside_units += share;
          r.exposed_comm_by_phase[static_cast<int>(op.phase)] += share;
        }
      }
      prev = e.time;
      const Op& op = s.ops[e.op];
      if (op.stream == Stream::compute || op.stream == Stream::host) {
        busy += e.delta;
      } else if (e.delta > 0) {
        comm.push_back(e.op);
      } else {
        auto it = std::find(comm.begin(), comm.end(), e.op);
        if (it != comm.end()) comm.erase(it);
      }
    }
  }
  r.exposed_other_seconds =
      std::max(0.0, r.step_seconds - r.compute_seconds - r.optimizer_seconds - r.exposed_comm_seconds);

  // Critical path: from what ends last, back along the constraints that set each start.
  if (n > 0) {
    enum class Node { gpu, cpu };
    Node node = Node::gpu;
    int op = last;
    if (cpu_end > t[last].end) {
      node = Node::cpu;
      op = n - 1;
    }
    bool from_gpu = false;  // the CPU segment is the issue lead of an op the GPU waited for
    for (int guard = 0; guard < 4 * n + 4 && op >= 0; ++guard) {
      const OpTiming& ot = t[op];
      const bool host = s.ops[op].stream == Stream::host;
      if (node == Node::gpu && !host) {
        r.critical_path.push_back({op, PathSegment::Kind::gpu, ot.start, ot.end});
        if (ot.started_by == Constraint::cpu_issue) {
          node = Node::cpu;
          from_gpu = true;
        } else {
          op = ot.started_by_op;
        }
        continue;
      }
      const double end = host ? ot.end : from_gpu ? ot.enqueue : ot.issue_start + ot.issue_seconds;
      from_gpu = false;
      if (end > ot.issue_start)
        r.critical_path.push_back({op, host ? PathSegment::Kind::host : PathSegment::Kind::cpu_issue, ot.issue_start, end});
      if (ot.issued_by == Constraint::step_start) break;
      if (ot.issued_by == Constraint::previous_issue) {
        op = ot.issued_by_op;
        node = Node::cpu;
      } else {
        op = ot.issued_by_op;
        node = Node::gpu;
      }
    }
    std::reverse(r.critical_path.begin(), r.critical_path.end());
    for (const PathSegment& seg : r.critical_path) {
      const double d = seg.end - seg.start;
      const Op& o = s.ops[seg.op];
      if (seg.kind == PathSegment::Kind::cpu_issue) r.critical_path_summary.cpu_issue_seconds += d;
      else if (seg.kind == PathSegment::Kind::host) r.critical_path_summary.host_seconds += d;
      else if (o.stream == Stream::compute) r.critical_path_summary.compute_seconds += d;
      else if (is_communication(o.kind)) r.critical_path_summary.communication_seconds += d;
      else r.critical_path_summary.other_gpu_seconds += d;
    }
  }

  r.tokens_per_second_per_gpu = r.model_flops = r.mfu = r.hfu = 0;
  r.mfu_peak_flops = mfu_peak_flops;
  if (r.step_seconds > 0) {
    r.tokens_per_second_per_gpu = s.tokens_per_rank / r.step_seconds;
    r.model_flops = s.model_flops_per_rank;
    if (mfu_peak_flops > 0) {
      r.mfu = s.model_flops_per_rank / (r.step_seconds * mfu_peak_flops);
      r.hfu = r.hardware_flops / (r.step_seconds * mfu_peak_flops);
    }
  }
}

StepTiming simulate(const Schedule& s, const planner::OpCosts& in) {
  planner::check_costs(s, in);
  const int n = static_cast<int>(s.ops.size());
  const std::vector<int> previous_on_communicator = planner::previous_on_communicator(s);
  StepTiming r;
  r.ops.resize(n);
  std::vector<OpTiming>& t = r.ops;

  constexpr int kGpuStreams = planner::kStreamCount;
  const int compute_stream = static_cast<int>(Stream::compute);
  std::array<std::vector<int>, kGpuStreams> queue;
  for (const Op& op : s.ops)
    if (op.stream != Stream::host) queue[static_cast<int>(op.stream)].push_back(op.id);
  std::array<std::size_t, kGpuStreams> head{};
  std::array<int, kGpuStreams> running;
  running.fill(-1);
  // The GPU streams that have ops, in stream order (host ops are not queued): the others never
  // start, run or wait for anything, so the loops over streams below visit only these, in the
  // same order (a step uses three or four of the seven). Which ops are collectives, once.
  std::array<int, kGpuStreams> streams{};
  int stream_count = 0;
  for (int st = 0; st < kGpuStreams; ++st)
    if (!queue[st].empty()) streams[stream_count++] = st;
  std::vector<char> collective(n);
  for (int i = 0; i < n; ++i) collective[i] = planner::is_collective(s.ops[i].kind);
  std::vector<char> issued(n, 0), done(n, 0);
  // A running op's work left: first its latency (collectives), then the rest at a rate.
  std::vector<double> latency_left(n, 0), work_left(n, 0), projected(n, kInf);
  const double slow_rate = 1.0 / (1.0 + in.compute_slowdown_under_comm);
  const bool has_latency = !in.latency_seconds.empty();
  // [Link domains] The domain a collective's transfer loads (check_costs: kNodeFabric or kNetwork).
  auto domain_of = [&](int i) { return in.link_domain.empty() ? planner::kNodeFabric : in.link_domain[i]; };
  auto load_of = [&](int i) { return in.link_load.empty() ? 1.0 : in.link_load[i]; };
  const bool bounded_queue = in.launch_queue_kernels > 0 && !in.kernels.empty();
  std::array<double, kGpuStreams> queued_kernels{};  // issued, not finished
  std::array<int, kGpuStreams> last_finished;        // the last op that left the queue
  last_finished.fill(-1);
  int queue_blocked = -1;                            // the stream the CPU waits on, if any
  double now = 0, cpu_free = 0;
  int next_issue = 0, host_running = -1;

  auto all_done = [&](const planner::IdList& ids) {
    for (int d : ids)
      if (!done[d]) return false;
    return true;
  };
  // The latest end among `ids` (all done), and which op it is.
  auto latest = [&](const planner::IdList& ids, double& when, int& who) {
    for (int d : ids)
      if (t[d].end > when || (t[d].end == when && who < 0)) {
        when = t[d].end;
        who = d;
      }
  };

  while (true) {
    // One pass at `now`: what the CPU issues, then what the streams start. Nothing a stream
    // starts lets the CPU issue more (the CPU waits for ops to end, never to start), and a
    // stream's start waits for ends too, never for another stream's start: a second pass
    // would change nothing.
    while (next_issue < n && host_running < 0 && cpu_free <= now) {
      const Op& op = s.ops[next_issue];
      const bool host = op.stream == Stream::host;
      if (!all_done(op.cpu_waits) || (host && !all_done(op.deps))) break;
      const int st_i = static_cast<int>(op.stream);
      if (bounded_queue && !host && queued_kernels[st_i] > 0 &&
          queued_kernels[st_i] + in.kernels[next_issue] > in.launch_queue_kernels) {
        queue_blocked = st_i;
        break;
      }
      OpTiming& ot = t[next_issue];
      double when = cpu_free;
      int who = -1;
      latest(op.cpu_waits, when, who);
      Constraint by = Constraint::cpu_wait;
      if (host && !op.deps.empty()) {
        const int before = who;
        latest(op.deps, when, who);
        if (who != before) by = Constraint::dependency;
      }
      if (queue_blocked >= 0) {
        const int q = last_finished[queue_blocked];
        if (q >= 0 && t[q].end > when) {
          when = t[q].end;
          who = q;
          by = Constraint::launch_queue;
        }
        queue_blocked = -1;
      }
      if (bounded_queue && !host) queued_kernels[st_i] += in.kernels[next_issue];
      if (who >= 0 && t[who].end > cpu_free) {
        ot.issued_by = by;
        ot.issued_by_op = who;
      } else if (next_issue > 0) {
        ot.issued_by = Constraint::previous_issue;
        ot.issued_by_op = next_issue - 1;
      } else {
        ot.issued_by = Constraint::step_start;
      }
      ot.issue_start = std::max(cpu_free, when);
      ot.issue_seconds = in.issue_seconds[next_issue];
      // [Kernel pipelining] the GPU may run the op from its issue lead on; the CPU issues on.
      ot.enqueue = ot.issue_start + (host ? ot.issue_seconds : in.issue_lead(next_issue));
      ot.nominal_seconds = in.duration_seconds[next_issue];
      issued[next_issue] = 1;
      if (host) {
        ot.start = ot.enqueue;
        ot.end = ot.start + ot.nominal_seconds;
        ot.started_by = Constraint::cpu_issue;
        cpu_free = ot.end;
        host_running = next_issue;
      } else {
        cpu_free = ot.issue_start + ot.issue_seconds;
      }
      ++next_issue;
    }
    // Streams start their next op where it is issued and its events have fired.
    for (int k = 0; k < stream_count; ++k) {
      const int st = streams[k];
      if (running[st] >= 0 || head[st] >= queue[st].size()) continue;
      const int i = queue[st][head[st]];
      if (!issued[i] || t[i].enqueue > now) continue;
      const Op& op = s.ops[i];
      if (!all_done(op.deps)) continue;
      const int communicator_previous = previous_on_communicator[i];
      if (communicator_previous >= 0 && !done[communicator_previous]) continue;
      OpTiming& ot = t[i];
      ot.start = now;
      double when = ot.enqueue;
      ot.started_by = Constraint::cpu_issue;
      ot.started_by_op = -1;
      if (head[st] > 0) {
        const int prev = queue[st][head[st] - 1];
        if (t[prev].end >= when) {
          when = t[prev].end;
          ot.started_by = Constraint::stream_order;
          ot.started_by_op = prev;
        }
      }
      for (int d : op.deps)
        if (t[d].end >= when) {
          when = t[d].end;
          ot.started_by = Constraint::dependency;
          ot.started_by_op = d;
        }
      if (communicator_previous >= 0 && t[communicator_previous].end > when) {
        when = t[communicator_previous].end;
        ot.started_by = Constraint::communicator;
        ot.started_by_op = communicator_previous;
      }
      running[st] = i;
      ++head[st];
      latency_left[i] = collective[i] && has_latency
                            ? std::min(ot.nominal_seconds, in.latency_seconds[i])
                            : 0.0;
      work_left[i] = ot.nominal_seconds - latency_left[i];
    }
    if (next_issue == n && host_running < 0) {
      bool idle = true;
      for (int k = 0; k < stream_count; ++k)
        if (running[streams[k]] >= 0 || head[streams[k]] < queue[streams[k]].size()) idle = false;
      if (idle) break;
    }
    // Rates while nothing changes, and the next event. Collectives transferring in one link
    // domain share it ([Link domains], planner/op_costs.h).
    int collectives = 0;
    std::array<int, planner::kNetwork + 1> transferring{};  // per link domain (kNodeFabric, kNetwork)
    for (int k = 0; k < stream_count; ++k) {
      const int i = running[streams[k]];
      if (i < 0 || !collective[i]) continue;
      ++collectives;
      if (latency_left[i] <= 0) ++transferring[domain_of(i)];
    }
    // [Link loads] Max-min sharing of each domain's link among the collectives transferring in
    // it: the level each gets of the link (its load if smaller), infinite while the loads fit.
    std::array<double, planner::kNetwork + 1> level;
    level.fill(kInf);
    if (in.share_bandwidth)
      for (int d = 0; d <= planner::kNetwork; ++d) {
        if (transferring[d] < 2) continue;
        std::array<double, kGpuStreams> loads{};
        int m = 0;
        bool saturating = true;  // every one takes the whole link: 1/k each, without the water-filling
        for (int k = 0; k < stream_count; ++k)
          if (const int i = running[streams[k]]; i >= 0 && collective[i] && latency_left[i] <= 0 && domain_of(i) == d) {
            loads[m++] = load_of(i);
            saturating = saturating && loads[m - 1] == 1.0;
          }
        level[d] = saturating ? 1.0 / m : fair_share_level(loads.data(), m);
      }
    auto rate_of = [&](int i, int st) {
      if (st == compute_stream) return collectives > 0 ? slow_rate : 1.0;
      if (collective[i] && level[domain_of(i)] < load_of(i)) return level[domain_of(i)] / load_of(i);
      return 1.0;
    };
    double next = kInf;
    if (next_issue < n && host_running < 0 && cpu_free > now) next = std::min(next, cpu_free);
    if (host_running >= 0) next = std::min(next, t[host_running].end);
    for (int k = 0; k < stream_count; ++k) {
      const int st = streams[k];
      const int i = running[st];
      if (i >= 0) {
        projected[i] = latency_left[i] > 0 ? now + latency_left[i] : now + work_left[i] / rate_of(i, st);
        next = std::min(next, projected[i]);
      } else if (head[st] < queue[st].size()) {
        const int h = queue[st][head[st]];
        if (issued[h] && t[h].enqueue > now) next = std::min(next, t[h].enqueue);
      }
    }
    if (next == kInf) {
      std::string what = next_issue < n ? "the CPU waits before op " + std::to_string(next_issue) + " (" +
                                              s.ops[next_issue].name + ")"
                                        : "a stream waits";
      for (int k = 0; k < stream_count; ++k)
        if (const int st = streams[k]; running[st] < 0 && head[st] < queue[st].size()) {
          const int h = queue[st][head[st]];
          if (issued[h]) {
            what = "op " + std::to_string(h) + " (" + s.ops[h].name + ") waits";
            break;
          }
        }
      throw std::invalid_argument("the schedule deadlocks: " + what + " for an op that cannot run before it");
    }
    const double dt = next - now;
    // Advance every running op; the ones whose phase ends now change phase or finish.
    for (int k = 0; k < stream_count; ++k) {
      const int st = streams[k];
      const int i = running[st];
      if (i < 0) continue;
      if (projected[i] <= next) {
        if (latency_left[i] > 0) {
          latency_left[i] = 0;
          if (work_left[i] > 0) continue;
        }
        work_left[i] = 0;
        t[i].end = next;
        done[i] = 1;
        running[st] = -1;
        last_finished[st] = i;
        if (bounded_queue) queued_kernels[st] -= in.kernels[i];
      } else if (latency_left[i] > 0) {
        latency_left[i] -= dt;
      } else {
        work_left[i] -= dt * rate_of(i, st);
      }
    }
    now = next;
    if (host_running >= 0 && t[host_running].end <= now) {
      done[host_running] = 1;
      host_running = -1;
    }
  }

  summarize_step(s, r, cpu_free, in.mfu_peak_flops);
  return r;
}

StepTiming time_step(const Schedule& schedule, const planner::CostModel& cost, planner::CollectiveMemo* memo) {
  return simulate(schedule, planner::price_ops(schedule, cost, memo));
}

TimedMemory timed_memory(const Schedule& s, const StepTiming& timing) {
  TimedMemory m;
  std::int64_t allocated = 0;
  for (const planner::Allocation& a : s.allocations)
    if (a.persistent && !planner::on_host(a.placement)) allocated += a.bytes;  // device memory only
  m.peak_allocated_bytes = allocated;
  m.points.push_back({0.0, -1, allocated});
  // Ops ordered by (issue time, issue order): the allocator's view.
  std::vector<int> order(s.ops.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
    return timing.ops[a].issue_start < timing.ops[b].issue_start;
  });
  for (int i : order) {
    const Op& op = s.ops[i];
    if (op.allocs.empty() && op.frees.empty()) continue;
    const double when = timing.ops[i].issue_start;
    for (int a : op.allocs) allocated += device_bytes(s.allocations[a]);
    m.points.push_back({when, i, allocated});
    if (allocated > m.peak_allocated_bytes) {
      m.peak_allocated_bytes = allocated;
      m.peak_seconds = when;
      m.peak_op = i;
    }
    if (op.frees.empty()) continue;
    for (int a : op.frees) allocated -= device_bytes(s.allocations[a]);
    m.points.push_back({when, i, allocated});
  }
  return m;
}

}  // namespace fsdpsim::sim
