// Shared-memory collectives for the host backend: the members of a process-group instance
// (threads) meet, each reads what it needs from the others' input buffers, and they meet
// again before anyone reuses a buffer. Real fp32 data moves and is reduced, so tests can
// check that an all-gather gathers and a reduce-scatter sums.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "planner/schedule.h"
#include "runtime/internal/executor.h"

namespace fsdpsim::runtime {

// A process-group instance's collectives as the host backend calls them: through shared
// memory among threads (HostCommunicator, below), or over MPI among processes (runtime/mpi/).
class HostGroupComm {
 public:
  virtual ~HostGroupComm() = default;
  // One member's part of a collective. all_gather: recv_count = send_count x members, member
  // j's input lands at recv + j x send_count. reduce_scatter: send_count = recv_count x
  // members, recv = sum over members of their send[member x recv_count ...]. all_reduce:
  // recv = elementwise sum of every member's send. Sums are taken in member order.
  // all_to_all: send_count = recv_count = c x members; member m's chunk j (send[j x c ...])
  // lands in member j's recv at m x c (MPI_Alltoall's and NCCL's grouped send/recv layout).
  struct Call {
    int op = -1;
    planner::OpKind kind = planner::OpKind::all_gather;
    const float* send = nullptr;
    std::size_t send_count = 0;
    float* recv = nullptr;
    std::size_t recv_count = 0;
    // The op's comm_bytes as planned. The buffers move at most --max-buffer-bytes, so ranks
    // whose schedules disagree on a collective's size would move equal buffers; the members
    // compare the planned size too.
    double planned_bytes = 0;
  };
  // ok, or timeout/aborted from a meeting (the caller reports it). Throws RuntimeError
  // (mismatch) when the members did not all join the same collective with the same sizes
  // (moved and planned).
  virtual detail::Barrier::Result run(int member, const Call& call, detail::Clock::time_point deadline,
                                      const std::atomic<bool>& abort) = 0;
  virtual const std::vector<int>& ranks() const = 0;
  virtual void wake() {}
};

// "op 12 (all_gather, 262144 elements in, 78781440 bytes planned)", for mismatch errors.
std::string collective_text(const HostGroupComm::Call& call);

class HostCommunicator : public HostGroupComm {
 public:
  explicit HostCommunicator(std::vector<int> ranks);
  detail::Barrier::Result run(int member, const Call& call, detail::Clock::time_point deadline,
                              const std::atomic<bool>& abort) override;
  const std::vector<int>& ranks() const override { return ranks_; }
  std::vector<int> absent() const;  // ranks not at the first meeting (for diagnosis)
  void wake() override;

 private:
  std::vector<int> ranks_;
  std::vector<Call> slots_;
  detail::Barrier arrive_, leave_;
};

}  // namespace fsdpsim::runtime
