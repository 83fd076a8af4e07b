// Bad input ends with one `error:` line naming the file and the JSON path, a non-zero
// exit, and no crash.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"

namespace fsdpsim::testing {
namespace {

nlohmann::json good_scenario() {
  return nlohmann::json::parse(R"({
    "model": "models/gpt2.json",
    "cluster": "scenarios/clusters/dgx-h100.json",
    "training": {"global_batch": 16, "micro_batch": 2, "seq_len": 1024},
    "fsdp": {"version": 2, "strategy": "FULL_SHARD", "wrap": {"policy": "block"}}
  })");
}

struct BadCase {
  std::string name;
  std::string text;                // the scenario file's content
  std::string expected_path;       // JSON path the error must name
  std::string expected_words;      // what it must say was expected
};

// Lets CTest list the case by its name rather than its bytes.
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.name; }

class BadScenario : public ::testing::TestWithParam<BadCase> {};

TEST_P(BadScenario, ClearErrorNamingFileAndPath) {
  const BadCase& c = GetParam();
  std::string path = write_temp(c.name + ".json", c.text);
  CommandResult r = run_cli("estimate --scenario " + path);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_LT(r.exit_code, 128) << "crashed with a signal";
  EXPECT_EQ(r.err.rfind("error: ", 0), 0u) << r.err;
  EXPECT_NE(r.err.find(path), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(c.expected_path), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(c.expected_words), std::string::npos) << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << "one line: " << r.err;
  EXPECT_TRUE(r.out.empty());
}

std::vector<BadCase> bad_cases() {
  auto with = [](const std::string& pointer, const nlohmann::json& value) {
    nlohmann::json j = good_scenario();
    j[nlohmann::json::json_pointer(pointer)] = value;
    return j.dump();
  };
  nlohmann::json unknown = good_scenario();
  unknown["training"]["micro_bach"] = 2;
  return {
      {"malformed", "{\"model\": \"models/gpt2.json\",\n  \"cluster\": }", "line 2", "malformed JSON"},
      {"unknown_field", unknown.dump(), "training.micro_bach", "unknown field"},
      {"negative_seq", with("/training/seq_len", -5), "training.seq_len", "positive integer"},
      {"zero_nodes", with("/cluster", nlohmann::json{{"gpu", "H100-SXM-80GB"}, {"nodes", 0}, {"gpus_per_node", 8}}),
       "nodes", "positive integer"},
      {"batch_not_divisible", with("/training/global_batch", 20), "training.global_batch", "not a multiple"},
      {"missing_wrap_module", with("/fsdp/wrap", nlohmann::json{{"policy", "modules"}, {"modules", {"transformer.h.0", "transformer.h.99"}}}),
       "fsdp.wrap.modules[1]", "no module named"},
      {"bad_strategy", with("/fsdp/strategy", "ZERO4"), "fsdp.strategy", "expected one of"},
      {"shard_group_not_dividing", with("/fsdp", nlohmann::json{{"strategy", "HYBRID_SHARD"}, {"shard_group_size", 3}}),
       "fsdp.shard_group_size", "does not divide"},
      {"bad_dtype", with("/training/param_dtype", "int4"), "training.param_dtype", "expected fp32"},
      {"unknown_gpu", with("/cluster", nlohmann::json{{"gpu", "Z100"}, {"nodes", 1}, {"gpus_per_node", 8}}),
       "gpu", "no GPU of that name"},
      {"wrong_type", with("/training/micro_batch", "two"), "training.micro_batch", "expected an integer"},
  };
}

INSTANTIATE_TEST_SUITE_P(Cases, BadScenario, ::testing::ValuesIn(bad_cases()),
                         [](const auto& info) { return info.param.name; });

TEST(BadInput, MissingScenarioFile) {
  CommandResult r = run_cli("estimate --scenario /nonexistent/scenario.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("error: /nonexistent/scenario.json"), std::string::npos) << r.err;
}

TEST(BadInput, OverrideOfUnknownFieldIsRefused) {
  std::string path = write_temp("good.json", good_scenario().dump());
  CommandResult r = run_cli("estimate --scenario " + path + " --set fsdp.reshard_after_forwrd=false");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("fsdp.reshard_after_forwrd"), std::string::npos) << r.err;
}

TEST(BadInput, OverrideReachesIntoTheReferencedClusterFile) {
  std::string path = write_temp("good.json", good_scenario().dump());
  CommandResult r = run_cli("estimate --scenario " + path + " --set cluster.gpus_per_node=0");
  EXPECT_NE(r.exit_code, 0);
  // The error names the cluster file, where the field lives.
  EXPECT_NE(r.err.find("dgx-h100.json"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("gpus_per_node"), std::string::npos) << r.err;
}

TEST(Estimate, JsonCarriesTheStableKeys) {
  std::string path = write_temp("good.json", good_scenario().dump());
  CommandResult r = run_cli("estimate --scenario " + path + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  for (const char* key : {"/memory/peak_allocated_bytes", "/memory/peak_reserved_bytes", "/memory/breakdown_at_peak",
                          "/memory/model_state_bytes"})
    EXPECT_TRUE(j.contains(nlohmann::json::json_pointer(key))) << key;
  // GPT-2 small: 124,439,808 parameters (tied embedding counted once); FULL_SHARD over 8
  // ranks, fp32 master + fp32 grads + two fp32 AdamW states = 16 B per parameter / 8,
  // plus FSDP2's dim-0 padding (each parameter's rows rounded up to a multiple of 8).
  const double model_state = j["memory"]["model_state_bytes"].get<double>();
  EXPECT_GE(model_state, 124439808.0 * 16 / 8);
  EXPECT_LE(model_state, 124439808.0 * 16 / 8 * 1.01);
  EXPECT_GE(j["memory"]["peak_reserved_bytes"].get<double>(), j["memory"]["peak_allocated_bytes"].get<double>());
}

TEST(Estimate, OverrideChangesTheAnswerTheWayItShould) {
  std::string path = write_temp("good.json", good_scenario().dump());
  CommandResult full = run_cli("estimate --scenario " + path + " --json");
  CommandResult ddp = run_cli("estimate --scenario " + path + " --json --set fsdp.strategy=NO_SHARD");
  ASSERT_EQ(full.exit_code, 0) << full.err;
  ASSERT_EQ(ddp.exit_code, 0) << ddp.err;
  const double sharded = nlohmann::json::parse(full.out)["memory"]["model_state_bytes"].get<double>();
  const double replicated = nlohmann::json::parse(ddp.out)["memory"]["model_state_bytes"].get<double>();
  // Unsharded model state is 8x the sharded one (padding aside).
  EXPECT_NEAR(replicated / sharded, 8.0, 0.1);
}

TEST(Estimate, MaxMicroBatchFindsTheLargestThatFits) {
  std::string path = write_temp("good.json", good_scenario().dump());
  CommandResult r = run_cli("estimate --scenario " + path + " --json --max-micro-batch --set cluster.gpu=A100-SXM-40GB");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  nlohmann::json j = nlohmann::json::parse(r.out);
  const int largest = j["largest_fitting_micro_batch"];
  ASSERT_GT(largest, 0);
  bool saw_largest = false, saw_next_fail = false;
  for (const auto& t : j["tried"]) {
    if (t["micro_batch"] == largest) saw_largest = t["fits"];
    if (t["micro_batch"] == largest + 1) saw_next_fail = !t["fits"].get<bool>();
  }
  EXPECT_TRUE(saw_largest);
  EXPECT_TRUE(saw_next_fail);
}

TEST(BadArguments, ValidateOfAMissingFileIsAnErrorNotAFailedRow) {
  CommandResult r = run_cli("validate /nonexistent/published-row.json");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.err.rfind("error: /nonexistent/published-row.json: ", 0), 0u) << r.err;
  EXPECT_TRUE(r.out.empty()) << r.out;
}

TEST(BadArguments, ASweepWithNoValidPointFailsAndSaysWhyPerPoint) {
  const std::string scenario = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json";
  CommandResult r = run_cli("sweep --scenario " + scenario + " --axis fsdp.strategy=BOGUS,ZERO4 --threads 1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.out.find("\"BOGUS\""), std::string::npos) << r.out;  // each point's reason
  EXPECT_NE(r.out.find("\"ZERO4\""), std::string::npos) << r.out;
  EXPECT_NE(r.err.find("none of the 2 points could be evaluated"), std::string::npos) << r.err;
  // One valid point is enough for a normal exit.
  EXPECT_EQ(run_cli("sweep --scenario " + scenario + " --axis fsdp.strategy=BOGUS,FULL_SHARD --threads 1").exit_code, 0);
}

}  // namespace
}  // namespace fsdpsim::testing
