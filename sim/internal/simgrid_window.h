// The proof that a window of chosen nodes (simgrid_platform.h, Platform::build_nodes) times a
// step as the whole cluster does, for a run where one rank stands for all (symmetric).
//
// SimGrid shares a link's bandwidth among its flows by max-min fairness, each flow weighted by
// its route's latency (CM02), and a symmetric run starts every instance of a collective at once
// and waits for the last of its flows. Colour the flows and links of the whole cluster and of
// the window together: links by bandwidth and latency, flows by flow group and size (the
// fraction of the per-rank bytes); then refine until stable (each flow by the multiset of its
// links' colours, each link by the multiset of its flows' colours). In a stable colouring every
// link of a colour carries the same number of flows of each colour, and every flow of a colour
// crosses the same number of links of each colour, in the cluster and in the window alike. Max-min
// fair sharing fills every flow of a colour at the same rate then (progressive filling: flows of
// a colour rise together, and a link's colour fixes when it saturates), and flows of a colour
// start together with the same size, so they end together; whole colours end at once, so the
// colouring stays stable among the flows left. Hence the window is exact when, for every flow
// group, its flows in the window have the colours its flows in the cluster have (the window's
// collective ends when the cluster's does), and every instance in the cluster has all of those
// colours (every rank is alike, so the rank that runs stands for all). Anything else is not
// proved, and the run takes the whole cluster.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sim/internal/simgrid_setup.h"
#include "sim/simgrid_platform.h"

namespace fsdpsim::sim::detail {

struct WindowProof {
  bool exact = false;
  std::string reason;  // why not, in words (empty when exact)
  int rounds = 0;      // refinement rounds to the stable colouring
};

// Colour refinement of a flow-link graph (flows 0..F-1, links 0..L-1; route[f]: the links flow
// f crosses): refines the given colours until every flow's colour fixes the multiset of its
// links' colours and every link's the multiset of its flows' colours (stable), for at most
// `max_rounds` rounds, or until `refuted` (called with the flow colours after each round that
// split some class) returns true. Colours are renumbered; two vertices share a colour afterwards
// only if they shared one before.
struct Refinement {
  int rounds = 0;
  bool stable = false;
};
Refinement refine_colours(const std::vector<std::vector<int>>& route, std::vector<int>& flow_colour,
                          std::vector<int>& link_colour, int max_rounds = 1 << 30,
                          const std::function<bool(const std::vector<int>&)>& refuted = nullptr);

// Proves windows of one cluster: the whole cluster's flow graph is built once.
class WindowProver {
 public:
  // `groups`: the schedule's flow groups (collective_groups); `whole`: the platform of the whole
  // cluster (kept by reference).
  WindowProver(const planner::Schedule& schedule, std::vector<GroupUse> groups, const Platform& whole);
  ~WindowProver();
  WindowProver(const WindowProver&) = delete;
  WindowProver& operator=(const WindowProver&) = delete;
  // `window`: a window of chosen nodes of the same cluster, built with the same options.
  WindowProof prove(const Platform& window) const;
  // Why no window can be proved whatever its nodes (the ranks are not alike); empty otherwise.
  const std::string& ranks_differ() const { return ranks_differ_; }

  struct Graph;  // a platform's flows and their routes (simgrid_window.cpp)

 private:
  const planner::Schedule* schedule_;
  std::vector<GroupUse> groups_;
  std::unique_ptr<Graph> whole_;
  std::string ranks_differ_;
};

}  // namespace fsdpsim::sim::detail
