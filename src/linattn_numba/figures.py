"""``linattn-numba figures``: the figures and the README's results table, drawn from the bench JSON only.

Every number in ``figures/*.png`` and in the README's results table comes from the ``*.json`` files that
``linattn-numba bench`` wrote into ``figures/data``; nothing is typed in by hand. This module:

1. reads every ``*.json`` in the data folder and merges their records. A record is identified by
   ``(key, recurrence, shape, dtype)``; when two files hold the same one, the newest file wins (the file's
   top-level ``date``, then its modification time, then its name);
2. draws, with matplotlib's object API (no pyplot, so it neither needs nor changes a display backend):

   * ``ladder.png``       -- every rung at the standard shape, one bar per rung per recurrence, fla as lines;
   * ``time_vs_T.png``    -- time against sequence length: the best rung, the best fla kernel, softmax SDPA;
   * ``roofline.png``     -- achieved TFLOP/s against arithmetic intensity, under the copy bandwidth and the
     fp32 FMA rate (a ``fp32_peak`` record when one was measured, else the 67 TFLOP/s datasheet figure);
   * ``long_context.png`` -- only when records with T >= 65536 exist;
   * ``decode_step.png``  -- the decode step's state bandwidth against the copy bandwidth and fla's step;

3. rewrites the README between ``<!-- results:start -->`` and ``<!-- results:end -->`` with a Markdown table
   of every record and one line per data file (device, versions, git sha, date), leaving the rest untouched.

The functions :func:`load`, :func:`results_markdown` and :func:`markdown_table` are also what the notebooks use
to show the measurements.
"""

from __future__ import annotations

import datetime
import glob
import json
import math
import os
from dataclasses import dataclass, field

from .reference import RECURRENCES

STANDARD = dict(B=4, T=8192, H=16, K=128, V=128)  # the shape the anchor figures are quoted at (bench.STANDARD)
LONG_T = 65536  # "long context": records at or beyond this many tokens get their own figure
DATASHEET_FP32_TFLOPS = 67.0  # H200 SXM fp32 (non-tensor) rate: used only when no "fp32_peak" record exists
TENSOR_CORE_RUNGS = ("scan", "tensor_cores")  # r6, and r4 (r6 its default engine and output kernel): products on the
# tensor cores, so the fp32 FMA rate is not their ceiling and the table gives them no share of it
MARK_START = "<!-- results:start -->"
MARK_END = "<!-- results:end -->"
FIGURES = ("ladder.png", "time_vs_T.png", "roofline.png", "long_context.png", "decode_step.png")
_SHAPE_KEYS = ("B", "T", "H", "K", "V")


class FiguresError(RuntimeError):
    """A problem with the inputs of ``linattn-numba figures`` (no data, README markers missing, ...)."""


# --------------------------------------------------------------------------------------------------------
# Loading and merging
# --------------------------------------------------------------------------------------------------------


@dataclass
class Data:
    """The merged contents of a data folder.

    ``records``: every surviving record (a copy, with ``_source`` = the file it came from), in file order.
    ``sources``: one dict per file, oldest first: ``path``, ``device``, ``versions``, ``git_sha``, ``date``.
    ``tune``: r1's launch sweeps: the sequence-kernel records (with ``cols``) of the newest file that has them, then
    the decode-step records (with ``sw``) of the newest file that has them (either may be empty).
    """

    records: list = field(default_factory=list)
    sources: list = field(default_factory=list)
    tune: list = field(default_factory=list)

    def source(self, rec) -> dict:
        return next(s for s in self.sources if s["path"] == rec["_source"])


def shape_tuple(rec):
    """``(B, T, H, K, V)`` of a record, or None for records without a shape (the copy ceiling)."""
    s = rec.get("shape")
    return None if not s else tuple(int(s[k]) for k in _SHAPE_KEYS)


def shape_str(shape) -> str:
    return "" if shape is None else "B{} T{} H{} K{} V{}".format(*shape)


def identity(rec):
    """What makes two records "the same measurement": key, recurrence, shape, dtype."""
    return rec.get("key"), rec.get("recurrence"), shape_tuple(rec), rec.get("dtype")


def timed(rec) -> bool:
    """True for a record that carries a time (failed or crashed implementations carry an ``error`` instead)."""
    return "error" not in rec and isinstance(rec.get("median_ms"), (int, float)) and math.isfinite(rec["median_ms"])


def _file_order(path, doc):
    date = doc.get("date")
    try:
        when = datetime.datetime.fromisoformat(str(date)).timestamp()
    except (TypeError, ValueError):
        when = os.path.getmtime(path)
    return when, os.path.basename(path)


def load(data_dir="figures/data") -> Data:
    """Read and merge every ``*.json`` in ``data_dir`` (newest file wins per :func:`identity`)."""
    paths = sorted(glob.glob(os.path.join(data_dir, "*.json")))
    if not paths:
        raise FiguresError(f"no *.json files in {data_dir!r}: run `linattn-numba bench --out {data_dir}/NAME.json` "
                           "on a GPU machine first")
    docs = []
    for p in paths:
        try:
            with open(p) as f:
                doc = json.load(f)
        except (OSError, ValueError) as e:
            raise FiguresError(f"cannot read {p}: {e}") from e
        if not isinstance(doc, dict) or not isinstance(doc.get("records"), list):
            raise FiguresError(f"{p} is not a bench result (no top-level 'records' list)")
        docs.append((_file_order(p, doc), p, doc))
    docs.sort(key=lambda d: d[0])
    merged = {}
    data = Data()
    tune = {"cols": [], "sw": []}
    for _, p, doc in docs:
        data.sources.append({"path": p, "device": doc.get("device", {}), "versions": doc.get("versions", {}),
                             "git_sha": doc.get("git_sha", "unknown"), "tree_sha": doc.get("tree_sha"),
                             "date": doc.get("date", "unknown")})
        for rec in doc["records"]:
            r = dict(rec)
            r["_source"] = p
            merged.pop(identity(r), None)  # re-insert: the newest record also takes the newest position
            merged[identity(r)] = r
        # a file may sweep only one of r1's kernels (bench --tune seq|step): keep each kernel's newest sweep
        for part in ("cols", "sw"):
            mine = [t for t in doc.get("tune") or [] if part in t]
            if mine:
                tune[part] = mine
    data.tune = tune["cols"] + tune["sw"]
    data.records = list(merged.values())
    used = {r["_source"] for r in data.records}
    data.sources = [s for s in data.sources if s["path"] in used]
    return data


def load_or_explain(data_dir) -> Data | None:
    """:func:`load` for the notebooks: the merged data of ``data_dir``, or None (``data_dir`` None, or a folder
    :func:`load` cannot read -- the reason is printed, so a notebook cell says what is missing and goes on)."""
    if not data_dir:
        return None
    try:
        return load(data_dir)
    except FiguresError as e:
        print(e)
        return None


def find_data_dir(start=None) -> str | None:
    """``figures/data`` of this checkout: searched from ``start`` (default: the working directory) upwards, then
    next to the package's source tree (an editable install). None when there is none."""
    here = os.path.abspath(start or os.getcwd())
    while True:
        cand = os.path.join(here, "figures", "data")
        if os.path.isdir(cand):
            return cand
        parent = os.path.dirname(here)
        if parent == here:
            break
        here = parent
    pkg_root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    cand = os.path.join(pkg_root, "figures", "data")
    return cand if os.path.isdir(cand) else None


# --------------------------------------------------------------------------------------------------------
# Ordering and the Markdown table
# --------------------------------------------------------------------------------------------------------


def _rung_order():
    from .rungs import RUNGS  # ladder order

    return list(RUNGS)


def _sort_key(rec, rung_order):
    shape = shape_tuple(rec)
    kind = rec.get("kind")
    if shape is None:  # ceilings first
        return (0, (), 0, 0, rec.get("key", ""))
    rec_name = rec.get("recurrence")
    ri = list(RECURRENCES).index(rec_name) if rec_name in RECURRENCES else len(RECURRENCES)
    key = rec.get("key", "")
    if kind == "rung":
        ki = (0, rung_order.index(key) if key in rung_order else len(rung_order), key)
    elif kind == "peer":
        ki = (1, 0, key)
    else:
        ki = (2, 0, key)
    decode = shape[1] == 1
    return (1 + decode, (shape[1], shape[0], shape[2], shape[3], shape[4]), str(rec.get("dtype")), ri, ki)


def ordered(records):
    """Records in table order: ceilings; then per shape (decode last), dtype, recurrence: rungs, then peers."""
    order = _rung_order()
    return sorted(records, key=lambda r: _sort_key(r, order))


def _num(x, kind):
    if not isinstance(x, (int, float)) or not math.isfinite(x):
        return ""
    if kind == "ms":
        return f"{x:.4g}"
    if kind == "tflops":
        return f"{x:.3g}"
    if kind == "gbps":
        return f"{x:.0f}" if x >= 100 else f"{x:.3g}"
    if kind == "err":
        return f"{x:.1e}"
    return str(x)


def _cell(s) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def markdown_table(records, peak=None) -> str:
    """A Markdown table of ``records`` (in the order given). Untimed records say why in the time column. ``peak``
    (fp32 TFLOP/s, :func:`ceilings`): adds each rung's effective TFLOP/s as a share of it (rungs on the FMA units
    only: the peers and :data:`TENSOR_CORE_RUNGS` run products on the tensor cores, where it is not the ceiling)."""
    pk = peak is not None and peak > 0
    cols = ["implementation", "kind", "recurrence", "shape", "dtype", "median ms", "TFLOP/s"]
    cols += ["of fp32 FMA"] * pk + ["GB/s", "rel err"]
    rows = ["| " + " | ".join(cols) + " |", "|" + "---|" * 5 + "--:|" * (len(cols) - 5)]
    for r in records:
        if timed(r):
            ms = _num(r["median_ms"], "ms")
        else:
            why = r.get("error", "no time recorded")
            ms = "not timed: " + (why if len(why) <= 90 else why[:87] + "...")
        err = r.get("rel_err")
        tf = r.get("tflops") if timed(r) else None
        cells = [r.get("key", "?"), r.get("kind", ""), r.get("recurrence", "") or "", shape_str(shape_tuple(r)),
                 r.get("dtype", "") or "", ms, _num(tf, "tflops") if timed(r) else ""]
        if pk:
            fma = r.get("kind") == "rung" and r.get("key") not in TENSOR_CORE_RUNGS
            share = tf / peak if fma and isinstance(tf, (int, float)) else None
            cells.append("" if share is None or not math.isfinite(share) else f"{100 * share:.0f} %")
        cells += [_num(r.get("gbps"), "gbps") if timed(r) else "", _num(err, "err")]
        rows.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(rows)


def source_line(src) -> str:
    """One line naming where and with what a data file was measured."""
    dev = src.get("device") or {}
    parts = [dev.get("name", "unknown device")]
    extra = []
    if dev.get("compute_capability"):
        extra.append("sm_" + "".join(str(c) for c in dev["compute_capability"]))
    if dev.get("multiprocessors"):
        extra.append(f"{dev['multiprocessors']} SMs")
    if dev.get("driver"):
        extra.append(f"driver {dev['driver']}")
    if extra:
        parts[0] += " (" + ", ".join(extra) + ")"
    vers = src.get("versions") or {}
    vtxt = ", ".join(f"{k} {v}" for k, v in vers.items())
    git = f"git {src.get('git_sha', 'unknown')}"
    if src.get("tree_sha"):  # the commit whose working tree ran, when the run's .git was an older snapshot
        git = f"tree {src['tree_sha']} ({git})"
    return f"`{os.path.basename(src['path'])}`: {parts[0]}; {vtxt}; {git}; {src.get('date', 'unknown')}"


def results_markdown(data: Data) -> str:
    """The README's results section: the table of every record, a note on the rates, and the provenance lines."""
    _, peak, peak_src = ceilings(data)
    if peak_src == "measured":
        peak_note = (f"*of fp32 FMA*: a rung's TFLOP/s over `fp32_peak`, the {peak:.1f} TFLOP/s that a kernel doing "
                     "nothing but fp32 multiply-adds sustains on the same GPU (`bench.bench_fp32_peak`)")
    else:
        peak_note = (f"*of fp32 FMA*: a rung's TFLOP/s over the {peak:.0f} TFLOP/s fp32 datasheet rate (no "
                     "`fp32_peak` record measured yet)")
    peak_note += ("; none for the peers and for " + ", ".join(f"`{r}`" for r in TENSOR_CORE_RUNGS)
                  + ", whose products run on the tensor cores.")
    lines = [
        "<!-- generated by `linattn-numba figures` from figures/data/*.json: do not edit by hand -->",
        "",
        markdown_table(ordered(data.records), peak),
        "",
        "TFLOP/s and GB/s are effective rates: the recurrence's counted FLOPs and the fewest bytes any "
        "implementation must move (inputs once, output once), divided by the median time; for the decode step, "
        "GB/s is the state read + written; for `copy`, bytes read + written; `torch_sdpa_causal` counts "
        "softmax attention's FLOPs. " + peak_note + " Rel err: max abs error / max abs value against the float64 "
        "oracle on two heads (for `fp32_peak`, against its closed form).",
        "",
    ]
    for src in data.sources:
        lines.append("- " + source_line(src))
    return "\n".join(lines)


def _readme_parts(text, path):
    s = text.find(MARK_START)
    e = text.find(MARK_END)
    if s < 0 or e < 0:
        missing = " and ".join(m for m, i in ((MARK_START, s), (MARK_END, e)) if i < 0)
        raise FiguresError(f"{path}: marker {missing} not found. Add the two lines {MARK_START} and {MARK_END} "
                           "where the results table belongs; `linattn-numba figures` rewrites what is between them")
    if e < s or text.find(MARK_START, s + 1) >= 0 or text.find(MARK_END, e + 1) >= 0:
        raise FiguresError(f"{path}: expected exactly one {MARK_START} followed by exactly one {MARK_END}")
    return text[: s + len(MARK_START)], text[e:]


def check_readme(path):
    """Raise :class:`FiguresError` unless ``path`` exists and holds the two markers (once each, in order)."""
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise FiguresError(f"cannot read the README {path!r}: {e}") from e
    _readme_parts(text, path)
    return text


def update_readme(path, data: Data) -> bool:
    """Replace what lies between the markers of ``path`` with :func:`results_markdown`. Returns True when the
    file changed. Everything outside the markers is kept byte for byte."""
    text = check_readme(path)
    head, tail = _readme_parts(text, path)
    new = head + "\n" + results_markdown(data) + "\n" + tail
    if new == text:
        return False
    with open(path, "w", encoding="utf-8") as f:
        f.write(new)
    return True


# --------------------------------------------------------------------------------------------------------
# Figures
# --------------------------------------------------------------------------------------------------------


def _figure(w, h):
    from matplotlib.figure import Figure

    return Figure(figsize=(w, h), dpi=110)


def _save(fig, path):
    fig.savefig(path)
    return path


class _Colors:
    """A stable colour per implementation key (the same key has the same colour in every figure)."""

    def __init__(self):
        from matplotlib import colormaps

        self._cmap = colormaps["tab10"]
        self._seen = {}

    def __call__(self, key):
        if key not in self._seen:
            self._seen[key] = self._cmap(len(self._seen) % 10)
        return self._seen[key]


def _device_name(data, recs):
    names = []
    for r in recs:
        n = (data.source(r).get("device") or {}).get("name")
        if n and n not in names:
            names.append(n)
    return " / ".join(names) if names else "unknown device"


def _peer_family(key):
    if key.startswith("fla_") and "fused_recurrent" in key:
        return "fla fused_recurrent_*"
    if key.startswith("fla_") and "chunk" in key:
        return "fla chunk_*"
    return key


_PEER_STYLE = {"fla fused_recurrent_*": dict(ls=":", marker="D"), "fla chunk_*": dict(ls="--", marker="v")}


def _untimed_note(recs, limit=4):
    bad = [r for r in recs if not timed(r)]
    if not bad:
        return ""
    parts = [f"{r.get('key')} ({r.get('recurrence')}): {r.get('error', 'no time')[:100]}" for r in bad[:limit]]
    more = f"; and {len(bad) - limit} more" if len(bad) > limit else ""
    return "not timed: " + "; ".join(parts) + more


def _pick_standard(data):
    """The records at the standard shape (float32 if any), or at the shape with the most records if none."""
    std = tuple(STANDARD[k] for k in _SHAPE_KEYS)
    seq = [r for r in data.records if shape_tuple(r) and shape_tuple(r)[1] > 1 and r.get("kind") in ("rung", "peer")
           and r.get("recurrence") in RECURRENCES]
    if not seq:
        return None, []
    shapes = [shape_tuple(r) for r in seq]
    shape = std if std in shapes else max(set(shapes), key=lambda s: (shapes.count(s), s))
    recs = [r for r in seq if shape_tuple(r) == shape]
    dtypes = {r.get("dtype") for r in recs}
    dtype = "float32" if "float32" in dtypes else sorted(dtypes, key=str)[0]
    return shape, [r for r in recs if r.get("dtype") == dtype]


def plot_ladder(data: Data, path, colors=None):
    """Bars: one per rung per recurrence at the standard shape (log ms). fla peers: a line across each group."""
    colors = colors or _Colors()
    shape, recs = _pick_standard(data)
    if not recs:
        return None, "skipped ladder.png: no rung or peer records of a sequence shape"
    recurrences = [x for x in RECURRENCES if any(r["recurrence"] == x for r in recs)]
    order = _rung_order()
    rung_keys = sorted({r["key"] for r in recs if r["kind"] == "rung"},
                       key=lambda k: (order.index(k) if k in order else len(order), k))
    fig = _figure(max(7.0, 1.6 * len(recurrences) + 0.6 * len(rung_keys)), 4.8)
    ax = fig.subplots()
    nb = max(len(rung_keys), 1)
    w = 0.8 / nb
    for i, key in enumerate(rung_keys):
        xs, ys = [], []
        for gi, rec in enumerate(recurrences):
            r = next((r for r in recs if r["key"] == key and r["recurrence"] == rec and timed(r)), None)
            if r is not None:
                xs.append(gi - 0.4 + w * (i + 0.5))
                ys.append(r["median_ms"])
        bars = ax.bar(xs, ys, w * 0.92, label=key, color=colors(key))
        for b, y in zip(bars, ys):
            ax.annotate(f"{y:.3g}", (b.get_x() + b.get_width() / 2, y), ha="center", va="bottom", fontsize=7,
                        xytext=(0, 1), textcoords="offset points")
    labelled = set()
    for gi, rec in enumerate(recurrences):
        for r in recs:
            if r["kind"] != "peer" or r["recurrence"] != rec or not timed(r):
                continue
            fam = _peer_family(r["key"])
            st = _PEER_STYLE.get(fam, dict(ls="-.", marker="o"))
            ax.plot([gi - 0.45, gi + 0.45], [r["median_ms"]] * 2, color="black", lw=1.2, ls=st["ls"],
                    label=None if fam in labelled else f"{fam} (peer)")
            ax.plot([gi + 0.45], [r["median_ms"]], color="black", marker=st["marker"], ms=4)
            labelled.add(fam)
    ax.set_xticks(range(len(recurrences)), recurrences)
    ax.set_yscale("log")
    ax.set_ylabel("median time per call (ms, log scale)")
    ax.set_title(f"The ladder at {shape_str(shape)}, {recs[0].get('dtype')} -- {_device_name(data, recs)}",
                 fontsize=10)
    ax.grid(axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside the axes: bars fill the inside
    note = _untimed_note(recs)
    if note:
        fig.text(0.01, 0.005, note, fontsize=6, va="bottom", wrap=True)
        fig.tight_layout(rect=(0, 0.06, 1, 1))
    else:
        fig.tight_layout()
    return _save(fig, path), None


def _group_for_T(recs):
    """The (B, H, K, V, dtype) group with the most distinct T (ties: the standard's B, H, K, V)."""
    groups = {}
    for r in recs:
        s = shape_tuple(r)
        groups.setdefault((s[0], s[2], s[3], s[4], r.get("dtype")), set()).add(s[1])
    std = (STANDARD["B"], STANDARD["H"], STANDARD["K"], STANDARD["V"], "float32")
    return max(groups, key=lambda g: (len(groups[g]), g == std, str(g)))


def sweep_recurrence(records) -> str:
    """The recurrence measured at the most sequence lengths within one (B, H, K, V, dtype) group (ties: gated_delta,
    then delta, decay, plain): what the time-vs-T figure draws by default."""
    def n_T(x):
        mine = [r for r in records if r.get("recurrence") == x and shape_tuple(r)]
        if not mine:
            return 0
        grp = _group_for_T(mine)
        return len({shape_tuple(r)[1] for r in mine
                    if (shape_tuple(r)[0], *shape_tuple(r)[2:], r.get("dtype")) == grp})

    return max(reversed(RECURRENCES), key=n_T)


def plot_time_vs_T(data: Data, path, colors=None, recurrence=None):
    """Log-log time against T: the best rung at each T, the best fla kernel, and causal softmax (torch SDPA)."""
    colors = colors or _Colors()
    seq = [r for r in data.records if timed(r) and shape_tuple(r) and shape_tuple(r)[1] > 1]
    lin = [r for r in seq if r.get("recurrence") in RECURRENCES and r.get("kind") in ("rung", "peer")]
    if not lin:
        return None, "skipped time_vs_T.png: no timed sequence records"
    soft = [r for r in seq if r.get("key") == "torch_sdpa_causal"]
    if recurrence is None:
        recurrence = sweep_recurrence(lin)
    lin = [r for r in lin if r["recurrence"] == recurrence]
    grp = _group_for_T(lin + soft)
    in_grp = lambda r: (shape_tuple(r)[0], *shape_tuple(r)[2:], r.get("dtype")) == grp  # noqa: E731
    lin, soft = [r for r in lin if in_grp(r)], [r for r in soft if in_grp(r)]

    def best(rs):
        by_t = {}
        for r in rs:
            t = shape_tuple(r)[1]
            if t not in by_t or r["median_ms"] < by_t[t]["median_ms"]:
                by_t[t] = r
        return [by_t[t] for t in sorted(by_t)]

    series = [("best rung", best([r for r in lin if r["kind"] == "rung"]), "o", "-"),
              ("best fla kernel", best([r for r in lin if r["kind"] == "peer" and r["key"].startswith("fla")]),
               "D", ":"),
              ("torch_sdpa_causal (softmax)", best(soft), "s", "--")]
    fig = _figure(7.0, 4.6)
    ax = fig.subplots()
    Ts = sorted({shape_tuple(r)[1] for r in lin + soft})
    for label, pts, mk, ls in series:
        if not pts:
            continue
        keys = list(dict.fromkeys(r["key"] for r in pts))
        name = f"{label}: {', '.join(keys)}" if label.startswith("best") else label
        x = [shape_tuple(r)[1] for r in pts]
        y = [r["median_ms"] for r in pts]
        ax.plot(x, y, ls=ls, marker=mk, color=colors(keys[0]), label=name)
        if len(keys) > 1:  # the best rung changes with T: name it at each point
            for xi, yi, r in zip(x, y, pts):
                ax.annotate(r["key"], (xi, yi), fontsize=7, xytext=(3, 3), textcoords="offset points")
    anchor = next((pts[0] for _, pts, _, _ in series if pts), None)
    if anchor is not None and len(Ts) > 1:
        t0, y0 = shape_tuple(anchor)[1], anchor["median_ms"]
        tt = [Ts[0], Ts[-1]]
        ax.plot(tt, [y0 * t / t0 for t in tt], color="grey", lw=0.8, ls="-.", label="∝ T (guide)")
        ax.plot(tt, [y0 * (t / t0) ** 2 for t in tt], color="grey", lw=0.8, ls=(0, (1, 3)), label="∝ T² (guide)")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("sequence length T (tokens)")
    ax.set_ylabel("median time per call (ms)")
    B, H, K, V, dt = grp
    title = f"Time vs T, {recurrence}, B{B} H{H} K{K} V{V} {dt} -- {_device_name(data, lin + soft)}"
    if len(Ts) == 1:
        title += f"\nonly T={Ts[0]} measured so far: run the bench with several --shape to draw the curve"
    ax.set_title(title, fontsize=9)
    ax.grid(which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, path), None


def ceilings(data: Data):
    """``(copy GB/s or None, fp32 TFLOP/s, label of the fp32 figure)`` from the data (fp32: measured or datasheet)."""
    copy = next((r for r in data.records if r.get("key") == "copy" and timed(r) and r.get("gbps")), None)
    peak = next((r for r in data.records if r.get("key") == "fp32_peak" and "error" not in r and r.get("tflops")), None)
    if peak is not None:
        return (copy or {}).get("gbps"), float(peak["tflops"]), "measured"
    return (copy or {}).get("gbps"), DATASHEET_FP32_TFLOPS, "datasheet"


_REC_MARKERS = {"plain": "o", "decay": "s", "delta": "^", "gated_delta": "D"}


def plot_roofline(data: Data, path, colors=None):
    """Achieved TFLOP/s against counted FLOPs / counted bytes, under the copy-bandwidth and fp32-FMA roofs."""
    colors = colors or _Colors()
    pts = [r for r in data.records if timed(r) and r.get("recurrence") in RECURRENCES and r.get("tflops")
           and r.get("counted_flops") and r.get("counted_bytes")]
    if not pts:
        return None, "skipped roofline.png: no timed records with counted_flops, counted_bytes and tflops"
    copy_gbps, peak, peak_src = ceilings(data)
    fig = _figure(7.2, 4.8)
    ax = fig.subplots()
    ai = [r["counted_flops"] / r["counted_bytes"] for r in pts]
    lo, hi = min(ai) / 8, max(ai) * 8
    if copy_gbps:
        ridge = peak * 1e3 / copy_gbps
        lo, hi = min(lo, ridge / 8), max(hi, ridge * 8)
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    if copy_gbps:
        ax.plot(xs, [min(peak, x * copy_gbps / 1e3) for x in xs], color="black", lw=1.5)
        ax.plot(xs, [x * copy_gbps / 1e3 for x in xs], color="black", lw=0.6, ls=":")
        ax.annotate(f"copy {copy_gbps:.0f} GB/s (measured)", (lo * 1.1, lo * 1.1 * copy_gbps / 1e3), fontsize=8,
                    xytext=(0, 12), textcoords="offset points")
        ax.axvline(ridge, color="grey", lw=0.6, ls="--")
        ax.annotate(f"ridge {ridge:.1f} FLOP/B", (ridge, peak), fontsize=7, xytext=(3, -12), textcoords="offset points")
    else:
        fig.text(0.01, 0.01, "no 'copy' record in the data: memory roof not drawn", fontsize=7)
    ax.axhline(peak, color="black", lw=0.6, ls=":")
    ax.annotate(f"fp32 FMA {peak:.0f} TFLOP/s ({peak_src})", (hi / 1.2, peak), ha="right", fontsize=8,
                xytext=(0, 4), textcoords="offset points")
    seen = set()
    for r, x in zip(pts, ai):
        key = r["key"]
        ax.scatter([x], [r["tflops"]], color=colors(key), marker=_REC_MARKERS.get(r["recurrence"], "o"), s=28,
                   edgecolors="black" if r.get("kind") == "peer" else "none", linewidths=0.6,
                   label=None if key in seen else f"{key} ({r['kind']})")
        seen.add(key)
    for rec, mk in _REC_MARKERS.items():  # marker legend for the recurrences
        if any(r["recurrence"] == rec for r in pts):
            ax.scatter([], [], color="grey", marker=mk, label=f"marker: {rec}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_xlabel("arithmetic intensity: counted FLOPs / counted bytes (FLOP/B)")
    ax.set_ylabel("achieved TFLOP/s (counted FLOPs / median time)")
    ax.set_title(f"Roofline -- {_device_name(data, pts)}", fontsize=10)
    ax.grid(which="both", alpha=0.25)
    ax.legend(fontsize=7, loc="lower left", ncol=1)
    fig.tight_layout()
    return _save(fig, path), None


def plot_long_context(data: Data, path, colors=None, recurrence=None):
    """Time and throughput against T for every implementation measured at T >= 65536 (and at shorter T of the
    same B, H, K, V, dtype): one row of two panels per recurrence that has long records (or only
    ``recurrence``), softmax SDPA beside each when it was measured on that group."""
    colors = colors or _Colors()
    longs = [r for r in data.records if timed(r) and shape_tuple(r) and shape_tuple(r)[1] >= LONG_T]
    if not longs:
        return None, (f"skipped long_context.png: no timed records with T >= {LONG_T} in the data "
                      f"(e.g. `linattn-numba bench --shape 1,131072,16,128,128`)")
    have = [x for x in RECURRENCES if any(r.get("recurrence") == x for r in longs)]
    recs = [recurrence] if recurrence is not None else (have or [None])
    group_of = lambda r: (shape_tuple(r)[0], *shape_tuple(r)[2:], r.get("dtype"))  # noqa: E731
    # one row per (recurrence, B H K V dtype group) that reaches T >= LONG_T: a T sweep and a single very long
    # shape of the same recurrence are different experiments, so they get separate rows
    rows = [(x, g) for x in recs
            for g in sorted({group_of(r) for r in longs if r.get("recurrence") == x}, key=str)]
    rows = rows or [(recs[0], _group_for_T(longs))]
    fig = _figure(10.0, 3.9 * len(rows) + 0.5)
    axes = fig.subplots(len(rows), 2, squeeze=False)
    devices = []
    for (ax1, ax2), (rec_name, grp) in zip(axes, rows):
        sel = [r for r in data.records if timed(r) and shape_tuple(r) and shape_tuple(r)[1] > 1
               and r.get("recurrence") in (rec_name, "softmax")
               and (shape_tuple(r)[0], *shape_tuple(r)[2:], r.get("dtype")) == grp]
        devices += sel
        series = {}
        for r in sel:
            series.setdefault((r["key"], r.get("recurrence")), []).append(r)
        for (key, rec), rs in sorted(series.items(), key=lambda kv: (str(kv[0][1]), kv[0][0])):
            rs.sort(key=lambda r: shape_tuple(r)[1])
            T = [shape_tuple(r)[1] for r in rs]
            ms = [r["median_ms"] for r in rs]
            B = shape_tuple(rs[0])[0]
            mk = _REC_MARKERS.get(rec, "s")
            ax1.plot(T, ms, marker=mk, color=colors(key), label=f"{key} ({rec})")
            ax2.plot(T, [B * t / m / 1e3 for t, m in zip(T, ms)], marker=mk, color=colors(key))
            for t, m in zip(T[-1:], ms[-1:]):  # the longest point's time, readable without the grid
                ax1.annotate(f"{m:.1f} ms", (t, m), fontsize=7, xytext=(3, 0), textcoords="offset points")
        B, H, K, V, dt = grp
        for ax in (ax1, ax2):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("sequence length T (tokens)")
            ax.grid(which="both", alpha=0.3)
        ax1.set_yscale("log")
        ax1.set_ylabel("median time per call (ms)")
        ax2.set_yscale("log")
        ax2.set_ylabel("throughput (million tokens / s, all B)")
        ax1.set_title(f"{rec_name}, B{B} H{H} K{K} V{V} {dt}", fontsize=9)
        ax2.set_title(f"{rec_name}: throughput", fontsize=9)
        ax1.legend(fontsize=7)
    fig.suptitle(f"Long context -- {_device_name(data, devices)}", fontsize=10)
    fig.tight_layout()
    return _save(fig, path), None


def plot_decode_step(data: Data, path, colors=None):
    """The decode step's state bandwidth (GB/s, state read + written) against the copy bandwidth and fla's step."""
    colors = colors or _Colors()
    steps = [r for r in data.records if shape_tuple(r) and shape_tuple(r)[1] == 1 and timed(r) and r.get("gbps")]
    if not steps:
        return None, "skipped decode_step.png: no timed decode-step records (run the bench with --step)"
    copy_gbps, _, _ = ceilings(data)
    steps = sorted(steps, key=lambda r: (r.get("kind") != "rung", str(r.get("recurrence")), r["key"]))
    fig = _figure(7.0, 4.2)
    ax = fig.subplots()
    labels = [f"{r['key']}\n{r.get('recurrence')} {shape_str(shape_tuple(r))}" for r in steps]
    vals = [r["gbps"] for r in steps]
    bars = ax.bar(range(len(steps)), vals, 0.6, color=[colors(r["key"]) for r in steps],
                  edgecolor=["black" if r.get("kind") == "peer" else "none" for r in steps])
    for b, r in zip(bars, steps):
        txt = f"{r['gbps']:.0f} GB/s\n{r['median_ms'] * 1e3:.0f} µs"
        if copy_gbps:
            txt += f"\n{100 * r['gbps'] / copy_gbps:.0f}% of copy"
        # inside the bar, under its top: the copy line sits just above the fastest bars
        ax.annotate(txt, (b.get_x() + b.get_width() / 2, r["gbps"]), ha="center", va="top", fontsize=7,
                    xytext=(0, -4), textcoords="offset points", color="white", fontweight="bold")
    top = max(vals)
    if copy_gbps:
        ax.axhline(copy_gbps, color="black", ls="--", lw=1)
        ax.text(0.99, copy_gbps, f"device copy {copy_gbps:.0f} GB/s (read + write, measured) ", fontsize=8,
                va="bottom", ha="right", transform=ax.get_yaxis_transform())
        top = max(top, copy_gbps)
    ax.set_ylim(0, top * 1.25)
    ax.set_xticks(range(len(steps)), labels, fontsize=7)
    ax.set_ylabel("state bandwidth (GB/s, state read + written)")
    ax.set_title(f"Decode step: one token, fp32 state in place -- {_device_name(data, steps)}", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    return _save(fig, path), None


_PLOTS = (("ladder.png", plot_ladder), ("time_vs_T.png", plot_time_vs_T), ("roofline.png", plot_roofline),
          ("long_context.png", plot_long_context), ("decode_step.png", plot_decode_step))


def make_figures(data_dir="figures/data", out_dir="figures", readme="README.md", log=print) -> dict:
    """Everything ``linattn-numba figures`` does. ``readme=None`` skips the README.

    Returns ``{"written": [paths], "skipped": {figure: reason}, "readme": path or None}``. Raises
    :class:`FiguresError` (before writing anything) when there is no data or the README lacks its markers.
    """
    data = load(data_dir)
    if readme is not None:
        check_readme(readme)  # fail before drawing anything
    os.makedirs(out_dir, exist_ok=True)
    colors = _Colors()
    out = {"written": [], "skipped": {}, "readme": None}
    for name, fn in _PLOTS:
        path, why = fn(data, os.path.join(out_dir, name), colors)
        if path:
            out["written"].append(path)
            log(f"wrote {path}")
        else:
            out["skipped"][name] = why
            log(why)
    if readme is not None:
        changed = update_readme(readme, data)
        out["readme"] = readme
        log(f"{'updated' if changed else 'unchanged'}: the results table in {readme}")
    log(f"from {len(data.records)} records in {len(data.sources)} file(s): "
        + ", ".join(os.path.basename(s["path"]) for s in data.sources))
    return out


def main(args) -> int:
    """The CLI entry point (``args``: data, out, readme, no_readme)."""
    import sys

    try:
        make_figures(args.data, args.out, None if args.no_readme else args.readme)
    except FiguresError as e:
        print(f"linattn-numba figures: {e}", file=sys.stderr)
        return 1
    return 0
