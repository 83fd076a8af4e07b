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

}  // namespace
}  // namespace fsdpsim::runtime
