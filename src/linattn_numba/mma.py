"""Warp-level TF32 tensor-core products from ``@cuda.jit`` code: PTX ``mma.sync`` through an inline-asm intrinsic,
with a simulator twin, and the 3xTF32 split that keeps float32 accuracy.

Numba has no tensor-core API. This module gives kernels two primitives and one device function:

* :func:`mma_tf32` -- ``D = A B + C`` for one warp and one 16 x 8 x 8 tile, PTX
  ``mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32`` (sm_80 and later; on the H200 the same tensor cores that
  ``wgmma`` drives, issued per warp). Every one of the 32 lanes passes its fragment of A, B and C and gets its
  fragment of D back;
* :func:`to_tf32` -- ``cvt.rna.tf32.f32``: a float32 rounded to TF32 (10 explicit mantissa bits, the low 13 bits
  zero), which is what the tensor core multiplies (it ignores the low 13 bits of an operand it is given);
* :func:`split_tf32` -- ``x = big + small`` exactly, ``big`` = ``x`` with the 13 low mantissa bits cleared (two
  instructions; ``cvt.rna`` is about four on sm_90, where ptxas expands it to integer code);
* :func:`mma_3xtf32` / :func:`mma_3xtf32_split` -- float32-accurate products on TF32 hardware: each operand is
  split into ``big`` and ``small``, and ``A B ~ Ab Bb + Ab Bs + As Bb`` (the ``As Bs`` term is below float32
  resolution). Three tensor-core products instead of one; error about that of float32 FMAs. The ``_split`` form
  takes operands split already, so that a fragment used against several others is split once.

Fragment layout (PTX ISA, "Matrix Fragments for mma.m16n8k8" with .tf32; lane ``l``, ``g = l // 4``,
``i = l % 4``)::

    A, 16 x 8, row major    a0 = A[g, i]      a1 = A[g + 8, i]      a2 = A[g, i + 4]      a3 = A[g + 8, i + 4]
    B,  8 x 8, column major b0 = B[i, g]      b1 = B[i + 4, g]
    C, D, 16 x 8, float32   c0 = C[g, 2 i]    c1 = C[g, 2 i + 1]    c2 = C[g + 8, 2 i]    c3 = C[g + 8, 2 i + 1]

:func:`fragment_a`, :func:`fragment_b` and :func:`fragment_c` return the (row, column) of each register for a
lane, so that kernels and tests share one statement of the layout.

In the simulator (``NUMBA_ENABLE_CUDASIM=1``) :func:`mma_tf32` is a warp rendezvous (the same mechanism as the
simulated shuffles, :mod:`linattn_numba.sim`): every lane deposits its fragments, the tile product is computed
once from all of them with the operands truncated to TF32 as the hardware does, and each lane takes its part of
D. All 32 lanes of the warp must call it, as on hardware (``.aligned``); a missing lane is a deadlock report.

Used by the tensor-core rung r6 (:mod:`linattn_numba.rungs.r6_tensor_cores`), which the bench times on the H200.
"""

from __future__ import annotations

import numpy as np
from numba import config, cuda, types

__all__ = ["mma_tf32", "to_tf32", "split_tf32", "mma_3xtf32", "mma_3xtf32_split", "fragment_a", "fragment_b",
           "fragment_c", "tf32_round_np", "tf32_truncate_np"]

FULL_MASK = 0xFFFFFFFF


def fragment_a(lane: int):
    """(row, column) of A held in a0..a3 by ``lane`` (A is 16 x 8, row major)."""
    g, i = lane // 4, lane % 4
    return ((g, i), (g + 8, i), (g, i + 4), (g + 8, i + 4))


def fragment_b(lane: int):
    """(row, column) of B held in b0, b1 by ``lane`` (B is 8 x 8)."""
    g, i = lane // 4, lane % 4
    return ((i, g), (i + 4, g))


def fragment_c(lane: int):
    """(row, column) of C and D held in c0..c3 by ``lane`` (16 x 8, float32)."""
    g, i = lane // 4, lane % 4
    return ((g, 2 * i), (g, 2 * i + 1), (g + 8, 2 * i), (g + 8, 2 * i + 1))


def tf32_round_np(x):
    """NumPy model of ``cvt.rna.tf32.f32``: round float32 to the nearest TF32, ties away from zero (finite x)."""
    bits = np.asarray(x, np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def tf32_truncate_np(x):
    """NumPy model of what the tensor core reads from a float32 operand: its low 13 mantissa bits dropped."""
    return (np.asarray(x, np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32)


def _to_tf32_sim(x):
    return np.float32(tf32_round_np(np.float32(x)))


def _mma_tf32_sim(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    from . import sim

    t = sim._current_thread()
    vals = t._manager._collective(t, "mma.sync.m16n8k8.tf32", FULL_MASK, (a0, a1, a2, a3, b0, b1, c0, c1, c2, c3))
    if len(vals) != 32:
        raise RuntimeError(f"mma.sync: {len(vals)} of the 32 lanes of warp {t.warp.index} took part; the "
                           f"instruction is .aligned: every lane of the warp must execute it")
    A = np.zeros((16, 8), np.float32)
    B = np.zeros((8, 8), np.float32)
    C = np.zeros((16, 8), np.float32)
    for lane, v in vals.items():
        for (r, c), x in zip(fragment_a(lane), v[0:4]):
            A[r, c] = x
        for (r, c), x in zip(fragment_b(lane), v[4:6]):
            B[r, c] = x
        for (r, c), x in zip(fragment_c(lane), v[6:10]):
            C[r, c] = x
    # products of TF32 operands are exact in float64; the sum is rounded to float32 once (the hardware's
    # accumulation order is unspecified, so any float32-rounded sum is a faithful model)
    D = (tf32_truncate_np(A).astype(np.float64) @ tf32_truncate_np(B).astype(np.float64) + C).astype(np.float32)
    return tuple(np.float32(D[r, c]) for r, c in fragment_c(t.lane))


def _split_tf32_sim(x):
    big = np.float32(tf32_truncate_np(np.float32(x)))
    return big, np.float32(np.float32(x) - big)


if config.ENABLE_CUDASIM:
    mma_tf32, to_tf32, split_tf32 = _mma_tf32_sim, _to_tf32_sim, _split_tf32_sim
else:
    from llvmlite import ir
    from numba.cuda.extending import intrinsic

    _F32 = ir.FloatType()
    _I32 = ir.IntType(32)

    @intrinsic
    def to_tf32(typingctx, x):
        """``cvt.rna.tf32.f32``: ``x`` rounded to TF32 (nearest, ties away), as a float32 with 13 zero low bits."""
        sig = types.float32(types.float32)

        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(_I32, [_F32]), "cvt.rna.tf32.f32 $0, $1;", "=r,f")
            return builder.bitcast(builder.call(asm, [args[0]]), _F32)

        return sig, codegen

    @intrinsic
    def split_tf32(typingctx, x):
        """``(big, small)`` with ``big + small == x`` exactly: ``big`` is ``x`` with its 13 low mantissa bits
        cleared (a TF32 value), ``small`` the float32 remainder (exact: it fits in the 13 bits that were cleared).

        Two instructions (a bit mask and a subtraction). ``cvt.rna.tf32.f32`` would round instead of truncate,
        but on sm_90 ptxas expands it to integer code (add, mask, an infinity test and a select): about 4
        instructions per operand, twice per element for a rounded split. ``small`` is handed to the tensor core
        as is: the core reads only its top 10 explicit mantissa bits (truncation), an error of at most
        2^-10 |small| <= 2^-20 |x| on a term that 3xTF32 adds as a correction.
        """
        sig = types.UniTuple(types.float32, 2)(types.float32)

        def codegen(context, builder, sig, args):
            x = args[0]
            bits = builder.and_(builder.bitcast(x, _I32), ir.Constant(_I32, 0xFFFFE000))
            big = builder.bitcast(bits, _F32)
            return context.make_tuple(builder, sig.return_type, [big, builder.fsub(x, big)])

        return sig, codegen

    @intrinsic
    def mma_tf32(typingctx, a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
        """One warp's ``D = A B + C`` on a 16 x 8 x 8 tile (see the module docstring for the fragments)."""
        sig = types.UniTuple(types.float32, 4)(*([types.float32] * 10))

        def codegen(context, builder, sig, args):
            ab = [builder.bitcast(a, _I32) for a in args[:6]]
            ret = ir.LiteralStructType([_F32] * 4)
            asm = ir.InlineAsm(
                ir.FunctionType(ret, [_I32] * 6 + [_F32] * 4),
                "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
                "{$0, $1, $2, $3}, {$4, $5, $6, $7}, {$8, $9}, {$10, $11, $12, $13};",
                "=f,=f,=f,=f,r,r,r,r,r,r,f,f,f,f",
            )
            d = builder.call(asm, ab + list(args[6:]))
            return context.make_tuple(builder, sig.return_type, [builder.extract_value(d, e) for e in range(4)])

        return sig, codegen


@cuda.jit(device=True, inline="always")
def mma_3xtf32_split(ab0, ab1, ab2, ab3, as0, as1, as2, as3, bb0, bb1, bs0, bs1, c0, c1, c2, c3):
    """3xTF32 on operands already split by :func:`split_tf32` (``a* = big``, ``as* = small``): a kernel that
    multiplies one A fragment by several B fragments splits A once. Small terms first, the big product last."""
    d0, d1, d2, d3 = mma_tf32(ab0, ab1, ab2, ab3, bs0, bs1, c0, c1, c2, c3)
    d0, d1, d2, d3 = mma_tf32(as0, as1, as2, as3, bb0, bb1, d0, d1, d2, d3)
    return mma_tf32(ab0, ab1, ab2, ab3, bb0, bb1, d0, d1, d2, d3)


@cuda.jit(device=True, inline="always")
def mma_3xtf32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3):
    """``D = A B + C`` with about float32 accuracy from three TF32 products: every operand split once by
    :func:`split_tf32`, then :func:`mma_3xtf32_split`."""
    ab0, as0 = split_tf32(a0)
    ab1, as1 = split_tf32(a1)
    ab2, as2 = split_tf32(a2)
    ab3, as3 = split_tf32(a3)
    bb0, bs0 = split_tf32(b0)
    bb1, bs1 = split_tf32(b1)
    return mma_3xtf32_split(ab0, ab1, ab2, ab3, as0, as1, as2, as3, bb0, bb1, bs0, bs1, c0, c1, c2, c3)


def compile_targets():
    """``(label, py_func, argtypes)`` of small kernels that use every primitive here, for the compile tier (the
    PTX must contain ``mma.sync.aligned.m16n8k8``; the rounding kernel holds ``cvt.rna.tf32.f32``)."""
    f32 = types.float32
    arr1 = types.Array(f32, 1, "C")
    arr2 = types.Array(f32, 2, "C")
    for label, fn in (("mma_tf32 tile", _tile_kernel(False)), ("mma_3xtf32 tile", _tile_kernel(True))):
        yield label, fn.py_func, (arr2, arr2, arr2, arr2)
    yield "to_tf32 / split_tf32", _round_kernel.py_func, (arr1, arr1, arr1, arr1)


# what the compile tier requires in each target's PTX (the instruction the target exists for)
REQUIRED_PTX = {"mma_tf32 tile": "mma.sync.aligned.m16n8k8", "mma_3xtf32 tile": "mma.sync.aligned.m16n8k8",
                "to_tf32 / split_tf32": "cvt.rna.tf32.f32"}


@cuda.jit
def _round_kernel(x, r, big, small):
    """Per element: ``r = to_tf32(x)``, ``(big, small) = split_tf32(x)`` (the test and compile kernel)."""
    i = cuda.grid(1)
    if i < x.shape[0]:
        r[i] = to_tf32(x[i])
        big[i], small[i] = split_tf32(x[i])


def _tile_kernel(three: bool):
    """One warp: D = A B + C for A [16, 8k], B [8k, 8], C [16, 8] (k steps of 8); the test and compile kernel."""

    @cuda.jit
    def tile(a, b, c, d):
        lane = cuda.threadIdx.x % 32
        g = lane // 4
        i = lane % 4
        c0 = c[g, 2 * i]
        c1 = c[g, 2 * i + 1]
        c2 = c[g + 8, 2 * i]
        c3 = c[g + 8, 2 * i + 1]
        for k0 in range(0, a.shape[1], 8):
            a0 = a[g, k0 + i]
            a1 = a[g + 8, k0 + i]
            a2 = a[g, k0 + i + 4]
            a3 = a[g + 8, k0 + i + 4]
            b0 = b[k0 + i, g]
            b1 = b[k0 + i + 4, g]
            if three:
                c0, c1, c2, c3 = mma_3xtf32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)
            else:
                c0, c1, c2, c3 = mma_tf32(a0, a1, a2, a3, b0, b1, c0, c1, c2, c3)
        d[g, 2 * i] = c0
        d[g, 2 * i + 1] = c1
        d[g + 8, 2 * i] = c2
        d[g + 8, 2 * i + 1] = c3

    return tile

