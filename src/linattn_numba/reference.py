"""NumPy float64 oracles: the readable statement of what every kernel computes.

One convention everywhere (it matches flash-linear-attention's ``naive_recurrent_*`` functions)::

    q, k : [B, T, H, K]        v : [B, T, H, V]
    g    : [B, T, H]  log-space decay, g <= 0        (optional)
    beta : [B, T, H]  delta-rule step, 0 <= beta <= 1 (optional)
    initial_state, final state : [B, H, K, V]

Per (b, h), with the state S of shape [K, V] (S_0 = initial state or 0), for t = 0 .. T-1::

    S <- exp(g_t) * S                        (only when g is given)
    S <- S - beta_t * k_t (k_t^T S)          (only when beta is given: the delta rule)
    S <- S + beta_t * k_t v_t^T              (beta_t = 1 when beta is not given)
    o_t = scale * S^T q_t

Which of g / beta is given selects the recurrence:

=========  ========  ===========================================================
g          beta      recurrence
=========  ========  ===========================================================
None       None      ``plain``: causal linear attention
given      None      ``decay``: scalar-decay gating (RetNet / Lightning / Mamba2, fla's simple GLA)
None       given     ``delta``: DeltaNet
given      given     ``gated_delta``: Gated DeltaNet
=========  ========  ===========================================================

Three forms compute the same function and are cross-checked by the tests to ~1e-10:

* :func:`recurrent` -- the loop above, token by token: O(T K V) work, sequential in T.
* :func:`chunked`   -- the chunkwise-parallel algorithm the chunked kernels implement.
* :func:`parallel`  -- the whole sequence as one chunk: O(T^2 (K + V)) work, the "attention matrix" view.

All return ``(o, final_state)`` with ``o`` of shape [B, T, H, V] and ``final_state`` of shape [B, H, K, V],
both float64.
"""

from __future__ import annotations

import numpy as np

RECURRENCES = ("plain", "decay", "delta", "gated_delta")


def recurrence_name(g, beta) -> str:
    """Name of the recurrence that the presence of ``g`` / ``beta`` selects (see the module docstring)."""
    return RECURRENCES[(g is not None) + 2 * (beta is not None)]


def _prepare(q, k, v, g, beta, scale, initial_state):
    q = np.asarray(q, dtype=np.float64)
    k = np.asarray(k, dtype=np.float64)
    v = np.asarray(v, dtype=np.float64)
    B, T, H, K = q.shape
    V = v.shape[-1]
    if k.shape != (B, T, H, K) or v.shape != (B, T, H, V):
        raise ValueError(f"expected q, k [B, T, H, K] and v [B, T, H, V]; got {q.shape}, {k.shape}, {v.shape}")
    g = None if g is None else np.asarray(g, dtype=np.float64)
    beta = None if beta is None else np.asarray(beta, dtype=np.float64)
    for name, a in (("g", g), ("beta", beta)):
        if a is not None and a.shape != (B, T, H):
            raise ValueError(f"expected {name} of shape [B, T, H] = {(B, T, H)}, got {a.shape}")
    scale = K**-0.5 if scale is None else float(scale)
    S0 = np.zeros((B, H, K, V)) if initial_state is None else np.array(initial_state, dtype=np.float64)
    if S0.shape != (B, H, K, V):
        raise ValueError(f"expected initial_state of shape [B, H, K, V] = {(B, H, K, V)}, got {S0.shape}")
    return q, k, v, g, beta, scale, S0


def recurrent(q, k, v, g=None, beta=None, *, scale=None, initial_state=None):
    """The recurrence, one token at a time (the definition).

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V]; g, beta: [B, T, H] or None; initial_state: [B, H, K, V] or None.
        scale: multiplies the output; default ``K ** -0.5``.

    Returns:
        (o [B, T, H, V], final_state [B, H, K, V]), float64.
    """
    q, k, v, g, beta, scale, S = _prepare(q, k, v, g, beta, scale, initial_state)
    B, T, H, K = q.shape
    o = np.empty(v.shape)
    for t in range(T):
        qt, kt, vt = q[:, t], k[:, t], v[:, t]  # [B, H, K], [B, H, K], [B, H, V]
        if g is not None:
            S = S * np.exp(g[:, t])[:, :, None, None]
        if beta is not None:
            b = beta[:, t][:, :, None]  # [B, H, 1]
            kS = np.einsum("bhk,bhkv->bhv", kt, S)
            S = S + np.einsum("bhk,bhv->bhkv", kt, b * (vt - kS))
        else:
            S = S + np.einsum("bhk,bhv->bhkv", kt, vt)
        o[:, t] = scale * np.einsum("bhk,bhkv->bhv", qt, S)
    return o, S
