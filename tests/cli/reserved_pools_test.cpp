// `fsdpsim estimate`: where reserved memory sits at the step's end, per stream pool (text and
// --json memory.reserved_by_stream_at_end; docs/schema.md). Each segment belongs to one stream's
// pool, so the pools add up to what is reserved at the end; with no cache released during the
// step (no allocator retries) that is the peak.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"

namespace fsdpsim::testing {
namespace {

TEST(ReservedPools, AddUpToThePeakAndTheTextListsThem) {
  const std::string args = " -s scenarios/llama3.1-8b-8xh100.json --set fsdp.version=1";
  const CommandResult json_run = run_cli("estimate --json" + args);
  ASSERT_EQ(json_run.exit_code, 0) << json_run.err;
  const nlohmann::json m = nlohmann::json::parse(json_run.out)["memory"];
  ASSERT_EQ(m["reserved_by_stream_at_end"].size(), 4u);  // FSDP1: compute, unshard, post-backward, pre-unshard
  std::int64_t sum = 0;
  for (const auto& [stream, bytes] : m["reserved_by_stream_at_end"].items()) sum += bytes.get<std::int64_t>();
  EXPECT_EQ(sum, m["peak_reserved_bytes"].get<std::int64_t>());

  const CommandResult text_run = run_cli("estimate" + args);
  ASSERT_EQ(text_run.exit_code, 0) << text_run.err;
  for (const char* pool : {"compute stream's pool", "all_gather stream's pool", "reduce_scatter stream's pool",
                           "copy stream's pool"})
    EXPECT_NE(text_run.out.find(pool), std::string::npos) << pool << "\n" << text_run.out;
}

}  // namespace
}  // namespace fsdpsim::testing
