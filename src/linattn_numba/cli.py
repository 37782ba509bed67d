"""``linattn-numba`` command line: ``demo``, ``bench``, ``compile-check`` (and the course commands).

The simulator has to be chosen before numba is imported, so this module imports nothing from numba at the top:
``demo`` first asks the CUDA driver (through ctypes) whether there is a GPU, and if there is none it sets
``NUMBA_ENABLE_CUDASIM=1`` itself and says so.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from . import sim
from .sim import gpu_present  # noqa: F401 - part of the CLI module's public surface


def _use_simulator_if_needed(quiet=False) -> bool:
    """Switch to Numba's CUDA simulator when there is no GPU (and say so). Returns True when simulating."""
    simulated = sim.use_if_no_gpu()
    if simulated and not quiet:
        print("No CUDA GPU found: running in Numba's CUDA simulator (NUMBA_ENABLE_CUDASIM=1) with tiny sizes. "
              "Times below are the simulator's, not a GPU's.")
    return simulated


def demo(args) -> int:
    simulated = _use_simulator_if_needed()
    from numba import cuda

    import linattn_numba as la
    from linattn_numba import reference
    from linattn_numba.testing import TOL_FP32, make_inputs, rel_err

    if simulated:
        shape = (1, 32, 2, 16, 16)
    else:
        shape = (2, 2048, 8, 128, 128)
    B, T, H, K, V = shape
    print(f"linattn-numba {la.__version__} demo: B={B} T={T} H={H} K={K} V={V}, float32, rungs {', '.join(la.RUNGS)}")
    rows = []
    failures = 0
    for rec in reference.RECURRENCES:
        inp = make_inputs(B, T, H, K, V, rec, initial_state=True, seed=0)
        args_np = (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"])
        o_ref, h_ref = reference.chunked(*args_np, initial_state=inp["initial_state"], chunk_size=64)
        dev = [None if a is None else cuda.to_device(a) for a in args_np]
        dh0 = cuda.to_device(inp["initial_state"])
        for rung in la.RUNGS:
            try:
                run = lambda: la.attention(*dev, initial_state=dh0, output_final_state=True,  # noqa: E731
                                           rung=rung, validate=False)
                o, ht = run()
                cuda.synchronize()
                reps = 1 if simulated else 5
                t0 = time.perf_counter()
                for _ in range(reps):
                    o, ht = run()
                cuda.synchronize()
                ms = (time.perf_counter() - t0) / reps * 1e3
                err = max(rel_err(o.copy_to_host(), o_ref), rel_err(ht.copy_to_host(), h_ref))
                ok = err <= TOL_FP32
            except Exception as e:  # noqa: BLE001 - report every rung, keep going
                print(f"  {rung} {rec}: {type(e).__name__}: {e}")
                err, ms, ok = float("nan"), float("nan"), False
            failures += not ok
            rows.append((rung, rec, err, ms, ok))
    shp = f"B{B} T{T} H{H} K{K} V{V}"
    print(f"\n{'rung':12s} {'recurrence':12s} {'shape':22s} {'max rel err':>12s} {'time ms':>10s}  check")
    for rung, rec, err, ms, ok in rows:
        print(f"{rung:12s} {rec:12s} {shp:22s} {err:12.2e} {ms:10.2f}  {'ok' if ok else 'FAIL'}")
    _demo_figure(rows, args.out, simulated, shp)
    print(f"\nwrote {args.out}" + (" (simulator times: only the ordering of the rungs means anything)"
                                 if simulated else ""))
    return 1 if failures else 0


def _demo_figure(rows, path, simulated, shp):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rungs_ = list(dict.fromkeys(r[0] for r in rows))
    recs = list(dict.fromkeys(r[1] for r in rows))
    fig, ax = plt.subplots(figsize=(7, 3.5))
    w = 0.8 / len(rungs_)
    for i, rung in enumerate(rungs_):
        vals = [next(r[3] for r in rows if r[0] == rung and r[1] == rec) for rec in recs]
        ax.bar(np.arange(len(recs)) + i * w, vals, w, label=rung)
    ax.set_xticks(np.arange(len(recs)) + w * (len(rungs_) - 1) / 2, recs)
    ax.set_yscale("log")
    ax.set_ylabel("ms per call (wall clock)")
    ax.set_title(f"linattn-numba demo, {shp}" + (" — CUDA simulator" if simulated else ""))
    ax.legend()
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="linattn-numba", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="run every rung on an embedded problem, check against the oracle, plot")
    d.add_argument("--out", default="demo.png", help="where to write the figure (default: demo.png)")
    b = sub.add_parser("bench", help="verify and time rungs and peers on a GPU; write JSON")
    b.add_argument("--shape", action="append", help="B,T,H,K,V (repeatable; default the standard shape)")
    b.add_argument("--rungs", help="comma-separated rung names (default: all)")
    b.add_argument("--recurrences", help="comma-separated recurrences (default: all four)")
    b.add_argument("--no-peers", action="store_true", help="skip fla / torch peers")
    b.add_argument("--fla", default="all", choices=("all", "chunk", "fused_recurrent"),
                   help="which fla kernels to time (default: all; at long T fused_recurrent walks every token "
                        "and Triton autotunes each kernel for about a minute on first use)")
    b.add_argument("--softmax", action="store_true", help="also time causal softmax attention (torch SDPA)")
    b.add_argument("--step", action="store_true", help="also time the decode step at B256 H16 K=V=128")
    b.add_argument("--only-step", action="store_true",
                   help="measure only the decode step (with --step implied) and the copy, no sequence shapes")
    b.add_argument("--tune", nargs="?", const="all", choices=("all", "seq", "step"), default=None,
                   help="also sweep r1's launch choices first: the sequence kernel's (seq), the decode step's "
                        "(step) or both (all, the default when the flag has no value)")
    b.add_argument("--tune-recurrences", default="gated_delta",
                   help="comma-separated recurrences r1's sequence sweep times each launch choice on (default "
                        "gated_delta); the launch kept is the one with the least total time over them")
    b.add_argument("--out", default="figures/data/bench.json", help="JSON output path")
    c = sub.add_parser("compile-check", help="compile every kernel for sm_90 (no GPU needed)")
    c.add_argument("rungs", nargs="*")
    gr = sub.add_parser("grade", help="check a rung module file (e.g. an exercise) against the oracle cases")
    from . import grade as _grade

    _grade.add_arguments(gr)
    f = sub.add_parser("figures", help="draw figures/*.png and the README results table from figures/data/*.json")
    f.add_argument("--data", default="figures/data", help="folder of bench JSON files (default: figures/data)")
    f.add_argument("--out", default="figures", help="folder for the PNGs (default: figures)")
    f.add_argument("--readme", default="README.md", help="README whose results markers are rewritten")
    f.add_argument("--no-readme", action="store_true", help="only draw the figures")
    args = p.parse_args(argv)
    if args.cmd == "demo":
        return demo(args)
    if args.cmd == "bench":
        from . import bench

        bench.run(args)
        return 0
    if args.cmd == "compile-check":
        os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
        from . import compile_check

        return compile_check.main(args.rungs)
    if args.cmd == "figures":
        from . import figures

        return figures.main(args)
    if args.cmd == "grade":
        return _grade.run(args)
    return 2


if __name__ == "__main__":
    sys.exit(main())
