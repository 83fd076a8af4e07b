#include "planner/plan.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <functional>
#include <memory>
#include <stdexcept>
#include <unordered_map>

#include "models/json_input.h"
#include "models/transformer_costs.h"

namespace fsdpsim::planner {

using models::Module;

namespace {

int ceil_div(int a, int b) { return (a + b - 1) / b; }

}  // namespace

// What planning derives from the model, the wrap policy and activation checkpointing alone.
struct PlanCache::Layout {
  // What it was built for: the addresses of the model's modules and parameters in pre-order
  // (the pointers below are valid while these are the model's), the wrap and checkpointing.
  std::vector<const void*> addresses;
  WrapSpec wrap;
  Checkpointing checkpointing = Checkpointing::none;
  int checkpoint_every = 1;

  // One step of the forward program: a unit's pre/post-forward hook or a module's compute.
  struct Event {
    enum Kind { pre, compute, post } kind;
    int unit = -1;                  // unit of the hook, or the innermost unit of the module
    const Module* module = nullptr; // compute only
    int region = -1;                // activation-checkpoint region (block index), -1 if none
    bool selective = false;         // inside a block under op-level selective checkpointing
  };

  std::vector<Unit> units;
  std::vector<Event> forward;
  std::vector<int> forward_units, backward_units;
  std::unordered_map<int, const Module*> region_first_module;  // checkpoint region -> its first costed module
  int blocks = 0;  // transformer blocks (checkpoint regions are block indices)
  // Canonical parameters by dense index (index_parameters).
  std::vector<const models::Parameter*> params;  // parameter -> the model's
  std::vector<int> param_owner;                  // parameter -> unit
  std::vector<std::vector<int>> unit_params;     // unit -> parameters it owns
  std::vector<std::vector<int>> event_params;    // forward event -> parameters its module uses (compute events)
};

namespace {

using Event = PlanCache::Layout::Event;

// An op's name or an allocation's label as prefix + subject + suffix, joined only when the
// plan keeps names: a sweep's plans do not, and building ~1,000 strings per plan was a
// tenth of a sweep point.
struct Name {
  Name(const char* p) : prefix(p) {}  // NOLINT: a plain literal is a name
  Name(const char* p, const std::string& s, const char* x = "") : prefix(p), subject(&s), suffix(x) {}
  std::string str() const {
    std::string r(prefix);
    if (subject) r += *subject;
    return r += suffix;
  }
  const char* prefix;
  const std::string* subject = nullptr;
  const char* suffix = "";
};

// The forward program: unit hooks and module computes in forward order, with checkpoint
// regions; then the units in forward and backward order.
void make_forward_program(const Scenario& sc, PlanCache::Layout& l) {
  const TrainingSpec& t = sc.training;
  std::unordered_map<const Module*, std::vector<int>> starts, ends;
  for (const Unit& u : l.units) {
    starts[u.modules.front()].push_back(u.index);
    ends[u.modules.back()].push_back(u.index);
  }
  std::unordered_map<const Module*, int> unit_of;
  for (const Unit& u : l.units)
    for (const Module* m : u.modules) unit_of[m] = u.index;
  static const std::vector<int> none;
  auto units_at = [&](const std::unordered_map<const Module*, std::vector<int>>& map, const Module* m)
      -> const std::vector<int>& {
    auto it = map.find(m);
    return it == map.end() ? none : it->second;
  };
  std::vector<std::string> types = block_types(sc.model, sc.fsdp.wrap);
  int block_index = 0;
  std::function<void(const Module&, int, int, bool)> walk = [&](const Module& m, int current_unit, int region,
                                                                 bool selective) {
    if (auto it = unit_of.find(&m); it != unit_of.end()) current_unit = it->second;
    for (int u : units_at(starts, &m)) l.forward.push_back({Event::pre, u, nullptr, -1});
    if (&m != &sc.model.root && std::find(types.begin(), types.end(), m.type) != types.end()) {
      const int i = block_index++;
      const bool checkpointed = t.checkpointing == Checkpointing::full ||
                                (t.checkpointing == Checkpointing::every_k && i % t.checkpoint_every == 0);
      if (checkpointed && region < 0) region = i;
      if (t.checkpointing == Checkpointing::selective) selective = true;
    }
    if (m.costs) {
      if (selective && m.costs->sac_saved_activation_bytes.empty())
        throw InputError(sc.file, "training.activation_checkpointing",
                         "selective checkpointing needs the model's sac_* costs, which module \"" + m.full_name +
                             "\" lacks (the Hugging Face importer writes them)");
      l.forward.push_back({Event::compute, current_unit, &m, region, selective});
    }
    for (const Module& c : m.children) walk(c, current_unit, region, selective);
    const std::vector<int>& ending = units_at(ends, &m);
    for (auto it = ending.rbegin(); it != ending.rend(); ++it) l.forward.push_back({Event::post, *it, nullptr, -1});
  };
  walk(sc.model.root, 0, -1, false);
  l.blocks = block_index;
  if (t.checkpointing != Checkpointing::none && block_index == 0)
    throw InputError(sc.file, "training.activation_checkpointing",
                     "the model has no transformer blocks to checkpoint");
  for (const Event& e : l.forward) {
    if (e.kind == Event::pre && e.unit != 0) l.forward_units.push_back(e.unit);
    if (e.kind == Event::compute && e.region >= 0) l.region_first_module.emplace(e.region, e.module);
  }
  l.forward_units.insert(l.forward_units.begin(), 0);
  for (auto it = l.forward.rbegin(); it != l.forward.rend(); ++it)
    if (it->kind == Event::post) l.backward_units.push_back(it->unit);
}

// Dense indices for the canonical parameters (those the units own; a tied parameter is
// stored once, under the parameter it is tied to), and the ones each costed module uses.
// Indices rather than maps keyed by pointer or name: a sweep plans thousands of points.
void index_parameters(PlanCache::Layout& l) {
  l.unit_params.assign(l.units.size(), {});
  std::vector<std::pair<const models::Parameter*, int>> index;  // sorted by address
  for (const Unit& u : l.units)
    for (const models::Parameter* p : u.params) {
      const int i = static_cast<int>(l.param_owner.size());
      index.emplace_back(p, i);
      l.param_owner.push_back(u.index);
      l.params.push_back(p);
      l.unit_params[u.index].push_back(i);
    }
  std::sort(index.begin(), index.end());
  std::unordered_map<std::string, int> by_name;  // for tied parameters only, built on first use
  auto canonical = [&](const models::Parameter& p) {
    if (p.tied_to.empty()) {
      auto it = std::lower_bound(index.begin(), index.end(), std::make_pair(&p, -1));
      if (it == index.end() || it->first != &p) throw std::logic_error("parameter " + p.full_name + " has no unit");
      return it->second;
    }
    if (by_name.empty())
      for (const auto& [param, i] : index) by_name.emplace(param->full_name, i);
    return by_name.at(p.tied_to);
  };
  l.event_params.assign(l.forward.size(), {});
  for (std::size_t i = 0; i < l.forward.size(); ++i) {
    if (l.forward[i].kind != Event::compute) continue;
    models::for_each_module(*l.forward[i].module, [&](const Module& m) {
      for (const models::Parameter& p : m.params) l.event_params[i].push_back(canonical(p));
    });
  }
}


class StepBuilder {
 public:
  StepBuilder(const Scenario& scenario, const PlanCache::Layout& layout, Naming naming, Plan& plan)
      : sc_(scenario), l_(layout), plan_(plan), s_(plan.schedule), t_(scenario.training), f_(scenario.fsdp),
        naming_(naming) {
    param_numel_.reserve(layout.params.size());
    for (const models::Parameter* p : layout.params) param_numel_.push_back(p->numel());
    b_c_ = models::dtype_bytes(t_.param_dtype);
    b_r_ = models::dtype_bytes(t_.reduce_dtype);
    b_m_ = models::dtype_bytes(t_.master_dtype);
    // FSDP stores parameters in their original (master) dtype; DeepSpeed ZeRO stores the
    // model in the compute dtype and keeps the master copy in the optimizer.
    b_o_ = t_.master_weights == MasterWeights::sharded_param ? b_m_ : b_c_;
    const bool zero2 = f_.strategy == Strategy::SHARD_GRAD_OP || f_.strategy == Strategy::HYBRID_SHARD_ZERO2;
    params_sharded_ = f_.strategy != Strategy::NO_SHARD && f_.strategy != Strategy::ZERO1 &&
                      !(zero2 && t_.master_weights == MasterWeights::optimizer_state);
    grads_sharded_ = f_.strategy != Strategy::NO_SHARD && f_.strategy != Strategy::ZERO1;
    optimizer_sharded_ = f_.strategy != Strategy::NO_SHARD;
    act_scale_ = b_c_ / 2.0;  // model costs are written for 16-bit activations
    resolve_loss();
    check_attention_kernel();
  }

  // The forward FLOPs MFU counts: 6N-style matmul FLOPs, plus attention as the kernel does it.
  // A causal mask leaves half the (query, key) pairs, and causal kernels skip the masked
  // tiles, so counting the whole square (PaLM appendix B) would credit work nobody does and let
  // MFU pass the GEMM ceiling at long sequences; attention of unknown causality counts whole.
  double model_forward_flops(double b, double seq) const {
    double flops = 0;
    models::for_each_module(sc_.model.root, [&](const Module& m) {
      if (!m.costs) return;
      flops += m.costs->forward_flops.at(b, seq);
      if (m.costs->attention && m.costs->attention->causal) flops -= 0.5 * m.costs->attention_flops.at(b, seq);
    });
    return flops;
  }

  void build() {
    s_.name = sc_.name;
    s_.world_size = sc_.world_size();
    s_.micro_steps = static_cast<int>(t_.grad_accum);
    const double b = static_cast<double>(t_.micro_batch), seq = static_cast<double>(t_.seq_len);
    s_.tokens_per_rank = b * seq * t_.grad_accum;
    s_.model_flops_per_rank = 3.0 * model_forward_flops(b, seq) * t_.grad_accum;
    make_groups();
    // The schedule is op by op; bound its size so a typo cannot exhaust memory.
    constexpr double kMaxEvents = 4e6;
    if (static_cast<double>(l_.forward.size()) * s_.micro_steps > kMaxEvents)
      throw InputError(sc_.file, "training.global_batch",
                       std::to_string(s_.micro_steps) + " micro-steps of " + std::to_string(l_.forward.size()) +
                           " forward events is too long a schedule to simulate op by op (limit 4M events)");
    unsharded_.assign(plan_.units.size(), -1);
    comm_buffer_.assign(plan_.units.size(), -1);
    reshard_copy_.assign(plan_.units.size(), -1);
    inflight_.assign(plan_.units.size(), -1);
    ready_.assign(plan_.units.size(), -1);
    grads_.assign(plan_.units.size(), {});
    activation_of_event_.assign(l_.forward.size(), -1);
    sharded_grad_.assign(plan_.units.size(), -1);
    replicated_grad_.assign(plan_.units.size(), -1);
    // Per micro-step about 3 ops (forward, recompute, backward) and 8 allocations (saved
    // activations, gradients, transient pieces) per costed module, and up to 10 ops and 8
    // allocations per unit (gathers, copies, reductions): reserving spares the sweep
    // (thousands of plans) the regrowth copies.
    const std::size_t computes = static_cast<std::size_t>(
        std::count_if(l_.forward.begin(), l_.forward.end(), [](const Event& e) { return e.kind == Event::compute; }));
    const std::size_t micro = static_cast<std::size_t>(s_.micro_steps), units = plan_.units.size();
    s_.ops.reserve((3 * computes + 10 * units) * micro + 16);
    s_.allocations.reserve((8 * computes + 8 * units) * micro + 3 * units);
    make_persistent_state();
    for (int micro = 0; micro < s_.micro_steps; ++micro) {
      micro_ = micro;
      has_grad_.assign(l_.param_owner.size(), 0);
      forward();
      backward();
    }
    optimizer_step();
  }

 private:
  // ---- the scenario's kernel choices -----------------------------------------------------
  // training.loss: the output layer's costs recomputed for the stated kind from the loss head
  // its costs record (models::LossHead). Here rather than in parse_scenario because a sweep
  // shares one parsed model among its points. The chunked kind's costs depend on b*s
  // (models/transformer_costs.h): always recomputed at this point's.
  void resolve_loss() {
    bool has_head = false;
    for (const Event& e : l_.forward) {
      if (e.kind != Event::compute || !e.module->costs->loss) continue;
      has_head = true;
      const models::LossHead& head = *e.module->costs->loss;
      const models::LossKind kind = t_.loss.value_or(head.kind);
      if (kind == head.kind && kind != models::LossKind::chunked) continue;
      const double tokens = static_cast<double>(t_.micro_batch) * static_cast<double>(t_.seq_len);
      swapped_costs_.emplace_back(e.module, models::lm_head_costs(head.hidden_size, head.vocab_size, kind, tokens));
    }
    if (t_.loss && !has_head)
      throw InputError(sc_.file, "training.loss",
                       "\"" + models::loss_kind_name(*t_.loss) + "\" needs the model's output layer to record its loss "
                       "head (a \"loss\" object in its costs: vocab_size, hidden_size, kind), which model \"" +
                           sc_.model.name + "\" lacks; re-import it with fsdpsim import-hf, or leave training.loss out");
  }

  // training.attention "eager": only for a model whose attention costs were computed for eager
  // attention (saved score matrices, a b*s^2 term in the blocks' saved activations); a model
  // imported for fused attention would be priced as fused under the name "eager".
  void check_attention_kernel() const {
    if (t_.attention != "eager") return;
    for (const Event& e : l_.forward) {
      if (e.kind != Event::compute || e.module->costs->attention_flops.empty()) continue;
      if (has_score_term(e.module->costs->saved_activation_bytes)) return;
    }
    throw InputError(sc_.file, "training.attention",
                     "\"eager\" needs a model whose attention costs materialise the score matrices; model \"" +
                         sc_.model.name + "\" was costed for fused attention: import it with fsdpsim import-hf "
                         "--eager-attention");
  }

  // The costs the planner prices a module with: the model's, or the output layer's for the
  // scenario's training.loss.
  const models::ModuleCosts& costs_of(const Module& m) const {
    for (const auto& [module, costs] : swapped_costs_)
      if (module == &m) return costs;
    return *m.costs;
  }
  // FLOPs a forward (or a recompute of it) runs, and its backward's work (models/model.h).
  static double forward_kernel_flops(const models::ModuleCosts& c, double b, double seq) {
    return (c.forward_kernel_flops ? *c.forward_kernel_flops : c.forward_flops).at(b, seq);
  }
  static double backward_flops(const models::ModuleCosts& c, double b, double seq) {
    return c.backward_flops ? c.backward_flops->at(b, seq) : 2.0 * c.forward_flops.at(b, seq);
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

  // ---- building blocks -------------------------------------------------------------
  int add_op(OpKind kind, Stream stream, const Name& name, int unit, const std::string& module = "") {
    Op op;
    op.id = static_cast<int>(s_.ops.size());
    op.kind = kind;
    op.stream = stream;
    if (naming_ == Naming::readable) op.name = name.str();
    op.unit = unit;
    op.module = module;
    op.micro_step = micro_;
    op.phase = phase_;
    last_op_ = op.id;
    s_.ops.push_back(std::move(op));
    return last_op_;
  }

  int new_alloc(std::int64_t bytes, MemCategory category, Stream stream, const Name& label,
                bool persistent = false, bool model_state = false) {
    Allocation a;
    a.id = static_cast<int>(s_.allocations.size());
    a.bytes = bytes;
    a.category = category;
    a.stream = stream;
    if (naming_ == Naming::readable) a.label = label.str();
    a.persistent = persistent;
    a.model_state = model_state;
    const int id = a.id;
    s_.allocations.push_back(std::move(a));
    return id;
  }

  // An allocation made when `op` is issued.
  int alloc_at(int op, std::int64_t bytes, MemCategory category, const Name& label, bool model_state = false) {
    int id = new_alloc(bytes, category, s_.ops[op].stream, label, false, model_state);
    s_.ops[op].allocs.push_back(id);
    return id;
  }

  // Frees happen in CPU order: hang them on the op issued last (or `op`).
  void free_at(int op, int& alloc) {
    if (alloc < 0) return;
    s_.ops[op].frees.push_back(alloc);
    alloc = -1;
  }
  void free_now(int& alloc) { free_at(last_op_, alloc); }

  const Unit& unit(int u) const { return plan_.units[u]; }
  const UnitShard& shard(int u) const { return plan_.shards[u]; }
  const std::string& label(int u) const {
    static const std::string root = "root";
    return unit(u).is_root ? root : unit(u).name;
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
    const double b = static_cast<double>(t_.micro_batch), seq = static_cast<double>(t_.seq_len), tokens = b * seq;
    KernelSet k;
    for (const models::Matmul& m : c.matmuls) {
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
    }
    // SAC keeps a fused attention's output; eager attention (bmm, not in the save list) runs
    // again, which the module's sac_recompute_flops then count in its b*s^2 term.
    const bool attention_runs = pass != KernelPass::selective_recompute ||
                                has_score_term(c.sac_recompute_flops);
    if (c.attention && attention_runs) {
      const models::AttentionSpec& a = *c.attention;
      k.has_attention = true;
      k.attention = {b, seq, seq, a.heads, a.kv_heads, a.head_dim, a.causal, a.window};
      k.attention_pass = pass == KernelPass::backward ? AttentionPass::backward : AttentionPass::forward;
      k.scores_materialized = has_score_term(c.forward_hbm_bytes);
    }
    // Identical modules (a model's repeated blocks) share one set.
    int index = -1;
    for (std::size_t i = 0; i < s_.kernel_sets.size() && index < 0; ++i)
      if (same_kernels(s_.kernel_sets[i], k)) index = static_cast<int>(i);
    if (index < 0) {
      index = static_cast<int>(s_.kernel_sets.size());
      s_.kernel_sets.push_back(std::move(k));
    }
    cache.emplace(&c, index);
    return index;
  }

  static bool same_kernels(const KernelSet& a, const KernelSet& b) {
    auto same_gemm = [](const GemmShape& x, const GemmShape& y) { return x.m == y.m && x.n == y.n && x.k == y.k; };
    const AttentionShape &x = a.attention, &y = b.attention;
    return a.gemms.size() == b.gemms.size() && std::equal(a.gemms.begin(), a.gemms.end(), b.gemms.begin(), same_gemm) &&
           a.has_attention == b.has_attention &&
           (!a.has_attention || (a.attention_pass == b.attention_pass && x.batch == y.batch && x.seq_q == y.seq_q &&
                                 x.seq_kv == y.seq_kv && x.heads == y.heads && x.kv_heads == y.kv_heads &&
                                 x.head_dim == y.head_dim && x.causal == y.causal && x.window == y.window &&
                                 a.scores_materialized == b.scores_materialized));
  }

  // ---- process groups ------------------------------------------------------------------
  int add_group(const std::string& name, int ranks, int nodes) {
    s_.groups.push_back({name, ranks, std::max(1, nodes)});
    return static_cast<int>(s_.groups.size()) - 1;
  }

  void make_groups() {
    const int gpn = sc_.cluster.gpus_per_node, world = sc_.world_size(), W = f_.shard_group_size;
    // Ranks are laid out node-major, so a group of consecutive ranks spans ceil(W/gpn) nodes;
    // the replicate group takes one rank from each shard group.
    shard_group_ = add_group("shard", W, ceil_div(W, gpn));
    // The replicate group takes one rank from each shard group: one per node when shard
    // groups span whole nodes, else ranks on every node.
    replicate_group_ = add_group("replicate", world / W, W >= gpn ? world / W : sc_.cluster.nodes);
    world_group_ = add_group("world", world, sc_.cluster.nodes);
    if (f_.reshard_after_forward > 1 && f_.reshard_after_forward < W)
      reshard_group_ = add_group("reshard", f_.reshard_after_forward, ceil_div(f_.reshard_after_forward, gpn));
  }

  // ---- persistent state ------------------------------------------------------------------
  void make_persistent_state() {
    const int states = optimizer_states_per_param(t_.optimizer);
    const int master_copy = t_.master_weights == MasterWeights::optimizer_state && t_.optimizer != Optimizer::none ? 1 : 0;
    for (const Unit& u : plan_.units) {
      const UnitShard& sh = shard(u.index);
      if (sh.numel == 0 || sc_.fsdp.cpu_offload) continue;  // offloaded state lives in host memory
      const std::string& name = label(u.index);
      if (params_sharded_)
        new_alloc(sh.local_numel * b_o_, MemCategory::sharded_param, Stream::compute, Name{"sharded params of ", name}, true, true);
      else
        new_alloc(sh.numel * b_o_, MemCategory::unsharded_param, Stream::compute, Name{"replicated params of ", name}, true, true);
      const std::int64_t opt_elems = optimizer_sharded_ ? sh.optimizer_numel : sh.numel;
      if (states + master_copy > 0)
        new_alloc(opt_elems * (states + master_copy) * b_m_, MemCategory::optimizer_state, Stream::compute,
                  Name{"optimizer state of ", name}, true, true);
      if (!grads_sharded_)
        replicated_grad_[u.index] = new_alloc(sh.numel * b_o_, MemCategory::unsharded_grad, Stream::compute,
                                              Name{"replicated grads of ", name}, true, true);
    }
  }

  // ---- unshard / reshard -----------------------------------------------------------------
  bool needs_gather(int u) const { return params_sharded_ && shard(u).numel > 0; }

  // Issues the copy-in and all-gather of unit u (FSDP2) or the all-gather into the flat
  // parameter (FSDP1). Nothing if it is unsharded or already in flight.
  void unshard(int u) {
    if (!needs_gather(u) || unsharded_[u] >= 0 || inflight_[u] >= 0) return;
    const UnitShard& sh = shard(u);
    const bool from_reshard_copy = reshard_copy_[u] >= 0;
    const int group = from_reshard_copy ? reshard_group_ : shard_group_;
    const std::string& name = label(u);
    if (f_.version == 1 && f_.limit_all_gathers && free_events_.size() >= 2) {
      // FSDP1's rate limiter: the CPU blocks until the oldest of two pending frees is done.
      pending_cpu_wait_ = free_events_.front();
      free_events_.pop_front();
    }
    int offload_copy = -1;
    if (sc_.fsdp.cpu_offload) {
      int h2d = add_op(OpKind::h2d, Stream::all_gather, Name{"h2d shard ", name}, u);
      take_cpu_wait(h2d);
      s_.ops[h2d].comm_bytes = static_cast<double>(sh.local_numel * b_o_);
      offload_copy = alloc_at(h2d, sh.local_numel * b_o_, MemCategory::temporary, Name{"host-to-device shard of ", name});
    }
    int copy_in = add_op(OpKind::copy_in, Stream::all_gather, Name{"copy-in ", name}, u);
    take_cpu_wait(copy_in);
    s_.ops[copy_in].hbm_bytes = static_cast<double>(sh.local_numel) * (b_o_ + b_c_);
    if (f_.version == 2) {
      int cast = -1;
      if (b_c_ != b_o_ && !from_reshard_copy)
        cast = alloc_at(copy_in, sh.local_numel * b_c_, MemCategory::temporary, Name{"cast shard of ", name});
      comm_buffer_[u] = alloc_at(copy_in, sh.gathered_numel * b_c_, MemCategory::all_gather_buffer, Name{"all-gather output of ", name});
      free_at(copy_in, cast);
    } else {
      // FSDP1 gathers straight into the padded flat parameter; the docs count a shard-sized
      // communication buffer beside it while the unit is unsharded (notes/fsdp.rst).
      comm_buffer_[u] = alloc_at(copy_in, sh.local_numel * b_c_, MemCategory::all_gather_buffer, Name{"all-gather input of ", name});
      unsharded_pending_ = alloc_at(copy_in, sh.gathered_numel * b_c_, MemCategory::unsharded_param,
                                    Name{"unsharded flat param of ", name}, held_params());
    }
    free_at(copy_in, offload_copy);
    int ag = add_op(OpKind::all_gather, Stream::all_gather, Name{"all-gather ", name}, u);
    s_.ops[ag].comm_bytes = static_cast<double>(sh.gathered_numel * b_c_);
    s_.ops[ag].group = group;
    inflight_[u] = ag;
    if (f_.version == 1) {
      unsharded_[u] = unsharded_pending_;
      unsharded_pending_ = -1;
      ready_[u] = ag;
      inflight_[u] = -1;
      free_now(reshard_copy_[u]);
    }
  }

  // FSDP2's wait_for_unshard: copy-out into the unsharded parameters on the compute
  // stream. In forward the all-gather output is kept until the next group's wait (so its
  // copy-out can overlap the next all-gather; FSDP2 avoids recordStream); in backward it
  // is released right after the copy-out (_fsdp_param_group.py, wait_for_unshard).
  void wait_unshard(int u, bool forward) {
    if (f_.version != 2 || inflight_[u] < 0) return;
    const UnitShard& sh = shard(u);
    if (forward) free_now(previous_ag_output_);
    int out = add_op(OpKind::copy_out, Stream::compute, Name{"copy-out ", label(u)}, u);
    s_.ops[out].deps.push_back(inflight_[u]);
    s_.ops[out].hbm_bytes = 2.0 * static_cast<double>(sh.gathered_numel * b_c_);
    unsharded_[u] = alloc_at(out, sh.gathered_numel * b_c_, MemCategory::unsharded_param,
                             Name{"unsharded params of ", label(u)}, held_params());
    if (forward) previous_ag_output_ = comm_buffer_[u];
    else free_at(out, comm_buffer_[u]);
    comm_buffer_[u] = -1;
    free_at(out, reshard_copy_[u]);
    inflight_[u] = -1;
    ready_[u] = out;
  }

  bool held_params() const { return params_sharded_ && f_.reshard_after_forward == 0; }

  void reshard(int u, bool after_forward) {
    if (unsharded_[u] < 0) return;
    if (after_forward && f_.reshard_after_forward > 1 && f_.reshard_after_forward < f_.shard_group_size) {
      // FSDP2 reshard_after_forward=k: keep this rank's 1/k slice of the gathered params.
      reshard_copy_[u] = alloc_at(last_op_, shard(u).gathered_numel * b_c_ / f_.reshard_after_forward,
                                  MemCategory::unsharded_param, Name{"post-forward 1/k copy of ", label(u)});
    }
    free_now(unsharded_[u]);
    free_now(comm_buffer_[u]);
    if (f_.version == 1) free_events_.push_back(last_op_);
    ready_[u] = -1;
  }

  void take_cpu_wait(int op) {
    if (pending_cpu_wait_ >= 0) s_.ops[op].cpu_waits.push_back(pending_cpu_wait_);
    pending_cpu_wait_ = -1;
  }

  void depend_on_unit(int op, int u) {
    for (int v = u; v >= 0; v = unit(v).parent)
      if (ready_[v] >= 0 && s_.ops[ready_[v]].stream != s_.ops[op].stream) s_.ops[op].deps.push_back(ready_[v]);
  }

  int next_in(const std::vector<int>& order, int u) const {
    auto it = std::find(order.begin(), order.end(), u);
    for (++it; it != order.end(); ++it)
      if (needs_gather(*it)) return *it;
    return -1;
  }

  // ---- forward -------------------------------------------------------------------------------
  void forward() {
    phase_ = Phase::forward;
    const double b = static_cast<double>(t_.micro_batch), seq = static_cast<double>(t_.seq_len);
    int input = -1;
    checkpoint_inputs_.assign(l_.blocks, -1);  // region (block index) -> allocation
    for (std::size_t i = 0; i < l_.forward.size(); ++i) {
      const Event& e = l_.forward[i];
      if (e.kind == Event::pre) {
        unshard(e.unit);
        wait_unshard(e.unit, true);
        if (f_.forward_prefetch) {
          int next = next_in(l_.forward_units, e.unit);
          if (next >= 0) unshard(next);
        }
        continue;
      }
      if (e.kind == Event::post) {
        const bool keep = unit(e.unit).is_root || f_.reshard_after_forward == 0;
        if (!keep) reshard(e.unit, true);
        // FSDP2's root post-forward frees the last all-gather output (_fsdp_state.py).
        if (unit(e.unit).is_root) free_now(previous_ag_output_);
        continue;
      }
      const models::ModuleCosts& c = costs_of(*e.module);
      int op = add_op(OpKind::compute_fwd, Stream::compute, Name{"fwd ", e.module->full_name}, e.unit, e.module->full_name);
      take_cpu_wait(op);
      s_.ops[op].flops = forward_kernel_flops(c, b, seq);
      s_.ops[op].attention_flops = c.attention_flops.at(b, seq);
      s_.ops[op].hbm_bytes = c.forward_hbm_bytes.at(b, seq) * act_scale_;
      s_.ops[op].score_hbm_bytes = score_bytes(c.forward_hbm_bytes, b, seq) * act_scale_;
      s_.ops[op].kernel_set = kernel_set_of(c, KernelPass::forward);
      depend_on_unit(op, e.unit);
      if (input < 0)
        input = alloc_at(op, static_cast<std::int64_t>(8 * b * seq), MemCategory::input, "input token ids");
      if (e.selective) {
        activation_of_event_[i] = alloc_at(op, sac_saved_bytes(c, b, seq), MemCategory::activation,
                                          Name{"activations of ", e.module->full_name, " (selective)"});
      } else if (e.region < 0) {
        activation_of_event_[i] = alloc_at(op, bytes_of(c.saved_activation_bytes, b, seq), MemCategory::activation,
                                           Name{"activations of ", e.module->full_name});
      } else if (checkpoint_inputs_[e.region] < 0) {
        checkpoint_inputs_[e.region] = alloc_at(op, bytes_of(c.input_bytes, b, seq), MemCategory::activation,
                                              Name{"checkpointed input of ", e.module->full_name});
      }
      transient_at(op, c, c.forward_transient_bytes, "forward_transient_bytes", b, seq,
                   Name{"forward transients of ", e.module->full_name});
    }
    input_ = input;
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
    check_transient_tensor_count(rest, piece, field, name, b, seq);
    std::vector<int> pieces;
    while (rest > 0) {
      const std::int64_t n = piece > 0 ? std::min(piece, rest) : rest;
      pieces.push_back(alloc_at(op, n, MemCategory::temporary, name));
      rest -= n;
    }
    for (int& t : pieces) free_at(op, t);
  }

  // A transient is a handful of tensors (autograd keeps few alive at once: the catalog's largest
  // transient is 3.4 times its largest tensor). Thousands of times is a mistake in the model,
  // and would make the step millions of allocations that take minutes to replay: refused.
  static constexpr std::int64_t kMaxTransientTensors = 1024;
  void check_transient_tensor_count(std::int64_t transient_bytes, std::int64_t tensor_bytes, const char* field,
                                    const Name& name, double b, double seq) const {
    if (tensor_bytes <= 0 || transient_bytes / tensor_bytes < kMaxTransientTensors) return;
    const std::string module = name.subject ? *name.subject : std::string();
    throw InputError(sc_.file, "model",
                     "module \"" + module + "\": costs." + field + " (" + std::to_string(transient_bytes) +
                         " bytes at micro_batch " + std::to_string(static_cast<std::int64_t>(b)) + " x seq_len " +
                         std::to_string(static_cast<std::int64_t>(seq)) + ") is " +
                         std::to_string(transient_bytes / tensor_bytes) + " times costs.transient_tensor_bytes (" +
                         std::to_string(tensor_bytes) + " bytes): more than " + std::to_string(kMaxTransientTensors) +
                         " tensors alive at once. transient_tensor_bytes is the largest single transient tensor "
                         "(docs/model-schema.md): raise it, or leave it out to allocate the transient whole");
  }

  // What op-level SAC keeps from forward to backward: under torch.compile, minus the saved
  // outputs no backward node reads (the partitioner does not save them; models/model.h).
  std::int64_t sac_saved_bytes(const models::ModuleCosts& c, double b, double seq) const {
    std::int64_t saved = bytes_of(c.sac_saved_activation_bytes, b, seq);
    if (t_.execution == TrainingSpec::Execution::compiled) saved -= bytes_of(c.sac_unread_bytes, b, seq);
    return std::max<std::int64_t>(0, saved);
  }

  std::int64_t bytes_of(const models::Polynomial& p, double b, double seq) const {
    const double bytes = p.at(b, seq) * act_scale_;
    if (!(bytes < 1e18))  // 1 EB: far past any GPU, and safe from int64 overflow when summed
      throw InputError(sc_.file, "training.micro_batch",
                       "activation sizes overflow: micro_batch x seq_len is far too large for this model");
    return static_cast<std::int64_t>(bytes);
  }

  // ---- backward ------------------------------------------------------------------------------
  void backward() {
    phase_ = Phase::backward;
    const double b = static_cast<double>(t_.micro_batch), seq = static_cast<double>(t_.seq_len);
    std::vector<char> recomputed(l_.blocks, 0);  // region -> recomputed this backward
    for (std::size_t i = l_.forward.size(); i-- > 0;) {
      const Event& e = l_.forward[i];
      if (e.kind == Event::post) {  // pre-backward
        unshard(e.unit);
        wait_unshard(e.unit, false);
        if (f_.backward_prefetch == BackwardPrefetch::pre || (f_.version == 2 && f_.backward_prefetch != BackwardPrefetch::none)) {
          int next = next_in(l_.backward_units, e.unit);
          if (next >= 0) unshard(next);
        }
        continue;
      }
      if (e.kind == Event::pre) {
        post_backward(e.unit);
        continue;
      }
      if (e.region >= 0 && !recomputed[e.region]) {
        recomputed[e.region] = true;
        recompute_region(e.region, b, seq);
      }
      const models::ModuleCosts& c = costs_of(*e.module);
      int recomputed_ops = -1;
      if (e.selective) {
        // Op-level SAC: the unsaved ops run again (memory-bound ones and every other matmul),
        // rematerialising what the forward did not keep.
        int re = add_op(OpKind::recompute, Stream::compute, Name{"recompute ", e.module->full_name}, e.unit, e.module->full_name);
        take_cpu_wait(re);
        s_.ops[re].flops = c.sac_recompute_flops.at(b, seq);
        s_.ops[re].hbm_bytes = c.forward_hbm_bytes.at(b, seq) * act_scale_;
        s_.ops[re].score_hbm_bytes = score_bytes(c.forward_hbm_bytes, b, seq) * act_scale_;
        s_.ops[re].kernel_set = kernel_set_of(c, KernelPass::selective_recompute);
        depend_on_unit(re, e.unit);
        const std::int64_t extra = bytes_of(c.saved_activation_bytes, b, seq) - sac_saved_bytes(c, b, seq);
        recomputed_ops = alloc_at(re, std::max<std::int64_t>(0, extra), MemCategory::activation,
                                  Name{"recomputed activations of ", e.module->full_name});
        transient_at(re, c, c.forward_transient_bytes, "forward_transient_bytes", b, seq,
                     Name{"recompute transients of ", e.module->full_name});
      }
      int op = add_op(OpKind::compute_bwd, Stream::compute, Name{"bwd ", e.module->full_name}, e.unit, e.module->full_name);
      take_cpu_wait(op);
      s_.ops[op].flops = backward_flops(c, b, seq);
      s_.ops[op].attention_flops = 2.0 * c.attention_flops.at(b, seq);
      s_.ops[op].hbm_bytes = backward_hbm_bytes(c, b, seq) * act_scale_;
      s_.ops[op].score_hbm_bytes = backward_score_bytes(c, b, seq) * act_scale_;
      s_.ops[op].kernel_set = kernel_set_of(c, KernelPass::backward);
      depend_on_unit(op, e.unit);
      if (grads_sharded_) allocate_grads(op, l_.event_params[i], Name{"grads of ", e.module->full_name});
      if (!c.backward_transient_bytes.empty() || !c.forward_transient_bytes.empty()) {
        // The module's backward transients, which include the gradient flowing in and the
        // gradient w.r.t. its input (models/transformer_costs.h); none when its backward
        // allocates nothing (Liger's fused linear cross-entropy returns gradients it made in forward).
        transient_at(op, c, c.backward_transient_bytes, "backward_transient_bytes", b, seq,
                     Name{"backward transients of ", e.module->full_name});
      } else {
        // A model without transient costs: the gradient w.r.t. the module's input lives while
        // the op runs.
        int grad_input = alloc_at(op, bytes_of(c.input_bytes, b, seq), MemCategory::temporary,
                                  Name{"input grad of ", e.module->full_name});
        free_at(op, grad_input);
      }
      free_at(op, activation_of_event_[i]);
      free_at(op, recomputed_ops);
      if (e.region >= 0 && first_of_region(e) ) free_at(op, checkpoint_inputs_[e.region]);
    }
    free_at(last_op_, input_);
  }

  // Autograd materialises a parameter's gradient when the backward of the first module
  // (in backward order) that uses it runs.
  void allocate_grads(int op, const std::vector<int>& params, const Name& name) {
    // (unit, elements) in unit order; a module's parameters are nearly always in one unit.
    std::vector<std::pair<int, std::int64_t>> numel_by_unit;
    for (int p : params) {
      if (has_grad_[p]) continue;
      has_grad_[p] = 1;
      const int u = l_.param_owner[p];
      auto it = std::find_if(numel_by_unit.begin(), numel_by_unit.end(), [&](const auto& e) { return e.first == u; });
      if (it == numel_by_unit.end()) numel_by_unit.emplace_back(u, param_numel_[p]);
      else it->second += param_numel_[p];
    }
    std::sort(numel_by_unit.begin(), numel_by_unit.end());
    for (const auto& [u, numel] : numel_by_unit)
      grads_[u].push_back(alloc_at(op, numel * b_c_, MemCategory::unsharded_grad, name));
  }

  bool first_of_region(const Event& e) const {
    auto it = l_.region_first_module.find(e.region);
    return it != l_.region_first_module.end() && it->second == e.module;
  }

  void recompute_region(int region, double b, double seq) {
    for (std::size_t i = 0; i < l_.forward.size(); ++i) {
      const Event& f = l_.forward[i];
      if (f.kind != Event::compute || f.region != region) continue;
      const models::ModuleCosts& c = costs_of(*f.module);
      int op = add_op(OpKind::recompute, Stream::compute, Name{"recompute ", f.module->full_name}, f.unit, f.module->full_name);
      take_cpu_wait(op);
      s_.ops[op].flops = forward_kernel_flops(c, b, seq);
      s_.ops[op].attention_flops = c.attention_flops.at(b, seq);
      s_.ops[op].hbm_bytes = c.forward_hbm_bytes.at(b, seq) * act_scale_;
      s_.ops[op].score_hbm_bytes = score_bytes(c.forward_hbm_bytes, b, seq) * act_scale_;
      s_.ops[op].kernel_set = kernel_set_of(c, KernelPass::forward);
      depend_on_unit(op, f.unit);
      activation_of_event_[i] = alloc_at(op, bytes_of(c.saved_activation_bytes, b, seq), MemCategory::activation,
                                         Name{"recomputed activations of ", f.module->full_name});
      transient_at(op, c, c.forward_transient_bytes, "forward_transient_bytes", b, seq,
                   Name{"recompute transients of ", f.module->full_name});
    }
  }

  void post_backward(int u) {
    const UnitShard& sh = shard(u);
    const std::string& name = label(u);
    if (needs_gather(u)) reshard(u, false);
    // ... and so does the root's post-backward callback.
    if (unit(u).is_root) free_now(previous_ag_output_);
    if (f_.version == 1 && f_.backward_prefetch == BackwardPrefetch::post) {
      int next = next_in(l_.backward_units, u);
      if (next >= 0) unshard(next);
    }
    if (sh.numel == 0) return;
    if (grads_sharded_) {
      // Parameters no costed module covers get their grads here.
      std::vector<int> rest;
      for (int p : l_.unit_params[u])
        if (!has_grad_[p]) rest.push_back(p);
      if (!rest.empty() && last_op_ >= 0) allocate_grads(last_op_, rest, Name{"grads of ", name});
    }
    const bool last_micro = micro_ == s_.micro_steps - 1;
    if (!grads_sharded_) {
      // NO_SHARD / ZERO1: grads accumulate in place in replicated buffers.
      if (f_.strategy == Strategy::ZERO1 && !last_micro) return;  // ZeRO-1 reduces once per step
      if (f_.strategy == Strategy::NO_SHARD && !last_micro) return;  // DDP's no_sync micro-steps
      const bool zero1 = f_.strategy == Strategy::ZERO1;
      int op = add_op(zero1 ? OpKind::reduce_scatter : OpKind::all_reduce,
                      zero1 ? Stream::reduce_scatter : Stream::all_reduce,
                      Name{zero1 ? "reduce-scatter " : "all-reduce ", name}, u);
      s_.ops[op].deps.push_back(last_compute_before(op));
      s_.ops[op].comm_bytes = static_cast<double>((zero1 ? sh.gathered_numel : sh.numel) * b_r_);
      s_.ops[op].group = world_group_;
      reduce_done_.push_back(op);
      return;
    }
    if (!f_.sync_grads_every_micro_step && s_.micro_steps > 1) {
      // Accumulation without communication: the unsharded gradients are kept, summed over
      // micro-steps; FSDP2 upcasts them to the reduce dtype (FSDPParam.to_accumulated_grad_if_needed,
      // _fsdp_param.py). The last micro-step reduces the sum.
      const int b_acc = f_.version == 2 && b_r_ != b_c_ ? b_r_ : b_c_;
      const bool first_micro = micro_ == 0;
      int acc = add_op(OpKind::copy_out, Stream::compute, Name{"accumulate unsharded grads ", name}, u);
      s_.ops[acc].hbm_bytes = static_cast<double>(sh.gathered_numel) * (b_c_ + (first_micro ? b_acc : 2 * b_acc));
      if (accumulated_grad_.empty()) accumulated_grad_.assign(plan_.units.size(), -1);
      if (accumulated_grad_[u] < 0)
        accumulated_grad_[u] = alloc_at(acc, sh.gathered_numel * b_acc, MemCategory::unsharded_grad,
                                        Name{"accumulated unsharded grads of ", name});
      free_grads(acc, u);
      if (!last_micro) return;
    }
    // Copy-in: flatten (FSDP1) or pad and cast (FSDP2) the unsharded grads into the
    // reduce-scatter input on the compute stream.
    if (f_.version == 2) free_now(previous_rs_input_);
    int copy_in = add_op(OpKind::copy_in, Stream::compute, Name{"reduce-scatter copy-in ", name}, u);
    s_.ops[copy_in].hbm_bytes = static_cast<double>(sh.gathered_numel) * (b_c_ + b_r_);
    int rs_input;
    if (f_.version == 1) {
      // FSDP1 concatenates the per-parameter grads into the flat grad (transiently 2x).
      rs_input = alloc_at(copy_in, sh.gathered_numel * b_c_, MemCategory::unsharded_grad, Name{"flat grad of ", name});
      free_grads(copy_in, u);
      if (b_r_ != b_c_) {
        int cast = alloc_at(copy_in, sh.gathered_numel * b_r_, MemCategory::reduce_scatter_buffer, Name{"reduce-dtype grad of ", name});
        free_at(copy_in, rs_input);
        rs_input = cast;
      }
    } else {
      rs_input = alloc_at(copy_in, sh.gathered_numel * b_r_, MemCategory::reduce_scatter_buffer, Name{"reduce-scatter input of ", name});
      free_grads(copy_in, u);
    }
    if (!accumulated_grad_.empty()) free_at(copy_in, accumulated_grad_[u]);
    const Stream rs_stream = f_.version == 1 ? Stream::all_gather : Stream::reduce_scatter;  // FSDP1: one NCCL stream
    int rs = add_op(OpKind::reduce_scatter, rs_stream, Name{"reduce-scatter ", name}, u);
    s_.ops[rs].deps.push_back(copy_in);
    s_.ops[rs].comm_bytes = static_cast<double>(sh.gathered_numel * b_r_);
    s_.ops[rs].group = shard_group_;
    const bool first_micro = micro_ == 0;
    const bool becomes_grad = first_micro && b_r_ == b_o_ && !sc_.fsdp.cpu_offload;
    int rs_output = alloc_at(rs, sh.local_numel * b_r_,
                             becomes_grad ? MemCategory::sharded_grad : MemCategory::reduce_scatter_buffer,
                             becomes_grad ? Name{"sharded grads of ", name} : Name{"reduce-scatter output of ", name}, becomes_grad);
    if (f_.version == 1) free_at(rs, rs_input);  // record_stream: freed in CPU order right away
    else previous_rs_input_ = rs_input;
    int last = rs;
    if (is_hybrid(f_.strategy) && sc_.replicas() > 1) {
      int ar = add_op(OpKind::all_reduce, Stream::all_reduce, Name{"all-reduce ", name}, u);
      s_.ops[ar].deps.push_back(rs);
      s_.ops[ar].comm_bytes = static_cast<double>(sh.local_numel * b_r_);
      s_.ops[ar].group = replicate_group_;
      last = ar;
    }
    if (sc_.fsdp.cpu_offload) {
      int d2h = add_op(OpKind::d2h, s_.ops[last].stream, Name{"device-to-host grads ", name}, u);
      s_.ops[d2h].comm_bytes = static_cast<double>(sh.local_numel * b_o_);
      free_at(d2h, rs_output);
      reduce_done_.push_back(d2h);
      return;
    }
    if (becomes_grad) {
      sharded_grad_[u] = rs_output;
      reduce_done_.push_back(last);
      return;
    }
    int post = add_op(OpKind::copy_out, s_.ops[last].stream, Name{"accumulate grads ", name}, u);
    s_.ops[post].hbm_bytes = static_cast<double>(sh.local_numel) * (b_r_ + 2 * b_o_);
    if (sharded_grad_[u] < 0)
      sharded_grad_[u] = alloc_at(post, sh.local_numel * b_o_, MemCategory::sharded_grad, Name{"sharded grads of ", name}, true);
    free_at(post, rs_output);
    reduce_done_.push_back(post);
  }

  void free_grads(int op, int u) {
    for (int& g : grads_[u]) free_at(op, g);
    grads_[u].clear();
  }

  int last_compute_before(int op) const {
    for (int i = op - 1; i >= 0; --i)
      if (s_.ops[i].stream == Stream::compute) return i;
    return 0;
  }

  // ---- optimizer -----------------------------------------------------------------------------
  void optimizer_step() {
    phase_ = Phase::optimizer;
    if (f_.version == 2) free_now(previous_rs_input_);
    free_now(previous_ag_output_);
    std::int64_t elements = 0;
    for (const Unit& u : plan_.units) elements += optimizer_sharded_ ? shard(u.index).optimizer_numel : shard(u.index).numel;
    const bool host = sc_.fsdp.cpu_offload;
    int op = add_op(OpKind::optimizer, host ? Stream::host : Stream::compute, "optimizer step", -1);
    for (int d : reduce_done_) s_.ops[op].deps.push_back(d);
    // Bytes one element moves: read master param, grad and each state; write param and states
    // (plus the compute-dtype copy when the master lives in the optimizer).
    const int states = optimizer_states_per_param(t_.optimizer);
    const bool ds_master = t_.master_weights == MasterWeights::optimizer_state;
    const double per_element = 2.0 * b_m_ + b_o_ + 2.0 * states * b_m_ + (ds_master ? b_c_ : 0);
    s_.ops[op].hbm_bytes = t_.optimizer == Optimizer::none ? 0 : per_element * static_cast<double>(elements);
    if (host) s_.ops[op].comm_bytes = 0;
    if (!host && t_.optimizer != Optimizer::none) {
      // torch.optim's foreach implementation materialises intermediate tensor lists (e.g.
      // sqrt(exp_avg_sq)) as large as the parameters it updates.
      int tmp = alloc_at(op, elements * b_m_, MemCategory::temporary, "optimizer foreach intermediates");
      free_at(op, tmp);
    }
    for (int& g : sharded_grad_) free_at(op, g);  // zero_grad(set_to_none=True)
    if (!params_sharded_ && optimizer_sharded_) {
      // ZeRO-1 (and DeepSpeed ZeRO-2): every rank updated its shard; gather the new params.
      for (const Unit& u : plan_.units) {
        if (shard(u.index).numel == 0) continue;
        int ag = add_op(OpKind::all_gather, Stream::all_gather, Name{"param all-gather ", label(u.index)}, u.index);
        s_.ops[ag].deps.push_back(op);
        s_.ops[ag].comm_bytes = static_cast<double>(shard(u.index).gathered_numel * b_c_);
        s_.ops[ag].group = world_group_;
      }
    }
  }

  const Scenario& sc_;
  const PlanCache::Layout& l_;  // units, forward program, parameter indices
  Plan& plan_;
  Schedule& s_;
  const TrainingSpec& t_;
  const FsdpSpec& f_;
  const Naming naming_;
  int b_c_ = 2, b_r_ = 4, b_m_ = 4, b_o_ = 4;
  bool params_sharded_ = true, grads_sharded_ = true, optimizer_sharded_ = true;
  double act_scale_ = 1;
  int shard_group_ = -1, replicate_group_ = -1, world_group_ = -1, reshard_group_ = -1;
  int micro_ = 0;
  Phase phase_ = Phase::forward;
  int last_op_ = -1;
  std::vector<int> unsharded_, comm_buffer_, reshard_copy_, inflight_, ready_, sharded_grad_, replicated_grad_;
  std::vector<int> accumulated_grad_;  // per unit: unsharded grads summed over micro-steps (grad_sync last_micro_step)
  std::vector<std::vector<int>> grads_;  // per unit: unsharded grad allocations of this micro-step
  std::vector<std::int64_t> param_numel_;  // canonical parameter -> elements
  std::vector<char> has_grad_;             // parameter -> gradient made this micro-step
  int unsharded_pending_ = -1;
  int previous_ag_output_ = -1;
  int previous_rs_input_ = -1;
  int pending_cpu_wait_ = -1;
  std::deque<int> free_events_;
  std::vector<int> activation_of_event_;  // compute event -> its saved activations until its backward
  std::vector<int> checkpoint_inputs_;    // region -> its checkpointed input until its backward
  int input_ = -1;
  std::vector<int> reduce_done_;
  // (module costs, pass) -> index into s_.kernel_sets, so the ops of one module share a set.
  std::unordered_map<const models::ModuleCosts*, int> kernel_set_by_pass_[3];
  // The output layer's costs for training.loss, when it differs from the model's (resolve_loss).
  std::vector<std::pair<const Module*, models::ModuleCosts>> swapped_costs_;
};

}  // namespace

namespace {

// The model's modules and parameters in pre-order, by address.
void model_addresses(const models::Model& model, std::vector<const void*>& out) {
  out.clear();
  models::for_each_module(model.root, [&](const Module& m) {
    out.push_back(&m);
    for (const models::Parameter& p : m.params) out.push_back(&p);
  });
}

// Whether a layout built for (wrap a, checkpointing a) serves (b): the fields each policy reads.
bool same_layout_inputs(const WrapSpec& a, Checkpointing ca, int every_a, const WrapSpec& b, Checkpointing cb,
                        int every_b) {
  // block_types names the checkpointed blocks under every policy.
  if (a.policy != b.policy || ca != cb || a.block_types != b.block_types) return false;
  if (ca == Checkpointing::every_k && every_a != every_b) return false;
  switch (a.policy) {
    case WrapPolicy::root: return true;
    case WrapPolicy::block: return true;
    case WrapPolicy::every_k_blocks: return a.every == b.every;
    case WrapPolicy::size: return a.min_num_params == b.min_num_params;
    case WrapPolicy::modules: return a.modules == b.modules;
  }
  return false;
}

std::unique_ptr<PlanCache::Layout> make_layout(const Scenario& scenario) {
  auto l = std::make_unique<PlanCache::Layout>();
  l->wrap = scenario.fsdp.wrap;
  l->checkpointing = scenario.training.checkpointing;
  l->checkpoint_every = scenario.training.checkpoint_every;
  l->units = build_units(scenario.model, scenario.fsdp.wrap, scenario.file);
  make_forward_program(scenario, *l);
  index_parameters(*l);
  return l;
}

Plan plan_with(const Scenario& scenario, const PlanCache::Layout& layout, Naming naming) {
  Plan plan;
  plan.units = layout.units;
  plan.shards.reserve(plan.units.size());
  for (const Unit& u : plan.units) plan.shards.push_back(shard_unit(u, scenario.fsdp.shard_group_size, scenario.fsdp.version));
  StepBuilder(scenario, layout, naming, plan).build();
  return plan;
}

}  // namespace

PlanCache::PlanCache() = default;
PlanCache::~PlanCache() = default;
PlanCache::PlanCache(PlanCache&&) noexcept = default;
PlanCache& PlanCache::operator=(PlanCache&&) noexcept = default;
void PlanCache::clear() { layouts_.clear(); }

Plan plan_step(const Scenario& scenario) { return plan_with(scenario, *make_layout(scenario), Naming::readable); }

Plan plan_step(const Scenario& scenario, PlanCache& cache, Naming naming) {
  constexpr std::size_t kLayouts = 16;
  model_addresses(scenario.model, cache.addresses_);
  auto& layouts = cache.layouts_;
  if (!layouts.empty() && layouts.front()->addresses != cache.addresses_) layouts.clear();  // another model
  auto it = std::find_if(layouts.begin(), layouts.end(), [&](const auto& l) {
    return same_layout_inputs(l->wrap, l->checkpointing, l->checkpoint_every, scenario.fsdp.wrap,
                              scenario.training.checkpointing, scenario.training.checkpoint_every);
  });
  if (it == layouts.end()) {
    if (layouts.size() == kLayouts) layouts.erase(layouts.begin());
    layouts.push_back(make_layout(scenario));
    layouts.back()->addresses = cache.addresses_;
    ++cache.layouts_built_;
  } else {
    std::rotate(it, it + 1, layouts.end());  // most recently used last
  }
  return plan_with(scenario, *layouts.back(), naming);
}

}  // namespace fsdpsim::planner
