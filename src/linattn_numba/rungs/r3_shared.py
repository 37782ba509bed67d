"""Rung r3, ``shared``: the chunkwise algorithm of r2 (:func:`linattn_numba.reference.chunked`) in two fused
kernels that keep every operand of their matrix products in shared memory and every thread's results in
registers (by default, three: the *split schedule*, sections below; for plain and decay attention its state walk
and output run as one launch where their blocks are the same size, :data:`OVERLAP`; the delta family's split
has a walk of its own that also computes V_new).

What changed from r2, and why
-----------------------------
r2 runs one formula per kernel and passes every intermediate through global memory: 5 kernels, a 512 MiB
buffer ``h`` of per-chunk states, and inner loops that read each operand element from L1/L2 for each FMA. Here:

1. **Two kernels.** ``intra`` does everything that does not depend on the carried state, for all chunks at once
   (gates, scores, the WY solve, and the output's intra-chunk parts); ``state`` walks the chunks of one head
   in order with the state in registers and writes the output as it goes (*fused output*). The state buffer
   ``h`` is gone: a chunk's starting state only ever exists in registers and, for one product, in shared memory.
2. **The output folded into the state pass.** With Q' = diag(gamma) Q - Aqk W and U'' = Aqk U (delta rule) or
   Aqk V (additive), both state-free and computed by ``intra``::

       O = scale (diag(gamma) Q S + Aqk (U - W S)) = scale (Q' S + U'')

   so the state pass needs one product [W; Q'] S (2C x K by K x BV) per chunk for both V_new = U - W S and the
   output, plus the update S <- gamma_C S + K^T diag(gamma_C / gamma) V_new (additive: [Q] S and the update).
3. **Register blocking with 128-bit shared loads.** Every product is computed in 4x4 micro-tiles per thread
   (16 accumulators); per 4 steps of the inner dimension a thread loads 4 + 4 float4 (``ld4``, one
   ``ld.shared.v4.f32`` each: Numba alone emits 32-bit loads) and does 64 FMAs, and one loop step takes 8
   (``_mm_nn8``: 16 loads, then 128 FMAs). Tiles are laid out so a warp reads few distinct rows of the left factor
   (broadcast) and consecutive float4 of the right one, with rows padded by 4 floats (16-byte alignment kept,
   bank conflicts avoided); the state kernel's map (``_quad_map``) gives a warp 4 x 8 tiles, one shared-memory
   wavefront per load.
4. **Staging that keeps loads in flight.** Global -> shared copies load 8 values (or 8 float4: 128-bit loads
   of float32 inputs whose rows are 16-byte aligned, checked per call, and of the scratch) per thread before
   storing any, and the state pass asks L2 for the next chunk's rows (``prefetch.L2``) before computing on this
   one: one-at-a-time staging left both kernels waiting on memory latency (the first version of this rung
   spent most of its time there; see tools/tune_r3.py's JSON for the history of a tuning run). Where every
   size is a compile-time constant (float32 inputs with aligned rows, C = 64 in the intra kernel) the rows are
   staged by fixed-map stagers (:func:`_rows_stager`: a thread owns one column quad and fixed rows), not by the
   general loops, whose index arithmetic cost more instructions than the state pass's products.
5. **(I + Lkk)^-1 in blocks.** r2 solved for W and U column by column (C sequential rows each). Here A is
   formed explicitly: the 16 x 16 diagonal blocks are inverted in parallel (one thread per column), then each
   16-row block row from those above, A_IJ = -A_II sum_{J <= M < I} L_IM A_MJ (two small products and two
   barriers per block row, 7 barriers at C = 64, instead of 2 per row); W, U, Q', U'' are then ordinary
   register-blocked products that stop at the diagonal of the lower-triangular left factor. Each sum of the
   inverse runs in 4 partial sums over a 128-bit load of L's row (one variable would make every FMA wait for
   the one before), and the threads the diagonal solve leaves idle scale K meanwhile.
6. **Every thread busy in the state pass.** The additive P1, X = Q S, has C x BV outputs: at C < K' one 4x4
   tile for only C / K' of the threads. It is split over K' (``_p1_split``): each thread computes a tile over
   C of the K' columns, and after the barrier all threads sum the parts and write o. For the delta rule with
   output K's rows are staged with the chunk into a third row block, not over W once P1 is done (one barrier
   and one latency-bound staging fewer per chunk). Where these came from: the next section.
7. **Few instructions around the FMAs.** The update S += K^T V_new takes 8 rows a step: 16 ``ld4`` into two
   local arrays, then 128 FMAs (one row a step let each group of 16 FMAs wait on its own 2 loads, and Numba's
   64-bit loop counting cost as many instructions as the FMAs); the products' loops take 8 steps of the inner
   dimension too (``_mm_nn8``: 157 SASS instructions per 128 FMAs, against 86 per 64 for 4 steps). The L2
   prefetch asks for each line by a fixed map (:func:`_chunk_prefetcher`): 20-odd instructions a request, not
   a general loop of 170.

Pipeline of the fused schedule (``forward`` launches them in this order; for plain and decay attention with an
output the default is the split schedule, its own section below)::

    intra   per chunk, parallel: b (cumulative log-gates), Aqk = tril(Q K^T ⊙ Gamma),
            delta: Lkk, A = (I + Lkk)^-1, W = A diag(beta gamma) K, U = A diag(beta) V, Q' = diag(gamma) Q - Aqk W;
            U'' = Aqk U (delta) or Aqk V (additive)            -> bcum [BH, T'], w, qp [BH, T', K'], u, u2 [BH, T', V]
    state   per head and value tile, sequential over chunks: X = [W; Q'] S (or Q S), V_new = U - W S (or V),
            o = scale (Q' S + U'') (or scale (diag(gamma) Q S + U'')), S <- gamma_C S + K^T diag(gamma_C/gamma) V_new

(T' = T rounded up to whole chunks, K' = K rounded up to a power of two >= 16: rows and columns past T and K are
zero in shared memory, so no product needs a bounds test.) ``intra`` is skipped for the plain recurrence without
output; without g nothing is exponentiated. ``o=None`` (state only, used by r4) drops Aqk, Q', U'' and every
output product: ``intra`` then computes only b (and for the delta rule A, W, U), ``state`` only V_new and S.

Thread maps (grid (x, y); y = b H + h; NT = number of chunks; sizes at C = 64, K' = 128, BV = 64)
---------------------------------------------------------------------------------------------------

=========  ===============  ================  =====================================================================
kernel     grid             block             one thread ...
=========  ===============  ================  =====================================================================
intra      (NT, B H)        (C/4)^2 = 256     scores: a 4x4 tile of Aqk and Lkk, rows tr + 16 i, columns
                                              tc + 16 j (strided: a warp's 16 column rows fall in distinct banks);
                                              inverse: one column of a 16 x 16 diagonal block (64 threads), then
                                              entries of a block row; products [C, 64] (64 columns of W, U, Q',
                                              U'' per pass): a 4x4 tile, rows 4 rr .. 4 rr + 3 (contiguous, so the
                                              triangular left factor is read only up to column 4 rr + 3)
state      (V / BV, B H)    (K'/4)(BV/4)      the 4 x 4 block (rows 4 rg.., columns 4 cg..) of S, in registers for
                            = 512             the whole sequence; in X = [W; Q'] S a 4x4 tile, rows rr + 32 i;
                                              additive: part tid // 256 of K' (64 columns), a 4x4 tile of Q S,
                                              rows rr + 16 i, then 2 float4 of the summed output tile. (rg, cg)
                                              and (rr, cc) from ``_quad_map``: a warp holds 4 x 8 tiles
=========  ===============  ================  =====================================================================

Synchronisation: ``intra`` has a barrier after the staging, the gates and the scores, 2 + 2 per block row in
the inverse and 2 per 64-column pass; ``state`` has 3 barriers per chunk. Each barrier's comment says what it
protects.

Shared memory and registers (ptxas for sm_90, float32 inputs, C = 64, K' = 128)
-------------------------------------------------------------------------------

=========  =======================================================  ==========  ==============================
kernel     shared memory (dynamic; opted in above 48 KB)            KB / block  registers / thread
=========  =======================================================  ==========  ==============================
intra      K, Q rows [64, 132]; Aqk, Lkk -> A [64, 68]; inverse     107.75      102 additive, 120-121 delta
           scratch; gates. 2 blocks per SM: launch bounds (256, 2)              (32: gates only, decay without
                                                                                output)
state      row blocks [2 x 64, 132] (delta with output: 3); S [128,  117.5-151.5  96-128, no spills (float32
           68]; V_new [64, 68]; gates; additive with output: the                inputs, aligned rows)
           parts of the split P1 [2 x 64, 68]. 1 block of 512
           threads per SM: launch bounds (512, 1), so <= 128 regs
=========  =======================================================  ==========  ==============================

No kernel uses local memory in its PTX (the compile tier checks it).

Bytes and FLOPs at B=4, T=8192, H=16, K=V=128, C=64, float32 inputs (N = 524,288 token-heads; MiB moved to or
from global memory once; FLOPs as executed, 2 per FMA, per token-head)
--------------------------------------------------------------------------------------------------------

=========  ==========================================================  ==========================================
kernel     global memory                                               FLOPs per token-head
=========  ==========================================================  ==========================================
intra      read q, k, v 768 MiB; write u2 256 MiB (additive, output);  additive: Q K^T 2 C K x 10/16 (the sub-
           delta: also w, u, qp 768 MiB                                tiles on and below the diagonal) = 10 k,
                                                                       Aqk V ~ C V = 8.7 k; delta: + K K^T 10 k,
                                                                       W, U, Q', U'' ~35 k
state      read k, (q or w, qp), (v or u), u2: 1 GiB (1.25 GiB delta)  additive: [Q] S 2 K V = 33 k, update 33 k;
           once per value tile (2 tiles, the second read mostly from   delta: [W; Q'] S 66 k, update 33 k
           L2); write o 256 MiB
=========  ==========================================================  ==========================================

Summed: ~2.3 GiB and ~85 kFLOP per token-head (44 GFLOP) for the additive recurrences, ~3.3 GiB and ~154 kFLOP
(81 GFLOP) for the delta rule; the definition's count (``bench.counted_flops``) is 66-115 kFLOP. At the fp32
FMA peak (~67 TFLOP/s) that is 0.66 / 1.2 ms, at 4 TB/s 0.6 / 0.9 ms.

The fp32 FMA rate a GPU really sustains is measured by every bench run (``fp32_peak``, :mod:`linattn_numba.fma_peak`:
nothing but independent multiply-adds, checked against their closed form). On an H100, whose 132 SMs and 1.98 GHz
clock the H200 shares, it is 60.3 TFLOP/s, 90 % of the nominal 66.9; in the same process the overlapped split
schedule ran decay in 1.347 ms, ~44 GFLOP as executed: 33 TFLOP/s, 55 % of the measured rate (53 % by the
definition's count), and plain in 1.294 ms, fla ``chunk_simple_gla`` (TF32 tensor cores) taking 1.045 / 0.978 ms
there (``figures/data/probes/h100_r3_peak_bac96e8.json``). Where the rest of the FMA rate goes (the H100 profile at
2fa709f, below): a quarter of the instructions issued are not FMAs, and in 31 % of the schedulers' cycles no warp
is eligible (waiting on shared loads, at barriers, at the ticket). On the H200 the bench at 301876c measured the same
60.3 TFLOP/s (``figures/data/h200_r3_301876c.json``), and the README's table divides by it.

How the tiles were chosen
-------------------------
``tools/tune_r3.py`` times every (C, BV) candidate per recurrence at the standard shape on the H200, each kernel
alone too, after an oracle check on two heads; its JSON is the record. C = 64 beat C = 32 for every recurrence
(half the sequential steps of the state pass; the intra kernel's larger inverse costs less than that), and
BV = 64 (512 threads, one block per SM, 128 blocks) beat 32 (256 threads, 2 per SM) and 16: a wider value
tile halves the number of blocks that stage the same K, Q / W, Q' rows (a clear win for the delta rule, a tie
for the additive recurrences). C = 128 is not offered: the intra
kernel's shared memory would exceed an SM's 227 KB.

What limits each kernel, and what was done about it
--------------------------------------------------
``tools/h200.sh ncu_src`` samples every warp's stall reason at each SASS instruction (Nsight Compute's
SourceCounters) and ``tools/ncu_phases.py`` splits the samples at the block barriers, giving each phase's
share of a kernel's time. Shares in %, at B1 T8192 H16 K=V=128, before (d3650db) and after (a1325d3) item 6 and
the inverse's partial sums (``figures/data/probes/h200_ncu_phases_*.json``, from the ``h200_ncu_src_*`` files
beside them; the intra kernel's later changes, below, came after this profile):

=====================  ==========================================  ======  =====  ===================================
kernel                 phase                                       before  after  warps mostly waiting on
=====================  ==========================================  ======  =====  ===================================
state, decay           staging Q, K, V                             24.7    27.3   global loads
                       P1 Q S (and the sum of its parts, after)    44.5    34.9   the barrier: before, half the
                                                                                  threads had no tile
                       P2 the update                               28.4    35.0   FMA issue
state, gated delta     staging W, Q', U (and K, after)             16.5    26.5   global loads
                       P1 [W; Q'] S                                39.8    44.4   shared loads, FMA issue
                       K staged again over W                       20.1    --     global loads, the barrier
                       P2 the update                               21.8    27.5   FMA issue
intra, gated delta     staging K, Q; gates; scores                 25.2    28.7   FMA issue
                       inverse: diagonal blocks (64 threads)       15.6    15.4   the barrier (192 threads idle)
                       inverse: block rows                         20.0    12.2   shared loads, dependent FMAs
                       W, Q' (Q' reads Q again from global)        20.5    21.4   global loads, the barrier
                       staging V; U, U''                           18.5    22.1   the barrier (triangular work)
=====================  ==========================================  ======  =====  ===================================

Per kernel on the H200 (``tools/tune_r3.py``, standard shape, ms): the state kernel 3.01 -> 2.62 (delta) and
3.21 -> 2.78 (gated delta), the intra kernel 2.40 -> 2.01 and 2.50 -> 2.14
(``figures/data/probes/h200_r5_handoff_60be82d.json`` -> ``h200_tune_r3_cb88c76.json``). The additive split
first made decay slower (state 2.14 -> 2.37 ms: ptxas spilled 352 bytes with the extra registers); as an
if / else, with U'' read in the summing step, it does not spill. Then the intra kernel's scores skip the 6 of
16 sub-tiles that lie above the diagonal, Q' reads Q with 128-bit loads and one exponential per row, and K is
scaled by the threads the diagonal solve leaves idle. The whole forward, bench at 33dedac
(``figures/data/probes/h200_r3_33dedac.json``, the README's table) against d3650db: plain 2.69 -> 2.54, decay
2.89 -> 2.75, delta 5.42 -> 4.44, gated delta 5.72 -> 4.67 ms.

The staging's quarter of the decay state kernel was not memory latency: its samples sat on integer
instructions. In ``h200_ncu_src_a1325d3_1.csv.gz`` the staging phase executed about 85 M integer instructions
(IMAD, ISETP, LEA, SHF, SEL) for 1.6 M global loads -- the general loops' ``4 e // cols``, ``4 e % cols``, 4-D
addresses and predicated-off batch slots -- and the update's loop 31 instructions for 16 FMAs, each FMA group
waiting on its own 2 shared loads; the L2 prefetch loops were 450-520 SASS instructions each (a 64-bit division
by a runtime line count). Item 4's fixed-map stagers and item 7 (read without a GPU: ``tools/sass.py`` counts
the SASS per loop) took the decay state kernel from about 2.0 ms (the forward's 2.75 less its intra kernel's
0.75) to 1.51 ms and the gated delta one from 2.78 to 2.16 ms; the intra kernels, whose staging changed the
same way, now take 0.64 and 1.82 ms (0.75 and 2.14 at cb88c76, before 33dedac's intra changes;
``figures/data/probes/h200_tune_r3_585c771.json``). The whole forward (``figures/data/h200_r3_585c771.json``,
the README's table): plain 2.54 -> 2.01, decay 2.75 -> 2.15, delta 4.44 -> 3.80, gated delta 4.67 -> 3.98 ms.
Profiled again (``figures/data/probes/h200_ncu_phases_9ed137f.json``): the decay state kernel's staging is
15.8 % of its time, P1 42.6 % and P2 38.0 %; the gated delta state kernel's staging 11.9 %, P1 60.2 %.

What limited r3 after that (9ed137f): for the additive family the state pass's two products, one block of 512
threads per SM, waited on shared loads and on instruction issue (short_sb, not_selected). For the delta family the
intra kernel's inverse still has a serial phase on 2 of 8 warps, and its triangular products leave warps waiting
at the barriers (a warp's work grows with its rows). Evening that out was tried and measured slower: every thread
took 2 rows from each end of the triangle (rows 4 p, 4 p + 1 and 4 (C/4 - 1 - p) + 2, + 3: C + 4 columns each, 2 rows
a step), and Q' loaded Q's rows before its product. The forward took 3.855 / 4.025 ms (delta / gated delta) against
3.803 / 3.979 (``figures/data/probes/h200_ladder4_16def6c.json``, one session): 2-row steps issue more
instructions per FMA (50 per 32 against 84 per 64), and the barrier waits they remove were mostly covered by the
SM's second intra block. It was taken back.

Then the state pass was counted by its instructions. In the 9ed137f profile's executed-instruction counts
(``h200_ncu_src_9ed137f_1.csv.gz``) FFMA was 57 % of the 238 M warp instructions of the decay state kernel, and in
P1 and P2 a warp was issuing in about 18 % of the samples, 72 % of the 25 % that four warps per scheduler allow:
issue-bound, with the loops' counting, addresses and the prefetch loops sharing the issue slots with the FMAs.
The first guess, shared-memory wavefronts, was measured wrong: a warp of 2 x 16 tiles reads 256 bytes of the
right factor per load (12 wavefronts per 64 FMAs), and mapped 4 x 8 per warp (``_quad_map``, 8 wavefronts) the state
kernel took 1.504 / 2.175 ms (decay / gated delta) against 1.510 / 2.157
(``figures/data/probes/h200_tune_r3_quadmap_04aff22.json``). Fewer instructions did pay: 8 steps of the inner
dimension per loop step (``_mm_nn8``; the update 8 rows) and the prefetch by fixed maps (``_chunk_prefetcher``; a
fixed map first spilled 72 bytes: its per-thread address parts never change, so the compiler kept them out of
the chunk loop, and a map that turns a warp per chunk keeps them in it) took the state kernel to 1.392 / 2.023
ms (``h200_tune_r3_state8_04aff22.json``), and ``_mm_nn8`` in the intra kernel's triangular products (the inner
dimension rounded up to 8: the rows past the diagonal are zero, and a warp's 2 tile rows already ran to the
longer one's length) took that to 0.639 / 1.783 ms (0.639 / 1.822; ``h200_tune_r3_67a8c79.json``). The whole
forward (``figures/data/probes/h200_r3_67a8c79.json``): plain 2.01 -> 1.87, decay 2.15 -> 2.03, delta
3.80 -> 3.64, gated delta 3.98 -> 3.81 ms. BV = 32 still loses (gated delta state kernel 2.595 ms,
``h200_tune_r3_bv32_64de0f5.json``).

Then the delta family's intra kernel (1.78 ms, half the gated delta forward), read in its SASS with the 9ed137f
profile beside it: its inverse was a quarter of its samples, and the block-row loops had executed 41.7 M warp
instructions for 2.6 M FFMA. Every scalar shared load ``sm[i]`` carried a negative-index check and 64-bit index
arithmetic, and each element recomputed its (block, row, column). With ``ld1`` from per-thread base pointers and
each thread keeping its (row, column) for every block of a block row, the loops unroll with immediate offsets:
the intra kernel took 1.756 -> 1.601 ms (gated delta) and 1.655 -> 1.538 (delta)
(``figures/data/probes/h200_tune_r3_inverse_ab_*_9059b13.json``, one process per variant, same session). Q'
loading its Q tile before the product, measured alone this time, saved 20 us (1.777 -> 1.757 ms,
``h200_tune_r3_qpre_ab_*_9059b13.json``); an L2 prefetch of the chunk's V at the kernel's start, tried beside it,
made the intra kernel slower (gated delta 1.798 ms, decay 0.645 against 0.634) and was not kept. The whole forward
(``figures/data/h200_r3_a757612.json``, the README's table): delta 3.64 -> 3.46, gated delta 3.81 -> 3.62 ms;
plain and decay unchanged (1.87, 2.02).

What limited r3 before the split schedule (below): the decay state kernel did its 34.6 GFLOP (66 kFLOP per
token-head, as executed) in 1.39 ms, 25 TFLOP/s, 37 % of the FMA peak; one block of 16 warps per SM (128 blocks at
this shape: one wave) must issue every instruction, and besides the FMAs it issues the staging, the output stores
and the summing step (43 % of the instructions were not FMAs at 9ed137f; the loops' share of that is halved, the
rest is not). The split schedule takes P1 out of that walk, and its two kernels overlap their staging with their
products by ``cp.async`` (section below; numba-cuda has no ``cp.async``, inline PTX does). The fused schedule's
kernels still stage, wait at a barrier, multiply. The intra kernel of the delta family (1.60 ms at a757612)
is the other half: its scores (a fifth of it at 9ed137f), the inverse's serial diagonal phase on 2 of 8 warps,
and its barriers.

The split schedule (the additive family's default: :data:`SCHEDULE`)
---------------------------------------------------------------------
For plain and decay attention nothing later depends on P1 (``Q S``, the output's inter-chunk part), yet the fused
schedule computes it inside the sequential walk: one block of 512 threads per SM (128 blocks at the standard
shape) issues both products. ``schedule="split"`` takes it out, as fla's chunk kernels do (and r6 on the tensor
cores), at the price of a buffer of every chunk's starting state::

    gates   grid (NT, H / 32, B), 64        bcum = in-chunk cumulative log-gates (decay only; :func:`_gates_kernel`:
            threads                         a chunk of 32 heads a block, loaded and stored coalesced through shared
                                            memory; it also zeroes the overlapped launch's counts)
    state   grid (V / BV, B H), 256         per chunk: hs[c] = S (4 128-bit stores a thread), then
            threads (:func:`_split_state_   S <- gamma_C S + K^T diag(gamma_C / gamma) V (P2 only; BV = 64 in
            kernel`)                        8 x 4 tiles, :func:`split_tile`: two blocks per SM, 128 blocks);
                                            chunk c + 1 copied meanwhile
    out     grid (NT, B H), 256 threads     O = scale (diag(gamma) Q hs[c] + Aqk V), every chunk at once
            (:func:`_out_kernel`)           (fla's chunk_fwd_o): K and Q copied, the scores (:func:`_out_scores`)
                                            while S_c's first slab arrives, then slabs of S_c and of V through
                                            three buffers: acc = Q S_c, acc *= gamma_t, acc += Aqk V (up to the
                                            diagonal), one 4 x 8 tile a thread

Bytes at the standard shape: ``hs`` is B H NT K' V floats, 512 MiB written once and read once, where the fused
schedule writes and reads U'' (256 MiB).

First version (b9584ee), measured on the H200 at B4 T8192 H16 K=V=128
(``figures/data/probes/h200_tune_r3_split_9f779f1.json``, one run, oracle-checked): decay fused 2.018 ms (intra
0.637 + state 1.381) against split 1.928 ms (gates 0.024 + state 0.717 + out 1.168); plain 1.869 against 1.762 ms
(state 0.670 + out 1.092). Its output kernel staged by loads into registers, one 4 x 4 tile a thread per pass of
64 value columns, and its state kernel was the fused schedule's, in state-only mode with ``store`` (still there:
``STATE_KERNEL = "general"``). Nsight Compute (``figures/data/probes/h200_ncu_r3_split_e08b4b4.csv``): the output
kernel issued in 56.6 % of its schedulers' cycles, with 16 warps per SM mostly waiting on shared loads (short
scoreboard) and on each other; nothing hid the staging.

Copies overlapped with the products (``cp.async``). Both kernels now stage by 16-byte asynchronous copies
(:func:`_rows_copier`, :func:`linattn_numba.vec.cp_async16_at`) issued a stage ahead, with commit groups and
``cp.async.wait_group 1`` (:mod:`linattn_numba.vec`) before the barrier that publishes a stage:

* output kernel: after the scores, K's space holds two slab buffers and a third sits beside it; slab j + 1 and
  j + 2 are in flight while slab j is multiplied (slabs of SR = 32 rows x 2 C columns: 16 KB, so the block keeps
  101.6 KB and two blocks per SM). Its accumulator tile became 4 x 8 (12 loads of 16 bytes per 128 FMAs, where
  4 x 4 needed 16), with rows and columns mapped so that each of a warp's loads is one wavefront, and the scores'
  warp map likewise (:func:`_quad_map`: 4 x 8 threads per warp); the scores issue 8 steps of d per loop step.
  Per-instruction samples (``figures/data/probes/h200_ncu_src_r3_pipe1_out.csv.gz``, the first version with copies)
  had shown where the rest went: the copies by 4-D index cost ~45 instructions each in 64-bit address arithmetic
  (now a per-thread element offset stepped by the row stride: :func:`linattn_numba.vec.cp_async16_at`), and the
  scores, 16 % of the instructions, held 24 % of the stall samples. One block at C = 64, K' = V = 128 (slabs
  S0..S3 of S_c's rows, V0, V1 of the chunk's values; | a ``wait_group`` and a barrier; each column's copies are
  issued right after the barrier that opens it and land while that column and the next compute)::

      math     -      | scores | Q S0   | Q S1 | Q S2 | Q S3, x gamma | Aqk V0 | Aqk V1, store
      copies   K,Q S0 |        | S1  S2 | S3   | V0   | V1            |        |
      into     K,Q X0 |        | X1  X2 | X0   | X1   | X2            |        |

* state kernel (:func:`_split_state_kernel`): two chunk buffers; chunk c + 1's K rows and value tile are copied
  while chunk c's product runs; each thread scales the value rows it copied by gamma_C / gamma_t once they land,
  from gates it loaded a chunk ahead. The general kernel's staging had been 18.5 % of its instructions and 32.5 %
  of its stall samples (waiting on global loads).

Measured on the H200 at the standard shape (oracle-checked; the A/B runs
``figures/data/probes/h200_tune_r3_pipe_*.json`` and their rows in ``probes/README.md``): the output kernel
1.17 -> 0.99 ms (decay) and 1.09 -> 0.93 ms (plain) against the kernel before in the same runs; at 13250cf
(``probes/h200_tune_r3_pipe_13250cf.json``) the pipelined state kernel 0.632 ms against the general one's 0.717
(decay), 0.581 against 0.670 (plain), the forward 1.669 / 1.507 ms (decay / plain; 1.928 / 1.762 before). The
bench beside fla at 13250cf: ``figures/data/probes/h200_r3_pipe_13250cf.json``. Registers (``tools/sass.py``,
sm_90): out 127, state 117 / 121 (plain / decay), no spills. Shared memory: out 101.6 KB, state 86 KB; two
blocks per SM each. What limits them now: instruction issue around the FMAs, the copies being off the critical
path. The first pipelined output kernel
issued in ~72 % of its cycles with 45 % of its instructions not FMAs (the profile above). In the SASS of the
landed kernels (``tools/sass.py``, sm_90) the inner loops are 128 FFMA in 157 instructions (Q S_c; the state
update), 128 in 162 (Aqk V) and 80 in 109 (the scores), and the state kernel spends ~465 instructions per chunk
and warp outside its product loop (issuing copies, storing S_c, the gates) against 8 x 157 in it. Both run at
about 41 % of the FMA peak (out ~27.9 GFLOP as executed in 0.996 ms, state 17.2 GFLOP in 0.632 ms, decay).

Fewer instructions around the FMAs (d4b4426, bf141f5). Per-instruction counts of those kernels
(``figures/data/probes/h200_ncu_src_r3_8f9bf2e_{state,out}.csv.gz``): the state kernel issued 222.6 instructions
per warp and chunk for its 10 copies and 148.4 for storing S_c and the gates, against 1,024 FFMA; the output kernel
28-40 per copy; both issued in ~0.7 of their schedulers' cycles. Now:

* ``cp.async`` takes the shared array's 32-bit address, cast to the shared space in the IR
  (:mod:`linattn_numba.vec`): the constant part of a copy's shared offset becomes the instruction's immediate;
* :func:`_rows_copier` copies a whole tile (every row before ``n``, every column before ``lim``: all chunks but a
  sequence's last) with no test per copy: 3 instructions around each ``LDGSTS`` in the SASS;
* the product loops are written out two or four steps per loop step (:func:`_mm_4x8_step`, :func:`_p2_rows8`,
  :func:`_scores_step8`), so each load's address is a base register plus a constant: 583 instructions per 512 FFMA
  for Q S_c (4 x 157 before), 311 per 256 for the state update (2 x 167);
* the output kernel's log-gates arrive by ``cp.async`` with K's and Q's rows (a load into registers before).

H200, one session (``probes/h200_tune_r3_base_8f9bf2e.json``, ``..._unroll_d4b4426.json``,
``..._gates_bf141f5.json``): decay 1.669 -> 1.574 -> 1.566 ms (state 0.632 -> 0.601 -> 0.597, out 0.995 -> 0.929 ->
0.919), plain 1.507 -> 1.453 -> 1.453 (the bench beside fla: ``figures/data/probes/h200_r3_bf141f5.json``).

Then the output kernel's bookkeeping (c1b6e3c). Its SASS per warp and chunk (``tools/sass.py``, loop bodies times
their trips) was ~11,000 instructions for ~6,700 FFMA: ~200 a slab outside the products (6 slabs), mostly the
64-bit multiply-high sequences of ``j // NSP`` and ``j % 3`` that located slab j, and ~540 in the scores' epilogue,
where each of a thread's 16 entries tested s <= t and branched around its exponential although only the 4 on the
diagonal sub-tiles can go either way. Now the slab, its pass and its buffer are counters stepped once a slab, and
the epilogue is written per sub-tile (the same ``_scores`` serves the intra kernel: 5,952 -> 5,664 SASS instructions
for the gated delta rule's). About 800 instructions fewer a warp and chunk. H200, one session, against 780812a
(``probes/h200_tune_r3_{base_780812a,new_c1b6e3c}.json``, ``..._gdn_...``): decay 1.559 -> 1.535 ms (out 0.913 ->
0.890, state 0.597 -> 0.600), plain 1.440 -> 1.426 (out 0.870 -> 0.855), gated delta 3.632 -> 3.607 (intra 1.608 ->
1.583). The bench beside fla is the README's table (``figures/data/h200_r3_c1b6e3c.json``).

Then the state kernel's tiling (d88055a, :func:`split_tile`). Every block of the state kernel copies all of K's rows
of its chunk: with 32-column value tiles a head's K is copied four times, and a thread's 4 x 4 tile does 1,024
multiply-adds a chunk for its copies, its S_c stores and two barriers. A 64-column tile in 8 x 4 tiles per thread
(:func:`_p2_rows4_tall`: 12 shared loads per 128 FMAs instead of 16; still 256 threads and two blocks per SM; by
``tools/sass.py``, sm_90: 126 registers and no spills for r4's variant writing lg, 128 and 40 spilled bytes with h0
and ht) copies K half as often and does twice the work per thread between barriers. H200, one device
call each (``figures/data/probes/h200_tune_r3_split_rows_1e301a6.json``, standard shape, decay): state kernel
0.598 -> 0.560 ms (0.582 with 8 x 4 tiles of 32 columns; 0.637 with 64 columns in 4 x 4 tiles, 512 threads), r3's
forward 1.535 -> 1.491 ms; r6's forward, whose state walk is this kernel, 1.325 -> 1.284 (state 0.560, out 0.674;
``probes/h200_tune_r6_pipe_3aed3d0.json``); r4 at B1 T1048576 H2, where phase 1 is this kernel on 512 blocks,
5.556 -> 5.052 ms (``probes/h200_r4_split_rows_1e301a6.json``). With few walkers the 64-column tile halves the
blocks (B1 H2: 4): r3's own forward at B1 T1048576 H2 took 73.7 ms against 48.3
(``figures/data/probes/h200_long_decay_3aed3d0.json``, measured while 64 columns were the default everywhere), so
:func:`split_tile` takes 64 columns in 8 x 4 tiles only where B H ceil(V / 64) >= :data:`SPLIT_WIDE_BLOCKS` (96:
the standard shape's 128, r4's segments), else the 32 columns in 4 x 4 tiles measured before. Where between 4 and
128 walkers-times-tiles the threshold belongs, the H200 at T = 32768, H16, decay, state kernel per tiling
(``figures/data/probes/h200_tune_r3_split_rule_5d63b60.json``):

=========  ============  ============  ============  ============
B          4x4 / 32      8x4 / 32      4x4 / 64      8x4 / 64
=========  ============  ============  ============  ============
1 (32)     **1.404**     1.651         2.507         2.200
2 (64)     **1.410**     1.789         2.514         2.205
=========  ============  ============  ============  ============

(B H ceil(V / 64) in brackets; ms.) At 64 the 4 x 4 kernel with twice the blocks is still 1.56x faster, at 128
(the standard shape) 8 x 4 wins (0.560 against 0.598), so 96 sits between the two measured points. With the rule,
at 5d63b60 (``figures/data/probes/h200_r6_pipe_5d63b60.json``, one process beside fla): r3 decay 1.490 ms, plain
1.385, against fla ``chunk_simple_gla`` 0.878 / 0.814 (1.70x / 1.70x); at B1 T1048576 H2 r3 takes 48.29 ms
(``figures/data/h200_long_decay_5d63b60.json``).

The walk and the output in one launch (:data:`OVERLAP`, :func:`_overlap_kernel`, since b02343f). At the standard
shape the walk is 128 blocks of 256 threads, one per SM, for its 0.56 ms, and the SM has room for a second block
(two per SM fit: 2 x 101.6 KB of shared memory, 128 registers a thread) that stays empty until the output kernel
starts. One grid now holds both: ``nwalk`` walker blocks and every chunk's output block, each chunk's as soon as
the walk has stored S_c. Who does what comes from a ticket (an atomic counter that a block reads when it starts),
not from the block index, so every walker is running before any output block can wait for it: no deadlock
whatever order the hardware starts blocks in. Walkers count, per chunk, the value tiles of S_c stored (since
288562f one ``red.release.gpu`` by thread 0, a chunk late; every thread's ``threadfence`` then an atomic add before,
below); an output block's thread 0 reads its chunk's count by ``ld.acquire.gpu`` (``nanosleep`` between looks)
before the block copies S_c. The output is the same bit for bit. It runs where the two kernels' blocks are the same
size (256 threads: C = 64, K' = 128, in either tiling) and without the deferred start state (r4's output waits for
its scan). ``tools/sass.py`` (sm_90): 128 registers; 56 bytes spilled for decay (52 since 288562f; the 8 x 4 walk
with its counts; none for plain, nor in the 4 x 4 tiling).

H200 at B4 T8192 H16 K=V=128, per kernel, oracle-checked (``figures/data/probes/h200_tune_r3_overlap_b02343f.json``,
``h200_tune_r3_overlap_plain_f0ac321.json``):

=========  ===============================  ===============  ==================  ===================
           two launches: state + out (ms)   one launch (ms)  forward, two (ms)   forward, one (ms)
=========  ===============================  ===============  ==================  ===================
decay      0.560 + 0.887 = 1.447            1.399            1.492               1.444
plain      0.527 + 0.860 = 1.387            1.336            1.388               1.334
=========  ===============================  ===============  ==================  ===================

3-4 %, where the output's work run entirely beside the walk would have saved up to its 0.56 ms. Both roles are
bound by instruction issue (the profiles above: each kernel issued in ~0.7 of its schedulers' cycles alone), so a
co-resident output block mostly takes issue slots from the walk, the critical path, rather than filling idle ones;
what is gained is the walk's idle ~30 %. (Not profiled with the two roles together: how much slower the walk runs
beside them is inferred, not measured.) r6's output kernel, on the tensor cores, was slower this way (r6's
``OVERLAP``, off). The bench beside fla (``figures/data/h200_r6_pipe_f0ac321.json``, the README's rows): r3 plain
1.335 / decay 1.446 ms against fla 0.814 / 0.878 (1.64x / 1.65x). compute-sanitizer (memcheck, racecheck,
synccheck) on both tilings: nothing reported (``figures/data/h200_sanitize_par_f0ac321.txt``).

The gates kernel, with the decay forward at 1.446 ms, took 0.023 ms of it, plus the gap before the next launch
(forward 1.445 against 1.399 for the overlapped launch with its counts' reset, ``probes/h200_tune_r3_gates_base_*``).
A thread per (head, chunk) summed its chunk's 64 gates in order, storing each b_t before loading the next gate: the
compiler cannot tell that ``bcum`` and ``g`` do not overlap, so every load waited for the previous one. Three
changes were measured on the H200 (decay, standard shape, per kernel, oracle-checked; the first two each in one
device call with e4f8e6c, which took 1.445 ms both times, the third in a later call;
``probes/h200_tune_r3_gates_{base,head}_{ee4fcbd,c124ab8}.json``, ``..._head_cbd63da.json``, the logs
``probes/h200_gates_*.log``):

==========================================================  ==============================  ============
where b is computed                                         overlapped launch (ms)          forward (ms)
==========================================================  ==============================  ============
e4f8e6c: the gates kernel, one load per sum                 1.399, and the gates 0.023      1.445
ee4fcbd: in each walk and output block, per chunk           1.434                           1.433
c124ab8: in the walk's first step, every chunk              1.428                           1.426
cbd63da: the gates kernel, 32 loads in flight (landed)      1.424, the gates kernel in it   1.422
==========================================================  ==============================  ============

Computed inside the overlapped launch, b cost more than the launch it saved: per chunk, lane 0's 64 dependent
adds sit on the walk's critical path once a chunk; computed in the walk's first step, the output blocks must
copy b after waiting for their chunk's count instead of with K's and Q's rows. The landed form keeps both kernels
as they were and makes the gates kernel cheap: it loads 32 gates before summing them (the same sums in the same
order: the same bits) and, for the overlapped launch, also zeroes the counts, so the launch count is unchanged.
Plain attention is unaffected (1.335 ms). The bench beside fla (``figures/data/h200_r3_cbd63da.json``, the README's
rows): decay 1.420 ms against fla ``chunk_simple_gla`` 0.878 (1.62x), plain 1.339 against 0.812.

Then the two roles' hand-off, profiled together for the first time (``h200.sh``-style ncu run at 66c6c33, standard
shape, decay: ``figures/data/probes/h200_ncu_r3_overlap_66c6c33.csv`` and the per-instruction
``h200_ncu_src_r3_overlap_66c6c33_{1,3}.csv.gz``, 1 decay, 3 plain). The overlapped launch issued 1,002 M warp
instructions (70 % FFMA) in 68.6 % of its schedulers' cycles. The walk's warps held 34 % of the stall samples, so
beside the output blocks the walk lasts about 1 ms of the 1.41 (0.56 alone): it is the critical path until it ends,
and within it the part between a chunk's barriers that copies, stores S_c and scales V took 17.6 % of all samples,
more than its product (16.4 %). There every thread's ``threadfence`` (``fence.sc.gpu``: ``MEMBAR.SC``, then an L1
invalidation) cost 1.7 % of all samples, a chunk of every walker's time each chunk. On the output side, the barrier
after the count's wait held 3.1 %: thread 0 read the count by an atomic, then fenced, while the other warps waited,
before slab 0 could be asked for. Changed (288562f):

* the walk signals by one ``red.release.gpu`` from thread 0 (:func:`linattn_numba.vec.red_release_add`) at the top
  of the next chunk, behind the barrier that follows every thread's stores (CUTLASS's barriers arrive this way):
  no thread but one fences, and that one only releases (``MEMBAR.ALL.GPU``, no L1 invalidation);
* an output block's thread 0 polls by ``ld.acquire.gpu`` (:func:`linattn_numba.vec.ld_acquire`) while K's and Q's
  rows are in flight, and the barrier that publishes those rows also hands over what it saw: one barrier fewer
  and the count's round trip under the copies'; slab 0 is asked for after that barrier (it still lands during the
  scores);
* the exponentials of the scores, the gate and the walk's factors are ``ex2.approx.ftz`` of x log2 e
  (:func:`linattn_numba.vec.exp_approx`: 2 instructions, not libdevice's 9; relative error below 1e-6 for |x| <= 8,
  ``tests/test_gpu.py::test_exp_approx_accuracy``). Every exponent is still <= 0.

H200, standard shape, per kernel (``tools/tune_r3.py``, oracle-checked; one device call for the first three rows,
the base measured first and last; another for the landed tree beside a persistent variant;
``figures/data/probes/h200_tune_r3_sync_*.json``, ``h200_tune_r3_persist_*.json``):

==============================================================  ==============  ==============
tree                                                            decay (ms)      plain (ms)
==============================================================  ==============  ==============
66c6c33 (before)                                                1.417 / 1.416   1.334 / 1.334
the release / acquire hand-off                                  1.394           1.322
and ``exp_approx`` (288562f, landed)                            1.376 / 1.373   1.324 / 1.321
and output blocks that stay (a loop over tickets, each block's  1.441           1.358
next ticket taken during its chunk; 260 bytes spilled)
==============================================================  ==============  ==============

Relative error against the oracle: decay 5.7e-7 (5.1e-7 with libdevice's ``expf``), plain 3.3e-6 (the same bits).
The persistent output blocks (a block takes chunks until none is left, launched two per SM, its next ticket taken
while it computes, which hid the 1.2 % of samples spent at the ticket's barrier) were slower: the loop around the
output's body kept more values live and ptxas spilled 260 bytes (52 before), so they were not kept.
The bench beside fla (``figures/data/h200_r3_ecb786c.json``, the README's rows): decay 1.373 ms against fla
``chunk_simple_gla`` 0.880 (1.56x; it was 1.62x), plain 1.322 against 0.812 (1.63x). The walk's critical path is
what these changes shortened; the overlapped launch still issues in under 70 % of its cycles.

Then the instructions around the walk's product and at an output block's start. Read from the SASS (``tools/sass.py
shared "overlap[decay" --threads 256 --min-blocks 2``, sm_90), the walk's path through a whole chunk from the loop's
top to its first barrier took about 400 instructions a warp: it rebuilt in 64-bit arithmetic the copies' sources
(the row base from b, h and t0, and the tests for a whole tile), S_c's store addresses from a 3-D index each, and
the gates' indices clamped to the chunk (``min(t, n - 1)``), with a branch per row around each exponential; 52 bytes
were spilled and reloaded in the loop; and b_last went to a uniform register right after its load (``R2UR``, which
waits for the load: 1.2 % of all stall samples in the 66c6c33 profile). Now the walk keeps the copies' sources,
S_c's row in ``hs`` and the gates' row in ``bcum`` as element offsets stepped once a chunk (:func:`_rows_copier_at`,
:func:`linattn_numba.vec.st4_at`, :func:`linattn_numba.vec.ld1_at`; ``bcum``'s rows are whole chunks long, so the
gates are read past n with no clamp), computes every row's factor and selects 0 past n, and b_last stays in a vector
register: about 310 instructions on that path, nothing spilled. An output block's chunk and head come from thread 0,
which divides by B H and H once and leaves the results beside the ticket in shared memory (every warp divided
before: about 100 instructions a warp), and strides are shifted rather than divided by 4 (a signed 64-bit division:
4 instructions each). The overlapped launch: 5,104 / 4,792 SASS instructions for decay / plain (5,280 / 4,768
before; the walk's copies now have both paths compiled in), 128 / 127 registers, 0 bytes spilled (52 / 0 before).
The kept offsets cost registers where the walk runs alone with more to hold: the split state kernel with h0 and ht
spills 68 bytes (40 before), the one that r6's split schedule runs at the standard shape (ht, 8 x 4 tiles of 64
columns) 48 (none before) and r4's phase 1 (with ``lg``) 60 (none before). Where they are read matters more than how
many: in the SASS of the last two, every reload inside the chunk loop is on the path of a sequence's last chunk (the
copies with per-row tests: 1 and 4 loads, once a walk); the others are stored before the loop and read after it (the
final state's indices). The results are the same bits (the simulator, both trees: every output and final state of
the overlap tests' shapes equal). Timed on the H200 against the tree before (base / head / base / head in one device
call, ``figures/data/probes/h200_tune_r3_walk_*_1da7285.json``): decay 1.374 / 1.374 ms before, 1.374 / 1.378 after,
no gain; plain 1.321 / 1.322 before, 1.317 / 1.318 after. About 3 % fewer instructions on the walk's critical path
bought nothing for decay: that section's stall samples (17.6 % of all in the 66c6c33 profile,
``tools/ncu_phases.py``) were mostly waits, not issues: for a slot that another warp of the SM took (30 % of them),
at the barrier (13 %), on global loads (11 %); and the output blocks beside the walk issue about 60 % of the
launch's instructions. Kept for the same bits in fewer instructions, and plain's 0.3 %.

Then the output blocks' scores (:func:`_out_scores`). In the 66c6c33 profile they held 20.7 % of the overlapped
launch's stall samples for 13 % of its instructions (``tools/ncu_phases.py``), waiting on shared loads (short
scoreboard, MIO): :func:`_scores`' 4 x 4 tile a thread reads 8 float4 per 4 values of d for the 40 FMAs of its 10
sub-tiles on or below the diagonal, 5 FMAs a load. Two blocks per SM leave no registers or shared memory to give each
thread more entries, but each half of the block can take half of d: a 4 x 8 tile a thread (rows tr + C/4 i, columns
tc + C/8 j, 20 of 32 entries on or below the diagonal) reads 12 float4 per 80 FMAs. The halves trade their partial
sums through Aqk itself (one barrier more; each thread then finishes 10 entries, with their exponentials) and
:func:`linattn_numba.vec.st1` stores them without Numba's negative-index test. In the SASS (``tools/sass.py``, sm_90)
a thread's scores loop runs 8 x 197 instructions with 192 shared loads, where it ran 8 x 205 with 256, and the
epilogue is about half as long; the overlapped launch keeps 128 registers and spills nothing. The sum over d is now
two halves added: not the same bits, closer to the oracle. H200 at B4 T8192 H16 K=V=128, per kernel, base / head /
base / head in one device call (``figures/data/probes/h200_tune_r3_scores_*_edce086.json``, base 46dd6cc): decay
1.374 / 1.342 / 1.374 / 1.341 ms, plain 1.317 / 1.290 / 1.317 / 1.290 (-2.3 % and -2.1 %); relative error
against the oracle 5.7e-7 -> 4.6e-7 (decay), 3.3e-6 (plain). At the GPU tier's shapes and the sanitizer's (T = 1,
T = 777 and 300, K = 64 and 100, V = 40 to 128) r3's decay and plain output and final state match the oracle
within 1.4e-6 (``probes/h200_oracle_shared_additive_edce086.txt``).

Then the blocks' roles, tried and not kept. An H100 profile of the overlapped launch at 2fa709f (standard shape;
``figures/data/probes/h100_ncu_src_r3_overlap_2fa709f_{1,3}.csv.gz``, decay and plain, the sections in
``h100_ncu_r3_overlap_2fa709f.csv``): 956 / 926 M warp instructions, 74 / 76 % of them FFMA, no eligible warp in
31.5 / 30.9 % of the schedulers' cycles; the walk's warps held 33.6 % of the decay launch's stall samples, and the
barrier after the ticket 3.3 % (plain too): an output block's 8 warps idle at its start while thread 0 took the
ticket and divided. The change (be4cd4c, reverted by the commit after c354713): roles by block index on a grid
(H, B, value tiles + chunks), so that an output block knows its chunk without an atomic, a division or a barrier;
deadlock-free by claims (each walker claimed once, by compare-and-swap, by its own block or by an output block that
would otherwise wait while some walker is unclaimed, which then walks it and leaves its chunk in the claim for the
walker's block). It passed the simulator's tests (blocks last to first: output blocks claimed every walker) and the
tuner's oracle check on the GPU, and was slower: on an H100, base then head in one device call
(``h100_tune_r3_claims_{base1,head1}_c354713.json``), the overlapped launch took 1.350 -> 1.422 ms (decay) and
1.295 -> 1.359 (plain), p10-p90 ranges apart; ptxas spilled 44 bytes (chunk and head, now from the block index,
kept through the output). Why it lost was not measured (the session's device time ran out). One guess: with roles
by index the walkers are the first blocks the hardware places, maybe two to an SM, where tickets follow the order
blocks start in; ``tools/placement_probe.py`` counts the SMs that would hold two walkers under either order.

Where the walkers land. The probe, run on an H100 at 7e0e0e6 with the launch's shape and shared memory
(``figures/data/probes/h100_placement_{1d,3d}_7e0e0e6.json``: a grid of 8,320 blocks, and the claims' (16, 4, 130)),
found the guess backwards. By index the first 128 blocks land on 120 SMs, 8 of them with two (the hardware deals
blocks to SMs a pair of SMs at a time, mostly one block to an SM); by ticket the walkers land on 86-87 SMs, 41-42 of
them with two: the first 128 blocks to reach the atomic are any of the first wave's 264, about as a random draw
would pick them. So the tickets' launch runs about two thirds of its walkers two to an SM, and the claims' nearly
every walker beside an output block. The next guess was the pairing: an output block (FFMA-bound) might take more of
an SM's issue slots from a walker than another walker does (the walk between its products is mostly waits). A
placement that put the walkers two to an SM on purpose, on the first ceil(nwalk/2) SMs by ``%smid`` (with
hand-backs, so that no block waits for a walker that nobody runs: 61773b4 to 1acf97e, removed after), was timed on
the H200 at 1acf97e, ticket / pairs / ticket / pairs in one process (``figures/data/probes/
h200_tune_r3_place_1acf97e.json``): decay 1.339 / 1.425 / 1.338 / 1.426 ms, plain 1.293 / 1.353 / 1.292 / 1.354.
Pairs were 5-6 % slower, about what the claims lost on the H100. Tickets, which mix the two pairings, beat both:
walkers all two to an SM and walkers all beside an output block each lose about 5 %. Two guesses fit that, and
neither was measured: two walkers on one SM wait on the same memory and L1 during the stalls that make up most of a
walk, and the placement itself cost a second atomic per block and 28 spilled bytes (ptxas, sm_90). Tickets stay.

Then the gates kernel, which runs before the overlapped launch for decay: 19.4 us of GPU time in the 2fa709f
profile, 1.4 % of the forward, because each thread summed one (head, chunk) and every warp-wide load and store touched
32 sectors. :func:`_gates_kernel` now takes a chunk of 32 heads a block, loads and stores coalesced through shared
memory, the sums unchanged (the same bits). On an H100 (``tools/gates_probe.py``, old and new in one process): alone
19.0 -> 9.3 us, the decay forward 1.346 -> 1.339 ms; its loads by one stepped offset another 2.6-2.8 us of the
forward (5091b26); plain has no gates kernel. On the H200, in separate sessions, the decay forward took 1.336 ms at
1acf97e (``figures/data/h200_r3_decay_1acf97e.json``) and 1.333 ms with these kernels (the bench at 301876c, whose
r3 is 460ef53's: ``figures/data/h200_r3_301876c.json``, fla ``chunk_simple_gla`` 0.884 and 0.881 ms there).

The chunk size under the split schedule. C = 64 was chosen under the fused schedule (above). Under the split
schedule C = 32 was first timed at 9e5a43e, on an H100 (``figures/data/probes/h100_tune_r3_c32_9e5a43e.json``:
``tools/tune_r3.py --schedule split --bv 64``, one process, oracle-checked). Plain took 1.296 ms at C = 64 (the
overlapped launch) against 1.364 at C = 32 (walk 0.624 + output 0.740, two launches: a C = 32 output block has 64
threads and the walk's 256, so they cannot share a launch); decay 1.338 against 1.398 (0.636 + 0.753 + gates 0.006).
C = 64 stays. The output kernel is where C = 32 gains: its intra-chunk products grow with C (scores and Aqk V, about
C (K + V) / 2 FMAs per token, against K V for Q S_c), so it does about 1.41 M FMAs per 64 rows against 1.70 M
(counted from the loops' bounds). The walk does the same FMAs at either C but pays its copies, barriers and S_c
stores once per chunk, twice as often at C = 32.

C = 32's output at C = 64's walk, tried and not kept (branch ``halves``, cec5a13). The walk also stored each chunk's
mid state S_c+1/2 (for decay, S scaled by gamma once per half, so every exponent stays <= 0). An output block's two
32-row halves each started from their own state, with Aqk kept to its two 32 x 32 diagonal blocks. That kept the
256-thread blocks the overlap needs and cut an output block's FMAs from 1.70 M to about 1.44 M (the scores' and
Aqk V's cross block). The price: hs twice the bytes (1 GiB written and read at the standard shape), and state slabs
of 16 rows of each state, so 10 slab steps and barriers per block instead of 6, each with half the FMAs. It passed
the simulator's split and overlap tests and the tuner's oracle check, with ptxas at 128 registers and no spills.
It was slower on an H100 (``figures/data/probes/h100_tune_r3_halves_cec5a13.json``, off / on / off / on in one
process): plain 1.291 / 1.430 / 1.291 / 1.431 ms, 11 % slower. Decay was cut off by the call's time limit. The
split between the doubled state traffic and the extra slab steps was not measured.

The output kernel's triangle and map (:data:`OUT_TRI`, default ``"sbe"``; :func:`_out_tri` says what each letter
does). ``s``: the scores' warps whose rows all lie above sub-tile 2 i + 1 skip it (:func:`_out_scores`: 10 % of the
scores' FMAs, on half their warps). ``b``: the products' map of 2 x 16 tiles a warp (8-row bands) instead of 4 x 8;
each load of the right factor then takes two wavefronts. ``e``: the products' FMAs with the inner step outermost
(:func:`_mm_4x8_stepper`: every sum in the same order, another schedule from ptxas). ``8``, not in the default: with
``b``, Aqk V in steps of 8, so an 8-row band stops at its own end (32,768 FMAs fewer a block; in steps of 16 it runs
to the end of a 16-row band, the same FMAs as 4 x 8). Every letter gives the same bits (the skipped terms are
products with Aqk's zeros above the diagonal; ``tests/test_r3_shared.py::test_out_tri``, and the tuner's oracle
check on the GPU). ``tools/sass.py`` (sm_90): 128 registers and no spills with ``sbe`` and ``sbe8`` (plain, decay);
Aqk V in steps of 8 as a tail after steps of 16 spilled 116 bytes and was not measured. Timed at the standard shape,
oracle-checked, variants alternating in one process (``tools/tune_r3.py --vary r3_shared.OUT_TRI=...``; the files
``figures/data/probes/h200_tune_r3_tri*_301876c.json``, ``h100_tune_r3_tri8*_16afdd3.json``), ms:

=================  ==========  ==================  ===============================================
GPU, tree          recurrence  none                with letters
=================  ==========  ==================  ===============================================
H200, 301876c      plain       1.2892 / 1.2895     sbe 1.2783 / 1.2784 (-0.85 %)
H200, 301876c      decay       1.3335 / 1.3324     sbe 1.3215 / 1.3231 (-0.8 %)
H200, 301876c      plain       1.2905              s 1.2836, b 1.2911, e 1.2894 (another call)
H100, 16afdd3      plain       1.2963 / 1.2953     sbe8 1.2896 / 1.2903, s 1.2902
H100, 16afdd3      decay       1.3368 / 1.3379     sbe8 1.3309 / 1.3313
=================  ==========  ==================  ===============================================

``s`` is worth about half a percent on either GPU. ``b`` and ``e`` alone changed nothing on the H200; with ``s``
they took plain from -0.5 % to -0.85 % (s and sbe were timed in two device calls, each against its own base,
which agreed within 0.1 %). With steps of 8 (sbe8, H100) the three gained no more than ``s`` alone there: the
second wavefront of each load costs about what the shorter band saves. Why ``b`` and ``e`` help only together was
not measured, nor ``sbe`` on the H100 (the session's device time ran out). ``sbe``, the H200's fastest, is the
default. Against the targets, beside the bench at 301876c in the same H200 call (r3 as before these letters:
decay 1.3327 ms against fla ``chunk_simple_gla`` 0.8807, 1.513x; plain 1.2891 ms against r0 124.44, 96.5x;
``figures/data/h200_r3_301876c.json``, ``h200_r0_plain_301876c.json``): sbe's decay, 1.3215-1.3231 ms, is
1.5005-1.5023x that fla time, and its plain, 1.2783, 97.3x r0. Both targets are still short.

The output blocks' start (:data:`TICKET_U32`). In the H100 profile of the overlapped launch at 2fa709f (plain,
``figures/data/probes/h100_ncu_src_r3_overlap_2fa709f_3.csv.gz``) the barrier after an output block's ticket held
3.3 % of all warp-stall samples: seven warps waiting while thread 0 took the ticket (about 105 samples on its
atomic) and divided it into chunk and head (467 samples in Numba's int64 divisions, 124 SASS instructions). Then
the block waited for K's and Q's copies (1.4 % on the ``cp.async`` wait, 1.4 % at the barrier after it). The
divisions are now unsigned 32-bit (~50 instructions on thread 0's path; :func:`_overlap_kernel`). Timed on an H100
(no H200 was lent that session) at the standard shape, decay, oracle-checked, in one process, one run each
(``tools/tune_r3.py --vary r3_shared.TICKET_U32=0,1 --vary r3_shared.OVERLAP_AHEAD=0,64``, the log
``figures/data/probes/h100_tune_r3_ticket_177ddcb.log``): 1.3272 ms with the int64 divisions, 1.3218 ms with
the 32-bit ones (-0.4 %). The other half, an L2 prefetch of K's and Q's rows of the block 64 tickets ahead by every
output block (so that its copies would hit L2: they come from HBM, the output lagging the walk by up to about 45
chunks), made it slower: 1.3397 ms (branch ``ticket``, 177ddcb; not kept). Both are single runs on one GPU, and the
H200 has not timed either.

The value phase balanced between the warps, tried and not kept (branch ``vbal``, b479a4b: :data:`OUT_TRI`'s letter
``v``). Slab by slab, Aqk V's bands of rows run to 16, 32, 48 and 64 rows of V, so at the two value slabs' barriers
most warps wait for the last band: 64 steps of the inner dimension on a block's longest path, for 40 on average.
``v`` took both value slabs in one step (they lie in X1 and X2, which are contiguous) and paired band i with band
NB - 1 - i: the shorter band did its own rows and stored them, then the first x steps of its partner's rows (x a
multiple of 8 that evens out the pair: at most 40 steps for any band) into its zeroed accumulators, and left those
in Q's space (free once the state slabs are done) for the partner to add after a barrier. It passed the simulator's
``test_out_tri`` cases on that branch (against the oracle, and within float32 rounding of the output without it);
ptxas (``tools/sass.py``, sm_90) spilled 24 bytes in the overlapped launch for plain, 16 to 44 for decay, where
``sbe`` spills none. Timed on an H100 at the standard shape, oracle-checked, the variants in one process per
recurrence, one run each (``figures/data/probes/h100_tune_r3_vbal_{plain,decay}_b479a4b.json``), ms:

==========  ======  ======================  ======================
recurrence  sbe     sbev (8-row bands)      sev (16-row bands)
==========  ======  ======================  ======================
plain       1.2874  1.2912                  1.3089
decay       1.3210  1.3236                  1.3430
==========  ======  ======================  ======================

Both were slower. A guess, not measured: the launch is bound by instruction issue over the whole SM, not by one
block's longest path, so the warps a band leaves idle at a barrier cost little while the SM's other block and the
walker issue; ``v`` adds the partial sums' stores, loads and barrier, and the spills.

The output's slabs written out (:data:`OUT_UNROLL`). In the 2fa709f profile (plain, per SASS instruction) the loop
over an output block's slabs kept its counters -- the slab, its buffer, its pass's first column, and the same for
slab j + 3 -- in 64-bit uniform registers: about 50 instructions a slab and warp outside the products (13.8 M, 3.5 M
and 2.4 M warp instructions in three blocks, 2 % of the launch's), and each slab's copy chose between S_c's and the
values' path at run time. Now a pass's NSP slabs (6 at C = 64, K' = 128) are steps written out, each built in Python
for its slab (``_out_body``'s ``slab_step``): which product, which copy follows, which buffer and whether the gate
or the store runs are fixed when the kernel is built, and only the pass index stays a variable (a second pass where
V > 2 C). Two things were needed on the way. Calls nested in calls (a chain of steps) made Numba copy each level's
IR into the next, and branches on the slab compiled every path six times: minutes of compiling; the steps are now
called one after another (and their products are inlined by NVVM: below). And the compiler hoisted every slab's copy
offsets to the block's start, held across the products: ptxas spilled 24 bytes (plain) and 96 (decay, where the
walk's copies reloaded spilled values every chunk). Each step now passes its chunk, first row and pass through
:func:`linattn_numba.vec.pinned` (a ``mov.b64`` the compiler may not move), so its offsets are computed where it
copies: 0 bytes spilled, 128 registers, 7,304 / 7,624 SASS instructions for the overlapped launch (plain / decay;
4,896 / 5,200 with the loop: the products are now six loops, not two). The output is the same bit for bit
(``tests/test_r3_shared.py::test_out_unroll``: 3, 5, 6 and 9 slabs a pass, two passes, against the loop). Timed on
an H100 (no H200 was lent), standard shape, oracle-checked, one process per recurrence, ms
(``figures/data/probes/h100_tune_r3_unroll_*_{763c9fc,81f9db1}.json``):

======================================  ==========================  ==========================
tree                                    plain (loop / written out)  decay (loop / written out)
======================================  ==========================  ==========================
763c9fc (offsets hoisted, spills)       1.2855, 1.2874 / 1.2659,    1.3182, 1.3189 / 1.3547,
                                        1.2639                      1.3536
81f9db1 (offsets pinned, no spills)     1.2859, 1.2853 / 1.2475,    1.3090, 1.3194 / 1.2917,
                                        1.2495                      1.2950
======================================  ==========================  ==========================

Plain 2.9 % faster, decay 1.3-2.1 %. Not timed on the H200, so the issue's targets are not judged by it. The delta
family's output kernel (``_out_kernel``) takes the same steps (not timed); r6's output on the tensor cores
(``r6_tensor_cores._out_pipe_kernel``) keeps the loop, since its products were not compiled or timed this way.

With the steps written out, Numba inlined the two products (``_out_fma_products``' ``fma_state`` and
``fma_value``, each a loop nest of 8-step FMA tiles) into every step, typing and lowering each copy: out[plain]
took 114 s to PTX on the 2-core CI machine, the overlapped launch about 4 minutes, and the GPU tier of the additive
family 419 s on the H100 against 260 before (``figures/data/probes/h100_gpu_tests_9210941.log``). They are now
inlined by NVVM instead (:func:`linattn_numba._common.nvvm_inline`, ``forceinline``): Numba compiles each once,
and out[plain] takes 42-48 s (the loop form: 25-30 s), the overlapped launch about a minute. The SASS differs in
a few integer instructions only (``tools/sass.py``, sm_90: the overlapped launch 7,304 instructions for plain as
before, 7,632 for decay against 7,624; the same FFMA and LDS counts, 128 registers, no spills), so it was not
timed against the Numba-inlined form. The bench with both (a2da338, an H100, one process, oracle-checked:
``figures/data/probes/h100_r3_a2da338.json``) against the H100 bench before the written-out slabs (4b3c410,
``h100_r3_4b3c410.json``): plain 1.2868 -> 1.2623 ms, decay 1.3212 -> 1.2873, fla ``chunk_simple_gla`` in the
same runs (plain / decay) 0.9595 / 1.0255 -> 0.9590 / 1.0272; r0 plain took 125.48 ms there, 99.4x r3's time. On
that H100 the delta family's output kernel, which takes the same steps, met the oracle in every rung's GPU test
(``every_rung_large``: 8 passed) and in 4 or more of the 8 ``split_delta_large`` cases (a run cut by its time
limit, which did not print which cases it finished: ``probes/h100_gpu_tests_delta_a2da338_*.log``).

It runs where :func:`split_fits` (float32 inputs and output with 16-byte aligned rows; whole rows for the fixed
copy maps: at K' = 128, C = 32 or 64) and ``hs`` is at most :data:`SPLIT_MAX_BYTES`; elsewhere the fused schedule
runs (the delta family has a split of its own: the next section but one). compute-sanitizer's memcheck,
racecheck and synccheck: ``figures/data/h200_sanitize_par_*.txt`` (the README's list); the 8 x 4 tiling, forced at
the sanitizer's shape (B2 T300 H2 K64 V80, where the rule picks 4 x 4) by ``tools/sanitize.py --vary
r3_shared.SPLIT_ROWS=8 --vary r3_shared.SPLIT_BV=64``, under r3, r6 and r4 (plain, decay): nothing reported
(``figures/data/h200_sanitize_par_5661884.txt``); at dc2053e (:data:`TICKET_U32`), under r3 at B1 T300 H2 K=V=128
(where the overlapped launch runs) in both tilings, on an H100: nothing reported
(``figures/data/probes/h100_sanitize_par_dc2053e.txt``).

The start state deferred (:func:`split_deferred`, for r4 ``scan``): the state kernel can walk from zero while the
true start state X is not yet known, writing besides every chunk's state H_c the log decay lg_c before the chunk
(one float per chunk); the output kernel, launched once X is known, uses S_c = H_c + exp(lg_c) X, each thread
adding exp(lg_c) X to the pieces of S_c's slabs that it copied (:func:`_rows_adder`). r4 runs the state kernel on
all its segments at once, its scan over their final states, then the output kernel: one walk of the sequence
(r4's docstring has the measurement). ``_split_launches`` and ``split_deferred`` take another output kernel with
this one's arguments (``out_kernel``): r6 and r4 pass r6's, which is this kernel with its two products as 3xTF32
tensor-core tiles (0.676 against 0.891 ms for decay at the standard shape: r6's docstring). The output kernel is
written once for both: :func:`_out_pipeline` has the copies, slabs, buffers, barriers and the deferred start
state, and takes the product steps as a parameter (r3's :func:`_out_fma_products`, r6's ``_out_pipe_products``).

The split schedule for the delta family (``schedule="split"``, the default since it was measured:
:data:`DELTA_SCHEDULE`). For the delta rule P1's ``W S`` does feed the state (V_new = U - W S_c), so it must stay
in the walk, but the output's part need not: fla's ``chunk_gated_delta_rule`` walks with ``W S`` and the update
only, storing every chunk's state and V_new, then computes o = scale (diag(gamma) Q S_c + Aqk V_new) for every
chunk in parallel -- the additive output with V_new for V. Here::

    intra   (NT, B H), 256 threads          state-only mode (as r4's phase 1 runs it): b, Lkk, A, W, U -> bcum, w, u
    state   (V / BV, B H), 256 threads      per chunk: hs[c] = S_c; V_new = U - W S_c -> vnew [B, T, H, V] and, times
            (:func:`_split_delta_kernel`)   gamma_C / gamma_t, over U in shared memory; then S <- gamma_C S +
                                            K^T diag(gamma_C / gamma) V_new (:func:`_split_state_body`'s walk
                                            with P1 put back: K, W, U copied a chunk ahead by ``cp.async``; S_c
                                            also to shared memory for P1)
    out     (NT, B H), 256 threads          :func:`_out_kernel` on (q, k, vnew): scores, Q S_c, Aqk V_new

What it takes out of the fused schedule: the intra kernel's Aqk, Q' = diag(gamma) Q - Aqk W and U'' = Aqk U, the
walk's Q' S (half of its P1) and the qp / u2 buffers (512 MiB at the standard shape); what it adds: the output
kernel's scores and products (as the additive family's), hs (512 MiB) and vnew (256 MiB) written and read once.
Its walk, per thread and chunk at 8 x 4 tiles of 64 columns, does P1 (a 4 x 4 tile of V_new over all K': 2,048
FMAs) and P2 (2,048): twice the additive walk's work between the same copies, with three barriers, not two; its
shared memory (two buffers each of K, W, U, and S_c: 205,056 bytes at C = 64, K' = 128) leaves one block per SM,
so no output block can run beside it (no overlapped launch). ``tools/sass.py`` (sm_90, launch bounds 256 x 1):
164 registers for the gated delta rule (166 in 4 x 4 tiles with h0 and ht), 158 for the delta rule, no spills.
In 4 x 4 tiles of 32 columns (few walkers, :func:`split_tile`) P1 has (C / 4)(BV / 4) = 128 tiles for 256
threads: half of them wait at its barrier.

The prediction from pieces measured alone at the standard shape: the intra kernel in state-only mode 1.04 ms
(r4's phase 1 at B1 T262144 H2, the same 8,192 blocks: ``figures/data/probes/h200_ncu_r4_gated_delta_d8b443d.csv``),
the output kernel ~0.86 ms (decay's), the walk ~1.1 ms if it keeps the additive walk's rate (0.560 ms for half
the work): ~3.0 ms against the fused schedule's 3.61 (gated delta). Measured on the H200 (``tools/h200.sh
delta_split`` at 73b83a8, per kernel and oracle-checked: ``figures/data/probes/h200_tune_r3_delta_split_73b83a8.json``):
gated delta 3.604 ms fused against 3.027 split (intra 1.042, walk 1.137, out 0.847), delta 3.442 against 2.924
(0.967, 1.121, 0.829) -- the prediction held to 1 %, and the split became the delta family's default. Its GPU tests
(``delta_split_tests``) passed and memcheck, racecheck and synccheck report nothing
(``figures/data/h200_sanitize_split_delta_73b83a8.txt``); the bench beside fla is in the README's table. Where the
walk cannot run (a value tile over :data:`SPLIT_DELTA_SMEM`, float16, rows that 128-bit copies cannot take,
state-only calls) the fused schedule runs, as for the additive family.

Numerics: every product accumulates in float32; float16 inputs are converted on load; every exponent is a
difference of in-chunk cumulative log-gates b_t - b_s <= 0 (gamma_t = exp(b_t), gamma_C / gamma_t =
exp(b_C - b_t), Gamma_ts = exp(b_t - b_s) masked to s <= t before the exponential), so nothing overflows for any
decay; the inverse of the unit lower-triangular I + Lkk is exact forward substitution (no pivoting needed).
The summation order is fixed (no atomics): results are bitwise reproducible from run to run.

Scratch (kept between calls, one flat buffer per name that grows only when a call needs more: ``_common.scratch``,
so that r4's alternating shapes do not reallocate): bcum [B H, T'] (with g), u2 [B H, T', V] (with output), and
for the delta rule w, qp [B H, T', K'], u [B H, T', V]: 1 GiB for the gated delta rule at the standard shape, 256
MiB for the additive recurrences (r2: 1.25 GiB and 642 MiB).
"""

from __future__ import annotations

import functools
import math

import numpy as np
from numba import config, cuda, float32, int64, types, uint32

from .._common import (FLAG_COMBOS, INPUT_DTYPES, SMEM_MAX, array_type, cdiv, launch_dynamic, nvvm_inline, or_dummy,
                       rows_aligned, scratch, scratch_key)
from .._common import SMEM_STATIC_LIMIT  # noqa: F401 - r3's name for the 48 KB limit (notebook r3_shared reads it)
from ..reference import RECURRENCES

NAME = "shared"
MAX_K = 128  # the intra kernel stages K and Q rows of a chunk whole: C x (K + 4) floats each
MAX_V = None  # V is tiled by both kernels

CHUNK_SIZES = (16, 32, 64)
DEFAULT_CHUNK = 64  # used when chunk_size is None (the decode path)
WIDE_TILE = 64  # intra kernel: columns of [W | U] (and Q', U'') per register-blocked pass
STATE_REGS_BLOCKS = 512  # launch bounds: threads per SM the register allocation must allow (<= 128 regs each)
BATCH = 8  # global loads a staging loop keeps in flight per thread (32-bit loads)
QBATCH = 8  # the same for 128-bit loads (32 registers)
QBUF = 4 * QBATCH  # floats those hold (array shapes must be plain constants)
INTRA_MIN_BLOCKS = 2  # launch bounds: intra blocks per SM (2 x 256 threads, 2 x 108 KB shared at C = 64)

# Tile table: value-tile width BV of the state kernel, per (chunk size, padded K), from tools/tune_r3.py on the
# H200 at B4 T8192 H16 K=V=128 (candidates C in {32, 64} x BV in {16, 32, 64}; see the module docstring).
# V narrower than BV uses the smallest multiple of 4 >= V.
BV_TABLE = {
    (32, 128): 64,
    (64, 128): 64,
}
BV_DEFAULT = 64


# 128-bit loads and stores (moved to linattn_numba.vec so r1's decode step can use them too)
from ..vec import (cp_async16_at, cp_async_commit, cp_async_wait_all, cp_async_wait_one, ld1, ld4,  # noqa: E402
                   exp_approx, ld1_at, ld_acquire, pinned, prefetch_l2, red_release_add, st1, st4, st4_at)


@cuda.jit(device=True, inline="always")
def _mm_nn(sm, acc, oa, sa, ob, sb, rr, rstep, c0, kdim):
    """acc[4 i + j] += sum_m A[rr + rstep i, m] B[m, c0 + j] for a 4x4 micro-tile (i, j < 4), m < kdim.

    A is row-major at ``sm[oa + row * sa + m]``, B at ``sm[ob + m * sb + col]``. Per 4 steps of m: 4 loads of 4
    consecutive m for the 4 rows of A, 4 loads of 4 consecutive columns of B, 64 FMAs.
    """
    a = cuda.local.array(16, float32)
    bb = cuda.local.array(16, float32)
    for m in range(0, kdim, 4):
        for i in range(4):
            x = ld4(sm, oa + (rr + rstep * i) * sa + m)
            for e in range(4):
                a[4 * i + e] = x[e]
        for e in range(4):
            y = ld4(sm, ob + (m + e) * sb + c0)
            for j in range(4):
                bb[4 * e + j] = y[j]
        for i in range(4):
            for e in range(4):
                for j in range(4):
                    acc[4 * i + j] += a[4 * i + e] * bb[4 * e + j]


@cuda.jit(device=True, inline="always")
def _mm_nn8(sm, acc, oa, sa, ob, sb, rr, rstep, c0, kdim):
    """:func:`_mm_nn` for an inner dimension ``kdim`` that is a multiple of 8 (the state kernel's products; the
    intra kernel's triangular ones with their length rounded up to 8, the left factor being zero past its
    diagonal): per step 8 values of m, all 16 loads issued before the 128 FMAs. The sum runs over m in the same
    order.

    One step of 4 (86 SASS instructions: 8 loads, 64 FMAs, 14 of address and loop counting) made each group of
    FMAs wait on its own loads (short scoreboard, a quarter of the state kernel's samples in its products); two
    halve the counting per FMA and let the second half's loads arrive while the first half computes."""
    a = cuda.local.array(32, float32)
    bb = cuda.local.array(32, float32)
    for m in range(0, kdim, 8):
        for u in range(2):
            for i in range(4):
                x = ld4(sm, oa + (rr + rstep * i) * sa + m + 4 * u)
                for e in range(4):
                    a[16 * u + 4 * i + e] = x[e]
            for e in range(4):
                y = ld4(sm, ob + (m + 4 * u + e) * sb + c0)
                for j in range(4):
                    bb[16 * u + 4 * e + j] = y[j]
        for u in range(2):
            for i in range(4):
                for e in range(4):
                    for j in range(4):
                        acc[4 * i + j] += a[16 * u + 4 * i + e] * bb[16 * u + 4 * e + j]


@cuda.jit(device=True, inline="always")
def _quad_map(idx, ncol, wide):
    """(row, column) of 4x4 micro-tile ``idx`` in a grid of tiles ``ncol`` quads wide (rows a multiple of 4).

    ``wide`` (``ncol`` a multiple of 8, a compile-time constant): a warp takes 4 rows x 8 columns of tiles, so
    each of its 128-bit shared loads reads 4 distinct float4 of the left factor (64 bytes) or 8 of the right one
    (128 bytes): one shared-memory wavefront each. Row-major (``idx // ncol``, 2 rows x 16 columns per warp at
    ncol = 16) the right factor's 16 float4 are 256 bytes, two wavefronts: 12 wavefronts per 64 FMAs instead of 8.
    """
    if wide:
        w = idx // 32
        lane = idx % 32
        return (w // (ncol // 8)) * 4 + lane // 8, (w % (ncol // 8)) * 8 + lane % 8
    return idx // ncol, idx % ncol


@cuda.jit(device=True, inline="always")
def _stage_input(sm, off, stride, x, b, h, t0, n, lim, col0, rows, cols, tid, nth, scaled, soff):
    """sm[off + t stride + d] = x[b, t0 + t, h, col0 + d] (as float32; times sm[soff + t] when ``scaled``) for
    t < rows, d < cols; 0 where t >= n or col0 + d >= lim (the zero padding every product below relies on).

    Consecutive threads take consecutive d (coalesced), and each thread issues its loads BATCH at a time before
    storing them: a load's latency (hundreds of cycles from L2 or HBM) is paid once per batch, not per element.
    """
    buf = cuda.local.array(BATCH, float32)
    total = rows * cols
    for e0 in range(tid, total, BATCH * nth):
        for r in range(BATCH):
            e = e0 + r * nth
            t = e // cols
            d = e % cols
            val = float32(0.0)
            if e < total and t < n and col0 + d < lim:
                val = float32(x[b, t0 + t, h, col0 + d])
            buf[r] = val
        for r in range(BATCH):
            e = e0 + r * nth
            if e < total:
                t = e // cols
                val = buf[r]
                if scaled:
                    val *= sm[soff + t]
                sm[off + t * stride + e % cols] = val


@cuda.jit(device=True, inline="always")
def _stage_input4(sm, off, stride, x, b, h, t0, n, lim, col0, rows, cols, tid, nth, scaled, soff):
    """:func:`_stage_input` for float32 inputs whose rows are 16-byte aligned and lim, col0, cols multiples of 4
    (``forward`` checks): one 128-bit load per 4 elements, QBATCH of them in flight per thread."""
    buf = cuda.local.array(QBUF, float32)
    quads = rows * cols // 4
    for e0 in range(tid, quads, QBATCH * nth):
        for r in range(QBATCH):
            e = e0 + r * nth
            t = (4 * e) // cols
            d = (4 * e) % cols
            y = (float32(0.0), float32(0.0), float32(0.0), float32(0.0))
            if e < quads and t < n and col0 + d < lim:
                y = ld4(x, (b, t0 + t, h, col0 + d))
            for f in range(4):
                buf[4 * r + f] = y[f]
        for r in range(QBATCH):
            e = e0 + r * nth
            if e < quads:
                t = (4 * e) // cols
                sc = sm[soff + t] if scaled else float32(1.0)
                st4(sm, off + t * stride + (4 * e) % cols,
                    (buf[4 * r] * sc, buf[4 * r + 1] * sc, buf[4 * r + 2] * sc, buf[4 * r + 3] * sc))


@cuda.jit(device=True, inline="always")
def _stage_scratch(sm, off, stride, x, bh, t0, c0, lim, rows, cols, tid, nth, vec):
    """sm[off + t stride + d] = x[bh, t0 + t, c0 + d] for t < rows, d < cols (0 where c0 + d >= lim) from a
    C-contiguous float32 scratch array: with ``vec`` (lim, c0, cols multiples of 4) 128-bit loads, QBATCH in
    flight per thread; else 32-bit loads, 4 QBATCH in flight."""
    buf = cuda.local.array(QBUF, float32)
    if vec:
        quads = rows * cols // 4
        for e0 in range(tid, quads, QBATCH * nth):
            for r in range(QBATCH):
                e = e0 + r * nth
                d = (4 * e) % cols
                y = (float32(0.0), float32(0.0), float32(0.0), float32(0.0))
                if e < quads and c0 + d < lim:
                    y = ld4(x, (bh, t0 + (4 * e) // cols, c0 + d))
                for f in range(4):
                    buf[4 * r + f] = y[f]
            for r in range(QBATCH):
                e = e0 + r * nth
                if e < quads:
                    st4(sm, off + ((4 * e) // cols) * stride + (4 * e) % cols,
                        (buf[4 * r], buf[4 * r + 1], buf[4 * r + 2], buf[4 * r + 3]))
    else:
        total = rows * cols
        for e0 in range(tid, total, 4 * QBATCH * nth):
            for r in range(4 * QBATCH):
                e = e0 + r * nth
                val = float32(0.0)
                if e < total and c0 + e % cols < lim:
                    val = x[bh, t0 + e // cols, c0 + e % cols]
                buf[r] = val
            for r in range(4 * QBATCH):
                e = e0 + r * nth
                if e < total:
                    sm[off + (e // cols) * stride + e % cols] = buf[r]


def _stager_fits(cols, nth):
    """Whether :func:`_rows_stager` can stage rows of ``cols`` floats with ``nth`` threads (whole quads, and a
    whole number of rows per pass of the block)."""
    return cols % 4 == 0 and nth % (cols // 4) == 0


@functools.lru_cache(maxsize=None)
def _rows_stager(ROWS, COLS, NTH, scratch):
    """A device function that copies ROWS rows of COLS floats from global to shared memory with 128-bit accesses,
    every size a compile-time constant: each thread owns one column quad ``d`` and the rows ``tid // (COLS / 4)
    + j NTH / (COLS / 4)``, issues all of its J loads, then stores them.

    The general loops above (:func:`_stage_input4`, :func:`_stage_scratch`) take their sizes as arguments and
    keep QBATCH = 8 loads in flight per pass, each one recomputing ``t = 4 e // cols``, ``d = 4 e % cols`` and the
    4-D address: at the state kernel's 512 threads (4 quads per thread for Q and K, 2 for V) about 1,400 SASS
    instructions per warp and chunk, half of them for predicated-off slots. Found first in r6 (as many
    instructions as its chunk's two tensor-core products together); in r3's decay state kernel the staging phase
    executed about 85 M integer instructions for 1.6 M global loads (B1 T8192 H16,
    ``figures/data/probes/h200_ncu_src_a1325d3_1.csv.gz``), a quarter of the kernel's time, issue-bound rather
    than waiting on memory. Here ``d`` and the row base are fixed per thread, so a load is an address add and a
    compare. Used wherever the sizes fit (:func:`_stager_fits`) and the inputs are float32 with aligned rows.

    ``scratch``: ``x`` is a [BH, T, n] scratch array (``stage(sm, off, stride, x, bh, t0, lim, c0, tid)``, rows
    are not cut at the sequence end, as in r3); else a [B, T, H, n] input (``stage(sm, off, stride, x, b, h, t0,
    n, lim, c0, tid, scaled, soff)``: rows t >= n are zero, rows times ``sm[soff + t]`` when ``scaled``). Columns
    ``c0 + d >= lim`` are zero in both."""
    QPR = COLS // 4
    RSTEP = NTH // QPR
    J = cdiv(ROWS, RSTEP)
    JB = 4 * J

    if scratch:
        def stage(sm, off, stride, x, bh, t0, lim, c0, tid):
            buf = cuda.local.array(JB, float32)
            d = 4 * (tid % QPR)
            tf = tid // QPR
            for j in range(J):
                t = tf + j * RSTEP
                y = (float32(0.0), float32(0.0), float32(0.0), float32(0.0))
                if t < ROWS and c0 + d < lim:
                    y = ld4(x, (bh, t0 + t, c0 + d))
                for f in range(4):
                    buf[4 * j + f] = y[f]
            for j in range(J):
                t = tf + j * RSTEP
                if t < ROWS:
                    st4(sm, off + t * stride + d, (buf[4 * j], buf[4 * j + 1], buf[4 * j + 2], buf[4 * j + 3]))
    else:
        def stage(sm, off, stride, x, b, h, t0, n, lim, c0, tid, scaled, soff):
            buf = cuda.local.array(JB, float32)
            d = 4 * (tid % QPR)
            tf = tid // QPR
            for j in range(J):
                t = tf + j * RSTEP
                y = (float32(0.0), float32(0.0), float32(0.0), float32(0.0))
                if t < ROWS and t < n and c0 + d < lim:
                    y = ld4(x, (b, t0 + t, h, c0 + d))
                for f in range(4):
                    buf[4 * j + f] = y[f]
            for j in range(J):
                t = tf + j * RSTEP
                if t < ROWS:
                    sc = sm[soff + t] if scaled else float32(1.0)
                    st4(sm, off + t * stride + d, (buf[4 * j] * sc, buf[4 * j + 1] * sc, buf[4 * j + 2] * sc,
                                                   buf[4 * j + 3] * sc))
    return cuda.jit(device=True, inline="always")(stage)


@cuda.jit(device=True, inline="always")
def _store_tile(dst, bh, t, col, lim, acc, i, vec):
    """dst[bh, t, col : col + 4] = acc[4 i : 4 i + 4] for the columns < lim; one 128-bit store when ``vec``."""
    if vec:
        st4(dst, (bh, t, col), (acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]))
    else:
        for j in range(4):
            if col + j < lim:
                dst[bh, t, col + j] = acc[4 * i + j]


# ----------------------------------------------------------------------------------------------------------
# kernel A: everything inside one chunk (fully parallel over chunks and heads)
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
    (O_T: scratch of max(NB - 1, 1) 256 + 16 C floats). Shared by r3's and r6's intra kernels.

    Scalar shared loads in its loops go through ``ld1`` from a per-thread base pointer, and each thread keeps
    one (row, column) of a 16 x 16 block for all the blocks J of a block row. With ``sm[i]`` (a wraparound
    check and 64-bit index arithmetic per load) and the block row's (J, row, column) recomputed per element,
    the block-row loops issued 16 instructions per FMA (ncu, ``figures/data/probes/h200_ncu_phases_9ed137f.json``:
    the solve was a quarter of the gated delta rule's intra kernel); this way the loops unroll with immediate
    offsets, and the gated delta rule's intra kernel took 0.15 ms less
    (``figures/data/probes/h200_tune_r3_inverse_ab_*_9059b13.json``)."""
    # diag(beta gamma) K in place (only W reads it from now on): by the threads >= C while threads < C solve the
    # diagonal blocks below (that solve is a chain of dependent steps on 2 warps), by all threads first when
    # there are no others. W reads the rows after several barriers.
    if NTH <= C or tid >= C:
        s0 = 0 if NTH <= C else C
        for e in range(tid - s0, C * KP // 4, NTH - s0):
            t = (4 * e) // KP
            f = sm[O_BETA + t]
            if has_g:
                f *= math.exp(sm[O_B + t])
            p = O_K + t * KS + (4 * e) % KP
            x = ld4(sm, p)
            st4(sm, p, (x[0] * f, x[1] * f, x[2] * f, x[3] * f))
    # A = (I + L)^-1, blocked: the 16 x 16 diagonal blocks first. Thread j of block d solves for column j
    # of its inverse, x_i = [i == j] - sum_{m < i} L[i, m] x_m, the column kept in shared memory at
    # O_T + i C + tid (a register array would need the 16 x 16 loop nest fully unrolled; ptxas does not,
    # and a dynamically indexed register array goes to local memory) ...
    dblk = tid // 16
    jc = tid % 16
    dbase = O_LA + (16 * dblk) * CS + 16 * dblk
    if tid < C:
        pt = O_T + tid  # x_m of this thread's column at pt + m C
        # rows not solved yet read as 0 below (L is 0 on and above the diagonal, so their products vanish)
        for i in range(16):
            sm[pt + i * C] = float32(0.0)
        for i in range(16):
            # 4 partial sums over m = 4 s + lane (one 128-bit load of L's row per step): the chain of dependent
            # FMAs, one per m when summed in one variable, made this phase slow (ncu: 16 % of the time)
            a0 = float32(1.0) if i == jc else float32(0.0)
            a1 = float32(0.0)
            a2 = float32(0.0)
            a3 = float32(0.0)
            pl = dbase + i * CS
            for m in range(0, i, 4):
                x = ld4(sm, pl + m)
                px = pt + m * C
                a0 -= x[0] * ld1(sm, px)
                a1 -= x[1] * ld1(sm, px + C)
                a2 -= x[2] * ld1(sm, px + 2 * C)
                a3 -= x[3] * ld1(sm, px + 3 * C)
            sm[pt + i * C] = (a0 + a1) + (a2 + a3)
    cuda.syncthreads()  # every diagonal block of L has been read
    if tid < C:
        for i in range(jc, 16):
            sm[dbase + i * CS + jc] = ld1(sm, O_T + i * C + tid)
    cuda.syncthreads()
    # ... then block row I from the rows above: A_IJ = -A_II sum_{J <= M < I} L_IM A_MJ, J < I (each sum in 4
    # partial sums, L's row read 4 entries per 128-bit load, as above). 256 is a multiple of NTH (16, 64, 256),
    # so element e0 of every block J of the row is on the same thread.
    for bi in range(1, NB):
        for e0 in range(tid, 256, NTH):
            r = e0 // 16
            cc = e0 % 16
            arow = O_LA + (16 * bi + r) * CS  # row r of block row I
            for bj in range(bi):
                a0 = float32(0.0)
                a1 = float32(0.0)
                a2 = float32(0.0)
                a3 = float32(0.0)
                pl = arow + 16 * bj  # L_IM[r, :] from M = J on
                pc = O_LA + (16 * bj) * CS + 16 * bj + cc  # A_MJ[:, cc] from M = J on
                for m in range(0, 16 * (bi - bj), 4):
                    x = ld4(sm, pl + m)
                    px = pc + m * CS
                    a0 += x[0] * ld1(sm, px)
                    a1 += x[1] * ld1(sm, px + CS)
                    a2 += x[2] * ld1(sm, px + 2 * CS)
                    a3 += x[3] * ld1(sm, px + 3 * CS)
                sm[O_T + bj * 256 + e0] = (a0 + a1) + (a2 + a3)
        cuda.syncthreads()  # T complete; block row bi of L read
        for e0 in range(tid, 256, NTH):
            r = e0 // 16
            cc = e0 % 16
            arow = O_LA + (16 * bi + r) * CS + 16 * bi  # A_II[r, :]
            for bj in range(bi):
                a0 = float32(0.0)
                a1 = float32(0.0)
                a2 = float32(0.0)
                a3 = float32(0.0)
                pt = O_T + bj * 256 + cc  # T_IJ[:, cc]
                for m in range(0, 16, 4):  # A_II is 0 above its diagonal: the whole row, 4 loads of 4
                    x = ld4(sm, arow + m)
                    a0 += x[0] * ld1(sm, pt + m * 16)
                    a1 += x[1] * ld1(sm, pt + (m + 1) * 16)
                    a2 += x[2] * ld1(sm, pt + (m + 2) * 16)
                    a3 += x[3] * ld1(sm, pt + (m + 3) * 16)
                sm[O_LA + (16 * bi + r) * CS + 16 * bj + cc] = -((a0 + a1) + (a2 + a3))
        cuda.syncthreads()  # block row bi of A complete


@cuda.jit(device=True, inline="always")
def _scores_step8(sm, acc, kc2, qr2, pk, pq, rs):
    """:func:`_scores`' additive step: acc[4 i + j] += sum_{f < 8} Q[i, f] K[j, f] for j <= i, Q's row i at
    ``sm[pq + i rs]``, K's row j at ``sm[pk + j rs]``; the 16 loads before the 80 FMAs."""
    for u in range(2):
        for j in range(4):
            x = ld4(sm, pk + j * rs + 4 * u)
            for f in range(4):
                kc2[16 * u + 4 * j + f] = x[f]
        for i in range(4):
            y = ld4(sm, pq + i * rs + 4 * u)
            for f in range(4):
                qr2[16 * u + 4 * i + f] = y[f]
    for u in range(2):
        for i in range(4):
            for j in range(i + 1):
                for f in range(4):
                    acc[4 * i + j] += qr2[16 * u + 4 * i + f] * kc2[16 * u + 4 * j + f]


@cuda.jit(device=True, inline="always")
def _scores(sm, O_K, O_Q, O_AQK, O_LA, O_B, O_BETA, KS, CS, C4, KP, tid, has_g, delta, out):
    """The intra (and split output) kernel's scores: sm[O_AQK + t CS + s] = Aqk[t, s] = (Q K^T)[t, s] Gamma_ts for
    s <= t (``out``) and sm[O_LA + t CS + s] = Lkk[t, s] = beta_t (K K^T)[t, s] Gamma_ts for s < t (``delta``), 0
    above; K's and Q's rows at O_K, O_Q (stride KS, KP columns), b_t at O_B, beta_t at O_BETA. One 4x4 tile (rows
    tr + C/4 i, columns tc + C/4 j) of each per thread, (tr, tc) by :func:`_quad_map`: a warp takes 4 consecutive
    tr and 8 consecutive tc (C/4 a multiple of 8), so each of its 128-bit loads reads 4 or 8 rows that fall in
    distinct bank groups (row stride KP + 4 floats): one wavefront, where 2 x 16 (tr = tid // C4) read 16 rows of
    K, two wavefronts. The caller syncs before and after."""
    tr, tc = _quad_map(tid, C4, C4 % 8 == 0)
    acc_qk = cuda.local.array(16, float32)
    acc_kk = cuda.local.array(16, float32)
    kc = cuda.local.array(16, float32)
    kr = cuda.local.array(16, float32)
    qr = cuda.local.array(16, float32)
    for e in range(16):
        acc_qk[e] = float32(0.0)
        acc_kk[e] = float32(0.0)
    if not delta:
        # the scores alone: 8 steps of d per loop step, all 16 loads issued before the 80 FMAs (4 steps made each
        # group of FMAs wait on its own loads: a quarter of the output kernel's stall samples, with 16 % of its
        # instructions); the same order of the sum over d. The delta family's two products have no registers for it
        # (two such steps per loop step, written out: 16 d, constant offsets from two base addresses)
        kc2 = cuda.local.array(32, float32)
        qr2 = cuda.local.array(32, float32)
        pk = O_K + tc * KS
        pq = O_Q + tr * KS
        for d in range(0, KP, 16):
            _scores_step8(sm, acc_qk, kc2, qr2, pk + d, pq + d, C4 * KS)
            _scores_step8(sm, acc_qk, kc2, qr2, pk + d + 8, pq + d + 8, C4 * KS)
    else:
        for d in range(0, KP, 4):
            for j in range(4):
                x = ld4(sm, O_K + (tc + C4 * j) * KS + d)
                for f in range(4):
                    kc[4 * j + f] = x[f]
            for i in range(4):
                x = ld4(sm, O_K + (tr + C4 * i) * KS + d)
                for f in range(4):
                    kr[4 * i + f] = x[f]
                if out:
                    y = ld4(sm, O_Q + (tr + C4 * i) * KS + d)
                    for f in range(4):
                        qr[4 * i + f] = y[f]
            for i in range(4):
                for j in range(i + 1):  # column tc + C/4 j > row tr + C/4 i for j > i: masked below, never summed
                    for f in range(4):
                        if out:
                            acc_qk[4 * i + j] += qr[4 * i + f] * kc[4 * j + f]
                        acc_kk[4 * i + j] += kr[4 * i + f] * kc[4 * j + f]
    for i in range(4):
        t = tr + C4 * i
        bt = sm[O_B + t] if has_g else float32(0.0)
        for j in range(4):
            # s - t = (tc - tr) + C/4 (j - i) with |tc - tr| < C/4: below the diagonal sub-tile (j < i) s < t always,
            # above it (j > i) never, on it as tc vs tr. Spelled out per (i, j) (constants once the loops are
            # unrolled), only the diagonal sub-tiles test: the other 12 entries had a compare and a branch each, and
            # the 6 above an exponential behind them (~540 instructions a warp for the 16 entries, ~300 now)
            s = tc + C4 * j
            if j > i:
                if out:
                    sm[O_AQK + t * CS + s] = float32(0.0)
                if delta:
                    sm[O_LA + t * CS + s] = float32(0.0)
                continue
            le = j < i or tc <= tr  # s <= t
            lt = j < i or tc < tr  # s < t
            dec = float32(1.0)
            if has_g and le:
                dec = exp_approx(bt - sm[O_B + s])  # b_t - b_s <= 0: never overflows
            if out:
                sm[O_AQK + t * CS + s] = acc_qk[4 * i + j] * dec if le else float32(0.0)
            if delta:
                sm[O_LA + t * CS + s] = sm[O_BETA + t] * acc_kk[4 * i + j] * dec if lt else float32(0.0)


@functools.lru_cache(maxsize=None)
def _half_scores_stepper(lo=False):
    """:func:`_out_scores`' step, 4 values of d: acc[8 i + j] += sum_{f < 4} Q[i, f] K[j, f] for the entries (i, j)
    that can lie on or below the diagonal (j <= 2 i + 1), Q's row i at ``sm[pq + i rq]``, K's row j at ``sm[pk + j
    rk]``: 12 loads of 16 bytes, then 80 FMAs (:func:`_scores_step8`: 16 loads per 80). ``lo``: for a warp whose
    rows all lie above sub-tile 2 i + 1 (tr < C/8), entries j <= 2 i only: 11 loads (K's row 7 is never read), then
    64 FMAs."""
    NJ = 7 if lo else 8  # K's rows read
    LO = int(lo)  # entries j < 2 i + 2 - LO of tile row i

    @cuda.jit(device=True, inline="always")
    def step(sm, acc, qa, kb, pq, pk, rq, rk):
        for i in range(4):
            x = ld4(sm, pq + i * rq)
            for f in range(4):
                qa[4 * i + f] = x[f]
        for j in range(NJ):
            y = ld4(sm, pk + j * rk)
            for f in range(4):
                kb[4 * j + f] = y[f]
        for i in range(4):
            for j in range(2 * i + 2 - LO):
                for f in range(4):
                    acc[8 * i + j] += qa[4 * i + f] * kb[4 * j + f]

    return step


_half_scores_step = _half_scores_stepper(False)
_half_scores_step_lo = _half_scores_stepper(True)


@cuda.jit(device=True, inline="always")
def _half_scores_send(sm, acc, i, tr, tc, O_AQK, CS, C4, C8):
    """Put a thread's partial sums of tile row i (entries that can lie on or below the diagonal) where they
    belong in Aqk, for the thread of the other half that finishes that row."""
    p = O_AQK + (tr + C4 * i) * CS + tc
    for j in range(2 * i + 2):
        st1(sm, p + C8 * j, acc[8 * i + j])


@cuda.jit(device=True, inline="always")
def _half_scores_finish(sm, acc, i, tr, tc, O_AQK, O_B, CS, C4, C8, has_g):
    """Aqk[t, s] = (own + other half's partial sum) Gamma_ts for s <= t, 0 above, on tile row i (t = tr + C/4 i)
    and columns s = tc + C/8 j. Sub-tile j < 2 i lies below the diagonal, j > 2 i + 1 above it; only j = 2 i
    (s <= t as tc <= tr) and 2 i + 1 (as tc + C/8 <= tr) test (constants once unrolled)."""
    t = tr + C4 * i
    bt = ld1(sm, O_B + t) if has_g else float32(0.0)
    p = O_AQK + t * CS + tc
    for j in range(8):
        if j > 2 * i + 1:
            st1(sm, p + C8 * j, float32(0.0))
            continue
        le = j < 2 * i or (j == 2 * i and tc <= tr) or (j == 2 * i + 1 and tc + C8 <= tr)
        val = float32(0.0)
        if le:
            val = acc[8 * i + j] + ld1(sm, p + C8 * j)
            if has_g:
                val *= exp_approx(bt - ld1(sm, O_B + tc + C8 * j))  # b_t - b_s <= 0: never overflows
        st1(sm, p + C8 * j, val)


@cuda.jit(device=True, inline="always")
def _out_scores(sm, O_K, O_Q, O_AQK, O_B, KS, CS, C, KP, tid, has_g, skip=False):
    """The split schedule's output kernel's scores: sm[O_AQK + t CS + s] = Aqk[t, s] = (Q K^T)[t, s] Gamma_ts for
    s <= t, 0 above (what :func:`_scores` computes with ``out`` alone), K's and Q's rows at O_K, O_Q (stride KS,
    KP columns), b_t at O_B. The caller syncs before and after.

    Why not :func:`_scores`' map: a 4 x 4 tile a thread (16 entries, C^2 / 16 threads) reads 8 float4 per 4 values
    of d for 40 FMAs (6 of its 16 sub-tiles lie above the diagonal): 5 FMAs per 128-bit shared load, the output
    kernel's scores held a fifth of its stall samples for an eighth of its instructions, waiting on shared loads
    (short scoreboard, MIO). Here each half of the block takes half of d and a 4 x 8 tile (rows tr + C/4 i,
    columns tc + C/8 j: 20 of its 32 entries can lie on or below the diagonal): 12 float4 per 80 FMAs, a quarter
    fewer loads for the same FMAs. The halves then trade partial sums through Aqk itself (each entry written by
    one thread, and after the barrier read and overwritten by the one other thread that owns it in the other
    half: no extra shared memory), and each finishes two of the four tile rows (10 entries each): half 0 rows 0
    and 3, half 1 rows 1 and 2. Map within a half (C^2 / 32 threads): tr = p // (C/8), tc = p % (C/8); at C =
    64 a warp holds 4 tr x 8 tc, and each of its loads reads 4 or 8 consecutive rows (row stride KP + 4 floats:
    distinct bank groups), one wavefront.

    ``skip`` (:data:`OUT_TRI`'s ``s``, at C = 64): entry (tr + C/4 i, tc + C/8 (2 i + 1)) lies on or below the
    diagonal only where tc + C/8 <= tr, so the two warps of each half whose rows are tr < C/8 (p < 64) never need
    sub-tile 2 i + 1: they take :func:`_half_scores_stepper`'s ``lo`` step (16 of the 20 entries, 11 loads a
    step), and their partial sums there stay zero, which the finishing step never reads (it stores 0 there). The
    same bits; 10 % of the scores' FMAs fewer, on half the warps."""
    C4 = C // 4
    C8 = C // 8
    HALF = C4 * C8
    half = tid // HALF
    p = tid - half * HALF
    tr = p // C8
    tc = p - tr * C8
    acc = cuda.local.array(32, float32)
    qa = cuda.local.array(16, float32)
    kb = cuda.local.array(32, float32)
    for e in range(32):
        acc[e] = float32(0.0)
    d0 = half * (KP // 2)
    pq = O_Q + tr * KS + d0
    pk = O_K + tc * KS + d0
    if skip and C == 64 and p < 64:
        # this warp's rows tr < C/8: sub-tile 2 i + 1 (columns tc + C/8 > tr) lies wholly above the diagonal for
        # every lane, so the warp skips it (16 entries, not 20; warp-uniform: no divergence)
        for d in range(0, KP // 2, 8):
            _half_scores_step_lo(sm, acc, qa, kb, pq + d, pk + d, C4 * KS, C8 * KS)
            _half_scores_step_lo(sm, acc, qa, kb, pq + d + 4, pk + d + 4, C4 * KS, C8 * KS)
    else:
        for d in range(0, KP // 2, 8):  # KP >= 16: a whole number of steps of 8
            _half_scores_step(sm, acc, qa, kb, pq + d, pk + d, C4 * KS, C8 * KS)
            _half_scores_step(sm, acc, qa, kb, pq + d + 4, pk + d + 4, C4 * KS, C8 * KS)
    if half == 0:
        _half_scores_send(sm, acc, 1, tr, tc, O_AQK, CS, C4, C8)
        _half_scores_send(sm, acc, 2, tr, tc, O_AQK, CS, C4, C8)
    else:
        _half_scores_send(sm, acc, 0, tr, tc, O_AQK, CS, C4, C8)
        _half_scores_send(sm, acc, 3, tr, tc, O_AQK, CS, C4, C8)
    cuda.syncthreads()  # every partial sum sent: each thread reads the other half's for its own rows
    if half == 0:
        _half_scores_finish(sm, acc, 0, tr, tc, O_AQK, O_B, CS, C4, C8, has_g)
        _half_scores_finish(sm, acc, 3, tr, tc, O_AQK, O_B, CS, C4, C8, has_g)
    else:
        _half_scores_finish(sm, acc, 1, tr, tc, O_AQK, O_B, CS, C4, C8, has_g)
        _half_scores_finish(sm, acc, 2, tr, tc, O_AQK, O_B, CS, C4, C8, has_g)


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
        T, H, K = q.shape[1], q.shape[2], q.shape[3]
        V = v.shape[3]
        vec_v = V % 4 == 0  # rows of u, u2 are 16-byte aligned: 128-bit stores
        sm = cuda.shared.array(0, float32)
        c = cuda.blockIdx.x
        bh = cuda.blockIdx.y
        b = bh // H
        h = bh % H
        tid = cuda.threadIdx.x
        t0 = c * C
        n = min(C, T - t0)

        # -- stage the chunk: gates, beta, K and Q rows (zero-padded to C x KP) --
        for t in range(tid, C, NTH):
            if has_g:
                sm[O_G + t] = float32(g[b, t0 + t, h]) if t < n else float32(0.0)
            if delta:
                sm[O_BETA + t] = float32(beta[b, t0 + t, h]) if t < n else float32(0.0)
        if FAST:
            if delta or out:
                st_rows(sm, O_K, KS, k, b, h, t0, n, K, 0, tid, False, 0)
            if out:
                st_rows(sm, O_Q, KS, q, b, h, t0, n, K, 0, tid, False, 0)
        elif vin:
            if delta or out:
                _stage_input4(sm, O_K, KS, k, b, h, t0, n, K, 0, C, KP, tid, NTH, False, 0)
            if out:
                _stage_input4(sm, O_Q, KS, q, b, h, t0, n, K, 0, C, KP, tid, NTH, False, 0)
        else:
            if delta or out:
                _stage_input(sm, O_K, KS, k, b, h, t0, n, K, 0, C, KP, tid, NTH, False, 0)
            if out:
                _stage_input(sm, O_Q, KS, q, b, h, t0, n, K, 0, C, KP, tid, NTH, False, 0)
        cuda.syncthreads()  # staged rows are read by every thread
        if has_g:
            for t in range(tid, C, NTH):
                acc = float32(0.0)
                for s in range(min(t, n - 1) + 1):
                    acc += sm[O_G + s]
                sm[O_B + t] = acc
                bcum[bh, t0 + t] = acc
            cuda.syncthreads()  # b_s of other rows is read by the scores
        if not (delta or out):
            return

        _scores(sm, O_K, O_Q, O_AQK, O_LA, O_B, O_BETA, KS, CS, C4, KP, tid, has_g, delta, out)
        cuda.syncthreads()  # scores complete; Q rows no longer needed (their space is reused)

        acc = cuda.local.array(16, float32)
        qv = cuda.local.array(16, float32)  # Q's 4x4 tile in Q' = diag(gamma) Q - Aqk W
        if delta:
            _wy_inverse(sm, O_K, KS, KP, O_BETA, O_B, O_LA, O_T, CS, C, NB, tid, NTH, has_g)

            # W = A diag(beta gamma) K, CB columns at a time; with the output also Q' = diag(gamma) Q - Aqk W
            for kb in range(0, KP, CB):
                for tile in range(tid, NTILE, NTH):
                    rr = tile // CB4
                    cc = tile % CB4
                    for e in range(16):
                        acc[e] = float32(0.0)
                    _mm_nn8(sm, acc, O_LA, CS, O_K + kb, KS, 4 * rr, 1, cc * 4, 8 * (rr // 2 + 1))
                    for i in range(4):
                        r = 4 * rr + i
                        _store_tile(w, bh, t0 + r, kb + cc * 4, KP, acc, i, True)
                        if out:
                            st4(sm, O_Q + r * RS + cc * 4, (acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]))
                if out:
                    cuda.syncthreads()  # the W tile is complete in shared memory
                    for tile in range(tid, NTILE, NTH):
                        rr = tile // CB4
                        cc = tile % CB4
                        # Q's tile is loaded before the product and used after it: loaded after it (as it
                        # was), each row's loads waited the whole L2 round trip (long scoreboard: 4 % of the
                        # gated delta rule's intra kernel), and the kernel took 20 us more
                        col = kb + cc * 4
                        for i in range(4):
                            r = 4 * rr + i
                            if vin:  # Q's rows are 16-byte aligned and K a multiple of 4: one 128-bit load
                                y = (float32(0.0), float32(0.0), float32(0.0), float32(0.0))
                                if r < n and col < K:
                                    y = ld4(q, (b, t0 + r, h, col))
                                for j in range(4):
                                    qv[4 * i + j] = y[j]
                            else:
                                for j in range(4):
                                    qv[4 * i + j] = float32(q[b, t0 + r, h, col + j]) if r < n and col + j < K \
                                        else float32(0.0)
                        for e in range(16):
                            acc[e] = float32(0.0)
                        _mm_nn8(sm, acc, O_AQK, CS, O_Q, RS, 4 * rr, 1, cc * 4, 8 * (rr // 2 + 1))
                        for i in range(4):
                            r = 4 * rr + i
                            gr = math.exp(sm[O_B + r]) if has_g else float32(1.0)  # gamma_r, once per row
                            for j in range(4):
                                acc[4 * i + j] = qv[4 * i + j] * gr - acc[4 * i + j]
                            _store_tile(qp, bh, t0 + r, kb + cc * 4, KP, acc, i, True)
                    cuda.syncthreads()  # before the next tile overwrites the W tile

        # U = A diag(beta) V (delta) and U'' = Aqk U (delta) or Aqk V (additive), CB value columns at a time
        for vb in range(0, V, CB):
            if FAST:
                st_val(sm, O_Q, RS, v, b, h, t0, n, V, vb, tid, delta, O_BETA)
            elif vin:
                _stage_input4(sm, O_Q, RS, v, b, h, t0, n, V, vb, C, CB, tid, NTH, delta, O_BETA)
            else:
                _stage_input(sm, O_Q, RS, v, b, h, t0, n, V, vb, C, CB, tid, NTH, delta, O_BETA)
            cuda.syncthreads()  # the staged tile is complete
            if delta:
                for tile in range(tid, NTILE, NTH):
                    rr = tile // CB4
                    cc = tile % CB4
                    for e in range(16):
                        acc[e] = float32(0.0)
                    _mm_nn8(sm, acc, O_LA, CS, O_Q, RS, 4 * rr, 1, cc * 4, 8 * (rr // 2 + 1))
                    for i in range(4):
                        r = 4 * rr + i
                        _store_tile(u, bh, t0 + r, vb + cc * 4, V, acc, i, vec_v and vb + cc * 4 < V)
                        if out:
                            st4(sm, O_K + r * RS + cc * 4, (acc[4 * i], acc[4 * i + 1], acc[4 * i + 2], acc[4 * i + 3]))
                cuda.syncthreads()  # U tile complete (and the staged tile free again)
            if out:
                o_rhs = O_K if delta else O_Q
                for tile in range(tid, NTILE, NTH):
                    rr = tile // CB4
                    cc = tile % CB4
                    for e in range(16):
                        acc[e] = float32(0.0)
                    _mm_nn8(sm, acc, O_AQK, CS, o_rhs, RS, 4 * rr, 1, cc * 4, 8 * (rr // 2 + 1))
                    for i in range(4):
                        _store_tile(u2, bh, t0 + 4 * rr + i, vb + cc * 4, V, acc, i, vec_v and vb + cc * 4 < V)
                if not delta:
                    cuda.syncthreads()  # before the next tile is staged over this one

    if config.ENABLE_CUDASIM:
        return cuda.jit(intra)
    return cuda.jit(intra, launch_bounds=(NTH, INTRA_MIN_BLOCKS))


# ----------------------------------------------------------------------------------------------------------
# kernel B: the sequential pass over chunks, state in registers, output fused
# ----------------------------------------------------------------------------------------------------------
def _p1_split(C, KP, delta, out):
    """KSPLIT: the parts into which the additive state kernel splits P1's inner dimension K' (1: no split).

    P1 of the additive family, X = Q S, is [C, K'] x [K', BV]: C BV / 16 micro-tiles for (K' / 4)(BV / 4) threads,
    so at C < K' only C / K' of the threads would have a tile and the rest would wait at the next barrier (half
    of the state kernel's time for decay at C = 64, K' = 128:
    ``figures/data/probes/h200_ncu_src_d3650db_1.csv.gz``).
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


@cuda.jit(device=True, inline="always")
def _chunk_gates(sm, o_f, o_gm, bcum, bh, t0, n, C, tid, nth):
    """sm[o_f + t] = gamma_C / gamma_t = exp(b_last - b_t) (0 for t >= n) and sm[o_gm + t] = gamma_t = exp(b_t)."""
    b_last = bcum[bh, t0 + n - 1]
    for t in range(tid, C, nth):
        bt = bcum[bh, t0 + min(t, n - 1)]
        sm[o_f + t] = math.exp(b_last - bt) if t < n else float32(0.0)
        sm[o_gm + t] = math.exp(bt)


@cuda.jit(device=True, inline="always")
def _stage_chunk(sm, O_A, O_V, O_F, KS, VS, q, k, v, w, u, qp, b, h, bh, t0, n, K, KP, V, v0, C, BV, tid, nth,
                 has_g, delta, out, vin, vec_v):
    """The state kernel's staging of one chunk (r3 and r6): the two row blocks at ``O_A`` (W | Q', W | K, Q | K or
    - | K) and the value tile at ``O_V`` (U, or V with rows times gamma_C / gamma_t from ``sm[O_F + t]``).
    The flags are the kernel's compile-time constants: inlined, the untaken branches vanish."""
    if delta:
        _stage_scratch(sm, O_A, KS, w, bh, t0, 0, KP, C, KP, tid, nth, True)
    elif out:
        if vin:
            _stage_input4(sm, O_A, KS, q, b, h, t0, n, K, 0, C, KP, tid, nth, False, 0)
        else:
            _stage_input(sm, O_A, KS, q, b, h, t0, n, K, 0, C, KP, tid, nth, False, 0)
    if delta and out:
        _stage_scratch(sm, O_A + C * KS, KS, qp, bh, t0, 0, KP, C, KP, tid, nth, True)
    elif vin:
        _stage_input4(sm, O_A + C * KS, KS, k, b, h, t0, n, K, 0, C, KP, tid, nth, False, 0)
    else:
        _stage_input(sm, O_A + C * KS, KS, k, b, h, t0, n, K, 0, C, KP, tid, nth, False, 0)
    if delta:  # U (V_new after P1)
        _stage_scratch(sm, O_V, VS, u, bh, t0, v0, u.shape[2], C, BV, tid, nth, vec_v)  # zero past U's columns
    elif vin:  # V, rows times gamma_C / gamma_t
        _stage_input4(sm, O_V, VS, v, b, h, t0, n, V, v0, C, BV, tid, nth, has_g, O_F)
    else:
        _stage_input(sm, O_V, VS, v, b, h, t0, n, V, v0, C, BV, tid, nth, has_g, O_F)


@functools.lru_cache(maxsize=None)
def _chunk_stager(C, KP, BV, NTH, has_g, delta, out, vin):
    """The state kernel's staging of one chunk (r3 and r6) as a device function ``stage(sm, O_A, O_V, O_F, KS, VS,
    q, k, v, w, u, qp, b, h, bh, t0, n, K, V, v0, tid, vec_v)``: what :func:`_stage_chunk` does, by the fixed-map
    stagers (:func:`_rows_stager`) for float32 inputs with aligned rows (``vin``) where the sizes fit, else by
    :func:`_stage_chunk`'s general loops."""
    if vin and _stager_fits(KP, NTH) and _stager_fits(BV, NTH):
        st_rows = _rows_stager(C, KP, NTH, False)  # Q, K
        st_rows_s = _rows_stager(C, KP, NTH, True)  # W, Q'
        st_val = _rows_stager(C, BV, NTH, False)  # V
        st_val_s = _rows_stager(C, BV, NTH, True)  # U

        def stage(sm, O_A, O_V, O_F, KS, VS, q, k, v, w, u, qp, b, h, bh, t0, n, K, V, v0, tid, vec_v):
            if delta:
                st_rows_s(sm, O_A, KS, w, bh, t0, KP, 0, tid)
            elif out:
                st_rows(sm, O_A, KS, q, b, h, t0, n, K, 0, tid, False, 0)
            if delta and out:
                st_rows_s(sm, O_A + C * KS, KS, qp, bh, t0, KP, 0, tid)
            else:
                st_rows(sm, O_A + C * KS, KS, k, b, h, t0, n, K, 0, tid, False, 0)
            if delta:
                st_val_s(sm, O_V, VS, u, bh, t0, u.shape[2], v0, tid)  # zero past U's columns
            else:  # V, rows times gamma_C / gamma_t
                st_val(sm, O_V, VS, v, b, h, t0, n, V, v0, tid, has_g, O_F)
    else:
        def stage(sm, O_A, O_V, O_F, KS, VS, q, k, v, w, u, qp, b, h, bh, t0, n, K, V, v0, tid, vec_v):
            _stage_chunk(sm, O_A, O_V, O_F, KS, VS, q, k, v, w, u, qp, b, h, bh, t0, n, K, KP, V, v0, C, BV, tid,
                         NTH, has_g, delta, out, vin, vec_v)
    return cuda.jit(device=True, inline="always")(stage)


@functools.lru_cache(maxsize=None)
def _lines_prefetcher(ROWS, LINES, NTH, ROT, scratch):
    """A device function that asks L2 for ROWS rows of LINES cache lines (128 bytes each) by a fixed map, every
    size a compile-time constant: request e = (tid + 32 c - ROT) mod NTH (+ NTH j) is row e // LINES, line
    e % LINES (``c``: the chunk's index).

    The general loop it replaces, ``for e in range(tid, n lmax, nth)`` (row e // lmax, line e % lmax) with a runtime
    end, compiled to 4x-unrolled 64-bit loop code of about 170 SASS instructions per call even with lmax a constant
    (450-520 with a runtime lmax, ``figures/data/probes/h200_ncu_src_a1325d3_1.csv.gz``), and every call began at
    thread 0: at the state kernel's 512 threads warps 0-7 issued all four calls per chunk and warps 8-15 none, then
    waited for them at the barrier. ``ROT`` starts each array's requests where the one before ended, so every thread
    issues at most ceil(total / NTH) requests. The map turns by a warp per chunk (``32 c``): with a fixed one the
    addresses' per-thread parts do not change from chunk to chunk, and the compiler kept them out of the chunk loop,
    about 15 registers that the decay state kernel then spilled. ``scratch``: ``pf(x, bh, t0, n, c0, cols, tid, c)``
    on a [BH, T, n] array; else ``pf(x, b, h, t0, n, c0, cols, tid, c)`` on a [B, T, H, n] input."""
    J = cdiv(ROWS * LINES, NTH)

    if scratch:
        def pf(x, bh, t0, n, c0, cols, tid, c):
            for j in range(J):
                row, line = _line_request(tid, c, j, NTH, ROT, LINES)
                if row < n and 32 * line < cols:
                    prefetch_l2(x, (bh, t0 + row, c0 + 32 * line))
    else:
        def pf(x, b, h, t0, n, c0, cols, tid, c):
            for j in range(J):
                row, line = _line_request(tid, c, j, NTH, ROT, LINES)
                if row < n and 32 * line < cols:
                    prefetch_l2(x, (b, t0 + row, h, c0 + 32 * line))
    return cuda.jit(device=True, inline="always")(pf)


@cuda.jit(device=True, inline="always")
def _line_request(tid, c, j, NTH, ROT, LINES):
    """(row, line) of thread ``tid``'s ``j``-th request for chunk ``c`` in :func:`_lines_prefetcher`'s map (NTH,
    ROT, LINES: its constants)."""
    e = (tid + 32 * c + (NTH - ROT)) % NTH + j * NTH
    return e // LINES, e % LINES


@functools.lru_cache(maxsize=None)
def _chunk_prefetcher(C, KP, BV, NTH, delta, out):
    """A device function that asks L2 for the rows of the chunk starting at ``t1`` (``n1`` tokens) that the state
    kernel's staging will read, so that it hits L2 instead of HBM: ``pf(q, k, v, w, u, qp, u2, b, h, bh, t1,
    n1, K, V, v0, tid, c)`` (``c``: the index of the chunk at ``t1``). By :func:`_lines_prefetcher`'s fixed maps,
    each array's requests starting on the thread after the last one of the array before. Used by r3's and r6's
    state kernels."""
    LK, LV = (KP + 31) // 32, (BV + 31) // 32
    # the arrays in the order asked for, (lines per row, scratch) each; array i's map starts at the sum of the
    # requests before it (mod NTH). Without output the names of the arrays not asked for are bound to a map that
    # is never called (their calls sit under ``if out``, a compile-time constant).
    if delta:
        order = [(LK, True), (LV, True)] + ([(LK, True)] if out else [])  # w, u, (qp)
    else:
        order = [(LV, False)] + ([(LK, False)] if out else [])  # v, (q)
    order += [(LK, False)] + ([(LV, True)] if out else [])  # k, (u2)
    rots = [sum(C * lines for lines, _ in order[:i]) % NTH for i in range(len(order))]
    fns = [_lines_prefetcher(C, lines, NTH, r, scr) for (lines, scr), r in zip(order, rots)]
    if delta:
        pw, pu = fns[0], fns[1]
        pq = fns[2] if out else fns[0]
        pk = fns[3] if out else fns[2]
        pu2 = fns[4] if out else fns[1]

        def pf(q, k, v, w, u, qp, u2, b, h, bh, t1, n1, K, V, v0, tid, c):
            pw(w, bh, t1, n1, 0, KP, tid, c)
            pu(u, bh, t1, n1, v0, min(BV, u.shape[2] - v0), tid, c)
            if out:
                pq(qp, bh, t1, n1, 0, KP, tid, c)
            pk(k, b, h, t1, n1, 0, K, tid, c)
            if out:
                pu2(u2, bh, t1, n1, v0, min(BV, V - v0), tid, c)
    else:
        pv = fns[0]
        pq = fns[1] if out else fns[0]
        pk = fns[2] if out else fns[1]
        pu2 = fns[3] if out else fns[0]

        def pf(q, k, v, w, u, qp, u2, b, h, bh, t1, n1, K, V, v0, tid, c):
            pv(v, b, h, t1, n1, v0, min(BV, V - v0), tid, c)
            if out:
                pq(q, b, h, t1, n1, 0, K, tid, c)
            pk(k, b, h, t1, n1, 0, K, tid, c)
            if out:
                pu2(u2, bh, t1, n1, v0, min(BV, V - v0), tid, c)
    return cuda.jit(device=True, inline="always")(pf)


@cuda.jit(device=True, inline="always")
def _p2_rows8(sm, S, xa, ya, pk, ks, pv, vs):
    """S[4 i + j] += sum_e K[e, i] V[e, j] over 8 rows e: K's at ``sm[pk + e ks + i]``, V's at ``sm[pv + e vs +
    j]``; the 16 loads of 16 bytes before the 128 FMAs."""
    for e in range(8):
        x = ld4(sm, pk + e * ks)
        y = ld4(sm, pv + e * vs)
        for f in range(4):
            xa[4 * e + f] = x[f]
            ya[4 * e + f] = y[f]
    for e in range(8):
        for i in range(4):
            for j in range(4):
                S[4 * i + j] += xa[4 * e + i] * ya[4 * e + j]


@functools.lru_cache(maxsize=None)
def _state_kernel(C, KP, BV, has_g, delta, out, has_h0, has_ht, vin, store=False):
    BV4 = BV // 4
    NTH = (KP // 4) * BV4  # one 4x4 tile of the state [KP, BV] per thread
    WIDE = BV4 % 8 == 0  # tiles to threads by _quad_map's 4 x 8 per warp (one wavefront per 128-bit load)
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
        ``store`` (the split schedule, additive and state only): every chunk's starting state S_c to
        ``hs[bh, c KP + row, column]`` (rows past K are zero), for the output kernel (:func:`_out_kernel`).
        """
        T, H, K = k.shape[1], k.shape[2], k.shape[3]
        V = ht.shape[3] if (delta and not out) else v.shape[3]  # the state's columns (wide_state_columns)
        vec_v = (u.shape[2] if delta else V) % 4 == 0
        NC = (T + C - 1) // C
        sm = cuda.shared.array(0, float32)
        bh = cuda.blockIdx.y
        b = bh // H
        h = bh % H
        v0 = cuda.blockIdx.x * BV
        tid = cuda.threadIdx.x
        rg, cg = _quad_map(tid, BV4, WIDE)
        S = cuda.local.array(16, float32)
        acc = cuda.local.array(16, float32)
        xa = cuda.local.array(32, float32)  # P2's 8 rows of K and of V_new
        ya = cuda.local.array(32, float32)
        for i in range(4):
            for j in range(4):
                S[4 * i + j] = float32(0.0)
                if has_h0 and rg * 4 + i < K and v0 + cg * 4 + j < V:
                    S[4 * i + j] = h0[b, h, rg * 4 + i, v0 + cg * 4 + j]
        if has_g and NC > 0:
            _chunk_gates(sm, O_F, O_GM, bcum, bh, 0, min(C, T), C, tid, NTH)
            cuda.syncthreads()  # the first chunk's gates are read by its staging
        for c in range(NC):
            t0 = c * C
            n = min(C, T - t0)
            b_last = bcum[bh, t0 + n - 1] if has_g else float32(0.0)
            if store and v0 + cg * 4 < V:  # V is a multiple of 4 here (split_fits): whole quads
                for i in range(4):
                    st4(hs, (bh, c * KP + rg * 4 + i, v0 + cg * 4), (S[4 * i], S[4 * i + 1], S[4 * i + 2],
                                                                      S[4 * i + 3]))
            # -- stage: S, the row blocks, the value tile (gamma_t and gamma_C / gamma_t are already in place) --
            if NT1 > 0:
                for i in range(4):
                    st4(sm, O_S + (rg * 4 + i) * VS + cg * 4, (S[4 * i], S[4 * i + 1], S[4 * i + 2], S[4 * i + 3]))
            stage_chunk(sm, O_A, O_V, O_F, KS, VS, q, k, v, w, u, qp, b, h, bh, t0, n, K, V, v0, tid, vec_v)
            if delta and out:  # K's rows in a third block now (not over W once P1 is done: one staging, one barrier)
                if FAST:
                    st_rows(sm, O_A + K_OFF, KS, k, b, h, t0, n, K, 0, tid, False, 0)
                elif vin:
                    _stage_input4(sm, O_A + K_OFF, KS, k, b, h, t0, n, K, 0, C, KP, tid, NTH, False, 0)
                else:
                    _stage_input(sm, O_A + K_OFF, KS, k, b, h, t0, n, K, 0, C, KP, tid, NTH, False, 0)
            cuda.syncthreads()  # everything staged

            # -- ask L2 for the next chunk's rows now, so that its staging hits L2 instead of HBM --
            if c + 1 < NC:
                prefetch_chunk(q, k, v, w, u, qp, u2, b, h, bh, t0 + C, min(C, T - t0 - C), K, V, v0, tid, c + 1)

            # -- P1: X = rows @ S; delta rows -> V_new (in shared), output rows -> o --
            if KSPLIT > 1:
                # split P1 (_p1_split): part tid // NT1 of K', its gamma_t X tile to shared memory. U'' is read in
                # the summing step after the barrier: loaded here and held, it cost registers (ptxas spilled)
                part = tid // NT1
                rr, cc = _quad_map(tid % NT1, BV4, WIDE)
                for e in range(16):
                    acc[e] = float32(0.0)
                _mm_nn8(sm, acc, O_A + part * KD, KS, O_S + part * KD * VS, VS, rr, R4, cc * 4, KD)
                for i in range(4):
                    row = rr + R4 * i
                    gm = sm[O_GM + row] if has_g else float32(1.0)  # read now: the next chunk's gates replace it
                    st4(sm, O_P + (part * C + row) * VS + cc * 4,
                        (acc[4 * i] * gm, acc[4 * i + 1] * gm, acc[4 * i + 2] * gm, acc[4 * i + 3] * gm))
            else:
                for tile in range(tid, NT1, NTH):
                    rr, cc = _quad_map(tile, BV4, WIDE)
                    for e in range(16):
                        acc[e] = float32(0.0)
                    _mm_nn8(sm, acc, O_A, KS, O_S, VS, rr, R4, cc * 4, KP)
                    for i in range(4):
                        row = rr + R4 * i
                        if delta and row < C:
                            f = sm[O_F + row] if has_g else float32(1.0)  # gamma_C / gamma_t
                            p = O_V + row * VS + cc * 4
                            y = ld4(sm, p)  # this thread's own elements
                            st4(sm, p, ((y[0] - acc[4 * i]) * f, (y[1] - acc[4 * i + 1]) * f,
                                        (y[2] - acc[4 * i + 2]) * f, (y[3] - acc[4 * i + 3]) * f))
                        elif out:
                            t = row - C if delta else row
                            gm = float32(1.0)
                            if has_g and not delta:
                                gm = sm[O_GM + t]
                            if t < n:
                                col = v0 + cc * 4
                                if vec_v and col < V:
                                    z = ld4(u2, (bh, t0 + t, col))
                                    for j in range(4):
                                        o[b, t0 + t, h, col + j] = scale * (acc[4 * i + j] * gm + z[j])
                                else:
                                    for j in range(4):
                                        if col + j < V:
                                            z1 = u2[bh, t0 + t, col + j]
                                            o[b, t0 + t, h, col + j] = scale * (acc[4 * i + j] * gm + z1)
            cuda.syncthreads()  # V_new (or the split P1's parts) complete

            if KSPLIT > 1:  # o = scale (sum of the parts + U''), one float4 of the tile per thread and step
                for r in range(EPT):
                    e = tid + r * NTH
                    t = e // BV4
                    c4 = e % BV4
                    col = v0 + 4 * c4
                    if e < NE and t < n:
                        x = ld4(sm, O_P + t * VS + 4 * c4)
                        x0, x1, x2, x3 = x[0], x[1], x[2], x[3]
                        for p in range(1, KSPLIT):
                            y = ld4(sm, O_P + (p * C + t) * VS + 4 * c4)
                            x0 += y[0]
                            x1 += y[1]
                            x2 += y[2]
                            x3 += y[3]
                        if vec_v and col < V:
                            z = ld4(u2, (bh, t0 + t, col))
                            o[b, t0 + t, h, col] = scale * (x0 + z[0])
                            o[b, t0 + t, h, col + 1] = scale * (x1 + z[1])
                            o[b, t0 + t, h, col + 2] = scale * (x2 + z[2])
                            o[b, t0 + t, h, col + 3] = scale * (x3 + z[3])
                        else:
                            xs = (x0, x1, x2, x3)
                            for j in range(4):
                                if col + j < V:
                                    o[b, t0 + t, h, col + j] = scale * (xs[j] + u2[bh, t0 + t, col + j])

            # -- P2: S <- gamma_C S + K^T diag(gamma_C / gamma) V_new; meanwhile the next chunk's gates --
            if has_g and c + 1 < NC:
                _chunk_gates(sm, O_F, O_GM, bcum, bh, t0 + C, min(C, T - t0 - C), C, tid, NTH)
            if has_g:
                gc = math.exp(b_last)
                for e in range(16):
                    S[e] *= gc
            # 8 rows of K and V_new per step, their 16 loads issued before the step's 128 FMAs: one row per step
            # (ld4, ld4, 16 FMAs) made each FMA group wait for its own loads, and Numba's loop counting (a 64-bit
            # count with its selects) cost as many instructions as the FMAs; 4 rows per step still spent 13
            # instructions on the counting and addresses per 64 FMAs, 8 rows spend 13 per 128. Rows past the
            # sequence's end are zero in both factors: a fixed trip count. The sum runs over t in order, as one row
            # per step did.
            for t8 in range(C // 8):
                _p2_rows8(sm, S, xa, ya, O_A + K_OFF + 8 * t8 * KS + rg * 4, KS, O_V + 8 * t8 * VS + cg * 4, VS)
            cuda.syncthreads()  # before the next chunk is staged over this one
        if has_ht:
            for i in range(4):
                for j in range(4):
                    if rg * 4 + i < K and v0 + cg * 4 + j < V:
                        ht[b, h, rg * 4 + i, v0 + cg * 4 + j] = S[4 * i + j]

    if config.ENABLE_CUDASIM:  # the simulator's cuda.jit takes no launch_bounds
        return cuda.jit(state)
    # 512 / NTH resident blocks: at most 128 registers a thread (one block of 512 threads at BV = 64, two of 256
    # at BV = 32); without the bound ptxas takes 130-170 and a 512-thread launch would fail.
    return cuda.jit(state, launch_bounds=(NTH, max(1, STATE_REGS_BLOCKS // NTH)))


# ----------------------------------------------------------------------------------------------------------
# the split schedule (additive family): states first, then every chunk's output in parallel
# ----------------------------------------------------------------------------------------------------------
SCHEDULES = ("fused", "split")
SCHEDULE = "split"  # the default of forward(schedule=...): faster on the H200 (module docstring)
SPLIT_MAX_BYTES = 4 << 30  # the largest per-chunk state buffer (hs) the split schedule allocates
# the split schedule's state kernel (read at launch): value-tile width and state rows per thread (4 x 4 or 8 x 4
# tiles); None: split_tile's choice by the shape, an int fixes it
SPLIT_BV = None
SPLIT_ROWS = None
SPLIT_WIDE_BLOCKS = 96  # split_tile: 8 x 4 tiles of 64 value columns where they still make this many blocks
GATES_THREADS = 64
GATES_HEADS = 32  # heads one block of the gates kernel takes (one thread sums each); at most GATES_THREADS
GATES_BATCH = 32  # gates a summing thread holds in registers before it sums them: min(C, 32) divides C


@functools.lru_cache(maxsize=None)
def _gates_kernel(C, zero=False):
    """bcum[bh, t] = b_t, the in-chunk cumulative log-gate (rows past T: b of the chunk's last token, as the intra
    kernel writes it), ``gates(g, bcum, flags)`` on the grid (chunks, ceil(H / GATES_HEADS), B) of
    :func:`_gates_grid`: the split schedule's state kernel needs b before any output kernel runs, and the intra
    kernel would reserve ~100 KB of shared memory per block to do it. With ``zero`` the grid's threads also set
    ``flags`` to zero (the overlapped launch's counts, :func:`_overlap_kernel`: no launch of their own for them).

    A block takes one chunk of up to GATES_HEADS heads of one sequence: g[b, t0 : t0 + C, h0 : h0 + HT] is one
    contiguous run of memory where H <= HT, so its loads are coalesced (every thread's in flight at once) into a
    [C, HT + 1] tile in shared memory; then one thread per head sums its column in order (the intra kernel's float32
    sum: the same bits), and the block stores the tile by rows of bcum, again coalesced. Until 61528a1 a thread
    per (head, chunk) loaded its chunk's gates H floats apart and stored its b C floats apart from its
    neighbours': every warp-wide load and store touched 32 sectors, on 65 blocks at the standard shape, 19.4 us
    under ncu on an H100 (``figures/data/probes/h100_ncu_r3_overlap_2fa709f.csv``), 1.4 % of the decay forward.

    Measured on an H100 at B4 T8192 H16 (``tools/gates_probe.py``: both kernels in one process, bcum equal bit for
    bit; ``figures/data/probes/h100_gates_probe_932fa2f.log``): alone 19.0 -> 9.3 us, the decay forward (split
    schedule, overlapped launch) 1.346 -> 1.339 ms, p10-p90 ranges apart. The first form of this kernel (61528a1)
    mapped a thread's loads by dividing by the tile's head count, a runtime value: 5.3 M warp instructions against
    0.7 M (ncu), 15.5 us alone, and the forward 22 us slower, not faster (``h100_gates_probe_div_f015842.json``);
    the map is now shifts of the constant tile width, and at H = 16 half of a thread's loads are masked off.
    Each thread keeps one head and steps one element offset by RS rows (``vec.ld1_at``, 5091b26): indexing
    ``g[b, t, h]`` rebuilt the address from three indices and strides, with the wraparound checks, at every load
    (SASS, sm_90: 3,008 -> 1,832 instructions, 181 -> 72 registers). On an H100, two interleaved pairs of r3's
    split forward: decay 1.3385 -> 1.3359 and 1.3380 -> 1.3352 ms, plain unchanged
    (``h100_r3_ab_offsets_vs_main_3659865.log``). Since then the row stride is divided by the item size once, not
    twice (a runtime field of Numba's array, so each a 64-bit division call): 1,864 instructions, 56 registers,
    not timed; its unit cases and the GPU tier's decay cases pass on an H100 (``h100_gpu_tests_485b43d.log``)."""
    HT = GATES_HEADS
    HP = HT + 1  # padded rows: the stores' column reads (head j // C, token j % C) fall in distinct banks
    NTH = GATES_THREADS
    NL = C * HT // NTH  # gates a thread loads, all in flight before it stores any
    RS = NTH // HT  # rows of the tile one step of the block's loads covers
    assert NL * NTH == C * HT and NTH % HT == 0, "a block's threads must split its tile evenly and sum every head"
    NB = min(C, GATES_BATCH)

    def gates(g, bcum, flags):
        B, T, H = g.shape
        tid = cuda.threadIdx.x
        c = cuda.blockIdx.x
        h0 = cuda.blockIdx.y * HT
        b = cuda.blockIdx.z
        if zero:
            blk = (cuda.blockIdx.z * cuda.gridDim.y + cuda.blockIdx.y) * cuda.gridDim.x + c
            step = cuda.gridDim.x * cuda.gridDim.y * cuda.gridDim.z * NTH
            for i in range(blk * NTH + tid, flags.shape[0], step):
                flags[i] = 0
        tile = cuda.shared.array((C, HP), float32)
        t0 = c * C
        n = min(C, T - t0)
        nh = min(HT, H - h0)
        # a thread's loads: one head (hh) and every RS-th row from tr, so one element offset stepped by RS rows
        # (a tuple index rebuilt the address from three indices and strides at every load)
        tr = tid // HT
        hh = tid % HT
        isz = g.itemsize
        s1 = g.strides[1] // isz
        rstep = RS * s1
        off = b * (g.strides[0] // isz) + (t0 + tr) * s1 + (h0 + hh) * (g.strides[2] // isz)
        live = hh < nh
        x = cuda.local.array(NL, float32)
        for e in range(NL):
            x[e] = float32(ld1_at(g, off + e * rstep)) if live and tr + RS * e < n else float32(0.0)
        for e in range(NL):
            tile[tr + RS * e, hh] = x[e]
        cuda.syncthreads()  # the whole tile is in before a head's sum reads its column
        if tid < nh:
            y = cuda.local.array(NB, float32)
            acc = float32(0.0)
            for tb in range(0, C, NB):
                for e in range(NB):  # the batch's loads issued before the first sum waits on one
                    y[e] = tile[tb + e, tid]
                for e in range(NB):
                    acc += y[e]
                    tile[tb + e, tid] = acc
        cuda.syncthreads()  # every head's b is in before the stores read across heads
        for e in range(NL):
            idx = tid + e * NTH
            hh = idx // C
            t = idx - hh * C
            if hh < nh:
                bcum[b * H + h0 + hh, t0 + t] = tile[t, hh]

    return cuda.jit(gates)


def _gates_grid(B, T, H, C):
    """The grid of :func:`_gates_kernel`: (chunks, head tiles of GATES_HEADS, B)."""
    return (cdiv(T, C), cdiv(H, GATES_HEADS), B)


def _gates_launch(g, bcum, C, stream, flags=None):
    """Launch :func:`_gates_kernel` on ``g`` [B, T, H] into ``bcum`` [>= B H, T'] (:func:`_gates_grid`), and with
    ``flags`` (the overlapped launch's counts) the variant that also zeroes them. r3's split schedule and r6's own
    call it."""
    B, T, H = g.shape
    fl = _flags(1, stream) if flags is None else flags  # without flags a stand-in, never touched
    _launch(_gates_kernel(C, flags is not None), _gates_grid(B, T, H, C), GATES_THREADS, 0, stream, (g, bcum, fl))


def split_fits(K, V, C, delta, out, vin, delta_split=False) -> bool:
    """Whether the split schedule can run: the additive family (and with ``delta_split`` the delta family too:
    :func:`_split_delta_kernel`) with the output, float32 inputs and output with 16-byte aligned rows (``vin``), and
    sizes that the output kernel's fixed-map copies take (whole rows of K' and of 2 C columns per pass of the block:
    at K' = 128, C = 32 or 64)."""
    if (delta and not delta_split) or not out or not vin:
        return False
    KP = padded_k(K)
    NTH = (C // 4) ** 2
    return _stager_fits(KP, NTH) and _stager_fits(_out_shape(C, KP)[1], NTH)


def split_bytes(B, T, H, K, V, C) -> int:
    """Bytes of the split schedule's per-chunk state buffer ``hs`` [B H, NC KP, V] (float32)."""
    return B * H * cdiv(T, C) * padded_k(K) * V * 4


STATE_KERNELS = ("pipelined", "general")
STATE_KERNEL = "pipelined"  # the split schedule's state kernel (read at launch: tools/tune_r3.py --vary compares)


def _split_state_layout(C, KP, BV):
    """Offsets (floats) of :func:`_split_state_kernel`'s shared arrays, and the total: two chunk buffers of K's rows
    [C, KP + 4] and two of the value tile [C, BV + 4]. 86 KB at C = 64, K' = 128, BV = 32: two blocks per SM."""
    KS, VS = KP + 4, BV + 4
    o_k = 0
    o_v = o_k + 2 * C * KS
    return o_k, o_v, o_v + 2 * C * VS


@functools.lru_cache(maxsize=None)
def _rows_scaler(ROWS, COLS, NTH):
    """``(J, load_gates, factors, scale)`` for the rows that :func:`_rows_copier` (same sizes) has a thread copy:
    ``load_gates(bcum, go, n, tid, bj)`` loads the in-chunk log-gates b_t of the thread's J rows and b_last into ``bj``
    (J + 1 values) from ``bcum``'s element offset ``go`` (the chunk's first row: rows are read past n, so ``bcum``'s
    rows must be whole chunks long, as the gates kernel writes them), ``factors(bj, n, tid, fj)`` turns them into
    gamma_C / gamma_t = exp(b_last - b_t) (0 for t >= n), ``scale(sm, off, stride, tid, fj)`` multiplies the thread's
    own elements of the [ROWS, COLS] tile at ``off`` by them. Once its own copies have landed (``cp.async.wait_group``)
    a thread may rewrite them with no barrier, and it has its rows' gates from ``bcum`` itself rather than from a shared
    table that other threads write. The state kernel loads the gates a chunk ahead: loaded and used in the same chunk,
    their latency made the decay state kernel slower than the general one
    (``figures/data/probes/h200_tune_r3_pipe_state1.json``)."""
    QPR = COLS // 4
    RSTEP = NTH // QPR
    J = cdiv(ROWS, RSTEP)

    def load_gates(bcum, go, n, tid, bj):
        tf = tid // QPR
        for j in range(J):
            t = tf + j * RSTEP
            if ROWS % RSTEP:  # the thread's last row may be past the chunk (a row of it then, unused)
                t = min(t, ROWS - 1)
            bj[j] = ld1_at(bcum, go + t)  # rows past n too: bcum's rows are whole chunks long
        bj[J] = ld1_at(bcum, go + n - 1)

    def factors(bj, n, tid, fj):
        tf = tid // QPR
        for j in range(J):
            t = tf + j * RSTEP
            f = exp_approx(bj[J] - bj[j])  # b_t >= b_last: never overflows (past n, b_t = b_last: 1)
            fj[j] = f if t < n else float32(0.0)  # a select: computed for every row, no branch per row

    def scale(sm, off, stride, tid, fj):
        d = 4 * (tid % QPR)
        tf = tid // QPR
        for j in range(J):
            t = tf + j * RSTEP
            if ROWS % RSTEP == 0 or t < ROWS:
                p = off + t * stride + d
                f = fj[j]
                x = ld4(sm, p)
                st4(sm, p, (x[0] * f, x[1] * f, x[2] * f, x[3] * f))

    dev = cuda.jit(device=True, inline="always")
    return J, dev(load_gates), dev(factors), dev(scale)


@cuda.jit(device=True, inline="always")
def _p2_rows4_tall(sm, S, xa, ya, pk, ks, pv, vs):
    """S[4 i + j] += sum_e K[e, i] V[e, j] over 4 rows e, i < 8 (an 8 x 4 tile): K's at ``sm[pk + e ks + i]``, V's
    at ``sm[pv + e vs + j]``; the 12 loads of 16 bytes before the 128 FMAs."""
    for e in range(4):
        x0 = ld4(sm, pk + e * ks)
        x1 = ld4(sm, pk + e * ks + 4)
        y = ld4(sm, pv + e * vs)
        for f in range(4):
            xa[8 * e + f] = x0[f]
            xa[8 * e + 4 + f] = x1[f]
            ya[4 * e + f] = y[f]
    for e in range(4):
        for i in range(8):
            for j in range(4):
                S[4 * i + j] += xa[8 * e + i] * ya[4 * e + j]


@functools.lru_cache(maxsize=None)
def _walk_update(C, KS, VS, TR):
    """The split walks' P2 (:func:`_split_state_body`, :func:`_split_delta_kernel`) as a device function
    ``update(sm, S, xa, ya, pk, pv)``: S += K^T V over the chunk's C rows, K's row t at ``sm[pk + t KS]`` (the
    thread's TR rows from there), the (scaled) values' at ``sm[pv + t VS]``; rows past the end are zero. r3's P2: 8
    rows of K and V per step, their 16 loads before the 128 FMAs (TR = 4), or four steps of 4 rows for 8 x 4 tiles
    (the same 256 FMAs a loop step). Two steps per loop step, written out: their addresses are a base plus constants
    (311 instructions per 256 FMAs, 334 with one step)."""

    def update(sm, S, xa, ya, pk, pv):
        for t16 in range(0, C, 16):
            if TR == 4:
                _p2_rows8(sm, S, xa, ya, pk + t16 * KS, KS, pv + t16 * VS, VS)
                _p2_rows8(sm, S, xa, ya, pk + (t16 + 8) * KS, KS, pv + (t16 + 8) * VS, VS)
            else:
                _p2_rows4_tall(sm, S, xa, ya, pk + t16 * KS, KS, pv + t16 * VS, VS)
                _p2_rows4_tall(sm, S, xa, ya, pk + (t16 + 4) * KS, KS, pv + (t16 + 4) * VS, VS)
                _p2_rows4_tall(sm, S, xa, ya, pk + (t16 + 8) * KS, KS, pv + (t16 + 8) * VS, VS)
                _p2_rows4_tall(sm, S, xa, ya, pk + (t16 + 12) * KS, KS, pv + (t16 + 12) * VS, VS)

    return cuda.jit(device=True, inline="always")(update)


def split_state_threads(KP, BV, rows):
    """Threads of :func:`_split_state_kernel`: one tile of ``rows`` x 4 of the state [KP, BV] each."""
    return (KP // rows) * (BV // 4)


def split_tile(C, KP, BH, V, bv=None):
    """``(BV, rows)`` of the split schedule's state kernel for BH (batch x head) walkers of V value columns: the value
    tile ``bv`` (else :data:`SPLIT_BV`) and the state rows per thread :data:`SPLIT_ROWS` where given; otherwise
    64 columns (at most V) in 8 x 4 tiles where that still makes :data:`SPLIT_WIDE_BLOCKS` blocks (B H ceil(V /
    64)), else 32 columns in 4 x 4 tiles. On the H200 (``figures/data/probes/h200_r4_split_rows_1e301a6.json``,
    ``h200_tune_r3_split_rows_1e301a6.json``) 64 / 8 x 4 took the state kernel from 0.598 to 0.560 ms at B4 T8192
    H16 (128 blocks) and r4 at B1 T1048576 H2 (512 blocks in phase 1) from 5.556 to 5.052 ms; with few walkers
    (B1 H2: 4 blocks instead of 8) it made r3's forward 73.7 ms against 48.3 (``probes/h200_long_decay_3aed3d0.json``),
    where each walker's speed is what counts, and at 64 blocks (B2 T32768 H16) the state kernel 2.205 ms against 1.410
    (``probes/h200_tune_r3_split_rule_5d63b60.json``). 8 x 4 needs the value tile a multiple of 8 (K's copy map: an even
    number of column quads), else 4 x 4 runs."""
    wide = BH * cdiv(max(V, 1), 64) >= SPLIT_WIDE_BLOCKS
    bv = SPLIT_BV if bv is None else bv
    BV = value_tile(C, KP, V, (64 if wide else 32) if bv is None else bv)
    rows = SPLIT_ROWS if SPLIT_ROWS is not None else 8 if wide else 4
    if rows not in (4, 8):
        raise ValueError(f"rung {NAME!r}: SPLIT_ROWS must be 4, 8 or None, got {rows!r}")
    return BV, (4 if BV % 8 else rows)


@functools.lru_cache(maxsize=None)
def _split_state_kernel(C, KP, BV, has_g, has_h0, has_ht, has_lg=False, rows=4):
    """The split schedule's state kernel: :func:`_split_state_body` on block (x, y) = (value tile, b H + h)."""
    body = _split_state_body(C, KP, BV, has_g, has_h0, has_ht, has_lg, rows, False)

    def split_state(k, v, bcum, h0, ht, hs, lg):
        """Value columns x * BV .. x * BV + BV - 1 of head y, carried through every chunk."""
        none = cuda.local.array(1, types.int32)  # no flags: the walk signals nobody (never touched)
        body(cuda.shared.array(0, float32), k, v, bcum, h0, ht, hs, lg, cuda.blockIdx.x, cuda.blockIdx.y, none)

    if config.ENABLE_CUDASIM:
        return cuda.jit(split_state)
    NTH = split_state_threads(KP, BV, rows)
    return cuda.jit(split_state, launch_bounds=(NTH, max(1, STATE_REGS_BLOCKS // NTH)))


@functools.lru_cache(maxsize=None)
def _split_state_body(C, KP, BV, has_g, has_h0, has_ht, has_lg, rows, signal):
    """The split schedule's state walk (a device function, ``body(sm, k, v, bcum, h0, ht, hs, lg, x, bh, flags)``
    for value tile x of head bh; :func:`_split_state_kernel` and :func:`_overlap_kernel` run it):
    :func:`_state_kernel` in state-only mode with ``store`` (the additive family), its staging overlapped with its
    products. Chunk c + 1's rows of K and value tile are copied by
    ``cp.async`` (:func:`_rows_copier`) into the second of two buffers while chunk c's ``S <- gamma_C S + K^T
    diag(gamma_C / gamma) V`` runs on the first; each thread scales the value rows it copied by gamma_C / gamma_t
    once they have landed. Two barriers per chunk (staged; read), no L2 prefetch (the copies are a chunk ahead).
    The general kernel stages by loads into registers after each chunk's product: its staging was 18.5 % of its
    instructions and 32.5 % of its warp-stall samples (waiting on global memory), ``figures/data/probes``.

    Thread map and the product as :func:`_state_kernel`'s P2 (S in registers, 4 x 4 tiles by :func:`_quad_map`).
    Every chunk's starting state S_c goes to ``hs[bh, c KP + row, column]`` (rows past K are zero). Sizes as
    :func:`split_fits` asks (float32 with 16-byte rows, V a multiple of 4).

    ``has_lg`` (with g; the deferred start state, :func:`split_deferred`): ``lg[bh, c]`` = the sum of g over the
    sequence's tokens before chunk c, log of the decay that a start state has undergone when chunk c begins (a sum
    of the chunks' b_last, which every thread has a chunk ahead anyway; one thread writes it).

    ``rows`` (:func:`split_tile`'s choice): a thread's tile of the state is ``rows`` x 4 (8 x 4: half the threads
    for a value tile, twice the multiply-adds per thread and per copy, 12 shared loads per 128 FMAs instead of 16).

    Per chunk the walk steps offsets it keeps (its copies' sources, S_c's row in ``hs``, the gates' row in
    ``bcum``) rather than rebuilding them from indices: whole chunks are copied by :func:`_rows_copier_at`, a
    sequence's last chunk (or a tile with columns past K or V) by :func:`_rows_copier`'s tested copies.

    ``signal`` (:func:`_overlap_kernel`): once S_c is stored, thread 0 adds 1 to ``flags[1 + bh NC + c]`` (int32)
    by a release (:func:`linattn_numba.vec.red_release_add`), so the output blocks of chunk c, running beside the
    walk, know when all value tiles of S_c are there. It is done one chunk late, at the top of chunk c + 1: every
    thread stored its part of S_c before chunk c's last barrier, which thread 0 has passed, so its release covers
    them (CUTLASS's barriers arrive this way), and those stores have landed, so it waits on little."""
    BV4 = BV // 4
    TR = rows  # state rows per thread
    TS = 4 * TR  # the thread's state elements (a local array's size must be a constant)
    NTH = split_state_threads(KP, BV, TR)
    WIDE = BV4 % 8 == 0
    KS, VS = KP + 4, BV + 4
    O_K, O_V, _ = _split_state_layout(C, KP, BV)
    cp_k = _rows_copier(C, KP, NTH, False)
    cp_v = _rows_copier(C, BV, NTH, False)
    start_k, cpat_k = _rows_copier_at(C, KP, NTH)  # whole chunks: from offsets kept and stepped by C rows
    start_v, cpat_v = _rows_copier_at(C, BV, NTH)
    JV, gates_v, factors_v, scale_v = _rows_scaler(C, BV, NTH)
    JV1 = JV + 1
    update = _walk_update(C, KS, VS, TR)

    def split_state(sm, k, v, bcum, h0, ht, hs, lg, x, bh, flags):
        """Value columns x * BV .. x * BV + BV - 1 of head bh, carried through every chunk."""
        T, H, K = k.shape[1], k.shape[2], k.shape[3]
        V = v.shape[3]
        NC = (T + C - 1) // C
        b = bh // H
        h = bh % H
        v0 = x * BV
        tid = cuda.threadIdx.x
        rg, cg = _quad_map(tid, BV4, WIDE)  # the thread's rows TR rg .. TR rg + TR - 1, columns 4 cg .. 4 cg + 3
        S = cuda.local.array(TS, float32)
        xa = cuda.local.array(32, float32)
        ya = cuda.local.array(32, float32)
        fj = cuda.local.array(JV, float32)
        bj = cuda.local.array(JV1, float32)  # the gates of the thread's value rows, loaded a chunk ahead
        lsum = float32(0.0)  # has_lg: the log decay from the sequence start to this chunk's start
        for i in range(TR):
            for j in range(4):
                S[4 * i + j] = float32(0.0)
                if has_h0 and rg * TR + i < K and v0 + cg * 4 + j < V:
                    S[4 * i + j] = h0[b, h, rg * TR + i, v0 + cg * 4 + j]
        # Offsets kept across the chunks and stepped (their 64-bit arithmetic not redone every chunk): the copies'
        # sources (chunk c + 1's rows: whole chunks where NF = T // C says so, and whole tiles of columns), S_c's
        # row in hs, the gates' row in bcum
        NF = T // C
        sk1 = k.strides[1] >> 2
        sv1 = v.strides[1] >> 2
        kwhole = K >= KP
        vwhole = v0 + BV <= V
        srck = start_k(k, b, h, C, 0, tid)
        srcv = start_v(v, b, h, C, v0, tid)
        hs1 = hs.strides[1] >> 2
        ho = bh * (hs.strides[0] >> 2) + rg * TR * hs1 + v0 + cg * 4
        go = bh * (bcum.strides[0] >> 2)
        if NC > 0:  # chunk 0 into buffer 0
            if has_g:
                gates_v(bcum, go, min(C, T), tid, bj)
            cp_k(sm, O_K, KS, k, b, h, 0, min(C, T), K, 0, tid)
            cp_v(sm, O_V, VS, v, b, h, 0, min(C, T), V, v0, tid)
        cp_async_commit()
        for c in range(NC):
            t0 = c * C
            n = min(C, T - t0)
            p = c % 2
            if signal and c > 0 and tid == 0:
                # one more value tile of S_{c-1} stored: every thread stored its part a chunk ago, before chunk c - 1's
                # last barrier, which this thread has passed, so its release makes them all visible before the count
                # (and it waits on little: those stores have landed, this chunk's are not issued yet)
                red_release_add(flags, 1 + bh * NC + c - 1, 1)
            if c + 1 < NC:  # chunk c + 1 into the other buffer: last read by chunk c - 1, before its last barrier
                if c + 1 < NF and kwhole:
                    cpat_k(sm, O_K + (1 - p) * C * KS, KS, k, srck, sk1, tid)
                else:
                    cp_k(sm, O_K + (1 - p) * C * KS, KS, k, b, h, t0 + C, min(C, T - t0 - C), K, 0, tid)
                if c + 1 < NF and vwhole:
                    cpat_v(sm, O_V + (1 - p) * C * VS, VS, v, srcv, sv1, tid)
                else:
                    cp_v(sm, O_V + (1 - p) * C * VS, VS, v, b, h, t0 + C, min(C, T - t0 - C), V, v0, tid)
                srck += C * sk1
                srcv += C * sv1
            cp_async_commit()
            if v0 + cg * 4 < V:  # V is a multiple of 4 here (split_fits): whole quads
                for i in range(TR):
                    st4_at(hs, ho + i * hs1, (S[4 * i], S[4 * i + 1], S[4 * i + 2], S[4 * i + 3]))
            ho += KP * hs1
            gc = float32(1.0)
            if has_g:
                gc = exp_approx(bj[JV])  # gamma_C
                if has_lg:
                    if tid == 0 and cuda.blockIdx.x == 0:
                        lg[bh, c] = lsum
                    lsum += bj[JV]
                factors_v(bj, n, tid, fj)
                if c + 1 < NC:
                    gates_v(bcum, go + t0 + C, min(C, T - t0 - C), tid, bj)  # used by the next chunk
            cp_async_wait_one()  # this thread's copies of chunk c have landed
            if has_g:
                scale_v(sm, O_V + p * C * VS, VS, tid, fj)
            cuda.syncthreads()  # chunk c's K rows and (scaled) values in place for all
            if has_g:
                for e in range(TS):
                    S[e] *= gc
            update(sm, S, xa, ya, O_K + p * C * KS + rg * TR, O_V + p * C * VS + cg * 4)  # P2 (_walk_update)
            cuda.syncthreads()  # chunk c's buffers are read: chunk c + 2 goes there
        cp_async_wait_all()
        if signal and NC > 0 and tid == 0:  # the last chunk's S_c, as above (stored before the loop's last barrier)
            red_release_add(flags, 1 + bh * NC + NC - 1, 1)
        if has_ht:
            for i in range(TR):
                for j in range(4):
                    if rg * TR + i < K and v0 + cg * 4 + j < V:
                        ht[b, h, rg * TR + i, v0 + cg * 4 + j] = S[4 * i + j]

    return cuda.jit(device=True, inline="always")(split_state)


# ----------------------------------------------------------------------------------------------------------
# the split schedule for the delta family: the walk computes V_new and stores it beside S_c
# ----------------------------------------------------------------------------------------------------------
DELTA_SCHEDULE = "split"  # forward(schedule=None)'s choice for the delta family (measured: module docstring)


def _split_delta_layout(C, KP, BV):
    """Offsets (floats) of :func:`_split_delta_kernel`'s shared arrays and the total: two chunk buffers of K's rows
    and two of W's [C, KP + 4], two of U's value tile [C, BV + 4] (V_new times gamma_C / gamma_t over it after P1),
    S_c [KP, BV + 4], the factors gamma_C / gamma_t [C]. 205,056 bytes at C = 64, K' = 128, BV = 64: one block
    per SM."""
    KS, VS = KP + 4, BV + 4
    o_k = 0
    o_w = o_k + 2 * C * KS
    o_v = o_w + 2 * C * KS
    o_s = o_v + 2 * C * VS
    o_f = o_s + KP * VS
    return o_k, o_w, o_v, o_s, o_f, o_f + C


SPLIT_DELTA_SMEM = SMEM_MAX  # the delta walk's limit: what one block may opt in to (H100 / H200)


@functools.lru_cache(maxsize=None)
def _split_delta_kernel(C, KP, BV, has_g, has_h0, has_ht, rows=4):
    """The split schedule's state walk for the delta family, ``split_delta(k, w, u, bcum, h0, ht, hs, vnew)`` on block
    (x, y) = (value tile, b H + h): :func:`_split_state_body` with the delta rule's P1 put back in. Per chunk c::

        hs[c] = S_c;  V_new = U - W S_c  -> vnew (rows t < n);  S <- gamma_C S + K^T diag(gamma_C / gamma) V_new

    with W, U from the intra kernel in state-only mode (``w`` [BH, T', K'], ``u`` [BH, T', V]; rows past the
    sequence's end are zero there) and ``vnew`` [B, T, H, V], which the additive output kernel then reads in place of
    v: o = scale (diag(gamma) Q S_c + Aqk V_new) is the additive family's output with V_new for V (fla's
    ``chunk_gated_delta_rule`` splits the same way: ``chunk_gated_delta_rule_fwd_h``, then ``chunk_fwd_o``).

    Copies as :func:`_split_state_body`'s: chunk c + 1's rows of K, W and U go by ``cp.async`` into the second of two
    buffers while chunk c is computed. The state S lives in registers as there (``rows`` x 4 a thread, by
    :func:`_quad_map`) and is also written to shared memory each chunk, the right factor of P1. P1 is
    :func:`_state_kernel`'s (4 x 4 tiles of [C, BV], rows rr + C/4 i, over all K'; one tile per thread where
    (C / 4)(BV / 4) is the thread count: 8 x 4 tiles of 64 columns, :func:`split_tile`'s choice at the standard
    shape); its epilogue stores V_new to ``vnew`` and V_new gamma_C / gamma_t over U, the right factor of P2 (each
    thread rewrites only its own tile: no barrier between), with the factors gamma_C / gamma_t from a table in
    shared memory that the first C threads fill from gates they loaded a chunk ahead. Three barriers per chunk:
    staged (and S_c and the factors written), V_new complete, buffers read. Sizes as :func:`split_fits` asks (float32
    with 16-byte rows, V a multiple of 4)."""
    BV4 = BV // 4
    TR = rows
    TS = 4 * TR
    NTH = split_state_threads(KP, BV, TR)
    WIDE = BV4 % 8 == 0
    KS, VS = KP + 4, BV + 4
    O_K, O_W, O_V, O_S, O_F, _ = _split_delta_layout(C, KP, BV)
    R4 = C // 4
    NT1 = R4 * BV4  # P1's 4 x 4 tiles of V_new [C, BV]
    JF = cdiv(C, NTH)  # rows of the factor table a thread fills (1 at C = 64, 256 threads)
    JF1 = JF + 1  # a local array's size must be a plain constant
    cp_k = _rows_copier(C, KP, NTH, False)
    start_k, cpat_k = _rows_copier_at(C, KP, NTH)
    cp_w = _rows_copier(C, KP, NTH, True)  # scratch rows are whole chunks (zero past the end): no row tests
    cp_u = _rows_copier(C, BV, NTH, True)
    update = _walk_update(C, KS, VS, TR)

    def split_delta(k, w, u, bcum, h0, ht, hs, vnew):
        """Value columns x * BV .. x * BV + BV - 1 of head y, carried through every chunk."""
        T, H, K = k.shape[1], k.shape[2], k.shape[3]
        V = vnew.shape[3]
        NC = (T + C - 1) // C
        sm = cuda.shared.array(0, float32)
        bh = cuda.blockIdx.y
        b = bh // H
        h = bh % H
        v0 = cuda.blockIdx.x * BV
        tid = cuda.threadIdx.x
        rg, cg = _quad_map(tid, BV4, WIDE)  # the thread's state rows TR rg .. TR rg + TR - 1, columns 4 cg ..
        S = cuda.local.array(TS, float32)
        acc = cuda.local.array(16, float32)
        xa = cuda.local.array(32, float32)
        ya = cuda.local.array(32, float32)
        bq = cuda.local.array(JF1, float32)  # the gates of the thread's factor rows and b_last, a chunk ahead
        for i in range(TR):
            for j in range(4):
                S[4 * i + j] = float32(0.0)
                if has_h0 and rg * TR + i < K and v0 + cg * 4 + j < V:
                    S[4 * i + j] = h0[b, h, rg * TR + i, v0 + cg * 4 + j]
        NF = T // C
        sk1 = k.strides[1] >> 2
        kwhole = K >= KP
        srck = start_k(k, b, h, C, 0, tid)
        hs1 = hs.strides[1] >> 2
        ho = bh * (hs.strides[0] >> 2) + rg * TR * hs1 + v0 + cg * 4
        go = bh * (bcum.strides[0] >> 2)
        if has_g and NC > 0:  # chunk 0's gates (rows t < C are inside bcum: its rows are whole chunks)
            for j in range(JF):
                bq[j] = ld1_at(bcum, go + min(tid + j * NTH, C - 1))
            bq[JF] = ld1_at(bcum, go + min(C, T) - 1)
        if NC > 0:  # chunk 0 into buffer 0
            cp_k(sm, O_K, KS, k, b, h, 0, min(C, T), K, 0, tid)
            cp_w(sm, O_W, KS, w, bh, 0, KP, 0, tid)
            cp_u(sm, O_V, VS, u, bh, 0, V, v0, tid)
        cp_async_commit()
        for c in range(NC):
            t0 = c * C
            n = min(C, T - t0)
            p = c % 2
            if c + 1 < NC:  # chunk c + 1 into the other buffers: last read by chunk c - 1, before its last barrier
                if c + 1 < NF and kwhole:
                    cpat_k(sm, O_K + (1 - p) * C * KS, KS, k, srck, sk1, tid)
                else:
                    cp_k(sm, O_K + (1 - p) * C * KS, KS, k, b, h, t0 + C, min(C, T - t0 - C), K, 0, tid)
                srck += C * sk1
                cp_w(sm, O_W + (1 - p) * C * KS, KS, w, bh, t0 + C, KP, 0, tid)
                cp_u(sm, O_V + (1 - p) * C * VS, VS, u, bh, t0 + C, V, v0, tid)
            cp_async_commit()
            # S_c to hs (the output kernel's) and to shared memory (P1's right factor; last read before the
            # previous chunk's second barrier)
            for i in range(TR):
                sq = (S[4 * i], S[4 * i + 1], S[4 * i + 2], S[4 * i + 3])
                if v0 + cg * 4 < V:  # V is a multiple of 4 here (split_fits): whole quads
                    st4_at(hs, ho + i * hs1, sq)
                st4(sm, O_S + (rg * TR + i) * VS + cg * 4, sq)
            ho += KP * hs1
            b_last = float32(0.0)
            if has_g:
                # gamma_C / gamma_t (0 past the end) from gates loaded a chunk ahead, then the next chunk's asked
                # for: loaded here and used before the barrier below, their round trip would hold up every warp at
                # it once a chunk (the additive walk measured that: _rows_scaler)
                b_last = bq[JF]
                for j in range(JF):
                    t = tid + j * NTH
                    if t < C:
                        f = exp_approx(b_last - bq[j])  # b_t >= b_last: never overflows
                        sm[O_F + t] = f if t < n else float32(0.0)
                if c + 1 < NC:
                    for j in range(JF):
                        bq[j] = ld1_at(bcum, go + t0 + C + min(tid + j * NTH, C - 1))
                    bq[JF] = ld1_at(bcum, go + t0 + C + min(C, T - t0 - C) - 1)
            cp_async_wait_one()  # this thread's copies of chunk c have landed
            cuda.syncthreads()  # chunk c's K, W, U rows, S_c and the factors in place for all

            # -- P1: V_new = U - W S_c; V_new to vnew, V_new gamma_C / gamma_t over U (each thread its own tile) --
            pw = O_W + p * C * KS
            pu = O_V + p * C * VS
            for tile in range(tid, NT1, NTH):
                rr, cc = _quad_map(tile, BV4, WIDE)
                for e in range(16):
                    acc[e] = float32(0.0)
                _mm_nn8(sm, acc, pw, KS, O_S, VS, rr, R4, cc * 4, KP)
                col = v0 + cc * 4
                for i in range(4):
                    row = rr + R4 * i
                    pv = pu + row * VS + cc * 4
                    y = ld4(sm, pv)
                    d0 = y[0] - acc[4 * i]
                    d1 = y[1] - acc[4 * i + 1]
                    d2 = y[2] - acc[4 * i + 2]
                    d3 = y[3] - acc[4 * i + 3]
                    if row < n and col < V:
                        st4(vnew, (b, t0 + row, h, col), (d0, d1, d2, d3))
                    f = sm[O_F + row] if has_g else float32(1.0)  # rows past n: U = W = 0, so V_new = 0
                    st4(sm, pv, (d0 * f, d1 * f, d2 * f, d3 * f))
            cuda.syncthreads()  # V_new complete

            # -- P2: S <- gamma_C S + K^T diag(gamma_C / gamma) V_new, as _split_state_body's --
            if has_g:
                gc = exp_approx(b_last)
                for e in range(TS):
                    S[e] *= gc
            update(sm, S, xa, ya, O_K + p * C * KS + rg * TR, pu + cg * 4)
            cuda.syncthreads()  # chunk c's buffers, S_c and the factors are read: chunk c + 2 goes there
        cp_async_wait_all()
        if has_ht:
            for i in range(TR):
                for j in range(4):
                    if rg * TR + i < K and v0 + cg * 4 + j < V:
                        ht[b, h, rg * TR + i, v0 + cg * 4 + j] = S[4 * i + j]

    if config.ENABLE_CUDASIM:
        return cuda.jit(split_delta)
    # one block per SM (its shared memory), so the register bound is the block's own: 255 a thread
    return cuda.jit(split_delta, launch_bounds=(NTH, 1))


def _out_shape(C, KP):
    """``(SR, CBW)``: rows of a slab (a piece of S_c's rows or of the value rows that the pipelined output kernel
    copies at once) and value columns per pass (one 4 x 8 tile per thread: 8 C / 4 = 2 C)."""
    return min(32, KP, C), 2 * C


def _out_layout(C, KP, pad=0):
    """Offsets (floats) of :func:`_out_pipeline`'s shared arrays, and the total: R (K's rows for the scores, then
    slab buffers X1 and X2), X0 (slab buffer), Q's rows, Aqk, b. Slabs are [SR, CBW + pad]; r3's unpadded: every
    lane of a warp reads the same slab row at a time (8 consecutive float4: one wavefront). At C = 64, K' = 128 the
    two slab buffers fit in K's [C, KP + 4] and the block takes 101.6 KB (103.7 KB with r6's pad of 8): two blocks
    per SM."""
    KS, CS = KP + 4, C + 4
    SR, CBW = _out_shape(C, KP)
    SW = CBW + pad
    o_r = 0
    o_x0 = o_r + max(C * KS, 2 * SR * SW)
    o_q = o_x0 + SR * SW
    o_aqk = o_q + C * KS
    o_b = o_aqk + C * CS
    return o_r, o_x0, o_q, o_aqk, o_b, o_b + C


@functools.lru_cache(maxsize=None)
def _rows_copier(ROWS, COLS, NTH, scratch):
    """:func:`_rows_stager`'s fixed map with asynchronous copies (``cp.async``,
    :func:`linattn_numba.vec.cp_async16_at`): each thread issues its J 16-byte copies and goes on; they land in
    shared memory while the thread computes, and :func:`linattn_numba.vec.cp_async_wait_one` / ``wait_all`` then a
    barrier make them visible. No registers hold the data and nothing is scaled. The source is a per-thread element
    offset stepped by the row stride (a 4-D index costs ~45 instructions per copy in address arithmetic). A whole
    tile of rows inside (``n >= ROWS`` and ``c0 + COLS <= lim``, the block agrees) is copied with no test per copy.
    ``scratch``: ``x`` [BH, rows, n] (``copy(sm, off, stride, x, bh, r0, lim, c0, tid)``, rows r0 + t); else
    [B, T, H, n] (``copy(sm, off, stride, x, b, h, t0, n, lim, c0, tid)``: rows t >= n zero). Rows are
    contiguous (``vin``). Columns ``c0 + d >= lim`` are zero. Zero-filled copies read nothing (their source is
    the row's first element all the same, a valid address)."""
    QPR = COLS // 4
    RSTEP = NTH // QPR
    J = cdiv(ROWS, RSTEP)

    if scratch:
        def copy(sm, off, stride, x, bh, r0, lim, c0, tid):
            d = 4 * (tid % QPR)
            tf = tid // QPR
            s1 = x.strides[1] >> 2  # float32 strides: multiples of 4 bytes (a shift, not a signed division)
            inside = c0 + d < lim  # the same for all the thread's copies: no test per copy
            src = bh * (x.strides[0] >> 2) + (r0 + tf) * s1 + (c0 + d if inside else 0)
            for j in range(J):
                t = tf + j * RSTEP
                if ROWS % RSTEP == 0 or t < ROWS:
                    cp_async16_at(sm, off + t * stride + d, x, src + j * RSTEP * s1, 16 if inside else 0)
    else:
        start, whole = _rows_copier_at(ROWS, COLS, NTH)

        def copy(sm, off, stride, x, b, h, t0, n, lim, c0, tid):
            s1 = x.strides[1] >> 2
            src = start(x, b, h, t0, c0, tid)
            if n >= ROWS and c0 + COLS <= lim:  # the whole tile inside (all but a sequence's last chunk): no tests
                whole(sm, off, stride, x, src, s1, tid)
                return
            d = 4 * (tid % QPR)
            tf = tid // QPR
            row0 = b * (x.strides[0] >> 2) + h * (x.strides[2] >> 2)  # a valid source for the zero-filled copies
            cin = c0 + d < lim
            for j in range(J):
                t = tf + j * RSTEP
                if ROWS % RSTEP == 0 or t < ROWS:
                    inside = t < n and cin
                    cp_async16_at(sm, off + t * stride + d, x, src + j * RSTEP * s1 if inside else row0,
                                  16 if inside else 0)
    return cuda.jit(device=True, inline="always")(copy)


@functools.lru_cache(maxsize=None)
def _rows_copier_at(ROWS, COLS, NTH):
    """``(start, copy)``: :func:`_rows_copier`'s map (not ``scratch``) for a tile wholly inside ``x`` [B, T, H, n]
    (:func:`_rows_copier`'s own copies of a whole tile are these),
    from a source offset that the caller keeps and steps instead of rebuilding it at every call (the state walk
    copies the same columns of the next C rows every chunk: rebuilt, its two copies' offsets and tests took ~55
    instructions a warp and chunk, 64-bit arithmetic). ``start(x, b, h, t, c0, tid)`` is the element offset of
    the thread's first piece (row t + tf, column c0 + d of head (b, h)); ``copy(sm, off, stride, x, src, s1,
    tid)`` issues its J 16-byte copies from ``src``, ``src + RSTEP s1``, ... with ``s1`` = ``x.strides[1] >>
    2`` (a row). Strides are shifted, not divided: a float32 array's are multiples of 4 bytes, and a signed
    division by 4 is four instructions."""
    QPR = COLS // 4
    RSTEP = NTH // QPR
    J = cdiv(ROWS, RSTEP)

    def start(x, b, h, t, c0, tid):
        return (b * (x.strides[0] >> 2) + h * (x.strides[2] >> 2) + (t + tid // QPR) * (x.strides[1] >> 2) + c0
                + 4 * (tid % QPR))

    def copy(sm, off, stride, x, src, s1, tid):
        d = 4 * (tid % QPR)
        tf = tid // QPR
        for j in range(J):
            t = tf + j * RSTEP
            if ROWS % RSTEP == 0 or t < ROWS:
                cp_async16_at(sm, off + t * stride + d, x, src + j * RSTEP * s1, 16)

    dev = cuda.jit(device=True, inline="always")
    return dev(start), dev(copy)


@functools.lru_cache(maxsize=None)
def _rows_adder(ROWS, COLS, NTH):
    """For the 16-byte pieces that :func:`_rows_copier` (same sizes, ``scratch``) has a thread copy: add
    ``w x[b, h, r0 + t, c0 + d .. c0 + d + 3]`` to the thread's own 4 floats of row t in shared memory, for rows
    r0 + t < ``rlim`` and columns c0 + d < ``clim`` (the others are left as they are: the copier zero-filled them).
    Once its own copies have landed (``cp.async.wait_group``) a thread may rewrite them before the barrier that
    publishes them, so the correction costs no barrier. All J loads of ``x`` are issued before the first add."""
    QPR = COLS // 4
    RSTEP = NTH // QPR
    J = cdiv(ROWS, RSTEP)
    J4 = 4 * J  # a local array's size must be a constant

    def add(sm, off, stride, x, b, h, r0, rlim, c0, clim, w, tid):
        d = 4 * (tid % QPR)
        tf = tid // QPR
        if c0 + d < clim:
            xr = cuda.local.array(J4, float32)
            for j in range(J):
                r = r0 + tf + j * RSTEP
                y = ld4(x, (b, h, min(r, rlim - 1), c0 + d))  # a valid row (rlim >= 1); unused past rlim
                for e in range(4):
                    xr[4 * j + e] = y[e]
            for j in range(J):
                t = tf + j * RSTEP
                if (ROWS % RSTEP == 0 or t < ROWS) and r0 + t < rlim:
                    p = off + t * stride + d
                    z = ld4(sm, p)
                    st4(sm, p, (z[0] + w * xr[4 * j], z[1] + w * xr[4 * j + 1], z[2] + w * xr[4 * j + 2],
                                z[3] + w * xr[4 * j + 3]))

    return cuda.jit(device=True, inline="always")(add)


@functools.lru_cache(maxsize=None)
def _mm_4x8_stepper(eorder=False):
    """Steps m .. m + 3 of :func:`_mm_4x8` (``step(sm, acc, a, bb, oa, sa, ra, ob, sb, c0, hb, m)``): 4 + 8 loads,
    then 128 FMAs, tile row i outermost, or (``eorder``) the step of m outermost: every accumulator's sum in the same
    order either way, another schedule from ptxas (bb's registers free a step earlier)."""

    @cuda.jit(device=True, inline="always")
    def step(sm, acc, a, bb, oa, sa, ra, ob, sb, c0, hb, m):
        for i in range(4):
            x = ld4(sm, oa + ra[i] * sa + m)
            for e in range(4):
                a[4 * i + e] = x[e]
        for e in range(4):
            y = ld4(sm, ob + (m + e) * sb + c0)
            z = ld4(sm, ob + (m + e) * sb + c0 + hb)
            for j in range(4):
                bb[8 * e + j] = y[j]
                bb[8 * e + 4 + j] = z[j]
        if eorder:
            for e in range(4):
                for i in range(4):
                    for j in range(8):
                        acc[8 * i + j] += a[4 * i + e] * bb[8 * e + j]
        else:
            for i in range(4):
                for e in range(4):
                    for j in range(8):
                        acc[8 * i + j] += a[4 * i + e] * bb[8 * e + j]

    return step


@functools.lru_cache(maxsize=None)
def _mm_4x8_loop(eorder=False, by=16):
    """The loop ``mm(sm, acc, oa, sa, ra, ob, sb, c0, hb, kdim)``: acc[8 i + j] += sum_m A[ra[i], m] B[m, col_j] for
    a 4 x 8 micro-tile, m < kdim (a multiple of ``by``): rows ``ra[0..3]`` of A (row-major at ``sm[oa + row * sa +
    m]``), columns ``c0 .. c0 + 3`` and ``c0 + hb .. c0 + hb + 3`` of B (at ``sm[ob + m * sb + col]``). Per 4 steps
    of m (:func:`_mm_4x8_stepper`, ``eorder`` its FMAs' order): 4 + 8 loads of 16 bytes, 128 FMAs (a 4 x 4 tile: 8
    loads per 64 FMAs, :func:`_mm_nn`). ``by`` / 4 such steps per loop step, written out: every load's address is
    then a base register plus a constant (with one step per loop step, ptxas rebuilt the addresses each step).
    ``by`` = 8 (OUT_TRI's ``8``: 8-row bands end on multiples of 8); steps of 16 and then a last 8 made ptxas spill
    116 bytes in the overlapped launch (decay)."""
    if by not in (8, 16):
        raise ValueError(f"_mm_4x8_loop: by must be 8 or 16, got {by}")
    step = _mm_4x8_stepper(eorder)

    @cuda.jit(device=True, inline="always")
    def mm(sm, acc, oa, sa, ra, ob, sb, c0, hb, kdim):
        a = cuda.local.array(16, float32)
        bb = cuda.local.array(32, float32)
        for m in range(0, kdim, by):
            step(sm, acc, a, bb, oa, sa, ra, ob, sb, c0, hb, m)
            step(sm, acc, a, bb, oa, sa, ra, ob, sb, c0, hb, m + 4)
            if by == 16:
                step(sm, acc, a, bb, oa, sa, ra, ob, sb, c0, hb, m + 8)
                step(sm, acc, a, bb, oa, sa, ra, ob, sb, c0, hb, m + 12)

    return mm


_mm_4x8_step = _mm_4x8_stepper(False)
_mm_4x8 = _mm_4x8_loop(False, 16)


@functools.lru_cache(maxsize=None)
def _out_fma_products(C, KP, band=16, eorder=False, step8=False):
    """The product steps of r3's output kernel (:func:`_out_pipeline`'s ``products``), on the FMA units: one 4 x 8
    accumulator tile a thread (:func:`_mm_4x8`).

    Thread map: tile (rr, cc) by :func:`_quad_map` (a warp: 4 tile rows x 8 tile columns). Rows
    ``4 rr + ((i + 2 ((rr >> 1) & 1)) & 3)``: the four rows a warp reads in one 128-bit load of A fall in distinct
    bank groups (rows 4 apart would pair up at a row stride of 33 float4, K' + 4 or C + 4 floats); columns
    ``c0 + 0..3`` and ``c0 + HB + 0..3``: 8 lanes read 8 consecutive float4 of a slab row. ``ctx``: the rows
    (0..3), c0 (4) and the warp's last row + 1 (5: Aqk is zero past it).

    ``band`` = 8 (:data:`OUT_TRI`'s ``b``, at C = 64 only): 2 x 16 tiles a warp (:func:`_quad_map` row-major), so
    a warp's rows span 8 rows, not 16; each load of the right factor then reads 16 distinct float4 of a slab row,
    two wavefronts where the 4 x 8 map needs one. ``eorder`` (``e``): :func:`_mm_4x8_stepper`'s order. ``step8`` (``8``,
    with ``band`` = 8): Aqk V in steps of 8 (:func:`_mm_4x8_loop`); in steps of 16 an 8-row band's product runs to the
    end of its 16-row band, the same FMAs as the 4 x 8 map.

    What the triangle costs (counted from the loops, at C = 64, K' = V = 128): ``Aqk V`` stops at a warp's last
    row, so its 16-row bands multiply 16, 32, 48, 64 rows of V: 327,680 FMAs a block where the lower triangle needs
    266,240 (8-row bands in steps of 8: 294,912); the scores' 16 x 8 sub-tiles on the diagonal (:func:`_out_scores`)
    do the same again, 327,680 for 266,240 (294,912 with ``skip``). The 122,880 FMAs above the diagonal are 7.2 % of
    a block's 1.70 M (``Q S_c`` is 1.05 M) and 4.5 % of the overlapped launch's FMAs with the walk's 1.05 M a
    chunk. What each letter measured: the module docstring (the output kernel's triangle)."""
    C4 = C // 4
    WIDE = C4 % 8 == 0
    band = band if C4 == 16 else 16  # 2 x 16 tiles a warp are 8-row bands only where C / 4 = 16
    CG = min(8, C4)  # tile columns per column group of a warp
    HB = 4 * CG
    KS, CS = KP + 4, C + 4
    SR, CBW = _out_shape(C, KP)
    _, _, O_Q, O_AQK, O_B, _ = _out_layout(C, KP)

    @cuda.jit(device=True, inline="always")
    def fma_setup(ctx, tid):
        rr, cc = _quad_map(tid, C4, WIDE and band == 16)
        sh = 2 * ((rr >> 1) & 1)
        for i in range(4):
            ctx[i] = 4 * rr + ((i + sh) & 3)
        ctx[4] = 2 * HB * (cc // CG) + 4 * (cc % CG)
        if band == 16:
            ctx[5] = 4 * (rr - rr % 4) + 16
        else:  # 2 x 16 tiles a warp (band 8 rows)
            ctx[5] = 4 * (rr - rr % 2) + 8

    mm = _mm_4x8_loop(eorder, 16)
    mmv = _mm_4x8_loop(eorder, 8 if band == 8 and step8 else 16)  # Aqk V: 8-row bands stop on multiples of 8

    @nvvm_inline  # called from each slab's step (OUT_UNROLL): inlined by Numba, 2.7x the compile time
    def fma_state(sm, acc, ctx, off, s):
        mm(sm, acc, O_Q + s * SR, KS, ctx, off, CBW, ctx[4], HB, SR)

    @cuda.jit(device=True, inline="always")
    def fma_gate(sm, acc, ctx):
        for i in range(4):
            gr = exp_approx(sm[O_B + ctx[i]])  # gamma_t = exp(b_t) <= 1
            for e in range(8):
                acc[8 * i + e] *= gr

    @nvvm_inline
    def fma_value(sm, acc, ctx, off, sv):
        kd = min(SR, ctx[5] - sv)
        if kd > 0:
            mmv(sm, acc, O_AQK + sv, CS, ctx, off, CBW, ctx[4], HB, kd)

    @cuda.jit(device=True, inline="always")
    def fma_store(o, acc, ctx, b, h, t0, n, col, V, scale):
        for i in range(4):
            rw = ctx[i]
            if rw < n:
                for u in range(2):
                    cu = col + ctx[4] + u * HB
                    e = 8 * i + 4 * u
                    if cu < V:  # V a multiple of 4: the whole quad
                        st4(o, (b, t0 + rw, h, cu), (scale * acc[e], scale * acc[e + 1], scale * acc[e + 2],
                                                     scale * acc[e + 3]))

    return fma_setup, fma_state, fma_gate, fma_value, fma_store


OUT_TRI = "sbe"  # the output kernel's triangle and map (read at launch; tools/tune_r3.py --vary): letters below


def _out_tri():
    """``(skip, band, eorder, step8)`` of the output kernel from :data:`OUT_TRI`'s letters (``""`` or ``"none"``:
    none of them; the default ``"sbe"`` was measured fastest on the H200, the module docstring):

    * ``s``: the scores' warps whose rows all lie above sub-tile 2 i + 1 skip it (:func:`_out_scores`, C = 64);
    * ``b``: 2 x 16 tiles a warp for the products (8-row bands; :func:`_out_fma_products`), 4 x 8 without;
    * ``e``: the products' FMAs with the step of the inner dimension outermost (:func:`_mm_4x8_stepper`);
    * ``8``: with ``b``, Aqk V in steps of 8 of its inner dimension, so an 8-row band stops at its own end
      (:func:`_mm_4x8_loop`; in steps of 16 it stops where a 16-row band would)."""
    t = "" if OUT_TRI in (None, "none") else str(OUT_TRI)
    if set(t) - set("sbe8"):
        raise ValueError(f"rung {NAME!r}: OUT_TRI takes letters of 'sbe8', got {OUT_TRI!r}")
    return "s" in t, 8 if "b" in t else 16, "e" in t, "8" in t


OUT_UNROLL = True  # r3's output: each pass's slabs written out (_out_body's slab_step), not a loop (read at launch)
OUT_CTX = 10  # integers of a thread's map in _out_pipeline (the products' setup fills what they use)


def _out_pipeline(C, KP, has_g, has_x, products, pad=0, skip=False, unroll=False):
    """The split schedule's output kernel: :func:`_out_body` on block (x, y) = (chunk, b H + h)."""
    body = _out_body(C, KP, has_g, has_x, products, pad, False, skip, unroll)

    def out(q, k, v, bcum, hs, o, scale, x, lg):
        """Chunk x of head y: o[b, t0 + t, h, :V] for the chunk's rows t < n."""
        none = cuda.local.array(1, types.int32)  # no flags: S_c is there (never touched)
        H = q.shape[2]
        body(cuda.shared.array(0, float32), q, k, v, bcum, hs, o, scale, x, lg, cuda.blockIdx.x,
             cuda.blockIdx.y // H, cuda.blockIdx.y % H, none, 0)

    if config.ENABLE_CUDASIM:
        return cuda.jit(out)
    return cuda.jit(out, launch_bounds=((C // 4) ** 2, INTRA_MIN_BLOCKS))


@functools.lru_cache(maxsize=None)
def _out_body(C, KP, has_g, has_x, products, pad, wait, skip=False, unroll=False):
    """The split schedule's output (a device function, ``body(sm, q, k, v, bcum, hs, o, scale, x, lg, c, b, h, flags,
    ntiles)`` for chunk c of head (b, h); :func:`_out_pipeline` and :func:`_overlap_kernel` run it), one chunk of one
    head per block (fla's ``chunk_fwd_o``), its copies
    overlapped with its products: ``O = scale (diag(gamma) Q S_c + Aqk V)`` with S_c the chunk's starting state,
    written by the state kernel (``store``) to ``hs``. The copies, slabs, buffers and barriers are here; the
    products are ``products`` = (setup, state, gate, value, store), inline device functions on a thread's 32
    accumulators ``acc`` and :data:`OUT_CTX` integers ``ctx`` (its map, which ``setup(ctx, tid)`` fills):
    ``state(sm, acc, ctx, off, s)`` adds Q's columns of slab s times the slab at ``off``, ``gate(sm, acc, ctx)``
    scales rows by gamma_t, ``value(sm, acc, ctx, off, sv)`` adds Aqk's columns sv .. sv + SR times the value slab at
    ``off``, ``store(o, acc, ctx, b, h, t0, n, col, V, scale)`` writes the pass. r3's are
    :func:`_out_fma_products` (:func:`_out_kernel`), r6's the same products on the tensor cores
    (``r6_tensor_cores._out_pipe_kernel``). ``pad``: floats after every slab row (r6's B fragments read down 4 slab
    rows: 8 floats keep them conflict-free).

    K's and Q's rows arrive by ``cp.async`` (:func:`_rows_copier`), then the scores (:func:`_out_scores`) run while
    the first slab of S_c arrives. After them everything streams in slabs of SR rows x CBW columns through three
    buffers (X0, and X1, X2 in K's space, free once the scores are done): per pass of CBW value columns, S_c's
    K' / SR slabs (``acc += Q[:, slab] S_c[slab, :]``), then ``acc *= gamma_t``, then the chunk's C / SR value
    slabs (``acc += Aqk[:, slab] V[slab, :]``, only up to the diagonal). While slab j is multiplied, slabs j + 1
    and j + 2 are in flight: one commit group each, ``wait_group 1`` then a barrier before slab j + 1 is read (and
    before slab j + 3 is issued over slab j's buffer).

    ``has_x`` (the deferred start state, :func:`split_deferred`): hs holds the states of a walk from zero, and
    S_c = hs_c + exp(lg_c) X with X = ``x[b, h]`` the sequence's start state (r4's segments, whose start states
    are known only after every segment's walk) and lg_c the log decay before chunk c (``lg``; 0 without g): each
    thread adds exp(lg_c) X to the pieces of S_c's slabs that it copied once they have landed
    (:func:`_rows_adder`), before the barrier that publishes the slab. X is read from L2 (one [K, V] per head,
    shared by the sequence's every chunk). Asking L1 for slab j + 1's pieces of X while slab j is multiplied
    (``prefetch.L1``, no registers held) made r4 at the long decay shape slower on the H200: 5.66 against 5.53 ms
    (``probes/h200_r4_x_prefetch_944bc1d.json``), so the loads stay as they are; so did issuing them into registers
    before slab j's products (5.95 ms: 16 registers held across the products, 128 spilled bytes against 52 in r6's
    kernel) or between those products and the wait (5.56; ``probes/h200_r4_x_ahead_e328b8e.json``). What X costs is
    its bytes, not its latency: at 1M tokens the kernel moves 2.1 GB more through L2 and runs 0.29 ms longer than
    four standard shapes (``probes/h200_ncu_r4_decay_1M_a9af1e5.csv``). Sizes as :func:`split_fits` asks (every
    size a constant).

    ``wait`` (:func:`_overlap_kernel`, where the state walk runs beside this block): once K's and Q's copies are
    issued, thread 0 waits until ``flags[1 + bh NC + c]`` counts ``ntiles`` (every value tile of S_c stored by the
    walk), reading it by ``ld.acquire.gpu`` (:func:`linattn_numba.vec.ld_acquire`) while the copies are in flight;
    the barrier that publishes K's and Q's rows then hands its view to the block, and only then is S_c's first slab
    copied.

    ``unroll`` (:data:`OUT_UNROLL`): the slab loop below as each pass's slabs written out (``slab_step``, the module
    docstring: same products, same order, same bits)."""
    C4 = C // 4
    NTH = C4 * C4
    KS, CS = KP + 4, C + 4
    SR, CBW = _out_shape(C, KP)
    SW = CBW + pad
    NSS = KP // SR  # slabs of S_c per pass
    NSP = NSS + C // SR  # slabs per pass
    SL = SR * SW
    O_R, O_X0, O_Q, O_AQK, O_B, _ = _out_layout(C, KP, pad)
    cp_rows = _rows_copier(C, KP, NTH, False)  # K, Q
    cp_val = _rows_copier(SR, CBW, NTH, False)  # a value slab
    cp_state = _rows_copier(SR, CBW, NTH, True)  # a slab of S_c's rows from hs
    add_x = _rows_adder(SR, CBW, NTH)  # has_x: exp(lg_c) X added to the thread's own pieces of a slab of S_c
    setup, state_step, gate, value_step, store = products

    # Slab j sits in buffer j mod 3 and is slab j mod NSP of pass j // NSP. The loop below keeps these as counters
    # stepped once a slab (and the same for slab j + 1 and j + 3, whose buffer is slab j's): computed from j, the
    # divisions by 3 and NSP are 64-bit multiply-high sequences, ~60 instructions a slab in the SASS
    S0 = tuple(k % NSP for k in range(4))  # slab within its pass of slabs 0 .. 3 (tuples: compile-time constants)
    COL0 = tuple((k // NSP) * CBW for k in range(4))  # first value column of their passes

    @cuda.jit(device=True, inline="always")
    def buf(r):
        return O_X0 if r == 0 else O_R + (r - 1) * SL

    @cuda.jit(device=True, inline="always")
    def issue_state(sm, v, hs, b, h, bh, c, t0, n, V, s, col, off, tid):
        """Copy slab s < NSS (S_c's rows s SR .., of the pass from value column ``col``) into the buffer at
        ``off``."""
        cp_state(sm, off, SW, hs, bh, c * KP + s * SR, V, col, tid)

    @cuda.jit(device=True, inline="always")
    def issue_value(sm, v, hs, b, h, bh, c, t0, n, V, s, col, off, tid):
        """Copy slab s >= NSS (the chunk's value rows (s - NSS) SR ..) likewise."""
        sv = (s - NSS) * SR
        cp_val(sm, off, SW, v, b, h, t0 + sv, n - sv, V, col, tid)

    @cuda.jit(device=True, inline="always")
    def issue(sm, v, hs, b, h, bh, c, t0, n, V, s, col, off, tid):
        """Copy slab s, whichever it is (``slab_step`` knows which, and calls the one it needs)."""
        if s < NSS:
            issue_state(sm, v, hs, b, h, bh, c, t0, n, V, s, col, off, tid)
        else:
            issue_value(sm, v, hs, b, h, bh, c, t0, n, V, s, col, off, tid)

    def hand_over(copy):
        """From slab j to slab j + 1 (``hand(sm, v, hs, x, w, b, h, bh, c, t0, n, V, K, tid, r, s1, col1, s3, col3,
        off, more)``; slab j in buffer r at ``off``, slab j + 1 is slab s1 of the pass from column col1): wait for
        this thread's copies of slab j + 1, then the barrier, then slab j + 3 (slab s3 from column col3, if
        ``more``) copied by ``copy`` into slab j's buffer. The loop passes :func:`issue`, ``slab_step`` the one it
        needs."""

        @cuda.jit(device=True, inline="always")
        def hand(sm, v, hs, x, w, b, h, bh, c, t0, n, V, K, tid, r, s1, col1, s3, col3, off, more):
            cp_async_wait_one()
            if has_x and s1 < NSS:
                add_x(sm, buf(r + 1 if r < 2 else 0), SW, x, b, h, s1 * SR, K, col1, V, w, tid)
            cuda.syncthreads()  # slab j + 1 in place for all; slab j is read: its buffer takes slab j + 3
            if more:
                copy(sm, v, hs, b, h, bh, c, t0, n, V, s3, col3, off, tid)
            cp_async_commit()

        return hand

    hand_any = hand_over(issue)

    def slab_step(s):
        """``unroll``: slab s of a pass as a device function ``step(sm, v, hs, o, scale, x, w, b, h, bh, c, t0, n, V,
        K, tid, ctx, acc, p, npass, rp)``: the loop's step (below) for one slab of pass p, with s a constant
        here in Python, so that the product, the copy of slab j + 3 and the buffers are chosen once, when the kernel
        is built (the loop's counters of slab, buffer and column cost ~50 instructions a slab and warp, in 64-bit
        uniform arithmetic), and the other paths are not compiled at all (written as branches on s, the six slabs'
        copies of every path took Numba 3.5 minutes to compile)."""
        S1, D1 = (s + 1) % NSP, (s + 1) // NSP  # slab j + 1: its slab within its pass, and the passes ahead
        S3, D3 = (s + 3) % NSP, (s + 3) // NSP  # slab j + 3, copied into slab j's buffer once that is read
        LAST = s + 1 == NSP  # the pass's last slab: the store, and a next slab only if another pass follows
        GATE = has_g and s == NSS - 1
        FIXED = NSP % 3 == 0  # every pass's slab s in the same buffer (s mod 3)
        R = s % 3
        product = state_step if s < NSS else value_step
        arg = s if s < NSS else (s - NSS) * SR  # the state slab, or the value rows' first
        hand = hand_over(issue_state if S3 < NSS else issue_value)

        @cuda.jit(device=True, inline="always")
        def step(sm, v, hs, o, scale, x, w, b, h, bh, c, t0, n, V, K, tid, ctx, acc, p, npass, rp):
            # pinned here: the copies' offsets, computed from them, stay in this step (not hoisted to the kernel's
            # start and held across the products: 96 bytes spilled for decay, 24 for plain)
            c = pinned(c)
            t0 = pinned(t0)
            col = pinned(p) * CBW
            r = R if FIXED else (rp + s) % 3  # slab j = p NSP + s sits in buffer j mod 3
            off = buf(r)
            product(sm, acc, ctx, off, arg)
            if GATE:
                gate(sm, acc, ctx)
            if LAST:
                store(o, acc, ctx, b, h, t0, n, col, V, scale)
            if not LAST or p + 1 < npass:
                hand(sm, v, hs, x, w, b, h, bh, c, t0, n, V, K, tid, r, S1, col + D1 * CBW, S3, col + D3 * CBW, off,
                     p + D3 < npass)

        return step

    @cuda.jit(device=True, inline="always")
    def none(sm, v, hs, o, scale, x, w, b, h, bh, c, t0, n, V, K, tid, ctx, acc, p, npass, rp):
        """A pass's slab s >= NSP (there is none)."""
        pass

    if unroll and NSP > 9:
        raise ValueError(f"rung {NAME!r}: the output's written-out pass takes at most 9 slabs, got {NSP}")
    # ``unroll``: a pass is steps sl0 .. sl8, each called once (calls in sequence: a chain of calls nested in calls
    # made Numba copy the IR of every level into the next, minutes of compiling); those past NSP do nothing
    sl0, sl1, sl2, sl3, sl4, sl5, sl6, sl7, sl8 = (slab_step(i) if unroll and i < NSP else none for i in range(9))

    def out(sm, q, k, v, bcum, hs, o, scale, x, lg, c, b, h, flags, ntiles):
        """Chunk c of head (b, h): o[b, t0 + t, h, :V] for the chunk's rows t < n."""
        T, H, K = q.shape[1], q.shape[2], q.shape[3]
        V = v.shape[3]
        bh = b * H + h
        tid = cuda.threadIdx.x
        t0 = c * C
        n = min(C, T - t0)
        NSL = ((V + CBW - 1) // CBW) * NSP
        if has_g and tid < C // 4:  # b by cp.async too (loaded into registers, its wait stalled the prologue)
            cp_async16_at(sm, O_B + 4 * tid, bcum, bh * (bcum.strides[0] >> 2) + t0 + 4 * tid, 16)
        cp_rows(sm, O_R, KS, k, b, h, t0, n, K, 0, tid)
        cp_rows(sm, O_Q, KS, q, b, h, t0, n, K, 0, tid)
        cp_async_commit()
        if wait:
            if tid == 0:  # S_c's count, read while K's and Q's rows are on their way
                fi = 1 + bh * ((T + C - 1) // C) + c
                while ld_acquire(flags, fi) < ntiles:  # acquire: nothing this block reads later can pass it
                    _backoff()
            cp_async_wait_all()
            cuda.syncthreads()  # K's and Q's rows and b in place; S_c is there (thread 0 saw the walk's releases)
        issue(sm, v, hs, b, h, bh, c, t0, n, V, S0[0], COL0[0], buf(0), tid)  # slab 0 into X0: lands during the scores
        cp_async_commit()
        if not wait:
            cp_async_wait_one()
            cuda.syncthreads()  # K's and Q's rows and b in place
        _out_scores(sm, O_R, O_Q, O_AQK, O_B, KS, CS, C, KP, tid, has_g, skip)
        cp_async_wait_all()
        w = float32(1.0)
        if has_x:
            if has_g:
                w = math.exp(lg[bh, c])  # the decay since the sequence start: <= 1
            add_x(sm, buf(0), SW, x, b, h, 0, K, 0, V, w, tid)  # slab 0: S_c's first SR rows, pass 0
        cuda.syncthreads()  # Aqk complete (zero above the diagonal), slab 0 in place; K's rows are read: X1, X2 free
        if NSL > 1:
            issue(sm, v, hs, b, h, bh, c, t0, n, V, S0[1], COL0[1], buf(1), tid)
        cp_async_commit()
        if NSL > 2:
            issue(sm, v, hs, b, h, bh, c, t0, n, V, S0[2], COL0[2], buf(2), tid)
        cp_async_commit()
        ctx = cuda.local.array(OUT_CTX, types.int32)  # constant indices only: registers
        setup(ctx, tid)
        acc = cuda.local.array(32, float32)
        if unroll:  # the loop below with each pass's slabs written out (slab_step)
            npass = NSL // NSP
            rp = 0  # the buffer of the pass's first slab, (p NSP) mod 3
            for p in range(npass):
                for e in range(32):
                    acc[e] = float32(0.0)
                sl0(sm, v, hs, o, scale, x, w, b, h, bh, c, t0, n, V, K, tid, ctx, acc, p, npass, rp)
                sl1(sm, v, hs, o, scale, x, w, b, h, bh, c, t0, n, V, K, tid, ctx, acc, p, npass, rp)
                sl2(sm, v, hs, o, scale, x, w, b, h, bh, c, t0, n, V, K, tid, ctx, acc, p, npass, rp)
                sl3(sm, v, hs, o, scale, x, w, b, h, bh, c, t0, n, V, K, tid, ctx, acc, p, npass, rp)
                sl4(sm, v, hs, o, scale, x, w, b, h, bh, c, t0, n, V, K, tid, ctx, acc, p, npass, rp)
                sl5(sm, v, hs, o, scale, x, w, b, h, bh, c, t0, n, V, K, tid, ctx, acc, p, npass, rp)
                sl6(sm, v, hs, o, scale, x, w, b, h, bh, c, t0, n, V, K, tid, ctx, acc, p, npass, rp)
                sl7(sm, v, hs, o, scale, x, w, b, h, bh, c, t0, n, V, K, tid, ctx, acc, p, npass, rp)
                sl8(sm, v, hs, o, scale, x, w, b, h, bh, c, t0, n, V, K, tid, ctx, acc, p, npass, rp)
                rp = (rp + NSP) % 3
            return
        for e in range(32):
            acc[e] = float32(0.0)
        r = 0  # buffer of slab j (0, 1, 2: X0, X1, X2); slab j + 3 goes there too
        s = 0  # slab j within its pass
        col = 0  # first value column of slab j's pass
        s3 = S0[3]  # slab j + 3 within its pass, and its pass's first column
        col3 = COL0[3]
        for j in range(NSL):
            off = buf(r)
            r1 = r + 1 if r < 2 else 0
            s1 = s + 1 if s < NSP - 1 else 0  # slab j + 1 within its pass
            col1 = col if s < NSP - 1 else col + CBW
            if s < NSS:
                state_step(sm, acc, ctx, off, s)
                if has_g and s == NSS - 1:
                    gate(sm, acc, ctx)
            else:
                value_step(sm, acc, ctx, off, (s - NSS) * SR)
                if s == NSP - 1:
                    store(o, acc, ctx, b, h, t0, n, col, V, scale)
                    for e in range(32):  # the next pass starts from zero (here, not at its first slab: 32 selects
                        acc[e] = float32(0.0)  # per slab there, 3 % of r3's kernel's instructions)
            if j + 1 < NSL:
                hand_any(sm, v, hs, x, w, b, h, bh, c, t0, n, V, K, tid, r, s1, col1, s3, col3, off, j + 3 < NSL)
            r = r1
            s = s1
            col = col1
            col3 = col3 if s3 < NSP - 1 else col3 + CBW
            s3 = s3 + 1 if s3 < NSP - 1 else 0

    return cuda.jit(device=True, inline="always")(out)


@functools.lru_cache(maxsize=None)
def _out_kernel(C, KP, has_g, has_x=False, skip=False, band=16, eorder=False, step8=False, unroll=False):
    """r3's output kernel: :func:`_out_pipeline` with the products on the FMA units (:func:`_out_fma_products`).
    256 threads at C = 64 (one 4 x 8 tile each), 64 at C = 32, 16 at C = 16."""
    return _out_pipeline(C, KP, has_g, has_x, _out_fma_products(C, KP, band, eorder, step8), 0, skip, unroll)


# The state walk and the output kernel at once (OVERLAP): one launch, two roles
OVERLAP = True  # the split schedule's default: _overlap_kernel where it runs (read at launch; tune_r3.py --vary)
OVERLAP_SLEEP_NS = 200  # a waiting output block's thread 0 sleeps this long between two looks at its count
TICKET_U32 = True  # an output block's chunk and head from its ticket by 32-bit divisions (read at launch; tune_r3)

if config.ENABLE_CUDASIM:
    @cuda.jit(device=True)
    def _backoff():
        """The simulator runs blocks one after another: with roles by ticket every walker has finished before an
        output block starts, so nobody ever waits there; a block that does would wait forever (roles given by
        block index, say, under another block order), and this says so at once instead."""
        raise RuntimeError("an output block waits for a walker that has not run: in the simulator (one block "
                           "after another) it would wait forever")
else:
    @cuda.jit(device=True, inline="always")
    def _backoff():
        """``nanosleep``: a waiting warp leaves the issue slots to the walkers on its SM."""
        cuda.nanosleep(OVERLAP_SLEEP_NS)


@cuda.jit
def _zero_flags(flags):
    """flags[:] = 0 (the ticket counter and every chunk's count, before each overlapped launch)."""
    i = cuda.grid(1)
    if i < flags.shape[0]:
        flags[i] = 0


def _flags(n, stream):
    """The overlapped launch's int32 counts (n of them), a kept scratch buffer (:func:`_scratch`)."""
    return _scratch("overlap_flags", (n,), stream, np.int32)


@functools.lru_cache(maxsize=None)
def _overlap_kernel(C, KP, BV, rows, has_g, has_h0, has_ht, products, pad, out_floats, skip=False, u32=True,
                    unroll=False):
    """The split schedule's state walk and its output in one launch (:data:`OVERLAP`), so that the output of the
    chunks already walked is computed while the walk goes on.

    Why: at the standard shape the walk is B H V / BV = 128 blocks of 256 threads (:func:`split_tile`) for 132 SMs:
    about one per SM, leaving more than half of its 227 KB of shared memory and half its registers idle for the 0.56 ms
    of the walk; then the output kernel's 8,192 independent blocks (0.89 ms) fill every SM. Here both roles are blocks
    of one grid of ``nwalk + NC B H`` blocks of 256 threads (launch bounds (256, 2): two per SM, whatever their roles),
    and an output block of chunk c waits only for S_c, not for the whole walk.

    Roles by ticket, not by block index: thread 0 of each block takes the next number from ``flags[0]`` (an atomic
    add) when the block starts. Tickets below ``nwalk`` walk (value tile t mod ntiles of head t // ntiles,
    :func:`_split_state_body` with ``signal``), the rest compute chunk u // (B H) of head u mod (B H) (u = t -
    nwalk; chunk-major, the order the walk makes them ready; :func:`_out_body` with ``wait``). A block holds a
    ticket only once it runs, so every walker is resident before any output block can wait on it, whatever order
    the hardware starts blocks in: no deadlock (by block index, output blocks started first could fill the GPU and
    wait forever for walkers that cannot start). The walkers never wait on output blocks. The simulator checks it
    with its blocks run last to first (``tests/test_r3_shared.py::test_overlap_any_block_order``; there a block that
    would have to wait raises at once: :func:`_backoff`).

    Shared memory: the larger of the two layouts, and four ints past it (``out_floats``: the output layout's
    floats; r6's pads its slabs): the ticket, and for an output block its chunk and head (b, h), which thread 0
    works out once (two divisions by values known only at run time, ~100 instructions that every warp ran when each
    worked them out) while the block's other warps wait at the barrier. ``u32`` (:data:`TICKET_U32`): those
    divisions in unsigned 32 bits (``div.u32``, inline, ~18 SASS instructions each; tickets are int32), not
    Numba's int64 ``//`` (a subroutine): thread 0's path from the ticket's atomic to the barrier took 124 SASS
    instructions and now ~50 (``tools/sass.py``, sm_90; what it gained: the module docstring). The same results as
    the two kernels, bit for bit: the same products in the same order."""
    NTH = split_state_threads(KP, BV, rows)
    if NTH != (C // 4) ** 2:
        raise ValueError(f"rung {NAME!r}: the overlapped kernel needs the walk's {NTH} threads per block to be the "
                         f"output's {(C // 4) ** 2}")
    walk = _split_state_body(C, KP, BV, has_g, has_h0, has_ht, False, rows, True)
    out = _out_body(C, KP, has_g, False, products, pad, True, skip, unroll)
    SLOT = max(_split_state_layout(C, KP, BV)[-1], out_floats)  # the ticket and its map, past both roles' arrays
    TI = uint32 if u32 else int64  # the type of the ticket's divisions

    def overlap(q, k, v, bcum, h0, ht, hs, o, scale, flags, nwalk, ntiles):
        """Block with ticket t: value tile t mod ntiles of head t // ntiles walks (t < nwalk), else the output of
        chunk u // (B H) of head u mod (B H), u = t - nwalk."""
        sm = cuda.shared.array(0, float32)
        smi = cuda.shared.array(0, types.int32)  # the same bytes (dynamic shared arrays all start at one address)
        if cuda.threadIdx.x == 0:
            t = cuda.atomic.add(flags, 0, 1)
            smi[SLOT] = t
            if t >= nwalk:  # an output block's chunk and head, by one thread while the others wait at the barrier
                H = TI(q.shape[2])  # TI: uint32 gives div.u32, where int64 // is a subroutine of ~60 instructions
                BH = TI(q.shape[0] * q.shape[2])
                u = TI(t - nwalk)  # tickets are int32: t < 2^31
                c = u // BH
                bh = TI(u - c * BH)  # cast back: Numba's uint32 * uint32 is 64 bits wide
                b = bh // H
                smi[SLOT + 1] = c
                smi[SLOT + 2] = b
                smi[SLOT + 3] = bh - b * H
        cuda.syncthreads()  # the ticket (and an output block's map), for every thread
        t = smi[SLOT]
        if t < nwalk:
            walk(sm, k, v, bcum, h0, ht, hs, bcum, t % ntiles, t // ntiles, flags)
        else:
            out(sm, q, k, v, bcum, hs, o, scale, h0, bcum, smi[SLOT + 1], smi[SLOT + 2], smi[SLOT + 3], flags,
                ntiles)

    if config.ENABLE_CUDASIM:
        return cuda.jit(overlap)
    return cuda.jit(overlap, launch_bounds=(NTH, INTRA_MIN_BLOCKS))


def overlap_bytes(C, KP, BV, out_floats):
    """Dynamic shared memory of :func:`_overlap_kernel`: the larger layout, the ticket and an output block's map."""
    return (max(_split_state_layout(C, KP, BV)[-1], out_floats) + 4) * np.dtype(np.float32).itemsize


# ----------------------------------------------------------------------------------------------------------
# launching
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


# the launch that opts in to more than 48 KB of dynamic shared memory lives in _common (r1 uses it too); r3's name
# for it stays (r5, r6 and the exercise skeleton call r3._launch)
_launch = launch_dynamic


# 128-bit loads need float32 rows on 16-byte boundaries (_common.rows_aligned); r3's name stays (r5, r6 and the
# exercise skeleton use it)
_rows_aligned = rows_aligned


# the scratch kept between calls lives in _common (r4 and r6 use it too); these names are r3's own API (the
# exercise skeleton imports them)
_scratch, _scratch_key = scratch, scratch_key


def scratch_buffers(BH, TP, KP, V, has_g, delta, out, stream):
    """``(bcum, w, u, qp, u2)``: what the intra kernel writes and the state kernel reads (shapes in the module
    docstring; TP = T rounded up to whole chunks), each a kept buffer (:func:`_scratch`) when this recurrence and
    mode use it, else a stand-in. r5 calls it too: its state kernel reads what r3's intra kernel wrote."""
    if TP == 0:
        return or_dummy(None, 2), or_dummy(None, 3), or_dummy(None, 3), or_dummy(None, 3), or_dummy(None, 3)
    return (
        _scratch("bcum", (BH, TP), stream) if has_g else or_dummy(None, 2),
        _scratch("w", (BH, TP, KP), stream) if delta else or_dummy(None, 3),
        _scratch("u", (BH, TP, V), stream) if delta else or_dummy(None, 3),
        _scratch("qp", (BH, TP, KP), stream) if delta and out else or_dummy(None, 3),
        _scratch("u2", (BH, TP, V), stream) if out else or_dummy(None, 3),
    )


def check_launch(name, chunk_size, K, o, ht) -> int:
    """The argument checks of r3's launches, shared by the rungs built on its kernels (r5, r6: their error
    messages name ``name``). Returns the chunk size C (``DEFAULT_CHUNK`` for None)."""
    if chunk_size is None:
        chunk_size = DEFAULT_CHUNK
    if chunk_size not in CHUNK_SIZES:
        raise ValueError(f"rung {name!r}: chunk_size must be one of {CHUNK_SIZES}, got {chunk_size!r}")
    if K > MAX_K:
        raise ValueError(f"rung {name!r} supports K <= {MAX_K}, got K={K}")
    if o is None and ht is None:
        raise ValueError(f"rung {name!r}: with o=None (state only) ht must be given")
    return int(chunk_size)


WIDE_STATE = True  # state-only runs of the delta family take h0 / ht wider than v (wide_state_columns; r4 uses it)


def wide_state_columns(name, v, o, h0, ht, beta) -> int:
    """The state's value columns W: v's V, except in a state-only run (``o=None``) of the delta family, where
    ``ht`` (and ``h0``, if given) may have W > V columns. Columns past V are driven by zero values: U = 0 there,
    so V_new = -W S and S <- gamma_C S + K^T diag(gamma_C / gamma) V_new, exactly what values of zero would do,
    without a [v | 0] copy and without the intra kernel's U = A diag(beta) V on the zero columns. r4 runs its
    phase 1 this way: from h0 = [h0 | I] the state [S | M] holds the segment's transition M in its last K columns
    (r4's docstring). Raises ValueError for any other shape mismatch."""
    V = v.shape[3]
    if ht is None or ht.shape[3] == V:
        if h0 is not None and h0.shape[3] != V:
            raise ValueError(f"rung {name!r}: h0 has {h0.shape[3]} value columns, v has {V}")
        return V
    if o is not None or beta is None or ht.shape[3] < V:
        raise ValueError(f"rung {name!r}: ht has {ht.shape[3]} value columns, v has {V} (a wider state is only "
                         f"for state-only runs, o=None, of the delta family)")
    if h0 is not None and h0.shape[3] != ht.shape[3]:
        raise ValueError(f"rung {name!r}: h0 has {h0.shape[3]} value columns, ht has {ht.shape[3]}")
    return ht.shape[3]


def forward(q, k, v, g, beta, o, h0, ht, scale, chunk_size, stream=0, bv=None, schedule=None):
    """Launch the intra kernel, then the state kernel (the rung contract: :mod:`linattn_numba.rungs`).

    Extension: ``o=None`` means "state only": ``ht`` must be given; the scores Aqk, Q' and U'' and every
    output product are skipped; for the delta family ``ht`` and ``h0`` may then have more value columns than
    ``v`` (:func:`wide_state_columns`). ``chunk_size=None`` uses ``DEFAULT_CHUNK``. ``bv`` overrides the
    value-tile width of ``BV_TABLE`` (tests, tuning). ``h0`` and ``ht`` may be the same array. ``schedule``:
    "fused" (the two kernels above) or "split" (with the output: the state walk storing every chunk's starting
    state, then every chunk's output in parallel; before them the gates kernel for the additive family, the intra
    kernel in state-only mode for the delta family, whose walk also stores V_new: :func:`_split_delta_kernel`);
    default :data:`SCHEDULE` for the additive family, :data:`DELTA_SCHEDULE` for the delta family. "split" runs only
    where :func:`split_fits` and its buffer is at most :data:`SPLIT_MAX_BYTES` (the delta family's walk also within
    :data:`SPLIT_DELTA_SMEM` of shared memory), else the fused schedule runs (the same result within float32
    error).
    """
    for _, launch in launches(q, k, v, g, beta, o, h0, ht, scale, chunk_size, stream, bv, schedule):
        launch()


def launches(q, k, v, g, beta, o, h0, ht, scale, chunk_size, stream=0, bv=None, schedule=None):
    """``[(kernel name, launch)]``: what :func:`forward` runs, in order, as separate callables (so that
    ``tools/tune_r3.py`` can time each kernel). Validates the arguments and allocates the scratch."""
    B, T, H, K = q.shape
    V = v.shape[3]
    schedule = (SCHEDULE if beta is None else DELTA_SCHEDULE) if schedule is None else schedule
    if schedule not in SCHEDULES:
        raise ValueError(f"rung {NAME!r}: schedule must be one of {SCHEDULES}, got {schedule!r}")
    C = check_launch(NAME, chunk_size, K, o, ht)
    KP = padded_k(K)
    VW = wide_state_columns(NAME, v, o, h0, ht, beta)
    has_g, delta, out = g is not None, beta is not None, o is not None
    BH = B * H
    if BH == 0 or V == 0:
        return []
    NC = cdiv(T, C)
    TP = NC * C
    f4 = np.dtype(np.float32).itemsize
    vin = T > 0 and _rows_aligned(q, k, v)  # 128-bit loads of the inputs
    if schedule == "split" and _split_runs(q, k, v, o, delta, C, True):
        if not delta:
            return _split_launches(q, k, v, g, o, h0, ht, scale, C, KP, NC, stream, bv)
        todo = _split_delta_launches(q, k, v, g, beta, o, h0, ht, scale, C, KP, NC, stream, bv)
        if todo is not None:
            return todo
    BV = value_tile(C, KP, VW, bv)
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


def _split_launches(q, k, v, g, o, h0, ht, scale, C, KP, NC, stream, bv, x=None, tag="", out_kernel=None):
    """The split schedule's launches (``launches`` checked that it fits): gates (with g), the state kernel in
    state-only mode storing S_c to ``hs`` (value tile and tiling by :func:`split_tile`), the output kernel. With
    ``x`` (:func:`split_deferred`: ``h0`` is None) the state kernel also stores the log decays ``lg`` and the output
    kernel adds exp(lg_c) x to every S_c. ``tag`` names the scratch buffers (r4 keeps several sets alive).
    ``out_kernel``: another output kernel with this one's arguments, ``out_kernel(C, KP, has_g, has_x) -> (kernel,
    shared bytes, threads)`` (r6's on the tensor cores: ``r6_tensor_cores.out_pipe_factory``); None:
    :func:`_out_kernel`. Where :data:`OVERLAP` and the two kernels' blocks are the same size (256 threads at C = 64,
    K' = 128 in either tiling), and without ``x``, the walk and the output run as one launch instead
    (:func:`_overlap_kernel`; "overlap"), which needs the output kernel's pieces: ``out_kernel.parts(C, KP) ->
    (products, pad, layout floats)`` (without it, two launches)."""
    B, T, H, K = q.shape
    V = v.shape[3]
    BH = B * H
    has_g, has_x = g is not None, x is not None
    f4 = np.dtype(np.float32).itemsize
    BV, rows = split_tile(C, KP, BH, V, bv)
    bcum = _scratch("bcum" + tag, (BH, NC * C), stream) if has_g else or_dummy(None, 2)
    hs = _scratch("hs" + tag, (BH, NC * KP, V), stream)
    lg = _scratch("lg" + tag, (BH, NC), stream) if has_g and has_x else or_dummy(None, 2)
    d3 = or_dummy(None, 3)
    todo = []
    if STATE_KERNEL not in STATE_KERNELS:
        raise ValueError(f"rung {NAME!r}: STATE_KERNEL must be one of {STATE_KERNELS}, got {STATE_KERNEL!r}")
    if STATE_KERNEL == "pipelined" or has_x:  # only the pipelined kernel writes lg
        smem_s = _split_state_layout(C, KP, BV)[-1] * f4
        kern_s = _split_state_kernel(C, KP, BV, has_g, h0 is not None, ht is not None, has_g and has_x, rows)
        nth_s = split_state_threads(KP, BV, rows)
        args_s = (k, v, bcum, or_dummy(h0, 4), or_dummy(ht, 4), hs, lg)
    else:
        smem_s = _state_layout(C, KP, BV)[-1] * f4
        kern_s = _state_kernel(C, KP, BV, has_g, False, False, h0 is not None, ht is not None, True, True)
        nth_s = (KP // 4) * (BV // 4)
        args_s = (q, k, v, bcum, d3, d3, d3, d3, or_dummy(h0, 4), or_dummy(ht, 4), or_dummy(None, 4),
                  np.float32(scale), hs)
    tri = _out_tri()  # (skip, band, eorder, step8); skip also applies to another output kernel's overlapped launch
    if out_kernel is None:
        parts = (_out_fma_products(C, KP, *tri[1:]), 0, _out_layout(C, KP)[-1])
    else:
        parts = getattr(out_kernel, "parts", lambda C_, KP_: None)(C, KP)
    overlap = (OVERLAP and STATE_KERNEL == "pipelined" and not has_x and parts is not None
               and nth_s == (C // 4) ** 2)  # both roles in one launch (_overlap_kernel)
    if has_g and not overlap:
        todo.append(("gates", lambda: _gates_launch(g, bcum, C, stream)))
    if overlap:
        products, pad, out_floats = parts
        kern_v = _overlap_kernel(C, KP, BV, rows, has_g, h0 is not None, ht is not None, products, pad, out_floats,
                                 tri[0], bool(TICKET_U32), bool(OUT_UNROLL))
        flags = _flags(1 + BH * NC, stream)
        nwalk = cdiv(V, BV) * BH
        args_v = (q, k, v, bcum, or_dummy(h0, 4), or_dummy(ht, 4), hs, o, np.float32(scale), flags, np.int32(nwalk),
                  np.int32(cdiv(V, BV)))
        smem_v = overlap_bytes(C, KP, BV, out_floats)

        def overlapped():
            # the counts start from zero at every launch: one launch, so that the kernel timed alone is whole; with
            # gates the gates kernel zeroes them (one launch fewer)
            if has_g:
                _gates_launch(g, bcum, C, stream, flags)
            else:
                _launch(_zero_flags, cdiv(1 + BH * NC, 256), 256, 0, stream, (flags,))
            _launch(kern_v, nwalk + NC * BH, nth_s, smem_v, stream, args_v)

        todo.append(("overlap", overlapped))
        return todo
    todo.append(("state", lambda: _launch(kern_s, (cdiv(V, BV), BH), nth_s, smem_s, stream, args_s)))
    if out_kernel is None:
        kern_o = _out_kernel(C, KP, has_g, has_x, *tri, unroll=bool(OUT_UNROLL))
        smem_o, nth_o = _out_layout(C, KP)[-1] * f4, (C // 4) ** 2
    else:
        kern_o, smem_o, nth_o = out_kernel(C, KP, has_g, has_x)
    args_o = (q, k, v, bcum, hs, o, np.float32(scale), or_dummy(x, 4), lg)
    todo.append(("out", lambda: _launch(kern_o, (NC, BH), nth_o, smem_o, stream, args_o)))
    return todo


def _split_delta_launches(q, k, v, g, beta, o, h0, ht, scale, C, KP, NC, stream, bv, out_kernel=None):
    """The delta family's split schedule (``launches`` checked that it fits; None where the walk's shared memory
    would exceed :data:`SPLIT_DELTA_SMEM`, e.g. ``bv=128``): the intra kernel in state-only mode (b, W, U), the walk
    (:func:`_split_delta_kernel`: every S_c to ``hs``, V_new to ``vnew``; value tile and tiling by
    :func:`split_tile`), then the additive output kernel on V_new: o = scale (diag(gamma) Q S_c + Aqk V_new).
    ``out_kernel`` as :func:`_split_launches`' (r6 passes its tensor-core one); None: :func:`_out_kernel`."""
    B, T, H, K = q.shape
    V = v.shape[3]
    BH = B * H
    has_g = g is not None
    f4 = np.dtype(np.float32).itemsize
    BV, rows = split_tile(C, KP, BH, V, bv)
    smem_s = _split_delta_layout(C, KP, BV)[-1] * f4
    if smem_s > SPLIT_DELTA_SMEM:
        return None
    bcum, w, u, _, _ = scratch_buffers(BH, NC * C, KP, V, has_g, True, False, stream)
    hs = _scratch("hs", (BH, NC * KP, V), stream)
    vnew = _scratch("vnew", (B, T, H, V), stream)
    d3 = or_dummy(None, 3)
    smem_a = _intra_layout(C, KP)[-1] * f4
    kern_a = _intra_kernel(C, KP, has_g, True, False, True)
    args_a = (q, k, v, or_dummy(g, 3), beta, bcum, w, u, d3, d3)
    kern_s = _split_delta_kernel(C, KP, BV, has_g, h0 is not None, ht is not None, rows)
    nth_s = split_state_threads(KP, BV, rows)
    args_s = (k, w, u, bcum, or_dummy(h0, 4), or_dummy(ht, 4), hs, vnew)
    if out_kernel is None:
        kern_o = _out_kernel(C, KP, has_g, False, *_out_tri(), unroll=bool(OUT_UNROLL))
        smem_o, nth_o = _out_layout(C, KP)[-1] * f4, (C // 4) ** 2
    else:
        kern_o, smem_o, nth_o = out_kernel(C, KP, has_g, False)
    args_o = (q, k, vnew, bcum, hs, o, np.float32(scale), or_dummy(None, 4), or_dummy(None, 2))
    return [
        ("intra", lambda: _launch(kern_a, (NC, BH), (C // 4) ** 2, smem_a, stream, args_a)),
        ("state", lambda: _launch(kern_s, (cdiv(V, BV), BH), nth_s, smem_s, stream, args_s)),
        ("out", lambda: _launch(kern_o, (NC, BH), nth_o, smem_o, stream, args_o)),
    ]


def _split_runs(q, k, v, o, delta, C, delta_split=False) -> bool:
    """The split schedule's conditions on these arrays (``launches`` and :func:`split_deferred_fits` ask the
    same): tokens, the additive family (or with ``delta_split`` either) with an output, float32 with 16-byte aligned
    rows, the copy maps' sizes (:func:`split_fits`), ``hs`` at most :data:`SPLIT_MAX_BYTES`."""
    B, T, H, K = q.shape
    V = v.shape[3]
    return (T > 0 and split_fits(K, V, C, delta, o is not None, _rows_aligned(q, k, v) and _rows_aligned(o),
                                 delta_split)
            and split_bytes(B, T, H, K, V, C) <= SPLIT_MAX_BYTES)


def split_deferred_fits(q, k, v, g, beta, o, chunk_size) -> bool:
    """Whether :func:`split_deferred` can run on these arrays: a chunk size and K of this rung, and
    :func:`_split_runs`."""
    C = DEFAULT_CHUNK if chunk_size is None else int(chunk_size)
    return C in CHUNK_SIZES and q.shape[3] <= MAX_K and _split_runs(q, k, v, o, beta is not None, C)


def split_deferred(q, k, v, g, o, ht, x, scale, chunk_size, stream=0, bv=None, tag="", out_kernel=None):
    """The split schedule with the start state deferred to the output kernel: ``(first, second)``, lists of
    ``(kernel name, launch)``. ``first`` (gates, then the state kernel walking every sequence from a zero start,
    storing each chunk's state to ``hs``, the log decays before each chunk to ``lg`` and the final state to ``ht``
    if given) can run before ``x`` [B, H, K, V] holds the sequences' true start states; ``second`` (the output
    kernel) then writes ``o`` [B, T, H, V] from S_c = hs_c + exp(lg_c) x. Since the recurrence is linear in the
    state, that is :func:`forward` with ``h0 = x``, apart from ``ht`` (the zero-start walk's final state).

    r4 ``scan`` runs ``first`` on every segment, its scan over the segments' final states, then ``second``: one
    state walk in all, where a phase 3 that recomputes from the start states walks again. ``tag`` names the
    scratch buffers: the two lists share them, so launches of another call with the same tag must not come in
    between. ``out_kernel`` as :func:`_split_launches`'. Raises ValueError where :func:`split_deferred_fits` is
    false."""
    B, T, H, K = q.shape
    V = v.shape[3]
    C = DEFAULT_CHUNK if chunk_size is None else int(chunk_size)
    if g is not None and g.shape != (B, T, H):
        raise ValueError(f"rung {NAME!r}: g must be [B, T, H] = {(B, T, H)}, got {tuple(g.shape)}")
    if tuple(x.shape) != (B, H, K, V) or not _rows_aligned(x):
        raise ValueError(f"rung {NAME!r}: x must be float32 [B, H, K, V] = {(B, H, K, V)} with 16-byte aligned "
                         f"rows, got {x.dtype} {tuple(x.shape)}")
    if ht is not None and tuple(ht.shape) != (B, H, K, V):
        raise ValueError(f"rung {NAME!r}: ht must be [B, H, K, V] = {(B, H, K, V)}, got {tuple(ht.shape)}")
    if not split_deferred_fits(q, k, v, g, None, o, C):
        raise ValueError(f"rung {NAME!r}: the split schedule cannot run here (split_deferred_fits: float32 inputs "
                         f"and output with 16-byte aligned rows, K' = {padded_k(K)} and C = {C} whole rows per "
                         f"copy, hs at most {SPLIT_MAX_BYTES} bytes)")
    todo = _split_launches(q, k, v, g, o, None, ht, scale, C, padded_k(K), cdiv(T, C), stream, bv, x, tag,
                           out_kernel)
    return todo[:-1], todo[-1:]


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
                if vin and delta:  # the delta family's split walk (V_new too) in split_tile's two tilings, h0 / ht
                    for bv_, rows_, lab, st in ((64, 8, "", False), (32, 4, ",4x4,h0,ht", True)):
                        yield (f"split_delta[{rec}{lab}]", _split_delta_kernel(C, KP, bv_, has_g, st, st,
                                                                                rows_).py_func,
                               (x4, s3, s3, s2, a4 if st else s4, a4 if st else s4, s3, s4))
                if vin and not delta:  # the split schedule: state kernel storing S_c (with h0 and ht), output
                    yield (f"state[{tag},split]", _state_kernel(C, KP, 32, has_g, False, False, True, True,
                                                               True, True).py_func,
                           (x4, x4, x4, s2, s3, s3, s3, s3, a4, a4, s4, f32, s3))
                    # the pipelined state kernel in split_tile's two configurations: 8 x 4 tiles of 64 value columns
                    # (many walkers) and 4 x 4 tiles of 32 (few); with h0 and ht, and (the deferred start state,
                    # split_deferred: r4's phases) writing lg
                    for bv_, rows_, lab in ((64, 8, ""), (32, 4, ",4x4")):
                        yield (f"split_state[{rec}{lab}]", _split_state_kernel(C, KP, bv_, has_g, True, True, False,
                                                                                rows_).py_func,
                               (x4, x4, s2, a4, a4, s3, s2))
                        yield (f"split_state[{rec},lg{lab}]", _split_state_kernel(C, KP, bv_, has_g, False, True,
                                                                                   has_g, rows_).py_func,
                               (x4, x4, s2, s4, a4, s3, s2))
                    # both in one launch (OVERLAP), in both tilings: 8 x 4 as the standard shape runs it (no h0 /
                    # ht), 4 x 4 with h0 and ht (the GPU tier's shapes)
                    i1 = types.Array(types.int32, 1, "C")
                    for bv_, rows_, lab, st in ((64, 8, "", False), (32, 4, ",4x4,h0,ht", True)):
                        yield (f"overlap[{rec}{lab}]",
                               _overlap_kernel(C, KP, bv_, rows_, has_g, st, st,
                                               _out_fma_products(C, KP, *_out_tri()[1:]), 0,
                                               _out_layout(C, KP)[-1], _out_tri()[0],
                                               unroll=bool(OUT_UNROLL)).py_func,
                               (x4, x4, x4, s2, a4 if st else s4, a4 if st else s4, s3, a4, f32, i1, types.int32,
                                types.int32))
                    yield (f"out[{rec}]", _out_kernel(C, KP, has_g, False, *_out_tri(),
                                                      unroll=bool(OUT_UNROLL)).py_func,
                           (x4, x4, x4, s2, s3, a4, f32, s4, s2))
                    yield (f"out[{rec},x]", _out_kernel(C, KP, has_g, True, *_out_tri(),
                                                        unroll=bool(OUT_UNROLL)).py_func,
                           (x4, x4, x4, s2, s3, a4, f32, a4, s2))
    i1 = types.Array(types.int32, 1, "C")
    yield ("zero_flags", _zero_flags.py_func, (i1,))
    yield ("gates[float32]", _gates_kernel(C).py_func, (array_type(np.float32, 3), s2, i1))
    yield ("gates[float16]", _gates_kernel(C).py_func, (array_type(np.float16, 3), s2, i1))
    yield ("gates[float32,zero]", _gates_kernel(C, True).py_func, (array_type(np.float32, 3), s2, i1))
