"""Rung r3 ``shared``, called directly: its ``forward`` under the simulator against the float64 recurrence, the
state-only mode (``o=None``) that r4 builds on, and a compile check of its largest kernels.

Simulator cost grows with the number of simulated threads and barriers, so the cases are tiny and the (K, V)
shapes and h0 / ht combinations are spread over the (recurrence, T, chunk) cases instead of multiplied with them.
"""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # before anything imports numba (the package does)

import functools
import subprocess
import sys

import numpy as np
import pytest
from numba import cuda, float32

from linattn_numba._common import kernels_made
from linattn_numba.rungs import r3_shared as r3
from linattn_numba.testing import TOL_FP32, rel_err

import chunk_helpers  # tests/chunk_helpers.py

T_CHUNK = [(1, 16), (37, 16), (64, 32), (45, 32)]
KV = [(16, 8), (8, 20)]  # K > V and K < V
H0_HT = [(True, True), (False, False), (True, False), (False, True)]
BH = [(1, 2), (2, 1)]


REC_FLAGS, make, oracle = chunk_helpers.REC_FLAGS, chunk_helpers.make, chunk_helpers.oracle
run = functools.partial(chunk_helpers.run, r3)  # (inp, chunk, with_h0, with_ht, with_o, scale, **forward kw)
check = functools.partial(chunk_helpers.check, r3)


CASES = chunk_helpers.spread_cases(T_CHUNK, KV, H0_HT, BH)


@pytest.mark.parametrize("recurrence,shape,chunk,with_h0,with_ht", CASES)
def test_matches_recurrent(recurrence, shape, chunk, with_h0, with_ht):
    check(make(*shape, recurrence, seed=sum(shape) + chunk), chunk, with_h0, with_ht)


@pytest.mark.parametrize("recurrence", ["decay", "gated_delta"])
def test_several_value_tiles(recurrence):
    """V = 20 in value tiles of 8: three state-kernel blocks per head, the last one partly outside V; the intra
    kernel's 16-wide column passes (K = 12 pads to 16) also end past V."""
    check(make(1, 40, 2, 12, 20, recurrence, seed=11), 16, bv=8)


@pytest.mark.parametrize("recurrence", ["decay", "delta"])
def test_rows_not_multiples_of_4(recurrence):
    """K = 10, V = 6: float32 rows that 128-bit loads cannot read (the 32-bit staging path, partial stores)."""
    check(make(2, 21, 1, 10, 6, recurrence, seed=14), 16)


@pytest.mark.parametrize("recurrence", ["plain", "gated_delta"])
def test_chunk_64(recurrence):
    """C = 64 (the H200 default; T = 70 leaves a short last chunk), K = 24 pads to 32 columns."""
    check(make(1, 70, 1, 24, 12, recurrence, seed=12), 64)


@pytest.mark.parametrize("recurrence,K,V,with_h0", [("plain", 32, 12, False), ("decay", 64, 10, True)])
def test_split_p1(recurrence, K, V, with_h0):
    """K' > C: the additive state kernel splits P1 = Q S over K' (2 parts at K' = 32, 4 at K' = 64, C = 16), and all
    threads sum the parts into o; V = 10 is not a multiple of 4 (the 32-bit epilogue), T = 37 ends in a short chunk."""
    assert r3._p1_split(16, r3.padded_k(K), False, True) == K // 16
    check(make(1, 37, 1, K, V, recurrence, seed=K + V), 16, with_h0, True)


def _kernel_names(inp, chunk, **kw):
    """The kernels ``launches`` would run on these inputs (with an output)."""
    B, T, H, K = inp["q"].shape
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    o = cuda.device_array((B, T, H, inp["v"].shape[3]), np.float32)
    return [name for name, _ in r3.launches(d["q"], d["k"], d["v"], d["g"], d["beta"], o, None, None, 0.5, chunk,
                                            **kw)]


@pytest.mark.parametrize("recurrence,T,K,V,with_h0,with_ht", [
    ("plain", 70, 24, 12, True, True), ("decay", 70, 24, 12, False, True), ("decay", 1, 16, 8, True, False),
    ("plain", 128, 16, 16, False, False), ("decay", 100, 32, 20, True, True)], ids=str)
def test_split_schedule(recurrence, T, K, V, with_h0, with_ht):
    """The split schedule (the default for the additive family at C = 64): the state kernel stores every chunk's
    starting state to hs, the output kernel computes every chunk's o = scale (diag(gamma) Q S_c + Aqk V) from it.
    T = 1 and T not a multiple of 64, V narrower than the output kernel's value pass (V = 20 in a 32-wide pass at
    K' = 32), several state-kernel blocks per head (V = 20 > BV at bv=8); against the float64 recurrence, and
    equal to the fused schedule within float32 error."""
    inp = make(1, T, 2 if T < 100 else 1, K, V, recurrence, seed=T + K + V)
    assert _kernel_names(inp, 64) == (["gates"] if recurrence == "decay" else []) + ["state", "out"]
    kw = {"bv": 8} if V == 20 else {}
    check(inp, 64, with_h0, with_ht, **kw)
    o_s, h_s = run(inp, 64, with_h0, with_ht, **kw)
    o_f, h_f = run(inp, 64, with_h0, with_ht, schedule="fused", **kw)
    assert rel_err(o_s, o_f) <= TOL_FP32
    if with_ht:
        assert rel_err(h_s, h_f) <= TOL_FP32


@pytest.mark.parametrize("recurrence,B,H,T,C,K,V,bv,rows,with_h0,with_ht", [
    ("gated_delta", 1, 2, 70, 64, 24, 12, None, 4, True, True), ("delta", 1, 1, 45, 16, 16, 24, 8, 8, False, True),
    ("gated_delta", 2, 1, 1, 32, 32, 32, None, 4, False, False), ("delta", 1, 1, 100, 32, 20, 8, None, 8, True, False),
    ("gated_delta", 1, 1, 77, 16, 40, 16, 8, 4, True, True)], ids=str)
def test_split_delta(monkeypatch, recurrence, B, H, T, C, K, V, bv, rows, with_h0, with_ht):
    """The delta family's split schedule (``schedule="split"``, its default, ``DELTA_SCHEDULE``): the intra kernel
    in state-only mode (W, U), the walk (``_split_delta_kernel``: S_c to hs, V_new = U - W S_c to vnew), the additive
    output kernel on V_new. T = 1, T not a multiple of C (a short last chunk; an odd number of chunks, so both buffers
    of the walk hold a last chunk in some case), K != V, K' > K (W's zero columns), several value tiles of a head
    (bv = 8 at V = 16 and 24), both tilings of the state (rows: 8 x 4 through SPLIT_ROWS), with and without h0 / ht;
    against the float64 recurrence and equal to the fused schedule within float32 error."""
    inp = make(B, T, H, K, V, recurrence, seed=T + K + V + C)
    kw = {} if bv is None else {"bv": bv}
    assert r3.DELTA_SCHEDULE == "split" and _kernel_names(inp, C, **kw) == ["intra", "state", "out"]
    assert _kernel_names(inp, C, schedule="fused", **kw) == ["intra", "state"]
    monkeypatch.setattr(r3, "SPLIT_ROWS", rows)
    with kernels_made(r3, "_split_delta_kernel") as made:
        check(inp, C, with_h0, with_ht, schedule="split", **kw)
    assert [args[-1] for args, _, _ in made] == [rows]
    o_s, h_s = run(inp, C, with_h0, with_ht, schedule="split", **kw)
    o_f, h_f = run(inp, C, with_h0, with_ht, schedule="fused", **kw)
    assert rel_err(o_s, o_f) <= TOL_FP32
    if with_ht:
        assert rel_err(h_s, h_f) <= TOL_FP32


def test_split_delta_falls_back():
    """Where the delta family's split walk cannot run, ``schedule="split"`` gives the fused schedule: a value tile
    whose buffers exceed SPLIT_DELTA_SMEM (bv = 128 at C = 64, K' = 128: 270 KB), float16 inputs; the walk's layout
    at the standard shape's tile is what its docstring says (205,056 bytes: one block per SM)."""
    assert r3._split_delta_layout(64, 128, 64)[-1] * 4 == 205056 <= r3.SPLIT_DELTA_SMEM
    assert r3._split_delta_layout(64, 128, 128)[-1] * 4 > r3.SPLIT_DELTA_SMEM
    gd = make(1, 20, 1, 128, 128, "gated_delta", seed=41)
    assert _kernel_names(gd, 64, schedule="split") == ["intra", "state", "out"]
    assert _kernel_names(gd, 64, schedule="split", bv=128) == ["intra", "state"]
    assert _kernel_names(make(1, 20, 1, 16, 8, "delta", seed=42, dtype=np.float16), 64, schedule="split") == [
        "intra", "state"]


@pytest.mark.parametrize("recurrence,T,C,K,V,bv,rows", [
    ("decay", 150, 64, 40, 16, None, 8), ("plain", 45, 16, 16, 24, 8, 8), ("decay", 77, 32, 24, 12, None, 4)],
    ids=str)
def test_split_state_rows(monkeypatch, recurrence, T, C, K, V, bv, rows):
    """The split state kernel with 8 x 4 tiles of the state per thread (``SPLIT_ROWS`` = 8): the same output and
    final state as the 4 x 4 tiles, against the oracle; K' = 64 and 16 (8 and 2 row groups), several value tiles
    of a head (V = 24 at bv = 8), a short last chunk. Where the value tile is not a multiple of 8 (V = 12) the
    kernel falls back to 4 x 4 (K's copy map needs an even number of column quads). Other values are refused."""
    inp = make(1, T, 2, K, V, recurrence, seed=T + K + V)
    kw = {} if bv is None else {"bv": bv}
    monkeypatch.setattr(r3, "SPLIT_ROWS", 4)
    o4, h4 = run(inp, C, True, True, **kw)
    monkeypatch.setattr(r3, "SPLIT_ROWS", 8)
    with kernels_made(r3, "_split_state_kernel") as made:
        o8, h8 = run(inp, C, True, True, **kw)
    assert [args[-1] for args, _, _ in made] == [rows]
    check(inp, C, True, True, **kw)
    assert rel_err(o8, o4) <= TOL_FP32 and rel_err(h8, h4) <= TOL_FP32
    monkeypatch.setattr(r3, "SPLIT_ROWS", 6)
    with pytest.raises(ValueError, match="SPLIT_ROWS"):
        run(inp, C, True, True, **kw)


@pytest.mark.parametrize("recurrence,B,H,T,C,K,V,bv,rows,with_h0,with_ht", [
    ("decay", 1, 2, 70, 16, 16, 32, 16, 4, True, True), ("plain", 2, 1, 45, 32, 24, 64, 32, 4, False, True),
    ("decay", 2, 1, 1, 32, 32, 32, 32, 4, False, False), ("decay", 1, 2, 100, 32, 32, 64, 64, 8, True, False)],
    ids=str)
def test_overlap(monkeypatch, recurrence, B, H, T, C, K, V, bv, rows, with_h0, with_ht):
    """The state walk and the output in one launch (``OVERLAP``, ``_overlap_kernel``), taken where the two kernels'
    blocks are the same size: at C = 16 and 32 here (16 and 64 threads; at C = 64 only K' = 128 gives 256), two
    value tiles of a head (V = 32 at bv = 16: walkers counted per chunk), the 8 x 4 tiling, T = 1, T not a
    multiple of C, K != V, B = 2 (ticket -> head and chunk). Against the oracle, and bit for bit the two launches'
    output and final state (the same products in the same order)."""
    inp = make(B, T, H, K, V, recurrence, seed=T + K + V + rows)
    monkeypatch.setattr(r3, "SPLIT_ROWS", rows)
    gates = ["gates"] if recurrence == "decay" else []
    assert _kernel_names(inp, C, bv=bv) == ["overlap"]  # with gates, the gates kernel zeroes the counts: one step
    check(inp, C, with_h0, with_ht, bv=bv)
    o1, h1 = run(inp, C, with_h0, with_ht, bv=bv)
    monkeypatch.setattr(r3, "OVERLAP", False)
    assert _kernel_names(inp, C, bv=bv) == gates + ["state", "out"]
    o2, h2 = run(inp, C, with_h0, with_ht, bv=bv)
    assert np.array_equal(o1, o2) and (not with_ht or np.array_equal(h1, h2))


@pytest.mark.parametrize("recurrence,tri,rows", [("decay", "sbe", 8), ("plain", "sb8e", 4)], ids=str)
def test_out_tri(monkeypatch, recurrence, tri, rows):
    """``OUT_TRI``'s letters (the scores' skip, 8-row bands, the FMAs' order, Aqk V in steps of 8) where they all
    apply: C = 64, K' = 128, in the overlapped launch (8 x 4 tiles: 256-thread walkers) and in the output kernel of
    two launches (4 x 4 tiles: 512-thread walkers); a short last chunk (T = 70), K != V. Against the oracle, and bit
    for bit the output and final state without them (what they skip are products with the zeros above the
    diagonal); a letter it does not know is an error."""
    inp = make(1, 70, 1, 128, 64, recurrence, seed=70 + rows)
    monkeypatch.setattr(r3, "SPLIT_ROWS", rows)
    monkeypatch.setattr(r3, "OUT_TRI", tri)
    gates = ["gates"] if recurrence == "decay" else []
    assert _kernel_names(inp, 64, bv=64) == (["overlap"] if rows == 8 else gates + ["state", "out"])
    check(inp, 64, False, True, bv=64)
    o1, h1 = run(inp, 64, False, True, bv=64)
    monkeypatch.setattr(r3, "OUT_TRI", "")
    o2, h2 = run(inp, 64, False, True, bv=64)
    assert np.array_equal(o1, o2) and np.array_equal(h1, h2)
    monkeypatch.setattr(r3, "OUT_TRI", "sx")
    with pytest.raises(ValueError, match="OUT_TRI takes letters"):
        run(inp, 64, False, True, bv=64)


@pytest.mark.parametrize("recurrence,T,C,K,V,bv,rows", [
    ("plain", 45, 16, 64, 36, None, 4), ("decay", 70, 32, 40, 8, None, 4), ("decay", 70, 64, 128, 64, 64, 8),
    ("plain", 20, 16, 128, 8, None, 4)], ids=str)
def test_out_unroll(monkeypatch, recurrence, T, C, K, V, bv, rows):
    """The output's slabs written out per pass (``OUT_UNROLL``, ``_out_body``'s ``slab_step``) against its loop over
    slabs, for every kind of pass: at C = 16, K' = 64 five slabs a pass (buffers that turn from pass to pass) and two
    passes (V = 36 > 2 C); at C = 32, K' = 64 three (one buffer per slab); at C = 64, K' = 128 six, in the overlapped
    launch (8 x 4 tiles); at C = 16, K' = 128 nine, the most. Against the oracle, and bit for bit the loop's output
    and final state (the same products in the same order). The deferred start state with it:
    ``test_split_deferred``."""
    inp = make(1, T, 1, K, V, recurrence, seed=T + C + K)
    monkeypatch.setattr(r3, "SPLIT_ROWS", rows)
    kw = {} if bv is None else {"bv": bv}
    monkeypatch.setattr(r3, "OUT_UNROLL", True)
    check(inp, C, False, True, **kw)
    o1, h1 = run(inp, C, False, True, **kw)
    monkeypatch.setattr(r3, "OUT_UNROLL", False)
    o2, h2 = run(inp, C, False, True, **kw)
    assert np.array_equal(o1, o2) and np.array_equal(h1, h2)


class _ReversedGrid:
    """numpy, except that ``ndindex`` (the simulator's loop over a grid's blocks) runs backwards."""

    def __init__(self, np_module):
        self._np, self.reversed_grids = np_module, 0

    def __getattr__(self, name):
        return getattr(self._np, name)

    def ndindex(self, *shape):
        self.reversed_grids += 1
        return reversed(list(self._np.ndindex(*shape)))


def test_overlap_any_block_order(monkeypatch):
    """Roles come from tickets taken when a block starts, not from block indices: with the simulator's blocks run
    last to first, the first block to run still walks and every output block still finds its chunk's count
    complete (``_backoff`` raises in the simulator if a block ever has to wait). Roles by block index would make
    the first block to run here an output block of the last chunk, waiting for a walk that has not started."""
    from numba.cuda.simulator import kernel as simkernel

    inp = make(2, 70, 1, 16, 32, "decay", seed=77)
    o_fwd, h_fwd = run(inp, 16, True, True, bv=16)
    grid = _ReversedGrid(simkernel.np)
    monkeypatch.setattr(simkernel, "np", grid)
    o_rev, h_rev = run(inp, 16, True, True, bv=16)
    assert grid.reversed_grids >= 2  # the gates kernel (which zeroes the counts) and the overlapped one ran backwards
    assert np.array_equal(o_rev, o_fwd) and np.array_equal(h_rev, h_fwd)


@pytest.mark.parametrize("u32", [1, 0], ids=str)
def test_overlap_ticket_divisions(monkeypatch, u32):
    """An output block's chunk and head from its ticket in unsigned 32-bit or in int64 divisions (``TICKET_U32``):
    B = 2, H = 2 (ticket -> chunk, b, h), T = 70 at C = 16 (a short last chunk), two value tiles; against the oracle
    and bit for bit the two launches."""
    inp = make(2, 70, 2, 16, 32, "decay", seed=78)
    monkeypatch.setattr(r3, "TICKET_U32", u32)
    assert _kernel_names(inp, 16, bv=16) == ["overlap"]
    o1, h1 = run(inp, 16, True, True, bv=16)
    o_ref, h_ref = oracle(inp)
    assert rel_err(o1, o_ref) <= TOL_FP32 and rel_err(h1, h_ref) <= TOL_FP32
    monkeypatch.setattr(r3, "OVERLAP", False)
    o2, h2 = run(inp, 16, True, True, bv=16)
    assert np.array_equal(o1, o2) and np.array_equal(h1, h2)


def test_signal_and_exp_twins():
    """The simulator's twins of the overlapped launch's signalling and of r3's exponential: ``red_release_add`` loses
    no increment among a block's threads (Python threads: a lock, where ``a[i] += x`` alone could), ``ld_acquire``
    reads what the block's barrier published, ``exp_approx`` is ``exp``. The GPU forms: ``test_compile``'s
    ``test_release_acquire_and_exp_approx_compile``, ``test_gpu``'s ``test_exp_approx_accuracy``."""
    from numba import config

    if not config.ENABLE_CUDASIM:
        pytest.skip("the simulator's twins (on a GPU blocks run at once)")
    from linattn_numba.vec import exp_approx, ld_acquire, red_release_add

    @cuda.jit
    def k(flags, seen, y):
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        red_release_add(flags, 1, 2)
        cuda.syncthreads()
        seen[i] = ld_acquire(flags, 1)
        y[i] = exp_approx(float32(-0.125) * i)

    flags = np.zeros(2, np.int32)
    seen = np.zeros(64, np.int32)
    y = np.zeros(64, np.float32)
    k[2, 32](flags, seen, y)
    assert flags.tolist() == [0, 128]
    assert sorted(set(seen[:32].tolist()) | set(seen[32:].tolist())) == [64, 128]  # blocks run one after another
    assert np.allclose(y, np.exp(-0.125 * np.arange(64)), rtol=1e-6)


def test_offset_load_store_twins():
    """The simulator's twins of ``st4_at`` / ``ld1_at`` (the state walk's stores of S_c and loads of the gates, from
    element offsets that it steps): the offset counts elements from the array's first one in memory, in a strided
    view too (a [B, T, H, n] array's head slice: what the kernels index), and a kernel reaches them by those names.
    The GPU forms: ``test_compile``'s ``test_offset_load_store_compile``; the walk's results against the oracle:
    the split and overlap tests."""
    from linattn_numba import vec

    full = np.zeros((2, 5, 3, 8), np.float32)
    view = full[:, :, 1, :]  # strides (120, 24, 1) elements: not contiguous
    for i in range(3):  # element (1, 2 + i, 4) of the view
        vec._st4_at_py(view, 1 * 120 + (2 + i) * 24 + 4, (i, i + 0.5, -1.0, 2.0))
    want = np.zeros_like(full)
    for i in range(3):
        want[1, 2 + i, 1, 4:8] = (i, i + 0.5, -1.0, 2.0)
    assert np.array_equal(full, want)
    assert vec._ld1_at_py(view, 1 * 120 + 3 * 24 + 5) == 1.5

    @cuda.jit
    def k(x, y, z, base, step):
        i = cuda.grid(1)
        if i < 3:
            vec.st4_at(y, base + i * step, (vec.ld1_at(x, 2 * i), vec.ld1_at(x, 2 * i + 1), float32(i),
                                            float32(-1.0)))
            vec.st1(z, 2 - i, vec.ld1(x, 2 * i) + float32(1.0))  # the output scores' scalar trade

    y = np.zeros((2, 5, 8), np.float32)
    z = np.zeros(4, np.float32)
    x = np.arange(6, dtype=np.float32) + 0.5
    k[1, 32](x, y, z, 1 * 40 + 1 * 8 + 4, 8)  # element (1, 1, 4), then a row further each
    want = np.zeros_like(y)
    for i in range(3):
        want[1, 1 + i, 4:8] = (x[2 * i], x[2 * i + 1], i, -1.0)
    assert np.array_equal(y, want)
    assert z.tolist() == [5.5, 3.5, 1.5, 0.0]


def test_overlap_needs_equal_blocks():
    """Blocks of one grid have one size: the overlapped kernel refuses a walk whose blocks differ from the output's
    (and ``launches`` then keeps two launches: K = 24, V = 12 at C = 64, test_split_schedule)."""
    with pytest.raises(ValueError, match="threads per block"):
        r3._overlap_kernel(64, 128, 64, 4, True, False, False, r3._out_fma_products(64, 128), 0,
                           r3._out_layout(64, 128)[-1])


def test_split_tile(monkeypatch):
    """``split_tile``: 64 value columns in 8 x 4 tiles where that leaves SPLIT_WIDE_BLOCKS blocks (B4 H16 V128: 128;
    r4's phase 1 at B1 T1M H2: 128 segments x 2 heads x 2), else 32 in 4 x 4 (B1 H2: each walker's speed counts);
    an explicit value tile or SPLIT_BV / SPLIT_ROWS win, the tile is capped by V, 8 x 4 needs a multiple of 8.
    With the rule's threshold lowered the forward takes the 8 x 4 path by itself, against the oracle."""
    assert r3.SPLIT_BV is None and r3.SPLIT_ROWS is None
    assert r3.split_tile(64, 128, 64, 128) == (64, 8)
    assert r3.split_tile(64, 128, 256, 128) == (64, 8)
    assert r3.split_tile(64, 128, 2, 128) == (32, 4)
    assert r3.split_tile(64, 128, 32, 128) == (32, 4)  # B1 H16: 32 blocks of 64 columns
    assert r3.split_tile(64, 128, 64, 128, bv=32) == (32, 8)  # the tiling still by the walkers
    assert r3.split_tile(16, 16, 2, 24, bv=8) == (8, 4)
    assert r3.split_tile(64, 64, 200, 12) == (12, 4)  # V = 12: not a multiple of 8
    monkeypatch.setattr(r3, "SPLIT_ROWS", 8)
    assert r3.split_tile(64, 128, 2, 128) == (32, 8)
    monkeypatch.setattr(r3, "SPLIT_ROWS", None)
    monkeypatch.setattr(r3, "SPLIT_BV", 32)
    assert r3.split_tile(64, 128, 64, 128) == (32, 8)
    assert r3.split_tile(64, 128, 2, 128) == (32, 4)
    monkeypatch.setattr(r3, "SPLIT_BV", None)
    monkeypatch.setattr(r3, "SPLIT_WIDE_BLOCKS", 1)
    inp = make(1, 70, 2, 24, 16, "decay", seed=5)
    with kernels_made(r3, "_split_state_kernel") as made:
        check(inp, 64, True, True)
    assert [(args[2], args[-1]) for args, _, _ in made] == [(16, 8)]


@pytest.mark.parametrize("recurrence,T,C,K,V,with_h0", [
    ("decay", 150, 64, 64, 12, True), ("plain", 45, 16, 64, 36, False), ("decay", 77, 32, 40, 8, True)], ids=str)
def test_split_pipelines(monkeypatch, recurrence, T, C, K, V, with_h0):
    """The split schedule's pipelined kernels at their edges: the output kernel's slabs (K' / SR of S_c and C / SR of
    values per pass of 2 C columns: two passes at V = 36 > 2 C = 32; at C = 64, K' = 64 four slabs, so a buffer
    is reused; rows past T zero-filled in a short last chunk), the state kernel's two chunk buffers (an odd number of
    chunks) and its gates loaded a chunk ahead; the general state kernel (``STATE_KERNEL``) gives the same states."""
    inp = make(1, T, 2, K, V, recurrence, seed=T + C)
    assert _kernel_names(inp, C) == (["gates"] if recurrence == "decay" else []) + ["state", "out"]
    check(inp, C, with_h0, True)
    o_p, h_p = run(inp, C, with_h0, True)
    monkeypatch.setattr(r3, "STATE_KERNEL", "general")
    o_g, h_g = run(inp, C, with_h0, True)
    assert rel_err(o_p, o_g) <= TOL_FP32 and rel_err(h_p, h_g) <= TOL_FP32
    monkeypatch.setattr(r3, "STATE_KERNEL", "registers")
    with pytest.raises(ValueError, match="STATE_KERNEL must be one of"):
        run(inp, C, with_h0, True)


@pytest.mark.parametrize("recurrence,B,T,C,K,V", [
    ("decay", 2, 150, 64, 64, 12), ("plain", 1, 45, 16, 40, 36), ("decay", 1, 1, 16, 8, 8)], ids=str)
def test_split_deferred(recurrence, B, T, C, K, V):
    """The split schedule with the start state deferred (r4's phases): the state kernel walks from zero, writes
    every chunk's state, the log decays lg and the final state; a start state x given only after that gives, through
    the output kernel (S_c = hs_c + exp(lg_c) x), the output of ``forward`` with h0 = x, and ht is the zero-start
    walk's. x's rows past K (K = 40 in K' = 64) and value columns past V (two passes of 32 at V = 36) are skipped;
    at C = 16 four slabs of S_c a pass land in the loop (the correction at each landing), at C = 64 two, and a
    short last chunk (T = 150); B = 2 (x per sequence); T = 1. The output kernel is r3's pipelined one
    (``_out_kernel``, with the deferred state)."""
    inp = make(B, T, 1, K, V, recurrence, seed=T + K)
    H = 1
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    o = cuda.to_device(np.full((B, T, H, V), np.nan, np.float32))
    ht = cuda.to_device(np.full((B, H, K, V), np.nan, np.float32))
    x = cuda.to_device(np.full((B, H, K, V), np.nan, np.float32))
    assert r3.split_deferred_fits(d["q"], d["k"], d["v"], d["g"], None, o, C)
    with kernels_made(r3, "_out_kernel") as made:
        first, second = r3.split_deferred(d["q"], d["k"], d["v"], d["g"], o, ht, x, K**-0.5, C, tag=".test")
    assert [args for args, _, _ in made] == [(C, r3.padded_k(K), recurrence == "decay", True) + r3._out_tri()]
    assert [n for n, _ in first] == (["gates"] if recurrence == "decay" else []) + ["state"]
    assert [n for n, _ in second] == ["out"]
    for _, launch in first:
        launch()
    x.copy_to_device(inp["h0"])  # the start state, known only now
    for _, launch in second:
        launch()
    o_ref, _ = oracle(inp, True)
    _, h_zero = oracle(inp, False)
    assert rel_err(o.copy_to_host(), o_ref) <= TOL_FP32
    assert rel_err(ht.copy_to_host(), h_zero) <= TOL_FP32
    for n, a in inp.items():
        if a is not None:
            np.testing.assert_array_equal(d[n].copy_to_host(), a, err_msg=f"split_deferred modified input {n}")
    bad = cuda.to_device(np.zeros((B, H, K, V + 1), np.float32))
    with pytest.raises(ValueError, match="x must be"):
        r3.split_deferred(d["q"], d["k"], d["v"], d["g"], o, ht, bad, 1.0, C)
    o16 = cuda.to_device(np.zeros((B, T, H, V), np.float16))
    assert not r3.split_deferred_fits(d["q"], d["k"], d["v"], d["g"], None, o16, C)
    with pytest.raises(ValueError, match="cannot run here"):
        r3.split_deferred(d["q"], d["k"], d["v"], d["g"], o16, ht, x, 1.0, C)


def test_copy_by_element_offset():
    """The simulator's twin of ``vec.cp_async16_at`` (the pipelined kernels' copies): the element ``off`` places
    past a view's first element, for r4's segment views ([B, T, H, K] seen as [B n, L, H, K] with explicit
    strides) and a column slice; 16 bytes land as 4 floats, zeros when nothing is read; an offset between elements
    of the view is refused."""
    from linattn_numba import vec

    x = np.arange(2 * 12 * 3 * 8, dtype=np.float32).reshape(2, 12, 3, 8)
    seg = np.lib.stride_tricks.as_strided(x, shape=(6, 4, 3, 8), strides=(4 * x.strides[1],) + x.strides[1:])
    cols = x[:, :, :, 4:]
    for view, idx in ((seg, (5, 2, 1, 4)), (x, (1, 7, 2, 0)), (cols, (1, 3, 2, 0))):
        item = view.dtype.itemsize
        off = sum(i * st // item for i, st in zip(idx, view.strides))
        assert vec._flat_index(view, off) == idx
        sm = np.full(8, np.nan, np.float32)
        vec._cp_async16_at_py(sm, 2, view, off, 16)
        assert sm[2:6].tolist() == view[idx[:-1]][idx[-1]:idx[-1] + 4].tolist()
        vec._cp_async16_at_py(sm, 4, view, off, 0)
        assert sm[4:8].tolist() == [0.0] * 4
    with pytest.raises(IndexError):
        vec._flat_index(cols, 5)  # 5 elements past x[0, 0, 0, 4] is x[0, 0, 1, 1]: outside the column slice


def test_split_schedule_falls_back(monkeypatch):
    """Where the split schedule cannot run the fused one does, still correct: float16 inputs (the delta family's
    own split too; at float32 it runs by default), rows that 128-bit accesses cannot take, C = 16 at K' = 128 (16
    threads cannot copy whole rows of 32 quads: ``split_fits``), a state buffer over SPLIT_MAX_BYTES, state-only
    calls; an unknown schedule is refused."""
    dec = make(1, 20, 1, 16, 8, "decay", seed=31)
    assert r3.split_bytes(1, 20, 1, 16, 8, 64) == 16 * 8 * 4
    assert _kernel_names(dec, 64) == ["gates", "state", "out"]
    gd = make(1, 20, 1, 16, 8, "gated_delta", seed=32)
    assert _kernel_names(gd, 64, schedule="split") == _kernel_names(gd, 64) == ["intra", "state", "out"]  # its own
    assert _kernel_names(make(1, 20, 1, 16, 8, "gated_delta", seed=32, dtype=np.float16), 64) == ["intra", "state"]
    assert _kernel_names(make(1, 20, 1, 16, 8, "decay", seed=33, dtype=np.float16), 64) == ["intra", "state"]
    assert _kernel_names(make(1, 20, 1, 16, 6, "plain", seed=35), 64) == ["intra", "state"]  # V = 6
    assert _kernel_names(dec, 16) == ["gates", "state", "out"]  # C = 16 at K' = 16: it fits
    assert _kernel_names(make(1, 20, 1, 64, 8, "decay", seed=36), 16) == ["gates", "state", "out"]  # K' = 64
    assert _kernel_names(make(1, 20, 1, 128, 8, "decay", seed=36), 16) == ["intra", "state"]  # C = 16 at K' = 128
    monkeypatch.setattr(r3, "SPLIT_MAX_BYTES", r3.split_bytes(1, 20, 1, 16, 8, 64) - 1)
    assert _kernel_names(dec, 64) == ["intra", "state"]
    check(dec, 64)
    monkeypatch.undo()
    _, ht = run(dec, 64, with_o=False)  # state only: the fused schedule's state pass
    assert rel_err(ht, oracle(dec)[1]) <= TOL_FP32
    with pytest.raises(ValueError, match="schedule must be one of"):
        run(make(1, 4, 1, 8, 8, "plain", seed=34), 64, schedule="interleaved")


def test_state_layout():
    """The state kernel's shared memory: a third row block (K) for the delta rule with output, the split P1's parts
    for the additive family with output when K' > C, neither otherwise."""
    assert [r3._p1_split(c, 128, False, True) for c in (16, 32, 64)] == [8, 4, 2]
    assert r3._p1_split(64, 64, False, True) == 1  # K' = C: every thread already has a tile
    assert r3._p1_split(64, 128, True, True) == r3._p1_split(64, 128, False, False) == 1
    C, KP, BV = 64, 128, 64
    KS, VS = KP + 4, BV + 4
    base = r3._state_layout(C, KP, BV)  # - | K (state only)
    o_a, o_s, o_v, o_gm, o_f, o_p, total = base
    assert (o_s, total) == (2 * C * KS, o_p) and o_v == o_s + KP * VS
    assert r3._state_layout(C, KP, BV, True, True)[1] == 3 * C * KS  # W | Q' | K
    add = r3._state_layout(C, KP, BV, False, True)
    assert add[1] == 2 * C * KS and add[-1] - add[-2] == 2 * C * VS  # two parts of [C, VS]
    assert add[-1] * 4 <= 227 * 1024  # one block per SM still fits


@pytest.mark.parametrize("recurrence,with_h0", [("decay", True), ("delta", False), ("gated_delta", True)])
def test_state_only(recurrence, with_h0):
    """o=None: only the final state (what r4's scan asks for); it matches the full run's and the oracle's."""
    inp = make(1, 37, 2, 8, 12, recurrence, seed=13)
    o, ht = run(inp, 16, with_h0=with_h0, with_o=False)
    assert o is None
    _, h_ref = oracle(inp, with_h0)
    assert rel_err(ht, h_ref) <= TOL_FP32, f"final state: rel err {rel_err(ht, h_ref):.2e}"
    _, ht_full = run(inp, 16, with_h0=with_h0)
    np.testing.assert_array_equal(ht, ht_full)  # same kernels, same order of operations


@pytest.mark.parametrize("recurrence", list(REC_FLAGS))
def test_float16_inputs(recurrence):
    """float16 q, k, v are converted on load; the oracle sees the same rounded values, so float32 accuracy holds."""
    check(make(1, 20, 1, 12, 20, recurrence, dtype=np.float16, seed=1), 16)


def test_strided_inputs():
    """q, k, v, g, beta and h0 as non-contiguous device views (layout "A"), B = H = 2."""
    chunk_helpers.check_strided_inputs(r3)


def test_state_in_place():
    """h0 and ht the same array (how ``step`` uses a rung; chunk_size None there): read before overwritten."""
    chunk_helpers.check_state_in_place(r3, None)


@pytest.mark.parametrize("with_h0", [True, False], ids=["h0", "no_h0"])
def test_empty_sequence(with_h0):
    """T = 0: no output elements; ht is h0 (or zeros)."""
    chunk_helpers.check_empty_sequence(r3, with_h0)


@pytest.mark.parametrize("recurrence,decay", [("gated_delta", "strong"), ("delta", "none"), ("decay", "strong")])
def test_long_sequence_stays_finite(recurrence, decay):
    """128 tokens in 8 chunks, unit-norm keys. Strong decay: g = -20 on some tokens (exp(b_t - b_s) of in-chunk
    differences never overflows: no exp(-b_s) anywhere). No decay: beta = 1 on every token, the delta rule's
    hardest case (each write replaces the key's old value). Output finite and close to the oracle."""
    chunk_helpers.check_long_sequence(r3, recurrence, decay)


def test_catches_a_wrong_answer():
    """The comparison can fail: a delta rule run without beta (a plausible bug) is far off."""
    chunk_helpers.check_catches_a_wrong_answer(r3)


def test_rejects_bad_arguments():
    inp = make(1, 4, 1, 8, 8, "plain")
    for bad in (0, 8, 48, 128, 256):
        with pytest.raises(ValueError, match="chunk_size"):
            run(inp, bad)
    with pytest.raises(ValueError, match="state only"):
        run(inp, 16, with_o=False, with_ht=False)
    with pytest.raises(ValueError, match="multiple of 4"):
        run(inp, 16, bv=6)
    big = make(1, 1, 1, r3.MAX_K + 1, 4, "plain")
    with pytest.raises(ValueError, match="K"):
        run(big, 16)


def test_module_contract():
    assert r3.NAME == "shared"
    assert r3.MAX_K == 128 and r3.MAX_V is None
    assert {16, 32}.issubset(r3.CHUNK_SIZES) and r3.DEFAULT_CHUNK in r3.CHUNK_SIZES
    assert all(c in r3.CHUNK_SIZES and bv % 4 == 0 for (c, _), bv in r3.BV_TABLE.items())
    labels = [label for label, _, _ in r3.compile_targets()]
    # per dtype and recurrence: intra with output (+ state only unless plain) and state x (4 with o, 2 without)
    # float32 with and without 128-bit input loads, float16 without; with 128-bit loads the split schedule's state
    # and output kernels of plain and decay (the general state kernel storing S_c; the pipelined one in its two
    # tilings, with h0 and ht and writing lg; the two in one launch, OVERLAP, in both tilings; the output kernel,
    # and the one adding x: split_deferred); its gates kernel for float32 and float16 gates, and the one that also
    # zeroes the overlapped launch's counts; the counts' zeroing without gates; the delta family's split walk in
    # both tilings (delta, gated delta)
    assert len(labels) == len(set(labels)) == 3 * (4 + 3 + 4 * 6) + 2 * 9 + 2 * 2 + 3 + 1
    assert r3.SCHEDULES == ("fused", "split") and r3.SCHEDULE == "split"  # the measured default (docstring)
    assert r3.DELTA_SCHEDULE == "split"  # the delta family's measured default (docstring)


_COMPILE_SCRIPT = """
from numba import cuda
from linattn_numba.rungs import r3_shared as r3
bad, local, n = [], [], 0
for label, fn, argtypes in r3.compile_targets():
    if "gated_delta,float16" not in label:
        continue
    n += 1
    try:
        ptx, _ = cuda.compile_ptx(fn, argtypes, cc=(9, 0))
    except Exception as e:
        bad.append(f"{label}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        continue
    if "ld.local" in ptx or "st.local" in ptx:
        local.append(label)
    if "ld.shared.v4.f32" not in ptx:
        local.append(label + " (no 128-bit shared loads)")
print(f"compiled {n - len(bad)}/{n}")
for b in bad:
    print("FAILED:", b)
for label in local:
    print("LOCAL MEMORY:", label)
"""


@pytest.mark.compile
def test_largest_variants_compile_for_sm90():
    """The gated delta rule's kernels (the largest), float16 inputs, compiled for cc 9.0 with the simulator off:
    no local memory and 128-bit shared loads present. (tests/test_compile.py compiles every variant.)"""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    r = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "compiled 8/8" in out and "FAILED" not in out and "LOCAL MEMORY" not in out, out[-4000:]


def test_scratch_is_per_thread_and_stream():
    """The scratch kept between calls is never shared by two threads or two streams (their launches could
    interleave); one thread and stream reuses its memory for every shape that fits (r4 alternates between the
    shapes of its two engine phases) and grows it only when a shape needs more."""
    import threading

    from linattn_numba import _common

    rng = np.random.default_rng(0)

    def same_memory(a, b):  # fresh values written through one view are seen through the other
        x = rng.random(a.size, dtype=np.float32)
        a.copy_to_device(x.reshape(a.shape))
        n = min(a.size, b.size)
        return np.array_equal(b.copy_to_host().ravel()[:n], x[:n])

    _common.release_scratch()
    a = r3._scratch("test", (2, 3), 0)
    assert a.shape == (2, 3) and a.dtype == np.float32 and a.is_c_contiguous()
    assert same_memory(a, r3._scratch("test", (2, 3), 0))
    b = r3._scratch("test", (5,), 0)  # fewer elements: the same memory, another shape
    assert b.shape == (5,) and same_memory(b, r3._scratch("test", (2, 3), 0))
    c = r3._scratch("test", (2, 4), 0)  # more elements: a larger buffer, which later smaller shapes reuse
    assert c.shape == (2, 4)
    assert same_memory(c, r3._scratch("test", (2, 3), 0))
    assert not same_memory(a, c)  # the old buffer is no longer the scratch (a view of it stays valid)
    other = {}
    t = threading.Thread(target=lambda: other.setdefault("x", r3._scratch("test", (2, 4), 0)))
    t.start()
    t.join()
    assert not same_memory(other["x"], r3._scratch("test", (2, 4), 0))
    stream = cuda.stream()
    assert not same_memory(r3._scratch("test", (2, 4), stream), r3._scratch("test", (2, 4), 0))
    _common.release_scratch()


@pytest.mark.parametrize("recurrence,K", [("decay", 32), ("gated_delta", 16), ("delta", 32)])
def test_wide_tile_map(recurrence, K):
    """V = 32: a value tile of 8 quads, so the state kernel maps its tiles 4 x 8 per warp (``_quad_map``'s wide
    map, the H200 default; the cases above have narrower tiles); decay at K' = 32 > C also splits P1."""
    assert r3.value_tile(16, r3.padded_k(K), 32) // 4 % 8 == 0
    check(make(1, 37, 1, K, 32, recurrence, seed=K + 5), 16, True, True)

@pytest.mark.parametrize("ncol,rows", [(8, 4), (16, 32), (16, 8), (5, 3), (2, 6)])
def test_quad_map_is_a_bijection(ncol, rows):
    """``_quad_map`` gives every 4x4 tile of a rows x ncol grid to exactly one index; when ``ncol`` is a multiple of
    8 (the wide map) each warp of 32 indices holds 4 tile rows x 8 tile columns, so a 128-bit load of the right
    factor reads 8 consecutive float4 (one wavefront)."""
    wide = ncol % 8 == 0
    seen = [r3._quad_map.py_func(i, ncol, wide) for i in range(rows * ncol)]
    assert sorted(seen) == [(r, c) for r in range(rows) for c in range(ncol)]
    if wide:
        for w in range(rows * ncol // 32):
            warp = seen[32 * w: 32 * w + 32]
            assert len({r for r, _ in warp}) == 4 and len({c for _, c in warp}) == 8
            assert max(c for _, c in warp) - min(c for _, c in warp) == 7  # consecutive columns


@pytest.mark.parametrize("delta,out", [(False, True), (True, True), (True, False), (False, False)])
def test_chunk_prefetcher_asks_for_every_line_once(monkeypatch, delta, out):
    """The fixed-map L2 prefetch of the state kernel (a hint: a wrong map costs time, never correctness, so the
    oracle tests cannot see it): per chunk every line of the rows that the next staging reads is asked for exactly
    once, none outside them, and no thread asks for more than ceil(lines / threads), for a full and a short chunk
    and for chunk indices that turn the map. Run in the simulator with ``prefetch_l2`` recording its requests."""
    C, KP, BV, NTH = 16, 32, 16, 32  # the state kernel's block at K' = 32, BV = 16: (32 / 4)(16 / 4) threads
    K, V, v0 = 32, 20, 16  # the second value tile: 4 of its 16 columns exist
    asked = []

    def record(x, idx):
        asked.append((x.shape[len(x.shape) - 1], len(idx), tuple(int(i) for i in idx), cuda.threadIdx.x))  # no [-1]:
        # the simulator's shape tuple refuses negative indices

    monkeypatch.setattr(r3, "prefetch_l2", record)
    pf = r3._chunk_prefetcher(C, KP, BV, NTH, delta, out)
    B, T, H = 1, 40, 1
    inp4 = {n: np.zeros((B, T, H, d), np.float32) for n, d in (("q", K + 1), ("k", K + 3), ("v", V))}
    scr = {n: np.zeros((B * H, T, d), np.float32) for n, d in (("w", KP), ("u", V + 1), ("qp", KP + 2), ("u2", V + 2))}

    @cuda.jit
    def kern(q, k, v, w, u, qp, u2, t1, n1, c):
        pf(q, k, v, w, u, qp, u2, 0, 0, 0, t1, n1, K, V, v0, cuda.threadIdx.x, c)

    for t1, n1, c in ((16, 16, 1), (32, 8, 2), (16, 16, 7)):
        asked.clear()
        kern[1, NTH](inp4["q"], inp4["k"], inp4["v"], scr["w"], scr["u"], scr["qp"], scr["u2"], t1, n1, c)
        # the arrays asked for, by their last dimension (distinct above): (first column, columns) of each
        want = {K + 3: (0, K)}
        if delta:
            want.update({KP: (0, KP), V + 1: (v0, V - v0)})
            if out:
                want[KP + 2] = (0, KP)
        else:
            want[V] = (v0, V - v0)
            if out:
                want[K + 1] = (0, K)
        if out:
            want[V + 2] = (v0, V - v0)
        lines = sorted((d, t, col) for d, nd, idx, _ in asked for t, col in [(idx[-3 if nd == 4 else -2], idx[-1])])
        expect = sorted((d, t, c0 + 32 * ln) for d, (c0, cols) in want.items() for t in range(t1, t1 + n1)
                        for ln in range(-(-cols // 32)))
        assert lines == expect
        per_thread = np.bincount([tid for *_, tid in asked], minlength=NTH)
        assert per_thread.max() <= -(-len(expect) // NTH) + len(want)  # at most one partial pass per array


@pytest.mark.parametrize("C", [16, 32, 64])
def test_wy_inverse_against_numpy(C):
    """``_wy_inverse`` alone, by a whole block of (C / 4)^2 threads as in the intra kernel: Lkk (strictly lower,
    from unit-norm keys, beta in [0, 1] and decays, as the scores make it) is replaced by (I + Lkk)^-1, computed
    here by NumPy in float64, and K's rows are scaled by beta_t gamma_t. C = 16, 32, 64: 1, 2 and 4 block rows
    (the diagonal solve alone; one block row from the one above; the longest sums), with 16, 64 and 256 threads
    (at 16 every thread solves a column and scales K as well)."""
    KP = 16
    rng = np.random.default_rng(C)
    k = rng.standard_normal((C, KP))
    k /= np.linalg.norm(k, axis=1, keepdims=True)
    beta = rng.uniform(0, 1, C)
    b = np.cumsum(np.log(rng.uniform(0.8, 1.0, C)))  # in-chunk cumulative log-gates
    L = np.tril(beta[:, None] * (k @ k.T) * np.exp(b[:, None] - b[None, :]), -1)
    O_K, _, _, O_LA, O_T, O_B, O_BETA, _, total = r3._intra_layout(C, KP)
    KS, CS, NB, NTH = KP + 4, C + 4, C // 16, (C // 4) ** 2

    @cuda.jit
    def kern(lin, kin, betain, bin_, aout, kout):
        sm = cuda.shared.array(0, float32)
        tid = cuda.threadIdx.x
        for e in range(tid, C * C, NTH):
            sm[O_LA + (e // C) * CS + e % C] = lin[e // C, e % C]
        for e in range(tid, C * KP, NTH):
            sm[O_K + (e // KP) * KS + e % KP] = kin[e // KP, e % KP]
        for t in range(tid, C, NTH):
            sm[O_BETA + t] = betain[t]
            sm[O_B + t] = bin_[t]
        cuda.syncthreads()
        r3._wy_inverse(sm, O_K, KS, KP, O_BETA, O_B, O_LA, O_T, CS, C, NB, tid, NTH, True)
        cuda.syncthreads()  # K's scaling (by other threads than the last block row's) is complete
        for e in range(tid, C * C, NTH):
            aout[e // C, e % C] = sm[O_LA + (e // C) * CS + e % C]
        for e in range(tid, C * KP, NTH):
            kout[e // KP, e % KP] = sm[O_K + (e // KP) * KS + e % KP]

    a = np.full((C, C), np.nan, np.float32)
    kk = np.full((C, KP), np.nan, np.float32)
    f32 = functools.partial(np.ascontiguousarray, dtype=np.float32)
    kern[1, NTH, 0, total * 4](f32(L), f32(k), f32(beta), f32(b), a, kk)
    want = np.linalg.inv(np.eye(C) + L)
    assert rel_err(a, want) < TOL_FP32
    assert rel_err(kk, (beta * np.exp(b))[:, None] * k) < TOL_FP32
    a[C - 1, 0] += 1e-2  # a broken inverse must fail: one entry of the last block row off
    assert rel_err(a, want) >= TOL_FP32


@pytest.mark.parametrize("C,T,H,zero", [(64, 150, 3, True), (16, 37, 2, False), (32, 1, 1, True), (16, 20, 35, True)],
                         ids=str)
def test_gates_kernel(C, T, H, zero):
    """The gates kernel: b_t, the in-chunk cumulative log-gates, bit for bit the float32 sums in order (each chunk
    from zero, summed in batches of GATES_BATCH: two batches at C = 64), rows past T the chunk's last b, never
    increasing; float16 gates converted on load; more heads than a block takes (H = 35: two head tiles, the second
    of 3); with ``zero`` it also zeroes the overlapped launch's counts (5 more of them than the grid has threads:
    its grid-stride loop), without it leaves them alone."""
    rng = np.random.default_rng(C + T)
    B = 2
    NC = -(-T // C)
    for dtype in (np.float32, np.float16):
        g = (-rng.exponential(0.5, size=(B, T, H))).astype(dtype)
        g[0, 0, 0] = -40.0  # a strong gate: the sums far from zero
        bcum = cuda.to_device(np.full((B * H, NC * C), np.nan, np.float32))
        grid = r3._gates_grid(B, T, H, C)
        nflags = max(B * H * NC, int(np.prod(grid)) * r3.GATES_THREADS) + 5
        flags = cuda.to_device(np.full(nflags, 7, np.int32))
        kern = r3._gates_kernel(C, zero)
        kern[grid, r3.GATES_THREADS](cuda.to_device(g), bcum, flags)
        got = bcum.copy_to_host()
        want = np.zeros((B * H, NC * C), np.float32)
        for bh in range(B * H):
            for c in range(NC):
                acc = np.float32(0.0)
                for t in range(C):
                    if c * C + t < T:
                        acc = np.float32(acc + np.float32(g[bh // H, c * C + t, bh % H]))
                    want[bh, c * C + t] = acc
        np.testing.assert_array_equal(got, want)
        assert np.all(np.diff(got.reshape(B * H, NC, C), axis=2) <= 0)
        assert (flags.copy_to_host() == (0 if zero else 7)).all()
