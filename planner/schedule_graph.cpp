#include "planner/internal/schedule_graph.h"

#include <algorithm>
#include <array>
#include <deque>

#include <boost/graph/topological_sort.hpp>

#include "models/json_input.h"

namespace fsdpsim::planner {

ScheduleGraph build_graph(const Schedule& s) {
  ScheduleGraph g(s.ops.size());
  std::array<int, kStreamCount> last_on_stream;
  last_on_stream.fill(-1);
  for (const Op& op : s.ops) {
    int& last = last_on_stream[static_cast<int>(op.stream)];
    if (last >= 0) boost::add_edge(last, op.id, g);
    last = op.id;
    for (int d : op.deps) boost::add_edge(d, op.id, g);
    for (int d : op.cpu_waits) boost::add_edge(d, op.id, g);
  }
  return g;
}

std::vector<int> topological_order(const Schedule& s, const std::string& file) {
  ScheduleGraph g = build_graph(s);
  std::vector<ScheduleGraph::vertex_descriptor> reversed;
  try {
    boost::topological_sort(g, std::back_inserter(reversed));
  } catch (const boost::not_a_dag&) {
    // Name the ops on a cycle: peel off every op with no remaining predecessor (Kahn);
    // what is left contains the cycle.
    std::vector<int> indegree(s.ops.size(), 0);
    for (auto [e, end] = boost::edges(g); e != end; ++e) ++indegree[boost::target(*e, g)];
    std::deque<int> ready;
    for (std::size_t v = 0; v < indegree.size(); ++v)
      if (indegree[v] == 0) ready.push_back(static_cast<int>(v));
    while (!ready.empty()) {
      int v = ready.front();
      ready.pop_front();
      for (auto [e, end] = boost::out_edges(v, g); e != end; ++e)
        if (--indegree[boost::target(*e, g)] == 0) ready.push_back(static_cast<int>(boost::target(*e, g)));
    }
    std::string names;
    int shown = 0;
    for (std::size_t v = 0; v < indegree.size() && shown < 4; ++v) {
      if (indegree[v] > 0) {
        names += (names.empty() ? "" : ", ") + std::to_string(v) + " (" + s.ops[v].name + ")";
        ++shown;
      }
    }
    throw InputError(file, "ops", "the schedule has a dependency cycle through ops " + names);
  }
  std::vector<int> order(reversed.rbegin(), reversed.rend());
  return order;
}

std::vector<int> critical_path(const Schedule& s, const std::vector<double>& durations) {
  ScheduleGraph g = build_graph(s);
  std::vector<int> order = topological_order(s);
  std::vector<double> finish(s.ops.size(), 0);
  std::vector<int> via(s.ops.size(), -1);
  for (int v : order) {
    double start = 0;
    for (auto [e, end] = boost::in_edges(v, g); e != end; ++e) {
      int u = static_cast<int>(boost::source(*e, g));
      if (finish[u] > start) {
        start = finish[u];
        via[v] = u;
      }
    }
    finish[v] = start + durations[v];
  }
  int last = static_cast<int>(std::max_element(finish.begin(), finish.end()) - finish.begin());
  std::vector<int> path;
  for (int v = last; v >= 0; v = via[v]) path.push_back(v);
  std::reverse(path.begin(), path.end());
  return path;
}

}  // namespace fsdpsim::planner
