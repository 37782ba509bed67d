"""Does fla's autotune config, tuned at one shape, follow it to another shape (in the process; through Triton's
disk cache to the next process on the same machine)? Times fla's ``chunk_simple_gla`` (decay, fp32) with the
bench's Timer and appends one JSON line per timing: the median, the first call's seconds (the autotuning) and the
config every fla autotuner chose. Needs a GPU, torch and fla.

    python3 tools/fla_retune.py MODE OUT.jsonl

MODE: ``long`` (B1 T1M H2, tuned there: ``peers.fla_peers`` retunes first), ``old_std`` / ``old_long`` (the
standard shape / 1M tokens without retuning, as the bench timed peers before 8e0d568; with ``FLA_CACHE_RESULTS=1``
and a shared ``TRITON_CACHE_DIR`` the second process finds the first one's configs on disk), ``std_long`` (the
standard shape, then 1M with the standard shape's configs kept in the process, then 1M retuned).
``figures/data/probes/h200_fla_retune_8ae96fc.json`` is four such processes in one device call.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

STD, LONG = (4, 8192, 16), (1, 1 << 20, 2)  # (B, T, H); K = V = 128
MODES = {"long": [(LONG, True)], "old_std": [(STD, False)], "old_long": [(LONG, False)],
         "std_long": [(STD, True), (LONG, False), (LONG, True)]}


def inputs(B, T, H, K=128, V=128):
    """Unit-norm q, k, normal v and log-gates g <= 0 on the GPU (made there: the host would take seconds at 1M)."""
    import torch

    gen = torch.Generator(device="cuda").manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, device="cuda", generator=gen), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, device="cuda", generator=gen), dim=-1)
    v = torch.randn(B, T, H, V, device="cuda", generator=gen)
    g = torch.nn.functional.logsigmoid(torch.randn(B, T, H, device="cuda", generator=gen)) / 16
    return q, k, v, g


def chosen_configs(peers) -> dict:
    """``{module.kernel: {autotune key: config}}`` for every fla autotuner that has tuned something."""
    return {name: {str(key): str(cfg) for key, cfg in at.cache.items()}
            for name, at in peers.fla_autotuners() if at.cache}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mode", choices=sorted(MODES))
    ap.add_argument("out", help="JSON-lines file to append to")
    args = ap.parse_args(argv)

    import torch

    from linattn_numba import bench, peers

    timer = bench.Timer()
    for shape, retune in MODES[args.mode]:
        fn = peers.fla_peers("decay", retune=retune)["fla_chunk_simple_gla"]
        q, k, v, g = inputs(*shape)
        t0 = time.time()
        fn(q, k, v, g, None, None, True)  # tunes here when nothing is tuned for this key
        torch.cuda.synchronize()
        first_s = time.time() - t0
        res = timer.time(lambda: fn(q, k, v, g, None, None, True))
        rec = {"mode": args.mode, "shape": shape, "retune": retune, "median_ms": res["median_ms"],
               "first_call_s": first_s, "FLA_CACHE_RESULTS": os.environ.get("FLA_CACHE_RESULTS"),
               "configs": chosen_configs(peers)}
        print(json.dumps(rec), flush=True)
        with open(args.out, "a") as f:
            f.write(json.dumps(rec) + "\n")
        del q, k, v, g
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
