"""The compile tier: build every kernel variant the project ships for a real GPU target, without a GPU.

The simulator runs kernels as Python and checks no types, so a kernel can pass every simulator test and still fail
to compile for the GPU (a float64 accumulator, an unsupported call, a shape that is not a compile-time constant).
This module compiles each rung's ``compile_targets()`` with ``numba.cuda.compile_ptx`` for compute capability 9.0
(the H100/H200), which needs NVVM (``numba-cuda[cu13]``) but no GPU and no driver.

Run as ``python -m linattn_numba.compile_check [--assemble] [name ...]`` (the simulator must be off; a name is a
rung, ``api`` or ``mma``; none means all of them; ``name:i/n`` compiles every n-th of its variants starting at the
i-th, so that n processes share one rung's variants: the test tier splits r3's 93 that way). Exit status 1
when any variant fails; the failures are listed. Kernels whose PTX spills their register arrays to local memory are
reported too (a performance bug, not an error). The tensor-core primitives (:mod:`linattn_numba.mma`) are always
compiled, and each one's PTX must hold the instruction it exists for (``mma.REQUIRED_PTX``).

``--assemble`` also runs ptxas on every PTX (through nvJitLink, which ``numba-cuda[cu13]`` installs; still no GPU):
inline PTX that NVVM passes through unchecked (``cp.async``, ``bar.sync``, ``mma.sync``, 128-bit accesses) is only
validated there, and ptxas reports each kernel's registers and spills, printed per kernel. The mma kernels are
always assembled.
"""

from __future__ import annotations

import os
import sys
import time


def main(argv=None) -> int:
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        print("compile_check: unset NUMBA_ENABLE_CUDASIM (the simulator cannot compile for the GPU)", file=sys.stderr)
        return 2
    from numba import cuda

    from . import api, rungs

    from . import mma

    args = list(argv if argv is not None else sys.argv[1:])
    assemble_all = "--assemble" in args
    # rung names, and "api" (the API's value-check kernels) and "mma" (the tensor-core primitives); none: all
    names = [a for a in args if a != "--assemble"] or [*rungs.RUNGS, "api", "mma"]
    targets = []
    for arg in names:
        name, _, shard = arg.partition(":")
        i, n = (int(x) for x in shard.split("/")) if shard else (0, 1)
        if not 0 <= i < n:
            print(f"compile_check: {arg!r}: the shard must be i/n with 0 <= i < n", file=sys.stderr)
            return 2
        mod = {"api": api, "mma": mma}.get(name) or rungs.module(name)
        targets += [(name, *t) for t in list(mod.compile_targets())[i::n]]
    failures, spills = [], []
    t0 = time.time()
    for i, (rung, label, fn, argtypes) in enumerate(targets, 1):
        info = ""
        try:
            ptx, _ = cuda.compile_ptx(fn, argtypes, cc=(9, 0))
            need = mma.REQUIRED_PTX[label] if rung == "mma" else None
            if need is not None and need not in ptx:
                raise RuntimeError(f"no {need} in the PTX")
            if assemble_all or rung == "mma":
                info = assemble(ptx)
        except Exception as e:  # noqa: BLE001 - report every failure, keep going
            failures.append(f"{label}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            status = "FAIL"
        else:
            status = "ok"
            if "ld.local" in ptx or "st.local" in ptx:
                spills.append(label)
                status = "ok (local memory)"
        print(f"[{i:3d}/{len(targets)}] {status:18s} {label}{'  ' + info if info else ''}", flush=True)
    print(f"compiled {len(targets) - len(failures)}/{len(targets)} kernels for sm_90 in {time.time() - t0:.0f} s")
    for s in spills:
        print(f"local memory in: {s}")
    for f in failures:
        print(f"FAILED: {f}")
    return 1 if failures else 0


def link(ptx: str, arch: str = "sm_90") -> tuple[bytes, str]:
    """ptxas (through nvJitLink) on ``ptx``: ``(cubin, ptxas's verbose log)``; raises with ptxas's error log when
    it fails, and ImportError when nvJitLink (``cuda.bindings``, part of ``numba-cuda[cu13]``) is missing."""
    from cuda.bindings import nvjitlink

    h = nvjitlink.create(2, [f"-arch={arch}", "-verbose"])
    try:
        data = ptx.encode()
        try:
            nvjitlink.add_data(h, nvjitlink.InputType.PTX, data, len(data), "kernel")
            nvjitlink.complete(h)
        except Exception as e:  # noqa: BLE001 - add the error log, which says what ptxas rejected
            size = nvjitlink.get_error_log_size(h)
            log = bytearray(size)
            if size:
                nvjitlink.get_error_log(h, log)
            raise RuntimeError(f"ptxas: {log.decode(errors='replace').strip() or e}") from e
        size = nvjitlink.get_info_log_size(h)
        log = bytearray(size)
        if size:
            nvjitlink.get_info_log(h, log)
        size = nvjitlink.get_linked_cubin_size(h)
        cubin = bytearray(size)
        nvjitlink.get_linked_cubin(h, cubin)
    finally:
        nvjitlink.destroy(h)
    return bytes(cubin), log.decode(errors="replace")


def assemble(ptx: str, arch: str = "sm_90") -> str:
    """ptxas (through nvJitLink) on ``ptx``: raises with ptxas's log when it fails; returns "N registers, S bytes
    spilled" of the (last) kernel in it, or "" when nvJitLink is not installed."""
    import re

    try:
        _, text = link(ptx, arch)
    except ImportError:
        return ""
    regs = re.findall(r"Used (\d+) registers", text)
    spill = re.findall(r"(\d+) bytes spill stores", text)
    return f"{regs[-1]} registers, {spill[-1] if spill else 0} bytes spilled" if regs else ""

if __name__ == "__main__":
    sys.exit(main())
