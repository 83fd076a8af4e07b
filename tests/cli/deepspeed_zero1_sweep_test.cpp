// `sweep` over DeepSpeed ZeRO-1's reduce buckets (scenarios/sweeps/gpt2-xl-deepspeed-zero1-buckets.json;
// planner/plan_zero.cpp): the ranking and the recommendation, and the reasons each follows from,
// checked on the sweep's own figures. GPT-2 XL under DeepSpeed's layout on 8 x A100 80GB,
// reduce_bucket_size 5e7 / 2e8 / 5e8 elements x overlap_comm false / true.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "cli_helpers.h"

namespace fsdpsim::testing {
namespace {

const std::string kRoot = FSDPSIM_SOURCE_ROOT;

struct Point {
  double step_seconds = 0, exposed_comm_seconds = 0, peak_allocated_bytes = 0;
  int rank = 0;
};

TEST(DeepSpeedZero1Sweep, RanksOverlapFirstAndRecommendsTheSmallBucketWithOverlap) {
  const CommandResult r =
      run_cli("sweep --sweep " + kRoot + "/scenarios/sweeps/gpt2-xl-deepspeed-zero1-buckets.json --threads 2 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json report = nlohmann::json::parse(r.out);
  std::map<std::pair<double, bool>, Point> p;  // (reduce_bucket_size, overlap_comm)
  for (const auto& x : report["points"]) {
    Point q;
    q.step_seconds = x["time"]["step_seconds"].get<double>();
    q.exposed_comm_seconds = x["time"]["exposed_comm_seconds"].get<double>();
    q.peak_allocated_bytes = x["memory"]["peak_allocated_bytes"].get<double>();
    q.rank = x["rank"].get<int>();
    p[{std::stod(x["values"]["deepspeed.reduce_bucket_size"].get<std::string>()),
       x["values"]["deepspeed.overlap_comm"].get<std::string>() == "true"}] = q;
  }
  ASSERT_EQ(p.size(), 6u);
  const std::vector<double> sizes = {5e7, 2e8, 5e8};
  // Memory: the bucket buffers, reduce_bucket_size x 2 B (bf16), one without overlap_comm and two
  // with it (stage_1_and_2.py setup_buckets), are alive at the peak (backward), so each point's
  // peak is the same base plus them, to the byte.
  const double base = p.at({5e7, false}).peak_allocated_bytes - 5e7 * 2;
  for (double size : sizes)
    for (bool overlap : {false, true}) {
      SCOPED_TRACE(std::to_string(size) + (overlap ? " overlap" : ""));
      EXPECT_EQ(p.at({size, overlap}).peak_allocated_bytes, base + (overlap ? 2 : 1) * size * 2);
    }
  for (double size : sizes) {
    SCOPED_TRACE(size);
    // overlap_comm reduces each bucket as it fills, on the reduction stream, while backward runs;
    // without it ZeRO-1 reduces every bucket after the backward (reduce_gradients): more exposed
    // communication, so every overlapping point ranks above every other.
    EXPECT_LT(p.at({size, true}).exposed_comm_seconds, p.at({size, false}).exposed_comm_seconds);
    for (double other : sizes) EXPECT_LT(p.at({size, true}).rank, p.at({other, false}).rank);
  }
  // With overlap what stays exposed is the reduction of the last bucket, after the last gradient:
  // it grows with the bucket. Without overlap all the bytes are exposed whatever the bucket, and
  // bigger buckets make fewer reduce-scatters (less latency): the order reverses.
  EXPECT_LT(p.at({5e7, true}).exposed_comm_seconds, p.at({2e8, true}).exposed_comm_seconds);
  EXPECT_LT(p.at({2e8, true}).exposed_comm_seconds, p.at({5e8, true}).exposed_comm_seconds);
  EXPECT_GT(p.at({5e7, false}).exposed_comm_seconds, p.at({5e8, false}).exposed_comm_seconds);
  const auto& rec = report["recommendation"];
  ASSERT_TRUE(rec.is_object());
  EXPECT_EQ(rec["label"], "deepspeed.reduce_bucket_size=50000000 deepspeed.overlap_comm=true");
  EXPECT_EQ(p.at({5e7, true}).rank, 1);
  const std::string why = rec["why"].get<std::string>();
  EXPECT_NE(why.find("highest tokens/s/GPU of 6 configurations that fit"), std::string::npos) << why;
  EXPECT_NE(why.find("Exposed communication"), std::string::npos) << why;
  EXPECT_NE(why.find("Next: #3 (deepspeed.reduce_bucket_size=200000000)"), std::string::npos) << why;
}

}  // namespace
}  // namespace fsdpsim::testing
