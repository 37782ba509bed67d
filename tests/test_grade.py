"""The grader (``linattn-numba grade``): it fails the un-filled exercise skeletons with a helpful report, passes the
package's own rung files, reports a broken contract without a traceback, names common mistakes, and stops a
hanging case.

Most tests grade through the worker process (the real path, about a second of start-up each) with ``--quick``;
the mutant tests run in-process on a single case to stay fast.
"""

import argparse
import ast
import inspect
import io
import re
from pathlib import Path

import pytest

import linattn_numba as la
from linattn_numba import cli, grade, grading_cases, rungs

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"
RUNGS_DIR = Path(la.__file__).resolve().parent / "rungs"
SKELETONS = {"naive": "r0_naive.py", "recurrent": "r1_recurrent.py", "chunked": "r2_chunked.py",
             "shared": "r3_shared.py"}


def run_grade(path, *args):
    """``grade`` through its command-line parser; returns (exit status, report text)."""
    buf = io.StringIO()
    p = argparse.ArgumentParser()
    grade.add_arguments(p)
    a = p.parse_args([str(path), *args])
    rc = grade.grade(a.path, rung=a.rung, quick=a.quick, case_filter=a.case, timeout=a.timeout,
                     in_process=a.in_process, simulator=a.simulator, verbose=a.verbose, out=buf)
    return rc, buf.getvalue()


def summary(report):
    m = re.search(r"^(\d+) passed, (\d+) failed", report, re.M)
    assert m, report
    return int(m.group(1)), int(m.group(2))


@pytest.mark.parametrize("rung", SKELETONS)
def test_skeleton_fails_with_a_helpful_report(rung):
    rc, report = run_grade(EXERCISES / SKELETONS[rung], "--quick")
    assert rc == 1, report
    assert summary(report) == (0, len(grading_cases.QUICK_CASES)), report
    assert f"rung {rung!r}" in report and "FAIL  " not in report.split("cases (")[0], report  # contract holds
    assert "some outputs never written" in report and "still `pass`" in report, report
    assert "Traceback" not in report


@pytest.mark.parametrize("rung", SKELETONS)
def test_package_solution_passes(rung):
    rc, report = run_grade(RUNGS_DIR / SKELETONS[rung], "--quick")
    assert rc == 0, report
    assert summary(report) == (len(grading_cases.QUICK_CASES), 0), report
    assert "FAIL" not in report


def _params(f):
    """A function's parameters as (name, kind): defaults are tuning (NS, COLS, ...) and may differ."""
    return [(p.name, p.kind) for p in inspect.signature(f).parameters.values()]


@pytest.mark.parametrize("rung", SKELETONS)
def test_skeleton_has_the_package_rungs_names(rung):
    """Same contract values and the same parameters (forward, the kernel factories, ...) as the package's rung:
    when the package rung changes a signature, the skeleton has to follow."""
    student = grade.load_module(EXERCISES / SKELETONS[rung])
    ref = rungs.module(rung)
    for name in ("NAME", "MAX_K", "MAX_V", "CHUNK_SIZES"):
        assert getattr(student, name) == getattr(ref, name), name
    functions = [n for n, obj in vars(ref).items() if callable(obj) and getattr(obj, "__module__", "") == ref.__name__]
    # lru_cache'd kernel factories count too (r0, r1: _kernel; r2: _gates_kernel, _scores_kernel, ...; r3 also its
    # device helpers: _mm_nn, _stage_input, ...)
    assert "forward" in functions and any(n.endswith("_kernel") for n in functions)
    for name in functions:
        assert name in vars(student), f"skeleton lacks {name}"
        assert _params(getattr(student, name)) == _params(getattr(ref, name)), name
    assert not grade.check_contract(student)["fatal"]


def _kernels(tree, top=None):
    """{name: FunctionDef} of what the student writes: the kernels (functions defined inside another function, the
    factories) and the top-level functions named in ``top`` -- by default those whose body is only a docstring and
    ``pass`` (device functions left to the student, r3's ``_wy_inverse``)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef):
            out.update({n.name: n for n in node.body if isinstance(n, ast.FunctionDef)})
    for n in tree.body:
        if isinstance(n, ast.FunctionDef):
            body = [b for b in n.body if not (isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant))]
            if (n.name in top) if top is not None else (len(body) == 1 and isinstance(body[0], ast.Pass)):
                out[n.name] = n
    return out


def _outermost(funcs):
    """Drop the functions nested in another one of ``funcs`` (r1's ``tile_loop`` inside ``make_tile_loop``):
    splicing the outer body brings them along, and splicing both would shift the outer's line numbers."""
    def inside(n, m):
        return m is not n and m.lineno < n.lineno and n.end_lineno <= m.end_lineno
    return {k: n for k, n in funcs.items() if not any(inside(n, m) for m in funcs.values())}


@pytest.mark.parametrize("rung", SKELETONS)
def test_skeleton_filled_with_the_solution_passes(tmp_path, rung):
    """Splice the package's kernel bodies into the skeleton: the scaffolding a student gets supports a solution."""
    skel = ((EXERCISES / SKELETONS[rung]).read_text().replace("STEP_KERNEL = False", "STEP_KERNEL = True")
            .replace("STEP_VEC = False", "STEP_VEC = True"))
    sol = (RUNGS_DIR / SKELETONS[rung]).read_text().splitlines(keepends=True)
    lines = skel.splitlines(keepends=True)
    mine = _outermost(_kernels(ast.parse(skel)))
    sol_tree = ast.parse("".join(sol))
    theirs = _outermost(_kernels(sol_tree, top=set(mine)))
    # a package kernel the skeleton does not leave to the student comes with it, imported from the package (r3's
    # split schedule: _gates_kernel, _out_kernel)
    given = {a.asname or a.name for n in ast.parse(skel).body if isinstance(n, ast.ImportFrom) for a in n.names}
    for name in theirs.keys() - mine.keys():
        factory = next(f.name for f in sol_tree.body if isinstance(f, ast.FunctionDef) and theirs[name] in f.body)
        assert factory in given, f"the skeleton neither leaves {name} to the student nor imports {factory}"
        del theirs[name]
    assert mine.keys() == theirs.keys()
    for name in sorted(mine, key=lambda n: -mine[n].lineno):  # bottom-up, so line numbers stay valid
        a, b = mine[name], theirs[name]
        lines[a.body[0].lineno - 1:a.end_lineno] = sol[b.body[0].lineno - 1:b.end_lineno]
    path = tmp_path / SKELETONS[rung]
    path.write_text("".join(lines))
    rc, report = run_grade(path, "--in-process", "--quick")
    assert rc == 0, report
    assert summary(report) == (len(grading_cases.QUICK_CASES), 0), report


def test_missing_contract_is_reported_clearly(tmp_path):
    mod = tmp_path / "mine.py"
    mod.write_text('NAME = "naive"\nMAX_K = None\n')
    rc, report = run_grade(mod, "--quick")
    assert rc == 1
    for line in ("MAX_V missing", "CHUNK_SIZES missing", "forward missing", "compile_targets missing"):
        assert re.search(r"FAIL\s+" + line, report), report
    assert "not run: the module does not meet the contract" in report
    assert summary(report) == (0, len(grading_cases.QUICK_CASES))
    assert "Traceback" not in report


def test_cli_grade_subcommand(tmp_path, capsys):
    mod = tmp_path / "broken.py"
    mod.write_text("NAME = 'naive'\ndef forward(:\n")
    assert cli.main(["grade", str(mod), "--quick"]) == 1
    out = capsys.readouterr().out
    assert "could not import" in out and "SyntaxError" in out and "broken.py:2" in out, out


def _mutant(tmp_path, old, new):
    """The package's r0 with one line changed (and an absolute import, as a student's file has)."""
    src = (RUNGS_DIR / "r0_naive.py").read_text().replace("from .._common", "from linattn_numba._common")
    assert old in src, f"r0_naive.py changed: update this test's mutant ({old!r})"
    path = tmp_path / "r0_mutant.py"
    path.write_text(src.replace(old, new))
    return path


MUTANTS = {
    "no-decay": ("S[b, h, i, j] = S[b, h, i, j] * decay", "S[b, h, i, j] = S[b, h, i, j]",
                 "the decay is missing"),
    "no-scale": ("o[b, t, h, j] = float32(scale) * acc", "o[b, t, h, j] = acc", "not multiplied by scale"),
    "writes-h0": ("S[b, h, i, j] = h0[b, h, i, j]", "S[b, h, i, j] = h0[b, h, i, j]; h0[b, h, i, j] = 0.0",
                  "kernel wrote an input: h0"),
    "no-guard": ("if j >= V:", "if False:", "IndexError"),
    "last-column": ("if j >= V:", "if j >= V - 1:", "some outputs never written"),
}


@pytest.mark.parametrize("mutant", MUTANTS)
def test_grader_names_the_mistake(tmp_path, mutant):
    old, new, hint = MUTANTS[mutant]
    rc, report = run_grade(_mutant(tmp_path, old, new), "--in-process", "--case", "gated_delta-B1T37")
    assert rc == 1
    assert summary(report) == (0, 1), report
    assert hint in report, report


def test_hanging_case_times_out(tmp_path):
    mod = tmp_path / "hang.py"
    mod.write_text(
        "import time\nNAME = 'naive'\nMAX_K = MAX_V = CHUNK_SIZES = None\n"
        "def forward(q, k, v, g, beta, o, h0, ht, scale, chunk_size=None, stream=0):\n"
        "    while True:\n        time.sleep(0.01)\n"
        "def compile_targets():\n    yield 'f', forward, ()\n"
    )
    rc, report = run_grade(mod, "--case", "B1T1H2", "--timeout", "2")  # the 4 cases with T = 1
    assert rc == 1
    assert report.count("TIMEOUT") == 2 and "deadlock" in report, report  # then it gives up on the rest
    assert "2 remaining cases not run after 2 timeouts in a row" in report, report
    assert summary(report) == (0, 4)
