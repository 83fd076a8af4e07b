// Data parallelism with replicated gradients: NO_SHARD (DDP, or FSDP's NO_SHARD) and ZeRO-1.
// Every rank holds the whole model and a persistent gradient buffer the backward accumulates
// into in place (DDP's gradient buckets), so there is nothing to gather and nothing to
// reshard. Gradients are reduced once per step, in the last micro-step (DDP's no_sync() on
// the others, torch/nn/parallel/distributed.py): DDP all-reduces them, ZeRO-1 reduce-scatters
// them to the rank that owns each optimizer partition. After the step, ZeRO-1 and DeepSpeed's
// ZeRO-2 gather the updated parameters.
#include "planner/internal/plan_policy.h"

namespace fsdpsim::planner {

namespace {

class ReplicatedGradientsPolicy final : public FrameworkPolicy {
 public:
  using FrameworkPolicy::FrameworkPolicy;

  // Parameters are replicated: no unshard, no reshard.
  void pre_forward(int) override {}
  void post_forward(int) override {}
  void pre_backward(int) override {}

  // The unit's gradients are reduced after its last backward compute of the step: one
  // all-reduce (DDP) or reduce-scatter (ZeRO-1) over every rank, in the reduce dtype.
  void post_backward(int u) override {
    const UnitShard& sh = step_.shard(u);
    if (sh.numel == 0 || !step_.last_micro_step()) return;
    const bool zero1 = step_.fsdp.strategy == Strategy::ZERO1;
    const int op = step_.add_op(zero1 ? OpKind::reduce_scatter : OpKind::all_reduce,
                                zero1 ? Stream::reduce_scatter : Stream::all_reduce,
                                Name{zero1 ? "reduce-scatter " : "all-reduce ", step_.label(u)}, u);
    step_.op(op).deps.push_back(step_.last_compute_before(op));
    step_.op(op).comm_bytes = static_cast<double>((zero1 ? sh.gathered_numel : sh.numel) * step_.reduce_dtype_bytes);
    step_.op(op).group = step_.groups.world;
    step_.gradient_ready_ops.push_back(op);
  }
};

}  // namespace

std::unique_ptr<FrameworkPolicy> make_replicated_grads_policy(StepContext& step) {
  return std::make_unique<ReplicatedGradientsPolicy>(step);
}

// Every rank stepped the optimizer on its partition; the updated compute-dtype parameters are
// all-gathered so every rank has the whole model for the next forward
// (deepspeed/runtime/zero/stage_1_and_2.py, DeepSpeedZeroOptimizer.step: all_gather_dp_groups).
void all_gather_updated_params(StepContext& step, int optimizer_op) {
  for (const Unit& u : step.plan.units) {
    const UnitShard& sh = step.shard(u.index);
    if (sh.numel == 0) continue;
    const int all_gather =
        step.add_op(OpKind::all_gather, Stream::all_gather, Name{"param all-gather ", step.label(u.index)}, u.index);
    step.op(all_gather).deps.push_back(optimizer_op);
    step.op(all_gather).comm_bytes = static_cast<double>(sh.gathered_numel * step.compute_dtype_bytes);
    step.op(all_gather).group = step.groups.world;
  }
}

}  // namespace fsdpsim::planner
