#include "planner/attention_model.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <map>
#include <queue>
#include <stdexcept>
#include <tuple>
#include <vector>

namespace fsdpsim::planner {
namespace {

constexpr double kBytesPer16Bit = 2;
// FlashAttention's FLOP convention per (query, key) pair the mask lets through, per head dim:
// QK^T and PV are 2 * d each; the backward's five matmuls are 2.5x the forward
// (flash-attention benchmarks/benchmark_flash_attention.py: flops(), `2.5 * f` for "bwd").
constexpr double kForwardFlopsPerPairPerDim = 4;
constexpr double kBackwardToForwardFlops = 2.5;
// Exponentials per score: the forward computes P once; the backward recomputes it once.
constexpr double kExpPerScore = 1;
// The mask's ALU work per score of a masked block: one integer compare of the key's column
// against the row's limit and one select of -inf (FlashAttention-2 csrc/flash_attn/src/mask.h
// apply_mask_local@0251105a; FlashAttention-3 hopper/mask.h does the same per element).
constexpr double kMaskOpsPerScore = 2;

const std::map<std::string, std::string>& nearest_arch() {
  // Where an arch has no published data for a kernel (or no sourced figure), the closest design
  // that has: Ada's SM is Ampere's generation of tensor core; Blackwell and CDNA3 (MI300X) are
  // priced like Hopper, the datacenter part of their generation. Always a fraction of the device's
  // own peak, never the peak itself. FlashAttention-2 has rows of its own on both (and the sm80
  // kernels follow its ratio, carried_like_flash2): Hopper's fraction of the B200's peak priced
  // it 2.4x too fast.
  static const std::map<std::string, std::string> m = {
      {"ada", "ampere"}, {"blackwell", "hopper"}, {"cdna3", "hopper"}, {"ampere", "hopper"}, {"hopper", "ampere"}};
  return m;
}

std::string arch_with(const std::string& arch, const std::function<bool(const std::string&)>& has) {
  if (has(arch)) return arch;
  auto it = nearest_arch().find(arch);
  if (it != nearest_arch().end() && has(it->second)) return it->second;
  return "";
}

// `head_dim`: the mean of QK^T's and AV's head dims when they differ (AttentionShape::mean_head_dim).
double pass_flops_per_pair(AttentionPass pass, double head_dim) {
  return kForwardFlopsPerPairPerDim * head_dim * (pass == AttentionPass::backward ? kBackwardToForwardFlops : 1.0);
}

// The keys query row `row` may attend: [first, last] (empty when last < first). Causal masks
// align bottom-right when seq_q != seq_kv (FlashAttention >= 2.1); a window of w keeps the w
// keys ending at the diagonal (causal) or within w of it on both sides.
std::pair<double, double> key_range(double row, const AttentionShape& s) {
  const double diagonal = row + (s.seq_kv - s.seq_q);
  double first = 0, last = s.seq_kv - 1;
  if (s.causal) last = std::min(last, diagonal);
  if (s.window > 0) {
    first = std::max(first, diagonal - s.window + 1);
    if (!s.causal) last = std::min(last, diagonal + s.window - 1);
  }
  return {first, last};
}

// One (batch, head)'s query blocks: the key/value blocks each visits, how many of those need
// the mask, and the pairs it computes.
struct QueryBlocks {
  std::vector<double> kv_blocks;      // per query block
  std::vector<double> masked_blocks;  // per query block: visited blocks the mask cuts through
  double pairs = 0;                   // (query, key) pairs the mask lets through, all blocks
};

QueryBlocks query_blocks(const AttentionShape& s, const AttentionTile& tile, bool first_block_masked) {
  QueryBlocks q;
  const long rows = static_cast<long>(std::ceil(s.seq_q));
  for (long r0 = 0; r0 < rows; r0 += tile.rows) {
    const long r1 = std::min<long>(rows, r0 + tile.rows) - 1;
    for (long r = r0; r <= r1; ++r) {
      auto [first, last] = key_range(static_cast<double>(r), s);
      if (last >= first) q.pairs += last - first + 1;
    }
    // Key ranges move monotonically with the row, so the block's rows span from the first
    // row's first key to the last row's last key.
    const double first = key_range(static_cast<double>(r0), s).first;
    const double last = key_range(static_cast<double>(r1), s).second;
    const double visited = last < first ? 0.0 : std::floor(last / tile.cols) - std::floor(first / tile.cols) + 1;
    q.kv_blocks.push_back(visited);
    // A key block needs no mask when every row of the query block sees all its columns: it
    // starts at or after the last row's first key and ends at or before the first row's last key
    // (which also keeps a partial block at the end of the keys masked, as the kernels'
    // seqlen_k mask is). The kernel computes the masked blocks whole and then masks them
    // (FlashAttention-2 csrc/flash_attn/src/flash_fwd_kernel.h@0251105a, n_masking_steps).
    const double unmasked_first = std::ceil(key_range(static_cast<double>(r1), s).first / tile.cols);
    const double unmasked_last = std::floor((key_range(static_cast<double>(r0), s).second + 1) / tile.cols) - 1;
    const double unmasked = std::max(0.0, unmasked_last - unmasked_first + 1);
    double masked = std::max(0.0, visited - unmasked);
    if (first_block_masked && visited > 0) masked = std::max(masked, 1.0);
    q.masked_blocks.push_back(masked);
  }
  return q;
}

// Greedy list scheduling in launch order (query block fastest, then batch and head, as
// FlashAttention-2's grid) over `slots` SMs; returns the makespan in units of `cta_cost`.
double schedule_makespan(const std::vector<double>& cta_cost, double repeats, int slots) {
  const double ctas = cta_cost.size() * repeats;
  double total = 0, longest = 0;
  for (double c : cta_cost) total += c, longest = std::max(longest, c);
  total *= repeats;
  // Past a few hundred thousand CTAs the waves are so many that only the last one's
  // raggedness matters: half the longest CTA on average.
  constexpr double kExactScheduleLimit = 200000;
  if (ctas > kExactScheduleLimit) return total / slots + 0.5 * longest;
  std::priority_queue<double, std::vector<double>, std::greater<double>> free_at;
  for (int i = 0; i < slots; ++i) free_at.push(0.0);
  double makespan = 0;
  const long n = static_cast<long>(repeats);
  for (long r = 0; r < n; ++r) {
    for (double c : cta_cost) {
      const double start = free_at.top();
      free_at.pop();
      free_at.push(start + c);
      makespan = std::max(makespan, start + c);
    }
  }
  return makespan;
}

double fused_hbm_bytes(const AttentionShape& s, AttentionPass pass) {
  // Q and K per head are head_dim wide, V and O value_head_dim (equal but for MLA).
  const double q = s.batch * s.heads * s.seq_q * s.head_dim * kBytesPer16Bit;                // Q (or dQ)
  const double o = s.batch * s.heads * s.seq_q * s.value_head_dim() * kBytesPer16Bit;        // O (or dO)
  const double k = s.batch * s.kv_heads * s.seq_kv * s.head_dim * kBytesPer16Bit;            // K (or dK)
  const double v = s.batch * s.kv_heads * s.seq_kv * s.value_head_dim() * kBytesPer16Bit;    // V (or dV)
  // Forward: read Q, K, V, write O. Backward: read Q, K, V, O, dO, write dQ, dK, dV.
  return pass == AttentionPass::forward ? q + k + v + o : 2 * (q + k + v + o);
}

void check_shape(const AttentionShape& s, const AttentionDevice& d) {
  if (!(s.batch > 0 && s.seq_q > 0 && s.seq_kv > 0 && s.heads > 0 && s.head_dim > 0 && s.kv_heads > 0 &&
        s.heads % s.kv_heads == 0 && s.window >= 0))
    throw std::invalid_argument("attention shape: batch, seq_q, seq_kv, heads, kv_heads, head_dim must be "
                                "positive, heads a multiple of kv_heads, window >= 0");
  if (!(d.sm_count > 0 && d.peak_flops > 0 && d.hbm_bytes_per_second > 0 && d.matmul_efficiency > 0))
    throw std::invalid_argument("attention device: sm_count, peak_flops, hbm_bytes_per_second and "
                                "matmul_efficiency must be positive");
}

// Eager attention as PyTorch runs it (the FlashAttention benchmark's attention_pytorch, the
// SDPA math backend): per (batch, head) S = QK^T (bmm), [causal: mask add], P = softmax(S),
// O = PV (bmm); backward dP = dO V^T, dV = P^T dO, dS = softmax_backward(dP, P), dQ = dS K,
// dK = dS^T Q. Each op costs the slower of its FLOPs at matmul_efficiency and its
// score-matrix bytes at HBM bandwidth.
AttentionEstimate estimate_eager(const AttentionShape& s, AttentionPass pass, const AttentionDevice& d) {
  const double scores = s.batch * s.heads * s.seq_q * s.seq_kv;  // every pair: eager masks, never skips
  const double qk_flops = 2 * scores * s.head_dim;          // S = QK^T, dQ = dS K, dK = dS^T Q
  const double av_flops = 2 * scores * s.value_head_dim();  // O = PV, dP = dO V^T, dV = P^T dO
  const double score_bytes = scores * kBytesPer16Bit;
  auto op = [&](double flops, double bytes) {
    return std::max(flops / (d.peak_flops * d.matmul_efficiency), bytes / d.hbm_bytes_per_second);
  };
  double seconds = 0;
  if (pass == AttentionPass::forward) {
    seconds += op(qk_flops, score_bytes);                    // S = QK^T writes S
    if (s.causal || s.window > 0) seconds += op(0, 2 * score_bytes);  // mask: read S, write S
    seconds += op(0, 2 * score_bytes);                       // softmax: read S, write P
    seconds += op(av_flops, score_bytes);                    // O = PV reads P
  } else {
    seconds += op(av_flops, score_bytes);       // dP = dO V^T writes dP
    seconds += op(av_flops, score_bytes);       // dV = P^T dO reads P
    seconds += op(0, 3 * score_bytes);          // softmax backward: read dP, P, write dS
    seconds += op(qk_flops, score_bytes);       // dQ = dS K reads dS
    seconds += op(qk_flops, score_bytes);       // dK = dS^T Q reads dS
  }
  return {seconds, scores * pass_flops_per_pair(pass, s.mean_head_dim())};
}

// ---- Shipped constants --------------------------------------------------------------------
// Fitted by tests/planner/attention_model_test.cpp (ShippedConstantsAreTheFit) to the rows of
// tests/data/kernels/attention_published.csv named in fitted_on: non-causal, head dim 128, seq
// 512..16k. Every other row of the same (kernel, GPU, pass) is held out.
using Key = std::tuple<AttentionKernel, std::string, AttentionPass>;

AttentionKernelConstants pair(double loop_efficiency, double overhead_blocks, const std::string& fitted_on) {
  AttentionKernelConstants c;
  c.loop_efficiency = loop_efficiency;
  c.overhead_blocks = overhead_blocks;
  c.fitted_on = fitted_on;
  return c;
}

// PyTorch's memory-efficient kernels (xformers' CUTLASS FMHA) are built for sm80 in 16-bit and
// have no sm90 variant (pytorch/pytorch aten/src/ATen/native/transformers/cuda/mem_eff_attention/
// kernels/cutlassF.h and cutlassB.h: "bf16 / sm80"): on Hopper they run Ampere's mma.sync, without
// wgmma or TMA, as FlashAttention-2 does. A fraction of Hopper's wgmma peak fitted on the A100
// would price them as if they used it (this workplace's H100 and H200 ran them 35-60% slower than
// that; carried as below, 6-33% slower, docs/accuracy.md). So their Hopper pair is their A100
// pair carried over by the ratio FlashAttention-2's own published A100 and H100 pairs show for
// the same pass: what moving an sm80 kernel onto Hopper does, from the one sm80 kernel published
// on both.
// FlashAttention's 2022 Triton kernel (flash1_triton) is carried the same way: llm-foundry, whose
// runs are its published use on H100, builds it with triton-pre-mlir (llmfoundry/models/layers/
// flash_attn_triton.py@b2a43a1, a copy of flash-attention's flash_attn_triton.py@eff9fe6 "tested
// with triton==2.0.0.dev20221202"): a Triton from before its Hopper backend, which emits sm80's
// mma; nothing publishes the kernel's own speed on Hopper.
// Blackwell takes them the same way (its FlashAttention-2 is the sm80 kernel too), and so does
// CDNA3, where FlashAttention-2 (CK) is the one kernel with published rows.
AttentionKernelConstants carried_like_flash2(const std::string& kernel, const std::string& arch,
                                             const AttentionKernelConstants& on_ampere,
                                             const AttentionKernelConstants& flash2_ampere,
                                             const AttentionKernelConstants& flash2_on_arch) {
  AttentionKernelConstants c = on_ampere;
  c.loop_efficiency *= flash2_on_arch.loop_efficiency / flash2_ampere.loop_efficiency;
  c.overhead_blocks *= flash2_on_arch.overhead_blocks / flash2_ampere.overhead_blocks;
  c.fitted_on = "borrowed from " + kernel + " on ampere (" + on_ampere.fitted_on + "), carried to " + arch +
                " by flash2's ampere-to-" + arch + " ratio (" + flash2_on_arch.fitted_on + ")";
  return c;
}

const std::map<Key, AttentionKernelConstants>& shipped_constants() {
  using K = AttentionKernel;
  const auto F = AttentionPass::forward;
  const auto B = AttentionPass::backward;
  static const std::string a100_fa2 =
      "A100 fwd+bwd, non-causal, head dim 128 (flash-attention assets/flash2_a100_fwd_bwd_benchmark.png (b)); "
      "forward and backward share the pair: no text numbers for the passes alone";
  static const std::string a100_xf =
      "A100 fwd+bwd, non-causal, head dim 128, xformers bars (flash-attention assets/flash2_a100_fwd_bwd_benchmark.png "
      "(b)); forward and backward share the pair";
  static const std::string a100_fa_triton =
      "A100 fwd+bwd, non-causal, head dim 128, FlashAttention Triton bars (flash-attention "
      "assets/flash2_a100_fwd_bwd_benchmark.png (b)); forward and backward share the pair";
  static const std::string h100_fwd = "H100 forward, non-causal, head dim 128 (FA3 paper arXiv:2407.08608 Fig. 5c)";
  static const std::string h100_bwd =
      "H100 backward, head dim 128 (FA3 paper arXiv:2407.08608 backward figure, transcribed bar labels)";
  // FlashAttention-2 on B200 runs its sm80 kernel (mma.sync; no tcgen05): about its H100 rate, a
  // fifth of Blackwell's peak. Carrying Hopper's fraction of the peak priced it at 830-860 TFLOP/s
  // against 330-380 published (the session-38 GPU audit).
  static const std::string b200_fwd =
      "B200 forward, non-causal, head dim 128 (meta-pytorch/tritonbench PR #171, flash_v2, batch 8, 16 heads)";
  static const std::string b200_bwd =
      "B200 backward, non-causal, head dim 64, the only B200 backward published (Dao-AILab/flash-attention "
      "issue #1589, flash_attn 2.7.4.post1)";
  static const std::string mi300x_fwd =
      "MI300X forward, non-causal, head dim 128, seq 16k at batch 1-8 (ROCm/flash-attention issue #142, CK); "
      "the fixed cost held at flash2's hopper value: rows of one length cannot tell it from the loop";
  static const std::string mi300x_bwd =
      "MI300X backward, non-causal, head dim 128, seq 16k at batch 1-8 (ROCm/flash-attention issue #142, CK); "
      "the fixed cost held at flash2's hopper value";
  static const std::map<Key, AttentionKernelConstants> m = {
      {{K::flash2, "ampere", F}, pair(0.725, 2.25, a100_fa2)},
      {{K::flash2, "ampere", B}, pair(0.725, 2.25, a100_fa2)},
      {{K::mem_efficient, "ampere", F}, pair(0.330, 2.25, a100_xf)},
      {{K::mem_efficient, "ampere", B}, pair(0.330, 2.25, a100_xf)},
      {{K::flash1_triton, "ampere", F}, pair(0.320, 3.00, a100_fa_triton)},
      {{K::flash1_triton, "ampere", B}, pair(0.320, 3.00, a100_fa_triton)},
      {{K::flash2, "hopper", F}, pair(0.485, 2.00, h100_fwd)},
      {{K::flash2, "hopper", B}, pair(0.365, 6.00, h100_bwd)},
      {{K::flash3, "hopper", F}, pair(1.105, 2.00, h100_fwd)},
      {{K::flash3, "hopper", B}, pair(0.705, 5.50, h100_bwd)},
      {{K::cudnn, "hopper", F}, pair(0.945, 1.25, h100_fwd)},
      {{K::cudnn, "hopper", B}, pair(0.635, 5.25, h100_bwd)},
      {{K::triton, "hopper", F}, pair(0.525, 2.00, h100_fwd)},
      {{K::flash2, "blackwell", F}, pair(0.180, 10.00, b200_fwd)},
      {{K::flash2, "blackwell", B}, pair(0.155, 8.00, b200_bwd)},
      {{K::flash2, "cdna3", F}, pair(0.305, 2.00, mi300x_fwd)},
      {{K::flash2, "cdna3", B}, pair(0.165, 6.00, mi300x_bwd)},
  };
  static const std::map<Key, AttentionKernelConstants> with_carried = [] {
    std::map<Key, AttentionKernelConstants> all = m;
    for (const char* arch : {"hopper", "blackwell", "cdna3"})
      for (AttentionPass pass : {F, B})
        for (K sm80_kernel : {K::mem_efficient, K::flash1_triton})
          all[{sm80_kernel, arch, pass}] =
              carried_like_flash2(to_string(sm80_kernel), arch, m.at({sm80_kernel, "ampere", pass}),
                                  m.at({K::flash2, "ampere", pass}), m.at({K::flash2, arch, pass}));
    return all;
  }();
  return with_carried;
}

}  // namespace

std::optional<AttentionKernel> parse_attention_kernel(const std::string& name) {
  static const std::map<std::string, AttentionKernel> names = {
      {"flash2", AttentionKernel::flash2}, {"flash3", AttentionKernel::flash3},
      {"cudnn", AttentionKernel::cudnn},   {"mem_efficient", AttentionKernel::mem_efficient},
      {"triton", AttentionKernel::triton}, {"flash1_triton", AttentionKernel::flash1_triton},
      {"eager", AttentionKernel::eager}};
  auto it = names.find(name);
  if (it == names.end()) return std::nullopt;
  return it->second;
}

std::string to_string(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::flash2: return "flash2";
    case AttentionKernel::flash3: return "flash3";
    case AttentionKernel::cudnn: return "cudnn";
    case AttentionKernel::mem_efficient: return "mem_efficient";
    case AttentionKernel::triton: return "triton";
    case AttentionKernel::flash1_triton: return "flash1_triton";
    case AttentionKernel::eager: return "eager";
  }
  return "?";
}

double exp_per_tensor_flop(const std::string& arch) {
  // Ampere: 16 exp2 results per clock per SM (CUDA C++ Programming Guide, "Throughput of Native
  // Arithmetic Instructions", compute capability 8.0) against 2048 dense FP16 tensor FLOPs per
  // clock per SM (A100 whitepaper: 312 TFLOPS = 108 SMs x 1.41 GHz x 2048).
  // Hopper: "the H100 SXM5 GPU has 989 TFLOPS of FP16 matmul but only 3.9 TFLOPS of special
  // functions" (FA3 paper arXiv:2407.08608 Sec. 3.2, on exponentials).
  static const std::map<std::string, double> sourced = {{"ampere", 16.0 / 2048.0}, {"hopper", 3.9 / 989.0}};
  const std::string a = arch_with(arch, [&](const std::string& x) { return sourced.count(x) > 0; });
  return sourced.at(a.empty() ? "hopper" : a);
}

double alu_ops_per_tensor_flop(const std::string& arch) {
  // 32-bit integer compare and select: 64 results per clock per SM on compute capability 8.0
  // and 9.0 (CUDA C++ Programming Guide, "Throughput of Native Arithmetic Instructions"),
  // against 2048 (A100: 312 TFLOPS = 108 SMs x 1.41 GHz x 2048) and 4096 (H100 SXM: 989.4
  // TFLOPS = 132 SMs x 1.83 GHz x 4096) dense 16-bit tensor FLOPs per clock per SM.
  static const std::map<std::string, double> sourced = {{"ampere", 64.0 / 2048.0}, {"hopper", 64.0 / 4096.0}};
  const std::string a = arch_with(arch, [&](const std::string& x) { return sourced.count(x) > 0; });
  return sourced.at(a.empty() ? "hopper" : a);
}

AttentionTile attention_tile(AttentionKernel kernel, const std::string& arch, AttentionPass pass, int head_dim,
                             bool causal) {
  // FlashAttention-3's forward on Hopper (hopper/tile_size.h@0251105a, tile_size_fwd_sm90,
  // 16-bit): head dim <= 64: 192 x (causal 128, else 192); <= 128: 128 x (causal 128, else
  // 176); <= 192: 128 x 128; larger: 128 x 80.
  if (kernel == AttentionKernel::flash3 && arch == "hopper" && pass == AttentionPass::forward) {
    if (head_dim <= 64) return {192, causal ? 128 : 192};
    if (head_dim <= 128) return {128, causal ? 128 : 176};
    if (head_dim <= 192) return {128, 128};
    return {128, 80};
  }
  // FlashAttention-2's forward on sm80 and sm90 (csrc/flash_attn/src/flash_fwd_launch_template.h
  // @0251105a, run_mha_fwd_hdim*, no dropout): Flash_fwd_kernel_traits<64, 128, 128>, and
  // <d, 128, 64> for head dims 96..256 (the sm86/sm89 variants aside).
  // On Blackwell it runs the same kernel: FlashAttention-2 has no tcgen05 path, its CuTe source
  // issues sm80's mma.sync on every arch.
  if (kernel == AttentionKernel::flash2 && pass == AttentionPass::forward &&
      (arch == "ampere" || arch == "hopper" || arch == "blackwell"))
    return {128, head_dim <= 64 ? 128 : 64};
  return {kAttentionBlockRows, kAttentionBlockCols};
}

bool first_block_always_masked(AttentionKernel kernel, const std::string& arch, AttentionPass pass) {
  // FlashAttention-3's forward applies the seqlen_k mask to its first key block whatever the
  // length (hopper/mainloop_fwd_sm90_tma_gmma_ws.hpp@0251105a, first_iter_mask_fn:
  // mask.apply<true /*Seqlenk_mask*/, ...>); FlashAttention-2 masks only where a block is cut.
  return kernel == AttentionKernel::flash3 && arch == "hopper" && pass == AttentionPass::forward;
}

AttentionKernelConstants attention_constants(AttentionKernel kernel, const std::string& arch, AttentionPass pass,
                                             int head_dim, bool causal) {
  if (kernel == AttentionKernel::eager) throw std::invalid_argument("eager attention has no fused-kernel constants");
  const auto& m = shipped_constants();
  auto has = [&](AttentionKernel k) {
    return [&m, k, pass](const std::string& a) { return m.count({k, a, pass}) > 0; };
  };
  std::string a = arch_with(arch, has(kernel));
  AttentionKernel k = kernel;
  std::string borrowed;
  if (a.empty()) {
    // No published rows for this kernel and pass on any near arch (Triton's backward, cuDNN
    // and FlashAttention-3 off Hopper): FlashAttention-2's constants, the kernel every other
    // one is benchmarked against.
    k = AttentionKernel::flash2;
    a = arch_with(arch, has(k));
    borrowed = to_string(kernel) + " has no published rows here; ";
  }
  AttentionKernelConstants c = m.at({k, a, pass});
  c.tile = attention_tile(kernel, arch, pass, head_dim, causal);
  c.first_block_masked = first_block_always_masked(kernel, arch, pass);
  if (a != arch || k != kernel)
    c.fitted_on = borrowed + "borrowed from " + to_string(k) + " on " + a + ": " + c.fitted_on;
  return c;
}

AttentionEstimate estimate_fused_attention(const AttentionShape& shape, AttentionPass pass,
                                           const AttentionDevice& device, const AttentionKernelConstants& c) {
  check_shape(shape, device);
  const QueryBlocks blocks = query_blocks(shape, c.tile, c.first_block_masked);
  // The tile and constants are those of the q/k head dim (the kernel instantiated for it: FlashAttention-3's
  // hdim 192 with a 128-wide V for DeepSeek); a pair's matmul FLOPs are QK^T's and AV's.
  const double pair_flops = pass_flops_per_pair(pass, shape.mean_head_dim());
  const double peak_per_sm = device.peak_flops / device.sm_count;
  const double tile_pairs = double(c.tile.rows) * c.tile.cols;
  const double block_matmul_at_peak = tile_pairs * pair_flops / peak_per_sm;
  const double block_exp = tile_pairs * kExpPerScore / (peak_per_sm * exp_per_tensor_flop(device.arch));
  const double block_seconds = block_matmul_at_peak / c.loop_efficiency + block_exp;
  // The fixed cost scales with the head dim as loading Q and storing O do; counted in nominal
  // 128 x 128 tiles so that constants of kernels with different tiles compare.
  const double overhead_seconds =
      c.overhead_blocks * double(kAttentionBlockRows) * kAttentionBlockCols * pair_flops / peak_per_sm;
  // A masked block is computed whole (counted in kv_blocks) and then pays the mask's compare and
  // select on every score at the SM's integer rate: a spec, not a fit.
  const double mask_seconds = tile_pairs * kMaskOpsPerScore / (peak_per_sm * alu_ops_per_tensor_flop(device.arch));

  std::vector<double> cta_seconds;
  cta_seconds.reserve(blocks.kv_blocks.size());
  for (std::size_t i = 0; i < blocks.kv_blocks.size(); ++i) {
    const double n = blocks.kv_blocks[i];
    cta_seconds.push_back(n > 0 ? overhead_seconds + n * block_seconds + blocks.masked_blocks[i] * mask_seconds : 0.0);
  }
  const double heads_total = std::ceil(shape.batch) * shape.heads;
  const double compute = schedule_makespan(cta_seconds, heads_total, device.sm_count);
  const double memory = fused_hbm_bytes(shape, pass) / device.hbm_bytes_per_second;
  return {std::max(compute, memory), shape.batch * shape.heads * blocks.pairs * pair_flops};
}

AttentionEstimate estimate_attention(const AttentionShape& shape, AttentionPass pass, AttentionKernel kernel,
                                     const AttentionDevice& device) {
  check_shape(shape, device);
  if (kernel == AttentionKernel::eager) return estimate_eager(shape, pass, device);
  return estimate_fused_attention(shape, pass, device,
                                  attention_constants(kernel, device.arch, pass, shape.head_dim, shape.causal));
}

AttentionKernel default_attention_kernel(const AttentionDevice& device, bool cudnn_sdpa_preferred, bool equal_head_dims) {
  const bool cudnn_first_arch = device.arch == "hopper" || device.arch == "blackwell";
  if (cudnn_sdpa_preferred && cudnn_first_arch) return AttentionKernel::cudnn;
  if (equal_head_dims && attention_kernel_available(AttentionKernel::flash2, device)) return AttentionKernel::flash2;
  return AttentionKernel::mem_efficient;
}

std::optional<AttentionKernel> resolve_attention_kernel(const std::string& attention, const AttentionDevice& device,
                                                        bool equal_head_dims) {
  if (attention == "auto") return default_attention_kernel(device, false, equal_head_dims);
  if (attention == "eager") return std::nullopt;
  return parse_attention_kernel(attention);
}

bool kernel_applies_window(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::flash2:
    case AttentionKernel::flash3:
    case AttentionKernel::triton: return true;
    case AttentionKernel::cudnn:
    case AttentionKernel::mem_efficient:
    case AttentionKernel::flash1_triton:
    case AttentionKernel::eager: return false;
  }
  return false;
}

bool attention_kernel_available(AttentionKernel kernel, const AttentionDevice& device) {
  const std::string& a = device.arch;
  const bool nvidia_sm80_plus = a == "ampere" || a == "ada" || a == "hopper" || a == "blackwell";
  switch (kernel) {
    case AttentionKernel::flash3: return a == "hopper";  // FA3 README: "Requirements: H100 / H800 GPU"
    case AttentionKernel::cudnn: return nvidia_sm80_plus;
    case AttentionKernel::flash2: return nvidia_sm80_plus || a == "cdna3";  // ROCm: CK / AOTriton flash
    case AttentionKernel::mem_efficient:
    case AttentionKernel::triton:
    case AttentionKernel::flash1_triton:
    case AttentionKernel::eager: return true;
  }
  return false;
}

}  // namespace fsdpsim::planner
