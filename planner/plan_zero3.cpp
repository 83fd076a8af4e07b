// DeepSpeed ZeRO-3 with its buffer knobs stated (the scenario's `deepspeed` object under
// FULL_SHARD and DeepSpeed's layout; planner/scenario.h, DeepSpeedSpec). Followed from
// deepspeedai/DeepSpeed@edaa722:
//   deepspeed/runtime/zero/parameter_offload.py   mark_persistent_parameters: a parameter of at
//       most stage3_param_persistence_threshold elements is marked ds_persist;
//   deepspeed/runtime/zero/partitioned_param_coordinator.py   PartitionedParameterCoordinator:
//       fetch_sub_module gathers the running module's parameters, then prefetches along the
//       recorded trace up to min(stage3_max_live_parameters - available, stage3_prefetch_bucket_size)
//       elements; release_sub_module frees them unless persistent or reused within
//       stage3_max_reuse_distance elements of the trace (__params_to_release);
//   deepspeed/runtime/zero/stage3.py   DeepSpeedZeroOptimizer_Stage3: the ipg bucket buffer of
//       reduce_bucket_size elements and the gradient partition buffer made at init, the
//       reduce-scatter of each full bucket on reduce_and_partition_stream (overlap_comm) or the
//       current stream, and _post_step's all-gather of the persistent parameters.
// The planner's units stand for DeepSpeed's submodules: DeepSpeed hooks every module, so a wrap
// at the granularity of the modules that own parameters matches it, and a coarser wrap fetches
// several modules' parameters at once. The trace is the steady state's (from the third step on
// DeepSpeed prefetches along a complete trace; the first steps record it).
#include <algorithm>
#include <stdexcept>
#include <utility>

#include "planner/internal/plan_policy.h"

namespace fsdpsim::planner {

namespace {

class DeepSpeedZero3Policy final : public FrameworkPolicy {
 public:
  explicit DeepSpeedZero3Policy(StepContext& step)
      : FrameworkPolicy(step),
        ds_(step.scenario.deepspeed),
        units_(static_cast<int>(step.plan.units.size())),
        gathered_numel_(units_, 0),
        persistent_numel_(units_, 0),
        trace_numel_(units_, 0),
        gathered_(units_, -1),
        most_recent_use_fetched_for_(units_, -1) {
    if (step.params_on_host())
      throw std::logic_error("scenario.cpp refuses ZeRO-3's `deepspeed` object with offload");
    split_persistent_parameters();
    make_trace();
    buckets_ = deepspeed_buckets(step, ds_.reduce_bucket_size);
    describe_buckets();
    make_persistent_buffers();
  }

  void pre_forward(int u) override { fetch_sub_module(u); }
  void post_forward(int u) override { release_sub_module(u); }
  void pre_backward(int u) override { fetch_sub_module(u); }

  void post_backward(int u) override {
    release_sub_module(u);
    reduce_gradients(u);
    if (++post_backwards_ == units_) end_of_backward();
  }

  // The optimizer step (stage3.py step): one sub-group after another (sub_group_size), each with
  // its fp32 gradient made in _prepare_fp32_grad_for_sub_group; plan.cpp issues them. None
  // without an optimizer (nothing steps).
  std::vector<OptimizerSubGroup> optimizer_sub_groups() const override {
    if (step_.training.optimizer == Optimizer::none) return {};
    return deepspeed_sub_groups(*step_.scenario.model, step_.fsdp.shard_group_size, ds_.sub_group_size);
  }

  // _post_step: the persistent parameters, released with all the others for the step
  // (_partition_all_parameters), are all-gathered again whole (persistent_parameters[0].all_gather).
  void after_optimizer_step(int updated) override {
    if (persistent_total_numel_ == 0) return;
    const int op = step_.add_op(OpKind::all_gather, Stream::all_gather, "all-gather persistent params", -1);
    step_.op(op).deps.push_back(updated);
    step_.op(op).comm_bytes = static_cast<double>(step_.buffer_bytes(persistent_total_numel_, step_.param_dtype_bytes));
    step_.op(op).group = step_.groups.shard;
  }

 private:
  // ---- parameters ------------------------------------------------------------------------------

  // mark_persistent_parameters: `param.ds_numel <= param_threshold` (the model-wide
  // stage3_model_persistence_threshold defaults to sys.maxsize and is not a knob here). A
  // persistent parameter is gathered whole once and never released in forward or backward.
  void split_persistent_parameters() {
    for (int u = 0; u < units_; ++u) {
      for (const models::Parameter* p : step_.unit(u).params) {
        const std::int64_t n = p->numel();
        trace_numel_[u] += n;
        if (n <= ds_.stage3_param_persistence_threshold) persistent_numel_[u] += n;
        else gathered_numel_[u] += n;
      }
      persistent_total_numel_ += persistent_numel_[u];
    }
  }

  // The module trace of one forward and backward (record_module): the units in the order their
  // fetch_sub_module runs, pre-forward order then pre-backward order.
  void make_trace() {
    trace_ = step_.layout.forward_units;
    trace_.insert(trace_.end(), step_.layout.backward_units.begin(), step_.layout.backward_units.end());
  }

  // Made once at the optimizer's init and alive through the step:
  //  - the persistent parameters whole on every rank, in the compute dtype (beside their
  //    partition, ds_tensor, which the sharded model state counts);
  //  - the ipg bucket buffer (stage3.py: `bucket.buffer = torch.empty(self.reduce_bucket_size,
  //    dtype=dtype)` under contiguous_gradients; one per communication dtype, one here);
  //  - grad_partitions_flat_buffer: the rank's gradient partition, `torch.zeros(sum(p.partition_numel()
  //    ...), dtype=self.gradient_accumulation_dtype)`, the model's dtype unless grad_accum_dtype
  //    is set (engine.py get_data_types).
  void make_persistent_buffers() {
    const int bytes = step_.param_dtype_bytes;
    if (persistent_total_numel_ > 0)
      step_.new_alloc(step_.buffer_bytes(persistent_total_numel_, bytes), MemCategory::unsharded_param, Stream::compute,
                      "DeepSpeed persistent params (whole)", true, true);
    if (ds_.contiguous_gradients)  // `if self.contiguous_gradients: bucket.buffer = torch.empty(...)`
      step_.new_alloc(step_.buffer_bytes(ds_.reduce_bucket_size, bytes), MemCategory::reduce_scatter_buffer, Stream::compute,
                      "DeepSpeed ipg bucket buffer", true, false);
    std::int64_t partition_numel = 0;
    for (int u = 0; u < units_; ++u) partition_numel += step_.shard(u).local_numel;
    step_.new_alloc(step_.buffer_bytes(partition_numel, bytes), MemCategory::sharded_grad, Stream::compute,
                    "DeepSpeed grad_partitions_flat_buffer", true, true);
  }

  // ---- fetch and release (partitioned_param_coordinator.py) ------------------------------------

  // _fetch_sub_module_impl: gather the running unit's partitioned parameters if they are not
  // available, take its entry off the fetch queue, then prefetch along the trace.
  void fetch_sub_module(int u) {
    if (gathered_numel_[u] > 0 && gathered_[u] < 0) all_gather({u});
    // "pop the parameters we need for the current module off the fetch queue" unless a prefetch
    // already walked past this use.
    if (most_recent_use_fetched_for_[u] < step_id_ && queue_ < trace_.size()) {
      if (trace_[queue_] != u) throw std::logic_error("DeepSpeed ZeRO-3 trace out of order");
      most_recent_use_fetched_for_[u] = static_cast<int>(queue_++);
    }
    prefetch();
    ++step_id_;
  }

  // The prefetch: `max_params_to_prefetch = min(max_n_available_params - n_available_params,
  // prefetch_bucket_sz)`; entries are taken off the queue while fewer elements than that are being
  // prefetched, the unavailable ones gathered (one coalesced all-gather), the available ones only
  // marked as used ahead (most_recent_step_id_param_fetched_for), which keeps them from release.
  void prefetch() {
    if (ds_.stage3_prefetch_bucket_size <= 0) return;
    const std::int64_t limit = std::min(ds_.stage3_max_live_parameters - n_available_, ds_.stage3_prefetch_bucket_size);
    std::int64_t prefetching = 0;
    std::vector<int> to_gather;
    while (queue_ < trace_.size() && prefetching < limit) {
      const int v = trace_[queue_];
      most_recent_use_fetched_for_[v] = std::max(most_recent_use_fetched_for_[v], static_cast<int>(queue_));
      ++queue_;
      if (gathered_numel_[v] == 0 || gathered_[v] >= 0 ||
          std::find(to_gather.begin(), to_gather.end(), v) != to_gather.end())
        continue;
      to_gather.push_back(v);
      prefetching += gathered_numel_[v];
    }
    if (!to_gather.empty()) all_gather(to_gather);
  }

  // __all_gather_params_: one coalesced all-gather on the coordinator's all-gather stream into
  // each parameter's full-size data (compute dtype); the elements count as available at once.
  void all_gather(const std::vector<int>& units) {
    const int first = units.front();
    const int op = step_.add_op(OpKind::all_gather, Stream::all_gather,
                                Name{units.size() > 1 ? "prefetch all-gather from " : "all-gather ", step_.label(first)},
                                first);
    std::int64_t numel = 0;
    for (int v : units) {
      gathered_[v] = step_.alloc_at(op, step_.buffer_bytes(gathered_numel_[v], step_.param_dtype_bytes), MemCategory::unsharded_param,
                                    Name{"gathered params of ", step_.label(v)});
      // free_param record_stream()s the data on the current stream before dropping it
      // (partition_parameters.py), so the block is reused only after the compute queued there.
      step_.schedule.allocations[gathered_[v]].recorded_stream = static_cast<int>(Stream::compute);
      step_.params_ready_op[v] = op;
      numel += gathered_numel_[v];
    }
    step_.op(op).comm_bytes = static_cast<double>(step_.buffer_bytes(numel, step_.param_dtype_bytes));
    step_.op(op).group = step_.groups.shard;
    n_available_ += numel;
  }

  // release_sub_module -> __params_to_release: release unless a prefetch already walked past a later
  // use, or the unit is used again within max_reuse_distance elements of the trace ahead (the walk
  // counts every parameter of each module it passes, persistent ones included).
  void release_sub_module(int u) {
    if (gathered_[u] < 0) return;
    if (most_recent_use_fetched_for_[u] > step_id_) return;
    std::int64_t traversed = 0;
    for (std::size_t k = static_cast<std::size_t>(step_id_); k < trace_.size(); ++k) {
      if (traversed >= ds_.stage3_max_reuse_distance) break;
      if (trace_[k] == u) return;
      traversed += trace_numel_[trace_[k]];
    }
    release(u);
  }

  void release(int u) {
    step_.free_now(gathered_[u]);
    n_available_ -= gathered_numel_[u];
    step_.params_ready_op[u] = -1;
  }

  // ---- gradients (stage3.py) -------------------------------------------------------------------

  // The buckets' parameters (the walk of deepspeed_buckets, plan_zero.cpp): per bucket how many
  // and their elements padded each to a multiple of W (what reduce_scatter_coalesced reduces).
  void describe_buckets() {
    const std::int64_t w = step_.fsdp.shard_group_size;
    bucket_params_.assign(buckets_.size(), 0);
    bucket_padded_numel_.assign(buckets_.size(), 0);
    std::size_t b = 0;
    std::int64_t open = 0;
    for (int u : post_backward_order(step_)) {
      const std::vector<const models::Parameter*>& params = step_.unit(u).params;
      for (auto it = params.rbegin(); it != params.rend(); ++it) {
        const std::int64_t n = (*it)->numel();
        if (n == 0) continue;
        if (open > 0 && open + n > ds_.reduce_bucket_size) {
          ++b;
          open = 0;
        }
        if (b >= buckets_.size()) throw std::logic_error("DeepSpeed ZeRO-3 buckets walked apart");
        open += n;
        ++bucket_params_[b];
        bucket_padded_numel_[b] += checked_round_up(n, w, "a bucket parameter's padded elements");
      }
    }
  }

  // reduce_independent_p_g_buckets_and_remove_grads, from each gradient's hook: a full bucket is
  // reduced first, then the gradient joins the bucket. With contiguous_gradients it is copied into
  // the ipg bucket buffer and replaced by a view of it (__add_grad_to_ipg_bucket:
  // new_grad_tensor.copy_(param.grad); param.grad.data = new_grad_tensor), so autograd's gradient is
  // gone once the unit's backward ends; without, autograd's gradient itself waits in the bucket
  // until partition_grads drops it (`param.grad = None`) after its bucket's reduction. (A parameter
  // larger than the bucket is not copied even with contiguous_gradients: not told apart, the
  // planner's gradients being per unit.)
  void reduce_gradients(int u) {
    allocate_uncovered_grads(step_, u);
    if (ds_.contiguous_gradients) {
      step_.free_unsharded_grads(step_.last_op, u);
    } else {
      for (int g : step_.unsharded_grads[u]) waiting_grads_.push_back({u, g});
      step_.unsharded_grads[u].clear();
    }
    for (std::size_t b = 0; b < buckets_.size(); ++b)
      if (buckets_[b].closing_unit == u) reduce_bucket(b);
  }

  // __reduce_and_partition_ipg_grads on reduce_and_partition_stream, a side stream under
  // overlap_comm and the current stream otherwise. With DeepSpeed's reduce_scatter (True by
  // default, config.py) the bucket goes through __avg_scatter_grads (the all-reduce path is taken
  // only with reduce_scatter False): reduce_scatter_coalesced (runtime/comm/coalesced_collectives.py)
  // torch.cat's the gradients' chunks, each padded to ceil(numel / W) per rank, into one flat tensor
  // (unless the bucket is one gradient divisible by W: a view of it), reduce-scatters it in place
  // and returns views of the rank's chunk; partition_grads copies (first micro-step) or adds
  // (later ones) them into grad_partitions_flat_buffer, and the flat tensor goes with the views.
  void reduce_bucket(std::size_t index) {
    const GradientBucket& b = buckets_[index];
    const int u = b.closing_unit;
    const int bytes = step_.param_dtype_bytes;
    const std::int64_t w = step_.fsdp.shard_group_size;
    const bool in_place = bucket_params_[index] == 1 && b.numel % w == 0;
    const std::int64_t flat_numel = in_place ? b.numel : bucket_padded_numel_[index];
    const int rs = step_.add_op(OpKind::reduce_scatter, Stream::reduce_scatter,
                                Name{"reduce-scatter bucket ending in ", step_.label(u)}, u);
    step_.op(rs).deps.push_back(step_.last_compute_before(rs));
    step_.op(rs).comm_bytes = static_cast<double>(step_.buffer_bytes(flat_numel, bytes));
    step_.op(rs).group = step_.groups.shard;
    const std::int64_t part = flat_numel / w;
    int flat = in_place ? -1
                        : step_.alloc_at(rs, step_.buffer_bytes(flat_numel, bytes), MemCategory::reduce_scatter_buffer,
                                         Name{"reduce-scatter input of the bucket ending in ", step_.label(u)});
    const int copy = step_.add_op(OpKind::copy_out, Stream::reduce_scatter,
                                  Name{"partition grads of the bucket ending in ", step_.label(u)}, u);
    step_.op(copy).deps.push_back(rs);
    step_.op(copy).hbm_bytes = static_cast<double>(step_.buffer_bytes(part, bytes)) * (step_.first_micro_step() ? 2.0 : 3.0);
    step_.free_at(copy, flat);
    // Without contiguous_gradients: autograd's gradients of the units whose last gradient this
    // bucket holds (partition_grads: `param.grad = None`).
    for (auto it = waiting_grads_.begin(); it != waiting_grads_.end();) {
      if (std::find(b.completes_units.begin(), b.completes_units.end(), it->first) != b.completes_units.end()) {
        step_.free_at(copy, it->second);
        it = waiting_grads_.erase(it);
      } else {
        ++it;
      }
    }
    step_.gradient_ready_ops.push_back(copy);
    micro_step_reductions_.push_back(copy);
    if (!ds_.overlap_comm) {
      // On the current stream: the rest of the backward waits for the reduction.
      const int wait = step_.add_op(OpKind::wait, Stream::compute, Name{"wait for the bucket ending in ", step_.label(u)}, u);
      step_.op(wait).deps.push_back(copy);
    }
  }

  // independent_gradient_partition_epilogue: the last bucket was reduced by its unit (closing_unit),
  // then reduce_and_partition_stream.synchronize(); the coordinator's reset_step starts the next
  // trace. Whatever is still gathered (nothing, unless the trace reuses a unit after its last
  // backward) is released by _clean_inflight_param_registry or the step's _partition_all_parameters.
  void end_of_backward() {
    if (!waiting_grads_.empty()) throw std::logic_error("DeepSpeed ZeRO-3: gradients left in no bucket");
    post_backwards_ = 0;
    if (!micro_step_reductions_.empty()) {
      const int wait = step_.add_op(OpKind::wait, Stream::compute, "wait for the gradient reductions", -1);
      for (int r : micro_step_reductions_) step_.op(wait).deps.push_back(r);
      micro_step_reductions_.clear();
    }
    for (int u = 0; u < units_; ++u)
      if (gathered_[u] >= 0) release(u);
    queue_ = 0;
    step_id_ = 0;
    n_available_ = 0;
    std::fill(most_recent_use_fetched_for_.begin(), most_recent_use_fetched_for_.end(), -1);
  }

  const DeepSpeedSpec& ds_;
  const int units_;
  std::vector<std::int64_t> gathered_numel_;    // per unit: elements of its partitioned (non-persistent) parameters
  std::vector<std::int64_t> persistent_numel_;  // per unit: elements of its persistent parameters
  std::vector<std::int64_t> trace_numel_;       // per unit: all its elements (the reuse walk counts them)
  std::int64_t persistent_total_numel_ = 0;
  std::vector<int> trace_;                      // the units in fetch order, forward then backward
  std::vector<GradientBucket> buckets_;
  std::vector<int> bucket_params_;                 // per bucket: its parameters
  std::vector<std::int64_t> bucket_padded_numel_;  // per bucket: its elements, each parameter's padded to W
  std::vector<std::pair<int, int>> waiting_grads_;  // no contiguous_gradients: (unit, autograd's gradient) until reduced
  // Coordinator state, per micro-step.
  std::vector<int> gathered_;                     // per unit: its gathered parameters' allocation, -1 if released
  std::vector<int> most_recent_use_fetched_for_;  // per unit: the latest trace step a fetch or prefetch took off the queue
  std::size_t queue_ = 0;                         // the fetch queue's head (an index into trace_)
  int step_id_ = 0;                               // fetches so far this micro-step
  std::int64_t n_available_ = 0;                  // gathered (or in flight) partitioned elements
  int post_backwards_ = 0;
  std::vector<int> micro_step_reductions_;  // this micro-step's partition copies (the epilogue waits for them)
};

}  // namespace

std::vector<OptimizerSubGroup> deepspeed_sub_groups(const models::Model& model, int partition_ranks,
                                                   std::int64_t sub_group_size) {
  const std::vector<const models::Parameter*> params = model.parameters();
  auto partition_numel = [&](const models::Parameter* p) { return (p->numel() + partition_ranks - 1) / partition_ranks; };
  std::int64_t total = 0;
  for (const models::Parameter* p : params) total += partition_numel(p);
  // `if sub_group_size is None or sub_group_size >= params_group_numel: return [params_group]`
  if (sub_group_size >= total) return {{total, static_cast<int>(params.size())}};
  std::vector<OptimizerSubGroup> groups;
  OptimizerSubGroup open;
  for (std::size_t i = 0; i < params.size(); ++i) {
    open.numel += partition_numel(params[i]);
    ++open.params;
    // `if local_sub_group_size >= sub_group_size or id(param) == id(params_group[-1])`
    if (open.numel >= sub_group_size || i + 1 == params.size()) {
      groups.push_back(open);
      open = {};
    }
  }
  return groups;
}

std::int64_t largest_deepspeed_sub_group(const models::Model& model, int partition_ranks, std::int64_t sub_group_size) {
  std::int64_t largest = 0;
  for (const OptimizerSubGroup& g : deepspeed_sub_groups(model, partition_ranks, sub_group_size))
    largest = std::max(largest, g.numel);
  return largest;
}

std::int64_t deepspeed_pinned_optimizer_bytes(const Scenario& scenario, std::int64_t partition_numel) {
  const auto block = pinned_block_bytes;  // [Pinned host blocks] (planner/sharding.h)
  const int master = models::dtype_bytes(scenario.training.master_dtype);
  if (deepspeed_zero_stage(scenario) != 3) return 2 * block(partition_numel * master);
  std::int64_t partitions = 0, pinned = 0;
  for (const OptimizerSubGroup& g :
       deepspeed_sub_groups(*scenario.model, scenario.fsdp.shard_group_size, scenario.deepspeed.sub_group_size)) {
    partitions += g.numel;
    pinned += block(g.numel * master);
  }
  return pinned + block(partitions * models::dtype_bytes(scenario.training.param_dtype));
}

std::unique_ptr<FrameworkPolicy> make_deepspeed_zero3_policy(StepContext& step) {
  return std::make_unique<DeepSpeedZero3Policy>(step);
}

}  // namespace fsdpsim::planner
