#!/usr/bin/env bash
# Device call: GPU test suite, sanitizers (JS workload and the backward harness), main job, forward
# and backward harness checks (backward: default and single-buffered configurations), then the
# tuning build's timings (or, without it, bwd_check's own timing grid).
# Needs .gpu (pack.sh), build/Release, dist, and .devbin/x/{bwd_check,fwd_check,bwd_tune}.xz (the
# last two optional). STEPS overrides the gpu-run.sh steps (default: tests sanitize start). Logs in $OUT.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
T0=$(date +%s); el() { echo "($(( $(date +%s) - T0 )) s)"; }
bash scripts/gpu-run.sh ${STEPS:-tests sanitize start} 2>&1 | grep -vE "^\s*$" | tail -25
echo "=== harness $(el)"
D=.devbin/x
for f in bwd_check fwd_check bwd_tune; do [ -f $D/$f.xz ] && xz -dkf $D/$f.xz && chmod +x $D/$f; done
if [ -x $D/fwd_check ]; then
  $D/fwd_check --check-only > "$OUT/fwd_check.log" 2>&1; echo "fwd_check rc=$? $(el)"
  grep -E "FAIL|correctness|ALL PASSED" "$OUT/fwd_check.log" | head -8
fi
$D/bwd_check --check-only > "$OUT/check.log" 2>&1; echo "bwd_check rc=$? $(el)"
grep -E "FAIL|correctness|loss|ALL PASSED" "$OUT/check.log" | head -12
FA_NO_WGMMA=1 FA_BWD_SMEM_LIMIT=166912 $D/bwd_check --check-only --cases 60 --seed 5 > "$OUT/check_sm80cfg.log" 2>&1; echo "single-buffered configs rc=$? $(el)"
grep -E "FAIL|correctness" "$OUT/check_sm80cfg.log" | head -5
for tool in memcheck racecheck; do
  timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 $D/bwd_check --small >> "$OUT/bwd_sanitize.log" 2>&1
  echo "bwd_check $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/bwd_sanitize.log" | tail -1) $(el)"
done
if [ -x $D/bwd_tune ]; then
  $D/bwd_tune --bench-only > "$OUT/tune.log" 2>&1; echo "bwd_tune rc=$? $(el)"
  grep -E "TFLOP|FAIL|differs" "$OUT/tune.log" | grep -vE "^ +fp32" | sed 's/fa::cuda::BwdTraits<__half, //' | tail -75
else
  $D/bwd_check --bench-only --reps 12 > "$OUT/bwd_bench.log" 2>&1; echo "bwd_check bench rc=$? $(el)"
  grep -E "^ +(fp16|bf16|fp32)" "$OUT/bwd_bench.log" | head -60
fi
