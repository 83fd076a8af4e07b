#include "models/json_input.h"

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace fsdpsim {

namespace {
// Control characters but newline and tab as JSON escapes ("\u0000"): a key holding a NUL cut the
// printed message short at it, since what() is read as a C string (the session-38 input audit).
std::string printable(const std::string& text) {
  std::string out;
  for (const char c : text) {
    if ((static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') || c == 0x7f) {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\u%04x", static_cast<unsigned char>(c));
      out += escaped;
    } else {
      out += c;
    }
  }
  return out;
}

std::string make_message(const std::string& file, const std::string& path,
                         const std::string& expected) {
  // A command-line option ("--threads", "--axis training.seq_len") is its own place: no file.
  if (file.empty() && path.rfind("--", 0) == 0) return printable(path + ": " + expected);
  std::string where = file.empty() ? std::string("<input>") : file;
  if (!path.empty()) where += ": " + path;
  return printable(where + ": " + expected);
}
}  // namespace

InputError::InputError(std::string file, std::string json_path, const std::string& expected)
    : std::runtime_error(make_message(file, json_path, expected)),
      file_(std::move(file)),
      json_path_(std::move(json_path)) {}

InputError InputError::option(const std::string& option, const std::string& expected) {
  return InputError("", option, expected);
}

InputError::InputError(Message, const std::string& message, std::string file, std::string json_path)
    : std::runtime_error(message), file_(std::move(file)), json_path_(std::move(json_path)) {}

InputError InputError::with_note(const InputError& error, const std::string& note) {
  return InputError(Message{}, std::string(error.what()) + note, error.file(), error.json_path());
}

namespace {

// "line 3, column 14" for a byte offset into `text` (editors understand lines and columns).
std::string line_and_column(const std::string& text, std::size_t byte) {
  std::size_t line = 1, column = 1;
  for (std::size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

// A SAX pass that builds the value and checks it as it goes: what it refuses (too deep, a key
// twice, a number out of range) is reported at its JSON path. Syntax errors keep nlohmann's
// wording with a line and column. One pass, where a checking pass followed by
// nlohmann::json::parse took twice the time: the shipped catalogs are read by every process,
// and their parse was 5% of a 405B `estimate` (docs/benchmarks.md, session 29). The paths are
// put together only for an error.
class CheckingSax : public nlohmann::json_sax<nlohmann::json> {
 public:
  // `words_allowed`: a syntax error means the text is a bare word, not JSON (an override's
  // value); it stops the pass without an exception, which a sweep would pay per point.
  CheckingSax(const std::string& text, const std::string& file, const std::string& base_path, bool words_allowed)
      : text_(text), file_(file), base_path_(base_path), words_allowed_(words_allowed) {}

  bool saw_a_word() const { return saw_a_word_; }
  // The value read (complete once sax_parse returned true).
  nlohmann::json take() { return std::move(root_); }

  bool null() override { return add(nullptr); }
  bool boolean(bool v) override { return add(v); }
  bool number_integer(number_integer_t v) override { return add(v); }
  bool number_unsigned(number_unsigned_t v) override { return add(v); }
  bool number_float(number_float_t v, const string_t&) override { return add(v); }
  bool string(string_t& v) override { return add(v); }
  bool binary(binary_t& v) override { return add(nlohmann::json::binary_t(v)); }

  bool start_object(std::size_t) override { return open(nlohmann::json::value_t::object); }
  bool key(string_t& key) override {
    Frame& top = stack_.back();
    auto [it, inserted] = top.container->get_ref<nlohmann::json::object_t&>().emplace(key, nullptr);
    if (!inserted)
      throw InputError(file_, join_json_path(path_of(stack_.size() - 1), key),
                       "duplicate key: expected each key once in an object (the last would silently win)");
    top.last_key = &it->first;
    top.member = &it->second;
    return true;
  }
  bool end_object() override { return close(); }
  bool start_array(std::size_t) override { return open(nlohmann::json::value_t::array); }
  bool end_array() override { return close(); }

  bool parse_error(std::size_t byte, const std::string& token, const nlohmann::detail::exception& e) override {
    // 406: a number nlohmann cannot hold (1e400 overflows a double).
    if (e.id == 406)
      throw InputError(file_, value_path(), "expected a number within the range of a double (about 1.8e308), got " + token);
    if (words_allowed_) {
      saw_a_word_ = true;
      return false;
    }
    std::string detail = e.what();
    auto colon = detail.rfind(": ");
    if (colon != std::string::npos) detail = detail.substr(colon + 2);
    throw InputError(file_, base_path_, "malformed JSON at " + line_and_column(text_, byte) + ": " + detail);
  }

 private:
  struct Frame {
    nlohmann::json* container;              // an object or an array being read
    const std::string* last_key = nullptr;  // an object's key being read (in the object)
    nlohmann::json* member = nullptr;       // ... and its value's place
  };

  // Puts a value where the one about to be read goes; returns it.
  template <typename Value>
  nlohmann::json* place(Value&& v) {
    if (stack_.empty()) {
      root_ = nlohmann::json(std::forward<Value>(v));
      return &root_;
    }
    Frame& top = stack_.back();
    if (top.container->is_array()) {
      top.container->get_ref<nlohmann::json::array_t&>().emplace_back(std::forward<Value>(v));
      return &top.container->back();
    }
    *top.member = nlohmann::json(std::forward<Value>(v));
    return top.member;
  }
  template <typename Value>
  bool add(Value&& v) {
    place(std::forward<Value>(v));
    return true;
  }
  bool open(nlohmann::json::value_t type) {
    if (static_cast<int>(stack_.size()) >= kMaxJsonDepth)
      throw InputError(file_, abbreviated(value_path()), "expected at most " + std::to_string(kMaxJsonDepth) +
                                                             " levels of nested objects and arrays");
    stack_.push_back({place(type)});
    return true;
  }
  bool close() {
    stack_.pop_back();
    return true;
  }

  // The path of the container of stack_[depth]; of the value about to be read (value_path).
  std::string path_of(std::size_t depth) const {
    std::string path = base_path_;
    for (std::size_t i = 0; i < depth; ++i) path = child_path(path, stack_[i], /*read=*/true);
    return path;
  }
  std::string value_path() const {
    if (stack_.empty()) return base_path_;
    return child_path(path_of(stack_.size() - 1), stack_.back(), /*read=*/false);
  }
  // The path of a frame's child: the one being read (`read`, already placed) or the next.
  static std::string child_path(const std::string& path, const Frame& f, bool read) {
    if (!f.container->is_array()) return join_json_path(path, f.last_key ? *f.last_key : std::string());
    return join_json_path(path, f.container->size() - (read ? 1 : 0));
  }
  // A path 256 levels deep is mostly "[0][0]...": its start and its end say where it is.
  static std::string abbreviated(const std::string& path) {
    if (path.size() <= 100) return path;
    return path.substr(0, 60) + "..." + path.substr(path.size() - 30);
  }

  const std::string& text_;
  const std::string& file_;
  const std::string& base_path_;
  const bool words_allowed_;
  bool saw_a_word_ = false;
  nlohmann::json root_;
  std::vector<Frame> stack_;
};

}  // namespace

nlohmann::json parse_json_text(const std::string& text, const std::string& file, const std::string& base_path) {
  CheckingSax checker(text, file, base_path, /*words_allowed=*/false);
  nlohmann::json::sax_parse(text, &checker, nlohmann::json::input_format_t::json, /*strict=*/true,
                            /*ignore_comments=*/true);
  return checker.take();
}

// The largest input read, 1 GiB: an exported schedule of the largest catalog model is tens of
// MB. A device or an endless pipe (/dev/zero, /dev/urandom) was read until memory ran out (the
// session-38 input audit: 2.1 GB, then std::bad_alloc).
constexpr std::size_t kMaxJsonFileBytes = std::size_t{1} << 30;

nlohmann::json load_json_file(const std::string& path) {
  std::error_code ec;
  const std::filesystem::file_status status = std::filesystem::status(path, ec);
  if (std::filesystem::is_directory(status)) throw InputError(path, "", "is a directory: expected a JSON file");
  if (std::filesystem::is_character_file(status) || std::filesystem::is_block_file(status) ||
      std::filesystem::is_socket(status))
    throw InputError(path, "", "is a device or a socket, not a file: expected a JSON file");
  std::ifstream in(path, std::ios::binary);
  if (!in) throw InputError(path, "", "cannot open the file (does it exist?)");
  std::string text;
  char chunk[1 << 16];
  while (in.read(chunk, sizeof chunk) || in.gcount() > 0) {
    text.append(chunk, static_cast<std::size_t>(in.gcount()));
    if (text.size() > kMaxJsonFileBytes) throw InputError(path, "", "is larger than 1 GiB: expected a JSON file");
  }
  return parse_json_text(text, path);
}

nlohmann::json parse_json_or_word(const std::string& text, const std::string& file, const std::string& path) {
  // Too deep, a key twice or 1e400 are JSON, refused as in a file; a syntax error is a word.
  CheckingSax checker(text, file, path, /*words_allowed=*/true);
  nlohmann::json::sax_parse(text, &checker, nlohmann::json::input_format_t::json, /*strict=*/true,
                            /*ignore_comments=*/false);
  if (checker.saw_a_word()) return text;
  return checker.take();
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

void JsonReader::fail(std::string_view key, const std::string& expected) const {
  throw InputError(file_, path_of(key), expected);
}

bool JsonReader::has(std::string_view key) const {
  auto it = value_.find(key);
  return it != value_.end() && !it->is_null();
}

bool JsonReader::marked(const nlohmann::json* value) const {
  const auto inline_end = inline_marks_.begin() + static_cast<std::ptrdiff_t>(marks_);
  if (std::find(inline_marks_.begin(), inline_end, value) != inline_end) return true;
  return std::find(more_marks_.begin(), more_marks_.end(), value) != more_marks_.end();
}

void JsonReader::mark(const nlohmann::json* value) {
  const auto inline_end = inline_marks_.begin() + static_cast<std::ptrdiff_t>(marks_);
  if (std::find(inline_marks_.begin(), inline_end, value) != inline_end) return;
  if (marks_ < kInlineMarks) inline_marks_[marks_++] = value;
  else more_marks_.push_back(value);
}

const nlohmann::json* JsonReader::find(std::string_view key) {
  auto it = value_.find(key);
  if (it == value_.end()) return nullptr;
  mark(&*it);
  return it->is_null() ? nullptr : &*it;
}

const nlohmann::json& JsonReader::raw(std::string_view key) {
  const nlohmann::json* v = find(key);
  if (!v) fail(key, "is required but missing");
  return *v;
}

void JsonReader::ignore(std::string_view key) {
  auto it = value_.find(key);
  if (it != value_.end()) mark(&*it);
}

std::string JsonReader::string(std::string_view key) {
  const nlohmann::json& v = raw(key);
  if (!v.is_string()) fail(key, "expected a string, got " + describe_json(v));
  return v.get<std::string>();
}

std::optional<std::string> JsonReader::string_or(std::string_view key) {
  const nlohmann::json* v = find(key);
  if (!v) return std::nullopt;
  if (!v->is_string()) fail(key, "expected a string, got " + describe_json(*v));
  return v->get<std::string>();
}

std::string JsonReader::string_or(std::string_view key, const std::string& fallback) {
  const nlohmann::json* v = find(key);
  if (!v) return fallback;
  if (!v->is_string()) fail(key, "expected a string, got " + describe_json(*v));
  return v->get<std::string>();
}

std::int64_t JsonReader::integer(std::string_view key) {
  const nlohmann::json& v = raw(key);
  // Unsigned: nlohmann keeps 2^63..2^64-1 as unsigned, which get<int64_t> would wrap to a
  // negative number ("got -1" for 18446744073709551615).
  if (v.is_number_unsigned()) {
    if (v.get<std::uint64_t>() <= static_cast<std::uint64_t>(INT64_MAX)) return v.get<std::int64_t>();
    fail(key, "expected an integer below 2^63, got " + describe_json(v));
  }
  if (v.is_number_integer()) return v.get<std::int64_t>();
  if (v.is_number_float()) {
    double d = v.get<double>();
    // Accept 1e9-style integers written as floats, nothing fractional or out of range.
    // (The range first: converting a double past int64's range is undefined.)
    if (d > -9.2e18 && d < 9.2e18 && d == std::floor(d)) return static_cast<std::int64_t>(d);
    if (std::isfinite(d) && d == std::floor(d)) fail(key, "expected an integer below 2^63, got " + describe_json(v));
  }
  fail(key, "expected an integer, got " + describe_json(v));
}

std::int64_t JsonReader::integer_or(std::string_view key, std::int64_t fallback) {
  return find(key) ? integer(key) : fallback;
}

std::int64_t JsonReader::positive_integer(std::string_view key) {
  std::int64_t n = integer(key);
  if (n <= 0) fail(key, "expected a positive integer, got " + std::to_string(n));
  return n;
}

std::int64_t JsonReader::positive_integer_or(std::string_view key, std::int64_t fallback) {
  return find(key) ? positive_integer(key) : fallback;
}

int JsonReader::int_in(std::string_view key, int lo, int hi) {
  const std::int64_t n = integer(key);
  if (n < lo || n > hi) {
    const std::string range = lo == 1   ? "a positive integer (at most " + std::to_string(hi) + ")"
                              : lo == 0 ? "a non-negative integer (at most " + std::to_string(hi) + ")"
                                        : "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
    fail(key, "expected " + range + ", got " + describe_json(raw(key)));
  }
  return static_cast<int>(n);
}

int JsonReader::int_in_or(std::string_view key, int lo, int hi, int fallback) {
  return find(key) ? int_in(key, lo, hi) : fallback;
}

double JsonReader::number(std::string_view key) {
  const nlohmann::json& v = raw(key);
  if (!v.is_number()) fail(key, "expected a number, got " + describe_json(v));
  double d = v.get<double>();
  if (!std::isfinite(d)) fail(key, "expected a finite number");
  return d;
}

double JsonReader::number_or(std::string_view key, double fallback) {
  return find(key) ? number(key) : fallback;
}

double JsonReader::positive_number(std::string_view key) {
  double d = number(key);
  if (!(d > 0)) fail(key, "expected a positive number, got " + describe_json(raw(key)));
  return d;
}

double JsonReader::positive_number_or(std::string_view key, double fallback) {
  return find(key) ? positive_number(key) : fallback;
}

double JsonReader::nonnegative_number_or(std::string_view key, double fallback) {
  if (!find(key)) return fallback;
  const double d = number(key);
  if (!(d >= 0)) fail(key, "expected a non-negative number, got " + describe_json(raw(key)));
  return d;
}

bool JsonReader::boolean_or(std::string_view key, bool fallback) {
  const nlohmann::json* v = find(key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail(key, "expected true or false, got " + describe_json(*v));
  return v->get<bool>();
}

std::string JsonReader::choice(std::string_view key, const std::vector<std::string>& allowed) {
  std::string s = string(key);
  for (const auto& a : allowed)
    if (a == s) return s;
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  fail(key, "expected one of " + list + "; got \"" + s + "\"");
}

std::string JsonReader::choice_or(std::string_view key, const std::vector<std::string>& allowed,
                                  const std::string& fallback) {
  return find(key) ? choice(key, allowed) : fallback;
}

JsonReader JsonReader::object(std::string_view key) {
  const nlohmann::json& v = raw(key);
  if (!v.is_object()) fail(key, "expected a JSON object, got " + describe_json(v));
  return JsonReader(v, file_, path_of(key));
}

const nlohmann::json& JsonReader::array(std::string_view key) {
  const nlohmann::json& v = raw(key);
  if (!v.is_array()) fail(key, "expected a JSON array, got " + describe_json(v));
  return v;
}

std::vector<std::string> JsonReader::unread_keys() const {
  // Past the inline marks, one sorted list of them all: an object read key by key in a loop may
  // have many.
  std::vector<const nlohmann::json*> sorted;
  if (!more_marks_.empty()) {
    sorted.assign(inline_marks_.begin(), inline_marks_.begin() + static_cast<std::ptrdiff_t>(marks_));
    sorted.insert(sorted.end(), more_marks_.begin(), more_marks_.end());
    std::sort(sorted.begin(), sorted.end());
  }
  std::vector<std::string> keys;
  for (auto it = value_.begin(); it != value_.end(); ++it) {
    if (it->is_null()) continue;  // null means absent
    const bool read = sorted.empty() ? marked(&*it) : std::binary_search(sorted.begin(), sorted.end(), &*it);
    if (read) continue;
    // Keys starting with "_" or "//" are comments by convention.
    if (it.key().rfind("_", 0) == 0 || it.key().rfind("//", 0) == 0) continue;
    keys.push_back(it.key());
  }
  return keys;
}

void JsonReader::finish() const {
  // The inline marks are distinct keys of the object: as many as its keys, every key was read.
  if (more_marks_.empty() && marks_ == value_.size()) return;
  const std::vector<std::string> unread = unread_keys();
  if (!unread.empty())
    throw InputError(file_, path_of(unread.front()), "unknown field (check the spelling; see docs/schema.md)");
}

}  // namespace fsdpsim
