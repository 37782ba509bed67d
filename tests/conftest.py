"""Test tiers. `make test` runs (a) oracle tests, (b) every rung under Numba's CUDA simulator, (c) the compile tier
(every kernel compiled for sm_90 in a subprocess with the simulator off). `pytest -m gpu` runs (d) on a real GPU.

The simulator must be chosen before anything imports numba, so this file decides it at configure time and
imports nothing from numba or the package itself at module level.
"""

import os


def _gpu_tier(config) -> bool:
    expr = (config.option.markexpr or "").replace(" ", "")
    return "gpu" in expr and "notgpu" not in expr


def pytest_configure(config):
    if _gpu_tier(config):
        os.environ["NUMBA_ENABLE_CUDASIM"] = "0"
        import numba.cuda  # noqa: F401 - fix numba's target now, before any test module is imported
    else:
        os.environ["NUMBA_ENABLE_CUDASIM"] = "1"
        import linattn_numba.sim

        # warp intrinsics, event-driven barriers, shared-array fixes: before any test defines a kernel
        linattn_numba.sim.install()
