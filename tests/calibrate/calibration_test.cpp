// From measurements to the calibration JSON the cost model reads: the written calibration
// reproduces synthetic clusters through NCCL's model, and changes the next estimate the way its
// numbers say.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

#include "../cli/cli_helpers.h"
#include "calibrate/calibrate.h"
#include "planner/cost_model.h"
#include "planner/gemm_model.h"
#include "planner/plan.h"

namespace fsdpsim::calibrate {
namespace {

using planner::CollectiveGroup;
using planner::CollectiveKind;

const std::string kScenario = std::string(FSDPSIM_SOURCE_ROOT) + "/scenarios/llama3.1-8b-8xh100.json";

// Llama-3.1-8B FULL_SHARD over 2 nodes of 8 H100: all-gathers span 16 ranks / 2 nodes.
planner::Scenario two_node_scenario(std::vector<std::string> extra = {}) {
  std::vector<std::string> o = {"cluster.nodes=2", "training.global_batch=32"};
  o.insert(o.end(), extra.begin(), extra.end());
  return planner::load_scenario(kScenario, o);
}

// A synthetic cluster in NCCL's ring form: per protocol a base latency and an intra-node hop,
// a network hop, and a bus bandwidth per span.
struct Truth {
  double base_us[3] = {6, 12, 20};
  double hop_us[3] = {0.5, 1.5, 3};
  double net_us[3] = {3, 5, 15};
  double intra_gbps[3] = {60, 200, 340};
  double inter_gbps[3] = {10, 30, 40};

  double seconds(CollectiveKind kind, const CollectiveGroup& g, double bytes, int p) const {
    const double mult = kind == CollectiveKind::all_reduce ? 2 : 1;
    const double se = mult * (g.nodes - 1), si = mult * (g.ranks - 1) - se;
    const double alpha = (base_us[p] + si * hop_us[p] + se * net_us[p]) * 1e-6;
    const double bw = (g.nodes == 1 ? intra_gbps[p] : inter_gbps[p]) * 1e9;
    return alpha + bytes * planner::bus_factor(kind, g.ranks) / bw;
  }
  double fastest(CollectiveKind kind, const CollectiveGroup& g, double bytes) const {
    return std::min({seconds(kind, g, bytes, 0), seconds(kind, g, bytes, 1), seconds(kind, g, bytes, 2)});
  }
};

Measurements synthetic(const Truth& truth, double noise, unsigned seed, const std::vector<CollectiveGroup>& spans) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-noise, noise);
  Measurements m;
  m.backend = "synthetic";
  m.device = "test";
  m.gpu = "H100-SXM-80GB";
  for (const CollectiveGroup& g : spans)
    for (CollectiveKind kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter, CollectiveKind::all_reduce})
      for (double b = 1024; b <= 4.0 * (1ull << 30); b *= std::pow(2.0, 0.25)) {
        std::vector<double> reps;
        for (int i = 0; i < 5; ++i) reps.push_back(truth.fastest(kind, g, b) * (1 + u(rng)));
        m.collectives.push_back({kind, g, b, stats_of(reps)});
      }
  return m;
}

std::string write_file(const std::string& name, const nlohmann::json& j) {
  auto dir = std::filesystem::temp_directory_path() / ("fsdpsim_calibrate_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path) << j.dump(2);
  return path;
}

TEST(CalibrateCalibration, ModelSpansAndGemmShapesComeFromTheScenario) {
  const planner::Scenario s = two_node_scenario();
  const auto spans = scenario_spans(s);
  ASSERT_EQ(spans.size(), 1u);
  EXPECT_EQ(spans[0].ranks, 16);
  EXPECT_EQ(spans[0].nodes, 2);
  const planner::Scenario hsdp = two_node_scenario({"fsdp.strategy=HYBRID_SHARD", "fsdp.shard_group_size=8"});
  const auto hs = scenario_spans(hsdp);
  // shard: 8 ranks in a node; replicate: 2 ranks over 2 nodes; world: 16 ranks over 2 nodes.
  ASSERT_EQ(hs.size(), 3u);
  EXPECT_EQ(hs[0].ranks, 8);
  EXPECT_EQ(hs[0].nodes, 1);
  EXPECT_EQ(hs[1].ranks, 2);
  EXPECT_EQ(hs[1].nodes, 2);
  EXPECT_EQ(hs[2].ranks, 16);
  EXPECT_EQ(hs[2].nodes, 2);
  // Llama-3.1-8B (hidden 4096, 8 KV heads of 128, MLP 14336, vocab 128256), micro-batch 2 x 8192.
  const auto shapes = model_gemm_shapes(s);
  auto has = [&](std::int64_t n, std::int64_t k) {
    return std::any_of(shapes.begin(), shapes.end(),
                       [&](const GemmShape& g) { return g.m == 16384 && g.n == n && g.k == k; });
  };
  EXPECT_TRUE(has(4096, 4096));    // q_proj, o_proj
  EXPECT_TRUE(has(1024, 4096));    // k_proj, v_proj
  EXPECT_TRUE(has(14336, 4096));   // gate_proj, up_proj
  EXPECT_TRUE(has(4096, 14336));   // down_proj
  EXPECT_TRUE(has(128256, 4096));  // lm_head
  for (const GemmShape& g : shapes) EXPECT_EQ(g.label.find_first_of("0123456789") == 0, false) << g.label;
}

TEST(CalibrateCalibration, WrittenCalibrationReproducesSyntheticClusterThroughNcclModel) {
  const Truth truth;
  const planner::Scenario s = two_node_scenario();
  const std::vector<CollectiveGroup> spans = {{8, 1}, {16, 2}};
  const Measurements m = synthetic(truth, 0.02, 21, spans);
  const FitResult f = fit(s, m);
  ASSERT_EQ(f.collectives.size(), 6u);
  for (const CollectiveFit& cf : f.collectives) EXPECT_EQ(cf.fit.segments.size(), 3u) << planner::collective_name(cf.kind);
  // The written model against the noise-free truth, at every size: within 2%.
  double worst = 0;
  for (const CollectiveGroup& g : spans)
    for (CollectiveKind kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter, CollectiveKind::all_reduce})
      for (double b = 1024; b <= 4.0 * (1ull << 30); b *= 2) {
        const double model = planner::estimate_collective(kind, b, g, s.cluster, f.calibration.nccl).seconds;
        const double err = std::abs(model / truth.fastest(kind, g, b) - 1);
        worst = std::max(worst, err);
        EXPECT_LE(err, 0.02) << planner::collective_name(kind) << " " << g.ranks << "/" << g.nodes << " at " << b;
      }
  std::printf("[ info ] written NCCL model vs synthetic truth: worst %.3f%%\n", 100 * worst);
  // The written model switches protocol where the truth does. By hand, all-gather over 8 ranks
  // in a node: LL 9.5 us + x/60 GB/s, LL128 22.5 us + x/200, Simple 41 us + x/340 (x = bus
  // bytes = 7/8 of the buffer): LL -> LL128 at 1.114 MB on the bus (1.273 MB buffer), LL128 ->
  // Simple at 8.99 MB (10.27 MB buffer).
  const double x1 = 13e-6 / (1 / 60e9 - 1 / 200e9) * 8 / 7, x2 = 18.5e-6 / (1 / 200e9 - 1 / 340e9) * 8 / 7;
  const CollectiveFit& ag = f.collectives[0];
  ASSERT_EQ(ag.kind, CollectiveKind::all_gather);
  ASSERT_EQ(ag.span.ranks, 8);
  ASSERT_EQ(ag.fit.crossovers_x.size(), 2u);
  EXPECT_NEAR(ag.fit.crossovers_x[0] * 8 / 7 / x1, 1, 0.03);
  EXPECT_NEAR(ag.fit.crossovers_x[1] * 8 / 7 / x2, 1, 0.03);
  auto protocol_at = [&](double bytes) {
    return planner::estimate_collective(CollectiveKind::all_gather, bytes, {8, 1}, s.cluster, f.calibration.nccl).protocol;
  };
  EXPECT_EQ(protocol_at(0.7 * x1), "LL");
  EXPECT_EQ(protocol_at(std::sqrt(x1 * x2)), "LL128");
  EXPECT_EQ(protocol_at(1.4 * x2), "Simple");
  EXPECT_EQ(planner::estimate_collective(CollectiveKind::all_gather, 1e9, {8, 1}, s.cluster, f.calibration.nccl).algorithm,
            "Ring");
  // The goodness of fit it reports (against the noisy medians) agrees.
  for (const ErrorSummary& e : summarize_errors(f.errors)) {
    EXPECT_LE(e.max_abs_error, 0.03) << e.what;
    EXPECT_LE(e.median_abs_error, 0.01) << e.what;
  }
  // The JSON loads the way a scenario's calibration loads, fit section and all.
  const nlohmann::json j = calibration_json(f, m);
  ASSERT_TRUE(j.contains("fit"));
  EXPECT_EQ(j["fit"]["collectives"].size(), 6u);
  EXPECT_EQ(j["fit"]["collectives"][0]["crossover_bytes"].size(), 2u);
  const planner::Calibration back = planner::read_calibration(j, "calib.json", planner::default_calibration(s.cluster));
  EXPECT_EQ(back.nccl.to_json(), f.calibration.nccl.to_json());
}

// Halving the inter-node bandwidth the measurements show halves the bandwidth of every
// all-gather of the multi-node scenario in the next estimate: each all-gather's transfer term
// doubles and its latency stays, as the hand computation from the truth says.
TEST(CalibrateCalibration, HalvedInterNodeBandwidthDoublesTheAllGatherTransferTime) {
  Truth fast, slow;
  for (int p = 0; p < 3; ++p) slow.inter_gbps[p] = fast.inter_gbps[p] / 2;
  const std::vector<CollectiveGroup> spans = {{8, 1}, {16, 2}};
  const planner::Scenario base = two_node_scenario();
  const std::string fast_file = write_file("fast.json", calibration_json(fit(base, synthetic(fast, 0, 1, spans)), synthetic(fast, 0, 1, spans)));
  const std::string slow_file = write_file("slow.json", calibration_json(fit(base, synthetic(slow, 0, 1, spans)), synthetic(slow, 0, 1, spans)));
  const planner::Scenario sf = two_node_scenario({"calibration=" + fast_file});
  const planner::Scenario ss = two_node_scenario({"calibration=" + slow_file});
  const planner::CostModel cf(sf), cs(ss);
  const planner::Plan plan = planner::plan_step(sf);
  int checked = 0;
  double first_fast = -1, first_slow = -1;
  for (const planner::Op& op : plan.schedule.ops) {
    if (op.kind != planner::OpKind::all_gather) continue;
    const planner::CollectiveEstimate a = cf.collective(op, plan.schedule), b = cs.collective(op, plan.schedule);
    // By hand: t = alpha + bytes x 15/16 / busbw, the fastest protocol of the truth.
    EXPECT_NEAR(a.seconds / fast.fastest(CollectiveKind::all_gather, {16, 2}, op.comm_bytes), 1, 1e-6) << op.name;
    EXPECT_NEAR(b.seconds / slow.fastest(CollectiveKind::all_gather, {16, 2}, op.comm_bytes), 1, 1e-6) << op.name;
    if (a.protocol == "Simple" && b.protocol == "Simple") {
      EXPECT_NEAR(a.latency_seconds, b.latency_seconds, 1e-12);
      EXPECT_NEAR((b.seconds - b.latency_seconds) / (a.seconds - a.latency_seconds), 2, 1e-9) << op.name;
    }
    if (first_fast < 0) {
      first_fast = a.seconds;
      first_slow = b.seconds;
    }
    ++checked;
  }
  EXPECT_GT(checked, 30);
  // Unit 0 (embeddings, final norm, lm_head: 2.1 GB of bf16 parameters) is gathered first,
  // before any compute, and reduce-scattered last (fp32 gradients), after all compute: nothing
  // runs beside either, so the estimate exposes both in full and unit 0's exposed
  // communication grows by exactly their extra transfer time. By hand: (AG bytes + RS bytes)
  // x 15/16 x (1/20 - 1/40 GB/s).
  double ag_bytes = 0, rs_bytes = 0;
  for (const planner::Op& op : plan.schedule.ops) {
    if (op.unit != 0) continue;
    if (op.kind == planner::OpKind::all_gather && ag_bytes == 0) ag_bytes = op.comm_bytes;
    if (op.kind == planner::OpKind::reduce_scatter) rs_bytes = op.comm_bytes;
  }
  EXPECT_EQ(ag_bytes, 2101354496.0);
  EXPECT_EQ(rs_bytes, 2 * ag_bytes);  // fp32 reduce dtype
  const double lat = fast.seconds(CollectiveKind::all_gather, {16, 2}, 0, 2);
  EXPECT_NEAR(first_fast, lat + ag_bytes * 15 / 16 / 40e9, 1e-9);
  EXPECT_NEAR(first_slow, lat + ag_bytes * 15 / 16 / 20e9, 1e-9);
  const auto est = [](const std::string& file) {
    const testing::CommandResult r =
        testing::run_cli("estimate --scenario " + kScenario +
                         " --set cluster.nodes=2 --set training.global_batch=32 --set calibration=" + file + " --json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out);
  };
  const nlohmann::json ef = est(fast_file), es = est(slow_file);
  const double u0f = ef["time"]["exposed_comm_by_unit_seconds"][0].get<double>();
  const double u0s = es["time"]["exposed_comm_by_unit_seconds"][0].get<double>();
  const double by_hand = (ag_bytes + rs_bytes) * 15 / 16 * (1 / 20e9 - 1 / 40e9);
  std::printf("[ info ] exposed comm of unit 0: %.6f s -> %.6f s; +%.6f s, by hand +%.6f s\n", u0f, u0s, u0s - u0f,
              by_hand);
  EXPECT_NEAR(u0s - u0f, by_hand, 1e-6 * by_hand);
  EXPECT_GT(es["time"]["exposed_comm_seconds"].get<double>(), ef["time"]["exposed_comm_seconds"].get<double>());
}

// Raising the fitted GEMM efficiency (the GEMM model's ceiling) shortens compute by what the
// GEMM model says the step's GEMMs gain.
TEST(CalibrateCalibration, GemmEfficiencyScalesComputeTimeByTheRatio) {
  const planner::Scenario s = two_node_scenario();
  const double peak = s.cluster.gpu.peak_flops.at("bf16");
  // A GPU that runs every GEMM as the GEMM model says at ceiling e_max; the grid stops at
  // 4096, so the ceiling is solved on the largest (4096^3), not on the normalising 8192^3.
  auto measured = [&](double e_max) {
    Measurements m;
    m.backend = "synthetic";
    m.device = "test";
    m.gpu = s.cluster.gpu.name;
    planner::GemmDevice device = planner::CostModel(s).gemm_device();
    device.large_gemm_efficiency = e_max;
    for (std::int64_t d = 64; d <= 4096; d *= 2)
      for (std::int64_t rows : {d / 8, d}) {
        const GemmShape g{std::max<std::int64_t>(rows, 1), d, d, "grid"};
        const double seconds = planner::estimate_gemm({double(g.m), double(g.n), double(g.k)}, device).seconds;
        m.gemms.push_back({g, "bf16", stats_of({seconds}), peak});
      }
    // GEMMs alone and beside a collective take the same time: no interference term.
    m.interference.push_back({stats_of({1e-3}), stats_of({1e-3}), "test"});
    return m;
  };
  const Measurements lo = measured(0.5), hi = measured(0.75);
  const FitResult flo = fit(s, lo), fhi = fit(s, hi);
  ASSERT_EQ(flo.gemm_ceilings.size(), 1u);
  EXPECT_EQ(flo.gemm_ceilings[0].solved_on.m, 4096);
  EXPECT_FALSE(flo.gemm_ceilings[0].ceiling.capped);
  const double e1 = flo.calibration.matmul_efficiency, e2 = fhi.calibration.matmul_efficiency;
  EXPECT_NEAR(e1, 0.5, 1e-9);
  EXPECT_NEAR(e2, 0.75, 1e-9);
  // Every measured shape is the model's own at that ceiling: no error anywhere.
  for (const FitError& e : flo.errors) {
    if (e.what.rfind("gemm", 0) == 0) {
      EXPECT_NEAR(e.error(), 0, 1e-6) << e.item;
    }
  }
  EXPECT_EQ(flo.calibration.compute_slowdown_under_comm, 0);
  const std::string f1 = write_file("lo.json", calibration_json(flo, lo));
  const std::string f2 = write_file("hi.json", calibration_json(fhi, hi));
  auto compute = [](const std::string& file) {
    const testing::CommandResult r =
        testing::run_cli("estimate --scenario " + kScenario +
                         " --set cluster.nodes=2 --set training.global_batch=32 --set calibration=" + file + " --json");
    EXPECT_EQ(r.exit_code, 0) << r.err;
    return nlohmann::json::parse(r.out)["time"]["compute_seconds"].get<double>();
  };
  // By hand: compute time moves by the GEMMs' time at e1 minus their time at e2, every GEMM of
  // every compute op priced by the GEMM model (planner/gemm_model.h) at each ceiling; nothing
  // else in the step depends on matmul_efficiency.
  const planner::Plan plan = planner::plan_step(s);
  planner::GemmDevice device = planner::CostModel(s).gemm_device();
  auto gemm_seconds = [&](double e) {
    device.large_gemm_efficiency = e;
    double seconds = 0;
    for (const planner::Op& op : plan.schedule.ops)
      if (op.kernel_set >= 0)
        for (const planner::GemmShape& g : plan.schedule.kernel_sets[op.kernel_set].gemms)
          seconds += planner::estimate_gemm(g, device).seconds;
    return seconds;
  };
  const double c1 = compute(f1), c2 = compute(f2);
  const double expected_drop = gemm_seconds(e1) - gemm_seconds(e2);
  std::printf("[ info ] compute %.4f s at e=%.4f -> %.4f s at e=%.4f; GEMMs %.4f -> %.4f s\n", c1, e1, c2, e2,
              gemm_seconds(e1), gemm_seconds(e2));
  EXPECT_GT(expected_drop, 0.2 * c1);  // the GEMMs are most of the step's compute
  EXPECT_NEAR(c1 - c2, expected_drop, 1e-6 * c1);
}

// A GEMM measured 25% slower beside a collective: calibrate writes it as the GEMMs' slowdown and
// the other kernels' ([GEMMs beside NCCL], planner/cost_model.h), so on an H100, whose shipped
// defaults give its GEMMs 0.70, the engines slow compute by the measured 0.25 whatever the share.
TEST(CalibrateCalibration, MeasuredInterferenceReplacesTheShippedGemmSlowdown) {
  const planner::Scenario s = two_node_scenario();
  ASSERT_EQ(planner::default_calibration(s.cluster).gemm_slowdown_under_comm, 0.70);
  Measurements m;
  m.backend = "synthetic";
  m.device = "test";
  m.gpu = s.cluster.gpu.name;
  m.interference.push_back({stats_of({1e-3}), stats_of({1.25e-3}), "all_gather"});
  const FitResult f = fit(s, m);
  EXPECT_NEAR(f.calibration.compute_slowdown_under_comm, 0.25, 1e-12);
  ASSERT_TRUE(f.calibration.gemm_slowdown_under_comm.has_value());
  EXPECT_NEAR(*f.calibration.gemm_slowdown_under_comm, 0.25, 1e-12);
  EXPECT_TRUE(f.calibration.sources.count("gemm_slowdown_under_comm"));
  const std::string file = write_file("interference.json", calibration_json(f, m));
  const testing::CommandResult r = testing::run_cli("estimate --scenario " + kScenario +
                                                    " --set cluster.nodes=2 --set training.global_batch=32 --set calibration=" +
                                                    file + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NEAR(nlohmann::json::parse(r.out)["time"]["compute_slowdown_under_comm"].get<double>(), 0.25, 1e-12);
}

// The GEMMs measured on an H100 (tests/data/hardware/calibration-h100-2026-11-27.json, the
// measurements `calibrate --backend cuda` recorded), fitted again: matmul_efficiency is the
// measured 8192^3 GEMM's efficiency, 1,099,511,627,776 FLOPs / 1.394432 ms / 989.4 TFLOP/s =
// 0.79694 (the shipped H100 value is 0.807, from 798 TFLOP/s on the same machine another day).
// The saturating curve this replaced fitted 1.22 on the same data and wrote 1, capped: every
// GEMM of an estimate with that file would have run at the dense peak.
TEST(CalibrateCalibration, RecordedH100GemmsGiveTheMeasuredCeiling) {
  const std::string file = std::string(FSDPSIM_SOURCE_ROOT) + "/tests/data/hardware/calibration-h100-2026-11-27.json";
  std::ifstream in(file);
  ASSERT_TRUE(in) << file;
  const nlohmann::json recorded = nlohmann::json::parse(in);
  const planner::Scenario s = planner::load_scenario(kScenario, {"cluster.gpus_per_node=1", "training.global_batch=2"});
  const double peak = s.cluster.gpu.peak_flops.at("bf16");
  EXPECT_DOUBLE_EQ(peak, 989.4e12);
  Measurements m;
  m.backend = "cuda";
  m.device = "recorded H100";
  m.gpu = s.cluster.gpu.name;
  for (const nlohmann::json& g : recorded.at("fit").at("measurements").at("gemms")) {
    const GemmShape shape{g.at("m").get<std::int64_t>(), g.at("n").get<std::int64_t>(), g.at("k").get<std::int64_t>(),
                          g.at("label").get<std::string>()};
    m.gemms.push_back({shape, g.at("dtype").get<std::string>(),
                       stats_of({g.at("time").at("median_seconds").get<double>()}), peak});
  }
  ASSERT_EQ(m.gemms.size(), 21u);
  const FitResult f = fit(s, m);
  ASSERT_EQ(f.gemm_ceilings.size(), 1u);
  EXPECT_EQ(f.gemm_ceilings[0].solved_on.label, "square 8192");
  EXPECT_FALSE(f.gemm_ceilings[0].ceiling.capped);
  EXPECT_NEAR(f.calibration.matmul_efficiency, 1099511627776.0 / 1.3944320678710936e-3 / 989.4e12, 1e-9);
  EXPECT_NEAR(f.calibration.matmul_efficiency, 0.79694, 5e-5);
  // The model at that ceiling against the other large measured shapes (held out; the GEMM
  // model's constants were fitted to XLA's published H100 table, not to these): within 8%
  // (-3.3% to -6.8%: the model is a little slow on them). The small shapes are not judged: a
  // GEMM of a few microseconds timed alone through the runtime waits for its launch (11.5 us a
  // trivial op on this machine, the same file's kernel_issue_seconds), which the kernel model
  // does not hold.
  int large = 0;
  for (const FitError& e : f.errors) {
    if (e.what != "gemm bf16 efficiency (GEMM model)") continue;
    std::printf("[ info ] %-32s measured %.4f model %.4f (%+.1f%%)\n", e.item.c_str(), e.measured, e.fitted,
                100 * e.error());
    if (e.measured > 0.7) {
      EXPECT_LT(std::abs(e.error()), 0.08) << e.item;
      ++large;
    }
  }
  EXPECT_GE(large, 4);
}

// The normalising 8192^3 GEMM sets the ceiling when it was measured, even beside a larger
// one: 8192^3 in 1.5 ms is 2 x 8192^3 / 1.5e-3 / 989.4e12 = 0.74087 by hand; a 16384 x 8192 x
// 8192 GEMM measured as if at 0.5 does not move it.
TEST(CalibrateCalibration, GemmCeilingIsTheNormalisingGemmsWhenMeasured) {
  const planner::Scenario s = two_node_scenario();
  const double peak = s.cluster.gpu.peak_flops.at("bf16");
  Measurements m;
  m.backend = "synthetic";
  m.device = "test";
  m.gpu = s.cluster.gpu.name;
  const GemmShape square{8192, 8192, 8192, "square 8192"}, larger{16384, 8192, 8192, "rows 16384 of 8192"};
  m.gemms.push_back({larger, "bf16", stats_of({larger.flops() / (peak * 0.5)}), peak});
  m.gemms.push_back({square, "bf16", stats_of({1.5e-3}), peak});
  const FitResult f = fit(s, m);
  ASSERT_EQ(f.gemm_ceilings.size(), 1u);
  EXPECT_EQ(f.gemm_ceilings[0].solved_on.label, "square 8192");
  EXPECT_NEAR(f.calibration.matmul_efficiency, 2.0 * 8192 * 8192 * 8192 / 1.5e-3 / 989.4e12, 1e-9);
  EXPECT_NEAR(f.calibration.matmul_efficiency, 0.74087, 5e-5);
}

TEST(CalibrateCalibration, LoaderChecksTheFitSection) {
  const planner::Calibration base;
  EXPECT_NO_THROW(planner::read_calibration({{"fit", {{"anything", 1}}}, {"matmul_efficiency", 0.5}}, "c.json", base));
  try {
    planner::read_calibration({{"fit", 3}}, "c.json", base);
    FAIL() << "a non-object fit section was accepted";
  } catch (const InputError& e) {
    EXPECT_NE(std::string(e.what()).find("fit"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("c.json"), std::string::npos) << e.what();
  }
}

TEST(CalibrateCalibration, NoMeasurementsKeepTheDefaults) {
  const planner::Scenario s = two_node_scenario();
  Measurements m;
  m.backend = "synthetic";
  m.device = "test";
  const FitResult f = fit(s, m);
  EXPECT_TRUE(f.fitted_fields.empty());
  EXPECT_EQ(f.calibration.matmul_efficiency, planner::default_calibration(s.cluster).matmul_efficiency);
  const nlohmann::json j = calibration_json(f, m);
  EXPECT_FALSE(j.contains("matmul_efficiency"));
  EXPECT_NO_THROW(planner::read_calibration(j, "c.json", planner::default_calibration(s.cluster)));
}

}  // namespace
}  // namespace fsdpsim::calibrate

namespace fsdpsim::calibrate {
namespace {

// HSDP on 2 nodes of 8: the replicate groups (2 ranks, one per node) have 8 instances per
// node, and the cost model shares the node's NICs between them (CostModel::collective). Whether
// the replicate span was measured alone (one process) or with all 8 instances side by side
// (mpi), the calibrated cost model prices a replicate all-reduce of the scenario at the
// measured line: alone at 40 GB/s within the cluster's 8 x 50 GB/s NICs (50 GB/s per
// instance); side by side the measured 40 GB/s already is each instance's share.
TEST(CalibrateCalibration, ReplicateAllReducePricedAtTheMeasuredLineWithNicSharing) {
  const Truth truth;
  const planner::Scenario s = two_node_scenario({"fsdp.strategy=HYBRID_SHARD", "fsdp.shard_group_size=8"});
  const planner::Plan plan = planner::plan_step(s);
  for (bool side_by_side : {false, true}) {
    Measurements m = synthetic(truth, 0, 1, {{8, 1}, {2, 2}});
    m.side_by_side = side_by_side;
    const FitResult f = fit(s, m);
    const std::string file = write_file(side_by_side ? "hsdp_mpi.json" : "hsdp_alone.json", calibration_json(f, m));
    const planner::Scenario sc =
        two_node_scenario({"fsdp.strategy=HYBRID_SHARD", "fsdp.shard_group_size=8", "calibration=" + file});
    const planner::CostModel cost(sc);
    int checked = 0;
    for (const planner::Op& op : plan.schedule.ops) {
      if (op.kind != planner::OpKind::all_reduce) continue;
      const planner::ProcessGroup& g = plan.schedule.groups[op.group];
      ASSERT_EQ(g.ranks, 2);
      ASSERT_EQ(g.nodes, 2);
      EXPECT_NEAR(cost.collective(op, plan.schedule).seconds /
                      truth.fastest(CollectiveKind::all_reduce, {2, 2}, op.comm_bytes), 1, 1e-6)
          << (side_by_side ? "side by side: " : "alone: ") << op.name;
      ++checked;
    }
    EXPECT_GT(checked, 0);
    for (const ErrorSummary& e : summarize_errors(f.errors)) EXPECT_LE(e.max_abs_error, 1e-6) << e.what;
  }
}

}  // namespace
}  // namespace fsdpsim::calibrate
