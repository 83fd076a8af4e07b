// The plain-text tables sim's reports print (`collectives`, `estimate --by-unit`): each column
// padded to its widest cell, a rule under the header row. (tools/format.h has the CLI's own
// Table; sim cannot include tools.)
#pragma once

#include <string>
#include <vector>

namespace fsdpsim::sim {

// Rows of cells, the first the header. Column c is left-aligned where left[c] is true, else
// right-aligned (numbers); trailing spaces are trimmed from each line.
std::string padded_table(const std::vector<std::vector<std::string>>& rows, const std::vector<bool>& left);

}  // namespace fsdpsim::sim
