"""Rung r5 ``warp_roles``, called directly: its ``forward`` under the simulator against the float64 recurrence
(both producer paths: 16-byte copies for aligned float32 inputs, element copies for float16 / strided / odd K),
the state-only mode, the double buffer's stage reuse (1, 2 and many chunks), and a compile check of its kernels.

The simulated blocks are small (one consumer and one producer warp at K <= 16, V <= 16), and the (K, V) shapes
and h0 / ht combinations are spread over the (recurrence, T, chunk) cases instead of multiplied with them.
"""

import os

os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")  # before anything imports numba (the package does)

import functools
import subprocess
import sys

import numpy as np
import pytest
from numba import cuda

from linattn_numba import sim
from linattn_numba.rungs import r3_shared as r3
from linattn_numba.rungs import r5_warp_roles as r5
from linattn_numba.testing import TOL_FP32, rel_err

import chunk_helpers  # tests/chunk_helpers.py

T_CHUNK = [(1, 16), (37, 16), (64, 32), (45, 32)]  # 1, 3, 2 and 2 chunks (the last one short but for T = 64)
KV = [(16, 8), (8, 20)]  # K > V and K < V
H0_HT = [(True, True), (False, False), (True, False), (False, True)]
BH = [(1, 2), (2, 1)]


REC_FLAGS, make, oracle = chunk_helpers.REC_FLAGS, chunk_helpers.make, chunk_helpers.oracle
run = functools.partial(chunk_helpers.run, r5)  # (inp, chunk, with_h0, with_ht, with_o, scale, **forward kw)
check = functools.partial(chunk_helpers.check, r5)


CASES = chunk_helpers.spread_cases(T_CHUNK, KV, H0_HT, BH)


@pytest.mark.parametrize("recurrence,shape,chunk,with_h0,with_ht", CASES)
def test_matches_recurrent(recurrence, shape, chunk, with_h0, with_ht):
    check(make(*shape, recurrence, seed=sum(shape) + chunk), chunk, with_h0, with_ht)


@pytest.mark.parametrize("recurrence", ["decay", "gated_delta"])
def test_several_value_tiles(recurrence):
    """V = 20 in value tiles of 8: three state-kernel blocks per head, the last one partly outside V."""
    check(make(1, 40, 2, 12, 20, recurrence, seed=11), 16, bv=8)


@pytest.mark.parametrize("recurrence", ["plain", "gated_delta"])
def test_chunk_64(recurrence):
    """C = 64 (the H200 default; T = 70 leaves a short last chunk), K = 24 pads to 32 columns."""
    check(make(1, 70, 1, 24, 12, recurrence, seed=12), 64)


@pytest.mark.parametrize("recurrence", ["decay", "delta"])
def test_odd_k_and_v(recurrence):
    """K = 10 and V = 10, not multiples of 4: the producers copy element by element (no 16-byte rows)."""
    inp = make(1, 33, 1, 10, 10, recurrence, seed=14)
    assert not r3._rows_aligned(*(cuda.to_device(inp[n]) for n in "qkv"))
    check(inp, 16)


@pytest.mark.parametrize("recurrence,with_h0", [("decay", True), ("delta", False), ("gated_delta", True)])
def test_state_only(recurrence, with_h0):
    """o=None: only the final state; it matches the full run's and the oracle's."""
    inp = make(1, 37, 2, 8, 12, recurrence, seed=13)
    o, ht = run(inp, 16, with_h0=with_h0, with_o=False)
    assert o is None
    _, h_ref = oracle(inp, with_h0)
    assert rel_err(ht, h_ref) <= TOL_FP32, f"final state: rel err {rel_err(ht, h_ref):.2e}"
    _, ht_full = run(inp, 16, with_h0=with_h0)
    np.testing.assert_array_equal(ht, ht_full)  # same kernels, same order of operations


@pytest.mark.parametrize("recurrence", ["plain", "gated_delta"])
def test_float16_inputs(recurrence):
    """float16 q, k, v are converted on load (the element-copy path); float32 accuracy holds."""
    inp = make(1, 20, 1, 12, 20, recurrence, dtype=np.float16, seed=1)
    assert not r3._rows_aligned(*(cuda.to_device(inp[n]) for n in "qkv"))
    check(inp, 16)


@pytest.mark.parametrize("recurrence", list(REC_FLAGS))
def test_rendezvous_handoff(recurrence):
    """handoff="rendezvous" (one block barrier per chunk instead of the FULL / EMPTY mbarriers): the oracle's answer
    over 3 chunks (both stages reused) with a short last one, and the pair hand-off's numbers bit for bit (only
    the barriers differ)."""
    inp = make(1, 45, 2, 12, 8, recurrence, seed=21)
    check(inp, 16, handoff="rendezvous")
    for with_o in (True, False):
        got = run(inp, 16, with_o=with_o, handoff="rendezvous")
        ref = run(inp, 16, with_o=with_o, handoff="pair")
        for a, b in zip(got, ref):
            if a is not None:
                np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("recurrence", ["decay", "gated_delta"])
def test_pair_handoff_over_many_chunks(recurrence):
    """handoff="pair" over 7 chunks: each stage's FULL and EMPTY mbarriers complete 3-4 phases, so the parity the
    roles wait for wraps around (a wait on the wrong parity would pass early or hang); the oracle's answer, with
    the simulator's happens-before check on every shared-memory access."""
    inp = make(1, 100, 1, 12, 8, recurrence, seed=22)
    with sim.racecheck():
        check(inp, 16, handoff="pair")


def test_same_numbers_as_r3():
    """Only the schedule changed: r5's state kernel does r3's operations in r3's order -- r3's fused schedule, the
    one r5 specialises (the delta family's default is its split, which sums in another order) -- equal bit for bit
    in the simulator; the bound leaves room for a different FMA contraction should r3's kernel be reordered."""
    inp = make(1, 45, 2, 16, 8, "gated_delta", seed=3)
    res = []
    for m in (r3, r5):
        d = {n: cuda.to_device(a) for n, a in inp.items()}
        o = cuda.to_device(np.full((1, 45, 2, 8), np.nan, np.float32))
        ht = cuda.to_device(np.full((1, 2, 16, 8), np.nan, np.float32))
        kw = {"schedule": "fused"} if m is r3 else {}
        m.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, d["h0"], ht, 0.25, 16, bv=8, **kw)
        res.append((o.copy_to_host(), ht.copy_to_host()))
    np.testing.assert_allclose(res[1][0], res[0][0], rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(res[1][1], res[0][1], rtol=1e-6, atol=1e-7)


def test_strided_inputs():
    """q, k, v, g, beta and h0 as non-contiguous device views (layout "A"), B = H = 2."""
    chunk_helpers.check_strided_inputs(r5)


def test_state_in_place():
    """h0 and ht the same array (how ``step`` uses a rung; chunk_size None there): read before overwritten."""
    chunk_helpers.check_state_in_place(r5, None)


@pytest.mark.parametrize("with_h0", [True, False], ids=["h0", "no_h0"])
def test_empty_sequence(with_h0):
    """T = 0: no chunk, the producers stage nothing; ht is h0 (or zeros)."""
    chunk_helpers.check_empty_sequence(r5, with_h0)


@pytest.mark.parametrize("recurrence,decay", [("gated_delta", "strong"), ("delta", "none")])
def test_long_sequence_stays_finite(recurrence, decay):
    """128 tokens in 8 chunks: each stage of the double buffer is refilled 4 times. Strong decay (g = -20 on
    some tokens) or none with beta = 1 (the delta rule's hardest case). Finite and close to the oracle."""
    chunk_helpers.check_long_sequence(r5, recurrence, decay)


def test_catches_a_wrong_answer():
    """The comparison can fail: a delta rule run without beta (a plausible bug) is far off."""
    chunk_helpers.check_catches_a_wrong_answer(r5)


def test_rejects_bad_arguments():
    inp = make(1, 4, 1, 8, 8, "plain")
    for bad in (0, 8, 48, 128, 256):
        with pytest.raises(ValueError, match="chunk_size"):
            run(inp, bad)
    with pytest.raises(ValueError, match="state only"):
        run(inp, 16, with_o=False, with_ht=False)
    with pytest.raises(ValueError, match="multiple of 4"):
        run(inp, 16, bv=6)
    with pytest.raises(ValueError, match="handoff"):
        run(inp, 16, handoff="mbarrier")
    big = make(1, 1, 1, r5.MAX_K + 1, 4, "plain")
    with pytest.raises(ValueError, match="K"):
        run(big, 16)
    wide = make(1, 1, 1, 128, 64, "gated_delta")  # two stages of C = 64, K = 128, BV = 64: > 227 KB
    with pytest.raises(ValueError, match="shared memory"):
        run(wide, 64, bv=64)


def test_shared_memory_fits_the_h200_at_the_default_configuration():
    """The largest variant (delta rule with output, C = 64, K = 128, BV = 32) fits one block's 227 KB."""
    size = r5._state_layout(64, 128, r5.BV_DEFAULT, True, True, True)[-1] * 4
    assert size <= r5.SMEM_MAX
    nth, nct, npt = r5._threads(128, r5.BV_DEFAULT)
    assert (nth, nct, npt) == (256, 256, 128)


def test_module_contract():
    assert r5.NAME == "warp_roles"
    assert r5.MAX_K == 128 and r5.MAX_V is None
    assert {16, 32}.issubset(r5.CHUNK_SIZES) and r5.DEFAULT_CHUNK in r5.CHUNK_SIZES
    labels = [label for label, _, _ in r5.compile_targets()]
    # per dtype and recurrence: the state kernel x (4 with o, 2 without), and the other hand-off once per recurrence;
    # the intra kernel is r3's (its targets)
    assert len(labels) == len(set(labels)) == 2 * 4 * 6 + 4
    assert sum(f"handoff={r5.HANDOFFS[r5.HANDOFF == 'pair']}" in label for label in labels) == 4
    assert all(label.startswith("state[") for label in labels)


_COMPILE_SCRIPT = r"""
import re
from numba import cuda
from linattn_numba import sim
from linattn_numba.rungs import r3_shared as r3
from linattn_numba.rungs import r5_warp_roles as r5
bad, local, n = [], [], 0
for label, fn, argtypes in r5.compile_targets():
    if not label.startswith("state") or "gated_delta" not in label or "h0=1,ht=1" not in label:
        continue
    n += 1
    try:
        ptx, _ = cuda.compile_ptx(fn, argtypes, cc=(9, 0))
    except Exception as e:
        bad.append(f"{label}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        continue
    if "ld.local" in ptx or "st.local" in ptx:
        local.append(label)
    pair = ("handoff=" not in label) == (r5.HANDOFF == "pair")
    # the pair hands the stages over by mbarriers (no named-barrier arrive); the rendezvous meets at an unaligned
    # named barrier (no block barrier); the consumers' own barrier is an aligned one
    needles = (r"mbarrier\.init", r"mbarrier\.arrive\.release", r"mbarrier\.try_wait\.parity") if pair else (
        r"barrier\.sync\s+\S+,",)
    for needle in (r"bar\.sync", *needles,
                   r"cp\.async\.cg\.shared\.global", r"cp\.async\.wait_all", r"ld\.shared\.v4\.f32"):
        if not re.search(needle, ptx):
            local.append(f"{label} (no {needle})")
    if re.search(r"(?<![m.])barrier\.arrive|\bbar\.arrive", ptx):
        local.append(f"{label} (a named-barrier arrive)")
    if not pair and (re.search(r"mbarrier|bar\.sync\s+0;", ptx)):
        local.append(f"{label} (an mbarrier or a block barrier in the rendezvous hand-off)")
print(f"compiled {n - len(bad)}/{n}")
for b in bad:
    print("FAILED:", b)
for label in local:
    print("LOCAL MEMORY OR MISSING:", label)
"""


@pytest.mark.compile
def test_state_kernels_compile_for_sm90():
    """The gated delta rule's state kernels (float32 with 16-byte copies, float16 without; with and without
    output) compiled for cc 9.0 with the simulator off: no local memory; named barriers (and mbarriers in the pair
    hand-off), cp.async and 128-bit shared loads present. (tests/test_compile.py compiles every variant.)"""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    r = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT], env=env, capture_output=True, text=True, timeout=600)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert "compiled 5/5" in out and "FAILED" not in out and "LOCAL MEMORY" not in out, out[-4000:]
