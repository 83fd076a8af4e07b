// How an estimate reads: a table for people, one JSON object for tools (the keys
// DESIGN.md's stable interface promises).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "planner/scenario.h"
#include "sim/estimate.h"
#include "sim/training_run.h"

namespace fsdpsim::tools {

std::string scenario_summary(const planner::Scenario& scenario, const planner::Plan& plan);
// headroom_bytes: memory to keep free; the step fits when device peak + headroom <= GPU memory.
// What the user should know about the estimate's inputs: tied weights a wrap request could not
// honour, NVMe swaps the cluster gives no bandwidth for, a strategy FSDP1 replaces on one rank
// (printed on stderr, and in --json).
std::vector<std::string> estimate_warnings(const sim::Estimate& estimate, const planner::Scenario& scenario);
std::string estimate_text(const sim::Estimate& estimate, const planner::Scenario& scenario, double headroom_bytes = 0);
nlohmann::json estimate_json(const sim::Estimate& estimate, const planner::Scenario& scenario, double headroom_bytes = 0);
// estimate --train-tokens: the whole run at this step time (sim/training_run.h).
std::string training_run_text(const sim::TrainingRun& run);
nlohmann::json training_run_json(const sim::TrainingRun& run);
// estimate --deadline-days: the fewest nodes that train --train-tokens by the deadline.
std::string deadline_search_text(const sim::DeadlineSearch& search, const planner::Scenario& scenario);
nlohmann::json deadline_search_json(const sim::DeadlineSearch& search);
std::string micro_batch_search_text(const sim::FitSearch& search, const planner::Scenario& scenario);
nlohmann::json micro_batch_search_json(const sim::FitSearch& search);
// --max-seq-len: the longest sequence that fits (sim::find_max_seq_len).
std::string seq_len_search_text(const sim::FitSearch& search, const planner::Scenario& scenario);
nlohmann::json seq_len_search_json(const sim::FitSearch& search);

}  // namespace fsdpsim::tools
