// Sweep re-simulation through the executor contract: plan and price a point, then hand its
// schedule and op costs to the SimGrid engine.
#include "models/json_input.h"
#include "sim/estimate.h"
#include "sim/resource_guard.h"
#include "sim/scenario_loader.h"
#include "sim/sweep.h"

namespace fsdpsim::sim {

Resimulator simgrid_resimulator(std::shared_ptr<const planner::ScenarioTemplate> base, const ResourceBudget& budget) {
  return [base, budget](const PointResult& p, std::string& note) -> std::optional<PointMetrics> {
    try {
      const planner::Scenario scenario = base->instantiate(p.overrides);
      const Estimate e = estimate_step(scenario);
      const SimgridOptions options = simgrid_options(scenario);
      // The resource guard, point by point, as `simulate` applies it.
      const SimgridCost cost = estimate_simgrid_cost(e.plan.schedule, {e.cluster, e.calibration.nccl}, options);
      const std::string over = over_budget({cost.memory_bytes, cost.seconds, cost.memory_basis, "SimGrid"}, budget);
      if (!over.empty()) {
        note = "SimGrid re-simulation skipped: it would need " + over;
        return std::nullopt;
      }
      const SimgridResult r = simulate_estimate(e, options);
      PointMetrics m;
      m.step_seconds = r.timing.step_seconds;
      m.compute_seconds = r.timing.compute_seconds;
      m.exposed_comm_seconds = r.timing.exposed_comm_seconds;
      m.optimizer_seconds = r.timing.optimizer_seconds;
      m.tokens_per_second_per_gpu = r.timing.tokens_per_second_per_gpu;
      m.mfu = r.timing.mfu;
      note = "SimGrid";
      return m;  // memory: the schedule's, kept by resimulate_top
    } catch (const std::exception& e) {
      note = std::string("SimGrid re-simulation failed: ") + e.what();
      return std::nullopt;
    }
  };
}

}  // namespace fsdpsim::sim
