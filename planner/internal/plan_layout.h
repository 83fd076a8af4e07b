// Private to planner/: what planning derives from the model, the wrap policy and activation
// checkpointing alone (PlanCache::Layout): the units, the forward program (unit hooks and
// module computes in forward order, with checkpoint regions) and dense parameter indices.
// plan.cpp's PlanCache keeps layouts between plans; the step skeleton and the framework
// policies read them.
#pragma once

#include <array>
#include <memory>
#include <unordered_map>
#include <vector>

#include "planner/plan.h"

namespace fsdpsim::planner {

struct PlanCache::Layout {
  // What it was built for: the model (held, so the pointers below into it stay valid), the
  // wrap and checkpointing.
  models::SharedModel model;
  WrapSpec wrap;
  Checkpointing checkpointing = Checkpointing::none;
  int checkpoint_every = 1;
  bool experts_wrapped = false;  // expert parallelism: each experts module is its own unit
  bool modules_apart = false;    // DeepSpeed ZeRO-3: each module outside the groups its own unit
  bool unequal_head_dims = false;  // models::has_unequal_attention_head_dims (MLA): what "auto" resolves to

  // One step of the forward program: a unit's pre/post-forward hook or a module's compute.
  struct Event {
    enum Kind { pre, compute, post } kind;
    int unit = -1;                  // unit of the hook, or the innermost unit of the module
    const models::Module* module = nullptr;  // compute only
    int region = -1;                // activation-checkpoint region (block index), -1 if none
    bool selective = false;         // inside a block under op-level selective checkpointing
  };

  std::vector<Unit> units;
  std::vector<Event> forward;
  std::vector<int> forward_units, backward_units;  // units in pre-forward and in pre-backward order
  int blocks = 0;  // transformer blocks (checkpoint regions are block indices)
  // Checkpoint region -> its compute events (indices into `forward`), in forward order: what a
  // full recompute runs again, looked up rather than searched for (a search per region made the
  // backward quadratic in depth).
  std::vector<std::vector<int>> region_events;
  // Canonical parameters by dense index (index_parameters).
  std::vector<const models::Parameter*> params;  // parameter -> the model's
  std::vector<std::int64_t> param_numel;         // parameter -> its elements (numel(), counted once)
  std::vector<int> param_owner;                  // parameter -> unit
  std::vector<std::vector<int>> unit_params;     // unit -> parameters it owns
  std::vector<std::vector<int>> event_params;    // forward event -> parameters its module uses (compute events)
  // Compute event -> the units wrapped inside its module (a MoE block's experts under expert
  // parallelism): their hooks run around the compute, which waits for their parameters too.
  std::unordered_map<int, std::vector<int>> inner_units;
  // The model's forward FLOPs at (micro-batch, sequence) already computed, as {b, seq, flops}:
  // a sweep's points repeat a few pairs, and walking the module tree for it was a twentieth of
  // the 405B advice's planning (StepBuilder::model_forward_flops). A few, the latest last.
  mutable std::vector<std::array<double, 3>> forward_flops_at;
  // Every unit's shard at (shard group, FSDP version, expert parallel) already computed: the
  // points of a sweep and the advice's candidates meet a few, and sharding walks every
  // parameter (4% of the 405B advice, docs/benchmarks.md, session 29). A few, the latest last.
  struct ShardsAt {
    int shard_group = 0, shard_rule = 0, expert_parallel = 0;  // shard_rule: planner/sharding.h
    std::vector<UnitShard> shards;  // by unit
  };
  mutable std::vector<ShardsAt> shards_at;
  // The most ops and allocations a whole plan of this layout made per micro-step so far: what the
  // next plan reserves (StepBuilder::reserve_schedule), sparing it the vectors' regrowth copies
  // (8 of the 22 whole plans of the 405B advice regrew both; docs/benchmarks.md, session 29).
  mutable std::size_t most_ops_per_micro_step = 0, most_allocations_per_micro_step = 0;
};

// Builds the layout of the scenario's model, wrap and checkpointing; throws InputError for a
// wrap or checkpointing the model cannot have.
std::unique_ptr<PlanCache::Layout> make_layout(const Scenario& scenario);

// Whether a layout built for (wrap a, checkpointing a) serves (b): the fields each policy reads.
bool same_layout_inputs(const WrapSpec& a, Checkpointing ca, int every_a, const WrapSpec& b, Checkpointing cb,
                        int every_b);
// Whether the scenario wraps the experts as units of their own (expert parallelism).
inline bool wraps_experts(const Scenario& scenario) { return scenario.fsdp.expert_parallel > 1; }
// DeepSpeed ZeRO-3 (its `deepspeed` object, parameters partitioned): the coordinator fetches
// and releases each module's parameters in that module's hooks (plan_zero3.cpp), so the modules
// outside the wrapped blocks are units of their own (build_units' modules_apart).
inline bool fetches_per_module(const Scenario& scenario) {
  return scenario.deepspeed.stated && deepspeed_zero_stage(scenario) == 3;
}

}  // namespace fsdpsim::planner
