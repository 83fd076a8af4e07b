// Accuracy against published runs (issue 8, docs/accuracy.md): `fsdpsim validate --check` on
// every scenario of scenarios/published must meet the bounds: throughput within 15% of the
// published figure for at least 80% of the rows with a mean absolute error under 10%, every
// peak-memory figure within 10% (allocated vs allocated, reserved vs reserved), and the runs
// published as out of memory predicted not to fit. The published figures live in the
// scenarios (with their citations), not here; this test only runs the check.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "models/json_input.h"

namespace fsdpsim::testing {
namespace {

TEST(Accuracy, PublishedRunsMeetTheBounds) {
  const CommandResult r = run_cli("validate --check");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("accuracy bounds: met"), std::string::npos) << r.out;
}

// Issue 13's bounds, with the one constant fitted to end-to-end rows (memory_bound_efficiency)
// refitted without each source: on the dev rows, mean |tokens/s error| <= 7%, >= 85% within
// 15%, no source's mean signed error beyond +-8% (sim/validation.h LosoBounds).
TEST(Accuracy, LeaveOneSourceOutMeetsTheBounds) {
  const CommandResult r = run_cli("validate --leave-one-source-out --check");
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("leave-one-source-out bounds: met"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(reproduces the shipped value)"), std::string::npos) << r.out;
}

// The same through --json: no violation, and every row was estimated.
TEST(Accuracy, JsonReportsNoViolationAndEveryRow) {
  const CommandResult r = run_cli("validate --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_TRUE(j["violations"].empty()) << j["violations"].dump(2);
  ASSERT_GE(j["rows"].size(), 30u);
  for (const auto& row : j["rows"]) EXPECT_FALSE(row.contains("error")) << row.dump();
  EXPECT_GE(j["summary"]["tokens_per_second_per_gpu"]["holdout"]["rows"].get<int>(), 8);
}

// A row added after ../shared/validation/public_runs.csv has no row_id (the MoE rows): the
// tables and the exclusion note name it by its file's prefix, not as "row 0" (which two such
// rows would share).
TEST(Accuracy, RowsWithoutARowIdAreNamedByTheirFile) {
  const CommandResult r = run_cli(
      "validate scenarios/published/m01-nous-torchtitan-qwen3-30b-a3b-8xb200-ep8-alltoall.json "
      "scenarios/published/m02-nous-torchtitan-qwen3-30b-a3b-8xb200-ep8-deepep.json");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("\nm01* "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\nm02* "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("excluded: row m02 (peak_memory_bytes)"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("row 0 "), std::string::npos) << r.out;
}

// A row whose source publishes an MFU alone (the session-39 MoE judge's torchtitan PR notes): MFU
// is not scored (sources count its FLOPs differently), but the row is shown with both figures and
// the reason, where it used to print nothing at all; the JSON carries the published figure.
TEST(Accuracy, AnMfuAloneIsShownNotScored) {
  nlohmann::json s = load_json_file(std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json");
  s["published"] = {{"source", "a source that states an MFU only"}, {"mfu", 0.4}};
  const std::string file = write_temp("fsdpsim_mfu_only.json", s.dump());
  const CommandResult r = run_cli("validate " + file);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("40.0%"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not scored (FLOP conventions differ)"), std::string::npos) << r.out;
  const nlohmann::json j = run_cli_json("validate " + file + " --json");
  EXPECT_EQ(j["rows"][0]["published_mfu"], 0.4);
  EXPECT_FALSE(j["rows"][0].contains("metrics"));
}

}  // namespace
}  // namespace fsdpsim::testing
