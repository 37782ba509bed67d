"""The three NumPy forms of every recurrence agree: recurrent (the definition), chunked, parallel."""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # before anything imports numba (the package does)

import numpy as np
import pytest

from linattn_numba import reference as ref

B, H, K, V = 2, 3, 8, 12
GB = [(False, False), (True, False), (False, True), (True, True)]  # (has g, has beta)
GB_IDS = [ref.recurrence_name(g or None, b or None) for g, b in GB]


def rel_err(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


def make_inputs(T, has_g, has_beta, has_h0, seed=0, b=B, h=H, kd=K, vd=V):
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((b, T, h, kd))
    k = rng.standard_normal((b, T, h, kd))
    k /= np.linalg.norm(k, axis=-1, keepdims=True)  # unit keys keep the delta-rule state bounded
    v = rng.standard_normal((b, T, h, vd))
    g = np.log(rng.uniform(0.5, 1.0, (b, T, h))) if has_g else None
    beta = rng.uniform(0.0, 1.0, (b, T, h)) if has_beta else None
    h0 = rng.standard_normal((b, h, kd, vd)) if has_h0 else None
    return q, k, v, g, beta, h0


@pytest.mark.parametrize("has_h0", [False, True], ids=["no_h0", "h0"])
@pytest.mark.parametrize("T", [1, 5, 37, 64, 100])
@pytest.mark.parametrize("has_g,has_beta", GB, ids=GB_IDS)
def test_three_forms_agree(has_g, has_beta, T, has_h0):
    q, k, v, g, beta, h0 = make_inputs(T, has_g, has_beta, has_h0, seed=T)
    o_r, s_r = ref.recurrent(q, k, v, g, beta, initial_state=h0)
    assert o_r.shape == (B, T, H, V) and s_r.shape == (B, H, K, V)
    for C in (16, 32, 64):
        o_c, s_c = ref.chunked(q, k, v, g, beta, initial_state=h0, chunk_size=C)
        assert rel_err(o_c, o_r) < 1e-10, C
        assert rel_err(s_c, s_r) < 1e-10, C
    o_p, s_p = ref.parallel(q, k, v, g, beta, initial_state=h0)
    assert rel_err(o_p, o_r) < 1e-10
    assert rel_err(s_p, s_r) < 1e-10


@pytest.mark.parametrize("has_g,has_beta", GB, ids=GB_IDS)
def test_scale_and_odd_chunk_sizes(has_g, has_beta):
    q, k, v, g, beta, h0 = make_inputs(23, has_g, has_beta, True, seed=1)
    o_r, s_r = ref.recurrent(q, k, v, g, beta, scale=0.3, initial_state=h0)
    for C in (1, 3, 7, 23, 1000):
        o_c, s_c = ref.chunked(q, k, v, g, beta, scale=0.3, initial_state=h0, chunk_size=C)
        assert rel_err(o_c, o_r) < 1e-10 and rel_err(s_c, s_r) < 1e-10, C


@pytest.mark.parametrize("form", ["recurrent", "chunked", "parallel"])
@pytest.mark.parametrize("has_g,has_beta", GB, ids=GB_IDS)
def test_empty_sequence(form, has_g, has_beta):
    """T = 0 is handled: an empty output and the initial state, unchanged (and a copy, not an alias)."""
    q, k, v, g, beta, h0 = make_inputs(0, has_g, has_beta, True)
    o, s = getattr(ref, form)(q, k, v, g, beta, initial_state=h0)
    assert o.shape == (B, 0, H, V)
    np.testing.assert_array_equal(s, h0)
    s[...] = 0
    assert np.any(h0 != 0)
    o, s = getattr(ref, form)(q, k, v, g, beta)
    assert o.shape == (B, 0, H, V) and s.shape == (B, H, K, V) and not s.any()


# Hand-computed, T = 2, K = V = 1, scale = 1, S_0 = 0.5:
#   q = (1, 2), k = (1, -1), v = (2, 3), exp(g) = (0.5, 0.25), beta = (0.5, 1).
# plain:       S = 0.5 + 2 = 2.5,                 o0 = 2.5;   S = 2.5 - 3 = -0.5,                     o1 = -1
# decay:       S = 0.25 + 2 = 2.25,               o0 = 2.25;  S = 0.5625 - 3 = -2.4375,               o1 = -4.875
# delta:       S = 0.5 + 0.5 (2 - 0.5) = 1.25,    o0 = 1.25;  S = 1.25 - (-1)(3 - (-1)(1.25)) = -3,   o1 = -6
# gated delta: S = 0.25 + 0.5 (2 - 0.25) = 1.125, o0 = 1.125; S = 0.28125 - (3 + 0.28125) = -3,       o1 = -6
HAND = {
    "plain": ([2.5, -1.0], -0.5),
    "decay": ([2.25, -4.875], -2.4375),
    "delta": ([1.25, -6.0], -3.0),
    "gated_delta": ([1.125, -6.0], -3.0),
}


@pytest.mark.parametrize("form", ["recurrent", "chunked", "parallel"])
@pytest.mark.parametrize("has_g,has_beta", GB, ids=GB_IDS)
def test_hand_computed(form, has_g, has_beta):
    q = np.array([1.0, 2.0]).reshape(1, 2, 1, 1)
    k = np.array([1.0, -1.0]).reshape(1, 2, 1, 1)
    v = np.array([2.0, 3.0]).reshape(1, 2, 1, 1)
    g = np.log([0.5, 0.25]).reshape(1, 2, 1) if has_g else None
    beta = np.array([0.5, 1.0]).reshape(1, 2, 1) if has_beta else None
    h0 = np.full((1, 1, 1, 1), 0.5)
    kwargs = {"chunk_size": 1} if form == "chunked" else {}
    o, s = getattr(ref, form)(q, k, v, g, beta, scale=1.0, initial_state=h0, **kwargs)
    o_want, s_want = HAND[ref.recurrence_name(g, beta)]
    np.testing.assert_allclose(o.ravel(), o_want, rtol=1e-14)
    np.testing.assert_allclose(s.ravel(), [s_want], rtol=1e-14)


def test_default_scale():
    q, k, v, _, _, _ = make_inputs(9, False, False, False)
    o1, _ = ref.chunked(q, k, v, chunk_size=4)
    o2, _ = ref.recurrent(q, k, v, scale=K**-0.5)
    assert rel_err(o1, o2) < 1e-12


@pytest.mark.parametrize("has_beta", [False, True], ids=["decay", "gated_delta"])
def test_strong_decay_long_sequence_stays_finite(has_beta):
    """T = 512 with g = -20 in places: a one-chunk (parallel) form of length 512 accumulates b ~ -2000,
    where exp(-b) would overflow; differences keep every factor in [0, 1]."""
    T = 512
    q, k, v, g, beta, h0 = make_inputs(T, True, has_beta, True, seed=3, b=1, h=2)
    g[:, ::7] = -20.0
    g[:, 100:140] = -20.0
    o_r, s_r = ref.recurrent(q, k, v, g, beta, initial_state=h0)
    with np.errstate(over="raise", invalid="raise"):
        outs = [ref.chunked(q, k, v, g, beta, initial_state=h0, chunk_size=C) for C in (64, 128)]
        outs.append(ref.parallel(q, k, v, g, beta, initial_state=h0))
    for o, s in outs:
        assert np.all(np.isfinite(o)) and np.all(np.isfinite(s))
        assert rel_err(o, o_r) < 1e-10 and rel_err(s, s_r) < 1e-10


def test_bad_arguments():
    q, k, v, g, beta, h0 = make_inputs(4, True, True, True)
    with pytest.raises(ValueError):
        ref.chunked(q, k, v, g, beta, chunk_size=0)
    with pytest.raises(ValueError):
        ref.chunked(q, k, v[:, :3], g, beta)
    with pytest.raises(ValueError):
        ref.parallel(q, k, v, g[:, :3], beta)
