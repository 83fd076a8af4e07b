// The configuration space of `fsdpsim sweep`: axes of scenario overrides, their product,
// and the base scenario loaded once so that a point costs no file reads.
//
// A point is a list of `--set` assignments (the same mechanism as `estimate --set`):
// planner::parse_scenario() applies them and checks the result, so an invalid
// combination (a micro-batch that does not divide the global batch, a shard group that
// does not divide the world) surfaces as the InputError that `estimate` would print,
// which the sweep reports as "skipped" with that reason.
//
// Axes (docs/sweep.md): any scenario field, with shorthands for the common ones:
//   fsdp.strategy                 FULL_SHARD, SHARD_GRAD_OP, ..., HYBRID_SHARD:8 (strategy and
//                                 shard group), HYBRID_SHARD:* (every shard group size that
//                                 divides the world, 1 < size < world); a strategy resets
//                                 shard_group_size and reshard_after_forward to its defaults
//                                 unless those are axes too
//   fsdp.shard_group_size         integers, or * (as above)
//   fsdp.wrap                     block, root, every:K, size:N, or a wrap JSON object
//   training.micro_batch          integers; the global batch is kept (gradient accumulation follows)
//   training.activation_checkpointing  none, full, K or every:K (every K-th block)
//   anything else                 JSON values (true, 2, "BACKWARD_PRE") or bare words
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "planner/scenario.h"

namespace fsdpsim::planner {

// One value of an axis: how reports name it and the `--set` assignments it stands for.
struct AxisValue {
  std::string label;                   // "FULL_SHARD", "HYBRID_SHARD:8", "every:2", "4"
  std::vector<std::string> overrides;  // "fsdp.strategy=HYBRID_SHARD", "fsdp.shard_group_size=8"
};

struct Axis {
  std::string key;  // the scenario field, as --set writes it ("fsdp.strategy")
  std::vector<AxisValue> values;
};

// An axis as written (command line or sweep file), before shorthands are expanded.
struct AxisSpec {
  std::string key;
  std::vector<nlohmann::json> values;
  std::string file;  // where it was written, for errors ("" for the command line)
  std::string path;  // JSON path in that file ("--axis" for the command line)
};

// What expanding shorthands needs to know about the base scenario.
struct AxisContext {
  int world_size = 1;
  std::int64_t global_batch = 0;
  int gpus_per_node = 0;  // "*" shard groups: only those that lie evenly on the nodes
  // A micro-batch axis keeps the global batch where the base states one (gradient accumulation
  // follows); where it was derived (grad_accum micro-steps of micro_batch x ranks), it keeps
  // grad_accum and the global batch follows, as `estimate --micro-batch` does.
  bool global_batch_stated = true;
  std::int64_t grad_accum = 1;
};

// "key=v1,v2,...": commas inside brackets, braces or quotes do not split; each value is
// taken as JSON when it parses as JSON, else as a string. Throws InputError.
AxisSpec parse_axis_spec(const std::string& text);
// Shorthands expanded, duplicates (same overrides) dropped. Throws InputError naming the
// axis' file and path.
Axis expand_axis(const AxisSpec& spec, const AxisContext& context);

struct SweepSpace {
  std::vector<Axis> axes;

  // Points: the product of the axes (1 with no axes).
  std::size_t size() const;
  // The value index on each axis of point `index` (mixed radix, the last axis fastest).
  std::vector<int> choice(std::size_t index) const;
  std::vector<std::string> overrides(const std::vector<int>& choice) const;
  // "fsdp.strategy=FULL_SHARD training.micro_batch=2"
  std::string label(const std::vector<int>& choice) const;
  // Whether the points' GPUs may differ (a `cluster` or `cluster.gpu...` axis): each point is
  // then judged by its own GPU's memory, and reports say so.
  bool gpu_varies() const;
};

// Expands every axis; two axes on the same key are an error.
SweepSpace make_space(const std::vector<AxisSpec>& specs, const AxisContext& context);

// A sweep file (docs/sweep.md):
// {"scenario": "../llama3.1-8b-8xh100.json" (or an inline scenario object), "set": ["cluster.nodes=8"],
//  "axes": {"fsdp.strategy": ["FULL_SHARD", "HYBRID_SHARD:*"], "training.micro_batch": [1, 2, 4]},
//  "headroom_gib": 4, "objective": "throughput", "top": 10}
// "axes" may also be a list of {"key": ..., "values": [...]} (keeps the written order; an
// object's keys are taken in alphabetical order).
struct SweepFile {
  std::string file;
  std::string scenario;                 // resolved path, "" when absent or inline
  nlohmann::json scenario_inline;       // "scenario" given as an object (null otherwise); its
                                        // references resolve beside the sweep file
  std::vector<std::string> overrides;   // "set": apply to every point
  std::vector<AxisSpec> axes;
  std::optional<double> headroom_gib;
  std::optional<std::string> objective;
  std::optional<int> top;
  std::optional<double> tolerance;
};
SweepFile parse_sweep_file(const nlohmann::json& json, const std::string& file);
SweepFile load_sweep_file(const std::string& path);

// The base scenario, read once. Points are instantiated from it in memory: the cluster,
// GPU and calibration references are inlined, and the model is parsed once (once per
// distinct set of `model.*` overrides) and shared by the points.
class ScenarioTemplate {
 public:
  // Loads `path` and everything it references, applying `overrides` (the base `--set`s).
  // Throws InputError as load_scenario does.
  static std::shared_ptr<const ScenarioTemplate> load(const std::string& path,
                                                      const std::vector<std::string>& overrides);
  static std::shared_ptr<const ScenarioTemplate> from_json(const nlohmann::json& json, const std::string& file,
                                                           const std::vector<std::string>& overrides);
  // From a scenario already parsed (parse_scenario(json, file, overrides, &documents)), without
  // parsing it again: `estimate` estimates `base` and advises from this template.
  static std::shared_ptr<const ScenarioTemplate> from_parsed(std::shared_ptr<const Scenario> base,
                                                             ScenarioDocuments documents, const std::string& file,
                                                             const std::vector<std::string>& overrides);

  const Scenario& base() const { return *base_; }  // the base scenario, fully parsed
  const std::string& file() const { return file_; }
  const std::vector<std::string>& base_overrides() const { return base_overrides_; }
  AxisContext context() const;

  // The base's documents as read, the base overrides applied (scenario with its calibration,
  // cluster, model), as text: what tells two sweeps of one file apart when the file, or one it
  // references, changed between them (a distributed sweep's shard fingerprint).
  std::string documents_text() const { return document_.dump() + "\n" + cluster_.dump() + "\n" + model_json_.dump(); }

  // The base scenario with `overrides` applied, as parse_scenario(file, base + overrides)
  // would give it. Every scenario with the same model= and model.* overrides shares one
  // parsed model (models::SharedModel): a sweep's points parse their model once.
  Scenario instantiate(const std::vector<std::string>& overrides) const;

 private:
  ScenarioTemplate() = default;
  void init(std::shared_ptr<const Scenario> base, ScenarioDocuments documents, const std::string& file,
            const std::vector<std::string>& overrides);
  // Parses a point with a stub model; `model_key` receives its model= and model.* overrides, and
  // the attention an hf: model must be imported for where it is not the base's.
  Scenario parse_point(const std::vector<std::string>& overrides, std::string& model_key,
                       std::vector<std::string>& model_overrides) const;
  // `import`: what the point's training.attention imports an hf: model for.
  models::SharedModel model_for(const std::string& key, const std::vector<std::string>& model_overrides,
                                const ModelImport& import) const;

  std::string file_;
  std::vector<std::string> base_overrides_;
  std::shared_ptr<const Scenario> base_;
  nlohmann::json document_;    // scenario JSON: base overrides applied, stub model, inline cluster and calibration
  nlohmann::json cluster_;     // the cluster JSON, base overrides applied
  nlohmann::json model_json_;  // the model JSON, base model.* overrides applied
  std::string model_file_;
  bool model_hf_ = false;           // the base model is an hf: import ...
  ModelImport base_import_;  // ... for the base's training.attention and training.liger
  std::string calibration_file_;
  const nlohmann::json* gpu_catalog_ = nullptr;  // scenarios/hardware/gpus.json (gpu_catalog()), for cluster.gpu overrides
  mutable std::mutex models_mutex_;
  mutable std::map<std::string, models::SharedModel> models_;  // model.* overrides -> model
};

// "file: path: expected" -> "path: expected" (a sweep's skip reasons name the base file once).
std::string reason_without_file(const std::exception& e);

}  // namespace fsdpsim::planner
