// The shipped catalogs by name, and the one-line form of a scenario.
//
// A catalog entry is a file: models/NAME.json and scenarios/clusters/NAME.json under
// catalog_root() (planner/scenario.h), named by the file's stem. `fsdpsim models` and
// `fsdpsim clusters` list them; `estimate --model NAME --gpus 64xH100` resolves the names here
// into an ordinary scenario (a model reference, a cluster reference and `--set` overrides), so the
// one-liner and the scenario file go through the same loader and the same checks.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fsdpsim::planner {

struct ModelEntry {
  std::string name;  // file stem: "llama3.1-70b"
  std::string file;  // path under the catalog root: "models/llama3.1-70b.json"
  std::string family;
  std::int64_t parameters = 0;
  std::int64_t num_layers = 0;
  std::int64_t hidden_size = 0;
  std::string error;  // the file does not load (then the figures above are 0)
};

struct ClusterEntry {
  std::string name;   // file stem: "dgx-h100"
  std::string file;   // "scenarios/clusters/dgx-h100.json"
  std::string title;  // the file's "name"
  std::string gpu;    // GPU catalog name
  double gpu_memory_bytes = 0;
  int nodes = 0;
  int gpus_per_node = 0;
  std::string intra_node;  // "nvswitch 450 GB/s"
  std::string inter_node;  // "8 x 50 GB/s rail_optimized" ("" for none)
  std::string error;
};

// Catalog entries, sorted by name. A file that does not load is listed with its error.
std::vector<ModelEntry> model_catalog();
std::vector<ClusterEntry> cluster_catalog();
// Just the names (file stems) in a catalog folder ("models", "scenarios/clusters"), sorted.
std::vector<std::string> catalog_names(const std::string& folder);

// The names of `names` closest to `wanted` (case-insensitive edit distance, or one containing
// the other), best first, at most `limit`.
std::vector<std::string> close_names(const std::string& wanted, const std::vector<std::string>& names,
                                     std::size_t limit = 5);

// A model as the command line names it, as the scenario's "model" field: "hf:config.json" and
// a path to a JSON file pass through; a catalog name (case, '-', '_' and '.' ignored, a
// Hugging Face "owner/" prefix dropped: "meta-llama/Llama-3.1-70B" is llama3.1-70b) becomes
// its file. Throws InputError naming `option` and the close names for an unknown name.
std::string resolve_model_reference(const std::string& name, const std::string& option = "--model");
// A cluster name ("dgx-h100") or a path to a cluster file, as the scenario's "cluster" field.
std::string resolve_cluster_reference(const std::string& name, const std::string& option = "--cluster");

// The catalog file a scenario's `model` or `cluster` reference names when it is not a file
// ("llama3.1-8b" -> "models/llama3.1-8b.json", "dgx-h200" -> "scenarios/clusters/dgx-h200.json"),
// as --model and --cluster read names: `--set cluster=dgx-h200`, `--axis cluster=dgx-h100,dgx-h200`.
// nullopt when the catalog has no such name (or `key` has no catalog); `hint` then receives the
// close names, for the error.
std::optional<std::string> catalog_reference(const std::string& key, const std::string& name, std::string* hint = nullptr);

// "64xH100", "64", "16xdgx-a100": how many GPUs and, optionally, of what (the text after 'x').
struct GpuCountSpec {
  int count = 0;
  std::string what;  // "" when only a count was given
};
GpuCountSpec parse_gpu_count(const std::string& text, const std::string& option = "--gpus");

// The cluster file a GPU-kind name stands for. In order: a cluster of the catalog
// ("dgx-h100"); "dgx-" + the name ("H100" -> dgx-h100, the NVSwitch node the bare part name
// usually means); a GPU of scenarios/hardware/gpus.json (exactly, or the one name it starts
// ("MI300X" -> MI300X-192GB)), whose one-node catalog cluster with the most GPUs per node (then the
// shortest name) is taken. Throws InputError naming `option` and close names otherwise.
std::string cluster_for_gpu_kind(const std::string& what, const std::string& option = "--gpus");

// The one-line form of a scenario (`estimate --model ... --gpus ...`).
struct QuickScenario {
  std::string model;               // as the command line gave it
  std::string cluster;             // --cluster, may be ""
  std::string gpus;                // --gpus, may be ""
  std::vector<std::string> sets;   // the short options as overrides ("fsdp.strategy=HYBRID_SHARD"), applied first
};
struct QuickScenarioDocument {
  nlohmann::json document;          // {"name", "model", "cluster"}: references to catalog files
  std::vector<std::string> overrides;  // the cluster's shape (cluster.nodes=..), then QuickScenario::sets
  std::string cluster_file;         // the resolved cluster file
  int gpus = 0;                     // the world size
};
// The document is what a scenario file would hold; load it with parse_scenario(document,
// kCommandLineFile, overrides + the user's --set overrides). --gpus N on a cluster of G GPUs
// per node gives N / G nodes (N must be a multiple of G), or one node of N GPUs when N < G.
QuickScenarioDocument quick_scenario(const QuickScenario& q);
// The "file" that errors in a one-line scenario name.
extern const char* const kCommandLineFile;

}  // namespace fsdpsim::planner
