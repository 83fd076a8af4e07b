// The progress line of `simulate` (tools/elapsed_progress.h): nothing before its delay or when
// not enabled; past the delay, the time elapsed against the expected, said to be time-based.
#include <gtest/gtest.h>

#include <thread>

#include "tools/elapsed_progress.h"

namespace fsdpsim::tools {
namespace {

std::string run_for(bool enabled, double expected, double delay, double seconds) {
  ::testing::internal::CaptureStderr();
  {
    ElapsedProgress progress(enabled, /*tty=*/false, expected, delay);
    std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
    progress.finish();
  }
  return ::testing::internal::GetCapturedStderr();
}

TEST(ElapsedProgress, SilentBeforeItsDelayAndWhenOff) {
  EXPECT_EQ(run_for(true, 10, 5.0, 0.05), "");  // a short run shows nothing
  EXPECT_EQ(run_for(false, 10, 0.01, 0.2), "");
}

TEST(ElapsedProgress, PastItsDelayShowsElapsedAgainstExpected) {
  const std::string out = run_for(true, 10, 0.05, 0.3);
  EXPECT_NE(out.find("simulate: ["), std::string::npos) << out;
  EXPECT_NE(out.find("of the ~10 s expected (time-based)"), std::string::npos) << out;
  EXPECT_EQ(out.back(), '\n');  // off a terminal: whole lines
  const std::string unknown = run_for(true, 0, 0.05, 0.2);
  EXPECT_NE(unknown.find("s elapsed"), std::string::npos) << unknown;
}

}  // namespace
}  // namespace fsdpsim::tools
