// Pretty-printing JSON for files people read and diff (the model catalog, exported
// schedules): nested values that fit on one line stay on one line, and object keys come
// in a reading order (name and type first, children last) instead of alphabetically.
#pragma once

#include <cstddef>
#include <string>

#include <nlohmann/json.hpp>

namespace fsdpsim::models {

// `indent` spaces per level; an object or array is written on one line when it fits in
// `width` columns at its position. The output is valid JSON with no trailing newline.
std::string format_json(const nlohmann::json& value, int indent = 2, std::size_t width = 150);

}  // namespace fsdpsim::models
