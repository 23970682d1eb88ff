#!/usr/bin/env bash
# Device call for the Hopper (wgmma) forward kernel: primitive check, forward harness checks (the
# wgmma kernel serves every fp16/bf16 head dim 104..128 on an H100/H200), compute-sanitizer, harness
# timings with and without it (FA_NO_WGMMA=1), and the forward D128 grid with torch in the same run.
# Needs .gpu (pack.sh), build/Release, dist, and .devbin/x/{fwd_check,sm90_check}.xz. Logs in $OUT.
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
T0=$(date +%s); el() { echo "($(( $(date +%s) - T0 )) s)"; }
source .gpu/env.sh
D=.devbin/x
for f in fwd_check sm90_check bwd_check; do [ -f $D/$f.xz ] && xz -dkf $D/$f.xz && chmod +x $D/$f; done
nvidia-smi --query-gpu=name,driver_version,clocks.sm --format=csv,noheader
$D/sm90_check 2>&1 | tee "$OUT/sm90_check.log"; echo "sm90_check rc=${PIPESTATUS[0]} $(el)"
$D/fwd_check --check-only > "$OUT/fwd_check.log" 2>&1; echo "fwd_check rc=$? $(el)"
grep -E "FAIL|correctness|ALL PASSED|worst" "$OUT/fwd_check.log" | head -12
$D/fwd_check --check-only --seed 7 --cases 200 > "$OUT/fwd_check7.log" 2>&1; echo "fwd_check seed 7 rc=$? $(el)"
grep -E "FAIL|correctness|ALL PASSED" "$OUT/fwd_check7.log" | head -6
grep -qE "FAIL" "$OUT/fwd_check.log" "$OUT/fwd_check7.log" && { echo "checks failed: stopping"; exit 1; }
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $D/fwd_check --small >> "$OUT/fwd_sanitize.log" 2>&1
  echo "fwd_check --small $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/fwd_sanitize.log" | tail -1) $(el)"
done
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  $D/fwd_check --bench-only > "$OUT/fwd_bench_wgmma.log" 2>&1
  FA_NO_WGMMA=1 $D/fwd_check --bench-only > "$OUT/fwd_bench_mma.log" 2>&1
  echo "harness timings (wgmma bshd ms, TFLOP/s, bhsd ms, TFLOP/s | mma.sync bhsd TFLOP/s) $(el)"
  paste <(grep -E "^ +(fp16|bf16)" "$OUT/fwd_bench_wgmma.log") <(grep -E "^ +(fp16|bf16)" "$OUT/fwd_bench_mma.log" | awk '{print $NF}') | head -40
fi
if [ "${GRID:-0}" = 1 ]; then
  BENCH_DIRS=fwd,bwd BENCH_ARGS=--deterministic bash scripts/gpu-run.sh bench > "$OUT/grid.log" 2>&1
  echo "grid rc=$? $(el)"; grep -E "^\| (float16|bfloat16)" "$OUT/grid.log" | awk -F"|" '{r=$8+0; if (r < 1.03) print}' | head -30; grep -iE "overhead|float32" "$OUT/grid.log" | tail -8
fi
if [ -n "${STEPS:-}" ]; then bash scripts/gpu-run.sh $STEPS 2>&1 | grep -vE "^\s*$" | tail -20; fi
echo "done $(el)"
