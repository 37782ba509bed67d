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
# # r4 · `scan`: sequence parallelism through an associative scan of affine maps
#
# **Learning goals.** After this notebook you can
#
# 1. explain why the chunked rungs leave most of the GPU idle when there are few (batch × head) pairs and a long
#    sequence, and why more chunks do not help;
# 2. write a segment of the recurrence as an **affine map of its start state**, `S ↦ M S + S_loc`, compute `M`
#    with a rung below (the *engine*: r6 `tensor_cores` by default, r3 `shared` or r2 `chunked` where r6 does not
#    fit or when asked for, run on values
#    `[v | 0]` from the start state `[0 | I]`), and compose maps associatively;
# 3. read the two ways r4 combines the segments' maps -- a sequential **chain** and a **Kogge-Stone tree** scan --
#    and the cost model that chooses the number of segments and the scan;
# 4. count what the extra parallelism costs in work, and read the H200 measurements of r4 against its engine.
#
# The module docstring of `linattn_numba.rungs.r4_scan` is the reference; this notebook shows its sections next
# to the code and the numbers that back them.

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
from numba import cuda  # noqa: E402

import linattn_numba as la  # noqa: E402
from linattn_numba import figures, reference  # noqa: E402
from linattn_numba.rungs import r4_scan as r4  # noqa: E402
from linattn_numba.testing import TOL_FP32, make_inputs, rel_err  # noqa: E402

print("running on", "Numba's CUDA simulator (CPU)" if la.sim.active() else "a CUDA GPU")
print("rung", r4.NAME, "| engines", r4.ENGINES, "| default, in order of preference", r4.DEFAULT_ENGINES,
      "| scans", r4.SCAN_KINDS)
print("default engine at K = V = 128, chunk 64:", r4.engine_module(128, 128, 64).NAME,
      "| at chunk 128 (not one of r3's sizes):", r4.engine_module(128, 128, 128).NAME)
print("phase 3's rung (additive, delta family; 'split': phases 1 and 3 on r3's split schedule; None: the engine):",
      r4.PHASE3[False], ",", r4.PHASE3[True])

DOC = r4.__doc__


def doc_between(start, stop=None):
    """The module docstring's text from the paragraph that begins with ``start`` up to ``stop`` (or the end)."""
    return DOC[DOC.index(start):DOC.index(stop) if stop else len(DOC)].strip()


def show_doc(text):
    display(Markdown("```text\n" + text + "\n```"))


def engine_walkers(eng, B, H, K, V, C):
    """(walkers, BV): the sequential walkers of an engine's state pass, one block per head and value tile."""
    if eng.NAME == "tensor_cores":  # r6: one BV for every shape (BV_DEFAULT, at most V rounded up to 8)
        bv = eng.value_tile(V)
    elif hasattr(eng, "value_tile"):  # r3 shared: BV from its BV_TABLE
        bv = eng.value_tile(C, eng.padded_k(K), V)
    else:  # r2 chunked: a fixed BV
        bv = eng.BV
    return B * H * -(-V // bv), bv


# %% [markdown]
# ## 1. The math of this step
#
# **The problem.** The chunked rungs' state pass walks the chunks of a sequence in order, with one walker (a
# block) per head and value tile: `B · H · ceil(V / BV)` walkers, however long the sequence. Smaller chunks make
# each step cheaper, not the walk shorter. With few heads:

# %%
for name in r4.ENGINES:
    eng = r4.engine_module(128, 128, 64, name)
    for shape in ((4, 8192, 16, 128, 128), (1, 262144, 2, 128, 128)):
        n, bv = engine_walkers(eng, shape[0], shape[2], shape[3], shape[4], 64)
        print(f"{name:12s} (BV = {bv}) at {figures.shape_str(shape)}: {n} walkers for {r4.DEFAULT_SMS} SMs, "
              f"each {-(-shape[1] // 64)} chunks of 64 tokens long")

# %% [markdown]
# **The idea.** Every step of the recurrence is *linear* in the state (plus a term that does not depend on it):
#
# $$S_t = \gamma_t (I - \beta_t k_t k_t^T)\, S_{t-1} + \beta_t k_t v_t^T \quad\text{(delta rule)},\qquad
#   S_t = \gamma_t S_{t-1} + k_t v_t^T \quad\text{(additive)} .$$
#
# So a whole segment of `L` tokens maps its start state affinely, `S_end = M S_start + S_loc`, with `M` the product
# of the per-token matrices (a scalar `exp(Σ g)` for the additive family) and `S_loc` the end state from a zero
# start. Affine maps compose, and composition is **associative**:
#
# $$(M_2, S_2) \circ (M_1, S_1) = (M_2 M_1,\; M_2 S_1 + S_2) .$$
#
# Hence: compute every segment's `(M_i, S_i)` in parallel (phase 1), combine them with a parallel prefix scan to
# get every segment's true start state `X_i` (phase 2), and rerun every segment from `X_i` to produce its outputs
# (phase 3). Checked in NumPy with the oracle, for two segments of the gated delta rule:

# %%
K, V, L = 6, 5, 12
inp = make_inputs(1, 2 * L, 1, K, V, "gated_delta", initial_state=True, seed=0)
seg = lambda a, i: None if a is None else a[:, i * L:(i + 1) * L]  # noqa: E731


def end_state(i, values, start):
    """Final state of segment i of the oracle recurrence, with the given values [1, L, 1, *] and start state."""
    return reference.recurrent(seg(inp["q"], i), seg(inp["k"], i), values, seg(inp["g"], i), seg(inp["beta"], i),
                               initial_state=start)[1][0, 0]


def segment_map(i):
    """(M_i, S_i) in one run: values [v | 0] from the start state [0 | I] end as [S_i | M_i]."""
    v_aug = np.concatenate([seg(inp["v"], i), np.zeros((1, L, 1, K))], axis=-1)
    start = np.concatenate([np.zeros((K, V)), np.eye(K)], axis=-1)[None, None]
    out = end_state(i, v_aug, start)
    return out[:, V:], out[:, :V]


(M0, S0), (M1, S1) = segment_map(0), segment_map(1)
X = inp["initial_state"][0, 0].astype(np.float64)
direct = reference.recurrent(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"],
                             initial_state=inp["initial_state"])[1][0, 0]
composed = (M1 @ M0) @ X + (M1 @ S0 + S1)  # ((M1, S1) o (M0, S0)) applied to X
print(f"one pass over 2 segments vs the composed affine maps: max |difference| = {np.abs(direct - composed).max():.1e}")
print(f"the delta rule's M is a contraction: spectral norms {np.linalg.norm(M0, 2):.3f}, {np.linalg.norm(M1, 2):.3f}")

# %% [markdown]
# Why `[v | 0]` from `[0 | I]` gives `M`: the columns of the state evolve independently (each is updated with the
# same `k_t, β_t, γ_t` and its own value column), so the `K` extra columns, started at the identity and fed zero
# values, end at `M · I = M`. r4's phase 1 is therefore *the engine rung itself*, run in its state-only mode on
# `V + K` value columns -- `M` is never built token by token. The zeros need not exist: r3 and r6 take `v` itself
# with a state `K` columns wider and treat `U` as zero past `v`'s columns (`r3_shared.wide_state_columns`), which
# saves the copy `[v | 0]` and half of the intra kernel's `U` (the long gated delta shape: 8.37 -> 7.11 ms on the
# H200 at the same segment count, `figures/data/probes/h200_r4_wide_ebe502c.json`). Phase 3 needs no `M` at all:
# it is an ordinary forward from known start states, so any rung can run it; for the delta family r4 hands it to
# r1 `recurrent` (`r4.PHASE3`, printed at the top; "Phase 3 on r1" in the module docstring has the measurement).
# For the additive family the transition is a scalar, so even that second walk can go: phase 1 runs r3's split
# schedule from zero and keeps every chunk's state `H_c`, and phase 3 is r3's output kernel alone, with the
# chunk's true state `H_c + exp(lg_c) X_i` (`lg_c`: the sum of `g` in the segment before chunk `c`) formed as
# its slabs land in shared memory ("Phases 1 and 3 on r3's split schedule" in the docstring). The docstring's
# summary:

# %%
show_doc(doc_between("What changed and why", "The three phases::"))

# %% [markdown]
# ## 2. The thread/block map
#
# The three phases, how segments become views of the inputs, and r4's own kernels, as the module docstring
# draws them (the engine's kernels are those of rung `tensor_cores`, `shared` or `chunked`, documented in their
# notebooks):

# %%
show_doc(doc_between("The three phases::", "Segment views:"))
show_doc(doc_between("Segment views:", "Kernels of the scan"))
show_doc(doc_between("Kernels of the scan", "Bytes and FLOPs"))

# %% [markdown]
# The tree scan (Kogge-Stone): at level `d = 1, 2, 4, ...` every segment `i ≥ d` combines with segment `i − d`;
# after `⌈log₂ NS⌉` levels segment `i` holds the composition of segments `0..i`. Every level is one launch and
# fully parallel; the chain does the same in `NS − 1` dependent steps inside one launch.

# %%
NS_demo = 8
levels = []
d = 1
while d < NS_demo:
    levels.append(d)
    d *= 2
fig, ax = plt.subplots(figsize=(7, 3))
for lev, d in enumerate(levels):
    for i in range(NS_demo):
        ax.plot(i, -lev, "o", color="tab:blue", ms=6)
        if i >= d:
            ax.annotate("", xy=(i, -lev - 0.8), xytext=(i - d, -lev), arrowprops=dict(arrowstyle="->", lw=0.8,
                                                                                   color="tab:orange"))
            ax.annotate("", xy=(i, -lev - 0.8), xytext=(i, -lev), arrowprops=dict(arrowstyle="->", lw=0.8,
                                                                               color="grey"))
for i in range(NS_demo):
    ax.plot(i, -len(levels), "s", color="tab:green", ms=6)
ax.set_yticks([-lv for lv in range(len(levels) + 1)], [f"level d={d}" for d in levels] + ["inclusive result"])
ax.set_xticks(range(NS_demo), [f"seg {i}" for i in range(NS_demo)], fontsize=7)
ax.set_title(f"Kogge-Stone scan of {NS_demo} segments: {len(levels)} levels (orange: the map combined in)",
             fontsize=9)
plt.show()

# %% [markdown]
# ## 3. The kernels
#
# From the package with `inspect.getsource`: the delta family's two scans (the chain keeps `X` in shared memory
# and walks the segments; the tree is a tiled matmul per level, 4 × 4 register tiles), the additive tree level,
# the choice of engine, the cost model, and `forward`.

# %%
for name in ("_chain_delta_kernel", "_tree_delta_kernel", "_tree_add_kernel", "engine_module", "choose_num_segments",
             "plan_segments", "_scan_cost_us", "choose_scan", "forward"):
    display(Markdown(f"**`{name}`**"))
    display(Code(inspect.getsource(getattr(r4, name)), language="python"))

# %% [markdown]
# ## 4. Smoke run against the oracle
#
# `B1 T64 H1 K=V=8`, chunk 16, every recurrence, with an initial state, both scans with the default engine; the
# tree with the other engine too, for one recurrence of each family (the simulator is slow). At this size the
# cost model (capped at `MIN_SEG_CHUNKS` chunks a segment) would pick the number printed below; the cell forces
# `num_segments = 4`, so that the tree has two levels.

# %%
B, T, H, Kd, Vd = 1, 64, 1, 8, 8
auto = {rec: r4.choose_num_segments(B, T, H, Kd, Vd, 16, rec in ("delta", "gated_delta"))
        for rec in reference.RECURRENCES}
print("the cost model's choice here:", auto, "segments")
default_engine = r4.engine_module(Kd, Vd, 16).NAME
others = [e for e in r4.ENGINES if e != default_engine]
rows = []
for rec in reference.RECURRENCES:
    inp = make_inputs(B, T, H, Kd, Vd, rec, initial_state=True, seed=0)
    dev = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    o_ref, h_ref = reference.recurrent(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"],
                                       initial_state=inp["initial_state"])
    runs_ = [(default_engine, scan) for scan in r4.SCAN_KINDS]
    runs_ += [(e, "tree") for e in others if rec in ("decay", "gated_delta")]
    for engine, scan in runs_:
        o = cuda.to_device(np.full((B, T, H, Vd), np.nan, np.float32))
        ht = cuda.to_device(np.full((B, H, Kd, Vd), np.nan, np.float32))
        r4.forward(dev["q"], dev["k"], dev["v"], dev["g"], dev["beta"], o, dev["initial_state"], ht, Kd**-0.5, 16,
                   num_segments=4, scan=scan, engine=engine)
        errs = (rel_err(o.copy_to_host(), o_ref), rel_err(ht.copy_to_host(), h_ref))
        rows.append(f"| {rec} | {engine} | {scan} | {errs[0]:.1e} | {errs[1]:.1e} | "
                    f"{'ok' if max(errs) <= TOL_FP32 else 'FAIL'} |")
        assert max(errs) <= TOL_FP32, (rec, engine, scan, errs)
display(Markdown(f"Default engine: `{default_engine}`; 4 segments of {r4.plan_segments(T, 16, 4)[1]} tokens.\n\n"
                 f"| recurrence | engine | scan | rel err o | rel err final state | within {TOL_FP32:g} |\n"
                 "|---|---|---|--:|--:|---|\n"
                 + "\n".join(rows)))

# %% [markdown]
# ## 5. Napkin math: what the cost model chooses, and what it costs
#
# The docstring's cost model:

# %%
show_doc(doc_between("Cost model.", "Where the time goes:"))

# %% [markdown]
# Its choices, evaluated with the module's own functions for a few shapes. The model counts walkers as
# `B · H · ceil(V / ENGINE_BV)` with `ENGINE_BV` r2's value tile (its constants were fitted with that engine);
# the next column is the walkers of the engine r4 would run now, from the engine's own value tile. When they
# already fill the GPU, r4 is the engine (one segment, no overhead).

# %%
SMS = r4.DEFAULT_SMS
lines = []
for shape in ((4, 8192, 16, 128, 128), (1, 65536, 2, 128, 128), (1, 262144, 2, 128, 128), (1, 1048576, 2, 128, 128)):
    Bs, Ts, Hs, Ks, Vs = shape
    eng = r4.engine_module(Ks, Vs, 64)
    eng_walkers, eng_bv = engine_walkers(eng, Bs, Hs, Ks, Vs, 64)
    for rec in ("decay", "gated_delta"):
        delta = rec == "gated_delta"
        ns_auto = r4.choose_num_segments(Bs, Ts, Hs, Ks, Vs, 64, delta, n_sm=SMS)
        ns, seg_len = r4.plan_segments(Ts, 64, ns_auto)
        walkers = Bs * Hs * -(-Vs // r4.ENGINE_BV)
        head = f"| {figures.shape_str(shape)} | {rec} | {walkers} | {eng_walkers} ({eng.NAME}, BV = {eng_bv}) |"
        if ns == 1:
            lines.append(head + " 1 | - | - | - | engine only |")
            continue
        est = {kind: r4._scan_cost_us(kind, Bs, Hs, Ks, Vs, ns, delta) for kind in r4.SCAN_KINDS}
        kind = r4.choose_scan(Bs, Hs, Ks, Vs, ns, delta)
        extra = f"phase 1 on {Vs + Ks} columns" if delta else "state pass twice"
        lines.append(head + f" {ns} ({seg_len} tokens) | {est['chain']:.0f} | {est['tree']:.0f} | {kind} | {extra} |")
display(Markdown(f"With {SMS} SMs, chunk 64:\n\n| shape | recurrence | walkers (model, BV = {r4.ENGINE_BV}) | "
                 "walkers (engine) | segments | chain µs (model) | tree µs (model) | scan | extra work |\n"
                 "|---|---|--:|--:|--:|--:|--:|---|---|\n" + "\n".join(lines)))

# %% [markdown]
# The extra work is fixed by the algebra: the additive family runs the engine's state pass twice (phases 1 and
# 3); the delta family runs phase 1 on `V + K` columns (the `M` columns), and the tree scan multiplies `K × K`
# matrices. The docstring counts it with the chunked engine:

# %%
show_doc(doc_between("Bytes and FLOPs per token-head", "Cost model."))


# %% [markdown]
# The same FLOP count with r3 `shared` as the engine (r6 executes the same products on the tensor cores, three
# TF32 passes each), from the executed counts of r3's two kernels (its module
# docstring, "Bytes and FLOPs", and notebook `r3_shared`, section 5: the score tiles whole, the triangular
# products up to the diagonal, `(C + 4) / 2` terms on average). In state-only mode (phase 1) r3 skips the scores
# `A_qk`, `Q'`, `U''` and every output product. The tree's combines are spread over the tokens of a sequence.
# For the additive family (`r4.PHASE3` "split") phase 3 is r3's output kernel alone: the state update happens
# once, in phase 1, and r4 executes the engine's FLOPs plus the scan's.

# %%
def r3_flops(delta, out, K, V, C):
    """FLOPs per token-head that r3 shared executes (with or without the output)."""
    from linattn_numba.rungs import r3_shared as r3

    KP, tri = r3.padded_k(K), C + 4
    intra = (2 * C * KP + tri * V if out else 0)  # Aqk (whole C x C tiles); U'' = Aqk U (or Aqk V)
    if delta:
        intra += 2 * C * KP + 2 * C * C / 3 + tri * (KP + V)  # Lkk, the inverse, W, U
        intra += tri * KP if out else 0  # Q'
    state = (int(delta) + int(out)) * 2 * KP * V + 2 * KP * V  # [W; Q'] S (or Q S), the update
    return intra + state


def tree_flops_per_token(T, K, V, ns):
    """The delta family's tree: 2 K^2 W per combine, NS - d combines at level d (W = V at the last level)."""
    total, d = 0.0, 1
    while d < ns:
        w = V + K if 2 * d < ns else V
        total += 2 * K * K * w * (ns - d)
        d *= 2
    return total / T


Kf, Vf, Cf = 128, 128, 64
rows = []
for shape in ((1, 262144, 2, Kf, Vf), (1, 1048576, 2, Kf, Vf)):
    for rec in ("decay", "gated_delta"):
        delta = rec == "gated_delta"
        ns, _ = r4.plan_segments(shape[1], Cf, r4.choose_num_segments(*shape, Cf, delta, n_sm=SMS))
        engine = r3_flops(delta, True, Kf, Vf, Cf)
        # phase 1 on V + K state columns; U = A diag(beta) V only on v's V (the wide state: no [v | 0])
        p1 = r3_flops(delta, False, Kf, Vf + Kf if delta else Vf, Cf) - ((Cf + 4) * Kf if delta else 0)
        p2 = tree_flops_per_token(shape[1], Kf, Vf, ns) if delta else 0.0
        p3 = engine if delta or r4.PHASE3[False] != r4.SPLIT else engine - p1  # split: the output kernel only
        rows.append(f"| {figures.shape_str(shape)} | {rec} | {ns} | {engine / 1e3:.0f} k | {p1 / 1e3:.0f} k | "
                    f"{p2 / 1e3:.1f} k | {p3 / 1e3:.0f} k | {(p1 + p2 + p3) / engine:.2f}× |")
display(Markdown("| shape | recurrence | NS | engine alone | phase 1 | phase 2 (tree) | phase 3 | r4 / engine |\n"
                 "|---|---|--:|--:|--:|--:|--:|--:|\n" + "\n".join(rows)))

# %% [markdown]
# So r4 trades the last column's factor more FLOPs for `NS` times the engine's walkers: a good trade exactly
# when the walkers, not the FLOPs, were what limited the engine.
#
# ## 6. The H200 measurements
#
# The bench's records of this rung (at the standard shape the cost model picks one segment, so r4 should match
# its engine), and the probe that fitted the cost model (`tools/r4_scan_probe.py`): long sequences with two
# heads, where sequence parallelism matters.

# %%
data_dir = figures.find_data_dir()
data = figures.load_or_explain(data_dir)
std = tuple(figures.STANDARD[k] for k in "BTHKV")
if data is not None:
    mine = [r for r in figures.ordered(data.records) if r.get("key") == r4.NAME]
    if not mine:
        print(f"No bench records of rung {r4.NAME!r} in figures/data yet: `linattn-numba bench` on a GPU adds them. "
              "Its engines' and the peers' records:")
    engines = {r4.NAME, *r4.ENGINES}
    display(Markdown(figures.markdown_table([r for r in figures.ordered(data.records)
                                             if r.get("key") in engines or r.get("kind") == "peer"])))
    tmp = tempfile.mkdtemp()
    path, why = figures.plot_ladder(data, os.path.join(tmp, "ladder.png"))
    display(Image(path)) if path else print(why)


def probe_docs(pattern):
    """``(date, file name, records)`` of every readable JSON file under figures/data (any subfolder) matching
    ``pattern``, in file-name order."""
    docs = []
    for p in sorted(glob.glob(os.path.join(data_dir or ".", "**", pattern), recursive=True)):
        try:
            with open(p) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        docs.append((str(doc.get("date", "")), os.path.basename(p),
                     [r for r in doc.get("records", []) if isinstance(r, dict)]))
    return docs


probe = [r for _, _, recs in probe_docs("*r4*probe*.json") for r in recs]
if not probe:
    print("No r4 probe data (figures/data/**/*r4*probe*.json) yet: tools/r4_scan_probe.py on a GPU writes it.")
else:
    probed = sorted({str(r["key"])[len("engine_"):] for r in probe if str(r.get("key", "")).startswith("engine_")})
    now = r4.engine_module(128, 128, 64).NAME
    print(f"engines the probe timed: {', '.join(probed) or 'none'}; r4's default engine now: {now}"
          + ("" if now in probed else " (not in the probe yet: its speed-ups below are over the older engine)"))

# %%
phase2 = [r for r in probe if str(r.get("key", "")).startswith("phase2_") and r.get("median_ms") and r.get("ns")]
if phase2:
    # The probe times phase 2 alone at B1 H2 K=V=128 (tools/r4_scan_probe.py; a record's own shape wins if it has
    # one); the model line is r4_scan's _scan_cost_us with the constants the module has now. Phase 2 does not
    # depend on the engine.
    fig, axs = plt.subplots(1, 2, figsize=(10, 3.6))
    for ax, fam in zip(axs, ("phase2_add", "phase2_delta")):
        delta = fam == "phase2_delta"
        for kind, mk in (("chain", "o"), ("tree", "s")):
            rs = sorted((r for r in phase2 if r["key"] == fam and r.get("scan") == kind), key=lambda r: r["ns"])
            if not rs:
                continue
            ns = [r["ns"] for r in rs]
            line, = ax.loglog(ns, [r["median_ms"] * 1e3 for r in rs], mk + "-", label=f"{kind}: measured")
            shp = [tuple(r["shape"]) if r.get("shape") else (1, 0, 2, 128, 128) for r in rs]
            model = [r4._scan_cost_us(kind, s_[0], s_[2], s_[3], s_[4], n, delta) for s_, n in zip(shp, ns)]
            ax.loglog(ns, model, mk + ":", color=line.get_color(), label=f"{kind}: cost model")
            ax.set_xticks(ns, [str(n) for n in ns])
            ax.minorticks_off()
        ax.set_xlabel("segments NS")
        ax.set_ylabel("phase 2 time (µs)")
        ax.set_title(("additive family" if not delta else "delta family") + ": the scan alone", fontsize=9)
        ax.grid(which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    plt.show()

# %%
runs = [r for r in probe if r.get("median_ms") and r.get("shape")
        and (r.get("key") == "scan" or str(r.get("key", "")).startswith(("engine_", "fla_")))]
if runs:
    by_shape = {}
    for r in runs:
        by_shape.setdefault((tuple(r["shape"]), r.get("recurrence")), []).append(r)
    out = []
    for (shape, rec), rs in sorted(by_shape.items(), key=lambda kv: (str(kv[0][1]), kv[0][0])):
        eng_ms = min((r["median_ms"] for r in rs if str(r["key"]).startswith("engine_")), default=None)
        for r in sorted(rs, key=lambda r: r["median_ms"]):
            label = r["key"] + (f" (NS = {r['ns']}, {r['scan']})" if r["key"] == "scan" and r.get("ns") else "")
            speed = f"{eng_ms / r['median_ms']:.2f}×" if eng_ms else ""
            out.append(f"| {figures.shape_str(shape)} | {rec} | {label} | {r['median_ms']:.4g} | {speed} |")
    display(Markdown("| shape | recurrence | implementation | median ms | speed-up over the engine |\n"
                     "|---|---|---|--:|--:|\n" + "\n".join(out)))

# %% [markdown]
# **The engines side by side** (`tools/r4_engine_probe.py`, run by `tools/h200.sh long_engines`): r4 with each
# engine at the two long-context shapes, at the cost model's segment count and at half and twice it, every run
# checked against the float64 oracle first, fla's chunk kernel in the same process. The hatched part of a bar is
# phases 1 and 2 alone (the probe's "state only" runs, `o=None`, at the model's count), so the rest of that bar is
# phase 3. `host ms` is the host's time to enqueue one forward (Numba's dispatch; the GPU times above exclude it).

# %%
def engine_probe():
    """(file name, records with a time) of the newest r4 engine probe (``*r4_engines*.json``, newest by its
    ``date``), or (None, [])."""
    docs = probe_docs("*r4_engines*.json")
    if not docs:
        return None, []
    _, name, recs = max(docs, key=lambda d: d[:2])
    return name, [r for r in recs if r.get("median_ms")]


eng_file, eng_recs = engine_probe()
if not eng_recs:
    print("No r4 engine probe (figures/data/**/*r4_engines*.json) yet: tools/h200.sh long_engines on a GPU writes it.")
else:
    groups = {}
    for r in eng_recs:
        sh = r["shape"]
        groups.setdefault((r["recurrence"], tuple(sh[k] for k in "BTHKV")), []).append(r)
    fig, axs = plt.subplots(1, len(groups), figsize=(5.2 * len(groups), 3.8), squeeze=False)
    table = []
    for ax, ((rec, shape), rs) in zip(axs[0], sorted(groups.items())):
        full = [r for r in rs if r.get("engine") and "state only" not in r["key"]]
        state = {r["engine"]: r["median_ms"] for r in rs if "state only" in r["key"]}
        engines_here = sorted({r["engine"] for r in full}, key=lambda e: r4.ENGINES.index(e))
        x = 0
        ticks = []
        for e in engines_here:
            mine_ = sorted((r for r in full if r["engine"] == e), key=lambda r: r["num_segments"])
            start = x
            for r in mine_:
                model = r["num_segments"] == r.get("model_num_segments", r["num_segments"])
                ax.bar(x, r["median_ms"], color="C0" if e == "tensor_cores" else "C1", alpha=1.0 if model else 0.55)
                if model and e in state:
                    ax.bar(x, state[e], fill=False, hatch="//", edgecolor="k", linewidth=0.5)
                ax.text(x, r["median_ms"], f"{r['median_ms']:.1f}\nNS {r['num_segments']}", ha="center",
                        va="bottom", fontsize=7)
                phases = f"{state[e]:.4g}" if model and e in state else ""
                host = f"{r['host_launch_us'] / 1e3:.2g}" if r.get("host_launch_us") else ""
                table.append(f"| {rec} | {figures.shape_str(shape)} | {e} | {r['num_segments']}"
                             f"{' (model)' if model else ''} | {r['median_ms']:.4g} | {phases} | {host} |")
                x += 1
            ticks.append(((start + x - 1) / 2, f"engine {e}"))
            x += 0.6
        for r in rs:
            if str(r["key"]).startswith("fla_"):
                ax.axhline(r["median_ms"], color="C3", ls="--", lw=1, label=f"{r['key']} {r['median_ms']:.1f} ms")
                ax.axhline(r["median_ms"] / 2, color="C3", ls=":", lw=1, label="2x faster than fla (issue 4)")
        ax.set_xticks([t for t, _ in ticks], [lbl for _, lbl in ticks], fontsize=8)
        ax.set_ylim(0, 1.4 * max(r["median_ms"] for r in rs))  # room for the legend above the bars
        ax.set_ylabel("median ms (GPU)")
        ax.set_title(f"r4 {rec}, {figures.shape_str(shape)}", fontsize=9)
        ax.legend(fontsize=7, loc="upper right")
        ax.grid(axis="y", alpha=0.3)
    fig.suptitle(f"{eng_file}: bars at the model's segment count are opaque; hatched: phases 1-2 alone", fontsize=9)
    fig.tight_layout()
    plt.show()
    display(Markdown("| recurrence | shape | engine | segments | median ms | phases 1-2 ms | host ms |\n"
                     "|---|---|---|--:|--:|--:|--:|\n" + "\n".join(table)))

# %% [markdown]
# The docstring's argument (next section: phases 1 and 3 each cost about what the engine costs at a shape that
# fills the GPU with as many token-heads) gives a napkin estimate of r4 over r3 from r3's bench records at the
# standard shape: that time, times the ratio of token-heads, times the work ratio of section 5. An estimate, to
# set beside the measured r3-engine bars above; the older probe's shapes and its best time are next to it.

# %%
shared_std = {r["recurrence"]: r["median_ms"] for r in (data.records if data else [])
              if r.get("key") == "shared" and figures.shape_tuple(r) == std and figures.timed(r)}
probe_engine = ", ".join(probed) if probe else "?"
est_rows = []
for (shape, rec), rs in (sorted(by_shape.items(), key=lambda kv: str(kv[0])) if runs else []):
    scans = [r["median_ms"] for r in rs if r["key"] == "scan"]
    if rec not in shared_std or not scans:
        continue
    delta = rec in ("delta", "gated_delta")
    Bs, Ts, Hs, Ks, Vs = shape
    ns, _ = r4.plan_segments(Ts, 64, r4.choose_num_segments(Bs, Ts, Hs, Ks, Vs, 64, delta, n_sm=SMS))
    engine = r3_flops(delta, True, Ks, Vs, 64)
    work = (r3_flops(delta, False, Ks, Vs + Ks if delta else Vs, 64) + engine
            + (tree_flops_per_token(Ts, Ks, Vs, ns) if delta else 0.0)) / engine
    token_heads = (Bs * Ts * Hs) / (std[0] * std[1] * std[2])
    best = min(rs, key=lambda r: r["median_ms"])
    est_rows.append(f"| {figures.shape_str(shape)} | {rec} | {shared_std[rec]:.3g} × {token_heads:g} × {work:.2f} = "
                    f"{shared_std[rec] * token_heads * work:.3g} | {min(scans):.4g} | {best['key']} "
                    f"{best['median_ms']:.4g} |")
if est_rows:
    display(Markdown("| shape | recurrence | r4 over r3, estimated ms (r3 at the standard shape × token-heads × work) "
                     "| "
                     f"r4 over {probe_engine}, measured ms (best) | fastest in the probe, ms |\n|---|---|--:|--:|---|\n"
                     + "\n".join(est_rows)))
else:
    print("No estimate: it needs bench records of rung 'shared' at the standard shape and the probe's shapes.")

# %% [markdown]
# ## 7. What limits r4, and what comes next
#
# The docstring's account of where the time goes:

# %%
show_doc(doc_between("Where the time goes:", "Numerics:"))

# %% [markdown]
# * r4 buys parallelism with **extra work** (section 5). When the engine alone fills the GPU (many heads, as at
#   the standard shape), none of that pays, and the cost model chooses one segment.
# * Phase 2 of the delta family is either a chain of `NS − 1` dependent `K × K` by `K × V` products in a few blocks
#   (latency-bound) or `⌈log₂ NS⌉` launches of batched matmuls (more FLOPs, parallel): the model's constants come
#   from the probe above and move with the GPU -- and with the engine: `ENGINE_BV` and `RESIDENT_*` describe r2's
#   state kernel, while r3's walkers are `BV_TABLE`-wide, 512-thread blocks, one per SM.
# * Everything inside a segment is the engine: r4 is as fast per token as the rung under it, and its default
#   engine is the fastest chunked rung, r6 `tensor_cores` (the bars above); for the additive family both phases
#   are r3's split schedule, one walk in all. What is left is the kernels': for decay, r3's split-schedule output
#   and state kernels at ~42 % of the fp32 FMA peak (four times their standard-shape time: fla's TF32 tensor-core
#   kernels are faster per token); for the gated delta rule, phase 1 (the WY intra kernel and the state pass on
#   `V + K` columns). **r5 `warp_roles`** shows one
#   way to attack such kernels: producer warps stream the next chunk into one half of a double buffer
#   (`cp.async`) while consumer warps compute on the other half.
#
# ## Exercises
#
# 1. Show that `(M, S) ∘ (M', S')` is associative, and that the identity is `(I, 0)`. Why does a prefix scan need
#    associativity but not commutativity? Check in NumPy that swapping two segments' maps gives a different state.
# 2. For the additive family `M = exp(Σ g)` is a scalar. Count phase 2's bytes for the tree and for the chain at
#    `B1 H2 K=V=128` and `NS = 64`, and compare with `_scan_cost_us`.
# 3. The delta family's phase 1 runs the engine on `V + K` columns: twice its state-pass work at `K = V`. The WY
#    form already holds each chunk's transition: from `reference.chunked`, `S_end = (γ_C I − Kᵀ diag(γ_C/γ) W) S +
#    Kᵀ diag(γ_C/γ) U`. How could a segment's `M` be built from its chunks' transitions instead, and what would
#    that cost per chunk compared with `K` extra value columns?
# 4. `choose_num_segments` aims for a fixed number of walkers per SM. Using the probe's measurements, find the
#    `NS` that would have been fastest for the long-sequence shapes, and compare with the model's choice.
# 5. **Re-tuning for r3.** `choose_num_segments` counts walkers with `ENGINE_BV` (r2's value tile). Rewrite it to
#    ask the engine for its value tile (`engine_walkers` above) and say how `RESIDENT_ADD` / `RESIDENT_DELTA`
#    should change for r3's state kernel (its threads per block, and its shared memory from `_state_layout`: how
#    many of its blocks fit on an SM?). Which records would `tools/r4_scan_probe.py` have to produce to fit them
#    again? At the standard shape, would the re-tuned model still choose one segment?
