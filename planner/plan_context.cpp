// StepContext: the schedule being written and its building blocks (planner/plan_policy.h).
#include <algorithm>

#include "planner/device_memory.h"
#include "planner/float8.h"
#include "planner/internal/plan_policy.h"
#include "planner/sharding.h"

namespace fsdpsim::planner {

StepContext::StepContext(const Scenario& scenario, const PlanCache::Layout& layout, Naming naming, Plan& plan)
    : scenario(scenario),
      training(scenario.training),
      fsdp(scenario.fsdp),
      layout(layout),
      plan(plan),
      schedule(plan.schedule),
      sharded(sharded_model_state(scenario.fsdp, scenario.training)),
      param_dtype_bytes(models::dtype_bytes(scenario.training.param_dtype)),
      reduce_dtype_bytes(models::dtype_bytes(scenario.training.reduce_dtype)),
      master_dtype_bytes(models::dtype_bytes(scenario.training.master_dtype)),
      stored_param_dtype_bytes(scenario.training.master_weights == MasterWeights::sharded_param ? master_dtype_bytes
                                                                                                : param_dtype_bytes),
      naming_(naming) {
  const std::size_t units = plan.units.size();
  params_ready_op.assign(units, -1);
  unsharded_grads.assign(units, {});
  sharded_grad.assign(units, -1);
  accumulated_grad.assign(units, -1);
  if (fsdp.float8_all_gather) count_float8_gathered_numel();
  allocate_cublas_workspaces();
}

// [cuBLAS workspaces] Two threads run GEMMs: the one that runs forward, and autograd's worker
// thread for the device, which runs backward (torch/csrc/autograd/engine.cpp, one thread per
// device). Each has its own cuBLAS handle and so its own workspace, allocated through the
// caching allocator at its first GEMM and kept (CublasHandlePool.cpp): part of the allocated
// and reserved memory before every step.
void StepContext::allocate_cublas_workspaces() {
  const auto bytes = static_cast<std::int64_t>(cublas_workspace_bytes_per_thread(scenario.cluster.gpu.arch));
  new_alloc(bytes, MemCategory::workspace, Stream::compute, "cuBLAS workspace of the forward thread", true, false);
  new_alloc(bytes, MemCategory::workspace, Stream::compute, "cuBLAS workspace of autograd's backward thread", true, false);
}

// FSDP2 pads each parameter on dim 0 (sharding.h), so a weight's gathered size is W times its shard.
void StepContext::count_float8_gathered_numel() {
  const Float8Linears float8(scenario);
  float8_gathered_numel.assign(plan.units.size(), 0);
  for (const Unit& u : plan.units)
    for (const models::Parameter* p : u.params)
      if (float8.is_float8_weight(p))
        float8_gathered_numel[u.index] += checked_mul(fsdp2_local_numel(*p, fsdp.shard_group_size), fsdp.shard_group_size,
                                                      "a float8 weight's shard elements x shard group");
}

std::int64_t StepContext::gathered_param_bytes(int u) const {
  const std::int64_t fp8 = float8_gathered_numel.empty() ? 0 : float8_gathered_numel[u];
  return checked_add(buffer_bytes(shard(u).gathered_numel - fp8, param_dtype_bytes),
                     buffer_bytes(fp8, models::dtype_bytes(models::DType::fp8)), "a unit's gathered parameter bytes");
}

int StepContext::add_op(OpKind kind, Stream stream, const Name& name, int unit, const std::string& module) {
  // Made in place: an Op (two strings, four id lists) moved into the vector cost as much as
  // filling it.
  Op& op = schedule.ops.emplace_back();
  op.id = static_cast<int>(schedule.ops.size()) - 1;
  op.kind = kind;
  op.stream = stream;
  if (naming_ == Naming::readable) op.name = name.str();
  op.unit = unit;
  op.module = module;
  op.micro_step = micro_step;
  op.phase = phase;
  last_op = op.id;
  return last_op;
}

int StepContext::nvme_swap(OpKind kind, double bytes, const Name& name, int unit, int after) {
  const int id = add_op(kind, Stream::host, name, unit);
  op(id).comm_bytes = bytes;
  if (after >= 0) op(id).deps.push_back(after);
  return id;
}

int StepContext::copy_offloaded_shard_to_device(int u, int& device_shard) {
  const std::int64_t bytes = buffer_bytes(shard(u).local_numel, stored_param_dtype_bytes);
  const std::string& name = label(u);
  const int swap_in = params_on_nvme() ? nvme_swap(OpKind::nvme_read, static_cast<double>(bytes), Name{"NVMe read shard ", name}, u, -1) : -1;
  const int h2d = add_op(OpKind::h2d, Stream::all_gather, Name{"h2d shard ", name}, u);
  if (swap_in >= 0) op(h2d).deps.push_back(swap_in);
  op(h2d).comm_bytes = static_cast<double>(bytes);
  device_shard = alloc_at(h2d, bytes, MemCategory::temporary, Name{"host-to-device shard of ", name});
  return h2d;
}

int StepContext::new_alloc(std::int64_t bytes, MemCategory category, Stream stream, const Name& label, bool persistent,
                           bool model_state) {
  Allocation& a = schedule.allocations.emplace_back();  // in place, as add_op's op
  a.id = static_cast<int>(schedule.allocations.size()) - 1;
  a.bytes = bytes;
  a.category = category;
  a.stream = stream;
  if (naming_ == Naming::readable) a.label = label.str();
  a.persistent = persistent;
  a.model_state = model_state;
  return a.id;
}

int StepContext::alloc_at(int op, std::int64_t bytes, MemCategory category, const Name& label, bool model_state) {
  const int id = new_alloc(bytes, category, schedule.ops[op].stream, label, false, model_state);
  schedule.allocations[id].unit = schedule.ops[op].unit;
  schedule.ops[op].allocs.push_back(id);
  return id;
}

int StepContext::host_alloc(int op, std::int64_t bytes, MemCategory category, Placement placement, const Name& label,
                            bool model_state) {
  const int id = new_alloc(bytes, category, Stream::host, label, op < 0, model_state);
  schedule.allocations[id].placement = placement;
  if (op >= 0) schedule.ops[op].allocs.push_back(id);
  return id;
}

int StepContext::next_unit_to_gather(const std::vector<int>& order, int u) const {
  auto it = std::find(order.begin(), order.end(), u);
  for (++it; it != order.end(); ++it)
    if (needs_gather(*it)) return *it;
  return -1;
}

int StepContext::last_compute_before(int op) const {
  for (int i = op - 1; i >= 0; --i)
    if (schedule.ops[i].stream == Stream::compute) return i;
  return 0;
}

// Under expert parallelism a rank holds E/ep of each routed expert weight (sharding.h,
// shard_expert_unit), so its gradients cover those experts only.
std::int64_t StepContext::local_param_numel(int p) const {
  const int ep = fsdp.expert_parallel;
  const std::int64_t numel = layout.param_numel[static_cast<std::size_t>(p)];
  return ep > 1 && layout.params[static_cast<std::size_t>(p)]->experts > 0 ? numel / ep : numel;
}

void StepContext::allocate_grads(int op, const std::vector<int>& params, const Name& name) {
  // (unit, elements) in unit order; a module's parameters are nearly always in one unit.
  std::vector<std::pair<int, std::int64_t>> numel_by_unit;
  for (int p : params) {
    if (has_grad[p]) continue;
    has_grad[p] = 1;
    const int u = layout.param_owner[p];
    auto it = std::find_if(numel_by_unit.begin(), numel_by_unit.end(), [&](const auto& e) { return e.first == u; });
    if (it == numel_by_unit.end()) numel_by_unit.emplace_back(u, local_param_numel(p));
    else it->second = checked_add(it->second, local_param_numel(p), "a unit's gradient elements");
  }
  std::sort(numel_by_unit.begin(), numel_by_unit.end());
  for (const auto& [u, numel] : numel_by_unit) {
    unsharded_grads[u].push_back(alloc_at(op, buffer_bytes(numel, param_dtype_bytes), MemCategory::unsharded_grad, name));
    schedule.allocations[unsharded_grads[u].back()].unit = u;  // the parameters' unit, not the op's
  }
}

void StepContext::free_unsharded_grads(int op, int u) {
  for (int& g : unsharded_grads[u]) free_at(op, g);
  unsharded_grads[u].clear();
}

}  // namespace fsdpsim::planner
