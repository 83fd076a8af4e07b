#include "sim/wrap_search.h"

#include "planner/device_memory.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <limits>
#include <map>
#include <stdexcept>
#include <tuple>

#include "models/json_input.h"
#include "planner/fsdp_rules.h"
#include "planner/memory.h"
#include "planner/plan.h"
#include "planner/sharding.h"
#include "planner/units.h"
#include "sim/analytic.h"

namespace fsdpsim::sim {

using planner::Op;
using planner::OpKind;
using planner::Phase;
using planner::Stream;

namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr int kDefaultMaxUnit = 32;

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

enum Role { FA = 0, FC = 1, BA = 2, BC = 3, RR = 4, TAIL = 5, kRoles = 6 };

Role role_of(const Op& op) {
  if (op.phase == Phase::optimizer) return TAIL;
  if (op.phase == Phase::forward) return op.stream == Stream::compute ? FC : FA;
  if (op.kind == OpKind::reduce_scatter || op.kind == OpKind::all_reduce || op.kind == OpKind::d2h) return RR;
  if (op.stream == Stream::compute) return BC;
  if (op.kind == OpKind::copy_out) return RR;  // accumulating the reduced gradient, on the reduction stream
  return BA;
}

// Compute of the modules themselves: the same whatever the wrapping.
bool fixed_cost(const Op& op) { return planner::is_module_compute(op.kind); }

std::vector<int> starts_of(const Partition& p) {
  std::vector<int> s;
  int at = 0;
  for (int n : p) {
    s.push_back(at);
    at += n;
  }
  s.push_back(at);
  return s;
}

// ---- the pieces SeparableModel::build reads off the one-block-per-unit plan ------------------

constexpr int kClasses = SeparableModel::kClasses;

// The transformer blocks in forward (pre-order) order, each with an id of its parent module
// (blocks that share a parent can form one unit); a block inside a block is part of it.
struct BlockList {
  std::vector<std::string> names;
  std::vector<int> parent;
};

BlockList find_blocks(const models::Model& model, const std::vector<std::string>& types) {
  BlockList blocks;
  std::map<const models::Module*, int> parent_ids;
  std::function<void(const models::Module&, const models::Module*)> walk = [&](const models::Module& mod,
                                                                               const models::Module* parent) {
    if (&mod != &model.root && std::find(types.begin(), types.end(), mod.type) != types.end()) {
      blocks.names.push_back(mod.full_name);
      blocks.parent.push_back(parent_ids.emplace(parent, static_cast<int>(parent_ids.size())).first->second);
      return;
    }
    for (const models::Module& c : mod.children) walk(c, &mod);
  };
  walk(model.root, nullptr);
  return blocks;
}

// Which unit of the plan holds each block, and which block each unit is (-1: the root).
struct BlockUnits {
  std::vector<int> block_of_unit;
  std::vector<int> unit_of_block;
};

BlockUnits map_blocks_to_units(const planner::Plan& plan, const std::vector<std::string>& block_names) {
  std::map<std::string, int> unit_by_name;
  for (const planner::Unit& u : plan.units) unit_by_name[u.name] = u.index;
  BlockUnits map;
  map.block_of_unit.assign(plan.units.size(), -1);
  map.unit_of_block.resize(block_names.size());
  for (std::size_t b = 0; b < block_names.size(); ++b) {
    map.unit_of_block[b] = unit_by_name.at(block_names[b]);
    map.block_of_unit[map.unit_of_block[b]] = static_cast<int>(b);
  }
  return map;
}

// Micro-steps of one step fall in up to three classes that time alike: the first, the middle
// ones (their class taken from micro-step 1, weight M - 2) and the last.
struct MicroStepClasses {
  explicit MicroStepClasses(int micro_steps_in_plan) : micro_steps(std::max(1, micro_steps_in_plan)) {
    const int M = micro_steps;
    count = M == 1 ? 1 : M == 2 ? 2 : 3;
    weight[0] = 1;
    if (M == 2) weight[1] = 1;
    if (M > 2) {
      weight[1] = M - 2;
      weight[2] = 1;
    }
  }
  // The class of `micro`; -1 for the middle micro-steps after the first (micro-step 1 stands
  // for them all).
  int of(int micro) const {
    const int M = micro_steps;
    if (micro == 0) return 0;
    if (M == 2) return micro == 1 ? 1 : -1;
    if (micro == 1) return 1;
    if (micro == M - 1) return 2;
    return -1;
  }
  int micro_steps;
  int count = 1;
  double weight[kClasses]{};
};

// One block of the one-block-per-unit plan, per (class, role): the seconds that do not depend on
// the wrapping, and the ops whose bytes scale with the unit's size (priced again per group);
// the bytes the memory model reads.
struct BlockData {
  double fixed[kClasses][kRoles]{};
  std::vector<Op> scaled[kClasses][kRoles];
  double params = 0, ag_buffer = 0, grads = 0, rs_buffer = 0, activations = 0;
};

// The first and last compute op of any block, per micro-step (forward; backward and recompute):
// the root's compute before the first is "pre", after the last "post".
struct BlockComputeBounds {
  std::vector<int> first_fwd, last_fwd, first_bwd, last_bwd;
};

BlockComputeBounds block_compute_bounds(const planner::Schedule& s, const std::vector<int>& block_of_unit, int M) {
  BlockComputeBounds bounds{std::vector<int>(M, -1), std::vector<int>(M, -1), std::vector<int>(M, -1),
                            std::vector<int>(M, -1)};
  for (const Op& op : s.ops) {
    if (op.unit <= 0 || block_of_unit[op.unit] < 0 || op.micro_step >= M) continue;
    if (op.kind == OpKind::compute_fwd) {
      if (bounds.first_fwd[op.micro_step] < 0) bounds.first_fwd[op.micro_step] = op.id;
      bounds.last_fwd[op.micro_step] = op.id;
    }
    if (op.kind == OpKind::compute_bwd || op.kind == OpKind::recompute) {
      if (bounds.first_bwd[op.micro_step] < 0) bounds.first_bwd[op.micro_step] = op.id;
      bounds.last_bwd[op.micro_step] = op.id;
    }
  }
  return bounds;
}

// The class an op's seconds count in (optimizer-phase ops: class 0, counted once).
int class_of_op(const Op& op, Role role, const MicroStepClasses& classes) {
  return role == TAIL ? 0 : classes.of(op.micro_step);
}

// Per block: its ops' seconds by (class, role) and, from micro-step 0, its memory: the largest
// unsharded-parameter and all-gather buffers and its activations in forward, its gradients and
// largest reduce-scatter buffer in backward.
std::vector<BlockData> block_data(const planner::Schedule& s, const std::vector<double>& duration_seconds,
                                  const MicroStepClasses& classes, const std::vector<int>& block_of_unit, int blocks) {
  std::vector<BlockData> data(blocks);
  for (const Op& op : s.ops) {
    const int b = op.unit > 0 ? block_of_unit[op.unit] : -1;
    if (b < 0) continue;
    BlockData& bd = data[b];
    const Role role = role_of(op);
    const int c = class_of_op(op, role, classes);
    if (c >= 0) {
      if (fixed_cost(op)) bd.fixed[c][role] += duration_seconds[op.id];
      else bd.scaled[c][role].push_back(op);
    }
    if (op.micro_step != 0) continue;
    for (int a : op.allocs) {
      const planner::Allocation& al = s.allocations[a];
      const double bytes = static_cast<double>(al.bytes);
      if (op.phase == Phase::forward) {
        if (al.category == planner::MemCategory::unsharded_param) bd.params = std::max(bd.params, bytes);
        if (al.category == planner::MemCategory::all_gather_buffer) bd.ag_buffer = std::max(bd.ag_buffer, bytes);
        if (al.category == planner::MemCategory::activation) bd.activations += bytes;
      } else if (op.phase == Phase::backward) {
        if (al.category == planner::MemCategory::unsharded_grad && op.kind == OpKind::compute_bwd) bd.grads += bytes;
        if (al.category == planner::MemCategory::reduce_scatter_buffer) bd.rs_buffer = std::max(bd.rs_buffer, bytes);
      }
    }
  }
  return data;
}

// The root (and anything outside units), per class: constant terms of every wrapping. The
// root is gathered at the step start and reduced at the end, never re-gathered.
struct RootTerms {
  double fa[kClasses]{}, r[kClasses]{};
  double fc_pre[kClasses]{}, fc_post[kClasses]{}, bc_pre[kClasses]{}, bc_post[kClasses]{};
  double tail = 0;  // optimizer-phase collectives
};

RootTerms root_terms(const planner::Schedule& s, const std::vector<double>& duration_seconds,
                     const MicroStepClasses& classes, const std::vector<int>& block_of_unit) {
  const BlockComputeBounds bounds = block_compute_bounds(s, block_of_unit, classes.micro_steps);
  RootTerms root;
  for (const Op& op : s.ops) {
    if (op.unit > 0 && block_of_unit[op.unit] >= 0) continue;  // a block's op
    const double d = duration_seconds[op.id];
    const Role role = role_of(op);
    const int c = class_of_op(op, role, classes);
    if (role == TAIL) {
      if (op.unit >= 0 && op.kind != OpKind::optimizer) root.tail += d;
      continue;
    }
    if (c < 0 || op.unit < 0) continue;
    const int micro = op.micro_step;
    switch (role) {
      case FA: root.fa[c] += d; break;
      case RR: root.r[c] += d; break;
      case FC:
        if (bounds.first_fwd[micro] >= 0 && op.id > bounds.first_fwd[micro] && (op.id > bounds.last_fwd[micro]))
          root.fc_post[c] += d;
        else root.fc_pre[c] += d;
        break;
      case BC:
        if (bounds.first_bwd[micro] >= 0 && op.id > bounds.last_bwd[micro]) root.bc_pre[c] += d;
        else root.bc_post[c] += d;
        break;
      default: break;  // the root is never re-gathered
    }
  }
  return root;
}

// The cost model's seconds for a template op with its bytes scaled by `ratio`, memoised: groups
// of equal padded size price the same ops again and again.
class ScaledDurations {
 public:
  ScaledDurations(const planner::CostModel& cost, const planner::Schedule& s) : cost_(cost), s_(s) {}
  double operator()(Op op, double ratio) {
    op.comm_bytes *= ratio;
    op.hbm_bytes *= ratio;
    auto key = std::make_tuple(static_cast<int>(op.kind), static_cast<int>(op.stream), op.group, op.comm_bytes,
                               op.hbm_bytes);
    auto it = memo_.find(key);
    if (it != memo_.end()) return it->second;
    const double d = cost_.duration_seconds(op, s_);
    memo_.emplace(key, d);
    return d;
  }

 private:
  const planner::CostModel& cost_;
  const planner::Schedule& s_;
  std::map<std::tuple<int, int, int, double, double>, double> memo_;  // (kind, stream, group, comm, hbm) -> seconds
};

// The terms of the group [s0, e): the blocks' fixed seconds summed; the scaled ops and the
// parameter and buffer bytes of template block t at `ratio` (the group's gathered size over
// t's); the blocks' gradients summed.
SeparableModel::UnitTerms group_terms(const std::vector<BlockData>& data, int s0, int e, int t, double ratio,
                                      int classes, bool params_held, ScaledDurations& duration) {
  SeparableModel::UnitTerms ut;
  for (int c = 0; c < classes; ++c) {
    double role_seconds[kRoles]{};
    for (int b = s0; b < e; ++b)
      for (int r = 0; r < kRoles; ++r) role_seconds[r] += data[b].fixed[c][r];
    for (int r = 0; r < kRoles; ++r)
      for (const Op& op : data[t].scaled[c][r]) role_seconds[r] += duration(op, ratio);
    ut.fa[c] = role_seconds[FA];
    ut.fc[c] = role_seconds[FC];
    ut.ba[c] = role_seconds[BA];
    ut.bc[c] = role_seconds[BC];
    ut.r[c] = role_seconds[RR];
    if (c == 0) ut.tail = role_seconds[TAIL];
  }
  ut.params = params_held ? 0.0 : data[t].params * ratio;
  ut.ag_buffer = data[t].ag_buffer * ratio;
  ut.rs_buffer = data[t].rs_buffer * ratio;
  for (int b = s0; b < e; ++b) ut.grads += data[b].grads;
  return ut;
}

// Terms of every group [s, e) that can be one unit, of at most kDefaultMaxUnit blocks (all
// blocks when there are at most 64), indexed s x (blocks + 1) + e. A group's bytes follow its
// padded shard (planner::shard_unit of its parameters together).
std::vector<SeparableModel::UnitTerms> all_group_terms(const SeparableModel& m, const planner::Scenario& sc,
                                                       const planner::Plan& plan, const planner::CostModel& cost,
                                                       const std::vector<BlockData>& data,
                                                       const std::vector<int>& unit_of_block, int classes) {
  const int L = m.blocks();
  // Parameters kept unsharded from forward to backward are no per-unit transient (P = 0).
  const bool params_held = !planner::reshards_after_forward(sc.fsdp, /*is_root=*/false);
  std::vector<SeparableModel::UnitTerms> terms((L + 1) * (L + 1));
  ScaledDurations duration(cost, plan.schedule);
  const int W = sc.fsdp.shard_group_size;
  for (int s0 = 0; s0 < L; ++s0) {
    planner::Unit group;
    for (int e = s0 + 1; e <= L && e - s0 <= std::max(kDefaultMaxUnit, L <= 64 ? L : kDefaultMaxUnit); ++e) {
      if (!m.can_group(s0, e)) break;
      const planner::Unit& u = plan.units[unit_of_block[e - 1]];
      group.params.insert(group.params.end(), u.params.begin(), u.params.end());
      const double gathered = static_cast<double>(planner::shard_unit(group, W, planner::shard_rule_of(sc)).gathered_numel);
      // The template: the group's first block that gathers anything.
      int t = s0;
      for (int b = s0; b < e; ++b)
        if (plan.shards[unit_of_block[b]].gathered_numel > 0) {
          t = b;
          break;
        }
      const double t_gathered = static_cast<double>(plan.shards[unit_of_block[t]].gathered_numel);
      const double ratio = t_gathered > 0 ? gathered / t_gathered : 1.0;
      terms[s0 * (L + 1) + e] = group_terms(data, s0, e, t, ratio, classes, params_held, duration);
    }
  }
  return terms;
}

}  // namespace

std::string to_string(WrapObjective o) { return o == WrapObjective::step_time ? "step_time" : "exposed_comm"; }

std::string partition_text(const Partition& p) {
  std::string out;
  for (int n : p) {
    if (!out.empty()) out += '+';
    out += std::to_string(n);
  }
  return out;
}

// ---- building the model ---------------------------------------------------------------------

SeparableModel SeparableModel::build(const planner::Scenario& scenario, WrapObjective objective) {
  SeparableModel m;
  m.objective_ = objective;
  const models::Model& model = *scenario.model;
  // The separable terms below see one unit ahead (the triples p, q, r); deeper prefetch keeps
  // more units' all-gather outputs alive than they count, so the search would pass plans
  // that do not fit.
  if (scenario.fsdp.prefetch_depth != 1)
    throw InputError(scenario.file, "fsdp.prefetch_depth",
                     "the wrap search models one unit of prefetch; search with prefetch_depth 1, then "
                     "estimate the chosen wrap with prefetch_depth " + std::to_string(scenario.fsdp.prefetch_depth));

  BlockList blocks = find_blocks(model, planner::block_types(model, scenario.fsdp.wrap));
  m.block_names_ = std::move(blocks.names);
  m.parent_ = std::move(blocks.parent);
  if (m.block_names_.empty())
    throw InputError(scenario.file, "fsdp.wrap", "the model has no transformer blocks to group into units (no module "
                                                 "type with costs that repeats or is written with \"repeat\"); name them with fsdp.wrap.block_types");
  const int L = m.blocks();

  // The one-block-per-unit plan: the anchor of every term.
  planner::Scenario sc = scenario;
  sc.fsdp.wrap = wrap_spec_for(m, Partition(L, 1), scenario.fsdp.wrap);
  const planner::Plan plan = planner::plan_step(sc);
  const planner::CostModel cost(sc);
  const planner::Schedule& s = plan.schedule;
  m.gpu_bytes_ = sc.cluster.gpu.memory_bytes;
  m.overhead_bytes_ = planner::device_overhead(sc, s, cost).total_bytes;
  const planner::MemoryReport memory = planner::replay_memory(s, m.gpu_bytes_ - m.overhead_bytes_);
  const planner::OpCosts in = planner::price_ops(s, cost);
  // The next unit's gather hides behind a unit's backward compute only when it is issued in
  // the pre-backward; FSDP1's BACKWARD_POST issues it after that compute.
  m.backward_prefetch_ =
      planner::backward_prefetch_hook(sc.fsdp) == planner::BackwardPrefetchHook::pre_backward;
  m.forward_prefetch_ = sc.fsdp.forward_prefetch;

  const BlockUnits units = map_blocks_to_units(plan, m.block_names_);
  const MicroStepClasses classes(s.micro_steps);
  m.classes_ = classes.count;
  std::copy_n(classes.weight, kClasses, m.weight_);

  const std::vector<BlockData> data = block_data(s, in.duration_seconds, classes, units.block_of_unit, L);
  const RootTerms root = root_terms(s, in.duration_seconds, classes, units.block_of_unit);
  std::copy_n(root.fa, kClasses, m.root_fa_);
  std::copy_n(root.r, kClasses, m.root_r_);
  std::copy_n(root.fc_pre, kClasses, m.fc_pre_);
  std::copy_n(root.fc_post, kClasses, m.fc_post_);
  std::copy_n(root.bc_pre, kClasses, m.bc_pre_);
  std::copy_n(root.bc_post, kClasses, m.bc_post_);
  m.root_tail_ = root.tail;
  for (int c = 0; c < m.classes_; ++c)
    m.root_compute_ += m.weight_[c] * (m.fc_pre_[c] + m.fc_post_[c] + m.bc_pre_[c] + m.bc_post_[c]);

  m.act_prefix_.assign(L + 1, 0.0);
  for (int b = 0; b < L; ++b) m.act_prefix_[b + 1] = m.act_prefix_[b] + data[b].activations;
  m.terms_ = all_group_terms(m, sc, plan, cost, data, units.unit_of_block, m.classes_);

  // Anchor the memory model at the one-block-per-unit plan: the base is what its replayed peak
  // holds beyond the model's largest dynamic term.
  m.anchor_allocated_ = static_cast<double>(memory.peak_allocated_bytes);
  m.reserved_ratio_ = memory.peak_allocated_bytes > 0
                          ? static_cast<double>(memory.peak_reserved_bytes) / static_cast<double>(memory.peak_allocated_bytes)
                          : 1.0;
  m.base_bytes_ = 0;
  double dyn = 0;
  for (int b = 0; b < L; ++b) {
    dyn = std::max(dyn, m.fwd_mem(b, b + 1, b + 1 < L ? b + 2 : -1));
    dyn = std::max(dyn, m.bwd_mem(b > 0 ? b - 1 : -1, b, b + 1, b + 1 < L ? b + 2 : -1));
  }
  m.base_bytes_ = m.anchor_allocated_ - dyn;
  return m;
}

bool SeparableModel::can_group(int begin, int end) const {
  if (begin < 0 || end > blocks() || begin >= end) return false;
  for (int b = begin + 1; b < end; ++b)
    if (parent_[b] != parent_[begin]) return false;
  return true;
}

// ---- the objective ----------------------------------------------------------------------------

double SeparableModel::bwd(int c, const UnitTerms* p, const UnitTerms& q, const UnitTerms* r) const {
  const double gather = p ? p->ba[c] : 0.0;
  const double reduce = r ? r->r[c] : 0.0;
  if (backward_prefetch_) return std::max(0.0, gather + reduce - q.bc[c]);
  return gather + std::max(0.0, reduce - q.bc[c]);
}

std::pair<double, double> SeparableModel::key(const Cost& c) const {
  if (objective_ == WrapObjective::step_time) return {c.exposed + c.compute, c.exposed};
  return {c.exposed, c.compute};
}

SeparableModel::Cost SeparableModel::init(int e) const {
  const UnitTerms& q = unit(0, e);
  Cost v;
  for (int c = 0; c < classes_; ++c)
    v.exposed += weight_[c] * (root_fa_[c] + std::max(0.0, q.fa[c] - fc_pre_[c]) +
                               std::max(0.0, q.r[c] - bc_pre_[c]) + root_r_[c]);
  v.exposed += root_tail_ + q.tail;
  v.compute = root_compute_;
  for (int c = 0; c < classes_; ++c) v.compute += weight_[c] * (q.fc[c] + q.bc[c]);
  return v;
}

SeparableModel::Cost SeparableModel::trans(int ps, int s, int e, int f) const {
  const UnitTerms* p = ps >= 0 ? &unit(ps, s) : nullptr;
  const UnitTerms& q = unit(s, e);
  const UnitTerms& r = unit(e, f);
  Cost v;
  for (int c = 0; c < classes_; ++c) v.exposed += weight_[c] * (std::max(0.0, r.fa[c] - q.fc[c]) + bwd(c, p, q, &r));
  v.exposed += r.tail;
  for (int c = 0; c < classes_; ++c) v.compute += weight_[c] * (r.fc[c] + r.bc[c]);
  return v;
}

SeparableModel::Cost SeparableModel::finish(int ps, int s) const {
  const UnitTerms* p = ps >= 0 ? &unit(ps, s) : nullptr;
  const UnitTerms& q = unit(s, blocks());
  Cost v;
  for (int c = 0; c < classes_; ++c)
    v.exposed += weight_[c] * (bwd(c, p, q, nullptr) + std::max(0.0, q.ba[c] - fc_post_[c] - bc_post_[c]));
  return v;
}

double SeparableModel::fwd_mem(int s, int e, int f) const {
  const UnitTerms& q = unit(s, e);
  double v = act_prefix_[e] + q.params + q.ag_buffer;
  if (f >= 0) {
    const UnitTerms& r = unit(e, f);
    v += r.ag_buffer + (forward_prefetch_ ? r.params : 0.0);
  }
  return v;
}

double SeparableModel::bwd_mem(int ps, int s, int e, int f) const {
  const UnitTerms& q = unit(s, e);
  double v = act_prefix_[e] + q.params + q.grads;
  if (f >= 0) v += unit(e, f).rs_buffer;
  if (ps >= 0 && backward_prefetch_) v += unit(ps, s).params + unit(ps, s).ag_buffer;
  return v;
}

double SeparableModel::dynamic_budget(double headroom_bytes) const {
  return (gpu_bytes_ - headroom_bytes - overhead_bytes_) / reserved_ratio_ - base_bytes_;
}

SeparableModel::Cost SeparableModel::cost(const Partition& p) const {
  const std::vector<int> b = starts_of(p);
  const int n = static_cast<int>(p.size());
  if (n == 0 || b.back() != blocks()) throw std::invalid_argument("partition " + partition_text(p) + " does not cover the blocks");
  Cost v = init(b[1]);
  auto add = [&](const Cost& t) {
    v.exposed += t.exposed;
    v.compute += t.compute;
  };
  for (int k = 0; k + 1 < n; ++k) add(trans(k > 0 ? b[k - 1] : -1, b[k], b[k + 1], b[k + 2]));
  add(finish(n > 1 ? b[n - 2] : -1, b[n - 1]));
  return v;
}

double SeparableModel::peak_bytes(const Partition& p) const {
  const std::vector<int> b = starts_of(p);
  const int n = static_cast<int>(p.size());
  double dyn = 0;
  for (int k = 0; k < n; ++k) {
    const int f = k + 1 < n ? b[k + 2] : -1;
    dyn = std::max(dyn, fwd_mem(b[k], b[k + 1], f));
    dyn = std::max(dyn, bwd_mem(k > 0 ? b[k - 1] : -1, b[k], b[k + 1], f));
  }
  return (base_bytes_ + dyn) * reserved_ratio_ + overhead_bytes_;
}

bool SeparableModel::fits(const Partition& p, double headroom_bytes) const {
  const double budget = dynamic_budget(headroom_bytes);
  const std::vector<int> b = starts_of(p);
  const int n = static_cast<int>(p.size());
  for (int k = 0; k < n; ++k) {
    const int f = k + 1 < n ? b[k + 2] : -1;
    if (fwd_mem(b[k], b[k + 1], f) > budget) return false;
    if (bwd_mem(k > 0 ? b[k - 1] : -1, b[k], b[k + 1], f) > budget) return false;
  }
  return true;
}

// ---- the dynamic program ------------------------------------------------------------------------

std::vector<Partition> SeparableModel::best(int k, double headroom_bytes, int max_unit, bool constrained,
                                            std::size_t* states_out) const {
  const int L = blocks();
  const int built = L <= 64 ? L : kDefaultMaxUnit;
  const int G = std::max(1, std::min({max_unit > 0 ? max_unit : kDefaultMaxUnit, L, built}));
  k = std::max(1, k);
  const double budget = constrained ? dynamic_budget(headroom_bytes) : kInf;
  // State (ps, s, e): the last two units p = [ps, s) (none when s == 0) and q = [s, e).
  // Index: s, then d = s - ps (0 when none), then e - s - 1.
  auto index = [&](int ps, int s, int e) { return (s * (G + 1) + (ps < 0 ? 0 : s - ps)) * G + (e - s - 1); };
  struct Entry {
    Cost value;
    int from;  // predecessor state, -1 for the first unit
    int rank;  // entry of the predecessor
  };
  std::vector<std::vector<Entry>> table(static_cast<std::size_t>(L) * (G + 1) * G);
  std::size_t states = 0;
  auto sum = [](const Cost& a, const Cost& b) { return Cost{a.exposed + b.exposed, a.compute + b.compute}; };
  auto better = [&](const Entry& a, const Entry& b) {
    const auto ka = key(a.value), kb = key(b.value);
    return ka < kb || (ka == kb && (a.from < b.from || (a.from == b.from && a.rank < b.rank)));
  };
  std::vector<Entry> cand;
  // States in order of e: every predecessor (pps, ps, s) has s < e.
  for (int e = 1; e <= L; ++e) {
    for (int s = std::max(0, e - G); s < e; ++s) {
      if (!can_group(s, e)) continue;
      if (s == 0) {
        table[index(-1, 0, e)] = {{init(e), -1, 0}};
        ++states;
        continue;
      }
      for (int ps = std::max(0, s - G); ps < s; ++ps) {
        if (!can_group(ps, s)) continue;
        cand.clear();
        // Predecessors (pps, ps, s).
        auto pull = [&](int pps) {
          const int from = index(pps, ps, s);
          const std::vector<Entry>& list = table[from];
          if (list.empty()) return;
          if (constrained && (fwd_mem(ps, s, e) > budget || bwd_mem(pps, ps, s, e) > budget)) return;
          const Cost add = trans(pps, ps, s, e);
          for (int r = 0; r < static_cast<int>(list.size()); ++r) cand.push_back({sum(list[r].value, add), from, r});
        };
        if (ps == 0) pull(-1);
        else
          for (int pps = std::max(0, ps - G); pps < ps; ++pps)
            if (can_group(pps, ps)) pull(pps);
        if (cand.empty()) continue;
        const std::size_t keep = std::min<std::size_t>(k, cand.size());
        std::partial_sort(cand.begin(), cand.begin() + keep, cand.end(), better);
        table[index(ps, s, e)].assign(cand.begin(), cand.begin() + keep);
        ++states;
      }
    }
  }
  // Finish: the last unit ends at L.
  struct Final {
    Cost value;
    int state;
    int rank;
  };
  std::vector<Final> finals;
  for (int s = std::max(0, L - G); s < L; ++s) {
    if (!can_group(s, L)) continue;
    auto close = [&](int ps) {
      const int st = index(ps, s, L);
      const std::vector<Entry>& list = table[st];
      if (list.empty()) return;
      if (constrained && (fwd_mem(s, L, -1) > budget || bwd_mem(ps, s, L, -1) > budget)) return;
      const Cost add = finish(ps, s);
      for (int r = 0; r < static_cast<int>(list.size()); ++r) finals.push_back({sum(list[r].value, add), st, r});
    };
    if (s == 0) close(-1);
    else
      for (int ps = std::max(0, s - G); ps < s; ++ps)
        if (can_group(ps, s)) close(ps);
  }
  std::sort(finals.begin(), finals.end(), [&](const Final& a, const Final& b) {
    const auto ka = key(a.value), kb = key(b.value);
    return ka < kb || (ka == kb && (a.state < b.state || (a.state == b.state && a.rank < b.rank)));
  });
  if (finals.size() > static_cast<std::size_t>(k)) finals.resize(k);
  if (states_out) *states_out = states;
  // Back to partitions: a state's index gives its current unit's size.
  std::vector<Partition> out;
  for (const Final& f : finals) {
    Partition p;
    int st = f.state, r = f.rank;
    while (st >= 0) {
      p.push_back(st % G + 1);
      const Entry& en = table[st][r];
      st = en.from;
      r = en.rank;
    }
    std::reverse(p.begin(), p.end());
    out.push_back(p);
  }
  return out;
}

// ---- wrap specs -------------------------------------------------------------------------------

planner::WrapSpec wrap_spec_for(const SeparableModel& model, const Partition& p, const planner::WrapSpec& base) {
  planner::WrapSpec w;
  w.policy = planner::WrapPolicy::modules;
  w.block_types = base.block_types;  // activation checkpointing counts blocks by these types
  int at = 0;
  for (int n : p) {
    std::vector<std::string> group;
    for (int i = 0; i < n; ++i) group.push_back(model.block_names()[at + i]);
    w.modules.push_back(group);
    at += n;
  }
  return w;
}

nlohmann::json wrap_json_for(const SeparableModel& model, const Partition& p) {
  nlohmann::json modules = nlohmann::json::array();
  int at = 0;
  for (int n : p) {
    if (n == 1) {
      modules.push_back(model.block_names()[at]);
    } else {
      nlohmann::json group = nlohmann::json::array();
      for (int i = 0; i < n; ++i) group.push_back(model.block_names()[at + i]);
      modules.push_back(group);
    }
    at += n;
  }
  return {{"policy", "modules"}, {"modules", modules}};
}

// ---- search and brute force -------------------------------------------------------------------

namespace {

void score(WrapCandidate& c, const SeparableModel& model, const WrapSearchOptions& o) {
  const SeparableModel::Cost cost = model.cost(c.partition);
  c.model_objective_seconds = model.key(cost).first;
  c.model_exposed_seconds = cost.exposed;
  c.model_step_seconds = cost.exposed + cost.compute;
  c.model_peak_bytes = model.peak_bytes(c.partition);
  c.model_fits = model.fits(c.partition, o.headroom_bytes);
}

void run_engine(WrapCandidate& c, planner::Scenario& sc, const SeparableModel& model, const planner::WrapSpec& base,
                const WrapSearchOptions& o, Evaluator& ev) {
  sc.fsdp.wrap = wrap_spec_for(model, c.partition, base);
  c.engine = ev.evaluate(sc, "wrap-search");
  c.engine_fits = c.engine->device_peak_bytes + o.headroom_bytes <= c.engine->gpu_memory_bytes;
  c.engine_objective_seconds =
      o.objective == WrapObjective::step_time ? c.engine->step_seconds : c.engine->exposed_comm_seconds;
}

// The engine's order: fitting first, then the objective (equal within 1e-9 relative), the
// step time, the device peak. Strict: false for equals (the earlier candidate stays).
bool engine_better(const WrapCandidate& a, const WrapCandidate& b) {
  if (a.engine_fits != b.engine_fits) return a.engine_fits;
  auto differ = [](double x, double y) { return std::abs(x - y) > 1e-9 * std::max(std::abs(x), std::abs(y)); };
  if (differ(a.engine_objective_seconds, b.engine_objective_seconds))
    return a.engine_objective_seconds < b.engine_objective_seconds;
  if (differ(a.engine->step_seconds, b.engine->step_seconds)) return a.engine->step_seconds < b.engine->step_seconds;
  return a.engine->device_peak_bytes < b.engine->device_peak_bytes;
}

// Wrappings one move away: two neighbouring units re-split (a boundary moved anywhere
// between its neighbours) or merged, a unit split in two, three neighbouring units re-cut
// into two. O(blocks) of them.
std::vector<Partition> neighbours(const Partition& p, const SeparableModel& model, int G) {
  std::vector<Partition> out;
  const int n = static_cast<int>(p.size());
  auto push = [&](Partition q) {
    const std::vector<int> qb = starts_of(q);
    for (std::size_t k = 0; k < q.size(); ++k)
      if (q[k] < 1 || q[k] > G || !model.can_group(qb[k], qb[k + 1])) return;
    if (q != p && std::find(out.begin(), out.end(), q) == out.end()) out.push_back(std::move(q));
  };
  // Replaces units [k, k + m) by `parts`.
  auto replace = [&](int k, int m, const std::vector<int>& parts) {
    Partition q(p.begin(), p.begin() + k);
    q.insert(q.end(), parts.begin(), parts.end());
    q.insert(q.end(), p.begin() + k + m, p.end());
    push(std::move(q));
  };
  for (int k = 0; k + 1 < n; ++k) {
    const int both = p[k] + p[k + 1];
    replace(k, 2, {both});
    for (int a = 1; a < both; ++a) replace(k, 2, {a, both - a});
  }
  for (int k = 0; k < n; ++k)
    for (int a = 1; a < p[k]; ++a) replace(k, 1, {a, p[k] - a});
  for (int k = 0; k + 2 < n; ++k) {
    const int all = p[k] + p[k + 1] + p[k + 2];
    for (int a = 1; a < all; ++a) replace(k, 3, {a, all - a});
  }
  return out;
}

}  // namespace

WrapSearchResult search_wrapping(const planner::Scenario& scenario, const WrapSearchOptions& o, Evaluator* evaluator) {
  WrapSearchResult result;
  std::unique_ptr<Evaluator> own;
  if (!evaluator) {
    own = make_analytic_evaluator();
    evaluator = own.get();
  }
  auto t0 = Clock::now();
  const SeparableModel model = SeparableModel::build(scenario, o.objective);
  result.build_seconds = seconds_since(t0);
  result.blocks = model.block_names();
  const int L = model.blocks();
  const int G = std::max(1, std::min({o.max_blocks_per_unit > 0 ? o.max_blocks_per_unit : kDefaultMaxUnit, L,
                                      L <= 64 ? L : kDefaultMaxUnit}));

  t0 = Clock::now();
  std::vector<Partition> best = model.best(o.candidates, o.headroom_bytes, G, o.memory_constraint, &result.dp_states);
  if (best.empty() && o.memory_constraint) {
    result.model_found_fit = false;
    best = model.best(o.candidates, o.headroom_bytes, G, false, &result.dp_states);
  }
  result.dp_seconds = seconds_since(t0);

  t0 = Clock::now();
  planner::Scenario sc = scenario;
  std::map<Partition, WrapCandidate> seen;
  auto evaluate = [&](const Partition& p) -> const WrapCandidate& {
    auto it = seen.find(p);
    if (it != seen.end()) return it->second;
    WrapCandidate c;
    c.partition = p;
    score(c, model, o);
    run_engine(c, sc, model, scenario.fsdp.wrap, o, *evaluator);
    ++result.engine_evaluations;
    return seen.emplace(p, std::move(c)).first->second;
  };
  for (const Partition& p : best) {
    result.candidates.push_back(evaluate(p));
    const int i = static_cast<int>(result.candidates.size()) - 1;
    if (result.candidates[i].engine_fits &&
        (result.dp_choice < 0 || engine_better(result.candidates[i], result.candidates[result.dp_choice])))
      result.dp_choice = i;
  }
  result.per_block = evaluate(Partition(L, 1));

  // Descend with the engine from every start, best start first, while the budget lasts: the
  // DP's candidates and one unit per block. One start is not enough: the engine's landscape has
  // local optima the separable model does not see (collectives of one communicator queue
  // behind each other, planner/schedule.h [Communicator order]).
  std::vector<std::pair<WrapCandidate, std::string>> starts = {{result.per_block, "one unit per block"}};
  for (const WrapCandidate& c : result.candidates) starts.push_back({c, "dynamic program"});
  std::stable_sort(starts.begin(), starts.end(),
                   [&](const auto& a, const auto& b) { return engine_better(a.first, b.first); });
  WrapCandidate current = starts.front().first;
  result.best_from = starts.front().second;
  const int budget = result.engine_evaluations + std::max(0, o.local_search);
  for (const auto& [start, from] : starts) {
    if (o.local_search <= 0 || result.engine_evaluations >= budget) break;
    WrapCandidate here = start;
    bool moved = false;
    while (result.engine_evaluations < budget) {
      const WrapCandidate* step = nullptr;
      for (const Partition& q : neighbours(here.partition, model, G)) {
        if (result.engine_evaluations >= budget && !seen.count(q)) break;
        const WrapCandidate& c = evaluate(q);
        if (engine_better(c, step ? *step : here)) step = &c;
      }
      if (!step) break;
      here = *step;
      moved = true;
    }
    if (engine_better(here, current)) {
      current = here;
      result.best_from = moved ? "local search" : from;
    }
  }
  result.refine_seconds = seconds_since(t0);
  result.found = current.engine_fits;
  result.best = current;
  if (result.found) result.wrap = wrap_json_for(model, current.partition);
  return result;
}

BruteForceResult brute_force_wrapping(const planner::Scenario& scenario, const WrapSearchOptions& o, bool engine,
                                      Evaluator* evaluator) {
  BruteForceResult result;
  std::unique_ptr<Evaluator> own;
  if (engine && !evaluator) {
    own = make_analytic_evaluator();
    evaluator = own.get();
  }
  const SeparableModel model = SeparableModel::build(scenario, o.objective);
  const int L = model.blocks();
  if (L > 21) throw std::invalid_argument("brute force over " + std::to_string(L) + " blocks is 2^" +
                                          std::to_string(L - 1) + " partitions; at most 21 blocks");
  const int G = std::max(1, std::min(o.max_blocks_per_unit > 0 ? o.max_blocks_per_unit : kDefaultMaxUnit, L));
  planner::Scenario sc = scenario;
  std::vector<std::pair<double, double>> keys;
  for (std::uint32_t mask = 0; mask < (1u << (L - 1)); ++mask) {
    Partition p;
    int start = 0;
    bool ok = true;
    for (int b = 0; b < L; ++b) {
      if (b == L - 1 || (mask >> b) & 1u) {
        if (b + 1 - start > G || !model.can_group(start, b + 1)) ok = false;
        p.push_back(b + 1 - start);
        start = b + 1;
      }
    }
    if (!ok) continue;
    WrapCandidate c;
    c.partition = p;
    score(c, model, o);
    keys.push_back(model.key(model.cost(p)));
    if (engine) run_engine(c, sc, model, scenario.fsdp.wrap, o, *evaluator);
    result.all.push_back(std::move(c));
  }
  std::vector<int> order;
  for (int i = 0; i < static_cast<int>(result.all.size()); ++i) {
    const WrapCandidate& c = result.all[i];
    if (c.model_fits || !o.memory_constraint) order.push_back(i);
    if (engine && c.engine_fits && (result.engine_best < 0 || engine_better(c, result.all[result.engine_best])))
      result.engine_best = i;
  }
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return keys[a] < keys[b]; });
  if (!order.empty()) result.model_best = order.front();
  for (int r = 0; r < static_cast<int>(order.size()); ++r)
    if (order[r] == result.engine_best) result.model_rank_of_engine_best = r;
  return result;
}

}  // namespace fsdpsim::sim
