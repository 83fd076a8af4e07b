// Tests of planner/gemm_model: (a) the mechanisms worked by hand (normalisation, wave
// quantization, tile reuse, k-loop ramp, split-K, memory roofline, kernel floor,
// monotonicity), (b) the published shape sweeps of tests/data/kernels/gemm_published.csv
// (XLA's measured GEMM tables for H100 and B200, openxla/xla
// xla/service/gpu/model/default_matmul_perf_table.txtpb@ad6eaee1): the rows the constants were
// fitted on and, separately, the rows they never saw, (c) the measured-table lookup.
#include "planner/gemm_model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "planner/cost_model.h"
#include "planner/hardware.h"
#include "planner/scenario.h"

namespace fsdpsim::planner {
namespace {

// The model's view of a catalog GPU: SMs, peak, HBM from scenarios/hardware/gpus.json; the
// measured 8192^3 ceiling and HBM efficiency from the shipped calibration
// (scenarios/hardware/calibration.json: H100 0.807 = 798 TFLOP/s measured here; B200 0.716 =
// cuBLAS 1610 TFLOP/s at 8192^3, pyptx.dev/performance).
GemmDevice catalog_device(const std::string& gpu_name) {
  ClusterSpec cluster;
  cluster.gpu = find_gpu(gpu_name);
  const Calibration calibration = default_calibration(cluster);
  GemmDevice device;
  device.sm_count = cluster.gpu.sm_count;
  device.peak_flops = cluster.gpu.peak_flops.at("bf16");
  device.hbm_bytes_per_second = cluster.gpu.hbm_bandwidth_bytes_per_second;
  device.hbm_efficiency = calibration.hbm_efficiency;
  device.large_gemm_efficiency = calibration.matmul_efficiency;
  return device;
}

// A hand-sized H100-like device: round numbers make the expected values easy to work.
GemmDevice hand_device() {
  GemmDevice device;
  device.sm_count = 132;
  device.peak_flops = 989.4e12;
  device.hbm_bytes_per_second = 3.35e12;
  device.hbm_efficiency = 0.9;
  device.large_gemm_efficiency = 0.8;
  return device;
}

double seconds_per_flop(const GemmPlan& plan, const GemmShape& shape) { return plan.compute_seconds / shape.flops(); }

// ---- (a) mechanisms ----

TEST(GemmModel, Square8192LandsExactlyOnTheMeasuredCeiling) {
  for (const GemmDevice& device : {hand_device(), catalog_device("H100-SXM-80GB"), catalog_device("A100-SXM-80GB"),
                                   catalog_device("B200-SXM-180GB")}) {
    const GemmEstimate estimate = estimate_gemm({8192, 8192, 8192}, device);
    EXPECT_NEAR(estimate.efficiency, device.large_gemm_efficiency, 1e-12);
    EXPECT_STREQ(estimate.bound, "compute");
  }
}

TEST(GemmModel, OneTileMoreThanTheSmsTakesASecondWave) {
  // 128x128 tiles: a 1536 x 1408 output is 12 x 11 = 132 tiles (one wave on 132 SMs), an
  // 896 x 2432 output is 7 x 19 = 133 (two waves, the second with one CTA). Same CTA time, so
  // per FLOP: 2 waves / 133 tiles over 1 wave / 132 tiles = 2 x 132 / 133. (k = 8192 keeps both
  // compute bound: ~45 us of tensor-core work against ~18 us of HBM traffic.)
  const GemmDevice device = hand_device();
  const double eff = gemm_sm_efficiency(device);
  const GemmShape full{128 * 12, 128 * 11, 8192}, one_more{128 * 7, 128 * 19, 8192};
  const GemmPlan full_plan = gemm_plan(full, device, {128, 128}, 1, eff);
  const GemmPlan one_more_plan = gemm_plan(one_more, device, {128, 128}, 1, eff);
  EXPECT_EQ(full_plan.waves, 1);
  EXPECT_EQ(one_more_plan.waves, 2);
  EXPECT_NEAR(seconds_per_flop(one_more_plan, one_more) / seconds_per_flop(full_plan, full), 2.0 * 132 / 133, 1e-12);
  // The library's choice cannot dodge it here (256-wide tiles give 70-76 CTAs of double
  // length, 64-wide tiles 3+ waves of half-rate CTAs), so whole-kernel time per FLOP jumps
  // too, diluted only by the 5 us kernel floor.
  const GemmEstimate a = estimate_gemm(full, device), b = estimate_gemm(one_more, device);
  EXPECT_STREQ(a.bound, "compute");
  EXPECT_STREQ(b.bound, "compute");
  EXPECT_GT((b.seconds / one_more.flops()) / (a.seconds / full.flops()), 1.7);
}

TEST(GemmModel, SmallTilesReuseLessAndRunSlowerPerSm) {
  // One wave either way: a 128x128 output as one 128x128 CTA or four 64x64 CTAs. A 64x64 tile's
  // reuse is 64*64/128 = 32, half the full-rate 64, so each CTA's k loop does 1/4 the FLOPs at 1/2
  // the rate; its ramp is a quarter of the 128x128 tile's 1 us.
  const GemmDevice device = hand_device();
  const double eff = gemm_sm_efficiency(device);
  const GemmShape shape{128, 128, 4096};
  const GemmPlan big = gemm_plan(shape, device, {128, 128}, 1, eff);
  const GemmPlan small = gemm_plan(shape, device, {64, 64}, 1, eff);
  EXPECT_EQ(small.ctas, 4);
  EXPECT_NEAR((small.compute_seconds - 0.25e-6) / (big.compute_seconds - 1e-6), 0.5, 1e-12);
  // A 256x128 tile reuses more (85.3) but gains nothing: tensor cores already set the pace.
  const GemmShape large{8192, 8192, 4096};
  EXPECT_NEAR(seconds_per_flop(gemm_plan(large, device, {256, 128}, 1, eff), large),
              seconds_per_flop(gemm_plan(large, device, {128, 128}, 1, eff), large), 1e-20);
}

TEST(GemmModel, ShortKLoopsPayTheTileRamp) {
  // Same tiles, same waves: a CTA's time is its k loop plus the ramp, 1 us for a 128x128 tile
  // (kGemmTileRampSecondsPerOutputElement x 16384), so the short-k GEMM pays relatively more.
  const GemmDevice device = hand_device();
  const double eff = gemm_sm_efficiency(device);
  const GemmShape short_k{8192, 8192, 256}, long_k{8192, 8192, 8192};
  const GemmPlan short_plan = gemm_plan(short_k, device, {128, 128}, 1, eff);
  const GemmPlan long_plan = gemm_plan(long_k, device, {128, 128}, 1, eff);
  // One SM's share of peak: 989.4e12 / 132 x e_sm (a 128x128 tile runs at full rate).
  const double sm_rate = 989.4e12 / 132 * eff;
  const double waves = std::ceil(64.0 * 64 / 132);  // 4096 tiles: 32 waves
  EXPECT_EQ(short_plan.waves, waves);
  EXPECT_NEAR(short_plan.compute_seconds, waves * (2.0 * 128 * 128 * 256 / sm_rate + 1e-6), 1e-15);
  EXPECT_NEAR(long_plan.compute_seconds, waves * (2.0 * 128 * 128 * 8192 / sm_rate + 1e-6), 1e-15);
  EXPECT_LT(estimate_gemm(short_k, device).efficiency, estimate_gemm(long_k, device).efficiency);
  // The ramp is a time: a 64x64 tile pays a quarter of it, and a GPU with twice the per-SM rate
  // pays the same microsecond (it is not k-loop work).
  const GemmPlan small_tile = gemm_plan(short_k, device, {64, 64}, 1, eff);
  EXPECT_NEAR(small_tile.compute_seconds,
              small_tile.waves * (2.0 * 64 * 64 * 256 / (sm_rate * 0.5) + 0.25e-6), 1e-15);
  GemmDevice fast = device;
  fast.peak_flops *= 2;
  const GemmPlan fast_plan = gemm_plan(short_k, fast, {128, 128}, 1, eff);
  EXPECT_NEAR(fast_plan.compute_seconds, waves * (2.0 * 128 * 128 * 256 / (2 * sm_rate) + 1e-6), 1e-15);
}

TEST(GemmModel, SplitKFillsIdleSmsWhenTheOutputIsSmall) {
  // 256x256 output: four 128x128 tiles for 132 SMs; k = 8192 is 128 k-blocks to share out.
  const GemmDevice device = hand_device();
  const double eff = gemm_sm_efficiency(device);
  const GemmShape shape{256, 256, 8192};
  const GemmPlan best = best_gemm_plan(shape, device, eff);
  EXPECT_GT(best.split_k, 1);
  EXPECT_LE(best.ctas, device.sm_count);
  EXPECT_LT(best.seconds(), gemm_plan(shape, device, best.tile, 1, eff).seconds() / 2);
  // No split once the output tiles alone fill the SMs.
  EXPECT_EQ(best_gemm_plan({8192, 8192, 8192}, device, eff).split_k, 1);
}

TEST(GemmModel, EachExtraSplitCostsOneSerialReductionStep) {
  // The splits of a tile add their partials into C one after another: (s - 1) x 1 us.
  const GemmDevice device = hand_device();
  const double eff = gemm_sm_efficiency(device);
  const GemmShape shape{256, 256, 8192};
  for (int split : {1, 2, 5}) {
    const GemmPlan plan = gemm_plan(shape, device, {64, 64}, split, eff);
    EXPECT_NEAR(plan.reduction_seconds, (split - 1) * 1e-6, 1e-18) << split;
    EXPECT_NEAR(plan.seconds(), std::max(plan.compute_seconds, plan.memory_seconds) + (split - 1) * 1e-6, 1e-18);
  }
  // So the library splits less: 16 64x64 tiles leave room for 8 splits; without the serial step
  // the model splits until the fp32 partials' HBM traffic binds (6), with it about
  // sqrt(k-loop time / step) ways. By hand, one 64x64 k-block takes 2*64^3 / (989.4e12/132 * e_sm * 0.5).
  GemmDevice free_reduction = device;
  free_reduction.split_k_step_seconds = 0;
  const GemmPlan free_plan = best_gemm_plan(shape, free_reduction, gemm_sm_efficiency(free_reduction));
  const GemmPlan best = best_gemm_plan(shape, device, eff);
  EXPECT_GT(free_plan.split_k, best.split_k);
  EXPECT_EQ(best.tile.m, 64);
  EXPECT_EQ(best.tile.n, 64);
  const double k_block_seconds = 2.0 * 64 * 64 * 64 / (989.4e12 / 132 * eff * 0.5);
  // 128 k-blocks over s splits plus (s - 1) steps: minimised near s = sqrt(128 * t_kb / 1 us).
  const double ideal = std::sqrt(128 * k_block_seconds / 1e-6);
  EXPECT_GE(best.split_k, std::floor(ideal) - 1);
  EXPECT_LE(best.split_k, std::ceil(ideal) + 1);
  EXPECT_LT(best.split_k, 6);
}

TEST(GemmModel, SkinnyGemmTakesTheHbmRooflineTime) {
  // m = 1 (a GEMV): A, B and C through HBM, (1*8192 + 8192*8192 + 1*8192) * 2 bytes at
  // 3.35 TB/s * 0.9 = 44.5 us, against ~22 us of compute for 128 64x64 CTAs in one wave.
  const GemmDevice device = hand_device();
  const GemmShape shape{1, 8192, 8192};
  const double roofline_seconds = (8192.0 + 8192.0 * 8192 + 8192) * 2 / (3.35e12 * 0.9);
  const GemmEstimate estimate = estimate_gemm(shape, device);
  EXPECT_STREQ(estimate.bound, "memory");
  EXPECT_NEAR(estimate.seconds, device.kernel_floor_seconds + roofline_seconds, 1e-15);
}

TEST(GemmModel, TinyGemmCostsTheKernelFloor) {
  const GemmDevice device = hand_device();
  const GemmEstimate estimate = estimate_gemm({64, 64, 64}, device);
  EXPECT_STREQ(estimate.bound, "launch");
  EXPECT_GE(estimate.seconds, kGemmKernelFloorSeconds);
  EXPECT_LT(estimate.seconds, 1.2 * kGemmKernelFloorSeconds);
  EXPECT_EQ(estimate_gemm({0, 4096, 4096}, device).seconds, 0);
}

TEST(GemmModel, TimeNeverFallsAsAnyDimensionGrows) {
  const GemmDevice device = hand_device();
  const std::vector<double> sizes = {1, 16, 63, 64, 65, 100, 128, 129, 255, 256, 384, 512, 640, 1000, 1024,
                                     1536, 2048, 3000, 4096, 6144, 8192, 8320, 12288, 16384, 16896, 32768};
  for (double a : {64.0, 1024.0, 4096.0}) {
    for (double b : {128.0, 1024.0, 8192.0}) {
      double m_prev = 0, n_prev = 0, k_prev = 0;
      for (double x : sizes) {
        const double m_time = estimate_gemm({x, a, b}, device).seconds;
        const double n_time = estimate_gemm({a, x, b}, device).seconds;
        const double k_time = estimate_gemm({a, b, x}, device).seconds;
        EXPECT_GE(m_time, m_prev) << "m=" << x << " n=" << a << " k=" << b;
        EXPECT_GE(n_time, n_prev) << "m=" << a << " n=" << x << " k=" << b;
        EXPECT_GE(k_time, k_prev) << "m=" << a << " n=" << b << " k=" << x;
        m_prev = m_time, n_prev = n_time, k_prev = k_time;
      }
    }
  }
}

TEST(GemmModel, EfficiencyRisesTowardTheCeilingWithSize) {
  const GemmDevice device = hand_device();
  double previous = 0;
  for (double side : {256.0, 512.0, 1024.0, 2048.0, 4096.0, 8192.0}) {
    const double efficiency = estimate_gemm({side, side, side}, device).efficiency;
    EXPECT_GT(efficiency, previous) << side;
    EXPECT_LE(efficiency, device.large_gemm_efficiency + 1e-12) << side;
    previous = efficiency;
  }
}

TEST(GemmModel, RejectsADeviceItCannotPrice) {
  GemmDevice device = hand_device();
  device.sm_count = 0;
  EXPECT_THROW(estimate_gemm({1024, 1024, 1024}, device), std::invalid_argument);
  device = hand_device();
  device.large_gemm_efficiency = 1.5;
  EXPECT_THROW(estimate_gemm({1024, 1024, 1024}, device), std::invalid_argument);
  EXPECT_THROW(estimate_gemm({-1, 1024, 1024}, hand_device()), std::invalid_argument);
}

// ---- (b) published shape sweeps ----

struct PublishedRow {
  std::string gpu, role, locator;
  GemmShape shape;
  double flops_per_second = 0;
};

std::vector<PublishedRow> published_rows() {
  const std::string path = std::string(FSDPSIM_SOURCE_ROOT) + "/tests/data/kernels/gemm_published.csv";
  std::ifstream in(path);
  EXPECT_TRUE(in) << path;
  std::vector<PublishedRow> rows;
  std::string line;
  bool header = true;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (header) {  // gpu,m,n,k,flops_per_second,role,locator
      EXPECT_EQ(line, "gpu,m,n,k,flops_per_second,role,locator");
      header = false;
      continue;
    }
    std::stringstream fields(line);
    std::string gpu, m, n, k, flops, role, locator;
    std::getline(fields, gpu, ',');
    std::getline(fields, m, ',');
    std::getline(fields, n, ',');
    std::getline(fields, k, ',');
    std::getline(fields, flops, ',');
    std::getline(fields, role, ',');
    std::getline(fields, locator);
    rows.push_back({gpu, role, locator, {std::stod(m), std::stod(n), std::stod(k)}, std::stod(flops)});
  }
  return rows;
}

struct SweepFit {
  int rows = 0;
  int within_10_percent = 0;
  double median_error = 0;  // |predicted / measured - 1|
  double max_error = 0;
};

// The published rows no model that is monotone in m, n and k can meet, each with its reason.
// H100 256x256x4096: 5.9 us measured, faster than 256x256x2048 (8.4 us) and 256x256x1024 (7.1 us)
// with twice and four times the work, and faster than both its neighbours in m and n at the same k
// (256x512x4096: 11.5 us, 512x256x4096: 11.6 us): the autotuner found a kernel for this one shape
// that it did not for the others. The model's time never falls as a dimension grows
// (TimeNeverFallsAsAnyDimensionGrows), so it is left out of the fit and of the counts below, and
// checked on its own (NamedExceptionIsNonMonotonicInThePublishedData).
bool is_named_exception(const PublishedRow& row) {
  return row.gpu == "H100-SXM-80GB" && row.shape.m == 256 && row.shape.n == 256 && row.shape.k == 4096;
}

// min_seconds: only rows whose measured time is at least this long.
SweepFit compare(const std::vector<PublishedRow>& rows, const GemmDevice& device, const std::string& gpu,
                 const std::string& role, double min_seconds = 0) {
  std::vector<double> errors;
  for (const PublishedRow& row : rows) {
    if (row.gpu != gpu || (!role.empty() && row.role != role) || is_named_exception(row)) continue;
    if (row.shape.flops() / row.flops_per_second < min_seconds) continue;
    const double predicted = row.shape.flops() / estimate_gemm(row.shape, device).seconds;
    errors.push_back(std::abs(predicted / row.flops_per_second - 1));
  }
  SweepFit fit;
  fit.rows = int(errors.size());
  if (errors.empty()) return fit;
  std::sort(errors.begin(), errors.end());
  fit.median_error = errors[errors.size() / 2];
  fit.max_error = errors.back();
  fit.within_10_percent = int(std::count_if(errors.begin(), errors.end(), [](double e) { return e <= 0.10; }));
  return fit;
}

SweepFit compare(const std::vector<PublishedRow>& rows, const std::string& gpu, const std::string& role,
                 double min_seconds = 0) {
  return compare(rows, catalog_device(gpu), gpu, role, min_seconds);
}

// Least squares on log throughput: the objective the fitted constants minimise.
double log_squared_error(const std::vector<PublishedRow>& rows, const GemmDevice& device, const std::string& gpu,
                         const std::string& role) {
  double sum = 0;
  for (const PublishedRow& row : rows) {
    if (row.gpu != gpu || row.role != role || is_named_exception(row)) continue;
    const double predicted = row.shape.flops() / estimate_gemm(row.shape, device).seconds;
    sum += std::pow(std::log(predicted / row.flops_per_second), 2);
  }
  return sum;
}

std::ostream& operator<<(std::ostream& out, const SweepFit& fit) {
  return out << fit.rows << " rows, " << fit.within_10_percent << " within 10%, median error " << fit.median_error
             << ", max " << fit.max_error;
}

TEST(GemmModelPublished, TableHasBothGpusWithLocators) {
  const std::vector<PublishedRow> rows = published_rows();
  int h100 = 0, b200 = 0, fit = 0;
  for (const PublishedRow& row : rows) {
    h100 += row.gpu == "H100-SXM-80GB";
    b200 += row.gpu == "B200-SXM-180GB";
    fit += row.role == "fit";
    EXPECT_TRUE(row.role == "fit" || row.role == "held_out") << row.locator;
    EXPECT_NE(row.locator.find("default_matmul_perf_table.txtpb@ad6eaee1"), std::string::npos) << row.locator;
    EXPECT_GT(row.flops_per_second, 0);
  }
  EXPECT_EQ(h100, 125);  // b = 1, m, n, k in {256, 512, 1024, 2048, 4096}
  EXPECT_EQ(b200, 125);
  EXPECT_EQ(fit, 75);    // H100 with k in {256, 1024, 4096}
}

// The shipped constants are what the fit gives on the 'fit' rows (and on nothing else): a grid
// around them, least squares on log throughput over the H100 rows with k in {256, 1024, 4096}
// but the named exception. Whoever changes the data or the model refits here. (The tile reuse at
// full rate, kFullReuseTileIntensity, is not varied here: on a 48-72 grid with these, 56 was
// marginally better, 0.3% less error, and 64 was kept.)
TEST(GemmModelPublished, ShippedConstantsAreTheFit) {
  const std::vector<PublishedRow> rows = published_rows();
  const GemmDevice shipped = catalog_device("H100-SXM-80GB");
  EXPECT_EQ(shipped.kernel_floor_seconds, kGemmKernelFloorSeconds);
  EXPECT_EQ(shipped.tile_ramp_seconds_per_output_element, kGemmTileRampSecondsPerOutputElement);
  EXPECT_EQ(shipped.split_k_step_seconds, kGemmSplitKStepSeconds);
  double best = std::numeric_limits<double>::infinity();
  GemmDevice best_device = shipped;
  for (double floor_us : {4.4, 4.6, 4.8, 5.0, 5.2})
    for (double ramp_us : {0.8, 0.9, 1.0, 1.1, 1.2})
      for (double step_us : {0.6, 0.8, 1.0, 1.2, 1.4}) {
        GemmDevice device = shipped;
        device.kernel_floor_seconds = floor_us * 1e-6;
        device.tile_ramp_seconds_per_output_element = ramp_us * 1e-6 / (128 * 128);
        device.split_k_step_seconds = step_us * 1e-6;
        const double error = log_squared_error(rows, device, "H100-SXM-80GB", "fit");
        if (error < best) best = error, best_device = device;
      }
  std::printf("GEMM fit: floor %.2f us, ramp %.2f us per 128x128 tile, split-K step %.2f us\n",
              best_device.kernel_floor_seconds * 1e6,
              best_device.tile_ramp_seconds_per_output_element * 128 * 128 * 1e6,
              best_device.split_k_step_seconds * 1e6);
  EXPECT_NEAR(best_device.kernel_floor_seconds, kGemmKernelFloorSeconds, 1e-12);
  EXPECT_NEAR(best_device.tile_ramp_seconds_per_output_element, kGemmTileRampSecondsPerOutputElement, 1e-16);
  EXPECT_NEAR(best_device.split_k_step_seconds, kGemmSplitKStepSeconds, 1e-12);
}

TEST(GemmModelPublished, NamedExceptionIsNonMonotonicInThePublishedData) {
  // The reason it is excluded holds in the data: with more work it took less time.
  const std::vector<PublishedRow> rows = published_rows();
  auto measured_seconds = [&](double m, double n, double k) {
    for (const PublishedRow& row : rows)
      if (row.gpu == "H100-SXM-80GB" && row.shape.m == m && row.shape.n == n && row.shape.k == k)
        return row.shape.flops() / row.flops_per_second;
    ADD_FAILURE() << m << "x" << n << "x" << k;
    return 0.0;
  };
  int excluded = 0;
  for (const PublishedRow& row : rows) excluded += is_named_exception(row);
  EXPECT_EQ(excluded, 1);
  const double exception = measured_seconds(256, 256, 4096);
  EXPECT_LT(exception, measured_seconds(256, 256, 2048) / 1.3);
  EXPECT_LT(exception, measured_seconds(256, 512, 4096) / 1.3);
  EXPECT_LT(exception, measured_seconds(512, 256, 4096) / 1.3);
  // The model stays monotone there, and prices it like its neighbours in k.
  const GemmDevice device = catalog_device("H100-SXM-80GB");
  const double predicted = estimate_gemm({256, 256, 4096}, device).seconds;
  EXPECT_GE(predicted, estimate_gemm({256, 256, 2048}, device).seconds);
  EXPECT_GT(predicted, 1.3 * exception);
}

// Every H100 row but the named exception, by role. Before the split-K serial step and the
// ramp as a time (the 2026-11 model): fit 66 of 75 within 10%, held out 41 of 50, max 35%.
TEST(GemmModelPublished, H100RowsTheConstantsWereFittedOn) {
  const SweepFit fit = compare(published_rows(), "H100-SXM-80GB", "fit");
  std::cout << "H100 fit rows: " << fit << "\n";
  EXPECT_EQ(fit.rows, 74);
  EXPECT_LE(fit.median_error, 0.035);
  EXPECT_GE(fit.within_10_percent, 70);
  // The four misses are 11-16%, all model-slower (256^3, 256x512x1024, 512x256x1024, 2048x256x4096).
  EXPECT_LE(fit.max_error, 0.16);
}

TEST(GemmModelPublished, H100HeldOutRows) {
  // k in {512, 2048}: shapes the fit never saw.
  const SweepFit fit = compare(published_rows(), "H100-SXM-80GB", "held_out");
  std::cout << "H100 held-out rows: " << fit << "\n";
  EXPECT_EQ(fit.rows, 50);
  EXPECT_LE(fit.median_error, 0.035);
  EXPECT_GE(fit.within_10_percent, 49);
  EXPECT_LE(fit.max_error, 0.12);  // 1024x512x2048: 9.1 us measured, 10.3 predicted
}

TEST(GemmModelPublished, H100GemmsOfTwentyMicrosecondsOrMoreAllWithinTenPercent) {
  const SweepFit fit = compare(published_rows(), "H100-SXM-80GB", "", 20e-6);
  std::cout << "H100 rows >= 20 us: " << fit << "\n";
  EXPECT_GE(fit.rows, 20);
  EXPECT_EQ(fit.within_10_percent, fit.rows);
}

TEST(GemmModelPublished, B200HeldOutEntirely) {
  // Nothing was fitted on B200: only its catalog figures and the shipped 8192^3 ceiling. Before
  // (the 2026-11 model): 92 of 125 within 10%, max 64%.
  const std::vector<PublishedRow> rows = published_rows();
  const SweepFit all = compare(rows, "B200-SXM-180GB", "held_out");
  std::cout << "B200 rows: " << all << "\n";
  EXPECT_EQ(all.rows, 125);
  EXPECT_LE(all.median_error, 0.05);
  EXPECT_GE(all.within_10_percent, 110);
  EXPECT_LE(all.max_error, 0.35);  // 256x1024x256: 7.2 us measured, slower than 256x2048x256 (5.8)
  const SweepFit long_running = compare(rows, "B200-SXM-180GB", "held_out", 20e-6);
  std::cout << "B200 rows >= 20 us: " << long_running << "\n";
  EXPECT_LE(long_running.median_error, 0.10);
  EXPECT_LE(long_running.max_error, 0.15);
}

TEST(GemmModelPublished, BeatsOneEfficiencyForEveryShape) {
  // Today's cost model: every GEMM at matmul_efficiency (0.807 on H100). On the held-out rows
  // that is off by a factor of several for small shapes; the shape model must do far better.
  const std::vector<PublishedRow> rows = published_rows();
  const GemmDevice device = catalog_device("H100-SXM-80GB");
  std::vector<double> flat_errors;
  for (const PublishedRow& row : rows) {
    if (row.gpu != "H100-SXM-80GB" || row.role != "held_out") continue;
    flat_errors.push_back(std::abs(device.large_gemm_efficiency * device.peak_flops / row.flops_per_second - 1));
  }
  std::sort(flat_errors.begin(), flat_errors.end());
  const double flat_median = flat_errors[flat_errors.size() / 2];
  std::cout << "H100 held-out rows, one efficiency: median error " << flat_median << "\n";
  EXPECT_GT(flat_median, 5 * compare(rows, "H100-SXM-80GB", "held_out").median_error);
}

// ---- (c) measured tables ----

TEST(GemmTableLookup, ExactHitReturnsTheMeasuredTime) {
  GemmTable table;
  table.rows = {{{1024, 1024, 1024}, 250e12}, {{2048, 1024, 1024}, 400e12}};
  const auto seconds = measured_gemm_seconds(table, {1024, 1024, 1024});
  ASSERT_TRUE(seconds);
  EXPECT_NEAR(*seconds, 2.0 * 1024 * 1024 * 1024 / 250e12, 1e-18);
}

TEST(GemmTableLookup, InterpolatesThroughputInLogSpace) {
  // m = 2048 sits one doubling from each row: equal weights, so the geometric mean of the
  // two throughputs, sqrt(300e12 * 600e12) = 424.26e12.
  GemmTable table;
  table.rows = {{{1024, 2048, 2048}, 300e12}, {{4096, 2048, 2048}, 600e12}};
  const auto seconds = measured_gemm_seconds(table, {2048, 2048, 2048});
  ASSERT_TRUE(seconds);
  EXPECT_NEAR(*seconds, 2.0 * 2048 * 2048 * 2048 / std::sqrt(300e12 * 600e12), 1e-15);
  // A doubling grid (2048, 4096): 3584 is 0.81 doublings above one row and 0.19 below the
  // other, weights 1/0.81^2 and 1/0.19^2, so a throughput between them, nearer 600e12.
  table.rows = {{{2048, 2048, 2048}, 300e12}, {{4096, 2048, 2048}, 600e12}};
  const auto nearer = measured_gemm_seconds(table, {3584, 2048, 2048});
  ASSERT_TRUE(nearer);
  const double throughput = 2.0 * 3584 * 2048 * 2048 / *nearer;
  const double up = std::log2(3584.0 / 2048), down = std::log2(4096.0 / 3584);
  const double w_low = 1 / (up * up), w_high = 1 / (down * down);
  EXPECT_NEAR(throughput, std::exp((w_low * std::log(300e12) + w_high * std::log(600e12)) / (w_low + w_high)), 1e3);
  EXPECT_GT(throughput, std::sqrt(300e12 * 600e12));
  EXPECT_LT(throughput, 600e12);
}

TEST(GemmTableLookup, NothingNearbyIsNullopt) {
  GemmTable table;
  table.rows = {{{1024, 2048, 2048}, 300e12}, {{4096, 2048, 2048}, 600e12}};
  EXPECT_FALSE(measured_gemm_seconds(table, {16384, 2048, 2048}));  // 4x past the nearest m
  EXPECT_FALSE(measured_gemm_seconds(table, {2048, 2048, 256}));    // 8x below every k
  EXPECT_FALSE(measured_gemm_seconds(GemmTable{}, {2048, 2048, 2048}));
  EXPECT_TRUE(measured_gemm_seconds(table, {16384, 2048, 2048}, 4.0));  // a wider window reaches it
}

}  // namespace
}  // namespace fsdpsim::planner
