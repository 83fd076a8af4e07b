// How an estimate reads: a table for people, one JSON object for tools (the keys
// DESIGN.md's stable interface promises).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "planner/scenario.h"
#include "sim/estimate.h"

namespace fsdpsim::tools {

std::string scenario_summary(const planner::Scenario& scenario, const planner::Plan& plan);
// headroom_bytes: memory to keep free; the step fits when device peak + headroom <= GPU memory.
// What the user should know about the estimate's inputs: tied weights a wrap request could not
// honour, NVMe swaps the cluster gives no bandwidth for, a strategy FSDP1 replaces on one rank
// (printed on stderr, and in --json).
std::vector<std::string> estimate_warnings(const sim::Estimate& estimate, const planner::Scenario& scenario);
std::string estimate_text(const sim::Estimate& estimate, const planner::Scenario& scenario, double headroom_bytes = 0);
nlohmann::json estimate_json(const sim::Estimate& estimate, const planner::Scenario& scenario, double headroom_bytes = 0);
// estimate --train-tokens: the whole run at this step time. Optimizer steps only: checkpoint
// saves, evaluation, data loading stalls and restarts are not in it.
struct TrainingRun {
  double tokens = 0;           // asked for
  double tokens_per_step = 0;  // global_batch x seq_len
  double steps = 0;            // ceil(tokens / tokens_per_step): the last step runs whole
  double step_seconds = 0;
  double seconds = 0;  // steps x step_seconds
  int gpus = 0;
  double gpu_hours = 0;  // seconds x gpus / 3600
  double usd_per_gpu_hour = 0;  // --gpu-hour-usd (0: not given)
  double usd = 0;               // gpu_hours x usd_per_gpu_hour
};
TrainingRun training_run(const sim::Estimate& estimate, const planner::Scenario& scenario, double tokens,
                         double usd_per_gpu_hour = 0);
std::string training_run_text(const TrainingRun& run);
nlohmann::json training_run_json(const TrainingRun& run);
std::string micro_batch_search_text(const sim::FitSearch& search, const planner::Scenario& scenario);
nlohmann::json micro_batch_search_json(const sim::FitSearch& search);
// --max-seq-len: the longest sequence that fits (sim::find_max_seq_len).
std::string seq_len_search_text(const sim::FitSearch& search, const planner::Scenario& scenario);
nlohmann::json seq_len_search_json(const sim::FitSearch& search);

}  // namespace fsdpsim::tools
