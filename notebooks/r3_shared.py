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
# # r3 · `shared`: two fused kernels (or, for plain and decay, the split schedule), chunks in shared memory, 4 × 4 register tiles
#
# **Learning goals.** After this notebook you can
#
# 1. regroup r2's five kernels into two: everything **inside a chunk** (parallel over chunks) and the **state
#    pass with the output fused in** (sequential over chunks), and derive the algebra that makes the fusion
#    possible (`O = scale (Q' S + U'')`);
# 2. invert the WY form's `I + L` **blockwise** (16 × 16 diagonal blocks in parallel, then one block row at a
#    time) instead of one row at a time;
# 3. read a **register-blocked** shared-memory matmul: each thread owns a 4 × 4 tile of the output, so each value
#    it loads from shared memory feeds 4 FMAs instead of 1, and loads move 4 floats at a time;
# 4. lay out a kernel's **dynamic shared memory** by hand (offsets, padding, reuse of a region once its contents
#    are consumed) and see what limits the chunk size;
# 5. count the bytes and FLOPs r3 moves and executes, read how its tiles were tuned and its H200 numbers, and
#    say what limits it.
#
# The module docstring of `linattn_numba.rungs.r3_shared` is the reference; this notebook shows its sections
# next to the code and the numbers that back them.

# %%
# Setup. Numba chooses between a real GPU and its CUDA simulator once, when numba.cuda is first imported:
# run on the GPU when the CUDA driver reports one, else in the (patched) simulator.
import glob
import json
import os

import linattn_numba.sim

linattn_numba.sim.use_if_no_gpu()

import inspect  # noqa: E402
import tempfile  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from IPython.display import Code, Image, Markdown, display  # noqa: E402

import linattn_numba as la  # noqa: E402
from linattn_numba import bench, figures, ncu, reference, rungs  # noqa: E402
from linattn_numba.rungs import r3_shared as r3  # noqa: E402
from linattn_numba.testing import TOL_FP32, make_inputs, rel_err  # noqa: E402

print("running on", "Numba's CUDA simulator (CPU)" if la.sim.active() else "a CUDA GPU")
print("rung", r3.NAME, "| chunk sizes", r3.CHUNK_SIZES, "| default chunk", r3.DEFAULT_CHUNK, "| MAX_K", r3.MAX_K,
      "| BV_TABLE", r3.BV_TABLE)

DOC = r3.__doc__


def doc_section(title):
    """The section of r3's module docstring whose (possibly two-line) heading starts with ``title``: heading and
    body, up to the next heading."""
    lines = DOC.splitlines()
    heads = []  # (first line of the heading, its underline)
    for i, line in enumerate(lines):
        if i and line and set(line) == {"-"} and lines[i - 1].strip():
            start = i - 1
            while start > 0 and lines[start - 1].strip():
                start -= 1
            heads.append((start, i))
    for n, (start, _) in enumerate(heads):
        if " ".join(lines[start:heads[n][1]]).startswith(title):
            end = heads[n + 1][0] if n + 1 < len(heads) else len(lines)
            return "\n".join(lines[start:end]).strip()
    raise KeyError(f"no section {title!r} in r3_shared's docstring")


def doc_between(start, stop):
    """The docstring's text from the paragraph that begins with ``start`` up to ``stop``."""
    return DOC[DOC.index(start):DOC.index(stop)].strip()


def show_doc(text):
    display(Markdown("```text\n" + text + "\n```"))


# %% [markdown]
# ## 1. The math of this step
#
# The algorithm is r2's (notebook `r2_chunked`, section 1): in-chunk gates `b_t`, `γ_t = e^{b_t}`,
# `Γ_ts = e^{b_t − b_s}`, scores `A_qk = tril(QKᵀ ⊙ Γ)`, for the delta rule `L = tril(diag(β)(KKᵀ ⊙ Γ), −1)`,
# `A = (I + L)⁻¹`, `W = A diag(βγ) K`, `U = A diag(β) V`, and per chunk
#
# $$V_{new} = U - W S_c,\qquad O = \text{scale}\,\big(\operatorname{diag}(\gamma) Q S_c + A_{qk} V_{new}\big),
#   \qquad S_{c+1} = \gamma_C S_c + K^T \operatorname{diag}(\gamma_C/\gamma)\, V_{new}.$$
#
# r2 needed the chunk states `S_c` in global memory (the `h` buffer, the largest of its intermediates) because
# its output kernel ran after the state pass. Substitute `V_new` into `O`:
#
# $$O = \text{scale}\big((\operatorname{diag}(\gamma) Q - A_{qk} W)\, S_c + A_{qk} U\big)
#     = \text{scale}\,(Q' S_c + U''),\qquad Q' = \operatorname{diag}(\gamma)Q - A_{qk}W,\quad U'' = A_{qk}U .$$
#
# `Q'` and `U''` do not depend on the state: the **intra** kernel computes them for every chunk in parallel, next
# to `W` and `U`. What is left for the sequential **state** kernel is one product with the state per chunk,
# `[W; Q'] S_c` (the delta rule) or `Q S_c` (additive, where `Q' = diag(γ) Q` and `U'' = A_qk V`), then the
# update. The output is written by the state pass, and the chunk states never leave the chip.
#
# The regrouping, checked in NumPy on one chunk against `reference.chunked`:

# %%
inp = make_inputs(1, 16, 1, 8, 8, "gated_delta", initial_state=True, seed=0)
q, k, v, g, beta = (inp[n][0, :, 0].astype(np.float64) for n in ("q", "k", "v", "g", "beta"))
S0 = inp["initial_state"][0, 0].astype(np.float64)
C_, scale = len(q), 8**-0.5
b = np.cumsum(g)
Gam = np.exp(np.where(np.tri(C_, dtype=bool), b[:, None] - b[None, :], -np.inf))
Aqk = np.tril(q @ k.T * Gam)
L = np.tril(beta[:, None] * (k @ k.T) * Gam, -1)
A = np.linalg.inv(np.eye(C_) + L)
W, U = A @ ((beta * np.exp(b))[:, None] * k), A @ (beta[:, None] * v)
Qp, U2 = np.exp(b)[:, None] * q - Aqk @ W, Aqk @ U  # what the intra kernel writes
o_fused = scale * (Qp @ S0 + U2)  # what the state kernel computes
o_ref, _ = reference.chunked(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], initial_state=inp["initial_state"],
                             chunk_size=16)
print(f"O = scale (Q' S + U''): max |difference| from reference.chunked = {np.abs(o_fused - o_ref[0, :, 0]).max():.1e}")

# %% [markdown]
# **The blockwise inverse.** r2 solved `(I + L) X = R` by forward substitution: `C` dependent rows, two barriers
# each. r3 forms `A = (I + L)⁻¹` itself, in 16 × 16 blocks. `I + L` is unit lower triangular, so is `A`, and
# block row `I` of `(I + L) A = I` gives, for `J < I`,
#
# $$A_{II} = (I + L_{II})^{-1},\qquad A_{IJ} = -A_{II} \sum_{J \le M < I} L_{IM} A_{MJ} .$$
#
# The diagonal blocks are independent (one thread per column of each, all blocks at once); then block row
# `I = 1, 2, …` needs only the rows above it: two small products and two barriers per block row. In NumPy, on a
# `C = 64` chunk of the gated delta rule:

# %%
C64 = 64
inp64 = make_inputs(1, C64, 1, 16, 8, "gated_delta", seed=1)
k64, g64, beta64 = (inp64[n][0, :, 0].astype(np.float64) for n in ("k", "g", "beta"))
b64 = np.cumsum(g64)
Gam64 = np.exp(np.where(np.tri(C64, dtype=bool), b64[:, None] - b64[None, :], -np.inf))
L64 = np.tril(beta64[:, None] * (k64 @ k64.T) * Gam64, -1)
NB = C64 // 16
blk = lambda X, i, j: X[16 * i:16 * i + 16, 16 * j:16 * j + 16]  # noqa: E731
A_blk = np.zeros((C64, C64))
for d in range(NB):  # the diagonal blocks: independent of each other
    A_blk[16 * d:16 * d + 16, 16 * d:16 * d + 16] = np.linalg.inv(np.eye(16) + blk(L64, d, d))
for bi in range(1, NB):  # block row bi from the block rows above it
    for bj in range(bi):
        T_ = sum(blk(L64, bi, m) @ blk(A_blk, m, bj) for m in range(bj, bi))  # the kernel's T_IJ (first barrier)
        A_blk[16 * bi:16 * bi + 16, 16 * bj:16 * bj + 16] = -blk(A_blk, bi, bi) @ T_  # (second barrier)
err = np.abs(A_blk - np.linalg.inv(np.eye(C64) + L64)).max()
print(f"C = {C64}: {NB} diagonal blocks, {NB - 1} block rows; max |blockwise - np.linalg.inv| = {err:.1e}")

# %% [markdown]
# The module docstring's account of what changed from r2, and why (items 1, 2 and 5 are the algebra above; 3 and
# 4 are how the kernels feed their arithmetic):

# %%
show_doc(doc_between("What changed from r2", "Pipeline of the fused schedule"))

# %% [markdown]
# ## 2. The thread/block map
#
# The docstring's pipeline, its thread maps and what each kernel's barriers protect:

# %%
show_doc(doc_between("Pipeline of the fused schedule", "Thread maps"))
show_doc(doc_section("Thread maps"))

# %% [markdown]
# Which thread owns which entry of the `C × C` score matrices: thread `(tr, tc)` holds rows `tr + (C/4)·i` and
# columns `tc + (C/4)·j`, `i, j < 4` -- a strided 4 × 4 tile, so that the threads reading one row block hit
# different rows (and, with the `+4` row padding, different banks). Owners for `C = 16` (16 threads), next to the
# dynamic shared memory of both kernels, computed by the kernels' own layout functions (`_intra_layout`,
# `_state_layout`):

# %%
C_ = 16
C4 = C_ // 4
owner = np.zeros((C_, C_), int)
for tid in range(C4 * C4):
    tr, tc = tid // C4, tid % C4
    for i in range(4):
        for j in range(4):
            owner[tr + C4 * i, tc + C4 * j] = tid
fig, axs = plt.subplots(1, 2, figsize=(9, 3.8))
axs[0].imshow(owner, cmap="tab20")
for (t, s), x in np.ndenumerate(owner):
    axs[0].text(s, t, x, ha="center", va="center", fontsize=6)
axs[0].set_title(f"intra: thread owning score entry (t, s), C = {C_}", fontsize=9)
axs[0].set_xlabel("s (key)")
axs[0].set_ylabel("t (query)")

KP = r3.padded_k(128)
cs = list(r3.CHUNK_SIZES) + [2 * max(r3.CHUNK_SIZES)]  # the offered sizes, and the next one up (not offered)
bvs = [r3.value_tile(c, KP, 128) for c in cs]
intra_kb = [r3._intra_layout(c, KP)[-1] * 4 / 1024 for c in cs]
# the state kernel's largest variant: with the output, the delta rule (a third row block) or the additive family
# (the split P1's parts)
state_kb = [max(r3._state_layout(c, KP, bv, d, True)[-1] for d in (False, True)) * 4 / 1024 for c, bv in zip(cs, bvs)]
x = np.arange(len(cs))
axs[1].bar(x - 0.2, intra_kb, 0.4, label="intra")
axs[1].bar(x + 0.2, state_kb, 0.4, label="state")
axs[1].axhline(227, color="red", ls="--", lw=1, label="227 KB: the most one block may use")
axs[1].axhline(r3.SMEM_STATIC_LIMIT / 1024, color="grey", ls=":", lw=1, label="48 KB: without opting in")
axs[1].set_xticks(x, [f"C = {c}" + ("" if c in r3.CHUNK_SIZES else "\n(not offered)") for c in cs])
axs[1].set_ylabel("dynamic shared memory per block (KB)")
axs[1].set_title(f"K = V = 128 (K' = {KP})", fontsize=9)
axs[1].legend(fontsize=7)
fig.tight_layout()
plt.show()
display(Markdown("| C | intra threads | intra shared KB | state threads (BV) | state shared KB |\n"
                 "|--:|--:|--:|--:|--:|\n"
                 + "\n".join(f"| {c}{'' if c in r3.CHUNK_SIZES else ' (not offered)'} | {(c // 4) ** 2} | {ik:.2f} | "
                             f"{(KP // 4) * (bv // 4)} ({bv}) | {sk:.2f} |"
                             for c, bv, ik, sk in zip(cs, bvs, intra_kb, state_kb))))

# %% [markdown]
# The intra kernel stages a chunk's `K` and `Q` rows whole, plus `A_qk` and `L` (`C × C` each): its shared memory
# grows with `C · K + C²`, and above 48 KB the launch must raise the kernel's limit first (`_launch`). At
# `C = 128` it would exceed what one block may have, which is why the chunk sizes stop at 64. The docstring's
# table of shared memory and registers (the register counts are ptxas's, from the compile tier):

# %%
show_doc(doc_section("Shared memory and registers"))

# %% [markdown]
# ## 3. The kernels
#
# From the package with `inspect.getsource`: the micro-kernel every product uses, a staging loop, the two
# kernels, the state kernel's per-chunk staging and prefetch (two device functions that r6 reuses), and the
# launch code.

# %%
for name in ("_mm_nn", "_stage_input4", "_rows_stager", "_intra_kernel", "_stage_chunk", "_chunk_prefetcher",
             "_state_kernel", "launches"):
    display(Markdown(f"**`{name}`**"))
    display(Code(inspect.getsource(getattr(r3, name)), language="python"))

# %% [markdown]
# Things to notice:
#
# * `_mm_nn` is the register-blocking idea in 20 lines: per 4 steps of the contraction, 4 loads of 4 consecutive
#   floats of `A` and 4 of `B` (`ld4`: one 128-bit `ld.shared.v4.f32` instead of four scalar loads), then 64
#   FMAs from registers. r2's scores kernel did 1 FMA per shared load. In the intra kernel the left factor is
#   lower triangular, so the contraction stops at the tile's diagonal, rounded up to a multiple of 8 for
#   `_mm_nn8` (`kdim = 8 (rr // 2 + 1)`: the left factor is zero past its diagonal).
# * The staging loops (`_stage_input`, `_stage_input4`, `_stage_scratch`) issue `BATCH` (or `QBATCH`) loads per
#   thread before storing any of them, so a load's latency is paid once per batch; 128-bit loads only where
#   `_rows_aligned` says every row is 16-byte aligned. The state kernel also asks L2 for the next chunk's rows
#   (`prefetch_l2`) before it computes on this one.
# * Those loops take their sizes as arguments, so every load recomputes its row and column (`4 e // cols`,
#   `4 e % cols`) and its 4-D address in 64-bit arithmetic. Where every size is a compile-time constant,
#   `_rows_stager` builds a copy in which each thread owns one column quad and fixed rows: a load is an address
#   add and a compare. In the decay state kernel the general loops had executed ~85 M integer instructions for
#   1.6 M loads -- a quarter of the kernel's time that looked like waiting on memory and was instruction issue
#   (the profile below, and the module docstring's "What limits each kernel").
# * Shared memory is **one dynamic array** with hand-computed offsets (`_intra_layout`, `_state_layout`);
#   regions are reused once consumed, each reuse behind a `syncthreads`: in `intra` the `Q` rows become the
#   staged right-hand tile (the `W` tile for `Q'`, then the `V` tiles) and the `K` rows become `diag(βγ) K`,
#   then the `U` tile; in `state` (delta rule with output) `K` replaces `W` and `Q'` after the product.
# * The inverse runs *in place* in `Lkk`'s region: the diagonal blocks' columns go through the scratch `O_T`,
#   then each block row's `T_IJ`, as in the NumPy check of section 1.
# * The state kernel keeps `S` in registers as 4 × 4 tiles and writes it to shared memory once per chunk, only
#   because the product `[W; Q'] S` needs every row of it.
#
# ## 4. Smoke run against the oracle
#
# `B1 T40 H1 K=V=16` (the last chunk partial at every chunk size), all four recurrences, with an initial state.

# %%
B, T, H, K, V = 1, 40, 1, 16, 16
rows = []
for rec in reference.RECURRENCES:
    inp = make_inputs(B, T, H, K, V, rec, initial_state=True, seed=0)
    args = (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"])
    o_ref, h_ref = reference.recurrent(*args, initial_state=inp["initial_state"])
    for C in r3.CHUNK_SIZES:
        o, ht = la.attention(*args, initial_state=inp["initial_state"], output_final_state=True, rung=r3.NAME,
                             chunk_size=C)
        errs = (rel_err(o, o_ref), rel_err(ht, h_ref))
        rows.append(f"| {rec} | {C} | {errs[0]:.1e} | {errs[1]:.1e} | {'ok' if max(errs) <= TOL_FP32 else 'FAIL'} |")
        assert max(errs) <= TOL_FP32, (rec, C, errs)
display(Markdown(f"| recurrence | C | rel err o | rel err final state | within {TOL_FP32:g} |\n|---|--:|--:|--:|---|\n"
                 + "\n".join(rows)))

# %% [markdown]
# **The split schedule.** For plain and decay attention r3 runs, by default, three kernels instead of two (the
# module docstring's section "The split schedule"): the state walk stores every chunk's starting state `S_c` to a
# buffer `hs`, and an output kernel computes every chunk's `O = scale (diag(γ) Q S_c + Aqk V)` at once, as fla's
# `chunk_fwd_o` does. Both of its big kernels stage by asynchronous copies (`cp.async`, inline PTX) a stage ahead,
# so that loads and products overlap: the state kernel copies chunk c + 1 while it multiplies chunk c, the output
# kernel streams slabs of `S_c` and `V` through three buffers (the docstring's section, and `diff` it against the
# fused schedule's state kernel, which still stages, waits, multiplies). The delta rule and the gated delta rule have
# a split of their own under `schedule="split"` (their default too since it was timed on the H200:
# `r3.DELTA_SCHEDULE`): the intra kernel in state-only mode (W, U), a walk that computes `V_new = U - W S_c` and
# stores it beside `S_c`, then the same output kernel with `V_new` for `V`. Which kernels run for each recurrence at
# `C = 64` (the split schedule's fixed copy maps need whole rows: `r3.split_fits`), and how far the two schedules'
# outputs are apart:

# %%
from numba import cuda  # noqa: E402

B, T, H, K, V = 1, 70, 1, 16, 16
for rec in reference.RECURRENCES:
    inp = make_inputs(B, T, H, K, V, rec, initial_state=True, seed=1)
    d = {n: (None if a is None else cuda.to_device(np.ascontiguousarray(a))) for n, a in inp.items()}
    res = {}
    for sched in r3.SCHEDULES:
        o = cuda.to_device(np.full((B, T, H, V), np.nan, np.float32))
        ht = cuda.to_device(np.full((B, H, K, V), np.nan, np.float32))
        todo = r3.launches(d["q"], d["k"], d["v"], d["g"], d["beta"], o, d["initial_state"], ht, K**-0.5, 64,
                           schedule=sched)
        for _, launch in todo:
            launch()
        res[sched] = ([name for name, _ in todo], o.copy_to_host())
    gap = rel_err(res["split"][1], res["fused"][1])
    print(f"{rec:12s} fused: {' -> '.join(res['fused'][0]):14s} split: {' -> '.join(res['split'][0]):22s}"
          f" outputs differ by {gap:.1e}")
    assert gap <= TOL_FP32, (rec, gap)

# %% [markdown]
# **The walk and the output in one launch** (`r3.OVERLAP`, the docstring's section of that name). The walk is a
# handful of blocks, one per SM at the standard shape, while the SM has room for a second block; so where the two
# kernels' blocks are the same size, both roles become blocks of one grid. A block learns its role from a *ticket*
# (an atomic counter read when it starts): the first tickets walk, the rest compute the output of one chunk each,
# chunk-major, each waiting for a per-chunk count that the walkers raise once `S_c` is stored. Why tickets and not
# the block index: a block holds a ticket only once it runs, so every walker is running before any output block
# waits on it, and nothing can deadlock whatever order the GPU starts blocks in. On the H200 it gained 3-4 %, not
# the up to 0.56 ms that a free output would: both roles are bound by instruction issue, so they mostly share the
# SM's issue slots. Here at a size the simulator affords (C = 16: 16 threads in both roles; two value tiles of 16, so
# each chunk's count must reach 2), the same output bit for bit as the two launches:

# %%
inp = make_inputs(1, 70, 2, 16, 32, "decay", initial_state=True, seed=2)
d = {n: (None if a is None else cuda.to_device(np.ascontiguousarray(a))) for n, a in inp.items()}
outs = {}
for overlap in (True, False):
    r3.OVERLAP = overlap
    o = cuda.to_device(np.full((1, 70, 2, 32), np.nan, np.float32))
    ht = cuda.to_device(np.full((1, 2, 16, 32), np.nan, np.float32))
    todo = r3.launches(d["q"], d["k"], d["v"], d["g"], d["beta"], o, d["initial_state"], ht, 16**-0.5, 16, bv=16)
    for _, launch in todo:
        launch()
    outs[overlap] = ([name for name, _ in todo], o.copy_to_host())
r3.OVERLAP = True
print(f"one launch: {' -> '.join(outs[True][0])}; two: {' -> '.join(outs[False][0])}; "
      f"outputs equal bit for bit: {np.array_equal(outs[True][1], outs[False][1])}")
assert np.array_equal(outs[True][1], outs[False][1]) and outs[True][0][-1] == "overlap"

# %% [markdown]
# **Where the walkers land.** Which SM runs a walker is left to the race for the tickets: on an H100,
# `tools/placement_probe.py` found the first 128 tickets on 87 SMs, 41 of them running two walkers, while the first 128
# blocks *by index* land on 120 SMs. Both extremes were tried and both lost about 5 %: roles by block index (nearly
# every walker beside an output block, timed on an H100) and walkers placed two to an SM on purpose by `%smid` (timed
# on the H200: `h200_tune_r3_place_*.json` in the tuning tables of section 6, variant `OVERLAP_PLACE`). The tickets'
# random mix wins, and it is also the simplest: one atomic per block, no hand-backs. A lesson worth keeping: a
# plausible story ("walkers lose issue slots to output blocks") is a guess until the clock agrees with it.

# %% [markdown]
# ## 5. Napkin math
#
# The docstring's count of bytes and FLOPs at the standard shape:

# %%
show_doc(doc_section("Bytes and FLOPs"))


# %% [markdown]
# The same count as code, from the scratch shapes `launches` allocates and the loops of the two kernels (the fused
# schedule; the split schedule's bytes and FLOPs are in the docstring's section on it), so that it can be evaluated
# at any shape. Each array is counted once; the state kernel's `ceil(V / BV)` blocks of a head
# each read the chunk's rows, and those re-reads (which the L2 mostly absorbs: the blocks of one head run at the
# same time) are listed apart. FLOPs as executed: the `C × C` score tiles whole, the triangular products up to the
# diagonal (on average `(C + 4) / 2` of the `C` terms), the inverse as a dense triangular one.

# %%
def r3_budget(rec, B, T, H, K, V, C, BV, itemsize=4):
    """{kernel: (bytes read once, bytes written, bytes re-read by the further value tiles, FLOPs)} of r3's two
    kernels with the output."""
    has_g, delta = rec in ("decay", "gated_delta"), rec in ("delta", "gated_delta")
    N = B * T * H
    KP = r3.padded_k(K)
    tiles = -(-V // BV)
    f = lambda d: N * d * 4  # noqa: E731  a float32 [token-head, d] scratch array
    x = lambda d: N * d * itemsize  # noqa: E731  an input array
    # intra: stages q, k, v (and g, beta); writes bcum, (w, u, qp), u2
    rd = x(K) * 2 + x(V) + (x(1) if has_g else 0) + (x(1) if delta else 0)
    wr = (f(1) if has_g else 0) + (f(KP) + f(V) + f(KP) if delta else 0) + f(V)
    tri = (C + 4)  # FLOPs per output column of a triangular [C, C] x [C, n] product, per row: 2 (C + 4) / 2
    fl = 2 * C * KP * (1 + delta) + tri * V  # scores (Aqk, and Lkk), U'' = Aqk U (or Aqk V)
    if delta:
        fl += 2 * C * C / 3 + tri * (2 * KP + V)  # inverse; W, Q'; U
    out = {"intra": (rd, wr, 0, fl * N)}
    # state: per chunk the rows [W; Q'] (or Q) and K, the values U (or V) and U'', the gates; writes o
    rows = (f(KP) * 2 if delta else x(K)) + x(K)
    s_rd = rows + (f(V) if delta else x(V)) + f(V) + (f(1) if has_g else 0)
    s_fl = (2 * (1 + delta) * KP * V + 2 * KP * V) * N  # [W; Q'] S (or Q S), the update K^T V_new
    out["state"] = (s_rd, f(V), (tiles - 1) * rows, s_fl)
    return out


data_dir = figures.find_data_dir()
data = figures.load_or_explain(data_dir)
copy_gbps, peak, peak_src = figures.ceilings(data) if data else (None, figures.DATASHEET_FP32_TFLOPS, "datasheet")
std = tuple(figures.STANDARD[k] for k in "BTHKV")
MiB = 2**20
C0 = r3.DEFAULT_CHUNK
BV = r3.value_tile(C0, r3.padded_k(std[3]), std[4])
lines, floors = [], {}
for rec in reference.RECURRENCES:
    bud = r3_budget(rec, *std, C=C0, BV=BV)
    once = sum(v[0] + v[1] for v in bud.values())
    again = sum(v[2] for v in bud.values())
    fl = sum(v[3] for v in bud.values())
    mem_ms = once / copy_gbps / 1e6 if copy_gbps else float("nan")
    fma_ms = fl / peak / 1e9
    floors[rec] = max(mem_ms, fma_ms)
    counted = bench.counted_bytes(rec, *std)
    lines.append(f"| {rec} | " + ", ".join(f"{n} {(v[0] + v[1]) / MiB:,.0f}" for n, v in bud.items())
                 + f" | {once / MiB:,.0f} ({once / counted:.1f}× the minimum) | {again / MiB:,.0f} | "
                 f"{fl / (std[0] * std[1] * std[2]) / 1e3:.0f} k | {mem_ms:.2f} | {fma_ms:.2f} |")
display(Markdown(
    f"At {figures.shape_str(std)}, C = {C0}, BV = {BV}; floors at copy {copy_gbps or float('nan'):.0f} GB/s and fp32 "
    f"FMA {peak:.0f} TFLOP/s ({peak_src}):\n\n| recurrence | MiB per kernel | MiB total | + MiB re-read | "
    "FLOPs per token-head | memory floor ms | FMA floor ms |\n|---|---|--:|--:|--:|--:|--:|\n" + "\n".join(lines)))

# %% [markdown]
# Compared with r2 (its notebook, section 5): the chunk states `h`, the scores `aqk` / `lkk` and the separate
# `V_new` pass are gone from global memory. What remains is one round trip of `W, U, Q', U''` between the two
# kernels and the state kernel's re-reads per value tile. The FLOPs are of the same order as r2's (the same
# algorithm; `Q'` and `U''` add two `C`-wide products, and the score tiles are computed whole) but now run as
# register-blocked tiles. Both floors are below a millisecond: whatever r3 measures above that is time spent
# waiting, not computing or moving bytes.

# %% [markdown]
# ## 6. The H200 measurements
#
# The bench's records at the standard shape (every rung and peer in `figures/data`), against the floors above:

# %%
def show_measurements(key):
    if data is None:
        print("No bench results found (figures/data/*.json): run `linattn-numba bench` on a GPU machine.")
        return
    mine = [r for r in figures.ordered(data.records) if r.get("key") == key]
    if not mine:
        print(f"No records of rung {key!r} in figures/data yet: `linattn-numba bench` on a GPU (every rung by "
              "default) adds them. Until then, the floors above against the rungs below it:")
    table = [r for r in figures.ordered(data.records) if figures.shape_tuple(r) == std
             and r.get("kind") in ("rung", "peer")]
    display(Markdown(figures.markdown_table(table)))
    for r in mine:
        if figures.timed(r) and figures.shape_tuple(r) == std and r["recurrence"] in floors:
            fl = floors[r["recurrence"]]
            print(f"{key} {r['recurrence']}: {r['median_ms']:.3g} ms measured, floor {fl:.2f} ms "
                  f"({100 * fl / r['median_ms']:.0f} % of the way there)")
    tmp = tempfile.mkdtemp()
    path, why = figures.plot_ladder(data, os.path.join(tmp, "ladder.png"))
    display(Image(path)) if path else print(why)


show_measurements(r3.NAME)

# %% [markdown]
# ### How the tiles were chosen
#
# `BV_TABLE` and `DEFAULT_CHUNK` come from a tuning run, as the docstring says:

# %%
show_doc(doc_between("How the tiles were chosen", "What limits each kernel"))


def json_docs(pattern, accept):
    """(path, document) of every readable JSON file under figures/data (any subfolder) whose name matches
    ``pattern`` and whose document ``accept`` takes, by file name."""
    out = []
    for p in sorted(glob.glob(os.path.join(data_dir or ".", "**", pattern), recursive=True)):
        try:
            with open(p) as fh:
                doc = json.load(fh)
        except (OSError, ValueError):
            continue
        if accept(doc):
            out.append((p, doc))
    return out


def tune_runs():
    """(path, document) of every tools/tune_r3.py JSON of rung r3 under figures/data (``*r3_tune*.json`` and
    ``*tune_r3_*.json``), oldest first by the date each run recorded."""
    import datetime

    def is_r3(d):
        return isinstance(d, dict) and isinstance(d.get("recurrences"), dict) and d.get("rung", "shared") == "shared"

    def when(item):
        try:
            return datetime.datetime.strptime(item[1].get("date", ""), "%a %b %d %H:%M:%S %Y")
        except ValueError:
            return datetime.datetime.min

    return sorted(json_docs("*r3_tune*.json", is_r3) + json_docs("*tune_r3_*.json", is_r3), key=when)


tunes = tune_runs()
if not tunes:
    print("No tuning JSON (figures/data/**/*r3_tune*.json) yet: tools/tune_r3.py on a GPU writes it.")
for p, doc in tunes:
    shp = doc.get("shape", {})
    shape = tuple(shp.get(n) for n in "BTHKV") if shp else None
    head = f"**{os.path.relpath(p, data_dir)}** ({doc.get('date', '?')}"
    head += f", {figures.shape_str(shape)})" if shape and None not in shape else ")"
    out = []
    for rec, res in doc["recurrences"].items():
        best = res.get("best") or {}
        for r in sorted(res.get("records", []), key=lambda r: (r.get("chunk", 0), r.get("bv", 0))):
            if not r.get("median_ms"):
                out.append(f"| {rec} | {r.get('chunk')} | {r.get('bv')} | not timed: {r.get('error', '?')} | | | |")
                continue
            split = ", ".join(f"{k[:-3]} {v:.3g}" for k, v in r.items()
                              if k.endswith("_ms") and k not in ("median_ms", "p10_ms", "p90_ms"))
            # the schedule and any module constant the run varied (tools/tune_r3.py --vary: upper-case keys)
            variant = ", ".join([r["schedule"]] if r.get("schedule") else []
                                + [f"{k}={v}" for k, v in r.items() if k.isupper()])
            mark = " **fastest**" if r is best or r == best else ""
            table_bv = r3.BV_TABLE.get((r.get("chunk"), r3.padded_k(shape[3]) if shape and shape[3] else None))
            out.append(f"| {rec} | {r['chunk']} | {r['bv']} | {variant} | {r['median_ms']:.3g}{mark} | {split} | "
                       f"{'yes' if table_bv == r['bv'] else ''} |")
    display(Markdown(head + "\n\n| recurrence | C | BV | variant | total ms | per kernel (ms) | BV_TABLE's choice |\n"
                     "|---|--:|--:|---|--:|---|---|\n" + "\n".join(out)))

# %% [markdown]
# (The per-kernel times come from timing each of `launches`' callables alone; a file named `*earlier*` is a
# tuning run of an earlier version of the kernels, kept for the history.)
#
# And Nsight Compute, when a profile of this rung is committed (`figures/data/*ncu*.csv`; notebook
# `profiling_on_h200` explains the columns):

# %%
index = ncu.kernel_index([rungs.module(r) for r in rungs.RUNGS])
mod_name = r3.__name__.rsplit(".", 1)[-1]
found = []
for path, rep in ncu.load_dir(data_dir) if data_dir else []:
    ncu.assign_modules(rep.kernels, index)
    found += [k for k in rep.kernels if k.module == mod_name]
if found:
    display(Markdown(ncu.table(found, markdown=True)))
else:
    print(f"No ncu profile of {mod_name} in figures/data yet (tools/ncu_rungs.py --rungs {r3.NAME}).")

# %% [markdown]
# ## 7. What limits r3, and what the next rungs change
#
# The docstring's reading of the tuning run's per-kernel times:

# %%
show_doc(doc_between("What limits each kernel", "Numerics:"))
# the newest run that timed every recurrence (a probe of one recurrence, e.g. BV = 32 alone, is not r3's tuning)
latest = [doc for p, doc in tunes
          if "earlier" not in os.path.basename(p) and len(doc["recurrences"]) == len(reference.RECURRENCES)]
for doc in latest[-1:]:
    for rec, res in doc["recurrences"].items():
        best = res.get("best") or {}
        if best.get("intra_ms") and best.get("state_ms"):
            tot = best["intra_ms"] + best["state_ms"]
            print(f"{rec}: state pass {best['state_ms']:.3g} ms of {tot:.3g} ms ({100 * best['state_ms'] / tot:.0f} %)"
                  f" at C = {best['chunk']}, BV = {best['bv']}")

# %% [markdown]
# Where inside each kernel the time goes: Nsight Compute samples every warp's stall reason at each instruction
# (`tools/h200.sh ncu_src`), and `tools/ncu_phases.py` splits the samples at the block barriers. One bar per
# kernel and profile (`figures/data/probes/h200_ncu_phases_<commit>.json`): d3650db is the rung before the split
# P1, K's third row block and the inverse's partial sums, a1325d3 the rung after them (the docstring's table above),
# 9ed137f the rung with the fixed-map stagers and the four-row update (the staging's share halves).

# %%
def phase_profiles():
    """[(commit, [kernel dicts])] of every ncu phase summary (tools/ncu_phases.py --json) under figures/data."""
    docs = json_docs("*ncu_phases_*.json",
                     lambda d: isinstance(d, list) and all(isinstance(k, dict) and "phases" in k for k in d))
    return [(os.path.basename(p).rsplit("_", 1)[-1].split(".")[0], doc) for p, doc in docs]


profiles = phase_profiles()
names = ["intra, decay", "state, decay", "intra, gated delta", "state, gated delta"]  # ncu_src's launch order
if not profiles:
    print("No ncu phase summary (figures/data/**/*ncu_phases_*.json) yet: tools/h200.sh ncu_src, then "
          "tools/ncu_phases.py --json.")
else:
    fig, ax = plt.subplots(figsize=(10, 0.5 + 0.45 * len(names) * len(profiles)))
    labels, y = [], 0
    cmap = plt.get_cmap("tab20")
    colors = {}
    for i, name in enumerate(names):
        for sha, doc in profiles:
            if i >= len(doc):
                continue
            left = 0.0
            for ph in doc[i]["phases"]:
                first = ph["phase"] not in colors  # one legend entry per phase name
                c = colors.setdefault(ph["phase"], cmap(len(colors) % 20))
                ax.barh(y, 100 * ph["share"], left=left, color=c, edgecolor="white", lw=0.5,
                        label=ph["phase"] if first else None)
                if ph["share"] > 0.06:
                    ax.text(left + 50 * ph["share"], y, ph["phase"], ha="center", va="center", fontsize=6)
                left += 100 * ph["share"]
            labels.append(f"{name} ({sha})")
            y += 1
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("share of the kernel's warp-stall samples (%)")
    ax.set_title("r3's kernels phase by phase (B1 T8192 H16 K=V=128, H200)", fontsize=9)
    ax.legend(fontsize=6, ncol=9, loc="upper center", bbox_to_anchor=(0.5, -0.16))
    fig.tight_layout()
    plt.show()

# %% [markdown]
# * The **state pass is sequential** over `T / C` chunks, with one block per `BV` value columns and head:
#   `B · H · ceil(V / BV)` blocks in all (below, against the SM count). With few heads and a long sequence (one
#   sequence, a couple of heads, as when prefilling a long prompt) most SMs idle while a handful of blocks walk
#   the chunks.
# * Inside a block, the staging of each chunk waits behind a barrier with nothing to overlap it (one block per
#   SM; since the fixed-map stagers it is 12-16 % of the state kernel's time, see the 9ed137f bars), the state
#   pass is issue-bound (16 warps per SM issue every instruction: the FMAs were 57 % of them at 9ed137f, and the
#   products' loops now issue 583 instructions per 512 FMAs), and the delta rule's intra kernel adds the
#   inverse's short, barrier-separated steps. Outside the loops, integer work adds up: the split schedule's output
#   kernel located each slab with `j // NSP` and `j % 3`, 64-bit divisions by constants that became ~60 uniform
#   instructions a slab, until counters stepped once a slab replaced them (c1b6e3c), and the counters' own 64-bit
#   arithmetic went when each pass's slabs were written out as steps built for their slab (`OUT_UNROLL`; the module
#   docstring has the timings, and why the steps pin their copies' offsets). Reading the SASS (`tools/sass.py`)
#   finds such costs without a GPU. Code written out is paid for at compile time: Numba's `inline="always"` copies
#   a device function's IR into every call site and types it there, so six steps each inlining a product took
#   Numba about two minutes; inlined by NVVM instead (`_common.nvvm_inline`, `forceinline`), each product is
#   compiled once and the SASS is the same but for a few integer instructions.
# * `W, U, Q', U''` still make one round trip through global memory between the two kernels.

# %%
sms = next((s["device"].get("multiprocessors") for s in (data.sources if data else []) if s.get("device")), None)
for shape in (std, (1, 65536, 2, 128, 128)):
    bv = r3.value_tile(C0, r3.padded_k(shape[3]), shape[4])
    nblk = shape[0] * shape[2] * -(-shape[4] // bv)
    print(f"{figures.shape_str(shape)}: {nblk} state blocks" + (f" for {sms} SMs" if sms else "")
          + f", each walking {-(-shape[1] // C0)} chunks of {C0} tokens in order")

# %% [markdown]
# **r4 `scan`** attacks the first: the recurrence is linear in the state, so a *segment* of the sequence maps its
# start state affinely, `S → M S + S_local`, and affine maps compose associatively. r4 cuts the sequence into
# segments, computes every segment's map in parallel (with a chunked rung as its engine: `r4_scan.DEFAULT_ENGINES`
# puts r6 `tensor_cores` first, then this rung), combines the maps with a parallel scan, and reruns each segment
# from its true start state:
# sequence parallelism. **r5 `warp_roles`** takes the second, the docstring's "next step": producer warps fill
# one half of a double buffer with `cp.async` while consumer warps compute on the other half.

# %% [markdown]
# **The diagonal.** The split schedule's output kernel (`_out_fma_products`) multiplies `Aqk V` only up to each
# warp's last row, and its scores (`_out_scores`) skip the sub-tiles that lie wholly above the diagonal, for the
# whole block or (`OUT_TRI`'s `s`) for the warps whose rows all lie above one. What lies above the diagonal inside
# the bands and sub-tiles that remain is still computed, as zeros times values. The count below follows those loops
# for one output block (one chunk of one head), with the letters of `r3.OUT_TRI` as set. The walk's `K^T V` per
# chunk is beside it, because the overlapped launch issues both. Compare "executed" with "needed" (the lower
# triangle):

# %%
def out_block_fmas(C, KP, K, V):
    """{product: (FMAs executed, FMAs the lower triangle needs)} for one chunk of one head in r3's split
    schedule: the output block's three products and the walk's update, at chunk C, padded K' = KP."""
    _, CBW = r3._out_shape(C, KP)
    skip, band8, _, step8 = r3._out_tri()
    v_exec = -(-V // CBW) * CBW  # whole passes of CBW value columns
    # a warp's rows: 4 tile rows of 4 x 8 tiles (16), or 2 of 2 x 16 (8, with "b"); Aqk V stops at the band's last
    # row (ctx[5]) rounded up to its loop's step (16, or 8 with "8")
    band = 8 if band8 == 8 and step8 and C == 64 else min(16, C)
    av = sum(band * min(band * (b + 1), C) * v_exec for b in range(C // band))
    C4, C8 = C // 4, C // 8  # the scores' sub-tiles: rows tr + C/4 i, columns tc + C/8 j, kept where j <= 2 i + 1
    scores = sum(C4 * C8 for i in range(4) for j in range(2 * i + 2)) * KP
    if skip and C == 64:  # the warps with rows tr < C/8 skip sub-tile 2 i + 1 (C/8 x C/8 entries each)
        scores -= 4 * C8 * C8 * KP
    tri = C * (C + 1) // 2
    return {"scores Q K^T": (scores, tri * K), "Q S_c": (C * KP * v_exec, C * K * V), "Aqk V": (av, tri * V),
            "walk K^T V": (KP * V * C, K * V * C)}


K_std, V_std = std[3], std[4]
fm = out_block_fmas(C0, r3.padded_k(K_std), K_std, V_std)
ex_all = sum(e for e, _ in fm.values())
rows = [f"| {name} | {e:,} | {n:,} | {100 * (e - n) / e:.1f} % |" for name, (e, n) in fm.items()]
waste = sum(e - n for e, n in fm.values())
display(Markdown(f"At C = {C0}, K = {K_std}, V = {V_std}:\n\n| product | FMAs executed | needed | above the "
                 "diagonal |\n|---|--:|--:|--:|\n" + "\n".join(rows)
                 + f"\n| **all** | {ex_all:,} | | {100 * waste / ex_all:.1f} % |"))

# %% [markdown]
# A few percent of the launch's FMAs fall above the diagonal, about the size of each of the last tuning steps in
# the module docstring's history. The scores' share was cut where a whole warp can skip (`OUT_TRI`'s `s`: about
# half a percent of the forward, measured). The rest needs narrower row bands. On this map, 8-row bands
# (2 x 16 tiles a warp, `b`) make every slab load read 16 distinct float4, which is two wavefronts, and that
# includes the `Q S_c` product with no triangle in it; with `Aqk V` stopping at the 8-row band's end (`8`) the
# three letters measured no faster than `s` alone on an H100. A 2 x 16 tile a thread would need 18 shared loads per
# 128 FMAs instead of 12. Try `r3.OUT_TRI = "sb8"` above and count again. (Exercise 6.)

# %% [markdown]
# ## Exercises
#
# **Write the rung yourself:** `exercises/r3_shared.py` is this rung with the two kernel bodies and the blockwise
# inverse `_wy_inverse` left to you (part 1 the additive recurrences, part 2 the delta rule); the launches, layouts and
# device helpers of section 3 are given. Grade it with `linattn-numba grade exercises/r3_shared.py --quick` (no
# GPU needed: the grader runs it in the simulator); `exercises/README.md` says how.
#
# 1. Derive `Q'` and `U''` for the **additive** recurrences from section 1 (no `W`): why is `Q' = diag(γ) Q`,
#    and why does the state kernel then need `γ_t` (`O_GM` in `_state_layout`)?
# 2. Count, for `C = 64, K = 128`, the shared loads and FMAs per thread of the scores phase of the intra kernel,
#    and compare the FMA : load ratio with r2's scores kernel (16 × 16 tiles, one output per thread).
# 3. Count the barriers the blockwise inverse executes at `C = 16, 32, 64` (from `_intra_kernel`), and compare
#    with a forward substitution of two barriers per row. How many threads are busy in the diagonal-block solve,
#    and what would a 32 × 32 diagonal block change?
# 4. Using `_intra_layout`, find the largest chunk size whose intra kernel fits in 227 KB at `K = 128`, and at
#    `K = 64`. What else (threads per block, the inverse, the state pass's `C`-row staging) would make a larger
#    chunk slow or fast?
# 5. `r3_budget` lists the state kernel's re-reads per value tile. Which `BV` minimises the bytes, and why was
#    the tuned `BV` (`BV_TABLE`) not simply the widest? (Hint: registers per thread, threads per block and blocks
#    per SM: `STATE_REGS_BLOCKS` and the launch bounds.)
# 6. With `out_block_fmas` (section 7), find how narrow a warp's row band must be to halve `Aqk V`'s share above
#    the diagonal. Then count the shared-memory wavefronts a warp needs per 4 steps of the inner dimension, for
#    4 x 8 tiles mapped 4 tile rows x 8 tile columns a warp, and for 2 x 16. At what ratio of shared-load issue
#    to FMA issue would the narrower band pay?
