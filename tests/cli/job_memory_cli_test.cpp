// `fsdpsim estimate` on the job outside the step: the text and the --json output report the
// same phases, the same binding phase and the same checkpoint figures (docs/schema.md, "job").
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"
#include "models/bytes_text.h"

namespace fsdpsim::testing {
namespace {

// Llama-3.1-8B on one DGX H100 node with FSDP1, a CPU init on each rank and a full rank-0 save;
// the node states 1000 GB of host memory and 5 GB/s to storage.
const std::vector<std::string> kArgs = {
    "-s scenarios/llama3.1-8b-8xh100.json", "--set fsdp.version=1", "--set init=cpu",
    "--set 'checkpoint={\"state_dict\": \"full\", \"optimizer\": true}'", "--set cluster.host_memory_gb=1000",
    "--set 'cluster.storage={\"write_gbps\": 5}'"};

std::string joined(const std::vector<std::string>& args) {
  std::string s;
  for (const std::string& a : args) s += " " + a;
  return s;
}

TEST(EstimateJob, TextAndJsonAgree) {
  const CommandResult json_run = run_cli("estimate --json" + joined(kArgs));
  ASSERT_EQ(json_run.exit_code, 0) << json_run.err;
  const nlohmann::json j = nlohmann::json::parse(json_run.out)["job"];
  const CommandResult text_run = run_cli("estimate" + joined(kArgs));
  ASSERT_EQ(text_run.exit_code, 0) << text_run.err;
  const std::string& text = text_run.out;

  // 8 ranks each building the fp32 model (8.03e9 x 4 bytes) is 257 GB per node: it fits in
  // 1000 GB; rank 0 holding the fp32 model and AdamW's two states (12 bytes per parameter,
  // 96 GB) fits too; the job's binding phase is whichever has the least room, in both outputs.
  ASSERT_TRUE(j["checkpoint"].is_object());
  const double params = nlohmann::json::parse(json_run.out)["model"]["parameters"].get<double>();
  EXPECT_DOUBLE_EQ(j["checkpoint"]["rank0_host_bytes"].get<double>(), 12 * params);
  EXPECT_DOUBLE_EQ(j["init"]["host_bytes_per_node"].get<double>(), 8 * 4 * params);
  EXPECT_DOUBLE_EQ(j["checkpoint"]["write_seconds"].get<double>(), 12 * params / 5e9);
  const std::string binding = j["binding_phase"].get<std::string>() + " (" + j["binding_resource"].get<std::string>() + ")";
  if (j["fits"].get<bool>())
    EXPECT_NE(text.find("job fits (every phase): the tightest is " + binding + ", " +
                        gib(j["binding_margin_bytes"].get<double>())),
              std::string::npos)
        << text;
  else
    EXPECT_NE(text.find("the job does not fit: " + binding), std::string::npos) << text;
  EXPECT_NE(text.find(gib(j["init"]["host_bytes_per_node"].get<double>())), std::string::npos);
  EXPECT_NE(text.find(gib(j["checkpoint"]["host_bytes_per_node"].get<double>())), std::string::npos);
  EXPECT_NE(text.find(" at 5 GB/s per node: "), std::string::npos) << text;
  ASSERT_EQ(j["phases"].size(), 3u);
  EXPECT_EQ(j["phases"][0]["phase"], "step");

  // 80 GB of host memory does not hold 8 CPU-built models: the verdict names init and the host.
  std::vector<std::string> small = kArgs;
  small.push_back("--set cluster.host_memory_gb=80");
  const CommandResult tight = run_cli("estimate --json" + joined(small));
  ASSERT_EQ(tight.exit_code, 0) << tight.err;
  const nlohmann::json t = nlohmann::json::parse(tight.out)["job"];
  EXPECT_FALSE(t["fits"].get<bool>());
  EXPECT_EQ(t["binding_phase"], "init");
  EXPECT_EQ(t["binding_resource"], "host");
  EXPECT_TRUE(nlohmann::json::parse(tight.out)["memory"]["fits"].get<bool>());  // the step alone fits
}

}  // namespace
}  // namespace fsdpsim::testing

namespace fsdpsim::testing {
namespace {

// import-hf says what it imported on stderr (stdout stays the model JSON): GPT-2's config gives
// 124,439,808 parameters (the wte/lm_head tie counted once: 50257 x 768 + 1024 x 768 + 12 x
// 7,087,872 per block + 2 x 768 for the final norm), 12 GPT2Block, one tied parameter.
TEST(ImportHf, PrintsASummary) {
  const CommandResult r = run_cli("import-hf " + std::string(FSDPSIM_SOURCE_ROOT) + "/models/hf/gpt2.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("{", 0), 0u);  // the JSON alone on stdout
  EXPECT_NE(r.err.find("124439808 parameters (0.12B)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("12 x GPT2Block"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("1 tied parameter(s)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("wrote stdout"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fsdpsim::testing
