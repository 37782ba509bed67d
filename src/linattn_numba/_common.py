"""Small pieces shared by the rungs: stand-ins for absent optional arrays, launch arithmetic, type lists."""

from __future__ import annotations

import functools

import numpy as np
from . import sim

# Every module that defines kernels imports this one: under the CUDA simulator, the project's fixes and warp
# intrinsics go in before any kernel is defined or launched, whichever entry point the caller used.
if sim.active():
    sim.install()

from numba import cuda, types  # noqa: E402


def cdiv(a: int, b: int) -> int:
    """Ceiling division: how many tiles of size ``b`` cover ``a``."""
    return -(-a // b)


@functools.lru_cache(maxsize=None)
def _dummy(ndim: int):
    return cuda.to_device(np.zeros((1,) * ndim, dtype=np.float32))


def or_dummy(a, ndim: int):
    """``a``, or a 1-element float32 device array standing in for an absent optional argument.

    The kernels are specialised on compile-time flags (``HAS_G``, ``HAS_BETA``, ...) and never touch the stand-in;
    it only keeps the kernel's argument list the same for every recurrence.
    """
    return _dummy(ndim) if a is None else a


def array_type(dtype, ndim: int, layout: str = "A"):
    """Numba array type, for the compile tier's explicit signatures."""
    return types.Array(types.float32 if dtype == np.float32 else types.float16, ndim, layout)


# What the compile tier checks: inputs in float32 and float16 (gates and state are always float32).
INPUT_DTYPES = (np.float32, np.float16)

FLAG_COMBOS = tuple((has_g, has_beta) for has_beta in (False, True) for has_g in (False, True))
"""(has_g, has_beta) for the four recurrences, in the order of ``reference.RECURRENCES``."""
