"""Rung r1 ``recurrent``: the state lives in registers, K is split across the lanes of a warp.

What changed from r0 ``naive`` and why
    r0 reads and writes its state column from global memory for every token, three to four times over, and runs
    only ``B * H * V`` threads. r1 reads the state once at the start and writes it once at the end; in between it
    lives in registers, spread so that no thread holds too much of it:

    * ``NS = 4`` lanes share one value column, each holding every 4th row of it (lane slice ``s`` holds rows
      ``s, s + 4, s + 8, ...``: ``R = ceil(K / 4)`` rows, 32 registers at K = 128). The dot products ``k . S[:, j]``
      and ``q . S[:, j]`` become ``R`` FMAs per lane plus a two-step butterfly (``shfl_xor_sync`` by 1 and 2) across
      the four lanes -- every lane ends with the full sum, so ``u_j`` needs no broadcast.
    * each lane holds ``COLS`` value columns, so each ``k``/``q`` element it loads from shared memory feeds ``COLS``
      FMAs (the ratio of shared loads to FMAs is ``1 : 2 COLS``).
    * the block stages ``TC`` tokens of ``q``, ``k`` (zero-padded to ``4 R`` rows, so the hot loop has no bounds
      checks), ``v``, ``exp(g)`` and ``beta`` into shared memory with coalesced loads, behind one barrier -- instead
      of every thread fetching the same ``q_t``/``k_t`` from global memory.
    * the gated delta rule is rearranged so the decay costs nothing extra: ``k . (γ S) = γ (k . S)``, then
      ``S <- γ S + k u`` is one multiply and one FMA per element, against r0's separate decay pass.

Thread map
    grid ``(ceil(V / (NW * 32 / NS * COLS)), B * H)``; block ``NW`` warps. Lane ``l`` of warp ``w``: slice
    ``s = l % 4`` and column group ``l // 4``; it owns columns ``[col0, col0 + COLS)`` with
    ``col0 = x * VB + w * (8 * COLS) + (l // 4) * COLS`` and rows ``s, s + 4, ...`` of them.

Cost per token (per head)
    FLOPs: ``2 K V`` (update) + ``2 K V`` (output) + ``2 K V`` (delta rule's ``k.S``) + ``K V`` (decay multiply).
    Bytes from device memory: the inputs, ``(2 K + V + 2) * 4`` per token (``q``, ``k`` read once per block, i.e.
    ``ceil(V / VB)`` times per head), plus the state once in and once out per sequence. At the standard shape the
    rung is bound by issuing FMAs and shared loads on a sequential chain of tokens, not by memory.

The decode ``step``
    With T = 1 the same kernel is the decode step: the state is read once from global memory and written once
    (``h0`` and ``ht`` may be the same array: every thread reads exactly the elements it later writes, before the
    token loop). That makes the step a copy of the state plus arithmetic, and its roofline the copy bandwidth.

What the next rung changes
    r2 ``chunked`` stops walking token by token: a chunk of tokens becomes matrix products, parallel inside the
    chunk, and only the chunk-to-chunk state pass stays sequential.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32, types

from .._common import FLAG_COMBOS, INPUT_DTYPES, array_type, cdiv, or_dummy

NAME = "recurrent"
MAX_K = 128  # 32 state rows per lane and column in registers; beyond that they would spill to local memory
MAX_V = None  # value columns are tiled across blocks
CHUNK_SIZES = None  # token by token: chunk_size is not used

NS = 4  # lanes that split one value column's K rows (a reduction costs log2(NS) = 2 shuffles)
LOG_NS = 2
GROUPS = 32 // NS  # column groups per warp
TC = 32  # tokens staged per pair of barriers: amortises each barrier over TC tokens of work
FULL_MASK = 0xFFFFFFFF

# (COLS, NW): value columns per lane and warps per block. Tuned on the H200 (see tune_table in the bench JSON).
DEFAULT_COLS = 2
DEFAULT_NW = 4


@functools.lru_cache(maxsize=None)
def _kernel(R: int, COLS: int, NW: int, HAS_G: bool, HAS_BETA: bool, HAS_H0: bool, HAS_HT: bool):
    KP = R * NS  # K padded to a multiple of NS: rows >= K are zeros in k/q and in the state
    WARP_COLS = GROUPS * COLS
    VB = NW * WARP_COLS  # value columns per block
    NT = NW * 32

    @cuda.jit
    def recurrent_kernel(q, k, v, g, beta, h0, ht, o, scale):
        B, T, H, K = q.shape
        V = v.shape[3]
        bh = cuda.blockIdx.y
        b = bh // H
        h = bh % H
        tid = cuda.threadIdx.x
        lane = tid % 32
        sl = lane % NS
        jb = (tid // 32) * WARP_COLS + (lane // NS) * COLS  # this lane's first column within the block tile
        col0 = cuda.blockIdx.x * VB + jb

        ks = cuda.shared.array((TC, KP), float32)
        qs = cuda.shared.array((TC, KP), float32)
        vs = cuda.shared.array((TC, VB), float32)
        gs = cuda.shared.array(TC, float32)
        bs = cuda.shared.array(TC, float32)

        S = cuda.local.array((R, COLS), float32)
        kr = cuda.local.array(R, float32)
        qr = cuda.local.array(R, float32)
        u = cuda.local.array(COLS, float32)

        for r in range(R):
            i = r * NS + sl
            for c in range(COLS):
                j = col0 + c
                S[r, c] = float32(0.0)
                if HAS_H0:
                    if i < K and j < V:
                        S[r, c] = h0[b, h, i, j]

        for t0 in range(0, T, TC):
            # Stage TC tokens. Threads walk the tile row-major so consecutive threads read consecutive addresses.
            for e in range(tid, TC * KP, NT):
                tt = e // KP
                i = e % KP
                t = t0 + tt
                if t < T and i < K:
                    ks[tt, i] = float32(k[b, t, h, i])
                    qs[tt, i] = float32(q[b, t, h, i])
                else:
                    ks[tt, i] = float32(0.0)
                    qs[tt, i] = float32(0.0)
            for e in range(tid, TC * VB, NT):
                tt = e // VB
                jj = e % VB
                t = t0 + tt
                j = cuda.blockIdx.x * VB + jj
                if t < T and j < V:
                    vs[tt, jj] = float32(v[b, t, h, j])
                else:
                    vs[tt, jj] = float32(0.0)
            if tid < TC:
                t = t0 + tid
                if HAS_G:
                    gs[tid] = float32(math.exp(float32(g[b, t, h]))) if t < T else float32(1.0)
                if HAS_BETA:
                    bs[tid] = float32(beta[b, t, h]) if t < T else float32(0.0)
            cuda.syncthreads()  # the staged tile is complete before any warp reads it

            for tt in range(min(TC, T - t0)):
                for r in range(R):
                    kr[r] = ks[tt, r * NS + sl]
                    qr[r] = qs[tt, r * NS + sl]
                decay = float32(1.0)
                if HAS_G:
                    decay = gs[tt]
                for c in range(COLS):
                    if HAS_BETA:
                        # k . S over this lane's rows, two partial sums to halve the dependent-add chain
                        p0 = float32(0.0)
                        p1 = float32(0.0)
                        for r in range(0, R - 1, 2):
                            p0 += kr[r] * S[r, c]
                            p1 += kr[r + 1] * S[r + 1, c]
                        if R % 2 == 1:
                            p0 += kr[R - 1] * S[R - 1, c]
                        kS = p0 + p1
                        for s in range(LOG_NS):
                            kS += cuda.shfl_xor_sync(FULL_MASK, kS, 1 << s)
                        # k . (decay S) = decay (k . S): the decay is folded into the update below
                        u[c] = bs[tt] * (vs[tt, jb + c] - decay * kS)
                    else:
                        u[c] = vs[tt, jb + c]
                for c in range(COLS):
                    p0 = float32(0.0)
                    p1 = float32(0.0)
                    for r in range(R):
                        if HAS_G:
                            s_new = S[r, c] * decay + kr[r] * u[c]
                        else:
                            s_new = S[r, c] + kr[r] * u[c]
                        S[r, c] = s_new
                        if r % 2 == 0:
                            p0 += qr[r] * s_new
                        else:
                            p1 += qr[r] * s_new
                    acc = p0 + p1
                    for s in range(LOG_NS):
                        acc += cuda.shfl_xor_sync(FULL_MASK, acc, 1 << s)
                    j = col0 + c
                    # every lane of the group holds the sum; lane slice c % NS writes column c
                    if sl == c % NS and j < V:
                        o[b, t0 + tt, h, j] = float32(scale) * acc
            cuda.syncthreads()  # every warp is done with the tile before the next stage overwrites it

        if HAS_HT:
            for r in range(R):
                i = r * NS + sl
                for c in range(COLS):
                    j = col0 + c
                    if i < K and j < V:
                        ht[b, h, i, j] = S[r, c]

    return recurrent_kernel


def launch_config(K: int, V: int, cols: int = DEFAULT_COLS, nw: int = DEFAULT_NW):
    """``(R, COLS, NW)`` for a shape: rows per lane, columns per lane, warps per block (fewer for narrow V)."""
    R = cdiv(K, NS)
    nw = max(1, min(nw, cdiv(V, GROUPS * cols)))
    return R, cols, nw


def forward(q, k, v, g, beta, o, h0, ht, scale, chunk_size=None, stream=0, cols=DEFAULT_COLS, nw=DEFAULT_NW):
    """Launch r1 (see the rung contract in :mod:`linattn_numba.rungs`). ``h0`` and ``ht`` may alias."""
    B, T, H, K = q.shape
    V = v.shape[3]
    if K > MAX_K:
        raise ValueError(f"rung 'recurrent' supports K <= {MAX_K}, got K={K}")
    R, cols, nw = launch_config(K, V, cols, nw)
    kern = _kernel(R, cols, nw, g is not None, beta is not None, h0 is not None, ht is not None)
    vb = nw * GROUPS * cols
    grid = (cdiv(V, vb), B * H)
    kern[grid, nw * 32, stream](
        q, k, v, or_dummy(g, 3), or_dummy(beta, 3), or_dummy(h0, 4), or_dummy(ht, 4), o, float32(scale)
    )


def compile_targets():
    """Every variant r1 can launch, at K = 128 (both input dtypes) and K = 20 (float32), as
    ``(label, py_func, argtypes)``: the kernel body depends on K only through the unrolled row count R."""
    f32 = types.float32
    for K, dtypes in ((128, INPUT_DTYPES), (20, (np.float32,))):
        for dt in dtypes:
            for has_g, has_beta in FLAG_COMBOS:
                for has_state in (False, True):
                    R, cols, nw = launch_config(K, 128)
                    argtypes = (
                        array_type(dt, 4), array_type(dt, 4), array_type(dt, 4),
                        array_type(dt, 3), array_type(dt, 3), array_type(np.float32, 4),
                        array_type(np.float32, 4), array_type(np.float32, 4, "C"), f32,
                    )
                    label = f"recurrent K={K} g={has_g} beta={has_beta} state={has_state} {dt.__name__}"
                    fn = _kernel(R, cols, nw, has_g, has_beta, has_state, has_state).py_func
                    yield label, fn, argtypes
