#include "planner/published_collectives.h"

#include <filesystem>
#include <fstream>

#include "models/csv_text.h"
#include "models/json_input.h"
#include "planner/scenario.h"

namespace fsdpsim::planner {

namespace {

double number_or_zero(const std::string& s) {
  try {
    return std::stod(s);
  } catch (const std::exception&) {
    return 0;
  }
}

}  // namespace

std::string default_published_collectives_path() {
  return (std::filesystem::path(catalog_root()) / "tests/data/validation/public_collectives.csv").string();
}

std::vector<PublishedCollective> load_published_collectives(const std::string& path) {
  // A directory opened as a stream reads as an empty file ("row_id: expected a column").
  if (!std::filesystem::is_regular_file(path))
    throw InputError(path, "", "is not a regular file: expected the published collectives CSV");
  std::ifstream in(path);
  if (!in) throw InputError(path, "", "cannot read the published collectives CSV");
  std::string line;
  std::getline(in, line);
  const std::vector<std::string> header = split_csv_line(line);
  auto col = [&](const std::string& name) {
    for (std::size_t i = 0; i < header.size(); ++i)
      if (header[i] == name) return i;
    throw InputError(path, name, "expected a column of this name in the header");
  };
  const std::size_t c_row = col("row_id"), c_source = col("source"), c_coll = col("collective"), c_n = col("n_gpus"),
                    c_nodes = col("n_nodes"), c_gpu = col("gpu"), c_algo = col("algorithm"), c_size = col("message_size"),
                    c_bus = col("busbw_GBps"), c_trust = col("trust"), c_intra = col("intra_node");
  std::vector<PublishedCollective> out;
  for (int line_no = 2; std::getline(in, line); ++line_no) {
    if (line.empty()) continue;
    const std::vector<std::string> f = split_csv_line(line);
    if (f.size() < header.size()) throw InputError(path, "line " + std::to_string(line_no), "expected " + std::to_string(header.size()) + " fields");
    PublishedCollective p;
    p.row_id = f[c_row];
    p.source = f[c_source];
    p.ranks = static_cast<int>(number_or_zero(f[c_n]));
    p.nodes = static_cast<int>(number_or_zero(f[c_nodes]));
    p.gpu = f[c_gpu];
    p.intra_node = f[c_intra];
    p.bytes = message_size_bytes(f[c_size]);
    p.nvls_off = f[c_algo].find("NVLS disabled") != std::string::npos;
    p.trust = f[c_trust];
    const std::string coll = f[c_coll], bus = f[c_bus];
    if (p.ranks < 1 || p.nodes < 1 || p.bytes <= 0) continue;
    if (auto kind = collective_kind_from_name(coll)) {
      p.kind = *kind;
      p.busbw_gbps = number_or_zero(bus);
      if (p.busbw_gbps > 0) out.push_back(p);
    } else if (coll.find("all_gather / all_reduce(ring)") != std::string::npos) {
      // Row 66: one figure for all-gather and for the ring all-reduce.
      p.busbw_gbps = number_or_zero(bus);
      p.kind = CollectiveKind::all_gather;
      out.push_back(p);
      p.kind = CollectiveKind::all_reduce;
      p.nvls_off = true;
      out.push_back(p);
    } else if (coll.find("non-allreduce") != std::string::npos) {
      // Row 67: "370 (ring/all-gather) ; 480 (NVLS all-reduce)".
      const std::size_t semi = bus.find(';');
      if (semi == std::string::npos) continue;
      p.kind = CollectiveKind::all_gather;
      p.busbw_gbps = number_or_zero(bus.substr(0, semi));
      out.push_back(p);
      p.kind = CollectiveKind::all_reduce;
      p.busbw_gbps = number_or_zero(bus.substr(semi + 1));
      out.push_back(p);
    }
  }
  return out;
}

}  // namespace fsdpsim::planner
