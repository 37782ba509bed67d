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
# # Profiling on the H200: how the numbers are measured, and what Nsight Compute says limits each rung
#
# **Learning goals.** After this notebook you can
#
# 1. say how `linattn-numba bench` turns kernel launches into a trustworthy time: verify first, then time
#    batches with CUDA events after an L2 flush, and report medians;
# 2. place every rung on the **roofline** and say what fraction of the copy bandwidth and of the fp32 FMA rate it
#    reaches;
# 3. run **Nsight Compute** (`ncu`) on the rungs, save its CSV, and read it with `linattn_numba.ncu`: time per
#    kernel, SM and memory throughput (speed of light), occupancy, registers, shared memory, stall reasons;
# 4. name, from those numbers, what limits each kernel: memory bandwidth, the issue rate, or latency.
#
# Nothing here needs a GPU: the notebook reads the measurements committed in `figures/data` (the bench JSON and
# `ncu` CSV files). Every number in the text below is computed from those files when the notebook runs.

# %%
# Setup. Nothing here launches a kernel, but reading the rungs' source imports Numba's CUDA module: choose the
# simulator first when there is no GPU, as every notebook does.
import linattn_numba.sim

linattn_numba.sim.use_if_no_gpu()

import glob  # noqa: E402
import inspect  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import tempfile  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from IPython.display import Code, Image, Markdown, display  # noqa: E402

from linattn_numba import bench, figures, ncu, reference, rungs  # noqa: E402

data_dir = figures.find_data_dir()
root = os.path.dirname(os.path.dirname(data_dir)) if data_dir else None
data = figures.load_or_explain(data_dir)
print("data folder:", data_dir)
if data is not None:
    for src in data.sources:
        display(Markdown("- " + figures.source_line(src)))

# %% [markdown]
# ## 1. How the bench measures
#
# `linattn-numba bench` (module `linattn_numba.bench`) does, for every shape, recurrence and implementation:
#
# 1. **one set of inputs** (`make_inputs`, seed 0), shared by every rung and peer;
# 2. **verify, then time**: one call, then the outputs of two whole heads -- the first and the last `(b, h)` --
#    are compared with the float64 oracle. A rung that fails is recorded with its error and *not timed*: a fast
#    wrong kernel never makes it into a figure;
# 3. **warm-up** (compilation, autotuning of peers), then an estimate of one call's time, from which the
#    **batch** size: enough back-to-back calls to last about 2 ms, so that event resolution and launch gaps vanish;
# 4. for each of up to 15 **samples**: an **L2 flush** (a kernel writes 256 MiB, several times the L2's size,
#    so every sample starts from DRAM as a real layer would), a **spin kernel** that holds the stream while
#    Python enqueues the batch (a Numba launch costs host time, `host_launch_us` in the records; without the
#    spin the events would time the host), then a CUDA **event** before and after the batch;
# 5. the **median** over samples (robust to the odd slow sample), with the 10th and 90th percentiles.
#
# The timer itself:

# %%
display(Code(inspect.getsource(bench.Timer.time), language="python"))
display(Code(inspect.getsource(bench.check_heads), language="python"))

# %% [markdown]
# How tight are the medians? The spread `(p90 − p10) / median` of every timed record in the data:

# %%
if data is not None:
    timed = [r for r in data.records if figures.timed(r) and r.get("p10_ms") and r.get("p90_ms")]
    spread = np.array([(r["p90_ms"] - r["p10_ms"]) / r["median_ms"] for r in timed])
    fig, ax = plt.subplots(figsize=(6, 2.8))
    ax.hist(100 * spread, bins=40)
    ax.set_xlabel("(p90 − p10) / median  (%)")
    ax.set_ylabel("records")
    ax.set_title(f"Run-to-run spread of {len(timed)} timed records", fontsize=9)
    plt.show()
    worst = max(timed, key=lambda r: (r["p90_ms"] - r["p10_ms"]) / r["median_ms"])
    host = [r["host_launch_us"] for r in timed if r.get("kind") == "rung" and r.get("host_launch_us")]
    display(Markdown(f"Median spread {100 * np.median(spread):.1f} %; the widest is `{worst['key']}` "
                     f"({worst.get('recurrence')}, {figures.shape_str(figures.shape_tuple(worst))}): "
                     f"{100 * (worst['p90_ms'] - worst['p10_ms']) / worst['median_ms']:.1f} %. "
                     "Differences between implementations smaller than the spread mean nothing. "
                     + (f"Host time to enqueue one rung call (Python + Numba dispatch): median "
                        f"{np.median(host):.0f} µs -- what the spin kernel hides." if host else "")))

# %% [markdown]
# ## 2. The roofline: how far each rung is from the hardware's limits
#
# Two roofs, both in the data: the **copy bandwidth** (`bench_copy`: a device-to-device copy of 1 GiB, bytes read
# plus written per second) and the **fp32 FMA rate** (a measured `fp32_peak` record when there is one, else the
# datasheet figure). Each record carries the *counted* FLOPs of the recurrence (the same count for every
# implementation: `bench.counted_flops`) and the *counted* bytes -- the fewest any implementation must move,
# inputs once and output once (`bench.counted_bytes`). So the rates are "effective": what the rung achieves on the
# problem, not what its own scratch traffic costs.

# %%
std = tuple(figures.STANDARD[k] for k in "BTHKV")
if data is not None:
    copy_gbps, peak, peak_src = figures.ceilings(data)
    tmp = tempfile.mkdtemp()
    path, why = figures.plot_roofline(data, os.path.join(tmp, "roofline.png"))
    display(Image(path)) if path else print(why)
    recs = [r for r in figures.ordered(data.records) if r.get("kind") in ("rung", "peer") and figures.timed(r)
            and figures.shape_tuple(r) == std and r.get("recurrence") in reference.RECURRENCES]
    rows = []
    for r in recs:
        t_mem = r["counted_bytes"] / (copy_gbps * 1e6) if copy_gbps else float("nan")  # ms at the copy bandwidth
        t_fma = r["counted_flops"] / (peak * 1e9)  # ms at the FMA rate
        floor = max(t_mem, t_fma)
        rows.append((r, t_mem, t_fma, floor))
    table = ["| implementation | recurrence | median ms | % of copy BW | % of fp32 FMA | floor ms (bound) | "
             "× the floor |", "|---|---|--:|--:|--:|--:|--:|"]
    for r, t_mem, t_fma, floor in rows:
        table.append(f"| {r['key']} | {r['recurrence']} | {r['median_ms']:.4g} | "
                     f"{100 * t_mem / r['median_ms']:.2g} | {100 * t_fma / r['median_ms']:.2g} | "
                     f"{floor:.3g} ({'memory' if t_mem >= t_fma else 'FMA'}) | {r['median_ms'] / floor:.3g} |")
    display(Markdown(f"At {figures.shape_str(std)}, float32; copy {copy_gbps:.0f} GB/s, fp32 {peak:.0f} TFLOP/s "
                     f"({peak_src}):\n\n" + "\n".join(table)))

# %%
if data is not None and rows:
    bound = {("memory" if t_mem >= t_fma else "FMA") for _, t_mem, t_fma, _ in rows}
    display(Markdown(f"At this shape the counted work is **{' and '.join(sorted(bound))}**-bound (the floor column): "
                     "a recurrence does `O(K V)` FLOPs per token on `O(K + V)` bytes, so the FMA floor grows with "
                     "the head size faster than the memory floor. How far each rung is from its floor:"))
    keys = list(dict.fromkeys(r["key"] for r, *_ in rows if r["kind"] == "rung"))
    fig, ax = plt.subplots(figsize=(7.5, 3.2))
    w = 0.8 / max(len(keys), 1)
    for i, key in enumerate(keys):
        xs, ys = [], []
        for j, rec in enumerate(reference.RECURRENCES):
            hit = [(r, fl) for r, _, _, fl in rows if r["key"] == key and r["recurrence"] == rec]
            if hit:
                xs.append(j - 0.4 + (i + 0.5) * w)
                ys.append(100 * hit[0][1] / hit[0][0]["median_ms"])
        ax.bar(xs, ys, w * 0.9, label=key)
    for r, _, _, fl in rows:
        if r["kind"] == "peer":
            j = list(reference.RECURRENCES).index(r["recurrence"])
            ax.plot([j - 0.45, j + 0.45], [100 * fl / r["median_ms"]] * 2, color="black", lw=1,
                    ls="--" if "chunk" in r["key"] else ":")
    ax.set_yscale("log")
    ax.set_xticks(range(4), reference.RECURRENCES)
    ax.set_ylabel("% of the roofline floor")
    ax.set_title("Fraction of the floor each rung reaches (lines: fla peers; -- chunk, : fused recurrent)",
                 fontsize=9)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    ax.grid(axis="y", which="both", alpha=0.3)
    fig.tight_layout()
    plt.show()

# %% [markdown]
# ## 3. Running Nsight Compute
#
# Timings say *how long*; a profiler says *why*. `tools/ncu_rungs.py` launches every rung once per recurrence at
# the standard shape between `cuda.profile_start()` and `cuda.profile_stop()` (after compiling every variant on a
# tiny shape, so compilation stays out of the profile). On a GPU machine, from the repository root:
#
# ```bash
# ncu --clock-control none --profile-from-start off --csv --page details \
#     --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
#     --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio \
#     python3 tools/ncu_rungs.py --rungs recurrent,chunked --recurrences decay,gated_delta \
#     > figures/data/h200_ncu.csv
# python -m linattn_numba.ncu figures/data/h200_ncu.csv        # the table below, in a terminal
# ```
#
# * `--clock-control none` keeps the GPU's normal clocks (ncu would otherwise lock them to base clock, and the
#   durations would not compare with the bench);
# * `--profile-from-start off` profiles only what runs between `profile_start` and `profile_stop`;
# * the sections: **SpeedOfLight** (SM and memory throughput as % of peak, duration), **Occupancy** (theoretical
#   and achieved warps per SM), **LaunchStats** (grid, block, registers, shared memory), **WarpStateStats**
#   (cycles between two instructions of a warp); the `--metrics` regex adds the **stall breakdown**: per issued
#   instruction, how many warps were waiting and on what (`long_scoreboard`: a global / local memory load;
#   `barrier`: `syncthreads`; `math_pipe_throttle`: the FMA pipe is busy; `short_scoreboard`: shared memory,
#   `wait`: a fixed-latency dependency; ...);
# * ncu replays each kernel several times to collect all metrics (restoring memory in between) and flushes the
#   caches before each replay: its durations are of cold-cache, serialised kernels;
# * correctness tools run the same way: `compute-sanitizer --tool memcheck|racecheck|synccheck python3
#   tools/sanitize.py --rungs chunked` (out-of-bounds accesses, shared-memory races, barrier misuse).
#
# The committed files (`figures/data/*sanitize*.txt`, `figures/data/*ncu*.csv`) and what each holds:

# %%
for path in sorted(glob.glob(os.path.join(data_dir or ".", "*sanitize*.txt"))):  # compute-sanitizer runs
    # per tool: the rung/recurrence cases that ran and matched the oracle, the errors the tool reported, and how
    # it ended (a SUMMARY line when it finished; "exit status 124" when the run hit its time limit)
    tools = {}
    tool = None
    with open(path) as f:
        for ln in f:
            if ln.startswith("== "):  # "== memcheck": the tool of the lines that follow
                tool = ln[3:].strip()
                tools[tool] = {"ok": [], "errors": 0, "end": "?"}
            elif tool is None:
                continue
            elif ln.rstrip().endswith(" ok") or ln.rstrip().endswith("WRONG"):
                tools[tool]["ok"].append(" ".join(ln.split()[:2]) + ("" if ln.rstrip().endswith(" ok") else " WRONG"))
            elif "Error:" in ln:
                tools[tool]["errors"] += 1
            elif "SUMMARY" in ln or ln.startswith("exit status") or ln.startswith("rc="):
                tools[tool]["end"] = ln.strip().lstrip("= ")
    print(f"{os.path.basename(path)}:")
    for name, t in tools.items():
        print(f"  {name}: {len(t['ok'])} cases checked ({', '.join(t['ok'])}); {t['errors']} errors reported; "
              f"{t['end']}")

reports = ncu.load_dir(data_dir) if data_dir else []
if not reports:
    print("No ncu CSV in figures/data yet: run the command above on a GPU machine.")
for path, rep in reports:
    print(f"{os.path.basename(path)}: {len(rep)} profiled launches; ncu said: "
          + " | ".join(ln for ln in rep.preamble if ln.startswith("==")))

# %% [markdown]
# ## 4. Per kernel: what ncu measured
#
# One row per profiled launch (`#` is ncu's launch ID). `SM %` and `mem %` are the speed-of-light throughputs
# (the busiest SM pipe and the busiest memory unit, as % of their peak), `DRAM %` the DRAM bandwidth alone,
# `occ %` the achieved occupancy (active warps over the SM's maximum of 64), `cyc/issue` the average cycles
# between two instructions of one warp.

# %%
MOD2RUNG = {m: r for r, m in rungs._MODULES.items()}
# ncu's default kernel names (`_scores_kernel::scores`) do not say which rung module a kernel factory lives in:
# look the names up in the rungs' source, in ladder order (linattn_numba.ncu.kernel_index / assign_modules).
INDEX = ncu.kernel_index([rungs.module(r) for r in rungs.RUNGS])


def ncu_recurrences():
    """The recurrences tools/ncu_rungs.py profiles by default (read from its argument parser's default)."""
    try:
        with open(os.path.join(root, "tools", "ncu_rungs.py")) as f:
            m = re.search(r'"--recurrences",\s*default="([^"]+)"', f.read())
        return m.group(1).split(",") if m else None
    except (OSError, TypeError):
        return None


def label_calls(rep):
    """[(rung, recurrence, [Kernel])]: the launches grouped into the forward() calls that made them.

    A pipeline names its recurrence by its kernels (r2: ``gates`` only with g, ``wu`` only for the delta rule);
    single-kernel rungs are matched by position: tools/ncu_rungs.py launches every rung with the same recurrences
    in the same order."""
    groups = ncu.launch_groups(rep.kernels)
    by_mod = {}
    for mod, ks in groups:
        by_mod.setdefault(mod, []).append(ks)
    order = None
    for mod, calls in by_mod.items():
        names = [{k.kernel for k in ks} for ks in calls]
        if all({"scores", "state", "output"} <= n for n in names):  # r2's pipeline: recurrence from its kernels
            order = [reference.RECURRENCES[("gates" in n) + 2 * ("wu" in n)] for n in names]
    order = order or ncu_recurrences()
    out = []
    for mod, ks in groups:
        i = sum(1 for m, _, _ in out if m == mod)
        n_calls = len(by_mod[mod])
        rec = order[i] if order and n_calls == len(order) else f"call {i + 1}"
        out.append((mod, rec, ks))
    return [(MOD2RUNG.get(m, m), rec, ks) for m, rec, ks in out]


calls = []
for path, rep in reports:
    ncu.assign_modules(rep.kernels, INDEX)
    display(Markdown(f"**`{os.path.basename(path)}`**\n\n" + ncu.table(rep.kernels, markdown=True)))
    calls += label_calls(rep)

# %% [markdown]
# Grouped into the calls that launched them, next to the bench's median for the same rung and recurrence (ncu's
# kernels run serialised with cold caches and without launch gaps, so the two need not agree exactly):

# %%
def bench_ms(rung, rec):
    if data is None:
        return None
    r = next((r for r in data.records if r.get("key") == rung and r.get("recurrence") == rec
              and figures.shape_tuple(r) == std and r.get("dtype") == "float32" and figures.timed(r)), None)
    return None if r is None else r["median_ms"]


if calls:
    lines = ["| rung | recurrence | kernels (ncu µs each) | ncu total ms | bench median ms |", "|---|---|---|--:|--:|"]
    for rung, rec, ks in calls:
        tot = sum(k.duration_us or 0 for k in ks) / 1e3
        bm = bench_ms(rung, rec)
        lines.append(f"| {rung} | {rec} | " + ", ".join(f"{k.kernel} {k.duration_us:,.0f}" for k in ks)
                     + f" | {tot:.3g} | {'' if bm is None else f'{bm:.3g}'} |")
    display(Markdown("\n".join(lines)))

    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.45 * len(calls)))
    colors = {}
    cmap = plt.get_cmap("tab10")
    for y, (rung, rec, ks) in enumerate(calls):
        left = 0.0
        for k in ks:
            c = colors.setdefault(k.kernel, cmap(len(colors) % 10))
            d = (k.duration_us or 0) / 1e3
            ax.barh(y, d, left=left, color=c, edgecolor="white",
                    label=k.kernel if k.kernel not in ax.get_legend_handles_labels()[1] else None)
            left += d
        bm = bench_ms(rung, rec)
        if bm is not None:
            ax.plot([bm], [y], "k|", ms=14, mew=2)
    ax.set_yticks(range(len(calls)), [f"{r} · {rec}" for r, rec, _ in calls])
    ax.invert_yaxis()
    ax.set_xlabel("ms (bars: ncu kernel durations, stacked; |: bench median)")
    ax.set_title(f"Where the time goes, {figures.shape_str(std)}", fontsize=9)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    plt.show()

# %% [markdown]
# ## 5. Speed of light: which roof each kernel is under
#
# Each kernel as a point: SM throughput against memory throughput, both as % of peak. A kernel near the right
# edge is **memory-bound**, near the top **compute/issue-bound** (its busiest SM pipe is saturated); a kernel far
# from both edges is **latency-bound**: too few warps, or each waiting too long, to keep any unit busy. The
# marker size is the kernel's share of its call's time.

# %%
if calls:
    fig, ax = plt.subplots(figsize=(6.5, 5))
    rung_colors = {}
    for rung, rec, ks in calls:
        tot = sum(k.duration_us or 0 for k in ks) or 1.0
        c = rung_colors.setdefault(rung, plt.get_cmap("tab10")(len(rung_colors)))
        for k in ks:
            if k.sm_throughput_pct is None or k.memory_throughput_pct is None:
                continue
            ax.scatter(k.memory_throughput_pct, k.sm_throughput_pct, s=20 + 400 * (k.duration_us or 0) / tot,
                       color=c, alpha=0.6, edgecolors="black", linewidths=0.5,
                       marker="o" if "delta" in str(rec) else "s")
            ax.annotate(f"{k.kernel} ({rec})", (k.memory_throughput_pct, k.sm_throughput_pct), fontsize=6,
                        xytext=(4, 2), textcoords="offset points")
    for rung, c in rung_colors.items():
        ax.scatter([], [], color=c, label=rung)
    ax.plot([0, 100], [0, 100], color="grey", lw=0.5, ls=":")
    ax.axvspan(60, 100, color="tab:blue", alpha=0.05)
    ax.axhspan(60, 100, color="tab:red", alpha=0.05)
    ax.set_xlim(0, 100)
    ax.set_ylim(0, 100)
    ax.set_xlabel("memory throughput (% of peak)")
    ax.set_ylabel("SM throughput (% of peak)")
    ax.set_title("Speed of light per kernel (circles: delta rule; squares: additive)", fontsize=9)
    ax.legend(fontsize=8, loc="upper left")
    plt.show()

# %% [markdown]
# And the warp-stall breakdown, where the CSV has one (the `--metrics` line of the command above):

# %%
with_stalls = [(rung, rec, k) for rung, rec, ks in calls for k in ks if k.stalls]
if not with_stalls:
    print("The committed ncu CSV has no stall breakdown (it was collected without the --metrics line above); "
          "the section reports only the average cycles per issued instruction (cyc/issue in the table).")
else:
    reasons = sorted({r for *_, k in with_stalls for r in k.stalls},
                     key=lambda r: -sum(k.stall_shares().get(r, 0) for *_, k in with_stalls))[:8]
    fig, ax = plt.subplots(figsize=(8, 0.6 + 0.35 * len(with_stalls)))
    for y, (rung, rec, k) in enumerate(with_stalls):
        left = 0.0
        sh = k.stall_shares()
        for i, r in enumerate(reasons + ["other"]):
            v = sh.get(r, 0) if r != "other" else 1 - sum(sh.get(x, 0) for x in reasons)
            ax.barh(y, 100 * v, left=left, color=plt.get_cmap("tab10")(i), label=r if y == 0 else None)
            left += 100 * v
    ax.set_yticks(range(len(with_stalls)), [f"{r} · {rec} · {k.kernel}" for r, rec, k in with_stalls], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("% of stalled warp-cycles")
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    plt.show()

# %% [markdown]
# ## 6. Reading: what limits each kernel
#
# The rule of thumb used below: a unit above 60 % of its peak is "the roof"; if neither SM nor memory is, the
# kernel is latency-bound, and occupancy and cycles per issue say why. Generated from the CSV:

# %%
def verdict(k):
    sm, mem = k.sm_throughput_pct or 0, k.memory_throughput_pct or 0
    occ, cpi = k.achieved_occupancy_pct, k.cycles_per_issue
    occ_txt = "" if occ is None else f", {occ:.0f} % occupancy"
    if mem >= 60 and mem >= sm:
        units = {"L1/shared": k.value("L1/TEX Cache Throughput"), "L2": k.value("L2 Cache Throughput"),
                 "DRAM": k.dram_throughput_pct}
        unit = max((u for u in units if units[u] is not None), key=lambda u: units[u], default="memory")
        kind = f"**memory-bound on {unit}** (memory {mem:.0f} %, DRAM {k.dram_throughput_pct or 0:.0f} %)"
    elif sm >= 60:
        kind = f"**issue/compute-bound** (SM {sm:.0f} %, memory {mem:.0f} %)"
    else:
        kind = f"**latency-bound** (SM {sm:.0f} %, memory {mem:.0f} %{occ_txt}"
        kind += "" if cpi is None else f", {cpi:.1f} cycles per issued instruction"
        kind += ")"
    regs = "" if k.registers_per_thread is None else f"; {k.registers_per_thread} registers/thread"
    top = k.top_stalls(2)
    st = "" if not top else "; stalls: " + ", ".join(f"{r} {100 * s:.0f} %" for r, s in top)
    return kind + regs + st


if calls:
    out = []
    for rung, rec, ks in calls:
        tot = sum(k.duration_us or 0 for k in ks) or 1.0
        main = max(ks, key=lambda k: k.duration_us or 0)
        out.append(f"- **{rung} · {rec}**: " + "; ".join(
            f"`{k.kernel}` {100 * (k.duration_us or 0) / tot:.0f} % of the time, {verdict(k)}" for k in ks)
            + (f". Largest: `{main.kernel}`." if len(ks) > 1 else "."))
    display(Markdown("\n".join(out)))

# %% [markdown]
# What that means, rung by rung: the mechanisms, with the numbers filled in from the same CSV.

# %%
def pct(v, fmt=".0f"):
    return "?" if v is None else format(v, fmt)


def first(rung, kernel=None):
    """The first profiled launch of ``rung`` (and of ``kernel`` in it), or None."""
    return next((k for r, _, ks in calls if r == rung for k in ks if kernel in (None, k.kernel)), None)


def share(rung, kernel):
    """Share of ``kernel`` in the calls of ``rung``, summed over the profiled calls."""
    ks = [k for r, _, kk in calls if r == rung for k in kk]
    tot = sum(k.duration_us or 0 for k in ks)
    return sum(k.duration_us or 0 for k in ks if k.kernel == kernel) / tot if tot else 0.0


text = []
k1 = first("recurrent")
if k1 is not None:
    text.append(
        f"* **r1 `recurrent`** is one kernel: per column group, a chain of `T` dependent token steps. Its registers "
        f"({k1.registers_per_thread or '?'} per thread: the state lives there) and its shared staging tile "
        f"({pct(k1.shared_per_block_bytes, ',.0f')} B per block) cap an SM at {pct(k1.theoretical_occupancy_pct)} % "
        f"theoretical occupancy ({pct(k1.achieved_occupancy_pct)} % achieved). The busiest SM pipe runs at "
        f"{pct(k1.sm_throughput_pct)} % of its peak, DRAM at {pct(k1.dram_throughput_pct)} %: the rung is bound by "
        "its instruction stream -- FMAs, shuffles and shared loads, each step waiting on the one before -- not by "
        "memory. Fewer instructions per FLOP and more independent work per SM are the way out.")
k2 = first("chunked", "state")
if k2 is not None:
    names = sorted({k.kernel for r, _, ks in calls if r == "chunked" for k in ks}, key=lambda n: -share("chunked", n))
    text.append(
        "* **r2 `chunked`** spreads its time over its kernels (shares of r2's profiled time: "
        + ", ".join(f"`{n}` {100 * share('chunked', n):.0f} %" for n in names) + ")"
        + ". The parallel kernels are busy issuing scalar work -- one FMA per shared or cached load, scalar "
        f"loops over a chunk -- while the sequential `state` kernel has only {k2.grid[0] * k2.grid[1]} blocks "
        f"for the whole GPU ({pct(k2.achieved_occupancy_pct)} % occupancy) and walks the chunks one after the "
        "other; `wu` walks a chunk's rows one after the other too.")
if text:
    text.append("* **r3 `shared`** and later rungs attack exactly those: register-blocked tiles (several FMAs per "
                "shared load), fused kernels (no scratch round trips), and more parallel work in the sequential "
                "pass. Their own profiles appear above once their CSV is in `figures/data`.")
    display(Markdown("\n".join(text)))

# %%
r2_kernels = [k for rung, _, ks in calls if rung == "chunked" for k in ks]
if r2_kernels:
    busiest = max(r2_kernels, key=lambda k: k.dram_throughput_pct or 0)
    total = sum(k.duration_us or 0 for k in r2_kernels)
    weighted = sum((k.dram_throughput_pct or 0) * (k.duration_us or 0) for k in r2_kernels) / total
    display(Markdown(f"r2 moves several times the bytes of r1 (`r2_budget` in its notebook), yet its busiest kernel "
                     f"on DRAM, `{busiest.kernel}`, reaches {busiest.dram_throughput_pct:.0f} % of peak and, weighted "
                     f"by time, r2's kernels use {weighted:.0f} % of DRAM's bandwidth. "
                     + ("Its scratch traffic is not what makes it slow: its instruction count and its serial parts "
                        "are." if weighted < 50 else "Its scratch traffic is a real cost.")))

# %% [markdown]
# ## Exercises
#
# 1. From the table in section 4, compute each kernel's achieved DRAM bandwidth in GB/s (DRAM % × the copy
#    bandwidth from section 2 is a fair stand-in for the peak) and compare it with `r2_budget` in
#    `notebooks/r2_chunked.py`: which kernels re-read data from DRAM that the budget assumed would hit the caches?
# 2. r1's theoretical occupancy follows from its registers and shared memory per block. Recompute it by hand
#    (65,536 registers and 228 KB of shared memory per SM, at most 64 warps and 32 blocks) and check it against
#    the CSV's `Theoretical Occupancy` (`k.get("Theoretical Occupancy")`).
# 3. Add the stall breakdown to a profile (the `--metrics` line in section 3) for r2's state kernel. Which stall
#    dominates for the additive recurrences, and which for the delta rule? Relate them to the kernel's
#    `syncthreads` and atomics.
# 4. The bench flushes L2 before every batch. Predict which rungs would look faster without the flush, and by
#    roughly how much, from their counted bytes and the size of the inputs at the standard shape.
