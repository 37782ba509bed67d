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
# # 00 · Linear attention in NumPy: one function, three forms
#
# **Learning goals.** After this notebook you can
#
# 1. derive causal linear attention from softmax attention, and write its state recurrence
#    `S_t = S_{t-1} + k_t v_t^T`, `o_t = scale · S_t^T q_t`, and its gated / delta-rule variants;
# 2. compute the same function in three forms -- **recurrent** (token by token), **parallel** (one masked
#    matrix product) and **chunked** (matrix products inside chunks, a state carried between them) -- and check
#    numerically that they agree;
# 3. count the cost of each: `O(T² d)` for the parallel form against `O(T d²)` for the recurrent one, and say
#    where they cross;
# 4. read the H200 measurements in `figures/data/` and find where linear attention overtakes softmax attention.
#
# Everything here is NumPy float64: these are the **oracles** (`linattn_numba.reference`) that every GPU kernel in
# the later notebooks is checked against.

# %%
# Setup. Numba chooses between a real GPU and its CUDA simulator once, when numba.cuda is first imported:
# run on the GPU when the CUDA driver reports one, else in the (patched) simulator.
import os

import linattn_numba.sim

linattn_numba.sim.use_if_no_gpu()

import tempfile  # noqa: E402
import time  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from IPython.display import Image, Markdown, display  # noqa: E402

from linattn_numba import figures, reference  # noqa: E402
from linattn_numba.testing import make_inputs  # noqa: E402

np.set_printoptions(precision=3, suppress=True, linewidth=110)

# %% [markdown]
# ## 1. From softmax attention to a state
#
# Causal softmax attention, for one head, with queries, keys `q_t, k_t ∈ R^K` and values `v_t ∈ R^V`:
#
# $$o_t = \sum_{s \le t} \frac{\exp(q_t \cdot k_s)}{\sum_{s' \le t} \exp(q_t \cdot k_{s'})}\, v_s .$$
#
# Every output looks at every earlier token: `T²/2` scores per head, and the keys and values of the whole prefix
# must be kept (the KV cache). **Linear attention** drops the softmax and keeps the plain dot product
# (flash-linear-attention's convention: no normaliser, a `scale = K^{-1/2}`):
#
# $$o_t = \text{scale}\sum_{s \le t} (q_t \cdot k_s)\, v_s
#       = \text{scale}\; \Big(\underbrace{\textstyle\sum_{s \le t} k_s v_s^{T}}_{S_t \,\in\, R^{K \times V}}\Big)^{T} q_t .$$
#
# Moving the brackets is the whole trick: the prefix is summarised by a fixed-size **state** `S_t`, updated once
# per token:
#
# $$S_t = S_{t-1} + k_t v_t^T, \qquad o_t = \text{scale}\; S_t^T q_t .$$
#
# Three variants change only the update (`reference` names them by which of `g`, `beta` is given):
#
# | recurrence | update of `S` per token | known as |
# |---|---|---|
# | `plain` | `S ← S + k vᵀ` | causal linear attention |
# | `decay` | `S ← exp(g_t) S + k vᵀ`, `g_t ≤ 0` | RetNet, Lightning, Mamba2, fla's simple GLA |
# | `delta` | `S ← S + β_t k (v − Sᵀk)ᵀ` | DeltaNet |
# | `gated_delta` | `S ← exp(g_t) S`, then the delta step | Gated DeltaNet |
#
# The delta rule writes only the *difference* between the value and what the state already returns for that
# key, `v − Sᵀk`: it corrects memory instead of piling onto it.

# %% [markdown]
# ## 2. Form one: the recurrence, written out
#
# Our own ten lines, for one head, then compared with the package's oracle `reference.recurrent` (which does
# the same over all `(b, h)` at once).

# %%
def recurrent_one_head(q, k, v, g=None, beta=None):
    """q, k: [T, K]; v: [T, V]; g, beta: [T] or None. The definition, token by token."""
    T, K = q.shape
    S = np.zeros((K, v.shape[1]))
    o = np.empty((T, v.shape[1]))
    for t in range(T):
        if g is not None:
            S = np.exp(g[t]) * S                              # decay
        if beta is not None:
            S = S + beta[t] * np.outer(k[t], v[t] - S.T @ k[t])  # delta rule: write the correction
        else:
            S = S + np.outer(k[t], v[t])                      # additive write
        o[t] = K**-0.5 * S.T @ q[t]
    return o, S


B, T, H, K, V = 1, 40, 1, 8, 6
for rec in reference.RECURRENCES:
    inp = make_inputs(B, T, H, K, V, rec, dtype=np.float64, seed=1)
    sl = lambda a: None if a is None else a[0, :, 0]  # noqa: E731  (b=0, h=0)
    o_mine, S_mine = recurrent_one_head(sl(inp["q"]), sl(inp["k"]), sl(inp["v"]), sl(inp["g"]), sl(inp["beta"]))
    o_ref, S_ref = reference.recurrent(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"])
    print(f"{rec:12s} max |o - oracle| = {np.abs(o_mine - o_ref[0, :, 0]).max():.1e}   "
          f"max |S - oracle| = {np.abs(S_mine - S_ref[0, 0]).max():.1e}")

# %% [markdown]
# ## 3. Form two: the parallel ("attention matrix") form
#
# Unroll the plain recurrence: `o_t = scale Σ_{s≤t} (q_t·k_s) v_s`, i.e. for the whole sequence
#
# $$O = \text{scale}\;\big(Q K^T \odot M\big)\, V, \qquad M_{ts} = [s \le t] .$$
#
# With decay, the state written at token `s` has been multiplied by `exp(g_{s+1}) … exp(g_t)` by the time token
# `t` reads it, so the mask becomes `M_ts = exp(b_t − b_s)` with `b_t = g_0 + … + g_t` -- always computed as
# one exponential of a difference `≤ 0`, never as `exp(b_t) · exp(−b_s)` (which overflows; see
# `reference.chunked`'s docstring). It is ordinary attention with a decaying causal mask instead of a softmax.

# %%
def parallel_one_head(q, k, v, g=None):
    """Additive recurrences only (plain, decay): O = scale (Q K^T ⊙ M) V."""
    T, K = q.shape
    b = np.zeros(T) if g is None else np.cumsum(g)
    diff = np.where(np.tril(np.ones((T, T), bool)), b[:, None] - b[None, :], -np.inf)
    M = np.exp(diff)  # 1 (or the decay) on and below the diagonal, exp(-inf) = 0 above
    return K**-0.5 * (q @ k.T * M) @ v, M


for rec in ("plain", "decay"):
    inp = make_inputs(1, T, 1, K, V, rec, dtype=np.float64, seed=2)
    sl = lambda a: None if a is None else a[0, :, 0]  # noqa: E731
    o_par, M = parallel_one_head(sl(inp["q"]), sl(inp["k"]), sl(inp["v"]), sl(inp["g"]))
    o_rec, _ = recurrent_one_head(sl(inp["q"]), sl(inp["k"]), sl(inp["v"]), sl(inp["g"]))
    print(f"{rec:6s} parallel vs recurrent: max |diff| = {np.abs(o_par - o_rec).max():.1e}")

fig, axs = plt.subplots(1, 2, figsize=(8, 3.6))
for ax, (rec, title) in zip(axs, (("plain", "plain: M = causal mask"), ("decay", "decay: M_ts = exp(b_t - b_s)"))):
    inp = make_inputs(1, 24, 1, K, V, rec, dtype=np.float64, seed=3)
    _, M = parallel_one_head(inp["q"][0, :, 0], inp["k"][0, :, 0], inp["v"][0, :, 0],
                             None if inp["g"] is None else inp["g"][0, :, 0])
    im = ax.imshow(M, cmap="viridis", vmin=0, vmax=1)
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("key token s")
    ax.set_ylabel("query token t")
fig.colorbar(im, ax=axs, shrink=0.8)
plt.show()

# %% [markdown]
# The delta rule has a parallel form too, but the values must first be corrected for what earlier tokens
# already wrote: `V_new = A diag(β) V` with `A = (I + tril(diag(β)(K Kᵀ ⊙ M), −1))⁻¹` -- a unit lower-triangular
# solve (the "WY" or "UT" form). `reference.parallel` implements it for all four recurrences.
#
# ## 4. Form three: chunks -- the form the fast GPU kernels use
#
# Cut the sequence into chunks of `C` tokens. Inside a chunk, use the parallel form (matrix products: what GPUs
# are built for); between chunks, carry only the state `S` (`[K, V]`, fixed size):
#
# $$O_c = \text{scale}\big(\operatorname{diag}(\gamma)\, Q_c S_c + (Q_c K_c^T \odot \Gamma) V_c\big),\qquad
#   S_{c+1} = \gamma_C S_c + (\operatorname{diag}(\gamma_C/\gamma) K_c)^T V_c .$$
#
# `C = 1` is the recurrence, `C = T` is the parallel form; everything in between trades sequential steps
# (`T/C` of them) for work inside a chunk (`C²` per chunk). Now all three forms of the package's oracles,
# all four recurrences, with an initial state, and several chunk sizes, including ones that do not divide `T`:

# %%
B, T, H, K, V = 2, 50, 3, 16, 12
rows = []
for rec in reference.RECURRENCES:
    inp = make_inputs(B, T, H, K, V, rec, dtype=np.float64, initial_state=True, seed=4)
    args = (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"])
    h0 = inp["initial_state"]
    o_r, S_r = reference.recurrent(*args, initial_state=h0)
    o_p, S_p = reference.parallel(*args, initial_state=h0)
    worst = max(np.abs(o_p - o_r).max(), np.abs(S_p - S_r).max())
    for C in (1, 7, 16, 64):
        o_c, S_c = reference.chunked(*args, initial_state=h0, chunk_size=C)
        worst = max(worst, np.abs(o_c - o_r).max(), np.abs(S_c - S_r).max())
    rows.append((rec, worst, np.abs(o_r).max()))
    assert worst < 1e-9 * max(1.0, np.abs(o_r).max()), (rec, worst)
display(Markdown("| recurrence | max abs difference, all forms and chunk sizes | max abs output |\n|---|--:|--:|\n"
                 + "\n".join(f"| {r} | {w:.1e} | {m:.2f} |" for r, w, m in rows)))

# %% [markdown]
# Differences at the level of float64 rounding (`~1e-14`): one function, three algorithms.
#
# ## 5. Cost: `O(T² d)` against `O(T d²)`
#
# Per head, with `K = V = d`, counting a multiply-add as 2 FLOPs (plain recurrence):
#
# * **recurrent**: per token, the update `S += k vᵀ` is `2d²` and the read `Sᵀq` is `2d²`: **`4 T d²`** in all,
#   with `d²` floats of state; but `T` *sequential* steps.
# * **parallel**: `Q Kᵀ` then `(·) V` over the causal half: `≈ T² d + T² d =` **`2 T² d`**, and a `T × T` score
#   matrix; no sequential dependence at all.
# * **chunked**: `T/C` chunks of `2C²d` (intra) + `4Cd²` (inter, state): **`2 T C d + 4 T d²`**: linear in `T`,
#   with only `T/C` sequential steps.
#
# The recurrent and parallel counts cross at `2 T² d = 4 T d²`, i.e. **`T = 2d`** (256 tokens at `d = 128`):
# beyond that the attention-matrix view does more work, and the gap grows linearly with `T`.

# %%
d = 128
Ts = np.logspace(5, 20, 61, base=2)
fig, ax = plt.subplots(figsize=(6.5, 3.8))
ax.loglog(Ts, 4 * Ts * d**2, label="recurrent: 4 T d²")
ax.loglog(Ts, 2 * Ts**2 * d, label="parallel: 2 T² d")
ax.loglog(Ts, 2 * Ts * 64 * d + 4 * Ts * d**2, "--", label="chunked, C = 64: 2 T C d + 4 T d²")
ax.axvline(2 * d, color="grey", lw=0.8, ls=":")
ax.annotate("T = 2d", (2 * d, 1e7), fontsize=8, xytext=(4, 0), textcoords="offset points")
ax.set_xlabel("sequence length T")
ax.set_ylabel("FLOPs per head")
ax.set_title(f"FLOPs of the three forms, d = K = V = {d}", fontsize=10)
ax.legend(fontsize=8)
ax.grid(which="both", alpha=0.3)
plt.show()

# %% [markdown]
# FLOPs are not time. The recurrent form is a chain of `T` dependent steps: on a GPU only `B·H` independent
# chains (times however the state can be split) keep the machine busy. The parallel form is one big matrix
# product that a GPU loves -- until `T²` catches up. The chunked form is the compromise that fast kernels
# implement. Even in NumPy (one CPU core, float64, `B = H = 1`, `d = 64`) the shapes of the curves show:

# %%
res = []
for T_ in (128, 256, 512, 1024, 2048):
    inp = make_inputs(1, T_, 1, 64, 64, "plain", dtype=np.float64, seed=5)
    args = (inp["q"], inp["k"], inp["v"])
    row = [T_]
    for fn in (lambda: reference.recurrent(*args), lambda: reference.parallel(*args),
               lambda: reference.chunked(*args, chunk_size=64)):
        t0 = time.perf_counter()
        fn()
        row.append((time.perf_counter() - t0) * 1e3)
    res.append(row)
display(Markdown("| T | recurrent ms | parallel ms | chunked (C=64) ms |\n|--:|--:|--:|--:|\n"
                 + "\n".join(f"| {r[0]} | {r[1]:.1f} | {r[2]:.1f} | {r[3]:.1f} |" for r in res)))

# %% [markdown]
# (NumPy's recurrent form pays Python's per-token overhead, which hides its `d²` work at this size: on a CPU the
# *interpreter* is the sequential bottleneck, on a GPU it is the chain of dependent steps.)
#
# ## 6. Measured on an H200: linear against softmax attention
#
# `linattn-numba bench` writes JSON into `figures/data/`; `linattn-numba figures` draws every figure from it, and
# so does this notebook. Below: the rungs and fla's kernels at the standard shape (B4 T8192 H16 K=V=128, fp32),
# and, when the bench was run with `--softmax`, causal softmax attention (`torch_sdpa_causal`, FlashAttention
# under PyTorch's SDPA).

# %%
data_dir = figures.find_data_dir()
data = figures.load_or_explain(data_dir)
if data is None:
    print("No bench results found (figures/data/*.json): run `linattn-numba bench` on a GPU machine.")
else:
    std = tuple(figures.STANDARD[k] for k in "BTHKV")
    rows = [r for r in figures.ordered(data.records) if figures.shape_tuple(r) == std]
    display(Markdown(figures.markdown_table(rows)))
    for s in data.sources:
        print(figures.source_line(s))

# %%
if data is not None:
    soft = [r for r in data.records if r.get("key") == "torch_sdpa_causal" and figures.timed(r)]
    if not soft:
        print("No softmax records yet: `linattn-numba bench --softmax` times torch's causal SDPA at the same shapes, "
              "and this cell then shows where linear attention overtakes it. Until then, the cost model says: "
              "softmax attention costs ~T² per head, the recurrent rungs ~T, so the ratio of the two moves by a "
              "factor 2 for every doubling of T.")
    else:
        # For each softmax record, the best linear-attention implementation at the same B, T, H, K, V.
        lin = [r for r in data.records if figures.timed(r) and r.get("recurrence") in reference.RECURRENCES
               and r.get("kind") in ("rung", "peer")]
        lines = []
        for s in sorted(soft, key=lambda r: figures.shape_tuple(r)):
            same = [r for r in lin if figures.shape_tuple(r) == figures.shape_tuple(s)]
            if not same:
                continue
            best = min(same, key=lambda r: r["median_ms"])
            T_ = figures.shape_tuple(s)[1]
            # extrapolate with the ideal exponents (softmax ~T², linear ~T): equal at T* = T · t_lin / t_soft
            cross = T_ * best["median_ms"] / s["median_ms"]
            lines.append(f"| {figures.shape_str(figures.shape_tuple(s))} | {s['median_ms']:.3g} | {best['key']} "
                         f"({best['recurrence']}) | {best['median_ms']:.3g} | ~{cross:,.0f} |")
        display(Markdown("| shape | softmax SDPA ms | best linear | its ms | T* where they cross (T² vs T "
                         "extrapolation) |\n|---|--:|---|--:|--:|\n" + "\n".join(lines)))
        tmp = tempfile.mkdtemp()
        path, why = figures.plot_time_vs_T(data, os.path.join(tmp, "time_vs_T.png"))
        if path:
            display(Image(path))
        else:
            print(why)

# %% [markdown]
# ## 7. What the GPU notebooks change
#
# All three forms above are correct; none is fast on a GPU as written. The ladder of rungs starts from the
# recurrence (`r0_naive`: the loop above, one thread per value column, the state in global memory), keeps the
# state in registers (`r1_recurrent`), then turns chunks into matrix products (`r2_chunked`: section 4's form,
# one formula per kernel). Each rung's notebook shows its kernel, checks it against these oracles, and reads its
# H200 numbers from `figures/data`.
#
# ## Exercises
#
# 1. Extend `parallel_one_head` to the delta rule: build `L = tril(diag(β)(K Kᵀ ⊙ M), −1)`, solve
#    `(I + L) V_new = diag(β) V` with `np.linalg.solve` (or forward substitution), and compare with
#    `reference.parallel`.
# 2. Show numerically why `exp(b_t − b_s)` and not `exp(b_t) · exp(−b_s)`: take `T = 64`, `g = −2` everywhere, and
#    compute both in float32. Where do `inf` and `nan` appear?
# 3. Count the chunked form's FLOPs for the gated delta rule (the solve for `V_new` adds `~C² (K + V) / 2` per
#    chunk) and find the `C` that minimises FLOPs at `d = 128`. Why do real kernels still pick `C = 64`?
# 4. The state of one head is `K·V·4` bytes in fp32. At `B = 256`, `H = 16`, `K = V = 128`, how many bytes does a
#    single decode step have to read and write? Compare with a KV cache of 8192 tokens for softmax attention.
