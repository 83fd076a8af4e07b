// runtime::host_overhead_warning: on the host backend, the ops' time measured past their modelled
// durations is the host's; the warning comes at half the modelled durations, with the figures
// per op in wall time.
#include <gtest/gtest.h>

#include "runtime/verify.h"

namespace fsdpsim::runtime {
namespace {

VerifyReport report(const std::string& backend, double predicted, double measured, int ops) {
  VerifyReport v;
  v.backend = backend;
  v.op_classes.push_back({"forward", ops / 2, predicted / 2, measured / 2});
  v.op_classes.push_back({"all-gather", ops - ops / 2, predicted / 2, measured / 2});
  return v;
}

TEST(HostOverheadWarning, AtHalfTheModelledDurations) {
  // 100 ops modelled at 1 s in all, played at time scale 0.01: 100 us of wall time an op.
  EXPECT_FALSE(host_overhead_warning(report("host", 1.0, 1.49, 100), 0.01));
  const auto warning = host_overhead_warning(report("host", 1.0, 1.5, 100), 0.01);
  ASSERT_TRUE(warning);
  // 0.5 modelled seconds over 100 ops at 0.01: 50 us of wall time an op, 0.5x the 100 us modelled.
  EXPECT_NE(warning->find("50.0 us of wall time each"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("0.5x the 100.0 us"), std::string::npos) << *warning;
  EXPECT_NE(warning->find("--time-scale 0.01"), std::string::npos) << *warning;
  // Measured on a GPU, the difference is the model's: no warning.
  EXPECT_FALSE(host_overhead_warning(report("cuda", 1.0, 40.0, 100), 1.0));
  EXPECT_FALSE(host_overhead_warning(report("host", 0.0, 1.0, 100), 0.01));
}

}  // namespace
}  // namespace fsdpsim::runtime
