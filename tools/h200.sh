#!/usr/bin/env bash
# One H200 session's evidence in as few device calls as possible (device time is scarce).
# Usage (on the device machine, after the gpu-wheels install line):
#   bash tools/h200.sh MODES [bench args...]      MODES: comma-separated, run in this order:
#     tests     the GPU test tier (tests/test_gpu.py, the GPU tests of tests/test_r4_scan.py)
#     bench     the standard shape: every rung except r0/r2 (their last records stay in figures/data), fla, SDPA,
#               the decode step, r1's launch sweep; extra args go to this bench (e.g. --rungs ...)
#     long      long context, B1 H2 K=V=128: decay at T = 1M, gated delta at T = 256K (r3, r4, fla chunk);
#               long_decay / long_gdn run one of the two
#     step      the decode step alone, after a sweep of its launch choices (bench --only-step --tune step)
#     long_scaling  B1 H2 K=V=128 at shorter T (decay 64K, 256K; gated delta 64K) for the long-context curve
#     sweep     time against T at B1 H16 K=V=128 (decay): r3, r4, r6, fla chunk, SDPA
#     r6_intra  r6 with r3's intra kernel and with the tensor-core one (additive), per kernel (tools/tune_r3.py)
#     r6_split  r6's two schedules for the additive family (fused: intra then state with the output; split: states
#               stored per chunk, then every chunk's output in parallel), per kernel; then the bench of r6 under
#               the split schedule beside fla's chunk kernels (plain, decay)
#     out_pipe  r6's split schedule with each state kernel (r6's, r3's) and output kernel (pipelined: r3's copies with
#               the products on the tensor cores; staged), r3's split beside it (plain, decay, per kernel), then r4
#               at the long decay shape with each split output kernel (r4.SPLIT_OUT)
#     pipe_bench  r6's split schedule with each output kernel (pipelined, staged), per kernel (plain, decay); then the
#               bench of r3, r4 and r6 beside fla's chunk kernel (plain, decay; the standard shape)
#     overlap   r3's and r6's split schedules (plain, decay; the standard shape) with the state walk and the output
#               as two launches and as one (r3_shared.OVERLAP, r6_tensor_cores.OVERLAP 0 / 1), per kernel: h200_tune_r{3,6}_overlap_<sha>.json
#     std_additive  pipe_bench's bench alone
#     split_rule  r3's forward (decay) at B1 and B2 x T32768 H16 with its split state kernel in each tiling (4 x 4
#               tiles of 32 columns, 8 x 4 of 64) and the two others, per kernel: where r3.split_tile's
#               SPLIT_WIDE_BLOCKS (B H ceil(V / 64) >= 96 takes 8 x 4) should sit (h200_tune_r3_split_rule_<sha>.json)
#     long_decay_ab  r6's split schedule (pipelined output kernel) and r3's, per kernel (plain, decay; the standard
#               shape), then r4 at the long decay shape with r3.SPLIT_BV 32 / 64 x the model's segment count times
#               1, 0.5, 2 x precision 3xtf32 / tf32 (h200_r4_long_decay_ab_<sha>.json; at 944bc1d, as x_prefetch,
#               it also varied the L1 prefetch since taken out: probes/h200_r4_x_prefetch_944bc1d.json)
#     r6_delta  r6's intra kernels for the delta family (r3's, tensor cores), per kernel; then the bench of r1 and r6
#               for all four recurrences beside fla's chunk kernels (the standard shape)
#     long_engines  r4 at the two long-context shapes with each engine (r3 shared, r6 tensor_cores) and fla chunk
#               (tools/r4_engine_probe.py; a probe file for figures/data/probes/; R4_PROBE_ARGS adds arguments,
#               e.g. --ns-factors 1,0.5,2; R4_PROBE_TIMEOUT the seconds, default 400)
#     scan_bench  r4 with its default engine: the long-context shapes beside fla's chunk kernels, then the standard
#               shape alone (r4 picks one segment there: it is its engine); bench files for figures/data
#     ncu_r6    Nsight Compute sections of r6 (decay: the split schedule's gates / state / out kernels; gated delta:
#               r3's intra kernel and r6's state kernel) at the standard shape
#     oracle    tools/sanitize.py with no sanitizer: ORACLE_RUNGS (default shared,scan) x ORACLE_RECS at the GPU tier's
#               four shapes and the sanitizer's, one process (each kernel compiled once; h200_oracle_<sha>.txt)
#     sanitize  compute-sanitizer memcheck, racecheck, synccheck on r2-r5 at a mid-size shape
#               (SANITIZE_RUNGS overrides the rungs, SANITIZE_TIMEOUT the seconds per tool)
#     ncu       Nsight Compute sections of r1, r3, r5 at the standard shape (CSV for linattn_numba.ncu)
#     ncu_src   Nsight Compute's per-instruction warp-stall samples (SourceCounters) of r3's kernels (decay, gated
#               delta; NCU_SRC_RUNGS, NCU_SRC_KERNELS override) at B1 T8192 H16: one SASS CSV per kernel, which
#               tools/ncu_phases.py splits at the barriers
#     r1        r1 alone: its GPU tests, then the bench at the standard shape (all four recurrences, fla's fused
#               recurrent kernels, r1's launch sweep first on R1_TUNE_RECS, default gated_delta; the sweep's
#               fastest launch is the one benched)
#     ncu_r1    Nsight Compute sections of r1 (decay, gated delta) with each launch of R1_NCU_KNOBS (default
#               'asy=1;asy=0': the two stagings)
#     r4_kernels  per-kernel GPU times (ncu) of one r4 forward at each long shape (decay 1M, gated delta 262K):
#               h200_ncu_r4_{decay,gated_delta}_<sha>.csv (which phase costs what)
#     cp_async  the two forms of vec.cp_async16 (vec.CP_ASYNC16_IN_IR) on r1 and r5, interleaved, oracle-checked
#               (tools/cp_async_probe.py): h200_cp_async_<sha>.json
#     gates_ab  r3's split schedule per kernel (plain, decay; the standard shape, tools/tune_r3.py) on build/base/src (a
#               `git archive BASE src` there, carried) and on this tree, then the bench of r3 beside fla's chunk kernel
#               (plain, decay): h200_tune_r3_gates_{base,head}_<sha>.json, h200_r3_<sha>.json (how the cumulative
#               gates are computed, between two commits: figures/data/probes/README.md has the three measured)
#     r3_ab     gates_ab's per-kernel timing alone, base / head / base / head (interleaved, so that drift shows), no
#               bench: h200_tune_r3_${AB_TAG:-ab}_{base,head}{1,2}_<sha>.json (AB_RUNS="1": one pair)
#     delta_split  r3's two schedules for the delta family (fused; split: the walk storing S_c and V_new, then the
#               additive output kernel), per kernel, oracle-checked (tools/tune_r3.py), and r6's two (its split: r3's
#               with r6's tensor-core output kernel) for gated delta: h200_tune_r{3,6}_delta_split_<sha>.json;
#               delta_split_tests: the split's GPU tests (r3 in both tilings, r6); delta_split_bench: the bench of r3
#               and r6 (delta, gated delta) under the split beside fla's chunk kernels (h200_r3_delta_split_<sha>.json;
#               each of the three in its own device call). The sanitizers:
#               SANITIZE_JOBS=shared:delta,gated_delta SANITIZE_ARGS="--vary r3_shared.DELTA_SCHEDULE=split" sanitize_par
#     r4_gdn_ab  per-kernel GPU times (ncu, gpu__time_duration) of one r4 forward at the long gated delta shape, on
#               build/base/src (a `git archive BASE src` there, carried) and on this tree: which kernel moved between
#               two commits (h200_ncu_r4_gdn_{base,head}_<sha>.csv: how phase 3's r1 kernel was found slower,
#               r4's docstring)
#   all = tests,bench (the old default); evidence = tests,bench,long; evidence2 = sweep,sanitize,ncu;
#   next = r6_intra,long_engines,sanitize_r6,sanitize_rest,ncu (sanitize_rest: r4 delta / gated delta under the three tools,
#   SANITIZE_RECS overrides the recurrences;
#   sanitize_r6: r6 tensor_cores under the three tools)
#     racecheck_probe  racecheck and synccheck on each kernel of tools/racecheck_probe.py (named-barrier and mbarrier hand-offs
#               with known answers, correct and racy), one process each, all at once: h200_racecheck_probe_<sha>.txt
#     racecheck_matrix  racecheck on the pair kernels of tools/racecheck_probe.py with r5's ingredients as modifiers
#               (RP_VARIANTS, space separated, each KERNEL or KERNEL@BLOCKSxCHUNKS; RP_ARGS, the blocks and
#               chunks of a variant without @, default --blocks 16 --chunks 32), RP_REPS processes each
#               (default 3), next to r5's own pair hand-off (plain, RP_R5_REPS processes, default 3), all at once:
#               h200_racecheck_matrix_<sha>.txt, and one line per process: variant, run, hazards, answer
#     r5_handoff  r3 (its tuned BV = 64) and r5 with each stage hand-off (pair, rendezvous), all four recurrences,
#               per kernel, oracle-checked (tools/tune_r3.py): h200_r5_handoff_<sha>.json (R5_RUNGS: the rungs)
#     sanitize_par  the three tools on SANITIZE_JOBS (rung:recurrences, space separated; default r1 on all four
#               recurrences and r4 one recurrence at a time), every (job, tool) its own process, all at once,
#               each with SANITIZE_TIMEOUT seconds (default 480): one log, h200_sanitize_par_<sha>.txt
#               (SANITIZE_ARGS: more arguments of tools/sanitize.py, e.g. --engine shared for r4 on r3)
# Outputs go to $OUT (the device tool's folder): bench JSON named for figures/data, logs, the ncu CSV.
set -u
export PYTHONUNBUFFERED=1
modes=${1:-all}; shift || true
case "$modes" in
  all) modes=tests,bench;;
  evidence) modes=tests,bench,long;;
  evidence2) modes=sweep,sanitize,ncu;;
  # what the 2026-11-30 sessions could not fit: r4 with r6 as its engine at long context, r6 and r4 (delta family)
  # under the sanitizers, Nsight Compute of r1, r3, r5 (then long_scaling, and sweep for r4 in the T sweep)
  next) modes=r6_intra,long_engines,sanitize_r6,sanitize_rest,ncu;;
esac
out=${OUT:-/tmp/out}; mkdir -p "$out"
sha=$(echo "${LINATTN_GIT_SHA:-nogit}" | cut -c1-7)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv | tee "$out/nvidia-smi.txt"
python3 -c "import numba, numba_cuda, numpy; print('numba', numba.__version__, 'numpy', numpy.__version__)"
bench() { python3 -m linattn_numba.cli bench "$@" 2>&1 | tail -60; return "${PIPESTATUS[0]}"; }
# one compute-sanitizer tool on tools/sanitize.py: sanitize_one TOOL TIMEOUT SANITIZE_PY_ARGS... (a header line with
# the tool and the arguments, the script's lines, then the tool's exit status)
sanitize_one() {
  local tool=$1 limit=$2; shift 2
  echo "== $tool $*"
  timeout "$limit" compute-sanitizer --tool "$tool" --error-exitcode 9 python3 tools/sanitize.py "$@" 2>&1 \
    | grep -v "NumbaPerformanceWarning\|warn(errors"
  echo "exit status ${PIPESTATUS[0]}"
}
# a Python tool's run, its Numba warnings dropped, its lines appended to $out/LOG: py_log LOG TIMEOUT SCRIPT ARGS...
py_log() {
  local log=$1 limit=$2; shift 2
  timeout "$limit" python3 "$@" 2>&1 | grep -v "NumbaPerformanceWarning\|warn(errors" | tee -a "$out/$log"
  return "${PIPESTATUS[0]}"
}
# the split schedules per kernel at the standard shape (decay, plain): r6's (3xTF32) and r3's (tools/tune_r3.py)
R6_SPLIT=(tools/tune_r3.py --rung tensor_cores --chunks 64 --bv 64 --intra tensor_cores --schedule split
  --precision 3xtf32 --recurrences decay,plain)
R3_SPLIT=(tools/tune_r3.py --rung shared --chunks 64 --bv 64 --schedule split --recurrences decay,plain)
# r3's split schedule per kernel (R3_SPLIT) on build/base/src (a `git archive BASE src` there, carried) and on this
# tree, base then head once per RUN: ab_tune TAG LOG RUN... (h200_tune_r3_<TAG>_{base,head}<RUN>_<sha>.json)
ab_tune() {
  local tag=$1 log=$2 r=0 run which src
  shift 2
  for run in "$@"; do
    for which in base head; do
      src=$PWD/src; [ "$which" = base ] && src=$PWD/build/base/src
      [ -d "$src" ] || { echo "no $src: git archive BASE src | tar -x -C build/base, and carry build"; r=1; continue; }
      PYTHONPATH=/tmp/site:$src py_log "$log" 200 "${R3_SPLIT[@]}" \
        --out "$out/h200_tune_r3_${tag}_${which}${run}_$sha.json" || r=1
    done
  done
  return $r
}
# the two long-context shapes of issue 4 beside fla's chunk kernels: long_bench WHICH(decay|gdn|both) RUNGS LOG
long_bench() {
  local r=0
  if [ "$1" != gdn ]; then
    bench --shape 1,1048576,2,128,128 --recurrences decay --rungs "$2" --fla chunk \
      --out "$out/h200_long_decay_$sha.json" | tee -a "$out/$3" || r=1
  fi
  if [ "$1" != decay ]; then
    bench --shape 1,262144,2,128,128 --recurrences gated_delta --rungs "$2" --fla chunk \
      --out "$out/h200_long_gdn_$sha.json" | tee -a "$out/$3" || r=1
  fi
  return $r
}
# Nsight Compute sections of rungs at the standard shape: ncu_rungs NAME RUNGS [more ncu arguments]
# (NCU_SCRIPT_ARGS: more arguments of tools/ncu_rungs.py)
ncu_rungs() {
  local name=$1 rungs=$2; shift 2
  timeout 200 ncu --clock-control none --profile-from-start off --csv --page details \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats "$@" \
    --metrics regex:smsp__average_warps_issue_stalled_.*_per_issue_active\\.ratio \
    python3 tools/ncu_rungs.py --rungs "$rungs" --recurrences decay,gated_delta ${NCU_SCRIPT_ARGS:-} \
    > "$out/h200_${name}_$sha.csv" 2> "$out/$name.err"
  local r=$?
  tail -3 "$out/$name.err"
  return $r
}
# per-kernel GPU times (and launch shape, registers, dynamic shared memory) of one r4 forward under ncu, with the
# package from SRC: r4_ncu_times NAME RECURRENCE B,T,H,K,V SRC (writes $out/NAME.csv, NAME.err)
r4_ncu_times() {
  local name=$1 rec=$2 shape=$3 src=$4
  PYTHONPATH=/tmp/site:$PWD/$src timeout 240 ncu --clock-control none --profile-from-start off --csv \
    --metrics gpu__time_duration.sum,launch__grid_size,launch__block_size,launch__registers_per_thread,launch__shared_mem_per_block_dynamic \
    python3 tools/ncu_rungs.py --rungs scan --recurrences "$rec" --shape "$shape" > "$out/$name.csv" 2> "$out/$name.err"
  local r=$?
  tail -2 "$out/$name.err"
  return $r
}
rc=0
for m in ${modes//,/ }; do
  echo "=== $m ($(date +%T))"
  case "$m" in
    tests)
      timeout 420 python3 -m pytest -m gpu tests/test_gpu.py tests/test_r4_scan.py -q -x -n 8 -p no:cacheprovider 2>&1 | tail -25 | tee "$out/gpu_tests.log"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1;;
    r1)
      timeout 200 python3 -m pytest -m gpu tests/test_gpu.py -q -x -p no:cacheprovider -k "r1 or step" \
        2>&1 | tail -8 | tee "$out/gpu_tests_r1.log"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1
      bench --rungs recurrent --fla fused_recurrent --tune seq --tune-recurrences "${R1_TUNE_RECS:-gated_delta}" \
        --out "$out/h200_r1_$sha.json" "$@" | tee "$out/r1.log" || rc=1;;
    ncu_r1)
      NCU_SCRIPT_ARGS="--r1-knobs ${R1_NCU_KNOBS:-asy=1;asy=0}" ncu_rungs ncu_r1 recurrent || rc=1;;
    bench)
      bench --rungs recurrent,shared,scan,warp_roles,tensor_cores --step --softmax --tune --out "$out/h200_ladder_$sha.json" "$@" \
        | tee "$out/bench.log" || rc=1;;
    long|long_decay|long_gdn)
      which=both; [ "$m" = long_decay ] && which=decay; [ "$m" = long_gdn ] && which=gdn
      long_bench "$which" shared,scan "$m.log" || rc=1;;
    step)
      bench --only-step --tune step --out "$out/h200_step_$sha.json" | tee "$out/step.log" || rc=1;;
    long_scaling)
      bench --shape 1,65536,2,128,128 --shape 1,262144,2,128,128 --recurrences decay --rungs shared,scan \
        --fla chunk --out "$out/h200_long_scaling_decay_$sha.json" | tee "$out/long_scaling.log" || rc=1
      bench --shape 1,65536,2,128,128 --recurrences gated_delta --rungs shared,scan --fla chunk \
        --out "$out/h200_long_scaling_gdn_$sha.json" | tee -a "$out/long_scaling.log" || rc=1;;
    sweep)
      bench --shape 1,1024,16,128,128 --shape 1,4096,16,128,128 --shape 1,16384,16,128,128 \
        --shape 1,65536,16,128,128 --recurrences decay --rungs shared,scan,tensor_cores --fla chunk --softmax \
        --out "$out/h200_sweep_$sha.json" | tee "$out/sweep.log" || rc=1;;
    oracle)
      # no sanitizer: every rung of ORACLE_RUNGS at the GPU tier's shapes and the sanitizer's, against the oracle,
      # in one process (each kernel variant compiled once: a process per shape spent its limit compiling)
      timeout "${ORACLE_TIMEOUT:-300}" python3 tools/sanitize.py --rungs "${ORACLE_RUNGS:-shared,scan}" \
        --recurrences "${ORACLE_RECS:-plain,decay,delta,gated_delta}" --shape 2,1000,4,128,128 --shape 1,777,3,64,96 \
        --shape 3,1,2,128,128 --shape 1,300,2,100,40 --shape 2,300,2,64,80 2>&1 \
        | grep -v "NumbaPerformanceWarning\|warn(errors" | tee "$out/h200_oracle_$sha.txt"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1;;
    sanitize)
      for tool in memcheck racecheck synccheck; do
        sanitize_one "$tool" "${SANITIZE_TIMEOUT:-150}" --rungs "${SANITIZE_RUNGS:-chunked,shared,scan,warp_roles}"
      done 2>&1 | tee "$out/h200_sanitize.txt";;
    r4_gdn_ab)
      for which in base head; do
        src=src; [ "$which" = base ] && src=build/base/src
        [ -d "$src" ] || { echo "no $src: git archive BASE src | tar -x -C build/base, and carry build"; rc=1; continue; }
        r4_ncu_times "h200_ncu_r4_gdn_${which}_$sha" gated_delta 1,262144,2,128,128 "$src" || rc=1
      done;;
    gates_ab)
      ab_tune gates gates_ab.log "" || rc=1
      bench --rungs shared --recurrences plain,decay --fla chunk --out "$out/h200_r3_$sha.json" \
        | tee -a "$out/gates_ab.log" || rc=1;;
    r3_ab)
      # base, head, base, head: drift shows as base vs base (AB_RUNS="1": one pair, when the call's time is short)
      # shellcheck disable=SC2086
      ab_tune "${AB_TAG:-ab}" r3_ab.log ${AB_RUNS:-1 2} || rc=1;;
    delta_split)  # 580 s at most: one device call (its kernels compile on the device first, ~20-30 s each)
      py_log delta_split.log 360 tools/tune_r3.py --rung shared --chunks 64 --bv 64 --schedule fused,split \
        --recurrences gated_delta,delta --out "$out/h200_tune_r3_delta_split_$sha.json" || rc=1
      py_log delta_split.log 220 tools/tune_r3.py --rung tensor_cores --chunks 64 --bv 64 --schedule fused,split \
        --recurrences gated_delta --out "$out/h200_tune_r6_delta_split_$sha.json" || rc=1;;
    delta_split_tests)
      timeout 400 python3 -m pytest -m gpu tests/test_gpu.py -q -n 4 -p no:cacheprovider -k split_delta 2>&1 \
        | tail -8 | tee -a "$out/delta_split.log"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1;;
    delta_split_bench)
      timeout 300 python3 -c "import sys; from linattn_numba.rungs import r3_shared as r3, r6_tensor_cores as r6
r3.DELTA_SCHEDULE = r6.DELTA_SCHEDULE = 'split'
from linattn_numba.cli import main; sys.exit(main(sys.argv[1:]))" bench --rungs shared,tensor_cores \
        --recurrences delta,gated_delta --fla chunk --out "$out/h200_r3_delta_split_$sha.json" 2>&1 | tail -30 \
        | tee -a "$out/delta_split.log"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1;;
    r4_kernels)
      for spec in decay:1,1048576,2,128,128 gated_delta:1,262144,2,128,128; do
        r4_ncu_times "h200_ncu_r4_${spec%%:*}_$sha" "${spec%%:*}" "${spec#*:}" src || rc=1
      done;;
    cp_async)
      timeout 300 python3 tools/cp_async_probe.py --out "$out/h200_cp_async_$sha.json" 2>&1 \
        | grep -v "NumbaPerformanceWarning\|warn(errors" | tee "$out/cp_async.log"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1;;
    r6_intra)
      timeout 200 python3 tools/tune_r3.py --rung tensor_cores --chunks 64 --bv 64 --intra r3,tensor_cores \
        --recurrences plain,decay --out "$out/h200_tune_r6_intra_$sha.json" 2>&1 \
        | grep -v "NumbaPerformanceWarning\|warn(errors" | tee "$out/r6_intra.log"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1;;
    r6_split)
      timeout 240 python3 tools/tune_r3.py --rung tensor_cores --chunks 64 --bv 32,64 --intra tensor_cores \
        --schedule fused,split --precision 3xtf32,tf32 --recurrences plain,decay \
        --out "$out/h200_tune_r6_split_$sha.json" 2>&1 | grep -v "NumbaPerformanceWarning\|warn(errors" \
        | tee "$out/r6_split.log"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1
      timeout 200 python3 -c "import sys; from linattn_numba.rungs import r6_tensor_cores as r6; r6.SCHEDULE = 'split'
from linattn_numba.cli import main; sys.exit(main(sys.argv[1:]))" bench --rungs shared,tensor_cores \
        --recurrences plain,decay --fla chunk --out "$out/h200_r6_split_$sha.json" 2>&1 | tail -30 \
        | tee -a "$out/r6_split.log"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1;;
    out_pipe)
      py_log out_pipe.log 260 "${R6_SPLIT[@]}" --vary r6_tensor_cores.SPLIT_STATE=shared,tensor_cores \
        --vary r6_tensor_cores.SPLIT_OUT=pipelined,staged --out "$out/h200_tune_r6_pipe_$sha.json" || rc=1
      py_log out_pipe.log 120 "${R3_SPLIT[@]}" --out "$out/h200_tune_r3_split_$sha.json" || rc=1
      py_log out_pipe.log 200 tools/r4_engine_probe.py --shape 1,1048576,2,128,128:decay --engines tensor_cores \
        --split-out shared,tensor_cores --no-peers --out "$out/h200_r4_split_out_$sha.json" || rc=1;;
    pipe_bench)
      py_log pipe_bench.log 150 "${R6_SPLIT[@]}" --vary r6_tensor_cores.SPLIT_OUT=pipelined,staged \
        --out "$out/h200_tune_r6_pipe_$sha.json" || rc=1
      bench --rungs shared,scan,tensor_cores --recurrences plain,decay --fla chunk --out "$out/h200_r6_pipe_$sha.json" \
        | tee -a "$out/pipe_bench.log" || rc=1;;
    long_decay_ab)
      py_log long_decay_ab.log 120 "${R6_SPLIT[@]}" --out "$out/h200_tune_r6_pipe_$sha.json" || rc=1
      py_log long_decay_ab.log 100 "${R3_SPLIT[@]}" --out "$out/h200_tune_r3_split_$sha.json" || rc=1
      py_log long_decay_ab.log 300 tools/r4_engine_probe.py --shape 1,1048576,2,128,128:decay --engines tensor_cores \
        --ns-factors 1,0.5,2 --vary r3_shared.SPLIT_BV=32,64 --precisions 3xtf32,tf32 --tol 5e-3 --no-peers \
        --out "$out/h200_r4_long_decay_ab_$sha.json" || rc=1;;
    overlap)
      py_log overlap.log 150 "${R3_SPLIT[@]}" --vary r3_shared.OVERLAP=0,1 --out "$out/h200_tune_r3_overlap_$sha.json" \
        || rc=1
      py_log overlap.log 150 "${R6_SPLIT[@]}" --vary r6_tensor_cores.OVERLAP=0,1 --out "$out/h200_tune_r6_overlap_$sha.json" \
        || rc=1;;
    std_additive)
      bench --rungs shared,scan,tensor_cores --recurrences plain,decay --fla chunk --out "$out/h200_r6_pipe_$sha.json" \
        | tee -a "$out/std_additive.log" || rc=1;;
    split_rule)
      for shape in 1,32768,16,128,128 2,32768,16,128,128; do
        py_log split_rule.log 150 tools/tune_r3.py --shape "$shape" --chunks 64 --bv 32,64 --schedule split \
          --recurrences decay --vary r3_shared.SPLIT_ROWS=4,8 --out "$out/split_rule_${shape%%,*}.json" || rc=1
      done
      python3 -c "import json, sys; json.dump([json.load(open(f)) for f in sys.argv[1:]],
        open('$out/h200_tune_r3_split_rule_$sha.json', 'w'), indent=1)" "$out"/split_rule_*.json \
        && rm "$out"/split_rule_*.json;;
    r6_delta)
      timeout 200 python3 tools/tune_r3.py --rung tensor_cores --chunks 64 --bv 64 --intra r3,tensor_cores \
        --schedule fused --recurrences delta,gated_delta --out "$out/h200_tune_r6_delta_$sha.json" 2>&1 \
        | grep -v "NumbaPerformanceWarning\|warn(errors" | tee "$out/r6_delta.log"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1
      bench --rungs recurrent,tensor_cores --fla chunk --out "$out/h200_r6_$sha.json" | tee -a "$out/r6_delta.log" \
        || rc=1;;
    long_engines)
      timeout "${R4_PROBE_TIMEOUT:-400}" python3 tools/r4_engine_probe.py ${R4_PROBE_ARGS:-} --out "$out/h200_r4_engines_$sha.json" 2>&1 \
        | grep -v "NumbaPerformanceWarning\|warn(errors" | tee "$out/long_engines.log"
      [ "${PIPESTATUS[0]}" = 0 ] || rc=1;;
    scan_bench)
      long_bench both scan scan_bench.log || rc=1
      bench --rungs scan --no-peers --out "$out/h200_scan_$sha.json" | tee -a "$out/scan_bench.log" || rc=1;;
    ncu_r6)
      ncu_rungs ncu_r6 tensor_cores --section MemoryWorkloadAnalysis || rc=1;;
    sanitize_r6)
      for tool in memcheck racecheck synccheck; do
        sanitize_one "$tool" "${SANITIZE_TIMEOUT:-100}" --rungs tensor_cores
      done 2>&1 | tee "$out/h200_sanitize_r6.txt";;
    sanitize_rest)
      for tool in memcheck racecheck synccheck; do
        sanitize_one "$tool" "${SANITIZE_TIMEOUT:-100}" --rungs scan --recurrences "${SANITIZE_RECS:-delta,gated_delta}"
      done 2>&1 | tee "$out/h200_sanitize_rest.txt";;
    sanitize_par)
      # one process per (job, tool): a slow one (r4's many kernels, compiled and then instrumented) no longer
      # takes the others' time, as in the sequential modes above, which ran out of time in r4
      jobs=${SANITIZE_JOBS:-recurrent:plain,decay,delta,gated_delta scan:plain scan:decay scan:delta scan:gated_delta}
      for job in $jobs; do
        for tool in memcheck racecheck synccheck; do
          # shellcheck disable=SC2086 # SANITIZE_ARGS: words
          sanitize_one "$tool" "${SANITIZE_TIMEOUT:-480}" --rungs "${job%%:*}" --recurrences "${job#*:}" \
            ${SANITIZE_ARGS:-} > "$out/san_${job//[:,]/_}_$tool.txt" 2>&1 &
        done
      done
      wait
      cat "$out"/san_*.txt > "$out/h200_sanitize_par_$sha.txt" && rm "$out"/san_*.txt
      grep -c "exit status 0" "$out/h200_sanitize_par_$sha.txt"
      grep "exit status [^0]" "$out/h200_sanitize_par_$sha.txt" && rc=1;;
    racecheck_probe)
      for k in pair pair_bug pair_na pair_mb rendezvous rendezvous_aligned rendezvous_block cons_named cons_bug; do
        for tool in racecheck synccheck; do
          (echo "== $tool $k"; timeout 200 compute-sanitizer --tool "$tool" --print-limit 8 \
            python3 tools/racecheck_probe.py --kernel "$k" 2>&1 | grep -v "NumbaPerformanceWarning\|warn(errors" \
            | cut -c1-300; echo "exit status ${PIPESTATUS[0]}") > "$out/rp_${k}_$tool.txt" 2>&1 &
        done
      done
      wait
      cat "$out"/rp_*.txt > "$out/h200_racecheck_probe_$sha.txt" && rm "$out"/rp_*.txt
      grep -E "^== |SUMMARY|answer" "$out/h200_racecheck_probe_$sha.txt";;
    racecheck_matrix)
      variants=${RP_VARIANTS:-pair_na pair_na+cp pair_na+vec pair_na+inplace pair_na+clate pair_na+plate \
        pair_na+cp+vec+inplace pair_na+cp+vec+inplace+clate pair_na+cp+vec+inplace+plate pair_bug \
        pair_bug+cp+vec+inplace}
      for k in $variants; do
        args=${RP_ARGS:---blocks 16 --chunks 32}
        case "$k" in *@*x*) bc=${k#*@}; args="--blocks ${bc%x*} --chunks ${bc#*x}";; esac
        for r in $(seq "${RP_REPS:-3}"); do
          # shellcheck disable=SC2086 # args: words
          (echo "== racecheck $k run $r"; timeout 300 compute-sanitizer --tool racecheck --print-limit 4 \
            python3 tools/racecheck_probe.py --kernel "${k%@*}" $args 2>&1 \
            | grep -v "NumbaPerformanceWarning\|warn(errors" | cut -c1-300; echo "exit status ${PIPESTATUS[0]}") \
            > "$out/rm_${k//[+@]/_}_$r.txt" 2>&1 &
        done
      done
      for r in $(seq "${RP_R5_REPS-3}"); do
        (echo "== racecheck r5_pair_plain run $r"; timeout 400 compute-sanitizer --tool racecheck --print-limit 4 \
          python3 tools/sanitize.py --rungs warp_roles --recurrences plain --handoffs pair 2>&1 \
          | grep -v "NumbaPerformanceWarning\|warn(errors" | cut -c1-300; echo "exit status ${PIPESTATUS[0]}") \
          > "$out/rm_r5_pair_$r.txt" 2>&1 &
      done
      wait
      cat "$out"/rm_*.txt > "$out/h200_racecheck_matrix_$sha.txt" && rm "$out"/rm_*.txt
      awk '/^== /{k=$3; r=$5} /RACECHECK SUMMARY/{h=$4} /answer|output rel err/{a=$0}
        /^exit status/{printf "%-36s run %s  hazards %-4s %s  (%s)\n", k, r, h, $3, a; h="-"; a=""}' \
        "$out/h200_racecheck_matrix_$sha.txt";;
    r5_handoff)
      for rung in ${R5_RUNGS:-shared warp_roles}; do
        bv=64; [ "$rung" = warp_roles ] && bv=32
        timeout 300 python3 tools/tune_r3.py --rung "$rung" --chunks 64 --bv "$bv" --handoff pair,rendezvous \
          --out "$out/tune_$rung.json" 2>&1 | grep -v "NumbaPerformanceWarning\|warn(errors" \
          | tee -a "$out/r5_handoff.log"
        [ "${PIPESTATUS[0]}" = 0 ] || rc=1
      done
      python3 -c "import json, sys; json.dump({r: json.load(open(f'$out/tune_{r}.json')) for r in sys.argv[1:]},
        open('$out/h200_r5_handoff_$sha.json', 'w'), indent=1)" ${R5_RUNGS:-shared warp_roles} \
        && rm "$out"/tune_*.json;;
    ncu)
      ncu_rungs ncu recurrent,shared,warp_roles || rc=1;;
    ncu_src)
      # per-instruction warp-stall samples (SourceCounters) of NCU_SRC_RUNGS (default r3 shared), decay and gated
      # delta, at B1 T8192 H16 K=V=128: one SASS listing per kernel for tools/ncu_phases.py
      rep=/tmp/ncu_src_$sha
      timeout 300 ncu --clock-control none --profile-from-start off --section SourceCounters \
        --section WarpStateStats -f -o "$rep" python3 tools/ncu_rungs.py --rungs "${NCU_SRC_RUNGS:-shared}" \
        --recurrences decay,gated_delta --shape 1,8192,16,128,128 > "$out/ncu_src.log" 2>&1 || rc=1
      for i in $(seq 0 $(( ${NCU_SRC_KERNELS:-4} - 1 ))); do
        ncu -i "$rep.ncu-rep" --page source --csv --print-source sass --launch-skip "$i" --launch-count 1 \
          > "$out/h200_ncu_src_${sha}_$i.csv" 2>> "$out/ncu_src.log" || rc=1
      done
      tail -5 "$out/ncu_src.log";;
    *) echo "unknown mode $m" >&2; rc=2;;
  esac
done
exit $rc
