// The optimal-wrapping search (sim/wrap_search.h) against brute force over every partition
// of an 8-block model into contiguous units (2^7 = 128 wrappings):
// - the dynamic program is exact for its separable objective (the same objective evaluated
//   partition by partition gives the same best, and the same K best, to the last bit);
// - the search (DP candidates, then local search with the full planner + engine) finds the
//   wrapping that brute force with the full planner + engine finds best;
// - how often the DP's own first choice is the engine's best is measured and printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include <nlohmann/json.hpp>

#include "models/json_input.h"
#include "planner/scenario.h"
#include "sim/wrap_search.h"

namespace fsdpsim::sim {
namespace {

// 8 blocks of alternating size (FFN 8192 / 4096 on hidden 2048), an embedding and a head.
nlohmann::json eight_block_model(int blocks = 8) {
  const std::int64_t h = 2048, vocab = 32000;
  nlohmann::json layers = nlohmann::json::array();
  for (int i = 0; i < blocks; ++i) {
    const std::int64_t ffn = i % 2 ? 4096 : 8192;
    const std::int64_t numel = 4 * h * h + 2 * ffn * h;
    layers.push_back({{"name", std::to_string(i)},
                      {"type", "Block"},
                      {"children",
                       {{{"name", "attn"}, {"type", "Attention"},
                         {"params", {{{"name", "qkv"}, {"shape", {3 * h, h}}}, {{"name", "o"}, {"shape", {h, h}}}}}},
                        {{"name", "mlp"}, {"type", "MLP"},
                         {"params", {{{"name", "up"}, {"shape", {ffn, h}}}, {{"name", "down"}, {"shape", {h, ffn}}}}}}}},
                      {"costs",
                       {{"forward_flops", {{"b*s", 2.0 * numel}, {"b*s^2", 4.0 * h}}},
                        {"attention_flops", {{"b*s^2", 4.0 * h}}},
                        {"forward_hbm_bytes", {{"b*s", 24.0 * h}}},
                        {"saved_activation_bytes", {{"b*s", 20.0 * h + 4.0 * ffn}}},
                        {"input_bytes", {{"b*s", 2.0 * h}}}}}});
  }
  nlohmann::json root = {
      {"type", "Model"},
      {"children",
       {{{"name", "embed"}, {"type", "Embedding"}, {"params", {{{"name", "weight"}, {"shape", {vocab, h}}}}},
         {"costs", {{"forward_hbm_bytes", {{"b*s", 4.0 * h}}}, {"input_bytes", {{"b*s", 8}}}}}},
        {{"name", "layers"}, {"type", "ModuleList"}, {"children", layers}},
        {{"name", "head"}, {"type", "Linear"}, {"params", {{{"name", "weight"}, {"shape", {vocab, h}}}}},
         {"costs", {{"forward_flops", {{"b*s", 2.0 * vocab * h}}}, {"saved_activation_bytes", {{"b*s", 4.0 * vocab}}},
                    {"input_bytes", {{"b*s", 2.0 * h}}}}}}}}};
  return {{"name", "eight-blocks"}, {"root", root}};
}

struct Case {
  std::string name;
  std::vector<std::string> overrides;
  double free_gib = -1;  // >= 0: headroom leaves this much above the one-block-per-unit peak
};

planner::Scenario scenario_for(const Case& c, int blocks = 8) {
  nlohmann::json j = {{"model", eight_block_model(blocks)},
                      {"cluster", "scenarios/clusters/dgx-h100.json"},
                      {"training", {{"global_batch", 16}, {"micro_batch", 1}, {"seq_len", 8192}}},
                      {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}}}};
  std::vector<std::string> o = {"cluster.nodes=2"};
  for (const std::string& x : c.overrides) {
    if (x.rfind("cluster=", 0) == 0) {  // another cluster file (one node)
      j["cluster"] = x.substr(8);
      o.front() = "cluster.nodes=1";
    } else {
      o.push_back(x);
    }
  }
  return planner::parse_scenario(j, std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/wrap_test.json", o);
}

std::vector<Case> cases() {
  return {
      {"fsdp2_full_shard", {}},
      {"fsdp2_memory_bound", {}, 0.4},
      {"fsdp2_short_seq_comm_bound", {"training.seq_len=2048"}},
      {"fsdp2_strongly_comm_bound", {"training.seq_len=512", "cluster.nodes=4", "training.global_batch=32"}},
      {"fsdp2_comm_bound_memory_bound", {"training.seq_len=1024"}, 0.3},
      {"pcie_cluster", {"cluster=scenarios/clusters/pcie-a100.json", "training.seq_len=4096"}},
      {"fsdp1_limit_all_gathers", {"fsdp.version=1", "training.seq_len=4096"}},
      {"fsdp1_backward_post", {"fsdp.version=1", "fsdp.backward_prefetch=BACKWARD_POST"}},
      {"hsdp_grad_accum_checkpointed",
       {"fsdp.strategy=HYBRID_SHARD", "training.global_batch=48", "training.activation_checkpointing=full"}},
      {"fsdp1_no_backward_prefetch_one_node", {"cluster.nodes=1", "fsdp.version=1", "fsdp.backward_prefetch=NONE"}},
      {"shard_grad_op", {"fsdp.strategy=SHARD_GRAD_OP", "fsdp.reshard_after_forward=null"}},
  };
}

WrapSearchOptions options_for(const Case& c, const planner::Scenario& sc) {
  WrapSearchOptions o;
  if (c.free_gib >= 0) {
    const SeparableModel m = SeparableModel::build(sc, o.objective);
    const double per_block = m.peak_bytes(Partition(m.blocks(), 1));
    o.headroom_bytes = m.gpu_memory_bytes() - per_block - c.free_gib * 1024 * 1024 * 1024;
  }
  return o;
}

TEST(WrapSearch, MemoryModelIsAnchoredAtOneUnitPerBlock) {
  for (const Case& c : cases()) {
    const planner::Scenario sc = scenario_for(c);
    const SeparableModel m = SeparableModel::build(sc, WrapObjective::exposed_comm);
    ASSERT_EQ(m.blocks(), 8);
    const PointMetrics engine = metrics_of([&] {
      planner::Scenario s = sc;
      s.fsdp.wrap = wrap_spec_for(m, Partition(8, 1), sc.fsdp.wrap);
      return s;
    }());
    EXPECT_NEAR(m.peak_bytes(Partition(8, 1)), engine.device_peak_bytes, 4096.0) << c.name;
  }
}

// The DP is exact for its own objective: its K best equal the K best of all 128 partitions
// scored one by one with the same separable cost (and the same memory constraint).
TEST(WrapSearch, DynamicProgramEqualsBruteForceUnderItsObjective) {
  for (const Case& c : cases()) {
    for (WrapObjective objective : {WrapObjective::exposed_comm, WrapObjective::step_time}) {
      const planner::Scenario sc = scenario_for(c);
      WrapSearchOptions o = options_for(c, sc);
      o.objective = objective;
      const SeparableModel m = SeparableModel::build(sc, objective);
      const BruteForceResult bf = brute_force_wrapping(sc, o, false);
      ASSERT_EQ(bf.all.size(), 128u);
      std::vector<std::pair<std::pair<double, double>, Partition>> fitting;
      for (const WrapCandidate& w : bf.all)
        if (w.model_fits) fitting.push_back({m.key(m.cost(w.partition)), w.partition});
      std::sort(fitting.begin(), fitting.end());
      if (c.free_gib >= 0) {
        EXPECT_LT(fitting.size(), 128u) << c.name << ": the memory budget must bind";
        EXPECT_GT(fitting.size(), 1u) << c.name;
      }
      const int k = 10;
      const std::vector<Partition> dp = m.best(k, o.headroom_bytes, 0, true);
      ASSERT_EQ(dp.size(), std::min<std::size_t>(k, fitting.size())) << c.name;
      for (std::size_t i = 0; i < dp.size(); ++i) {
        EXPECT_TRUE(m.fits(dp[i], o.headroom_bytes)) << c.name;
        // Bit for bit: the DP sums the same terms in the same order as cost().
        EXPECT_EQ(m.key(m.cost(dp[i])), fitting[i].first) << c.name << " #" << i << " " << partition_text(dp[i]);
      }
      EXPECT_EQ(m.key(m.cost(dp.front())), m.key(m.cost(bf.all[bf.model_best].partition))) << c.name;
    }
  }
}

TEST(WrapSearch, UnitsOfAtMostGBlocks) {
  const planner::Scenario sc = scenario_for(cases()[2]);
  const SeparableModel m = SeparableModel::build(sc, WrapObjective::exposed_comm);
  for (const Partition& p : m.best(20, 0, 3, false))
    for (int n : p) EXPECT_LE(n, 3) << partition_text(p);
  WrapSearchOptions o;
  o.max_blocks_per_unit = 3;
  o.memory_constraint = false;
  const BruteForceResult bf = brute_force_wrapping(sc, o, false);
  const std::vector<Partition> dp = m.best(1, 0, 3, false);
  EXPECT_EQ(m.key(m.cost(dp.front())), m.key(m.cost(bf.all[bf.model_best].partition)));
}

// The search's best wrapping against brute force over all 128 wrappings timed with the full
// planner + analytic engine: equal in all cases but at most one, and never more than 2% off.
// (Since collectives of one communicator serialize in the engine, pcie_cluster's best,
// 1+2+2+2+1, lies several moves from every start the search has, which all end in a local
// optimum 2+2+1+1+1+1, 126.9 ms against 125.6 ms: +1.1%; docs/sweep.md.) The DP's first choice is reported (it need not be the
// engine's best).
TEST(WrapSearch, SearchEqualsEngineBruteForce) {
  int dp_first = 0, dp_candidates = 0, total = 0, exact = 0;
  for (const Case& c : cases()) {
    const planner::Scenario sc = scenario_for(c);
    const WrapSearchOptions o = options_for(c, sc);
    const BruteForceResult bf = brute_force_wrapping(sc, o, true);
    ASSERT_GE(bf.engine_best, 0) << c.name;
    const WrapCandidate& truth = bf.all[bf.engine_best];
    const WrapSearchResult r = search_wrapping(sc, o);
    ASSERT_TRUE(r.found) << c.name;
    EXPECT_TRUE(r.best.engine_fits);
    EXPECT_LE(r.best.engine_objective_seconds, truth.engine_objective_seconds * 1.02)
        << c.name << ": search " << partition_text(r.best.partition) << " (" << r.best_from << "), brute force "
        << partition_text(truth.partition);
    exact += std::abs(r.best.engine_objective_seconds - truth.engine_objective_seconds) <=
             1e-9 * truth.engine_objective_seconds;
    EXPECT_LT(r.engine_evaluations, 128) << c.name << ": fewer engine runs than brute force";
    const bool first = !r.candidates.empty() && std::abs(r.candidates.front().engine_objective_seconds -
                                                          truth.engine_objective_seconds) <=
                                                    1e-9 * truth.engine_objective_seconds && r.candidates.front().engine_fits;
    const bool among = r.dp_choice >= 0 && std::abs(r.candidates[r.dp_choice].engine_objective_seconds -
                                                    truth.engine_objective_seconds) <= 1e-9 * truth.engine_objective_seconds;
    dp_first += first;
    dp_candidates += among;
    ++total;
    const std::string rank = bf.model_rank_of_engine_best < 0 ? std::string("-, the model says it does not fit")
                                                              : std::to_string(bf.model_rank_of_engine_best + 1);
    std::printf("  %-30s engine best %-16s %8.3f ms | DP first %-16s %8.3f ms (engine best's rank in the model: %s) | "
                "search %-16s via %s, %d engine runs\n",
                c.name.c_str(), partition_text(truth.partition).c_str(), truth.engine_objective_seconds * 1e3,
                r.candidates.empty() ? "-" : partition_text(r.candidates.front().partition).c_str(),
                r.candidates.empty() ? 0.0 : r.candidates.front().engine_objective_seconds * 1e3,
                rank.c_str(), partition_text(r.best.partition).c_str(), r.best_from.c_str(),
                r.engine_evaluations);
  }
  std::printf("  DP's first choice is the engine's best in %d of %d cases; among its %d candidates in %d of %d\n",
              dp_first, total, WrapSearchOptions{}.candidates, dp_candidates, total);
  EXPECT_GE(exact, total - 1) << "the search found the engine's best in " << exact << " of " << total << " cases";
}

TEST(WrapSearch, UnitsStayWithinSiblings) {
  // Blocks under two parents (an encoder and a decoder): no unit spans both.
  nlohmann::json model = eight_block_model(4);
  nlohmann::json layers = model["root"]["children"][1];
  layers["name"] = "decoder";
  model["root"]["children"].insert(model["root"]["children"].begin() + 2, layers);
  model["root"]["children"][1]["name"] = "encoder";
  nlohmann::json j = {{"model", model},
                      {"cluster", "scenarios/clusters/dgx-h100.json"},
                      {"training", {{"global_batch", 8}, {"micro_batch", 1}, {"seq_len", 2048}}},
                      {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}}}};
  const planner::Scenario sc =
      planner::parse_scenario(j, std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/wrap_test.json", {});
  const SeparableModel m = SeparableModel::build(sc, WrapObjective::exposed_comm);
  ASSERT_EQ(m.blocks(), 8);
  EXPECT_TRUE(m.can_group(0, 4));
  EXPECT_FALSE(m.can_group(3, 5));
  for (const Partition& p : m.best(20, 0, 0, false)) {
    int at = 0;
    for (int n : p) {
      EXPECT_TRUE(at >= 4 || at + n <= 4) << partition_text(p);
      at += n;
    }
  }
  WrapSearchOptions o;
  o.memory_constraint = false;
  const WrapSearchResult r = search_wrapping(sc, o);
  ASSERT_TRUE(r.found);
  // The chosen wrapping is a valid scenario wrap (the planner accepts it).
  planner::Scenario with = sc;
  EXPECT_NO_THROW(with = planner::parse_scenario(j, sc.file, {"fsdp.wrap=" + r.wrap.dump()}));
  EXPECT_EQ(with.fsdp.wrap.modules.size(), r.best.partition.size());
}

TEST(WrapSearch, NoBlocksIsAClearError) {
  nlohmann::json model = {{"name", "flat"},
                          {"root", {{"type", "M"}, {"params", {{{"name", "w"}, {"shape", {1024, 1024}}}}},
                                    {"costs", {{"forward_flops", {{"b*s", 1e6}}}}}}}};
  nlohmann::json j = {{"model", model},
                      {"cluster", "scenarios/clusters/dgx-h100.json"},
                      {"fsdp", {{"wrap", {{"policy", "root"}}}}}};
  const planner::Scenario sc = planner::parse_scenario(j, "flat.json", {});
  try {
    (void)SeparableModel::build(sc, WrapObjective::exposed_comm);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("no transformer blocks"), std::string::npos) << e.what();
  }
}

TEST(WrapSearch, PrefetchDeeperThanOneUnitIsRefusedNamingTheField) {
  // The separable memory terms count one unit ahead; a deeper prefetch would pass plans that
  // do not fit, so the search refuses it (docs/memory-model.md).
  const planner::Scenario sc = scenario_for({"depth 2", {"fsdp.prefetch_depth=2"}});
  try {
    (void)SeparableModel::build(sc, WrapObjective::exposed_comm);
    FAIL();
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("fsdp.prefetch_depth"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW((void)SeparableModel::build(scenario_for({"depth 1", {"fsdp.prefetch_depth=1"}}),
                                              WrapObjective::exposed_comm));
}

}  // namespace
}  // namespace fsdpsim::sim
