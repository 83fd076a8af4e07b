// The cuda backend: one process drives every GPU of one node, one CPU thread per rank.
//
//   streams      one non-blocking CUDA stream per schedule stream the rank uses
//   deps         cudaStreamWaitEvent on the dep's end event (and on the previous collective
//                of the same process group: one at a time, as ProcessGroupNCCL runs them);
//                every op records a start event (after its waits) and an end event
//   cpu_waits    the CPU polls the op's end event (with the run's timeout)
//   memory       runtime::CachingAllocator over cudaMalloc'd segments: PyTorch's policy,
//                real device memory at the planned sizes; cudaMemGetInfo after every new
//                segment and at each step end gives the process's device memory in use
//   collectives  NCCL, one communicator per process-group instance: from ncclCommInitAll
//                when one process drives every GPU; under the mpi launcher (one process per
//                rank) from ncclCommInitRank, with the ncclUniqueIds rank 0 makes and
//                broadcasts over MPI
//                on the planned buffer where one is bound (bind_collective_buffers), else
//                on a scratch buffer of the planned size; --virtual-world: a device copy of
//                the bytes the rank would send and receive instead
//   compute      cuBLAS bf16 GEMMs (gemm_dim^3, fp32 accumulate, then one smaller GEMM for
//                the remainder) doing the op's FLOPs; ops without FLOPs copy device memory
//                so that hbm_bytes are read and written (hbm_bytes / 2 copied)
//   h2d / d2h    copies of comm_bytes through a pinned host buffer
//   host stream  a host function that sleeps for the op's modeled duration (a CPU
//                optimizer step is not reproduced)
//
// Faults: a CUDA or NCCL error names the op and the rank; a wait past the timeout (or an
// asynchronous NCCL error) aborts every communicator with ncclCommAbort so no stream stays
// stuck, and the run ends with the diagnosis (under mpi: rank 0 prints it, MPI_Abort ends
// every process; a blocking ncclCommInitRank is watched against the same timeout).
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "runtime/cuda/cublas_loader.h"
#include "runtime/internal/cuda_entries.h"
#include "runtime/internal/executor.h"

namespace fsdpsim::runtime::detail {

namespace {

using planner::Op;
using planner::OpKind;
using planner::Schedule;

std::string cuda_text(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

std::string nccl_text(ncclResult_t r, ncclComm_t comm) {
  std::string text = ncclGetErrorString(r);
#if defined(NCCL_VERSION_CODE) && NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  const char* last = ncclGetLastError(comm);
  if (last && *last) text += " (" + std::string(last) + ")";
#endif
  return text;
}

void CUDART_CB host_sleep(void* seconds) {
  std::this_thread::sleep_for(clock_seconds(*static_cast<const double*>(seconds)));
}

std::uint16_t to_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return static_cast<std::uint16_t>(bits >> 16);
}

void check_cuda_setup(cudaError_t e, int rank, const std::string& call) {
  if (e != cudaSuccess)
    throw RuntimeError(FaultKind::cuda, rank, -1,
                       "CUDA error: rank " + std::to_string(rank) + ": " + call + ": " + cuda_text(e));
}

struct RankComms {
  std::vector<ncclComm_t> by_group;  // nullptr where the rank has none
  std::vector<int> member;           // its index in the group instance
};

class CudaSegments : public SegmentSource {
 public:
  CudaSegments(RunControl& c, int rank) : c_(c), rank_(rank) {}
  void* map(std::int64_t bytes) override {
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, static_cast<std::size_t>(bytes));
    if (e == cudaErrorMemoryAllocation) {
      cudaGetLastError();  // clear it: the allocator frees its cache and tries again
      return nullptr;
    }
    if (e != cudaSuccess)
      throw RuntimeError(FaultKind::cuda, rank_, -1,
                         "CUDA error: rank " + std::to_string(rank_) + ": cudaMalloc of " + std::to_string(bytes) +
                             " bytes: " + cuda_text(e));
    sample();
    return p;
  }
  void unmap(void* base, std::int64_t) override {
    if (!c_.aborted()) cudaFree(base);  // after an abort a stream may still hold it; the process ends anyway
  }
  void sample() {
    std::size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) == cudaSuccess)
      peak_used = std::max(peak_used, static_cast<std::int64_t>(total - free_bytes));
  }
  std::int64_t used_now() {
    std::size_t free_bytes = 0, total = 0;
    if (cudaMemGetInfo(&free_bytes, &total) != cudaSuccess) return -1;
    return static_cast<std::int64_t>(total - free_bytes);
  }
  std::int64_t peak_used = -1;

 private:
  RunControl& c_;
  int rank_;
};

class CudaRankDevice : public RankDevice {
 public:
  CudaRankDevice(RunControl& c, int position, int device, const std::vector<double>& durations, RankComms comms,
                 const std::vector<CollectiveBinding>& bindings)
      : c_(c),
        s_(c.schedule),
        o_(c.options),
        position_(position),
        rank_(c.played[position]),
        device_(device),
        durations_(durations),
        comms_(std::move(comms)),
        bindings_(bindings),
        previous_in_group_(planner::previous_on_communicator(s_)),
        workspaces_(cublas_workspaces(s_)),
        segments_(c, rank_) {}

  ~CudaRankDevice() override {
    if (!initialized_ || c_.aborted()) return;  // after an abort, leave the device alone
    cudaSetDevice(device_);
    cudaDeviceSynchronize();
    for (cudaEvent_t e : start_) cudaEventDestroy(e);
    for (cudaEvent_t e : end_) cudaEventDestroy(e);
    if (base_) cudaEventDestroy(base_);
    for (cudaStream_t st : streams_)
      if (st) cudaStreamDestroy(st);
    if (cublas_) cublas().destroy(cublas_);
    for (void* p : {gemm_a_, gemm_b_, gemm_c_, copy_src_, copy_dst_, comm_scratch_})
      if (p) cudaFree(p);
    if (pinned_) cudaFreeHost(pinned_);
  }

  SegmentSource& segments() override { return segments_; }

  void thread_init() override {
    check(cudaSetDevice(device_), -1, "cudaSetDevice");
    initialized_ = true;
    std::vector<bool> used(planner::kStreamCount, false);
    for (const Op& op : s_.ops) used[static_cast<int>(op.stream)] = true;
    streams_.assign(planner::kStreamCount, nullptr);
    for (int i = 0; i < planner::kStreamCount; ++i) {
      if (!used[i]) continue;
      check(cudaStreamCreateWithFlags(&streams_[i], cudaStreamNonBlocking), -1, "cudaStreamCreateWithFlags");
      if (first_stream_ < 0) first_stream_ = i;
    }
    start_.assign(s_.ops.size(), nullptr);
    end_.assign(s_.ops.size(), nullptr);
    for (std::size_t i = 0; i < s_.ops.size(); ++i) {
      check(cudaEventCreate(&start_[i]), -1, "cudaEventCreate");
      check(cudaEventCreate(&end_[i]), -1, "cudaEventCreate");
    }
    check(cudaEventCreate(&base_), -1, "cudaEventCreate");

    // Scratch the plan does not hold: GEMM operands, copy buffers, collective buffers with
    // no planned allocation to work in, a pinned host buffer for h2d/d2h.
    bool gemm = false, copies = false, host_copies = false;
    double comm_scratch = 0;
    for (const Op& op : s_.ops) {
      if (op.stream == planner::Stream::host) continue;
      if (planner::is_collective(op.kind)) {
        comm_scratch = std::max(comm_scratch, collective_scratch_bytes(op));
        if (o_.virtual_world > 0) copies = true;
      } else if (op.kind == OpKind::h2d || op.kind == OpKind::d2h) {
        host_copies = copies = true;
      } else if (op.flops > 0) {
        gemm = true;
      } else if (op.hbm_bytes > 0) {
        copies = true;
      }
    }
    const std::size_t d = static_cast<std::size_t>(o_.gemm_dim);
    const std::size_t chunk = static_cast<std::size_t>(o_.copy_chunk_bytes);
    if (gemm) {
      const std::size_t bytes = d * d * 2;
      device_alloc(&gemm_a_, bytes, "GEMM operand");
      device_alloc(&gemm_b_, bytes, "GEMM operand");
      device_alloc(&gemm_c_, bytes, "GEMM output");
      std::vector<std::uint16_t> host(d * d);
      std::mt19937 rng(1234 + rank_);
      std::uniform_real_distribution<float> u(-1, 1);
      for (auto& v : host) v = to_bf16(u(rng));
      check(cudaMemcpy(gemm_a_, host.data(), bytes, cudaMemcpyHostToDevice), -1, "cudaMemcpy");
      check(cudaMemcpy(gemm_b_, host.data(), bytes, cudaMemcpyHostToDevice), -1, "cudaMemcpy");
      try {
        if (cublas().create(&cublas_) != CUBLAS_STATUS_SUCCESS)
          throw std::runtime_error("cublasCreate failed");
      } catch (const std::runtime_error& e) {
        throw RuntimeError(FaultKind::cuda, rank_, -1, "CUDA error: rank " + std::to_string(rank_) + ": " + e.what());
      }
    }
    if (copies) {
      device_alloc(&copy_src_, chunk, "copy source");
      device_alloc(&copy_dst_, chunk, "copy destination");
      check(cudaMemset(copy_src_, 1, chunk), -1, "cudaMemset");
    }
    if (host_copies) check(cudaMallocHost(&pinned_, chunk), -1, "cudaMallocHost");
    if (comm_scratch > 0) device_alloc(&comm_scratch_, static_cast<std::size_t>(comm_scratch), "collective buffer");
    check(cudaDeviceSynchronize(), -1, "cudaDeviceSynchronize");
    used_before_ = segments_.used_now();
    segments_.peak_used = std::max(segments_.peak_used, used_before_);
  }

  void begin_step(int) override {
    cudaStream_t st = streams_[first_stream_];
    check(cudaEventRecord(base_, st), -1, "cudaEventRecord");
    check(cudaEventSynchronize(base_), -1, "cudaEventSynchronize");
    host_base_ = Clock::now();
  }

  void issue(const Op& op, const std::vector<void*>& pointers) override {
    cudaStream_t st = streams_[static_cast<int>(op.stream)];
    for (int d : op.deps) check(cudaStreamWaitEvent(st, end_[d], 0), op.id, "cudaStreamWaitEvent");
    // One collective of a process group at a time, in issue order (ProcessGroupNCCL's one stream per group).
    if (const int prev = previous_in_group_[op.id]; prev >= 0 && s_.ops[prev].stream != op.stream)
      check(cudaStreamWaitEvent(st, end_[prev], 0), op.id, "cudaStreamWaitEvent");
    check(cudaEventRecord(start_[op.id], st), op.id, "cudaEventRecord");
    if (op.stream == planner::Stream::host) {
      check(cudaLaunchHostFunc(st, host_sleep, const_cast<double*>(&durations_[op.id])), op.id, "cudaLaunchHostFunc");
    } else if (planner::is_collective(op.kind)) {
      collective(op, st, pointers);
    } else if (op.kind == OpKind::h2d || op.kind == OpKind::d2h) {
      const bool to_device = op.kind == OpKind::h2d;
      for_chunks(op.comm_bytes, [&](std::size_t n) {
        check(cudaMemcpyAsync(to_device ? copy_dst_ : pinned_, to_device ? pinned_ : copy_dst_, n,
                              to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost, st),
              op.id, "cudaMemcpyAsync");
      });
    } else if (op.kind == OpKind::wait) {
      // An event only.
    } else if (op.flops > 0) {
      gemms(op, st, pointers);
    } else if (op.hbm_bytes > 0) {
      for_chunks(op.hbm_bytes / 2, [&](std::size_t n) {
        check(cudaMemcpyAsync(copy_dst_, copy_src_, n, cudaMemcpyDeviceToDevice, st), op.id, "cudaMemcpyAsync");
      });
    }
    check(cudaEventRecord(end_[op.id], st), op.id, "cudaEventRecord");
  }

  void wait_done(int op) override {
    const auto deadline = c_.deadline();
    for (;;) {
      cudaError_t e = cudaEventQuery(end_[op]);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) check(e, op, "waiting for the op (cudaEventQuery)");
      check_nccl_async();
      if (c_.aborted()) throw Aborted{};
      if (Clock::now() > deadline) c_.timeout(position_, op, c_.op_text(op) + " to finish");
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }

  bool done(int op) override { return cudaEventQuery(end_[op]) == cudaSuccess; }

  std::vector<OpTiming> end_step() override {
    for (const Op& op : s_.ops) wait_done(op.id);
    segments_.sample();
    std::vector<OpTiming> out(s_.ops.size());
    for (const Op& op : s_.ops) {
      float start_ms = 0, end_ms = 0;
      check(cudaEventElapsedTime(&start_ms, base_, start_[op.id]), op.id, "cudaEventElapsedTime");
      check(cudaEventElapsedTime(&end_ms, base_, end_[op.id]), op.id, "cudaEventElapsedTime");
      out[op.id] = {start_ms * 1e-3, end_ms * 1e-3};
    }
    return out;
  }

  double now_seconds() override { return std::chrono::duration<double>(Clock::now() - host_base_).count(); }

  void finish(RankResult& result) override {
    result.device_used_before_bytes = used_before_;
    result.device_used_peak_bytes = segments_.peak_used;
    result.scratch_bytes = scratch_bytes_;
  }

 private:
  [[noreturn]] void fail_cuda(cudaError_t e, int op, const std::string& call) {
    throw RuntimeError(FaultKind::cuda, rank_, op,
                       "CUDA error: rank " + std::to_string(rank_) + (op >= 0 ? ", " + c_.op_text(op) : std::string()) +
                           ": " + call + ": " + cuda_text(e));
  }
  void check(cudaError_t e, int op, const std::string& call) {
    if (e != cudaSuccess) fail_cuda(e, op, call);
  }

  void device_alloc(void** p, std::size_t bytes, const std::string& what) {
    cudaError_t e = cudaMalloc(p, bytes);
    if (e == cudaErrorMemoryAllocation)
      throw RuntimeError(FaultKind::out_of_memory, rank_, -1,
                         "out of memory: rank " + std::to_string(rank_) + ": the runtime's " + what + " of " +
                             std::to_string(bytes) + " bytes does not fit before the step starts");
    check(e, -1, "cudaMalloc (" + what + ")");
    scratch_bytes_ += static_cast<std::int64_t>(bytes);
  }

  template <typename F>
  void for_chunks(double bytes, F&& f) {
    std::size_t left = static_cast<std::size_t>(std::max(0.0, bytes));
    const std::size_t chunk = static_cast<std::size_t>(o_.copy_chunk_bytes);
    while (left > 0) {
      const std::size_t n = std::min(left, chunk);
      f(n);
      left -= n;
    }
  }

  void gemms(const Op& op, cudaStream_t st, const std::vector<void*>& pointers) {
    if (cublas().set_stream(cublas_, st) != CUBLAS_STATUS_SUCCESS)
      throw RuntimeError(
          FaultKind::cuda, rank_, op.id,
          "CUDA error: rank " + std::to_string(rank_) + ", " + c_.op_text(op.id) + ": cublasSetStream failed");
    // The plan's workspace for this op's thread, as PyTorch hands its handles theirs (after
    // cublasSetStream, which resets the workspace to cuBLAS's own pool). Without one (a
    // hand-written schedule) cuBLAS keeps its own, outside the caching allocator.
    const int workspace = cublas_workspace_of(workspaces_, op);
    if (workspace >= 0 && pointers[workspace] &&
        cublas().set_workspace(cublas_, pointers[workspace],
                               static_cast<std::size_t>(s_.allocations[workspace].bytes)) != CUBLAS_STATUS_SUCCESS)
      throw RuntimeError(
          FaultKind::cuda, rank_, op.id,
          "CUDA error: rank " + std::to_string(rank_) + ", " + c_.op_text(op.id) + ": cublasSetWorkspace failed");
    // The work the op's kernels execute (a causal attention kernel skips its masked half), as
    // square bf16 GEMMs.
    const double flops = planner::executed_flops(op, s_);
    const double d = o_.gemm_dim;
    const double tile = 2 * d * d * d;
    const auto full = static_cast<long long>(std::floor(flops / tile));
    const double rest = flops - static_cast<double>(full) * tile;
    int rest_rows = static_cast<int>(std::ceil(rest / (2 * d * d)));
    rest_rows = std::min(o_.gemm_dim, (rest_rows + 63) / 64 * 64);
    const float alpha = 1, beta = 0;
    auto gemm = [&](int m) {
      cublasStatus_t r = cublas().gemm_ex(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, m, o_.gemm_dim, o_.gemm_dim, &alpha, gemm_a_,
                                      CUDA_R_16BF, m, gemm_b_, CUDA_R_16BF, o_.gemm_dim, &beta, gemm_c_, CUDA_R_16BF, m,
                                      CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
      if (r != CUBLAS_STATUS_SUCCESS)
        throw RuntimeError(FaultKind::cuda, rank_, op.id,
                           "CUDA error: rank " + std::to_string(rank_) + ", " + c_.op_text(op.id) +
                               ": cublasGemmEx failed with status " + std::to_string(static_cast<int>(r)));
    };
    for (long long i = 0; i < full; ++i) gemm(o_.gemm_dim);
    if (rest > 0 && rest_rows > 0) gemm(rest_rows);
  }

  // Scratch a collective needs where the plan gives it no buffer: its buffer; an all-to-all
  // also its receive buffer (send and receive must not overlap), after the send buffer.
  double collective_scratch_bytes(const Op& op) const {
    const CollectiveBinding& bind = bindings_[op.id];
    double bytes = bind.main_alloc < 0 ? op.comm_bytes : 0;
    if (op.kind == OpKind::all_to_all && bind.output_alloc < 0) bytes += op.comm_bytes;
    return bytes;
  }

  void collective(const Op& op, cudaStream_t st, const std::vector<void*>& pointers) {
    const CollectiveBinding& bind = bindings_[op.id];
    char* main = static_cast<char*>(bind.main_alloc >= 0 && pointers[bind.main_alloc] ? pointers[bind.main_alloc]
                                                                                      : comm_scratch_);
    if (!main || op.comm_bytes <= 0) return;
    const CollectiveBytes b = collective_bytes(s_, op);
    if (o_.virtual_world > 0) {
      // The bytes a ring moves in and out of this rank, as one local copy into the buffer.
      const double limit = op.comm_bytes;
      for_chunks(b.traffic_bytes, [&](std::size_t n) {
        n = std::min<std::size_t>(n, static_cast<std::size_t>(limit));
        check(cudaMemcpyAsync(main, copy_src_, n, cudaMemcpyDeviceToDevice, st), op.id, "cudaMemcpyAsync");
      });
      return;
    }
    ncclComm_t comm = comms_.by_group[op.group];
    const int member = comms_.member[op.group];
    const std::size_t k = static_cast<std::size_t>(b.ranks);
    ncclResult_t r = ncclSuccess;
    std::string call;
    switch (op.kind) {
      case OpKind::all_gather: {
        const std::size_t n = static_cast<std::size_t>(op.comm_bytes) / k / 2;  // bf16 per rank
        if (n == 0) return;
        call = "ncclAllGather";
        r = ncclAllGather(main + member * n * 2, main, n, ncclBfloat16, comm, st);
        break;
      }
      case OpKind::reduce_scatter: {
        const std::size_t n = static_cast<std::size_t>(op.comm_bytes) / k / 4;  // fp32 per rank
        if (n == 0) return;
        char* out = bind.output_alloc >= 0 && pointers[bind.output_alloc]
                        ? static_cast<char*>(pointers[bind.output_alloc])
                        : main + member * n * 4;
        call = "ncclReduceScatter";
        r = ncclReduceScatter(main, out, n, ncclFloat, ncclSum, comm, st);
        break;
      }
      case OpKind::all_reduce: {
        const std::size_t n = static_cast<std::size_t>(op.comm_bytes) / 4;
        if (n == 0) return;
        call = "ncclAllReduce";
        r = ncclAllReduce(main, main, n, ncclFloat, ncclSum, comm, st);
        break;
      }
      case OpKind::all_to_all: {
        // NCCL 2.28 has no all-to-all: one ncclSend and one ncclRecv per member inside a group,
        // as nccl-tests (src/alltoall.cu) and PyTorch's ProcessGroupNCCL::alltoall_base do.
        // Chunk j of the send buffer goes to member j; member j's chunk lands at j x chunk.
        const std::size_t chunk = static_cast<std::size_t>(op.comm_bytes) / k;  // bytes per member
        if (chunk == 0) return;
        char* recv = bind.output_alloc >= 0 && pointers[bind.output_alloc]
                         ? static_cast<char*>(pointers[bind.output_alloc])
                         : static_cast<char*>(comm_scratch_) +
                               (main == comm_scratch_ ? static_cast<std::size_t>(op.comm_bytes) : 0);
        call = "ncclSend/ncclRecv (grouped)";
        r = ncclGroupStart();
        for (std::size_t peer = 0; peer < k && r == ncclSuccess; ++peer) {
          r = ncclSend(main + peer * chunk, chunk, ncclInt8, static_cast<int>(peer), comm, st);
          if (r == ncclSuccess) r = ncclRecv(recv + peer * chunk, chunk, ncclInt8, static_cast<int>(peer), comm, st);
        }
        const ncclResult_t ended = ncclGroupEnd();
        if (r == ncclSuccess) r = ended;
        break;
      }
      default:
        return;
    }
    if (r != ncclSuccess && r != ncclInProgress)
      throw RuntimeError(FaultKind::nccl, rank_, op.id,
                         "NCCL error: rank " + std::to_string(rank_) + ", " + c_.op_text(op.id) + " (group \"" +
                             s_.groups[op.group].name + "\"): " + call + ": " + nccl_text(r, comm));
  }

  void check_nccl_async() {
    for (std::size_t g = 0; g < comms_.by_group.size(); ++g) {
      ncclComm_t comm = comms_.by_group[g];
      if (!comm) continue;
      ncclResult_t state = ncclSuccess;
      if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) continue;
      if (state == ncclSuccess || state == ncclInProgress) continue;
      int op = -1;
      for (const Op& o : s_.ops)
        if (planner::is_collective(o.kind) && o.group == static_cast<int>(g) && !done(o.id)) {
          op = o.id;
          break;
        }
      throw RuntimeError(FaultKind::nccl, rank_, op,
                         "NCCL error: rank " + std::to_string(rank_) +
                             (op >= 0 ? ", " + c_.op_text(op) : std::string()) + " (group \"" + s_.groups[g].name +
                             "\"): asynchronous error: " + nccl_text(state, comm));
    }
  }

  RunControl& c_;
  const Schedule& s_;
  const RunOptions& o_;
  const int position_, rank_, device_;
  const std::vector<double>& durations_;
  RankComms comms_;
  const std::vector<CollectiveBinding>& bindings_;
  const std::vector<int> previous_in_group_;
  const CublasWorkspaces workspaces_;
  CudaSegments segments_;
  bool initialized_ = false;
  std::vector<cudaStream_t> streams_;
  int first_stream_ = -1;
  std::vector<cudaEvent_t> start_, end_;
  cudaEvent_t base_ = nullptr;
  Clock::time_point host_base_ = Clock::now();
  cublasHandle_t cublas_ = nullptr;
  void *gemm_a_ = nullptr, *gemm_b_ = nullptr, *gemm_c_ = nullptr;
  void *copy_src_ = nullptr, *copy_dst_ = nullptr, *comm_scratch_ = nullptr;
  void* pinned_ = nullptr;
  std::int64_t scratch_bytes_ = 0;
  std::int64_t used_before_ = -1;
};

}  // namespace

RunResult run_cuda(const Schedule& s, const RunOptions& options, ProcessLink* link) {
  RunOptions o = options;
  if (o.warmup_steps < 0) o.warmup_steps = 1;
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0)
    throw RuntimeError(
        FaultKind::device, -1, -1,
        "no CUDA device: " + (e != cudaSuccess ? cuda_text(e) : std::string("cudaGetDeviceCount found none")));
  const bool virtual_world = o.virtual_world > 0;
  const int ranks = link || virtual_world ? 1 : s.world_size;
  // The device of each position: first_device + rank; under mpi, --device or the process's
  // local rank on its node (device 0 where the process sees a single GPU, as under
  // srun --gpus-per-task=1 or CUDA_VISIBLE_DEVICES set per process).
  std::vector<int> device_of(ranks, 0);
  if (link) {
    int d = o.mpi_device >= 0 ? o.mpi_device : count == 1 ? 0 : link->local_rank();
    if (d >= count)
      throw RuntimeError(FaultKind::device, link->rank(), -1,
                         "rank " + std::to_string(link->rank()) + " (local rank " + std::to_string(link->local_rank()) +
                             " on its node) would run on device " + std::to_string(d) + " but its process sees " +
                             std::to_string(count) +
                             " GPU(s): start at most one process per GPU on each node, or give --device");
    device_of[0] = d;
  } else {
    for (int p = 0; p < ranks; ++p) device_of[p] = o.first_device + p;
  }
  if (!link && (o.first_device < 0 || o.first_device + ranks > count))
    throw RuntimeError(
        FaultKind::device, -1, -1,
        "the schedule's world has " + std::to_string(s.world_size) + " ranks but this process sees " +
            std::to_string(count) + " GPU(s) from device " + std::to_string(o.first_device) +
            ": one process drives the GPUs of one node; start one process per GPU with mpirun or srun (--launcher "
            "mpi), or use --virtual-world " +
            std::to_string(s.world_size) + " to play rank 0 on one GPU");
  const std::vector<double> durations = durations_for(s, o);
  const std::vector<CollectiveBinding> bindings = bind_collective_buffers(s);
  std::vector<int> played;
  if (link)
    played.push_back(link->rank());
  else
    for (int r = 0; r < ranks; ++r) played.push_back(r);
  RunControl control(s, o, played, link);

  std::vector<RankComms> comms(ranks);
  for (auto& rc : comms) {
    rc.by_group.assign(s.groups.size(), nullptr);
    rc.member.assign(s.groups.size(), 0);
  }
  std::vector<ncclComm_t> all_comms;
  struct CommGuard {
    CommGuard(std::vector<ncclComm_t>& c, RunControl& rc) : comms(c), control(rc) {}
    std::vector<ncclComm_t>& comms;
    RunControl& control;
    std::mutex m;
    bool aborted = false;
    void abort() {
      std::lock_guard<std::mutex> lock(m);
      if (aborted) return;
      aborted = true;
      for (ncclComm_t c : comms) ncclCommAbort(c);
    }
    ~CommGuard() {
      if (!aborted && !control.aborted())
        for (ncclComm_t c : comms) ncclCommDestroy(c);
    }
  } guard(all_comms, control);
  if (link && !virtual_world) {
    // One ncclUniqueId per process-group instance, made by rank 0 and broadcast; every process
    // joins the instances it belongs to, group by group in the same order.
    check_cuda_setup(cudaSetDevice(device_of[0]), link->rank(), "cudaSetDevice");
    const std::vector<bool> used = groups_with_collectives(s);
    std::vector<std::pair<int, std::vector<int>>> instances;  // (group, ranks)
    for (std::size_t g = 0; g < s.groups.size(); ++g)
      if (used[g])
        for (auto& instance : group_instances(s, static_cast<int>(g)))
          instances.emplace_back(static_cast<int>(g), std::move(instance));
    std::vector<ncclUniqueId> ids(instances.size());
    if (link->rank() == 0)
      for (std::size_t i = 0; i < ids.size(); ++i) {
        ncclResult_t r = ncclGetUniqueId(&ids[i]);
        if (r != ncclSuccess)
          throw RuntimeError(FaultKind::nccl, 0, -1, std::string("NCCL error: rank 0: ncclGetUniqueId: ") +
                                                         ncclGetErrorString(r));
      }
    if (!ids.empty()) link->broadcast(ids.data(), ids.size() * sizeof(ncclUniqueId));
    for (std::size_t i = 0; i < instances.size(); ++i) {
      const auto& [g, instance] = instances[i];
      auto it = std::find(instance.begin(), instance.end(), link->rank());
      if (it == instance.end()) continue;
      const int member = static_cast<int>(it - instance.begin());
      const std::string what = "ncclCommInitRank of group \"" + s.groups[g].name + "\" (ranks " +
                               std::to_string(instance.front()) + "-" + std::to_string(instance.back()) +
                               "): a member never joined";
      ncclComm_t comm = nullptr;
      link->watch(what);
      ncclResult_t r = ncclCommInitRank(&comm, static_cast<int>(instance.size()), ids[i], member);
      link->unwatch();
      if (r != ncclSuccess)
        throw RuntimeError(FaultKind::nccl, link->rank(), -1,
                           "NCCL error: rank " + std::to_string(link->rank()) + ": ncclCommInitRank for group \"" +
                               s.groups[g].name + "\" (ranks " + std::to_string(instance.front()) + "-" +
                               std::to_string(instance.back()) + "): " + ncclGetErrorString(r));
      comms[0].by_group[g] = comm;
      comms[0].member[g] = member;
      all_comms.push_back(comm);
    }
    control.add_waker([&guard] { guard.abort(); });
  } else if (!virtual_world) {
    const std::vector<bool> used = groups_with_collectives(s);
    for (std::size_t g = 0; g < s.groups.size(); ++g) {
      if (!used[g]) continue;
      for (const auto& instance : group_instances(s, static_cast<int>(g))) {
        std::vector<int> devs;
        for (int r : instance) devs.push_back(o.first_device + r);
        std::vector<ncclComm_t> cs(instance.size(), nullptr);
        ncclResult_t r = ncclCommInitAll(cs.data(), static_cast<int>(cs.size()), devs.data());
        if (r != ncclSuccess)
          throw RuntimeError(FaultKind::nccl, instance.front(), -1,
                             "NCCL error: ncclCommInitAll for group \"" + s.groups[g].name + "\" (ranks " +
                                 std::to_string(instance.front()) + "-" + std::to_string(instance.back()) +
                                 "): " + ncclGetErrorString(r));
        for (std::size_t m = 0; m < instance.size(); ++m) {
          comms[instance[m]].by_group[g] = cs[m];
          comms[instance[m]].member[g] = static_cast<int>(m);
          all_comms.push_back(cs[m]);
        }
      }
    }
    control.add_waker([&guard] { guard.abort(); });
  }

  std::vector<std::unique_ptr<RankDevice>> devices;
  for (int p = 0; p < ranks; ++p)
    devices.push_back(std::make_unique<CudaRankDevice>(control, p, device_of[p], durations, comms[p], bindings));
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, device_of[0]);
  int runtime_version = 0;
  cudaRuntimeGetVersion(&runtime_version);
  // Under mpi the count is added by run_mpi, which gathers every process's text.
  std::string text = (link ? std::string() : std::to_string(ranks) + " x ") + prop.name + " (CUDA runtime " +
                     std::to_string(runtime_version / 1000) + "." + std::to_string(runtime_version % 1000 / 10) +
                     ", NCCL " + std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + ")";
  RunResult result = execute(control, devices, "cuda", text);
  int bound = 0, collectives = 0;
  for (const Op& op : s.ops)
    if (planner::is_collective(op.kind) && op.comm_bytes > 0) {
      ++collectives;
      if (bindings[op.id].main_alloc >= 0) ++bound;
    }
  result.notes.push_back(
      std::to_string(bound) + " of " + std::to_string(collectives) +
      " collectives worked in their planned buffer; the others in a scratch buffer of the planned size");
  result.notes.push_back("compute: bf16 GEMMs of " + std::to_string(o.gemm_dim) +
                         "^3 for the FLOPs the op's kernels execute (a causal attention kernel's masked half skipped); "
                         "ops without FLOPs copy hbm_bytes/2");
  if (virtual_world)
    result.notes.push_back("virtual world: " +
                           (link ? "each process plays its own rank of " : std::string("rank 0 of ")) +
                           std::to_string(s.world_size) +
                           " on one GPU; collectives are device copies of the bytes a rank sends and receives");
  return result;
}

}  // namespace fsdpsim::runtime::detail
