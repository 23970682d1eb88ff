#!/usr/bin/env bash
# One device call: GPU test suite, compute-sanitizer (memcheck, racecheck) on a workload that queues
# many calls and disposes inputs early, the main job, the doctor, and the benchmark with torch in the
# same run. Logs go to $OUT (or ./out).
# Usage on the GPU host, from the repo root: bash scripts/gpu-run.sh [tests|tests-san|index-stream|sanitize|start|doctor|profile|paged-prof|decode-profile|bwd-ab|percall|api-ab|tiny-ab|trace|decode-trace|fwd-ab|pdl-racecheck|source-profile|cudnn-src|clock|turns|cudnn-prof|bench]...
#   BENCH_ARGS   extra arguments of the bench step (default: the full grid, fwd and bwd, fp32, the
#                per-call overhead, deterministic, decode, varlen and serving modes)
#   TEST_TIMEOUT seconds for the test step (default 420)
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
source .gpu/env.sh
T0=$(date +%s); el() { echo "($(( $(date +%s) - T0 )) s)"; }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,temperature.gpu,memory.used --format=csv,noheader
# The addons of an A/B step: this tree's (side a) and each of AB_ADDON (.node files or xz's of them:
# sides b1, b2, ...) under /tmp/addon-<side>.node; sets $sides.
# An entry env:VAR=v[,VAR2=w] is this tree's addon run with those variables set (runtime switches);
# env:VAR=v[,VAR2=w]@FILE is FILE's addon (.node or .xz) run with them.
declare -A side_env
ab_sides() {
  sides="a"; local n=0 f
  cp build/Release/flash_attention_node.node /tmp/addon-a.node
  for f in ${AB_ADDON:-}; do
    n=$((n + 1))
    local spec=""
    case "$f" in env:*@*) spec=${f#env:}; spec=${spec%%@*}; f=${f#*@} ;;
    env:*)
      cp /tmp/addon-a.node /tmp/addon-b$n.node; side_env[b$n]="${f#env:}"; side_env[b$n]="${side_env[b$n]//,/ }"
      sides="$sides b$n"; echo "b$n = this tree with ${side_env[b$n]}"; continue ;;
    esac
    [ -f "$f" ] || { echo "$1: $f not found"; continue; }
    case "$f" in *.xz) xz -dc "$f" > /tmp/addon-b$n.node ;; *) cp "$f" /tmp/addon-b$n.node ;; esac
    [ -n "$spec" ] && side_env[b$n]="${spec//,/ }"
    sides="$sides b$n"; echo "b$n = $f${spec:+ with ${side_env[b$n]}}"
  done
}
# nvidia-smi's SM clock and power every $2 ms into $1, each line prefixed with ms since the epoch
# (in the background until smi_stop; scripts/clock-summary.py reads it).
smi_log() {
  stdbuf -oL nvidia-smi --query-gpu=index,clocks.sm,power.draw --format=csv,noheader,nounits -lms "$2" 2>/dev/null \
    | python3 -u -c "import sys,time
for l in sys.stdin: print(int(time.time()*1000), l.strip(), flush=True)" > "$1" &
  smi=$!
}
smi_stop() { kill $smi 2>/dev/null; pkill -f "nvidia-smi --query-gpu=index,clocks.sm" 2>/dev/null; }
steps=${*:-tests sanitize start doctor bench}
rc=0
for s in $steps; do
  echo "=== $s $(el)"
  case $s in
    tests)
      # Memory-hungry files (out-of-memory, emptyCache with a second process) run alone, after the rest
      # ran in parallel processes.
      heavy="test/cuda/tensor.test.ts test/cuda/stream.test.ts"
      excl=""; for f in $heavy; do excl="$excl --exclude $f"; done
      FA_REQUIRE_GPU=1 timeout ${TEST_TIMEOUT:-420} npx vitest run test/cuda $excl > "$OUT/gpu-tests.log" 2>&1 || rc=1
      FA_REQUIRE_GPU=1 timeout ${HEAVY_TIMEOUT:-240} npx vitest run $heavy --no-file-parallelism >> "$OUT/gpu-tests.log" 2>&1 || rc=1
      grep -E "Test Files|Tests  |emptyCache released" "$OUT/gpu-tests.log"
      grep -E "^ +(FAIL|×)|AssertionError|Error: " "$OUT/gpu-tests.log" | head -40 ;;
    tests-san)
      # The tests step with the sanitize step running beside its parallel files (one device call
      # instead of two; the sanitizer's workload is small), then the memory-hungry files alone.
      ( OUT=$OUT bash "$0" sanitize > "$OUT/sanitize-step.log" 2>&1 ) &
      san=$!
      heavy="test/cuda/tensor.test.ts test/cuda/stream.test.ts"
      excl=""; for f in $heavy; do excl="$excl --exclude $f"; done
      FA_REQUIRE_GPU=1 timeout ${TEST_TIMEOUT:-420} npx vitest run test/cuda $excl > "$OUT/gpu-tests.log" 2>&1 || rc=1
      echo "parallel files done $(el)"
      wait $san
      grep -E "exit|ok=false|Error" "$OUT/sanitize-step.log" | head -8
      FA_REQUIRE_GPU=1 timeout ${HEAVY_TIMEOUT:-240} npx vitest run $heavy --no-file-parallelism >> "$OUT/gpu-tests.log" 2>&1 || rc=1
      grep -E "Test Files|Tests  |emptyCache released" "$OUT/gpu-tests.log"
      grep -E "^ +(FAIL|×)|AssertionError|Error: " "$OUT/gpu-tests.log" | head -40 ;;
    index-stream)
      # Host Int32Array index arrays: the staged copy (FA_INDEX_STREAM=0) against the index stream
      # (=1) in turns, 2 rounds, on three packed / paged batches (64 x 5-64 tokens, 32 x 20-209,
      # the varlen bench's 11), device index tensors beside them (NOTES-inference.md, thirty-fourth
      # session). Then the inference benches with the index stream on (the serving loop's second
      # line: Int32Arrays passed to every call).
      s64=$(node -e 'console.log(Array.from({length:64},(_,i)=>((i*37)%60)+5).join(","))')
      m32=$(node -e 'console.log(Array.from({length:32},(_,i)=>((i*53)%190)+20).join(","))')
      for r in 1 2; do for mode in 0 1; do for lens in "$s64" "$m32" 8192,3000,1800,1200,700,500,300,200,150,100,242; do
        FA_INDEX_STREAM=$mode PROBE_KINDS=sparse,host PROBE_LENS=$lens PROBE_MS=40 timeout 60 node scripts/paged-probe.js 16 2>&1 \
          | grep -E "^(varlen|page)" | sed "s/^/round $r FA_INDEX_STREAM=$mode ${lens:0:12}..: /" | tee -a "$OUT/index-stream.log"
      done; done; done
      FA_INDEX_STREAM=1 timeout 240 node dist/bench/cli.js --grid off --decode --varlen --serve --compare torch --out "$OUT/inf" \
        > "$OUT/inference-bench.log" 2>&1 || rc=1
      tail -4 "$OUT/inference-bench.log"; echo "index-stream done $(el)" ;;
    sanitize)
      for tool in memcheck racecheck; do
        timeout 300 compute-sanitizer --tool $tool --error-exitcode 9 node scripts/gpu-smoke.js > /tmp/sanitize-$tool.log 2>&1
        echo "$tool exit $?: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' /tmp/sanitize-$tool.log | tail -1) $(el)"
        grep -E "ok=false|Error" /tmp/sanitize-$tool.log | head -5
        cat /tmp/sanitize-$tool.log >> "$OUT/sanitize.log"
      done
      # Long backward walks (each Q / dO stage refilled many times), which the smoke workload's short
      # ones did not show racecheck's view of (forty-fifth session): D 256 (row split) and D 128 (key split)
      for d in 256 128; do
        RACE_D=$d timeout 120 compute-sanitizer --tool racecheck --error-exitcode 9 node scripts/rowsplit-race.js > /tmp/sanitize-race$d.log 2>&1
        echo "racecheck (long walks, D $d) exit $?: $(grep -E 'RACECHECK SUMMARY' /tmp/sanitize-race$d.log | tail -1) $(el)"
        cat /tmp/sanitize-race$d.log >> "$OUT/sanitize.log"
      done ;;
    start) node dist/lib/cli/main.js 2>&1 | tee "$OUT/start.log" | tail -12 ;;
    profile)
      # Packed and paged prefill next to the dense kernel, then ncu on one call of each path and the
      # SASS of the paged Hopper kernel (what the paged loaders cost in the main loop).
      node dist/bench/cli.js --grid off --varlen --api-ms 100 --out "$OUT" 2>&1 | tee "$OUT/varlen.log" | tail -6
      if command -v ncu > /dev/null; then
        for pg in 0 1; do  # the dense (varlen) and the paged Hopper kernel, fp16 D128
          timeout 150 ncu --kernel-name-base mangled --kernel-name "regex:Sm90FwdTraitsI6__halfLi128EEELb${pg}E" \
            --launch-count 2 --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
            --section MemoryWorkloadAnalysis node dist/bench/cli.js --grid off --varlen --api-ms 1 --out /tmp \
            > "$OUT/ncu-varlen-paged$pg.log" 2>&1
          grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|Issued Warp|No Eligible|Stall" "$OUT/ncu-varlen-paged$pg.log" | head -24
        done
      fi
      if command -v cuobjdump > /dev/null; then
        for pg in 0 1; do
          cuobjdump -sass -fun "_ZN2fa4cuda15fwd_kernel_sm90INS0_13Sm90FwdTraitsI6__halfLi128EEELb${pg}EEEvNS0_7FwdArgsE" \
            build/Release/flash_attention_node.node > "$OUT/sass-sm90-d128-paged$pg.txt" 2>&1
          wc -l "$OUT/sass-sm90-d128-paged$pg.txt"
        done
      fi ;;
    paged-prof)
      # Issue 11: the paged prefill (page 16 and 256) against the packed one on the same sequences
      # (scripts/paged-prof.js, one synchronized call each): ncu's launch, throughput, memory,
      # warp-state and scheduler sections and the source counters of the three forward launches;
      # the SASS top stall sites per launch. One tar back.
      if command -v ncu > /dev/null; then
        mkdir -p /tmp/pp-out
        timeout 240 ncu --clock-control none --kernel-name regex:fwd_kernel_sm90_ws --launch-count 3 --section LaunchStats \
          --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SchedulerStats \
          --section SourceCounters --section InstructionStats -f -o /tmp/pp node scripts/paged-prof.js ${PAGED_PROF_PAGES:-16 256} \
          > /tmp/pp-out/ncu.log 2>&1
        echo "ncu rc $? $(el)"; tail -5 /tmp/pp-out/ncu.log
        if [ -f /tmp/pp.ncu-rep ]; then
          ncu -i /tmp/pp.ncu-rep --page details > /tmp/pp-out/details.txt 2>&1
          ncu -i /tmp/pp.ncu-rep --page raw --csv > /tmp/pp-out/raw.csv 2>&1
          grep -E "fwd_kernel_sm90_ws|Duration|Memory Throughput|DRAM Throughput|L2 Hit|L1/TEX Hit|Issued Warp|No Eligible|Warp Cycles Per Issued|Executed Instructions  " \
            /tmp/pp-out/details.txt | awk '{$1=$1; print}' | cut -c1-140
          for i in 1 2 3; do
            ncu -i /tmp/pp.ncu-rep --page source --csv --print-source sass --launch-skip $((i - 1)) --launch-count 1 > /tmp/pp-out/sass-$i.csv 2>&1
            echo "-- launch $i"; python3 scripts/ncu-top.py /tmp/pp-out/sass-$i.csv 25 | tee /tmp/pp-out/top-$i.txt
          done
        fi
        tar czf "$OUT/paged-prof.tgz" -C /tmp pp-out
      fi ;;
    decode-profile)
      # ncu on the decode kernel and the combine at a latency-bound cell (B 1 x 16k) and a
      # bandwidth-bound one (B 16 x 64k), page 16 and page 1.
      if command -v ncu > /dev/null; then
        for cell in ${DECODE_CELLS:-1x16384x16 16x65536x16 16x16384x1}; do
          timeout 150 ncu --kernel-name "regex:decode|combine" --launch-count 4 --section SpeedOfLight \
            --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy \
            node dist/bench/cli.js --grid off --decode --decode-cells $cell --api-ms 1 --out /tmp \
            > "$OUT/ncu-decode-$cell.log" 2>&1
          echo "-- $cell"; grep -E "fwd_decode|combine|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Stall|Grid Size" "$OUT/ncu-decode-$cell.log" | head -30
        done
      fi ;;
    bwd-ab)
      # The warp-specialised Hopper backward against the cp.async one (FA_BWD_SM90=cpasync), torch
      # in the same run; AB_ARGS narrows the grid.
      args="--dir bwd --dtype fp16,bf16 --hdim 64,128 --causal both --api-ms 40 --reps 10 ${AB_ARGS:-}"
      node dist/bench/cli.js $args --compare torch --out /tmp/ab-ws 2>&1 | tee "$OUT/bwd-ab-ws.log" | grep -E "^\| (float|bfloat)" | cut -c1-160
      FA_BWD_SM90=cpasync node dist/bench/cli.js $args --out /tmp/ab-cp 2>&1 | tee "$OUT/bwd-ab-cp.log" | grep -E "^\| (float|bfloat)" | cut -c1-110 ;;
    percall)
      # Issue 10's per-call cost: the tiny call with launches on the JS thread (FA_LAUNCH_THREAD=0)
      # and on the launcher thread (default), the binding's host profile (FA_PROFILE_HOST: before /
      # in / after the core call), twice each in turns; the host cost of dense and paged calls
      # (scripts/host-cost.js) both ways; nsys's CUDA API and kernel summary if present (PERCALL_NSYS=0: not).
      for i in 1 2; do for lt in 0 1; do
        echo "-- FA_LAUNCH_THREAD=$lt ($i)"
        FA_LAUNCH_THREAD=$lt FA_PROFILE_HOST=1 node dist/bench/cli.js --grid off --overhead --out /tmp/pc 2>&1 | grep -E "Per-call|host profile|^\| "
      done; done | tee "$OUT/percall.log"
      for lt in 0 1; do echo "-- host-cost FA_LAUNCH_THREAD=$lt"; FA_LAUNCH_THREAD=$lt node scripts/host-cost.js 2>&1; done | tee -a "$OUT/percall.log"
      if command -v nsys > /dev/null && [ "${PERCALL_NSYS:-1}" = 1 ]; then
        for pdl in 0 1; do
          FA_LAUNCH_THREAD=$pdl timeout 150 nsys profile -o /tmp/pc$pdl --trace=cuda --force-overwrite true \
            node dist/bench/cli.js --grid off --overhead --out /tmp/pc > /dev/null 2>&1
          timeout 120 nsys stats --report cuda_api_sum,cuda_gpu_kern_sum --format csv /tmp/pc$pdl.nsys-rep > "$OUT/nsys-percall-pdl$pdl.csv" 2>&1
          head -12 "$OUT/nsys-percall-pdl$pdl.csv"
        done
      fi ;;
    api-ab)
      # Issue 10's per-call cost, JavaScript and binding together: this tree (addon and dist, side
      # new) against AB_OLD_ADDON (an xz of a .node) with AB_OLD_DIST (a tgz holding dist/), in
      # turns, AB_ROUNDS rounds (default 3): `--overhead` (back to back, host time, kernel by events,
      # the read back), the binding's host profile, and scripts/host-cost.js.
      rm -rf /tmp/ab-old /tmp/ab-new && mkdir -p /tmp/ab-old /tmp/ab-new
      tar xzf "$AB_OLD_DIST" -C /tmp/ab-old && xz -dc "$AB_OLD_ADDON" > /tmp/ab-old/addon.node
      cp -r dist /tmp/ab-new/dist && cp build/Release/flash_attention_node.node /tmp/ab-new/addon.node
      for round in $(seq 1 ${AB_ROUNDS:-3}); do for side in old new; do
        rm -rf dist && cp -r /tmp/ab-$side/dist dist && cp /tmp/ab-$side/addon.node build/Release/flash_attention_node.node
        echo "-- $side (round $round)"
        FA_PROFILE_HOST=1 timeout 60 node dist/bench/cli.js --grid off --overhead --out /tmp/api-$side 2>&1 | grep -E "Per-call|host profile"
        timeout 90 node scripts/host-cost.js 2>&1 | grep -E "flashAttention|pagedAttention B16|JS only"
      done; done | tee "$OUT/api-ab.log"
      rm -rf dist && cp -r /tmp/ab-new/dist dist && cp /tmp/ab-new/addon.node build/Release/flash_attention_node.node ;;
    tiny-ab)
      # Issue 10's tiny call ([1, 128, 4, 64] fp16) with this tree's addon (a) and each of AB_ADDON
      # (xz's or .node files: b1, b2, ...), in turns, AB_ROUNDS rounds (default 3): `--overhead`
      # (back to back, host time, kernel by events, the read back) and the probe back to back.
      ab_sides tiny-ab
      for round in $(seq 1 ${AB_ROUNDS:-3}); do for side in $sides; do
        cp /tmp/addon-$side.node build/Release/flash_attention_node.node
        echo "-- $side (round $round)"
        timeout 60 node dist/bench/cli.js --grid off --overhead --out /tmp/tiny-$side 2>&1 | grep -E "Per-call"
        timeout 60 node scripts/roundtrip-probe.js b2b 2>&1 | tail -1
      done; done | tee "$OUT/tiny-ab.log"
      cp /tmp/addon-a.node build/Release/flash_attention_node.node ;;
    fwd-ab)
      # A/B of builds: this tree's addon (a) and each of AB_ADDON (space-separated .node files or xz's
      # of them, e.g. FA_WS_SPLIT_O=1 / FA_WS_LPT=1 builds: b1, b2, ...), in turns, AB_ROUNDS rounds
      # (default 2), torch in the first a run unless AB_TORCH=0; AB_DIR fwd / bwd / fwd,bwd (default
      # fwd), AB_ARGS narrows the grid (default fp16, D 128 and 256, causal and not, N 512-16k);
      # AB_TAG names the logs. The sides' order turns by one each round (a b1 b2, b1 b2 a, ...): with
      # a fixed order the GPU's warming over a round could favour the earlier sides on the
      # power-bound cells (twenty-second session, NOTES-fwd.md: three builds all read +1-2% over the
      # last side at D 128 N 4k-16k, where their code could not differ by that).
      args="--dir ${AB_DIR:-fwd} --dtype fp16 --hdim 128,256 --causal both --api-ms 40 --reps 10 ${AB_ARGS:-}"
      tag=${AB_TAG:-fwd-ab}
      ab_sides fwd-ab
      read -r -a side_list <<< "$sides"
      for round in $(seq 1 ${AB_ROUNDS:-2}); do
        k=$(( (round - 1) % ${#side_list[@]} ))
        order="${side_list[*]:k} ${side_list[*]:0:k}"
        for side in $order; do
          cp /tmp/addon-$side.node build/Release/flash_attention_node.node
          cmp=""; [ $side$round = a1 ] && [ "${AB_TORCH:-1}" = 1 ] && cmp="--compare torch"
          echo "-- $side (round $round) $(el)"
          timeout ${AB_TIMEOUT:-150} env ${side_env[$side]:-} node dist/bench/cli.js $args $cmp --out /tmp/ab-$side$round 2>&1 | tee -a "$OUT/$tag-$side.log" | grep -E "^\| (float|bfloat)" | cut -c1-120
        done
      done | tee "$OUT/$tag.log"
      cp /tmp/addon-a.node build/Release/flash_attention_node.node ;;
    pdl-racecheck)
      # Which case of the smoke workload stalls racecheck when the warp-specialised forward is
      # PDL-launched (ninth session: the whole workload did not finish in 300 s with FA_FWD_PDL=1,
      # 230 s without): each dense case alone, with and without PDL, 60 s each at most.
      for i in ${SMOKE_CASES:-0 1 2 3 9 10}; do for pdl in 1 0; do
        FA_FWD_PDL=$pdl FA_SMOKE_CASES=$i timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 node scripts/gpu-smoke.js > /tmp/rc-$i-$pdl.log 2>&1
        echo "case $i FA_FWD_PDL=$pdl: exit $? $(grep -E 'ok=' /tmp/rc-$i-$pdl.log | tail -1) $(grep -E 'RACECHECK SUMMARY' /tmp/rc-$i-$pdl.log | tail -1) $(el)"
      done; done | tee "$OUT/pdl-racecheck.log" ;;
    source-profile)
      # Issue 12 / 11: where the warps of the steady loop wait. ncu's source counters (warp stall
      # samples per SASS instruction) on one call of the warp-specialised forward (fp16 D 128 full
      # N 4k) and of the decode kernel (B 1 x 16k, page 16); the SASS source page as CSV, the rest as
      # the details page.
      if command -v ncu > /dev/null; then
        timeout 200 ncu --clock-control none --kernel-name regex:fwd_kernel_sm90_ws --launch-skip 3 --launch-count 1 --section SourceCounters \
          --section WarpStateStats --section SpeedOfLight -f -o /tmp/src-ws node dist/bench/cli.js --dir fwd --dtype fp16 \
          --hdim 128 --seqlen 4096 --causal off --api-ms 1 --reps 2 --out /tmp/sp > "$OUT/ncu-src-ws.log" 2>&1
        timeout 150 ncu --clock-control none --kernel-name regex:fwd_decode --launch-skip 3 --launch-count 1 --section SourceCounters \
          --section WarpStateStats --section SpeedOfLight -f -o /tmp/src-decode node dist/bench/cli.js --grid off --decode \
          --decode-cells 1x16384x16 --api-ms 1 --out /tmp/sp >> "$OUT/ncu-src-decode.log" 2>&1
        for r in ws decode; do
          [ -f /tmp/src-$r.ncu-rep ] || { echo "no report for $r"; continue; }
          ncu -i /tmp/src-$r.ncu-rep --page details > "$OUT/ncu-src-$r-details.txt" 2>&1
          ncu -i /tmp/src-$r.ncu-rep --page source --csv --print-source sass > "$OUT/ncu-src-$r-sass.csv" 2>&1
          echo "-- $r: $(wc -l < "$OUT/ncu-src-$r-sass.csv") SASS lines"
          python3 scripts/ncu-top.py "$OUT/ncu-src-$r-sass.csv" 30 | tee "$OUT/ncu-src-$r-top.txt"
          grep -E "Duration|Warp Cycles Per Issued|Issued Warp|No Eligible" "$OUT/ncu-src-$r-details.txt" | head -8
        done
      fi ;;
    cudnn-src)
      # Issue 12: ncu source counters (stall samples per SASS instruction) of cuDNN's forward kernel
      # and of ours on the same cell (SRC_CELL "dtype:D:N:causal", default fp16 D 128 full N 4k):
      # how cuDNN orders its softmax at ~0.9 "wait" cycles per instruction against our ~2.1
      # (sixteenth session). The SASS pages as CSV, tarred into $OUT/cudnn-src.tgz. SRC_DIR=bwd: the
      # backward's main kernels instead (ours: bwd_kernel_sm90_ws; cuDNN's: its `bprop` kernel, taken
      # by name: it runs on autograd's thread, outside the NVTX range).
      if command -v ncu > /dev/null; then
        IFS=: read -r dt hd n cz <<< "${SRC_CELL:-float16:128:4096:0}"
        cs=off; [ "$cz" = 1 ] && cs=on; dts=fp16; [ "$dt" = bfloat16 ] && dts=bf16
        sd=${SRC_DIR:-fwd}
        kn=regex:fwd_kernel_sm90_ws; csel="--nvtx --nvtx-include prof/ --launch-count 1"
        [ "$sd" = bwd ] && kn=regex:bwd_kernel_sm90_ws && csel="--kernel-name regex:bprop --launch-skip 3 --launch-count 1"
        mkdir -p /tmp/src-out
        timeout 150 ncu --clock-control none --kernel-name $kn --launch-skip 3 --launch-count 1 \
          --section SourceCounters --section WarpStateStats --section InstructionStats -f -o /tmp/src-ours \
          node dist/bench/cli.js --dir $sd --dtype $dts --hdim $hd --seqlen $n --causal $cs --api-ms 1 --reps 2 --out /tmp/sp > /tmp/src-out/ours.log 2>&1
        echo "ours: rc $? $(el)"
        timeout 150 ncu --clock-control none $csel \
          --section SourceCounters --section WarpStateStats --section InstructionStats -f -o /tmp/src-cudnn \
          python3 bench/prof_sdpa.py cudnn $sd $dt $hd $n $cz 4 > /tmp/src-out/cudnn.log 2>&1
        echo "cudnn: rc $? $(el)"
        for who in ours cudnn; do
          [ -f /tmp/src-$who.ncu-rep ] || { tail -5 /tmp/src-out/$who.log; continue; }
          ncu -i /tmp/src-$who.ncu-rep --page details > /tmp/src-out/$who-details.txt 2>&1
          ncu -i /tmp/src-$who.ncu-rep --page source --csv --print-source sass > /tmp/src-out/$who-sass.csv 2>&1
          echo "-- $who: $(wc -l < /tmp/src-out/$who-sass.csv) SASS lines"
          python3 scripts/ncu-top.py /tmp/src-out/$who-sass.csv 25
          grep -E "^  [a-zA-Z_].*\(|Duration|Warp Cycles Per Issued|Executed Instructions  " /tmp/src-out/$who-details.txt | head -6
        done
        tar czf "$OUT/cudnn-src.tgz" -C /tmp src-out
      fi ;;
    clock)
      # Issue 12: ours and cuDNN on the same cells, back to back for 2.5 s each, with the SM clock and
      # power logged every 100 ms: whether the gap is cycles or clock (power). CLOCK_CELLS
      # "dir:dtype:D:N:causal ...".
      smi_log /tmp/clock-smi.log 100
      : > /tmp/clock-runs.jsonl
      python3 bench/clock_probe_torch.py gemm float16 0 1024 0 >> /tmp/clock-runs.jsonl 2>>"$OUT/clock.err"
      for cell in ${CLOCK_CELLS:-fwd:float16:128:4096:0 fwd:float16:128:16384:0 fwd:float16:256:2048:0 fwd:float16:64:4096:0 fwd:bfloat16:128:4096:1 bwd:float16:128:4096:0 bwd:float16:256:4096:0}; do
        IFS=: read -r d dt hd n cz <<< "$cell"
        node scripts/clock-probe.js "$d" "$dt" "$hd" "$n" "$cz" >> /tmp/clock-runs.jsonl 2>>"$OUT/clock.err"
        sleep 0.5
        python3 bench/clock_probe_torch.py "$d" "$dt" "$hd" "$n" "$cz" >> /tmp/clock-runs.jsonl 2>>"$OUT/clock.err"
        sleep 0.5
      done
      smi_stop
      cp /tmp/clock-smi.log /tmp/clock-runs.jsonl "$OUT/" 2>/dev/null
      python3 scripts/clock-summary.py /tmp/clock-smi.log /tmp/clock-runs.jsonl | tee "$OUT/clock.md" ;;
    turns)
      # Issue 12: ours and cuDNN on the grid's cells with their rounds in turns (scripts/turns-probe.js;
      # TURNS_CELLS / TURNS_DIRS / TURNS_MS / TURNS_ROUNDS), the SM clock and power logged every 50 ms
      # and summed up per side over its rounds' windows.
      smi_log /tmp/turns-smi.log 50
      TURNS_JSONL=/tmp/turns.jsonl timeout ${TURNS_TIMEOUT:-420} node scripts/turns-probe.js > "$OUT/turns.log" 2>&1 || rc=1
      smi_stop
      cp /tmp/turns-smi.log /tmp/turns.jsonl "$OUT/" 2>/dev/null
      python3 scripts/clock-summary.py /tmp/turns-smi.log /tmp/turns.jsonl > "$OUT/turns-clock.md" 2>&1
      grep -E "cells;|Error|error" "$OUT/turns.log" | head; echo "turns done $(el)" ;;
    cudnn-prof)
      # Issue 12: ncu on ours and on cuDNN's SDPA kernels for the same cells (PROF_CELLS
      # "dir:dtype:D:N:causal ..."): launch configuration, registers, shared memory, duration and
      # clock, instruction counts per pipe, shared-memory wavefronts, warp states; one call each
      # (forward: its kernel; backward: ours the preprocess / main / convert kernels, cuDNN's
      # `bprop` kernel). The SDPA side is bench/prof_sdpa.py. PROF_METRICS: more metrics, comma-separated;
      # PROF_SECTIONS: more sections ("--section X ...").
      if command -v ncu > /dev/null; then
        sec="--section LaunchStats --section SpeedOfLight --section ComputeWorkloadAnalysis --section InstructionStats --section WarpStateStats --section Occupancy ${PROF_SECTIONS:-}"
        met="--metrics smsp__inst_executed.sum,sm__cycles_elapsed.avg,sm__cycles_elapsed.avg.per_second,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,regex:^smsp__inst_executed_pipe_[a-z_]+\.sum$,regex:^sm__pipe_[a-z_]+_cycles_active\.avg\.pct_of_peak_sustained_active$,regex:^smsp__average_warps_issue_stalled_[a-z_]+_per_issue_active\.ratio$${PROF_METRICS:+,$PROF_METRICS}"
        for cell in ${PROF_CELLS:-fwd:float16:128:4096:0 fwd:float16:64:512:1 fwd:float16:256:4096:0 bwd:float16:64:8192:0 bwd:float16:128:4096:0}; do
          IFS=: read -r d dt hd n cz <<< "$cell"
          tag="$d-$dt-$hd-$n-$cz"; cs=off; [ "$cz" = 1 ] && cs=on; dts=fp16; [ "$dt" = bfloat16 ] && dts=bf16
          # (cuDNN's backward runs on autograd's thread, outside the NVTX range: taken by name)
          if [ "$d" = fwd ]; then kn="regex:fwd_kernel_sm90_ws"; skip=3; cnt=1; sel="--nvtx --nvtx-include prof/ --launch-count 1"
          else kn="regex:bwd_"; skip=6; cnt=3; sel="--kernel-name regex:bprop --launch-skip 3 --launch-count 1"; fi
          timeout 120 ncu --clock-control none --kernel-name $kn --launch-skip $skip --launch-count $cnt $sec $met -f -o /tmp/prof-ours-$tag \
            node dist/bench/cli.js --dir $d --dtype $dts --hdim $hd --seqlen $n --causal $cs --api-ms 1 --reps 2 --out /tmp/pp > /tmp/prof-ours-$tag.log 2>&1
          echo "ours $tag: rc $? $(el)"
          timeout 120 ncu --clock-control none $sel $sec $met -f -o /tmp/prof-cudnn-$tag \
            python3 bench/prof_sdpa.py cudnn $d $dt $hd $n $cz 2 > /tmp/prof-cudnn-$tag.log 2>&1
          echo "cudnn $tag: rc $? $(el)"
          for who in ours cudnn; do
            [ -f /tmp/prof-$who-$tag.ncu-rep ] || { tail -5 /tmp/prof-$who-$tag.log; continue; }
            mkdir -p /tmp/prof-out
            ncu -i /tmp/prof-$who-$tag.ncu-rep --page details > /tmp/prof-out/prof-$who-$tag-details.txt 2>&1
            ncu -i /tmp/prof-$who-$tag.ncu-rep --page raw --csv > /tmp/prof-out/prof-$who-$tag-raw.csv 2>&1
            grep -E "^  [a-zA-Z_].*\(|Duration|Registers Per|Executed Instructions  |SM Frequency|Issue Slots Busy" /tmp/prof-out/prof-$who-$tag-details.txt | awk '{$1=$1; print}' | cut -c1-150
          done
        done
        # one file back (the device returns a limited number of files)
        tar czf "$OUT/cudnn-prof.tgz" -C /tmp prof-out
      fi ;;
    trace)
      # FA_TRACE=1 addon (TRACE_ADDON: an xz of it): the per-tile and per-step splits of the
      # warp-specialised forward (fwd_launch.cuh, ws_trace_report) on TRACE_CELLS "D:N:causal ..."
      # (fp16), one process per cell; the tree's addon is put back afterwards. TRACE_DIR=bwd: the
      # warp-specialised backward's block timelines instead (bwd_launch.cuh, bwd_trace_report).
      cp build/Release/flash_attention_node.node /tmp/addon-keep.node
      xz -dc "${TRACE_ADDON:?TRACE_ADDON}" > build/Release/flash_attention_node.node
      for cell in ${TRACE_CELLS:-128:4096:0 128:1024:0 64:4096:0 256:4096:0 64:512:1}; do
        IFS=: read -r hd n cz <<< "$cell"; cs=off; [ "$cz" = 1 ] && cs=on
        echo "-- D$hd N$n causal $cs"
        FA_WS_TRACE_EVERY=${TRACE_EVERY:-20} timeout 60 node dist/bench/cli.js --dir ${TRACE_DIR:-fwd} --dtype fp16 --hdim $hd --seqlen $n \
          --causal $cs --api-ms 20 --reps 30 --out /tmp/tr 2>&1 | grep -E "fa (ws (step )?|bwd )trace" | tail -6
      done | tee "$OUT/trace.log"
      cp /tmp/addon-keep.node build/Release/flash_attention_node.node ;;
    doctor) node bin/flash-attention-node.js doctor 2>&1 | tee "$OUT/doctor.log" | tail -15 ;;
    bench) node dist/bench/cli.js --compare torch ${BENCH_ARGS:---dir fwd,bwd --fp32 --overhead --deterministic --decode --varlen --serve} \
             --out "$OUT" 2>&1 | tee "$OUT/bench.log" | grep -v "^bench: [0-9]" | grep -v "^bench decode" ;;
  esac
done
echo "done $(el)"
exit $rc
