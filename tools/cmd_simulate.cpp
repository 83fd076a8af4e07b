// `fsdpsim simulate`: the step on a simulated cluster (SimGrid): the estimate's report with
// the SimGrid engine's timing, how it differs from the analytic engine, the busiest links,
// and a Chrome/Perfetto trace.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <memory>
#include <sstream>

#include <unistd.h>

#include <CLI/CLI.hpp>

#include "models/json_input.h"
#include "sim/estimate.h"
#include "sim/resource_guard.h"
#include "sim/scenario_loader.h"
#include "sim/simgrid_engine.h"
#include "sim/simgrid_platform.h"
#include "sim/timing_report.h"
#include "sim/trace.h"
#include "tools/commands.h"
#include "tools/elapsed_progress.h"
#include "tools/format.h"
#include "tools/option_checks.h"
#include "tools/report.h"
#include "tools/scenario_input.h"
#include "tools/output_file.h"

namespace fsdpsim::tools {

namespace {

struct SimulateOptions {
  ScenarioInputOptions input;  // --scenario, or --model with --gpus (tools/scenario_input.h)
  bool json = false;
  std::string trace;
  std::string platform;
  std::string export_platform;
  std::string flow_mode;
  std::string symmetry;
  int links = 10;
  int rank = -1;
  double max_memory_gib = -1;  // <0: the default budget (sim/resource_guard.h)
  double max_seconds = -1;     // <0: the default; 0: no limit
  bool estimate_cost = false;
  bool progress = false;
};

std::string signed_percent(double a, double b) {
  if (!(b > 0)) return "";
  char buf[32];
  std::snprintf(buf, sizeof buf, "%+.1f%%", (a / b - 1) * 100);
  return buf;
}

std::string gbps(double bytes_per_second) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GB/s", bytes_per_second / 1e9);
  return buf;
}

std::string number(double v, const char* fmt = "%.3g") {
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// The estimate with the SimGrid engine's timing (the memory events on its clock).
sim::Estimate simgrid_estimate(sim::Estimate e, const sim::SimgridResult& r) {
  e.timing = r.timing;
  e.timed_memory = sim::timed_memory(e.plan.schedule, e.timing);
  return e;
}

// The estimate's report (memory, the analytic engine's time), then the SimGrid engine's.
std::string simulate_text(const sim::Estimate& analytic, const sim::SimgridResult& r, const planner::Scenario& sc,
                          int links) {
  std::ostringstream out;
  out << estimate_text(analytic, sc);
  const sim::StepTiming& t = r.timing;
  const sim::StepTiming& a = r.analytic;
  out << "\nStep time on a simulated cluster (SimGrid)\n";
  out << "platform: " << r.platform << "\n";
  out << "flows: " << sim::to_string(r.flow_mode) << "; " << r.simulated_ranks << " rank"
      << (r.simulated_ranks > 1 ? "s" : "") << " simulated as actors, links of " << r.window_nodes << " of "
      << sc.cluster.nodes << " node" << (sc.cluster.nodes > 1 ? "s" : "") << " simulated\n";
  Table tt({"", "SimGrid", "analytic", "difference"});
  auto row = [&](const std::string& name, double x, double y) {
    tt.add({name, seconds_text(x), seconds_text(y), signed_percent(x, y)});
  };
  row("step (rank " + std::to_string(r.report_rank) + ")", t.step_seconds, a.step_seconds);
  if (r.step_seconds > t.step_seconds * (1 + 1e-9)) row("step (slowest rank)", r.step_seconds, a.step_seconds);
  row("compute", t.compute_seconds, a.compute_seconds);
  row("  of which interference", t.interference_seconds, a.interference_seconds);
  row("exposed communication", t.exposed_comm_seconds, a.exposed_comm_seconds);
  row("optimizer", t.optimizer_seconds, a.optimizer_seconds);
  row("other exposed (CPU, copies)", t.exposed_other_seconds, a.exposed_other_seconds);
  tt.add({"tokens/s per GPU", number(t.tokens_per_second_per_gpu, "%.0f"), number(a.tokens_per_second_per_gpu, "%.0f"),
          signed_percent(t.tokens_per_second_per_gpu, a.tokens_per_second_per_gpu)});
  tt.add({"MFU", percent(t.mfu), percent(a.mfu), signed_percent(t.mfu, a.mfu)});
  out << tt.str();

  if (!r.collectives.empty()) {
    out << "\nCollectives (rank " << r.report_rank << "; mean per call)\n";
    Table ct({"kind", "calls", "SimGrid", "analytic", "NCCL alone", "vs alone"});
    for (const sim::CollectiveStats& c : r.collectives) {
      if (c.count == 0) continue;
      ct.add({c.kind, std::to_string(c.count), seconds_text(c.simgrid_seconds / c.count),
              seconds_text(c.analytic_seconds / c.count), seconds_text(c.nominal_seconds / c.count),
              signed_percent(c.simgrid_seconds, c.nominal_seconds)});
    }
    out << ct.str();
  }

  if (r.ranks.size() > 1) {
    const sim::RankSummary* fast = &r.ranks.front();
    const sim::RankSummary* slow = &r.ranks.front();
    for (const sim::RankSummary& s : r.ranks) {
      if (s.step_seconds < fast->step_seconds) fast = &s;
      if (s.step_seconds > slow->step_seconds) slow = &s;
    }
    out << "\nRanks: " << r.ranks.size() << " simulated; step from " << seconds_text(fast->step_seconds) << " (rank "
        << fast->rank << ") to " << seconds_text(slow->step_seconds) << " (rank " << slow->rank << ")\n";
    bool any = false;
    for (const sim::RankSummary& s : r.ranks)
      if (s.compute_speed != 1) {
        if (!any) out << "stragglers:";
        any = true;
        out << " rank " << s.rank << " at " << percent(s.compute_speed) << " speed, step " << seconds_text(s.step_seconds)
            << ";";
      }
    if (any) out << "\n";
  }

  if (!r.links.empty()) {
    out << "\nBusiest links (utilisation = bytes / (bandwidth x step); while busy = bytes / (bandwidth x time with traffic))\n";
    Table lt({"link", "kind", "bandwidth", "carried", "utilisation", "busy", "while busy"});
    for (int i = 0; i < links && i < static_cast<int>(r.links.size()); ++i) {
      const sim::LinkStats& l = r.links[i];
      lt.add({l.name, l.kind, gbps(l.bandwidth), gib(l.bytes), percent(l.utilisation),
              percent(r.step_seconds > 0 ? l.busy_seconds / r.step_seconds : 0), percent(l.busy_utilisation)});
    }
    out << lt.str();
    out << "\nBy kind of link\n";
    Table kt({"kind", "links used", "max utilisation", "mean utilisation", "busiest"});
    for (const sim::LinkClassStats& c : r.link_classes)
      kt.add({c.kind, std::to_string(c.links), percent(c.max_utilisation), percent(c.mean_utilisation), c.busiest});
    out << kt.str();
    const sim::LinkStats& top = r.links.front();
    out << "bottleneck: " << top.name << " (" << top.kind << "), busy " << percent(r.step_seconds > 0 ? top.busy_seconds / r.step_seconds : 0)
        << " of the step at " << percent(top.busy_utilisation) << " of its bandwidth while busy\n";
  }
  if (!r.notes.empty()) {
    out << "\nNotes\n";
    for (const std::string& n : r.notes) out << "- " << n << "\n";
  }
  char buf[160];
  std::snprintf(buf, sizeof buf, "\nsimulation: %.2f s wall, %.0f events (%.0f flows), %.0f events/s\n", r.wall_seconds,
                r.events, r.flows, r.events_per_second);
  out << buf;
  return out.str();
}

// estimate's JSON with the SimGrid engine's timing under "time" and "throughput" (the stable
// keys), the analytic engine's beside it, and the network under "simgrid".
nlohmann::json simulate_json(const sim::Estimate& e, const sim::SimgridResult& r, const planner::Scenario& sc) {
  nlohmann::json j = estimate_json(e, sc);
  j["engine"] = "simgrid";
  j["time"]["job_step_seconds"] = r.step_seconds;
  nlohmann::json sg = sim::simgrid_result_to_json(r);
  sg.erase("timing");
  sg.erase("detail");
  sg.erase("analytic");
  j["simgrid"] = sg;
  j["analytic"] = sim::timing_json(r.analytic);
  j["difference"] = {{"step_fraction", r.analytic.step_seconds > 0 ? r.timing.step_seconds / r.analytic.step_seconds - 1 : 0},
                     {"exposed_comm_seconds", r.timing.exposed_comm_seconds - r.analytic.exposed_comm_seconds}};
  return j;
}

// ---- resource guard --------------------------------------------------------------------------

// What to try when a simulation is over its budget.
std::string how_to_go_further(const planner::Scenario& sc, const sim::SimgridOptions& options, const sim::SimgridCost& c) {
  std::string out = "raise --max-memory (GiB) or --max-time (seconds; 0: no limit) on a machine that has it";
  const int nodes = sc.cluster.nodes;
  const int leaf = options.fabric.nodes_per_leaf > 0 ? options.fabric.nodes_per_leaf : sim::default_nodes_per_leaf(sc.cluster);
  // Whole leaves make a period only when consecutive nodes fill a leaf (a spread placement has
  // none at any node count).
  if (c.window_nodes == nodes && nodes > leaf && nodes % leaf != 0 && options.fabric.placement == sim::Placement::packed) {
    const int below = nodes / leaf * leaf, above = below + leaf;
    out += "; or simulate " + std::to_string(below) + " or " + std::to_string(above) +
           " nodes (cluster.nodes): with whole leaves of " + std::to_string(leaf) +
           " nodes one period of the cluster stands for all of it, while " + std::to_string(nodes) +
           " nodes simulate every node's links";
  }
  if (!c.window_fallback.empty())
    out += "; no smaller window was proved to load the links as the whole cluster does (" + c.window_fallback + ")";
  if (c.simulated_ranks > 1) out += "; or drop the stragglers, slow links or simulation.symmetry=off (every rank runs as actors)";
  return out + "; `fsdpsim estimate` (the analytic engine) answers at any scale";
}

sim::ResourceEstimate resource_estimate(const sim::SimgridCost& c) {
  char time_basis[160];
  std::snprintf(time_basis, sizeof time_basis, "%.3g flows%s, %.3g other activities", c.flows,
                c.matched_flows ? " (matched)" : "", c.other_activities);
  return {c.memory_bytes, c.seconds, c.memory_basis, time_basis};
}

// --estimate-cost: the estimate and what it is made of.
void print_cost(const sim::SimgridCost& c, const sim::ResourceEstimate& e, bool json) {
  if (json)
    std::cout << nlohmann::json({{"window_nodes", c.window_nodes}, {"window_node_list", c.window_node_list},
                                 {"window_fallback", c.window_fallback}, {"window_ranks", c.window_ranks},
                                 {"simulated_ranks", c.simulated_ranks}, {"flow_mode", sim::to_string(c.flow_mode)},
                                 {"links", c.links}, {"flows", c.flows}, {"matched_flows", c.matched_flows},
                                 {"flow_pairs", c.flow_pairs},
                                 {"other_activities", c.other_activities}, {"memory_bytes", c.memory_bytes},
                                 {"seconds", c.seconds}})
                     .dump(2)
              << "\n";
  else
    std::cout << "simulate would take about " << sim::duration_text(c.seconds) << " and " << sim::bytes_text(c.memory_bytes)
              << " of memory: " << c.memory_basis << "; " << e.time_basis << "\n";
}

void run_simulate(const SimulateOptions& o) {
  const ScenarioInput input = resolve_scenario_input(o.input);
  const ParsedScenarioInput parsed = parse_scenario_input(input);
  const planner::Scenario& scenario = *parsed.scenario;
  sim::SimgridOptions options = sim::simgrid_options(scenario);
  if (!o.platform.empty()) {
    options.platform_xml = planner::resolve_path(o.platform, "");
    sim::check_platform_file(options.platform_xml);
  }
  if (!o.flow_mode.empty())
    options.flow_mode = o.flow_mode == "aggregated" ? sim::FlowMode::aggregated
                      : o.flow_mode == "per_step"   ? sim::FlowMode::per_step
                                                    : sim::FlowMode::automatic;
  if (!o.symmetry.empty()) options.symmetry = o.symmetry == "off" ? sim::Symmetry::off : sim::Symmetry::automatic;
  if (o.rank >= 0) {
    if (o.rank >= scenario.world_size())
      throw InputError::option("--rank", "expected a rank below the world of " + std::to_string(scenario.world_size()) +
                                             " ranks, got " + std::to_string(o.rank));
    options.report_rank = o.rank;
  }
  // Planned and priced once: the SimGrid engine plays the estimate's schedule and op costs.
  const sim::Estimate analytic = sim::estimate_step(scenario);
  if (!o.export_platform.empty()) {
    write_output_file(o.export_platform,
                      sim::simgrid_platform_xml(analytic.plan.schedule, {analytic.cluster, analytic.calibration.nccl}, options),
                      "the platform file");
    std::cerr << "wrote the SimGrid platform to " << o.export_platform << "\n";
  }
  // The guard: the simulation's memory and time from its setup, before it starts.
  const sim::SimgridCost cost =
      sim::estimate_simgrid_cost(analytic.plan.schedule, {analytic.cluster, analytic.calibration.nccl}, options);
  const sim::ResourceEstimate expected = resource_estimate(cost);
  if (o.estimate_cost) {
    print_cost(cost, expected, o.json);
    return;
  }
  const sim::ResourceBudget budget = sim::budget_from_options(o.max_memory_gib, o.max_seconds);
  if (const std::string over = sim::over_budget(expected, budget); !over.empty())
    throw InputError(input.file, "", "not simulated: it would need " + over + ". To go further: " +
                                         how_to_go_further(scenario, options, cost));
  if (cost.seconds > 10)
    std::cerr << "simulate: expected to take about " << sim::duration_text(cost.seconds) << " and "
              << sim::bytes_text(cost.memory_bytes) << " of memory\n";
  // Progress on stderr past 2 s: on a terminal, or with --progress (tools/elapsed_progress.h).
  ElapsedProgress progress(o.progress || ::isatty(2), ::isatty(2), cost.seconds);
  const sim::SimgridResult r = sim::simulate_estimate(analytic, options);
  progress.finish();
  const sim::Estimate e = simgrid_estimate(analytic, r);
  if (!o.trace.empty()) {
    std::vector<sim::TraceProcess> processes;
    std::vector<std::string> names;
    names.reserve(r.detail.size() + 1);
    for (const sim::SimgridRankTiming& d : r.detail) {
      names.push_back("SimGrid rank " + std::to_string(d.rank) + (r.symmetric ? " (every rank)" : "") + ": " +
                      e.plan.schedule.name);
      processes.push_back({names.back(), &e.plan.schedule, &d.timing});
    }
    processes.push_back({"analytic engine: " + e.plan.schedule.name, &e.plan.schedule, &r.analytic});
    write_output_file(o.trace, sim::chrome_trace(processes).dump() + "\n", "the trace file");
    std::cerr << "wrote the trace to " << o.trace << " (open it in ui.perfetto.dev)\n";
  }
  if (o.json) std::cout << simulate_json(e, r, scenario).dump(2) << "\n";
  else std::cout << simulate_text(analytic, r, scenario, o.links);
}

}  // namespace

void add_simulate_command(CLI::App& app) {
  auto o = std::make_shared<SimulateOptions>();
  CLI::App* cmd = app.add_subcommand("simulate", "The step on a simulated cluster (SimGrid): topology, link contention, stragglers (a scenario's \"simulation\" object, or --set simulation.*)");
  // A scenario file's "simulation" object (or --set simulation.*) sets stragglers, slow links, fabric.
  add_scenario_input_options(cmd, o->input);
  cmd->add_flag("--json", o->json, "Print one JSON object for tools");
  cmd->add_option("--trace", o->trace, "Write a Chrome/Perfetto trace of the simulated step");
  cmd->add_option("--platform", o->platform, "A SimGrid platform XML file instead of the platform built from the cluster");
  cmd->add_option("--export-platform", o->export_platform, "Write the platform built from the cluster as SimGrid XML");
  cmd->add_option("--flow-mode", o->flow_mode, "How collectives send flows: auto, aggregated, per_step")
      ->check(CLI::IsMember({"auto", "aggregated", "per_step"}));
  cmd->add_option("--symmetry", o->symmetry, "auto: simulate one rank of identical ranks; off: every rank")
      ->check(CLI::IsMember({"auto", "off"}));
  cmd->add_option("--links", o->links, "How many of the busiest links to list")->check(CLI::Range(0, 1000000));
  cmd->add_option("--rank", o->rank, "The rank whose timing the report shows (default 0)")->check(CLI::Range(0, (1 << 20) - 1));
  cmd->add_option("--max-memory", o->max_memory_gib,
                  "Refuse to start a simulation expected to need more GiB than this (default: half the machine's memory)")
      ->check(non_negative_number());
  cmd->add_option("--max-time", o->max_seconds,
                  "Refuse to start a simulation expected to take longer, in seconds (default 3600; 0: no limit)")
      ->check(non_negative_number());
  cmd->add_flag("--estimate-cost", o->estimate_cost,
                "Print the simulation's expected memory and time (the resource guard's estimate) and stop");
  cmd->add_flag("--progress", o->progress,
                "Show progress on stderr after 2 s even when it is not a terminal (on a terminal it is shown anyway)");
  cmd->callback([o] { run_simulate(*o); });
}

}  // namespace fsdpsim::tools
