"""Rung r6 ``tensor_cores``: r3's chunk pass with its two matrix products on the tensor cores, as 3xTF32
``mma.sync`` tiles (float32 accuracy) or plain TF32 (fla's fp32 path), warp by warp.

What changed from r3, and why
-----------------------------
r3's state kernel is the sequential part of the chunkwise algorithm (one block walks the chunks of one head and
one value tile) and most of its time: 2.0 of 2.9 ms for the decay recurrence and 3.2 of 5.7 ms for the gated
delta rule at B4 T8192 H16 K=V=128 (``figures/data/probes/h200_r3_tune.json``). Its two products per chunk,

    P1   X = [W; Q'] S        (delta; Q S for the additive family)   [C or 2C, K] x [K, BV]
    P2   S <- gamma_C S + K^T diag(gamma_C / gamma) V_new               [K, C] x [C, BV]

run on the FMA units as 4x4 register tiles: about 25% of the fp32 FMA rate. The H200's tensor cores multiply
TF32 (10-bit mantissa) at several times that rate. Here the same two products are ``mma.sync.m16n8k8`` tiles
(:mod:`linattn_numba.mma`): each warp owns 16 x 8 tiles, and every lane holds 4 accumulators of each (the
"C fragment": rows g and g + 8, columns 2i and 2i + 1 of the tile, g = lane // 4, i = lane % 4). The state S
now lives in those fragments: the warp that owns a tile of S adds each chunk's P2 to it, and stores it to shared
memory once per chunk as P1's right-hand side.

TF32 alone would cost float32 accuracy (relative error ~1e-3 where r3 has ~1e-6). ``precision="3xtf32"``
(the default) splits every operand into a TF32 ``big`` part and a TF32 ``small`` remainder and sums three
products (``big big + big small + small big``): error about that of float32 FMAs, three tensor-core
instructions per tile step. ``precision="tf32"`` is the one-product variant (what fla's chunk kernels do with
float32 inputs), for comparison. Each chunk's P2 is summed from zero and added to ``gamma_C S`` on the FMA units:
the tensor core's float32 accumulation truncates, harmless over one chunk but, with S itself as the accumulator,
a relative error of 5.5e-5 on plain attention at T = 8192 (first H200 run, ``probes/h200_r6_2fb682a.json``).

What made it fast (the first H200 run had r6 at 4.3 / 4.5 / 5.9 ms for plain / decay / gated delta, slower
than r3; SASS read with ``tools/sass.py``, ncu in ``probes/h200_ncu_r6_2fb682a.csv``): the instructions around the
``HMMA``, not the tensor cores, were the cost --

* shared loads by :func:`linattn_numba.vec.ld1`: Numba's ``a[i]`` with a signed index also handles negative
  indices, a compare, a select and 64-bit arithmetic per access (2,495 IMAD and 1,003 ISETP against 45 HMMA);
* tiles side by side (:func:`_tiling`): a warp computes G1 tiles of P1 and its SG = 4 tiles of S in one row
  block, so each step's A fragment is loaded and split once for several ``mma``;
* the split by bit mask (:func:`linattn_numba.mma.split_tf32`, 2 instructions; ``cvt.rna`` is about 4 on sm_90);
* staging by fixed-map stagers (:func:`_rows_stager`, found here and since moved to r3, whose state kernel uses
  them too) instead of r3's general loops;
* the additive output's U'' loaded before the ``mma`` steps that it is added to.

Per kernel for decay (``figures/data/probes``): the state kernel went from 3.83 ms (first run) to 1.75 ms
(``h200_tune_r6_a24d276.json``, before the stagers) and 1.38 ms (``h200_tune_r6_0374507.json``); the intra
kernel (r3's) is 0.75 ms of the rest. The bench JSON in ``figures/data`` has the whole rung.

The delta family's intra kernel (gates, scores, the WY solve, Q' and U'') is r3's, launched by r3's code with r3's
scratch, so ``diff`` against r3's ``_state_kernel`` shows the lesson; the additive family's runs on the tensor cores
too (below).

Thread map (grid ``(ceil(V / BV), B H)`` as r3; block ``32 max(1, KP BV / 512)`` threads: 512 at K = 128,
BV = 64)::

    S [KP, BV] in 16 x 8 tiles, tile st = (st // (BV / 8), st % (BV / 8)); warp w owns tiles 4w .. 4w + 3
        (one row block at BV = 64: side by side)
    P1: groups of G1 output tiles side by side (16 rows of [W; Q'], 8 G1 columns), group j to warp j mod NW;
        KP / 8 mma steps, operands from shared memory: A = row block rows, B = S as stored this chunk
    P2: each warp sums the chunk's K^T V_new for its own S tiles over the C / 8 steps: A = K^T (K's rows read
        transposed from shared memory, one fragment per step for its SG tiles), B = V_new; then S = gamma_C S + it
    staging: fixed-map stagers (thread tid: column quad tid mod (cols / 4), every NTH / (cols / 4)-th row), r3's
        loops for float16 or unaligned inputs; gates and prefetch: r3's helpers (_chunk_gates, _chunk_prefetcher);
        the P1 epilogue (V_new = (U - X) gamma_C / gamma_t in place, or o = scale (X gamma + U'')) per element

The split schedule (the default for the additive family: :data:`SCHEDULE`)
--------------------------------------------------------------------------
The fused schedule above keeps P1 (``Q S``, the output's inter-chunk part) in the sequential chunk walk, although
for plain and decay attention nothing later depends on it. ``schedule="split"`` takes it out, as fla's chunk
kernels do, at the price of one buffer of every chunk's starting state::

    gates   (heads x chunks threads)       bcum = in-chunk cumulative log-gates                     (decay only)
    state   grid (V / BV, B H), as above   per chunk: hs[c] = S, then S <- gamma_C S + K^T diag(gamma_C/gamma) V
                                           (P2 only: no P1, no output, Q and U'' never read)
    out     grid (NT, B H), 256 threads     O = scale (diag(gamma) Q hs[c] + tril(Q K^T ⊙ Γ) V), every chunk at once:
                                           scores as 3xTF32 tiles into P (shared), then per 64 value columns
                                           acc = Q S_c (K / 8 steps), acc *= gamma_t, acc += P V (steps up to the
                                           diagonal) in the same accumulators (:func:`_out_add_kernel`)

Bytes: ``hs`` is B H NT K V floats (512 MiB at B4 T8192 H16 K=V=128, written once and read once), where the
fused schedule writes and reads U'' (B T H V floats, 256 MiB) instead. H200, decay at the standard shape
(``figures/data/probes/h200_tune_r6_split_c20ff61.json``): fused 2.13 ms (intra 0.70 + state 1.42) against
split 1.86 ms (gates 0.02 + state 0.76 + out 1.05); plain 1.97 against 1.72. The state pass halves, as its P1 is
gone; the output kernel is now the larger part, at 0.35 of the H200's copy bandwidth for the 1.6 GB it moves
(its 3xTF32 products and staging are not overlapped: one chunk per block, two blocks per SM). With one TF32
product per step (``precision="tf32"``, fla's accuracy) the split schedule takes 1.30 / 1.42 ms (plain / decay)
against fla's 0.81 / 0.87 ms in the same run (``figures/data/probes/h200_r6_split_c20ff61.json``).

It runs where :func:`split_fits` (float32 inputs with aligned rows, the output wanted) and ``hs`` is at most
:data:`SPLIT_MAX_BYTES`; elsewhere the fused schedule runs. For the delta family ``schedule="split"`` (its
default too, :data:`DELTA_SCHEDULE`) runs r3's split (r3's docstring, "The split schedule for the delta family":
the intra kernel in state-only mode, r3's walk storing S_c and V_new = U - W S_c) with this rung's pipelined output
kernel on V_new (C >= 32): gated delta at the standard shape 2.811 ms (intra 1.042, walk 1.137, out 0.635) against
the fused schedule's 3.484 in the same run (``figures/data/probes/h200_tune_r6_delta_split_73b83a8.json``). The
whole forward on an H100 (80 GB HBM3, the device tool's other card) beside fla's ``chunk_gated_delta_rule`` in one
process: delta 2.721 ms, gated delta 2.812 against fla's 2.579 (``probes/h100_r6_delta_split_6451052.json``); on
the H200 at 1acf97e: delta 2.706 ms (r3 2.919 in the same run; fla's chunk delta rule refuses float32), gated delta
2.809 against fla's 2.357, 1.19x (``figures/data/h200_r{3,6}_delta_split_1acf97e.json``, the README's rows). Its
intra kernel for the additive family is the tensor-core one (:func:`_intra_add_kernel`, :data:`INTRA`: 0.60 / 0.70
ms against r3's 0.68 / 0.75 for plain / decay, ``probes/h200_tune_r6_intra_7741f24.json``).

The pipelined output kernel (the split schedule's default since 8baed37: :data:`SPLIT_OUT`, :func:`_out_pipe_kernel`)
---------------------------------------------------------------------------------------------------------------
The staged output kernel above stages the value and state tiles, waits at a barrier, then multiplies; r3's output
kernel (``r3._out_kernel``) overlaps its copies with its products (``cp.async`` slabs through three buffers) but
multiplies on the FMA units at ~47 % of their peak. ``_out_pipe_kernel`` is r3's kernel with its two products
``acc = Q S_c`` and ``acc += Aqk V`` as 3xTF32 mma tiles (:func:`_mma_2x4`: a warp's 2 x 4 tiles of 16 x 8 per
step of 8, each B fragment loaded and split once for both row tiles, each A fragment once for the 4 column
tiles: 24 ``mma`` for 8192 multiply-adds where the FMA tiles issue 256 ``FFMA`` a warp). Both kernels are
``r3._out_pipeline`` (the copies, slabs, buffers, barriers and the deferred start state, written once) given
their product steps: r3's ``r3._out_fma_products``, this rung's :func:`_out_pipe_products` (since 944bc1d; the
same SASS within a few instructions and the same times on the H200: decay output kernel 0.677 ms, r3's 0.888,
``probes/h200_tune_r6_pipe_944bc1d.json``, ``h200_tune_r3_split_944bc1d.json``). What else changed:

* the slabs' rows are padded by 8 floats (:func:`_out_pipe_layout`): a B fragment reads 4 slab rows x 8 columns,
  and rows of 128 floats start in the same bank;
* warp w takes row blocks p and C / 16 - 1 - p (p = w mod C / 32), so the triangular ``Aqk V`` is the same work
  for every warp, and skips the steps past each block's diagonal (warp-uniform, as ``mma.sync`` needs);
* the output is stored as 64-bit column pairs of the C fragments.

Its scores stay r3's FMA tiles: on the tensor cores (:func:`_scores_tc`, as the staged kernel has them) the
forward was slower (decay 1.375 against 1.322 ms, ``probes/h200_tune_r6_pipe_2af77ac.json``). The state walk
before it is r3's pipelined FMA kernel (:data:`SPLIT_STATE` "shared"): r6's tensor-core one stores the same
``hs`` but took 0.674 ms against r3's 0.599 for decay. H200, B4 T8192 H16 K=V=128, one device call, per kernel
(``figures/data/probes/h200_tune_r6_pipe_8baed37.json``, r3's split beside it in ``h200_tune_r3_split_8baed37.json``):

=====================================  ===========  ===========  ==========  ==========
split schedule (decay)                 state ms     output ms    forward ms  plain
=====================================  ===========  ===========  ==========  ==========
r3 (FMA state, FMA output)             0.599        0.891        1.538       1.426
r6 state, staged output                0.673        1.040        1.756       1.654
r6 state, pipelined output             0.674        0.678        1.394       1.298
r3 state, pipelined output (default)   0.599        0.676        1.322       1.203
=====================================  ===========  ===========  ==========  ==========

Since d88055a that state walk runs in 8 x 4 tiles of 64 value columns where there are many walkers (``r3.split_tile``):
decay 1.284 ms (state 0.560, out 0.674; ``probes/h200_tune_r6_pipe_3aed3d0.json``). The bench beside fla before
it (``figures/data/probes/h200_r6_pipe_45bc923.json``): plain 1.208 / decay 1.330 ms; with it, at 5d63b60
(``figures/data/probes/h200_r6_pipe_5d63b60.json``): plain 1.159 / decay 1.277 ms against r3's 1.385 /
1.490 and fla ``chunk_simple_gla``'s 0.814 / 0.878 (TF32, relative error 1.5e-3 / 1.8e-3 where this rung has
3.3e-6 / 1.4e-6): 1.42x / 1.45x fla's time. The output kernel moves ~1.6 GB (q, k, v, the states hs, o) in
0.676 ms: 2.4 TB/s, 0.56 of the copy bandwidth; its 27.9 GFLOP as executed (scores as FMA, 10 of 16 sub-tiles)
come to 41 TFLOP/s. By ``tools/sass.py`` (sm_90, this machine's ptxas): 128 registers and 28 spilled bytes (60
with the deferred start state), against r3's 127 and none: the 32 accumulators and the split B fragments of the
mma loop beside r3's scores' 80 registers; the H200's ptxas was not read. r4 ``scan`` runs this kernel as phase 3
for the additive family (``r4.SPLIT_OUT``, the deferred start state added to the slabs of S_c a thread copied, as
in r3's kernel). At f0ac321 (``figures/data/h200_r6_pipe_f0ac321.json``, the README's rows): plain 1.161 / decay
1.277 ms, fla 0.814 / 0.878; r3, now with its walk and output in one launch (``r3.OVERLAP``), 1.335 / 1.446. That
launch does not pay here (:data:`OVERLAP`, :func:`out_pipe_factory`).
It needs r3's copy maps (``r3.split_fits``) and C >= 32 (:func:`out_pipe_fits`); elsewhere the staged kernel runs.

The delta family's intra kernel on the tensor cores (opt in: ``intra="tensor_cores"``, :func:`_intra_delta_kernel`)
-------------------------------------------------------------------------------------------------------------
r3's intra kernel is more than half of r6's time for the delta family (2.4 / 2.5 ms of 4.2 / 4.4 ms for delta /
gated delta at the standard shape). Its six products (``Q Kᵀ``, ``K Kᵀ``, W, Q', U, U'') as 3xTF32 tiles around
r3's block inverse: 111 registers, no spills, 108 KB of shared memory (two blocks per SM), float32-accurate. On
the H200 it did not pay (``figures/data/probes/h200_tune_r6_delta_4f530d8.json``): intra 2.39 ms against r3's
2.40 for delta, 2.66 against 2.50 for gated delta. So the FMA products were not what limits that kernel; the
candidates left are the serial parts (the 16-row forward substitutions with 64 of 256 threads busy, the
cumulative gates), the per-element exponentials and Q's second read from global memory, and its 2 GB of
scratch traffic (w, u, qp, u2). The default (:data:`INTRA_DELTA`) stays r3's; the kernel is tested and kept as
the starting point for that work. Those serial parts were then made shorter in r3's kernel, which this one shares:
the inverse's sums in partial sums, K scaled during the diagonal solve, the scores' upper sub-tiles skipped, one
exponential per row. Per kernel, r3's intra took 2.01 / 2.14 ms for delta / gated delta
(``figures/data/probes/h200_tune_r3_cb88c76.json``, before the last three). In the bench at 33dedac r6 takes
3.59 / 3.81 ms, where it took 4.14 / 4.40 ms before (``figures/data/probes/h200_r3_33dedac.json``). With r3's
intra kernel staging by the fixed-map stagers (1.75 / 1.82 ms, ``figures/data/probes/h200_tune_r3_585c771.json``)
and the prefetch's line counts as constants, r6 takes 1.66 / 1.79 / 3.55 / 3.69 ms (plain / decay / delta / gated
delta; ``figures/data/probes/h200_r6_r4_585c771.json``). With r3's intra kernel's triangular products 8 steps
of the inner dimension per loop step (1.71 / 1.78 ms, ``figures/data/probes/h200_tune_r3_67a8c79.json``), 1.68 /
1.80 / 3.51 / 3.64 ms (``figures/data/probes/h200_r3_67a8c79.json``). With r3's WY inverse on ``ld1`` (r3's
docstring; r3's intra kernel, the default here, and :func:`_intra_delta_kernel` call it) and the state kernel's L2
prefetch by r3's fixed maps (``_chunk_prefetcher``; with the general loops ptxas spilled 32 / 8 / 8 / 0 bytes in
the float32 state kernels, plain / decay / delta / gated delta, now 4 / 0 / 0 / 0 by ``tools/sass.py``), 1.65 /
1.76 / 3.39 / 3.52 ms (``figures/data/h200_r3_a757612.json``).

Status: checked against the float64 oracle in the simulator (where the mma is a warp rendezvous that computes
the tile product from every lane's fragments), compiled and assembled for sm_90, in the GPU test tier on the
H200 (last at d8b443d, before the pipelined output kernel; that kernel since was checked on the H200 by the
bench's oracle check and by compute-sanitizer, ``figures/data/h200_sanitize_par_45bc923.txt``), and timed there by
the bench: faster than r3 for every recurrence at the standard shape until r3's split schedule overlapped its
copies with its products (13250cf, ``cp.async``: r3's docstring), and ahead again for plain and decay with the
pipelined output kernel (section above), so ``auto`` picks r6 for the additive recurrences at C >= 32 (r1 stays
faster for the delta family). Still 1.5x fla's TF32 chunk kernels: 3xTF32 triples the tensor-core work, the
scores and the state walk run on the FMA units, and the state walk is one block per value tile and head.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import config, cuda, float32, types

from .._common import FLAG_COMBOS, INPUT_DTYPES, array_type, cdiv, or_dummy
from ..mma import mma_3xtf32_split, mma_tf32, split_tf32
from ..reference import RECURRENCES
from ..vec import ld1, st2
from . import r3_shared as r3
from .r3_shared import _chunk_gates, _chunk_prefetcher, _chunk_stager, _rows_stager, _stage_input, _stager_fits

NAME = "tensor_cores"
MAX_K = r3.MAX_K  # the intra kernel is r3's
MAX_V = None  # V is tiled across blocks
CHUNK_SIZES = r3.CHUNK_SIZES
DEFAULT_CHUNK = r3.DEFAULT_CHUNK
BV_DEFAULT = 64  # r3's tuned tile at C = 64, K = 128 (one block of 512 threads per SM)
WIDE_STATE = True  # as r3's: state-only delta runs take h0 / ht wider than v (r3.wide_state_columns)
PRECISIONS = ("3xtf32", "tf32")
PRECISION = "3xtf32"  # the default of forward(precision=...)


def _state_layout(C, KP, BV):
    """(KS, VS, offsets of the row blocks, S, V_new, gamma_t, gamma_C / gamma_t, total floats)."""
    KS, VS = KP + 4, BV + 8
    o_a = 0  # two row blocks [C, KS]: W | Q' (delta, output), W | K, Q | K (additive, output) or - | K
    o_s = o_a + 2 * C * KS  # S [KP, VS], P1's right-hand side
    o_v = o_s + KP * VS  # V_new [C, VS]
    o_gm = o_v + C * VS
    o_f = o_gm + C
    return KS, VS, o_a, o_s, o_v, o_gm, o_f, o_f + C


def _threads(KP, BV):
    """Threads of the state kernel: whole warps, 4 tiles of S (16 x 8) each when there are enough tiles."""
    return 32 * max(1, (KP * BV) // 512)


@cuda.jit(device=True, inline="always")
def _p1_u2(u2, row, col, delta, out, C, n, bh, t0, v0, V):
    """The intra-chunk output U'' that one element of P1's result is added to (0 where there is none): loaded
    before the tile's mma steps, so that its trip from L2 overlaps them instead of following them."""
    t = row - C if delta else row
    if out and t >= 0 and t < n and v0 + col < V:
        return u2[bh, t0 + t, v0 + col]
    return float32(0.0)


@cuda.jit(device=True, inline="always")
def _p1_u2_group(pre, u2, row, col, e0, ntiles, delta, out, C, n, bh, t0, v0, V):
    """``pre[4 e + j]`` = :func:`_p1_u2` of C-fragment element j (row ``row + 8 (j // 2)``, column ``col + 8 e +
    j % 2``) of tiles e0 .. e0 + ntiles - 1 of the group side by side."""
    for e in range(e0, e0 + ntiles):
        c = col + 8 * e
        pre[4 * e] = _p1_u2(u2, row, c, delta, out, C, n, bh, t0, v0, V)
        pre[4 * e + 1] = _p1_u2(u2, row, c + 1, delta, out, C, n, bh, t0, v0, V)
        pre[4 * e + 2] = _p1_u2(u2, row + 8, c, delta, out, C, n, bh, t0, v0, V)
        pre[4 * e + 3] = _p1_u2(u2, row + 8, c + 1, delta, out, C, n, bh, t0, v0, V)


@cuda.jit(device=True, inline="always")
def _p1_element(sm, o, u2v, x, row, col, delta, out, has_g, O_V, VS, O_F, O_GM, C, n, b, h, bh, t0, v0, V, scale):
    """One element of P1's result X: V_new in place (delta rows) or the output (``u2v`` from :func:`_p1_u2`)."""
    if delta and row < C:
        p = O_V + row * VS + col
        if row < n:
            f = sm[O_F + row] if has_g else float32(1.0)  # gamma_C / gamma_t
            sm[p] = (sm[p] - x) * f  # this lane's own element
        else:
            sm[p] = float32(0.0)  # past the sequence: adds nothing to the state (K's row is 0 there too)
    elif out:
        t = row - C if delta else row
        if t < n and v0 + col < V:
            gm = float32(1.0)
            if has_g and not delta:
                gm = sm[O_GM + t]
            o[b, t0 + t, h, v0 + col] = scale * (x * gm + u2v)


@cuda.jit(device=True, inline="always")
def _frag_a(sm, p, s8, s4):
    """The A fragment of one mma step from shared memory: ``(sm[p], sm[p + s8], sm[p + s4], sm[p + s8 + s4])``,
    i.e. A[g, i], A[g + 8, i], A[g, i + 4], A[g + 8, i + 4] with ``p`` at A[g, i] and s8 / s4 the offsets of 8 rows /
    4 columns (KS and 1 times those for a row-major A, swapped for Kᵀ read from K's rows)."""
    return ld1(sm, p), ld1(sm, p + s8), ld1(sm, p + s4), ld1(sm, p + s8 + s4)


@cuda.jit(device=True, inline="always")
def _mma_tiles(sm, acc, a0, a1, a2, a3, pb, bstep, s4, ntiles, live, three):
    """One k-step of ``ntiles`` 16 x 8 tiles side by side: ``acc[4 e : 4 e + 4] += A B_e`` for e < ``live`` (the
    rest skipped: score tiles wholly above the diagonal), A split once for all of them. B_e's fragment is
    ``(sm[pb + e bstep], sm[pb + e bstep + s4])`` (B[i, g] and B[i + 4, g]). ``three``: 3xTF32, else one TF32
    product. ``ntiles``, ``live`` and ``three`` are the caller's constants (or warp-uniform): every lane runs the
    same mma instructions, as ``mma.sync.aligned`` requires."""
    ab0, as0 = split_tf32(a0)
    ab1, as1 = split_tf32(a1)
    ab2, as2 = split_tf32(a2)
    ab3, as3 = split_tf32(a3)
    for e in range(ntiles):
        if e < live:
            b0 = ld1(sm, pb + e * bstep)
            b1 = ld1(sm, pb + e * bstep + s4)
            if three:
                bb0, bs0 = split_tf32(b0)
                bb1, bs1 = split_tf32(b1)
                d0, d1, d2, d3 = mma_3xtf32_split(ab0, ab1, ab2, ab3, as0, as1, as2, as3, bb0, bb1, bs0, bs1,
                                                  acc[4 * e], acc[4 * e + 1], acc[4 * e + 2], acc[4 * e + 3])
            else:
                d0, d1, d2, d3 = mma_tf32(a0, a1, a2, a3, b0, b1, acc[4 * e], acc[4 * e + 1], acc[4 * e + 2],
                                          acc[4 * e + 3])
            acc[4 * e] = d0
            acc[4 * e + 1] = d1
            acc[4 * e + 2] = d2
            acc[4 * e + 3] = d3


@cuda.jit(device=True, inline="always")
def _mma_rows(sm, acc, ra, sa, pb, bk, bstep, b4, kend, ntiles, live, three):
    """``acc += A B`` over the k-steps ``k0 = 0, 8, .. < kend`` of :func:`_mma_tiles`: A row-major in shared memory
    (``ra`` at A[g, i], rows ``sa`` apart), step k0's B fragment at ``pb + k0 bk`` (tiles ``bstep`` apart, rows
    i + 4 at ``b4``: ``bk`` = B's row stride for a row-major B, 1 for Kᵀ read from K's rows)."""
    for k0 in range(0, kend, 8):
        a0, a1, a2, a3 = _frag_a(sm, ra + k0, 8 * sa, 4)
        _mma_tiles(sm, acc, a0, a1, a2, a3, pb + k0 * bk, bstep, b4, ntiles, live, three)


def _tiling(C, KP, BV, delta, out):
    """``(NW, TC, NST, SPW, P1T, G1, SG)``: warps, tile columns (BV / 8), tiles of S, tiles of S per warp, tiles of
    P1's result X, and how many tiles a warp computes side by side in P1 (``G1``) and P2 (``SG``).

    Side by side means one row block, so each mma step's A fragment is loaded and split once for G1 (SG) tiles
    instead of once per tile (at the default C = 64, K = 128, BV = 64: G1 = 2 for the additive output, 4 for the
    delta rule's [W; Q'], SG = 4). G1 is the largest of 4, 2, 1 that divides TC and still leaves a group for
    every warp; SG is all of the warp's SPW tiles when they lie in one row block, else 1."""
    NW = _threads(KP, BV) // 32
    TC = BV // 8
    NST = (KP // 16) * TC
    SPW = cdiv(NST, NW)  # 4 at the default, fewer only for tiny K x BV
    P1T = (C * (int(delta) + int(out)) // 16) * TC
    G1 = next((gg for gg in (4, 2) if TC % gg == 0 and P1T // gg >= NW), 1)
    SG = SPW if (TC % SPW == 0 and NST % SPW == 0) else 1
    return NW, TC, NST, SPW, P1T, G1, SG


@functools.lru_cache(maxsize=None)
def _state_kernel(C, KP, BV, has_g, delta, out, has_h0, has_ht, vin, three, store=False):
    NTH = _threads(KP, BV)
    KS, VS, O_A, O_S, O_V, O_GM, O_F, _ = _state_layout(C, KP, BV)
    NW, TC, NST, SPW, P1T, G1, SG = _tiling(C, KP, BV, delta, out)
    SF = 4 * SPW  # state registers per lane (a compile-time size for cuda.local.array)
    K_OFF = 0 if (delta and out) else C * KS  # where K's rows sit during P2
    AG1, ASG = 4 * G1, 4 * SG  # accumulator counts (cuda.local.array needs a constant size)
    # float32 inputs with aligned rows (vin, which also means K and V multiples of 4) are staged by the fixed-map
    # stagers; others (float16, odd strides, tile shapes they do not fit) by r3's general loops
    stage_chunk = _chunk_stager(C, KP, BV, NTH, has_g, delta, out, vin)  # the row blocks and the value tile
    prefetch_chunk = _chunk_prefetcher(C, KP, BV, NTH, delta, out)  # L2 prefetch of the next chunk, by fixed maps
    FAST = vin and _stager_fits(KP, NTH) and _stager_fits(BV, NTH)
    st_rows = _rows_stager(C, KP, NTH, False)  # K over W and Q' (delta rule with output)
    # the additive output's U'' loaded before the mma steps (latency hidden); the delta rule's P1 takes 4 tiles at a
    # time, where 16 more live registers would spill (ptxas: 112 bytes), so it loads them after
    EARLY_U2 = out and not delta

    def state(q, k, v, bcum, w, u, qp, u2, h0, ht, o, scale, hs):
        """Value columns x * BV .. of head y through every chunk; S in the warps' mma accumulator fragments.
        ``store`` (the split schedule): every chunk's starting state to ``hs[bh, c KP + row, column]``."""
        T, H, K = k.shape[1], k.shape[2], k.shape[3]
        V = ht.shape[3] if (delta and not out) else v.shape[3]  # the state's columns (r3.wide_state_columns)
        vec_v = (u.shape[2] if delta else V) % 4 == 0
        NC = (T + C - 1) // C
        # P1's steps stop at K rounded up to 8 (S rows and row-block columns past K are zero): a trip count the
        # compiler cannot see, which keeps the loop rolled -- fully unrolled, all 6 x KP / 8 operand addresses
        # were computed ahead into 64-bit registers, beyond the launch bounds' 128 (spilled)
        kp_rt = 8 * ((K + 7) // 8)
        sm = cuda.shared.array(0, float32)
        bh = cuda.blockIdx.y
        b = bh // H
        h = bh % H
        v0 = cuda.blockIdx.x * BV
        tid = cuda.threadIdx.x
        warp = tid // 32
        lane = tid % 32
        g = lane // 4
        i4 = lane % 4
        Sf = cuda.local.array(SF, float32)  # tile e, register j: row g + 8 (j // 2), column 2 i4 + j % 2
        for e in range(SPW):
            st = warp * SPW + e
            r0 = 16 * (st // TC)
            c0 = 8 * (st % TC)
            for j in range(4):
                rr = r0 + g + 8 * (j // 2)
                cc = v0 + c0 + 2 * i4 + j % 2
                Sf[4 * e + j] = float32(0.0)
                if has_h0 and st < NST and rr < K and cc < V:
                    Sf[4 * e + j] = h0[b, h, rr, cc]
        if has_g and NC > 0:
            _chunk_gates(sm, O_F, O_GM, bcum, bh, 0, min(C, T), C, tid, NTH)
            cuda.syncthreads()  # the first chunk's gates are read by its staging
        for c in range(NC):
            t0 = c * C
            n = min(C, T - t0)
            b_last = bcum[bh, t0 + n - 1] if has_g else float32(0.0)
            if store:  # S_c for the output kernel (KP rows, zero past K): nothing waits on these stores; one
                # 64-bit store per row of a fragment's column pair (V is a multiple of 4 here: split_fits)
                for e in range(SPW):
                    st = warp * SPW + e
                    cc = v0 + 8 * (st % TC) + 2 * i4
                    if st < NST and cc < V:
                        rr = c * KP + 16 * (st // TC) + g
                        st2(hs, (bh, rr, cc), (Sf[4 * e], Sf[4 * e + 1]))
                        st2(hs, (bh, rr + 8, cc), (Sf[4 * e + 2], Sf[4 * e + 3]))
            # -- stage: S from the fragments, the row blocks, the value tile (r3's staging loops) --
            if P1T > 0:
                for e in range(SPW):
                    st = warp * SPW + e
                    if st < NST:
                        r0 = 16 * (st // TC)
                        c0 = 8 * (st % TC)
                        for j in range(4):
                            sm[O_S + (r0 + g + 8 * (j // 2)) * VS + c0 + 2 * i4 + j % 2] = Sf[4 * e + j]
            stage_chunk(sm, O_A, O_V, O_F, KS, VS, q, k, v, w, u, qp, b, h, bh, t0, n, K, V, v0, tid, vec_v)
            cuda.syncthreads()  # everything staged, S included

            if c + 1 < NC:  # L2 prefetch of the next chunk's rows, as in r3
                prefetch_chunk(q, k, v, w, u, qp, u2, b, h, bh, t0 + C, min(C, T - t0 - C), K, V, v0, tid, c + 1)

            # -- P1: X = rows @ S; a warp takes G1 tiles side by side (one row block), so that each step's A
            # fragment is loaded and split once for G1 mma tiles (warp-uniform loop: every lane runs the mma) --
            for grp in range(warp, P1T // G1, NW):
                pr = 16 * ((grp * G1) // TC)
                pc = 8 * ((grp * G1) % TC)
                acc = cuda.local.array(AG1, float32)
                pre = cuda.local.array(AG1, float32)
                if EARLY_U2:
                    _p1_u2_group(pre, u2, pr + g, pc + 2 * i4, 0, G1, delta, out, C, n, bh, t0, v0, V)
                for e in range(4 * G1):
                    acc[e] = float32(0.0)
                ra = O_A + (pr + g) * KS + i4
                rb = O_S + i4 * VS + pc + g
                _mma_rows(sm, acc, ra, KS, rb, VS, 8, 4 * VS, kp_rt, G1, G1, three)
                row = pr + g
                for e in range(G1):
                    col = pc + 8 * e + 2 * i4
                    if not EARLY_U2:  # tile by tile: 4 more live registers, not 4 G1
                        _p1_u2_group(pre, u2, row, pc + 2 * i4, e, 1, delta, out, C, n, bh, t0, v0, V)
                    _p1_element(sm, o, pre[4 * e], acc[4 * e], row, col, delta, out, has_g, O_V, VS, O_F, O_GM,
                                C, n, b, h, bh, t0, v0, V, scale)
                    _p1_element(sm, o, pre[4 * e + 1], acc[4 * e + 1], row, col + 1, delta, out, has_g, O_V, VS,
                                O_F, O_GM, C, n, b, h, bh, t0, v0, V, scale)
                    _p1_element(sm, o, pre[4 * e + 2], acc[4 * e + 2], row + 8, col, delta, out, has_g, O_V, VS,
                                O_F, O_GM, C, n, b, h, bh, t0, v0, V, scale)
                    _p1_element(sm, o, pre[4 * e + 3], acc[4 * e + 3], row + 8, col + 1, delta, out, has_g, O_V,
                                VS, O_F, O_GM, C, n, b, h, bh, t0, v0, V, scale)
            if delta and out:
                cuda.syncthreads()  # W and Q' are consumed: K takes their place
                if FAST:
                    st_rows(sm, O_A, KS, k, b, h, t0, n, K, 0, tid, False, 0)
                else:
                    _stage_input(sm, O_A, KS, k, b, h, t0, n, K, 0, C, KP, tid, NTH, False, 0)
            cuda.syncthreads()  # V_new (and K) complete

            # -- P2: S <- gamma_C S + K^T V_new on the warp's own tiles; meanwhile the next chunk's gates --
            if has_g and c + 1 < NC:
                _chunk_gates(sm, O_F, O_GM, bcum, bh, t0 + C, min(C, T - t0 - C), C, tid, NTH)
            # the chunk's K^T V_new is summed from zero in fresh accumulators and added to gamma_C S on the FMA
            # units: the tensor core's float32 accumulation is not IEEE-rounded (it truncates), harmless over one
            # chunk's 64 terms but a visible bias over thousands of tokens if S itself were the accumulator
            # (plain attention at T = 8192: 5.5e-5 relative error on the H200, against 3e-6 for r3)
            gc = float32(math.exp(b_last)) if has_g else float32(1.0)
            for e0 in range(0, SPW, SG):
                st0 = warp * SPW + e0
                if st0 < NST:  # warp-uniform
                    r0 = 16 * (st0 // TC)
                    c0 = 8 * (st0 % TC)
                    acc = cuda.local.array(ASG, float32)
                    for e in range(4 * SG):
                        acc[e] = float32(0.0)
                    ka = O_A + K_OFF + i4 * KS + r0 + g  # K^T[r0 + g, i4] = K[i4, r0 + g]
                    vb = O_V + i4 * VS + c0 + g
                    for k0 in range(0, 8 * ((n + 7) // 8), 8):  # rows past n are zero: skipped
                        a0, a1, a2, a3 = _frag_a(sm, ka + k0 * KS, 8, 4 * KS)
                        # the warp's tiles side by side: one A fragment for SG tiles
                        _mma_tiles(sm, acc, a0, a1, a2, a3, vb + k0 * VS, 8, 4 * VS, SG, SG, three)
                    for e in range(4 * SG):
                        Sf[4 * e0 + e] = Sf[4 * e0 + e] * gc + acc[e]
            cuda.syncthreads()  # before the next chunk is staged over this one
        if has_ht:
            for e in range(SPW):
                st = warp * SPW + e
                r0 = 16 * (st // TC)
                c0 = 8 * (st % TC)
                for j in range(4):
                    rr = r0 + g + 8 * (j // 2)
                    cc = v0 + c0 + 2 * i4 + j % 2
                    if st < NST and rr < K and cc < V:
                        ht[b, h, rr, cc] = Sf[4 * e + j]

    if config.ENABLE_CUDASIM:  # the simulator's cuda.jit takes no launch_bounds
        return cuda.jit(state)
    return cuda.jit(state, launch_bounds=(NTH, max(1, r3.STATE_REGS_BLOCKS // NTH)))


# ----------------------------------------------------------------------------------------------------------
# the additive intra kernel on the tensor cores (the fused schedule's default for float32 aligned inputs)
# ----------------------------------------------------------------------------------------------------------
INTRAS = ("r3", "tensor_cores")
# the defaults of forward(intra=...), per family, as measured on the H200 (module docstring): the additive
# family's tensor-core kernel is faster than r3's; the delta family's is not (the products are not its cost)
INTRA = "tensor_cores"
INTRA_DELTA = "r3"
INTRA_THREADS = 256  # 8 warps: 2 blocks of ~104 KB shared memory per SM at C = 64, K = 128
INTRA_VB = 64  # value columns per pass of U'' = P V


def _intra_tc_layout(C, KP):
    """(KS, CS, VS, offsets of Q, K, P, the value tile, b, g, total floats) of :func:`_intra_add_kernel`. Row
    paddings as in the state kernel: A fragments (row g, column i) and B fragments read as K rows (row g, column
    i) conflict-free with rows of KP + 4 and C + 4 floats, B fragments read down a column (row i, column g) with
    rows of VB + 8."""
    KS, CS, VS = KP + 4, C + 4, INTRA_VB + 8
    o_q = 0
    o_k = o_q + C * KS
    o_p = o_k + C * KS
    o_v = o_p + C * CS
    o_b = o_v + C * VS
    o_g = o_b + C
    return KS, CS, VS, o_q, o_k, o_p, o_v, o_b, o_g, o_g + C


def intra_tc_fits(K, V, C, delta, out, vin) -> bool:
    """Whether :func:`_intra_add_kernel` can replace r3's intra kernel: the additive family with the output
    (state-only runs need only the gates), float32 inputs with aligned rows (its stagers' 128-bit loads)."""
    KP = r3.padded_k(K)
    return (not delta and out and vin and _stager_fits(KP, INTRA_THREADS) and _stager_fits(INTRA_VB, INTRA_THREADS)
            and C % 16 == 0)


@functools.lru_cache(maxsize=None)
def _scores_tc(C, KP, NTH, has_g, three):
    """The additive scores on the tensor cores, as :func:`_intra_add_kernel` computes them, for the output kernels:
    ``scores(sm, o_q, o_k, o_p, o_b, kend, tid)`` writes ``P[t, s] = (Q K^T)[t, s] exp(b_t - b_s)`` for s <= t and 0
    above (every entry of the [C, C + 4]-strided P at ``o_p``), from Q's and K's rows at ``o_q`` / ``o_k`` (stride
    KP + 4, columns past ``kend`` unread) and b at ``o_b``. Groups of GS 16 x 8 tiles side by side (one row block:
    each step's A fragment, Q's, loaded and split once for them; B is K^T read down K's rows), group j to warp
    j mod (NTH / 32); tiles wholly above the diagonal skip their mma steps. The caller syncs before and after."""
    NW = NTH // 32
    KS, CS = KP + 4, C + 4
    RB = C // 16
    TCS = C // 8
    GS = 4 if TCS % 4 == 0 else (2 if TCS % 2 == 0 else 1)
    NGS = RB * TCS // GS
    AS = 4 * GS

    def scores(sm, o_q, o_k, o_p, o_b, kend, tid):
        warp = tid // 32
        lane = tid % 32
        g8 = lane // 4
        i4 = lane % 4
        for grp in range(warp, NGS, NW):
            pr = 16 * ((grp * GS) // TCS)
            pc = 8 * ((grp * GS) % TCS)
            acc = cuda.local.array(AS, float32)
            for e in range(AS):
                acc[e] = float32(0.0)
            live = min(GS, (pr + 15 - pc) // 8 + 1) if pc <= pr + 15 else 0
            if live > 0:
                ra = o_q + (pr + g8) * KS + i4
                rk = o_k + (pc + g8) * KS + i4
                _mma_rows(sm, acc, ra, KS, rk, 1, 8 * KS, 4, kend, GS, live, three)
            for e in range(GS):
                for j in range(4):
                    t = pr + g8 + 8 * (j // 2)
                    s_ = pc + 8 * e + 2 * i4 + j % 2
                    x = float32(0.0)
                    if s_ <= t:
                        x = acc[4 * e + j]
                        if has_g:
                            x *= math.exp(sm[o_b + t] - sm[o_b + s_])  # b_t - b_s <= 0
                    sm[o_p + t * CS + s_] = x

    return cuda.jit(device=True, inline="always")(scores)


@functools.lru_cache(maxsize=None)
def _intra_add_kernel(C, KP, has_g, three):
    """The additive family's intra-chunk part, one chunk of one head per block, both products on the tensor
    cores: scores ``Q Kᵀ`` as 16 x 8 tiles (tiles wholly above the diagonal skipped), gated and masked per
    fragment element into ``P = tril(Q Kᵀ ⊙ Γ)`` in shared memory, then ``U'' = P V`` (k-steps stop at the
    diagonal), VB value columns at a time. Writes what r3's intra kernel writes for this case: ``bcum`` (with
    gates) and ``u2``."""
    NTH = INTRA_THREADS
    NW = NTH // 32
    KS, CS, VS, O_Q, O_K, O_P, O_V, O_B, O_G, _ = _intra_tc_layout(C, KP)
    RB = C // 16  # row blocks of the [C, C] scores and of the [C, VB] output
    TCV = INTRA_VB // 8
    GV = 4  # output tiles side by side (TCV = 8)
    NGV = RB * TCV // GV
    AV = 4 * GV
    st_rows = _rows_stager(C, KP, NTH, False)
    st_val = _rows_stager(C, INTRA_VB, NTH, False)
    scores = _scores_tc(C, KP, NTH, has_g, three)  # GS tiles side by side per warp

    def intra(q, k, v, g, bcum, u2):
        """Chunk x of head y: bcum[bh, t] = b_t (with gates) and u2[bh, t, :V] = U'' = tril(Q Kᵀ ⊙ Γ) V."""
        T, H, K = q.shape[1], q.shape[2], q.shape[3]
        V = v.shape[3]
        kp_rt = 8 * ((K + 7) // 8)  # Q and K columns past K are zero
        sm = cuda.shared.array(0, float32)
        c = cuda.blockIdx.x
        bh = cuda.blockIdx.y
        b = bh // H
        h = bh % H
        tid = cuda.threadIdx.x
        warp = tid // 32
        lane = tid % 32
        g8 = lane // 4
        i4 = lane % 4
        t0 = c * C
        n = min(C, T - t0)
        if has_g:
            for t in range(tid, C, NTH):
                sm[O_G + t] = float32(g[b, t0 + t, h]) if t < n else float32(0.0)
        st_rows(sm, O_Q, KS, q, b, h, t0, n, K, 0, tid, False, 0)
        st_rows(sm, O_K, KS, k, b, h, t0, n, K, 0, tid, False, 0)
        cuda.syncthreads()  # Q, K rows and the gates staged
        if has_g:
            for t in range(tid, C, NTH):
                acc = float32(0.0)
                for s in range(min(t, n - 1) + 1):
                    acc += sm[O_G + s]
                sm[O_B + t] = acc
                bcum[bh, t0 + t] = acc
            cuda.syncthreads()  # b_s of every row is read by the score epilogue

        # -- scores: GS tiles of Q Kᵀ side by side per warp (one row block), gated and masked into P --
        scores(sm, O_Q, O_K, O_P, O_B, kp_rt, tid)
        # -- U'' = P V, VB value columns at a time --
        for vb in range(0, V, INTRA_VB):
            st_val(sm, O_V, VS, v, b, h, t0, n, V, vb, tid, False, 0)
            cuda.syncthreads()  # P complete (first pass) and the value tile staged
            for grp in range(warp, NGV, NW):
                pr = 16 * ((grp * GV) // TCV)
                pc = 8 * ((grp * GV) % TCV)
                acc = cuda.local.array(AV, float32)
                for e in range(AV):
                    acc[e] = float32(0.0)
                ra = O_P + (pr + g8) * CS + i4
                # P[t, s] = 0 for s > t: the row block's steps end at its diagonal
                _mma_rows(sm, acc, ra, CS, O_V + i4 * VS + pc + g8, VS, 8, 4 * VS, pr + 16, GV, GV, three)
                for e in range(GV):
                    for j in range(4):
                        col = vb + pc + 8 * e + 2 * i4 + j % 2
                        if col < V:
                            u2[bh, t0 + pr + g8 + 8 * (j // 2), col] = acc[4 * e + j]
            cuda.syncthreads()  # the value tile is read: the next one may be staged over it

    if config.ENABLE_CUDASIM:
        return cuda.jit(intra)
    return cuda.jit(intra, launch_bounds=(NTH, 2))


# ----------------------------------------------------------------------------------------------------------
# the delta family's intra kernel on the tensor cores (the WY solve's products; the block inverse stays r3's)
# ----------------------------------------------------------------------------------------------------------
def _intra_delta_layout(C, KP):
    """(KS, CS, VS, offsets of Q, K, Aqk, A, T, b, beta, g, total floats) of :func:`_intra_delta_kernel`. Q's rows
    later hold W [C, KP], then the U tile [C, VB]; K's rows (diag(beta gamma) K after the scores) later the staged
    diag(beta) V tile; T is r3's block-inversion scratch."""
    KS, CS, VS = KP + 4, C + 4, INTRA_VB + 8
    o_q = 0
    o_k = o_q + C * max(KS, VS)
    o_aqk = o_k + C * max(KS, VS)
    o_la = o_aqk + C * CS
    o_t = o_la + C * CS
    o_b = o_t + max(C // 16 - 1, 1) * 256 + 16 * C
    o_beta = o_b + C
    o_g = o_beta + C
    return KS, CS, VS, o_q, o_k, o_aqk, o_la, o_t, o_b, o_beta, o_g, o_g + C


def intra_delta_tc_fits(K, V, C, delta, out, vin) -> bool:
    """Whether :func:`_intra_delta_kernel` can replace r3's intra kernel: the delta family with the output,
    float32 inputs with aligned rows."""
    KP = r3.padded_k(K)
    return (delta and out and vin and _stager_fits(KP, INTRA_THREADS) and _stager_fits(INTRA_VB, INTRA_THREADS)
            and C % 16 == 0)


@functools.lru_cache(maxsize=None)
def _intra_delta_kernel(C, KP, has_g, three):
    """r3's intra kernel for the delta rule with output (what it writes: ``bcum``, ``w``, ``u``, ``qp``, ``u2``;
    shapes in r3's docstring), its six products as 3xTF32 tiles, one chunk of one head per block:

        scores  Q Kᵀ and K Kᵀ (16 x 8 tiles, those wholly above the diagonal skipped) -> Aqk, Lkk (gated, masked)
        A = (I + Lkk)^-1                 r3's blocked inversion on the FMA units (16 x 16 diagonal blocks)
        W = A diag(beta gamma) K          [C, C] x [C, KP], steps up to the diagonal (A is lower triangular)
        Q' = diag(gamma) Q - Aqk W        [C, C] x [C, KP]
        U = A diag(beta) V, U'' = Aqk U   [C, C] x [C, VB], VB value columns at a time
    """
    NTH = INTRA_THREADS
    NW = NTH // 32
    KS, CS, VS, O_Q, O_K, O_AQK, O_LA, O_T, O_B, O_BETA, O_G, _ = _intra_delta_layout(C, KP)
    NB = C // 16
    RB = C // 16
    TCS = C // 8
    GS = 4 if TCS % 4 == 0 else (2 if TCS % 2 == 0 else 1)
    NGS = RB * TCS // GS
    TCK = KP // 8
    GK = 4 if TCK % 4 == 0 else (2 if TCK % 2 == 0 else 1)  # tiles side by side of the [C, KP] products
    NGK = RB * TCK // GK
    TCV = INTRA_VB // 8
    GV = 4
    NGV = RB * TCV // GV
    AS, AK, AV = 4 * GS, 4 * GK, 4 * GV
    st_rows = _rows_stager(C, KP, NTH, False)
    st_val = _rows_stager(C, INTRA_VB, NTH, False)

    def intra(q, k, v, g, beta, bcum, w, u, qp, u2):
        """Chunk x of head y (module docstring of r3 for the outputs)."""
        T, H, K = q.shape[1], q.shape[2], q.shape[3]
        V = v.shape[3]
        kp_rt = 8 * ((K + 7) // 8)
        sm = cuda.shared.array(0, float32)
        c = cuda.blockIdx.x
        bh = cuda.blockIdx.y
        b = bh // H
        h = bh % H
        tid = cuda.threadIdx.x
        warp = tid // 32
        lane = tid % 32
        g8 = lane // 4
        i4 = lane % 4
        t0 = c * C
        n = min(C, T - t0)
        for t in range(tid, C, NTH):
            if has_g:
                sm[O_G + t] = float32(g[b, t0 + t, h]) if t < n else float32(0.0)
            sm[O_BETA + t] = float32(beta[b, t0 + t, h]) if t < n else float32(0.0)
        st_rows(sm, O_Q, KS, q, b, h, t0, n, K, 0, tid, False, 0)
        st_rows(sm, O_K, KS, k, b, h, t0, n, K, 0, tid, False, 0)
        cuda.syncthreads()  # rows, gates and beta staged
        if has_g:
            for t in range(tid, C, NTH):
                acc = float32(0.0)
                for s in range(min(t, n - 1) + 1):
                    acc += sm[O_G + s]
                sm[O_B + t] = acc
                bcum[bh, t0 + t] = acc
            cuda.syncthreads()  # b_s of every row is read by the score epilogues

        # -- scores: Q Kᵀ (groups 0 .. NGS - 1) and K Kᵀ (NGS .. 2 NGS - 1), GS tiles side by side per warp --
        for grp in range(warp, 2 * NGS, NW):
            kk = grp >= NGS
            gq = grp - NGS if kk else grp
            pr = 16 * ((gq * GS) // TCS)
            pc = 8 * ((gq * GS) % TCS)
            acc = cuda.local.array(AS, float32)
            for e in range(AS):
                acc[e] = float32(0.0)
            live = min(GS, (pr + 15 - pc) // 8 + 1) if pc <= pr + 15 else 0
            if live > 0:
                ra = (O_K if kk else O_Q) + (pr + g8) * KS + i4
                rk = O_K + (pc + g8) * KS + i4  # Kᵀ[k0 + i, s] = K[s, k0 + i]
                _mma_rows(sm, acc, ra, KS, rk, 1, 8 * KS, 4, kp_rt, GS, live, three)
            for e in range(GS):
                for j in range(4):
                    t = pr + g8 + 8 * (j // 2)
                    s_ = pc + 8 * e + 2 * i4 + j % 2
                    x = float32(0.0)
                    if s_ < t or (s_ == t and not kk):
                        x = acc[4 * e + j]
                        if has_g:
                            x *= math.exp(sm[O_B + t] - sm[O_B + s_])  # b_t - b_s <= 0
                        if kk:
                            x *= sm[O_BETA + t]
                    sm[(O_LA if kk else O_AQK) + t * CS + s_] = x
        cuda.syncthreads()  # Aqk and Lkk complete; Q's rows are free (W goes there)

        # diag(beta gamma) K in place and A = (I + Lkk)^-1: r3's blocked inversion on the FMA units
        r3._wy_inverse(sm, O_K, KS, KP, O_BETA, O_B, O_LA, O_T, CS, C, NB, tid, NTH, has_g)

        # -- W = A diag(beta gamma) K: to w, and to Q's rows for Q' --
        for grp in range(warp, NGK, NW):
            pr = 16 * ((grp * GK) // TCK)
            pc = 8 * ((grp * GK) % TCK)
            acc = cuda.local.array(AK, float32)
            for e in range(AK):
                acc[e] = float32(0.0)
            ra = O_LA + (pr + g8) * CS + i4
            # A[t, s] = 0 for s > t
            _mma_rows(sm, acc, ra, CS, O_K + i4 * KS + pc + g8, KS, 8, 4 * KS, pr + 16, GK, GK, three)
            for e in range(GK):
                col = pc + 8 * e + 2 * i4
                for hf in range(2):
                    row = pr + g8 + 8 * hf
                    st2(w, (bh, t0 + row, col), (acc[4 * e + 2 * hf], acc[4 * e + 2 * hf + 1]))
                    sm[O_Q + row * KS + col] = acc[4 * e + 2 * hf]
                    sm[O_Q + row * KS + col + 1] = acc[4 * e + 2 * hf + 1]
        cuda.syncthreads()  # W complete in Q's rows
        # -- Q' = diag(gamma) Q - Aqk W (Q read again from global: its rows hold W now) --
        for grp in range(warp, NGK, NW):
            pr = 16 * ((grp * GK) // TCK)
            pc = 8 * ((grp * GK) % TCK)
            acc = cuda.local.array(AK, float32)
            for e in range(AK):
                acc[e] = float32(0.0)
            ra = O_AQK + (pr + g8) * CS + i4
            _mma_rows(sm, acc, ra, CS, O_Q + i4 * KS + pc + g8, KS, 8, 4 * KS, pr + 16, GK, GK, three)
            for e in range(GK):
                col = pc + 8 * e + 2 * i4
                for hf in range(2):
                    row = pr + g8 + 8 * hf
                    x0 = float32(0.0)
                    x1 = float32(0.0)
                    if row < n:
                        gm = math.exp(sm[O_B + row]) if has_g else float32(1.0)
                        if col < K:
                            x0 = float32(q[b, t0 + row, h, col]) * gm
                        if col + 1 < K:
                            x1 = float32(q[b, t0 + row, h, col + 1]) * gm
                    st2(qp, (bh, t0 + row, col), (x0 - acc[4 * e + 2 * hf], x1 - acc[4 * e + 2 * hf + 1]))
        cuda.syncthreads()  # W and diag(beta gamma) K are read: their rows take the U and V tiles

        # -- U = A diag(beta) V (to u, and to Q's rows), then U'' = Aqk U (to u2), VB value columns at a time --
        for vb in range(0, V, INTRA_VB):
            st_val(sm, O_K, VS, v, b, h, t0, n, V, vb, tid, True, O_BETA)
            cuda.syncthreads()  # diag(beta) V tile staged
            for grp in range(warp, NGV, NW):
                pr = 16 * ((grp * GV) // TCV)
                pc = 8 * ((grp * GV) % TCV)
                acc = cuda.local.array(AV, float32)
                for e in range(AV):
                    acc[e] = float32(0.0)
                ra = O_LA + (pr + g8) * CS + i4
                _mma_rows(sm, acc, ra, CS, O_K + i4 * VS + pc + g8, VS, 8, 4 * VS, pr + 16, GV, GV, three)
                for e in range(GV):
                    col = pc + 8 * e + 2 * i4
                    for hf in range(2):
                        row = pr + g8 + 8 * hf
                        if vb + col < V:
                            st2(u, (bh, t0 + row, vb + col), (acc[4 * e + 2 * hf], acc[4 * e + 2 * hf + 1]))
                        sm[O_Q + row * VS + col] = acc[4 * e + 2 * hf]
                        sm[O_Q + row * VS + col + 1] = acc[4 * e + 2 * hf + 1]
            cuda.syncthreads()  # the U tile complete
            for grp in range(warp, NGV, NW):
                pr = 16 * ((grp * GV) // TCV)
                pc = 8 * ((grp * GV) % TCV)
                acc = cuda.local.array(AV, float32)
                for e in range(AV):
                    acc[e] = float32(0.0)
                ra = O_AQK + (pr + g8) * CS + i4
                _mma_rows(sm, acc, ra, CS, O_Q + i4 * VS + pc + g8, VS, 8, 4 * VS, pr + 16, GV, GV, three)
                for e in range(GV):
                    col = vb + pc + 8 * e + 2 * i4
                    if col < V:
                        for hf in range(2):
                            st2(u2, (bh, t0 + pr + g8 + 8 * hf, col), (acc[4 * e + 2 * hf], acc[4 * e + 2 * hf + 1]))
            cuda.syncthreads()  # both tiles read: the next pass stages over them

    if config.ENABLE_CUDASIM:
        return cuda.jit(intra)
    return cuda.jit(intra, launch_bounds=(NTH, 2))


# ----------------------------------------------------------------------------------------------------------
# the split schedule (additive family): states first, then every chunk's output in parallel
# ----------------------------------------------------------------------------------------------------------
SCHEDULES = r3.SCHEDULES
SCHEDULE = "split"  # the default of forward(schedule=...): faster on the H200 (module docstring)
# the delta family's default: its split (r3's, with this rung's output kernel), faster on the H200 (module docstring)
DELTA_SCHEDULE = "split"
# The split schedule's kernels (read at launch: tools/tune_r3.py --vary compares them in one process). State walk:
# "tensor_cores" (_state_kernel with store) or "shared" (r3's pipelined FMA kernel, r3._split_state_kernel); output:
# "pipelined" (_out_pipe_kernel: r3's copies overlapped with the products, products on the tensor cores) or
# "staged" (_out_add_kernel: stage, barrier, multiply)
SPLIT_STATES = ("tensor_cores", "shared")
SPLIT_STATE = "shared"
SPLIT_OUTS = ("pipelined", "staged")
SPLIT_OUT = "pipelined"
# r3's overlapped launch (r3.OVERLAP: the walk and this rung's output kernel as blocks of one grid) for r6's split
# schedule: off, measured slower on the H200 (decay 1.316 against 1.282 ms: out_pipe_factory's docstring)
OVERLAP = False
SPLIT_MAX_BYTES = r3.SPLIT_MAX_BYTES  # the largest per-chunk state buffer (hs) the split schedule allocates
_gates_kernel = r3._gates_kernel  # bcum for the split schedule (r3's, which has the same schedule on the FMA units)
split_bytes = r3.split_bytes


def split_fits(K, V, C, delta, out, vin) -> bool:
    """Whether the split schedule can run: what :func:`_out_add_kernel` needs (the additive family with the
    output, float32 inputs with aligned rows), the same as the tensor-core intra kernel's."""
    return intra_tc_fits(K, V, C, delta, out, vin)


def _out_tc_layout(C, KP):
    """(KS, CS, VS, offsets of Q, R, P, the value tile, b, total floats) of :func:`_out_add_kernel`. R holds K's
    rows for the scores, then the chunk's state tile [KP, VB] (rows padded as the value tile's: B fragments read
    down a column)."""
    KS, CS, VS = KP + 4, C + 4, INTRA_VB + 8
    o_q = 0
    o_r = o_q + C * KS
    o_p = o_r + max(C * KS, KP * VS)
    o_v = o_p + C * CS
    o_b = o_v + C * VS
    return KS, CS, VS, o_q, o_r, o_p, o_v, o_b, o_b + C


@functools.lru_cache(maxsize=None)
def _out_add_kernel(C, KP, has_g, three):
    """The split schedule's output, one chunk of one head per block (fla's ``chunk_fwd_o`` in this rung's
    terms): ``O = scale (diag(gamma) Q S_c + tril(Q Kᵀ ⊙ Γ) V)`` with S_c the chunk's starting state, written by
    the state kernel (``store``) to ``hs``. :func:`_intra_add_kernel`'s scores and P V, plus Q S_c into the same
    accumulators: ``acc = Q S_c`` (K / 8 steps), ``acc *= gamma_t`` per row, ``acc += P V``, so the output never
    goes through global memory as U''."""
    NTH = INTRA_THREADS
    NW = NTH // 32
    KS, CS, VS, O_Q, O_R, O_P, O_V, O_B, _ = _out_tc_layout(C, KP)
    RB = C // 16
    TCV = INTRA_VB // 8
    GV = 4
    NGV = RB * TCV // GV
    AV = 4 * GV
    st_rows = _rows_stager(C, KP, NTH, False)
    st_val = _rows_stager(C, INTRA_VB, NTH, False)
    st_state = _rows_stager(KP, INTRA_VB, NTH, True)
    scores = _scores_tc(C, KP, NTH, has_g, three)

    def out(q, k, v, bcum, hs, o, scale):
        """Chunk x of head y: o[b, t0 + t, h, :V] for the chunk's rows t < n."""
        T, H, K = q.shape[1], q.shape[2], q.shape[3]
        V = v.shape[3]
        kp_rt = 8 * ((K + 7) // 8)
        sm = cuda.shared.array(0, float32)
        c = cuda.blockIdx.x
        bh = cuda.blockIdx.y
        b = bh // H
        h = bh % H
        tid = cuda.threadIdx.x
        warp = tid // 32
        lane = tid % 32
        g8 = lane // 4
        i4 = lane % 4
        t0 = c * C
        n = min(C, T - t0)
        if has_g:
            for t in range(tid, C, NTH):
                sm[O_B + t] = bcum[bh, t0 + t]
        st_rows(sm, O_Q, KS, q, b, h, t0, n, K, 0, tid, False, 0)
        st_rows(sm, O_R, KS, k, b, h, t0, n, K, 0, tid, False, 0)
        cuda.syncthreads()  # Q, K rows and b staged

        scores(sm, O_Q, O_R, O_P, O_B, kp_rt, tid)  # as in _intra_add_kernel
        cuda.syncthreads()  # P complete; K's rows are read: R takes the state tile
        # -- O = scale (gamma Q S_c + P V), VB value columns at a time --
        for vb in range(0, V, INTRA_VB):
            st_val(sm, O_V, VS, v, b, h, t0, n, V, vb, tid, False, 0)
            st_state(sm, O_R, VS, hs, bh, c * KP, V, vb, tid)
            cuda.syncthreads()  # the value and state tiles staged
            for grp in range(warp, NGV, NW):
                pr = 16 * ((grp * GV) // TCV)
                pc = 8 * ((grp * GV) % TCV)
                acc = cuda.local.array(AV, float32)
                for e in range(AV):
                    acc[e] = float32(0.0)
                ra = O_Q + (pr + g8) * KS + i4
                # S rows past K are zero
                _mma_rows(sm, acc, ra, KS, O_R + i4 * VS + pc + g8, VS, 8, 4 * VS, kp_rt, GV, GV, three)
                if has_g:  # gamma_t = exp(b_t) <= 1 on rows g8 and g8 + 8 of the tile
                    gm0 = math.exp(sm[O_B + pr + g8])
                    gm1 = math.exp(sm[O_B + pr + g8 + 8])
                    for e in range(GV):
                        acc[4 * e] *= gm0
                        acc[4 * e + 1] *= gm0
                        acc[4 * e + 2] *= gm1
                        acc[4 * e + 3] *= gm1
                ra = O_P + (pr + g8) * CS + i4
                # P[t, s] = 0 for s > t
                _mma_rows(sm, acc, ra, CS, O_V + i4 * VS + pc + g8, VS, 8, 4 * VS, pr + 16, GV, GV, three)
                for e in range(GV):
                    for j in range(4):
                        t = pr + g8 + 8 * (j // 2)
                        col = vb + pc + 8 * e + 2 * i4 + j % 2
                        if t < n and col < V:
                            o[b, t0 + t, h, col] = scale * acc[4 * e + j]
            cuda.syncthreads()  # both tiles are read: the next pass may stage over them

    if config.ENABLE_CUDASIM:
        return cuda.jit(out)
    return cuda.jit(out, launch_bounds=(NTH, 2))


OUT_PAD = 8  # floats after every slab row of the pipelined output kernel (_out_pipe_layout)


def _out_pipe_layout(C, KP):
    """``(SW, offsets of R, X0, Q, Aqk, b, total floats)`` of :func:`_out_pipe_kernel`: r3's output-kernel layout
    (``r3._out_layout``) with every slab row padded by 8 floats (SW = 2 C + 8). A B fragment is 4 slab rows x 8
    columns; rows of 2 C = 128 floats all start in bank 0 (a 4-way conflict per load), rows SW apart start 8 banks
    on, so the 32 lanes read 32 banks. 103.7 KB at C = 64, K' = 128: two blocks per SM, as r3's."""
    return (r3._out_shape(C, KP)[1] + OUT_PAD,) + r3._out_layout(C, KP, OUT_PAD)


@cuda.jit(device=True, inline="always")
def _mma_2x4(sm, acc, pa0, pa1, s8, pb, sb, both, three):
    """One k-step (8 of the inner dimension) of a warp's 2 x 4 tiles of 16 x 8: ``acc[16 m + 4 e : + 4] += A_m B_e``.
    A_m's fragment at ``pa0`` / ``pa1`` (A[g, i]; rows g + 8 at + ``s8``, columns i + 4 at + 4: row-major A), B_e's
    at ``pb + 8 e`` (B[i, g]; B[i + 4, g] at + 4 ``sb``: row-major B). Each B fragment is loaded and split once for
    both row tiles, each A fragment once for the 4 column tiles: 8 + 8 loads, 16 + 16 split instructions and 24
    ``mma`` (3xTF32; 8 with one TF32 product) per 8192 multiply-adds. ``both`` False skips row tile 0 (above the
    diagonal of a triangular A); it and ``three`` are warp-uniform, as ``mma.sync.aligned`` requires."""
    bb = cuda.local.array(8, float32)
    bs = cuda.local.array(8, float32)
    for e in range(4):
        b0 = ld1(sm, pb + 8 * e)
        b1 = ld1(sm, pb + 8 * e + 4 * sb)
        if three:
            x0, y0 = split_tf32(b0)
            x1, y1 = split_tf32(b1)
            bb[2 * e] = x0
            bb[2 * e + 1] = x1
            bs[2 * e] = y0
            bs[2 * e + 1] = y1
        else:
            bb[2 * e] = b0
            bb[2 * e + 1] = b1
    for m in range(2):
        if m == 1 or both:
            a0, a1, a2, a3 = _frag_a(sm, pa1 if m == 1 else pa0, s8, 4)
            if three:
                ab0, as0 = split_tf32(a0)
                ab1, as1 = split_tf32(a1)
                ab2, as2 = split_tf32(a2)
                ab3, as3 = split_tf32(a3)
            for e in range(4):
                f = 16 * m + 4 * e
                if three:
                    d0, d1, d2, d3 = mma_3xtf32_split(ab0, ab1, ab2, ab3, as0, as1, as2, as3, bb[2 * e],
                                                      bb[2 * e + 1], bs[2 * e], bs[2 * e + 1], acc[f], acc[f + 1],
                                                      acc[f + 2], acc[f + 3])
                else:
                    d0, d1, d2, d3 = mma_tf32(a0, a1, a2, a3, bb[2 * e], bb[2 * e + 1], acc[f], acc[f + 1],
                                              acc[f + 2], acc[f + 3])
                acc[f] = d0
                acc[f + 1] = d1
                acc[f + 2] = d2
                acc[f + 3] = d3


def out_pipe_fits(K, V, C, delta, out, vin) -> bool:
    """Where :func:`_out_pipe_kernel` runs: where r3's output kernel does (``r3.split_fits``: its copy maps), with
    at least two 16-row blocks (C >= 32: each warp pairs row block p with row block C / 16 - 1 - p)."""
    return r3.split_fits(K, V, C, delta, out, vin) and C >= 32


@functools.lru_cache(maxsize=None)
def _out_pipe_products(C, KP, three):
    """r6's product steps for r3's pipelined output kernel (``r3._out_pipeline``'s ``products``): ``acc = Q S_c``
    and ``acc += Aqk V`` as ``mma`` tiles (:func:`_mma_2x4`), 3xTF32 (``three``) or one TF32 product.

    Thread map: per pass of CBW = 2 C value columns the block's output [C, CBW] is (C / 16) x (CBW / 8) tiles of
    16 x 8; warp w takes row blocks p = w mod (C / 32) and C / 16 - 1 - p (the triangular Aqk V is then the same
    work for every warp: block p stops at k = 16 (p + 1), block C / 16 - 1 - p at C - 16 p) and column tiles
    4 (w // (C / 32)) .. + 3. A lane holds 2 x 4 x 4 accumulators (the C fragments: rows g, g + 8 of each row
    block, columns 2 i, 2 i + 1 of each column tile; g = lane // 4, i = lane % 4) and stores each column pair as one
    64-bit store. ``ctx``: A fragments' offsets of Q (0, 1) and Aqk (2, 3) for the two row blocks, the B fragments'
    offset in a buffer (4), the row blocks' first rows (5, 6), the first column (7), g (8), i (9)."""
    NW = (C // 4) ** 2 // 32
    KS, CS = KP + 4, C + 4
    SR, CBW = r3._out_shape(C, KP)
    RB = C // 16
    RP = RB // 2  # row-block pairs
    assert RB % 2 == 0 and NW == RP * (CBW // 32), (C, KP)
    SW, _, _, O_Q, O_AQK, O_B, _ = _out_pipe_layout(C, KP)

    @cuda.jit(device=True, inline="always")
    def tc_setup(ctx, tid):
        warp = tid // 32
        lane = tid % 32
        g8 = lane // 4
        i4 = lane % 4
        pr0 = 16 * (warp % RP)  # the warp's two row blocks
        pr1 = C - 16 - pr0
        ctx[0] = O_Q + (pr0 + g8) * KS + i4
        ctx[1] = O_Q + (pr1 + g8) * KS + i4
        ctx[2] = O_AQK + (pr0 + g8) * CS + i4
        ctx[3] = O_AQK + (pr1 + g8) * CS + i4
        ctx[4] = i4 * SW + 32 * (warp // RP) + g8  # B fragments: slab row i, column c0 + g of a buffer
        ctx[5] = pr0
        ctx[6] = pr1
        ctx[7] = 32 * (warp // RP)  # and its 4 column tiles
        ctx[8] = g8
        ctx[9] = i4

    @cuda.jit(device=True, inline="always")
    def tc_state(sm, acc, ctx, off, s):
        # the slab's SR / 8 steps written out (SR = 32, or 16 at K' = 16): every load's address is then a base
        # register plus a constant (as a loop, ptxas kept the loop and rebuilt the addresses every step)
        ka, kb = ctx[0] + s * SR, ctx[1] + s * SR
        pb = off + ctx[4]
        _mma_2x4(sm, acc, ka, kb, 8 * KS, pb, SW, True, three)
        _mma_2x4(sm, acc, ka + 8, kb + 8, 8 * KS, pb + 8 * SW, SW, True, three)
        if SR == 32:
            _mma_2x4(sm, acc, ka + 16, kb + 16, 8 * KS, pb + 16 * SW, SW, True, three)
            _mma_2x4(sm, acc, ka + 24, kb + 24, 8 * KS, pb + 24 * SW, SW, True, three)

    @cuda.jit(device=True, inline="always")
    def tc_gate(sm, acc, ctx):
        g8 = ctx[8]
        for m in range(2):
            pr = ctx[6] if m == 1 else ctx[5]
            glo = math.exp(sm[O_B + pr + g8])  # gamma_t = exp(b_t) <= 1: rows g and g + 8
            ghi = math.exp(sm[O_B + pr + g8 + 8])
            for e in range(4):
                acc[16 * m + 4 * e] *= glo
                acc[16 * m + 4 * e + 1] *= glo
                acc[16 * m + 4 * e + 2] *= ghi
                acc[16 * m + 4 * e + 3] *= ghi

    @cuda.jit(device=True, inline="always")
    def tc_value(sm, acc, ctx, off, sv):
        ka, kb = ctx[2] + sv, ctx[3] + sv
        pb = off + ctx[4]
        pr0, pr1 = ctx[5], ctx[6]
        # Aqk's row block pr1 is zero from column pr1 + 16 on, pr0's from pr0 + 16 (pr0 < pr1): steps, or row block
        # pr0's part of them, past that are skipped (pairs of steps: SR and pr multiples of 16)
        if sv < pr1 + 16:
            _mma_2x4(sm, acc, ka, kb, 8 * CS, pb, SW, sv < pr0 + 16, three)
            _mma_2x4(sm, acc, ka + 8, kb + 8, 8 * CS, pb + 8 * SW, SW, sv < pr0 + 16, three)
        if SR == 32 and sv + 16 < pr1 + 16:
            _mma_2x4(sm, acc, ka + 16, kb + 16, 8 * CS, pb + 16 * SW, SW, sv + 16 < pr0 + 16, three)
            _mma_2x4(sm, acc, ka + 24, kb + 24, 8 * CS, pb + 24 * SW, SW, sv + 16 < pr0 + 16, three)

    @cuda.jit(device=True, inline="always")
    def tc_store(o, acc, ctx, b, h, t0, n, col, V, scale):
        g8, i4 = ctx[8], ctx[9]
        for m in range(2):
            pr = ctx[6] if m == 1 else ctx[5]
            for hi in range(2):
                rw = pr + g8 + 8 * hi
                if rw < n:
                    for e in range(4):
                        cu = col + ctx[7] + 8 * e + 2 * i4
                        f = 16 * m + 4 * e + 2 * hi
                        if cu < V:  # V a multiple of 4: the whole pair
                            st2(o, (b, t0 + rw, h, cu), (scale * acc[f], scale * acc[f + 1]))

    return tc_setup, tc_state, tc_gate, tc_value, tc_store


@functools.lru_cache(maxsize=None)
def _out_pipe_kernel(C, KP, has_g, has_x, three):
    """r3's pipelined output kernel (``r3._out_pipeline``: the same copies, slabs, buffers, barriers and deferred
    start state as r3's ``_out_kernel``) with its two products on the tensor cores (:func:`_out_pipe_products`),
    slab rows padded (:func:`_out_pipe_layout`: a B fragment reads down 4 slab rows). The scores stay r3's FMA tiles
    (``r3._out_scores``, a fifth of the multiply-adds; 4 x 4 tiles of ``r3._scores`` until edce086, when this
    comparison was made): on the tensor cores (:func:`_scores_tc`)
    this kernel was slower on the H200 (decay 1.375 against 1.322 ms for the forward,
    ``probes/h200_tune_r6_pipe_2af77ac.json``).

    What changed from r3's kernel, and why: r3's products run at ~47 % of the fp32 FMA rate, issue-bound (an
    ``FFMA`` per multiply-add per lane, plus the shared loads). One ``mma.m16n8k8`` does 1024 multiply-adds; in
    3xTF32 three of them and 4 split instructions per 8 x 8 B and 8 x 16 A fragment replace 256 ``FFMA`` a warp.
    256 threads at C = 64 (8 warps), 64 at C = 32."""
    return r3._out_pipeline(C, KP, has_g, has_x, _out_pipe_products(C, KP, three), OUT_PAD)


def out_pipe_factory(precision=None):
    """The output kernel that r3's split schedule launches (``r3._split_launches``' ``out_kernel``) when r6's
    pipelined tensor-core kernel is to replace r3's FMA one: ``make(C, KP, has_g, has_x) -> (kernel, shared bytes,
    threads)``. ``precision`` as :func:`forward`'s.

    ``make.parts`` offers this kernel's products to r3's overlapped launch (``r3._overlap_kernel``: the state walk
    and the output as blocks of one grid, each chunk's output as soon as the walk has passed it) where
    :data:`OVERLAP`. Off: on the H200 at B4 T8192 H16 K=V=128, decay, r6's forward took 1.316 ms overlapped
    against 1.282 as two launches (walk + output 0.563 + 0.678 ms, one launch 1.270;
    ``figures/data/probes/h200_tune_r6_overlap_b02343f.json``). Beside the walk's FMA blocks, these blocks' mma
    and 3xTF32 splitting leave the walk, the critical path, fewer issue slots than they take from it."""
    precision = PRECISION if precision is None else precision
    if precision not in PRECISIONS:
        raise ValueError(f"rung {NAME!r}: precision must be one of {PRECISIONS}, got {precision!r}")
    three = precision == "3xtf32"

    def make(C, KP, has_g, has_x):
        smem = _out_pipe_layout(C, KP)[-1] * np.dtype(np.float32).itemsize
        return _out_pipe_kernel(C, KP, has_g, has_x, three), smem, (C // 4) ** 2

    def parts(C, KP):
        """What r3's overlapped launch (``r3._overlap_kernel``, the state walk and this output in one grid) needs:
        the products, the slab pad, the layout's floats; None (two launches) unless :data:`OVERLAP`."""
        if not OVERLAP:
            return None
        return _out_pipe_products(C, KP, three), OUT_PAD, _out_pipe_layout(C, KP)[-1]

    make.parts = parts
    return make


# ----------------------------------------------------------------------------------------------------------
# launching
# ----------------------------------------------------------------------------------------------------------
def value_tile(V: int, bv=None) -> int:
    """BV: the state kernel's value-tile width (a multiple of 8: a tile column of the mma), ``BV_DEFAULT`` unless
    given."""
    bv = BV_DEFAULT if bv is None else int(bv)
    if bv < 8 or bv % 8:
        raise ValueError(f"rung {NAME!r}: the value tile must be a positive multiple of 8, got {bv}")
    return min(bv, 8 * cdiv(max(V, 1), 8))


def forward(q, k, v, g, beta, o, h0, ht, scale, chunk_size, stream=0, bv=None, precision=None, intra=None,
            schedule=None):
    """Launch the split schedule's three kernels, or an intra kernel and the tensor-core state kernel (the rung
    contract).

    As r3: ``o=None`` means "state only" (``ht`` must be given; for the delta family ``h0`` / ``ht`` may then be
    wider than ``v``: :func:`linattn_numba.rungs.r3_shared.wide_state_columns`); ``chunk_size=None`` uses
    ``DEFAULT_CHUNK``; ``h0`` and ``ht`` may be the same array. ``bv`` overrides the value-tile width of this
    rung's state kernel (not of r3's, which the split schedule runs by default: :data:`SPLIT_STATE`);
    ``precision`` is "3xtf32" (float32 accuracy, the default :data:`PRECISION`) or "tf32" (one TF32 product per
    tile step); ``intra`` picks the fused schedule's intra kernel (:data:`INTRAS`; default :data:`INTRA` for the
    additive family, :data:`INTRA_DELTA` for the delta family). ``schedule``: "fused" (intra, then the state
    kernel with the output) or "split" (gates, the state kernel storing every chunk's starting state, then the
    output of every chunk in parallel; for the delta family r3's split, ``r3._split_delta_launches``, with this
    rung's pipelined output kernel); default :data:`SCHEDULE`, for the delta family :data:`DELTA_SCHEDULE`. "split"
    runs only where :func:`split_fits` (the delta family: r3's and :func:`out_pipe_fits`') and its buffer is at most
    :data:`SPLIT_MAX_BYTES`, else the fused schedule runs (same result within float32 error).
    """
    for _, launch in launches(q, k, v, g, beta, o, h0, ht, scale, chunk_size, stream, bv, precision, intra,
                              schedule):
        launch()


def launches(q, k, v, g, beta, o, h0, ht, scale, chunk_size, stream=0, bv=None, precision=None, intra=None,
             schedule=None):
    """``[(kernel name, launch)]``: what :func:`forward` runs, in order. Validates the arguments and allocates
    the scratch (r3's buffers; the split schedule's ``hs``)."""
    B, T, H, K = q.shape
    V = v.shape[3]
    precision = PRECISION if precision is None else precision
    if precision not in PRECISIONS:
        raise ValueError(f"rung {NAME!r}: precision must be one of {PRECISIONS}, got {precision!r}")
    intra = (INTRA_DELTA if beta is not None else INTRA) if intra is None else intra
    if intra not in INTRAS:
        raise ValueError(f"rung {NAME!r}: intra must be one of {INTRAS}, got {intra!r}")
    schedule = (SCHEDULE if beta is None else DELTA_SCHEDULE) if schedule is None else schedule
    if schedule not in SCHEDULES:
        raise ValueError(f"rung {NAME!r}: schedule must be one of {SCHEDULES}, got {schedule!r}")
    C = r3.check_launch(NAME, chunk_size, K, o, ht)
    KP = r3.padded_k(K)
    VW = r3.wide_state_columns(NAME, v, o, h0, ht, beta)  # V, or more for a state-only delta run (r4's [S | M])
    BV = value_tile(VW, bv)
    has_g, delta, out = g is not None, beta is not None, o is not None
    BH = B * H
    if BH == 0 or V == 0:
        return []
    NC = cdiv(T, C)
    vin = T > 0 and r3._rows_aligned(q, k, v)
    three = precision == "3xtf32"
    if SPLIT_STATE not in SPLIT_STATES or SPLIT_OUT not in SPLIT_OUTS:
        raise ValueError(f"rung {NAME!r}: SPLIT_STATE must be one of {SPLIT_STATES} and SPLIT_OUT one of "
                         f"{SPLIT_OUTS}, got {SPLIT_STATE!r}, {SPLIT_OUT!r}")
    # the pipelined output kernel's own conditions (it computes the additive output: for the delta family's split
    # on V_new as well), then the additive family's
    pipe_out = (SPLIT_OUT == "pipelined" and T > 0
                and out_pipe_fits(K, V, C, False, out, out and vin and r3._rows_aligned(o)))
    pipe = pipe_out and not delta
    if (schedule == "split" and SPLIT_STATE == "shared" and pipe
            and split_bytes(B, T, H, K, V, C) <= SPLIT_MAX_BYTES):  # r3's launches, with this rung's output kernel
        return r3._split_launches(q, k, v, g, o, h0, ht, scale, C, KP, NC, stream, None,
                                  out_kernel=out_pipe_factory(precision))
    if (schedule == "split" and delta and pipe_out
            and r3._split_runs(q, k, v, o, True, C, True)):  # the delta family: r3's walk, this rung's output kernel
        todo = r3._split_delta_launches(q, k, v, g, beta, o, h0, ht, scale, C, KP, NC, stream, None,
                                        out_kernel=out_pipe_factory(precision))
        if todo is not None:
            return todo
    if (schedule == "split" and T > 0 and split_fits(K, V, C, delta, out, vin)
            and split_bytes(B, T, H, K, V, C) <= SPLIT_MAX_BYTES):
        bcum = r3._scratch("bcum", (BH, NC * C), stream) if has_g else or_dummy(None, 2)
        hs = r3._scratch("hs", (BH, NC * KP, V), stream)
        dummy3 = or_dummy(None, 3)
        todo = []
        if has_g:
            todo.append(("gates", lambda: r3._gates_launch(g, bcum, C, stream)))
        smem_s = _state_layout(C, KP, BV)[-1] * np.dtype(np.float32).itemsize
        kern_s = _state_kernel(C, KP, BV, has_g, False, False, h0 is not None, ht is not None, vin, three, True)
        args_s = (q, k, v, bcum, dummy3, dummy3, dummy3, dummy3, or_dummy(h0, 4), or_dummy(ht, 4), or_dummy(None, 4),
                  np.float32(scale), hs)
        todo.append(("state", lambda: r3._launch(kern_s, (cdiv(V, BV), BH), _threads(KP, BV), smem_s, stream,
                                                 args_s)))
        if pipe:
            kern_o, smem_o, nth_o = out_pipe_factory(precision)(C, KP, has_g, False)
            args_o = (q, k, v, bcum, hs, o, np.float32(scale), or_dummy(None, 4), or_dummy(None, 2))
        else:
            kern_o, smem_o, nth_o = (_out_add_kernel(C, KP, has_g, three),
                                     _out_tc_layout(C, KP)[-1] * np.dtype(np.float32).itemsize, INTRA_THREADS)
            args_o = (q, k, v, bcum, hs, o, np.float32(scale))
        todo.append(("out", lambda: r3._launch(kern_o, (NC, BH), nth_o, smem_o, stream, args_o)))
        return todo
    if intra == "tensor_cores" and T > 0 and intra_tc_fits(K, V, C, delta, out, vin):
        bcum, w, u, qp, u2 = r3.scratch_buffers(BH, NC * C, KP, V, has_g, delta, out, stream)
        smem_a = _intra_tc_layout(C, KP)[-1] * np.dtype(np.float32).itemsize
        kern_a = _intra_add_kernel(C, KP, has_g, three)
        args_a = (q, k, v, or_dummy(g, 3), bcum, u2)
        todo = [("intra", lambda: r3._launch(kern_a, (NC, BH), INTRA_THREADS, smem_a, stream, args_a))]
    elif intra == "tensor_cores" and T > 0 and intra_delta_tc_fits(K, V, C, delta, out, vin):
        bcum, w, u, qp, u2 = r3.scratch_buffers(BH, NC * C, KP, V, has_g, delta, out, stream)
        smem_a = _intra_delta_layout(C, KP)[-1] * np.dtype(np.float32).itemsize
        kern_a = _intra_delta_kernel(C, KP, has_g, three)
        args_a = (q, k, v, or_dummy(g, 3), beta, bcum, w, u, qp, u2)
        todo = [("intra", lambda: r3._launch(kern_a, (NC, BH), INTRA_THREADS, smem_a, stream, args_a))]
    else:  # r3's intra kernel, launched by r3's own code (which allocates the scratch: the same buffers below)
        todo = [(name, fn) for name, fn in r3.launches(q, k, v, g, beta, o, h0, ht, scale, C, stream,
                                                       schedule="fused") if name == "intra"]
        bcum, w, u, qp, u2 = r3.scratch_buffers(BH, NC * C, KP, V, has_g, delta, out, stream)
    if T > 0 or ht is not None:
        smem_b = _state_layout(C, KP, BV)[-1] * np.dtype(np.float32).itemsize
        kern_b = _state_kernel(C, KP, BV, has_g, delta, out, h0 is not None, ht is not None, vin, three)
        args_b = (q, k, v, bcum, w, u, qp, u2, or_dummy(h0, 4), or_dummy(ht, 4), or_dummy(o, 4), np.float32(scale),
                  or_dummy(None, 3))
        todo.append(("state", lambda: r3._launch(kern_b, (cdiv(VW, BV), BH), _threads(KP, BV), smem_b, stream,
                                                 args_b)))
    return todo


def compile_targets():
    """``(label, py_func, argtypes)`` for the state-kernel variants at the default configuration (C = 64,
    K <= 128, BV = 64, 3xTF32): 4 recurrences x (float32 inputs, with 128-bit loads, x output or state only x h0
    x ht; float16 inputs, which change only the input loads, with h0 and ht, with and without output); plus the
    TF32 variant of each recurrence with output; the tensor-core intra kernels (both families), the split
    schedule's state and output kernels; the gates kernel.
    r3's intra kernel (the default) is compiled with r3's targets."""
    f32 = types.float32
    C, KP, BV = DEFAULT_CHUNK, MAX_K, BV_DEFAULT
    s2, s3, s4 = (array_type(np.float32, n, "C") for n in (2, 3, 4))
    a4 = array_type(np.float32, 4)
    for dtype in INPUT_DTYPES:
        x4 = array_type(dtype, 4)
        vin = dtype == np.float32
        for rec, (has_g, delta) in zip(RECURRENCES, FLAG_COMBOS):
            tag = f"{rec},{np.dtype(dtype).name}"
            for out in (True, False):
                for has_h0 in (False, True):
                    for has_ht in (False, True):
                        if not out and not has_ht:
                            continue  # state only needs ht
                        if not vin and not (has_h0 and has_ht):
                            continue  # float16 changes only the input loads: one variant with and one without o
                        yield (
                            f"state[{tag},o={int(out)},h0={int(has_h0)},ht={int(has_ht)},vec={int(vin)}]",
                            _state_kernel(C, KP, BV, has_g, delta, out, has_h0, has_ht, vin, True).py_func,
                            (x4, x4, x4, s2, s3, s3, s3, s3, a4 if has_h0 else s4, a4 if has_ht else s4,
                             a4 if out else s4, f32, s3),
                        )
            if vin:
                yield (f"state[{tag},tf32]", _state_kernel(C, KP, BV, has_g, delta, True, False, False, vin,
                                                           False).py_func,
                       (x4, x4, x4, s2, s3, s3, s3, s3, s4, s4, a4, f32, s3))
                if not delta:  # the tensor-core intra kernel (additive family, float32 aligned inputs)
                    yield (f"intra_tc[{rec}]", _intra_add_kernel(C, KP, has_g, True).py_func,
                           (x4, x4, x4, array_type(np.float32, 3) if has_g else s3, s2, s3))
                    # the split schedule: the state kernel storing S_c (with h0 and ht), the output kernel
                    yield (f"state[{tag},split]", _state_kernel(C, KP, BV, has_g, False, False, True, True, vin, True,
                                                                True).py_func,
                           (x4, x4, x4, s2, s3, s3, s3, s3, a4, a4, s4, f32, s3))
                    yield (f"out_tc[{rec}]", _out_add_kernel(C, KP, has_g, True).py_func, (x4, x4, x4, s2, s3, a4, f32))
                    # the pipelined output kernel: 3xTF32 and TF32, and with the deferred start state (r4's phase 3)
                    for three, x_t, lab in ((True, s4, ""), (False, s4, ",tf32"), (True, a4, ",x")):
                        yield (f"out_pipe[{rec}{lab}]", _out_pipe_kernel(C, KP, has_g, x_t is a4, three).py_func,
                               (x4, x4, x4, s2, s3, a4, f32, x_t, s2))
                else:  # the delta family's tensor-core intra kernel
                    yield (f"intra_tc[{rec}]", _intra_delta_kernel(C, KP, has_g, True).py_func,
                           (x4, x4, x4, array_type(np.float32, 3) if has_g else s3, array_type(np.float32, 3), s2, s3,
                            s3, s3, s3))
    i1 = types.Array(types.int32, 1, "C")
    yield ("gates[float32]", _gates_kernel(C).py_func, (array_type(np.float32, 3), s2, i1))
    yield ("gates[float16]", _gates_kernel(C).py_func, (array_type(np.float16, 3), s2, i1))
