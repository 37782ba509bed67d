"""Rung r1 ``recurrent``: the state lives in registers, K is split across the lanes of a warp.

What changed from r0 ``naive`` and why
    r0 reads and writes its state column from global memory for every token, three to four times over, and runs
    only ``B * H * V`` threads. r1 reads the state once at the start and writes it once at the end; in between it
    lives in registers, spread so that no thread holds too much of it:

    * ``NS = 8`` lanes share one value column, each holding every 8th row of it (lane slice ``s`` holds rows
      ``s, s + 8, s + 16, ...``: ``R = ceil(K / 8)`` rows, 16 registers at K = 128). The dot products ``k . S[:, j]``
      and ``q . S[:, j]`` become ``R`` FMAs per lane plus a three-step butterfly (``shfl_xor_sync`` by 1, 2, 4)
      across the eight lanes -- every lane ends with the full sum, so ``u_j`` needs no broadcast.
    * each lane holds ``COLS`` value columns, so each ``k``/``q`` element it loads from shared memory feeds ``COLS``
      FMAs (the ratio of shared loads to FMAs is ``1 : 2 COLS``).
    * the block stages ``TC`` tokens of ``q``, ``k`` (zero-padded to ``NS R`` rows, so the hot loop has no bounds
      checks), ``v``, ``exp(g)`` and ``beta`` into shared memory with coalesced loads, behind one barrier -- instead
      of every thread fetching the same ``q_t``/``k_t`` from global memory.
    * the gated delta rule is rearranged so the decay costs nothing extra: ``k . (γ S) = γ (k . S)``, then
      ``S <- γ S + k u`` is one multiply and one FMA per element, against r0's separate decay pass.

Thread map
    grid ``(ceil(V / VB), B * H)`` with ``VB = NW * (32 / NS) * COLS`` columns per block; block ``NW`` warps.
    Lane ``l`` of warp ``w``: slice ``s = l % NS`` and column group ``l // NS``; it owns columns
    ``[col0, col0 + COLS)`` with ``col0 = x * VB + w * (32 / NS) * COLS + (l // NS) * COLS`` and rows
    ``s, s + NS, ...`` of them.

Cost per token (per head)
    FLOPs: ``2 K V`` (update) + ``2 K V`` (output) + ``2 K V`` (delta rule's ``k.S``) + ``K V`` (decay multiply).
    Bytes from device memory: the inputs, ``(2 K + V + 2) * 4`` per token (``q``, ``k`` read once per block, i.e.
    ``ceil(V / VB)`` times per head), plus the state once in and once out per sequence. At the standard shape the
    rung is bound by issuing FMAs and shared loads on a sequential chain of tokens, not by memory.

The decode ``step``
    With T = 1 (the decode step) ``forward`` launches ``_step_kernel`` instead: the state is read once from global
    memory and written once (``h0`` and ``ht`` may be the same array: every thread reads exactly the elements it
    later writes), with a thread map made for streaming (lane -> column, warps split K, reductions through shared
    memory). The step is a copy of the state plus arithmetic, and its roofline the copy bandwidth.

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

# Launch shape, tuned on the H200 at B4 T8192 H16 K=V=128 gated delta (the bench's "tune" records, e.g.
# figures/data/h200_ladder.json): NS=8, COLS=1, NW=4 ran 9.1 ms against 10.9 ms for NS=4, COLS=2 -- the kernel is
# latency bound at one or two warps per scheduler (ncu: 3.25 cycles per issued instruction, 43% of stalls on
# shared-memory loads), so the variant with the most warps in flight and the shortest per-lane chains wins.
NS = 8  # lanes that split one value column's K rows (a reduction costs log2(NS) = 3 shuffles)
GROUPS = 32 // NS  # column groups per warp
TC = 32  # tokens staged per pair of barriers: amortises each barrier over TC tokens of work
FULL_MASK = 0xFFFFFFFF
DEFAULT_COLS = 1  # value columns per lane
DEFAULT_NW = 4  # warps per block


@functools.lru_cache(maxsize=None)
def _kernel(R: int, COLS: int, NW: int, HAS_G: bool, HAS_BETA: bool, HAS_H0: bool, HAS_HT: bool,
            TC: int = TC, NS: int = NS):
    LOG_NS = NS.bit_length() - 1
    GROUPS = 32 // NS
    KP = R * NS  # K padded to a multiple of NS: rows >= K are zeros in k/q and in the state
    WARP_COLS = GROUPS * COLS
    VB = NW * WARP_COLS  # value columns per block
    NT = NW * 32
    ITER_KQ = (TC * KP + NT - 1) // NT  # staging trips per thread, compile-time constants
    ITER_V = (TC * VB + NT - 1) // NT

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
        ps = cuda.local.array(4, float32)

        for r in range(R):
            i = r * NS + sl
            for c in range(COLS):
                j = col0 + c
                S[r, c] = float32(0.0)
                if HAS_H0:
                    if i < K and j < V:
                        S[r, c] = h0[b, h, i, j]

        for t0 in range(0, T, TC):
            # Stage TC tokens. Consecutive threads read consecutive addresses; the trip counts are compile-time
            # constants and the loads unconditional (indices clamped, values masked after the load) so the
            # compiler can issue a thread's loads back to back: the block pays one memory latency per tile,
            # not one per element.
            for it in range(ITER_KQ):
                e = tid + it * NT
                tt = e // KP
                i = e % KP
                t = t0 + tt
                tc = min(t, T - 1)
                ic = min(i, K - 1)
                kval = float32(k[b, tc, h, ic])
                qval = float32(q[b, tc, h, ic])
                if e < TC * KP:
                    keep = t < T and i < K
                    ks[tt, i] = kval if keep else float32(0.0)
                    qs[tt, i] = qval if keep else float32(0.0)
            for it in range(ITER_V):
                e = tid + it * NT
                tt = e // VB
                jj = e % VB
                t = t0 + tt
                j = cuda.blockIdx.x * VB + jj
                vval = float32(v[b, min(t, T - 1), h, min(j, V - 1)])
                if e < TC * VB:
                    vs[tt, jj] = vval if (t < T and j < V) else float32(0.0)
            if tid < TC:
                t = t0 + tid
                if HAS_G:
                    gs[tid] = float32(math.exp(float32(g[b, t, h]))) if t < T else float32(1.0)
                if HAS_BETA:
                    bs[tid] = float32(beta[b, t, h]) if t < T else float32(0.0)
            cuda.syncthreads()  # the staged tile is complete before any warp reads it

            # Tokens in pairs (a constant inner trip count the compiler unrolls): token t+1's loads and k . S
            # chain can then be scheduled under token t's q . S chain and shuffles. A padded token past T is an
            # identity step (k = q = v = beta = 0, decay 1), so an odd tail needs no special case.
            ntok = min(TC, T - t0)
            for tp in range(0, ntok + (ntok & 1), 2):
                for uu in range(2):
                    tt = tp + uu
                    for r in range(R):
                        kr[r] = ks[tt, r * NS + sl]
                        qr[r] = qs[tt, r * NS + sl]
                    decay = float32(1.0)
                    if HAS_G:
                        decay = gs[tt]
                    for c in range(COLS):
                        if HAS_BETA:
                            # k . S over this lane's rows in 4 independent partial sums (a 4x shorter chain)
                            for pi in range(4):
                                ps[pi] = float32(0.0)
                            for r in range(R):
                                ps[r % 4] += kr[r] * S[r, c]
                            kS = (ps[0] + ps[1]) + (ps[2] + ps[3])
                            for s in range(LOG_NS):
                                kS += cuda.shfl_xor_sync(FULL_MASK, kS, 1 << s)
                            # k . (decay S) = decay (k . S): the decay is folded into the update below
                            u[c] = bs[tt] * (vs[tt, jb + c] - decay * kS)
                        else:
                            u[c] = vs[tt, jb + c]
                    for c in range(COLS):
                        for pi in range(4):
                            ps[pi] = float32(0.0)
                        for r in range(R):
                            if HAS_G:
                                s_new = S[r, c] * decay + kr[r] * u[c]
                            else:
                                s_new = S[r, c] + kr[r] * u[c]
                            S[r, c] = s_new
                            ps[r % 4] += qr[r] * s_new
                        acc = (ps[0] + ps[1]) + (ps[2] + ps[3])
                        for s in range(LOG_NS):
                            acc += cuda.shfl_xor_sync(FULL_MASK, acc, 1 << s)
                        j = col0 + c
                        # every lane of the group holds the sum; lane slice c % NS writes column c
                        if sl == c % NS and j < V and t0 + tt < T:
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


SW = 8  # warps that split K in the decode-step kernel (H200 tune: 0.298 ms at SW=8 vs 0.353 at 4, B256 H16 K=V=128)


@functools.lru_cache(maxsize=None)
def _step_kernel(RS: int, HAS_G: bool, HAS_BETA: bool, HAS_H0: bool, HAS_HT: bool, SW: int = SW):
    """T = 1: the decode step. A different thread map from the sequence kernel, because at one token the work is
    a copy of the state: lane -> value column (a warp reads 128 contiguous bytes of a state row per load), warp ->
    a slab of ``RS`` rows, and the two dot products reduced across the ``SW`` warps through shared memory (two
    barriers per token are nothing when there is one token). Each thread issues its ``RS`` state loads back to
    back before any arithmetic, so the kernel streams the state at close to copy bandwidth."""

    KP = SW * RS  # K padded to the rows the block covers

    @cuda.jit
    def step_kernel(q, k, v, g, beta, h0, ht, o, scale):
        B, T, H, K = q.shape
        V = v.shape[3]
        bh = cuda.blockIdx.y
        b = bh // H
        h = bh % H
        w = cuda.threadIdx.x // 32
        lane = cuda.threadIdx.x % 32
        j = cuda.blockIdx.x * 32 + lane
        jc = min(j, V - 1)  # clamped so every load is in bounds; stores are masked
        red_k = cuda.shared.array((SW, 32), float32)
        red_q = cuda.shared.array((SW, 32), float32)
        ks = cuda.shared.array(KP, float32)
        qs = cuda.shared.array(KP, float32)
        S = cuda.local.array(RS, float32)
        for r in range(RS):  # the state loads first: nothing below waits on them until the first dot product
            S[r] = float32(0.0)
            if HAS_H0:
                S[r] = h0[b, h, min(w * RS + r, K - 1), jc]
        # k and q once per block into shared memory (rows >= K are zeros: they add nothing and are never
        # stored), instead of RS uniform global loads of each per thread: fewer instructions and registers.
        tid = cuda.threadIdx.x
        for i in range(tid, KP, SW * 32):
            ks[i] = float32(k[b, 0, h, i]) if i < K else float32(0.0)
            qs[i] = float32(q[b, 0, h, i]) if i < K else float32(0.0)
        cuda.syncthreads()  # ks / qs are complete
        decay = float32(1.0)
        if HAS_G:
            decay = float32(math.exp(float32(g[b, 0, h])))
        vj = float32(v[b, 0, h, jc])
        if HAS_BETA:
            p = float32(0.0)
            for r in range(RS):
                p += ks[w * RS + r] * S[r]
            red_k[w, lane] = p
            cuda.syncthreads()  # all SW partial sums of k . S[:, j] are in shared memory
            kS = float32(0.0)
            for ww in range(SW):
                kS += red_k[ww, lane]
            u = float32(beta[b, 0, h]) * (vj - decay * kS)
        else:
            u = vj
        p = float32(0.0)
        for r in range(RS):
            s_new = S[r] * decay + ks[w * RS + r] * u
            S[r] = s_new
            p += qs[w * RS + r] * s_new
        red_q[w, lane] = p
        cuda.syncthreads()  # all SW partial sums of q . S[:, j] are in shared memory
        if w == 0 and j < V:
            acc = float32(0.0)
            for ww in range(SW):
                acc += red_q[ww, lane]
            o[b, 0, h, j] = float32(scale) * acc
        if HAS_HT:
            for r in range(RS):
                i = w * RS + r
                if i < K and j < V:
                    ht[b, h, i, j] = S[r]

    return step_kernel


def launch_config(K: int, V: int, cols: int = DEFAULT_COLS, nw: int = DEFAULT_NW, ns: int = NS):
    # (compile_targets and the notebooks call this with the module defaults)
    """``(R, COLS, NW)`` for a shape: rows per lane, columns per lane, warps per block (fewer for narrow V)."""
    R = cdiv(K, ns)
    nw = max(1, min(nw, cdiv(V, (32 // ns) * cols)))
    return R, cols, nw


def forward(q, k, v, g, beta, o, h0, ht, scale, chunk_size=None, stream=0, cols=None, nw=None, tc=None, ns=None,
            sw=None):
    """Launch r1 (see the rung contract in :mod:`linattn_numba.rungs`). ``h0`` and ``ht`` may alias."""
    # launch knobs default to the module's tuned values, read at call time (the bench's --tune may set them)
    cols = DEFAULT_COLS if cols is None else cols
    nw = DEFAULT_NW if nw is None else nw
    tc = TC if tc is None else tc
    ns = NS if ns is None else ns
    sw = SW if sw is None else sw
    B, T, H, K = q.shape
    V = v.shape[3]
    if K > MAX_K:
        raise ValueError(f"rung 'recurrent' supports K <= {MAX_K}, got K={K}")
    if T == 1:
        kern = _step_kernel(cdiv(K, sw), g is not None, beta is not None, h0 is not None, ht is not None, sw)
        kern[(cdiv(V, 32), B * H), sw * 32, stream](
            q, k, v, or_dummy(g, 3), or_dummy(beta, 3), or_dummy(h0, 4), or_dummy(ht, 4), o, float32(scale)
        )
        return
    R, cols, nw = launch_config(K, V, cols, nw, ns)
    kern = _kernel(R, cols, nw, g is not None, beta is not None, h0 is not None, ht is not None, tc, ns)
    vb = nw * (32 // ns) * cols
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
                    if dt is np.float32:
                        step = _step_kernel(cdiv(K, SW), has_g, has_beta, has_state, has_state).py_func
                        yield "step " + label, step, argtypes
