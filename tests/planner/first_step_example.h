// A three-op schedule worked by hand for [State made at the first step] (planner/schedule.h):
// the planner's replay and the runtime's executor must both find its reserved memory.
#pragma once

#include <cstdint>
#include <string>

#include "planner/schedule.h"
#include "synthetic.h"

namespace fsdpsim::testing {

// [State made at the first step] by hand, on a three-op schedule of the compute stream (sizes
// of 10 MiB and more get a segment of their own size, rounded to 2 MiB; best fit; a free block
// is split when more than 1 MiB remains): op 0 makes X = 100 MiB and Y = 80 MiB (activations),
// op 1 frees X, op 2 (the optimizer) holds a temporary T = 40 MiB and frees Y; the optimizer
// state S = 60 MiB.
//  - S alive before the step: S's segment (60), X's (100), Y's (80); T fits X's freed block:
//    240 MiB.
//  - S made at op 2 of a first step: X's and Y's segments (180); at op 2 (Y still alive) S takes
//    60 of X's free block and T the other 40. The next step starts with S in X's segment and Y's
//    free: X needs a new 100 MiB segment, Y takes its own again, T finds its 40: 280 MiB, the
//    segments every later step runs in. (Had S been made after the first step, with Y gone, it
//    would have taken 60 of Y's 80 and the next step 260 MiB.) Allocated memory is the second
//    step's either way: S + X + Y = 240 MiB at op 0.
inline planner::Schedule first_step_example(bool made_at_first_step) {
  using namespace planner;
  constexpr std::int64_t MiB = 1 << 20;
  Schedule s;
  s.world_size = 1;
  auto alloc = [&](std::int64_t bytes, MemCategory category, bool persistent) {
    return add_allocation(s, bytes * MiB, persistent, Stream::compute, category);
  };
  const int state = alloc(60, MemCategory::optimizer_state, true);
  const int x = alloc(100, MemCategory::activation, false);
  const int y = alloc(80, MemCategory::activation, false);
  const int t = alloc(40, MemCategory::temporary, false);
  const OpKind kinds[] = {OpKind::compute_fwd, OpKind::compute_bwd, OpKind::optimizer};
  for (int i = 0; i < 3; ++i) {
    Op op;
    op.id = i;
    op.kind = kinds[i];
    op.name = "op " + std::to_string(i);
    s.ops.push_back(op);
  }
  s.ops[0].allocs = {x, y};
  s.ops[1].frees = {x};
  s.ops[2].allocs = {t};
  s.ops[2].frees = {t, y};
  if (made_at_first_step) s.allocations[state].first_step_op = 2;
  return s;
}

}  // namespace fsdpsim::testing
