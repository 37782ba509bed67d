"""Small pieces shared by the rungs: stand-ins for absent optional arrays, launch arithmetic, type lists, the
device scratch kept between calls."""

from __future__ import annotations

import contextlib
import functools
import math
import threading

import numpy as np
from . import sim

# Every module that defines kernels imports this one: under the CUDA simulator, the project's fixes and warp
# intrinsics go in before any kernel is defined or launched, whichever entry point the caller used.
if sim.active():
    sim.install()

from numba import config, cuda, types  # noqa: E402


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


_scratch_cache = {}


def scratch_key(name, stream):
    """Whose scratch buffer: one per name, calling thread, stream and device. A kernel writes the scratch and a
    later one on the same stream reads it; two threads (or two streams) sharing one buffer could interleave their
    launches (A's intra, B's intra, A's state) and read each other's data."""
    dev = 0
    if not config.ENABLE_CUDASIM:
        dev = cuda.get_current_device().id
    return name, threading.get_ident(), stream if isinstance(stream, int) else id(stream), dev


def scratch(name, shape, stream, dtype=np.float32):
    """A C-contiguous device array of ``shape`` (float32 unless ``dtype``; r3's overlapped launch keeps int32
    counts): a view of the start of one flat buffer per
    :func:`scratch_key`, kept between calls and grown (replaced by a larger one) only when ``shape`` needs more
    elements than it holds.

    Why a flat buffer and not one per shape: allocating costs time, and freeing synchronises the device (Numba
    frees in batches, with ``cuMemFree``), so a caller that alternates between shapes -- r4 runs its engine on
    [v | 0] columns in phase 1 and on v in phase 3, and its short tail segment in between -- would otherwise
    reallocate on every call and stall the host until the GPU drains. The contents are not kept: every caller
    writes its scratch before it reads it.
    """
    key = scratch_key(name, stream)
    n = math.prod(shape)
    buf = _scratch_cache.get(key)
    if buf is None or buf.size < n:
        _scratch_cache.pop(key, None)  # drop the old buffer before allocating the larger one
        buf = cuda.device_array(max(n, 1), dtype, stream=stream)
        _scratch_cache[key] = buf
    return buf[:n].reshape(tuple(shape))


def release_scratch():
    """Drop every kept scratch buffer (their memory is freed once no array view of them is alive)."""
    _scratch_cache.clear()


SMEM_STATIC_LIMIT = 48 * 1024  # above this a kernel must opt in to more dynamic shared memory
SMEM_MAX = 227 * 1024  # the most dynamic shared memory one block may opt in to (H100 / H200)
_smem_opted_in = set()


def launch_dynamic(kernel, grid, block, smem, stream, args):
    """``kernel[grid, block, stream, smem](*args)``, first raising the kernel's dynamic shared-memory limit
    (48 KB unless the kernel opts in) when ``smem`` needs it: ``cuKernelSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES)``
    on the compiled kernel's function handle, once per kernel and size."""
    if smem > SMEM_STATIC_LIMIT and not config.ENABLE_CUDASIM:
        compiled = kernel.compile(tuple(kernel.typeof_pyval(a) for a in args))
        key = (id(compiled), smem)
        if key not in _smem_opted_in:
            set_kernel_attribute(compiled, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES", smem)
            _smem_opted_in.add(key)
    kernel[grid, block, stream, smem](*args)


def set_kernel_attribute(compiled, attr: str, value: int):
    """``cuKernelSetAttribute(attr, value)`` on a compiled kernel's function handle (``kernel.compile(sig)``'s
    result; ``attr`` a ``CUfunction_attribute`` name, e.g. ``CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT``)."""
    from numba.cuda.cudadrv import driver as drv

    compiled.bind()
    cufunc = compiled._codelibrary.get_cufunc()
    drv.driver.cuKernelSetAttribute(getattr(drv.binding.CUfunction_attribute, attr), value, cufunc.handle,
                                    cufunc.device.id)


class _PtxOnlyDevice:
    """What numba-cuda asks of "the current device" when it compiles a device function on its own, where no GPU is:
    only its compute capability, the project's target (H100 / H200; the compile tier's ``cc``)."""

    compute_capability = (9, 0)


def nvvm_inline(fn):
    """``fn`` as a device function that NVVM inlines into its callers (``forceinline``), where ``inline="always"``
    has Numba inline it. Same code in the end (r3's output kernel: the same FFMA and LDS counts, within 8 of its 5,648
    SASS instructions), but Numba types and lowers ``fn`` once per signature, not once per call site: r3's output
    with its slabs written out (``_out_body``'s steps: a product call a slab, 6 a pass at C = 64, K' = 128) took
    Numba 114 s to PTX on the CI machine with its products inlined by Numba, 42-48 s this way. In the simulator,
    an ordinary device function.

    numba-cuda compiles such a function for the current device's compute capability, which fails where no GPU is
    (the compile tier, ``linattn-numba compile-check``): there, and only for these functions, it is compiled for
    compute capability 9.0 (its NVVM IR is linked into the kernel, which ``compile_ptx`` builds for the ``cc`` it
    was given)."""
    if config.ENABLE_CUDASIM:
        return cuda.jit(device=True)(fn)
    from numba.cuda import dispatcher
    from numba.cuda.cudadrv.error import CudaSupportError

    disp = cuda.jit(device=True, forceinline=True)(fn)
    compile_device = disp.compile_device  # bound to disp

    def compile_device_anywhere(args, return_type=None):
        try:
            return compile_device(args, return_type)
        except CudaSupportError:  # no driver: compile for cc 9.0 (see above)
            real = dispatcher.get_current_device
            dispatcher.get_current_device = _PtxOnlyDevice
            try:
                return compile_device(args, return_type)
            finally:
                dispatcher.get_current_device = real

    disp.compile_device = compile_device_anywhere
    return disp


@contextlib.contextmanager
def kernels_made(module, factory: str):
    """Inside the block, ``module.<factory>`` (a rung's kernel factory, e.g. r1's ``_kernel``) also records what
    it hands out: yields a list that gets ``(args, kwargs, kernel)`` for every call, in order (a cached kernel
    again each time it is asked for). The launches' own code is untouched: tools read the compiled kernels that a
    forward really used (their registers, their cubins) instead of working out its choice again."""
    made, real = [], getattr(module, factory)

    def recording(*args, **kwargs):
        kern = real(*args, **kwargs)
        made.append((args, kwargs, kern))
        return kern

    setattr(module, factory, recording)
    try:
        yield made
    finally:
        setattr(module, factory, real)


def rows_aligned(*arrays) -> bool:
    """Whether these 4-D arrays (``None`` entries are skipped) can be read and written 16 bytes at a time:
    float32, the last axis a multiple of 4 long and contiguous, every row starting on a 16-byte boundary (the
    128-bit and ``cp.async`` paths of r1, r3, r5 and r6 ask it of their inputs, r1's vector decode step of its
    state buffers)."""
    for a in arrays:
        if a is None:
            continue
        if a.dtype != np.float32 or a.shape[3] % 4 or a.strides[3] != 4 or any(x % 16 for x in a.strides[:3]):
            return False
        if not config.ENABLE_CUDASIM and a.__cuda_array_interface__["data"][0] % 16:
            return False
    return True
