#include "sim/simgrid_timing.h"

#include <algorithm>

namespace fsdpsim::sim {

using planner::Op;
using planner::OpKind;
using planner::Stream;

namespace {

bool is_communication(OpKind k) { return planner::is_collective(k) || k == OpKind::h2d || k == OpKind::d2h; }

}  // namespace

void summarize_step(const planner::Schedule& s, StepTiming& r, double cpu_end, double bf16_peak_flops) {
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
    if (op.kind == OpKind::compute_fwd || op.kind == OpKind::compute_bwd || op.kind == OpKind::recompute)
      r.hardware_flops += op.flops;
  }

  // Exposed communication: communication running while neither the compute stream nor a
  // host op runs; concurrent communication ops share the stretch equally.
  {
    struct Edge {
      double time;
      int delta;
      int op;
    };
    std::vector<Edge> edges;
    edges.reserve(2 * n);
    for (const Op& op : s.ops) {
      const OpTiming& ot = t[op.id];
      if (ot.end <= ot.start) continue;
      if (op.stream == Stream::compute || is_communication(op.kind) || op.stream == Stream::host) {
        edges.push_back({ot.start, +1, op.id});
        edges.push_back({ot.end, -1, op.id});
      }
    }
    std::sort(edges.begin(), edges.end(), [](const Edge& a, const Edge& b) {
      return a.time < b.time || (a.time == b.time && a.delta < b.delta);
    });
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
    for (int guard = 0; guard < 4 * n + 4 && op >= 0; ++guard) {
      const OpTiming& ot = t[op];
      const bool host = s.ops[op].stream == Stream::host;
      if (node == Node::gpu && !host) {
        r.critical_path.push_back({op, PathSegment::Kind::gpu, ot.start, ot.end});
        if (ot.started_by == Constraint::cpu_issue) node = Node::cpu;
        else op = ot.started_by_op;
        continue;
      }
      const double end = host ? ot.end : ot.enqueue;
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
  if (r.step_seconds > 0) {
    r.tokens_per_second_per_gpu = s.tokens_per_rank / r.step_seconds;
    r.model_flops = s.model_flops_per_rank;
    if (bf16_peak_flops > 0) {
      r.mfu = s.model_flops_per_rank / (r.step_seconds * bf16_peak_flops);
      r.hfu = r.hardware_flops / (r.step_seconds * bf16_peak_flops);
    }
  }
}

}  // namespace fsdpsim::sim
