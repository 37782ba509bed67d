"""Rung r2, ``chunked``: the chunkwise-parallel algorithm of :func:`linattn_numba.reference.chunked`,
one formula per kernel, every intermediate in global memory.

The token-recurrent rungs walk the sequence one token at a time. Here the sequence is cut into chunks of C
tokens (C in {16, 32, 64, 128}; the last chunk may be shorter). Everything that does not depend on the
state carried between chunks is computed for all chunks at once; only a short pass over the chunks, one
state update per chunk, stays sequential. The notation is the reference's: in-chunk cumulative log-gates
``b_t``, ``gamma_t = exp(b_t)``, ``Gamma_ts = exp(b_t - b_s)`` (s <= t), every exponent a difference <= 0.

Pipeline (``forward`` launches them in this order; * = only when g is given, ** = only for the delta rule)::

    1* gates   b[t] = sum of g over the chunk up to t                 -> b      [B, T, H]
    2  scores  Aqk = (Q K^T ⊙ Gamma)  and**  Lkk = tril(diag(beta)(K K^T ⊙ Gamma), -1)
                                                                      -> aqk, lkk [B, T, H, C]  (row t, column s)
    3** wu     (I + Lkk) W = diag(beta gamma) K,  (I + Lkk) U = diag(beta) V, by forward substitution
                                                                      -> w [B, T, H, K], u [B, T, H, V]
    4  state   per chunk: store S_c; V_new = U - W S_c (delta) or V; S <- gamma_C S + (diag(gamma_C/gamma) K)^T V_new
                                                                      -> h [B, NT, H, K, V], V_new over u, ht
    5  output  O = scale (diag(gamma) Q S_c + Aqk V_new)              -> o      [B, T, H, V]

Why these kernels: 1-3 are independent per chunk (fully parallel); 4 is the only sequential part and does
the least it can (one [K, V] state update per chunk instead of one per token); 5 is again independent per
chunk once every chunk's starting state S_c is in ``h``. ``A = (I + Lkk)^-1`` of the reference is never
formed: kernel 3 solves the unit-lower-triangular systems for W and U directly, column by column, which is
the same forward substitution with less work (C^2/2 per column instead of C^3/6 for A plus C^2 per column).

State only: with ``o=None`` (how rung r4 ``scan`` computes its segments' final states) the pipeline keeps
only what the final state needs: 1, 2 (Lkk only, delta rule), 3 and 4 without storing ``h``; 5 is skipped.

Thread maps (the grid is (x, y, z); b, h come from y = b * H + h; c is the chunk):

=========  ==========================  ============  ==========================================================
kernel     grid                        block         one thread ...
=========  ==========================  ============  ==========================================================
gates      (ceil(B T H / 256),)        256           one token: sums g over its chunk up to itself (O(C) redundant
                                                     adds, but no scan and the whole GPU busy); h fastest
scores     (NT, B H, n(n+1)/2)         (16, 16)      one entry (t, s) of a 16x16 tile of the lower triangle
           n = ⌈min(C,T)/16⌉                         (z = ti (ti+1)/2 + tj, tj <= ti); the textbook tiled matmul:
                                                     16-wide slabs of Q and K rows staged in shared memory
                                                     (coalesced along K), 16 FMAs per slab from shared
wu         (NT, B H, ceil((K+V)/128))  128           one column of [W | U] in one chunk: C sequential rows,
                                                     row i reads Lkk[i, :i] (broadcast) and its own column
state      (ceil(V / 32), B H)         (32, ⌈K/16⌉)  one value column v (x, coalesced) and 16 rows of the state
                                                     (y) in registers; loops over all chunks. The delta rule's
                                                     W S_c sums over rows held by different threads: each thread
                                                     adds its partial sums into shared memory with atomics
output     (NT, B H, ceil(V / 32))     (32, 8)       one value column v (x) and rows ty, ty + 8, ... of a chunk
=========  ==========================  ============  ==========================================================

Two kernels synchronise inside a block: scores (2 barriers per 16-wide slab of K, around its shared Q and K
slabs) and the delta rule's state kernel (3 barriers per chunk, around its shared V_new tile). The others use
no shared memory and read through the caches: their loads are either coalesced across the warp (consecutive
v or d) or one address for the whole warp (a broadcast: q[t, d], k[t, d], w[t, d], aqk[t, s], lkk[i, m]).

Bytes and FLOPs at B=4, T=8192, H=16, K=V=128, C=64, float32 inputs (N = B T H = 524,288 token-heads,
NT = 128 chunks; MiB moved to or from global memory once, not counting re-reads that hit L1/L2):

=========  ===========================================================  ============================
kernel     global memory                                                FLOPs per token-head
=========  ===========================================================  ============================
gates      read g 2 MiB, write b 2 MiB                                  ~C/2 adds
scores     read q, k 256 MiB each; write aqk 128 MiB, lkk** 128 MiB     2 K x 40 = 10 k (x2 delta)
wu**       read k, v 256 MiB each, lkk 128 MiB; write w, u 256 MiB      (K + V) C = 16 k
state      read k 256, v 256 or w + u 512; write h 512 MiB,             2 K V = 33 k (4 K V = 66 k
           V_new** 256 MiB; h0 / ht 4 MiB                               delta)
output     read q 256, h 512, aqk 128, v / V_new 256; write o 256 MiB   2 K V + V (C + 1) = 41 k
=========  ===========================================================  ============================

(40 = the average number of key columns a row computes, whole 16-wide tiles of the lower triangle.)
Summed, the gated delta rule moves about 4.8 GiB (1.4 ms at ~3.5 TB/s) and the decay recurrence about 3 GiB.
Scratch at that size: b 2 MiB, aqk 128 MiB, lkk 128 MiB, w 256 MiB, u 256 MiB, h 512 MiB: 1.25 GiB for the
gated delta rule, 642 MiB for the decay recurrence. The state buffer ``h`` dominates; later rungs avoid
it (recompute S_c, or fuse the output into the state pass).

Registers (ptxas for sm_90, C-contiguous inputs): gates 30, scores 32, wu 56, output 71-80, state 50-52
(additive) and 88-90 (delta rule). The state kernel is compiled with ``launch_bounds=512`` (its largest
block, K = 256): without it ptxas hoists the 16 row addresses out of the chunk loop and takes up to 190
registers for strided inputs, too many for a 512-thread block. No kernel uses local memory.

Numerics: gates, scores, solves and states accumulate in float32; float16 inputs are converted on load.
The delta rule's ``W S_c`` partial sums are added with shared-memory atomics, so their summation order,
and the last bits of the result, may vary from run to run.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import config, cuda, float32, types

from .._common import FLAG_COMBOS, INPUT_DTYPES, array_type, cdiv, or_dummy
from ..reference import RECURRENCES

NAME = "chunked"
MAX_K = 256  # state kernel: K / KR = 16 rows of threads of 32 -> 512 threads a block
MAX_V = None  # V is tiled by every kernel

CHUNK_SIZES = (16, 32, 64, 128)
C_MAX = 128  # the largest chunk: sizes the state kernel's shared V_new tile
TILE = 16  # scores: 16x16 output tile per block, K consumed in 16-wide slabs; C is a multiple of it
TILE_PAD = TILE + 1  # shared-array shapes must be literal constants (Numba does not fold TILE + 1 there)
BV = 32  # value columns per block in the state and output kernels (one warp wide)
KR = 16  # state rows held in registers by one state-kernel thread
STATE_MAX_THREADS = BV * (MAX_K // KR)  # 512
OUT_ROWS = 8  # output kernel: rows of threads (each walks rows ty, ty + 8, ... of its chunk)
WU_THREADS = 128  # wu kernel: columns of [W | U] per block
GATES_THREADS = 256


# ----------------------------------------------------------------------------------------------------------
# 1. gates: in-chunk cumulative log-gates
# ----------------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _gates_kernel():
    def gates(g, bcum, chunk):
        """bcum[b, t, h] = sum of g[b, s, h] for s from the start of t's chunk to t (one thread per token)."""
        B, T, H = g.shape
        i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        if i >= B * T * H:
            return
        b = i // (T * H)
        t = (i // H) % T
        h = i % H
        acc = float32(0.0)
        for s in range((t // chunk) * chunk, t + 1):
            acc += g[b, s, h]
        bcum[b, t, h] = acc

    return cuda.jit(gates)


# ----------------------------------------------------------------------------------------------------------
# 2. scores: the decayed attention matrix Aqk and (delta rule) the strictly lower matrix Lkk of each chunk
# ----------------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _scores_kernel(has_g: bool, delta: bool, has_o: bool = True):
    def scores(q, k, bcum, beta, aqk, lkk, chunk):
        """One 16x16 tile (ti, tj), tj <= ti, of the lower triangle of one chunk's [C, C] score matrices:

        aqk[t, s] = exp(b_t - b_s) q_t . k_s                       for s <= t, 0 for s > t
        lkk[t, s] = beta_t exp(b_t - b_s) k_t . k_s  (delta rule)   for s < t,  0 for s >= t
        Tiles above the diagonal are not launched: those entries are never written nor read.
        Without an output (``has_o`` False, the delta rule's state-only pass) only lkk is computed; q is not read.
        """
        T, H, K = q.shape[1], q.shape[2], q.shape[3]
        c = cuda.blockIdx.x
        b = cuda.blockIdx.y // H
        h = cuda.blockIdx.y % H
        z = cuda.blockIdx.z
        ti = 0  # z = ti (ti + 1) / 2 + tj enumerates the lower-triangular tiles
        while (ti + 1) * (ti + 2) // 2 <= z:
            ti += 1
        tj = z - ti * (ti + 1) // 2
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        t0 = c * chunk
        n = min(chunk, T - t0)  # tokens in this chunk
        row = ti * TILE + ty  # in-chunk index of t: the query (and key) row
        col = tj * TILE + tx  # in-chunk index of s: the key column
        # Slabs of 16 rows x 16 features; +1 column so that reading a column does not hit one bank 16 times.
        q_rows = cuda.shared.array((TILE, TILE_PAD), float32)  # Q[ti * 16 + r, d0 + j]
        k_cols = cuda.shared.array((TILE, TILE_PAD), float32)  # K[tj * 16 + r, d0 + j]
        k_rows = cuda.shared.array((TILE, TILE_PAD), float32)  # K[ti * 16 + r, d0 + j] (delta rule)
        acc_qk = float32(0.0)
        acc_kk = float32(0.0)
        for d0 in range(0, K, TILE):
            # Thread (tx, ty) loads feature d0 + tx of row ty of each slab: consecutive tx, consecutive d.
            d = d0 + tx
            rs = tj * TILE + ty
            if has_o:
                q_rows[ty, tx] = float32(q[b, t0 + row, h, d]) if row < n and d < K else float32(0.0)
            k_cols[ty, tx] = float32(k[b, t0 + rs, h, d]) if rs < n and d < K else float32(0.0)
            if delta:
                k_rows[ty, tx] = float32(k[b, t0 + row, h, d]) if row < n and d < K else float32(0.0)
            cuda.syncthreads()
            for j in range(TILE):
                if has_o:
                    acc_qk += q_rows[ty, j] * k_cols[tx, j]
                if delta:
                    acc_kk += k_rows[ty, j] * k_cols[tx, j]
            cuda.syncthreads()
        if row < n:
            t = t0 + row
            decay = float32(1.0)
            if has_g and col <= row:
                decay = math.exp(bcum[b, t, h] - bcum[b, t0 + col, h])  # b_t - b_s <= 0
            if has_o:
                aqk[b, t, h, col] = acc_qk * decay if col <= row else float32(0.0)
            if delta:
                lkk[b, t, h, col] = beta[b, t, h] * acc_kk * decay if col < row else float32(0.0)

    return cuda.jit(scores)


# ----------------------------------------------------------------------------------------------------------
# 3. wu (delta rule): W and U by forward substitution
# ----------------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _wu_kernel(has_g: bool):
    def wu(k, v, bcum, beta, lkk, w, u, chunk):
        """One column of [W | U] of one chunk, solving (I + Lkk) X = R row by row (forward substitution):

        X[i] = R[i] - sum_{m < i} Lkk[i, m] X[m],   R = diag(beta gamma) K for W, diag(beta) V for U.
        The column's earlier rows are read back from global memory (this thread wrote them).
        """
        T, H, K = k.shape[1], k.shape[2], k.shape[3]
        V = v.shape[3]
        c = cuda.blockIdx.x
        b = cuda.blockIdx.y // H
        h = cuda.blockIdx.y % H
        col = cuda.blockIdx.z * cuda.blockDim.x + cuda.threadIdx.x
        if col >= K + V:
            return
        t0 = c * chunk
        n = min(chunk, T - t0)
        for i in range(n):
            t = t0 + i
            if col < K:
                x = beta[b, t, h] * float32(k[b, t, h, col])
                if has_g:
                    x *= math.exp(bcum[b, t, h])  # gamma_i = exp(b_i - 0)
                for m in range(i):
                    x -= lkk[b, t, h, m] * w[b, t0 + m, h, col]
                w[b, t, h, col] = x
            else:
                x = beta[b, t, h] * float32(v[b, t, h, col - K])
                for m in range(i):
                    x -= lkk[b, t, h, m] * u[b, t0 + m, h, col - K]
                u[b, t, h, col - K] = x

    return cuda.jit(wu)


# ----------------------------------------------------------------------------------------------------------
# 4. state: the sequential pass over chunks
# ----------------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _state_kernel(has_g: bool, delta: bool, has_h0: bool, has_ht: bool, store_h: bool = True):
    def state(k, v, w, u, bcum, h0, ht, hbuf, chunk):
        """State columns vt * 32 + tx, rows ty * 16 .. ty * 16 + 15, carried through every chunk c:

        hbuf[b, c, h] = S                                       (the chunk's starting state S_c; not when
                                                                 store_h is False: no output is computed)
        V_new = U - W S        (delta rule; written over U)     V_new = V (additive)
        S    <- gamma_C S + sum_t exp(b_C - b_t) k_t V_new[t]^T (C: the chunk's last token)
        """
        T, H, K = k.shape[1], k.shape[2], k.shape[3]
        V = v.shape[3]
        NT = (T + chunk - 1) // chunk
        b = cuda.blockIdx.y // H
        h = cuda.blockIdx.y % H
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        nty = cuda.blockDim.y
        vcol = cuda.blockIdx.x * BV + tx
        vok = vcol < V
        r0 = ty * KR
        nrows = min(KR, K - r0)  # rows r0 .. r0 + nrows - 1 of the state are this thread's
        S = cuda.local.array(KR, float32)  # constant size, constant-trip loops: lives in registers
        for i in range(KR):
            S[i] = float32(0.0)
            if has_h0 and vok and i < nrows:
                S[i] = h0[b, h, r0 + i, vcol]
        vnew = cuda.shared.array((C_MAX, BV), float32)  # delta rule: V_new of the chunk, columns of the block
        for c in range(NT):
            t0 = c * chunk
            n = min(chunk, T - t0)
            if store_h and vok:
                for i in range(KR):
                    if i < nrows:
                        hbuf[b, c, h, r0 + i, vcol] = S[i]
            if delta:
                # V_new[t] = U[t] - sum_r W[t, r] S[r]: the sum runs over rows held by all nty threads of the
                # column, so each adds its partial sum into shared memory.
                for t in range(ty, n, nty):
                    vnew[t, tx] = u[b, t0 + t, h, vcol] if vok else float32(0.0)
                cuda.syncthreads()
                for t in range(n):
                    p = float32(0.0)
                    for i in range(KR):
                        if i < nrows:
                            p += w[b, t0 + t, h, r0 + i] * S[i]
                    cuda.atomic.add(vnew, (t, tx), -p)
                cuda.syncthreads()
                if vok:
                    for t in range(ty, n, nty):
                        u[b, t0 + t, h, vcol] = vnew[t, tx]  # V_new replaces U (same block, same entries)
            if vok:
                b_last = float32(0.0)
                if has_g:
                    b_last = bcum[b, t0 + n - 1, h]
                    gamma_c = math.exp(b_last)
                    for i in range(KR):
                        S[i] *= gamma_c
                for t in range(n):
                    x = vnew[t, tx] if delta else float32(v[b, t0 + t, h, vcol])
                    if has_g:
                        x *= math.exp(b_last - bcum[b, t0 + t, h])  # gamma_C / gamma_t
                    for i in range(KR):
                        if i < nrows:
                            S[i] += float32(k[b, t0 + t, h, r0 + i]) * x
            if delta:
                cuda.syncthreads()  # the next chunk overwrites vnew
        if has_ht and vok:
            for i in range(KR):
                if i < nrows:
                    ht[b, h, r0 + i, vcol] = S[i]

    if config.ENABLE_CUDASIM:  # the simulator's cuda.jit takes no launch_bounds
        return cuda.jit(state)
    # Declaring the largest block (K = MAX_K: 512 threads) caps ptxas at 128 registers a thread, so that the
    # launch cannot fail for lack of registers (float32 C-contiguous inputs need 96-128; strided ones more).
    return cuda.jit(state, launch_bounds=STATE_MAX_THREADS)


# ----------------------------------------------------------------------------------------------------------
# 5. output: every chunk at once
# ----------------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _output_kernel(has_g: bool, delta: bool):
    def output(q, v, u, bcum, aqk, hbuf, o, scale, chunk):
        """o[t, v] = scale (gamma_t q_t . S_c[:, v] + sum_{s <= t} aqk[t, s] V_new[s, v]), V_new = u or v."""
        T, H, K = q.shape[1], q.shape[2], q.shape[3]
        V = o.shape[3]
        c = cuda.blockIdx.x
        b = cuda.blockIdx.y // H
        h = cuda.blockIdx.y % H
        vcol = cuda.blockIdx.z * BV + cuda.threadIdx.x
        if vcol >= V:
            return
        t0 = c * chunk
        n = min(chunk, T - t0)
        for r in range(cuda.threadIdx.y, n, cuda.blockDim.y):
            t = t0 + r
            inter = float32(0.0)  # q_t . S_c[:, v]: what the state before the chunk contributes
            for d in range(K):
                inter += float32(q[b, t, h, d]) * hbuf[b, c, h, d, vcol]
            if has_g:
                inter *= math.exp(bcum[b, t, h])  # gamma_t
            intra = float32(0.0)  # causal, decayed attention inside the chunk
            for s in range(r + 1):
                if delta:
                    intra += aqk[b, t, h, s] * u[b, t0 + s, h, vcol]
                else:
                    intra += aqk[b, t, h, s] * float32(v[b, t0 + s, h, vcol])
            o[b, t, h, vcol] = scale * (inter + intra)

    return cuda.jit(output)


# ----------------------------------------------------------------------------------------------------------
# launching
# ----------------------------------------------------------------------------------------------------------
def forward(q, k, v, g, beta, o, h0, ht, scale, chunk_size, stream=0):
    """Launch the pipeline of the module docstring (the rung contract: :mod:`linattn_numba.rungs`).

    Scratch buffers are allocated per call (sizes in the module docstring). ``h0`` and ``ht`` may be the same
    array: each state-kernel thread reads its elements of ``h0`` before the chunk loop and writes the same
    elements of ``ht`` after it.

    ``o=None`` means "state only" (how rung r4 ``scan`` uses this rung for its segments' final states): only
    ``ht`` is computed. Then the scores kernel computes only the delta rule's Lkk (the additive recurrences skip
    it), the state kernel does not store the chunk states ``hbuf``, and the output kernel is not launched: no
    ``aqk`` or ``hbuf`` scratch is allocated.
    """
    B, T, H, K = q.shape
    V = v.shape[3]
    if chunk_size not in CHUNK_SIZES:
        raise ValueError(f"rung {NAME!r}: chunk_size must be one of {CHUNK_SIZES}, got {chunk_size!r}")
    if K > MAX_K:
        raise ValueError(f"rung {NAME!r} supports K <= {MAX_K}, got K={K}")
    C = int(chunk_size)
    has_g, delta = g is not None, beta is not None
    has_o = o is not None
    NT = cdiv(T, C)
    BH = B * H
    if BH == 0 or V == 0:
        return

    def scratch(*shape):
        return cuda.device_array(shape, np.float32, stream=stream)

    bcum = scratch(B, T, H) if has_g else or_dummy(None, 3)  # 1. in-chunk cumulative gates
    aqk = scratch(B, T, H, C) if has_o else or_dummy(None, 4)  # 2. scores Q K^T ⊙ Gamma (row t, in-chunk column s)
    lkk = scratch(B, T, H, C) if delta else or_dummy(None, 4)  # 2. strictly lower L of the delta rule
    w = scratch(B, T, H, K) if delta else or_dummy(None, 4)  # 3. W
    u = scratch(B, T, H, V) if delta else or_dummy(None, 4)  # 3. U, then (4.) V_new in place
    hbuf = scratch(B, NT, H, K, V) if has_o else or_dummy(None, 5)  # 4. the starting state of every chunk
    if T > 0:
        if has_g:
            _gates_kernel()[cdiv(B * T * H, GATES_THREADS), GATES_THREADS, stream](g, bcum, C)
        nsub = cdiv(min(C, T), TILE)  # 16-row tiles per chunk (fewer when the whole sequence is one short chunk)
        if has_o or delta:  # state only: the additive recurrences need no scores at all
            _scores_kernel(has_g, delta, has_o)[(NT, BH, nsub * (nsub + 1) // 2), (TILE, TILE), stream](
                q, k, bcum, or_dummy(beta, 3), aqk, lkk, C
            )
        if delta:
            _wu_kernel(has_g)[(NT, BH, cdiv(K + V, WU_THREADS)), WU_THREADS, stream](k, v, bcum, beta, lkk, w, u, C)
    if K > 0 and (T > 0 or ht is not None):  # with T = 0 this only copies h0 (or zeros) to ht
        state_kernel = _state_kernel(has_g, delta, h0 is not None, ht is not None, has_o)
        state_kernel[(cdiv(V, BV), BH), (BV, cdiv(K, KR)), stream](
            k, v, w, u, bcum, or_dummy(h0, 4), or_dummy(ht, 4), hbuf, C
        )
    if T > 0 and has_o:
        _output_kernel(has_g, delta)[(NT, BH, cdiv(V, BV)), (BV, OUT_ROWS), stream](
            q, v, u, bcum, aqk, hbuf, o, np.float32(scale), C
        )


def compile_targets():
    """``(label, py_func, argtypes)`` for every kernel variant: the 4 recurrences x float32 / float16 inputs,
    and the state kernel also with / without h0 and ht. The state-only pass (``o=None``) adds the delta rule's
    Lkk-only scores kernel and the state kernel without ``hbuf`` stores (with ht, with / without h0). Inputs
    have layout "A" (callers may pass strided views); the scratch buffers and the stand-ins for absent arrays
    are C-contiguous float32."""
    f32, chunk = types.float32, types.int64
    s3, s4, s5 = (array_type(np.float32, n, "C") for n in (3, 4, 5))
    yield "gates", _gates_kernel().py_func, (array_type(np.float32, 3), s3, chunk)
    for dtype in INPUT_DTYPES:
        x4 = array_type(dtype, 4)
        for rec, (has_g, delta) in zip(RECURRENCES, FLAG_COMBOS):
            tag = f"{rec},{np.dtype(dtype).name}"
            beta_t = array_type(np.float32, 3) if delta else s3
            yield f"scores[{tag}]", _scores_kernel(has_g, delta).py_func, (x4, x4, s3, beta_t, s4, s4, chunk)
            if delta:
                yield f"scores[{tag},state_only]", _scores_kernel(has_g, delta, False).py_func, (
                    x4, x4, s3, beta_t, s4, s4, chunk)
                yield f"wu[{tag}]", _wu_kernel(has_g).py_func, (x4, x4, s3, beta_t, s4, s4, s4, chunk)
            for has_h0 in (False, True):
                for has_ht in (False, True):
                    h0_t = array_type(np.float32, 4) if has_h0 else s4
                    ht_t = array_type(np.float32, 4) if has_ht else s4
                    yield (
                        f"state[{tag},h0={int(has_h0)},ht={int(has_ht)}]",
                        _state_kernel(has_g, delta, has_h0, has_ht).py_func,
                        (x4, x4, s4, s4, s3, h0_t, ht_t, s5, chunk),
                    )
                h0_t = array_type(np.float32, 4) if has_h0 else s4
                yield (
                    f"state[{tag},h0={int(has_h0)},ht=1,state_only]",
                    _state_kernel(has_g, delta, has_h0, True, False).py_func,
                    (x4, x4, s4, s4, s3, h0_t, array_type(np.float32, 4), s5, chunk),
                )
            o_t = array_type(np.float32, 4)
            yield f"output[{tag}]", _output_kernel(has_g, delta).py_func, (x4, x4, s4, s3, s4, s5, o_t, f32, chunk)
