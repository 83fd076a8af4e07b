// The attention kernel model against published kernel benchmarks and hand-worked mechanisms.
//
// Data: tests/data/kernels/attention_published.csv, every row with its source and locator:
//  - FlashAttention-2 on A100 (fwd+bwd), Dao-AILab/flash-attention assets/flash2_a100_fwd_bwd_benchmark.png
//    (the FA2 paper's A100 benchmark, arXiv:2307.08691), also xformers (= PyTorch's mem-efficient
//    kernel) and PyTorch eager bars; FlashAttention-2 on H100 (fwd+bwd), assets/flash2_h100_fwd_bwd_benchmark.png;
//  - FlashAttention-3 paper (Shah et al. 2024, arXiv:2407.08608) Fig. 5, forward on H100 SXM5 for
//    FA2, FA3, cuDNN, Triton, eager (assets/flash3_fp16_fwd.png), and its backward figure
//    (bar labels transcribed as text, see the CSV locators);
//  - pytorch/benchmark PR #2391 (commit ff65cb67): FA3 forward on H100, an independent run.
// All benchmarks use batch * seq = 16k tokens and heads * head_dim = 2048, and count TFLOP/s
// as FlashAttention's benchmark does: 4 * batch * seq^2 * heads * head_dim, halved when causal,
// x2.5 for backward, x3.5 for fwd+bwd.
//
// Fit: each (kernel, GPU, pass) has two constants fitted to its non-causal head-dim-128 rows
// (seq 512..16k) only; causal rows, head dims 64 and 256, the fwd+bwd chart on H100 and the
// pytorch/benchmark rows are held out.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "planner/attention_model.h"
#include "planner/hardware.h"
#include "planner/scenario.h"

namespace fsdpsim::planner {
namespace {

struct PublishedRow {
  std::string source, locator, gpu, kernel, pass;
  bool causal = false;
  int head_dim = 0;
  double seq = 0, batch = 0;
  int heads = 0;
  double tflops = 0;
};

std::vector<PublishedRow> load_published() {
  std::ifstream in(std::string(FSDPSIM_SOURCE_ROOT) + "/tests/data/kernels/attention_published.csv");
  EXPECT_TRUE(in.good());
  std::vector<PublishedRow> rows;
  std::string line;
  std::getline(in, line);  // header
  while (std::getline(in, line)) {
    std::vector<std::string> f;
    std::stringstream ss(line);
    std::string cell;
    while (std::getline(ss, cell, ',')) f.push_back(cell);
    EXPECT_EQ(f.size(), 11u) << line;
    if (f.size() != 11) continue;
    rows.push_back({f[0], f[1], f[2], f[3], f[4], f[5] == "1", std::stoi(f[6]), std::stod(f[7]), std::stod(f[8]),
                    std::stoi(f[9]), std::stod(f[10])});
  }
  return rows;
}

// The GPU catalog's figures (scenarios/hardware/gpus.json, each with its source there).
AttentionDevice device_for(const std::string& gpu) {
  const GpuSpec spec = find_gpu(gpu);
  AttentionDevice d;
  d.arch = spec.arch;  // "ampere", "hopper", "blackwell", "cdna3"
  d.sm_count = spec.sm_count;
  d.peak_flops = spec.peak_flops.at("bf16");
  d.hbm_bytes_per_second = spec.hbm_bandwidth_bytes_per_second;
  return d;
}

AttentionShape shape_of(const PublishedRow& r) {
  AttentionShape s;
  s.batch = r.batch;
  s.seq_q = s.seq_kv = r.seq;
  s.heads = s.kv_heads = r.heads;
  s.head_dim = r.head_dim;
  s.causal = r.causal;
  return s;
}

// FlashAttention's benchmark FLOP count (benchmarks/benchmark_flash_attention.py, flops()).
double benchmark_flops(const PublishedRow& r) {
  const double f = 4 * r.batch * r.seq * r.seq * r.heads * r.head_dim / (r.causal ? 2 : 1);
  return r.pass == "fwd" ? f : r.pass == "bwd" ? 2.5 * f : 3.5 * f;
}

using Seconds = std::function<double(const AttentionShape&, AttentionPass)>;

double predicted_tflops(const PublishedRow& r, const Seconds& seconds) {
  const AttentionShape s = shape_of(r);
  double t = 0;
  if (r.pass != "bwd") t += seconds(s, AttentionPass::forward);
  if (r.pass != "fwd") t += seconds(s, AttentionPass::backward);
  return benchmark_flops(r) / t / 1e12;
}

double shipped_tflops(const PublishedRow& r) {
  const AttentionDevice d = device_for(r.gpu);
  const AttentionKernel k = *parse_attention_kernel(r.kernel);
  return predicted_tflops(r, [&](const AttentionShape& s, AttentionPass p) {
    return estimate_attention(s, p, k, d).seconds;
  });
}

// The training rows of a (kernel, GPU, pass): non-causal, head dim 128.
bool is_training_row(const PublishedRow& r) { return !r.causal && r.head_dim == 128; }

AttentionKernelConstants with_tile(AttentionKernelConstants c, const PublishedRow& r, const AttentionDevice& d,
                                   AttentionPass pass) {
  const AttentionKernel k = *parse_attention_kernel(r.kernel);
  c.tile = attention_tile(k, d.arch, pass, r.head_dim, r.causal);
  c.first_block_masked = first_block_always_masked(k, d.arch, pass);
  return c;
}

double fit_error(const std::vector<PublishedRow>& rows, const AttentionDevice& d, double efficiency, double overhead) {
  AttentionKernelConstants c;
  c.loop_efficiency = efficiency;
  c.overhead_blocks = overhead;
  double err = 0;
  for (const auto& r : rows) {
    const double p = predicted_tflops(r, [&](const AttentionShape& s, AttentionPass pass) {
      return estimate_fused_attention(s, pass, d, with_tile(c, r, d, pass)).seconds;
    });
    err += std::pow(std::log(p / r.tflops), 2);
  }
  return err;
}

// Least squares on log(predicted / published): a coarse grid (efficiency 0.10..1.30 step 0.05,
// overhead 0..80 blocks step 1), then a fine one around its best (steps 0.005 and 0.25). The low
// end is FlashAttention-2's sm80 kernel on Blackwell: about 0.2 of the B200's tcgen05 peak.
// `overhead`: the fixed cost held at that value and only the efficiency fitted (rows of one length).
AttentionKernelConstants fit(const std::vector<PublishedRow>& rows, std::optional<double> overhead = std::nullopt) {
  const AttentionDevice d = device_for(rows.front().gpu);
  double best_e = 0, best_o = 0, best_err = 1e300;
  auto scan = [&](double e0, double e1, double de, double o0, double o1, double dob) {
    for (double e = e0; e <= e1 + 1e-9; e += de)
      for (double o = std::max(0.0, o0); o <= o1 + 1e-9; o += dob)
        if (double err = fit_error(rows, d, e, o); err < best_err) best_err = err, best_e = e, best_o = o;
  };
  const double o_low = overhead.value_or(0), o_high = overhead.value_or(80);
  scan(0.10, 1.30, 0.05, o_low, o_high, 1);
  scan(best_e - 0.05, best_e + 0.05, 0.005, overhead.value_or(best_o - 1), overhead.value_or(best_o + 1), 0.25);
  AttentionKernelConstants c;
  c.loop_efficiency = best_e;
  c.overhead_blocks = best_o;
  return c;
}

struct Group {
  std::string kernel, gpu, pass;
  int head_dim = 128;  // the training rows' head dim: 128 but where a GPU's pass is published at 64 only
  // Rows of one sequence length cannot tell the per-CTA fixed cost from the loop: it is held at
  // the nearest architecture's fitted value and only the loop efficiency is fitted.
  std::optional<double> overhead_blocks = std::nullopt;
};

std::vector<PublishedRow> training_rows(const std::vector<PublishedRow>& all, const Group& g) {
  std::vector<PublishedRow> out;
  for (const auto& r : all)
    if (r.kernel == g.kernel && r.gpu == g.gpu && r.pass == g.pass && !r.causal && r.head_dim == g.head_dim &&
        r.source.find("pytorch/benchmark") == std::string::npos)
      out.push_back(r);
  return out;
}

AttentionPass pass_of(const std::string& p) { return p == "bwd" ? AttentionPass::backward : AttentionPass::forward; }

// The shipped constants are what the fit gives on the training rows (and on nothing else):
// whoever changes the data or the model refits here and copies the printed pair. The rows each
// pair saw (non-causal, head dim 128, batch * seq = 16k, 16 heads):
//  - flash2 A100 fwd+bwd: FA repo flash2_a100_fwd_bwd_benchmark.png panel (b), seq 1024..16k
//    (5 rows: the CSV holds no seq-512 row for that bar); one pair for both passes;
//  - mem_efficient A100 fwd+bwd: the same panel's xformers bars, seq 512..16k (6 rows);
//  - flash1_triton A100 fwd+bwd: the same panel's FlashAttention Triton bars, seq 512..16k (6 rows);
//  - flash2, flash3, cudnn, triton H100 fwd: FA3 paper Fig. 5 (hd 128, no causal mask),
//    seq 512..16k (6 rows each);
//  - flash2, flash3, cudnn H100 bwd: the FA3 paper's backward figure (hd 128), seq 512..16k
//    (6 rows each);
//  - flash2 B200 fwd: meta-pytorch/tritonbench PR #171's flash_v2 at batch 8, 16 heads, hd 128,
//    seq 512..16k (6 rows); flash2 B200 bwd: Dao-AILab/flash-attention issue #1589's Flash2 bwd,
//    hd 64 (the only B200 backward published), seq 512..16k (6 rows); the hd-64 fwd and
//    fwd+bwd rows are held out;
//  - flash2 MI300X fwd and bwd: ROCm/flash-attention issue #142 (CK), hd 128, seq 16k at batch
//    1, 2, 4, 8 (4 rows each; nothing shorter is published on this part): the loop efficiency only,
//    the fixed cost held at FlashAttention-2's Hopper values (2.00 and 6.00 blocks).
// FlashAttention-2 on B200 runs its sm80 kernel (mma.sync, not Blackwell's tcgen05): 330-380
// TFLOP/s there, about its H100 rate, where Hopper's fraction of the B200's 2,250 TFLOP/s peak
// priced it at 830-860 until session 38 (the session-38 GPU audit).
// The mask's cost (kMaskOpsPerScore at alu_ops_per_tensor_flop) is a spec, not fitted; it enters
// these rows only through FlashAttention-3's forward, whose first block is always masked.
TEST(AttentionModel, ShippedConstantsAreTheFit) {
  const auto all = load_published();
  for (const Group& g : std::vector<Group>{{"flash2", "A100-SXM-80GB", "fwd+bwd"},
                                           {"mem_efficient", "A100-SXM-80GB", "fwd+bwd"},
                                           {"flash1_triton", "A100-SXM-80GB", "fwd+bwd"},
                                           {"flash2", "H100-SXM-80GB", "fwd"},
                                           {"flash2", "H100-SXM-80GB", "bwd"},
                                           {"flash3", "H100-SXM-80GB", "fwd"},
                                           {"flash3", "H100-SXM-80GB", "bwd"},
                                           {"cudnn", "H100-SXM-80GB", "fwd"},
                                           {"cudnn", "H100-SXM-80GB", "bwd"},
                                           {"triton", "H100-SXM-80GB", "fwd"},
                                           {"flash2", "B200-SXM-180GB", "fwd"},
                                           {"flash2", "B200-SXM-180GB", "bwd", 64},
                                           {"flash2", "MI300X-192GB", "fwd", 128, 2.00},
                                           {"flash2", "MI300X-192GB", "bwd", 128, 6.00}}) {
    const auto rows = training_rows(all, g);
    ASSERT_GE(rows.size(), 4u) << g.kernel << " " << g.gpu << " " << g.pass;
    const AttentionKernelConstants fitted = fit(rows, g.overhead_blocks);
    const AttentionDevice d = device_for(g.gpu);
    const auto kernel = *parse_attention_kernel(g.kernel);
    for (AttentionPass pass : {AttentionPass::forward, AttentionPass::backward}) {
      if (g.pass != "fwd+bwd" && pass != pass_of(g.pass)) continue;
      const AttentionKernelConstants shipped = attention_constants(kernel, d.arch, pass, 128, false);
      std::printf("fit %s %s %s: loop_efficiency %.3f overhead_blocks %.2f\n", g.kernel.c_str(), g.gpu.c_str(),
                  g.pass.c_str(), fitted.loop_efficiency, fitted.overhead_blocks);
      EXPECT_NEAR(shipped.loop_efficiency, fitted.loop_efficiency, 0.0051) << g.kernel << " " << g.pass;
      EXPECT_NEAR(shipped.overhead_blocks, fitted.overhead_blocks, 0.251) << g.kernel << " " << g.pass;
      EXPECT_EQ(shipped.fitted_on.find("borrowed"), std::string::npos);
    }
  }
}

// A published row the model misses by more than 10%, by name: which row, the bound it is held
// to (just above its error today), the error measured, and why no faithful mechanism reaches it.
struct RowException {
  std::string kernel, pass;
  bool causal;
  int head_dim;
  double seq;
  bool independent_run;  // the pytorch/benchmark run rather than the FA3 paper's figure
  double tolerance;
  const char* why;
  std::string gpu = "H100-SXM-80GB";
  double batch = 0;  // 0: any (the FlashAttention benchmarks tie the batch to the length)
};

// The H100 exceptions are at seq 512, where a CTA has 1-4 key blocks. The model already prices
// the diagonal blocks whole plus the mask's compare/select on them, the per-CTA overhead and the
// last wave; what is left is a per-CTA cost of short causal CTAs that the non-causal rows (the
// fit's) cannot show. The B200 and MI300X ones are rows whose own neighbours disagree with them
// by as much (one run each, published as is). Errors as ReportAllRows prints them.
const std::vector<RowException>& row_exceptions() {
  static const std::vector<RowException> e = {
      {"flash2", "fwd", true, 128, 512, false, 0.15,
       "+13.9%: FA3 paper Fig. 5 causal hd128 seq 512 (191 TFLOP/s); 1-4 key blocks per CTA"},
      {"flash3", "fwd", true, 64, 512, false, 0.12,
       "+10.5%: FA3 paper Fig. 5 causal hd64 seq 512 (197 TFLOP/s); 1-3 key blocks per CTA"},
      {"flash3", "fwd", true, 128, 512, false, 0.13,
       "+11.9%: FA3 paper Fig. 5 causal hd128 seq 512 (292 TFLOP/s); 1-4 key blocks per CTA"},
      {"flash3", "bwd", false, 64, 512, false, 0.12,
       "+10.6%: FA3 paper backward figure hd64 seq 512 (272 TFLOP/s, a transcribed bar label); "
       "the hd64 backward is 5-9% high at every length, so 512's extra is small"},
      {"cudnn", "fwd", true, 128, 512, false, 0.12,
       "+11.1%: FA3 paper Fig. 5 cuDNN causal hd128 seq 512 (315 TFLOP/s); 1-4 key blocks per CTA"},
      {"triton", "fwd", true, 128, 512, false, 0.60,
       "+56%: FA3 paper Fig. 5 Triton causal hd128 seq 512 (146 TFLOP/s), below its own non-causal "
       "bar (323) by more than the halved FLOPs explain: a launch the CTA picture does not capture"},
      {"flash2", "fwd", false, 128, 16384, false, 0.12,
       "+10.8%: tritonbench PR #171's B200 16k row (330.6 TFLOP/s) is 9% under its own 8k row (361.6); a fitted row",
       "B200-SXM-180GB"},
      {"flash2", "fwd", false, 64, 512, false, 0.22,
       "-20.3%: flash-attention issue #1589's B200 hd-64 forward (308 TFLOP/s), held out. The run's hd-64 forward "
       "beats tritonbench's hd-128 one (381 against 352 at 2k) where the sm80 kernel's hd-64 tile costs the "
       "model more per FLOP; its own 4k row (307) is 19% under its 2k row",
       "B200-SXM-180GB"},
      {"flash2", "fwd", false, 64, 1024, false, 0.22, "-20.6%: issue #1589's B200 hd-64 forward (359), as at 512",
       "B200-SXM-180GB"},
      {"flash2", "fwd", false, 64, 2048, false, 0.20, "-18.6%: issue #1589's B200 hd-64 forward (381), as at 512",
       "B200-SXM-180GB"},
      {"flash2", "fwd", false, 64, 16384, false, 0.13, "-11.5%: issue #1589's B200 hd-64 forward (379), as at 512",
       "B200-SXM-180GB"},
      {"flash2", "fwd", false, 128, 16384, false, 0.12,
       "+11.2%: ROCm/flash-attention issue #142's MI300X batch-8 row (309.6 TFLOP/s), 12% under its own batch-1 "
       "row (353.2) at the same length; a fitted row",
       "MI300X-192GB", 8},
  };
  return e;
}

const RowException* exception_for(const PublishedRow& r) {
  const bool independent = r.source.find("pytorch/benchmark") != std::string::npos;
  for (const RowException& e : row_exceptions())
    if (e.kernel == r.kernel && e.pass == r.pass && e.causal == r.causal && e.head_dim == r.head_dim &&
        e.seq == r.seq && e.independent_run == independent && r.gpu == e.gpu && (e.batch == 0 || e.batch == r.batch))
      return &e;
  return nullptr;
}

// A row within 10%, or within its named exception's bound; an exception whose row has come
// within 10% fails too, so that the list only names rows that need it.
void expect_within_ten_percent_or_named(const PublishedRow& r) {
  const double predicted = shipped_tflops(r);
  const double error = predicted / r.tflops - 1;
  const std::string what = r.kernel + " " + r.gpu + " " + r.pass + " causal " + std::to_string(r.causal) + " d " +
                           std::to_string(r.head_dim) + " seq " + std::to_string(static_cast<int>(r.seq)) +
                           ": published " + std::to_string(r.tflops) + " predicted " + std::to_string(predicted) +
                           " (" + r.source + "; " + r.locator + ")";
  if (const RowException* e = exception_for(r)) {
    EXPECT_LT(std::abs(error), e->tolerance) << what << "; exception: " << e->why;
    EXPECT_GT(std::abs(error), 0.10) << what << " is within 10% now: drop its exception (" << e->why << ")";
  } else {
    EXPECT_LT(std::abs(error), 0.10) << what;
  }
}

// Every FlashAttention-2 / -3 row at head dims 64 and 128 (fwd, bwd, fwd+bwd; causal and not;
// seq 512..16k; A100, H100, B200, MI300X) within 10% of the published TFLOP/s, but for the named
// exceptions above (ten rows). The non-causal head-dim-128 rows were the fit's (and the B200's
// hd-64 backward); the rest (causal, head dim 64, the H100 fwd+bwd chart, the pytorch/benchmark
// run, the B200's hd-64 forward and fwd+bwd) are held out.
TEST(AttentionModel, FlashAttentionTablesWithinTenPercent) {
  int checked = 0, excepted = 0;
  for (const auto& r : load_published()) {
    if ((r.kernel != "flash2" && r.kernel != "flash3") || r.head_dim > 128) continue;
    expect_within_ten_percent_or_named(r);
    excepted += exception_for(r) != nullptr;
    ++checked;
  }
  EXPECT_EQ(checked, 160);  // every FA2/FA3 row at head dims 64 and 128 in the CSV
  EXPECT_EQ(excepted, 10);  // every FA2/FA3 exception matched a row
}

// cuDNN and Triton on H100 (FA3 paper Fig. 5 and its backward figure), head dim 128: within 10%
// but for their named causal seq-512 exceptions. Their head-dim-64 rows are further off (cuDNN
// +10..24% high, Triton 11..30% off; see docs/cost-model.md) and only reported.
TEST(AttentionModel, CudnnAndTritonHeadDim128) {
  int checked = 0, excepted = 0;
  for (const auto& r : load_published()) {
    if ((r.kernel != "cudnn" && r.kernel != "triton") || r.head_dim != 128) continue;
    expect_within_ten_percent_or_named(r);
    excepted += exception_for(r) != nullptr;
    ++checked;
  }
  EXPECT_EQ(checked, 30);  // cuDNN fwd (12) and bwd (6), Triton fwd (12)
  EXPECT_EQ(excepted, 2);
}

// Every published row, printed: the numbers docs/cost-model.md quotes.
TEST(AttentionModel, ReportAllRows) {
  for (const auto& r : load_published()) {
    const double predicted = shipped_tflops(r);
    std::printf("%-13s %-13s %-7s c%d d%3d s%5.0f published %6.1f predicted %6.1f %+6.1f%%\n", r.kernel.c_str(),
                r.gpu.c_str(), r.pass.c_str(), r.causal, r.head_dim, r.seq, r.tflops, predicted,
                100 * (predicted / r.tflops - 1));
  }
}

// ---- This workplace's GPUs: the attention kernels timed on them (held out) ----------------------

// One row of kind "attention" of tools/hardware/kernel_timing.py's CSVs (tests/data/hardware/kernels/):
// PyTorch SDPA with one backend allowed, timed with CUDA events (median of its repetitions).
struct MeasuredAttention {
  std::string file, gpu, backend, direction;
  AttentionShape shape;
  double seconds = 0;
};

std::vector<MeasuredAttention> load_measured_attention() {
  std::vector<MeasuredAttention> rows;
  const std::string dir = std::string(FSDPSIM_SOURCE_ROOT) + "/tests/data/hardware/kernels/";
  for (const char* name : {"kernels-h100-2026-11-27.csv", "kernels-h200-2026-11-28.csv"}) {
    std::ifstream in(dir + name);
    EXPECT_TRUE(in.good()) << name;
    std::string line;
    std::getline(in, line);
    std::map<std::string, std::size_t> column;
    {
      std::stringstream header(line);
      std::string cell;
      for (std::size_t i = 0; std::getline(header, cell, ','); ++i) column[cell] = i;
    }
    while (std::getline(in, line)) {
      std::vector<std::string> f;
      std::stringstream ss(line);
      std::string cell;
      while (std::getline(ss, cell, ',') && f.size() <= column.at("median_seconds")) f.push_back(cell);
      if (f.size() <= column.at("median_seconds") || f[column.at("kind")] != "attention" ||
          f[column.at("status")] != "ok")
        continue;
      MeasuredAttention r;
      r.file = name;
      r.gpu = std::string(name).find("h200") != std::string::npos ? "H200-SXM-141GB" : "H100-SXM-80GB";
      r.backend = f[column.at("kernel")];
      r.direction = f[column.at("direction")];
      r.shape.batch = std::stod(f[column.at("batch")]);
      r.shape.seq_q = r.shape.seq_kv = std::stod(f[column.at("seq_len")]);
      r.shape.heads = std::stoi(f[column.at("heads")]);
      r.shape.kv_heads = std::stoi(f[column.at("kv_heads")]);
      r.shape.head_dim = std::stoi(f[column.at("head_dim")]);
      r.shape.causal = f[column.at("causal")] == "true";
      r.seconds = std::stod(f[column.at("median_seconds")]);
      rows.push_back(r);
    }
  }
  return rows;
}

// SDPA's backends as the attention model names them.
std::optional<AttentionKernel> model_kernel(const std::string& backend) {
  if (backend == "sdpa_flash") return AttentionKernel::flash2;
  if (backend == "sdpa_cudnn") return AttentionKernel::cudnn;
  if (backend == "sdpa_mem_efficient") return AttentionKernel::mem_efficient;
  return std::nullopt;
}

// Every attention kernel this workplace's H100 (2026-11-27) and H200 (2026-11-28) ran, against
// the model: nothing in the model saw these rows (its constants come from the published tables
// above, H100 and A100 only), and the H200 is a GPU no constant was fitted on. Printed row by
// row with the mean |error| of each (GPU, kernel, direction), held to (errors of 2026-11-28):
// - forward, SDPA's flash (FlashAttention-2) and cuDNN backends: 12% (8.1-10.1%);
// - backward, the same two: 20% (12.5-17.9%). The measured flash backward is slower than the
//   model by 0.3-0.5 ms a call at 512-2,048 tokens (-14..-39%) and 0.1-1.5 ms at 16k (-2..-10%):
//   time the FlashAttention papers' kernel benchmarks (the model's source) do not show. Not
//   modelled, not explained (the benchmark's q, k, v are [b, h, s, d]-contiguous, where a model's
//   are transposed views of [b, s, h, d]: a layout copy is one candidate); docs/accuracy.md.
// - mem_efficient: forward 20% (16.3-17.9%), backward 25% (20.4-20.6%). Its Hopper constants are
//   the FlashAttention-2 paper's A100 xformers pair carried by FlashAttention-2's own A100-to-H100
//   ratio (attention_model.cpp carried_like_flash2; before, the A100 pair as it was:
//   38.9-40.1% and 59.1-59.2%). Head dim 128 rows are 10-14% off, head dim 64 rows 22-28%: the
//   A100 pair already prices the xformers kernel's d64 bars 18-34% fast (the published rows above),
//   and Hopper inherits it.
TEST(AttentionModel, KernelsTimedOnThisWorkplacesGpus) {
  const std::vector<MeasuredAttention> rows = load_measured_attention();
  ASSERT_EQ(rows.size(), 288u);  // 144 per GPU: 3 backends x 2 directions x 24 shapes
  std::map<std::string, std::pair<double, int>> groups;  // "gpu backend direction" -> (sum |error|, rows)
  for (const MeasuredAttention& r : rows) {
    const std::optional<AttentionKernel> k = model_kernel(r.backend);
    ASSERT_TRUE(k) << r.backend;
    const AttentionPass pass = r.direction == "backward" ? AttentionPass::backward : AttentionPass::forward;
    const double predicted = estimate_attention(r.shape, pass, *k, device_for(r.gpu)).seconds;
    const double error = predicted / r.seconds - 1;
    std::printf("%-14s %-18s %-8s b%3.0f s%5.0f h%2d kv%2d d%3d c%d measured %8.1f us predicted %8.1f us %+6.1f%%\n",
                r.gpu.c_str(), r.backend.c_str(), r.direction.c_str(), r.shape.batch, r.shape.seq_q, r.shape.heads,
                r.shape.kv_heads, r.shape.head_dim, r.shape.causal, 1e6 * r.seconds, 1e6 * predicted, 100 * error);
    auto& g = groups[r.gpu + " " + r.backend + " " + r.direction];
    g.first += std::abs(error);
    g.second += 1;
  }
  for (const auto& [name, g] : groups) {
    const double mean = g.first / g.second;
    std::printf("%-45s %2d rows, mean |error| %5.1f%%\n", name.c_str(), g.second, 100 * mean);
    const bool forward = name.find("forward") != std::string::npos;
    if (name.find("sdpa_mem_efficient") != std::string::npos)
      EXPECT_LT(mean, forward ? 0.20 : 0.25) << name;
    else
      EXPECT_LT(mean, forward ? 0.12 : 0.20) << name;
  }
}

// ---- Mechanisms, by hand ----------------------------------------------------------------------

AttentionDevice h100() { return device_for("H100-SXM-80GB"); }

AttentionShape self_attention(double seq, int heads, int head_dim, bool causal) {
  AttentionShape s;
  s.batch = 1;
  s.seq_q = s.seq_kv = seq;
  s.heads = s.kv_heads = heads;
  s.head_dim = head_dim;
  s.causal = causal;
  return s;
}

// FLOPs by hand: 4 * d per attended pair; non-causal seq s has s^2 pairs per head, causal
// s(s+1)/2, backward 2.5x.
TEST(AttentionModel, FlopsCountAttendedPairs) {
  const auto d = h100();
  const AttentionShape full = self_attention(4096, 16, 128, false);
  const AttentionShape causal = self_attention(4096, 16, 128, true);
  EXPECT_DOUBLE_EQ(estimate_attention(full, AttentionPass::forward, AttentionKernel::flash2, d).flops,
                   4.0 * 128 * 4096 * 4096 * 16);
  EXPECT_DOUBLE_EQ(estimate_attention(causal, AttentionPass::forward, AttentionKernel::flash2, d).flops,
                   4.0 * 128 * (4096.0 * 4097 / 2) * 16);
  EXPECT_DOUBLE_EQ(estimate_attention(full, AttentionPass::backward, AttentionKernel::flash2, d).flops,
                   2.5 * 4.0 * 128 * 4096 * 4096 * 16);
}

// Causal skips the blocks above the diagonal: at long seq it costs about half the non-causal
// time (64 query blocks visit 1..64 key blocks: 2080 of 4096 block visits = 0.508, plus the
// per-CTA overheads, which both pay in full).
TEST(AttentionModel, CausalCostsAboutHalfAtLongSeq) {
  const auto d = h100();
  for (auto kernel : {AttentionKernel::flash2, AttentionKernel::flash3, AttentionKernel::cudnn}) {
    const double full =
        estimate_attention(self_attention(8192, 32, 128, false), AttentionPass::forward, kernel, d).seconds;
    const double causal =
        estimate_attention(self_attention(8192, 32, 128, true), AttentionPass::forward, kernel, d).seconds;
    EXPECT_GT(causal / full, 0.5) << to_string(kernel);
    EXPECT_LT(causal / full, 0.56) << to_string(kernel);
  }
}

// A sliding window of w at seq s >> w: each query sees w keys, so the call costs like s/w
// independent calls of seq w per head... with the same number of query blocks as seq s: the
// time per query block equals a causal seq-w call's longest CTA. By hand: w = 4096 at s = 65536
// does 65536 * 4096 - 4096*4095/2 pairs, ~ s*w; its time is within 10% of s/w = 16 times a
// non-causal... we compare FLOPs exactly and time against the same kernel at seq s scaled.
TEST(AttentionModel, SlidingWindowCostsLikeTheWindow) {
  const auto d = h100();
  AttentionShape windowed = self_attention(65536, 32, 128, true);
  windowed.window = 4096;
  const double w = 4096, s = 65536;
  const auto est = estimate_attention(windowed, AttentionPass::forward, AttentionKernel::flash2, d);
  // Pairs: rows 0..w-1 see row+1 keys, the rest see w.
  EXPECT_DOUBLE_EQ(est.flops, 4.0 * 128 * 32 * (w * (w + 1) / 2 + (s - w) * w));
  // Time: per head, s/128 query blocks of ~w/128 (+1 straddled) key blocks each, against a
  // non-causal seq-w call's w/128 query blocks of w/128 key blocks: the windowed call is
  // s/w = 16 such calls' worth of blocks, +1/32 for the straddled block, less the ramp.
  const double dense_w =
      estimate_attention(self_attention(w, 32, 128, false), AttentionPass::forward, AttentionKernel::flash2, d)
          .seconds;
  EXPECT_NEAR(est.seconds / (dense_w * s / w), 1.0, 0.05);
  // And far below full causal attention at seq s (s/(2w) = 8x the work).
  const double causal_full =
      estimate_attention(self_attention(s, 32, 128, true), AttentionPass::forward, AttentionKernel::flash2, d).seconds;
  EXPECT_LT(est.seconds, causal_full / 6);
}

// GQA shares K/V between query heads: same FLOPs, same compute time; only the K/V bytes drop.
TEST(AttentionModel, GqaChangesOnlyMemory) {
  const auto d = h100();
  AttentionShape mha = self_attention(8192, 32, 128, true);
  AttentionShape gqa = mha;
  gqa.kv_heads = 8;
  for (auto pass : {AttentionPass::forward, AttentionPass::backward}) {
    const auto a = estimate_attention(mha, pass, AttentionKernel::flash2, d);
    const auto b = estimate_attention(gqa, pass, AttentionKernel::flash2, d);
    EXPECT_DOUBLE_EQ(a.flops, b.flops);
    EXPECT_DOUBLE_EQ(a.seconds, b.seconds);  // compute-bound at this shape
  }
  // The K/V bytes: on a device with 1 GB/s of HBM the call is memory-bound, so its time is its
  // bytes by hand: forward reads Q, K, V and writes O, 2 bytes each; b = 1, s = 8192, d = 128.
  AttentionDevice slow_memory = d;
  slow_memory.hbm_bytes_per_second = 1e9;
  const double q_bytes = 2.0 * 32 * 8192 * 128;   // Q or O: 32 query heads
  const double kv_bytes_mha = 2.0 * 32 * 8192 * 128;  // K or V: 32 heads
  const double kv_bytes_gqa = 2.0 * 8 * 8192 * 128;   // K or V: 8 heads
  EXPECT_NEAR(estimate_attention(mha, AttentionPass::forward, AttentionKernel::flash2, slow_memory).seconds,
              (2 * q_bytes + 2 * kv_bytes_mha) / 1e9, 1e-9);
  EXPECT_NEAR(estimate_attention(gqa, AttentionPass::forward, AttentionKernel::flash2, slow_memory).seconds,
              (2 * q_bytes + 2 * kv_bytes_gqa) / 1e9, 1e-9);
}

// DeepSeek's MLA: q and k 192 per head (128 nope + 64 rope), v and the output 128. QK^T runs
// 2 x 192 FLOPs per pair per head and AV 2 x 128: 2 x (192 + 128) = 640 = 4 x 160, by hand; the
// bytes a memory-bound call moves are Q and K at 192, V and O at 128 (b = 1, s = 8192, 16 heads).
TEST(AttentionModel, NarrowerVCountsQkAndVDimsApart) {
  const auto d = h100();
  AttentionShape mla = self_attention(8192, 16, 192, false);
  mla.v_head_dim = 128;
  for (auto kernel : {AttentionKernel::flash3, AttentionKernel::eager}) {
    EXPECT_DOUBLE_EQ(estimate_attention(mla, AttentionPass::forward, kernel, d).flops,
                     2.0 * (192 + 128) * 8192.0 * 8192 * 16)
        << to_string(kernel);
  }
  AttentionDevice slow_memory = d;
  slow_memory.hbm_bytes_per_second = 1e9;
  const double q_or_k = 2.0 * 16 * 8192 * 192, v_or_o = 2.0 * 16 * 8192 * 128;
  EXPECT_NEAR(estimate_attention(mla, AttentionPass::forward, AttentionKernel::flash2, slow_memory).seconds,
              (2 * q_or_k + 2 * v_or_o) / 1e9, 1e-9);
  EXPECT_NEAR(estimate_attention(mla, AttentionPass::backward, AttentionKernel::flash2, slow_memory).seconds,
              2 * (2 * q_or_k + 2 * v_or_o) / 1e9, 1e-9);
}

// Eager attention materialises the batch*heads*s^2 score matrix: at d = 64 every op on it is
// bandwidth-bound, so the forward is 8 bytes per score (S written, softmax reads S and writes P,
// PV reads P) at HBM bandwidth, 12 with a causal mask (read and write S once more). By hand.
TEST(AttentionModel, EagerMaterialisesScores) {
  AttentionDevice d = h100();
  const AttentionShape full = self_attention(4096, 16, 64, false);
  const double scores = 16.0 * 4096 * 4096;
  // bmm at d = 64: 2*64 FLOPs per 2-byte score = 64 FLOP/byte, below H100's 989.4/3.35*0.8 = 236.
  EXPECT_NEAR(estimate_attention(full, AttentionPass::forward, AttentionKernel::eager, d).seconds,
              8 * scores / d.hbm_bytes_per_second, 1e-12);
  EXPECT_NEAR(estimate_attention(self_attention(4096, 16, 64, true), AttentionPass::forward, AttentionKernel::eager,
                                 d)
                  .seconds,
              12 * scores / d.hbm_bytes_per_second, 1e-12);
  // Backward: dP written, P read, softmax backward reads dP and P and writes dS, dS read twice:
  // 14 bytes per score.
  EXPECT_NEAR(estimate_attention(full, AttentionPass::backward, AttentionKernel::eager, d).seconds,
              14 * scores / d.hbm_bytes_per_second, 1e-12);
  // Quadratic in seq, unlike the fused kernels' linear memory.
  const double t1 = estimate_attention(full, AttentionPass::forward, AttentionKernel::eager, d).seconds;
  const double t2 =
      estimate_attention(self_attention(8192, 16, 64, false), AttentionPass::forward, AttentionKernel::eager, d)
          .seconds;
  EXPECT_NEAR(t2 / t1, 4.0, 1e-9);
}

// ---- Masked blocks, by hand ----------------------------------------------------------------------

// One H100 SM (989.4 TFLOPS / 132), HBM never the bound: a call's time is the sum of its CTAs'.
AttentionDevice one_hopper_sm() {
  AttentionDevice d;
  d.arch = "hopper";
  d.sm_count = 1;
  d.peak_flops = 989.4e12 / 132;
  d.hbm_bytes_per_second = 1e18;
  return d;
}

AttentionKernelConstants plain(int rows, int cols, bool first_block_masked) {
  AttentionKernelConstants c;
  c.loop_efficiency = 1;
  c.overhead_blocks = 0;
  c.tile = {rows, cols};
  c.first_block_masked = first_block_masked;
  return c;
}

// A block the causal diagonal (or the end of the keys) cuts is computed whole and then masked:
// a compare and a select per score at 64 integer results per clock per SM against 4096 tensor
// FLOPs (CUDA C++ Programming Guide throughput table; H100 989.4 TFLOPS = 132 x 1.83 GHz x 4096).
// By hand, forward, head dim 128, 128 x 128 tiles, P = one SM's peak:
//   block = 128*128*512/P (matmul at peak) + 128*128/(P*3.9/989) (exponentials)
//   mask  = 128*128*2/(P*64/4096) = 128*128*128/P
// causal seq 512: query blocks see 1, 2, 3, 4 key blocks, one masked each: 10 block + 4 mask;
// non-causal seq 512: 16 blocks, none masked; non-causal seq 500: 4 x 4 blocks, the last of
// each cut by the end of the keys: 16 block + 4 mask; FlashAttention-3's forward masks its
// first block whatever the length: seq 512 non-causal is 16 block + 4 mask too.
TEST(AttentionModel, MaskedBlocksPayTheMaskOnTopOfTheWholeBlock) {
  const AttentionDevice d = one_hopper_sm();
  const double P = d.peak_flops;
  const double block = 128.0 * 128 * 512 / P + 128.0 * 128 / (P * 3.9 / 989);
  const double mask = 128.0 * 128 * 128 / P;
  const auto F = AttentionPass::forward;
  EXPECT_NEAR(estimate_fused_attention(self_attention(512, 1, 128, true), F, d, plain(128, 128, false)).seconds,
              10 * block + 4 * mask, 1e-15);
  EXPECT_NEAR(estimate_fused_attention(self_attention(512, 1, 128, false), F, d, plain(128, 128, false)).seconds,
              16 * block, 1e-15);
  EXPECT_NEAR(estimate_fused_attention(self_attention(500, 1, 128, false), F, d, plain(128, 128, false)).seconds,
              16 * block + 4 * mask, 1e-15);
  EXPECT_NEAR(estimate_fused_attention(self_attention(512, 1, 128, false), F, d, plain(128, 128, true)).seconds,
              16 * block + 4 * mask, 1e-15);
  // 128 x 64 tiles (FlashAttention-2's forward at head dim 128): the diagonal cuts two 64-wide
  // blocks of every 128-row query block (n_masking_steps = ceil(128 / 64)): query blocks see
  // 2, 4, 6, 8 half blocks, two masked each.
  EXPECT_NEAR(estimate_fused_attention(self_attention(512, 1, 128, true), F, d, plain(128, 64, false)).seconds,
              20 * block / 2 + 8 * mask / 2, 1e-15);
}

// The tiles the kernels' sources use: FlashAttention-2's forward (flash_fwd_launch_template.h,
// run_mha_fwd_hdim64 / hdim128: Flash_fwd_kernel_traits<64, 128, 128>, <128, 128, 64>) on A100,
// H100 and B200; FlashAttention-3's forward on H100 (hopper/tile_size.h); the nominal 128 x 128
// elsewhere. Which kernels mask their first block regardless.
TEST(AttentionModel, TilesAndFirstBlockMaskFollowTheSources) {
  const auto F = AttentionPass::forward, B = AttentionPass::backward;
  auto tile = [](AttentionKernel k, const char* arch, AttentionPass p, int d, bool causal) {
    const AttentionTile t = attention_tile(k, arch, p, d, causal);
    return std::make_pair(t.rows, t.cols);
  };
  EXPECT_EQ(tile(AttentionKernel::flash2, "hopper", F, 128, true), std::make_pair(128, 64));
  EXPECT_EQ(tile(AttentionKernel::flash2, "ampere", F, 128, false), std::make_pair(128, 64));
  EXPECT_EQ(tile(AttentionKernel::flash2, "hopper", F, 64, true), std::make_pair(128, 128));
  // FlashAttention-2 on the B200 is the same sm80 kernel (mma.sync), with the same tiles.
  EXPECT_EQ(tile(AttentionKernel::flash2, "blackwell", F, 128, false), std::make_pair(128, 64));
  EXPECT_EQ(tile(AttentionKernel::flash2, "hopper", B, 128, true), std::make_pair(128, 128));
  EXPECT_EQ(tile(AttentionKernel::flash3, "hopper", F, 128, false), std::make_pair(128, 176));
  EXPECT_EQ(tile(AttentionKernel::cudnn, "hopper", F, 128, true), std::make_pair(128, 128));
  EXPECT_TRUE(first_block_always_masked(AttentionKernel::flash3, "hopper", F));
  EXPECT_FALSE(first_block_always_masked(AttentionKernel::flash3, "hopper", B));
  EXPECT_FALSE(first_block_always_masked(AttentionKernel::flash2, "hopper", F));
  EXPECT_TRUE(attention_constants(AttentionKernel::flash3, "hopper", F, 128, false).first_block_masked);
  EXPECT_DOUBLE_EQ(alu_ops_per_tensor_flop("ampere"), 64.0 / 2048);
  EXPECT_DOUBLE_EQ(alu_ops_per_tensor_flop("hopper"), 64.0 / 4096);
  EXPECT_DOUBLE_EQ(alu_ops_per_tensor_flop("ada"), 64.0 / 2048);  // borrowed from Ampere
}

// Eager attention on a sliding-window GQA shape (Mistral-like: 16 query heads, 4 K/V heads,
// window 1024, seq 4096, head dim 64) runs like full causal MHA: HF's eager path computes the
// whole square and masks it, and repeat_kv gives every query head its own K/V. At d = 64 every
// op is bandwidth-bound on H100 (64 FLOP per byte against 989.4 x 0.8 / 3.35 = 236), so the
// forward is 12 bytes per score (QK^T writes S, the mask reads and writes it, softmax reads S
// and writes P, PV reads P) over all 16 x 4096^2 scores; its FLOPs count every pair.
TEST(AttentionModel, EagerRunsTheWholeSquareForWindowsAndEveryQueryHead) {
  const AttentionDevice d = h100();
  AttentionShape s = self_attention(4096, 16, 64, true);
  s.kv_heads = 4;
  s.window = 1024;
  const double scores = 16.0 * 4096 * 4096;
  const auto e = estimate_attention(s, AttentionPass::forward, AttentionKernel::eager, d);
  EXPECT_NEAR(e.seconds, 12 * scores / d.hbm_bytes_per_second, 1e-12);
  EXPECT_DOUBLE_EQ(e.flops, 4.0 * 64 * scores);
}

// ---- Names, availability, PyTorch's default ---------------------------------------------------

TEST(AttentionModel, KernelNamesRoundTrip) {
  for (auto k : {AttentionKernel::flash2, AttentionKernel::flash3, AttentionKernel::cudnn,
                 AttentionKernel::mem_efficient, AttentionKernel::triton, AttentionKernel::eager})
    EXPECT_EQ(parse_attention_kernel(to_string(k)), k);
  EXPECT_FALSE(parse_attention_kernel("flash").has_value());
  EXPECT_FALSE(parse_attention_kernel("FLASH2").has_value());
}

TEST(AttentionModel, AvailabilityAndDefault) {
  AttentionDevice a100 = device_for("A100-SXM-80GB"), h = h100(), mi300;
  mi300.arch = "cdna3";
  EXPECT_FALSE(attention_kernel_available(AttentionKernel::flash3, a100));
  EXPECT_TRUE(attention_kernel_available(AttentionKernel::flash3, h));
  EXPECT_FALSE(attention_kernel_available(AttentionKernel::cudnn, mi300));
  EXPECT_TRUE(attention_kernel_available(AttentionKernel::flash2, mi300));
  // sdp_utils.cpp: flash first unless cuDNN is preferred (sm90/sm100 with runtime cuDNN > 9.15.0).
  EXPECT_EQ(default_attention_kernel(a100), AttentionKernel::flash2);
  EXPECT_EQ(default_attention_kernel(h), AttentionKernel::flash2);
  EXPECT_EQ(default_attention_kernel(h, true), AttentionKernel::cudnn);
  EXPECT_EQ(default_attention_kernel(a100, true), AttentionKernel::flash2);
  // q/k and v head dims that differ (DeepSeek's MLA, 192 and 128): SDPA's flash backend needs one
  // head dim (check_head_dim_size_flash), so SDPA runs the memory-efficient kernel.
  EXPECT_EQ(default_attention_kernel(h, false, false), AttentionKernel::mem_efficient);
  EXPECT_EQ(resolve_attention_kernel("auto", h, false), AttentionKernel::mem_efficient);
  EXPECT_EQ(resolve_attention_kernel("auto", h, true), AttentionKernel::flash2);
  EXPECT_EQ(resolve_attention_kernel("flash3", h, false), AttentionKernel::flash3);
  EXPECT_FALSE(resolve_attention_kernel("eager", h, true).has_value());
  // [SDPA and sliding windows] Only the kernels with a window of their own apply one.
  EXPECT_TRUE(kernel_applies_window(AttentionKernel::flash2));
  EXPECT_TRUE(kernel_applies_window(AttentionKernel::flash3));
  EXPECT_FALSE(kernel_applies_window(AttentionKernel::cudnn));
  EXPECT_FALSE(kernel_applies_window(AttentionKernel::mem_efficient));
}

// SDPA's mem-efficient kernel is an sm80 kernel on Hopper (PyTorch builds its 16-bit CUTLASS FMHA
// for sm80 only): its Hopper pair is its A100 pair times FlashAttention-2's published
// H100-over-A100 ratio for the pass. By hand from the shipped pairs (A100 mem_efficient 0.330 /
// 2.25, A100 flash2 0.725 / 2.25, H100 flash2 forward 0.485 / 2.00, backward 0.365 / 6.00):
// forward 0.330 * 0.485 / 0.725 = 0.22076 and 2.25 * 2.00 / 2.25 = 2.00; backward
// 0.330 * 0.365 / 0.725 = 0.16614 and 6.00. Blackwell is carried by its own FlashAttention-2
// pair (backward 0.155 / 8.00): 0.330 * 0.155 / 0.725 = 0.07055 and 2.25 * 8.00 / 2.25 = 8.00.
TEST(AttentionModel, MemEfficientOnHopperIsCarriedLikeFlashAttention2) {
  const auto f = attention_constants(AttentionKernel::mem_efficient, "hopper", AttentionPass::forward, 128, true);
  EXPECT_NEAR(f.loop_efficiency, 0.330 * 0.485 / 0.725, 1e-12);
  EXPECT_NEAR(f.overhead_blocks, 2.00, 1e-12);
  const auto b = attention_constants(AttentionKernel::mem_efficient, "hopper", AttentionPass::backward, 128, true);
  EXPECT_NEAR(b.loop_efficiency, 0.330 * 0.365 / 0.725, 1e-12);
  EXPECT_NEAR(b.overhead_blocks, 6.00, 1e-12);
  EXPECT_NE(f.fitted_on.find("borrowed from mem_efficient on ampere"), std::string::npos) << f.fitted_on;
  EXPECT_NE(b.fitted_on.find("carried to hopper by flash2's ampere-to-hopper ratio"), std::string::npos)
      << b.fitted_on;
  // Ampere keeps its fitted pair.
  const auto a = attention_constants(AttentionKernel::mem_efficient, "ampere", AttentionPass::backward, 128, true);
  EXPECT_DOUBLE_EQ(a.loop_efficiency, 0.330);
  EXPECT_DOUBLE_EQ(a.overhead_blocks, 2.25);
  const auto bw = attention_constants(AttentionKernel::mem_efficient, "blackwell", AttentionPass::backward, 128, true);
  EXPECT_NEAR(bw.loop_efficiency, 0.330 * 0.155 / 0.725, 1e-12);
  EXPECT_NEAR(bw.overhead_blocks, 8.00, 1e-12);
  EXPECT_NE(bw.fitted_on.find("carried to blackwell by flash2's ampere-to-blackwell ratio"), std::string::npos)
      << bw.fitted_on;
}

// FlashAttention's 2022 Triton kernel (llm-foundry's attn_impl: triton) on Hopper: no published
// rows, an sm80 kernel like the memory-efficient one, so carried by the same rule (fitted pair
// 0.320 / 3.00 on the A100 bars; flash2's A100 0.725 / 2.25, H100 forward 0.485 / 2.00, backward
// 0.365 / 6.00).
TEST(AttentionModel, FlashAttentionTritonOnHopperIsCarriedLikeFlashAttention2) {
  const auto f = attention_constants(AttentionKernel::flash1_triton, "hopper", AttentionPass::forward, 128, true);
  EXPECT_NEAR(f.loop_efficiency, 0.320 * 0.485 / 0.725, 1e-12);
  EXPECT_NEAR(f.overhead_blocks, 3.00 * 2.00 / 2.25, 1e-12);
  const auto b = attention_constants(AttentionKernel::flash1_triton, "hopper", AttentionPass::backward, 128, true);
  EXPECT_NEAR(b.loop_efficiency, 0.320 * 0.365 / 0.725, 1e-12);
  EXPECT_NEAR(b.overhead_blocks, 3.00 * 6.00 / 2.25, 1e-12);
  EXPECT_NE(f.fitted_on.find("borrowed from flash1_triton on ampere"), std::string::npos) << f.fitted_on;
  EXPECT_EQ(to_string(AttentionKernel::flash1_triton), "flash1_triton");
  EXPECT_EQ(parse_attention_kernel("flash1_triton"), AttentionKernel::flash1_triton);
}

// The FlashAttention Triton bars the pair did not see (head dim 64, causal; FA2 paper's A100
// figure, flash2_a100_fwd_bwd_benchmark.png (a), (c), (d)): 18 rows, mean |error| 10.4%, at most
// 19.4% (non-causal head dim 64 at seq 1k, the model slower; the causal head-dim-128 rows are
// 6.5-12.2% faster than published). Held to those figures, rounded up: a change of the model
// that moves them has to say so here.
TEST(AttentionModel, FlashAttentionTritonHeldOutRows) {
  double sum = 0, worst = 0;
  int rows = 0;
  for (const auto& r : load_published()) {
    if (r.kernel != "flash1_triton" || is_training_row(r)) continue;
    const double error = shipped_tflops(r) / r.tflops - 1;
    sum += std::abs(error);
    worst = std::max(worst, std::abs(error));
    ++rows;
  }
  EXPECT_EQ(rows, 18);
  EXPECT_LE(sum / rows, 0.105);
  EXPECT_LE(worst, 0.195);
}

// A GPU with no published rows (the L40S, Ada) is priced from its specs with the nearest arch's
// constants (Ampere's, the same generation of tensor core), and says so; it is never at peak.
// FlashAttention-2 on the B200 and the MI300X has rows of its own since session 38.
TEST(AttentionModel, UnbenchmarkedArchBorrowsAndStaysBelowPeak) {
  const auto c = attention_constants(AttentionKernel::flash2, "ada", AttentionPass::forward, 128, true);
  EXPECT_NE(c.fitted_on.find("borrowed from flash2 on ampere"), std::string::npos) << c.fitted_on;
  for (const char* arch : {"blackwell", "cdna3"}) {
    const auto own = attention_constants(AttentionKernel::flash2, arch, AttentionPass::backward, 128, true);
    EXPECT_EQ(own.fitted_on.find("borrowed"), std::string::npos) << arch << ": " << own.fitted_on;
  }
  const auto t = attention_constants(AttentionKernel::triton, "hopper", AttentionPass::backward, 128, true);
  EXPECT_NE(t.fitted_on.find("triton has no published rows"), std::string::npos) << t.fitted_on;
  const AttentionDevice l40s = device_for("L40S-48GB");
  ASSERT_EQ(l40s.arch, "ada");
  const AttentionShape s = self_attention(16384, 32, 128, false);
  const auto e = estimate_attention(s, AttentionPass::forward, AttentionKernel::flash2, l40s);
  EXPECT_LT(e.flops / e.seconds, 0.8 * l40s.peak_flops);
  EXPECT_GT(e.flops / e.seconds, 0.2 * l40s.peak_flops);
}

TEST(AttentionModel, RejectsBadShapes) {
  AttentionShape s = self_attention(1024, 32, 128, true);
  s.kv_heads = 5;  // 32 heads do not split into 5 groups
  EXPECT_THROW(estimate_attention(s, AttentionPass::forward, AttentionKernel::flash2, h100()), std::invalid_argument);
  s.kv_heads = 0;
  EXPECT_THROW(estimate_attention(s, AttentionPass::forward, AttentionKernel::flash2, h100()), std::invalid_argument);
}

}  // namespace
}  // namespace fsdpsim::planner
