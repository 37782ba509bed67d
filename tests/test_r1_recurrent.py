"""Rung r1 ``recurrent``, called directly with launch knobs other than the tuned defaults (the bench's ``--tune``
may pick any of them), under the simulator against the float64 recurrence.

tests/test_rungs.py covers the defaults on every oracle shape; here each case picks a launch shape that reaches a
code path the defaults do not: several staged tiles, the generic (non-divisible) staging walk, lanes holding
more than one column, a tile shorter than a warp, and the decode-step kernel's column and warp splits.
Simulated threads are Python threads, so the cases keep blocks small (one or two warps).
"""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # before anything imports numba (the package does)

import numpy as np
import pytest
from numba import cuda

from linattn_numba import reference
from linattn_numba.rungs import r1_recurrent as r1
from linattn_numba.testing import TOL_FP32, make_inputs, rel_err


def _run(shape, recurrence, seed, **knobs):
    B, T, H, K, V = shape
    inp = make_inputs(B, T, H, K, V, recurrence, initial_state=True, seed=seed)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    o = cuda.to_device(np.full((B, T, H, V), np.nan, np.float32))  # an element never written stays NaN
    ht = cuda.to_device(np.full((B, H, K, V), np.nan, np.float32))
    r1.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, d["initial_state"], ht, K**-0.5, **knobs)
    o_ref, h_ref = reference.recurrent(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"],
                                       initial_state=inp["initial_state"])
    return rel_err(o.copy_to_host(), o_ref), rel_err(ht.copy_to_host(), h_ref)


SEQ_CASES = [
    # (shape B, T, H, K, V), recurrence, knobs
    ((1, 19, 1, 12, 20), "gated_delta", dict(ns=4, cols=2, nw=1, tc=8)),  # 3 tiles, the last one short
    ((1, 19, 2, 40, 30), "delta", dict(ns=4, cols=3, nw=1, tc=8)),  # generic staging walk for k/q and v
    ((2, 9, 1, 8, 12), "decay", dict(ns=16, cols=4, nw=1, tc=4)),  # 16 lanes per column, K < rows covered
    ((1, 11, 1, 16, 8), "plain", dict(ns=2, cols=2, nw=2, tc=32)),  # 2 lanes per column, a warp past V
]


@pytest.mark.parametrize("shape,recurrence,knobs", SEQ_CASES, ids=lambda x: str(x))
def test_sequence_kernel_launch_shapes(shape, recurrence, knobs):
    e_o, e_h = _run(shape, recurrence, seed=sum(shape), **knobs)
    assert e_o <= TOL_FP32, f"output: rel err {e_o:.2e}"
    assert e_h <= TOL_FP32, f"final state: rel err {e_h:.2e}"


STEP_CASES = [
    dict(sw=8, cs=4, smb=2),  # the tuned default: 4 columns per lane (V = 70 leaves most of them masked)
    dict(sw=2, cs=2, smb=1),  # rows split over 2 warps, 6 rows each
    dict(sw=4, cs=1, smb=1),  # K = 12 over 4 warps of 3 rows
]


@pytest.mark.parametrize("knobs", STEP_CASES, ids=str)
def test_step_kernel_launch_shapes(knobs):
    e_o, e_h = _run((2, 1, 1, 12, 70), "gated_delta", seed=4, **knobs)
    assert e_o <= TOL_FP32 and e_h <= TOL_FP32, (e_o, e_h)


def test_more_columns_per_lane_than_lanes_is_rejected():
    inp = make_inputs(1, 4, 1, 8, 8, "plain")
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    o = cuda.device_array((1, 4, 1, 8), np.float32)
    with pytest.raises(ValueError, match="cols"):
        r1.forward(d["q"], d["k"], d["v"], None, None, o, None, None, 1.0, ns=2, cols=4)
