#!/usr/bin/env bash
# Device call: GPU test suite, sanitizers (JS workload and the backward harness), main job, backward
# harness check (default and single-buffered configurations) and the tuning build's timings.
# Needs .gpu (pack.sh), build/Release, dist, and .devbin/x/{bwd_check,bwd_tune}.xz. Logs in $OUT.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
T0=$(date +%s); el() { echo "($(( $(date +%s) - T0 )) s)"; }
bash scripts/gpu-run.sh tests sanitize start 2>&1 | grep -vE "^\s*$" | tail -25
echo "=== harness $(el)"
D=.devbin/x
for f in bwd_check bwd_tune; do [ -f $D/$f.xz ] && xz -dkf $D/$f.xz && chmod +x $D/$f; done
$D/bwd_check --check-only > "$OUT/check.log" 2>&1; echo "bwd_check rc=$? $(el)"
grep -E "FAIL|correctness|loss|ALL PASSED" "$OUT/check.log" | head -12
FA_BWD_SMEM_LIMIT=166912 $D/bwd_check --check-only --cases 60 --seed 5 > "$OUT/check_sm80cfg.log" 2>&1; echo "single-buffered configs rc=$? $(el)"
grep -E "FAIL|correctness" "$OUT/check_sm80cfg.log" | head -5
for tool in memcheck racecheck; do
  timeout 200 compute-sanitizer --tool $tool --error-exitcode 9 $D/bwd_check --small >> "$OUT/bwd_sanitize.log" 2>&1
  echo "bwd_check $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/bwd_sanitize.log" | tail -1) $(el)"
done
$D/bwd_tune --bench-only > "$OUT/tune.log" 2>&1; echo "bwd_tune rc=$? $(el)"
grep -E "TFLOP|FAIL|differs" "$OUT/tune.log" | grep -vE "^ +fp32" | sed 's/fa::cuda::BwdTraits<__half, //' | tail -75
