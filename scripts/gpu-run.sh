#!/usr/bin/env bash
# One device call: GPU test suite, compute-sanitizer (memcheck, racecheck) on a small workload, the
# main job, and the benchmark with torch in the same run. Logs go to $OUT (or ./out).
# Usage on the GPU host, from the repo root: bash scripts/gpu-run.sh [tests|sanitize|start|bench]...
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
source .gpu/env.sh
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu --format=csv
steps=${*:-tests sanitize start bench}
rc=0
for s in $steps; do
  echo "=== $s ($(date +%T))"
  case $s in
    tests) FA_REQUIRE_GPU=1 npx vitest run test/cuda 2>&1 | tee "$OUT/gpu-tests.log" | grep -E "Test Files|Tests|FAIL|✗|×" | head -60 || rc=1 ;;
    sanitize)
      for tool in memcheck racecheck; do
        compute-sanitizer --tool $tool --error-exitcode 9 node scripts/gpu-smoke.js > /tmp/sanitize-$tool.log 2>&1
        echo "$tool exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/sanitize-$tool.log | tail -1)"
        cat /tmp/sanitize-$tool.log >> "$OUT/sanitize.log"
      done ;;
    start) node dist/lib/cli/main.js 2>&1 | tee "$OUT/start.log" ;;
    bench) node dist/bench/cli.js --compare torch --dir ${BENCH_DIRS:-fwd} ${BENCH_ARGS:-} --fp32 --overhead --out "$OUT" 2>&1 | tee "$OUT/bench.log" | grep -v "^bench: [0-9]" ;;
  esac
done
exit $rc
