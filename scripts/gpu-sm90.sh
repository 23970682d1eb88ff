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
for tool in memcheck racecheck synccheck; do
  timeout 150 compute-sanitizer --tool $tool --error-exitcode 9 $D/fwd_check --small --width 128 >> "$OUT/fwd_sanitize.log" 2>&1
  echo "fwd_check --small --width 128 $tool rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$OUT/fwd_sanitize.log" | tail -1) $(el)"
done
if [ "${SKIP_BENCH:-0}" != 1 ]; then
  $D/fwd_check --bench-only --width 128 > "$OUT/fwd_bench_wgmma.log" 2>&1
  FA_NO_WGMMA=1 $D/fwd_check --bench-only --width 128 > "$OUT/fwd_bench_mma.log" 2>&1
  echo "harness timings, width 128 (wgmma | mma.sync) $(el)"
  paste <(grep -E "^ +(fp16|bf16)" "$OUT/fwd_bench_wgmma.log") <(grep -E "^ +(fp16|bf16)" "$OUT/fwd_bench_mma.log" | awk '{print $NF}') | head -30
  node dist/bench/cli.js --compare torch --dir fwd --hdim 128 ${BENCH_ARGS:-} --out "$OUT" > "$OUT/bench.log" 2>&1
  echo "bench rc=$? $(el)"; grep -v "^bench: [0-9]" "$OUT/bench.log" | tail -40
fi
if [ -n "${STEPS:-}" ]; then bash scripts/gpu-run.sh $STEPS 2>&1 | grep -vE "^\s*$" | tail -20; fi
echo "done $(el)"
