// The resource guard (sim/resource_guard.h): the machine's memory, budgets and their messages,
// and the SimGrid engine's cost estimate against the engine's own counts.
#include <gtest/gtest.h>

#include <chrono>
#include <set>
#include <mutex>
#include <condition_variable>
#include <thread>

#include "matched_flows_min.h"
#include "models/json_input.h"
#include "sim/resource_guard.h"
#include "sim/simgrid_engine.h"
#include "sim/estimate.h"
#include "sim/scenario_loader.h"
#include "sim/simgrid_options.h"
#include "sim/sweep.h"
#include "planner/sweep_space.h"

namespace fsdpsim::sim {
namespace {

const std::string kRoot = FSDPSIM_SOURCE_ROOT;

TEST(ResourceGuard, MemTotalOfProcMeminfo) {
  EXPECT_EQ(meminfo_total_bytes("MemTotal:       24684136 kB\nMemFree:        20000000 kB\n"), 24684136.0 * 1024);
  EXPECT_EQ(meminfo_total_bytes("MemFree: 1 kB\nMemTotal: 2 kB\n"), 2048.0);
  EXPECT_EQ(meminfo_total_bytes("nothing here"), 0.0);
  std::string source;
  EXPECT_GT(machine_memory_bytes(&source), 0.0);  // this machine: /proc/meminfo or sysconf
  EXPECT_FALSE(source.empty());
}

TEST(ResourceGuard, BudgetsAndWhatIsOver) {
  const ResourceBudget given = budget_from_options(2, 60);
  EXPECT_EQ(given.memory_bytes, 2.0 * 1024 * 1024 * 1024);
  EXPECT_EQ(given.seconds, 60);
  const ResourceBudget by_default = budget_from_options(-1, -1);
  EXPECT_EQ(by_default.memory_bytes, kDefaultMemoryShare * machine_memory_bytes());
  EXPECT_EQ(by_default.seconds, kDefaultSeconds);
  EXPECT_NE(by_default.memory_source.find("half of this machine's"), std::string::npos) << by_default.memory_source;
  EXPECT_EQ(budget_from_options(1, 0).seconds, 0) << "0: no time limit";

  const ResourceEstimate small{1e9, 30, "a model", "some flows"};
  EXPECT_EQ(over_budget(small, given), "");
  const ResourceEstimate big{3.0 * 1024 * 1024 * 1024, 7200, "a route table", "many flows"};
  const std::string over = over_budget(big, given);
  EXPECT_NE(over.find("about 3.0 GiB of memory (a route table), over --max-memory 2.0 GiB"), std::string::npos) << over;
  EXPECT_NE(over.find("about 2.0 h (many flows), over --max-time 60 s"), std::string::npos) << over;
  EXPECT_EQ(over_budget(big, budget_from_options(0, 0)), "") << "0 GiB and 0 s: no limits";
  // A budget under 10 s keeps three significant digits: 1e-300 s read "0 s" against "about 0 s".
  const ResourceEstimate quick{1e6, 0.103, "a model", "76 flows"};
  const std::string tiny = over_budget(quick, budget_from_options(2, 1e-300));
  EXPECT_NE(tiny.find("about 0.103 s (76 flows), over --max-time 1e-300 s"), std::string::npos) << tiny;
}

// A scenario planned and priced as `simulate` does, and the SimGrid options it carries.
struct Planned {
  Estimate estimate;
  SimgridOptions options;
  SimgridCost cost() const {
    return estimate_simgrid_cost(estimate.plan.schedule, {estimate.cluster, estimate.calibration.nccl}, options);
  }
};

Planned plan(const std::vector<std::string>& overrides) {
  const planner::Scenario s = load_scenario(kRoot + "/scenarios/llama3.1-8b-8xh100.json", overrides);
  return {estimate_step(s), simgrid_options(s)};
}

// The estimate counts the flows the engine will send: the engine's own count after the run is
// the independent check (aggregated and per-step flows, one rank or every rank as actors, whole
// leaves and a node count that is not a multiple of the leaf).
TEST(ResourceGuard, SimgridFlowsAreTheEnginesOwn) {
  const std::vector<std::vector<std::string>> cases = {
      {"cluster.nodes=1"},
      {"cluster.nodes=2", "training.global_batch=32", "simulation.flow_mode=per_step"},
      {"cluster.nodes=2", "training.global_batch=32", "simulation.symmetry=off"},
      {"cluster.nodes=5", "training.global_batch=80"},
      {"cluster.nodes=5", "training.global_batch=80", "simulation.fabric.nodes_per_leaf=2"},  // a window of chosen nodes
      {"cluster.nodes=64", "training.global_batch=1024", "fsdp.strategy=HYBRID_SHARD", "fsdp.shard_group_size=8"},
  };
  for (const auto& o : cases) {
    SCOPED_TRACE(::testing::PrintToString(o));
    const Planned p = plan(o);
    const SimgridCost c = p.cost();
    const SimgridResult r = simulate_estimate(p.estimate, p.options);
    EXPECT_EQ(c.flows, r.flows);
    EXPECT_EQ(c.window_nodes, r.window_nodes);
    EXPECT_EQ(c.simulated_ranks, r.simulated_ranks);
    EXPECT_EQ(c.flow_mode, r.flow_mode);
    EXPECT_EQ(c.matched_flows, r.matched_flows);
    EXPECT_GT(c.memory_bytes, 0);
    EXPECT_GT(c.seconds, 0);
  }
}

// Whether the step sends matched flows, as the guard foresees it and as the run reports it: every
// rank as actors on 4 nodes (32 ranks: aggregated flows) sends far fewer than 2,048 flows a
// round, matched only when the threshold allows (0), host to host under the default; one rank
// as actors never matches.
TEST(ResourceGuard, MatchedFlowsAreForeseen) {
  const std::vector<std::string> every = {"cluster.nodes=4", "training.global_batch=64", "simulation.symmetry=off"};
  for (const char* threshold : {"0", "2048"}) {
    MatchedFlowsMin min(threshold);
    for (const auto& o : {every, std::vector<std::string>{"cluster.nodes=4", "training.global_batch=64"}}) {
      SCOPED_TRACE(std::string(threshold) + " " + ::testing::PrintToString(o));
      const Planned p = plan(o);
      const SimgridCost c = p.cost();
      EXPECT_EQ(c.matched_flows, simulate_estimate(p.estimate, p.options).matched_flows);
      EXPECT_EQ(c.matched_flows, std::string(threshold) == "0" && o.size() == 3);
    }
  }
}

// Matched flows pay no scan of SimGrid's detached comms but cost more each: the same step's two
// estimates differ by the fitted terms' difference, by hand 13.4 us x flows + (1.96 - 7.96) ns x
// the flow pairs (sim/simgrid_engine.cpp; docs/reliability.md, "Resource guard"), and nothing else.
TEST(ResourceGuard, MatchedFlowsArePricedWithoutTheScan) {
  const std::vector<std::string> every = {"cluster.nodes=4", "training.global_batch=64", "simulation.symmetry=off"};
  SimgridCost matched, host_to_host;
  {
    MatchedFlowsMin min("0");
    matched = plan(every).cost();
  }
  {
    MatchedFlowsMin min("1000000");
    host_to_host = plan(every).cost();
  }
  ASSERT_TRUE(matched.matched_flows);
  ASSERT_FALSE(host_to_host.matched_flows);
  ASSERT_EQ(matched.flows, host_to_host.flows);
  ASSERT_EQ(matched.flow_pairs, host_to_host.flow_pairs);
  ASSERT_GT(matched.flow_pairs, 0);
  EXPECT_NEAR(matched.seconds - host_to_host.seconds, 13.4e-6 * matched.flows + (1.96e-9 - 7.96e-9) * matched.flow_pairs,
              1e-9 * matched.seconds);
  EXPECT_EQ(matched.memory_bytes, host_to_host.memory_bytes);
}

// Every rank run as actors keeps, per op of the schedule, its timing and two flags: by hand,
// OpTiming's six doubles and four 4-byte fields (64 B) plus the issued and done bytes, 66 B. On
// 2 nodes the window and the flows are the same whether one rank or all 16 run (47,040 flows,
// 16 hosts), so every rank costs 15 x ops x 66 B more than one.
TEST(ResourceGuard, EveryRankAsActorsKeepsItsOpsTimings) {
  const Planned one = plan({"cluster.nodes=2", "training.global_batch=32"});
  const Planned every = plan({"cluster.nodes=2", "training.global_batch=32", "simulation.symmetry=off"});
  const SimgridCost a = one.cost(), b = every.cost();
  ASSERT_EQ(a.simulated_ranks, 1);
  ASSERT_EQ(b.simulated_ranks, 16);
  ASSERT_EQ(a.flows, b.flows);
  ASSERT_EQ(a.window_ranks, b.window_ranks);
  const double ops = static_cast<double>(every.estimate.plan.schedule.ops.size());
  EXPECT_DOUBLE_EQ(b.memory_bytes - a.memory_bytes, 15 * ops * 66.0);
}

// 100,000 GPUs on 12,500 nodes (not a multiple of the 32-node rail leaf) spread over the leaves:
// no window of chosen nodes is proved (the leaves hold 31 or 32 nodes, and their uplinks carry as
// many flows), so every node's links would be simulated, and SimGrid's route table alone is
// 8 bytes x 100,000^2 = 80 GB. The estimate says so in well under a second of work (the proof
// included), before anything is built.
TEST(ResourceGuard, OneHundredThousandGpusAreEstimatedNotBuilt) {
  const auto start = std::chrono::steady_clock::now();
  const SimgridCost c =
      plan({"cluster.nodes=12500", "training.global_batch=200000", "simulation.fabric.placement=spread"}).cost();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(c.window_nodes, 12500);
  EXPECT_EQ(c.window_ranks, 100000);
  EXPECT_FALSE(c.window_fallback.empty());
  EXPECT_GE(c.memory_bytes, 8.0 * 1e5 * 1e5);
  EXPECT_NE(c.memory_basis.find("100000 x 100000 hosts"), std::string::npos) << c.memory_basis;
  EXPECT_LT(seconds, 20) << "the estimate must not be the simulation";
  // Packed, the same 12,500 nodes fold into node 0 and the partial leaf (nodes 12480-12499).
  const SimgridCost p = plan({"cluster.nodes=12500", "training.global_batch=200000"}).cost();
  EXPECT_EQ(p.window_nodes, 21);
  EXPECT_EQ(p.window_node_list.front(), 0);
  EXPECT_EQ(p.window_node_list.back(), 12499);
  EXPECT_LT(p.memory_bytes, 1e9);
  // 12,512 nodes are whole leaves: one 32-node period stands for the cluster.
  const SimgridCost w = plan({"cluster.nodes=12512", "training.global_batch=200192"}).cost();
  EXPECT_EQ(w.window_nodes, 32);
  EXPECT_TRUE(w.window_node_list.empty());
  EXPECT_LT(w.memory_bytes, 1e9);
}

// A sweep's estimate times a sample of its points: with an evaluator that takes 2 ms a point,
// a point is estimated at 2 ms or a little more, the sweep at that x points / threads, and the
// sample stops at 64 points or the time given to it.
TEST(ResourceGuard, SweepEstimateTimesASampleOfPoints) {
  const nlohmann::json scenario = {{"model", "models/gpt2.json"},
                                   {"cluster", "scenarios/clusters/dgx-h100.json"},
                                   {"training", {{"global_batch", 64}, {"micro_batch", 1}, {"seq_len", 1024}}}};
  auto base = planner::ScenarioTemplate::from_json(scenario, kRoot + "/scenarios/guard_test.json", {"cluster.nodes=2"});
  std::vector<planner::AxisSpec> specs;
  for (const char* a : {"training.activation_checkpointing=none,full,1,2,3,4,5,6,7,8,9,10",
                        "fsdp.backward_prefetch=BACKWARD_PRE,BACKWARD_POST", "fsdp.forward_prefetch=false,true",
                        "fsdp.limit_all_gathers=true,false", "fsdp.version=1,2"})
    specs.push_back(planner::parse_axis_spec(a));
  const planner::SweepSpace space = planner::make_space(specs, base->context());
  ASSERT_EQ(space.size(), 12u * 2 * 2 * 2 * 2);
  struct Slow : Evaluator {
    PointMetrics evaluate(const planner::Scenario&, const std::string&) override {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return {};
    }
    std::string name() const override { return "slow"; }
  };
  SweepOptions o;
  o.threads = 1;
  o.evaluator = [] { return std::make_unique<Slow>(); };
  o.rank_every_point = true;
  const SweepCost c = estimate_sweep_cost(base, space, o, 10.0);
  EXPECT_EQ(c.sampled, 64u);
  EXPECT_GE(c.seconds_per_point, 0.002);
  EXPECT_LT(c.seconds_per_point, 0.2);
  EXPECT_DOUBLE_EQ(c.seconds, c.seconds_per_point * static_cast<double>(space.size()));
  EXPECT_GE(c.memory_bytes, resident_bytes() * 0.5 + 16.0 * static_cast<double>(space.size()));
  const SweepCost brief = estimate_sweep_cost(base, space, o, 0.01);
  EXPECT_LT(brief.sampled, 64u) << "the sample stops when its time is up";
  EXPECT_GE(brief.sampled, 1u);
}

// The sample runs on the sweep's workers, not on one thread ahead of them: with two threads, each
// evaluator's first call waits (up to 5 s) until a second thread is evaluating too, which only a
// sample on two workers gives. One thread's time a point is then the workers' time over the
// points: each point sleeps 2 ms, so at least 2 ms, not the 1 ms that wall time over points reads.
TEST(ResourceGuard, SweepSampleRunsOnTheSweepsThreads) {
  const nlohmann::json scenario = {{"model", "models/gpt2.json"},
                                   {"cluster", "scenarios/clusters/dgx-h100.json"},
                                   {"training", {{"global_batch", 64}, {"micro_batch", 1}, {"seq_len", 1024}}}};
  auto base = planner::ScenarioTemplate::from_json(scenario, kRoot + "/scenarios/guard_test.json", {"cluster.nodes=2"});
  const planner::SweepSpace space = planner::make_space(
      {planner::parse_axis_spec("training.activation_checkpointing=none,full,1,2,3,4,5,6,7,8,9,10"),
       planner::parse_axis_spec("fsdp.backward_prefetch=BACKWARD_PRE,BACKWARD_POST"),
       planner::parse_axis_spec("fsdp.forward_prefetch=false,true"), planner::parse_axis_spec("fsdp.prefetch_depth=1,2")},
      base->context());
  struct Threads {
    std::mutex m;
    std::condition_variable cv;
    std::set<std::thread::id> ids;
  };
  auto threads = std::make_shared<Threads>();
  struct Slow : Evaluator {
    std::shared_ptr<Threads> t;
    bool waited = false;
    explicit Slow(std::shared_ptr<Threads> t) : t(std::move(t)) {}
    PointMetrics evaluate(const planner::Scenario&, const std::string&) override {
      std::unique_lock<std::mutex> lock(t->m);
      t->ids.insert(std::this_thread::get_id());
      t->cv.notify_all();
      if (!waited) t->cv.wait_for(lock, std::chrono::seconds(5), [&] { return t->ids.size() >= 2; });
      waited = true;
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      return {};
    }
    std::string name() const override { return "slow"; }
  };
  SweepOptions o;
  o.threads = 2;
  o.evaluator = [threads] { return std::make_unique<Slow>(threads); };
  const SweepCost c = estimate_sweep_cost(base, space, o, 10.0);
  EXPECT_EQ(threads->ids.size(), 2u);
  EXPECT_EQ(c.sampled, 64u);
  ASSERT_TRUE(c.sampled_points);
  EXPECT_EQ(c.sampled_points->size(), 64u);
  EXPECT_GE(c.seconds_per_point, 0.002);
}

}  // namespace
}  // namespace fsdpsim::sim
