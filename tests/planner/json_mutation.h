// For the parsers' fuzz tests: pick a random node of a JSON document to mutate.
#pragma once

#include <iterator>
#include <random>

#include <nlohmann/json.hpp>

namespace fsdpsim::testing {

// Walks down from the root through random members and elements, stopping at each level with
// probability 1/stop_one_in, at most `max_depth` levels.
inline nlohmann::json* random_node(nlohmann::json& doc, std::mt19937& rng, int max_depth, unsigned stop_one_in) {
  nlohmann::json* node = &doc;
  for (int depth = 0; depth < max_depth; ++depth) {
    if (node->is_object() && !node->empty() && rng() % stop_one_in != 0) {
      auto it = node->begin();
      std::advance(it, rng() % node->size());
      node = &it.value();
    } else if (node->is_array() && !node->empty() && rng() % stop_one_in != 0) {
      node = &(*node)[rng() % node->size()];
    } else {
      break;
    }
  }
  return node;
}

// A random member of a non-empty object.
inline nlohmann::json::iterator random_member(nlohmann::json& object, std::mt19937& rng) {
  auto it = object.begin();
  std::advance(it, rng() % object.size());
  return it;
}

}  // namespace fsdpsim::testing
