// The SimGrid engine's setup, shared by its two halves (sim/simgrid_engine.h says what the engine
// does):
// - sim/simgrid_engine.cpp, in fsdpsim_sim, links no SimGrid: it chooses how a run is set up
//   (the window, which ranks run as actors, the flow mode), prices a run for the resource guard,
//   writes platform XML and forks the simulating process;
// - sim/simgrid_step/simgrid_step.cpp includes SimGrid and runs the step. It is built twice: as
//   the module fsdpsim_simgrid.so, which the fsdpsim binary opens with dlopen only when a command
//   simulates (sim/simgrid_module.h says why), and as an object library that the tests and
//   benchmarks link directly.
// The module resolves the functions declared here (and the rest of fsdpsim it calls) against
// the binary that opened it, which exports its symbols for that (tools/CMakeLists.txt).
#pragma once

#include <string>
#include <vector>

#include "models/json_input.h"
#include "planner/op_costs.h"
#include "planner/schedule.h"
#include "sim/internal/simgrid_flows.h"
#include "sim/simgrid_engine.h"
#include "sim/simgrid_platform.h"

namespace fsdpsim::sim::detail {

// A process group with the flow pattern of some of its collectives: one "flow group" per
// (group, pattern), so a group that runs rings and all-to-alls keeps both sets of flows.
struct GroupUse {
  int group = -1;
  FlowPattern pattern = FlowPattern::ring;
  int flow = -1;  // index into StepSimulation::groups: group + pattern x schedule.groups.size()
  GroupLayout layout;
};

int flow_group_of(const planner::Schedule& s, const planner::Op& op);
std::vector<GroupUse> collective_groups(const planner::Schedule& s);

// How the run is set up: which ranks run as actors, which nodes' links exist, how flows go.
struct RunShape {
  bool xml = false;        // a user's platform file
  bool symmetric = false;  // one rank as actors, window flows
  int window_nodes = 0;    // nodes whose links are built
  // A window of these real nodes (Platform::build_nodes), proved exact (simgrid_window.h); empty
  // for a period of the cluster or the whole cluster.
  std::vector<int> window_node_list;
  // Why a symmetric run takes the whole cluster where a window of chosen nodes was tried (a node
  // count with no period, such as a partial leaf): the proof that failed, in words. Empty otherwise.
  std::string window_fallback;
  FlowMode flow_mode = FlowMode::aggregated;
};

RunShape choose_shape(const planner::Schedule& s, const ClusterPlatform& p, const SimgridOptions& options);
// The platform of the run's window (the whole cluster, a period, or chosen nodes).
Platform window_platform(const ClusterPlatform& p, const SimgridOptions& options, const RunShape& shape);
// Throws std::invalid_argument when every rank would run as actors in too large a window.
void check_actor_ranks(bool symmetric, int window_ranks);
FlowMode choose_flow_mode(int world_ranks, const SimgridOptions& options);
// Scales the platform's links that options.slow_links name; InputError for a name matching none.
void apply_slow_links(Platform& platform, const SimgridOptions& options);
InputError no_such_link(const SimgridOptions& options, std::size_t i, const std::string& where);
double process_cpu_seconds();
// The fewest flows one collective's round must send for matched flows (StepSimulation::matched):
// 2,048, or FSDPSIM_SIMGRID_MATCHED_FLOWS_MIN. The step uses it, and the resource guard foresees
// it (matched flows cost differently: estimate_simgrid_cost).
int matched_flows_min();

}  // namespace fsdpsim::sim::detail

// The step itself (simulate_simgrid_in_process past its checks), defined by the SimGrid half.
// C linkage: the fsdpsim binary finds it in the module by this name (dlsym). Weak: where the
// SimGrid half is linked in (tests, benchmarks) the address is that definition, elsewhere null.
extern "C" void fsdpsim_simgrid_run_step(const fsdpsim::planner::Schedule& schedule,
                                         const fsdpsim::planner::OpCosts& costs,
                                         const fsdpsim::sim::ClusterPlatform& platform,
                                         const fsdpsim::sim::SimgridOptions& options,
                                         fsdpsim::sim::SimgridResult& result) __attribute__((weak));
