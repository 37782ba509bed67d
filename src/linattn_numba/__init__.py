"""linattn-numba: linear-attention GPU kernels in Numba CUDA, as a ladder of rungs each checked against NumPy.

Quick start::

    import numpy as np, linattn_numba as la
    B, T, H, K, V = 1, 64, 2, 32, 32
    rng = np.random.default_rng(0)
    q, k = rng.standard_normal((2, B, T, H, K), dtype=np.float32)
    k /= np.linalg.norm(k, axis=-1, keepdims=True)
    v = rng.standard_normal((B, T, H, V), dtype=np.float32)
    g = np.log(rng.uniform(0.9, 1.0, (B, T, H))).astype(np.float32)
    beta = rng.uniform(0, 1, (B, T, H)).astype(np.float32)
    o, state = la.attention(q, k, v, g, beta, output_final_state=True)   # Gated DeltaNet

Public names: :func:`attention`, :func:`step`, :data:`RUNGS`, :func:`auto_rung`, :func:`release_scratch` (frees the
device scratch the chunked rungs keep between calls), the oracles in :mod:`linattn_numba.reference`, and the
simulator extension :mod:`linattn_numba.sim`.

Importing the package does not import numba: the names above load on first use. That keeps the choice of the
CUDA simulator open until then (``linattn_numba.sim.enable()``, the CLI's automatic switch when there is no GPU).
"""

from . import sim

__version__ = "0.1.0"
__all__ = ["attention", "step", "auto_rung", "RUNGS", "release_scratch", "reference", "sim", "__version__"]

_LAZY = {"attention": "api", "step": "api", "auto_rung": "api", "RUNGS": "rungs", "release_scratch": "_common"}


def __getattr__(name):
    import importlib

    if name in _LAZY:
        value = getattr(importlib.import_module(f"{__name__}.{_LAZY[name]}"), name)
        globals()[name] = value
        return value
    if name == "reference":
        return importlib.import_module(f"{__name__}.reference")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY) | {"reference"})
