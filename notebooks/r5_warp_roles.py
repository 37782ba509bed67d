# ---
# jupyter:
#   jupytext:
#     formats: py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # r5 · `warp_roles`: producer warps, consumer warps, a double buffer, named barriers and mbarriers
#
# **Learning goals.** After this notebook you can
#
# 1. explain why r3's state pass waits on memory although it keeps loads in flight, and what **warp
#    specialization** changes: *producer* warps stream chunk `c + 1` into one half of a **double buffer** in
#    shared memory while *consumer* warps compute chunk `c` from the other half;
# 2. use **`cp.async`** (global → shared copies that bypass registers), **named barriers** (`barrier.sync` /
#    `barrier.arrive` with an id and a thread count) and **mbarriers** (barrier objects in shared memory that count
#    arrivals and complete *phases*) through inline PTX in Numba, read the FULL / EMPTY handshake that passes the
#    two halves back and forth, and see why with two stages one rendezvous per chunk says the same (r5's default);
# 3. tell an *aligned* barrier (`bar.sync`, every thread at the same instruction) from an unaligned one, read what
#    compute-sanitizer's racecheck and synccheck report for each, and see why r5's FULL / EMPTY pair moved from
#    named barriers to mbarriers (racecheck does not order a named-barrier arrive / sync hand-off at scale);
# 4. say how `linattn_numba.sim` simulates named barriers and mbarriers, so the kernel runs (and deadlocks and
#    races are caught) in CI;
# 5. count the bytes and FLOPs of one chunk of one block, see why two stages cost r5 an SM's whole shared
#    memory (one block per SM), and read the H200 numbers against r3.

# %%
# Setup. Numba chooses between a real GPU and its CUDA simulator once, when numba.cuda is first imported:
# run on the GPU when the CUDA driver reports one, else in the (patched) simulator.
import itertools
import os
import threading

import linattn_numba.sim

linattn_numba.sim.use_if_no_gpu()

import inspect  # noqa: E402
import tempfile  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from IPython.display import Code, Image, Markdown, display  # noqa: E402
from numba import cuda, float32, int64  # noqa: E402

import linattn_numba as la  # noqa: E402
from linattn_numba import figures, ncu, reference, rungs, vec  # noqa: E402
from linattn_numba.rungs import r3_shared as r3  # noqa: E402
from linattn_numba.rungs import r5_warp_roles as r5  # noqa: E402
from linattn_numba.testing import TOL_FP32, make_inputs, rel_err  # noqa: E402

print("running on", "Numba's CUDA simulator (CPU)" if la.sim.active() else "a CUDA GPU")
print("rung", r5.NAME, "| chunk sizes", r5.CHUNK_SIZES, "| MAX_K", r5.MAX_K, "| default value tile", r5.BV_DEFAULT)

# %% [markdown]
# ## 1. What changes from r3, and why
#
# The math is r3's (notebook `r3_shared`, section 1): the **intra** kernel computes every chunk's `W, U, Q', U''`
# in parallel, and the sequential **state** kernel walks the chunks of one head with `S` in registers:
#
# $$X = [W; Q']\,S_c,\quad V_{new} = U - W S_c,\quad O = \text{scale}\,(Q' S_c + U''),\quad
#   S_{c+1} = \gamma_C S_c + K^T \operatorname{diag}(\gamma_C/\gamma)\, V_{new}.$$
#
# r5 keeps the intra kernel (it is imported from r3, not copied) and changes only **how the state kernel is
# scheduled**. In r3 every warp does everything, in turn: stage chunk `c`'s rows into shared memory, wait at
# `syncthreads`, multiply, wait, stage chunk `c + 1`, ... While the loads are in flight the FMA units idle; while
# the products run, the memory system idles. r5 gives each warp **one role**:
#
# * **consumer warps** hold `S` (a 4 × 4 tile per thread, as in r3) and run the two products `P1: X = [W; Q'] S`
#   and `P2: S ← γ_C S + Kᵀ diag(γ_C/γ) V_new` on a stage that is already full;
# * **producer warps** fill the *other* stage with chunk `c + 1`. The row blocks go by **`cp.async`**: a 16-byte
#   copy from global to shared memory that does not pass through registers, so one thread can have all of its
#   copies in flight at once (r3's staging loops keep `r3.BATCH` loads, or `r3.QBATCH` float4, in flight per
#   thread: as many as the registers that receive them). `cp.async.wait_all` then waits for the thread's own
#   copies.
#
# Who waits for whom is said with barriers. **Named barriers**: PTX has 16 hardware barriers per block;
# `syncthreads` is barrier 0 with every thread. `barrier.sync id, n` arrives at barrier `id` and waits until `n`
# threads (whole warps) have arrived; `barrier.arrive id, n` arrives and goes on. **mbarriers** (Hopper's, and
# Ampere's): an 8-byte object in shared memory, initialised with an arrival count; `mbarrier.arrive` counts one
# arrival (a *release* of the thread's earlier accesses), and when the count is reached the barrier completes its
# current *phase* and starts the next; `mbarrier.try_wait.parity` (an *acquire*) tells whether the latest phase of
# a given parity has completed. Either way a producer can say "stage `s` is full" without waiting for anyone, and
# only the consumers wait for it (the *pair* hand-off: FULL and EMPTY per stage, on mbarriers). With only two
# stages, though, the pair says no more than one meeting per chunk of the whole block (the *rendezvous*, a named
# barrier, r5's default; section 2). The barriers:

# %%
bars = {name: getattr(r5, name) for name in ("BAR_MEET", "BAR_CONS", "BAR_PROD", "MB_FULL", "MB_EMPTY")}
meaning = {"BAR_MEET": "named barrier id. Rendezvous: producers after staging chunk c, consumers before computing it "
                       "(all threads)",
           "BAR_CONS": "named barrier id. Consumers only: V_new complete and S no longer read, between P1 and P2 (and, "
                       "with the pair, the S stores before P1)",
           "BAR_PROD": "named barrier id. Producers only (additive with gates): f_t written before V is scaled by it",
           "MB_FULL": "mbarrier index (+ s). Pair: stage s holds chunk c: every producer arrives, consumers wait",
           "MB_EMPTY": "mbarrier index (+ s). Pair: stage s may be refilled: every consumer arrives, producers wait"}
two = ("MB_FULL", "MB_EMPTY")  # one mbarrier per stage: index + s
display(Markdown("| constant | value(s) | meaning |\n|---|---|---|\n" + "\n".join(
    f"| `{n}` | {i}{f', {i + 1}' if n in two else ''} | {meaning[n]} |" for n, i in bars.items())))

# %% [markdown]
# Numba has no `barrier.sync`, `barrier.arrive` or `cp.async`, so the module writes them as **inline PTX** through
# `numba.cuda.extending.intrinsic`: the code generator emits an LLVM `InlineAsm` call with the PTX text, its
# operands (`r`: 32-bit register, `l`: 64-bit) and a `~{memory}` clobber, which stops the compiler from moving
# shared-memory loads and stores across the barrier. Each barrier comes in two forms: `bar.sync` / `bar.arrive`
# are PTX's *aligned* `barrier.sync.aligned` / `barrier.arrive.aligned` (every thread that takes part executes the
# same instruction), `barrier_sync` / `barrier_arrive` the unaligned ones, for a barrier that the two roles reach
# from their own code (section 6 shows what goes wrong otherwise). The mbarrier intrinsics (`mb_init`, `mb_arrive`,
# `mb_wait`) take the int64 shared array and an index, and pass the element's 32-bit shared-space address to the
# PTX; `mb_wait` loops on `try_wait` inside the asm (labels inside `{ }` are local, so it can be inlined many
# times). Under the simulator the same names are bound to Python functions: `linattn_numba.sim.bar_sync` /
# `bar_arrive` (for both forms), `mb_init` / `mb_arrive` / `mb_wait`, and a synchronous copy for `cp_async16`. The
# module's
# intrinsics section, both branches, then the copies, which live in `linattn_numba.vec` (r1's sequence kernel
# stages its tiles with them too):

# %%
src = inspect.getsource(r5)
start = src.index("# intrinsics: named barriers")
stop = src.index("# producer helpers")
display(Code(src[start:src.rindex("\n# ---", start, stop)], language="python"))
vsrc = inspect.getsource(vec)
display(Code(vsrc[vsrc.index("def _cp_async16_py"):vsrc.index("if config.ENABLE_CUDASIM")]
             + vsrc[vsrc.index("    @intrinsic\n    def cp_async16"):], language="python"))

# %% [markdown]
# ### How the simulator runs named barriers
#
# The simulator runs every CUDA thread of a block as a Python thread. `linattn_numba.sim` replaces its polling
# block manager with an event-driven one (notebook `r1_recurrent` and the module docstring of `linattn_numba.sim`),
# and adds named barriers to it: per barrier id a *round* with its expected count, its arrivals and its waiting
# threads. `bar_sync` counts an arrival and sleeps until the round's count is reached; `bar_arrive` counts and
# returns; the arrival that completes the round wakes exactly that round's waiters and opens the next round.
# Misuse raises instead of hanging: a count that is not a multiple of 32, arrivals with different counts in one
# round, or a state where every live thread waits and none can proceed (reported as a deadlock, with where each
# thread waits). An mbarrier is a count and a phase number: `mb_arrive` counts, and the arrival that completes
# the phase wakes the threads waiting for that phase's parity; `mb_wait` returns at once when the latest phase of
# its parity has completed (as `try_wait.parity` does), else it sleeps. Using one that was never initialised
# raises.

# %%
display(Code(inspect.getsource(linattn_numba.sim._SimBlock._named_barrier), language="python"))
display(Code(inspect.getsource(linattn_numba.sim._SimBlock._mb_arrive)
             + "\n" + inspect.getsource(linattn_numba.sim._SimBlock._mb_wait), language="python"))

# %% [markdown]
# The whole protocol in 20 lines: a kernel with one consumer warp and one producer warp that pass `N` tiles of 32
# floats through a two-stage ring in shared memory, with r5's barrier ids and r5's unaligned `barrier_sync` /
# `barrier_arrive` (the simulator's functions here, the inline PTX on a GPU: each role reaches FULL and EMPTY from
# its own code). The consumer doubles each tile.

# %%
RING_FULL, RING_EMPTY, RING_THREADS = 1, 3, 64  # barrier ids: FULL + s, EMPTY + s (r5's named pair until 2026-12)
bar_sync, bar_arrive = r5.barrier_sync, r5.barrier_arrive


@cuda.jit
def ring(src, dst, producer_returns_early):
    buf = cuda.shared.array(64, float32)  # two stages of 32 floats
    tid = cuda.threadIdx.x
    lane = tid % 32
    n = src.shape[0] // 32
    if tid >= 32:  # producer warp
        for c in range(n):
            s = c % 2
            if c >= 2:
                bar_sync(RING_EMPTY + s, RING_THREADS)  # wait: the consumer is done with tile c - 2 in stage s
            buf[32 * s + lane] = src[32 * c + lane]
            if producer_returns_early and c == n - 1:
                return  # a bug: the consumer will wait for FULL forever
            bar_arrive(RING_FULL + s, RING_THREADS)  # stage s holds tile c; do not wait
        return
    for c in range(n):  # consumer warp
        s = c % 2
        bar_sync(RING_FULL + s, RING_THREADS)  # wait: stage s holds tile c
        dst[32 * c + lane] = 2 * buf[32 * s + lane]
        if c + 2 < n:
            bar_arrive(RING_EMPTY + s, RING_THREADS)  # stage s is free (only if the producer will refill it)


x = np.arange(5 * 32, dtype=np.float32)
y = cuda.to_device(np.zeros_like(x))
ring[1, RING_THREADS](cuda.to_device(x), y, False)
assert np.array_equal(y.copy_to_host(), 2 * x)
print(f"{len(x) // 32} tiles through a 2-stage ring: dst == 2 src")
if la.sim.active():  # on a GPU the buggy version would hang; the simulator reports it
    try:
        ring[1, RING_THREADS](cuda.to_device(x), y, True)
    except RuntimeError as e:
        print("with the producer's last arrival missing, the simulator says:\n ", str(e)[:300], "...")

# %% [markdown]
# Why does the consumer arrive at EMPTY only `if c + 2 < n`? The producer refills a stage only for tile `c + 2`,
# so the arrivals of the last two tiles would start rounds that no producer completes, and the block would exit
# with barriers part-counted. With the guard every round of every barrier completes. r5's kernel has the same
# guard.
#
# **The same ring on mbarriers** (r5's pair since 2026-12; section 6 says why). Four int64 words of shared memory
# are the barriers: FULL(s) = `bars[s]` expects the 32 producer threads, EMPTY(s) = `bars[2 + s]` the 32 consumer
# threads. Thread 0 initialises them and a `syncthreads` (reached by every thread, before the roles split) makes
# that visible. Tile `c` goes through stage `s = c % 2` as that stage's `c // 2`-th fill, so the consumers wait for
# FULL(s)'s phase `c // 2` (parity `(c // 2) % 2`) and the producers, before refilling, for EMPTY(s)'s phase
# `c // 2 - 1`. No phase can be lapped: a role cannot arrive twice on one barrier before the other has waited there,
# because the other barrier lies between.

# %%
mb_init, mb_arrive, mb_wait = r5.mb_init, r5.mb_arrive, r5.mb_wait
MB_FULL, MB_EMPTY = r5.MB_FULL, r5.MB_EMPTY


@cuda.jit
def ring_mb(src, dst):
    buf = cuda.shared.array(64, float32)  # two stages of 32 floats
    bars = cuda.shared.array(4, int64)  # FULL(0), FULL(1), EMPTY(0), EMPTY(1)
    tid = cuda.threadIdx.x
    lane = tid % 32
    n = src.shape[0] // 32
    if tid < 4:
        mb_init(bars, tid, 32)  # a phase completes at 32 arrivals: one warp
    cuda.syncthreads()  # initialised before anybody arrives or waits
    if tid >= 32:  # producer warp
        for c in range(n):
            s = c % 2
            if c >= 2:
                mb_wait(bars, MB_EMPTY + s, (c // 2 - 1) % 2)  # the consumer is done with tile c - 2 in stage s
            buf[32 * s + lane] = src[32 * c + lane]
            mb_arrive(bars, MB_FULL + s)  # stage s holds tile c (a release of the store above)
        return
    for c in range(n):  # consumer warp
        s = c % 2
        mb_wait(bars, MB_FULL + s, (c // 2) % 2)  # stage s holds tile c (an acquire)
        dst[32 * c + lane] = 2 * buf[32 * s + lane]
        if c + 2 < n:
            mb_arrive(bars, MB_EMPTY + s)  # stage s is free


x = np.arange(7 * 32, dtype=np.float32)  # 7 tiles: each stage's barriers go through 3-4 phases, the parity wraps
y = cuda.to_device(np.zeros_like(x))
ring_mb[1, RING_THREADS](cuda.to_device(x), y)
assert np.array_equal(y.copy_to_host(), 2 * x)
print(f"{len(x) // 32} tiles through a 2-stage ring on mbarriers: dst == 2 src")
#
# ## 2. Roles over time, the two hand-offs, and the thread map
#
# The module docstring draws the schedule of both hand-offs (`F_s`, `E_s`: FULL / EMPTY of stage `s`; `M`: the
# rendezvous; `C`: the consumers' own barrier; `░`: waiting), says why they have the same dependencies with two
# stages, and why the barriers are the unaligned ones:

# %%
doc = r5.__doc__
display(Markdown("```\n" + doc[doc.index("Roles over time"):doc.index("Thread map, grid")].rstrip() + "\n```"))
display(Markdown("```\n" + doc[doc.index("Thread map, grid"):doc.index("Shared memory, per stage")].rstrip()
                 + "\n```"))

# %% [markdown]
# The numbers of that map come from `_threads` (consumer and producer threads) and `_state_layout` (the shared
# memory of one stage): here for the default configuration (`C = 64`, `K = V = 128`, value tile `BV_DEFAULT`),
# with the delta rule and output, and at the tiny size the smoke run below uses.

# %%
def config(C, K, V, delta, out, has_g=True, bv=None):
    """Thread counts and shared-memory regions (bytes) of r5's state kernel, from the module's own functions."""
    KP, BV = r3.padded_k(K), r5.value_tile(V, bv)
    nth, nct, npt = r5._threads(KP, BV)
    o_v, o_f, o_gm, o_gc, stage, o_s, total = r5._state_layout(C, KP, BV, has_g, delta, out)
    NR = 1 + int(delta) + int(out)
    return dict(C=C, K=K, V=V, KP=KP, BV=BV, nth=nth, nct=nct, npt=npt, NR=NR, rows_b=4 * o_v,
                value_b=4 * (o_f - o_v), gates_b=4 * (stage - o_f), stage_b=4 * stage, s_b=4 * (total - o_s),
                total_b=4 * total, blocks_per_head=-(-V // BV))


std = tuple(figures.STANDARD[k] for k in "BTHKV")
big = config(r5.DEFAULT_CHUNK, std[3], std[4], delta=True, out=True)
tiny = config(16, 16, 16, delta=True, out=True)
def warps(n):
    return f"{n // 32} warp" + ("s" if n > 32 else "")


lines = []
for name, cfg in (("default, delta rule + output", big), ("smoke run below", tiny)):
    lines.append(f"| {name} | C={cfg['C']} K={cfg['K']} V={cfg['V']} BV={cfg['BV']} | {cfg['nth']} | "
                 f"{cfg['nct']} ({warps(cfg['nct'])}) | {cfg['npt']} ({warps(cfg['npt'])}) | "
                 f"{cfg['nct'] + cfg['npt']} | {cfg['blocks_per_head']} |")
display(Markdown("| configuration | sizes | S tiles (4 × 4) | consumer threads | producer threads | block | "
                 "blocks per head |\n|---|---|--:|--:|--:|--:|--:|\n" + "\n".join(lines)))

fig, axs = plt.subplots(1, 2, figsize=(11, 3.4), gridspec_kw=dict(width_ratios=[1, 1.4]))
nw_c, nw_p = big["nct"] // 32, big["npt"] // 32
axs[0].barh(0, nw_c, color="tab:blue", label=f"consumers: S tiles, P1, P2 ({nw_c} warps)")
axs[0].barh(0, nw_p, left=nw_c, color="tab:orange", label=f"producers: cp.async, gates ({nw_p} warps)")
for w in range(nw_c + nw_p + 1):
    axs[0].axvline(w, color="white", lw=1)
axs[0].set_xticks(np.arange(nw_c + nw_p) + 0.5, [str(w) for w in range(nw_c + nw_p)], fontsize=7)
axs[0].set_yticks([])
axs[0].set_xlabel("warp of the block")
axs[0].set_title(f"roles, K = V = {big['K']}, BV = {big['BV']}: {big['nct'] + big['npt']} threads", fontsize=9)
axs[0].legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.35))
regions = [(f"rows ({big['NR']} × [C, KP])", big["rows_b"], "tab:green"), ("value tile", big["value_b"], "tab:purple"),
           ("gates", big["gates_b"], "tab:grey")]
left = 0
for s in range(2):
    for lab, nb, col in regions:
        axs[1].barh(0, nb / 1024, left=left, color=col, edgecolor="white", label=lab if s == 0 else None)
        left += nb / 1024
    axs[1].text(left - big["stage_b"] / 2048, 0.45, f"stage {s}", ha="center", fontsize=8)
axs[1].barh(0, big["s_b"] / 1024, left=left, color="tab:blue", edgecolor="white", label="S [KP, BV]")
axs[1].axvline(r5.SMEM_MAX / 1024, color="red", ls="--", lw=1, label=f"{r5.SMEM_MAX // 1024} KB: one block's limit")
axs[1].set_yticks([])
axs[1].set_ylim(-0.6, 0.7)
axs[1].set_xlabel("KB of dynamic shared memory")
axs[1].set_title(f"shared memory: {big['total_b']:,} bytes of {r5.SMEM_MAX:,}", fontsize=9)
axs[1].legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.35))
fig.tight_layout()
plt.show()

# %% [markdown]
# ## 3. The kernels
#
# From the package with `inspect.getsource`: the producers' two copy loops, the layout and thread-count helpers,
# the state kernel (its producer branch, then its consumer branch), and the launch code, which takes the intra
# launch from `r3.launches` itself. `_mm_nn`, `ld4` / `st4` and the register staging loops (`_stage_scratch`,
# `_stage_input4`, `_stage_input`) are r3's (notebook `r3_shared`, section 3).

# %%
for name in ("_copy_scratch", "_copy_input", "_state_layout", "_threads", "_state_kernel", "launches"):
    display(Markdown(f"**`{name}`**"))
    display(Code(inspect.getsource(getattr(r5, name)), language="python"))

# %% [markdown]
# Things to notice:
#
# * The role split is one `if tid >= NCT:` at the top; the producers `return` after their last chunk. The
#   rendezvous both roles meet at counts `NTOT` threads; with the pair, FULL expects every producer (`NPT`) and
#   EMPTY every consumer (`NCT`); everything one role does alone counts only that role's threads (`BAR_CONS` with
#   `NCT`, `BAR_PROD` with `NPT`). The pair's mbarriers are initialised before the split, behind a
#   `syncthreads` that every thread reaches from the same instruction.
# * `_copy_scratch` issues `cp_async16` in a plain loop: nothing in it reads the copied data, so no copy waits for
#   another. The only wait is `cp_async_wait_all()` at the end of the chunk, just before the hand-off
#   (`barrier_sync(BAR_MEET)`, or `mb_arrive(bars, MB_FULL + s)` with the pair).
#   `_copy_input` zero-fills rows past the sequence and columns past `K` (`nbytes = 0`: 16 zeros written, nothing
#   read), so no product needs a bounds test.
# * The consumers store `S` into shared memory *before* the hand-off barrier. With the rendezvous that one barrier
#   both waits for the data and orders every consumer's `S` stores before every consumer's P1 reads. An mbarrier
#   wait orders only what the arrivals released (the producers' stores), so with the pair the consumers meet at
#   `BAR_CONS` after the `S` stores first.
# * P1 writes `V_new` over `U` *in the stage*; P2 reads it back. The stage is handed back (EMPTY, or the next
#   meeting) only after P2.
# * The `U''` loads for the output are issued before P1's product (`pre`), so their latency hides behind it.
#
# ## 4. Smoke run against the oracle
#
# `B1 T40 H1 K=V=16` (the last chunk partial at every chunk size; 1 to 3 chunks), all four recurrences, with an
# initial state; then r5 against r3 on the same inputs. The schedule changed, the operations and their order did
# not: r5's results should equal r3's bit for bit -- r3's *fused* schedule, the one r5 specialises (r3's default is
# its split schedule, which sums in another order: `r3.SCHEDULE` and, for the delta family, `r3.DELTA_SCHEDULE` are
# set to "fused" here and put back when the loop ends).

# %%
B, T, H, K, V = 1, 40, 1, 16, 16
rows = []
r3_schedules, r3.SCHEDULE, r3.DELTA_SCHEDULE = (r3.SCHEDULE, r3.DELTA_SCHEDULE), "fused", "fused"
try:
    for rec in reference.RECURRENCES:
        inp = make_inputs(B, T, H, K, V, rec, initial_state=True, seed=0)
        args = (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"])
        o_ref, h_ref = reference.recurrent(*args, initial_state=inp["initial_state"])
        for C in r5.CHUNK_SIZES:
            kw = dict(initial_state=inp["initial_state"], output_final_state=True, chunk_size=C)
            o5, h5 = la.attention(*args, rung=r5.NAME, **kw)
            o3, h3 = la.attention(*args, rung=r3.NAME, **kw)
            errs = (rel_err(o5, o_ref), rel_err(h5, h_ref))
            same = np.array_equal(o5, o3) and np.array_equal(h5, h3)
            rows.append(f"| {rec} | {C} | {-(-T // C)} | {errs[0]:.1e} | {errs[1]:.1e} | "
                        f"{'ok' if max(errs) <= TOL_FP32 else 'FAIL'} | {'yes' if same else 'NO'} |")
            assert max(errs) <= TOL_FP32, (rec, C, errs)
            if la.sim.active():  # on a GPU the compiler may contract differently in the two kernels
                assert same, (rec, C, "r5 differs from r3")
finally:
    r3.SCHEDULE, r3.DELTA_SCHEDULE = r3_schedules
display(Markdown(f"| recurrence | C | chunks | rel err o | rel err final state | within {TOL_FP32:g} | "
                 "bitwise equal to r3 |\n|---|--:|--:|--:|--:|---|---|\n" + "\n".join(rows)))

# %% [markdown]
# **Watching the handshake.** The simulator runs the kernel as Python, so we can wrap the barrier functions the
# state kernel calls (module globals of `r5`) and log, for one consumer thread and one producer thread, every
# arrival and every release, in the order they happen. Five chunks of the gated delta rule, with the pair
# hand-off (the rendezvous would show one meeting per chunk):

# %%
names = {r5.BAR_MEET: "MEET", r5.BAR_CONS: "CONS", r5.BAR_PROD: "PROD"}  # named barriers, by id
mb_names = {r5.MB_FULL: "FULL0", r5.MB_FULL + 1: "FULL1", r5.MB_EMPTY: "EMPTY0", r5.MB_EMPTY + 1: "EMPTY1"}


def trace_barriers(inp, C):
    """Run r5 on ``inp`` with logging barriers; returns [(order, role, event, barrier name)] of threads 0 and NCT."""
    nct = r5._threads(r3.padded_k(inp["q"].shape[3]), r5.value_tile(inp["v"].shape[3]))[1]
    log, order = [], itertools.count()
    orig = r5.bar_sync, r5.bar_arrive, r5.barrier_sync, r5.barrier_arrive, r5.mb_wait, r5.mb_arrive, r5.HANDOFF

    def who():
        tid = threading.current_thread().thread_id  # the simulated thread's linear id
        return {0: "consumer", nct: "producer"}.get(tid)

    def logged(name, wait, call):
        role = who()
        if role:
            log.append((next(order), role, "waits at" if wait else "arrives at", name))
        call()
        if role and wait:
            log.append((next(order), role, "passes", name))

    def logged_sync(i, n):
        logged(names[i], True, lambda: orig[0](i, n))

    def logged_arrive(i, n):
        logged(names[i], False, lambda: orig[1](i, n))

    def logged_mb_wait(bars, i, parity):
        logged(mb_names[i], True, lambda: orig[4](bars, i, parity))

    def logged_mb_arrive(bars, i):
        logged(mb_names[i], False, lambda: orig[5](bars, i))

    # both named forms log alike (the simulator does not tell them apart); the pair hand-off for this trace
    r5.bar_sync, r5.bar_arrive, r5.barrier_sync, r5.barrier_arrive = (logged_sync, logged_arrive) * 2
    r5.mb_wait, r5.mb_arrive = logged_mb_wait, logged_mb_arrive
    r5.HANDOFF = "pair"
    try:
        la.attention(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], rung=r5.NAME, chunk_size=C)
    finally:
        (r5.bar_sync, r5.bar_arrive, r5.barrier_sync, r5.barrier_arrive, r5.mb_wait, r5.mb_arrive,
         r5.HANDOFF) = orig
    return sorted(log)


if la.sim.active():
    C, NC = 16, 5
    log = trace_barriers(make_inputs(1, NC * C, 1, 16, 16, "gated_delta", seed=1), C)
    # label each event with its chunk: the producer finishes chunk c when it arrives at FULL, the consumer starts
    # chunk c when it waits at FULL
    prod_c, cons_c, at, rows = 0, -1, {}, []
    for i, role, ev, bar in log:
        if role == "consumer" and ev == "waits at" and bar.startswith("FULL"):
            cons_c += 1
        c = prod_c if role == "producer" else cons_c
        # the first of each: the consumers pass CONS twice a chunk with the pair (after the S stores, which come
        # before FULL and so count with the chunk before, and between P1 and P2)
        at.setdefault((role, ev, bar[:-1] if bar[-1].isdigit() else bar, c), i)
        cells = [f"chunk {c}: {ev} {bar}", ""]
        rows.append(f"| {i} | " + " | ".join(cells if role == "producer" else cells[::-1]) + " |")
        if role == "producer" and ev == "arrives at":
            prod_c += 1
    display(Markdown("| # | producer (thread NCT) | consumer (thread 0) |\n|--:|---|---|\n" + "\n".join(rows)))
    # what the barriers guarantee (an event is logged before an arrival and after a release):
    for c in range(NC):
        assert at["producer", "arrives at", "FULL", c] < at["consumer", "passes", "FULL", c]  # data before use
        if c >= 2:  # a stage is refilled only after the consumers are done with it
            assert at["consumer", "arrives at", "EMPTY", c - 2] < at["producer", "passes", "EMPTY", c]
    ahead = sum(at["producer", "arrives at", "FULL", c + 1] < at["consumer", "passes", "CONS", c]
                for c in range(NC - 1))
    print(f"in this run the producer had chunk c + 1 staged before the consumer finished P1 of chunk c "
          f"for {ahead} of {NC - 1} chunks (the simulator's thread scheduling decides how many)")

# %% [markdown]
# ## 5. Napkin math
#
# **Per chunk and block.** What the producers stage into one stage (the row blocks and the value tile), what the
# consumers read and write directly (`U''` in, `o` out), and the FLOPs of the two products as executed (rows and
# columns padded to `KP`), from `config` above, at `C = 64`, `K = V = 128`, `BV = BV_DEFAULT`:

# %%
def chunk_budget(rec, C, K, V, out=True, bv=None):
    """Bytes and FLOPs of one chunk of one state-kernel block: (staged, direct, P1 FLOPs, P2 FLOPs, config)."""
    has_g, delta = rec in ("decay", "gated_delta"), rec in ("delta", "gated_delta")
    cfg = config(C, K, V, delta, out, has_g, bv)
    staged = cfg["rows_b"] + cfg["value_b"] + (4 * C if has_g else 0)  # + the cumulative gates bcum
    direct = 2 * 4 * C * cfg["BV"] if out else 0  # U'' read and o written by the consumers
    p1 = 2 * C * (int(delta) + int(out)) * cfg["KP"] * cfg["BV"]  # X = [W; Q'] S (or Q S, or W S)
    p2 = 2 * C * cfg["KP"] * cfg["BV"]  # S += K^T diag(f) V_new
    return staged, direct, p1, p2, cfg


data_dir = figures.find_data_dir()
data = figures.load_or_explain(data_dir)
copy_gbps, peak, peak_src = figures.ceilings(data) if data else (None, figures.DATASHEET_FP32_TFLOPS, "datasheet")
sms = next((s["device"].get("multiprocessors") for s in (data.sources if data else []) if s.get("device")), None)
sm_src = "from the bench JSON" if sms else "r4_scan.DEFAULT_SMS"
sms = sms or rungs.module("scan").DEFAULT_SMS
C0 = r5.DEFAULT_CHUNK
variants = [(rec, True) for rec in reference.RECURRENCES] + [("delta", False), ("decay", False)]
lines = []
for rec, out in variants:
    staged, direct, p1, p2, cfg = chunk_budget(rec, C0, std[3], std[4], out)
    lines.append(f"| {rec}{'' if out else ', state only'} | {cfg['NR']} | {staged / 1024:.1f} | {direct / 1024:.0f} | "
                 f"{p1 / 1e6:.2f} | {p2 / 1e6:.2f} | {(p1 + p2) / (staged + direct):.1f} |")
display(Markdown(f"C = {C0}, K = V = {std[3]}, BV = {big['BV']}:\n\n| recurrence | row blocks | KB staged | "
                 "KB U'' + o | P1 MFLOP | P2 MFLOP | FLOP per byte |\n|---|--:|--:|--:|--:|--:|--:|\n"
                 + "\n".join(lines)))

# %% [markdown]
# **Shared memory and occupancy.** Two stages of that, plus `S`, is what one r5 block needs. Against an SM's
# shared memory (on sm_90 the driver also reserves 1 KB per resident block), r5's state kernel fits **one block
# per SM**. r3's state kernel at the same value tile fits two; at its tuned value tile (`BV_TABLE`) it runs one
# block of twice the threads. Either way r3 has more warps per SM doing the products:

# %%
SMEM_PER_SM = 228 * 1024  # H200 (sm_90): shared memory per SM
SMEM_RESERVED = 1024  # per resident block, reserved by the driver on sm_90
THREADS_PER_SM = 2048


def occupancy(name, threads, compute_threads, smem_b):
    """Resident blocks per SM as limited by shared memory and by threads (registers: see the module docstrings)."""
    by_smem = SMEM_PER_SM // (smem_b + SMEM_RESERVED)
    by_threads = THREADS_PER_SM // threads
    n = min(by_smem, by_threads)
    return (f"| {name} | {threads} | {smem_b / 1024:.1f} | {by_smem} | {by_threads} | {n} | {n * threads // 32} | "
            f"{n * compute_threads // 32} |")


KP0 = r3.padded_k(std[3])
bv3 = r3.value_tile(C0, KP0, std[4])
lines = [occupancy(f"r5 `{r5.NAME}`, BV = {big['BV']}", big["nct"] + big["npt"], big["nct"], big["total_b"])]
for bv in sorted({big["BV"], bv3}):
    nth3 = (KP0 // 4) * (bv // 4)
    lines.append(occupancy(f"r3 `{r3.NAME}`, BV = {bv}" + (" (tuned)" if bv == bv3 else ""), nth3, nth3,
                           4 * r3._state_layout(C0, KP0, bv, True, True)[-1]))
display(Markdown(f"State kernel, C = {C0}, K = V = {std[3]}, delta rule with output:\n\n| kernel | threads | "
                 "shared KB | blocks / SM (shared) | blocks / SM (threads) | blocks / SM | warps / SM | "
                 "warps / SM doing products |\n|---|--:|--:|--:|--:|--:|--:|--:|\n" + "\n".join(lines)))

fig, ax = plt.subplots(figsize=(7, 3.4))
for C in r5.CHUNK_SIZES:
    bvs = [8, 16, 32, 64]
    kb = [config(C, std[3], std[4], True, True, bv=bv)["total_b"] / 1024 for bv in bvs]
    ax.plot(bvs, kb, "o-", label=f"C = {C}")
for nb, ls in ((1, "--"), (2, ":")):
    ax.axhline((SMEM_PER_SM // nb - SMEM_RESERVED) / 1024, color="red", ls=ls, lw=1,
               label=f"{nb} block{'s' if nb > 1 else ''} per SM")
ax.set_xscale("log", base=2)
ax.set_xticks(bvs, [str(b) for b in bvs])
ax.set_xlabel("value tile BV")
ax.set_ylabel("KB per block (two stages + S)")
ax.set_title(f"r5 state kernel, delta rule with output, K = V = {std[3]}", fontsize=9)
ax.legend(fontsize=7)
fig.tight_layout()
plt.show()

# %% [markdown]
# **Copy against compute, per chunk.** If each SM's block got its share of the copy bandwidth and of the fp32 FMA
# rate, a chunk's staging would take `t_copy` and its products `t_P1 + t_P2`. r3 pays roughly the sum per chunk
# (its L2 prefetch and the second block of a smaller tile hide part of the copy); with the double buffer the
# steady state pays the larger of the two. This ignores that the value-tile blocks of a head read the same rows
# (the L2 serves the later reads faster than DRAM) and every latency: floors, not predictions.

# %%
def pipeline(n, t_copy, t_p1, t_p2):
    """Event times of r5's schedule for n chunks: producer copies [(start, end)], consumer P1 and P2 intervals."""
    copies, p1s, p2s = [], [], []
    prod_free = cons_free = 0.0
    for c in range(n):
        start = max(prod_free, p2s[c - 2][1] if c >= 2 else 0.0)  # EMPTY: stage c % 2 freed by chunk c - 2
        copies.append((start, start + t_copy))
        prod_free = start + t_copy
        a = max(cons_free, copies[c][1])  # FULL: chunk c staged
        p1s.append((a, a + t_p1))
        p2s.append((a + t_p1, a + t_p1 + t_p2))
        cons_free = a + t_p1 + t_p2
    return copies, p1s, p2s


if copy_gbps:
    per_sm_bw = copy_gbps * 1e9 / sms  # bytes/s
    per_sm_fl = peak * 1e12 / sms  # FLOP/s
    NC0 = -(-std[1] // C0)
    lines, timing = [], {}
    for rec, out in variants[:4]:
        staged, direct, p1, p2, cfg = chunk_budget(rec, C0, std[3], std[4], out)
        tc, t1, t2 = (staged + direct) / per_sm_bw * 1e6, p1 / per_sm_fl * 1e6, p2 / per_sm_fl * 1e6
        timing[rec] = (tc, t1, t2)
        blocks = std[0] * std[2] * cfg["blocks_per_head"]
        waves = -(-blocks // sms)  # one block per SM
        serial = waves * NC0 * (tc + t1 + t2) / 1e3
        ends = pipeline(NC0, tc, t1, t2)
        piped = waves * ends[2][-1][1] / 1e3
        lines.append(f"| {rec} | {tc:.2f} | {t1:.2f} + {t2:.2f} | {blocks} ({waves} waves) | {serial:.2f} | "
                     f"{piped:.2f} |")
    display(Markdown(
        f"Per SM: {per_sm_bw / 1e9:.1f} GB/s (copy {copy_gbps:.0f} GB/s / {sms} SMs, {sm_src}) and "
        f"{per_sm_fl / 1e9:.0f} GFLOP/s (fp32 {peak:.0f} TFLOP/s, {peak_src}); {NC0} chunks per block at "
        f"{figures.shape_str(std)}:\n\n| recurrence (with output) | t_copy µs | t_P1 + t_P2 µs | blocks | "
        "state kernel, copy then compute, ms | state kernel, double-buffered, ms |\n|---|--:|--:|--:|--:|--:|\n"
        + "\n".join(lines)))

    rec = "gated_delta"
    fig, ax = plt.subplots(figsize=(10, 2.6))
    n_show = 5
    copies, p1s, p2s = pipeline(n_show, *timing[rec])
    for c in range(n_show):
        for y, (a, b_), col in ((2, copies[c], "tab:orange"), (1, p1s[c], "tab:blue"), (1, p2s[c], "tab:cyan")):
            ax.barh(y, b_ - a, left=a, color=col, edgecolor="white")
            ax.text((a + b_) / 2, y, f"c{c}", ha="center", va="center", fontsize=7)
    tc, t1, t2 = timing[rec]
    for c in range(n_show):  # r3's order, for comparison: copy, then compute, per chunk
        a = c * (tc + t1 + t2)
        ax.barh(0, tc, left=a, color="tab:orange", edgecolor="white", alpha=0.6)
        ax.barh(0, t1 + t2, left=a + tc, color="tab:blue", edgecolor="white", alpha=0.6)
    ax.set_yticks([0, 1, 2], ["copy, then compute", "consumers (P1, P2)", "producers (copy)"], fontsize=8)
    ax.legend(handles=[plt.Rectangle((0, 0), 1, 1, color=col) for col in ("tab:orange", "tab:blue", "tab:cyan")],
              labels=["copy", "P1", "P2"], fontsize=7, loc="lower right")
    ax.set_xlabel("µs (per-SM floors above)")
    ax.set_title(f"{rec}: the schedule of section 2 with these durations, {n_show} chunks", fontsize=9)
    fig.tight_layout()
    plt.show()
    for rec, (tc, t1, t2) in timing.items():
        print(f"{rec}: in this model the {'copy' if tc > t1 + t2 else 'products'} set the pace "
              f"(t_copy / (t_P1 + t_P2) = {tc / (t1 + t2):.2f})")
else:
    print("No copy-bandwidth record in figures/data: the per-chunk times need `linattn-numba bench` on a GPU.")

# %% [markdown]
# ## 6. The H200 measurements
#
# The bench's records of this rung and of r3 (`shared`), side by side where both were measured at the same shape
# and dtype. A record times the whole forward: r3's intra kernel (the same in both rungs) plus the state kernel,
# so the state kernel's own speed-up is larger than the ratio below.

# %%
keys = (r3.NAME, r5.NAME)
mine = [r for r in figures.ordered(data.records) if r.get("key") in keys] if data else []
missing = [k for k in keys if not any(r.get("key") == k for r in mine)]
if data is None:
    print("No bench results found (figures/data/*.json): run `linattn-numba bench` on a GPU machine.")
elif missing:
    print(f"No records of rung{'s' if len(missing) > 1 else ''} {' and '.join(repr(k) for k in missing)} in "
          f"{data_dir} yet (its {len(data.records)} records have other keys). `linattn-numba bench --rungs "
          f"{','.join(keys)}` on a GPU adds them; until then the napkin floors of section 5 are all there is.")
if mine:
    display(Markdown(figures.markdown_table(mine)))
    by = {}
    for r in mine:
        if figures.timed(r):
            by.setdefault((r["recurrence"], figures.shape_tuple(r), r.get("dtype")), {})[r["key"]] = r["median_ms"]
    pairs = [(k, v) for k, v in by.items() if len(v) == 2]
    if pairs:
        display(Markdown("| recurrence | shape | dtype | r3 ms | r5 ms | r3 / r5 |\n|---|---|---|--:|--:|--:|\n"
                         + "\n".join(f"| {rec} | {figures.shape_str(shp)} | {dt} | {v[r3.NAME]:.3g} | "
                                     f"{v[r5.NAME]:.3g} | {v[r3.NAME] / v[r5.NAME]:.2f}× |"
                                     for (rec, shp, dt), v in pairs)))
if data is not None:
    tmp = tempfile.mkdtemp()
    path, why = figures.plot_ladder(data, os.path.join(tmp, "ladder.png"))
    display(Image(path)) if path else print(why)

# %% [markdown]
# And Nsight Compute, when a profile of this rung is committed (`figures/data/*ncu*.csv`; notebook
# `profiling_on_h200` explains the columns). The stall reasons of the consumer warps are what section 7's
# explanation needs checked:

# %%
index = ncu.kernel_index([rungs.module(r) for r in rungs.RUNGS])
mod_name = r5.__name__.rsplit(".", 1)[-1]
found = []
for path, rep in ncu.load_dir(data_dir) if data_dir else []:
    ncu.assign_modules(rep.kernels, index)
    found += [k for k in rep.kernels if k.module == mod_name]
if found:
    display(Markdown(ncu.table(found, markdown=True)))
else:
    print(f"No ncu profile of {mod_name} in figures/data yet (tools/ncu_rungs.py --rungs {r5.NAME}).")

# %% [markdown]
# **What the sanitizers make of named barriers and mbarriers.** `compute-sanitizer` checks shared-memory races
# (racecheck) and the use of barriers (synccheck) while the kernel runs. r5's first kernel used the aligned
# `bar.sync` / `bar.arrive` for
# FULL and EMPTY, which the two roles reach from their own code, and racecheck reported hazards there although the
# simulator's happens-before check found every access ordered. `tools/racecheck_probe.py` takes the question apart:
# tiny kernels (64 consumer and 32 producer threads, a two-stage ring) with a known answer, two of them with a real
# race, each run under both tools on the H200. The committed log, parsed:

# %%
import glob  # noqa: E402
import re  # noqa: E402

probe_kernels = {
    "pair": "pair, aligned bar.sync / bar.arrive",
    "pair_na": "pair, unaligned barrier.sync / barrier.arrive (r5's handoff='pair' until 2026-12)",
    "pair_mb": "pair on mbarriers (r5's handoff='pair' since 2026-12)",
    "pair_bug": "pair waiting on EMPTY after the refill: a real race",
    "rendezvous": "rendezvous, unaligned barrier.sync (r5's default)",
    "rendezvous_aligned": "rendezvous, aligned bar.sync from both roles",
    "rendezvous_block": "rendezvous, syncthreads in each role's branch",
    "cons_named": "consumers only, aligned bar.sync from one place",
    "cons_bug": "the same without the barrier after the reads: a real race",
}
logs = sorted(glob.glob(os.path.join(data_dir, "h200_racecheck_probe_*.txt"))) if data_dir else []
if logs:
    verdict = {}
    for block in re.split(r"^== ", open(logs[-1]).read(), flags=re.M)[1:]:
        tool, kernel = block.split()[:2]
        m = re.search(r"SUMMARY: \d+ hazards? displayed \((\d+) errors?", block) or re.search(
            r"ERROR SUMMARY: (\d+) errors?", block)
        n = int(m.group(1)) if m else None
        verdict[kernel, tool] = "no summary" if n is None else ("clean" if n == 0 else f"{n} errors")
    probe_rows = [f"| {desc} | {verdict.get((k, 'racecheck'), '-')} | {verdict.get((k, 'synccheck'), '-')} |"
                  for k, desc in probe_kernels.items()]
    display(Markdown(f"`{os.path.basename(logs[-1])}`:\n\n| kernel | racecheck | synccheck |\n|---|---|---|\n"
                     + "\n".join(probe_rows)))
else:
    print("No racecheck probe log in figures/data (tools/h200.sh racecheck_probe on a GPU writes one).")

# %% [markdown]
# The tools follow the PTX ISA: an aligned barrier expects every taking-part thread at the same instruction. (The
# simulator's race check, `linattn_numba.sim.racecheck`, runs `python3 tools/racecheck_probe.py --sim` on the same
# kernels without a GPU, and `tests/test_sim_racecheck.py` runs r5 under it with both hand-offs.) The module
# docstring's record of r5 under the three tools:

# %%
display(Markdown("> " + doc[doc.index("Sanitizers (H200"):].strip().split("\n\n")[0].replace("\n", "\n> ")))

# %% [markdown]
# A racecheck report is an observation of one run, not a proof: run the same kernel several times and the verdict on
# the pair hand-off changes. The docstring's recheck:

# %%
display(Markdown("> " + doc[doc.index("Rechecked at"):].strip().split("\n\n")[0].replace("\n", "\n> ")))

# %% [markdown]
# **Settling it.** The probe's named-barrier pair (`pair_na`) was clean at one block and 8 chunks, r5's pair was
# not. `tools/h200.sh racecheck_matrix` runs the probe's pair kernels with r5's ingredients as modifiers (`+cp`:
# the refill by cp.async; `+vec`: 128-bit reads; `+inplace`: the consumers rewrite the stage first; `+clate` /
# `+plate`: one role dawdles before the EMPTY hand-off) at `BLOCKS x CHUNKS`, several processes each, and beside
# them r5's own pair. Every answer was right; the hazards counted per process, from the committed logs:

# %%
mlogs = sorted(glob.glob(os.path.join(data_dir, "probes", "h200_racecheck_matrix_*.txt"))) if data_dir else []
runs = {}  # (log's sha, variant) -> [hazards of each process]
for path in mlogs:
    sha = os.path.basename(path).rsplit("_", 1)[1].split(".")[0]
    for block in re.split(r"^== racecheck ", open(path).read(), flags=re.M)[1:]:
        variant = block.split()[0]
        if "@" not in variant and not variant.startswith("r5"):
            variant += "@16x32"  # the mode's default blocks x chunks
        m = re.search(r"RACECHECK SUMMARY: (\d+) hazards?", block)
        runs.setdefault((sha, variant), []).append(int(m.group(1)) if m else None)
if runs:
    rows = [f"| {sha} | `{v}` | {sum(1 for h in hs if h)} of {len(hs)} | {', '.join(str(h) for h in hs)} |"
            for (sha, v), hs in runs.items()]
    display(Markdown("| log | kernel@blocks x chunks | processes flagged | hazards per process |\n|---|---|--:|---|\n"
                     + "\n".join(rows)))
else:
    print("No racecheck_matrix log in figures/data/probes (tools/h200.sh racecheck_matrix on a GPU writes one).")

# %% [markdown]
# No ingredient was needed: the bare named-barrier pair is flagged as soon as there is more than one block or many
# chunks, whichever role comes first, with right answers (its racy twin `pair_bug` is wrong every time). The
# protocol is correct by the PTX memory model (an arrive *synchronizes with* a sync on the same barrier);
# racecheck does not order that hand-off at scale. The same ring on mbarriers (`pair_mb`) and r5's pair on
# mbarriers (`r5_pair_plain`, at 1b4993b) report nothing. The docstring's conclusion:

# %%
display(Markdown("> " + doc[doc.index("Settled at"):].strip().split("\n\n")[0].replace("\n", "\n> ")))

# %% [markdown]
# ## 7. What limits r5
#
# The module docstring records what the H200 run showed and how it explains it:

# %%
measured = doc[doc.index("Measured on the H200"):doc.index("Numerics:")].strip()
display(Markdown("```text\n" + measured + "\n```"))  # verbatim: it holds a reStructuredText table

# %% [markdown]
# The napkin model of section 5 assumed the products run at the FMA peak; the measurements say the consumers, not
# the copy, set the pace, so they run far below it. Two of the docstring's reasons, computed from the module: the
# share of consumer threads with a tile to compute in P1 (it has `C · (delta + output)` rows, against `KP` rows of
# `S` tiles) and in P2, and (section 5's occupancy table) the warps per SM that run the products.

# %%
lines = []
for rec, out in variants:
    has_g, delta = rec in ("decay", "gated_delta"), rec in ("delta", "gated_delta")
    cfg = config(C0, std[3], std[4], delta, out, has_g)
    nt1 = (C0 * (int(delta) + int(out)) // 4) * (cfg["BV"] // 4)  # P1's 4 x 4 tiles (NT1 in the kernel)
    busy1 = min(nt1, cfg["nct"]) / cfg["nct"]
    rounds = -(-nt1 // cfg["nct"])
    lines.append(f"| {rec}{'' if out else ', state only'} | {nt1} | {cfg['nct']} | {rounds} | {100 * busy1:.0f} % | "
                 f"{100 * cfg['nth'] / cfg['nct']:.0f} % |")
display(Markdown(f"C = {C0}, K = V = {std[3]}, BV = {big['BV']}:\n\n| recurrence | P1 tiles | consumer threads | "
                 "P1 passes | consumers busy in P1 | consumers busy in P2 |\n|---|--:|--:|--:|--:|--:|\n"
                 + "\n".join(lines)))

# %% [markdown]
# So the double buffer takes the copy off the critical path, and what is left is the consumers: one block of them
# per SM, fewer warps than r3 to hide shared-memory latency in the product loops, and (additive recurrences) idle
# threads in P1. The docstring's suggestions: larger P1 tiles, or two consumer groups (one for P1, one for P2 of the
# previous chunk), checked with ncu's WarpStateStats (barrier against short-scoreboard stalls of the consumers).
#
# ## Exercises
#
# 1. **Barrier counts.** FULL and EMPTY count `NCT + NPT` threads although on each of them one role only arrives and
#    the other only waits. Change the consumer's `bar_sync` in `ring` (section 1) to count only its own 32
#    threads. What can happen when the consumers arrive first, and what when the producer does? Run it in the
#    simulator a few times: does it always catch the bug?
# 2. **The S store.** The consumers write `S` into shared memory before `bar_sync(FULL + s)` of chunk `c`, while
#    other consumers may still be in P2 of chunk `c − 1`. Argue from the kernel source why no consumer can still be
#    reading the shared `S` of chunk `c − 1` at that point (which barrier guarantees it?).
# 3. **Fitting more blocks.** With `config`, find the `(C, BV)` pairs for which r5's state kernel fits two blocks
#    per SM at `K = 128`. What does a smaller `BV` cost (hint: `blocks_per_head`, and how often the row blocks of a
#    chunk are staged per head)? What does a smaller `C` cost (hint: the number of sequential steps)?
# 4. **When does the double buffer stop helping?** Using `pipeline`, plot the double-buffered time against
#    `t_copy / (t_P1 + t_P2)` for 128 chunks. Extend `pipeline` to three stages: when would a third stage help,
#    and what would it cost in shared memory?
# 5. **A second consumer group.** Sketch the barriers for a block with producers, a P1 group and a P2 group
#    (P2 of chunk `c` runs while P1 of chunk `c + 1` runs). What does the P1 group need from the P2 group before it
#    can start chunk `c + 1`? (Hint: `S`.) Is the overlap possible at all for this recurrence?
