"""H200 probe: the two forms of ``vec.cp_async16`` (``vec.CP_ASYNC16_IN_IR``) on the kernels that use it, r1's
sequence kernel and r5's state kernel, timed in one process, the forms interleaved (A B B A), every output checked
against the float64 oracle on two heads and compared bit for bit between the forms.

    python3 tools/cp_async_probe.py [--out h200_cp_async_<sha>.json] [--cases r1_phase3,r1,r5]

Cases: ``r1_phase3`` is what r4's gated delta phase 3 launches at the long shape (B1 T262144 H2, 32 segments):
r1 on 32 sequences of 8192 tokens, 2 heads, start states given, no final state; ``r1`` r1 at the standard shape
(B4 T8192 H16 gated delta, both states); ``r5`` r5 at the standard shape on scalar decay. Each record has the
median time, the registers of r1's kernel (where the case is r1's) and the relative error. The forms differ only in
how a copy's addresses reach the PTX (see ``vec.CP_ASYNC16_IN_IR``), so the outputs must be equal.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import nullcontext

import numpy as np

CASES = {  # name -> (rung, B, T, H, recurrence, initial state, final state)
    "r1_phase3": ("recurrent", 32, 8192, 2, "gated_delta", True, False),
    "r1": ("recurrent", 4, 8192, 16, "gated_delta", True, True),
    "r5": ("warp_roles", 4, 8192, 16, "decay", True, True),
}


def _recompile_all():
    """Forget every compiled kernel of the rungs that use cp_async16 (their factories are lru_cached): the next
    launch compiles again, reading ``vec.CP_ASYNC16_IN_IR`` then."""
    from linattn_numba.rungs import r1_recurrent, r5_warp_roles

    for mod in (r1_recurrent, r5_warp_roles):
        for obj in vars(mod).values():
            if callable(getattr(obj, "cache_clear", None)):
                obj.cache_clear()


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--out", default="cp_async_probe.json")
    args = ap.parse_args(argv)

    from numba import cuda

    from linattn_numba import bench, rungs, vec
    from linattn_numba._common import kernels_made
    from linattn_numba.testing import make_inputs

    timer = bench.Timer()
    result = {"device": bench.device_info(), "versions": bench.versions(), "git": bench.git_sha(),
              "tree_sha": os.environ.get("LINATTN_GIT_SHA"),  # tools/h200.sh: the commit whose tree it ships
              "date": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "default_in_ir": vec.CP_ASYNC16_IN_IR, "records": []}
    default = vec.CP_ASYNC16_IN_IR
    try:
        for name in args.cases.split(","):
            rung, B, T, H, rec, has_h0, has_ht = CASES[name]
            K = V = 128
            mod = rungs.module(rung)
            inp = make_inputs(B, T, H, K, V, rec, initial_state=has_h0, seed=0)
            d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
            o = cuda.device_array((B, T, H, V), np.float32)
            ht = cuda.device_array((B, H, K, V), np.float32) if has_ht else None
            h0 = d["initial_state"] if has_h0 else None
            host_args = (inp["q"], inp["k"], inp["v"], inp["g"], inp["beta"], inp["initial_state"])
            oracle, outs = {}, {}

            def fn():
                mod.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, h0, ht, K**-0.5, 64)

            for in_ir in (False, True, True, False):
                vec.CP_ASYNC16_IN_IR = in_ir
                _recompile_all()
                row = {"case": name, "rung": rung, "recurrence": rec, "shape": dict(B=B, T=T, H=H, K=K, V=V),
                       "in_ir": in_ir}
                o.copy_to_device(np.full(o.shape, np.nan, np.float32))  # an output never written shows
                with kernels_made(mod, "_kernel") if rung == "recurrent" else nullcontext([]) as made:
                    fn()  # compiles (after _recompile_all) with this form
                cuda.synchronize()
                oh = o.copy_to_host()
                hth = None if ht is None else ht.copy_to_host()
                row["rel_err"] = bench.check_heads(oh, hth, inp, [(0, 0), (B - 1, H - 1)], host_args, cache=oracle)
                if in_ir in outs:
                    row["same_as_before"] = bool(np.array_equal(oh, outs[in_ir]))
                outs.setdefault(in_ir, oh)
                if made:  # r1's sequence kernel, as its forward chose it
                    regs = made[-1][2].get_regs_per_thread()
                    row["registers"] = max(regs.values()) if isinstance(regs, dict) else regs
                row.update(timer.time(fn))
                result["records"].append(row)
                print(json.dumps(row), flush=True)
                with open(args.out, "w") as f:
                    json.dump(result, f, indent=1)
            same = bool(np.array_equal(outs[False], outs[True]))
            result["records"].append({"case": name, "forms_equal": same})
            print(name, "outputs equal between the forms:", same, flush=True)
            with open(args.out, "w") as f:
                json.dump(result, f, indent=1)
            del d, o, ht
    finally:
        vec.CP_ASYNC16_IN_IR = default
    return 0


if __name__ == "__main__":
    sys.exit(main())
