// estimate --train-tokens: the whole run's optimizer steps, time and GPU-hours at the estimated
// step time (tools/report.h TrainingRun), worked by hand on the quick-start scenario
// (scenarios/llama3.1-8b-8xh100.json: 8 GPUs, global batch 16 x 8,192 tokens).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cstdio>

#include "cli_helpers.h"

namespace fsdpsim::testing {
namespace {

TEST(TrainingRun, StepsDaysAndGpuHoursByHand) {
  const nlohmann::json j = run_cli_json("estimate --scenario " + quick_start_scenario() + " --train-tokens 1e9");
  const nlohmann::json& r = j["training_run"];
  // 16 sequences x 8,192 tokens = 131,072 tokens a step; 1e9 / 131,072 = 7,629.39: 7,630 steps,
  // the last one whole.
  EXPECT_EQ(r["tokens_per_step"].get<double>(), 131072.0);
  EXPECT_EQ(r["steps"].get<double>(), 7630.0);
  const double step = j["time"]["step_seconds"].get<double>();
  EXPECT_EQ(r["step_seconds"].get<double>(), step);
  EXPECT_DOUBLE_EQ(r["seconds"].get<double>(), 7630 * step);
  EXPECT_EQ(r["gpus"].get<int>(), 8);
  EXPECT_DOUBLE_EQ(r["gpu_hours"].get<double>(), 7630 * step * 8 / 3600);
  // Exactly one step's worth of tokens is one step; one token more is two.
  EXPECT_EQ(run_cli_json("estimate --scenario " + quick_start_scenario() + " --train-tokens 131072")["training_run"]["steps"],
            1.0);
  EXPECT_EQ(run_cli_json("estimate --scenario " + quick_start_scenario() + " --train-tokens 131073")["training_run"]["steps"],
            2.0);
  const CommandResult text = run_cli("estimate --scenario " + quick_start_scenario() + " --train-tokens 1e9");
  EXPECT_NE(text.out.find("7630 optimizer steps of 131072 tokens"), std::string::npos) << text.out;
  // Without the option, no training_run.
  EXPECT_FALSE(run_cli_json("estimate --scenario " + quick_start_scenario()).contains("training_run"));
}

// --gpu-hour-usd: the run's cost, GPU-hours x the price (7,630 steps x step x 8 GPUs / 3,600 x
// $2.50), and per million tokens (that / 1e9 x 1e6). A price without --train-tokens is refused.
TEST(TrainingRun, TheCostIsGpuHoursTimesThePrice) {
  const std::string base = "estimate --scenario " + quick_start_scenario() + " --train-tokens 1e9";
  const nlohmann::json j = run_cli_json(base + " --gpu-hour-usd 2.5");
  const nlohmann::json& r = j["training_run"];
  const double step = j["time"]["step_seconds"].get<double>();
  EXPECT_DOUBLE_EQ(r["usd_per_gpu_hour"].get<double>(), 2.5);
  EXPECT_DOUBLE_EQ(r["usd"].get<double>(), 7630 * step * 8 / 3600 * 2.5);
  const CommandResult text = run_cli(base + " --gpu-hour-usd 2.5");
  char cost[64];
  std::snprintf(cost, sizeof cost, "cost: $%.0f at $2.50 a GPU-hour", 7630 * step * 8 / 3600 * 2.5);
  EXPECT_NE(text.out.find(cost), std::string::npos) << cost << "\n" << text.out;
  EXPECT_FALSE(run_cli_json(base)["training_run"].contains("usd"));  // no price, no cost
  const CommandResult alone = run_cli("estimate --scenario " + quick_start_scenario() + " --gpu-hour-usd 2.5");
  EXPECT_EQ(alone.exit_code, 2) << alone.err;
  EXPECT_NE(alone.err.find("--gpu-hour-usd: prices the run --train-tokens states"), std::string::npos) << alone.err;
  for (const char* bad : {"0", "-1", "nan"}) {
    const CommandResult r = run_cli(base + " --gpu-hour-usd " + bad);
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_NE(r.err.find("--gpu-hour-usd"), std::string::npos) << bad << ": " << r.err;
  }
}

TEST(TrainingRun, ALengthThatIsNotAPositiveNumberIsRefused) {
  for (const char* bad : {"0", "-5", "nan", "inf", "many"}) {
    const CommandResult r = run_cli("estimate --scenario " + quick_start_scenario() + " --train-tokens " + bad);
    EXPECT_NE(r.exit_code, 0) << bad;
    EXPECT_NE(r.err.find("--train-tokens"), std::string::npos) << bad << ": " << r.err;
  }
}

}  // namespace
}  // namespace fsdpsim::testing
