"""The public API: :func:`attention` (a whole sequence) and :func:`step` (one decode token).

Both accept NumPy arrays (and return NumPy arrays) or device arrays -- anything with ``__cuda_array_interface__``:
Numba device arrays, CuPy arrays, PyTorch CUDA tensors -- taken zero-copy, with Numba device arrays returned.
Compute is float32 with a float32 state; float16 inputs are read and converted inside the kernels; NumPy float64
inputs are converted to float32 on the host. Outputs are always float32.

Nothing is computed and nothing is written when an argument is rejected, and the caller's arrays are never
modified -- except ``step``'s ``state``, which is updated in place by contract.
"""

from __future__ import annotations

import math

import numpy as np
from numba import cuda

from . import reference, rungs, sim
from .reference import RECURRENCES
from .rungs import RUNGS

_NO_GPU = (
    "linattn_numba: no CUDA GPU is available to Numba ({why}). To run the kernels on the CPU in Numba's CUDA "
    "simulator (slow; keep sizes tiny), set the environment variable NUMBA_ENABLE_CUDASIM=1 before Python imports "
    "numba, e.g. `NUMBA_ENABLE_CUDASIM=1 python your_script.py`, or call `linattn_numba.sim.enable()` before "
    "anything imports numba. `linattn-numba demo` and the test suite switch to the simulator by themselves."
)


def _require_cuda():
    """Fail early and clearly when there is neither a GPU nor the simulator."""
    if sim.active():
        sim.install()
        return
    try:
        ok = cuda.is_available()
        why = "cuda.is_available() is False"
    except Exception as e:  # a missing driver raises on some platforms
        ok, why = False, f"{type(e).__name__}: {e}"
    if not ok:
        raise RuntimeError(_NO_GPU.format(why=why))


def _is_device(a) -> bool:
    if a is None:
        return False
    if hasattr(a, "__cuda_array_interface__"):
        return True
    if sim.active():  # the simulator's device arrays are NumPy-backed and carry no __cuda_array_interface__
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return isinstance(a, FakeCUDAArray)
    return False


_NUMPY_FLOATS = (np.float16, np.float32, np.float64)
_DEVICE_FLOATS = (np.float16, np.float32)


class _In:
    """One validated input: the original object, its array form (NumPy or device) and where it lives."""

    def __init__(self, name, a, shape_doc):
        self.name = name
        self.device = _is_device(a)
        if self.device:
            try:
                # a zero-copy view of CuPy / torch / Numba memory
                self.array = a if sim.active() else cuda.as_cuda_array(a)
            except Exception as e:  # e.g. torch bfloat16 has no __cuda_array_interface__ typestr Numba knows
                raise TypeError(
                    f"{name}: cannot view this device array through __cuda_array_interface__ ({e}); "
                    "convert it to float32 or float16 first"
                ) from e
            allowed = _DEVICE_FLOATS
        else:
            self.array = np.asarray(a)
            allowed = _NUMPY_FLOATS
        dt = np.dtype(self.array.dtype)
        if dt.type not in allowed:
            names = ", ".join(np.dtype(t).name for t in allowed)
            where = "device" if self.device else "NumPy"
            raise TypeError(f"{name} {shape_doc}: {where} arrays of dtype {names} are accepted, got {dt.name}")
        self.shape = tuple(int(s) for s in self.array.shape)


def _check_shape(x: _In, expected, doc):
    if x.shape != tuple(expected):
        raise ValueError(f"{x.name} must have shape {doc} = {tuple(expected)}, got {x.shape}")


def _host_values(x: _In):
    """The values of ``x`` as a NumPy array, for the value checks (device arrays: only in the simulator)."""
    return x.array.copy_to_host() if x.device else x.array


def _check_values(x: _In, lo=None, hi=None, what=""):
    """Finite, and within [lo, hi] when given; raise ValueError naming the argument and the first bad index."""
    if x.device and not sim.active():
        bad = _device_value_flags(x.array, lo, hi)
        msgs = []
        if bad[0]:
            msgs.append("non-finite values (NaN or inf)")
        if bad[1]:
            msgs.append(f"values below {lo}")
        if bad[2]:
            msgs.append(f"values above {hi}")
        if msgs:
            raise ValueError(f"{x.name} has {' and '.join(msgs)}{what}")
        return
    a = _host_values(x)
    finite = np.isfinite(a)
    if not finite.all():
        idx = tuple(int(i) for i in np.argwhere(~finite)[0])
        raise ValueError(f"{x.name} has a non-finite value {a[idx]} at index {idx}")
    if lo is not None and (a < lo).any():
        idx = tuple(int(i) for i in np.argwhere(a < lo)[0])
        raise ValueError(f"{x.name} must be >= {lo}{what}; found {float(a[idx])} at index {idx}")
    if hi is not None and (a > hi).any():
        idx = tuple(int(i) for i in np.argwhere(a > hi)[0])
        raise ValueError(f"{x.name} must be <= {hi}{what}; found {float(a[idx])} at index {idx}")


_value_kernel = None


def _device_value_flags(d, lo, hi):
    """One pass over a device array on the GPU: flags (non-finite, below lo, above hi). One 12-byte copy back."""
    global _value_kernel
    if _value_kernel is None:
        _value_kernel = _make_value_kernel()
    d4 = d
    while d4.ndim < 4:
        d4 = _unit_axis(d4, 0)
    flags = cuda.to_device(np.zeros(3, dtype=np.int32))
    n = int(np.prod(d4.shape))
    threads = 256
    blocks = max(1, min(1024, -(-n // threads)))
    _value_kernel[blocks, threads](
        d4, np.float32(-np.inf if lo is None else lo), np.float32(np.inf if hi is None else hi), flags
    )
    return flags.copy_to_host()


def _make_value_kernel():
    @cuda.jit
    def value_flags(x, lo, hi, flags):
        n0, n1, n2, n3 = x.shape
        n = n0 * n1 * n2 * n3
        nonfinite = 0
        below = 0
        above = 0
        for e in range(cuda.grid(1), n, cuda.gridsize(1)):
            i3 = e % n3
            r = e // n3
            i2 = r % n2
            r = r // n2
            val = np.float32(x[r // n1, r % n1, i2, i3])
            if math.isnan(val) or math.isinf(val):
                nonfinite = 1
            elif val < lo:
                below = 1
            elif val > hi:
                above = 1
        if nonfinite:
            cuda.atomic.max(flags, 0, 1)
        if below:
            cuda.atomic.max(flags, 1, 1)
        if above:
            cuda.atomic.max(flags, 2, 1)

    return value_flags


def _unit_axis(d, axis: int):
    """A device array with a unit axis inserted at ``axis``: zero-copy on a GPU (the new axis has stride 0)."""
    if sim.active():  # the simulator's device arrays are NumPy underneath: a copy, fine at simulator sizes
        return cuda.to_device(np.ascontiguousarray(np.expand_dims(d.copy_to_host(), axis)))
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    shape = tuple(d.shape[:axis]) + (1,) + tuple(d.shape[axis:])
    strides = tuple(d.strides[:axis]) + (0,) + tuple(d.strides[axis:])
    return DeviceNDArray(shape=shape, strides=strides, dtype=d.dtype, gpu_data=d.gpu_data)


def _to_device(x: _In | None):
    """Device form of an input: device arrays as they are; NumPy copied (float64 converted to float32)."""
    if x is None:
        return None
    if x.device:
        return x.array
    a = x.array
    if a.dtype == np.float64:
        a = a.astype(np.float32)
    return cuda.to_device(np.ascontiguousarray(a))


def _rung_module(rung, K, V, T, chunk_size, recurrence=None, B=None, H=None):
    name = auto_rung(T, K, V, recurrence, chunk_size, B=B, H=H) if rung == "auto" else rung
    if not isinstance(name, str) or name not in RUNGS:
        raise ValueError(f"rung must be 'auto' or one of {RUNGS}, got {rung!r}")
    mod = rungs.module(name)
    for dim, lim in (("K", mod.MAX_K), ("V", mod.MAX_V)):
        val = K if dim == "K" else V
        if lim is not None and val > lim:
            raise ValueError(f"rung {name!r} supports {dim} <= {lim}, got {dim}={val}; use rung='naive' or 'auto'")
    sizes = getattr(mod, "CHUNK_SIZES", None)
    if sizes is not None and chunk_size not in sizes:
        raise ValueError(f"chunk_size must be one of {sizes} for rung {name!r}, got {chunk_size!r}")
    return mod


# Per-token costs measured on the H200 at K = V = 128, float32 (figures/data: the ladder at B4 T8192 H16 and the
# long-context runs at B1 H2), (additive, delta family). The sequential rungs' cost is one block's walk through
# the tokens (a block per SM, all blocks in one wave at the standard shape): the call's time / T. The scan's cost
# is per token-head when its segments fill the GPU: the call's time / (B H T).
# r1: decay 2.44 ms, gated delta 2.72 ms (figures/data/h200_r1_ecba0d6.json); r3: 1.336 ms decay / 3.025 ms gated
# delta (h200_r3_decay_1acf97e.json, h200_r3_r0_split_73b83a8.json), r6: 1.277 / 2.809 ms
# (h200_r6_pipe_f0ac321.json, h200_r6_delta_split_1acf97e.json: the delta family's split schedule); over 8192 tokens
SEQ_US_PER_TOKEN = {"recurrent": (0.298, 0.332), "shared": (0.1631, 0.369), "tensor_cores": (0.1559, 0.343)}
# r4 with its default engine (r6), phases 1 and 3 on r3's split schedule (its state kernel in 8 x 4 tiles of 64 value
# columns) with r6's output kernel for decay: 5.05 ms over 2 x 1,048,576 (figures/data/h200_long_decay_5d63b60.json);
# phase 3 on r1 for gated delta: 6.51 ms over 2 x 262,144 (figures/data/h200_long_gdn_4adc74d.json)
SCAN_NS_PER_TOKEN_HEAD = (2.41, 12.42)
SCAN_MARGIN = 0.8  # the scan must be estimated at least this much faster (the model has two points per family)


def estimate_ms(name: str, B: int, T: int, H: int, K: int, V: int, delta: bool) -> float | None:
    """Rough time of rung ``name`` ("recurrent", "shared", "tensor_cores" or "scan") from the per-token costs above,
    scaled by K V / 128^2; None for other rungs. The sequential rungs run ``B H ceil(V / 64)`` blocks (one per
    SM, as at the standard shape), so their time is waves x T x the per-token cost; the scan's is
    B H T x its per-token-head cost, but never below the engine's time split over its segment count."""
    from .rungs import r4_scan

    fam = 1 if delta else 0
    work = K * V / 128.0**2
    n_sm = r4_scan._sm_count()
    waves = max(1, -(-B * H * -(-V // 64) // n_sm))
    if name in SEQ_US_PER_TOKEN:
        return waves * T * SEQ_US_PER_TOKEN[name][fam] * work / 1e3
    if name == "scan":
        ns = r4_scan.choose_num_segments(B, T, H, K, V, 64, delta, n_sm)
        eng = r4_scan.engine_module(K, V, 64).NAME
        engine = estimate_ms(eng if eng in SEQ_US_PER_TOKEN else "shared", B, T, H, K, V, delta)
        return max(B * H * T * SCAN_NS_PER_TOKEN_HEAD[fam] * work / 1e6, engine / ns)
    return None


def auto_rung(T: int, K: int, V: int, recurrence: str | None = None, chunk_size: int = 64, *, B: int | None = None,
              H: int | None = None) -> str:
    """The rung ``rung="auto"`` uses for a shape: the fastest landed rung measured correct on the H200.

    From ``figures/data`` (B4 T8192 H16 K=V=128, float32): for the additive recurrences (plain, decay) r6
    ``tensor_cores`` (its split schedule: r3's state kernel, then its pipelined output kernel with the products as
    3xTF32 mma tiles, since 8baed37; it needs C >= 32) is ahead of r3 ``shared`` (1.161 / 1.277 against 1.335 /
    1.446 ms in one run, ``figures/data/h200_r6_pipe_f0ac321.json``), which is ahead of r5 ``warp_roles`` and r1
    ``recurrent``; for the delta rule and the gated delta rule r1 ``recurrent`` is the fastest rung (its state pass
    does one K x V update per token; the chunked rungs pay for the WY solve and the walk's W S product: r6 2.809 and
    r3 3.025 ms against r1's 2.717 (another run) for gated delta, ``figures/data/h200_r6_delta_split_1acf97e.json``,
    ``h200_r3_r0_split_73b83a8.json``, ``h200_r1_ecba0d6.json``). So:
    K <= 128
    picks ``tensor_cores`` (additive, or recurrence unknown, at C = 32 or 64; ``shared`` at C = 16) or
    ``recurrent`` (delta family); K <= 256 picks ``chunked``; larger K ``naive``.

    Few heads and a long sequence: when ``B`` and ``H`` are given (``attention`` gives them), r4 ``scan`` is picked
    instead where :func:`estimate_ms` puts it below ``SCAN_MARGIN`` times that choice: the sequential rungs
    then run fewer blocks than the GPU has SMs and walk every token in turn, while the scan splits the sequence
    (measured at B1 H2 K=V=128: 8.6x faster than r3 for decay at T = 1M, 10x for gated delta at T = 256K,
    ``figures/data/h200_long_*``). At the standard shape the scan's cost model picks one segment and the estimate
    never prefers it.

    Args:
        T, K, V: sequence length and head dimensions.
        recurrence: one of :data:`linattn_numba.reference.RECURRENCES`, or None (treated as additive).
        chunk_size: the chunk size the call asks for; rungs that do not offer it (``CHUNK_SIZES``) are skipped.
        B, H: batch and heads; without them the scan is never picked.
    """
    if recurrence is not None and recurrence not in RECURRENCES:
        raise ValueError(f"recurrence must be one of {RECURRENCES} or None, got {recurrence!r}")
    delta = recurrence in ("delta", "gated_delta")
    if delta:
        order = ("recurrent", "shared")
    else:  # r6 is ahead where its pipelined output kernel runs (C >= 32), r3 elsewhere
        order = ("tensor_cores", "shared", "recurrent") if chunk_size >= 32 else ("shared", "tensor_cores", "recurrent")
    choice = "naive"
    for name in order + ("chunked",):
        mod = rungs.module(name) if name in RUNGS else None
        if mod is None or K > (mod.MAX_K or K) or V > (mod.MAX_V or V):
            continue
        sizes = getattr(mod, "CHUNK_SIZES", None)
        if sizes is None or chunk_size in sizes:
            choice = name
            break
    if B is not None and H is not None and "scan" in RUNGS and choice in SEQ_US_PER_TOKEN:
        scan = rungs.module("scan")
        if K <= scan.MAX_K and chunk_size in scan.CHUNK_SIZES and T > 0:
            if estimate_ms("scan", B, T, H, K, V, delta) < SCAN_MARGIN * estimate_ms(choice, B, T, H, K, V, delta):
                return "scan"
    return choice


def _scale(scale, K):
    if scale is None:
        return K**-0.5
    try:
        s = float(scale)
    except (TypeError, ValueError):
        raise TypeError(f"scale must be a real number, got {scale!r}") from None
    if not math.isfinite(s):
        raise ValueError(f"scale must be finite, got {s}")
    return s


def attention(
    q,
    k,
    v,
    g=None,
    beta=None,
    *,
    scale=None,
    initial_state=None,
    output_final_state=False,
    rung="auto",
    chunk_size=64,
    validate=True,
):
    """Causal linear attention and its gated / delta-rule variants over a whole sequence.

    Which of ``g`` / ``beta`` is given selects the recurrence (see :mod:`linattn_numba.reference`): none -> plain
    linear attention; ``g`` -> scalar decay; ``beta`` -> DeltaNet; both -> Gated DeltaNet.

    Args:
        q, k: ``[B, T, H, K]`` queries and keys (float32 or float16; NumPy float64 is converted).
        v: ``[B, T, H, V]`` values.
        g: ``[B, T, H]`` log-space decay, ``g <= 0``, or None.
        beta: ``[B, T, H]`` delta-rule step, ``0 <= beta <= 1``, or None.
        scale: output scale, default ``K ** -0.5``.
        initial_state: ``[B, H, K, V]`` starting state, or None for zeros. Only read.
        output_final_state: also return the final state ``[B, H, K, V]``.
        rung: a name from :data:`linattn_numba.RUNGS`, or ``"auto"`` (:func:`auto_rung`).
        chunk_size: tokens per chunk for the chunked rungs (ignored by the token-recurrent ones).
        validate: check values (finite, ``g <= 0``, ``beta`` in [0, 1]). Shapes and dtypes are always checked;
            ``validate=False`` skips only the value checks, which on a GPU cost one pass and one sync per input.

    Returns:
        ``(o, final_state)``: ``o`` float32 ``[B, T, H, V]`` and ``final_state`` float32 ``[B, H, K, V]`` or None.
        NumPy arrays when every array argument was NumPy, Numba device arrays otherwise.

    Raises:
        ValueError, TypeError: a bad argument, named in the message with the expected shape or range; nothing is
            computed then. RuntimeError: no GPU and the simulator is not enabled.
    """
    _require_cuda()
    if not isinstance(output_final_state, (bool, np.bool_)):
        raise TypeError(f"output_final_state must be a bool, got {output_final_state!r}")
    qi = _In("q", q, "[B, T, H, K]")
    if len(qi.shape) != 4:
        raise ValueError(f"q must have shape [B, T, H, K] (4 dimensions), got shape {qi.shape}")
    B, T, H, K = qi.shape
    ki = _In("k", k, "[B, T, H, K]")
    _check_shape(ki, (B, T, H, K), "[B, T, H, K] like q")
    vi = _In("v", v, "[B, T, H, V]")
    if len(vi.shape) != 4 or vi.shape[:3] != (B, T, H):
        raise ValueError(f"v must have shape [B, T, H, V] = ({B}, {T}, {H}, V) matching q, got {vi.shape}")
    V = vi.shape[3]
    if min(B, H, K, V) < 1:
        raise ValueError(f"B, H, K, V must be >= 1, got B={B} H={H} K={K} V={V}")
    gi = None if g is None else _In("g", g, "[B, T, H]")
    bi = None if beta is None else _In("beta", beta, "[B, T, H]")
    for x in (gi, bi):
        if x is not None:
            _check_shape(x, (B, T, H), "[B, T, H]")
    hi = None if initial_state is None else _In("initial_state", initial_state, "[B, H, K, V]")
    if hi is not None:
        _check_shape(hi, (B, H, K, V), "[B, H, K, V]")
    s = _scale(scale, K)
    recurrence = RECURRENCES[(gi is not None) + 2 * (bi is not None)]
    mod = _rung_module(rung, K, V, T, chunk_size, recurrence, B=B, H=H)
    if validate:
        for x in (qi, ki, vi, hi):
            if x is not None:
                _check_values(x)
        if gi is not None:
            _check_values(gi, hi=0.0, what=" (g is a log-space decay: exp(g) must be <= 1)")
        if bi is not None:
            _check_values(bi, lo=0.0, hi=1.0)

    all_numpy = not any(x is not None and x.device for x in (qi, ki, vi, gi, bi, hi))
    if T == 0:
        o = np.zeros((B, 0, H, V), np.float32)
        ht = None
        if output_final_state:
            ht = np.zeros((B, H, K, V), np.float32) if hi is None else np.array(_host_values(hi), np.float32)
        if not all_numpy:
            o = cuda.to_device(o)
            ht = None if ht is None else cuda.to_device(ht)
        return o, ht

    dq, dk, dv, dg, db, dh0 = (_to_device(x) for x in (qi, ki, vi, gi, bi, hi))
    o = cuda.device_array((B, T, H, V), dtype=np.float32)
    ht = cuda.device_array((B, H, K, V), dtype=np.float32) if output_final_state else None
    mod.forward(dq, dk, dv, dg, db, o, dh0, ht, s, chunk_size)
    if all_numpy:
        return o.copy_to_host(), (None if ht is None else ht.copy_to_host())
    return o, ht


def step(state, q, k, v, g=None, beta=None, *, scale=None, validate=True):
    """One decode token for every (b, h): update ``state`` in place and return the output.

    Equivalent to :func:`attention` over T = 1 token from ``state``, with the final state written back into
    ``state``; T calls of ``step`` equal one ``attention`` call over T tokens.

    Args:
        state: ``[B, H, K, V]`` float32, NumPy or device array; updated in place (read once, written once).
        q, k: ``[B, H, K]``; v: ``[B, H, V]``; g, beta: ``[B, H]`` or None (same conventions as ``attention``).
        scale: default ``K ** -0.5``.
        validate: check values (finite, ``g <= 0``, ``beta`` in [0, 1]); shapes and dtypes are always checked.

    Returns:
        ``o`` float32 ``[B, H, V]``: NumPy when ``state`` and the inputs are NumPy, a Numba device array otherwise.
    """
    _require_cuda()
    si = _In("state", state, "[B, H, K, V]")
    if len(si.shape) != 4:
        raise ValueError(f"state must have shape [B, H, K, V] (4 dimensions), got {si.shape}")
    B, H, K, V = si.shape
    if np.dtype(si.array.dtype) != np.float32:
        raise TypeError(f"state must be float32 (it is updated in place), got {np.dtype(si.array.dtype).name}")
    if not si.device and not si.array.flags.writeable:
        raise ValueError("state must be writeable (it is updated in place)")
    qi, ki = _In("q", q, "[B, H, K]"), _In("k", k, "[B, H, K]")
    vi = _In("v", v, "[B, H, V]")
    _check_shape(qi, (B, H, K), "[B, H, K] matching state")
    _check_shape(ki, (B, H, K), "[B, H, K] matching state")
    _check_shape(vi, (B, H, V), "[B, H, V] matching state")
    gi = None if g is None else _In("g", g, "[B, H]")
    bi = None if beta is None else _In("beta", beta, "[B, H]")
    for x in (gi, bi):
        if x is not None:
            _check_shape(x, (B, H), "[B, H]")
    s = _scale(scale, K)
    if validate:
        for x in (si, qi, ki, vi):
            _check_values(x)
        if gi is not None:
            _check_values(gi, hi=0.0, what=" (g is a log-space decay: exp(g) must be <= 1)")
        if bi is not None:
            _check_values(bi, lo=0.0, hi=1.0)
    mod = rungs.module("recurrent" if K <= rungs.module("recurrent").MAX_K else "naive")

    def with_time_axis(x):  # [B, H, ...] -> [B, 1, H, ...], zero-copy for device arrays
        if x is None:
            return None
        if not x.device:
            a = x.array.astype(np.float32) if x.array.dtype == np.float64 else x.array
            return cuda.to_device(np.ascontiguousarray(a[:, None]))
        return _unit_axis(x.array, 1)

    dq, dk, dv, dg, db = (with_time_axis(x) for x in (qi, ki, vi, gi, bi))
    dstate = si.array if si.device else cuda.to_device(si.array)
    o = cuda.device_array((B, 1, H, V), dtype=np.float32)
    mod.forward(dq, dk, dv, dg, db, o, dstate, dstate, s, None)
    o = o.reshape(B, H, V)
    all_numpy = not any(x is not None and x.device for x in (si, qi, ki, vi, gi, bi))
    if not si.device:
        dstate.copy_to_host(si.array)
    return o.copy_to_host() if all_numpy else o


__all__ = ["attention", "step", "auto_rung", "RUNGS", "reference"]


def compile_targets():
    """The API's own kernel (the device value check), for the compile tier."""
    from numba import types

    global _value_kernel
    if _value_kernel is None:
        _value_kernel = _make_value_kernel()
    for dt in (types.float32, types.float16):
        argtypes = (types.Array(dt, 4, "A"), types.float32, types.float32, types.Array(types.int32, 1, "C"))
        yield f"value check {dt}", _value_kernel.py_func, argtypes
