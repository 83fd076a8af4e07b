// JSON round trip of the SimGrid engine's result (the forked simulation hands it back this
// way; `fsdpsim simulate --json` prints part of it).
#include <stdexcept>

#include "sim/simgrid_engine.h"

namespace fsdpsim::sim {

namespace {

Constraint constraint_from(int v) {
  if (v < 0 || v > static_cast<int>(Constraint::launch_queue)) throw std::invalid_argument("bad constraint in a result");
  return static_cast<Constraint>(v);
}

}  // namespace

nlohmann::json step_timing_to_json(const StepTiming& t) {
  nlohmann::json ops = nlohmann::json::array();
  for (const OpTiming& o : t.ops)
    ops.push_back({o.issue_start, o.enqueue, o.start, o.end, o.nominal_seconds, o.issue_seconds,
                   static_cast<int>(o.started_by), o.started_by_op, static_cast<int>(o.issued_by), o.issued_by_op});
  nlohmann::json path = nlohmann::json::array();
  for (const PathSegment& p : t.critical_path) path.push_back({p.op, static_cast<int>(p.kind), p.start, p.end});
  const CriticalPathSummary& c = t.critical_path_summary;
  return {{"step_seconds", t.step_seconds},
          {"compute_seconds", t.compute_seconds},
          {"optimizer_seconds", t.optimizer_seconds},
          {"exposed_comm_seconds", t.exposed_comm_seconds},
          {"exposed_other_seconds", t.exposed_other_seconds},
          {"comm_seconds", t.comm_seconds},
          {"interference_seconds", t.interference_seconds},
          {"cpu_issue_seconds", t.cpu_issue_seconds},
          {"exposed_comm_by_unit", t.exposed_comm_by_unit},
          {"exposed_comm_outside_units", t.exposed_comm_outside_units},
          {"exposed_comm_by_phase", t.exposed_comm_by_phase},
          {"tokens_per_second_per_gpu", t.tokens_per_second_per_gpu},
          {"model_flops", t.model_flops},
          {"hardware_flops", t.hardware_flops},
          {"mfu", t.mfu},
          {"hfu", t.hfu},
          {"mfu_peak_flops", t.mfu_peak_flops},
          {"ops", ops},
          {"critical_path", path},
          {"critical_path_summary",
           {c.compute_seconds, c.communication_seconds, c.other_gpu_seconds, c.cpu_issue_seconds, c.host_seconds}}};
}

StepTiming step_timing_from_json(const nlohmann::json& j) {
  StepTiming t;
  t.step_seconds = j.at("step_seconds");
  t.compute_seconds = j.at("compute_seconds");
  t.optimizer_seconds = j.at("optimizer_seconds");
  t.exposed_comm_seconds = j.at("exposed_comm_seconds");
  t.exposed_other_seconds = j.at("exposed_other_seconds");
  t.comm_seconds = j.at("comm_seconds");
  t.interference_seconds = j.at("interference_seconds");
  t.cpu_issue_seconds = j.at("cpu_issue_seconds");
  t.exposed_comm_by_unit = j.at("exposed_comm_by_unit").get<std::vector<double>>();
  t.exposed_comm_outside_units = j.at("exposed_comm_outside_units");
  t.exposed_comm_by_phase = j.at("exposed_comm_by_phase").get<std::array<double, 3>>();
  t.tokens_per_second_per_gpu = j.at("tokens_per_second_per_gpu");
  t.model_flops = j.at("model_flops");
  t.hardware_flops = j.at("hardware_flops");
  t.mfu = j.at("mfu");
  t.hfu = j.at("hfu");
  t.mfu_peak_flops = j.at("mfu_peak_flops");
  for (const auto& o : j.at("ops")) {
    OpTiming x;
    x.issue_start = o.at(0);
    x.enqueue = o.at(1);
    x.start = o.at(2);
    x.end = o.at(3);
    x.nominal_seconds = o.at(4);
    x.issue_seconds = o.at(5);
    x.started_by = constraint_from(o.at(6));
    x.started_by_op = o.at(7);
    x.issued_by = constraint_from(o.at(8));
    x.issued_by_op = o.at(9);
    t.ops.push_back(x);
  }
  for (const auto& p : j.at("critical_path"))
    t.critical_path.push_back({p.at(0), static_cast<PathSegment::Kind>(p.at(1).get<int>()), p.at(2), p.at(3)});
  const auto& c = j.at("critical_path_summary");
  t.critical_path_summary = {c.at(0), c.at(1), c.at(2), c.at(3), c.at(4)};
  return t;
}

nlohmann::json simgrid_result_to_json(const SimgridResult& r) {
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankSummary& s : r.ranks)
    ranks.push_back({{"rank", s.rank},
                     {"step_seconds", s.step_seconds},
                     {"compute_seconds", s.compute_seconds},
                     {"exposed_comm_seconds", s.exposed_comm_seconds},
                     {"compute_speed", s.compute_speed}});
  nlohmann::json detail = nlohmann::json::array();
  for (const SimgridRankTiming& d : r.detail) detail.push_back({{"rank", d.rank}, {"timing", step_timing_to_json(d.timing)}});
  nlohmann::json colls = nlohmann::json::array();
  for (const CollectiveStats& c : r.collectives)
    colls.push_back({{"kind", c.kind},
                     {"count", c.count},
                     {"simgrid_seconds", c.simgrid_seconds},
                     {"analytic_seconds", c.analytic_seconds},
                     {"nominal_seconds", c.nominal_seconds}});
  nlohmann::json links = nlohmann::json::array();
  for (const LinkStats& l : r.links)
    links.push_back({{"name", l.name},
                     {"kind", l.kind},
                     {"bandwidth_bytes_per_second", l.bandwidth},
                     {"bytes", l.bytes},
                     {"busy_seconds", l.busy_seconds},
                     {"utilisation", l.utilisation},
                     {"busy_utilisation", l.busy_utilisation}});
  nlohmann::json classes = nlohmann::json::array();
  for (const LinkClassStats& c : r.link_classes)
    classes.push_back({{"kind", c.kind},
                       {"links", c.links},
                       {"max_utilisation", c.max_utilisation},
                       {"mean_utilisation", c.mean_utilisation},
                       {"bytes", c.bytes},
                       {"busiest", c.busiest}});
  return {{"platform", r.platform},
          {"platform_xml", r.platform_xml},
          {"flow_mode", to_string(r.flow_mode)},
          {"symmetric", r.symmetric},
          {"world", r.world},
          {"window_nodes", r.window_nodes},
          {"window_node_list", r.window_node_list},
          {"window_fallback", r.window_fallback},
          {"simulated_ranks", r.simulated_ranks},
          {"matched_flows", r.matched_flows},
          {"notes", r.notes},
          {"step_seconds", r.step_seconds},
          {"report_rank", r.report_rank},
          {"timing", step_timing_to_json(r.timing)},
          {"detail", detail},
          {"ranks", ranks},
          {"collectives", colls},
          {"links", links},
          {"link_classes", classes},
          {"analytic", step_timing_to_json(r.analytic)},
          {"wall_seconds", r.wall_seconds},
          {"cpu_seconds", r.cpu_seconds},
          {"events", r.events},
          {"flows", r.flows},
          {"events_per_second", r.events_per_second}};
}

SimgridResult simgrid_result_from_json(const nlohmann::json& j) {
  SimgridResult r;
  r.platform = j.at("platform");
  r.platform_xml = j.at("platform_xml");
  const std::string mode = j.at("flow_mode");
  r.flow_mode = mode == "per_step" ? FlowMode::per_step : mode == "aggregated" ? FlowMode::aggregated : FlowMode::automatic;
  r.symmetric = j.at("symmetric");
  r.world = j.at("world");
  r.window_nodes = j.at("window_nodes");
  r.window_node_list = j.at("window_node_list").get<std::vector<int>>();
  r.window_fallback = j.at("window_fallback");
  r.simulated_ranks = j.at("simulated_ranks");
  r.matched_flows = j.at("matched_flows");
  r.notes = j.at("notes").get<std::vector<std::string>>();
  r.step_seconds = j.at("step_seconds");
  r.report_rank = j.at("report_rank");
  r.timing = step_timing_from_json(j.at("timing"));
  for (const auto& d : j.at("detail")) r.detail.push_back({d.at("rank"), step_timing_from_json(d.at("timing"))});
  for (const auto& s : j.at("ranks"))
    r.ranks.push_back({s.at("rank"), s.at("step_seconds"), s.at("compute_seconds"), s.at("exposed_comm_seconds"),
                       s.at("compute_speed")});
  for (const auto& c : j.at("collectives"))
    r.collectives.push_back({c.at("kind"), c.at("count"), c.at("simgrid_seconds"), c.at("analytic_seconds"),
                             c.at("nominal_seconds")});
  for (const auto& l : j.at("links"))
    r.links.push_back({l.at("name"), l.at("kind"), l.at("bandwidth_bytes_per_second"), l.at("bytes"), l.at("busy_seconds"),
                       l.at("utilisation"), l.at("busy_utilisation")});
  for (const auto& c : j.at("link_classes"))
    r.link_classes.push_back({c.at("kind"), c.at("links"), c.at("max_utilisation"), c.at("mean_utilisation"),
                              c.at("bytes"), c.at("busiest")});
  r.analytic = step_timing_from_json(j.at("analytic"));
  r.wall_seconds = j.at("wall_seconds");
  r.cpu_seconds = j.at("cpu_seconds");
  r.events = j.at("events");
  r.flows = j.at("flows");
  r.events_per_second = j.at("events_per_second");
  return r;
}

}  // namespace fsdpsim::sim
