#!/usr/bin/env python3
"""Measured PyTorch FSDP peak memory against fsdpsim's prediction, as Markdown tables (stdlib only, no torch).

    python3 tools/hardware/compare_memory.py                                  # every memory CSV, build/tools/fsdpsim
    python3 tools/hardware/compare_memory.py --before .hw/bin/fsdpsim         # and a second binary beside it
    python3 tools/hardware/compare_memory.py --phases tests/data/hardware/memory-h100-2026-11-27.csv

Reads the memory CSVs of tools/hardware/fsdp_memory.py (by default every *.csv directly in
tests/data/hardware/ whose header has peak_allocated_bytes and fsdpsim_overrides; subfolders are not
read). For each row with status ok it runs, from the repository root, once per binary:

    fsdpsim estimate --scenario <fsdpsim_scenario> --set <o1> --set <o2> ... --json [--trace T]

(the ';'-separated fsdpsim_overrides, as the README of tests/data/hardware/ says) and compares:

- peak_allocated_bytes with memory.peak_allocated_bytes (the CTest's bound: within 2%),
- peak_reserved_bytes with memory.peak_reserved_bytes (the CTest's bound: within 5%),
- with --phases, also each phase: step_start_allocated_bytes with memory.allocated_at_start_bytes,
  fresh_cache_peak_reserved_bytes with memory.peak_reserved_bytes, and
  {forward,backward,optimizer}_peak_allocated_bytes with the largest entry of
  memory.timeline_allocated_bytes (allocated right after each op's allocations) over the ops of
  that phase (the `phase` of each op in the --trace file; forward also counts the allocated bytes at
  the step's start, since PyTorch's counters are reset there). The forward phase holds the loss.

error = (predicted - measured) / measured. A row whose case_baseline_allocated_bytes exceeds its
process_baseline_allocated_bytes began with earlier cases' memory still allocated (the one-process
run): it is printed, marked excluded, and left out of the summary, as the C++ checker
(tests/hardware/hardware_check.h) does. A binary that refuses a row (nonzero exit) is reported as
refused for that row and that binary. The summary counts the clean rows (status ok, not excluded)
of each CSV, all and split FSDP1 / FSDP2.

Nothing here is measured: it reads the committed CSVs and runs the binaries given.
"""

import argparse
import csv
import glob
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hwcommon as hw  # noqa: E402
from hwcommon import REPO, binary_provenance, rel  # noqa: E402
GIB = float(1 << 30)
MIB = float(1 << 20)
PHASES = ("forward", "backward", "optimizer")


def memory_csvs():
    out = []
    for p in sorted(glob.glob(os.path.join(REPO, "tests/data/hardware/*.csv"))):
        with open(p, newline="") as f:
            header = next(csv.reader(f), [])
        if "peak_allocated_bytes" in header and "fsdpsim_overrides" in header:
            out.append(p)
    return out


def estimate(exe, row, want_phases, tmpdir):
    """One `fsdpsim estimate` of the row: a dict of predicted figures, or {'refused': message}."""
    cmd = hw.estimate_argv(exe, row["fsdpsim_scenario"], row["fsdpsim_overrides"].split(";"), "--json")
    trace = None
    if want_phases:
        trace = os.path.join(tmpdir, "trace.json")
        cmd += ["--trace", trace]
    p = subprocess.run(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    if p.returncode != 0:
        msg = (p.stderr.strip() or p.stdout.strip() or "exit %d" % p.returncode).splitlines()
        return {"refused": msg[-1] if msg else "exit %d" % p.returncode}
    m = json.loads(p.stdout)["memory"]
    out = {"allocated": m["peak_allocated_bytes"], "reserved": m["peak_reserved_bytes"],
           "start": m["allocated_at_start_bytes"]}
    if want_phases:
        with open(trace) as f:
            t = json.load(f)
        events = t["traceEvents"] if isinstance(t, dict) else t
        phase_of = {}
        for e in events:
            a = e.get("args", {})
            if e.get("ph") == "X" and "phase" in a and "op" in a:
                phase_of[a["op"]] = a["phase"]
        timeline = m["timeline_allocated_bytes"]
        peaks = {ph: None for ph in PHASES}
        peaks["forward"] = m["allocated_at_start_bytes"]
        for op, ph in phase_of.items():
            if ph in peaks and 0 <= op < len(timeline):
                peaks[ph] = timeline[op] if peaks[ph] is None else max(peaks[ph], timeline[op])
        out["phases"] = peaks
    return out


def pct(predicted, measured):
    return 100.0 * (predicted - measured) / measured


def fmt_pct(x, digits=1):
    return "%+.*f%%" % (digits, x)


def leftover(row):
    return int(row["case_baseline_allocated_bytes"]) - int(row["process_baseline_allocated_bytes"])


def label(row):
    return row["case_id"]


def summary(rows, preds, name, binaries):
    """Summary lines over the clean rows, per binary, all / FSDP1 / FSDP2."""
    lines = []
    for b in binaries:
        for group in ("all", "fsdp1", "fsdp2"):
            ea, er, refused = [], [], 0
            for r, p in zip(rows, preds):
                if r["status"] != "ok" or leftover(r) > 0:
                    continue
                if group != "all" and r["framework"] != group:
                    continue
                q = p[b]
                if "refused" in q:
                    refused += 1
                    continue
                ea.append(pct(q["allocated"], int(r["peak_allocated_bytes"])))
                er.append(pct(q["reserved"], int(r["peak_reserved_bytes"])))
            if not ea:
                lines.append("- %s, %s: no clean rows%s" % (b, group.upper() if group != "all" else "all",
                                                             " (%d refused)" % refused if refused else ""))
                continue
            n = len(ea)
            lines.append(
                "- %s, %s (%s): allocated within 2%%: %d/%d, mean |error| %.2f%%, range %s..%s; "
                "reserved within 5%%: %d/%d, mean |error| %.1f%%, range %s..%s" % (
                    b, "all" if group == "all" else group.upper(),
                    "%d clean rows, %d compared, %d refused" % (n + refused, n, refused) if refused
                    else "%d clean rows" % n,
                    sum(1 for x in ea if abs(x) <= 2.0), n, sum(abs(x) for x in ea) / n,
                    fmt_pct(min(ea), 2), fmt_pct(max(ea), 2),
                    sum(1 for x in er if abs(x) <= 5.0), n, sum(abs(x) for x in er) / n,
                    fmt_pct(min(er)), fmt_pct(max(er))))
    return lines


def table(path, binaries, exes, want_phases):
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    preds = []
    with tempfile.TemporaryDirectory() as tmp:
        for r in rows:
            preds.append({b: estimate(exes[b], r, want_phases, tmp) for b in binaries} if r["status"] == "ok" else None)

    out = ["### %s" % rel(path), ""]
    cmd = "python3 tools/hardware/compare_memory.py"
    out.append("Measured: %s (rows with status ok; GiB = 2^30 bytes)." % rel(path))
    for b in binaries:
        out.append("Predicted (%s): `%s estimate --scenario <fsdpsim_scenario> --set <each of fsdpsim_overrides> "
                   "--json`, memory.peak_allocated_bytes / memory.peak_reserved_bytes (binary %s)." % (
                       b, rel(exes[b]), binary_provenance(exes[b])))
    out.append("Error = (predicted - measured) / measured.")
    out.append("")
    head = ["case", "framework", "N", "checkpointing", "reshard", "alloc measured GiB"]
    for b in binaries:
        head += ["alloc %s GiB" % b, "alloc %s error" % b]
    head.append("reserved measured GiB")
    for b in binaries:
        head += ["reserved %s GiB" % b, "reserved %s error" % b]
    head.append("note")
    out.append("| " + " | ".join(head) + " |")
    out.append("|" + "|".join(["---"] * 5 + ["---:"] * (len(head) - 6) + ["---"]) + "|")
    skipped = []
    for r, p in zip(rows, preds):
        if r["status"] != "ok":
            skipped.append("%s: %s (%s)" % (r["case_id"], r["status"], r["error"] or "no error text"))
            continue
        ma, mr = int(r["peak_allocated_bytes"]), int(r["peak_reserved_bytes"])
        cells = [label(r), r["framework"].upper(), r["world_size"], r["activation_checkpointing"],
                 r["reshard_after_forward"], "%.2f" % (ma / GIB)]
        notes = []
        for b in binaries:
            q = p[b]
            if "refused" in q:
                cells += ["refused", ""]
                notes.append("%s refused: %s" % (b, q["refused"].replace("|", "/")))
            else:
                cells += ["%.2f" % (q["allocated"] / GIB), fmt_pct(pct(q["allocated"], ma), 2)]
        cells.append("%.2f" % (mr / GIB))
        for b in binaries:
            q = p[b]
            if "refused" in q:
                cells += ["refused", ""]
            else:
                cells += ["%.2f" % (q["reserved"] / GIB), fmt_pct(pct(q["reserved"], mr))]
        left = leftover(r)
        if left > 0:
            notes.insert(0, "excluded (began with %s bytes of earlier cases)" % format(left, ","))
        cells.append("; ".join(notes))
        out.append("| " + " | ".join(cells) + " |")
    if skipped:
        out.append("")
        out.append("Not measured (not compared): " + "; ".join(skipped) + ".")
    out.append("")
    out.append("Summary, clean rows (status ok, case_baseline_allocated_bytes = process_baseline_allocated_bytes):")
    out.append("")
    out += summary(rows, preds, rel(path), binaries)

    if want_phases:
        out.append("")
        out.append("Per phase, allocated MiB (2^20 bytes), measured / predicted (error): step start (step_start_allocated_bytes "
                   "against memory.allocated_at_start_bytes), then each phase's peak (against the largest "
                   "memory.timeline_allocated_bytes over the trace's ops of that phase; forward includes the "
                   "step-start bytes and the loss); last, fresh_cache_peak_reserved_bytes (the step after "
                   "torch.cuda.empty_cache()) against memory.peak_reserved_bytes.")
        out.append("")
        head = ["case", "binary", "step start (measured - predicted)", "forward", "backward", "optimizer",
                "fresh-cache reserved GiB"]
        out.append("| " + " | ".join(head) + " |")
        out.append("|---|---|" + "|".join(["---:"] * 5) + "|")
        for r, p in zip(rows, preds):
            if r["status"] != "ok":
                continue
            for b in binaries:
                q = p[b]
                tag = label(r) + (" (excluded)" if leftover(r) > 0 else "")
                if "refused" in q:
                    out.append("| %s | %s | refused | | | | |" % (tag, b))
                    continue
                cells = [tag, b]
                ms = int(r["step_start_allocated_bytes"])
                cells.append("%.1f / %.1f (%s bytes)" % (ms / MIB, q["start"] / MIB, format(ms - q["start"], "+,")))
                for ph in PHASES:
                    mv = int(r[ph + "_peak_allocated_bytes"])
                    pv = q["phases"][ph]
                    cells.append("%.1f / %s" % (mv / MIB, "-" if pv is None else
                                                  "%.1f (%s)" % (pv / MIB, fmt_pct(pct(pv, mv)))))
                mf = int(r["fresh_cache_peak_reserved_bytes"])
                cells.append("%.2f / %.2f (%s)" % (mf / GIB, q["reserved"] / GIB, fmt_pct(pct(q["reserved"], mf))))
                out.append("| " + " | ".join(cells) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("csvs", nargs="*", help="memory CSVs (default: every memory CSV directly in tests/data/hardware/)")
    ap.add_argument("--fsdpsim", default=os.path.join(REPO, "build/tools/fsdpsim"), help="the binary compared (after)")
    ap.add_argument("--before", help="a second binary, printed beside it (before)")
    ap.add_argument("--phases", action="store_true",
                    help="also a per-phase table (step start, forward, backward, optimizer allocated; adds --trace)")
    args = ap.parse_args()
    exes = {}
    binaries = []
    if args.before:
        exes["before"] = args.before
        binaries.append("before")
    exes["after" if args.before else "fsdpsim"] = args.fsdpsim
    binaries.append("after" if args.before else "fsdpsim")
    for b in binaries:
        if not os.path.exists(exes[b]):
            sys.exit("no fsdpsim binary at %s" % exes[b])
    paths = args.csvs or memory_csvs()
    cmd = " ".join(["python3 tools/hardware/compare_memory.py"] + sys.argv[1:])
    print("Command: `%s`\n" % cmd)
    print("\n\n".join(table(p, binaries, exes, args.phases) for p in paths))


if __name__ == "__main__":
    main()
