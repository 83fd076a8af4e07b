// Sets FSDPSIM_SIMGRID_MATCHED_FLOWS_MIN (the fewest flows a collective's round sends for matched
// flows; sim/internal/simgrid_setup.h) for its lifetime; the forked simulating process inherits
// it, and the resource guard reads the same threshold.
#pragma once

#include <cstdlib>

namespace fsdpsim::sim {

struct MatchedFlowsMin {
  explicit MatchedFlowsMin(const char* value) { setenv("FSDPSIM_SIMGRID_MATCHED_FLOWS_MIN", value, 1); }
  ~MatchedFlowsMin() { unsetenv("FSDPSIM_SIMGRID_MATCHED_FLOWS_MIN"); }
  MatchedFlowsMin(const MatchedFlowsMin&) = delete;
  MatchedFlowsMin& operator=(const MatchedFlowsMin&) = delete;
};

}  // namespace fsdpsim::sim
