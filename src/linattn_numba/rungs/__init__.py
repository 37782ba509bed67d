"""The ladder: one module per rung, so that ``diff`` between neighbours is the lesson.

Every rung module follows one contract (the public API in :mod:`linattn_numba.api` relies on it):

``NAME``
    the rung name: also the test id, the notebook prefix, the bench JSON key and the figure label.
``MAX_K``, ``MAX_V``
    the largest head dimensions the rung supports (``None``: no limit).
``forward(q, k, v, g, beta, o, h0, ht, scale, chunk_size, stream=0)``
    launches the rung's kernel(s). All arrays are Numba device arrays, already validated:
    q, k ``[B, T, H, K]`` and v ``[B, T, H, V]`` (float32 or float16); g, beta ``[B, T, H]`` (float32) or None;
    o ``[B, T, H, V]`` float32, written in full; h0 ``[B, H, K, V]`` float32 or None, only read;
    ht ``[B, H, K, V]`` float32 or None, written in full when given. ``chunk_size`` is ignored by the
    token-recurrent rungs.
``compile_targets()``
    yields ``(label, py_func, argtypes)`` for every kernel variant, for the compile tier
    (``numba.cuda.compile_ptx(py_func, argtypes, cc=(9, 0))`` with the simulator off).
"""

from __future__ import annotations

import importlib

# rung name -> module, in ladder order. A rung lands by adding its line here.
_MODULES = {
    "naive": "r0_naive",
    "recurrent": "r1_recurrent",
    "chunked": "r2_chunked",
    "shared": "r3_shared",
    "scan": "r4_scan",
    "warp_roles": "r5_warp_roles",
    "tensor_cores": "r6_tensor_cores",
}

RUNGS = tuple(_MODULES)


def module(name: str):
    """The module of rung ``name`` (imported on first use)."""
    if name not in _MODULES:
        raise ValueError(f"unknown rung {name!r}; available rungs: {', '.join(RUNGS)}")
    return importlib.import_module(f"{__name__}.{_MODULES[name]}")
