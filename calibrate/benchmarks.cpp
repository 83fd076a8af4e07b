// The micro-benchmarks. Collectives, the launch overhead and (on cuda) GEMMs, copies and the
// interference run as small Schedules through runtime::run_schedule, so they exercise exactly
// the code paths `run` and `verify` use (NCCL / cuBLAS / CUDA events on cuda; threads and
// shared-memory collectives on host). On the host backend compute only waits, so GEMMs and
// copies there are real CPU work done here.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <map>
#include <set>
#include <stdexcept>
#include <thread>
#include <tuple>

#include "calibrate/calibrate.h"
#include "planner/plan.h"
#include "runtime/gemm_timing.h"
#include "runtime/runtime.h"

namespace fsdpsim::calibrate {

using planner::CollectiveGroup;
using planner::CollectiveKind;
using planner::Op;
using planner::OpKind;
using planner::Schedule;
using planner::Stream;

namespace {

using Clock = std::chrono::steady_clock;

OpKind op_kind_of(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::all_gather: return OpKind::all_gather;
    case CollectiveKind::reduce_scatter: return OpKind::reduce_scatter;
    case CollectiveKind::all_to_all: return OpKind::all_to_all;
    default: return OpKind::all_reduce;
  }
}

Stream stream_of(CollectiveKind k) {
  switch (k) {
    case CollectiveKind::all_gather: return Stream::all_gather;
    case CollectiveKind::reduce_scatter: return Stream::reduce_scatter;
    case CollectiveKind::all_to_all: return Stream::all_to_all;
    default: return Stream::all_reduce;
  }
}

std::string span_text(const planner::ProcessGroup& g) { return calibrate::span_text(CollectiveGroup{g.ranks, g.nodes}); }

// A benchmark schedule over `world` ranks with one process group: `group` (its stride decides
// how its instances tile the world, planner::group_members); a world of one instance makes it
// a block.
Schedule bench_schedule(const std::string& name, planner::ProcessGroup group, int world) {
  Schedule s;
  s.name = name;
  s.world_size = world;
  if ((world / group.ranks) % group.stride != 0) group.stride = 1;
  s.groups.push_back(group);
  return s;
}

Op& add_op(Schedule& s, OpKind kind, Stream stream, const std::string& name) {
  Op op;
  op.id = static_cast<int>(s.ops.size());
  op.kind = kind;
  op.stream = stream;
  op.name = name;
  s.ops.push_back(op);
  return s.ops.back();
}

runtime::RunOptions run_options(const Options& o, const Schedule& s, int steps) {
  runtime::RunOptions r;
  r.backend = o.backend;
  r.warmup_steps = o.warmup;
  r.steps = steps;
  // host: no modeled padding, only the real work
  r.costs = planner::costs_from_durations(s, std::vector<double>(s.ops.size(), 0.0), "none (calibration measures the real work)");
  r.check_data = false;
  r.max_buffer_bytes = 0;
  r.timeout_seconds = o.timeout_seconds;
  r.first_device = o.first_device;
  r.launcher = o.launcher;
  return r;
}

// Seconds op `i` took in measured step `step`: from the moment its last rank started it to the
// moment its last rank finished (ranks start a collective at slightly different times; the
// collective completes for everyone only once the last one joined).
double op_seconds(const runtime::RunResult& r, std::size_t step, std::size_t i) {
  double start = -1, end = -1;
  for (const runtime::RankResult& rank : r.ranks) {
    const runtime::OpTiming& t = rank.steps.at(step).at(i);
    start = std::max(start, t.start_seconds);
    end = std::max(end, t.end_seconds);
  }
  return std::max(end - start, 0.0);
}

// ---- real CPU work for the host backend ----------------------------------------------------------

float bf16_to_float(std::uint16_t v) {
  const std::uint32_t bits = static_cast<std::uint32_t>(v) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

std::uint16_t float_to_bf16(float f) {
  std::uint32_t bits;
  std::memcpy(&bits, &f, sizeof bits);
  return static_cast<std::uint16_t>(bits >> 16);
}

// C[m,n] = A[m,k] B[k,n], row-major, fp32 accumulation (i-k-j order: the inner loop is a
// contiguous axpy the compiler vectorises). bf16 operands are stored as bf16 and widened.
template <typename T, typename Load>
void cpu_gemm(const T* a, const T* b, float* c, std::int64_t m, std::int64_t n, std::int64_t k, Load load) {
  for (std::int64_t i = 0; i < m; ++i) {
    float* ci = c + i * n;
    std::fill(ci, ci + n, 0.0f);
    for (std::int64_t kk = 0; kk < k; ++kk) {
      const float av = load(a[i * k + kk]);
      const T* bk = b + kk * n;
      for (std::int64_t j = 0; j < n; ++j) ci[j] += av * load(bk[j]);
    }
  }
}

struct CpuGemm {
  GemmShape shape;
  bool bf16 = true;
  std::vector<float> a32, b32, c;
  std::vector<std::uint16_t> a16, b16;

  CpuGemm(const GemmShape& s, bool is_bf16) : shape(s), bf16(is_bf16) {
    const std::size_t na = static_cast<std::size_t>(s.m * s.k), nb = static_cast<std::size_t>(s.k * s.n);
    c.assign(static_cast<std::size_t>(s.m * s.n), 0.0f);
    if (bf16) {
      a16.resize(na);
      b16.resize(nb);
      for (std::size_t i = 0; i < na; ++i) a16[i] = float_to_bf16(static_cast<float>((i * 7919) % 97) / 97.0f - 0.5f);
      for (std::size_t i = 0; i < nb; ++i) b16[i] = float_to_bf16(static_cast<float>((i * 104729) % 89) / 89.0f - 0.5f);
    } else {
      a32.resize(na);
      b32.resize(nb);
      for (std::size_t i = 0; i < na; ++i) a32[i] = static_cast<float>((i * 7919) % 97) / 97.0f - 0.5f;
      for (std::size_t i = 0; i < nb; ++i) b32[i] = static_cast<float>((i * 104729) % 89) / 89.0f - 0.5f;
    }
  }
  double run() {
    const auto t0 = Clock::now();
    if (bf16)
      cpu_gemm(a16.data(), b16.data(), c.data(), shape.m, shape.n, shape.k, bf16_to_float);
    else
      cpu_gemm(a32.data(), b32.data(), c.data(), shape.m, shape.n, shape.k, [](float v) { return v; });
    return std::chrono::duration<double>(Clock::now() - t0).count();
  }
};

Stats repeat(int warmup, int reps, const std::function<double()>& once) {
  for (int i = 0; i < warmup; ++i) once();
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) t.push_back(once());
  return stats_of(t);
}

void say(const Options& o, const std::string& line) {
  if (o.progress) o.progress(line);
}

double peak_for(const planner::Scenario& s, const std::string& dtype) {
  const auto& peaks = s.cluster.gpu.peak_flops;
  auto it = peaks.find(dtype);
  return it == peaks.end() ? 0 : it->second;
}

void validate(const Options& o) {
  auto bad = [](const std::string& what) { throw std::invalid_argument("calibrate: " + what); };
  if (o.backend != "host" && o.backend != "cuda") bad("--backend must be host or cuda, got \"" + o.backend + "\"");
  if (o.repetitions < 1) bad("--reps must be at least 1");
  if (o.warmup < 0) bad("--warmup must be non-negative");
  if (!(o.min_bytes >= 4)) bad("--min-bytes must be at least 4");
  if (!(o.max_bytes >= o.min_bytes)) bad("--max-bytes must be at least --min-bytes");
  if (!(o.size_step > 1)) bad("--size-step must be above 1");
  if (o.host_max_bytes < 0 || !(o.host_max_gemm_flops > 0) || !(o.host_max_copy_bytes >= 1024))
    bad("host caps must be positive");
  if (!(o.timeout_seconds > 0)) bad("--timeout must be positive");
}

}  // namespace

// ---- what the scenario uses --------------------------------------------------------------------------

std::vector<planner::GemmShape> step_gemm_shapes(const planner::Scenario& scenario) {
  const planner::Plan plan = planner::plan_step(scenario);
  std::vector<planner::GemmShape> shapes;
  std::set<std::tuple<double, double, double, bool>> seen;
  for (const planner::KernelSet& k : plan.schedule.kernel_sets)
    for (const planner::GemmShape& g : k.gemms)
      if (seen.emplace(g.m, g.n, g.k, g.fp8).second) shapes.push_back(g);
  return shapes;
}

nlohmann::json gemm_table_json(const Measurements& m) {
  nlohmann::json rows = nlohmann::json::array();
  for (const GemmMeasurement& g : m.step_gemms)
    rows.push_back({{"m", g.shape.m},
                    {"n", g.shape.n},
                    {"k", g.shape.k},
                    {"dtype", g.dtype},
                    {"seconds", g.time.median_seconds},
                    {"tflops", g.shape.flops() / g.time.median_seconds / 1e12}});
  return rows;
}

std::vector<GemmShape> model_gemm_shapes(const planner::Scenario& scenario) {
  const std::int64_t tokens = scenario.training.micro_batch * scenario.training.seq_len;
  std::vector<GemmShape> out;
  std::set<std::pair<std::int64_t, std::int64_t>> seen;
  models::for_each_module(scenario.model->root, [&](const models::Module& m) {
    std::string type = m.type;
    std::transform(type.begin(), type.end(), type.begin(), [](unsigned char ch) { return std::tolower(ch); });
    if (type.find("embed") != std::string::npos) return;
    for (const models::Parameter& p : m.params) {
      if (p.shape.size() != 2 || p.name != "weight") continue;
      const std::int64_t n = p.shape[0], k = p.shape[1];  // torch.nn.Linear: weight [out, in]
      if (!seen.insert({n, k}).second) continue;
      std::string label = m.full_name;
      // layers.12.mlp.up_proj -> layers.*.mlp.up_proj
      std::string generic;
      std::size_t i = 0;
      while (i < label.size()) {
        if (std::isdigit(static_cast<unsigned char>(label[i])) && (i == 0 || label[i - 1] == '.')) {
          std::size_t j = i;
          while (j < label.size() && std::isdigit(static_cast<unsigned char>(label[j]))) ++j;
          if (j == label.size() || label[j] == '.') {
            generic += "*";
            i = j;
            continue;
          }
        }
        generic += label[i++];
      }
      out.push_back({tokens, n, k, generic});
    }
  });
  return out;
}

std::vector<planner::ProcessGroup> scenario_spans(const planner::Scenario& scenario) {
  const planner::Plan plan = planner::plan_step(scenario);
  std::vector<planner::ProcessGroup> out;
  for (const planner::ProcessGroup& g : plan.schedule.groups) {
    if (g.ranks <= 1) continue;
    if (std::none_of(out.begin(), out.end(),
                     [&](const planner::ProcessGroup& x) { return x.ranks == g.ranks && x.nodes == g.nodes; }))
      out.push_back(g);
  }
  std::stable_sort(out.begin(), out.end(), [](const planner::ProcessGroup& a, const planner::ProcessGroup& b) {
    return a.nodes != b.nodes ? a.nodes < b.nodes : a.ranks < b.ranks;
  });
  return out;
}

nlohmann::json Measurements::to_json() const {
  auto stats = [](const Stats& s) {
    return nlohmann::json{{"median_seconds", s.median_seconds},
                          {"min_seconds", s.min_seconds},
                          {"max_seconds", s.max_seconds},
                          {"repetitions", s.repetitions}};
  };
  nlohmann::json j;
  j["backend"] = backend;
  j["device"] = device;
  j["gpu"] = gpu;
  j["gemms"] = nlohmann::json::array();
  for (const GemmMeasurement& g : gemms)
    j["gemms"].push_back({{"label", g.shape.label},
                          {"m", g.shape.m},
                          {"n", g.shape.n},
                          {"k", g.shape.k},
                          {"dtype", g.dtype},
                          {"flops", g.shape.flops()},
                          {"time", stats(g.time)},
                          {"efficiency", g.efficiency()}});
  j["copies"] = nlohmann::json::array();
  for (const CopyMeasurement& c : copies)
    j["copies"].push_back({{"bytes", c.bytes}, {"time", stats(c.time)}, {"bytes_per_second", c.bytes_per_second()}});
  j["collectives"] = nlohmann::json::array();
  for (const CollectiveMeasurement& c : collectives)
    j["collectives"].push_back({{"collective", planner::collective_name(c.kind)},
                                {"ranks", c.span.ranks},
                                {"nodes", c.span.nodes},
                                {"bytes", c.bytes},
                                {"time", stats(c.time)}});
  j["launch"] = {{"ops", launch_ops}, {"per_op", stats(launch)}};
  j["interference"] = nlohmann::json::array();
  for (const InterferenceMeasurement& i : interference)
    j["interference"].push_back(
        {{"beside", i.collective}, {"alone", stats(i.gemm_alone)}, {"with_collective", stats(i.gemm_beside_collective)}});
  j["notes"] = notes;
  return j;
}

// ---- the benchmarks --------------------------------------------------------------------------------

namespace {

// Where the benchmarks run, shared by every one of them.
struct Bench {
  Bench(const planner::Scenario& s, const Options& options)
      : scenario(s), o(options), host(options.backend == "host"), mpi(options.launcher == "mpi"),
        single_world(mpi ? options.processes : 1) {}
  const planner::Scenario& scenario;
  const Options& o;
  const bool host;  // CPU threads as ranks; GEMMs and copies are real CPU work here
  const bool mpi;   // one process per rank of the scenario's world
  // Under mpi every benchmark spans the whole world (each process plays its own rank); a
  // one-rank benchmark then runs on every rank at once, a span's group tiles the world.
  const int single_world;
  const planner::ProcessGroup one{"bench", 1, 1};
  // The world of a benchmark over `span`: the span itself, or every process under mpi.
  int world_of(const planner::ProcessGroup& span) const { return mpi ? o.processes : span.ranks; }
};

// Under mpi the benchmarks tile the scenario's world: one process per rank of it.
void check_process_count(const planner::Scenario& scenario, const Options& o) {
  if (o.launcher == "mpi" && o.processes != scenario.world_size())
    throw std::invalid_argument("calibrate under mpi: the scenario's world has " + std::to_string(scenario.world_size()) +
                                " ranks but " + std::to_string(o.processes) +
                                " processes were started: start one process per rank (mpirun -np " +
                                std::to_string(scenario.world_size()) + ")");
}

// Stats of op `i` over the measured steps of `r`.
Stats op_stats(const runtime::RunResult& r, std::size_t i) {
  std::vector<double> t;
  for (std::size_t step = 0; step < r.ranks[0].steps.size(); ++step) t.push_back(op_seconds(r, step, i));
  return stats_of(t);
}

// Can the backend run at all? A one-op schedule: on cuda this is where "no CUDA device" or "the
// cuda backend is not built" comes from, before any other work. Returns what ran it, in words.
std::string probe_backend(const Bench& b) {
  Schedule probe = bench_schedule("calibrate probe", b.one, b.single_world);
  add_op(probe, OpKind::compute_fwd, Stream::compute, "probe").flops = 2.0 * 64 * 64 * 64;
  runtime::RunOptions r = run_options(b.o, probe, 1);
  r.warmup_steps = 0;
  r.gemm_dim = 64;
  const runtime::RunResult result = runtime::run_schedule(probe, r);
  if (!b.host) return result.device;
  return "host backend on this CPU (" + std::to_string(std::max(1u, std::thread::hardware_concurrency())) +
         " hardware threads): ranks as threads, collectives through shared memory";
}

// The model's layer GEMMs, each scaled down (every dimension by one factor) to at most
// --host-max-gemm-flops so that one CPU thread times them quickly (a note says by how much),
// then squares 16, 32, ... under the same cap.
std::vector<GemmShape> host_gemm_shapes(const planner::Scenario& scenario, const Options& o, Measurements& m) {
  std::vector<GemmShape> shapes;
  double largest_scale = 1;
  for (GemmShape s : model_gemm_shapes(scenario)) {
    if (s.flops() > o.host_max_gemm_flops) {
      const double f = std::cbrt(o.host_max_gemm_flops / s.flops());
      largest_scale = std::min(largest_scale, f);
      s.m = std::max<std::int64_t>(1, std::llround(s.m * f));
      s.n = std::max<std::int64_t>(1, std::llround(s.n * f));
      s.k = std::max<std::int64_t>(1, std::llround(s.k * f));
      s.label += " (scaled)";
    }
    shapes.push_back(s);
  }
  if (largest_scale < 1) {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "host: the model's layer GEMMs scaled down (every dimension by one factor, down to x%.3g) to at most "
                  "%.3g FLOPs each (--host-max-gemm-flops)",
                  largest_scale, o.host_max_gemm_flops);
    m.notes.push_back(buf);
  }
  for (std::int64_t d = 16; 2.0 * d * d * d <= o.host_max_gemm_flops; d *= 2)
    shapes.push_back({d, d, d, "square " + std::to_string(d)});
  return shapes;
}

void measure_host_gemms(const Bench& b, Measurements& m) {
  const std::vector<GemmShape> shapes = host_gemm_shapes(b.scenario, b.o, m);
  for (const std::string dtype : {"bf16", "fp32"}) {
    for (const GemmShape& s : shapes) {
      CpuGemm g(s, dtype == "bf16");
      GemmMeasurement gm{s, dtype, repeat(b.o.warmup, b.o.repetitions, [&] { return g.run(); }), peak_for(b.scenario, dtype)};
      say(b.o, "gemm " + dtype + " " + s.label + " " + s.dims() + ": " + std::to_string(gm.time.median_seconds * 1e3) +
                   " ms");
      m.gemms.push_back(gm);
    }
  }
  m.notes.push_back("host: GEMMs are this CPU's (one thread, fp32 accumulate; bf16 operands stored as bf16 and widened); "
                    "efficiencies divide by the scenario GPU's dense peak");
}

// The cuda backend does compute as cuBLAS bf16 GEMMs of gemm_dim x gemm_dim tiles (and one
// M x gemm_dim x gemm_dim GEMM for a remainder of M rows): squares, and skinny shapes at each
// size, one schedule per gemm_dim.
void measure_cuda_gemms(const Bench& b, Measurements& m) {
  for (std::int64_t d : b.o.square_gemm_dims) {
    if (d < 64) continue;
    Schedule s = bench_schedule("calibrate gemm " + std::to_string(d), b.one, b.single_world);
    std::vector<GemmShape> shapes;
    for (std::int64_t rows = 64; rows < d; rows *= 4) shapes.push_back({rows, d, d, "rows " + std::to_string(rows) + " of " + std::to_string(d)});
    shapes.push_back({d, d, d, "square " + std::to_string(d)});
    for (const GemmShape& g : shapes) add_op(s, OpKind::compute_fwd, Stream::compute, g.label).flops = g.flops();
    runtime::RunOptions r = run_options(b.o, s, b.o.repetitions);
    r.gemm_dim = static_cast<int>(d);
    const runtime::RunResult result = runtime::run_schedule(s, r);
    for (std::size_t i = 0; i < shapes.size(); ++i) {
      GemmMeasurement gm{shapes[i], "bf16", op_stats(result, i), peak_for(b.scenario, "bf16")};
      say(b.o, "gemm bf16 " + shapes[i].label + ": " + std::to_string(gm.time.median_seconds * 1e3) + " ms");
      m.gemms.push_back(gm);
    }
  }
  m.notes.push_back("cuda: GEMMs are the runtime's cuBLAS bf16 tiles (square gemm_dim^3 and M x gemm_dim x gemm_dim); "
                    "the model's layer shapes enter through the GEMM model at the fitted ceiling and the gemm_table; fp32 GEMMs are not run (the "
                    "runtime's compute is bf16)");
}

// The step's own GEMM shapes, each timed alone through cuBLAS (runtime/gemm_timing.h), for the
// calibration's gemm_table. fp8 shapes are not run: torch._scaled_mm's fp8 GEMMs go through
// cuBLASLt, which the runtime does not load; they keep the shape model (said in the notes).
void measure_cuda_step_gemms(const Bench& b, Measurements& m) {
  int fp8_skipped = 0;
  for (const planner::GemmShape& g : step_gemm_shapes(b.scenario)) {
    if (g.fp8) {
      ++fp8_skipped;
      continue;
    }
    GemmShape s{static_cast<std::int64_t>(g.m), static_cast<std::int64_t>(g.n), static_cast<std::int64_t>(g.k), "step"};
    const Stats t = stats_of(runtime::time_bf16_gemm(b.o.first_device, s.m, s.n, s.k, b.o.warmup, b.o.repetitions));
    GemmMeasurement gm{s, "bf16", t, peak_for(b.scenario, "bf16")};
    say(b.o, "gemm bf16 step shape " + s.dims() + ": " + std::to_string(t.median_seconds * 1e6) + " us");
    m.step_gemms.push_back(gm);
  }
  m.notes.push_back("cuda: the step's " + std::to_string(m.step_gemms.size()) +
                    " distinct bf16 GEMM shapes timed one by one (cublasGemmEx) for gemm_table" +
                    (fp8_skipped ? "; " + std::to_string(fp8_skipped) +
                                       " fp8 shapes not timed (cuBLASLt is not loaded): the shape model prices them"
                                 : std::string()));
}

// memcpy of 1 MiB, 4 MiB, ... up to --host-max-copy-bytes in this process's memory.
void measure_host_copies(const Bench& b, Measurements& m) {
  for (double bytes = 1 << 20; bytes <= b.o.host_max_copy_bytes; bytes *= 4) {
    std::vector<char> src(static_cast<std::size_t>(bytes), 1), dst(static_cast<std::size_t>(bytes), 0);
    CopyMeasurement c{bytes, repeat(b.o.warmup, b.o.repetitions, [&] {
                        const auto t0 = Clock::now();
                        std::memcpy(dst.data(), src.data(), src.size());
                        return std::chrono::duration<double>(Clock::now() - t0).count();
                      })};
    say(b.o, "copy " + bytes_text(bytes) + ": " + std::to_string(c.bytes_per_second() / 1e9) + " GB/s");
    m.copies.push_back(c);
  }
  m.notes.push_back("host: copies are memcpy in this process's DRAM up to " + bytes_text(b.o.host_max_copy_bytes));
}

// Device-to-device copies of 1 MiB, 4 MiB, ... 1 GiB as memory-bound ops of one schedule.
void measure_cuda_copies(const Bench& b, Measurements& m) {
  Schedule s = bench_schedule("calibrate copies", b.one, b.single_world);
  std::vector<double> sizes;
  for (double bytes = 1 << 20; bytes <= (1ull << 30); bytes *= 4) {
    sizes.push_back(bytes);
    add_op(s, OpKind::compute_fwd, Stream::compute, "copy " + bytes_text(bytes)).hbm_bytes = 2 * bytes;
  }
  runtime::RunOptions r = run_options(b.o, s, b.o.repetitions);
  r.copy_chunk_bytes = 1ll << 30;
  const runtime::RunResult result = runtime::run_schedule(s, r);
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    m.copies.push_back({sizes[i], op_stats(result, i)});
    say(b.o, "copy " + bytes_text(sizes[i]) + ": " + std::to_string(m.copies.back().bytes_per_second() / 1e9) + " GB/s");
  }
}

// The largest collective buffer: --max-bytes, or on host --host-max-bytes when smaller (said in
// a note: real bytes move through this CPU's shared memory).
double largest_collective_bytes(const Bench& b, Measurements& m) {
  double top = b.o.max_bytes;
  if (b.host && b.o.host_max_bytes > 0 && b.o.host_max_bytes < top) {
    top = b.o.host_max_bytes;
    m.notes.push_back("host: collective sizes capped at " + bytes_text(top) + " (--host-max-bytes; asked for up to " +
                      bytes_text(b.o.max_bytes) + ")");
  }
  return top;
}

// Whether this launch can measure `span`; a note says why not, or what the host makes of it.
bool can_measure_span(const Bench& b, const planner::ProcessGroup& span, Measurements& m) {
  if (b.host && !b.mpi && span.ranks > b.o.host_max_ranks) {
    m.notes.push_back("span " + span_text(span) + " not measured: more ranks than --host-max-ranks (" +
                      std::to_string(b.o.host_max_ranks) + ") threads");
    return false;
  }
  if (!b.host && !b.mpi && span.nodes > 1) {
    m.notes.push_back("span " + span_text(span) +
                      " not measured: one process drives the GPUs of one node; start calibrate with mpirun / srun "
                      "(--launcher mpi, one process per GPU) to measure spans across nodes");
    return false;
  }
  if (b.host && !b.mpi && span.nodes > 1)
    m.notes.push_back("host: span " + span_text(span) + " runs as threads in this one process: its 'nodes' are labels");
  return true;
}

// One schedule per collective kind: one op per size over `span`.
void measure_collectives_over(const Bench& b, const planner::ProcessGroup& span, const std::vector<double>& sizes,
                              Measurements& m) {
  for (CollectiveKind kind : {CollectiveKind::all_gather, CollectiveKind::reduce_scatter, CollectiveKind::all_reduce}) {
    Schedule s = bench_schedule("calibrate " + planner::collective_name(kind) + " " + span_text(span), span,
                                b.world_of(span));
    std::vector<double> used;
    for (double size : sizes) {
      // At least one element per rank (the buffer splits into ranks equal parts).
      const double bytes = std::max(size, 4.0 * span.ranks);
      if (!used.empty() && bytes <= used.back()) continue;
      used.push_back(bytes);
      Op& op = add_op(s, op_kind_of(kind), stream_of(kind), planner::collective_name(kind) + " " + bytes_text(bytes));
      op.comm_bytes = bytes;
      op.group = 0;
    }
    runtime::RunResult result;
    try {
      result = runtime::run_schedule(s, run_options(b.o, s, b.o.repetitions));
    } catch (const std::invalid_argument& e) {
      // A span this backend cannot play here (more ranks than the node has GPUs): say so and
      // go on with the others; device faults (RuntimeError) still end the run.
      m.notes.push_back("span " + span_text(span) + " not measured (" + planner::collective_name(kind) + "): " + e.what());
      continue;
    }
    for (std::size_t i = 0; i < used.size(); ++i)
      m.collectives.push_back({kind, {span.ranks, span.nodes}, used[i], op_stats(result, i)});
    say(b.o, planner::collective_name(kind) + " " + span_text(span) + ": " + std::to_string(used.size()) + " sizes " +
                 bytes_text(used.front()) + ".." + bytes_text(used.back()) + ", largest " +
                 std::to_string(m.collectives.back().time.median_seconds * 1e3) + " ms");
  }
}

// A stream of 200 trivial ops: step time / 200 is one op's issue, launch and completion.
void measure_launch_overhead(const Bench& b, Measurements& m) {
  const int n = 200;
  Schedule s = bench_schedule("calibrate launch", b.one, b.single_world);
  for (int i = 0; i < n; ++i)
    add_op(s, OpKind::compute_fwd, Stream::compute, "op " + std::to_string(i)).flops = b.host ? 0 : 2.0 * 64 * 64 * 64;
  runtime::RunOptions r = run_options(b.o, s, b.o.repetitions);
  r.gemm_dim = 64;
  const runtime::RunResult result = runtime::run_schedule(s, r);
  std::vector<double> t;
  for (double step : result.ranks[0].step_seconds) t.push_back(step / n);
  m.launch = stats_of(t);
  m.launch_ops = n;
  say(b.o, "launch: " + std::to_string(m.launch.median_seconds * 1e6) + " us per op");
}

// The span the interference benchmark's collective runs over: the largest inside one node this
// backend can run (on host, else the first span if it has few enough ranks); ranks 0 if none.
planner::ProcessGroup interference_span(const Bench& b, const std::vector<planner::ProcessGroup>& spans) {
  planner::ProcessGroup span{"", 0, 0};
  for (const planner::ProcessGroup& g : spans)
    if (g.nodes == 1 && (!b.host || g.ranks <= b.o.host_max_ranks) && g.ranks > span.ranks) span = g;
  if (span.ranks == 0 && !spans.empty() && b.host && spans.front().ranks <= b.o.host_max_ranks) span = spans.front();
  return span;
}

// The GEMM's times while rank threads play `collectives` through the runtime, in a loop, beside
// this thread (after 20 ms for them to get going).
Stats time_beside(const Options& o, const Schedule& collectives, CpuGemm& gemm) {
  std::atomic<bool> stop{false};
  std::exception_ptr failure;
  std::thread background([&] {
    try {
      runtime::RunOptions r = run_options(o, collectives, 1);
      r.warmup_steps = 0;
      while (!stop.load()) runtime::run_schedule(collectives, r);
    } catch (...) {
      failure = std::current_exception();
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const Stats beside = repeat(0, o.repetitions, [&] { return gemm.run(); });
  stop = true;
  background.join();
  if (failure) std::rethrow_exception(failure);
  return beside;
}

// Beside: rank threads doing all-reduces through the runtime while this thread runs the
// largest square GEMM (128, 256, ...) under --host-max-gemm-flops.
void measure_host_interference(const Bench& b, const planner::ProcessGroup& span, double top, Measurements& m) {
  const double bytes = std::min(4.0 * (1 << 20), top);
  Schedule s = bench_schedule("calibrate interference", span, span.ranks);
  for (int i = 0; i < 8; ++i) {
    Op& op = add_op(s, OpKind::all_reduce, Stream::all_reduce, "all_reduce " + std::to_string(i));
    op.comm_bytes = bytes;
    op.group = 0;
  }
  GemmShape shape{128, 128, 128, "square 128"};
  while (2.0 * (shape.m * 2) * (shape.n * 2) * (shape.k * 2) <= b.o.host_max_gemm_flops) {
    shape.m *= 2;
    shape.n *= 2;
    shape.k *= 2;
  }
  CpuGemm g(shape, true);
  const Stats alone = repeat(b.o.warmup, b.o.repetitions, [&] { return g.run(); });
  const Stats beside = time_beside(b.o, s, g);
  const std::string what = "all-reduces of " + bytes_text(bytes) + " over " + span_text(span);
  m.interference.push_back({alone, beside, what});
  say(b.o, "interference: GEMM " + std::to_string(alone.median_seconds * 1e3) + " ms alone, " +
               std::to_string(beside.median_seconds * 1e3) + " ms beside " + what);
  m.notes.push_back("host: interference is a CPU GEMM on one thread beside " + std::to_string(span.ranks) +
                    " rank threads doing shared-memory all-reduces: it measures contention for this CPU's cores "
                    "and memory, not SM sharing");
}

// Four all-reduces of 256 MiB on the all-reduce stream and a GEMM on the compute stream, no
// dependency between them; the same GEMM alone for reference.
void measure_cuda_interference(const Bench& b, const planner::ProcessGroup& span, double top, Measurements& m) {
  const double bytes = std::min(256.0 * (1 << 20), top);
  const double flops = 2.0 * 4096 * 4096 * 4096 * 4;
  Schedule with = bench_schedule("calibrate interference", span, b.world_of(span));
  for (int i = 0; i < 4; ++i) {
    Op& op = add_op(with, OpKind::all_reduce, Stream::all_reduce, "all_reduce " + std::to_string(i));
    op.comm_bytes = bytes;
    op.group = 0;
  }
  add_op(with, OpKind::compute_fwd, Stream::compute, "gemm beside").flops = flops;
  Schedule alone = bench_schedule("calibrate gemm alone", span, b.world_of(span));
  add_op(alone, OpKind::compute_fwd, Stream::compute, "gemm alone").flops = flops;
  const runtime::RunResult rw = runtime::run_schedule(with, run_options(b.o, with, b.o.repetitions));
  const runtime::RunResult ra = runtime::run_schedule(alone, run_options(b.o, alone, b.o.repetitions));
  std::vector<double> tw, ta;
  for (std::size_t step = 0; step < rw.ranks[0].steps.size(); ++step) {
    tw.push_back(op_seconds(rw, step, 4));
    ta.push_back(op_seconds(ra, step, 0));
  }
  const std::string what = "4 all-reduces of " + bytes_text(bytes) + " over " + span_text(span);
  m.interference.push_back({stats_of(ta), stats_of(tw), what});
  say(b.o, "interference: GEMM " + std::to_string(stats_of(ta).median_seconds * 1e3) + " ms alone, " +
               std::to_string(stats_of(tw).median_seconds * 1e3) + " ms beside " + what);
}

// A GEMM alone and beside a collective over the span interference_span picks.
void measure_interference(const Bench& b, const std::vector<planner::ProcessGroup>& spans, double top,
                          Measurements& m) {
  const planner::ProcessGroup span = interference_span(b, spans);
  if (span.ranks == 0) {
    m.notes.push_back("interference not measured: no span that this backend can run");
  } else if (b.host && b.mpi) {
    // The CPU GEMM runs in this process while collectives run beside it in a loop of its
    // own length: the processes would not agree on how many collectives to play.
    m.notes.push_back("interference not measured: the host backend's interference benchmark runs one process only");
  } else if (b.host) {
    measure_host_interference(b, span, top, m);
  } else {
    measure_cuda_interference(b, span, top, m);
  }
}

}  // namespace

Measurements measure(const planner::Scenario& scenario, const Options& o) {
  validate(o);
  check_process_count(scenario, o);
  const Bench b(scenario, o);
  Measurements m;
  m.backend = o.backend;
  m.gpu = scenario.cluster.gpu.name;
  m.reports = o.process_rank == 0;
  m.side_by_side = b.mpi;
  if (b.mpi)
    m.notes.push_back("mpi: " + std::to_string(o.processes) +
                      " processes, one per rank; every benchmark runs on every rank at once (each span's groups side by "
                      "side, as in the scenario)");
  m.device = probe_backend(b);

  if (!b.host) {
    measure_cuda_gemms(b, m);
    measure_cuda_step_gemms(b, m);
    measure_cuda_copies(b, m);
  } else if (m.reports) {
    // mpi: process 0 alone times the CPU GEMMs and copies (the others would only compete with it).
    measure_host_gemms(b, m);
    measure_host_copies(b, m);
  }

  const std::vector<planner::ProcessGroup> spans = scenario_spans(scenario);
  if (spans.empty()) m.notes.push_back("the scenario's schedule has no process group of more than one rank: no collective to measure");
  const double top = largest_collective_bytes(b, m);
  std::vector<double> sizes;
  for (double bytes = o.min_bytes; bytes <= top * (1 + 1e-9); bytes *= o.size_step) sizes.push_back(std::round(bytes));
  for (const planner::ProcessGroup& span : spans)
    if (can_measure_span(b, span, m)) measure_collectives_over(b, span, sizes, m);

  measure_launch_overhead(b, m);
  measure_interference(b, spans, top, m);
  return m;
}

}  // namespace fsdpsim::calibrate
