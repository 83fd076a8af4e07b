// Float8 training as torchao does it (torchao.float8.convert_to_float8_training: every
// converted nn.Linear becomes a Float8Linear that casts its input, weight and output gradient to
// fp8 with tensorwise dynamic scaling and runs its three GEMMs through torch._scaled_mm), and
// FSDP2's float8 all-gather (enable_fsdp_float8_all_gather). training.matmul_dtype fp8 and
// fsdp.all_gather_dtype fp8 (planner/scenario.h) turn them on.
//
// Which linears convert: torchtitan's module_filter_fn (torchtitan
// components/quantization/utils.py), the filter torchao's docs pass too: an nn.Linear whose
// weight dims are both multiples of 16 ("float8 tensorcore hardware requirements"), except the
// output layer (torchtitan's filter_fqns default ["output"]; here: the module whose costs carry
// the loss head, and everything under it). Attention (QK^T, AV) is not a linear: it stays 16-bit.
// A model file links a costed module's matmuls to its Linear children by weight shape
// [out_features, in_features]; a matmul with no such Linear (GPT-2's Conv1D) stays 16-bit.
//
// The scaling kernels' bytes follow torchao's own roofline for the tensorwise recipe
// (torchao/testing/training/roofline_utils.py get_tensor_memory_traffic_ovhd_s, pytorch/ao@36027d8):
// per tensor an amax reduction (reads it in bf16), a second-stage reduction (no traffic
// modelled), and a cast that reads bf16 and writes fp8 in the layouts the GEMMs need.
// docs/cost-model.md ("fp8 training") derives every count.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "models/model.h"

namespace fsdpsim::planner {

struct Scenario;

enum class Float8Pass { forward, backward };

// The HBM bytes of each scaling kernel one Float8Linear runs in a pass over `tokens` tokens, in
// launch order. Forward: the input's amax, second stage, cast (bf16 in, fp8 out twice:
// row-major for the output GEMM and column-major for backward's weight gradient), then, unless
// the weight arrived in fp8 (float8 all-gather), the weight's amax, second stage and cast.
// Backward: the output gradient's amax, second stage and cast (written twice), then the weight's
// second cast (the transposed layout for the input gradient) unless it arrived in fp8.
std::vector<double> float8_cast_kernel_bytes(double tokens, double in_features, double out_features,
                                             Float8Pass pass, bool weight_arrives_in_fp8);

// Which of a model's linears run as Float8Linears, for one scenario. Empty (nothing in fp8)
// unless training.matmul_dtype is fp8.
class Float8Linears {
 public:
  explicit Float8Linears(const Scenario& scenario);

  bool enabled() const { return enabled_; }
  // Whether the weight arrives in fp8 (fsdp.all_gather_dtype fp8): no weight casts in compute.
  bool weights_gathered_in_fp8() const { return weights_gathered_in_fp8_; }
  // Whether matmul `m` of the module whose costs are `costs` runs in fp8.
  bool runs_in_fp8(const models::ModuleCosts& costs, const models::Matmul& m) const;
  // Whether `p` is a converted linear's weight (the float8 all-gather gathers it in fp8).
  bool is_float8_weight(const models::Parameter* p) const { return weights_.count(p) > 0; }
  // Whether any linear converts (none where the model has no eligible nn.Linear: GPT-2's Conv1D).
  bool converts_any() const { return !weights_.empty(); }

 private:
  bool enabled_ = false;
  bool weights_gathered_in_fp8_ = false;
  // Per costed module: the [out, in] shapes of the converted Linear weights beneath it.
  std::unordered_map<const models::ModuleCosts*, std::vector<std::pair<double, double>>> linear_shapes_;
  std::unordered_set<const models::Parameter*> weights_;
};

// torchtitan's dims filter: both weight dims multiples of 16.
bool float8_eligible_dims(double in_features, double out_features);

}  // namespace fsdpsim::planner
