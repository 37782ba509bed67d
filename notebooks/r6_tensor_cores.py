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
# # r6 · `tensor_cores`: the chunk pass on the tensor cores, with float32 accuracy from TF32
#
# **Learning goals.** After this notebook you can
#
# 1. say why r3's state pass is bound by the FMA units, and what the H200's tensor cores offer instead: warp-wide
#    `mma.sync` tile products in **TF32** (a float32 with a 10-bit mantissa);
# 2. read an `mma.sync.m16n8k8` **fragment layout**: which lane holds which element of A, B and the accumulator,
#    and write the instruction from Numba through an inline-PTX intrinsic (`linattn_numba.mma`);
# 3. explain **3xTF32**: how splitting each operand into a TF32 `big` part and a TF32 `small` remainder recovers
#    float32 accuracy from three TF32 products, and measure the difference against one product;
# 4. follow r6's state kernel: the state `S` lives in the warps' accumulator fragments, P2 accumulates into them,
#    P1 reads `S` back from shared memory as its right-hand side.

# %%
# Setup. Numba chooses between a real GPU and its CUDA simulator once, when numba.cuda is first imported:
# run on the GPU when the CUDA driver reports one, else in the (patched) simulator.
import linattn_numba.sim

linattn_numba.sim.use_if_no_gpu()

import inspect  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from IPython.display import Code, Markdown, display  # noqa: E402

import linattn_numba as la  # noqa: E402
from linattn_numba import figures, mma, reference  # noqa: E402
from linattn_numba._common import kernels_made  # noqa: E402
from linattn_numba.rungs import r3_shared as r3  # noqa: E402
from linattn_numba.rungs import r6_tensor_cores as r6  # noqa: E402
from linattn_numba.testing import TOL_FP32, make_inputs, rel_err  # noqa: E402

print("running on", "Numba's CUDA simulator (CPU)" if la.sim.active() else "a CUDA GPU")
print("rung", r6.NAME, "| chunk sizes", r6.CHUNK_SIZES, "| MAX_K", r6.MAX_K, "| value tile", r6.BV_DEFAULT,
      "| precisions", r6.PRECISIONS, "(default", r6.PRECISION + ")")

# %% [markdown]
# ## 1. What changes from r3, and why
#
# The math is r3's (notebook `r3_shared`): per chunk, the sequential state kernel computes
#
# $$P_1:\ X = [W; Q']\,S,\qquad P_2:\ S \leftarrow \gamma_C S + K^T \operatorname{diag}(\gamma_C/\gamma)\,V_{new},$$
#
# with `V_new = U − W S` and the output `scale (Q' S + U'')` read off `X`. In r3 every thread computes 4 × 4
# tiles of these products with FMAs. An SM's FMA units do 128 float32 FMAs per clock; its tensor cores do several
# times that many TF32 multiply-adds, but only as **whole-warp tile products**: `mma.sync.m16n8k8` multiplies a
# 16 × 8 tile of A by an 8 × 8 tile of B into a 16 × 8 float32 accumulator, the 32 lanes each holding a few
# elements of each. r6 keeps r3's intra kernel and its staging, and rewrites the two products as such tiles.
#
# ## 2. The instruction and its fragments
#
# Numba has no tensor-core API; `linattn_numba.mma` emits the PTX instruction as inline assembly (and, under the
# simulator, runs it as a warp rendezvous that multiplies the tile assembled from all lanes' fragments). Which
# lane holds which element, from the module's own layout functions:

# %%
def lane_map(frag, shape):
    grid = np.full(shape, "", dtype=object)
    for lane in range(32):
        for reg, (r, c) in enumerate(frag(lane)):
            grid[r, c] = f"{lane}.{reg}"
    return grid


fig, axs = plt.subplots(1, 3, figsize=(12, 4.2), gridspec_kw=dict(width_ratios=[8, 8, 8]))
for ax, (name, frag, shape) in zip(axs, (("A (16 x 8, row major): a0..a3", mma.fragment_a, (16, 8)),
                                         ("B (8 x 8): b0, b1", mma.fragment_b, (8, 8)),
                                         ("C, D (16 x 8, float32): c0..c3", mma.fragment_c, (16, 8)))):
    grid = lane_map(frag, shape)
    lanes = np.vectorize(lambda s: int(s.split(".")[0]))(grid)
    ax.imshow(lanes // 4, cmap="tab10", vmin=0, vmax=9, aspect="auto")
    for (r, c), s in np.ndenumerate(grid):
        ax.text(c, r, s, ha="center", va="center", fontsize=5.5)
    ax.set_title(name, fontsize=9)
    ax.set_xticks(range(shape[1]))
    ax.set_yticks(range(shape[0]))
    ax.tick_params(labelsize=6)
fig.suptitle("lane.register of every element (colour: g = lane // 4)", fontsize=9)
fig.tight_layout()
plt.show()

# %% [markdown]
# The intrinsic itself (the GPU branch of the module: `mma.sync` with four 32-bit A registers, two B registers
# and four float32 accumulators in, four out) and the 3xTF32 device function:

# %%
src = inspect.getsource(mma)
display(Code(src[src.index("    @intrinsic\n    def to_tf32"):src.index("def compile_targets")], language="python"))

# %% [markdown]
# ## 3. TF32 and 3xTF32
#
# A TF32 operand keeps 10 of float32's 23 mantissa bits: one tile product is accurate to about `2^-11` relative
# per term. Splitting `x = big + small` with `big` = `x` with its 13 low mantissa bits cleared (`mma.split_tf32`:
# a bit mask and a subtraction, both exact) keeps all 24 bits, and `A B ≈ Ab Bb + Ab Bs + As Bb` (the `As Bs`
# term is below float32's resolution): three tensor-core products. The core reads only the top 10 mantissa bits
# of `small`, an error of at most `2^-20 |x|` on a correction term. (`cvt.rna.tf32.f32`, which rounds, costs
# about four instructions on sm_90: ptxas expands it to integer code.) One warp, a 16 × 8 × 32 product, against
# float64:

# %%
rng = np.random.default_rng(0)
A = rng.standard_normal((16, 32)).astype(np.float32)
Bm = rng.standard_normal((32, 8)).astype(np.float32)
Cm = rng.standard_normal((16, 8)).astype(np.float32)
exact = A.astype(np.float64) @ Bm + Cm
errs = {}
for three in (False, True):
    D = np.zeros((16, 8), np.float32)
    mma._tile_kernel(three)[1, 32](A, Bm, Cm, D)
    errs["3xTF32" if three else "TF32"] = np.abs(D - exact).max() / np.abs(exact).max()
fp32 = np.abs((A @ Bm + Cm) - exact).max() / np.abs(exact).max()
display(Markdown("| product | max rel err vs float64 |\n|---|--:|\n" + "\n".join(
    f"| {k} | {v:.1e} |" for k, v in errs.items()) + f"\n| float32 FMAs (NumPy) | {fp32:.1e} |"))
assert errs["3xTF32"] < 2e-6 < errs["TF32"]

# %% [markdown]
# ## 4. The state kernel
#
# Thread map and layout, from the module docstring, then the kernel. Things to notice:
#
# * `S` is `Sf`, 4 registers per tile, 4 tiles per warp: the layout of P2's accumulator fragments. P2 sums the
#   chunk's `Kᵀ V_new` from zero in fresh fragments, `acc = mma(Kᵀ fragment, V_new fragment, acc)` over the
#   chunk's time steps, and then `Sf = γ_C Sf + acc` on the FMA units: the tensor core's float32 accumulation
#   truncates, and with `Sf` as the accumulator that bias grew over 8,192 tokens to a 5.5e-5 relative error on the
#   H200. No thread ever holds a 4 × 4 block.
# * A warp's 4 tiles of S lie side by side in one row block (`_tiling`'s SG), so each P2 step loads and splits its
#   A fragment once for 4 `mma`; P1 groups G1 tiles the same way.
# * Shared memory is read with `vec.ld1`, not `sm[i]`: Numba's indexing with a signed index also handles
#   negative indices, a compare and a select per access, which was most of the first version's instructions.
# * The chunk's rows are staged by `_rows_stager` (every size a constant, one column quad per thread) instead of
#   r3's general loops, which spent as many instructions per chunk as the two products. (Found here; r3 now has
#   the stager and uses it too, so it lives in r3's module.)
# * P1 needs `S` as a B operand (columns split across lanes differently from the accumulator), so once per
#   chunk every lane writes its `Sf` to shared memory, and P1 reads it back after the staging barrier.
# * Every `mma` sits in a loop whose trip count is the same for all lanes of a warp (tiles are assigned per
#   warp): `mma.sync` is `.aligned`, every lane must execute it.
# * The loops stop at `K` rounded up to 8 (P1) and at the chunk's last valid row (P2): padded rows are zero, and
#   a trip count the compiler cannot see keeps it from unrolling the loops into more registers than the launch
#   bounds allow.

# %%
doc = r6.__doc__
display(Markdown("```\n" + doc[doc.index("Thread map"):doc.index("Status:")].rstrip() + "\n```"))
for name in ("_state_layout", "_threads", "_tiling", "_rows_stager", "_p1_element", "_state_kernel", "launches"):
    display(Markdown(f"**`{name}`**"))
    display(Code(inspect.getsource(getattr(r6, name)), language="python"))

# %% [markdown]
# ## 5. Smoke run against the oracle
#
# `B1 T40 H1 K=V=16`, all four recurrences, every chunk size, with an initial state: 3xTF32 must be within the
# float32 tolerance; one TF32 product per step is shown beside it (its error is TF32's, not float32's).

# %%
B, T, H, K, V = 1, 40, 1, 16, 16
rows = []
for rec in reference.RECURRENCES:
    inp = make_inputs(B, T, H, K, V, rec, initial_state=True, seed=0)
    args = (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"])
    o_ref, h_ref = reference.recurrent(*args, initial_state=inp["initial_state"])
    for C in r6.CHUNK_SIZES:
        o6, h6 = la.attention(*args, rung=r6.NAME, initial_state=inp["initial_state"], output_final_state=True,
                              chunk_size=C)
        e3 = max(rel_err(o6, o_ref), rel_err(h6, h_ref))
        rows.append(f"| {rec} | {C} | {e3:.1e} | {'ok' if e3 <= TOL_FP32 else 'FAIL'} |")
        assert e3 <= TOL_FP32, (rec, C, e3)
display(Markdown(f"| recurrence | C | rel err (3xTF32) | within {TOL_FP32:g} |\n|---|--:|--:|---|\n"
                 + "\n".join(rows)))

from numba import cuda  # noqa: E402

inp = make_inputs(1, 48, 1, 16, 16, "gated_delta", initial_state=True, seed=1)
d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
res = {}
for prec in r6.PRECISIONS:
    o = cuda.to_device(np.full((1, 48, 1, 16), np.nan, np.float32))
    ht = cuda.to_device(np.full((1, 1, 16, 16), np.nan, np.float32))
    r6.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, d["initial_state"], ht, 0.25, 16, precision=prec)
    o_ref, h_ref = reference.recurrent(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], scale=0.25,
                                       initial_state=inp["initial_state"])
    res[prec] = max(rel_err(o.copy_to_host(), o_ref), rel_err(ht.copy_to_host(), h_ref))
print("gated delta, T = 48: rel err", ", ".join(f"{k} {v:.1e}" for k, v in res.items()))

# %% [markdown]
# ## 6. Napkin math
#
# Per chunk and block (C = 64, K = V = 128, BV = 64, delta rule with output): P1 is a [128, 128] × [128, 64]
# product, P2 a [128, 64] × [64, 64] one. In `m16n8k8` instructions, and against the FMA work r3 does for the
# same products:

# %%
C0, KP0, BV0 = r6.DEFAULT_CHUNK, r3.padded_k(128), r6.BV_DEFAULT
p1_rows = 2 * C0
mma_p1 = (p1_rows // 16) * (BV0 // 8) * (KP0 // 8)
mma_p2 = (KP0 // 16) * (BV0 // 8) * (C0 // 8)
fma = p1_rows * KP0 * BV0 + KP0 * C0 * BV0
threads = r6._threads(KP0, BV0)
display(Markdown(
    f"| | P1 | P2 | total |\n|---|--:|--:|--:|\n"
    f"| m16n8k8 tiles (one TF32 product each) | {mma_p1} | {mma_p2} | {mma_p1 + mma_p2} |\n"
    f"| tensor-core instructions, 3xTF32 | {3 * mma_p1} | {3 * mma_p2} | {3 * (mma_p1 + mma_p2)} |\n"
    f"| per warp ({threads // 32} warps) | {3 * mma_p1 // (threads // 32)} | {3 * mma_p2 // (threads // 32)} | "
    f"{3 * (mma_p1 + mma_p2) // (threads // 32)} |\n"
    f"| float32 FMAs in r3 (per thread of {(KP0 // 4) * (BV0 // 4)}) | "
    f"{p1_rows * KP0 * BV0 // ((KP0 // 4) * (BV0 // 4))} | {KP0 * C0 * BV0 // ((KP0 // 4) * (BV0 // 4))} | "
    f"{fma // ((KP0 // 4) * (BV0 // 4))} |"))

# %% [markdown]
# One `m16n8k8` is 1,024 multiply-adds: with 3xTF32 a chunk costs 3 x 1,024 x tiles of tensor work in place of
# r3's FMAs. Each tile step also loads its operands from shared memory and splits them (2 instructions per
# element); with SG tiles side by side, P2's A fragment (4 loads, 8 split instructions) serves SG tiles. The first
# version on the H200 was slower than r3: not the tensor cores, but the instructions around them (section 8).
#
# ## 7. On the H200

# %%
data = figures.load_or_explain(figures.find_data_dir())
mine = [r for r in (data.records if data else []) if r.get("key") == r6.NAME and figures.timed(r)]
if not mine:
    print("No H200 record of r6 yet: `linattn-numba bench` (on a GPU) times it with the other rungs "
          "(`bash tools/h200.sh bench` runs it at the standard shape).")
else:
    std = tuple(figures.STANDARD[k] for k in "BTHKV")
    rows = [r for r in figures.ordered(data.records) if figures.shape_tuple(r) == std
            and r.get("key") in (r6.NAME, r3.NAME, "fla_chunk_simple_gla", "fla_chunk_gated_delta_rule")]
    display(Markdown(figures.markdown_table(rows)))

# %% [markdown]
# ## 8. What limits this rung, and what would come next
#
# * **How it got here.** The first H200 run (`figures/data/probes/h200_r6_2fb682a.json`) had r6 slower than r3;
#   its SASS (`nvdisasm` on the cubin ptxas builds through nvJitLink, no GPU needed) showed 2,495 IMAD and 1,003
#   ISETP against 45 HMMA. The fixes, in the order they were found: `vec.ld1` for shared loads, tiles side by side,
#   the bit-mask split, fresh P2 accumulators (accuracy), U'' loaded early, and the fixed-map stagers. The module
#   docstring lists the per-kernel times after each step.
# * **Still one block per (head, value tile) walking the chunks** in the fused schedule. The state kernel is 128
#   blocks of 16 warps at the standard shape; ncu (`figures/data/probes/h200_ncu_r6_1391814.csv`) shows the warps
#   mostly waiting on fixed latencies (the chain of three dependent `mma` per tile in 3xTF32) and barriers, with the
#   tensor pipe far from busy. For plain and decay attention the **split schedule** (the default, section 9) takes
#   P1 out of that walk, as fla does: the walk only carries the state and stores it per chunk, and a fully parallel
#   kernel computes every chunk's output from it.
# * **Registers.** ptxas reports the state kernel at the 128-register cap of a 512-thread block with few or no bytes
#   spilled (`python -m linattn_numba.compile_check --assemble tensor_cores` prints them per variant).
# * **The intra kernel** of the delta family is still r3's FMA code: for the gated delta rule it is more than half
#   of r6's time, and its products (`Q Kᵀ`, `K Kᵀ`, the block inverse, W, U, Q', U'') are the next candidates for the
#   tensor cores. For the additive family the fused schedule's intra kernel runs on the tensor cores
#   (`_intra_add_kernel`: `Q Kᵀ` tiles above the diagonal skipped, `P V` stopped at it), a little faster than r3's
#   on the H200 (`figures/data/probes/h200_tune_r6_intra_7741f24.json`).
# * **Hopper's own instructions** (`wgmma`: warp-group products with operands straight from shared memory, the
#   TMA copy engine) are the step after `mma.sync`; Numba reaches them only through inline PTX as well.
#
# ## 9. The split schedule
#
# Plain and decay attention need P1 (`Q S`) only for the output: nothing in the state walk depends on it. The
# split schedule (`schedule="split"`, the default where it fits) runs three kernels instead of two:
#
# | kernel | grid | does |
# |---|---|---|
# | `gates` | one thread per (head, chunk) | in-chunk cumulative log-gates (decay only) |
# | `state` | (V / BV, B H), as before | per chunk: stores S_c to `hs`, then P2 only |
# | `out` | (chunks, B H) | `scale (diag(γ) Q S_c + tril(Q Kᵀ ⊙ Γ) V)`: `Q S_c` and `P V` in one accumulator |
#
# The price is `hs`, every chunk's starting state: B H (T / C) K V floats, written once and read once. (For the delta
# family P1's `W S` does feed the walk; `schedule="split"` there runs r3's own split, whose walk also stores
# `V_new = U - W S_c`, with this rung's output kernel on `V_new`: the default there too, `r6.DELTA_SCHEDULE`, since
# it was timed on the H200.) The two schedules agree within float32 error:

# %%
inp = make_inputs(1, 40, 1, 16, 16, "decay", initial_state=True, seed=2)
d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
outs = {}
for sched in r6.SCHEDULES:
    o = cuda.to_device(np.full((1, 40, 1, 16), np.nan, np.float32))
    names = [n for n, _ in r6.launches(d["q"], d["k"], d["v"], d["g"], None, o, d["initial_state"], None, 0.25, 16,
                                        schedule=sched)]
    r6.forward(d["q"], d["k"], d["v"], d["g"], None, o, d["initial_state"], None, 0.25, 16, schedule=sched)
    outs[sched] = o.copy_to_host()
    print(f"{sched:6s} kernels {names}")
o_ref, _ = reference.recurrent(inp["q"], inp["k"], inp["v"], inp["g"], None, scale=0.25,
                               initial_state=inp["initial_state"])
for sched, o in outs.items():
    assert rel_err(o, o_ref) <= TOL_FP32
    print(f"{sched:6s} rel err {rel_err(o, o_ref):.1e}")
print(f"hs at the standard shape: {r6.split_bytes(4, 8192, 16, 128, 128, 64) / 2**20:.0f} MiB")

# %% [markdown]
# ## 10. The output kernel, pipelined
#
# The split schedule's `out` kernel above stages its tiles, waits at a barrier, then multiplies. r3's output kernel
# overlaps its copies with its products (`cp.async` slabs through three buffers: r3's notebook) but multiplies on
# the FMA units. `_out_pipe_kernel` is r3's kernel with its two products on the tensor cores: `acc = Q S_c` and
# `acc += Aqk V` as 3xTF32 tiles, a warp owning 2 row blocks x 4 column tiles (`_mma_2x4`: each B fragment loaded
# and split once for both row tiles). Both are r3's `_out_pipeline` (the copies, buffers and barriers, written once)
# given their product steps: compare r3's `_out_fma_products` with this rung's `_out_pipe_products` (the thread
# map, the product calls, the gate scaling and the stores are what changed).
# `SPLIT_OUT` picks it (the default) or the staged kernel; `SPLIT_STATE` which state walk runs before it (r3's FMA
# kernel by default: it was faster than r6's tensor-core one). Both output kernels on the same inputs:

# %%
inp = make_inputs(1, 45, 1, 8, 12, "decay", initial_state=True, seed=3)
d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
o_ref, _ = reference.recurrent(inp["q"], inp["k"], inp["v"], inp["g"], None, scale=0.25,
                               initial_state=inp["initial_state"])
for kind in r6.SPLIT_OUTS:
    r6.SPLIT_OUT = kind
    o = cuda.to_device(np.full((1, 45, 1, 12), np.nan, np.float32))
    with kernels_made(r6, "_out_pipe_kernel") as made:
        r6.forward(d["q"], d["k"], d["v"], d["g"], None, o, d["initial_state"], None, 0.25, 32, schedule="split")
    err = rel_err(o.copy_to_host(), o_ref)
    assert err <= TOL_FP32
    print(f"SPLIT_OUT={kind:9s} pipelined kernel used: {bool(made)}  rel err {err:.1e}")
r6.SPLIT_OUT = "pipelined"

# %% [markdown]
# On the H200 (B4 T8192 H16 K=V=128, decay, per kernel, one device call: `figures/data/probes/
# h200_tune_r6_pipe_8baed37.json` and r3's split beside it): the output kernel falls from r3's 0.89 ms to 0.68.
# Putting the scores on the tensor cores too made the forward slower (`h200_tune_r6_pipe_2af77ac.json`), so they
# stay r3's FMA tiles.

# %%
data_dir = figures.find_data_dir()
runs = {}
if data_dir:
    def r6_label(r):  # SPLIT_STATE "shared" runs r3's state kernel only with the pipelined output kernel
        state = "r3" if r["SPLIT_OUT"] == "pipelined" and r["SPLIT_STATE"] == "shared" else "r6"
        return f"{state} state, {r['SPLIT_OUT']}"

    for fname, label_of in (("h200_tune_r3_split_8baed37.json", lambda r: "r3 (FMA, FMA)"),
                            ("h200_tune_r6_pipe_8baed37.json", r6_label)):
        path = os.path.join(data_dir, "probes", fname)
        if os.path.exists(path):
            with open(path) as f:
                for r in json.load(f)["recurrences"]["decay"]["records"]:
                    runs.setdefault(label_of(r), r)
if runs:
    fig, ax = plt.subplots(figsize=(7, 2.6))
    for i, (label, r) in enumerate(runs.items()):
        left = 0.0
        for part, color in (("gates_ms", "0.6"), ("state_ms", "tab:blue"), ("out_ms", "tab:orange")):
            ax.barh(i, r.get(part, 0.0), left=left, color=color, label=part[:-3] if i == 0 else None)
            left += r.get(part, 0.0)
        ax.text(left + 0.02, i, f"{r['median_ms']:.3f} ms", va="center", fontsize=8)
    ax.set_yticks(range(len(runs)), list(runs))
    ax.set_xlabel("ms (each kernel alone; the forward's median at the bar's end)")
    ax.set_title("decay, B4 T8192 H16 K=V=128, H200: the split schedule's kernels")
    ax.legend(loc="lower right", fontsize=8)
    plt.tight_layout()
    plt.show()
else:
    print("no figures/data/probes here: the H200 numbers are in the text above")

# %% [markdown]
# ## Exercises
#
# 1. From `mma.fragment_a` and `mma.fragment_c`, show that P2's four tiles of one warp (same rows, four column
#    groups) share one A fragment per step (`_tiling`'s SG). How many shared-memory loads and split instructions
#    per lane and step does that save against loading A for every tile?
# 2. Change `mma_3xtf32` to drop the `Ab Bs` term (2xTF32, "big·big + small·big"). Predict its error on the tile of
#    section 3 and check.
# 3. The P1 loop stops at `8 ceil(K / 8)`. Why is that correct, and how much work does it save at K = 20?
# 4. Count the bytes of shared memory one P2 step reads per warp, and compare with the FLOPs of its three mma
#    instructions: is the tile step bound by shared-memory bandwidth or by the tensor cores?
