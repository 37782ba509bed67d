"""GPU tier: `pytest -m gpu tests/test_gpu.py` on a machine with a CUDA GPU (skipped everywhere else).

Larger shapes than the simulator can afford, every rung x recurrence, float16 inputs, device-array interop with
torch/CuPy when present, the device value check, and the decode step against the oracle.
"""

import numpy as np
import pytest

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module", autouse=True)
def _need_gpu():
    from numba import cuda

    if not cuda.is_available():
        pytest.skip("no CUDA GPU")


def _oracle(inp):
    from linattn_numba import reference

    return reference.chunked(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"],
                             initial_state=inp["initial_state"], chunk_size=64)


SHAPES = [(2, 1000, 4, 128, 128), (1, 777, 3, 64, 96), (3, 1, 2, 128, 128), (1, 300, 2, 100, 40)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}T{}H{}K{}V{}".format(*s))
@pytest.mark.parametrize("recurrence", ["plain", "decay", "delta", "gated_delta"])
def test_every_rung_large(recurrence, shape):
    from numba import cuda

    import linattn_numba as la
    from linattn_numba import rungs
    from linattn_numba.testing import make_inputs, rel_err

    inp = make_inputs(*shape, recurrence, initial_state=True, seed=sum(shape))
    o_ref, h_ref = _oracle(inp)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    B, T, H, K = inp["q"].shape
    V = inp["v"].shape[3]
    for rung in la.RUNGS:
        mod = rungs.module(rung)
        if mod.MAX_K is not None and K > mod.MAX_K:
            continue
        o = cuda.to_device(np.full((B, T, H, V), np.nan, np.float32))
        ht = cuda.to_device(np.full((B, H, K, V), np.nan, np.float32))
        mod.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, d["initial_state"], ht, K**-0.5, 64)
        e_o, e_h = rel_err(o.copy_to_host(), o_ref), rel_err(ht.copy_to_host(), h_ref)
        assert e_o <= 1e-4 and e_h <= 1e-4, f"{rung}: output {e_o:.2e}, state {e_h:.2e}"


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}T{}H{}K{}V{}".format(*s))
@pytest.mark.parametrize("recurrence", ["delta", "gated_delta"])
def test_split_delta_large(recurrence, shape):
    """r3's split schedule for the delta family (``schedule="split"``: the walk storing S_c and V_new, then the
    additive output kernel; r6: the same with its tensor-core output kernel) at the tier's shapes, in the tiling
    ``split_tile`` picks (4 x 4 tiles of 32 columns at these few walkers) and in the standard shape's 8 x 4 tiles of
    64 (SPLIT_BV, SPLIT_ROWS; 40 columns at V = 40), against the oracle: T = 1, T not a multiple of 64, K' > K
    (K = 100), a value tile partly past V (V = 96)."""
    from numba import cuda

    from linattn_numba.rungs import r3_shared as r3
    from linattn_numba.rungs import r6_tensor_cores as r6
    from linattn_numba.testing import make_inputs, rel_err

    inp = make_inputs(*shape, recurrence, initial_state=True, seed=sum(shape) + 1)
    o_ref, h_ref = _oracle(inp)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    B, T, H, K = inp["q"].shape
    V = inp["v"].shape[3]
    assert r3.split_fits(K, V, 64, True, True, True, True)  # every shape here takes the split
    saved = r3.SPLIT_BV, r3.SPLIT_ROWS
    try:
        for mod, tile in ((r3, saved), (r3, (64, 8)), (r6, saved)):
            r3.SPLIT_BV, r3.SPLIT_ROWS = tile
            o = cuda.to_device(np.full((B, T, H, V), np.nan, np.float32))
            ht = cuda.to_device(np.full((B, H, K, V), np.nan, np.float32))
            mod.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, d["initial_state"], ht, K**-0.5, 64,
                        schedule="split")
            e_o, e_h = rel_err(o.copy_to_host(), o_ref), rel_err(ht.copy_to_host(), h_ref)
            assert e_o <= 1e-4 and e_h <= 1e-4, f"{mod.NAME}, tile {tile}: output {e_o:.2e}, state {e_h:.2e}"
    finally:
        r3.SPLIT_BV, r3.SPLIT_ROWS = saved


@pytest.mark.parametrize("handoff", ["pair", "rendezvous"])
@pytest.mark.parametrize("recurrence", ["decay", "gated_delta"])
def test_r5_handoffs(recurrence, handoff):
    """r5's two stage hand-offs (named-barrier pairs, one rendezvous per chunk) at K = V = 128 over 16 chunks, where
    the producers really run ahead of the consumers: the oracle's answer, bit for bit the same with either."""
    from numba import cuda

    from linattn_numba.rungs import r5_warp_roles as r5
    from linattn_numba.testing import make_inputs, rel_err

    inp = make_inputs(2, 1000, 4, 128, 128, recurrence, initial_state=True, seed=5)
    o_ref, h_ref = _oracle(inp)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    res = {}
    for h in (handoff, r5.HANDOFFS[handoff == "pair"]):
        o = cuda.to_device(np.full((2, 1000, 4, 128), np.nan, np.float32))
        ht = cuda.to_device(np.full((2, 4, 128, 128), np.nan, np.float32))
        r5.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, d["initial_state"], ht, 128**-0.5, 64, handoff=h)
        res[h] = (o.copy_to_host(), ht.copy_to_host())
    e_o, e_h = rel_err(res[handoff][0], o_ref), rel_err(res[handoff][1], h_ref)
    assert e_o <= 1e-4 and e_h <= 1e-4, f"output {e_o:.2e}, state {e_h:.2e}"
    for a, b in zip(*res.values()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("asy", [True, False], ids=["async", "registers"])
@pytest.mark.parametrize("gates", ["weak", "mixed"])
@pytest.mark.parametrize("recurrence", ["plain", "decay", "delta", "gated_delta"])
def test_r1_stagings_and_deferred_decay(recurrence, gates, asy):
    """r1's two stagings (cp.async double buffer, registers) on the GPU, with gates that never renormalise the
    deferred decay and with gates that do every few tokens (one token's decay underflowing to 0 among them)."""
    from numba import cuda

    from linattn_numba import reference
    from linattn_numba.rungs import r1_recurrent as r1
    from linattn_numba.testing import make_inputs, rel_err

    B, T, H, K, V = 2, 1000, 3, 128, 128
    inp = make_inputs(B, T, H, K, V, recurrence, initial_state=True, seed=7)
    if inp["g"] is None and gates == "mixed":
        pytest.skip("no gates in this recurrence: the same case as 'weak'")
    if inp["g"] is not None and gates == "mixed":
        g = np.tile(np.array([-0.5, -3.0, -0.05, -6.0, 0.0, -200.0, -0.01], np.float32), T // 7 + 1)[:T]
        inp["g"] = np.ascontiguousarray(np.broadcast_to(g[None, :, None], (B, T, H)))
    o_ref, h_ref = reference.recurrent(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"],
                                       initial_state=inp["initial_state"])
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    used, _ = r1.staging(d["q"], d["k"], d["v"], asy=asy)
    assert used == asy
    o = cuda.to_device(np.full((B, T, H, V), np.nan, np.float32))
    ht = cuda.to_device(np.full((B, H, K, V), np.nan, np.float32))
    r1.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, d["initial_state"], ht, K**-0.5, asy=asy)
    e_o, e_h = rel_err(o.copy_to_host(), o_ref), rel_err(ht.copy_to_host(), h_ref)
    assert e_o <= 1e-4 and e_h <= 1e-4, f"output {e_o:.2e}, state {e_h:.2e}"


def test_float16_inputs_and_api_device_path():
    from numba import cuda

    import linattn_numba as la
    from linattn_numba.testing import make_inputs, rel_err

    inp = make_inputs(2, 513, 4, 128, 128, "gated_delta", dtype=np.float16, initial_state=True, seed=3)
    o_ref, h_ref = _oracle(inp)
    d = [None if inp[n] is None else cuda.to_device(inp[n]) for n in ("q", "k", "v", "g", "beta")]
    for rung in la.RUNGS:
        o, ht = la.attention(*d, initial_state=cuda.to_device(inp["initial_state"]), output_final_state=True,
                             rung=rung)
        assert rel_err(o.copy_to_host(), o_ref) <= 1e-4, rung
        assert rel_err(ht.copy_to_host(), h_ref) <= 1e-4, rung


def test_device_value_check_rejects_bad_gate():
    from numba import cuda

    import linattn_numba as la
    from linattn_numba.testing import make_inputs

    inp = make_inputs(1, 64, 2, 32, 32, "decay")
    g = inp["g"].copy()
    g[0, 17, 1] = 0.25
    dq, dk, dv = (cuda.to_device(inp[n]) for n in ("q", "k", "v"))
    with pytest.raises(ValueError, match="g has values above 0"):
        la.attention(dq, dk, dv, cuda.to_device(g))
    q = inp["q"].copy()
    q[0, 3, 0, 5] = np.inf
    with pytest.raises(ValueError, match="q has non-finite"):
        la.attention(cuda.to_device(q), dk, dv)


def test_step_matches_attention_on_gpu():
    from numba import cuda

    import linattn_numba as la
    from linattn_numba.testing import make_inputs, rel_err

    B, T, H, K, V = 8, 5, 4, 128, 128
    inp = make_inputs(B, T, H, K, V, "gated_delta", initial_state=True, seed=9)
    o_ref, h_ref = _oracle(inp)
    state = cuda.to_device(inp["initial_state"])
    outs = []
    for t in range(T):
        outs.append(la.step(state, inp["q"][:, t], inp["k"][:, t], inp["v"][:, t], inp["g"][:, t],
                            inp["beta"][:, t]).copy_to_host())
    assert rel_err(np.stack(outs, 1), o_ref) <= 1e-4
    assert rel_err(state.copy_to_host(), h_ref) <= 1e-4


def test_torch_interop_zero_copy_strided():
    torch = pytest.importorskip("torch")
    import linattn_numba as la
    from linattn_numba.testing import make_inputs, rel_err

    inp = make_inputs(2, 200, 3, 64, 64, "delta", seed=4)
    # [B, H, T, K] tensors transposed to [B, T, H, K]: non-contiguous views, read in place
    tq, tk, tv = (torch.tensor(inp[n]).cuda().transpose(1, 2).contiguous().transpose(1, 2) for n in "qkv")
    tb = torch.tensor(inp["beta"]).cuda()
    assert not tq.is_contiguous()
    o, _ = la.attention(tq, tk, tv, None, tb)
    o_ref, _ = _oracle(dict(inp, initial_state=None))
    assert rel_err(torch.as_tensor(o, device="cuda").cpu().numpy(), o_ref) <= 1e-4


def test_exp_approx_accuracy():
    """``vec.exp_approx`` (``ex2.approx.ftz`` of x log2 e, r3's exponentials) against float64 ``exp`` over r3's
    range of exponents, x <= 0 down to float32's smallest normal result: relative error below 6e-6 (2^-22 from the
    approximation, |x| 2^-24 from rounding x log2 e), below 1e-6 for |x| <= 8; exactly 1 at 0, 0 below -104."""
    from numba import cuda

    from linattn_numba._common import cdiv
    from linattn_numba.vec import exp_approx

    @cuda.jit
    def k(x, y):
        i = cuda.grid(1)
        if i < x.shape[0]:
            y[i] = exp_approx(x[i])

    x = np.concatenate([-np.logspace(-8, np.log10(87.0), 20000), [0.0, -104.0, -200.0]]).astype(np.float32)
    y = np.zeros_like(x)
    k[cdiv(x.size, 256), 256](x, y)
    ref = np.exp(x.astype(np.float64))
    err = np.abs(y[:-3] - ref[:-3]) / ref[:-3]
    assert err.max() < 6e-6, err.max()
    assert err[np.abs(x[:-3]) <= 8].max() < 1e-6
    assert y[-3] == 1.0 and y[-2] == 0.0 and y[-1] == 0.0
