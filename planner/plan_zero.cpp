// Data parallelism with replicated gradients: NO_SHARD (DDP, or FSDP's NO_SHARD) and ZeRO-1.
// Every rank holds the whole model and a persistent gradient buffer the backward accumulates
// into in place (DDP's gradient buckets), so there is nothing to gather and nothing to
// reshard. Gradients are reduced once per step, in the last micro-step (DDP's no_sync() on
// the others, torch/nn/parallel/distributed.py), or in every micro-step when the scenario says
// fsdp.grad_sync every_micro_step (NO_SHARD only): DDP all-reduces them, ZeRO-1 reduce-scatters
// them to the rank that owns each optimizer partition. After the step, ZeRO-1 and DeepSpeed's
// ZeRO-2 gather the updated parameters.
// With the scenario's `ddp` or `deepspeed` object the reduction is bucketed instead of one
// collective per unit: DDP's Reducer buckets (with their persistent bucket tensors) and
// DeepSpeed ZeRO-1/2's reduce buckets (with their bucket buffers; ZeRO-2 is then planned here
// too, its gradients partitioned and reduced in every micro-step).
#include "planner/internal/plan_policy.h"

#include <algorithm>
#include <map>

namespace fsdpsim::planner {

// ---- buckets (GradientBucket, plan_policy.h) ----------------------------------------------------

// The units in the order their post-backward hooks run: the layout's forward program walked
// backwards, where each unit's `pre` event is its post-backward (plan.cpp, backward()).
std::vector<int> post_backward_order(const StepContext& step) {
  std::vector<int> order;
  for (std::size_t i = step.layout.forward.size(); i-- > 0;)
    if (step.layout.forward[i].kind == PlanCache::Layout::Event::pre) order.push_back(step.layout.forward[i].unit);
  return order;
}

// DeepSpeed ZeRO-1/2's independent partition gradient bucket (deepspeedai/DeepSpeed@edaa722,
// deepspeed/runtime/zero/stage_1_and_2.py, reduce_independent_p_g_buckets_and_remove_grads; ZeRO-3's
// stage3.py function of the same name applies the same rule, plan_zero3.cpp): before
// a parameter's gradient is added, the bucket is reduced if `elements + param.numel() >
// reduce_bucket_size`; a parameter larger than the bucket is reduced alone (extra_large_param_to_reduce).
std::vector<GradientBucket> deepspeed_buckets(const StepContext& step, std::int64_t reduce_bucket_size) {
  std::vector<GradientBucket> buckets;
  GradientBucket open;
  int last_unit = -1;
  for (int u : post_backward_order(step)) {
    const std::vector<const models::Parameter*>& params = step.unit(u).params;
    bool any = false;
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      const std::int64_t n = (*it)->numel();
      if (n == 0) continue;
      if (open.numel > 0 && open.numel + n > reduce_bucket_size) {
        open.closing_unit = last_unit;
        buckets.push_back(open);
        open = GradientBucket{};
      }
      open.numel += n;
      last_unit = u;
      any = true;
    }
    if (any) open.completes_units.push_back(u);
  }
  if (open.numel > 0) {
    open.closing_unit = last_unit;
    buckets.push_back(open);
  }
  return buckets;
}

namespace {

// DDP's Reducer (torch/nn/parallel/distributed.py, _ddp_init_helper and torch/csrc/distributed/c10d/
// reducer.cpp, compute_bucket_assignment_by_size and rebuild_buckets): after the first iteration
// the buckets are rebuilt in the order gradients became ready, with the size limits
// [_DEFAULT_FIRST_BUCKET_BYTES (1 MiB), bucket_cap_mb]; a bucket is closed once its bytes reach
// its limit, the parameter that crosses it included (a parameter is never split).
// The limits' defaults: torch/csrc/distributed/c10d/reducer.hpp, kDefaultFirstBucketBytes =
// 1024 * 1024 and kDefaultBucketBytesCap = 25 * 1024 * 1024 (scenario.h, DdpSpec).
std::vector<GradientBucket> ddp_buckets(const StepContext& step, std::int64_t cap_bytes, int grad_bytes) {
  std::vector<GradientBucket> buckets;
  GradientBucket open;
  for (int u : post_backward_order(step)) {
    const std::vector<const models::Parameter*>& params = step.unit(u).params;
    for (auto it = params.rbegin(); it != params.rend(); ++it) {
      open.numel += (*it)->numel();
      const std::int64_t limit = buckets.empty() ? kDdpFirstBucketBytes : cap_bytes;
      if (open.numel * grad_bytes >= limit) {
        open.closing_unit = u;
        buckets.push_back(open);
        open = GradientBucket{};
      }
    }
    if (open.numel > 0) open.closing_unit = u;
  }
  if (open.numel > 0) buckets.push_back(open);
  return buckets;
}

class ReplicatedGradientsPolicy final : public FrameworkPolicy {
 public:
  explicit ReplicatedGradientsPolicy(StepContext& step) : FrameworkPolicy(step) {
    const Scenario& sc = step.scenario;
    if (sc.ddp.stated) {
      // DDP's bucket tensors have the gradients' dtype (the parameters' as stored).
      buckets_ = ddp_buckets(step, sc.ddp.bucket_cap_bytes(), step.stored_param_dtype_bytes);
      bucket_dtype_bytes_ = step.stored_param_dtype_bytes;
      make_ddp_bucket_memory();
    } else if (sc.deepspeed.stated) {
      zero2_ = step.sharded.grads;
      buckets_ = deepspeed_buckets(step, sc.deepspeed.reduce_bucket_size);
      // The bucket buffer has the optimizer's 16-bit dtype and is reduced as it is (average_tensor).
      bucket_dtype_bytes_ = step.param_dtype_bytes;
      overlap_ = sc.deepspeed.overlap_comm;
      all_reduce_fallback_ = !sc.deepspeed.contiguous_gradients;
    }
  }

  // Parameters are replicated: no unshard, no reshard.
  void pre_forward(int) override {}
  void post_forward(int) override {}
  void pre_backward(int) override {
    // DeepSpeed allocates its bucket buffers when the backward starts (setup_buckets, called from
    // DeepSpeedZeroOptimizer.backward): reduce_bucket_size elements in the optimizer's 16-bit
    // dtype, a second one under overlap_comm ("Use double buffers to avoid data access conflict
    // when overlap_comm is enabled"); only with contiguous_gradients.
    const DeepSpeedSpec& ds = step_.scenario.deepspeed;
    if (!ds.stated || !ds.contiguous_gradients || ipg_buffer_ >= 0 || step_.last_op < 0) return;
    const int buffers = ds.overlap_comm ? 2 : 1;
    ipg_buffer_ = step_.alloc_at(step_.last_op, step_.buffer_bytes(ds.reduce_bucket_size, buffers * step_.param_dtype_bytes),
                                 MemCategory::reduce_scatter_buffer, "DeepSpeed ipg bucket buffers");
  }

  void post_backward(int u) override {
    ++post_backwards_;
    if (zero2_) {
      // ZeRO-2: autograd's gradients are copied into the bucket buffer as each is ready and
      // replaced by views of it (reduce_independent_p_g_buckets_and_remove_grads: new_grad_tensor
      // .copy_(grad); grad.data = new_grad_tensor.data), so they are freed here, and every
      // micro-step reduces (partition_gradients: the hooks reduce in each backward).
      allocate_uncovered_grads(step_, u);
      if (all_reduce_fallback_) {
        // [DeepSpeed's all-reduce fallback] Without contiguous_gradients autograd's gradients
        // themselves wait in the bucket until it is reduced (grads_in_ipg_bucket.append(grad)).
        waiting_grads_[u] = step_.unsharded_grads[u];
        step_.unsharded_grads[u].clear();
      } else {
        step_.free_unsharded_grads(step_.last_op, u);
      }
    }
    if (buckets_.empty()) {
      reduce_unit(u);
    } else if (zero2_ || reduces_now()) {
      for (std::size_t b = 0; b < buckets_.size(); ++b)
        if (buckets_[b].closing_unit == u) (overlap_ || zero2_ ? issue_bucket(b) : pending_.push_back(b));
    }
    if (post_backwards_ == static_cast<int>(step_.plan.units.size())) end_of_backward();
  }

 private:
  // Replicated gradients are reduced in the last micro-step, or in every one when the scenario
  // says so (DDP without no_sync; [Gradient sync by strategy], planner/scenario.cpp).
  bool reduces_now() const { return step_.last_micro_step() || step_.fsdp.sync_grads_every_micro_step; }

  // Without buckets: the unit's gradients are reduced after its last backward compute of the
  // step: one all-reduce (DDP) or reduce-scatter (ZeRO-1) over every rank, in the reduce dtype.
  void reduce_unit(int u) {
    const UnitShard& sh = step_.shard(u);
    if (sh.numel == 0 || !reduces_now()) return;
    const bool zero1 = step_.fsdp.strategy == Strategy::ZERO1;
    const int op = step_.add_op(zero1 ? OpKind::reduce_scatter : OpKind::all_reduce,
                                zero1 ? Stream::reduce_scatter : Stream::all_reduce,
                                Name{zero1 ? "reduce-scatter " : "all-reduce ", step_.label(u)}, u);
    step_.op(op).deps.push_back(step_.last_compute_before(op));
    step_.op(op).comm_bytes = static_cast<double>((zero1 ? sh.gathered_numel : sh.numel) * step_.reduce_dtype_bytes);
    step_.op(op).group = step_.groups.world;
    step_.gradient_ready_ops.push_back(op);
  }

  // One bucket's reduction: DDP all-reduces the bucket (reducer.cpp, mark_variable_ready ->
  // all_reduce_bucket once every gradient of the bucket is ready); DeepSpeed ZeRO-1/2 reduces it to
  // the partitions' owners (stage_1_and_2.py reduce_ipg_grads -> average_tensor), or all-reduces
  // it without contiguous_gradients ([DeepSpeed's all-reduce fallback]).
  void issue_bucket(std::size_t b) {
    if (all_reduce_fallback_) {
      all_reduce_and_copy(b);
      return;
    }
    const bool zero1 = step_.fsdp.strategy == Strategy::ZERO1 || zero2_;
    const int u = buckets_[b].closing_unit;
    const int op = step_.add_op(zero1 ? OpKind::reduce_scatter : OpKind::all_reduce,
                                zero1 ? Stream::reduce_scatter : Stream::all_reduce,
                                Name{zero1 ? "reduce-scatter bucket ending in " : "all-reduce bucket ending in ",
                                     step_.label(u)},
                                u);
    step_.op(op).deps.push_back(step_.last_compute_before(op));
    step_.op(op).comm_bytes = static_cast<double>(buckets_[b].numel * bucket_dtype_bytes_);
    step_.op(op).group = step_.groups.world;
    step_.gradient_ready_ops.push_back(op);
    wait_without_overlap(op, u);
    if (zero2_) keep_partition_grads(op, u);
  }

  // ZeRO-2 reduces from its gradient hooks whatever overlap_comm says; without it the reduction
  // runs on the current stream (average_tensor: stream = current_stream(); allreduce_and_copy
  // likewise), so the rest of the backward waits for the bucket's last op.
  void wait_without_overlap(int last_op_of_bucket, int u) {
    if (!zero2_ || overlap_) return;
    const int wait = step_.add_op(OpKind::wait, Stream::compute, Name{"wait for the bucket ending in ", step_.label(u)}, u);
    step_.op(wait).deps.push_back(last_op_of_bucket);
  }

  // ZeRO-2: the rank's part of each reduced bucket is kept to the optimizer step. With
  // contiguous_gradients it is copied into grads_in_partition, one buffer of the rank's partition
  // in the 16-bit dtype made at the first copy (copy_grads_in_partition); without, the gradients
  // of the parameters in the rank's partition are kept whole until the epilogue flattens their
  // slices into averaged_gradients and zero_grad drops them: taken here as one partition-sized
  // buffer from the first reduction on (a parameter that straddles partitions is held whole, not
  // modelled).
  void keep_partition_grads(int reduction, int u) {
    if (grads_in_partition_ >= 0) return;
    std::int64_t partition_numel = 0;
    for (const Unit& unit : step_.plan.units) partition_numel += step_.shard(unit.index).optimizer_numel;
    grads_in_partition_ = step_.alloc_at(reduction, step_.buffer_bytes(partition_numel, step_.param_dtype_bytes),
                                         MemCategory::sharded_grad,
                                         all_reduce_fallback_ ? "DeepSpeed gradients of the partition" : "DeepSpeed grads_in_partition", true);
    step_.sharded_grad[u] = grads_in_partition_;  // the optimizer step frees it (zero_grad)
  }

  // [DeepSpeed's all-reduce fallback] Without contiguous_gradients, reduce_ipg_grads calls
  // buffered_reduce_fallback(None, grads_in_ipg_bucket): allreduce_and_copy flattens the bucket's
  // gradients into one temporary (allreduce_bucket: self.flatten(bucket)), all-reduces it over the
  // data-parallel group (rank None: dist.all_reduce, twice a reduce-scatter's bytes) and copies the
  // result back into each gradient (buf.copy_(synced)), on the reduction stream under overlap_comm
  // and the current stream otherwise (deepspeedai/DeepSpeed@edaa722, stage_1_and_2.py). Then the
  // gradients outside the rank's partition are dropped (`param.grad = None`).
  void all_reduce_and_copy(std::size_t b) {
    const int u = buckets_[b].closing_unit;
    const double bytes = static_cast<double>(buckets_[b].numel * bucket_dtype_bytes_);
    const int op = step_.add_op(OpKind::all_reduce, Stream::all_reduce, Name{"all-reduce bucket ending in ", step_.label(u)}, u);
    step_.op(op).deps.push_back(step_.last_compute_before(op));
    step_.op(op).comm_bytes = bytes;
    step_.op(op).group = step_.groups.world;
    int flat = step_.alloc_at(op, step_.buffer_bytes(buckets_[b].numel, bucket_dtype_bytes_),
                              MemCategory::reduce_scatter_buffer, Name{"flattened bucket ending in ", step_.label(u)});
    const int copy = step_.add_op(OpKind::copy_out, Stream::all_reduce, Name{"copy back the bucket ending in ", step_.label(u)}, u);
    step_.op(copy).deps.push_back(op);
    step_.op(copy).hbm_bytes = 2.0 * bytes;
    step_.free_at(copy, flat);
    step_.gradient_ready_ops.push_back(copy);
    if (zero2_) {
      keep_partition_grads(copy, u);
      for (int done : buckets_[b].completes_units) {
        for (int g : waiting_grads_[done]) step_.free_at(copy, g);
        waiting_grads_[done].clear();
      }
    }
    wait_without_overlap(copy, u);
  }

  // After the micro-step's last post-backward: without overlap_comm ZeRO-1 reduces every bucket
  // now (stage_1_and_2.py: process_gradients reduces from the hooks only under partition_gradients
  // or overlap_comm; reduce_gradients, "if not self.overlap_comm", after the backward), then the epilogue releases the bucket buffers (independent_gradient_partition_epilogue
  // -> _release_ipg_buffers).
  void end_of_backward() {
    post_backwards_ = 0;
    for (std::size_t b : pending_) issue_bucket(b);
    pending_.clear();
    if (ipg_buffer_ >= 0) step_.free_now(ipg_buffer_);
  }

  // DDP's bucket tensors live as long as the Reducer (persistent). With gradient_as_bucket_view
  // the parameters' .grad are views into them, so they are the gradients (the persistent
  // "replicated grads", plan.cpp) and nothing is added; without it, each gradient is copied into
  // its bucket (reducer.cpp mark_variable_ready_dense: bucket_view.copy_(grad)) and the gradient
  // memory is held twice.
  void make_ddp_bucket_memory() {
    if (step_.scenario.ddp.gradient_as_bucket_view) return;
    for (const GradientBucket& b : buckets_)
      step_.new_alloc(step_.buffer_bytes(b.numel, bucket_dtype_bytes_), MemCategory::unsharded_grad, Stream::compute, "DDP bucket",
                      true, true);
  }

  std::vector<GradientBucket> buckets_;  // empty: one reduction per unit
  int bucket_dtype_bytes_ = 0;
  bool overlap_ = true;               // buckets reduced as they fill (DDP always; DeepSpeed's overlap_comm)
  std::vector<std::size_t> pending_;  // buckets waiting for the end of backward (no overlap)
  int ipg_buffer_ = -1;               // DeepSpeed's bucket buffers while alive
  int post_backwards_ = 0;            // post-backward hooks run this micro-step
  bool zero2_ = false;                // DeepSpeed ZeRO-2: gradients partitioned, reduced every micro-step
  bool all_reduce_fallback_ = false;  // DeepSpeed without contiguous_gradients: buckets all-reduced
  std::map<int, std::vector<int>> waiting_grads_;  // per unit: autograd's gradients waiting for their last bucket
  int grads_in_partition_ = -1;       // ZeRO-2's partition gradient buffer, once made
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
    step.op(all_gather).comm_bytes = static_cast<double>(sh.gathered_numel * step.param_dtype_bytes);
    step.op(all_gather).group = step.groups.world;
  }
}

}  // namespace fsdpsim::planner
