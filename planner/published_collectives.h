// Published NCCL bus bandwidths (tests/data/validation/public_collectives.csv, a copy of
// shared/validation; each row cites its source), read one way for everyone who compares the
// cost model (planner/collectives.h) with them: the `collectives` command
// (sim/collectives_table.h) and the cost model's tests.
#pragma once

#include <string>
#include <vector>

#include "planner/collectives.h"

namespace fsdpsim::planner {

// One published figure: a row of public_collectives.csv (rows 66 and 67, which give one figure
// for two collectives or two figures in one cell, give two of these).
struct PublishedCollective {
  std::string row_id;
  std::string source;
  CollectiveKind kind = CollectiveKind::all_reduce;
  int ranks = 0, nodes = 0;
  std::string gpu;       // as the row writes it ("H200 SXM 141GB")
  std::string intra_node;  // the node's GPU interconnect as the row writes it ("NVLink4 NV18 via NVSwitch")
  double bytes = 0;      // nccl-tests' size ("large (>256M)" and "up to 16GB": 16 GiB, the peak rows)
  double busbw_gbps = 0;
  bool nvls_off = false;  // the source disabled NVLS (NCCL_NVLS_ENABLE=0) or named the ring figure
  std::string trust;
};

// Every row with a collective, a size, a rank count and a bus bandwidth; rows without one of
// them (a latency-only row, a collective the model does not price) are skipped. Throws
// InputError naming the file for an unreadable file, a missing column or a short row.
std::vector<PublishedCollective> load_published_collectives(const std::string& path);

// The shipped copy: <catalog root>/tests/data/validation/public_collectives.csv.
std::string default_published_collectives_path();

}  // namespace fsdpsim::planner
