// FSDP1 (torch.distributed.fsdp.FullyShardedDataParallel): each unit is one FlatParameter,
// its parameters concatenated and padded to a multiple of the shard group. The hooks follow
// torch/distributed/fsdp/_runtime_utils.py (read at pytorch@00ae0bc9): _pre_forward_unshard
// and _pre_backward_hook all-gather straight into the padded flat parameter, whose views the
// modules use (no copy-out); _post_forward_reshard and the post-backward hook free it;
// _post_backward_hook builds the flat gradient and reduce-scatters it. All-gathers and
// reduce-scatters share one NCCL stream, and limit_all_gathers makes the CPU wait before
// running ahead of the frees (_limiter_utils.py).
#include <deque>
#include <stdexcept>

#include "planner/internal/plan_policy.h"

namespace fsdpsim::planner {

namespace {

class Fsdp1Policy final : public FrameworkPolicy {
 public:
  explicit Fsdp1Policy(StepContext& step)
      : FrameworkPolicy(step),
        unsharded_flat_param_(step.plan.units.size(), -1),
        all_gather_input_(step.plan.units.size(), -1),
        pre_backward_in_micro_step_(step.plan.units.size(), -1) {
    // scenario.cpp refuses an integer reshard_after_forward for fsdp.version 1.
    if (reshards_to_smaller_group(step.fsdp))
      throw std::logic_error("FSDP1 has no reshard_after_forward=k (an FSDP2 option)");
  }

  // _pre_forward_unshard: unshard, then forward_prefetch's next unit (_prefetch_handles).
  void pre_forward(int u) override {
    unshard(u);
    if (step_.fsdp.forward_prefetch) prefetch_next(step_.layout.forward_units, u);
  }

  // _post_forward_reshard (planner/fsdp_rules.h: reshards_after_forward).
  void post_forward(int u) override {
    if (reshards_after_forward(step_.fsdp, step_.unit(u).is_root)) reshard(u);
  }

  // _pre_backward_hook: unshard (a no-op when prefetched), then BACKWARD_PRE's prefetch.
  void pre_backward(int u) override {
    pre_backward_in_micro_step_[u] = step_.micro_step;
    unshard(u);
    if (backward_prefetch_hook(step_.fsdp) == BackwardPrefetchHook::pre_backward)
      prefetch_next(step_.layout.backward_units, u);
  }

  // _post_backward_hook: reshard, BACKWARD_POST's prefetch, then reduce the flat gradient
  // unless this micro-step only accumulates it (no_sync keeps the unsharded gradient in the
  // compute dtype).
  void post_backward(int u) override {
    reshard(u);
    if (backward_prefetch_hook(step_.fsdp) == BackwardPrefetchHook::post_backward)
      prefetch_next(step_.layout.backward_units, u);
    if (step_.shard(u).numel == 0) return;
    allocate_uncovered_grads(step_, u);
    if (!reduces_this_micro_step(step_, u, step_.param_dtype_bytes)) return;
    reduce_scatter_grads(u);
  }

 private:
  // _unshard: the all-gather into the padded flat parameter (FlatParamHandle.unshard). Under
  // limit_all_gathers the CPU first waits for the oldest of two pending frees
  // (_FreeEventQueue.dequeue_if_needed, _limiter_utils.py).
  void unshard(int u) {
    if (!step_.needs_gather(u) || unsharded_flat_param_[u] >= 0) return;
    const UnitShard& sh = step_.shard(u);
    const std::string& name = step_.label(u);
    const int compute = step_.param_dtype_bytes, stored = step_.stored_param_dtype_bytes;
    int cpu_wait = -1;
    if (step_.fsdp.limit_all_gathers && pending_frees_.size() >= 2) {
      cpu_wait = pending_frees_.front();
      pending_frees_.pop_front();
    }
    int offloaded_shard = -1;
    // CPUOffload(offload_params=True): the shard lives in host memory and is copied in first.
    if (step_.params_on_host()) wait_on_cpu(step_.copy_offloaded_shard_to_device(u, offloaded_shard), cpu_wait);
    const int copy_in = step_.add_op(OpKind::copy_in, Stream::all_gather, Name{"copy-in ", name}, u);
    wait_on_cpu(copy_in, cpu_wait);
    step_.op(copy_in).hbm_bytes = static_cast<double>(sh.local_numel) * (stored + compute);
    // The docs count a shard-sized communication buffer beside the flat parameter while the
    // unit is unsharded (notes/fsdp.rst: 2 x 0.8 GB buffers + 2 x 6.4 GB unsharded blocks).
    all_gather_input_[u] = step_.alloc_at(copy_in, sh.local_numel * compute, MemCategory::all_gather_buffer,
                                          Name{"all-gather input of ", name});
    unsharded_flat_param_[u] = step_.alloc_at(copy_in, sh.gathered_numel * compute, MemCategory::unsharded_param,
                                              Name{"unsharded flat param of ", name}, held_from_forward_to_backward());
    // The flat parameter is made on the all-gather stream and read by the compute stream, and
    // FSDP1 frees it under recordStream: FlatParamHandle._free_unsharded_flat_param calls
    // unsharded_flat_param.record_stream(current_stream()) before _free_storage
    // (torch/distributed/fsdp/_flat_param.py@fe03cf69). So a freed block is not reused until the
    // compute stream's work queued at the free has finished: with forward_prefetch=False the next
    // unit's all-gather still gets a second buffer (the FSDP notes, "FSDP buffers sizes": "in
    // reality it's still 2x"; planner/memory.h [recordStream]). The shard-sized buffer is treated
    // alike, except the low-precision shard (below).
    const bool low_precision_shard = compute != stored;
    // [FSDP1 streams] The low-precision shard is made on the pre-unshard stream
    // (FlatParamHandle._use_low_precision_shard under _pre_unshard_stream, the stream CPU
    // offload's copies also use: Stream::copy), so its blocks come from that stream's pool.
    if (low_precision_shard) step_.schedule.allocations[all_gather_input_[u]].stream = Stream::copy;
    step_.schedule.allocations[unsharded_flat_param_[u]].recorded_stream = static_cast<int>(Stream::compute);
    if (!low_precision_shard)
      step_.schedule.allocations[all_gather_input_[u]].recorded_stream = static_cast<int>(Stream::compute);
    step_.free_at(copy_in, offloaded_shard);
    const int all_gather = step_.add_op(OpKind::all_gather, Stream::all_gather, Name{"all-gather ", name}, u);
    step_.op(all_gather).comm_bytes = static_cast<double>(sh.gathered_numel * compute);
    step_.op(all_gather).group = step_.groups.shard;
    if (low_precision_shard) {
      // [Low-precision shard] Under mixed precision the all-gather input is the low-precision
      // shard (_mp_shard), which post_unshard frees right after the all-gather is issued
      // (FlatParamHandle._free_low_precision_sharded_param, record_stream on the unshard stream,
      // the one that reads it): alive across the all-gather only. Measured on an H100
      // (tests/data/hardware/memory-h100-2026-11-27.csv): holding it to the reshard put FSDP1's
      // peaks one root shard too high (Llama-3.1-8B, 8 ranks: 250 MiB) and, under SHARD_GRAD_OP,
      // every unit's (665 MiB). Without mixed precision the buffer follows the FSDP notes (above).
      step_.free_at(all_gather, all_gather_input_[u]);
    }
    // The modules use views of the flat parameter: ready when the all-gather is.
    step_.params_ready_op[u] = all_gather;
  }

  // _reshard: frees the flat parameter and its communication buffer; the free joins the
  // rate limiter's queue (_FreeEventQueue.enqueue).
  void reshard(int u) {
    if (unsharded_flat_param_[u] < 0) return;
    step_.free_now(unsharded_flat_param_[u]);
    step_.free_now(all_gather_input_[u]);  // already freed after the all-gather under mixed precision
    if (step_.fsdp.limit_all_gathers) pending_frees_.push_back(step_.last_op);
    step_.params_ready_op[u] = -1;
  }

  // _prefetch_handles: unshard the next unit in `order` that gathers. [Mistargeted prefetch]
  // _prefetch_handle unshards a backward target only while its _needs_pre_backward_unshard holds,
  // which its pre-backward hook clears ("to ensure that a mistargeted prefetch does not actually
  // unshard these handles", _runtime_utils.py). The root's post-backward runs last (its
  // embeddings' gradient comes last), after every unit's pre-backward: under BACKWARD_POST its
  // prefetch gathered the last layer again, never freed (+1 unit to the optimizer step; the
  // session-34 audit). A forward prefetch's target has not run this micro-step's pre-backward.
  void prefetch_next(const std::vector<int>& order, int u) {
    const int next = step_.next_unit_to_gather(order, u);
    if (next >= 0 && pre_backward_in_micro_step_[next] != step_.micro_step) unshard(next);
  }

  void wait_on_cpu(int op, int& cpu_wait) {
    if (cpu_wait >= 0) step_.op(op).cpu_waits.push_back(cpu_wait);
    cpu_wait = -1;
  }

  // An unsharded flat parameter kept from forward to backward counts as model state.
  bool held_from_forward_to_backward() const { return !reshards_after_forward(step_.fsdp, /*is_root=*/false); }

  // _post_backward_hook's reduction. [FSDP1 flat gradient] Autograd concatenates the
  // per-parameter gradients into the flat gradient (the backward of the split that made the
  // parameters' views of the flat parameter) and releases them before the flat parameter's
  // AccumulateGrad hook runs: both are alive at the concatenation, 2 + 2 bytes an element in
  // bf16. The hook then casts it to the reduce dtype (`flat_param.grad.data =
  // flat_param.grad.to(reduce_dtype)`, the bf16 gradient still referenced while the
  // reduce-scatter's tensors are made: 2 + 4), and reduce-scatters it on the stream all-gathers
  // use. The copy-in op prices the concatenation and the cast together; the cast is made with
  // the reduce-scatter. Before, the cast was made beside the per-parameter gradients too (8
  // bytes an element): the session-34 audit found Llama-3.2-1B wrapped at the root 18.6% over its
  // hand figure (torch/distributed/fsdp/_runtime_utils.py _post_backward_hook). Under no_sync
  // the last micro-step's gradients were summed into the accumulated flat gradient already
  // (reduces_this_micro_step), which is then the one cast. The input is freed at once: FSDP1
  // record_stream()s it, so the caching allocator reuses it after the reduce-scatter.
  void reduce_scatter_grads(int u) {
    const UnitShard& sh = step_.shard(u);
    const std::string& name = step_.label(u);
    const int compute = step_.param_dtype_bytes, reduce = step_.reduce_dtype_bytes;
    const int copy_in = step_.add_op(OpKind::copy_in, Stream::compute, Name{"reduce-scatter copy-in ", name}, u);
    step_.op(copy_in).hbm_bytes = static_cast<double>(sh.gathered_numel) * (compute + reduce);
    int input = step_.accumulated_grad[u];
    step_.accumulated_grad[u] = -1;
    if (input < 0) {
      input = step_.alloc_at(copy_in, sh.gathered_numel * compute, MemCategory::unsharded_grad, Name{"flat grad of ", name});
      // [FSDP1 streams] The flat gradient is the backward of the split that made the parameters'
      // views of the flat parameter, and autograd runs a backward op on its forward op's stream:
      // the views were made under the unshard stream (_unshard -> FlatParamHandle.unshard ->
      // _use_unsharded_views), so the flat gradient comes from the all-gather stream's pool (the
      // snapshot: 18 allocations of 436 and 2,101 MB there with no Python frame, autograd's).
      step_.schedule.allocations[input].stream = Stream::all_gather;
      step_.free_unsharded_grads(copy_in, u);
    }
    const ReduceScatter rs = issue_reduce_scatter(step_, u, copy_in, Stream::all_gather);
    if (reduce != compute) {
      // Made as the reduce-scatter is issued, before its output (the op's allocations in order).
      const int cast = step_.new_alloc(sh.gathered_numel * reduce, MemCategory::reduce_scatter_buffer, Stream::reduce_scatter,
                                       Name{"reduce-dtype grad of ", name});  // [FSDP1 streams]
      step_.schedule.allocations[cast].unit = u;
      auto& allocs = step_.op(rs.op).allocs;
      allocs.insert(allocs.begin(), cast);
      step_.free_at(rs.op, input);
      input = cast;
    }
    // [FSDP1 streams] _post_backward_hook casts the gradient and makes the reduce-scatter's
    // tensors under _post_backward_stream (_runtime_utils.py, _post_backward_hook and
    // _get_reduce_scatter_tensors), a stream of its own (_init_streams), so they come from that
    // stream's pool, which the model calls Stream::reduce_scatter. The ops stay where the
    // timing model puts them (the reduce-scatter behind the all-gathers of its communicator).
    // Measured: the H200 snapshot of 2026-11-28 (tests/data/hardware/) has its 874 and 4,205 MB
    // cast segments and its eight 14 MB reduce-scatter outputs on that stream, none on the
    // compute stream's, where the replay had reused the init segments for them.
    step_.schedule.allocations[rs.output].stream = Stream::reduce_scatter;
    step_.free_at(rs.op, input);
    finish_reduction(step_, u, rs);
  }

  // Per unit, allocation ids (-1: none).
  std::vector<int> unsharded_flat_param_;
  std::vector<int> all_gather_input_;  // the shard-sized communication buffer
  // limit_all_gathers: ops whose frees the next unshards wait for, oldest first.
  std::deque<int> pending_frees_;
  // The micro-step whose backward has run the unit's pre-backward hook (-1: none yet).
  std::vector<int> pre_backward_in_micro_step_;
};

}  // namespace

std::unique_ptr<FrameworkPolicy> make_fsdp1_policy(StepContext& step) { return std::make_unique<Fsdp1Policy>(step); }

}  // namespace fsdpsim::planner
