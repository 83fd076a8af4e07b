// From measurements to a planner::Calibration: the fits, their mapping onto the fields the cost
// model reads (NCCL's latency tables and graph inputs, efficiencies, issue cost, interference),
// and the goodness of fit of the calibration as written.
#include <algorithm>
#include <array>
#include <limits>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "calibrate/calibrate.h"
#include "planner/gemm_model.h"
#include "planner/plan.h"

namespace fsdpsim::calibrate {

using planner::CollectiveGroup;
using planner::CollectiveKind;
using planner::NcclAlgorithm;
using planner::NcclProtocol;

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

bool same_span(const CollectiveGroup& a, const CollectiveGroup& b) { return a.ranks == b.ranks && a.nodes == b.nodes; }

// Intra-node ring steps and inter-node ring steps of a collective (NCCL tuning.cc: nsteps and
// interSteps).
std::pair<double, double> ring_steps(CollectiveKind kind, const CollectiveGroup& g) {
  const double mult = kind == CollectiveKind::all_reduce ? 2 : 1;
  const double inter = mult * (g.nodes - 1);
  const double total = mult * (g.ranks - 1);
  return {total - inter, inter};
}

// The line of protocol `p` for one collective fit: segments are ordered small to large
// sizes, the last is Simple; with three, LL / LL128 / Simple; with two, LL / Simple; with one,
// every protocol is that line.
const LineFit& protocol_line(const PiecewiseFit& f, int p, int protocols) {
  const int segs = static_cast<int>(f.segments.size());
  if (segs == 1) return f.segments[0];
  int seg;
  if (protocols == 3) {
    seg = segs == 3 ? p : (p == 2 ? segs - 1 : 0);
  } else {  // protocols == 2: LL and Simple in use (LL128 copies Simple)
    seg = p == 0 ? 0 : segs - 1;
  }
  return f.segments[std::min(seg, segs - 1)];
}

// Non-negative least squares of y = A x on relative residuals, x of at most 3 entries; columns
// not `used` keep `fixed`'s value. Exact by enumeration: every subset of the used columns is
// solved unconstrained (the normal equations, Gaussian elimination) with the others at 0, and
// the best feasible solution kept (an NNLS solution is the unconstrained one on its support).
std::array<double, 3> nonnegative_least_squares(const std::vector<std::array<double, 3>>& a,
                                                const std::vector<double>& y, const bool used[3],
                                                const double fixed[3]) {
  std::array<double, 3> best = {fixed[0], fixed[1], fixed[2]};
  double best_rss = std::numeric_limits<double>::infinity();
  for (int mask = 1; mask < 8; ++mask) {
    std::vector<int> cols;
    bool ok = true;
    for (int j = 0; j < 3; ++j)
      if (mask & (1 << j)) {
        if (!used[j]) ok = false;
        cols.push_back(j);
      }
    if (!ok) continue;
    const std::size_t k = cols.size();
    double m[3][4] = {};
    for (std::size_t i = 0; i < a.size(); ++i) {
      double rhs = y[i];
      for (int j = 0; j < 3; ++j)
        if (!used[j]) rhs -= a[i][j] * fixed[j];
      const double w = 1 / std::max(y[i] * y[i], 1e-6);
      for (std::size_t r = 0; r < k; ++r) {
        for (std::size_t c = 0; c < k; ++c) m[r][c] += w * a[i][cols[r]] * a[i][cols[c]];
        m[r][3] += w * a[i][cols[r]] * rhs;
      }
    }
    bool singular = false;
    for (std::size_t c = 0; c < k && !singular; ++c) {
      std::size_t piv = c;
      for (std::size_t r = c + 1; r < k; ++r)
        if (std::abs(m[r][c]) > std::abs(m[piv][c])) piv = r;
      if (std::abs(m[piv][c]) < 1e-12) {
        singular = true;
        break;
      }
      for (int j = 0; j < 4; ++j) std::swap(m[c][j], m[piv][j]);
      for (std::size_t r = 0; r < k; ++r) {
        if (r == c) continue;
        const double f = m[r][c] / m[c][c];
        for (int j = 0; j < 4; ++j) m[r][j] -= f * m[c][j];
      }
    }
    if (singular) continue;
    std::array<double, 3> x = {0, 0, 0};
    for (int j = 0; j < 3; ++j)
      if (!used[j]) x[j] = fixed[j];
    for (std::size_t r = 0; r < k; ++r) x[cols[r]] = m[r][3] / m[r][r];
    if (std::any_of(cols.begin(), cols.end(), [&](int j) { return x[j] < -1e-12; })) continue;
    double rss = 0;
    for (std::size_t i = 0; i < a.size(); ++i) {
      const double e = (a[i][0] * x[0] + a[i][1] * x[1] + a[i][2] * x[2] - y[i]) / std::max(y[i], 1e-3);
      rss += e * e;
    }
    if (rss < best_rss - 1e-15) {
      best_rss = rss;
      best = x;
      for (int j = 0; j < 3; ++j) best[j] = std::max(best[j], 0.0);
    }
  }
  return best;
}

// ---- collectives: from fitted lines to NCCL's ring model ----------------------------------------

// One span's fitted lines, as NCCL's model reads them: a bus bandwidth per protocol (LL,
// LL128, Simple).
struct SpanModel {
  CollectiveGroup span;
  double bus_gbps[3] = {0, 0, 0};  // per protocol
  std::vector<std::pair<CollectiveKind, const PiecewiseFit*>> fits;
};

// The spans whose fits set NCCL's graph inputs; null where no span of that kind was measured.
struct GraphSpans {
  const SpanModel* intra = nullptr;
  const SpanModel* inter = nullptr;
};

// Channels of the ring graphs the intra- and inter-node bandwidths were written as (0: not set).
struct RingChannels {
  int intra = 0;
  int inter = 0;
};

// The spans the collectives were measured over, in first-seen order.
std::vector<CollectiveGroup> measured_spans(const Measurements& m) {
  std::vector<CollectiveGroup> spans;
  for (const CollectiveMeasurement& x : m.collectives)
    if (std::none_of(spans.begin(), spans.end(), [&](const CollectiveGroup& g) { return same_span(g, x.span); }))
      spans.push_back(x.span);
  return spans;
}

// Per (span, collective) with at least two timed sizes: a piecewise latency + bandwidth fit on
// x = bytes x bus factor.
std::vector<CollectiveFit> fit_collective_lines(const Measurements& m, const std::vector<CollectiveGroup>& spans) {
  std::vector<CollectiveFit> fits;
  for (const CollectiveGroup& span : spans) {
    for (CollectiveKind kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter, CollectiveKind::all_reduce}) {
      std::vector<double> xs, ts;
      for (const CollectiveMeasurement& x : m.collectives)
        if (x.kind == kind && same_span(x.span, span) && x.time.median_seconds > 0) {
          xs.push_back(x.bytes * planner::bus_factor(kind, span.ranks));
          ts.push_back(x.time.median_seconds);
        }
      if (xs.size() < 2) continue;
      fits.push_back({kind, span, fit_piecewise(xs, ts)});
    }
  }
  return fits;
}

// The protocols the data shows (1 to 3): the most segments any one fit found.
int protocols_found(const std::vector<CollectiveFit>& fits) {
  int protocols = 1;
  for (const CollectiveFit& f : fits) protocols = std::max(protocols, static_cast<int>(f.fit.segments.size()));
  return std::min(protocols, 3);
}

// Per span: bus bandwidth per protocol from the FSDP collectives (all-gather, reduce-scatter);
// all-reduce only where neither was measured.
std::vector<SpanModel> span_models(const std::vector<CollectiveGroup>& spans, const std::vector<CollectiveFit>& fits,
                                   int protocols) {
  std::vector<SpanModel> models;
  for (const CollectiveGroup& span : spans) {
    SpanModel sm;
    sm.span = span;
    for (const CollectiveFit& f : fits)
      if (same_span(f.span, span)) sm.fits.push_back({f.kind, &f.fit});
    if (sm.fits.empty()) continue;
    const bool have_ag_rs = std::any_of(sm.fits.begin(), sm.fits.end(),
                                        [](auto& kf) { return kf.first != CollectiveKind::all_reduce; });
    for (int pr = 0; pr < 3; ++pr) {
      double sum = 0;
      int count = 0;
      for (auto& [kind, fit] : sm.fits) {
        if (have_ag_rs && kind == CollectiveKind::all_reduce) continue;
        const LineFit& line = protocol_line(*fit, pr, protocols);
        if (line.seconds_per_byte > 0) {
          sum += line.bandwidth_bytes_per_second() / 1e9;
          ++count;
        }
      }
      sm.bus_gbps[pr] = count ? sum / count : 0;
    }
    models.push_back(sm);
  }
  return models;
}

// NCCL's model takes one intra-node and one inter-node bandwidth: of each kind, the span that
// carries the most collective bytes in the scenario's schedule (then the larger). A note names
// every other span (its fits stay in the output).
GraphSpans choose_graph_spans(const planner::Scenario& scenario, const std::vector<SpanModel>& models,
                              std::vector<std::string>& notes) {
  std::map<std::pair<int, int>, double> carried;
  const planner::Schedule schedule = planner::plan_step(scenario).schedule;
  for (const planner::Op& op : schedule.ops)
    if (planner::is_collective(op.kind) && op.group >= 0 && op.group < static_cast<int>(schedule.groups.size()))
      carried[{schedule.groups[op.group].ranks, schedule.groups[op.group].nodes}] += op.comm_bytes;
  auto better = [&](const SpanModel& a, const SpanModel* b) {
    if (!b) return true;
    const double ca = carried[{a.span.ranks, a.span.nodes}], cb = carried[{b->span.ranks, b->span.nodes}];
    return ca != cb ? ca > cb : a.span.ranks > b->span.ranks;
  };
  GraphSpans chosen;
  for (const SpanModel& sm : models) {
    if (sm.span.nodes == 1 && better(sm, chosen.intra)) chosen.intra = &sm;
    if (sm.span.nodes > 1 && better(sm, chosen.inter)) chosen.inter = &sm;
  }
  for (const SpanModel& sm : models)
    if (&sm != chosen.intra && &sm != chosen.inter)
      notes.push_back("span " + span_text(sm.span) +
                      ": measured and fitted (fit.collectives), but NCCL's model takes one intra-node and one "
                      "inter-node bandwidth: the calibration takes them from " +
                      (sm.span.nodes == 1 ? span_text(chosen.intra->span) : span_text(chosen.inter->span)) +
                      ", which carries more of the scenario's collective bytes");
  return chosen;
}

// The model is made to reproduce the fitted lines: the ring algorithm only (what was measured is
// whatever NCCL ran, described as one ring-shaped line per protocol), the protocols the fit
// found, unit bandwidth factors with the per-scale caps carrying LL and LL128, no plateau or
// network overhead terms (the fitted latencies hold them).
void describe_as_ring_only(planner::NcclParams& p, const planner::ClusterSpec& cluster, int protocols) {
  p.enable_ring = true;
  p.enable_tree = false;
  p.enable_nvls = false;
  p.enable_simple = true;
  p.enable_ll = protocols >= 2;
  p.enable_ll128 = protocols >= 3;
  p.ll_bandwidth_factor = 1;
  p.ll128_bandwidth_factor = 1;
  p.ring_plateau_factor = 1;
  p.net_overhead_us = 0;
  p.net_latency_inter_us = 0;
  p.max_ring_channels = 32;
  p.bandwidth_efficiency = 1;
  // RCCL rates xGMI as NVLink-class links (its LINK_NVL), so the NVLink hop table holds them.
  const bool nvlink = cluster.intra_kind != planner::IntraNodeKind::pcie;
  p.intra_link = cluster.intra_kind == planner::IntraNodeKind::xgmi ? "xgmi" : nvlink ? "nvlink" : "pcie";
}

// The intra-node hop latencies NCCL's model reads for the cluster's links (xGMI as NVLink).
planner::NcclTable& intra_hop_latencies(planner::NcclParams& p, const planner::ClusterSpec& cluster) {
  return cluster.intra_kind != planner::IntraNodeKind::pcie ? p.nvlink_latency_us : p.pcie_latency_us;
}

// A ring graph of k channels at s = B / k GB/s gives busbw = k x s = B exactly when the speed
// array holds s alone and s < 25 (search.cc ncclTopoDupChannels leaves it alone). Returns k.
int set_intra_node_bandwidth(planner::NcclParams& p, const SpanModel& intra) {
  const double simple = intra.bus_gbps[2];
  const int channels = std::clamp(static_cast<int>(std::ceil(simple / 24.0)), 1, 32);
  p.intra_bandwidth_gbps = simple;
  p.speed_array_intra_gbps = {simple / channels};
  return channels;
}

// Across nodes NCCL's ring takes k = min(NVLink / s (2+ GPUs per node), NICs x NIC / s, GPUs per
// node x PCIe / s) channels. k is made a multiple of the span's ranks per node and the GPU ->
// NIC (PCIe) path set to busbw / ranks per node, so that path gives exactly k channels; the NICs
// are set so that they do not bind below k, neither alone nor where the cost model shares a
// node's NICs between the group's instances (CostModel::collective: gpus_per_node / ranks per
// node instances, e.g. HSDP's replicate groups). Measured under mpi (`side_by_side`), those
// instances ran side by side, so the measured busbw already is each one's share: the NICs are
// sized so the cost model's division gives it back. Measured alone (one process), the NICs keep
// the cluster's figures (at least the measured busbw), so sharing divides the cluster's NIC
// capacity. Returns k.
int set_inter_node_bandwidth(planner::NcclParams& p, const SpanModel& inter, const planner::ClusterSpec& cluster,
                             bool side_by_side, std::vector<std::string>& notes) {
  double b = inter.bus_gbps[2];
  const int ppn = std::max(1, inter.span.ranks / inter.span.nodes);
  const double intra_bw = p.intra_bandwidth_gbps > 0 ? p.intra_bandwidth_gbps : 0;
  if (ppn >= 2 && intra_bw > 0 && b > intra_bw) {
    notes.push_back("inter-node bus bandwidth (" + fmt("%.4g", b) + " GB/s) above the intra-node one (" +
                    fmt("%.4g", intra_bw) + "): NCCL's ring cannot be faster than its NVLink part; capped");
    b = intra_bw;
  }
  // Per-channel speed at most 24 (no channel duplication) and at most the intra-node
  // bandwidth, so that spans with several GPUs per node keep at least one channel.
  const double top_speed = intra_bw > 0 ? std::min(24.0, intra_bw) : 24.0;
  int k = std::clamp(static_cast<int>(std::ceil(b / top_speed - 1e-9)), 1, 32);
  k = std::max(ppn, (k + ppn - 1) / ppn * ppn);
  if (k > 32) k = std::max(ppn, 32 / ppn * ppn);
  const double s = b / k;
  p.speed_array_inter_gbps = {s};
  p.gpu_pcie_bandwidth_gbps = b / ppn;
  const int nics = std::max(1, cluster.nics_per_node);
  const int instances = std::max(1, cluster.gpus_per_node / ppn);
  double nic = std::ceil(static_cast<double>(k) / nics - 1e-9) * s;  // alone: NICs x floor(nic / s) >= k
  if (side_by_side && instances > 1) {
    if (instances > nics)
      nic = std::max(nic, b * instances / nics);  // shared: nic x nics / instances >= k x s
    else
      nic = std::max(nic, std::ceil(static_cast<double>(k) / (nics / instances) - 1e-9) * s);
  } else {
    nic = std::max(nic, cluster.nic_bandwidth_gbps);
  }
  p.nics_per_node = nics;
  p.nic_bandwidth_gbps = nic * (1 + 1e-9);
  return k;
}

// LL and LL128 per scale (1 node, 2 nodes, >= 4 nodes): caps equal to the fitted bandwidths.
// The intra-node span sets one node, the inter-node span the others; a scale no span measured
// takes the other span's values.
void set_protocol_caps(planner::NcclParams& p, const GraphSpans& spans, const RingChannels& channels) {
  auto set_scale = [&](const SpanModel* sm, int s) {
    const int ch = sm->span.nodes == 1 ? channels.intra : channels.inter;
    const double simple = sm->bus_gbps[2];
    if (ch == 0 || simple <= 0) return;
    p.ll_max_bandwidth_gbps[s] = std::min(sm->bus_gbps[0] > 0 ? sm->bus_gbps[0] : simple, simple);
    p.per_channel_max_ring_ll128_gbps[s] = std::min(sm->bus_gbps[1] > 0 ? sm->bus_gbps[1] : simple, simple) / ch;
  };
  for (int s = 0; s < 3; ++s) {
    const SpanModel* sm = s == 0 ? (spans.intra ? spans.intra : spans.inter) : (spans.inter ? spans.inter : spans.intra);
    if (sm) set_scale(sm, s);
  }
}

// Latencies: NCCL's ring latency is base + intra steps x hop + inter steps x net hop
// (tuning.cc), with the plateau and overhead terms zeroed by describe_as_ring_only. Per
// protocol, the three are fitted jointly to the fitted latency (alpha) of every collective and
// span, by non-negative least squares on relative residuals; a term no span exercises keeps
// its value.
void fit_ring_latencies(planner::NcclParams& p, planner::NcclTable& hop, const std::vector<SpanModel>& models,
                        int protocols) {
  const int ring = static_cast<int>(NcclAlgorithm::ring);
  for (int pr = 0; pr < 3; ++pr) {
    std::vector<std::array<double, 3>> rows;  // (1, intra steps, inter steps)
    std::vector<double> ys;
    for (const SpanModel& sm : models)
      for (auto& [kind, fit] : sm.fits) {
        const auto [si, se] = ring_steps(kind, sm.span);
        rows.push_back({1.0, si, se});
        ys.push_back(protocol_line(*fit, pr, protocols).alpha_seconds * 1e6);
      }
    double current[3] = {p.base_latency_us[ring][pr], hop[ring][pr], p.net_latency_us[ring][pr]};
    bool used[3] = {true, false, false};
    for (const auto& r : rows) {
      used[1] = used[1] || r[1] > 0;
      used[2] = used[2] || r[2] > 0;
    }
    const std::array<double, 3> x = nonnegative_least_squares(rows, ys, used, current);
    p.base_latency_us[ring][pr] = x[0];
    if (used[1]) hop[ring][pr] = x[1];
    if (used[2]) {
      // NCCL takes the Tree table's network hop for a ring with one GPU per node (tuning.cc);
      // Tree itself is disabled (describe_as_ring_only), so both tables carry the fitted hop.
      p.net_latency_us[ring][pr] = x[2];
      p.net_latency_us[static_cast<int>(NcclAlgorithm::tree)][pr] = x[2];
    }
  }
}

// The model's time for one measured collective under the written calibration `c`. Measured
// side by side (every instance of the span at once), it is priced as the cost model prices a
// scenario's op, NIC sharing included; measured alone, through NCCL's model for the span.
double modeled_collective_seconds(const CollectiveMeasurement& x, const planner::Scenario& scenario,
                                  const planner::Calibration& c, bool side_by_side) {
  const planner::ClusterSpec& cluster = scenario.cluster;
  if (!side_by_side) return planner::estimate_collective(x.kind, x.bytes, x.span, cluster, c.nccl).seconds;
  planner::Schedule one;
  one.world_size = cluster.world_size();
  one.groups.push_back({"bench", x.span.ranks, x.span.nodes});
  planner::Op op;
  op.kind = x.kind == CollectiveKind::all_gather       ? planner::OpKind::all_gather
            : x.kind == CollectiveKind::reduce_scatter ? planner::OpKind::reduce_scatter
            : x.kind == CollectiveKind::all_to_all     ? planner::OpKind::all_to_all
                                                       : planner::OpKind::all_reduce;
  op.comm_bytes = x.bytes;
  op.group = 0;
  return planner::CostModel(cluster, c, scenario.training.compute_dtype()).collective(op, one).seconds;
}

// The cost model's GEMM model for one dtype on the scenario's GPU (CostModel::gemm_device).
planner::GemmDevice gemm_device_for(const planner::Scenario& scenario, const planner::Calibration& c,
                                    const std::string& dtype) {
  const std::optional<models::DType> d = models::parse_dtype(dtype);
  return planner::CostModel(scenario.cluster, c, d ? *d : scenario.training.compute_dtype()).gemm_device();
}

planner::GemmShape model_shape(const GemmShape& g) {
  return {static_cast<double>(g.m), static_cast<double>(g.n), static_cast<double>(g.k)};
}

// The GEMM a dtype's ceiling is solved on: the model's normalising 8192^3 when it was measured
// (the model then reproduces it by construction, as the shipped matmul_efficiency is that
// measurement), else the measured GEMM with the most FLOPs (the most compute-bound, the least
// affected by the launch and tile terms).
const GemmMeasurement* ceiling_gemm(const std::vector<const GemmMeasurement*>& gs) {
  const GemmMeasurement* best = nullptr;
  for (const GemmMeasurement* g : gs) {
    const bool normalising = g->shape.m == planner::kGemmNormalisingSide &&
                             g->shape.n == planner::kGemmNormalisingSide && g->shape.k == planner::kGemmNormalisingSide;
    if (normalising) return g;
    if (!best || g->shape.flops() > best->shape.flops()) best = g;
  }
  return best;
}

// ---- the fit, one group of measurements at a time ----------------------------------------------

// Builds one FitResult: each step fits one group of measurements, sets the calibration fields
// they determine and records each field's source (what was measured, how it was fitted), so
// that the written file says where every number came from.
class CalibrationFit {
 public:
  CalibrationFit(const planner::Scenario& scenario, const Measurements& m)
      : scenario_(scenario),
        cluster_(scenario.cluster),
        m_(m),
        c_(planner::default_calibration(scenario.cluster)),
        origin_("fsdpsim calibrate --backend " + m.backend + " (" + m.device + ")"),
        host_note_(m.backend == "host" ? " Measured on the host backend: this CPU and its shared memory, not a GPU."
                                       : "") {
    c_.name = "calibrated: " + origin_;
  }

  void gemm_efficiency();
  void memory_bandwidth();
  void launch_overhead();
  void compute_slowdown();
  void collectives();
  // The result, with measure()'s notes after the fit's own.
  FitResult finish();

 private:
  void set_source(const std::string& field, const std::string& text);
  void set_matmul_efficiency(const GemmCeilingFit& fit);
  void write_nccl_model(const std::vector<CollectiveGroup>& spans);
  void add_collective_errors();

  const planner::Scenario& scenario_;
  const planner::ClusterSpec& cluster_;
  const Measurements& m_;
  FitResult out_;
  planner::Calibration c_;
  const std::string origin_;     // which command measured, on what
  const std::string host_note_;  // ends every source when the host backend measured
};

void CalibrationFit::set_source(const std::string& field, const std::string& text) {
  c_.sources[field] = text;
  if (std::find(out_.fitted_fields.begin(), out_.fitted_fields.end(), field) == out_.fitted_fields.end())
    out_.fitted_fields.push_back(field);
}

// Per dtype, the GEMM model's ceiling solved on one measured GEMM (ceiling_gemm); every
// measured GEMM is then compared with the model at that ceiling. The compute dtype's ceiling
// (bf16's when the compute dtype was not measured) sets matmul_efficiency.
void CalibrationFit::gemm_efficiency() {
  std::map<std::string, std::vector<const GemmMeasurement*>> by_dtype;
  for (const GemmMeasurement& g : m_.gemms)
    if (g.time.median_seconds > 0 && g.peak_flops > 0) by_dtype[g.dtype].push_back(&g);
  const std::string compute_dtype = models::dtype_name(scenario_.training.compute_dtype());
  for (const auto& [dtype, gs] : by_dtype) {
    planner::GemmDevice device = gemm_device_for(scenario_, c_, dtype);
    device.peak_flops = gs.front()->peak_flops;  // the measurements' denominator
    const GemmMeasurement* on = ceiling_gemm(gs);
    GemmCeilingFit fit{dtype, solve_gemm_ceiling(model_shape(on->shape), on->time.median_seconds, device), on->shape,
                       static_cast<int>(gs.size())};
    if (fit.ceiling.capped)
      out_.notes.push_back(dtype + " GEMM " + on->shape.dims() +
                           " ran faster than the GEMM model allows at the dense peak: its ceiling is capped at 1");
    device.large_gemm_efficiency = fit.ceiling.efficiency;
    for (const GemmMeasurement* g : gs)
      out_.errors.push_back({"gemm " + dtype + " efficiency (GEMM model)", g->shape.label + " " + g->shape.dims(),
                             g->efficiency(), planner::estimate_gemm(model_shape(g->shape), device).efficiency});
    out_.gemm_ceilings.push_back(fit);
    if (dtype == compute_dtype || (by_dtype.count(compute_dtype) == 0 && dtype == "bf16")) set_matmul_efficiency(fit);
  }
}

void CalibrationFit::set_matmul_efficiency(const GemmCeilingFit& fit) {
  if (!(fit.ceiling.efficiency > 0)) return;
  c_.matmul_efficiency = fit.ceiling.efficiency;
  set_source("matmul_efficiency",
             origin_ + ": the ceiling of the GEMM model (planner/gemm_model.h, normalised on an 8192^3 GEMM) that "
                 "gives the measured " + fit.dtype + " GEMM " + fit.solved_on.dims() + " (" + fit.solved_on.label +
                 ") its time" + (fit.ceiling.capped ? ", capped at 1" : "") +
                 "; the model at this ceiling against all " + std::to_string(fit.points) +
                 " measured GEMMs is in fit.errors; peak = the scenario GPU's dense " + fit.dtype + " peak." +
                 host_note_);
}

// hbm_efficiency: the plateau, the median bandwidth of the largest half of the copies, over the
// scenario GPU's HBM bandwidth.
void CalibrationFit::memory_bandwidth() {
  if (m_.copies.empty() || !(cluster_.gpu.hbm_bandwidth_bytes_per_second > 0)) return;
  std::vector<const CopyMeasurement*> cs;
  for (const CopyMeasurement& x : m_.copies) cs.push_back(&x);
  std::sort(cs.begin(), cs.end(), [](auto* a, auto* b) { return a->bytes < b->bytes; });
  std::vector<double> bw;
  for (std::size_t i = cs.size() / 2; i < cs.size(); ++i) bw.push_back(cs[i]->bytes_per_second());
  std::sort(bw.begin(), bw.end());
  out_.hbm_bytes_per_second = bw[bw.size() / 2];
  double e = out_.hbm_bytes_per_second / cluster_.gpu.hbm_bandwidth_bytes_per_second;
  if (e > 1) {
    out_.notes.push_back("hbm_efficiency fitted above 1 (" + fmt("%.3f", e) + "): capped at 1");
    e = 1;
  }
  c_.hbm_efficiency = e;
  set_source("hbm_efficiency", origin_ + ": copies of " + bytes_text(cs.front()->bytes) + " to " +
                                   bytes_text(cs.back()->bytes) + ", bytes read + written over the median time; " +
                                   fmt("%.4g", out_.hbm_bytes_per_second / 1e9) + " GB/s over the larger half, of " +
                                   fmt("%.4g", cluster_.gpu.hbm_bandwidth_bytes_per_second / 1e9) +
                                   " GB/s (the scenario GPU's HBM)." + host_note_);
  for (const CopyMeasurement* x : cs)
    out_.errors.push_back({"copy bandwidth", bytes_text(x->bytes), x->time.median_seconds,
                           2 * x->bytes / (cluster_.gpu.hbm_bandwidth_bytes_per_second * e)});
}

// kernel_issue_seconds: the time per op of a stream of trivial ops.
void CalibrationFit::launch_overhead() {
  if (!(m_.launch.median_seconds > 0)) return;
  out_.launch_seconds = m_.launch.median_seconds;
  c_.kernel_issue_seconds = out_.launch_seconds;
  set_source("kernel_issue_seconds",
             origin_ + ": a stream of " + std::to_string(m_.launch_ops) +
                 " trivial ops played through the runtime, step time / ops (issue, launch and completion of one "
                 "op), median of " + std::to_string(m_.launch.repetitions) + "." + host_note_);
  out_.errors.push_back({"launch overhead", std::to_string(m_.launch_ops) + " ops", m_.launch.median_seconds,
                         c_.kernel_issue_seconds});
}

// gemm_slowdown_under_comm: a GEMM beside a collective against the same GEMM alone; and
// compute_slowdown_under_comm, the other kernels', the same figure (nothing else is measured beside
// a collective): the effective slowdown is the measured one, whatever the shipped defaults of the
// GPU say ([GEMMs beside NCCL], planner/cost_model.h).
void CalibrationFit::compute_slowdown() {
  if (m_.interference.empty()) return;
  std::vector<double> alone, beside;
  for (const InterferenceMeasurement& i : m_.interference) {
    alone.push_back(i.gemm_alone.median_seconds);
    beside.push_back(i.gemm_beside_collective.median_seconds);
  }
  out_.interference = fit_interference(alone, beside);
  c_.compute_slowdown_under_comm = out_.interference;
  c_.gemm_slowdown_under_comm = out_.interference;
  const std::string how = origin_ + ": a GEMM timed alone and beside " + m_.interference.front().collective +
                          "; median over pairs of (beside / alone) - 1." + host_note_;
  set_source("gemm_slowdown_under_comm", how);
  set_source("compute_slowdown_under_comm", how + " The other kernels are not timed beside a collective: the GEMM's figure.");
  for (const InterferenceMeasurement& i : m_.interference)
    out_.errors.push_back({"interference", "GEMM beside " + i.collective, i.gemm_beside_collective.median_seconds,
                           i.gemm_alone.median_seconds * (1 + out_.interference)});
}

// Per (collective, span) a piecewise latency + bandwidth fit, then NCCL's parameters set so that
// its model reproduces those lines.
void CalibrationFit::collectives() {
  const std::vector<CollectiveGroup> spans = measured_spans(m_);
  out_.collectives = fit_collective_lines(m_, spans);
  if (out_.collectives.empty()) return;
  write_nccl_model(spans);
  add_collective_errors();
}

void CalibrationFit::write_nccl_model(const std::vector<CollectiveGroup>& spans) {
  planner::NcclParams& p = c_.nccl;
  const int protocols = protocols_found(out_.collectives);
  const std::vector<SpanModel> models = span_models(spans, out_.collectives, protocols);
  const GraphSpans graph = choose_graph_spans(scenario_, models, out_.notes);
  describe_as_ring_only(p, cluster_, protocols);
  RingChannels channels;
  if (graph.intra && graph.intra->bus_gbps[2] > 0) channels.intra = set_intra_node_bandwidth(p, *graph.intra);
  if (graph.inter && graph.inter->bus_gbps[2] > 0)
    channels.inter = set_inter_node_bandwidth(p, *graph.inter, cluster_, m_.side_by_side, out_.notes);
  set_protocol_caps(p, graph, channels);
  fit_ring_latencies(p, intra_hop_latencies(p, cluster_), models, protocols);

  std::string proto_text = protocols == 3 ? "LL, LL128 and Simple" : protocols == 2 ? "LL and Simple" : "Simple only";
  const std::string nccl_source =
      origin_ + ": all-gather / reduce-scatter / all-reduce timed over " + std::to_string(spans.size()) +
      " span(s); per collective and span a robust fit of t = alpha + bytes x factor / busbw split by BIC into "
      "protocol segments (" + proto_text +
      "); mapped onto NCCL's ring model: one speed per channel equal to busbw / channels, LL and LL128 as per-scale "
      "caps, latencies as base + steps x hop. Tree and NVLS disabled: the fitted lines already describe what NCCL "
      "ran." + host_note_;
  p.sources["calibrate"] = nccl_source;
  set_source("nccl", nccl_source);
}

// Goodness of fit of the calibration as written: NCCL's model with these parameters against
// every measured collective. A span the model cannot price ends the comparison with a note.
void CalibrationFit::add_collective_errors() {
  for (const CollectiveMeasurement& x : m_.collectives) {
    if (x.time.median_seconds <= 0) continue;
    double predicted = 0;
    try {
      predicted = modeled_collective_seconds(x, scenario_, c_, m_.side_by_side);
    } catch (const std::exception& e) {
      out_.notes.push_back(std::string("cannot evaluate the model for span ") + span_text(x.span) + ": " + e.what());
      break;
    }
    out_.errors.push_back({planner::collective_name(x.kind) + " " + span_text(x.span), bytes_text(x.bytes),
                           x.time.median_seconds, predicted});
  }
}

FitResult CalibrationFit::finish() {
  out_.notes.insert(out_.notes.end(), m_.notes.begin(), m_.notes.end());
  out_.calibration = c_;
  return std::move(out_);
}

}  // namespace

std::string span_text(const CollectiveGroup& g) {
  return std::to_string(g.ranks) + " ranks / " + std::to_string(g.nodes) + (g.nodes == 1 ? " node" : " nodes");
}

FitResult fit(const planner::Scenario& scenario, const Measurements& m) {
  CalibrationFit f(scenario, m);
  f.gemm_efficiency();
  f.memory_bandwidth();
  f.launch_overhead();
  f.compute_slowdown();
  f.collectives();
  return f.finish();
}

nlohmann::json calibration_json(const FitResult& f, const Measurements& m) {
  nlohmann::json j;
  const planner::Calibration& c = f.calibration;
  j["name"] = c.name;
  j["gpu"] = m.gpu;
  // Only the fields the measurements set (and nccl as a whole): everything else stays the
  // shipped defaults for the GPU when a scenario reads this file.
  const nlohmann::json all = c.to_json();
  for (const std::string& field : f.fitted_fields) j[field] = all[field];
  nlohmann::json sources = nlohmann::json::object();
  for (const std::string& field : f.fitted_fields) sources[field] = c.sources.at(field);
  if (!m.step_gemms.empty()) {
    // The step's GEMMs as measured: the cost model prices each GEMM near one of these rows from it.
    j["gemm_table"] = gemm_table_json(m);
    sources["gemm_table"] = "fsdpsim calibrate --backend " + m.backend + " on " + m.device +
                            ": the step's GEMM shapes, cublasGemmEx bf16, median of the timed repetitions";
  }
  j["sources"] = sources;

  nlohmann::json fit;
  fit["backend"] = m.backend;
  fit["device"] = m.device;
  nlohmann::json cols = nlohmann::json::array();
  for (const CollectiveFit& cf : f.collectives) {
    nlohmann::json segs = nlohmann::json::array();
    for (std::size_t s = 0; s < cf.fit.segments.size(); ++s) {
      const LineFit& l = cf.fit.segments[s];
      const double factor = planner::bus_factor(cf.kind, cf.span.ranks);
      segs.push_back({{"alpha_seconds", l.alpha_seconds},
                      {"bus_bandwidth_gbps", l.bandwidth_bytes_per_second() / 1e9},
                      {"min_bytes", cf.fit.segment_min_x[s] / factor},
                      {"max_bytes", cf.fit.segment_max_x[s] / factor},
                      {"points", l.points}});
    }
    nlohmann::json cross = nlohmann::json::array();
    for (double x : cf.fit.crossovers_x) cross.push_back(x / planner::bus_factor(cf.kind, cf.span.ranks));
    cols.push_back({{"collective", planner::collective_name(cf.kind)},
                    {"ranks", cf.span.ranks},
                    {"nodes", cf.span.nodes},
                    {"model", "t = alpha + bytes x factor / busbw per segment; factor (n-1)/n AG/RS, 2(n-1)/n AR"},
                    {"segments", segs},
                    {"crossover_bytes", cross}});
  }
  fit["collectives"] = cols;
  nlohmann::json gemm = nlohmann::json::array();
  for (const GemmCeilingFit& g : f.gemm_ceilings)
    gemm.push_back({{"dtype", g.dtype},
                    {"model", "planner/gemm_model.h estimate_gemm (tiles and waves over the SMs, tile ramps, split-K, "
                              "an HBM roofline, a kernel floor) with large_gemm_efficiency solved on one measured GEMM"},
                    {"large_gemm_efficiency", g.ceiling.efficiency},
                    {"capped", g.ceiling.capped},
                    {"solved_on", {{"m", g.solved_on.m}, {"n", g.solved_on.n}, {"k", g.solved_on.k}, {"label", g.solved_on.label}}},
                    {"points", g.points}});
  fit["gemm"] = gemm;
  fit["hbm_bytes_per_second"] = f.hbm_bytes_per_second;
  fit["launch_seconds"] = f.launch_seconds;
  fit["interference"] = f.interference;
  nlohmann::json summary = nlohmann::json::array();
  for (const ErrorSummary& s : summarize_errors(f.errors))
    summary.push_back({{"what", s.what},
                       {"points", s.points},
                       {"max_abs_error", s.max_abs_error},
                       {"median_abs_error", s.median_abs_error}});
  fit["goodness"] = summary;
  nlohmann::json rows = nlohmann::json::array();
  for (const FitError& e : f.errors)
    rows.push_back({{"what", e.what}, {"item", e.item}, {"measured", e.measured}, {"fitted", e.fitted}, {"error", e.error()}});
  fit["errors"] = rows;
  fit["notes"] = f.notes;
  fit["measurements"] = m.to_json();
  j["fit"] = fit;
  return j;
}

std::string fit_table(const FitResult& f, bool every_row) {
  std::ostringstream o;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%-44s %6s %10s %10s\n", "goodness of fit (written model vs measured)", "points",
                "max|err|", "median|err|");
  o << buf;
  for (const ErrorSummary& s : summarize_errors(f.errors)) {
    std::snprintf(buf, sizeof buf, "%-44s %6d %9.2f%% %9.2f%%\n", s.what.c_str(), s.points, 100 * s.max_abs_error,
                  100 * s.median_abs_error);
    o << buf;
  }
  if (every_row) {
    std::snprintf(buf, sizeof buf, "\n%-44s %-26s %12s %12s %9s\n", "measurement", "item", "measured", "fitted", "error");
    o << buf;
    for (const FitError& e : f.errors) {
      std::snprintf(buf, sizeof buf, "%-44s %-26s %12.5g %12.5g %+8.2f%%\n", e.what.c_str(), e.item.c_str(), e.measured,
                    e.fitted, 100 * e.error());
      o << buf;
    }
  }
  return o.str();
}

}  // namespace fsdpsim::calibrate
