"""Split one kernel's per-instruction warp-stall samples (Nsight Compute's SourceCounters, SASS view) at its block
barriers, so that each phase between two ``syncthreads`` gets its share of the kernel's time.

Input: the CSV that ``ncu -i REPORT --page source --csv --print-source sass`` prints for one kernel (``tools/h200.sh
ncu_src`` writes one per kernel; gzipped ``.csv.gz`` files are read too). Samples are taken at a fixed interval from
every warp, so a phase's share of all samples is its share of the warps' time; the samples at a ``BAR.SYNC`` (a warp
waiting for the rest of its block) are counted to the phase that the barrier closes: ncu books a warp's wait at a
barrier on the instruction after the ``BAR.SYNC`` (the one it cannot issue yet), so a phase ends one instruction
after its barrier. Phases are in address order, which is the kernel's source order (loops stay inside one phase).

Usage::

    python3 tools/ncu_phases.py h200_ncu_src_<sha>_2.csv [...] [--labels stage,gates,scores,... [--labels ...]]
                                [--json out.json]

(one ``--labels`` per file, in order; a single one applies to every file)
"""

from __future__ import annotations

import argparse
import csv
import gzip
import json
import sys
from collections import Counter

from linattn_numba.ncu import split_name  # ncu's (Numba-mangled) kernel names -> (module, factory, kernel)


def read(path):
    """``(kernel name, rows)``: rows are dicts of the SASS listing (Address, Source, counters...)."""
    with (gzip.open(path, "rt", newline="") if path.endswith(".gz") else open(path, newline="")) as f:
        lines = list(csv.reader(f))
    name = lines[0][1] if lines and lines[0] and lines[0][0] == "Kernel Name" else "?"
    head = next(i for i, r in enumerate(lines) if r and r[0] == "Address")
    cols = lines[head]
    rows = [dict(zip(cols, r)) for r in lines[head + 1:] if len(r) == len(cols)]
    if not rows:
        raise SystemExit(f"{path}: no SASS rows (is it ncu's --page source --print-source sass CSV?)")
    return name, rows


def _num(x):
    try:
        return float(x)
    except (TypeError, ValueError):
        return 0.0


def phases(rows):
    """Per phase (instructions up to and including a barrier, then the rest): samples, stall reasons, counts."""
    stall_cols = [c for c in rows[0] if c.startswith("stall_") and "(Not Issued)" not in c]
    out, cur, close = [], None, False
    for r in rows:
        if cur is None:
            cur = {"first": r["Address"], "samples": 0.0, "stalls": Counter(), "inst": Counter(), "executed": 0.0}
        op = r["Source"].split()[0] if r["Source"].split() else "?"
        if op.startswith("@"):  # predicated: the opcode follows the predicate
            op = r["Source"].split()[1]
        base = op.split(".")[0]
        cur["samples"] += _num(r["Warp Stall Sampling (All Samples)"])
        n = _num(r["Instructions Executed"])
        cur["executed"] += n
        cur["inst"][base] += n
        for c in stall_cols:
            cur["stalls"][c[len("stall_"):]] += _num(r[c])
        if close:  # the instruction after a barrier holds the barrier's wait
            cur["last"] = r["Address"]
            out.append(cur)
            cur = None
        close = base == "BAR"
    if cur is not None:
        cur["last"] = rows[-1]["Address"]
        out.append(cur)
    return out


def report(path, labels=None, file=sys.stdout):
    name, rows = read(path)
    ph = phases(rows)
    total = sum(p["samples"] for p in ph) or 1.0
    short = "::".join(x for x in split_name(name) if x)
    print(f"{path}: {short} ({len(rows)} instructions, {len(ph)} phases, {total:.0f} samples)", file=file)
    print(f"{'phase':<14}{'share':>7}  {'top stalls (share of the phase)':<52}{'FFMA':>10}{'LDS':>9}{'LDG':>9}"
          f"{'warp inst':>11}", file=file)
    res = []
    for i, p in enumerate(ph):
        label = labels[i] if labels and i < len(labels) else f"#{i}"
        top = ", ".join(f"{k} {v / max(p['samples'], 1):.0%}" for k, v in p["stalls"].most_common(3) if v)
        print(f"{label:<14}{p['samples'] / total:>7.1%}  {top:<52}{p['inst']['FFMA']:>10.0f}{p['inst']['LDS']:>9.0f}"
              f"{p['inst']['LDG']:>9.0f}{p['executed']:>11.0f}", file=file)
        res.append({"phase": label, "share": p["samples"] / total, "samples": p["samples"],
                    "stalls": dict(p["stalls"]), "ffma": p["inst"]["FFMA"], "lds": p["inst"]["LDS"],
                    "ldg": p["inst"]["LDG"], "executed": p["executed"], "first": p["first"], "last": p["last"]})
    return {"kernel": name, "file": path, "phases": res}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", nargs="+")
    ap.add_argument("--labels", action="append", default=[],
                    help="comma-separated phase names, in order: one per file, or one for all files")
    ap.add_argument("--json", default=None, help="also write the phases as JSON")
    a = ap.parse_args(argv)
    lists = [[x for x in t.split(",") if x] for t in a.labels]
    if len(lists) not in (0, 1, len(a.csv)):
        ap.error(f"--labels given {len(lists)} times for {len(a.csv)} files: give it once, or once per file")
    res = [report(p, (lists[i] if len(lists) > 1 else lists[0]) if lists else None) for i, p in enumerate(a.csv)]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
