"""Exercise r1 ``recurrent``: keep the state in registers, split K across the lanes of a warp.

Your job
    Part 1: fill in the body of ``recurrent_kernel`` (the ``# TODO(r1)`` block). Same math as r0
    (:func:`linattn_numba.reference.recurrent`), but r0 read and wrote its state column in global memory three to
    four times per token; here the state is read once at the start and written once at the end, and lives in
    registers (``cuda.local.array`` with compile-time sizes) in between. The launch (:func:`forward`,
    :func:`launch_config`) and the compile-time constants are given and fix the thread map described in the TODO.

    Part 2 (optional): the decode step. With T = 1 a different thread map is faster (see the TODO in
    ``step_kernel``). Write it, then set ``STEP_KERNEL = True`` so that :func:`forward` launches it for T = 1; until
    then T = 1 goes through your part-1 kernel, which must handle any T anyway.

Grade it
    linattn-numba grade exercises/r1_recurrent.py --quick     # 4 cases (no GPU needed: simulator)
    linattn-numba grade exercises/r1_recurrent.py             # all cases
    linattn-numba grade exercises/r1_recurrent.py --case T1   # only the T = 1 cases (part 2)

    As given (the kernel bodies are ``pass``) every case FAILS with "some outputs never written". A case that
    hangs (a barrier or a shuffle not every thread reaches) is stopped after ``--timeout`` seconds and reported.

Afterwards
    Compare with ``src/linattn_numba/rungs/r1_recurrent.py``; on a GPU, see what r1 buys over r0 with
    ``linattn-numba bench --rungs naive,recurrent``.
"""

from __future__ import annotations

import functools
import math  # noqa: F401 - you will need math.exp

import numpy as np
from numba import cuda, float32, types

from linattn_numba._common import FLAG_COMBOS, INPUT_DTYPES, array_type, cdiv, or_dummy

NAME = "recurrent"
MAX_K = 128  # 32 state rows per lane and column in registers; beyond that they would spill to local memory
MAX_V = None  # value columns are tiled across blocks
CHUNK_SIZES = None  # token by token: chunk_size is not used

# Launch shape (the package's values, tuned on the H200; any power of two NS <= 32 works with a correct kernel).
NS = 8  # lanes that split one value column's K rows (a reduction costs log2(NS) = 3 shuffles)
GROUPS = 32 // NS  # column groups per warp
TC = 32  # tokens staged in shared memory per pair of barriers
FULL_MASK = 0xFFFFFFFF
DEFAULT_COLS = 1  # value columns per lane
DEFAULT_NW = 4  # warps per block

STEP_KERNEL = False  # part 2: set True once step_kernel is written; forward then launches it for T = 1


@functools.lru_cache(maxsize=None)
def _kernel(R: int, COLS: int, NW: int, HAS_G: bool, HAS_BETA: bool, HAS_H0: bool, HAS_HT: bool,
            TC: int = TC, NS: int = NS):
    LOG_NS = NS.bit_length() - 1  # shuffle steps of a reduction over NS lanes (NS is a power of two)
    GROUPS = 32 // NS  # column groups per warp
    KP = R * NS  # K padded to a multiple of NS: rows >= K are zeros in k/q and in the state
    WARP_COLS = GROUPS * COLS  # value columns per warp
    VB = NW * WARP_COLS  # value columns per block
    NT = NW * 32  # threads per block
    ITER_KQ = (TC * KP + NT - 1) // NT  # staging trips per thread for a TC x KP tile (compile-time constants)
    ITER_V = (TC * VB + NT - 1) // NT  # ... and for a TC x VB tile of v

    @cuda.jit
    def recurrent_kernel(q, k, v, g, beta, h0, ht, o, scale):
        # TODO(r1): one block = VB value columns of one head (b, h), for all T tokens.
        #
        # Thread map (forward launches grid (ceil(V / VB), B * H), NT = NW * 32 threads a block):
        #   bh = cuda.blockIdx.y; b = bh // H; h = bh % H;   tid = cuda.threadIdx.x; lane = tid % 32
        #   sl   = lane % NS                                  its slice: it holds rows sl, sl + NS, sl + 2 NS, ...
        #   jb   = (tid // 32) * WARP_COLS + (lane // NS) * COLS  its first column inside the block's tile of VB
        #   col0 = cuda.blockIdx.x * VB + jb                  its first global column; it owns col0 .. col0 + COLS - 1
        #   So the NS consecutive lanes of a group share the same COLS columns, each holding R = KP / NS rows.
        #
        # Registers (compile-time sizes):
        #   S = cuda.local.array((R, COLS), float32)   S[r, c] is state row r * NS + sl of column col0 + c
        #   plus small arrays for this token's k and q rows (R each) and the per-column u (COLS).
        #   Load S once from h0 (rows i < K and columns j < V only; zeros elsewhere and when not HAS_H0).
        #
        # Per tile of TC tokens (for t0 in range(0, T, TC)):
        #   a. Stage k and q [TC, KP], v [TC, VB] (this block's columns), exp(g) [TC] and beta [TC] into shared
        #      memory (cuda.shared.array), every thread loading elements tid, tid + NT, ... so that consecutive
        #      threads read consecutive addresses (coalesced). Pad: rows i >= K and tokens t >= T are 0 in k, q, v
        #      and beta, and 1 in exp(g) -- a padded token is then an identity step, and the hot loop needs no
        #      bounds checks. Convert with float32(...) as you load (inputs may be float16).
        #   b. cuda.syncthreads() -- protects: the staged tile is complete before any warp reads it.
        #   c. For each token tt of the tile (only t0 + tt < T need writing), for each of the lane's COLS columns:
        #        delta rule: partial = sum over the lane's R rows of k[row] * S[r, c], then the full k . S[:, j] by a
        #          butterfly over the NS lanes of the group:
        #              for s in range(LOG_NS): x += cuda.shfl_xor_sync(FULL_MASK, x, 1 << s)
        #          every lane ends with the full sum, so u = beta (v_j - decay * kS) needs no broadcast
        #          (k . (decay S) = decay (k . S): apply the decay inside the update below, at no extra cost).
        #        update: S[r, c] = decay * S[r, c] + k[row] * u     then the same butterfly for q . S[:, j]
        #        write o[b, t0 + tt, h, j] = scale * (q . S[:, j]) from ONE lane of the group (e.g. sl == c % NS), only
        #          for j < V and t0 + tt < T.
        #      The shuffles must be executed by all 32 lanes of the warp (FULL_MASK): never put one inside
        #      `if j < V` or after an early `return` -- lanes past V compute on zeros instead. A missing lane is a
        #      deadlock on a GPU (the grader reports it as TIMEOUT) or garbage.
        #   d. cuda.syncthreads() -- protects: every warp is done reading the tile before step a of the next tile
        #      overwrites it. Without it a fast warp overwrites the tile under a slow one: a race, wrong only
        #      sometimes. Both barriers must be reached by every thread of the block: no `return` before them.
        # Finally, if HAS_HT: write S back to ht (rows i < K, columns j < V).
        #
        # Memory-traffic budget per head, to aim for: the state read once (K V * 4 bytes) and written once per
        #   sequence; per token, q and k (2 K floats) read once per block, v read once, g and beta once --
        #   (2 K + V + 2) * 4 bytes per token, nothing else from global memory. Shared memory: each k / q element
        #   a lane loads feeds COLS FMAs.
        pass

    return recurrent_kernel


SW = 8  # warps that split K in the decode-step kernel


@functools.lru_cache(maxsize=None)
def _step_kernel(RS: int, HAS_G: bool, HAS_BETA: bool, HAS_H0: bool, HAS_HT: bool, SW: int = SW):
    """T = 1: the decode step (part 2, optional). At one token the work is a copy of the state plus arithmetic, so
    the thread map is chosen for streaming the state: lane -> value column, warp -> a slab of RS rows."""
    KP = SW * RS  # K padded to the rows the block covers (size of shared k / q staging, if you stage them)

    @cuda.jit
    def step_kernel(q, k, v, g, beta, h0, ht, o, scale):
        # TODO(r1, part 2): one token (T = 1); forward launches grid (ceil(V / 32), B * H), SW * 32 threads a block.
        #
        # Thread map: w = cuda.threadIdx.x // 32 (warp: rows w * RS .. w * RS + RS - 1); lane = cuda.threadIdx.x % 32;
        #   j = cuda.blockIdx.x * 32 + lane (the value column). A warp reads 32 consecutive floats of a state row per
        #   load: 128 contiguous bytes.
        # Steps: load the RS rows of column j of h0 (or zeros) into a local array first (nothing waits on them
        #   yet); stage k and q once per block into shared arrays of KP floats (zeros for rows >= K) -- every
        #   thread of a warp needs the same values, and RS uniform global loads per thread cost instructions and
        #   registers -- then cuda.syncthreads() (protects: the staged k / q are complete); clamp indices (min(j, V - 1), min(i, K - 1)) so every load is in bounds and mask the
        #   stores instead -- no thread returns early, because of the barriers below.
        #   Delta rule: each warp's partial k . S[:, j] over its rows goes to shared memory red_k[w, lane]; then
        #     cuda.syncthreads() -- protects: all SW partial sums are written before any thread adds them up.
        #   Update the rows (decay * S + k * u), partial q . S[:, j] into red_q[w, lane];
        #     cuda.syncthreads() -- protects: all SW partial sums of q . S are in place.
        #   Warp 0 sums them and writes o[b, 0, h, j] (j < V); every warp writes its rows of ht (i < K, j < V).
        # Memory-traffic budget: the state read once and written once (2 K V * 4 bytes per head), q, k once per
        #   block: the roofline is a copy of the state.
        pass

    return step_kernel


def launch_config(K: int, V: int, cols: int = DEFAULT_COLS, nw: int = DEFAULT_NW, ns: int = NS):
    """``(R, COLS, NW)`` for a shape: rows per lane, columns per lane, warps per block (fewer for narrow V). Given."""
    R = cdiv(K, ns)
    nw = max(1, min(nw, cdiv(V, (32 // ns) * cols)))
    return R, cols, nw


def forward(q, k, v, g, beta, o, h0, ht, scale, chunk_size=None, stream=0, cols=DEFAULT_COLS, nw=DEFAULT_NW,
            tc=TC, ns=NS, sw=SW):
    """Launch r1 (see the rung contract in :mod:`linattn_numba.rungs`). ``h0`` and ``ht`` may alias. Given."""
    B, T, H, K = q.shape
    V = v.shape[3]
    if K > MAX_K:
        raise ValueError(f"rung 'recurrent' supports K <= {MAX_K}, got K={K}")
    if T == 1 and STEP_KERNEL:
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
    ``(label, py_func, argtypes)``. Given."""
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
                    if dt is np.float32 and STEP_KERNEL:
                        step = _step_kernel(cdiv(K, SW), has_g, has_beta, has_state, has_state).py_func
                        yield "step " + label, step, argtypes
