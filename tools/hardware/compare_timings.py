#!/usr/bin/env python3
"""Measured GPU timings against fsdpsim's predictions, as Markdown tables (stdlib only, no torch).

    python3 tools/hardware/compare_timings.py                       # both tables, files of the H100 run
    python3 tools/hardware/compare_timings.py --only blocks
    python3 tools/hardware/compare_timings.py --only attention --attention-report REPORT.txt

(a) Blocks (tools/hardware/block_timing.py's CSV, tests/data/hardware/blocks-*.csv): for each row
    with status ok, the measured forward and backward medians against fsdpsim's prediction of the
    same block, obtained exactly as block_timing.py's predicted_seconds() does: `fsdpsim estimate
    --scenario <fsdpsim_scenario> --set <each ;-separated override> --trace T`, then for the
    trace's ops named by fsdpsim_forward_op / fsdpsim_backward_op ("fwd model.layers.0" / "bwd
    model.layers.0") their `nominal_us` (the cost model's GPU duration before any
    interference) after the part of the CPU's issue the GPU waits for (hwcommon.block_seconds).
    error = (predicted - measured) / measured, the sign convention of `fsdpsim verify`.

(b) Attention kernels (tools/hardware/kernel_timing.py's CSV, rows of kind "attention"): the
    measured TFLOP/s of each SDPA backend (flash, cudnn, mem_efficient) per seq, head dim, causal
    and direction, FLOPs counted as the FlashAttention papers do (the CSV's own flops column).
    The fsdpsim CLI has no command that prints one attention kernel's time (`estimate` prices the
    attention call inside each block's compute op; its trace gives the op's total and its
    attention_flops, not the attention kernel's seconds). The attention model's own predictions
    are printed by the unit-test binary `build/tests/test_planner
    --gtest_filter=AttentionModel.ReportAllRows` (docs/cost-model.md section 8), one line per row
    of tests/data/kernels/attention_published.csv. Those rows use the shapes kernel_timing.py ran
    (hidden 2048 = heads x head dim, batch x seq = 16384 tokens); this script checks that per row
    against the published CSV before joining, and joins flash2 with the measured `flash` rows and
    cudnn with `cudnn`. Where no published row exists (H100 backward with a causal mask), there is
    no prediction, and the table says so. The fwd+bwd table adds the two measured medians (they
    were timed separately) and compares with the model's fwd+bwd lines (the FlashAttention repo's
    H100 chart shapes, which are the same).

Nothing here is measured: it reads the committed CSVs and runs the binaries given.
"""

import argparse
import csv
import glob
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwcommon as hw  # noqa: E402
from hwcommon import REPO, binary_provenance, rel  # noqa: E402


def read_rows(paths):
    rows = []
    for p in paths:
        with open(p, newline="") as f:
            for r in csv.DictReader(f):
                r["_file"] = rel(p)
                rows.append(r)
    return rows


def pct(predicted, measured):
    return 100.0 * (predicted - measured) / measured


# ---- (a) blocks ---------------------------------------------------------------------------------

def predicted_block(fsdpsim, row):
    """fsdpsim's seconds of the row's forward and backward ops run alone (block_timing.predicted_seconds)."""
    ops = (row["fsdpsim_forward_op"], row["fsdpsim_backward_op"])
    found = hw.block_seconds(fsdpsim, row["fsdpsim_scenario"], row["fsdpsim_overrides"].split(";"), ops)
    return found.get(ops[0]), found.get(ops[1])


def blocks_table(paths, fsdpsim):
    rows = read_rows(paths)
    out = []
    out.append("Measured: %s (CUDA events, median of `reps` after `warmup`; min..max in brackets)." %
               ", ".join(sorted(set(r["_file"] for r in rows))))
    out.append("Predicted: `%s estimate --scenario <fsdpsim_scenario> --set <each of fsdpsim_overrides> --trace T`,"
               " `<fsdpsim_forward_op>` / `<fsdpsim_backward_op>` timed alone: `nominal_us` after the GPU waits for the"
               " issue event's `lead_us` (hwcommon.block_seconds; %s)."
               % (rel(fsdpsim), "binary " + binary_provenance(fsdpsim)))
    out.append("Error = (predicted - measured) / measured, on time: positive means fsdpsim expects the block slower"
               " than it ran.")
    out.append("")
    out.append("| case | seq | fwd measured ms | fwd predicted ms | fwd error | bwd measured ms | bwd predicted ms"
               " | bwd error | bwd/fwd measured | bwd/fwd predicted |")
    out.append("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    skipped = []
    for r in rows:
        if r["status"] != "ok":
            skipped.append("%s: status %s %s" % (r["case_id"], r["status"], r["error"]))
            continue
        fm, fmin, fmax = (float(r["forward_%s_seconds" % k]) for k in ("median", "min", "max"))
        bm, bmin, bmax = (float(r["backward_%s_seconds" % k]) for k in ("median", "min", "max"))
        fp, bp = predicted_block(fsdpsim, r)
        if fp is None or bp is None:
            skipped.append("%s: ops %r / %r not in the trace" % (r["case_id"], r["fsdpsim_forward_op"],
                                                                  r["fsdpsim_backward_op"]))
            continue
        out.append("| %s | %s | %.3f [%.3f..%.3f] | %.3f | %+.1f%% | %.3f [%.3f..%.3f] | %.3f | %+.1f%% | %.2f | %.2f |" % (
            r["model"], r["seq_len"], fm * 1e3, fmin * 1e3, fmax * 1e3, fp * 1e3, pct(fp, fm),
            bm * 1e3, bmin * 1e3, bmax * 1e3, bp * 1e3, pct(bp, bm), bm / fm, bp / fp))
    if rows:
        r0 = rows[0]
        out.append("")
        out.append("Rows: %s, driver %s, CUDA %s, torch %s, transformers %s, %s; attention %s, micro-batch %s,"
                   " warm-up %s, reps %s." % (r0["gpu_name"], r0["driver"], r0["cuda"], r0["torch"],
                                              r0["transformers"], r0["date_utc"], r0["attention"],
                                              r0["micro_batch"], r0["warmup"], r0["reps"]))
    for s in skipped:
        out.append("Not compared: " + s)
    return "\n".join(out)


# ---- (b) attention --------------------------------------------------------------------------------

REPORT_LINE = re.compile(r"^(\S+)\s+(\S+)\s+(fwd\+bwd|fwd|bwd)\s+c([01])\s+d\s*(\d+)\s+s\s*(\d+)\s+"
                         r"published\s+([0-9.]+)\s+predicted\s+([0-9.]+)")
KERNEL_OF_BACKEND = {"sdpa_flash": "flash2", "sdpa_cudnn": "cudnn"}


def attention_report(args):
    """{(kernel, pass, causal, head_dim, seq): (published, predicted)} for H100 rows; and where it came from."""
    if args.attention_report:
        with open(args.attention_report) as f:
            text = f.read()
        source = "`%s` (saved output of `test_planner --gtest_filter=AttentionModel.ReportAllRows`)" % rel(
            args.attention_report)
    else:
        exe = args.test_planner
        if not os.path.exists(exe):
            return None, "no %s: build it (`cmake --build build --target test_planner`) or pass --attention-report" % exe
        r = subprocess.run([exe, "--gtest_filter=AttentionModel.ReportAllRows"], capture_output=True, text=True,
                           cwd=REPO, timeout=300)
        text = r.stdout
        source = "`%s --gtest_filter=AttentionModel.ReportAllRows` (%s)" % (rel(exe), "binary " + binary_provenance(exe))
    pub_shapes = {}
    with open(os.path.join(REPO, "tests/data/kernels/attention_published.csv"), newline="") as f:
        for p in csv.DictReader(f):
            key = (p["gpu"], p["kernel"], p["pass"], p["causal"] == "1", int(p["head_dim"]), int(p["seq_len"]))
            pub_shapes.setdefault(key, set()).add((int(p["batch"]), int(p["heads"])))
    table = {}
    for line in text.splitlines():
        m = REPORT_LINE.match(line.strip())
        if not m or not m.group(2).startswith("H100"):
            continue
        kernel, gpu, pss, causal, d, s, published, predicted = m.groups()
        key = (kernel, pss, causal == "1", int(d), int(s))
        shapes = pub_shapes.get((gpu, kernel, pss, causal == "1", int(d), int(s)), set())
        table[key] = (float(published), float(predicted), shapes)
    if not table:
        return None, "no H100 line in the report"
    return table, source


def attention_tables(paths, args):
    rows = [r for r in read_rows(paths) if r["kind"] == "attention"]
    out = []
    files = ", ".join(sorted(set(r["_file"] for r in rows)))
    report, source = (None, "not asked (--no-model)") if args.no_model else attention_report(args)
    out.append("Measured: %s, rows of kind `attention` (PyTorch SDPA with one backend allowed; batch = 16384 / seq,"
               " heads = 2048 / head dim, q/k/v heads equal; CUDA events, median of `reps`; TFLOP/s = the row's"
               " `flops` / median, FLOPs 4 x seq^2 x head_dim x heads x batch, halved when causal, backward 2.5x)."
               % files)
    out.append("Predicted: %s. `flash` is compared with the model's flash2, `cudnn` with cudnn; mem_efficient has no"
               " H100 prediction line. Error = (predicted TFLOP/s - measured) / measured: positive means the model"
               " expects the kernel faster than it ran (the block table's error is on time, the other way round)." % source)
    out.append("")
    by = {}
    bad = []
    for r in rows:
        if r["status"] != "ok":
            bad.append("%s: status %s %s" % (r["case_id"], r["status"], r["error"]))
            continue
        key = (r["kernel"], int(r["seq_len"]), int(r["head_dim"]), r["causal"] == "true", r["direction"])
        by[key] = r
    backends = ["sdpa_flash", "sdpa_cudnn", "sdpa_mem_efficient"]
    seqs = sorted(set(k[1] for k in by))
    dims = sorted(set(k[2] for k in by))

    def tflops(r):
        return float(r["flops"]) / float(r["median_seconds"]) / 1e12

    pass_of = {"forward": "fwd", "backward": "bwd"}
    summary = {}

    def model_cells(b, r, direction, causal, d, s):
        """(predicted, error, published) cells of one measured row, or why there is none."""
        if report is None:
            return []
        line = report.get((KERNEL_OF_BACKEND[b], pass_of[direction], causal, d, s))
        if not line:
            return ["no line", "", ""]
        published, predicted, shapes = line
        if shapes and (int(r["batch"]), int(r["heads"])) not in shapes:
            return ["shape differs %s" % sorted(shapes), "", ""]
        e = pct(predicted, tflops(r))
        summary.setdefault((KERNEL_OF_BACKEND[b], direction, causal, d), []).append(e)
        return ["%.1f" % predicted, "%+.1f%%" % e, "%.0f" % published]

    # One row per shape: every backend measured, and the model beside flash and cudnn.
    if report is None:
        out.append("Measured TFLOP/s (median time in ms in brackets):")
        head = "| direction | causal | head dim | seq | flash | cudnn | mem_efficient |"
        rule = "|---|---|---:|---:|---:|---:|---:|"
    else:
        out.append("Measured TFLOP/s (median time in ms in brackets); beside flash and cudnn, the model's TFLOP/s,"
                   " its error, and the published figure its line belongs to (tests/data/kernels/attention_published.csv;"
                   " \"no line\": no published row, so no model line, for that shape):")
        head = ("| direction | causal | head dim | seq | flash measured | flash2 model | error | published"
                " | cudnn measured | cudnn model | error | published | mem_efficient measured |")
        rule = "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    out.append("")
    out.append(head)
    out.append(rule)
    for direction in ("forward", "backward"):
        for causal in (False, True):
            for d in dims:
                for s in seqs:
                    cells = []
                    for b in backends:
                        r = by.get((b, s, d, causal, direction))
                        cells.append("%.1f (%.3f)" % (tflops(r), float(r["median_seconds"]) * 1e3) if r else "-")
                        if b in KERNEL_OF_BACKEND and report is not None:
                            cells += model_cells(b, r, direction, causal, d, s) if r else ["", "", ""]
                    out.append("| %s | %s | %d | %d | %s |" % (direction, "yes" if causal else "no", d, s, " | ".join(cells)))
    if report is None:
        out.append("")
        out.append("No prediction compared: %s." % source)
        for s in bad:
            out.append("Not measured: " + s)
        out += host_share_table(rows)
        return "\n".join(out)

    # fwd+bwd: the two measured medians added.
    out.append("")
    out.append("fwd+bwd: measured = 3.5 x forward FLOPs / (forward median + backward median), the two timed"
               " separately; predicted = the model's fwd+bwd line (FlashAttention repo's H100 chart shapes):")
    out.append("")
    out.append("| kernel | causal | head dim | seq | measured | predicted | error | published |")
    out.append("|---|---|---:|---:|---:|---:|---:|---:|")
    for b in ("sdpa_flash", "sdpa_cudnn"):
        k = KERNEL_OF_BACKEND[b]
        for causal in (False, True):
            for d in dims:
                for s in seqs:
                    f = by.get((b, s, d, causal, "forward"))
                    g = by.get((b, s, d, causal, "backward"))
                    line = report.get((k, "fwd+bwd", causal, d, s))
                    if not (f and g and line):
                        continue
                    published, predicted, shapes = line
                    if shapes and (int(f["batch"]), int(f["heads"])) not in shapes:
                        continue
                    meas = (float(f["flops"]) + float(g["flops"])) / (
                        float(f["median_seconds"]) + float(g["median_seconds"])) / 1e12
                    e = pct(predicted, meas)
                    summary.setdefault((k, "fwd+bwd", causal, d), []).append(e)
                    out.append("| %s | %s | %d | %d | %.1f | %.1f | %+.1f%% | %.0f |" % (
                        k, "yes" if causal else "no", d, s, meas, predicted, e, published))

    out.append("")
    out.append("Summary (error range over seq, per kernel, direction, mask and head dim):")
    out.append("")
    out.append("| kernel | direction | causal | head dim | rows | error min | error median | error max |")
    out.append("|---|---|---|---:|---:|---:|---:|---:|")
    for key in sorted(summary, key=lambda k: (k[0], ["forward", "backward", "fwd+bwd"].index(k[1]), k[2], k[3])):
        es = sorted(summary[key])
        med = es[len(es) // 2] if len(es) % 2 else 0.5 * (es[len(es) // 2 - 1] + es[len(es) // 2])
        out.append("| %s | %s | %s | %d | %d | %+.1f%% | %+.1f%% | %+.1f%% |" % (
            key[0], key[1], "yes" if key[2] else "no", key[3], len(es), es[0], med, es[-1]))
    for s in bad:
        out.append("Not measured: " + s)
    out += host_share_table(rows)
    return "\n".join(out)


def host_share_table(rows):
    """Rows timed both ways (kernel_timing.py from session 18 on): the kernels' own time, the call
    on an idle GPU, and the host's dispatch, so that the part of an exposed time that is the host's
    can be read off (docs/accuracy.md, "Attention kernels on both GPUs against the model")."""
    both = [r for r in rows if r["status"] == "ok" and r.get("exposed_median_seconds")]
    if not both:
        return []
    out = ["", "Kernels against the call on an idle GPU (ms): `exposed - kernels` is what the host's dispatch"
           " added; `host` the CPU time the call took to return:", "",
           "| kernel | direction | causal | head dim | seq | kernels | exposed | exposed - kernels | host |",
           "|---|---|---|---:|---:|---:|---:|---:|---:|"]
    for r in both:
        k, e, h = (float(r[c]) * 1e3 for c in ("median_seconds", "exposed_median_seconds", "host_dispatch_seconds"))
        out.append("| %s | %s | %s | %s | %s | %.3f | %.3f | %.3f | %.3f |" % (
            r["kernel"], r["direction"], "yes" if r["causal"] == "true" else "no", r["head_dim"], r["seq_len"],
            k, e, e - k, h))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--blocks", nargs="*", default=None,
                    help="block CSVs (default tests/data/hardware/blocks-h100-*.csv)")
    ap.add_argument("--kernels", nargs="*", default=None,
                    help="kernel CSVs (default tests/data/hardware/kernels/kernels-h100-*.csv)")
    ap.add_argument("--fsdpsim", default=os.path.join(REPO, "build/tools/fsdpsim"))
    ap.add_argument("--test-planner", default=os.path.join(REPO, "build/tests/test_planner"),
                    help="the unit-test binary whose AttentionModel.ReportAllRows prints the attention model's lines")
    ap.add_argument("--attention-report", help="a saved output of that test, instead of running it")
    ap.add_argument("--no-model", action="store_true", help="attention: the measured table only")
    ap.add_argument("--only", choices=["blocks", "attention"])
    args = ap.parse_args()
    blocks = args.blocks if args.blocks is not None else sorted(
        glob.glob(os.path.join(REPO, "tests/data/hardware/blocks-h100-*.csv")))
    kernels = args.kernels if args.kernels is not None else sorted(
        glob.glob(os.path.join(REPO, "tests/data/hardware/kernels/kernels-h100-*.csv")))
    parts = []
    if args.only in (None, "blocks"):
        if not os.path.exists(args.fsdpsim):
            sys.exit("no fsdpsim binary at %s (--fsdpsim)" % args.fsdpsim)
        parts.append("## Block timings\n\n" + blocks_table(blocks, args.fsdpsim))
    if args.only in (None, "attention"):
        parts.append("## Attention kernels\n\n" + attention_tables(kernels, args))
    print("\n\n".join(parts))


if __name__ == "__main__":
    main()
