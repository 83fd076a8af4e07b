#include "sim/internal/text_table.h"

#include <algorithm>
#include <sstream>

namespace fsdpsim::sim {

std::string padded_table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& left) {
  std::vector<std::size_t> width;
  for (const auto& row : rows)
    for (std::size_t c = 0; c < row.size(); ++c) {
      if (width.size() <= c) width.push_back(0);
      width[c] = std::max(width[c], row[c].size());
    }
  std::ostringstream out;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::string line;
    for (std::size_t c = 0; c < rows[i].size(); ++c) {
      const std::string& cell = rows[i][c];
      const std::string pad(width[c] - cell.size(), ' ');
      line += (c ? "  " : "") + (c < left.size() && left[c] ? cell + pad : pad + cell);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << "\n";
    if (i == 0) {
      std::size_t total = 0;
      for (std::size_t w : width) total += w + 2;
      out << std::string(total - 2, '-') << "\n";
    }
  }
  return out.str();
}

}  // namespace fsdpsim::sim
