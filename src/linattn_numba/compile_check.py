"""The compile tier: build every kernel variant the project ships for a real GPU target, without a GPU.

The simulator runs kernels as Python and checks no types, so a kernel can pass every simulator test and still fail
to compile for the GPU (a float64 accumulator, an unsupported call, a shape that is not a compile-time constant).
This module compiles each rung's ``compile_targets()`` with ``numba.cuda.compile_ptx`` for compute capability 9.0
(the H100/H200), which needs NVVM (``numba-cuda[cu13]``) but no GPU and no driver.

Run as ``python -m linattn_numba.compile_check [rung ...]`` (the simulator must be off). Exit status 1 when any
variant fails; the failures are listed. Kernels whose PTX spills their register arrays to local memory are
reported too (a performance bug, not an error).
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

    names = list(argv if argv is not None else sys.argv[1:]) or list(rungs.RUNGS)
    targets = []
    for name in names:
        targets += [(name, *t) for t in rungs.module(name).compile_targets()]
    targets += [("api", *t) for t in api.compile_targets()]
    failures, spills = [], []
    t0 = time.time()
    for i, (rung, label, fn, argtypes) in enumerate(targets, 1):
        try:
            ptx, _ = cuda.compile_ptx(fn, argtypes, cc=(9, 0))
        except Exception as e:  # noqa: BLE001 - report every failure, keep going
            failures.append(f"{label}: {type(e).__name__}: {str(e).splitlines()[0][:300]}")
            status = "FAIL"
        else:
            status = "ok"
            if "ld.local" in ptx or "st.local" in ptx:
                spills.append(label)
                status = "ok (local memory)"
        print(f"[{i:3d}/{len(targets)}] {status:18s} {label}", flush=True)
    print(f"compiled {len(targets) - len(failures)}/{len(targets)} kernels for sm_90 in {time.time() - t0:.0f} s")
    for s in spills:
        print(f"local memory in: {s}")
    for f in failures:
        print(f"FAILED: {f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
