// [Near capacity] (planner/device_memory.h): a step that fits with less to spare than the
// reserved-memory model's tolerance (5% of the predicted reserved bytes) is warned about.
// Figures worked by hand.
#include <gtest/gtest.h>

#include "planner/device_memory.h"

namespace fsdpsim::planner {
namespace {

constexpr double kGiB = 1024.0 * 1024 * 1024;

TEST(NearCapacity, WarnsWithinTheReservedModelsTolerance) {
  // 80 GiB GPU, 77 GiB reserved, 79 GiB on the device: 1 GiB = 1,024 MiB spare, under 5% of
  // 77 GiB = 3.85 GiB = 3,942 MiB (3,942.4 rounded).
  const std::string w = near_capacity_warning(80 * kGiB, 79 * kGiB, 77 * kGiB);
  EXPECT_NE(w.find("1024 MiB to spare"), std::string::npos) << w;
  EXPECT_NE(w.find("5% of the predicted reserved 78848 MiB = 3942 MiB"), std::string::npos) << w;
  EXPECT_NE(w.find("num_alloc_retries"), std::string::npos) << w;
}

TEST(NearCapacity, SilentWithTheToleranceToSpareOrWhenTheStepDoesNotFit) {
  // Spare exactly 5% of the reserved bytes: 40 GiB reserved, 2 GiB spare.
  EXPECT_EQ(near_capacity_warning(80 * kGiB, 78 * kGiB, 40 * kGiB), "");
  // Just under it: warned.
  EXPECT_NE(near_capacity_warning(80 * kGiB, 78 * kGiB + 1024, 40 * kGiB), "");
  // Over the GPU: the step does not fit, which is reported apart.
  EXPECT_EQ(near_capacity_warning(80 * kGiB, 81 * kGiB, 77 * kGiB), "");
  // Nothing reserved and the GPU nearly full of overhead: no tolerance to be within.
  EXPECT_EQ(near_capacity_warning(80 * kGiB, 79 * kGiB, 0), "");
}

}  // namespace
}  // namespace fsdpsim::planner
