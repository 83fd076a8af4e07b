// Public FSDP runs collected by session 38 that nothing here was built or fitted on
// (tests/data/validation/heldout_2026_12_runs.csv, one scenario per row in scenarios/heldout/;
// docs/accuracy.md, "GPUs without a measured table"). A judge only: these tests keep every row
// predictable, and every run that fits its GPUs in the plan fitting, since each of them ran.
// Four ran but are planned not to fit, each named with why (docs/accuracy.md): a planner that
// starts to fit one of them should say so here.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"

namespace fsdpsim::testing {
namespace {

// `validate --json` of every scenario in `dir` (not its subfolders), which must hold `expected`
// of them; each row is there.
nlohmann::json validate_folder(const std::string& dir, int expected) {
  std::string files;
  int scenarios = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir))
    if (entry.path().extension() == ".json") files += " " + entry.path().string(), ++scenarios;
  EXPECT_EQ(scenarios, expected) << dir;
  const CommandResult r = run_cli("validate" + files + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["rows"].size(), static_cast<std::size_t>(expected));
  return j;
}

TEST(HeldoutRuns, EveryRowIsPredictedAndTheRunsThatFitStayFitting) {
  const std::string root = FSDPSIM_SOURCE_ROOT;
  const std::map<std::string, std::string> planned_not_to_fit = {
      {"vl-llama3-8b-1xa100-s2048-mb8", "FSDP1 NO_SHARD on one A100 with HF's fp32-upcast loss; a doubtful source"},
      {"vl-llama3-8b-1xa100-s4096-mb4", "as above"},
      {"vl-llama3-8b-1xa100-s8192-mb2", "as above"},
      {"tinyllama-1.1b-16xa100-40gb-mb8", "39.7 GiB on a 40 GB part: TinyLlama's fused kernels are not stated"}};
  // The CSV holds the same 18 runs as the folder.
  std::ifstream csv(root + "/tests/data/validation/heldout_2026_12_runs.csv");
  int lines = 0;
  for (std::string line; std::getline(csv, line);) lines += line.empty() ? 0 : 1;
  EXPECT_EQ(lines, 1 + 18);

  const nlohmann::json j = validate_folder(root + "/scenarios/heldout", 18);
  ASSERT_EQ(j["rows"].size(), 18u);
  std::set<std::string> not_fitting;
  for (const auto& row : j["rows"]) {
    EXPECT_FALSE(row.contains("error")) << row.dump();
    ASSERT_TRUE(row["metrics"].contains("tokens_per_second_per_gpu")) << row["name"];
    EXPECT_TRUE(row["metrics"]["tokens_per_second_per_gpu"]["published"].get<double>() > 0) << row["name"];
    if (!row.value("predicted_fits", false)) not_fitting.insert(row["name"].get<std::string>());
  }
  std::set<std::string> named;
  for (const auto& [name, why] : planned_not_to_fit) named.insert(name);
  EXPECT_EQ(not_fitting, named) << "a run that fit its GPUs is planned not to fit, or a named one fits now";
}

// The third judge (session 39): public runs of Hugging Face and torchtune code, with and without
// Liger-Kernel (scenarios/heldout/judge3/; tests/data/validation/heldout_2026_12_judge3_runs.csv
// for the 12 rows with figures, ..._judge3_fit.csv for the 15 runs whose source says only whether
// they ran or ran out of memory; docs/accuracy.md, "A third judge"). Every row is predicted, and
// each run is planned to fit exactly when it ran, but one named: the planner that changes a
// verdict should say so here. The four torchtune baselines judged the chunked_output loss before
// it was written (their first stand-in, bf16, planned the compiled batch-256 run not to fit).
TEST(HeldoutRuns, TheThirdJudgesRowsArePredictedAndItsRunsFitAsTheyDid) {
  const std::string root = FSDPSIM_SOURCE_ROOT;
  const std::string dir = root + "/scenarios/heldout/judge3";
  const nlohmann::json j = validate_folder(dir, 12);
  ASSERT_EQ(j["rows"].size(), 12u);
  for (const auto& row : j["rows"]) {
    EXPECT_FALSE(row.contains("error")) << row.dump();
    EXPECT_FALSE(row["metrics"].empty()) << row["name"];
  }

  const std::map<std::string, std::string> verdict_wrong = {
      {"ligerreadme-llama3-8b-8xa100-fsdp1-hf-s4096",
       "ran out of memory ('HuggingFace models start to OOM at 4K'); planned to fit with 34 MiB to spare, warned as near capacity"}};
  std::ifstream csv(root + "/tests/data/validation/heldout_2026_12_judge3_fit.csv");
  std::string line;
  std::getline(csv, line);  // header
  int checked = 0;
  while (std::getline(csv, line)) {
    if (line.empty()) continue;
    const std::string name = line.substr(0, line.find(','));
    const std::string rest = line.substr(name.size() + 1);
    const std::string outcome = rest.substr(0, rest.find(','));
    ASSERT_TRUE(outcome == "ran" || outcome == "out_of_memory") << line;
    const CommandResult e = run_cli("estimate --scenario " + dir + "/fit/" + name + ".json --json");
    ASSERT_EQ(e.exit_code, 0) << name << ": " << e.err;
    const bool fits = nlohmann::json::parse(e.out)["memory"]["fits"].get<bool>();
    const bool ran = outcome == "ran";
    if (verdict_wrong.count(name)) EXPECT_NE(fits, ran) << name << " is right now: " << verdict_wrong.at(name);
    else EXPECT_EQ(fits, ran) << name << " " << outcome;
    ++checked;
  }
  EXPECT_EQ(checked, 15);
}

// The fourth judge (session 39): public Mixture-of-Experts runs (NVIDIA NeMo AutoModel's table
// and its Transformers-v5 blog benchmark, Lambda's torchtitan DeepSeek-V3 16B notes; scenarios in
// scenarios/heldout/judge4/, tests/data/validation/heldout_2026_12_judge4_moe_runs.csv,
// docs/accuracy.md "A fourth judge"). Far from the bounds (throughput 33.9% mean |error| over the
// 5 rows with a throughput), kept as the measure of what MoE needs: every row predicted, the three
// runs Lambda reports out of memory planned not to fit, and the three that ran but are planned
// not to fit named.
TEST(HeldoutRuns, TheFourthJudgesMoeRunsArePredicted) {
  const std::string dir = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/heldout/judge4";
  const nlohmann::json j = validate_folder(dir, 12);
  ASSERT_EQ(j["rows"].size(), 12u);
  const std::set<std::string> ran_but_planned_not_to_fit = {
      "j403-nemo-gpt-oss-120b-64xh100-ep64-gbs512",             // NeMo's DeepEP path keeps less on the experts' way
      "j408-lambda-dsv3-16b-8xb200-ep1-noac-compile-lbs6",      // torch.compile's fusions in the blocks, not credited
      "j409-lambda-dsv3-16b-8xb200-ep1-noac-compile-lbs4-s6144"};  // as above: reserved +13.5%
  int out_of_memory = 0;
  for (const auto& row : j["rows"]) {
    ASSERT_FALSE(row.contains("error")) << row.dump();
    const std::string name = row["name"];
    if (row.value("published_oom", false)) {
      ++out_of_memory;
      EXPECT_FALSE(row["predicted_fits"].get<bool>()) << name << " ran out of memory";
    } else {
      EXPECT_EQ(row["predicted_fits"].get<bool>(), ran_but_planned_not_to_fit.count(name) == 0) << name;
    }
  }
  EXPECT_EQ(out_of_memory, 3);
}

}  // namespace
}  // namespace fsdpsim::testing
