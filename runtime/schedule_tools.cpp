// What the runtime needs to know about a schedule beyond the IR: is it playable, who takes
// part in a collective and what it moves, which planned buffer it works in, and how long
// ops take when no cost model is given.
#include <algorithm>
#include <cmath>

#include "models/json_input.h"
#include "runtime/runtime.h"

namespace fsdpsim::runtime {

using planner::Op;
using planner::OpKind;
using planner::Schedule;

std::string to_string(FaultKind k) {
  switch (k) {
    case FaultKind::timeout:
      return "timeout";
    case FaultKind::out_of_memory:
      return "out of memory";
    case FaultKind::nccl:
      return "NCCL error";
    case FaultKind::cuda:
      return "CUDA error";
    case FaultKind::data:
      return "data check failed";
    case FaultKind::mismatch:
      return "collective mismatch";
    case FaultKind::device:
      return "device";
    case FaultKind::internal:
      return "internal error";
  }
  return "error";
}

RuntimeError::RuntimeError(FaultKind kind, int rank, int op, const std::string& message)
    : std::runtime_error(message), kind_(kind), rank_(rank), op_(op) {}

double RunResult::step_seconds() const {
  double worst = 0;
  for (const RankResult& r : ranks) {
    if (r.step_seconds.empty()) continue;
    double sum = 0;
    for (double s : r.step_seconds) sum += s;
    worst = std::max(worst, sum / static_cast<double>(r.step_seconds.size()));
  }
  return worst;
}

namespace {
std::int64_t highest_rank(const std::vector<RankResult>& ranks, std::int64_t RankResult::*field) {
  std::int64_t m = 0;
  for (const RankResult& r : ranks) m = std::max(m, r.*field);
  return m;
}
}  // namespace

std::int64_t RunResult::peak_allocated_bytes() const { return highest_rank(ranks, &RankResult::peak_allocated_bytes); }
std::int64_t RunResult::peak_reserved_bytes() const { return highest_rank(ranks, &RankResult::peak_reserved_bytes); }
std::int64_t RunResult::peak_host_pinned_bytes() const {
  return highest_rank(ranks, &RankResult::peak_host_pinned_bytes);
}
std::int64_t RunResult::peak_host_pageable_bytes() const {
  return highest_rank(ranks, &RankResult::peak_host_pageable_bytes);
}
std::int64_t RunResult::peak_host_bytes() const { return highest_rank(ranks, &RankResult::peak_host_bytes); }

void check_playable(const Schedule& s, const std::string& file) {
  planner::validate_schedule(s, file);  // references, alloc-before-free, no cycle
  const int world = s.world_size;
  for (std::size_t g = 0; g < s.groups.size(); ++g) {
    const auto& group = s.groups[g];
    if (group.ranks > world || group.stride < 1 || world % group.ranks != 0 || (world / group.ranks) % group.stride != 0)
      throw InputError(file, join_json_path("groups", g) + ".ranks",
                       "process group \"" + group.name + "\" of " + std::to_string(group.ranks) + " ranks" +
                           (group.stride > 1 ? " with stride " + std::to_string(group.stride) : "") +
                           " does not tile the world of " + std::to_string(world) + " ranks");
  }
  for (const Op& op : s.ops) {
    const std::string path = join_json_path("ops", static_cast<std::size_t>(op.id));
    for (int d : op.deps) {
      if (d >= op.id)
        throw InputError(file, path + ".deps",
                         "op " + std::to_string(op.id) + " \"" + op.name + "\" waits on op " + std::to_string(d) +
                             " \"" + s.ops[d].name +
                             "\", which is issued after it: a stream cannot wait on an event that is not yet recorded");
    }
  }
}

planner::Schedule load_schedule(const std::string& path) {
  Schedule s = planner::schedule_from_json(load_json_file(path), path);
  check_playable(s, path);
  return s;
}

std::vector<double> load_durations(const std::string& path, const Schedule& s) {
  nlohmann::json j = load_json_file(path);
  std::string where;
  if (j.is_object()) {
    if (!j.contains("durations_seconds"))
      throw InputError(path, "durations_seconds", "expected an array of seconds per op");
    j = j["durations_seconds"];
    where = "durations_seconds";
  }
  if (!j.is_array()) throw InputError(path, where, "expected an array of seconds per op, got " + describe_json(j));
  if (j.size() != s.ops.size())
    throw InputError(
        path, where,
        "expected " + std::to_string(s.ops.size()) + " durations (one per op), got " + std::to_string(j.size()));
  std::vector<double> out;
  for (std::size_t i = 0; i < j.size(); ++i) {
    if (!j[i].is_number() || j[i].get<double>() < 0 || !std::isfinite(j[i].get<double>()))
      throw InputError(path, join_json_path(where, i),
                       "expected a non-negative number of seconds, got " + describe_json(j[i]));
    out.push_back(j[i].get<double>());
  }
  return out;
}

std::vector<bool> groups_with_collectives(const Schedule& s) {
  std::vector<bool> used(s.groups.size(), false);
  for (const planner::Op& op : s.ops)
    if (planner::is_collective(op.kind)) used[op.group] = true;
  return used;
}

std::vector<std::vector<int>> group_instances(const Schedule& s, int group) {
  std::vector<std::vector<int>> out(planner::group_instance_count(s, group));
  for (std::size_t j = 0; j < out.size(); ++j) out[j] = planner::group_members(s, group, static_cast<int>(j));
  return out;
}

CollectiveBytes collective_bytes(const Schedule& s, const Op& op) {
  CollectiveBytes b;
  b.ranks = op.group >= 0 ? s.groups.at(op.group).ranks : 1;
  const double k = b.ranks, size = op.comm_bytes;
  switch (op.kind) {
    case OpKind::all_gather:
      b.recv_bytes = size;
      b.send_bytes = size / k;
      b.traffic_bytes = size * (k - 1) / k;
      break;
    case OpKind::reduce_scatter:
      b.send_bytes = size;
      b.recv_bytes = size / k;
      b.traffic_bytes = size * (k - 1) / k;
      break;
    case OpKind::all_reduce:
      b.send_bytes = b.recv_bytes = size;
      b.traffic_bytes = 2 * size * (k - 1) / k;
      break;
    case OpKind::all_to_all:  // comm_bytes = one rank's send buffer; size/k of it stays
      b.send_bytes = b.recv_bytes = size;
      b.traffic_bytes = size * (k - 1) / k;
      break;
    default:
      break;
  }
  return b;
}

CublasWorkspaces cublas_workspaces(const Schedule& s) {
  CublasWorkspaces w;
  for (const auto& a : s.allocations) {
    if (a.category != planner::MemCategory::workspace) continue;
    if (w.main_thread < 0) w.main_thread = a.id;
    else if (w.backward_thread < 0) w.backward_thread = a.id;
  }
  if (w.backward_thread < 0) w.backward_thread = w.main_thread;
  return w;
}

int cublas_workspace_of(const CublasWorkspaces& w, const Op& op) {
  return op.kind == OpKind::compute_bwd || op.kind == OpKind::recompute ? w.backward_thread : w.main_thread;
}

std::vector<CollectiveBinding> bind_collective_buffers(const Schedule& s) {
  using planner::MemCategory;
  std::vector<CollectiveBinding> out(s.ops.size());
  std::vector<int> made_by(s.allocations.size(), -1);
  std::vector<char> live(s.allocations.size(), 0);
  for (const auto& a : s.allocations)
    if (a.persistent) live[a.id] = 1;
  for (const Op& op : s.ops) {
    for (int a : op.allocs) {
      live[a] = 1;
      made_by[a] = op.id;
    }
    if (planner::is_collective(op.kind) && op.comm_bytes > 0) {
      auto allowed = [&](MemCategory c) {
        if (op.kind == OpKind::all_gather)
          return c == MemCategory::all_gather_buffer || c == MemCategory::unsharded_param;
        if (op.kind == OpKind::all_to_all)  // the send buffer: tokens the op before produced
          return c == MemCategory::activation || c == MemCategory::temporary;
        return c == MemCategory::reduce_scatter_buffer || c == MemCategory::unsharded_grad ||
               c == MemCategory::temporary || (op.kind == OpKind::all_reduce && c == MemCategory::sharded_grad);
      };
      int best = -1;
      for (std::size_t a = 0; a < s.allocations.size(); ++a) {
        const auto& al = s.allocations[a];
        if (!live[a] || made_by[a] < 0 || static_cast<double>(al.bytes) < op.comm_bytes || !allowed(al.category) ||
            planner::on_host(al.placement))  // host memory is never a collective's buffer
          continue;
        if (s.ops[made_by[a]].unit != op.unit) continue;
        // An all-to-all's send buffer comes from before it; what it allocates is its output.
        if (op.kind == OpKind::all_to_all && made_by[a] == op.id) continue;
        if (best < 0 || made_by[a] > made_by[best] || (made_by[a] == made_by[best] && static_cast<int>(a) > best))
          best = static_cast<int>(a);
      }
      out[op.id].main_alloc = best;
      if (op.kind == OpKind::reduce_scatter || op.kind == OpKind::all_to_all) {
        const double recv = collective_bytes(s, op).recv_bytes;
        for (int a : op.allocs)
          if (a != best && !planner::on_host(s.allocations[a].placement) &&
              static_cast<double>(s.allocations[a].bytes) >= recv)
            out[op.id].output_alloc = a;
      }
    }
    for (int a : op.frees) live[a] = 0;
  }
  return out;
}

}  // namespace fsdpsim::runtime
