"""The fp32 FMA rate a GPU sustains, measured: the compute ceiling of ``linattn-numba bench`` (its ``fp32_peak``
record) and the denominator of every rung's "share of the fp32 FMA rate" in the README's table and the roofline.

A kernel that does nothing but fused multiply-adds: every thread runs :data:`CHAINS` independent chains
``x <- a x + b`` (independent, so that a warp always has one whose last result is ready: an FMA's result takes ~4
cycles, and a scheduler issues one warp instruction a cycle), :data:`UNROLL` steps of each per loop step, and
stores the sum of its chains (so the compiler cannot drop them). The bench launches 8 blocks of 256 threads per SM
(every SM full) and checks every thread's result against :func:`expected`, the float64 closed form, before it times
the kernel: a miscompiled or short-cut loop fails the check instead of reporting a rate.

Napkin math: an H100/H200 SM has 128 fp32 lanes, so 132 SMs at 1.98 GHz give 132 x 128 x 2 x 1.98e9 = 66.9
TFLOP/s (:func:`nominal_tflops` from the clock the driver reports); what the probe measures under load is the
realistic ceiling, and cuBLAS's fp32 GEMM (no TF32) reaches ~51 TFLOP/s on the H200 against it.
"""

from __future__ import annotations

from numba import cuda, float32

CHAINS = 16  # independent chains a thread: 4 warps a scheduler x 16 chains cover the FMA latency many times over
UNROLL = 8  # steps of every chain per loop step: 128 FMAs a loop step, beside which the loop's few instructions vanish
A, B = 0.999, 0.001  # x <- A x + B contracts towards B / (1 - A) = 1: no chain over- or underflows, however long
FP32_LANES_PER_SM = {7: 64, 8: 64, 9: 128}  # by major compute capability (sm_86, 87, 89: 128, in nominal_tflops)


@cuda.jit
def fma_peak(out, a, b, iters):
    """out[i] = the sum over j < CHAINS of x_j after ``iters`` x UNROLL steps x <- a x + b from x_j = j / 16: one
    ``fma.rn.f32`` a step (the compile tier checks the PTX). ``out``: float32 [threads]; a, b: float32."""
    i = cuda.grid(1)
    x = cuda.local.array(CHAINS, float32)  # constant indices only: registers
    for j in range(CHAINS):
        x[j] = float32(j) * float32(0.0625)  # distinct starts: the closed form is checked for every chain's sum
    for _ in range(iters):
        for _u in range(UNROLL):
            for j in range(CHAINS):
                x[j] = x[j] * a + b
    s = float32(0.0)
    for j in range(CHAINS):
        s += x[j]
    if i < out.size:  # every thread stores: the chains cannot be dropped as dead code
        out[i] = s


def expected(iters: int) -> float:
    """What every thread of :func:`fma_peak` writes, in float64: the sum over the chains of x_n = A^n x_0 + B (1 -
    A^n) / (1 - A), n = iters x UNROLL, x_0 = j / 16."""
    n = iters * UNROLL
    an = A**n
    return float(sum(an * (j * 0.0625) + B * (1.0 - an) / (1.0 - A) for j in range(CHAINS)))


def nominal_tflops():
    """The datasheet fp32 rate of the current device: SMs x fp32 lanes x 2 FLOPs x the clock the driver reports
    (its highest), or None where the lanes per SM of its compute capability are not known here."""
    dev = cuda.get_current_device()
    major, minor = dev.compute_capability
    lanes = 128 if (major, minor) in ((8, 6), (8, 7), (8, 9)) else FP32_LANES_PER_SM.get(major)
    if lanes is None:
        return None
    return dev.MULTIPROCESSOR_COUNT * lanes * 2 * dev.CLOCK_RATE * 1e3 / 1e12  # CLOCK_RATE: kHz
