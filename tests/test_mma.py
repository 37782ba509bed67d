"""linattn_numba.mma in the simulator: the m16n8k8 TF32 tile product against NumPy on the documented fragment
layout, the TF32 rounding model, and 3xTF32 reaching float32 accuracy where one TF32 product does not. (The
compile tier checks that the same kernels build for sm_90 with ``mma.sync`` in their PTX and pass ptxas.)"""

import os

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import numpy as np
import pytest
from numba import cuda

from linattn_numba import mma, sim

sim.install()


@pytest.fixture(autouse=True)
def _needs_simulator():
    if not sim.active():
        pytest.skip("numba's CUDA simulator is not active in this process")


def test_fragments_cover_each_tile_once():
    for frag, shape, per_lane in ((mma.fragment_a, (16, 8), 4), (mma.fragment_b, (8, 8), 2),
                                  (mma.fragment_c, (16, 8), 4)):
        seen = np.zeros(shape, int)
        for lane in range(32):
            cells = frag(lane)
            assert len(cells) == per_lane
            for r, c in cells:
                seen[r, c] += 1
        assert (seen == 1).all(), frag.__name__


def test_tf32_rounding_model():
    x = np.array([1.0, 1.0 + 2.0**-11, 1.0 + 2.0**-10 + 2.0**-11, -(1.0 + 2.0**-11), 3.14159265], np.float32)
    r = mma.tf32_round_np(x)
    assert r[0] == 1.0
    assert r[1] == 1.0 + 2.0**-10  # a tie rounds away from zero
    assert r[2] == 1.0 + 2.0**-9
    assert r[3] == -(1.0 + 2.0**-10)
    assert (r.view(np.uint32) & 0x1FFF == 0).all()  # 13 low bits clear: 10 explicit mantissa bits
    assert abs(r[4] - x[4]) <= 2.0**-11 * 4
    assert mma.tf32_truncate_np(np.float32(1.0 + 2.0**-11)) == 1.0


def test_split_is_exact_and_big_is_tf32():
    rng = np.random.default_rng(5)
    x = np.concatenate([rng.standard_normal(60), [0.0, -0.0, 1e-30, -3e30]]).astype(np.float32)
    r, big, small = (np.full_like(x, np.nan) for _ in range(3))
    mma._round_kernel[1, 64](x, r, big, small)
    assert (big.view(np.uint32) & 0x1FFF == 0).all()  # a TF32 value
    assert (big.astype(np.float64) + small == x).all()  # the split loses nothing
    assert (np.abs(small) <= np.abs(x) * 2.0**-10).all()  # small is the correction term
    assert (r == mma.tf32_round_np(x)).all()


def _run(three, A, B, C):
    D = np.full((16, 8), np.nan, np.float32)
    mma._tile_kernel(three)[1, 32](A, B, C, D)
    return D


@pytest.mark.parametrize("ksteps", [1, 3])
def test_tile_product_is_the_tf32_product(ksteps):
    rng = np.random.default_rng(ksteps)
    A = rng.standard_normal((16, 8 * ksteps)).astype(np.float32)
    B = rng.standard_normal((8 * ksteps, 8)).astype(np.float32)
    C = rng.standard_normal((16, 8)).astype(np.float32)
    D = _run(False, A, B, C)
    # the same k-step order as the kernel, with the hardware's view of the operands (low 13 bits ignored)
    want = C.astype(np.float64)
    for k0 in range(0, 8 * ksteps, 8):
        want = (mma.tf32_truncate_np(A[:, k0:k0 + 8]).astype(np.float64)
                @ mma.tf32_truncate_np(B[k0:k0 + 8]).astype(np.float64) + want).astype(np.float32)
    assert np.allclose(D, want, rtol=1e-6, atol=1e-6)
    exact = A.astype(np.float64) @ B + C
    err = np.abs(D - exact).max() / np.abs(exact).max()
    assert 1e-5 < err < 5e-3, err  # TF32: about 3 decimal digits, far from float32


def test_3xtf32_reaches_float32_accuracy():
    rng = np.random.default_rng(7)
    A = rng.standard_normal((16, 32)).astype(np.float32)
    B = rng.standard_normal((32, 8)).astype(np.float32)
    C = rng.standard_normal((16, 8)).astype(np.float32)
    exact = A.astype(np.float64) @ B + C
    err1 = np.abs(_run(False, A, B, C) - exact).max() / np.abs(exact).max()
    err3 = np.abs(_run(True, A, B, C) - exact).max() / np.abs(exact).max()
    assert err3 < 2e-6 and err3 < err1 / 100, (err1, err3)


def test_every_lane_must_take_part():
    @cuda.jit
    def partial(out):
        lane = cuda.threadIdx.x
        if lane < 16:
            d = mma.mma_tf32(1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 0.0, 0.0)
            out[lane] = d[0]

    with pytest.raises(RuntimeError, match="lanes"):
        partial[1, 32](np.zeros(32, np.float32))
