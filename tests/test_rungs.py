"""Every rung x recurrence x odd shape under the simulator, against the float64 oracle.

Each case calls the rung's ``forward`` directly with outputs pre-filled with NaN (an element the kernel forgets to
write fails the test), and checks that the inputs were not modified.
"""

import numpy as np
import pytest
from numba import cuda

import linattn_numba as la
from linattn_numba import reference, rungs
from linattn_numba.testing import TOL_FP32, make_inputs, rel_err

# (B, T, H, K, V): T = 1; T not a multiple of any chunk; K != V both ways; a full chunk plus a tail.
SHAPES = [
    (1, 1, 2, 8, 8),
    (1, 37, 2, 16, 8),
    (2, 21, 1, 8, 20),
    (1, 70, 1, 12, 16),
]


def _case_id(shape):
    return "B{}T{}H{}K{}V{}".format(*shape)


def run_forward(rung, inp, chunk_size=16, with_h0=True, with_ht=True):
    mod = rungs.module(rung)
    q, k, v = inp["q"], inp["k"], inp["v"]
    B, T, H, K = q.shape
    V = v.shape[3]
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    o = cuda.to_device(np.full((B, T, H, V), np.nan, np.float32))
    ht = cuda.to_device(np.full((B, H, K, V), np.nan, np.float32)) if with_ht else None
    h0 = d["initial_state"] if with_h0 else None
    mod.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, h0, ht, K**-0.5, chunk_size)
    for n, a in inp.items():  # the kernel never writes its inputs
        if a is not None:
            np.testing.assert_array_equal(d[n].copy_to_host(), a, err_msg=f"{rung} modified input {n}")
    return o.copy_to_host(), (ht.copy_to_host() if with_ht else None)


@pytest.mark.parametrize("shape", SHAPES, ids=_case_id)
@pytest.mark.parametrize("recurrence", reference.RECURRENCES)
@pytest.mark.parametrize("rung", la.RUNGS)
def test_rung_matches_oracle(rung, recurrence, shape):
    inp = make_inputs(*shape, recurrence, initial_state=True, seed=hash((rung, recurrence, shape)) % 2**32)
    o, ht = run_forward(rung, inp)
    o_ref, h_ref = reference.recurrent(
        inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], initial_state=inp["initial_state"]
    )
    assert rel_err(o, o_ref) <= TOL_FP32, f"output: rel err {rel_err(o, o_ref):.2e}"
    assert rel_err(ht, h_ref) <= TOL_FP32, f"final state: rel err {rel_err(ht, h_ref):.2e}"


@pytest.mark.parametrize("rung", la.RUNGS)
def test_rung_without_state_buffers(rung):
    """No initial state (zeros) and no final state requested: still exact."""
    inp = make_inputs(1, 19, 2, 8, 12, "gated_delta", seed=3)
    o, ht = run_forward(rung, inp, with_h0=False, with_ht=False)
    o_ref, _ = reference.recurrent(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"])
    assert ht is None
    assert rel_err(o, o_ref) <= TOL_FP32


@pytest.mark.parametrize("rung", la.RUNGS)
def test_rung_float16_inputs(rung):
    """float16 inputs are read and converted in the kernel; compute stays float32."""
    inp = make_inputs(1, 23, 1, 16, 8, "gated_delta", dtype=np.float16, initial_state=True, seed=5)
    o, ht = run_forward(rung, inp)
    o_ref, h_ref = reference.recurrent(
        inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], initial_state=inp["initial_state"]
    )
    assert rel_err(o, o_ref) <= TOL_FP32
    assert rel_err(ht, h_ref) <= TOL_FP32


@pytest.mark.parametrize("rung", la.RUNGS)
def test_rung_catches_a_wrong_answer(rung):
    """The comparison can fail: dropping the decay (a plausible bug) is far outside the tolerance."""
    inp = make_inputs(1, 16, 1, 8, 8, "decay", seed=7)
    o, _ = run_forward(rung, inp, with_h0=False, with_ht=False)
    o_wrong, _ = reference.recurrent(inp["q"], inp["k"], inp["v"])
    assert rel_err(o, o_wrong) > 100 * TOL_FP32
