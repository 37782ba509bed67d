#!/usr/bin/env bash
# One H200 session's work in one command (device time is scarce): GPU test tier, then the bench.
# Usage (on the device machine, after the gpu-wheels install line): bash tools/h200.sh MODE [bench args...]
#   MODE = tests | bench | all
set -u
export PYTHONUNBUFFERED=1
mode=${1:-all}; shift || true
out=${OUT:-/tmp/out}; mkdir -p "$out"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/nvidia-smi.txt"
python3 -c "import numba, numba_cuda, numpy; print('numba', numba.__version__, 'numpy', numpy.__version__)"
rc=0
if [ "$mode" = tests ] || [ "$mode" = all ]; then
  timeout 240 python3 -m pytest -m gpu tests/test_gpu.py -q -x -p no:cacheprovider 2>&1 | tee "$out/gpu_tests.log"
  rc=${PIPESTATUS[0]}
fi
if [ "$mode" = bench ] || [ "$mode" = all ]; then
  python3 -m linattn_numba.cli bench "$@" 2>&1 | tee "$out/bench.log"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
fi
exit $rc
