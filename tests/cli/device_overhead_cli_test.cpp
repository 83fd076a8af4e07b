// `estimate` breaks the device overhead down (planner/device_memory.h): the text report lists
// each part under "device overhead", --json gives them under memory.device_overhead, and the
// scenario's `nccl` knobs move the NCCL part as worked by hand in tests/planner/nccl_memory_test.cpp.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"

namespace fsdpsim::testing {
namespace {

constexpr double kMiB = 1024.0 * 1024.0;

double part_bytes(const nlohmann::json& e, const std::string& name) {
  for (const nlohmann::json& p : e["memory"]["device_overhead"]["parts"])
    if (p["name"] == name) return p["bytes"].get<double>();
  ADD_FAILURE() << "no part " << name;
  return -1;
}

TEST(DeviceOverheadReport, JsonPartsSumToTheOverhead) {
  const nlohmann::json e = run_cli_json("estimate --json --scenario " + quick_start_scenario());
  const nlohmann::json& o = e["memory"]["device_overhead"];
  EXPECT_FALSE(o["measured"].get<bool>());
  double sum = 0;
  for (const nlohmann::json& p : o["parts"]) sum += p["bytes"].get<double>();
  EXPECT_EQ(sum, o["total_bytes"].get<double>());
  EXPECT_EQ(e["memory"]["device_overhead_bytes"].get<double>(), o["total_bytes"].get<double>());
  // 8 x H100 SXM on one node: NCCL's ring graph has 12 channels (tests/planner/collectives_test.cpp),
  // the communicator 24, each 12 MiB (2 MiB send + 10 MiB receive): 288 MiB.
  EXPECT_EQ(part_bytes(e, "NCCL shard"), 24 * 12 * kMiB);
  // The H100's context and everything else outside torch's allocator, measured with PyTorch 2.11
  // (scenarios/hardware/calibration.json; tests/data/hardware/memory-h100-2026-11-27.csv:
  // device_used_bytes minus reserved, 860,684,288 B in every case).
  EXPECT_EQ(part_bytes(e, "CUDA context"), 860684288.0);
  // PyTorch's cuBLAS workspaces are allocations of the step, not overhead: the forward thread's
  // and autograd's backward thread's, 32 MiB each on an H100 (CublasHandlePool.cpp), in the
  // breakdown's "workspace" category.
  for (const nlohmann::json& p : e["memory"]["device_overhead"]["parts"]) EXPECT_NE(p["name"], "cuBLAS workspaces");
  EXPECT_EQ(e["memory"]["breakdown_at_peak"]["workspace"].get<double>(), 2 * 32 * kMiB);
}

TEST(DeviceOverheadReport, NcclKnobsMoveTheNcclPart) {
  // NCCL_BUFFSIZE 8 MiB: each channel's receive side ALIGN(4096 + 524,288 + 4,915,200 +
  // 8,388,608, 2 MiB) = 14 MiB, + 2 MiB send = 16 MiB; x 24.
  const nlohmann::json big =
      run_cli_json("estimate --json --scenario " + quick_start_scenario() + " --set nccl.buffsize=8388608");
  EXPECT_EQ(part_bytes(big, "NCCL shard"), 24 * 16 * kMiB);
  const nlohmann::json capped =
      run_cli_json("estimate --json --scenario " + quick_start_scenario() + " --set nccl.max_nchannels=8");
  EXPECT_EQ(part_bytes(capped, "NCCL shard"), 8 * 12 * kMiB);
}

TEST(DeviceOverheadReport, TextListsEachPart) {
  const CommandResult r = run_cli("estimate --scenario " + quick_start_scenario());
  EXPECT_NE(r.out.find("device overhead"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("  CUDA context"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("  cuBLAS workspaces"), std::string::npos) << r.out;  // in the step's allocations
  EXPECT_NE(r.out.find("workspace "), std::string::npos) << r.out;           // the breakdown's row
  EXPECT_NE(r.out.find("  NCCL shard"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("24 channels (graph 12)"), std::string::npos) << r.out;
}

TEST(DeviceOverheadReport, BadNcclSettingNamesThePath) {
  const CommandResult r = run_cli("estimate --scenario " + quick_start_scenario() + " --set nccl.max_nchannels=0");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("nccl.max_nchannels"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace fsdpsim::testing
