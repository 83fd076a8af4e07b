// The time of one GEMM (C[m,n] = A[m,k] * B[k,n], as cuBLAS runs it) from its shape.
//
// A large square GEMM runs near the GPU's measured matmul ceiling (MAMF); a skinny or small
// one does not: its output tiles leave SMs idle or spill into a last, mostly empty wave
// (wave quantization), its short k loop is dominated by each tile's prologue and epilogue,
// it may be bound by HBM rather than tensor cores, and below a few microseconds of work it
// costs what a kernel costs. estimate_gemm models those four effects and is normalised so
// that an 8192^3 GEMM lands exactly on the device's measured large-GEMM efficiency.
// docs/cost-model.md ("GEMMs by shape") gives the equations, the constants and the data
// (tests/data/kernels/gemm_published.csv) they were fitted to and tested on.
//
// A measured table (what `fsdpsim calibrate` or a user measured on their own GPU) beats the
// model where it has a nearby shape: measured_gemm_seconds interpolates it.
#pragma once

#include <optional>
#include <vector>

#include "planner/kernel_shapes.h"

namespace fsdpsim::planner {

// The per-kernel floor: the shortest time one GEMM kernel takes, whatever its shape (the
// launch-to-completion latency of a kernel of one tiny CTA wave: grid launch, the first loads'
// latency, the last stores' drain). Fitted with the constants below, least squares on log
// throughput, to the H100 rows of tests/data/kernels/gemm_published.csv with k in {256, 1024,
// 4096} (role 'fit') except 256x256x4096 (measured faster than 256x256x2048: a named exception,
// gemm_model_test.cpp); XLA's smallest kernels are 4.99 us (H100 256^3) and 4.96 us (B200, held out).
inline constexpr double kGemmKernelFloorSeconds = 4.8e-6;
// A CTA's prologue (filling its k-loop pipeline) and epilogue (converting and storing its tile of C),
// per wave, as a time per element of its output tile: 1 us for a 128x128 tile. A time, not k-loop
// work: the pipeline fills with the same bytes and the epilogue stores the same tile whatever the
// dtype and however fast the tensor cores are (B200's 2x faster SMs pay it in full: the held-out
// B200 rows bottom out near H100's times). Fitted with the floor, same rows.
inline constexpr double kGemmTileRampSecondsPerOutputElement = 1e-6 / (128.0 * 128.0);
// Split-K's serial reduction, per split beyond the first: the splits of one output tile add their
// fp32 partial sums into C one after another (CUTLASS's serial split-K: a semaphore per tile; each
// split waits for the previous one's partial to land in global memory, reads it, adds, stores), so
// each extra split costs a global-memory round trip in series. This is what stops a library from
// splitting a small output's long k loop over every idle SM (H100 256x512x4096: 11.5 us measured,
// where an ideal split would take ~8.6). Fitted with the floor, same rows.
inline constexpr double kGemmSplitKStepSeconds = 1e-6;
// The GEMM the model is normalised on: an 8192^3 GEMM takes exactly its FLOPs over
// large_gemm_efficiency x peak (the MAMF-style measurement that figure stands for).
inline constexpr double kGemmNormalisingSide = 8192;

struct GemmDevice {            // what the model needs to know of a GPU, for one dtype
  int sm_count = 0;            // GpuSpec::sm_count (scenarios/hardware/gpus.json)
  double peak_flops = 0;       // dense peak of the dtype
  double hbm_bytes_per_second = 0;
  double hbm_efficiency = 0.9; // fraction of HBM bandwidth a streaming kernel reaches
  double large_gemm_efficiency = 0; // measured ceiling: a large square GEMM's achieved/peak (MAMF)
  int dtype_bytes = 2;           // operand element size: 2 bf16/fp16, 1 fp8, 4 fp32 (tf32)
  int output_bytes = 0;          // C's element size; 0: dtype_bytes (fp8 GEMMs write bf16: 2)
  double kernel_floor_seconds = kGemmKernelFloorSeconds;
  // The fitted per-CTA and per-split times above, here so a fit can vary them (gemm_model_test).
  double tile_ramp_seconds_per_output_element = kGemmTileRampSecondsPerOutputElement;
  double split_k_step_seconds = kGemmSplitKStepSeconds;
};

struct GemmEstimate {
  double seconds = 0;
  double efficiency = 0;  // achieved FLOP/s / peak
  const char* bound = "";  // "compute", "memory", "launch" (the kernel floor exceeds both)
};

// The output tile one CTA computes (a threadblock tile of a CUTLASS/cuBLAS kernel).
struct GemmTile {
  int m = 0, n = 0;
};

// The tile shapes the model lets the library choose from: the CTA tiles of CUTLASS's
// Ampere/Hopper bf16 GEMM kernels (256x128 down to 64x64). Smaller tiles cover skinny
// outputs with more CTAs but reuse each loaded element less.
const std::vector<GemmTile>& gemm_tiles();

// One way to run the GEMM: a tile shape, a split-K factor, and what that costs.
struct GemmPlan {
  GemmTile tile;
  int split_k = 1;
  double ctas = 0;             // output tiles x split_k
  double waves = 0;            // ceil(ctas / sm_count)
  double compute_seconds = 0;  // waves x one CTA's time (its k loop, prologue and epilogue)
  double ramp_seconds = 0;     // the prologues and epilogues in compute_seconds: waves x one tile's ramp
  double memory_seconds = 0;   // operands, output and split-K partials through HBM
  double reduction_seconds = 0;  // split-K's serial reduction: (split_k - 1) x split_k_step_seconds
  double seconds() const;        // max(compute, memory) + reduction
};

// The time of one plan, without the kernel floor. `sm_efficiency` is the fraction of an
// SM's share of peak a full-reuse tile sustains in its k loop (estimate_gemm derives it
// from large_gemm_efficiency). Exposed so tests can check the mechanisms one at a time.
GemmPlan gemm_plan(const GemmShape& shape, const GemmDevice& device, GemmTile tile, int split_k,
                   double sm_efficiency);
// The fraction of an SM's peak that makes an 8192^3 GEMM take exactly its measured time.
double gemm_sm_efficiency(const GemmDevice& device);
// The fastest plan over gemm_tiles() and the split-K factors that keep every CTA on its
// own SM, as a library's heuristic would pick it.
GemmPlan best_gemm_plan(const GemmShape& shape, const GemmDevice& device, double sm_efficiency);

// Throws std::invalid_argument on a device without SMs, peak or bandwidth, or a
// large_gemm_efficiency outside (0, 1]; a shape with a zero dimension costs nothing.
GemmEstimate estimate_gemm(const GemmShape& shape, const GemmDevice& device);

// A grouped GEMM (GroupedGemmShape) as one kernel: the output tiles of every group share the
// SMs, so the wave count is that of all their CTAs together; each CTA costs what it costs in
// estimate_gemm's model (its tile, its group's k); the operands of every group go through HBM;
// one kernel floor. No split-K (one CTA per output tile). With one group of one GEMM it is
// estimate_gemm restricted to split_k = 1. No new constant: the tiles, the ramp, the reuse
// factor and the floor are estimate_gemm's. docs/cost-model.md ("Grouped GEMMs").
GemmEstimate estimate_grouped_gemm(const GroupedGemmShape& grouped, const GemmDevice& device);

// A measured table (fsdpsim calibrate or a user's): shapes with achieved FLOP/s.
struct GemmTable {
  struct Row {
    GemmShape shape;
    double flops_per_second;
  };
  std::vector<Row> rows;
};

// The measured time of `shape`: the exact row if there is one, else achieved FLOP/s
// interpolated in log space (inverse-distance weights over log2 m, log2 n, log2 k) between
// the rows within a factor `max_ratio` of the shape in every dimension; nullopt when no row
// is that close (a GEMM's throughput changes too much over a wider range to trust).
std::optional<double> measured_gemm_seconds(const GemmTable& table, const GemmShape& shape,
                                            double max_ratio = 2.0);

}  // namespace fsdpsim::planner
