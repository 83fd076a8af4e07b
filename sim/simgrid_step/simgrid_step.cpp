// The SimGrid half of the SimGrid engine: the simulated step (sim/simgrid_engine.h says what it
// runs; sim/internal/simgrid_setup.h why this file is apart). The only file that includes SimGrid.
#include <fnmatch.h>
#include <malloc.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <vector>

#include <simgrid/s4u.hpp>
#include <simgrid/simix.hpp>
#include <xbt/log.h>

#include "models/json_input.h"
#include "planner/cost_model.h"
#include "sim/internal/simgrid_flows.h"
#include "sim/internal/simgrid_setup.h"
#include "sim/simgrid_engine.h"
#include "sim/simgrid_platform.h"

namespace fsdpsim::sim {

namespace sg4 = simgrid::s4u;
using detail::collective_groups;
using detail::flow_group_of;
using detail::GroupUse;
using detail::no_such_link;
using planner::Op;
using planner::OpKind;
using planner::Schedule;
using planner::Stream;

namespace {

constexpr double kHostSpeed = 1e9;  // host flop/s per nominal second of work

// [Fewer simcalls] Most s4u calls an actor makes are simcalls: the actor hands the call to the
// maestro and waits for its next scheduling round (two context switches), even when the call
// answers at once (SimGrid 3.32, src/simix/libsmx.cpp). They cost about 1,000 instructions
// each: in a 128-rank run with matched flows (callgrind), 916k simcalls for 185k events were
// about 30% of its 3.17G instructions, the network solver's 2,658 solves about 12%.
// `this_actor::execute` alone makes five (the exec's flops, host, priority, start, then the
// wait). Calls that answer at once and follow one another without the clock moving are
// therefore made as one simcall (`in_kernel`): inside it the maestro runs them directly.
// What stays in the actor: what records the calling actor (`Exec::init` the exec's issuer,
// `Mailbox::put_init` and `get_init` a comm's sender and receiver), and every blocking call.
template <class F>
void in_kernel(F&& code) {
  simgrid::kernel::actor::simcall_answered(std::forward<F>(code));
}

// ---------------------------------------------------------------------------------------
// Simulation state

// Actors blocked until a condition on shared state holds (StepSimulation::wait_until). Each
// keeps its condition; notify() wakes only the actors whose condition now holds: waking every
// blocked actor of a rank on every change (its CPU and each stream) cost a context switch
// each, most of them to go back to sleep. The conditions only ever become true by a change
// that is followed by a notify() (ops issued or done, a launch queue drained, an instance
// done), and a woken actor checks its condition again.
struct Waiters {
  struct Blocked {
    sg4::Semaphore* semaphore;
    bool (*holds)(const void*);
    const void* condition;
  };
  std::vector<Blocked> blocked;
  // The list is settled before the first release: a release hands control to the actors it
  // wakes, which may change it (or destroy it) before the release returns.
  void notify() {
    if (blocked.empty()) return;
    std::vector<sg4::Semaphore*> wake;
    std::size_t kept = 0;
    for (std::size_t i = 0; i < blocked.size(); ++i) {
      if (blocked[i].holds(blocked[i].condition)) wake.push_back(blocked[i].semaphore);
      else blocked[kept++] = blocked[i];
    }
    blocked.resize(kept);
    if (wake.empty()) return;
    in_kernel([&wake] {  // [Fewer simcalls] one simcall for every actor woken
      for (sg4::Semaphore* w : wake) w->release();
    });
  }
};

struct RankState {
  int rank = 0;
  sg4::Host* host = nullptr;
  double speed = 1;
  std::vector<char> issued, done;
  StepTiming timing;
  std::array<double, planner::kStreamCount> queued{};
  std::array<int, planner::kStreamCount> last_finished{};
  double work_per_second = kHostSpeed;  // Exec amount per nominal second of compute
  int comm_running = 0;
  sg4::ExecPtr interference;             // user platforms: a competing exec while comm runs
  double cpu_end = 0;
  Waiters waiters;
};

struct CollInfo {
  bool active = false;  // a collective with work to do
  int group = -1;
  double latency = 0;   // NCCL's latency term
  double transfer = 0;  // the rest of NCCL's time
};

struct GroupFlows {
  GroupLayout layout;
  int ranks = 1;
  // The window's instances by slot (0..n-1, ascending instance ids; slot = id for a period of
  // the cluster), and each instance id's slot (-1: no member in the window).
  std::vector<int> instance_ids, slot;
  std::vector<std::vector<RingEdge>> edges;                         // per window instance (slot)
  std::vector<std::vector<std::vector<int>>> routes;                // per instance, per edge: link ids
  std::vector<std::vector<std::pair<sg4::Host*, sg4::Host*>>> ends;  // per instance, per edge
  std::vector<int> active;                                          // simulated members per instance
  // Matched flows (StepSimulation::matched): per instance, the edges each window rank sends and
  // receives, and one mailbox per edge (its sender puts, its receiver gets).
  std::vector<std::unordered_map<int, std::vector<int>>> sends, receives;  // per instance: rank -> edges
  std::vector<std::vector<sg4::Mailbox*>> mailboxes;                       // per instance, per edge
  double bandwidth = 0;      // per-rank wire bytes/s alone on the ideal fabric
  double route_latency = 0;  // the platform latency the flows see
  std::string bottleneck;    // the link kind that bounds it alone
};

struct Instance {
  int arrived = 0;
  int left = 0;
  bool posted = false;  // matched flows: every member arrived and the latency term is spent
  int finished = 0;     // matched flows: members whose own flows are done
  bool done = false;
  Waiters waiters;
};

// One step on the simulated cluster: the state the actors share and the actors themselves.
// SimGrid runs every actor on this process's one engine, one at a time, so the actors reach
// the state through `this` without locks.
class StepSimulation {
 public:
  StepSimulation(const Schedule& schedule, const planner::OpCosts& costs)
      : s(&schedule), in(&costs), previous_on_communicator(planner::previous_on_communicator(schedule)) {}

  const Schedule* s = nullptr;
  const planner::OpCosts* in = nullptr;
  std::vector<int> previous_on_communicator;  // [Communicator order]
  bool symmetric = false;
  bool per_step = false;
  // Every flow's two ends run as actors (every window rank simulated, aggregated flows): each
  // member sends its ring edges itself as mailbox messages that their receivers get, instead of
  // the last member to arrive sending them all as host-to-host comms. Same flows, same start
  // (when the last member arrives and the latency term is spent) and the same end for every
  // member (when the instance's last flow is done), but no detached comms: SimGrid 3.32 keeps
  // those in the maestro's one list and removes each finished one by a scan of that list
  // (CommImpl::finish), which made a run quadratic in the flows in flight (docs/simgrid.md).
  bool matched = false;
  bool bounded_queue = false;
  bool pstates = true;       // slowdown under communication by a host pstate (built platforms)
  double slowdown = 0;       // compute_slowdown_under_comm
  std::vector<CollInfo> coll;
  std::vector<GroupFlows> groups;  // indexed by schedule group
  std::array<std::vector<int>, planner::kStreamCount> queue;
  std::vector<RankState> ranks;    // simulated ranks (RankState::rank: the real rank)
  std::vector<int> rank_index;     // window rank -> index in ranks, -1 if not simulated
  std::unordered_map<long long, Instance> instances;
  int max_instances = 1;
  // Links (platform or user XML) and what they carried.
  std::vector<PlatformLink> links;
  std::vector<double> link_bytes;
  std::vector<std::vector<std::pair<double, double>>> link_busy;
  double events = 0, flows = 0;

  void start_actors();
  void cpu_actor(int rank_index);
  void stream_actor(int rank_index, int stream);

 private:
  std::unordered_map<long, sg4::SemaphorePtr> semaphores_;  // per actor, for wait_until

  // Blocks the calling actor until pred() holds; each waiting actor blocks on its own
  // semaphore (not Actor::suspend, which would also suspend the activities it started).
  template <class P>
  void wait_until(Waiters& w, P pred) {
    while (!pred()) {
      sg4::SemaphorePtr& mine = semaphores_[sg4::this_actor::get_pid()];
      if (!mine) mine = sg4::Semaphore::create(0);
      w.blocked.push_back({mine.get(), [](const void* p) { return (*static_cast<const P*>(p))(); }, &pred});
      mine->acquire();
    }
  }
  void sleep_seconds(double seconds);
  void sleep_until(double when);
  void comm_begin(RankState& rs);
  void comm_end(RankState& rs);
  void send_flows(int op, const std::vector<int>& instances);
  void exchange_flows(const RankState& rs, int op, int instance);
  void account(const GroupFlows& g, int instance, int edge, double bytes, double start, double end);
  void run_collective(RankState& rs, int op);
  void run_op(RankState& rs, int op);
};

bool all_done(const RankState& rs, const planner::IdList& ids) {
  for (int d : ids)
    if (!rs.done[d]) return false;
  return true;
}

void latest(const RankState& rs, const planner::IdList& ids, double& when, int& who) {
  for (int d : ids)
    if (rs.timing.ops[d].end > when || (rs.timing.ops[d].end == when && who < 0)) {
      when = rs.timing.ops[d].end;
      who = d;
    }
}

// Sleeps until the clock reads `when` (a CPU that ran ahead catching up); no event when it
// already does.
void StepSimulation::sleep_until(double when) {
  const double now = sg4::Engine::get_clock();
  if (when <= now) return;
  events += 1;
  sg4::this_actor::sleep_for(when - now);
}

void StepSimulation::sleep_seconds(double seconds) {
  if (seconds <= 0) return;
  events += 1;
  sg4::this_actor::sleep_for(seconds);
}

// While a collective of the rank is in flight its compute runs at 1/(1 + slowdown): the host
// switches to its second pstate, or (a user's platform, whose hosts are sealed) an exec of
// priority `slowdown` competes with the compute exec for the host.
void StepSimulation::comm_begin(RankState& rs) {
  if (rs.comm_running++ != 0 || slowdown <= 0) return;
  if (pstates) {
    rs.host->set_pstate(1);
  } else {
    rs.interference = sg4::this_actor::exec_init(1e18);
    rs.interference->set_priority(slowdown);
    rs.interference->start();
    events += 1;
  }
}

void StepSimulation::comm_end(RankState& rs) {
  if (--rs.comm_running != 0 || slowdown <= 0) return;
  if (pstates) {
    rs.host->set_pstate(0);
  } else if (rs.interference) {
    rs.interference->cancel();
    rs.interference = nullptr;
  }
}

void StepSimulation::send_flows(int op, const std::vector<int>& which_instances) {
  const CollInfo& ci = coll[op];
  const GroupFlows& g = groups[ci.group];
  const int steps = per_step ? ring_steps(s->ops[op].kind, g.ranks) : 1;
  const double pre = std::max(0.0, ci.latency / steps - g.route_latency);
  const double bytes_per_rank = ci.transfer * g.bandwidth / steps;
  std::vector<sg4::CommPtr> comms;
  std::vector<std::pair<int, int>> which;  // (instance, edge)
  for (int step = 0; step < steps; ++step) {
    sleep_seconds(pre);
    if (bytes_per_rank <= 0) continue;
    comms.clear();
    which.clear();
    in_kernel([&] {  // [Fewer simcalls] the round's flows started in one simcall
      for (int inst : which_instances) {
        const auto& edges = g.edges[inst];
        for (std::size_t e = 0; e < edges.size(); ++e) {
          const double bytes = bytes_per_rank * edges[e].fraction;
          if (bytes < 1) continue;
          const auto& [from, to] = g.ends[inst][e];
          sg4::CommPtr c = sg4::Comm::sendto_init(from, to);
          c->set_payload_size(static_cast<std::uint64_t>(std::llround(bytes)));
          c->start();
          comms.push_back(c);
          which.push_back({inst, static_cast<int>(e)});
        }
      }
    });
    for (auto it = comms.rbegin(); it != comms.rend(); ++it) (*it)->wait();
    events += static_cast<double>(comms.size());
    flows += static_cast<double>(comms.size());
    for (std::size_t k = 0; k < comms.size(); ++k)
      account(g, which[k].first, which[k].second, bytes_per_rank * g.edges[which[k].first][which[k].second].fraction,
              comms[k]->get_start_time(), comms[k]->get_finish_time());
  }
}

// The bytes and busy time of one finished flow on the links of its route.
void StepSimulation::account(const GroupFlows& g, int inst, int edge, double bytes, double start, double end) {
  for (int l : g.routes[inst][edge]) {
    link_bytes[l] += bytes;
    auto& busy = link_busy[l];
    if (!busy.empty() && start <= busy.back().second && start >= busy.back().first)
      busy.back().second = std::max(busy.back().second, end);
    else
      busy.push_back({start, end});
  }
}

// Matched flows: the calling member's share of one aggregated round of its instance (the
// edges it sends, the edges it receives), posted at once and waited for. The member accounts
// the flows it receives (a matched put and get are one comm: the same start and finish), so
// every flow is accounted once. The sizes are send_flows' (one round), so both ends skip the
// same sub-byte edges. The sends are waited for too, although the instance's end implies them:
// SimGrid drops a comm from its sender's list of activities only when the sender waits for it
// (CommImpl::finish, v3.32), and sends left there made a 2,048-rank run 1.5x slower and 2.3x
// larger (tried).
void StepSimulation::exchange_flows(const RankState& rs, int op, int inst) {
  const CollInfo& ci = coll[op];
  const GroupFlows& g = groups[ci.group];
  const double bytes_per_rank = ci.transfer * g.bandwidth;
  if (bytes_per_rank <= 0) return;
  static const std::vector<int> none;
  const auto out = g.sends[inst].find(rs.rank);
  const auto in = g.receives[inst].find(rs.rank);
  const std::vector<int>& sent = out == g.sends[inst].end() ? none : out->second;
  const std::vector<int>& got = in == g.receives[inst].end() ? none : in->second;
  static char payload;  // a mailbox message carries a pointer; the simulated size is the flow's
  std::vector<void*> sink(got.size(), nullptr);
  std::vector<sg4::CommPtr> sends, receives;
  std::vector<int> which;  // the edge of each receive
  sends.reserve(sent.size());
  // The comms are made here (a comm's sender or receiver is the actor that makes it) and
  // started together in one simcall ([Fewer simcalls]).
  for (int e : sent) {
    const double bytes = bytes_per_rank * g.edges[inst][e].fraction;
    if (bytes < 1) continue;
    sends.push_back(g.mailboxes[inst][e]->put_init(&payload, static_cast<std::uint64_t>(std::llround(bytes))));
  }
  for (std::size_t k = 0; k < got.size(); ++k)
    if (bytes_per_rank * g.edges[inst][got[k]].fraction >= 1) {
      receives.push_back(g.mailboxes[inst][got[k]]->get_init()->set_dst_data(&sink[k], sizeof(void*)));
      which.push_back(got[k]);
    }
  in_kernel([&] {
    for (const sg4::CommPtr& c : sends) c->start();
    for (const sg4::CommPtr& c : receives) c->start();
  });
  for (const sg4::CommPtr& c : receives) c->wait();
  for (const sg4::CommPtr& c : sends) c->wait();
  events += static_cast<double>(which.size());
  flows += static_cast<double>(which.size());
  for (std::size_t k = 0; k < which.size(); ++k)
    account(g, inst, which[k], bytes_per_rank * g.edges[inst][which[k]].fraction, receives[k]->get_start_time(),
            receives[k]->get_finish_time());
}

void StepSimulation::run_collective(RankState& rs, int op) {
  const CollInfo& ci = coll[op];
  if (!ci.active) return;
  GroupFlows& g = groups[ci.group];
  const int inst = g.slot[group_instance(g.layout, rs.rank)];
  const long long key = static_cast<long long>(op) * max_instances + inst;
  comm_begin(rs);
  Instance& instance = instances[key];
  ++instance.arrived;
  const int expected = g.active[inst];
  if (matched) {
    // Every member posts its flows once the last one has arrived and spent the latency term
    // (as send_flows' one round), and every member leaves when the instance's last flow is done.
    if (instance.arrived < expected) {
      wait_until(instance.waiters, [&] { return instance.posted; });
    } else {
      sleep_seconds(std::max(0.0, ci.latency - g.route_latency));
      instance.posted = true;
      instance.waiters.notify();
    }
    exchange_flows(rs, op, inst);
    if (++instance.finished < expected) {
      wait_until(instance.waiters, [&] { return instance.done; });
    } else {
      instance.done = true;
      instance.waiters.notify();
    }
  } else if (instance.arrived < expected) {
    wait_until(instance.waiters, [&] { return instance.done; });
  } else {
    if (symmetric) {
      std::vector<int> all(g.edges.size());
      std::iota(all.begin(), all.end(), 0);
      send_flows(op, all);
    } else {
      send_flows(op, {inst});
    }
    instance.done = true;
    instance.waiters.notify();
  }
  if (++instance.left == expected) instances.erase(key);
  comm_end(rs);
}

// The rank's compute: an exec of `flops` on its host at the host's current pstate.
// [Fewer simcalls] two simcalls where this_actor::execute makes five.
void compute(sg4::Host* host, double flops) {
  sg4::ExecPtr exec = sg4::Exec::init();  // in the actor: the exec's issuer is the calling actor
  in_kernel([&] { exec->set_flops_amount(flops)->set_host(host)->start(); });
  exec->wait();
}

void StepSimulation::run_op(RankState& rs, int i) {
  const Op& op = s->ops[i];
  if (planner::is_collective(op.kind)) {
    run_collective(rs, i);
    return;
  }
  const double d = in->duration_seconds[i];
  if (d <= 0) return;
  if (op.stream == Stream::compute) {
    events += 1;
    compute(rs.host, d * rs.work_per_second);
  } else if (op.kind == OpKind::h2d || op.kind == OpKind::d2h || op.kind == OpKind::nvme_read ||
             op.kind == OpKind::nvme_write) {
    sleep_seconds(d);  // PCIe and NVMe run at their own speed on a slow GPU
  } else {
    sleep_seconds(d / rs.speed);
  }
}

void StepSimulation::stream_actor(int rank_index, int st) {
  RankState& rs = ranks[rank_index];
  const auto& ops = s->ops;
  const auto& q = queue[st];
  for (std::size_t h = 0; h < q.size(); ++h) {
    const int i = q[h];
    const Op& op = ops[i];
    const int communicator_previous = previous_on_communicator[i];
    wait_until(rs.waiters, [&] {
      return rs.issued[i] && all_done(rs, op.deps) && (communicator_previous < 0 || rs.done[communicator_previous]);
    });
    OpTiming& ot = rs.timing.ops[i];
    sleep_until(ot.enqueue);  // issued by a CPU running ahead of the clock
    ot.start = sg4::Engine::get_clock();
    double when = ot.enqueue;
    ot.started_by = Constraint::cpu_issue;
    ot.started_by_op = -1;
    if (h > 0) {
      const int prev = q[h - 1];
      if (rs.timing.ops[prev].end >= when) {
        when = rs.timing.ops[prev].end;
        ot.started_by = Constraint::stream_order;
        ot.started_by_op = prev;
      }
    }
    for (int d : op.deps)
      if (rs.timing.ops[d].end >= when) {
        when = rs.timing.ops[d].end;
        ot.started_by = Constraint::dependency;
        ot.started_by_op = d;
      }
    if (communicator_previous >= 0 && rs.timing.ops[communicator_previous].end > when) {
      when = rs.timing.ops[communicator_previous].end;
      ot.started_by = Constraint::communicator;
      ot.started_by_op = communicator_previous;
    }
    run_op(rs, i);
    ot.end = sg4::Engine::get_clock();
    rs.done[i] = 1;
    rs.last_finished[st] = i;
    if (bounded_queue) rs.queued[st] -= in->kernels[i];
    rs.waiters.notify();
  }
}

void StepSimulation::cpu_actor(int rank_index) {
  RankState& rs = ranks[rank_index];
  const auto& ops = s->ops;
  double cpu_free = 0;
  const int n = static_cast<int>(ops.size());
  for (int i = 0; i < n; ++i) {
    const Op& op = ops[i];
    const bool host = op.stream == Stream::host;
    const int st = static_cast<int>(op.stream);
    bool queue_blocked = false;
    auto may_issue = [&] {
      if (!all_done(rs, op.cpu_waits)) return false;
      if (host && !all_done(rs, op.deps)) return false;
      if (bounded_queue && !host && rs.queued[st] > 0 && rs.queued[st] + in->kernels[i] > in->launch_queue_kernels) {
        queue_blocked = true;
        return false;
      }
      return true;
    };
    // The CPU runs ahead of the clock (cpu_free may lie in the future) while nothing stops
    // it: what lets it issue now still lets it at cpu_free (ops only get done, the launch
    // queue only drains between its own issues). Otherwise it catches up with cpu_free and
    // waits there, as a CPU that had slept through its issue time would.
    // Where the CPU was free before any wait: what set the issue is judged against it, as the
    // analytic engine judges it (a wait that ended at the clock would otherwise never be later than
    // the clock, and the critical path would name the previous issue across the wait's gap).
    const double free_before_wait = cpu_free;
    if (!may_issue()) {
      sleep_until(cpu_free);
      queue_blocked = false;
      wait_until(rs.waiters, may_issue);
      cpu_free = std::max(cpu_free, sg4::Engine::get_clock());
    }
    OpTiming& ot = rs.timing.ops[i];
    double when = free_before_wait;
    int who = -1;
    latest(rs, op.cpu_waits, when, who);
    Constraint by = Constraint::cpu_wait;
    if (host && !op.deps.empty()) {
      const int before = who;
      latest(rs, op.deps, when, who);
      if (who != before) by = Constraint::dependency;
    }
    if (queue_blocked) {
      const int q = rs.last_finished[st];
      if (q >= 0 && rs.timing.ops[q].end > when) {
        when = rs.timing.ops[q].end;
        who = q;
        by = Constraint::launch_queue;
      }
    }
    if (who >= 0 && rs.timing.ops[who].end > free_before_wait) {
      ot.issued_by = by;
      ot.issued_by_op = who;
    } else if (i > 0) {
      ot.issued_by = Constraint::previous_issue;
      ot.issued_by_op = i - 1;
    } else {
      ot.issued_by = Constraint::step_start;
    }
    ot.issue_start = cpu_free;
    ot.issue_seconds = in->issue_seconds[i];
    ot.nominal_seconds = in->duration_seconds[i];
    if (bounded_queue && !host) rs.queued[st] += in->kernels[i];
    // The issue time is not slept: the stream that runs the op starts it no earlier than
    // ot.enqueue (stream_actor). A host op runs on the CPU: done only once the clock is there.
    // [Kernel pipelining] the GPU may run the op from its issue lead on; the CPU issues on.
    ot.enqueue = cpu_free + (host ? ot.issue_seconds : in->issue_lead(i));
    cpu_free += ot.issue_seconds > 0 ? ot.issue_seconds : 0;
    if (host) {
      ot.start = ot.enqueue;
      ot.started_by = Constraint::cpu_issue;
      cpu_free += ot.nominal_seconds > 0 ? ot.nominal_seconds : 0;
      sleep_until(cpu_free);
      ot.end = sg4::Engine::get_clock();
      rs.done[i] = 1;
    }
    rs.issued[i] = 1;
    rs.waiters.notify();
  }
  rs.cpu_end = cpu_free;
}

// Each GPU stream's ops in issue order (the stream actors' queues; host ops run on the CPU).
std::array<std::vector<int>, planner::kStreamCount> stream_queues(const Schedule& s) {
  std::array<std::vector<int>, planner::kStreamCount> queues;
  for (const Op& op : s.ops)
    if (op.stream != Stream::host) queues[static_cast<int>(op.stream)].push_back(op.id);
  return queues;
}

// The streams with ops: each is an actor per simulated rank (start_actors), which the engine
// must know before it starts (start_engine sizes the actors' stacks by their count).
int streams_with_ops(const std::array<std::vector<int>, planner::kStreamCount>& queues) {
  int n = 0;
  for (const std::vector<int>& q : queues) n += q.empty() ? 0 : 1;
  return n;
}

// A CPU actor per simulated rank and an actor per stream with ops (`queue`, stream_queues).
void StepSimulation::start_actors() {
  for (std::size_t k = 0; k < ranks.size(); ++k) {
    const int idx = static_cast<int>(k);
    const std::string prefix = "rank" + std::to_string(ranks[k].rank);
    sg4::Actor::create(prefix + ".cpu", ranks[k].host, [this, idx] { cpu_actor(idx); });
    for (int st = 0; st < planner::kStreamCount; ++st)
      if (!queue[st].empty())
        sg4::Actor::create(prefix + "." + planner::to_string(static_cast<Stream>(st)), ranks[k].host,
                           [this, idx, st] { stream_actor(idx, st); });
  }
}

// ---------------------------------------------------------------------------------------
// Results

std::vector<LinkStats> link_stats(const StepSimulation& sim, double step) {
  std::vector<LinkStats> out;
  for (std::size_t l = 0; l < sim.links.size(); ++l) {
    if (sim.link_bytes[l] <= 0) continue;
    LinkStats st;
    st.name = sim.links[l].name;
    st.kind = to_string(sim.links[l].kind);
    st.bandwidth = sim.links[l].bandwidth;
    st.bytes = sim.link_bytes[l];
    std::vector<std::pair<double, double>> busy = sim.link_busy[l];
    std::sort(busy.begin(), busy.end());
    double covered = 0, cur_s = -1, cur_e = -1;
    for (const auto& [s, e] : busy) {
      if (s > cur_e) {
        if (cur_e > cur_s) covered += cur_e - cur_s;
        cur_s = s;
        cur_e = e;
      } else {
        cur_e = std::max(cur_e, e);
      }
    }
    if (cur_e > cur_s) covered += cur_e - cur_s;
    st.busy_seconds = covered;
    st.utilisation = step > 0 && st.bandwidth > 0 ? st.bytes / (st.bandwidth * step) : 0;
    st.busy_utilisation = covered > 0 && st.bandwidth > 0 ? st.bytes / (st.bandwidth * covered) : 0;
    out.push_back(st);
  }
  std::sort(out.begin(), out.end(), [](const LinkStats& a, const LinkStats& b) {
    return a.utilisation > b.utilisation || (a.utilisation == b.utilisation && a.name < b.name);
  });
  return out;
}

std::vector<LinkClassStats> class_stats(const std::vector<LinkStats>& links) {
  std::map<std::string, LinkClassStats> by;
  for (const LinkStats& l : links) {
    LinkClassStats& c = by[l.kind];
    c.kind = l.kind;
    ++c.links;
    c.bytes += l.bytes;
    c.mean_utilisation += l.utilisation;
    if (l.utilisation > c.max_utilisation || c.busiest.empty()) {
      c.max_utilisation = l.utilisation;
      c.busiest = l.name;
    }
  }
  std::vector<LinkClassStats> out;
  for (auto& [k, c] : by) {
    c.mean_utilisation /= std::max(1, c.links);
    out.push_back(c);
  }
  std::sort(out.begin(), out.end(),
            [](const LinkClassStats& a, const LinkClassStats& b) { return a.max_utilisation > b.max_utilisation; });
  return out;
}

// Natural order of host names ("node2" before "node10").
bool natural_less(const std::string& a, const std::string& b) {
  std::size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    if (std::isdigit(static_cast<unsigned char>(a[i])) && std::isdigit(static_cast<unsigned char>(b[j]))) {
      std::size_t i2 = i, j2 = j;
      while (i2 < a.size() && std::isdigit(static_cast<unsigned char>(a[i2]))) ++i2;
      while (j2 < b.size() && std::isdigit(static_cast<unsigned char>(b[j2]))) ++j2;
      const std::string na = a.substr(i, i2 - i), nb = b.substr(j, j2 - j);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = i2;
      j = j2;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  return a.size() - i < b.size() - j;
}

// Rank -> host of a user's platform: hosts named like the built platform ("node<n>.gpu<g>"),
// else "rank<r>", else the platform's hosts in natural name order.
std::vector<sg4::Host*> xml_hosts(const sg4::Engine& e, int world, int gpn, const std::string& file) {
  std::vector<sg4::Host*> out(world, nullptr);
  bool all = true;
  for (int r = 0; r < world && all; ++r) {
    out[r] = e.host_by_name_or_null("node" + std::to_string(r / gpn) + ".gpu" + std::to_string(r % gpn));
    all = out[r] != nullptr;
  }
  if (all) return out;
  all = true;
  for (int r = 0; r < world && all; ++r) {
    out[r] = e.host_by_name_or_null("rank" + std::to_string(r));
    all = out[r] != nullptr;
  }
  if (all) return out;
  std::vector<sg4::Host*> hosts = e.get_all_hosts();
  if (static_cast<int>(hosts.size()) < world)
    throw InputError(file, "", "the platform has " + std::to_string(hosts.size()) + " hosts for a world of " +
                                   std::to_string(world) + " ranks (name them node<n>.gpu<g> or rank<r>)");
  std::sort(hosts.begin(), hosts.end(),
            [](const sg4::Host* a, const sg4::Host* b) { return natural_less(a->get_name(), b->get_name()); });
  hosts.resize(world);
  return hosts;
}


// The kernel's limit on a process's memory mappings (vm.max_map_count; Linux's default 65,536).
long max_memory_mappings() {
  long limit = 65536;
  if (FILE* f = std::fopen("/proc/sys/vm/max_map_count", "r")) {
    if (std::fscanf(f, "%ld", &limit) != 1) limit = 65536;
    std::fclose(f);
  }
  return limit;
}

// The SimGrid engine with fsdpsim's network model settings. `actors`: how many actors the run
// will create. SimGrid guards each actor's stack with a protected page, which splits the
// stack's mapping in two: past about vm.max_map_count / 2 actors (8,192 ranks run as actors:
// 40,960) creating an actor fails ("Failed to protect stack"). Such runs go without guard pages
// (each stack one mapping); the others keep them. A guardless stack is calloc'ed
// (xbt_malloc0, src/kernel/context/ContextSwapped.cpp, v3.32): glibc would serve it from the
// heap once its sliding mmap threshold has risen past the stack size and zero it page by page
// (10 GiB resident for 40,960 stacks of 256 KiB); a fixed threshold at the stack size keeps each
// stack a fresh mapping whose pages stay untouched until used.
std::unique_ptr<sg4::Engine> start_engine(long actors) {
  xbt_log_control_set("root.thresh:critical");
  int argc = 1;
  static char name[] = "fsdpsim";
  char* argv[] = {name, nullptr};
  auto engine = std::make_unique<sg4::Engine>(&argc, argv);
  sg4::Engine::set_config("network/model:CM02");
  sg4::Engine::set_config("network/crosstraffic:0");
  sg4::Engine::set_config("network/TCP-gamma:1e30");  // no TCP window bound
  constexpr int kStackKib = 256;
  sg4::Engine::set_config("contexts/stack-size:" + std::to_string(kStackKib));
  if (2 * actors + 8192 > max_memory_mappings()) {
    sg4::Engine::set_config("contexts/guard-size:0");
    mallopt(M_MMAP_THRESHOLD, kStackKib * 1024);
  }
  return engine;
}

// Hosts and links of a user's platform file; slow links scale the matching links.
std::vector<sg4::Link*> load_user_platform(sg4::Engine& engine, StepSimulation& sim, std::vector<sg4::Host*>& hosts,
                                           int world, int gpus_per_node, const SimgridOptions& options) {
  // SimGrid's own parse (XML syntax, DTD, routing) fails on the user's file: bad input, named as
  // check_platform_file's findings are (exit 2), not an internal error.
  try {
    engine.load_platform(options.platform_xml);
  } catch (const std::exception& e) {
    throw InputError(options.platform_xml, "", std::string("SimGrid cannot load this platform: ") + e.what());
  }
  hosts = xml_hosts(engine, world, gpus_per_node, options.platform_xml);
  std::vector<sg4::Link*> sg_links = engine.get_all_links();
  for (sg4::Link* l : sg_links) {
    PlatformLink pl;
    pl.name = l->get_name();
    pl.bandwidth = pl.nominal_bandwidth = l->get_bandwidth();
    pl.latency_seconds = l->get_latency();
    sim.links.push_back(pl);
  }
  for (std::size_t i = 0; i < options.slow_links.size(); ++i) {
    int matched = 0;
    for (std::size_t k = 0; k < sg_links.size(); ++k)
      if (fnmatch(options.slow_links[i].link.c_str(), sim.links[k].name.c_str(), 0) == 0) {
        sim.links[k].bandwidth *= options.slow_links[i].bandwidth_factor;
        sg_links[k]->set_bandwidth(sim.links[k].bandwidth);
        ++matched;
      }
    if (matched == 0) throw no_such_link(options, i, options.platform_xml);
  }
  return sg_links;
}

// Hosts (two pstates: nominal, and slowed under communication) and links of the built
// platform, with the routes of every flow the collectives send.
std::vector<sg4::Link*> build_platform(const Schedule& s, const Platform& platform, StepSimulation& sim,
                                       std::vector<sg4::Host*>& hosts, const std::vector<double>& speed) {
  auto pstates = [&](double f) {
    std::vector<double> v{kHostSpeed * f};
    if (sim.slowdown > 0) v.push_back(kHostSpeed * f / (1.0 + sim.slowdown));
    return v;
  };
  auto* zone = sg4::create_full_zone("fsdpsim");
  for (int r = 0; r < platform.window_ranks(); ++r) hosts[r] = zone->create_host(platform.host_name(r), pstates(speed[r]));
  std::vector<sg4::Link*> sg_links;
  for (const PlatformLink& l : platform.links()) {
    sg4::Link* link = zone->create_link(l.name, l.bandwidth);
    link->set_latency(l.latency_seconds);
    sg_links.push_back(link->seal());
  }
  sim.links = platform.links();
  std::map<std::pair<int, int>, bool> added;
  for (const GroupUse& g : collective_groups(s))
    for (int inst : window_instances(g.layout, platform))
      for (const RingEdge& e : collective_edges(g.pattern, g.layout, inst, platform)) {
        const int src = platform.window_rank(e.src), dst = platform.window_rank(e.dst);
        if (!added.emplace(std::make_pair(src, dst), true).second) continue;
        std::vector<sg4::LinkInRoute> route;
        for (int l : platform.route(e.src, e.dst)) route.emplace_back(sg_links[l]);
        zone->add_route(hosts[src]->get_netpoint(), hosts[dst]->get_netpoint(), nullptr, nullptr, route, false);
      }
  zone->seal();
  return sg_links;
}

bool is_nic(LinkKind k) { return k == LinkKind::nic_up || k == LinkKind::nic_down; }

// Each used group's ring edges, routes and end hosts per window instance, and the bandwidth
// and latency its ring gets alone on the ideal fabric (flow sizes are NCCL's transfer time
// times that bandwidth: alone on an ideal fabric a collective takes exactly NCCL's time).
void prepare_group_flows(const Schedule& s, const Platform& platform, const Platform& ideal, bool xml,
                         const std::vector<sg4::Host*>& hosts, const std::vector<sg4::Link*>& sg_links,
                         StepSimulation& sim) {
  sim.groups.resize(s.groups.size() * kFlowPatternCount);
  std::map<const sg4::Link*, int> xml_link_index;
  for (std::size_t k = 0; k < sg_links.size(); ++k) xml_link_index[sg_links[k]] = static_cast<int>(k);
  for (const GroupUse& gu : collective_groups(s)) {
    GroupFlows& g = sim.groups[gu.flow];
    g.layout = gu.layout;
    g.ranks = gu.layout.size;
    g.instance_ids = window_instances(g.layout, platform);
    const int n = static_cast<int>(g.instance_ids.size());
    g.slot.assign(group_instances(g.layout, s.world_size), -1);
    for (int k = 0; k < n; ++k) g.slot[g.instance_ids[k]] = k;
    sim.max_instances = std::max(sim.max_instances, n);
    g.edges.resize(n);
    g.routes.resize(n);
    g.ends.resize(n);
    g.active.assign(n, 0);
    for (int k = 0; k < n; ++k) {
      g.edges[k] = collective_edges(gu.pattern, g.layout, g.instance_ids[k], platform);
      for (const RingEdge& e : g.edges[k]) {
        const int src = platform.window_rank(e.src), dst = platform.window_rank(e.dst);
        g.ends[k].push_back({hosts[src], hosts[dst]});
        if (xml) {
          std::vector<sg4::Link*> route;
          double latency = 0;
          hosts[src]->route_to(hosts[dst], route, &latency);
          std::vector<int> ids;
          for (sg4::Link* l : route) ids.push_back(xml_link_index.at(l));
          g.routes[k].push_back(ids);
        } else {
          g.routes[k].push_back(platform.route(e.src, e.dst));
        }
      }
    }
    // Alone on the ideal fabric: the most loaded link (per unit of per-rank wire bytes).
    // [Shared NICs] But the group's instances all run at once, and the cost model gives each
    // its share of the node's NICs (CostModel::nccl_view: HSDP's replicate group, one rank per
    // node, has 8 instances on 8-GPU nodes): a NIC's load is that of every instance crossing
    // it. Priced with one instance's load, the flows were sized at the NIC's whole speed
    // times a transfer time that already shared it, then shared again: one NIC per node made
    // an 8-node HSDP step 9.2 s where the analytic engine has 1.4 s (session 33).
    std::map<int, double> load;
    double latency = 0;
    for (const RingEdge& e : collective_edges(gu.pattern, g.layout, 0, ideal)) {
      const std::vector<int> r = ideal.route(e.src, e.dst);
      for (int l : r)
        if (!is_nic(ideal.links()[l].kind)) load[l] += e.fraction;
      latency = std::max(latency, ideal.route_latency(r));
    }
    for (int inst : window_instances(g.layout, ideal))
      for (const RingEdge& e : collective_edges(gu.pattern, g.layout, inst, ideal))
        for (int l : ideal.route(e.src, e.dst))
          if (is_nic(ideal.links()[l].kind)) load[l] += e.fraction;
    double worst = 0;
    for (const auto& [l, x] : load) {
      const double t = x / ideal.links()[l].nominal_bandwidth;
      if (t > worst) {
        worst = t;
        g.bottleneck = to_string(ideal.links()[l].kind);
      }
    }
    g.bandwidth = worst > 0 ? 1.0 / worst : 0;
    if (xml) {
      latency = 0;
      for (const auto& instance_routes : g.routes)
        for (const auto& r : instance_routes) {
          double l = 0;
          for (int id : r) l += sim.links[id].latency_seconds;
          latency = std::max(latency, l);
        }
    }
    g.route_latency = latency;
  }
}

// Each collective's latency and transfer parts (OpCosts), and whether it sends flows at all.
void prepare_collectives(const Schedule& s, const planner::OpCosts& in, StepSimulation& sim) {
  sim.coll.resize(s.ops.size());
  for (const Op& op : s.ops) {
    if (!planner::is_collective(op.kind)) continue;
    CollInfo& ci = sim.coll[op.id];
    ci.group = flow_group_of(s, op);
    const double d = in.duration_seconds[op.id];
    ci.latency = in.latency_seconds.empty() ? 0 : std::min(d, in.latency_seconds[op.id]);
    ci.transfer = d - ci.latency;
    ci.active = d > 0 && op.group >= 0 && s.groups[op.group].ranks > 1 && !sim.groups[ci.group].edges.empty();
  }
}

// The ranks run as actors (rank 0 alone when symmetric), their hosts and speeds, and how many
// simulated members each group instance waits for.
void prepare_ranks(const Schedule& s, const Platform& platform, bool xml, const std::vector<sg4::Host*>& hosts,
                   const std::vector<double>& speed, StepSimulation& sim) {
  const int window_ranks = platform.window_ranks();
  const int n = static_cast<int>(s.ops.size());
  std::vector<int> simulated;
  if (sim.symmetric) simulated.push_back(0);
  else
    for (int r = 0; r < window_ranks; ++r) simulated.push_back(r);
  sim.rank_index.assign(window_ranks, -1);
  sim.ranks.resize(simulated.size());
  for (std::size_t k = 0; k < simulated.size(); ++k) {
    RankState& rs = sim.ranks[k];
    const int w = simulated[k];
    rs.rank = platform.real_rank(w);
    rs.host = hosts[w];
    rs.speed = speed[w];
    // Built hosts run at kHostSpeed x speed; a user's hosts at their own speed.
    rs.work_per_second = xml ? rs.host->get_pstate_speed(0) / rs.speed : kHostSpeed;
    rs.issued.assign(n, 0);
    rs.done.assign(n, 0);
    rs.timing.ops.assign(n, OpTiming{});
    rs.last_finished.fill(-1);
    sim.rank_index[w] = static_cast<int>(k);
  }
  for (GroupFlows& g : sim.groups) {
    if (g.edges.empty()) continue;
    for (std::size_t k = 0; k < g.active.size(); ++k)
      for (int m : group_members(g.layout, s.world_size, g.instance_ids[k]))
        if (platform.in_window(m) && sim.rank_index[platform.window_rank(m)] >= 0) ++g.active[k];
  }
}

// Matched flows (StepSimulation::matched) when every flow's two ends run as actors: ranks differ
// (every window rank simulated), one aggregated round per collective, and the receiver of every
// edge (the window image of its destination) a simulated member of the same instance; and when
// a collective's round sends at least `min_flows` flows (its group's edges over the window's
// instances): a matched flow costs two comms, four simcalls and its members' wake-ups, which
// the scan it saves repays only with thousands of flows in flight. Each edge of a flow group
// gets one mailbox for all of the group's collectives: they never overlap (the schedule runs a
// group's collectives one after the other on every rank, planner::previous_on_communicator, and
// every member leaves one only when its instance's last flow is done), so a mailbox holds one
// message at a time and a get cannot match another collective's put.
void prepare_matched_flows(const Platform& platform, int min_flows, StepSimulation& sim) {
  if (min_flows < 0 || sim.symmetric || sim.per_step) return;
  std::size_t most = 0;
  for (const GroupFlows& g : sim.groups) {
    std::size_t round = 0;
    for (const auto& edges : g.edges) round += edges.size();
    most = std::max(most, round);
  }
  if (most < static_cast<std::size_t>(min_flows)) return;
  // The receiver of an edge is the window host of its destination (the image of a real rank
  // outside a period), named by that host's real rank, as RankState::rank names it.
  auto receiver = [&](const RingEdge& e) { return platform.real_rank(platform.window_rank(e.dst)); };
  for (const GroupFlows& g : sim.groups)
    for (std::size_t k = 0; k < g.edges.size(); ++k)
      for (const RingEdge& e : g.edges[k]) {
        if (sim.rank_index[platform.window_rank(e.src)] < 0 || sim.rank_index[platform.window_rank(e.dst)] < 0 ||
            group_instance(g.layout, e.src) != g.instance_ids[k] || group_instance(g.layout, receiver(e)) != g.instance_ids[k])
          return;
      }
  sim.matched = true;
  for (std::size_t f = 0; f < sim.groups.size(); ++f) {
    GroupFlows& g = sim.groups[f];
    g.sends.assign(g.edges.size(), {});
    g.receives.assign(g.edges.size(), {});
    g.mailboxes.assign(g.edges.size(), {});
    for (std::size_t inst = 0; inst < g.edges.size(); ++inst)
      for (std::size_t e = 0; e < g.edges[inst].size(); ++e) {
        const RingEdge& edge = g.edges[inst][e];
        g.sends[inst][edge.src].push_back(static_cast<int>(e));
        g.receives[inst][receiver(edge)].push_back(static_cast<int>(e));
        g.mailboxes[inst].push_back(sg4::Mailbox::by_name("flow" + std::to_string(f) + "." + std::to_string(inst) + "." +
                                                          std::to_string(e)));
      }
  }
}

// Per-rank timings summarised; the report rank's, the slowest's and the detail ranks' kept.
void collect_timings(const Schedule& s, const Platform& platform, const SimgridOptions& options, StepSimulation& sim,
                     SimgridResult& result) {
  const int n = static_cast<int>(s.ops.size());
  int slowest = 0;
  for (std::size_t k = 0; k < sim.ranks.size(); ++k) {
    RankState& rs = sim.ranks[k];
    for (int i = 0; i < n; ++i)
      if (!rs.done[i] && s.ops[i].stream != Stream::host)
        throw std::runtime_error("the SimGrid run ended before rank " + std::to_string(rs.rank) + " finished op " +
                                 std::to_string(i) + " (" + s.ops[i].name + ")");
    summarize_step(s, rs.timing, rs.cpu_end, sim.in->mfu_peak_flops);
    result.ranks.push_back({rs.rank, rs.timing.step_seconds, rs.timing.compute_seconds, rs.timing.exposed_comm_seconds,
                            rs.speed});
    if (rs.timing.step_seconds > sim.ranks[slowest].timing.step_seconds) slowest = static_cast<int>(k);
  }
  result.step_seconds = sim.ranks[slowest].timing.step_seconds;
  const int report = result.symmetric ? 0 : platform.window_rank(options.report_rank);
  const int report_index = report >= 0 && sim.rank_index[report] >= 0 ? sim.rank_index[report] : 0;
  result.report_rank = result.symmetric ? options.report_rank : sim.ranks[report_index].rank;
  result.timing = sim.ranks[report_index].timing;
  std::vector<int> detail = {report_index};
  if (slowest != report_index) detail.push_back(slowest);
  for (int r : options.detail_ranks)
    if (r >= 0 && r < s.world_size && platform.window_rank(r) >= 0) {
      const int idx = sim.rank_index[platform.window_rank(r)];
      if (idx >= 0 && std::find(detail.begin(), detail.end(), idx) == detail.end()) detail.push_back(idx);
    }
  for (int idx : detail)
    result.detail.push_back({result.symmetric ? options.report_rank : sim.ranks[idx].rank, sim.ranks[idx].timing});

  std::map<std::string, CollectiveStats> by_kind;
  for (const Op& op : s.ops) {
    if (!planner::is_collective(op.kind)) continue;
    CollectiveStats& c = by_kind[planner::to_string(op.kind)];
    c.kind = planner::to_string(op.kind);
    ++c.count;
    c.simgrid_seconds += result.timing.ops[op.id].end - result.timing.ops[op.id].start;
    c.nominal_seconds += sim.in->duration_seconds[op.id];
  }
  for (auto& [k, c] : by_kind) result.collectives.push_back(c);
}

// "node0, node96-node99": real node numbers, runs of consecutive ones joined.
std::string node_list_text(const std::vector<int>& nodes) {
  std::string out;
  for (std::size_t i = 0; i < nodes.size();) {
    std::size_t j = i;
    while (j + 1 < nodes.size() && nodes[j + 1] == nodes[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    out += "node";
    out += std::to_string(nodes[i]);
    if (j > i) {
      out += "-node";
      out += std::to_string(nodes[j]);
    }
    i = j + 1;
  }
  return out;
}

// The caveats of this run, in words.
void add_notes(const Schedule& s, const ClusterPlatform& p, const StepSimulation& sim, SimgridResult& result) {
  const int nodes = p.cluster.nodes;
  if (result.symmetric && !result.window_node_list.empty()) {
    result.notes.push_back("every rank is alike: rank " + std::to_string(sim.ranks.front().rank) +
                           " ran as actors; the flows of the ranks of " + std::to_string(result.window_nodes) + " of " +
                           std::to_string(nodes) + " nodes (" + node_list_text(result.window_node_list) +
                           "; each ring contracted to them) loaded the links, which carry what the whole cluster's "
                           "do (proved by colour refinement of the flows and links of both)");
  } else if (result.symmetric && result.window_nodes < nodes)
    result.notes.push_back("every rank is alike: rank 0 ran as actors; the flows of all ranks of " +
                           std::to_string(result.window_nodes) + " of " + std::to_string(nodes) +
                           " nodes (a period of the cluster) loaded the links");
  else if (result.symmetric && nodes > 1)
    result.notes.push_back("every rank is alike: rank 0 ran as actors; every rank's flows loaded the links");
  if (!result.window_fallback.empty())
    result.notes.push_back("no window folds the cluster: " + result.window_fallback +
                           "; every node's links ran (--json: simgrid.window_fallback)");
  if (!result.symmetric && result.window_nodes < nodes)
    result.notes.push_back("the world repeats every " + std::to_string(result.window_nodes) +
                           " nodes: the stragglers repeat in every period");
  if (result.flow_mode == FlowMode::per_step)
    result.notes.push_back("per-step flows: every ring step is its own round of messages (lock-step)");
  for (const GroupUse& gu : collective_groups(s)) {
    const GroupFlows& g = sim.groups[gu.flow];
    char buf[256];
    std::snprintf(buf, sizeof buf, "group \"%s\" (%d ranks)%s: alone it is bound by %s at %.1f GB/s per rank",
                  s.groups[gu.group].name.c_str(), g.ranks, gu.pattern == FlowPattern::all_to_all ? ", all-to-all" : "",
                  g.bottleneck.c_str(), g.bandwidth / 1e9);
    result.notes.push_back(buf);
  }
}

// simulate_simgrid_in_process past its checks.
void run_step(const Schedule& s, const planner::OpCosts& costs, const ClusterPlatform& p, const SimgridOptions& options,
              SimgridResult& result) {
  const auto wall0 = std::chrono::steady_clock::now();
  const double cpu0 = detail::process_cpu_seconds();

  result = SimgridResult{};
  result.world = s.world_size;
  const detail::RunShape shape = detail::choose_shape(s, p, options);
  result.symmetric = shape.symmetric;
  Platform platform = detail::window_platform(p, options, shape);
  // The ideal fabric a group's ring is priced on alone (prepare_group_flows): the whole cluster
  // where the window does not hold instance 0's every edge with its real destinations (a user's
  // platform; a window of whole leaves, whose rings are contracted).
  const Platform ideal = shape.xml || platform.node_window()
                             ? Platform::build(p.cluster, p.nccl, options.fabric, p.cluster.nodes)
                             : platform;
  if (!shape.xml) detail::apply_slow_links(platform, options);
  const int window_ranks = platform.window_ranks();
  result.window_nodes = platform.window_nodes();
  result.window_node_list = shape.window_node_list;
  result.window_fallback = shape.window_fallback;
  result.platform = shape.xml ? "SimGrid platform " + options.platform_xml : platform.description();
  result.platform_xml = options.platform_xml;
  detail::check_actor_ranks(result.symmetric, window_ranks);
  result.flow_mode = detail::choose_flow_mode(s.world_size, options);

  // Actors: a CPU and one per stream with ops for each rank run (start_actors).
  std::array<std::vector<int>, planner::kStreamCount> queues = stream_queues(s);
  const long actor_ranks = shape.symmetric ? 1 : window_ranks;
  std::unique_ptr<sg4::Engine> engine = start_engine(actor_ranks * (1 + streams_with_ops(queues)));
  StepSimulation sim(s, costs);
  sim.queue = std::move(queues);
  sim.symmetric = result.symmetric;
  sim.per_step = result.flow_mode == FlowMode::per_step;
  sim.bounded_queue = costs.launch_queue_kernels > 0 && !costs.kernels.empty();
  sim.pstates = !shape.xml;
  sim.slowdown = costs.compute_slowdown_under_comm;

  std::vector<double> speed(window_ranks, 1.0);
  for (const Straggler& st : options.stragglers)
    if (platform.window_rank(st.rank) >= 0) speed[platform.window_rank(st.rank)] = st.compute_speed;
  std::vector<sg4::Host*> hosts(window_ranks, nullptr);
  const std::vector<sg4::Link*> sg_links =
      shape.xml ? load_user_platform(*engine, sim, hosts, s.world_size, p.cluster.gpus_per_node, options)
                : build_platform(s, platform, sim, hosts, speed);
  sim.link_bytes.assign(sim.links.size(), 0.0);
  sim.link_busy.assign(sim.links.size(), {});
  prepare_group_flows(s, platform, ideal, shape.xml, hosts, sg_links, sim);
  prepare_collectives(s, costs, sim);
  prepare_ranks(s, platform, shape.xml, hosts, speed, sim);
  prepare_matched_flows(platform, options.host_to_host_flows ? -1 : detail::matched_flows_min(), sim);
  result.simulated_ranks = static_cast<int>(sim.ranks.size());
  result.matched_flows = sim.matched;
  sim.start_actors();
  engine->run();

  collect_timings(s, platform, options, sim, result);
  result.links = link_stats(sim, result.step_seconds);
  result.link_classes = class_stats(result.links);
  add_notes(s, p, sim, result);
  result.events = sim.events;
  result.flows = sim.flows;
  result.wall_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - wall0).count();
  result.cpu_seconds = std::max(0.0, detail::process_cpu_seconds() - cpu0);
  result.events_per_second = result.wall_seconds > 0 ? result.events / result.wall_seconds : 0;
}

}  // namespace

}  // namespace fsdpsim::sim

extern "C" void fsdpsim_simgrid_run_step(const fsdpsim::planner::Schedule& schedule,
                                         const fsdpsim::planner::OpCosts& costs,
                                         const fsdpsim::sim::ClusterPlatform& platform,
                                         const fsdpsim::sim::SimgridOptions& options,
                                         fsdpsim::sim::SimgridResult& result) {
  fsdpsim::sim::run_step(schedule, costs, platform, options, result);
}
