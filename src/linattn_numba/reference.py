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


def chunked(q, k, v, g=None, beta=None, *, scale=None, initial_state=None, chunk_size=64):
    """The chunkwise-parallel algorithm: what the chunked kernels implement, stated in NumPy.

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V]; g, beta: [B, T, H] or None; initial_state: [B, H, K, V] or None.
        scale: multiplies the output; default ``K ** -0.5``.
        chunk_size: C, the tokens per chunk; the last chunk may be shorter (T need not be a multiple of C).

    Returns:
        (o [B, T, H, V], final_state [B, H, K, V]), float64. T = 0 gives an empty ``o`` and the initial state.

    The sequence is cut into chunks of C tokens. Inside a chunk (rows Q, K [C, K], V [C, V], per (b, h)) the
    tokens are handled all at once by matrix products, and only the state S [K, V] is carried from chunk to
    chunk. With the in-chunk cumulative log-gates ``b_t = sum_{s <= t, s in chunk} g_s`` (0 without g)::

        gamma_t   = exp(b_t)                   decay from the chunk's start to token t  (1 without g)
        Gamma_ts  = exp(b_t - b_s), s <= t     decay from token s to token t            (0 for s > t)
        gamma_C   = exp(b_{C-1})               decay over the whole chunk (C-1: its last token)

    Additive family (plain, decay), with V_new = V::

        O  = scale * (diag(gamma) Q S  +  (Q K^T ⊙ Gamma) V_new)       the causal mask includes the diagonal
        S+ = gamma_C S  +  (diag(gamma_C / gamma) K)^T V_new          gamma_C / gamma_t = exp(b_{C-1} - b_t)

    The first term of O is what the chunk's starting state contributes (the "inter-chunk" part); the second
    is ordinary causal attention inside the chunk with the decay mask Gamma (the "intra-chunk" part).

    Delta family (delta, gated delta), in the UT / WY form. Each token's write ``beta_t k_t (v_t - k_t^T S)^T``
    depends on the state just before it, so the chunk's value rows are first corrected for what the state
    (and the earlier tokens of the chunk) already hold. Unrolling the recurrence inside the chunk gives the
    corrected values V_new as the solution of a unit-lower-triangular system::

        A     = (I + tril(diag(beta) (K K^T ⊙ Gamma), -1))^-1        [C, C], strictly lower part only
        W     = A diag(beta) diag(gamma) K                           [C, K]
        U     = A diag(beta) V                                       [C, V]
        V_new = U - W S                                              [C, V]

    and then the same O and S+ formulas as above with this V_new. Here A is computed by forward substitution,
    row by row, as a kernel would (``A[i] = e_i - sum_{m<i} L[i, m] A[m]`` with L the strictly lower matrix
    inside the inverse); W and U do not depend on S, so every chunk can compute them in parallel, and only
    ``V_new = U - W S`` and the state update are sequential over chunks.

    Why every exponent is a difference ``b_t - b_s <= 0`` (never a positive one): the tempting factorisation
    Gamma_ts = gamma_t / gamma_s = exp(b_t) * exp(-b_s) needs exp(-b_s), which overflows float32 once the
    decay accumulated in the chunk passes ~88 (e.g. 64 tokens of g = -2), and then inf * 0 turns into NaN;
    exp(b_t) alone underflows to 0 and loses the information. Differences of in-chunk cumulative gates with
    s <= t are <= 0, so each factor lies in [0, 1]: it may underflow to 0, which is the right answer, but
    never overflows. The same holds for gamma_t = exp(b_t - 0) and gamma_C / gamma_t = exp(b_{C-1} - b_t).
    Entries above the diagonal are masked *before* the exponential (exp(-inf) = 0), not multiplied by 0 after.
    """
    q, k, v, g, beta, scale, S = _prepare(q, k, v, g, beta, scale, initial_state)
    chunk_size = int(chunk_size)
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    B, T, H, K = q.shape
    V = v.shape[-1]
    delta = beta is not None
    o = np.empty((B, T, H, V))
    # Work in [B, H, T, *] so that the per-chunk products are batched matrix products over (b, h).
    qh, kh, vh = (x.transpose(0, 2, 1, 3) for x in (q, k, v))
    gh = None if g is None else g.transpose(0, 2, 1)  # [B, H, T]
    betah = None if beta is None else beta.transpose(0, 2, 1)
    for t0 in range(0, T, chunk_size):
        t1 = min(t0 + chunk_size, T)
        L = t1 - t0
        Qc, Kc, Vc = qh[:, :, t0:t1], kh[:, :, t0:t1], vh[:, :, t0:t1]  # [B, H, L, K or V]
        # In-chunk cumulative gates and the decay factors, all as exp(difference <= 0).
        bt = np.zeros((B, H, L)) if gh is None else np.cumsum(gh[:, :, t0:t1], axis=-1)
        causal = np.tril(np.ones((L, L), dtype=bool))  # s <= t
        diff = np.where(causal, bt[..., :, None] - bt[..., None, :], -np.inf)  # b_t - b_s, -inf above diagonal
        Gamma = np.exp(diff)  # [B, H, L, L]
        gamma = np.exp(bt)  # [B, H, L]
        gamma_C = gamma[..., -1]  # [B, H]
        to_end = np.exp(bt[..., -1:] - bt)  # gamma_C / gamma_t, [B, H, L]
        if delta:
            bc = betah[:, :, t0:t1]  # [B, H, L]
            # Strictly lower L = tril(diag(beta) (K K^T ⊙ Gamma), -1), then A = (I + L)^-1 by forward substitution.
            Lm = np.tril(bc[..., :, None] * (Kc @ Kc.swapaxes(-1, -2)) * Gamma, -1)
            A = np.zeros((B, H, L, L))
            for i in range(L):
                A[..., i, i] = 1.0
                A[..., i, :i] -= np.einsum("bhm,bhmj->bhj", Lm[..., i, :i], A[..., :i, :i])
            W = A @ ((bc * gamma)[..., None] * Kc)  # [B, H, L, K]
            U = A @ (bc[..., None] * Vc)  # [B, H, L, V]
            Vnew = U - W @ S
        else:
            Vnew = Vc
        inter = gamma[..., None] * (Qc @ S)  # diag(gamma) Q S
        intra = ((Qc @ Kc.swapaxes(-1, -2)) * Gamma) @ Vnew  # (Q K^T ⊙ Gamma) V_new
        o[:, t0:t1] = (scale * (inter + intra)).transpose(0, 2, 1, 3)
        S = gamma_C[..., None, None] * S + (to_end[..., None] * Kc).swapaxes(-1, -2) @ Vnew
    return o, S


def parallel(q, k, v, g=None, beta=None, *, scale=None, initial_state=None):
    """The whole sequence as one chunk: the "attention matrix" view (O(T^2 (K + V)) work and O(T^2) memory).

    Args:
        q, k: [B, T, H, K]; v: [B, T, H, V]; g, beta: [B, T, H] or None; initial_state: [B, H, K, V] or None.
        scale: multiplies the output; default ``K ** -0.5``.

    Returns:
        (o [B, T, H, V], final_state [B, H, K, V]), float64.

    Per (b, h), with the cumulative log-gates ``b_t = g_0 + ... + g_t`` over the whole sequence (0 without g),
    the decay mask ``Gamma_ts = exp(b_t - b_s)`` for s <= t and 0 above the diagonal, ``gamma_t = exp(b_t)``
    and S_0 the initial state::

        O = scale * ((Q K^T ⊙ Gamma) V_new  +  diag(gamma) Q S_0)      [T, V]
        S_T = gamma_{T-1} S_0 + (diag(exp(b_{T-1} - b)) K)^T V_new    [K, V]

    This is softmax-free attention: the score matrix Q K^T [T, T] is masked causally (diagonal included) and
    weighted by the decay between the two tokens instead of being normalised by a softmax. For the additive
    recurrences (plain, decay) V_new = V. For the delta rule (delta, gated delta), V_new is V corrected for what
    the earlier tokens already wrote: V_new = A diag(beta) (V - diag(gamma) K S_0) with
    A = (I + tril(diag(beta) (K K^T ⊙ Gamma), -1))^-1, the WY form of :func:`chunked`.

    All exponents are differences b_t - b_s with s <= t, hence <= 0: exp(b_t) and exp(-b_s) separately would
    underflow / overflow over a long sequence with strong decay (see :func:`chunked`). Computed as
    :func:`chunked` with a single chunk of length T.
    """
    T = np.shape(q)[1]
    return chunked(q, k, v, g, beta, scale=scale, initial_state=initial_state, chunk_size=max(T, 1))
