"""Rung r6 ``tensor_cores``, called directly: its ``forward`` under the simulator against the float64 recurrence
(the mma is a warp rendezvous there, computing each 16 x 8 x 8 tile from all lanes' fragments), both precisions,
the state-only mode, several value tiles and S tiles per warp, K and V that are not multiples of the tile sizes,
and the kernels built for sm_90 with ``mma.sync`` in them.

The simulated blocks are one or two warps (K <= 32, V <= 16); (K, V) and h0 / ht combinations are spread over the
(recurrence, T, chunk) cases instead of multiplied with them.
"""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # before anything imports numba (the package does)

import functools
import subprocess
import sys

import numpy as np
import pytest
from numba import cuda

from linattn_numba._common import kernels_made
from linattn_numba.rungs import r3_shared as r3
from linattn_numba.rungs import r6_tensor_cores as r6
from linattn_numba.testing import TOL_FP32, rel_err

import chunk_helpers  # tests/chunk_helpers.py

T_CHUNK = [(1, 16), (37, 16), (64, 32), (45, 32)]  # 1, 3, 2 and 2 chunks (the last one short but for T = 64)
KV = [(16, 8), (8, 20), (20, 12)]  # K > V, K < V, K and V not multiples of 8 (padded tiles)
H0_HT = [(True, True), (False, False), (True, False), (False, True)]
BH = [(1, 2), (2, 1)]

REC_FLAGS, make, oracle = chunk_helpers.REC_FLAGS, chunk_helpers.make, chunk_helpers.oracle
run = functools.partial(chunk_helpers.run, r6)
check = functools.partial(chunk_helpers.check, r6)

CASES = chunk_helpers.spread_cases(T_CHUNK, KV, H0_HT, BH)


@pytest.mark.parametrize("recurrence,shape,chunk,with_h0,with_ht", CASES)
def test_matches_recurrent(recurrence, shape, chunk, with_h0, with_ht):
    check(make(*shape, recurrence, seed=sum(shape) + chunk), chunk, with_h0, with_ht)


@pytest.mark.parametrize("recurrence", ["decay", "gated_delta"])
def test_several_value_tiles_and_state_tiles_per_warp(recurrence):
    """V = 20 in value tiles of 8 (three blocks per head, the last one partly outside V); K = 32 gives two S
    tiles (16 x 8) to the block's one warp."""
    check(make(1, 40, 2, 32, 20, recurrence, seed=11), 16, bv=8)


@pytest.mark.parametrize("recurrence", ["plain", "gated_delta"])
def test_tiles_side_by_side(recurrence):
    """K = V = 32, C = 32: two warps, each computing 4 tiles of P1 and its 4 tiles of S side by side (one A
    fragment per step for 4 mma tiles, the H200 default's P2 grouping); T = 50 leaves a short last chunk."""
    assert r6._tiling(32, 32, 32, recurrence == "gated_delta", True)[-2:] == (4, 4)
    check(make(1, 50, 1, 32, 32, recurrence, seed=13), 32)


def test_fixed_map_stagers_and_their_fallback():
    """The fixed-map stagers take float32 inputs with aligned rows when the block's threads cover whole rows of
    quads (K = 16 or 20 and V = 8 or 12 in the cases above, and the H200 default); V = 20 in tiles of 24 does
    not fit (6 quads per row, 32 threads) and float16 inputs are not 128-bit rows: both use r3's loops, and both
    are checked against the oracle in this file (test_matches_recurrent, test_float16_inputs)."""
    assert r6._stager_fits(128, 512) and r6._stager_fits(64, 512) and r6._stager_fits(8, 32)
    assert not r6._stager_fits(24, 32) and not r6._stager_fits(10, 32)
    inp = make(1, 21, 1, 8, 20, "decay", seed=14)  # BV = 24: the fallback, with a short single chunk
    check(inp, 32)


def test_tiling_at_the_default():
    """C = 64, K = V = 128, BV = 64: 16 warps, 4 tiles of S each, all four side by side in P2; P1 pairs tiles for
    the additive output (32 tiles over 16 warps) and takes 4 at once for the delta rule's [W; Q'] (64 tiles)."""
    assert r6._tiling(64, 128, 64, False, True) == (16, 8, 64, 4, 32, 2, 4)
    assert r6._tiling(64, 128, 64, True, True) == (16, 8, 64, 4, 64, 4, 4)
    assert r6._tiling(64, 128, 64, True, False)[-2:] == (2, 4)


@pytest.mark.parametrize("recurrence", ["plain", "delta"])
def test_chunk_64(recurrence):
    """C = 64 (the H200 default; T = 70 leaves a short last chunk), K = 24 pads to 32 columns."""
    check(make(1, 70, 1, 24, 12, recurrence, seed=12), 64)


@pytest.mark.parametrize("recurrence,with_h0", [("decay", True), ("gated_delta", False)])
def test_state_only(recurrence, with_h0):
    """o=None: only the final state; it matches the full run's and the oracle's."""
    inp = make(1, 37, 2, 8, 12, recurrence, seed=13)
    o, ht = run(inp, 16, with_h0=with_h0, with_o=False)
    assert o is None
    _, h_ref = oracle(inp, with_h0)
    assert rel_err(ht, h_ref) <= TOL_FP32, f"final state: rel err {rel_err(ht, h_ref):.2e}"


@pytest.mark.parametrize("recurrence", ["plain", "gated_delta"])
def test_float16_inputs(recurrence):
    """float16 q, k, v are converted on load; float32 accuracy holds with 3xTF32."""
    inp = make(1, 20, 1, 12, 20, recurrence, dtype=np.float16, seed=1)
    assert not r3._rows_aligned(*(cuda.to_device(inp[n]) for n in "qkv"))
    check(inp, 16)


@pytest.mark.parametrize("recurrence", ["decay", "gated_delta"])
def test_tf32_precision_is_tf32_accurate(recurrence):
    """precision="tf32": one TF32 product per step. Off from float64 by TF32's ~1e-3, far beyond float32's
    tolerance; 3xTF32 (the default) on the same inputs is inside it."""
    inp = make(1, 48, 1, 16, 16, recurrence, seed=21)
    o_ref, h_ref = oracle(inp)
    o1, h1 = run(inp, 16, precision="tf32")
    o3, h3 = run(inp, 16)
    e1 = max(rel_err(o1, o_ref), rel_err(h1, h_ref))
    e3 = max(rel_err(o3, o_ref), rel_err(h3, h_ref))
    assert 20 * TOL_FP32 < e1 < 1e-2, e1
    assert e3 <= TOL_FP32, e3


def test_strided_inputs():
    """q, k, v, g, beta and h0 as non-contiguous device views (layout "A"), B = H = 2."""
    chunk_helpers.check_strided_inputs(r6)


def test_state_in_place():
    """h0 and ht the same array (how ``step`` uses a rung; chunk_size None there): read before overwritten."""
    chunk_helpers.check_state_in_place(r6, None)


@pytest.mark.parametrize("with_h0", [True, False], ids=["h0", "no_h0"])
def test_empty_sequence(with_h0):
    """T = 0: no chunk; ht is h0 (or zeros)."""
    chunk_helpers.check_empty_sequence(r6, with_h0)


@pytest.mark.parametrize("recurrence,decay", [("gated_delta", "strong"), ("delta", "none")])
def test_long_sequence_stays_finite(recurrence, decay):
    """128 tokens in 8 chunks; strong decay (g = -20 on some tokens) or none with beta = 1. Finite, and within
    float32's tolerance of the oracle: the 3xTF32 products do not accumulate TF32's error along the chunks."""
    chunk_helpers.check_long_sequence(r6, recurrence, decay)


def test_catches_a_wrong_answer():
    """The comparison can fail: a delta rule run without beta (a plausible bug) is far off."""
    chunk_helpers.check_catches_a_wrong_answer(r6)


def test_rejects_bad_arguments():
    inp = make(1, 4, 1, 8, 8, "plain")
    for bad in (0, 8, 48, 128, 256):
        with pytest.raises(ValueError, match="chunk_size"):
            run(inp, bad)
    with pytest.raises(ValueError, match="state only"):
        run(inp, 16, with_o=False, with_ht=False)
    with pytest.raises(ValueError, match="multiple of 8"):
        run(inp, 16, bv=12)
    with pytest.raises(ValueError, match="precision"):
        run(inp, 16, precision="fp16")
    big = make(1, 1, 1, r6.MAX_K + 1, 4, "plain")
    with pytest.raises(ValueError, match="K"):
        run(big, 16)


def test_layout_and_threads():
    """At the H200 default (C = 64, K = 128, BV = 64): 512 threads, 4 tiles of S per warp, and the state
    kernel's shared memory within the 227 KB a block may opt in to; S and V_new rows padded by 8 floats (B
    fragments conflict-free), row blocks by 4 (A fragments conflict-free)."""
    KS, VS, *_, total = r6._state_layout(64, 128, 64)
    assert (KS % 32, VS % 32) == (4, 8)
    assert total * 4 <= 227 * 1024
    assert r6._threads(128, 64) == 512 and r6._threads(16, 8) == 32


def test_module_contract():
    assert r6.NAME == "tensor_cores"
    assert r6.MAX_K == 128 and r6.MAX_V is None
    assert r6.CHUNK_SIZES == r3.CHUNK_SIZES and r6.DEFAULT_CHUNK in r6.CHUNK_SIZES
    labels = [label for label, _, _ in r6.compile_targets()]
    # per recurrence: float32 x (4 with o, 2 without), float16 x 2 (h0 and ht, with and without o), TF32 x 1;
    # a tensor-core intra kernel each; the two additive recurrences: the split schedule's state and output kernels
    # and the pipelined output kernel (3xTF32, TF32, 3xTF32 with the deferred start state); the gates kernel for
    # float32 and float16 gates
    assert len(labels) == len(set(labels)) == 4 * (6 + 2 + 1 + 1) + 2 * (2 + 3) + 2
    assert all(label.startswith(("state[", "intra_tc[", "out_tc[", "out_pipe[", "gates[")) for label in labels)
    # the measured defaults (module docstring): split for the additive family, the tensor-core intra kernel
    assert r6.INTRAS == ("r3", "tensor_cores") and r6.INTRA == "tensor_cores" and r6.INTRA_DELTA == "r3"
    assert r6.SCHEDULES == ("fused", "split") and r6.SCHEDULE == "split"
    assert r6.DELTA_SCHEDULE == "split"  # the delta family's split (r3's walk), measured faster (docstring)


_COMPILE_SCRIPT = """
from numba import cuda
from linattn_numba.compile_check import assemble
from linattn_numba.rungs import r6_tensor_cores as r6
bad, n = [], 0
for label, fn, argtypes in r6.compile_targets():
    if "gated_delta,float32" not in label or not ("h0=1,ht=1" in label or "tf32" in label):
        continue
    n += 1
    try:
        ptx, _ = cuda.compile_ptx(fn, argtypes, cc=(9, 0), launch_bounds=(512, 1))
        for needle in ("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32", "ld.shared"):
            if needle not in ptx:
                raise RuntimeError(f"no {needle} in the PTX")
        if "tf32]" not in label and "-8192" not in ptx:  # split_tf32's mask 0xFFFFE000
            raise RuntimeError("3xTF32 without the TF32 split (and.b32 with 0xFFFFE000)")
        print(label, assemble(ptx))
    except Exception as e:
        bad.append(f"{label}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
print(f"compiled {n - len(bad)}/{n}")
for b in bad:
    print("FAILED:", b)
"""


@pytest.mark.compile
def test_state_kernels_compile_for_sm90():
    """The gated delta rule's state kernels (3xTF32 with and without output, TF32) compiled for cc 9.0 with the
    simulator off and the launch bounds of a 512-thread block, and assembled by ptxas (nvJitLink): mma.sync
    present, and the 3xTF32 split's mask. (tests/test_compile.py compiles every variant.)"""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    r = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT], env=env, capture_output=True, text=True, timeout=900)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "compiled 3/3" in out and "FAILED" not in out, out[-4000:]


# (T, chunk, K, V): one chunk, a short last chunk, C = 64 with K != V and V past one value pass (VB = 64)
TC_INTRA = [(1, 16, 16, 8), (37, 16, 20, 12), (45, 32, 8, 20), (70, 64, 24, 68)]


@pytest.mark.parametrize("recurrence", ["plain", "decay"])
@pytest.mark.parametrize("T,chunk,K,V", TC_INTRA, ids=lambda x: str(x))
def test_tensor_core_intra_matches_recurrent(recurrence, T, chunk, K, V):
    """intra="tensor_cores" (fused schedule): the additive intra kernel on the tensor cores (scores tiles above
    the diagonal skipped, P V's steps stopped at it, V in passes of 64 columns) against the float64 recurrence; it
    is the one that runs (intra_tc_fits), and its outputs are r3-intra's within float32 error."""
    inp = make(1, T, 1, K, V, recurrence, seed=T + K + V)
    assert r6.intra_tc_fits(K, V, chunk, False, True, True)
    check(inp, chunk, intra="tensor_cores", schedule="fused")
    o_tc, h_tc = run(inp, chunk, intra="tensor_cores", schedule="fused")
    o_r3, h_r3 = run(inp, chunk, intra="r3", schedule="fused")
    assert rel_err(o_tc, o_r3) <= TOL_FP32 and rel_err(h_tc, h_r3) <= TOL_FP32


# (T, chunk, K, V): as TC_INTRA, and C = 64 with two 16-row block rows of the inverse below the first
TC_DELTA = [(1, 16, 16, 8), (37, 16, 20, 12), (45, 32, 8, 20), (70, 64, 24, 68)]


@pytest.mark.parametrize("recurrence", ["delta", "gated_delta"])
@pytest.mark.parametrize("T,chunk,K,V", TC_DELTA, ids=lambda x: str(x))
def test_tensor_core_delta_intra_matches_recurrent(recurrence, T, chunk, K, V):
    """intra="tensor_cores" for the delta family: scores, W, Q', U and U'' as 3xTF32 tiles around r3's block
    inverse, against the float64 recurrence; it is the one that runs, and its scratch outputs give r3-intra's
    results within float32 error."""
    inp = make(1, T, 1, K, V, recurrence, seed=T + K + V + 2)
    assert r6.intra_delta_tc_fits(K, V, chunk, True, True, True)
    check(inp, chunk, intra="tensor_cores")
    o_tc, h_tc = run(inp, chunk, intra="tensor_cores")
    o_r3, h_r3 = run(inp, chunk, intra="r3")
    assert rel_err(o_tc, o_r3) <= TOL_FP32 and rel_err(h_tc, h_r3) <= TOL_FP32


def test_tensor_core_intra_falls_back_and_checks_its_name():
    """State-only runs and float16 inputs keep r3's intra kernel (still correct with the option set); an unknown
    intra name is refused."""
    assert not r6.intra_tc_fits(16, 8, 16, True, True, True)  # delta: its own kernel
    assert r6.intra_delta_tc_fits(16, 8, 16, True, True, True)
    assert not r6.intra_tc_fits(16, 8, 16, False, False, True)  # state only
    assert not r6.intra_delta_tc_fits(16, 8, 16, True, False, True)
    assert not r6.intra_tc_fits(16, 8, 16, False, True, False)  # float16 / unaligned
    assert not r6.intra_delta_tc_fits(16, 8, 16, True, True, False)
    check(make(1, 20, 1, 16, 8, "gated_delta", seed=21, dtype=np.float16), 16, intra="tensor_cores", tol=TOL_FP32)
    check(make(1, 20, 1, 16, 8, "decay", seed=22, dtype=np.float16), 16, intra="tensor_cores", schedule="fused",
          tol=TOL_FP32)
    with pytest.raises(ValueError, match="intra must be one of"):
        run(make(1, 4, 1, 8, 8, "plain", seed=23), 16, intra="wmma")


# (T, chunk, K, V, h0, ht): one chunk without a final state, a short last chunk, C = 64 with V past one value pass
SPLIT = [(1, 16, 16, 8, True, False), (37, 16, 20, 12, True, True), (70, 64, 24, 68, False, True)]


def _kernel_names(inp, chunk, **kw):
    B, T, H, K = inp["q"].shape
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    o = cuda.device_array((B, T, H, inp["v"].shape[3]), np.float32)
    return [name for name, _ in r6.launches(d["q"], d["k"], d["v"], d["g"], d["beta"], o, None, None, 0.5, chunk,
                                            **kw)]


@pytest.mark.parametrize("recurrence", ["plain", "decay"])
@pytest.mark.parametrize("T,chunk,K,V,with_h0,with_ht", SPLIT, ids=lambda x: str(x))
def test_split_schedule_matches_recurrent(recurrence, T, chunk, K, V, with_h0, with_ht):
    """The split schedule (the default for the additive family): per-chunk states stored by the state kernel,
    the output of every chunk from them (``Q S_c`` and ``P V`` in one accumulator, the gate per row between),
    against the float64 recurrence; it is the one that runs, and agrees with the fused schedule."""
    inp = make(1, T, 1, K, V, recurrence, seed=T + K + V + 1)
    names = _kernel_names(inp, chunk)
    assert names == (["gates"] if recurrence == "decay" else []) + ["state", "out"]
    check(inp, chunk, with_h0, with_ht)
    o_s, h_s = run(inp, chunk, with_h0, with_ht, schedule="split")
    o_f, h_f = run(inp, chunk, with_h0, with_ht, schedule="fused")
    assert rel_err(o_s, o_f) <= TOL_FP32
    if with_ht:
        assert rel_err(h_s, h_f) <= TOL_FP32


def test_split_schedule_falls_back(monkeypatch):
    """Where the split schedule cannot run the fused one does, still correct: the delta family at C = 16 (its
    split needs the pipelined output kernel, C >= 32), state-only calls, float16 inputs, and a state buffer over
    SPLIT_MAX_BYTES; an unknown schedule is refused."""
    dec = make(1, 20, 1, 16, 8, "decay", seed=31)
    assert r6.split_bytes(1, 20, 1, 16, 8, 16) == 2 * 16 * 8 * 4
    assert _kernel_names(make(1, 20, 1, 16, 8, "gated_delta", seed=32), 16) == ["intra", "state"]
    assert _kernel_names(make(1, 20, 1, 16, 8, "decay", seed=33, dtype=np.float16), 16) == ["intra", "state"]
    monkeypatch.setattr(r6, "SPLIT_MAX_BYTES", r6.split_bytes(1, 20, 1, 16, 8, 16) - 1)
    assert _kernel_names(dec, 16) == ["intra", "state"]
    check(dec, 16)
    monkeypatch.undo()
    assert _kernel_names(dec, 16) == ["gates", "state", "out"]
    _, ht = run(dec, 16, with_o=False)  # state only: the fused schedule's state pass
    assert rel_err(ht, oracle(dec)[1]) <= TOL_FP32
    with pytest.raises(ValueError, match="schedule must be one of"):
        run(make(1, 4, 1, 8, 8, "plain", seed=34), 16, schedule="interleaved")


@pytest.mark.parametrize("recurrence,T,chunk,K,V,with_h0", [("gated_delta", 70, 32, 24, 20, True),
                                                             ("delta", 45, 32, 16, 12, False)], ids=str)
def test_split_delta(recurrence, T, chunk, K, V, with_h0):
    """The delta family under ``schedule="split"`` (its default, ``DELTA_SCHEDULE``): r3's split (the intra kernel
    in state-only mode, r3's walk storing S_c and V_new) with this rung's pipelined tensor-core output kernel on V_new,
    a short last chunk, K != V; against the float64 recurrence and the fused schedule. At C = 16 (no pipelined
    kernel) the fused schedule runs."""
    inp = make(1, T, 1, K, V, recurrence, seed=T + K + V + 3)
    assert r6.DELTA_SCHEDULE == "split" and _kernel_names(inp, chunk) == ["intra", "state", "out"]
    assert _kernel_names(inp, chunk, schedule="fused") == ["intra", "state"]
    with kernels_made(r6, "_out_pipe_kernel") as outs, kernels_made(r3, "_split_delta_kernel") as walks:
        check(inp, chunk, with_h0, True, schedule="split")
    assert len(outs) == 1 and len(walks) == 1
    o_s, h_s = run(inp, chunk, with_h0, True, schedule="split")
    o_f, h_f = run(inp, chunk, with_h0, True, schedule="fused")
    assert rel_err(o_s, o_f) <= TOL_FP32 and rel_err(h_s, h_f) <= TOL_FP32
    assert _kernel_names(inp, 16, schedule="split") == ["intra", "state"]


# (state walk, T, chunk, K, V, recurrences, also the staged kernel): C = 32 with K' = 16 (slabs of 16 rows: two mma
# steps a slab) and two value passes (CBW = 64 < V), a short last chunk; C = 32 with K' = 32 (slabs of 32 rows) and
# K != V after r6's state walk; C = 64 with a short last chunk (8 warps: the row-block pairs (0, 3) and (1, 2)),
# decay alone (256 simulated threads a block: the other cases cover plain)
PIPE = [("shared", 45, 32, 8, 68, ("plain", "decay"), True),
        ("tensor_cores", 64, 32, 20, 12, ("plain", "decay"), True),
        ("shared", 70, 64, 24, 20, ("decay",), False)]


@pytest.mark.parametrize("state,T,chunk,K,V,recs,staged", PIPE, ids=lambda x: str(x))
def test_pipelined_output_kernel(state, T, chunk, K, V, recs, staged, monkeypatch):
    """The split schedule's pipelined output kernel (``_out_pipe_kernel``: r3's copies, slabs and barriers, the
    products Q S_c and Aqk V as 3xTF32 mma tiles) after either state kernel (r3's or r6's), against the float64
    recurrence and against the staged output kernel; it is the kernel that runs (3xTF32, no deferred state), and
    the staged one where asked for."""
    monkeypatch.setattr(r6, "SPLIT_STATE", state)
    for rec in recs:
        inp = make(1, T, 1, K, V, rec, seed=T + K + V + 7)
        assert r6.out_pipe_fits(K, V, chunk, False, True, True)
        with kernels_made(r6, "_out_pipe_kernel") as made:
            o_p, h_p = run(inp, chunk, schedule="split")
        assert [args for args, _, _ in made] == [(chunk, r3.padded_k(K), rec == "decay", False, True)]
        o_ref, h_ref = oracle(inp)
        assert rel_err(o_p, o_ref) <= TOL_FP32 and rel_err(h_p, h_ref) <= TOL_FP32
        if staged:
            monkeypatch.setattr(r6, "SPLIT_OUT", "staged")
            with kernels_made(r6, "_out_pipe_kernel") as made:
                o_s, _ = run(inp, chunk, schedule="split")
            monkeypatch.setattr(r6, "SPLIT_OUT", "pipelined")
            assert made == [] and rel_err(o_p, o_s) <= TOL_FP32


def test_overlap_with_tensor_core_output(monkeypatch):
    """r6's output kernel in r3's overlapped launch (``r6.OVERLAP`` on; off by default, measured slower): the walk
    and the 3xTF32 output as blocks of one grid at C = 32, K' = 32, two value tiles of 32 (64 threads both), a short
    last chunk; against the oracle and bit for bit the two launches. Off, ``parts`` offers nothing."""
    inp = make(1, 70, 2, 24, 64, "decay", seed=71)
    monkeypatch.setattr(r3, "SPLIT_BV", 32)
    assert r6.out_pipe_factory().parts(32, 32) is None
    o_two, h_two = run(inp, 32, schedule="split")
    monkeypatch.setattr(r6, "OVERLAP", True)
    with kernels_made(r3, "_overlap_kernel") as made:
        o_one, h_one = run(inp, 32, schedule="split")
    assert len(made) == 1 and made[0][0][8] == r6.OUT_PAD
    o_ref, h_ref = oracle(inp)
    assert rel_err(o_one, o_ref) <= TOL_FP32 and rel_err(h_one, h_ref) <= TOL_FP32
    assert np.array_equal(o_one, o_two) and np.array_equal(h_one, h_two)


def test_pipelined_output_kernel_tf32_and_checks():
    """precision="tf32" reaches the pipelined kernel too (one TF32 product: TF32's ~1e-3, not float32's error);
    C = 16 (one row block: no pairs for the warps) keeps the staged kernel; unknown SPLIT_STATE / SPLIT_OUT values
    are refused; the layout keeps two blocks per SM with B fragments conflict-free (rows 8 banks apart)."""
    inp = make(1, 40, 1, 8, 12, "decay", seed=41)
    o_ref, _ = oracle(inp)
    with kernels_made(r6, "_out_pipe_kernel") as made:
        o1, _ = run(inp, 32, schedule="split", precision="tf32")
    assert [args[4] for args, _, _ in made] == [False]  # three = False
    assert 20 * TOL_FP32 < rel_err(o1, o_ref) < 1e-2
    assert not r6.out_pipe_fits(8, 12, 16, False, True, True)
    with kernels_made(r6, "_out_pipe_kernel") as made:
        check(inp, 16, schedule="split")
    assert made == []
    for name in ("SPLIT_STATE", "SPLIT_OUT"):
        old = getattr(r6, name)
        setattr(r6, name, "warp_specialised")
        try:
            with pytest.raises(ValueError, match=name):
                run(inp, 32, schedule="split")
        finally:
            setattr(r6, name, old)
    SW, *_, total = r6._out_pipe_layout(64, 128)
    assert SW % 32 == 8 and 2 * (total * 4 + 1024) <= 228 * 1024
    with pytest.raises(ValueError, match="precision"):
        r6.out_pipe_factory("fp16")
