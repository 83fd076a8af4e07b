#include "planner/catalog.h"

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "models/json_input.h"
#include "models/model.h"
#include "planner/scenario.h"

namespace fsdpsim::planner {

namespace fs = std::filesystem;

const char* const kCommandLineFile = "(command line)";

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Lower case without '-', '_', '.' and spaces, and without a Hugging Face "owner/" prefix:
// the forms people write one model name in ("Llama-3.1-70B", "llama3.1-70b") compare equal.
std::string normalized(const std::string& name) {
  std::string s = name.substr(name.rfind('/') == std::string::npos ? 0 : name.rfind('/') + 1);
  std::string out;
  for (char c : lower(s))
    if (c != '-' && c != '_' && c != '.' && c != ' ') out += c;
  return out;
}

std::size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

// A JSON file name, or a file that is there: a path, not a catalog name ("meta-llama/Llama-3.1-8B"
// is a name).
bool looks_like_path(const std::string& s) {
  std::error_code ec;
  return (s.size() > 5 && s.compare(s.size() - 5, 5, ".json") == 0) || fs::is_regular_file(s, ec);
}

std::string listing(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}

std::string suggestion(const std::string& wanted, const std::vector<std::string>& names, const std::string& command) {
  const std::vector<std::string> close = close_names(wanted, names);
  std::string text = close.empty() ? "" : "; close: " + listing(close);
  return text + " (`fsdpsim " + command + "` lists them all)";
}

// The catalog name `name` stands for (exact, then normalized), or nullopt.
std::optional<std::string> find_name(const std::string& name, const std::vector<std::string>& names) {
  for (const std::string& n : names)
    if (lower(n) == lower(name)) return n;
  for (const std::string& n : names)
    if (normalized(n) == normalized(name)) return n;
  return std::nullopt;
}

std::string gpu_catalog_file() { return (fs::path(catalog_root()) / "scenarios/hardware/gpus.json").string(); }

std::vector<std::string> gpu_names(const nlohmann::json& catalog) {
  std::vector<std::string> names;
  for (const auto& [key, value] : catalog.items())
    if (key.rfind('_', 0) != 0) names.push_back(key);
  return names;
}

}  // namespace

std::vector<std::string> catalog_names(const std::string& folder) {
  std::vector<std::string> names;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(fs::path(catalog_root()) / folder, ec))
    if (entry.is_regular_file(ec) && entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<ModelEntry> model_catalog() {
  std::vector<ModelEntry> entries;
  for (const std::string& name : catalog_names("models")) {
    ModelEntry e;
    e.name = name;
    e.file = "models/" + name + ".json";
    try {
      const models::Model m = models::load_model_file((fs::path(catalog_root()) / e.file).string());
      e.family = m.arch.family;
      e.parameters = m.parameter_count();
      e.num_layers = m.arch.num_layers;
      e.hidden_size = m.arch.hidden_size;
    } catch (const std::exception& error) {
      e.error = error.what();
    }
    entries.push_back(e);
  }
  return entries;
}

std::vector<ClusterEntry> cluster_catalog() {
  std::vector<ClusterEntry> entries;
  for (const std::string& name : catalog_names("scenarios/clusters")) {
    ClusterEntry e;
    e.name = name;
    e.file = "scenarios/clusters/" + name + ".json";
    try {
      const std::string path = (fs::path(catalog_root()) / e.file).string();
      const ClusterSpec c = parse_cluster(load_json_file(path), path, "");
      e.title = c.name;
      e.gpu = c.gpu.name;
      e.gpu_memory_bytes = c.gpu.memory_bytes;
      e.nodes = c.nodes;
      e.gpus_per_node = c.gpus_per_node;
      const char* intra = c.intra_kind == IntraNodeKind::pcie ? "pcie" : c.intra_kind == IntraNodeKind::xgmi ? "xgmi" : "nvswitch";
      char buf[128];
      std::snprintf(buf, sizeof buf, "%s %.0f GB/s", intra, c.intra_bandwidth_gbps);
      e.intra_node = buf;
      if (c.nic_bandwidth_gbps > 0) {
        std::snprintf(buf, sizeof buf, "%d x %.1f GB/s %s%s", c.nics_per_node, c.nic_bandwidth_gbps,
                      c.inter_topology == InterNodeTopology::fat_tree ? "fat-tree" : "rail-optimized",
                      c.oversubscription > 1 ? (" " + std::to_string(static_cast<int>(c.oversubscription)) + ":1").c_str() : "");
        e.inter_node = buf;
      }
    } catch (const std::exception& error) {
      e.error = error.what();
    }
    entries.push_back(e);
  }
  return entries;
}

std::vector<std::string> close_names(const std::string& wanted, const std::vector<std::string>& names, std::size_t limit) {
  const std::string w = normalized(wanted);
  std::vector<std::pair<std::size_t, std::string>> scored;
  for (const std::string& n : names) {
    const std::string k = normalized(n);
    std::size_t d = edit_distance(w, k);
    // One containing the other ("70b" in "llama3.1-70b"; "llama3170binstruct" holding "llama3170b").
    if (!w.empty() && (k.find(w) != std::string::npos || w.find(k) != std::string::npos)) d = std::min<std::size_t>(d, 1);
    if (d <= std::max<std::size_t>(2, w.size() / 3)) scored.emplace_back(d, n);
  }
  std::sort(scored.begin(), scored.end());
  std::vector<std::string> out;
  for (std::size_t i = 0; i < scored.size() && i < limit; ++i) out.push_back(scored[i].second);
  return out;
}

std::string resolve_model_reference(const std::string& name, const std::string& option) {
  if (name.empty()) throw InputError::option(option, "expected a model name (`fsdpsim models`), a model JSON file or hf:config.json");
  if (name.rfind("hf:", 0) == 0 || looks_like_path(name)) return name;
  const std::vector<std::string> names = catalog_names("models");
  if (auto found = find_name(name, names)) return "models/" + *found + ".json";
  throw InputError::option(option, "no model \"" + name + "\" in the catalog " + catalog_root() + "/models" +
                                       suggestion(name, names, "models"));
}

std::optional<std::string> catalog_reference(const std::string& key, const std::string& name, std::string* hint) {
  const std::string folder = key == "model" ? "models" : key == "cluster" ? "scenarios/clusters" : "";
  if (folder.empty() || name.empty() || looks_like_path(name)) return std::nullopt;
  const std::vector<std::string> names = catalog_names(folder);
  if (auto found = find_name(name, names)) return folder + "/" + *found + ".json";
  if (hint) *hint = suggestion(name, names, key == "model" ? "models" : "clusters");
  return std::nullopt;
}

std::string resolve_cluster_reference(const std::string& name, const std::string& option) {
  if (name.empty()) throw InputError::option(option, "expected a cluster name (`fsdpsim clusters`) or a cluster JSON file");
  if (looks_like_path(name)) return name;
  const std::vector<std::string> names = catalog_names("scenarios/clusters");
  if (auto found = find_name(name, names)) return "scenarios/clusters/" + *found + ".json";
  throw InputError::option(option, "no cluster \"" + name + "\" in the catalog " + catalog_root() +
                                       "/scenarios/clusters" + suggestion(name, names, "clusters"));
}

GpuCountSpec parse_gpu_count(const std::string& text, const std::string& option) {
  std::size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  const bool separated = digits < text.size() && (text[digits] == 'x' || text[digits] == 'X' || text[digits] == '*');
  if (digits == 0 || digits > 7 || (digits < text.size() && (!separated || digits + 1 == text.size())))
    throw InputError::option(option, "expected a GPU count and kind, as in 64xH100, 16xdgx-a100 or 8; got \"" + text + "\"");
  GpuCountSpec spec;
  spec.count = std::stoi(text.substr(0, digits));
  // The planner's own limit (planner/scenario.cpp): 2^20 GPUs.
  if (spec.count < 1 || spec.count > (1 << 20))
    throw InputError::option(option, "expected 1 to 1048576 GPUs, got " + text.substr(0, digits));
  if (separated) spec.what = text.substr(digits + 1);
  return spec;
}

std::string cluster_for_gpu_kind(const std::string& what, const std::string& option) {
  const std::vector<std::string> clusters = catalog_names("scenarios/clusters");
  if (auto found = find_name(what, clusters)) return "scenarios/clusters/" + *found + ".json";
  if (auto found = find_name("dgx-" + what, clusters)) return "scenarios/clusters/" + *found + ".json";
  const nlohmann::json gpus = load_json_file(gpu_catalog_file());
  const std::vector<std::string> names = gpu_names(gpus);
  std::optional<std::string> gpu = find_name(what, names);
  if (!gpu) {
    std::vector<std::string> starting;
    for (const std::string& n : names)
      if (lower(n).rfind(lower(what) + "-", 0) == 0) starting.push_back(n);
    if (starting.size() == 1) gpu = starting.front();
    else if (starting.size() > 1)
      throw InputError::option(option, "\"" + what + "\" is more than one GPU of the catalog: " + listing(starting) +
                                           "; name one, or a cluster (`fsdpsim clusters`)");
  }
  if (!gpu) {
    std::vector<std::string> all = names;
    all.insert(all.end(), clusters.begin(), clusters.end());
    throw InputError::option(option, "no GPU or cluster \"" + what + "\" in the catalogs (scenarios/hardware/gpus.json, "
                                     "scenarios/clusters)" + suggestion(what, all, "clusters"));
  }
  std::string best;
  int best_gpus = 0;
  for (const ClusterEntry& c : cluster_catalog()) {
    if (!c.error.empty() || c.gpu != *gpu || c.nodes != 1) continue;
    if (c.gpus_per_node > best_gpus || (c.gpus_per_node == best_gpus && c.name.size() < best.size())) {
      best = c.name;
      best_gpus = c.gpus_per_node;
    }
  }
  if (best.empty())
    throw InputError::option(option, "no one-node cluster of " + *gpu + " GPUs in scenarios/clusters; write a cluster "
                                     "file (docs/schema.md) and pass it with --cluster");
  return "scenarios/clusters/" + best + ".json";
}

QuickScenarioDocument quick_scenario(const QuickScenario& q) {
  QuickScenarioDocument out;
  GpuCountSpec count;
  if (!q.gpus.empty()) count = parse_gpu_count(q.gpus);
  if (!q.cluster.empty() && !count.what.empty())
    throw InputError::option("--gpus", "give the GPU kind once: --cluster " + q.cluster + " with --gpus " +
                                           std::to_string(count.count) + ", or --gpus " + q.gpus + " alone");
  if (q.cluster.empty() && count.what.empty())
    throw InputError::option("--gpus", "name the GPUs: --gpus 64xH100 (or --cluster NAME; `fsdpsim clusters`)");
  out.cluster_file = q.cluster.empty() ? cluster_for_gpu_kind(count.what) : resolve_cluster_reference(q.cluster);
  const std::string model = resolve_model_reference(q.model);
  // The cluster's shape: read here (the loader reads it again, with the overrides, and checks it).
  const std::string cluster_path = resolve_path(out.cluster_file, "");
  const nlohmann::json cluster = load_json_file(cluster_path);
  JsonReader reader(cluster, cluster_path);
  const int per_node = reader.int_in_or("gpus_per_node", 1, 1 << 20, 8);
  const int shipped_nodes = reader.int_in_or("nodes", 1, 1 << 20, 1);
  out.gpus = count.count > 0 ? count.count : per_node * shipped_nodes;
  if (count.count > 0) {
    if (count.count < per_node) {
      out.overrides.push_back("cluster.gpus_per_node=" + std::to_string(count.count));
      out.overrides.push_back("cluster.nodes=1");
      // A node of fewer GPUs has no more NICs than GPUs (one per GPU on the shipped nodes).
      if (cluster.contains("inter_node") && cluster["inter_node"].is_object() &&
          cluster["inter_node"].value("nics_per_node", per_node) > count.count)
        out.overrides.push_back("cluster.inter_node.nics_per_node=" + std::to_string(count.count));
    } else if (count.count % per_node != 0) {
      throw InputError::option("--gpus", std::to_string(count.count) + " GPUs do not fill whole nodes of " +
                                             std::to_string(per_node) + " (" + out.cluster_file + "); give a multiple of " +
                                             std::to_string(per_node));
    } else {
      out.overrides.push_back("cluster.nodes=" + std::to_string(count.count / per_node));
    }
  }
  out.overrides.insert(out.overrides.end(), q.sets.begin(), q.sets.end());
  const std::string model_name = fs::path(model.rfind("hf:", 0) == 0 ? model.substr(3) : model).stem().string();
  out.document = {{"name", model_name + " on " + std::to_string(out.gpus) + " x " +
                               fs::path(out.cluster_file).stem().string()},
                  {"model", model},
                  {"cluster", out.cluster_file}};
  return out;
}

}  // namespace fsdpsim::planner
