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
# 3. stage inputs in **shared memory** with coalesced, batched loads behind a barrier, read them back with
#    16-byte vector loads, and say what that saves;
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
# * **split each column's rows** over `NS` lanes (the rung's `r1.NS`, printed below). The rows go in **chunks of
#   4 consecutive rows**, dealt round-robin: lane slice `s` holds chunks `s, s + NS, s + 2·NS, …`, i.e. rows
#   `4(m·NS + s) + e` for `m < RC`, `e < 4` -- `R = 4·RC` rows of `S[:, j]`, `RC = ⌈K / (4·NS)⌉`. A dot product
#   `k · S[:, j] = Σ_s (Σ_{i of s} k_i S_ij)` is then `R` FMAs per lane plus a sum over the `NS` lanes --
#   `log2(NS)` `shfl_xor_sync` steps (by 1, 2, 4, …) after which *every* lane holds the total, so `u_j` needs no
#   broadcast. Why chunks of 4 and not every `NS`-th row: a lane's 4 values of `k` (and of `q`) for one chunk are
#   contiguous in shared memory, one 16-byte load (`ld.shared.v4`) instead of four;
# * **fold the decay into the update**: with `γ = exp(g_t)`, `k · (γS) = γ (k · S)`, so
#
# $$u_j = \beta_t\,v_{tj} - (\beta_t\gamma)\, k_t\cdot S[:, j], \qquad S[:, j] \leftarrow \gamma\, S[:, j] + u_j\, k_t,
#   \qquad o_{tj} = \text{scale}\; q_t \cdot S[:, j]$$
#
# -- one multiply and one FMA per state element, no separate decay pass (`β_t` and `β_t γ` are staged per token);
# * **defer the decay** (what the rung does where a tile's decay allows it): with `D_t = exp(G_t)`, `G_t` the sum
#   of the tile's log-decays up to token `t`, keep `S~ = S / D_t` in the registers. Then
#
# $$u_j = \beta_t\,v_{tj} - (\beta_t D_t)\, k_t\cdot \tilde S[:, j], \qquad
#   \tilde S[:, j] \leftarrow \tilde S[:, j] + (u_j / D_t)\, k_t, \qquad o_{tj} = \text{scale}\, D_t\; q_t \cdot
#   \tilde S[:, j]$$
#
# -- **one FMA per state element**, the decay only in per-column scalars. `1/D_t` must stay finite, so a tile whose
# decay would take `D` below `2^-20` uses the form above instead (the module docstring, "Deferred decay").

# %% [markdown]
# ## 2. The thread/block map
#
# ```
#   block = NW warps;  grid = (ceil(V / VB), B·H)  with  VB = NW · (32 / NS) · COLS  value columns per block
#
#   lane l of warp w:   slice s = l % NS           -> rows 4(m·NS + s) + e,  m < RC, e < 4   (R = 4·RC rows)
#                       group grp = w·(32/NS) + l // NS
#                                                  -> columns col0 .. col0 + COLS - 1,
#                                                     col0 = blockIdx.x·VB + grp·COLS
#
#   registers per lane: S[R, COLS] (the state), kr[R], qr[R], u, k.S, q.S [COLS], a staging batch
#   shared per block:   one flat array: k, q tiles [TC, KP] (tokens x padded K, KP = NS·R; a lane's 4 rows are
#                       one 16-byte load), v [TC, VB], per token 4 scalars (beta, beta·D, 1/D, scale·D) and a
#                       header per tile; x2 with the cp.async double buffer
#
#   per token:  k.S  -> R FMAs/column + log2(NS) shfl_xor steps                 (delta rule)
#               S~ <- S~ + k u/D ; q.S -> 2R FMAs/column; the previous token's q.S butterfly
#               (interleaved with this token's k.S one); lane slice s == c writes o[t-1, col0 + c]
#   per TC tokens, registers: stage the tile (coalesced, STAGE_BATCH loads in flight per thread),
#                  syncthreads, walk the tokens, syncthreads
#   per TC tokens, cp.async: wait for this tile's copies, syncthreads, start the next tile's copies,
#                  walk the tokens
# ```
#
# The ownership of one warp's part of the state, computed from the rung's own constants (`NS`, `GROUPS`,
# `launch_config` with the module's defaults), for a `K` with two chunks per lane -- each cell shows the lane that
# holds that element in its registers, its colour the lane's slice `s`:

# %%
K_ = 2 * 4 * r1.NS  # two 4-row chunks per lane
RC_, cols, nw = r1.launch_config(K_, 128)
R_ = 4 * RC_
warp_cols = r1.GROUPS * cols
lane_of = np.full((K_, warp_cols), -1)
for lane in range(32):
    s, grp = lane % r1.NS, lane // r1.NS
    for r in range(R_):
        i = 4 * ((r // 4) * r1.NS + s) + r % 4  # the rung's row map: chunk m = r // 4, row e = r % 4 in it
        for c in range(cols):
            lane_of[i, grp * cols + c] = lane
assert (lane_of >= 0).all()  # every element has exactly one owner (each is written once above)
fig, ax = plt.subplots(figsize=(14, 0.5 * warp_cols + 1.4))
ax.imshow((lane_of % r1.NS).T, cmap="tab20" if r1.NS > 10 else "tab10", aspect="auto", alpha=0.55)
for i in range(K_):
    for j in range(warp_cols):
        ax.text(i, j, lane_of[i, j], ha="center", va="center", fontsize=6)
for j in range(cols, warp_cols, cols):  # boundaries between column groups
    ax.axhline(j - 0.5, color="k", lw=0.8)
ax.set_xlabel(f"state row i (K = {K_}: RC = {RC_} chunks of 4 rows, R = {R_} rows per lane; colour = slice s = "
              f"lane % {r1.NS})")
ax.set_ylabel(f"value column j\n({warp_cols} per warp,\nCOLS = {cols} per lane)")
ax.set_title("r1: which lane of warp 0 holds S[i, j] in its registers", fontsize=9)
plt.show()

RC128, cols128, nw128 = r1.launch_config(128, 128)
vb128 = nw128 * r1.GROUPS * cols128
print(f"at K = V = 128: RC = {RC128} chunks, R = {4 * RC128} rows x COLS = {cols128} columns = "
      f"{4 * RC128 * cols128} state registers per lane; VB = {vb128} columns per block of {nw128} warps "
      f"({-(-128 // vb128)} blocks per head); a lane's k (and q) for one token: {RC128} 16-byte shared loads")

# %% [markdown]
# ## 3. The kernel
#
# From the package, with `inspect.getsource`. Look for: the staging loops (clamped loads in batches of
# `STAGE_BATCH` into registers, then masked stores, so a thread's loads issue back to back and a tile costs a few
# memory latencies, not one per element), or under `ASYNC` `issue_copies` (16-byte `cp.async` into the other
# buffer while this tile is computed on), `tile_scalars` (the warp scan of the log-decays that decides per tile
# between the deferred and the exact token loop, `make_tile_loop`), the 16-byte `ld4` loads (a lane's chunk of
# `k` or `q` is one vector load), the `syncthreads` per tile, the `shfl_xor_sync` butterflies -- the output's one
# pipelined by a token, so two independent butterflies are in flight -- the four independent partial sums that
# shorten each dependent-add chain, the 0/1 weights `wsel` that pick a lane's output column without indexing a
# local array by lane (which would put it in local memory), and the `HAS_*` flags folded at compile time.

# %%
display(Code(inspect.getsource(r1._kernel), language="python"))

# %% [markdown]
# At `T = 1` (the decode step) the work is a copy of the state plus a little arithmetic, so a different map
# is better: lane → value columns `lane + 32c` (`CS` of them; a warp reads 128 contiguous bytes of a state row per
# load), `SW` warps → slabs of `K / SW` rows, every state load issued before any arithmetic, and the two dot
# products reduced across warps through shared memory. Its launch bounds ask for `SMB` blocks per SM, which caps
# the registers so that one block can load while another computes and stores. When the state rows are float32
# and 16-byte aligned (`VEC`, the default), `_step_kernel_vec` runs instead: the same map with one 128-bit load
# (`ld4`, from `linattn_numba.vec`) per 4 columns, lane → columns `4·lane … 4·lane+3` -- a quarter of the load
# and store instructions and one address per row, so more of the registers hold bytes in flight:

# %%
display(Code(inspect.getsource(r1._step_kernel), language="python"))
display(Code(inspect.getsource(r1._step_kernel_vec), language="python"))
display(Code(inspect.getsource(r1.forward), language="python"))
print(f"decode-step defaults: SW = {r1.SW} warps, CS = {r1.CS} columns per lane, launch bounds for SMB = {r1.SMB} "
      f"blocks per SM; at K = V = 128 a thread holds {-(-128 // r1.SW) * r1.CS} state values")

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
# Per token and head, the FLOPs are r0's (`4KV` to `7KV`). What changed is the traffic and the parallelism
# (the numbers for the standard shape are printed below, from the rung's constants):
#
# * **Device memory**: the inputs once per block -- `(2K + V + 2) · 4` bytes per token-head, `q`, `k` staged again
#   by each of the `⌈V/VB⌉` blocks of a head (the repeats hit L2) -- plus the state once in and once out per
#   *sequence*. No per-token state traffic at all (r0: `K·V·4` bytes per pass, several passes per token-head).
# * **Threads**: `B · H · V · NS / COLS` of them: a few warps per SM, one or two per warp scheduler -- better
#   than r0, still thin.
# * **Per token, per warp**: for each of its `COLS` columns, `R` FMAs for `k · S` (delta), `2R` for update and
#   output, `log2(NS)` shuffles for each of the two reductions; per lane `RC` 16-byte shared loads each of `k`
#   and `q` -- a few hundred instructions, most of them in dependent chains (each shuffle waits for its sum, the
#   update waits for `u`).

# %%
Bs, Ts, Hs, Ks, Vs = (figures.STANDARD[k] for k in "BTHKV")
RCs, colss, nws = r1.launch_config(Ks, Vs)
vbs = nws * r1.GROUPS * colss
log_ns = r1.NS.bit_length() - 1
print(f"standard shape B{Bs} T{Ts} H{Hs} K{Ks} V{Vs}, defaults NS = {r1.NS}, COLS = {colss}, NW = {nws}; staging: "
      + ", ".join(f"{rec} {'cp.async, TC = ' + str(r1.TC_ASYNC) if a else 'registers, TC = ' + str(r1.TC)}"
                  for rec, a in r1.STAGE_ASYNC.items()) + ":")
print(f"  inputs per token-head: (2K + V + 2) * 4 = {(2 * Ks + Vs + 2) * 4} bytes; q, k staged by "
      f"{-(-Vs // vbs)} blocks per head")
print(f"  threads: B H V NS / COLS = {Bs * Hs * Vs * r1.NS // colss} = {Bs * Hs * Vs * r1.NS // colss // 32} warps "
      f"in {-(-Vs // vbs) * Bs * Hs} blocks of {nws} warps")
print(f"  per lane and token: R = {4 * RCs} rows x {colss} columns: {2 * 4 * RCs * colss} FMAs for update and q.S "
      f"and {log_ns * colss} shuffles, plus {4 * RCs * colss} FMAs and {log_ns * colss} shuffles for k.S (delta "
      f"rule); {2 * RCs} 16-byte shared loads of k and q")

# %% [markdown]
# So at the standard shape the bound is neither bandwidth nor FLOPs: it is **issue latency of a sequential chain
# per token, with one or two warps per scheduler to hide it**. The H200 numbers:

# %%
data_dir = figures.find_data_dir()
data = figures.load_or_explain(data_dir)
std = tuple(figures.STANDARD[k] for k in "BTHKV")
if data is None:
    print("No bench results found (figures/data/*.json): run `linattn-numba bench` on a GPU machine.")
else:
    copy_gbps, peak, src = figures.ceilings(data)
    warps = Bs * Hs * Vs * r1.NS // colss // 32
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
# ### The launch knobs
#
# `COLS` (value columns per lane) trades parallelism (fewer threads) for reuse (each shared load of `k`, `q`
# feeds `COLS` columns, and the `COLS` reductions run side by side); `NS` (lanes per column) trades shuffle steps
# for rows per lane; `NW` (warps per block) sets how many warps share one staged tile; `TC` how many tokens one
# staged tile holds; `ASY` whether tiles are staged by `cp.async` into a double buffer (1) or through registers
# between two barriers (0). The decode step has its own: `SW`, `CS`, `SMB` (section 3). The bench's `--tune` sweep,
# from the newest data file that has one -- if that file is older than the rung's current code, its rows describe
# the kernel as it was then, and the rung's defaults may be missing from it:

# %%
KNOBS = ("cols", "nw", "tc", "ns", "asy")
STEP_KNOBS = ("sw", "cs", "smb", "vec")
DEFAULTS = dict(cols=r1.DEFAULT_COLS, nw=r1.DEFAULT_NW, ns=r1.NS, sw=r1.SW, cs=r1.CS, smb=r1.SMB,
                vec=int(r1.STEP_VEC))


def default(name, rec):
    """The rung's default for knob ``name`` on recurrence ``rec`` (the staging, and so TC, is per recurrence)."""
    asy = r1.STAGE_ASYNC.get(rec, False)
    return {"asy": int(asy), "tc": r1.TC_ASYNC if asy else r1.TC}.get(name, DEFAULTS.get(name))


def tune_table(records, knobs):
    """Markdown rows of one sweep (one recurrence), fastest first; a knob the record lacks (older data) shows
    as -."""
    best = min(records, key=lambda t: t["median_ms"])
    rec = records[0]["recurrence"]
    is_default = lambda t: all(t.get(n) == default(n, rec) for n in knobs)  # noqa: E731
    rows = []
    for t in sorted(records, key=lambda t: t["median_ms"]):
        mark = ("**fastest**" if t is best else "") + (" default" if is_default(t) else "")
        rows.append("| " + " | ".join(str(t.get(n, "-")) for n in knobs) + f" | {t['median_ms']:.3f} | {mark} |")
    shp = figures.shape_str(tuple(records[0]["shape"][k] for k in "BTHKV"))
    head = "| " + " | ".join(n.upper() for n in knobs) + " | ms | |\n|" + "--:|" * (len(knobs) + 1) + "---|\n"
    display(Markdown(f"{records[0]['recurrence']} at {shp}\n\n" + head + "\n".join(rows)))
    if not any(is_default(t) for t in records):
        print("The rung's defaults (" + ", ".join(f"{n.upper()}={default(n, rec)}" for n in knobs) + ") are not in "
              "this sweep: rerun `linattn-numba bench --tune` on a GPU to measure them.")
    elif not is_default(best):
        print("Note: in this data the fastest is " + ", ".join(f"{n.upper()}={best.get(n)}" for n in knobs)
              + ", not the rung's default (the launch is chosen on the total over the swept recurrences; "
              "exercise 2).")


tune = [t for t in (data.tune if data is not None else []) if "median_ms" in t and "error" not in t]
seq = [t for t in tune if "cols" in t]
step = [t for t in tune if "sw" in t]
for rec in reference.RECURRENCES:  # one table per recurrence the sweep timed
    if any(t["recurrence"] == rec for t in seq):
        tune_table([t for t in seq if t["recurrence"] == rec], KNOBS)
if step:
    tune_table(step, STEP_KNOBS)
if not seq and not step:
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
#   GPU waits on latency (shuffles, shared loads, FMA chains) with one or two warps per scheduler.
# * More threads would need a smaller share of the state per thread (more shuffles), or more heads.
# * The FLOPs are vector FMAs; the tensor cores (which hold most of the H200's FLOP/s) are idle.
#
# **r2 `chunked`** stops walking token by token: the sequence is cut into chunks of `C` tokens, each chunk's
# contribution becomes **matrix products** that are parallel inside the chunk (notebook 00, section 4), and only
# `T / C` state updates stay sequential.
#
# ## Exercises
#
# 1. Split each column over half and over twice as many lanes as the default `NS` (`launch_config` and
#    `forward` take it as `ns`). What happens to the rows per lane, to the number of shuffles per token, to the
#    16-byte loads per lane, and to the thread count? Rerun the smoke test with `r1.forward(..., ns=...)`, and
#    compile that variant for sm_90 to see the register count: `r1._kernel(RC, COLS, NW, ..., TC, NS)` with
#    `RC, COLS, NW` from `r1.launch_config(..., ns=...)`, the argtypes of `r1.compile_targets()`,
#    `numba.cuda.compile_ptx` with the simulator off, then `ptxas -v`.
# 2. The sweep above may disagree with the rung's defaults (`DEFAULT_COLS`, `DEFAULT_NW`, `TC`, `NS`). Decide from
#    the data which default you would ship, and at which shapes you would re-measure before changing it.
# 3. The step kernel loads the state with lane → column. Why would r1's sequence map (`NS` lanes per column, each
#    holding chunks of 4 rows) make the step slower? Count the bytes a warp requests per load in both maps.
# 4. Estimate the decode step's time at B = 256, H = 16, K = V = 128 if it ran at the copy bandwidth in the data,
#    and compare with the measured time. Where could the difference go?
