// `fsdpsim collectives --cluster X --ranks N`: an nccl-tests-like table from NCCL's cost model
// (sim/collectives_table.h) with the published bus bandwidths of that setup beside it.
#include <cmath>
#include <iostream>

#include "models/json_input.h"
#include "planner/catalog.h"
#include "planner/scenario.h"
#include "sim/collectives_table.h"
#include "tools/commands.h"

namespace fsdpsim::tools {

namespace {

struct CollectivesOptions {
  std::string cluster = "dgx-h100";
  int ranks = 8;
  std::vector<std::string> kinds = {"all_gather", "reduce_scatter", "all_reduce"};
  std::string min_bytes = "1K", max_bytes = "16G";
  double factor = 2;
  std::string published;
  bool json = false;
};

// The largest size the table prices: 64 TiB.
constexpr double kMaxTableBytes = 64.0 * 1024 * 1024 * 1024 * 1024;

// "1K", "256M", "16G", "1T", "1048576": nccl-tests' -b / -e (K, M, G, T are binary).
double parse_bytes(const std::string& text, const std::string& option) {
  std::size_t used = 0;
  double v = 0;
  try {
    v = std::stod(text, &used);
  } catch (const std::exception&) {
    throw InputError::option(option, "expected a size such as 1K, 256M or 16G, got \"" + text + "\"");
  }
  const std::string unit = text.substr(used);
  const double scale = unit.empty() || unit == "B" ? 1 : unit == "K" || unit == "KiB" ? 1024.0
                       : unit == "M" || unit == "MiB"                            ? 1024.0 * 1024
                       : unit == "G" || unit == "GiB"                            ? 1024.0 * 1024 * 1024
                       : unit == "T" || unit == "TiB"                            ? 1024.0 * 1024 * 1024 * 1024
                                                                                 : -1;
  if (scale < 0 || !std::isfinite(v) || v * scale < 1 || v * scale > kMaxTableBytes)
    throw InputError::option(option, "expected a size from 1 B to 64 TiB such as 1K, 256M or 16G, got \"" + text + "\"");
  // A buffer is whole bytes: 1.5 was priced as 1 B and printed so (the session-38 input audit).
  if (v * scale != std::floor(v * scale))
    throw InputError::option(option, "expected a whole number of bytes (1.5K is 1536), got \"" + text + "\"");
  return v * scale;
}

void run_collectives(const CollectivesOptions& o) {
  const std::string reference = planner::resolve_cluster_reference(o.cluster);
  const std::string path = planner::resolve_path(reference, "");
  nlohmann::json cluster_json = load_json_file(path);
  const int per_node = cluster_json.value("gpus_per_node", 8);
  planner::CollectiveGroup group{o.ranks, 1};
  if (o.ranks > per_node) {
    if (o.ranks % per_node != 0)
      throw InputError::option("--ranks", std::to_string(o.ranks) + " ranks do not fill whole nodes of " +
                                              std::to_string(per_node) + " (" + reference + ")");
    group.nodes = o.ranks / per_node;
  }
  if (!cluster_json.is_object()) throw InputError(path, "", "expected a cluster object");
  cluster_json["nodes"] = std::max(group.nodes, cluster_json.value("nodes", 1));
  const planner::ClusterSpec cluster = planner::parse_cluster(cluster_json, path, "");
  std::vector<planner::CollectiveKind> kinds;
  for (const std::string& k : o.kinds) {
    const auto kind = planner::collective_kind_from_name(k);
    if (!kind || *kind == planner::CollectiveKind::broadcast)
      throw InputError::option("--kind", "expected all_gather, reduce_scatter, all_reduce or all_to_all, got \"" + k + "\"");
    kinds.push_back(*kind);
  }
  const double lo = parse_bytes(o.min_bytes, "--min-bytes"), hi = parse_bytes(o.max_bytes, "--max-bytes");
  if (hi < lo) throw InputError::option("--max-bytes", "is below --min-bytes");
  std::vector<double> sizes;
  for (double b = lo; b <= hi && sizes.size() < 1000; b = std::floor(b * o.factor)) sizes.push_back(b);
  const std::string file = o.published.empty() ? planner::default_published_collectives_path() : o.published;
  const std::vector<sim::PublishedCollective> published = planner::load_published_collectives(file);
  const sim::CollectivesTable table = sim::collectives_table(cluster, group, kinds, sizes, published);
  if (o.json) std::cout << sim::collectives_table_json(table).dump(2) << "\n";
  else std::cout << sim::collectives_table_text(table, file);
}

}  // namespace

void add_collectives_command(CLI::App& app) {
  auto o = std::make_shared<CollectivesOptions>();
  CLI::App* cmd = app.add_subcommand(
      "collectives", "nccl-tests-like table from NCCL's cost model: time, algbw, busbw, algorithm, protocol, channels");
  cmd->add_option("--cluster", o->cluster, "Cluster: a catalog name (`fsdpsim clusters`) or a cluster file (default dgx-h100)");
  cmd->add_option("--ranks", o->ranks, "GPUs in the communicator (whole nodes past one node; default 8)")
      ->check(CLI::Range(2, 1 << 20));
  cmd->add_option("--kind", o->kinds, "Collectives: all_gather, reduce_scatter, all_reduce, all_to_all (default the first three)")
      ->delimiter(',');
  cmd->add_option("-b,--min-bytes", o->min_bytes, "Smallest size, as nccl-tests -b (default 1K)");
  cmd->add_option("-e,--max-bytes", o->max_bytes, "Largest size, as nccl-tests -e (default 16G)");
  cmd->add_option("-f,--factor", o->factor, "Size multiplier, as nccl-tests -f (default 2)")->check(CLI::Range(1.0001, 1024.0));
  cmd->add_option("--published", o->published,
                  "Published bus bandwidths CSV (default: the shipped tests/data/validation/public_collectives.csv)");
  cmd->add_flag("--json", o->json, "Print one JSON object for tools");
  cmd->callback([o] { run_collectives(*o); });
}

}  // namespace fsdpsim::tools
