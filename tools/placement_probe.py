"""Where a grid's first blocks land: the SM of every block (``%smid``) of a grid shaped like r3's overlapped launch at
the standard shape (B4 H16, 2 value tiles + 128 chunks, 256 threads, ~101.6 KB of shared memory: two blocks per SM),
with its block-start order (an atomic ticket, as the launch takes its roles: ``r3._overlap_kernel``). It answers one
question, left open by the roles-by-block-index attempt in r3's docstring (slower on an H100): if the first ``nwalk``
blocks *by index* walked, how many SMs would get two walkers, against the first ``nwalk`` *tickets* (what the walk
gets now)? Two walkers on an SM share its issue slots, and leave another SM without one.

    python3 tools/placement_probe.py [--grid 16,4,130] [--nwalk 128] [--smem 104100] [--spin-us 20] [--out FILE]

GPU only (``%smid`` has no simulator twin). Prints, for both role orders, how many of the walkers' SMs hold two.
On an H100 at 7e0e0e6 (``figures/data/probes/h100_placement_{1d,3d}_7e0e0e6.json``): by index 120 SMs, 8 with
two; by ticket 86-87 SMs, 41-42 with two. r3's docstring ("Where the walkers land") draws the conclusion, and times
a placement of the walkers two to an SM (slower, removed).
"""

from __future__ import annotations

import argparse
import collections
import json

import numpy as np
from llvmlite import ir
from numba import cuda, types
from numba.cuda.extending import intrinsic


def _special_register(reg, bits, doc):
    """An intrinsic reading the PTX special register ``reg`` (``bits`` wide) into an integer."""
    ty = types.int32 if bits == 32 else types.int64

    def fn(typingctx):
        def codegen(context, builder, sig, args):
            asm = ir.InlineAsm(ir.FunctionType(ir.IntType(bits), []), f"mov.u{bits} $0, {reg};",
                               "=r" if bits == 32 else "=l", side_effect=True)
            return builder.call(asm, [])

        return ty(), codegen

    fn.__doc__ = doc
    return intrinsic(fn)


_smid = _special_register("%smid", 32, "``%smid``: the SM this thread runs on.")
_globaltimer = _special_register("%globaltimer", 64, "``%globaltimer`` (ns), to keep a block resident a while.")


@cuda.jit
def _probe(counter, sm_of, ticket_of, spin_ns):
    """Block (x, y, z), linear index i = x + gx (y + gy z): its SM and its ticket (the order blocks started in);
    then it stays resident ``spin_ns`` so that the first wave's placement is what later blocks find taken."""
    i = cuda.blockIdx.x + cuda.gridDim.x * (cuda.blockIdx.y + cuda.gridDim.y * cuda.blockIdx.z)
    sm = cuda.shared.array(0, types.int32)
    if cuda.threadIdx.x == 0:
        t0 = _globaltimer()
        sm_of[i] = _smid()
        ticket_of[i] = cuda.atomic.add(counter, 0, 1)
        sm[0] = 0
        while _globaltimer() - t0 < spin_ns:
            sm[0] += 1
    cuda.syncthreads()


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--grid", default="16,4,130")
    p.add_argument("--nwalk", type=int, default=128)
    p.add_argument("--smem", type=int, default=104100, help="dynamic shared memory per block (bytes)")
    p.add_argument("--spin-us", type=float, default=20.0)
    p.add_argument("--out", default="")
    args = p.parse_args(argv)
    from linattn_numba._common import launch_dynamic
    from linattn_numba.bench import device_info

    grid = tuple(int(x) for x in args.grid.split(","))
    n = int(np.prod(grid))
    counter = cuda.to_device(np.zeros(1, np.int32))
    sm_of, ticket_of = cuda.device_array(n, np.int32), cuda.device_array(n, np.int32)
    launch_dynamic(_probe, grid, 256, args.smem, 0, (counter, sm_of, ticket_of, int(args.spin_us * 1e3)))
    cuda.synchronize()
    sm, ticket = sm_of.copy_to_host(), ticket_of.copy_to_host()
    res = {"grid": grid, "nwalk": args.nwalk, "smem": args.smem, "device": device_info()}
    for name, walkers in (("by index", np.arange(args.nwalk)), ("by ticket", np.argsort(ticket)[:args.nwalk])):
        per_sm = collections.Counter(sm[walkers].tolist())
        res[name] = {"sms_with_walkers": len(per_sm), "sms_with_two": sum(1 for c in per_sm.values() if c >= 2)}
        print(f"walkers {name}: on {len(per_sm)} SMs, {res[name]['sms_with_two']} of them with two or more")
    res["first_16_sms_by_index"] = sm[:16].tolist()
    print("SMs of blocks 0..15:", res["first_16_sms_by_index"])
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
