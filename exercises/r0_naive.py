"""Exercise r0 ``naive``: write the recurrence as a CUDA kernel, literally, one thread per value column.

Your job
    Fill in the body of ``naive_kernel`` below (the ``# TODO(r0)`` block). Everything else -- the contract names,
    the launch in :func:`forward`, :func:`compile_targets` -- is given and already matches the package's rung.
    The math is :func:`linattn_numba.reference.recurrent` (read its docstring first): per (b, h), with the state
    ``S [K, V]``, for every token t::

        S <- exp(g_t) * S                        (only when g is given)
        S <- S - beta_t * k_t (k_t^T S)          (only when beta is given: the delta rule)
        S <- S + beta_t * k_t v_t^T              (beta_t = 1 when beta is not given)
        o_t = scale * S^T q_t

Grade it
    linattn-numba grade exercises/r0_naive.py --quick     # 4 cases, a few seconds (no GPU needed: simulator)
    linattn-numba grade exercises/r0_naive.py             # all cases

    As given (the kernel body is ``pass``) every case FAILS with "some outputs never written": the outputs are
    pre-filled with NaN and nothing overwrites them.

Afterwards
    Compare with ``src/linattn_numba/rungs/r0_naive.py``; then do ``exercises/r1_recurrent.py``.
"""

from __future__ import annotations

import functools
import math  # noqa: F401 - you will need math.exp

import numpy as np
from numba import cuda, float32, types  # noqa: F401 - float32(...) converts and types a value

from linattn_numba._common import FLAG_COMBOS, INPUT_DTYPES, array_type, cdiv, or_dummy

NAME = "naive"
MAX_K = None  # the state lives in global memory: any K, V
MAX_V = None
CHUNK_SIZES = None  # token by token: chunk_size is not used

BLOCK = 64  # threads per block (value columns per block)


@functools.lru_cache(maxsize=None)
def _kernel(HAS_G: bool, HAS_BETA: bool, HAS_H0: bool):
    @cuda.jit
    def naive_kernel(q, k, v, g, beta, h0, S, o, scale):
        # TODO(r0): the recurrence for value column j of head (b, h), all T tokens, in this one thread.
        #
        # Arguments: q, k [B, T, H, K]; v [B, T, H, V]; g, beta [B, T, H]; h0 and S [B, H, K, V]; o [B, T, H, V].
        #   S is where the state lives while the kernel runs: forward passes ht when the caller wants the final
        #   state, else a scratch buffer -- so when the kernel ends, S[b, h] must hold the final state.
        #   h0 may be the same array as S (a decode step updates the state in place): read your column of h0
        #   before you write that column of S.
        #
        # Thread map (forward launches grid (ceil(V / BLOCK), B * H), BLOCK threads a block):
        #   j  = cuda.blockIdx.x * cuda.blockDim.x + cuda.threadIdx.x     the value column this thread owns
        #   bh = cuda.blockIdx.y;  b = bh // H;  h = bh % H                (B, T, H, K = q.shape;  V = v.shape[3])
        #   The last block is partial when V % BLOCK != 0: a thread with j >= V must not touch memory (return).
        #   Column j of S only ever mixes with column j of v and of o, so the threads never talk to each other:
        #   no barrier (cuda.syncthreads) and no shuffle is needed anywhere in r0.
        #
        # Steps:
        #   1. S[b, h, i, j] <- h0[b, h, i, j] if HAS_H0 else 0, for every row i < K.
        #   2. for t in range(T):
        #        if HAS_G:    S[b, h, i, j] *= exp(g[b, t, h])                     for every i
        #        if HAS_BETA: u = beta[b, t, h] * (v[b, t, h, j] - sum_i k[b, t, h, i] * S[b, h, i, j])
        #        else:        u = v[b, t, h, j]
        #        S[b, h, i, j] += k[b, t, h, i] * u                                 for every i
        #        o[b, t, h, j] = scale * sum_i q[b, t, h, i] * S[b, h, i, j]        (S *after* the update)
        #      The update and the output sum can share one loop over i.
        #
        # Compile-time flags: HAS_G, HAS_BETA, HAS_H0 are constants of this kernel variant -- write `if HAS_G:` and
        #   Numba drops the dead branch. When a flag is False the matching argument is a 1-element stand-in
        #   (or_dummy): never index it.
        # Types: q, k, v (and g, beta) may be float16. Convert every element you read with float32(...), start every
        #   sum at float32(0.0) and keep the arithmetic in float32 (math.exp of a float32 is fine: wrap it in
        #   float32(...) again); the grader's float16 case checks this.
        # Memory traffic: nothing to optimise yet -- r0 is the literal transcription. Per token it reads and writes
        #   its state column in global memory three to four times (K floats each time): about 6 K V * 4 bytes of
        #   state traffic per token per head, against (2 K + V) * 4 bytes of input. That ratio is what r1 removes
        #   (state read once and written once per sequence).
        pass

    return naive_kernel


def forward(q, k, v, g, beta, o, h0, ht, scale, chunk_size=None, stream=0):
    """Launch r0 (see the rung contract in :mod:`linattn_numba.rungs`). Given: nothing to change here.

    The state is updated in ``ht`` when it is given (so ``h0`` and ``ht`` may be the same array), otherwise in a
    scratch buffer.
    """
    B, T, H, K = q.shape
    V = v.shape[3]
    S = ht if ht is not None else cuda.device_array((B, H, K, V), dtype="float32", stream=stream)
    kern = _kernel(g is not None, beta is not None, h0 is not None)
    grid = (cdiv(V, BLOCK), B * H)
    kern[grid, BLOCK, stream](q, k, v, or_dummy(g, 3), or_dummy(beta, 3), or_dummy(h0, 4), S, o, float32(scale))


def compile_targets():
    """Every variant r0 can launch, as ``(label, py_func, argtypes)`` for ``numba.cuda.compile_ptx``. Given."""
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
