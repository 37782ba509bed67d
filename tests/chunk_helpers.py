"""Helpers shared by the chunked rungs' own test files (test_r2_chunked, test_r3_shared, test_r5_warp_roles,
test_r6_tensor_cores).

Each calls a rung module's ``forward`` directly on device copies of tiny inputs under the simulator, with outputs
pre-filled with NaN (an element a kernel forgets to write fails the comparison) and a check that no input was
written, and compares with the float64 recurrence. Test files bind ``module`` with ``functools.partial``.
"""

import numpy as np
import pytest
from numba import cuda

from linattn_numba import reference
from linattn_numba.testing import TOL_FP32, rel_err

REC_FLAGS = {"plain": (False, False), "decay": (True, False), "delta": (False, True), "gated_delta": (True, True)}


def make(B, T, H, K, V, recurrence, *, dtype=np.float32, seed=0):
    """Unit-norm keys, g = log(uniform(0.5, 1)) (a strong decay: a wrong gate index shows), beta in [0, 1]."""
    has_g, has_beta = REC_FLAGS[recurrence]
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, T, H, K))
    k = rng.standard_normal((B, T, H, K))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((B, T, H, V))
    g = np.log(rng.uniform(0.5, 1.0, (B, T, H))).astype(np.float32) if has_g else None
    beta = rng.uniform(0.0, 1.0, (B, T, H)).astype(np.float32) if has_beta else None
    h0 = (0.5 * rng.standard_normal((B, H, K, V))).astype(np.float32)
    return dict(q=q.astype(dtype), k=k.astype(dtype), v=v.astype(dtype), g=g, beta=beta, h0=h0)


def run(module, inp, chunk, with_h0=True, with_ht=True, with_o=True, scale=None, **kw):
    """``module.forward`` on device copies, outputs pre-filled with NaN; checks that no input was written.
    ``kw`` goes to ``forward`` (e.g. r3's ``bv``). Returns ``(o or None, ht or None)`` as NumPy arrays."""
    B, T, H, K = inp["q"].shape
    V = inp["v"].shape[3]
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    o = cuda.to_device(np.full((B, T, H, V), np.nan, np.float32)) if with_o else None
    ht = cuda.to_device(np.full((B, H, K, V), np.nan, np.float32)) if with_ht else None
    scale = K**-0.5 if scale is None else scale
    module.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, d["h0"] if with_h0 else None, ht, scale, chunk,
                   **kw)
    for n, a in inp.items():
        if a is not None:
            np.testing.assert_array_equal(d[n].copy_to_host(), a, err_msg=f"forward modified input {n}")
    return (o.copy_to_host() if with_o else None), (ht.copy_to_host() if with_ht else None)


def oracle(inp, with_h0=True, scale=None):
    return reference.recurrent(
        inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], scale=scale, initial_state=inp["h0"] if with_h0 else None
    )


def check(module, inp, chunk, with_h0=True, with_ht=True, tol=TOL_FP32, **kw):
    o, ht = run(module, inp, chunk, with_h0, with_ht, **kw)
    o_ref, h_ref = oracle(inp, with_h0)
    assert rel_err(o, o_ref) <= tol, f"output: rel err {rel_err(o, o_ref):.2e}"
    if with_ht:
        assert rel_err(ht, h_ref) <= tol, f"final state: rel err {rel_err(ht, h_ref):.2e}"


def spread_cases(t_chunk, kv, h0_ht, bh):
    """pytest params (recurrence, shape, chunk, with_h0, with_ht): every recurrence x every (T, chunk), with the
    (K, V) shapes, h0 / ht combinations and (B, H) spread over them instead of multiplied with them (the
    simulator's cost grows with every simulated thread)."""
    cases = []
    for ri, rec in enumerate(REC_FLAGS):
        for j, (T, C) in enumerate(t_chunk):
            K, V = kv[(j + ri) % len(kv)]
            with_h0, with_ht = h0_ht[(j + ri) % len(h0_ht)]
            B, H = bh[(j // 2 + ri) % len(bh)]
            case_id = f"{rec}-B{B}T{T}H{H}K{K}V{V}-C{C}-h0{with_h0:d}ht{with_ht:d}"
            cases.append(pytest.param(rec, (B, T, H, K, V), C, with_h0, with_ht, id=case_id))
    return cases


def check_strided_inputs(module, chunk=16):
    """q, k, v, g, beta and h0 as non-contiguous device views (layout "A"), B = H = 2."""
    B, T, H, K, V = 2, 21, 2, 8, 12
    inp = make(B, T, H, K, V, "gated_delta", seed=2)
    wide = {n: np.concatenate([a, np.full_like(a, np.nan)], axis=-1) for n, a in inp.items()}
    d = {n: cuda.to_device(a)[..., : inp[n].shape[-1]] for n, a in wide.items()}  # every other block of columns
    assert not d["q"].is_c_contiguous()
    o = cuda.to_device(np.full((B, T, H, V), np.nan, np.float32))
    ht = cuda.to_device(np.full((B, H, K, V), np.nan, np.float32))
    module.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, d["h0"], ht, K**-0.5, chunk)
    o_ref, h_ref = oracle(inp)
    assert rel_err(o.copy_to_host(), o_ref) <= TOL_FP32
    assert rel_err(ht.copy_to_host(), h_ref) <= TOL_FP32


def check_state_in_place(module, chunk):
    """h0 and ht the same array (how ``step`` uses a rung): read before it is overwritten."""
    inp = make(1, 3, 2, 8, 8, "gated_delta", seed=3)
    d = {n: cuda.to_device(a) for n, a in inp.items()}
    o = cuda.to_device(np.full((1, 3, 2, 8), np.nan, np.float32))
    module.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, d["h0"], d["h0"], 0.5, chunk)
    o_ref, h_ref = oracle(inp, scale=0.5)
    assert rel_err(o.copy_to_host(), o_ref) <= TOL_FP32
    assert rel_err(d["h0"].copy_to_host(), h_ref) <= TOL_FP32


def check_empty_sequence(module, with_h0):
    """T = 0: no output elements; ht is h0 (or zeros)."""
    inp = make(1, 0, 2, 8, 8, "delta")
    o, ht = run(module, inp, 32, with_h0=with_h0)
    assert o.shape == (1, 0, 2, 8)
    np.testing.assert_array_equal(ht, inp["h0"] if with_h0 else np.zeros_like(inp["h0"]))


def check_long_sequence(module, recurrence, decay, chunk=16):
    """128 tokens in 8 chunks, unit-norm keys. Strong decay: g = -20 on some tokens (exp(b_t - b_s) of in-chunk
    differences never overflows: no exp(-b_s) anywhere). No decay: beta = 1 on every token, the delta rule's
    hardest case (each write replaces the key's old value). Output finite and close to the oracle."""
    inp = make(1, 128, 1, 8, 8, recurrence, seed=4)
    if decay == "strong":
        inp["g"][:, ::5] = -20.0
        inp["g"][:, 30:40] = -20.0
    else:
        inp["beta"][:] = 1.0
    o, ht = run(module, inp, chunk)
    assert np.isfinite(o).all() and np.isfinite(ht).all()
    o_ref, h_ref = oracle(inp)
    assert rel_err(o, o_ref) <= TOL_FP32 and rel_err(ht, h_ref) <= TOL_FP32


def check_catches_a_wrong_answer(module, chunk=16):
    """The comparison can fail: a delta rule run without beta (a plausible bug) is far off."""
    inp = make(1, 16, 1, 8, 8, "delta", seed=5)
    o, _ = run(module, inp, chunk, with_ht=False)
    o_wrong, _ = reference.recurrent(inp["q"], inp["k"], inp["v"], initial_state=inp["h0"])
    assert rel_err(o, o_wrong) > 100 * TOL_FP32
