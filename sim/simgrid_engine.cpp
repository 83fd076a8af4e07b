// The SimGrid engine's setup half (sim/internal/simgrid_setup.h): window and run shape, the
// resource guard's price of a run, platform XML, and the forked simulating process. The step
// itself runs in the SimGrid half, opened on demand (sim/simgrid_module.h).
#include "sim/simgrid_engine.h"

#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <map>
#include <stdexcept>

#include "models/json_input.h"
#include "planner/cost_model.h"
#include "sim/internal/simgrid_flows.h"
#include "sim/internal/simgrid_setup.h"
#include "sim/internal/simgrid_window.h"
#include "sim/simgrid_module.h"
#include "sim/simgrid_platform.h"

namespace fsdpsim::sim {

using detail::collective_groups;
using detail::flow_group_of;
using detail::GroupUse;
using detail::RunShape;
using planner::Op;
using planner::OpKind;
using planner::Schedule;
using planner::Stream;

namespace {

// Worlds up to this many ranks are simulated whole when ranks differ (stragglers, slow links).
constexpr int kWholeWorldRanks = 512;
// A window of more ranks than this is refused when every rank must run as actors.
constexpr int kMaxActorRanks = 8192;

// The resource guard's cost model of a simulation (estimate_simgrid_cost), fitted (least squares
// on relative error) on 18 runs of this engine (2026-12-05, session 19; docs/reliability.md,
// "Resource guard", has every run and its error): Llama-3.1-8B on 1-600 rail-optimized DGX
// H100 nodes, 4-64 of them with every rank as actors, Llama-3.1-70B symmetric on 100 nodes and
// with every rank as actors on 32-1,024 nodes (256-8,192 ranks); held out: per-step flows, fat
// trees, GPT-2, HSDP, a straggler's window, 1,000 nodes in a proved window. Memory is the peak
// RSS of the process and its simulating child: a base, per flow, per pair of hosts (of which
// SimGrid's own route table is 8 bytes: a Full zone keeps a table_size x table_size table of
// route pointers, simgrid/simgrid src/kernel/routing/FullZone.cpp, FullZone::check_routing_table,
// v3.32), and what each rank run as actors keeps per op (below, not fitted). Time is CPU seconds
// (the planning parent and the simulating child): a base (start-up, planning, opening SimGrid),
// per flow, per other activity (an exec or sleep of a rank run as actors), and per pair of
// flows in flight together, whose cost depends on how flows are sent: host-to-host flows pay
// SimGrid's scan of its detached comms (docs/simgrid.md, "Scale"), matched flows do not but
// cost more each (two comms, their simcalls and wake-ups).
constexpr double kBaseBytes = 37.4e6;
constexpr double kBytesPerFlow = 64.9;
constexpr double kBytesPerHostPair = 18.5;
constexpr double kBaseSeconds = 0.103;
constexpr double kSecondsPerFlow = 1.51e-6;
constexpr double kSecondsPerActivity = 0.87e-6;
constexpr double kSecondsPerFlowPair = 7.96e-9;         // host-to-host flows
constexpr double kSecondsPerMatchedFlow = 13.4e-6;      // on top of kSecondsPerFlow
constexpr double kSecondsPerMatchedFlowPair = 1.96e-9;  // instead of kSecondsPerFlowPair
constexpr double kBytesPerRankOp = sizeof(OpTiming) + 2;

// ---------------------------------------------------------------------------------------
// Window selection

}  // namespace

namespace detail {

int flow_group_of(const Schedule& s, const Op& op) {
  return op.group + static_cast<int>(flow_pattern(op.kind)) * static_cast<int>(s.groups.size());
}

std::vector<GroupUse> collective_groups(const Schedule& s) {
  const int n_groups = static_cast<int>(s.groups.size());
  std::vector<char> used(static_cast<std::size_t>(n_groups) * kFlowPatternCount, 0);
  for (const Op& op : s.ops)
    if (planner::is_collective(op.kind) && op.group >= 0 && op.group < n_groups && op.comm_bytes > 0 &&
        s.groups[op.group].ranks > 1)
      used[flow_group_of(s, op)] = 1;
  std::vector<GroupUse> out;
  for (int f = 0; f < static_cast<int>(used.size()); ++f) {
    if (!used[f]) continue;
    const int g = f % n_groups;
    out.push_back({g, static_cast<FlowPattern>(f / n_groups), f, group_layout(s, g)});
  }
  return out;
}

}  // namespace detail

namespace {

// Windows (in nodes, ascending) that are periods of the cluster for these groups.
std::vector<int> window_candidates(const Schedule& s, const planner::ClusterSpec& c, const FabricOptions& fabric) {
  const int M = c.nodes, G = c.gpus_per_node;
  if (M <= 1) return {1};
  int K = fabric.nodes_per_leaf > 0 ? fabric.nodes_per_leaf : default_nodes_per_leaf(c);
  K = std::min(K, M);
  const int L = (M + K - 1) / K;
  if (L > 1 && (fabric.placement == Placement::spread || M % K != 0)) return {M};
  const std::vector<GroupUse> groups = collective_groups(s);
  // Per group: the node period its layout needs, and whether it needs two members per window.
  std::vector<std::pair<int, bool>> needs;  // (period in nodes, consecutive = false / strided = true)
  for (const GroupUse& g : groups) {
    const GroupLayout& l = g.layout;
    if (!l.strided) {
      if (l.size <= G) {
        if (G % l.size != 0) return {M};
      } else {
        if (l.size % G != 0) return {M};
        needs.push_back({l.size / G, false});
      }
    } else {
      if (l.stride < G) {
        if (G % l.stride != 0) return {M};
      } else {
        if (l.stride % G != 0) return {M};
        needs.push_back({l.stride / G, true});
      }
    }
  }
  std::vector<int> out;
  for (int P = 1; P < M; ++P) {
    if (M % P != 0) continue;
    if (L > 1 && P % K != 0) continue;
    bool ok = true;
    for (const auto& [period, strided] : needs) {
      if (strided) ok = ok && P % period == 0 && P / period >= 2;
      else ok = ok && (P % period == 0 || period % P == 0);
    }
    if (ok) out.push_back(P);
  }
  out.push_back(M);
  return out;
}

// Every window flow lands on a distinct host pair with one route: no self flows, and two ring
// edges that map to the same window pair cross the same links.
bool window_is_consistent(const Platform& p, const std::vector<GroupUse>& groups) {
  std::map<std::pair<int, int>, std::vector<int>> table;
  for (const GroupUse& g : groups)
    for (int inst : window_instances(g.layout, p))
      for (const RingEdge& e : collective_edges(g.pattern, g.layout, inst, p)) {
        const int dst = p.window_rank(e.dst);
        if (dst == e.src) return false;
        std::vector<int> r = p.route(e.src, e.dst);
        auto [it, fresh] = table.emplace(std::make_pair(e.src, dst), r);
        if (!fresh && it->second != r) return false;
      }
  return true;
}

// Windows of chosen nodes to try where the cluster has no shorter period, smallest first; each is
// used only once proved (simgrid_window.h), so this list is a guess at what may fold, not a rule.
// Packed placement: the first t nodes of leaf 0 and the last leaf (a node count that is not a
// multiple of the leaf: the partial leaf), t = 1, 2, 4, ... up to the whole leaf 0, then the first
// two leaves and the last. A ring over the cluster leaves leaf 0 once and the last leaf once, and
// the window's contracted ring crosses from one to the other as often; groups of t nodes need t
// of leaf 0's. Spread placement (every node's neighbours sit under other leaves, whose uplinks
// carry every node's flows): whole leaves, the first two, then three.
std::vector<std::vector<int>> node_window_candidates(const Platform& whole) {
  const int L = whole.leaves(), K = whole.nodes_per_leaf(), M = whole.nodes();
  std::vector<std::vector<int>> out;
  if (L < 2) return out;
  auto add = [&](std::vector<int> nodes) {
    std::sort(nodes.begin(), nodes.end());
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    if (static_cast<int>(nodes.size()) < M && std::find(out.begin(), out.end(), nodes) == out.end())
      out.push_back(std::move(nodes));
  };
  if (whole.placement() == Placement::packed) {
    std::vector<int> last;
    for (int n = (L - 1) * K; n < M; ++n) last.push_back(n);
    for (int t = 1;; t = std::min(2 * t, K)) {
      std::vector<int> nodes = last;
      for (int n = 0; n < t; ++n) nodes.push_back(n);
      add(nodes);
      if (t == K) break;
    }
    if (L > 3) {
      std::vector<int> nodes = last;
      for (int n = 0; n < 2 * K; ++n) nodes.push_back(n);
      add(nodes);
    }
  } else {
    for (int leaves = 2; leaves <= std::min(3, L - 1); ++leaves) {
      std::vector<int> nodes;
      for (int n = 0; n < M; ++n)
        if (whole.leaf_of(n) < leaves) nodes.push_back(n);
      add(nodes);
    }
  }
  return out;
}

struct WindowChoice {
  int nodes = 0;
  std::vector<int> node_list;  // a window of chosen nodes
  std::string fallback;        // why none folds the cluster, if a window of chosen nodes was tried
};

// The smallest period of the cluster that is consistent; for a symmetric run without one, the
// first window of chosen nodes proved exact; else the whole cluster.
WindowChoice choose_window(const Schedule& s, const planner::ClusterSpec& c, const planner::NcclParams& nccl,
                           const FabricOptions& fabric, bool symmetric) {
  const std::vector<GroupUse> groups = collective_groups(s);
  for (int P : window_candidates(s, c, fabric)) {
    if (P == c.nodes) break;
    if (window_is_consistent(Platform::build(c, nccl, fabric, P), groups)) return {P, {}, ""};
  }
  WindowChoice choice{c.nodes, {}, ""};
  if (!symmetric || groups.empty()) return choice;
  const Platform whole = Platform::build(c, nccl, fabric, c.nodes);
  const std::vector<std::vector<int>> candidates = node_window_candidates(whole);
  if (candidates.empty()) return choice;
  const detail::WindowProver prover(s, groups, whole);
  if (!prover.ranks_differ().empty()) {
    choice.fallback = prover.ranks_differ();
    return choice;
  }
  for (const std::vector<int>& nodes : candidates) {
    const detail::WindowProof proof = prover.prove(Platform::build_nodes(c, nccl, fabric, nodes));
    if (proof.exact) return {static_cast<int>(nodes.size()), nodes, ""};
    // The smallest window's reason: the larger ones fail mostly for the same.
    if (choice.fallback.empty()) choice.fallback = proof.reason;
  }
  return choice;
}

}  // namespace

int symmetric_window_nodes(const Schedule& schedule, const planner::ClusterSpec& cluster, const FabricOptions& fabric) {
  return symmetric_window(schedule, cluster, fabric).nodes;
}

SymmetricWindow symmetric_window(const Schedule& schedule, const planner::ClusterSpec& cluster,
                                 const FabricOptions& fabric) {
  WindowChoice w = choose_window(schedule, cluster, planner::NcclParams::defaults_for(cluster), fabric, true);
  return {w.nodes, std::move(w.node_list), std::move(w.fallback)};
}

namespace detail {

InputError no_such_link(const SimgridOptions& options, std::size_t i, const std::string& where) {
  return InputError(options.file, "simulation.slow_links[" + std::to_string(i) + "].link",
                    "\"" + options.slow_links[i].link + "\" matches no link of " + where);
}

namespace {
constexpr const char* kLinkNames =
    "the platform (names look like node0.gpu0.nvlink.up, node0.gpu0.pcie.up, node0.nic0.up, node0.bridge, "
    "leaf0.up, leaf0.rail0.up)";
}  // namespace

void apply_slow_links(Platform& platform, const SimgridOptions& options) {
  for (std::size_t i = 0; i < options.slow_links.size(); ++i)
    if (platform.scale_links(options.slow_links[i].link, options.slow_links[i].bandwidth_factor) == 0)
      throw no_such_link(options, i, kLinkNames);
}

// The fewest flows one collective's round must send for matched flows: 2,048. Measured CPU
// against host-to-host flows: at a window of 256 ranks (512 flows a round) 30-60% more, at
// 1,024 ranks with `--symmetry off` (2,048 a round) 17-21% less (load 3.5; within the noise at
// load 8-15), at 8,192 ranks the whole step in 281 s against unfinished after 341 s; the scan
// they avoid grows with the flows in flight, their own cost does not (docs/simgrid.md, "Scale").
// FSDPSIM_SIMGRID_MATCHED_FLOWS_MIN overrides it (the tests set 0: matched wherever possible).
int matched_flows_min() {
  const char* v = std::getenv("FSDPSIM_SIMGRID_MATCHED_FLOWS_MIN");
  return v != nullptr && *v != '\0' ? std::max(0, std::atoi(v)) : 2048;
}

double process_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return ru.ru_utime.tv_sec + ru.ru_stime.tv_sec + 1e-6 * (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

// Symmetric when ranks are alike (no stragglers, slow links or user platform). The window is
// the whole cluster, or a period of it when ranks are alike (or differ only by stragglers,
// which then repeat in every period, in worlds too large to run rank by rank). Slow links are
// named by real node: the whole cluster.
RunShape choose_shape(const Schedule& s, const ClusterPlatform& p, const SimgridOptions& options) {
  RunShape shape;
  shape.xml = !options.platform_xml.empty();
  const bool uniform = options.stragglers.empty() && options.slow_links.empty() && !shape.xml;
  shape.symmetric = uniform && options.symmetry == Symmetry::automatic;
  shape.window_nodes = p.cluster.nodes;
  if (!shape.xml && options.symmetry == Symmetry::automatic && options.slow_links.empty() &&
      (shape.symmetric || s.world_size > kWholeWorldRanks)) {
    WindowChoice w = choose_window(s, p.cluster, p.nccl, options.fabric, shape.symmetric);
    shape.window_nodes = w.nodes;
    shape.window_node_list = std::move(w.node_list);
    shape.window_fallback = std::move(w.fallback);
  }
  if (!shape.xml && !shape.symmetric && !options.slow_links.empty() && s.world_size > kMaxActorRanks)
    throw std::invalid_argument("slow links make every rank differ: a world of " + std::to_string(s.world_size) +
                                " ranks is too large to simulate rank by rank (at most " +
                                std::to_string(kMaxActorRanks) + ")");
  return shape;
}

Platform window_platform(const ClusterPlatform& p, const SimgridOptions& options, const RunShape& shape) {
  return shape.window_node_list.empty()
             ? Platform::build(p.cluster, p.nccl, options.fabric, shape.window_nodes)
             : Platform::build_nodes(p.cluster, p.nccl, options.fabric, shape.window_node_list);
}

// Every rank as actors is refused past kMaxActorRanks ranks.
void check_actor_ranks(bool symmetric, int window_ranks) {
  if (!symmetric && window_ranks > kMaxActorRanks)
    throw std::invalid_argument("simulating " + std::to_string(window_ranks) + " ranks one by one is too large (at most " +
                                std::to_string(kMaxActorRanks) + "); drop simulation.symmetry=off, the stragglers or the slow links");
}

// Automatic: per-step rounds only for small worlds. The real world decides, not the window:
// a symmetric 256-rank world folds into a window of 16 ranks, but its rings still have 255
// steps, and per-step rounds of them took 5 s where aggregated flows take 0.5 s.
FlowMode choose_flow_mode(int world_ranks, const SimgridOptions& options) {
  return options.flow_mode != FlowMode::automatic ? options.flow_mode
         : world_ranks <= options.per_step_max_ranks ? FlowMode::per_step
                                                     : FlowMode::aggregated;
}

}  // namespace detail

using detail::apply_slow_links;
using detail::check_actor_ranks;
using detail::choose_flow_mode;
using detail::choose_shape;

std::string simgrid_platform_xml(const Schedule& schedule, const ClusterPlatform& p, const SimgridOptions& options) {
  Platform platform = Platform::build(p.cluster, p.nccl, options.fabric, p.cluster.nodes);
  apply_slow_links(platform, options);
  std::vector<std::pair<int, int>> pairs;
  std::map<std::pair<int, int>, bool> seen;
  for (const GroupUse& g : collective_groups(schedule))
    for (int inst : window_instances(g.layout, platform))
      for (const RingEdge& e : collective_edges(g.pattern, g.layout, inst, platform))
        if (seen.emplace(std::make_pair(e.src, e.dst), true).second) pairs.push_back({e.src, e.dst});
  return platform.to_xml(pairs);
}

SimgridCost estimate_simgrid_cost(const Schedule& s, const ClusterPlatform& p, const SimgridOptions& options) {
  // The setup simulate_simgrid_in_process makes, without SimGrid.
  const RunShape shape = choose_shape(s, p, options);
  Platform platform = detail::window_platform(p, options, shape);
  if (!shape.xml) apply_slow_links(platform, options);
  SimgridCost c;
  c.window_node_list = shape.window_node_list;
  c.window_fallback = shape.window_fallback;
  c.window_nodes = platform.window_nodes();
  c.window_ranks = platform.window_ranks();
  check_actor_ranks(shape.symmetric, c.window_ranks);
  c.simulated_ranks = shape.symmetric ? 1 : c.window_ranks;
  c.flow_mode = choose_flow_mode(s.world_size, options);
  c.links = static_cast<double>(platform.links().size());
  // Flows: each collective sends, per round, one flow per merged ring edge of every instance of
  // its group in the window (send_flows); rounds: 1, or the ring's steps in per-step mode.
  std::vector<double> edges(s.groups.size() * kFlowPatternCount, 0);
  for (const GroupUse& g : collective_groups(s))
    for (int inst : window_instances(g.layout, platform))
      edges[g.flow] += static_cast<double>(collective_edges(g.pattern, g.layout, inst, platform).size());
  double largest_round = 0;
  for (const Op& op : s.ops) {
    const int flow = planner::is_collective(op.kind) && op.group >= 0 ? flow_group_of(s, op) : -1;
    if (flow >= 0 && edges[flow] > 0) {
      const double rounds = c.flow_mode == FlowMode::per_step ? ring_steps(op.kind, s.groups[op.group].ranks) : 1;
      c.flows += rounds * edges[flow];
      c.flow_pairs += rounds * edges[flow] * edges[flow];
      largest_round = std::max(largest_round, edges[flow]);
      c.other_activities += rounds;  // the latency sleep of each round
    } else if (op.stream != Stream::host) {
      c.other_activities += c.simulated_ranks;
    }
  }
  const double hosts = c.window_ranks;
  c.memory_bytes = kBaseBytes + kBytesPerFlow * c.flows + kBytesPerHostPair * hosts * hosts +
                   kBytesPerRankOp * c.simulated_ranks * static_cast<double>(s.ops.size());
  // Matched flows as the step chooses them (prepare_matched_flows): every window rank runs, one
  // aggregated round per collective, and some round sends enough flows. (The step also needs
  // every edge's receiver in its instance, which holds when the window is the whole cluster, the
  // only window every rank of which runs past the 2,048 flows: a straggler's is one leaf.)
  c.matched_flows = !shape.symmetric && c.flow_mode == FlowMode::aggregated && !options.host_to_host_flows &&
                    largest_round >= detail::matched_flows_min();
  c.seconds = kBaseSeconds + kSecondsPerFlow * c.flows + kSecondsPerActivity * c.other_activities +
              (c.matched_flows ? kSecondsPerMatchedFlow * c.flows + kSecondsPerMatchedFlowPair * c.flow_pairs
                               : kSecondsPerFlowPair * c.flow_pairs);
  c.memory_basis = "SimGrid's route table of " + std::to_string(c.window_ranks) + " x " +
                   std::to_string(c.window_ranks) + " hosts, " + std::to_string(c.window_nodes) + " nodes' links, " +
                   std::to_string(static_cast<long long>(c.flows)) + " flows, " + std::to_string(c.simulated_ranks) +
                   " rank" + (c.simulated_ranks == 1 ? "" : "s") + " of " + std::to_string(s.ops.size()) + " ops";
  return c;
}

SimgridResult simulate_simgrid_in_process(const Schedule& s, const planner::OpCosts& costs, const ClusterPlatform& p,
                                          const SimgridOptions& options) {
  static bool engine_used = false;
  if (engine_used)
    throw std::logic_error("SimGrid runs one simulation per process (a second engine would continue the first one's clock)");
  planner::check_costs(s, costs);
  if (s.world_size != p.cluster.world_size())
    throw std::invalid_argument("the schedule's world of " + std::to_string(s.world_size) + " ranks is not the cluster's " +
                                std::to_string(p.cluster.world_size()));
  // Opened before the flag is set: a missing module leaves the process able to try again.
  SimgridStepRunner run_step = simgrid_step_runner();
  engine_used = true;
  SimgridResult result;
  run_step(s, costs, p, options, result);
  return result;
}

void compare_with_analytic(SimgridResult& result, const Schedule& s, const StepTiming& analytic) {
  result.analytic = analytic;
  for (CollectiveStats& c : result.collectives) {
    c.analytic_seconds = 0;
    for (const Op& op : s.ops)
      if (planner::is_collective(op.kind) && planner::to_string(op.kind) == c.kind)
        c.analytic_seconds += analytic.ops[op.id].end - analytic.ops[op.id].start;
  }
}

// The fsdpsim binary asks jemalloc for transparent huge pages (tools/main.cpp), which a planning
// command's small heap gains from. A simulation with every rank runs thousands of actors whose
// stacks and activities spread over the heap: with 2 MiB pages the 1,024-GPU run of
// docs/simgrid.md took 1.2 GB instead of 160 MB. The simulating child turns them off for itself
// (prctl PR_SET_THP_DISABLE: no huge page is faulted in for the process from then on, whatever
// madvise said).
namespace {
void without_huge_pages() { prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0); }
}  // namespace

SimgridResult simulate_simgrid(const Schedule& schedule, const planner::OpCosts& costs, const ClusterPlatform& platform,
                               const SimgridOptions& options) {
  if (options.in_process) return simulate_simgrid_in_process(schedule, costs, platform, options);
  // The module is opened here, not in the child: once per process however many simulations
  // fork from it (sweep --resimulate-top), and a missing module is reported by this process.
  simgrid_step_runner();
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error(std::string("pipe: ") + std::strerror(errno));
  std::cout.flush();
  std::cerr.flush();
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    throw std::runtime_error(std::string("fork: ") + std::strerror(errno));
  }
  if (pid == 0) {
    close(fds[0]);
    without_huge_pages();
    nlohmann::json out;
    try {
      out = {{"result", simgrid_result_to_json(simulate_simgrid_in_process(schedule, costs, platform, options))}};
    } catch (const InputError& e) {
      out = {{"error", e.what()}, {"file", e.file()}, {"path", e.json_path()}, {"input", true}};
    } catch (const std::exception& e) {
      out = {{"error", e.what()}};
    }
    const std::string text = out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    std::size_t off = 0;
    while (off < text.size()) {
      const ssize_t w = write(fds[1], text.data() + off, text.size() - off);
      if (w <= 0) {
        if (errno == EINTR) continue;
        _exit(3);
      }
      off += static_cast<std::size_t>(w);
    }
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[1 << 16];
  while (true) {
    const ssize_t r = read(fds[0], buf, sizeof buf);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    text.append(buf, static_cast<std::size_t>(r));
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (text.empty()) {
    std::string why = WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                          : "exited with status " + std::to_string(WEXITSTATUS(status));
    throw std::runtime_error("the SimGrid simulation process " + why + " without a result");
  }
  const nlohmann::json out = nlohmann::json::parse(text);
  if (out.contains("error")) {
    if (out.value("input", false)) {
      // Rebuild the InputError so callers see the same file and path.
      const std::string file = out.value("file", ""), path = out.value("path", "");
      std::string msg = out["error"].get<std::string>();
      std::string prefix = (file.empty() ? std::string("<input>") : file) + (path.empty() ? "" : ": " + path) + ": ";
      if (msg.rfind(prefix, 0) == 0) msg = msg.substr(prefix.size());
      throw InputError(file, path, msg);
    }
    throw std::runtime_error(out["error"].get<std::string>());
  }
  return simgrid_result_from_json(out["result"]);
}

}  // namespace fsdpsim::sim
