"""Tune rung r3 ``shared`` (or r5 ``warp_roles``, r6 ``tensor_cores``: ``--rung``) on the GPU: time every (chunk
size, value tile[, precision, hand-off]) candidate for each recurrence, and each kernel of every candidate on its
own; check every candidate against the float64 oracle on two heads.

Usage (on the H200; tools/h200.sh shows the environment it needs)::

    python3 tools/tune_r3.py [--shape B,T,H,K,V] [--recurrences plain,decay,...] [--chunks 32,64] [--bv 16,32,64]
                             [--rung shared|warp_roles|tensor_cores] [--precision 3xtf32,tf32]
                             [--intra r3,tensor_cores] [--schedule fused,split] [--handoff pair,rendezvous]
                             [--vary MODULE.NAME=a,b] [--out tune_r3.json]

``--vary r3_shared.OUT_KERNEL=pipelined,simple`` sets a module constant of ``linattn_numba.rungs`` that its
launches read (not one frozen into a compiled kernel) to each value in turn: an A/B in one process. Given more
than once, every combination of the values is timed.

Writes one JSON file: the device, the shape, and per recurrence the records {chunk, bv, median_ms, tflops,
rel_err} plus the per-kernel split of the fastest candidate. ``r3_shared.BV_TABLE`` and ``DEFAULT_CHUNK`` are
set from it by hand (the module docstring says so); this script does not edit the module.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4,8192,16,128,128")
    ap.add_argument("--recurrences", default="plain,decay,delta,gated_delta")
    ap.add_argument("--chunks", default="32,64")
    ap.add_argument("--bv", default="16,32,64")
    ap.add_argument("--rung", default="shared", choices=("shared", "warp_roles", "tensor_cores"))
    ap.add_argument("--precision", default="3xtf32", help="r6's precisions to try (comma-separated)")
    ap.add_argument("--intra", default="r3", help="r6's intra kernels to try (comma-separated: r3, tensor_cores)")
    ap.add_argument("--schedule", default="fused",
                    help="r3's and r6's schedules to try (comma-separated: fused, split)")
    ap.add_argument("--handoff", default=None,
                    help="r5's stage hand-offs to try (comma-separated: pair, rendezvous; default: r5's HANDOFF)")
    ap.add_argument("--vary", action="append", default=None,
                    help="MODULE.NAME=a,b: a rungs module's constant (read at launch) to try at each value "
                         "(repeatable: every combination; values of digits are set as integers)")
    ap.add_argument("--out", default="tune_r3.json")
    ap.add_argument("--no-check", action="store_true", help="skip the oracle check (faster)")
    args = ap.parse_args(argv)

    from numba import cuda

    from linattn_numba import bench
    from linattn_numba import rungs
    from linattn_numba.testing import make_inputs

    B, T, H, K, V = (int(x) for x in args.shape.split(","))
    timer = bench.Timer()
    mod = rungs.module(args.rung)
    precisions = args.precision.split(",") if args.rung == "tensor_cores" else [None]
    intras = args.intra.split(",") if args.rung == "tensor_cores" else [None]
    schedules = args.schedule.split(",") if args.rung in ("tensor_cores", "shared") else [None]
    handoffs = (args.handoff or mod.HANDOFF).split(",") if args.rung == "warp_roles" else [None]
    varied, vary_values = bench.varied_constants(args.vary)  # (module, name, values) per --vary; combinations
    result = {"device": bench.device_info(), "rung": args.rung, "shape": dict(B=B, T=T, H=H, K=K, V=V),
              "date": time.ctime(), "git": bench.git_sha(), "versions": bench.versions(), "recurrences": {}}
    for rec in args.recurrences.split(","):
        inp = make_inputs(B, T, H, K, V, rec, seed=0)
        d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
        o = cuda.device_array((B, T, H, V), np.float32)
        ht = cuda.device_array((B, H, K, V), np.float32)
        host_args = (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], None)
        flops = bench.counted_flops(rec, B, T, H, K, V)
        rows = []
        for C in (int(x) for x in args.chunks.split(",")):
            for bv, prec, intra, sched, hand, var in ((int(x), p, i, s, h, w) for x in args.bv.split(",")
                                                      for p in precisions for i in intras for s in schedules
                                                      for h in handoffs for w in vary_values):
                if sched == "split" and intra not in (None, intras[0]):
                    continue  # the split schedule has its own output kernel: the intra choice does not apply
                row = {"chunk": C, "bv": bv}
                kw = {"bv": bv}
                if prec is not None:
                    row["precision"] = kw["precision"] = prec
                if intra is not None:
                    kw["intra"] = intra
                    if sched != "split":
                        row["intra"] = intra
                if sched is not None:
                    row["schedule"] = kw["schedule"] = sched
                if hand is not None:
                    row["handoff"] = kw["handoff"] = hand
                for (vary_mod, vary_name, _), x in zip(varied, var):
                    row[vary_name] = x
                    setattr(vary_mod, vary_name, x)
                try:
                    todo = mod.launches(d["q"], d["k"], d["v"], d["g"], d["beta"], o, None, ht, K**-0.5, C, **kw)

                    def fn(todo=todo):
                        for _, launch in todo:
                            launch()

                    fn()
                    cuda.synchronize()
                    if not args.no_check:
                        row["rel_err"] = bench.check_heads(o.copy_to_host(), ht.copy_to_host(), inp,
                                                           [(0, 0), (B - 1, H - 1)], host_args)
                    row.update(timer.time(fn))
                    row["tflops"] = flops / row["median_ms"] / 1e9
                    for name, launch in todo:  # each kernel alone (inputs as the full run left them)
                        row[f"{name}_ms"] = timer.time(launch)["median_ms"]
                except Exception as e:  # noqa: BLE001 - record and keep tuning
                    row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
                rows.append(row)
                print(rec, json.dumps(row), flush=True)
        ok = [r for r in rows if "median_ms" in r and r.get("rel_err", 0) <= 2e-4]
        best = min(ok, key=lambda r: r["median_ms"]) if ok else None
        result["recurrences"][rec] = {"records": rows, "best": best}
        print(rec, "BEST", json.dumps(best), flush=True)
        with open(args.out, "w") as f:  # after every recurrence: a run cut short keeps what it measured
            json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
