#include "planner/gemm_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

namespace fsdpsim::planner {
namespace {

// The k extent of one mainloop stage: 128 bytes of each operand row (the swizzle width of a
// CUTLASS sm80/sm90 mainloop stage): 64 bf16 elements, 128 fp8 (CUTLASS's sm90 fp8 kernels
// take K tiles of 128), 32 tf32. A k loop runs in whole stages, and split-K never hands a CTA
// less than one.
constexpr double kKBlockBytes = 128;

double k_block_elements(const GemmDevice& device) { return kKBlockBytes / device.dtype_bytes; }

// A tile's reuse, tm*tn/(tm+tn) (FLOPs per operand element it loads, over 2), at which
// the SM's tensor cores, not the operand feed, set its pace: a 128x128 tile (64) runs at
// full rate, a 64x64 tile (32) at half. Fitted on the same rows as kGemmKernelFloorSeconds; refit
// with the ramp and split-K times (gemm_model.h) on a 48-72 grid, 56 came out marginally better
// (log-squared error 0.2014 against 0.2021, with a 0.9 us ramp and a 5.0 us floor): kept at 64.
constexpr double kFullReuseTileIntensity = 64;

// Split-K partial sums are fp32, written by every split and read back by the reduction.
constexpr double kPartialSumBytes = 4;

double tile_rate_factor(GemmTile tile) {
  const double reuse = double(tile.m) * tile.n / (tile.m + tile.n);
  return std::min(1.0, reuse / kFullReuseTileIntensity);
}

void check_device(const GemmDevice& device) {
  auto fail = [](const std::string& what) { throw std::invalid_argument("GemmDevice: " + what); };
  if (device.sm_count <= 0) fail("sm_count must be positive");
  if (!(device.peak_flops > 0)) fail("peak_flops must be positive");
  if (!(device.hbm_bytes_per_second > 0)) fail("hbm_bytes_per_second must be positive");
  if (!(device.hbm_efficiency > 0 && device.hbm_efficiency <= 1)) fail("hbm_efficiency must be in (0, 1]");
  if (!(device.large_gemm_efficiency > 0 && device.large_gemm_efficiency <= 1))
    fail("large_gemm_efficiency must be in (0, 1]");
  if (device.dtype_bytes <= 0) fail("dtype_bytes must be positive");
  if (device.output_bytes < 0) fail("output_bytes must not be negative");
  if (!(device.kernel_floor_seconds >= 0)) fail("kernel_floor_seconds must not be negative");
  if (!(device.tile_ramp_seconds_per_output_element >= 0))
    fail("tile_ramp_seconds_per_output_element must not be negative");
  if (!(device.split_k_step_seconds >= 0)) fail("split_k_step_seconds must not be negative");
}

void check_shape(const GemmShape& shape) {
  if (!(shape.m >= 0 && shape.n >= 0 && shape.k >= 0))
    throw std::invalid_argument("GemmShape: m, n and k must not be negative");
}

bool is_empty(const GemmShape& shape) { return shape.m == 0 || shape.n == 0 || shape.k == 0; }

}  // namespace

const std::vector<GemmTile>& gemm_tiles() {
  static const std::vector<GemmTile> tiles = {{256, 128}, {128, 256}, {128, 128},
                                              {128, 64},  {64, 128},  {64, 64}};
  return tiles;
}

double GemmPlan::seconds() const {
  // The reduction follows the splits' k loops: it adds to whichever of compute and memory binds.
  return std::max(compute_seconds, memory_seconds) + reduction_seconds;
}

GemmPlan gemm_plan(const GemmShape& shape, const GemmDevice& device, GemmTile tile, int split_k,
                   double sm_efficiency) {
  GemmPlan plan;
  plan.tile = tile;
  plan.split_k = split_k;
  const double output_tiles = std::ceil(shape.m / tile.m) * std::ceil(shape.n / tile.n);
  plan.ctas = output_tiles * split_k;
  plan.waves = std::ceil(plan.ctas / device.sm_count);
  // Every CTA of a wave runs at once on its own SM; a wave takes as long as one CTA: its k loop
  // (whole k-blocks) at the tile's rate, then its prologue and epilogue.
  const double k_block = k_block_elements(device);
  const double k_blocks_per_cta = std::ceil(std::ceil(shape.k / k_block) / split_k);
  const double loop_flops = 2.0 * tile.m * tile.n * k_blocks_per_cta * k_block;
  const double sm_flops_per_second =
      device.peak_flops / device.sm_count * sm_efficiency * tile_rate_factor(tile);
  plan.ramp_seconds = plan.waves * double(tile.m) * tile.n * device.tile_ramp_seconds_per_output_element;
  plan.compute_seconds = plan.waves * loop_flops / sm_flops_per_second + plan.ramp_seconds;
  plan.reduction_seconds = (split_k - 1) * device.split_k_step_seconds;
  const double output_bytes = device.output_bytes > 0 ? device.output_bytes : device.dtype_bytes;
  const double operand_bytes = (shape.m * shape.k + shape.k * shape.n) * device.dtype_bytes + shape.m * shape.n * output_bytes;
  const double partial_bytes = split_k > 1 ? 2.0 * split_k * shape.m * shape.n * kPartialSumBytes : 0.0;
  plan.memory_seconds = (operand_bytes + partial_bytes) / (device.hbm_bytes_per_second * device.hbm_efficiency);
  return plan;
}

GemmPlan best_gemm_plan(const GemmShape& shape, const GemmDevice& device, double sm_efficiency) {
  GemmPlan best;
  double best_seconds = std::numeric_limits<double>::infinity();
  const double k_blocks = std::ceil(shape.k / k_block_elements(device));
  for (const GemmTile& tile : gemm_tiles()) {
    const double output_tiles = std::ceil(shape.m / tile.m) * std::ceil(shape.n / tile.n);
    // Split-K only fills SMs the output tiles leave idle, and never below one k-block.
    const double max_split = std::max(1.0, std::min(k_blocks, std::floor(device.sm_count / output_tiles)));
    for (int split = 1; split <= int(max_split); ++split) {
      const GemmPlan plan = gemm_plan(shape, device, tile, split, sm_efficiency);
      if (plan.seconds() < best_seconds) {
        best_seconds = plan.seconds();
        best = plan;
      }
    }
  }
  return best;
}

double gemm_sm_efficiency(const GemmDevice& device) {
  check_device(device);
  const GemmShape square{kGemmNormalisingSide, kGemmNormalisingSide, kGemmNormalisingSide};
  const double measured_seconds = square.flops() / (device.peak_flops * device.large_gemm_efficiency);
  // An 8192^3 GEMM is compute bound by two orders of magnitude and fills the SMs without
  // split-K, so its time is waves x (k loop / e_sm + ramp): solve that for e_sm, with the plan the
  // library picks at full efficiency (every full-reuse tile gives the same k-loop time per FLOP,
  // and the ramp is a small part of it).
  const GemmPlan plan = best_gemm_plan(square, device, 1.0);
  const double loop_seconds_at_peak = plan.compute_seconds - plan.ramp_seconds;
  const double loop_seconds = measured_seconds - device.kernel_floor_seconds - plan.ramp_seconds - plan.reduction_seconds;
  if (!(loop_seconds > 0))
    throw std::invalid_argument("GemmDevice: kernel floor and tile ramps exceed an 8192^3 GEMM's time");
  return loop_seconds_at_peak / loop_seconds;
}

GemmEstimate estimate_gemm(const GemmShape& shape, const GemmDevice& device) {
  check_shape(shape);
  const double sm_efficiency = gemm_sm_efficiency(device);
  if (is_empty(shape)) return {};
  const GemmPlan plan = best_gemm_plan(shape, device, sm_efficiency);
  const double body_seconds = plan.seconds();
  GemmEstimate estimate;
  // The floor adds to the body: the rows show small GEMMs taking ~5 us plus their work
  // (H100 256x4096x256: 6.5 us for 0.7 us of k-loop work at full rate).
  estimate.seconds = device.kernel_floor_seconds + body_seconds;
  estimate.efficiency = shape.flops() / estimate.seconds / device.peak_flops;
  if (device.kernel_floor_seconds > body_seconds)
    estimate.bound = "launch";
  else
    estimate.bound = plan.compute_seconds >= plan.memory_seconds ? "compute" : "memory";
  return estimate;
}

GemmEstimate estimate_grouped_gemm(const GroupedGemmShape& grouped, const GemmDevice& device) {
  if (grouped.shapes.size() != grouped.counts.size())
    throw std::invalid_argument("GroupedGemmShape: one count per shape");
  for (std::size_t i = 0; i < grouped.shapes.size(); ++i) {
    check_shape(grouped.shapes[i]);
    if (!(grouped.counts[i] >= 0)) throw std::invalid_argument("GroupedGemmShape: counts must not be negative");
  }
  const double sm_efficiency = gemm_sm_efficiency(device);
  const double flops = grouped.flops();
  if (!(flops > 0)) return {};
  GemmPlan best;
  double best_seconds = std::numeric_limits<double>::infinity();
  for (const GemmTile& tile : gemm_tiles()) {
    // Every group's CTAs over the SMs together; a wave lasts as long as its CTAs (the mean
    // CTA time when groups differ in k: the busiest expert's weight gradient).
    double ctas = 0, cta_seconds_sum = 0, memory_seconds = 0;
    for (std::size_t i = 0; i < grouped.shapes.size(); ++i) {
      const GemmShape& g = grouped.shapes[i];
      if (is_empty(g) || grouped.counts[i] == 0) continue;
      const GemmPlan one = gemm_plan(g, device, tile, 1, sm_efficiency);
      ctas += grouped.counts[i] * one.ctas;
      cta_seconds_sum += grouped.counts[i] * one.ctas * (one.compute_seconds / one.waves);
      memory_seconds += grouped.counts[i] * one.memory_seconds;
    }
    GemmPlan plan;
    plan.tile = tile;
    plan.ctas = ctas;
    plan.waves = std::ceil(ctas / device.sm_count);
    plan.compute_seconds = plan.waves * cta_seconds_sum / ctas;
    plan.memory_seconds = memory_seconds;
    if (plan.seconds() < best_seconds) {
      best_seconds = plan.seconds();
      best = plan;
    }
  }
  GemmEstimate estimate;
  estimate.seconds = device.kernel_floor_seconds + best.seconds();
  estimate.efficiency = flops / estimate.seconds / device.peak_flops;
  if (device.kernel_floor_seconds > best.seconds())
    estimate.bound = "launch";
  else
    estimate.bound = best.compute_seconds >= best.memory_seconds ? "compute" : "memory";
  return estimate;
}

std::optional<double> measured_gemm_seconds(const GemmTable& table, const GemmShape& shape, double max_ratio) {
  check_shape(shape);
  if (!(max_ratio >= 1)) throw std::invalid_argument("measured_gemm_seconds: max_ratio must be at least 1");
  if (is_empty(shape)) return 0.0;
  const double max_log2_distance = std::log2(max_ratio);
  double weight_sum = 0, weighted_log_throughput = 0;
  for (const GemmTable::Row& row : table.rows) {
    if (!(row.shape.m > 0 && row.shape.n > 0 && row.shape.k > 0 && row.flops_per_second > 0))
      throw std::invalid_argument("GemmTable: a row needs positive m, n, k and flops_per_second");
    const double dm = std::log2(shape.m / row.shape.m);
    const double dn = std::log2(shape.n / row.shape.n);
    const double dk = std::log2(shape.k / row.shape.k);
    const double distance_squared = dm * dm + dn * dn + dk * dk;
    if (distance_squared < 1e-18) return shape.flops() / row.flops_per_second;  // exact hit
    if (std::max({std::abs(dm), std::abs(dn), std::abs(dk)}) > max_log2_distance) continue;
    // Throughput, not time, is what varies smoothly with shape: interpolate its log.
    const double weight = 1 / distance_squared;
    weight_sum += weight;
    weighted_log_throughput += weight * std::log(row.flops_per_second);
  }
  if (weight_sum == 0) return std::nullopt;
  return shape.flops() / std::exp(weighted_log_throughput / weight_sum);
}

}  // namespace fsdpsim::planner
