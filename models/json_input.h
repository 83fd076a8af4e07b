// Reading JSON input with errors a person can act on.
//
// Every input error names the file, the JSON path (dotted, as `--set` writes it) and what
// was expected; InputError carries the three so the CLI prints one `error:` line.
// JsonReader walks one JSON object, converts and range-checks fields, and at the end
// rejects keys nobody read (a misspelt field is an error, not a silent default).
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace fsdpsim {

class InputError : public std::runtime_error {
 public:
  InputError(std::string file, std::string json_path, const std::string& expected);
  // A bad command-line option: "--threads: expected ..." (no file, no "<input>"; any
  // InputError without a file whose path starts with "--" reads so).
  static InputError option(const std::string& option, const std::string& expected);
  const std::string& file() const { return file_; }
  const std::string& json_path() const { return json_path_; }

 private:
  std::string file_;
  std::string json_path_;
};

// The deepest nesting of objects and arrays the reader accepts. Deeper values are refused
// before they are built: nlohmann's copy, comparison and dump recurse once per level, and a
// file of a million nested arrays overflowed the stack. The shipped files nest at most 15
// levels; a model's modules may nest 64 deep (models/model.cpp), two JSON levels each.
constexpr int kMaxJsonDepth = 256;

// Parses JSON text (comments allowed) and refuses, naming `file` and the JSON path:
// syntax errors (with line and column), nesting deeper than kMaxJsonDepth, a key that
// appears twice in one object (the last would silently win), and numbers past the range of
// a double (1e400). `base_path` prefixes the paths (an override's key).
nlohmann::json parse_json_text(const std::string& text, const std::string& file, const std::string& base_path = "");

// Reads and parses a JSON file with parse_json_text; a missing file or a directory is an
// InputError too.
nlohmann::json load_json_file(const std::string& path);

// An override's or an axis value's text: JSON when it is JSON (checked as parse_json_text
// checks a file), otherwise the text itself as a string (a bare word: FULL_SHARD).
nlohmann::json parse_json_or_word(const std::string& text, const std::string& file, const std::string& path);

// Joins a parent path and a key: ("training", "seq_len") -> "training.seq_len";
// array elements as "wrap.modules[3]".
std::string join_json_path(const std::string& parent, const std::string& key);
std::string join_json_path(const std::string& parent, std::size_t index);

class JsonReader {
 public:
  // `value` must outlive the reader. Throws if it is not an object.
  JsonReader(const nlohmann::json& value, std::string file, std::string path = "");

  bool has(const std::string& key) const;
  // Whether the key is there at all, null included (has() treats null as absent).
  bool contains(const std::string& key) const { return value_.contains(key); }
  const nlohmann::json& raw(const std::string& key);  // marks the key read; throws if absent

  // Typed getters: the optional form returns nullopt when the key is absent or null.
  std::string string(const std::string& key);
  std::optional<std::string> string_or(const std::string& key);
  std::string string_or(const std::string& key, const std::string& fallback);
  std::int64_t integer(const std::string& key);
  std::int64_t integer_or(const std::string& key, std::int64_t fallback);
  std::int64_t positive_integer(const std::string& key);
  std::int64_t positive_integer_or(const std::string& key, std::int64_t fallback);
  // An integer in [lo, hi] that fits an int (counts kept in ints: ranks, nodes, ids); the
  // error says the range. Never narrows silently.
  int int_in(const std::string& key, int lo, int hi);
  int int_in_or(const std::string& key, int lo, int hi, int fallback);
  double number(const std::string& key);
  double number_or(const std::string& key, double fallback);
  double positive_number(const std::string& key);
  // Range-checked when present; `fallback` when the key is absent or null.
  double positive_number_or(const std::string& key, double fallback);
  double nonnegative_number_or(const std::string& key, double fallback);
  bool boolean_or(const std::string& key, bool fallback);
  // One of `allowed` (exact match); the error lists them.
  std::string choice(const std::string& key, const std::vector<std::string>& allowed);
  std::string choice_or(const std::string& key, const std::vector<std::string>& allowed,
                        const std::string& fallback);

  JsonReader object(const std::string& key);  // a nested object
  const nlohmann::json& array(const std::string& key);

  // Throws naming the first key that no getter read.
  void finish() const;
  // The keys no getter read and ignore() did not mark, in the object's order; null values and
  // comment keys ("_...", "//...") are left out, as finish() leaves them.
  std::vector<std::string> unread_keys() const;
  // Marks keys as known without reading them (documentation-only fields).
  void ignore(const std::string& key);

  [[noreturn]] void fail(const std::string& key, const std::string& expected) const;
  std::string path_of(const std::string& key) const { return join_json_path(path_, key); }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }

 private:
  const nlohmann::json* find(const std::string& key);
  const nlohmann::json& value_;
  std::string file_;
  std::string path_;
  std::set<std::string> read_;
};

// A short rendering of a JSON value for error messages ("got -1", "got \"abc\"").
std::string describe_json(const nlohmann::json& value);

}  // namespace fsdpsim
