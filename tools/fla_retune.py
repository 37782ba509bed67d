"""Does fla's autotune config, tuned at one shape, follow it to another (in the process; through Triton's disk
cache to the next process)? Usage: python fla_retune.py MODE OUT.jsonl; MODE: long | std_long | old_std | old_long.
Times chunk_simple_gla (decay, fp32) with the bench's Timer; prints the chosen configs of fla's autotuners."""
import json, os, sys, time
mode, outp = sys.argv[1], sys.argv[2]
import torch
from numba import cuda
from linattn_numba import bench, peers

timer = bench.Timer()

def inputs(B, T, H, K=128, V=128):
    g = torch.Generator(device="cuda").manual_seed(0)
    q = torch.nn.functional.normalize(torch.randn(B, T, H, K, device="cuda", generator=g), dim=-1)
    k = torch.nn.functional.normalize(torch.randn(B, T, H, K, device="cuda", generator=g), dim=-1)
    v = torch.randn(B, T, H, V, device="cuda", generator=g)
    gg = torch.nn.functional.logsigmoid(torch.randn(B, T, H, device="cuda", generator=g)) / 16
    return q, k, v, gg

def configs():
    from triton.runtime.autotuner import Autotuner
    out = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or not name.startswith("fla."):
            continue
        for attr, obj in list(vars(mod).items()):
            seen = set()
            for at in peers._autotuners(obj, seen):
                if at.cache:
                    out[f"{name}.{attr}"] = {str(k): str(v) for k, v in at.cache.items()}
    return out

def time_shape(shape, retune):
    fn = peers.fla_peers("decay", retune=retune)["fla_chunk_simple_gla"]
    q, k, v, g = inputs(*shape)
    t0 = time.time()
    fn(q, k, v, g, None, None, True)
    torch.cuda.synchronize()
    first_s = time.time() - t0
    r = timer.time(lambda: fn(q, k, v, g, None, None, True))
    rec = {"mode": mode, "shape": shape, "retune": retune, "median_ms": r["median_ms"], "first_call_s": first_s,
           "FLA_CACHE_RESULTS": os.environ.get("FLA_CACHE_RESULTS"), "configs": configs()}
    print(json.dumps(rec), flush=True)
    with open(outp, "a") as f:
        f.write(json.dumps(rec) + "\n")
    del q, k, v, g
    torch.cuda.empty_cache()

STD, LONG = (4, 8192, 16), (1, 1 << 20, 2)
if mode == "long":
    time_shape(LONG, True)
elif mode == "old_std":  # as before the fix: no retune (with FLA_CACHE_RESULTS=1: results go to the disk cache)
    time_shape(STD, False)
elif mode == "old_long":
    time_shape(LONG, False)
elif mode == "std_long":
    time_shape(STD, True)
    time_shape(LONG, False)  # the standard shape's config, kept in the process
    time_shape(LONG, True)
