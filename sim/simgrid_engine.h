// The SimGrid engine: one training step on a simulated cluster (SimGrid S4U).
//
// What it runs (the executor contract, planner/op_costs.h): a Schedule on every rank of its
// world, with the same OpCosts as the analytic engine (durations, issue costs, NCCL latency
// terms, kernel counts and launch-queue depth, compute slowdown under communication), on a
// platform built from a cluster, and the same ordering rules (docs/cost-model.md, "The
// analytic engine"; planner/schedule.h, [Communicator order]):
// - Each simulated rank is a GPU host. Its CPU issue thread and each stream are actors: the
//   CPU issues ops in order (blocking on cpu_waits, a full launch queue, host-op deps), a
//   stream runs its ops in order once issued and their deps are done.
// - Compute-stream ops are Execs on the rank's host at the cost model's rate, times the
//   rank's speed (stragglers); while any collective of the rank is in flight the host runs at
//   1/(1 + compute_slowdown_under_comm) (a second pstate). Other GPU ops (copies on the
//   communication streams, h2d/d2h) take their cost-model time.
// - A collective waits for every simulated member of its process group (a slow rank delays
//   its peers), spends NCCL's latency term (less the platform latency its flows will see),
//   then sends its ring flows (simgrid_flows.h) over the platform (simgrid_platform.h). Flow
//   sizes are the cost model's transfer seconds times the bandwidth the group's ring gets
//   alone on the ideal (non-oversubscribed, nominal) fabric: alone on an ideal fabric the
//   collective takes exactly NCCL's time; links it shares with other collectives (HSDP's
//   all-reduce, a second job, an oversubscribed spine, a slow link) make it slower.
// Flow modes: aggregated (one flow per merged ring edge), per_step (each of the ring's n-1 or
// 2(n-1) steps as its own round of messages, lock-step, latency split evenly).
// Symmetry: without stragglers, slow links or a user platform, every rank is alike. One rank
// then runs as actors and each collective sends the flows of every instance of its group
// in a window of nodes that repeats across the cluster (whole leaves, whole groups): link
// loads in the window are those of the whole cluster. Where the cluster has no such period (a
// node count that is not a multiple of the leaf), a window of chosen nodes with each ring
// contracted to them, used only where colour refinement proves that its links carry what the
// cluster's do (sim/internal/simgrid_window.h); else the whole cluster, and the result says why
// (SimgridResult::window_fallback). With stragglers or slow links every rank of the window runs;
// a window smaller than the cluster repeats them in every period.
//
// SimGrid keeps one engine per process: simulate_simgrid() runs each simulation in a forked
// child (unless options.in_process) and reads its result back through a pipe.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/collectives.h"
#include "planner/hardware.h"
#include "planner/op_costs.h"
#include "planner/schedule.h"
#include "sim/analytic.h"
#include "sim/simgrid_options.h"

namespace fsdpsim::sim {

struct LinkStats {
  std::string name;
  std::string kind;              // LinkKind name
  double bandwidth = 0;          // bytes/s as simulated
  double bytes = 0;              // carried during the step
  double busy_seconds = 0;       // time with at least one flow on it
  double utilisation = 0;        // bytes / (bandwidth x step)
  double busy_utilisation = 0;   // bytes / (bandwidth x busy): ~1 = saturated whenever used
};

// Per kind of link: the busiest one and the mean over links that carried traffic.
struct LinkClassStats {
  std::string kind;
  int links = 0;                 // links of this kind that carried traffic
  double max_utilisation = 0;
  double mean_utilisation = 0;
  double bytes = 0;
  std::string busiest;
};

struct RankSummary {
  int rank = 0;                  // real rank (window image)
  double step_seconds = 0;
  double compute_seconds = 0;
  double exposed_comm_seconds = 0;
  double compute_speed = 1;
};

// Per collective kind: mean duration (start on the rank's stream to end) and mean transfer
// slowdown against the NCCL time alone.
struct CollectiveStats {
  std::string kind;
  int count = 0;
  double simgrid_seconds = 0;    // summed durations
  double analytic_seconds = 0;   // the analytic engine's durations of the same ops, summed
  double nominal_seconds = 0;    // NCCL model alone, summed
};

struct SimgridRankTiming {
  int rank = 0;
  StepTiming timing;
};

struct SimgridResult {
  // Setup.
  std::string platform;          // description
  std::string platform_xml;      // a user's platform, if any
  FlowMode flow_mode = FlowMode::aggregated;
  bool symmetric = false;        // one rank simulated, window flows
  int world = 0;
  int window_nodes = 0;          // nodes whose links and flows are simulated
  // The real nodes that make the window, when it is a window of chosen nodes (a node count that
  // is not a multiple of the leaf: a few nodes of leaf 0 and the partial leaf), proved to load
  // every link as the whole cluster does (sim/internal/simgrid_window.h); empty otherwise.
  std::vector<int> window_node_list;
  // Why a symmetric run took the whole cluster's links where a window of chosen nodes was tried
  // (the proof that failed, in words); empty otherwise.
  std::string window_fallback;
  int simulated_ranks = 0;       // ranks run as actors
  // Each flow sent by its own source rank and received by its destination's (every flow's two
  // ends run as actors), not by the last member of its collective to arrive: the same flows,
  // at the same times (docs/simgrid.md, "Scale").
  bool matched_flows = false;
  std::vector<std::string> notes;  // caveats of this run (folding, per-step, ...)
  // Timing.
  double step_seconds = 0;       // the job's step: the slowest simulated rank
  int report_rank = 0;
  StepTiming timing;             // the report rank's
  std::vector<SimgridRankTiming> detail;  // op timings of the detail ranks (the report rank first)
  std::vector<RankSummary> ranks;         // every simulated rank
  std::vector<CollectiveStats> collectives;
  // Network.
  std::vector<LinkStats> links;           // links that carried traffic, busiest first
  std::vector<LinkClassStats> link_classes;
  // The analytic engine on the same schedule and costs (filled by compare_with_analytic; the
  // engine itself does not run it).
  StepTiming analytic;
  // Cost of the simulation.
  double wall_seconds = 0;       // inside the simulating process
  double cpu_seconds = 0;        // CPU time of the simulating process (one thread)
  double events = 0;             // SimGrid activities: execs, sleeps, flows
  double flows = 0;
  double events_per_second = 0;  // per wall second
};

// What the engine builds its platform from: the cluster's topology and NCCL's figures for it
// (the calibration's, the same the cost model priced the collectives with).
struct ClusterPlatform {
  planner::ClusterSpec cluster;
  planner::NcclParams nccl;
};

// Simulates one step of `schedule` with `costs` on the platform (a forked child unless
// options.in_process). Throws std::invalid_argument when the costs do not fit the schedule or
// the world is too large to run rank by rank, InputError for options naming no link or host.
SimgridResult simulate_simgrid(const planner::Schedule& schedule, const planner::OpCosts& costs,
                               const ClusterPlatform& platform, const SimgridOptions& options);

// What a simulation will cost, worked out from its setup without running it (the resource
// guard of `fsdpsim simulate`; docs/reliability.md, "Resource guard").
struct SimgridCost {
  int window_nodes = 0;
  std::vector<int> window_node_list;  // as SimgridResult's
  std::string window_fallback;     // as SimgridResult's
  int window_ranks = 0;          // SimGrid hosts
  int simulated_ranks = 0;       // ranks run as actors
  // Each flow sent by its own source rank and received by its destination's (every flow's two
  // ends run as actors), not by the last member of its collective to arrive: the same flows,
  // at the same times (docs/simgrid.md, "Scale").
  bool matched_flows = false;
  FlowMode flow_mode = FlowMode::aggregated;
  double links = 0;              // SimGrid links
  double flows = 0;              // messages the step's collectives send
  double flow_pairs = 0;         // sum over collective rounds of (its concurrent flows)^2: the network solver's work
  double other_activities = 0;   // execs and sleeps of the simulated ranks
  double memory_bytes = 0;       // expected peak resident memory of the simulating process
  double seconds = 0;            // expected wall time of the simulation
  std::string memory_basis;      // what the memory figure is made of, for messages
};
SimgridCost estimate_simgrid_cost(const planner::Schedule& schedule, const ClusterPlatform& platform,
                                  const SimgridOptions& options);


// The same, in this process (SimGrid's engine can run once per process).
SimgridResult simulate_simgrid_in_process(const planner::Schedule& schedule, const planner::OpCosts& costs,
                                          const ClusterPlatform& platform, const SimgridOptions& options);

// Puts the analytic engine's timing of the same schedule and costs beside the SimGrid run:
// result.analytic and each collective kind's analytic_seconds.
void compare_with_analytic(SimgridResult& result, const planner::Schedule& schedule, const StepTiming& analytic);

nlohmann::json simgrid_result_to_json(const SimgridResult& result);
SimgridResult simgrid_result_from_json(const nlohmann::json& json);
nlohmann::json step_timing_to_json(const StepTiming& timing);
StepTiming step_timing_from_json(const nlohmann::json& json);

// The platform the engine would build for the scenario (the whole cluster, oversubscription
// and slow links applied) as SimGrid XML, with the routes of every flow the step's
// collectives send: a starting point for a hand-written platform (simulation.platform_xml).
std::string simgrid_platform_xml(const planner::Schedule& schedule, const ClusterPlatform& platform,
                                 const SimgridOptions& options);

// The window (nodes) the engine simulates for a symmetric run of `schedule` on the platform
// shape (exposed for tests): the smallest period of the cluster that holds whole leaves and
// whole groups; else the first window of chosen nodes proved exact; else the whole cluster.
int symmetric_window_nodes(const planner::Schedule& schedule, const planner::ClusterSpec& cluster,
                           const FabricOptions& fabric);
struct SymmetricWindow {
  int nodes = 0;
  std::vector<int> node_list;  // a window of chosen nodes (empty: a period, or the whole cluster)
  std::string fallback;        // why no window of chosen nodes was proved, when one was tried
};
SymmetricWindow symmetric_window(const planner::Schedule& schedule, const planner::ClusterSpec& cluster,
                                 const FabricOptions& fabric);

}  // namespace fsdpsim::sim
