// The SimGrid engine's platform, ring flows, window choice and options (no simulation runs).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <numeric>
#include <set>

#include "models/json_input.h"
#include "planner/plan.h"
#include "sim/simgrid_engine.h"
#include "sim/internal/simgrid_flows.h"
#include "sim/internal/simgrid_setup.h"
#include "sim/internal/simgrid_window.h"
#include "sim/scenario_loader.h"
#include "sim/simgrid_platform.h"

namespace fsdpsim::sim {
namespace {

nlohmann::json base_scenario(const std::string& cluster = "scenarios/clusters/dgx-h100.json") {
  return {{"model", "models/llama3.1-8b.json"},
          {"cluster", cluster},
          {"training", {{"micro_batch", 1}, {"seq_len", 4096}, {"activation_checkpointing", "full"}}},
          {"fsdp", {{"version", 2}, {"strategy", "FULL_SHARD"}}}};
}

SimgridScenario load(const nlohmann::json& json, const std::vector<std::string>& overrides = {}) {
  return parse_simgrid_scenario(json, std::string(FSDPSIM_SOURCE_ROOT) + "/test-scenario.json", overrides);
}

std::vector<std::string> names(const Platform& p, const std::vector<int>& route) {
  std::vector<std::string> out;
  for (int l : route) out.push_back(p.links()[l].name);
  return out;
}

const PlatformLink& link_named(const Platform& p, const std::string& name) {
  for (const PlatformLink& l : p.links())
    if (l.name == name) return l;
  throw std::runtime_error("no link " + name);
}

TEST(SimgridPlatform, DgxH100RoutesFollowNvlinkAndTheDestinationsRail) {
  SimgridScenario s = load(base_scenario(), {"cluster.nodes=2"});
  const Platform p = Platform::build(s.scenario.cluster, planner::NcclParams::defaults_for(s.scenario.cluster), {});
  EXPECT_EQ(p.world(), 16);
  EXPECT_EQ(p.nics_per_node(), 8);
  EXPECT_EQ(p.leaves(), 1);
  EXPECT_EQ(names(p, p.route(1, 5)), (std::vector<std::string>{"node0.gpu1.nvlink.up", "node0.gpu5.nvlink.down"}));
  // Same rail: the GPU's own PCIe path and NIC.
  EXPECT_EQ(names(p, p.route(3, 11)), (std::vector<std::string>{"node0.gpu3.pcie.up", "node0.nic3.up",
                                                                 "node1.nic3.down", "node1.gpu3.pcie.down"}));
  // Another rail: PXN over NVLink to the GPU of the destination's index.
  EXPECT_EQ(names(p, p.route(7, 8)),
            (std::vector<std::string>{"node0.gpu7.nvlink.up", "node0.gpu0.nvlink.down", "node0.gpu0.pcie.up",
                                      "node0.nic0.up", "node1.nic0.down", "node1.gpu0.pcie.down"}));
  EXPECT_DOUBLE_EQ(link_named(p, "node0.gpu0.nvlink.up").bandwidth, 450e9);
  EXPECT_DOUBLE_EQ(link_named(p, "node0.nic0.up").bandwidth, 50e9);
  EXPECT_DOUBLE_EQ(link_named(p, "node0.gpu0.pcie.up").bandwidth, 48e9);  // NCCL's Gen5 x16 figure for Hopper
  EXPECT_DOUBLE_EQ(p.route_latency(p.route(3, 11)), 5e-6);
}

TEST(SimgridPlatform, FatTreeLeafUplinksCarryOversubscription) {
  SimgridScenario s = load(base_scenario("scenarios/clusters/dgx-h100-fat-tree-4to1.json"),
                           {"cluster.nodes=8", "simulation.fabric.nodes_per_leaf=2"});
  const Platform p = Platform::build(s.scenario.cluster, planner::NcclParams::defaults_for(s.scenario.cluster),
                                     s.options.fabric);
  EXPECT_EQ(p.leaves(), 4);
  EXPECT_FALSE(p.rail_optimized());
  // Nodes 0 and 1 share leaf 0; node 2 sits under leaf 1.
  EXPECT_EQ(p.route(0, 8).size(), 4u);
  const std::vector<std::string> across = names(p, p.route(8, 16));
  EXPECT_EQ(across, (std::vector<std::string>{"node1.gpu0.pcie.up", "node1.nic0.up", "leaf0.up", "leaf1.down",
                                              "node2.nic0.down", "node2.gpu0.pcie.down"}));
  // 2 nodes x 8 NICs x 50 GB/s, 4:1.
  EXPECT_DOUBLE_EQ(link_named(p, "leaf0.up").bandwidth, 2 * 8 * 50e9 / 4);
  EXPECT_DOUBLE_EQ(link_named(p, "leaf0.up").nominal_bandwidth, 2 * 8 * 50e9);
  // Spread placement: consecutive nodes on different leaves.
  s.options.fabric.placement = Placement::spread;
  const Platform q = Platform::build(s.scenario.cluster, planner::NcclParams::defaults_for(s.scenario.cluster),
                                     s.options.fabric);
  EXPECT_NE(q.leaf_of(0), q.leaf_of(1));
  EXPECT_EQ(q.route(0, 8).size(), 6u);
}

TEST(SimgridPlatform, PcieBoxSharesTheHostBridgeAndOneNic) {
  SimgridScenario s = load(base_scenario("scenarios/clusters/pcie-a100.json"), {"cluster.nodes=2"});
  const Platform p = Platform::build(s.scenario.cluster, planner::NcclParams::defaults_for(s.scenario.cluster), {});
  EXPECT_FALSE(p.nvswitch());
  EXPECT_EQ(p.nics_per_node(), 1);
  EXPECT_EQ(names(p, p.route(1, 2)), (std::vector<std::string>{"node0.gpu1.pcie.up", "node0.bridge", "node0.gpu2.pcie.down"}));
  EXPECT_EQ(names(p, p.route(5, 13)), (std::vector<std::string>{"node0.gpu5.pcie.up", "node0.bridge", "node0.nic0.up",
                                                                 "node1.nic0.down", "node1.bridge", "node1.gpu5.pcie.down"}));
  EXPECT_DOUBLE_EQ(link_named(p, "node0.bridge").bandwidth, 8 * 24e9);
}

TEST(SimgridPlatform, SlowLinkGlobsAndXml) {
  SimgridScenario s = load(base_scenario(), {"cluster.nodes=2"});
  Platform p = Platform::build(s.scenario.cluster, planner::NcclParams::defaults_for(s.scenario.cluster), {});
  EXPECT_EQ(p.scale_links("node1.nic0.*", 0.5), 2);
  EXPECT_DOUBLE_EQ(link_named(p, "node1.nic0.up").bandwidth, 25e9);
  EXPECT_DOUBLE_EQ(link_named(p, "node1.nic0.up").nominal_bandwidth, 50e9);
  EXPECT_EQ(p.scale_links("nothing*", 0.5), 0);
  const std::string xml = p.to_xml({{3, 11}});
  EXPECT_NE(xml.find("<host id=\"node1.gpu7\""), std::string::npos);
  EXPECT_NE(xml.find("<link id=\"node1.nic0.up\" bandwidth=\"25000000000Bps\""), std::string::npos);
  EXPECT_NE(xml.find("<route src=\"node0.gpu3\" dst=\"node1.gpu3\" symmetrical=\"NO\"><link_ctn id=\"node0.gpu3.pcie.up\"/>"),
            std::string::npos);
}

TEST(SimgridFlows, GroupLayoutsFollowThePlanner) {
  SimgridScenario s = load(base_scenario(), {"cluster.nodes=4", "fsdp.strategy=HYBRID_SHARD"});
  const planner::Plan plan = planner::plan_step(s.scenario);
  std::map<std::string, GroupLayout> by_name;
  for (std::size_t g = 0; g < plan.schedule.groups.size(); ++g)
    by_name[plan.schedule.groups[g].name] = group_layout(plan.schedule, static_cast<int>(g));
  EXPECT_FALSE(by_name["shard"].strided);
  EXPECT_EQ(by_name["shard"].size, 8);
  EXPECT_TRUE(by_name["replicate"].strided);
  EXPECT_EQ(by_name["replicate"].stride, 8);
  EXPECT_EQ(group_members(by_name["replicate"], 32, 3), (std::vector<int>{3, 11, 19, 27}));
  EXPECT_EQ(group_instance(by_name["replicate"], 19), 3);
  EXPECT_EQ(group_instance(by_name["shard"], 19), 2);
  EXPECT_EQ(ring_steps(planner::OpKind::all_gather, 8), 7);
  EXPECT_EQ(ring_steps(planner::OpKind::all_reduce, 4), 6);
}

TEST(SimgridFlows, MultiNodeRingsUseEveryRailAndCarryTheWireBytesOnce) {
  SimgridScenario s = load(base_scenario(), {"cluster.nodes=2"});
  const Platform p = Platform::build(s.scenario.cluster, planner::NcclParams::defaults_for(s.scenario.cluster), {});
  GroupLayout world;
  world.size = 16;
  const std::vector<RingEdge> edges = ring_edges(world, 0, p);
  // Per node: 8 NVLink edges (7 of the 8 rings) and 8 rail exits (1 ring each).
  EXPECT_EQ(edges.size(), 32u);
  std::map<int, double> out;
  std::set<int> nics;
  for (const RingEdge& e : edges) {
    out[e.src] += e.fraction;
    if (p.node_of(e.src) != p.node_of(e.dst)) {
      EXPECT_NEAR(e.fraction, 1.0 / 8, 1e-12);
      nics.insert(p.nic_of(e.dst % 8));
    } else {
      EXPECT_NEAR(e.fraction, 7.0 / 8, 1e-12);
    }
  }
  for (const auto& [src, f] : out) EXPECT_NEAR(f, 1.0, 1e-12) << "rank " << src;
  EXPECT_EQ(nics.size(), 8u);
  // A replicate ring (one GPU per node) stays on its rail.
  GroupLayout rep;
  rep.size = 2;
  rep.strided = true;
  rep.stride = 8;
  const std::vector<RingEdge> r = ring_edges(rep, 5, p);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].src, 5);
  EXPECT_EQ(r[0].dst, 13);
  EXPECT_EQ(names(p, p.route(r[0].src, r[0].dst)).size(), 4u);
}

TEST(SimgridFlows, WindowsAreAPeriodOfTheCluster) {
  {
    // Rail-optimized, 128 nodes: leaves of 32 nodes; the world ring folds to one leaf.
    SimgridScenario s = load(base_scenario(), {"cluster.nodes=128"});
    const planner::Plan plan = planner::plan_step(s.scenario);
    EXPECT_EQ(symmetric_window_nodes(plan.schedule, s.scenario.cluster, s.options.fabric), 32);
  }
  {
    // HSDP on 4 nodes of one leaf: two nodes hold whole shard groups and two replicas.
    SimgridScenario s = load(base_scenario(), {"cluster.nodes=4", "fsdp.strategy=HYBRID_SHARD"});
    const planner::Plan plan = planner::plan_step(s.scenario);
    EXPECT_EQ(symmetric_window_nodes(plan.schedule, s.scenario.cluster, s.options.fabric), 2);
  }
  {
    // HSDP with 2-node shard groups: a window needs two replicas, 4 nodes.
    SimgridScenario s = load(base_scenario(), {"cluster.nodes=16", "fsdp.strategy=HYBRID_SHARD", "fsdp.shard_group_size=16"});
    const planner::Plan plan = planner::plan_step(s.scenario);
    EXPECT_EQ(symmetric_window_nodes(plan.schedule, s.scenario.cluster, s.options.fabric), 4);
  }
  {
    // Spread placement over several leaves has no period shorter than the cluster.
    SimgridScenario s = load(base_scenario("scenarios/clusters/dgx-h100-fat-tree.json"),
                             {"cluster.nodes=8", "simulation.fabric.placement=spread"});
    const planner::Plan plan = planner::plan_step(s.scenario);
    EXPECT_EQ(symmetric_window_nodes(plan.schedule, s.scenario.cluster, s.options.fabric), 8);
  }
}

// A window of chosen nodes: 100 DGX H100 nodes under rail leaves of 32 (leaf 3 holds nodes
// 96-99), the window node 0 and the partial leaf. Each node keeps its real name, and the world's
// rings are contracted to the window: rail 0 leaves node 0 from GPU 7 for the next member in the
// window, node 96's GPU 0 (in the cluster, node 1's), across leaf 0's and leaf 3's rail-0 links,
// as the cluster's edge from node 95 into node 96 crosses leaf 3's; node 99 returns to node 0 as
// in the cluster.
TEST(SimgridPlatform, AWindowOfChosenNodesKeepsRealNamesAndContractsRings) {
  SimgridScenario s = load(base_scenario(), {"cluster.nodes=100"});
  const planner::NcclParams nccl = planner::NcclParams::defaults_for(s.scenario.cluster);
  const Platform p = Platform::build_nodes(s.scenario.cluster, nccl, {}, {0, 96, 97, 98, 99});
  EXPECT_TRUE(p.node_window());
  EXPECT_EQ(p.window_nodes(), 5);
  EXPECT_EQ(p.window_ranks(), 40);
  EXPECT_EQ(p.window_leaves(), 2);  // leaf 0 and leaf 3
  EXPECT_EQ(p.host_name(8), "node96.gpu0");
  EXPECT_EQ(p.window_rank(96 * 8 + 3), 11);
  EXPECT_EQ(p.real_rank(11), 96 * 8 + 3);
  EXPECT_EQ(p.window_rank(8), -1);
  EXPECT_TRUE(p.in_window(99 * 8 + 7));
  EXPECT_FALSE(p.in_window(95 * 8 + 7));
  EXPECT_NO_THROW(link_named(p, "leaf3.rail0.up"));
  EXPECT_THROW(link_named(p, "leaf1.rail0.up"), std::runtime_error);
  EXPECT_THROW(link_named(p, "node1.nic0.up"), std::runtime_error);

  GroupLayout world;
  world.size = 800;
  const std::vector<RingEdge> edges = ring_edges(world, 0, p);
  // Per window node: its 8 NVLink edges and its 8 rail exits, every one to a window member.
  EXPECT_EQ(edges.size(), 5u * 16);
  std::map<int, double> out, in;
  for (const RingEdge& e : edges) {
    EXPECT_TRUE(p.in_window(e.src) && p.in_window(e.dst)) << e.src << " -> " << e.dst;
    out[e.src] += e.fraction;
    in[e.dst] += e.fraction;
  }
  EXPECT_EQ(out.size(), 40u);
  for (const auto& [rank, f] : out) EXPECT_NEAR(f, 1.0, 1e-12) << "rank " << rank;
  for (const auto& [rank, f] : in) EXPECT_NEAR(f, 1.0, 1e-12) << "rank " << rank;
  auto find = [&](int src, int dst) {
    for (const RingEdge& e : edges)
      if (e.src == src && e.dst == dst) return e.fraction;
    return 0.0;
  };
  EXPECT_NEAR(find(7, 96 * 8), 1.0 / 8, 1e-12);
  EXPECT_NEAR(find(99 * 8 + 7, 0), 1.0 / 8, 1e-12);
  EXPECT_EQ(names(p, p.route(7, 96 * 8)),
            (std::vector<std::string>{"node0.gpu7.nvlink.up", "node0.gpu0.nvlink.down", "node0.gpu0.pcie.up",
                                      "node0.nic0.up", "leaf0.rail0.up", "leaf3.rail0.down", "node96.nic0.down",
                                      "node96.gpu0.pcie.down"}));
  EXPECT_EQ(names(p, p.route(99 * 8 + 7, 0)),
            (std::vector<std::string>{"node99.gpu7.nvlink.up", "node99.gpu0.nvlink.down", "node99.gpu0.pcie.up",
                                      "node99.nic0.up", "leaf3.rail0.up", "leaf0.rail0.down", "node0.nic0.down",
                                      "node0.gpu0.pcie.down"}));
  EXPECT_EQ(window_instances(world, p), (std::vector<int>{0}));
}

// Colour refinement, worked by hand: links A and B alike (one colour), flows f0 and f1 on A, f2
// on B (one colour). Round 1 tells A (two flows) from B (one); round 2 tells f0 and f1 (on a link
// with two flows) from f2; round 3 splits nothing. One round would leave f2 with f0 and f1.
TEST(SimgridWindow, ColourRefinementSeparatesFlowsByTheLoadOfTheirLinks) {
  const std::vector<std::vector<int>> route = {{0}, {0}, {1}};
  std::vector<int> flows = {0, 0, 0}, links = {0, 0};
  const detail::Refinement r = detail::refine_colours(route, flows, links);
  EXPECT_EQ(r.rounds, 3);
  EXPECT_TRUE(r.stable);
  EXPECT_EQ(flows[0], flows[1]);
  EXPECT_NE(flows[0], flows[2]);
  EXPECT_NE(links[0], links[1]);
  // Colours given apart stay apart: a third link alone, of another colour, splits nothing more.
  std::vector<int> flows2 = {0, 1, 0}, links2 = {0, 0, 1};
  detail::refine_colours({{0}, {0}, {1}}, flows2, links2);
  EXPECT_NE(flows2[0], flows2[1]);
  EXPECT_NE(flows2[0], flows2[2]);
  EXPECT_NE(links2[0], links2[2]);
}

// Which windows of chosen nodes are proved. The expected verdicts are worked by hand from the
// rings each window sends (the comments); the simulations in simgrid_engine_test.cpp check the
// proved windows' step against every rank run.
TEST(SimgridWindow, OnlyWindowsThatLoadTheLinksAsTheClusterAreProved) {
  auto prover_for = [](const SimgridScenario& s, const planner::Plan& plan) {
    return std::make_unique<detail::WindowProver>(
        plan.schedule, detail::collective_groups(plan.schedule),
        Platform::build(s.scenario.cluster, planner::NcclParams::defaults_for(s.scenario.cluster), s.options.fabric));
  };
  {
    // 100 nodes, rail leaves of 32: the world ring leaves every leaf once (nodes 31, 63, 95, 99)
    // and enters it once. Node 0 and the partial leaf: the ring from node 0 crosses to node 96 and
    // comes back from node 99, one flow a rail on each leaf link, as everywhere: proved. The
    // partial leaf alone: its ring closes under leaf 3 (99 to 96), no flow crosses a leaf: refused.
    // A whole leaf and the partial leaf: proved (the window the issue proposed).
    SimgridScenario s = load(base_scenario(), {"cluster.nodes=100"});
    const planner::Plan plan = planner::plan_step(s.scenario);
    const SymmetricWindow w = symmetric_window(plan.schedule, s.scenario.cluster, s.options.fabric);
    EXPECT_EQ(w.nodes, 5);
    EXPECT_EQ(w.node_list, (std::vector<int>{0, 96, 97, 98, 99}));
    EXPECT_EQ(w.fallback, "");
    const Platform whole = Platform::build(s.scenario.cluster, planner::NcclParams::defaults_for(s.scenario.cluster), {});
    const detail::WindowProver prover(plan.schedule, detail::collective_groups(plan.schedule), whole);
    const planner::NcclParams nccl = planner::NcclParams::defaults_for(s.scenario.cluster);
    const detail::WindowProof alone = prover.prove(Platform::build_nodes(s.scenario.cluster, nccl, {}, {96, 97, 98, 99}));
    EXPECT_FALSE(alone.exact);
    EXPECT_NE(alone.reason.find("in a window of 4 nodes meet other link loads than in the whole cluster"),
              std::string::npos)
        << alone.reason;
    std::vector<int> leaves_0_and_3(32);
    std::iota(leaves_0_and_3.begin(), leaves_0_and_3.end(), 0);
    for (int n = 96; n < 100; ++n) leaves_0_and_3.push_back(n);
    EXPECT_TRUE(prover.prove(Platform::build_nodes(s.scenario.cluster, nccl, {}, leaves_0_and_3)).exact);
    // The whole cluster as a window of chosen nodes: the same graph twice, proved.
    std::vector<int> all(100);
    std::iota(all.begin(), all.end(), 0);
    EXPECT_TRUE(prover.prove(Platform::build_nodes(s.scenario.cluster, nccl, {}, all)).exact);
  }
  {
    // 9 nodes under fat-tree leaves of 4, HSDP shard groups of 3 nodes: nodes 0-2 under leaf 0,
    // nodes 3-5 across leaves 0 and 1, 6-8 across leaves 1 and 2. The first group's ring crosses
    // no leaf, the others' do: ranks differ, and no window stands for them all, not even the whole
    // cluster taken as one.
    SimgridScenario s = load(base_scenario("scenarios/clusters/dgx-h100-fat-tree.json"),
                             {"cluster.nodes=9", "fsdp.strategy=HYBRID_SHARD", "fsdp.shard_group_size=24"});
    const planner::Plan plan = planner::plan_step(s.scenario);
    const SymmetricWindow w = symmetric_window(plan.schedule, s.scenario.cluster, s.options.fabric);
    EXPECT_EQ(w.nodes, 9);
    EXPECT_TRUE(w.node_list.empty());
    EXPECT_EQ(w.fallback.rfind("the ranks are not alike: ", 0), 0u) << w.fallback;
    std::vector<int> all(9);
    std::iota(all.begin(), all.end(), 0);
    const detail::WindowProof whole = prover_for(s, plan)->prove(
        Platform::build_nodes(s.scenario.cluster, planner::NcclParams::defaults_for(s.scenario.cluster), {}, all));
    EXPECT_FALSE(whole.exact);
    EXPECT_EQ(whole.reason.rfind("the ranks are not alike: ", 0), 0u) << whole.reason;
  }
}

TEST(SimgridOptions, ParsesTheSimulationObjectAndOverrides) {
  nlohmann::json j = base_scenario();
  j["simulation"] = {{"flow_mode", "per_step"},
                     {"stragglers", {{{"rank", 3}, {"compute_speed", 0.8}}}},
                     {"slow_links", {{{"link", "node0.nic*"}, {"bandwidth_factor", 0.5}}}},
                     {"fabric", {{"nodes_per_leaf", 2}, {"placement", "spread"}}}};
  SimgridScenario s = load(j, {"cluster.nodes=2", "simulation.symmetry=off", "simulation.fabric.host_bridge_gbps=64"});
  EXPECT_EQ(s.scenario.world_size(), 16);
  EXPECT_EQ(s.options.flow_mode, FlowMode::per_step);
  EXPECT_EQ(s.options.symmetry, Symmetry::off);
  ASSERT_EQ(s.options.stragglers.size(), 1u);
  EXPECT_EQ(s.options.stragglers[0].rank, 3);
  EXPECT_DOUBLE_EQ(s.options.stragglers[0].compute_speed, 0.8);
  ASSERT_EQ(s.options.slow_links.size(), 1u);
  EXPECT_EQ(s.options.slow_links[0].link, "node0.nic*");
  EXPECT_EQ(s.options.fabric.nodes_per_leaf, 2);
  EXPECT_EQ(s.options.fabric.placement, Placement::spread);
  EXPECT_DOUBLE_EQ(s.options.fabric.host_bridge_gbps, 64);
}

TEST(SimgridOptions, BadFieldsNameTheirPath) {
  auto error_of = [](const nlohmann::json& sim, const std::vector<std::string>& overrides = {}) -> std::string {
    nlohmann::json j = base_scenario();
    j["simulation"] = sim;
    try {
      load(j, overrides);
    } catch (const InputError& e) {
      return e.json_path();
    }
    return "no error";
  };
  EXPECT_EQ(error_of({{"stragglers", {{{"rank", 99}, {"compute_speed", 0.5}}}}}), "simulation.stragglers[0].rank");
  EXPECT_EQ(error_of({{"stragglers", {{{"rank", 1}, {"compute_speed", 1.5}}}}}), "simulation.stragglers[0].compute_speed");
  EXPECT_EQ(error_of({{"slow_links", {{{"link", "x"}, {"bandwidth_factor", 0}}}}}), "simulation.slow_links[0].bandwidth_factor");
  EXPECT_EQ(error_of({{"flow_mode", "fast"}}), "simulation.flow_mode");
  EXPECT_EQ(error_of({{"fabric", {{"leaves", 3}}}}), "simulation.fabric.leaves");
  EXPECT_EQ(error_of({{"typo", 1}}), "simulation.typo");
  EXPECT_EQ(error_of({{"platform_xml", "no-such.xml"}}), "simulation.platform_xml");
  EXPECT_EQ(error_of(nullptr, {"simulation.fabric.nodes_per_leaf=0"}), "simulation.fabric.nodes_per_leaf");
}

// A user's platform file is checked before SimGrid reads it (the session-38 input audit): SimGrid
// aborted its process on a duplicate link id or a host speed of 0f, and read a link of 0 or -5 Bps
// (or a latency of -1 s) as unlimited, giving the unmodified platform's step. A <link_ctn> of a
// route names a link again without declaring it; comments may hold anything.
TEST(SimgridOptions, APlatformFileIsCheckedBeforeSimgridReadsIt) {
  const std::string header =
      "<?xml version='1.0'?>\n<platform version=\"4.1\">\n<zone id=\"z\" routing=\"Full\">\n";
  auto check = [&](const std::string& body) -> std::string {
    const std::string path = (std::filesystem::temp_directory_path() / "fsdpsim_platform_check.xml").string();
    std::ofstream(path) << header << body << "</zone>\n</platform>\n";
    try {
      check_platform_file(path);
    } catch (const InputError& e) {
      return e.json_path() + " | " + e.what();
    }
    return "ok";
  };
  const std::string hosts = "<host id=\"a\" speed=\"1Gf\"/>\n<host id=\"b\" speed=\"1Gf,0.5Gf\"/>\n";
  const std::string link = "<link id=\"l\" bandwidth=\"25GBps\" latency=\"5us\"/>\n";
  const std::string route =
      "<route src=\"a\" dst=\"b\"><link_ctn id=\"l\"/></route>\n<!-- <link id=\"l\" bandwidth=\"0Bps\"/> -->\n";
  EXPECT_EQ(check(hosts + link + route), "ok");
  std::string e = check(hosts + link + link + route);
  EXPECT_EQ(e.substr(0, e.find(" | ")), "line 7: <link id=\"l\">") << e;
  EXPECT_NE(e.find("declared again (first at line 6)"), std::string::npos) << e;
  for (const char* bandwidth : {"0Bps", "-5Bps", "nanBps", "1e400Bps", "fast"}) {
    e = check(hosts + "<link id=\"l\" bandwidth=\"" + bandwidth + "\" latency=\"0s\"/>\n" + route);
    EXPECT_EQ(e.substr(0, e.find(" | ")), "line 6: <link id=\"l\"> bandwidth") << bandwidth << ": " << e;
    EXPECT_NE(e.find("expected a positive finite number with its unit"), std::string::npos) << e;
  }
  e = check(hosts + "<link id=\"l\" bandwidth=\"1Bps\" latency=\"-1s\"/>\n" + route);
  EXPECT_EQ(e.substr(0, e.find(" | ")), "line 6: <link id=\"l\"> latency") << e;
  e = check("<host id=\"a\" speed=\"1Gf,0f\"/>\n" + link);
  EXPECT_EQ(e.substr(0, e.find(" | ")), "line 4: <host id=\"a\"> speed") << e;
  e = check(hosts + "<cluster id=\"c\" prefix=\"n\" suffix=\"\" radical=\"0-3\" speed=\"1Gf\" bw=\"0Bps\" lat=\"1us\"/>\n");
  EXPECT_EQ(e.substr(0, e.find(" | ")), "line 6: <cluster id=\"c\"> bw") << e;
  try {
    check_platform_file(std::filesystem::temp_directory_path().string());
    ADD_FAILURE() << "a directory was accepted";
  } catch (const InputError& err) {
    EXPECT_NE(std::string(err.what()).find("is a directory"), std::string::npos) << err.what();
  }
}

}  // namespace
}  // namespace fsdpsim::sim
