// The run as a Chrome trace and as JSON for tools.
#include <algorithm>
#include <set>

#include "runtime/runtime.h"

namespace fsdpsim::runtime {

using planner::Op;
using planner::Schedule;

namespace {

// The simulator's trace layout (sim/trace.cpp), so measured and simulated steps overlay:
// tid 0 is the CPU issue thread (and host-stream ops), tid 1 + planner::Stream a stream.
int stream_tid(planner::Stream s) { return 1 + static_cast<int>(s); }

}  // namespace

nlohmann::json trace_json(const Schedule& s, const RunResult& r) {
  nlohmann::json events = nlohmann::json::array();
  std::set<int> streams;
  for (const Op& op : s.ops)
    if (op.stream != planner::Stream::host) streams.insert(static_cast<int>(op.stream));
  constexpr double us = 1e6;
  auto meta = [&](const char* what, int pid, int tid, const nlohmann::json& args) {
    nlohmann::json e = {{"ph", "M"}, {"name", what}, {"pid", pid}, {"args", args}};
    if (tid >= 0) e["tid"] = tid;
    events.push_back(std::move(e));
  };
  for (const RankResult& rank : r.ranks) {
    const int pid = rank.rank;
    meta("process_name", pid, -1, {{"name", "rank " + std::to_string(pid) + " (measured, " + r.backend + ")"}});
    meta("process_sort_index", pid, -1, {{"sort_index", pid}});
    meta("thread_name", pid, 0, {{"name", "CPU issue thread"}});
    meta("thread_sort_index", pid, 0, {{"sort_index", 0}});
    for (int t : streams) {
      const auto stream = static_cast<planner::Stream>(t);
      meta("thread_name", pid, stream_tid(stream), {{"name", "stream " + planner::to_string(stream)}});
      meta("thread_sort_index", pid, stream_tid(stream), {{"sort_index", stream_tid(stream)}});
    }
    double offset = 0;
    for (std::size_t k = 0; k < rank.steps.size(); ++k) {
      const auto& timings = rank.steps[k];
      for (const Op& op : s.ops) {
        const OpTiming& t = timings[op.id];
        if (t.start_seconds < 0 || t.end_seconds < 0) continue;
        nlohmann::json args = planner::op_trace_args(s, op);
        args["step"] = k;
        args["measured_us"] = (t.end_seconds - t.start_seconds) * us;
        events.push_back({{"ph", "X"},
                          {"name", op.name},
                          {"cat", planner::to_string(op.kind)},
                          {"pid", pid},
                          {"tid", op.stream == planner::Stream::host ? 0 : stream_tid(op.stream)},
                          {"ts", (offset + t.start_seconds) * us},
                          {"dur", std::max(0.0, t.end_seconds - t.start_seconds) * us},
                          {"args", std::move(args)}});
      }
      if (k + 1 == rank.steps.size()) {
        // Memory at each op's issue (after its allocations), the last measured step.
        for (const MemorySample& m : rank.memory) {
          const double ts = (offset + m.time_seconds) * us;
          events.push_back({{"ph", "C"},
                            {"name", "memory allocated (bytes)"},
                            {"pid", pid},
                            {"ts", ts},
                            {"args", {{"allocated", m.allocated_bytes}}}});
          events.push_back({{"ph", "C"},
                            {"name", "memory reserved (bytes)"},
                            {"pid", pid},
                            {"ts", ts},
                            {"args", {{"reserved", m.reserved_bytes}}}});
          if (m.op == rank.peak_op)
            events.push_back(
                {{"ph", "i"},
                 {"s", "p"},
                 {"name", "peak allocated"},
                 {"pid", pid},
                 {"tid", 0},
                 {"ts", ts},
                 {"args",
                  {{"allocated_bytes", rank.peak_allocated_bytes}, {"op", m.op}, {"op_name", s.ops[m.op].name}}}});
        }
      }
      offset += k < rank.step_seconds.size() ? rank.step_seconds[k] : 0;
    }
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"generator", "fsdpsim run (" + r.backend + " backend)"},
            {"schedule", s.name},
            {"device", r.device},
            {"time", r.time_scale == 1 ? "seconds" : "modeled seconds (wall seconds / time_scale)"},
            {"time_scale", r.time_scale},
            {"step_seconds", r.step_seconds()}}}};
}

nlohmann::json run_result_json(const Schedule& s, const RunResult& r) {
  nlohmann::json j;
  j["schedule"] = s.name;
  j["backend"] = r.backend;
  j["device"] = r.device;
  j["world_size"] = r.world_size;
  j["virtual_world"] = r.virtual_world;
  j["ranks_played"] = r.ranks.size();
  j["launcher"] = r.launcher;
  j["processes"] = r.processes;
  j["time_scale"] = r.time_scale;
  j["step_seconds"] = r.step_seconds();
  j["memory"] = {{"peak_allocated_bytes", r.peak_allocated_bytes()},
                 {"peak_reserved_bytes", r.peak_reserved_bytes()},
                 {"peak_host_pinned_bytes", r.peak_host_pinned_bytes()},
                 {"peak_host_pageable_bytes", r.peak_host_pageable_bytes()},
                 {"peak_host_bytes", r.peak_host_bytes()}};
  j["ranks"] = nlohmann::json::array();
  for (const RankResult& rank : r.ranks) {
    nlohmann::json o = {{"rank", rank.rank},
                        {"step_seconds", rank.step_seconds},
                        {"allocated_at_start_bytes", rank.allocated_at_start_bytes},
                        {"peak_allocated_bytes", rank.peak_allocated_bytes},
                        {"peak_op", rank.peak_op},
                        {"peak_reserved_bytes", rank.peak_reserved_bytes},
                        {"allocator_retries", rank.allocator_retries},
                        {"peak_host_pinned_bytes", rank.peak_host_pinned_bytes},
                        {"peak_host_pageable_bytes", rank.peak_host_pageable_bytes},
                        {"peak_host_bytes", rank.peak_host_bytes},
                        {"scratch_bytes", rank.scratch_bytes}};
    if (rank.device_used_peak_bytes >= 0) {
      o["device_used_before_bytes"] = rank.device_used_before_bytes;
      o["device_used_peak_bytes"] = rank.device_used_peak_bytes;
    }
    if (r.backend == "host") o["collectives_checked"] = rank.collectives_checked;
    j["ranks"].push_back(std::move(o));
  }
  // Rank 0's last measured step, op by op.
  j["ops"] = nlohmann::json::array();
  if (!r.ranks.empty() && !r.ranks[0].steps.empty()) {
    const auto& timings = r.ranks[0].steps.back();
    for (const Op& op : s.ops)
      j["ops"].push_back({{"id", op.id},
                          {"name", op.name},
                          {"kind", planner::to_string(op.kind)},
                          {"stream", planner::to_string(op.stream)},
                          {"start_seconds", timings[op.id].start_seconds},
                          {"end_seconds", timings[op.id].end_seconds}});
  }
  j["notes"] = r.notes;
  return j;
}

nlohmann::json rank_result_to_json(const RankResult& r) {
  nlohmann::json steps = nlohmann::json::array();
  for (const auto& step : r.steps) {
    nlohmann::json ops = nlohmann::json::array();
    for (const OpTiming& t : step) ops.push_back({t.start_seconds, t.end_seconds});
    steps.push_back(std::move(ops));
  }
  nlohmann::json memory = nlohmann::json::array();
  for (const MemorySample& m : r.memory) memory.push_back({m.time_seconds, m.op, m.allocated_bytes, m.reserved_bytes});
  return {{"rank", r.rank},
          {"steps", std::move(steps)},
          {"step_seconds", r.step_seconds},
          {"allocated_at_start_bytes", r.allocated_at_start_bytes},
          {"peak_allocated_bytes", r.peak_allocated_bytes},
          {"peak_op", r.peak_op},
          {"peak_reserved_bytes", r.peak_reserved_bytes},
          {"allocator_retries", r.allocator_retries},
          {"peak_host_pinned_bytes", r.peak_host_pinned_bytes},
          {"peak_host_pageable_bytes", r.peak_host_pageable_bytes},
          {"peak_host_bytes", r.peak_host_bytes},
          {"allocated_at_op", r.allocated_at_op},
          {"memory", std::move(memory)},
          {"device_used_before_bytes", r.device_used_before_bytes},
          {"device_used_peak_bytes", r.device_used_peak_bytes},
          {"scratch_bytes", r.scratch_bytes},
          {"collectives_checked", r.collectives_checked}};
}

RankResult rank_result_from_json(const nlohmann::json& j) {
  RankResult r;
  r.rank = j.at("rank").get<int>();
  for (const auto& step : j.at("steps")) {
    std::vector<OpTiming> ops;
    for (const auto& t : step) ops.push_back({t.at(0).get<double>(), t.at(1).get<double>()});
    r.steps.push_back(std::move(ops));
  }
  r.step_seconds = j.at("step_seconds").get<std::vector<double>>();
  r.allocated_at_start_bytes = j.at("allocated_at_start_bytes").get<std::int64_t>();
  r.peak_allocated_bytes = j.at("peak_allocated_bytes").get<std::int64_t>();
  r.peak_op = j.at("peak_op").get<int>();
  r.peak_reserved_bytes = j.at("peak_reserved_bytes").get<std::int64_t>();
  r.allocator_retries = j.at("allocator_retries").get<std::int64_t>();
  r.peak_host_pinned_bytes = j.at("peak_host_pinned_bytes").get<std::int64_t>();
  r.peak_host_pageable_bytes = j.at("peak_host_pageable_bytes").get<std::int64_t>();
  r.peak_host_bytes = j.at("peak_host_bytes").get<std::int64_t>();
  r.allocated_at_op = j.at("allocated_at_op").get<std::vector<std::int64_t>>();
  for (const auto& m : j.at("memory"))
    r.memory.push_back(
        {m.at(0).get<double>(), m.at(1).get<int>(), m.at(2).get<std::int64_t>(), m.at(3).get<std::int64_t>()});
  r.device_used_before_bytes = j.at("device_used_before_bytes").get<std::int64_t>();
  r.device_used_peak_bytes = j.at("device_used_peak_bytes").get<std::int64_t>();
  r.scratch_bytes = j.at("scratch_bytes").get<std::int64_t>();
  r.collectives_checked = j.at("collectives_checked").get<std::int64_t>();
  return r;
}

}  // namespace fsdpsim::runtime
