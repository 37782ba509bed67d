"""128-bit loads and stores (and a 64-bit store), and an L2 prefetch, as Numba intrinsics (inline LLVM vector ops / PTX).

Introduced by rung r3 ``shared`` (its register-blocked loops read four consecutive floats per operand and step)
and used by r1's decode step (a streaming copy of the state) and r5. Each has a plain-Python twin that the
simulator runs (``_ld4_py``, ``_st_py``, ``_prefetch_py``): the simulator has no vector loads and needs none.
"""

from __future__ import annotations

from numba import config, types


def _ld4_py(a, i):
    """``(a[i], a[i+1], a[i+2], a[i+3])`` along the last axis (``i`` an index or a tuple of indices)."""
    if isinstance(i, tuple):
        *head, last = i
        return tuple(a[(*head, last + e)] for e in range(4))
    return a[i], a[i + 1], a[i + 2], a[i + 3]


def _st_py(a, i, x):
    """``a[i : i + len(x)] = x`` along the last axis (``i`` an index or a tuple of indices): the simulator's twin
    of both :func:`st4` and :func:`st2`."""
    for e in range(len(x)):
        if isinstance(i, tuple):
            *head, last = i
            a[(*head, last + e)] = x[e]
        else:
            a[i + e] = x[e]


def _prefetch_py(a, i):
    """No-op outside the GPU (a cache hint has no meaning in the simulator)."""


def _ld1_py(a, i):
    """``a[i]`` (the simulator's twin of :func:`ld1`)."""
    return a[i]


if config.ENABLE_CUDASIM:
    ld4, st4, st2, prefetch_l2, ld1 = _ld4_py, _st_py, _st_py, _prefetch_py, _ld1_py
else:
    from llvmlite import ir
    from numba.cuda import cgutils
    from numba.cuda.extending import intrinsic

    def _vec_ptr(context, builder, aryty, ary_val, idx_ty, idx_val, width=4):
        ary = context.make_array(aryty)(context, builder, ary_val)
        if isinstance(idx_ty, types.BaseTuple):
            idx = cgutils.unpack_tuple(builder, idx_val, len(idx_ty))
            idx = [context.cast(builder, v, t, types.intp) for v, t in zip(idx, idx_ty)]
        else:
            idx = [context.cast(builder, idx_val, idx_ty, types.intp)]
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, idx, wraparound=False)
        return builder.bitcast(ptr, ir.PointerType(ir.VectorType(ir.FloatType(), width)))

    @intrinsic
    def ld4(typingctx, arr, idx):
        """``(a[i], a[i+1], a[i+2], a[i+3])`` along the last axis as ONE 128-bit load (``ld.shared.v4.f32`` or
        ``ld.global.v4.f32``).

        Numba emits four 32-bit loads for four consecutive elements (LLVM cannot prove the 16-byte alignment a
        vector load needs), and a 32-bit load uses a quarter of what one shared-memory (or L1) transaction
        can carry: the register-blocked loops below read 4 consecutive floats per operand and step, so this
        quarters their load instructions. The element must be 16-byte aligned: every shared offset and row
        stride below is a multiple of 4 floats (the dynamic shared array starts aligned), and the float32
        scratch rows are multiples of 4 floats long.
        """
        sig = types.UniTuple(types.float32, 4)(arr, idx)

        def codegen(context, builder, sig, args):
            vptr = _vec_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            vec = builder.load(vptr, align=16)
            elems = [builder.extract_element(vec, ir.Constant(ir.IntType(32), e)) for e in range(4)]
            return context.make_tuple(builder, sig.return_type, elems)

        return sig, codegen

    def _vec_store(width, doc):
        """An intrinsic ``st(a, i, x)``: ``a[i : i + width] = x`` (a tuple of float32) along the last axis as ONE
        vector store (``width`` 4: 128-bit, 2: 64-bit), with no negative-index handling."""

        def st(typingctx, arr, idx, x):
            sig = types.none(arr, idx, x)

            def codegen(context, builder, sig, args):
                vptr = _vec_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1], width)
                vals = cgutils.unpack_tuple(builder, args[2], width)
                vals = [context.cast(builder, v, t, types.float32) for v, t in zip(vals, sig.args[2])]
                vec = ir.Constant(ir.VectorType(ir.FloatType(), width), ir.Undefined)
                for e in range(width):
                    vec = builder.insert_element(vec, vals[e], ir.Constant(ir.IntType(32), e))
                builder.store(vec, vptr, align=4 * width)
                return context.get_dummy_value()

            return sig, codegen

        st.__doc__ = doc
        return intrinsic(st)

    st4 = _vec_store(4, """``a[i : i + 4] = x`` (a 4-tuple of float32) along the last axis as ONE 128-bit store.""")
    st2 = _vec_store(2, """``a[i : i + 2] = x`` (a 2-tuple of float32) along the last axis as ONE 64-bit store, with no
        negative-index handling (``i`` in range; the element 8-byte aligned). r6 stores a C fragment's column
        pair (2 i, 2 i + 1) of a row this way.""")

    @intrinsic
    def prefetch_l2(typingctx, arr, idx):
        """``prefetch.L2`` of the cache line holding ``a[idx]``: a hint that starts the line's trip from HBM
        to L2 now, without waiting and without a register (the state kernel asks for the next chunk's rows
        while it computes on this one, so that their staging loads hit L2)."""
        sig = types.none(arr, idx)

        def codegen(context, builder, sig, args):
            aryty, idx_ty = sig.args
            ary = context.make_array(aryty)(context, builder, args[0])
            idx = cgutils.unpack_tuple(builder, args[1], len(idx_ty))
            idx = [context.cast(builder, v, t, types.intp) for v, t in zip(idx, idx_ty)]
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary, idx, wraparound=False)
            addr = builder.ptrtoint(ptr, ir.IntType(64))
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [ir.IntType(64)]), "prefetch.L2 [$0];", "l",
                               side_effect=True)
            builder.call(asm, [addr])
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def ld1(typingctx, arr, idx):
        """``a[i]`` for an index known to be in range and non-negative: the address is base + 4 i, nothing else.

        Numba's ``a[i]`` with a signed (int64) index also handles Python's negative indices (``i < 0`` means
        ``len + i``): a compare, a select and 64-bit arithmetic on every access. In a loop whose body is a few
        loads and one tensor-core instruction that overhead is most of the instructions (r6's first SASS: 2,495
        IMAD and 1,003 ISETP against 45 HMMA). The index arithmetic here is still 64-bit (intp), but with no
        wraparound LLVM can strength-reduce it across the loop.
        """
        sig = arr.dtype(arr, idx)

        def codegen(context, builder, sig, args):
            aryty, idx_ty = sig.args
            ary = context.make_array(aryty)(context, builder, args[0])
            i = context.cast(builder, args[1], idx_ty, types.intp)
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [i], wraparound=False)
            return builder.load(ptr)

        return sig, codegen
