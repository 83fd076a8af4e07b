#include "planner/float8.h"

#include <algorithm>
#include <cmath>

#include "planner/scenario.h"

namespace fsdpsim::planner {

namespace {

constexpr double kBf16Bytes = 2;
constexpr double kFp8Bytes = 1;

// One tensor's scaling kernels in torchao's tensorwise roofline (roofline_utils.py,
// get_tensor_memory_traffic_ovhd_s, fuse_with_prev=False): kernel 1 reads the tensor for its
// max(abs) partials; kernel 2 reduces the partials (traffic "not modeled": 0 bytes, but a
// launch); kernel 3 reads the tensor again and writes it in fp8 `fp8_copies` times.
void add_scaled_cast(std::vector<double>& kernels, double numel, int fp8_copies) {
  kernels.push_back(kBf16Bytes * numel);
  kernels.push_back(0);
  kernels.push_back(kBf16Bytes * numel + fp8_copies * kFp8Bytes * numel);
}

}  // namespace

bool float8_eligible_dims(double in_features, double out_features) {
  return std::fmod(in_features, 16.0) == 0 && std::fmod(out_features, 16.0) == 0;
}

std::vector<double> float8_cast_kernel_bytes(double tokens, double in_features, double out_features,
                                             Float8Pass pass, bool weight_arrives_in_fp8) {
  std::vector<double> kernels;
  const double weight_numel = in_features * out_features;
  if (pass == Float8Pass::forward) {
    // The input, written in fp8 row-major (output GEMM) and column-major (weight gradient).
    add_scaled_cast(kernels, tokens * in_features, 2);
    // The weight: its amax and the forward cast (the roofline's kernels 1-3 of a weight).
    if (!weight_arrives_in_fp8) add_scaled_cast(kernels, weight_numel, 1);
  } else {
    // The output gradient, both layouts (input gradient and weight gradient GEMMs).
    add_scaled_cast(kernels, tokens * out_features, 2);
    // The weight's backward cast (the roofline's kernel 4 of a weight: the amax is reused).
    // torchao's backward skips it for a weight already in fp8 (tensor_already_casted_to_fp8,
    // torchao/float8/float8_linear.py).
    if (!weight_arrives_in_fp8) kernels.push_back(kBf16Bytes * weight_numel + kFp8Bytes * weight_numel);
  }
  return kernels;
}

Float8Linears::Float8Linears(const Scenario& scenario) {
  enabled_ = scenario.training.float8_linears();
  weights_gathered_in_fp8_ = enabled_ && scenario.fsdp.float8_all_gather;
  if (!enabled_) return;
  // Walk the tree: `owner` is the nearest module with costs at or above (whose matmuls the
  // Linears beneath it run), `output` whether we are in the output layer's subtree.
  struct Walker {
    Float8Linears& self;
    void walk(const models::Module& m, const models::ModuleCosts* owner, bool output) {
      if (m.costs) {
        owner = &*m.costs;
        output = output || m.costs->loss.has_value();
      }
      if (m.type == "Linear" && !output && owner) {
        for (const models::Parameter& p : m.params) {
          if (p.name != "weight" || p.shape.size() != 2) continue;
          const double out = static_cast<double>(p.shape[0]), in = static_cast<double>(p.shape[1]);
          if (!float8_eligible_dims(in, out)) continue;
          // The copies of a repeated block share their costs (models::Module::costs): one
          // entry per distinct shape, not one per copy's Linear.
          auto& shapes = self.linear_shapes_[owner];
          if (std::find(shapes.begin(), shapes.end(), std::pair{out, in}) == shapes.end()) shapes.emplace_back(out, in);
          self.weights_.insert(&p);
        }
      }
      for (const models::Module& c : m.children) walk(c, owner, output);
    }
  };
  Walker{*this}.walk(scenario.model->root, nullptr, false);
}

bool Float8Linears::runs_in_fp8(const models::ModuleCosts& costs, const models::Matmul& m) const {
  if (!enabled_ || costs.loss) return false;
  auto it = linear_shapes_.find(&costs);
  if (it == linear_shapes_.end()) return false;
  for (const auto& [out, in] : it->second)
    if (out == m.out_features && in == m.in_features) return true;
  return false;
}

}  // namespace fsdpsim::planner
