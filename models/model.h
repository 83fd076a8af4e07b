// What a model is to fsdpsim: a tree of modules owning parameters, with per-module
// forward costs as functions of micro-batch b and sequence length s.
//
// The JSON form (docs/model-schema.md) writes repeated blocks once with "repeat": N;
// load_model() expands them, so a Model in memory is the full tree.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fsdpsim::models {

enum class DType { fp32, bf16, fp16, fp8 };
int dtype_bytes(DType dtype);
std::string dtype_name(DType dtype);
// "fp32"/"float32", "bf16"/"bfloat16", "fp16"/"float16", "fp8"; nullopt otherwise.
std::optional<DType> parse_dtype(const std::string& name);

// How the training loop turns the output layer's hidden states into the loss: which tensors
// the cross-entropy materialises, and whether its kernels move work between forward and
// backward. docs/memory-model.md ("The loss") and models/transformer_costs.h give each
// kind's tensors and the implementation they were read from.
enum class LossKind {
  fp32_upcast,  // logits.float() then F.cross_entropy (Hugging Face ForCausalLMLoss, torchtitan)
  bf16,         // F.cross_entropy on the 16-bit logits (KempnerForge, 2022-era GPT-2 code)
  fused,        // a fused cross-entropy kernel on the 16-bit logits, gradient written over them
                // (flash-attn's CrossEntropyLoss with inplace_backward=True, Liger's LigerCrossEntropyLoss)
  chunked,      // Liger's LigerFusedLinearCrossEntropy: logits per chunk of tokens, gradients in forward
  cut,          // Apple's Cut Cross-Entropy: logits only in on-chip tiles, recomputed in backward
  chunked_output,  // torchtune's CEWithChunkedOutputLoss / LinearCrossEntropyLoss: 16-bit logits in 8
                   // chunks of tokens, each chunk's cross-entropy compiled (the fp32 upcast fused away)
};
std::string loss_kind_name(LossKind kind);
// The names loss_kind_name writes; nullopt for anything else.
std::optional<LossKind> parse_loss_kind(const std::string& name);
std::vector<std::string> loss_kind_names();

// What the output layer's costs were computed from, so that a planner can recompute them
// for another loss kind (the "loss" object of the output layer's costs in the model JSON).
struct LossHead {
  std::int64_t vocab_size = 0;   // V: the logits per token
  std::int64_t hidden_size = 0;  // h: the output layer's input features
  LossKind kind = LossKind::fp32_upcast;  // the kind the module's costs were computed for
  // The logits are soft-capped before the loss (tanh(logits / cap) * cap, Gemma-2's
  // final_logit_softcapping): three more elementwise ops on the logits.
  bool logit_softcap = false;
};

// sum of coeff * b^b_pow * s^s_pow (b = micro-batch, s = sequence length).
struct Polynomial {
  struct Term {
    double coeff = 0;
    int b_pow = 0;
    int s_pow = 0;
  };
  std::vector<Term> terms;

  double at(double micro_batch, double seq_len) const;
  bool empty() const { return terms.empty(); }
  Polynomial& operator+=(const Polynomial& other);
  // Keys as written in JSON: "1", "b", "s", "b*s", "b*s^2", ...
  static std::string monomial_name(int b_pow, int s_pow);
};

// One matrix multiplication of a module's forward, per token: y[tokens, out] = x[tokens, in] W^T.
// The cost model prices it as a GEMM of that shape (and its backward as the two GEMMs of the
// input and weight gradients), so small and skinny projections cost what they cost.
struct Matmul {
  std::string name;
  double in_features = 0;
  double out_features = 0;
  // Op-level selective activation checkpointing (torchtitan's policy) runs it again in
  // backward: its output is not kept (models/transformer_costs.h, sac_recomputed_matmuls).
  bool sac_recomputed = false;
  // One routed expert's projection (a Mixture-of-Experts block, the costs' `moe`): each token
  // runs it top_k times, in one of `moe.experts` experts; the cost model prices the experts'
  // GEMMs as one grouped GEMM with tokens x top_k / experts rows per expert (planner/gemm_model.h).
  bool routed = false;
};

// A Mixture-of-Experts layer inside a module's costs: `experts` routed experts, each token sent
// to `top_k` of them as a copy of its `hidden_size`-wide hidden state (what expert parallelism's
// all-to-all dispatches and combines). The routed experts' weights live in a module marked
// with `experts` (Module::experts); the router and shared experts are ordinary projections.
struct MoeSpec {
  int experts = 0;
  int top_k = 0;
  std::int64_t hidden_size = 0;
};

// The module's attention: which kernel runs it is a training choice (training.attention);
// its shape is the model's.
struct AttentionSpec {
  int heads = 0;      // query heads
  int kv_heads = 0;   // key/value heads (GQA when fewer)
  int head_dim = 0;   // q and k per head: QK^T's inner dimension
  bool causal = true;
  double window = 0;  // sliding window in tokens; 0 = full attention
  // v (and the attention output) per head, AV's output dimension, when it differs from q and
  // k's: DeepSeek's multi-head latent attention (q/k 192 = 128 nope + 64 rope, v 128). 0: head_dim.
  int v_head_dim = 0;
  int value_head_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
  // FLOPs per (query, key) pair per head: QK^T 2 x head_dim plus AV 2 x value_head_dim
  // (4 x head_dim when they are equal).
  double flops_per_pair_per_head() const { return 2.0 * (head_dim + value_head_dim()); }
};

// The share of the seq_len x seq_len (query, key) square that the mask lets through, as the
// area of the band (continuous, so that a causal mask is exactly 1/2 and a window reaching the
// whole sequence changes nothing): causal 1/2; a causal window w < seq_len keeps w*s - w^2/2
// pairs (each query its w latest keys); non-causal, 1, or 2*w*s - w^2 with a window. What
// attention's FLOPs are once the masked-out pairs are skipped, as FlashAttention's local
// (windowed) kernels do: attention_flops polynomials count the whole square (PaLM's convention).
double attention_pair_fraction(const AttentionSpec& attention, double seq_len);
// attention_pair_fraction with the window over the same without it: the share of a full
// (causal or not) attention's FLOPs that the window leaves; 1 without a window.
double attention_window_share(const AttentionSpec& attention, double seq_len);

struct Module;
// Whether some costed attention's v head dim differs from its q/k head dim (DeepSeek's MLA): the
// kernels that need one head size (SDPA's flash backend) cannot run it.
bool has_unequal_attention_head_dims(const Module& root);

// Costs of one forward pass of a module. Backward costs about twice the forward FLOPs
// (grads w.r.t. inputs and weights); the cost model applies that.
struct ModuleCosts {
  Polynomial forward_flops;         // all FLOPs of the forward, attention included
  Polynomial attention_flops;       // the part of forward_flops that is QK^T and AV (no causal discount)
  Polynomial forward_hbm_bytes;     // bytes memory-bound work moves (norms, activations, softmax, ...)
  // The memory-bound kernels behind forward_hbm_bytes, one polynomial of bytes per kernel in
  // launch order (models/transformer_costs.cpp memory_bound_kernels: fused kernels); they add up
  // to forward_hbm_bytes. Empty: not listed (the bytes are priced as one lump).
  std::vector<Polynomial> memory_bound_kernels;
  // [Kernel launch order] The order the module's forward launches its kernels in: 'm' the next
  // of memory_bound_kernels, 'g' the next of matmuls, 'a' the attention call (e.g. a Llama
  // block "mgggmagmmggmgm"); each appears exactly as often as its list has entries. The cost
  // model uses it to let the GPU start a module while the CPU still issues its later kernels
  // (planner/cost_model.h issue_lead_seconds). Empty: not known (the GPU waits for the whole
  // issue, as it would for one kernel).
  std::string launch_order;
  Polynomial saved_activation_bytes;  // bytes kept for backward, with 16-bit activations
  Polynomial input_bytes;           // bytes of the module's input (what full checkpointing keeps), 16-bit
  // Op-level selective activation checkpointing (torchtitan's selective_ac_option = "op"; see
  // models/transformer_costs.h and docs/model-schema.md). Set on decoder blocks, the modules
  // that policy wraps; empty elsewhere (an unwrapped module keeps saved_activation_bytes).
  Polynomial sac_saved_activation_bytes;  // bytes op-level SAC keeps from forward to backward, 16-bit
  Polynomial sac_recompute_flops;         // forward FLOPs op-level SAC runs again in backward
  // The part of sac_saved_activation_bytes that backward never reads (the block's last
  // projection output, which feeds only the residual add): eager SAC caches it anyway,
  // torch.compile's partitioner saves only what backward reads, so compiled blocks drop it.
  Polynomial sac_unread_bytes;
  // Transient memory (see models/transformer_costs.h and docs/model-schema.md): the largest
  // amount of memory alive at once, beyond the module's saved activations (and, in backward,
  // beyond the parameter gradients), while the module's forward or backward runs, in eager
  // PyTorch autograd order. backward_transient_bytes includes the gradient flowing into the
  // module and the gradient w.r.t. its input (the residual stream's gradient in a block).
  Polynomial forward_transient_bytes;
  Polynomial backward_transient_bytes;
  // The largest backward transient from the moment the module's parameter gradients appear
  // (its weight-gradient GEMM) on. The output layer's weight gradient comes only after the
  // loss's vocabulary-wide moments (log_softmax's backward), so the gradients and those moments
  // are never alive together. Empty: the gradients coexist with every moment of the backward.
  Polynomial backward_transient_after_grads_bytes;
  // The largest single tensor among the transients (forward or backward): the planner allocates
  // a transient as tensors of at most this size, as autograd does, so the caching-allocator
  // model can reuse cached blocks the way PyTorch's allocator does. Empty: one allocation.
  Polynomial transient_tensor_bytes;
  // The kernels behind forward_flops, for pricing by shape (planner/kernel_shapes.h). Empty
  // matmuls: the module's matrix FLOPs have no known shapes (a hand-written model) and are
  // priced at the GPU's GEMM ceiling. When given, 2 x sum(in x out) is forward_flops' b*s term
  // and 4 x heads x head_dim is attention_flops' b*s^2 term (parse_model checks both).
  std::vector<Matmul> matmuls;
  std::optional<AttentionSpec> attention;
  // Set on a block with a Mixture-of-Experts layer (see MoeSpec).
  std::optional<MoeSpec> moe;
  // Work the module's ops run where it differs from the default, which is forward_flops in
  // forward and twice forward_flops and forward_hbm_bytes in backward. Fused loss kernels move
  // work: Liger's fused linear cross-entropy computes its gradients in forward (forward runs
  // 3x the projection's FLOPs, backward none); Cut Cross-Entropy recomputes the logits in
  // backward (3x). forward_flops stays the model's FLOPs, which MFU counts.
  std::optional<Polynomial> forward_kernel_flops;
  std::optional<Polynomial> backward_flops;
  std::optional<Polynomial> backward_hbm_bytes;
  // Per-token memory-bound bytes when the module runs eagerly (no torch.compile) over
  // forward_hbm_bytes' per-token bytes, counted op by op by the importer
  // (models::eager_hbm_factor); absent: the calibration's eager_memory_bound_factor.
  std::optional<double> eager_hbm_factor;
  // Kernels the module launches eagerly per memory-bound kernel its costs list, where that
  // differs from the calibration's eager_kernels_per_fused_kernel (which counts Hugging Face's
  // eager ops): a block costed for Liger-Kernel's kernels (models::liger_eager_kernels_per_fused_kernel).
  std::optional<double> eager_kernels_per_fused_kernel;
  // Set on the output layer: the loss head its costs were computed for (see LossHead).
  std::optional<LossHead> loss;
  // Where the costs object is in the model file ("root.children[1].costs"), so that a cost
  // found wrong only once evaluated (non-finite at this batch and sequence) is reported
  // there. Empty for costs built in code.
  std::string json_path;
};

struct Parameter {
  std::string name;       // local name, e.g. "weight"
  std::string full_name;  // dotted path from the root, e.g. "layers.3.mlp.up_proj.weight"
  std::vector<std::int64_t> shape;
  DType dtype = DType::fp32;
  std::string tied_to;  // full_name of the parameter whose storage this one shares; "" if none
  // Routed experts stacked on dim 0 (its module's `experts`; 0: not an expert weight). Expert
  // parallelism splits dim 0 over the EP group (planner/sharding.h).
  std::int64_t experts = 0;

  std::int64_t numel() const;
};

struct Module {
  std::string name;       // local name ("" for the root)
  std::string full_name;  // dotted path ("" for the root)
  std::string type;       // e.g. "LlamaDecoderLayer", "Linear"
  std::vector<Parameter> params;
  std::vector<Module> children;
  // Absent (null): the module's work is counted by its children. Immutable once parsed and
  // shared by the copies of a repeated module, which are the same costs ("{i}" appears only in
  // names): copying them for each of a 126-layer model's blocks was a tenth of its parse.
  std::shared_ptr<const ModuleCosts> costs;
  // The module holds `experts` routed experts' weights, each parameter stacked on dim 0
  // (torchtitan's GroupedExperts, transformers' MixtralExperts); 0: it does not.
  std::int64_t experts = 0;
  // Written with "repeat" (a stack of blocks), even a stack of one: a 1-layer model's block is
  // still a transformer block (planner/units.h, block_types).
  bool repeated = false;
};

// A few architecture figures, for reports and for published-run conventions.
struct ArchSummary {
  std::string family;  // "llama", "gpt2", ...
  std::int64_t num_layers = 0;
  std::int64_t hidden_size = 0;
  std::int64_t num_heads = 0;
  std::int64_t num_kv_heads = 0;
  std::int64_t ffn_hidden_size = 0;
  std::int64_t vocab_size = 0;
  std::int64_t max_seq_len = 0;
  // Mixture-of-Experts (0 when dense): routed experts per MoE layer, experts each token runs,
  // one expert's MLP width; ffn_hidden_size is then the shared experts' width (0: none).
  std::int64_t num_experts = 0;
  std::int64_t experts_per_token = 0;
  std::int64_t expert_ffn_hidden_size = 0;
};

struct Model {
  std::string file;  // the file it was read from, for errors
  std::string name;
  std::string source;  // where it came from (config file, paper)
  // What the described model has that this one leaves out (an imported image-text model's vision
  // tower, DeepSeek-V3's multi-token-prediction module): said beside every estimate of it.
  std::vector<std::string> not_modelled;
  // Costed for Liger-Kernel's blocks, norms and loss (HfImportOptions::liger; the JSON's "liger").
  bool liger = false;
  ArchSummary arch;
  Module root;

  // Unique parameter elements (a tied parameter counts once).
  std::int64_t parameter_count() const;
  // Sums over every module with costs.
  double forward_flops(double micro_batch, double seq_len) const;
  double attention_flops(double micro_batch, double seq_len) const;
  // Parameters (unique) by full name, in module pre-order.
  std::vector<const Parameter*> parameters() const;
  const Module* find_module(const std::string& full_name) const;
};

// A parsed model, read-only and shared. Every scenario made from one source holds the same
// tree (a sweep's points, the advice's candidates, a copied Scenario), so copying a scenario
// does not copy its modules: copying and freeing Llama-3.1-405B's tree was 17% of an
// `estimate` that advises (issue 19, docs/benchmarks.md). Planning caches tell one model from
// another by address(), which stays valid while any holder lives.
class SharedModel {
 public:
  SharedModel();  // an empty model (no modules)
  SharedModel(Model model);  // NOLINT(google-explicit-constructor): a scenario's model is assigned from a parse
  const Model& operator*() const { return *model_; }
  const Model* operator->() const { return model_.get(); }
  const Model* address() const { return model_.get(); }
  // Whether a memo entry made for this model still is for it: a live weak pointer is never to a
  // model that was freed and another allocated at its address.
  std::weak_ptr<const Model> weak() const { return model_; }
  // Model::parameter_count() and Model::parameters().size(), counted once at the parse: every
  // plan checks its buffer sizes against them and every cost model counts the tensors.
  std::int64_t parameter_count() const { return parameter_count_; }
  std::size_t parameter_tensors() const { return parameter_tensors_; }

 private:
  std::shared_ptr<const Model> model_;
  std::int64_t parameter_count_ = 0;
  std::size_t parameter_tensors_ = 0;
};

// Builds a Model from its JSON form, expanding "repeat" and checking everything
// (unknown fields, shapes, tied names, costs nested under costs); `file` is for errors.
Model parse_model(const nlohmann::json& json, const std::string& file);
Model load_model_file(const std::string& path);

// Calls f(module) for every module in pre-order (forward execution order).
template <typename F>
void for_each_module(const Module& m, F&& f) {
  f(m);
  for (const Module& c : m.children) for_each_module(c, f);
}

}  // namespace fsdpsim::models
