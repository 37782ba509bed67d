"""Inputs and error measures shared by the tests, the demo, the bench and the grader.

Inputs are drawn the way the recurrences are used: keys normalised to unit L2 norm per token (with
``beta`` in [0, 1] that keeps the delta rule's state bounded: each step is a contraction along ``k``), log-decays
``g = log(u)`` with ``u`` in [0.9, 1) (a memory of tens of tokens), values and queries standard normal.
"""

from __future__ import annotations

import numpy as np

from .reference import RECURRENCES


def make_inputs(B, T, H, K, V, recurrence="gated_delta", *, dtype=np.float32, initial_state=False, seed=0):
    """Random inputs for ``attention`` as a dict of NumPy arrays (keys q, k, v, g, beta, initial_state).

    Args:
        B, T, H, K, V: the shape, q/k ``[B, T, H, K]``, v ``[B, T, H, V]``.
        recurrence: one of ``reference.RECURRENCES``; decides whether g and beta are present (None otherwise).
        dtype: dtype of q, k, v, g, beta (the state is always float32).
        initial_state: draw a ``[B, H, K, V]`` starting state (else None).
        seed: for ``numpy.random.default_rng``.
    """
    if recurrence not in RECURRENCES:
        raise ValueError(f"recurrence must be one of {RECURRENCES}, got {recurrence!r}")
    rng = np.random.default_rng(seed)
    q = rng.standard_normal((B, T, H, K))
    k = rng.standard_normal((B, T, H, K))
    k /= np.maximum(np.linalg.norm(k, axis=-1, keepdims=True), 1e-6)
    v = rng.standard_normal((B, T, H, V))
    has_g = recurrence in ("decay", "gated_delta")
    has_beta = recurrence in ("delta", "gated_delta")
    g = np.log(rng.uniform(0.9, 1.0, (B, T, H))) if has_g else None
    beta = rng.uniform(0.0, 1.0, (B, T, H)) if has_beta else None
    h0 = rng.standard_normal((B, H, K, V)).astype(np.float32) * 0.5 if initial_state else None
    cast = lambda a: None if a is None else a.astype(dtype)  # noqa: E731
    return dict(q=cast(q), k=cast(k), v=cast(v), g=cast(g), beta=cast(beta), initial_state=h0)


def rel_err(a, ref) -> float:
    """``max |a - ref| / max |ref|`` (NaN anywhere in ``a`` gives inf, so a NaN never passes a tolerance)."""
    a = np.asarray(a, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if a.shape != ref.shape:
        raise ValueError(f"shape mismatch: {a.shape} vs reference {ref.shape}")
    if not np.isfinite(a).all():
        return float("inf")
    denom = max(float(np.abs(ref).max()) if ref.size else 0.0, 1e-30)
    return float(np.abs(a - ref).max()) / denom if a.size else 0.0


# float32 compute and state: observed errors are ~1e-6 at these sizes; 2e-5 leaves room and still catches a
# wrong index, a lost token or a missing decay (those give errors of 1e-2 and more).
TOL_FP32 = 2e-5
