#include "sim/collectives_table.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <map>
#include <optional>
#include <sstream>

#include "planner/scenario.h"
#include "sim/internal/text_table.h"

namespace fsdpsim::sim {

using planner::CollectiveKind;

namespace {

constexpr double kKiB = 1024.0, kMiB = kKiB * 1024, kGiB = kMiB * 1024;

// "16 GiB" for a whole number of the unit (nccl-tests' sizes), else two decimals ("3.91 GiB").
std::string size_text(double bytes) {
  const double unit = bytes >= kGiB ? kGiB : bytes >= kMiB ? kMiB : bytes >= kKiB ? kKiB : 1;
  const char* name = unit == kGiB ? "GiB" : unit == kMiB ? "MiB" : unit == kKiB ? "KiB" : "B";
  const double v = bytes / unit;
  char buf[32];
  std::snprintf(buf, sizeof buf, v == std::floor(v) ? "%.0f %s" : "%.2f %s", v, name);
  return buf;
}

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

}  // namespace

bool same_gpu_family(const std::string& catalog_gpu, const std::string& published_gpu) {
  const std::string family = catalog_gpu.substr(0, catalog_gpu.find('-'));
  return !family.empty() && published_gpu.find(family) != std::string::npos;
}

// Whether a published row ran on the node's kind of interconnect: an H100 PCIe node is not
// judged by NVSwitch figures (the session-30 audit: -87% against rows 66 and 67). A row that
// names no interconnect is taken as NVLink, as every shipped one is.
bool same_interconnect(planner::IntraNodeKind kind, const std::string& published_intra) {
  auto says = [&](const char* word) { return published_intra.find(word) != std::string::npos; };
  if (says("PCIe")) return kind == planner::IntraNodeKind::pcie;
  if (says("xGMI") || says("Infinity Fabric")) return kind == planner::IntraNodeKind::xgmi;
  return kind == planner::IntraNodeKind::nvswitch;
}

CollectivesTable collectives_table(const planner::ClusterSpec& cluster, const planner::CollectiveGroup& group,
                                   const std::vector<CollectiveKind>& kinds, const std::vector<double>& sizes,
                                   const std::vector<PublishedCollective>& published) {
  CollectivesTable t;
  t.cluster = cluster;
  t.group = group;
  t.params = planner::NcclParams::defaults_for(cluster);
  std::vector<const PublishedCollective*> mine;
  for (const PublishedCollective& p : published)
    if (p.ranks == group.ranks && p.nodes == group.nodes && same_gpu_family(cluster.gpu.name, p.gpu) &&
        same_interconnect(cluster.intra_kind, p.intra_node))
      mine.push_back(&p);
  for (CollectiveKind kind : kinds) {
    for (double bytes : sizes) {
      CollectiveRow row;
      row.kind = kind;
      row.bytes = bytes;
      row.estimate = planner::estimate_collective(kind, bytes, group, cluster, t.params);
      for (const PublishedCollective* p : mine)
        if (p->kind == kind && p->bytes == bytes && !p->nvls_off) row.published.push_back(p);
      t.rows.push_back(row);
    }
    for (const PublishedCollective* p : mine) {
      if (p->kind != kind) continue;
      planner::NcclParams params = t.params;
      if (p->nvls_off) params.enable_nvls = false;
      CollectivesTable::Comparison c{*p, planner::estimate_collective(kind, p->bytes, group, cluster, params), 0};
      c.error = (c.model.bus_bandwidth_gbps - p->busbw_gbps) / p->busbw_gbps;
      t.comparisons.push_back(c);
    }
  }
  return t;
}

std::string collectives_table_text(const CollectivesTable& t, const std::string& published_file) {
  std::ostringstream out;
  out << "NCCL's cost model (NCCL " << t.params.nccl_version << " tables, library "
      << t.params.library << ") on " << t.group.ranks << " x " << t.cluster.gpu.name << " (" << t.group.nodes << " node"
      << (t.group.nodes > 1 ? "s" : "") << "); sizes as nccl-tests counts them (all-gather, reduce-scatter: the "
      << "gathered buffer); busbw = algbw x (n-1)/n, x 2(n-1)/n for all-reduce\n";
  std::map<CollectiveKind, std::vector<const CollectiveRow*>> by_kind;
  for (const CollectiveRow& r : t.rows) by_kind[r.kind].push_back(&r);
  for (const auto& [kind, rows] : by_kind) {
    out << "\n" << planner::collective_name(kind) << "\n";
    std::vector<std::vector<std::string>> cells = {
        {"size (B)", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)", "algo", "proto", "channels", "published busbw", "error"}};
    for (const CollectiveRow* r : rows) {
      std::string pub, err;
      for (const PublishedCollective* p : r->published) {
        pub += (pub.empty() ? "" : ", ") + fixed(p->busbw_gbps, 2) + " (row " + p->row_id + ")";
        err += (err.empty() ? "" : ", ") + fixed(100 * (r->estimate.bus_bandwidth_gbps - p->busbw_gbps) / p->busbw_gbps, 1) + "%";
      }
      char bytes[32];
      std::snprintf(bytes, sizeof bytes, "%.0f", r->bytes);
      cells.push_back({bytes, size_text(r->bytes), fixed(r->estimate.seconds * 1e6, 1), fixed(r->estimate.alg_bandwidth_gbps, 2),
                       fixed(r->estimate.bus_bandwidth_gbps, 2), r->estimate.algorithm, r->estimate.protocol,
                       std::to_string(r->estimate.channels), pub.empty() ? "-" : pub, err.empty() ? "" : err});
    }
    out << padded_table(cells, {false, false, false, false, false, true, true, false, false, false});
  }
  out << "\nPublished bus bandwidths for " << t.group.ranks << " x " << t.cluster.gpu.name.substr(0, t.cluster.gpu.name.find('-'))
      << " on " << t.group.nodes << " node" << (t.group.nodes > 1 ? "s" : "") << " (" << published_file << "): ";
  if (t.comparisons.empty()) {
    out << "none; the table above is the model alone.\n";
    return out.str();
  }
  out << t.comparisons.size() << "\n";
  std::vector<std::vector<std::string>> cells = {{"row", "collective", "size", "published", "model", "error", "model algo", "note"}};
  double sum = 0, worst = 0;
  for (const auto& c : t.comparisons) {
    sum += std::abs(c.error);
    worst = std::max(worst, std::abs(c.error));
    cells.push_back({c.published.row_id, planner::collective_name(c.published.kind), size_text(c.published.bytes),
                     fixed(c.published.busbw_gbps, 2), fixed(c.model.bus_bandwidth_gbps, 2),
                     (c.error >= 0 ? "+" : "") + fixed(100 * c.error, 1) + "%",
                     c.model.algorithm + "/" + c.model.protocol, c.published.nvls_off ? "NVLS off, as the source ran" : ""});
  }
  out << padded_table(cells, {false, true, false, false, false, false, true, true});
  out << "mean |error| " << fixed(100 * sum / t.comparisons.size(), 1) << "%, worst " << fixed(100 * worst, 1)
      << "% (each row's source: the CSV; docs/collectives.md)\n";
  return out.str();
}

nlohmann::json collectives_table_json(const CollectivesTable& t) {
  nlohmann::json rows = nlohmann::json::array();
  for (const CollectiveRow& r : t.rows) {
    nlohmann::json published = nlohmann::json::array();
    for (const PublishedCollective* p : r.published) published.push_back({{"row", p->row_id}, {"busbw_gbps", p->busbw_gbps}});
    rows.push_back({{"collective", planner::collective_name(r.kind)},
                    {"bytes", r.bytes},
                    {"seconds", r.estimate.seconds},
                    {"algbw_gbps", r.estimate.alg_bandwidth_gbps},
                    {"busbw_gbps", r.estimate.bus_bandwidth_gbps},
                    {"algorithm", r.estimate.algorithm},
                    {"protocol", r.estimate.protocol},
                    {"channels", r.estimate.channels},
                    {"published", published}});
  }
  nlohmann::json comparisons = nlohmann::json::array();
  for (const auto& c : t.comparisons)
    comparisons.push_back({{"row", c.published.row_id},
                           {"source", c.published.source},
                           {"collective", planner::collective_name(c.published.kind)},
                           {"bytes", c.published.bytes},
                           {"nvls_off", c.published.nvls_off},
                           {"published_busbw_gbps", c.published.busbw_gbps},
                           {"model_busbw_gbps", c.model.bus_bandwidth_gbps},
                           {"model_algorithm", c.model.algorithm},
                           {"model_protocol", c.model.protocol},
                           {"error", c.error}});
  return {{"gpu", t.cluster.gpu.name},
          {"ranks", t.group.ranks},
          {"nodes", t.group.nodes},
          {"nccl_version", t.params.nccl_version},
          {"library", t.params.library},
          {"rows", rows},
          {"published", comparisons}};
}

std::vector<CollectiveChoice> collective_choices(const planner::Schedule& schedule, const planner::CostModel& cost) {
  std::vector<CollectiveChoice> out;
  std::map<std::pair<int, int>, std::size_t> index;  // (kind, group) -> out
  std::map<std::pair<int, int>, const planner::Op*> largest;
  for (const planner::Op& op : schedule.ops) {
    if (!planner::is_collective(op.kind) || op.group < 0 || op.group >= static_cast<int>(schedule.groups.size())) continue;
    // The op kind's name is the collective's ("all_gather", ...): any collective the cost model knows.
    const std::optional<CollectiveKind> kind = planner::collective_kind_from_name(planner::to_string(op.kind));
    if (!kind) continue;
    const auto key = std::make_pair(static_cast<int>(op.kind), op.group);
    auto it = index.find(key);
    if (it == index.end()) {
      const planner::ProcessGroup& g = schedule.groups[op.group];
      CollectiveChoice c;
      c.kind = *kind;
      c.group = g.name;
      c.ranks = g.ranks;
      c.nodes = g.nodes;
      it = index.emplace(key, out.size()).first;
      out.push_back(c);
    }
    CollectiveChoice& c = out[it->second];
    ++c.calls;
    if (op.comm_bytes > c.largest_bytes) {
      c.largest_bytes = op.comm_bytes;
      largest[key] = &op;
    }
  }
  for (const auto& [key, op] : largest) out[index[key]].estimate = cost.collective(*op, schedule);
  return out;
}

std::string collective_choices_text(const std::vector<CollectiveChoice>& choices) {
  if (choices.empty()) return "";
  std::vector<std::vector<std::string>> cells = {
      {"collective", "group", "ranks x nodes", "calls", "largest", "algo/proto", "channels", "busbw (GB/s)", "time (ms)"}};
  for (const CollectiveChoice& c : choices)
    cells.push_back({planner::collective_name(c.kind), c.group, std::to_string(c.ranks) + " x " + std::to_string(c.nodes),
                     std::to_string(c.calls), size_text(c.largest_bytes), c.estimate.algorithm + "/" + c.estimate.protocol,
                     std::to_string(c.estimate.channels), fixed(c.estimate.bus_bandwidth_gbps, 1), fixed(c.estimate.seconds * 1e3, 3)});
  return "\nNCCL's choice per collective (the cost model's, for the largest call; `fsdpsim collectives` for every size)\n" +
         padded_table(cells, {true, true, false, false, false, true, false, false, false});
}

nlohmann::json collective_choices_json(const std::vector<CollectiveChoice>& choices) {
  nlohmann::json list = nlohmann::json::array();
  for (const CollectiveChoice& c : choices)
    list.push_back({{"collective", planner::collective_name(c.kind)},
                    {"group", c.group},
                    {"ranks", c.ranks},
                    {"nodes", c.nodes},
                    {"calls", c.calls},
                    {"largest_bytes", c.largest_bytes},
                    {"algorithm", c.estimate.algorithm},
                    {"protocol", c.estimate.protocol},
                    {"channels", c.estimate.channels},
                    {"busbw_gbps", c.estimate.bus_bandwidth_gbps},
                    {"seconds", c.estimate.seconds}});
  return list;
}

}  // namespace fsdpsim::sim
