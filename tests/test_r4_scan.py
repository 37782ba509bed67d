"""Rung r4 ``scan`` called directly: its ``forward`` under the simulator against the float64 recurrence, over
segment counts 1, 2, 3, 5 (not a power of two) and unequal lengths, both scans (tree and chain) and every engine
that is registered; the view machinery (merged and per-batch launches); the cost model; the state-only mode of
the r2 engine (``o=None``); every r4 kernel compiled for sm_90; and (``pytest -m gpu``) tree and chain at
K = V = 128 on a real GPU.

Simulator cost is dominated by simulated threads (one Python thread each) and barriers, so shapes are tiny
(K, V <= 12, T <= 48) and the (recurrence x segments x scan) cases are spread rather than multiplied.
"""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # before anything imports numba (the package does)

import subprocess
import sys

import numpy as np
import pytest
from numba import cuda

from linattn_numba import reference, rungs
from linattn_numba._common import kernels_made
from linattn_numba.rungs import r2_chunked as r2
from linattn_numba.rungs import r4_scan as r4
from linattn_numba.testing import TOL_FP32, make_inputs, rel_err

RECS = ("plain", "decay", "delta", "gated_delta")
ENGINES = [e for e in r4.ENGINES if e in rungs.RUNGS]


def run(inp, *, C=16, with_h0=True, with_ht=True, scale=None, **kw):
    """``r4.forward`` on device copies, outputs pre-filled with NaN; checks that no input was written."""
    B, T, H, K = inp["q"].shape
    V = inp["v"].shape[3]
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    o = cuda.to_device(np.full((B, T, H, V), np.nan, np.float32))
    ht = cuda.to_device(np.full((B, H, K, V), np.nan, np.float32)) if with_ht else None
    scale = K**-0.5 if scale is None else scale
    h0 = d["initial_state"] if with_h0 else None
    r4.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, h0, ht, scale, C, **kw)
    for n, a in inp.items():
        if a is not None:
            np.testing.assert_array_equal(d[n].copy_to_host(), a, err_msg=f"forward modified input {n}")
    return o.copy_to_host(), (ht.copy_to_host() if with_ht else None)


def oracle(inp, with_h0=True, scale=None):
    return reference.recurrent(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], scale=scale,
                               initial_state=inp["initial_state"] if with_h0 else None)


def check(inp, with_h0=True, with_ht=True, **kw):
    o, ht = run(inp, with_h0=with_h0, with_ht=with_ht, **kw)
    o_ref, h_ref = oracle(inp, with_h0)
    assert rel_err(o, o_ref) <= TOL_FP32, f"output: rel err {rel_err(o, o_ref):.2e}"
    if with_ht:
        assert rel_err(ht, h_ref) <= TOL_FP32, f"final state: rel err {rel_err(ht, h_ref):.2e}"
    return o, ht


@pytest.mark.parametrize("engine,recurrence", [("tensor_cores", "gated_delta"), ("shared", "gated_delta"),
                                                ("shared", "decay")])
def test_repeated_calls_allocate_nothing(engine, recurrence, monkeypatch):
    """After its first call, a forward with the same shapes allocates no device memory: r4's buffers and the
    engine's scratch are kept (``_common.scratch``), although the engine runs on a state of V + K columns in phase
    1, on V in phase 3 and on a shorter tail segment in between; for decay (phases 1 and 3 on r3's split schedule)
    each group of segments keeps its own per-chunk states from phase 1 to phase 3. (Reallocating made every call
    wait for the GPU: freeing synchronises.) Both calls still match the oracle."""
    if engine not in rungs.RUNGS:
        pytest.skip(f"rung {engine} not registered")
    inp = make_inputs(1, 40, 1, 8, 12, recurrence, initial_state=True, seed=5)
    o_ref, h_ref = oracle(inp)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    outs = []
    for attempt in range(2):
        o = cuda.to_device(np.full((1, 40, 1, 12), np.nan, np.float32))
        ht = cuda.to_device(np.full((1, 1, 8, 12), np.nan, np.float32))
        if attempt == 1:  # count every allocation of the second call
            allocs = []
            real = cuda.device_array
            monkeypatch.setattr(cuda, "device_array", lambda *a, **kw: allocs.append(a) or real(*a, **kw))
        r4.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, d["initial_state"], ht, 8**-0.5, 16,
                   num_segments=3, engine=engine)  # 16 + 16 + 8 tokens: a shorter tail
        outs.append((o.copy_to_host(), ht.copy_to_host()))
    assert allocs == [], f"the second call allocated {allocs}"
    for o, ht in outs:
        assert rel_err(o, o_ref) <= TOL_FP32 and rel_err(ht, h_ref) <= TOL_FP32


# (T, num_segments) -> segment lengths with C = 16 (plan_segments): equal and unequal
#   (32, 1) one segment (the engine itself)      (32, 2) 16 + 16       (48, 3) 16 + 16 + 16
#   (40, 3) 16 + 16 + 8 (a shorter tail)         (37, 5) 8 x 4 + 5 (not a power of two, not chunk aligned)
SEGS = [(32, 1), (32, 2), (48, 3), (40, 3), (37, 5)]
CASES = []
for ri, rec in enumerate(RECS):
    for j, (T, ns) in enumerate(SEGS):
        scan = ("tree", "chain")[(ri + j) % 2]
        B, H = ((1, 2), (2, 1))[(ri + j // 2) % 2]
        K, V = ((8, 8), (8, 12))[j % 2]
        h0, ht = ((True, True), (False, True), (True, False))[(ri + j) % 3]
        CASES.append(pytest.param(rec, (B, T, H, K, V), ns, scan, h0, ht,
                                  id=f"{rec}-B{B}T{T}H{H}K{K}V{V}-ns{ns}-{scan}-h0{h0:d}ht{ht:d}"))


@pytest.mark.parametrize("engine", ENGINES)
@pytest.mark.parametrize("recurrence,shape,ns,scan,with_h0,with_ht", CASES)
def test_matches_recurrent(recurrence, shape, ns, scan, with_h0, with_ht, engine):
    """Phase 3 by default (r1 for the delta family; r3's split schedule, phase 1 included, for the additive family,
    where the engine then runs nothing) with the first engine, on the engine itself with the others."""
    inp = make_inputs(*shape, recurrence, initial_state=True, seed=sum(shape) + ns)
    kw = {"phase3": "engine"} if engine != ENGINES[0] and recurrence in ("plain", "decay") else {}
    check(inp, with_h0, with_ht, num_segments=ns, scan=scan, engine=engine, **kw)


@pytest.mark.parametrize("recurrence", RECS)
@pytest.mark.parametrize("phase3", ["recurrent", "engine", "split"])
def test_phase3_rung(recurrence, phase3):
    """Phase 3 on another rung than the engine (r1 ``recurrent``: outputs from the segments' start states), on
    the engine, or phases 1 and 3 on r3's split schedule (the additive family: its output kernel adds each
    segment's decayed start state to the states stored by its zero-start walk), asked for by name, with unequal
    segments and a tail (T = 37, 5 segments), K != V. "split" for the delta family is refused."""
    inp = make_inputs(1, 37, 2, 8, 12, recurrence, initial_state=True, seed=31)
    if phase3 == "split" and recurrence in ("delta", "gated_delta"):
        with pytest.raises(ValueError, match="additive family"):
            run(inp, num_segments=5, phase3=phase3)
        return
    check(inp, num_segments=5, phase3=phase3)


def test_phase3_default_and_fallback(monkeypatch):
    """PHASE3 picks phase 3's rung per family; a default that does not fit K falls back to the engine, a rung asked
    for by name that does not fit is an error."""
    from linattn_numba.rungs import r1_recurrent as r1

    eng = r4.engine_module(8, 8, 16)
    monkeypatch.setattr(r4, "PHASE3", {False: None, True: "recurrent"})
    assert r4.phase3_module(8, 8, 16, True, eng) is r1
    assert r4.phase3_module(8, 8, 16, False, eng) is eng
    assert r4.phase3_module(r1.MAX_K + 8, 8, 16, True, eng) is eng
    with pytest.raises(ValueError, match="does not support K"):
        r4.phase3_module(r1.MAX_K + 8, 8, 16, True, eng, "recurrent")
    with pytest.raises(ValueError, match="phase3"):
        r4.phase3_module(8, 8, 16, True, eng, "naive")
    monkeypatch.undo()
    # the additive family's default: r3's split schedule where it fits, else r1 (no error unless asked for)
    assert r4.PHASE3 == {False: r4.SPLIT, True: "recurrent"}
    assert r4.phase3_module(8, 8, 16, False, eng) is r1
    arrs = {}
    for name, dtype, V in (("f32", np.float32, 8), ("f16", np.float16, 8), ("v6", np.float32, 6)):
        inp = make_inputs(1, 20, 1, 8, V, "decay", dtype=dtype, seed=3)
        arrs[name] = [cuda.to_device(inp[n]) for n in ("q", "k", "v", "g")] + [
            cuda.to_device(np.zeros((1, 20, 1, V), np.float32))]
    q, k, v, g, o = arrs["f32"]
    assert r4._runs_split(q, k, v, g, None, o, 16)
    assert not r4._runs_split(q, k, v, g, None, None, 16)  # state only: no phase 3
    assert not r4._runs_split(q, k, v, g, g, o, 16)  # the delta family: r1
    assert not r4._runs_split(q, k, v, g, None, o, 16, "recurrent")
    for name in ("f16", "v6"):  # float16 inputs, rows of 6 floats: r1 by default, an error when asked for
        q, k, v, g, o = arrs[name]
        assert not r4._runs_split(q, k, v, g, None, o, 16)
        with pytest.raises(ValueError, match="split"):
            r4._runs_split(q, k, v, g, None, o, 16, r4.SPLIT)


def test_plan_segments():
    """Segment lengths: equal when the count divides T, else chunk-aligned when that keeps the count; a shorter
    tail; never more segments than tokens."""
    assert r4.plan_segments(32, 16, 2) == (2, 16)
    assert r4.plan_segments(40, 16, 3) == (3, 16)  # 16 + 16 + 8
    assert r4.plan_segments(37, 16, 5) == (5, 8)  # 8 x 4 + 5: aligning to 16 would give 3 segments
    assert r4.plan_segments(70, 16, 2) == (2, 35)  # 35 + 35 (each 2 chunks and 3 tokens), not 48 + 22
    assert r4.plan_segments(71, 16, 2) == (2, 48)  # 48 + 23
    assert r4.plan_segments(3, 16, 8) == (3, 1)
    assert r4.plan_segments(20, 16, 1) == (1, 20)
    assert r4.plan_segments(262144, 64, 66) == (66, 4032)  # 65 segments of 63 chunks, a 1-chunk tail
    for T in (1, 17, 100, 1000):
        for ns in (1, 2, 3, 7, 64):
            n, L = r4.plan_segments(T, 16, ns)
            assert 1 <= n <= min(ns, T) and (n - 1) * L < T <= n * L


@pytest.mark.parametrize("recurrence", RECS)
def test_tree_equals_chain(recurrence):
    """The two phase-2 algorithms compute the same start states (to float32 rounding), 4 segments, B = 2."""
    inp = make_inputs(2, 40, 1, 8, 12, recurrence, initial_state=True, seed=11)
    o_t, h_t = run(inp, num_segments=4, scan="tree")
    o_c, h_c = run(inp, num_segments=4, scan="chain")
    assert rel_err(o_t, o_c) <= 1e-6 and rel_err(h_t, h_c) <= 1e-6
    o_ref, h_ref = oracle(inp)
    assert rel_err(o_t, o_ref) <= TOL_FP32 and rel_err(h_t, h_ref) <= TOL_FP32


@pytest.mark.parametrize("scan", ["tree", "chain"])
def test_multi_tile_combine(scan):
    """K = 72, V = 40: the tree's matmul runs 2 row tiles x 2 column tiles of 64 (W = V + K = 112) with 5 slabs of
    16 (the last partial), and 3 levels with NS = 5 (the last one on the V columns only); the chain 9 rows per
    thread. The engine is r2 (it supports any K <= 256), the oracle the float64 recurrence."""
    inp = make_inputs(1, 40, 1, 72, 40, "gated_delta", initial_state=True, seed=23)
    check(inp, num_segments=5, scan=scan, engine="chunked")


def _count_engine_calls(monkeypatch, engine_name=None):
    """Record (q view shape, state only) of every call of the engine's forward (default: r4's default engine);
    phase 3 runs on the engine too (PHASE3 off), so both phases' launches are counted."""
    monkeypatch.setattr(r4, "PHASE3", {False: None, True: None})
    calls = []
    mod = rungs.module(engine_name) if engine_name else r4.engine_module(8, 8, 16)
    real = mod.forward

    def spy(q, *args, **kw):
        calls.append((q.shape, args[4] is None))  # (segment-view shape, state only)
        return real(q, *args, **kw)

    monkeypatch.setattr(mod, "forward", spy)
    return calls


def test_views_merge_batch_and_segments(monkeypatch):
    """B = 2 with equal segments: one engine launch per phase over all B x NS segments (zero-copy views)."""
    calls = _count_engine_calls(monkeypatch, "chunked")
    inp = make_inputs(2, 32, 1, 8, 8, "gated_delta", initial_state=True, seed=12)
    check(inp, num_segments=2, engine="chunked")
    assert calls == [((4, 16, 1, 8), True), ((4, 16, 1, 8), False)]


def test_views_with_a_tail_fall_back_per_batch(monkeypatch):
    """B = 2 with a shorter tail: the equal segments cannot merge with the batch axis (stride_B = T stride_T),
    so they run once per batch element; the tails of all batch elements run as one slice."""
    calls = _count_engine_calls(monkeypatch, "chunked")
    inp = make_inputs(2, 40, 1, 8, 8, "decay", initial_state=True, seed=13)
    check(inp, num_segments=3, engine="chunked")
    phase1 = [((2, 16, 1, 8), True)] * 2 + [((2, 8, 1, 8), True)]
    phase3 = [((2, 16, 1, 8), False)] * 2 + [((2, 8, 1, 8), False)]
    assert calls == phase1 + phase3


def test_one_segment_is_the_engine(monkeypatch):
    """NS = 1: exactly one engine call with the caller's arrays, nothing else."""
    calls = _count_engine_calls(monkeypatch)
    inp = make_inputs(1, 20, 2, 8, 8, "delta", initial_state=True, seed=14)
    check(inp, num_segments=1)
    assert calls == [((1, 20, 2, 8), False)]


def test_one_segment_additive_is_r3(monkeypatch):
    """NS = 1 for the additive family, where phases 1 and 3 would be r3's split schedule with r3's output kernel
    (C = 16: r6's pipelined one needs C >= 32; test_split_output_kernels has the other case): one r3 forward, none
    of the engine's; r1 would not be called either."""
    from linattn_numba.rungs import r3_shared as r3

    r3_calls = []
    real = r3.forward
    monkeypatch.setattr(r3, "forward", lambda q, *a, **kw: r3_calls.append(q.shape) or real(q, *a, **kw))
    eng_calls = []
    eng = r4.engine_module(8, 8, 16)
    monkeypatch.setattr(eng, "forward", lambda *a, **kw: eng_calls.append(1))
    check(make_inputs(1, 20, 2, 8, 8, "decay", initial_state=True, seed=14), num_segments=1)
    assert r3_calls == [(1, 20, 2, 8)] and eng_calls == []


@pytest.mark.parametrize("recurrence", ["plain", "decay"])
def test_split_output_kernels(recurrence, monkeypatch):
    """Phase 3 on r6's pipelined output kernel (``SPLIT_OUT`` "tensor_cores", the default where it fits: C >= 32)
    with the deferred start state added to the slabs it copies, and on r3's: both against the oracle and each
    other, over unequal segments (100 tokens in 3 segments: 32 + 32 + 36) at K' = 16 (slabs of 16 rows) and, for
    decay, K' = 32 with two value passes; at C = 16 r3's kernel runs whatever SPLIT_OUT says. One segment where r6's
    kernel fits is r6's forward. An unknown SPLIT_OUT is refused."""
    if "tensor_cores" not in rungs.RUNGS:
        pytest.skip("rung tensor_cores not registered")
    from linattn_numba.rungs import r6_tensor_cores as r6

    assert r4.SPLIT_OUT == "tensor_cores"
    shapes = [(8, 12)] + ([(20, 68)] if recurrence == "decay" else [])
    for K, V in shapes:
        inp = make_inputs(1, 100, 1, K, V, recurrence, initial_state=True, seed=K + V)
        with kernels_made(r6, "_out_pipe_kernel") as made:
            o_tc, h_tc = check(inp, num_segments=3, C=32)
        # one kernel per group of segments (the equal ones, the tail), each with the deferred state (has_x)
        assert [args[3] for args, _, _ in made] == [True, True]
        monkeypatch.setattr(r4, "SPLIT_OUT", "shared")
        with kernels_made(r6, "_out_pipe_kernel") as made:
            o_r3, h_r3 = check(inp, num_segments=3, C=32)
        monkeypatch.setattr(r4, "SPLIT_OUT", "tensor_cores")
        assert made == [] and rel_err(o_tc, o_r3) <= TOL_FP32 and rel_err(h_tc, h_r3) <= TOL_FP32
    inp = make_inputs(1, 40, 1, 8, 12, recurrence, initial_state=True, seed=3)
    with kernels_made(r6, "_out_pipe_kernel") as made:
        check(inp, num_segments=3)  # C = 16
    assert made == []
    r6_calls = []
    real = r6.forward
    monkeypatch.setattr(r6, "forward", lambda q, *a, **kw: r6_calls.append(q.shape) or real(q, *a, **kw))
    check(inp, num_segments=1, C=32)
    assert r6_calls == [(1, 40, 1, 8)]
    monkeypatch.setattr(r4, "SPLIT_OUT", "wmma")
    with pytest.raises(ValueError, match="SPLIT_OUT"):
        run(inp, num_segments=3, C=32)


def test_precision(monkeypatch):
    """``precision`` reaches every r6 kernel r4 runs: "tf32" makes phase 3's pipelined output kernel one TF32 product
    (three = False; TF32's ~1e-3 error, not float32's) and is passed to r6's forward as the engine (delta, 2
    segments) and with one segment; the FMA rungs are not given it (r1's phase 3); r4's values are r6's; an
    unknown value is refused before anything runs."""
    if "tensor_cores" not in rungs.RUNGS:
        pytest.skip("rung tensor_cores not registered")
    from linattn_numba.rungs import r6_tensor_cores as r6

    assert r4.PRECISIONS == r6.PRECISIONS
    inp = make_inputs(1, 70, 1, 8, 12, "decay", initial_state=True, seed=23)
    o_ref, _ = oracle(inp)
    with kernels_made(r6, "_out_pipe_kernel") as made:
        o1, h1 = run(inp, num_segments=3, C=32, precision="tf32")
    assert [args[4] for args, _, _ in made] == [False, False]  # both groups of segments: three = False
    assert 20 * TOL_FP32 < rel_err(o1, o_ref) < 1e-2
    assert rel_err(h1, oracle(inp)[1]) <= TOL_FP32  # phase 1 is r3's FMA state walk
    calls = []
    real = r6.forward
    monkeypatch.setattr(r6, "forward", lambda *a, **kw: calls.append(kw.get("precision")) or real(*a, **kw))
    run(inp, num_segments=1, C=32, precision="tf32")
    assert calls == ["tf32"]
    calls.clear()
    dl = make_inputs(1, 40, 1, 8, 8, "delta", initial_state=True, seed=24)
    run(dl, num_segments=2, C=16, engine="tensor_cores", phase3="recurrent", precision="3xtf32")
    assert calls == ["3xtf32"]  # phase 1 on r6 (one call for the two equal segments); phase 3 on r1, not given it
    with pytest.raises(ValueError, match="precision"):
        run(inp, num_segments=3, C=32, precision="fp16")


def test_strided_inputs():
    """Non-contiguous q, k, v, g, beta, h0 (every other block of the last axis), B = 2: the segment views
    keep the inner strides."""
    B, T, H, K, V = 2, 32, 2, 8, 8
    inp = make_inputs(B, T, H, K, V, "gated_delta", initial_state=True, seed=15)
    wide = {n: np.concatenate([a, np.full_like(a, np.nan)], axis=-1) for n, a in inp.items()}
    d = {n: cuda.to_device(a)[..., : inp[n].shape[-1]] for n, a in wide.items()}
    assert not d["q"].is_c_contiguous()
    o = cuda.to_device(np.full((B, T, H, V), np.nan, np.float32))
    ht = cuda.to_device(np.full((B, H, K, V), np.nan, np.float32))
    r4.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, d["initial_state"], ht, K**-0.5, 16, num_segments=2)
    o_ref, h_ref = oracle(inp)
    assert rel_err(o.copy_to_host(), o_ref) <= TOL_FP32
    assert rel_err(ht.copy_to_host(), h_ref) <= TOL_FP32


@pytest.mark.parametrize("scan", ["tree", "chain"])
@pytest.mark.parametrize("recurrence", ["decay", "gated_delta"])
def test_state_in_place(recurrence, scan):
    """h0 and ht the same array (how ``step`` uses a rung), 3 segments: h0 is read before ht is written."""
    inp = make_inputs(1, 24, 2, 8, 8, recurrence, initial_state=True, seed=16)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    o = cuda.to_device(np.full((1, 24, 2, 8), np.nan, np.float32))
    s = d["initial_state"]
    r4.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, s, s, 0.5, 16, num_segments=3, scan=scan)
    o_ref, h_ref = oracle(inp, scale=0.5)
    assert rel_err(o.copy_to_host(), o_ref) <= TOL_FP32
    assert rel_err(s.copy_to_host(), h_ref) <= TOL_FP32


def test_float16_inputs():
    """float16 q, k, v over 3 segments (the augmented values of phase 1 are float32)."""
    inp = make_inputs(1, 40, 1, 8, 8, "gated_delta", dtype=np.float16, initial_state=True, seed=17)
    check(inp, num_segments=3)


def test_state_only():
    """o=None: only ht (phase 3 skipped)."""
    inp = make_inputs(1, 40, 2, 8, 8, "delta", initial_state=True, seed=18)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    ht = cuda.to_device(np.full((1, 2, 8, 8), np.nan, np.float32))
    r4.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], None, d["initial_state"], ht, 0.5, 16, num_segments=3)
    assert rel_err(ht.copy_to_host(), oracle(inp)[1]) <= TOL_FP32


# ----------------------------------------------------------------------------------------------------------
# phase 1 of the delta family without [v | 0]: the engines' wide state (WIDE_STATE)
# ----------------------------------------------------------------------------------------------------------
def _wide_inputs(recurrence, B=1, T=37, H=2, K=8, V=12, seed=23):
    """Inputs and the float64 [S | M] of a state-only run from [h0 | I] with values [v | 0]."""
    inp = make_inputs(B, T, H, K, V, recurrence, initial_state=True, seed=seed)
    h0w = np.concatenate([inp["initial_state"], np.broadcast_to(np.eye(K, dtype=np.float32), (B, H, K, K))], axis=3)
    vaug = np.concatenate([inp["v"], np.zeros((B, T, H, K), np.float32)], axis=3)
    ref = reference.recurrent(inp["q"], inp["k"], vaug, inp["g"], inp["beta"], initial_state=h0w)[1]
    return inp, np.ascontiguousarray(h0w), ref


@pytest.mark.parametrize("engine", ["shared", "tensor_cores"])
@pytest.mark.parametrize("recurrence", ["delta", "gated_delta"])
@pytest.mark.parametrize("bv", [None, 8], ids=["bv_default", "bv8"])
def test_engine_wide_state(recurrence, engine, bv):
    """What r4's phase 1 asks of r3 and r6: a state-only run with v of V = 12 columns and h0 / ht of V + K = 20,
    the columns past V driven by zero values, equals the float64 recurrence on [v | 0] from [h0 | I] -- [S | M]
    with M the transition. ``bv=8``: value tiles wholly past V (U = 0 there) and one across it."""
    if engine not in rungs.RUNGS:
        pytest.skip(f"rung {engine} not registered")
    mod = rungs.module(engine)
    assert mod.WIDE_STATE
    inp, h0w, ref = _wide_inputs(recurrence)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    ht = cuda.to_device(np.full(h0w.shape, np.nan, np.float32))
    mod.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], None, cuda.to_device(h0w), ht, 0.5, 16, bv=bv)
    assert rel_err(ht.copy_to_host(), ref) <= TOL_FP32


@pytest.mark.parametrize("engine", ["shared", "tensor_cores"])
def test_engine_wide_state_rejects_mismatches(engine):
    """A wider ht is only for state-only runs of the delta family, with h0 as wide as ht: anything else raises
    (no silent reading past v's columns)."""
    if engine not in rungs.RUNGS:
        pytest.skip(f"rung {engine} not registered")
    mod = rungs.module(engine)
    inp, h0w, _ = _wide_inputs("delta", T=16)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    wide = cuda.to_device(np.zeros(h0w.shape, np.float32))
    o = cuda.to_device(np.zeros(inp["v"].shape, np.float32))
    with pytest.raises(ValueError, match="state-only"):  # with the output
        mod.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, None, wide, 0.5, 16)
    with pytest.raises(ValueError, match="delta family"):  # additive family
        mod.forward(d["q"], d["k"], d["v"], d["g"], None, None, None, wide, 0.5, 16)
    with pytest.raises(ValueError, match="h0 has 12"):  # h0 narrower than ht
        mod.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], None, d["initial_state"], wide, 0.5, 16)
    with pytest.raises(ValueError, match="h0 has 20"):  # h0 wider than v, ht not
        mod.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], None, wide,
                    cuda.to_device(np.zeros(inp["initial_state"].shape, np.float32)), 0.5, 16)


@pytest.mark.parametrize("engine", ["shared", "tensor_cores"])
@pytest.mark.parametrize("recurrence", ["delta", "gated_delta"])
def test_phase1_without_vaug(recurrence, engine, monkeypatch):
    """With a WIDE_STATE engine r4 launches no [v | 0] copy (the vaug kernel made to fail proves it), and the
    result equals the one with [v | 0] spelled out (VAUG = True) and the oracle: 3 segments with a tail."""
    if engine not in rungs.RUNGS:
        pytest.skip(f"rung {engine} not registered")
    inp = make_inputs(1, 40, 2, 8, 12, recurrence, initial_state=True, seed=24)
    monkeypatch.setattr(r4, "VAUG", True)
    o_a, h_a = check(inp, num_segments=3, engine=engine)
    monkeypatch.setattr(r4, "VAUG", False)

    def no_vaug():
        raise AssertionError("the vaug kernel was launched")

    monkeypatch.setattr(r4, "_vaug_kernel", no_vaug)
    o_b, h_b = check(inp, num_segments=3, engine=engine)
    assert rel_err(o_b, o_a) <= 1e-6 and rel_err(h_b, h_a) <= 1e-6


def test_strong_decay_underflows_cleanly():
    """g = -30 on a stretch: a segment's decay product exp(sum g) underflows to 0 (the right answer), no NaN."""
    inp = make_inputs(1, 48, 1, 8, 8, "decay", initial_state=True, seed=19)
    inp["g"][:, 10:30] = -30.0
    o, ht = check(inp, num_segments=3)
    assert np.isfinite(o).all() and np.isfinite(ht).all()


def test_module_override(monkeypatch):
    """The module-level NUM_SEGMENTS / SCAN override the cost model (e.g. for test_rungs.py's shapes)."""
    calls = _count_engine_calls(monkeypatch)
    monkeypatch.setattr(r4, "NUM_SEGMENTS", 2)
    monkeypatch.setattr(r4, "SCAN", "tree")
    check(make_inputs(1, 32, 1, 8, 8, "plain", initial_state=True, seed=20))
    assert len(calls) == 2


def test_catches_a_wrong_answer():
    """The comparison can fail: the start state of every segment but the first dropped (phase 2 skipped) is
    far off -- a strong check that the segments really hand their states on."""
    inp = make_inputs(1, 32, 1, 8, 8, "delta", initial_state=False, seed=21)
    o, _ = run(inp, with_h0=False, num_segments=2)
    first = reference.recurrent(inp["q"][:, :16], inp["k"][:, :16], inp["v"][:, :16], beta=inp["beta"][:, :16])[0]
    second = reference.recurrent(inp["q"][:, 16:], inp["k"][:, 16:], inp["v"][:, 16:], beta=inp["beta"][:, 16:])[0]
    assert rel_err(o, np.concatenate([first, second], axis=1)) > 100 * TOL_FP32


def test_rejects_bad_arguments():
    inp = make_inputs(1, 4, 1, 8, 8, "plain", initial_state=True)
    with pytest.raises(ValueError, match="chunk_size"):
        run(inp, C=8)
    with pytest.raises(ValueError, match="scan"):
        run(inp, scan="sideways")
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="num_segments"):
            run(inp, num_segments=bad)
    with pytest.raises(ValueError, match="engine"):
        run(inp, engine="naive")
    big = make_inputs(1, 1, 1, r4.MAX_K + 1, 4, "plain")
    with pytest.raises(ValueError, match="K"):
        run(big)


def test_cost_model():
    """NS = 1 when B H ceil(V / 32) walkers fill the 132 SMs (the standard shape); many segments for B1 H2
    at long T; short sequences keep >= MIN_SEG_CHUNKS chunks per segment; the scan choice follows the model."""
    assert r4.choose_num_segments(4, 8192, 16, 128, 128, 64, True, n_sm=132) == 1
    assert r4.choose_num_segments(4, 8192, 16, 128, 128, 64, False, n_sm=132) == 1
    ns_delta = r4.choose_num_segments(1, 262144, 2, 128, 128, 64, True, n_sm=132)
    ns_add = r4.choose_num_segments(1, 1 << 20, 2, 128, 128, 64, False, n_sm=132)
    # RESIDENT walkers per SM ask for 33 and 132; counts that divide the sequence into equal segments win
    assert r4.RESIDENT_DELTA * 132 // 8 == 33 and r4.RESIDENT_ADD * 132 // 8 == 132
    assert ns_delta == 32 and r4.plan_segments(262144, 64, ns_delta) == (32, 8192)
    assert ns_add == 128 and r4.plan_segments(1 << 20, 64, ns_add) == (128, 8192)
    assert r4.choose_num_segments(1, 256, 2, 128, 128, 64, True, n_sm=132) == 256 // (64 * r4.MIN_SEG_CHUNKS)
    assert r4.choose_num_segments(1, 100, 1, 8, 8, 64, True, n_sm=132) == 1
    for ns in (2, 16, 66, 264):
        for delta in (False, True):
            kind = r4.choose_scan(1, 2, 128, 128, ns, delta)
            other = "chain" if kind == "tree" else "tree"
            assert r4._scan_cost_us(kind, 1, 2, 128, 128, ns, delta) <= r4._scan_cost_us(other, 1, 2, 128, 128,
                                                                                          ns, delta)


def test_default_choice_splits_grading_shapes():
    """test_rungs.py runs r4 with the model's choice: its longest shape (T = 70, C = 16) gets 2 segments."""
    assert r4.choose_num_segments(1, 70, 1, 12, 16, 16, False) == 2
    assert r4.plan_segments(70, 16, 2) == (2, 35)


def test_short_tail():
    """The count is moved (down to half the GPU-filling one) to a plan without a long last segment, which would
    run alone after the others: T = 300,000 asks for 33 segments (32 of 9,152 tokens and a last of 7,136); 32
    equal ones of 9,375 tokens (not whole chunks) walk 147 chunks instead of 143 + 112. A sequence that leaves
    every candidate a tail keeps the cheapest plan; equal segments beat whole chunks with a tail in the plan."""
    assert r4.plan_segments(300000, 64, 33) == (33, 9152)
    assert r4.choose_num_segments(1, 300000, 2, 128, 128, 64, True, n_sm=132) == 32
    assert r4.plan_segments(300000, 64, 32) == (32, 9375)
    assert r4.plan_segments(40, 16, 3) == (3, 16)  # no equal split: whole chunks and a tail, as before
    for T in (1000, 5000, 65636, 100000, 262144, 300000, 1 << 20):
        for delta in (False, True):
            ns = r4.choose_num_segments(1, T, 2, 128, 128, 64, delta, n_sm=132)
            n, L = r4.plan_segments(T, 64, ns)
            last = T - (n - 1) * L
            want = r4.cdiv((r4.RESIDENT_DELTA if delta else r4.RESIDENT_ADD) * 132, 8)
            want = min(want, T // (64 * r4.MIN_SEG_CHUNKS))
            assert max(2, r4.cdiv(want, 2)) <= n <= want
            # never worse than the count asked for, in chunks walked one after another
            n0, L0 = r4.plan_segments(T, 64, want)
            last0 = T - (n0 - 1) * L0
            walk = r4.cdiv(L, 64) + (r4.cdiv(last, 64) if last != L else 0)
            assert walk <= r4.cdiv(L0, 64) + (r4.cdiv(last0, 64) if last0 != L0 else 0)


# ----------------------------------------------------------------------------------------------------------
# the engine's state-only mode (r2 ``chunked`` with o=None)
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("recurrence", RECS)
@pytest.mark.parametrize("with_h0", [True, False], ids=["h0", "no_h0"])
def test_r2_state_only(recurrence, with_h0):
    """r2 with o=None computes ht alone (no scores for the additive family, Lkk only for the delta rule)."""
    inp = make_inputs(1, 37, 2, 8, 12, recurrence, initial_state=True, seed=22)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    ht = cuda.to_device(np.full((1, 2, 8, 12), np.nan, np.float32))
    r2.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], None, d["initial_state"] if with_h0 else None, ht,
               0.5, 16)
    assert rel_err(ht.copy_to_host(), oracle(inp, with_h0)[1]) <= TOL_FP32


_COMPILE_SCRIPT = """
import time
from numba import cuda
from linattn_numba.rungs import r4_scan as r4
t0, bad, local = time.time(), [], []
targets = list(r4.compile_targets())
for label, fn, argtypes in targets:
    try:
        ptx, _ = cuda.compile_ptx(fn, argtypes, cc=(9, 0))
    except Exception as e:
        bad.append(f"{label}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        continue
    if "ld.local" in ptx or "st.local" in ptx:
        local.append(label)
print(f"compiled {len(targets) - len(bad)}/{len(targets)} in {time.time() - t0:.0f} s")
for b in bad:
    print("FAILED:", b)
for label in local:
    print("LOCAL MEMORY:", label)
"""


def test_module_contract():
    assert r4.NAME == "scan"
    assert r4.MAX_K == 256 and r4.MAX_V is None
    assert r4.ENGINES == ("shared", "chunked", "tensor_cores")
    assert r4.DEFAULT_ENGINES == ("tensor_cores", "shared", "chunked") and r4.ENGINE is None
    assert r4.engine_module(128, 128, 64).NAME == "tensor_cores"
    assert r4.engine_module(128, 128, 64, "shared").NAME == "shared"
    assert r4.engine_module(256, 128, 64).NAME == "chunked"  # K > 128: neither r6 nor r3
    assert r4.engine_module(128, 128, 128).NAME == "chunked"  # chunk 128: r2 only
    with pytest.raises(ValueError, match="engine must be one of"):
        r4.engine_module(128, 128, 64, "recurrent")
    labels = [label for label, _, _ in r4.compile_targets()]
    # 2 vaug + 2 init + segsum + 2 tree_add + tree_delta + 4 (h0, ht) x (2 chain_add + 2 finish_add + chain_delta
    # + finish_delta)
    assert len(labels) == len(set(labels)) == 32


@pytest.mark.compile
def test_every_variant_compiles_for_sm90():
    """In a subprocess with the simulator off: compile_ptx every r4 kernel for cc 9.0, no local memory."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    r = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "compiled 32/32" in out and "FAILED" not in out and "LOCAL MEMORY" not in out, out[-4000:]


# ----------------------------------------------------------------------------------------------------------
# GPU tier (`pytest -m gpu tests/test_r4_scan.py` on a GPU machine): the real kernels at K = V = 128
# ----------------------------------------------------------------------------------------------------------
@pytest.mark.gpu
@pytest.mark.parametrize("recurrence", ["decay", "gated_delta"])
@pytest.mark.parametrize("B,T,ns", [(1, 4096, 8), (2, 3000, 5)], ids=["B1-equal", "B2-tail"])
def test_gpu_tree_and_chain_match_the_oracle(recurrence, B, T, ns):
    """Full-size tiles (2 x 4 tiles of 64, 8 slabs of the tree's matmul; 16 rows per chain thread), the merged
    views (B = 1) and the per-batch fallback with a tail (B = 2), both scans and the default engine, against the
    float64 chunked oracle."""
    if not cuda.is_available():
        pytest.skip("no CUDA GPU")
    inp = make_inputs(B, T, 2, 128, 128, recurrence, initial_state=True, seed=T + ns)
    o_ref, h_ref = reference.chunked(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"],
                                     initial_state=inp["initial_state"], chunk_size=64)
    for scan in ("tree", "chain"):
        o, ht = run(inp, C=64, num_segments=ns, scan=scan)
        assert rel_err(o, o_ref) <= 1e-4 and rel_err(ht, h_ref) <= 1e-4, scan
    # phase 3 on r1 (its cp.async staging on merged segment views), on the engine, on r3's split schedule
    for phase3 in ("recurrent", "engine") + (("split",) if recurrence == "decay" else ()):
        o, ht = run(inp, C=64, num_segments=ns, phase3=phase3)
        assert rel_err(o, o_ref) <= 1e-4 and rel_err(ht, h_ref) <= 1e-4, phase3
