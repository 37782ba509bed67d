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
# # r2 · `chunked`: matrix products inside chunks, a short sequential pass between them
#
# **Learning goals.** After this notebook you can
#
# 1. state the chunkwise-parallel algorithm (notebook 00, section 4) for the additive recurrences and, in the
#    UT / WY form, for the delta rule;
# 2. split it into kernels by what depends on what: which steps are parallel over chunks, and which single
#    step stays sequential;
# 3. read five small Numba kernels, one formula each, including a textbook shared-memory tiled matmul and a
#    forward substitution;
# 4. count the bytes every intermediate costs, and predict r2's floor on the H200 from the copy bandwidth.

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
from linattn_numba.rungs import r2_chunked as r2  # noqa: E402
from linattn_numba.testing import TOL_FP32, make_inputs, rel_err  # noqa: E402

print("running on", "Numba's CUDA simulator (CPU)" if la.sim.active() else "a CUDA GPU")

# %% [markdown]
# ## 1. The math of this step
#
# Cut the sequence into chunks of `C` tokens (`C ∈ {16, 32, 64, 128}`; the last chunk may be shorter). Inside
# a chunk, with the in-chunk cumulative log-gates `b_t = Σ_{s ≤ t, s in chunk} g_s` (0 without `g`):
#
# $$\gamma_t = e^{b_t},\qquad \Gamma_{ts} = e^{b_t - b_s}\ (s \le t),\qquad \gamma_C = e^{b_{C-1}} ,$$
#
# every exponent a difference `≤ 0`. **Additive** recurrences (plain, decay), `V_new = V`:
#
# $$O = \text{scale}\big(\operatorname{diag}(\gamma)\,Q\,S_c + (QK^T \odot \Gamma)\,V_{new}\big),\qquad
#   S_{c+1} = \gamma_C\,S_c + (\operatorname{diag}(\gamma_C/\gamma)\,K)^T V_{new}.$$
#
# **Delta rule**: each token's write depends on the state just before it, so the chunk's values are first
# corrected for what the state and the earlier tokens of the chunk already hold. With
# `L = tril(diag(β)(K Kᵀ ⊙ Γ), −1)` (strictly lower):
#
# $$(I + L)\,W = \operatorname{diag}(\beta\gamma)\,K,\qquad (I + L)\,U = \operatorname{diag}(\beta)\,V,\qquad
#   V_{new} = U - W S_c ,$$
#
# then the same `O` and `S_{c+1}`. `W` and `U` do not depend on the state: **every chunk computes them in
# parallel**. Only `V_new = U − W S_c` and the state update are sequential over chunks -- `T/C` steps instead of
# `T`. The oracle `reference.chunked` is this algorithm in NumPy; its docstring derives it.

# %% [markdown]
# ## 2. The kernel map: one formula per kernel
#
# ```
#   1* gates   grid (ceil(BTH/256),)        256 thr     one token: b_t = sum of g over its chunk up to t
#   2  scores  grid (NT, BH, n(n+1)/2)      16 x 16     one entry (t, s) of a 16x16 lower-triangular tile:
#                                                       Aqk = Q K^T ⊙ Γ, and** Lkk = tril(diag(β)(K K^T ⊙ Γ), -1)
#   3** wu     grid (NT, BH, ceil((K+V)/128)) 128 thr   one column of [W | U]: forward substitution over C rows
#   4  state   grid (ceil(V/32), BH)        32 x K/16   one value column and 16 state rows in registers;
#                                                       loops over ALL chunks: store S_c, V_new = U - W S_c,
#                                                       S <- γ_C S + (diag(γ_C/γ) K)^T V_new        <- sequential
#   5  output  grid (NT, BH, ceil(V/32))    32 x 8      one value column, rows ty, ty+8, ... of a chunk:
#                                                       O = scale (diag(γ) Q S_c + Aqk V_new)
#   (* only with g, ** only for the delta rule; NT = ceil(T/C) chunks; every intermediate in global memory)
#
#   parallel over chunks:   [1] -> [2] -> [3] ----------------> [5]
#   sequential over chunks:                  [4] c=0 -> c=1 -> ... -> c=NT-1   (writes S_c for [5])
# ```
#
# The scores kernel launches only the tiles on or below the diagonal of each chunk's `C × C` matrix, enumerated
# by `blockIdx.z = ti (ti + 1)/2 + tj`. The picture, from the rung's `TILE` and a chunk of `C = 64`:

# %%
C_ = 64
n = C_ // r2.TILE
grid = np.full((C_, C_), np.nan)
fig, ax = plt.subplots(figsize=(4.6, 4.2))
for ti in range(n):
    for tj in range(ti + 1):
        z = ti * (ti + 1) // 2 + tj
        grid[ti * r2.TILE:(ti + 1) * r2.TILE, tj * r2.TILE:(tj + 1) * r2.TILE] = z
        ax.text(tj * r2.TILE + r2.TILE / 2 - 0.5, ti * r2.TILE + r2.TILE / 2 - 0.5, f"z={z}", ha="center",
                va="center", fontsize=8)
ax.imshow(grid, cmap="Pastel1")
ax.set_xlabel("key token s in the chunk")
ax.set_ylabel("query token t in the chunk")
ax.set_title(f"scores: the {n * (n + 1) // 2} blocks (blockIdx.z) of one chunk, C = {C_};\n"
             "white: not launched (above the diagonal)", fontsize=9)
plt.show()

# %% [markdown]
# ## 3. The kernels
#
# From the package with `inspect.getsource`. Each factory specialises on compile-time flags, as in r0 and r1.

# %%
for name in ("_gates_kernel", "_scores_kernel", "_wu_kernel", "_state_kernel", "_output_kernel", "forward"):
    display(Markdown(f"**`{name}`**"))
    display(Code(inspect.getsource(getattr(r2, name)), language="python"))

# %% [markdown]
# Things to notice: the scores kernel is a classic shared-memory tiled matmul (16-wide slabs, a `+1` padded row
# against bank conflicts, two barriers per slab); the wu kernel reads back rows it wrote itself from global
# memory (simple, and cached); the state kernel's `W S_c` sums over rows that *different threads* hold, so it
# adds partial sums into shared memory with atomics (non-deterministic summation order: last-bit differences
# between runs).
#
# ## 4. Smoke run against the oracle
#
# `B1 T40 H1 K=V=8` with `chunk_size=16`: three chunks, the last one partial, all four recurrences, with an
# initial state; then the gated delta rule at every supported chunk size.

# %%
B, T, H, K, V = 1, 40, 1, 8, 8
rows = []
for rec in reference.RECURRENCES:
    inp = make_inputs(B, T, H, K, V, rec, initial_state=True, seed=0)
    args = (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"])
    o, ht = la.attention(*args, initial_state=inp["initial_state"], output_final_state=True, rung="chunked",
                         chunk_size=16)
    o_ref, h_ref = reference.recurrent(*args, initial_state=inp["initial_state"])
    errs = (rel_err(o, o_ref), rel_err(ht, h_ref))
    rows.append(f"| {rec} | 16 | {errs[0]:.1e} | {errs[1]:.1e} | {'ok' if max(errs) <= TOL_FP32 else 'FAIL'} |")
    assert max(errs) <= TOL_FP32, (rec, errs)
inp = make_inputs(B, T, H, K, V, "gated_delta", initial_state=True, seed=1)
args = (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"])
o_ref, h_ref = reference.recurrent(*args, initial_state=inp["initial_state"])
for C in r2.CHUNK_SIZES[1:]:
    o, ht = la.attention(*args, initial_state=inp["initial_state"], output_final_state=True, rung="chunked",
                         chunk_size=C)
    errs = (rel_err(o, o_ref), rel_err(ht, h_ref))
    rows.append(f"| gated_delta | {C} | {errs[0]:.1e} | {errs[1]:.1e} | {'ok' if max(errs) <= TOL_FP32 else 'FAIL'} |")
    assert max(errs) <= TOL_FP32, (C, errs)
display(Markdown(f"| recurrence | C | rel err o | rel err final state | within {TOL_FP32:g} |\n|---|--:|--:|--:|---|\n"
                 + "\n".join(rows)))

# %% [markdown]
# ## 5. Napkin math
#
# The bytes each kernel moves to and from global memory (each array once; re-reads that hit L1/L2 not counted)
# and its FLOPs, at the standard shape with `C = 64`, computed from the array sizes that `forward` allocates:

# %%
def r2_budget(rec, B, T, H, K, V, C, itemsize=4):
    """{kernel: (bytes read, bytes written, FLOPs)} of r2's pipeline, each array touched once."""
    has_g, delta = rec in ("decay", "gated_delta"), rec in ("delta", "gated_delta")
    N = B * T * H  # token-heads
    NT = -(-T // C)
    tok = lambda d: N * d * 4  # noqa: E731  a float32 [B, T, H, d] array
    inp = lambda d: N * d * itemsize  # noqa: E731  an input array
    hbuf = B * NT * H * K * V * 4
    avg_cols = sum((ti + 1) * r2.TILE for ti in range(C // r2.TILE)) / (C // r2.TILE)
    out = {}
    if has_g:
        out["gates"] = (inp(1), tok(1), N * C / 2)
    out["scores"] = (2 * inp(K), tok(C) * (1 + delta), 2 * K * avg_cols * (1 + delta) * N)
    if delta:
        out["wu"] = (inp(K) + inp(V) + tok(C), tok(K) + tok(V), (K + V) * C * N)
    out["state"] = (inp(K) + (tok(K) + tok(V) if delta else inp(V)), hbuf + (tok(V) if delta else 0),
                    (4 if delta else 2) * K * V * N)
    out["output"] = (inp(K) + hbuf + tok(C) + (tok(V) if delta else inp(V)), tok(V), (2 * K * V + V * (C + 1)) * N)
    return out


data_dir = figures.find_data_dir()
data = figures.load_or_explain(data_dir)
copy_gbps, peak, peak_src = figures.ceilings(data) if data else (None, figures.DATASHEET_FP32_TFLOPS, "datasheet")
std = tuple(figures.STANDARD[k] for k in "BTHKV")
Bs, Ts, Hs, Ks, Vs = std
MiB = 2**20
lines = []
floors = {}
for rec in reference.RECURRENCES:
    budget = r2_budget(rec, *std, C=64)
    rd = sum(b[0] for b in budget.values())
    wr = sum(b[1] for b in budget.values())
    fl = sum(b[2] for b in budget.values())
    mem_ms = (rd + wr) / copy_gbps / 1e6 if copy_gbps else float("nan")
    fma_ms = fl / peak / 1e9
    floors[rec] = max(mem_ms, fma_ms)
    lines.append(f"| {rec} | " + ", ".join(f"{k} {(b[0] + b[1]) / MiB:.0f}" for k, b in budget.items())
                 + f" | {(rd + wr) / MiB:,.0f} | {fl / (Bs * Ts * Hs) / 1e3:.0f} k "
                 f"(recurrence: {bench.counted_flops(rec, 1, 1, 1, Ks, Vs) / 1e3:.0f} k) | {mem_ms:.2f} | "
                 f"{fma_ms:.2f} |")
display(Markdown(
    f"At {figures.shape_str(std)}, C = 64; floors at copy {copy_gbps or float('nan'):.0f} GB/s and fp32 FMA "
    f"{peak:.0f} TFLOP/s ({peak_src}):\n\n| recurrence | MiB per kernel | MiB total | FLOPs per token-head | "
    "memory floor ms | FMA floor ms |\n|---|---|--:|--:|--:|--:|\n" + "\n".join(lines)))

# %% [markdown]
# Two things stand out. The chunked algorithm does *more* FLOPs than the recurrence (the `C²` intra-chunk
# attention and, for the delta rule, the solve), but they are parallel: compare the floors with r1's measured
# times in section 6. And the bytes are dominated by **intermediates**, above all the
# chunk states `h` (`B · NT · H · K · V · 4`, written by the state kernel and read back by the output kernel):
# r2 is designed to be **bandwidth-bound** on its scratch traffic, plus the sequential state kernel, whose
# `NT` steps each do a chunk's worth of work per thread.

# %% [markdown]
# ## 6. The H200 measurements

# %%
if data is None:
    print("No bench results found (figures/data/*.json): run `linattn-numba bench` on a GPU machine.")
else:
    mine = [r for r in figures.ordered(data.records) if r.get("key") == "chunked"]
    if not mine:
        print("No records of rung 'chunked' in figures/data yet: `linattn-numba bench` on a GPU (every rung by "
              "default) adds them. Until then, compare the floors above with the rungs below it:")
    rows = [r for r in figures.ordered(data.records) if figures.shape_tuple(r) == std
            and (r.get("kind") == "rung" or r.get("kind") == "peer")]
    display(Markdown(figures.markdown_table(rows)))
    for r in mine:
        if figures.timed(r) and figures.shape_tuple(r) == std and r["recurrence"] in floors:
            fl = floors[r["recurrence"]]
            print(f"chunked {r['recurrence']}: {r['median_ms']:.3g} ms measured, floor {fl:.2f} ms "
                  f"({100 * fl / r['median_ms']:.0f} % of the way there)")
    tmp = tempfile.mkdtemp()
    path, why = figures.plot_ladder(data, os.path.join(tmp, "ladder.png"))
    if path:
        display(Image(path))
    else:
        print(why)

# %% [markdown]
# ## 7. What limits r2, and what r3 changes
#
# * **Every intermediate goes through global memory**: `Aqk`, `Lkk`, `W`, `U`, and the chunk states `h` --
#   about five times the bytes of the inputs for the gated delta rule.
# * **Five launches** with a full write and re-read between each pair.
# * The scores tile is 16 × 16 with one output per thread: each shared load feeds one FMA (low reuse); the
#   output kernel re-reads `Aqk` and `V_new` per value column.
# * The state kernel is the sequential part: `NT` chunk steps, each a `[C, K] × [C, V]` product done with
#   scalar FMAs by one block per 32 value columns.
#
# **r3 `shared`** keeps the chunked algorithm but fuses it: shared-memory tiles and register blocking (each thread
# computes a small tile, so each shared load feeds several FMAs), and no round trip of the intermediates through
# global memory.
#
# ## Exercises
#
# 1. Using `r2_budget`, find the chunk size that minimises the bytes for the gated delta rule at the standard
#    shape. Which term pushes `C` up, which pushes it down?
# 2. The wu kernel solves with `C` sequential rows per column. Write the NumPy version of the same forward
#    substitution for one chunk and check it against `reference.chunked`'s `W` and `U` (copy the lines that form
#    `A` from its source and compare `A @ (...)`).
# 3. The output kernel reads `h[b, c, h]` (`K × V` floats) for every chunk. Fuse the output into the state kernel
#    on paper: what does the state kernel then need to read, and what does it no longer write?
# 4. Why must the scores kernel mask entries above the diagonal *before* `exp` (or not compute them) rather than
#    multiply by 0 after? Construct `g` for which `exp(b_t − b_s)` with `s > t` overflows float32 at `C = 64`.
