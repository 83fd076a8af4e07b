// plan_step: the step skeleton every framework shares. StepBuilder walks the layout's forward
// program (planner/plan_layout.h) once per micro-step, forward then backward (with recompute
// under activation checkpointing), and issues the module computes, the saved activations, the
// gradients autograd makes, the persistent model state and the optimizer step. At each unit's
// pre/post-forward and pre/post-backward it hands over to the scenario's FrameworkPolicy
// (planner/plan_policy.h: FSDP1, FSDP2, or replicated gradients for NO_SHARD and ZeRO-1),
// which issues the unit's communication and allocates the memory it holds.
#include "planner/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <stdexcept>
#include <unordered_map>

#include "models/checked_arithmetic.h"
#include "models/json_input.h"
#include "models/transformer_costs.h"
#include "planner/attention_model.h"
#include "planner/float8.h"
#include "planner/internal/plan_policy.h"
#include "planner/ep_dispatch.h"
#include "planner/moe.h"

namespace fsdpsim::planner {

using models::Module;

namespace {

using Event = PlanCache::Layout::Event;

int ceil_div(int a, int b) { return (a + b - 1) / b; }

// DeepSpeed's NVMe swap defaults (make_nvme_swap_buffers cites them).
constexpr std::int64_t kDeepSpeedOptimizerSwapBuffers = 4;
constexpr std::int64_t kDeepSpeedParamSwapBuffers = 5;
constexpr std::int64_t kDeepSpeedParamSwapBufferElements = 100000000;

std::unique_ptr<FrameworkPolicy> make_policy(StepContext& step) {
  // NO_SHARD, ZERO1, and DeepSpeed ZeRO-2 with its buckets stated (the `deepspeed` object):
  // parameters replicated, gradients reduced in buckets (plan_zero.cpp).
  // DeepSpeed ZeRO-3 with the object: the parameter coordinator's rules (plan_zero3.cpp).
  if (step.scenario.deepspeed.stated && step.sharded.params) return make_deepspeed_zero3_policy(step);
  if (!step.sharded.grads || step.scenario.deepspeed.stated) return make_replicated_grads_policy(step);
  return step.fsdp.version == 1 ? make_fsdp1_policy(step) : make_fsdp2_policy(step);
}

class StepBuilder {
 public:
  StepBuilder(const Scenario& scenario, const PlanCache::Layout& layout, Naming naming, Plan& plan,
              std::int64_t stop_above_bytes = kNeverGiveUp)
      : step_(scenario, layout, naming, plan),
        plan_(plan),
        stop_above_bytes_(stop_above_bytes),
        scenario_(scenario),
        training_(scenario.training),
        layout_(layout),
        schedule_(plan.schedule),
        activation_bytes_scale_(models::dtype_bytes(scenario.training.compute_dtype()) / 2.0),
        residual_bytes_scale_(step_.param_dtype_bytes / 2.0),
        float8_(scenario) {
    AttentionDevice device;
    device.arch = scenario.cluster.gpu.arch;
    attention_kernel_ = resolve_attention_kernel(training_.attention, device, !layout.unequal_head_dims);
    resolve_loss();
    check_attention_kernel();
    check_liger();
    check_moe();
    policy_ = make_policy(step_);
  }

  void build() {
    schedule_.name = scenario_.name;
    schedule_.allocator = scenario_.allocator;
    schedule_.world_size = scenario_.world_size();
    schedule_.micro_steps = static_cast<int>(training_.grad_accum);
    const double b = static_cast<double>(training_.micro_batch), seq = static_cast<double>(training_.seq_len);
    schedule_.tokens_per_rank = b * seq * training_.grad_accum;
    schedule_.model_flops_per_rank = 3.0 * model_forward_flops(b, seq) * training_.grad_accum;
    schedule_.host_threads_per_rank = host_threads_per_rank();
    make_groups();
    // The schedule is op by op; bound its size so a typo cannot exhaust memory.
    constexpr double kMaxEvents = 4e6;
    if (static_cast<double>(layout_.forward.size()) * schedule_.micro_steps > kMaxEvents)
      throw InputError(scenario_.file, "training.global_batch",
                       std::to_string(schedule_.micro_steps) + " micro-steps of " +
                           std::to_string(layout_.forward.size()) +
                           " forward events is too long a schedule to simulate op by op (limit 4M events)");
    check_buffer_sizes_fit();
    saved_activations_.assign(layout_.forward.size(), -1);
    saved_weight_copies_.assign(layout_.forward.size(), -1);
    reserve_schedule();
    make_persistent_state();
    make_init_prelude();
    // [Hopeless plans] What the replay is sure to hold at the step's first op, then at the end of
    // the first forward: past the search's bound, the rest is not planned.
    const std::int64_t state = stops_planning() ? state_bytes_before_first_op(schedule_) : 0;
    if (stops_holding(state)) return;
    for (int micro = 0; micro < schedule_.micro_steps; ++micro) {
      step_.micro_step = micro;
      step_.has_grad.assign(layout_.param_owner.size(), 0);
      forward();
      if (micro == 0) {
        step_.free_floor = static_cast<int>(schedule_.ops.size());  // [Frees in planning order]
        if (stops_planning() && stops_holding(checked_add(state, live_step_bytes(), "held bytes"))) return;
      }
      backward();
      if (micro + 1 < schedule_.micro_steps) policy_->after_backward();
    }
    optimizer_step();
    check_costs_are_finite();
    note_schedule_size();
    if (allocation_total_overflow(schedule_) >= 0)
      throw InputError(scenario_.file, "training.micro_batch",
                       "the step's allocations add up to more than 2^62 bytes: micro_batch x seq_len is far too "
                       "large for this model");
  }

 private:
  // ---- [Hopeless plans] (planner/plan.h) ---------------------------------------------------------
  bool stops_planning() const { return stop_above_bytes_ != kNeverGiveUp; }
  // Whether the replay, sure to hold `bytes`, passes the search's bound: then the plan stops here.
  bool stops_holding(std::int64_t bytes) {
    if (!stops_planning() || bytes <= stop_above_bytes_) return false;
    plan_.stopped_holding_bytes = bytes;
    return true;
  }
  // What the ops planned so far leave allocated on the device: made at one of them and freed at
  // none. No later free is attached to an op planned by now ([Frees in planning order],
  // planner/internal/plan_policy.h), so the replay holds all of it at the last of them: what the
  // forward saves for its backward (activations, checkpointed inputs, autocast's weight copies)
  // and what is still gathered or in flight. Host memory is not the device's (no forward op makes
  // any today; offloaded state is persistent, in `state`).
  std::int64_t live_step_bytes() const {
    std::vector<char> freed(schedule_.allocations.size(), 0);
    for (const Op& op : schedule_.ops)
      for (const int id : op.frees) freed[static_cast<std::size_t>(id)] = 1;
    std::int64_t bytes = 0;
    for (const Op& op : schedule_.ops)
      for (const int id : op.allocs) {
        const Allocation& a = schedule_.allocations[static_cast<std::size_t>(id)];
        if (!freed[static_cast<std::size_t>(id)] && !on_host(a.placement)) bytes = checked_add(bytes, a.bytes, "live bytes");
      }
    return bytes;
  }

  // Every parameter-sized buffer is elements x at most kMaxBytesPerElement bytes (the optimizer
  // state: two fp32 moments and an fp32 master copy is 12; padding adds at most `world`
  // elements per parameter). Checked once here, so the policies' products of element counts
  // and dtype bytes (planner/plan_fsdp*.cpp, plan_zero.cpp) cannot wrap.
  void check_buffer_sizes_fit() const {
    constexpr std::int64_t kMaxBytesPerElement = 64;
    const std::int64_t params = static_cast<std::int64_t>(scenario_.model.parameter_tensors());
    const std::int64_t padded = checked_add(scenario_.model.parameter_count(),
                                            checked_mul(params, scenario_.world_size(), "padding elements"),
                                            "the model's padded elements");
    checked_mul(padded, kMaxBytesPerElement, "the model's padded elements x bytes per element");
  }

  // A cost that overflows only once evaluated (a coefficient of 1e308 times b x s) is reported
  // where it is written, the module's costs in the model file, rather than later by an engine
  // as an op with a non-finite duration.
  void check_costs_are_finite() const {
    for (const Op& op : schedule_.ops) {
      for (const auto& [field, value] : {std::pair<const char*, double>{"flops", op.flops},
                                         {"attention_flops", op.attention_flops},
                                         {"hbm_bytes", op.hbm_bytes},
                                         {"comm_bytes", op.comm_bytes}}) {
        if (std::isfinite(value)) continue;
        const models::Module* m = scenario_.model->find_module(op.module);
        const std::string path = m && m->costs && !m->costs->json_path.empty() ? m->costs->json_path : "root";
        char at[96];
        std::snprintf(at, sizeof at, "micro_batch %lld, seq_len %lld", static_cast<long long>(training_.micro_batch),
                      static_cast<long long>(training_.seq_len));
        throw InputError(scenario_.model->file.empty() ? scenario_.file : scenario_.model->file, path,
                         "expected costs that stay finite; module \"" + op.module + "\" gets " + field + " = " +
                             std::to_string(value) + " at " + at + " (a coefficient is too large)");
      }
    }
  }

  // Per micro-step about 3 ops (forward, recompute, backward) and 8 allocations (saved
  // activations, gradients, transient pieces) per costed module, and up to 10 ops and 8
  // allocations per unit (gathers, copies, reductions): reserving spares the sweep
  // (thousands of plans) the regrowth copies.
  void reserve_schedule() {
    const std::size_t computes = static_cast<std::size_t>(std::count_if(
        layout_.forward.begin(), layout_.forward.end(), [](const Event& e) { return e.kind == Event::compute; }));
    const std::size_t micro = static_cast<std::size_t>(schedule_.micro_steps), units = step_.plan.units.size();
    // The layout's earlier plans say better (full checkpointing's recomputes, hybrid sharding's
    // all-reduces, offload's copies): at least as many as the most they made a micro-step.
    schedule_.ops.reserve(std::max((3 * computes + 10 * units) * micro + 16, layout_.most_ops_per_micro_step * micro + 16));
    schedule_.allocations.reserve(std::max((8 * computes + 8 * units) * micro + 3 * units,
                                           layout_.most_allocations_per_micro_step * micro + 3 * units));
  }
  // What reserve_schedule reads of this plan in the layout's later ones.
  void note_schedule_size() const {
    const std::size_t micro = static_cast<std::size_t>(std::max(1, schedule_.micro_steps));
    layout_.most_ops_per_micro_step = std::max(layout_.most_ops_per_micro_step, schedule_.ops.size() / micro + 1);
    layout_.most_allocations_per_micro_step =
        std::max(layout_.most_allocations_per_micro_step, schedule_.allocations.size() / micro + 1);
  }

  // The forward FLOPs MFU counts: 6N-style matmul FLOPs, plus attention as the kernel does it.
  // A causal mask leaves half the (query, key) pairs, and causal kernels skip the masked
  // tiles, so counting the whole square (PaLM appendix B) would credit work nobody does and let
  // MFU pass the GEMM ceiling at long sequences; a sliding window leaves its band
  // (models::attention_pair_fraction); attention with no descriptor counts whole.
  double model_forward_flops(double b, double seq) const {
    auto& known = layout_.forward_flops_at;
    for (const auto& [kb, kseq, kflops] : known)
      if (kb == b && kseq == seq) return kflops;
    double flops = 0;
    models::for_each_module(scenario_.model->root, [&](const Module& m) {
      if (!m.costs) return;
      flops += m.costs->forward_flops.at(b, seq);
      if (m.costs->attention)
        flops -= (1.0 - models::attention_pair_fraction(*m.costs->attention, seq)) * m.costs->attention_flops.at(b, seq);
    });
    if (known.size() >= 8) known.erase(known.begin());
    known.push_back({b, seq, flops});
    return flops;
  }

  // The attention FLOPs a module's kernels run, in the full-square convention of
  // attention_flops: a fused kernel with a sliding window skips the key blocks outside it
  // (FlashAttention's local attention); eager attention multiplies the whole score matrix and
  // masks it afterwards, whatever the window.
  // A fused kernel that cannot apply the window computes the whole square
  // (dense_window_mask).
  double kernel_attention_flops(const models::ModuleCosts& c, double b, double seq) const {
    const double full = c.attention_flops.at(b, seq);
    if (!c.attention || c.attention->window <= 0 || has_score_term(c.forward_hbm_bytes) || dense_window_mask(c, seq))
      return full;
    return full * models::attention_window_share(*c.attention, seq);
  }

  // [SDPA and sliding windows] (planner/attention_model.h): a windowed layer whose keys reach
  // past the window, under a fused kernel that cannot window (SDPA's cuDNN and memory-efficient
  // backends), runs as a dense mask over the whole square: every pair computed, no causal skip.
  bool dense_window_mask(const models::ModuleCosts& c, double seq) const {
    return c.attention && c.attention->window > 0 && c.attention->window < seq && attention_kernel_ &&
           !kernel_applies_window(*attention_kernel_) && !has_score_term(c.forward_hbm_bytes);
  }

  // The mask as SDPA holds it: a 16-bit bias of (batch, 1, seq, seq) made from the boolean mask
  // in the call (convert_boolean_attn_mask) and kept for the backward, which reads it.
  std::int64_t window_mask_bytes(const models::ModuleCosts& c, double b, double seq) const {
    if (!dense_window_mask(c, seq)) return 0;
    return checked_to_int64(2.0 * b * seq * seq * activation_bytes_scale_, "the attention mask's bytes");
  }

  // ---- the scenario's kernel choices -----------------------------------------------------
  // training.loss: the output layer's costs recomputed for the stated kind from the loss head
  // its costs record (models::LossHead). Here rather than in parse_scenario because a sweep
  // shares one parsed model among its points. The chunked kind's costs depend on b*s and the
  // chunked_output kind's on training.torch_compile (models/transformer_costs.h): always
  // recomputed at this point's.
  void resolve_loss() {
    bool has_head = false;
    for (const Event& e : layout_.forward) {
      if (e.kind != Event::compute || !e.module->costs->loss) continue;
      has_head = true;
      const models::LossHead& head = *e.module->costs->loss;
      const models::LossKind kind = training_.loss.value_or(head.kind);
      if (kind == head.kind && kind != models::LossKind::chunked && kind != models::LossKind::chunked_output) continue;
      const double tokens = static_cast<double>(training_.micro_batch) * static_cast<double>(training_.seq_len);
      // torchtune compiles its chunked-output cross-entropy with the model (compile: True); a
      // scenario that states training.torch_compile false runs it eagerly.
      const bool compiled_loss = training_.execution != TrainingSpec::Execution::eager;
      try {
        swapped_costs_.emplace_back(e.module, models::lm_head_costs(head.hidden_size, head.vocab_size, kind, tokens,
                                                                    head.logit_softcap, compiled_loss));
      } catch (const std::invalid_argument& error) {
        throw InputError(scenario_.file, "training.loss", std::string(error.what()) + " (model \"" + scenario_.model->name + "\")");
      }
    }
    if (training_.loss && !has_head)
      throw InputError(scenario_.file, "training.loss",
                       "\"" + models::loss_kind_name(*training_.loss) + "\" needs the model's output layer to record its loss "
                       "head (a \"loss\" object in its costs: vocab_size, hidden_size, kind), which model \"" +
                           scenario_.model->name + "\" lacks; re-import it with fsdpsim import-hf, or leave training.loss out");
  }

  // training.attention against the attention the model was costed for (a b*s^2 term in the
  // attention modules' saved activations: the score matrices). "eager" needs a model costed for
  // eager attention, a fused kernel's name one costed for fused attention: otherwise the step
  // would be priced as the other kind under the name asked for. "auto" takes the model's.
  void check_attention_kernel() const {
    if (training_.attention == "auto") return;
    bool eager = false;
    for (const Event& e : layout_.forward) {
      if (e.kind != Event::compute || e.module->costs->attention_flops.empty()) continue;
      eager = eager || has_score_term(e.module->costs->saved_activation_bytes);
    }
    if (training_.attention == "eager" && !eager)
      throw InputError(scenario_.file, "training.attention",
                       "\"eager\" needs a model whose attention costs materialise the score matrices; model \"" +
                           scenario_.model->name + "\" was costed for fused attention: import it with fsdpsim import-hf "
                           "--eager-attention");
    if (training_.attention != "eager" && eager)
      throw InputError(scenario_.file, "training.attention",
                       "\"" + training_.attention + "\" is a fused kernel, but model \"" + scenario_.model->name +
                           "\" was costed for eager attention (its blocks save the score matrices): set training.attention "
                           "to \"eager\" or \"auto\", or give the model as hf:<config.json>, which is imported for the "
                           "kernel named");
  }

  // training.liger against the kernels the model was costed for (models::Model::liger): a stated
  // value the model's costs do not follow would price the other kernels under its name.
  void check_liger() const {
    if (!training_.liger || *training_.liger == scenario_.model->liger) return;
    if (*training_.liger)
      throw InputError(scenario_.file, "training.liger",
                       "true needs a model costed for Liger's kernels; model \"" + scenario_.model->name +
                           "\" was not: give it as hf:<config.json> (the catalog's configs are in models/hf/), which is "
                           "imported for them, or import it with fsdpsim import-hf --liger");
    throw InputError(scenario_.file, "training.liger",
                     "false, but model \"" + scenario_.model->name +
                         "\" was costed for Liger's kernels (imported with liger): import it without, or leave "
                         "training.liger out");
  }

  // MoE blocks: fsdp.expert_parallel must divide every MoE layer's experts and
  // training.moe_imbalance cannot exceed them (the busiest expert would get more than every
  // token); op-level SAC has no ledger for the routed part (models/transformer_costs.h).
  void check_moe() const {
    bool any = false;
    for (const Event& e : layout_.forward) {
      if (e.kind != Event::compute || !e.module->costs->moe) continue;
      any = true;
      const models::MoeSpec& moe = *e.module->costs->moe;
      if (moe.experts % scenario_.fsdp.expert_parallel != 0)
        throw InputError(scenario_.file, "fsdp.expert_parallel",
                         "expected a divisor of the experts of every MoE layer; " + e.module->full_name + " has " +
                             std::to_string(moe.experts) + ", got " + std::to_string(scenario_.fsdp.expert_parallel));
      if (training_.moe_imbalance > moe.experts)
        throw InputError(scenario_.file, "training.moe_imbalance",
                         "expected at most the number of experts (" + std::to_string(moe.experts) + " in " +
                             e.module->full_name + "): the busiest expert cannot get more than every token's copy");
    }
    if (any && training_.checkpointing == Checkpointing::selective)
      throw InputError(scenario_.file, "training.activation_checkpointing",
                       "\"selective\" (op-level SAC) is not modelled for MoE blocks (model \"" + scenario_.model->name +
                           "\"); use \"full\", an integer k, or \"none\"");
    if (!any && scenario_.fsdp.expert_parallel > 1)
      throw InputError(scenario_.file, "fsdp.expert_parallel",
                       "expert parallelism needs a model with MoE layers; model \"" + scenario_.model->name + "\" has none");
    // A dense model has no expert to load more than the mean (accepted silently before session 38).
    if (!any && training_.moe_imbalance != 1)
      throw InputError(scenario_.file, "training.moe_imbalance",
                       "routing imbalance needs a model with MoE layers; model \"" + scenario_.model->name + "\" has none");
  }

  // The costs the planner prices a module with: the model's, or the output layer's for the
  // scenario's training.loss.
  const models::ModuleCosts& costs_of(const Module& m) const {
    for (const auto& [module, costs] : swapped_costs_)
      if (module == &m) return costs;
    return *m.costs;
  }
  // FLOPs a forward (or a recompute of it) runs, and its backward's work (models/model.h).
  // A window's skipped attention work comes off the module's FLOPs too (attention is part of
  // forward_flops); an explicit forward_kernel_flops / backward_flops is taken as written.
  double forward_kernel_flops(const models::ModuleCosts& c, double b, double seq) const {
    if (c.forward_kernel_flops) return c.forward_kernel_flops->at(b, seq);
    return c.forward_flops.at(b, seq) - (c.attention_flops.at(b, seq) - kernel_attention_flops(c, b, seq));
  }
  double backward_flops(const models::ModuleCosts& c, double b, double seq) const {
    if (c.backward_flops) return c.backward_flops->at(b, seq);
    return 2.0 * (c.forward_flops.at(b, seq) - (c.attention_flops.at(b, seq) - kernel_attention_flops(c, b, seq)));
  }
  static double backward_hbm_bytes(const models::ModuleCosts& c, double b, double seq) {
    return c.backward_hbm_bytes ? c.backward_hbm_bytes->at(b, seq) : 2.0 * c.forward_hbm_bytes.at(b, seq);
  }
  // The part of a byte polynomial that grows with s^2: the attention score matrix of eager
  // attention, whose kernels (scale, mask, softmax, dropout) the model files list one by one.
  static double score_bytes(const models::Polynomial& p, double b, double seq) {
    double bytes = 0;
    for (const models::Polynomial::Term& t : p.terms)
      if (t.s_pow >= 2) bytes += t.coeff * std::pow(b, t.b_pow) * std::pow(seq, t.s_pow);
    return bytes;
  }
  // Whether a polynomial has such a term: the module materialises the score matrix.
  static bool has_score_term(const models::Polynomial& p) {
    return std::any_of(p.terms.begin(), p.terms.end(),
                       [](const models::Polynomial::Term& t) { return t.s_pow >= 2 && t.coeff > 0; });
  }
  static double backward_score_bytes(const models::ModuleCosts& c, double b, double seq) {
    return c.backward_hbm_bytes ? score_bytes(*c.backward_hbm_bytes, b, seq) : 2.0 * score_bytes(c.forward_hbm_bytes, b, seq);
  }

  // ---- kernels by shape ----------------------------------------------------------------
  // The kernels a module's forward, backward or op-level SAC recompute runs (the cost model
  // prices them by shape: planner/kernel_shapes.h); -1 for a module whose matmuls have no shapes.
  // A backward runs, per forward GEMM (tokens T, in -> out), the input gradient
  // dX[T, in] = dY[T, out] W[out, in] and the weight gradient dW[out, in] = dY^T[out, T] X[T, in].
  // A full recompute is the forward again (its op asks for KernelPass::forward).
  enum class KernelPass { forward = 0, backward = 1, selective_recompute = 2 };
  int kernel_set_of(const models::ModuleCosts& c, KernelPass pass) {
    // A loss kernel that moves the output projection's work between passes (Liger's fused
    // linear cross-entropy, Cut Cross-Entropy) runs GEMMs of other shapes: priced by its FLOPs.
    if ((c.matmuls.empty() && !c.attention) || c.forward_kernel_flops || c.backward_flops) return -1;
    auto& cache = kernel_set_by_pass_[static_cast<int>(pass)];
    auto hit = cache.find(&c);
    if (hit != cache.end()) return hit->second;
    const double b = static_cast<double>(training_.micro_batch), seq = static_cast<double>(training_.seq_len), tokens = b * seq;
    KernelSet k;
    for (const models::Matmul& m : c.matmuls) {
      if (m.routed) {
        if (pass == KernelPass::selective_recompute) continue;  // refused for MoE blocks (check_moe)
        for (GroupedGemmShape& g : routed_gemms(*c.moe, m, pass, tokens)) k.grouped_gemms.push_back(std::move(g));
        if (training_.autocast())
          k.cast_kernel_bytes.push_back(autocast_cast_bytes(routed_weight_numel(*c.moe, m)));
        continue;
      }
      const std::size_t first_gemm = k.gemms.size();
      switch (pass) {
        case KernelPass::forward: k.gemms.push_back({tokens, m.out_features, m.in_features}); break;
        case KernelPass::backward:
          k.gemms.push_back({tokens, m.in_features, m.out_features});
          k.gemms.push_back({m.out_features, m.in_features, tokens});
          break;
        case KernelPass::selective_recompute:
          if (m.sac_recomputed) k.gemms.push_back({tokens, m.out_features, m.in_features});
          break;
      }
      if (first_gemm < k.gemms.size() && float8_.runs_in_fp8(c, m)) add_float8_kernels(k, first_gemm, m, pass, tokens);
      if (first_gemm < k.gemms.size() && training_.autocast())
        k.cast_kernel_bytes.push_back(autocast_cast_bytes(m.in_features * m.out_features));
    }
    // SAC keeps a fused attention's output; eager attention (bmm, not in the save list) runs
    // again, which the module's sac_recompute_flops then count in its b*s^2 term.
    const bool attention_runs = pass != KernelPass::selective_recompute ||
                                has_score_term(c.sac_recompute_flops);
    if (c.attention && attention_runs) {
      const models::AttentionSpec& a = *c.attention;
      k.has_attention = true;
      k.attention = {b, seq, seq, a.heads, a.kv_heads, a.head_dim, a.causal, a.window, a.v_head_dim};
      if (dense_window_mask(c, seq)) {
        k.attention.causal = false;
        k.attention.window = 0;
      }
      k.attention_pass = pass == KernelPass::backward ? AttentionPass::backward : AttentionPass::forward;
      k.scores_materialized = has_score_term(c.forward_hbm_bytes);
    }
    // Identical modules (a model's repeated blocks) share one set.
    int index = -1;
    for (std::size_t i = 0; i < schedule_.kernel_sets.size() && index < 0; ++i)
      if (same_kernels(schedule_.kernel_sets[i], k)) index = static_cast<int>(i);
    if (index < 0) {
      index = static_cast<int>(schedule_.kernel_sets.size());
      schedule_.kernel_sets.push_back(std::move(k));
    }
    cache.emplace(&c, index);
    return index;
  }

  // ---- [Autocast over fp32 parameters] (TrainingSpec::autocast) -------------------------------
  // Under torch.autocast each F.linear casts its fp32 weight to the 16-bit matmul_dtype, and the
  // GEMM saves that copy for its input gradient. So per Linear weight of numel n, in a pass:
  //  - forward and a recompute: a cast kernel reading n fp32 and writing n 16-bit elements; the
  //    copy lives until the module's backward, and the recompute makes it again;
  //  - backward: the weight gradient comes out of the GEMM in 16 bits and the cast's backward
  //    writes it in fp32 (the same bytes), before FSDP reduces it in reduce_dtype.
  // Inside a checkpointed block's forward nothing is saved; what keeps a copy then is autocast's
  // cache (at::autocast::cached_cast), which holds the casts of leaf, non-view fp32 tensors that
  // require grad until the autocast region ends (the forward and the loss):
  //  - FSDP1 hands the modules views of the gathered flat parameter, not leaves: nothing is
  //    cached, each copy dies after its GEMM, one at a time;
  //  - FSDP2's gathered parameters are leaf nn.Parameters: every copy stays in the cache until
  //    the forward ends, the whole model's 16-bit weights at once.
  // Not planned: casts of activations (a norm's fp32 output before its GEMM), of biases and norm
  // weights, and the cast kernels' CPU issue (docs/cost-model.md, "Autocast over fp32 parameters").
  double autocast_cast_bytes(double numel) const {
    return numel * (models::dtype_bytes(models::DType::fp32) + models::dtype_bytes(training_.compute_dtype()));
  }
  // This rank's elements of a routed expert projection: its local experts' weights.
  double routed_weight_numel(const models::MoeSpec& moe, const models::Matmul& m) const {
    return m.in_features * m.out_features * static_cast<double>(local_experts(moe, scenario_.fsdp.expert_parallel));
  }
  // The 16-bit copies of the module's Linear weights (`largest_only`: its largest one), allocated
  // at `op`; -1 when the module runs no GEMM.
  int autocast_weight_copies(int op, const models::ModuleCosts& c, bool largest_only, const Name& name) {
    double numel = 0;
    for (const models::Matmul& m : c.matmuls) {
      const double n = m.routed ? routed_weight_numel(*c.moe, m) : m.in_features * m.out_features;
      numel = largest_only ? std::max(numel, n) : numel + n;
    }
    if (!(numel > 0)) return -1;
    return step_.alloc_at(op, checked_to_int64(numel * models::dtype_bytes(training_.compute_dtype()), "autocast weight copy bytes"),
                          MemCategory::activation, name);
  }

  // A Float8Linear (planner/float8.h): its GEMMs from `first_gemm` on run in fp8, beside the
  // scaling kernels of its pass (a selective recompute reruns the forward's).
  void add_float8_kernels(KernelSet& k, std::size_t first_gemm, const models::Matmul& m, KernelPass pass,
                          double tokens) const {
    for (std::size_t i = first_gemm; i < k.gemms.size(); ++i) k.gemms[i].fp8 = true;
    const Float8Pass f8_pass = pass == KernelPass::backward ? Float8Pass::backward : Float8Pass::forward;
    for (double bytes : float8_cast_kernel_bytes(tokens, m.in_features, m.out_features, f8_pass,
                                                 float8_.weights_gathered_in_fp8()))
      k.cast_kernel_bytes.push_back(bytes);
  }

  // A routed expert projection (in -> out features) as grouped kernels over this rank's experts
  // (planner/moe.h: the busiest expert and the others): forward Y_e[m_e, out] = X_e W_e^T;
  // backward dX_e[m_e, in] = dY_e W_e, then dW_e[out, in] = dY_e^T X_e, whose reduction runs over
  // the expert's m_e tokens.
  std::vector<GroupedGemmShape> routed_gemms(const models::MoeSpec& moe, const models::Matmul& m, KernelPass pass,
                                             double tokens) const {
    const ExpertRouting r = expert_routing(moe, tokens, scenario_.fsdp.expert_parallel, training_.moe_imbalance);
    const double in = m.in_features, out = m.out_features;
    auto over_experts = [&](auto shape_for) {
      GroupedGemmShape g;
      g.shapes.push_back(shape_for(r.busiest_expert_tokens));
      g.counts.push_back(1);
      if (r.local_experts > 1) {
        g.shapes.push_back(shape_for(r.other_expert_tokens));
        g.counts.push_back(r.local_experts - 1);
      }
      return g;
    };
    if (pass == KernelPass::backward)
      return {over_experts([&](double rows) { return GemmShape{rows, in, out}; }),
              over_experts([&](double rows) { return GemmShape{out, in, rows}; })};
    return {over_experts([&](double rows) { return GemmShape{rows, out, in}; })};
  }

  static bool same_grouped(const std::vector<GroupedGemmShape>& a, const std::vector<GroupedGemmShape>& b) {
    if (a.size() != b.size()) return false;
    for (std::size_t i = 0; i < a.size(); ++i) {
      if (a[i].counts != b[i].counts || a[i].shapes.size() != b[i].shapes.size()) return false;
      for (std::size_t j = 0; j < a[i].shapes.size(); ++j) {
        const GemmShape &x = a[i].shapes[j], &y = b[i].shapes[j];
        if (x.m != y.m || x.n != y.n || x.k != y.k) return false;
      }
    }
    return true;
  }

  static bool same_kernels(const KernelSet& a, const KernelSet& b) {
    auto same_gemm = [](const GemmShape& x, const GemmShape& y) {
      return x.m == y.m && x.n == y.n && x.k == y.k && x.fp8 == y.fp8;
    };
    const AttentionShape &x = a.attention, &y = b.attention;
    return a.gemms.size() == b.gemms.size() && std::equal(a.gemms.begin(), a.gemms.end(), b.gemms.begin(), same_gemm) &&
           a.cast_kernel_bytes == b.cast_kernel_bytes && same_grouped(a.grouped_gemms, b.grouped_gemms) &&
           a.has_attention == b.has_attention &&
           (!a.has_attention || (a.attention_pass == b.attention_pass && x.batch == y.batch && x.seq_q == y.seq_q &&
                                 x.seq_kv == y.seq_kv && x.heads == y.heads && x.kv_heads == y.kv_heads &&
                                 x.head_dim == y.head_dim && x.value_head_dim() == y.value_head_dim() &&
                                 x.causal == y.causal && x.window == y.window &&
                                 a.scores_materialized == b.scores_materialized));
  }

  // ---- process groups ------------------------------------------------------------------
  int add_group(const std::string& name, int ranks, int nodes, int stride = 1) {
    schedule_.groups.push_back({name, ranks, std::max(1, nodes), stride});
    return static_cast<int>(schedule_.groups.size()) - 1;
  }

  void make_groups() {
    const int gpn = scenario_.cluster.gpus_per_node, world = scenario_.world_size(), W = scenario_.fsdp.shard_group_size;
    // Ranks are laid out node-major, so a group of consecutive ranks spans ceil(W/gpn) nodes.
    step_.groups.shard = add_group("shard", W, ceil_div(W, gpn));
    // The replicate group takes one rank from each shard group: one per node when shard
    // groups span whole nodes, else ranks on every node.
    step_.groups.replicate = add_group("replicate", world / W, W >= gpn ? world / W : scenario_.cluster.nodes, W < world ? W : 1);
    step_.groups.world = add_group("world", world, scenario_.cluster.nodes);
    if (reshards_to_smaller_group(scenario_.fsdp)) {
      const int k = scenario_.fsdp.reshard_after_forward;
      step_.groups.reshard = add_group("reshard", k, ceil_div(k, gpn));
    }
    const int ep = scenario_.fsdp.expert_parallel;
    if (ep > 1) {
      // torchtitan's mesh is row-major with the EP ranks innermost: an EP group is ep consecutive
      // ranks, the experts' FSDP group (efsdp) the shard group's ranks ep apart.
      step_.groups.expert = add_group("expert", ep, ceil_div(ep, gpn));
      const int efsdp = W / ep;
      // Its members are ep apart: gpn/ep of them per node while ep < gpn, else one per node.
      step_.groups.expert_shard = add_group("expert_shard", efsdp, std::min(efsdp, ceil_div(W, gpn)), ep);
    }
  }

  // ---- persistent state ------------------------------------------------------------------
  // What lives from step to step: the parameters (sharded, or replicated), the optimizer state
  // (with DeepSpeed's master copy) and DDP/ZeRO-1's replicated gradient buffers. Offloaded
  // state lives in host memory (planner/job_memory.h lists the same figures per offload option).
  void make_persistent_state() {
    const int states = optimizer_states_per_param(training_.optimizer);
    const int master_copy =
        training_.master_weights == MasterWeights::optimizer_state && training_.optimizer != Optimizer::none ? 1 : 0;
    const int stored = step_.stored_param_dtype_bytes, master = step_.master_dtype_bytes;
    using Device = FsdpSpec::OffloadDevice;
    const FsdpSpec& f = scenario_.fsdp;
    sharded_params_.assign(step_.plan.units.size(), -1);
    for (const Unit& u : step_.plan.units) {
      const UnitShard& sh = step_.shard(u.index);
      if (sh.numel == 0) continue;
      const std::string& name = step_.label(u.index);
      const std::size_t first = step_.schedule.allocations.size();
      const std::int64_t optimizer_numel = step_.sharded.optimizer_state ? sh.optimizer_numel : sh.numel;
      // Parameters.
      if (f.cpu_offload)  // FSDP pins the offloaded shard (FSDP1 _local_shard, FSDP2 pin_memory=True)
        step_.host_alloc(-1, step_.pinned_shard_bytes(u.index, stored), MemCategory::sharded_param,
                         Placement::pinned_host, Name{"host sharded params of ", name});
      else if (f.offload_param == Device::cpu)
        step_.host_alloc(-1, step_.buffer_bytes(sh.local_numel, stored), MemCategory::sharded_param,
                         step_.deepspeed_host_placement(), Name{"host param partition of ", name});
      else if (f.offload_param == Device::nvme)
        ;  // on NVMe; the host holds the swap buffers (below)
      else if (step_.sharded.params)
        sharded_params_[u.index] = step_.new_alloc(step_.buffer_bytes(sh.local_numel, stored), MemCategory::sharded_param,
                                                   Stream::compute, Name{"sharded params of ", name}, true, true);
      else
        step_.new_alloc(step_.buffer_bytes(sh.numel, stored), MemCategory::unsharded_param, Stream::compute,
                        Name{"replicated params of ", name}, true, true);
      // Optimizer state (and DeepSpeed's fp32 master and fp32 gradient partition).
      const std::int64_t state_bytes = step_.buffer_bytes(optimizer_numel, (states + master_copy) * master);
      if (f.cpu_offload) {
        // torch.optim makes its state with zeros_like on the CPU parameters: ordinary memory.
        if (state_bytes > 0)
          step_.host_alloc(-1, state_bytes, MemCategory::optimizer_state, Placement::pageable_host,
                           Name{"host optimizer state of ", name});
      } else if (f.offload_optimizer == Device::cpu) {
        // [DeepSpeed's host buffers] (deepspeedai/DeepSpeed@edaa722), what offload_optimizer cpu
        // keeps on the host, pinned with offload_pin_memory (get_accelerator().pin_memory):
        //  - the fp32 master: ZeRO-1/2 pins it (stage_1_and_2.py: weights_partition pinned);
        //    ZeRO-3 does not (stage3.py _create_fp32_partitions: .to(cpu, fp32).clone());
        //  - the optimizer states: DeepSpeedCPUAdam's zeros_like on the CPU, ordinary memory;
        //  - the fp32 gradient partition, pinned (stage_1_and_2.py single_grad_partition;
        //    stage3.py initialize_optimizer_states: subgroup_gradient_buffer);
        //  - ZeRO-3 also accumulates the reduced gradients on the host in the model's dtype
        //    (stage3.py _setup_for_real_optimizer: grad_partitions_flat_buffer, pinned).
        const bool zero3 = deepspeed_zero_stage(scenario_) == 3;
        const std::int64_t master_bytes = master_copy > 0 ? step_.buffer_bytes(optimizer_numel, master) : 0;
        if (state_bytes - master_bytes > 0)
          step_.host_alloc(-1, state_bytes - master_bytes, MemCategory::optimizer_state, Placement::pageable_host,
                           Name{"host optimizer state of ", name});
        if (master_bytes > 0)
          step_.host_alloc(-1, master_bytes, MemCategory::optimizer_state,
                           zero3 ? Placement::pageable_host : step_.deepspeed_host_placement(),
                           Name{"host fp32 master of ", name});
        step_.host_alloc(-1, step_.buffer_bytes(optimizer_numel, master), MemCategory::sharded_grad,
                         step_.deepspeed_host_placement(), Name{"host fp32 grads of ", name});
        if (zero3)
          step_.host_alloc(-1, step_.buffer_bytes(optimizer_numel, step_.param_dtype_bytes), MemCategory::sharded_grad,
                           step_.deepspeed_host_placement(), Name{"host grad partitions of ", name});
      } else if (f.offload_optimizer == Device::nvme) {
        ;  // on NVMe, swapped through pinned buffers (below)
      } else if (states + master_copy > 0) {
        step_.new_alloc(state_bytes, MemCategory::optimizer_state, Stream::compute, Name{"optimizer state of ", name},
                        true, true);
      }
      if (!step_.sharded.grads)
        step_.new_alloc(step_.buffer_bytes(sh.numel, stored), MemCategory::unsharded_grad, Stream::compute,
                        Name{"replicated grads of ", name}, true, true);
      for (std::size_t a = first; a < step_.schedule.allocations.size(); ++a) step_.schedule.allocations[a].unit = u.index;
    }
    make_nvme_swap_buffers();
    make_pinned_block_rounding();
  }

  // [DeepSpeed's pinned blocks] (planner/internal/plan_policy.h): the host allocator holds
  // DeepSpeed's pinned optimizer buffers in power-of-two blocks; the per-unit allocations above
  // have their exact sizes, this one the difference (job_memory.cpp's offload options add the same).
  void make_pinned_block_rounding() {
    const FsdpSpec& f = scenario_.fsdp;
    if (f.cpu_offload || f.offload_optimizer != FsdpSpec::OffloadDevice::cpu || !f.offload_pin_memory ||
        training_.master_weights != MasterWeights::optimizer_state)
      return;
    std::int64_t exact = 0, partition = 0;
    for (const Allocation& a : step_.schedule.allocations)
      if (a.persistent && a.placement == Placement::pinned_host &&
          (a.category == MemCategory::optimizer_state || a.category == MemCategory::sharded_grad))
        exact += a.bytes;
    for (const Unit& u : step_.plan.units) partition += step_.shard(u.index).optimizer_numel;
    const std::int64_t rounding = deepspeed_pinned_optimizer_bytes(scenario_, partition) - exact;
    if (rounding > 0)
      step_.host_alloc(-1, rounding, MemCategory::optimizer_state, Placement::pinned_host,
                       "the host allocator's power-of-two blocks of DeepSpeed's pinned buffers", false);
  }

  // ---- [Job prelude] FSDP1 building its flat parameters (planner/schedule.h) ---------------------
  // FSDP1 (use_orig_params=False) wraps units innermost first (_auto_wrap recurses into a
  // module's children before wrapping it) and builds each unit's flat parameter as it wraps it
  // (torch/distributed/fsdp/_init_utils.py, _init_param_handle_from_module):
  //  1. the unit's parameters come to the GPU in the stored dtype, module by module in
  //     breadth-first order (_get_modules_to_materialize: a meta model's param_init_fn or
  //     reset_parameters; a CPU model's _move_module_to_device moves them the same way);
  //  2. flatten_tensors concatenates them into one flat tensor (unpadded: the world-size padding
  //     is the shard's);
  //  3. FlatParamHandle.shard() clones this rank's padded shard out of it (_get_shard) and frees
  //     the flat tensor (_resize_(0));
  //  4. the modules' parameters become views of the flat parameter: the materialised tensors go,
  //     last made first.
  // A model built on the GPU (init cuda) had every parameter allocated at construction, in
  // module order, before FSDP wraps anything. Measured on an H200 with PyTorch 2.11: the memory
  // snapshot tests/data/hardware/memory_snapshot-h200-2026-11-28-llama3.1-8b-8layers-fsdp1-
  // ac_full-reshard_true-n64.pickle.gz holds this sequence allocation by allocation, and the
  // segments it leaves cached are a quarter of that run's reserved memory.
  // Not in the prelude: sync_module_states' broadcast buckets (job_memory.cpp's init peak
  // counts one), CPU offload (the shard goes to the host), FSDP2 (fully_shard on a meta model
  // allocates only the shards, which the step makes as it starts) and DeepSpeed.
  void make_init_prelude() {
    if (scenario_.fsdp.version != 1 || scenario_.deepspeed.stated || !step_.sharded.params || scenario_.fsdp.cpu_offload ||
        scenario_.fsdp.offload_param != FsdpSpec::OffloadDevice::none)
      return;
    const std::vector<Unit>& units = step_.plan.units;
    const int stored = step_.stored_param_dtype_bytes;
    // init cuda: every parameter allocated at construction, in module order, before any unit.
    std::unordered_map<const models::Parameter*, int> built_whole;
    if (scenario_.init.device == InitSpec::Device::cuda) {
      std::unordered_map<const models::Parameter*, int> unit_of;
      for (const Unit& u : units)
        for (const models::Parameter* p : u.params) unit_of[p] = u.index;
      models::for_each_module(scenario_.model->root, [&](const Module& m) {
        for (const models::Parameter& p : m.params)
          if (auto it = unit_of.find(&p); it != unit_of.end())
            built_whole[&p] = prelude_buffer(step_.buffer_bytes(p.numel(), stored), Name{"init: ", p.full_name}, it->second);
      });
    }
    for (int u : units_innermost_first()) {
      if (sharded_params_[u] < 0) continue;  // no parameters: no flat parameter
      std::vector<int> materialised;  // in the order made
      if (scenario_.init.device == InitSpec::Device::cuda) {
        for (const models::Parameter* p : units[u].params) materialised.push_back(built_whole.at(p));
      } else {
        // Breadth-first: a module's depth is its parameter's dots (the list is in module order,
        // and breadth-first order within one depth is module order).
        std::vector<std::pair<std::ptrdiff_t, const models::Parameter*>> by_depth;
        by_depth.reserve(units[u].params.size());
        for (const models::Parameter* p : units[u].params)
          by_depth.push_back({std::count(p->full_name.begin(), p->full_name.end(), '.'), p});
        std::stable_sort(by_depth.begin(), by_depth.end(),
                         [](const auto& a, const auto& b) { return a.first < b.first; });
        for (const auto& [depth, p] : by_depth)
          materialised.push_back(prelude_buffer(step_.buffer_bytes(p->numel(), stored), Name{"init: ", p->full_name}, u));
      }
      const int flat = prelude_buffer(step_.buffer_bytes(step_.shard(u).numel, stored),
                                      Name{"init: flat parameter of ", step_.label(u)}, u);
      schedule_.prelude.push_back({sharded_params_[u], false});
      schedule_.prelude.push_back({flat, true});
      for (auto id = materialised.rbegin(); id != materialised.rend(); ++id) schedule_.prelude.push_back({*id, true});
    }
    make_lazy_init();
  }

  // A device buffer of the prelude on the compute stream, allocated now (the caller frees it).
  int prelude_buffer(std::int64_t bytes, const Name& label, int unit) {
    const int id = step_.new_alloc(bytes, MemCategory::temporary, Stream::compute, label);
    schedule_.allocations[id].unit = unit;
    schedule_.prelude.push_back({id, false});
    return id;
  }

  // FSDP1's lazy init, in the first forward before the root's first all-gather (_lazy_init,
  // _share_state_and_init_handle_attrs: the root's handle, then the others in module order):
  // FlatParamHandle.init_flat_param_attributes sizes each flat parameter's buffers by allocating
  // them on the compute stream and freeing their storage at once (_free_storage): with
  // parameter mixed precision the low-precision shard (_mp_shard), then the padded unsharded
  // parameter in the compute dtype (_full_param_padded), then in the stored dtype
  // (_full_prec_full_param_padded). Nothing stays allocated, but a model with no init segments
  // big enough gets new ones (the measured snapshot: 365-445 of its trace, 2026-11-28).
  void make_lazy_init() {
    const bool mixed = step_.param_dtype_bytes != step_.stored_param_dtype_bytes;  // _uses_param_mixed_precision
    auto sized_and_freed = [&](int u, std::int64_t elements, int dtype_bytes, const char* what) {
      const int id = prelude_buffer(step_.buffer_bytes(elements, dtype_bytes), Name{"lazy init: ", step_.label(u), what}, u);
      schedule_.prelude.push_back({id, true});
    };
    std::vector<int> order;
    for (const Unit& u : step_.plan.units)
      if (u.is_root) order.insert(order.begin(), u.index);
      else order.push_back(u.index);
    for (int u : order) {
      if (sharded_params_[u] < 0) continue;
      const UnitShard& sh = step_.shard(u);
      if (mixed) sized_and_freed(u, sh.local_numel, step_.param_dtype_bytes, " low-precision shard");
      sized_and_freed(u, sh.gathered_numel, mixed ? step_.param_dtype_bytes : step_.stored_param_dtype_bytes,
                      " unsharded flat parameter");
      if (mixed) sized_and_freed(u, sh.gathered_numel, step_.stored_param_dtype_bytes, " full-precision unsharded flat parameter");
    }
  }

  // Units in the order FSDP1's auto-wrap wraps them: each after the units inside it, siblings
  // in forward order.
  std::vector<int> units_innermost_first() const {
    const std::vector<Unit>& units = step_.plan.units;
    std::vector<std::vector<int>> children(units.size());
    std::vector<int> roots;
    for (const Unit& u : units) (u.parent >= 0 ? children[u.parent] : roots).push_back(u.index);
    std::vector<int> order;
    order.reserve(units.size());
    auto visit = [&](auto& self, int u) -> void {
      for (int c : children[u]) self(self, c);
      order.push_back(u);
    };
    for (int r : roots) visit(visit, r);
    return order;
  }

  // ZeRO-Infinity's pinned swap buffers (always page-locked: aio's new_cpu_locked_tensor /
  // pin_memory). Defaults from deepspeed/runtime/zero/offload_config.py and config.py
  // (deepspeedai/DeepSpeed@edaa722): the optimizer swapper holds offload_optimizer.buffer_count = 4
  // fp32 buffers of the largest sub-group (stage3.py _configure_tensor_swapping:
  // `largest_numel=max(self.fp16_partitioned_groups_flat_numel)`, the sub-groups of
  // deepspeed.sub_group_size, 1e9 by default: deepspeed_sub_groups; swap_tensor/optimizer_utils.py
  // SwapBufferManager); the parameter swapper
  // offload_param.buffer_count = 5 buffers of buffer_size = 1e8 elements in the parameter dtype
  // (swap_tensor/partitioned_param_swapper.py).
  void make_nvme_swap_buffers() {
    using Device = FsdpSpec::OffloadDevice;
    if (scenario_.fsdp.offload_optimizer == Device::nvme) {
      const std::int64_t largest_sub_group = largest_deepspeed_sub_group(
          *scenario_.model, scenario_.fsdp.shard_group_size, scenario_.deepspeed.sub_group_size);
      step_.host_alloc(-1, step_.buffer_bytes(largest_sub_group, kDeepSpeedOptimizerSwapBuffers * 4), MemCategory::temporary,
                       Placement::pinned_host, "NVMe optimizer swap buffers", false);
    }
    if (scenario_.fsdp.offload_param == Device::nvme)
      step_.host_alloc(-1, kDeepSpeedParamSwapBuffers * kDeepSpeedParamSwapBufferElements * step_.param_dtype_bytes,
                       MemCategory::temporary, Placement::pinned_host, "NVMe parameter swap buffers", false);
  }

  // ---- forward -------------------------------------------------------------------------------
  void forward() {
    step_.phase = Phase::forward;
    const double b = static_cast<double>(training_.micro_batch), seq = static_cast<double>(training_.seq_len);
    int input = -1;
    checkpoint_inputs_.assign(layout_.blocks, -1);  // region (block index) -> allocation
    std::vector<int> cached_weight_copies;  // [Autocast over fp32 parameters] FSDP2's, until forward ends
    for (std::size_t i = 0; i < layout_.forward.size(); ++i) {
      const Event& e = layout_.forward[i];
      if (e.kind == Event::pre) {
        policy_->pre_forward(e.unit);
        continue;
      }
      if (e.kind == Event::post) {
        policy_->post_forward(e.unit);
        continue;
      }
      const models::ModuleCosts& c = costs_of(*e.module);
      const int op = issue_forward_compute(OpKind::compute_fwd, "fwd ", e, c, b, seq);
      expert_all_to_alls(op, e, c, b * seq, false);
      if (input < 0)
        input = step_.alloc_at(op, checked_to_int64(8 * b * seq, "the input token ids' bytes"), MemCategory::input,
                               "input token ids");
      // What autograd saves for the backward: the module's activations; under op-level SAC
      // what its policy saves; inside a checkpointed block only the block's input.
      if (e.selective) {
        saved_activations_[i] = step_.alloc_at(op, sac_saved_bytes(c, b, seq), MemCategory::activation,
                                               Name{"activations of ", e.module->full_name, " (selective)"});
      } else if (e.region < 0) {
        saved_activations_[i] = step_.alloc_at(op, bytes_of(c.saved_activation_bytes, b, seq) + window_mask_bytes(c, b, seq),
                                               MemCategory::activation, Name{"activations of ", e.module->full_name});
      } else if (checkpoint_inputs_[e.region] < 0) {
        checkpoint_inputs_[e.region] = step_.alloc_at(op, bytes_of(c.input_bytes, b, seq, residual_bytes_scale_),
                                                      MemCategory::activation, Name{"checkpointed input of ", e.module->full_name});
      }
      if (training_.autocast()) {
        // Saved for backward outside a checkpointed block; inside one (no_grad) kept by autocast's
        // cache under FSDP2 until the forward ends, under FSDP1 freed after its GEMM, so only the
        // largest lives at a time.
        if (e.region < 0) {
          saved_weight_copies_[i] = autocast_weight_copies(op, c, false, Name{"autocast weight copies of ", e.module->full_name});
        } else if (scenario_.fsdp.version == 2) {
          cached_weight_copies.push_back(
              autocast_weight_copies(op, c, false, Name{"autocast cache: weight copies of ", e.module->full_name}));
        } else {
          int copy = autocast_weight_copies(op, c, true, Name{"autocast weight copy in ", e.module->full_name});
          step_.free_at(op, copy);
        }
      }
      transient_at(op, c, c.forward_transient_bytes, "forward_transient_bytes", b, seq,
                   Name{"forward transients of ", e.module->full_name});
      // Not saved here (checkpointed or selective), the mask's bias lives through the call only.
      if (const std::int64_t mask = window_mask_bytes(c, b, seq); mask > 0 && (e.region >= 0 || e.selective)) {
        int bias = step_.alloc_at(op, mask, MemCategory::temporary, Name{"attention mask of ", e.module->full_name});
        step_.free_at(op, bias);
      }
    }
    input_ids_ = input;
    for (int& copies : cached_weight_copies) step_.free_now(copies);  // the autocast region ends
  }

  // Expert parallelism: a MoE block's all-to-alls on the EP group. Forward (and a recompute)
  // dispatches each token's top_k copies to the ranks holding their experts and combines the
  // expert outputs back; backward runs the two in reverse (the combine's gradient is
  // dispatched, the dispatch's combined). torchtitan issues them as functional all_to_all_single
  // calls that the block's next op waits for, so they are issued after the block's compute op,
  // and a wait makes the compute stream wait for the second: the step pays them in series
  // (their place inside the block is not modelled). comm_bytes is one rank's send buffer, the
  // busiest rank's: its tokens x top_k copies of the hidden state times the imbalance's rank
  // load (planner/moe.h).
  // torchtitan's default dispatch around them (planner/ep_dispatch.h): in forward and a
  // recompute, the split sizes' all-to-all and their copy to the host, which the CPU waits for
  // before it issues the dispatch (a device-to-host sync); between the two all-to-alls the
  // permutation of the received rows into local-expert order and back (forward), or its
  // autograd (backward), as a copy op on the compute stream that NCCL's next all-to-all waits for.
  // Memory, the all-to-all convention (planner/collectives.h, docs/schema.md): the send buffer is
  // a tensor the block already holds (the dispatched copies and expert outputs the ledger saves,
  // models/transformer_costs.h), the receive buffer (comm_bytes, rounded up) is allocated by the
  // all-to-all op. The ledger counts one copy of each; while an all-to-all runs its send and its
  // receive buffer both exist, so the receive buffer is an allocation of its own: the first
  // one's is consumed by the second (freed when it is issued, as the experts consume the
  // dispatched tokens), the second one's when the compute stream takes the result (the wait).
  // The split sizes' receive buffer lives until the permutation; the permutation's own
  // temporaries (the vstack copy, the gathered and scattered rows) are not allocated here.
  void expert_all_to_alls(int compute_op, const Event& e, const models::ModuleCosts& c, double tokens, bool backward) {
    if (step_.groups.expert < 0 || !c.moe) return;
    const int ep = scenario_.fsdp.expert_parallel;
    const ExpertRouting r = expert_routing(*c.moe, tokens, ep, training_.moe_imbalance);
    const double rows = r.rank_load_factor * tokens * c.moe->top_k;
    const int token_bytes = models::dtype_bytes(training_.compute_dtype());  // hidden states: activations
    const double bytes = rows * static_cast<double>(c.moe->hidden_size) * token_bytes;
    const std::int64_t receive_bytes = checked_to_int64(std::ceil(bytes), "the all-to-all receive buffer's bytes");
    const TokenPermutation permutation =
        ep_token_permutation(rows, c.moe->hidden_size, r.local_experts, token_bytes);
    const std::string& module = e.module->full_name;
    int previous = compute_op, received = -1, splits = -1, host_copy = -1;
    if (!backward) {
      const int exchange =
          step_.add_op(OpKind::all_to_all, Stream::all_to_all, Name{"all-to-all split sizes ", module}, e.unit, module);
      step_.op(exchange).deps.push_back(compute_op);
      step_.op(exchange).comm_bytes = split_sizes_send_bytes(c.moe->experts);
      step_.op(exchange).group = step_.groups.expert;
      splits = step_.alloc_at(exchange, checked_to_int64(split_sizes_send_bytes(c.moe->experts), "split sizes"),
                              MemCategory::activation, Name{"all-to-all split sizes ", module, " receive buffer"});
      host_copy = step_.add_op(OpKind::d2h, Stream::compute, Name{"split sizes to the host ", module}, e.unit, module);
      step_.op(host_copy).deps.push_back(exchange);
      step_.op(host_copy).comm_bytes = split_sizes_host_bytes(ep);
      previous = host_copy;
    }
    const char* names[2] = {backward ? "all-to-all combine backward " : "all-to-all dispatch ",
                            backward ? "all-to-all dispatch backward " : "all-to-all combine "};
    for (int i = 0; i < 2; ++i) {
      const int a2a = step_.add_op(OpKind::all_to_all, Stream::all_to_all, Name{names[i], module}, e.unit, module);
      step_.op(a2a).deps.push_back(previous);
      if (i == 0 && host_copy >= 0) step_.op(a2a).cpu_waits.push_back(host_copy);
      step_.op(a2a).comm_bytes = bytes;
      step_.op(a2a).group = step_.groups.expert;
      const int receive = step_.alloc_at(a2a, receive_bytes, MemCategory::activation, Name{names[i], module, " receive buffer"});
      step_.free_at(a2a, received);
      received = receive;
      previous = a2a;
      if (i > 0) continue;
      const int permute = step_.add_op(OpKind::copy_out, Stream::compute,
                                       Name{backward ? "token permutation backward " : "token permutation ", module},
                                       e.unit, module);
      step_.op(permute).deps.push_back(a2a);
      step_.op(permute).hbm_bytes = backward ? permutation.backward_hbm_bytes : permutation.forward_hbm_bytes;
      step_.free_at(permute, splits);
      previous = permute;
    }
    const int wait = step_.add_op(OpKind::wait, Stream::compute, Name{"wait for the all-to-all of ", module}, e.unit, module);
    step_.op(wait).deps.push_back(previous);
    step_.free_at(wait, received);
  }

  // A module's forward, or its whole recompute under activation checkpointing (the forward
  // again): its FLOPs, memory traffic and kernels, after its unit's parameters are ready.
  int issue_forward_compute(OpKind kind, const char* prefix, const Event& e, const models::ModuleCosts& c, double b,
                            double seq) {
    const int op = step_.add_op(kind, Stream::compute, Name{prefix, e.module->full_name}, e.unit, e.module->full_name);
    Op& o = step_.op(op);
    o.flops = forward_kernel_flops(c, b, seq);
    o.attention_flops = kernel_attention_flops(c, b, seq);
    o.hbm_bytes = c.forward_hbm_bytes.at(b, seq) * activation_bytes_scale_;
    o.score_hbm_bytes = score_bytes(c.forward_hbm_bytes, b, seq) * activation_bytes_scale_;
    o.kernel_set = kernel_set_of(c, KernelPass::forward);
    depend_on_unit(op, e.unit);
    depend_on_inner_units(op, static_cast<std::size_t>(&e - layout_.forward.data()));
    return op;
  }

  // A compute op waits (on the GPU) for the parameters of its unit and of the enclosing units
  // when another stream made them ready.
  void depend_on_unit(int op, int u) {
    for (int v = u; v >= 0; v = step_.unit(v).parent) {
      const int ready = step_.params_ready_op[v];
      if (ready >= 0 && schedule_.ops[ready].stream != schedule_.ops[op].stream) schedule_.ops[op].deps.push_back(ready);
    }
  }
  // ... and on the units wrapped inside the module of forward event `event` (a MoE block's experts).
  void depend_on_inner_units(int op, std::size_t event) {
    auto it = layout_.inner_units.find(static_cast<int>(event));
    if (it == layout_.inner_units.end()) return;
    for (int v : it->second) {
      const int ready = step_.params_ready_op[v];
      if (ready >= 0 && schedule_.ops[ready].stream != schedule_.ops[op].stream) schedule_.ops[op].deps.push_back(ready);
    }
  }

  // The module's transient tensors (models/transformer_costs.h, "Transient memory"): alive only
  // while its forward or backward runs, so allocated and freed at the op; the peak sees them on
  // top of everything the op holds.
  // Allocated as tensors no larger than the module's largest transient tensor (autograd makes
  // them one by one), so the caching-allocator model can reuse cached blocks as PyTorch does.
  // `field` names the cost `p` is (forward_transient_bytes or backward_transient_bytes) for errors.
  void transient_at(int op, const models::ModuleCosts& c, const models::Polynomial& p, const char* field, double b,
                    double seq, const Name& name) {
    if (p.empty()) return;
    std::int64_t rest = bytes_of(p, b, seq);
    const std::int64_t piece = c.transient_tensor_bytes.empty() ? rest : bytes_of(c.transient_tensor_bytes, b, seq);
    check_transient_tensor_count(c, rest, piece, field, name, b, seq);
    // Each piece is made and freed at the op: its allocs and frees are lists of their own, and
    // the replay makes all of an op's allocations before its frees.
    while (rest > 0) {
      const std::int64_t n = piece > 0 ? std::min(piece, rest) : rest;
      int t = step_.alloc_at(op, n, MemCategory::temporary, name);
      step_.free_at(op, t);
      rest -= n;
    }
  }

  // A transient is a handful of tensors (autograd keeps few alive at once: the catalog's largest
  // transient is 3.4 times its largest tensor). Thousands of times is a mistake in the model,
  // and would make the step millions of allocations that take minutes to replay: refused where
  // the cost is written (the model file and the module's costs).
  static constexpr std::int64_t kMaxTransientTensors = 1024;
  void check_transient_tensor_count(const models::ModuleCosts& c, std::int64_t transient_bytes,
                                    std::int64_t tensor_bytes, const char* field, const Name& name, double b,
                                    double seq) const {
    if (tensor_bytes <= 0 || transient_bytes / tensor_bytes < kMaxTransientTensors) return;
    const std::string module = name.subject ? *name.subject : std::string();
    const std::string costs = c.json_path.empty() ? "model" : c.json_path;
    throw InputError(scenario_.model->file.empty() ? scenario_.file : scenario_.model->file,
                     join_json_path(costs, field),
                     "module \"" + module + "\": " + std::to_string(transient_bytes) + " bytes at micro_batch " +
                         std::to_string(static_cast<std::int64_t>(b)) + " x seq_len " +
                         std::to_string(static_cast<std::int64_t>(seq)) + " are " +
                         std::to_string(transient_bytes / tensor_bytes) + " times transient_tensor_bytes (" +
                         std::to_string(tensor_bytes) + " bytes): more than " + std::to_string(kMaxTransientTensors) +
                         " tensors alive at once. transient_tensor_bytes is the largest single transient tensor "
                         "(docs/model-schema.md): raise it, or leave it out to allocate the transient whole");
  }

  // What op-level SAC keeps from forward to backward: under torch.compile, minus the saved
  // outputs no backward node reads (the partitioner does not save them; models/model.h).
  std::int64_t sac_saved_bytes(const models::ModuleCosts& c, double b, double seq) const {
    std::int64_t saved = bytes_of(c.sac_saved_activation_bytes, b, seq);
    if (training_.execution == TrainingSpec::Execution::compiled) saved -= bytes_of(c.sac_unread_bytes, b, seq);
    return std::max<std::int64_t>(0, saved);
  }

  // Activation bytes of a model polynomial at the scenario's activation dtype (`scale`: the
  // residual stream's, residual_bytes_scale_, for a block's input and its gradient).
  std::int64_t bytes_of(const models::Polynomial& p, double b, double seq, double scale = 0) const {
    const double bytes = p.at(b, seq) * (scale > 0 ? scale : activation_bytes_scale_);
    if (!(bytes < 1e18))  // 1 EB: far past any GPU (the step's total is bounded in build())
      throw InputError(scenario_.file, "training.micro_batch",
                       "activation sizes overflow: micro_batch x seq_len is far too large for this model");
    return checked_to_int64(bytes, "activation bytes");
  }

  // ---- backward ------------------------------------------------------------------------------
  // [Loss outside the model] torchtitan computes the loss outside the model, so FSDP2's pre-backward
  // hook of the unit holding the output layer (registered on its output, the logits) fires once
  // the loss's backward has written the logits' gradient, not before it (FSDPState
  // _register_pre_backward_hook); that unit's backward prefetch of the last block then comes
  // after the loss's vocabulary-wide transients are gone (the session-37 FSDP2 audit: 0.41 GiB at
  // Llama-3.1-8B's peak). Under torchtitan's wrap, the event at `i` is the output unit's
  // post-forward and the module before it the output layer with its loss (its backward is two
  // ops: [Gradients after the loss]). A model that returns its loss (transformers) registers the
  // hook on the loss itself, which fires at once: the other wraps keep the hook first.
  bool loss_backward_comes_first(std::size_t i) const {
    if (scenario_.fsdp.wrap.policy != WrapPolicy::torchtitan || i == 0) return false;
    const Event& before = layout_.forward[i - 1];
    return before.kind == Event::compute && before.unit == layout_.forward[i].unit &&
           !costs_of(*before.module).backward_transient_after_grads_bytes.empty();
  }

  // The forward program in reverse: a unit's post-forward event is where its pre-backward
  // runs, its pre-forward event where its post-backward runs.
  void backward() {
    step_.phase = Phase::backward;
    const double b = static_cast<double>(training_.micro_batch), seq = static_cast<double>(training_.seq_len);
    std::vector<char> recomputed(layout_.blocks, 0);  // region -> recomputed this backward
    int deferred_pre_backward = -1;  // [Loss outside the model]
    for (std::size_t i = layout_.forward.size(); i-- > 0;) {
      const Event& e = layout_.forward[i];
      if (e.kind == Event::post) {
        if (loss_backward_comes_first(i)) deferred_pre_backward = e.unit;
        else policy_->pre_backward(e.unit);
        continue;
      }
      if (e.kind == Event::pre) {
        policy_->post_backward(e.unit);
        continue;
      }
      if (e.region >= 0 && !recomputed[e.region]) {
        recomputed[e.region] = true;
        recompute_region(e.region, b, seq);
      }
      const models::ModuleCosts& c = costs_of(*e.module);
      int recomputed_activations = e.selective ? selective_recompute(e, c, b, seq) : -1;
      // [Gradients after the loss] The output layer's weight gradient appears only after the
      // loss's vocabulary-wide backward moments are gone (ModuleCosts::
      // backward_transient_after_grads_bytes, T_after), so its backward is two ops: the loss's
      // memory-bound kernels with all their transients (T_all: fp32 tensors of the vocabulary's
      // width), freed, then the projection's GEMMs beside its gradients (G + T_after). The high-
      // water mark is max(T_all, G + T_after), and the caching-allocator model sees the tensors'
      // own sizes. Measured on an H100 (tests/data/hardware/memory-h100-2026-11-27.csv):
      // Llama-3.1-8B's output-layer gradient (1,002 MiB) counted beside log_softmax's backward put
      // the backward peak that much too high; allocated beside a transient cut to T_all - G, it
      // left PyTorch's third 2,004 MiB segment out of reserved memory (docs/accuracy.md).
      const bool late_grads = !c.backward_transient_after_grads_bytes.empty();
      if (late_grads) {
        const int loss = step_.add_op(OpKind::compute_bwd, Stream::compute, Name{"bwd ", e.module->full_name, " (loss)"},
                                      e.unit, e.module->full_name);
        step_.op(loss).hbm_bytes = backward_hbm_bytes(c, b, seq) * activation_bytes_scale_;
        step_.op(loss).score_hbm_bytes = backward_score_bytes(c, b, seq) * activation_bytes_scale_;
        depend_on_unit(loss, e.unit);
        transient_at(loss, c, c.backward_transient_bytes, "backward_transient_bytes", b, seq,
                     Name{"backward transients of ", e.module->full_name, " (loss)"});
        if (deferred_pre_backward >= 0) policy_->pre_backward(deferred_pre_backward);
        deferred_pre_backward = -1;
      }
      const int op = step_.add_op(OpKind::compute_bwd, Stream::compute, Name{"bwd ", e.module->full_name}, e.unit,
                                  e.module->full_name);
      Op& o = step_.op(op);
      o.flops = backward_flops(c, b, seq);
      o.attention_flops = 2.0 * kernel_attention_flops(c, b, seq);
      if (!late_grads) {
        o.hbm_bytes = backward_hbm_bytes(c, b, seq) * activation_bytes_scale_;
        o.score_hbm_bytes = backward_score_bytes(c, b, seq) * activation_bytes_scale_;
      }
      o.kernel_set = kernel_set_of(c, KernelPass::backward);
      depend_on_unit(op, e.unit);
      depend_on_inner_units(op, i);
      // Replicated gradients (NO_SHARD, ZERO1) accumulate in place in their persistent buffers.
      if (step_.sharded.grads) step_.allocate_grads(op, layout_.event_params[i], Name{"grads of ", e.module->full_name});
      if (late_grads) {
        transient_at(op, c, c.backward_transient_after_grads_bytes, "backward_transient_after_grads_bytes", b, seq,
                     Name{"backward transients of ", e.module->full_name});
      } else if (!c.backward_transient_bytes.empty() || !c.forward_transient_bytes.empty()) {
        // The module's backward transients, which include the gradient flowing in and the
        // gradient w.r.t. its input (models/transformer_costs.h); none when its backward
        // allocates nothing (Liger's fused linear cross-entropy returns gradients it made in forward).
        transient_at(op, c, c.backward_transient_bytes, "backward_transient_bytes", b, seq,
                     Name{"backward transients of ", e.module->full_name});
      } else {
        // A model without transient costs: the gradient w.r.t. the module's input lives while
        // the op runs.
        int grad_input = step_.alloc_at(op, bytes_of(c.input_bytes, b, seq, residual_bytes_scale_), MemCategory::temporary,
                                        Name{"input grad of ", e.module->full_name});
        step_.free_at(op, grad_input);
      }
      expert_all_to_alls(op, e, c, b * seq, true);
      step_.free_at(op, saved_activations_[i]);
      step_.free_at(op, saved_weight_copies_[i]);
      step_.free_at(op, recomputed_activations);
      if (e.region >= 0 && first_of_region(e)) step_.free_at(op, checkpoint_inputs_[e.region]);
    }
    step_.free_now(input_ids_);
  }

  // Op-level SAC: the unsaved ops run again (memory-bound ones and every other matmul),
  // rematerialising what the forward did not keep. Returns that allocation.
  int selective_recompute(const Event& e, const models::ModuleCosts& c, double b, double seq) {
    const int op = step_.add_op(OpKind::recompute, Stream::compute, Name{"recompute ", e.module->full_name}, e.unit,
                                e.module->full_name);
    Op& o = step_.op(op);
    o.flops = c.sac_recompute_flops.at(b, seq);
    o.hbm_bytes = c.forward_hbm_bytes.at(b, seq) * activation_bytes_scale_;
    o.score_hbm_bytes = score_bytes(c.forward_hbm_bytes, b, seq) * activation_bytes_scale_;
    o.kernel_set = kernel_set_of(c, KernelPass::selective_recompute);
    depend_on_unit(op, e.unit);
    const std::int64_t unsaved = bytes_of(c.saved_activation_bytes, b, seq) - sac_saved_bytes(c, b, seq);
    const int rematerialised = step_.alloc_at(op, std::max<std::int64_t>(0, unsaved), MemCategory::activation,
                                              Name{"recomputed activations of ", e.module->full_name});
    transient_at(op, c, c.forward_transient_bytes, "forward_transient_bytes", b, seq,
                 Name{"recompute transients of ", e.module->full_name});
    return rematerialised;
  }

  bool first_of_region(const Event& e) const {
    const std::vector<int>& events = layout_.region_events[e.region];
    return !events.empty() && layout_.forward[events.front()].module == e.module;
  }

  // Full activation checkpointing: the region's forward runs again before its backward and
  // saves its activations anew.
  void recompute_region(int region, double b, double seq) {
    for (const int i : layout_.region_events[region]) {
      const Event& f = layout_.forward[i];
      const models::ModuleCosts& c = costs_of(*f.module);
      const int op = issue_forward_compute(OpKind::recompute, "recompute ", f, c, b, seq);
      expert_all_to_alls(op, f, c, b * seq, false);
      saved_activations_[i] = step_.alloc_at(op, bytes_of(c.saved_activation_bytes, b, seq) + window_mask_bytes(c, b, seq),
                                             MemCategory::activation, Name{"recomputed activations of ", f.module->full_name});
      if (training_.autocast())
        saved_weight_copies_[i] = autocast_weight_copies(op, c, false, Name{"autocast weight copies of ", f.module->full_name});
      transient_at(op, c, c.forward_transient_bytes, "forward_transient_bytes", b, seq,
                   Name{"recompute transients of ", f.module->full_name});
    }
  }

  // ---- optimizer -----------------------------------------------------------------------------
  void optimizer_step() {
    step_.phase = Phase::optimizer;
    policy_->before_optimizer_step();
    std::int64_t elements = 0;
    for (const Unit& u : step_.plan.units)
      elements += step_.sharded.optimizer_state ? step_.shard(u.index).optimizer_numel : step_.shard(u.index).numel;
    const bool host = step_.optimizer_on_host();
    const int states = optimizer_states_per_param(training_.optimizer);
    const int master = step_.master_dtype_bytes;
    // ZeRO-Infinity's offload_optimizer nvme: each sub-group's fp32 master, states and gradient
    // are read in, stepped and the master and states written back (stage3.py _prepare_sub_group,
    // _release_sub_group). Without pipeline_read/pipeline_write (off by default, offload_config.py)
    // the reads, the step and the writes of the sub-groups run one after another, so the step
    // costs as one read, one step and one write of the whole partition.
    const double optimizer_swap_bytes = static_cast<double>(elements) * master * (1 + states);
    const int swap_in = step_.optimizer_on_nvme()
                            ? step_.nvme_swap(OpKind::nvme_read, optimizer_swap_bytes + static_cast<double>(elements) * master,
                                              "NVMe read optimizer state and grads", -1, -1)
                            : -1;
    const bool master_in_optimizer = training_.master_weights == MasterWeights::optimizer_state;
    // The gradient the step reads: the stored parameters' dtype on the GPU; on the host the
    // offloaded fp32 gradient (FSDP's sharded gradient in the parameters' dtype; DeepSpeed's fp32
    // host buffer, stage_1_and_2.py async_inplace_copy_grad_to_fp32_buffer_from_gpu, stage3.py
    // fp32_partitioned_groups_flat[i].grad).
    const int grad = host ? master : step_.stored_param_dtype_bytes;
    const double per_element = optimizer_step_bytes_per_element(master, grad, host) +
                               (master_in_optimizer ? step_.param_dtype_bytes : 0);
    const double step_hbm_bytes = training_.optimizer == Optimizer::none ? 0 : per_element * static_cast<double>(elements);
    const std::vector<OptimizerSubGroup> sub_groups = host ? std::vector<OptimizerSubGroup>{} : policy_->optimizer_sub_groups();
    int op = -1;
    if (!sub_groups.empty()) {
      op = step_sub_groups(sub_groups, step_hbm_bytes);
    } else {
      op = step_.add_op(OpKind::optimizer, host ? Stream::host : Stream::compute, "optimizer step", -1);
      for (int d : step_.gradient_ready_ops) step_.op(swap_in >= 0 ? swap_in : op).deps.push_back(d);
      if (swap_in >= 0) step_.op(op).deps.push_back(swap_in);
      step_.op(op).hbm_bytes = step_hbm_bytes;
      if (host) step_.op(op).comm_bytes = 0;
      if (!host && foreach_intermediates()) {
        int intermediates = step_.alloc_at(op, elements * master, MemCategory::temporary, "optimizer foreach intermediates");
        step_.free_at(op, intermediates);
      }
    }
    for (int& g : step_.sharded_grad) step_.free_at(op, g);  // zero_grad(set_to_none=True)
    mark_state_made_at_first_step(op);
    if (step_.optimizer_on_nvme())
      step_.nvme_swap(OpKind::nvme_write, optimizer_swap_bytes, "NVMe write optimizer state", -1, op);
    // offload_param nvme: the updated compute-dtype partitions go back to NVMe
    // (stage3.py _partitioned_params_swap_out).
    if (step_.params_on_nvme())
      step_.nvme_swap(OpKind::nvme_write, static_cast<double>(elements * step_.param_dtype_bytes),
                      "NVMe write updated params", -1, op);
    int updated = op;
    if (step_.deepspeed_offload() && !step_.params_on_host()) {
      // DeepSpeed's CPU step writes the updated partition in the compute dtype, then copies it
      // into the GPU's parameters (stage3.py _reassign_or_swap_out_partitioned_parameters;
      // stage_1_and_2.py step: bit16 partitions copied from the fp32 CPU partitions).
      updated = step_.add_op(OpKind::h2d, Stream::copy, "host-to-device updated params", -1);
      step_.op(updated).deps.push_back(op);
      step_.op(updated).comm_bytes = static_cast<double>(elements * step_.param_dtype_bytes);
    }
    if (!step_.sharded.params && step_.sharded.optimizer_state) all_gather_updated_params(step_, updated);
    policy_->after_optimizer_step(updated);
  }

  // [State made at the first step] torch.optim makes an optimizer's state in its first step()
  // (Optimizer._init_group: zeros_like per parameter, when `state` is still empty), after that
  // step's backward has freed the activations, so the state lands in segments the caching
  // allocator already holds. Measured on an H100 (tests/data/hardware/memory-h100-2026-11-27.csv):
  // with the state alive before the first step, the model's reserved memory was 8-12% high at
  // N = 8. DeepSpeed makes its fp32 partitions and states when the engine is built (stage3.py
  // _create_fp32_partitions, stage_1_and_2.py): before the first step.
  void mark_state_made_at_first_step(int optimizer_op) {
    if (scenario_.deepspeed.stated || optimizer_op < 0) return;
    for (Allocation& a : step_.schedule.allocations)
      if (a.persistent && a.category == MemCategory::optimizer_state && !on_host(a.placement))
        a.first_step_op = optimizer_op;
  }

  // HBM bytes one element's update moves (master-dtype accesses times `master`, gradient accesses
  // times `grad`), before the DeepSpeed layout's copy into the 16-bit parameters. Steady state
  // (the first step's state initialisation is not priced), amsgrad, maximize, capturable and
  // differentiable off (torch.optim's defaults).
  //  - fused (one kernel): read the parameter, the gradient and each state; write the parameter
  //    and each state: 2 + 2k master accesses and 1 gradient access. pytorch
  //    aten/src/ATen/native/cuda/fused_adam_utils.cuh FusedAdamMathFunctor (pytorch@a11d775):
  //    loads its depth-4 lists (param, grad, exp_avg, exp_avg_sq) and stores all but the gradient
  //    (`if (i != kGradIdx || grad_scale_ptr)`); the weight decay is applied in registers.
  //    DeepSpeed's FusedAdam moves the same (csrc/adam/multi_tensor_adam.cu AdamFunctor,
  //    deepspeedai/DeepSpeed@edaa722: loads g, p, m, v; stores p, m, v).
  //  - foreach (torch.optim's default on CUDA): one list op per term, each a multi-tensor kernel
  //    that reads and writes whole lists. AdamW, torch/optim/adamw.py _multi_tensor_adamw,
  //    non-capturable branch (pytorch@c15fcf4; adam.py _multi_tensor_adam with
  //    decoupled_weight_decay in later releases runs the same ops):
  //      _foreach_mul_(device_params, 1 - lr * weight_decay)        2 (default weight_decay 1e-2)
  //      _foreach_lerp_(device_exp_avgs, device_grads, 1 - beta1)   2 + 1 gradient
  //      _foreach_mul_(device_exp_avg_sqs, beta2)                   2
  //      _foreach_addcmul_(device_exp_avg_sqs, device_grads, device_grads, 1 - beta2)
  //                                                                 2 + 1 gradient: the gradient
  //        list is passed twice, and the kernel (ForeachPointwiseOp.cu foreach_pointwise_op_,
  //        PointwiseOpScalarFunctor depth 3) loads both from the same address in the same thread,
  //        so HBM serves it once
  //      exp_avg_sq_sqrt = _foreach_sqrt(device_exp_avg_sqs)        2 (a new list)
  //      _foreach_div_(exp_avg_sq_sqrt, bias_correction2_sqrt)      2
  //      _foreach_add_(exp_avg_sq_sqrt, eps)                        2
  //      _foreach_addcdiv_(device_params, device_exp_avgs, exp_avg_sq_sqrt, step_size)   4
  //    18 master and 2 gradient accesses. Adam (adam.py _multi_tensor_adam, pytorch@dc80ccd):
  //    the same without the decay op (weight_decay 0 by default), 16 and 2. SGD with momentum
  //    (sgd.py _multi_tensor_sgd, pytorch@0316fdc, weight_decay 0, dampening 0, no nesterov):
  //    _foreach_mul_(bufs, momentum) 2, _foreach_add_(bufs, device_grads, alpha=1 - dampening)
  //    2 + 1 gradient, _foreach_add_(device_params, device_grads = bufs, alpha=-lr) 3: 7 and 1.
  //  - a CPU step (offload), [CPU optimizer kernels]: DeepSpeed's offload steps Adam and AdamW
  //    with DeepSpeedCPUAdam (zero_force_ds_cpu_optimizer, true by default), one fused pass
  //    (csrc/includes/cpu_adam.h, Step_AVX: loads grad, exp_avg, exp_avg_sq and param, stores
  //    param, exp_avg and exp_avg_sq; deepspeedai/DeepSpeed@edaa722): the fused count. torch.optim
  //    on CPU tensors (FSDP's cpu_offload) runs foreach only on CUDA-like devices
  //    (optimizer.py _default_to_fused_or_foreach), so it takes the single-tensor loop
  //    (adamw.py _single_tensor_adamw: param.mul_ 2, exp_avg.lerp_ 2 + 1 gradient,
  //    exp_avg_sq.mul_ 2, .addcmul_ 2 + 1 gradient, sqrt 2, div 2, add_ 2, param.addcdiv_ 4: the
  //    foreach count above, pass by pass), unless fused=True (torch >= 2.4 has a fused CPU AdamW):
  //    the fused count.
  double optimizer_step_bytes_per_element(int master, int grad, bool host) const {
    const int states = optimizer_states_per_param(training_.optimizer);
    if (training_.optimizer == Optimizer::none) return 0;
    const bool deepspeed_cpu_adam = host && step_.deepspeed_offload() && training_.optimizer != Optimizer::sgd_momentum;
    if (deepspeed_cpu_adam || training_.optimizer_kernel == OptimizerKernel::fused) return (2.0 + 2.0 * states) * master + grad;
    switch (training_.optimizer) {
      case Optimizer::adamw: return 18.0 * master + 2.0 * grad;
      case Optimizer::adam: return 16.0 * master + 2.0 * grad;
      case Optimizer::sgd_momentum: return 7.0 * master + grad;
      case Optimizer::none: break;
    }
    return 0;
  }

  // [CPU optimizer threads] The threads a rank's CPU ops run on when the scenario does not say
  // (training.host_threads_per_rank): torchrun sets OMP_NUM_THREADS=1 for every process when it
  // starts more than one per node and the variable is unset (torch/distributed/run.py), so FSDP's
  // offloaded step runs on one thread; DeepSpeed's launcher leaves it unset unless
  // --bind_cores_to_rank (deepspeed/launcher/launch.py), and DeepSpeedCPUAdam's loop is an OpenMP
  // parallel for (cpu_adam.h): every hardware thread, the node's memory bandwidth shared.
  int host_threads_per_rank() const {
    if (training_.host_threads_per_rank) return *training_.host_threads_per_rank;
    return step_.deepspeed_offload() ? 0 : 1;
  }

  // Whether the GPU step holds an intermediate list as large as the parameters it updates:
  // torch.optim's foreach implementation does (_multi_tensor_adamw: torch._foreach_sqrt(
  // exp_avg_sqs) and the bias-corrected step size are new lists, torch/optim/adamw.py); a fused
  // kernel (fused=True, DeepSpeed's or Apex's FusedAdam) updates each element in registers.
  bool foreach_intermediates() const {
    return training_.optimizer != Optimizer::none && training_.optimizer_kernel == OptimizerKernel::foreach;
  }

  // DeepSpeed ZeRO-3's step (stage3.py step, deepspeedai/DeepSpeed@edaa722), one sub-group after
  // another on the compute stream; returns the last op. Per sub-group of n partition elements:
  //  - _prepare_fp32_grad_for_sub_group: `self.flatten(self.averaged_gradients[i]).to(fp32)`, the
  //    sub-group's gradient views of grad_partitions_flat_buffer (compute dtype) concatenated
  //    (torch.cat, a new n x b_c tensor, unless the sub-group has one parameter: a view) and cast
  //    to the master dtype (a new n x b_m tensor, unless the dtypes match and the concatenation is
  //    it); the concatenation is gone after the statement, the fp32 gradient is the fp32
  //    partition's .grad until _release_sub_group (`.grad = None`). A copy op of that traffic.
  //  - _optimizer_step: optimizer.step() on the sub-group's one flat fp32 partition: its share of
  //    the step's bytes and, with a foreach optimizer, its intermediates for n elements (b_m).
  int step_sub_groups(const std::vector<OptimizerSubGroup>& sub_groups, double step_hbm_bytes) {
    const int grad_bytes = step_.param_dtype_bytes, master = step_.master_dtype_bytes;
    const bool cast = training_.param_dtype != training_.master_dtype;
    std::int64_t total = 0;
    for (const OptimizerSubGroup& g : sub_groups) total += g.numel;
    int op = -1;
    for (std::size_t i = 0; i < sub_groups.size(); ++i) {
      const OptimizerSubGroup& g = sub_groups[i];
      const std::string index = std::to_string(i);
      const int prepare = step_.add_op(OpKind::copy_out, Stream::compute, Name{"fp32 grads of optimizer sub-group ", index}, -1);
      if (i == 0)
        for (int d : step_.gradient_ready_ops) step_.op(prepare).deps.push_back(d);
      const bool concatenated = g.params > 1;
      int flat = concatenated ? step_.alloc_at(prepare, step_.buffer_bytes(g.numel, grad_bytes), MemCategory::temporary,
                                               Name{"flattened grads of optimizer sub-group ", index})
                              : -1;
      int fp32_grad = flat;
      if (cast) {
        fp32_grad = step_.alloc_at(prepare, step_.buffer_bytes(g.numel, master), MemCategory::sharded_grad,
                                   Name{"fp32 grads of optimizer sub-group ", index});
        step_.free_at(prepare, flat);
      }
      const double n = static_cast<double>(g.numel);
      step_.op(prepare).hbm_bytes = (concatenated ? 2.0 * grad_bytes * n : 0) + (cast ? (grad_bytes + master) * n : 0);
      op = step_.add_op(OpKind::optimizer, Stream::compute, Name{"optimizer step of sub-group ", index}, -1);
      step_.op(op).hbm_bytes = total > 0 ? step_hbm_bytes * n / static_cast<double>(total) : 0;
      if (foreach_intermediates()) {
        int intermediates = step_.alloc_at(op, step_.buffer_bytes(g.numel, master), MemCategory::temporary,
                                           Name{"optimizer foreach intermediates of sub-group ", index});
        step_.free_at(op, intermediates);
      }
      step_.free_at(op, fp32_grad);
    }
    return op;
  }

  StepContext step_;  // the schedule being written; shared with the policy
  Plan& plan_;
  const std::int64_t stop_above_bytes_;  // [Hopeless plans]
  std::unique_ptr<FrameworkPolicy> policy_;
  const Scenario& scenario_;
  const TrainingSpec& training_;
  const PlanCache::Layout& layout_;  // units, forward program, parameter indices
  Schedule& schedule_;
  // Model costs are written for 16-bit activations: activation bytes scale by the compute
  // dtype's bytes over 2 (TrainingSpec::compute_dtype). The residual stream between blocks (a
  // checkpointed block's saved input, the gradient w.r.t. a block's input) is in param_dtype:
  // the same but under autocast, where the fp32 embedding output and the residual adds keep it
  // fp32 (an fp32 tensor plus a 16-bit one is fp32) while the GEMMs' outputs are 16-bit.
  const double activation_bytes_scale_;
  const double residual_bytes_scale_;
  std::vector<int> sharded_params_;  // unit -> its persistent sharded parameters on the GPU (-1: none)
  std::vector<int> saved_activations_;  // compute event -> its saved activations until its backward
  std::vector<int> saved_weight_copies_;  // compute event -> autocast's 16-bit weight copies until its backward
  std::vector<int> checkpoint_inputs_;  // region -> its checkpointed input until its backward
  int input_ids_ = -1;                  // the micro-step's input token ids
  const Float8Linears float8_;  // training.matmul_dtype fp8: which linears run in fp8
  std::optional<AttentionKernel> attention_kernel_;  // training.attention resolved (none: eager)
  // (module costs, pass) -> index into schedule_.kernel_sets, so the ops of one module share a set.
  std::unordered_map<const models::ModuleCosts*, int> kernel_set_by_pass_[3];
  // The output layer's costs for training.loss, when it differs from the model's (resolve_loss).
  std::vector<std::pair<const Module*, models::ModuleCosts>> swapped_costs_;
};

}  // namespace

int shard_rule_of(const Scenario& s) {
  // ZeRO-1 is no FSDP mode: its optimizer partitions are a flat buffer's, whatever fsdp.version
  // (FSDP2's rows gave Mixtral on 64 GPUs 0.97 N bytes of optimizer state for 0.125 N).
  if (s.fsdp.strategy == Strategy::ZERO1) return kFlatShards;
  const bool params_sharded = s.fsdp.strategy == Strategy::FULL_SHARD || s.fsdp.strategy == Strategy::HYBRID_SHARD;
  return shard_rule(s.fsdp.version, s.training.master_weights == MasterWeights::optimizer_state, params_sharded,
                    s.fsdp.wrap.policy == WrapPolicy::torchtitan);
}

namespace {

// Each unit's shard (planner/sharding.h) under `rule` (shard_rule_of), from the layout's memo
// when it has them.
const std::vector<UnitShard>& unit_shards(const PlanCache::Layout& layout, int shard_group, int rule,
                                          int expert_parallel) {
  constexpr std::size_t kShardings = 16;
  auto& memo = layout.shards_at;
  const auto it = std::find_if(memo.begin(), memo.end(), [&](const PlanCache::Layout::ShardsAt& s) {
    return s.shard_group == shard_group && s.shard_rule == rule && s.expert_parallel == expert_parallel;
  });
  if (it != memo.end()) {
    std::rotate(it, it + 1, memo.end());  // the latest last
    return memo.back().shards;
  }
  if (memo.size() == kShardings) memo.erase(memo.begin());
  PlanCache::Layout::ShardsAt computed{shard_group, rule, expert_parallel, {}};
  computed.shards.reserve(layout.units.size());
  for (const Unit& u : layout.units)
    computed.shards.push_back(expert_parallel > 1 && is_expert_unit(u)
                                  ? shard_expert_unit(u, shard_group, expert_parallel)
                                  : shard_unit(u, shard_group, rule));
  memo.push_back(std::move(computed));
  return memo.back().shards;
}

Plan plan_with(const Scenario& scenario, const PlanCache::Layout& layout, Naming naming,
               std::int64_t stop_above_bytes = kNeverGiveUp) {
  Plan plan;
  plan.units = layout.units;
  plan.shards = unit_shards(layout, scenario.fsdp.shard_group_size, shard_rule_of(scenario), scenario.fsdp.expert_parallel);
  StepBuilder(scenario, layout, naming, plan, stop_above_bytes).build();
  return plan;
}

}  // namespace

PlanCache::PlanCache() = default;
PlanCache::~PlanCache() = default;
PlanCache::PlanCache(PlanCache&&) noexcept = default;
PlanCache& PlanCache::operator=(PlanCache&&) noexcept = default;
void PlanCache::clear() { layouts_.clear(); }

PlanCache& thread_plan_cache() {
  thread_local PlanCache cache;
  return cache;
}

Plan plan_step(const Scenario& scenario) { return plan_step(scenario, thread_plan_cache(), Naming::readable); }

Plan plan_step(const Scenario& scenario, PlanCache& cache, Naming naming, std::int64_t stop_above_bytes) {
  constexpr std::size_t kLayouts = 16;
  auto& layouts = cache.layouts_;
  auto it = std::find_if(layouts.begin(), layouts.end(), [&](const auto& l) {
    return l->model.address() == scenario.model.address() && l->experts_wrapped == wraps_experts(scenario) &&
           l->modules_apart == fetches_per_module(scenario) &&
           same_layout_inputs(l->wrap, l->checkpointing, l->checkpoint_every, scenario.fsdp.wrap,
                              scenario.training.checkpointing, scenario.training.checkpoint_every);
  });
  if (it == layouts.end()) {
    if (layouts.size() == kLayouts) layouts.erase(layouts.begin());
    layouts.push_back(make_layout(scenario));
    ++cache.layouts_built_;
  } else {
    std::rotate(it, it + 1, layouts.end());  // most recently used last
  }
  return plan_with(scenario, *layouts.back(), naming, stop_above_bytes);
}

}  // namespace fsdpsim::planner
