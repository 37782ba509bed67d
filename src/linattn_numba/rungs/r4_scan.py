"""Rung r4 ``scan``: sequence parallelism. The sequence is cut into segments that run at the same time; a
log-depth tree scan (or a short chain) over the segments' transitions hands each segment its true start state.

What changed and why
    r2 (and r3) walk the chunks of a sequence one after another: the state pass has one sequential walker per
    (b, h, 32 value columns). With few (batch x head) pairs -- B1 H2 K=V=128 is 8 walkers -- most of the 132
    SMs idle while a walker crosses T / C chunks. The recurrence is linear in the state, so a segment of the
    sequence acts on its start state as an affine map ``S -> M S + S_local``, and affine maps compose
    associatively. r4 therefore splits the sequence into NS segments of L tokens, computes every segment's
    map in parallel, combines the maps in a scan, and runs every segment again from its true start state.
    Phase 1 is the "engine" rung's own ``forward`` on segment views (rung ``tensor_cores`` when it is
    registered and fits, else ``shared``, else ``chunked``; any of :data:`ENGINES` when asked for), and phase 3
    another rung's or the engine's (:data:`PHASE3`: r1 ``recurrent`` by default for the delta family, "Phase 3
    on r1" below): r4 adds only the scan's kernels and the bookkeeping. The additive family's default is r3's
    split schedule for both phases ("Phases 1 and 3 on r3's split schedule" below): phase 1 stores every
    chunk's state of a zero-start walk, and phase 3 is only r3's output kernel, which adds the segment's decayed
    start state to those states -- the sequence is walked once, not twice.

The three phases::

    tokens   |----- seg 0 -----|----- seg 1 -----|----- seg 2 -----|-- tail --|
    phase 1  (M0, S0+M0 h0)    (M1, S1)          (M2, S2)          (M3, S3)      engine, state only, all at once
    phase 2  X0 = h0  ->  X1 = M0 h0 + S0  ->  X2 = M1 X1 + S1  ->  X3  ->  ht  tree scan (or chain) of the maps
    phase 3  o[seg 0] from X0  o[seg 1] from X1  o[seg 2] from X2   o[tail] from X3    r1 (or engine), all at once

    phase 1  each segment's local final state S_i (from a zero start) and its transition M_i:
             additive family (plain, decay): M_i = exp(sum of g over the segment), a scalar (1 for plain);
             delta family: M_i = prod_t gamma_t (I - beta_t k_t k_t^T), a K x K matrix. M_i is exactly the
             final state of the same recurrence run with zero values from the initial state I (the columns of
             the state evolve independently), so the engine runs once on the values [v | 0_K] from the
             initial state [0 | I] and returns [S_i | M_i] in one pass, in its own chunked WY form -- M is
             never built token by token. r3 and r6 (``WIDE_STATE``) take v itself and a state K columns
             wider (``r3.wide_state_columns``: their state kernels treat U as zero past v's columns), so
             neither the copy [v | 0] nor the intra kernel's U = A diag(beta) V on its zero half is made; the
             r2 engine gets the copy (``vaug`` below; :data:`VAUG` forces it). The real h0 enters segment 0's
             initial state ([h0 | I]); the additive family adds its share (m h0) in phase 2 instead.
    phase 2  the start state of segment i is X_i = (M_{i-1} o ... o M_0)(h0), with the associative combine
             (M2, S2) o (M1, S1) = (M2 M1, M2 S1 + S2). ``tree``: a Kogge-Stone inclusive scan, one launch per
             level (d = 1, 2, 4, ...: element i >= d becomes P_i o P_{i-d}, ping-pong buffers), then a copy
             shifts the inclusive results by one segment into X; ``chain``: X_{i+1} = M_i X_i + S_i in one
             launch, one sequential step per segment. ht is the last composition.
    phase 3  every segment recomputes its outputs from X_i (o written in full), with r1 or the engine.

Segment views: q [B, T, H, K] is viewed as [B * n, L, H, K] (n equal segments per sequence) with explicit
strides, no copy, when the batch stride allows merging (B = 1, or stride_B = n L stride_T); unequal lengths are
n = NS - 1 equal segments plus a shorter tail launched separately (the tail is an ordinary slice [:, t0:]); when
the views cannot merge the equal segments are launched once per batch element. The per-segment state buffers
are r4's own, laid out [B, NS, H, K, *] so that they merge the same way.

Kernels of the scan (the engine's kernels are documented in its module):

==============  ===============================  ============  ==============================================
kernel          grid                             block         one thread ...
==============  ===============================  ============  ==============================================
vaug**          (min(ceil(n / 256), 65535),)     256           elements e, e + gridsize, ... of [v | 0]
                n = B T H (V + K)                              (consecutive threads, consecutive columns)
init**          same, n = B NS H K (V + K)       256           elements of the initial states [h0 | I]
segsum*         (NS, B H)                        128           a strided share of one segment's g, then a
                                                               shared-memory tree sum; thread 0 writes exp
chain (add)     (ceil(K V / 256), B H)           256           one state element (r, c): walks the NS segments
tree (add)      (ceil(K V / 256), NS, B H)       256           one element of one segment, one level
finish (add)    (ceil(K V / 256), B H)           256           one element: writes X_i = S_incl[i-1] + m h0, ht
chain**         (ceil(V / 32), B H)              (32, 8)       one value column (x) and rows ty, ty + 8, ...
                                                               of X; X in shared memory, M_i read from L2 as
                                                               warp broadcasts; 2 barriers per segment
tree**          (tiles of K x W, NS, B H)        (16, 16)      a 4 x 4 register tile of the 64 x 64 output
                                                               tile of M_i [S | M]_{i-d}: 16-wide slabs of both
                                                               operands staged in shared memory
finish**        (ceil(K V / 256), B H)           256           one element: X_{i+1} = S_incl[i], ht
==============  ===============================  ============  ==============================================

(* decay family only; ** delta family only, vaug only with the r2 engine or :data:`VAUG`; W = V + K, except at
the tree's last level where only the S columns are needed: W = V.) Barriers: segsum 1 + log2(128) per block;
the chain 2 per segment (around the shared X tile: all reads of X_i before any write of X_{i+1}); the tree 2 per
16-wide slab (around the staged slabs). The element-wise kernels use none.

Registers (ptxas for sm_90): element-wise kernels 30-40, tree 96, chain 215-219 -- the chain runs one
256-thread block per SM and only B H ceil(V / 32) blocks, so occupancy is not what limits it (latency is).

Bytes and FLOPs per token-head with the chunked engine (K = V = 128, C = 64, float32; the engine's terms from
r2's table; phase 1 is its state-only pass, phase 3 its full pipeline):

==============  =====================================================  =====================================
phase           global memory per token-head                           FLOPs per token-head
==============  =====================================================  =====================================
1, additive     read k, v (1 KB) and g; no scores, no ``h`` stores     state 2 K V = 33 k
1, delta        vaug: read v 0.5 KB, write [v | 0] 1 KB; then r2 on    Lkk 2 K 40 = 10 k; wu (2 K + V) C =
                W = V + K columns: ~1.5x its bytes for w, u, V_new     25 k; state 4 K (V + K) = 131 k
                (r3 / r6 engines: no vaug, and u, U's work on V only)  (wu (2 K + V) C with V, not V + K)
2, tree         2 x 4 B NS H K W per level, per sequence: ~0           2 K^2 (K + V) per combine, about
                                                                       NS log2 NS combines per sequence
3               the engine: r2 moves ~6 KB (decay) / ~10 KB (gated     the engine: 84 k (additive),
                delta) per token-head                                  143 k (delta)
==============  =====================================================  =====================================

So r4 does about 1.4x the engine's FLOPs for the additive family and 2.2x for the delta rule: the phase-1
overhead is the state pass once more, on (V + K) / V = 2x the columns for the delta rule. The tree's K^3 term
does not grow with T: 2 K^2 (K + V) = 8.4 MFLOP per combine, and at NS = 66 (335 combines: NS - d at level d)
it adds ~11 kFLOP per token-head at T = 262,144 (2.8 GFLOP per sequence). The chain instead does NS - 1
sequential steps of 2 K^2 V = 4.2 MFLOP, spread over only ceil(V / 32) blocks per head.

Cost model. Segments (:func:`choose_num_segments`, :func:`plan_segments`): the engine's state pass has
``B H ceil(V / 32)`` sequential walkers (one per head and 32 value columns). If that already fills the GPU (>= one
per SM: B4 H16 K=V=128 has 256 walkers for 132 SMs), NS = 1 and r4 *is* the engine (r3 for the additive family,
whose phases are r3's) -- one call, no overhead. Otherwise NS = ceil(RESIDENT x SMs / walkers), enough segments for
RESIDENT walkers per SM (``RESIDENT_ADD``, ``RESIDENT_DELTA``: the additive state kernel is lighter, so more of its
blocks share an SM; the delta family's phase 1 already has twice the walkers, V + K columns), capped so that a
segment keeps at least ``MIN_SEG_CHUNKS`` chunks. The segment length is T / NS when NS divides T, else rounded up to
whole chunks when that keeps the count; a shorter last segment runs alone after the others, so the count then moves
down, at most to half, to the plan that walks the fewest chunks one after another (:func:`_short_tail`). At
B1 H2 K=V=128 this first gave NS = 66 (delta family) and 132 (additive): the best of the counts swept on the
H200 with the chunked engine (``tools/r4_scan_probe.py``, ``figures/data/probes/h200_r4_scan_probe.json``).
Since 67e1559 (``RESIDENT_DELTA`` 2, the short-tail rule) it gives 32 and 128 equal segments: with r6 as the
engine and phase 1 without the [v | 0] copy, 32 / 64 / 66 / 128 segments took 6.54 / 6.99 / 7.13 / 8.29 ms for
the gated delta rule, and 128 / 132 / 256 took 9.20 / 9.22 / 9.26 ms for decay
(``figures/data/probes/h200_r4_ns_notail_*_abc1c26.json``).
Scan (:func:`choose_scan`): the estimated times of ``_scan_cost_us``, fitted to phase 2 alone in the same
JSON: the delta family's chain is NS - 1 dependent steps (each reads M_i, 64 KB, from L2 and does 2 K^2 32
FMAs per block on only B H ceil(V / 32) blocks: latency bound), the tree ceil(log2 NS) launches of a
GPU-wide tiled matmul (NS log2 NS combines): the tree is the faster at every NS measured (16 .. 264), and
the model picks it from NS = 2 on. The additive chain is a single pass over the segment states, cheaper than
the tree's log2(NS) passes at every NS measured, and the model always picks it.
``num_segments`` (argument or :data:`NUM_SEGMENTS`) and ``scan`` (argument or :data:`SCAN`) override the model.

Where the time goes: phase 2 and the bookkeeping are small; phases 1 and 3 are each one engine run over all
T tokens, but with B H NS walkers instead of B H, so each costs about what the engine costs at a shape that
fills the GPU with the same number of token-heads (B4 T8192 H16 has as many as B1 T262144 H2). r4 removes
the under-filled sequential pass; what remains is about twice the engine's parallel work (phase 1 on V + K
columns for the delta rule) -- so r4's speed follows its engine, and the fastest registered engine is the
default (the cost model's constants were tuned with r2; the segment sweep below shows its choice is also the
best of the counts tried with r6).

Measured with r3 as the engine (H200, fp32, oracle-checked; ``figures/data/h200_long_*.json``,
``h200_ladder_1fb09fb.json``): at B1 H2 K=V=128, decay at T = 1,048,576 took 18.2 ms against r3's 273 ms
(15x) and fla ``chunk_simple_gla``'s 17.4 ms; gated delta at T = 262,144 took 18.7 ms against r3's 103.6 ms
(5.5x) and fla ``chunk_gated_delta_rule``'s 14.0 ms. At B4 T8192 H16 the model picks one segment and r4 is r3
(2.897 vs 2.896 ms decay). The segment count with r3 (132 additive, 66 delta) fills the GPU: phase 3 runs
the engine at about its standard-shape rate. So r4 follows its engine: being 2x faster than fla here needs an
engine about as fast as fla is at the standard shape, which r3 (3.3x slower for decay, 2.4x for gated delta)
is not.

Measured with each engine side by side (H200, fp32, every run oracle-checked on two heads, fla in the same
process: ``figures/data/probes/h200_r4_engines_6e81e14.json``, ``tools/h200.sh long_engines``), after r4's buffers
and the engines' scratch stopped being reallocated on every call (``_common.scratch``: the reallocation had made
each call wait for the GPU; the same runs took 1.2-3.0 ms longer before,
``figures/data/probes/h200_r4_engines_8eb25aa.json``). At the model's segment count, decay at T = 1,048,576: r6
engine 9.69 ms, r3 engine 16.6 ms, fla ``chunk_simple_gla`` 10.5 ms; gated delta at T = 262,144: r6 engine 10.97
ms, r3 engine 13.6 ms, fla ``chunk_gated_delta_rule`` 14.2 ms. Half and twice the model's count were slower with
both engines (r6: 11.5 / 10.3 ms decay, 12.6 / 13.2 ms gated delta). Phases 1 and 2 alone (``o=None``) took 2.76
ms (decay) and 6.57 ms (gated delta) with r6, so phase 3 is ~6.9 and ~4.4 ms: for decay phase 3 is 4x the
token-heads of the standard shape at r6's standard-shape rate; for the gated delta rule phase 1 dominates (the WY
intra kernel and the state pass on V + K columns). Hence r6 ``tensor_cores`` leads :data:`DEFAULT_ENGINES`. The 2x
over fla of issue 4 is not reached: it needs r6's additive output kernel and the delta family's intra kernel (each
slower than fla's whole forward at the standard shape) to get faster.

Phase 3 on r1. Phase 3 needs no transition and no V + K columns: it is an ordinary forward from known start states,
and r1 ``recurrent`` does it at its own rate, 0.30-0.33 us per token and block at the standard shape (128 blocks,
one per SM), while r6's phase 3 above took ~6.9 ms (decay) and ~4.4 ms (gated delta). With the model's segment
counts r1 runs B H NS ceil(V / 64) blocks of up to L tokens (528 blocks of up to 8,000 tokens for decay, 264 of up
to 4,032 for gated delta). Measured (H200, the same shapes, oracle-checked on two heads, fla in the same process,
``figures/data/probes/h200_r4_phase3_4f30af1.json``): decay 9.42 ms against 9.75 ms with r6's phase 3 and fla's
10.53 ms; gated delta 9.36 ms against 10.98 ms and fla's 14.14 ms (1.51x). Phases 1 and 2 alone took 2.78 and 6.58
ms, so phase 3 on r1 is ~6.6 and ~2.8 ms. Hence :data:`PHASE3` became r1 for both families (for the additive
family it is now r3's split schedule, below); the 2x over fla is still not reached, and for the delta family phase 1
(r6's WY intra kernel and its state pass on V + K columns) is now two
thirds of the time. The bench at 153e34f (``figures/data/probes/h200_long_decay_153e34f.json``,
``probes/h200_long_gdn_153e34f.json``) agrees: decay 9.44 ms against fla's 10.53 (1.12x), gated delta 9.37 ms
against 14.25 (1.52x). With r3's faster intra kernel (the WY inverse in partial sums; r3's docstring) gated delta
took 8.95 ms against fla's 14.32 (1.60x; ``figures/data/probes/h200_long_gdn_a1325d3.json``). With r3's staging by
fixed-map stagers (its intra kernel is r6's for the delta family) 8.59 ms against fla's 14.31 (1.67x) and r3's 69.7
(8.1x; ``figures/data/probes/h200_long_gdn_9ed137f.json``). With r3's intra kernel's products 8 steps of the
inner dimension per loop step (67a8c79), 8.57 ms against fla's 14.29 (1.67x) and r3's 64.9 (7.6x;
``figures/data/probes/h200_long_gdn_67a8c79.json``). At a757612 (r3's WY inverse on ``ld1``, r3's docstring, and
r6's state kernel prefetching by r3's fixed maps): gated delta 8.39 ms against fla's 14.12 (1.68x) and r3's 64.96 (7.7x;
``figures/data/probes/h200_long_gdn_a757612.json``); decay 9.18 ms against fla's 10.53 (1.15x) and r3's 177.3 (19.3x;
``figures/data/h200_long_decay_a757612.json``, the README's row).

Phase 1 without the copy [v | 0] (ebe502c: the engines' wide state, above). Measured side by side in one process
(``figures/data/probes/h200_r4_wide_ebe502c.json``): phases 1 and 2 alone 5.60 -> 4.33 ms, the forward 8.37 -> 7.11
ms, fla's ``chunk_gated_delta_rule`` 14.36 ms. The bench (``figures/data/h200_long_gdn_ebe502c.json``, the README's
row then, now ``probes/``): 7.12 ms against fla's 14.24 (2.00x) and r3's 64.82 (9.1x). A sweep around the
model's 66 (33, 50, 99, 132: 9.0-9.9 ms, ``probes/h200_r4_wide_ns_ebe502c.json``) was slower at every count, but
each of those counts left a long last segment (6,144 tokens at 33) that runs alone; counts that divide T
(``probes/h200_r4_ns_notail_gdn_abc1c26.json``) were faster: 32 segments 6.54 ms. With the count model above
(67e1559, 32 equal segments), the bench (``probes/h200_long_gdn_67e1559.json``, the README's row until 8e0d568): 6.55 ms
against fla's 14.22 (2.17x) and r3's 64.79 (9.9x), 80 M token-heads/s. Decay at the new count (128 equal
segments, ``probes/h200_r4_decay_ns128_67e1559.json``): 9.17 ms against fla's 10.46 (1.14x), phases 1 and 2
alone 2.51 ms: phase 3 on r1 (~6.7 ms for 2 M token-heads) is what kept decay from 2x (next paragraph but one).

Phases 1 and 3 on r3's split schedule (the additive family's default since 3538980, :data:`SPLIT`). Phase 3 on
r1 or on an engine walks every segment a second time from its true start state X_i. For the additive family that
walk is not needed: the recurrence is linear in the state and the transition a scalar, so a chunk's true starting
state is S_c = H_c + exp(lg_c) X_i, where H_c is the state of the segment's walk from zero at chunk c and lg_c
the sum of g over the segment's tokens before it. Phase 1 is therefore r3's split-schedule state kernel on the
segment views (``r3.split_deferred``): from zero, storing every H_c (the ``hs`` buffer of r3's split schedule,
B H NT K V floats: 2 GiB at B1 T1048576 H2 K=V=128) and lg_c, with the segment's final state going to P as
before; phase 2 is unchanged (X_i from the chain); phase 3 is r3's output kernel alone, whose threads add
exp(lg_c) X_i to the slabs of H_c that they copied once those have landed, before the barrier that publishes
them (no extra barrier; X_i is one K x V per segment-head, read from L2). Each group of segments (the equal ones,
the tail, or one batch element at a time) keeps its own ``hs`` from phase 1 to phase 3 (scratch tagged by group).
With one segment (the standard shape) r4 was then r3's forward, faster there than the default engine r6 for
the additive family until 8baed37; since, it is r6's forward where r6's pipelined output kernel runs (last
paragraph). Where r3's split schedule cannot run (float16, rows that 128-bit copies
cannot take, ``hs`` over ``r3.SPLIT_MAX_BYTES``: ``r3.split_deferred_fits``) phase 3 stays on r1.

Measured (H200, B1 T1048576 H2 K=V=128, decay, fp32, oracle-checked on two heads, fla in the same process,
``figures/data/probes/h200_r4_split_3538980.json``, ``tools/r4_engine_probe.py --phase3 split,recurrent
--ns-factors 1,1.04,2``): 6.49 ms against 9.09 ms with phase 3 on r1 and fla ``chunk_simple_gla``'s 10.54 ms
(1.63x; 1.16x before), at the model's 128 segments; 133 and 256 segments 6.51 / 6.52 ms. That is about four
times r3's split kernels at the standard shape (state 0.60 + output 0.92 ms for a quarter of the token-heads,
``probes/h200_tune_r3_gates_bf141f5.json``) plus the scan: r4 now runs at the engine's full-GPU rate, and the 2x
over fla needs r3's split kernels about 20 % faster (they run at ~42 % of the fp32 FMA peak; fla's run on TF32
tensor cores).

Peers tuned at their own shape (8e0d568, ``peers.retune_fla``). fla's autotune keys hold neither T nor the number
of heads, so in a device session that had timed another shape first, fla ran at 1M tokens with that shape's
configs: 17.2 ms in the bench files from bf141f5 to 9f034eb against 10.5 in the probes above, which is what the
comparisons here used (``probes/h200_fla_retune_8ae96fc.json`` shows it: 17.08 ms with the configs of B4 T8192
H16 from Triton's disk cache, 22.30 with them kept in the process, 10.51 / 10.53 tuned at 1M). The bench with
every peer retuned (``figures/data/h200_long_decay_8e0d568.json``, ``probes/h200_long_gdn_8e0d568.json``): decay
6.35 ms against fla's 10.49 (1.65x) and r3's 48.41 (7.6x); gated delta 7.29 ms against fla's 14.34 (1.97x).

That gated delta time was slower than 67e1559's 6.55 ms, and the cause was phase 3's r1 kernel, not r4: per
kernel under ncu, 67e1559's tree against e04db40's (``probes/h200_ncu_r4_gdn_67e1559_9f39eca.csv``,
``h200_ncu_r4_gdn_9f39eca.csv``, ``tools/h200.sh r4_gdn_ab``) every kernel within 2 % but r1's, 2.785 against
3.542 ms with 166 against 136 registers. r1's module had not changed; ``vec.cp_async16``, which stages its tiles,
had (8f9bf2e: the addresses cast to the shared and global spaces in the IR, the form r3's split kernels gained
from). Under the H200's ptxas that form made r1's h0-only variant (the one phase 3 launches) take fewer registers
and run 27 % slower, which this machine's ptxas does not reproduce (same registers both ways), so the SASS read
here could not show it. Timed side by side (``probes/h200_cp_async_4adc74d.json``): 2.787 ms with the generic
addresses converted inside the asm against 3.540 in the IR form; r1 at the standard shape with both states and
r5 within 1 % either way. ``vec.CP_ASYNC16_IN_IR`` is False since (``cp_async16_at`` keeps the IR form). The bench
at 4adc74d (``figures/data/h200_long_gdn_4adc74d.json``): gated delta 6.51 ms against fla's 14.23 (2.19x) and r3's
64.94 (10.0x).

Numerics: everything float32. The affine maps are exact algebra (no approximation); the only difference from
a single pass is the order of float32 sums (the scan composes products of up to NS maps), well inside the
project's float32 tolerance. The delta family's M_i = prod (I - beta k k^T) gamma is a contraction for
beta in [0, 1] and unit-norm keys, so products of them do not grow.

Sanitizers (H200, ``tools/sanitize.py`` at B2 T300 H2 K64 V80, C = 64, 3 segments with a shorter tail, the tree
scan): memcheck, racecheck and synccheck report nothing for the four recurrences, with r6 as the engine (the
default: ``figures/data/h200_sanitize_par_09d0776.txt``) and with r3 (``engine="shared"``:
``h200_sanitize_par_r4_r3engine_416ea91.txt``), each (recurrence, tool) in a process of its own
(``h200.sh sanitize_par``); and with the default phase 3 on r1 (engine r6, the rows tagged
``tensor_cores/recurrent``: ``figures/data/h200_sanitize_par_9717011.txt``, whose r5 rows predate r5's unaligned
barriers). Phase 1 on the engines' wide state (ebe502c), delta and gated delta: clean with r6
(``h200_sanitize_par_ebe502c.txt``) and with r3 (``h200_sanitize_par_r4_r3engine_ebe502c.txt``). The earlier
sequential runs (``h200_sanitize_r4_*.txt``) ran out of time in r4. At d8b443d (r1's copies back in the asm form
of ``vec.cp_async16``) r1 on the four recurrences and r4 on each, defaults: clean (``h200_sanitize_par_d8b443d.txt``).

Where the long shapes' time goes (ncu per kernel at d8b443d, ``probes/h200_ncu_r4_decay_d8b443d.csv``,
``h200_ncu_r4_gated_delta_d8b443d.csv``): decay at 1M tokens, r3's split state kernel 2.45 ms and its output
kernel 3.77 ms of 6.32 (segment sums, gates and the scan 0.11 ms together: the rest is r3's two kernels at their
standard-shape rate, so the 2x over fla waits on them); gated delta at 262,144 tokens, r3's intra kernel 1.04 ms,
r6's state kernel 2.30, the tree 0.39, r1's phase 3 2.78 of 6.56.

Phase 3 on r6's output kernel (8baed37, :data:`SPLIT_OUT`). Decay's phase 3 was r3's output kernel, 3.77 ms at 1M
tokens, multiplying on the FMA units. r6's pipelined output kernel (``r6_tensor_cores._out_pipe_kernel``: r3's
slabs and copies, the deferred start state added the same way, the products as 3xTF32 mma tiles) passed to
``r3.split_deferred`` as its ``out_kernel``: at B1 T1048576 H2 K=V=128, 128 segments, one device call
(``figures/data/probes/h200_r4_split_out_8baed37.json``), 5.606 ms against 6.339 with r3's kernel, phases 1 and 2
alone 2.513. The bench (``figures/data/probes/h200_long_decay_45bc923.json``): 5.634 ms against fla's 10.489 (1.86x, not
yet the 2x) and r3's 48.32 (8.6x), 372 M token-heads/s, 30.5 TFLOP/s counted. Phase 3 there takes ~3.1 ms for four
times the standard shape's token-heads, where the output kernel alone takes 0.676 ms at the standard shape (x4 =
2.70): the deferred state's adds (global loads of X after a slab's ``cp.async.wait_group``, before its barrier) and
the 60 spilled bytes of that variant are the candidates, not yet measured apart. With one segment (the standard
shape) r4 is r6's forward for the additive family where r6's kernel runs (C >= 32), r3's at C = 16.
compute-sanitizer on r4 plain and decay with this phase 3 (B2 T300 H2 K64 V80, 3 segments): memcheck, racecheck,
synccheck report nothing (``figures/data/h200_sanitize_par_45bc923.txt``; again at 5661884 with phase 1 on r3's
state kernel in 8 x 4 tiles of 64 columns, forced at that shape by ``--vary r3_shared.SPLIT_ROWS=8 --vary
r3_shared.SPLIT_BV=64``: ``figures/data/h200_sanitize_par_5661884.txt``).

A correction and what was tried next (944bc1d, 8ffbe4a). The "state only" record of ``tools/r4_engine_probe.py``
(``o=None``) does not time this path's phases 1 and 2: without an output the split does not run, and phase 1 is
the engine's own state-only walk (r6's: 2.51 ms with 3xTF32, 2.01 with TF32). The 2.513 above is that walk, so
phase 3's share cannot be read from it; by the ncu split at d8b443d (r3's split state kernel 2.45 ms at 1M tokens,
gates, sums and scan 0.11) phase 3 now takes ~3.0 of 5.53 ms, against 4 x 0.677 = 2.71 for the same token-heads
at the standard shape. At B1 T1048576 H2 (``figures/data/probes/h200_r4_x_prefetch_944bc1d.json``, one device
call), none of these helped: an L1 prefetch of the start state's next slab in the output kernel (5.66 against 5.53
ms), r3's split state kernel with 64 value columns (512 threads, 5.61), half or twice the model's 128 segments
(5.53, 5.57). What does: one TF32 product in phase 3 (``precision="tf32"``, r6's one-product kernels, fla's own
accuracy: relative error 9.9e-4, fla's ~1.8e-3), 5.02 against 5.56 ms with 3xTF32, fla ``chunk_simple_gla``
10.63 ms in the same process: 2.12x at fla's precision, 1.91x at float32's
(``figures/data/probes/h200_r4_tf32_8ffbe4a.json``, by r6's ``PRECISION``). Through ``forward(precision=...)`` at
1753dfc, the last device call: 5.531 / 5.008 ms (``probes/h200_r4_precision_1753dfc.json``); the bench beside it
(``figures/data/h200_long_decay_1753dfc.json``, README table) 5.527 ms against fla's 10.464 (1.89x at the default
3xTF32, 2.09x for the TF32 time) and r3's 48.32 (8.7x), 379 M token-heads/s, 31.1 TFLOP/s counted. The default
stays 3xTF32: the 2x at float32 accuracy is not met. compute-sanitizer at 8ffbe4a on r4 plain and decay (and r3,
r6: the merged output kernel): memcheck, racecheck, synccheck clean (``figures/data/h200_sanitize_par_8ffbe4a.txt``).

Where phase 3's extra time goes (a9af1e5, ncu per kernel: ``figures/data/probes/h200_ncu_r4_decay_1M_a9af1e5.csv``
and ``..._std_a9af1e5.csv``). At B1 T1048576 H2: segment sums 0.017 ms, gates 0.038, r3's split state kernel 2.464,
the chain 0.055, r6's output kernel 3.005; at the standard shape (a quarter of the token-heads) the same kernels
take 0.621 and 0.679, so phase 1 runs at the standard-shape rate and phase 3 0.29 ms slower than four standard
shapes (2.716). Its DRAM reads are the same (5.40 GB against 4 x 1.34); its L2 traffic is 2.14 GB more (12.94
against 4 x 2.70 GB): the start state X, 64 KB read by each of the 32,768 blocks. Hiding those loads' latency did
not help (r3's ``_out_pipeline``: issued before the previous slab's products, 5.95 ms, the registers spilled;
before the wait, 5.56; as landed 5.55: ``figures/data/probes/h200_r4_x_ahead_e328b8e.json``, fla 10.57 there), so
what is left is to read X less often -- several chunks of one segment per block, which the block's shared memory
(two blocks of 104 KB per SM) does not leave room for as the kernel is built -- or to make the two big kernels
faster at every shape. Without X's share phase 3 would be ~2.72 ms and r4 ~5.26 ms, about half of fla's 10.46-10.57:
X's traffic was about the whole of what kept r4 from 2x at float32 accuracy -- until phase 1 got faster (next).

2x at float32 accuracy (d88055a): r3's split state kernel in 8 x 4 tiles of 64 value columns (``r3.split_tile``:
a head's K copied half as often, twice the work per thread between barriers; r3's docstring). Phase 1 at 1M tokens
runs 512 such blocks. One device call (``figures/data/probes/h200_r4_split_rows_1e301a6.json``): 5.556 ms with 4 x 4
tiles of 32 columns, 5.339 with 8 x 4 of 32, 5.628 with 4 x 4 of 64 (512 threads), 5.052 with 8 x 4 of 64, fla
``chunk_simple_gla`` 10.546. The bench (``figures/data/probes/h200_long_decay_3aed3d0.json``): 5.059 ms against
fla's 10.450 (2.07x); r3 beside it took 73.66 ms with the 64-column tile that 3aed3d0 used for every shape. With
``split_tile``'s rule (r3 keeps its 32-column 4 x 4 kernel at this shape), the bench at 5d63b60
(``figures/data/h200_long_decay_5d63b60.json``, the README's row): **r4 5.050 ms against fla's 10.515 (2.08x)**,
415 M token-heads/s, 34.0 TFLOP/s counted (0.51 of the ~67 TFLOP/s FMA rate), relative error 1.5e-6 (fla's
1.8e-3); r3 48.29 ms (r4 9.56x faster).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import cuda, float32, types

from .. import sim
from .._common import INPUT_DTYPES, array_type, cdiv, or_dummy, scratch

NAME = "scan"
MAX_K = 256  # the chain kernel's shared [K, 32] tile (32 KB) and 32 rows per thread at K = 256
MAX_V = None  # V is tiled by every kernel
CHUNK_SIZES = (16, 32, 64, 128)  # passed through to the engine

ENGINES = ("shared", "chunked", "tensor_cores")  # the rungs r4 can run its phases 1 and 3 with
# the default engine: the first of these that is registered and fits K, V, C. r6 first: it was the fastest engine at
# both long-context shapes (tools/h200.sh long_engines: figures/data/probes/h200_r4_engines_6e81e14.json, 9.7 vs
# 16.6 ms decay, 11.0 vs 13.6 ms gated delta against r3); r3 for chunk size 128 / K > 128 is not offered by either,
# so r2 ``chunked`` is the last resort
DEFAULT_ENGINES = ("tensor_cores", "shared", "chunked")
ENGINE = None  # an override of the default engine (a name from ENGINES), like NUM_SEGMENTS and SCAN below
# Phase 3 computes outputs from known start states: any rung can, r1 ``recurrent`` too (it walks tokens, so it does
# not serve phase 1's V + K columns cheaply, but phase 3 is an ordinary forward with h0). The rung phase 3 runs
# on per family (False: additive, True: delta family); None: the engine itself. r1 for both: at the long-context
# shapes it beat r6's phase 3 (decay 9.42 against 9.75 ms in total, gated delta 9.36 against 10.98 ms:
# figures/data/probes/h200_r4_phase3_4f30af1.json); it falls back to the engine above K = 128.
# "split" (the additive family only): phase 1 is r3's split state kernel walking every segment from zero and storing
# every chunk's state, phase 3 r3's output kernel from those states plus the decayed start state of the segment
# (r3.split_deferred): one walk, not two. Where it cannot run (r3.split_deferred_fits) phase 3 is r1's. Decay at
# B1 T1048576 H2: 6.49 ms against 9.09 with phase 3 on r1 (figures/data/probes/h200_r4_split_3538980.json).
PHASE3_RUNGS = ("recurrent",) + ENGINES
SPLIT = "split"
PHASE3 = {False: SPLIT, True: "recurrent"}
# With SPLIT, whose output kernel phase 3 runs: r3's ("shared", FMA) or r6's ("tensor_cores": r3's copies and
# slabs, the products as 3xTF32 mma tiles, r6_tensor_cores.out_pipe_factory; where it fits, C >= 32). Read at
# launch (tools/r4_engine_probe.py --split-out varies it). r6's: 5.61 against 6.34 ms for decay at B1 T1M H2
# (figures/data/probes/h200_r4_split_out_8baed37.json)
SPLIT_OUTS = ("shared", "tensor_cores")
SPLIT_OUT = "tensor_cores"
PRECISIONS = ("3xtf32", "tf32")  # forward(precision=...): r6's (r6_tensor_cores.PRECISIONS, checked by a test)

# Overrides of the cost model, for tests and experiments: None lets the model choose.
NUM_SEGMENTS = None
SCAN = None  # "tree" or "chain"
# Phase 1 of the delta family with an engine that takes a state wider than its values (r3, r6: WIDE_STATE) passes
# v itself and lets the engine treat the K extra columns as zero values; True spells [v | 0] out instead (a copy,
# as the r2 engine always needs): the old path, kept for tests that compare the two and for A/B timing
VAUG = False

# Cost model constants (see the module docstring), tuned with tools/r4_scan_probe.py on the H200
# (figures/data/probes/h200_r4_scan_probe.json) at B1 H2 K=V=128 with the chunked engine.
RESIDENT_ADD = 8  # sequential walkers wanted per SM, additive family (r2's state kernel: ~50 registers)
# delta family: 2 since 67e1559 (phase 1 no longer copies [v | 0]): at B1 T262144 H2 K=V=128, 32 segments took 6.54
# ms, 64 took 6.99 and 128 8.29 (equal segments, figures/data/probes/h200_r4_ns_notail_gdn_abc1c26.json): fewer
# segments mean fewer tree combines (NS log2 NS) and phase 3 (r1, ceil(V / 64) blocks a segment-head) one block per SM
RESIDENT_DELTA = 2
MIN_SEG_CHUNKS = 2  # a segment keeps at least this many chunks
ENGINE_BV = 32  # value columns per walker of the engine's state pass (r2's BV)
DEFAULT_SMS = 132  # the H200, when the device cannot be asked (the simulator)

THREADS = 256  # element-wise kernels
SEGSUM_THREADS = 128
CHAIN_BV = 32  # chain: value columns per block (one warp wide)
CHAIN_ROWS = 8  # chain: rows of threads; a thread holds rows ty, ty + 8, ... (MAX_K / 8 = 32)
CHAIN_RPT = 32  # MAX_K // CHAIN_ROWS (a literal: local-array sizes must be constants)
CHAIN_MAX_K = 256  # the chain's shared tile height (MAX_K)
TM = 64  # tree: output tile rows per block
TN = 64  # tree: output tile columns per block
TJ = 16  # tree: slab width of the contraction dimension
TJ_PAD = 17  # TJ + 1: M slab columns padded so that a thread pair's reads fall in different banks

SCAN_KINDS = ("tree", "chain")


# ----------------------------------------------------------------------------------------------------------
# phase 1 helpers: augmented values, initial states, segment decays
# ----------------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _vaug_kernel():
    def vaug(v, out):
        """out[b, t, h, c] = v[b, t, h, c] for c < V, 0 for V <= c < V + K (float32). Grid-stride loop."""
        B, T, H, V = v.shape
        W = out.shape[3]
        n = B * T * H * W
        for e in range(cuda.grid(1), n, cuda.gridsize(1)):
            c = e % W
            r = e // W
            h = r % H
            r = r // H
            t = r % T
            b = r // T
            out[b, t, h, c] = float32(v[b, t, h, c]) if c < V else float32(0.0)

    return cuda.jit(vaug)


@functools.lru_cache(maxsize=None)
def _init_kernel(has_h0: bool):
    def init(h0, out, V):
        """out[b, s, h] = [X | I] with X = h0 for s = 0 (zeros without h0, and for s > 0): [B, NS, H, K, V + K]."""
        B, NS, H, K, W = out.shape
        n = B * NS * H * K * W
        for e in range(cuda.grid(1), n, cuda.gridsize(1)):
            c = e % W
            r = e // W
            row = r % K
            r = r // K
            h = r % H
            r = r // H
            s = r % NS
            b = r // NS
            x = float32(0.0)
            if c < V:
                if has_h0 and s == 0:
                    x = h0[b, h, row, c]
            elif c - V == row:
                x = float32(1.0)
            out[b, s, h, row, c] = x

    return cuda.jit(init)


@functools.lru_cache(maxsize=None)
def _segsum_kernel():
    def segsum(g, m, seg_len):
        """m[b, s, h] = exp(sum of g[b, t, h] over segment s = [s L, min(T, (s + 1) L)))."""
        T, H = g.shape[1], g.shape[2]
        s = cuda.blockIdx.x
        b = cuda.blockIdx.y // H
        h = cuda.blockIdx.y % H
        tid = cuda.threadIdx.x
        t0 = s * seg_len
        t1 = min(T, t0 + seg_len)
        acc = float32(0.0)
        for t in range(t0 + tid, t1, SEGSUM_THREADS):
            acc += g[b, t, h]
        red = cuda.shared.array(SEGSUM_THREADS, float32)
        red[tid] = acc
        cuda.syncthreads()  # every partial sum is in shared memory
        half = SEGSUM_THREADS // 2
        while half > 0:
            if tid < half:
                red[tid] += red[tid + half]
            cuda.syncthreads()  # this level's sums are complete before the next level reads them
            half //= 2
        if tid == 0:
            m[b, s, h] = math.exp(red[0])  # the sum is <= 0: exp in [0, 1], may underflow to 0 (correctly)

    return cuda.jit(segsum)


# ----------------------------------------------------------------------------------------------------------
# phase 2, additive family: scalar transitions
# ----------------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _chain_add_kernel(has_g: bool, has_h0: bool, has_ht: bool):
    def chain_add(p, m, h0, x, ht):
        """One state element (r, c) of one (b, h): X_0 = h0, X_{i+1} = m_i X_i + S_i; ht = X_NS.

        p [B, NS, H, K, V] the local states S_i; m [B, NS, H] the segment decays (has_g); x [B, NS, H, K, V].
        The thread reads h0[b, h, r, c] before it writes ht[b, h, r, c]: the two may be the same array.
        """
        B, NS, H, K, V = p.shape
        e = cuda.blockIdx.x * THREADS + cuda.threadIdx.x
        if e >= K * V:
            return
        b = cuda.blockIdx.y // H
        h = cuda.blockIdx.y % H
        r = e // V
        c = e % V
        acc = float32(0.0)
        if has_h0:
            acc = h0[b, h, r, c]
        x[b, 0, h, r, c] = acc
        for i in range(NS):
            if has_g:
                acc = m[b, i, h] * acc + p[b, i, h, r, c]
            else:
                acc += p[b, i, h, r, c]
            if i + 1 < NS:
                x[b, i + 1, h, r, c] = acc
        if has_ht:
            ht[b, h, r, c] = acc

    return cuda.jit(chain_add)


@functools.lru_cache(maxsize=None)
def _tree_add_kernel(has_g: bool):
    def tree_add(pin, min_, pout, mout, d):
        """One Kogge-Stone level: for segment i >= d, (m, S)_i <- (m_i m_{i-d}, m_i S_{i-d} + S_i); else copied."""
        B, NS, H, K, V = pin.shape
        e = cuda.blockIdx.x * THREADS + cuda.threadIdx.x
        i = cuda.blockIdx.y
        b = cuda.blockIdx.z // H
        h = cuda.blockIdx.z % H
        if e >= K * V:
            return
        r = e // V
        c = e % V
        val = pin[b, i, h, r, c]
        if i >= d:
            if has_g:
                val += min_[b, i, h] * pin[b, i - d, h, r, c]
            else:
                val += pin[b, i - d, h, r, c]
        pout[b, i, h, r, c] = val
        if has_g and e == 0:
            mout[b, i, h] = min_[b, i, h] * min_[b, i - d, h] if i >= d else min_[b, i, h]

    return cuda.jit(tree_add)


@functools.lru_cache(maxsize=None)
def _finish_add_kernel(has_g: bool, has_h0: bool, has_ht: bool):
    def finish_add(p, m, h0, x, ht):
        """After the tree: (m, S)_incl[i] maps the zero state to the state after segment i, so
        X_0 = h0, X_{i+1} = S_incl[i] + m_incl[i] h0, ht = X_NS. One element (r, c) per thread, all segments
        (so h0 is read before ht, its possible alias, is written)."""
        B, NS, H, K, V = p.shape
        e = cuda.blockIdx.x * THREADS + cuda.threadIdx.x
        if e >= K * V:
            return
        b = cuda.blockIdx.y // H
        h = cuda.blockIdx.y % H
        r = e // V
        c = e % V
        hv = float32(0.0)
        if has_h0:
            hv = h0[b, h, r, c]
        x[b, 0, h, r, c] = hv
        for i in range(NS):
            val = p[b, i, h, r, c]
            if has_h0:
                val += m[b, i, h] * hv if has_g else hv
            if i + 1 < NS:
                x[b, i + 1, h, r, c] = val
            elif has_ht:
                ht[b, h, r, c] = val

    return cuda.jit(finish_add)


# ----------------------------------------------------------------------------------------------------------
# phase 2, delta family: K x K transitions, P = [S | M] of shape [B, NS, H, K, V + K]
# ----------------------------------------------------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _chain_delta_kernel(has_h0: bool, has_ht: bool):
    def chain_delta(p, h0, x, ht):
        """Value columns 32 x + tx of one (b, h), rows ty, ty + 8, ...: X_0 = h0 and, with X_1 = S_0 (which
        already holds M_0 h0), X_{i+1} = M_i X_i + S_i; ht = X_NS. X lives in shared memory.

        M_i[r, j] = p[b, i, h, r, V + j] is the same for the whole warp (one broadcast load, L1/L2 hits).
        """
        B, NS, H, K, W = p.shape
        V = W - K
        b = cuda.blockIdx.y // H
        h = cuda.blockIdx.y % H
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        vcol = cuda.blockIdx.x * CHAIN_BV + tx
        vok = vcol < V
        xs = cuda.shared.array((CHAIN_MAX_K, CHAIN_BV), float32)  # X_i[:, block's columns]
        acc = cuda.local.array(CHAIN_RPT, float32)  # constant size and trip count: registers
        for rr in range(CHAIN_RPT):
            r = ty + CHAIN_ROWS * rr
            if r < K:
                if vok:
                    x[b, 0, h, r, vcol] = h0[b, h, r, vcol] if has_h0 else float32(0.0)
                xs[r, tx] = p[b, 0, h, r, vcol] if vok else float32(0.0)
        cuda.syncthreads()  # X_1 complete in shared memory
        for i in range(1, NS):
            for rr in range(CHAIN_RPT):
                r = ty + CHAIN_ROWS * rr
                acc[rr] = float32(0.0)
                if r < K and vok:
                    x[b, i, h, r, vcol] = xs[r, tx]
            for j in range(K):
                xj = xs[j, tx]
                for rr in range(CHAIN_RPT):
                    r = ty + CHAIN_ROWS * rr
                    if r < K:
                        acc[rr] += p[b, i, h, r, V + j] * xj
            cuda.syncthreads()  # every thread has read X_i before any overwrites it
            for rr in range(CHAIN_RPT):
                r = ty + CHAIN_ROWS * rr
                if r < K:
                    xs[r, tx] = acc[rr] + (p[b, i, h, r, vcol] if vok else float32(0.0))
            cuda.syncthreads()  # X_{i+1} complete
        if has_ht and vok:
            for rr in range(CHAIN_RPT):
                r = ty + CHAIN_ROWS * rr
                if r < K:
                    ht[b, h, r, vcol] = xs[r, tx]

    return cuda.jit(chain_delta)


@functools.lru_cache(maxsize=None)
def _tree_delta_kernel():
    def tree_delta(pin, pout, d, ncols):
        """One Kogge-Stone level, one 64 x 64 tile of columns < ncols of segment i's [S | M] (W = V + K columns):

        i >= d: pout[i] = M_i pin[i - d] + [S_i | 0]     (M_i = pin[i][:, V:], K x K; pin[i - d] K x W)
        i < d:  pout[i] = pin[i]
        Thread (tx, ty) owns rows r0 + ty + 16 a and columns c0 + tx + 16 c, a, c in 0..3.
        """
        B, NS, H, K, W = pin.shape
        V = W - K
        ntc = (ncols + TN - 1) // TN
        r0 = (cuda.blockIdx.x // ntc) * TM
        c0 = (cuda.blockIdx.x % ntc) * TN
        i = cuda.blockIdx.y
        b = cuda.blockIdx.z // H
        h = cuda.blockIdx.z % H
        tx = cuda.threadIdx.x
        ty = cuda.threadIdx.y
        tid = ty * 16 + tx
        if i < d:  # the whole block takes this branch (i is the block's): no barrier is skipped by some threads
            for a in range(4):
                r = r0 + ty + 16 * a
                for cc in range(4):
                    col = c0 + tx + 16 * cc
                    if r < K and col < ncols:
                        pout[b, i, h, r, col] = pin[b, i, h, r, col]
            return
        a_s = cuda.shared.array((TM, TJ_PAD), float32)  # M_i[r0 + r, j0 + j]
        b_s = cuda.shared.array((TJ, TN), float32)  # pin[i - d][j0 + j, c0 + c]
        acc = cuda.local.array(16, float32)
        for e in range(16):
            acc[e] = float32(0.0)
        for j0 in range(0, K, TJ):
            for e in range(4):  # 1024 elements of each slab, 4 per thread; consecutive threads, consecutive j / c
                idx = tid + 256 * e
                ra = idx // TJ
                ja = idx % TJ
                ok = r0 + ra < K and j0 + ja < K
                a_s[ra, ja] = pin[b, i, h, r0 + ra, V + j0 + ja] if ok else float32(0.0)
                jb = idx // TN
                cb = idx % TN
                ok = j0 + jb < K and c0 + cb < ncols
                b_s[jb, cb] = pin[b, i - d, h, j0 + jb, c0 + cb] if ok else float32(0.0)
            cuda.syncthreads()  # both slabs are loaded
            for j in range(TJ):
                for a in range(4):
                    av = a_s[ty + 16 * a, j]
                    for cc in range(4):
                        acc[a * 4 + cc] += av * b_s[j, tx + 16 * cc]
            cuda.syncthreads()  # the slabs are consumed before the next ones overwrite them
        for a in range(4):
            r = r0 + ty + 16 * a
            for cc in range(4):
                col = c0 + tx + 16 * cc
                if r < K and col < ncols:
                    val = acc[a * 4 + cc]
                    if col < V:
                        val += pin[b, i, h, r, col]
                    pout[b, i, h, r, col] = val

    return cuda.jit(tree_delta)


@functools.lru_cache(maxsize=None)
def _finish_delta_kernel(has_h0: bool, has_ht: bool):
    def finish_delta(p, h0, x, ht):
        """After the tree: X_0 = h0, X_{i+1} = S_incl[i] = p[i][:, :V] (h0 was folded into segment 0 in phase 1);
        ht = S_incl[NS - 1]. One element (r, c) per thread, all segments (h0 read before ht is written)."""
        B, NS, H, K, W = p.shape
        V = W - K
        e = cuda.blockIdx.x * THREADS + cuda.threadIdx.x
        if e >= K * V:
            return
        b = cuda.blockIdx.y // H
        h = cuda.blockIdx.y % H
        r = e // V
        c = e % V
        x[b, 0, h, r, c] = h0[b, h, r, c] if has_h0 else float32(0.0)
        for i in range(NS - 1):
            x[b, i + 1, h, r, c] = p[b, i, h, r, c]
        if has_ht:
            ht[b, h, r, c] = p[b, NS - 1, h, r, c]

    return cuda.jit(finish_delta)


# ----------------------------------------------------------------------------------------------------------
# segment views
# ----------------------------------------------------------------------------------------------------------
def _strided_view(a, shape, strides):
    """A view of ``a``'s memory from its first element, with explicit shape and byte strides (no copy)."""
    shape = tuple(int(s) for s in shape)
    strides = tuple(int(s) for s in strides)
    if sim.active():
        from numba.cuda.simulator.cudadrv.devicearray import FakeCUDAArray

        return FakeCUDAArray(np.lib.stride_tricks.as_strided(a._ary, shape, strides))
    from numba.cuda.cudadrv.devicearray import DeviceNDArray

    return DeviceNDArray(shape=shape, strides=strides, dtype=a.dtype, gpu_data=a.gpu_data, stream=a.stream)


def _merged_stride(nb, n, outer, inner):
    """Stride of the axis that merges nb batch elements with n consecutive blocks (of stride ``inner`` each),
    or None when they do not form one arithmetic sequence."""
    if n == 1:
        return outer  # one block per batch element: the batch axis itself
    if nb == 1 or outer == n * inner:
        return inner
    return None


def _token_view(a, b, nb, t0, n, seg_len):
    """Tokens ``t0 .. t0 + n L`` of batch elements ``b .. b + nb`` of ``a`` [B, T, *rest] as [nb n, L, *rest]
    (segment j of batch element b at index b n + j); None for an absent array, False when the batch stride
    does not allow the merge (nb > 1, n > 1 and stride_B != n L stride_T)."""
    if a is None:
        return None
    s0, s1 = a.strides[0], a.strides[1]
    merged = _merged_stride(nb, n, s0, seg_len * s1)
    if merged is None:
        return False
    sub = a[b:b + nb, t0:]
    return _strided_view(sub, (nb * n, seg_len) + tuple(a.shape[2:]), (merged, s1) + tuple(a.strides[2:]))


def _seg_view(a, b, nb, s0, n):
    """Segments ``s0 .. s0 + n`` of batch elements ``b .. b + nb`` of ``a`` [B, NS, *rest] as [nb n, *rest]
    (None for an absent array, False when the axes cannot merge)."""
    if a is None:
        return None
    merged = _merged_stride(nb, n, a.strides[0], a.strides[1])
    if merged is None:
        return False
    sub = a[b:b + nb, s0:]
    return _strided_view(sub, (nb * n,) + tuple(a.shape[2:]), (merged,) + tuple(a.strides[2:]))


def _segment_groups(T, seg_len):
    """(s0, n, t0, length): the n = T // L equal segments, then the shorter tail if L does not divide T."""
    ne = T // seg_len
    groups = [(0, ne, 0, seg_len)] if ne else []
    tail = T - ne * seg_len
    if tail:
        groups.append((ne, 1, ne * seg_len, tail))
    return groups


def _run_segments(fn, B, T, seg_len, token_arrays, seg_arrays):
    """Call ``fn(*token_views, *seg_views)`` for every group of segments: once per group when every view can
    merge the batch and segment axes, else once per batch element."""
    for s0, n, t0, length in _segment_groups(T, seg_len):
        views = [_token_view(a, 0, B, t0, n, length) for a in token_arrays]
        views += [_seg_view(a, 0, B, s0, n) for a in seg_arrays]
        if not any(vw is False for vw in views):
            fn(*views)
            continue
        for b in range(B):
            views = [_token_view(a, b, 1, t0, n, length) for a in token_arrays]
            views += [_seg_view(a, b, 1, s0, n) for a in seg_arrays]
            fn(*views)


# ----------------------------------------------------------------------------------------------------------
# the engine and the cost model
# ----------------------------------------------------------------------------------------------------------
def _fits(mod, K, V, chunk_size):
    """Whether rung module ``mod`` supports K, V and the chunk size (``None`` limits: any; no CHUNK_SIZES: any)."""
    sizes = getattr(mod, "CHUNK_SIZES", None)
    return (mod.MAX_K or K) >= K and (mod.MAX_V or V) >= V and (sizes is None or chunk_size in sizes)


def engine_module(K, V, chunk_size, name=None):
    """The engine rung: ``name`` (else :data:`ENGINE`), or the first of :data:`DEFAULT_ENGINES` that is registered
    and supports K, V, C."""
    from . import RUNGS, module

    name = ENGINE if name is None else name
    if name is not None and name not in ENGINES:
        raise ValueError(f"rung {NAME!r}: engine must be one of {ENGINES}, got {name!r}")
    candidates = (name,) if name is not None else DEFAULT_ENGINES
    for cand in candidates:
        if cand not in RUNGS or cand == NAME:
            continue
        mod = module(cand)
        if _fits(mod, K, V, chunk_size):
            return mod
    raise ValueError(f"rung {NAME!r}: no engine among {candidates} supports K={K}, V={V}, chunk_size={chunk_size}")


def phase3_module(K, V, chunk_size, delta, eng, name=None):
    """The rung of phase 3: ``name`` (a rung of :data:`PHASE3_RUNGS`, or "engine" for ``eng``), else
    :data:`PHASE3` for the family (``delta``), falling back to the engine ``eng`` where the default does not fit
    K, V, C (a rung asked for by name must fit)."""
    from . import RUNGS, module

    asked = name is not None
    name = PHASE3[bool(delta)] if name is None else name
    if name == SPLIT:  # where forward runs it (_runs_split) phase 3 is r3's output kernel; elsewhere r1 does it
        name, asked = "recurrent", False
    if name is None or name == "engine" or name == eng.NAME:
        return eng
    if name not in PHASE3_RUNGS or name not in RUNGS:
        raise ValueError(f"rung {NAME!r}: phase3 must be one of {PHASE3_RUNGS + (SPLIT,)} or 'engine', got {name!r}")
    mod = module(name)
    if _fits(mod, K, V, chunk_size):
        return mod
    if asked:
        raise ValueError(f"rung {NAME!r}: phase3 rung {name!r} does not support K={K}, V={V}, "
                         f"chunk_size={chunk_size}")
    return eng


def _runs_split(q, k, v, g, beta, o, chunk_size, name=None):
    """Whether phases 1 and 3 are r3's split schedule with the start state deferred (:data:`SPLIT`): asked for
    (``name``, else :data:`PHASE3` for the family), the additive family with an output, r3 registered, and
    ``r3.split_deferred_fits``. Asked for by name where it cannot run: ValueError."""
    from . import RUNGS, module

    delta = beta is not None
    asked = name == SPLIT
    if (PHASE3[delta] if name is None else name) != SPLIT or o is None or q.shape[1] == 0:
        return False
    ok = not delta and "shared" in RUNGS and module("shared").split_deferred_fits(q, k, v, g, beta, o, chunk_size)
    if asked and not ok:
        raise ValueError(f"rung {NAME!r}: phase3={SPLIT!r} needs the additive family and r3's split schedule "
                         f"(float32 with 16-byte aligned rows, r3.split_deferred_fits)")
    return ok


def split_out_module(K, V, chunk_size):
    """With the split (:func:`_runs_split`, which checks the arrays' rows): r6's module where phase 3 runs its
    pipelined output kernel (:data:`SPLIT_OUT` "tensor_cores", r6 registered, ``out_pipe_fits``), else None (r3's
    output kernel runs). An unknown SPLIT_OUT: ValueError."""
    from . import RUNGS, module

    if SPLIT_OUT not in SPLIT_OUTS:
        raise ValueError(f"rung {NAME!r}: SPLIT_OUT must be one of {SPLIT_OUTS}, got {SPLIT_OUT!r}")
    if SPLIT_OUT != "tensor_cores" or "tensor_cores" not in RUNGS:
        return None
    tc = module("tensor_cores")
    return tc if tc.out_pipe_fits(K, V, chunk_size, False, True, True) else None


@functools.lru_cache(maxsize=None)
def _sm_count() -> int:
    if sim.active():
        return DEFAULT_SMS
    try:
        return int(cuda.get_current_device().MULTIPROCESSOR_COUNT)
    except Exception:  # noqa: BLE001 - no context yet / no device: the H200's count
        return DEFAULT_SMS


def choose_num_segments(B, T, H, K, V, chunk_size, delta, n_sm=None):
    """NS from the cost model of the module docstring: 1 when ``B H ceil(V / 32)`` walkers fill the SMs, else
    enough segments for ``RESIDENT_DELTA`` (delta family) or ``RESIDENT_ADD`` walkers per SM, each segment at
    least ``MIN_SEG_CHUNKS`` chunks long."""
    n_sm = _sm_count() if n_sm is None else n_sm
    walkers = B * H * cdiv(V, ENGINE_BV)
    if walkers >= n_sm or walkers == 0:
        return 1
    ns = cdiv((RESIDENT_DELTA if delta else RESIDENT_ADD) * n_sm, walkers)
    return _short_tail(T, chunk_size, max(1, min(ns, T // (MIN_SEG_CHUNKS * chunk_size))))


def _short_tail(T, chunk_size, ns):
    """The count n in [max(2, ceil(ns / 2)), ns] whose plan (:func:`plan_segments`) walks the fewest chunks one
    after another: a segment's chunks, plus the last segment's when it is shorter (it is launched after the
    others, alone); on a tie the plan without such a tail, then the larger n. ``ns`` is the count that fills the
    GPU, so fewer segments are longer ones. With a long tail phase 3 walks thousands of tokens on a few blocks
    while the GPU idles (B1 T262144 H2: 33 segments of 8,000 tokens and a last one of 6,144 took 9.47 ms against
    6.54 ms for 32 equal ones, ``figures/data/probes/h200_r4_wide_ns_ebe502c.json``,
    ``h200_r4_ns_notail_gdn_abc1c26.json``)."""
    best, best_key = ns, None
    for n in range(ns, max(2, cdiv(ns, 2)) - 1, -1):
        count, seg_len = plan_segments(T, chunk_size, n)
        last = T - (count - 1) * seg_len
        tail = cdiv(last, chunk_size) if last != seg_len else 0
        key = (cdiv(seg_len, chunk_size) + tail, tail > 0, -count)
        if best_key is None or key < best_key:
            best, best_key = count, key
    return best


def plan_segments(T, chunk_size, num_segments):
    """(NS, L): segment length L = ceil(T / num_segments), rounded up to a multiple of the chunk when that keeps
    the count and the count does not divide T (equal segments, each with a partial last chunk, are better than
    whole chunks and a shorter last segment launched on its own); NS = ceil(T / L); the last segment is shorter
    when L does not divide T."""
    ns = max(1, min(int(num_segments), max(T, 1)))
    seg_len = cdiv(max(T, 1), ns)
    aligned = min(cdiv(seg_len, chunk_size) * chunk_size, max(T, 1))
    if cdiv(T, aligned) == ns and T % ns:
        seg_len = aligned
    return cdiv(max(T, 1), seg_len), seg_len


# Scan cost constants (microseconds), fitted to phase 2 alone at B1 H2 K=V=128, NS = 16 .. 264, in
# figures/data/probes/h200_r4_scan_probe.json ("phase2_*" records; tools/r4_scan_probe.py).
LAUNCH_US = 4.0  # one launch and drain
CHAIN_STEP_US_K128 = 175.0  # one chain step of the delta family at K = 128 (latency bound; scales as K^2)
TREE_GFLOPS = 8000.0  # the tree's tiled matmul over the whole GPU, counted as 2 K^2 (K + V) B H NS per level
ADD_STEP_US = 0.4  # one chain step of the additive family (one load and one FMA per thread)
COPY_GBPS = 3000.0  # element-wise passes over the state buffers (the additive tree's measured times, which
# include allocating its ping-pong buffers, lie above this estimate: the chain is chosen either way)


def _scan_cost_us(kind, B, H, K, V, ns, delta):
    """Estimated time of phase 2 in microseconds (see choose_scan)."""
    levels = max(1, math.ceil(math.log2(ns)))
    if delta:
        if kind == "chain":
            return LAUNCH_US + (ns - 1) * CHAIN_STEP_US_K128 * (K / 128) ** 2
        flops = 2.0 * K * K * (K + V) * B * H * ns * levels
        return (levels + 1) * LAUNCH_US + flops / (TREE_GFLOPS * 1e3)
    if kind == "chain":
        return LAUNCH_US + ns * ADD_STEP_US
    level_bytes = 2.0 * 4 * B * ns * H * K * V  # each level reads and writes every segment's state
    return (levels + 1) * LAUNCH_US + levels * level_bytes / (COPY_GBPS * 1e3) + ns * ADD_STEP_US


def choose_scan(B, H, K, V, ns, delta):
    """"tree" or "chain", whichever :func:`_scan_cost_us` estimates faster (the chain on a tie)."""
    chain = _scan_cost_us("chain", B, H, K, V, ns, delta)
    tree = _scan_cost_us("tree", B, H, K, V, ns, delta)
    return "tree" if tree < chain else "chain"


# ----------------------------------------------------------------------------------------------------------
# launching
# ----------------------------------------------------------------------------------------------------------
def _launch_1d(n):
    return max(1, min(cdiv(n, THREADS), 65535))


def _scan(p, m, h0, x, ht, kind, delta, has_g, stream):
    """Phase 2: X [B, NS, H, K, V] and ht from phase 1's P (and the decays m)."""
    B, NS, H, K, W = p.shape
    V = x.shape[4]
    BH = B * H
    has_h0, has_ht = h0 is not None, ht is not None
    h0d, htd = or_dummy(h0, 4), or_dummy(ht, 4)
    if delta:
        if kind == "chain":
            _chain_delta_kernel(has_h0, has_ht)[(cdiv(V, CHAIN_BV), BH), (CHAIN_BV, CHAIN_ROWS), stream](p, h0d, x, htd)
            return
        src, dst = p, scratch("r4.tree", p.shape, stream)
        d = 1
        while d < NS:
            ncols = W if 2 * d < NS else V  # the last level needs only the S columns
            tiles = cdiv(K, TM) * cdiv(ncols, TN)
            _tree_delta_kernel()[(tiles, NS, BH), (16, 16), stream](src, dst, d, ncols)
            src, dst = dst, src
            d *= 2
        _finish_delta_kernel(has_h0, has_ht)[(cdiv(K * V, THREADS), BH), THREADS, stream](src, h0d, x, htd)
        return
    md = or_dummy(m, 3)
    if kind == "chain":
        _chain_add_kernel(has_g, has_h0, has_ht)[(cdiv(K * V, THREADS), BH), THREADS, stream](p, md, h0d, x, htd)
        return
    src, dst = p, scratch("r4.tree", p.shape, stream)
    msrc, mdst = md, (scratch("r4.tree_m", m.shape, stream) if has_g else md)
    d = 1
    while d < NS:
        _tree_add_kernel(has_g)[(cdiv(K * V, THREADS), NS, BH), THREADS, stream](src, msrc, dst, mdst, d)
        src, dst = dst, src
        msrc, mdst = mdst, msrc
        d *= 2
    _finish_add_kernel(has_g, has_h0, has_ht)[(cdiv(K * V, THREADS), BH), THREADS, stream](src, msrc, h0d, x, htd)


def forward(q, k, v, g, beta, o, h0, ht, scale, chunk_size, stream=0, *, num_segments=None, scan=None,
            engine=None, phase3=None, precision=None):
    """Launch the three phases of the module docstring (the rung contract: :mod:`linattn_numba.rungs`).

    Keyword extensions: ``num_segments`` (default :data:`NUM_SEGMENTS`, else :func:`choose_num_segments`),
    ``scan`` ("tree" / "chain"; default :data:`SCAN`, else :func:`choose_scan`), ``engine`` (a rung name from
    :data:`ENGINES`; default :data:`ENGINE`, else the first registered of :data:`DEFAULT_ENGINES` that fits),
    ``phase3`` (the rung of phase 3, from :data:`PHASE3_RUNGS`, or "engine", or "split" for phases 1 and 3 on
    r3's split schedule, the additive family only; default :data:`PHASE3` for the recurrence's family, r1 where
    "split" cannot run, the engine where r1 does not fit K, V).
    ``precision`` (r6's: "3xtf32", float32 accuracy, or "tf32", one TF32 product, fla's accuracy; default r6's
    ``PRECISION``): the products of every r6 kernel r4 runs (phase 3's output kernel with the split, r6 as the
    engine or phase 3's rung); r1's, r2's and r3's FMA kernels compute in float32 whatever it says.
    ``o=None`` computes only ``ht`` (phase 3 is skipped). With one segment this is the engine's ``forward``
    (r3's where phases 1 and 3 would be r3's split schedule: the additive family by default).
    ``h0`` and ``ht`` may be the same array.
    """
    B, T, H, K = q.shape
    V = v.shape[3]
    if chunk_size not in CHUNK_SIZES:
        raise ValueError(f"rung {NAME!r}: chunk_size must be one of {CHUNK_SIZES}, got {chunk_size!r}")
    if K > MAX_K:
        raise ValueError(f"rung {NAME!r} supports K <= {MAX_K}, got K={K}")
    scan = SCAN if scan is None else scan
    if scan is not None and scan not in SCAN_KINDS:
        raise ValueError(f"rung {NAME!r}: scan must be one of {SCAN_KINDS} or None, got {scan!r}")
    num_segments = NUM_SEGMENTS if num_segments is None else num_segments
    if num_segments is not None and (isinstance(num_segments, bool) or int(num_segments) != num_segments
                                     or num_segments < 1):
        raise ValueError(f"rung {NAME!r}: num_segments must be a positive integer, got {num_segments!r}")
    C = int(chunk_size)
    from . import module

    if precision is not None and precision not in PRECISIONS:
        raise ValueError(f"rung {NAME!r}: precision must be one of {PRECISIONS} or None, got {precision!r}")

    def kw(mod):  # precision reaches r6's forward only
        return {"precision": precision} if precision is not None and mod.NAME == "tensor_cores" else {}

    eng = engine_module(K, V, C, engine)
    eng3 = phase3_module(K, V, C, beta is not None, eng, phase3)
    split = _runs_split(q, k, v, g, beta, o, C, phase3)
    if num_segments is None:
        num_segments = choose_num_segments(B, T, H, K, V, C, beta is not None)
    NS, L = plan_segments(T, C, num_segments)
    tc = split_out_module(K, V, C) if split else None  # r6, where phase 3 runs its output kernel
    if NS == 1 or B * H * K * V == 0 or (o is None and ht is None):
        if o is not None or ht is not None:  # one segment: a plain forward, by the rung whose split schedule
            # phases 1 and 3 would run (r6's: r3's state kernel and its own output kernel; or r3's), else the engine
            one = eng if not split else tc if tc is not None else module("shared")
            one.forward(q, k, v, g, beta, o, h0, ht, scale, C, stream, **kw(one))
        return
    has_g, delta = g is not None, beta is not None
    W = V + K if delta else V

    # phase 1: every segment's local final state (and, delta rule, its transition M), all at once
    p = scratch("r4.p", (B, NS, H, K, W), stream)
    x = scratch("r4.x", (B, NS, H, K, V), stream)
    m = None
    if delta:
        init = scratch("r4.init", (B, NS, H, K, W), stream)
        _init_kernel(h0 is not None)[_launch_1d(init.size), THREADS, stream](or_dummy(h0, 4), init, V)
        v1, h01 = v, init
        if not getattr(eng, "WIDE_STATE", False) or VAUG:  # the engine needs the values [v | 0] spelled out
            v1 = scratch("r4.vaug", (B, T, H, W), stream)
            _vaug_kernel()[_launch_1d(v1.size), THREADS, stream](v, v1)
    else:
        v1, h01 = v, None
        if has_g:
            m = scratch("r4.m", (B, NS, H), stream)
            _segsum_kernel()[(NS, B * H), SEGSUM_THREADS, stream](g, m, L)

    later = []  # split: each group's output launch, run in phase 3 (its own scratch, tagged by group)

    def phase1(qs, ks, vs, gs, bs, h0s, hts):
        eng.forward(qs, ks, vs, gs, bs, None, h0s, hts, scale, C, stream, **kw(eng))

    out_kernel = tc.out_pipe_factory(precision) if tc is not None else None

    def phase1_split(qs, ks, vs, gs, os_, hts, xs):
        first, second = module("shared").split_deferred(qs, ks, vs, gs, os_, hts, xs, scale, C, stream,
                                                        tag=f".r4.{len(later)}", out_kernel=out_kernel)
        for _, launch in first:
            launch()
        later.extend(second)

    if split:
        _run_segments(phase1_split, B, T, L, [q, k, v, g, o], [p, x])
    else:
        _run_segments(phase1, B, T, L, [q, k, v1, g, beta], [h01, p])

    # phase 2: the start state of every segment, and ht
    kind = scan if scan is not None else choose_scan(B, H, K, V, NS, delta)
    _scan(p, m, h0, x, ht, kind, delta, has_g, stream)

    # phase 3: every segment's outputs from its true start state
    if split:
        for _, launch in later:
            launch()
    elif o is not None:
        def run3(qs, ks, vs, gs, bs, os_, xs):
            eng3.forward(qs, ks, vs, gs, bs, os_, xs, None, scale, C, stream, **kw(eng3))

        _run_segments(run3, B, T, L, [q, k, v, g, beta, o], [x])


def compile_targets():
    """``(label, py_func, argtypes)`` for r4's own kernels (the engine's are the engine rung's targets)."""
    i64 = types.int64
    s3, s4, s5 = (array_type(np.float32, n, "C") for n in (3, 4, 5))
    a3, a4 = array_type(np.float32, 3), array_type(np.float32, 4)
    for dtype in INPUT_DTYPES:
        yield f"vaug[{np.dtype(dtype).name}]", _vaug_kernel().py_func, (array_type(dtype, 4), s4)
    for has_h0 in (False, True):
        yield f"init[h0={int(has_h0)}]", _init_kernel(has_h0).py_func, (a4 if has_h0 else s4, s5, i64)
    yield "segsum", _segsum_kernel().py_func, (a3, s3, i64)
    for has_g in (False, True):
        yield f"tree_add[g={int(has_g)}]", _tree_add_kernel(has_g).py_func, (s5, s3, s5, s3, i64)
    yield "tree_delta", _tree_delta_kernel().py_func, (s5, s5, i64, i64)
    for has_h0 in (False, True):
        for has_ht in (False, True):
            h0_t = a4 if has_h0 else s4
            ht_t = a4 if has_ht else s4
            flags = f"h0={int(has_h0)},ht={int(has_ht)}"
            for has_g in (False, True):
                yield (f"chain_add[g={int(has_g)},{flags}]", _chain_add_kernel(has_g, has_h0, has_ht).py_func,
                       (s5, s3, h0_t, s5, ht_t))
                yield (f"finish_add[g={int(has_g)},{flags}]", _finish_add_kernel(has_g, has_h0, has_ht).py_func,
                       (s5, s3, h0_t, s5, ht_t))
            yield f"chain_delta[{flags}]", _chain_delta_kernel(has_h0, has_ht).py_func, (s5, h0_t, s5, ht_t)
            yield f"finish_delta[{flags}]", _finish_delta_kernel(has_h0, has_ht).py_func, (s5, h0_t, s5, ht_t)
