"""Launch r1 (gated delta, standard shape) and its decode step twice each with the module's launch defaults, for
`ncu`: issue rate, instruction count and stall reasons of the sequence kernel, DRAM throughput of the step. E.g.

    ncu --clock-control none --kernel-name regex:"recurrent_kernel|step_kernel" --launch-count 3 \
        --metrics smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active,\
    dram__throughput.avg.pct_of_peak_sustained_elapsed,gpu__time_duration.sum \
        --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio \
        python3 tools/profile_kernels.py

(the first launch of each kernel also compiles it; ncu times only the kernel either way).
"""
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
