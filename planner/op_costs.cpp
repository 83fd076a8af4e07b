#include "planner/op_costs.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <unordered_map>

namespace fsdpsim::planner {

const CollectiveEstimate& memoized_collective(const Op& op, const Schedule& schedule, const CostModel& cost,
                                              CollectiveMemo& memo) {
  const ProcessGroup& g = schedule.groups.at(op.group);
  const auto key = std::make_tuple(static_cast<int>(op.kind), op.comm_bytes, g.ranks, g.nodes);
  auto it = memo.find(key);
  if (it == memo.end()) it = memo.emplace(key, cost.collective(op, schedule)).first;
  return it->second;
}

namespace {

// [Op signature] Everything CostModel reads of an op to price it, but its name, id and (for
// collectives, priced through the collective memo) its group: the kind, stream, kernel set,
// FLOPs, bytes, and the module's class (CostModel::module_class; only module compute reads the
// module). A model's identical blocks repeat the same few signatures, so a schedule's ops are
// priced once per signature: a sweep prices every point's schedule, and pricing op by op was a
// tenth of it (each op's module name hashed a dozen times). The memo returns the very doubles
// the calls return, so the costs are those of pricing each op.
struct OpSignature {
  int module_class = -2;  // -2: not module compute (the module is not read)
  OpKind kind = OpKind::compute_fwd;
  Stream stream = Stream::compute;
  int kernel_set = -1;
  double flops = 0, attention_flops = 0, hbm_bytes = 0, score_hbm_bytes = 0, comm_bytes = 0;
  // The fields both the comparison and the hash read (one list, so neither can miss one).
  auto fields() const {
    return std::make_tuple(module_class, kind, stream, kernel_set, flops, attention_flops, hbm_bytes, score_hbm_bytes, comm_bytes);
  }
  bool operator==(const OpSignature& o) const { return fields() == o.fields(); }
};

// A field's bits: libstdc++'s std::hash<double> hashes the bytes out of line (a call per
// field per op); equal doubles must give equal bits, so -0.0 counts as 0.0 as == does.
std::uint64_t bits_of(double d) {
  std::uint64_t b = 0;
  if (d != 0) std::memcpy(&b, &d, sizeof b);
  return b;
}
template <typename T>
std::uint64_t bits_of(T v) {
  return static_cast<std::uint64_t>(v);
}

struct OpSignatureHash {
  std::size_t operator()(const OpSignature& s) const {
    return std::apply(
        [](const auto&... field) {
          std::uint64_t h = 0xcbf29ce484222325ull;
          ((h = (h ^ bits_of(field)) * 0x9E3779B97F4A7C15ull, h ^= h >> 29), ...);
          return static_cast<std::size_t>(h);
        },
        s.fields());
  }
};

// An op's costs that depend on its signature alone (a collective's duration does not: its group).
struct SignatureCosts {
  double duration = 0;  // unused for collectives
  double gemm = 0;      // the GEMM part of duration ([GEMMs beside NCCL])
  double issue = 0, issue_lead = 0, kernels = 0;
};

}  // namespace

int link_domain(const ProcessGroup& group, const ClusterSpec& cluster) {
  return group.nodes > 1 && cluster.intra_kind != IntraNodeKind::pcie ? kNetwork : kNodeFabric;
}

double link_load(const ProcessGroup& group, const ClusterSpec& cluster, const CollectiveEstimate& e) {
  if (group.nodes <= 1 || cluster.intra_kind != IntraNodeKind::pcie || !(cluster.intra_bandwidth_gbps > 0)) return 1.0;
  const double busbw_of_transfer = e.transfer_bus_bandwidth_gbps();
  if (!(busbw_of_transfer > 0)) return 1.0;
  return std::clamp(busbw_of_transfer / cluster.intra_bandwidth_gbps, 1e-9, 1.0);
}

OpCosts price_ops(const Schedule& schedule, const CostModel& cost, CollectiveMemo* memo) {
  const std::size_t n = schedule.ops.size();
  OpCosts c;
  c.source = "cost model (calibration: " + cost.calibration().name + ")";
  c.launch_queue_kernels = cost.calibration().launch_queue_kernels;
  c.mfu_peak_flops = cost.mfu_peak_flops();
  c.duration_seconds.resize(n);
  c.issue_seconds.resize(n);
  c.issue_lead_seconds.resize(n);
  c.latency_seconds.assign(n, 0.0);
  c.link_domain.assign(n, kNodeFabric);
  c.link_load.assign(n, 1.0);
  c.kernels.assign(n, 0.0);
  CollectiveMemo local;
  CollectiveMemo& collectives = memo ? *memo : local;
  std::vector<KernelSetTimes> kernel_times(schedule.kernel_sets.size());  // each set priced once
  CostModel::IssueLeadMemo leads;                                          // each block's lead walked once
  std::unordered_map<OpSignature, SignatureCosts, OpSignatureHash> priced;  // [Op signature]
  double module_compute_seconds = 0, module_gemm_seconds = 0;  // [GEMMs beside NCCL]
  const std::string* last_module = nullptr;  // consecutive ops of one module: its class looked up once
  int last_class = -1;
  for (const Op& op : schedule.ops) {
    const bool collective = is_collective(op.kind) && op.group >= 0 && op.group < static_cast<int>(schedule.groups.size());
    OpSignature key{-2, op.kind, op.stream, op.kernel_set, op.flops, op.attention_flops, op.hbm_bytes, op.score_hbm_bytes,
                    op.comm_bytes};
    if (is_module_compute(op.kind)) {
      if (!last_module || *last_module != op.module) {
        last_module = &op.module;
        last_class = cost.module_class(op.module);
      }
      key.module_class = last_class;
    }
    auto [entry, added] = priced.try_emplace(key);
    SignatureCosts& p = entry->second;
    if (added) {
      if (!collective) {
        p.duration = cost.duration_seconds(op, schedule, &kernel_times);
        p.gemm = cost.gemm_seconds_of(op, schedule, &kernel_times);
      }
      p.issue = cost.issue_seconds(op);
      p.issue_lead = cost.issue_lead_seconds(op, schedule, &kernel_times, &leads);
      p.kernels = cost.kernels(op);
    }
    if (collective) {
      const CollectiveEstimate& e = memoized_collective(op, schedule, cost, collectives);
      c.duration_seconds[op.id] = e.seconds;
      c.latency_seconds[op.id] = e.latency_seconds;
      c.link_domain[op.id] = link_domain(schedule.groups[op.group], cost.cluster());
      c.link_load[op.id] = link_load(schedule.groups[op.group], cost.cluster(), e);
    } else {
      // A collective without a group of the schedule: duration_seconds says so (it throws).
      c.duration_seconds[op.id] = is_collective(op.kind) ? cost.duration_seconds(op, schedule, &kernel_times) : p.duration;
    }
    c.issue_seconds[op.id] = p.issue;
    c.issue_lead_seconds[op.id] = p.issue_lead;
    c.kernels[op.id] = p.kernels;
    if (is_module_compute(op.kind)) {
      module_compute_seconds += p.duration;
      module_gemm_seconds += p.gemm;
    }
  }
  // [GEMMs beside NCCL] The engines slow every compute op alike while a collective runs; the
  // GEMMs' share of the module compute (forward, backward, recompute: what FSDP's collectives run
  // beside) weighs the GEMMs' slowdown against the other kernels'.
  c.compute_slowdown_under_comm = cost.effective_compute_slowdown_under_comm(
      module_compute_seconds > 0 ? module_gemm_seconds / module_compute_seconds : 0.0);
  return c;
}

OpCosts costs_from_durations(const Schedule& schedule, std::vector<double> duration_seconds, std::string source) {
  OpCosts c;
  c.source = std::move(source);
  c.duration_seconds = std::move(duration_seconds);
  c.issue_seconds.assign(schedule.ops.size(), 0.0);
  // A given duration is the op's time as it ran (or as it is meant to run), with whatever
  // sharing of links happened beside it already in it: sharing again would slow concurrent
  // collectives twice (HSDP's intra-node reduce-scatter beside its inter-node all-reduce), and
  // the runtime, which plays these costs, plays each collective for its duration.
  c.share_bandwidth = false;
  check_costs(schedule, c);
  return c;
}

void check_costs(const Schedule& s, const OpCosts& c) {
  const std::size_t n = s.ops.size();
  auto sized = [n](const std::vector<double>& v, bool optional) { return v.size() == n || (optional && v.empty()); };
  if (!sized(c.duration_seconds, false) || !sized(c.issue_seconds, false) || !sized(c.latency_seconds, true) ||
      !sized(c.kernels, true) || !sized(c.issue_lead_seconds, true) ||
      !(c.link_domain.empty() || c.link_domain.size() == n) || !sized(c.link_load, true))
    throw std::invalid_argument(
        "the op costs give " + std::to_string(c.duration_seconds.size()) + " durations, " +
        std::to_string(c.issue_seconds.size()) + " issue costs, " + std::to_string(c.latency_seconds.size()) +
        " latencies, " + std::to_string(c.kernels.size()) + " kernel counts, " +
        std::to_string(c.issue_lead_seconds.size()) + " issue leads, " + std::to_string(c.link_domain.size()) +
        " link domains and " + std::to_string(c.link_load.size()) + " link loads for a schedule of " + std::to_string(n) +
        " ops (expected one per op; latencies, kernel counts, issue leads, link domains and loads may be empty)");
  auto finite_nonnegative = [](double x) { return x >= 0 && std::isfinite(x); };
  for (std::size_t i = 0; i < n; ++i) {
    const bool ok = finite_nonnegative(c.duration_seconds[i]) && finite_nonnegative(c.issue_seconds[i]) &&
                    (c.latency_seconds.empty() || finite_nonnegative(c.latency_seconds[i])) &&
                    (c.kernels.empty() || finite_nonnegative(c.kernels[i]));
    if (!ok)
      throw std::invalid_argument("op " + std::to_string(i) + " (" + s.ops[i].name +
                                  ") has a negative or non-finite duration or issue cost: " +
                                  std::to_string(c.duration_seconds[i]) + " s");
    if (!c.link_domain.empty() && c.link_domain[i] != kNodeFabric && c.link_domain[i] != kNetwork)
      throw std::invalid_argument("op " + std::to_string(i) + " (" + s.ops[i].name + ") has link domain " +
                                  std::to_string(c.link_domain[i]) + " (expected " + std::to_string(kNodeFabric) +
                                  ", the node's links, or " + std::to_string(kNetwork) + ", the network)");
    if (!c.link_load.empty() && !(c.link_load[i] > 0 && c.link_load[i] <= 1))
      throw std::invalid_argument("op " + std::to_string(i) + " (" + s.ops[i].name + ") has a link load of " +
                                  std::to_string(c.link_load[i]) + " (expected a share of its link in (0, 1])");
    if (!c.issue_lead_seconds.empty() &&
        !(finite_nonnegative(c.issue_lead_seconds[i]) && c.issue_lead_seconds[i] <= c.issue_seconds[i]))
      throw std::invalid_argument("op " + std::to_string(i) + " (" + s.ops[i].name + ") has an issue lead of " +
                                  std::to_string(c.issue_lead_seconds[i]) + " s; expected one between 0 and its issue (" +
                                  std::to_string(c.issue_seconds[i]) + " s)");
  }
  if (!finite_nonnegative(c.compute_slowdown_under_comm) || !finite_nonnegative(c.launch_queue_kernels) ||
      !finite_nonnegative(c.mfu_peak_flops))
    throw std::invalid_argument("the op costs' slowdown, launch queue and peak must be finite and non-negative");
}

}  // namespace fsdpsim::planner
