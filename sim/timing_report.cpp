#include "sim/timing_report.h"

#include <algorithm>
#include <cstdio>
#include <numeric>
#include <sstream>

namespace fsdpsim::sim {

namespace {

std::string unit_name(const Estimate& e, int u) {
  if (u >= 0 && u < static_cast<int>(e.plan.units.size())) {
    const planner::Unit& unit = e.plan.units[u];
    return unit.is_root ? std::string("root") : unit.name;
  }
  return "unit " + std::to_string(u);
}

std::string ms(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%10.3f ms", seconds * 1e3);
  return buf;
}

std::string pct(double part, double whole) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%5.1f%%", whole > 0 ? 100.0 * part / whole : 0.0);
  return buf;
}

constexpr const char* kFlopConvention =
    "MFU = model FLOPs / (step x peak_flops: the dense bf16 peak, the dense fp8 peak when matmuls run in fp8); model FLOPs = 3 x forward FLOPs (6N + attention, "
    "causal attention counted at the half a causal kernel computes); HFU counts the FLOPs executed (recompute included, "
    "eager attention's whole score square)";

}  // namespace

nlohmann::json timing_json(const StepTiming& t) {
  const CriticalPathSummary& c = t.critical_path_summary;
  return {{"time",
           {{"step_seconds", t.step_seconds},
            {"compute_seconds", t.compute_seconds},
            {"exposed_comm_seconds", t.exposed_comm_seconds},
            {"optimizer_seconds", t.optimizer_seconds},
            {"exposed_other_seconds", t.exposed_other_seconds},
            {"comm_seconds", t.comm_seconds},
            {"interference_seconds", t.interference_seconds},
            {"cpu_issue_seconds", t.cpu_issue_seconds},
            {"exposed_comm_by_unit_seconds", t.exposed_comm_by_unit},
            // The rest of exposed_comm_seconds: communication of no unit (the optimizer's, DeepSpeed's
            // offload copies), so that the list and this add up to it.
            {"exposed_comm_outside_units_seconds", t.exposed_comm_outside_units},
            {"exposed_comm_by_phase",
             {{"forward", t.exposed_comm_by_phase[0]},
              {"backward", t.exposed_comm_by_phase[1]},
              {"optimizer", t.exposed_comm_by_phase[2]}}},
            {"critical_path",
             {{"compute_seconds", c.compute_seconds},
              {"communication_seconds", c.communication_seconds},
              {"other_gpu_seconds", c.other_gpu_seconds},
              {"cpu_issue_seconds", c.cpu_issue_seconds},
              {"host_seconds", c.host_seconds},
              {"segments", t.critical_path.size()}}}}},
          {"throughput",
           {{"tokens_per_second_per_gpu", t.tokens_per_second_per_gpu},
            {"mfu", t.mfu},
            {"hfu", t.hfu},
            {"model_flops_per_step", t.model_flops},
            {"hardware_flops_per_step", t.hardware_flops},
            {"peak_flops", t.mfu_peak_flops},
            {"flop_convention", kFlopConvention}}}};
}

std::string timing_text(const Estimate& e, int top_units) {
  const StepTiming& t = e.timing;
  std::ostringstream o;
  o << "Step time (analytic engine; calibration: " << e.calibration.name << ")\n";
  o << "  step                      " << ms(t.step_seconds) << "\n";
  o << "  compute                   " << ms(t.compute_seconds) << "  " << pct(t.compute_seconds, t.step_seconds)
    << "  (of which interference " << ms(t.interference_seconds) << ")\n";
  o << "  exposed communication     " << ms(t.exposed_comm_seconds) << "  " << pct(t.exposed_comm_seconds, t.step_seconds)
    << "  (forward " << ms(t.exposed_comm_by_phase[0]) << ", backward " << ms(t.exposed_comm_by_phase[1]) << ")\n";
  o << "  optimizer                 " << ms(t.optimizer_seconds) << "  " << pct(t.optimizer_seconds, t.step_seconds) << "\n";
  o << "  other (CPU-bound, copies) " << ms(t.exposed_other_seconds) << "  "
    << pct(t.exposed_other_seconds, t.step_seconds) << "\n";
  o << "  communication, all ops    " << ms(t.comm_seconds) << "   CPU issue, all ops " << ms(t.cpu_issue_seconds)
    << "\n";
  char buf[256];
  std::snprintf(buf, sizeof buf, "  tokens/s per GPU %.1f   MFU %.1f%%   HFU %.1f%%\n", t.tokens_per_second_per_gpu,
                100 * t.mfu, 100 * t.hfu);
  o << buf;
  const CriticalPathSummary& c = t.critical_path_summary;
  o << "Critical path (" << t.critical_path.size() << " segments): compute " << pct(c.compute_seconds, t.step_seconds)
    << ", communication " << pct(c.communication_seconds, t.step_seconds) << ", other GPU "
    << pct(c.other_gpu_seconds, t.step_seconds) << ", CPU issue " << pct(c.cpu_issue_seconds, t.step_seconds)
    << ", host " << pct(c.host_seconds, t.step_seconds) << "\n";
  std::vector<int> units(t.exposed_comm_by_unit.size());
  std::iota(units.begin(), units.end(), 0);
  std::stable_sort(units.begin(), units.end(),
                   [&](int a, int b) { return t.exposed_comm_by_unit[a] > t.exposed_comm_by_unit[b]; });
  bool header = false;
  for (int k = 0; k < std::min<int>(top_units, static_cast<int>(units.size())); ++k) {
    const double v = t.exposed_comm_by_unit[units[k]];
    if (v <= 0) break;
    if (!header) o << "Most exposed communication by unit:\n";
    header = true;
    o << "  " << ms(v) << "  " << unit_name(e, units[k]) << "\n";
  }
  return o.str();
}

std::string op_timing_table(const Estimate& e) {
  const planner::Schedule& s = e.plan.schedule;
  std::ostringstream o;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%6s  %-14s  %12s  %12s  %12s  %10s  %10s  %-14s  %s\n", "op", "stream", "issue ms",
                "start ms", "end ms", "nominal", "actual", "started by", "name");
  o << buf;
  for (const planner::Op& op : s.ops) {
    const OpTiming& ot = e.timing.ops[op.id];
    std::snprintf(buf, sizeof buf, "%6d  %-14s  %12.3f  %12.3f  %12.3f  %10.3f  %10.3f  %-14s  %s\n", op.id,
                  planner::to_string(op.stream).c_str(), ot.issue_start * 1e3, ot.start * 1e3, ot.end * 1e3,
                  ot.nominal_seconds * 1e3, (ot.end - ot.start) * 1e3, to_string(ot.started_by), op.name.c_str());
    o << buf;
  }
  return o.str();
}

}  // namespace fsdpsim::sim
