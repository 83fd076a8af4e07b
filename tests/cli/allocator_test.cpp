// The fsdpsim binary allocates with jemalloc (CMakeLists.txt: SimGrid's engine and the planner's
// replay are bound by malloc; docs/benchmarks.md, "Session 15"). jemalloc prints its statistics
// at exit when MALLOC_CONF asks for them; glibc's malloc ignores the variable.
#include <gtest/gtest.h>

#include "cli_helpers.h"

namespace fsdpsim::testing {
namespace {

TEST(Allocator, TheBinaryMallocsWithJemalloc) {
  if (!FSDPSIM_CLI_JEMALLOC) GTEST_SKIP() << "a sanitized build: AddressSanitizer's malloc, not jemalloc";
  const CommandResult r = run_command("MALLOC_CONF=stats_print:true " + cli_binary() + " --help");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("jemalloc statistics"), std::string::npos)
      << "no jemalloc statistics on stderr: the binary is not linked with jemalloc\n" << r.err.substr(0, 400);
}

}  // namespace
}  // namespace fsdpsim::testing
