"""Rung r5, ``warp_roles``: r3's two kernels with the sequential one warp-specialised. Producer warps copy
the next chunk into one half of a double buffer in shared memory while consumer warps compute the current one,
and barriers hand the halves back and forth (a named barrier of the whole block, or mbarrier objects).

What changed from r3, and why
-----------------------------
Only the state kernel (the pass over chunks that carries S in registers and writes the output) changed. The
intra kernel, its scratch (bcum, W, U, Q', U''), the 4x4 register-blocked product ``_mm_nn``, the 128-bit
``ld4``/``st4`` and r3's register staging loops are r3's: they are imported, not copied, and ``launches`` takes
the intra launch from ``r3.launches`` itself. In r3's state kernel every warp alternates between two jobs. It
stages a chunk's rows from global into shared memory (W, Q', K and U for the gated delta rule: 104 KB per block
per chunk), waits at ``syncthreads``, multiplies, and stages again. While its loads are in flight the block's
FMA units idle, and the second resident block covers only part of that time. Here each warp has one job:

* **consumer warps** (warps 0-7 at K = 128, BV = 32) hold S and run r3's two products on a stage that is
  already full: P1 ``X = [W; Q'] S`` (V_new = U - W S in place of U, and o = scale (Q' S + U'')), then
  P2 ``S <- gamma_C S + K^T diag(gamma_C / gamma) V_new``. The U'' loads for the output are issued before
  P1's product, so they arrive while it runs;
* **producer warps** (warps 8-11) fill the other stage with chunk c + 1: the row blocks W, Q', K (or Q, K)
  by ``cp.async`` (16 bytes each, global -> shared without registers, so a thread keeps all of its ~50
  copies in flight at once), the value tile and the gates through registers (r3's staging loops). Then
  ``cp.async.wait_all`` and the hand-off.

Roles over time with the FULL / EMPTY pairs (``handoff="pair"``; F_s, E_s: the FULL / EMPTY mbarriers of stage s;
C: consumers only; ░ = waiting)::

    producers │copy c0→s0│F0│copy c1→s1│F1│░E0░░░░│copy c2→s0│F0│░E1░░░│copy c3→s1│F1│ ...
    consumers │░F0░░░░░░░░░░│P1 c0│C│P2 c0│E0│P1 c1│C│P2 c1│E1│P1 c2│C│P2 c2│E0│ ...
                               (s0)          (s1)          (s0): F1 met at once when the copy of c1
                                                           took less time than P1 + P2 of c0

The pair's barriers are **mbarrier objects**: four int64 words of shared memory (``bars``; thread 0 runs
``mbarrier.init`` on each before a ``syncthreads`` that every thread reaches). An mbarrier counts arrivals
(``mbarrier.arrive``, a release) and completes a *phase* when the count it was initialised with is reached; it then
starts the next phase. ``mbarrier.try_wait.parity`` (an acquire, in a loop) waits until the most recent phase of
the given parity has completed. FULL(s) (``MB_FULL + s``) expects the NPT producers: they arrive once stage s holds
chunk c, which completes its phase c // 2, and the consumers wait for parity (c // 2) % 2. EMPTY(s)
(``MB_EMPTY + s``) expects the NCT consumers: they arrive when they are done with stage s (only when chunk c + 2
exists), and the producers wait for its phase c // 2 - 1 before refilling it with chunk c. Phases cannot be lapped
(a role two phases ahead would pass a parity wait it should not), because FULL and EMPTY alternate: neither role can
arrive twice on one barrier before the other has waited there. The consumers' S stores are ordered before P1 by
their own barrier (``bar.sync 5``; the rendezvous orders them by its block barrier). Named barriers: 5, consumers
only, after the S stores (the pair) and between P1 and P2 (V_new complete, S no longer read); 6, producers only,
for the additive recurrences with gates (f_t written before the V tile is scaled by it); 1, the rendezvous below.
The simulator runs them through :func:`linattn_numba.sim.bar_sync` / :func:`~linattn_numba.sim.bar_arrive` and
:func:`~linattn_numba.sim.mb_init` / :func:`~linattn_numba.sim.mb_arrive` / :func:`~linattn_numba.sim.mb_wait`.

The pair used named barriers until 2026-12-04 (``barrier.arrive`` / ``barrier.sync`` on ids 1 + s and 3 + s, the
same protocol). compute-sanitizer's racecheck flagged that hand-off in 4 of 5 runs; the mbarriers are what made it
clean ("Sanitizers" below).

Hand-offs. With two stages the pair says no more than one meeting per chunk. The producers may refill a stage
with chunk c + 1 once the consumers are done with chunk c - 1 (EMPTY); the consumers may start chunk c once it is
staged (FULL); whichever role is first waits, either way. ``handoff="rendezvous"`` (the default, :data:`HANDOFF`)
is that meeting: after staging chunk c the producers, and before computing it the consumers, wait at one barrier
of the whole block (id 1, NCT + NPT threads; M below), then the producers stage chunk c + 1 while the consumers
compute chunk c::

    producers │copy c0→s0│M│copy c1→s1│░░░░│M│copy c2→s0│░░░░│M│ ...
    consumers │░░░░░░░░░░│M│P1 c0│C│P2 c0│S│M│P1 c1│C│P2 c1│S│M│ ...     (S: the state tile stored for P1)

The producers still run one chunk ahead; what the pair adds is room for a deeper ring (a producer two chunks
ahead needs three stages, which do not fit next to S in 227 KB). Measured on the H200 the rendezvous is 0.6-1.3 %
faster (B4 T8192 H16 K=V=128, per kernel, oracle-checked, ``figures/data/probes/h200_r5_handoff_1b4993b.json``:
pair / rendezvous 2.607 / 2.574 ms plain, 2.674 / 2.643 decay, 4.078 / 4.054 delta, 4.184 / 4.137 gated delta; the
named-barrier pair was 0.3-1.3 % slower, below); the pair stays, as ``handoff="pair"``, for the general protocol
and for comparison.

Aligned barriers. PTX's ``bar.sync`` and ``bar.arrive`` are ``barrier.sync.aligned`` and
``barrier.arrive.aligned``: every thread that takes part executes the same barrier instruction. The roles reach the
rendezvous barrier from their own code, so r5 uses the unaligned form there (:func:`barrier_sync`); barriers 5 and
6, each reached by one role from one place, keep the aligned ``bar.sync``. The sanitizers tell the two apart
("Sanitizers" below).

Thread map, grid ``(ceil(V / BV), B H)`` as r3, block ``NCT + NPT`` threads (384 at K = 128, BV = 32):

==========  ==========================  ================================================================
role        threads                     one thread ...
==========  ==========================  ================================================================
consumer    tid < NCT = 32 ceil(        S[4 rg : 4 rg + 4, 4 cg : 4 cg + 4] in registers (rg = tid // (BV/4),
            (K/4)(BV/4) / 32)           cg = tid % (BV/4)); in P1 one 4x4 tile of X (rows rr + R i); the
                                        last warp's spare lanes (tiny K, BV) only join the barriers
producer    NPT = 32 max(1, NCT / 64)   float4 number (j NPT + ptid) of each row block (consecutive threads,
                                        consecutive 16 bytes), then elements of the value tile and gates
==========  ==========================  ================================================================

Shared memory, per stage: NR row blocks [C, KP] (NR = 3: W | Q' | K; 2: W | K or Q | K; 1: K), a value tile
[C, BV], f_t and gamma_t [C], gamma_C; two stages, plus S [KP, BV]. At C = 64, K = 128, BV = 32 with the
delta rule and output: 2 (3 * 8192 + 2048 + 132) + 4096 floats = 230,432 bytes of the 232,448 a block may
opt in to, so one block per SM (r3: two at BV = 32; at its tuned BV = 64, one block of 512 threads). The
rows are not padded (r3 pads them to KP + 4): in P1 the 8 threads of a quarter-warp read one row of A (a
broadcast) and 8 consecutive float4 of S; in P2 one row of K and 8 float4 of V_new: no bank conflicts either
way. The padding's bytes are what make two stages fit.

Bytes and FLOPs per token-head, state kernel, K = V = 128, BV = 32 (4 value-tile blocks per head), float32:

==========================  =============================================  ==================================
variant                     staged into shared (every block of the head)   FLOPs
==========================  =============================================  ==================================
delta rule, output          W, Q', K rows: 3 x 4 x 512 B = 6 KB; U 512 B;   P1 2 x 2KV + P2 2KV = 98 k
                            U'' read, o written 512 B each
additive, output            Q, K rows: 4 KB; V 512 B; U'', o 512 B each    P1 2KV + P2 2KV = 66 k
state only (delta / add.)   W, K rows 4 KB / K rows 2 KB; U or V 512 B     66 k / 33 k
==========================  =============================================  ==================================

The 4 blocks of a head read the same rows (from L2 after the first), as in r3. Per block and chunk the
producers move 104 KB (delta rule with output) or 72 KB (additive with output).

Registers (ptxas through nvJitLink 13.5 for sm_90; launch bounds 384 threads, 1 block per SM, so at most 168):
132-168 with float32 inputs and output (the rendezvous with h0 and ht at the top, 164-168; the pair hand-off on
mbarriers 134-142, on named barriers it was 128-138), 110-122 state only, 96-162 with float16 inputs. No local
memory, no spills. ptxas reserves all 16 hardware barriers (the barrier ids are registers), harmless at one block
per SM.

Measured on the H200 (``linattn-numba bench --rungs shared,warp_roles --no-peers`` at B4 T8192 H16 K=V=128,
fp32, both verified against the oracle first: ``figures/data/h200_r3_r5.json``, with r3 then at a value tile
of BV = 32, two 256-thread blocks per SM): for the delta rule and the gated delta rule the whole forward is
about a fifth faster than r3's, because the state kernel is about a third faster (the intra kernel is the
same). r3's tile table then moved to BV = 64 (one 512-thread block per SM, fewer blocks staging the same
rows: ``figures/data/probes/h200_r3_tune.json``), which closes about half of that gap; r5 at BV = 64 does not
fit (two stages would need more than 227 KB). For plain and decay, r5 is on par with r3. The
reasons below were not profiled (no ncu run fit the device budget). The additive state kernel stages less
(72 KB a chunk, and r3 already hides its latency with batched loads and an L2 prefetch of the next chunk).
Its P1 has only C rows, so half of the consumer threads idle during it (128 tiles of 4x4 for 256
threads, the same shape as r3). And one block of 8 consumer warps per SM has half of r3's 16 warps to
hide shared-memory latency in the product loops. So the copy is hidden, but the consumers become the
critical path. What would help there: larger P1 tiles or two consumer groups (the "third group" for P2),
to be checked with ``ncu`` (WarpStateStats: barrier vs. short-scoreboard stalls of the consumer warps).

Re-measured against r3 at its tuned BV = 64, in one device session, per kernel and oracle-checked
(``tools/tune_r3.py``, ``h200.sh r5_handoff``: ``figures/data/probes/h200_r5_handoff_60be82d.json``), with the
rendezvous hand-off:

===========  ===========  ===========  ==========  =================  ==================  =========
recurrence   r3 forward   r5 forward   r3 / r5     r3 state kernel    r5 state kernel     r3 / r5
===========  ===========  ===========  ==========  =================  ==================  =========
plain        2.693 ms     2.693 ms     1.00x       2.014 ms           2.013 ms            1.00x
decay        2.887        2.773        1.04x       2.140              2.025               1.06x
delta        5.416        4.941        1.10x       3.014              2.550               1.18x
gated delta  5.718        5.048        1.13x       3.212              2.552               1.26x
===========  ===========  ===========  ==========  =================  ==================  =========

So the warp-specialised state kernel is 1.18-1.26x r3's for the delta family, and the whole forward 1.10-1.13x:
the intra kernel, r3's in both rungs (2.40 / 2.50 ms), is about half of the time and unchanged. The pair
hand-off, in the same run and again at 153e34f (``probes/h200_r5_handoff_153e34f.json``, with the unaligned
barriers of the committed kernel), took 0.3-1.3 % longer than the rendezvous: 2.741 / 2.804 / 4.959 / 5.088 ms
against 2.707 / 2.774 / 4.942 / 5.049 ms (plain / decay / delta / gated delta).

Since then r3's own state kernel caught up (its docstring, "What limits each kernel"): it stages K's rows with the
chunk instead of a second time after P1, which r5's producers already did, and splits its additive P1 so that every
thread has a tile. Both rungs also share r3's faster intra kernel. Bench at 33dedac
(``figures/data/probes/h200_r3_33dedac.json``, one run): r3 / r5 2.544 / 2.674 ms (plain), 2.752 / 2.751 (decay),
4.439 / 4.357 (delta), 4.671 / 4.439 (gated delta). So r5 is now 1.00-1.05x r3, and 5 % slower for plain. Warp
specialisation still overlaps the staging (a quarter of r3's state-kernel time for the gated delta rule,
``figures/data/probes/h200_ncu_phases_a1325d3.json``), but its 8 consumer warps issue the products more slowly
than r3's 16 warps, and that eats most of what the overlap saves.

Then r3's staging stopped being expensive: it was integer instructions more than memory latency (r3's docstring,
"What limits each kernel": fixed-map stagers, the update four rows a step). What r5 hides behind its producers
r3 now mostly does not spend. Bench (``figures/data/probes/h200_r3_585c771.json``,
``figures/data/probes/h200_r5_9ed137f.json``, one session): r3 / r5 2.012 / 2.600 ms (plain), 2.150 / 2.669
(decay), 3.803 / 4.298 (delta), 3.979 / 4.379 (gated delta): r5 is now 1.10-1.29x slower than r3. Its consumers
still run r3's old update loop (one row per step):
with r3's four-row loop and a fixed trip count, racecheck reported hazards in the pair hand-off
(``figures/data/probes/h200_sanitize_par_585c771.txt``), not understood yet, so that change was taken back
(``figures/data/h200_sanitize_par_9ed137f.txt``: clean). After r3's products took 8 steps of the inner dimension
per loop step (67a8c79; r5 keeps its one-row update, and shares r3's intra kernel, which changed with them):
r3 / r5 1.869 / 2.573 ms (plain), 2.032 / 2.661 (decay), 3.635 / 4.260 (delta), 3.806 / 4.335 (gated delta)
(``figures/data/probes/h200_r3_67a8c79.json``), r5 1.14-1.38x slower. With r3's WY inverse on ``ld1`` and Q'
loading Q before its product (a757612; r3's intra kernel, which r5 shares): r3 / r5 1.869 / 2.576 ms (plain), 2.015 /
2.658 (decay), 3.457 / 4.082 (delta), 3.622 / 4.156 (gated delta) (``figures/data/h200_r3_a757612.json``), r5
1.15-1.38x slower. Since b9584ee r3 runs plain and decay by its split schedule (its docstring): 1.767 / 1.931 ms
(``figures/data/h200_r3_split_b9584ee.json``), which r5 does not have; r5 is measured against r3's fused schedule,
the one it specialises (the numbers above).

Numerics: the same operations in the same order as r3's (fused) state kernel (in the simulator r5's outputs equal
r3's bit for bit); only the schedule changed.

Sanitizers (H200, ``tools/sanitize.py`` at B2 T300 H2 K64 V80, C = 64, both hand-offs, each (recurrence, tool)
in a process of its own). Now, with the pair on mbarriers (``figures/data/h200_sanitize_par_1b4993b.txt``):
memcheck, racecheck and synccheck report nothing for the four recurrences with either hand-off, and racecheck on
the pair (plain), five processes, 0 hazards in each (``figures/data/probes/h200_racecheck_matrix_1b4993b.txt``),
where the named-barrier pair was flagged in 4 of 5. How it got there, oldest first. At 153e34f
(``figures/data/h200_sanitize_par_153e34f.txt``) the three tools reported nothing (but see the recheck below:
racecheck flagged the named-barrier pair in some runs). Before the unaligned barriers they did not:

* racecheck reported hazards in the state kernel when the pair used the aligned ``bar.sync`` / ``bar.arrive``:
  thousands in ``h200_sanitize_r4_r5_7e7dfc7.txt``, 1 to 3 per recurrence at 63527bc
  (``probes/h200_sanitize_par_63527bc.txt``), between a stage read by the consumers and its refill, and between
  P1's reads of S and the next chunk's S stores;
* synccheck reported "Divergent thread(s) in block" for a rendezvous at ``syncthreads`` in each role's branch
  (``h200_sanitize_par_9717011.txt``) and at an aligned named barrier (``probes/h200_sanitize_par_60be82d.txt``).

``tools/racecheck_probe.py`` isolates each ingredient in a kernel of 64 consumer and 32 producer threads with a
known answer (``figures/data/h200_racecheck_probe_63527bc.txt``; the simulator's happens-before check,
:class:`linattn_numba.sim.racecheck`, finds every correct variant ordered and both racy ones racy):

==============================================================  ===========================  ==========
kernel                                                          racecheck                    synccheck
==============================================================  ===========================  ==========
pair, aligned ``bar.sync`` / ``bar.arrive``                     1 hazard (433 at 9717011)    clean
pair, unaligned ``barrier.sync`` / ``barrier.arrive``           clean                        clean
pair waiting on EMPTY after the refill (a real race)            4 hazards                    clean
rendezvous, unaligned ``barrier.sync 1, 96``                    clean                        clean
rendezvous, aligned ``bar.sync 1, 96``                          clean                        32 errors
rendezvous, ``syncthreads`` in each branch                      clean                        32 errors
consumers only, aligned ``bar.sync 5, 64`` from one place       clean                        clean
the same without the barrier after the reads (a real race)      8 hazards                    clean
==============================================================  ===========================  ==========

So what the tools flagged was not a missing order in the protocol but an instruction the PTX ISA does not allow
there: an aligned barrier reached by the two roles from different code. With the unaligned forms the kernel
is clean under all three, and racecheck still catches the two real races.

Rechecked at 8bd5ce4 (``figures/data/h200_sanitize_par_8bd5ce4.txt``, both hand-offs in one process per
recurrence and tool): clean except racecheck on plain, 2 hazards. Run again one hand-off per process, five times
each (``probes/h200_racecheck_r5_pair_1fbcf12.txt``): the rendezvous (the default) clean 5 of 5; the pair flagged
in 4 of 5, always the same accesses: the consumers' P2 reads of a stage's K and V rows (``LDS.128`` at +0x60c0,
+0x6130) against the producers' refill of that stage two chunks later (their cp.async copies of K, +0xb290 ..
+0xb530, and V's ``STS.128``, +0xe0d0 .. +0xe320). The program orders those by the EMPTY barrier: the consumers'
``barrier.arrive`` (+0x62d0) comes after the reads, whose values the P2 products have already used, and the
producers' ``barrier.sync`` (+0x8410) before the copies. The outputs were right in every run, and the simulator's
happens-before check (``tests/test_sim_racecheck.py``, the pair on every recurrence, arrive as a release) finds
nothing. A report that comes and goes with the timing, on an arrive / sync pair the protocol relies on, reads more
like racecheck not ordering reads before an arrive than like a race; it is not settled. The pair hand-off is not
the default, and it is kept for comparison only.

That reading was then put to the test (6cb262c, since reverted): a block-scope fence (``membar.cta``) before the
consumers' EMPTY arrive, which makes the reads performed before the arrive beyond any doubt (the PTX ISA already
says so of the arrive: "prior memory accesses requested by this thread are performed relative to all threads
participating in the barrier", and an arrive synchronizes with a sync on the same barrier). racecheck, five
processes each (``figures/data/probes/h200_racecheck_r5_pair_fence_6cb262c.txt``): flagged 4 of 5 without the fence
and 4 of 5 with it, outputs right every time. So the reports are not about the reads' order before the arrive;
what racecheck does not see in this arrive / sync pair is still not known, and no race in the protocol has been
found (the argument: a consumer arrives on EMPTY_s only after reading chunk c, the producers refill stage s only
after their sync on EMPTY_s, and neither barrier can be met twice before the other side has passed it, because
FULL_s lies between).

Settled at 84fb32f .. 1b4993b (``tools/racecheck_probe.py``, ``tools/h200.sh racecheck_matrix``,
``figures/data/probes/h200_racecheck_matrix_*.txt``). The probe's named-barrier pair (``pair_na``, clean at one
block and 8 chunks) was run with r5's ingredients added one at a time (cp.async refill, 128-bit reads, the in-place
rewrite, either role late) and at more blocks and chunks. No ingredient is needed: ``pair_na`` alone is flagged once
there is more than one block or many chunks (4 x 8: 3 of 3 runs; 132 x 32: 3 of 3, thousands of hazards at one
site), in both directions, whichever role comes first, with every answer right (its racy twin ``pair_bug`` is
wrong in every run). The protocol is correct by the PTX memory model (an arrive synchronizes with a sync on the same
barrier); racecheck does not order a named-barrier arrive / sync hand-off at scale. The same ring on mbarriers
(``pair_mb``) gave 0 hazards in every run (16 x 32, 132 x 32, 132 x 256, every ingredient), and so does r5's pair
on mbarriers. mbarriers are also the form Hopper's own pipelines use (they count transactions for TMA copies
too), so the pair now teaches that.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import config, cuda, float32, int64, types

from .._common import FLAG_COMBOS, INPUT_DTYPES, SMEM_MAX, array_type, cdiv, or_dummy
from ..reference import RECURRENCES
from . import r3_shared as r3
from ..vec import cp_async16, cp_async_wait_all, ld4, st4
from .r3_shared import _mm_nn, _stage_input, _stage_input4, _stage_scratch

NAME = "warp_roles"
MAX_K = r3.MAX_K  # the intra kernel is r3's
MAX_V = None  # V is tiled by both kernels

CHUNK_SIZES = r3.CHUNK_SIZES
DEFAULT_CHUNK = r3.DEFAULT_CHUNK
BV_DEFAULT = 32  # value-tile width of the state kernel: at C = 64 two stages of it fill the 227 KB of shared memory

# named barriers (0 is __syncthreads): CONS "the consumer warps among themselves", PROD "the producer warps among
# themselves", MEET the rendezvous hand-off (every thread of the block, once per chunk)
BAR_MEET = 1
BAR_CONS = 5
BAR_PROD = 6
# the pair hand-off's mbarrier objects (indices into the kernel's int64 shared array of 4): FULL + s "stage s is
# staged" (NPT arrivals a phase: every producer), EMPTY + s "stage s is free again" (NCT: every consumer)
MB_FULL = 0
MB_EMPTY = 2
MB_COUNT = 4  # FULL and EMPTY of two stages
MB_BYTES = 8 * MB_COUNT  # the kernel's static int64 array; declared by both hand-offs' kernels (in their PTX)
# how the two roles hand the stages over: "pair" (FULL / EMPTY mbarriers, producers arrive / consumers wait and
# the reverse) or "rendezvous" (one named barrier of the whole block per chunk); the same dependencies with two
# stages (docstring, "Hand-offs"); the rendezvous measured faster
HANDOFFS = ("pair", "rendezvous")
HANDOFF = "rendezvous"


# ----------------------------------------------------------------------------------------------------------
# intrinsics: named barriers, mbarriers and asynchronous copies (inline PTX)
# ----------------------------------------------------------------------------------------------------------
if config.ENABLE_CUDASIM:
    from ..sim import bar_arrive, bar_sync, mb_arrive, mb_init, mb_wait

    barrier_sync, barrier_arrive = bar_sync, bar_arrive  # the simulator has no notion of aligned barriers
else:
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    def _bar(opcode):
        def typer(typingctx, barrier, count):
            if not (isinstance(barrier, types.Integer) and isinstance(count, types.Integer)):
                return None
            sig = types.void(barrier, count)

            def codegen(context, builder, sig, args):
                i32 = ir.IntType(32)
                ops = [context.cast(builder, a, t, types.int32) for a, t in zip(args, sig.args)]
                fnty = ir.FunctionType(ir.VoidType(), [i32, i32])
                # ~{memory}: the compiler must not move shared-memory accesses across the barrier
                asm = ir.InlineAsm(fnty, f"{opcode} $0, $1;", "r,r,~{memory}", side_effect=True)
                builder.call(asm, ops)
                return context.get_dummy_value()

            return sig, codegen

        return typer

    bar_sync = intrinsic(_bar("bar.sync"))
    bar_sync.__doc__ = """``bar.sync id, count``: arrive at named barrier ``id`` and wait until ``count`` threads
    (a multiple of 32, whole warps) have arrived; orders the shared-memory accesses before it."""
    bar_arrive = intrinsic(_bar("bar.arrive"))
    bar_arrive.__doc__ = """``bar.arrive id, count``: count this thread's arrival at named barrier ``id`` and go on
    without waiting (the producer half of a producer/consumer handshake)."""
    # PTX: bar.sync / bar.arrive are barrier.sync.aligned / barrier.arrive.aligned, "aligned" meaning that every
    # thread taking part executes the same barrier instruction. Where the two roles meet at one barrier from their
    # own code, the unaligned forms are the ones the PTX ISA allows, and the ones compute-sanitizer accepts
    # (module docstring, "Sanitizers"); the aligned forms stay for barriers that one role reaches from one place
    barrier_sync = intrinsic(_bar("barrier.sync"))
    barrier_sync.__doc__ = """``barrier.sync id, count`` (not ``.aligned``): as :func:`bar_sync`, for threads that reach
    barrier ``id`` from different instructions."""
    barrier_arrive = intrinsic(_bar("barrier.arrive"))
    barrier_arrive.__doc__ = """``barrier.arrive id, count`` (not ``.aligned``): as :func:`bar_arrive`."""

    from ..vec import _shared_ptr

    def _mb_addr(context, builder, aryty, ary_val, ity, i_val):
        """The 32-bit shared-space address of ``bars[i]`` (what the mbarrier instructions take)."""
        ptr = _shared_ptr(context, builder, aryty, ary_val, ity, i_val)
        sptr = builder.addrspacecast(ptr, ir.PointerType(ptr.type.pointee, addrspace=3))
        return builder.ptrtoint(sptr, ir.IntType(32))

    def _mb(text, doc):
        """An intrinsic ``f(bars, i)``, or ``f(bars, i, x)`` when ``text`` uses $1, emitting ``text`` with $0 the
        address of ``bars[i]`` (an int64 of a shared array) and $1 the 32-bit ``x``."""
        nrest = int("$1" in text)

        def typer(typingctx, bars, i, *rest):
            if len(rest) != nrest or not isinstance(bars, types.Array) or bars.dtype != types.int64:
                return None
            sig = types.void(bars, i, *rest)

            def codegen(context, builder, sig, args):
                i32 = ir.IntType(32)
                ops = [_mb_addr(context, builder, sig.args[0], args[0], sig.args[1], args[1])]
                ops += [context.cast(builder, a, t, types.int32) for a, t in zip(args[2:], sig.args[2:])]
                fnty = ir.FunctionType(ir.VoidType(), [i32] * len(ops))
                cons = ",".join(["r"] * len(ops)) + ",~{memory}"
                builder.call(ir.InlineAsm(fnty, text, cons, side_effect=True), ops)
                return context.get_dummy_value()

            return sig, codegen

        if not nrest:
            def f(typingctx, bars, i):
                return typer(typingctx, bars, i)
        else:
            def f(typingctx, bars, i, x):
                return typer(typingctx, bars, i, x)
        f.__doc__ = doc
        return intrinsic(f)

    mb_init = _mb("mbarrier.init.shared::cta.b64 [$0], $1;",
                  """``mbarrier.init [bars + 8 i], count``: an mbarrier object whose phases complete at ``count``
                  arrivals (one thread initialises it; a ``syncthreads`` before anybody else uses it).""")
    mb_arrive = _mb("mbarrier.arrive.release.cta.shared::cta.b64 _, [$0];",
                    """``mbarrier.arrive.release.cta [bars + 8 i]``: count this thread's arrival in the current
                    phase (a release: this thread's accesses so far are ordered before a wait that sees the phase
                    complete) and go on.""")
    # a loop on try_wait (it may return false after a hardware-chosen time); the labels are local to the braces,
    # so the asm can be inlined many times (the form CUTLASS's barrier wait uses)
    mb_wait = _mb("{ .reg .pred p; MB_WAIT: mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [$0], $1; "
                  "@!p bra MB_WAIT; }",
                  """Wait until the most recent phase of parity ``parity`` of ``bars[i]`` has completed (an
                  acquire): phase k of a barrier has parity k % 2, so a role that waits for the k-th completion
                  passes ``k % 2``.""")



# ----------------------------------------------------------------------------------------------------------
# producer helpers: global -> shared, many loads in flight per thread
# ----------------------------------------------------------------------------------------------------------
@cuda.jit(device=True, inline="always")
def _copy_scratch(sm, dst, src, bh, t0, nvec, ncol4, ptid, npt):
    """``sm[dst + 4 i ..]`` = float4 number i of rows t0.. of ``src[bh]`` (C-contiguous scratch, rows of
    ``4 ncol4`` floats), i < nvec, by cp.async: consecutive threads copy consecutive 16 bytes (coalesced), and
    nothing waits for the data here, so every copy of the chunk is in flight at once."""
    for i in range(ptid, nvec, npt):
        cp_async16(sm, dst + 4 * i, src, (bh, t0 + i // ncol4, (i % ncol4) * 4), 16)


@cuda.jit(device=True, inline="always")
def _copy_input(sm, dst, src, b, h, t0, n, ncol, nvec, ptid, npt):
    """Rows t0 .. t0 + C - 1 of ``src[b, :, h, :]`` (float32, 16-byte aligned rows, K a multiple of 4) into
    ``sm[dst + t * ncol + d]`` by cp.async, zero-filled past the sequence (t >= n) and past K (d >= K)."""
    K = src.shape[3]
    ncol4 = ncol // 4
    for i in range(ptid, nvec, npt):
        t = i // ncol4
        d = (i % ncol4) * 4
        inside = t < n and d < K
        # outside: read nothing (0 bytes, 16 zeros written) from a valid address, row t0 column 0
        cp_async16(sm, dst + 4 * i, src, (b, t0 + t if inside else t0, h, d if inside else 0), 16 if inside else 0)


# ----------------------------------------------------------------------------------------------------------
# kernel B, warp-specialised: producer warps stage chunk c + 1 while consumer warps compute chunk c
# ----------------------------------------------------------------------------------------------------------
def _state_layout(C, KP, BV, has_g, delta, out):
    """Offsets (floats) inside one stage, the stage size, the offset of S, and the total size."""
    NR = 1 + int(delta) + int(out)  # row blocks [C, KP]: W | Q' | K, W | K, Q | K or K
    o_v = NR * C * KP  # value tile [C, BV]: U (delta) or V scaled by gamma_C / gamma_t
    o_f = o_v + C * BV  # f_t = gamma_C / gamma_t, 0 past the sequence (scales V_new, or V)
    o_gm = o_f + C  # gamma_t (additive output)
    o_gc = o_gm + C  # gamma_C
    stage = o_gc + 4  # a multiple of 4 floats: every stage starts 16-byte aligned
    o_s = 2 * stage  # the state tile S [KP, BV] (P1's right-hand side), shared by both stages
    return o_v, o_f, o_gm, o_gc, stage, o_s, o_s + KP * BV


def _threads(KP, BV):
    """(state-tile threads, consumer threads, producer threads): consumers a whole number of warps."""
    nth = (KP // 4) * (BV // 4)
    nct = 32 * cdiv(nth, 32)
    npt = 32 * max(1, nct // 64)  # one producer warp per two consumer warps
    return nth, nct, npt


@functools.lru_cache(maxsize=None)
def _state_kernel(C, KP, BV, has_g, delta, out, has_h0, has_ht, vin, pair):
    BV4 = BV // 4
    NTH, NCT, NPT = _threads(KP, BV)
    NTOT = NCT + NPT
    O_V, O_F, O_GM, O_GC, STAGE, O_S, _ = _state_layout(C, KP, BV, has_g, delta, out)
    P1_ROWS = C * (int(delta) + int(out))  # rows of [W; Q'] (or W, or Q) that multiply the state
    R4 = P1_ROWS // 4
    NT1 = R4 * BV4
    K_OFF = (int(delta) + int(out)) * C * KP  # the K row block
    Q_OFF = C * KP if delta else 0  # Q' (delta) or Q (additive) row block
    NVEC = C * KP // 4

    def state(q, k, v, bcum, w, u, qp, u2, h0, ht, o, scale):
        """Value columns x * BV .. x * BV + BV - 1 of head y, carried through every chunk.

        Threads 0 .. NCT - 1 (consumers) hold S (rows 4 rg .., columns 4 cg .. of the tile) in registers and
        compute; threads NCT .. (producers) copy each chunk's operands into one of two shared stages.
        Per chunk: X = [W; Q'] S (delta) or Q S, V_new = U - W S (delta) or V, o = scale (Q' S + U'') or
        scale (diag(gamma) Q S + U''), S <- gamma_C S + K^T diag(gamma_C / gamma) V_new.
        """
        T, H, K = k.shape[1], k.shape[2], k.shape[3]
        V = v.shape[3]
        NC = (T + C - 1) // C
        sm = cuda.shared.array(0, float32)
        bars = cuda.shared.array(MB_COUNT, int64)  # pair: the FULL and EMPTY mbarriers of the two stages
        bh = cuda.blockIdx.y
        b = bh // H
        h = bh % H
        v0 = cuda.blockIdx.x * BV
        tid = cuda.threadIdx.x
        if pair:
            if tid < MB_COUNT:
                mb_init(bars, tid, NPT if tid < MB_EMPTY else NCT)
            cuda.syncthreads()  # initialised before any role arrives or waits (every thread, one instruction)

        if tid >= NCT:
            # ---------------- producer warps ----------------
            ptid = tid - NCT
            for c in range(NC):
                s = c % 2
                if pair and c >= 2:
                    # the consumers are done with chunk c - 2 in stage s: EMPTY(s)'s completion number c // 2 - 1
                    mb_wait(bars, MB_EMPTY + s, (c // 2 - 1) % 2)
                base = s * STAGE
                t0 = c * C
                n = min(C, T - t0)
                # row blocks by cp.async, first: nothing waits for them until the end of this iteration
                if delta:
                    _copy_scratch(sm, base, w, bh, t0, NVEC, KP // 4, ptid, NPT)
                    if out:
                        _copy_scratch(sm, base + Q_OFF, qp, bh, t0, NVEC, KP // 4, ptid, NPT)
                if vin:
                    if out and not delta:
                        _copy_input(sm, base + Q_OFF, q, b, h, t0, n, KP, NVEC, ptid, NPT)
                    _copy_input(sm, base + K_OFF, k, b, h, t0, n, KP, NVEC, ptid, NPT)
                # gates of the chunk (f_t = gamma_C / gamma_t, 0 past the sequence; gamma_t; gamma_C)
                b_last = bcum[bh, t0 + n - 1] if has_g else float32(0.0)
                for t in range(ptid, C, NPT):
                    f = float32(0.0)
                    if t < n:
                        f = float32(1.0)
                        if has_g:
                            f = math.exp(b_last - bcum[bh, t0 + t])
                    sm[base + O_F + t] = f
                    if has_g and out and not delta:
                        sm[base + O_GM + t] = math.exp(bcum[bh, t0 + t])
                if has_g and ptid == 0:
                    sm[base + O_GC] = math.exp(b_last)
                if has_g and not delta:
                    bar_sync(BAR_PROD, NPT)  # f_t is read by other producers just below
                # through registers (r3's staging loops): the value tile U (delta) or diag(f) V, and (without
                # 16-byte rows: float16, strided or K % 4 != 0) the input row blocks
                if delta:
                    _stage_scratch(sm, base + O_V, BV, u, bh, t0, v0, V, C, BV, ptid, NPT, vin)
                elif vin:
                    _stage_input4(sm, base + O_V, BV, v, b, h, t0, n, V, v0, C, BV, ptid, NPT, has_g, base + O_F)
                else:
                    _stage_input(sm, base + O_V, BV, v, b, h, t0, n, V, v0, C, BV, ptid, NPT, has_g, base + O_F)
                if not vin:
                    if out and not delta:
                        _stage_input(sm, base + Q_OFF, KP, q, b, h, t0, n, K, 0, C, KP, ptid, NPT, False, 0)
                    _stage_input(sm, base + K_OFF, KP, k, b, h, t0, n, K, 0, C, KP, ptid, NPT, False, 0)
                cp_async_wait_all()  # this thread's copies have landed ...
                if pair:
                    mb_arrive(bars, MB_FULL + s)  # ... then: stage s holds chunk c (a release: every store above)
                else:
                    # ... then meet the consumers: stage s holds chunk c, and they are done with chunk c - 1 (in the
                    # other stage, which this loop refills next). The two roles reach it from different code: a
                    # named barrier with the block's count in its unaligned form (module docstring, "Hand-offs")
                    barrier_sync(BAR_MEET, NTOT)
            return

        # ---------------- consumer warps ----------------
        cg = tid % BV4
        rg = tid // BV4
        own = tid < NTH  # holds a 4x4 tile of S (the rest of the last consumer warp only joins barriers)
        S = cuda.local.array(16, float32)
        acc = cuda.local.array(16, float32)
        pre = cuda.local.array(16, float32)
        for i in range(4):
            for j in range(4):
                S[4 * i + j] = float32(0.0)
                if own and has_h0 and rg * 4 + i < K and v0 + cg * 4 + j < V:
                    S[4 * i + j] = h0[b, h, rg * 4 + i, v0 + cg * 4 + j]
        for c in range(NC):
            s = c % 2
            base = s * STAGE
            t0 = c * C
            n = min(C, T - t0)
            if NT1 > 0 and own:
                for i in range(4):
                    st4(sm, O_S + (rg * 4 + i) * BV + cg * 4, (S[4 * i], S[4 * i + 1], S[4 * i + 2], S[4 * i + 3]))
            if pair:
                if NT1 > 0:
                    bar_sync(BAR_CONS, NCT)  # the S stores above before any consumer's P1 reads them
                mb_wait(bars, MB_FULL + s, (c // 2) % 2)  # stage s staged: FULL(s)'s completion number c // 2
            else:
                # stage s staged; also orders the S stores above before every consumer's P1 (all threads take part)
                barrier_sync(BAR_MEET, NTOT)

            # -- P1: X = rows @ S; delta rows -> V_new (in the stage, in place of U), output rows -> o --
            for tile in range(tid, NT1, NCT):
                rr = tile // BV4
                cc = tile % BV4
                if out:  # issue the U'' loads now: they arrive while the product below runs
                    for i in range(4):
                        t = rr + R4 * i - (C if delta else 0)
                        for j in range(4):
                            col = v0 + cc * 4 + j
                            pre[4 * i + j] = float32(0.0)
                            if t >= 0 and t < n and col < V:
                                pre[4 * i + j] = u2[bh, t0 + t, col]
                for e in range(16):
                    acc[e] = float32(0.0)
                _mm_nn(sm, acc, base, KP, O_S, BV, rr, R4, cc * 4, KP)
                for i in range(4):
                    row = rr + R4 * i
                    if delta and row < C:
                        f = sm[base + O_F + row]
                        for j in range(4):
                            p = base + O_V + row * BV + cc * 4 + j
                            sm[p] = (sm[p] - acc[4 * i + j]) * f  # this thread's own elements
                    elif out:
                        t = row - C if delta else row
                        gm = float32(1.0)
                        if has_g and not delta:
                            gm = sm[base + O_GM + t]
                        if t < n:
                            for j in range(4):
                                col = v0 + cc * 4 + j
                                if col < V:
                                    o[b, t0 + t, h, col] = scale * (acc[4 * i + j] * gm + pre[4 * i + j])
            bar_sync(BAR_CONS, NCT)  # V_new complete, and every consumer is done reading S

            # -- P2: S <- gamma_C S + K^T diag(gamma_C / gamma) V_new --
            if own:
                if has_g:
                    gc = sm[base + O_GC]
                    for e in range(16):
                        S[e] *= gc
                for t in range(n):
                    x = ld4(sm, base + K_OFF + t * KP + rg * 4)
                    y = ld4(sm, base + O_V + t * BV + cg * 4)
                    for i in range(4):
                        for j in range(4):
                            S[4 * i + j] += x[i] * y[j]
            if pair and c + 2 < NC:
                mb_arrive(bars, MB_EMPTY + s)  # stage s may be refilled (with chunk c + 2)
        if has_ht and own:
            for i in range(4):
                for j in range(4):
                    if rg * 4 + i < K and v0 + cg * 4 + j < V:
                        ht[b, h, rg * 4 + i, v0 + cg * 4 + j] = S[4 * i + j]

    if config.ENABLE_CUDASIM:  # the simulator's cuda.jit takes no launch_bounds
        return cuda.jit(state)
    return cuda.jit(state, launch_bounds=(NTOT, 1))


# ----------------------------------------------------------------------------------------------------------
# launching
# ----------------------------------------------------------------------------------------------------------
def value_tile(V: int, bv=None) -> int:
    """BV: the state kernel's value-tile width (a multiple of 4), ``BV_DEFAULT`` unless given."""
    bv = BV_DEFAULT if bv is None else int(bv)
    if bv < 4 or bv % 4:
        raise ValueError(f"rung {NAME!r}: the value tile must be a positive multiple of 4, got {bv}")
    return min(bv, 4 * cdiv(max(V, 1), 4))


def forward(q, k, v, g, beta, o, h0, ht, scale, chunk_size, stream=0, bv=None, handoff=None):
    """Launch r3's intra kernel, then the warp-specialised state kernel (the rung contract).

    As r3: ``o=None`` means "state only" (``ht`` must be given); ``chunk_size=None`` uses ``DEFAULT_CHUNK``;
    ``bv`` overrides the value-tile width; ``h0`` and ``ht`` may be the same array. ``handoff``: one of
    :data:`HANDOFFS` (default :data:`HANDOFF`), how producers and consumers hand the stages over.
    """
    for _, launch in launches(q, k, v, g, beta, o, h0, ht, scale, chunk_size, stream, bv, handoff):
        launch()


def launches(q, k, v, g, beta, o, h0, ht, scale, chunk_size, stream=0, bv=None, handoff=None):
    """``[(kernel name, launch)]``: what :func:`forward` runs, in order. Validates the arguments and allocates
    the scratch (r3's buffers)."""
    B, T, H, K = q.shape
    V = v.shape[3]
    handoff = HANDOFF if handoff is None else handoff
    if handoff not in HANDOFFS:
        raise ValueError(f"rung {NAME!r}: handoff must be one of {HANDOFFS}, got {handoff!r}")
    C = r3.check_launch(NAME, chunk_size, K, o, ht)
    KP = r3.padded_k(K)
    BV = value_tile(V, bv)
    has_g, delta, out = g is not None, beta is not None, o is not None
    f4 = np.dtype(np.float32).itemsize
    smem_b = _state_layout(C, KP, BV, has_g, delta, out)[-1] * f4
    if smem_b + MB_BYTES > SMEM_MAX:  # the static mbarrier array counts in the same per-block limit
        raise ValueError(f"rung {NAME!r}: two stages of C={C}, K={K}, value tile {BV} need {smem_b + MB_BYTES} bytes "
                         f"of shared memory, more than {SMEM_MAX}; use a smaller chunk or value tile")
    BH = B * H
    if BH == 0 or V == 0:
        return []
    # r3's intra kernel, launched by r3's own code (which allocates the scratch it writes: the same buffers below)
    todo = [(name, fn) for name, fn in r3.launches(q, k, v, g, beta, o, h0, ht, scale, C, stream, schedule="fused")
            if name == "intra"]
    NC = cdiv(T, C)
    TP = NC * C
    bcum, w, u, qp, u2 = r3.scratch_buffers(BH, TP, KP, V, has_g, delta, out, stream)
    if T > 0 or ht is not None:
        vin = T > 0 and r3._rows_aligned(q, k, v)  # 16-byte rows: cp.async for Q and K, 128-bit loads for V
        kern_b = _state_kernel(C, KP, BV, has_g, delta, out, h0 is not None, ht is not None, vin, handoff == "pair")
        args_b = (q, k, v, bcum, w, u, qp, u2, or_dummy(h0, 4), or_dummy(ht, 4), or_dummy(o, 4), np.float32(scale))
        _, nct, npt = _threads(KP, BV)
        todo.append(("state", lambda: r3._launch(kern_b, (cdiv(V, BV), BH), nct + npt, smem_b, stream, args_b)))
    return todo


def compile_targets():
    """``(label, py_func, argtypes)`` for every state-kernel variant at the default configuration (C = 64,
    K <= 128, BV = 32): 4 recurrences x float32 / float16 inputs x output or state only x h0 x ht; float32 inputs
    with the 16-byte producer loads (vec=1), float16 with the scalar ones (vec=0), all with the default
    :data:`HANDOFF`; and the other hand-off for float32 with output, h0 and ht. The intra kernel is r3's and is
    compiled with r3's targets. Inputs have layout "A"; scratch and stand-ins are C-contiguous float32."""
    f32 = types.float32
    pair = HANDOFF == "pair"
    other = HANDOFFS[pair]  # the one that is not the default
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
                        h0_t = a4 if has_h0 else s4
                        ht_t = a4 if has_ht else s4
                        o_t = a4 if out else s4
                        yield (
                            f"state[{tag},o={int(out)},h0={int(has_h0)},ht={int(has_ht)},vec={int(vin)}]",
                            _state_kernel(C, KP, BV, has_g, delta, out, has_h0, has_ht, vin, pair).py_func,
                            (x4, x4, x4, s2, s3, s3, s3, s3, h0_t, ht_t, o_t, f32),
                        )
            if vin:  # the other hand-off, one variant per recurrence (the barriers differ, nothing else)
                yield (
                    f"state[{tag},o=1,h0=1,ht=1,vec=1,handoff={other}]",
                    _state_kernel(C, KP, BV, has_g, delta, True, True, True, True, not pair).py_func,
                    (x4, x4, x4, s2, s3, s3, s3, s3, a4, a4, a4, f32),
                )
