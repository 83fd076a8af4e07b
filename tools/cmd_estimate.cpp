// `fsdpsim estimate`: peak memory per GPU (breakdown, timeline, fits or not) and, with
// the analytic engine, the step time.
#include <fstream>
#include <iostream>

#include "sim/scenario_loader.h"
#include "models/json_input.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "tools/commands.h"
#include "sim/estimate.h"
#include "sim/svg.h"
#include "sim/trace.h"
#include "tools/report.h"
#include "tools/format.h"

namespace fsdpsim::tools {

namespace {

struct EstimateOptions {
  std::string scenario;
  std::vector<std::string> overrides;
  bool json = false;
  bool max_micro_batch = false;
  std::string trace;  // Chrome/Perfetto trace file
  std::string plot;   // SVG: memory timeline + stream Gantt chart
};

void write_file(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  if (!out) throw InputError(path, "", "cannot write the file");
  out << text;
  std::cerr << "wrote " << path << "\n";
}

void run_estimate(const EstimateOptions& o) {
  planner::Scenario scenario = sim::load_scenario(o.scenario, o.overrides);
  if (o.max_micro_batch) {
    sim::MicroBatchSearch search = sim::find_max_micro_batch(o.scenario, o.overrides);
    if (o.json) {
      std::cout << micro_batch_search_json(search).dump(2) << "\n";
    } else {
      std::cout << micro_batch_search_text(search, scenario);
    }
    return;
  }
  sim::Estimate estimate = sim::estimate_step(scenario);
  for (const std::string& w : planner::tied_weight_warnings(estimate.plan.units)) std::cerr << "warning: " << w << "\n";
  if (!o.trace.empty()) write_file(o.trace, sim::chrome_trace(estimate, scenario.name).dump() + "\n");
  if (!o.plot.empty()) write_file(o.plot, sim::timeline_svg(estimate));
  if (o.json) std::cout << estimate_json(estimate, scenario).dump(2) << "\n";
  else std::cout << estimate_text(estimate, scenario);
}

}  // namespace

void add_estimate_command(CLI::App& app) {
  auto options = std::make_shared<EstimateOptions>();
  CLI::App* cmd = app.add_subcommand("estimate", "Peak memory per GPU and step time of one training step");
  cmd->add_option("-s,--scenario", options->scenario, "Scenario JSON file")->required();
  cmd->add_option("--set", options->overrides, "Override a scenario field: a.b.c=value (repeatable)");
  cmd->add_flag("--json", options->json, "Print one JSON object for tools");
  cmd->add_flag("--max-micro-batch", options->max_micro_batch,
                "Find the largest micro-batch that fits in GPU memory (gradient accumulation kept)");
  cmd->add_option("--trace", options->trace, "Write a Chrome/Perfetto trace (open in ui.perfetto.dev or chrome://tracing)");
  cmd->add_option("--plot", options->plot, "Write an SVG of the memory timeline and the stream Gantt chart");
  cmd->callback([options] { run_estimate(*options); });
}

}  // namespace fsdpsim::tools
