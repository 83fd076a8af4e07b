// FSDP units: which parameters are gathered together, from the wrap policy.
//
// A unit is what one fully_shard / FullyShardedDataParallel call manages. Units nest
// (the root wraps everything); a unit owns only the parameters no inner unit owns, and a
// tied parameter belongs to the innermost unit that holds every module using it.
#pragma once

#include <string>
#include <vector>

#include "models/model.h"
#include "planner/scenario.h"

namespace fsdpsim::planner {

struct Unit {
  int index = 0;                 // forward order of first use
  std::string name;              // the first wrapped module's full name ("<root>" for the root)
  std::vector<const models::Module*> modules;  // wrapped modules (several for every_k_blocks)
  std::vector<const models::Parameter*> params;  // owned parameters
  int parent = -1;               // enclosing unit, -1 for the root
  bool is_root = false;
  // [torchtitan's wrap] torchtitan's apply_fsdp (torchtitan/distributed/fsdp.py@b5bcd76, since
  // torchtitan #1094, July 2025): fully_shard on the token embeddings (resharded after forward
  // as the blocks are), on each block, and on [norm, lm_head] with reshard_after_forward=False
  // ("do not reshard_after_forward the last layers by default since FSDP would prefetch them
  // immediately"); the root holds what is left (planner/units.cpp ends_outside_blocks).
  // fully_shard(..., reshard_after_forward=False) on this unit alone: its
  // parameters stay unsharded from forward to backward whatever fsdp.reshard_after_forward says.
  bool kept_unsharded_after_forward = false;
  // Tied parameters whose own module is in this unit but whose other users are in other units:
  // FSDP keeps a tied weight in one flat parameter (the FSDP notes: "For weight-tied parameters,
  // we require them to be part of the same flat parameter"), so build_units moves it to the
  // innermost unit enclosing all its users, and this unit's wrap request is not honoured for it.
  std::vector<const models::Parameter*> tied_moved_out;
  int tied_moved_to = -1;  // the unit they went to
  std::int64_t numel() const;
};

// Units that hold parameters: those all-gather and reduce (a unit whose only parameter was
// tied and moved out holds none). What reports count.
int units_with_parameters(const std::vector<Unit>& units);

// One warning per unit whose wrap request tied weights kept from being honoured: which weight
// moved, to which unit, and whether the unit is left without parameters.
std::vector<std::string> tied_weight_warnings(const std::vector<Unit>& units);

// Builds the units for a model; throws InputError (file, "fsdp.wrap...") when the policy
// names modules the model does not have. `wrap_experts`: every module holding routed experts
// (models::Module::experts) is a unit of its own, as torchtitan wraps `moe.experts` under expert
// parallelism (its own fully_shard on the expert data-parallel mesh). `modules_apart`: every
// module outside the wrapped groups that owns parameters directly is a unit of its own, as
// DeepSpeed ZeRO-3 fetches each module's parameters in that module's own hooks (the embedding
// before the first block, the final norm and output layer after the last); a module with a tied
// parameter stays in the root unit, where the tie keeps it.
std::vector<Unit> build_units(const models::Model& model, const WrapSpec& wrap, const std::string& file,
                              bool wrap_experts = false, bool modules_apart = false);

// The block type(s) the "block" policies wrap: `wrap.block_types` if given, else the type of
// the costed modules that repeat or are written with "repeat", even once (the transformer
// layers; a 1-layer model has one).
std::vector<std::string> block_types(const models::Model& model, const WrapSpec& wrap);

}  // namespace fsdpsim::planner
