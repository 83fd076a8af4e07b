// The host backend's collectives move the right data: an all-gather's output is the
// concatenation of the inputs, a reduce-scatter's output is this rank's shard of the
// elementwise sum, an all-reduce's the whole sum. Checked directly on the communicator and
// inside a planned run (where a corrupted output must be caught).
#include <gtest/gtest.h>

#include <numeric>
#include <thread>

#include "runtime/internal/host_comm.h"
#include "runtime/runtime.h"
#include "runtime_scenarios.h"

namespace fsdpsim::runtime {
namespace {

using detail::Barrier;
using planner::OpKind;

// Runs one collective over `k` threads; member j's input is inputs[j]; returns the outputs.
std::vector<std::vector<float>> run_collective(OpKind kind, const std::vector<std::vector<float>>& inputs,
                                               std::size_t recv_count) {
  const int k = static_cast<int>(inputs.size());
  std::vector<int> ranks(k);
  std::iota(ranks.begin(), ranks.end(), 10);  // group members are world ranks 10, 11, ...
  HostCommunicator comm(ranks);
  std::atomic<bool> abort{false};
  std::vector<std::vector<float>> outputs(k, std::vector<float>(recv_count, -1.0f));
  std::vector<Barrier::Result> results(k);
  std::vector<std::thread> threads;
  for (int j = 0; j < k; ++j) {
    threads.emplace_back([&, j] {
      HostCommunicator::Call call{7, kind, inputs[j].data(), inputs[j].size(), outputs[j].data(), recv_count};
      results[j] = comm.run(j, call, detail::Clock::now() + std::chrono::seconds(5), abort);
    });
  }
  for (auto& t : threads) t.join();
  for (auto r : results) EXPECT_EQ(r, Barrier::Result::ok);
  return outputs;
}

std::vector<std::vector<float>> random_inputs(int k, std::size_t n, unsigned seed) {
  std::vector<std::vector<float>> in(k, std::vector<float>(n));
  unsigned state = seed;
  for (auto& v : in)
    for (float& x : v) {
      state = state * 1103515245u + 12345u;
      x = static_cast<float>((state >> 16) % 1000) - 500.0f;  // integers: sums are exact
    }
  return in;
}

double checksum(const std::vector<float>& v) {
  double s = 0;
  for (std::size_t i = 0; i < v.size(); ++i) s += v[i] * static_cast<double>(i % 7 + 1);
  return s;
}

TEST(HostCollectives, AllGatherOutputIsTheConcatenationOfInputs) {
  const int k = 4;
  const std::size_t n = 1000;
  auto in = random_inputs(k, n, 1);
  std::vector<float> concatenation;
  for (const auto& v : in) concatenation.insert(concatenation.end(), v.begin(), v.end());
  auto out = run_collective(OpKind::all_gather, in, n * k);
  for (int j = 0; j < k; ++j) {
    EXPECT_EQ(out[j], concatenation) << "member " << j;
    EXPECT_DOUBLE_EQ(checksum(out[j]), checksum(concatenation));
  }
}

TEST(HostCollectives, ReduceScatterOutputIsThisRanksShardOfTheSum) {
  const int k = 4;
  const std::size_t shard = 250;
  auto in = random_inputs(k, shard * k, 2);
  std::vector<float> sum(shard * k, 0.0f);
  for (const auto& v : in)
    for (std::size_t i = 0; i < v.size(); ++i) sum[i] += v[i];
  auto out = run_collective(OpKind::reduce_scatter, in, shard);
  std::vector<float> reassembled;
  for (int j = 0; j < k; ++j) {
    std::vector<float> expected(sum.begin() + j * shard, sum.begin() + (j + 1) * shard);
    EXPECT_EQ(out[j], expected) << "member " << j;
    reassembled.insert(reassembled.end(), out[j].begin(), out[j].end());
  }
  EXPECT_DOUBLE_EQ(checksum(reassembled), checksum(sum));
}

TEST(HostCollectives, AllReduceOutputIsTheSum) {
  const int k = 3;
  const std::size_t n = 333;
  auto in = random_inputs(k, n, 3);
  std::vector<float> sum(n, 0.0f);
  for (const auto& v : in)
    for (std::size_t i = 0; i < n; ++i) sum[i] += v[i];
  auto out = run_collective(OpKind::all_reduce, in, n);
  for (int j = 0; j < k; ++j) EXPECT_EQ(out[j], sum) << "member " << j;
}

TEST(HostCollectives, MembersJoiningDifferentCollectivesIsAnError) {
  HostCommunicator comm({0, 1});
  std::atomic<bool> abort{false};
  std::vector<float> a(4), b(8);
  std::string message[2];
  std::vector<std::thread> threads;
  for (int j = 0; j < 2; ++j) {
    threads.emplace_back([&, j] {
      HostCommunicator::Call call{j == 0 ? 3 : 5, OpKind::all_gather, a.data(), 4, b.data(), 8};
      try {
        comm.run(j, call, detail::Clock::now() + std::chrono::seconds(5), abort);
      } catch (const RuntimeError& e) {
        message[j] = e.what();
        abort = true;
        comm.wake();
      }
    });
  }
  for (auto& t : threads) t.join();
  const std::string m = message[0].empty() ? message[1] : message[0];
  EXPECT_NE(m.find("op 3"), std::string::npos) << m;
  EXPECT_NE(m.find("op 5"), std::string::npos) << m;
}

TEST(HostCollectives, AMemberThatNeverComesTimesOut) {
  HostCommunicator comm({4, 5, 6});
  std::atomic<bool> abort{false};
  std::vector<float> in(2), out(6);
  std::vector<Barrier::Result> results(2);
  std::vector<std::thread> threads;
  for (int j = 0; j < 2; ++j)
    threads.emplace_back([&, j] {
      HostCommunicator::Call call{1, OpKind::all_gather, in.data(), 2, out.data(), 6};
      results[j] = comm.run(j, call, detail::Clock::now() + std::chrono::milliseconds(100), abort);
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(results[0], Barrier::Result::timeout);
  EXPECT_EQ(results[1], Barrier::Result::timeout);
  EXPECT_EQ(comm.absent(), std::vector<int>{6});
}

// In a planned run every collective's output is checked against the data the ranks sent.
TEST(HostCollectives, PlannedRunChecksEveryCollective) {
  const planner::Schedule s =
      testing::plan(testing::scenario(2, 2, {{"version", 2}, {"strategy", "HYBRID_SHARD"}}, {}, 3, {250, 100}));
  RunOptions o = testing::fast_host(s);
  o.max_buffer_bytes = 4096;  // real but small: 1024 floats per buffer at most
  const RunResult r = run_schedule(s, o);
  int expected = 0;
  std::set<OpKind> kinds;
  for (const auto& op : s.ops)
    if (planner::is_collective(op.kind) && op.comm_bytes > 0) {
      ++expected;
      kinds.insert(op.kind);
    }
  EXPECT_TRUE(kinds.count(OpKind::all_gather) && kinds.count(OpKind::reduce_scatter) &&
              kinds.count(OpKind::all_reduce));
  for (const RankResult& rank : r.ranks) EXPECT_EQ(rank.collectives_checked, expected * testing::steps_played_by_default(s));
}

TEST(HostCollectives, ACorruptedOutputIsCaughtNamingOpAndRank) {
  const planner::Schedule s = testing::plan(testing::scenario(1, 4, {{"version", 2}}));
  int reduce_scatter = -1;
  for (const auto& op : s.ops)
    if (op.kind == OpKind::reduce_scatter && reduce_scatter < 0) reduce_scatter = op.id;
  ASSERT_GE(reduce_scatter, 0);
  RunOptions o = testing::fast_host(s);
  o.hooks.corrupt_rank = 2;
  o.hooks.corrupt_op = reduce_scatter;
  try {
    run_schedule(s, o);
    FAIL() << "the corrupted reduce-scatter went unnoticed";
  } catch (const RuntimeError& e) {
    EXPECT_EQ(e.kind(), FaultKind::data);
    EXPECT_EQ(e.rank(), 2);
    EXPECT_EQ(e.op(), reduce_scatter);
    const std::string m = e.what();
    EXPECT_NE(m.find("rank 2"), std::string::npos) << m;
    EXPECT_NE(m.find(s.ops[reduce_scatter].name), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace fsdpsim::runtime
