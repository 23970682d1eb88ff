#!/usr/bin/env bash
# The device calls that measure the two prepared backward patches (NOTES-bwd.md, thirty-eighth and
# thirty-ninth sessions): bwd-persistent.patch (FA_BWD_WS_PERSISTENT=1) and bwd-aux.patch.
#
# Here, before the calls (about 20 min of the 2 cores):
#   git apply bench/patches/bwd-persistent.patch bench/patches/bwd-aux.patch   # the tests travel with the tree
#   npm run build:ts
#   bash scripts/ab-builds.sh base=FA_TRACE=0 \
#     both=patch:bench/patches/bwd-persistent.patch,patch:bench/patches/bwd-aux.patch \
#     aux=patch:bench/patches/bwd-aux.patch ptrace=patch:bench/patches/bwd-persistent.patch,FA_TRACE
#   bash ../shared/gpu/pack.sh .gpu
# (.devbin/ then holds four stripped xz addons, ~5.6 MiB each. All four with .gpu's ~40 MiB, dist and the
# tracked tree pass the 64 MiB a call carries, so each call names its own.)
# Fortieth session: x ran (on an H100): neither patch pays (NOTES-bwd.md). Next: w (the staged dK / dV epilogue
# and HEAD's backward timelines; builds: `bash scripts/ab-builds.sh htrace=FA_TRACE staged=FA_BWD_WS_STAGED_DKDV`),
# run as `YEND=540 bash bench/patches/device-calls.sh w` with carry [".gpu", "dist", ".devbin/base",
# ".devbin/htrace", ".devbin/staged"]. The notes below are the thirty-ninth session's plan.
# Device, logs under $OUT, in the order a, b, then s where b shows a win, then c if time is left
# (~4.5 min of machine start + a + b + s use most of a session's 30 min):
#   call a (~8 min): carry [".gpu", "dist", ".devbin/both", ".devbin/ptrace"], command
#     `bash bench/patches/device-calls.sh a`;
#   call s (~5-10 min, same carry as a): `bash bench/patches/device-calls.sh s`;
#   call b (~8 min): carry [".gpu", "dist", ".devbin/both", ".devbin/base", ".devbin/aux"], command
#     `bash bench/patches/device-calls.sh b`;
#   call c (optional, ~3 min, any build of HEAD, e.g. carry [".gpu", "dist", ".devbin/base"]): the mma.sync
#     (sm80) path's backward against torch flash with fresh gradients (FA_NO_WGMMA=1): the closed FA2
#     issue's margins were read while torch's backward still paid the gradient accumulation
#     (thirty-seventh session).
#   a: correctness of the persistent grid and of the aux kernels (both patches' build), then the
#      backward block timelines with the switch off and on (FA_TRACE build of the persistent patch)
#      while the call's time allows.
#   s: memcheck and racecheck of the persistent grid (gpu-run.sh bwd-persist-san; a call of its own,
#      as each tool may take up to 300 s).
#   b: the A/B of the backward in turns, torch in the first round: a = both patches, switch off;
#      b1 = both, FA_BWD_WS_PERSISTENT=1; b2 = HEAD (the default build's kernels); b3 = aux only.
# If b1 wins: the switch on by default (the patch committed), then the GPU suite with sanitizers
# (`TEST_TIMEOUT=330 bash scripts/gpu-run.sh tests-san`) and the backward turns grid.
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
source .gpu/env.sh
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
log() { echo "$* ($(el) s)" | tee -a "$OUT/calls.log"; }
need() { [ -f "$1" ] || { log "missing $1"; exit 2; }; }
# the build .devbin/$1 as this tree's addon (gpu-run.sh's side a)
use_addon() { need ".devbin/$1/addon.xz"; xz -dc ".devbin/$1/addon.xz" > build/Release/flash_attention_node.node; }
mkdir -p build/Release
case "${1:-a}" in
  a)
    [ -f test/cuda/bwd-persistent.test.ts ] || { log "the patches are not applied to the tree"; exit 2; }
    use_addon both
    # the persistent grid: its test file on 3 blocks and on one per SM, the backward files with the
    # switch on
    OUT=$OUT bash scripts/gpu-run.sh bwd-persist 2>&1 | tee "$OUT/bwd-persist-step.log"
    log "bwd-persist done"
    # the aux kernels serve the packed backward too (which keeps the one-block-per-tile kernel)
    FA_REQUIRE_GPU=1 timeout 150 npx vitest run test/cuda/inference.test.ts -t backward > "$OUT/varlen-bwd.log" 2>&1
    log "varlen backward rc=$? $(grep -E 'Tests  ' "$OUT/varlen-bwd.log")"
    # block timelines: where a D 128 tile's time goes, one block per tile and persistent
    if [ -f .devbin/ptrace/addon.xz ] && [ "$(el)" -lt 420 ]; then
      for p in 0 1; do
        FA_BWD_WS_PERSISTENT=$p TRACE_ADDON=.devbin/ptrace/addon.xz TRACE_DIR=bwd TRACE_CELLS="128:512:0 128:4096:0 64:512:0" \
          OUT=$OUT/trace-p$p bash scripts/gpu-run.sh trace > "$OUT/trace-p$p.log" 2>&1
        log "trace persistent=$p"
      done
    else
      log "trace skipped"
    fi ;;
  b)
    need .devbin/base/addon.xz; need .devbin/aux/addon.xz
    use_addon both
    AB_DIR=bwd AB_TAG=bwd-ab AB_ROUNDS=${AB_ROUNDS:-2} AB_TIMEOUT=110 AB_ARGS="--hdim 64,128 --seqlen 512,1024,4096" \
      AB_ADDON="env:FA_BWD_WS_PERSISTENT=1 .devbin/base/addon.xz .devbin/aux/addon.xz" \
      OUT=$OUT bash scripts/gpu-run.sh fwd-ab > "$OUT/ab-step.log" 2>&1
    log "ab done" ;;
  s)
    use_addon both
    OUT=$OUT bash scripts/gpu-run.sh bwd-persist-san 2>&1 | tee "$OUT/bwd-persist-san-step.log"
    log "sanitizers done" ;;
  c)
    use_addon base
    FA_NO_WGMMA=1 timeout 300 node dist/bench/cli.js --dir fwd,bwd --dtype fp16,bf16 --hdim 64,128 --seqlen 1024,4096 \
      --causal both --api-ms 40 --compare torch --out "$OUT/fa2" > "$OUT/fa2.log" 2>&1
    log "fa2 path rc=$?" ;;
  x)
    # one call for a session short of device time (each call after the machine's 30 s idle release pays
    # a fresh start): b's A/B bounded at 330 s, then a's tests while the call's time allows, then
    # memcheck of the persistent grid on 3 blocks
    need .devbin/base/addon.xz; need .devbin/aux/addon.xz
    [ -f test/cuda/bwd-persistent.test.ts ] || { log "the patches are not applied to the tree"; exit 2; }
    use_addon both
    AB_DIR=bwd AB_TAG=bwd-ab AB_ROUNDS=${AB_ROUNDS:-2} AB_TIMEOUT=100 AB_ARGS="--hdim 64,128 --seqlen 512,1024,4096" \
      AB_ADDON="env:FA_BWD_WS_PERSISTENT=1 .devbin/base/addon.xz .devbin/aux/addon.xz" \
      OUT=$OUT timeout 330 bash scripts/gpu-run.sh fwd-ab > "$OUT/ab-step.log" 2>&1
    log "ab rc=$?"
    use_addon both
    for ctas in 3 0; do
      [ "$(el)" -lt 480 ] || break
      FA_REQUIRE_GPU=1 FA_BWD_WS_CTAS=$ctas timeout 100 npx vitest run test/cuda/bwd-persistent.test.ts > "$OUT/bwd-persist-$ctas.log" 2>&1
      log "ctas $ctas rc=$? $(grep -E 'Tests  ' "$OUT/bwd-persist-$ctas.log")"
    done
    if [ "$(el)" -lt 480 ]; then
      FA_REQUIRE_GPU=1 FA_BWD_WS_PERSISTENT=1 timeout $(( 540 - $(el) )) npx vitest run test/cuda/backward.test.ts \
        test/cuda/bwd-walks.test.ts > "$OUT/bwd-persist-files.log" 2>&1
      log "backward files (switch on) rc=$? $(grep -E 'Tests  ' "$OUT/bwd-persist-files.log")"
    fi
    if [ "$(el)" -lt 500 ]; then
      FA_REQUIRE_GPU=1 timeout $(( 560 - $(el) )) npx vitest run test/cuda/inference.test.ts -t backward > "$OUT/varlen-bwd.log" 2>&1
      log "varlen backward rc=$? $(grep -E 'Tests  ' "$OUT/varlen-bwd.log")"
    fi
    if [ "$(el)" -lt 500 ]; then
      FA_SMOKE_CASES=0,1,3,9,10,11,13,14 FA_BWD_WS_PERSISTENT=1 FA_BWD_WS_CTAS=3 timeout $(( 585 - $(el) )) \
        compute-sanitizer --tool memcheck --error-exitcode 9 node scripts/gpu-smoke.js > "$OUT/memcheck.log" 2>&1
      log "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log" | tail -1)"
    fi
    grep -hE "^ +(FAIL|×)|AssertionError" "$OUT"/bwd-persist-*.log | head -20 ;;
  y)
    # after x (thirty-ninth session... fortieth): the block timelines with the switch off and on, then the
    # persistent test file on 3 blocks with the verbose reporter (x's 100 s cut it off with no result:
    # slow references or a hang?), then memcheck again with its log; logs in one tar ($OUT takes 8 files)
    [ -f test/cuda/bwd-persistent.test.ts ] || { log "the patches are not applied to the tree"; exit 2; }
    use_addon both
    mkdir -p "$OUT/y"
    for p in 0 1; do
      FA_BWD_WS_PERSISTENT=$p TRACE_ADDON=.devbin/ptrace/addon.xz TRACE_DIR=bwd TRACE_CELLS="128:512:0 128:4096:0 64:512:0 64:4096:0 128:1024:1" \
        OUT=$OUT/y/trace-p$p timeout $(( ${YEND:-500} / 5 )) bash scripts/gpu-run.sh trace > "$OUT/y/trace-p$p.log" 2>&1
      log "trace persistent=$p rc=$?"
    done
    FA_REQUIRE_GPU=1 FA_BWD_WS_CTAS=3 timeout $(( ${YEND:-500} - 100 - $(el) )) npx vitest run test/cuda/bwd-persistent.test.ts --reporter verbose \
      > "$OUT/y/bwd-persist-3.log" 2>&1
    log "ctas 3 rc=$? $(grep -E 'Tests  ' "$OUT/y/bwd-persist-3.log") $(grep -c '✓' "$OUT/y/bwd-persist-3.log") passed so far"
    FA_SMOKE_CASES=0,1,3,9,10,11,13,14 FA_BWD_WS_PERSISTENT=1 FA_BWD_WS_CTAS=3 timeout $(( ${YEND:-500} - 20 - $(el) )) \
      compute-sanitizer --tool memcheck --error-exitcode 9 node scripts/gpu-smoke.js > "$OUT/y/memcheck.log" 2>&1
    log "memcheck rc=$? $(grep -E 'ERROR SUMMARY' "$OUT/y/memcheck.log" | tail -1)"
    cp "$OUT/calls.log" "$OUT/y/"; tar -C "$OUT" -cJf "$OUT/y.tar.xz" y && rm -rf "$OUT/y" ;;
  z)
    # after x showed no gain (fortieth session): where a backward tile's time goes. The block timelines of
    # HEAD's kernel (.devbin/htrace: HEAD with FA_TRACE) and of the persistent grid (.devbin/ptrace, switch on),
    # then c's mma.sync comparison while time is left (YEND: the call's seconds); logs in one tar
    need .devbin/htrace/addon.xz; need .devbin/ptrace/addon.xz
    use_addon base
    mkdir -p "$OUT/z"
    cells="128:512:0 128:4096:0 64:512:0 64:4096:0 128:1024:1"
    TRACE_ADDON=.devbin/htrace/addon.xz TRACE_DIR=bwd TRACE_CELLS="$cells" OUT=$OUT/z/trace-head \
      timeout $(( ${YEND:-500} / 4 )) bash scripts/gpu-run.sh trace > "$OUT/z/trace-head.log" 2>&1
    log "trace HEAD rc=$?"
    FA_BWD_WS_PERSISTENT=1 TRACE_ADDON=.devbin/ptrace/addon.xz TRACE_DIR=bwd TRACE_CELLS="$cells" OUT=$OUT/z/trace-p1 \
      timeout $(( ${YEND:-500} / 4 )) bash scripts/gpu-run.sh trace > "$OUT/z/trace-p1.log" 2>&1
    log "trace persistent rc=$?"
    if [ "$(el)" -lt $(( ${YEND:-500} - 120 )) ]; then
      FA_NO_WGMMA=1 timeout $(( ${YEND:-500} - 15 - $(el) )) node dist/bench/cli.js --dir fwd,bwd --dtype fp16,bf16 --hdim 64,128 \
        --seqlen 1024,4096 --causal both --api-ms 40 --compare torch --out "$OUT/z/fa2" > "$OUT/z/fa2.log" 2>&1
      log "fa2 path rc=$?"
    fi
    cp "$OUT/calls.log" "$OUT/z/"; tar -C "$OUT" -cJf "$OUT/z.tar.xz" z && rm -rf "$OUT/z" ;;
  w)
    # a short call (YEND: its seconds) after x (fortieth session): the staged dK / dV epilogue
    # (.devbin/staged: FA_BWD_WS_STAGED_DKDV, never run yet) against HEAD in turns, HEAD's backward block
    # timelines (.devbin/htrace), then the backward test files on the staged build; logs in one tar
    need .devbin/base/addon.xz; need .devbin/staged/addon.xz
    use_addon base
    mkdir -p "$OUT/w"
    AB_DIR=bwd AB_TAG=staged-ab AB_ROUNDS=2 AB_TORCH=0 AB_TIMEOUT=40 AB_ARGS="--hdim 64,128 --seqlen 512,1024,4096" \
      AB_ADDON=".devbin/staged/addon.xz" OUT=$OUT/w timeout $(( ${YEND:-300} / 3 )) bash scripts/gpu-run.sh fwd-ab > "$OUT/w/ab-step.log" 2>&1
    log "staged ab rc=$?"
    if [ -f .devbin/htrace/addon.xz ]; then
      TRACE_ADDON=.devbin/htrace/addon.xz TRACE_DIR=bwd TRACE_CELLS="128:512:0 128:4096:0 64:512:0" OUT=$OUT/w/trace \
        timeout $(( ${YEND:-300} / 5 )) bash scripts/gpu-run.sh trace > "$OUT/w/trace.log" 2>&1
      log "trace HEAD rc=$?"
    fi
    use_addon staged
    FA_REQUIRE_GPU=1 timeout $(( ${YEND:-300} - 12 - $(el) )) npx vitest run test/cuda/backward.test.ts test/cuda/bwd-walks.test.ts \
      > "$OUT/w/staged-tests.log" 2>&1
    log "staged tests rc=$? $(grep -aE 'Tests ' "$OUT/w/staged-tests.log" | tail -1)"
    cp "$OUT/calls.log" "$OUT/w/"; tar -C "$OUT" -cJf "$OUT/w.tar.xz" w && rm -rf "$OUT/w" ;;
  *) echo "usage: device-calls.sh a|s|b|c|x|y|z|w"; exit 2 ;;
esac
