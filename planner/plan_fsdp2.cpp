// FSDP2 (torch.distributed.fsdp.fully_shard): each unit is an FSDPParamGroup whose parameters
// are sharded on dim 0 one by one. The hooks follow FSDPParamGroup and FSDPState
// (torch/distributed/fsdp/_fully_shard/_fsdp_param_group.py, read at pytorch@002a76fb;
// _fsdp_state.py, at pytorch@01c9f4fc): unshard issues the copy-in and the all-gather on their
// own streams, wait_for_unshard copies the gathered data out into the unsharded parameters on
// the compute stream, reshard frees them; post_backward reshards and reduce-scatters the
// gradients (foreach_reduce, _fsdp_collectives.py).
#include "planner/internal/plan_policy.h"

namespace fsdpsim::planner {

namespace {

class Fsdp2Policy final : public FrameworkPolicy {
 public:
  explicit Fsdp2Policy(StepContext& step)
      : FrameworkPolicy(step),
        unsharded_params_(step.plan.units.size(), -1),
        all_gather_output_(step.plan.units.size(), -1),
        all_gather_in_flight_(step.plan.units.size(), -1),
        post_forward_shard_(step.plan.units.size(), -1) {}

  // FSDPParamGroup.pre_forward: unshard, wait_for_unshard; then the explicit forward prefetch
  // (FSDPState._pre_forward: set_modules_to_forward_prefetch, of fsdp.prefetch_depth units).
  void pre_forward(int u) override {
    unshard(u);
    wait_for_unshard(u, Phase::forward);
    if (prefetches_block_and_experts(u)) prefetch_block_and_experts(step_.layout.forward_units, u);
    else if (step_.fsdp.forward_prefetch) prefetch_ahead(step_.layout.forward_units, u);
  }

  // FSDPParamGroup.post_forward reshards (planner/fsdp_rules.h: reshards_after_forward). The
  // root's post-forward also frees the last all-gather output (FSDPState._post_forward:
  // comm_ctx.all_gather_state = None).
  void post_forward(int u) override {
    const bool is_root = step_.unit(u).is_root;
    if (reshards_after_forward_of(u)) reshard(u, Phase::forward);
    if (is_root) step_.free_now(last_all_gather_output_);
  }

  // FSDPParamGroup.pre_backward: unshard (a no-op when prefetched), wait_for_unshard, and the
  // default backward prefetch of the next group (planner/fsdp_rules.h: backward_prefetch_hook).
  void pre_backward(int u) override {
    unshard(u);
    wait_for_unshard(u, Phase::backward);
    if (backward_prefetch_hook(step_.fsdp) != BackwardPrefetchHook::pre_backward) return;
    if (prefetches_block_and_experts(u)) prefetch_block_and_experts(step_.layout.backward_units, u);
    else prefetch_ahead(step_.layout.backward_units, u);
  }

  // FSDPParamGroup.post_backward: reshard, then reduce the gradients unless this micro-step
  // only accumulates them; FSDP2 accumulates in the reduce dtype
  // (FSDPParam.to_accumulated_grad_if_needed, _fsdp_param.py).
  void post_backward(int u) override {
    reshard(u, Phase::backward);
    // The root's post-backward frees the last all-gather output too.
    if (step_.unit(u).is_root) step_.free_now(last_all_gather_output_);
    if (step_.shard(u).numel == 0) return;
    allocate_uncovered_grads(step_, u);
    if (!reduces_this_micro_step(step_, u, step_.reduce_dtype_bytes)) return;
    reduce_scatter_grads(u);
  }

  // [End of backward] FSDPState._root_post_backward_final_callback (torch/distributed/fsdp/
  // _fully_shard/_fsdp_state.py): after every backward whose is_last_backward holds (the default,
  // unless set_is_last_backward(False)), the current stream waits for the last reduce-scatter's
  // event and the reduce-scatter state, which holds its input, is cleared. Before, the input of a
  // micro-step's last reduce-scatter (the root's: embeddings and output layer) was kept into the
  // next micro-step until its first reduce-scatter: Llama-3.2-1B at grad accum 2 read 20% over
  // the session-34 audit's hand figure.
  void after_backward() override {
    if (last_reduce_scatter_input_ < 0) return;
    const int wait = step_.add_op(OpKind::wait, Stream::compute, "wait for the last reduce-scatter", -1);
    step_.op(wait).deps.push_back(last_reduce_scatter_op_);
    step_.free_at(wait, last_reduce_scatter_input_);
  }

  // The last reduce-scatter input and all-gather output, which no later group's hook frees (the
  // last micro-step's [End of backward]: the optimizer step waits for every reduction anyway).
  void before_optimizer_step() override {
    step_.free_now(last_reduce_scatter_input_);
    step_.free_now(last_all_gather_output_);
  }

 private:
  // FSDPParamGroup.unshard (foreach_all_gather, _fsdp_collectives.py): the copy-in casts this
  // rank's shard into the all-gather output buffer on the all-gather streams, then the
  // all-gather. Nothing if the unit is unsharded or its all-gather is already in flight.
  void unshard(int u) {
    if (!step_.needs_gather(u) || unsharded_params_[u] >= 0 || all_gather_in_flight_[u] >= 0) return;
    const UnitShard& sh = step_.shard(u);
    const std::string& name = step_.label(u);
    const bool from_post_forward_shard = post_forward_shard_[u] >= 0;
    const int compute = step_.param_dtype_bytes, stored = step_.stored_param_dtype_bytes;
    int offloaded_shard = -1;
    // CPUOffloadPolicy: the sharded parameters live in host memory and are copied in first.
    if (step_.params_on_host()) step_.copy_offloaded_shard_to_device(u, offloaded_shard);
    const int copy_in = step_.add_op(OpKind::copy_in, Stream::all_gather, Name{"copy-in ", name}, u);
    // Bytes of the unit in its all-gather dtype: param_dtype, or fp8 for float8 weights
    // (torchao's fsdp_pre_all_gather casts the shard to fp8 before the all-gather).
    const std::int64_t gathered_bytes = step_.gathered_param_bytes(u);
    step_.op(copy_in).hbm_bytes = static_cast<double>(sh.local_numel) * stored + static_cast<double>(gathered_bytes) / step_.fsdp.shard_group_size;
    // A mixed-precision cast of the shard (none from the post-forward shard, already in the
    // compute dtype).
    int cast = -1;
    if (compute != stored && !from_post_forward_shard)
      cast = step_.alloc_at(copy_in, sh.local_numel * compute, MemCategory::temporary, Name{"cast shard of ", name});
    all_gather_output_[u] = step_.alloc_at(copy_in, gathered_bytes, MemCategory::all_gather_buffer,
                                           Name{"all-gather output of ", name});
    step_.free_at(copy_in, cast);
    step_.free_at(copy_in, offloaded_shard);
    const int all_gather = step_.add_op(OpKind::all_gather, Stream::all_gather, Name{"all-gather ", name}, u);
    step_.op(all_gather).comm_bytes = static_cast<double>(gathered_bytes);
    step_.op(all_gather).group = from_post_forward_shard ? step_.groups.reshard : step_.shard_group_of(u);
    all_gather_in_flight_[u] = all_gather;
  }

  // FSDPParamGroup.wait_for_unshard: the copy-out into the unsharded parameters on the compute
  // stream, after the all-gather. In forward the all-gather output is kept until the next
  // group's wait (so this copy-out can overlap the next all-gather; FSDP2 avoids recordStream);
  // in backward it is freed right after the copy-out.
  void wait_for_unshard(int u, Phase phase) {
    if (all_gather_in_flight_[u] < 0) return;
    const bool forward = phase == Phase::forward;
    if (forward) step_.free_now(last_all_gather_output_);
    const int copy_out = step_.add_op(OpKind::copy_out, Stream::compute, Name{"copy-out ", step_.label(u)}, u);
    step_.op(copy_out).deps.push_back(all_gather_in_flight_[u]);
    const std::int64_t gathered_bytes = step_.gathered_param_bytes(u);
    step_.op(copy_out).hbm_bytes = 2.0 * static_cast<double>(gathered_bytes);
    unsharded_params_[u] = step_.alloc_at(copy_out, gathered_bytes,
                                          MemCategory::unsharded_param, Name{"unsharded params of ", step_.label(u)},
                                          held_from_forward_to_backward(u));
    if (forward) last_all_gather_output_ = all_gather_output_[u];
    else step_.free_at(copy_out, all_gather_output_[u]);
    all_gather_output_[u] = -1;
    step_.free_at(copy_out, post_forward_shard_[u]);
    all_gather_in_flight_[u] = -1;
    step_.params_ready_op[u] = copy_out;
  }

  // FSDPParamGroup.reshard: frees the unsharded parameters; after forward with
  // reshard_after_forward=k it keeps this rank's 1/k slice (FSDPParam.to_sharded_post_forward).
  void reshard(int u, Phase phase) {
    if (unsharded_params_[u] < 0) return;
    if (phase == Phase::forward && reshards_to_smaller_group(step_.fsdp))
      post_forward_shard_[u] =
          step_.alloc_at(step_.last_op, step_.gathered_param_bytes(u) / step_.fsdp.reshard_after_forward,
                         MemCategory::unsharded_param, Name{"post-forward 1/k copy of ", step_.label(u)},
                         /*model_state=*/true);  // held from forward to backward, as k = 1's whole copy is
    step_.free_now(unsharded_params_[u]);
    step_.params_ready_op[u] = -1;
  }

  // FSDPParamGroup._prefetch_unshard of the next fsdp.prefetch_depth groups after u in `order`
  // that gather (FSDPState._pre_forward / _pre_backward walk the explicit prefetch list in
  // order). Groups already in flight are skipped by unshard, so at steady state each hook
  // issues one new all-gather, the one prefetch_depth units ahead, and prefetch_depth
  // all-gather outputs stay alive ahead of the running group. Depth 1 is FSDP2's default
  // (set_modules_to_backward_prefetch's docstring: a one-module list "gives the same
  // all-gather overlap behavior as the default"; "at least length two ... will use more
  // reserved memory", torch/distributed/fsdp/_fully_shard/_fully_shard.py).
  void prefetch_ahead(const std::vector<int>& order, int u) {
    int from = u;
    for (int k = 0; k < step_.fsdp.prefetch_depth; ++k) {
      const int next = step_.next_unit_to_gather(order, from);
      if (next < 0) return;
      unshard(next);
      from = next;
    }
  }

  // [EP explicit prefetch] Under expert parallelism torchtitan gives every transformer block an
  // explicit prefetch list: forward [next block, next block's experts], backward [previous block,
  // previous block's experts] (torchtitan's apply_fsdp: "set up explicit prefetching when EP is
  // enabled, as D2H syncs in EP could interfere with implicit prefetching in FSDP"). Without it
  // the implicit prefetch waits for the CPU, which the dispatch's split-size sync holds until the
  // block's router has run on the GPU (planner/ep_dispatch.h): the next block's all-gathers would
  // be issued only then, and in backward the experts' all-gather would queue behind the block's
  // reduce-scatter on their communicator. The experts units and the root keep the default.
  bool prefetches_block_and_experts(int u) const {
    return step_.fsdp.expert_parallel > 1 && !step_.unit(u).is_root && !is_expert_unit(step_.unit(u));
  }
  // The next block after u in `order` (a unit neither the root nor routed experts) that gathers,
  // then the routed-expert units nested in it (FSDPState._prefetch_unshard of each, in order).
  void prefetch_block_and_experts(const std::vector<int>& order, int u) {
    int block = u;
    do block = step_.next_unit_to_gather(order, block);
    while (block >= 0 && (step_.unit(block).is_root || is_expert_unit(step_.unit(block))));
    if (block < 0) return;
    unshard(block);
    for (int e : order)
      if (step_.unit(e).parent == block && is_expert_unit(step_.unit(e)) && step_.needs_gather(e)) unshard(e);
  }

  // The unit's own reshard_after_forward: the scenario's, but for the root and a unit wrapped
  // with its own False ([torchtitan's wrap], planner/units.h).
  bool reshards_after_forward_of(int u) const {
    const Unit& unit = step_.unit(u);
    return reshards_after_forward(step_.fsdp, unit.is_root) && !unit.kept_unsharded_after_forward;
  }

  // Unsharded parameters kept from forward to backward count as model state.
  bool held_from_forward_to_backward(int u) const {
    return !reshards_after_forward(step_.fsdp, /*is_root=*/false) || step_.unit(u).kept_unsharded_after_forward;
  }

  // foreach_reduce (_fsdp_collectives.py): the reduce-scatter input (padded, cast to the reduce
  // dtype) is written on the compute stream; the reduce-scatter runs on its own stream. The
  // input is kept until the next group's post-backward (comm_ctx.reduce_scatter_state), so the
  // previous one is freed first.
  void reduce_scatter_grads(int u) {
    const UnitShard& sh = step_.shard(u);
    const std::string& name = step_.label(u);
    step_.free_now(last_reduce_scatter_input_);
    const int copy_in = step_.add_op(OpKind::copy_in, Stream::compute, Name{"reduce-scatter copy-in ", name}, u);
    step_.op(copy_in).hbm_bytes =
        static_cast<double>(sh.gathered_numel) * (step_.param_dtype_bytes + step_.reduce_dtype_bytes);
    const int input = step_.alloc_at(copy_in, step_.buffer_bytes(sh.gathered_numel, step_.reduce_dtype_bytes),
                                     MemCategory::reduce_scatter_buffer, Name{"reduce-scatter input of ", name});
    step_.free_unsharded_grads(copy_in, u);
    step_.free_at(copy_in, step_.accumulated_grad[u]);
    const ReduceScatter rs = issue_reduce_scatter(step_, u, copy_in, Stream::reduce_scatter);
    last_reduce_scatter_input_ = input;
    last_reduce_scatter_op_ = rs.op;
    finish_reduction(step_, u, rs);
  }

  // Per unit, allocation ids (-1: none).
  std::vector<int> unsharded_params_;      // the unsharded parameters (copy-out to reshard)
  std::vector<int> all_gather_output_;     // the all-gather output buffer (copy-in to copy-out)
  std::vector<int> all_gather_in_flight_;  // op id: the all-gather issued and not yet waited for
  std::vector<int> post_forward_shard_;    // the 1/k copy under reshard_after_forward=k
  // The all-gather output kept for the next group's wait (comm_ctx.all_gather_state).
  int last_all_gather_output_ = -1;
  // The reduce-scatter input kept until the next group's post-backward (comm_ctx.reduce_scatter_state),
  // and the reduce-scatter.
  int last_reduce_scatter_input_ = -1;
  int last_reduce_scatter_op_ = -1;
};

}  // namespace

std::unique_ptr<FrameworkPolicy> make_fsdp2_policy(StepContext& step) { return std::make_unique<Fsdp2Policy>(step); }

}  // namespace fsdpsim::planner
