"""The oracle cases every rung must pass, shared by ``tests/test_rungs.py`` and the grader (``linattn_numba.grade``).

A case is a recurrence, a shape and the state buffers to pass. :func:`run_forward` calls a rung module's
``forward`` the way the tests do -- device copies of the inputs, outputs pre-filled with NaN (an element the
kernel forgets to write stays NaN and fails), and afterwards a check that no input was modified -- and
:func:`run_case` does that for one :class:`Case`, compares with :func:`linattn_numba.reference.recurrent` and, when
the case fails, says what the failure most likely is (:func:`diagnose`).

This module imports numba (through the package); under no GPU, set ``NUMBA_ENABLE_CUDASIM=1`` before importing it.
"""

from __future__ import annotations

import time
import traceback
import zlib
from dataclasses import asdict, dataclass, field

import numpy as np

from . import reference
from .reference import RECURRENCES
from .testing import TOL_FP32, make_inputs, rel_err

# (B, T, H, K, V): T = 1; T not a multiple of any chunk; K != V both ways; a full chunk plus a tail.
SHAPES = [
    (1, 1, 2, 8, 8),
    (1, 37, 2, 16, 8),
    (2, 21, 1, 8, 20),
    (1, 70, 1, 12, 16),
]

DEFAULT_CHUNK = 16  # the chunk size the tests pass (ignored by the token-recurrent rungs)


def shape_id(shape) -> str:
    return "B{}T{}H{}K{}V{}".format(*shape)


@dataclass(frozen=True)
class Case:
    """One oracle case. ``str(case)`` is its id (used as the pytest id and in the grader's report)."""

    recurrence: str
    shape: tuple
    with_h0: bool = True  # pass an initial state
    with_ht: bool = True  # ask for the final state
    dtype: str = "float32"  # of q, k, v, g, beta
    tag: str = ""
    seed: int | None = None  # default: derived from the id, so a case always has the same inputs
    chunk: int | None = None  # the chunk size to ask for (None: DEFAULT_CHUNK); rungs without it use theirs

    @property
    def id(self) -> str:
        return f"{self.recurrence}-{shape_id(self.shape)}" + (f"-{self.tag}" if self.tag else "")

    def __str__(self) -> str:
        return self.id

    def inputs(self) -> dict:
        """The case's inputs (NumPy), as :func:`linattn_numba.testing.make_inputs` draws them."""
        seed = zlib.crc32(self.id.encode()) if self.seed is None else self.seed
        return make_inputs(*self.shape, self.recurrence, dtype=np.dtype(self.dtype).type,
                           initial_state=self.with_h0, seed=seed)

    def reference(self, inp):
        """``(o, final_state)`` from the float64 recurrence, with the case's default scale ``K ** -0.5``."""
        h0 = inp["initial_state"] if self.with_h0 else None
        return reference.recurrent(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], initial_state=h0)


# Every recurrence x every odd shape, with an initial state and the final state requested.
ORACLE_CASES = [Case(rec, shape) for rec in RECURRENCES for shape in SHAPES]
# No initial state (zeros) and no final state requested: a kernel must not touch the stand-in arrays.
NO_STATE_CASE = Case("gated_delta", (1, 19, 2, 8, 12), with_h0=False, with_ht=False, tag="nostate", seed=3)
# float16 inputs: read and converted to float32 in the kernel; compute stays float32.
FP16_CASE = Case("gated_delta", (1, 23, 1, 16, 8), dtype="float16", tag="fp16", seed=5)
# Chunks of 64 with a tail: the blocked paths that chunks of 16 never reach (e.g. r3's (I + L)^-1 is one 16 x 16
# diagonal block at C = 16, and its off-diagonal block rows only run from C = 32 on).
CHUNK64_CASE = Case("gated_delta", (1, 150, 1, 16, 8), tag="c64", seed=11, chunk=64)
CASES = ORACLE_CASES + [NO_STATE_CASE, FP16_CASE, CHUNK64_CASE]
# --quick: each recurrence once and each shape once.
QUICK_CASES = [Case(rec, shape) for rec, shape in zip(RECURRENCES, SHAPES)]


def chunk_size_for(module, wanted=None) -> int:
    """The chunk size to pass to ``module.forward``: ``wanted`` (default the tests' 16) unless the rung's
    CHUNK_SIZES excludes it, then the rung's smallest."""
    wanted = DEFAULT_CHUNK if wanted is None else wanted
    sizes = getattr(module, "CHUNK_SIZES", None)
    if not sizes or wanted in sizes:
        return wanted
    return min(sizes)


def launch(module, inp, chunk_size=DEFAULT_CHUNK, with_h0=True, with_ht=True, scale=None):
    """``module.forward`` on device copies of ``inp`` with NaN-filled outputs.

    Returns ``(o, ht or None, modified)``, NumPy arrays, with ``modified`` the names of the inputs the call changed.
    """
    from numba import cuda

    q, v = inp["q"], inp["v"]
    B, T, H, K = q.shape
    V = v.shape[3]
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    o = cuda.to_device(np.full((B, T, H, V), np.nan, np.float32))
    ht = cuda.to_device(np.full((B, H, K, V), np.nan, np.float32)) if with_ht else None
    h0 = d["initial_state"] if with_h0 else None
    scale = K**-0.5 if scale is None else scale
    module.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, h0, ht, scale, chunk_size)
    o_host = o.copy_to_host()
    ht_host = ht.copy_to_host() if with_ht else None
    modified = [n for n, a in inp.items() if a is not None and not np.array_equal(d[n].copy_to_host(), a)]
    return o_host, ht_host, modified


def run_forward(module, inp, chunk_size=DEFAULT_CHUNK, with_h0=True, with_ht=True):
    """:func:`launch` for the tests: ``(o, ht or None)``; raises AssertionError when an input was modified."""
    o, ht, modified = launch(module, inp, chunk_size, with_h0, with_ht)
    if modified:  # the kernel never writes its inputs
        raise AssertionError(f"{getattr(module, 'NAME', module.__name__)} modified input {', '.join(modified)}")
    return o, ht


@dataclass
class CaseResult:
    id: str
    passed: bool
    err_o: float | None = None  # rel_err of the output (None: not computed)
    err_ht: float | None = None  # rel_err of the final state (None: not requested or not computed)
    seconds: float = 0.0
    hints: list = field(default_factory=list)  # what is wrong, most specific first
    output: str = ""  # what the rung printed during the case (filled in by the grader)

    def to_dict(self) -> dict:
        return asdict(self)


def run_case(module, case: Case, chunk_size=None, source=None) -> CaseResult:
    """Run ``case`` against ``module`` and judge it; never raises for a failure of the module under test.

    ``source`` (the module's file) lets an exception be located in the student's code.
    """
    chunk_size = chunk_size_for(module, case.chunk) if chunk_size is None else chunk_size
    inp = case.inputs()
    o_ref, h_ref = case.reference(inp)
    t0 = time.perf_counter()
    try:
        o, ht, modified = launch(module, inp, chunk_size, case.with_h0, case.with_ht)
    except Exception as e:  # noqa: BLE001 - the module under test may raise anything
        return CaseResult(case.id, False, seconds=time.perf_counter() - t0, hints=describe_exception(e, source))
    seconds = time.perf_counter() - t0
    err_o = rel_err(o, o_ref)
    err_ht = rel_err(ht, h_ref) if case.with_ht else None
    passed = err_o <= TOL_FP32 and (err_ht is None or err_ht <= TOL_FP32) and not modified
    hints = [] if passed else diagnose(case, inp, o, ht, o_ref, h_ref, modified)
    return CaseResult(case.id, passed, err_o, err_ht, seconds, hints)


# ---------------------------------------------------------------------------------------------- diagnosis

def describe_exception(e: BaseException, source=None) -> list:
    """Report lines for an exception raised by ``forward`` or its kernel: what, where, and a likely cause."""
    import os

    msg = f"{type(e).__name__}: {e}".strip()
    lines = [f"raised {msg[:400]}"]
    if isinstance(e, SyntaxError) and e.filename:
        lines.append(f"at {os.path.basename(e.filename)}:{e.lineno}: {(e.text or '').strip()}")
        return lines
    frames = traceback.extract_tb(e.__traceback__)
    where = None
    if source is not None:
        src = os.path.realpath(source)
        mine = [f for f in frames if os.path.realpath(f.filename) == src]
        where = mine[-1] if mine else None
    if where is None and frames:
        where = frames[-1]
    if where is not None:
        lines.append(f"at {os.path.basename(where.filename)}:{where.lineno}: {(where.line or '').strip()}")
    if isinstance(e, IndexError):
        lines.append("an index out of bounds: threads past the edge of the problem (j >= V, i >= K, t >= T) must "
                     "not load or store; when g / beta / h0 are absent their arguments are 1-element stand-ins")
    elif isinstance(e, (NameError, AttributeError)):
        lines.append("a name that does not exist in kernel code: a typo, or an intrinsic the simulator lacks")
    elif isinstance(e, ZeroDivisionError):
        lines.append("a division by zero in index arithmetic: a tile or block size that is 0 for this shape?")
    elif isinstance(e, TypeError):
        lines.append("a call with the wrong arguments or types: check the kernel's parameter list against the launch")
    return lines


def _ranges(idx) -> str:
    """[0, 1, 2, 5, 7, 8] -> '0-2, 5, 7-8' (at most 6 ranges shown)."""
    idx = sorted(set(int(i) for i in idx))
    out, start = [], None
    for i, x in enumerate(idx):
        if start is None:
            start = x
        if i + 1 == len(idx) or idx[i + 1] != x + 1:
            out.append(f"{start}" if start == x else f"{start}-{x}")
            start = None
    return ", ".join(out[:6]) + (f", ... ({len(out)} ranges)" if len(out) > 6 else "")


def _where(mask, name, axes) -> str:
    """Describe where ``mask`` (bool, one axis per name in ``axes``) is True: which indices along each axis."""
    first = tuple(int(i) for i in np.argwhere(mask)[0])
    parts = []
    for ax, label in enumerate(axes):
        hit = np.flatnonzero(mask.any(axis=tuple(a for a in range(mask.ndim) if a != ax)))
        if len(hit) < mask.shape[ax]:
            parts.append(f"{label} {_ranges(hit)} of 0-{mask.shape[ax] - 1}")
    at = f"{name}[{', '.join(map(str, first))}]"
    return f"first at {at}" + (f"; only {'; '.join(parts)}" if parts else "; across every index")


_O_AXES = ("b", "t", "h", "column j")
_S_AXES = ("b", "h", "row i", "column j")


def _variant(inp, with_h0, *, drop_g=False, g_linear=False, drop_beta=False, beta_one=False, kS_before_decay=False,
             drop_h0=False, scale_pow=1, out_before_update=False):
    """The recurrence with one plausible mistake switched on (float64), for matching a wrong answer to a cause."""
    q, k, v = (np.asarray(inp[n], np.float64) for n in ("q", "k", "v"))
    g = None if inp["g"] is None or drop_g else np.asarray(inp["g"], np.float64)
    beta = None if inp["beta"] is None or drop_beta else np.asarray(inp["beta"], np.float64)
    if beta is not None and beta_one:
        beta = np.ones_like(beta)
    B, T, H, K = q.shape
    V = v.shape[3]
    S = np.zeros((B, H, K, V)) if (not with_h0 or drop_h0) else np.array(inp["initial_state"], np.float64)
    scale = (K**-0.5) ** scale_pow
    o = np.empty((B, T, H, V))
    for t in range(T):
        qt, kt, vt = q[:, t], k[:, t], v[:, t]
        if out_before_update:
            o[:, t] = scale * np.einsum("bhk,bhkv->bhv", qt, S)
        if beta is not None and kS_before_decay:
            kS = np.einsum("bhk,bhkv->bhv", kt, S)
        if g is not None:
            gt = g[:, t] if g_linear else np.exp(g[:, t])
            S = S * gt[:, :, None, None]
        if beta is not None:
            if not kS_before_decay:
                kS = np.einsum("bhk,bhkv->bhv", kt, S)
            S = S + np.einsum("bhk,bhv->bhkv", kt, beta[:, t][:, :, None] * (vt - kS))
        else:
            S = S + np.einsum("bhk,bhv->bhkv", kt, vt)
        if not out_before_update:
            o[:, t] = scale * np.einsum("bhk,bhkv->bhv", qt, S)
    return o, S


def _suspects(case, inp):
    """(description, variant kwargs) of the plausible mistakes that apply to this case."""
    has_g, has_beta = inp["g"] is not None, inp["beta"] is not None
    out = []
    if has_g:
        out.append(("the decay is missing: multiply the state by exp(g_t) before the token's update",
                    dict(drop_g=True)))
        out.append(("g is a log-space decay: the state is multiplied by exp(g_t), not by g_t", dict(g_linear=True)))
    if has_beta:
        out.append(("wrong recurrence: beta is given but the update is additive (the delta rule first removes "
                    "beta_t k_t (k_t . S) from the state)", dict(drop_beta=True)))
        out.append(("the delta-rule correction is there but beta_t is not applied", dict(beta_one=True)))
        if has_g:
            out.append(("decay in the wrong order: k_t . S must use the decayed state exp(g_t) S "
                        "(u = beta (v - k . (exp(g) S)))", dict(kS_before_decay=True)))
    if case.with_h0:
        out.append(("the initial state h0 is not read: the kernel starts from zeros", dict(drop_h0=True)))
    out.append(("the output is not multiplied by scale", dict(scale_pow=0)))
    out.append(("scale is applied twice", dict(scale_pow=2)))
    out.append(("off by one token: o_t is computed from the state before token t's update "
                "(the definition uses S after it)", dict(out_before_update=True)))
    return out


def diagnose(case, inp, o, ht, o_ref, h_ref, modified) -> list:
    """Likely causes of a failed case, as report lines (most specific first)."""
    hints = []
    if modified:
        names = ["h0 (initial_state)" if n == "initial_state" else n for n in modified]
        hints.append(f"kernel wrote an input: {', '.join(names)} changed (inputs are read-only; the state is "
                     f"updated in ht or in scratch memory)")
    written_ok = True
    arrays = [(n, a, ax) for n, a, ax in (("o", o, _O_AXES), ("ht", ht, _S_AXES)) if a is not None]
    untouched = [n for n, a, _ in arrays if np.isnan(a).all()]
    if untouched:
        written_ok = False
        hints.append(f"some outputs never written: {' and '.join(untouched)} still entirely NaN (nothing written) "
                     f"-- is the kernel body still `pass`? is it launched? does it write {' and '.join(untouched)}?")
    for name, a, axes in arrays:
        if name in untouched:
            continue
        nan = np.isnan(a)
        if nan.any():
            written_ok = False
            hints.append(f"some outputs never written: {name} has {int(nan.sum())} of {a.size} elements still NaN, "
                         + _where(nan, name, axes) + " (a thread map that misses some indices, or a computed NaN)")
        elif not np.isfinite(a).all():
            written_ok = False
            hints.append(f"{name} holds inf: an overflow (exp of a positive number? a state that grows without bound?)")
    if not written_ok:
        return hints
    err_o = rel_err(o, o_ref)
    err_ht = rel_err(ht, h_ref) if ht is not None else 0.0
    if err_o <= TOL_FP32 and err_ht <= TOL_FP32:
        return hints  # only the input check failed
    loose = 10 * TOL_FP32
    for text, kw in _suspects(case, inp):
        o_alt, h_alt = _variant(inp, case.with_h0, **kw)
        if rel_err(o, o_alt) <= loose and (ht is None or rel_err(ht, h_alt) <= loose):
            hints.append(text)
            return hints
    denom_o = max(float(np.abs(o_ref).max()), 1e-30)
    if err_o > TOL_FP32:
        bad = np.abs(o - o_ref) / denom_o > TOL_FP32
        hints.append(f"o wrong (rel err {err_o:.1e}): {_where(bad, 'o', _O_AXES)}")
        if ht is not None and err_ht <= TOL_FP32:
            hints.append("the final state is right but the output is not: check o_t = scale * S^T q_t (S after "
                         "token t's update, every column written by exactly one lane)")
    if ht is not None and err_ht > TOL_FP32:
        bad = np.abs(ht - h_ref) / max(float(np.abs(h_ref).max()), 1e-30) > TOL_FP32
        hints.append(f"ht wrong (rel err {err_ht:.1e}): {_where(bad, 'ht', _S_AXES)}")
        if err_o <= TOL_FP32:
            hints.append("the output is right but the final state is not: ht must hold S after the last token")
    worst = max(err_o, err_ht)
    if worst >= 1e-2:
        hints.append("error ~1: wrong recurrence / missing decay, a wrong index (b, h, t, i, j), a race on shared "
                     "memory (a missing barrier) or a lost token")
    elif worst <= 100 * TOL_FP32:
        hints.append("close but over the tolerance: accumulate in float32, convert float16 inputs with float32(...) "
                     "before any arithmetic, keep intermediate values in float32")
    return hints
