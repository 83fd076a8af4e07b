// The part of gradient reduction FSDP1 and FSDP2 share (planner/plan_policy.h): accumulation
// without communication, the reduce-scatter, HSDP's all-reduce and the post-reduce step.
// What differs between them (the copy-in that builds the reduce-scatter input, which stream
// reduces, when the input is freed) is in plan_fsdp1.cpp and plan_fsdp2.cpp.
#include "planner/internal/plan_policy.h"

namespace fsdpsim::planner {

void allocate_uncovered_grads(StepContext& step, int u) {
  std::vector<int> uncovered;
  for (int p : step.layout.unit_params[u])
    if (!step.has_grad[p]) uncovered.push_back(p);
  if (!uncovered.empty() && step.last_op >= 0) step.allocate_grads(step.last_op, uncovered, Name{"grads of ", step.label(u)});
}

bool reduces_this_micro_step(StepContext& step, int u, int accumulated_dtype_bytes) {
  if (step.fsdp.sync_grads_every_micro_step || step.schedule.micro_steps <= 1) return true;
  const std::int64_t gathered_numel = step.shard(u).gathered_numel;
  const int acc = step.add_op(OpKind::copy_out, Stream::compute, Name{"accumulate unsharded grads ", step.label(u)}, u);
  // Reads this micro-step's gradient; writes the sum (the first micro-step only copies).
  const int sum_bytes = step.first_micro_step() ? accumulated_dtype_bytes : 2 * accumulated_dtype_bytes;
  step.op(acc).hbm_bytes = static_cast<double>(gathered_numel) * (step.param_dtype_bytes + sum_bytes);
  if (step.accumulated_grad[u] < 0)
    step.accumulated_grad[u] = step.alloc_at(acc, step.buffer_bytes(gathered_numel, accumulated_dtype_bytes), MemCategory::unsharded_grad,
                                             Name{"accumulated unsharded grads of ", step.label(u)});
  step.free_unsharded_grads(acc, u);
  return step.last_micro_step();
}

ReduceScatter issue_reduce_scatter(StepContext& step, int u, int copy_in, Stream stream) {
  const UnitShard& sh = step.shard(u);
  ReduceScatter rs;
  rs.op = step.add_op(OpKind::reduce_scatter, stream, Name{"reduce-scatter ", step.label(u)}, u);
  step.op(rs.op).deps.push_back(copy_in);
  step.op(rs.op).comm_bytes = static_cast<double>(sh.gathered_numel * step.reduce_dtype_bytes);
  step.op(rs.op).group = step.shard_group_of(u);
  // On the first micro-step a reduced shard already in the stored dtype is the sharded
  // gradient itself; otherwise it is cast and added in (finish_reduction).
  rs.output_is_grad = step.first_micro_step() && step.reduce_dtype_bytes == step.stored_param_dtype_bytes &&
                      !step.optimizer_on_host();
  rs.output = step.alloc_at(rs.op, sh.local_numel * step.reduce_dtype_bytes,
                            rs.output_is_grad ? MemCategory::sharded_grad : MemCategory::reduce_scatter_buffer,
                            rs.output_is_grad ? Name{"sharded grads of ", step.label(u)}
                                              : Name{"reduce-scatter output of ", step.label(u)},
                            rs.output_is_grad);
  return rs;
}

namespace {

// [FSDP2 offload accumulation] FSDP2's foreach_reduce (torch/distributed/fsdp/_fully_shard/
// _fsdp_collectives.py) copies the reduced shard to the host with `non_blocking =
// fsdp_param.pin_memory and not to_accumulate_grad` ("Only overlap the D2H copy ... if not
// accumulating gradients since the CPU add kernel depends on the copy result"), then adds it in
// on the CPU (`sharded_param.grad._local_tensor += new_sharded_grad`). So once the host holds
// a gradient (every micro-step after the first that reduces), the copy goes into a new pageable
// tensor, the CPU waits for it, and the CPU adds it: the host op below (it depends on the copy;
// a host op runs on the CPU once its deps are done), reading both and writing the sum (12 bytes an
// fp32 element) at the host's rate. The session-35 offload audit found neither in the step.
int accumulate_on_host(StepContext& step, int u, int d2h) {
  const std::int64_t bytes = step.shard(u).local_numel * step.stored_param_dtype_bytes;
  const std::string& name = step.label(u);
  int staged = step.host_alloc(d2h, bytes, MemCategory::reduce_scatter_buffer, Placement::pageable_host,
                                     Name{"host copy of the reduced grads of ", name});
  const int add = step.add_op(OpKind::copy_out, Stream::host, Name{"accumulate host grads ", name}, u);
  step.op(add).deps.push_back(d2h);
  step.op(add).hbm_bytes = 3.0 * static_cast<double>(bytes);
  step.free_at(add, staged);
  return add;
}

}  // namespace

void finish_reduction(StepContext& step, int u, const ReduceScatter& rs) {
  const UnitShard& sh = step.shard(u);
  const std::string& name = step.label(u);
  int last = rs.op;
  if (is_hybrid(step.fsdp.strategy) && step.scenario.replicas() > 1) {
    const int all_reduce = step.add_op(OpKind::all_reduce, Stream::all_reduce, Name{"all-reduce ", name}, u);
    step.op(all_reduce).deps.push_back(rs.op);
    step.op(all_reduce).comm_bytes = static_cast<double>(sh.local_numel * step.reduce_dtype_bytes);
    step.op(all_reduce).group = step.groups.replicate;
    last = all_reduce;
  }
  int output = rs.output;
  int host_accumulate = -1;
  if (step.optimizer_on_host()) {
    const int d2h = step.add_op(OpKind::d2h, step.op(last).stream, Name{"device-to-host grads ", name}, u);
    if (step.deepspeed_offload()) {
      // DeepSpeed copies the reduced partition as it is into its fp32 host gradient buffer
      // (persistent, plan.cpp make_persistent_state; stage3.py partition_grads: copy_ into
      // fp32_partitioned_groups_flat's grad).
      step.op(d2h).comm_bytes = static_cast<double>(sh.local_numel * step.reduce_dtype_bytes);
    } else {
      // FSDP casts to the parameter dtype and copies into pinned host memory: FSDP2's foreach_reduce
      // .to("cpu", non_blocking=True) (a pinned destination), FSDP1's _cpu_grad (pinned). The
      // sharded gradient lives on the host until the optimizer's zero_grad.
      step.op(d2h).comm_bytes = static_cast<double>(sh.local_numel * step.stored_param_dtype_bytes);
      if (step.sharded_grad[u] < 0) {
        step.sharded_grad[u] = step.host_alloc(d2h, step.pinned_shard_bytes(u, step.stored_param_dtype_bytes),
                                               MemCategory::sharded_grad, Placement::pinned_host,
                                               Name{"host sharded grads of ", name});
      } else if (step.fsdp.version == 2) {
        host_accumulate = accumulate_on_host(step, u, d2h);
      }
    }
    step.free_at(d2h, output);
    // ZeRO-Infinity's offload_optimizer nvme: the fp32 gradient partition is swapped out to NVMe
    // as it arrives and read back with the optimizer state at the step (stage3.py partition_grads
    // -> optimizer_swapper.swap_out_gradients; _optimizer_states_and_gradient_swap_in).
    const int ready = step.optimizer_on_nvme()
                          ? step.nvme_swap(OpKind::nvme_write, static_cast<double>(sh.local_numel * step.master_dtype_bytes),
                                           Name{"NVMe write grads ", name}, u, d2h)
                      : host_accumulate >= 0 ? host_accumulate
                                             : d2h;
    step.gradient_ready_ops.push_back(ready);
    return;
  }
  if (rs.output_is_grad) {
    step.sharded_grad[u] = output;
    step.gradient_ready_ops.push_back(last);
    return;
  }
  const int accumulate = step.add_op(OpKind::copy_out, step.op(last).stream, Name{"accumulate grads ", name}, u);
  // Reads the reduced shard and the sharded gradient, writes the sum in the stored dtype.
  step.op(accumulate).hbm_bytes =
      static_cast<double>(sh.local_numel) * (step.reduce_dtype_bytes + 2 * step.stored_param_dtype_bytes);
  if (step.sharded_grad[u] < 0)
    step.sharded_grad[u] = step.alloc_at(accumulate, sh.local_numel * step.stored_param_dtype_bytes,
                                         MemCategory::sharded_grad, Name{"sharded grads of ", name}, true);
  step.free_at(accumulate, output);
  step.gradient_ready_ops.push_back(accumulate);
}

}  // namespace fsdpsim::planner
