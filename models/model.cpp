#include "models/model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <initializer_list>
#include <map>
#include <optional>
#include <set>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <utility>

#include "models/checked_arithmetic.h"
#include "models/json_input.h"

namespace fsdpsim::models {

double attention_pair_fraction(const AttentionSpec& attention, double seq_len) {
  const double s = seq_len, w = attention.window;
  if (!(s > 0)) return attention.causal ? 0.5 : 1.0;
  if (!(w > 0) || w >= s) return attention.causal ? 0.5 : 1.0;
  const double pairs = attention.causal ? w * s - w * w / 2 : 2 * w * s - w * w;
  return pairs / (s * s);
}

double attention_window_share(const AttentionSpec& attention, double seq_len) {
  AttentionSpec full = attention;
  full.window = 0;
  return attention_pair_fraction(attention, seq_len) / attention_pair_fraction(full, seq_len);
}

bool has_unequal_attention_head_dims(const Module& root) {
  bool unequal = false;
  for_each_module(root, [&](const Module& m) {
    if (m.costs && m.costs->attention) unequal = unequal || m.costs->attention->value_head_dim() != m.costs->attention->head_dim;
  });
  return unequal;
}

int dtype_bytes(DType dtype) {
  switch (dtype) {
    case DType::fp32: return 4;
    case DType::bf16: return 2;
    case DType::fp16: return 2;
    case DType::fp8: return 1;
  }
  return 4;
}

std::string dtype_name(DType dtype) {
  switch (dtype) {
    case DType::fp32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::fp8: return "fp8";
  }
  return "fp32";
}

std::optional<DType> parse_dtype(const std::string& name) {
  if (name == "fp32" || name == "float32") return DType::fp32;
  if (name == "bf16" || name == "bfloat16") return DType::bf16;
  if (name == "fp16" || name == "float16") return DType::fp16;
  if (name == "fp8") return DType::fp8;
  return std::nullopt;
}

std::string loss_kind_name(LossKind kind) {
  switch (kind) {
    case LossKind::fp32_upcast: return "fp32_upcast";
    case LossKind::bf16: return "bf16";
    case LossKind::fused: return "fused";
    case LossKind::chunked: return "chunked";
    case LossKind::cut: return "cut";
    case LossKind::chunked_output: return "chunked_output";
  }
  return "fp32_upcast";
}

std::vector<std::string> loss_kind_names() { return {"fp32_upcast", "bf16", "fused", "chunked", "cut", "chunked_output"}; }

std::optional<LossKind> parse_loss_kind(const std::string& name) {
  for (LossKind kind : {LossKind::fp32_upcast, LossKind::bf16, LossKind::fused, LossKind::chunked, LossKind::cut,
                        LossKind::chunked_output})
    if (name == loss_kind_name(kind)) return kind;
  return std::nullopt;
}

namespace {
// x^n by repeated multiplication: std::pow(double, int) goes through the general double
// pow, and the planner evaluates these polynomials thousands of times per sweep point.
// Exact whenever x^n is an integer below 2^53 (batch and sequence sizes), as pow is.
double int_pow(double x, int n) {
  if (n < 0) return 1.0 / int_pow(x, -n);
  double r = 1;
  for (; n > 0; --n) r *= x;
  return r;
}
}  // namespace

double Polynomial::at(double micro_batch, double seq_len) const {
  double sum = 0;
  for (const Term& t : terms) sum += t.coeff * int_pow(micro_batch, t.b_pow) * int_pow(seq_len, t.s_pow);
  return sum;
}

Polynomial& Polynomial::operator+=(const Polynomial& other) {
  for (const Term& t : other.terms) {
    bool merged = false;
    for (Term& mine : terms) {
      if (mine.b_pow == t.b_pow && mine.s_pow == t.s_pow) {
        mine.coeff += t.coeff;
        merged = true;
        break;
      }
    }
    if (!merged) terms.push_back(t);
  }
  return *this;
}

std::string Polynomial::monomial_name(int b_pow, int s_pow) {
  auto factor = [](const char* var, int pow) -> std::string {
    if (pow == 0) return "";
    return pow == 1 ? var : std::string(var) + "^" + std::to_string(pow);
  };
  std::string b = factor("b", b_pow), s = factor("s", s_pow);
  if (b.empty() && s.empty()) return "1";
  if (b.empty()) return s;
  if (s.empty()) return b;
  return b + "*" + s;
}

std::int64_t Parameter::numel() const {
  std::int64_t n = 1;
  for (std::int64_t d : shape) n = checked_mul(n, d, "a parameter's elements");
  return n;
}

namespace {

// "b*s^2" -> (1, 2); nullopt when the key is not a monomial in b and s.
std::optional<std::pair<int, int>> parse_monomial(const std::string& key) {
  if (key == "1") return std::make_pair(0, 0);
  int b = 0, s = 0;
  std::size_t pos = 0;
  while (pos < key.size()) {
    std::size_t end = key.find('*', pos);
    std::string factor = key.substr(pos, end == std::string::npos ? std::string::npos : end - pos);
    pos = end == std::string::npos ? key.size() : end + 1;
    if (factor.empty()) return std::nullopt;
    char var = factor[0];
    int pow = 1;
    if (factor.size() > 1) {
      if (factor[1] != '^' || factor.size() < 3) return std::nullopt;
      for (std::size_t i = 2; i < factor.size(); ++i)
        if (!std::isdigit(static_cast<unsigned char>(factor[i]))) return std::nullopt;
      if (factor.size() > 4) return std::nullopt;
      pow = std::stoi(factor.substr(2));
    }
    if (var == 'b') b += pow;
    else if (var == 's') s += pow;
    else return std::nullopt;
  }
  return std::make_pair(b, s);
}

Polynomial parse_polynomial(JsonReader& costs, const std::string& key) {
  Polynomial p;
  if (!costs.has(key)) {
    costs.ignore(key);
    return p;
  }
  JsonReader terms = costs.object(key);
  for (const auto& [name, value] : costs.raw(key).items()) {
    auto mono = parse_monomial(name);
    if (!mono)
      throw InputError(costs.file(), costs.path_of(key) + "." + name,
                       "expected a monomial in b (micro-batch) and s (sequence length) such as "
                       "\"b*s\" or \"b*s^2\"");
    double coeff = terms.number(name);
    if (coeff < 0) terms.fail(name, "expected a non-negative coefficient");
    p.terms.push_back({coeff, mono->first, mono->second});
  }
  return p;
}

// The coefficient of b^b_pow * s^s_pow (terms summed; 0 when absent).
double coefficient(const Polynomial& p, int b_pow, int s_pow) {
  double sum = 0;
  for (const Polynomial::Term& t : p.terms)
    if (t.b_pow == b_pow && t.s_pow == s_pow) sum += t.coeff;
  return sum;
}

// A count for a message: integers as integers (14155776), anything past 2^53 as 1.0e+308 (a
// cast to long long of 1e308 is undefined and printed -9223372036854775808).
std::string number_text(double x) {
  char buf[32];
  if (std::fabs(x) < 9007199254740992.0 && x == std::floor(x)) std::snprintf(buf, sizeof buf, "%.0f", x);
  else std::snprintf(buf, sizeof buf, "%.6g", x);
  return buf;
}

// Two counts of the same FLOPs agree when they differ by rounding only.
bool same_count(double a, double b) { return std::fabs(a - b) <= 1e-9 * std::max(std::fabs(a), std::fabs(b)) + 0.5; }

// "matmuls": [{"name": ..., "in": features, "out": features, "sac_recomputed": bool}], whose
// 2 x in x out per token must add up to forward_flops' b*s term: the shapes and the FLOPs
// describe the same work, and a file where they disagree would be priced one way and
// counted (MFU) another.
std::vector<Matmul> parse_matmuls(JsonReader& costs, const Polynomial& forward_flops,
                                  const std::optional<MoeSpec>& moe) {
  const nlohmann::json& list = costs.array("matmuls");
  std::vector<Matmul> out;
  double flops_per_token = 0;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string path = join_json_path(costs.path_of("matmuls"), i);
    if (!list[i].is_object()) throw InputError(costs.file(), path, "expected a matmul object, got " + describe_json(list[i]));
    JsonReader r(list[i], costs.file(), path);
    Matmul m;
    m.name = r.string_or("name", "matmul " + std::to_string(i));
    m.in_features = static_cast<double>(r.positive_integer("in"));
    m.out_features = static_cast<double>(r.positive_integer("out"));
    m.sac_recomputed = r.boolean_or("sac_recomputed", false);
    m.routed = r.boolean_or("routed", false);
    if (m.routed && !moe) r.fail("routed", "a routed expert's projection needs the costs' \"moe\" object (experts, top_k)");
    r.finish();
    // A routed projection runs top_k times per token (in top_k of the experts).
    flops_per_token += 2 * m.in_features * m.out_features * (m.routed ? moe->top_k : 1);
    out.push_back(std::move(m));
  }
  const double declared = coefficient(forward_flops, 1, 1);
  if (!same_count(flops_per_token, declared))
    costs.fail("matmuls", "matmuls whose 2 x in x out (x top_k when routed) add up to forward_flops' \"b*s\" term (" +
                              number_text(declared) + "), got " + number_text(flops_per_token));
  return out;
}

// "attention": {"heads", "kv_heads", "head_dim", "causal", "window", "v_head_dim"};
// 2 x heads x (head_dim + v_head_dim) (4 x heads x head_dim without v_head_dim) must be
// attention_flops' b*s^2 term (QK^T and AV, no causal discount).
AttentionSpec parse_attention(JsonReader& costs, const Polynomial& attention_flops) {
  JsonReader r = costs.object("attention");
  AttentionSpec a;
  auto small_positive = [&](const char* key) {
    const std::int64_t v = r.positive_integer(key);
    if (v > 1000000) r.fail(key, "expected at most 1000000, got " + std::to_string(v));
    return static_cast<int>(v);
  };
  a.heads = small_positive("heads");
  a.kv_heads = small_positive("kv_heads");
  a.head_dim = small_positive("head_dim");
  if (a.heads % a.kv_heads != 0)
    r.fail("kv_heads", "expected a divisor of heads (" + std::to_string(a.heads) + "), got " + std::to_string(a.kv_heads));
  a.causal = r.boolean_or("causal", true);
  a.window = r.number_or("window", 0);
  if (!(a.window >= 0 && a.window < 1e12)) r.fail("window", "expected a window in tokens (0: full attention)");
  if (r.has("v_head_dim")) a.v_head_dim = small_positive("v_head_dim");
  r.finish();
  const double declared = coefficient(attention_flops, 1, 2);
  const double expected = a.heads * a.flops_per_pair_per_head();
  if (!same_count(expected, declared))
    costs.fail("attention", "heads x 2 x (head_dim + v_head_dim) (4 x heads x head_dim without v_head_dim) equal to "
                            "attention_flops' \"b*s^2\" term (" + number_text(declared) + "), got " + number_text(expected));
  return a;
}

// "moe": {"experts", "top_k", "hidden_size"}: top_k at most experts.
MoeSpec parse_moe(JsonReader r) {
  MoeSpec moe;
  const std::int64_t experts = r.positive_integer("experts");
  if (experts > 1000000) r.fail("experts", "expected at most 1000000 experts, got " + std::to_string(experts));
  moe.experts = static_cast<int>(experts);
  const std::int64_t top_k = r.positive_integer("top_k");
  if (top_k > experts)
    r.fail("top_k", "expected at most the number of experts (" + std::to_string(experts) + "), got " + std::to_string(top_k));
  moe.top_k = static_cast<int>(top_k);
  moe.hidden_size = r.positive_integer("hidden_size");
  if (moe.hidden_size > (std::int64_t{1} << 24)) r.fail("hidden_size", "expected at most 2^24");
  r.finish();
  return moe;
}

LossHead parse_loss_head(JsonReader r) {
  LossHead head;
  head.vocab_size = r.positive_integer("vocab_size");
  head.hidden_size = r.positive_integer("hidden_size");
  std::vector<std::string> names = loss_kind_names();
  head.kind = *parse_loss_kind(r.choice("kind", names));
  head.logit_softcap = r.boolean_or("logit_softcap", false);
  r.finish();
  return head;
}

// attention_flops is a part of forward_flops, so no term of it may exceed forward_flops' term
// of the same monomial (a file where it does priced a step at 3e7 s).
void check_attention_within_forward(JsonReader& costs, const Polynomial& attention_flops,
                                    const Polynomial& forward_flops) {
  for (const Polynomial::Term& t : attention_flops.terms) {
    const double attention = coefficient(attention_flops, t.b_pow, t.s_pow);
    const double forward = coefficient(forward_flops, t.b_pow, t.s_pow);
    if (attention <= forward || same_count(attention, forward)) continue;
    const std::string term = Polynomial::monomial_name(t.b_pow, t.s_pow);
    throw InputError(costs.file(), costs.path_of("attention_flops") + "." + term,
                     "expected at most forward_flops' \"" + term + "\" term (" + number_text(forward) +
                         "): attention_flops is the part of forward_flops spent in QK^T and AV; got " +
                         number_text(attention));
  }
}

// "memory_bound_kernels": [{"b*s": bytes, ...}, ...], one polynomial per memory-bound kernel of
// the forward; together they are forward_hbm_bytes, term by term.
std::vector<Polynomial> parse_memory_bound_kernels(JsonReader& costs, const Polynomial& forward_hbm_bytes) {
  const nlohmann::json& list = costs.array("memory_bound_kernels");
  std::vector<Polynomial> kernels;
  Polynomial sum;
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string path = join_json_path(costs.path_of("memory_bound_kernels"), i);
    if (!list[i].is_object())
      throw InputError(costs.file(), path, "expected a kernel's bytes as a polynomial such as {\"b*s\": 8192}, got " +
                                               describe_json(list[i]));
    nlohmann::json holder = {{"bytes", list[i]}};
    JsonReader one(holder, costs.file(), path);
    Polynomial p = parse_polynomial(one, "bytes");
    for (const Polynomial::Term& t : p.terms) sum.terms.push_back(t);
    kernels.push_back(std::move(p));
  }
  for (const Polynomial* a : {static_cast<const Polynomial*>(&sum), &forward_hbm_bytes})
    for (const Polynomial::Term& t : a->terms) {
      const double listed = coefficient(sum, t.b_pow, t.s_pow), total = coefficient(forward_hbm_bytes, t.b_pow, t.s_pow);
      if (!same_count(listed, total))
        costs.fail("memory_bound_kernels", "kernels whose bytes add up to forward_hbm_bytes' \"" +
                                               Polynomial::monomial_name(t.b_pow, t.s_pow) + "\" term (" +
                                               number_text(total) + "); they add up to " + number_text(listed));
    }
  return kernels;
}

// "launch_order": "mgggmagmmggmgm" ([Kernel launch order], models/model.h): one letter per
// kernel the lists above give, each list's kernels exactly once.
std::string parse_launch_order(JsonReader& costs, const ModuleCosts& c) {
  std::string order = costs.string("launch_order");
  std::size_t m = 0, g = 0, a = 0;
  for (char letter : order) {
    if (letter == 'm') ++m;
    else if (letter == 'g') ++g;
    else if (letter == 'a') ++a;
    else
      costs.fail("launch_order", "expected only the letters m (a memory-bound kernel), g (a matmul) and a "
                                 "(attention), got '" + std::string(1, letter) + "'");
  }
  const std::size_t attention = c.attention ? 1 : 0;
  if (m != c.memory_bound_kernels.size() || g != c.matmuls.size() || a != attention)
    costs.fail("launch_order", "expected each kernel of the costs once: " + std::to_string(c.memory_bound_kernels.size()) +
                                   " m (memory_bound_kernels), " + std::to_string(c.matmuls.size()) + " g (matmuls), " +
                                   std::to_string(attention) + " a (attention); got " + std::to_string(m) + " m, " +
                                   std::to_string(g) + " g, " + std::to_string(a) + " a");
  return order;
}

ModuleCosts parse_costs(JsonReader costs) {
  ModuleCosts c;
  c.json_path = costs.path();
  c.forward_flops = parse_polynomial(costs, "forward_flops");
  c.attention_flops = parse_polynomial(costs, "attention_flops");
  check_attention_within_forward(costs, c.attention_flops, c.forward_flops);
  c.forward_hbm_bytes = parse_polynomial(costs, "forward_hbm_bytes");
  if (costs.has("memory_bound_kernels")) c.memory_bound_kernels = parse_memory_bound_kernels(costs, c.forward_hbm_bytes);
  else costs.ignore("memory_bound_kernels");
  c.saved_activation_bytes = parse_polynomial(costs, "saved_activation_bytes");
  c.input_bytes = parse_polynomial(costs, "input_bytes");
  c.sac_saved_activation_bytes = parse_polynomial(costs, "sac_saved_activation_bytes");
  c.sac_recompute_flops = parse_polynomial(costs, "sac_recompute_flops");
  c.sac_unread_bytes = parse_polynomial(costs, "sac_unread_bytes");
  c.forward_transient_bytes = parse_polynomial(costs, "forward_transient_bytes");
  c.backward_transient_bytes = parse_polynomial(costs, "backward_transient_bytes");
  c.backward_transient_after_grads_bytes = parse_polynomial(costs, "backward_transient_after_grads_bytes");
  c.transient_tensor_bytes = parse_polynomial(costs, "transient_tensor_bytes");
  if (costs.has("moe")) c.moe = parse_moe(costs.object("moe"));
  if (costs.has("matmuls")) c.matmuls = parse_matmuls(costs, c.forward_flops, c.moe);
  if (costs.has("attention")) c.attention = parse_attention(costs, c.attention_flops);
  for (const auto& [key, field] : {std::make_pair("forward_kernel_flops", &c.forward_kernel_flops),
                                   std::make_pair("backward_flops", &c.backward_flops),
                                   std::make_pair("backward_hbm_bytes", &c.backward_hbm_bytes)}) {
    if (costs.has(key)) *field = parse_polynomial(costs, key);
    else costs.ignore(key);
  }
  if (costs.has("launch_order")) c.launch_order = parse_launch_order(costs, c);
  else costs.ignore("launch_order");
  if (costs.has("eager_kernels_per_fused_kernel")) {
    c.eager_kernels_per_fused_kernel = costs.number("eager_kernels_per_fused_kernel");
    if (!(*c.eager_kernels_per_fused_kernel >= 1) || !(*c.eager_kernels_per_fused_kernel <= 1000))
      costs.fail("eager_kernels_per_fused_kernel",
                 "expected a number from 1 to 1000 (an eager block launches at least the kernels it lists)");
  } else {
    costs.ignore("eager_kernels_per_fused_kernel");
  }
  if (costs.has("eager_hbm_factor")) {
    c.eager_hbm_factor = costs.number("eager_hbm_factor");
    if (!(*c.eager_hbm_factor >= 1) || !std::isfinite(*c.eager_hbm_factor))
      costs.fail("eager_hbm_factor", "expected a finite number >= 1 (eager kernels move at least the fused bytes)");
  } else {
    costs.ignore("eager_hbm_factor");
  }
  if (costs.has("loss")) c.loss = parse_loss_head(costs.object("loss"));
  else costs.ignore("loss");
  costs.ignore("source");  // where the formulas come from, for people
  costs.finish();
  return c;
}

std::string substitute_index(std::string text, std::int64_t index) {
  const std::string token = "{i}";
  for (auto pos = text.find(token); pos != std::string::npos; pos = text.find(token))
    text.replace(pos, token.size(), std::to_string(index));
  return text;
}

// Limits that keep a hostile or mistyped file from exhausting memory or the stack: nested
// "repeat"s multiply (two levels of 100000 would be 10^10 modules), and every level of
// nesting is a recursive call. Real models have a few thousand modules, a dozen levels.
constexpr std::int64_t kMaxModules = 1000000;
constexpr int kMaxDepth = 64;

// The number of modules a module's JSON expands to, repeats multiplied, saturating just
// above kMaxModules, so an explosive file is rejected before anything is expanded.
// Malformed parts count as one module; the parser proper reports them.
std::int64_t expanded_module_count(const nlohmann::json& module, int depth) {
  constexpr std::int64_t kSaturated = kMaxModules + 1;
  if (!module.is_object() || depth > kMaxDepth) return 1;
  auto children = module.find("children");
  if (children == module.end() || !children->is_array()) return 1;
  std::int64_t count = 1;
  for (const nlohmann::json& child : *children) {
    std::int64_t repeat = 1;
    if (child.is_object()) {
      auto r = child.find("repeat");
      if (r != child.end() && r->is_number()) {
        const double value = r->get<double>();
        if (value > 1) repeat = value >= static_cast<double>(kSaturated) ? kSaturated : static_cast<std::int64_t>(value);
      }
    }
    const std::int64_t sub = expanded_module_count(child, depth + 1);
    if (sub >= kSaturated || repeat > (kSaturated - count) / sub) return kSaturated;
    count += repeat * sub;
  }
  return count;
}

// The index a child's copy k takes: its first_index + k, k in a repeat, else its parent's.
std::int64_t child_index(const std::optional<std::int64_t>& first_index, std::int64_t repeat, std::int64_t k,
                         std::int64_t parent_index) {
  return first_index ? *first_index + k : repeat > 1 ? k : parent_index;
}

// Whether the last of a module's children has the name of one before it. Few siblings (most
// modules): a scan; many (a stack of blocks): a set of their names.
class SiblingNames {
 public:
  bool last_repeats(const std::vector<Module>& children) {
    const std::string& name = children.back().name;
    const auto others = children.end() - 1;
    if (children.size() <= kScanned)
      return std::any_of(children.begin(), others, [&](const Module& c) { return c.name == name; });
    if (names_.empty())
      for (auto it = children.begin(); it != others; ++it) names_.insert(it->name);
    return !names_.insert(name).second;
  }

 private:
  static constexpr std::size_t kScanned = 8;
  std::unordered_set<std::string> names_;
};

class ModelParser {
 public:
  explicit ModelParser(std::string file) : file_(std::move(file)) {}

  // `index` replaces "{i}" in names; `copy` is the module's copy within its own "repeat" (which
  // of costs_of_copy it takes).
  Module parse_module(const nlohmann::json& json, const std::string& path,
                      const std::string& parent_full_name, std::int64_t index, std::int64_t copy = 0) {
    if (auto known = parsed_.find(&json); known != parsed_.end())
      return instantiate(known->second, json, path, parent_full_name, index, copy);
    JsonReader r(json, file_, path);
    if (++modules_ > kMaxModules)
      throw InputError(file_, path, "the expanded model has more than " + std::to_string(kMaxModules) +
                                        " modules (check \"repeat\")");
    if (depth_ >= kMaxDepth)
      throw InputError(file_, path, "modules nested more than " + std::to_string(kMaxDepth) + " levels deep");
    struct DepthGuard {
      int& depth;
      explicit DepthGuard(int& d) : depth(d) { ++depth; }
      ~DepthGuard() { --depth; }
    } guard(depth_);
    ParsedModule parsed;
    Module m;
    parsed.name = r.string_or("name", "");
    m.name = substitute_index(parsed.name, index);
    if (path != "root" && m.name.empty()) r.fail("name", "a non-root module needs a non-empty name");
    if (m.name.find('.') != std::string::npos) r.fail("name", "module names cannot contain '.'");
    m.full_name = parent_full_name.empty() ? m.name : parent_full_name + "." + m.name;
    m.type = r.string_or("type", "Module");
    r.ignore("repeat");  // handled by the parent
    r.ignore("first_index");
    m.repeated = r.has("repeat");
    if (r.has("experts")) {
      m.experts = r.positive_integer("experts");
      if (m.experts > 1000000) r.fail("experts", "expected at most 1000000 experts, got " + std::to_string(m.experts));
    } else {
      r.ignore("experts");
    }

    // Optional keys: null means absent (has() is false for null and does not mark the key read).
    for (const char* key : {"params", "costs", "children", "costs_variants", "costs_of_copy"}) r.ignore(key);
    if (r.has("params")) {
      const auto& params = r.array("params");
      std::set<std::string> local_names;
      for (std::size_t i = 0; i < params.size(); ++i) {
        std::string tied_to;
        Parameter p = parse_param(params[i], join_json_path(r.path_of("params"), i), m.full_name, index, tied_to);
        if (!local_names.insert(p.name).second)
          throw InputError(file_, join_json_path(r.path_of("params"), i),
                           "duplicate parameter name \"" + p.name + "\"");
        // Stacked experts: dim 0 indexes them (expert parallelism splits it).
        if (m.experts > 0 && p.shape.front() != m.experts)
          throw InputError(file_, join_json_path(join_json_path(r.path_of("params"), i) + ".shape", 0),
                           "expected " + std::to_string(m.experts) + " (the module's experts: an expert weight is "
                           "stacked on dim 0), got " + std::to_string(p.shape.front()));
        if (m.experts > 0 && !p.tied_to.empty())
          throw InputError(file_, join_json_path(r.path_of("params"), i) + ".tied_to",
                           "an expert weight cannot be tied to another parameter");
        p.experts = m.experts;
        m.params.push_back(std::move(p));
        parsed.tied_to.push_back(std::move(tied_to));
      }
    }
    if (r.has("costs")) {
      // A repeated block's costs are one JSON object parsed once: its copies are the same
      // costs ("{i}" appears only in names), and a 126-layer model would parse them 126 times.
      const nlohmann::json* node = &r.raw("costs");
      auto costs = parsed_costs_.find(node);
      if (costs == parsed_costs_.end())
        costs = parsed_costs_.emplace(node, std::make_shared<const ModuleCosts>(parse_costs(r.object("costs")))).first;
      m.costs = costs->second;
    }
    if (r.has("costs_variants") || r.has("costs_of_copy")) {
      m.costs = variant_costs(r, copy);
      parsed.costs_vary = true;
    }
    parsed.module = m;  // no children yet

    if (r.has("children")) {
      const auto& children = r.array("children");
      SiblingNames names;
      for (std::size_t i = 0; i < children.size(); ++i) {
        ParsedModule::Child kid{&children[i], join_json_path(r.path_of("children"), i), 1, std::nullopt};
        const std::string& child_path = kid.path;
        if (!children[i].is_object())
          throw InputError(file_, child_path, "expected a module object");
        // "first_index": the index of the first copy (a run of layers that does not start at 0:
        // DeepSeek's MoE layers after its first dense ones).
        if (children[i].contains("first_index")) {
          JsonReader cr(children[i], file_, child_path);
          if (cr.has("first_index")) {
            kid.first_index = cr.integer("first_index");
            if (*kid.first_index < 0 || *kid.first_index > 100000) cr.fail("first_index", "expected an index 0..100000");
            if (!cr.has("repeat")) cr.fail("first_index", "is only meaningful with \"repeat\"");
          }
        }
        if (children[i].contains("repeat")) {
          JsonReader cr(children[i], file_, child_path);
          kid.repeat = cr.positive_integer("repeat");
          if (kid.repeat > 100000) cr.fail("repeat", "expected at most 100000 repeats");
          std::string name = cr.string_or("name", "");
          if (kid.repeat > 1 && name.find("{i}") == std::string::npos)
            cr.fail("name", "a repeated module's name must contain {i} (its index)");
          if (cr.has("costs_of_copy") && static_cast<std::int64_t>(cr.array("costs_of_copy").size()) != kid.repeat)
            cr.fail("costs_of_copy", "expected one variant index per copy (" + std::to_string(kid.repeat) + ")");
        }
        add_copies(m, kid, index, names);
        parsed.children.push_back(std::move(kid));
      }
    }
    check_moe_experts(m, r);
    r.finish();
    parsed_.emplace(&json, std::move(parsed));
    return m;
  }

  // A block's costs.moe.experts is the count its experts module stacks on dim 0: the cost model
  // routes tokens over the one, the planner shards the other (the session-30 audit: 16 against
  // 8 stacked was accepted, and 4 made the expert-parallel error name the wrong count).
  void check_moe_experts(const Module& m, JsonReader& r) {
    if (!m.costs || !m.costs->moe) return;
    const int routed = m.costs->moe->experts;
    std::function<void(const Module&)> visit = [&](const Module& mod) {
      if (mod.experts > 0 && mod.experts != routed)
        throw InputError(file_, r.path_of("costs") + ".moe.experts",
                         "expected " + std::to_string(mod.experts) + " (module " + mod.full_name + " stacks " +
                             std::to_string(mod.experts) + " experts), got " + std::to_string(routed));
      for (const Module& child : mod.children) visit(child);
    };
    visit(m);
  }

 private:
  // What a module's JSON gives every copy of it. Its first visit parses and checks it whole
  // (parse_module) and keeps this; a later visit (another copy of a repeated block, or a module
  // inside one: a 126-layer model visits each of a block's modules 126 times) builds the module
  // from it. Nothing checked on the first visit can fail on a later one: only the names depend
  // on the copy's index, the costs variant on its copy, and those are checked again.
  struct ParsedModule {
    Module module;          // as first parsed, without its children
    std::string name;       // "name" as written ({i} not replaced)
    std::vector<std::string> tied_to;  // each parameter's "tied_to" as written
    bool costs_vary = false;           // costs_variants and costs_of_copy
    struct Child {
      const nlohmann::json* json;
      std::string path;
      std::int64_t repeat = 1;
      std::optional<std::int64_t> first_index;
    };
    std::vector<Child> children;
  };

  Module instantiate(const ParsedModule& parsed, const nlohmann::json& json, const std::string& path,
                     const std::string& parent_full_name, std::int64_t index, std::int64_t copy) {
    if (++modules_ > kMaxModules)
      throw InputError(file_, path, "the expanded model has more than " + std::to_string(kMaxModules) +
                                        " modules (check \"repeat\")");
    struct DepthGuard {
      int& depth;
      explicit DepthGuard(int& d) : depth(d) { ++depth; }
      ~DepthGuard() { --depth; }
    } guard(depth_);
    Module m = parsed.module;
    m.name = substitute_index(parsed.name, index);
    m.full_name = parent_full_name.empty() ? m.name : parent_full_name + "." + m.name;
    for (std::size_t i = 0; i < m.params.size(); ++i) {
      Parameter& p = m.params[i];
      p.full_name = m.full_name.empty() ? p.name : m.full_name + "." + p.name;
      p.tied_to = substitute_index(parsed.tied_to[i], index);
    }
    if (parsed.costs_vary) {
      JsonReader r(json, file_, path);
      m.costs = variant_costs(r, copy);
    }
    std::size_t expected = 0;
    for (const ParsedModule::Child& kid : parsed.children) expected += static_cast<std::size_t>(kid.repeat);
    m.children.reserve(expected);
    SiblingNames names;
    for (const ParsedModule::Child& kid : parsed.children) add_copies(m, kid, index, names);
    return m;
  }

  // Parses the copies of one child of `m` (one unless repeated) onto its children, refusing a
  // name one of its siblings has.
  void add_copies(Module& m, const ParsedModule::Child& kid, std::int64_t index, SiblingNames& names) {
    for (std::int64_t k = 0; k < kid.repeat; ++k) {
      m.children.push_back(
          parse_module(*kid.json, kid.path, m.full_name, child_index(kid.first_index, kid.repeat, k, index), k));
      if (names.last_repeats(m.children))
        throw InputError(file_, kid.path, "duplicate module name \"" + m.children.back().name + "\"");
    }
  }

  // A repeated module whose copies differ in costs (Gemma's sliding-window and full-attention
  // layers): "costs_variants" lists the costs objects, "costs_of_copy" the variant of each copy
  // (copy k of the repeat takes costs_variants[costs_of_copy[k]]). Each variant is parsed once.
  std::shared_ptr<const ModuleCosts> variant_costs(JsonReader& r, std::int64_t copy) {
    if (r.has("costs")) r.fail("costs_variants", "expected either costs or costs_variants, not both");
    const nlohmann::json& variants = r.array("costs_variants");
    const nlohmann::json& of_copy = r.array("costs_of_copy");
    if (variants.empty()) r.fail("costs_variants", "expected at least one costs object");
    if (copy < 0 || copy >= static_cast<std::int64_t>(of_copy.size()))
      r.fail("costs_of_copy", "expected one variant index per copy of the module's repeat");
    const std::string path = join_json_path(r.path_of("costs_of_copy"), static_cast<std::size_t>(copy));
    const nlohmann::json& chosen = of_copy[static_cast<std::size_t>(copy)];
    if (!chosen.is_number_integer() || chosen.get<std::int64_t>() < 0 ||
        chosen.get<std::int64_t>() >= static_cast<std::int64_t>(variants.size()))
      throw InputError(file_, path, "expected an index into costs_variants (0.." + std::to_string(variants.size() - 1) +
                                        "), got " + describe_json(chosen));
    const std::size_t v = chosen.get<std::size_t>();
    const nlohmann::json* node = &variants[v];
    auto parsed = parsed_costs_.find(node);
    if (parsed == parsed_costs_.end())
      parsed = parsed_costs_
                   .emplace(node, std::make_shared<const ModuleCosts>(
                                      parse_costs(JsonReader(*node, file_, join_json_path(r.path_of("costs_variants"), v)))))
                   .first;
    return parsed->second;
  }

  // `tied_to` receives "tied_to" as written; the parameter's has {i} replaced by `index`.
  Parameter parse_param(const nlohmann::json& json, const std::string& path,
                        const std::string& module_full_name, std::int64_t index, std::string& tied_to) {
    JsonReader r(json, file_, path);
    Parameter p;
    p.name = r.string("name");
    if (p.name.empty() || p.name.find('.') != std::string::npos)
      r.fail("name", "expected a non-empty parameter name without '.'");
    p.full_name = module_full_name.empty() ? p.name : module_full_name + "." + p.name;
    const auto& shape = r.array("shape");
    if (shape.empty()) r.fail("shape", "expected at least one dimension");
    for (std::size_t i = 0; i < shape.size(); ++i) {
      if (!shape[i].is_number_integer() || shape[i].get<std::int64_t>() <= 0)
        throw InputError(file_, join_json_path(r.path_of("shape"), i),
                         "expected a positive integer dimension, got " + describe_json(shape[i]));
      p.shape.push_back(shape[i].get<std::int64_t>());
    }
    std::int64_t numel = 1;
    for (std::int64_t d : p.shape) {
      if (numel > (std::int64_t{1} << 50) / d) r.fail("shape", "parameter is implausibly large (> 2^50 elements)");
      numel *= d;
    }
    std::string dtype = r.string_or("dtype", "fp32");
    auto parsed = parse_dtype(dtype);
    if (!parsed) r.fail("dtype", "expected fp32, bf16, fp16 or fp8; got \"" + dtype + "\"");
    p.dtype = *parsed;
    tied_to = r.string_or("tied_to", "");
    p.tied_to = substitute_index(tied_to, index);
    r.finish();
    return p;
  }

  std::string file_;
  std::int64_t modules_ = 0;
  int depth_ = 0;
  std::unordered_map<const nlohmann::json*, std::shared_ptr<const ModuleCosts>> parsed_costs_;  // costs object -> its parse
  std::unordered_map<const nlohmann::json*, ParsedModule> parsed_;     // module object -> its first parse
};

void check_model(const Model& model, const std::string& file) {
  // Full names are unique (names are unique among siblings and hold no '.'), so only the tied
  // parameters need their targets looked up: the map of every parameter by name, sorted, cost
  // a 405B parse ~1,100 insertions of long names sharing long prefixes (docs/benchmarks.md,
  // "Issue 19"). Tied parameters are checked in name order, as that map gave them, so the first
  // error reported is the same.
  std::vector<const Parameter*> tied;
  for_each_module(model.root, [&](const Module& m) {
    for (const Parameter& p : m.params)
      if (!p.tied_to.empty()) tied.push_back(&p);
  });
  std::unordered_map<std::string_view, const Parameter*> by_name;
  if (!tied.empty()) {
    std::sort(tied.begin(), tied.end(), [](const Parameter* a, const Parameter* b) { return a->full_name < b->full_name; });
    for_each_module(model.root, [&](const Module& m) {
      for (const Parameter& p : m.params) by_name.emplace(p.full_name, &p);
    });
  }
  for (const Parameter* p : tied) {
    const std::string& name = p->full_name;
    auto it = by_name.find(p->tied_to);
    if (it == by_name.end())
      throw InputError(file, "root", "parameter " + name + " is tied_to \"" + p->tied_to +
                                         "\", which is no parameter of the model");
    if (!it->second->tied_to.empty())
      throw InputError(file, "root", "parameter " + name + " is tied to " + p->tied_to +
                                         ", which is itself tied; tie to the owning parameter");
    if (it->second->numel() != p->numel())
      throw InputError(file, "root", "parameter " + name + " is tied to " + p->tied_to +
                                         " but their sizes differ");
  }
  // Bounded so that parameter_count() and byte totals cannot overflow.
  constexpr std::int64_t kMaxTotalElements = std::int64_t{1} << 53;
  // In tree order: each numel is at most 2^50 (parse), so the sum passes 2^53, and this error is
  // the one thrown, before it could overflow, whatever the order.
  std::int64_t total = 0;
  for_each_module(model.root, [&](const Module& m) {
    for (const Parameter& p : m.params) {
      if (!p.tied_to.empty()) continue;
      total = checked_add(total, p.numel(), "the model's parameter elements");
      if (total > kMaxTotalElements)
        throw InputError(file, "root", "the model has implausibly many parameters (more than 2^53 elements)");
    }
  });
  // Costs on a module cover its whole subtree: a descendant may not carry costs too.
  std::function<void(const Module&, bool)> walk = [&](const Module& m, bool costed_above) {
    if (m.costs && costed_above)
      throw InputError(file, "root", "module \"" + m.full_name +
                                         "\" has costs but an ancestor already carries costs for it");
    for (const Module& c : m.children) walk(c, costed_above || m.costs != nullptr);
  };
  walk(model.root, false);
}

ArchSummary parse_arch(JsonReader r) {
  ArchSummary a;
  a.family = r.string_or("family", "");
  a.num_layers = r.integer_or("num_layers", 0);
  a.hidden_size = r.integer_or("hidden_size", 0);
  a.num_heads = r.integer_or("num_heads", 0);
  a.num_kv_heads = r.integer_or("num_kv_heads", 0);
  a.ffn_hidden_size = r.integer_or("ffn_hidden_size", 0);
  a.vocab_size = r.integer_or("vocab_size", 0);
  a.max_seq_len = r.integer_or("max_seq_len", 0);
  a.num_experts = r.integer_or("num_experts", 0);
  a.experts_per_token = r.integer_or("experts_per_token", 0);
  a.expert_ffn_hidden_size = r.integer_or("expert_ffn_hidden_size", 0);
  r.finish();
  return a;
}

}  // namespace

std::int64_t Model::parameter_count() const {
  std::int64_t n = 0;
  for (const Parameter* p : parameters()) n += p->numel();
  return n;
}

double Model::forward_flops(double micro_batch, double seq_len) const {
  double sum = 0;
  for_each_module(root, [&](const Module& m) {
    if (m.costs) sum += m.costs->forward_flops.at(micro_batch, seq_len);
  });
  return sum;
}

double Model::attention_flops(double micro_batch, double seq_len) const {
  double sum = 0;
  for_each_module(root, [&](const Module& m) {
    if (m.costs) sum += m.costs->attention_flops.at(micro_batch, seq_len);
  });
  return sum;
}

std::vector<const Parameter*> Model::parameters() const {
  std::vector<const Parameter*> out;
  for_each_module(root, [&](const Module& m) {
    for (const Parameter& p : m.params)
      if (p.tied_to.empty()) out.push_back(&p);
  });
  return out;
}

const Module* Model::find_module(const std::string& full_name) const {
  const Module* found = nullptr;
  for_each_module(root, [&](const Module& m) {
    if (!found && m.full_name == full_name) found = &m;
  });
  return found;
}

SharedModel::SharedModel() {
  static const auto empty = std::make_shared<const Model>();  // one for every default
  model_ = empty;
}
SharedModel::SharedModel(Model model)
    : model_(std::make_shared<const Model>(std::move(model))),
      parameter_count_(model_->parameter_count()),
      parameter_tensors_(model_->parameters().size()) {}

Model parse_model(const nlohmann::json& json, const std::string& file) {
  JsonReader r(json, file);
  Model model;
  model.file = file;
  model.name = r.string("name");
  model.source = r.string_or("source", "");
  if (r.has("not_modelled")) {
    const nlohmann::json& left_out = r.array("not_modelled");
    for (std::size_t i = 0; i < left_out.size(); ++i) {
      if (!left_out[i].is_string() || left_out[i].get<std::string>().empty())
        throw InputError(file, join_json_path("not_modelled", i), "expected a non-empty string, got " +
                                                                      describe_json(left_out[i]));
      model.not_modelled.push_back(left_out[i].get<std::string>());
    }
  }
  model.liger = r.boolean_or("liger", false);
  r.ignore("arch");  // null means absent
  if (r.has("arch")) model.arch = parse_arch(r.object("arch"));
  if (expanded_module_count(r.raw("root"), 0) > kMaxModules)
    throw InputError(file, "root", "the model expands to more than " + std::to_string(kMaxModules) +
                                       " modules (check \"repeat\")");
  ModelParser parser(file);
  model.root = parser.parse_module(r.raw("root"), "root", "", 0);
  r.finish();
  check_model(model, file);
  if (model.parameter_count() == 0) throw InputError(file, "root", "the model has no parameters");
  return model;
}

Model load_model_file(const std::string& path) { return parse_model(load_json_file(path), path); }

}  // namespace fsdpsim::models
