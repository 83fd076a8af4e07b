// estimate --train-tokens: the whole run's optimizer steps, time and GPU-hours at the estimated
// step time (sim/training_run.h TrainingRun), worked by hand on the quick-start scenario
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


// --deadline-days: the fewest nodes that train the tokens by the deadline. Checked against
// independent estimates of the answer and of the next smaller allowed node count, each at its own
// --set cluster.nodes: the answer meets the deadline, one fewer allowed count does not. The
// quick-start scenario at a stated global batch of 1,024 sequences and micro-batch 2 allows the
// node counts whose 16 sequences a micro-step divide 1,024: 1, 2, 4, ..., 64; each trial keeps
// the batch, its accumulation 1,024 / (16 n).
TEST(DeadlineSearch, TheFewestNodesMeetTheDeadlineAndTheNextFewerDoNot) {
  const std::string scenario = "estimate --scenario " + quick_start_scenario() + " --set training.global_batch=1024";
  const nlohmann::json one_node = run_cli_json(scenario + " --train-tokens 1e11");
  // A deadline between the 4- and 8-node runs' days (each about half the one before).
  const double one_node_days = one_node["training_run"]["seconds"].get<double>() / 86400.0;
  const double deadline = one_node_days / 6;
  char args[128];
  std::snprintf(args, sizeof args, " --train-tokens 1e11 --deadline-days %.17g", deadline);
  const nlohmann::json j = run_cli_json(scenario + args);
  EXPECT_TRUE(j["global_batch_kept"].get<bool>());
  EXPECT_EQ(j["max_nodes"].get<int>(), 64);  // 1,024 sequences / (2 a micro-step x 8 GPUs)
  const int answer = j["fewest_nodes"].get<int>();
  EXPECT_EQ(answer, 8);
  for (const nlohmann::json& t : j["tried"]) {
    const int nodes = t["nodes"].get<int>();
    EXPECT_EQ(64 % nodes, 0) << nodes;  // only the allowed counts
    EXPECT_EQ(t["global_batch"].get<int>(), 1024);
    EXPECT_EQ(t["grad_accum"].get<int>(), 1024 / (16 * nodes));
    // days = ceil(tokens / (1,024 x 8,192)) steps x the step, by hand: 11,921 steps.
    EXPECT_EQ(t["training_run"]["steps"].get<double>(), 11921.0);
    EXPECT_DOUBLE_EQ(t["training_run"]["seconds"].get<double>(), 11921.0 * t["training_run"]["step_seconds"].get<double>());
    EXPECT_EQ(t["meets"].get<bool>(), t["fits"].get<bool>() && t["training_run"]["seconds"].get<double>() <= deadline * 86400);
  }
  for (const int nodes : {answer, answer / 2}) {
    const nlohmann::json alone =
        run_cli_json(scenario + " --set cluster.nodes=" + std::to_string(nodes) + " --train-tokens 1e11");
    const double days = alone["training_run"]["seconds"].get<double>() / 86400.0;
    if (nodes == answer) EXPECT_LE(days, deadline) << nodes;
    else EXPECT_GT(days, deadline) << nodes;
    EXPECT_TRUE(alone["memory"]["fits"].get<bool>()) << nodes;
  }
  const CommandResult text = run_cli(scenario + args);
  EXPECT_NE(text.out.find("fewest nodes: 8 (64 GPUs)"), std::string::npos) << text.out;
  // A deadline between the 2- and 4-node runs: the doubling meets first at 8 nodes (it tries 1,
  // 2, then the fourth allowed count), the bisection comes down to 4.
  std::snprintf(args, sizeof args, " --train-tokens 1e11 --deadline-days %.17g", one_node_days / 3);
  EXPECT_EQ(run_cli_json(scenario + args)["fewest_nodes"].get<int>(), 4);
}

// A batch that is not stated follows the world (the micro-batch and accumulation kept, as the
// one-line form derives it); a run that cannot fit however many nodes stops the doubling and
// says why; the deadline without tokens, or beside another search, is refused.
TEST(DeadlineSearch, ADerivedBatchFollowsTheGpusAndHopelessSearchesStop) {
  const nlohmann::json grows =
      run_cli_json("estimate --model llama3.2-1b --gpus 8xH100 --seq-len 4096 --train-tokens 1e11 --deadline-days 3");
  EXPECT_FALSE(grows["global_batch_kept"].get<bool>());
  ASSERT_GT(grows["fewest_nodes"].get<int>(), 0);
  for (const nlohmann::json& t : grows["tried"]) EXPECT_EQ(t["global_batch"].get<int>(), t["gpus"].get<int>());  // mb 1, accum 1
  // Llama-3.1-70B at 8,192 tokens without checkpointing: about 260 GiB of activations a GPU.
  const nlohmann::json hopeless =
      run_cli_json("estimate --model llama3.1-70b --gpus 8xH100 --seq-len 8192 --train-tokens 1e12 --deadline-days 60");
  EXPECT_EQ(hopeless["fewest_nodes"].get<int>(), 0);
  EXPECT_NE(hopeless["stopped"].get<std::string>().find("stopped lowering the device peak"), std::string::npos);
  EXPECT_LT(hopeless["tried"].size(), 15u);  // not every doubling up to 131,072 GPUs
  for (const nlohmann::json& t : hopeless["tried"]) EXPECT_FALSE(t["fits"].get<bool>());
  CommandResult r = run_cli("estimate --scenario " + quick_start_scenario() + " --deadline-days 30");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--deadline-days: is the deadline of the run --train-tokens states"), std::string::npos) << r.err;
  r = run_cli("estimate --scenario " + quick_start_scenario() + " --train-tokens 1e9 --deadline-days 30 --max-micro-batch");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--deadline-days: searches one setting at a time"), std::string::npos) << r.err;
  // The quick start's own batch (16 sequences) cannot spread past its node: said so.
  r = run_cli("estimate --scenario " + quick_start_scenario() + " --train-tokens 1e12 --deadline-days 1");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("spreads over 8 GPUs at most"), std::string::npos) << r.out;
}

// A search prints its table only, so an output asked beside it is refused instead of dropped
// (exit 0 with no trace file written, the session-36 audit), naming the option.
TEST(SearchOptions, OutputsOfOneEstimateAreRefusedBesideASearch) {
  const std::string base = "estimate --scenario " + quick_start_scenario();
  const std::string trace = ::testing::TempDir() + "search-trace.json";
  std::remove(trace.c_str());
  struct Case {
    std::string args, message;
  };
  for (const Case& c : {Case{" --max-seq-len --trace " + trace, "--trace: writes the trace of one estimate; --max-seq-len prints its search only"},
                        Case{" --max-micro-batch --plot " + trace, "--plot: writes the plot of one estimate; --max-micro-batch"},
                        Case{" --max-micro-batch --advise", "--advise: prints the advice of one estimate"},
                        Case{" --max-seq-len --by-unit", "--by-unit: prints the units of one estimate"},
                        Case{" --max-micro-batch --train-tokens 1e12", "--train-tokens: prices the run of one estimate"},
                        Case{" --train-tokens 1e12 --deadline-days 30 --by-unit", "--by-unit: prints the units of one estimate; --deadline-days"}}) {
    const CommandResult r = run_cli(base + c.args);
    EXPECT_EQ(r.exit_code, 2) << c.args;
    EXPECT_NE(r.err.find(c.message), std::string::npos) << c.args << "\n" << r.err;
  }
  std::FILE* f = std::fopen(trace.c_str(), "r");
  EXPECT_EQ(f, nullptr);
  if (f) std::fclose(f);
}

}  // namespace
}  // namespace fsdpsim::testing
