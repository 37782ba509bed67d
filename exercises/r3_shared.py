"""Exercise r3 ``shared``: the chunkwise algorithm of r2 in two fused kernels, operands in shared memory, results
in 4x4 register tiles.

Your job
    Fill in the two kernel bodies below (``# TODO(r3, 1)`` in ``intra``, ``# TODO(r3, 2)`` in ``state``) and the
    device functions ``_scores`` (``# TODO(r3, 1a)``, the intra kernel's step 3) and ``_wy_inverse``
    (``# TODO(r3, 1b)``, the delta rule's solve the intra kernel calls). The math
    is r2's, :func:`linattn_numba.reference.chunked` (read its docstring, and ``notebooks/r3_shared.py`` sections
    1-3); what changes is where the intermediates live. r2 ran five kernels and passed every intermediate through
    global memory (a 512 MiB buffer of chunk states at the standard shape); here

    * ``intra`` does, for every chunk in parallel, all that does not depend on the carried state: the gates, the
      scores, the WY solve and the state-free parts of the output, entirely in shared memory;
    * ``state`` walks the chunks of one head in order with the state in registers and writes the output as it
      goes (the *fused output*): a chunk's starting state never leaves the SM.

    The launches (:func:`forward`, :func:`launches`), the shared-memory layouts (``_intra_layout``,
    ``_state_layout``), the compile-time constants of the kernel factories and the device helpers are given --
    keep them as they are; they fix the thread maps the TODOs describe. Read the helpers first, they are what
    your kernels call:

    ``ld4(a, i)`` / ``st4(a, i, x)``  four consecutive floats as ONE 128-bit load / store (``i`` an index or a
        tuple; on the GPU an intrinsic, since Numba alone emits four 32-bit accesses; 16-byte alignment needed:
        every offset and row stride of the layouts is a multiple of 4 floats).
    ``ld1(a, i)``  ``a[i]`` for an index known to be in range: no negative-index check, so a loop over
        ``ld1(sm, p + m * stride)`` compiles to loads at immediate offsets from one pointer (the solve's
        scalar loads; plain ``sm[i]`` is correct too, only slower).
    ``_mm_nn``  the register-blocked 4x4 micro-tile: ``acc[4 i + j] += sum_m A[rr + rstep i, m] B[m, c0 + j]``,
        per 4 steps of m: 4 + 4 ``ld4`` and 64 FMAs. Every product [C, m] x [m, cols] of this rung is one call per
        4x4 output tile; the scores and the state update you write by hand in the same pattern.
    ``_stage_input`` / ``_stage_input4`` / ``_stage_scratch``  a [rows, cols] tile of an input [B, T, H, n] or of a
        scratch array [B H, T', n] into shared memory, zero-padded past the sequence and past n, with many loads
        in flight per thread (optionally scaling row t by ``sm[soff + t]``); ``_store_tile`` a row of a 4x4 tile
        to scratch; ``_chunk_gates`` a chunk's gamma_t and gamma_C / gamma_t; ``_chunk_prefetcher`` L2 prefetch.

    Part 1, the additive recurrences (plain, decay): in ``intra`` the staging, the gates, Aqk and U'' = Aqk V; in
        ``state`` Q S, the output and the update. Grade with ``--case plain`` and ``--case decay``.
    Part 2, the delta rule (delta, gated_delta): in ``intra`` Lkk, A = (I + Lkk)^-1 in 16 x 16 blocks (in
        ``_wy_inverse``), W, U, Q' = diag(gamma) Q - Aqk W and U'' = Aqk U; in ``state`` [W; Q'] S,
        V_new = U - W S, and K staged with the chunk into a third row block.

The pipeline (``forward`` launches them in this order), in the notation of the reference: in-chunk cumulative
log-gates ``b_t``, ``gamma_t = exp(b_t)``, ``Gamma_ts = exp(b_t - b_s)``, C = the chunk size::

    intra   per chunk, parallel: b, Aqk = tril(Q K^T ⊙ Gamma); delta: Lkk = tril(diag(beta)(K K^T ⊙ Gamma), -1),
            A = (I + Lkk)^-1, W = A diag(beta gamma) K, U = A diag(beta) V, Q' = diag(gamma) Q - Aqk W;
            U'' = Aqk U (delta) or Aqk V (additive)
                                                   -> bcum [B H, T'], w, qp [B H, T', K'], u, u2 [B H, T', V]
    state   per head and value tile, sequential over chunks: X = [W; Q'] S (delta) or Q S (additive),
            V_new = U - W S (or V), o = scale (Q' S + U'') (or scale (diag(gamma) Q S + U'')),
            S <- gamma_C S + K^T diag(gamma_C / gamma) V_new

    The output identity behind the fusion: O = scale (diag(gamma) Q S + Aqk (U - W S)) = scale (Q' S + U''),
    with Q' and U'' free of S -- so the state pass needs one product [W; Q'] S per chunk for both V_new and O.

(T' = T rounded up to whole chunks, K' = KP = K rounded up to a power of two >= 16. Rows past T and columns past K
are zero in shared memory, so no product needs a bounds test -- keep them zero.) ``forward`` skips ``intra`` for
the plain recurrence without output. ``o=None`` (state only, used by rung r4; the grader always passes an
output) makes ``out`` False: then no Aqk, Q', U'' and no output product.

Memory-traffic budget to aim for (what the package's rung moves; bytes to and from global memory, each array
once, cached re-reads not counted). At B=4 T=8192 H=16 K=V=128, C=64, BV=64, float32: ``intra`` reads q, k, v
(768 MiB) and writes u2 (256 MiB), for the delta rule also w, u, qp (768 MiB); ``state`` reads k, q (or w and
qp), v (or u) and u2 -- 1 GiB, 1.25 GiB for the delta rule, once per value tile (2 tiles; the second read mostly
hits L2) -- and writes o (256 MiB). About 2.3 GiB for the additive recurrences and 3.3 GiB for the delta rule
(r2: 3 GiB and 4.8 GiB), against 1 GiB of inputs and output. Nothing else goes to global memory: no chunk state,
no score matrix, no A. FLOPs as executed, per token-head: about 91 k (additive), 167 k (delta).
The napkin-math section of ``notebooks/r3_shared.py`` computes them per kernel (``r3_budget``; it also counts
the state kernel's re-reads per value tile).

Resources the package's rung fits in (ptxas for sm_90, float32, C = 64, K' = 128): ``intra`` 256 threads, 108 KB
of shared memory, 2 blocks per SM (launch bounds (256, 2): at most 128 registers); ``state`` 512 threads, 118 KB,
1 block per SM (launch bounds (512, 1): at most 128 registers). Keep every ``cuda.local.array`` indexed only by
counters of ``range()`` loops with constant trip counts (4, 16): then it lives in registers; any other index
moves it to (slow) local memory -- the package's kernels use none (``linattn-numba compile-check shared``).

Rules that hold in both kernels: accumulate in float32 (``float32(0.0)``; the staging helpers convert float16
inputs, a direct read of q needs ``float32(...)``); every exponent is a difference ``<= 0`` of in-chunk
cumulative gates, never ``exp(b_t) * exp(-b_s)``; entries above a chunk's diagonal are never computed, zeros are
written where the layout needs them; every thread of the block reaches every barrier (guard loads and stores,
never ``return`` early); the summation order is fixed -- no atomics.

Grade it
    linattn-numba grade exercises/r3_shared.py --case plain    # part 1 (then --case decay)
    linattn-numba grade exercises/r3_shared.py --quick         # 4 cases, one per recurrence
    linattn-numba grade exercises/r3_shared.py                 # all cases (chunk_size 16, T up to 70)

    As given (the kernel bodies are ``pass``) every case FAILS with "some outputs never written". A case that
    hangs (a barrier not every thread reaches) is stopped after ``--timeout`` seconds and reported. The grader
    uses C = 16: ``intra`` then runs 16 threads (half a warp), ``state`` (K'/4)(BV/4).

    C = 16 is ONE 16 x 16 block of the inverse: step 5b of TODO(r3, 1) never runs in the graded cases. Check the
    delta rule at the larger chunks too (a second or two in the simulator; drop the first line on a GPU)::

        python - <<'EOF'
        from linattn_numba import sim; sim.enable()
        from linattn_numba import grade, grading_cases
        mod = grade.load_module("exercises/r3_shared.py")
        case = grading_cases.Case("gated_delta", (1, 70, 1, 12, 16))
        for C in (32, 64):
            r = grading_cases.run_case(mod, case, chunk_size=C)
            print(f"C = {C}:", "PASS" if r.passed else "FAIL", r.err_o, r.err_ht, *r.hints)
        EOF

Afterwards
    Compare with ``src/linattn_numba/rungs/r3_shared.py`` (its module docstring explains every choice and how the
    tiles were tuned); on a GPU, ``linattn-numba bench --rungs chunked,shared`` shows what the fusion buys.
"""

from __future__ import annotations

import functools
import math  # noqa: F401 - your kernels need math.exp

import numpy as np
from numba import config, cuda, float32, types

from linattn_numba._common import FLAG_COMBOS, INPUT_DTYPES, array_type, cdiv, or_dummy
from linattn_numba.reference import RECURRENCES

NAME = "shared"
MAX_K = 128  # the intra kernel stages K and Q rows of a chunk whole: C x (K + 4) floats each
MAX_V = None  # V is tiled by both kernels

CHUNK_SIZES = (16, 32, 64)
DEFAULT_CHUNK = 64  # used when chunk_size is None (the decode path)
WIDE_TILE = 64  # intra kernel: columns of [W | U] (and Q', U'') per register-blocked pass
SMEM_STATIC_LIMIT = 48 * 1024  # above this a kernel must opt in to more dynamic shared memory
STATE_REGS_BLOCKS = 512  # launch bounds: threads per SM the register allocation must allow (<= 128 regs each)
BATCH = 8  # global loads a staging loop keeps in flight per thread (32-bit loads)
QBATCH = 8  # the same for 128-bit loads (32 registers)
QBUF = 4 * QBATCH  # floats those hold (array shapes must be plain constants)
INTRA_MIN_BLOCKS = 2  # launch bounds: intra blocks per SM (2 x 256 threads, 2 x 108 KB shared at C = 64)

# Tile table: value-tile width BV of the state kernel, per (chunk size, padded K), from tools/tune_r3.py on the
# H200 at B4 T8192 H16 K=V=128 (candidates C in {32, 64} x BV in {16, 32, 64}; see the package rung's docstring).
# V narrower than BV uses the smallest multiple of 4 >= V.
BV_TABLE = {
    (32, 128): 64,
    (64, 128): 64,
}
BV_DEFAULT = 64


# ==========================================================================================================
# Given: the building blocks your kernels call, imported from the package's rung (one implementation for the
# rung and the skeleton): 128-bit accesses (ld4, st4, prefetch_l2 from linattn_numba.vec; from there too exp_approx,
# the package's one-instruction exponential, where math.exp is just as right), the 4x4 micro-tile
# product _mm_nn (and _mm_nn8: 8 steps of the inner dimension per loop step, its loads first; kdim a multiple of
# 8), the 8-step pieces written out twice per loop step by the package's loops (_scores_step8: 8 steps of the
# additive scores, which your _scores may call; _p2_rows8: 8 rows of the state update, which your step 5 may
# call; _mm_4x8_step), the tile-to-thread map _quad_map (4 x 8 tiles per warp: one shared wavefront per load),
# the staging loops
# _stage_input / _stage_input4 / _stage_scratch and the fixed-map stagers
# _rows_stager (every size a constant; the factories below build them where _stager_fits), _store_tile, a chunk's
# gates _chunk_gates, and the state kernel's one-call staging _stage_chunk (its fixed-map version: _chunk_stager)
# and L2 prefetch of the next chunk _chunk_prefetcher (built on _lines_prefetcher and _line_request). Read them in
# src/linattn_numba/rungs/r3_shared.py (or with inspect.getsource); the launch code below also uses the package's
# _launch, _rows_aligned and scratch_buffers. The split schedule's pieces (_gates_kernel, its grid _gates_grid and
# its launch _gates_launch, _split_state_kernel with its tilings split_tile / split_state_threads / _p2_rows4_tall
# and its walk _split_state_body (its state update: _walk_update), _out_kernel: the slab pipeline _out_pipeline /
# _out_body with
# r3's products _out_fma_products (its loops _mm_4x8_loop, their steps _mm_4x8_stepper, the letters of OUT_TRI
# read by _out_tri) and its scores _out_scores (each half of the block over half of d:
# _half_scores_stepper / _send / _finish),
# their copiers _rows_copier / _rows_copier_at / _rows_scaler / _rows_adder, the walk and the output in one launch
# _overlap_kernel with overlap_bytes, _flags, _zero_flags and _backoff, _split_runs, _split_launches, and
# split_deferred, r4's phases 1 and 3; the delta family's walk _split_delta_kernel with _split_delta_layout and its
# launches _split_delta_launches) are given whole: the exercise's forward runs the fused schedule.
# ==========================================================================================================
from linattn_numba.rungs.r3_shared import (  # noqa: E402,F401
    _backoff,
    _flags,
    _half_scores_finish,
    _half_scores_send,
    _half_scores_step,
    _half_scores_step_lo,
    _half_scores_stepper,
    _mm_4x8_loop,
    _mm_4x8_stepper,
    _out_body,
    _out_scores,
    _overlap_kernel,
    _split_delta_kernel,
    _split_delta_launches,
    _split_delta_layout,
    _split_state_body,
    _walk_update,
    _zero_flags,
    overlap_bytes,
    _chunk_gates,
    _chunk_prefetcher,
    _chunk_stager,
    _gates_grid,
    _gates_kernel,
    _gates_launch,
    _mm_4x8,
    _mm_4x8_step,
    _out_fma_products,
    _out_kernel,
    _out_layout,
    _out_pipeline,
    _out_shape,
    _out_tri,
    _p2_rows4_tall,
    _p2_rows8,
    _rows_adder,
    _rows_copier,
    _rows_copier_at,
    _rows_scaler,
    _split_launches,
    _split_runs,
    _split_state_kernel,
    _split_state_layout,
    check_launch,
    _launch,
    _line_request,
    _lines_prefetcher,
    _mm_nn,
    _mm_nn8,
    _quad_map,
    _rows_aligned,
    _rows_stager,
    _scores_step8,
    _scratch,
    _scratch_key,
    _stage_chunk,
    _stage_input,
    _stage_input4,
    _stage_scratch,
    _stager_fits,
    _store_tile,
    scratch_buffers,
    split_bytes,
    split_deferred,
    split_deferred_fits,
    split_fits,
    split_state_threads,
    split_tile,
    wide_state_columns,
)
from linattn_numba.vec import exp_approx, ld1, ld4, prefetch_l2, st4  # noqa: E402,F401


# ----------------------------------------------------------------------------------------------------------
# kernel A: everything inside one chunk (fully parallel over chunks and heads) -- TODO(r3, 1) is yours
# ----------------------------------------------------------------------------------------------------------
def _intra_layout(C, KP):
    """Offsets (in floats) of the intra kernel's shared arrays, and the total size."""
    KS, CS, RS = KP + 4, C + 4, min(WIDE_TILE, KP) + 4
    o_k = 0  # K rows [C, KS]; later (delta) diag(beta gamma) K; then the U tile [C, RS]
    o_q = o_k + C * KS  # Q rows [C, KS]; after the scores: the staged right-hand tile [C, RS]
    o_aqk = o_q + C * max(KS, RS)  # Aqk [C, CS]
    o_la = o_aqk + C * CS  # Lkk, then A = (I + Lkk)^-1 in place [C, CS]
    o_t = o_la + C * CS  # blocked inversion: diagonal-block columns [16, C], then the T_IJ of a block row
    o_b = o_t + max(C // 16 - 1, 1) * 256 + 16 * C  # in-chunk cumulative log-gates b_t
    o_beta = o_b + C
    o_g = o_beta + C
    return o_k, o_q, o_aqk, o_la, o_t, o_b, o_beta, o_g, o_g + C


@cuda.jit(device=True, inline="always")
def _wy_inverse(sm, O_K, KS, KP, O_BETA, O_B, O_LA, O_T, CS, C, NB, tid, NTH, has_g):
    """The delta rule's in-chunk solve, in shared memory, by the whole block (it synchronises): K's rows
    scaled to diag(beta gamma) K in place, and the strictly lower Lkk at O_LA replaced by A = (I + Lkk)^-1
    (O_T: scratch of max(NB - 1, 1) 256 + 16 C floats). The intra kernel calls it after its step 3."""
    # TODO(r3, 1b): steps 4 and 5 of TODO(r3, 1), by the whole block (the arguments are the intra kernel's
    #   offsets and constants; NB = C / 16 block rows of the inverse, NTH threads, tid this thread's index).
    # 4. diag(beta gamma) K in place: sm[O_K + t * KS + d] *= beta_t * exp(b_t) (exp only if has_g) for
    #    t < C, d < KP (flat index e = tid, tid + NTH, ... < C * KP). Only W reads K from now on. No barrier
    #    yet: step 5 works on other regions, and its first barrier comes before W reads K.
    # 5. A = (I + Lkk)^-1, in place over Lkk (O_LA), in 16 x 16 blocks (NB = C / 16 block rows). A is
    #    unit lower triangular; r2 solved C rows one after the other, here the blocks go in parallel:
    #    5a. Diagonal blocks, all at once: thread tid < C solves column jc = tid % 16 of the inverse of diagonal
    #        block dblk = tid // 16 by forward substitution,
    #          x_i = [i == jc] - sum_{m < i} L[i, m] x_m,   L[i, m] = sm[O_LA + (16 dblk + i) * CS + 16 dblk + m],
    #        keeping x_i in shared memory at sm[O_T + i * C + tid] (x_m is read back for every later i: a register
    #        array indexed by m < i would need the loops fully unrolled, else it goes to local memory).
    #        cuda.syncthreads()  -- protects: every diagonal block of L is read before any is overwritten.
    #        Then copy the column back into the block, rows i = jc .. 15 (the rest of A_II stays 0).
    #        cuda.syncthreads()  -- protects: every A_II is in place before the block rows read them.
    #    5b. Block rows bi = 1 .. NB - 1, in order (each reads A of the rows above), for every bj < bi:
    #          A_IJ = -A_II sum_{J <= M < I} L_IM A_MJ          (I = bi, J = bj: 16 x 16 blocks)
    #        First the sum: entries e = tid, tid + NTH, ... < bi * 256 (bj = e // 256, r = (e // 16) % 16,
    #        cc = e % 16), sm[O_T + e] = sum_{m = 16 bj}^{16 bi - 1} LA[16 bi + r, m] * LA[m, 16 bj + cc], with
    #        LA[x, y] = sm[O_LA + x * CS + y]: block row bi, left of its diagonal block, still holds L; the block
    #        rows above already hold A.
    #        cuda.syncthreads()  -- protects: all of T is written, and block row bi of L read, before it is
    #        overwritten.
    #        Then the same entries, A_IJ = -A_II T_J:
    #          LA[16 bi + r, 16 bj + cc] = -sum_{m <= r} LA[16 bi + r, 16 bi + m] * sm[O_T + 256 bj + 16 m + cc]
    #        (A_II is lower triangular: m <= r).
    #        cuda.syncthreads()  -- protects: block row bi of A is complete before block row bi + 1 reads it.
    #    Check against reference.chunked (A = (I + L)^-1; padded rows come out as rows of I), and at C = 32
    #    and 64 (the module docstring shows how): the graded C = 16 has NB = 1, so 5b never runs there. That is
    #    2 + 2 (NB - 1) barriers in all (r2: one thread per column of [W | U], C dependent rows in sequence).
    pass


@cuda.jit(device=True, inline="always")
def _scores(sm, O_K, O_Q, O_AQK, O_LA, O_B, O_BETA, KS, CS, C4, KP, tid, has_g, delta, out):
    """The intra kernel's scores: Aqk[t, s] = (Q K^T)[t, s] Gamma_ts for s <= t at sm[O_AQK + t CS + s] (``out``)
    and Lkk[t, s] = beta_t (K K^T)[t, s] Gamma_ts for s < t at sm[O_LA + t CS + s] (``delta``), 0 above; K's and
    Q's rows at O_K, O_Q (stride KS, KP columns), b_t at O_B, beta_t at O_BETA. The caller syncs before and after."""
    # TODO(r3, 1a): step 3 of TODO(r3, 1), register-blocked: (tr, tc) = divmod(tid, C4); the thread owns the 4x4
    #    micro-tile of rows t = tr + C4 i and columns s = tc + C4 j (i, j < 4) of Aqk (out) and of Lkk (delta). Strided, not
    #    contiguous: threads with consecutive tc read consecutive K rows (KS apart: different banks), threads with
    #    the same tr read the same Q row (a broadcast). Accumulators: cuda.local.array(16, float32), one per
    #    matrix, zeroed; and 16-float arrays for the loaded rows. For d in range(0, KP, 4):
    #      kc[4 j + f] = ld4(sm, O_K + (tc + C4 j) * KS + d)[f]     the 4 column rows: 4 float4
    #      qr[4 i + f] from O_Q, row tr + C4 i (out);  kr[4 i + f] from O_K, row tr + C4 i (delta)
    #      acc_qk[4 i + j] += qr[4 i + f] * kc[4 j + f]  (and acc_kk with kr)  for i, j, f < 4 -- 64 FMAs for
    #      8 loads; one set of column loads feeds both matrices.
    #    Then for each entry: dec = exp(sm[O_B + t] - sm[O_B + s]) if has_g and s <= t, else 1 (the
    #    difference is <= 0: never evaluate it above the diagonal, where it is positive and may overflow);
    #      sm[O_AQK + t * CS + s] = acc_qk * dec if s <= t else 0                        (out)
    #      sm[O_LA + t * CS + s]  = sm[O_BETA + t] * acc_kk * dec if s < t else 0         (delta)
    pass


@functools.lru_cache(maxsize=None)
def _intra_kernel(C, KP, has_g, delta, out, vin):
    C4 = C // 4
    NTH = C4 * C4  # one 4x4 tile of the [C, C] score matrices per thread
    CB = min(WIDE_TILE, KP)
    CB4 = CB // 4
    NTILE = C4 * CB4  # 4x4 tiles of a [C, CB] product
    NB = C // 16  # 16 x 16 blocks of the inversion
    KS, CS, RS = KP + 4, C + 4, CB + 4
    O_K, O_Q, O_AQK, O_LA, O_T, O_B, O_BETA, O_G, _ = _intra_layout(C, KP)
    # fixed-map stagers (_rows_stager) where they fit with at most 8 loads of 16 bytes in flight per thread (C = 64:
    # 8 for the K and Q rows, 4 for a value tile; C = 32 would need 16, C = 16 does not fit)
    FAST = (vin and _stager_fits(KP, NTH) and _stager_fits(CB, NTH) and cdiv(C * KP // 4, NTH) <= QBATCH
            and cdiv(C * CB // 4, NTH) <= QBATCH)
    if FAST:
        st_rows = _rows_stager(C, KP, NTH, False)  # K, Q
        st_val = _rows_stager(C, CB, NTH, False)  # a value tile, rows times beta (delta rule)

    def intra(q, k, v, g, beta, bcum, w, u, qp, u2):
        """One chunk c (x) of one head bh (y): gates, scores, and (delta rule) the WY solve.

        bcum[bh, t]     in-chunk cumulative log-gate b_t (padded rows: b of the last token)
        w[bh, t, :KP]   W = A diag(beta gamma) K                       (delta)
        u[bh, t, :V]    U = A diag(beta) V                             (delta)
        qp[bh, t, :KP]  Q' = diag(gamma) Q - Aqk W                     (delta, output)
        u2[bh, t, :V]   U'' = Aqk U (delta) or Aqk V (additive)        (output)
        with A = (I + Lkk)^-1, Lkk = tril(diag(beta)(K K^T ⊙ Gamma), -1), Aqk = tril(Q K^T ⊙ Gamma).
        Rows t of a chunk past the sequence's end are zero-padded: they produce zeros.
        """
        # TODO(r3, 1): one block = one chunk c = cuda.blockIdx.x of one head bh = cuda.blockIdx.y (b = bh // H,
        #   h = bh % H). forward launches grid (NC, B H), NTH = (C / 4)^2 threads (16 at C = 16, 256 at C = 64) and
        #   _intra_layout(C, KP)[-1] floats of dynamic shared memory: sm = cuda.shared.array(0, float32) is ONE flat
        #   array, each region at one of the factory's offsets O_K, O_Q, O_AQK, O_LA, O_T, O_B, O_BETA, O_G (read
        #   _intra_layout: which region is reused for what, and when). Row strides KS = KP + 4, CS = C + 4,
        #   RS = CB + 4: a multiple of 4 floats keeps every ld4 / st4 16-byte aligned, and the +4 puts consecutive
        #   rows 4 banks apart, so the different rows a warp reads do not collide in one bank.
        #   T, H, K = q.shape[1], q.shape[2], q.shape[3]; V = v.shape[3]; vec_v = V % 4 == 0 (rows of u and u2 are
        #   then 16-byte aligned: 128-bit stores). tid = cuda.threadIdx.x; t0 = c * C; n = min(C, T - t0) rows are
        #   tokens, rows n .. C - 1 padding: every staged operand is zero there (the helpers do it), so the products
        #   need no bounds tests.
        #   Barriers: every thread reaches every one. The one early return allowed: `if not (delta or out): return`
        #   after step 2 (decay without output: only bcum is needed), where no barrier follows.
        # Part 1 (plain, decay) is steps 1, 2, 3 (Aqk) and 7 (U''); part 2 adds Lkk in 3, steps 4-6 and U in 7.
        #
        # 1. Stage. For t = tid, tid + NTH, ... < C: sm[O_G + t] = g[b, t0 + t, h] (has_g) and sm[O_BETA + t] =
        #    beta[b, t0 + t, h] (delta), float32, 0 for t >= n. K rows (if delta or out) into O_K and Q rows (if out)
        #    into O_Q, [C, KP] at row stride KS, e.g.  _stage_input(sm, O_K, KS, k, b, h, t0, n, K, 0, C, KP, tid,
        #    NTH, False, 0)  -- _stage_input4, same arguments, when vin (128-bit loads of aligned float32 rows);
        #    when FAST, the factory's st_rows(sm, O_K, KS, k, b, h, t0, n, K, 0, tid, False, 0) does it with every size
        #    a constant (and st_val(sm, O_Q, RS, v, b, h, t0, n, V, vb, tid, delta, O_BETA) a value tile, step 7).
        #    cuda.syncthreads()  -- protects: the staged rows are complete before any thread reads them.
        # 2. Gates (has_g). For t = tid, tid + NTH, ... < C: b_t = sum of sm[O_G + s] for s = 0 .. min(t, n - 1)
        #    (padded rows get the last token's b: g is 0 there); store it in sm[O_B + t] and in bcum[bh, t0 + t]
        #    (the state kernel reads it).
        #    cuda.syncthreads()  -- protects: the scores read b_s of rows other threads summed.
        # 3. Scores: _scores(sm, O_K, O_Q, O_AQK, O_LA, O_B, O_BETA, KS, CS, C4, KP, tid, has_g, delta, out), the
        #    device function above this kernel, also yours (TODO(r3, 1a)): Aqk (out) and Lkk (delta) into shared
        #    memory. (The package's split schedule calls it from its output kernel too.)
        #    cuda.syncthreads()  -- protects: Aqk and Lkk are complete before any product reads them. From here on
        #    the Q rows are dead: O_Q becomes a [C, RS] tile (W, then the staged V).
        # 4-5. (delta) _wy_inverse(sm, O_K, KS, KP, O_BETA, O_B, O_LA, O_T, CS, C, NB, tid, NTH, has_g): the device
        #    function above this kernel, also yours (TODO(r3, 1b)): diag(beta gamma) K in place and
        #    A = (I + Lkk)^-1 over Lkk. It synchronises, so every thread calls it (inside `if delta:`, which is
        #    the same for the whole block).
        # 6. (delta) W = A diag(beta gamma) K and (out) Q' = diag(gamma) Q - Aqk W, CB = min(64, KP) columns at a
        #    time: for kb in range(0, KP, CB), 4x4 tiles of the [C, CB] product, contiguous rows:
        #      for tile in range(tid, NTILE, NTH): rr = tile // CB4, cc = tile % CB4; acc = 0 (a 16-float array);
        #        _mm_nn(sm, acc, O_LA, CS, O_K + kb, KS, 4 * rr, 1, cc * 4, 4 * rr + 4)
        #      The inner dimension stops at 4 rr + 4: A is lower triangular, its columns past the tile's last row are
        #      zero (the reason for contiguous rows here). For each row r = 4 rr + i: store it,
        #      _store_tile(w, bh, t0 + r, kb + cc * 4, KP, acc, i, True), and with out keep it in shared memory too,
        #      st4(sm, O_Q + r * RS + cc * 4, (acc[4 i], acc[4 i + 1], acc[4 i + 2], acc[4 i + 3])).
        #    With out: cuda.syncthreads()  -- protects: the W tile is complete before the Q' product reads it. Then
        #      the same tiles of Aqk W: _mm_nn(sm, acc, O_AQK, CS, O_Q, RS, 4 * rr, 1, cc * 4, 4 * rr + 4), and per
        #      entry (col = kb + cc * 4 + j): x = float32(q[b, t0 + r, h, col]) * exp(sm[O_B + r]) (exp only with g)
        #      if r < n and col < K else 0, acc[4 i + j] = x - acc[4 i + j]; _store_tile(qp, bh, t0 + r, kb + cc * 4,
        #      KP, acc, i, True).  (q is read again from global memory: its shared rows are gone.)
        #      cuda.syncthreads()  -- protects: the next kb's W tile overwrites this one only after every Q' is done.
        # 7. The value columns, CB at a time: for vb in range(0, V, CB):
        #      stage V columns vb .. vb + CB - 1 into O_Q at stride RS, rows times beta_t for the delta rule:
        #        _stage_input(sm, O_Q, RS, v, b, h, t0, n, V, vb, C, CB, tid, NTH, delta, O_BETA)  (or _stage_input4)
        #      cuda.syncthreads()  -- protects: the staged tile is complete.
        #      (delta) U = A diag(beta) V: tiles as in step 6 with _mm_nn(sm, acc, O_LA, CS, O_Q, RS, 4 * rr, 1,
        #        cc * 4, 4 * rr + 4); _store_tile(u, bh, t0 + r, vb + cc * 4, V, acc, i, vec_v and vb + cc * 4 < V)
        #        (128-bit stores only where the 4 columns exist); with out also st4 into O_K + r * RS + cc * 4 (the K
        #        rows are dead after step 6). cuda.syncthreads()  -- protects: the U tile is complete (and the staged
        #        tile is free again).
        #      (out) U'' = Aqk U (delta: right factor at O_K) or Aqk V (additive: at O_Q): _mm_nn(sm, acc, O_AQK, CS,
        #        rhs, RS, 4 * rr, 1, cc * 4, 4 * rr + 4); _store_tile(u2, ...) like u.
        #      Additive: cuda.syncthreads()  -- protects: the next vb's staging overwrites the tile U'' reads. (Not
        #        needed for the delta rule: the next staging writes O_Q, which U'' does not read, and the next U
        #        tile is written to O_K only after the next staging barrier.)
        # Memory traffic (budget in the module docstring): q, k, v, g, beta read once, bcum, w, u, qp, u2 written
        #   once -- nothing else. Aqk, Lkk and A never leave shared memory. In the 4x4 pattern each 128-bit shared
        #   load feeds 8 FMAs (r2's tiled matmul: two 32-bit shared loads per FMA).
        pass

    if config.ENABLE_CUDASIM:
        return cuda.jit(intra)
    return cuda.jit(intra, launch_bounds=(NTH, INTRA_MIN_BLOCKS))


# ----------------------------------------------------------------------------------------------------------
# kernel B: the sequential pass over chunks, state in registers, output fused -- TODO(r3, 2) is yours
# ----------------------------------------------------------------------------------------------------------
def _p1_split(C, KP, delta, out):
    """KSPLIT: the parts into which the additive state kernel splits P1's inner dimension K' (1: no split).

    P1 of the additive family, X = Q S, is [C, K'] x [K', BV]: C BV / 16 micro-tiles for (K' / 4)(BV / 4) threads,
    so at C < K' only C / K' of the threads would have a tile and the rest would wait at the next barrier (half
    of the state kernel's time for decay at C = 64, K' = 128: ``figures/data/h200_ncu_src_d3650db_1.csv``).
    Split K' into K' / C parts instead: every thread computes one tile over C of the K' columns, and the parts are
    summed from shared memory by all threads. The delta family's P1 [W; Q'] has 2C rows (every thread busy) or,
    state only, C rows whose sum V_new the same phase must finish: not split."""
    return KP // C if (out and not delta and KP > C) else 1


def _state_layout(C, KP, BV, delta=False, out=False):
    """Offsets (floats) of the state kernel's shared arrays and the total; ``delta``, ``out`` as the kernel's."""
    KS, VS = KP + 4, BV + 4
    nblk = 3 if (delta and out) else 2
    o_a = 0  # row blocks [C, KS]: W | Q' | K (delta, output), W | K (delta), Q | K (additive, output) or - | K
    o_s = o_a + nblk * C * KS  # the state tile S [KP, VS] (the matmul's right-hand side)
    o_v = o_s + KP * VS  # V_new tile [C, VS], rows scaled by gamma_C / gamma_t
    o_gm = o_v + C * VS  # gamma_t
    o_f = o_gm + C  # gamma_C / gamma_t (0 past the sequence's end)
    o_p = o_f + C  # split P1 (_p1_split): each part's [C, VS] tile of gamma_t X
    ksplit = _p1_split(C, KP, delta, out)
    return o_a, o_s, o_v, o_gm, o_f, o_p, o_p + (ksplit * C * VS if ksplit > 1 else 0)


@functools.lru_cache(maxsize=None)
def _state_kernel(C, KP, BV, has_g, delta, out, has_h0, has_ht, vin, store=False):
    BV4 = BV // 4
    NTH = (KP // 4) * BV4  # one 4x4 tile of the state [KP, BV] per thread
    WIDE = BV4 % 8 == 0  # speed, optional: tiles to threads by _quad_map(idx, BV4, WIDE), 4 x 8 per warp
    KS, VS = KP + 4, BV + 4
    O_A, O_S, O_V, O_GM, O_F, O_P, _ = _state_layout(C, KP, BV, delta, out)
    P1_ROWS = C * (int(delta) + int(out))  # rows of [W; Q'] (or Q) that multiply the state
    R4 = P1_ROWS // 4
    NT1 = R4 * BV4
    KSPLIT = _p1_split(C, KP, delta, out)  # additive with output: P1 over KSPLIT parts of K' (NT1 KSPLIT = NTH)
    KD = KP // KSPLIT  # each part's share of the inner dimension
    NE = C * BV4  # float4 elements of the output tile, summed over the parts by all threads
    EPT = (NE + NTH - 1) // NTH  # of them per thread
    K_OFF = 2 * C * KS if (delta and out) else C * KS  # where the K rows sit during the state update
    stage_chunk = _chunk_stager(C, KP, BV, NTH, has_g, delta, out, vin)
    prefetch_chunk = _chunk_prefetcher(C, KP, BV, NTH, delta, out)
    # K's third row block (delta rule with output): the fixed-map stager where it fits, as stage_chunk decides
    FAST = vin and _stager_fits(KP, NTH) and _stager_fits(BV, NTH)
    if FAST:
        st_rows = _rows_stager(C, KP, NTH, False)

    def state(q, k, v, bcum, w, u, qp, u2, h0, ht, o, scale, hs):
        """Value columns x * BV .. x * BV + BV - 1 of head y, carried through every chunk:

        S (rows 4 rg .. 4 rg + 3, columns 4 cg .. 4 cg + 3 of the tile) lives in registers all along.
        Per chunk: X = [W; Q'] S (delta) or Q S (additive) from shared memory, then
        V_new = U - W S (delta) or V,  o = scale (Q' S + U'')  or  scale (diag(gamma) Q S + U''),
        S <- gamma_C S + K^T diag(gamma_C / gamma) V_new.
        """
        # TODO(r3, 2): one block = value columns v0 = cuda.blockIdx.x * BV .. v0 + BV - 1 of head bh = cuda.blockIdx.y
        #   (b = bh // H, h = bh % H), every chunk in order. forward launches grid (ceil(V / BV), B H), NTH =
        #   (KP / 4)(BV / 4) threads (512 at KP = 128, BV = 64) and _state_layout(C, KP, BV, delta, out)[-1] floats of
        #   dynamic shared memory: sm = cuda.shared.array(0, float32), regions at O_A, O_S, O_V, O_GM, O_F (and O_P,
        #   for the optional split in step 3), row strides
        #   KS = KP + 4 and VS = BV + 4. T, H, K = k.shape[1], k.shape[2], k.shape[3]; the state's columns V =
        #   ht.shape[3] if (delta and not out) else v.shape[3] (o is a stand-in without output; a state-only delta run
        #   may have a state wider than v: wide_state_columns, r4's phase 1); vec_v = (u.shape[2] if delta else V) % 4
        #   == 0; NC = ceil(T / C) chunks.
        #   Thread map: tid = cuda.threadIdx.x, cg = tid % BV4, rg = tid // BV4: the thread owns the 4x4 block of the
        #   state tile S, rows 4 rg .. 4 rg + 3 and columns v0 + 4 cg .. v0 + 4 cg + 3, in registers for the whole
        #   sequence: S = cuda.local.array(16, float32), S[4 i + j], loaded once from h0 (has_h0; only rows < K and
        #   columns < V, 0 elsewhere), written once to ht at the end. A second 16-float array for the products.
        #   Every thread reaches every barrier: guard the loads and stores of columns >= V, never return early.
        # Gates (has_g): the given _chunk_gates(sm, O_F, O_GM, bcum, bh, t0, n, C, tid, NTH) writes gamma_C / gamma_t
        #   (0 for padded rows) to sm[O_F + t] and gamma_t to sm[O_GM + t] for the chunk starting at t0. The staging
        #   reads them, so: for the first chunk before the loop (if NC > 0), then cuda.syncthreads() -- protects: the
        #   first chunk's staging reads them; for chunk c + 1 in step 5 of chunk c.
        # Per chunk c: t0 = c * C, n = min(C, T - t0), b_last = bcum[bh, t0 + n - 1] (has_g; float32(0.0) otherwise).
        # 1. Stage, then cuda.syncthreads()  -- protects: everything is staged before any product reads it.
        #    - S itself, as the right factor of step 3 (only if NT1 > 0, i.e. there is such a product): row 4 rg + i
        #      of the [KP, VS] tile at O_S, st4(sm, O_S + (4 rg + i) * VS + 4 cg, (S[4 i], S[4 i + 1], S[4 i + 2],
        #      S[4 i + 3])). Threads past K or V hold zeros: the tile is zero-padded by construction.
        #    - row blocks [C, KP] at O_A, O_A + C * KS (and O_A + 2 C * KS), stride KS:
        #        additive: Q (out) | K;   delta: W | Q' | K (out),  or  W | K (state only).
        #      K's rows are always at O_A + K_OFF (the given constant), where step 5 reads them.
        #      Inputs q, k: _stage_input(sm, off, KS, x, b, h, t0, n, K, 0, C, KP, tid, NTH, False, 0) (or
        #      _stage_input4 when vin); scratch w, qp: _stage_scratch(sm, off, KS, x, bh, t0, 0, KP, C, KP, tid, NTH,
        #      True) (rows of KP floats: always 128-bit).
        #    - the value tile [C, BV] at O_V (stride VS): delta: U, _stage_scratch(sm, O_V, VS, u, bh, t0, v0,
        #      u.shape[2], C, BV, tid, NTH, vec_v) (zero past U's columns); additive: V with row t times gamma_C /
        #      gamma_t, _stage_input(sm, O_V, VS, v, b, h, t0, n, V, v0, C, BV, tid, NTH, has_g, O_F) (or
        #      _stage_input4 when vin) -- that is already the update's diag(gamma_C / gamma) V_new.
        #    (The given _stage_chunk(sm, O_A, O_V, O_F, KS, VS, q, k, v, w, u, qp, b, h, bh, t0, n, K, KP, V, v0, C,
        #    BV, tid, NTH, has_g, delta, out, vin, vec_v) does the first two row blocks and the value tile in one
        #    call; for the delta rule with output stage K at O_A + K_OFF yourself. Speed, optional: the factory's
        #    stage_chunk(sm, O_A, O_V, O_F, KS, VS, q, k, v, w, u, qp, b, h, bh, t0, n, K, V, v0, tid, vec_v) does the
        #    same, by fixed-map stagers where every size is a constant (a fraction of the instructions); when FAST,
        #    st_rows(sm, O_A + K_OFF, KS, k, b, h, t0, n, K, 0, tid, False, 0) stages K that way.)
        # 2. (Speed, optional: ask L2 for the next chunk's rows now, so that its staging hits L2 instead of HBM. A
        #    hint only: the results do not change. The factory's prefetch_chunk (built by _chunk_prefetcher(C, KP,
        #    BV, NTH, delta, out)) does it for chunk c + 1: prefetch_chunk(q, k, v, w, u, qp, u2, b, h, bh, t0 + C,
        #    min(C, T - t0 - C), K, V, v0, tid, c + 1). Or write the loop yourself: prefetch_l2(x, index) asks
        #    for the 128-byte line holding x[index].)
        # 3. X = [rows] S: P1_ROWS = C (delta + out) rows times the [KP, BV] state, NT1 4x4 tiles. For tile in
        #    range(tid, NT1, NTH): rr = tile // BV4, cc = tile % BV4; rows rr + R4 i, strided by R4 = P1_ROWS / 4 (for
        #    the delta rule with output every thread then gets 2 rows of W and 2 of Q': the branch below is balanced;
        #    the threads of a warp share 1-2 rows of the left factor, a broadcast); acc = 0;
        #      _mm_nn(sm, acc, O_A, KS, O_S, VS, rr, R4, cc * 4, KP)
        #    Then for i < 4, row = rr + R4 i:
        #    - delta and row < C (a row of W S):  V_new = (U - W S) * f, f = sm[O_F + row] if has_g else 1, written
        #      over U at p = O_V + row * VS + cc * 4: y = ld4(sm, p); st4(sm, p, ((y[0] - acc[4 i]) * f, ...)). Only
        #      this thread touches these 4 entries: no race, no barrier needed before it.
        #    - else, with out, an output row: t = row - C (delta) or row (additive); if t < n, for the columns
        #      col = v0 + cc * 4 + j < V:  o[b, t0 + t, h, col] = scale * (acc[4 i + j] * gm + u2[bh, t0 + t, col]),
        #      gm = sm[O_GM + t] (gamma_t) for the additive recurrence with g, 1 otherwise (the delta rule's Q' holds
        #      it already). That is O = scale (Q' S + U''), or scale (diag(gamma) Q S + U''): the fused output.
        #      (With vec_v and col < V all 4 columns exist: one ld4(u2, (bh, t0 + t, col)) reads them.)
        #    (Speed, optional: for the additive family with output NT1 = C BV / 16 < NTH when C < KP, so threads
        #    >= NT1 have no tile. KSPLIT = KP / C parts of the inner dimension fix that: thread tid computes tile
        #    tid % NT1 over the KD columns of part tid // NT1 (_mm_nn with the offsets O_A + part KD and
        #    O_S + part KD VS, kdim KD), and stores gm * acc to the part's [C, VS] tile at O_P + part C VS.
        #    After the barrier of step 4 every thread sums NE = C BV / 4 float4 of those parts, EPT each, adds U''
        #    and writes o. Multiply by gm before the barrier: step 5 rewrites O_GM.)
        # 4. cuda.syncthreads()  -- protects: V_new (or the split P1's parts) are complete before anyone reads them.
        # 5. The update S <- gamma_C S + K^T diag(gamma_C / gamma) V_new, in registers. First (has_g, c + 1 < NC)
        #    the next chunk's gates: _chunk_gates(..., t0 + C, min(C, T - t0 - C), ...) -- nothing reads O_F and
        #    O_GM any more in this chunk. Then S[e] *= exp(b_last) (has_g), and for t in range(n) (or range(C):
        #    the padded rows are zero in both factors):
        #      x = ld4(sm, O_A + K_OFF + t * KS + 4 rg)   (k_t at this thread's 4 rows)
        #      y = ld4(sm, O_V + t * VS + 4 cg)           (V_new row t at its 4 columns, already scaled)
        #      S[4 i + j] += x[i] * y[j]                   a rank-1 update of the 4x4 block: 16 FMAs per 2 loads
        #    (Speed, optional: take 4 rows t per step (r3 takes 8: the given _p2_rows8), their 8 ld4 into two local
        #    arrays before the 64 FMAs, so the FMAs do not wait on their own loads and the loop's counting is paid
        #    once per 64 FMAs, not per 16.)
        #    cuda.syncthreads()  -- protects: the next chunk's staging overwrites K, V_new and the S tile only after
        #    every thread is done reading them.
        # Finally, if has_ht: ht[b, h, 4 rg + i, v0 + 4 cg + j] = S[4 i + j] for rows < K, columns < V. h0 and ht may
        #   be the same array: each thread reads its own entries of h0 before the loop and writes the same ones after.
        # Memory traffic (budget in the module docstring): per chunk and block, the two row blocks, the value tile and
        #   u2 read once; o written once; the state read once and written once per sequence. 3 barriers per chunk.
        #   Nothing about a chunk's state ever goes to global memory.
        # (``store`` and ``hs`` belong to the package's split schedule, which this exercise does not launch: its
        #   state kernel writes every chunk's starting state to hs for a separate output kernel. Leave them be.)
        pass

    if config.ENABLE_CUDASIM:  # the simulator's cuda.jit takes no launch_bounds
        return cuda.jit(state)
    # 512 / NTH resident blocks: at most 128 registers a thread (one block of 512 threads at BV = 64, two of 256
    # at BV = 32); without the bound ptxas takes 130-170 and a 512-thread launch would fail.
    return cuda.jit(state, launch_bounds=(NTH, max(1, STATE_REGS_BLOCKS // NTH)))


# ----------------------------------------------------------------------------------------------------------
# launching (given)
# ----------------------------------------------------------------------------------------------------------
def padded_k(K: int) -> int:
    """K rounded up to a power of two >= 16 (the tiles' row count)."""
    kp = 16
    while kp < K:
        kp *= 2
    return kp


def value_tile(C: int, KP: int, V: int, bv=None) -> int:
    """BV: the state kernel's value-tile width (a multiple of 4), from ``BV_TABLE`` unless given."""
    if bv is None:
        bv = BV_TABLE.get((C, KP), BV_DEFAULT)
    bv = int(bv)
    if bv < 4 or bv % 4:
        raise ValueError(f"rung {NAME!r}: the value tile must be a positive multiple of 4, got {bv}")
    return min(bv, 4 * cdiv(max(V, 1), 4))


def forward(q, k, v, g, beta, o, h0, ht, scale, chunk_size, stream=0, bv=None, schedule=None):
    """Launch the intra kernel, then the state kernel (the rung contract: :mod:`linattn_numba.rungs`).

    Extension: ``o=None`` means "state only": ``ht`` must be given; the scores Aqk, Q' and U'' and every
    output product are skipped. ``chunk_size=None`` uses ``DEFAULT_CHUNK``. ``bv`` overrides the value-tile
    width of ``BV_TABLE`` (tests, tuning). ``h0`` and ``ht`` may be the same array. ``schedule``: only "fused"
    (the default) here; the package's rung also has "split" for the additive family (its docstring).
    """
    for _, launch in launches(q, k, v, g, beta, o, h0, ht, scale, chunk_size, stream, bv, schedule):
        launch()


def launches(q, k, v, g, beta, o, h0, ht, scale, chunk_size, stream=0, bv=None, schedule=None):
    """``[(kernel name, launch)]``: what :func:`forward` runs, in order, as separate callables (so that
    ``tools/tune_r3.py`` can time each kernel). Validates the arguments and allocates the scratch."""
    B, T, H, K = q.shape
    V = v.shape[3]
    if schedule not in (None, "fused"):
        raise ValueError(f"rung {NAME!r} (the exercise): schedule must be 'fused', got {schedule!r} (the split "
                         f"schedule is the package rung's)")
    C = check_launch(NAME, chunk_size, K, o, ht)
    KP = padded_k(K)
    VW = wide_state_columns(NAME, v, o, h0, ht, beta)  # the state's columns: V, or more (state-only delta runs)
    BV = value_tile(C, KP, VW, bv)
    has_g, delta, out = g is not None, beta is not None, o is not None
    BH = B * H
    if BH == 0 or V == 0:
        return []
    NC = cdiv(T, C)
    TP = NC * C
    f4 = np.dtype(np.float32).itemsize
    vin = T > 0 and _rows_aligned(q, k, v)  # 128-bit loads of the inputs
    bcum, w, u, qp, u2 = scratch_buffers(BH, TP, KP, V, has_g, delta, out, stream)
    todo = []
    if T > 0 and (has_g or delta or out):
        smem_a = _intra_layout(C, KP)[-1] * f4
        args_a = (q, k, v, or_dummy(g, 3), or_dummy(beta, 3), bcum, w, u, qp, u2)
        kern_a = _intra_kernel(C, KP, has_g, delta, out, vin)
        todo.append(("intra", lambda: _launch(kern_a, (NC, BH), (C // 4) ** 2, smem_a, stream, args_a)))
    if T > 0 or ht is not None:
        smem_b = _state_layout(C, KP, BV, delta, out)[-1] * f4
        kern_b = _state_kernel(C, KP, BV, has_g, delta, out, h0 is not None, ht is not None, vin)
        args_b = (q, k, v, bcum, w, u, qp, u2, or_dummy(h0, 4), or_dummy(ht, 4), or_dummy(o, 4), np.float32(scale),
                  or_dummy(None, 3))
        todo.append(("state", lambda: _launch(kern_b, (cdiv(VW, BV), BH), (KP // 4) * (BV // 4), smem_b, stream,
                                              args_b)))
    return todo


def compile_targets():
    """``(label, py_func, argtypes)`` for every kernel variant at the default configuration (C = 64, K <= 128,
    BV from the table): 4 recurrences x float32 / float16 inputs x output or state only, the state kernel also
    x h0 x ht (ht required without the output), and float32 inputs also with 128-bit input loads (vin).
    Inputs have layout "A"; scratch and stand-ins are C-contiguous float32."""
    f32 = types.float32
    C, KP = DEFAULT_CHUNK, MAX_K
    BV = BV_TABLE.get((C, KP), BV_DEFAULT)
    s2, s3, s4 = (array_type(np.float32, n, "C") for n in (2, 3, 4))
    a3, a4 = array_type(np.float32, 3), array_type(np.float32, 4)
    for dtype in INPUT_DTYPES:
        x4 = array_type(dtype, 4)
        for vin in (False, True) if dtype == np.float32 else (False,):
            for rec, (has_g, delta) in zip(RECURRENCES, FLAG_COMBOS):
                tag = f"{rec},{np.dtype(dtype).name}" + (",vin" if vin else "")
                g_t = a3 if has_g else s3
                beta_t = a3 if delta else s3
                for out in (True, False):
                    if has_g or delta or out:
                        yield (f"intra[{tag},o={int(out)}]", _intra_kernel(C, KP, has_g, delta, out, vin).py_func,
                               (x4, x4, x4, g_t, beta_t, s2, s3, s3, s3, s3))
                    for has_h0 in (False, True):
                        for has_ht in (False, True):
                            if not out and not has_ht:
                                continue  # state only needs ht
                            h0_t = a4 if has_h0 else s4
                            ht_t = a4 if has_ht else s4
                            o_t = a4 if out else s4
                            yield (
                                f"state[{tag},o={int(out)},h0={int(has_h0)},ht={int(has_ht)}]",
                                _state_kernel(C, KP, BV, has_g, delta, out, has_h0, has_ht, vin).py_func,
                                (x4, x4, x4, s2, s3, s3, s3, s3, h0_t, ht_t, o_t, f32, s3),
                            )
