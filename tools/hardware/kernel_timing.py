#!/usr/bin/env python3
"""Kernel-level timings on one GPU, the data issue 13's compute model is built from and judged by:
PyTorch's SDPA attention kernels over sequence length and head dim, eager attention's score
chain, and the memory-bound ops of a Llama block.

    python3 tools/hardware/kernel_timing.py --out DIR [--time-budget S]     # on a GPU (run_all.sh)

Writes DIR/kernels.csv, one row per (kernel, shape, direction), flushed as each ends.

Choices, and why:
- Attention as the FlashAttention-2 paper benchmarks it (arXiv:2307.08691, section 4.1): hidden
  2048, heads = 2048 / head_dim, batch x seq_len = 16384 tokens, bf16, causal and not; forward
  and forward+backward; FLOPs counted as the paper does (4 * seq^2 * head_dim * heads * batch
  forward, halved when causal; backward 2.5x forward). Each SDPA backend PyTorch has on this GPU:
  flash (FlashAttention-2 in PyTorch), cudnn, mem_efficient. A backend that refuses a shape is a
  row with status error.
- Eager attention's score chain as Hugging Face's eager_attention_forward runs it (matmul, scale,
  softmax in fp32, cast to bf16, dropout 0, matmul), for Llama-3.1-8B's heads at seq 1024/2048/4096:
  the time of the whole chain forward and backward, and of the fp32 softmax alone, with the bytes
  fsdpsim's chain counts per score, so the achieved bandwidth is read off the row.
- Memory-bound ops of a Llama block at 4096 tokens x hidden 4096 (and the MLP's 14336): Hugging
  Face's Python RMSNorm, SiLU-and-multiply, rotary (apply_rotary_pos_emb), a residual add and a
  bf16 copy; forward and backward; bytes as read + written by the op's own kernels are not
  computed here (fsdpsim counts them): the row gives the time and the tensor's elements.
- GEMMs beside held SMs (kind gemm_beside_held_sms): cuBLAS GEMMs of a Llama-3.1-8B and an
  MPT-13B block, the forum's two and 8192^3, alone and beside a spinning kernel that holds 8, 16,
  24 or 32 SMs, as an NCCL collective's blocks do: the slowdown the cost model's
  gemm_slowdown_under_comm stands for (held_sm_gemm_cases says how; docs/accuracy.md, "GEMMs beside
  NCCL on Hopper").
- Sustained GEMMs (--sustained-seconds, first, before the other cases): one 8192^3 bf16 GEMM
  back to back for that long, a row per window of about a second: its TFLOP/s (CUDA events) and
  what nvidia-smi sampled during the window (SM clock and its maximum, power draw and the
  enforced limit, temperature, the clock-event reasons). The question (docs/accuracy.md,
  "Memory-bound kernels measured"): published steps hold 15-20% more time than the kernels
  fsdpsim prices at their measured speed, and every kernel here (and calibrate's) is timed for
  milliseconds after a short warm-up; whether minutes of tensor-core load lower the clock the
  GPU sustains is what these rows say. nvidia-smi is only read: the GPU's settings stay as they are.
- Timing: CUDA events on the current stream, 3 warm-up repetitions then --reps (default 10):
  median, min and max of the kernels' own time, each call queued behind a GPU spin that outlasts
  its dispatch; and, as columns of their own, the same call on an idle GPU (exposed, the host's
  dispatch latency in it) and the host's dispatch time (timed() says why).
"""

import argparse
import functools
import operator
import os
import statistics
import subprocess
import sys
import threading
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwcommon as hw  # noqa: E402

COLUMNS = [
    "case_id", "status", "error", "kind", "kernel", "direction", "dtype",
    "batch", "seq_len", "heads", "kv_heads", "head_dim", "causal", "rows", "cols",
    "median_seconds", "min_seconds", "max_seconds", "flops", "tflops_per_second", "elements",
    "warmup", "reps", "exposed_median_seconds", "host_dispatch_seconds", "spin_seconds",
    # sustained_gemm rows: the GEMM's k, the window, and nvidia-smi's samples during it
    "k", "window", "start_seconds", "smi_samples", "sm_clock_mhz", "max_sm_clock_mhz", "power_draw_watts",
    "power_limit_watts", "temperature_c", "clock_event_reasons",
    # gemm_beside_held_sms rows: the SMs a spinning kernel held, the GEMM alone, beside / alone - 1
    "held_sms", "alone_median_seconds", "slowdown",
] + hw.PROVENANCE_COLUMNS

# What nvidia-smi is asked during the sustained GEMMs; drivers before 535 call the last field
# clocks_throttle_reasons.active (SmiSampler tries both, then goes without it).
SMI_FIELDS = ["clocks.sm", "clocks.max.sm", "power.draw", "enforced.power.limit", "temperature.gpu"]
SMI_REASONS = ["clocks_event_reasons.active", "clocks_throttle_reasons.active"]


def parse_smi_line(line, fields):
    """One line of `nvidia-smi --query-gpu=F1,F2,... --format=csv,noheader,nounits` as {field: value};
    a value nvidia-smi cannot read ('[N/A]', '[Not Supported]') is left out."""
    values = [v.strip() for v in line.split(",")]
    if len(values) != len(fields):
        return None
    out = {}
    for f, v in zip(fields, values):
        if v.startswith("["):
            continue
        out[f] = v if f in SMI_REASONS else float(v)
    return out


def window_summary(samples, t0, t1):
    """What the samples (monotonic time, {field: value}) taken in [t0, t1] say of that window: the
    median SM clock and power draw, the largest maximum clock, power limit and temperature, the
    clock-event reason masks OR-ed (hex, as nvidia-smi prints them); empty when none fell in it."""
    inside = [v for t, v in samples if t0 <= t <= t1]
    row = {"smi_samples": len(inside)}
    def med(field):
        xs = [v[field] for v in inside if field in v]
        return "%.0f" % statistics.median(xs) if xs else ""
    def top(field):
        xs = [v[field] for v in inside if field in v]
        return "%.0f" % max(xs) if xs else ""
    row["sm_clock_mhz"] = med("clocks.sm")
    row["power_draw_watts"] = med("power.draw")
    row["max_sm_clock_mhz"] = top("clocks.max.sm")
    row["power_limit_watts"] = top("enforced.power.limit")
    row["temperature_c"] = top("temperature.gpu")
    masks = [int(v[f], 16) for v in inside for f in SMI_REASONS if f in v]
    row["clock_event_reasons"] = "0x%016x" % (functools.reduce(operator.or_, masks, 0)) if masks else ""
    return row


class SmiSampler:
    """`nvidia-smi ... -lms PERIOD` in the background for one GPU (its PCI bus id), each line stamped
    with time.monotonic() as it arrives. Reads only; without nvidia-smi, no samples."""

    def __init__(self, gpu_id, period_ms=250):
        self.samples, self.proc, self.fields = [], None, None
        for reasons in SMI_REASONS + [None]:
            fields = SMI_FIELDS + ([reasons] if reasons else [])
            cmd = ["nvidia-smi", "--query-gpu=" + ",".join(fields), "--format=csv,noheader,nounits", "-i", gpu_id]
            try:
                probe = subprocess.run(cmd, capture_output=True, text=True, timeout=20)
            except (OSError, subprocess.SubprocessError):
                return
            if probe.returncode == 0 and parse_smi_line(probe.stdout.strip().splitlines()[0], fields) is not None:
                self.fields = fields
                self.proc = subprocess.Popen(cmd + ["-lms", str(period_ms)], stdout=subprocess.PIPE,
                                             stderr=subprocess.DEVNULL, text=True)
                threading.Thread(target=self._read, daemon=True).start()
                return

    def _read(self):
        for line in self.proc.stdout:
            v = parse_smi_line(line.strip(), self.fields)
            if v is not None:
                self.samples.append((time.monotonic(), v))

    def stop(self):
        if self.proc:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def pci_bus_id(torch):
    """The current GPU as nvidia-smi -i names it (CUDA_VISIBLE_DEVICES may renumber it)."""
    p = torch.cuda.get_device_properties(torch.cuda.current_device())
    if all(hasattr(p, a) for a in ("pci_domain_id", "pci_bus_id", "pci_device_id")):
        return "%08X:%02X:%02X.0" % (p.pci_domain_id, p.pci_bus_id, p.pci_device_id)
    return str(torch.cuda.current_device())


def sustained_gemm_rows(torch, seconds, size=8192, window=1.0):
    """Rows of kind sustained_gemm: size^3 bf16 GEMMs back to back for `seconds`, one row per
    window. The GPU never waits between windows: the next window's GEMMs are queued before the
    CPU waits for the previous window's end event."""
    a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
    c = torch.empty(size, size, device="cuda", dtype=torch.bfloat16)
    flops = 2.0 * size ** 3
    for _ in range(3):
        torch.matmul(a, b, out=c)
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    for _ in range(10):
        torch.matmul(a, b, out=c)
    e1.record()
    e1.synchronize()
    per_window = max(1, int(window / (e0.elapsed_time(e1) * 1e-3 / 10)))
    sampler = SmiSampler(pci_bus_id(torch))
    windows = []  # (start event, end event, host time queued)
    start = time.monotonic()

    def queue():
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(per_window):
            torch.matmul(a, b, out=c)
        e.record()
        windows.append((s, e))

    rows = []
    try:
        queue()
        while True:
            more = time.monotonic() - start < seconds
            if more:
                queue()  # queued behind the window below: the GPU stays busy while the CPU waits
            s, e = windows[len(rows)]
            e.synchronize()
            t1 = time.monotonic()
            secs = s.elapsed_time(e) * 1e-3
            row = {"kind": "sustained_gemm", "kernel": "torch.matmul", "direction": "forward", "dtype": "bf16",
                   "rows": size, "cols": size, "k": size, "window": len(rows),
                   "start_seconds": "%.3f" % (t1 - secs - start), "median_seconds": secs / per_window,
                   "flops": flops, "tflops_per_second": "%.2f" % (flops * per_window / secs / 1e12),
                   "reps": per_window, "warmup": 3, "case_id": "sustained-gemm-%d-w%d" % (size, len(rows)),
                   "status": "ok"}
            row.update(window_summary(sampler.samples, t1 - secs, t1))
            rows.append(row)
            if not more and len(rows) == len(windows):
                return rows
    finally:
        sampler.stop()


def self_test():
    """window_summary and parse_smi_line on hand-made samples (no GPU, no torch): run by the
    hardware CTest, so that the rows' aggregation is checked where the GPU is not."""
    fields = SMI_FIELDS + [SMI_REASONS[0]]
    v = parse_smi_line("1755, 1980, 690.12, 700.00, 71, 0x0000000000000004", fields)
    assert v == {"clocks.sm": 1755.0, "clocks.max.sm": 1980.0, "power.draw": 690.12, "enforced.power.limit": 700.0,
                 "temperature.gpu": 71.0, "clocks_event_reasons.active": "0x0000000000000004"}, v
    assert parse_smi_line("1755, [N/A], 690, 700, 71, 0x0", fields)["clocks.sm"] == 1755.0
    assert "clocks.max.sm" not in parse_smi_line("1755, [N/A], 690, 700, 71, 0x0", fields)
    assert parse_smi_line("1755, 1980", fields) is None
    samples = [(0.5, parse_smi_line("1980, 1980, 400, 700, 40, 0x0", fields)),
               (1.0, parse_smi_line("1800, 1980, 700, 700, 60, 0x4", fields)),
               (1.5, parse_smi_line("1700, 1980, 701, 700, 65, 0x4", fields)),
               (2.0, parse_smi_line("1650, 1980, 699, 700, 66, 0x20", fields)),
               (3.5, parse_smi_line("1500, 1980, 650, 700, 90, 0x0", fields))]
    w = window_summary(samples, 1.0, 2.0)
    # three samples: clocks 1800, 1700, 1650 (median 1700); power 700, 701, 699 (median 700);
    # temperature at most 66; reasons 0x4 | 0x4 | 0x20 = 0x24
    assert w == {"smi_samples": 3, "sm_clock_mhz": "1700", "power_draw_watts": "700", "max_sm_clock_mhz": "1980",
                 "power_limit_watts": "700", "temperature_c": "66", "clock_event_reasons": "0x0000000000000024"}, w
    empty = window_summary(samples, 2.5, 3.0)
    assert empty["smi_samples"] == 0 and empty["sm_clock_mhz"] == "" and empty["clock_event_reasons"] == "", empty
    print("kernel_timing.py self-test: ok")
    return 0



_spin_rate = None


def spin_cycles_per_second(torch):
    """The GPU clock cycles torch.cuda._sleep spins a second on this GPU, timed once with events."""
    global _spin_rate
    if _spin_rate is None:
        cycles = 20_000_000
        torch.cuda._sleep(cycles // 10)  # load the kernel
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        torch.cuda._sleep(cycles)
        e1.record()
        torch.cuda.synchronize()
        _spin_rate = cycles / (e0.elapsed_time(e1) * 1e-3)
    return _spin_rate


def timed(torch, fn, warmup, reps):
    """fn() timed three ways over `reps` calls (after `warmup`), each call synchronized:

    - exposed_median_seconds: CUDA events around the call on an idle GPU, so the host's dispatch
      until the first kernel (Python, the dispatcher, the autograd engine's hand-off to its device
      thread) is in it, and any gap between kernels the CPU is slower than. The only measure of
      the rows of 2026-11-27 and 2026-11-28 (their median_seconds).
    - host_dispatch_seconds: the CPU time the call takes to return (its whole dispatch).
    - median/min/max_seconds: the same events, the call queued behind a GPU spin
      (torch.cuda._sleep) that outlasts its dispatch, so that its kernels run back to back as in
      a step whose queue is full: the kernels' own time, what the kernel benchmarks the cost model
      is built from measure (they pipeline many calls). A call whose dispatch outran the spin is
      timed again behind one twice as long.
    """
    def call(spin_seconds=0.0):
        """(GPU seconds between the events around fn(), host seconds fn() took to return)."""
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        if spin_seconds:
            torch.cuda._sleep(int(spin_seconds * spin_cycles_per_second(torch)))
        e0.record()
        t0 = time.perf_counter()
        fn()
        t1 = time.perf_counter()
        e1.record()
        torch.cuda.synchronize()
        return e0.elapsed_time(e1) * 1e-3, t1 - t0

    exposed, host = [], []
    for i in range(warmup + reps):
        gpu_seconds, host_seconds = call()
        if i >= warmup:
            exposed.append(gpu_seconds)
            host.append(host_seconds)
    spin = max(2 * max(host), 1e-3)
    gpu, retries = [], 0
    while len(gpu) < reps:
        gpu_seconds, host_seconds = call(spin)
        if host_seconds > 0.8 * spin:  # the GPU may have reached the call before the CPU had queued it
            retries += 1
            if retries > reps:
                raise RuntimeError("the call's dispatch outran a %.1f ms GPU spin %d times" % (1e3 * spin, retries))
            spin *= 2
            continue
        gpu.append(gpu_seconds)
    return {"median_seconds": statistics.median(gpu), "min_seconds": min(gpu), "max_seconds": max(gpu),
            "exposed_median_seconds": statistics.median(exposed), "host_dispatch_seconds": statistics.median(host),
            "spin_seconds": spin}


def attention_cases(torch, F, sdpa_kernel, SDPBackend):
    backends = [("flash", SDPBackend.FLASH_ATTENTION), ("cudnn", SDPBackend.CUDNN_ATTENTION),
                ("mem_efficient", SDPBackend.EFFICIENT_ATTENTION)]
    # Layouts: "" q, k and v [b, h, s, d]-contiguous (the FlashAttention benchmarks' inputs, and
    # every row of the first two GPU runs); "-bshd" transposed views of [b, s, h, d] tensors, as a
    # Hugging Face attention module makes them (q_proj(x).view(b, s, h, d).transpose(1, 2)). The
    # second, for flash and cuDNN at head dim 128 causal, asks whether the backward's time the
    # attention model does not show (0.3-0.5 ms a call at 512-2,048 tokens, docs/accuracy.md) is
    # a layout copy.
    variants = [(name, backend, "") for name, backend in backends] + \
        [(name, backend, "-bshd") for name, backend in backends[:2]]
    for seq in (512, 1024, 2048, 4096, 8192, 16384):
        for d in (64, 128):
            for causal in (True, False):
                for name, backend, layout in variants:
                    if layout and (d != 128 or not causal):
                        continue
                    heads, batch = 2048 // d, 16384 // seq
                    base = {"kind": "attention", "kernel": "sdpa_" + name + layout, "dtype": "bf16", "batch": batch,
                            "seq_len": seq, "heads": heads, "kv_heads": heads, "head_dim": d,
                            "causal": "true" if causal else "false"}
                    fwd_flops = 4.0 * seq * seq * d * heads * batch * (0.5 if causal else 1.0)

                    def run(direction, backend=backend, fwd_flops=fwd_flops, causal=causal, batch=batch, heads=heads,
                            seq=seq, d=d, layout=layout):
                        grad = direction != "forward"
                        if layout == "-bshd":
                            q, k, v = (torch.randn(batch, seq, heads, d, device="cuda", dtype=torch.bfloat16)
                                       .requires_grad_(grad).transpose(1, 2) for _ in range(3))
                        else:
                            q, k, v = (torch.randn(batch, heads, seq, d, device="cuda", dtype=torch.bfloat16,
                                                   requires_grad=grad) for _ in range(3))
                        with sdpa_kernel([backend]):
                            if direction == "forward":
                                with torch.no_grad():
                                    r = timed(torch, lambda: F.scaled_dot_product_attention(q, k, v, is_causal=causal),
                                              WARMUP, REPS)
                                return r, fwd_flops
                            o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                            do = torch.randn_like(o)
                            r = timed(torch, lambda: torch.autograd.grad(o, (q, k, v), do, retain_graph=True),
                                      WARMUP, REPS)
                            return r, 2.5 * fwd_flops
                    for direction in ("forward", "backward"):
                        yield dict(base, direction=direction,
                                   case_id="attn-%s%s-s%d-d%d-%s-%s" % (name, layout, seq, d,
                                                                        "causal" if causal else "full", direction)), run


# [GEMMs beside NCCL] (planner/cost_model.h): cuBLAS GEMMs beside a kernel that holds SMs, as an
# NCCL collective's blocks do for its whole run. The shipped gemm_slowdown_under_comm (0.70 on every
# Hopper part) is one user's Nsight trace of one GEMM (NVIDIA developer forum thread 337991); these
# rows are the measurement that would replace it: per shape, the GEMM alone, then beside a Triton
# kernel of `held` blocks that spins three times as long as the GEMM, launched first on another
# stream so that its blocks are resident when the GEMM's are scheduled. Each block is 512 threads,
# as NCCL's are (512-640): however few registers a thread takes, 16 warps take thousands, and a
# cuBLAS Hopper block that uses nearly all of an SM's 65,536 cannot share the SM with it. NCCL
# itself needs two GPUs; the held SMs are what it takes from a GEMM.
HELD_SMS = (8, 16, 24, 32)
HELD_SM_SHAPES = [  # (m, n, k, what)
    (2560, 27648, 5120, "forum thread 339078's GEMM"),
    (2500, 5120, 5120, "forum thread 339078's smaller GEMM"),
    (8192, 6144, 4096, "Llama-3.1-8B qkv, 8192 tokens"),
    (8192, 4096, 4096, "Llama-3.1-8B o_proj"),
    (8192, 28672, 4096, "Llama-3.1-8B gate_up"),
    (8192, 4096, 14336, "Llama-3.1-8B down_proj"),
    (4096, 15360, 5120, "MPT-13B Wqkv, micro-batch 2 x 2048"),
    (4096, 5120, 20480, "MPT-13B down"),
    (8192, 8192, 8192, "square 8192"),
]


def held_sm_gemm_cases(torch):
    import triton
    import triton.language as tl

    @triton.jit
    def hold(x_ptr, iters, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        acc = tl.load(x_ptr + offs)
        for _ in range(iters):
            acc = acc * 0.999999 + 1e-7
        tl.store(x_ptr + offs, acc)

    block = 4096
    scratch = torch.zeros(max(HELD_SMS) * block, device="cuda", dtype=torch.float32)
    side = torch.cuda.Stream()

    def launch_hold(held, iters):
        with torch.cuda.stream(side):
            hold[(held,)](scratch, iters, BLOCK=block, num_warps=16)

    def hold_seconds(iters):
        launch_hold(1, iters)  # compiled and loaded
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record(side)
        launch_hold(1, iters)
        e1.record(side)
        torch.cuda.synchronize()
        return e0.elapsed_time(e1) * 1e-3

    def gemm_seconds(a, b, c, held, iters):
        """The GEMM's own time (events on its stream), after WARMUP calls; beside `held` SMs when held > 0."""
        times = []
        for i in range(WARMUP + REPS):
            if held:
                launch_hold(held, iters)
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            torch.matmul(a, b, out=c)
            e1.record()
            torch.cuda.synchronize()
            if i >= WARMUP:
                times.append(e0.elapsed_time(e1) * 1e-3)
        return times

    # The shape's operands, its time alone and the spin that outlasts it three times: made by the
    # shape's first case and shared by its others (the cases come shape by shape), so every held
    # count is compared with one figure alone.
    current = {}

    def shape(m, n, k):
        if current.get("shape") != (m, n, k):
            current.clear()
            a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
            b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
            c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
            alone = statistics.median(gemm_seconds(a, b, c, 0, 0))
            iters = 1000
            while hold_seconds(iters) < 3 * alone and iters < 1 << 30:
                iters *= 2
            current.update(shape=(m, n, k), operands=(a, b, c), alone=alone, iters=iters)
        return current

    for m, n, k, what in HELD_SM_SHAPES:
        for held in HELD_SMS:
            row = {"kind": "gemm_beside_held_sms", "kernel": "torch.matmul (" + what + ")", "direction": "forward",
                   "dtype": "bf16", "rows": m, "cols": n, "k": k, "held_sms": held,
                   "case_id": "gemm-held-%dx%dx%d-sms%d" % (m, n, k, held)}

            def run(direction, m=m, n=n, k=k, held=held):
                sh = shape(m, n, k)
                beside = gemm_seconds(*sh["operands"], held, sh["iters"])
                med = statistics.median(beside)
                return {"median_seconds": med, "min_seconds": min(beside), "max_seconds": max(beside),
                        "alone_median_seconds": sh["alone"], "slowdown": "%.3f" % (med / sh["alone"] - 1)}, 2.0 * m * n * k
            yield row, run


def eager_cases(torch):
    heads, kv_heads, d = 32, 8, 128  # Llama-3.1-8B

    def chain(q, k, v, mask):
        s = torch.matmul(q, k.transpose(2, 3)) * (d ** -0.5)
        s = s + mask
        p = torch.nn.functional.softmax(s, dim=-1, dtype=torch.float32).to(q.dtype)
        p = torch.nn.functional.dropout(p, p=0.0, training=True)
        return torch.matmul(p, v)

    def inputs(grad, seq):
        q = torch.randn(1, heads, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=grad)
        k0, v0 = (torch.randn(1, kv_heads, seq, d, device="cuda", dtype=torch.bfloat16, requires_grad=grad)
                  for _ in range(2))
        mask = torch.full((seq, seq), float("-inf"), device="cuda", dtype=torch.bfloat16).triu(1)[None, None]
        return q, k0, v0, mask

    def rep(x):  # repeat_kv as Hugging Face does it (expand + reshape: a copy)
        b, h, s, dd = x.shape
        return x[:, :, None].expand(b, h, heads // kv_heads, s, dd).reshape(b, heads, s, dd)

    # Every helper takes the sequence length as an argument: the cases are all built (the
    # generator is consumed) before any runs, so a closure over the loop's variable would see its
    # last value. The first GPU run's chain rows (2026-11-27) did exactly that and timed 4096
    # tokens under every seq_len (about 8 ms each): those rows are not used.
    def run_chain(direction, seq):
        q, k0, v0, mask = inputs(direction != "forward", seq)
        if direction == "forward":
            with torch.no_grad():
                return timed(torch, lambda: chain(q, rep(k0), rep(v0), mask), WARMUP, REPS), 0
        o = chain(q, rep(k0), rep(v0), mask)
        do = torch.randn_like(o)
        return timed(torch, lambda: torch.autograd.grad(o, (q, k0, v0), do, retain_graph=True), WARMUP, REPS), 0

    def run_softmax(direction, seq):
        s = torch.randn(1, heads, seq, seq, device="cuda", dtype=torch.bfloat16)
        with torch.no_grad():
            return timed(torch, lambda: torch.nn.functional.softmax(s, dim=-1, dtype=torch.float32), WARMUP, REPS), 0

    for seq in (1024, 2048, 4096):
        base = {"kind": "eager_attention", "dtype": "bf16", "batch": 1, "seq_len": seq, "heads": heads,
                "kv_heads": kv_heads, "head_dim": d, "causal": "true"}
        for direction in ("forward", "backward"):
            yield dict(base, kernel="eager_chain", direction=direction,
                       case_id="eager-chain-s%d-%s" % (seq, direction)), \
                lambda direction, seq=seq: run_chain(direction, seq)
        yield dict(base, kernel="softmax_bf16_to_fp32", direction="forward",
                   case_id="eager-softmax-s%d-forward" % seq), lambda direction, seq=seq: run_softmax(direction, seq)


def memory_bound_cases(torch):
    tokens, hidden, inter = 4096, 4096, 14336
    eps = 1e-5

    def rmsnorm(x, w):  # Hugging Face LlamaRMSNorm.forward
        dtype = x.dtype
        h = x.to(torch.float32)
        var = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(var + eps)
        return w * h.to(dtype)

    def rotate_half(x):
        x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
        return torch.cat((-x2, x1), dim=-1)

    def rotary(q, k, cos, sin):  # apply_rotary_pos_emb
        return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin

    ops = {
        "rmsnorm_hf": (lambda g: (torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=g),
                                  torch.ones(hidden, device="cuda", dtype=torch.bfloat16, requires_grad=g)),
                       lambda x, w: rmsnorm(x, w), tokens * hidden),
        "silu_mul": (lambda g: (torch.randn(tokens, inter, device="cuda", dtype=torch.bfloat16, requires_grad=g),
                                torch.randn(tokens, inter, device="cuda", dtype=torch.bfloat16, requires_grad=g)),
                     lambda a, b: torch.nn.functional.silu(a) * b, tokens * inter),
        "rotary_hf": (lambda g: (torch.randn(1, 32, tokens, 128, device="cuda", dtype=torch.bfloat16, requires_grad=g),
                                 torch.randn(1, 8, tokens, 128, device="cuda", dtype=torch.bfloat16, requires_grad=g),
                                 torch.randn(1, 1, tokens, 128, device="cuda", dtype=torch.bfloat16),
                                 torch.randn(1, 1, tokens, 128, device="cuda", dtype=torch.bfloat16)),
                      lambda q, k, c, s: rotary(q, k, c, s), tokens * 40 * 128),
        "residual_add": (lambda g: (torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=g),
                                    torch.randn(tokens, hidden, device="cuda", dtype=torch.bfloat16, requires_grad=g)),
                         lambda a, b: a + b, tokens * hidden),
    }
    for name, (make, fn, elements) in ops.items():
        for direction in ("forward", "backward"):
            def run(direction, make=make, fn=fn):
                args = make(direction != "forward")
                if direction == "forward":
                    with torch.no_grad():
                        return timed(torch, lambda: fn(*args), WARMUP, REPS), 0
                out = fn(*args)
                outs = out if isinstance(out, tuple) else (out,)
                grads = [torch.randn_like(o) for o in outs]
                leaves = [a for a in args if a.requires_grad]
                return timed(torch, lambda: torch.autograd.grad(outs, leaves, grads, retain_graph=True),
                             WARMUP, REPS), 0
            yield {"kind": "memory_bound", "kernel": name, "direction": direction, "dtype": "bf16",
                   "rows": tokens, "elements": elements,
                   "case_id": "mem-%s-%s" % (name, direction)}, run
    # A bf16 device-to-device copy of 1 GiB: the bandwidth the others are read against.
    def run_copy(direction):
        a = torch.empty(2**29, device="cuda", dtype=torch.bfloat16)
        b = torch.empty_like(a)
        return timed(torch, lambda: b.copy_(a), WARMUP, REPS), 0
    yield {"kind": "memory_bound", "kernel": "copy_1GiB", "direction": "forward", "dtype": "bf16",
           "elements": 2**29, "case_id": "mem-copy_1GiB-forward"}, run_copy


WARMUP, REPS = 3, 10


def main():
    global WARMUP, REPS
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--time-budget", type=float, default=0)
    ap.add_argument("--sustained-seconds", type=float, default=0,
                    help="first, 8192^3 bf16 GEMMs back to back for this long, a row a second (0: none)")
    ap.add_argument("--columns", action="store_true", help="print the header of kernels.csv and exit (no torch)")
    ap.add_argument("--self-test", action="store_true", help="check the sustained rows' aggregation (no torch)")
    args = ap.parse_args()
    if args.columns:
        print(",".join(COLUMNS))
        return 0
    if args.self_test:
        return self_test()
    REPS = args.reps
    t_start = time.time()
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import sdpa_kernel, SDPBackend
    if not torch.cuda.is_available():
        hw.log("error: no CUDA device visible to torch")
        return 2
    prov = hw.provenance(torch)
    os.makedirs(args.out, exist_ok=True)
    writer = hw.CsvWriter(os.path.join(args.out, "kernels.csv"), COLUMNS)
    if args.sustained_seconds > 0:
        try:
            rows = sustained_gemm_rows(torch, args.sustained_seconds)
        except Exception as e:  # noqa: BLE001 (the other cases still run)
            traceback.print_exc(file=sys.stderr)
            rows = [{"kind": "sustained_gemm", "case_id": "sustained-gemm", "status": "error",
                     "error": ("%s: %s" % (type(e).__name__, e))[:300]}]
        for row in rows:
            row.update(prov)
            writer.write(row)
        if len(rows) > 1:
            last = rows[len(rows) * 2 // 3:]
            hw.log("sustained GEMM: first window %s TFLOP/s at %s MHz; last third median %.2f TFLOP/s at %s MHz" % (
                rows[0]["tflops_per_second"], rows[0]["sm_clock_mhz"] or "?",
                statistics.median(float(r["tflops_per_second"]) for r in last), last[-1]["sm_clock_mhz"] or "?"))
        torch.cuda.empty_cache()
    try:
        held_sm_cases = list(held_sm_gemm_cases(torch))
    except Exception as e:  # noqa: BLE001 (no Triton: one error row, the other cases still run)
        traceback.print_exc(file=sys.stderr)

        def refused(direction, e=e):
            raise e
        held_sm_cases = [({"kind": "gemm_beside_held_sms", "case_id": "gemm-held", "direction": "forward"}, refused)]
    cases = list(memory_bound_cases(torch)) + list(eager_cases(torch)) + held_sm_cases + \
        list(attention_cases(torch, F, sdpa_kernel, SDPBackend))
    for row, run in cases:
        row.update(prov)
        row["warmup"], row["reps"] = WARMUP, REPS
        if args.time_budget and time.time() - t_start > args.time_budget:
            row["status"], row["error"] = "skipped", "time budget reached before this case"
            writer.write(row)
            continue
        try:
            times, flops = run(row["direction"])
            row.update(times)
            med = times["median_seconds"]
            if flops:
                row["flops"] = flops
                row["tflops_per_second"] = "%.2f" % (flops / med / 1e12)
            row["status"] = "ok"
        except Exception as e:  # noqa: BLE001 (a refused shape is a row; the others still run)
            msg = str(e).splitlines()[0] if str(e) else ""
            if "No available kernel" not in msg:
                traceback.print_exc(file=sys.stderr)
            row["status"], row["error"] = "error", ("%s: %s" % (type(e).__name__, msg))[:300]
        torch.cuda.empty_cache()
        writer.write(row)
        hw.log("%-44s %-6s %s s %s" % (row["case_id"], row["status"], row.get("median_seconds", "-"),
                                         ("%s TFLOP/s" % row["tflops_per_second"]) if row.get("tflops_per_second")
                                         else row.get("error", "")))
    writer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
