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
# # Precision and stability: what float32 costs, and what keeps the numbers finite
#
# **Learning goals.** After this notebook you can
#
# 1. say what "correct" means for a float32 kernel checked against a float64 oracle, and how large its error
#    should be (compared with a float32 evaluation of the same loop in NumPy);
# 2. say what float16 inputs cost, and where in the pipeline the rounding happens;
# 3. explain why every exponent in the chunked kernels is a **difference** `b_t − b_s ≤ 0` of in-chunk
#    cumulative log-gates, and show the overflow / underflow of the factorised form `exp(b_t) · exp(−b_s)`;
# 4. prove that the delta rule's state cannot blow up for `‖k‖ ≤ 1`, `β ∈ [0, 1]` (the eigenvalues of
#    `I − β k kᵀ`), and show what happens when the keys are not normalised;
# 5. measure how the error of the recurrent and chunked forms grows with the chunk size and the sequence length;
# 6. explain why r2's delta rule gives results that differ in the last bits from run to run.
#
# Everything runs on the CPU: NumPy, and the rungs in Numba's CUDA simulator at smoke sizes (on a GPU machine the
# same cells run the rungs on the GPU).

# %%
# Setup. Numba chooses between a real GPU and its CUDA simulator once, when numba.cuda is first imported:
# run on the GPU when the CUDA driver reports one, else in the (patched) simulator.
import linattn_numba.sim

linattn_numba.sim.use_if_no_gpu()

import itertools  # noqa: E402
import warnings  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from IPython.display import Markdown, display  # noqa: E402

import linattn_numba as la  # noqa: E402
from linattn_numba import reference, rungs  # noqa: E402
from linattn_numba.rungs import r2_chunked as r2  # noqa: E402
from linattn_numba.testing import TOL_FP32, make_inputs, rel_err  # noqa: E402

print("running on", "Numba's CUDA simulator (CPU)" if la.sim.active() else "a CUDA GPU")
EPS32 = float(np.finfo(np.float32).eps)  # 2^-23: the spacing of float32 numbers just above 1
EPS16 = float(np.finfo(np.float16).eps)  # 2^-10
LN_MAX32 = float(np.log(np.finfo(np.float32).max))  # exp(x) overflows float32 for x above this
print(f"float32: eps {EPS32:.2e}, exp overflows above {LN_MAX32:.1f};  float16: eps {EPS16:.2e}, "
      f"max {float(np.finfo(np.float16).max):g}")

# %% [markdown]
# ## 1. What "correct" means: float32 kernels against the float64 oracle
#
# Every rung computes in float32 with a float32 state. The tests compare it with `reference.recurrent`, the
# definition evaluated in float64, through one number:
#
# $$\text{rel err} = \frac{\max |o - o_{ref}|}{\max |o_{ref}|}$$
#
# (a max over the whole tensor, so one wrong entry is enough to fail, and NaN anywhere gives `inf`). What value
# to expect? Each float32 operation rounds with a relative error up to `eps/2`; a dot product over `K` terms
# and a state built from `T` updates accumulate many such roundings. A fair yardstick is the **same loop in
# NumPy, in float32**: `recurrent32` below is `reference.recurrent` for one head with every array float32.

# %%
f32 = np.float32


def recurrent32(q, k, v, g=None, beta=None, h0=None):
    """The recurrence for one head in float32 NumPy: q, k [T, K]; v [T, V]; g, beta [T]. Returns (o, S)."""
    T, K = q.shape
    S = np.zeros((K, v.shape[1]), f32) if h0 is None else h0.astype(f32).copy()
    o = np.empty((T, v.shape[1]), f32)
    scale = f32(K**-0.5)
    for t in range(T):
        if g is not None:
            S *= np.exp(f32(g[t]))
        if beta is not None:
            S += np.outer(k[t], f32(beta[t]) * (v[t] - k[t] @ S))
        else:
            S += np.outer(k[t], v[t])
        o[t] = scale * (q[t] @ S)
    return o, S


def head(inp, b=0, h=0):
    """One head of make_inputs' arrays, as (q, k, v, g, beta, h0) with [T, ...] layout."""
    pick = lambda a: None if a is None else a[b, :, h]  # noqa: E731
    h0 = None if inp["initial_state"] is None else inp["initial_state"][b, h]
    return pick(inp["q"]), pick(inp["k"]), pick(inp["v"]), pick(inp["g"]), pick(inp["beta"]), h0


B, T, H, K, V = 1, 32, 1, 16, 16  # smoke size: every simulated thread is a Python thread
errs = {}
for rec in reference.RECURRENCES:
    inp = make_inputs(B, T, H, K, V, rec, initial_state=True, seed=0)
    args = (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"])
    o_ref, h_ref = reference.recurrent(*args, initial_state=inp["initial_state"])
    o32 = np.stack([recurrent32(*head(inp, 0, h))[0] for h in range(H)], axis=1)[None]
    errs[("NumPy float32", rec)] = rel_err(o32, o_ref)
    for rung in la.RUNGS:
        sizes = rungs.module(rung).CHUNK_SIZES or (16,)  # None: a token-recurrent rung ignores chunk_size
        o, ht = la.attention(*args, initial_state=inp["initial_state"], output_final_state=True, rung=rung,
                             chunk_size=16 if 16 in sizes else sizes[0])
        errs[(rung, rec)] = max(rel_err(o, o_ref), rel_err(ht, h_ref))
        assert errs[(rung, rec)] <= TOL_FP32, (rung, rec, errs[(rung, rec)])

impls = ["NumPy float32"] + list(la.RUNGS)
fig, ax = plt.subplots(figsize=(7.5, 3.4))
w = 0.8 / len(impls)
for i, name in enumerate(impls):
    ax.bar([r + (i + 0.5) * w - 0.4 for r in range(4)], [errs[(name, rec)] for rec in reference.RECURRENCES], w,
           label=name)
ax.axhline(TOL_FP32, color="red", ls="--", lw=1, label=f"test tolerance TOL_FP32 = {TOL_FP32:g}")
ax.axhline(EPS32, color="grey", ls=":", lw=1, label="float32 eps")
ax.set_yscale("log")
ax.set_xticks(range(4), reference.RECURRENCES)
ax.set_ylabel("rel err vs float64 oracle")
ax.set_title(f"Every rung vs the oracle, B{B} T{T} H{H} K{K} V{V}, with an initial state (chunk 16)", fontsize=9)
ax.legend(fontsize=7, ncol=2)
plt.show()
worst = max(v for (n, _), v in errs.items() if n != "NumPy float32")
display(Markdown(f"Worst rung error here: **{worst:.1e}**, i.e. {worst / EPS32:.0f} × float32 eps; the float32 NumPy "
                 f"loop reaches {max(v for (n, _), v in errs.items() if n == 'NumPy float32'):.1e}. The tolerance "
                 f"{TOL_FP32:g} sits {TOL_FP32 / worst:.0f} times above the worst rung and far below what a real bug "
                 "gives (a lost token, a missing decay or a wrong index give errors of 1e-2 and more)."))

# %% [markdown]
# ## 2. float16 inputs
#
# `q, k, v` (and `g`, `beta`) may be float16: the kernels read them, convert each value to float32 **on load**
# (`float32(q[b, t, h, d])`), and do everything else -- the dot products, the state, the output -- in float32.
# So there are two errors to tell apart:
#
# * the kernel's own error: against the oracle run **on the float16 values** (converted exactly to float64), it is
#   as small as with float32 inputs;
# * the cost of the format: against the oracle on the **original float32 values**, the inputs' rounding (relative
#   `eps16/2` each) shows through.

# %%
rows = []
for rec in ("plain", "gated_delta"):
    inp32 = make_inputs(B, T, H, K, V, rec, initial_state=True, seed=1)  # the section 1 shape
    inp16 = {n: (a if a is None or n == "initial_state" else a.astype(np.float16)) for n, a in inp32.items()}
    a16 = (inp16["q"], inp16["k"], inp16["v"], inp16["g"], inp16["beta"])
    a32 = (inp32["q"], inp32["k"], inp32["v"], inp32["g"], inp32["beta"])
    o_ref16, _ = reference.recurrent(*a16, initial_state=inp32["initial_state"])
    o_ref32, _ = reference.recurrent(*a32, initial_state=inp32["initial_state"])
    for rung in ("recurrent", "chunked"):
        o, _ = la.attention(*a16, initial_state=inp32["initial_state"], output_final_state=True, rung=rung,
                            chunk_size=16)
        e16, e32 = rel_err(o, o_ref16), rel_err(o, o_ref32)
        rows.append(f"| {rung} | {rec} | {e16:.1e} | {e32:.1e} | {e32 / EPS16:.2f} |")
        assert e16 <= TOL_FP32
display(Markdown("| rung | recurrence | vs oracle on the float16 inputs | vs oracle on the float32 originals | "
                 "... in units of eps16 |\n|---|---|--:|--:|--:|\n" + "\n".join(rows)))

# %% [markdown]
# The second column is the kernel (float32 compute, as good as with float32 inputs); the third is the input
# format. One input deserves a second look in float16: the **log-decay `g`**. Values near 0 such as
# `log(0.95) ≈ −0.05` keep their *relative* precision in float16, but the decays that matter are the cumulative
# ones, `exp(b_t)` with `b_t` a sum over many tokens, and relative errors of the summands add up:

# %%
rng = np.random.default_rng(0)
g = np.log(rng.uniform(0.9, 1.0, 4096))  # make_inputs' decays: memory of tens of tokens
Ts = np.array([16, 64, 256, 1024, 4096])
exact = np.array([np.exp(g[:t].sum()) for t in Ts])
g16 = g.astype(np.float16).astype(np.float64)
rounded = np.array([np.exp(g16[:t].sum()) for t in Ts])
fig, ax = plt.subplots(figsize=(6, 3))
ax.loglog(Ts, np.abs(rounded / exact - 1), "o-", label="g stored as float16")
c32 = np.cumsum(g.astype(np.float32), dtype=np.float32)[Ts - 1].astype(np.float64)
ax.loglog(Ts, np.abs(np.exp(c32) / exact - 1), "s-", label="g stored and summed in float32")
ax.set_xlabel("tokens summed (T)")
ax.set_ylabel("relative error of exp(sum g)")
ax.set_title("Cumulative decay from rounded log-gates", fontsize=9)
ax.grid(which="both", alpha=0.3)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# The relative error of a cumulative decay grows with the number of rounded summands. The chunked kernels only
# ever sum `g` within a chunk (`C ≤ 128` tokens: the left part of the plot); across chunks the decay is applied
# chunk by chunk to the state, so the error of the *total* decay keeps growing with `T` -- while the decay itself
# shrinks, and what it multiplies (the contribution of old tokens) fades long before its relative error matters.
#
# ## 3. Why every exponent is a difference of in-chunk cumulative log-gates
#
# The chunked form needs the decay between two tokens of a chunk, `Γ_ts = exp(b_t − b_s)` for `s ≤ t`, with
# `b_t = Σ_{s' ≤ t} g_{s'}` summed from the chunk's start. Algebraically `Γ_ts = γ_t / γ_s = exp(b_t) · exp(−b_s)`:
# a rank-1 factorisation that would let a kernel scale the rows of `Q` by `γ_t` and the rows of `K` by `1/γ_s`
# once, and then use a plain matmul. In float32 it breaks as soon as the decay accumulated in a chunk is strong:

# %%
def gammas(g_chunk, dtype=np.float32):
    """(difference form, factorised form) of Gamma [C, C] for one chunk's log-gates, in ``dtype``."""
    b = np.cumsum(g_chunk.astype(dtype), dtype=dtype)
    lower = np.tri(len(b), dtype=bool)
    with np.errstate(over="ignore", under="ignore", invalid="ignore"):
        diff = np.exp(np.where(lower, b[:, None] - b[None, :], -np.inf).astype(dtype))
        fact = np.where(lower, np.exp(b)[:, None] * np.exp(-b)[None, :], 0).astype(dtype)
    return diff, fact


C = 64
gc = np.full(C, -2.0)  # 64 tokens of strong decay: b_63 = -128
diff, fact = gammas(gc)
truth = np.exp(np.where(np.tri(C, dtype=bool), np.subtract.outer(np.cumsum(gc), np.cumsum(gc)), -np.inf))
low = np.tri(C, dtype=bool)
bad = low & ~np.isclose(fact, truth, rtol=1e-5, atol=1e-30)
fig, axs = plt.subplots(1, 2, figsize=(8.5, 3.6))
for ax, M, title in ((axs[0], diff, "exp(b_t - b_s): difference form"),
                     (axs[1], fact, "exp(b_t) * exp(-b_s): factorised form")):
    show = np.full(M.shape, np.nan)
    with np.errstate(divide="ignore"):
        show[low] = np.log10(np.where(M[low] > 0, M[low], np.nan))
    im = ax.imshow(show, cmap="viridis", vmin=-40, vmax=0)
    ys, xs = np.nonzero(low & ~np.isfinite(M))
    ax.scatter(xs, ys, s=3, color="red", label="inf / NaN")
    ys, xs = np.nonzero(low & (M == 0) & (truth > 0))
    ax.scatter(xs, ys, s=3, color="white", label="0 instead of > 0")
    ax.set_title(title, fontsize=9)
    ax.set_xlabel("s")
    ax.set_ylabel("t")
    ax.legend(fontsize=7, loc="upper right")
fig.colorbar(im, ax=axs, label="log10 Γ_ts (white/red: wrong)", shrink=0.8)
plt.show()
display(Markdown(f"Chunk of C = {C} tokens with g = {gc[0]:g}: b runs down to {np.cumsum(gc)[-1]:g}. exp(−b_s) "
                 f"overflows float32 once −b_s > {LN_MAX32:.1f}, i.e. from token "
                 f"{int(np.argmax(-np.cumsum(gc) > LN_MAX32))} "
                 f"on; the factorised form is wrong in {bad.sum()} of the {low.sum()} entries of the lower triangle "
                 f"({np.sum(low & ~np.isfinite(fact))} inf or NaN: `0 · inf`). The difference form is exact up to "
                 f"rounding everywhere (max rel err on the entries that are normal numbers: "
                 f"{np.max(np.abs(diff[low & (truth > 1e-30)] / truth[low & (truth > 1e-30)] - 1)):.1e}); its "
                 "smallest entries underflow to 0, which is the right answer to float32 precision."))

# %% [markdown]
# Where does the factorised form start failing? Sweep the per-token decay and the chunk size: it is wrong exactly
# when the decay over the chunk, `|g| · C`, passes `ln(FLT_MAX)`. The chunk sizes the kernels use and ordinary
# decays stay below that, but a gate is a *learned* quantity, and one head with a strong gate is enough.

# %%
gs = -np.geomspace(0.05, 8, 40)
fig, ax = plt.subplots(figsize=(6.5, 3.2))
for C_ in r2.CHUNK_SIZES:
    frac = []
    for gv in gs:
        d_, f_ = gammas(np.full(C_, gv))
        lo = np.tri(C_, dtype=bool)
        tr = np.exp(np.where(lo, np.subtract.outer(np.arange(1, C_ + 1) * gv, np.arange(1, C_ + 1) * gv), -np.inf))
        frac.append(np.mean(~np.isclose(f_[lo], tr[lo], rtol=1e-4, atol=1e-37)))
    line, = ax.semilogx(-gs, frac, label=f"C = {C_}")
    ax.axvline(LN_MAX32 / C_, color=line.get_color(), ls=":", lw=0.8)
ax.set_xlabel("per-token decay |g| (dotted: |g| C = ln FLT_MAX)")
ax.set_ylabel("fraction of Γ entries wrong")
ax.set_title("Factorised exp(b_t)·exp(−b_s) in float32 (the difference form: 0 wrong everywhere)", fontsize=9)
ax.grid(alpha=0.3)
ax.legend(fontsize=8)
plt.show()

# %% [markdown]
# Two more rules follow from the same arithmetic, and the kernels keep both:
#
# * **cumulative gates restart at every chunk**: `b_t` sums `g` from the chunk's start, never from the sequence's
#   start, so `b_t ≥ C · min g` however long the sequence is;
# * **mask before the exponential**: above the diagonal (`s > t`) the difference `b_t − b_s` is *positive* and
#   `exp` of it can overflow; `inf · 0` is NaN, so multiplying by a 0/1 causal mask *after* `exp` poisons the
#   row. The oracle writes `-inf` into those entries before `exp` (`exp(−inf) = 0`), the scores kernel never
#   computes them (tiles above the diagonal are not launched, and `col <= row` guards the rest).

# %%
with np.errstate(over="ignore", invalid="ignore"):
    b = np.cumsum(np.full(C, -2.0, dtype=np.float32), dtype=np.float32)
    after = np.exp(b[:, None] - b[None, :]) * np.tri(C, dtype=np.float32)  # exp first, mask after
    before = np.exp(np.where(np.tri(C, dtype=bool), b[:, None] - b[None, :], -np.inf).astype(np.float32))
    v_ = np.ones((C, 1), np.float32)
print(f"mask after exp:  {np.sum(~np.isfinite(after))} non-finite entries; (Γ V) has "
      f"{np.sum(~np.isfinite(after @ v_))} non-finite rows of {C}")
print(f"mask before exp: {np.sum(~np.isfinite(before))} non-finite entries; (Γ V) has "
      f"{np.sum(~np.isfinite(before @ v_))} non-finite rows")

# %% [markdown]
# ## 4. Why the delta rule's state cannot blow up -- and when it does
#
# One delta-rule step (without decay) is an affine map of the state:
#
# $$S \leftarrow (I - \beta\, k k^T)\, S + \beta\, k\, v^T .$$
#
# `I − β k kᵀ` is symmetric; `k` is an eigenvector with eigenvalue `1 − β‖k‖²`, and every direction orthogonal
# to `k` has eigenvalue 1. For `‖k‖ ≤ 1` and `β ∈ [0, 1]` all eigenvalues lie in `[0, 1]`: the step is a
# **contraction** (spectral norm ≤ 1), it never amplifies what the state holds, and what it adds is bounded by
# `β ‖k‖ ‖v‖`. Along `k` it moves `Sᵀk` towards `v` (for `β‖k‖² = 1` it replaces it: the "delta" of the name).
# The decay `exp(g) ≤ 1` only shrinks further. So `‖S_t‖` grows at most linearly, and in practice saturates.
#
# Unnormalised keys break this: for a Gaussian key in `K` dimensions `‖k‖² ≈ K`, so `1 − β‖k‖²` is around
# `1 − K/2`, far below −1: the component along each key **flips sign and grows** at every step.

# %%
rng = np.random.default_rng(0)
Kd = 16
ks = rng.standard_normal((2000, Kd))
betas = rng.uniform(0, 1, 2000)
fig, axs = plt.subplots(1, 2, figsize=(10, 3.4))
for norm, lab in ((1.0, "‖k‖ = 1 (normalised)"), (None, f"Gaussian k (‖k‖² ≈ K = {Kd})")):
    kk = ks / np.linalg.norm(ks, axis=1, keepdims=True) if norm else ks
    lam = 1 - betas * np.sum(kk * kk, axis=1)  # the eigenvalue along k; the others are 1
    axs[0].hist(lam, bins=60, alpha=0.6, label=lab)
axs[0].axvspan(-1, 1, color="green", alpha=0.08, label="|λ| ≤ 1: no growth")
axs[0].set_xlabel("eigenvalue 1 − β‖k‖² of I − β k kᵀ along k")
axs[0].set_ylabel("count")
axs[0].legend(fontsize=7)
eig_demo = np.linalg.eigvalsh(np.eye(Kd) - 0.7 * np.outer(ks[0], ks[0]) / (ks[0] @ ks[0]))
axs[0].set_title(f"one normalised key, β = 0.7: eigenvalues {np.round(eig_demo.min(), 3)} (once) and "
                 f"{np.round(eig_demo.max(), 3)} ({Kd - 1}×)", fontsize=8)


def state_norms(scale_k, T=300, K=16, V=16, seed=0, dtype=np.float64):
    """||S_t||_F along a delta-rule run whose unit keys are multiplied by scale_k (None: raw Gaussian keys)."""
    r = np.random.default_rng(seed)
    k = r.standard_normal((T, K))
    if scale_k is not None:
        k = scale_k * k / np.linalg.norm(k, axis=1, keepdims=True)
    v = r.standard_normal((T, V))
    beta = r.uniform(0, 1, T)
    S = np.zeros((K, V), dtype)
    out = []
    with np.errstate(over="ignore", invalid="ignore"):
        for t in range(T):
            kt, vt = k[t].astype(dtype), v[t].astype(dtype)
            S = S + np.outer(kt, dtype(beta[t]) * (vt - kt @ S))
            out.append(np.linalg.norm(S.astype(np.float64)))
    return np.array(out)


growth = {}
for s, lab in ((0.5, "‖k‖ = 0.5"), (1.0, "‖k‖ = 1"), (1.5, "‖k‖ = 1.5"), (2.0, "‖k‖ = 2"), (3.0, "‖k‖ = 3"),
               (None, "Gaussian k")):
    n = state_norms(s)
    growth[lab] = n[-1] / n[len(n) // 3]
    axs[1].semilogy(np.where(np.isfinite(n), n, np.nan), label=lab)
axs[1].axhline(float(np.finfo(np.float32).max), color="red", ls="--", lw=0.8, label="float32 max")
axs[1].set_xlabel("token t")
axs[1].set_ylabel("‖S_t‖_F (float64)")
axs[1].set_title("Delta-rule state norm, β ~ U(0, 1)", fontsize=9)
axs[1].legend(fontsize=7)
plt.show()

# %% [markdown]
# The exact condition for a step not to amplify is `|1 − β‖k‖²| ≤ 1`, i.e. `β‖k‖² ≤ 2`; `‖k‖ ≤ 1` with
# `β ≤ 1` is the simple sufficient one. Slightly larger keys only amplify on the tokens with a large `β`, and
# the contracting tokens in between may still win; beyond that the state grows geometrically. The growth of
# `‖S‖` over the last two thirds of the run above:

# %%
display(Markdown("| keys | ‖S_T‖ / ‖S_{T/3}‖ |\n|---|--:|\n"
                 + "\n".join(f"| {k} | {v:.3g} |" for k, v in growth.items())))

# %% [markdown]
# A kernel cannot fix growth: it is the recurrence itself, and the float64 oracle overflows too, only later.
# That is why models using the delta rule L2-normalise `k` (and produce `β` with a sigmoid), and why
# `make_inputs` draws unit keys. A rung run on raw keys:

# %%
Tr = 256
inp = make_inputs(1, Tr, 1, 16, 16, "delta", seed=2)
raw = np.random.default_rng(2).standard_normal(inp["k"].shape).astype(np.float32)  # not normalised
args = (inp["q"], raw, inp["v"], None, inp["beta"])
with np.errstate(over="ignore", invalid="ignore"), warnings.catch_warnings():
    warnings.simplefilter("ignore", RuntimeWarning)  # the simulated kernel's overflows (NumPy scalars on the CPU)
    o_dev, _ = la.attention(*args, rung="naive", validate=False)  # r0: the quickest rung in the simulator
    o_64, _ = reference.recurrent(*args)
bad_dev = np.nonzero(~np.isfinite(o_dev[0, :, 0]).all(axis=-1))[0]
bad_64 = np.nonzero(~np.isfinite(o_64[0, :, 0]).all(axis=-1))[0]
first = int(bad_dev[0]) if len(bad_dev) else None
with np.errstate(over="ignore", invalid="ignore"):
    mag = np.abs(o_64[0, :, 0]).max(axis=-1)
fig, ax = plt.subplots(figsize=(6, 2.8))
ax.semilogy(np.where(np.isfinite(mag), mag, np.nan), label="float64 oracle")
with np.errstate(over="ignore", invalid="ignore"):
    ax.semilogy(np.abs(o_dev[0, :, 0]).max(axis=-1), "--", label="float32 rung (r0)")
ax.axhline(float(np.finfo(np.float32).max), color="red", ls=":", lw=0.8, label="float32 max")
ax.set_xlabel("token t")
ax.set_ylabel("max |o_t|")
ax.set_title(f"Delta rule on raw Gaussian keys, K = 16, T = {Tr}", fontsize=9)
ax.legend(fontsize=7)
plt.show()
display(Markdown(
    f"The float32 rung's output is non-finite from token **{first}** on; the float64 oracle's "
    + (f"from token {int(bad_64[0])}." if len(bad_64) else f"stays finite up to {Tr} tokens, reaching "
       f"|o| = {np.nanmax(mag):.1e}.") if first is not None else
    f"The float32 rung stays finite on these {Tr} tokens (max |o| = {np.nanmax(mag):.1e} in float64)."))

# %% [markdown]
# ## 5. How the error depends on the chunk size and the sequence length
#
# The chunked form computes the same function by a different route: matrix products inside a chunk, a state
# update per chunk, and for the delta rule a triangular solve. `chunked32` below is `reference.chunked` for one
# head, in float32 throughout, with `W` and `U` found by forward substitution as the wu kernel does. Both
# float32 forms are compared with the float64 oracle on the same (float32) inputs, `K = V = 32`, one head.

# %%
def chunked32(q, k, v, g=None, beta=None, C=64):
    """reference.chunked for one head, in float32 (q, k [T, K]; v [T, V]; g, beta [T]). Returns o [T, V]."""
    T, K = q.shape
    S = np.zeros((K, v.shape[1]), f32)
    o = np.empty((T, v.shape[1]), f32)
    scale = f32(K**-0.5)
    for t0 in range(0, T, C):
        Q, Kc, Vc = q[t0:t0 + C], k[t0:t0 + C], v[t0:t0 + C]
        L = len(Q)
        b = np.cumsum(g[t0:t0 + C], dtype=f32) if g is not None else np.zeros(L, f32)
        Gam = np.exp(np.where(np.tri(L, dtype=bool), b[:, None] - b[None, :], -np.inf).astype(f32))
        gam, to_end = np.exp(b), np.exp(b[-1] - b)
        if beta is not None:
            bc = beta[t0:t0 + C]
            Lm = np.tril(bc[:, None] * (Kc @ Kc.T) * Gam, -1)
            X = np.concatenate([(bc * gam)[:, None] * Kc, bc[:, None] * Vc], axis=1)  # right-hand sides [W | U]
            for i in range(1, L):  # forward substitution: (I + Lm) X = R
                X[i] -= Lm[i, :i] @ X[:i]
            Vn = X[:, K:] - X[:, :K] @ S  # V_new = U - W S
        else:
            Vn = Vc
        o[t0:t0 + L] = scale * (gam[:, None] * (Q @ S) + ((Q @ Kc.T) * Gam) @ Vn)
        S = np.exp(b[-1]) * S + (to_end[:, None] * Kc).T @ Vn
    return o


def errors(T, rec, Cs, K=32, seed=0):
    inp = make_inputs(1, T, 1, K, K, rec, seed=seed)
    q, k, v, g, beta, _ = head(inp)
    o_ref, _ = reference.chunked(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], chunk_size=64)
    ref = o_ref[0, :, 0]
    out = {"recurrent32": rel_err(recurrent32(q, k, v, g, beta)[0], ref)}
    for C_ in Cs:
        out[C_] = rel_err(chunked32(q, k, v, g, beta, C_), ref)
    return out


Ts = (128, 512, 2048)
by_T = {(rec, T_): errors(T_, rec, (64,)) for rec in reference.RECURRENCES for T_ in Ts}
Cs = (8, 16, 32, 64, 128, 256)
by_C = {rec: errors(1024, rec, Cs) for rec in reference.RECURRENCES}

fig, axs = plt.subplots(1, 2, figsize=(10, 3.6))
for rec in reference.RECURRENCES:
    line, = axs[0].loglog(Ts, [by_T[(rec, t)]["recurrent32"] for t in Ts], "o-", label=f"{rec}: recurrent")
    axs[0].loglog(Ts, [by_T[(rec, t)][64] for t in Ts], "s--", color=line.get_color(), label=f"{rec}: chunked C=64")
    axs[1].loglog(Cs, [by_C[rec][c] for c in Cs], "s--", color=line.get_color(), label=rec)
    axs[1].axhline(by_C[rec]["recurrent32"], color=line.get_color(), lw=0.6, ls=":")
axs[0].set_xscale("log", base=2)
axs[0].set_xticks(Ts, [str(t) for t in Ts])
axs[0].minorticks_off()
axs[0].set_xlabel("sequence length T")
axs[0].set_ylabel("rel err vs float64")
axs[0].set_title("float32 NumPy forms vs T (K = V = 32)", fontsize=9)
axs[0].legend(fontsize=6, ncol=2)
axs[1].set_xscale("log", base=2)
axs[1].set_xlabel("chunk size C (dotted: the recurrent form)")
axs[1].set_title("chunked form vs C at T = 1024", fontsize=9)
axs[1].legend(fontsize=7)
for ax in axs:
    ax.grid(which="both", alpha=0.3)
    ax.axhline(EPS32, color="grey", lw=0.6)
plt.show()
rows = []
for rec in reference.RECURRENCES:
    g_rec = by_T[(rec, Ts[-1])]["recurrent32"] / by_T[(rec, Ts[0])]["recurrent32"]
    g_chk = by_T[(rec, Ts[-1])][64] / by_T[(rec, Ts[0])][64]
    rows.append(f"| {rec} | {g_rec:.2g} | {g_chk:.2g} | {by_C[rec][Cs[-1]] / by_C[rec][16]:.2g} |")
display(Markdown(f"| recurrence | recurrent: err(T={Ts[-1]}) / err(T={Ts[0]}) | chunked C=64: same | "
                 f"chunked at T=1024: err(C={Cs[-1]}) / err(C=16) |\n|---|--:|--:|--:|\n" + "\n".join(rows)
                 + f"\n\n(a random walk of roundings would grow by √({Ts[-1]}/{Ts[0]}) = {np.sqrt(Ts[-1] / Ts[0]):.0f} "
                 "over this range of T)"))

# %% [markdown]
# How to read it -- three mechanisms, each visible in one column:
#
# * **sequential additions into the state.** The recurrent form adds every token into `S`: `T` roundings in a
#   row, and for `plain` (no decay, nothing forgotten) they pile up like a random walk. The chunked form adds
#   into `S` once per chunk (`T/C` times), the rest happens in `C`-term dot products: it has far fewer
#   sequential roundings to accumulate.
# * **forgetting.** With decay, old roundings are multiplied by `exp(b)` like everything else: the error of both
#   forms levels off after a few memory lengths instead of growing with `T`.
# * **large chunks.** The in-chunk cumulative gate `b_t` grows in magnitude with `C`, and `b_t − b_s` is a
#   difference of two float32 sums, each with an absolute error of about `eps · |b_t|`: the relative error of
#   `Γ_ts` grows with `C` (the decay recurrences). For the delta rule the forward substitution chains `C` rows.
#   That, and not only speed, is why chunked kernels keep `C` at 64 or so.
#
# The same question for the rungs themselves (simulator, smoke size): r2 at its chunk sizes against the float32
# NumPy loop, on the same inputs (r1 was in section 1).

# %%
T_, K_ = 48, 16
# chunk sizes below T, and the first one >= T (a single, partial chunk: larger ones would compute the same)
Cs_rung = [c for c in r2.CHUNK_SIZES if c < T_] + [min(c for c in r2.CHUNK_SIZES if c >= T_)]
rows, pts = [], {}
for rec in ("plain", "gated_delta"):
    inp = make_inputs(1, T_, 1, K_, K_, rec, initial_state=True, seed=3)
    args = (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"])
    o_ref, _ = reference.recurrent(*args, initial_state=inp["initial_state"])
    pts[(rec, "NumPy float32")] = rel_err(recurrent32(*head(inp))[0], o_ref[0, :, 0])
    for C_ in Cs_rung:
        o, _ = la.attention(*args, initial_state=inp["initial_state"], rung="chunked", chunk_size=C_)
        pts[(rec, f"r2 C={C_}")] = rel_err(o, o_ref)
labels = ["NumPy float32"] + [f"r2 C={c}" for c in Cs_rung]
display(Markdown(f"T = {T_}, K = V = {K_}, with an initial state; rel err vs the float64 oracle:\n\n| | "
                 + " | ".join(labels) + " |\n|---|" + "--:|" * len(labels) + "\n"
                 + "\n".join(f"| {rec} | " + " | ".join(f"{pts[(rec, lab)]:.1e}" for lab in labels) + " |"
                             for rec in ("plain", "gated_delta"))))

# %% [markdown]
# ## 6. Atomics: why r2's delta rule varies in the last bits from run to run
#
# In r2's state kernel a value column `v` of the state is spread over `⌈K/16⌉` threads (16 rows each, in
# registers). The delta rule needs `V_new[t, v] = U[t, v] − Σ_r W[t, r] S[r, v]`, a sum over **all** rows, so
# every thread computes its 16-row partial sum and adds it into a shared-memory cell with `cuda.atomic.add`:
#
# ```
#   vnew[t, tx] = U[t, v]                  (barrier)
#   thread ty:  vnew[t, tx] += -p_ty       for ty = 0 .. K/16 - 1, in whatever order the hardware runs them
# ```
#
# The atomics make each addition indivisible, but not their **order**, and float addition is not associative:
# `(a + b) + c` and `a + (b + c)` can differ in the last bit. Which warp gets there first depends on scheduling,
# which changes from run to run. So `V_new`, and through it the state and the outputs, can differ by a few units
# in the last place (ULP) between two identical calls. In NumPy, the same partial sums added in every order:

# %%
rng = np.random.default_rng(0)
KR = r2.KR
nparts = 128 // KR  # threads sharing one column at K = 128
Wt = rng.standard_normal(128).astype(np.float32) / np.float32(np.sqrt(128))
Sc = rng.standard_normal(128).astype(np.float32)
u0 = np.float32(rng.standard_normal())
parts = [np.float32(np.dot(Wt[i * KR:(i + 1) * KR], Sc[i * KR:(i + 1) * KR])) for i in range(nparts)]
results = []
for perm in itertools.islice(itertools.permutations(range(nparts)), 20000):
    acc = u0
    for i in perm:
        acc = np.float32(acc - parts[i])
    results.append(acc)
results = np.array(results, dtype=np.float32)
exact = float(u0) - sum(float(p) for p in parts)
ulp = float(np.spacing(np.float32(exact)))
vals, counts = np.unique(results, return_counts=True)
fig, ax = plt.subplots(figsize=(6, 2.8))
ax.bar((vals.astype(np.float64) - exact) / ulp, counts, width=0.4)
ax.set_xlabel("result − exact sum (in float32 ULPs)")
ax.set_ylabel("orders giving it")
ax.set_title(f"u − Σ of {nparts} float32 partial sums, {len(results)} summation orders: "
             f"{len(vals)} distinct results", fontsize=9)
plt.show()

# %% [markdown]
# Every one of those results is a correct float32 answer (each within a few ULPs of the exact sum); none is
# "the" answer. Consequences, and what the project does about them:
#
# * the tests compare with a **tolerance** (`TOL_FP32`), never bit for bit, and never compare one run of r2's
#   delta rule with another run bit for bit;
# * the additive recurrences in r2 and every recurrence in r1 are deterministic: r1 reduces across lanes with a
#   fixed butterfly of shuffles (`shfl_xor` by 1, then 2, ...), the same order every time;
# * a deterministic variant is straightforward: each thread writes its partial sum to its own shared cell
#   (`[K/16, C, 32]` floats) and, after a barrier, one thread per `(t, v)` adds them in a fixed order -- more
#   shared memory and one more barrier for bit-reproducibility (exercise 4).
#
# The simulator runs the threads of a block one Python thread each; whether their order changes between runs is
# up to the interpreter's scheduling. Three identical calls of r2's delta rule here (`K = 32`: two threads, two
# atomic additions per `V_new` entry; a difference between runs shows up relative to an output's *own* size
# as many ULPs where the output is near 0, so it is measured against `max |o|`, like every error here):

# %%
inp = make_inputs(1, 32, 1, 32, 16, "delta", initial_state=True, seed=4)  # K = 32: two threads per column
args = (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"])
runs = [la.attention(*args, initial_state=inp["initial_state"], rung="chunked", chunk_size=16)[0] for _ in range(3)]
same = [np.array_equal(runs[0], r) for r in runs[1:]]
differ = max(float(np.mean(r != runs[0])) for r in runs[1:])
spread = max(rel_err(r, runs[0]) for r in runs[1:])
print(f"bit-identical to the first run: {same}; up to {100 * differ:.0f} % of the outputs differ, by at most "
      f"{spread:.1e} of max |o| ({spread / EPS32:.1f} float32 eps) -- "
      f"{'the threads ran the atomics in the same order each time' if all(same) else 'the order changed'}")

# %% [markdown]
# ## Summary
#
# | topic | rule in the kernels | why |
# |---|---|---|
# | accuracy | float32 compute and state, `TOL_FP32` against float64 | a float32 NumPy loop does no better |
# | float16 inputs | converted on load, the rest float32 | the error is the inputs' rounding |
# | decays | `exp(b_t − b_s)`, `s ≤ t`, per-chunk gate sums, mask before `exp` | `exp(−b_s)` overflows; `0·inf = NaN` |
# | delta rule | keys with `‖k‖ ≤ 1`, `β ∈ [0, 1]` | a contraction; raw keys diverge in any precision |
# | chunk size | 16..128 (64 typical) | more state updates vs longer in-chunk gate sums |
# | atomics | r2's `W S_c` partial sums by shared atomics | order varies: last-bit differences; use a tolerance |
#
# ## Exercises
#
# 1. Repeat section 1's comparison with `T = 1024` for the `plain` recurrence in NumPy only (`recurrent32`).
#    How does the error scale with `T`? Compare with a random walk (`√T · eps`) and a worst case (`T · eps`).
# 2. `chunked32` evaluates `Γ` in the difference form. Change it to the factorised form and find the smallest
#    constant `g` for which its output at `C = 64` contains NaN. Check it against `ln(FLT_MAX) / C`.
# 3. Section 4 says the delta-rule step is a contraction for `‖k‖ ≤ 1`. Show numerically that the product of the
#    per-token matrices `γ_t (I − β_t k_t k_tᵀ)` over a chunk has spectral norm ≤ 1, and that it equals the
#    chunk's transition in the WY form, `γ_C I − Kᵀ diag(γ_C/γ) W` (derive it from `reference.chunked`).
# 4. Make r2's delta-rule state kernel deterministic (the scheme above) on a copy of the rung, and check with the
#    grader (`linattn-numba grade`) that it still passes; on a GPU, check that two runs are bit-identical.
# 5. Draw `g` as float16 for a run of `T = 8192` at the standard decay (`make_inputs`) and compare the chunked
#    kernel's output with the float32-`g` run. Is the difference larger for early or for late tokens? Why?
