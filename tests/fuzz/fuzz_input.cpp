#include "fuzz_input.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <set>
#include <stdexcept>
#include <unistd.h>

#include <nlohmann/json.hpp>

namespace fsdpsim::fuzz {

namespace {

std::string& directory() {
  static std::string dir;
  return dir;
}

// Whether a string could lead a reader out of the catalog (fuzz_input.h).
bool leaves_catalog(const std::string& s) {
  return (!s.empty() && s[0] == '/') || s.find("..") != std::string::npos || s.find("=/") != std::string::npos ||
         s.find(":/") != std::string::npos;
}

bool any_string_leaves_catalog(const nlohmann::json& j) {
  if (j.is_string()) return leaves_catalog(j.get_ref<const std::string&>());
  if (j.is_object() || j.is_array())
    for (const auto& v : j)
      if (any_string_leaves_catalog(v)) return true;
  return false;
}

}  // namespace

void init() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/fsdpsim_fuzz_XXXXXX";
  if (!::mkdtemp(pattern.data())) {
    std::perror("fsdpsim fuzz: mkdtemp");
    std::abort();
  }
  directory() = pattern;
  if (::chdir(pattern.c_str()) != 0) {
    std::perror("fsdpsim fuzz: chdir");
    std::abort();
  }
}

std::string write_input(const std::uint8_t* data, std::size_t size, const char* name) {
  const std::string path = directory() + "/" + name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!out) {
    std::cerr << "fsdpsim fuzz: cannot write " << path << "\n";
    std::abort();
  }
  return path;
}

bool stays_in_catalog(const std::uint8_t* data, std::size_t size) {
  // Parsed as the readers parse (comments allowed); what does not parse never reaches a reference.
  const nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, false, /*ignore_comments=*/true);
  return j.is_discarded() || !any_string_leaves_catalog(j);
}

void note_exception(const char* reader, const std::exception& e) {
  static const bool strict = [] {
    const char* v = std::getenv("FSDPSIM_FUZZ_STRICT");
    return v && std::string(v) == "1";
  }();
  const std::string what = e.what();
  if (strict) {
    std::cerr << "fsdpsim fuzz: " << reader << " threw an exception that is not an InputError: " << what << "\n";
    std::abort();
  }
  static std::set<std::string> seen;
  const std::string key = what.substr(0, 80);
  if (seen.size() < 20 && seen.insert(key).second)
    std::cerr << "fsdpsim fuzz: " << reader << " threw an exception that is not an InputError: " << what << "\n";
}

}  // namespace fsdpsim::fuzz
