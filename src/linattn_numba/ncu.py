"""Read Nsight Compute's CSV output: one record per profiled kernel launch, and a small table printer.

Input: what ``ncu --csv --page details ...`` prints (``tools/ncu_rungs.py`` shows the command the project uses).
Every row is one metric of one launch::

    "ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",
    "Device","CC","Section Name","Metric Name","Metric Unit","Metric Value"[,"Rule Name",...]

* the header may be preceded by anything (``==PROF==`` lines, the profiled program's own output): lines before
  it are kept in :attr:`Report.preamble` and otherwise ignored;
* values are text: ``"1,234.56"`` (thousands separators), ``"n/a"``; units vary between ncu versions
  (``usecond`` / ``us``, ``Kbyte`` / ``KB``), so times are converted to microseconds and sizes to bytes here;
* newer versions add rule columns (``Rule Name``, ``Estimated Speedup``, ...): extra columns are ignored.

Output: :func:`parse` returns a :class:`Report`, a list of :class:`Kernel` records in launch order (ncu's ID),
each with the values the course reads -- duration, SM and memory throughput (% of peak), DRAM throughput,
achieved and theoretical occupancy, registers per thread, shared memory per block, warp cycles per issued
instruction and, where present, the warp-stall breakdown -- plus every metric as parsed (``Kernel.metrics``).

Stall breakdowns come in three spellings depending on how ncu was asked: ``Stall Long Scoreboard``-style rows of
the WarpStateStats section body (``--print-details all``), the raw ``smsp__average_warp_latency_issue_stalled_*``
/ ``smsp__average_warps_issue_stalled_*_per_issue_active`` metrics (cycles per issued instruction), or the
sampled ``smsp__pcsamp_warps_issue_stalled_*`` counters. All three map to ``Kernel.stalls``: reason -> value, with
``Kernel.stall_unit`` saying which kind it is (fractions of the total are comparable across kinds:
:meth:`Kernel.stall_shares`).

Kernel names: by default ncu prints a kernel's enclosing scope and name, so a Numba kernel made by a factory
function appears as ``_scores_kernel::scores[v4,cw51...](Array<float, 4, C, mutable, aligned>, ...)`` and a
module-level one as ``r1_recurrent::recurrent_kernel[...](...)``; the module of a factory-made kernel is not in
the name. ``ncu --print-kernel-base demangled`` prints the whole symbol,
``linattn_numba::rungs::r2_chunked::_scores_kernel::_3clocals_3e::scores[abi:v1]...(...)`` (``_3c``/``_3e``
escape ``<``/``>``), and ``mangled`` its Itanium form ``_ZN13linattn_numba5rungs10r2_chunked14_scores_kernel...``.
:func:`split_name` takes any of them apart; :func:`assign_modules` finds the module of the short form in the
modules' source (:func:`kernel_index`).
"""

from __future__ import annotations

import csv
import io
import math
import os
import re
import statistics
from dataclasses import dataclass, field

HEADER_START = '"ID","Process ID"'
REQUIRED = ("ID", "Kernel Name", "Section Name", "Metric Name", "Metric Unit", "Metric Value")

_TIME_US = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3, "s": 1e6,
            "second": 1e6}
_BYTES = {"byte": 1, "b": 1, "kbyte": 1e3, "kb": 1e3, "mbyte": 1e6, "mb": 1e6, "gbyte": 1e9, "gb": 1e9,
          "kib": 1024, "mib": 2**20, "gib": 2**30}


class NcuError(ValueError):
    """The text is not Nsight Compute CSV of the ``--page details`` kind (no header with the needed columns)."""


# --------------------------------------------------------------------------------------------------------
# values, units, names
# --------------------------------------------------------------------------------------------------------


def number(text):
    """``"1,234.5"`` -> 1234.5; ``"n/a"``, ``""`` and other non-numbers -> None."""
    if text is None:
        return None
    s = str(text).strip().replace(",", "")
    if not s:
        return None
    try:
        x = float(s)
    except ValueError:
        return None
    return x if math.isfinite(x) else None


def to_us(value, unit):
    """A duration in ``unit`` (ns / us / ms / s in either spelling) in microseconds; None if unknown."""
    f = _TIME_US.get((unit or "").strip().lower())
    return None if value is None or f is None else value * f


def to_bytes(value, unit):
    """A size in ``unit`` (``byte``, ``Kbyte``, ``KB``, ``KiB``..., optionally ``/block``) in bytes; None if unknown."""
    u = (unit or "").strip().lower().split("/")[0]
    f = _BYTES.get(u)
    return None if value is None or f is None else value * f


def dims(text):
    """``"(256, 1, 1)"`` -> (256, 1, 1); None when it is not a parenthesised list of integers."""
    nums = re.findall(r"\d+", text or "")
    return tuple(int(n) for n in nums) if nums and (text or "").strip().startswith("(") else None


def _strip_args(name: str) -> str:
    """Drop a trailing ``(...)`` argument list, ``[abi:...]`` tags and ``<...>`` template arguments (all may nest),
    keeping Numba's ``<locals>`` component, and a leading return type (``void``)."""
    name = name.replace("::<locals>::", "::\0locals\0::")
    out, depth = [], 0
    for ch in name:
        if ch in "([<":
            depth += 1
        elif ch in ")]>" and depth:
            depth -= 1
        elif depth == 0:
            out.append(ch)
    base = "".join(out).replace("\0locals\0", "<locals>").strip()
    return base.split(" ")[-1] if " " in base else base


def _itanium(name: str):
    """Components of an Itanium-mangled nested name ``_ZN<len><id>...E...`` (None if ``name`` is not one)."""
    if not name.startswith("_ZN"):
        return None
    parts, i = [], 3
    while i < len(name) and name[i].isdigit():
        j = i
        while j < len(name) and name[j].isdigit():
            j += 1
        n = int(name[i:j])
        parts.append(name[j:j + n])
        i = j + n
        while i < len(name) and name[i] == "B":  # ABI tags: B<len><tag>
            j = i + 1
            while j < len(name) and name[j].isdigit():
                j += 1
            i = j + int(name[i + 1:j] or 0)
    return parts or None


def _unescape(part: str) -> str:
    """Numba escapes characters in mangled names as ``_<hex>`` (``_3clocals_3e`` is ``<locals>``)."""
    def dec(m):
        c = chr(int(m.group(1), 16))
        return c if c.isprintable() and not (c.isalnum() or c == "_") else m.group(0)

    return re.sub(r"_([0-9a-f]{2})", dec, part)


def split_name(kernel_name: str):
    """``(module, scope, kernel)`` of a profiled kernel's name.

    ``kernel`` is the function's own name (``scores``); ``scope`` what encloses it in the name (a Numba kernel
    factory such as ``_scores_kernel``, a Python module such as ``r1_recurrent``, a C++ namespace or class; None
    for a bare name); ``module`` the Python module (``r2_chunked``) when the name is complete enough to tell
    (Numba's full names: ``linattn_numba::rungs::r2_chunked::_scores_kernel::<locals>::scores``), else None --
    ncu's default short names (``_scores_kernel::scores``) do not say which module a factory lives in:
    :func:`assign_modules` resolves them against the modules' source."""
    parts = _itanium(kernel_name.strip())
    if parts is None:
        parts = _strip_args(kernel_name.strip()).split("::")
    parts = [_unescape(p) for p in parts if p]
    if not parts:
        return None, None, kernel_name
    kernel = parts[-1]
    if "<locals>" in parts:  # package :: module :: factory :: <locals> :: kernel
        i = parts.index("<locals>")
        return (parts[i - 2] if i >= 2 else None), (parts[i - 1] if i >= 1 else None), kernel
    if len(parts) >= 3 and parts[0] in ("cudapy", "linattn_numba"):  # package :: ... :: module :: kernel
        return parts[-2], parts[-2], kernel
    return None, (parts[-2] if len(parts) >= 2 else None), kernel


# --------------------------------------------------------------------------------------------------------
# records
# --------------------------------------------------------------------------------------------------------

_STALL_RAW = (
    # (regex on the metric name, unit label)
    (re.compile(r"^smsp__average_warp_latency_issue_stalled_(\w+?)(?:\.ratio|\.pct|\.sum)?$"), "cycles/issue"),
    (re.compile(r"^smsp__average_warps_issue_stalled_(\w+?)_per_issue_active(?:\.ratio)?$"), "cycles/issue"),
    (re.compile(r"^smsp__pcsamp_warps_issue_stalled_(\w+?)(?:\.sum)?$"), "samples"),
)
_STALL_DISPLAY = re.compile(r"^Stall (.+)$")


def stall_reason(metric_name: str):
    """``(reason, unit label)`` when ``metric_name`` is a warp-stall metric, else None. Reasons are snake_case
    (``long_scoreboard``, ``barrier``, ``math_pipe_throttle``, ...) whichever spelling ncu used."""
    m = _STALL_DISPLAY.match(metric_name)
    if m:
        return re.sub(r"\W+", "_", m.group(1).strip().lower()).strip("_"), "cycles/issue"
    for rx, unit in _STALL_RAW:
        m = rx.match(metric_name)
        if m:
            reason = m.group(1)
            if reason.endswith("_not_issued"):  # the "not issued" variants double-count: skip them
                return None
            return reason, unit
    return None


@dataclass
class Kernel:
    """One profiled launch. Values are None when the CSV did not have them (a section not collected)."""

    id: int
    name: str  # the full name as ncu printed it
    module: str | None  # e.g. "r2_chunked": from a full name, or set by assign_modules; else None
    scope: str | None  # what encloses the kernel in its name: "_scores_kernel", "r1_recurrent", a namespace
    kernel: str  # e.g. "scores"
    block: tuple | None = None
    grid: tuple | None = None
    metrics: dict = field(default_factory=dict)  # (section, metric name) -> (value: float | None, unit, text)
    stalls: dict = field(default_factory=dict)  # reason -> value (see stall_unit)
    stall_unit: str | None = None

    # -- lookups -----------------------------------------------------------------------------------------
    def get(self, metric, section=None):
        """The value of the first metric called ``metric`` (in ``section`` if given): ``(value, unit)``."""
        for (sec, name), (val, unit, _) in self.metrics.items():
            if name == metric and (section is None or sec == section):
                return val, unit
        return None, None

    def value(self, *names):
        """The numeric value of the first of ``names`` present (None if none is)."""
        for n in names:
            v, _ = self.get(n)
            if v is not None:
                return v
        return None

    # -- the fields the course reads -----------------------------------------------------------------------
    @property
    def label(self) -> str:
        if self.module:
            return f"{self.module}.{self.kernel}"
        return f"{self.scope}::{self.kernel}" if self.scope else self.kernel

    @property
    def duration_us(self):
        for n in ("Duration", "gpu__time_duration.sum"):
            v, u = self.get(n)
            if v is not None:
                return to_us(v, u or "ns")  # the raw metric's unit is nsecond; Duration always has one
        return None

    @property
    def sm_throughput_pct(self):
        return self.value("Compute (SM) Throughput", "SM [%]", "sm__throughput.avg.pct_of_peak_sustained_elapsed")

    @property
    def memory_throughput_pct(self):
        return self.value("Memory Throughput", "Memory [%]",
                          "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed")

    @property
    def dram_throughput_pct(self):
        return self.value("DRAM Throughput", "dram__throughput.avg.pct_of_peak_sustained_elapsed")

    @property
    def achieved_occupancy_pct(self):
        return self.value("Achieved Occupancy", "sm__warps_active.avg.pct_of_peak_sustained_active")

    @property
    def theoretical_occupancy_pct(self):
        return self.value("Theoretical Occupancy")

    @property
    def registers_per_thread(self):
        v = self.value("Registers Per Thread", "launch__registers_per_thread")
        return None if v is None else int(v)

    @property
    def shared_per_block_bytes(self):
        """Static + dynamic shared memory per block (without the driver's reserved 1 KB)."""
        total, seen = 0.0, False
        for n in ("Static Shared Memory Per Block", "Dynamic Shared Memory Per Block"):
            v, u = self.get(n)
            b = to_bytes(v, u)
            if b is not None:
                total, seen = total + b, True
        return total if seen else None

    @property
    def cycles_per_issue(self):
        return self.value("Warp Cycles Per Issued Instruction", "smsp__average_warp_latency_per_inst_issued.ratio")

    def stall_shares(self):
        """Each stall reason's fraction of the total (empty dict when there is no breakdown)."""
        tot = sum(v for v in self.stalls.values() if v)
        return {r: v / tot for r, v in self.stalls.items()} if tot > 0 else {}

    def top_stalls(self, n=3):
        """The ``n`` largest stall reasons as ``[(reason, share)]``."""
        return sorted(self.stall_shares().items(), key=lambda kv: -kv[1])[:n]


@dataclass
class Report:
    """The launches of one CSV, in ncu's ID order, and the non-CSV lines that came before the header."""

    kernels: list
    preamble: list = field(default_factory=list)
    source: str | None = None

    def __iter__(self):
        return iter(self.kernels)

    def __len__(self):
        return len(self.kernels)

    def by_module(self, module):
        return [k for k in self.kernels if k.module == module]


def parse(text: str, source: str | None = None) -> Report:
    """Parse ``ncu --csv --page details`` output (the whole text, preamble included) into a :class:`Report`."""
    lines = text.splitlines()
    start = next((i for i, ln in enumerate(lines) if ln.lstrip("\ufeff").startswith(HEADER_START)), None)
    if start is None:
        raise NcuError(f"{source or 'input'}: no Nsight Compute CSV header ({HEADER_START},...) found: was ncu run "
                       "with --csv --page details, and was its stdout (not stderr) saved?")
    reader = csv.DictReader(io.StringIO("\n".join(ln.lstrip("\ufeff") for ln in lines[start:])))
    missing = [c for c in REQUIRED if c not in (reader.fieldnames or [])]
    if missing:
        raise NcuError(f"{source or 'input'}: the CSV lacks the columns {missing} (--page raw output? use "
                       "--page details)")
    kernels = {}
    for row in reader:
        if row.get("ID") is None or not str(row["ID"]).strip().isdigit():
            continue  # a stray line of program output between rows, or a truncated one
        kid = int(row["ID"])
        k = kernels.get(kid)
        if k is None:
            name = row["Kernel Name"] or ""
            module, scope, kern = split_name(name)
            k = kernels[kid] = Kernel(kid, name, module, scope, kern, dims(row.get("Block Size")),
                                      dims(row.get("Grid Size")))
        metric = (row.get("Metric Name") or "").strip()
        if not metric:
            continue  # rule rows carry no metric
        unit = (row.get("Metric Unit") or "").strip()
        text_val = row.get("Metric Value") or ""
        val = number(text_val)
        key = ((row.get("Section Name") or "").strip(), metric)
        k.metrics.setdefault(key, (val, unit, text_val))
        st = stall_reason(metric)
        if st is not None and val is not None:
            reason, kind = st
            if k.stall_unit in (None, kind):  # one kind per kernel: the first one seen
                k.stall_unit = kind
                k.stalls[reason] = k.stalls.get(reason, 0.0) + val
    return Report(sorted(kernels.values(), key=lambda k: k.id), lines[:start], source)


def load(path) -> Report:
    """:func:`parse` of a file."""
    with open(path, encoding="utf-8", errors="replace") as f:
        return parse(f.read(), source=os.fspath(path))


def load_dir(data_dir, pattern="*ncu*.csv"):
    """Every ``pattern`` file of ``data_dir`` (sorted by name) as ``[(path, Report)]``."""
    import glob

    return [(p, load(p)) for p in sorted(glob.glob(os.path.join(data_dir, pattern)))]


# --------------------------------------------------------------------------------------------------------
# grouping launches and printing
# --------------------------------------------------------------------------------------------------------


def kernel_index(modules):
    """``{(scope, kernel): [module name, ...]}`` for the kernels the given Python modules can define, read from
    their source: every module-level function (scope = the module's last dotted name) and every function defined
    inside a module-level function (scope = that factory, and also the module: ncu prints some factory-made
    kernels as ``r1_recurrent::recurrent_kernel``). Modules in the given order (e.g. ladder order)."""
    import ast
    import inspect

    index = {}
    for mod in modules:
        short = mod.__name__.rsplit(".", 1)[-1]
        try:
            tree = ast.parse(inspect.getsource(mod))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                index.setdefault((short, node.name), []).append(short)
                for inner in ast.walk(node):
                    if isinstance(inner, ast.FunctionDef) and inner is not node:
                        # ncu names a factory-made kernel by its factory or, for some, by its module
                        for key in ((node.name, inner.name), (short, inner.name)):
                            lst = index.setdefault(key, [])
                            if short not in lst:
                                lst.append(short)
    return index


def assign_modules(kernels, index):
    """Set ``module`` on launches that lack it, from ``(scope, kernel)`` in ``index`` (:func:`kernel_index`).

    A name several modules define (two rungs with a ``_state_kernel`` factory making ``state``) is resolved by
    context: it belongs to the module of the launch before it when that module is a candidate (a pipeline's
    first kernel is usually its own, e.g. r2's ``gates`` or ``scores``), else to the first candidate at or after
    that module in the index's order (``tools/ncu_rungs.py`` profiles the rungs in ladder order). Launches with
    names the index does not know keep ``module`` None. Returns ``kernels``."""
    order = list(dict.fromkeys(m for mods in index.values() for m in mods))
    pos = {m: i for i, m in enumerate(order)}
    current = None
    for k in kernels:
        if k.module is None:
            cands = index.get((k.scope, k.kernel)) or []
            if len(cands) == 1 or (cands and current in cands):
                k.module = current if current in cands else cands[0]
            elif cands:
                here = pos.get(current, -1)
                k.module = next((m for m in cands if pos[m] >= here), cands[0])
        current = k.module
    return kernels


def launch_groups(kernels):
    """Split launches (in ID order) into the calls that produced them: a new group starts when the module changes
    or a kernel already in the current group appears again (a rung's ``forward`` launches each kernel once).
    Returns ``[(module, [Kernel, ...])]``."""
    groups = []
    for k in kernels:
        if groups and groups[-1][0] == k.module and all(x.kernel != k.kernel for x in groups[-1][1]):
            groups[-1][1].append(k)
        else:
            groups.append((k.module, [k]))
    return groups


def summarize(kernels):
    """Launches of the same (module, kernel) merged: median of each field. Returns ``[(label, dict)]`` in order of
    first appearance; the dict has ``launches`` and the :data:`COLUMNS` fields."""
    by = {}
    for k in kernels:
        by.setdefault(k.label, []).append(k)
    out = []
    for label, ks in by.items():
        row = {"launches": len(ks)}
        for col, _, _ in COLUMNS:
            vals = [getattr(k, col) for k in ks]
            vals = [v for v in vals if isinstance(v, (int, float))]
            row[col] = statistics.median(vals) if vals else None
        row["block"], row["grid"] = ks[0].block, ks[0].grid
        out.append((label, row))
    return out


COLUMNS = (  # (Kernel attribute, header, format)
    ("duration_us", "time us", "{:,.1f}"),
    ("sm_throughput_pct", "SM %", "{:.0f}"),
    ("memory_throughput_pct", "mem %", "{:.0f}"),
    ("dram_throughput_pct", "DRAM %", "{:.0f}"),
    ("achieved_occupancy_pct", "occ %", "{:.0f}"),
    ("registers_per_thread", "regs", "{:.0f}"),
    ("shared_per_block_bytes", "smem B", "{:,.0f}"),
    ("cycles_per_issue", "cyc/issue", "{:.1f}"),
)


def _fmt(v, f):
    return "" if v is None else f.format(v)


def table(kernels, markdown=False, stalls=3) -> str:
    """A table of launches: one row each, the :data:`COLUMNS` fields, block/grid and the ``stalls`` largest stall
    reasons with their share. Plain text (aligned columns) or ``markdown=True``."""
    head = ["#", "kernel", "grid", "block"] + [h for _, h, _ in COLUMNS] + (["top stalls"] if stalls else [])
    rows = []
    for k in kernels:
        dimtxt = lambda d: "x".join(str(x) for x in d) if d else ""  # noqa: E731
        top = ", ".join(f"{r} {100 * s:.0f}%" for r, s in k.top_stalls(stalls)) if stalls else None
        rows.append([str(k.id), k.label, dimtxt(k.grid), dimtxt(k.block)]
                    + [_fmt(getattr(k, a), f) for a, _, f in COLUMNS] + ([top] if stalls else []))
    if markdown:
        align = ["--:", "---", "---", "---"] + ["--:"] * len(COLUMNS) + (["---"] if stalls else [])
        return "\n".join("| " + " | ".join(r) + " |" for r in [head, align] + rows)
    widths = [max(len(r[i]) for r in [head] + rows) for i in range(len(head))]
    return "\n".join("  ".join(c.ljust(w) if i in (1, 2, 3, len(head) - 1) else c.rjust(w)
                               for i, (c, w) in enumerate(zip(r, widths))).rstrip() for r in [head] + rows)


def main(argv=None) -> int:
    """``python -m linattn_numba.ncu FILE.csv [...]``: print each file's table."""
    import argparse

    p = argparse.ArgumentParser(description="Summarise Nsight Compute CSV (--csv --page details) per kernel.")
    p.add_argument("files", nargs="+")
    p.add_argument("--markdown", action="store_true")
    a = p.parse_args(argv)
    rc = 0
    for path in a.files:
        try:
            rep = load(path)
        except (OSError, NcuError) as e:
            print(f"{path}: {e}")
            rc = 1
            continue
        print(f"{path}: {len(rep)} launches")
        print(table(rep.kernels, markdown=a.markdown))
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
