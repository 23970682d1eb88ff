#!/usr/bin/env bash
# Device call for the Hopper (wgmma) kernels: the descriptor unit check, then (FWD=1) the forward
# harness checks, compute-sanitizer and timings with / without wgmma (FA_NO_WGMMA=1), (BWD=1) the
# same for the backward, (MMA=1) the harness checks with FA_NO_WGMMA=1 (the mma.sync kernels that
# other GPUs run, default and single-buffered sm_80 configurations), (GRID=1) the PERF.md grid with
# torch in the same run (scripts/gpu-run.sh).
# Needs .gpu (pack.sh), dist, .devbin/x/{fwd_check,bwd_check,sm90_check}.xz, and build/Release or
# .devbin/x/addon.xz (the addon compressed, to stay under the 64 MiB a device call carries).
# Harness logs go to $OUT/harness.log (one file: the device returns at most 8).
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
T0=$(date +%s); el() { echo "($(( $(date +%s) - T0 )) s)"; }
source .gpu/env.sh
D=.devbin/x; H="$OUT/harness.log"
for f in fwd_check sm90_check bwd_check; do [ -f $D/$f.xz ] && xz -dkf $D/$f.xz && chmod +x $D/$f; done
# The addon may travel compressed (carry limit): .devbin/x/addon.xz -> build/Release.
if [ -f $D/addon.xz ]; then mkdir -p build/Release && xz -dc $D/addon.xz > build/Release/flash_attention_node.node; fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
run() {  # name, command...: output appended to harness.log, summary lines printed
  local name=$1; shift
  echo "=== $name" >> "$H"; "$@" > /tmp/run.log 2>&1; local rc=$?; cat /tmp/run.log >> "$H"
  echo "$name rc=$rc $(el)"; grep -E "FAIL|WRONG|correctness|ALL PASSED|ERROR SUMMARY|RACECHECK SUMMARY|loss" /tmp/run.log | head -8
  return $rc
}
run sm90_check $D/sm90_check
bad=0
if [ "${FWD:-0}" = 1 ]; then
  run fwd_check $D/fwd_check --check-only || bad=1
  for tool in memcheck racecheck; do run "fwd $tool" timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $D/fwd_check --small || bad=1; done
fi
if [ "${BWD:-0}" = 1 ]; then
  run bwd_check $D/bwd_check --check-only || bad=1
  run "bwd_check seed 9" $D/bwd_check --check-only --cases 120 --seed 9 || bad=1
  for tool in memcheck racecheck; do run "bwd $tool" timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 $D/bwd_check --small || bad=1; done
fi
if [ "${MMA:-0}" = 1 ]; then
  export FA_NO_WGMMA=1
  run "fwd_check (mma.sync)" $D/fwd_check --check-only || bad=1
  run "bwd_check (mma.sync)" $D/bwd_check --check-only || bad=1
  FA_BWD_SMEM_LIMIT=166912 run "bwd_check (mma.sync, single-buffered sm_80 configs)" $D/bwd_check --check-only --cases 60 --seed 5 || bad=1
  run "bwd memcheck (mma.sync)" timeout 200 compute-sanitizer --tool memcheck --error-exitcode 9 $D/bwd_check --small || bad=1
  run "fwd memcheck (mma.sync)" timeout 150 compute-sanitizer --tool memcheck --error-exitcode 9 $D/fwd_check --small || bad=1
  unset FA_NO_WGMMA
fi
[ $bad = 1 ] && { echo "checks failed: no timings"; exit 1; }
if [ "${FWD:-0}" = 1 ] && [ "${TIME:-1}" = 1 ]; then
  $D/fwd_check --bench-only > /tmp/a.log 2>&1; FA_NO_WGMMA=1 $D/fwd_check --bench-only > /tmp/b.log 2>&1
  echo "forward (wgmma: bshd ms, TFLOP/s, bhsd ms, TFLOP/s | mma.sync bhsd TFLOP/s) $(el)" | tee -a "$H"
  paste <(grep -E "^ +(fp16|bf16)" /tmp/a.log) <(grep -E "^ +(fp16|bf16)" /tmp/b.log | awk '{print $NF}') | tee -a "$H" | head -40
fi
if [ "${BWD:-0}" = 1 ] && [ "${TIME:-1}" = 1 ]; then
  $D/bwd_check --bench-only --reps 12 > /tmp/a.log 2>&1; FA_NO_WGMMA=1 $D/bwd_check --bench-only --reps 12 > /tmp/b.log 2>&1
  echo "backward (wgmma: bhsd ms, TFLOP/s [, bshd] | mma.sync: same) $(el)" | tee -a "$H"
  paste <(grep -E "^ +(fp16|bf16)" /tmp/a.log) <(grep -E "^ +(fp16|bf16)" /tmp/b.log | awk '{print $5, $6}') | tee -a "$H" | head -40
fi
if [ "${GRID:-0}" = 1 ]; then
  BENCH_DIRS=fwd,bwd BENCH_ARGS=--deterministic bash scripts/gpu-run.sh ${STEPS:-} bench > /tmp/grid.log 2>&1
  echo "grid rc=$? $(el)"; cat /tmp/grid.log >> "$H"
  grep -E "Test Files|Tests |exit" /tmp/grid.log | head
  grep -E "^\| (float16|bfloat16)" "$OUT/bench.log" | awk -F"|" '{r=$8+0; if (r < 1.03) print}' | head -30
  grep -iE "overhead" "$OUT/bench.log" | tail -3
fi
echo "done $(el)"
