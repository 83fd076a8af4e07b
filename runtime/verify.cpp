#include "runtime/verify.h"

#include <cstdio>

#include <algorithm>
#include <array>
#include <cmath>
#include <map>

namespace fsdpsim::runtime {

using planner::Op;
using planner::OpKind;
using planner::Schedule;

std::string op_class(OpKind kind) {
  switch (kind) {
    case OpKind::all_gather:
      return "all-gather";
    case OpKind::reduce_scatter:
      return "reduce-scatter";
    case OpKind::all_reduce:
      return "all-reduce";
    case OpKind::all_to_all:
      return "all-to-all";
    case OpKind::compute_fwd:
      return "forward";
    case OpKind::compute_bwd:
    case OpKind::recompute:
      return "backward";
    case OpKind::optimizer:
      return "optimizer";
    case OpKind::copy_in:
    case OpKind::copy_out:
    case OpKind::h2d:
    case OpKind::d2h:
      return "copies";
    case OpKind::nvme_read:
    case OpKind::nvme_write:
      return "NVMe swaps";
    case OpKind::wait:
      return "wait";
  }
  return "other";
}

std::optional<double> VerifyRow::error_percent() const {
  if (measured == 0) {
    if (predicted == 0) return 0.0;
    return std::nullopt;
  }
  return (predicted - measured) / measured * 100.0;
}

namespace {
std::string mib_text(double bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1024.0 * 1024.0));
  return buf;
}

// The host backend sleeps each op's duration and issues at no cost, so a step the prediction
// finds CPU-issue-bound runs shorter there (GPT-2 on 8 H100s: 20.09 ms predicted, 19.47 ms of it
// issue, against 5.48 ms played): say so, with the figures, rather than leave a bare +266%.
void add_issue_not_played(VerifyReport& v, const Prediction& p) {
  if (v.backend != "host" || !(p.cpu_issue_seconds > 0)) return;
  v.issue_not_played = VerifyReport::IssueNotPlayed{p.cpu_issue_seconds, p.cpu_issue_on_critical_path_seconds};
  auto ms = [](double seconds) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.3f ms", seconds * 1e3);
    return std::string(buf);
  };
  v.notes.push_back("CPU issue not played: the host backend sleeps each op's duration and issues at no cost, but the "
                    "prediction holds " + ms(p.cpu_issue_seconds) + " of CPU issue (summed over the ops), " +
                    ms(p.cpu_issue_on_critical_path_seconds) + " of it on the predicted step's critical path: the "
                    "step error includes it (--durations plays without issue cost on both sides; the cuda backend "
                    "issues for real)");
}
}  // namespace

VerifyReport compare(const Schedule& s, const Prediction& p, const RunResult& r) {
  VerifyReport v;
  v.prediction_source = p.source;
  v.backend = r.backend;
  v.device = r.device;
  v.ranks_played = static_cast<int>(r.ranks.size());
  v.notes = r.notes;
  // Print order; a class not listed here still gets its row, after these (a row dropped from
  // the table hid MoE's all-to-alls and ZeRO-Infinity's NVMe swaps, 1.23 s of a 1.26 s step).
  const std::vector<std::string> order = {"all-gather", "reduce-scatter", "all-reduce", "all-to-all", "forward",
                                          "backward",   "optimizer",      "copies",     "NVMe swaps", "wait"};
  std::map<std::string, VerifyRow> rows;
  for (const Op& op : s.ops) {
    VerifyRow& row = rows[op_class(op.kind)];
    row.name = op_class(op.kind);
    ++row.ops;
    row.predicted += p.op_seconds.at(op.id);
  }
  for (const RankResult& rank : r.ranks) {
    if (rank.steps.empty()) continue;
    const double weight = 1.0 / static_cast<double>(rank.steps.size() * r.ranks.size());
    for (const auto& step : rank.steps)
      for (const Op& op : s.ops)
        rows[op_class(op.kind)].measured += std::max(0.0, step[op.id].end_seconds - step[op.id].start_seconds) * weight;
  }
  for (const std::string& name : order)
    if (auto it = rows.find(name); it != rows.end()) {
      v.op_classes.push_back(it->second);
      rows.erase(it);
    }
  for (const auto& [name, row] : rows) v.op_classes.push_back(row);
  v.step = {"step time", 0, p.step_seconds, r.step_seconds()};
  v.peak_allocated = {"peak allocated", 0, static_cast<double>(p.memory.peak_allocated_bytes),
                      static_cast<double>(r.peak_allocated_bytes())};
  v.peak_reserved = {"peak reserved", 0, static_cast<double>(p.memory.peak_reserved_bytes),
                     static_cast<double>(r.peak_reserved_bytes())};
  const std::vector<VerifyRow> host = {
      {"peak host pinned", 0, static_cast<double>(p.memory.peak_host_pinned_bytes),
       static_cast<double>(r.peak_host_pinned_bytes())},
      {"peak host pageable", 0, static_cast<double>(p.memory.peak_host_pageable_bytes),
       static_cast<double>(r.peak_host_pageable_bytes())},
      {"peak host", 0, static_cast<double>(p.memory.peak_host_bytes), static_cast<double>(r.peak_host_bytes())}};
  if (host.back().predicted > 0 || host.back().measured > 0) v.host_memory = host;
  double device_peak = -1;
  for (const RankResult& rank : r.ranks)
    if (rank.device_used_peak_bytes >= 0)
      device_peak = std::max(device_peak, static_cast<double>(rank.device_used_peak_bytes - rank.scratch_bytes));
  if (device_peak >= 0) {
    const double reserved = static_cast<double>(p.memory.peak_reserved_bytes);
    std::string overhead;
    double overhead_bytes = 0;
    if (p.device_overhead) {
      // The same parts estimate adds (planner/device_memory.h), so the device row checks them.
      overhead_bytes = p.device_overhead->total_bytes;
      for (const planner::DeviceOverheadPart& part : p.device_overhead->parts)
        overhead += (overhead.empty() ? "" : ", ") + part.name + " " + mib_text(part.bytes);
      overhead = "the device overhead as estimate counts it (planner/device_memory.h): " + overhead;
    } else {
      overhead_bytes = planner::kDefaultDeviceOverheadBytes;
      overhead = "an assumed " + mib_text(overhead_bytes) +
                 " for the CUDA context, cuBLAS and NCCL (planner::kDefaultDeviceOverheadBytes: a schedule file names "
                 "no hardware to model them from; give the scenario)";
    }
    v.device_memory = VerifyRow{"device memory in use", 0, reserved + overhead_bytes, device_peak};
    v.notes.push_back("device memory: predicted = peak reserved + " + overhead +
                      "; measured = cudaMemGetInfo at its highest minus the runtime's own scratch buffers");
  }
  if (r.virtual_world)
    v.notes.push_back("virtual world: collectives ran as local copies, so their measured times are not network times");
  add_issue_not_played(v, p);
  return v;
}

nlohmann::json verify_json(const VerifyReport& v) {
  auto row = [](const VerifyRow& r) {
    nlohmann::json j = {{"name", r.name}, {"predicted", r.predicted}, {"measured", r.measured}};
    if (r.ops) j["ops"] = r.ops;
    auto e = r.error_percent();
    j["error_percent"] = e ? nlohmann::json(*e) : nlohmann::json(nullptr);
    return j;
  };
  nlohmann::json j;
  j["prediction_source"] = v.prediction_source;
  j["backend"] = v.backend;
  j["device"] = v.device;
  j["ranks_played"] = v.ranks_played;
  j["op_classes"] = nlohmann::json::array();
  for (const VerifyRow& r : v.op_classes) {
    nlohmann::json o = row(r);
    o["unit"] = "seconds";
    j["op_classes"].push_back(o);
  }
  j["step"] = row(v.step);
  j["step"]["unit"] = "seconds";
  j["memory"] = {{"peak_allocated", row(v.peak_allocated)}, {"peak_reserved", row(v.peak_reserved)}};
  j["memory"]["peak_allocated"]["unit"] = "bytes";
  j["memory"]["peak_reserved"]["unit"] = "bytes";
  for (const VerifyRow& r : v.host_memory) {
    std::string key = r.name;
    std::replace(key.begin(), key.end(), ' ', '_');  // "peak host pinned" -> "peak_host_pinned"
    j["memory"][key] = row(r);
    j["memory"][key]["unit"] = "bytes";
  }
  if (v.device_memory) {
    j["memory"]["device"] = row(*v.device_memory);
    j["memory"]["device"]["unit"] = "bytes";
  }
  j["issue_not_played"] = nullptr;
  if (v.issue_not_played)
    j["issue_not_played"] = {{"cpu_issue_seconds", v.issue_not_played->cpu_issue_seconds},
                             {"on_critical_path_seconds", v.issue_not_played->on_critical_path_seconds}};
  j["notes"] = v.notes;
  return j;
}

std::optional<std::string> host_overhead_warning(const VerifyReport& v, double time_scale) {
  if (v.backend != "host" || !(time_scale > 0)) return std::nullopt;
  double predicted = 0, measured = 0;
  int ops = 0;
  for (const VerifyRow& row : v.op_classes) {
    predicted += row.predicted;
    measured += row.measured;
    ops += row.ops;
  }
  const double overhead = measured - predicted;  // modelled seconds
  if (ops == 0 || !(predicted > 0) || overhead < kHostOverheadWarningFraction * predicted) return std::nullopt;
  auto us = [](double seconds) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.1f us", seconds * 1e6);
    return std::string(buf);
  };
  char scale[32];
  std::snprintf(scale, sizeof scale, "%g", time_scale);
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.1f", overhead / predicted);
  return "host overhead dominates: the ops ran " + us(overhead * time_scale / ops) + " of wall time each past their "
         "modelled durations (" + ratio + "x the " + us(predicted * time_scale / ops) + " an op is modelled to take at "
         "--time-scale " + scale + "); the errors above measure this host's threads and copies, not the model. A larger "
         "--time-scale (1 plays modelled seconds in real time) makes the overhead small against the durations";
}

}  // namespace fsdpsim::runtime
