#include "sim/trace.h"

#include <algorithm>
#include <array>
#include <numeric>
#include <stdexcept>

#include "sim/estimate.h"

namespace fsdpsim::sim {

using planner::Op;
using planner::Schedule;
using planner::Stream;

namespace {

constexpr double kUs = 1e6;

int stream_tid(Stream s) { return 1 + static_cast<int>(s); }

nlohmann::json meta(const char* what, int pid, int tid, const nlohmann::json& args) {
  nlohmann::json e = {{"ph", "M"}, {"name", what}, {"pid", pid}, {"args", args}};
  if (tid >= 0) e["tid"] = tid;
  return e;
}

void add_process(nlohmann::json& events, int pid, const TraceProcess& p) {
  if (!p.schedule || !p.timing) throw std::invalid_argument("trace process \"" + p.name + "\" has no schedule or timing");
  const Schedule& s = *p.schedule;
  const StepTiming& t = *p.timing;
  if (t.ops.size() != s.ops.size()) throw std::invalid_argument("trace process \"" + p.name + "\": timing does not match");
  events.push_back(meta("process_name", pid, -1, {{"name", p.name}}));
  events.push_back(meta("process_sort_index", pid, -1, {{"sort_index", pid}}));
  events.push_back(meta("thread_name", pid, 0, {{"name", "CPU issue thread"}}));
  events.push_back(meta("thread_sort_index", pid, 0, {{"sort_index", 0}}));
  std::array<bool, planner::kStreamCount> used{};
  for (const Op& op : s.ops)
    if (op.stream != Stream::host) used[static_cast<int>(op.stream)] = true;
  for (int st = 0; st < planner::kStreamCount; ++st) {
    if (!used[st]) continue;
    const Stream stream = static_cast<Stream>(st);
    events.push_back(meta("thread_name", pid, stream_tid(stream), {{"name", "stream " + planner::to_string(stream)}}));
    events.push_back(meta("thread_sort_index", pid, stream_tid(stream), {{"sort_index", stream_tid(stream)}}));
  }

  for (const Op& op : s.ops) {
    const OpTiming& ot = t.ops[op.id];
    nlohmann::json args = planner::op_trace_args(s, op);
    args["nominal_us"] = ot.nominal_seconds * kUs;
    args["actual_us"] = (ot.end - ot.start) * kUs;
    args["started_by"] = to_string(ot.started_by);
    args["started_by_op"] = ot.started_by_op;
    const bool host = op.stream == Stream::host;
    // The CPU issue of the op.
    if (ot.issue_seconds > 0 || host) {
      nlohmann::json cpu_args = {{"op", op.id},
                                 {"issued_by", to_string(ot.issued_by)},
                                 {"issued_by_op", ot.issued_by_op}};
      // [Kernel pipelining] the part of the issue the GPU waits for before it can run the op.
      if (!host) cpu_args["lead_us"] = (ot.enqueue - ot.issue_start) * kUs;
      events.push_back({{"ph", "X"}, {"name", "issue " + op.name}, {"cat", "cpu_issue"}, {"pid", pid}, {"tid", 0},
                        {"ts", ot.issue_start * kUs}, {"dur", ot.issue_seconds * kUs}, {"args", cpu_args}});
    }
    events.push_back({{"ph", "X"},
                      {"name", op.name},
                      {"cat", planner::to_string(op.kind)},
                      {"pid", pid},
                      {"tid", host ? 0 : stream_tid(op.stream)},
                      {"ts", ot.start * kUs},
                      {"dur", (ot.end - ot.start) * kUs},
                      {"args", args}});
  }

  // Memory counters at issue times, in (time, issue order).
  std::array<std::int64_t, planner::kMemCategoryCount> by_cat{};
  std::int64_t total = 0;
  for (const planner::Allocation& a : s.allocations)
    if (a.persistent && !planner::on_host(a.placement)) {  // device memory only
      by_cat[static_cast<int>(a.category)] += a.bytes;
      total += a.bytes;
    }
  auto counters = [&](double seconds) {
    events.push_back({{"ph", "C"}, {"name", "memory allocated (bytes)"}, {"pid", pid}, {"ts", seconds * kUs},
                      {"args", {{"allocated", total}}}});
    nlohmann::json cats = nlohmann::json::object();
    for (int c = 0; c < planner::kMemCategoryCount; ++c)
      cats[planner::to_string(static_cast<planner::MemCategory>(c))] = by_cat[c];
    events.push_back({{"ph", "C"}, {"name", "memory by category (bytes)"}, {"pid", pid}, {"ts", seconds * kUs},
                      {"args", cats}});
  };
  counters(0.0);
  std::vector<int> order(s.ops.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return t.ops[a].issue_start < t.ops[b].issue_start; });
  std::int64_t peak = total;
  double peak_seconds = 0;
  int peak_op = -1;
  for (int i : order) {
    const Op& op = s.ops[i];
    if (op.allocs.empty() && op.frees.empty()) continue;
    const double when = t.ops[i].issue_start;
    for (int a : op.allocs) {
      if (planner::on_host(s.allocations[a].placement)) continue;
      by_cat[static_cast<int>(s.allocations[a].category)] += s.allocations[a].bytes;
      total += s.allocations[a].bytes;
    }
    counters(when);
    if (total > peak) {
      peak = total;
      peak_seconds = when;
      peak_op = i;
    }
    if (op.frees.empty()) continue;
    for (int a : op.frees) {
      if (planner::on_host(s.allocations[a].placement)) continue;
      by_cat[static_cast<int>(s.allocations[a].category)] -= s.allocations[a].bytes;
      total -= s.allocations[a].bytes;
    }
    counters(when);
  }
  events.push_back({{"ph", "i"},
                    {"s", "p"},
                    {"name", "peak allocated"},
                    {"pid", pid},
                    {"tid", 0},
                    {"ts", peak_seconds * kUs},
                    {"args", {{"allocated_bytes", peak}, {"op", peak_op},
                              {"op_name", peak_op >= 0 ? s.ops[peak_op].name : std::string("before the step")}}}});
}

}  // namespace

nlohmann::json chrome_trace(const std::vector<TraceProcess>& processes) {
  nlohmann::json events = nlohmann::json::array();
  nlohmann::json other = nlohmann::json::array();
  for (std::size_t p = 0; p < processes.size(); ++p) {
    add_process(events, static_cast<int>(p) + 1, processes[p]);
    const StepTiming& t = *processes[p].timing;
    other.push_back({{"process", processes[p].name},
                     {"step_seconds", t.step_seconds},
                     {"compute_seconds", t.compute_seconds},
                     {"exposed_comm_seconds", t.exposed_comm_seconds},
                     {"optimizer_seconds", t.optimizer_seconds},
                     {"mfu", t.mfu}});
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"generator", "fsdpsim analytic engine"}, {"rank_classes", other}}}};
}

nlohmann::json chrome_trace(const Estimate& e, const std::string& process_name) {
  const Schedule& s = e.plan.schedule;
  const std::string name = process_name.empty()
                               ? "rank class 0 (" + std::to_string(s.world_size) + " ranks): " + s.name
                               : process_name;
  return chrome_trace(std::vector<TraceProcess>{{name, &s, &e.timing}});
}

}  // namespace fsdpsim::sim
