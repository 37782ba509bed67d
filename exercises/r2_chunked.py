"""Exercise r2 ``chunked``: the chunkwise-parallel algorithm, one formula per kernel, every intermediate in global
memory.

Your job
    Fill in the five kernel bodies below (the ``# TODO(r2, N)`` blocks), in pipeline order. The math is
    :func:`linattn_numba.reference.chunked` -- read its docstring, and ``notebooks/r2_chunked.py`` sections 1-2.
    The launches (:func:`forward`), the scratch buffers, the compile-time constants and the kernel signatures are
    given and fix the thread maps the TODOs describe: keep them as they are.

    Part 1, the additive recurrences (plain, decay): kernels 1 ``gates``, 2 ``scores`` (``aqk`` only), 4 ``state``
        (without the V_new step) and 5 ``output``. Grade with ``--case plain`` and ``--case decay``.
    Part 2, the delta rule (delta, gated_delta): ``lkk`` in kernel 2, kernel 3 ``wu`` (forward substitution) and
        the V_new step of kernel 4 (shared memory, atomics, three barriers).

The pipeline (``forward`` launches them in this order; * only with g, ** only for the delta rule), in the notation
of the reference: in-chunk cumulative log-gates ``b_t``, ``gamma_t = exp(b_t)``, ``Gamma_ts = exp(b_t - b_s)``::

    1* gates   b[t] = sum of g over the chunk up to t                        -> bcum   [B, T, H]
    2  scores  Aqk = Q K^T ⊙ Gamma (s <= t);  Lkk** = beta_t (K K^T ⊙ Gamma) (s < t)
                                                                             -> aqk, lkk [B, T, H, C]
    3** wu     (I + Lkk) W = diag(beta gamma) K,  (I + Lkk) U = diag(beta) V -> w [B, T, H, K], u [B, T, H, V]
    4  state   per chunk c, in order: hbuf[c] = S;  V_new = U - W S (delta, written over u) or V;
               S <- gamma_C S + (diag(gamma_C / gamma) K)^T V_new           -> hbuf [B, NT, H, K, V], ht
    5  output  O = scale (diag(gamma) Q S_c + Aqk V_new)                     -> o      [B, T, H, V]

Memory-traffic budget to aim for (what the package's rung moves; bytes to and from global memory, each array
once, cached re-reads not counted). At B=4 T=8192 H=16 K=V=128, C=64, float32: gates 4 MiB; scores 768 MiB
(read q, k 256 MiB each, write aqk 128 MiB and lkk 128 MiB); wu 1.1 GiB; state 1.5 GiB (of which the chunk
states ``hbuf``: 512 MiB); output 1.4 GiB -- about 4.8 GiB for the gated delta rule, 3 GiB for the decay recurrence,
against 1 GiB of inputs and output. Much more than that means an array read many times where once would do
(e.g. the state kernel reading hbuf, or the output kernel reading k). ``notebooks/r2_chunked.py`` section 5 has
the per-kernel function (``r2_budget``) behind these numbers.

Rules that hold in every kernel: accumulate in float32 (``float32(0.0)``; convert every q, k, v element with
``float32(...)``: they may be float16); every exponent is a difference ``<= 0`` of in-chunk cumulative gates,
never ``exp(b_t) * exp(-b_s)`` (it overflows for strong decay, see ``notebooks/precision_and_stability.py``);
entries above a chunk's diagonal are never computed, only zeros written where the layout needs them; a thread
that must reach a barrier must not ``return`` before it.

Grade it
    linattn-numba grade exercises/r2_chunked.py --case plain    # part 1 (then --case decay)
    linattn-numba grade exercises/r2_chunked.py --quick         # 4 cases, one per recurrence
    linattn-numba grade exercises/r2_chunked.py                 # all cases (chunk_size 16, T up to 70)

    As given (the kernel bodies are ``pass``) every case FAILS with "some outputs never written". A case that
    hangs (a barrier not every thread reaches) is stopped after ``--timeout`` seconds and reported.

Afterwards
    Compare with ``src/linattn_numba/rungs/r2_chunked.py``; on a GPU, ``linattn-numba bench --rungs
    recurrent,chunked`` shows what the chunked form costs and where the time goes (``notebooks/r2_chunked.py``).
"""

from __future__ import annotations

import functools
import math  # noqa: F401 - you will need math.exp

import numpy as np
from numba import config, cuda, float32, types  # noqa: F401 - float32(...) converts and types a value

from linattn_numba._common import FLAG_COMBOS, INPUT_DTYPES, array_type, cdiv, or_dummy
from linattn_numba.reference import RECURRENCES

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
        # TODO(r2, 1): one thread per token-head. forward launches ceil(B T H / 256) blocks of 256 threads over the
        #   flattened [B, T, H] array, h fastest:  i = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x;
        #   return if i >= B * T * H (the last block is partial); b = i // (T H), t = (i // H) % T, h = i % H.
        #   Sum g[b, s, h] in float32 for s from the first token of t's chunk, (t // chunk) * chunk, up to t itself,
        #   and store it in bcum[b, t, h]. That is b_t of reference.chunked: the sum restarts at every chunk, so
        #   |b_t| <= C |min g| however long the sequence -- the decays exp(b_t - b_s) stay well-behaved.
        #   (O(C) redundant additions per thread instead of a scan: simple, and the whole GPU is busy.)
        # Memory traffic: g read once per token (the re-reads of the same chunk hit L1/L2), bcum written once:
        #   8 bytes per token-head. No shared memory, no barrier.
        pass

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
        # TODO(r2, 2): thread (tx, ty) owns entry (row, col) = (ti * TILE + ty, tj * TILE + tx) of one 16x16 tile
        #   of chunk c = blockIdx.x of head (b, h) = divmod(blockIdx.y, H). forward launches grid
        #   (NT, B H, m (m + 1) / 2), block (TILE, TILE), with m = ceil(min(C, T) / TILE) tiles per side: blockIdx.z
        #   enumerates only the tiles with tj <= ti, as z = ti (ti + 1) / 2 + tj. Recover ti (the largest ti with
        #   ti (ti + 1) / 2 <= z: a short while loop) and tj = z - ti (ti + 1) / 2. The chunk starts at t0 = c * chunk
        #   and holds n = min(chunk, T - t0) tokens (the last chunk may be partial).
        # Steps -- the textbook shared-memory tiled matmul, over 16-wide slabs of the K features:
        #   declare q_rows, k_cols (and k_rows) = cuda.shared.array((TILE, TILE_PAD), float32), one call per line.
        #   for d0 in range(0, K, TILE):
        #     each thread loads ONE element of each slab (0 for a token >= n or a feature >= K):
        #       q_rows[ty, tx] = q[b, t0 + row, h, d0 + tx]              Q rows of the tile's row block
        #       k_cols[ty, tx] = k[b, t0 + tj * TILE + ty, h, d0 + tx]   K rows of the tile's column block
        #       k_rows[ty, tx] = k[b, t0 + row, h, d0 + tx]              (delta only: K rows of the row block)
        #     consecutive tx read consecutive features: coalesced. TILE_PAD = TILE + 1 columns, so that reading a
        #     column of a slab (k_cols[tx, j] across tx) does not hit the same shared-memory bank 16 times.
        #     cuda.syncthreads()  -- protects: the slabs are complete before any thread reads them.
        #     acc_qk += q_rows[ty, j] * k_cols[tx, j]  for j in range(TILE)   (and acc_kk += k_rows[ty, j] * ...)
        #     cuda.syncthreads()  -- protects: no thread overwrites a slab (next d0) while another still reads it.
        #   Every thread of the block must reach both barriers: guard loads and stores, never return early.
        #   Then, if row < n (t = t0 + row):
        #     decay = exp(bcum[b, t, h] - bcum[b, t0 + col, h]) if has_g and col <= row, else 1: a difference <= 0,
        #       evaluated only on or below the diagonal (above it the difference is positive and may overflow)
        #     aqk[b, t, h, col] = acc_qk * decay  if col <= row  else 0           (the causal mask includes s = t)
        #     lkk[b, t, h, col] = beta[b, t, h] * acc_kk * decay  if col < row  else 0   (delta; strictly lower)
        # Memory traffic: q and k rows read once per tile they feed (the repeats hit L2): about 2 K * 4 bytes per
        #   token-head from DRAM; aqk (and lkk) written once, C * 4 bytes per token-head each. Each shared load feeds
        #   one FMA: the reuse r3 improves with register blocking.
        # has_o is False only in the delta rule's state-only pass (forward with o=None, used by rung r4): then skip
        #   everything about q and aqk. The grader always asks for o; `if has_o:` around the q / aqk lines is enough.
        pass

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
        # TODO(r2, 3, delta rule): thread -> column col = blockIdx.z * blockDim.x + threadIdx.x of [W | U] (K + V
        #   columns: col < K is column col of W, else column col - K of U) of chunk c = blockIdx.x, head (b, h) =
        #   divmod(blockIdx.y, H). forward launches grid (NT, B H, ceil((K + V) / 128)), 128 threads a block.
        #   Return if col >= K + V (no barrier in this kernel: an early return is safe).
        # Forward substitution down the n = min(chunk, T - t0) rows of the chunk, i = 0, 1, ..., n - 1 in order:
        #   W[i, col] = beta_i exp(b_i) k[t0 + i, col]  -  sum_{m < i} lkk[t0 + i, m] W[m, col]    (exp only if has_g)
        #   U[i, col] = beta_i v[t0 + i, col - K]        -  sum_{m < i} lkk[t0 + i, m] U[m, col - K]
        #   with W and U stored in w[b, t0 + i, h, col] and u[b, t0 + i, h, col - K]. Row m < i of the column was
        #   written by this same thread a moment ago: read it back from global memory (cached). Rows depend on
        #   earlier rows, columns do not depend on each other: one thread per column, no communication.
        #   This applies A = (I + L)^-1 of reference.chunked without forming A: check W = A diag(beta gamma) K there.
        # Memory traffic: k, v read once, w, u written once ((K + V) * 4 bytes per token-head each way); lkk read
        #   once per block of 128 columns -- every thread of a block reads the same lkk[i, m] (a broadcast).
        pass

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
        # TODO(r2, 4): the only sequential part: the state S of one head, chunk after chunk. forward launches grid
        #   (ceil(V / BV), B H), block (BV, ceil(K / KR)) = (32, K / 16). Thread (tx, ty) holds value column
        #   vcol = blockIdx.x * BV + tx and state rows r0 = ty * KR, ..., r0 + KR - 1 (nrows = min(KR, K - r0) of them
        #   real) in registers: S = cuda.local.array(KR, float32). Threads with vcol >= V exist (V need not be a
        #   multiple of 32): they must not load or store, but they must reach every barrier (vok = vcol < V).
        #   Loop over the register rows as `for i in range(KR): if i < nrows: ...` -- a compile-time trip count keeps
        #   S in registers (an index the compiler cannot resolve would move S to local memory).
        # Steps: S = h0[b, h, r0 + i, vcol] if has_h0 else 0. Then for c in range(NT) (NT = ceil(T / chunk), V =
        #   v.shape[3] -- not from hbuf's shape, a 1-element stand-in when store_h is False; t0 = c * chunk,
        #   n = min(chunk, T - t0)):
        #   1. hbuf[b, c, h, r0 + i, vcol] = S[i]: the chunk's starting state S_c, for the output kernel (only if
        #      store_h: False in the state-only pass, forward with o=None, where nothing reads hbuf).
        #   2. delta only -- V_new[t] = U[t] - sum_r W[t, r] S[r, vcol]: the sum runs over all K rows, held by the
        #      K / 16 threads of the column, so they meet in shared memory,
        #      vnew = cuda.shared.array((C_MAX, BV), float32) (declared once, before the chunk loop):
        #        vnew[t, tx] = u[b, t0 + t, h, vcol] for t = ty, ty + nty, ... < n  (nty = cuda.blockDim.y)
        #        cuda.syncthreads()  -- protects: U is in place before any thread subtracts from it.
        #        for t < n: p = sum over this thread's rows of w[b, t0 + t, h, r0 + i] * S[i];
        #                   cuda.atomic.add(vnew, (t, tx), -p)     (several threads add into the same cell)
        #        cuda.syncthreads()  -- protects: every partial sum is in before V_new is read.
        #        write vnew[t, tx] back over u[b, t0 + t, h, vcol] (t = ty, ty + nty, ...): the output kernel reads
        #        V_new from u. The atomics' order varies from run to run, so do the last bits (precision notebook).
        #   3. the update, with b_last = bcum[b, t0 + n - 1, h] (has_g):  S[i] *= exp(b_last), then for t < n
        #        x = vnew[t, tx] (delta) or v[b, t0 + t, h, vcol], times exp(b_last - bcum[b, t0 + t, h]) (has_g);
        #        S[i] += k[b, t0 + t, h, r0 + i] * x                       (gamma_C / gamma_t: a difference <= 0)
        #   4. delta: cuda.syncthreads()  -- protects: the next chunk's step 2 overwrites vnew while a slower thread
        #      may still be reading it in step 3.
        #   Finally, if has_ht: ht[b, h, r0 + i, vcol] = S[i]. (h0 and ht may be one array: each thread reads its
        #   elements of h0 before the loop and writes the same elements of ht after it.)
        # Memory traffic: per block of 32 value columns, k (and v, or w and u) read once: (K + V) * 4 bytes per
        #   token-head; hbuf written once, K V * 4 bytes per chunk and head -- the largest scratch array; V_new
        #   written over u. Nothing in this kernel is parallel over chunks: keep the per-chunk work small.
        pass

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
        # TODO(r2, 5): every chunk at once. Thread (tx, ty) -> value column vcol = blockIdx.z * BV + tx of chunk
        #   c = blockIdx.x, head (b, h) = divmod(blockIdx.y, H), and the chunk's rows r = ty, ty + 8, ... < n.
        #   forward launches grid (NT, B H, ceil(V / BV)), block (BV, OUT_ROWS) = (32, 8). Return if vcol >= V
        #   (no barrier here).
        # For each of its rows r (t = t0 + r):
        #   inter = sum_d q[b, t, h, d] * hbuf[b, c, h, d, vcol]   -- q_t . S_c[:, vcol]: the state before the chunk --
        #           times exp(bcum[b, t, h]) if has_g (gamma_t)
        #   intra = sum_{s <= r} aqk[b, t, h, s] * x_s,   x_s = u[b, t0 + s, h, vcol] (delta: V_new) or v[...]
        #   o[b, t, h, vcol] = scale * (inter + intra)
        # Memory traffic: o written once (V * 4 bytes per token-head); q, aqk and V_new read once per block of 32
        #   columns (broadcast loads: one address for the whole warp), hbuf K V * 4 bytes per chunk and head.
        pass

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
    aqk = scratch(B, T, H, C) if has_o else or_dummy(None, 4)  # 2. decayed scores Q K^T ⊙ Gamma (row t, in-chunk column s)
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
