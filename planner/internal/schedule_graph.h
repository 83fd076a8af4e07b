// The Schedule as a Boost.Graph DAG: an edge u -> v when v cannot start before u ends
// (same-stream order, cross-stream events, CPU waits). Topological order, cycle
// detection on imported schedules and the critical path come from it.
#pragma once

#include <vector>

#include <boost/graph/adjacency_list.hpp>

#include "planner/schedule.h"

namespace fsdpsim::planner {

using ScheduleGraph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS>;

ScheduleGraph build_graph(const Schedule& schedule);

// Ops in an order that respects every edge; throws InputError naming ops on a cycle.
std::vector<int> topological_order(const Schedule& schedule, const std::string& file = "");

// The longest path through the DAG with the given per-op durations (seconds): the ops
// that bound the step when streams overlap perfectly.
std::vector<int> critical_path(const Schedule& schedule, const std::vector<double>& durations_seconds);

}  // namespace fsdpsim::planner
