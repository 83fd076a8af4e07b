#include "planner/op_costs.h"

#include <cmath>
#include <stdexcept>

namespace fsdpsim::planner {

const CollectiveEstimate& memoized_collective(const Op& op, const Schedule& schedule, const CostModel& cost,
                                              CollectiveMemo& memo) {
  const ProcessGroup& g = schedule.groups.at(op.group);
  const auto key = std::make_tuple(static_cast<int>(op.kind), op.comm_bytes, g.ranks, g.nodes);
  auto it = memo.find(key);
  if (it == memo.end()) it = memo.emplace(key, cost.collective(op, schedule)).first;
  return it->second;
}

OpCosts price_ops(const Schedule& schedule, const CostModel& cost, CollectiveMemo* memo) {
  const std::size_t n = schedule.ops.size();
  OpCosts c;
  c.source = "cost model (calibration: " + cost.calibration().name + ")";
  c.compute_slowdown_under_comm = cost.compute_slowdown_under_comm();
  c.launch_queue_kernels = cost.calibration().launch_queue_kernels;
  c.bf16_peak_flops = cost.bf16_peak_flops();
  c.duration_seconds.resize(n);
  c.issue_seconds.resize(n);
  c.issue_lead_seconds.resize(n);
  c.latency_seconds.assign(n, 0.0);
  c.kernels.assign(n, 0.0);
  CollectiveMemo local;
  CollectiveMemo& collectives = memo ? *memo : local;
  std::vector<KernelSetTimes> kernel_times(schedule.kernel_sets.size());  // each set priced once
  CostModel::IssueLeadMemo leads;                                          // each block's lead walked once
  for (const Op& op : schedule.ops) {
    if (is_collective(op.kind) && op.group >= 0 && op.group < static_cast<int>(schedule.groups.size())) {
      const CollectiveEstimate& e = memoized_collective(op, schedule, cost, collectives);
      c.duration_seconds[op.id] = e.seconds;
      c.latency_seconds[op.id] = e.latency_seconds;
    } else {
      c.duration_seconds[op.id] = cost.duration_seconds(op, schedule, &kernel_times);
    }
    c.issue_seconds[op.id] = cost.issue_seconds(op);
    c.issue_lead_seconds[op.id] = cost.issue_lead_seconds(op, schedule, &kernel_times, &leads);
    c.kernels[op.id] = cost.kernels(op);
  }
  return c;
}

OpCosts costs_from_durations(const Schedule& schedule, std::vector<double> duration_seconds, std::string source) {
  OpCosts c;
  c.source = std::move(source);
  c.duration_seconds = std::move(duration_seconds);
  c.issue_seconds.assign(schedule.ops.size(), 0.0);
  check_costs(schedule, c);
  return c;
}

void check_costs(const Schedule& s, const OpCosts& c) {
  const std::size_t n = s.ops.size();
  auto sized = [n](const std::vector<double>& v, bool optional) { return v.size() == n || (optional && v.empty()); };
  if (!sized(c.duration_seconds, false) || !sized(c.issue_seconds, false) || !sized(c.latency_seconds, true) ||
      !sized(c.kernels, true) || !sized(c.issue_lead_seconds, true))
    throw std::invalid_argument("the op costs give " + std::to_string(c.duration_seconds.size()) + " durations and " +
                                std::to_string(c.issue_seconds.size()) + " issue costs for a schedule of " +
                                std::to_string(n) + " ops");
  auto finite_nonnegative = [](double x) { return x >= 0 && std::isfinite(x); };
  for (std::size_t i = 0; i < n; ++i) {
    const bool ok = finite_nonnegative(c.duration_seconds[i]) && finite_nonnegative(c.issue_seconds[i]) &&
                    (c.latency_seconds.empty() || finite_nonnegative(c.latency_seconds[i])) &&
                    (c.kernels.empty() || finite_nonnegative(c.kernels[i]));
    if (!ok)
      throw std::invalid_argument("op " + std::to_string(i) + " (" + s.ops[i].name +
                                  ") has a negative or non-finite duration or issue cost: " +
                                  std::to_string(c.duration_seconds[i]) + " s");
    if (!c.issue_lead_seconds.empty() &&
        !(finite_nonnegative(c.issue_lead_seconds[i]) && c.issue_lead_seconds[i] <= c.issue_seconds[i]))
      throw std::invalid_argument("op " + std::to_string(i) + " (" + s.ops[i].name + ") has an issue lead of " +
                                  std::to_string(c.issue_lead_seconds[i]) + " s; expected one between 0 and its issue (" +
                                  std::to_string(c.issue_seconds[i]) + " s)");
  }
  if (!finite_nonnegative(c.compute_slowdown_under_comm) || !finite_nonnegative(c.launch_queue_kernels) ||
      !finite_nonnegative(c.bf16_peak_flops))
    throw std::invalid_argument("the op costs' slowdown, launch queue and peak must be finite and non-negative");
}

}  // namespace fsdpsim::planner
