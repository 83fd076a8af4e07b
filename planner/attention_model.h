// Time of one fused attention call (FlashAttention-2/3, cuDNN, memory-efficient, Triton,
// FlashAttention's 2022 Triton kernel) or of
// eager attention, from the kernel's structure rather than one efficiency per GPU.
//
// A fused kernel launches one CTA per (batch, head, query block of kAttentionBlockRows rows);
// each CTA walks the key/value blocks its rows can see (all of them, up to the diagonal when
// causal, or the sliding window). A CTA costs a fixed overhead (load Q, write O, the final
// softmax rescale) plus, per key/value block, the tensor-core matmuls at a fraction of the
// SM's peak and the exponentials at the SM's special-function rate; a block the mask cuts (the
// causal diagonal, a window's edge, the end of the keys) is computed whole and then pays the
// mask's compare and select per score at the SM's integer rate. CTAs are scheduled
// greedily over the SMs in launch order, so few CTAs (short sequences, few heads) waste the
// last wave and causal masks give CTAs unequal lengths. The HBM traffic (Q, K, V, O and their
// gradients; GQA shares K/V between query heads) bounds the time from below.
//
// Eager attention (PyTorch ops: bmm, softmax, bmm) is priced from the device: both matmuls
// at the device's matmul efficiency and the batch*heads*seq_q*seq_kv score matrix written
// and read by each elementwise op at HBM bandwidth, each op as the slower of the two.
//
// The per-(kernel, arch, pass) constants are fitted to kernel-level published benchmarks
// (tests/data/kernels/attention_published.csv); docs/cost-model.md "Attention kernels" lists
// which rows each constant saw and how far the held-out rows are.
#pragma once

#include <optional>
#include <string>

#include "planner/kernel_shapes.h"

namespace fsdpsim::planner {

// triton: Triton's FlashAttention-2-style kernel (the FA3 paper's "Triton" on H100).
// flash1_triton: the flash-attention repository's 2022 Triton kernel, FlashAttention-1's
// algorithm (flash_attn/flash_attn_triton.py; llm-foundry's `attn_impl: triton`), timed in the
// FlashAttention-2 paper's A100 figure as "FlashAttention Triton".
enum class AttentionKernel { flash2, flash3, cudnn, mem_efficient, triton, flash1_triton, eager };

// "flash2", "flash3", "cudnn", "mem_efficient", "triton", "flash1_triton", "eager"; nullopt for
// anything else.
std::optional<AttentionKernel> parse_attention_kernel(const std::string& name);
std::string to_string(AttentionKernel kernel);

struct AttentionDevice {
  std::string arch;  // "ampere", "hopper", "blackwell", "ada", "cdna3" (from the GPU catalog)
  int sm_count = 0;
  double peak_flops = 0;  // dense 16-bit
  double hbm_bytes_per_second = 0;
  double matmul_efficiency = 0.8;  // for eager attention's bmm
};

struct AttentionEstimate {
  double seconds = 0;
  // The work the kernel does, FlashAttention's convention: 4 * d FLOPs per (query, key) pair
  // the mask lets through (causal: about half the pairs), backward 2.5x forward.
  double flops = 0;
};

AttentionEstimate estimate_attention(const AttentionShape& shape, AttentionPass pass, AttentionKernel kernel,
                                     const AttentionDevice& device);

// What PyTorch's scaled_dot_product_attention picks for 16-bit inputs on this GPU
// (aten/src/ATen/native/transformers/cuda/sdp_utils.cpp, priority_order and
// check_prefer_cudnn_attention): cuDNN first on Hopper and datacenter Blackwell only when
// the runtime cuDNN is newer than 9.15.0 (`cudnn_sdpa_preferred`: torch >= 2.10 with such a
// cuDNN, e.g. the torch 2.11 wheels), else FlashAttention-2 on Ampere and newer (and CK/AOTriton
// flash on ROCm), else memory-efficient. See docs/cost-model.md "Attention kernels".
// `equal_head_dims` false: some attention's v head dim differs from its q/k one (DeepSeek's
// MLA, 192 and 128); SDPA's flash backend refuses that (sdp_utils.cpp check_head_dim_size_flash:
// q, k and v must share the last dim), so SDPA runs the memory-efficient kernel.
AttentionKernel default_attention_kernel(const AttentionDevice& device, bool cudnn_sdpa_preferred = false,
                                         bool equal_head_dims = true);

// The kernel training.attention names ("auto": default_attention_kernel for the GPU and the
// model's head dims); nullopt for "eager" and for names that are no kernel (CostModel refuses
// those). The one resolution the planner (kernel_applies_window) and the cost model share.
std::optional<AttentionKernel> resolve_attention_kernel(const std::string& attention, const AttentionDevice& device,
                                                        bool equal_head_dims);

// [SDPA and sliding windows] Whether the kernel applies a sliding window itself: FlashAttention-2
// and -3 take window_size (flash_attn_func), Triton and FlexAttention kernels a block mask.
// PyTorch's scaled_dot_product_attention has no window argument, so a windowed layer reaches its
// cuDNN and memory-efficient backends as a dense mask over the whole square (transformers'
// masking_utils builds it once the keys reach the window; SDPA turns the boolean mask into a
// 16-bit bias, attention.cpp convert_boolean_attn_mask, an input its backward keeps): the kernel
// computes every (query, key) pair, no causal skip. The 2022 Triton kernel (flash1_triton)
// takes a bias, no window, alike.
bool kernel_applies_window(AttentionKernel kernel);

// Whether the kernel runs on this GPU at all: FlashAttention-3 is Hopper only, cuDNN and
// FlashAttention-2 need an NVIDIA GPU of Ampere or newer (FlashAttention-2 also has a ROCm port).
bool attention_kernel_available(AttentionKernel kernel, const AttentionDevice& device);

// ---- The model's parts, exposed for the fit and its tests ---------------------------------

// Rows per query block and columns per key/value block of the modelled kernels: FlashAttention-2's
// forward uses 128-row query blocks for head dims 64 and 128 on sm80
// (csrc/flash_attn/src/flash_fwd_launch_template.h@0251105a, Flash_fwd_kernel_traits<64, 128, 128>,
// <128, 128, 64>). The nominal tile for kernels whose tiles are not modelled (attention_tile),
// and the unit of AttentionKernelConstants::overhead_blocks.
inline constexpr int kAttentionBlockRows = 128;
inline constexpr int kAttentionBlockCols = 128;

// The query rows and key/value columns of one CTA's tile.
struct AttentionTile {
  int rows = kAttentionBlockRows;
  int cols = kAttentionBlockCols;
};

// The tile a kernel uses where its source says (FlashAttention-3's forward on Hopper,
// FlashAttention-2's forward on Ampere and Hopper), else the nominal 128 x 128.
AttentionTile attention_tile(AttentionKernel kernel, const std::string& arch, AttentionPass pass, int head_dim,
                             bool causal);

// Whether the kernel masks every CTA's first key block (its seqlen_k mask), cut or not.
bool first_block_always_masked(AttentionKernel kernel, const std::string& arch, AttentionPass pass);

// Integer ALU operations (the mask's compare and select) per tensor-core FLOP the SM can issue,
// for an arch; archs without a sourced figure take the nearest arch's.
double alu_ops_per_tensor_flop(const std::string& arch);

// A fused kernel's two constants for one (kernel, arch, pass), with the tile of one shape.
struct AttentionKernelConstants {
  // Fraction of the SM's tensor peak the main loop's matmuls run at, the exponentials being
  // priced separately; above ~0.9 it means the kernel hides part of the exponentials
  // (FlashAttention-3 overlaps softmax with the matmuls).
  double loop_efficiency = 0;
  // The per-CTA fixed cost, in nominal 128 x 128 blocks' worth of matmul at peak (scales with
  // the head dim, as loading Q and storing O do).
  double overhead_blocks = 0;
  AttentionTile tile;
  // Whether every CTA masks its first key block even when no mask cuts it (FlashAttention-3's
  // forward; first_block_always_masked).
  bool first_block_masked = false;
  std::string fitted_on;  // the published rows the pair was fitted to (or where it was borrowed from)
};

// The shipped constants for (kernel, arch, pass); a kernel or arch without published data
// borrows the nearest arch's (documented in the returned fitted_on). Not for eager.
AttentionKernelConstants attention_constants(AttentionKernel kernel, const std::string& arch, AttentionPass pass,
                                             int head_dim, bool causal);

// The fused-kernel model with explicit constants (what the fit varies).
AttentionEstimate estimate_fused_attention(const AttentionShape& shape, AttentionPass pass,
                                           const AttentionDevice& device, const AttentionKernelConstants& constants);

// Exponentials per tensor-core FLOP the SM can issue (special-function rate / dense 16-bit
// tensor rate) for an arch; archs without a sourced figure take the nearest arch's.
double exp_per_tensor_flop(const std::string& arch);

}  // namespace fsdpsim::planner
