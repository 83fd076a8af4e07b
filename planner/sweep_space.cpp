#include "planner/sweep_space.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <filesystem>
#include <limits>
#include <set>

#include "models/hf_import.h"
#include "models/json_input.h"

namespace fsdpsim::planner {

namespace fs = std::filesystem;

namespace {

std::string trim(const std::string& s) {
  std::size_t a = 0, b = s.size();
  while (a < b && std::isspace(static_cast<unsigned char>(s[a]))) ++a;
  while (b > a && std::isspace(static_cast<unsigned char>(s[b - 1]))) --b;
  return s.substr(a, b - a);
}

bool starts_with(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// What an hf: model is imported for under the scenario's training.attention and training.liger
// (load_reference), as a line of a point's model key.
std::string import_key(const ModelImport& import) {
  std::string key;
  switch (import.attention) {
    case AttentionImport::eager: key = "imported for eager attention"; break;
    case AttentionImport::fused: key = "imported for fused attention"; break;
    case AttentionImport::as_configured: key = "imported as its config says"; break;
  }
  if (import.liger) key += *import.liger ? ", with Liger's kernels" : ", without Liger's kernels";
  return key + "\n";
}

// Splits on commas that are not inside brackets, braces or a quoted string.
std::vector<std::string> split_values(const std::string& text) {
  std::vector<std::string> out;
  std::string cur;
  int depth = 0;
  bool quoted = false, escaped = false;
  for (char c : text) {
    if (quoted) {
      cur += c;
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') quoted = false;
      continue;
    }
    if (c == '"') quoted = true;
    if (c == '[' || c == '{') ++depth;
    if (c == ']' || c == '}') --depth;
    if (c == ',' && depth == 0) {
      out.push_back(trim(cur));
      cur.clear();
      continue;
    }
    cur += c;
  }
  out.push_back(trim(cur));
  return out;
}


std::string label_of(const nlohmann::json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// "key=value" as --set reads it: a string that is not JSON itself is written bare.
std::string assignment(const std::string& key, const nlohmann::json& value) {
  if (value.is_string()) {
    const std::string s = value.get<std::string>();
    if (!nlohmann::json::accept(s) && !s.empty() && s == trim(s)) return key + "=" + s;
  }
  return key + "=" + value.dump();
}

std::vector<int> proper_divisors(int world) {
  std::vector<int> out;
  for (int d = 2; d < world; ++d)
    if (world % d == 0) out.push_back(d);
  return out;
}

bool is_hybrid_name(const std::string& s) { return s == "HYBRID_SHARD" || s == "HYBRID_SHARD_ZERO2"; }

// "N" or "*"/"all" -> group sizes.
std::vector<int> group_sizes(const std::string& text, const AxisContext& ctx, const AxisSpec& spec,
                             const std::string& path) {
  if (text == "*" || text == "all") {
    std::vector<int> d = proper_divisors(ctx.world_size);
    std::erase_if(d, [&](int g) { return !shard_group_spreads_evenly(g, ctx.world_size, ctx.gpus_per_node); });
    if (d.empty())
      throw InputError(spec.file, path, "no shard group size divides the world of " + std::to_string(ctx.world_size) +
                                            " ranks other than 1 and the world itself and lies evenly on its nodes of " +
                                            std::to_string(ctx.gpus_per_node) + " GPUs");
    return d;
  }
  char* end = nullptr;
  long v = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || v <= 0 || v > (1 << 20))
    throw InputError(spec.file, path, "expected a shard group size (a positive integer) or *, got \"" + text + "\"");
  return {static_cast<int>(v)};
}

std::int64_t positive_int_value(const nlohmann::json& v, const AxisSpec& spec, const std::string& path,
                                const std::string& what) {
  if (v.is_number_integer() && v.get<std::int64_t>() > 0) return v.get<std::int64_t>();
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d > 0 && d < 9e18 && std::floor(d) == d) return static_cast<std::int64_t>(d);
  }
  if (v.is_string())
    if (const auto n = positive_integer_text(v.get<std::string>())) return *n;
  throw InputError(spec.file, path, "expected " + what + " (a positive integer), got " + describe_json(v));
}

}  // namespace

std::string reason_without_file(const std::exception& e) {
  std::string what = e.what();
  if (const auto* ie = dynamic_cast<const InputError*>(&e)) {
    const std::string prefix = (ie->file().empty() ? std::string("<input>") : ie->file()) + ": ";
    if (starts_with(what, prefix)) return what.substr(prefix.size());
  }
  return what;
}

AxisSpec parse_axis_spec(const std::string& text) {
  AxisSpec spec;
  spec.path = "--axis";
  const auto eq = text.find('=');
  if (eq == std::string::npos || eq == 0)
    throw InputError::option("--axis", "expected key=value1,value2,... (for example fsdp.strategy=FULL_SHARD,SHARD_GRAD_OP), got \"" +
                                       text + "\"");
  spec.key = trim(text.substr(0, eq));
  spec.path = "--axis " + spec.key;
  for (const std::string& piece : split_values(text.substr(eq + 1))) {
    if (piece.empty()) throw InputError::option(spec.path, "has an empty value in \"" + text + "\"");
    spec.values.push_back(parse_json_or_word(piece, "", join_json_path(spec.path, spec.values.size())));
  }
  return spec;
}

Axis expand_axis(const AxisSpec& spec, const AxisContext& ctx) {
  Axis axis;
  axis.key = spec.key;
  if (spec.key.empty() || spec.key.front() == '.' || spec.key.back() == '.')
    throw InputError(spec.file, spec.path, "expected a scenario field such as fsdp.strategy, got \"" + spec.key + "\"");
  if (spec.values.empty()) throw InputError(spec.file, spec.path, "needs at least one value");
  std::set<std::vector<std::string>> seen;
  auto add = [&](AxisValue v) {
    if (seen.insert(v.overrides).second) axis.values.push_back(std::move(v));
  };
  for (std::size_t i = 0; i < spec.values.size(); ++i) {
    const nlohmann::json& v = spec.values[i];
    const std::string path = spec.file.empty() ? spec.path : join_json_path(spec.path, i);
    if (spec.key == "fsdp.strategy") {
      if (!v.is_string()) throw InputError(spec.file, path, "expected a strategy name, got " + describe_json(v));
      const std::string s = v.get<std::string>();
      const auto colon = s.find(':');
      if (colon == std::string::npos) {
        add({s, {assignment("fsdp.strategy", s), "fsdp.shard_group_size=null", "fsdp.reshard_after_forward=null"}});
        continue;
      }
      const std::string name = s.substr(0, colon);
      if (!is_hybrid_name(name))
        throw InputError(spec.file, path, "only HYBRID_SHARD and HYBRID_SHARD_ZERO2 take a shard group size (\"" + s +
                                              "\")");
      for (int g : group_sizes(s.substr(colon + 1), ctx, spec, path))
        add({name + ":" + std::to_string(g),
             {assignment("fsdp.strategy", name), "fsdp.shard_group_size=" + std::to_string(g),
              "fsdp.reshard_after_forward=null"}});
    } else if (spec.key == "fsdp.shard_group_size") {
      if (v.is_string() && (v == "*" || v == "all")) {
        for (int g : group_sizes(v.get<std::string>(), ctx, spec, path))
          add({std::to_string(g), {"fsdp.shard_group_size=" + std::to_string(g)}});
      } else if (v.is_null()) {
        add({"default", {"fsdp.shard_group_size=null"}});
      } else {
        const std::int64_t g = positive_int_value(v, spec, path, "a shard group size");
        add({std::to_string(g), {"fsdp.shard_group_size=" + std::to_string(g)}});
      }
    } else if (spec.key == "fsdp.wrap") {
      nlohmann::json w = wrap_object(v, spec.file, path);
      add({v.is_string() ? v.get<std::string>() : w.dump(), {assignment("fsdp.wrap", w)}});
    } else if (spec.key == "training.micro_batch") {
      // A stated global batch stays; gradient accumulation follows (parse_scenario checks that
      // it divides). A derived one follows the micro-batch at the base's accumulation: the
      // one-line form states none, and its sweep skipped every larger micro-batch (the global
      // batch of one micro-step at micro-batch 1 does not divide by 2 x the ranks; session 34).
      const std::int64_t mb = positive_int_value(v, spec, path, "a micro-batch");
      if (ctx.global_batch_stated)
        add({std::to_string(mb),
             {"training.micro_batch=" + std::to_string(mb), "training.global_batch=" + std::to_string(ctx.global_batch),
              "training.grad_accum=null"}});
      else
        add({std::to_string(mb),
             {"training.micro_batch=" + std::to_string(mb), "training.global_batch=null",
              "training.grad_accum=" + std::to_string(ctx.grad_accum)}});
    } else if (spec.key == "training.activation_checkpointing") {
      nlohmann::json ac = v;
      if (v.is_string() && starts_with(v.get<std::string>(), "every:"))
        ac = positive_int_value(v.get<std::string>().substr(6), spec, path, "blocks per checkpoint");
      add({label_of(v), {assignment(spec.key, ac)}});
    } else {
      add({label_of(v), {assignment(spec.key, v)}});
    }
  }
  return axis;
}

std::size_t SweepSpace::size() const {
  std::size_t n = 1;
  for (const Axis& a : axes) {
    if (a.values.empty()) return 0;
    if (n > std::numeric_limits<std::size_t>::max() / a.values.size()) return std::numeric_limits<std::size_t>::max();
    n *= a.values.size();
  }
  return n;
}

std::vector<int> SweepSpace::choice(std::size_t index) const {
  std::vector<int> c(axes.size(), 0);
  for (std::size_t k = axes.size(); k-- > 0;) {
    const std::size_t n = axes[k].values.size();
    c[k] = static_cast<int>(index % n);
    index /= n;
  }
  return c;
}

std::vector<std::string> SweepSpace::overrides(const std::vector<int>& choice) const {
  std::vector<std::string> out;
  for (std::size_t k = 0; k < axes.size(); ++k)
    for (const std::string& o : axes[k].values[choice[k]].overrides) out.push_back(o);
  return out;
}

std::string SweepSpace::label(const std::vector<int>& choice) const {
  std::string out;
  for (std::size_t k = 0; k < axes.size(); ++k) {
    if (!out.empty()) out += " ";
    out += axes[k].key + "=" + axes[k].values[choice[k]].label;
  }
  return out;
}

SweepSpace make_space(const std::vector<AxisSpec>& specs, const AxisContext& context) {
  SweepSpace space;
  std::set<std::string> keys;
  for (const AxisSpec& s : specs) {
    if (!keys.insert(s.key).second)
      throw InputError(s.file, s.path, "the axis " + s.key + " is given twice; list all its values in one axis");
    // A value twice would evaluate the same points twice and rank them side by side.
    for (std::size_t i = 0; i < s.values.size(); ++i)
      for (std::size_t j = 0; j < i; ++j)
        if (s.values[i] == s.values[j])
          throw InputError(s.file, s.path, "the axis " + s.key + " lists " + s.values[i].dump() + " twice");
    space.axes.push_back(expand_axis(s, context));
  }
  // A strategy value resets the shard group and reshard_after_forward to the strategy's
  // defaults, unless they are axes of their own (then those decide).
  for (const char* field : {"fsdp.shard_group_size", "fsdp.reshard_after_forward"}) {
    if (!keys.count(field) || !keys.count("fsdp.strategy")) continue;
    const std::string reset = std::string(field) + "=null";
    for (Axis& a : space.axes)
      if (a.key == "fsdp.strategy")
        for (AxisValue& v : a.values)
          v.overrides.erase(std::remove(v.overrides.begin(), v.overrides.end(), reset), v.overrides.end());
  }
  return space;
}

SweepFile parse_sweep_file(const nlohmann::json& json, const std::string& file) {
  SweepFile f;
  f.file = file;
  JsonReader r(json, file);
  r.ignore("description");
  r.ignore("name");
  if (r.has("scenario") && r.raw("scenario").is_object()) {
    f.scenario_inline = r.raw("scenario");
  } else if (auto s = r.string_or("scenario")) {
    f.scenario = resolve_path(*s, fs::path(file).parent_path().string());
  }
  if (r.has("set")) {
    const auto& list = r.array("set");
    for (std::size_t i = 0; i < list.size(); ++i) {
      if (!list[i].is_string() || list[i].get<std::string>().find('=') == std::string::npos)
        throw InputError(file, join_json_path("set", i), "expected an override string \"a.b=value\"");
      f.overrides.push_back(list[i].get<std::string>());
    }
  } else {
    r.ignore("set");
  }
  if (r.has("axes")) {
    const nlohmann::json& axes = r.raw("axes");
    auto values_of = [&](const nlohmann::json& v, const std::string& path) {
      std::vector<nlohmann::json> out;
      if (v.is_array()) {
        for (const auto& x : v) out.push_back(x);
        if (out.empty()) throw InputError(file, path, "needs at least one value");
      } else {
        out.push_back(v);  // a single value: a fixed setting
      }
      return out;
    };
    if (axes.is_object()) {
      for (const auto& [key, v] : axes.items()) {
        if (starts_with(key, "_") || starts_with(key, "//")) continue;
        const std::string path = join_json_path("axes", key);
        f.axes.push_back({key, values_of(v, path), file, path});
      }
    } else if (axes.is_array()) {
      for (std::size_t i = 0; i < axes.size(); ++i) {
        const std::string path = join_json_path("axes", i);
        if (!axes[i].is_object()) throw InputError(file, path, "expected {\"key\": ..., \"values\": [...]}");
        JsonReader a(axes[i], file, path);
        AxisSpec spec{a.string("key"), {}, file, path + ".values"};
        spec.values = values_of(a.raw("values"), spec.path);
        a.finish();
        f.axes.push_back(std::move(spec));
      }
    } else {
      r.fail("axes", "expected an object of key -> values, or a list of {\"key\", \"values\"}");
    }
  } else {
    r.ignore("axes");
  }
  if (r.has("headroom_gib")) {
    f.headroom_gib = r.number("headroom_gib");
    if (!(*f.headroom_gib >= 0) || *f.headroom_gib > kMaxHeadroomGiB)
      r.fail("headroom_gib", "expected a number of GiB from 0 to 1048576 (a pebibyte)");
  } else {
    r.ignore("headroom_gib");
  }
  if (r.has("objective")) f.objective = r.choice("objective", {"throughput", "step_time", "memory"});
  else r.ignore("objective");
  if (r.has("top")) f.top = r.int_in("top", 1, 1000000);
  else r.ignore("top");
  if (r.has("tolerance")) {
    f.tolerance = r.number("tolerance");
    if (!(*f.tolerance >= 0 && *f.tolerance < 1)) r.fail("tolerance", "expected a fraction in [0, 1)");
  } else {
    r.ignore("tolerance");
  }
  r.finish();
  return f;
}

SweepFile load_sweep_file(const std::string& path) { return parse_sweep_file(load_json_file(path), path); }

// ---- the base scenario, once ---------------------------------------------------------------

namespace {

const nlohmann::json& stub_model() {
  static const nlohmann::json stub = {
      {"name", "stub"}, {"root", {{"type", "SweepStub"}, {"params", {{{"name", "w"}, {"shape", {1}}}}}}}};
  return stub;
}

}  // namespace

std::shared_ptr<const ScenarioTemplate> ScenarioTemplate::load(const std::string& path,
                                                               const std::vector<std::string>& overrides) {
  return from_json(load_json_file(path), path, overrides);
}

std::shared_ptr<const ScenarioTemplate> ScenarioTemplate::from_json(const nlohmann::json& json, const std::string& file,
                                                                    const std::vector<std::string>& overrides) {
  ScenarioDocuments documents;
  // Validates everything the way estimate does.
  auto base = std::make_shared<const Scenario>(parse_scenario(json, file, overrides, &documents));
  return from_parsed(std::move(base), std::move(documents), file, overrides);
}

std::shared_ptr<const ScenarioTemplate> ScenarioTemplate::from_parsed(std::shared_ptr<const Scenario> base,
                                                                      ScenarioDocuments documents, const std::string& file,
                                                                      const std::vector<std::string>& overrides) {
  std::shared_ptr<ScenarioTemplate> t(new ScenarioTemplate());
  t->init(std::move(base), std::move(documents), file, overrides);
  return t;
}

void ScenarioTemplate::init(std::shared_ptr<const Scenario> base, ScenarioDocuments documents, const std::string& file,
                            const std::vector<std::string>& overrides) {
  file_ = file;
  base_overrides_ = overrides;
  base_ = std::move(base);
  // The references as parse_scenario resolved them (whole-reference overrides first), with the
  // overrides inside them applied; the scenario document with the others.
  model_json_ = std::move(documents.model.json);
  model_file_ = std::move(documents.model.file);
  model_hf_ = documents.model.hf;
  base_import_ = model_import_for(base_->training);
  cluster_ = std::move(documents.cluster.json);
  if (documents.calibration_file != file) calibration_file_ = std::move(documents.calibration_file);
  document_ = std::move(documents.document);
  if (!documents.calibration.is_null()) document_["calibration"] = std::move(documents.calibration);
  std::string gpu_file;
  gpu_catalog_ = &gpu_catalog(gpu_file);
  nlohmann::json inline_cluster = cluster_;
  if (inline_cluster.contains("gpu") && inline_cluster["gpu"].is_string()) {
    const std::string name = inline_cluster["gpu"].get<std::string>();
    if (gpu_catalog_->contains(name)) {
      nlohmann::json gpu = (*gpu_catalog_)[name];
      if (!gpu.contains("name")) gpu["name"] = name;
      inline_cluster["gpu"] = gpu;
    }
  }
  document_["cluster"] = inline_cluster;
  document_["model"] = stub_model();
  models_[""] = base_->model;  // the base's own
}

AxisContext ScenarioTemplate::context() const {
  return {base_->world_size(), base_->training.global_batch, base_->cluster.gpus_per_node,
          base_->training.global_batch_stated, base_->training.grad_accum};
}

bool SweepSpace::gpu_varies() const {
  return std::any_of(axes.begin(), axes.end(),
                     [](const Axis& a) { return a.key == "cluster" || starts_with(a.key, "cluster.gpu"); });
}

Scenario ScenarioTemplate::parse_point(const std::vector<std::string>& overrides, std::string& model_key,
                                       std::vector<std::string>& model_overrides) const {
  std::vector<std::string> rest, cluster_overrides;
  model_key.clear();
  model_overrides.clear();
  // A point that replaces the cluster leaves all its cluster overrides to parse_scenario,
  // which applies the replacement first.
  const bool new_cluster = std::any_of(overrides.begin(), overrides.end(),
                                       [](const std::string& o) { return starts_with(o, "cluster="); });
  // [Replaced references keep the base's overrides] A point that replaces the cluster or the
  // calibration gets the base's overrides inside it again, before its own, as `estimate` applies
  // `--set cluster.nodes=8 --set cluster=other.json` (the replacement first, then every
  // cluster.* override): --gpus 64xH100 with a cluster axis stays 64 GPUs (it was the cluster
  // file's one node). The model's are applied in model_for.
  for (const char* reference : {"cluster", "calibration"}) {
    const std::string replaced = std::string(reference) + "=", inside = std::string(reference) + ".";
    if (std::none_of(overrides.begin(), overrides.end(), [&](const std::string& o) { return starts_with(o, replaced); }))
      continue;
    for (const std::string& o : base_overrides_)
      if (starts_with(o, inside)) rest.push_back(o);
  }
  for (const std::string& o : overrides) {
    if (starts_with(o, "model.") || starts_with(o, "model=")) {
      model_overrides.push_back(o);
      model_key += o + "\n";
    } else if (starts_with(o, "cluster.") && !new_cluster) {
      cluster_overrides.push_back(o.substr(8));
    } else {
      rest.push_back(o);
    }
  }
  Scenario s;
  if (cluster_overrides.empty()) {
    s = parse_scenario(document_, file_, rest);
  } else {
    nlohmann::json doc = document_;
    nlohmann::json cluster = cluster_;
    for (const std::string& o : cluster_overrides) apply_override(cluster, o, file_);
    if (cluster.contains("gpu") && cluster["gpu"].is_string()) {
      const std::string name = cluster["gpu"].get<std::string>();
      if (gpu_catalog_->contains(name)) {
        nlohmann::json gpu = (*gpu_catalog_)[name];
        if (!gpu.contains("name")) gpu["name"] = name;
        cluster["gpu"] = gpu;
      }
    }
    doc["cluster"] = std::move(cluster);
    s = parse_scenario(doc, file_, rest);
  }
  // A replaced cluster of other GPUs per node with the base's node count (re-applied above) is not
  // the base's GPU count: the point must say its nodes (--gpus 64xH100 --axis cluster=... gave a
  // 4-GPU node's cluster 8 x 4 = 32 GPUs).
  if (new_cluster && s.cluster.gpus_per_node != base_->cluster.gpus_per_node &&
      std::none_of(overrides.begin(), overrides.end(), [](const std::string& o) { return starts_with(o, "cluster.nodes="); }) &&
      std::any_of(base_overrides_.begin(), base_overrides_.end(), [](const std::string& o) { return starts_with(o, "cluster.nodes="); }))
    throw InputError(file_, "cluster",
                     "the point's cluster has " + std::to_string(s.cluster.gpus_per_node) + " GPUs per node where the base has " +
                         std::to_string(base_->cluster.gpus_per_node) + ": the base's " + std::to_string(s.cluster.nodes) +
                         " nodes make " + std::to_string(s.world_size()) + " GPUs, not its " +
                         std::to_string(base_->world_size()) + "; give cluster.nodes in the point");
  const bool new_calibration = std::any_of(overrides.begin(), overrides.end(),
                                           [](const std::string& o) { return starts_with(o, "calibration="); });
  if (!calibration_file_.empty() && !new_calibration) s.calibration_file = calibration_file_;
  // An hf: model is imported for the point's attention (load_reference): a point whose
  // training.attention asks for another import than the base's, or that replaces the model
  // under an attention that decides its import, has a model of its own.
  const ModelImport import = model_import_for(s.training);
  if (import != base_import_ || (import != ModelImport{} && !model_key.empty()))
    model_key += import_key(import);
  return s;
}

models::SharedModel ScenarioTemplate::model_for(const std::string& key,
                                                const std::vector<std::string>& model_overrides,
                                                const ModelImport& import) const {
  {
    std::lock_guard<std::mutex> lock(models_mutex_);
    auto it = models_.find(key);
    if (it != models_.end()) return it->second;
  }
  // As parse_scenario: a model= replacement first, then the model.* overrides inside it.
  nlohmann::json json = model_json_;
  std::string file = model_file_;
  if (model_hf_ && import != base_import_) {
    // The base's hf: config imported again for this attention, the base's model.* overrides on it.
    json = load_reference(nlohmann::json("hf:" + model_file_), file_, "model", import).json;
    for (const std::string& o : base_overrides_)
      if (starts_with(o, "model.")) apply_model_override(json, o.substr(6), file);
  }
  bool replaced_model = false;
  for (const std::string& o : model_overrides) {
    if (!starts_with(o, "model=")) continue;
    nlohmann::json holder = nlohmann::json::object();
    apply_override(holder, o, file_);
    Reference replaced = load_reference(holder["model"], file_, "model", import);
    json = std::move(replaced.json);
    file = replaced.file;
    replaced_model = true;
  }
  // [Replaced references keep the base's overrides] (parse_point): the base's model.* again.
  if (replaced_model)
    for (const std::string& o : base_overrides_)
      if (starts_with(o, "model.")) apply_model_override(json, o.substr(6), file);
  for (const std::string& o : model_overrides)
    if (starts_with(o, "model.")) apply_model_override(json, o.substr(6), file);
  models::SharedModel parsed = models::parse_model(json, file);
  std::lock_guard<std::mutex> lock(models_mutex_);
  return models_.emplace(key, std::move(parsed)).first->second;  // another thread's, if it came first
}

Scenario ScenarioTemplate::instantiate(const std::vector<std::string>& overrides) const {
  std::string key;
  std::vector<std::string> model_overrides;
  Scenario s = parse_point(overrides, key, model_overrides);
  s.model = model_for(key, model_overrides, model_import_for(s.training));
  return s;
}

}  // namespace fsdpsim::planner
