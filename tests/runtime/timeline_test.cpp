// What the executor measures respects the schedule (deps, stream order, one collective per
// process group at a time, ops at least their modeled length), the prediction plays the same
// rules, and verify and the trace report them.
#include <gtest/gtest.h>

#include <map>
#include <set>

#include "runtime/runtime.h"
#include "runtime/verify.h"
#include "runtime_scenarios.h"

namespace fsdpsim::runtime {
namespace {

using planner::OpKind;

// Modeled durations long enough to measure, short enough for CI: compute 2 ms, collectives
// 1 ms, the rest nothing.
std::vector<double> test_durations(const planner::Schedule& s) {
  std::vector<double> d;
  for (const auto& op : s.ops) {
    if (planner::is_collective(op.kind))
      d.push_back(1e-3);
    else if (op.kind == OpKind::compute_fwd || op.kind == OpKind::compute_bwd || op.kind == OpKind::optimizer)
      d.push_back(2e-3);
    else
      d.push_back(0);
  }
  return d;
}

TEST(Timeline, MeasuredOpsRespectTheScheduleOnEveryRank) {
  const planner::Schedule s = testing::plan(testing::scenario(1, 2, {{"version", 2}}, {}, 2));
  RunOptions o = testing::fast_host(s);
  o.durations_seconds = test_durations(s);
  const RunResult r = run_schedule(s, o);
  const std::vector<int> previous = previous_collective_in_group(s);
  constexpr double slack = 1e-9;
  for (const RankResult& rank : r.ranks) {
    SCOPED_TRACE("rank " + std::to_string(rank.rank));
    const auto& t = rank.steps.at(0);
    std::map<planner::Stream, int> last_on_stream;
    for (const auto& op : s.ops) {
      EXPECT_GE(t[op.id].start_seconds, 0);
      EXPECT_GE(t[op.id].end_seconds - t[op.id].start_seconds, o.durations_seconds[op.id] - slack) << op.name;
      for (int d : op.deps)
        EXPECT_GE(t[op.id].start_seconds, t[d].end_seconds - slack) << op.name << " before dep " << d;
      if (previous[op.id] >= 0) {
        EXPECT_GE(t[op.id].start_seconds, t[previous[op.id]].end_seconds - slack) << op.name;
      }
      if (last_on_stream.count(op.stream)) {
        const int prev = last_on_stream[op.stream];
        EXPECT_GE(t[op.id].start_seconds, t[prev].end_seconds - slack) << op.name << " overlaps " << s.ops[prev].name;
      }
      last_on_stream[op.stream] = op.id;
    }
  }
}

TEST(Timeline, PredictionPlaysStreamsDepsAndCpuWaits) {
  planner::Schedule s;
  s.world_size = 2;
  s.groups = {{"shard", 2, 1}};
  auto add = [&](OpKind kind, planner::Stream stream, std::vector<int> deps, std::vector<int> cpu_waits = {}) {
    planner::Op op;
    op.id = static_cast<int>(s.ops.size());
    op.kind = kind;
    op.stream = stream;
    op.name = "op" + std::to_string(op.id);
    op.deps.assign(deps.begin(), deps.end());
    op.cpu_waits.assign(cpu_waits.begin(), cpu_waits.end());
    if (planner::is_collective(kind)) op.group = 0;
    s.ops.push_back(op);
  };
  add(OpKind::all_gather, planner::Stream::all_gather, {});           // 0: [0, 1]
  add(OpKind::compute_fwd, planner::Stream::compute, {0});            // 1: [1, 3]
  add(OpKind::all_gather, planner::Stream::all_gather, {});           // 2: [1, 2]
  add(OpKind::reduce_scatter, planner::Stream::reduce_scatter, {1});  // 3: after op 1 and op 2 (same group): [3, 4]
  add(OpKind::compute_bwd, planner::Stream::compute, {2}, {0});       // 4: after op 1 on its stream: [3, 5]
  add(OpKind::optimizer, planner::Stream::compute, {3}, {3});         // 5: CPU waits for op 3: [5, 6]
  check_playable(s, "hand-made");
  const std::vector<double> d = {1, 2, 1, 1, 2, 1};
  const auto t = predict_timeline(s, d);
  const std::vector<std::pair<double, double>> expected = {{0, 1}, {1, 3}, {1, 2}, {3, 4}, {3, 5}, {5, 6}};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_DOUBLE_EQ(t[i].start_seconds, expected[i].first) << "op " << i;
    EXPECT_DOUBLE_EQ(t[i].end_seconds, expected[i].second) << "op " << i;
  }
}

TEST(Verify, ComparesPredictedAndMeasuredPerOpClass) {
  const planner::Schedule s = testing::plan(testing::scenario(1, 2, {{"version", 2}}, {}, 2));
  const std::vector<double> d = test_durations(s);
  const Prediction p = predict_from_durations(s, d, "test durations");
  RunOptions o = testing::fast_host(s);
  o.durations_seconds = d;
  const RunResult r = run_schedule(s, o);
  const VerifyReport v = compare(s, p, r);
  std::set<std::string> names;
  int ops = 0;
  for (const VerifyRow& row : v.op_classes) {
    names.insert(row.name);
    ops += row.ops;
    // The host waits at least the modeled time, so measured >= predicted.
    EXPECT_GE(row.measured, row.predicted - 1e-9) << row.name;
  }
  EXPECT_EQ(ops, static_cast<int>(s.ops.size()));
  for (const char* name : {"all-gather", "reduce-scatter", "forward", "backward", "optimizer"})
    EXPECT_TRUE(names.count(name)) << name;
  EXPECT_GT(v.step.predicted, 0);
  EXPECT_GE(v.step.measured, v.step.predicted * 0.999);
  EXPECT_EQ(v.peak_allocated.error_percent().value(), 0.0);
  EXPECT_EQ(v.peak_reserved.error_percent().value(), 0.0);
  const nlohmann::json j = verify_json(v);
  EXPECT_EQ(j["memory"]["peak_allocated"]["error_percent"], 0.0);
  EXPECT_EQ(j["op_classes"].size(), v.op_classes.size());
  EXPECT_EQ(j["step"]["unit"], "seconds");
}

TEST(Verify, NominalDurationsFollowTheStatedRates) {
  const planner::Schedule s = testing::plan(testing::scenario(1, 4, {{"version", 2}}));
  const NominalRates rates;
  for (const auto& op : s.ops) {
    const double d = nominal_duration(s, op, rates);
    if (planner::is_collective(op.kind)) {
      const CollectiveBytes b = collective_bytes(s, op);
      EXPECT_DOUBLE_EQ(d, rates.collective_latency_seconds + b.traffic_bytes / rates.bus_bytes_per_second);
      if (op.kind == OpKind::all_gather) {
        EXPECT_DOUBLE_EQ(b.traffic_bytes, op.comm_bytes * 3 / 4);
      }
    } else if (op.kind == OpKind::compute_fwd) {
      EXPECT_DOUBLE_EQ(d, std::max(op.flops / rates.flops_per_second, op.hbm_bytes / rates.hbm_bytes_per_second));
    }
  }
}

TEST(Trace, ChromeTraceHasAProcessPerRankAThreadPerStreamAndMemoryCounters) {
  const planner::Schedule s = testing::plan(testing::scenario(1, 2, {{"version", 2}}, {}, 2));
  RunOptions o = testing::fast_host(s);
  o.steps = 2;
  const RunResult r = run_schedule(s, o);
  const nlohmann::json t = trace_json(s, r);
  std::map<int, int> ops_per_pid;
  std::set<std::pair<int, int>> named_threads;
  int counters = 0, peaks = 0;
  for (const auto& e : t["traceEvents"]) {
    if (e["ph"] == "X") {
      ++ops_per_pid[e["pid"].get<int>()];
      const auto& op = s.ops[e["args"]["op"].get<int>()];
      EXPECT_EQ(e["name"], op.name);
      EXPECT_EQ(e["cat"], planner::to_string(op.kind));
      EXPECT_EQ(e["tid"], 1 + static_cast<int>(op.stream));  // the simulator's layout (sim/trace.cpp)
      EXPECT_GE(e["dur"].get<double>(), 0);
    }
    if (e["ph"] == "M" && e["name"] == "thread_name") named_threads.insert({e["pid"].get<int>(), e["tid"].get<int>()});
    if (e["ph"] == "C" && e["name"] == "memory allocated (bytes)") ++counters;
    if (e["ph"] == "i") ++peaks;
  }
  ASSERT_EQ(ops_per_pid.size(), 2u);
  for (auto [pid, n] : ops_per_pid) EXPECT_EQ(n, 2 * static_cast<int>(s.ops.size())) << "rank " << pid;  // two steps
  EXPECT_TRUE(named_threads.count({0, 0}) && named_threads.count({1, 1}));
  EXPECT_EQ(counters, 2 * static_cast<int>(s.ops.size()));
  EXPECT_EQ(peaks, 2);
  const nlohmann::json j = run_result_json(s, r);
  EXPECT_EQ(j["ranks"].size(), 2u);
  EXPECT_EQ(j["ops"].size(), s.ops.size());
  EXPECT_EQ(j["memory"]["peak_allocated_bytes"], r.peak_allocated_bytes());
}

}  // namespace
}  // namespace fsdpsim::runtime
