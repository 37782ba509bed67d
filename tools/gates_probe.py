"""Probe: r3's gates kernel (bcum, the in-chunk cumulative log-gates) as it was until 61528a1 (one thread per
(head, chunk)) against the current one (a block per chunk of 32 heads, coalesced), each alone and inside r3's decay
forward (split schedule, overlapped launch), interleaved, on one process's inputs. Checks the two bcum bit for bit.

    python3 tools/gates_probe.py [--shape 4,8192,16,128,128] [--out gates_probe.json]
"""
from __future__ import annotations

import argparse
import json

import numpy as np


def _old_gates_kernel(C, zero):
    from numba import cuda, float32
    NB = min(C, 32)

    def gates(g, bcum, flags):
        B, T, H = g.shape
        NC = (T + C - 1) // C
        i = cuda.grid(1)
        if zero and i < flags.shape[0]:
            flags[i] = 0
        if i < B * H * NC:
            bh = i // NC
            c = i % NC
            b = bh // H
            h = bh % H
            t0 = c * C
            n = min(C, T - t0)
            x = cuda.local.array(NB, float32)
            acc = float32(0.0)
            for tb in range(0, C, NB):
                for e in range(NB):
                    x[e] = float32(g[b, t0 + tb + e, h]) if tb + e < n else float32(0.0)
                for e in range(NB):
                    acc += x[e]
                    bcum[bh, t0 + tb + e] = acc

    return cuda.jit(gates)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="4,8192,16,128,128")
    ap.add_argument("--out", default="gates_probe.json")
    args = ap.parse_args(argv)
    from numba import cuda

    from linattn_numba import bench
    from linattn_numba._common import set_kernel_attribute
    from linattn_numba.rungs import r3_shared as r3
    from linattn_numba.testing import make_inputs

    B, T, H, K, V = (int(x) for x in args.shape.split(","))
    C = 64
    NC = -(-T // C)
    inp = make_inputs(B, T, H, K, V, "decay", seed=0)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    o = cuda.device_array((B, T, H, V), np.float32)
    ht = cuda.device_array((B, H, K, V), np.float32)
    old = _old_gates_kernel(C, True)
    stream = cuda.default_stream()
    new_launch = r3._gates_launch

    def old_launch(g, bcum, C_, stream_, flags=None):
        fl = r3._flags(1, stream_) if flags is None else flags
        n = max(B * H * NC, fl.shape[0])
        old[-(-n // 128), 128, stream_](g, bcum, fl)

    carve = r3._gates_kernel.__wrapped__(C, True)  # a dispatcher of its own, preferring the most shared memory

    def carve_launch(g, bcum, C_, stream_, flags=None):
        carve[r3._gates_grid(B, T, H, C), r3.GATES_THREADS, stream_](g, bcum, flags)

    bc_old = cuda.to_device(np.full((B * H, NC * C), np.nan, np.float32))
    bc_new = cuda.to_device(np.full((B * H, NC * C), np.nan, np.float32))
    flags = cuda.to_device(np.zeros(1 + B * H * NC, np.int32))
    old_launch(d["g"], bc_old, C, stream, flags)
    new_launch(d["g"], bc_new, C, stream, flags)
    set_kernel_attribute(carve.compile(tuple(carve.typeof_pyval(a) for a in (d["g"], bc_new, flags))),
                         "CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT", 100)
    same = bool(np.array_equal(bc_old.copy_to_host(), bc_new.copy_to_host()))
    print("bcum bit for bit:", same)
    timer = bench.Timer()
    res = {"shape": [B, T, H, K, V], "bcum_equal": same, "device": bench.device_info(), "runs": []}
    for rnd in range(2):
        for name, launch in (("old", old_launch), ("new", new_launch), ("new_carveout100", carve_launch)):
            alone = timer.time(lambda launch=launch: launch(d["g"], bc_new, C, stream, flags))
            r3._gates_launch = launch
            todo = r3.launches(d["q"], d["k"], d["v"], d["g"], d["beta"], o, None, ht, K**-0.5, C, schedule="split")

            def fn(todo=todo):
                for _, la in todo:
                    la()

            full = timer.time(fn)
            r3._gates_launch = new_launch
            row = {"round": rnd, "gates": name, "gates_alone_ms": alone["median_ms"], "forward_ms": full["median_ms"],
                   "forward_p10": full["p10_ms"], "forward_p90": full["p90_ms"]}
            print(json.dumps(row), flush=True)
            res["runs"].append(row)
            with open(args.out, "w") as f:  # after every row: a cut run keeps what it measured
                json.dump(res, f, indent=1)
    zero = timer.time(lambda: r3._launch(r3._zero_flags, -(-flags.shape[0] // 256), 256, 0, stream, (flags,)))
    res["zero_flags_alone_ms"] = zero["median_ms"]
    print("zero_flags alone", zero["median_ms"])
    with open(args.out, "w") as f:
        json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
