#include "tools/output_file.h"

#include <filesystem>
#include <fstream>

#include "models/json_input.h"

namespace fsdpsim::tools {

void write_output_file(const std::string& path, const std::string& text, const std::string& what) {
  std::ofstream out(path, std::ios::trunc);
  if (!out) throw InputError(path, "", "cannot write " + what + " here");
  out << text;
  out.flush();
  out.close();
  if (!out) throw InputError(path, "", "cannot write " + what + " (is the disk full?)");
}

void check_writable(const std::string& path, const std::string& what) {
  std::error_code ec;
  const bool existed = std::filesystem::exists(path, ec);
  {
    std::ofstream probe(path, std::ios::app);
    if (!probe) throw InputError(path, "", "cannot write " + what + " here");
  }
  if (!existed) std::filesystem::remove(path, ec);
}

}  // namespace fsdpsim::tools
