// The mpi launcher: one process per rank, started by mpirun or srun.
//
//   MpiProcess   MPI itself (MPI_Init_thread with MPI_THREAD_MULTIPLE: the rank's CPU thread
//                and its stream threads call MPI), two duplicates of MPI_COMM_WORLD (`work`
//                for barriers, broadcasts, splits and the gather; `control` for messages
//                between monitors), and a monitor thread per process that
//                  - answers another process's question "how far did your rank get?" (the
//                    diagnosis of a timeout names the rank that never joined a collective),
//                  - on rank 0, receives the first fault of any process, prints it once and
//                    ends every process with MPI_Abort,
//                  - ends the run when a watched blocking call (ncclCommInitRank, a split, the
//                    gather) outlasts max(timeout, 60 s).
//   MpiLink      the executor's view of the other processes (executor.h, ProcessLink).
//   MpiGroupComm a process-group instance for the host backend: MPI_Comm_split per
//                instance, collectives MPI_Iallgather / MPI_Ireduce_scatter_block /
//                MPI_Iallreduce / MPI_Ialltoall on real fp32 data, polled against the timeout and the abort,
//                after a header exchange that checks every member joined the same op.
//   run_mpi      plays this process's rank with the chosen backend and gathers every rank's
//                RankResult (as JSON) on rank 0.
#include <dlfcn.h>
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <thread>

#include "runtime/internal/executor.h"
#include "runtime/internal/host_comm.h"
#include "runtime/internal/modules.h"

namespace fsdpsim::runtime::detail {

namespace {

using planner::OpKind;
using planner::Schedule;

// This module is opened RTLD_LOCAL (models/module_loader.h), and so is Open MPI with it; but
// Open MPI opens its own components (mca_*.so), and some of them (mca_pml_ob1) name no library
// they need and find libmpi's symbols in the process's global scope. So libmpi, and the Open
// MPI libraries it loads, are made global before MPI starts, as mpi4py does for the same reason.
void promote_mpi_library() {
  Dl_info info;
  if (dladdr(reinterpret_cast<void*>(&MPI_Init_thread), &info) && info.dli_fname)
    dlopen(info.dli_fname, RTLD_NOW | RTLD_GLOBAL | RTLD_NOLOAD);
}

constexpr int kTagQuery = 101;     // a 0-byte question: how far did your rank get?
constexpr int kTagProgress = 102;  // the answer: {step, issued} (int64), -1 where no run is on
constexpr int kTagFault = 103;     // to rank 0: int32 exit code + the message

// Polls a request until it completes (ok), the deadline passes (timeout) or `abort` is set.
Barrier::Result wait_request(MPI_Request& request, Clock::time_point deadline, const std::atomic<bool>* abort) {
  for (int spins = 0;; ++spins) {
    int done = 0;
    MPI_Test(&request, &done, MPI_STATUS_IGNORE);
    if (done) return Barrier::Result::ok;
    if (abort && abort->load()) return Barrier::Result::aborted;
    if (Clock::now() > deadline) return Barrier::Result::timeout;
    if (spins > 64) std::this_thread::sleep_for(std::chrono::microseconds(spins > 1000 ? 200 : 20));
  }
}

Clock::time_point after(double seconds) { return Clock::now() + clock_seconds(seconds); }

class MpiProcess {
 public:
  static MpiProcess& get() {
    static MpiProcess* process = new MpiProcess();  // never destroyed: finalised by at_exit
    return *process;
  }

  MpiWorld world;
  MPI_Comm work = MPI_COMM_NULL, control = MPI_COMM_NULL;

  void attach(RunControl* c) {
    std::lock_guard<std::mutex> lock(m_);
    control_ = c;
  }

  std::optional<Progress> query(int rank, double seconds) {
    std::lock_guard<std::mutex> lock(query_m_);
    MPI_Request send;
    MPI_Isend(nullptr, 0, MPI_BYTE, rank, kTagQuery, control, &send);
    std::int64_t reply[2] = {-1, -1};
    MPI_Request recv;
    MPI_Irecv(reply, 2, MPI_INT64_T, rank, kTagProgress, control, &recv);
    const auto deadline = after(seconds);
    if (wait_request(recv, deadline, nullptr) != Barrier::Result::ok) {
      MPI_Cancel(&recv);
      MPI_Request_free(&recv);
      MPI_Request_free(&send);
      return std::nullopt;
    }
    wait_request(send, deadline, nullptr);
    if (reply[0] < 0) return std::nullopt;
    return Progress{static_cast<int>(reply[0]), reply[1]};
  }

  [[noreturn]] void end(const std::string& message, int code) {
    if (ending_.exchange(true))  // another thread of this process is ending the run
      for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
    if (world.rank == 0) print_and_abort(message, code);
    std::string buffer(sizeof(std::int32_t), '\0');
    const std::int32_t code32 = code;
    std::memcpy(buffer.data(), &code32, sizeof code32);
    buffer += message;
    MPI_Request send;
    MPI_Isend(buffer.data(), static_cast<int>(buffer.size()), MPI_CHAR, 0, kTagFault, control, &send);
    // Rank 0 prints it and aborts every process, this one included; if it has not within a
    // grace period (rank 0 itself is gone or stuck), this process does.
    const auto grace = after(10);
    wait_request(send, grace, nullptr);
    std::this_thread::sleep_until(grace);
    print_and_abort(message + " (reported by rank " + std::to_string(world.rank) + "; rank 0 did not end the run)",
                    code);
  }

  void watch(const std::string& what, double seconds) {
    std::lock_guard<std::mutex> lock(m_);
    watch_what_ = what;
    watch_seconds_ = seconds;
    watch_deadline_ = after(seconds);
    watching_ = true;
  }

  void unwatch() {
    std::lock_guard<std::mutex> lock(m_);
    watching_ = false;
  }

 private:
  MpiProcess() {
    int initialised = 0;
    MPI_Initialized(&initialised);
    if (!initialised) {
      promote_mpi_library();
      int provided = 0;
      MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided);
      if (provided < MPI_THREAD_MULTIPLE) {
        std::fprintf(stderr,
                     "error: the MPI library does not provide MPI_THREAD_MULTIPLE (a rank's CPU and stream threads "
                     "call MPI)\n");
        MPI_Abort(MPI_COMM_WORLD, 1);
      }
      std::atexit(at_exit);
    }
    MPI_Comm_rank(MPI_COMM_WORLD, &world.rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world.size);
    MPI_Comm_dup(MPI_COMM_WORLD, &work);
    MPI_Comm_dup(MPI_COMM_WORLD, &control);
    MPI_Comm node;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world.rank, MPI_INFO_NULL, &node);
    MPI_Comm_rank(node, &world.local_rank);
    MPI_Comm_free(&node);
    int first = world.local_rank == 0 ? 1 : 0;
    MPI_Allreduce(&first, &world.nodes, 1, MPI_INT, MPI_SUM, work);
    monitor_ = std::thread([this] { monitor(); });
  }

  static void at_exit() {
    MpiProcess& p = get();
    p.stop_ = true;
    if (p.monitor_.joinable()) p.monitor_.join();
    int finalised = 0;
    MPI_Finalized(&finalised);
    if (!finalised) MPI_Finalize();
  }

  [[noreturn]] void print_and_abort(const std::string& message, int code) {
    std::fprintf(stderr, "error: %s\n", message.c_str());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

  void monitor() {
    while (!stop_) {
      int flag = 0;
      MPI_Status status;
      MPI_Iprobe(MPI_ANY_SOURCE, kTagQuery, control, &flag, &status);
      if (flag) {
        MPI_Recv(nullptr, 0, MPI_BYTE, status.MPI_SOURCE, kTagQuery, control, MPI_STATUS_IGNORE);
        std::int64_t reply[2] = {-1, -1};
        {
          std::lock_guard<std::mutex> lock(m_);
          if (control_) {
            const Progress p = control_->progress(0);
            reply[0] = p.step;
            reply[1] = p.issued;
          }
        }
        MPI_Send(reply, 2, MPI_INT64_T, status.MPI_SOURCE, kTagProgress, control);
        continue;
      }
      if (world.rank == 0) {
        MPI_Iprobe(MPI_ANY_SOURCE, kTagFault, control, &flag, &status);
        if (flag) {
          int count = 0;
          MPI_Get_count(&status, MPI_CHAR, &count);
          std::string buffer(static_cast<std::size_t>(count), '\0');
          MPI_Recv(buffer.data(), count, MPI_CHAR, status.MPI_SOURCE, kTagFault, control, MPI_STATUS_IGNORE);
          std::int32_t code = 1;
          if (buffer.size() >= sizeof code) std::memcpy(&code, buffer.data(), sizeof code);
          end(buffer.size() >= sizeof code ? buffer.substr(sizeof code) : buffer, code);
        }
      }
      std::string expired;
      {
        std::lock_guard<std::mutex> lock(m_);
        if (watching_ && Clock::now() > watch_deadline_) {
          watching_ = false;
          char seconds[32];
          std::snprintf(seconds, sizeof seconds, "%g s", watch_seconds_);
          expired = "timeout: rank " + std::to_string(world.rank) + " waited " + seconds + " for " + watch_what_;
        }
      }
      if (!expired.empty()) end(expired, 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
  }

  std::thread monitor_;
  std::atomic<bool> stop_{false}, ending_{false};
  std::mutex m_, query_m_;
  RunControl* control_ = nullptr;
  bool watching_ = false;
  std::string watch_what_;
  double watch_seconds_ = 0;
  Clock::time_point watch_deadline_;
};

class MpiGroupComm : public HostGroupComm {
 public:
  MpiGroupComm(MPI_Comm comm, std::vector<int> ranks) : comm_(comm), ranks_(std::move(ranks)) {}
  ~MpiGroupComm() override {
    if (comm_ != MPI_COMM_NULL) MPI_Comm_free(&comm_);
  }

  Barrier::Result run(int member, const Call& call, Clock::time_point deadline,
                      const std::atomic<bool>& abort) override {
    // Every member must be in the same op with the same sizes (as the shared-memory version
    // checks): exchange a header first.
    // The planned bytes travel as their bit pattern: compared exactly, as the shared-memory
    // version compares the doubles.
    constexpr int kHeader = 5;
    const std::size_t k = ranks_.size();
    std::int64_t planned_bits = 0;
    static_assert(sizeof planned_bits == sizeof call.planned_bytes);
    std::memcpy(&planned_bits, &call.planned_bytes, sizeof planned_bits);
    const std::int64_t header[kHeader] = {call.op, static_cast<std::int64_t>(call.kind),
                                          static_cast<std::int64_t>(call.send_count),
                                          static_cast<std::int64_t>(call.recv_count), planned_bits};
    std::vector<std::int64_t> headers(kHeader * k);
    MPI_Request request;
    MPI_Iallgather(header, kHeader, MPI_INT64_T, headers.data(), kHeader, MPI_INT64_T, comm_, &request);
    if (auto r = wait_request(request, deadline, &abort); r != Barrier::Result::ok) return r;
    for (std::size_t j = 0; j < k; ++j) {
      const std::int64_t* other = &headers[kHeader * j];
      if (std::equal(header, header + kHeader, other)) continue;
      Call theirs;
      theirs.op = static_cast<int>(other[0]);
      theirs.kind = static_cast<OpKind>(other[1]);
      theirs.send_count = static_cast<std::size_t>(other[2]);
      theirs.recv_count = static_cast<std::size_t>(other[3]);
      std::memcpy(&theirs.planned_bytes, &other[4], sizeof theirs.planned_bytes);
      throw RuntimeError(FaultKind::mismatch, ranks_[member], call.op,
                         "collective mismatch: rank " + std::to_string(ranks_[member]) + " joined " +
                             collective_text(call) + " while rank " + std::to_string(ranks_[j]) + " joined " +
                             collective_text(theirs));
    }
    switch (call.kind) {
      case OpKind::all_gather:
        MPI_Iallgather(call.send, static_cast<int>(call.send_count), MPI_FLOAT, call.recv,
                       static_cast<int>(call.send_count), MPI_FLOAT, comm_, &request);
        break;
      case OpKind::reduce_scatter:
        MPI_Ireduce_scatter_block(call.send, call.recv, static_cast<int>(call.recv_count), MPI_FLOAT, MPI_SUM, comm_,
                                  &request);
        break;
      case OpKind::all_reduce:
        MPI_Iallreduce(call.send, call.recv, static_cast<int>(call.recv_count), MPI_FLOAT, MPI_SUM, comm_, &request);
        break;
      case OpKind::all_to_all:
        MPI_Ialltoall(call.send, static_cast<int>(call.send_count / k), MPI_FLOAT, call.recv,
                      static_cast<int>(call.recv_count / k), MPI_FLOAT, comm_, &request);
        break;
      default:
        return Barrier::Result::ok;
    }
    return wait_request(request, deadline, &abort);
  }

  const std::vector<int>& ranks() const override { return ranks_; }

 private:
  MPI_Comm comm_;
  std::vector<int> ranks_;
};

class MpiLink : public ProcessLink {
 public:
  MpiLink(MpiProcess& p, double timeout_seconds) : p_(p), timeout_(timeout_seconds) {}
  ~MpiLink() override { p_.unwatch(); }

  int rank() const override { return p_.world.rank; }
  int size() const override { return p_.world.size; }
  int local_rank() const override { return p_.world.local_rank; }
  void attach(RunControl* control) override { p_.attach(control); }

  Barrier::Result barrier(Clock::time_point deadline, const std::atomic<bool>& abort) override {
    MPI_Request request;
    MPI_Ibarrier(p_.work, &request);
    return wait_request(request, deadline, &abort);
  }

  std::optional<Progress> progress(int rank) override { return p_.query(rank, std::min(timeout_, 5.0)); }

  void fault(const RuntimeError& error) override { p_.end(error.what(), 1); }

  void broadcast(void* data, std::size_t bytes) override {
    watch("the broadcast from rank 0");
    MPI_Bcast(data, static_cast<int>(bytes), MPI_BYTE, 0, p_.work);
    unwatch();
  }

  std::unique_ptr<HostGroupComm> group_comm(int group, const std::vector<int>& ranks) override {
    const int member = static_cast<int>(std::find(ranks.begin(), ranks.end(), rank()) - ranks.begin());
    watch("the other processes to make the communicator of process group " + std::to_string(group));
    MPI_Comm comm;
    // The instance's first rank names it: instances of a group are disjoint.
    MPI_Comm_split(p_.work, ranks.front(), member, &comm);
    unwatch();
    return std::make_unique<MpiGroupComm>(comm, ranks);
  }

  // Set-up and gathering (communicator creation, ncclCommInitRank, the gather) can take
  // seconds across nodes where an op's wait would not: at least a minute for them.
  void watch(const std::string& what) override { p_.watch(what, std::max(timeout_, 60.0)); }
  void unwatch() override { p_.unwatch(); }

 private:
  MpiProcess& p_;
  double timeout_;
};

}  // namespace

namespace {

MpiWorld mpi_world() { return MpiProcess::get().world; }

void mpi_end(const std::string& message, int exit_code) { MpiProcess::get().end(message, exit_code); }


std::vector<std::string> mpi_gather_text(const std::string& text) {
  MpiProcess& p = MpiProcess::get();
  if (text.size() > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw std::invalid_argument("a process's part of the gather is over 2 GiB (MPI counts are ints): use more processes");
  const bool root = p.world.rank == 0;
  const int processes = p.world.size;
  int length = static_cast<int>(text.size());
  std::vector<int> lengths(root ? processes : 0), offsets(root ? processes : 0);
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, p.work);
  std::size_t total = 0;
  if (root) {
    for (int i = 0; i < processes; ++i) total += static_cast<std::size_t>(lengths[i]);
    if (total > static_cast<std::size_t>(std::numeric_limits<int>::max()))
      throw std::invalid_argument("the gathered texts are over 2 GiB (MPI counts are ints)");
    int at = 0;
    for (int i = 0; i < processes; ++i) {
      offsets[i] = at;
      at += lengths[i];
    }
  }
  std::string all(total, '\0');
  MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0, p.work);
  std::vector<std::string> out;
  if (root)
    for (int i = 0; i < processes; ++i) out.push_back(all.substr(offsets[i], lengths[i]));
  return out;
}

RunResult run_mpi(const Schedule& s, const RunOptions& options) {
  MpiProcess& p = MpiProcess::get();
  const int processes = p.world.size;
  if (options.virtual_world > 0) {
    if (processes > options.virtual_world)
      throw std::invalid_argument("--virtual-world " + std::to_string(options.virtual_world) + ": MPI started " +
                                  std::to_string(processes) +
                                  " processes, more than the world's ranks (each process plays its own rank alone)");
  } else if (processes != s.world_size) {
    throw std::invalid_argument(
        "the schedule's world has " + std::to_string(s.world_size) + " ranks but MPI started " +
        std::to_string(processes) + " processes: start one process per rank (mpirun -np " +
        std::to_string(s.world_size) + ", srun -n " + std::to_string(s.world_size) +
        "), or pass --virtual-world " + std::to_string(s.world_size) + " to have each process play its own rank alone");
  }
  MpiLink link(p, options.timeout_seconds);
  RunResult mine;
  if (options.backend == "cuda") {
    mine = cuda_module().run(s, options, &link);  // throws where the cuda backend is not built
  } else {
    mine = run_host(s, options, &link);
  }

  // Every rank's result to rank 0, as JSON.
  const std::string text =
      nlohmann::json{{"result", rank_result_to_json(mine.ranks.at(0))}, {"device", mine.device}}.dump();
  const bool root = p.world.rank == 0;
  int length = static_cast<int>(text.size());
  std::vector<int> lengths(root ? processes : 0), offsets(root ? processes : 0);
  link.watch("every process's results (rank 0 gathers them)");
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, p.work);
  std::string all;
  if (root) {
    int total = 0;
    for (int i = 0; i < processes; ++i) {
      offsets[i] = total;
      total += lengths[i];
    }
    all.resize(static_cast<std::size_t>(total));
  }
  MPI_Gatherv(text.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0, p.work);
  link.unwatch();

  RunResult out = std::move(mine);
  out.launcher = "mpi";
  out.process_rank = p.world.rank;
  out.processes = processes;
  if (!root) return out;
  out.ranks.clear();
  std::map<std::string, int> devices;  // device text -> processes
  std::vector<std::string> order;
  for (int i = 0; i < processes; ++i) {
    const nlohmann::json j = nlohmann::json::parse(all.substr(offsets[i], lengths[i]));
    out.ranks.push_back(rank_result_from_json(j.at("result")));
    const std::string device = j.at("device").get<std::string>();
    if (devices[device]++ == 0) order.push_back(device);
  }
  std::sort(out.ranks.begin(), out.ranks.end(), [](const RankResult& a, const RankResult& b) { return a.rank < b.rank; });
  std::string device = "mpi: " + std::to_string(processes) + " processes on " + std::to_string(p.world.nodes) +
                       (p.world.nodes == 1 ? " node" : " nodes") + ", one rank each; ";
  if (options.backend == "cuda") {
    for (std::size_t i = 0; i < order.size(); ++i)
      device += (i ? "; " : "") + std::to_string(devices[order[i]]) + " x " + order[i];
  } else {
    device += "host: streams as threads, collectives MPI_Allgather / MPI_Reduce_scatter_block / MPI_Allreduce";
  }
  out.device = device;
  out.notes.push_back("mpi launch: each process played its own rank; rank 0 gathered the results");
  return out;
}

}  // namespace

}  // namespace fsdpsim::runtime::detail

// The mpi module's entry (runtime/internal/modules.h).
extern "C" const fsdpsim::runtime::detail::MpiModule* fsdpsim_mpi_module() {
  namespace d = fsdpsim::runtime::detail;
  static const d::MpiModule table{&d::mpi_world, &d::mpi_end, &d::mpi_gather_text, &d::run_mpi};
  return &table;
}
