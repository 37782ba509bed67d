"""Launch r1 (gated delta, standard shape) and the decode step once each, for `ncu` (stall reasons, SOL)."""
import numpy as np
from numba import cuda

from linattn_numba.rungs import r1_recurrent
from linattn_numba.testing import make_inputs

for shape in ((4, 8192, 16, 128, 128), (256, 1, 16, 128, 128)):
    B, T, H, K, V = shape
    inp = make_inputs(B, T, H, K, V, "gated_delta", initial_state=True)
    d = {n: cuda.to_device(a) for n, a in inp.items()}
    o = cuda.device_array((B, T, H, V), np.float32)
    st = d["initial_state"]
    for _ in range(2):
        r1_recurrent.forward(d["q"], d["k"], d["v"], d["g"], d["beta"], o, st, st, K**-0.5)
    cuda.synchronize()
