#include "models/json_format.h"

#include <algorithm>
#include <vector>

namespace fsdpsim::models {

namespace {

// Keys that read best early (identity) or late (bulky nested content); others sort
// alphabetically in between.
int key_rank(const std::string& key) {
  static const std::vector<std::string> first = {"name", "family", "type", "repeat", "first_index", "shape", "dtype", "tied_to"};
  static const std::vector<std::string> last = {"arch",           "params",   "costs", "costs_of_copy",
                                                "costs_variants", "children", "root"};
  for (std::size_t i = 0; i < first.size(); ++i)
    if (first[i] == key) return -100 + static_cast<int>(i);
  for (std::size_t i = 0; i < last.size(); ++i)
    if (last[i] == key) return 100 + static_cast<int>(i);
  return 0;
}

std::vector<std::string> ordered_keys(const nlohmann::json& object) {
  std::vector<std::string> keys;
  for (auto it = object.begin(); it != object.end(); ++it) keys.push_back(it.key());
  std::stable_sort(keys.begin(), keys.end(), [](const std::string& a, const std::string& b) {
    int ra = key_rank(a), rb = key_rank(b);
    return ra != rb ? ra < rb : a < b;
  });
  return keys;
}

std::string scalar(const nlohmann::json& value) {
  return value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string json_string(const std::string& key) { return scalar(nlohmann::json(key)); }

std::string one_line(const nlohmann::json& value) {
  if (value.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const std::string& key : ordered_keys(value)) {
      out += (first ? "" : ", ") + json_string(key) + ": " + one_line(value.at(key));
      first = false;
    }
    return out + "}";
  }
  if (value.is_array()) {
    std::string out = "[";
    for (std::size_t i = 0; i < value.size(); ++i) out += (i ? ", " : "") + one_line(value[i]);
    return out + "]";
  }
  return scalar(value);
}

void write(const nlohmann::json& value, int indent, std::size_t column, int depth, std::size_t width,
           std::string& out) {
  const bool container = value.is_object() || value.is_array();
  if (!container || value.empty()) {
    out += one_line(value);
    return;
  }
  std::string line = one_line(value);
  if (column + line.size() <= width) {
    out += line;
    return;
  }
  const std::string pad(static_cast<std::size_t>(indent * (depth + 1)), ' ');
  const std::string close_pad(static_cast<std::size_t>(indent * depth), ' ');
  const bool scalars = value.is_array() && std::none_of(value.begin(), value.end(), [](const nlohmann::json& v) {
                         return v.is_object() || v.is_array();
                       });
  if (scalars) {
    // A long list of numbers (a per-layer index) fills its lines rather than taking one each.
    out += "[\n" + pad;
    std::size_t at = pad.size();
    for (std::size_t i = 0; i < value.size(); ++i) {
      const std::string item = scalar(value[i]) + (i + 1 < value.size() ? "," : "");
      if (at > pad.size() && at + 1 + item.size() > width) {
        out += "\n" + pad;
        at = pad.size();
      } else if (at > pad.size()) {
        out += " ";
        ++at;
      }
      out += item;
      at += item.size();
    }
    out += "\n" + close_pad + "]";
    return;
  }
  if (value.is_object()) {
    out += "{\n";
    std::vector<std::string> keys = ordered_keys(value);
    for (std::size_t i = 0; i < keys.size(); ++i) {
      std::string prefix = pad + json_string(keys[i]) + ": ";
      out += prefix;
      write(value.at(keys[i]), indent, prefix.size(), depth + 1, width, out);
      out += i + 1 < keys.size() ? ",\n" : "\n";
    }
    out += close_pad + "}";
  } else {
    out += "[\n";
    for (std::size_t i = 0; i < value.size(); ++i) {
      out += pad;
      write(value[i], indent, pad.size(), depth + 1, width, out);
      out += i + 1 < value.size() ? ",\n" : "\n";
    }
    out += close_pad + "]";
  }
}

}  // namespace

std::string format_json(const nlohmann::json& value, int indent, std::size_t width) {
  std::string out;
  write(value, std::max(indent, 0), 0, 0, width, out);
  return out;
}

}  // namespace fsdpsim::models
