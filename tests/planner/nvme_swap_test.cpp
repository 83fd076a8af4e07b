// ZeRO-Infinity's NVMe swaps as schedule ops (OpKind nvme_read / nvme_write), against hand
// arithmetic: what DeepSpeed reads and writes per step with offload_optimizer and offload_param
// "nvme", and the time each takes at a rank's share of the node's NVMe bandwidth.
#include <gtest/gtest.h>

#include "planner/cost_model.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "synthetic.h"

namespace fsdpsim::planner {
namespace {

using testing::block_model;
using testing::cluster;

// 4 blocks of [8192, 4096] (33,554,432 parameters each) on one node of 8 GPUs: every unit
// divides by 8, so each rank holds exactly N / 8 of each.
constexpr double kBlock = 8192.0 * 4096.0;
constexpr double kN = 4 * kBlock;
constexpr double kW = 8;
// The node's NVMe in this test (inputs, not a real drive): 24 GB/s read, 16 GB/s write, shared
// by its 8 ranks: 3 GB/s and 2 GB/s each.
constexpr double kReadGbps = 24, kWriteGbps = 16;

nlohmann::json scenario_json(const std::string& optimizer_device, const std::string& param_device, bool nvme_stated = true) {
  nlohmann::json c = cluster(1, 8);
  if (nvme_stated) c["nvme"] = {{"read_gbps", kReadGbps}, {"write_gbps", kWriteGbps}};
  return {{"model", block_model(4, {8192, 4096})},
          {"cluster", c},
          {"training", {{"micro_batch", 1}, {"seq_len", 16}, {"param_dtype", "bf16"}, {"reduce_dtype", "fp32"},
                        {"master_dtype", "fp32"}, {"optimizer", "adamw"}, {"master_weights", "optimizer_state"}}},
          {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"},
                    {"offload_optimizer", optimizer_device}, {"offload_param", param_device}}}};
}

struct Swaps {
  double unit_reads = 0, unit_writes = 0;  // per-unit swaps (parameter reads, gradient writes)
  std::vector<const Op*> step_reads, step_writes;  // the optimizer step's (unit -1)
  int unit_read_ops = 0, h2d_ops = 0;
};

Swaps swaps_of(const Schedule& s) {
  Swaps w;
  for (const Op& op : s.ops) {
    if (op.kind == OpKind::h2d && op.unit >= 0) ++w.h2d_ops;
    if (op.kind != OpKind::nvme_read && op.kind != OpKind::nvme_write) continue;
    EXPECT_EQ(op.stream, Stream::host) << op.name;
    const bool read = op.kind == OpKind::nvme_read;
    if (op.unit >= 0) {
      (read ? w.unit_reads : w.unit_writes) += op.comm_bytes;
      if (read) ++w.unit_read_ops;
    } else {
      (read ? w.step_reads : w.step_writes).push_back(&op);
    }
  }
  return w;
}

TEST(NvmeSwaps, OptimizerAndParametersOnNvmeByHand) {
  const Scenario sc = parse_scenario(scenario_json("nvme", "nvme"), "test.json", {});
  const Plan plan = plan_step(sc);
  const Swaps w = swaps_of(plan.schedule);
  // Each bf16 parameter shard is read from NVMe before every host-to-device copy (forward and
  // backward gathers): 2 bytes x N/8 per pass over the model, one read per copy.
  EXPECT_EQ(w.unit_read_ops, w.h2d_ops);
  EXPECT_GE(w.h2d_ops, 8);  // 4 units, gathered in forward and in backward
  EXPECT_EQ(std::fmod(w.unit_reads, 2 * kN / kW), 0.0);
  EXPECT_GE(w.unit_reads, 2 * (2 * kN / kW));
  // The fp32 gradient partition of each unit is written once per micro-step: 4 x N/8.
  EXPECT_DOUBLE_EQ(w.unit_writes, 4 * kN / kW);
  // The step: read fp32 master + AdamW's two states + the fp32 gradient (16 x N/8), write the
  // master and states back (12 x N/8), and the updated bf16 parameters (2 x N/8).
  ASSERT_EQ(w.step_reads.size(), 1u);
  ASSERT_EQ(w.step_writes.size(), 2u);
  EXPECT_DOUBLE_EQ(w.step_reads[0]->comm_bytes, 16 * kN / kW);  // 268,435,456 B
  EXPECT_DOUBLE_EQ(w.step_writes[0]->comm_bytes, 12 * kN / kW);
  EXPECT_DOUBLE_EQ(w.step_writes[1]->comm_bytes, 2 * kN / kW);

  // Order: the read waits for every gradient write, the CPU step for the read, the writes for
  // the step.
  int optimizer = -1;
  for (const Op& op : plan.schedule.ops)
    if (op.kind == OpKind::optimizer) optimizer = op.id;
  ASSERT_GE(optimizer, 0);
  const auto depends = [&](int op, int on) {
    const auto& d = plan.schedule.ops[op].deps;
    return std::find(d.begin(), d.end(), on) != d.end();
  };
  EXPECT_TRUE(depends(optimizer, w.step_reads[0]->id));
  EXPECT_TRUE(depends(w.step_writes[0]->id, optimizer));
  EXPECT_TRUE(depends(w.step_writes[1]->id, optimizer));
  int gradient_writes = 0;
  for (const Op& op : plan.schedule.ops)
    if (op.kind == OpKind::nvme_write && op.unit >= 0) {
      ++gradient_writes;
      EXPECT_TRUE(depends(w.step_reads[0]->id, op.id)) << op.name;
    }
  EXPECT_EQ(gradient_writes, 4);

  // Time: bytes at the rank's share of the node's bandwidth (24 / 8 = 3 GB/s read, 2 GB/s write).
  const CostModel cost(sc);
  EXPECT_DOUBLE_EQ(cost.duration_seconds(*w.step_reads[0], plan.schedule), 16 * kN / kW / 3e9);   // 89.5 ms
  EXPECT_DOUBLE_EQ(cost.duration_seconds(*w.step_writes[0], plan.schedule), 12 * kN / kW / 2e9);  // 100.7 ms
  EXPECT_EQ(cost.kernels(*w.step_reads[0]), 0);  // aio on the CPU launches no kernel
  EXPECT_EQ(nvme_untimed_warning(sc.cluster, plan.schedule), "");
}

TEST(NvmeSwaps, OptimizerOnlyReadsNoParameters) {
  const Plan plan = plan_step(parse_scenario(scenario_json("nvme", "none"), "test.json", {}));
  const Swaps w = swaps_of(plan.schedule);
  EXPECT_EQ(w.unit_read_ops, 0);
  EXPECT_DOUBLE_EQ(w.unit_writes, 4 * kN / kW);
  ASSERT_EQ(w.step_writes.size(), 1u);  // no parameter write-back: the GPU holds them
  EXPECT_DOUBLE_EQ(w.step_writes[0]->comm_bytes, 12 * kN / kW);
}

TEST(NvmeSwaps, CpuOffloadHasNoSwaps) {
  const Plan plan = plan_step(parse_scenario(scenario_json("cpu", "cpu"), "test.json", {}));
  for (const Op& op : plan.schedule.ops) EXPECT_NE(op.kind, OpKind::nvme_read) << op.name;
  for (const Op& op : plan.schedule.ops) EXPECT_NE(op.kind, OpKind::nvme_write) << op.name;
}

TEST(NvmeSwaps, UnstatedBandwidthIsUntimedAndSaidSo) {
  const Scenario sc = parse_scenario(scenario_json("nvme", "nvme", false), "test.json", {});
  const Plan plan = plan_step(sc);
  const CostModel cost(sc);
  for (const Op& op : plan.schedule.ops) {
    if (op.kind == OpKind::nvme_read || op.kind == OpKind::nvme_write) {
      EXPECT_EQ(cost.duration_seconds(op, plan.schedule), 0) << op.name;
    }
  }
  EXPECT_NE(nvme_untimed_warning(sc.cluster, plan.schedule).find("cluster.nvme.read_gbps"), std::string::npos);
}

TEST(NvmeSwaps, ScheduleFileKeepsTheSwaps) {
  const Plan plan = plan_step(parse_scenario(scenario_json("nvme", "nvme"), "test.json", {}));
  const Schedule back = schedule_from_json(schedule_to_json(plan.schedule), "roundtrip.json");
  ASSERT_EQ(back.ops.size(), plan.schedule.ops.size());
  for (std::size_t i = 0; i < back.ops.size(); ++i) {
    EXPECT_EQ(back.ops[i].kind, plan.schedule.ops[i].kind);
    EXPECT_EQ(back.ops[i].comm_bytes, plan.schedule.ops[i].comm_bytes);
  }
}

std::string error_of(const nlohmann::json& nvme) {
  nlohmann::json j = scenario_json("nvme", "none");
  j["cluster"]["nvme"] = nvme;
  try {
    parse_scenario(j, "bad.json", {});
  } catch (const InputError& e) {
    return e.what();
  }
  return "";
}

TEST(NvmeSwaps, BadBandwidthNamesThePath) {
  EXPECT_NE(error_of({{"read_gbps", -1}, {"write_gbps", 5}}).find("cluster.nvme.read_gbps"), std::string::npos);
  EXPECT_NE(error_of({{"read_gbps", 5}}).find("cluster.nvme.write_gbps"), std::string::npos);
  EXPECT_NE(error_of({{"read_gbps", 5}, {"write_gbps", 5}, {"iops", 1}}).find("cluster.nvme.iops"), std::string::npos);
}

}  // namespace
}  // namespace fsdpsim::planner
