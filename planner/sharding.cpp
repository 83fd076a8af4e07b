#include "planner/sharding.h"

#include <algorithm>
#include <bit>
#include <stdexcept>
#include <cstdio>
#include <string>

#include "models/checked_arithmetic.h"

namespace fsdpsim::planner {

namespace {
std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return checked_add(a, b - 1, "a shard's elements") / b; }
}  // namespace

std::int64_t fsdp2_local_numel(const models::Parameter& p, int world, int rule) {
  const std::int64_t d0 = p.shape.front();
  if (rule == kRowShardsExpertsOnDim1 && p.experts > 0 && p.shape.size() >= 2 && world > d0) {
    const std::int64_t d1 = p.shape[1];
    return checked_mul(checked_mul(d0, ceil_div(d1, world), "an expert shard's rows"), p.numel() / (d0 * d1),
                       "a parameter's shard elements");
  }
  return checked_mul(ceil_div(d0, world), p.numel() / d0, "a parameter's shard elements");
}

UnitShard shard_fsdp2(const Unit& unit, int world, int rule) {
  UnitShard s;
  for (const models::Parameter* p : unit.params) {
    s.numel = checked_add(s.numel, p->numel(), "a unit's elements");
    s.local_numel = checked_add(s.local_numel, fsdp2_local_numel(*p, world, rule), "a unit's shard elements");
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

UnitShard shard_per_parameter(const Unit& unit, int world) {
  UnitShard s;
  for (const models::Parameter* p : unit.params) {
    s.numel = checked_add(s.numel, p->numel(), "a unit's elements");
    s.local_numel = checked_add(s.local_numel, ceil_div(p->numel(), world), "a unit's shard elements");
  }
  s.gathered_numel = checked_mul(s.local_numel, world, "a unit's shard elements x world");
  s.optimizer_numel = s.local_numel;  // DeepSpeed's fp32 partitions are the padded partitions
  return s;
}

int shard_rule(int fsdp_version, bool deepspeed_layout, bool params_sharded, bool torchtitan_placement) {
  if (deepspeed_layout) return params_sharded ? kPerParameterShards : kFlatShards;
  if (fsdp_version == 1) return kFlatShards;
  return torchtitan_placement ? kRowShardsExpertsOnDim1 : kRowShards;
}

UnitShard shard_unit(const Unit& unit, int world, int rule) {
  return rule == kFlatShards ? shard_fsdp1(unit, world)
       : rule == kPerParameterShards ? shard_per_parameter(unit, world)
                                     : shard_fsdp2(unit, world, rule);
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

std::int64_t pinned_block_bytes(std::int64_t bytes) {
  if (bytes <= 0) return 0;
  if (bytes > (std::int64_t{1} << 62)) throw ArithmeticOverflow("a pinned block's bytes exceed 2^62");
  return static_cast<std::int64_t>(std::bit_ceil(static_cast<std::uint64_t>(bytes)));
}

std::int64_t pinned_shard_bytes(const Unit& unit, const UnitShard& shard, int rule, int shard_group,
                                int expert_parallel, int bytes_per_element) {
  if (rule == kFlatShards) return pinned_block_bytes(checked_mul(shard.local_numel, bytes_per_element, "a shard's bytes"));
  const bool experts = expert_parallel > 1 && is_expert_unit(unit);
  std::int64_t total = 0;
  for (const models::Parameter* p : unit.params) {
    const std::int64_t local =
        experts ? expert_local_numel(*p, shard_group, expert_parallel) : fsdp2_local_numel(*p, shard_group, rule);
    total = checked_add(total, pinned_block_bytes(checked_mul(local, bytes_per_element, "a shard's bytes")),
                        "a unit's pinned bytes");
  }
  return total;
}

std::string padding_warning(const std::vector<Unit>& units, const std::vector<UnitShard>& shards, int shard_group,
                            int expert_parallel, int rule) {
  if ((rule != kRowShards && rule != kRowShardsExpertsOnDim1) || shard_group <= 1) return "";
  // Rank 0's shard elements against an even split: a unit's numel over the ranks its all-gather
  // spans (gathered / local), in doubles (a share need not be whole).
  double held = 0, even = 0, worst_excess = 0;
  const models::Parameter* worst = nullptr;
  int worst_ranks = 0;
  bool worst_in_ep_layout = false;
  for (std::size_t u = 0; u < units.size() && u < shards.size(); ++u) {
    const UnitShard& s = shards[u];
    if (s.local_numel <= 0) continue;
    const double ranks = static_cast<double>(s.gathered_numel) / static_cast<double>(s.local_numel);
    held += static_cast<double>(s.local_numel);
    even += static_cast<double>(s.numel) / ranks;
    const bool experts = expert_parallel > 1 && is_expert_unit(units[u]);
    for (const models::Parameter* p : units[u].params) {
      const double local = experts ? static_cast<double>(expert_local_numel(*p, shard_group, expert_parallel))
                                   : static_cast<double>(fsdp2_local_numel(*p, shard_group, rule));
      const double numel = static_cast<double>(p->numel()) / (experts ? expert_parallel : 1);
      if (local - numel / ranks > worst_excess) {
        worst_excess = local - numel / ranks;
        worst = p;
        worst_ranks = static_cast<int>(ranks);
        worst_in_ep_layout = experts;
      }
    }
  }
  if (!(held > 1.25 * even) || !worst) return "";
  char ratio[32];
  std::snprintf(ratio, sizeof ratio, "%.2f", held / even);
  std::string shape;
  for (std::int64_t d : worst->shape) shape += (shape.empty() ? "" : ", ") + std::to_string(d);
  std::string w = "fsdp: FSDP2 pads each parameter's dim 0 to a multiple of the shard group, so rank 0's parameter "
                  "shards (and its gradients, optimizer state and all-gathers with them) are " + std::string(ratio) +
                  "x an even split of the model; most of it is \"" + worst->full_name + "\" [" + shape + "]";
  if (!worst_in_ep_layout) {
    const std::int64_t rows = worst->shape.front(), per_rank = ceil_div(rows, worst_ranks);
    const std::int64_t padding_only = worst_ranks - ceil_div(rows, per_rank);
    w += ", " + std::to_string(rows) + (rows == 1 ? " row over " : " rows over ") + std::to_string(worst_ranks) +
         " ranks: each holds " +
         std::to_string(per_rank) + (per_rank == 1 ? " row" : " rows") +
         (padding_only > 0 ? " (" + std::to_string(padding_only) + " ranks padding only)" : std::string(" (padded)"));
  }
  if (worst->experts > 0 && expert_parallel <= 1)
    w += "; fsdp.expert_parallel splits the routed experts over an EP group and shards them on dim 1 when the "
         "expert shards outnumber the experts (torchtitan's layout)";
  return w;
}

}  // namespace fsdpsim::planner
