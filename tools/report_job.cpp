#include "tools/report_job.h"

#include <sstream>

#include "tools/format.h"

namespace fsdpsim::tools {

namespace {

std::string init_name(const planner::InitSpec& i) {
  std::string n = i.device == planner::InitSpec::Device::cpu    ? "cpu"
                   : i.device == planner::InitSpec::Device::cuda ? "cuda"
                                                                 : "meta";
  if (i.sync_module_states) n += ", sync_module_states";
  if (!i.stated) n += " (default; set the scenario's init)";
  return n;
}

std::string checkpoint_name(const planner::CheckpointSpec& c) {
  if (c.kind == planner::CheckpointSpec::Kind::sharded)
    return std::string("sharded (SHARDED_STATE_DICT / DCP)") + (c.optimizer ? ", with optimizer state" : "");
  std::string n = "full (FULL_STATE_DICT)";
  if (c.rank0_only) n += ", rank0_only";
  if (c.offload_to_cpu) n += ", offload_to_cpu";
  if (c.optimizer) n += ", with optimizer state";
  return n;
}

std::string host_capacity_text(const planner::Scenario& sc) {
  return sc.cluster.host_memory_bytes > 0 ? gib(sc.cluster.host_memory_bytes) : std::string("not stated");
}

nlohmann::json phase_json(const planner::PhasePeak& p) {
  return {{"phase", p.phase},
          {"device_bytes", p.device_bytes},
          {"device_at", p.device_at},
          {"host_bytes_per_node", p.host_bytes_per_node},
          {"host_at", p.host_at}};
}

// The job's verdict with `headroom_bytes` kept free on the GPU in every phase (the estimate's
// own, e.job, keeps none).
planner::JobFit job_fit_with_headroom(const sim::Estimate& e, const planner::Scenario& sc, double headroom_bytes) {
  if (!(headroom_bytes > 0)) return e.job;
  return planner::job_fit(e.job.phases, e.device_overhead_bytes, e.gpu_memory_bytes - headroom_bytes,
                          sc.cluster.host_memory_bytes);
}

}  // namespace

std::string job_memory_text(const sim::Estimate& e, const planner::Scenario& sc, double headroom_bytes) {
  std::ostringstream out;
  out << "\nHost memory per node (" << sc.cluster.gpus_per_node << (sc.cluster.gpus_per_node == 1 ? " rank" : " ranks") << "; node memory " << host_capacity_text(sc)
      << ")\n";
  Table h({"offload", "pinned", "pageable", "NVMe", "GPU state per rank", ""});
  for (const planner::OffloadOption& o : e.offload_options)
    h.add({o.name, gib(o.pinned_bytes_per_node), gib(o.pageable_bytes_per_node),
           o.nvme_bytes_per_node > 0 ? gib(o.nvme_bytes_per_node) : "-", gib(o.device_state_bytes),
           o.is_scenario ? "<- scenario" : ""});
  out << h.str();

  out << "\nOutside the step (allocated per GPU; host per node)\n";
  Table p({"phase", "GPU", "host", "what holds it"});
  p.add({"init: " + init_name(sc.init), gib(e.init.device_bytes), gib(e.init.host_bytes_per_node),
         e.init.device_at + "; host: " + e.init.host_at});
  if (e.checkpoint) {
    const planner::CheckpointSave& c = *e.checkpoint;
    p.add({"checkpoint: " + checkpoint_name(sc.checkpoint), gib(c.peak.device_bytes), gib(c.peak.host_bytes_per_node),
           c.peak.device_at + "; host: " + c.peak.host_at});
  }
  out << p.str();
  if (e.checkpoint) {
    const planner::CheckpointSave& c = *e.checkpoint;
    out << "checkpoint save: " << gib(c.bytes_written_per_node) << " written by the busiest node ("
        << gib(c.bytes_written_total) << " in all), all-gathers " << seconds_text(c.gather_seconds)
        << ", device-to-host copies " << seconds_text(c.copy_seconds);
    if (c.write_seconds >= 0)
      out << ", writing " << seconds_text(c.write_seconds) << " at " << sc.cluster.storage_write_gbps
          << " GB/s per node: " << seconds_text(c.seconds()) << "\n";
    else
      out << "; write time not estimated: the cluster does not state storage.write_gbps\n";
  }
  const planner::JobFit j = job_fit_with_headroom(e, sc, headroom_bytes);
  const std::string where = j.binding_phase + " (" + j.binding_resource + ")";
  const std::string headroom = headroom_bytes > 0 ? ", with the " + gib(headroom_bytes) + " GPU headroom asked" : "";
  if (j.fits)
    out << "job fits (every phase" << headroom << "): the tightest is " << where << ", "
        << gib_or_mib(j.binding_margin_bytes) << " to spare\n";
  else
    out << "WARNING: the job does not fit" << headroom << ": " << where << " exceeds its memory by "
        << gib(-j.binding_margin_bytes) << "\n";
  if (const std::string remedy = planner::job_remedy(sc, j); !remedy.empty()) out << "  to bring it down: " << remedy << "\n";
  if (sc.cluster.host_memory_bytes <= 0)
    out << "host memory not judged: the cluster does not state host_memory_gb\n";
  return out.str();
}

nlohmann::json job_memory_json(const sim::Estimate& e, const planner::Scenario& sc, double headroom_bytes) {
  const planner::JobFit j = job_fit_with_headroom(e, sc, headroom_bytes);
  nlohmann::json options = nlohmann::json::array();
  for (const planner::OffloadOption& o : e.offload_options)
    options.push_back({{"name", o.name},
                       {"scenario", o.is_scenario},
                       {"pinned_bytes_per_node", o.pinned_bytes_per_node},
                       {"pageable_bytes_per_node", o.pageable_bytes_per_node},
                       {"nvme_bytes_per_node", o.nvme_bytes_per_node},
                       {"device_state_bytes", o.device_state_bytes}});
  nlohmann::json phases = nlohmann::json::array();
  for (const planner::PhasePeak& p : e.job.phases) phases.push_back(phase_json(p));
  nlohmann::json checkpoint = nullptr;
  if (e.checkpoint) {
    const planner::CheckpointSave& c = *e.checkpoint;
    checkpoint = {{"state_dict", sc.checkpoint.kind == planner::CheckpointSpec::Kind::full ? "full" : "sharded"},
                  {"device_bytes", c.peak.device_bytes},
                  {"host_bytes_per_node", c.peak.host_bytes_per_node},
                  {"rank0_host_bytes", c.rank0_host_bytes},
                  {"bytes_written_per_node", c.bytes_written_per_node},
                  {"bytes_written_total", c.bytes_written_total},
                  {"gather_seconds", c.gather_seconds},
                  {"copy_seconds", c.copy_seconds},
                  {"write_seconds", c.write_seconds < 0 ? nlohmann::json(nullptr) : nlohmann::json(c.write_seconds)},
                  {"seconds", c.seconds() < 0 ? nlohmann::json(nullptr) : nlohmann::json(c.seconds())}};
  }
  const std::string device = sc.init.device == planner::InitSpec::Device::cpu    ? "cpu"
                             : sc.init.device == planner::InitSpec::Device::cuda ? "cuda"
                                                                                 : "meta";
  return {{"host_memory_bytes_per_node", sc.cluster.host_memory_bytes > 0 ? nlohmann::json(sc.cluster.host_memory_bytes)
                                                                          : nlohmann::json(nullptr)},
          {"step_host",
           {{"peak_pinned_bytes_per_rank", e.memory.peak_host_pinned_bytes},
            {"peak_pageable_bytes_per_rank", e.memory.peak_host_pageable_bytes},
            {"peak_bytes_per_rank", e.memory.peak_host_bytes}}},
          {"offload_options", options},
          {"init",
           {{"device", device},
            {"stated", sc.init.stated},
            {"sync_module_states", sc.init.sync_module_states},
            {"device_bytes", e.init.device_bytes},
            {"host_bytes_per_node", e.init.host_bytes_per_node}}},
          {"checkpoint", checkpoint},
          {"phases", phases},
          {"headroom_bytes", headroom_bytes},
          {"fits", j.fits},
          {"binding_phase", j.binding_phase},
          {"binding_resource", j.binding_resource},
          {"binding_margin_bytes", j.binding_margin_bytes}};
}

}  // namespace fsdpsim::tools
