// Randomized robustness: mutated model JSON and mutated Hugging Face configs must either
// load or throw fsdpsim::InputError; never another exception, never a crash or a hang.
// Deterministic (fixed seeds), a few thousand cases, well under a second or two.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <limits>
#include <random>
#include <string>
#include <typeinfo>
#include <vector>

#include "models/hf_import.h"
#include "models/json_input.h"
#include "models/model.h"
#include "test_paths.h"

namespace fsdpsim::models {
namespace {

using nlohmann::json;

class Mutator {
 public:
  explicit Mutator(std::uint64_t seed) : rng_(seed) {}

  std::size_t below(std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(rng_() % n); }

  json random_number() {
    static const std::vector<json> specials = {
        -1, 0, 1, 2, 3, 7, 64, 4096, 100001, std::numeric_limits<std::int64_t>::max(),
        std::numeric_limits<std::int64_t>::min(), std::numeric_limits<std::uint64_t>::max(), 1e300, -1e300, 0.5,
        1e-300, 9007199254740993.0, -0.0, std::nan(""), std::numeric_limits<double>::infinity(), 1LL << 40};
    if (below(2) == 0) return specials[below(specials.size())];
    return static_cast<std::int64_t>(below(311)) - 10;
  }

  json random_string() {
    static const std::vector<std::string> pool = {
        "", "{i}", "a.b", "weight", "model.embed_tokens.weight", "transformer.wte.weight", "bf16", "float16", "int8",
        "b*s", "b*s^2", "b^x", "s^123", "llama", "gpt2", "mpt", "bert", "grouped_query_attention", "rmsnorm",
        "\xc3\xa9t\xc3\xa9", "1", "b*b*s*s"};
    return pool[below(pool.size())];
  }

  json random_value(int depth = 0) {
    switch (below(depth > 1 ? 5 : 7)) {
      case 0: return nullptr;
      case 1: return below(2) == 0;
      case 2: return random_number();
      case 3:
      case 4: return random_string();
      case 5: {
        json a = json::array();
        for (std::size_t i = below(3); i > 0; --i) a.push_back(random_value(depth + 1));
        return a;
      }
      default: {
        json o = json::object();
        for (std::size_t i = below(3); i > 0; --i) o[random_string().get<std::string>()] = random_value(depth + 1);
        return o;
      }
    }
  }

  // One structural mutation at a random node.
  void mutate(json& root) {
    std::vector<json*> nodes;
    std::function<void(json&)> collect = [&](json& node) {
      nodes.push_back(&node);
      if (node.is_structured())
        for (auto& child : node) collect(child);
    };
    collect(root);
    json& node = *nodes[below(nodes.size())];
    switch (below(6)) {
      case 0:  // delete a key or an element
        if (node.is_object() && !node.empty()) {
          auto it = node.begin();
          std::advance(it, static_cast<std::ptrdiff_t>(below(node.size())));
          node.erase(it);
        } else if (node.is_array() && !node.empty()) {
          node.erase(below(node.size()));
        }
        break;
      case 1: node = random_value(); break;  // swap the type
      case 2: node = random_number(); break;
      case 3:  // an unexpected key
        if (node.is_object()) node[random_string().get<std::string>()] = random_value();
        break;
      case 4:  // duplicate an element (duplicate names, more children)
        if (node.is_array() && !node.empty()) node.push_back(node[below(node.size())]);
        break;
      default: node = random_string(); break;
    }
  }

  // Random byte edits on the text: insert, overwrite or delete.
  std::string corrupt(std::string text) {
    for (std::size_t edits = 1 + below(3); edits > 0 && !text.empty(); --edits) {
      const std::size_t at = below(text.size());
      const char byte = static_cast<char>(below(256));
      switch (below(3)) {
        case 0: text.insert(at, 1, byte); break;
        case 1: text[at] = byte; break;
        default: text.erase(at, 1 + below(4)); break;
      }
    }
    return text;
  }

 private:
  std::mt19937_64 rng_;
};

// Tallies of the outcomes, to check that a fuzz run saw both.
struct Outcomes {
  int loaded = 0;
  int rejected = 0;
};

// Runs `parse` and fails the test on anything but success or InputError.
template <typename Parse>
void expect_only_input_errors(Parse parse, const std::string& what, int iteration, Outcomes& outcomes) {
  try {
    parse();
    ++outcomes.loaded;
  } catch (const InputError&) {
    ++outcomes.rejected;  // expected for most mutations
  } catch (const std::exception& e) {
    ADD_FAILURE() << what << " iteration " << iteration << ": " << typeid(e).name() << ": " << e.what();
  } catch (...) {
    ADD_FAILURE() << what << " iteration " << iteration << ": a non-standard exception";
  }
}

// Seeds with two layers: the layer count only repeats work, and small seeds keep the
// test fast enough to run thousands of cases.
// A fuzz run that only ever loads, or only ever rejects, tests little.
void report(const Outcomes& outcomes) {
  EXPECT_GT(outcomes.loaded, 0);
  EXPECT_GT(outcomes.rejected, 0);
  std::cout << "  loaded " << outcomes.loaded << ", rejected " << outcomes.rejected << "\n";
}

std::vector<json> model_seeds() {
  std::vector<json> seeds;
  for (const char* name : {"llama3.1-8b", "gpt2", "mpt-7b", "pythia-1.4b"}) {
    json model = load_json_file(testing_paths::catalog_path(name));
    for (auto& top : model["root"]["children"]) {
      if (!top.contains("children")) continue;
      for (auto& child : top["children"])
        if (child.contains("children") && child["children"][0].contains("repeat")) child["children"][0]["repeat"] = 2;
    }
    seeds.push_back(std::move(model));
  }
  return seeds;
}

std::vector<json> hf_seeds() {
  std::vector<json> seeds;
  for (const char* name : {"llama3.1-8b", "qwen2-7b", "gpt2", "mpt-7b", "pythia-1.4b", "mistral-7b"}) {
    json config = load_json_file(testing_paths::hf_config_path(name));
    for (const char* key : {"num_hidden_layers", "n_layer", "n_layers"})
      if (config.contains(key)) config[key] = 2;
    seeds.push_back(std::move(config));
  }
  return seeds;
}

void parse_hf(const json& config) {
  json model = import_hf_config(config, "fuzz.json");
  parse_model(model, "fuzz.json");
}

TEST(Fuzz, MutatedModelJsonThrowsOnlyInputError) {
  Mutator m(20240601);
  const std::vector<json> seeds = model_seeds();
  Outcomes outcomes;
  for (int i = 0; i < 2000; ++i) {
    json j = seeds[m.below(seeds.size())];
    for (std::size_t k = 1 + m.below(3); k > 0; --k) m.mutate(j);
    expect_only_input_errors([&] { parse_model(j, "fuzz.json"); }, "model", i, outcomes);
  }
  report(outcomes);
}

TEST(Fuzz, MutatedHfConfigThrowsOnlyInputError) {
  Mutator m(77);
  const std::vector<json> seeds = hf_seeds();
  Outcomes outcomes;
  for (int i = 0; i < 2000; ++i) {
    json j = seeds[m.below(seeds.size())];
    for (std::size_t k = 1 + m.below(3); k > 0; --k) m.mutate(j);
    expect_only_input_errors([&] { parse_hf(j); }, "hf config", i, outcomes);
  }
  report(outcomes);
}

TEST(Fuzz, CorruptedTextThrowsOnlyInputError) {
  Mutator m(4242);
  std::vector<std::string> texts;
  for (const json& j : model_seeds()) texts.push_back(j.dump(1));
  std::vector<std::string> hf_texts;
  for (const json& j : hf_seeds()) hf_texts.push_back(j.dump(2));
  const std::string path = ::testing::TempDir() + "fsdpsim_fuzz_model.json";
  Outcomes outcomes;
  for (int i = 0; i < 1500; ++i) {
    const bool hf = m.below(2) == 0;
    const std::vector<std::string>& pool = hf ? hf_texts : texts;
    {
      // Remove, then create: truncating a file in place makes ext4 flush it (auto_da_alloc),
      // which is slow.
      std::filesystem::remove(path);
      std::ofstream out(path, std::ios::binary);
      out << m.corrupt(pool[m.below(pool.size())]);
    }
    expect_only_input_errors(
        [&] {
          if (hf) {
            load_hf_config(path);
          } else {
            load_model_file(path);
          }
        },
        hf ? "hf text" : "model text", i, outcomes);
  }
  report(outcomes);
}

}  // namespace
}  // namespace fsdpsim::models
