// Reading JSON input with errors a person can act on.
//
// Every input error names the file, the JSON path (dotted, as `--set` writes it) and what
// was expected; InputError carries the three so the CLI prints one `error:` line.
// JsonReader walks one JSON object, converts and range-checks fields, and at the end
// rejects keys nobody read (a misspelt field is an error, not a silent default).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace fsdpsim {

class InputError : public std::runtime_error {
 public:
  InputError(std::string file, std::string json_path, const std::string& expected);
  // A bad command-line option: "--threads: expected ..." (no file, no "<input>"; any
  // InputError without a file whose path starts with "--" reads so).
  static InputError option(const std::string& option, const std::string& expected);
  // The same error with `note` after its message: what else the reader should know, e.g. which
  // command-line override put the value in the file named (" (with --set cluster.nodes=0)").
  static InputError with_note(const InputError& error, const std::string& note);
  const std::string& file() const { return file_; }
  const std::string& json_path() const { return json_path_; }

 private:
  struct Message {};
  InputError(Message, const std::string& message, std::string file, std::string json_path);
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

  bool has(std::string_view key) const;
  // Whether the key is there at all, null included (has() treats null as absent).
  bool contains(std::string_view key) const { return value_.find(key) != value_.end(); }
  const nlohmann::json& raw(std::string_view key);  // marks the key read; throws if absent

  // Typed getters: the optional form returns nullopt when the key is absent or null.
  std::string string(std::string_view key);
  std::optional<std::string> string_or(std::string_view key);
  std::string string_or(std::string_view key, const std::string& fallback);
  std::int64_t integer(std::string_view key);
  std::int64_t integer_or(std::string_view key, std::int64_t fallback);
  std::int64_t positive_integer(std::string_view key);
  std::int64_t positive_integer_or(std::string_view key, std::int64_t fallback);
  // An integer in [lo, hi] that fits an int (counts kept in ints: ranks, nodes, ids); the
  // error says the range. Never narrows silently.
  int int_in(std::string_view key, int lo, int hi);
  int int_in_or(std::string_view key, int lo, int hi, int fallback);
  double number(std::string_view key);
  double number_or(std::string_view key, double fallback);
  double positive_number(std::string_view key);
  // Range-checked when present; `fallback` when the key is absent or null.
  double positive_number_or(std::string_view key, double fallback);
  double nonnegative_number_or(std::string_view key, double fallback);
  bool boolean_or(std::string_view key, bool fallback);
  // One of `allowed` (exact match); the error lists them.
  std::string choice(std::string_view key, const std::vector<std::string>& allowed);
  std::string choice_or(std::string_view key, const std::vector<std::string>& allowed,
                        const std::string& fallback);

  JsonReader object(std::string_view key);  // a nested object
  const nlohmann::json& array(std::string_view key);

  // Throws naming the first key that no getter read.
  void finish() const;
  // The keys no getter read and ignore() did not mark, in the object's order; null values and
  // comment keys ("_...", "//...") are left out, as finish() leaves them.
  std::vector<std::string> unread_keys() const;
  // Marks keys as known without reading them (documentation-only fields).
  void ignore(std::string_view key);

  [[noreturn]] void fail(std::string_view key, const std::string& expected) const;
  std::string path_of(std::string_view key) const { return join_json_path(path_, std::string(key)); }
  const std::string& file() const { return file_; }
  const std::string& path() const { return path_; }
  const nlohmann::json& object_value() const { return value_; }  // the object read (keys unmarked)

 private:
  // The key's value, marked read when present; null when absent or null.
  const nlohmann::json* find(std::string_view key);
  void mark(const nlohmann::json* value);
  bool marked(const nlohmann::json* value) const;

  const nlohmann::json& value_;
  std::string file_;
  std::string path_;
  // The keys read, as the addresses of their values in the object (which outlives the reader):
  // no copy of a key, and an absent key needs no mark (finish() looks only at the keys present).
  // The first kInlineMarks without an allocation; each at most once while there are no more
  // than those, so that finish() knows every key was read when the marks are as many as the keys.
  static constexpr std::size_t kInlineMarks = 16;
  std::array<const nlohmann::json*, kInlineMarks> inline_marks_;
  std::size_t marks_ = 0;
  std::vector<const nlohmann::json*> more_marks_;  // past kInlineMarks (may repeat)
};

// A short rendering of a JSON value for error messages ("got -1", "got \"abc\"").
std::string describe_json(const nlohmann::json& value);

}  // namespace fsdpsim
