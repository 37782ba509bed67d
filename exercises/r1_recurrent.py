"""Exercise r1 ``recurrent``: keep the state in registers, split K across the lanes of a warp.

Your job
    Part 1: fill in the body of ``recurrent_kernel`` (the ``# TODO(r1)`` block). Same math as r0
    (:func:`linattn_numba.reference.recurrent`), but r0 read and wrote its state column in global memory three to
    four times per token; here the state is read once at the start and written once at the end, and lives in
    registers (``cuda.local.array`` with compile-time sizes) in between. The launch (:func:`forward`,
    :func:`launch_config`), the compile-time constants and the shapes of the shared tiles are given and fix the
    thread map described in the TODO: keep them as they are.

    Part 2 (optional): the decode step. With T = 1 a different thread map is faster (see the TODO in
    ``step_kernel``). Write it, then set ``STEP_KERNEL = True`` so that :func:`forward` launches it for T = 1; until
    then T = 1 goes through your part-1 kernel, which must handle any T anyway.

    Part 3 (optional, after part 2): ``step_kernel_vec``, the same step with 128-bit state accesses; set
    ``STEP_VEC = True`` to use it (on the H200 it took the step from 65% to 90% of the copy bandwidth).

    Part 4 (optional, after part 1): what the package's rung adds to the sequence kernel. (a) The deferred decay:
    keep ``S~`` with ``S = D S~`` in registers, where D is the product of the decays since the last
    renormalisation, so the update is one FMA per element (``S~ += k (u / D)``) instead of a multiply and an FMA;
    fold D into the registers whenever it would drop below ``DEFER_MIN`` (``load_scalars`` and ``tile_scalars``
    stage the per-token factors). (b) Asynchronous staging: ``issue_copies`` starts the next tile's 16-byte
    ``cp.async`` copies into the other half of a double buffer while the block computes on this one; set
    ``STAGE_ASYNC = True`` so that :func:`forward` launches the kernel with ``ASYNC`` where the inputs allow it.
    The helpers' docstrings say what each one does; the package's rung is the reference.

    A first version that is correct matters more than a fast one: get the thread map, the barriers and the
    butterflies right, then read the "Speed" notes of the TODO (batched staging loads, 16-byte shared loads, the
    output reduction pipelined by one token) -- they are what the package's rung adds on top.

Grade it
    linattn-numba grade exercises/r1_recurrent.py --quick     # 4 cases (no GPU needed: simulator)
    linattn-numba grade exercises/r1_recurrent.py             # all cases
    linattn-numba grade exercises/r1_recurrent.py --case T1   # only the T = 1 cases (part 2)

    As given (the kernel bodies are ``pass``) every case FAILS with "some outputs never written". A case that
    hangs (a barrier or a shuffle not every thread reaches) is stopped after ``--timeout`` seconds and reported.

Afterwards
    Compare with ``src/linattn_numba/rungs/r1_recurrent.py`` (its module docstring explains every choice); on a
    GPU, see what r1 buys over r0 with ``linattn-numba bench --rungs naive,recurrent``.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32, types

from linattn_numba import sim
from linattn_numba._common import FLAG_COMBOS, INPUT_DTYPES, array_type, cdiv, launch_dynamic, or_dummy
from linattn_numba.vec import cp_async16, cp_async_wait_all, ld4, st4  # noqa: F401 - parts 3 and 4

NAME = "recurrent"
MAX_K = 128  # 16 state rows per lane and column at NS = 8; more would crowd the 255-register budget
MAX_V = None  # value columns are tiled across blocks
CHUNK_SIZES = None  # token by token: chunk_size is not used

# Launch shape: the package's values, tuned on the H200 (any power of two NS <= 32 and COLS <= NS work with a
# correct kernel; forward takes them as ns=, cols=, nw=, tc=).
NS = 8  # lanes that split one value column's K rows (a reduction costs log2(NS) = 3 shuffles)
GROUPS = 32 // NS  # column groups per warp
TC = 32  # tokens staged in shared memory per pair of barriers (<= 32: per-token scalars come from one warp)
FULL_MASK = 0xFFFFFFFF
DEFAULT_COLS = 2  # value columns per lane
DEFAULT_NW = 8  # warps per block
# 16-byte aligned shared tiles let the compiler merge a lane's 4 consecutive k (or q) values into one 128-bit
# shared load; the simulator rejects the argument (and needs no alignment)
ALIGN = None if sim.active() else 16
STAGE_BATCH = 8  # global loads a thread has in flight while staging a tile (see "Speed" in the TODO)

STEP_KERNEL = False  # part 2: set True once step_kernel is written; forward then launches it for T = 1
# part 4: a tile keeps its decay deferred while D >= DEFER_MIN (1 / D <= 2**20); STAGE_ASYNC: set True once the
# asynchronous staging is written (TC_ASYNC tokens per tile, two tiles within SMEM_MAX of dynamic shared memory)
DEFER_MIN = np.float32(2.0**-20)
LN_DEFER_MIN = np.float32(math.log(DEFER_MIN))
STAGE_ASYNC = False
TC_ASYNC = 32
SMEM_MAX = 227 * 1024


@functools.lru_cache(maxsize=None)
def _kernel(RC: int, COLS: int, NW: int, HAS_G: bool, HAS_BETA: bool, HAS_H0: bool, HAS_HT: bool,
            TC: int = TC, NS: int = NS, ASYNC: bool = False):
    LOG_NS = NS.bit_length() - 1  # shuffle steps of a reduction over NS lanes (NS is a power of two)
    GROUPS = 32 // NS  # column groups per warp
    R = 4 * RC  # state rows per lane: RC chunks of 4 consecutive rows
    KP = R * NS  # K padded to a multiple of 4 NS: rows >= K are zeros in k/q and in the state
    KP4 = KP // 4  # 4-row chunks of a padded k / q row
    VB = NW * GROUPS * COLS  # value columns per block
    VBC = VB // COLS  # column groups per block
    NT = NW * 32  # threads per block
    # Staging trips per thread (compile-time constants). When NT is a multiple of the tile's row length, a thread
    # stages one fixed k/q row index (or v column) at every (NT / KP)-th token (FAST_KQ, FAST_V): its index
    # arithmetic is loop invariant. Otherwise the generic flat walk e = tid + m NT over the tile.
    FAST_KQ = NT % KP == 0 and (TC * KP) % NT == 0
    FAST_V = NT % VB == 0 and (TC * VB) % NT == 0
    ITER_KQ = (TC * KP + NT - 1) // NT  # trips for a TC x KP tile of k (and of q)
    SB = min(ITER_KQ, STAGE_BATCH)  # loads per batch (see "Speed")
    NB_KQ = (ITER_KQ + SB - 1) // SB  # batches of k / q loads per tile
    ITER_V = (TC * VB + NT - 1) // NT  # trips for a TC x VB tile of v
    # part 4 (ASYNC): two buffers of TC token rows each (TCB rows in all); 16-byte copies per tile: k and q
    # (NCK each), v (NCV), ITER_A per thread
    NBUF = 2 if ASYNC else 1
    TCB = NBUF * TC
    NCK = TC * KP4
    NCV = TC * (VB // 4)
    ITER_A = (2 * NCK + NCV + NT - 1) // NT
    # the package rung's layout, if you follow it in part 4: one flat shared array (dynamic under ASYNC) holding
    # the k and q tiles [TCB, KP], v [TCB, VB] and NBUF (TC + 1) rows of 4 per-token scalars, at these offsets
    TG = TC + 1
    KOFF = 0
    QOFF = TCB * KP
    VOFF = 2 * TCB * KP
    GOFF = VOFF + TCB * VB
    SMF = GOFF + NBUF * TG * 4

    @cuda.jit(device=True, inline="always")
    def tile_scalars(sm, buf, lane, T, gl, bl, dcarry, scale):
        """Part 4, warp 0: the per-token scalars of one tile into rows ``buf * TG ..`` of the scalar part of ``sm``
        (per token: beta, beta D, 1 / D, scale D where the tile keeps the decay deferred -- D = exp(G_j), G_j
        the sum of the tile's log-decays up to token j, a warp scan -- or beta, beta dec, dec, scale where D would
        drop below DEFER_MIN), then a header row (deferred or not, ``dcarry`` -- the previous tile's D to fold into
        the registers first --, this tile's D at its end). Lane j brings token j's log-decay ``gl`` and beta
        ``bl``. Returns this tile's D at its end."""
        pass

    @cuda.jit(device=True, inline="always")
    def load_scalars(g, beta, b, h, t, T):
        """Part 4: token t's log-decay and beta as float32 (0 and 1 where absent or t >= T)."""
        pass

    @cuda.jit(device=True, inline="always")
    def issue_copies(sm, buf, kbh, qbh, vbh, x, t0, T, tid):
        """Part 4, ASYNC: start the 16-byte ``cp_async16`` copies of the tile at ``t0`` from this head's ``[T, K]``
        views ``kbh``, ``qbh`` (k, q rows) and ``[T, V]`` view ``vbh`` (block ``x``'s VB columns) into token rows
        ``buf * TC ..`` of the tiles in ``sm``, zero-filled (``nbytes`` 0) past the sequence, past K and past V.
        Nothing waits for them here: ``cp_async_wait_all`` and a barrier do, a tile later. Careful with warp 0's
        ``tile_scalars`` (it shuffles inside ``if tid < 32``): give ptxas a convergence point after that branch
        (``cuda.syncwarp()``), or it guards every shuffle of the token loop with a divergence check (the rung's
        docstring, "Staging")."""
        pass

    def make_tile_loop(DEFERRED: bool):
        """Part 4: the token loop over one staged tile as a device function, DEFERRED (the decay kept in D, one
        FMA per state element) or exact (each token's decay multiplied into the registers)."""

        @cuda.jit(device=True, inline="always")
        def tile_loop(S, kr, qr, u, kS, accp, ps, wsel, sm, tb, gbase, ntok, sl, grp, obh, jo, V, t0):
            pass

        return tile_loop

    tile_deferred = make_tile_loop(True)  # noqa: F841 - part 4
    tile_exact = make_tile_loop(False)  # noqa: F841 - part 4

    @cuda.jit
    def recurrent_kernel(q, k, v, g, beta, h0, ht, o, scale):
        # TODO(r1): one block = VB value columns of one head (b, h), for all T tokens.
        #
        # Thread map (forward launches grid (ceil(V / VB), B * H), NT = NW * 32 threads a block):
        #   bh = cuda.blockIdx.y; b = bh // H; h = bh % H;   tid = cuda.threadIdx.x; lane = tid % 32
        #   sl   = lane % NS                               its slice of K (see the rows below)
        #   grp  = (tid // 32) * GROUPS + lane // NS       its column group inside the block's tile (0 .. VBC - 1)
        #   col0 = cuda.blockIdx.x * VB + grp * COLS        its first global column; it owns col0 .. col0 + COLS - 1
        #   Rows: in chunks of 4 consecutive rows, dealt round-robin to the NS lanes of a group: lane slice sl holds
        #   chunks sl, sl + NS, sl + 2 NS, ... (RC of them), i.e. rows i = 4 (m NS + sl) + e for m < RC, e < 4:
        #   R = 4 RC rows. (At K = 128, NS = 8: rows 0-3 and 32-35, 64-67, 96-99 for sl = 0; 4-7, 36-39, ... for
        #   sl = 1.) Consecutive rows per lane make its k / q values contiguous in shared memory (see "Speed").
        #   So the NS consecutive lanes of a group share the same COLS columns, each holding R rows of them.
        #
        # Registers (compile-time sizes):
        #   S = cuda.local.array((R, COLS), float32)   S[4 m + e, c] = state[4 (m NS + sl) + e, col0 + c]
        #   plus small arrays for this token's k and q rows (R each) and per-column u, k.S, q.S (COLS each).
        #   Load S once from h0 (rows i < K and columns j < V only; zeros elsewhere and when not HAS_H0). Index
        #   local arrays only with loop counters of range() over compile-time constants (or the compiler puts them
        #   in local memory, which is slow): e.g. never S[sl, c] or acc[sl].
        #
        # Shared tiles (declare them like this; shapes must be compile-time constants, alignment=ALIGN):
        #   ks = cuda.shared.array((TC, KP4, 4), float32, alignment=ALIGN)   ks[tt, i // 4, i % 4] = k row i of token tt
        #   qs = cuda.shared.array((TC, KP4, 4), float32, alignment=ALIGN)   the same for q (store it times scale)
        #   vs = cuda.shared.array((TC, VBC, COLS), float32, alignment=ALIGN) vs[tt, jj // COLS, jj % COLS] = v of
        #        the block's column jj: a lane's COLS values are vs[tt, grp, :]
        #   gb = cuda.shared.array((TC, 4), float32, alignment=ALIGN)        per token: beta, beta * exp(g), exp(g)
        #   A lane's chunk m of token tt is then ks[tt, m * NS + sl, 0:4].
        #
        # Per tile of TC tokens (for t0 in range(0, T, TC)):
        #   a. Stage k and q [TC, KP], v [TC, VB] (this block's columns) and the per-token scalars into shared
        #      memory, every thread loading flat elements e = tid, tid + NT, ... (ITER_KQ, ITER_V trips) so that
        #      consecutive threads read consecutive addresses (coalesced): tt = e // KP, i = e % KP. Pad: rows
        #      i >= K and tokens t >= T are 0 in k, q, v and beta, and exp(g) is 1 there -- a padded token is then
        #      an identity step, and the hot loop needs no bounds checks. Convert with float32(...) as you load
        #      (inputs may be float16). Per-token scalars: threads tid < TC, one token each.
        #   b. cuda.syncthreads() -- protects: the staged tile is complete before any warp reads it.
        #   c. For each token tt of the tile (only t0 + tt < T need writing), for each of the lane's COLS columns:
        #        delta rule: partial = sum over the lane's R rows of k[row] * S[r, c], then the full k . S[:, j] by a
        #          butterfly over the NS lanes of the group:
        #              for s in range(LOG_NS): x += cuda.shfl_xor_sync(FULL_MASK, x, 1 << s)
        #          every lane ends with the full sum, so u needs no broadcast:
        #          k . (exp(g) S) = exp(g) (k . S), so u = beta v_j - (beta exp(g)) (k . S), and the decay costs one
        #          multiply per element inside the update: S[r, c] = exp(g) * S[r, c] + k[row] * u.
        #        without beta: u = v_j (and S[r, c] = S[r, c] + k[row] * u without g).
        #        then the same butterfly for q . S[:, j] (S after the update), and write o[b, t0 + tt, h, j] from ONE
        #          lane of the group -- lane slice sl == c writes column col0 + c (COLS <= NS) -- only for j < V.
        #      The shuffles must be executed by all 32 lanes of the warp (FULL_MASK): never put one inside
        #      `if j < V` or after an early `return` -- lanes past V compute on zeros instead. A missing lane is a
        #      deadlock on a GPU (the grader reports it as TIMEOUT) or garbage.
        #   d. cuda.syncthreads() -- protects: every warp is done reading the tile before step a of the next tile
        #      overwrites it. Without it a fast warp overwrites the tile under a slow one: a race, wrong only
        #      sometimes. Both barriers must be reached by every thread of the block: no `return` before them.
        # Finally, if HAS_HT: write S back to ht (rows i < K, columns j < V).
        #
        # Speed (what the package's rung does beyond the above; each keeps the results the same):
        #   * Staging in batches: load SB = min(ITER_KQ, STAGE_BATCH) elements of k and q into local arrays
        #     (cuda.local.array(SB, float32)), with clamped indices (min(t, T - 1), min(i, K - 1)) so every load is
        #     in bounds, then store the batch to shared memory, masked. The loads of a batch are independent and
        #     issue back to back: one memory latency per batch instead of one per element. NB_KQ batches per tile;
        #     v likewise (ITER_V loads, then ITER_V stores). With FAST_KQ a thread's row is the fixed i = tid % KP
        #     and its tokens tt = tid // KP + m (NT // KP).
        #   * 16-byte shared loads: read chunk m of k as ks[tt, m * NS + sl, e] for e in range(4) -- the compiler
        #     merges the 4 loads into one (ld.shared.v4), and the NS lanes of a group read consecutive 16-byte
        #     chunks (no bank conflicts).
        #   * Shorter chains: sum a lane's R products in 4 independent partial sums (r % 4), added at the end.
        #   * The output reduction pipelined by one token: keep token tt's partial q . S sums and reduce them in
        #     iteration tt + 1, their shuffles interleaved with token tt + 1's k . S shuffles (two independent
        #     butterflies in flight instead of two in a row); write o[t0 + tt - 1] there, and drain the last token
        #     of the tile after the loop (before barrier d). To keep the written column out of local memory,
        #     select it with 0/1 weights, mine = sum_c w[c] * acc[c] with w[c] = 1 if sl == c else 0, not acc[sl].
        #
        # Memory-traffic budget per head, to aim for: the state read once (K V * 4 bytes) and written once per
        #   sequence; per token, q and k (2 K floats) read once per block (each of the ceil(V / VB) blocks of a
        #   head stages them again: the repeats hit L2), v read once, g and beta once -- (2 K + V + 2) * 4 bytes
        #   per token, nothing else from global memory. Shared memory per token: a lane loads its R values of k
        #   and of q (RC 16-byte loads each) and COLS of v; each k value feeds 2 COLS FMAs (k . S and the update),
        #   each q value COLS. Registers: at K = 128 and the defaults S is R * COLS = 32 floats; the package's rung
        #   needs 126-200 registers a thread and no local memory (`linattn-numba compile-check recurrent` checks it).
        pass

    return recurrent_kernel


SW = 8  # warps that split K in the decode-step kernel
CS = 4  # value columns per lane in the decode-step kernel (lane, lane + 32, ...)
SMB = 2  # decode-step blocks per SM the register allocation must allow (launch bounds)
STEP_VEC = False  # part 3: set True once step_kernel_vec is written; forward then uses it where it may


@functools.lru_cache(maxsize=None)
def _step_kernel(RS: int, HAS_G: bool, HAS_BETA: bool, HAS_H0: bool, HAS_HT: bool, SW: int = SW, CS: int = CS,
                 SMB: int = SMB):
    """T = 1: the decode step (part 2, optional). At one token the work is a copy of the state plus arithmetic, so
    the thread map is chosen for streaming the state: lane -> value columns ``lane + 32 c``, warp -> a slab of
    ``RS`` rows."""
    KP = SW * RS  # K padded to the rows the block covers (size of the shared k / q staging)
    VBS = 32 * CS  # value columns per block
    # at least SMB blocks per SM: caps the registers (the simulator's jit takes no launch bounds)
    opts = {} if sim.active() else {"launch_bounds": (SW * 32, SMB)}

    @cuda.jit(**opts)
    def step_kernel(q, k, v, g, beta, h0, ht, o, scale):
        # TODO(r1, part 2): one token (T = 1); forward launches grid (ceil(V / VBS), B * H), SW * 32 threads a block.
        #
        # Thread map: w = cuda.threadIdx.x // 32 (warp: rows w * RS .. w * RS + RS - 1); lane = cuda.threadIdx.x % 32;
        #   j0 = cuda.blockIdx.x * VBS + lane, the thread's columns j0 + 32 c for c < CS. A warp reads 32 consecutive
        #   floats of a state row per load: 128 contiguous bytes.
        # Steps:
        #   1. Load the RS x CS state values of h0 (or zeros) into S = cuda.local.array((RS, CS), float32) first,
        #      all of them back to back (nothing waits on them yet). Clamp indices (min(i, K - 1), min(j, V - 1)) so
        #      every load is in bounds and mask the stores instead -- no thread returns early, because of the
        #      barriers below.
        #   2. Stage k and q once per block into shared arrays of KP floats (zeros for rows >= K) -- every thread
        #      of a warp needs the same values, and RS uniform global loads per thread cost instructions and
        #      registers -- then cuda.syncthreads() (protects: the staged k / q are complete).
        #   3. Delta rule: each thread's partial k . S[:, j] over its RS rows goes to shared memory
        #      red_k = cuda.shared.array((SW, VBS), float32) at red_k[w, lane + 32 c]; then cuda.syncthreads()
        #      (protects: all SW partial sums are written before any thread adds them up); each thread sums its
        #      columns' SW partials: u = beta (v_j - exp(g) kS). Without beta: u = v_j.
        #   4. Update its rows (exp(g) * S + k * u), partial q . S[:, j] into red_q[w, lane + 32 c]; write its
        #      rows of ht (i < K, j < V) now, so the stores overlap the barrier; cuda.syncthreads() (protects: all
        #      SW partial sums of q . S are in place).
        #   5. Thread jj of the block (jj = threadIdx.x, threadIdx.x + SW * 32, ... < VBS) sums column jj's SW
        #      partials and writes o[b, 0, h, blockIdx.x * VBS + jj] = scale * sum (if that column is < V).
        #   h0 and ht may be the same array: every thread reads exactly the elements it later writes.
        # Memory-traffic budget: the state read once and written once (2 K V * 4 bytes per head), q, k once per
        #   block: the roofline is a copy of the state. Registers: the launch bounds cap them at 64K / (SMB SW 32)
        #   a thread (128 at the defaults, for RS CS = 64 state values): keep the rest small so nothing spills.
        pass

    return step_kernel


@functools.lru_cache(maxsize=None)
def _step_kernel_vec(RS: int, HAS_G: bool, HAS_BETA: bool, HAS_H0: bool, HAS_HT: bool, SW: int = SW,
                     SMB: int = SMB):
    """The decode step with 128-bit state loads and stores (part 3, optional; needs part 2's kernel first).
    forward uses it when ``STEP_VEC`` and the state rows are float32 and 16-byte aligned
    (:func:`_state_rows_aligned`, given)."""
    KP = SW * RS
    VBS = 128  # value columns per block: 32 lanes x 4
    opts = {} if sim.active() else {"launch_bounds": (SW * 32, SMB)}

    @cuda.jit(**opts)
    def step_kernel_vec(q, k, v, g, beta, h0, ht, o, scale):
        # TODO(r1, part 3): part 2's kernel with lane -> the 4 consecutive columns j0 = blockIdx.x * 128 + 4 lane ..
        #   j0 + 3, read and written with ld4(h0, (b, h, row, col)) / st4(ht, (b, h, row, j0), (x0, x1, x2, x3))
        #   (linattn_numba.vec: one 128-bit access instead of four 32-bit ones). V % 4 == 0 here: lanes past V load
        #   the last 4 columns (min(j0, V - 4)) and store nothing. Put the partial sums of column 4 lane + c at
        #   red[w, c * 32 + lane] so that consecutive lanes write consecutive banks, and let thread jj of the final
        #   sum map slot jj back to column 4 (jj % 32) + jj // 32.
        # What it saves: a quarter of the state load and store instructions, and one address per row instead of
        #   one per element, so more registers hold bytes in flight (the step is a copy of the state).
        pass

    return step_kernel_vec


def _rows_aligned(*arrays) -> bool:
    """Whether these 4-D arrays (``None`` entries are skipped) can be read and written 16 bytes at a time:
    float32, the last axis a multiple of 4 long and contiguous, every row starting on a 16-byte boundary (the
    vector step's state buffers; part 4's q, k, v). Given."""
    for a in arrays:
        if a is None:
            continue
        if a.dtype != np.float32 or a.shape[3] % 4 or a.strides[3] != 4 or any(x % 16 for x in a.strides[:3]):
            return False
        if not sim.active() and a.__cuda_array_interface__["data"][0] % 16:
            return False
    return True


def _smem_bytes(RC: int, COLS: int, NW: int, NS: int, TC: int, NBUF: int) -> int:
    """Shared memory of the package rung's layout (the ``SMF`` floats of :func:`_kernel`): NBUF tiles of k, q
    (TC x KP) and v (TC x VB), and NBUF (TC + 1) rows of 4 per-token scalars. Given."""
    KP = 4 * RC * NS
    VB = NW * (32 // NS) * COLS
    return 4 * NBUF * (TC * (2 * KP + VB) + 4 * (TC + 1))


def launch_config(K: int, V: int, cols: int = DEFAULT_COLS, nw: int = DEFAULT_NW, ns: int = NS):
    """``(RC, COLS, NW)`` for a shape: 4-row chunks per lane, columns per lane, warps per block (fewer for
    narrow V). Given."""
    RC = cdiv(K, 4 * ns)
    nw = max(1, min(nw, cdiv(V, (32 // ns) * cols)))
    return RC, cols, nw


def staging(q, k, v, cols=None, nw=None, ns=None, tc=None, asy=None, recurrence="gated_delta"):
    """``(ASYNC, TC)`` the sequence kernel uses for these inputs and knobs (``None``: the module default, the same
    for every ``recurrence`` here; the package's rung picks it per recurrence): part 4's
    asynchronous staging where q, k, v allow 16-byte copies, the block tile is a multiple of 4 columns and two
    tiles fit the static shared memory; otherwise through registers. Given."""
    cols = DEFAULT_COLS if cols is None else cols
    nw = DEFAULT_NW if nw is None else nw
    ns = NS if ns is None else ns
    K, V = q.shape[3], v.shape[3]
    RC, cols, nw = launch_config(K, V, cols, nw, ns)
    vb = nw * (32 // ns) * cols
    asy = (STAGE_ASYNC if asy is None else asy) and vb % 4 == 0 and _rows_aligned(q, k, v)
    if asy and _smem_bytes(RC, cols, nw, ns, TC_ASYNC if tc is None else tc, 2) <= SMEM_MAX:
        return True, TC_ASYNC if tc is None else tc
    return False, TC if tc is None else tc


def forward(q, k, v, g, beta, o, h0, ht, scale, chunk_size=None, stream=0, cols=None, nw=None, tc=None, ns=None,
            sw=None, cs=None, smb=None, vec=None, asy=None):
    """Launch r1 (see the rung contract in :mod:`linattn_numba.rungs`). ``h0`` and ``ht`` may alias. Given."""
    cols = DEFAULT_COLS if cols is None else cols
    nw = DEFAULT_NW if nw is None else nw
    tc_given = tc
    tc = TC if tc is None else tc
    ns = NS if ns is None else ns
    sw = SW if sw is None else sw
    cs = CS if cs is None else cs
    smb = SMB if smb is None else smb
    if cols > ns:
        raise ValueError(f"cols (value columns per lane) must be <= ns (lanes per column), got {cols} > {ns}")
    if not 1 <= tc <= 32:  # the per-token scalars are staged by one warp, one token per lane
        raise ValueError(f"tc (tokens per staged tile) must be in [1, 32], got {tc}")
    B, T, H, K = q.shape
    V = v.shape[3]
    if K > MAX_K:
        raise ValueError(f"rung 'recurrent' supports K <= {MAX_K}, got K={K}")
    if T == 1 and STEP_KERNEL:
        vec = STEP_VEC if vec is None else vec
        flags = (g is not None, beta is not None, h0 is not None, ht is not None)
        if vec and V >= 4 and _rows_aligned(h0, ht):
            kern = _step_kernel_vec(cdiv(K, sw), *flags, sw, smb)
            grid = (cdiv(V, 128), B * H)
        else:
            cs = max(1, min(cs, cdiv(V, 32)))
            kern = _step_kernel(cdiv(K, sw), *flags, sw, cs, smb)
            grid = (cdiv(V, 32 * cs), B * H)
        kern[grid, sw * 32, stream](
            q, k, v, or_dummy(g, 3), or_dummy(beta, 3), or_dummy(h0, 4), or_dummy(ht, 4), o, float32(scale)
        )
        return
    asy, tc = staging(q, k, v, cols, nw, ns, tc_given, asy)
    RC, cols, nw = launch_config(K, V, cols, nw, ns)
    kern = _kernel(RC, cols, nw, g is not None, beta is not None, h0 is not None, ht is not None, tc, ns, asy)
    vb = nw * (32 // ns) * cols
    grid = (cdiv(V, vb), B * H)
    args = (q, k, v, or_dummy(g, 3), or_dummy(beta, 3), or_dummy(h0, 4), or_dummy(ht, 4), o, float32(scale))
    if asy:  # part 4: the package's layout keeps its double buffer in dynamic shared memory
        launch_dynamic(kern, grid, nw * 32, _smem_bytes(RC, cols, nw, ns, tc, 2), stream, args)
    else:
        kern[grid, nw * 32, stream](*args)


def compile_targets():
    """Every variant r1 can launch with its default knobs, as ``(label, py_func, argtypes)``: K = 128 (both input
    dtypes), K = 20 and K = 96 (float32; 96-row tiles do not divide the block, so the generic staging walk), each
    with every recurrence, with and without state buffers; the asynchronous staging once ``STAGE_ASYNC``, the
    decode-step kernel once ``STEP_KERNEL``. Given."""
    f32 = types.float32
    for K, dtypes in ((128, INPUT_DTYPES), (20, (np.float32,)), (96, (np.float32,))):
        for dt in dtypes:
            for has_g, has_beta in FLAG_COMBOS:
                for has_state in (False, True):
                    RC, cols, nw = launch_config(K, 128)
                    argtypes = (
                        array_type(dt, 4), array_type(dt, 4), array_type(dt, 4),
                        array_type(dt, 3), array_type(dt, 3), array_type(np.float32, 4),
                        array_type(np.float32, 4), array_type(np.float32, 4, "C"), f32,
                    )
                    label = f"recurrent K={K} g={has_g} beta={has_beta} state={has_state} {dt.__name__}"
                    fn = _kernel(RC, cols, nw, has_g, has_beta, has_state, has_state).py_func
                    yield label, fn, argtypes
                    if dt is np.float32 and STAGE_ASYNC:
                        fn = _kernel(RC, cols, nw, has_g, has_beta, has_state, has_state, TC_ASYNC, NS, True)
                        yield "async " + label, fn.py_func, argtypes
                    if dt is np.float32 and STEP_KERNEL:
                        step = _step_kernel(cdiv(K, SW), has_g, has_beta, has_state, has_state, SW, CS, SMB).py_func
                        yield "step " + label, step, argtypes
                    if dt is np.float32 and STEP_KERNEL and STEP_VEC:
                        step = _step_kernel_vec(cdiv(K, SW), has_g, has_beta, has_state, has_state, SW, SMB).py_func
                        yield "step vec " + label, step, argtypes
