"""``linattn-numba grade PATH``: check a rung module (a student's exercise, or any file following the rung contract)
against the project's own oracle cases.

What it does
    1. Loads the module from its file path (``importlib.util.spec_from_file_location``); a file inside an importable
       package (e.g. ``src/linattn_numba/rungs/r1_recurrent.py``) is loaded as a sibling module of that package,
       so its relative imports work.
    2. Checks the rung contract (:mod:`linattn_numba.rungs`): ``NAME``, ``MAX_K``, ``MAX_V``, ``CHUNK_SIZES``,
       ``forward(q, k, v, g, beta, o, h0, ht, scale, chunk_size, stream=0)``, ``compile_targets()``. A missing or
       malformed name is a report line, not a traceback. The rung graded is ``--rung``, else ``NAME``, else the
       file name (``r1_recurrent.py`` -> ``recurrent``).
    3. Runs the cases of :mod:`linattn_numba.grading_cases` -- the ones ``tests/test_rungs.py`` runs: every
       recurrence x the odd shapes, with initial and final state, plus no-state and float16 inputs -- each with
       outputs pre-filled with NaN, checking that the inputs are unmodified and that the relative error against
       :func:`linattn_numba.reference.recurrent` is at most ``TOL_FP32``. ``--quick``: 4 of them.
    4. Prints one line per case (PASS / FAIL / TIMEOUT, errors of ``o`` and of the final state, seconds) with hints
       under each failure, and ``N passed, M failed``. Exit status 0 only when the contract holds and every case
       passes; 1 otherwise; 2 for a usage error.

Isolation
    The cases run in a worker process (``python -m linattn_numba.grade --worker ...``) so that a kernel that
    deadlocks (a ``syncthreads()`` or a shuffle not every thread reaches) or loops forever cannot hang the grader:
    a case that exceeds ``--timeout`` seconds is reported as TIMEOUT, the worker is killed and a fresh one carries
    on with the remaining cases. ``--in-process`` runs everything in this process instead (no timeout; handy with
    ``breakpoint()`` in simulated kernel code).

Without a GPU the worker runs in Numba's CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` is set in its environment
before it imports numba); ``--simulator`` forces that on a GPU machine too.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import io
import itertools
import json
import os
import queue
import subprocess
import sys
import threading
import time

PROTO = "@@linattn-grade "  # prefix of the worker's protocol lines on its stdout
DEFAULT_TIMEOUT = 60.0
MAX_TIMEOUTS_IN_A_ROW = 2  # then the remaining cases are not run (each would likely hang too)
IMPORT_TIMEOUT_MIN = 60.0  # the worker's start-up (numba import, the module, the contract) gets at least this
FORWARD_ARGS = ("q", "k", "v", "g", "beta", "o", "h0", "ht", "scale", "chunk_size")
OUTPUT_TAIL = 15  # lines of a failing case's printed output shown in the report


# ============================================================================================ worker side
# (these functions import numba through the package: the simulator must already be chosen)


def rung_from_filename(path):
    """``.../r1_recurrent.py`` -> ``'recurrent'``; None when the file name names no known rung."""
    from .rungs import _MODULES

    stem = os.path.splitext(os.path.basename(path))[0]
    for name, mod in _MODULES.items():
        if stem in (mod, name) or stem.endswith("_" + name):
            return name
    return None


def load_module(path):
    """Import the module in file ``path`` under a fresh name (raises what the import raises)."""
    import importlib
    import importlib.util

    path = os.path.realpath(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    # A file inside a package directory (e.g. the package's own rungs) is loaded as a sibling module of that
    # package, so that its relative imports (``from .._common import ...``) resolve.
    parts, d = [], os.path.dirname(path)
    while os.path.isfile(os.path.join(d, "__init__.py")):
        parts.insert(0, os.path.basename(d))
        d = os.path.dirname(d)
    name = None
    if parts and all(p.isidentifier() for p in parts):
        try:
            importlib.import_module(".".join(parts))
            name = ".".join(parts) + f"._graded_{stem}"
        except Exception:  # noqa: BLE001 - not importable: load it standalone
            name = None
    if name is None:
        name = "_linattn_graded_" + "".join(c if c.isalnum() else "_" for c in stem)
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as a Python module (not a .py file?)")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    try:
        spec.loader.exec_module(mod)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return mod


_MISSING = object()


def _fmt(v):
    return repr(v) if not isinstance(v, (tuple, list)) or len(v) < 8 else f"{type(v).__name__} of {len(v)}"


def check_contract(mod, rung_arg=None, path=None) -> dict:
    """The rung contract, checked name by name. Returns a JSON-able dict: ``lines`` [(PASS|FAIL|WARN, text)],
    ``rung`` (the rung graded), ``fatal`` (no usable ``forward``: the cases cannot run)."""
    import inspect

    from . import rungs
    from .grading_cases import describe_exception

    lines = []
    ok = lambda text: lines.append(("PASS", text))  # noqa: E731
    bad = lambda text: lines.append(("FAIL", text))  # noqa: E731
    warn = lambda text: lines.append(("WARN", text))  # noqa: E731

    name = getattr(mod, "NAME", _MISSING)
    if name is _MISSING:
        bad("NAME missing: the rung name, a str (e.g. NAME = \"naive\")")
    elif not isinstance(name, str) or not name:
        bad(f"NAME must be a non-empty str, got {name!r}")
    else:
        ok(f"NAME = {name!r}")
    rung = rung_arg or (name if isinstance(name, str) and name else None) or (path and rung_from_filename(path))
    if rung_arg and isinstance(name, str) and name and name != rung_arg:
        bad(f"NAME is {name!r} but --rung asks for {rung_arg!r}")
    if rung and rung not in rungs.RUNGS:
        warn(f"unknown rung {rung!r} (the package has {', '.join(rungs.RUNGS)}): graded with the common cases")

    for attr in ("MAX_K", "MAX_V"):
        v = getattr(mod, attr, _MISSING)
        if v is _MISSING:
            bad(f"{attr} missing: the largest head dimension supported, an int, or None for no limit")
        elif v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            bad(f"{attr} must be a positive int or None, got {v!r}")
        else:
            ok(f"{attr} = {v!r}")
    cs = getattr(mod, "CHUNK_SIZES", _MISSING)
    if cs is _MISSING:
        bad("CHUNK_SIZES missing: a tuple of the supported chunk sizes, or None when chunk_size is not used")
    elif cs is not None and (not isinstance(cs, (tuple, list)) or not cs
                             or not all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in cs)):
        bad(f"CHUNK_SIZES must be None or a non-empty tuple of positive ints, got {cs!r}")
    else:
        ok(f"CHUNK_SIZES = {_fmt(cs)}")

    fatal = False
    fwd = getattr(mod, "forward", _MISSING)
    if fwd is _MISSING:
        bad("forward missing: def forward(q, k, v, g, beta, o, h0, ht, scale, chunk_size=None, stream=0)")
        fatal = True
    elif not callable(fwd):
        bad(f"forward must be a function, got {type(fwd).__name__}")
        fatal = True
    else:
        try:
            sig = str(inspect.signature(fwd))
        except (TypeError, ValueError):
            sig = None  # no introspectable signature (a builtin, say): let the cases find out
            ok("forward(...)")
        if sig is not None:
            try:
                inspect.signature(fwd).bind(*([None] * len(FORWARD_ARGS)), stream=0)
                ok(f"forward{sig}")
            except TypeError as e:
                bad(f"forward{sig} does not take the contract's arguments "
                    f"(q, k, v, g, beta, o, h0, ht, scale, chunk_size, stream=0): {e}")
                fatal = True

    ct = getattr(mod, "compile_targets", _MISSING)
    if ct is _MISSING:
        bad("compile_targets missing: a generator of (label, py_func, argtypes) for every kernel variant")
    elif not callable(ct):
        bad(f"compile_targets must be a function, got {type(ct).__name__}")
    else:
        try:
            items = list(itertools.islice(ct(), 10000))
            wrong = [i for i, t in enumerate(items)
                     if not (isinstance(t, tuple) and len(t) == 3 and isinstance(t[0], str) and callable(t[1])
                             and isinstance(t[2], (tuple, list)))]
            if not items:
                bad("compile_targets() yields nothing: it should yield every kernel variant forward can launch")
            elif wrong:
                bad(f"compile_targets() item {wrong[0]} is not (label: str, py_func, argtypes: tuple): "
                    f"{items[wrong[0]]!r:.120}")
            else:
                ok(f"compile_targets(): {len(items)} kernel variants")
        except Exception as e:  # noqa: BLE001
            bad("compile_targets() raised " + "; ".join(describe_exception(e, path)))

    if rung in rungs.RUNGS:  # the package's rung of the same name: the contract values the assignment expects
        try:
            ref = rungs.module(rung)
        except Exception:  # noqa: BLE001 - the package rung itself failing to import is not the student's fault
            ref = None
        for attr in ("MAX_K", "MAX_V", "CHUNK_SIZES"):
            mine, theirs = getattr(mod, attr, _MISSING), getattr(ref, attr, _MISSING)
            if ref is not None and mine is not _MISSING and theirs is not _MISSING and mine != theirs:
                warn(f"{attr} = {_fmt(mine)} differs from the package rung {rung!r} ({_fmt(theirs)})")
    return {"type": "contract", "rung": rung, "fatal": fatal, "lines": lines}


@contextlib.contextmanager
def _capture(buf):
    """Send Python-level prints (a simulated kernel's ``print`` included) and warnings to ``buf``."""
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(buf):
        yield


def _tail(text, n=OUTPUT_TAIL):
    lines = text.rstrip("\n").splitlines()
    return "\n".join(lines[-n:]) if lines else ""


def run_worker(path, rung_arg, case_ids, emit):
    """Grade in this process: emit the contract event, then a ``start`` and a ``result`` event per case."""
    from . import grading_cases
    from .grading_cases import CaseResult, describe_exception

    buf = io.StringIO()
    try:
        with _capture(buf):
            mod = load_module(path)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 - a SyntaxError, an ImportError, a SystemExit: all a report line
        lines = [("FAIL", f"could not import {path}")] + [("FAIL", ln) for ln in describe_exception(e, path)]
        if isinstance(e, ImportError) and "relative import" in str(e):
            lines.append(("FAIL", "a standalone file cannot use relative imports: write "
                                  "`from linattn_numba._common import ...` instead of `from .._common import ...`"))
        emit({"type": "contract", "rung": rung_arg or rung_from_filename(path), "fatal": True, "lines": lines,
              "output": _tail(buf.getvalue())})
        return
    contract = check_contract(mod, rung_arg, path)
    contract["output"] = _tail(buf.getvalue())
    emit(contract)
    if contract["fatal"]:
        return
    by_id = {c.id: c for c in grading_cases.CASES}
    for cid in case_ids:
        emit({"type": "start", "id": cid})
        buf = io.StringIO()
        try:
            with _capture(buf):
                res = grading_cases.run_case(mod, by_id[cid], source=path)
        except Exception as e:  # noqa: BLE001 - e.g. the chunk size choice raising on a malformed CHUNK_SIZES
            res = CaseResult(cid, False, hints=describe_exception(e, path))
        res.output = _tail(buf.getvalue())
        emit({"type": "result", **res.to_dict()})
    emit({"type": "done"})


def _worker_main(spec_json) -> int:
    spec = json.loads(spec_json)
    proto = sys.stdout
    sys.stdout = sys.stderr  # stray prints must not mix with the protocol lines

    def emit(ev):
        proto.write(PROTO + json.dumps(ev) + "\n")
        proto.flush()

    from . import sim

    if sim.active():
        sim.install()
    run_worker(spec["path"], spec["rung"], spec["cases"], emit)
    return 0


# ============================================================================================ parent side


class _Worker:
    """A worker process and the threads that read its output (protocol events into a queue)."""

    def __init__(self, path, rung, case_ids, simulate):
        env = dict(os.environ)
        env["NUMBA_ENABLE_CUDASIM"] = "1" if simulate else "0"
        pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env["PYTHONPATH"] = pkg_root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        spec = json.dumps({"path": path, "rung": rung, "cases": case_ids})
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "linattn_numba.grade", "--worker", spec],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
            text=True, errors="replace",
        )
        self.events = queue.Queue()
        self.stray = collections.deque(maxlen=200)  # the worker's other output, for a crash report
        threading.Thread(target=self._read_stdout, daemon=True).start()
        threading.Thread(target=self._read_stderr, daemon=True).start()

    def _read_stdout(self):
        for line in self.proc.stdout:
            if line.startswith(PROTO):
                try:
                    self.events.put(json.loads(line[len(PROTO):]))
                    continue
                except ValueError:
                    pass
            self.stray.append(line.rstrip("\n"))
        self.events.put(None)  # end of output: the worker exited

    def _read_stderr(self):
        for line in self.proc.stderr:
            self.stray.append(line.rstrip("\n"))

    def next(self, timeout):
        """The next event; None when the worker exited; raises queue.Empty after ``timeout`` seconds."""
        return self.events.get(timeout=timeout)

    def crash_text(self):
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        rc = self.proc.returncode
        return f"the worker process died (exit status {rc})", _tail("\n".join(self.stray), OUTPUT_TAIL)

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()


class _Report:
    """Prints the report as events arrive and keeps the tallies."""

    def __init__(self, out, verbose=False):
        self.out = out
        self.verbose = verbose
        self.contract = None
        self.results = []
        self._last_hints = None

    def p(self, text=""):
        print(text, file=self.out, flush=True)

    def on_contract(self, ev):
        self.contract = ev
        self.p(f"contract ({'rung ' + repr(ev['rung']) if ev.get('rung') else 'rung unknown'}):")
        for status, text in ev["lines"]:
            self.p(f"  {status:4s}  {text}")
        if ev.get("output") and (self.verbose or ev["fatal"]):
            self.p("        printed while importing:")
            for ln in ev["output"].splitlines():
                self.p(f"          | {ln}")

    def cases_header(self, tol):
        self.p(f"cases (relative error vs reference.recurrent; pass: <= {tol:.0e}, outputs pre-filled with NaN):")

    def on_result(self, ev):
        self.results.append(ev)
        status = ev.get("status") or ("PASS" if ev["passed"] else "FAIL")
        e = lambda x: "   -   " if x is None else f"{x:7.1e}"  # noqa: E731
        self.p(f"  {status:7s} {ev['id']:34s} o {e(ev.get('err_o'))}  ht {e(ev.get('err_ht'))}  "
               f"{ev.get('seconds', 0.0):6.1f} s")
        hints = ev.get("hints", [])
        if hints and hints == self._last_hints:
            self.p("          - (same as above)")
        else:
            for h in hints:
                self.p(f"          - {h}")
        self._last_hints = hints if not ev["passed"] else None
        if ev.get("output") and (self.verbose or not ev["passed"]):
            self.p("          printed during the case (last lines):")
            for ln in ev["output"].splitlines():
                self.p(f"            | {ln}")

    @property
    def contract_ok(self):
        return self.contract is not None and all(s != "FAIL" for s, _ in self.contract["lines"])


def _timeout_result(cid, seconds):
    return {"type": "result", "id": cid, "passed": False, "status": "TIMEOUT", "err_o": None, "err_ht": None,
            "seconds": seconds,
            "hints": [f"did not finish within {seconds:.0f} s: a deadlock (a cuda.syncthreads() that not every "
                      "thread of the block reaches -- e.g. after an early `return` or inside an `if` -- or a warp "
                      "shuffle with a lane missing) or a loop that never ends (or just slow: raise --timeout); "
                      "the worker process running it was killed"],
            "output": ""}


def _run_subprocess(path, rung, case_ids, simulate, timeout, report):
    remaining = list(case_ids)
    first = True
    timeouts = 0  # in a row
    while first or remaining:
        w = _Worker(path, rung, remaining, simulate)
        try:
            try:
                ev = w.next(max(timeout, IMPORT_TIMEOUT_MIN))
            except queue.Empty:
                ev = {"type": "contract", "rung": rung, "fatal": True,
                      "lines": [("FAIL", f"importing the module and checking the contract took more than "
                                         f"{max(timeout, IMPORT_TIMEOUT_MIN):.0f} s (does it run work at import?)")]}
            if ev is None:
                what, tail = w.crash_text()
                ev = {"type": "contract", "rung": rung, "fatal": True,
                      "lines": [("FAIL", what + " while importing the module")], "output": tail}
            if first:
                report.on_contract(ev)
                first = False
                if ev["fatal"]:
                    return
                if remaining:
                    report.cases_header(_tol())
            elif ev.get("fatal"):  # cannot happen unless the file changed under us
                for cid in remaining:
                    report.on_result({"id": cid, "passed": False, "hints": ["the module stopped importing"]})
                return
            while remaining:
                cid = remaining[0]
                try:
                    ev = w.next(timeout)
                    if ev is not None and ev.get("type") == "start":
                        t0 = time.monotonic()
                        ev = w.next(timeout)
                    else:
                        t0 = time.monotonic()
                except queue.Empty:
                    report.on_result(_timeout_result(cid, timeout))
                    remaining.pop(0)
                    timeouts += 1
                    if timeouts >= MAX_TIMEOUTS_IN_A_ROW and remaining:
                        report.p(f"  {len(remaining)} remaining case{'s' * (len(remaining) != 1)} not run after "
                                 f"{timeouts} timeouts in a row (fix the hang, or grade one with --case ID)")
                        remaining.clear()
                    break  # kill this worker, start a fresh one for the rest
                if ev is None:
                    what, tail = w.crash_text()
                    report.on_result({"id": cid, "passed": False, "status": "CRASH", "seconds": time.monotonic() - t0,
                                      "hints": [what + " during this case (a crash in native code, or the process "
                                                "was killed for memory)"], "output": tail})
                    remaining.pop(0)
                    break
                if ev.get("type") == "result":
                    report.on_result(ev)
                    remaining.pop(0)
                    timeouts = 0
        finally:
            w.kill()


def _tol():
    from .testing import TOL_FP32

    return TOL_FP32


def grade(path, rung=None, quick=False, case_filter=None, timeout=DEFAULT_TIMEOUT, in_process=False,
          simulator=False, verbose=False, json_out=None, out=None) -> int:
    """Grade the rung module in file ``path``; print the report to ``out`` (default stdout). Returns the exit
    status: 0 when the contract holds and every case passes, 1 otherwise, 2 for a usage error."""
    out = out or sys.stdout
    if not os.path.isfile(path):
        print(f"grade: no such file: {path}", file=sys.stderr)
        return 2
    path = os.path.abspath(path)
    from .sim import gpu_present

    simulate = simulator or not gpu_present()
    from . import grading_cases

    cases = grading_cases.QUICK_CASES if quick else grading_cases.CASES
    if case_filter:
        cases = [c for c in cases if any(f in c.id for f in case_filter)]
        if not cases:
            print(f"grade: no case id contains {' or '.join(map(repr, case_filter))}; case ids: "
                  + ", ".join(c.id for c in grading_cases.CASES), file=sys.stderr)
            return 2
    case_ids = [c.id for c in cases]
    report = _Report(out, verbose)
    where = "Numba's CUDA simulator (no CUDA GPU found)" if simulate and not simulator else (
        "Numba's CUDA simulator" if simulate else "the GPU")
    shown = os.path.relpath(path)
    shown = path if shown.startswith("..") else shown
    report.p(f"grading {shown}: {len(case_ids)} case{'s' * (len(case_ids) != 1)}"
             f"{' (--quick)' if quick else ''}, in {where}"
             + ("" if in_process else f", timeout {timeout:.0f} s per case"))
    t_start = time.monotonic()
    if in_process:
        from . import sim

        if simulate:
            try:
                sim.enable()  # sets NUMBA_ENABLE_CUDASIM=1 unless numba.cuda is already imported (then it must be on)
            except RuntimeError as e:
                print(f"grade --in-process: {e}", file=sys.stderr)
                return 2

        def emit(ev):
            if ev["type"] == "contract":
                report.on_contract(ev)
                if not ev["fatal"] and case_ids:
                    report.cases_header(_tol())
            elif ev["type"] == "result":
                report.on_result(ev)

        run_worker(path, rung, case_ids, emit)
    else:
        _run_subprocess(path, rung, case_ids, simulate, timeout, report)

    passed = sum(1 for r in report.results if r["passed"])
    failed = len(case_ids) - passed
    not_run = len(case_ids) - len(report.results)
    notes = []
    if not_run:
        notes.append(f"{not_run} not run" + (": the module does not meet the contract"
                                             if report.contract is None or report.contract["fatal"] else ""))
    if not report.contract_ok and not (report.contract is None or report.contract["fatal"]):
        notes.append("the contract check failed")
    report.p(f"{passed} passed, {failed} failed" + (f" ({'; '.join(notes)})" if notes else "")
             + f" in {time.monotonic() - t_start:.1f} s")
    ok = report.contract_ok and failed == 0
    if json_out:
        with open(json_out, "w") as f:
            json.dump({"path": path, "rung": (report.contract or {}).get("rung"), "ok": ok, "passed": passed,
                       "failed": failed, "contract": report.contract, "cases": report.results}, f, indent=1)
    return 0 if ok else 1


def add_arguments(p: argparse.ArgumentParser):
    p.add_argument("path", help="the module file to grade, e.g. exercises/r1_recurrent.py")
    p.add_argument("--rung", help="the rung it implements (default: its NAME, else its file name)")
    p.add_argument("--quick", action="store_true", help="4 cases (each recurrence and each odd shape once)")
    p.add_argument("--case", action="append", metavar="SUBSTR",
                   help="only the cases whose id contains SUBSTR (repeatable), e.g. --case delta-B1T37")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help=f"seconds per case before it counts as hung (default {DEFAULT_TIMEOUT:.0f})")
    p.add_argument("--simulator", action="store_true", help="use Numba's CUDA simulator even on a GPU machine")
    p.add_argument("--in-process", action="store_true",
                   help="no worker process and no timeout (for breakpoint() in simulated kernels)")
    p.add_argument("-v", "--verbose", action="store_true", help="also show what passing cases printed")
    p.add_argument("--json", metavar="FILE", help="also write the results as JSON")


def run(args) -> int:
    """The ``grade`` subcommand (``args`` from :func:`add_arguments`)."""
    return grade(args.path, rung=args.rung, quick=args.quick, case_filter=args.case, timeout=args.timeout,
                 in_process=args.in_process, simulator=args.simulator, verbose=args.verbose, json_out=args.json)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) == 2 and argv[0] == "--worker":
        return _worker_main(argv[1])
    p = argparse.ArgumentParser(prog="linattn-numba grade", description=__doc__.splitlines()[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
