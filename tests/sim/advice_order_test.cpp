// The advice's order (sim::order_cheapest_first), worked by hand on made-up changes.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "sim/advice.h"

namespace fsdpsim::sim {
namespace {

AdviceItem item(const std::string& change, double tokens, int gpus, bool near_capacity = false, int changes = 1,
                double spare = 0) {
  AdviceItem i;
  i.change = change;
  i.metrics.tokens_per_second_per_gpu = tokens;
  i.gpus = gpus;
  i.near_capacity = near_capacity;
  i.changes = changes;
  i.spare_bytes = spare;
  return i;
}

std::vector<std::string> order_of(std::vector<AdviceItem> items) {
  order_cheapest_first(items);
  std::vector<std::string> names;
  for (const AdviceItem& i : items) names.push_back(i.change);
  return names;
}

// Sorted by tokens/s: near (1,200, near capacity) goes last whatever its speed. Of the rest, the
// band of 1,000 reaches down to 990: a (1,000, 64 GPUs), b (995, 32), c (990, 128) are one cost,
// fewest GPUs first: b, a, c. d (989.9) is past it and leads the next band, which e (985, 16)
// joins (985 >= 0.99 x 989.9 = 980.0): e, d. f (900) is alone.
TEST(AdviceOrder, MarginFirstThenSameCostBandsByFewestGpus) {
  const std::vector<AdviceItem> items = {item("f", 900, 8),   item("c", 990, 128), item("near", 1200, 8, true),
                                         item("a", 1000, 64), item("e", 985, 16),  item("b", 995, 32),
                                         item("d", 989.9, 256)};
  EXPECT_EQ(order_of(items), (std::vector<std::string>{"b", "a", "c", "e", "d", "f", "near"}));
}

// Equal speed and GPUs: fewer changes, then more memory to spare.
TEST(AdviceOrder, TiesGoToFewerChangesThenMoreSpare) {
  const std::vector<AdviceItem> items = {item("pair", 500, 8, false, 2, 9e9), item("tight", 500, 8, false, 1, 1e9),
                                         item("roomy", 500, 8, false, 1, 5e9)};
  EXPECT_EQ(order_of(items), (std::vector<std::string>{"roomy", "tight", "pair"}));
}

// Near capacity among themselves: the same rules.
TEST(AdviceOrder, NearCapacityChangesKeepTheirOwnOrder) {
  const std::vector<AdviceItem> items = {item("n1", 700, 64, true), item("n2", 705, 8, true), item("m", 100, 8)};
  EXPECT_EQ(order_of(items), (std::vector<std::string>{"m", "n2", "n1"}));
}

}  // namespace
}  // namespace fsdpsim::sim
