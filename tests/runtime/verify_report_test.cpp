// runtime::compare and verify_json: the rows `fsdpsim verify` prints, from a prediction and a
// run result made by hand.
#include <gtest/gtest.h>

#include "runtime/verify.h"

namespace fsdpsim::runtime {
namespace {

using planner::OpKind;

// One op of each kind given, op i predicted at i + 1 seconds and measured at twice that.
struct Played {
  planner::Schedule schedule;
  Prediction prediction;
  RunResult result;
};

Played played(const std::vector<OpKind>& kinds) {
  Played p;
  p.result.backend = "host";
  RankResult rank;
  rank.steps.emplace_back();
  for (OpKind kind : kinds) {
    planner::Op op;
    op.id = static_cast<int>(p.schedule.ops.size());
    op.kind = kind;
    p.schedule.ops.push_back(op);
    p.prediction.op_seconds.push_back(op.id + 1.0);
    rank.steps[0].push_back({0.0, 2.0 * (op.id + 1)});
  }
  p.result.ranks.push_back(rank);
  return p;
}

// The session-38 audit: the all-to-all and NVMe rows were computed and never printed, so an MoE
// step's 120 all-to-alls and ZeRO-Infinity's 41 swaps (1.23 s of a 1.26 s step) were missing.
TEST(VerifyReport, EveryOpClassOfTheScheduleHasItsRow) {
  const Played p = played({OpKind::all_gather, OpKind::all_to_all, OpKind::compute_fwd, OpKind::nvme_read,
                           OpKind::nvme_write, OpKind::all_to_all});
  const VerifyReport v = compare(p.schedule, p.prediction, p.result);
  ASSERT_EQ(v.op_classes.size(), 4u);
  // Print order: collectives, compute, then the NVMe swaps.
  EXPECT_EQ(v.op_classes[0].name, "all-gather");
  EXPECT_EQ(v.op_classes[1].name, "all-to-all");
  EXPECT_EQ(v.op_classes[2].name, "forward");
  EXPECT_EQ(v.op_classes[3].name, "NVMe swaps");
  // By hand: all-to-alls are ops 1 and 5 (2 + 6 s predicted, 4 + 12 s measured); the swaps are
  // ops 3 and 4 (4 + 5 s, 8 + 10 s).
  EXPECT_EQ(v.op_classes[1].ops, 2);
  EXPECT_DOUBLE_EQ(v.op_classes[1].predicted, 8.0);
  EXPECT_DOUBLE_EQ(v.op_classes[1].measured, 16.0);
  EXPECT_EQ(v.op_classes[3].ops, 2);
  EXPECT_DOUBLE_EQ(v.op_classes[3].predicted, 9.0);
  EXPECT_DOUBLE_EQ(v.op_classes[3].measured, 18.0);
  const nlohmann::json j = verify_json(v);
  int ops = 0;
  for (const auto& row : j["op_classes"]) ops += row["ops"].get<int>();
  EXPECT_EQ(ops, 6);
  EXPECT_EQ(j["op_classes"][3]["name"], "NVMe swaps");
}

// CPU offload's host memory, predicted by the replay and measured by the executor, gets rows
// (they were measured and never reported: the session-38 audit). Two ranks: the highest counts.
TEST(VerifyReport, HostMemoryPeaksArePredictedAgainstMeasured) {
  Played p = played({OpKind::optimizer});
  p.prediction.memory.peak_host_pinned_bytes = 400;
  p.prediction.memory.peak_host_pageable_bytes = 250;
  p.prediction.memory.peak_host_bytes = 600;  // the two peaks at different times
  p.result.ranks.push_back(p.result.ranks[0]);
  p.result.ranks[0].peak_host_pinned_bytes = 400;
  p.result.ranks[0].peak_host_pageable_bytes = 200;
  p.result.ranks[0].peak_host_bytes = 500;
  p.result.ranks[1].peak_host_pinned_bytes = 300;
  p.result.ranks[1].peak_host_pageable_bytes = 250;
  p.result.ranks[1].peak_host_bytes = 550;
  const VerifyReport v = compare(p.schedule, p.prediction, p.result);
  ASSERT_EQ(v.host_memory.size(), 3u);
  EXPECT_EQ(v.host_memory[0].name, "peak host pinned");
  EXPECT_DOUBLE_EQ(v.host_memory[0].measured, 400);
  EXPECT_DOUBLE_EQ(v.host_memory[1].measured, 250);
  EXPECT_DOUBLE_EQ(v.host_memory[2].predicted, 600);
  EXPECT_DOUBLE_EQ(v.host_memory[2].measured, 550);
  const nlohmann::json j = verify_json(v);
  EXPECT_EQ(j["memory"]["peak_host_pageable"]["predicted"].get<double>(), 250);
  EXPECT_EQ(j["memory"]["peak_host"]["measured"].get<double>(), 550);
  EXPECT_EQ(j["memory"]["peak_host"]["unit"], "bytes");
  // No host memory on either side: no rows.
  EXPECT_TRUE(compare(p.schedule, played({OpKind::optimizer}).prediction, played({OpKind::optimizer}).result)
                  .host_memory.empty());
}

// The host backend takes no issue cost: a prediction holding CPU issue says how much, in the
// notes and the JSON (the session-38 audit: +266% on GPT-2 with no word of why); a backend that
// issues for real, or costs without issue, get nothing.
TEST(VerifyReport, SaysWhenTheBackendPlaysNoIssueCost) {
  Played p = played({OpKind::compute_fwd});
  p.prediction.cpu_issue_seconds = 0.0195;
  p.prediction.cpu_issue_on_critical_path_seconds = 0.019;
  const VerifyReport v = compare(p.schedule, p.prediction, p.result);
  ASSERT_TRUE(v.issue_not_played);
  EXPECT_DOUBLE_EQ(v.issue_not_played->cpu_issue_seconds, 0.0195);
  EXPECT_DOUBLE_EQ(v.issue_not_played->on_critical_path_seconds, 0.019);
  ASSERT_FALSE(v.notes.empty());
  EXPECT_NE(v.notes.back().find("CPU issue not played"), std::string::npos) << v.notes.back();
  EXPECT_NE(v.notes.back().find("19.500 ms of CPU issue"), std::string::npos) << v.notes.back();
  EXPECT_NE(v.notes.back().find("19.000 ms of it on the predicted step's critical path"), std::string::npos);
  const nlohmann::json j = verify_json(v);
  EXPECT_DOUBLE_EQ(j["issue_not_played"]["cpu_issue_seconds"].get<double>(), 0.0195);
  EXPECT_DOUBLE_EQ(j["issue_not_played"]["on_critical_path_seconds"].get<double>(), 0.019);

  p.result.backend = "cuda";
  EXPECT_FALSE(compare(p.schedule, p.prediction, p.result).issue_not_played);
  p.result.backend = "host";
  p.prediction.cpu_issue_seconds = p.prediction.cpu_issue_on_critical_path_seconds = 0;  // --durations
  EXPECT_TRUE(verify_json(compare(p.schedule, p.prediction, p.result))["issue_not_played"].is_null());
}

}  // namespace
}  // namespace fsdpsim::runtime
