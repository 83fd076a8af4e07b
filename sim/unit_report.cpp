#include "sim/unit_report.h"

#include "sim/internal/text_table.h"

#include <cstdio>
#include <sstream>


namespace fsdpsim::sim {

using planner::MemCategory;
using planner::OpKind;
using planner::Stream;

namespace {

// The analytic engine's communication (sim/analytic.cpp): collectives and host copies.
bool is_communication(OpKind k) { return planner::is_collective(k) || k == OpKind::h2d || k == OpKind::d2h; }

void add_allocation(UnitRow& row, const planner::Allocation& a, const planner::Op* made_by) {
  // The rows are the GPU's: what offload keeps on the host is in the job's host table (the
  // session-36 audit found 11.2 GiB of offloaded state in these columns as MiB per rank).
  if (planner::on_host(a.placement)) return;
  if (a.persistent) {
    if (a.category == MemCategory::sharded_param) row.sharded_param_bytes += a.bytes;
    if (a.category == MemCategory::unsharded_param) {  // replicated parameters (NO_SHARD, ZERO1)
      row.sharded_param_bytes += a.bytes;
      row.unsharded_param_bytes = std::max(row.unsharded_param_bytes, a.bytes);
    }
    if (a.category == MemCategory::optimizer_state) row.optimizer_state_bytes += a.bytes;
    if (a.category == MemCategory::unsharded_grad) {
      row.replicated_grad_bytes += a.bytes;
      row.grad_bytes += a.bytes;
    }
    return;
  }
  if (!made_by) return;
  // One gathered copy: the largest unsharded parameters the unit's ops make (FSDP2's copy-out,
  // FSDP1's flat parameter; the same every time; a 1/k post-forward copy is smaller).
  if (a.category == MemCategory::unsharded_param)
    row.unsharded_param_bytes = std::max(row.unsharded_param_bytes, a.bytes);
  // Sharded gradients: the reduce-scatter's output of the first micro-step (later ones
  // accumulate into it or replace it).
  if (a.category == MemCategory::sharded_grad && made_by->micro_step == 0) row.grad_bytes += a.bytes;
  if (a.category == MemCategory::activation && made_by->phase == planner::Phase::forward && made_by->micro_step == 0)
    row.saved_activation_bytes += a.bytes;
}

}  // namespace

UnitReport unit_report(const Estimate& e) {
  const planner::Schedule& s = e.plan.schedule;
  UnitReport r;
  r.units.resize(e.plan.units.size());
  for (std::size_t u = 0; u < e.plan.units.size(); ++u) {
    UnitRow& row = r.units[u];
    row.unit = static_cast<int>(u);
    row.name = e.plan.units[u].name;
    row.parent = e.plan.units[u].parent;
    row.parameters = e.plan.shards[u].numel;  // (the units point into the scenario's model, which may be gone)
  }
  r.outside.name = "(outside units)";
  auto row_of = [&r](int unit) -> UnitRow& {
    return unit >= 0 && unit < static_cast<int>(r.units.size()) ? r.units[unit] : r.outside;
  };
  std::vector<const planner::Op*> made_by(s.allocations.size(), nullptr);
  for (const planner::Op& op : s.ops)
    for (int a : op.allocs) made_by[a] = &op;
  for (const planner::Allocation& a : s.allocations) add_allocation(row_of(a.unit), a, made_by[a.id]);

  const StepTiming& t = e.timing;
  for (const planner::Op& op : s.ops) {
    UnitRow& row = row_of(op.unit);
    const OpTiming& ot = t.ops[op.id];
    // As summarize_step counts compute_seconds: the compute stream, the optimizer apart.
    if (op.stream == Stream::compute && op.kind != OpKind::optimizer) row.compute_seconds += ot.end - ot.start;
    if (is_communication(op.kind)) row.comm_seconds += ot.nominal_seconds;
    if (op.kind == OpKind::all_gather) {
      row.all_gather_bytes += op.comm_bytes;
      ++row.all_gathers;
    } else if (op.kind == OpKind::reduce_scatter) {
      row.reduce_scatter_bytes += op.comm_bytes;
      ++row.reduce_scatters;
    } else if (op.kind == OpKind::all_reduce) {
      row.all_reduce_bytes += op.comm_bytes;
      ++row.all_reduces;
    }
  }
  for (std::size_t u = 0; u < t.exposed_comm_by_unit.size(); ++u) row_of(static_cast<int>(u)).exposed_comm_seconds += t.exposed_comm_by_unit[u];
  r.outside.exposed_comm_seconds += t.exposed_comm_outside_units;
  return r;
}

namespace {

bool same_figures(const UnitRow& a, const UnitRow& b) {
  return a.parent == b.parent && a.parameters == b.parameters && a.sharded_param_bytes == b.sharded_param_bytes &&
         a.optimizer_state_bytes == b.optimizer_state_bytes && a.unsharded_param_bytes == b.unsharded_param_bytes &&
         a.grad_bytes == b.grad_bytes && a.saved_activation_bytes == b.saved_activation_bytes &&
         a.all_gather_bytes == b.all_gather_bytes && a.reduce_scatter_bytes == b.reduce_scatter_bytes &&
         a.all_reduce_bytes == b.all_reduce_bytes;
}

std::string count_text(std::int64_t n) {
  char buf[32];
  if (n >= 1000000000) std::snprintf(buf, sizeof buf, "%.2fB", n / 1e9);
  else if (n >= 1000000) std::snprintf(buf, sizeof buf, "%.1fM", n / 1e6);
  else std::snprintf(buf, sizeof buf, "%lld", static_cast<long long>(n));
  return buf;
}

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", seconds * 1e3);
  return buf;
}

// MiB with one decimal: one unit for every column, so that rows compare at a glance.
std::string mib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", bytes / (1024.0 * 1024.0));
  return buf;
}

std::string collective_text(double bytes, int count) {
  if (count == 0) return "-";
  return std::to_string(count) + " x " + mib(bytes / count);
}

void accumulate(UnitRow& total, const UnitRow& u) {
  total.parameters += u.parameters;
  total.sharded_param_bytes += u.sharded_param_bytes;
  total.optimizer_state_bytes += u.optimizer_state_bytes;
  total.unsharded_param_bytes += u.unsharded_param_bytes;
  total.grad_bytes += u.grad_bytes;
  total.saved_activation_bytes += u.saved_activation_bytes;
  total.all_gather_bytes += u.all_gather_bytes;
  total.reduce_scatter_bytes += u.reduce_scatter_bytes;
  total.all_reduce_bytes += u.all_reduce_bytes;
  total.all_gathers += u.all_gathers;
  total.reduce_scatters += u.reduce_scatters;
  total.all_reduces += u.all_reduces;
  total.compute_seconds += u.compute_seconds;
  total.comm_seconds += u.comm_seconds;
  total.exposed_comm_seconds += u.exposed_comm_seconds;
}

}  // namespace

std::string unit_report_text(const UnitReport& r, bool merge_equal) {
  std::vector<std::vector<std::string>> rows = {{"unit", "params", "sharded", "optim", "unsharded", "grads",
                                                  "saved act", "all-gathers", "reduce-scatters", "all-reduces",
                                                  "compute ms", "comm ms", "exposed ms"}};
  auto add = [&rows](const UnitRow& row, const std::string& name, int times) {
    const std::string each = times > 1 ? " (x" + std::to_string(times) + ")" : "";
    rows.push_back({name + each, count_text(row.parameters), mib(static_cast<double>(row.sharded_param_bytes)),
                    mib(static_cast<double>(row.optimizer_state_bytes)),
                    mib(static_cast<double>(row.unsharded_param_bytes)), mib(static_cast<double>(row.grad_bytes)),
                    mib(static_cast<double>(row.saved_activation_bytes)),
                    collective_text(row.all_gather_bytes, row.all_gathers),
                    collective_text(row.reduce_scatter_bytes, row.reduce_scatters),
                    collective_text(row.all_reduce_bytes, row.all_reduces), ms(row.compute_seconds), ms(row.comm_seconds),
                    ms(row.exposed_comm_seconds)});
  };
  UnitRow total;
  for (std::size_t i = 0; i < r.units.size();) {
    std::size_t j = i + 1;
    while (merge_equal && j < r.units.size() && same_figures(r.units[i], r.units[j])) ++j;
    const int n = static_cast<int>(j - i);
    // Merged rows show one unit's figures (times differ a little from unit to unit: the first's).
    add(r.units[i], n > 1 ? r.units[i].name + " .. " + r.units[j - 1].name : r.units[i].name, n);
    i = j;
  }
  add(r.outside, r.outside.name, 1);
  for (const UnitRow& u : r.units) accumulate(total, u);
  accumulate(total, r.outside);
  rows.push_back({"total", count_text(total.parameters), mib(static_cast<double>(total.sharded_param_bytes)),
                  mib(static_cast<double>(total.optimizer_state_bytes)), mib(static_cast<double>(total.unsharded_param_bytes)),
                  mib(static_cast<double>(total.grad_bytes)), mib(static_cast<double>(total.saved_activation_bytes)),
                  mib(total.all_gather_bytes), mib(total.reduce_scatter_bytes), mib(total.all_reduce_bytes),
                  ms(total.compute_seconds), ms(total.comm_seconds), ms(total.exposed_comm_seconds)});
  std::ostringstream out;
  out << "Per FSDP unit (rank 0; MiB per rank; collectives per step as count x MiB, NCCL's buffer size; time per step)\n"
      << padded_table(rows, {true})
      << "sharded: persistent parameters; optim: optimizer state; unsharded: one gathered copy; grads: after "
         "reduction; saved act: one micro-step's forward; (xN): N consecutive units of the same figures, the first's "
         "times shown; total: every unit\n";
  return out.str();
}

nlohmann::json unit_report_json(const UnitReport& r) {
  nlohmann::json list = nlohmann::json::array();
  // Field by field: nlohmann's initializer lists copy every value they hold once more, which was
  // 3% of a 405B `estimate --json` (docs/benchmarks.md, session 29).
  auto counted = [](int count, double bytes) {
    nlohmann::json j = nlohmann::json::object();
    j["count"] = count;
    j["bytes"] = bytes;
    return j;
  };
  auto row_json = [&](const UnitRow& u) {
    nlohmann::json j = nlohmann::json::object();
    j["unit"] = u.unit;
    j["name"] = u.name;
    j["parent"] = u.parent;
    j["parameters"] = u.parameters;
    j["sharded_param_bytes"] = u.sharded_param_bytes;
    j["optimizer_state_bytes"] = u.optimizer_state_bytes;
    j["replicated_grad_bytes"] = u.replicated_grad_bytes;
    j["unsharded_param_bytes"] = u.unsharded_param_bytes;
    j["grad_bytes"] = u.grad_bytes;
    j["saved_activation_bytes"] = u.saved_activation_bytes;
    j["all_gather"] = counted(u.all_gathers, u.all_gather_bytes);
    j["reduce_scatter"] = counted(u.reduce_scatters, u.reduce_scatter_bytes);
    j["all_reduce"] = counted(u.all_reduces, u.all_reduce_bytes);
    j["compute_seconds"] = u.compute_seconds;
    j["comm_seconds"] = u.comm_seconds;
    j["exposed_comm_seconds"] = u.exposed_comm_seconds;
    return j;
  };
  for (const UnitRow& u : r.units) list.push_back(row_json(u));
  list.push_back(row_json(r.outside));
  return list;
}

}  // namespace fsdpsim::sim
