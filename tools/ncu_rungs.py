"""Launch rungs once each, inside a profiling range, for Nsight Compute (``ncu``).

Every rung is first run on a tiny shape (so that compilation happens outside the profiled range), then once at the
profiled shape between ``cuda.profile_start()`` and ``cuda.profile_stop()``. Run it under ncu with
``--profile-from-start off`` so that only those launches are profiled, e.g.::

    ncu --clock-control none --profile-from-start off --csv --page details \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        python3 tools/ncu_rungs.py --rungs recurrent,chunked --recurrences decay,gated_delta > h200_ncu.csv

The CSV is parsed by :mod:`linattn_numba.ncu` (the profiling notebook reads the committed copies in figures/data).
"""

from __future__ import annotations

import argparse

import numpy as np
from numba import cuda

import linattn_numba as la
from linattn_numba import rungs
from linattn_numba.testing import make_inputs


def launch(mod, shape, rec, knobs=None):
    B, T, H, K, V = shape
    inp = make_inputs(B, T, H, K, V, rec, initial_state=True, seed=0)
    d = {n: (None if a is None else cuda.to_device(a)) for n, a in inp.items()}
    o = cuda.device_array((B, T, H, V), np.float32)
    ht = cuda.device_array((B, H, K, V), np.float32)
    mod.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, d["initial_state"], ht, K**-0.5, 64, **(knobs or {}))


def parse_knobs(text):
    """``"asy=1;asy=0,tc=16"`` -> ``[{"asy": 1}, {"asy": 0, "tc": 16}]`` (integer launch knobs of r1's forward)."""
    return [{k: int(v) for k, v in (kv.split("=") for kv in part.split(","))} for part in text.split(";") if part]


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rungs", default=",".join(r for r in la.RUNGS if r != "naive"))
    p.add_argument("--recurrences", default="decay,gated_delta")
    p.add_argument("--shape", default="4,8192,16,128,128", help="B,T,H,K,V of the profiled launch")
    p.add_argument("--r1-knobs", default="", help="r1 (recurrent) launch variants, one launch each: "
                   "semicolon-separated sets of comma-separated knob=value, e.g. 'asy=1;asy=0'")
    a = p.parse_args(argv)
    shape = tuple(int(x) for x in a.shape.split(","))
    variants = parse_knobs(a.r1_knobs) or [None]
    todo = [(r, rec, kn) for r in a.rungs.split(",") for rec in a.recurrences.split(",")
            for kn in (variants if r == "recurrent" else [None])]
    for r, rec, kn in todo:  # compile every variant outside the profiled range
        launch(rungs.module(r), (1, 64, 1, shape[3], shape[4]), rec, kn)
    cuda.synchronize()
    cuda.profile_start()
    for r, rec, kn in todo:
        launch(rungs.module(r), shape, rec, kn)
    cuda.synchronize()
    cuda.profile_stop()


if __name__ == "__main__":
    main()
