// Per-architecture cost formulas for decoder-only transformers: FLOPs, memory-bound HBM
// traffic and the activations kept for backward, as polynomials in micro-batch b and
// sequence length s (see docs/model-schema.md for the derivations and the sources).
//
// Conventions (the same for every family):
// - FLOPs count matrix multiplications only (2 per multiply-add), as MFU does; elementwise
//   work is priced by the bytes it moves instead.
// - Attention FLOPs: 4*b*s^2*(heads*head_dim) for QK^T and AV, no causal discount
//   (PaLM, Chowdhery et al. 2022, appendix B); 2*b*s^2*heads*(head_dim + v_head_dim) when v's
//   head dim differs from q's and k's (DeepSeek's MLA).
// - Activations are 16-bit (2 bytes per element); dropout masks 1 byte per element;
//   token ids int64.
// - Saved activations follow Korthikanti et al. 2022, "Reducing Activation Recomputation
//   in Large Transformer Models", section 4.1, eq. 1: s*b*h*(34 + 5*a*s/h) bytes per GPT
//   layer; the formulas below list every saved tensor, so SwiGLU, GQA, parallel residuals
//   and flash attention change the terms they touch and nothing else.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "models/model.h"

namespace fsdpsim::models {

// What the cost formulas need to know about one decoder block.
struct DecoderBlockShape {
  std::int64_t hidden_size = 0;      // h
  std::int64_t num_heads = 0;        // a (query heads)
  std::int64_t num_kv_heads = 0;     // key/value heads (GQA when < num_heads)
  std::int64_t head_dim = 0;         // d
  std::int64_t ffn_hidden_size = 0;  // f
  bool gated_mlp = false;            // SwiGLU: gate, up, down projections; else fc1-GELU-fc2
  // The gated MLP's activation, for the ledgers' labels only ("SiLU": SwiGLU; "GELU": Gemma's
  // GeGLU): both are one elementwise kernel of the same size.
  std::string gate_activation = "SiLU";
  bool fused_gate_up = false;        // Phi-3: one gate_up projection (h -> 2f), then chunk(2)
  bool parallel_residual = false;    // GPT-NeoX, Falcon: attention and MLP both read the block input
  // Where the norms sit (sequential blocks):
  //   pre:      x + attn(norm(x)), then + mlp(norm(.))           (Llama, GPT-2, ...)
  //   sandwich: x + norm(attn(norm(x))), then + norm(mlp(norm(.)))  (Gemma-2, Gemma-3)
  //   post:     x + norm(attn(x)), then + norm(mlp(.))            (OLMo-2)
  enum class NormPlacement { pre, sandwich, post };
  NormPlacement norm_placement = NormPlacement::pre;
  // Parallel residual as Falcon runs it (transformers' FalconDecoderLayer): every norm runs
  // before the attention branch, so the MLP's input gradient waits through the attention
  // branch's backward; `one_parallel_norm`: a single norm feeds both branches (Falcon-7B,
  // Falcon2-11B; Falcon-40B has ln_attn and ln_mlp); the branches are summed in place
  // (mlp_output += attention_output). false: GPT-NeoX's layout (a norm per branch, each right
  // before its branch; mlp + attn + x out of place).
  bool falcon_parallel = false;
  bool one_parallel_norm = false;
  // RMSNorm on q and k after their projections (Qwen3, Gemma-3: per head; OLMo-2: over all
  // heads; the same tensors either way). Qwen3 and OLMo-2 normalize each right after its
  // projection (q_proj, q_norm, k_proj, k_norm, v_proj); Gemma-3 after all three projections.
  enum class QkNorm { none, after_each_projection, after_all_projections };
  QkNorm qk_norm = QkNorm::none;
  bool rotary = false;               // rotary embedding applied to q and k
  bool alibi = false;                // ALiBi bias added to the attention scores
  bool attention_dropout = false;    // dropout on the attention probabilities (p > 0)
  bool residual_dropout = false;     // dropout on the attention and MLP outputs (p > 0)
  // Projection layout, for op-level selective checkpointing (which saves aten.mm outputs):
  // an unbiased nn.Linear on a 3-D input dispatches aten.mm; a biased one (and GPT-2's Conv1D,
  // torch.addmm) dispatches aten.addmm. Sizes and FLOPs do not depend on these.
  bool fused_qkv = false;            // one projection computes q, k and v (GPT-2, GPT-NeoX, MPT)
  bool qkv_bias = false;             // the q/k/v projection(s) have biases
  bool out_bias = false;             // the attention output projection has a bias
  bool mlp_bias = false;             // the MLP projections have biases
  // Sliding-window attention: each query attends the `window` keys ending at its own position
  // (0: every earlier key). Recorded in the costs' attention descriptor, which the planner prices
  // (planner/attention_model.h) and counts (models::attention_pair_fraction) by; the polynomials
  // keep the full-square FLOP convention, and eager attention materializes the whole square
  // whatever the window (transformers masks the full score matrix).
  std::int64_t window = 0;
  // A Mixture-of-Experts layer in place of the MLP (Mixtral, Qwen-MoE): a router (a Linear
  // h -> experts, softmax in fp32, top-k), each token's hidden state copied to its top_k
  // experts (a gated MLP of expert_ffn_size each, weights stacked as one grouped parameter),
  // their outputs scaled by the routing weights and summed back. ffn_hidden_size is then the
  // shared experts' width (0: none), a gated MLP every token runs (Qwen2-MoE, DeepSeek).
  struct Moe {
    int experts = 0;               // 0: a dense block
    int top_k = 0;
    std::int64_t expert_ffn_size = 0;
    bool shared_expert_gate = false;  // Qwen2-MoE: sigmoid(Linear h -> 1) scales the shared expert's output
  };
  Moe moe;
  // DeepSeek's multi-head latent attention (transformers' modeling_deepseek_v2.py and
  // modeling_deepseek_v3.py, DeepseekV2Attention / DeepseekV3Attention) in place of q, k, v:
  //   q = q_b_proj(q_a_layernorm(q_a_proj(x)))   (h -> q_lora_rank -> heads x head_dim), or one
  //       q_proj (h -> heads x head_dim) when q_lora_rank is 0 (DeepSeek-V2-Lite);
  //   kv_a_proj_with_mqa(x) -> [c (kv_lora_rank), k_rope (rope_head_dim, one head shared by all)];
  //   kv_b_proj(kv_a_layernorm(c)) -> heads x (nope + v_head_dim), split into k_nope and v;
  //   q = cat(q_nope, rope(q_rope)), k = cat(k_nope, rope(k_rope) expanded to every head);
  //   attention with q/k head dim head_dim = nope + rope and v head dim v_head_dim; o_proj from
  //   heads x v_head_dim. num_kv_heads is num_heads (k and v are per head after kv_b_proj).
  struct Mla {
    std::int64_t q_lora_rank = 0;   // 0: a plain q_proj
    std::int64_t kv_lora_rank = 0;  // 0: not MLA
    std::int64_t rope_head_dim = 0;
    std::int64_t v_head_dim = 0;
  };
  Mla mla;
  // Eager attention's score chain: what the family's transformers `eager_attention_forward`
  // does to the b x a x s x s scores between QK^T and AV, op by op. Read only when the costs are
  // built for eager attention (flash_attention = false); the importer sets it per family and
  // docs/model-schema.md ("Eager attention, op by op") cites each family's source. The default
  // is Llama's shared path, which most families copy.
  struct EagerScoreOp {
    std::string what;
    double read_bytes = 0;     // per score: the scores, plus a mask or bias broadcast over the heads
    double write_bytes = 0;    // per score
    bool out_of_place = true;  // writes a new score tensor (false: in place, like Falcon's `/=`, or a row reduction)
    // Its backward writes a new score-sized gradient (a scale, a masked_fill); false: the
    // gradient passes through unchanged (an add whose other operand needs none, a cat's narrow).
    bool backward_writes_new_gradient = true;
    // Its backward reads its output, which autograd keeps (tanh: dx = dy (1 - y^2)): saved until
    // the backward, and read there.
    bool saves_output = false;
  };
  enum class EagerSoftmax {
    activation_dtype,  // softmax(x): 16-bit probabilities, saved by softmax and read by AV
    fp32_output,       // softmax(x, dtype=torch.float32).to(x.dtype): softmax saves its fp32 output, AV the 16-bit copy
    fp32_input,        // softmax(x.float()).to(x.dtype): the same after an fp32 copy of the scores
  };
  struct EagerScoreChain {
    std::vector<EagerScoreOp> before_softmax = {
        {"scale (attn_weights * scaling)", 2, 2, true, true},
        {"causal mask add (+ attention_mask, broadcast over the heads)", 4, 2, true, false}};
    EagerSoftmax softmax = EagerSoftmax::fp32_output;
  };
  EagerScoreChain eager;
  // How the block's per-token elementwise ops run without torch.compile, in the family's
  // transformers code (eager_hbm_factor counts their bytes op by op):
  struct EagerElementwise {
    // The norms are Python RMSNorms (LlamaRMSNorm and its copies: x.float(), pow(2), mean,
    // x * rsqrt, cast, * weight: 36 bytes per element); false: F.layer_norm, one native kernel.
    bool python_rms_norm = true;
    // The MLP activation is GPT-2's gelu_new (NewGELUActivation: 8 elementwise kernels, 36
    // bytes per element); false: one native kernel (F.silu, F.gelu).
    bool python_gelu = false;
  };
  EagerElementwise eager_elementwise;
  // [Liger block kernels] The block runs Liger-Kernel's Triton kernels in place of the family's
  // eager norm, rotary and gated activation (linkedin/Liger-Kernel@ead96b6,
  // src/liger_kernel/transformers/monkey_patch.py apply_liger_kernel_to_<family> with its
  // defaults rms_norm, rope, swiglu/geglu; training.liger):
  // - LigerRMSNorm (ops/rms_norm.py, LigerRMSNormFunction) saves its 16-bit input and an fp32
  //   rstd per row (the planner reads eager_elementwise.python_rms_norm = false for the rest);
  // - LigerSiLUMulFunction / LigerGELUMulFunction (ops/swiglu.py, ops/geglu.py) save the gate
  //   and up outputs only, recompute the activation in backward and write the two gradients
  //   over them in place: the activation's output is neither saved nor a backward transient;
  // - liger_rotary_pos_emb (ops/rope.py) rotates q and k in place in one kernel, forward and
  //   backward: no pre-rotary copies alive beside the rotated ones.
  // Its fused linear cross-entropy is the output layer's LossKind::chunked (hf_import).
  bool liger = false;

  bool is_moe() const { return moe.experts > 0; }
  bool is_mla() const { return mla.kv_lora_rank > 0; }
  std::int64_t q_dim() const { return num_heads * head_dim; }
  std::int64_t kv_dim() const { return num_kv_heads * head_dim; }
  // v's width and the attention output's (the output projection's input): heads x v_head_dim
  // under MLA, else kv_dim and q_dim.
  std::int64_t v_dim() const { return is_mla() ? num_heads * mla.v_head_dim : kv_dim(); }
  std::int64_t attention_output_dim() const { return is_mla() ? num_heads * mla.v_head_dim : q_dim(); }
  // Weight elements of the block's matrix multiplications (biases and norms excluded), one
  // token's worth: a MoE layer counts its router, shared experts and top_k routed experts.
  std::int64_t matmul_weights() const;
};

// One line of a cost ledger: bytes per token (the b*s term) and bytes per token per
// position (the b*s^2 term, attention score matrices).
struct CostItem {
  std::string what;
  double bytes_per_token = 0;
  double bytes_per_token_per_position = 0;
  double bytes_per_position = 0;  // the s term: tensors shared by the batch (GPT-2's position rows)
  double bytes_fixed = 0;         // the constant term: weight-sized buffers (a fused loss's weight gradient)
  // memory_bound_kernels() only: how many of block_matmuls() the forward launches before this
  // kernel (-1: not placed), which orders the block's kernels (block_launch_order).
  int after_matmuls = -1;
};

// The tensors one block keeps for backward, each with its size; the sum is the block's
// saved_activation_bytes. With flash attention the score matrices are never stored.
std::vector<CostItem> saved_tensors(const DecoderBlockShape& block, bool flash_attention);
// The block's per-token memory-bound bytes when it runs eagerly (no torch.compile), op by op
// (DecoderBlockShape::EagerElementwise; the derivation is calibration.json's source of
// eager_memory_bound_factor), over the fused per-token bytes memory_bound_kernels() counts:
// the factor the planner applies to the block's per-token traffic in an eager scenario.
double eager_hbm_factor(const DecoderBlockShape& block, bool flash_attention);
// The kernels a block costed for Liger-Kernel's kernels launches eagerly per memory-bound kernel
// memory_bound_kernels() lists (ModuleCosts::eager_kernels_per_fused_kernel): Liger's are one
// launch each; repeat_kv's two copies stay eager.
double liger_eager_kernels_per_fused_kernel(const DecoderBlockShape& block, bool flash_attention);
// The block's memory-bound kernels (norms, residual adds, rotary, activation function,
// dropout, and the softmax when attention is not fused), each with the bytes it reads and
// writes once; the sum is the block's forward_hbm_bytes. Each is placed among the block's
// matmuls (CostItem::after_matmuls).
std::vector<CostItem> memory_bound_kernels(const DecoderBlockShape& block, bool flash_attention);
// The order the block's forward launches its kernels in, as ModuleCosts::launch_order spells it
// ('m' the next of memory_bound_kernels(), 'g' the next of block_matmuls(), 'a' attention):
// e.g. a Llama block "mgggmagmmggmgm" (norm; q, k, v; rotary; attention; o; add; norm; gate,
// up; SiLU-and-multiply; down; add). Empty for a MoE block (its routed kernels are not placed).
std::string block_launch_order(const DecoderBlockShape& block, bool flash_attention);

// One matrix multiplication of a block, in forward execution order.
struct BlockMatmul {
  std::string name;                 // "q projection", "qkv projection", "down projection", ...
  double multiply_adds_per_token = 0;  // in_features * out_features
  double output_elements_per_token = 0;  // out_features
  bool aten_mm = false;             // dispatches aten.mm (unbiased Linear); false: aten.addmm
};
// The block's projections in the order its forward runs them: q, k, v (or one fused qkv),
// the attention output projection, then gate and up (SwiGLU: down(silu(gate(x)) * up(x))
// evaluates gate first) or fc1, then the down projection / fc2. Attention's QK^T and AV are
// not listed (they are flash attention, or bmm in eager attention).
std::vector<BlockMatmul> block_matmuls(const DecoderBlockShape& block);

// Op-level selective activation checkpointing as torchtitan applies it to every transformer
// block (activation_checkpoint.mode = "selective", selective_ac_option = "op"), read in
// pytorch/torchtitan torchtitan/models/llama/parallelize_llama.py at commit 0596be3a (the
// layout of late 2024 / early 2025; the Dec 2024 benchmarks ran torchtitan 9dec370, not read)
// and torchtitan/parallelisms/parallelize_llama.py at 004b3148 (mid 2024: the same policy
// without aten.max). The block runs under a non-reentrant checkpoint with
// a selective-checkpoint policy: the outputs of ops in _save_list {aten.mm,
// aten._scaled_dot_product_flash_attention, aten._scaled_dot_product_efficient_attention,
// _c10d_functional.reduce_scatter_tensor, aten.max} are kept (MUST_SAVE), every other op is
// recomputed in backward (PREFER_RECOMPUTE), and "every second mm" is recomputed: the policy
// counts aten.mm calls per block forward and saves the 1st, 3rd, 5th, ... Applied to the
// formulas' conventions (16-bit activations, no tensor parallelism, no float8):
// - kept: the checkpoint's input (the block input x), the outputs of the odd-numbered aten.mm
//   projections, and the flash/efficient SDPA output (its fp32 log-sum-exp, 4*heads bytes
//   per token, is neglected as in saved_tensors()). reduce_scatter_tensor appears only under
//   tensor/sequence parallelism and aten.max only in float8 training: none here. Biased
//   projections (aten.addmm) and eager attention's bmm/softmax are not in the list.
// - everything else in saved_tensors() (norm outputs, k or v when their projection is an
//   even-numbered mm, rotary outputs, SiLU/GELU outputs, products, residual sums, dropout
//   masks) is regenerated in backward from those.
// The sum of the items is the block's sac_saved_activation_bytes.
std::vector<CostItem> sac_saved_tensors(const DecoderBlockShape& block, bool flash_attention);
// The saved tensors of sac_saved_tensors() that backward never reads: the last projection's
// output when the policy saves it (it feeds only the residual add, or a dropout whose backward
// reads only its mask). Eager SAC (torch.utils.checkpoint's policy cache) keeps every MUST_SAVE
// output; under torch.compile the policy becomes must-save tags in AOTAutograd's partitioner
// (torch/_functorch/partitioners.py), which saves only tensors the backward graph uses. The sum
// is the block's sac_unread_bytes.
std::vector<CostItem> sac_unread_saved_tensors(const DecoderBlockShape& block, bool flash_attention);

// Forward work op-level SAC runs again in backward, in FLOPs.
struct FlopItem {
  std::string what;
  double flops_per_token = 0;               // the b*s term
  double flops_per_token_per_position = 0;  // the b*s^2 term (attention)
};
// Every projection whose output is not kept, except the block's last projection when no
// residual dropout follows it: recomputation replays the block's forward only up to the last
// tensor backward needs (torch.utils.checkpoint's early stop), and the last projection's
// output feeds only the residual add, which saves nothing. Eager attention (QK^T and AV are
// bmm, not in the save list) is recomputed too; flash attention's output is kept. The sum is
// the block's sac_recompute_flops (2 FLOPs per multiply-add, like forward_flops).
std::vector<FlopItem> sac_recomputed_matmuls(const DecoderBlockShape& block, bool flash_attention);

// ---- Transient memory ---------------------------------------------------------------------
//
// Tensors that live only while a module's forward or backward runs: neither saved for backward
// (saved_tensors() and the edge modules' saved_activation_bytes) nor parameter gradients. A
// ledger lists the moments of the module's forward and backward, each with every such tensor
// alive at that moment; the transient cost is the largest moment.
//
// Assumptions (docs/model-schema.md, "Transient memory", derives every moment):
// - Eager PyTorch, no torch.compile. Backward runs in autograd's order: the engine's ready
//   queue pops the node with the highest sequence number first (torch/csrc/autograd/engine.h,
//   CompareNodeTaskTime), so a block's backward is its forward reversed, and the MLP's up
//   projection (created after SiLU) is differentiated before SiLU. A node's input gradients
//   live until the node returns, so they coexist with its outputs.
// - Gradients flowing into a tensor used twice are summed in place into the buffered one when
//   autograd holds its last reference (torch/csrc/autograd/input_buffer.cpp, accumulate() with
//   grad mode off): the residual stream's gradient is one buffer from the block's output
//   gradient to its input gradient. GPT-NeoX's parallel residual is the exception for one
//   node (the buffered gradient is still referenced by the attention branch: out of place).
// - Python references keep tensors alive as Hugging Face's modeling code holds them (q and k
//   before rotary until both rotated tensors exist; GPT-NeoX's attention output until the
//   final sum).
// - Kernel granularity as in saved_tensors() and memory_bound_kernels(): one kernel per norm,
//   rotary embedding, activation function and (eager attention) scale+mask+softmax; layout
//   copies (transpose().contiguous()) are neglected. Hugging Face's LlamaRMSNorm, rotary and
//   GPT-2's gelu_new are several eager ops with larger intermediates (caveats in the docs).
// - Flash attention is FlashAttention-2 as PyTorch's SDPA flash backend ships it
//   (aten/src/ATen/native/transformers/cuda/flash_attn/flash_api.cpp, mha_bwd): backward
//   allocates dq, dk, dv, an fp32 dq accumulator (batch x seq x heads x head_dim rounded up to
//   a multiple of 32), the fp32 softmax_d (batch x heads x seq) and, with GQA, dk and dv per
//   query head before summing them over the groups.
// - The loss is one of LossKind (models/model.h), read in the code named at each ledger in
//   transformer_costs.cpp: Hugging Face's ForCausalLMLoss (logits.float(), then F.cross_entropy
//   = log_softmax + nll_loss) or torchtitan's cross_entropy_loss (pred.float(), F.cross_entropy),
//   with the caller dropping the bf16 logits before backward (torchtitan's `del pred`; the HF
//   Trainer returns the loss alone); F.cross_entropy on the 16-bit logits; flash-attn's fused
//   cross-entropy (in-place backward) or Liger's; Liger's fused linear cross-entropy; Apple's
//   Cut Cross-Entropy.
// - backward moments include the gradient flowing into the module and the gradient w.r.t. its
//   input when they exist: the planner needs no separate input-gradient temporary.
struct TransientMoment {
  std::string when;               // the op running, e.g. "SiLU(gate)*up backward (MulBackward0)"
  std::vector<CostItem> tensors;  // every transient tensor alive at that moment
};
struct TransientLedger {
  std::vector<TransientMoment> forward;
  std::vector<TransientMoment> backward;
  // The backward moment at which the module's parameter gradients appear (its weight-gradient
  // GEMM); -1: from the first (ModuleCosts::backward_transient_after_grads_bytes).
  int weight_gradient_moment = -1;
};
TransientLedger block_transients(const DecoderBlockShape& block, bool flash_attention);
TransientLedger token_embedding_transients(std::int64_t hidden_size, bool adds_position_embedding,
                                           bool embedding_dropout, bool scales_output = false);
TransientLedger final_norm_transients(std::int64_t hidden_size);
// The output layer and its loss, for each LossKind (docs/memory-model.md, "The loss"). `tokens`
// (b*s) is needed by the chunked kind only: Liger sizes its chunks from the micro-batch's tokens,
// so those costs are exact at that b*s and nowhere else (the planner recomputes them per point).
// `compiled_loss`: the chunked_output kind's per-chunk cross-entropy runs compiled (torchtune's
// recipes with compile: True) or eagerly; the other kinds ignore it.
TransientLedger lm_head_transients(std::int64_t hidden_size, std::int64_t vocab_size,
                                   LossKind kind = LossKind::fp32_upcast, double tokens = 0,
                                   bool logit_softcap = false, bool compiled_loss = true);
// Tokens in the largest chunk of Liger's fused linear cross-entropy
// (linkedin/Liger-Kernel src/liger_kernel/ops/fused_linear_cross_entropy.py@ead96b6:
// inc_factor = cdiv(V, H), chunk_size = next_power_of_2(cdiv(BT, inc_factor))): about BT*H/V,
// so that a chunk's logits are about the size of the layer's input.
double liger_chunk_tokens(double tokens, std::int64_t hidden_size, std::int64_t vocab_size);
// One moment's bytes as a polynomial in b and s.
Polynomial moment_bytes(const TransientMoment& moment);
// The largest moment as a polynomial: the coefficient-wise maximum over the moments (the b*s,
// b*s^2 and s terms separately). Exact when one moment is largest in every term, as with flash
// attention (every moment is per token); otherwise an upper bound (eager attention: the score
// gradients' b*s^2 moment and the MLP's b*s moment are different moments).
Polynomial peak_transient_bytes(const std::vector<TransientMoment>& moments);
// The largest single tensor of any moment, as a polynomial (coefficient-wise maximum over the
// tensors' b*s, b*s^2 and s terms).
Polynomial largest_transient_tensor(const TransientLedger& ledger);
// Index of the largest moment at (micro_batch, seq_len); moments must not be empty.
std::size_t largest_moment(const std::vector<TransientMoment>& moments, double micro_batch, double seq_len);

// The routed part of a MoE block (DecoderBlockShape::Moe), per token, on top of the block's
// attention half and shared experts (derivations in docs/model-schema.md, "Mixture-of-Experts"):
// what it saves for backward, the memory-bound kernels it runs and its transient moments.
std::vector<CostItem> moe_routed_saved_tensors(const DecoderBlockShape& block);
std::vector<CostItem> moe_routed_memory_bound_kernels(const DecoderBlockShape& block);
TransientLedger moe_routed_transients(const DecoderBlockShape& block);

// A decoder block's costs. A MoE block (block.is_moe()) carries a "moe" object and its routed
// projections marked `routed`; op-level SAC is not modelled for it (no sac_* costs: the planner
// refuses selective checkpointing of a MoE model).
ModuleCosts decoder_block_costs(const DecoderBlockShape& block, bool flash_attention);
// The token embedding: a gather, plus (GPT-2) the position-embedding gather and add and the
// embedding dropout when those are computed alongside it.
// `scales_output`: the embedding's output is multiplied by sqrt(hidden_size) (Gemma's
// `hidden_states * normalizer`), one more elementwise kernel and one more transient tensor.
ModuleCosts token_embedding_costs(std::int64_t hidden_size, bool adds_position_embedding,
                                  bool embedding_dropout, bool scales_output = false);
// python_rms_norm: Hugging Face's Python RMSNorm, which saves its fp32 copy of the input, not the
// input ([Python RMSNorm] in transformer_costs.cpp).
ModuleCosts final_norm_costs(std::int64_t hidden_size, bool python_rms_norm = false);
// The output projection and the cross-entropy loss of the given kind; the costs carry their
// LossHead. `tokens` as for lm_head_transients. `logit_softcap`: the logits are soft-capped
// before the loss (Gemma-2's final_logit_softcapping: logits / cap, tanh, * cap, three
// elementwise ops on the 16-bit logits); modelled for the fp32_upcast and bf16 kinds, the ones
// that run Hugging Face's code; the fused kinds throw std::invalid_argument.
ModuleCosts lm_head_costs(std::int64_t hidden_size, std::int64_t vocab_size, LossKind kind = LossKind::fp32_upcast,
                          double tokens = 0, bool logit_softcap = false, bool compiled_loss = true);

// A polynomial as the model JSON writes it: {"b*s": 123, "b*s^2": 4}; integral
// coefficients are written as integers. Zero terms are left out.
nlohmann::json polynomial_to_json(const Polynomial& polynomial);
// A "costs" object for the model JSON; empty polynomials are left out.
nlohmann::json costs_to_json(const ModuleCosts& costs, const std::string& source);

}  // namespace fsdpsim::models
