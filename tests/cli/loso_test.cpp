// `fsdpsim validate --leave-one-source-out` (issue 13, docs/accuracy.md) on a few published
// scenarios: the per-source report's structure, the in-sample figures equal plain `validate`'s,
// a refitted prediction equals `estimate --set` of the refitted value, and with nothing
// declared fitted the leave-one-source-out figures are the plain ones.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"

namespace fsdpsim::testing {
namespace {

namespace fs = std::filesystem;

std::string published(const std::string& stem) {
  return std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/published/" + stem + ".json";
}

// Two torchtitan rows on the H100 96GB and one IBM row on the H100 80GB: with the one declared
// constant (memory_bound_efficiency, every GPU), leaving torchtitan out leaves one training row.
const std::string kFiles = published("r217-torchtitan-llama3.1-8b-8xh100-96gb") + " " +
                           published("r218-torchtitan-llama3.1-8b-8xh100-96gb-compile") + " " +
                           published("r269-ibm-blog-llama2-7b-96xh100-hsdp-no-ac-mb2");

const nlohmann::json* fitted_named(const nlohmann::json& loso, const std::string& entry) {
  for (const auto& f : loso["fitted"])
    if (f["entry"] == entry) return &f;
  return nullptr;
}

// Plain `validate --json`'s tokens/s prediction per row id.
std::map<int, double> plain_predictions(const std::string& files) {
  const CommandResult r = run_cli("validate --json " + files);
  EXPECT_EQ(r.exit_code, 0) << r.err;
  std::map<int, double> out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  for (const auto& row : j["rows"])
    out[row["row_id"].get<int>()] = row["metrics"]["tokens_per_second_per_gpu"]["predicted"].get<double>();
  return out;
}

TEST(LeaveOneSourceOut, ReportsEverySourceWithItsRefits) {
  const CommandResult r = run_cli("validate --leave-one-source-out --json " + kFiles);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_TRUE(j.contains("rows")) << "the plain report is kept beside it";
  const nlohmann::json& loso = j["leave_one_source_out"];
  EXPECT_FALSE(loso["nothing_fitted"].get<bool>());

  std::set<std::string> sources;
  for (const auto& [source, fold] : loso["by_source"].items()) {
    sources.insert(source);
    for (const char* part : {"leave_one_source_out", "leave_one_source_out_dev", "in_sample"})
      for (const char* key : {"rows", "mean_abs_error", "mean_signed_error", "within_bound"})
        EXPECT_TRUE(fold[part].contains(key)) << source << " " << part << " " << key;
    EXPECT_EQ(fold["refits"].size(), loso["fitted"].size()) << source;
  }
  EXPECT_EQ(sources, (std::set<std::string>{"ibm", "torchtitan"}));

  // One constant is declared, for every GPU (calibration.json "fitted").
  const nlohmann::json* shared = fitted_named(loso, "defaults");
  ASSERT_TRUE(shared);
  ASSERT_EQ(loso["fitted"].size(), 1u);
  const std::string label = "memory_bound_efficiency@defaults";
  // Left out torchtitan: only row 269 (IBM's) trains, fewer than min_rows 2: the value stays
  // the shipped one, marked unfitted (a "defaults" entry has nothing else to fall back to).
  const auto& tt = loso["by_source"]["torchtitan"]["refits"][label];
  EXPECT_EQ(tt["rows"], 1);
  EXPECT_FALSE(tt["fitted"].get<bool>());
  // Left out IBM: both torchtitan rows train it.
  const auto& ibm = loso["by_source"]["ibm"]["refits"][label];
  EXPECT_EQ(ibm["rows"], 2);
  EXPECT_TRUE(ibm["fitted"].get<bool>());
  // Not every declared row was loaded: the shipped fit cannot be re-checked.
  EXPECT_GT((*shared)["declared_rows_missing"].get<int>(), 0);
  EXPECT_FALSE(shared->contains("reproduces_shipped_value"));

  // In-sample figures are plain validate's; row 269 left out is `estimate` with the refitted value.
  const std::map<int, double> plain = plain_predictions(kFiles);
  ASSERT_EQ(loso["rows"].size(), 3u);
  for (const auto& row : loso["rows"]) {
    const int id = row["row_id"].get<int>();
    EXPECT_DOUBLE_EQ(row["in_sample_predicted"].get<double>(), plain.at(id)) << id;
    if (id != 269) continue;
    const CommandResult e = run_cli("estimate --json -s " + published("r269-ibm-blog-llama2-7b-96xh100-hsdp-no-ac-mb2") +
                                    " --set calibration.memory_bound_efficiency=" + ibm["value"].dump());
    ASSERT_EQ(e.exit_code, 0) << e.err;
    const double expected = nlohmann::json::parse(e.out)["throughput"]["tokens_per_second_per_gpu"].get<double>();
    EXPECT_DOUBLE_EQ(row["predicted"].get<double>(), expected);
  }
}

TEST(LeaveOneSourceOut, TextTableHasARowPerSourceAndTheDeclarations) {
  const CommandResult r = run_cli("validate --leave-one-source-out " + kFiles);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  for (const char* line : {"\nibm ", "\ntorchtitan ", "\ndev rows ", "\nall ",
                           "\nfitted: memory_bound_efficiency@defaults", "declared rows not among the files"})
    EXPECT_NE(r.out.find(line), std::string::npos) << line << "\n" << r.out;
  // Left out torchtitan, one training row remains: the shipped value, marked unfitted.
  nlohmann::json calibration;
  std::ifstream(std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/hardware/calibration.json") >> calibration;
  char shipped[32];
  std::snprintf(shipped, sizeof shipped, "%.2f", calibration["defaults"]["memory_bound_efficiency"].get<double>());
  EXPECT_NE(r.out.find(std::string("memory_bound_efficiency@defaults ") + shipped + " (unfitted)"), std::string::npos) << r.out;
}

// --check exits 1 exactly when the JSON lists violations, and prints each.
TEST(LeaveOneSourceOut, CheckExitsOneOnViolations) {
  const nlohmann::json j = nlohmann::json::parse(run_cli("validate --leave-one-source-out --json " + kFiles).out);
  const auto& violations = j["leave_one_source_out"]["violations"];
  const CommandResult r = run_cli("validate --leave-one-source-out --check " + kFiles);
  EXPECT_EQ(r.exit_code, violations.empty() ? 0 : 1) << r.out;
  for (const auto& v : violations) EXPECT_NE(r.out.find(v.get<std::string>()), std::string::npos) << v;
}

// A catalog root whose calibration declares nothing fitted (FSDPSIM_ROOT, planner/scenario.h).
class NothingFitted : public ::testing::Test {
 protected:
  void SetUp() override {
    const fs::path source = FSDPSIM_SOURCE_ROOT;
    root_ = fs::temp_directory_path() / ("fsdpsim_loso_root_" + std::to_string(::getpid()));
    fs::create_directories(root_ / "scenarios/hardware");
    fs::create_directory_symlink(source / "models", root_ / "models");
    fs::create_directory_symlink(source / "scenarios/clusters", root_ / "scenarios/clusters");
    fs::copy_file(source / "scenarios/hardware/gpus.json", root_ / "scenarios/hardware/gpus.json");
    nlohmann::json calibration;
    std::ifstream(source / "scenarios/hardware/calibration.json") >> calibration;
    calibration["fitted"] = nlohmann::json::array();
    std::ofstream(root_ / "scenarios/hardware/calibration.json") << calibration.dump(2);
    ::setenv("FSDPSIM_ROOT", root_.c_str(), 1);
  }
  void TearDown() override {
    ::unsetenv("FSDPSIM_ROOT");
    fs::remove_all(root_);
  }
  fs::path root_;
};

TEST_F(NothingFitted, LeaveOneSourceOutEqualsPlainValidate) {
  const std::string files = kFiles + " " + published("r255-kempnerforge-7b-2xh200-fsdp-compile");
  const CommandResult r = run_cli("validate --leave-one-source-out --json " + files);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json loso = nlohmann::json::parse(r.out)["leave_one_source_out"];
  EXPECT_TRUE(loso["nothing_fitted"].get<bool>());
  EXPECT_TRUE(loso["fitted"].empty());
  const std::map<int, double> plain = plain_predictions(files);
  ASSERT_EQ(loso["rows"].size(), 4u);
  for (const auto& row : loso["rows"]) {
    EXPECT_DOUBLE_EQ(row["predicted"].get<double>(), plain.at(row["row_id"].get<int>())) << row.dump();
    EXPECT_DOUBLE_EQ(row["in_sample_predicted"].get<double>(), row["predicted"].get<double>());
  }
  for (const char* part : {"all", "dev", "holdout"})
    EXPECT_EQ(loso["overall"]["leave_one_source_out"][part], loso["overall"]["in_sample"][part]) << part;
  const CommandResult text = run_cli("validate --leave-one-source-out " + files);
  EXPECT_NE(text.out.find("nothing is declared fitted"), std::string::npos) << text.out;
}

}  // namespace
}  // namespace fsdpsim::testing
