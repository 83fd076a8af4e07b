// The SimGrid engine as a module (sim/simgrid_module.h): the fsdpsim binary links no SimGrid
// and opens fsdpsim_simgrid.so only when a command simulates.
#include <string>

#include <gtest/gtest.h>

#include "cli_helpers.h"

namespace fsdpsim::testing {
namespace {

// The shared libraries the binary needs at start, as its dynamic section lists them.
std::string needed_libraries() { return run_command("readelf -d " + cli_binary()).out; }

TEST(SimgridModule, TheBinaryDoesNotLinkSimgrid) {
  const std::string needed = needed_libraries();
  ASSERT_NE(needed.find("NEEDED"), std::string::npos) << "readelf printed no dynamic section:\n" << needed;
  EXPECT_EQ(needed.find("libsimgrid"), std::string::npos) << needed;
}

TEST(SimgridModule, SimulateOpensTheModule) {
  const CommandResult r = run_cli("simulate --scenario " + quick_start_scenario() + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(nlohmann::json::parse(r.out).value("engine", ""), "simgrid");
}

TEST(SimgridModule, AMissingModuleIsAnErrorThatNamesIt) {
  const CommandResult r =
      run_command("FSDPSIM_SIMGRID_MODULE=/nonexistent/fsdpsim_simgrid.so " + cli_binary() + " simulate --scenario " +
                  quick_start_scenario());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("/nonexistent/fsdpsim_simgrid.so"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("SimGrid engine module"), std::string::npos) << r.err;
}

TEST(SimgridModule, EstimateNeedsNoModule) {
  const CommandResult r = run_command("FSDPSIM_SIMGRID_MODULE=/nonexistent/fsdpsim_simgrid.so " + cli_binary() +
                                      " estimate --scenario " + quick_start_scenario());
  EXPECT_EQ(r.exit_code, 0) << r.err;
}

}  // namespace
}  // namespace fsdpsim::testing
