// The run as a Chrome trace and as JSON for tools.
#include <algorithm>
#include <set>

#include "runtime/runtime.h"

namespace fsdpsim::runtime {

using planner::Op;
using planner::Schedule;

nlohmann::json trace_json(const Schedule& s, const RunResult& r) {
  nlohmann::json events = nlohmann::json::array();
  std::set<int> streams;
  for (const Op& op : s.ops) streams.insert(static_cast<int>(op.stream));
  constexpr double us = 1e6;
  for (const RankResult& rank : r.ranks) {
    const int pid = rank.rank;
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", pid}, {"args", {{"name", "rank " + std::to_string(pid)}}}});
    events.push_back({{"ph", "M"}, {"name", "process_sort_index"}, {"pid", pid}, {"args", {{"sort_index", pid}}}});
    for (int t : streams) {
      events.push_back({{"ph", "M"}, {"name", "thread_name"}, {"pid", pid}, {"tid", t},
                        {"args", {{"name", planner::to_string(static_cast<planner::Stream>(t))}}}});
      events.push_back({{"ph", "M"}, {"name", "thread_sort_index"}, {"pid", pid}, {"tid", t}, {"args", {{"sort_index", t}}}});
    }
    double offset = 0;
    for (std::size_t k = 0; k < rank.steps.size(); ++k) {
      const auto& timings = rank.steps[k];
      for (const Op& op : s.ops) {
        const OpTiming& t = timings[op.id];
        if (t.start_seconds < 0 || t.end_seconds < 0) continue;
        nlohmann::json args = {{"op", op.id}, {"kind", planner::to_string(op.kind)}, {"step", k}};
        if (op.unit >= 0) args["unit"] = op.unit;
        if (!op.module.empty()) args["module"] = op.module;
        if (op.micro_step) args["micro_step"] = op.micro_step;
        if (op.flops) args["flops"] = op.flops;
        if (op.hbm_bytes) args["hbm_bytes"] = op.hbm_bytes;
        if (op.comm_bytes) args["comm_bytes"] = op.comm_bytes;
        events.push_back({{"ph", "X"}, {"name", op.name}, {"cat", planner::to_string(op.kind)}, {"pid", pid},
                          {"tid", static_cast<int>(op.stream)}, {"ts", (offset + t.start_seconds) * us},
                          {"dur", std::max(0.0, t.end_seconds - t.start_seconds) * us}, {"args", args}});
      }
      if (k + 1 == rank.steps.size()) {
        for (const MemorySample& m : rank.memory)
          events.push_back({{"ph", "C"}, {"name", "memory"}, {"pid", pid}, {"ts", (offset + m.time_seconds) * us},
                            {"args", {{"allocated_bytes", m.allocated_bytes}, {"reserved_bytes", m.reserved_bytes}}}});
      }
      offset += k < rank.step_seconds.size() ? rank.step_seconds[k] : 0;
    }
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData", {{"source", "fsdpsim run"}, {"schedule", s.name}, {"backend", r.backend}, {"device", r.device},
                         {"time", r.time_scale == 1 ? "seconds" : "modeled seconds (wall seconds / time_scale)"},
                         {"time_scale", r.time_scale}}}};
}

nlohmann::json run_result_json(const Schedule& s, const RunResult& r) {
  nlohmann::json j;
  j["schedule"] = s.name;
  j["backend"] = r.backend;
  j["device"] = r.device;
  j["world_size"] = r.world_size;
  j["virtual_world"] = r.virtual_world;
  j["ranks_played"] = r.ranks.size();
  j["time_scale"] = r.time_scale;
  j["step_seconds"] = r.step_seconds();
  j["memory"] = {{"peak_allocated_bytes", r.peak_allocated_bytes()}, {"peak_reserved_bytes", r.peak_reserved_bytes()}};
  j["ranks"] = nlohmann::json::array();
  for (const RankResult& rank : r.ranks) {
    nlohmann::json o = {{"rank", rank.rank},
                        {"step_seconds", rank.step_seconds},
                        {"allocated_at_start_bytes", rank.allocated_at_start_bytes},
                        {"peak_allocated_bytes", rank.peak_allocated_bytes},
                        {"peak_op", rank.peak_op},
                        {"peak_reserved_bytes", rank.peak_reserved_bytes},
                        {"allocator_retries", rank.allocator_retries},
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
      j["ops"].push_back({{"id", op.id}, {"name", op.name}, {"kind", planner::to_string(op.kind)},
                          {"stream", planner::to_string(op.stream)}, {"start_seconds", timings[op.id].start_seconds},
                          {"end_seconds", timings[op.id].end_seconds}});
  }
  j["notes"] = r.notes;
  return j;
}

}  // namespace fsdpsim::runtime
