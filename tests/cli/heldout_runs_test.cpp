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

TEST(HeldoutRuns, EveryRowIsPredictedAndTheRunsThatFitStayFitting) {
  const std::string root = FSDPSIM_SOURCE_ROOT;
  const std::map<std::string, std::string> planned_not_to_fit = {
      {"vl-llama3-8b-1xa100-s2048-mb8", "FSDP1 NO_SHARD on one A100 with HF's fp32-upcast loss; a doubtful source"},
      {"vl-llama3-8b-1xa100-s4096-mb4", "as above"},
      {"vl-llama3-8b-1xa100-s8192-mb2", "as above"},
      {"tinyllama-1.1b-16xa100-40gb-mb8", "39.7 GiB on a 40 GB part: TinyLlama's fused kernels are not stated"}};
  std::string files;
  int scenarios = 0;
  for (const auto& entry : std::filesystem::directory_iterator(root + "/scenarios/heldout"))
    if (entry.path().extension() == ".json") files += " " + entry.path().string(), ++scenarios;
  ASSERT_EQ(scenarios, 18);
  // The CSV holds the same 18 runs.
  std::ifstream csv(root + "/tests/data/validation/heldout_2026_12_runs.csv");
  int lines = 0;
  for (std::string line; std::getline(csv, line);) lines += line.empty() ? 0 : 1;
  EXPECT_EQ(lines, 1 + 18);

  const CommandResult r = run_cli("validate" + files + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
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

}  // namespace
}  // namespace fsdpsim::testing
