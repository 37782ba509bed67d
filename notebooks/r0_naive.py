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
# # r0 · `naive`: the recurrence, transcribed literally
#
# **Learning goals.** After this notebook you can
#
# 1. map the recurrence onto CUDA threads: which part of the state one thread owns, and why the columns of the
#    state need no communication at all;
# 2. read a Numba CUDA kernel: `cuda.jit`, `blockIdx`/`threadIdx`, compile-time flags that fold branches away;
# 3. run it in Numba's CUDA simulator (no GPU needed) and check it against the float64 oracle;
# 4. estimate its bytes and FLOPs per token, and explain from the H200 numbers why it is slow: not bandwidth, not
#    FLOPs, but **latency with almost no threads in flight**.

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
from linattn_numba import bench, figures, reference  # noqa: E402
from linattn_numba.rungs import r0_naive  # noqa: E402
from linattn_numba.testing import TOL_FP32, make_inputs, rel_err  # noqa: E402

print("running on", "Numba's CUDA simulator (CPU)" if la.sim.active() else "a CUDA GPU")

# %% [markdown]
# ## 1. The math of this step
#
# Per head `(b, h)`, the state `S` is `[K, V]`. Look at one **column** `j` of it, `S[:, j]`. In every recurrence
# (notebook 00) the update of column `j` involves only column `j` of the state, `v_t[j]`, and the whole `q_t`,
# `k_t`:
#
# $$S[:, j] \leftarrow e^{g_t} S[:, j], \qquad
#   u_j = \begin{cases}\beta_t\,(v_{tj} - k_t \cdot S[:, j]) & \text{delta rule}\\ v_{tj} & \text{additive}\end{cases},$$
# $$S[:, j] \leftarrow S[:, j] + u_j\, k_t, \qquad o_{tj} = \text{scale}\; q_t \cdot S[:, j].$$
#
# So the `V` columns are **independent sequential problems**: one thread per column, each walking the `T`
# tokens, never talking to another thread. That is the entire parallel decomposition of r0: `B · H · V` threads.

# %% [markdown]
# ## 2. The thread/block map
#
# ```
#   grid  = (ceil(V / 64), B·H)          block = 64 threads (two warps)
#
#   head bh = blockIdx.y  (b = bh // H, h = bh % H)
#
#              blockIdx.x = 0                  blockIdx.x = 1
#            threadIdx.x: 0  1  2 ... 63       0  1 ... 63
#   S[b,h] = [ column     0  1  2 ... 63   |  64 65 ... 127 ]     each thread walks all K rows of its
#            [    :       :  :  :      :   |   :  :       :  ]     column, for every token t = 0 .. T-1
#            [ row K-1                     |                 ]
#
#   state S lives in global memory (the ht buffer): read and written at every token
# ```
#
# Consecutive threads own consecutive columns, so the warp's accesses to `S[i, j]`, `v[t, j]` and `o[t, j]` are
# **coalesced** (one 128-byte transaction per warp); `q[t, i]` and `k[t, i]` are one address for the whole warp
# (a **broadcast**). The picture, drawn from the rung's own constant `BLOCK`:

# %%
K_, V_ = 16, 128
owner = np.tile(np.arange(V_) % r0_naive.BLOCK, (K_, 1))  # thread index within the block
block = np.tile(np.arange(V_) // r0_naive.BLOCK, (K_, 1))  # blockIdx.x
fig, ax = plt.subplots(figsize=(9, 2.4))
ax.imshow(owner + 0.35 * r0_naive.BLOCK * block, cmap="viridis", aspect="auto")
for x in range(0, V_ + 1, r0_naive.BLOCK):
    ax.axvline(x - 0.5, color="white", lw=2)
ax.set_xlabel(f"value column j (V = {V_}): colour = owning thread; white lines = block boundaries "
              f"(BLOCK = {r0_naive.BLOCK})")
ax.set_ylabel(f"state row i (K = {K_})")
ax.set_title("r0: one head's state S[K, V]; each thread owns a whole column and walks its K rows", fontsize=9)
plt.show()

# %% [markdown]
# ## 3. The kernel
#
# Shown from the package with `inspect.getsource` (this *is* the code that runs). `_kernel` is a factory: the
# flags `HAS_G`, `HAS_BETA`, `HAS_H0` are Python booleans captured by the closure, so Numba compiles them as
# constants and folds the `if`s away -- each recurrence gets a kernel with only its own arithmetic. Note
# `float32(0.0)`: a bare `0.0` would make the accumulator float64 on the GPU.

# %%
display(Code(inspect.getsource(r0_naive._kernel), language="python"))

# %% [markdown]
# And the launch (`forward`, the rung contract every rung implements):

# %%
display(Code(inspect.getsource(r0_naive.forward), language="python"))

# %% [markdown]
# ## 4. Smoke run against the oracle
#
# Tiny sizes (the simulator runs one Python thread per CUDA thread): `B1 T16 H1 K=V=8`, all four recurrences,
# with an initial state, through the public API with `rung="naive"`.

# %%
B, T, H, K, V = 1, 16, 1, 8, 8
rows = []
for rec in reference.RECURRENCES:
    inp = make_inputs(B, T, H, K, V, rec, initial_state=True, seed=0)
    args = (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"])
    o, ht = la.attention(*args, initial_state=inp["initial_state"], output_final_state=True, rung="naive")
    o_ref, h_ref = reference.recurrent(*args, initial_state=inp["initial_state"])
    err_o, err_h = rel_err(o, o_ref), rel_err(ht, h_ref)
    rows.append(f"| {rec} | {err_o:.1e} | {err_h:.1e} | {'ok' if max(err_o, err_h) <= TOL_FP32 else 'FAIL'} |")
    assert max(err_o, err_h) <= TOL_FP32, (rec, err_o, err_h)
display(Markdown(f"| recurrence | rel err o | rel err final state | within {TOL_FP32:g} |\n|---|--:|--:|---|\n"
                 + "\n".join(rows)))

# %% [markdown]
# ## 5. Napkin math
#
# Per token and head, from the kernel above (`K = V = 128`, fp32):
#
# * **FLOPs** (the recurrence's own count, `bench.counted_flops`): update `2KV` + output `2KV`, plus `KV` for
#   the decay and `2KV` for the delta rule's `k · S` -- 64 k to 115 k FLOPs.
# * **Bytes the kernel touches**: each pass over the state column reads and writes `K` floats per thread,
#   i.e. `2 · K · V · 4 = 128 KiB` per head per pass per token -- against `(2K + V) · 4 = 1.5 KiB` of input a
#   perfect kernel needs per token and head: `2KV / (2K + V)` ≈ 85× more per pass at `K = V = 128`.
# * **Passes over the state per token**: plain 1 (update + output fused in one loop), decay 2 (a separate decay
#   loop), delta 2 (`k · S`, then update), gated delta 3.
# * **Threads**: `B · H · V = 8192` at the standard shape. An H200 holds 132 SMs × 2048 = 270 k resident
#   threads: r0 fills 3 % of it, two warps per SM. Each of those warps walks a chain of dependent loads and
#   stores, `T × K` long. Nothing hides the latency.
#
# What the H200 measured for that:

# %%
data_dir = figures.find_data_dir()
data = figures.load_or_explain(data_dir)
std = tuple(figures.STANDARD[k] for k in "BTHKV")
if data is None:
    print("No bench results found (figures/data/*.json): run `linattn-numba bench` on a GPU machine.")
else:
    passes = {"plain": 1, "decay": 2, "delta": 2, "gated_delta": 3}
    Bs, Ts, Hs, Ks, Vs = std
    print("counted FLOPs per token and head:",
          ", ".join(f"{rec} {bench.counted_flops(rec, 1, 1, 1, Ks, Vs) / 1e3:.0f} k" for rec in passes))
    lines = []
    for r in figures.ordered(data.records):
        if r.get("key") != "naive" or figures.shape_tuple(r) != std or not figures.timed(r):
            continue
        rec = r["recurrence"]
        per_token_us = r["median_ms"] * 1e3 / Ts
        per_pass_row_ns = per_token_us * 1e3 / (passes[rec] * Ks)
        state_bytes = passes[rec] * 2 * Ks * Vs * 4 * Bs * Hs * Ts
        lines.append(f"| {rec} | {r['median_ms']:.4g} | {per_token_us:.1f} | {passes[rec]} | {per_pass_row_ns:.0f} | "
                     f"{state_bytes / r['median_ms'] / 1e6:.0f} | {r['gbps']:.3g} | {r['tflops']:.3g} |")
    display(Markdown(
        "| recurrence | ms | µs per token | passes over S | ns per row per pass | state traffic GB/s "
        "| effective GB/s | TFLOP/s |\n|---|--:|--:|--:|--:|--:|--:|--:|\n" + "\n".join(lines)))
    copy_gbps, peak, src = figures.ceilings(data)
    print(f"ceilings in the same data: copy {copy_gbps:.0f} GB/s; fp32 FMA {peak:.0f} TFLOP/s ({src})")
    naive = [r for r in data.records if r.get("key") == "naive" and figures.shape_tuple(r) == std and figures.timed(r)]
    if naive:
        ns = [r["median_ms"] * 1e6 / (Ts * passes[r["recurrence"]] * Ks) for r in naive]
        print(f"one row of one pass: {min(ns):.0f}-{max(ns):.0f} ns, i.e. ~{min(ns) * 1.98:.0f}-{max(ns) * 1.98:.0f} "
              f"cycles at the H200's 1.98 GHz boost clock (datasheet)")
        print(f"effective bandwidth: {100 * max(r['gbps'] for r in naive) / copy_gbps:.2f} % of copy at best; "
              f"FMA rate: {100 * max(r['tflops'] for r in naive) / peak:.2f} % of fp32 peak at best")

# %% [markdown]
# Read the numbers like this: one row of one pass costs on the order of a hundred nanoseconds, a couple of
# hundred clock cycles -- the latency of a trip to L1/L2, paid again and again, because each thread's loop
# issues one state access after another and only two warps per SM are there to overlap with. The state traffic
# (which mostly hits the caches) is far below what the caches deliver, the effective bandwidth (inputs and
# outputs once) is a fraction of a percent of the copy bandwidth, and the FMA rate is a fraction of a percent of
# peak: **no roof is close; latency is the limit.** That is why no amount of coalescing alone would fix r0.
#
# ## 6. The H200 measurements
#
# Every rung and fla's kernels at the standard shape, from `figures/data` (the rungs' rows and the fla peers;
# `not timed` rows say why, e.g. fla's chunk kernels compute in TF32 and fail the 2e-4 fp32 check):

# %%
if data is not None:
    rows = [r for r in figures.ordered(data.records)
            if figures.shape_tuple(r) == std and (r.get("key") == "naive" or r.get("kind") == "peer")]
    display(Markdown(figures.markdown_table(rows)))
    tmp = tempfile.mkdtemp()
    path, why = figures.plot_ladder(data, os.path.join(tmp, "ladder.png"))
    if path:
        display(Image(path))
    else:
        print(why)

# %% [markdown]
# ## 7. What limits r0, and what r1 changes
#
# * The **state lives in global memory** and is re-read and re-written at every token (one to three times):
#   each access is a dependent trip to the caches. → r1 keeps the state **in registers** for the whole sequence:
#   read once at the start, written once at the end.
# * **Too few threads**: `B·H·V` = 8 k threads cannot hide latency on a GPU that wants ~100 k. → r1 splits each
#   column's `K` rows over 4 lanes (4× the threads) and reduces the dot products with warp shuffles.
# * **Every thread fetches the same `q_t`, `k_t`** from global memory. → r1 stages a tile of 32 tokens of
#   `q, k, v` in shared memory with coalesced loads, once per block.
# * The decay is a **separate pass**. → r1 folds it into the update: `k · (γS) = γ (k · S)`, and
#   `S ← γS + k u` is one multiply and one FMA per element.
#
# ## Exercises
#
# 1. Change `BLOCK` to 32 and to 128 (edit `r0_naive.py`, rerun the smoke test). Which launch would you expect to
#    be faster on the H200, and why does it hardly matter here? (Hint: count warps per SM.)
# 2. Fuse the decay pass into the update loop (`S[i, j] = S[i, j] * decay + k_i u`) for the additive rules. What
#    must change for the delta rule, where `k · S` is needed *before* the update?
# 3. r0 reads `h0` into `S` and then writes `ht`: why may `h0` and `ht` be the same array here? Write a test with
#    `initial_state` and `ht` aliased (the decode `step` relies on it).
# 4. Using the table in section 5, predict r0's time at `B = 1` with the same `T, H, K, V`. Then reason about
#    whether it would be 4× faster, the same, or in between.
