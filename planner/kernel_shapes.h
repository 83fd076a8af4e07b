// The shapes of the kernels a compute op runs, as the Schedule carries them: the cost
// model prices GEMMs by (m, n, k) (planner/gemm_model.h) and attention by its call shape
// and kernel (planner/attention_model.h), instead of dividing FLOPs by one efficiency.
#pragma once

#include <cstddef>
#include <vector>

namespace fsdpsim::planner {

// C[m, n] = A[m, k] * B[k, n], one cuBLAS call. fp8: float8 operands (a torchao Float8Linear's
// torch._scaled_mm, bf16 output), priced at the GPU's fp8 peak; else the compute dtype.
struct GemmShape {
  double m = 0, n = 0, k = 0;
  bool fp8 = false;
  double flops() const { return 2 * m * n * k; }
};

// A grouped GEMM: one kernel running many GEMMs that share n and k or m and n (the routed
// experts of a MoE layer, torch._grouped_mm): `counts[i]` GEMMs of shape `shapes[i]`. The
// experts differ only in their tokens, so a MoE layer has at most two distinct shapes (the
// busiest expert and the others).
struct GroupedGemmShape {
  std::vector<GemmShape> shapes;
  std::vector<double> counts;
  double flops() const {
    double sum = 0;
    for (std::size_t i = 0; i < shapes.size() && i < counts.size(); ++i) sum += counts[i] * shapes[i].flops();
    return sum;
  }
};

// One attention call: one layer's attention over one micro-batch.
struct AttentionShape {
  double batch = 0, seq_q = 0, seq_kv = 0;
  int heads = 0, kv_heads = 0, head_dim = 0;
  bool causal = true;
  double window = 0;  // sliding window in tokens; 0 = full attention
  int v_head_dim = 0;  // v and the output per head when it differs from head_dim (DeepSeek's MLA); 0: head_dim
  int value_head_dim() const { return v_head_dim > 0 ? v_head_dim : head_dim; }
  // The head dim that gives a pair's matmul FLOPs as 4 x d: the mean of QK^T's and AV's.
  double mean_head_dim() const { return 0.5 * (head_dim + value_head_dim()); }
};

enum class AttentionPass { forward, backward };

}  // namespace fsdpsim::planner
