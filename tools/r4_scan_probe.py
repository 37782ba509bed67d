"""H200 probe for rung r4 ``scan`` (one device call): times r4 against its engine and fla at the long-context
shapes, sweeps the segment count and the scan kind, times phase 2 alone (the constants of r4's cost model), and
checks r4 against the engine on the full arrays and against the float64 oracle on one head.

    python3 tools/r4_scan_probe.py OUT.json     (the H200 result: figures/data/probes/h200_r4_scan_probe.json; not a
    bench file, so it lives outside figures/data/*.json, which `linattn-numba figures` reads)
"""

import json
import math
import sys
import time

import numpy as np
from numba import cuda

from linattn_numba import peers, reference
from linattn_numba.bench import Timer, device_info
from linattn_numba.rungs import r2_chunked as r2
from linattn_numba.rungs import r4_scan as r4
from linattn_numba.testing import make_inputs, rel_err

out_path = sys.argv[1]
result = {"device": device_info(), "records": []}
timer = Timer()
T0 = time.time()


def log(rec):
    result["records"].append(rec)
    print(json.dumps(rec), flush=True)
    with open(out_path, "w") as f:
        json.dump(result, f, indent=1)


def timed(key, fn, **extra):
    t = time.time()
    try:
        r = timer.time(fn, samples=5, max_seconds=2.0)
    except Exception as e:  # noqa: BLE001
        r = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
    log({"key": key, **extra, **r, "wall_s": round(time.time() - t, 1), "t": round(time.time() - T0, 1)})
    return r


def phase2_micro():
    """Phase 2 alone: chain vs tree, delta (K = V = 128) and additive, B1 H2."""
    B, H, K, V = 1, 2, 128, 128
    for ns in (16, 33, 66, 132, 264):
        p = cuda.to_device((np.random.default_rng(0).standard_normal((B, ns, H, K, V + K)) * 0.05).astype(np.float32))
        x = cuda.device_array((B, ns, H, K, V), np.float32)
        ht = cuda.device_array((B, H, K, V), np.float32)
        for kind in ("chain", "tree"):
            timed("phase2_delta", lambda kind=kind: r4._scan(p, None, None, x, ht, kind, True, False, 0), ns=ns,
                  scan=kind, model_us=r4._scan_cost_us(kind, B, H, K, V, ns, True))
        pa = cuda.to_device(np.ones((B, ns, H, K, V), np.float32))
        m = cuda.to_device(np.full((B, ns, H), 0.5, np.float32))
        for kind in ("chain", "tree"):
            timed("phase2_add", lambda kind=kind: r4._scan(pa, m, None, x, ht, kind, False, True, 0), ns=ns,
                  scan=kind, model_us=r4._scan_cost_us(kind, B, H, K, V, ns, False))


def long_shape(rec, shape, ns_list, fla_name):
    B, T, H, K, V = shape
    inp = make_inputs(B, T, H, K, V, rec, seed=0)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    args = (d["q"], d["k"], d["v"], d["g"], d["beta"])
    o = cuda.device_array((B, T, H, V), np.float32)
    ht = cuda.device_array((B, H, K, V), np.float32)
    scale = K**-0.5
    tag = dict(recurrence=rec, shape=list(shape))
    r2.forward(*args, o, None, ht, scale, 64)
    cuda.synchronize()
    o_e, h_e = o.copy_to_host(), ht.copy_to_host()
    auto_ns = r4.choose_num_segments(B, T, H, K, V, 64, rec in ("delta", "gated_delta"))
    log({"key": "plan", **tag, "auto_ns": auto_ns, "plan": r4.plan_segments(T, 64, auto_ns)})
    t = time.time()
    r4.forward(*args, o, None, ht, scale, 64)
    cuda.synchronize()
    o_r, h_r = o.copy_to_host(), ht.copy_to_host()
    log({"key": "check_vs_engine", **tag, "rel_o": rel_err(o_r, o_e), "rel_ht": rel_err(h_r, h_e),
         "first_call_s": round(time.time() - t, 1)})
    t = time.time()
    sl = lambda a: None if a is None else a[:, :, :1]  # noqa: E731
    o_ref, h_ref = reference.chunked(sl(inp["q"]), sl(inp["k"]), sl(inp["v"]), sl(inp["g"]), sl(inp["beta"]))
    log({"key": "check_vs_oracle_head0", **tag, "rel_o": rel_err(o_r[:, :, :1], o_ref),
         "rel_ht": rel_err(h_r[:, :1], h_ref), "oracle_s_per_head": round(time.time() - t, 1)})
    timed("engine_chunked", lambda: r2.forward(*args, o, None, ht, scale, 64), **tag)
    for ns in ns_list:
        for kind in ("chain", "tree"):
            timed("scan", lambda ns=ns, kind=kind: r4.forward(*args, o, None, ht, scale, 64, num_segments=ns,
                                                               scan=kind), ns=ns, scan=kind, **tag)
    fn = peers.fla_peers(rec).get(fla_name)
    if fn is not None:
        timed(fla_name, lambda: fn(*args, None, True), **tag)
    del d, o, args


quick = len(sys.argv) > 2
phase2_micro()
long_shape("gated_delta", (1, 262144, 2, 128, 128), [r4.choose_num_segments(1, 262144, 2, 128, 128, 64, True), 33, 132],
           "fla_chunk_gated_delta_rule")
long_shape("decay", (1, 1 << 20, 2, 128, 128), [r4.choose_num_segments(1, 1 << 20, 2, 128, 128, 64, False), 33],
           "fla_chunk_simple_gla")
print("total", round(time.time() - T0, 1), "s")
