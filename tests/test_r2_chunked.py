"""Rung r2 ``chunked``, called directly: its ``forward`` under the simulator against the float64 recurrence, and
every kernel variant compiled for sm_90 (the compile tier).

Simulator cost is dominated by the number of simulated threads (one Python thread each), so the cases are
tiny and the (K, V) shapes and the h0 / ht combinations are spread over the (recurrence, T, chunk) cases
instead of multiplied with them.
"""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # before anything imports numba (the package does)

import functools
import subprocess
import sys

import numpy as np
import pytest

from linattn_numba.rungs import r2_chunked as r2
from linattn_numba.testing import TOL_FP32, rel_err

import chunk_helpers  # tests/chunk_helpers.py

T_CHUNK = [(1, 16), (37, 16), (64, 16), (1, 32), (37, 32), (64, 32)]
KV = [(16, 8), (8, 32)]
H0_HT = [(True, True), (False, False), (True, False), (False, True)]
BH = [(1, 2), (2, 1)]


REC_FLAGS, make, oracle = chunk_helpers.REC_FLAGS, chunk_helpers.make, chunk_helpers.oracle
run = functools.partial(chunk_helpers.run, r2)  # (inp, chunk, with_h0, with_ht, with_o, scale, **forward kw)
check = functools.partial(chunk_helpers.check, r2)


CASES = chunk_helpers.spread_cases(T_CHUNK, KV, H0_HT, BH)


@pytest.mark.parametrize("recurrence,shape,chunk,with_h0,with_ht", CASES)
def test_matches_recurrent(recurrence, shape, chunk, with_h0, with_ht):
    check(make(*shape, recurrence, seed=sum(shape) + chunk), chunk, with_h0, with_ht)


@pytest.mark.parametrize("recurrence,chunk", [("gated_delta", 64), ("decay", 128)])
def test_large_chunks(recurrence, chunk):
    """C = 64 and 128 (the largest shared tile; T = 70 leaves a short last chunk, or a single short one);
    K = 12 and V = 20 are not multiples of the 16-row state slices or the 32-wide value tiles."""
    check(make(1, 70, 1, 12, 20, recurrence, seed=chunk), chunk)


@pytest.mark.parametrize("recurrence", list(REC_FLAGS))
def test_float16_inputs(recurrence):
    """float16 q, k, v are converted on load; the oracle sees the same rounded values, so float32 accuracy holds."""
    check(make(1, 20, 1, 12, 20, recurrence, dtype=np.float16, seed=1), 16)


def test_strided_inputs():
    """q, k, v, g, beta and h0 as non-contiguous device views (layout "A"), B = H = 2."""
    chunk_helpers.check_strided_inputs(r2)


def test_state_in_place():
    """h0 and ht the same array (how ``step`` uses a rung): read before it is overwritten."""
    chunk_helpers.check_state_in_place(r2, 16)


@pytest.mark.parametrize("with_h0", [True, False], ids=["h0", "no_h0"])
def test_empty_sequence(with_h0):
    """T = 0: no output elements; ht is h0 (or zeros)."""
    chunk_helpers.check_empty_sequence(r2, with_h0)


def test_strong_decay_stays_finite():
    """g = -20 on some tokens: exp(b_t - b_s) of in-chunk differences never overflows (no exp(-b_s))."""
    inp = make(1, 64, 1, 8, 8, "gated_delta", seed=4)
    inp["g"][:, ::5] = -20.0
    inp["g"][:, 30:40] = -20.0
    o, ht = run(inp, 32)
    assert np.isfinite(o).all() and np.isfinite(ht).all()
    o_ref, h_ref = oracle(inp)
    assert rel_err(o, o_ref) <= TOL_FP32 and rel_err(ht, h_ref) <= TOL_FP32


def test_catches_a_wrong_answer():
    """The comparison can fail: a delta rule run without beta (a plausible bug) is far off."""
    chunk_helpers.check_catches_a_wrong_answer(r2)


def test_rejects_bad_arguments():
    inp = make(1, 4, 1, 8, 8, "plain")
    for bad in (0, 8, 48, 256, None):
        with pytest.raises(ValueError, match="chunk_size"):
            run(inp, bad)
    big = make(1, 1, 1, r2.MAX_K + 1, 4, "plain")
    with pytest.raises(ValueError, match="K"):
        run(big, 16)


def test_module_contract():
    assert r2.NAME == "chunked"
    assert r2.MAX_K == 256 and r2.MAX_V is None
    assert r2.CHUNK_SIZES == (16, 32, 64, 128)
    labels = [label for label, _, _ in r2.compile_targets()]
    # 1 gates + 2 dtypes x (4 scores + 2 wu + 16 state + 4 output + state only: 2 scores + 8 state)
    assert len(labels) == len(set(labels)) == 73


_COMPILE_SCRIPT = """
import time
from numba import cuda
from linattn_numba.rungs import r2_chunked as r2
t0, bad, local = time.time(), [], []
targets = list(r2.compile_targets())
for label, fn, argtypes in targets:
    try:
        ptx, _ = cuda.compile_ptx(fn, argtypes, cc=(9, 0))
    except Exception as e:
        bad.append(f"{label}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        continue
    if "ld.local" in ptx or "st.local" in ptx:
        local.append(label)
print(f"compiled {len(targets) - len(bad)}/{len(targets)} in {time.time() - t0:.0f} s")
for b in bad:
    print("FAILED:", b)
for label in local:
    print("LOCAL MEMORY:", label)
"""


@pytest.mark.compile
def test_every_variant_compiles_for_sm90():
    """In a subprocess with the simulator off: compile_ptx every compile_targets() entry for cc 9.0, and check
    that no kernel keeps its register arrays (the state rows) in local memory."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    r = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "compiled 73/73" in out and "FAILED" not in out and "LOCAL MEMORY" not in out, out[-4000:]
