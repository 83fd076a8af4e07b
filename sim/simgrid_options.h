// Options of the SimGrid engine (`fsdpsim simulate`) and the scenario's "simulation" object.
//
// A scenario may carry a "simulation" object (docs/simgrid.md lists every field):
//
//   "simulation": {
//     "flow_mode": "auto",            // "aggregated" | "per_step" | "auto"
//     "symmetry": "auto",             // "auto" (fold identical ranks) | "off" (every rank an actor)
//     "stragglers": [{"rank": 3, "compute_speed": 0.8}],
//     "slow_links": [{"link": "node1.nic0.*", "bandwidth_factor": 0.5}],
//     "fabric": {"nodes_per_leaf": 4, "placement": "packed", "host_bridge_gbps": 192,
//                "gpu_pcie_gbps": 48},
//     "platform_xml": "my-platform.xml"
//   }
//
// planner::parse_scenario keeps the object (`--set simulation.x=...` overrides reach it like
// any other field); sim/scenario_loader.h reads it (sim::load_scenario, the one loader every
// command uses, checks it, so estimate, sweep and simulate accept the same files).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>


namespace fsdpsim::sim {

enum class FlowMode {
  automatic,   // per_step for small worlds (<= per_step_max_ranks ranks), else aggregated
  aggregated,  // one flow per ring edge per collective, latency term added once
  per_step     // every ring step's messages (O(n^2) per collective): small worlds, validation
};
enum class Symmetry {
  automatic,  // identical ranks: one rank runs as actors, a window of nodes carries the flows
  off         // every rank of the world runs as actors and sends its own flows
};
enum class Placement {
  packed,  // consecutive nodes fill a leaf before the next (a scheduler's best case)
  spread   // consecutive nodes on different leaves (round robin): every ring edge crosses the spine
};

const char* to_string(FlowMode m);
const char* to_string(Symmetry s);
const char* to_string(Placement p);

struct Straggler {
  int rank = 0;
  double compute_speed = 1.0;  // fraction of the nominal GPU speed (0.8 = 20% slower kernels)
};

struct SlowLink {
  std::string link;  // a link name or a glob (fnmatch) over the platform's link names
  double bandwidth_factor = 1.0;  // fraction of the nominal bandwidth
};

struct FabricOptions {
  int nodes_per_leaf = 0;       // 0: the default (simgrid_platform.h, default_nodes_per_leaf)
  Placement placement = Placement::packed;
  double host_bridge_gbps = 0;  // PCIe nodes' shared host bridge; 0: gpus_per_node x intra bandwidth
  double gpu_pcie_gbps = 0;     // NVSwitch nodes' GPU <-> NIC PCIe path; 0: NCCL's figure for the GPU
};

// A user's SimGrid platform file, checked before SimGrid reads it: a regular file whose <host>,
// <link> and <cluster> elements have unique ids, speeds and bandwidths above zero and latencies
// not below it. SimGrid aborts its process on a duplicate id or a zero speed, and reads a zero or
// negative bandwidth as an unlimited link (the session-38 input audit). A lint of those
// attributes, not an XML parser: SimGrid parses the rest. Throws InputError naming the file, the
// line, the element and the attribute.
void check_platform_file(const std::string& path);

struct SimgridOptions {
  FlowMode flow_mode = FlowMode::automatic;
  Symmetry symmetry = Symmetry::automatic;
  std::vector<Straggler> stragglers;
  std::vector<SlowLink> slow_links;
  FabricOptions fabric;
  std::string platform_xml;  // a SimGrid platform file instead of the built platform
  // flow_mode automatic: per_step when the world (not the symmetric window) has at most this
  // many ranks.
  int per_step_max_ranks = 16;
  // The rank whose timing is reported (and whose memory the report shows: every rank has
  // the same schedule).
  int report_rank = 0;
  // Also return op timings for these ranks (the trace shows them); the report rank and the
  // slowest rank are always returned.
  std::vector<int> detail_ranks;
  // The file the options came from (error messages name it).
  std::string file;
  // Run in this process instead of a forked child. SimGrid keeps one engine per process:
  // a second run in the same process fails; only for tools that run one simulation and exit.
  bool in_process = false;
  // Validation only (not read from JSON): send every flow as a host-to-host comm from the last
  // member of its collective to arrive, as the engine did before matched flows (the tests
  // compare the two; sim/simgrid_step/simgrid_step.cpp, StepSimulation::matched).
  bool host_to_host_flows = false;
};

// Reads a "simulation" object (null: defaults). Errors name `file` and the JSON path.
SimgridOptions parse_simgrid_options(const nlohmann::json& simulation, const std::string& file,
                                     const std::string& path = "simulation");

}  // namespace fsdpsim::sim
