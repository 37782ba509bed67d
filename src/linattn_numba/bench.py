"""``linattn-numba bench``: verify, then time, every rung and the peers side by side; write JSON.

Method (siboehm/SGEMM_CUDA and llm.c's dev/cuda style):

1. one set of random inputs per (shape, recurrence, dtype), shared by every rung and peer;
2. every implementation is first checked against the float64 oracle on two whole heads (heads are independent, so
   that is an exact check of those heads, and affordable at 8192 tokens); a failing one is recorded, not timed;
3. warm-up, then CUDA-event timing of batches of launches (a batch lasts at least ~2 ms so launch overhead and
   event resolution vanish), an L2 flush (a 256 MiB write) before every batch; median and 10/90 percentiles;
4. achieved TFLOP/s and GB/s against the counted FLOPs of the recurrence (the same count for every
   implementation: "effective" rates) and the fewest bytes any implementation must move;
5. JSON with the device, versions, git sha and date; ``linattn-numba figures`` draws from it.

Without a GPU it refuses: timings from the simulator mean nothing.
"""

from __future__ import annotations

import datetime
import json
import math
import os
import platform
import subprocess
import sys
import time

import numpy as np

STANDARD = (4, 8192, 16, 128, 128)  # B, T, H, K, V: the shape the anchor figures are quoted at
DECODE = (256, 16, 128, 128)  # B, H, K, V of the decode step


def counted_flops(recurrence: str, B, T, H, K, V) -> float:
    """FLOPs of the recurrence by its definition (per token per head: update 2KV, output 2KV, decay KV, k.S 2KV)."""
    per = 4 * K * V
    if recurrence in ("decay", "gated_delta"):
        per += K * V
    if recurrence in ("delta", "gated_delta"):
        per += 2 * K * V
    return float(per) * B * T * H


def counted_bytes(recurrence: str, B, T, H, K, V, itemsize=4, state_in=False, state_out=False) -> float:
    """Fewest bytes any implementation moves: inputs read once, output written once (+ states if used)."""
    n = B * T * H * (2 * K + V) * itemsize + B * T * H * V * 4
    n += B * T * H * 4 * ((recurrence in ("decay", "gated_delta")) + (recurrence in ("delta", "gated_delta")))
    n += (state_in + state_out) * B * H * K * V * 4
    return float(n)


def git_sha() -> str:
    try:
        here = os.path.dirname(os.path.abspath(__file__))
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=here, capture_output=True, text=True, timeout=10)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=here,
                               capture_output=True, text=True, timeout=10)
        if sha.returncode == 0:
            return sha.stdout.strip() + ("-dirty" if dirty.stdout.strip() else "")
    except Exception:  # noqa: BLE001
        pass
    return os.environ.get("LINATTN_GIT_SHA", "unknown")


def device_info() -> dict:
    from numba import cuda

    dev = cuda.get_current_device()
    name = dev.name.decode() if isinstance(dev.name, bytes) else str(dev.name)
    info = {"name": name, "compute_capability": list(dev.compute_capability),
            "multiprocessors": int(dev.MULTIPROCESSOR_COUNT)}
    try:
        info["driver"] = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                        capture_output=True, text=True, timeout=20).stdout.strip()
    except Exception:  # noqa: BLE001
        info["driver"] = "unknown"
    return info


def versions() -> dict:
    import numba
    from importlib.metadata import version

    from . import __version__, peers

    out = {"linattn_numba": __version__, "numba": numba.__version__, "numpy": np.__version__,
           "python": platform.python_version()}
    try:
        out["numba_cuda"] = version("numba-cuda")
    except Exception:  # noqa: BLE001
        out["numba_cuda"] = "?"
    out.update(peers.versions())
    return out


class Progress:
    """A one-line progress bar on stderr (no dependency)."""

    def __init__(self, total: int, label: str = "bench"):
        self.total, self.n, self.label, self.t0 = max(total, 1), 0, label, time.time()

    def step(self, what: str):
        self.n += 1
        frac = self.n / self.total
        bar = "#" * int(30 * frac)
        el = time.time() - self.t0
        eta = el / frac - el if frac else 0
        sys.stderr.write(f"\r{self.label} [{bar:<30}] {self.n}/{self.total} {el:5.0f}s eta {eta:4.0f}s {what[:50]:<50}")
        sys.stderr.flush()
        if self.n >= self.total:
            sys.stderr.write("\n")


class Timer:
    """CUDA-event timing of batched launches with an L2 flush before each batch."""

    def __init__(self, flush_mib: int = 256):
        from numba import cuda

        self.cuda = cuda
        self._flush = cuda.device_array(flush_mib * 2**18, dtype=np.float32)
        self._fill = _fill_kernel()
        self._spin = _spin_kernel()

    def flush(self):
        n = self._flush.size
        self._fill[(n + 1023) // 1024, 1024](self._flush, np.float32(1.0))

    def time(self, fn, min_batch_ms: float = 2.0, samples: int = 15, max_seconds: float = 20.0) -> dict:
        cuda = self.cuda
        fn()  # warm-up: compilation, module load, autotuning of peers
        cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        cuda.synchronize()
        est_ms = (time.perf_counter() - t0) * 1e3
        inner = max(1, min(200, int(math.ceil(min_batch_ms / max(est_ms, 1e-3)))))
        samples = max(3, min(samples, int(max_seconds * 1e3 / max(est_ms * inner, 1e-3))))
        # Host cost of one enqueue (Python + Numba dispatch): measured so the spin below can outlast it.
        t0 = time.perf_counter()
        fn()
        host_us = (time.perf_counter() - t0) * 1e6
        cuda.synchronize()
        times = []
        for _ in range(samples):
            self.flush()
            # A spinning kernel holds the stream while the batch is enqueued, so the events see the kernels run
            # back to back: GPU time, not the host's launch rate (Numba's dispatch costs tens of microseconds).
            self._spin[1, 1](np.int64(min(200_000, 1.5 * inner * host_us + 100)))
            start, end = cuda.event(), cuda.event()
            start.record()
            for _ in range(inner):
                fn()
            end.record()
            end.synchronize()
            times.append(cuda.event_elapsed_time(start, end) / inner)
        t = np.array(times)
        return {"median_ms": float(np.median(t)), "p10_ms": float(np.percentile(t, 10)),
                "p90_ms": float(np.percentile(t, 90)), "samples": int(samples), "batch": int(inner),
                "host_launch_us": float(host_us)}


def _spin_kernel():
    from numba import cuda

    @cuda.jit
    def spin(us):
        for _ in range(us):
            cuda.nanosleep(1000)

    return spin


def _fill_kernel():
    from numba import cuda

    @cuda.jit
    def fill(a, x):
        i = cuda.grid(1)
        if i < a.size:
            a[i] = x

    return fill


def varied_constants(specs):
    """The ``--vary MODULE.NAME=a,b`` options of the tuning tools (``tools/tune_r3.py``, ``tools/r4_engine_probe.py``):
    ``(varied, combos)``, ``varied`` a ``(module, name, values)`` per spec (a constant of ``linattn_numba.rungs.
    MODULE`` that its launches read; values of digits become ints), ``combos`` every combination of their values as
    tuples (``[()]`` without specs). SystemExit names a constant the module lacks."""
    import importlib

    varied = []
    for spec in specs or ():
        target, values = spec.split("=", 1)
        mod_name, name = target.rsplit(".", 1)
        mod = importlib.import_module(f"linattn_numba.rungs.{mod_name}")
        if not hasattr(mod, name):
            raise SystemExit(f"--vary: linattn_numba.rungs.{mod_name} has no {name}")
        varied.append((mod, name, [int(x) if x.isdigit() else x for x in values.split(",")]))
    combos = [()]
    for _, _, values in varied:
        combos = [combo + (x,) for combo in combos for x in values]
    return varied, combos


def check_heads(o, ht, inp, heads, recurrence_args, cache=None) -> float:
    """Relative error of ``o`` (and ``ht``) on the given (b, h) heads against the float64 oracle. ``cache``: a dict
    that keeps the oracle's results per head between calls on the same inputs (the oracle at long T takes
    seconds)."""
    from . import reference
    from .testing import rel_err

    q, k, v, g, beta, h0 = recurrence_args
    cache = {} if cache is None else cache
    worst = 0.0
    for b, h in heads:
        if (b, h) not in cache:
            sl = lambda a: None if a is None else a[b:b + 1, :, h:h + 1]  # noqa: E731
            cache[b, h] = reference.chunked(sl(q), sl(k), sl(v), sl(g), sl(beta),
                                            initial_state=None if h0 is None else h0[b:b + 1, h:h + 1])
        o_ref, s_ref = cache[b, h]
        worst = max(worst, rel_err(o[b:b + 1, :, h:h + 1], o_ref))
        if ht is not None:
            worst = max(worst, rel_err(ht[b:b + 1, h:h + 1], s_ref))
    return worst


def _host(x):
    if x is None:
        return None
    if hasattr(x, "copy_to_host"):
        return x.copy_to_host()
    return x.detach().float().cpu().numpy()  # torch


def wanted_peer(name: str, fla: str = "all") -> bool:
    """Whether the fla peer ``name`` (``fla_chunk_*`` / ``fla_fused_recurrent_*``) is timed under ``--fla``."""
    if fla not in ("all", "chunk", "fused_recurrent"):
        raise ValueError(f"fla must be 'all', 'chunk' or 'fused_recurrent', got {fla!r}")
    return fla == "all" or name.startswith(f"fla_{fla}_")


def bench_shape(timer, shape, recurrence, rung_names, dtype=np.float32, peers=True, softmax=False, progress=None,
                tol=2e-4, fla="all"):
    """Verify and time every rung (and peer) on one shape/recurrence. Returns a list of records.

    ``fla``: ``"all"``, ``"chunk"`` or ``"fused_recurrent"``: which of fla's kernels to time as peers.
    """
    from numba import cuda

    from . import peers as peer_mod
    from . import rungs
    from .testing import make_inputs

    B, T, H, K, V = shape
    inp = make_inputs(B, T, H, K, V, recurrence, dtype=dtype, seed=0)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    args = (d["q"], d["k"], d["v"], d["g"], d["beta"])
    host_args = (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], None)
    heads = [(0, 0), (B - 1, H - 1)]
    scale = K**-0.5
    flops = counted_flops(recurrence, B, T, H, K, V)
    nbytes = counted_bytes(recurrence, B, T, H, K, V, itemsize=np.dtype(dtype).itemsize)
    o = cuda.device_array((B, T, H, V), np.float32)
    ht = cuda.device_array((B, H, K, V), np.float32)
    # (name, kind, recurrence label, launch, counted FLOPs, counted bytes, checked against the oracle)
    impls = []
    for name in rung_names:
        mod = rungs.module(name)
        if (mod.MAX_K or K) < K or (mod.MAX_V or V) < V:
            continue
        impls.append((name, "rung", recurrence, lambda mod=mod: mod.forward(*args, o, None, ht, scale, 64),
                      flops, nbytes, True))
    if peers:  # fla_peers forgets fla's tuned configs: its first call below tunes them for this shape
        for name, fn in peer_mod.fla_peers(recurrence).items():
            if not wanted_peer(name, fla):
                continue
            impls.append((name, "peer", recurrence, lambda fn=fn: fn(*args, None, True), flops, nbytes, True))
        sm = peer_mod.softmax_peer() if softmax else None
        if sm is not None:  # a different function: timed as the quadratic baseline, not checked
            sm_flops = float(B * H * T * T * (K + V))  # causal: half of 2 T^2 (K + V) per head
            sm_bytes = float(B * T * H * (2 * K + 2 * V) * np.dtype(dtype).itemsize)
            impls.append(("torch_sdpa_causal", "peer", "softmax", lambda: sm(*args), sm_flops, sm_bytes, False))
    records = []
    for name, kind, label, fn, n_flops, n_bytes, check in impls:
        rec = {"key": name, "kind": kind, "recurrence": label, "shape": dict(B=B, T=T, H=H, K=K, V=V),
               "dtype": np.dtype(dtype).name, "counted_flops": n_flops, "counted_bytes": n_bytes}
        try:
            res = fn()
            cuda.synchronize()
            err = None
            if check and kind == "rung":
                err = check_heads(o.copy_to_host(), ht.copy_to_host(), inp, heads, host_args)
            elif check:
                err = check_heads(_host(res[0]), _host(res[1]), inp, heads, host_args)
            rec["rel_err"] = err
            # fla's chunk kernels compute their fp32 dots in TF32 (errors ~1e-3): peers get a TF32-level bound
            limit = tol if kind == "rung" else 1e-2
            if err is not None and not err <= limit:
                rec["error"] = f"failed the oracle check: rel err {err:.3g} > {limit:g}"
            else:
                rec.update(timer.time(fn))
                rec["tflops"] = n_flops / rec["median_ms"] / 1e9
                rec["gbps"] = n_bytes / rec["median_ms"] / 1e6
        except Exception as e:  # noqa: BLE001 - record and continue the sweep
            rec["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        records.append(rec)
        if progress:
            progress.step(f"{name} {recurrence} T={T}")
    return records


def bench_step(timer, shape=DECODE, recurrence="gated_delta", peers=True):
    """Decode step: B x H heads, one token, fp32 state in place. Reports GB/s against the state's read + write."""
    from numba import cuda

    from . import peers as peer_mod
    from .rungs import r1_recurrent
    from .testing import make_inputs

    B, H, K, V = shape
    inp = make_inputs(B, 1, H, K, V, recurrence, initial_state=True, seed=1)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    state = cuda.to_device(inp["initial_state"])
    o = cuda.device_array((B, 1, H, V), np.float32)
    state_bytes = 2.0 * B * H * K * V * 4
    out = []
    # correctness of one step from the initial state (two heads against the oracle)
    r1_recurrent.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, state, state, K**-0.5)
    err = check_heads(o.copy_to_host(), state.copy_to_host(), inp, [(0, 0), (B - 1, H - 1)],
                      (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], inp["initial_state"]))
    fn = lambda: r1_recurrent.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, state, state, K**-0.5)  # noqa
    rec = {"key": "step", "kind": "rung", "recurrence": recurrence, "shape": dict(B=B, T=1, H=H, K=K, V=V),
           "dtype": "float32", "rel_err": err, "state_bytes": state_bytes}
    rec.update(timer.time(fn))
    rec["gbps"] = state_bytes / rec["median_ms"] / 1e6
    out.append(rec)
    if peers:
        for name, pf in peer_mod.fla_peers(recurrence).items():
            if "fused_recurrent" not in name:
                continue
            h0 = cuda.to_device(inp["initial_state"])
            r = {"key": name + "_step", "kind": "peer", "recurrence": recurrence,
                 "shape": dict(B=B, T=1, H=H, K=K, V=V), "dtype": "float32", "state_bytes": state_bytes}
            try:
                r.update(timer.time(lambda: pf(d["q"], d["k"], d["v"], d["g"], d["beta"], h0, True)))
                r["gbps"] = state_bytes / r["median_ms"] / 1e6
            except Exception as e:  # noqa: BLE001
                r["error"] = f"{type(e).__name__}: {e}"
            out.append(r)
    return out


def bench_copy(timer, nbytes=2**30):
    """Device-to-device copy bandwidth (bytes read + written), the memory roofline of this run."""
    from numba import cuda

    n = nbytes // 4
    a = cuda.device_array(n, np.float32)
    b = cuda.device_array(n, np.float32)
    timer._fill[(n + 1023) // 1024, 1024](a, np.float32(2.0))
    rec = {"key": "copy", "kind": "ceiling", "bytes": 2.0 * nbytes}
    rec.update(timer.time(lambda: b.copy_to_device(a)))
    rec["gbps"] = 2.0 * nbytes / rec["median_ms"] / 1e6
    return rec


def bench_fp32_peak(timer, iters=2048, blocks_per_sm=8, threads=256):
    """The fp32 FMA rate this GPU sustains (the compute roofline of this run, and the denominator of "the achieved
    fraction of the fp32 FMA rate"): every SM full of threads that only multiply-add
    (:func:`linattn_numba.fma_peak.fma_peak`).
    Verified, then timed: every thread's result is checked against the float64 closed form
    (:func:`linattn_numba.fma_peak.expected`) before the kernel is timed. FLOPs: 2 per multiply-add."""
    from numba import cuda

    from . import fma_peak as fp

    dev = cuda.get_current_device()
    nblocks = dev.MULTIPROCESSOR_COUNT * blocks_per_sm
    n = nblocks * threads
    out = cuda.device_array(n, np.float32)
    a, b = np.float32(fp.A), np.float32(fp.B)
    flops = 2.0 * n * iters * fp.UNROLL * fp.CHAINS
    rec = {"key": "fp32_peak", "kind": "ceiling", "flops": flops, "threads": n, "chains": fp.CHAINS,
           "steps": iters * fp.UNROLL, "nominal_tflops": fp.nominal_tflops()}
    fn = lambda: fp.fma_peak[nblocks, threads](out, a, b, np.int64(iters))  # noqa: E731
    fn()
    got = out.copy_to_host()
    want = fp.expected(iters)
    rec["rel_err"] = float(np.max(np.abs(got.astype(np.float64) - want)) / abs(want))
    if not rec["rel_err"] <= 1e-4:  # float32 rounding of a contraction stays near 1 ulp a chain
        rec["error"] = f"failed the closed-form check: rel err {rec['rel_err']:.3g} > 1e-4"
        return rec
    rec.update(timer.time(fn))
    rec["tflops"] = flops / rec["median_ms"] / 1e9
    return rec


TUNE_CONFIGS = (  # (COLS, NW, TC, NS, ASYNC) for r1 (COLS <= NS; ASYNC 1: cp.async double buffer)
    (2, 8, 32, 8, 1), (2, 8, 32, 8, 0), (2, 8, 16, 8, 1), (1, 8, 32, 4, 1), (1, 8, 32, 4, 0),
    (2, 4, 32, 8, 1), (4, 8, 32, 16, 1),
)
STEP_CONFIGS = (  # (SW, CS, SMB, VEC) for r1's decode step: warps splitting K, columns per lane, blocks per SM,
    # 128-bit state loads (VEC = 1: 4 columns per lane, CS is not used)
    (8, 4, 2, 1), (8, 4, 3, 1), (16, 4, 2, 1), (32, 4, 1, 1), (16, 4, 1, 1),
    (8, 4, 2, 0), (8, 2, 2, 0), (4, 2, 3, 0),
)


def tune_recurrent(timer, shape=STANDARD, recurrence="gated_delta", configs=TUNE_CONFIGS):
    """Time r1 over (COLS, NW, TC, NS, ASYNC) choices at one shape: the record behind r1's DEFAULT_COLS,
    DEFAULT_NW, TC / TC_ASYNC, NS and STAGE_ASYNC (per recurrence)."""
    from numba import cuda

    from .rungs import r1_recurrent
    from .testing import make_inputs

    B, T, H, K, V = shape
    inp = make_inputs(B, T, H, K, V, recurrence, seed=2)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    o = cuda.device_array((B, T, H, V), np.float32)
    ht = cuda.device_array((B, H, K, V), np.float32)
    out = []
    for cols, nw, tc, ns, asy in configs:
        fn = lambda: r1_recurrent.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, None, ht, K**-0.5,  # noqa
                                          cols=cols, nw=nw, tc=tc, ns=ns, asy=bool(asy))
        # the staging the launch really gets (a double buffer that does not fit falls back to registers)
        used, tc_used = r1_recurrent.staging(d["q"], d["k"], d["v"], cols, nw, ns, tc, bool(asy))
        rec = {"key": "recurrent", "cols": cols, "nw": nw, "tc": tc_used, "ns": ns, "asy": int(used),
               "recurrence": recurrence, "shape": dict(B=B, T=T, H=H, K=K, V=V)}
        try:
            fn()
            cuda.synchronize()
            rec["rel_err"] = check_heads(o.copy_to_host(), ht.copy_to_host(), inp, [(0, 0), (B - 1, H - 1)],
                                         (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], None))
            rec.update(timer.time(fn, samples=7))
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {e}"
        out.append(rec)
    return out


def tune_step(timer, shape=DECODE, recurrence="gated_delta", configs=STEP_CONFIGS):
    """Time the decode-step kernel over (SW, CS, SMB): the record behind r1's SW, CS and SMB."""
    from numba import cuda

    from .rungs import r1_recurrent
    from .testing import make_inputs

    B, H, K, V = shape
    inp = make_inputs(B, 1, H, K, V, recurrence, initial_state=True, seed=3)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    o = cuda.device_array((B, 1, H, V), np.float32)
    out = []
    for sw, cs, smb, vec in configs:
        rec = {"key": "step", "sw": sw, "cs": cs, "smb": smb, "vec": vec, "recurrence": recurrence,
               "shape": dict(B=B, T=1, H=H, K=K, V=V)}
        try:
            st = cuda.to_device(inp["initial_state"])  # one step from the initial state, checked, then timed
            r1_recurrent.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, st, st, K**-0.5, sw=sw, cs=cs,
                                 smb=smb, vec=bool(vec))
            rec["rel_err"] = check_heads(o.copy_to_host(), st.copy_to_host(), inp, [(0, 0), (B - 1, H - 1)],
                                         (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], inp["initial_state"]))
            rec.update(timer.time(lambda: r1_recurrent.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, st, st,
                                                               K**-0.5, sw=sw, cs=cs, smb=smb,
                                                               vec=bool(vec))))
            rec["gbps"] = 2.0 * B * H * K * V * 4 / rec["median_ms"] / 1e6
        except Exception as e:  # noqa: BLE001
            rec["error"] = f"{type(e).__name__}: {e}"
        out.append(rec)
    return out


def apply_best(tune):
    """Set r1's launch defaults (COLS, NW, NS and TC: the least total time over the tuned recurrences; then per
    recurrence the faster staging with those; the step's SW, CS, SMB) to the fastest correct tuned ones."""
    from .rungs import r1_recurrent

    ok = [r for r in tune if "median_ms" in r and (r.get("rel_err") or 0) <= 2e-4]
    chosen = {}
    seq = [r for r in ok if "cols" in r]
    if seq:
        # the launch with the least total time over the recurrences the sweep timed (each one timed on all)
        knobs = lambda r: (r["cols"], r["nw"], r["tc"], r["ns"], r.get("asy", 0))  # noqa: E731
        recs = {r["recurrence"] for r in seq}
        total = {}
        for r in seq:
            total.setdefault(knobs(r), {})[r["recurrence"]] = r["median_ms"]
        full = {kn: sum(t.values()) for kn, t in total.items() if set(t) == recs}
        best = min(full, key=full.get)
        b = next(r for r in seq if knobs(r) == best)
        r1_recurrent.DEFAULT_COLS, r1_recurrent.DEFAULT_NW, r1_recurrent.NS = b["cols"], b["nw"], b["ns"]
        chosen.update(cols=b["cols"], nw=b["nw"], tc=b["tc"], ns=b["ns"])
        # then, with these COLS, NW, NS: each staging's TC (the least total time again), and per recurrence the
        # faster staging
        same = lambda kn: (kn[0], kn[1], kn[3]) == (best[0], best[1], best[3])  # noqa: E731
        launch = {}  # staging -> its fastest full launch
        for a in (0, 1):
            cand = [kn for kn in full if same(kn) and kn[4] == a]
            if cand:
                launch[a] = min(cand, key=full.get)
        if 0 in launch:
            r1_recurrent.TC = launch[0][2]
        if 1 in launch:
            r1_recurrent.TC_ASYNC = launch[1][2]
        asy = {rec: int(min(launch, key=lambda a: total[launch[a]][rec])) for rec in sorted(recs)}
        r1_recurrent.STAGE_ASYNC = {**r1_recurrent.STAGE_ASYNC, **{rec: bool(a) for rec, a in asy.items()}}
        chosen["asy"] = asy
    step = [r for r in ok if "sw" in r]
    if step:
        b = min(step, key=lambda r: r["median_ms"])
        r1_recurrent.SW, r1_recurrent.CS, r1_recurrent.SMB = b["sw"], b.get("cs", 1), b.get("smb", 1)
        r1_recurrent.STEP_VEC = bool(b.get("vec", 0))
        chosen.update(sw=b["sw"], cs=b.get("cs", 1), smb=b.get("smb", 1), vec=b.get("vec", 0))
    return chosen


def run(args) -> dict:
    from numba import cuda

    from . import sim
    from .reference import RECURRENCES
    from .rungs import RUNGS

    if sim.active() or not cuda.is_available():
        raise SystemExit("linattn-numba bench needs a CUDA GPU: timings from the simulator mean nothing "
                         "(unset NUMBA_ENABLE_CUDASIM and run on a GPU machine).")
    rung_names = [r for r in (args.rungs.split(",") if args.rungs else RUNGS)]
    recs = [r for r in (args.recurrences.split(",") if args.recurrences else RECURRENCES)]
    shapes = [tuple(int(x) for x in s.split(",")) for s in args.shape] if args.shape else [STANDARD]
    timer = Timer()
    result = {"device": device_info(), "versions": versions(), "git_sha": git_sha(),
              # tools/h200.sh sets LINATTN_GIT_SHA to the commit whose tree it ships: the device copy's .git can
              # be an older snapshot, so git_sha alone may name the wrong commit
              "tree_sha": os.environ.get("LINATTN_GIT_SHA"),
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
              "records": []}
    result["records"].append(bench_copy(timer))
    result["records"].append(bench_fp32_peak(timer))
    if args.tune:  # first, so the sweep below runs r1 with the launch shape this device prefers
        tune_recs = getattr(args, "tune_recurrences", "gated_delta").split(",")
        result["tune"] = ([r for rec in tune_recs for r in tune_recurrent(timer, recurrence=rec)]
                          if args.tune in ("all", "seq", True) else [])
        result["tune"] += tune_step(timer) if args.tune in ("all", "step", True) else []
        result["tuned_defaults"] = apply_best(result["tune"])
    if getattr(args, "only_step", False):
        shapes, args.step = [], True
    n_fla = 0 if args.no_peers else (2 if getattr(args, "fla", "all") == "all" else 1)
    total = (len(shapes) * len(recs) * (len(rung_names) + n_fla)
             + (len(shapes) if args.softmax and not args.no_peers else 0) + (1 if args.step else 0))
    prog = Progress(total)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)

    def save():  # after every group, so a run stopped at a time limit still leaves what it measured
        with open(args.out, "w") as f:
            json.dump(result, f, indent=1)

    for shape in shapes:
        for rec in recs:
            result["records"] += bench_shape(timer, shape, rec, rung_names, peers=not args.no_peers,
                                             fla=getattr(args, "fla", "all"),
                                             softmax=args.softmax and rec == recs[0], progress=prog)
            save()
    if args.step:
        result["records"] += bench_step(timer, peers=not args.no_peers)
        prog.step("step")
    save()
    print_table(result)
    print(f"wrote {args.out}")
    return result


def print_table(result):
    copy = next((r for r in result["records"] if r["key"] == "copy"), None)
    peak = next((r for r in result["records"] if r["key"] == "fp32_peak" and "tflops" in r), None)
    print(f"device: {result['device']['name']}  git {result['git_sha'][:12]}"
          + (f"  copy {copy['gbps'] / 1e3:.2f} TB/s" if copy else "")
          + (f"  fp32 FMA {peak['tflops']:.1f} TFLOP/s" if peak else ""))
    print(f"{'key':40s} {'recurrence':12s} {'shape':22s} {'ms':>10s} {'TFLOP/s':>8s} {'GB/s':>8s} {'rel err':>9s}")
    for r in result["records"]:
        if r["key"] == "copy":
            continue
        s = r.get("shape", {})
        shp = "B{B} T{T} H{H} K{K} V{V}".format(**s) if s else ""
        if "error" in r:
            print(f"{r['key']:40s} {r.get('recurrence', ''):12s} {shp:22s} ERROR {r['error'][:60]}")
            continue
        err = r.get("rel_err")
        print(f"{r['key']:40s} {r.get('recurrence', ''):12s} {shp:22s} {r['median_ms']:10.4f} "
              f"{r.get('tflops', float('nan')):8.2f} {r.get('gbps', float('nan')):8.0f} "
              f"{'' if err is None else format(err, '.1e'):>9s}")
    if "tuned_defaults" in result:
        print(f"r1 launch defaults used for the sweep (fastest tuned): {result['tuned_defaults']}")
    for r in result.get("tune", []):
        knobs = " ".join(f"{k}={r[k]}" for k in ("cols", "nw", "tc", "ns", "sw", "cs", "smb", "vec") if k in r)
        print(f"tune {r['key']} {knobs}: {r.get('median_ms', float('nan')):.3f} ms {r.get('error', '')}")
