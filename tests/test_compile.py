"""Compile tier: every kernel compiles for sm_90 with the simulator off (catches typing errors the simulator
misses). Runs in a subprocess because the simulator is chosen once per process, when numba is imported."""

import os
import subprocess
import sys

import pytest

from linattn_numba.rungs import RUNGS


# one subprocess per rung (and for the API's and the tensor-core primitives' kernels), so that pytest -n spreads
# the compile tier over its workers instead of one worker compiling everything. Rungs with many large variants are
# split in shards (compile_check's ``name:i/n``): r3's 93 took 23 minutes in one process on the 2-core CI machine
# (while the other worker ran tests) once its products were unrolled 8 steps a loop step, close to the timeout.
SHARDS = {"shared": 3, "warp_roles": 2, "tensor_cores": 2}
PARTS = (*(f"{r}:{i}/{SHARDS[r]}" if r in SHARDS else r for r in RUNGS for i in range(SHARDS.get(r, 1))), "api", "mma")


@pytest.mark.compile
@pytest.mark.parametrize("part", PARTS)
def test_every_kernel_compiles_for_sm90(part):
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="0")
    r = subprocess.run(
        [sys.executable, "-m", "linattn_numba.compile_check", part], env=env, capture_output=True, text=True,
        timeout=1500,
    )
    tail = "\n".join((r.stdout + r.stderr).splitlines()[-40:])
    assert r.returncode == 0, tail
    assert "compiled" in r.stdout and "FAILED" not in r.stdout, tail
