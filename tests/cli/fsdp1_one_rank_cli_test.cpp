// estimate says when FSDP1 runs another strategy than the scenario's (planner/scenario.cpp,
// [FSDP1 at one rank]): on stderr and in --json's warnings, and the summary names NO_SHARD.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"

namespace fsdpsim::testing {
namespace {

TEST(Fsdp1AtOneRankCli, EstimateWarnsThatFullShardRunsNoShard) {
  const std::string args = "estimate --scenario " + quick_start_scenario() +
                           " --set model=hf:models/hf/llama3.2-1b.json --set cluster.gpus_per_node=1"
                           " --set training.global_batch=2 --set fsdp.version=1";
  const nlohmann::json j = run_cli_json(args + " --json");
  ASSERT_EQ(j["warnings"].size(), 1u) << j["warnings"].dump();
  EXPECT_NE(j["warnings"][0].get<std::string>().find("switches FULL_SHARD to NO_SHARD"), std::string::npos);
  const CommandResult text = run_cli(args);
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_NE(text.err.find("warning: FSDP1 runs NO_SHARD on a world of one rank"), std::string::npos) << text.err;
  EXPECT_NE(text.out.find("FSDP1 NO_SHARD, shard group 1"), std::string::npos) << text.out;
  // FSDP2 on one GPU: no warning.
  EXPECT_TRUE(run_cli_json(args + " --set fsdp.version=2 --json")["warnings"].empty());
}

}  // namespace
}  // namespace fsdpsim::testing
