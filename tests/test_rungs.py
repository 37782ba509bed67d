"""Every rung x recurrence x odd shape under the simulator, against the float64 oracle.

Each case calls the rung's ``forward`` directly with outputs pre-filled with NaN (an element the kernel forgets to
write fails the test), and checks that the inputs were not modified.
"""

import pytest

import linattn_numba as la
from linattn_numba import grading_cases, reference, rungs
from linattn_numba.grading_cases import CHUNK64_CASE, FP16_CASE, NO_STATE_CASE, ORACLE_CASES
from linattn_numba.testing import TOL_FP32, make_inputs, rel_err

# The cases (shapes, recurrences, seeds) live in linattn_numba.grading_cases: the grader
# (`linattn-numba grade`) runs the same ones against a student's module.


def run_forward(rung, inp, chunk_size=16, with_h0=True, with_ht=True):
    return grading_cases.run_forward(rungs.module(rung), inp, chunk_size, with_h0, with_ht)


@pytest.mark.parametrize("case", ORACLE_CASES, ids=str)
@pytest.mark.parametrize("rung", la.RUNGS)
def test_rung_matches_oracle(rung, case):
    inp = case.inputs()
    o, ht = run_forward(rung, inp)
    o_ref, h_ref = case.reference(inp)
    assert rel_err(o, o_ref) <= TOL_FP32, f"output: rel err {rel_err(o, o_ref):.2e}"
    assert rel_err(ht, h_ref) <= TOL_FP32, f"final state: rel err {rel_err(ht, h_ref):.2e}"


@pytest.mark.parametrize("rung", la.RUNGS)
def test_rung_without_state_buffers(rung):
    """No initial state (zeros) and no final state requested: still exact."""
    inp = NO_STATE_CASE.inputs()
    o, ht = run_forward(rung, inp, with_h0=False, with_ht=False)
    o_ref, _ = NO_STATE_CASE.reference(inp)
    assert ht is None
    assert rel_err(o, o_ref) <= TOL_FP32


@pytest.mark.parametrize("rung", la.RUNGS)
def test_rung_float16_inputs(rung):
    """float16 inputs are read and converted in the kernel; compute stays float32."""
    inp = FP16_CASE.inputs()
    o, ht = run_forward(rung, inp)
    o_ref, h_ref = FP16_CASE.reference(inp)
    assert rel_err(o, o_ref) <= TOL_FP32
    assert rel_err(ht, h_ref) <= TOL_FP32


@pytest.mark.parametrize("rung", la.RUNGS)
def test_rung_at_chunk_64(rung):
    """Chunks of 64 and a tail (the token-recurrent rungs ignore the chunk size)."""
    mod = rungs.module(rung)
    inp = CHUNK64_CASE.inputs()
    o, ht = run_forward(rung, inp, chunk_size=grading_cases.chunk_size_for(mod, CHUNK64_CASE.chunk))
    o_ref, h_ref = CHUNK64_CASE.reference(inp)
    assert rel_err(o, o_ref) <= TOL_FP32, f"output: rel err {rel_err(o, o_ref):.2e}"
    assert rel_err(ht, h_ref) <= TOL_FP32, f"final state: rel err {rel_err(ht, h_ref):.2e}"


@pytest.mark.parametrize("rung", la.RUNGS)
def test_rung_catches_a_wrong_answer(rung):
    """The comparison can fail: dropping the decay (a plausible bug) is far outside the tolerance."""
    inp = make_inputs(1, 16, 1, 8, 8, "decay", seed=7)
    o, _ = run_forward(rung, inp, with_h0=False, with_ht=False)
    o_wrong, _ = reference.recurrent(inp["q"], inp["k"], inp["v"])
    assert rel_err(o, o_wrong) > 100 * TOL_FP32
