"""H200 probe: rung r4 ``scan`` with each of its engines (r3 ``shared``, r6 ``tensor_cores``) at the long-context
shapes of issue 4, beside fla's chunk kernel, every r4 run checked against the float64 oracle on two heads first.

    python3 tools/r4_engine_probe.py [--shape B,T,H,K,V:recurrence ...] [--engines shared,tensor_cores]
                                     [--ns-factors 1,0.5,2] [--phase3 default,engine] [--vaug 0,1]
                                     [--split-out shared,tensor_cores] [--vary MODULE.NAME=a,b ...]
                                     [--precisions 3xtf32,tf32] [--tol 1e-4] [--no-peers]
                                     [--out r4_engines.json]

Default shapes: decay at B1 T1048576 H2 K=V=128 and gated delta at B1 T262144 H2 K=V=128. The segment count is
r4's own choice (its cost model, measured with r2 / r3 as the engine) times each of ``--ns-factors`` (default 1:
the model's choice alone); the JSON records it. Each record also has ``host_launch_us``, the host's time to
enqueue one forward; a "state only" record per engine times phases 1 and 2 alone (``o=None``), at the model's count. Writes the JSON after
every record (a run cut short keeps what it measured). ``--phase3`` times phase 3 on each of the named rungs (r4's
``phase3`` argument; "engine" is the engine itself, "default" r4's ``PHASE3``). ``--vaug 0,1`` times the delta
family's phase 1 both ways: on v with the engine's wide state (0, r4's default) and on the copy [v | 0] (1, r4's
``VAUG``); records of the copy have ", vaug" in their key. It is a probe file (figures/data/probes/), not a bench
file: ``linattn-numba figures`` draws r4 from the bench's ``scan`` records, which use the default engine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time

import numpy as np

DEFAULT_SHAPES = ("1,1048576,2,128,128:decay", "1,262144,2,128,128:gated_delta")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", action="append", help="B,T,H,K,V:recurrence (repeatable)")
    ap.add_argument("--engines", default="shared,tensor_cores")
    ap.add_argument("--ns-factors", default="1", help="segment counts to time: the model's choice times these")
    ap.add_argument("--phase3", default="default",
                    help="phase 3's rungs to time with each engine (r4's PHASE3_RUNGS, 'engine', or 'default': "
                         "r4's PHASE3)")
    ap.add_argument("--vaug", default="0", help="r4.VAUG values to time (0: v and the wide state, 1: [v | 0])")
    ap.add_argument("--split-out", default=None,
                    help="r4.SPLIT_OUT values to time (whose output kernel phase 3 runs with r4's split: shared, "
                         "tensor_cores; default r4's)")
    ap.add_argument("--vary", action="append", default=None,
                    help="MODULE.NAME=a,b: a rungs module's constant (read at launch) to time at each value "
                         "(repeatable: every combination; values of digits are set as integers)")
    ap.add_argument("--precisions", default=None,
                    help="r4.forward's precision values to time (3xtf32, tf32: the products of r6's kernels; default "
                         "r4's own)")
    ap.add_argument("--tol", type=float, default=1e-4,
                    help="the largest relative error against the oracle a run may have (default 1e-4; TF32 runs ~1e-3)")
    ap.add_argument("--no-peers", action="store_true", help="skip fla")
    ap.add_argument("--out", default="r4_engines.json")
    args = ap.parse_args(argv)

    from numba import cuda

    from linattn_numba import bench, peers
    from linattn_numba.rungs import r4_scan as r4
    from linattn_numba.testing import make_inputs

    engines = args.engines.split(",")
    for e in engines:
        if e not in r4.ENGINES:
            ap.error(f"engine {e!r} is not one of {r4.ENGINES}")
    varied, vary_values = bench.varied_constants(args.vary)  # (module, name, values) per --vary; combinations
    timer = bench.Timer()
    result = {"device": bench.device_info(), "versions": bench.versions(), "git": bench.git_sha(),
              "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "records": []}

    def log(rec):
        result["records"].append(rec)
        print(json.dumps(rec), flush=True)
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)

    for spec in args.shape or DEFAULT_SHAPES:
        dims, rec = spec.split(":")
        B, T, H, K, V = (int(x) for x in dims.split(","))
        inp = make_inputs(B, T, H, K, V, rec, seed=0)
        d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
        fargs = (d["q"], d["k"], d["v"], d["g"], d["beta"])
        host_args = (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], None)
        o = cuda.device_array((B, T, H, V), np.float32)
        ht = cuda.device_array((B, H, K, V), np.float32)
        delta = rec in ("delta", "gated_delta")
        ns = r4.choose_num_segments(B, T, H, K, V, 64, delta)
        tag = {"recurrence": rec, "shape": dict(B=B, T=T, H=H, K=K, V=V), "num_segments": ns,
               "tokens": B * T * H}
        flops = bench.counted_flops(rec, B, T, H, K, V)
        oracle = {}  # the float64 oracle's results on the two checked heads, computed once per shape
        factors = [float(f) for f in args.ns_factors.split(",")]
        vaugs = [bool(int(x)) for x in args.vaug.split(",")]
        # one record per engine, phase-3 rung, segment count and phase-1 form
        split_outs = args.split_out.split(",") if args.split_out else [r4.SPLIT_OUT]
        default_split_out = r4.SPLIT_OUT
        precisions = args.precisions.split(",") if args.precisions else [None]
        for eng, p3, factor, vaug, sout, var, prec in [
                (e, p, f, a, so, w, pr) for e in engines for p in args.phase3.split(",") for f in factors
                for a in vaugs for so in split_outs for w in vary_values for pr in precisions]:
            r4.VAUG = vaug
            r4.SPLIT_OUT = sout
            for (vary_mod, vary_name, _), x in zip(varied, var):
                setattr(vary_mod, vary_name, x)
            nsf = max(1, round(ns * factor))
            key = f"scan[{eng}]" if p3 == "default" else f"scan[{eng}, phase 3 {p3}]"
            key = key[:-1] + ", vaug]" if vaug else key
            key = key[:-1] + f", split out {sout}]" if args.split_out else key
            key = key[:-1] + f", ns x{factor:g}]" if len(factors) > 1 else key
            for (_, vary_name, _), x in zip(varied, var):
                key = key[:-1] + f", {vary_name}={x}]"
            key = key[:-1] + f", {prec}]" if prec is not None else key
            row = {"key": key, "engine": eng, "phase3": p3, **tag, "num_segments": nsf,
                   "model_num_segments": ns, "vaug": vaug, "split_out": sout}
            for (_, vary_name, _), x in zip(varied, var):
                row[vary_name] = x
            if prec is not None:
                row["precision"] = prec
            try:
                def fn(eng=eng, nsf=nsf, p3=p3, prec=prec):
                    r4.forward(*fargs, o, None, ht, K**-0.5, 64, engine=eng, num_segments=nsf,
                               phase3=None if p3 == "default" else p3, precision=prec)

                fn()
                cuda.synchronize()
                row["rel_err"] = bench.check_heads(o.copy_to_host(), ht.copy_to_host(), inp,
                                                   [(0, 0), (B - 1, H - 1)], host_args, cache=oracle)
                if not row["rel_err"] <= args.tol:
                    raise AssertionError(f"relative error {row['rel_err']:.2e} against the oracle")
                row.update(timer.time(fn))
                row["tflops"] = flops / row["median_ms"] / 1e9
                row["tokens_per_s"] = B * T * H / (row["median_ms"] / 1e3)
            except Exception as e:  # noqa: BLE001 - record and go on to the next engine
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            log(row)
        r4.SPLIT_OUT = default_split_out
        for eng, vaug in [(e, a) for e in engines for a in vaugs]:
            # phases 1 and 2 alone (o=None: only ht), at the model's segment count: the rest of the total is phase 3
            r4.VAUG = vaug
            row = {"key": f"scan[{eng}{', vaug' if vaug else ''}] state only", "engine": eng, **tag, "vaug": vaug}
            try:
                row.update(timer.time(lambda eng=eng: r4.forward(*fargs, None, None, ht, K**-0.5, 64, engine=eng)))
            except Exception as e:  # noqa: BLE001
                row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
            log(row)
        r4.VAUG = False
        if not args.no_peers:
            for name, pfn in peers.fla_peers(rec).items():
                if "chunk" not in name:
                    continue  # fused_recurrent walks every token; its long-T autotune costs minutes
                row = {"key": name, **tag}
                try:
                    row.update(timer.time(lambda pfn=pfn: pfn(*fargs, None, True)))
                    row["tflops"] = flops / row["median_ms"] / 1e9
                except Exception as e:  # noqa: BLE001
                    row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
                log(row)
        del d, o, ht, fargs
    return 0


if __name__ == "__main__":
    sys.exit(main())
