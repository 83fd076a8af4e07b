// DDP's gradient buckets on the analytic engine's clock (issue 21): a 25 MiB bucket against one
// large bucket, exposed all-reduce time and gradient memory, worked by hand.
//
// 8 blocks of one [4096, 4096] weight (16,777,216 elements, 64 MiB of fp32 gradient each),
// ~1.6e13 backward FLOPs per block (milliseconds on an H100) against all-reduces of a fraction
// of a millisecond each: compute hides every all-reduce that has a later block's backward to run
// behind it. DDP's buckets in backward order (torch/nn/parallel/distributed.py, _ddp_init_helper;
// reducer.cpp compute_bucket_assignment_by_size: first bucket capped at 1 MiB, then bucket_cap_mb,
// closed once its bytes reach the cap):
//   bucket_cap_mb 25:      every block's 64 MiB closes its own bucket: 8 all-reduces of 64 MiB;
//                          after the last backward compute only blocks.0's is left.
//   bucket_cap_mb 1048576: blocks.7 alone (the 1 MiB first cap), then blocks.6..0 in one 448 MiB
//                          bucket, all-reduced after the last backward compute: 7x the bytes exposed.
// Gradient memory (gradient_as_bucket_view false, the default): the .grad tensors (8 x 64 MiB) and
// the bucket tensors (8 x 64 MiB) whatever the cap: 1 GiB.
#include <gtest/gtest.h>

#include <set>

#include "planner/cost_model.h"
#include "planner/plan.h"
#include "planner/scenario.h"
#include "planner/sweep_space.h"
#include "sim/analytic.h"
#include "sim/sweep.h"
#include "tests/planner/synthetic.h"

namespace fsdpsim::sim {
namespace {

using planner::Op;
using planner::OpKind;

constexpr double MiB = 1024.0 * 1024.0;

nlohmann::json ddp_scenario(double bucket_cap_mb) {
  nlohmann::json model = testing::block_model(8, {4096, 4096});
  for (auto& child : model["root"]["children"][0]["children"]) child["costs"]["forward_flops"] = {{"b*s", 1e9}};
  return {{"model", model},
          {"cluster", testing::cluster(1, 8)},
          {"training", {{"micro_batch", 1}, {"seq_len", 8192}, {"param_dtype", "bf16"}, {"optimizer", "none"}}},
          {"fsdp", {{"strategy", "NO_SHARD"}}},
          {"ddp", {{"bucket_cap_mb", bucket_cap_mb}}},
          // No CPU cost and no interference, so the identity below is exact.
          {"calibration", {{"op_issue_seconds", 0}, {"kernel_issue_seconds", 0}, {"compute_slowdown_under_comm", 0}}}};
}

struct Played {
  std::vector<const Op*> all_reduces;
  std::vector<double> durations;  // of the all-reduces
  StepTiming timing;
  std::int64_t gradient_bytes = 0;
};

Played play(double bucket_cap_mb, planner::Plan& plan) {
  const planner::Scenario sc = planner::parse_scenario(ddp_scenario(bucket_cap_mb), "test.json");
  plan = planner::plan_step(sc);
  const planner::CostModel cost(sc);
  const planner::OpCosts in = planner::price_ops(plan.schedule, cost);
  Played p;
  p.timing = simulate(plan.schedule, in);
  for (const Op& op : plan.schedule.ops)
    if (op.kind == OpKind::all_reduce) {
      p.all_reduces.push_back(&op);
      p.durations.push_back(in.duration_seconds[op.id]);
    }
  for (const planner::Allocation& a : plan.schedule.allocations)
    if (a.persistent && a.category == planner::MemCategory::unsharded_grad) p.gradient_bytes += a.bytes;
  return p;
}

TEST(DdpBucketsTimed, A25MiBCapExposesOnlyTheLastBlocksAllReduce) {
  planner::Plan small_plan, big_plan;
  const Played small = play(25, small_plan);
  const Played big = play(1048576, big_plan);
  ASSERT_EQ(small.all_reduces.size(), 8u);
  for (const Op* op : small.all_reduces) EXPECT_EQ(op->comm_bytes, 64 * MiB) << op->name;
  ASSERT_EQ(big.all_reduces.size(), 2u);
  EXPECT_EQ(big.all_reduces[0]->comm_bytes, 64 * MiB);
  EXPECT_EQ(big.all_reduces[1]->comm_bytes, 448 * MiB);
  // Exposed: the all-reduce issued after the last backward compute, nothing else.
  EXPECT_NEAR(small.timing.exposed_comm_seconds, small.durations.back(), 1e-9);
  EXPECT_NEAR(big.timing.exposed_comm_seconds, big.durations.back(), 1e-9);
  // 448 MiB against 64 MiB: bandwidth-bound, so more than 5x the exposed time (7x the bytes,
  // less the fixed latency per collective).
  EXPECT_GT(big.timing.exposed_comm_seconds, 5 * small.timing.exposed_comm_seconds);
  EXPECT_GT(big.timing.step_seconds, small.timing.step_seconds);
  // Gradient memory: 8 x 64 MiB of .grad plus 8 x 64 MiB of buckets, whatever the cap.
  EXPECT_EQ(small.gradient_bytes, static_cast<std::int64_t>(1024 * MiB));
  EXPECT_EQ(big.gradient_bytes, static_cast<std::int64_t>(1024 * MiB));
}

// `sweep --axis ddp.bucket_cap_mb=...` over the same base (planner/sweep_space.h, sim/sweep.h):
// each point times exactly as the scenario estimated alone (play above), the 25 MiB cap ranks first
// (7x less exposed all-reduce, the same memory) and is recommended; a point with gradient views
// (gradient_as_bucket_view) holds 512 MiB less, the bucket tensors being the gradients.
TEST(DdpBucketsTimed, SweepRanksTheCapAndRecommendsThe25MiBBucket) {
  nlohmann::json base = ddp_scenario(25);
  base.erase("ddp");
  auto t = planner::ScenarioTemplate::from_json(base, std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/ddp_sweep_test.json", {});
  std::vector<planner::AxisSpec> specs = {planner::parse_axis_spec("ddp.bucket_cap_mb=1048576,25"),
                                          planner::parse_axis_spec("ddp.gradient_as_bucket_view=false,true")};
  const planner::SweepSpace space = planner::make_space(specs, t->context());
  SweepOptions o;
  o.threads = 1;
  o.rank_every_point = true;
  std::vector<PointResult> points;
  o.sink = [&](const PointResult& p) { points.push_back(p); };
  const SweepResult r = run_sweep(t, space, o);
  ASSERT_EQ(points.size(), 4u);
  for (const PointResult& p : points) ASSERT_EQ(p.status, PointStatus::ok) << p.label << ": " << p.reason;
  planner::Plan small_plan, big_plan;
  const Played small = play(25, small_plan), big = play(1048576, big_plan);
  // Points: (1048576, false), (1048576, true), (25, false), (25, true), the last axis fastest.
  EXPECT_EQ(points[0].metrics.exposed_comm_seconds, big.timing.exposed_comm_seconds);
  EXPECT_EQ(points[2].metrics.exposed_comm_seconds, small.timing.exposed_comm_seconds);
  EXPECT_EQ(points[2].metrics.step_seconds, small.timing.step_seconds);
  EXPECT_EQ(points[0].metrics.peak_allocated_bytes, points[2].metrics.peak_allocated_bytes);
  for (std::size_t i : {0u, 2u})
    EXPECT_EQ(points[i].metrics.peak_allocated_bytes - points[i + 1].metrics.peak_allocated_bytes,
              static_cast<std::int64_t>(512 * MiB))
        << points[i].label;
  // The views change memory only: the same step time.
  EXPECT_EQ(points[2].metrics.step_seconds, points[3].metrics.step_seconds);
  // Ranked by tokens/s: both 25 MiB points above both one-bucket points; within 1% (the default
  // tolerance) the recommendation takes the least memory: 25 MiB with gradient views.
  ASSERT_GE(r.ranking.size(), 4u);
  EXPECT_EQ(std::set<std::size_t>(r.ranking.begin(), r.ranking.begin() + 2), (std::set<std::size_t>{2, 3}));
  ASSERT_TRUE(r.recommendation.found);
  EXPECT_EQ(r.recommendation.point, 3u);
  EXPECT_EQ(points[3].label, "ddp.bucket_cap_mb=25 ddp.gradient_as_bucket_view=true");
  // The reason: as fast as the fastest (#2, the same buckets without views), 512 MiB less memory.
  EXPECT_NE(r.recommendation.why.find("within 1.0% of the fastest (#2"), std::string::npos) << r.recommendation.why;
  EXPECT_NE(r.recommendation.why.find("with 0.50 GiB less memory"), std::string::npos) << r.recommendation.why;
}

}  // namespace
}  // namespace fsdpsim::sim
