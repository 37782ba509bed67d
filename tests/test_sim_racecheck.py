"""linattn_numba.sim.racecheck: the simulator's shared-memory race check (happens-before with vector clocks).

Each synthetic kernel comes in a racy and a correctly synchronised form: the check must raise on the first and stay
silent on the second, for block barriers, named barriers (producer ``bar_arrive`` / consumer ``bar_sync``, the
protocol of r5 ``warp_roles``), warp shuffles and 128-bit ``st4`` stores. Then every rung that uses shared memory runs
under the check at tiny shapes for all four recurrences: no two threads may touch one shared address unordered.
"""

import os

os.environ["NUMBA_ENABLE_CUDASIM"] = "1"

import numpy as np
import pytest
from numba import cuda, float32

from linattn_numba import reference, rungs, sim
from linattn_numba.testing import TOL_FP32, make_inputs, rel_err
from linattn_numba.vec import st4

sim.install()


@pytest.fixture(autouse=True)
def _needs_simulator():
    if not sim.active():
        pytest.skip("numba's CUDA simulator is not active in this process")


def _neighbour_kernel(sync):
    @cuda.jit
    def k(out):
        sm = cuda.shared.array(64, float32)
        t = cuda.threadIdx.x
        sm[t] = float32(t)
        if sync:
            cuda.syncthreads()  # every element written before any neighbour reads it
        out[t] = sm[(t + 1) % 64]

    return k


@pytest.mark.parametrize("sync", [False, True])
def test_block_barrier(sync):
    out = np.zeros(64, np.float32)
    with sim.racecheck():
        if sync:
            _neighbour_kernel(True)[1, 64](out)
            assert np.array_equal(out, (np.arange(64) + 1) % 64)
        else:
            with pytest.raises(sim.SharedMemoryRace, match="read by thread"):
                _neighbour_kernel(False)[1, 64](out)


def test_off_by_default():
    out = np.zeros(64, np.float32)
    _neighbour_kernel(False)[1, 64](out)  # racy, but nobody asked for the check


def _handoff_kernel(arrive):
    """Warp 1 writes a stage, warp 0 reads it; the hand-off is a named barrier (or nothing)."""

    @cuda.jit
    def k(out):
        sm = cuda.shared.array(32, float32)
        t = cuda.threadIdx.x
        if t >= 32:
            sm[t - 32] = float32(2 * t)
            if arrive:
                sim.bar_arrive(1, 64)  # producer: release the stage, do not wait
            return
        if arrive:
            sim.bar_sync(1, 64)  # consumer: wait until the stage is full
        out[t] = sm[31 - t]

    return k


@pytest.mark.parametrize("arrive", [False, True])
def test_named_barrier_handoff(arrive):
    out = np.zeros(32, np.float32)
    with sim.racecheck():
        if arrive:
            _handoff_kernel(True)[1, 64](out)
            assert np.array_equal(out, 2 * (32 + 31 - np.arange(32)))
        else:
            with pytest.raises(sim.SharedMemoryRace):
                _handoff_kernel(False)[1, 64](out)


def _mbarrier_refill_kernel(wait_empty):
    """The refill of one buffer handed over by mbarriers: FULL = bars[0] (the producers arrive after the first
    fill, the consumers wait and read), EMPTY = bars[1] (the consumers arrive after reading; the producers wait on
    it before the refill, or not: then the refill races the reads).

    (The racy twin refills without a second FULL arrive: with one, producers that lap the consumers would complete
    FULL's next phase too and leave the consumers' parity wait waiting forever, the hang it would be on hardware.)"""

    @cuda.jit
    def k(out):
        sm = cuda.shared.array(32, float32)
        bars = cuda.shared.array(2, np.int64)
        t = cuda.threadIdx.x
        if t < 2:
            sim.mb_init(bars, t, 32)
        cuda.syncthreads()
        if t >= 32:
            sm[t - 32] = float32(t)
            sim.mb_arrive(bars, 0)
            if wait_empty:
                sim.mb_wait(bars, 1, 0)
            sm[t - 32] = float32(-1.0)
            return
        sim.mb_wait(bars, 0, 0)
        out[t] = sm[31 - t]
        sim.mb_arrive(bars, 1)

    return k


@pytest.mark.parametrize("wait_empty", [False, True])
def test_mbarrier_handoff(wait_empty):
    """An mbarrier arrive releases and a wait that sees the phase complete acquires: ordered with the EMPTY wait,
    a race without it (whatever this run's interleaving)."""
    out = np.zeros(32, np.float32)
    with sim.racecheck():
        if wait_empty:
            _mbarrier_refill_kernel(True)[1, 64](out)
            assert np.array_equal(out, (32 + 31 - np.arange(32)).astype(np.float32))
        else:
            with pytest.raises(sim.SharedMemoryRace):
                _mbarrier_refill_kernel(False)[1, 64](out)


def _refill_kernel(wait_empty):
    """Double use of one buffer: the producer refills it after the consumer read it, ordered by an EMPTY barrier
    (or not). The producer arrives at FULL after each fill; the consumer arrives at EMPTY after reading."""

    @cuda.jit
    def k(out):
        sm = cuda.shared.array(32, float32)
        t = cuda.threadIdx.x
        if t >= 32:
            for r in range(2):
                if r == 1 and wait_empty:
                    sim.bar_sync(2, 64)
                sm[t - 32] = float32(r + 1)
                sim.bar_arrive(1, 64)
            return
        for r in range(2):
            sim.bar_sync(1, 64)
            out[r, t] = sm[t]
            if r == 0 and wait_empty:
                sim.bar_arrive(2, 64)

    return k


@pytest.mark.parametrize("wait_empty", [False, True])
def test_named_barrier_refill_needs_the_empty_barrier(wait_empty):
    out = np.zeros((2, 32), np.float32)
    with sim.racecheck():
        if wait_empty:
            _refill_kernel(True)[1, 64](out)
            assert np.array_equal(out, [[1] * 32, [2] * 32])
        else:
            with pytest.raises(sim.SharedMemoryRace, match="write by thread"):
                _refill_kernel(False)[1, 64](out)


def test_warp_collective_orders_its_lanes():
    @cuda.jit
    def k(out):
        sm = cuda.shared.array(32, float32)
        t = cuda.threadIdx.x
        sm[t] = float32(t)
        cuda.syncwarp(0xFFFFFFFF)  # the warp's stores before any lane's load
        out[t] = sm[31 - t]

    out = np.zeros(32, np.float32)
    with sim.racecheck():
        k[1, 32](out)
    assert np.array_equal(out, 31 - np.arange(32))


def test_vector_store_is_checked():
    """st4 writes four elements: a neighbour reading the third one without a barrier races."""

    @cuda.jit
    def k(out):
        sm = cuda.shared.array(128, float32)
        t = cuda.threadIdx.x
        st4(sm, 4 * t, (float32(t), float32(t), float32(t), float32(t)))
        out[t] = sm[(4 * t + 6) % 128]

    out = np.zeros(32, np.float32)
    with sim.racecheck(), pytest.raises(sim.SharedMemoryRace):
        k[1, 32](out)


# (rung, chunk size, forward's extra arguments): r4 with 3 segments and the tree scan so that all three phases run;
# r5 with each of its two hand-offs
RUNG_CASES = [("recurrent", 16, {}), ("chunked", 16, {}), ("shared", 16, {}),
              ("scan", 16, {"num_segments": 3, "scan": "tree"}), ("warp_roles", 16, {"handoff": "pair"}),
              ("warp_roles", 16, {"handoff": "rendezvous"}), ("tensor_cores", 16, {})]


@pytest.mark.parametrize("recurrence", ["plain", "decay", "delta", "gated_delta"])
@pytest.mark.parametrize("rung,chunk,extra", RUNG_CASES,
                         ids=[r + "".join(f"-{v}" for v in e.values() if isinstance(v, str) and r != "scan")
                              for r, _, e in RUNG_CASES])
def test_rungs_have_no_shared_memory_race(rung, chunk, extra, recurrence):
    """T = 37 (two full chunks of 16 and a short one), K = 8, V = 12 with initial and final state."""
    B, T, H, K, V = 1, 37, 1, 8, 12
    inp = make_inputs(B, T, H, K, V, recurrence, initial_state=True, seed=11)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    o = cuda.to_device(np.full((B, T, H, V), np.nan, np.float32))
    ht = cuda.to_device(np.full((B, H, K, V), np.nan, np.float32))
    mod = rungs.module(rung)
    with sim.racecheck():
        mod.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, d["initial_state"], ht, K**-0.5, chunk, **extra)
    o_ref, h_ref = reference.recurrent(inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"],
                                       initial_state=inp["initial_state"])
    assert rel_err(o.copy_to_host(), o_ref) <= TOL_FP32
    assert rel_err(ht.copy_to_host(), h_ref) <= TOL_FP32


def test_racecheck_probe_kernels_are_what_they_claim():
    """tools/racecheck_probe.py (what compute-sanitizer makes of named barriers, r5's docstring): under the simulator's
    check exactly its two ``*_bug`` kernels race, and every other one gives the right answer."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "racecheck_probe", Path(__file__).resolve().parent.parent / "tools" / "racecheck_probe.py")
    rp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rp)
    x = np.random.default_rng(0).standard_normal(rp.NCHUNK * rp.STAGE).astype(np.float32)
    assert sum(n.endswith("_bug") for n in rp.KERNELS) == 2 and "pair_mb" in rp.KERNELS
    for name in rp.KERNELS:
        out = np.full(rp.NCONS, np.nan, np.float32)
        with sim.racecheck():
            if name.endswith("_bug"):
                with pytest.raises(sim.SharedMemoryRace):
                    rp.build(name)[1, rp.NTOT](x, out)
            else:
                rp.build(name)[1, rp.NTOT](x, out)
                np.testing.assert_allclose(out, rp.expected(name, x), rtol=1e-5, atol=1e-4, err_msg=name)


def test_racecheck_probe_modifiers():
    """The probe's r5 ingredients (cp.async refill, 128-bit reads, in-place rewrite, a late role) on the named and
    the mbarrier pair, over 2 blocks and 5 chunks: ordered and right; with the late EMPTY wait, a race; unknown
    kernels and modifiers rejected."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "racecheck_probe", Path(__file__).resolve().parent.parent / "tools" / "racecheck_probe.py")
    rp = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(rp)
    x = np.random.default_rng(1).standard_normal(5 * rp.STAGE).astype(np.float32)
    for name in ("pair_na+cp+vec+inplace+clate", "pair_mb+cp+vec+inplace+plate", "pair_mb+vec"):
        out = np.full(2 * rp.NCONS, np.nan, np.float32)
        with sim.racecheck():
            rp.build(name, 5)[2, rp.NTOT](x, out)
        np.testing.assert_allclose(out, rp.expected(name, x, 2), rtol=1e-5, atol=1e-3, err_msg=name)
    with sim.racecheck(), pytest.raises(sim.SharedMemoryRace):
        rp.build("pair_bug+cp+inplace", 5)[1, rp.NTOT](x, np.zeros(rp.NCONS, np.float32))
    for bad in ("pair_na+fast", "cons_named+cp", "ring"):
        with pytest.raises(ValueError):
            rp.parse(bad)
