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

Public names: :func:`attention`, :func:`step`, :data:`RUNGS`, :func:`auto_rung`, the oracles in
:mod:`linattn_numba.reference`, and the simulator extension :mod:`linattn_numba.sim`.
"""

from . import sim

# Under Numba's CUDA simulator, install the project's fixes and warp intrinsics before any kernel is defined.
if sim.active():
    sim.install()

from . import reference  # noqa: E402
from .api import attention, auto_rung, step  # noqa: E402
from .rungs import RUNGS  # noqa: E402

__version__ = "0.1.0"
__all__ = ["attention", "step", "auto_rung", "RUNGS", "reference", "sim", "__version__"]
