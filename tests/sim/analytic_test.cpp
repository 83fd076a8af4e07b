// The analytic engine on small hand-built schedules whose timing is worked out by hand:
// interference on the overlapped part only, bandwidth sharing between concurrent
// collectives, the CPU issue thread (issue cost, CPU waits, the launch queue), exposed
// communication per unit, the critical path, and refusing a deadlocked schedule.
#include <gtest/gtest.h>

#include <limits>

#include "sim/analytic.h"

namespace fsdpsim::sim {
namespace {

using planner::Op;
using planner::OpKind;
using planner::Schedule;
using planner::Stream;

constexpr double kTol = 1e-12;

struct Builder {
  Schedule s;
  planner::OpCosts in;
  Builder() { s.groups = {{"shard", 8, 1}, {"replicate", 8, 1}}; }
  // Collectives go on group 0 (one communicator) unless `group` says otherwise.
  int add(OpKind kind, Stream stream, double seconds, std::vector<int> deps = {}, int unit = -1, int group = 0) {
    Op op;
    op.id = static_cast<int>(s.ops.size());
    op.kind = kind;
    op.stream = stream;
    op.name = planner::to_string(kind) + " " + std::to_string(op.id);
    op.unit = unit;
    op.deps.assign(deps.begin(), deps.end());
    if (planner::is_collective(kind)) op.group = group;
    s.ops.push_back(op);
    in.duration_seconds.push_back(seconds);
    in.issue_seconds.push_back(0);
    return op.id;
  }
  StepTiming run() { return simulate(s, in); }
};

TEST(AnalyticEngine, InterferenceSlowsOnlyTheOverlappedPart) {
  // All-gather 0..1 s beside a 2 s forward with a 50% slowdown: during the first second
  // the forward does 1/1.5 s of work, the remaining 4/3 s alone: it ends at 1 + 4/3.
  Builder b;
  b.add(OpKind::all_gather, Stream::all_gather, 1.0);
  b.add(OpKind::compute_fwd, Stream::compute, 2.0);
  b.in.compute_slowdown_under_comm = 0.5;
  const StepTiming t = b.run();
  EXPECT_NEAR(t.ops[1].end, 1.0 + 4.0 / 3.0, kTol);
  EXPECT_NEAR(t.ops[0].end, 1.0, kTol);  // compute does not slow the collective
  EXPECT_NEAR(t.step_seconds, 7.0 / 3.0, kTol);
  EXPECT_NEAR(t.interference_seconds, 1.0 / 3.0, kTol);
  EXPECT_NEAR(t.compute_seconds, 7.0 / 3.0, kTol);
  EXPECT_NEAR(t.exposed_comm_seconds, 0.0, kTol);
}

// All-gather (1 s, 0.2 s of it latency) from 0 (op 0); a reduce-scatter on ANOTHER communicator
// (1 s, 0.2 s latency; op 2) waits for a 0.5 s compute op (op 1).
Builder gather_beside_reduce_scatter() {
  Builder b;
  b.add(OpKind::all_gather, Stream::all_gather, 1.0);
  const int c = b.add(OpKind::compute_bwd, Stream::compute, 0.5);
  b.add(OpKind::reduce_scatter, Stream::reduce_scatter, 1.0, {c}, -1, 1);
  b.in.latency_seconds = {0.2, 0.0, 0.2};
  return b;
}

TEST(AnalyticEngine, ConcurrentCollectivesShareBandwidthAfterTheirLatency) {
  // AG: latency to 0.2, transfers alone to 0.5 (0.3 done) and through the RS's latency to 0.7
  // (0.5 done); then both transfer at half speed: the AG's last 0.3 s take 0.6 s -> 1.3.
  // RS: 0.3 of 0.8 done by 1.3, 0.5 alone -> 1.8.
  Builder b = gather_beside_reduce_scatter();
  const int ag = 0, rs = 2;
  StepTiming t = b.run();
  EXPECT_NEAR(t.ops[ag].end, 1.3, kTol);
  EXPECT_NEAR(t.ops[rs].start, 0.5, kTol);
  EXPECT_NEAR(t.ops[rs].end, 1.8, kTol);
  EXPECT_NEAR(t.step_seconds, 1.8, kTol);
  // Without sharing each runs at its nominal time.
  b.in.share_bandwidth = false;
  t = b.run();
  EXPECT_NEAR(t.ops[ag].end, 1.0, kTol);
  EXPECT_NEAR(t.ops[rs].end, 1.5, kTol);
}

TEST(AnalyticEngine, CollectivesShareOnlyTheLinksOfTheirDomain) {
  // [Link domains] The schedule of the test above. In different link domains (HSDP's all-reduce
  // across nodes beside a reduce-scatter inside one) neither slows the other: the AG ends at
  // 1.0, the RS at 0.5 + 1.0. In one domain they share as before: 1.3 and 1.8.
  Builder b = gather_beside_reduce_scatter();
  const int ag = 0, rs = 2;
  b.in.link_domain = {planner::kNodeFabric, planner::kNodeFabric, planner::kNetwork};
  StepTiming t = b.run();
  EXPECT_NEAR(t.ops[ag].end, 1.0, kTol);
  EXPECT_NEAR(t.ops[rs].end, 1.5, kTol);
  b.in.link_domain = {planner::kNetwork, planner::kNodeFabric, planner::kNetwork};
  t = b.run();
  EXPECT_NEAR(t.ops[ag].end, 1.3, kTol);
  EXPECT_NEAR(t.ops[rs].end, 1.8, kTol);
  // A domain the engine does not know is refused, not indexed.
  b.in.link_domain = {planner::kNodeFabric, planner::kNodeFabric, 2};
  EXPECT_THROW(b.run(), std::invalid_argument);
}

// [Link loads] Max-min sharing of one link, worked by hand: two that saturate it get half each;
// 0.1 beside 1: the small one is served whole, the other gets the 0.9 left; three where one
// takes 0.065 alone (HSDP's all-reduce across PCIe nodes at 1.5625 of its GPU's 24 GB/s beside
// the node's all-gather and reduce-scatter): (1 - 0.065) / 2 = 0.4675 each; loads that fit
// together: no level.
TEST(AnalyticEngine, FairShareLevelIsMaxMinWaterFilling) {
  const double halves[] = {1, 1}, small_and_full[] = {1, 0.1}, hsdp[] = {1, 0.065, 1}, fit[] = {0.3, 0.3};
  EXPECT_NEAR(fair_share_level(halves, 2), 0.5, kTol);
  EXPECT_NEAR(fair_share_level(small_and_full, 2), 0.9, kTol);
  EXPECT_NEAR(fair_share_level(hsdp, 3), 0.4675, kTol);
  EXPECT_EQ(fair_share_level(fit, 2), std::numeric_limits<double>::infinity());
}

TEST(AnalyticEngine, ACollectiveThatTakesLittleOfTheLinkKeepsItsSpeed) {
  // The schedule of ConcurrentCollectivesShareBandwidthAfterTheirLatency, one domain, but the RS
  // takes 0.1 of the link alone. From 0.7 both transfer: the RS at full speed (0.1 <= 0.9), the
  // AG at 0.9: its last 0.3 s take 1/3 s -> 1.0333; the RS's 0.8 s -> 1.5. With loads of 1 both:
  // 1.3 and 1.8, as that test has it.
  Builder b = gather_beside_reduce_scatter();
  const int ag = 0, rs = 2;
  b.in.link_load = {1.0, 1.0, 0.1};
  StepTiming t = b.run();
  EXPECT_NEAR(t.ops[ag].end, 0.7 + 0.3 / 0.9, kTol);
  EXPECT_NEAR(t.ops[rs].end, 1.5, kTol);
  b.in.link_load = {1.0, 1.0, 1.0};
  t = b.run();
  EXPECT_NEAR(t.ops[ag].end, 1.3, kTol);
  EXPECT_NEAR(t.ops[rs].end, 1.8, kTol);
  // A load outside (0, 1] is refused.
  b.in.link_load = {1.0, 1.0, 0.0};
  EXPECT_THROW(b.run(), std::invalid_argument);
  b.in.link_load = {1.0, 1.0, 1.5};
  EXPECT_THROW(b.run(), std::invalid_argument);
}

TEST(AnalyticEngine, CollectivesOfOneCommunicatorRunOneAtATime) {
  // [Communicator order]: the same all-gather and reduce-scatter on ONE communicator. The RS is
  // ready at 0.5 (after the compute) on its own stream, but waits for the AG to end at 1.0,
  // then runs alone for 1 s (no sharing, so no slowdown): [1.0, 2.0].
  Builder b;
  const int ag = b.add(OpKind::all_gather, Stream::all_gather, 1.0);
  const int c = b.add(OpKind::compute_bwd, Stream::compute, 0.5);
  const int rs = b.add(OpKind::reduce_scatter, Stream::reduce_scatter, 1.0, {c});
  b.in.latency_seconds = {0.2, 0.0, 0.2};
  const StepTiming t = b.run();
  EXPECT_NEAR(t.ops[ag].end, 1.0, kTol);
  EXPECT_NEAR(t.ops[rs].start, 1.0, kTol);
  EXPECT_NEAR(t.ops[rs].end, 2.0, kTol);
  EXPECT_EQ(t.ops[rs].started_by, Constraint::communicator);
  EXPECT_EQ(t.ops[rs].started_by_op, ag);
  EXPECT_NEAR(t.step_seconds, 2.0, kTol);
  EXPECT_NEAR(t.exposed_comm_seconds, 1.5, kTol);  // [0.5, 2.0]: nothing computes
}

TEST(AnalyticEngine, CpuBoundStepIsTheIssueTimePlusTheLastOp) {
  // Three 1 ms kernels that each take 3 ms to issue: op i is on the GPU at 3(i+1) ms.
  Builder b;
  for (int i = 0; i < 3; ++i) b.add(OpKind::compute_fwd, Stream::compute, 1e-3);
  b.in.issue_seconds = {3e-3, 3e-3, 3e-3};
  const StepTiming t = b.run();
  EXPECT_NEAR(t.step_seconds, 10e-3, kTol);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(t.ops[i].issue_start, 3e-3 * i, kTol);
    EXPECT_NEAR(t.ops[i].start, 3e-3 * (i + 1), kTol);
    EXPECT_EQ(t.ops[i].started_by, Constraint::cpu_issue);
  }
  EXPECT_NEAR(t.cpu_issue_seconds, 9e-3, kTol);
  EXPECT_NEAR(t.exposed_other_seconds, 7e-3, kTol);  // the compute stream idles, CPU-bound
  // The critical path: three issues, then the last kernel.
  EXPECT_NEAR(t.critical_path_summary.cpu_issue_seconds, 9e-3, kTol);
  EXPECT_NEAR(t.critical_path_summary.compute_seconds, 1e-3, kTol);
  ASSERT_EQ(t.critical_path.size(), 4u);
  EXPECT_EQ(t.critical_path.back().kind, PathSegment::Kind::gpu);
}

TEST(AnalyticEngine, CpuWaitBlocksTheIssueUntilTheOpEnds) {
  // limit_all_gathers: the CPU waits for op 0 (5 s) before issuing op 1 (1 s to issue).
  Builder b;
  b.add(OpKind::all_gather, Stream::all_gather, 5.0);
  b.add(OpKind::compute_fwd, Stream::compute, 1.0);
  b.s.ops[1].cpu_waits = {0};
  b.in.issue_seconds = {0.0, 1.0};
  const StepTiming t = b.run();
  EXPECT_NEAR(t.ops[1].issue_start, 5.0, kTol);
  EXPECT_EQ(t.ops[1].issued_by, Constraint::cpu_wait);
  EXPECT_EQ(t.ops[1].issued_by_op, 0);
  EXPECT_NEAR(t.ops[1].start, 6.0, kTol);
  EXPECT_NEAR(t.step_seconds, 7.0, kTol);
  // Path: all-gather 0..5, issue 5..6, forward 6..7.
  ASSERT_EQ(t.critical_path.size(), 3u);
  EXPECT_NEAR(t.critical_path_summary.communication_seconds, 5.0, kTol);
}

TEST(AnalyticEngine, FullLaunchQueueBlocksTheCpu) {
  // 600 kernels per op, 1000 per stream queue: op 1 is issued when op 0 leaves the queue.
  Builder b;
  b.add(OpKind::compute_fwd, Stream::compute, 1.0);
  b.add(OpKind::compute_fwd, Stream::compute, 1.0);
  b.add(OpKind::all_gather, Stream::all_gather, 0.5);  // another stream's queue is free
  b.in.kernels = {600, 600, 1};
  b.in.launch_queue_kernels = 1000;
  const StepTiming t = b.run();
  EXPECT_NEAR(t.ops[1].issue_start, 1.0, kTol);
  EXPECT_EQ(t.ops[1].issued_by, Constraint::launch_queue);
  EXPECT_EQ(t.ops[1].issued_by_op, 0);
  EXPECT_NEAR(t.ops[2].issue_start, 1.0, kTol);  // the CPU issues in order
  EXPECT_NEAR(t.step_seconds, 2.0, kTol);
}

TEST(AnalyticEngine, ExposedCommunicationPerUnit) {
  // Unit 0: AG 0..1, forward 1..2. Unit 1: AG 1..3 (2 s, behind AG 0 on its stream),
  // forward 3..4. Exposed: 0..1 (unit 0) and 2..3 (unit 1).
  Builder b;
  const int ag0 = b.add(OpKind::all_gather, Stream::all_gather, 1.0, {}, 0);
  b.add(OpKind::compute_fwd, Stream::compute, 1.0, {ag0}, 0);
  const int ag1 = b.add(OpKind::all_gather, Stream::all_gather, 2.0, {}, 1);
  b.add(OpKind::compute_fwd, Stream::compute, 1.0, {ag1}, 1);
  const StepTiming t = b.run();
  EXPECT_NEAR(t.step_seconds, 4.0, kTol);
  EXPECT_NEAR(t.compute_seconds, 2.0, kTol);
  EXPECT_NEAR(t.exposed_comm_seconds, 2.0, kTol);
  ASSERT_EQ(t.exposed_comm_by_unit.size(), 2u);
  EXPECT_NEAR(t.exposed_comm_by_unit[0], 1.0, kTol);
  EXPECT_NEAR(t.exposed_comm_by_unit[1], 1.0, kTol);
  EXPECT_NEAR(t.comm_seconds, 3.0, kTol);
  // Path: AG0, AG1 (stream order), forward 1.
  ASSERT_EQ(t.critical_path.size(), 3u);
  EXPECT_EQ(t.critical_path[1].op, ag1);
  EXPECT_EQ(t.ops[ag1].started_by, Constraint::stream_order);
}

TEST(AnalyticEngine, HostOpsRunOnTheCpuAfterTheirDeps) {
  // CPU offload: the optimizer (Stream::host) waits for the device-to-host copy, then
  // occupies the CPU; the op after it is issued when it ends.
  Builder b;
  const int d2h = b.add(OpKind::d2h, Stream::reduce_scatter, 2.0);
  const int opt = b.add(OpKind::optimizer, Stream::host, 3.0, {d2h});
  b.add(OpKind::compute_fwd, Stream::compute, 1.0);
  const StepTiming t = b.run();
  EXPECT_NEAR(t.ops[opt].start, 2.0, kTol);
  EXPECT_EQ(t.ops[opt].issued_by, Constraint::dependency);
  EXPECT_NEAR(t.ops[2].issue_start, 5.0, kTol);
  EXPECT_NEAR(t.step_seconds, 6.0, kTol);
  EXPECT_NEAR(t.optimizer_seconds, 3.0, kTol);
  EXPECT_NEAR(t.critical_path_summary.host_seconds, 3.0, kTol);
}

TEST(AnalyticEngine, DeadlockIsRefusedNamingTheOp) {
  // Op 0 waits for op 1, which is behind it on the same stream.
  Builder b;
  b.add(OpKind::compute_fwd, Stream::compute, 1.0, {1});
  b.add(OpKind::compute_fwd, Stream::compute, 1.0);
  try {
    b.run();
    FAIL() << "expected a deadlock error";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("deadlock"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("compute_fwd 0"), std::string::npos) << e.what();
  }
}

TEST(AnalyticEngine, MismatchedInputsAreRefused) {
  Builder b;
  b.add(OpKind::compute_fwd, Stream::compute, 1.0);
  b.in.issue_seconds.clear();
  EXPECT_THROW(b.run(), std::invalid_argument);
}

}  // namespace
}  // namespace fsdpsim::sim
