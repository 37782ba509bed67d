"""128-bit loads and stores (and a 64-bit store), an L2 prefetch and asynchronous 16-byte copies, as Numba intrinsics
(inline LLVM vector ops / PTX).

Introduced by rung r3 ``shared`` (its register-blocked loops read four consecutive floats per operand and step)
and used by r1's decode step (a streaming copy of the state) and r5; r5 introduced the asynchronous copies, which
r1's sequence kernel also stages its tiles with, and r3's split schedule pipelines by commit groups
(``cp_async_commit``, ``cp_async_wait_one``) with a source given as an element offset (``cp_async16_at``); its
state walk also stores (``st4_at``) and loads (``ld1_at``) from element offsets that it steps.
Each has a plain-Python twin that the simulator runs (``_ld4_py``, ``_st_py``, ``_prefetch_py``, ``_cp_async16_py``,
``_st4_at_py``, ``_ld1_at_py``, ...): the simulator has no vector loads and needs none, and its copies are
synchronous.
"""

from __future__ import annotations

import math
import threading

import numpy as np
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


def _st1_py(a, i, x):
    """``a[i] = x`` (the simulator's twin of :func:`st1`)."""
    a[i] = x


def _cp_async16_py(sm, i, src, idx, nbytes):
    """``sm[i : i + 4]`` = the 4 floats of ``src`` from ``idx`` on (zeros when ``nbytes`` is 0): the
    simulator's (synchronous) version of :func:`cp_async16`. A tuple ``i`` counts the 4 elements on in
    row-major order, across the last axis's end if need be (the GPU version writes 16 consecutive bytes)."""
    vals = _ld4_py(src, idx) if nbytes else (0.0, 0.0, 0.0, 0.0)
    if isinstance(i, tuple):
        flat = np.ravel_multi_index(tuple(int(x) for x in i), sm.shape)
        for e in range(4):
            sm[tuple(int(x) for x in np.unravel_index(flat + e, sm.shape))] = vals[e]
    else:
        _st_py(sm, i, vals)


def _flat_index(a, off):
    """The index of the element ``off`` elements (of its own size) past ``a``'s first one in memory, for a
    non-overlapping strided layout (every view that the kernels take): dimensions in order of decreasing stride."""
    item = a.dtype.itemsize
    rem = int(off)
    idx = [0] * a.ndim
    for d in sorted(range(a.ndim), key=lambda d: -abs(a.strides[d])):
        st = a.strides[d] // item
        if st > 0 and a.shape[d] > 1:
            idx[d] = min(rem // st, a.shape[d] - 1)
            rem -= idx[d] * st
    if rem != 0:
        raise IndexError(f"offset {off} is not an element of this view (shape {a.shape}, strides {a.strides})")
    return tuple(idx)


def _st4_at_py(a, off, x):
    """``st4_at``'s twin: the 4 elements from element offset ``off`` (of ``a``'s first element) on set to ``x``."""
    for e in range(4):
        a[_flat_index(a, off + e)] = x[e]


def _ld1_at_py(a, off):
    """``ld1_at``'s twin: the element at offset ``off`` from ``a``'s first element."""
    return a[_flat_index(a, off)]


def _cp_async16_at_py(sm, i, src, off, nbytes):
    """:func:`_cp_async16_py` with the source given as an element offset from ``src``'s first element."""
    _cp_async16_py(sm, i, src, _flat_index(src, off), nbytes)


def _cp_async_wait_all_py():
    """Nothing to wait for: the simulator's copies are synchronous."""


def _cp_async_commit_py():
    """Nothing to group: the simulator's copies are synchronous."""


def _cp_async_wait_one_py():
    """Nothing to wait for: the simulator's copies are synchronous."""


def _ld_acquire_py(a, i):
    """``a[i]`` (the simulator's twin of :func:`ld_acquire`: its threads share Python's memory)."""
    return a[i]


def _exp_approx_py(x):
    """``exp(x)`` (the simulator's twin of :func:`exp_approx`)."""
    return math.exp(x)


def _pinned_py(x):
    """``x`` (the simulator's twin of :func:`pinned`)."""
    return x


_RED_LOCK = threading.Lock()


def _red_release_add_py(a, i, x):
    """``a[i] += x`` atomically (the simulator's twin of :func:`red_release_add`; its threads are Python threads)."""
    with _RED_LOCK:
        a[i] += x


CP_ASYNC16_IN_IR = False
"""How :func:`cp_async16` (the tuple-indexed copy of r1 and r5) hands its addresses to the PTX: False, generic
addresses converted inside the asm; True, pointers cast to the shared and global state spaces in the IR (the form
``cp_async16_at`` always uses, which r3's split kernels gained from). Read when a kernel is compiled. r1's sequence
kernel ran slower with the IR form under the H200's own ptxas where r4's gated delta phase 3 launches it (B32
T8192 H2, h0 only: 2.787 ms with the asm form against 3.540, 166 against 136 registers; elsewhere within 1 %:
``figures/data/probes/h200_cp_async_4adc74d.json``, ``tools/cp_async_probe.py``), a difference that this machine's
nvJitLink does not reproduce (150-157 registers both ways), so reading the SASS here cannot show it."""

if config.ENABLE_CUDASIM:
    ld4, st4, st2, prefetch_l2, ld1, st1 = _ld4_py, _st_py, _st_py, _prefetch_py, _ld1_py, _st1_py
    ld_acquire, red_release_add, exp_approx = _ld_acquire_py, _red_release_add_py, _exp_approx_py
    pinned = _pinned_py
    cp_async16, cp_async_wait_all = _cp_async16_py, _cp_async_wait_all_py
    cp_async_commit, cp_async_wait_one = _cp_async_commit_py, _cp_async_wait_one_py
    cp_async16_at = _cp_async16_at_py
    st4_at, ld1_at = _st4_at_py, _ld1_at_py
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

    def _offset_ptr(context, builder, aryty, ary_val, offty, off_val):
        """The address ``off`` elements past the array's first element (its data pointer plus ``off`` elements): the
        ``..._at`` intrinsics' source or destination."""
        ary = context.make_array(aryty)(context, builder, ary_val)
        return builder.gep(ary.data, [context.cast(builder, off_val, offty, types.intp)])

    def _store_vec(context, builder, vptr, tupty, tup, width):
        """Store the float32 ``width``-tuple ``tup`` (its elements cast) at ``vptr`` as ONE vector store."""
        vals = cgutils.unpack_tuple(builder, tup, width)
        vec = ir.Constant(ir.VectorType(ir.FloatType(), width), ir.Undefined)
        for e in range(width):
            val = context.cast(builder, vals[e], tupty[e], types.float32)
            vec = builder.insert_element(vec, val, ir.Constant(ir.IntType(32), e))
        builder.store(vec, vptr, align=4 * width)

    def _vec_store(width, doc):
        """An intrinsic ``st(a, i, x)``: ``a[i : i + width] = x`` (a tuple of float32) along the last axis as ONE
        vector store (``width`` 4: 128-bit, 2: 64-bit), with no negative-index handling."""

        def st(typingctx, arr, idx, x):
            sig = types.none(arr, idx, x)

            def codegen(context, builder, sig, args):
                vptr = _vec_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1], width)
                _store_vec(context, builder, vptr, sig.args[2], args[2], width)
                return context.get_dummy_value()

            return sig, codegen

        st.__doc__ = doc
        return intrinsic(st)

    st4 = _vec_store(4, """``a[i : i + 4] = x`` (a 4-tuple of float32) along the last axis as ONE 128-bit store.""")
    st2 = _vec_store(2, """``a[i : i + 2] = x`` (a 2-tuple of float32) along the last axis as ONE 64-bit store, with no
        negative-index handling (``i`` in range; the element 8-byte aligned). r6 stores a C fragment's column
        pair (2 i, 2 i + 1) of a row this way.""")

    @intrinsic
    def st4_at(typingctx, arr, off, x):
        """:func:`st4` at an element offset ``off`` (an integer) from ``a``'s first element: ``a``'s data pointer plus
        4 ``off``, one 128-bit store. The caller steps a per-thread offset by a constant stride, where a tuple
        index has the address rebuilt from every index and stride at every store (r3's state walk stores a chunk's
        starting state this way)."""
        if not isinstance(off, types.Integer):
            return None
        sig = types.none(arr, off, x)

        def codegen(context, builder, sig, args):
            ptr = _offset_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1])
            vptr = builder.bitcast(ptr, ir.PointerType(ir.VectorType(ir.FloatType(), 4)))
            _store_vec(context, builder, vptr, sig.args[2], args[2], 4)
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def ld1_at(typingctx, arr, off):
        """``a``'s element at offset ``off`` (an integer) from its first one: :func:`ld1` for any number of
        dimensions, the address the data pointer plus ``off`` elements."""
        if not isinstance(off, types.Integer):
            return None
        sig = arr.dtype(arr, off)

        def codegen(context, builder, sig, args):
            return builder.load(_offset_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1]))

        return sig, codegen

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

    def _shared_ptr(context, builder, smty, sm_val, ity, i_val):
        """The address of ``sm[i]`` (``i`` an index or a tuple of indices), with no negative-index handling."""
        sary = context.make_array(smty)(context, builder, sm_val)
        if isinstance(ity, types.BaseTuple):  # sm[i0, i1, ...] or sm[i]
            sinds = cgutils.unpack_tuple(builder, i_val, len(ity))
            sinds = [context.cast(builder, v, t, types.intp) for v, t in zip(sinds, ity)]
        else:
            sinds = [context.cast(builder, i_val, ity, types.intp)]
        return cgutils.get_item_pointer(context, builder, smty, sary, sinds, wraparound=False)

    @intrinsic
    def st1(typingctx, arr, idx, x):
        """``a[i] = x`` for an index known to be in range and non-negative: :func:`ld1`'s store (Numba's ``a[i] =
        x`` with a signed index tests for a negative one: r3's output scores trade partial sums by scalar stores,
        ~9 instructions each that way)."""
        if not isinstance(idx, types.Integer):
            return None
        sig = types.none(arr, idx, x)

        def codegen(context, builder, sig, args):
            aryty, idx_ty, xty = sig.args
            ptr = _shared_ptr(context, builder, aryty, args[0], idx_ty, args[1])
            builder.store(context.cast(builder, args[2], xty, aryty.dtype), ptr)
            return context.get_dummy_value()

        return sig, codegen

    def _emit_cp_async16(context, builder, dptr, gptr, nty, n_val, in_ir=True):
        """``cp.async.cg.shared.global [dptr], [gptr], 16, n``. ``in_ir``: the generic pointers are cast to the
        shared and global state spaces in the IR, not in the PTX: the compiler then sees the shared array's own
        32-bit address plus an offset, and folds the constant part of a copy's offset into the instruction
        (converted inside the asm, each copy's 64-bit shared address was rebuilt by 3 instructions: r3's split
        kernels). Else (:data:`CP_ASYNC16_IN_IR` false) the generic addresses go into the asm, which converts
        them (``cvta.to.shared``, ``cvta.to.global``): :func:`cp_async16`'s form for r1 and r5."""
        i32, i64 = ir.IntType(32), ir.IntType(64)
        n32 = context.cast(builder, n_val, nty, types.int32)
        if not in_ir:
            fnty = ir.FunctionType(ir.VoidType(), [i64, i64, i32])
            asm = ir.InlineAsm(
                fnty,
                "{ .reg .u64 d64, g64; .reg .u32 d32; cvta.to.shared.u64 d64, $0; cvt.u32.u64 d32, d64; "
                "cvta.to.global.u64 g64, $1; cp.async.cg.shared.global [d32], [g64], 16, $2; }",
                "l,l,r,~{memory}",
                side_effect=True,
            )
            builder.call(asm, [builder.ptrtoint(dptr, i64), builder.ptrtoint(gptr, i64), n32])
            return context.get_dummy_value()
        sptr = builder.addrspacecast(dptr, ir.PointerType(dptr.type.pointee, addrspace=3))
        gglob = builder.addrspacecast(gptr, ir.PointerType(gptr.type.pointee, addrspace=1))
        fnty = ir.FunctionType(ir.VoidType(), [i32, i64, i32])
        asm = ir.InlineAsm(fnty, "cp.async.cg.shared.global [$0], [$1], 16, $2;", "r,l,r,~{memory}",
                           side_effect=True)
        builder.call(asm, [builder.ptrtoint(sptr, i32), builder.ptrtoint(gglob, i64), n32])
        return context.get_dummy_value()

    @intrinsic
    def cp_async16(typingctx, sm, i, src, idx, nbytes):
        """``cp.async.cg.shared.global``: copy 16 bytes from ``src[idx]`` (16-byte aligned) to ``sm[i]`` (an index
        or a tuple of indices, 16-byte aligned) without passing through registers; ``nbytes`` (0 or 16) bytes
        are read, the rest of the 16 zero-filled. The copy is complete (visible to this thread) after
        :func:`cp_async_wait_all`."""
        if not isinstance(idx, types.BaseTuple) or len(idx) != src.ndim:
            return None
        sig = types.void(sm, i, src, idx, nbytes)

        def codegen(context, builder, sig, args):
            smty, ity, srcty, idxty, nty = sig.args
            dptr = _shared_ptr(context, builder, smty, args[0], ity, args[1])
            gary = context.make_array(srcty)(context, builder, args[2])
            vals = cgutils.unpack_tuple(builder, args[3], len(idxty))
            inds = [context.cast(builder, v, t, types.intp) for v, t in zip(vals, idxty)]
            gptr = cgutils.get_item_pointer(context, builder, srcty, gary, inds, wraparound=False)
            return _emit_cp_async16(context, builder, dptr, gptr, nty, args[4], CP_ASYNC16_IN_IR)

        return sig, codegen

    @intrinsic
    def cp_async16_at(typingctx, sm, i, src, off, nbytes):
        """:func:`cp_async16` with the source given as an element offset ``off`` (an integer) from ``src``'s first
        element: the caller steps a per-thread offset by constant strides (``x.strides[d] // itemsize``), where a
        tuple index makes ptxas rebuild the 64-bit address from every index and stride on every copy (about 45
        instructions per 16-byte copy in r3's output kernel; Numba cannot prove the strides constant)."""
        if not isinstance(off, types.Integer):
            return None
        sig = types.void(sm, i, src, off, nbytes)

        def codegen(context, builder, sig, args):
            smty, ity, srcty, offty, nty = sig.args
            dptr = _shared_ptr(context, builder, smty, args[0], ity, args[1])
            gptr = _offset_ptr(context, builder, srcty, args[2], offty, args[3])
            return _emit_cp_async16(context, builder, dptr, gptr, nty, args[4])

        return sig, codegen

    @intrinsic
    def cp_async_wait_all(typingctx):
        """``cp.async.wait_all``: wait until this thread's cp.async copies have landed in shared memory."""
        sig = types.void()

        def codegen(context, builder, sig, args):
            fnty = ir.FunctionType(ir.VoidType(), [])
            builder.call(ir.InlineAsm(fnty, "cp.async.wait_all;", "~{memory}", side_effect=True), [])
            return context.get_dummy_value()

        return sig, codegen

    def _asm_void(text, doc):
        """An intrinsic with no arguments that emits the PTX ``text`` (a compiler barrier for memory)."""

        def fn(typingctx):
            sig = types.void()

            def codegen(context, builder, sig, args):
                fnty = ir.FunctionType(ir.VoidType(), [])
                builder.call(ir.InlineAsm(fnty, text, "~{memory}", side_effect=True), [])
                return context.get_dummy_value()

            return sig, codegen

        fn.__doc__ = doc
        return intrinsic(fn)

    cp_async_commit = _asm_void("cp.async.commit_group;", """``cp.async.commit_group``: close this thread's
        cp.async copies issued since the last commit into one group (a group with no copies is allowed: it
        completes at once, which keeps a pipeline's count of groups in flight the same at its end).""")
    cp_async_wait_one = _asm_void("cp.async.wait_group 1;", """``cp.async.wait_group 1``: wait until at most
        one of this thread's committed groups (the most recent) is still in flight: every older group's copies
        have landed in shared memory (visible to this thread; a barrier after it makes them visible to all).""")

    @intrinsic
    def ld_acquire(typingctx, arr, idx):
        """``a[i]`` of an int32 array in global memory by ``ld.acquire.gpu``: a load that no later memory access
        of this thread can pass, and that sees what a ``release`` on the same address (:func:`red_release_add`)
        made visible. One thread spins on it, then a block barrier hands its view to the block (CUTLASS's
        semaphores wait this way): no separate fence (``threadfence`` is ``fence.sc.gpu``, which also invalidates
        L1) and no atomic read-modify-write to poll with."""
        if getattr(arr, "dtype", None) != types.int32 or not isinstance(idx, types.Integer):
            return None
        sig = types.int32(arr, idx)

        def codegen(context, builder, sig, args):
            ptr = _shared_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1])  # any array's a[i]
            i32, i64 = ir.IntType(32), ir.IntType(64)
            asm = ir.InlineAsm(ir.FunctionType(i32, [i64]), "ld.acquire.gpu.b32 $0, [$1];", "=r,l,~{memory}",
                               side_effect=True)
            return builder.call(asm, [builder.ptrtoint(ptr, i64)])

        return sig, codegen

    @intrinsic
    def red_release_add(typingctx, arr, idx, x):
        """``a[i] += x`` (int32, global memory) by ``red.release.gpu``: an atomic add, with no value returned,
        that every write this thread has made or seen (other threads' writes before a block barrier it passed
        included) is visible before. One thread of a block signals with it after a barrier (CUTLASS's barriers
        arrive this way), where every thread would otherwise fence (``threadfence``) before one thread adds."""
        if getattr(arr, "dtype", None) != types.int32 or not isinstance(idx, types.Integer) \
                or not isinstance(x, types.Integer):
            return None
        sig = types.void(arr, idx, x)

        def codegen(context, builder, sig, args):
            ptr = _shared_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1])  # any array's a[i]
            i32, i64 = ir.IntType(32), ir.IntType(64)
            val = context.cast(builder, args[2], sig.args[2], types.int32)
            asm = ir.InlineAsm(ir.FunctionType(ir.VoidType(), [i64, i32]), "red.release.gpu.add.s32 [$0], $1;",
                               "l,r,~{memory}", side_effect=True)
            builder.call(asm, [builder.ptrtoint(ptr, i64), val])
            return context.get_dummy_value()

        return sig, codegen

    @intrinsic
    def pinned(typingctx, x):
        """``x`` (an integer, as int64) through a ``mov.b64`` that the compiler may not move (an asm with side
        effects): what is computed from the result stays after it, where a loop-invariant value would otherwise be
        hoisted to the kernel's start and held in registers across everything between (r3's output: the source
        offsets of every slab's copy, held across the products, spilled)."""
        if not isinstance(x, types.Integer):
            return None
        sig = types.int64(x)

        def codegen(context, builder, sig, args):
            i64 = ir.IntType(64)
            asm = ir.InlineAsm(ir.FunctionType(i64, [i64]), "mov.b64 $0, $1;", "=l,l", side_effect=True)
            return builder.call(asm, [context.cast(builder, args[0], sig.args[0], types.int64)])

        return sig, codegen

    _LOG2E = 1.4426950408889634

    @intrinsic
    def exp_approx(typingctx, x):
        """``exp(x)`` for float32 x <= 0 as ``ex2.approx.ftz.f32(x log2 e)``: one multiply and one MUFU.EX2, where
        ``math.exp`` (libdevice's ``expf``) spends 9 instructions on range reduction for full accuracy. Relative
        error about 2^-22 from ``ex2.approx`` plus |x| 2^-24 from rounding x log2 e (below 6e-6 for x >= -87, where
        exp(x) is still a normal float32, below 1e-6 for |x| <= 8; results below 2^-126 flush to 0). r3's exponents
        are differences of in-chunk cumulative log-gates, <= 0, so nothing overflows here either."""
        if not isinstance(x, types.Float):
            return None
        sig = types.float32(x)

        def codegen(context, builder, sig, args):
            f32 = ir.FloatType()
            y = builder.fmul(context.cast(builder, args[0], sig.args[0], types.float32), ir.Constant(f32, _LOG2E))
            asm = ir.InlineAsm(ir.FunctionType(f32, [f32]), "ex2.approx.ftz.f32 $0, $1;", "=f,f")
            return builder.call(asm, [y])

        return sig, codegen
