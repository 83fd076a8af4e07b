#include "planner/sharding.h"

#include <algorithm>

#include "models/checked_arithmetic.h"

namespace fsdpsim::planner {

namespace {
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return checked_add(a, b - 1, "a shard's elements") / b; }
}  // namespace

std::int64_t fsdp2_local_numel(const models::Parameter& p, int world) {
  const std::int64_t d0 = p.shape.front();
  return checked_mul(ceil_div(d0, world), p.numel() / d0, "a parameter's shard elements");
}

UnitShard shard_fsdp2(const Unit& unit, int world) {
  UnitShard s;
  for (const models::Parameter* p : unit.params) {
    s.numel = checked_add(s.numel, p->numel(), "a unit's elements");
    s.local_numel = checked_add(s.local_numel, fsdp2_local_numel(*p, world), "a unit's shard elements");
  }
  s.gathered_numel = checked_mul(s.local_numel, world, "a unit's shard elements x world");
  // Rank 0 holds the first ceil(d0/W) rows of every parameter, none of them padding
  // (ceil(d0/W) <= d0), so its unpadded shard is the padded one.
  s.optimizer_numel = s.local_numel;
  return s;
}

UnitShard shard_fsdp1(const Unit& unit, int world) {
  UnitShard s;
  s.numel = unit.numel();
  s.local_numel = ceil_div(s.numel, world);
  s.gathered_numel = checked_mul(s.local_numel, world, "a unit's shard elements x world");
  // The optimizer sees the sharded flat parameter (padding included) under use_orig_params=False.
  s.optimizer_numel = s.local_numel;
  return s;
}

UnitShard shard_unit(const Unit& unit, int world, int fsdp_version) {
  return fsdp_version == 1 ? shard_fsdp1(unit, world) : shard_fsdp2(unit, world);
}

std::int64_t expert_local_numel(const models::Parameter& p, int shard_group, int expert_parallel) {
  const std::int64_t local_experts = p.shape.front() / expert_parallel;
  const int efsdp = shard_group / expert_parallel;
  const std::int64_t per_expert = p.numel() / p.shape.front();
  if (p.shape.size() >= 2 && std::int64_t{efsdp} * expert_parallel > p.shape.front()) {
    // Shard(1): each rank keeps ceil(d1 / efsdp) rows of dim 1 of every local expert.
    const std::int64_t d1 = p.shape[1];
    return checked_mul(checked_mul(local_experts, ceil_div(d1, efsdp), "an expert shard's rows"), per_expert / d1,
                       "an expert shard's elements");
  }
  return checked_mul(ceil_div(local_experts, efsdp), per_expert, "an expert shard's elements");
}

UnitShard shard_expert_unit(const Unit& unit, int shard_group, int expert_parallel) {
  const int efsdp = shard_group / expert_parallel;
  UnitShard s;
  for (const models::Parameter* p : unit.params) {
    s.numel = checked_add(s.numel, p->numel() / expert_parallel, "an expert unit's local elements");
    s.local_numel = checked_add(s.local_numel, expert_local_numel(*p, shard_group, expert_parallel),
                                "an expert unit's shard elements");
  }
  s.gathered_numel = checked_mul(s.local_numel, efsdp, "an expert unit's shard elements x efsdp");
  s.optimizer_numel = s.local_numel;
  return s;
}

bool is_expert_unit(const Unit& unit) {
  return !unit.params.empty() &&
         std::all_of(unit.params.begin(), unit.params.end(), [](const models::Parameter* p) { return p->experts > 0; });
}

}  // namespace fsdpsim::planner
