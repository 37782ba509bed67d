"""Run rungs on a mid-size shape and check them against the oracle, for ``compute-sanitizer``.

    compute-sanitizer --tool memcheck  --error-exitcode 9 python3 tools/sanitize.py --rungs chunked
    compute-sanitizer --tool racecheck --error-exitcode 9 python3 tools/sanitize.py --rungs chunked
    compute-sanitizer --tool synccheck --error-exitcode 9 python3 tools/sanitize.py --rungs chunked

The shape is mid-size on purpose: several chunks, T not a multiple of the chunk, K != V, more than one value tile,
with an initial and a final state, so every code path and every boundary is exercised; small enough that the
sanitizer (100x slower or worse) finishes in a minute. Exit status 1 when a result is off.

To read a racecheck report on r5: ``--handoffs pair`` runs one hand-off, and ``--cubins DIR`` writes the cubin of
each r5 state kernel it launches, whose ``nvdisasm -c`` listing has the report's ``+0x...`` offsets (r5's docstring,
"Rechecked at").

``--vary MODULE.NAME=a,b`` (as in ``tools/tune_r3.py``) runs every rung once per value of a module constant, e.g.
``--vary r3_shared.SPLIT_ROWS=4,8 --vary r3_shared.SPLIT_BV=32,64``: r3's split state kernel in both of its tilings
at this shape, where ``split_tile``'s rule alone would pick one (4 x 4: too few blocks here for 8 x 4).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys

import numpy as np
from numba import cuda

import linattn_numba as la
from linattn_numba import reference, rungs
from linattn_numba._common import kernels_made
from linattn_numba.testing import TOL_FP32, make_inputs, rel_err


def _write_cubins(folder, made):
    """The cubin of every compiled variant of the kernels in ``made`` (``kernels_made``'s list), each once, named by
    its factory's arguments: ``r5_state_<args>_<i>.cubin``."""
    os.makedirs(folder, exist_ok=True)
    seen = set()
    for args, _, kern in made:
        if id(kern) in seen:
            continue
        seen.add(id(kern))
        name = "r5_state_" + "_".join(str(int(x)) if isinstance(x, bool) else str(x) for x in args)
        for i, k in enumerate(kern.overloads.values()):
            obj = k._codelibrary.get_cubin()  # bytes, or cuda.core ObjectCode (.code)
            with open(os.path.join(folder, f"{name}_{i}.cubin"), "wb") as f:
                f.write(obj if isinstance(obj, (bytes, bytearray)) else obj.code)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rungs", default=",".join(la.RUNGS))
    p.add_argument("--recurrences", default=",".join(reference.RECURRENCES))
    p.add_argument("--shape", action="append", default=None,
                   help="B,T,H,K,V (repeat for several shapes in one process: each kernel variant is compiled once, "
                        "which is most of a short run's time; default 2,300,2,64,80)")
    p.add_argument("--chunk", type=int, default=64)
    p.add_argument("--segments", type=int, default=3,
                   help="r4 scan's segment count (its cost model would pick 1 here; 3 runs all three phases "
                        "and the scan, with a shorter tail segment)")
    p.add_argument("--scan", default="tree", choices=("tree", "chain"), help="r4 scan's phase 2")
    p.add_argument("--engine", default=None, help="r4 scan's engine rung (default: its DEFAULT_ENGINES choice)")
    p.add_argument("--handoffs", default=None, help="r5 warp_roles: the hand-offs to run (default: all, HANDOFFS)")
    p.add_argument("--vary", action="append", default=None,
                   help="MODULE.NAME=a,b: run once per value of a constant of linattn_numba.rungs.MODULE (repeat: "
                        "every combination)")
    p.add_argument("--cubins", default=None,
                   help="a folder (GPU only): write the cubin of every r5 state kernel launched there (the code the tools "
                        "instrument; a sanitizer's '+0x...' offsets are offsets into its SASS: nvdisasm -c)")
    a = p.parse_args(argv)
    a.shape = a.shape or ["2,300,2,64,80"]
    made = None
    with contextlib.ExitStack() as stack:
        if a.cubins:  # record r5's state kernels as its launches get them, and write their cubins at the end
            made = stack.enter_context(kernels_made(rungs.module("warp_roles"), "_state_kernel"))
        try:
            return _run(a)
        finally:
            if made:
                _write_cubins(a.cubins, made)


def _run(a) -> int:
    from linattn_numba import bench

    varied, combos = bench.varied_constants(a.vary)
    bad = 0
    for combo in combos:
        for (mod, name, _), x in zip(varied, combo):
            setattr(mod, name, x)
        if varied:
            print("with " + ", ".join(f"{m.__name__.rsplit('.', 1)[1]}.{n}={x}" for (m, n, _), x in zip(varied, combo)),
                  flush=True)
        bad += _run_once(a)
    return 1 if bad else 0


def _run_once(a) -> int:
    """Every shape, rung and recurrence of ``a`` once, with the module constants as they are now: how many were
    off."""
    bad = 0
    for shape in a.shape:
        if len(a.shape) > 1:
            print(f"shape {shape}", flush=True)
        bad += _run_shape(a, *(int(x) for x in shape.split(",")))
    return bad


def _run_shape(a, B, T, H, K, V) -> int:
    """Every rung and recurrence of ``a`` at one shape: how many were off."""
    bad = 0
    for r in a.rungs.split(","):
        mod = rungs.module(r)
        for rec in a.recurrences.split(","):
            inp = make_inputs(B, T, H, K, V, rec, initial_state=True, seed=1)
            d = {n: (None if x is None else cuda.to_device(x)) for n, x in inp.items()}
            o_ref, h_ref = reference.chunked(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"],
                                             initial_state=inp["initial_state"], chunk_size=64)
            # r1 stages its tiles two ways (cp.async double buffer, or through registers), r5 hands its stages
            # over two ways (FULL / EMPTY pairs, or one meeting of the whole block per chunk): both are checked.
            # r4 is tagged with the engine rung of its phase 1 (r6 unless --engine names another) and the rung of
            # its phase 3 (or "shared/split": both phases on r3's split schedule, the additive family's default;
            # "+tc" where phase 3 runs r6's pipelined output kernel, r4.SPLIT_OUT "tensor_cores", since 2af77ac)
            if r == "scan":
                eng = mod.engine_module(K, V, a.chunk, a.engine)
                p3 = mod.phase3_module(K, V, a.chunk, inp["beta"] is not None, eng)
                tag = f"{eng.NAME}/{p3.NAME}"
                if mod._runs_split(d["q"], d["k"], d["v"], d["g"], d["beta"], d["v"], a.chunk):
                    tag = "shared/split"  # d["v"] stands in for o: same shape and layout
                    if mod.split_out_module(K, V, a.chunk) is not None:
                        tag += "+tc"
                variants = [(tag, {"num_segments": a.segments, "scan": a.scan, "engine": a.engine})]
            elif r == "recurrent":
                variants = [("async", {"asy": True}), ("registers", {"asy": False})]
            elif r == "warp_roles":
                variants = [(h, {"handoff": h}) for h in (a.handoffs.split(",") if a.handoffs else mod.HANDOFFS)]
            else:
                variants = [("", {})]
            for tag, extra in variants:
                o = cuda.to_device(np.full((B, T, H, V), np.nan, np.float32))
                ht = cuda.to_device(np.full((B, H, K, V), np.nan, np.float32))
                mod.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, d["initial_state"], ht, K**-0.5,
                            a.chunk, **extra)
                eo, eh = rel_err(o.copy_to_host(), o_ref), rel_err(ht.copy_to_host(), h_ref)
                ok = eo <= TOL_FP32 and eh <= TOL_FP32
                bad += not ok
                print(f"{r:12s} {tag:24s} {rec:12s} output rel err {eo:.1e}  state rel err {eh:.1e}  "
                      f"{'ok' if ok else 'WRONG'}", flush=True)
    return bad


if __name__ == "__main__":
    sys.exit(main())
