"""Rung r1 ``recurrent``: the state lives in registers, K is split across a few lanes of a warp.

What changed from r0 ``naive`` and why
    r0 reads and writes its state column from global memory for every token, three to four times over, and runs
    only ``B * H * V`` threads. r1 reads the state once at the start and writes it once at the end; in between it
    lives in registers, spread so that no thread holds too much of it:

    * ``NS = 8`` lanes share a value column. Lane slice ``s`` holds ``RC`` chunks of 4 consecutive rows, chunks
      ``s, s + NS, s + 2 NS, ...`` (rows ``4 (m NS + s) + e``, e < 4): ``R = 4 RC`` rows, 16 at K = 128. Its k and q
      values for a token are then ``RC`` 16-byte shared loads each (``ld.shared.v4``; the NS lanes of a column
      read consecutive 16-byte chunks, so no bank conflicts), instead of ``R`` scalar loads.
    * each lane holds ``COLS = 2`` value columns, so every k and q value it loads feeds ``2 COLS`` FMAs, and its
      ``COLS`` reductions over the NS lanes (three-step ``shfl_xor_sync`` butterflies: every lane ends with the
      sum, so ``u`` needs no broadcast) run side by side.
    * the output's reduction is pipelined by one token: token t's ``q . S`` partial sums are reduced in iteration
      t + 1, their shuffles interleaved with token t + 1's ``k . S`` shuffles. The two butterflies are the longest
      latency chain of a token; in a row they stall the warp twice, interleaved once. The pipeline runs across
      tile borders and drains once, after the last token.
    * the block stages ``TC`` tokens of ``q``, ``k`` (zero-padded to ``KP = NS R`` rows, so the hot loop has no
      bounds checks), ``v``, and 4 scalars per token into one flat shared array ("Staging" below).
    * the decay is deferred ("Deferred decay" below): where a tile's decay allows it, the registers hold
      ``S~ = S / D`` and the update is one FMA per element for every recurrence.

Deferred decay
    The direct update with a decay, ``S <- γ S + k u``, costs a multiply and an FMA per state element (``k u``,
    then ``γ S + ...``). Within a tile, let ``D_t = exp(G_t)``, ``G_t`` the sum of the tile's log-decays up to
    token t (a warp scan of the 32 ``g``). With ``S = D_t S~`` the update becomes ``S~ <- S~ + k (u / D_t)``: one
    FMA per element; ``k . S = D_t (k . S~)`` enters ``u = beta v - (beta D_t) (k . S~)`` and the output is
    ``scale D_t (q . S~)`` -- two multiplies per column, not per element. At the next tile's start the registers
    are multiplied by the tile's final D once (one multiply per element per tile). ``1 / D_t`` must stay finite:
    a tile keeps the deferred form only while its whole decay leaves ``D >= DEFER_MIN = 2^-20`` (``1 / D <=
    2^20``, so ``S~`` is at most 2^20 times ``S``: no overflow, and the relative rounding is that of ``S``);
    otherwise (a strong decay, or one that underflows to 0) that tile multiplies each token's decay into the
    registers, the direct update. The choice is per tile and uniform over the block (one head), so each path
    is a loop of its own (``make_tile_loop``), with no per-token branch. A first version renormalised per token
    and ran the product on one lane per tile: 4.25 ms decay, 4.52 ms gated delta, slower than without it
    (``figures/data/probes/h200_r1_5052257.json``); the per-tile scan replaced it.

Staging
    Two ways to fill a tile (``STAGE_ASYNC``, per recurrence; the sweep in ``figures/data/h200_r1_ecba0d6.json``
    picks cp.async for all four):

    * through registers: every thread issues its global loads in batches of ``STAGE_BATCH`` into registers,
      then stores them, behind one barrier, and a second barrier before the next tile overwrites it. A tile costs
      a few memory latencies during which no warp computes. (Warp 0 loads the per-token scalars a tile ahead,
      so their latency is not one more of them.)
    * ``cp.async`` into a double buffer (``ASYNC``; float32 inputs with 16-byte aligned rows, K and the block's
      columns multiples of 4): right after the barrier that opens tile i, every thread starts its 16-byte
      copies of tile i + 1 into the other buffer (zero-filled past T, K, V; at the defaults a fixed column per
      thread, so the unrolled copies differ in their row only), and warp 0 stages tile i + 1's scalars from
      registers loaded a tile earlier; ``cp.async.wait_all`` and the next barrier close it. One barrier per
      tile, no staging latency in the critical path. Two tiles of 32 tokens take 82 KB of dynamic shared memory
      (opted in above 48 KB; ``_common.launch_dynamic``).

    A lesson in how the compiler sees warps: warp 0 computes the per-token scalars inside ``if tid < 32``, and
    their log-decay scan shuffles. In the register staging a barrier follows before the token loop; in the
    cp.async staging nothing did, and ptxas, unable to prove the warps converged again, wrapped every shuffle
    butterfly of the token loop in a divergence check (``BRA.DIV`` and a ``WARPSYNC`` fallback path in the SASS)
    and scheduled the butterflies as a block instead of interleaving them with the FFMAs. The cp.async kernels
    with a decay were then the slow ones (Nsight Compute: the same instruction count as the register staging,
    but 1.25 short-scoreboard stall cycles per issued instruction against 0.37,
    ``probes/h200_ncu_r1_inst_e27ec8b.txt``, ``probes/h200_ncu_r1_d1cc1ff.csv``; decay 3.51 ms against 3.02 ms
    in ``probes/h200_r1_e27ec8b.json``). A ``cuda.syncwarp()`` after the branch gives ptxas the convergence
    point, and the checks leave the loop (``python tools/sass.py recurrent "async recurrent K=128 g=True
    beta=True" --threads 0`` counts them). That holds for the CUDA 13.0 assembler (and for the toolchain of
    the H200 runs, as their times show); the 13.5 one (nvJitLink 13.5) still guards two of the loop's
    butterflies. Letting every warp compute the scalars (no shuffle in a branch at all; only warp 0 stores)
    satisfies both, but measured slower on the H200 for the delta family, in an A/B of the two versions in one
    session (``probes/h200_r1_ab_scalars.txt``: gated delta 3.00 against 2.72 ms, delta 2.66 against 2.57,
    decay 2.30 against 2.44; the token loop is the same length either way, and the cause is not found), so
    warp 0 keeps the job. Measured at B4 T8192 H16 K=V=128 (``tune`` records of ``h200_r1_ecba0d6.json``,
    defaults): cp.async against registers, plain 1.89 / 2.70 ms, decay 2.44 / 2.89, delta 2.57 / 3.43, gated
    delta 2.72 / 3.49.

Thread map
    grid ``(ceil(V / VB), B * H)`` with ``VB = NW * (32 / NS) * COLS`` columns per block; block ``NW`` warps.
    Lane ``l`` of warp ``w``: slice ``s = l % NS`` and column group ``grp = w (32 / NS) + l // NS``; it owns
    columns ``[col0, col0 + COLS)``, ``col0 = x VB + grp COLS``, rows ``4 (m NS + s) + e``, and writes output
    column ``col0 + s`` when ``s < COLS``. At the defaults and K = V = 128: VB = 64, so 2 blocks of 256 threads
    per head, 128 blocks at the standard shape -- one per SM, 8 warps each.

Cost per token (per head)
    FLOPs: ``2 K V`` (update) + ``2 K V`` (output) + ``2 K V`` (delta rule's ``k.S``) + ``K V`` (decay multiply,
    counted though deferred). FP32 instructions per state element and token: 2 (plain: update FFMA, q.S FFMA),
    2 (decay, deferred), 3 (delta rule: k.S FFMA too), 3 (gated delta, deferred); an exact tile adds one multiply
    for the decay. Bytes from device memory: the inputs, ``(2 K + V + 2) * 4`` per token (each block stages
    ``q``, ``k`` again, ``ceil(V / VB)`` times per head; the repeats hit L2), plus the state once in and once out
    per sequence. At the standard shape the rung is bound by issue and latency on the sequential chain of tokens:
    two warps per scheduler, each waiting on its shuffle butterflies and shared loads (``tools/ncu_rungs.py``
    under ncu shows the issue rate and stall reasons), not by memory.

Registers (ptxas -v, sm_90, float32 inputs, K = 128, defaults): 126-200 for the sequence kernel, by recurrence,
staging and state buffers (``linattn-numba compile-check --assemble recurrent`` prints each) -- the 32 state
values, k and q for one token, a staging batch and its addresses (the one block of 256 threads per SM fits at up
to 255). 128 for the decode step (its launch bounds ask for 2 blocks per SM). No variant uses local memory
(``python -m linattn_numba.compile_check recurrent`` checks).

Launch knobs (``forward(..., ns=, cols=, nw=, tc=, sw=, cs=, smb=, vec=, asy=)``; the bench's ``--tune`` sweeps
them, ``bench.TUNE_CONFIGS`` / ``bench.STEP_CONFIGS``, and its JSON "tune" records are the measurements behind the
defaults; tuned on the H200 at B4 T8192 H16 K=V=128, the sequence kernel on all four recurrences
(``figures/data/h200_r1_ecba0d6.json``), the decode step at B256 H16)

    ====  =======  ==========================================================================================
    knob  default  why
    ====  =======  ==========================================================================================
    NS    8        lanes per column. Fewer lanes: shorter butterflies but more rows (registers, FMA chain)
                   per lane; 16 or 32 lanes cost a fourth or fifth shuffle step per reduction.
    COLS  2        columns per lane (<= NS). Two columns share each k/q load and interleave two independent
                   reductions; four per lane leave too few warps (32 state values per lane at NS = 8 and
                   COLS = 2 give 1024 warps at the standard shape, 8 per SM).
    NW    8        warps per block. Each block stages the head's k and q again, so fewer, wider blocks stage
                   less per token; 8 warps give 128 blocks, one per SM on 132 SMs.
    TC    32       tokens per staged tile (<= 32: per-token scalars come from one warp), both stagings
                   (``TC``, ``TC_ASYNC``). Amortises the barriers, the staging latency and the tile's scalars
                   over more tokens: 16 (cp.async) was slower in total over the four recurrences, though
                   faster for decay alone (the sweep's records).
    ASY   per rec  ``STAGE_ASYNC``: the cp.async double buffer, for all four recurrences ("Staging"); used
                   only where the inputs allow 16-byte copies (registers otherwise).
    SW    8        decode step: warps splitting K (rows per thread RS = K / SW).
    CS    4        decode step: columns per lane (lane, lane + 32, ...): one block covers a whole head at V = 128,
                   and a thread has RS CS = 64 state loads in flight.
    SMB   2        decode step: blocks per SM the register allocation must allow (launch bounds): caps the
                   registers at 128 so that one block loads while the other computes and stores.
    VEC   True     decode step (``STEP_VEC``): 128-bit state loads and stores (4 columns per lane, CS unused)
                   when the state rows are float32 and 16-byte aligned; otherwise the scalar kernel.
    ====  =======  ==========================================================================================

The decode ``step``
    With T = 1 (the decode step) ``forward`` launches ``_step_kernel`` instead: the state is read once from global
    memory and written once (``h0`` and ``ht`` may be the same array: every thread reads exactly the elements it
    later writes), with a thread map made for streaming (lane -> columns lane + 32 c, warps split K, the two dot
    products reduced through shared memory; with aligned float32 state rows ``_step_kernel_vec``, the same map
    with 16-byte loads: lane -> columns 4 lane .. 4 lane + 3, a quarter of the load and store instructions and
    one address per row). The step is a copy of the state plus arithmetic, and its roofline
    the copy bandwidth; what it reaches is limited by how many bytes each SM has in flight between the phases
    (load, barrier, reduce, barrier, store) of its one or two resident blocks. Measured (H200, B256 H16 K=V=128,
    gated delta, ``figures/data/h200_step_416ea91.json``, copy bandwidth re-measured in the same run): the
    128-bit kernel 0.140 ms, 90% of the copy bandwidth; the scalar kernel 0.193 ms (65%); fla's
    ``fused_recurrent_gated_delta_rule`` step 0.1865 ms (67%). (The first run of this kernel,
    ``probes/h200_step_7e7dfc7.json``, measured the same.) Its "tune" records are the launch sweep behind
    SW = 8, SMB = 2 (3 blocks per SM, or 16 warps per block, were slower).

What the next rung changes
    r2 ``chunked`` stops walking token by token: a chunk of tokens becomes matrix products, parallel inside the
    chunk, and only the chunk-to-chunk state pass stays sequential.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32, types

from .. import sim
from .._common import FLAG_COMBOS, INPUT_DTYPES, array_type, cdiv, launch_dynamic, or_dummy, rows_aligned
from .._common import SMEM_MAX  # the H100 / H200 limit per block (dynamic, opted in)
from ..vec import cp_async16, cp_async_wait_all, ld4, st4

NAME = "recurrent"
MAX_K = 128  # 16 state rows per lane and column at NS = 8; more would crowd the 255-register budget
MAX_V = None  # value columns are tiled across blocks
CHUNK_SIZES = None  # token by token: chunk_size is not used

# Launch defaults: see "Launch knobs" in the module docstring (the bench's --tune may override them at run time).
NS = 8  # lanes that split one value column's K rows (a reduction costs log2(NS) = 3 shuffles)
GROUPS = 32 // NS  # column groups per warp
TC = 32  # tokens staged per pair of barriers: amortises each barrier over TC tokens of work
FULL_MASK = 0xFFFFFFFF
DEFAULT_COLS = 2  # value columns per lane
DEFAULT_NW = 8  # warps per block
# 16-byte aligned shared tiles let the compiler merge a lane's 4 consecutive k (or q, or v) values into one
# 128-bit shared load; the simulator rejects the argument (and needs no alignment)
ALIGN = None if sim.active() else 16
STAGE_BATCH = 8  # global loads a thread has in flight while staging a tile
# Asynchronous staging (cp.async into a double buffer) where q, k, v allow 16-byte copies: the next tile lands
# while this one is computed on, so the block no longer stops for the staging's memory latency once a tile.
# Per recurrence, from the H200 sweep ("Staging" in the module docstring): it pays without a decay only.
STAGE_ASYNC = {"plain": True, "decay": True, "delta": True, "gated_delta": True}
RECURRENCE_OF = {(False, False): "plain", (True, False): "decay", (False, True): "delta", (True, True): "gated_delta"}
TC_ASYNC = 32  # tokens per tile with the double buffer: 2 x 40 KB of dynamic shared memory at K = V = 128
# Deferred decay: the registers hold S~ with S = D S~, D = the product of the tile's decays so far; a tile keeps
# it only while D >= DEFER_MIN, so 1 / D <= 2**20 and S~ is at most 2**20 times larger than S
DEFER_MIN = np.float32(2.0**-20)
LN_DEFER_MIN = np.float32(math.log(DEFER_MIN))


@functools.lru_cache(maxsize=None)
def _kernel(RC: int, COLS: int, NW: int, HAS_G: bool, HAS_BETA: bool, HAS_H0: bool, HAS_HT: bool,
            TC: int = TC, NS: int = NS, ASYNC: bool = False):
    LOG_NS = NS.bit_length() - 1
    GROUPS = 32 // NS
    R = 4 * RC  # state rows per lane: RC chunks of 4 consecutive rows
    KP = R * NS  # K padded to a multiple of 4 NS: rows >= K are zeros in k/q and in the state
    KP4 = KP // 4
    VB = NW * GROUPS * COLS  # value columns per block
    NT = NW * 32
    NBUF = 2 if ASYNC else 1  # ASYNC: a double buffer, the next tile lands while this one is computed on
    TCB = NBUF * TC  # token rows of the shared tiles
    TG = TC + 1  # rows of per-token scalars per buffer: TC tokens and the tile's header
    # One flat shared array (static, or dynamic under ASYNC: two tiles of 32 tokens need 80 KB at K = 128), in
    # 16-byte aligned parts: k and q tiles [TCB, KP] (a lane's 4 consecutive rows are one ld.shared.v4, and the
    # NS lanes of a column read consecutive 16-byte chunks: no bank conflicts), v [TCB, VB], the per-token
    # scalars [NBUF TG, 4]
    KOFF = 0
    QOFF = TCB * KP
    VOFF = 2 * TCB * KP
    GOFF = VOFF + TCB * VB
    SMF = GOFF + NBUF * TG * 4
    # Staging trips per thread (compile-time constants). When NT is a multiple of the tile's row length, a
    # thread stages one fixed k/q row index (or v column) at every (NT / KP)-th token: its index arithmetic is
    # loop invariant. Otherwise the generic flat walk e = tid + m NT over the tile.
    FAST_KQ = NT % KP == 0 and (TC * KP) % NT == 0
    FAST_V = NT % VB == 0 and (TC * VB) % NT == 0
    ITER_KQ = (TC * KP + NT - 1) // NT
    SB = min(ITER_KQ, STAGE_BATCH)
    NB_KQ = (ITER_KQ + SB - 1) // SB
    ITER_V = (TC * VB + NT - 1) // NT
    # ASYNC: 16-byte copies per tile, k and q (TC KP4 each), then v (TC VB / 4), dealt round-robin to the threads
    NCK = TC * KP4
    NCV = TC * (VB // 4)
    ITER_A = (2 * NCK + NCV + NT - 1) // NT
    # every thread copies the same k/q column and the same v column at every copy (NT a multiple of a tile row's
    # 16-byte chunks, the tile a multiple of NT chunks): 4 + 4 + 2 copies at K = V = 128 and the defaults
    FAST_A = NT % KP4 == 0 and NCK % NT == 0 and NT % (VB // 4) == 0 and NCV % NT == 0

    @cuda.jit(device=True, inline="always")
    def tile_scalars(sm, buf, lane, T, gl, bl, dcarry, scale):
        """Warp 0: the per-token scalars of one tile into buffer ``buf`` of the scalar part of ``sm`` (rows
        ``buf TG + j``, and the tile's header row ``buf TG + TC``); lane j brings token j's log-decay ``gl`` and
        beta ``bl`` (0 and 1 past the sequence). ``dcarry``: the previous tile's deferred decay D, to fold in at
        this tile's start. Returns this tile's D at its end (1 when the tile is exact)."""
        base = GOFF + 4 * buf * TG
        # G_j = sum of the tile's log-decays up to token j: an inclusive scan over the warp's lanes
        G = gl if lane < TC else float32(0.0)
        fast = False
        g_end = float32(0.0)
        if HAS_G:
            for s in range(5):
                y = cuda.shfl_up_sync(FULL_MASK, G, 1 << s)
                if lane >= (1 << s):
                    G += y
            g_end = cuda.shfl_sync(FULL_MASK, G, TC - 1)
            # deferred within the tile when its whole decay keeps D = exp(G_j) >= DEFER_MIN (1 / D <= 2**20);
            # otherwise (a strong decay) the tile decays the registers token by token
            fast = g_end >= LN_DEFER_MIN
        if lane < TC:
            if fast:
                d = float32(math.exp(G))
                sm[base + 4 * lane + 0] = bl
                sm[base + 4 * lane + 1] = bl * d  # beta D: u = beta v - beta D (k . S~)
                sm[base + 4 * lane + 2] = float32(math.exp(-G))  # 1 / D
                sm[base + 4 * lane + 3] = scale * d  # o = scale D (q . S~)
            else:
                dec = float32(math.exp(gl)) if HAS_G else float32(1.0)
                sm[base + 4 * lane + 0] = bl
                sm[base + 4 * lane + 1] = bl * dec  # k . (dec S) = dec (k . S): the decay is folded into u
                sm[base + 4 * lane + 2] = dec
                sm[base + 4 * lane + 3] = scale
        d_end = float32(math.exp(g_end)) if fast else float32(1.0)
        if lane == 0:
            sm[base + 4 * TC + 0] = float32(1.0) if fast else float32(0.0)
            sm[base + 4 * TC + 1] = dcarry  # fold the previous tile's D into the registers first
            sm[base + 4 * TC + 2] = d_end
        return d_end

    @cuda.jit(device=True, inline="always")
    def load_scalars(g, beta, b, h, t, T):
        """Token t's log-decay and beta (0 and 1 where absent or past the sequence)."""
        gl = float32(0.0)
        bl = float32(1.0)
        if t < T:
            if HAS_G:
                gl = float32(g[b, t, h])
            if HAS_BETA:
                bl = float32(beta[b, t, h])
        return gl, bl

    @cuda.jit(device=True, inline="always")
    def issue_copies(sm, buf, kbh, qbh, vbh, x, t0, T, tid):
        """ASYNC: start the 16-byte copies of the tile at ``t0`` into buffer ``buf`` from this head's ``[T, K]``
        and ``[T, V]`` views, zero-filled past the sequence, past K and past V; nothing waits for them here."""
        K = kbh.shape[1]
        V = vbh.shape[1]
        if FAST_A:
            # a fixed 16-byte column per thread, every (NT / KP4)-th token row: the unrolled copies differ only
            # in their row, so their index arithmetic is a few adds (the generic walk below divides per copy)
            i4 = 4 * (tid % KP4)
            ic = min(i4, K - 4)
            for m in range(NCK // NT):
                tt = tid // KP4 + m * (NT // KP4)
                n = 16 if t0 + tt < T and i4 < K else 0
                tc = min(t0 + tt, T - 1)
                cp_async16(sm, KOFF + (buf * TC + tt) * KP + i4, kbh, (tc, ic), n)
                cp_async16(sm, QOFF + (buf * TC + tt) * KP + i4, qbh, (tc, ic), n)
            jj = 4 * (tid % (VB // 4))
            j = x * VB + jj
            jc = min(j, V - 4)
            for m in range(NCV // NT):
                tt = tid // (VB // 4) + m * (NT // (VB // 4))
                n = 16 if t0 + tt < T and j < V else 0
                cp_async16(sm, VOFF + (buf * TC + tt) * VB + jj, vbh, (min(t0 + tt, T - 1), jc), n)
        else:
            for m in range(ITER_A):
                e = tid + m * NT
                if e < 2 * NCK:
                    ek = e % NCK
                    tt = ek // KP4
                    i4 = ek % KP4
                    n = 16 if t0 + tt < T and 4 * i4 < K else 0
                    src = (min(t0 + tt, T - 1), min(4 * i4, K - 4))
                    if e < NCK:
                        cp_async16(sm, KOFF + (buf * TC + tt) * KP + 4 * i4, kbh, src, n)
                    else:
                        cp_async16(sm, QOFF + (buf * TC + tt) * KP + 4 * i4, qbh, src, n)
                elif e < 2 * NCK + NCV:
                    ev = e - 2 * NCK
                    tt = ev // (VB // 4)
                    jj = 4 * (ev % (VB // 4))
                    j = x * VB + jj
                    n = 16 if t0 + tt < T and j < V else 0
                    cp_async16(sm, VOFF + (buf * TC + tt) * VB + jj, vbh, (min(t0 + tt, T - 1), min(j, V - 4)), n)

    def make_tile_loop(DEFERRED: bool):
        """The token loop over one staged tile, DEFERRED (the decay kept in D, one FFMA per state element) or
        exact (each token's decay multiplied into the registers)."""

        @cuda.jit(device=True, inline="always")
        def tile_loop(S, kr, qr, u, kS, accp, ps, wsel, sm, tb, gbase, ntok, sl, grp, obh, jo, V, t0):
            # Software pipelined by one token: token t's output dot product is summed over the NS lanes in the
            # iteration of token t + 1 (the next tile's first for a tile's last token), its shuffles interleaved
            # with token t + 1's k . S shuffles -- two independent butterflies in flight instead of two in a row.
            for tt in range(ntok):
                bet, bdec, dec, oscale = ld4(sm, GOFF + 4 * (gbase + tt))
                # bdec: beta D (deferred) or beta dec (exact); dec: 1 / D or dec; oscale: scale D or scale
                for m in range(RC):  # a lane's 4 consecutive rows of k and of q: one 16-byte load each
                    x = ld4(sm, KOFF + ((tb + tt) * KP4 + m * NS + sl) * 4)
                    y = ld4(sm, QOFF + ((tb + tt) * KP4 + m * NS + sl) * 4)
                    for e in range(4):
                        kr[4 * m + e] = x[e]
                        qr[4 * m + e] = y[e]
                for c in range(COLS):
                    kS[c] = float32(0.0)
                    if HAS_BETA:
                        # k . S over this lane's rows in 4 independent partial sums (a 4x shorter chain)
                        for pi in range(4):
                            ps[pi] = float32(0.0)
                        for r in range(R):
                            ps[r % 4] += kr[r] * S[r, c]
                        kS[c] = (ps[0] + ps[1]) + (ps[2] + ps[3])
                for s in range(LOG_NS):  # butterflies over the column's NS lanes: every lane gets the sums
                    for c in range(COLS):
                        if HAS_BETA:
                            kS[c] += cuda.shfl_xor_sync(FULL_MASK, kS[c], 1 << s)
                        accp[c] += cuda.shfl_xor_sync(FULL_MASK, accp[c], 1 << s)
                mine = float32(0.0)  # the previous token's output column of this lane
                for c in range(COLS):
                    mine += wsel[c] * accp[c]
                for c in range(COLS):
                    vj = sm[VOFF + (tb + tt) * VB + grp * COLS + c]
                    if HAS_BETA:
                        u[c] = bet * vj - bdec * kS[c]
                    else:
                        u[c] = vj
                    if DEFERRED:
                        u[c] *= dec  # S = D S~ + k u  <=>  S~ <- S~ + k (u / D)
                for c in range(COLS):
                    for pi in range(4):
                        ps[pi] = float32(0.0)
                    for r in range(R):
                        if HAS_G and not DEFERRED:
                            s_new = S[r, c] * dec + kr[r] * u[c]
                        else:
                            s_new = S[r, c] + kr[r] * u[c]  # one FFMA per element
                        S[r, c] = s_new
                        ps[r % 4] += qr[r] * s_new
                    # this lane's part of scale q . S (= scale D q . S~); summed over the lanes next iteration
                    accp[c] = oscale * ((ps[0] + ps[1]) + (ps[2] + ps[3]))
                if t0 + tt > 0 and sl < COLS and jo < V:
                    obh[t0 + tt - 1] = mine

        return tile_loop

    tile_deferred = make_tile_loop(True)
    tile_exact = make_tile_loop(False)

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
        grp = (tid // 32) * GROUPS + lane // NS  # this lane's column group within the block tile
        col0 = cuda.blockIdx.x * VB + grp * COLS  # its first value column

        # the tiles (ASYNC: two buffers, token rows [0, TC) and [TC, 2 TC)); per token beta, beta D, 1 / D,
        # scale D (deferred) or beta, beta dec, dec, scale (exact); per tile a header: deferred or not, the previous
        # tile's D to fold in, this tile's D at its end ("Deferred decay")
        if ASYNC:
            sm = cuda.shared.array(0, float32)  # SMF floats, opted in above 48 KB at launch
        else:
            sm = cuda.shared.array(SMF, float32, alignment=ALIGN)

        S = cuda.local.array((R, COLS), float32)  # S[4 m + e, c] = state[4 (m NS + sl) + e, col0 + c]
        kr = cuda.local.array(R, float32)
        qr = cuda.local.array(R, float32)
        u = cuda.local.array(COLS, float32)
        kS = cuda.local.array(COLS, float32)
        accp = cuda.local.array(COLS, float32)  # the previous token's output, before the sum over lanes
        ps = cuda.local.array(4, float32)
        kb = cuda.local.array(SB, float32)  # one staging batch
        qb = cuda.local.array(SB, float32)
        vb = cuda.local.array(ITER_V, float32)
        # 0/1 weights: lane slice c keeps column c of a reduced output. (Written as a select, the compiler turns
        # the selection into accp[sl], an indexed local array, i.e. local memory.)
        wsel = cuda.local.array(COLS, float32)
        for c in range(COLS):
            wsel[c] = float32(1.0) if sl == c else float32(0.0)
        kbh = k[b, :, h, :]  # this head's [T, K] and [T, V] (views: 2-D indexing below)
        qbh = q[b, :, h, :]
        vbh = v[b, :, h, :]
        jo = col0 + sl  # the output column this lane writes (lane slice c writes column c; COLS <= NS)
        obh = o[b, :, h, min(jo, V - 1)]
        ik = tid % KP  # fixed staging row / column (FAST_KQ / FAST_V)
        iv = tid % VB

        for r in range(R):
            i = 4 * ((r // 4) * NS + sl) + r % 4
            for c in range(COLS):
                j = col0 + c
                S[r, c] = float32(0.0)
                if HAS_H0:
                    if i < K and j < V:
                        S[r, c] = h0[b, h, i, j]

        for c in range(COLS):
            accp[c] = float32(0.0)  # no output pending before the first token
        dcarry = float32(1.0)  # warp 0: the deferred decay D at the end of the last tile it staged
        # warp 0, lane j: token j of a tile staged ahead -- the next tile's (registers) or the one after the next
        # (ASYNC) -- loaded a tile early, so no staging waits on the latency of these global loads
        gl = float32(0.0)
        bl = float32(1.0)
        if tid < 32:
            gl, bl = load_scalars(g, beta, b, h, lane, T)
        if ASYNC:
            # prologue: tile 0's copies in flight, its scalars staged, tile 1's scalars on their way
            issue_copies(sm, 0, kbh, qbh, vbh, cuda.blockIdx.x, 0, T, tid)
            if tid < 32:
                dcarry = tile_scalars(sm, 0, lane, T, gl, bl, dcarry, scale)
                gl, bl = load_scalars(g, beta, b, h, TC + lane, T)

        buf = 0  # the buffer this tile is in (ASYNC: alternates)
        for t0 in range(0, T, TC):
            if ASYNC:
                cp_async_wait_all()  # this thread's copies of the tile have landed
                # The tile (everyone's copies, warp 0's scalars) is complete, and every warp is done with the
                # previous tile, whose buffer the next copies overwrite.
                cuda.syncthreads()
                if t0 + TC < T:
                    issue_copies(sm, 1 - buf, kbh, qbh, vbh, cuda.blockIdx.x, t0 + TC, T, tid)
                    if tid < 32:  # the next tile's scalars from registers; the one after that starts loading
                        dcarry = tile_scalars(sm, 1 - buf, lane, T, gl, bl, dcarry, scale)
                        gl, bl = load_scalars(g, beta, b, h, t0 + 2 * TC + lane, T)
                # Warp 0 reconverges here. Without this point ptxas cannot prove that the warps are converged
                # in the token loop below (tile_scalars shuffles inside a branch, and no barrier follows as in
                # the register staging), so it guards each shuffle butterfly of the loop with a divergence check
                # (BRA.DIV) and no longer interleaves the butterflies with the FFMAs ("Staging" above)
                cuda.syncwarp()
            else:
                if tid < 32:  # the tile's scalars, loaded a tile ago; the next tile's start loading
                    dcarry = tile_scalars(sm, 0, lane, T, gl, bl, dcarry, scale)
                    gl, bl = load_scalars(g, beta, b, h, t0 + TC + lane, T)
                # Stage TC tokens. Consecutive threads read consecutive addresses. The loads go in batches of
                # SB per thread into registers, then to shared memory: a batch's loads are independent and issue
                # back to back, so the block waits for one memory latency per batch, not one per element (a
                # plain load-then-store loop waits for every element in turn, and staging dominated the
                # kernel). Indices are clamped so every load is in bounds; the values are masked when stored.
                for ib in range(NB_KQ):
                    for m in range(SB):
                        if FAST_KQ:
                            tt = tid // KP + (ib * SB + m) * (NT // KP)
                            i = ik
                        else:
                            e = tid + (ib * SB + m) * NT
                            tt = e // KP
                            i = e % KP
                        tc = min(t0 + tt, T - 1)
                        ic = min(i, K - 1)
                        kb[m] = float32(kbh[tc, ic])
                        qb[m] = float32(qbh[tc, ic])
                    for m in range(SB):
                        if FAST_KQ:
                            tt = tid // KP + (ib * SB + m) * (NT // KP)
                            i = ik
                        else:
                            e = tid + (ib * SB + m) * NT
                            tt = e // KP
                            i = e % KP
                        if tt < TC:
                            keep = t0 + tt < T and i < K
                            sm[KOFF + tt * KP + i] = kb[m] if keep else float32(0.0)
                            sm[QOFF + tt * KP + i] = qb[m] if keep else float32(0.0)
                for m in range(ITER_V):
                    if FAST_V:
                        tt = tid // VB + m * (NT // VB)
                        jj = iv
                    else:
                        e = tid + m * NT
                        tt = e // VB
                        jj = e % VB
                    vb[m] = float32(vbh[min(t0 + tt, T - 1), min(cuda.blockIdx.x * VB + jj, V - 1)])
                for m in range(ITER_V):
                    if FAST_V:
                        tt = tid // VB + m * (NT // VB)
                        jj = iv
                    else:
                        e = tid + m * NT
                        tt = e // VB
                        jj = e % VB
                    if tt < TC:
                        keep = t0 + tt < T and cuda.blockIdx.x * VB + jj < V
                        sm[VOFF + tt * VB + jj] = vb[m] if keep else float32(0.0)
                cuda.syncthreads()  # the staged tile is complete before any warp reads it

            ntok = min(TC, T - t0)
            tb = buf * TC  # the tile's first row in the buffers
            hdr = GOFF + 4 * (buf * TG + TC)  # its header row of scalars
            if HAS_G:
                pf = sm[hdr + 1]
                if pf != float32(1.0):  # fold the previous tile's deferred decay in (uniform: one head)
                    for r in range(R):
                        for c in range(COLS):
                            S[r, c] *= pf
                if sm[hdr] > float32(0.5):
                    tile_deferred(S, kr, qr, u, kS, accp, ps, wsel, sm, tb, buf * TG, ntok, sl, grp,
                                  obh, jo, V, t0)
                else:
                    tile_exact(S, kr, qr, u, kS, accp, ps, wsel, sm, tb, buf * TG, ntok, sl, grp,
                               obh, jo, V, t0)
            else:
                tile_exact(S, kr, qr, u, kS, accp, ps, wsel, sm, tb, buf * TG, ntok, sl, grp,
                           obh, jo, V, t0)
            if ASYNC:
                buf = 1 - buf
            else:
                cuda.syncthreads()  # every warp is done with the tile before the next stage overwrites it

        # drain the pipeline: the sequence's last output
        for s in range(LOG_NS):
            for c in range(COLS):
                accp[c] += cuda.shfl_xor_sync(FULL_MASK, accp[c], 1 << s)
        mine = float32(0.0)
        for c in range(COLS):
            mine += wsel[c] * accp[c]
        if sl < COLS and jo < V:
            obh[T - 1] = mine

        if HAS_HT:
            d_last = float32(1.0)
            if HAS_G:  # the last tile's D at its end (its scalars are still staged: nothing wrote them since)
                d_last = sm[GOFF + 4 * ((((T - 1) // TC) % NBUF) * TG + TC) + 2]
            for r in range(R):
                i = 4 * ((r // 4) * NS + sl) + r % 4
                for c in range(COLS):
                    j = col0 + c
                    if i < K and j < V:
                        ht[b, h, i, j] = d_last * S[r, c]

    return recurrent_kernel


SW = 8  # warps that split K in the decode-step kernel
CS = 4  # value columns per lane in the decode-step kernel (lane, lane + 32, ...)
SMB = 2  # decode-step blocks per SM the register allocation must allow (launch bounds)
STEP_VEC = True  # decode step: 128-bit state loads / stores where the state rows are 16-byte aligned


@functools.lru_cache(maxsize=None)
def _step_kernel(RS: int, HAS_G: bool, HAS_BETA: bool, HAS_H0: bool, HAS_HT: bool, SW: int = SW, CS: int = CS,
                 SMB: int = SMB):
    """T = 1: the decode step. A different thread map from the sequence kernel, because at one token the work is
    a copy of the state: lane -> value columns ``lane + 32 c`` (a warp reads 128 contiguous bytes of a state row
    per load), warp -> a slab of ``RS`` rows, and the two dot products reduced across the ``SW`` warps through
    shared memory (two barriers per token are nothing when there is one token). Each thread issues its
    ``RS * CS`` state loads back to back before any arithmetic, so the kernel streams the state."""

    KP = SW * RS  # K padded to the rows the block covers
    VBS = 32 * CS  # value columns per block
    # at least SMB blocks per SM: caps the registers (the simulator's jit takes no launch bounds)
    opts = {} if sim.active() else {"launch_bounds": (SW * 32, SMB)}

    @cuda.jit(**opts)
    def step_kernel(q, k, v, g, beta, h0, ht, o, scale):
        B, T, H, K = q.shape
        V = v.shape[3]
        bh = cuda.blockIdx.y
        b = bh // H
        h = bh % H
        w = cuda.threadIdx.x // 32
        lane = cuda.threadIdx.x % 32
        j0 = cuda.blockIdx.x * VBS + lane
        red_k = cuda.shared.array((SW, VBS), float32)
        red_q = cuda.shared.array((SW, VBS), float32)
        ks = cuda.shared.array(KP, float32)
        qs = cuda.shared.array(KP, float32)
        S = cuda.local.array((RS, CS), float32)
        for r in range(RS):  # the state loads first: nothing below waits on them until the first dot product
            for c in range(CS):
                S[r, c] = float32(0.0)
                if HAS_H0:
                    # clamped so every load is in bounds; stores are masked
                    S[r, c] = h0[b, h, min(w * RS + r, K - 1), min(j0 + 32 * c, V - 1)]
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
        u = cuda.local.array(CS, float32)
        for c in range(CS):
            u[c] = float32(v[b, 0, h, min(j0 + 32 * c, V - 1)])
        if HAS_BETA:
            for c in range(CS):
                p = float32(0.0)
                for r in range(RS):
                    p += ks[w * RS + r] * S[r, c]
                red_k[w, lane + 32 * c] = p
            cuda.syncthreads()  # all SW partial sums of k . S[:, j] are in shared memory
            bt = float32(beta[b, 0, h])
            for c in range(CS):
                kS = float32(0.0)
                for ww in range(SW):
                    kS += red_k[ww, lane + 32 * c]
                u[c] = bt * (u[c] - decay * kS)
        for c in range(CS):
            p = float32(0.0)
            for r in range(RS):
                s_new = S[r, c] * decay + ks[w * RS + r] * u[c]
                S[r, c] = s_new
                p += qs[w * RS + r] * s_new
            red_q[w, lane + 32 * c] = p
        if HAS_HT:  # the new state goes out before the output reduction: its stores overlap the barrier below
            for r in range(RS):
                i = w * RS + r
                for c in range(CS):
                    j = j0 + 32 * c
                    if i < K and j < V:
                        ht[b, h, i, j] = S[r, c]
        cuda.syncthreads()  # all SW partial sums of q . S[:, j] are in shared memory
        # the output: thread jj of the block sums column jj's SW partial sums
        for jj in range(cuda.threadIdx.x, VBS, SW * 32):
            j = cuda.blockIdx.x * VBS + jj
            if j < V:
                acc = float32(0.0)
                for ww in range(SW):
                    acc += red_q[ww, jj]
                o[b, 0, h, j] = float32(scale) * acc

    return step_kernel


@functools.lru_cache(maxsize=None)
def _step_kernel_vec(RS: int, HAS_G: bool, HAS_BETA: bool, HAS_H0: bool, HAS_HT: bool, SW: int = SW,
                     SMB: int = SMB):
    """The decode step with 128-bit state loads and stores (``ld4`` / ``st4`` of :mod:`linattn_numba.vec`), for
    float32 state buffers whose rows are 16-byte aligned (:func:`_rows_aligned`; the others take
    :func:`_step_kernel`).

    Thread map: lane -> the 4 consecutive value columns ``4 lane .. 4 lane + 3`` of the block's 128-column tile
    (a warp's load is one 512-byte state row, 16 bytes per lane), warp -> ``RS`` rows. Against the scalar step
    kernel a thread issues a quarter of the load and store instructions and keeps one address per row instead
    of one per element, so more registers hold data in flight. The partial sums go to shared memory as
    ``red[w, c * 32 + lane]`` (column ``4 lane + c``): consecutive lanes, consecutive banks."""

    KP = SW * RS
    VBS = 128
    opts = {} if sim.active() else {"launch_bounds": (SW * 32, SMB)}

    @cuda.jit(**opts)
    def step_kernel_vec(q, k, v, g, beta, h0, ht, o, scale):
        B, T, H, K = q.shape
        V = v.shape[3]
        bh = cuda.blockIdx.y
        b = bh // H
        h = bh % H
        w = cuda.threadIdx.x // 32
        lane = cuda.threadIdx.x % 32
        j0 = cuda.blockIdx.x * VBS + 4 * lane
        jl = min(j0, V - 4)  # V % 4 == 0 here: lanes past V load the last 4 columns and store nothing
        red_k = cuda.shared.array((SW, VBS), float32)
        red_q = cuda.shared.array((SW, VBS), float32)
        ks = cuda.shared.array(KP, float32)
        qs = cuda.shared.array(KP, float32)
        S = cuda.local.array((RS, 4), float32)
        for r in range(RS):  # every state load first, as in the scalar kernel: RS 128-bit loads in flight
            if HAS_H0:
                x = ld4(h0, (b, h, min(w * RS + r, K - 1), jl))
                for c in range(4):
                    S[r, c] = x[c]
            else:
                for c in range(4):
                    S[r, c] = float32(0.0)
        tid = cuda.threadIdx.x
        for i in range(tid, KP, SW * 32):
            ks[i] = float32(k[b, 0, h, i]) if i < K else float32(0.0)
            qs[i] = float32(q[b, 0, h, i]) if i < K else float32(0.0)
        cuda.syncthreads()  # ks / qs are complete
        decay = float32(1.0)
        if HAS_G:
            decay = float32(math.exp(float32(g[b, 0, h])))
        u = cuda.local.array(4, float32)
        for c in range(4):
            u[c] = float32(v[b, 0, h, jl + c])
        if HAS_BETA:
            for c in range(4):
                p = float32(0.0)
                for r in range(RS):
                    p += ks[w * RS + r] * S[r, c]
                red_k[w, c * 32 + lane] = p
            cuda.syncthreads()  # all SW partial sums of k . S[:, j] are in shared memory
            bt = float32(beta[b, 0, h])
            for c in range(4):
                kS = float32(0.0)
                for ww in range(SW):
                    kS += red_k[ww, c * 32 + lane]
                u[c] = bt * (u[c] - decay * kS)
        for c in range(4):
            p = float32(0.0)
            for r in range(RS):
                s_new = S[r, c] * decay + ks[w * RS + r] * u[c]
                S[r, c] = s_new
                p += qs[w * RS + r] * s_new
            red_q[w, c * 32 + lane] = p
        if HAS_HT:  # the new state goes out before the output reduction: its stores overlap the barrier below
            if j0 < V:
                for r in range(RS):
                    i = w * RS + r
                    if i < K:
                        st4(ht, (b, h, i, j0), (S[r, 0], S[r, 1], S[r, 2], S[r, 3]))
        cuda.syncthreads()  # all SW partial sums of q . S[:, j] are in shared memory
        # thread jj sums slot jj = c * 32 + lane of the partials, which is column 4 lane + c of the tile
        for jj in range(cuda.threadIdx.x, VBS, SW * 32):
            j = cuda.blockIdx.x * VBS + 4 * (jj % 32) + jj // 32
            if j < V:
                acc = float32(0.0)
                for ww in range(SW):
                    acc += red_q[ww, jj]
                o[b, 0, h, j] = float32(scale) * acc

    return step_kernel_vec


_rows_aligned = rows_aligned  # (from _common: r3 and the rungs above it ask the same of their inputs)


def _smem_bytes(RC: int, COLS: int, NW: int, NS: int, TC: int, NBUF: int) -> int:
    """Shared memory of the sequence kernel (the ``SMF`` floats of :func:`_kernel`): NBUF tiles of k, q
    (TC x KP) and v (TC x VB), and NBUF (TC + 1) rows of 4 per-token scalars."""
    KP = 4 * RC * NS
    VB = NW * (32 // NS) * COLS
    return 4 * NBUF * (TC * (2 * KP + VB) + 4 * (TC + 1))


def launch_config(K: int, V: int, cols: int = DEFAULT_COLS, nw: int = DEFAULT_NW, ns: int = NS):
    # (compile_targets and the notebooks call this with the module defaults)
    """``(RC, COLS, NW)`` for a shape: 4-row chunks per lane, columns per lane, warps per block (fewer for
    narrow V)."""
    RC = cdiv(K, 4 * ns)
    nw = max(1, min(nw, cdiv(V, (32 // ns) * cols)))
    return RC, cols, nw


def staging(q, k, v, cols=None, nw=None, ns=None, tc=None, asy=None, recurrence="gated_delta"):
    """``(ASYNC, TC)`` the sequence kernel uses for these inputs and knobs (``None``: the module default;
    ``STAGE_ASYNC[recurrence]`` for the staging).
    Asynchronous staging needs 16-byte copies of q, k and v (:func:`_rows_aligned`), a block tile of a multiple
    of 4 columns, and two tiles within ``SMEM_MAX``; otherwise the tile goes through registers."""
    cols = DEFAULT_COLS if cols is None else cols
    nw = DEFAULT_NW if nw is None else nw
    ns = NS if ns is None else ns
    K, V = q.shape[3], v.shape[3]
    RC, cols, nw = launch_config(K, V, cols, nw, ns)
    vb = nw * (32 // ns) * cols
    asy = (STAGE_ASYNC[recurrence] if asy is None else asy) and vb % 4 == 0 and _rows_aligned(q, k, v)
    if asy and _smem_bytes(RC, cols, nw, ns, TC_ASYNC if tc is None else tc, 2) <= SMEM_MAX:
        return True, TC_ASYNC if tc is None else tc
    return False, TC if tc is None else tc


def forward(q, k, v, g, beta, o, h0, ht, scale, chunk_size=None, stream=0, cols=None, nw=None, tc=None, ns=None,
            sw=None, cs=None, smb=None, vec=None, asy=None):
    """Launch r1 (see the rung contract in :mod:`linattn_numba.rungs`). ``h0`` and ``ht`` may alias."""
    # launch knobs default to the module's tuned values, read at call time (the bench's --tune may set them)
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
    if T == 1:
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
    asy, tc = staging(q, k, v, cols, nw, ns, tc_given, asy, RECURRENCE_OF[g is not None, beta is not None])
    RC, cols, nw = launch_config(K, V, cols, nw, ns)
    vb = nw * (32 // ns) * cols
    kern = _kernel(RC, cols, nw, g is not None, beta is not None, h0 is not None, ht is not None, tc, ns, asy)
    grid = (cdiv(V, vb), B * H)
    args = (q, k, v, or_dummy(g, 3), or_dummy(beta, 3), or_dummy(h0, 4), or_dummy(ht, 4), o, float32(scale))
    if asy:  # dynamic shared memory, opted in above 48 KB
        launch_dynamic(kern, grid, nw * 32, _smem_bytes(RC, cols, nw, ns, tc, 2), stream, args)
    else:
        kern[grid, nw * 32, stream](*args)


def compile_targets():
    """Every variant r1 can launch with its default knobs, as ``(label, py_func, argtypes)``: K = 128 (both input
    dtypes; the staging walk with a fixed row per thread), K = 20 (float32; R = 4 rows per lane) and K = 96
    (float32; 96-row tiles do not divide the block, so the generic staging walk), each with every recurrence,
    with and without state buffers, for the sequence kernel (float32: also its asynchronous staging) and the
    decode-step kernel."""
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
                    if dt is np.float32:  # the asynchronous staging (16-byte copies need float32 rows)
                        fn = _kernel(RC, cols, nw, has_g, has_beta, has_state, has_state, TC_ASYNC, NS, True)
                        yield "async " + label, fn.py_func, argtypes
                    if dt is np.float32:
                        step = _step_kernel(cdiv(K, SW), has_g, has_beta, has_state, has_state, SW, CS, SMB).py_func
                        yield "step " + label, step, argtypes
                        step = _step_kernel_vec(cdiv(K, SW), has_g, has_beta, has_state, has_state, SW, SMB).py_func
                        yield "step vec " + label, step, argtypes
