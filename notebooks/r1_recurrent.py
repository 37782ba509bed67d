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
# # r1 · `recurrent`: the state in registers, `K` split across lanes
#
# **Learning goals.** After this notebook you can
#
# 1. explain why keeping the state in **registers** (read once, written once) instead of global memory is the
#    first and biggest step, and what limits how much state a thread can hold;
# 2. split a dot product across lanes of a warp and finish it with a **butterfly of `shfl_xor_sync`**;
# 3. stage inputs in **shared memory** with coalesced loads behind a barrier, and say what that saves;
# 4. treat the decode **step** (`T = 1`) as what it is -- a copy of the state -- and compare it with the copy
#    bandwidth;
# 5. read the H200 numbers (including the launch-shape sweep) and say what still bounds this rung.

# %%
# Setup. Numba chooses between a real GPU and its CUDA simulator once, when numba.cuda is first imported:
# run on the GPU when the CUDA driver reports one, else in the (patched) simulator.
import os

import linattn_numba.sim

linattn_numba.sim.use_if_no_gpu()

import inspect  # noqa: E402
import tempfile  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from IPython.display import Code, Image, Markdown, display  # noqa: E402

import linattn_numba as la  # noqa: E402
from linattn_numba import figures, reference  # noqa: E402
from linattn_numba.rungs import r1_recurrent as r1  # noqa: E402
from linattn_numba.testing import TOL_FP32, make_inputs, rel_err  # noqa: E402

print("running on", "Numba's CUDA simulator (CPU)" if la.sim.active() else "a CUDA GPU")

# %% [markdown]
# ## 1. The math of this step
#
# The same column-wise recurrence as r0, with two rearrangements that change nothing mathematically:
#
# * **split each column's rows** over `NS = 4` lanes: lane slice `s` holds rows `s, s+4, s+8, …` of `S[:, j]`
#   (`R = ⌈K/4⌉` rows; 32 at `K = 128`). A dot product `k · S[:, j] = Σ_s (Σ_{i ≡ s} k_i S_ij)` is then `R`
#   FMAs per lane plus a sum over the 4 lanes -- two `shfl_xor_sync` steps (by 1, then by 2) after which
#   *every* lane holds the total, so `u_j` needs no broadcast;
# * **fold the decay into the update**: with `γ = exp(g_t)`, `k · (γS) = γ (k · S)`, so
#
# $$u_j = \beta_t\,(v_{tj} - \gamma\, k_t\cdot S[:, j]), \qquad S[:, j] \leftarrow \gamma\, S[:, j] + u_j\, k_t,
#   \qquad o_{tj} = \text{scale}\; q_t \cdot S[:, j]$$
#
# -- one multiply and one FMA per state element, no separate decay pass.

# %% [markdown]
# ## 2. The thread/block map
#
# ```
#   block = NW warps;  grid = (ceil(V / VB), B·H)  with  VB = NW · 8 · COLS  value columns per block
#
#   lane l of warp w:   slice s = l % 4        -> rows  s, s+4, s+8, ...   (R = ceil(K/4) of them)
#                       group  l // 4  (0..7)  -> columns col0 .. col0+COLS-1,
#                       col0 = blockIdx.x·VB + w·(8·COLS) + (l//4)·COLS
#
#   registers per lane: S[R, COLS] (the state), kr[R], qr[R], u[COLS]
#   shared per block:   ks, qs [TC, 4R] (tokens x padded K), vs [TC, VB], exp(g) and beta [TC]   (TC = 32 tokens)
#
#   per token:  k.S  -> R FMAs/column + shfl_xor 1, 2   (delta rule)
#               S <- gamma S + k u ; q.S -> 2R FMAs/column + shfl_xor 1, 2 ; lane s == c % 4 writes o[t, col]
#   per TC tokens: stage the tile (coalesced), syncthreads, walk the tokens, syncthreads
# ```
#
# The ownership of one warp's part of the state, computed from the rung's own constants (`NS`, `GROUPS`,
# `DEFAULT_COLS`) -- each cell shows the lane that holds that element in its registers:

# %%
K_ = 16
R_, cols, nw = r1.launch_config(K_, 128)
warp_cols = r1.GROUPS * cols
lane_of = np.empty((K_, warp_cols), int)
for lane in range(32):
    s, grp = lane % r1.NS, lane // r1.NS
    for r in range(R_):
        for c in range(cols):
            lane_of[r * r1.NS + s, grp * cols + c] = lane
fig, ax = plt.subplots(figsize=(9, 4.2))
ax.imshow(lane_of // r1.NS, cmap="tab10", aspect="auto", alpha=0.55)
for i in range(K_):
    for j in range(warp_cols):
        ax.text(j, i, lane_of[i, j], ha="center", va="center", fontsize=7)
ax.set_xlabel(f"value column j within the warp's {warp_cols} columns (COLS = {cols} per lane; colour = group of "
              f"{r1.NS} lanes)")
ax.set_ylabel(f"state row i (K = {K_}, R = {R_} rows per lane)")
ax.set_title("r1: which lane of warp 0 holds S[i, j] in its registers", fontsize=9)
plt.show()
print(f"at K = V = 128: R = {r1.launch_config(128, 128)[0]} rows x COLS = {cols} columns = "
      f"{r1.launch_config(128, 128)[0] * cols} state registers per lane; VB = {nw * warp_cols} columns per block "
      f"of {nw} warps")

# %% [markdown]
# ## 3. The kernel
#
# From the package, with `inspect.getsource`. Look for: the staging loops (unconditional, clamped loads so the
# compiler can issue them back to back; values masked after the load), the two `syncthreads` per tile, the
# `shfl_xor_sync` butterflies, the independent partial sums that shorten each dependent-add chain, and the
# `HAS_*` flags folded at compile time.

# %%
display(Code(inspect.getsource(r1._kernel), language="python"))

# %% [markdown]
# At `T = 1` (the decode step) the work is a copy of the state plus a little arithmetic, so a different map
# is better: lane → value column (a warp reads 128 contiguous bytes of a state row per load), warp → a slab of
# rows, and the two dot products reduced across warps through shared memory:

# %%
display(Code(inspect.getsource(r1._step_kernel), language="python"))
display(Code(inspect.getsource(r1.forward), language="python"))

# %% [markdown]
# ## 4. Smoke run against the oracle
#
# `B1 T16 H1 K=V=8`, all four recurrences, with an initial state -- then the decode step: 16 calls of
# `la.step`, one token each, must give the same outputs and final state as one call over the 16 tokens.

# %%
B, T, H, K, V = 1, 16, 1, 8, 8
rows = []
for rec in reference.RECURRENCES:
    inp = make_inputs(B, T, H, K, V, rec, initial_state=True, seed=0)
    args = (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"])
    o, ht = la.attention(*args, initial_state=inp["initial_state"], output_final_state=True, rung="recurrent")
    o_ref, h_ref = reference.recurrent(*args, initial_state=inp["initial_state"])
    # the decode step, token by token, from the same initial state
    state = inp["initial_state"].copy()
    o_steps = np.stack([la.step(state, *(None if a is None else a[:, t] for a in args)) for t in range(T)], axis=1)
    errs = (rel_err(o, o_ref), rel_err(ht, h_ref), rel_err(o_steps, o_ref), rel_err(state, h_ref))
    ok = "ok" if max(errs) <= TOL_FP32 else "FAIL"
    rows.append(f"| {rec} | " + " | ".join(f"{e:.1e}" for e in errs) + f" | {ok} |")
    assert max(errs) <= TOL_FP32, (rec, errs)
display(Markdown("| recurrence | rel err o | rel err state | o via 16 steps | state via 16 steps | "
                 f"within {TOL_FP32:g} |\n|---|--:|--:|--:|--:|---|\n" + "\n".join(rows)))

# %% [markdown]
# ## 5. Napkin math
#
# Per token and head (`K = V = 128`, fp32), the FLOPs are r0's (`4KV` to `7KV`). What changed is the traffic
# and the parallelism:
#
# * **Device memory**: the inputs once per block -- `(2K + V + 2) · 4 ≈ 1.5 KiB` per token-head, `q`, `k`
#   read by each of the `⌈V/VB⌉ = 2` blocks of a head -- plus the state once in and once out per *sequence*.
#   No per-token state traffic at all (r0: 128 KiB per pass per token-head).
# * **Threads**: `B · H · V · NS / COLS` = 16 k threads, 512 warps: about 4 warps per SM on 132 SMs -- one per
#   warp scheduler. Better than r0 (2 per SM), still very thin.
# * **Per token, per warp**: for each of its `COLS` columns, `R` FMAs for `k · S` (delta), `2R` for update and
#   output, 2 + 2 shuffles, and `2R` shared loads for `k, q` -- a few hundred instructions, most of them in
#   dependent chains (each shuffle waits for its sum, the update waits for `u`).
#
# So at the standard shape the bound is neither bandwidth nor FLOPs: it is **issue latency of a sequential chain
# per token, with about one warp per scheduler to hide it**. The H200 numbers:

# %%
data_dir = figures.find_data_dir()
data = None
try:
    data = figures.load(data_dir) if data_dir else None
except figures.FiguresError as e:
    print(e)
std = tuple(figures.STANDARD[k] for k in "BTHKV")
if data is None:
    print("No bench results found (figures/data/*.json): run `linattn-numba bench` on a GPU machine.")
else:
    Bs, Ts, Hs, Ks, Vs = std
    copy_gbps, peak, src = figures.ceilings(data)
    R128, cols128, nw128 = r1.launch_config(Ks, Vs)
    warps = Bs * Hs * Vs * r1.NS // cols128 // 32
    sms = (data.sources[-1].get("device") or {}).get("multiprocessors") or 132
    print(f"standard shape: {warps} warps on {sms} SMs = {warps / sms:.1f} warps per SM")
    lines = []
    for r in figures.ordered(data.records):
        if r.get("key") not in ("naive", "recurrent") or figures.shape_tuple(r) != std or not figures.timed(r):
            continue
        per_token_us = r["median_ms"] * 1e3 / Ts
        lines.append(f"| {r['key']} | {r['recurrence']} | {r['median_ms']:.4g} | {per_token_us:.2f} | "
                     f"{per_token_us * 1e3 * 1.98:.0f} | {r['tflops']:.3g} ({100 * r['tflops'] / peak:.1f} %) | "
                     f"{r['gbps']:.3g} ({100 * r['gbps'] / copy_gbps:.1f} %) |")
    display(Markdown("| rung | recurrence | ms | µs per token | cycles per token at 1.98 GHz | TFLOP/s (% of "
                     f"{peak:.0f}, {src}) | effective GB/s (% of copy {copy_gbps:.0f}) |\n"
                     "|---|---|--:|--:|--:|--:|--:|\n" + "\n".join(lines)))
    speedups = []
    for rec in reference.RECURRENCES:
        t = {r["key"]: r["median_ms"] for r in data.records if figures.shape_tuple(r) == std and figures.timed(r)
             and r.get("recurrence") == rec and r.get("key") in ("naive", "recurrent")}
        if len(t) == 2:
            speedups.append(f"{rec} {t['naive'] / t['recurrent']:.1f}x")
    print("r1 over r0:", ", ".join(speedups))

# %% [markdown]
# Compare r1's rows across recurrences: if the time hardly moves while the gated delta rule does almost twice the
# FLOPs of the plain one, the extra arithmetic fits into the latency the chain pays anyway -- the signature of a
# latency-bound kernel.
#
# ### The launch shape: `(COLS, NW)`
#
# `COLS` (value columns per lane) trades parallelism (fewer threads) for reuse (each shared load of `k`, `q`
# feeds `COLS` FMAs); `NW` (warps per block) sets how many warps share one staged tile. The bench's `--tune`
# sweep, from the data:

# %%
if data is not None and data.tune:
    tune = [t for t in data.tune if "median_ms" in t and "cols" in t]
    best = min(tune, key=lambda t: t["median_ms"])
    rows = [f"| {t['cols']} | {t['nw']} | {t['median_ms']:.3f} | "
            + ("**fastest**" if t is best else "") + (" default" if (t["cols"], t["nw"]) ==
                                                      (r1.DEFAULT_COLS, r1.DEFAULT_NW) else "") + " |"
            for t in sorted(tune, key=lambda t: t["median_ms"])]
    shp = figures.shape_str(tuple(tune[0]["shape"][k] for k in "BTHKV"))
    display(Markdown(f"{tune[0]['recurrence']} at {shp}\n\n| COLS | NW | ms | |\n|--:|--:|--:|---|\n"
                     + "\n".join(rows)))
    if (best["cols"], best["nw"]) != (r1.DEFAULT_COLS, r1.DEFAULT_NW):
        print(f"Note: in this data the fastest launch is COLS={best['cols']}, NW={best['nw']}, not the rung's default "
              f"COLS={r1.DEFAULT_COLS}, NW={r1.DEFAULT_NW} (exercise 2).")
else:
    print("No tune records: run `linattn-numba bench --tune` on a GPU.")

# %% [markdown]
# ## 6. The H200 measurements
#
# The ladder so far, with fla's kernels as reference lines, and the decode step against the copy bandwidth:

# %%
if data is not None:
    rows = [r for r in figures.ordered(data.records) if figures.shape_tuple(r) == std
            and (r.get("key") == "recurrent" or r.get("kind") == "peer")]
    display(Markdown(figures.markdown_table(rows)))
    tmp = tempfile.mkdtemp()
    for fn, name in ((figures.plot_ladder, "ladder.png"), (figures.plot_decode_step, "decode_step.png")):
        path, why = fn(data, os.path.join(tmp, name))
        if path:
            display(Image(path))
        else:
            print(why)

# %% [markdown]
# The decode step reads and writes the whole state (`B · H · K · V · 4` bytes, twice) for one token: its only
# roof is memory bandwidth, and the figure shows how far below the copy bandwidth it runs.
#
# ## 7. What limits r1, and what r2 changes
#
# * r1 is still a **chain of `T` dependent token steps** per column group: the FLOPs per step are tiny and the
#   GPU waits on latency (shuffles, shared loads, FMA chains) with ~1 warp per scheduler.
# * More threads would need a smaller share of the state per thread (more shuffles), or more heads.
# * The FLOPs are vector FMAs; the tensor cores (which hold most of the H200's FLOP/s) are idle.
#
# **r2 `chunked`** stops walking token by token: the sequence is cut into chunks of `C` tokens, each chunk's
# contribution becomes **matrix products** that are parallel inside the chunk (notebook 00, section 4), and only
# `T / C` state updates stay sequential.
#
# ## Exercises
#
# 1. Split each column over 8 lanes instead of 4 (`NS`; `launch_config` and `forward` take it as `ns`). What
#    happens to registers per lane, to the number of shuffles per token, and to the thread count? Rerun the smoke
#    test with `r1.forward(..., ns=8)`, and compile for sm_90 (`linattn-numba compile-check recurrent`) to see the
#    register count.
# 2. The sweep above may disagree with `DEFAULT_COLS`/`DEFAULT_NW`. Decide from the data which default you would
#    ship, and at which shapes you would re-measure before changing it.
# 3. The step kernel loads the state with lane → column. Why would r1's sequence map (4 lanes per column, rows
#    strided by 4) make the step slower? Count the bytes a warp requests per load in both maps.
# 4. Estimate the decode step's time at B = 256, H = 16, K = V = 128 if it ran at the copy bandwidth in the data,
#    and compare with the measured time. Where could the difference go?
