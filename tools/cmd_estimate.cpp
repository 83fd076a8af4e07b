// `fsdpsim estimate`: peak memory per GPU (breakdown, timeline, fits or not) and, with
// the analytic engine, the step time.
#include <iostream>
#include <optional>

#include "sim/scenario_loader.h"
#include "models/json_input.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "tools/commands.h"
#include "sim/estimate.h"
#include "sim/training_run.h"
#include "sim/advice.h"
#include "sim/collectives_table.h"
#include "sim/svg.h"
#include "sim/unit_report.h"
#include "sim/trace.h"
#include "tools/report.h"
#include "tools/format.h"
#include "tools/option_checks.h"
#include "tools/scenario_input.h"
#include "tools/output_file.h"

namespace fsdpsim::tools {

namespace {

struct EstimateOptions {
  ScenarioInputOptions input;  // --scenario, or --model with --gpus (tools/scenario_input.h)
  double headroom_gib = 0;
  bool json = false;
  bool max_micro_batch = false;
  bool max_seq_len = false;
  bool by_unit = false;
  bool advise = false;  // also when it fits
  std::string trace;  // Chrome/Perfetto trace file
  std::string plot;   // SVG: memory timeline + stream Gantt chart
  double train_tokens = 0;  // --train-tokens: the run's length in tokens (0: not asked)
  double gpu_hour_usd = 0;  // --gpu-hour-usd: the price of a GPU-hour, for the run's cost (0: not given)
  double deadline_days = 0;  // --deadline-days: search the fewest nodes that train --train-tokens by then (0: not asked)
};

void write_file(const std::string& path, const std::string& text, const std::string& what) {
  write_output_file(path, text, what);
  std::cerr << "wrote " << path << "\n";
}

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

void run_estimate(const EstimateOptions& o) {
  const ScenarioInput input = resolve_scenario_input(o.input);
  // Parsed once: the estimate and, when it advises, the advice's template share it.
  ParsedScenarioInput parsed = parse_scenario_input(input);
  const planner::Scenario& scenario = *parsed.scenario;
  const double headroom_bytes = o.headroom_gib * kGiB;
  if (o.max_micro_batch && o.max_seq_len)
    throw InputError::option("--max-seq-len", "searches one setting at a time: drop --max-micro-batch");
  if (o.deadline_days > 0 && (o.max_micro_batch || o.max_seq_len))
    throw InputError::option("--deadline-days", std::string("searches one setting at a time: drop ") +
                                                    (o.max_micro_batch ? "--max-micro-batch" : "--max-seq-len"));
  // The searches print their table only: an output asked beside one would be silently dropped
  // (the session-36 audit found --trace and --plot written by nobody, exit 0).
  if (o.deadline_days > 0 || o.max_micro_batch || o.max_seq_len) {
    const char* search = o.deadline_days > 0 ? "--deadline-days" : o.max_micro_batch ? "--max-micro-batch" : "--max-seq-len";
    const auto refuse = [&](bool asked, const char* option, const char* what) {
      if (asked)
        throw InputError::option(option, std::string(what) + " of one estimate; " + search +
                                             " prints its search only: estimate the answer it gives with " + option);
    };
    refuse(!o.trace.empty(), "--trace", "writes the trace");
    refuse(!o.plot.empty(), "--plot", "writes the plot");
    refuse(o.advise, "--advise", "prints the advice");
    refuse(o.by_unit, "--by-unit", "prints the units");
    refuse(o.deadline_days <= 0 && o.train_tokens > 0, "--train-tokens", "prices the run");
  }
  if (o.deadline_days > 0) {
    const sim::DeadlineSearch search = sim::find_nodes_for_deadline(
        *scenario_template(input, parsed), o.train_tokens, o.deadline_days * 86400.0, o.gpu_hour_usd, headroom_bytes);
    std::cout << (o.json ? deadline_search_json(search).dump(2) + "\n" : deadline_search_text(search, scenario));
    return;
  }
  if (o.max_micro_batch) {
    const sim::FitSearch search = sim::find_max_micro_batch(*scenario_template(input, parsed), headroom_bytes);
    std::cout << (o.json ? micro_batch_search_json(search).dump(2) + "\n" : micro_batch_search_text(search, scenario));
    return;
  }
  if (o.max_seq_len) {
    const sim::FitSearch search = sim::find_max_seq_len(*scenario_template(input, parsed), headroom_bytes);
    std::cout << (o.json ? seq_len_search_json(search).dump(2) + "\n" : seq_len_search_text(search, scenario));
    return;
  }
  sim::Estimate estimate = sim::estimate_step(scenario);
  for (const std::string& w : estimate_warnings(estimate, scenario)) std::cerr << "warning: " << w << "\n";
  if (!o.trace.empty()) write_file(o.trace, sim::chrome_trace(estimate, scenario.name).dump() + "\n", "the trace file");
  if (!o.plot.empty()) write_file(o.plot, sim::timeline_svg(estimate), "the plot");
  // Advice (sim/advice.h): when it does not fit, or asked for.
  std::optional<sim::Advice> advice;
  const double overage = estimate.device_peak_bytes() + headroom_bytes - estimate.gpu_memory_bytes;
  if (o.advise || overage > 0) advice = sim::advise(scenario_template(input, parsed), headroom_bytes, 5, 1, true, overage);
  const std::vector<sim::CollectiveChoice> collectives =
      sim::collective_choices(estimate.plan.schedule, planner::CostModel(scenario));
  const std::optional<sim::TrainingRun> run =
      o.train_tokens > 0
          ? std::optional<sim::TrainingRun>(sim::training_run(estimate, scenario, o.train_tokens, o.gpu_hour_usd))
          : std::nullopt;
  if (o.json) {
    nlohmann::json j = estimate_json(estimate, scenario, headroom_bytes);
    if (run) j["training_run"] = training_run_json(*run);
    j["collectives"] = sim::collective_choices_json(collectives);
    if (advice) j["advice"] = sim::advice_json(*advice);
    std::cout << j.dump(2) << "\n";
  } else {
    std::cout << estimate_text(estimate, scenario, headroom_bytes);
    if (run) std::cout << training_run_text(*run);
    std::cout << sim::collective_choices_text(collectives);
    if (o.by_unit) std::cout << "\n" << sim::unit_report_text(sim::unit_report(estimate));
    if (advice) std::cout << sim::advice_text(*advice);
  }
}

}  // namespace

void add_estimate_command(CLI::App& app) {
  auto options = std::make_shared<EstimateOptions>();
  CLI::App* cmd = app.add_subcommand("estimate", "Peak memory per GPU and step time of one training step");
  add_scenario_input_options(cmd, options->input);
  cmd->add_option("--headroom-gib", options->headroom_gib,
                  "Memory to keep free: fits when device peak + headroom <= GPU memory (default 0)")
      ->check(headroom_gib());
  cmd->add_flag("--json", options->json, "Print one JSON object for tools");
  cmd->add_flag("--max-micro-batch", options->max_micro_batch,
                "Find the largest micro-batch that fits in GPU memory (a stated global batch kept, else the gradient accumulation)");
  cmd->add_flag("--max-seq-len", options->max_seq_len,
                "Find the longest sequence (multiples of 128 tokens, up to the model's context) that fits in GPU "
                "memory (micro-batch and grad accum kept)");
  cmd->add_flag("--advise", options->advise,
                "Also when it fits: the cheapest changes that fit (printed anyway when it does not fit)");
  cmd->add_flag("--by-unit", options->by_unit,
                "Per FSDP unit: parameters, sharded/unsharded bytes, gradients, saved activations, collectives, time "
                "(--json always has units[])");
  cmd->add_option("--trace", options->trace, "Write a Chrome/Perfetto trace (open in ui.perfetto.dev or chrome://tracing)");
  cmd->add_option("--plot", options->plot, "Write an SVG of the memory timeline and the stream Gantt chart");
  cmd->add_option("--train-tokens", options->train_tokens,
                  "The whole run's length in tokens (e.g. 1e12): its optimizer steps, days and GPU-hours at this step time")
      ->check(positive_number());
  cmd->add_option("--gpu-hour-usd", options->gpu_hour_usd,
                  "With --train-tokens: the price of one GPU-hour (e.g. 2.5), for the run's cost and its cost per "
                  "million tokens")
      ->check(positive_number());
  cmd->add_option("--deadline-days", options->deadline_days,
                  "With --train-tokens: find the fewest nodes (this node's GPUs, micro-batch and the rest kept) that "
                  "train the tokens within this many days and fit in GPU memory; a stated global batch is kept")
      ->check(positive_number());
  cmd->callback([options] {
    // A price without a run to price meant nothing: said so, as the wrap search's options are.
    if (options->gpu_hour_usd > 0 && !(options->train_tokens > 0))
      throw InputError::option("--gpu-hour-usd", "prices the run --train-tokens states: add --train-tokens");
    if (options->deadline_days > 0 && !(options->train_tokens > 0))
      throw InputError::option("--deadline-days", "is the deadline of the run --train-tokens states: add --train-tokens");
    run_estimate(*options);
  });
}

}  // namespace fsdpsim::tools
