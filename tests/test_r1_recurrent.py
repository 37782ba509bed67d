"""Rung r1 ``recurrent``, called directly with launch knobs other than the tuned defaults (the bench's ``--tune``
may pick any of them), under the simulator against the float64 recurrence.

tests/test_rungs.py covers the defaults on every oracle shape; here each case picks a launch shape that reaches a
code path the defaults do not: several staged tiles, the generic (non-divisible) staging walk, lanes holding
more than one column, a tile shorter than a warp, and the decode-step kernel's column and warp splits.
Simulated threads are Python threads, so the cases keep blocks small (one or two warps).
"""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # before anything imports numba (the package does)

import numpy as np
import pytest
from numba import cuda

from linattn_numba import reference
from linattn_numba.rungs import r1_recurrent as r1
from linattn_numba.testing import TOL_FP32, make_inputs, rel_err


def _run(shape, recurrence, seed, **knobs):
    B, T, H, K, V = shape
    inp = make_inputs(B, T, H, K, V, recurrence, initial_state=True, seed=seed)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    o = cuda.to_device(np.full((B, T, H, V), np.nan, np.float32))  # an element never written stays NaN
    ht = cuda.to_device(np.full((B, H, K, V), np.nan, np.float32))
    r1.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, d["initial_state"], ht, K**-0.5, **knobs)
    o_ref, h_ref = reference.recurrent(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"],
                                       initial_state=inp["initial_state"])
    return rel_err(o.copy_to_host(), o_ref), rel_err(ht.copy_to_host(), h_ref)


SEQ_CASES = [
    # (shape B, T, H, K, V), recurrence, knobs
    ((1, 19, 1, 12, 20), "gated_delta", dict(ns=4, cols=2, nw=1, tc=8)),  # 3 tiles, the last one short
    ((1, 19, 2, 40, 30), "delta", dict(ns=4, cols=3, nw=1, tc=8)),  # generic staging walk for k/q and v
    ((2, 9, 1, 8, 12), "decay", dict(ns=16, cols=4, nw=1, tc=4)),  # 16 lanes per column, K < rows covered
    ((1, 11, 1, 16, 8), "plain", dict(ns=2, cols=2, nw=2, tc=32)),  # 2 lanes per column, a warp past V
]


@pytest.mark.parametrize("asy", [True, False], ids=["async", "registers"])
@pytest.mark.parametrize("shape,recurrence,knobs", SEQ_CASES, ids=lambda x: str(x))
def test_sequence_kernel_launch_shapes(monkeypatch, shape, recurrence, knobs, asy):
    """Both stagings: cp.async into a double buffer where q, k, v allow 16-byte copies (not at V = 30), and
    through registers."""
    calls = _spy(monkeypatch, "_kernel")
    e_o, e_h = _run(shape, recurrence, seed=sum(shape), asy=asy, **knobs)
    assert calls[-1][-1] == (asy and shape[4] % 4 == 0), calls  # the kernel's ASYNC flag
    assert e_o <= TOL_FP32, f"output: rel err {e_o:.2e}"
    assert e_h <= TOL_FP32, f"final state: rel err {e_h:.2e}"


STEP_CASES = [
    dict(sw=8, cs=4, smb=2),  # the tuned default: 4 columns per lane (V = 70 leaves most of them masked)
    dict(sw=2, cs=2, smb=1),  # rows split over 2 warps, 6 rows each
    dict(sw=4, cs=1, smb=1),  # K = 12 over 4 warps of 3 rows
]


@pytest.mark.parametrize("knobs", STEP_CASES, ids=str)
def test_step_kernel_launch_shapes(knobs):
    e_o, e_h = _run((2, 1, 1, 12, 70), "gated_delta", seed=4, **knobs)
    assert e_o <= TOL_FP32 and e_h <= TOL_FP32, (e_o, e_h)


STEP_VEC_CASES = [
    # shape (B, T=1, H, K, V), knobs: the 128-bit step (V % 4 == 0, aligned float32 state rows)
    ((2, 1, 1, 12, 136), dict(sw=2, smb=1)),  # two 128-column tiles, the second 8 columns wide; 6 rows per warp
    ((1, 1, 2, 12, 72), dict(sw=4, smb=1)),  # lanes past V = 72 load clamped columns and store nothing
    ((1, 1, 1, 10, 8), dict(sw=4, smb=1)),  # K = 10 over 4 warps of 3 rows: the last rows are padding
]


def _spy(monkeypatch, name):
    """Record the calls of r1's kernel factory ``name`` (to know which step kernel a launch used)."""
    calls = []
    real = getattr(r1, name)

    def wrapper(*a):
        calls.append(a)
        return real(*a)

    monkeypatch.setattr(r1, name, wrapper)
    return calls


@pytest.mark.parametrize("recurrence", ["plain", "decay", "delta", "gated_delta"])
@pytest.mark.parametrize("shape,knobs", STEP_VEC_CASES, ids=str)
def test_vector_step_kernel(monkeypatch, shape, knobs, recurrence):
    calls = _spy(monkeypatch, "_step_kernel_vec")
    e_o, e_h = _run(shape, recurrence, seed=5, **knobs)
    assert calls, "the 128-bit step kernel was not used"
    assert e_o <= TOL_FP32 and e_h <= TOL_FP32, (e_o, e_h)


def test_vector_step_falls_back_on_unaligned_state_rows(monkeypatch):
    """State rows that do not start on 16-byte boundaries (a view of a wider buffer) take the scalar kernel, in
    place, and the columns outside the view are left alone."""
    B, H, K, V = 1, 2, 8, 8
    inp = make_inputs(B, 1, H, K, V, "gated_delta", initial_state=True, seed=6)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    wide = np.full((B, H, K, V + 1), 7.0, np.float32)
    wide[..., :V] = inp["initial_state"]
    wide_d = cuda.to_device(wide)
    state = wide_d[..., :V]  # row stride 36 bytes
    assert not r1._rows_aligned(state)
    vec_calls = _spy(monkeypatch, "_step_kernel_vec")
    scalar_calls = _spy(monkeypatch, "_step_kernel")
    o = cuda.to_device(np.full((B, 1, H, V), np.nan, np.float32))
    r1.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, state, state, K**-0.5)
    assert scalar_calls and not vec_calls
    o_ref, h_ref = reference.recurrent(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"],
                                       initial_state=inp["initial_state"])
    got = wide_d.copy_to_host()
    assert rel_err(o.copy_to_host(), o_ref) <= TOL_FP32
    assert rel_err(got[..., :V], h_ref) <= TOL_FP32
    assert np.all(got[..., V] == 7.0)


def test_more_columns_per_lane_than_lanes_is_rejected():
    inp = make_inputs(1, 4, 1, 8, 8, "plain")
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    o = cuda.device_array((1, 4, 1, 8), np.float32)
    with pytest.raises(ValueError, match="cols"):
        r1.forward(d["q"], d["k"], d["v"], None, None, o, None, None, 1.0, ns=2, cols=4)


GATE_PATTERNS = {
    # name -> log-decay g per token (T = 45, tiles of 8 tokens): which path each tile of the deferred decay takes
    "weak": lambda t: np.full(t, -0.01),  # every tile deferred: D stays far above DEFER_MIN
    "edge": lambda t: np.full(t, -1.7),  # deferred, a tile's D ends at exp(-13.6), just above DEFER_MIN = 2**-20
    "strong": lambda t: np.full(t, -15.0),  # exp(-15) < 2**-20: every tile exact, token by token
    "alternating": lambda t: np.where((np.arange(t) // 8) % 2 == 0, -0.3, -4.0),  # deferred, exact, ...: D
    # carries from a deferred tile into the next one, exact or not
    "underflow": lambda t: np.where(np.arange(t) % 7 == 3, -200.0, -0.2),  # exp(g) == 0 in float32: exact tiles
}


@pytest.mark.parametrize("asy", [True, False], ids=["async", "registers"])
@pytest.mark.parametrize("recurrence", ["decay", "gated_delta"])
@pytest.mark.parametrize("pattern", GATE_PATTERNS)
def test_deferred_decay_renormalises(recurrence, pattern, asy):
    """A tile keeps S~ with S = D S~ in its registers while D stays above ``DEFER_MIN`` and decays token by token
    otherwise: every pattern of gates (all tiles deferred, one at the edge, all exact, the two alternating, a
    decay that underflows to 0) matches the float64 recurrence, output and final state, from an initial state."""
    B, T, H, K, V = 1, 45, 2, 16, 12
    inp = make_inputs(B, T, H, K, V, recurrence, initial_state=True, seed=11)
    g = np.broadcast_to(GATE_PATTERNS[pattern](T)[None, :, None], (B, T, H)).astype(np.float32)
    inp["g"] = np.ascontiguousarray(g)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    o = cuda.to_device(np.full((B, T, H, V), np.nan, np.float32))
    ht = cuda.to_device(np.full((B, H, K, V), np.nan, np.float32))
    r1.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, d["initial_state"], ht, K**-0.5,
               ns=4, cols=2, nw=1, tc=8, asy=asy)  # 6 tiles: D carries over tile borders
    o_ref, h_ref = reference.recurrent(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"],
                                       initial_state=inp["initial_state"])
    e_o, e_h = rel_err(o.copy_to_host(), o_ref), rel_err(ht.copy_to_host(), h_ref)
    assert e_o <= TOL_FP32 and e_h <= TOL_FP32, (e_o, e_h)


def test_kernels_made_records_what_forward_launches():
    """``_common.kernels_made`` (how tools read the kernel a forward really used, e.g. its registers) records each
    kernel r1's factory hands out with the factory's arguments, and puts the factory back afterwards."""
    from linattn_numba._common import kernels_made

    factory = r1._kernel
    with kernels_made(r1, "_kernel") as made:
        errs = _run((1, 9, 1, 8, 8), "decay", 3, ns=4, cols=1, nw=1, tc=4)
    assert max(errs) <= TOL_FP32
    assert r1._kernel is factory
    assert len(made) == 1
    args, kwargs, kern = made[0]
    # (RC, COLS, NW, HAS_G, HAS_BETA, HAS_H0, HAS_HT, TC, NS, ASYNC): decay, both states, the knobs given
    assert args[1:9] == (1, 1, True, False, True, True, 4, 4) and not kwargs
    assert kern is factory(*args)
