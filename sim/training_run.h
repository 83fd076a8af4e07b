// A whole training run at one step's time: how long T tokens take on the scenario's GPUs
// (`estimate --train-tokens`), and the fewest nodes that train them by a deadline
// (`estimate --deadline-days`). Optimizer steps only: checkpoint saves, evaluation, data
// loading stalls and restarts are not in it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "planner/scenario.h"
#include "planner/sweep_space.h"
#include "sim/estimate.h"

namespace fsdpsim::sim {

struct TrainingRun {
  double tokens = 0;           // asked for
  double tokens_per_step = 0;  // global_batch x seq_len
  double steps = 0;            // ceil(tokens / tokens_per_step): the last step runs whole
  double step_seconds = 0;
  double seconds = 0;  // steps x step_seconds
  int gpus = 0;
  double gpu_hours = 0;         // seconds x gpus / 3600
  double usd_per_gpu_hour = 0;  // the price of a GPU-hour (0: not given)
  double usd = 0;               // gpu_hours x usd_per_gpu_hour
};
TrainingRun training_run(const Estimate& estimate, const planner::Scenario& scenario, double tokens,
                         double usd_per_gpu_hour = 0);

// The most GPUs the deadline search tries when the global batch follows the world: 2^17, more
// than any published training job.
constexpr std::int64_t kMaxDeadlineGpus = std::int64_t{1} << 17;

// The fewest nodes (the scenario's GPUs per node, micro-batch and everything else kept) whose run
// of `tokens` fits in GPU memory and ends within `deadline_seconds`.
//
// The global batch: a stated one (training.global_batch) is the recipe's and is kept, so only
// node counts whose GPUs x micro-batch divide it are tried (gradient accumulation shrinks as
// nodes are added) and the batch bounds the GPUs; a derived one keeps the gradient accumulation
// and grows with the world, as the one-line form's batch does.
//
// The search doubles the node count (over the node counts allowed) until a run meets the
// deadline, then bisects between the last that did not and the first that did. It assumes what
// holds for data parallelism: more nodes never need more memory a GPU and never make the run
// longer. Every point tried is kept, so a reader can see that it held. It stops doubling where
// more nodes stopped lowering a device peak that does not fit (`stopped`).
struct DeadlineSearch {
  struct Trial {
    std::int64_t nodes = 0;
    int gpus = 0;
    std::int64_t global_batch = 0;
    std::int64_t grad_accum = 0;
    double device_peak_bytes = 0;
    double gpu_memory_bytes = 0;
    bool fits = false;  // device peak + headroom <= GPU memory
    TrainingRun run;
    bool meets = false;  // fits, and run.seconds <= the deadline
    int order = 0;       // when it was tried (0 first)
  };
  double tokens = 0;
  double deadline_seconds = 0;
  double headroom_bytes = 0;
  bool batch_stated = false;        // the global batch is kept (else it follows the world)
  std::int64_t max_nodes = 0;       // the largest node count the search could try
  std::string max_nodes_reason;     // why no more nodes were tried
  // Why the doubling stopped before max_nodes without a meet: two node counts in turn that do not
  // fit, the larger no lower in device peak (the activations, not the sharded state, exceed the
  // GPU: more nodes will not make it fit). Empty otherwise.
  std::string stopped;
  std::int64_t fewest_nodes = 0;    // 0: no node count up to max_nodes meets the deadline
  std::vector<Trial> tried;         // by node count, ascending
  const Trial* answer() const;      // the trial of fewest_nodes (null when none)
  const Trial* fastest() const;     // the shortest fitting run tried (null when none fits)
};

DeadlineSearch find_nodes_for_deadline(const planner::ScenarioTemplate& base, double tokens, double deadline_seconds,
                                       double usd_per_gpu_hour = 0, double headroom_bytes = 0);

}  // namespace fsdpsim::sim
