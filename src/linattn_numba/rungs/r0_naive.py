"""Rung r0 ``naive``: the recurrence transcribed literally, one thread per value column.

What it is
    The loop of :func:`linattn_numba.reference.recurrent`, written as a CUDA kernel with no cleverness at all. The
    state ``S [K, V]`` of one (b, h) lives in global memory (the output ``ht`` buffer, or a scratch one), and each
    thread owns one column ``S[:, j]``: column ``j`` of the state only ever mixes with column ``j`` of ``v`` and
    of the output, so the columns are independent and need no communication at all::

        S[:, j] <- exp(g_t) S[:, j]
        u_j     <- beta_t (v_tj - k_t . S[:, j])     (delta rule)   or  v_tj   (additive rules)
        S[:, j] <- S[:, j] + u_j k_t
        o_tj    <- scale q_t . S[:, j]

    All four recurrences come from one source: :func:`_kernel` closes over the compile-time flags ``HAS_G``,
    ``HAS_BETA``, ``HAS_H0`` and Numba folds the branches away, so each variant carries only its own arithmetic.

Thread map
    grid ``(ceil(V / 64), B * H)``, block 64 threads; thread ``j`` of block ``(x, bh)`` owns column
    ``x * 64 + j`` of head ``bh``. Consecutive threads own consecutive columns, so every access to ``S[i, j]``,
    ``v[.., j]`` and ``o[.., j]`` is coalesced across the warp; ``q[i]``, ``k[i]`` are the same address for the whole
    warp (a broadcast).

Cost per token (per head)
    FLOPs: ``2 K V`` (update) + ``2 K V`` (output) + ``2 K V`` (delta rule's ``k.S``) + ``K V`` (decay).
    Bytes (what the kernel touches, mostly hitting L1/L2): the state is read and written once per token per
    use -- ``(2 + 2 + 1 + 1) K V * 4`` bytes -- against ``(2K + V) * 4`` bytes of input per token that a perfect
    kernel would move. That ratio, ~``3 V``, is the whole lesson: r0 is bound by latency and by state traffic, and
    has only ``B * H * V`` threads in flight (8192 at the standard shape for a GPU that wants ~100k).

What the next rung changes
    r1 ``recurrent`` keeps the state in registers (read once, written once) and splits ``K`` across lanes of a warp.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from numba import cuda, float32, types

from .._common import FLAG_COMBOS, INPUT_DTYPES, array_type, cdiv, or_dummy

NAME = "naive"
MAX_K = None  # the state lives in global memory: any K, V
MAX_V = None
CHUNK_SIZES = None  # token by token: chunk_size is not used

BLOCK = 64  # threads per block (value columns per block): two warps, enough to keep the launch cheap


@functools.lru_cache(maxsize=None)
def _kernel(HAS_G: bool, HAS_BETA: bool, HAS_H0: bool):
    @cuda.jit
    def naive_kernel(q, k, v, g, beta, h0, S, o, scale):
        B, T, H, K = q.shape
        V = v.shape[3]
        j = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x
        bh = cuda.blockIdx.y
        b = bh // H
        h = bh % H
        if j >= V:
            return
        for i in range(K):
            if HAS_H0:
                S[b, h, i, j] = h0[b, h, i, j]
            else:
                S[b, h, i, j] = float32(0.0)
        for t in range(T):
            if HAS_G:
                decay = float32(math.exp(float32(g[b, t, h])))
                for i in range(K):
                    S[b, h, i, j] = S[b, h, i, j] * decay
            if HAS_BETA:
                kS = float32(0.0)
                for i in range(K):
                    kS += float32(k[b, t, h, i]) * S[b, h, i, j]
                u = float32(beta[b, t, h]) * (float32(v[b, t, h, j]) - kS)
            else:
                u = float32(v[b, t, h, j])
            acc = float32(0.0)
            for i in range(K):
                s = S[b, h, i, j] + float32(k[b, t, h, i]) * u
                S[b, h, i, j] = s
                acc += float32(q[b, t, h, i]) * s
            o[b, t, h, j] = float32(scale) * acc

    return naive_kernel


def forward(q, k, v, g, beta, o, h0, ht, scale, chunk_size=None, stream=0):
    """Launch r0 (see the rung contract in :mod:`linattn_numba.rungs`).

    The state is updated in ``ht`` when it is given (so ``h0`` and ``ht`` may be the same array: each thread reads
    its column of ``h0`` before it writes that column), otherwise in a scratch buffer.
    """
    B, T, H, K = q.shape
    V = v.shape[3]
    S = ht if ht is not None else cuda.device_array((B, H, K, V), dtype="float32", stream=stream)
    kern = _kernel(g is not None, beta is not None, h0 is not None)
    grid = (cdiv(V, BLOCK), B * H)
    kern[grid, BLOCK, stream](q, k, v, or_dummy(g, 3), or_dummy(beta, 3), or_dummy(h0, 4), S, o, float32(scale))


def compile_targets():
    """Every variant r0 can launch, as ``(label, py_func, argtypes)`` for ``numba.cuda.compile_ptx``."""
    f32 = types.float32
    for dt in INPUT_DTYPES:
        for has_g, has_beta in FLAG_COMBOS:
            for has_h0 in (False, True):
                argtypes = (
                    array_type(dt, 4), array_type(dt, 4), array_type(dt, 4),
                    array_type(dt, 3), array_type(dt, 3), array_type(np.float32, 4),
                    array_type(np.float32, 4, "C"), array_type(np.float32, 4, "C"), f32,
                )
                label = f"naive g={has_g} beta={has_beta} h0={has_h0} {dt.__name__}"
                yield label, _kernel(has_g, has_beta, has_h0).py_func, argtypes
