#!/usr/bin/env python3
"""Rewrites tests/data/hardware/known_deviations.json from the measurements and a fsdpsim binary.

    python3 tools/hardware/known_deviations.py                    # build/tools/fsdpsim, rewrite the file
    python3 tools/hardware/known_deviations.py --check            # compare only: exit 1 if it would change
    python3 tools/hardware/known_deviations.py --fsdpsim BIN      # another binary

The hardware CTest (tests/hardware/hardware_check.h, `judge`) holds every measured memory row
(status ok, not begun above its process's baseline) to allocated within 2% and reserved within
5% of `fsdpsim estimate`, except the rows listed in known_deviations.json, each held to its
listed errors plus half a percentage point, and each with why it is off. After a change to the
model, this script estimates every row again (as compare_memory.py does) and rewrites the list:

- a listed row still outside the bounds keeps its "why" and gets its new errors;
- a listed row back within the bounds is dropped (printed: the CTest would fail on it);
- a row newly outside the bounds is added with an empty "why", printed, and the exit status is 1:
  a person must write why (the CTest refuses a row without one). It is not guessed here.

Stdlib only. The bounds are hardware_check.h's (kAllocatedTolerance, kReservedTolerance).
"""
import argparse
import csv
import json
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_memory as cm  # noqa: E402
from hwcommon import REPO  # noqa: E402

ALLOCATED_BOUND = 0.02  # tests/hardware/hardware_check.h kAllocatedTolerance
RESERVED_BOUND = 0.05   # tests/hardware/hardware_check.h kReservedTolerance
PATH = os.path.join(REPO, "tests/data/hardware/known_deviations.json")


def measured_rows():
    """(csv file name, row) for every row the CTest judges."""
    for path in cm.memory_csvs():
        with open(path, newline="") as f:
            for row in csv.DictReader(f):
                if row["status"] == "ok" and cm.leftover(row) <= 0:
                    yield os.path.basename(path), row


def new_list(exe, listed):
    """The rows outside the bounds with `exe`, in the CSVs' order; and what changed, as lines."""
    rows, notes = [], []
    seen = set()
    with tempfile.TemporaryDirectory() as tmp:
        for name, row in measured_rows():
            key = (name, row["case_id"])
            seen.add(key)
            e = cm.estimate(exe, row, False, tmp)
            if "refused" in e:
                notes.append("REFUSED %s %s: %s (left as listed)" % (name, row["case_id"], e["refused"]))
                if key in listed:
                    rows.append(listed[key])
                continue
            allocated = (e["allocated"] - int(row["peak_allocated_bytes"])) / int(row["peak_allocated_bytes"])
            reserved = (e["reserved"] - int(row["peak_reserved_bytes"])) / int(row["peak_reserved_bytes"])
            inside = abs(allocated) <= ALLOCATED_BOUND and abs(reserved) <= RESERVED_BOUND
            if inside:
                if key in listed:
                    notes.append("within the bounds now, dropped: %s %s (allocated %+.2f%%, reserved %+.2f%%)"
                                 % (name, row["case_id"], 100 * allocated, 100 * reserved))
                continue
            why = listed[key]["why"] if key in listed else ""
            if not why:
                notes.append("NEEDS A REASON: %s %s (allocated %+.2f%%, reserved %+.2f%%): write its \"why\""
                             % (name, row["case_id"], 100 * allocated, 100 * reserved))
            rows.append({"file": name, "case_id": row["case_id"], "allocated_error": round(allocated, 4),
                         "reserved_error": round(reserved, 4), "why": why})
    for key in listed:
        if key not in seen:
            notes.append("no longer measured, dropped: %s %s" % key)
    return rows, notes


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fsdpsim", default=os.path.join(REPO, "build/tools/fsdpsim"), help="the binary estimated")
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if the file would change")
    ap.add_argument("--file", default=PATH, help="the list (default: tests/data/hardware/known_deviations.json)")
    args = ap.parse_args()
    with open(args.file) as f:
        doc = json.load(f)
    listed = {(r["file"], r["case_id"]): r for r in doc["rows"]}
    rows, notes = new_list(os.path.abspath(args.fsdpsim), listed)
    for n in notes:
        print(n)
    unchanged = rows == doc["rows"]
    print("%d rows (%d before)%s" % (len(rows), len(doc["rows"]), ", unchanged" if unchanged else ""))
    if args.check:
        return 0 if unchanged else 1
    doc["rows"] = rows
    with open(args.file, "w") as f:
        json.dump(doc, f, indent=1)
        f.write("\n")
    return 1 if any(not r["why"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
