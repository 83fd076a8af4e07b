#include "models/json_input.h"

#include <cmath>
#include <fstream>
#include <sstream>

namespace fsdpsim {

namespace {
std::string make_message(const std::string& file, const std::string& path,
                         const std::string& expected) {
  std::string where = file.empty() ? std::string("<input>") : file;
  if (!path.empty()) where += ": " + path;
  return where + ": " + expected;
}
}  // namespace

InputError::InputError(std::string file, std::string json_path, const std::string& expected)
    : std::runtime_error(make_message(file, json_path, expected)),
      file_(std::move(file)),
      json_path_(std::move(json_path)) {}

nlohmann::json load_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw InputError(path, "", "cannot open the file (does it exist?)");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  try {
    return nlohmann::json::parse(text, nullptr, true, /*ignore_comments=*/true);
  } catch (const nlohmann::json::parse_error& e) {
    // Translate the byte offset into line:column, which editors understand.
    std::size_t line = 1, column = 1;
    for (std::size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    std::string detail = e.what();
    auto colon = detail.rfind(": ");
    if (colon != std::string::npos) detail = detail.substr(colon + 2);
    throw InputError(path, "", "malformed JSON at line " + std::to_string(line) + ", column " +
                                   std::to_string(column) + ": " + detail);
  }
}

std::string join_json_path(const std::string& parent, const std::string& key) {
  return parent.empty() ? key : parent + "." + key;
}

std::string join_json_path(const std::string& parent, std::size_t index) {
  return parent + "[" + std::to_string(index) + "]";
}

std::string describe_json(const nlohmann::json& value) {
  // Strings built in code (not parsed) may hold invalid UTF-8, which dump() would throw on.
  std::string text = value.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (text.size() > 60) {
    // Cut at a character boundary so the message stays valid UTF-8.
    std::size_t cut = 57;
    while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
    text = text.substr(0, cut) + "...";
  }
  return text;
}

JsonReader::JsonReader(const nlohmann::json& value, std::string file, std::string path)
    : value_(value), file_(std::move(file)), path_(std::move(path)) {
  if (!value_.is_object())
    throw InputError(file_, path_, "expected a JSON object, got " + describe_json(value_));
}

void JsonReader::fail(const std::string& key, const std::string& expected) const {
  throw InputError(file_, path_of(key), expected);
}

bool JsonReader::has(const std::string& key) const {
  auto it = value_.find(key);
  return it != value_.end() && !it->is_null();
}

const nlohmann::json* JsonReader::find(const std::string& key) {
  read_.insert(key);
  auto it = value_.find(key);
  if (it == value_.end() || it->is_null()) return nullptr;
  return &*it;
}

const nlohmann::json& JsonReader::raw(const std::string& key) {
  const nlohmann::json* v = find(key);
  if (!v) fail(key, "is required but missing");
  return *v;
}

void JsonReader::ignore(const std::string& key) { read_.insert(key); }

std::string JsonReader::string(const std::string& key) {
  const nlohmann::json& v = raw(key);
  if (!v.is_string()) fail(key, "expected a string, got " + describe_json(v));
  return v.get<std::string>();
}

std::optional<std::string> JsonReader::string_or(const std::string& key) {
  if (!find(key)) return std::nullopt;
  return string(key);
}

std::string JsonReader::string_or(const std::string& key, const std::string& fallback) {
  return string_or(key).value_or(fallback);
}

std::int64_t JsonReader::integer(const std::string& key) {
  const nlohmann::json& v = raw(key);
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    // Accept 1e9-style integers written as floats, nothing fractional or out of range.
    if (d == static_cast<double>(static_cast<std::int64_t>(d)) && d > -9.2e18 && d < 9.2e18)
      return static_cast<std::int64_t>(d);
  }
  fail(key, "expected an integer, got " + describe_json(v));
}

std::int64_t JsonReader::integer_or(const std::string& key, std::int64_t fallback) {
  return find(key) ? integer(key) : fallback;
}

std::int64_t JsonReader::positive_integer(const std::string& key) {
  std::int64_t n = integer(key);
  if (n <= 0) fail(key, "expected a positive integer, got " + std::to_string(n));
  return n;
}

std::int64_t JsonReader::positive_integer_or(const std::string& key, std::int64_t fallback) {
  return find(key) ? positive_integer(key) : fallback;
}

double JsonReader::number(const std::string& key) {
  const nlohmann::json& v = raw(key);
  if (!v.is_number()) fail(key, "expected a number, got " + describe_json(v));
  double d = v.get<double>();
  if (!std::isfinite(d)) fail(key, "expected a finite number");
  return d;
}

double JsonReader::number_or(const std::string& key, double fallback) {
  return find(key) ? number(key) : fallback;
}

double JsonReader::positive_number(const std::string& key) {
  double d = number(key);
  if (!(d > 0)) fail(key, "expected a positive number, got " + describe_json(raw(key)));
  return d;
}

double JsonReader::positive_number_or(const std::string& key, double fallback) {
  return find(key) ? positive_number(key) : fallback;
}

double JsonReader::nonnegative_number_or(const std::string& key, double fallback) {
  if (!find(key)) return fallback;
  const double d = number(key);
  if (!(d >= 0)) fail(key, "expected a non-negative number, got " + describe_json(raw(key)));
  return d;
}

bool JsonReader::boolean_or(const std::string& key, bool fallback) {
  const nlohmann::json* v = find(key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail(key, "expected true or false, got " + describe_json(*v));
  return v->get<bool>();
}

std::string JsonReader::choice(const std::string& key, const std::vector<std::string>& allowed) {
  std::string s = string(key);
  for (const auto& a : allowed)
    if (a == s) return s;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  fail(key, "expected one of " + list + "; got \"" + s + "\"");
}

std::string JsonReader::choice_or(const std::string& key, const std::vector<std::string>& allowed,
                                  const std::string& fallback) {
  return find(key) ? choice(key, allowed) : fallback;
}

JsonReader JsonReader::object(const std::string& key) {
  const nlohmann::json& v = raw(key);
  if (!v.is_object()) fail(key, "expected a JSON object, got " + describe_json(v));
  return JsonReader(v, file_, path_of(key));
}

const nlohmann::json& JsonReader::array(const std::string& key) {
  const nlohmann::json& v = raw(key);
  if (!v.is_array()) fail(key, "expected a JSON array, got " + describe_json(v));
  return v;
}

std::vector<std::string> JsonReader::unread_keys() const {
  std::vector<std::string> keys;
  for (auto it = value_.begin(); it != value_.end(); ++it) {
    if (read_.count(it.key()) || it->is_null()) continue;  // null means absent
    // Keys starting with "_" or "//" are comments by convention.
    if (it.key().rfind("_", 0) == 0 || it.key().rfind("//", 0) == 0) continue;
    keys.push_back(it.key());
  }
  return keys;
}

void JsonReader::finish() const {
  const std::vector<std::string> unread = unread_keys();
  if (!unread.empty())
    throw InputError(file_, path_of(unread.front()), "unknown field (check the spelling; see docs/schema.md)");
}

}  // namespace fsdpsim
