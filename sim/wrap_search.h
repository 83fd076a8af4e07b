// Optimal wrapping: choose FSDP unit boundaries (contiguous groups of transformer blocks)
// that minimise exposed communication (or step time) under a memory budget.
//
// PyTorch's fsdp_milp (torch/distributed/_tools/fsdp_ilp.py) states the problem as a MILP
// over "is module i a unit". For a chain of blocks cut into contiguous groups the cost
// becomes separable: every term depends on at most three consecutive units, so a dynamic
// program over (previous unit, current unit) is exact for that cost and runs in
// O(blocks x G^3 x K) for units of at most G blocks and the K best partitions.
//
// The separable model (docs/sweep.md, "Optimal wrapping", states every assumption):
// per unit g and per micro-step class c (first, middle, last micro-step), from the cost
// model applied to the ops the planner issues for a one-block-per-unit plan, with byte
// counts scaled to the group's padded size:
//   FA(g)  forward: the all-gather stream (h2d, copy-in, all-gather) before g computes
//   FC(g)  forward: g's compute stream (copy-out, block forwards)
//   BA(g)  backward: g's re-gather (resharded after forward)
//   BC(g)  backward: g's compute stream (copy-out, recompute, block backwards, reduce-scatter copy-in)
//   R(g)   backward: g's gradient reduction (reduce-scatter, HSDP all-reduce, d2h, accumulate)
// Forward: the next unit's gather hides behind the current unit's compute (prefetch,
// explicit or by CPU run-ahead), the first unit's behind the root's modules before it.
// Backward: the gather of the unit before q and the reduction of the unit after q hide
// behind q's backward (sharing the links, so their times add); without backward prefetch
// the gather is exposed. The root is gathered at the step start and reduced at the end.
//   exposed = sum_c w_c [ FA(root) + max(0, FA(u1) - FCpre) + sum_k max(0, FA(u_k+1) - FC(u_k))
//                        + max(0, BA(un) - FCpost - BCpost)
//                        + sum_k max(0, BA(u_k-1) + R(u_k+1) - BC(u_k))
//                        + max(0, R(u1) - BCpre) + R(root) ] + optimizer-phase collectives
// Memory (allocated, on top of a base anchored so that the one-block-per-unit plan's
// modeled peak equals its replayed peak; device peak = that x the plan's reserved/allocated
// ratio + the device overhead):
//   forward of q (next r):  act(blocks before q ends) + P(q) + AG(q) + AG(r) [+ P(r) with forward_prefetch]
//   backward of q:          act(blocks before q ends) + P(q) + grads(q) + RS(r) [+ P(p) + AG(p) with backward prefetch]
// where P is the unsharded parameter bytes (0 when parameters stay gathered all step),
// AG the all-gather buffer, RS the reduce-scatter input. The peak is the largest term.
//
// The search returns the K best partitions of that model, re-evaluates them with the full
// planner and the analytic engine (the truth), and improves the engine's best of them by local
// search with the engine (re-split or merge two neighbouring units, split one, re-cut three into two).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/cost_model.h"
#include "planner/scenario.h"
#include "sim/sweep.h"

namespace fsdpsim::sim {

enum class WrapObjective { exposed_comm, step_time };
std::string to_string(WrapObjective o);

// A wrapping: unit sizes in blocks, in forward order (they sum to the number of blocks).
using Partition = std::vector<int>;
std::string partition_text(const Partition& p);  // "1+2+2+3"

struct WrapSearchOptions {
  WrapObjective objective = WrapObjective::exposed_comm;
  double headroom_bytes = 0;    // fits: device peak + headroom <= GPU memory
  int max_blocks_per_unit = 0;  // 0: min(blocks, 32)
  int candidates = 8;           // the model's K best, re-evaluated with the full planner + engine
  int local_search = 300;       // engine evaluations for local search from the best (0: none)
  bool memory_constraint = true;
};

// The separable cost model the dynamic program optimises.
class SeparableModel {
 public:
  // Plans the one-block-per-unit wrapping of `scenario` and derives the terms from it.
  // Throws InputError when the model has no blocks.
  static SeparableModel build(const planner::Scenario& scenario, WrapObjective objective);

  int blocks() const { return static_cast<int>(block_names_.size()); }
  const std::vector<std::string>& block_names() const { return block_names_; }
  // Blocks [begin, end) can form one unit (siblings: FSDP2 fully_shard([...]) needs it).
  bool can_group(int begin, int end) const;

  // A partition's modeled seconds: exposed communication and compute-stream time.
  struct Cost {
    double exposed = 0, compute = 0;
  };
  // What the DP minimises, compared lexicographically: exposed_comm -> (exposed, compute),
  // step_time -> (exposed + compute, exposed). The secondary part breaks the many exact
  // ties of the primary one (when communication hides, most wrappings expose the same).
  std::pair<double, double> key(const Cost& c) const;
  // Summed in the order the dynamic program sums it, so the two agree to the last bit.
  Cost cost(const Partition& p) const;
  double objective_seconds(const Partition& p) const { return key(cost(p)).first; }
  // ... and the modeled device peak.
  double peak_bytes(const Partition& p) const;
  bool fits(const Partition& p, double headroom_bytes) const;

  // The dynamic program: the k best partitions by objective (ties: the DP's order), with
  // units of at most `max_unit` blocks, that fit (when `constrained`).
  std::vector<Partition> best(int k, double headroom_bytes, int max_unit, bool constrained,
                              std::size_t* states = nullptr) const;

  // Anchors: the one-block-per-unit plan's replayed figures.
  double anchor_peak_allocated_bytes() const { return anchor_allocated_; }
  double reserved_ratio() const { return reserved_ratio_; }
  double gpu_memory_bytes() const { return gpu_bytes_; }
  double device_overhead_bytes() const { return overhead_bytes_; }

  // Terms (seconds per micro-step class, bytes), public for tests and reports.
  static constexpr int kClasses = 3;
  struct UnitTerms {
    double fa[kClasses]{}, fc[kClasses]{}, ba[kClasses]{}, bc[kClasses]{}, r[kClasses]{};
    double tail = 0;  // optimizer-phase collectives (ZeRO-1's parameter all-gather)
    double params = 0, ag_buffer = 0, grads = 0, rs_buffer = 0;  // bytes
  };
  const UnitTerms& unit(int begin, int end) const { return terms_[begin * (blocks() + 1) + end]; }

 private:
  // Pieces of the objective (see the header comment); `none` = -1 bounds.
  Cost init(int e) const;                             // first unit [0, e)
  Cost trans(int ps, int s, int e, int f) const;      // p=[ps,s) (ps<0: none), q=[s,e), next r=[e,f)
  Cost finish(int ps, int s) const;                   // p=[ps,s), last q=[s,L)
  double bwd(int c, const UnitTerms* p, const UnitTerms& q, const UnitTerms* r) const;
  double fwd_mem(int s, int e, int f) const;          // forward of q=[s,e), next [e,f) (f<0: none)
  double bwd_mem(int ps, int s, int e, int f) const;  // backward of q=[s,e), p=[ps,s), r=[e,f)
  double dynamic_budget(double headroom_bytes) const;

  WrapObjective objective_ = WrapObjective::exposed_comm;
  std::vector<std::string> block_names_;
  std::vector<int> parent_;  // per block: an id of its parent module
  std::vector<UnitTerms> terms_;
  std::vector<double> act_prefix_;  // activation bytes of blocks [0, j)
  double weight_[kClasses]{};
  int classes_ = 1;
  // Root (the modules no block holds), per class.
  double root_fa_[kClasses]{}, root_r_[kClasses]{}, fc_pre_[kClasses]{}, fc_post_[kClasses]{};
  double bc_pre_[kClasses]{}, bc_post_[kClasses]{};
  double root_tail_ = 0, root_compute_ = 0;
  bool backward_prefetch_ = true, forward_prefetch_ = false;
  double base_bytes_ = 0, anchor_allocated_ = 0, reserved_ratio_ = 1, gpu_bytes_ = 0, overhead_bytes_ = 0;
};

// FSDP2-style wrap: policy "modules" with one group of sibling block names per unit.
planner::WrapSpec wrap_spec_for(const SeparableModel& model, const Partition& p, const planner::WrapSpec& base);
nlohmann::json wrap_json_for(const SeparableModel& model, const Partition& p);

struct WrapCandidate {
  Partition partition;
  double model_objective_seconds = 0;  // the primary part of the model's key
  double model_exposed_seconds = 0;
  double model_step_seconds = 0;       // exposed + compute-stream time (per step, root and optimizer-phase collectives included)
  double model_peak_bytes = 0;  // modeled device peak
  bool model_fits = false;
  std::optional<PointMetrics> engine;  // full planner + analytic engine
  bool engine_fits = false;
  double engine_objective_seconds = 0;
};

struct WrapSearchResult {
  std::vector<std::string> blocks;
  std::vector<WrapCandidate> candidates;  // the model's best, in its order, with the engine's figures
  int dp_choice = -1;                      // candidates index: the engine's best that fits; -1: none
  bool model_found_fit = true;             // false: no partition fits by the model; candidates are unconstrained
  WrapCandidate per_block;                 // baseline: one unit per block
  // The answer: the engine's best of the DP's candidates, improved by local search with the
  // engine (boundary moves, merges, splits) when that finds better; found = false: none fits.
  bool found = false;
  WrapCandidate best;
  std::string best_from;                   // "dynamic program", "local search" or "one unit per block"
  nlohmann::json wrap;                     // best as a scenario "fsdp.wrap" value
  std::size_t dp_states = 0;
  int engine_evaluations = 0;
  double build_seconds = 0, dp_seconds = 0, refine_seconds = 0;
};

// Builds the model, runs the DP and re-evaluates its candidates with `evaluator`
// (default: the analytic engine).
WrapSearchResult search_wrapping(const planner::Scenario& scenario, const WrapSearchOptions& options,
                                 Evaluator* evaluator = nullptr);

// Every partition of the blocks into contiguous units (2^(blocks-1) of them; at most
// 2^20), scored by the model and, with `engine`, by the full planner + engine.
struct BruteForceResult {
  std::vector<WrapCandidate> all;  // in bitmask order (bit b: a boundary after block b)
  int model_best = -1;             // the model's best that fits by the model
  int engine_best = -1;            // the engine's best that fits by the engine
  int model_rank_of_engine_best = -1;  // its position in the model's order (0: the model's first)
};
BruteForceResult brute_force_wrapping(const planner::Scenario& scenario, const WrapSearchOptions& options,
                                      bool engine, Evaluator* evaluator = nullptr);

}  // namespace fsdpsim::sim
