// `fsdpsim verify` on the host backend: its prediction is what `estimate` predicts (the cost
// model timed by the analytic engine), and the measured peak memory is the planned one.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"

namespace fsdpsim::testing {
namespace {

const std::string kScenario = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json";
// GPT-2 small keeps the host run short (its compute waits are played 1000x faster).
const std::string kArgs = "--scenario " + kScenario + " --set model=models/gpt2.json";

TEST(VerifyCommand, PredictsWhatEstimatePredictsAndMeasuresThePlannedPeak) {
  const CommandResult est = run_cli("estimate " + kArgs + " --json");
  ASSERT_EQ(est.exit_code, 0) << est.err;
  const CommandResult ver = run_cli("verify " + kArgs + " --time-scale 0.001 --json");
  ASSERT_EQ(ver.exit_code, 0) << ver.err;
  const nlohmann::json e = nlohmann::json::parse(est.out);
  const nlohmann::json v = nlohmann::json::parse(ver.out);
  EXPECT_NE(v["prediction_source"].get<std::string>().find("analytic engine"), std::string::npos);
  EXPECT_DOUBLE_EQ(v["step"]["predicted"].get<double>(), e["time"]["step_seconds"].get<double>());
  // Allocated memory is a property of the schedule's event order: the host backend's tracking
  // allocator must see exactly the planner's peak.
  EXPECT_EQ(v["memory"]["peak_allocated"]["measured"].get<double>(),
            e["memory"]["peak_allocated_bytes"].get<double>());
  EXPECT_EQ(v["memory"]["peak_allocated"]["predicted"].get<double>(),
            e["memory"]["peak_allocated_bytes"].get<double>());
}

// Played 1000x faster than modelled, GPT-2 small's ops last microseconds of wall time, far less
// than this host's thread wake-ups and collective hand-offs: verify says the errors are the
// host's (issue 18: `verify --time-scale 0.01` reported -97.7% with no word of why).
TEST(VerifyCommand, WarnsWhenHostOverheadDominates) {
  const CommandResult ver = run_cli("verify " + kArgs + " --time-scale 0.001 --json");
  ASSERT_EQ(ver.exit_code, 0) << ver.err;
  const nlohmann::json v = nlohmann::json::parse(ver.out);
  ASSERT_EQ(v["warnings"].size(), 1u) << v.dump(2);
  EXPECT_NE(v["warnings"][0].get<std::string>().find("host overhead dominates"), std::string::npos);
  // The rule, from the report's own rows: measured - predicted >= half the predicted, summed.
  double predicted = 0, measured = 0;
  for (const auto& row : v["op_classes"]) {
    predicted += row["predicted"].get<double>();
    measured += row["measured"].get<double>();
  }
  EXPECT_GE(measured - predicted, 0.5 * predicted);
  const CommandResult text = run_cli("verify " + kArgs + " --time-scale 0.001");
  EXPECT_NE(text.out.find("WARNING: host overhead dominates"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("--time-scale 0.001"), std::string::npos) << text.out;
}

}  // namespace
}  // namespace fsdpsim::testing
