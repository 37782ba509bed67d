"""The public API: argument checking, NumPy / device round trips, step == attention, the no-GPU message."""

import os
import subprocess
import sys

import numpy as np
import pytest
from numba import cuda

import linattn_numba as la
from linattn_numba import reference
from linattn_numba.testing import TOL_FP32, make_inputs, rel_err


def _args(inp):
    return inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"]


@pytest.mark.parametrize("recurrence", reference.RECURRENCES)
def test_attention_numpy_roundtrip(recurrence):
    inp = make_inputs(1, 29, 2, 8, 12, recurrence, initial_state=True, seed=11)
    copies = {n: (None if a is None else a.copy()) for n, a in inp.items()}
    o, ht = la.attention(*_args(inp), initial_state=inp["initial_state"], output_final_state=True)
    assert isinstance(o, np.ndarray) and o.dtype == np.float32 and o.shape == (1, 29, 2, 12)
    assert isinstance(ht, np.ndarray) and ht.shape == (1, 2, 8, 12)
    o_ref, h_ref = reference.recurrent(*_args(inp), initial_state=inp["initial_state"])
    assert rel_err(o, o_ref) <= TOL_FP32
    assert rel_err(ht, h_ref) <= TOL_FP32
    for n, a in inp.items():
        if a is not None:
            np.testing.assert_array_equal(a, copies[n], err_msg=f"attention modified {n}")


def test_attention_device_arrays_in_device_out():
    inp = make_inputs(1, 9, 1, 8, 8, "delta", seed=2)
    d = [None if a is None else cuda.to_device(a) for a in _args(inp)]
    o, ht = la.attention(*d)
    assert ht is None
    assert hasattr(o, "copy_to_host") and not isinstance(o, np.ndarray)
    o_ref, _ = reference.recurrent(*_args(inp))
    assert rel_err(o.copy_to_host(), o_ref) <= TOL_FP32


def test_attention_float64_numpy_and_custom_scale():
    inp = make_inputs(1, 7, 1, 8, 4, "plain", dtype=np.float64, seed=4)
    o, _ = la.attention(inp["q"], inp["k"], inp["v"], scale=0.3, rung="naive")
    o_ref, _ = reference.recurrent(inp["q"], inp["k"], inp["v"], scale=0.3)
    assert o.dtype == np.float32 and rel_err(o, o_ref) <= TOL_FP32


def test_release_scratch_frees_the_kept_buffers():
    """A chunked rung keeps its scratch after a call; ``la.release_scratch()`` drops it, and later calls still
    compute the right answer (they allocate it again)."""
    from linattn_numba import _common

    inp = make_inputs(1, 40, 1, 8, 8, "gated_delta", seed=2)
    args = (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"])
    o_ref, _ = reference.recurrent(*args)
    la.release_scratch()
    assert not _common._scratch_cache
    o, _ = la.attention(*args, rung="shared", chunk_size=16)
    assert _common._scratch_cache  # kept for the next call
    la.release_scratch()
    assert not _common._scratch_cache
    o2, _ = la.attention(*args, rung="shared", chunk_size=16)
    assert rel_err(o, o_ref) <= TOL_FP32 and rel_err(o2, o_ref) <= TOL_FP32


def test_attention_empty_sequence():
    inp = make_inputs(1, 0, 2, 4, 4, "decay", initial_state=True)
    o, ht = la.attention(*_args(inp), initial_state=inp["initial_state"], output_final_state=True)
    assert o.shape == (1, 0, 2, 4)
    np.testing.assert_array_equal(ht, inp["initial_state"])


@pytest.mark.parametrize("recurrence", reference.RECURRENCES)
def test_step_equals_attention(recurrence):
    """T calls of step from a state == one attention call over T tokens from that state."""
    B, T, H, K, V = 2, 6, 1, 8, 12
    inp = make_inputs(B, T, H, K, V, recurrence, initial_state=True, seed=13)
    o_att, h_att = la.attention(*_args(inp), initial_state=inp["initial_state"], output_final_state=True)
    state = inp["initial_state"].copy()
    outs = []
    for t in range(T):
        gt = None if inp["g"] is None else inp["g"][:, t]
        bt = None if inp["beta"] is None else inp["beta"][:, t]
        outs.append(la.step(state, inp["q"][:, t], inp["k"][:, t], inp["v"][:, t], gt, bt))
    assert rel_err(np.stack(outs, axis=1), o_att) <= TOL_FP32
    assert rel_err(state, h_att) <= TOL_FP32


def test_step_device_state_in_place():
    inp = make_inputs(2, 1, 3, 8, 8, "gated_delta", initial_state=True, seed=17)
    dstate = cuda.to_device(inp["initial_state"])
    o = la.step(dstate, inp["q"][:, 0], inp["k"][:, 0], inp["v"][:, 0], inp["g"][:, 0], inp["beta"][:, 0])
    assert not isinstance(o, np.ndarray) and o.shape == (2, 3, 8)
    o_ref, h_ref = reference.recurrent(*_args(inp), initial_state=inp["initial_state"])
    assert rel_err(o.copy_to_host(), o_ref[:, 0]) <= TOL_FP32
    assert rel_err(dstate.copy_to_host(), h_ref) <= TOL_FP32


def test_step_rejects_non_float32_state():
    inp = make_inputs(1, 1, 1, 4, 4, "plain", initial_state=True)
    with pytest.raises(TypeError, match="state must be float32"):
        la.step(inp["initial_state"].astype(np.float64), inp["q"][:, 0], inp["k"][:, 0], inp["v"][:, 0])


# -- argument checking: each bad call raises, names the argument, and writes nothing ------------------------------

def _bad_calls():
    base = make_inputs(1, 5, 2, 4, 6, "gated_delta", initial_state=True, seed=1)

    def with_(**kw):
        d = {n: (None if a is None else a.copy()) for n, a in base.items()}
        d.update(kw)
        return d

    q = base["q"]
    g_pos = base["g"].copy()
    g_pos[0, 3, 1] = 0.5
    beta_big = base["beta"].copy()
    beta_big[0, 0, 0] = 1.5
    q_nan = q.copy()
    q_nan[0, 2, 1, 3] = np.nan
    return [
        ("q 3-D", with_(q=q[0]), ValueError, r"q must have shape \[B, T, H, K\]"),
        ("k shape", with_(k=base["k"][:, :4]), ValueError, r"k must have shape"),
        ("v shape", with_(v=base["v"][:, :, :1]), ValueError, r"v must have shape"),
        ("g shape", with_(g=base["g"][..., None]), ValueError, r"g must have shape \[B, T, H\]"),
        ("beta shape", with_(beta=base["beta"][:, :2]), ValueError, r"beta must have shape"),
        ("state shape", with_(initial_state=base["initial_state"][:, :, :2]), ValueError, r"initial_state must"),
        ("int dtype", with_(q=q.astype(np.int32)), TypeError, r"q .*dtype"),
        ("g > 0", with_(g=g_pos), ValueError, r"g must be <= 0"),
        ("beta > 1", with_(beta=beta_big), ValueError, r"beta must be <= 1"),
        ("nan", with_(q=q_nan), ValueError, r"q has a non-finite value"),
    ]


@pytest.mark.parametrize("case", _bad_calls(), ids=lambda c: c[0])
def test_bad_arguments_raise_clearly(case):
    _, d, exc, pattern = case
    before = {n: (None if a is None else a.copy()) for n, a in d.items()}
    with pytest.raises(exc, match=pattern):
        la.attention(d["q"], d["k"], d["v"], d["g"], d["beta"], initial_state=d["initial_state"])
    for n, a in d.items():
        if a is not None:
            np.testing.assert_array_equal(a, before[n])


def test_validate_false_skips_value_checks_only():
    inp = make_inputs(1, 4, 1, 4, 4, "decay")
    g = inp["g"].copy()
    g[0, 0, 0] = 0.1  # invalid, but validate=False trusts the caller
    la.attention(inp["q"], inp["k"], inp["v"], g, validate=False)
    with pytest.raises(ValueError, match="v must have shape"):
        la.attention(inp["q"], inp["k"], inp["v"][:, :, :, None], validate=False)


def test_rung_selection():
    inp = make_inputs(1, 4, 1, 4, 4, "plain")
    with pytest.raises(ValueError, match="rung must be"):
        la.attention(inp["q"], inp["k"], inp["v"], rung="fastest")
    assert la.RUNGS[:2] == ("naive", "recurrent")
    assert la.auto_rung(64, 64, 64) in la.RUNGS
    # measured on the H200: the tensor-core chunked rung for the additive recurrences, the token recurrence for
    # the delta family (figures/data)
    assert la.auto_rung(64, 64, 64) == "tensor_cores"
    assert la.auto_rung(64, 64, 64, "decay") == "tensor_cores"
    assert la.auto_rung(64, 64, 64, "decay", chunk_size=16) == "shared"  # r6's pipelined output kernel needs C >= 32
    assert la.auto_rung(64, 64, 64, "gated_delta") == "recurrent"
    assert la.auto_rung(64, 256, 64, "delta") == "chunked"  # beyond r1's and r3's K limits
    assert la.auto_rung(64, 512, 64) == "naive"
    assert la.auto_rung(64, 64, 64, "plain", chunk_size=128) == "recurrent"  # r3 offers C <= 64; r1 has no chunks
    with pytest.raises(ValueError, match="recurrence"):
        la.auto_rung(64, 64, 64, "softmax")
    # with B and H: the scan for few heads over a long sequence (measured at B1 H2: 15x / 5.5x faster than r3),
    # the sequential choice at the standard shape (the scan's model picks one segment) and where r1 still wins
    assert la.auto_rung(1048576, 128, 128, "decay", B=1, H=2) == "scan"
    assert la.auto_rung(262144, 128, 128, "gated_delta", B=1, H=2) == "scan"
    assert la.auto_rung(65536, 128, 128, "decay", B=1, H=16) == "scan"
    assert la.auto_rung(8192, 128, 128, "decay", B=4, H=16) == "tensor_cores"
    assert la.auto_rung(8192, 128, 128, "gated_delta", B=4, H=16) == "recurrent"
    assert la.auto_rung(8192, 128, 128, "gated_delta", B=2, H=16) == "recurrent"  # r1 half full still beats it
    assert la.auto_rung(64, 128, 128, "decay", B=1, H=1) == "tensor_cores"  # one chunk: nothing to split
    assert la.auto_rung(1048576, 256, 128, "decay", B=1, H=2) == "chunked"  # beyond the estimates' K range
    big_k = make_inputs(1, 3, 1, 160, 4, "plain")
    with pytest.raises(ValueError, match="supports K <= 128"):
        la.attention(big_k["q"], big_k["k"], big_k["v"], rung="recurrent")


def test_no_gpu_message_without_simulator():
    """Without a GPU and without the simulator, a call says how to use the simulator."""
    code = (
        "import numpy as np, linattn_numba as la\n"
        "from numba import cuda\n"
        "import sys\n"
        "if cuda.is_available(): sys.exit(3)\n"
        "x = np.zeros((1, 2, 1, 4), np.float32)\n"
        "try:\n"
        "    la.attention(x, x, x)\n"
        "except RuntimeError as e:\n"
        "    print(e); sys.exit(0 if 'NUMBA_ENABLE_CUDASIM=1' in str(e) else 4)\n"
        "sys.exit(5)\n"
    )
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    if r.returncode == 3:
        pytest.skip("a GPU is present")
    assert r.returncode == 0, r.stdout + r.stderr


def test_auto_uses_the_scan_for_few_heads_and_many_chunks(monkeypatch):
    """rung="auto" passes B and H: one head over 10 chunks picks r4 (2 segments), and the result is the oracle's.
    (C = 32: blocks of 64 threads, a quarter of C = 64's simulated threads.)"""
    from linattn_numba import api, rungs

    B, T, H, K, V = 1, 300, 1, 8, 8
    assert la.auto_rung(T, K, V, "decay", 32, B=B, H=H) == "scan"
    used = []
    real = rungs.module

    def spy(name):
        used.append(name)
        return real(name)

    monkeypatch.setattr(api.rungs, "module", spy)
    inp = make_inputs(B, T, H, K, V, "decay", initial_state=True, seed=2)
    o, ht = la.attention(inp["q"], inp["k"], inp["v"], inp["g"], initial_state=inp["initial_state"],
                         output_final_state=True, chunk_size=32)
    assert "scan" in used
    o_ref, h_ref = reference.recurrent(inp["q"], inp["k"], inp["v"], inp["g"], initial_state=inp["initial_state"])
    assert rel_err(o, o_ref) <= TOL_FP32 and rel_err(ht, h_ref) <= TOL_FP32
