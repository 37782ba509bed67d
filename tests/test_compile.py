"""Compile tier: every kernel compiles for sm_90 with the simulator off (catches typing errors the simulator
misses). Runs in a subprocess because the simulator is chosen once per process, when numba is imported."""

import os
import subprocess
import sys

import pytest

from linattn_numba.rungs import RUNGS


# one subprocess per rung (and for the API's and the tensor-core primitives' kernels), so that pytest -n spreads
# the compile tier over its workers instead of one worker compiling everything. Rungs with many large variants are
# split in shards (compile_check's ``name:i/n``): r3's 93 took 23 minutes in one process on the 2-core CI machine
# (while the other worker ran tests) once its products were unrolled 8 steps a loop step, close to the timeout.
SHARDS = {"shared": 3, "warp_roles": 2, "tensor_cores": 2}
PARTS = (*(f"{r}:{i}/{SHARDS[r]}" if r in SHARDS else r for r in RUNGS for i in range(SHARDS.get(r, 1))), "api", "mma")


@pytest.mark.compile
@pytest.mark.parametrize("part", PARTS)
def test_every_kernel_compiles_for_sm90(part):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    r = subprocess.run(
        [sys.executable, "-m", "linattn_numba.compile_check", part], env=env, capture_output=True, text=True,
        timeout=1500,
    )
    tail = "\n".join((r.stdout + r.stderr).splitlines()[-40:])
    assert r.returncode == 0, tail
    assert "compiled" in r.stdout and "FAILED" not in r.stdout, tail


_CP_ASYNC_FORMS = r"""
from numba import cuda
from linattn_numba import vec
from linattn_numba.rungs import r1_recurrent as r1
label, fn, argtypes = next(t for t in r1.compile_targets() if t[0].startswith("async recurrent K=128 g=True beta=True"))
for in_ir in (False, True):
    vec.CP_ASYNC16_IN_IR = in_ir
    ptx, _ = cuda.compile_ptx(fn, argtypes, cc=(9, 0))
    print(in_ir, ptx.count("cp.async.cg.shared.global"), ptx.count("cvta.to.shared.u64"))
"""


@pytest.mark.compile
def test_both_cp_async16_forms_compile():
    """``vec.CP_ASYNC16_IN_IR`` (read when a kernel compiles) picks how r1's copies hand their addresses to the PTX:
    both forms compile, and only the asm form converts the shared address inside each copy (the form the H200
    timed faster for r4's phase 3, ``figures/data/probes/h200_cp_async_4adc74d.json``)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    r = subprocess.run([sys.executable, "-c", _CP_ASYNC_FORMS], env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-3000:]
    counts = {line.split()[0]: tuple(int(x) for x in line.split()[1:]) for line in r.stdout.splitlines()}
    (asm_copies, asm_cvta), (ir_copies, ir_cvta) = counts["False"], counts["True"]
    assert asm_copies == ir_copies > 0
    assert asm_cvta >= asm_copies and ir_cvta < asm_cvta


_SYNC_EXP = r"""
from numba import cuda, float32, int32
from linattn_numba.vec import exp_approx, ld_acquire, red_release_add

def k(flags, x, y):
    i = cuda.grid(1)
    if i == 0:
        red_release_add(flags, 1, 1)
        while ld_acquire(flags, 0) < 1:
            pass
    if i < x.shape[0]:
        y[i] = exp_approx(x[i])

ptx, _ = cuda.compile_ptx(k, (int32[:], float32[:], float32[:]), cc=(9, 0))
for s in ("red.release.gpu.add.s32", "ld.acquire.gpu.b32", "ex2.approx.ftz.f32", "fence.sc", "membar"):
    print(s, ptx.count(s))
"""


_OFFSET_LS = r"""
from numba import cuda, float32, int64
from linattn_numba.vec import ld1_at, st4_at

def k(x, y, off):
    i = cuda.grid(1)
    v = ld1_at(x, off + i)
    st4_at(y, off + 4 * i, (v, v * float32(2.0), float32(0.0), v))

ptx, _ = cuda.compile_ptx(k, (float32[:, :], float32[:, :, :], int64), cc=(9, 0))
for s in ("ld.global.f32", "st.global.v4.f32", "st.global.f32"):
    print(s, ptx.count(s))
"""


@pytest.mark.compile
def test_offset_load_store_compile():
    """``vec.ld1_at`` and ``vec.st4_at`` (element offsets from an array's first element, any number of dimensions)
    compile for sm_90 to one scalar load and one 128-bit store: no per-index arithmetic, no four 32-bit stores."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    r = subprocess.run([sys.executable, "-c", _OFFSET_LS], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    counts = {line.rsplit(None, 1)[0]: int(line.rsplit(None, 1)[1]) for line in r.stdout.splitlines()}
    assert counts == {"ld.global.f32": 1, "st.global.v4.f32": 1, "st.global.f32": 0}, counts


_SCALAR_LS = r"""
from numba import cuda, float32, int64
from linattn_numba.vec import ld1, st1

def k(x, y, off):
    i = cuda.grid(1) + off
    st1(y, i, ld1(x, i) * float32(2.0))

def k_indexed(x, y, off):
    i = cuda.grid(1) + off
    y[i] = x[i] * float32(2.0)

for f in (k, k_indexed):
    ptx, _ = cuda.compile_ptx(f, (float32[:], float32[:], int64), cc=(9, 0))
    print(f.__name__, ptx.count("st.f32"), ptx.count("shr.s64"))
"""


@pytest.mark.compile
def test_scalar_load_store_compile():
    """``vec.st1`` / ``vec.ld1`` (r3's output scores trade partial sums with them) compile for sm_90 to one scalar
    store / load with no negative-index handling; Numba's ``y[i] = x[i]`` with a signed index has it (the sign
    taken by ``shr.s64``, masked and added to the index): the comparison shows the test can tell them apart."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    r = subprocess.run([sys.executable, "-c", _SCALAR_LS], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    counts = {line.split()[0]: tuple(map(int, line.split()[1:])) for line in r.stdout.splitlines()}
    assert counts["k"] == (1, 0), counts
    assert counts["k_indexed"][0] == 1 and counts["k_indexed"][1] >= 1, counts


@pytest.mark.compile
def test_release_acquire_and_exp_approx_compile():
    """The overlapped launch's signalling (``vec.red_release_add`` by the walk, ``vec.ld_acquire`` by a waiting output
    block) and ``vec.exp_approx`` compile for sm_90 to one PTX instruction each, with no full fence beside them (what
    ``threadfence`` was: ``fence.sc.gpu``, and with it an L1 invalidation). The spin loop may be rotated (its load
    written twice)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    r = subprocess.run([sys.executable, "-c", _SYNC_EXP], env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    counts = {line.rsplit(None, 1)[0]: int(line.rsplit(None, 1)[1]) for line in r.stdout.splitlines()}
    assert counts["red.release.gpu.add.s32"] == 1 and counts["ld.acquire.gpu.b32"] >= 1, counts  # the loop rotated
    assert counts["ex2.approx.ftz.f32"] == 1, counts
    assert counts["fence.sc"] == 0 and counts["membar"] == 0, counts


_PLACEMENT = r"""
import sys
sys.path.insert(0, "tools")
from numba import cuda, types
import placement_probe as pp

sig = (types.int32[::1], types.int32[::1], types.int32[::1], types.int64)
ptx, _ = cuda.compile_ptx(pp._probe.py_func, sig, cc=(9, 0))
for s in ("%smid", "%globaltimer", "atom.global.add"):
    print(s, ptx.count(s))
"""


@pytest.mark.compile
def test_placement_probe_compiles():
    """tools/placement_probe.py (which SM each block of an overlapped-launch-shaped grid lands on; GPU only, run by
    hand) compiles for sm_90: its ``%smid`` and ``%globaltimer`` reads and the ticket's atomic are in the PTX."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    r = subprocess.run([sys.executable, "-c", _PLACEMENT], env=env, capture_output=True, text=True, timeout=600,
                       cwd=root)
    assert r.returncode == 0, r.stderr[-3000:]
    counts = dict(line.rsplit(" ", 1) for line in r.stdout.splitlines())
    assert all(int(counts[s]) >= 1 for s in ("%smid", "%globaltimer", "atom.global.add")), r.stdout


_FMA_PEAK = r"""
from numba import cuda, types
from linattn_numba import fma_peak
sig = (types.float32[::1], types.float32, types.float32, types.int64)
ptx, _ = cuda.compile_ptx(fma_peak.fma_peak.py_func, sig, cc=(9, 0))
print(ptx.count("fma.rn.f32"), ptx.count("mul.f32"), ptx.count(".local"))
"""


@pytest.mark.compile
def test_fma_peak_kernel_is_multiply_adds():
    """The bench's fp32-peak probe (``fma_peak.fma_peak``, timed by ``bench.bench_fp32_peak``: the denominator of
    every rung's share of the FMA rate) compiles to what it claims to measure: one ``fma.rn.f32`` per chain and step
    of its unrolled loop (the multiply and add contracted, no separate ``mul``), chains in registers (no local
    memory)."""
    from linattn_numba import fma_peak

    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    r = subprocess.run([sys.executable, "-c", _FMA_PEAK], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    fma, mul, local = (int(x) for x in r.stdout.split())
    assert fma == fma_peak.CHAINS * fma_peak.UNROLL and mul == 0 and local == 0


_NVVM_INLINE = r"""
from numba import cuda, float32
from linattn_numba._common import nvvm_inline

@nvvm_inline
def axpy_row(sm, acc, off, s):
    for e in range(4):
        acc[e] += sm[off + 4 * s + e] * float32(2.0)

def k(x, y):
    sm = cuda.shared.array(64, float32)
    acc = cuda.local.array(4, float32)
    tid = cuda.threadIdx.x
    sm[tid] = x[tid]
    cuda.syncthreads()
    for e in range(4):
        acc[e] = float32(0.0)
    axpy_row(sm, acc, 0, 1)  # constant offsets, as r3's output steps pass them
    axpy_row(sm, acc, 32, 2)
    for e in range(4):
        y[4 * tid + e] = acc[e]

ptx, _ = cuda.compile_ptx(k, (float32[::1], float32[::1]), cc=(9, 0))
print("call", ptx.count("call."), "func", ptx.count(".func "), "local", ptx.count(".local"),
      "ld.shared", ptx.count("ld.shared.f32"))
"""


@pytest.mark.compile
def test_nvvm_inline_compiles_inlined_without_a_gpu():
    """``_common.nvvm_inline`` (r3's output products: NVVM inlines them, not Numba) compiles for sm_90 where no GPU
    is (CI: numba-cuda would ask the driver for the current device's compute capability), and the result is what
    Numba's own inlining gives: no call left, the accumulators in registers (no local memory), the shared loads
    still shared loads with the constant offsets folded (8 of them, one per element read)."""
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    r = subprocess.run([sys.executable, "-c", _NVVM_INLINE], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    words = r.stdout.split()
    counts = dict(zip(words[::2], (int(w) for w in words[1::2])))
    assert counts == {"call": 0, "func": 0, "local": 0, "ld.shared": 8}, r.stdout
