#!/usr/bin/env bash
# The next device calls for the Hopper backward (NOTES-bwd.md, thirty-seventh to fortieth sessions). The
# fortieth session's call (an H100) measured the persistent grid (bwd-persistent.patch) and the aux kernels
# (bwd-aux.patch): neither pays, both stay out (that call's script: git show 42324af:bench/patches/device-calls.sh).
#
# (Calls w, v and q of the forty-first session ran; their recipes are in the cases below and in that session's
# commit, 2cc3400.)
#
# Sixty-eighth session: five requests found no machine; the sixth got an H100: lz68 (the lazy rescale +1.8% D 128,
# +3.6% D 64 three consumers, +5.1% D 256 over main's kernels; 1045 tests and memcheck on it), then the other GPU test
# files (143 + 332) and GPU fuzz seed 68101 (3463 calls, 0 failures) by hand; the lazy rescale is the default since
# (RESULTS.md / NOTES-fwd.md, sixty-eighth sections). NEXT, on an H200: hp and then x63 (issue 12's grid and issue 11's
# benches: the varlen / paged prefill runs the same forward) with HB=cs68 = main's 90a build (`FA_CUDA_ARCHS=90a npm ci`,
# strip + xz -9 the addon into .devbin/cs68/addon.xz), e.g. `source .gpu/env.sh && HB=cs68 YEND=540 bash
# bench/patches/device-calls.sh hp`, carry [".gpu", "dist", ".devbin/cs68"].
# Sixty-seventh session: an H200 at last (third request): x63, hp, gf (ST 300, FZ_SEED 67101), the fuzz under memcheck /
# racecheck and issue 11's benches again, all on cs61 (RESULTS.md, sixty-seventh section). NEXT: on an H200, a kernel change's
# A/B (fwd-ab, AB_ADDON) before the grid again; with none, x63 as below keeps the regression list running.
# Sixty-sixth session: x63 ran five times, on an H100 (2 / 2, 151 at 0.081); nine requests got no machine. NEXT: unchanged,
# the sixty-third session's below (.devbin/cs61 from main: `FA_CUDA_ARCHS=90a npm ci`, strip + xz -9 the addon).
# Sixty-fifth session: x63 ran three times, on an H100 (2 / 2, 151 at 0.081); eight failed starts, one refusal. NEXT: unchanged,
# the sixty-third session's below (.devbin/cs61 from main: `FA_CUDA_ARCHS=90a npm ci`, strip + xz -9 the addon).
# Sixty-fourth session: x63 ran twice, on an H100 (2 / 2, 151 at 0.081); nine more requests got no machine. NEXT: unchanged,
# the sixty-third session's below (rebuild .devbin/cs61 from main: `FA_CUDA_ARCHS=90a npm ci`, strip + xz -9 the addon).
# Sixty-third session: x63 ran fourteen times, always on an H100 (three more requests got no machine) (fuzz-regressions.test.ts 2 / 2, 58001:151 at 0.081 of the rule;
# fuzz seed 63001 4463 calls, 0 failures). NEXT: on the H200, `HB=cs61 YEND=470 OTHER_END=30 ... x63` (issue 11's benches
# after the regression list; 30: nothing more on another card), then `HB=cs61 YEND=540 ... hp` (issue 12's grid); carry
# [".gpu", "dist", ".devbin/cs61"] (cs61 = main's forward and decode kernels; rebuild it from main where a checkout lacks it).
# Sixty-second session: c61 ran on an H100 (the page-tail zeroing landed; the fp32 backward's u (2 - u) dropped: no fix
# for 58001:151, 5-19% slower). NEXT: on the H200, `HB=cs61 YEND=380 ... pt` (issue 11's benches; .devbin/cs61 holds
# main's forward and decode kernels since this session) and `HB=cs61 YEND=540 ... hp` (issue 12's grid); on any card,
# fuzz-regressions.test.ts (58001:151 joined it on a CPU check of the fuzz's new softcap floor, never rerun on a GPU).
# Sixty-first session: c58 ran on an H100 (the fourth form landed, f104790); c61 never got a machine. NEXT: `git apply
# bench/patches/softcap-page-tail.patch` (K's page-tail rows zeroed; the fp32 backward's 1 - tanh^2), then if .devbin/cs61
# is missing `FA_CUDA_ARCHS=90a npm run build:native` (check the log: no C7511, 13 spill warnings), strip + xz -9 into
# .devbin/cs61/addon.xz; .devbin/cs58 is main's kernels since f104790 (else build it from main the same way);
# `YEND=540 ST=280 FZ_SEED=61001 ... c61` (SHORT=1 YEND=310 for a short call), carry [".gpu", "dist", ".devbin/cs58",
# ".devbin/cs61"]; land it if 151 / 432 / 1404 / 3808 pass, the suite is green and the paged softcap cost is small; then
# pt / hp on the H200.
# Sixtieth session: no call ran either (twenty requests, no machine). NEXT: unchanged, the fifty-ninth session's below.
# Fifty-ninth session: no call ran (every request got no machine; the budget went to failed starts). NEXT: as below, with
# the patch's fourth form (the vote leaves the trimmed half out; .devbin/cs58 holds its 90a build where the checkout
# persisted): `git apply bench/patches/fp16-softcap-poly.patch`, build 90a (no C7511), xz into .devbin/cs58, `npm run
# build:ts`, then `YEND=560 ST=300 FZ_SEED=58001 ... c58` (c58s ~250 s, or YEND=200 ... c58s); c58 reruns 1102 / 5164 (expected to
# pass now) and 3808 (page garbage: expected to still fail); if 1102 / 5164 pass, add them to fuzz-regressions.test.ts.
# Fifty-eighth session: cs on an H100 (the patch's first form: 22 / 22 new cases, 11 of the 14 original fuzz calls fixed,
# the forward with softcap 30 9-18% faster). NEXT: `git apply bench/patches/fp16-softcap-poly.patch` (its third form),
# build 90a (check: no C7511 in the build log), xz the addon into .devbin/cs58, `npm run build:ts`, then `YEND=560
# ST=300 ... c58` (c58s if short), carry [".gpu", "dist", ".devbin/fix56", ".devbin/cs58"]; land it if its cases pass,
# the suite is green and the A/B without softcap is neutral (NOTES-fwd.md, fifty-eighth session, for what is open).
# Fifty-seventh session: gf on an H100 (the GPU suite on fix56: 1453 + 27 passed; the fuzz with softcaps up to 1e4, seed
# 57002: 17 fp16 / bf16 lse failures, the softcap's tanh). NEXT: `git apply bench/patches/fp16-softcap-poly.patch`, build
# 90a, xz the addon into .devbin/cs57, then `YEND=560 ST=190 ... cs` (cl if the call must be short); land the patch if
# its cases pass and the A/B is neutral; then auto as below.
# Fifty-sixth session: `auto` with AUTO_OTHER=fz on an H100 (the API fuzzed on the GPU: two fp32 failures, a negative
# scale under a softcap), then sx (the fix, b5afb2b: the new cases fail on .devbin/nan and pass on .devbin/fix56 =
# b5afb2b's 90a build, whose fp16 / bf16 kernels are nan's). NEXT: `HB=fix56 YEND=380 ST=300 AUTO_H200=pt AUTO_OTHER=gt
# ... auto` (issue 11's benches on the H200, else the GPU suite on the fix; ST 250 left fresh-inference unfinished), then `HB=fix56 YEND=500 ... hp` on the H200.
# Fifty-fifth session: `auto` ran twice on an H100: vf (nan-rows with its backward, also FA_NO_WGMMA=1; inference.test.ts;
# 259436b's scripts; decode) and pt (issue 11's benches on the H100). NEXT: on the H200 when it is lent,
# `HB=nan YEND=380 AUTO_H200=pt AUTO_OTHER=none ... auto`, then `HB=nan YEND=500 ... hp` (.devbin/nan = HEAD's kernels).
# NEXT (after the fifty-fourth session): on the H200 when it is lent, `HB=nan YEND=330 ... pt` and `HB=nan YEND=500 ... hp`
# (.devbin/nan = this tree's 90a build: e6e12aa's fp16 / bf16 kernels but for the epilogue's l != 0 test, which read
# 0.991-1.017 against them; issue 12's and 11's figures are read there; the GPU suite passed on it, case nr). The fifty-fourth session ran c3 (W 128 with three consumers: slower, fwd-w128-c3.patch) and fq (the
# polynomial softcap with the branch around whole loops: faster, now the default), then gt on the landed build (e0f0e24:
# 1416 + 27 passed).
# (fifty-third session's plan:) on the H200, pt and hp on e6e12aa's build (.devbin/m53); fq for the polynomial softcap
# (done in the fifty-fourth).
# (fifty-second session's plan, done in the fifty-third:) the GPU suite and the fuzz (`npm run fuzz`, a few seeds, one under
# compute-sanitizer memcheck) on a build of HEAD (.devbin/fix = d1ff71f's 90a build: the fp32 softcap's precise tanh; the
# whole suite has not run on it, only the softcap cases, fresh.test.ts and the fuzz); the fp32 + softcap speed against
# the old tanh (.devbin/head = cee3ccd's build); then, on the H200 when it is lent, pt and hp as below.
# (fifty-first session's plan:) on the H200 when it is lent, `HB=ab YEND=330 ... pt` and `HB=ab YEND=500 ... hp`
# (issue 11's and 12's figures are read there; no kernel has changed since 8c9bfdf, whose H200 figures stand). The
# fifty-first session ran gt (1406 + 27 passed) and pt on an H100 at HEAD, and three A/B cases that are now patches:
# ov (fwd-pv-overlap.patch, 0.94-0.98x), st (fwd-softmax-turn.patch, neutral), zc (index-direct.patch, no gain);
# ix (the index-array files alone). .devbin/ab = 2a66b44's 90a build (its native code is HEAD's).
#
# (fiftieth session's plan:) `HB=ab ST=300 bash bench/patches/device-calls.sh gt` with .devbin/ab/addon.xz = 2a66b44's
# 90a build (the GPU suite on the review follow-up of the host-cost change; dfda9be's passed, 1406 + 27), carry
# [".gpu", "dist", ".devbin/ab"]; then `pt` and `hp` on the H200 when it is lent (HB=ab). `scripts/host-prof.js`
# (FA_DIST / FA_ADDON_PATH for an older build in turns) reads the per-call host cost.
#
# (forty-ninth session's plan:) `HB=new4 ST=300 bash bench/patches/device-calls.sh gt` (the GPU suite on cef3f2c's
# TypeScript and binding: inputs read once, frozen tensors, the storage accessor moved; .devbin/new4 = cef3f2c's 90a
# build, all head dims; carry [".gpu", "dist", ".devbin/new4"]), then `HB=new4 YEND=330 ... pt` (page 1 against page 16
# in turns, issue 11's benches), then `HB=new4 YEND=500 ... hp` on the H200 (the forty-eighth session's hp ran on an
# H100). Rebuild .devbin/new4 where a checkout lacks it: `FA_CUDA_ARCHS=90a npm run build:native`, strip + xz -9
# build/Release/flash_attention_node.node into .devbin/new4/addon.xz.
#
# Forty-eighth session: hp ran on an H100 (forward 36 / 72, backward 42 / 72, deterministic 1.01-1.23x; RESULTS.md);
# every later request for a machine was refused (gt and pt prepared, not run).
#
# Forty-seventh session (all on the H200; RESULTS.md): tb (D 64 / 256 backward turns: 38 / 48 >= cuDNN; with g's D 128,
# 59 / 72), rp (the forward's predicated release: neutral, 0.989-1.012; its patch is gone: git show c23c17d:bench/patches/fwd-release-pred.patch),
# the deterministic backward by hand (bench CLI --deterministic: 1.01-1.26x) and issue 11's benches by hand (--decode
# --varlen --compare torch). Ten requests got no machine first (90-180 s of device time each).
#
# (forty-sixth session's plan:) GB=new3 ST=400 g (.devbin/new3 = 4ecc611's 90a build: the binding's teardown guards,
# -z nodelete; test/cuda/workers.test.ts has never run), rp (prepared: the forward's
# releases as one predicated arrival), then the grid on the H200 when it is lent (HB=arr hp or HB=new3 hp: the D 64
# backward's +3-5% of 8c9bfdf is read on an H100 only).
#
# Forty-fifth session: g (GPU suite + sanitizers on 710d739's build, D 128 backward turns), rs (the row split's
# racecheck hazards: the same with bwd-rowsplit-empty.patch, so not the writer's hop; the deterministic grid),
# rc (hazard detail: lanes other than 0 read, lane 0 arrives; the key split flagged too; every thread arriving
# is clean), ar / ar2 (every consumer thread arrives on the empty barrier, the default now: racecheck clean,
# tests, A/B D 64 +3-5%, D 64 turns). The two patches are gone (the first did not help, the second is the source).
#
# Forty-fourth session: hi (H200: GPU suite + sanitizers, issue 11's benches) and hp (H200: the grid) ran; then, on an
# H100, the index-array tests and the rotated deterministic walk (79689f9) by hand (RESULTS.md). NEXT: g with ST=400 and
# .devbin/new2 = HEAD's 90a build (the GPU suite on HEAD; 330 s was too short on the H200 for fresh-inference.test.ts),
# then rs (the row split's racecheck finding, the deterministic grid).
#
# Forty-third session (all on an H100): d (the direct dQ reduction: 0.92-0.99x, not pursued), f (FA_BWD_WS_DQ_FIRST:
# 1.01-1.03x at D 128, now the default; its row-split form 0.99x, taken out), g (GPU suite + sanitizers on 01fa2e8),
# hp (the grid: bwd 44 / 72), w6 (the same at W 64: 0.994-1.001x; its patch is gone, see ab14e56), cp (the cp.async
# kernel's key split in the same order: 1.03-1.07x, tests and sanitizers clean, now the default; its patch is gone,
# see e31cef8). NEXT: hp on the H200 when it is lent, with .devbin/new = this tree's 90a build (issue 12 is read
# there); and the GPU suite with the sanitizers on that build (the cp.async change ran its backward tests only).
#
# Forty-second session: s and hp ran on an H100 (about ten other requests got no machine): the cp.async backward's
# staged epilogue (d2fd180) A/B'd and tested, the fwd + bwd turns grid, ncu at D 128 N 16k, the deterministic
# backward (RESULTS.md, forty-second section); then p (the dQ-path probes: staging the dQ image is ~20% of the
# D 128 backward's cycles) and the block timelines. NEXT: d (dQ added by the consumers straight from the
# accumulators, .devbin/direct = bwd-dq-probe-direct.patch at D 128; rebuild it with `bash scripts/ab-builds.sh
# direct=patch:bench/patches/bwd-dq-probe-direct.patch,FA_HEAD_DIMS=128` and .devbin/nostage likewise where a checkout
# lacks them), then hp on the H200 when it is lent (issue 12 is read there; `.devbin/new` = d2fd180's 90a build).
#
# Forty-first session: w, v and q ran (all on an H100): the staged epilogue is the default now (31774c0), the
# dQ-tail patch does not pay. NEXT, on the H200 when it is lent (issue 12 is read there):
#   Here first (.devbin/ is ignored by git; skip what a checkout already holds): `bash scripts/ab-builds.sh
#   htrace=FA_TRACE` (~7 min); .devbin/new holds every head dim (the GPU suite needs them): `FA_CUDA_ARCHS=90a npm
#   run build:native`, then strip + xz -9 build/Release/flash_attention_node.node into .devbin/new/addon.xz (as
#   ab-builds.sh does); then
#   `npm run build:ts && bash ../shared/gpu/pack.sh .gpu`. A call returns at most 8 files (so each case tars its
#   logs); a call after the machine's 30 s idle release pays a fresh start, ~100 s with the transfers.
#   hp (the forty-second session's form of the planned call h, which it replaces): carry [".gpu", "dist",
#     ".devbin/new"], command `YEND=500 bash bench/patches/device-calls.sh hp`: the whole fwd + bwd grid against
#     cuDNN in turns (the H200 figures of issue 12 for the new build), ncu at D 128 N 16k, then the deterministic
#     backward against the default.
#   t (after hp, ~3 min): carry [".gpu", "dist", ".devbin/new", ".devbin/htrace"]: the new kernels' backward block
#     timelines (fill / walk / epilogue / writer tail / gap per tile), to see what is left of the per-tile cost.
#   c (optional, ~3 min, carry [".gpu", "dist", ".devbin/base"]): the mma.sync (sm80) path's forward and backward
#     against torch flash with fresh gradients (FA_NO_WGMMA=1): the closed FA2 issue's margins were read while
#     torch's backward still paid the gradient accumulation (thirty-seventh session).
set -u
OUT=${OUT:-out}; mkdir -p "$OUT"
source .gpu/env.sh
t0=$(date +%s); el() { echo $(( $(date +%s) - t0 )); }
log() { echo "$* ($(el) s)" | tee -a "$OUT/calls.log"; }
need() { [ -f "$1" ] || { log "missing $1"; exit 2; }; }
# the build .devbin/$1 as this tree's addon (gpu-run.sh's side a)
use_addon() { need ".devbin/$1/addon.xz"; xz -dc ".devbin/$1/addon.xz" > build/Release/flash_attention_node.node; }
# the backward against cuDNN in turns over the grid's cells (fp16 / bf16, full / causal, N 512..16k) at the head
# dims $2 ("64 128"), logs in $OUT/$1, until YEND (default $3 s into the call); then the row count in calls.log
bwd_turns() {
  local cells="" d dt c N
  for d in $2; do for dt in float16 bfloat16; do for c in 0 1; do for N in 512 1024 2048 4096 8192 16384; do
    cells="$cells $dt:$d:$N:$c"; done; done; done; done
  TURNS_CELLS="$cells" TURNS_DIRS=bwd TURNS_ROUNDS=5 TURNS_TIMEOUT=$(( ${YEND:-$3} - 10 - $(el) )) OUT=$OUT/$1 \
    bash scripts/gpu-run.sh turns > "$OUT/$1/turns-step.log" 2>&1
  log "turns rc=$? $(grep -c 'ours / cuDNN' "$OUT/$1/turns.log") rows"
}
# the softcap's cost (scripts/softcap-cost.js; SOFTCAP_DTYPE / SOFTCAP_CAPS pass through) on the build .devbin/$2 and on this tree's addon ($HB), two passes
# of each when $3 = 2, into $OUT/$1/softcap.log
softcap_ab() {
  local pass
  xz -dc ".devbin/$2/addon.xz" > "$OUT/prev.node"
  for pass in $(seq 1 "${3:-1}"); do
    FA_ADDON_PATH="$OUT/prev.node" timeout 100 node scripts/softcap-cost.js 2>&1 | sed "s/^/$2 $pass: /" >> "$OUT/$1/softcap.log"
    timeout 100 node scripts/softcap-cost.js 2>&1 | sed "s/^/$HB $pass: /" >> "$OUT/$1/softcap.log"
  done
  rm -f "$OUT/prev.node"; log "softcap cost done"
}
# a vitest run's totals in calls.log: log_tests <its exit status> <its log>
log_tests() { log "tests rc=$1 $(grep -aE 'Test Files|Tests ' "$2" | tr -d '\033' | tr '\n' ' ')"; }
# the public API fuzzed (scripts/fuzz-api.mjs) into the log $1 with seed $2 for $3 s, and its kinds without a failure in
# calls.log
fuzz_timed() {
  FUZZ_SEED=$2 FUZZ_SECONDS=$3 timeout $(( $3 + 90 )) node scripts/fuzz-api.mjs > "$1" 2>&1
  log "fuzz $2 rc=$? $(grep -c ' failed    0 ' "$1") kinds without a failure"
}
# the fifty-seventh session's large-softcap cases (bench/patches/fp16-softcap-poly.patch's tests) on .devbin/fix56, then on
# .devbin/cs57 (which stays loaded), each run within $2 s, logs in $OUT/$1
softcap_new_cases() {
  local v
  for v in fix56 cs57; do
    use_addon $v
    FA_REQUIRE_GPU=1 timeout $2 npx vitest run test/cuda/forward.test.ts test/cuda/backward.test.ts test/cuda/inference.test.ts \
      -t 'softcap=(30000|12000|3000|5000|4) ' > "$OUT/$1/new-cases-$v.log" 2>&1
    log_tests $? "$OUT/$1/new-cases-$v.log"
  done
}
# the fifty-eighth session's checks of the softcap patch on this tree's addon ($HB), logs in $OUT/$1.
# patch58_cases <dir> <s>: its new cases and fuzz-regressions.test.ts within <s> s (new-cases.log).
# patch58_memcheck <dir> "<cases>" [<s>]: memcheck on those seed-57002 fuzz calls while <s> s (default 90) are left to YEND.
patch58_cases() {
  FA_REQUIRE_GPU=1 timeout $2 npx vitest run test/cuda/forward.test.ts test/cuda/backward.test.ts test/cuda/inference.test.ts \
    test/cuda/fuzz-regressions.test.ts -t 'softcap=(30000|12000|3000|5000|4) |once failed|seed 57002' > "$OUT/$1/new-cases.log" 2>&1
  log_tests $? "$OUT/$1/new-cases.log"
}
patch58_memcheck() {
  local n
  for n in $2; do
    [ $(( ${YEND:-560} - $(el) )) -lt ${3:-90} ] && break
    FUZZ_SEED=57002 FUZZ_CASE=$n timeout $(( ${YEND:-560} - 10 - $(el) )) compute-sanitizer --tool memcheck --error-exitcode 9 \
      node scripts/fuzz-api.mjs > "$OUT/$1/memcheck-$n.log" 2>&1
    log "memcheck case $n rc=$? $(grep -a 'ERROR SUMMARY' "$OUT/$1/memcheck-$n.log" | tail -1)"
  done
}
# the seventeen failures of the fuzz's seed 57002 rerun on this tree's addon, into $OUT/$1/fuzz-reruns.log
softcap_reruns() {
  local n
  local cases=${2:-549 612 1102 1231 1999 2868 3079 3139 3674 3808 4182 4240 4244 4789 4871 5107 5164}
  for n in $cases; do
    FUZZ_SEED=57002 FUZZ_CASE=$n timeout 60 node scripts/fuzz-api.mjs >> "$OUT/$1/fuzz-reruns.log" 2>&1
    echo "case $n rc=$?" >> "$OUT/$1/fuzz-reruns.log"
  done
  log "fuzz reruns: $(grep -c ' rc=0' "$OUT/$1/fuzz-reruns.log") of $(echo $cases | wc -w) passed: $(grep -a '^case' "$OUT/$1/fuzz-reruns.log" | tr '\n' ' ')"
}
# the GPU suite (gpu-run.sh tests) into $OUT/$1, within $2 s for its parallel files, and its totals in calls.log
gpu_suite() {
  TEST_TIMEOUT=$2 OUT=$OUT/$1 bash scripts/gpu-run.sh tests > "$OUT/$1/tests-step.log" 2>&1
  log_tests $? "$OUT/$1/gpu-tests.log"
}
# issue 11's benches into $OUT/$1 until $2 s into the call: page 1 against page 16 in decode, in turns
# (scripts/decode-page-turns.js: B 1 / 16 / 64 x 16k, two passes), then decode, varlen, paged prefill and the serving
# loop next to torch
inference_benches() {
  local pass
  for pass in 1 2; do
    timeout 90 node scripts/decode-page-turns.js 2>&1 | sed "s/^/pass $pass: /" | tee -a "$OUT/$1/page-turns.log"
  done
  log "page turns done"
  timeout $(( $2 - 10 - $(el) )) node dist/bench/cli.js --grid off --decode --varlen --serve --serve-seqs 1,64 --compare torch \
    --out "$OUT/$1/inf" > "$OUT/$1/inference-bench.log" 2>&1
  log "inference benches rc=$?"
}
# $OUT/$1 and calls.log as one file, $1.tar.xz (a call returns at most 8 files)
pack_case() { cp "$OUT/calls.log" "$OUT/$1/"; tar -C "$OUT" -cJf "$OUT/$1.tar.xz" "$1" && rm -rf "$OUT/$1"; }
mkdir -p build/Release
case "${1:-w}" in
  w)
    # the two shared-memory dK / dV epilogues (never run yet) against HEAD in turns: .devbin/staged
    # (FA_BWD_WS_STAGED_DKDV: 16-byte stores by the consumers) and .devbin/tmadkdv (FA_BWD_WS_TMA_DKDV:
    # tensor-map stores by one thread), then the backward test files on each; logs in one tar
    need .devbin/base/addon.xz; need .devbin/staged/addon.xz; need .devbin/tmadkdv/addon.xz
    use_addon base
    mkdir -p "$OUT/w"
    AB_DIR=bwd AB_TAG=epi-ab AB_ROUNDS=2 AB_TORCH=0 AB_TIMEOUT=40 AB_ARGS="--hdim 64,128 --seqlen 512,1024,4096" \
      AB_ADDON=".devbin/staged/addon.xz .devbin/tmadkdv/addon.xz" OUT=$OUT/w timeout $(( ${YEND:-500} / 3 )) \
      bash scripts/gpu-run.sh fwd-ab > "$OUT/w/ab-step.log" 2>&1
    log "epilogue ab rc=$?"
    for v in tmadkdv staged; do
      use_addon $v
      share=1; [ $v = tmadkdv ] && share=2  # half of what is left for the first build's tests
      FA_REQUIRE_GPU=1 timeout $(( (${YEND:-500} - 15 - $(el)) / share )) npx vitest run \
        test/cuda/backward.test.ts test/cuda/bwd-walks.test.ts > "$OUT/w/tests-$v.log" 2>&1
      log "$v tests rc=$? $(grep -aE 'Tests ' "$OUT/w/tests-$v.log" | tail -1)"
    done
    pack_case w ;;
  v)
    # forty-first session: the staged epilogue as the default (key split and, new, the row split at
    # D 256): .devbin/new (this tree's 90a build, all head dims) through the GPU suite with the
    # sanitizers, then A/B against .devbin/base (40073fa's kernels) at D 128 / 256, then the
    # backward grid against cuDNN in turns with what time is left; logs in one tar
    need .devbin/new/addon.xz; need .devbin/base/addon.xz
    use_addon new
    mkdir -p "$OUT/v"
    TEST_TIMEOUT=300 OUT=$OUT/v bash scripts/gpu-run.sh tests-san > "$OUT/v/tests-san-step.log" 2>&1
    log "tests-san rc=$? $(grep -aE 'Test Files|Tests ' "$OUT/v/gpu-tests.log" | tr -d '\033' | tr '\n' ' ')"
    AB_DIR=bwd AB_TAG=v-ab AB_ROUNDS=2 AB_TORCH=0 AB_TIMEOUT=50 AB_ARGS="--hdim 256,128 --seqlen 512,1024,4096" \
      AB_ADDON=".devbin/base/addon.xz" OUT=$OUT/v timeout 130 bash scripts/gpu-run.sh fwd-ab > "$OUT/v/ab-step.log" 2>&1
    log "ab rc=$?"
    cells=""; for dt in float16 bfloat16; do for D in 128 256 64; do for c in 0 1; do for N in 512 1024 2048 4096 8192 16384; do
      cells="$cells $dt:$D:$N:$c"; done; done; done; done
    TURNS_CELLS="$cells" TURNS_DIRS=bwd TURNS_ROUNDS=5 TURNS_TIMEOUT=$(( ${YEND:-540} - 10 - $(el) )) OUT=$OUT/v \
      bash scripts/gpu-run.sh turns > "$OUT/v/turns-step.log" 2>&1
    log "turns rc=$? $(grep -c 'ours / cuDNN' "$OUT/v/turns.log") cells"
    pack_case v ;;
  q)
    # forty-first session, second call: the dQ writer's last wait (bwd-dq-tail.patch, .devbin/dqtail) against
    # the new default (.devbin/new) in turns, the backward test files on it, the GPU test file that the
    # first call's 300 s did not reach (fresh-inference), and the turns grid's last 8 cells
    need .devbin/new/addon.xz; need .devbin/dqtail/addon.xz
    use_addon new
    mkdir -p "$OUT/q"
    AB_DIR=bwd AB_TAG=q-ab AB_ROUNDS=2 AB_TORCH=0 AB_TIMEOUT=40 AB_ARGS="--hdim 64,128,256 --seqlen 512,1024,4096" \
      AB_ADDON=".devbin/dqtail/addon.xz" OUT=$OUT/q timeout 100 bash scripts/gpu-run.sh fwd-ab > "$OUT/q/ab-step.log" 2>&1
    log "dq-tail ab rc=$?"
    FA_REQUIRE_GPU=1 timeout 140 npx vitest run test/cuda/fresh-inference.test.ts > "$OUT/q/tests-fresh-inference.log" 2>&1
    log "fresh-inference (new) rc=$? $(grep -aE 'Tests ' "$OUT/q/tests-fresh-inference.log" | tail -1)"
    cells="bfloat16:64:8192:0 bfloat16:64:16384:0"; for N in 512 1024 2048 4096 8192 16384; do cells="$cells bfloat16:64:$N:1"; done
    TURNS_CELLS="$cells" TURNS_DIRS=bwd TURNS_ROUNDS=5 TURNS_TIMEOUT=70 OUT=$OUT/q bash scripts/gpu-run.sh turns > "$OUT/q/turns-step.log" 2>&1
    log "turns rc=$? $(grep -c 'ours / cuDNN' "$OUT/q/turns.log") cells"
    use_addon dqtail
    FA_REQUIRE_GPU=1 timeout $(( ${YEND:-420} - 10 - $(el) )) npx vitest run test/cuda/backward.test.ts test/cuda/bwd-walks.test.ts \
      > "$OUT/q/tests-dqtail.log" 2>&1
    log "dqtail tests rc=$? $(grep -aE 'Tests ' "$OUT/q/tests-dqtail.log" | tail -1)"
    pack_case q ;;
  gr)
    # forty-eighth session, with little device time left: the GPU test files that exercise what cef3f2c changed (the
    # Tensor API, stream order, workers, index arrays, faults, small random shapes), then tensor / stream alone
    HB=${HB:-new4}; use_addon $HB
    mkdir -p "$OUT/gr"
    FA_REQUIRE_GPU=1 timeout ${ST:-200} npx vitest run test/cuda/workers.test.ts test/cuda/fault.test.ts \
      test/cuda/concurrency.test.ts test/cuda/index-arrays.test.ts test/cuda/index-staged.test.ts test/cuda/index-stream.test.ts \
      test/cuda/fresh.test.ts test/cuda/fresh-varlen.test.ts test/cuda/forward.test.ts > "$OUT/gr/gpu-tests.log" 2>&1
    log "files rc=$? $(grep -aE 'Test Files|Tests ' "$OUT/gr/gpu-tests.log" | tr -d '\033' | tr '\n' ' ')"
    FA_REQUIRE_GPU=1 timeout ${HEAVY_TIMEOUT:-150} npx vitest run test/cuda/tensor.test.ts test/cuda/stream.test.ts \
      --no-file-parallelism > "$OUT/gr/gpu-tests-heavy.log" 2>&1
    log "tensor / stream rc=$? $(grep -aE 'Test Files|Tests ' "$OUT/gr/gpu-tests-heavy.log" | tr -d '\033' | tr '\n' ' ')"
    pack_case gr ;;
  ix)
    # fifty-first session: the index-array test files (the new decode-step chain among them) on HEAD's binding
    HB=${HB:-ab}; use_addon $HB
    mkdir -p "$OUT/ix"
    FA_REQUIRE_GPU=1 timeout ${ZT:-200} npx vitest run test/cuda/index-stream.test.ts test/cuda/index-staged.test.ts > "$OUT/ix/tests.log" 2>&1
    log_tests $? "$OUT/ix/tests.log"
    pack_case ix ;;
  zc)
    # (measured and dropped: bench/patches/index-direct.patch; NOTES-inference.md, fifty-first session)
    # fifty-first session: small host index arrays of decode steps and appendKV read in place by the kernels
    # (csrc/binding: IndexDirect; .devbin/zc = this tree's 90a build, all head dims): the index-array and
    # inference test files, memcheck on scripts/direct-index-smoke.js, then the serving loop of one sequence
    # with FA_INDEX_DIRECT=0 / 1 in turns (its second line: Int32Array index arrays on every call)
    need .devbin/zc/addon.xz
    use_addon zc
    mkdir -p "$OUT/zc"
    FA_REQUIRE_GPU=1 timeout ${ZT:-200} npx vitest run test/cuda/index-stream.test.ts test/cuda/index-staged.test.ts test/cuda/inference.test.ts \
      > "$OUT/zc/tests.log" 2>&1
    log_tests $? "$OUT/zc/tests.log"
    timeout 120 compute-sanitizer --tool memcheck --error-exitcode 9 node scripts/direct-index-smoke.js 6 > "$OUT/zc/memcheck.log" 2>&1
    log "memcheck rc=$? $(grep -E 'ok=|ERROR SUMMARY' "$OUT/zc/memcheck.log" | tr '\n' ' ')"
    timeout 60 node scripts/direct-index-smoke.js 40 > "$OUT/zc/smoke.log" 2>&1
    log "smoke rc=$? $(grep -E 'ok=' "$OUT/zc/smoke.log")"
    for r in 1 2 3; do for d in 1 0; do
      FA_INDEX_DIRECT=$d timeout 100 node dist/bench/cli.js --grid off --serve --serve-seqs ${SQ:-1} --out /tmp/zc-$d-$r > /tmp/zc-$d-$r.log 2>&1
      grep -E "per layer-step" /tmp/zc-$d-$r.log | sed "s/^/direct=$d round $r: /" >> "$OUT/zc/serve.log"
    done; done
    log "serve turns done"
    pack_case zc ;;
  st)
    # fifty-first session: the ping-pong turn around the softmax (FA_WS_SOFTMAX_TURN, fwd-softmax-turn.patch;
    # .devbin/st = its 90a build, D 128 only) against HEAD's kernels (.devbin/ab) in turns, after the SASS of the
    # step (.devbin/sass/st.cubin, built here)
    need .devbin/st/addon.xz; need .devbin/ab/addon.xz
    mkdir -p "$OUT/st"
    for c in ${SASS:-base st}; do
      python3 .devbin/sass/summ.py .devbin/sass/$c.cubin 'Li128ELi2ELi128EEELb0ELb0ELb0E' > "$OUT/st/sass-$c.txt" 2>&1
    done
    use_addon ab
    AB_DIR=fwd AB_TAG=st-ab AB_ROUNDS=${AR:-3} AB_TORCH=0 AB_TIMEOUT=60 AB_ARGS="--dtype fp16,bf16 --hdim 128 --seqlen 512,1024,2048,4096,8192,16384" \
      AB_ADDON=".devbin/st/addon.xz" OUT=$OUT/st timeout ${AT:-220} bash scripts/gpu-run.sh fwd-ab > "$OUT/st/ab-step.log" 2>&1
    log "st ab rc=$?"
    pack_case st ;;
  ov)
    # fifty-first session: the D 128 two-consumer forward's softmax beside its own P V (FA_WS_PV_OVERLAP,
    # fwd-pv-overlap.patch; .devbin/ov = its 90a build (D 128 only for the A/B, all head dims for ST); the first
    # call's .devbin/ovn (no pin) had ptxas hoist the wait as before, and its per-thread pin serialized the wgmmas). First the SASS of the step as built here (.devbin/sass: where ptxas put the P V wait), then
    # the forward A/B in turns against HEAD's kernels (.devbin/ab), then the GPU suite on ov (ST seconds)
    need .devbin/ov/addon.xz; need .devbin/ab/addon.xz
    mkdir -p "$OUT/ov"
    for c in ${SASS:-base ov3}; do
      python3 .devbin/sass/summ.py .devbin/sass/$c.cubin 'Li128ELi2ELi128EEELb0ELb0ELb0E' > "$OUT/ov/sass-$c.txt" 2>&1
    done
    log "sass $(wc -c "$OUT"/ov/sass-*.txt | tail -1)"
    use_addon ab
    sides=".devbin/ov/addon.xz"; [ -f .devbin/ovn/addon.xz ] && sides="$sides .devbin/ovn/addon.xz"
    AB_DIR=fwd AB_TAG=ov-ab AB_ROUNDS=${AR:-2} AB_TORCH=0 AB_TIMEOUT=60 AB_ARGS="--dtype fp16,bf16 --hdim 128 --seqlen 512,1024,2048,4096,8192,16384" \
      AB_ADDON="$sides" OUT=$OUT/ov timeout ${AT:-220} bash scripts/gpu-run.sh fwd-ab > "$OUT/ov/ab-step.log" 2>&1
    log "ov ab rc=$?"
    if [ "${ST:-0}" != 0 ]; then
      use_addon ov
      gpu_suite ov $ST
    fi
    pack_case ov ;;
  nr)
    # fifty-fourth session: a NaN score's row gets lse NaN (not the +inf of "no key") in every forward epilogue, and the
    # split-KV decode's combine keeps a NaN partial (it dropped it): the GPU suite with test/cuda/nan-rows.test.ts on
    # this build (HB=nan), then the forward against e6e12aa's kernels + the polynomial softcap (m54) in turns, one round
    HB=${HB:-nan}; use_addon $HB
    mkdir -p "$OUT/nr"
    gpu_suite nr ${ST:-280}
    AB_ADDON=".devbin/m54/addon.xz" AB_DIR=fwd AB_TAG=nr-ab AB_ROUNDS=${AR:-1} AB_TIMEOUT=100 AB_TORCH=0 \
      AB_ARGS="--dtype fp16 --hdim 64,128,256 --seqlen 1024,4096" OUT=$OUT/nr timeout ${ABT:-150} bash scripts/gpu-run.sh fwd-ab \
      > "$OUT/nr/ab-step.log" 2>&1
    log "nr a/b rc=$?"
    pack_case nr ;;
  c3)
    # fifty-fourth session: W 128 dense with three consumer warpgroups (192-row tiles; key tiles of 64 or 80 at the
    # 160-register consumer budget; FA_WS_W128_C3, .devbin/c3) against the default in turns, fp16 / bf16 D 128; then the
    # forward test file under each (the kernels' first run). Ran on an H100: correct (395 / 395 each), slower everywhere
    # (64 keys 0.90-0.97x, 80 keys 0.88-1.00x; NOTES-fwd.md); the build is bench/patches/fwd-w128-c3.patch applied. Its
    # memcheck step ran no kernel (the bench's batch for N 1000 was 16.384, fixed since in bench/cli.ts).
    HB=${HB:-c3}; use_addon $HB
    mkdir -p "$OUT/c3"
    AB_ADDON="env:FA_WS_W128_C3=64 env:FA_WS_W128_C3=80" AB_DIR=fwd AB_TAG=c3-ab AB_ROUNDS=${AR:-2} AB_TIMEOUT=100 \
      AB_ARGS="--dtype fp16,bf16 --hdim 128 --seqlen 512,1024,2048,4096,8192,16384" OUT=$OUT/c3 \
      timeout ${ABT:-300} bash scripts/gpu-run.sh fwd-ab > "$OUT/c3/ab-step.log" 2>&1
    log "c3 a/b rc=$?"
    for bn in 64 80; do
      FA_WS_W128_C3=$bn FA_REQUIRE_GPU=1 timeout ${ST:-70} npx vitest run test/cuda/forward.test.ts > "$OUT/c3/tests-$bn.log" 2>&1
      log_tests $? "$OUT/c3/tests-$bn.log"
    done
    FA_WS_W128_C3=64 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 node dist/bench/cli.js --dir fwd \
      --dtype fp16 --hdim 128 --seqlen 1000 --causal both --api-ms 1 --reps 1 --out /tmp/c3san > "$OUT/c3/memcheck.log" 2>&1
    log "memcheck rc=$? $(grep -a 'ERROR SUMMARY' "$OUT/c3/memcheck.log" | tail -1)"
    pack_case c3 ;;
  fq)
    # fifty-third session's plan, run in the fifty-fourth (H100; now the default, 54th-session commit): the polynomial
    # softcap with the branch around whole loops (then bench/patches/fwd-softcap-poly2.patch; HB=poly2 = its build): the
    # softcap cost against e6e12aa's (m53), the fp32 cases of three GPU files, the fuzz of the dense forward
    # under memcheck. (Case fp ran the per-score-select form, fwd-softcap-poly.patch, with the whole suite: git show
    # 0bd64b3:bench/patches/device-calls.sh.)
    HB=${HB:-poly2}; use_addon $HB
    mkdir -p "$OUT/fq"
    softcap_ab fq m53
    FA_REQUIRE_GPU=1 timeout ${ST:-60} npx vitest run test/cuda/forward.test.ts test/cuda/inference.test.ts test/cuda/fresh.test.ts -t "float32|fp32" > "$OUT/fq/gpu-tests.log" 2>&1
    log_tests $? "$OUT/fq/gpu-tests.log"
    FUZZ_ONLY=flashAttention FUZZ_SEED=53004 FUZZ_SECONDS=${FZ:-25} timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 \
      node scripts/fuzz-api.mjs > "$OUT/fq/fuzz.log" 2>&1
    log "fuzz memcheck rc=$? $(grep -aE 'fuzz-api summary|ERROR SUMMARY' "$OUT/fq/fuzz.log" | tr '\n' ' ')"
    pack_case fq ;;
  fx)
    # fifty-third session: the GPU suite on HEAD's build (d1ff71f's kernels), the fuzz under compute-sanitizer memcheck
    # and plainly, then the fp32 softcap's cost on the old build (.devbin/head) and the new one (HB)
    HB=${HB:-fix}; use_addon $HB
    mkdir -p "$OUT/fx"
    gpu_suite fx ${ST:-300}
    FUZZ_SEED=53001 FUZZ_SECONDS=${FZM:-90} timeout 400 compute-sanitizer --tool memcheck --error-exitcode 9 \
      node scripts/fuzz-api.mjs > "$OUT/fx/fuzz-memcheck.log" 2>&1
    log "fuzz memcheck rc=$? $(grep -aE 'fuzz-api summary|ERROR SUMMARY' "$OUT/fx/fuzz-memcheck.log" | tail -3 | tr '\n' ' ')"
    FUZZ_SEED=53002 FUZZ_SECONDS=${FZ:-40} timeout 200 node scripts/fuzz-api.mjs > "$OUT/fx/fuzz.log" 2>&1
    log "fuzz rc=$? $(grep -aE 'fuzz-api summary' "$OUT/fx/fuzz.log" | tr '\n' ' ')"
    softcap_ab fx head 2
    timeout $(( ${YEND:-575} - $(el) )) node dist/bench/cli.js --quick --fp32 --hdim 128 --dir fwd,bwd --compare torch \
      --out "$OUT/fx/bench" > "$OUT/fx/bench.log" 2>&1
    log "bench rc=$?"
    pack_case fx ;;
  vf)
    # fifty-fifth session: what the fifty-fourth left unrun on a GPU, on the build HB (.devbin/nan, HEAD's kernels): the
    # nan-rows file with its new backward cases (default kernels, then FA_NO_WGMMA=1: the mma.sync epilogue's l != 0),
    # inference.test.ts (shuffledPageTable moved), smokes of 259436b's scripts (softcap-cost.js, turns-probe.js through
    # gpu-run.sh turns, one cell) and the decode benches after the combine's NaN vote
    HB=${HB:-nan}; use_addon $HB
    mkdir -p "$OUT/vf"
    FA_REQUIRE_GPU=1 timeout 120 npx vitest run test/cuda/nan-rows.test.ts > "$OUT/vf/nan-rows.log" 2>&1
    log_tests $? "$OUT/vf/nan-rows.log"
    FA_NO_WGMMA=1 FA_REQUIRE_GPU=1 timeout 120 npx vitest run test/cuda/nan-rows.test.ts > "$OUT/vf/nan-rows-mma.log" 2>&1
    log_tests $? "$OUT/vf/nan-rows-mma.log"
    timeout 60 node scripts/softcap-cost.js > "$OUT/vf/softcap.log" 2>&1
    log "softcap-cost rc=$? $(wc -l < "$OUT/vf/softcap.log") lines"
    TURNS_CELLS="float16:128:2048:1" TURNS_DIRS=fwd TURNS_ROUNDS=1 TURNS_TIMEOUT=60 OUT=$OUT/vf bash scripts/gpu-run.sh turns \
      > "$OUT/vf/turns-step.log" 2>&1
    log "turns rc=$? $(grep -c 'ours / cuDNN' "$OUT/vf/turns.log") rows"
    timeout 110 node dist/bench/cli.js --grid off --decode --compare torch --out "$OUT/vf/dec" > "$OUT/vf/decode.log" 2>&1
    log "decode bench rc=$?"
    FA_REQUIRE_GPU=1 timeout $(( ${YEND:-560} - 10 - $(el) )) npx vitest run test/cuda/inference.test.ts > "$OUT/vf/inference.log" 2>&1
    log_tests $? "$OUT/vf/inference.log"
    pack_case vf ;;
  sx)
    # fifty-sixth session: the fp32 softcap's polynomial range test read the signed scale (case fz's fuzz found it). The
    # new negative-scale cases on the old build (.devbin/nan: expected to fail) and on the fix (.devbin/fix56), the fp32
    # cases of the GPU files whose kernels changed, the two fuzz cases that failed, then a fuzz with a new seed
    mkdir -p "$OUT/sx"
    for b in nan fix56; do
      use_addon $b
      FA_REQUIRE_GPU=1 timeout 120 npx vitest run test/cuda/forward.test.ts test/cuda/backward.test.ts -t 'scale=-' \
        > "$OUT/sx/neg-$b.log" 2>&1
      log_tests $? "$OUT/sx/neg-$b.log"
      for fc in "56002 1451 1" "56003 1070 0.3"; do set -- $fc
        FUZZ_SEED=$1 FUZZ_CASE=$2 FUZZ_WORK=$3 timeout 60 node scripts/fuzz-api.mjs >> "$OUT/sx/fuzz-cases-$b.log" 2>&1
        log "$b: fuzz $1 case $2 rc=$?"
      done
    done
    FA_REQUIRE_GPU=1 timeout 200 npx vitest run test/cuda/forward.test.ts test/cuda/backward.test.ts test/cuda/inference.test.ts \
      test/cuda/fresh.test.ts test/cuda/fresh-varlen.test.ts -t float32 > "$OUT/sx/fp32.log" 2>&1
    log_tests $? "$OUT/sx/fp32.log"
    fuzz_timed "$OUT/sx/fuzz.log" ${FZ_SEED:-56004} ${FZ_S:-90}
    pack_case sx ;;
  fz)
    # fifty-sixth session: the public API fuzzed on the GPU with seeds no earlier run used (FZ_SEED, default 56002, for
    # FZ_S seconds), then a smaller fuzz under compute-sanitizer memcheck (seed FZ_SEED + 1), then the nan-rows file
    # under memcheck with --target-processes all named (whether the sanitizer follows vitest's forks: the last
    # session's open question)
    HB=${HB:-nan}; use_addon $HB
    mkdir -p "$OUT/fz"; seed=${FZ_SEED:-56002}
    fuzz_timed "$OUT/fz/fuzz-$seed.log" $seed ${FZ_S:-150}
    FUZZ_SEED=$(( seed + 1 )) FUZZ_SECONDS=${FZ_MS:-80} FUZZ_WORK=0.3 timeout $(( ${FZ_MS:-80} + 120 )) compute-sanitizer \
      --tool memcheck --print-limit 20 node scripts/fuzz-api.mjs > "$OUT/fz/fuzz-$(( seed + 1 ))-memcheck.log" 2>&1
    log "fuzz under memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/fz/fuzz-$(( seed + 1 ))-memcheck.log" | sort | uniq -c | tr '\n' ' ')"
    FA_REQUIRE_GPU=1 timeout 150 compute-sanitizer --tool memcheck --target-processes all --print-limit 20 npx vitest run \
      test/cuda/nan-rows.test.ts > "$OUT/fz/nan-rows-memcheck.log" 2>&1
    log "nan-rows under memcheck rc=$? $(grep 'ERROR SUMMARY' "$OUT/fz/nan-rows-memcheck.log" | sort | uniq -c | tr '\n' ' ')"
    pack_case fz ;;
  cl)
    # fifty-seventh session, the lean form of cs for a short call (the same set-up: the patch applied, .devbin/cs57 and
    # .devbin/fix56): the new large-softcap cases on .devbin/fix56 and on
    # .devbin/cs57 (fail / pass); then on cs57 the seed-57002 fuzz failures rerun beside every softcap case of the GPU
    # test files (-t softcap), the softcap's cost (fp16, softcaps 30 and 4) on both builds, and a new fuzz seed until YEND
    HB=cs57; need .devbin/cs57/addon.xz; need .devbin/fix56/addon.xz
    mkdir -p "$OUT/cl"
    softcap_new_cases cl 100
    softcap_reruns cl &
    FA_REQUIRE_GPU=1 timeout 120 npx vitest run test/cuda -t softcap --exclude test/cuda/tensor.test.ts \
      --exclude test/cuda/stream.test.ts > "$OUT/cl/softcap-cases.log" 2>&1
    log_tests $? "$OUT/cl/softcap-cases.log"
    wait
    export SOFTCAP_DTYPE=float16 SOFTCAP_CAPS=30,4
    softcap_ab cl fix56 1
    left=$(( ${YEND:-300} - 100 - $(el) ))
    if [ $left -gt 20 ]; then fuzz_timed "$OUT/cl/fuzz-57005.log" 57005 $left; else log "no time left for the fuzz"; fi
    pack_case cl ;;
  c58s)
    # fifty-eighth session, the short form of c58 (a call of ~250 s; YEND=200 still runs the first three steps): the new
    # cases and the once-failing fuzz cases, the three reruns, every GPU test with softcap or causal in its name (the
    # fourth form also changed the Hopper forward's trimmed first block), then the softcap's cost on both builds and
    # memcheck on fuzz calls where YEND leaves time
    HB=cs58; need .devbin/cs58/addon.xz; need .devbin/fix56/addon.xz
    use_addon cs58
    mkdir -p "$OUT/c58s"
    patch58_cases c58s $(( ${YEND:-250} >= 240 ? 120 : 100 ))
    softcap_reruns c58s "1102 5164 3808"
    tail_s=$(( ${YEND:-250} >= 240 ? 70 : 15 ))  # what the later steps keep
    FA_REQUIRE_GPU=1 timeout $(( ${YEND:-250} - tail_s - $(el) )) npx vitest run test/cuda --exclude test/cuda/stream.test.ts \
      --exclude test/cuda/tensor.test.ts -t 'softcap|causal' > "$OUT/c58s/softcap-tests.log" 2>&1
    log_tests $? "$OUT/c58s/softcap-tests.log"
    export SOFTCAP_DTYPE=float16 SOFTCAP_CAPS=30,4
    [ $(( ${YEND:-250} - $(el) )) -gt 45 ] && softcap_ab c58s fix56 1
    YEND=${YEND:-250} patch58_memcheck c58s "3808 1102 549" 40
    pack_case c58s ;;
  lz68)
    # sixty-eighth session: the lazy softmax step (FA_WS_LAZY_RESCALE; .devbin/lazy = that tree's 90a build) against
    # main's kernels (.devbin/cs61) in turns through the public API (fp16 / bf16, D 64 / 128 / 256, both masks, N 512-4k and 16k,
    # AB_ROUNDS rounds, until AB_END s), then the forward test files on the lazy build (until YEND), then memcheck on a
    # few of its forward calls
    need .devbin/lazy/addon.xz
    use_addon cs61
    mkdir -p "$OUT/lz68"
    AB_TAG=lz68 AB_ROUNDS=${AB_ROUNDS:-3} AB_TORCH=0 AB_TIMEOUT=90 AB_ARGS="--dtype fp16,bf16 --hdim 64,128,256 --seqlen 512,1024,2048,4096,16384" \
      AB_ADDON=".devbin/lazy/addon.xz" OUT=$OUT/lz68 timeout $(( ${AB_END:-300} - $(el) )) \
      bash scripts/gpu-run.sh fwd-ab > "$OUT/lz68/ab-step.log" 2>&1
    log "lazy ab rc=$?"
    use_addon lazy
    FA_REQUIRE_GPU=1 timeout $(( ${YEND:-540} - 40 - $(el) )) npx vitest run test/cuda/forward.test.ts \
      test/cuda/long-keys.test.ts test/cuda/fresh.test.ts test/cuda/fresh-varlen.test.ts test/cuda/deal-order.test.ts \
      test/cuda/fuzz-regressions.test.ts test/cuda/inference.test.ts test/cuda/fresh-inference.test.ts > "$OUT/lz68/tests.log" 2>&1
    log_tests $? "$OUT/lz68/tests.log"
    FA_REQUIRE_GPU=1 timeout 60 compute-sanitizer --tool memcheck --error-exitcode 9 node scripts/gpu-smoke.js \
      > "$OUT/lz68/memcheck.log" 2>&1
    log "memcheck rc=$? $(grep -a 'ERROR SUMMARY' "$OUT/lz68/memcheck.log" | head -1)"
    pack_case lz68 ;;
  x63)
    # sixty-third session: fuzz-regressions.test.ts on main's kernels (.devbin/cs61; 58001:151 under the fuzz's new
    # softcap floor has not run on a GPU), then on the H200 issue 11's benches as pt does (until YEND), on another card a
    # fresh fuzz seed until OTHER_END (default 240 s)
    HB=${HB:-cs61}; use_addon $HB
    mkdir -p "$OUT/x63"
    FA_REQUIRE_GPU=1 timeout 150 npx vitest run test/cuda/fuzz-regressions.test.ts > "$OUT/x63/regressions.log" 2>&1
    log_tests $? "$OUT/x63/regressions.log"
    FUZZ_SEED=58001 FUZZ_CASE=151 timeout 60 node scripts/fuzz-api.mjs > "$OUT/x63/case-151.log" 2>&1
    log "case 58001:151 rc=$? $(grep -a 'err\|allowed' "$OUT/x63/case-151.log" | head -3 | tr '\n' ' ' | cut -c1-300)"
    # sixty-seventh session: seed 67101's first 925 calls (the H200's gf fuzz) one line each, to name the fp32
    # flashAttentionVarlenBackward call that read 0.928 of its allowance there (0.19 at most on the CPU); X67=0 skips it
    if [ "${X67:-1}" = 1 ]; then
      FUZZ_SEED=67101 FUZZ_CASES=925 FUZZ_VERBOSE=1 timeout 150 node scripts/fuzz-api.mjs > "$OUT/x63/fuzz-67101-verbose.log" 2>&1
      log "67101 verbose rc=$? $(grep -a '"kind":"flashAttentionVarlenBackward"' "$OUT/x63/fuzz-67101-verbose.log" \
        | grep -a '"dtype":"float32"' | python3 -c 'import sys,json
r=sorted(((j.get("worst") or {}).get("ratio",0),j["case"],(j.get("worst") or {}).get("what")) for j in map(json.loads,sys.stdin))
print(r[-3:])' 2>&1 | cut -c1-200)"
    fi
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
      log "H200: issue 11's benches"
      inference_benches x63 ${YEND:-460}
    else
      left=$(( ${OTHER_END:-240} - 20 - $(el) ))
      if [ $left -gt 30 ]; then fuzz_timed "$OUT/x63/fuzz-${FZ_SEED:-63001}.log" ${FZ_SEED:-63001} $left; fi
    fi
    pack_case x63 ;;
  c61)
    # sixty-first session: the softcap fix's follow-ups (bench/patches/softcap-page-tail.patch applied; .devbin/cs61 =
    # that tree's 90a build; .devbin/cs58 = the landed fourth form's, main's kernels since f104790): K's tail rows past a sequence's end zeroed in shared memory (the decode kernel's tensor-map
    # tiles always; the Hopper paged kernel's first key block under a softcap, one more barrier of all consumers), and
    # the fp32 backward's 1 - tanh^2 as u (2 - u). The fuzz calls they answer (seed 58001: 151, 432, 1404; seed
    # 57002: 3808), the softcap cases and fuzz-regressions.test.ts, memcheck on those four, racecheck on 432, the
    # paged softcap cost and the fp32 softcap cost against cs58, the GPU suite (ST s), a fresh fuzz seed until YEND
    HB=cs61; need .devbin/cs61/addon.xz; need .devbin/cs58/addon.xz
    use_addon cs61
    mkdir -p "$OUT/c61"
    for sc in 58001:151 58001:432 58001:1404 57002:3808; do
      FUZZ_SEED=${sc%:*} FUZZ_CASE=${sc#*:} timeout 60 node scripts/fuzz-api.mjs >> "$OUT/c61/fuzz-reruns.log" 2>&1
      echo "case $sc rc=$?" >> "$OUT/c61/fuzz-reruns.log"
    done
    log "fuzz reruns: $(grep -a '^case' "$OUT/c61/fuzz-reruns.log" | tr '\n' ' ')"
    patch58_cases c61 120
    for sc in 58001:432 58001:1404 57002:3808 58001:151; do
      FUZZ_SEED=${sc%:*} FUZZ_CASE=${sc#*:} timeout 90 compute-sanitizer --tool memcheck --error-exitcode 9 \
        node scripts/fuzz-api.mjs > "$OUT/c61/memcheck-${sc#*:}.log" 2>&1
      log "memcheck case $sc rc=$? $(grep -a 'ERROR SUMMARY' "$OUT/c61/memcheck-${sc#*:}.log" | tail -1)"
    done
    FUZZ_SEED=58001 FUZZ_CASE=432 timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 \
      node scripts/fuzz-api.mjs > "$OUT/c61/racecheck-432.log" 2>&1
    log "racecheck case 432 rc=$? $(grep -a 'RACECHECK SUMMARY\|ERROR SUMMARY' "$OUT/c61/racecheck-432.log" | tail -1)"
    xz -dc .devbin/cs58/addon.xz > "$OUT/prev.node"
    for pass in 1 2; do
      FA_ADDON_PATH="$OUT/prev.node" timeout 120 node scripts/softcap-paged-cost.js 2>&1 | sed "s/^/cs58 $pass: /" >> "$OUT/c61/paged-softcap.log"
      timeout 120 node scripts/softcap-paged-cost.js 2>&1 | sed "s/^/cs61 $pass: /" >> "$OUT/c61/paged-softcap.log"
    done
    rm -f "$OUT/prev.node"; log "paged softcap cost done"
    if [ -n "${SHORT:-}" ]; then  # a short call: the GPU files the change touches, softcap / paged / decode cases only
      FA_REQUIRE_GPU=1 timeout $(( ${YEND:-540} - 15 - $(el) )) npx vitest run test/cuda/inference.test.ts test/cuda/backward.test.ts \
        test/cuda/forward.test.ts test/cuda/fresh-inference.test.ts -t 'softcap|paged|decode|P1|P16' > "$OUT/c61/short-tests.log" 2>&1
      log_tests $? "$OUT/c61/short-tests.log"
    else
      gpu_suite c61 ${ST:-280}
      log "suite stream ticks: $(grep -ao 'stream: [0-9]* event-loop turns.*' "$OUT/c61/gpu-tests.log" | cut -c1-60)"
    fi
    if [ $(( ${YEND:-540} - $(el) )) -gt 150 ]; then SOFTCAP_DTYPE=float32 SOFTCAP_CAPS=30,0.5 softcap_ab c61 cs58 1; fi
    left=$(( ${YEND:-540} - 20 - $(el) ))
    if [ $left -gt 30 ]; then fuzz_timed "$OUT/c61/fuzz-${FZ_SEED:-61001}.log" ${FZ_SEED:-61001} $left; else log "no time left for the fuzz"; fi
    pack_case c61 ;;
  c58)
    # fifty-eighth session: the softcap fix as it lands (.devbin/cs58 = this tree's 90a build; .devbin/fix56 = b5afb2b's,
    # main's kernels before it): the large-softcap cases and the fuzz's once-failing cases (fuzz-regressions.test.ts),
    # the stream test whose event-loop count once read 1 (three runs, its turns printed), the GPU suite (ST s for its
    # parallel files), the softcap's cost (fp16, softcaps 30 and 4) on both, memcheck on five of those fuzz calls
    # (dense, varlen, paged prefill, decode), then a fresh fuzz seed (FZ_SEED) until YEND
    HB=cs58; need .devbin/cs58/addon.xz; need .devbin/fix56/addon.xz
    use_addon cs58
    mkdir -p "$OUT/c58"
    patch58_cases c58 150
    softcap_reruns c58 "1102 5164 3808"  # the three the vote's first form left (the trimmed half; 3808: page garbage)
    for i in $(seq 1 ${TICKS:-3}); do
      FA_REQUIRE_GPU=1 timeout 60 npx vitest run test/cuda/stream.test.ts -t 'JS thread keeps running' >> "$OUT/c58/stream-ticks.log" 2>&1
      echo "stream run $i rc=$?" >> "$OUT/c58/stream-ticks.log"
    done
    log "stream ticks: $(grep -ao 'stream: [0-9]* event-loop turns.*' "$OUT/c58/stream-ticks.log" | cut -c1-60 | tr '\n' ';')"
    gpu_suite c58 ${ST:-300}
    log "suite stream ticks: $(grep -ao 'stream: [0-9]* event-loop turns.*' "$OUT/c58/gpu-tests.log" | cut -c1-60)"
    export SOFTCAP_DTYPE=float16 SOFTCAP_CAPS=30,4
    softcap_ab c58 fix56 1
    # the mma.sync kernels (FA_NO_WGMMA=1; sm80's path), whose registers the patch's forms moved (NOTES-fwd.md,
    # fifty-eighth session): the softcap's cost, then the varlen bench's packed and paged calls, on both builds
    if [ $(( ${YEND:-560} - $(el) )) -gt 200 ]; then
      mkdir -p "$OUT/c58/sm80"; FA_NO_WGMMA=1 softcap_ab c58/sm80 fix56 1
      for v in fix56 cs58; do
        xz -dc ".devbin/$v/addon.xz" > "$OUT/v.node"
        FA_NO_WGMMA=1 FA_ADDON_PATH="$OUT/v.node" timeout 60 node dist/bench/cli.js --grid off --varlen --api-ms 100 --out /tmp \
          2>&1 | grep -aE "flashAttentionVarlen|paged|TFLOP" | sed "s/^/$v: /" >> "$OUT/c58/sm80-varlen.log"
      done
      rm -f "$OUT/v.node"; log "sm80 path read"
    fi
    patch58_memcheck c58 "549 1102 3808 1999 3139" 90
    left=$(( ${YEND:-560} - 20 - $(el) ))
    if [ $left -gt 30 ]; then fuzz_timed "$OUT/c58/fuzz-${FZ_SEED:-58001}.log" ${FZ_SEED:-58001} $left; else log "no time left for the fuzz"; fi
    pack_case c58 ;;
  cs)
    # fifty-seventh session: the fp16 / bf16 softcap's tanh at fp32 accuracy (bench/patches/fp16-softcap-poly.patch:
    # softcap_scores / tanh_fast_exact, and the new test cases). Run it in a tree with the patch applied (`git apply`),
    # .devbin/cs57 = that tree's 90a build, .devbin/fix56 = b5afb2b's (main's kernels): the new large-softcap cases on both
    # (fail / pass), the seed-57002 fuzz failures rerun on the new build, the GPU suite on it, the softcap's cost (fp16,
    # softcaps 30 and 4) on both, then the forward and backward without softcap on both (fwd-ab) until YEND
    HB=cs57; need .devbin/cs57/addon.xz; need .devbin/fix56/addon.xz
    mkdir -p "$OUT/cs"
    softcap_new_cases cs 150
    softcap_reruns cs
    gpu_suite cs ${ST:-180}
    export SOFTCAP_DTYPE=float16 SOFTCAP_CAPS=30,4
    softcap_ab cs fix56 1
    rounds=2; [ $(( ${YEND:-580} - $(el) )) -lt 170 ] && rounds=1
    if [ $(( ${YEND:-580} - $(el) )) -gt 70 ]; then
      AB_DIR=fwd,bwd AB_TAG=cs-ab AB_ROUNDS=$rounds AB_TORCH=0 AB_TIMEOUT=60 AB_ARGS="--hdim 64,128,256 --seqlen 2048" \
        AB_ADDON=".devbin/fix56/addon.xz" OUT=$OUT/cs timeout $(( ${YEND:-580} - 10 - $(el) )) bash scripts/gpu-run.sh fwd-ab \
        > "$OUT/cs/ab-step.log" 2>&1
      log "ab rc=$?"
    else log "no time left for the A/B"; fi
    pack_case cs ;;
  gf)
    # fifty-seventh session: the GPU suite on the build $HB (ST s for its parallel files), then the public API fuzzed on
    # the GPU with seed FZ_SEED for what is left until YEND
    HB=${HB:-fix56}; use_addon $HB
    mkdir -p "$OUT/gf"; seed=${FZ_SEED:-57002}
    gpu_suite gf ${ST:-300}
    left=$(( ${YEND:-540} - 100 - $(el) ))
    if [ $left -gt 30 ]; then fuzz_timed "$OUT/gf/fuzz-$seed.log" $seed $left; else log "no time left for the fuzz"; fi
    pack_case gf ;;
  auto)
    # fifty-fifth session: on the H200, issue 11's and 12's readings (AUTO_H200, default pt); on another card AUTO_OTHER
    # (default vf; none: nothing)
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
      log "H200: ${AUTO_H200:-pt}"; exec bash "$0" "${AUTO_H200:-pt}"
    else
      log "not an H200: ${AUTO_OTHER:-vf}"; [ "${AUTO_OTHER:-vf}" = none ] && exit 0; exec bash "$0" "${AUTO_OTHER:-vf}"
    fi ;;
  gt)
    # forty-eighth session: the GPU suite (no sanitizers: the kernels are 8c9bfdf's, sanitizer-clean in the
    # forty-sixth session) on this tree's TypeScript (dbb82d6's CPU-order plan is in every upload and read-back)
    HB=${HB:-new3}; use_addon $HB
    mkdir -p "$OUT/gt"
    gpu_suite gt ${ST:-330}
    pack_case gt ;;
  pt)
    # forty-eighth session: page 1 against page 16 in decode, in turns (scripts/decode-page-turns.js: B 1 / 16 / 64 x
    # 16k, two passes), then issue 11's benches next to torch (decode, varlen, paged prefill, serving loop)
    HB=${HB:-new3}; use_addon $HB
    mkdir -p "$OUT/pt"
    inference_benches pt ${YEND:-400}
    pack_case pt ;;
  hp)
    # forty-second session, call 2: the fwd + bwd grid in turns with cuDNN (each step capped), then ncu on the
    # backward at fp16 D 128 full N 16k, ours (preprocess / main / convert) and cuDNN's bprop: L2 reduction /
    # read / write sectors, DRAM bytes and the usual pipes and stalls, for the power question (NOTES-bwd.md,
    # forty-first session: D 128 N 16k needs fewer cycles than cuDNN but runs at a lower clock); then the
    # deterministic backward against the default with what is left
    HB=${HB:-new}  # the build (forty-sixth session: HB=arr, 8c9bfdf's)
    need .devbin/$HB/addon.xz
    use_addon $HB
    mkdir -p "$OUT/h"
    TURNS_ROUNDS=5 TURNS_TIMEOUT=${TT:-320} OUT=$OUT/h bash scripts/gpu-run.sh turns > "$OUT/h/turns-step.log" 2>&1
    log "turns rc=$? $(grep -c 'ours / cuDNN' "$OUT/h/turns.log") rows"
    PROF_CELLS="${PC:-bwd:float16:128:16384:0}" PROF_SECTIONS="--section MemoryWorkloadAnalysis_Tables" \
      PROF_METRICS="lts__t_sectors_op_red.sum,lts__t_requests_op_red.sum,lts__t_sectors_op_read.sum,lts__t_sectors_op_write.sum,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum" \
      OUT=$OUT/h timeout ${PT:-110} bash scripts/gpu-run.sh cudnn-prof > "$OUT/h/prof-step.log" 2>&1
    log "prof rc=$?"
    [ -d /tmp/prof-out ] && cp -r /tmp/prof-out "$OUT/h/"
    timeout $(( ${YEND:-570} - 10 - $(el) )) node dist/bench/cli.js --dir bwd --dtype fp16,bf16 --hdim 64,128,256 \
      --seqlen 1024,4096 --causal both --api-ms 40 --deterministic --out "$OUT/h/det" > "$OUT/h/det.log" 2>&1
    log "deterministic rc=$?"
    pack_case h ;;
  hi)
    # forty-fourth session, call 1 (the H200): this tree's build (.devbin/new, all head dims) through the GPU
    # suite with the sanitizers (the cp.async kernel's dQ-first order had run only its backward tests), then
    # issue 11's benches (decode, varlen, paged prefill, serving loop) next to torch
    need .devbin/new/addon.xz
    use_addon new
    mkdir -p "$OUT/hi"
    TEST_TIMEOUT=${ST:-330} OUT=$OUT/hi bash scripts/gpu-run.sh tests-san > "$OUT/hi/tests-san-step.log" 2>&1
    log "tests-san rc=$? $(grep -aE 'Test Files|Tests ' "$OUT/hi/gpu-tests.log" | tr -d '\033' | tr '\n' ' ')"
    timeout $(( ${YEND:-580} - 10 - $(el) )) node dist/bench/cli.js --grid off --decode --varlen --serve --compare torch \
      --out "$OUT/hi/inf" > "$OUT/hi/inf.log" 2>&1
    log "inference benches rc=$?"
    pack_case hi ;;
  ar)
    # forty-fifth session: every consumer thread arrives on the backward's stage "empty" barrier (.devbin/arr =
    # this tree's 90a build, all head dims; .devbin/new2 = 710d739's, the lane-0 arrivals): racecheck on
    # scripts/rowsplit-race.js at D 256 / 128 / 64 and on the smoke workload (+ memcheck), the backward test
    # files and det-check on arr, then the backward A/B against new2 in turns
    need .devbin/new2/addon.xz; need .devbin/arr/addon.xz
    mkdir -p "$OUT/ar"
    use_addon arr
    for d in 256 128 64; do
      RACE_D=$d timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 node scripts/rowsplit-race.js > "$OUT/ar/race-d$d.log" 2>&1
      log "racecheck arr D $d rc=$? $(grep -E 'RACECHECK SUMMARY' "$OUT/ar/race-d$d.log" | tail -1)"
    done
    OUT=$OUT/ar bash scripts/gpu-run.sh sanitize > "$OUT/ar/sanitize-step.log" 2>&1
    log "sanitize: $(grep -E 'exit' "$OUT/ar/sanitize-step.log" | tr '\n' ' ')"
    FA_REQUIRE_GPU=1 timeout 200 npx vitest run test/cuda/backward.test.ts test/cuda/bwd-walks.test.ts > "$OUT/ar/tests.log" 2>&1
    log "backward tests rc=$? $(grep -aE 'Tests ' "$OUT/ar/tests.log" | tr -d '\033' | tail -1)"
    timeout 90 node scripts/det-check.js 3 > "$OUT/ar/det-check.log" 2>&1
    log "det-check rc=$? $(grep -c ' 0 ' "$OUT/ar/det-check.log") lines with 0"
    use_addon new2
    AB_DIR=bwd AB_TAG=ar-ab AB_ROUNDS=2 AB_TORCH=0 AB_TIMEOUT=40 AB_ARGS="--dtype fp16,bf16 --hdim 64,128,256 --seqlen 1024,4096" \
      AB_ADDON=".devbin/arr/addon.xz" OUT=$OUT/ar timeout $(( ${YEND:-580} - 10 - $(el) )) bash scripts/gpu-run.sh fwd-ab > "$OUT/ar/ab-step.log" 2>&1
    log "arr ab rc=$?"
    pack_case ar ;;
  rp)
    # forty-seventh session (ran on the H200: neutral; the patch is gone: `git show c23c17d:bench/patches/fwd-release-pred.patch`;
    # prepared in the forty-fifth session): the forward's stage releases as one predicated arrival (no
    # branch around lane 0's arrive; fwd-release-pred.patch, .devbin/rpred = `bash scripts/ab-builds.sh
    # rpred=patch:bench/patches/fwd-release-pred.patch`) against .devbin/arr (8c9bfdf, HEAD's kernels) in turns.
    # Question: was the backward's D 64 gain of 8c9bfdf the branch at each release? Then the forward's D 64 steps
    # (two releases each) should gain too, where 32 arrivals per warp cost 20% (arr2)
    need .devbin/arr/addon.xz; need .devbin/rpred/addon.xz
    mkdir -p "$OUT/rp"
    use_addon arr
    AB_DIR=fwd AB_TAG=rp-ab AB_ROUNDS=3 AB_TORCH=0 AB_TIMEOUT=40 AB_ARGS="--dtype fp16,bf16 --hdim 64,128,256 --seqlen 512,1024,4096" \
      AB_ADDON=".devbin/rpred/addon.xz" OUT=$OUT/rp timeout 200 bash scripts/gpu-run.sh fwd-ab > "$OUT/rp/ab-step.log" 2>&1
    log "rpred ab rc=$?"
    pack_case rp ;;
  fin)
    # forty-fifth session, last call: 8c9bfdf's build (.devbin/arr). On an H200: the D 64 and D 128 backward against
    # cuDNN in turns (issue 12 is read there); on an H100: the whole GPU suite (its backward files, det-check and the
    # sanitizers already ran on this build, call ar)
    need .devbin/arr/addon.xz
    mkdir -p "$OUT/fin"
    use_addon arr
    if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
      bwd_turns fin "64 128" 280
    else
      TEST_TIMEOUT=$(( ${YEND:-280} - 40 - $(el) )) OUT=$OUT/fin bash scripts/gpu-run.sh tests > "$OUT/fin/tests-step.log" 2>&1
      log_tests $? "$OUT/fin/gpu-tests.log"
    fi
    pack_case fin ;;
  ar3)
    # forty-fifth session: .devbin/arr2 (also the forward's empty barriers and the backward's dQ-full barriers
    # take every thread's arrival) against .devbin/arr (8c9bfdf) in turns, forward and backward; then the
    # sanitizers and the forward / inference test files on arr2
    need .devbin/arr/addon.xz; need .devbin/arr2/addon.xz
    mkdir -p "$OUT/ar3"
    use_addon arr
    AB_DIR=fwd AB_TAG=fwd-ab AB_ROUNDS=2 AB_TORCH=0 AB_TIMEOUT=40 AB_ARGS="--dtype fp16,bf16 --hdim 64,128,256 --seqlen 1024,4096" \
      AB_ADDON=".devbin/arr2/addon.xz" OUT=$OUT/ar3 timeout 120 bash scripts/gpu-run.sh fwd-ab > "$OUT/ar3/fwd-ab-step.log" 2>&1
    log "fwd ab rc=$?"
    AB_DIR=bwd AB_TAG=bwd-ab AB_ROUNDS=2 AB_TORCH=0 AB_TIMEOUT=40 AB_ARGS="--dtype fp16,bf16 --hdim 64,128 --seqlen 1024,4096" \
      AB_ADDON=".devbin/arr2/addon.xz" OUT=$OUT/ar3 timeout 100 bash scripts/gpu-run.sh fwd-ab > "$OUT/ar3/bwd-ab-step.log" 2>&1
    log "bwd ab rc=$?"
    use_addon arr2
    OUT=$OUT/ar3 bash scripts/gpu-run.sh sanitize > "$OUT/ar3/sanitize-step.log" 2>&1
    log "sanitize: $(grep -E 'exit' "$OUT/ar3/sanitize-step.log" | tr '\n' ' ')"
    FA_REQUIRE_GPU=1 timeout $(( ${YEND:-400} - 10 - $(el) )) npx vitest run test/cuda/forward.test.ts test/cuda/inference.test.ts \
      test/cuda/backward.test.ts > "$OUT/ar3/tests.log" 2>&1
    log "tests rc=$? $(grep -aE 'Tests ' "$OUT/ar3/tests.log" | tr -d '\033' | tail -1)"
    pack_case ar3 ;;
  ar2)
    # forty-fifth session, after ar: the A/B again at D 64 / 128 (3 rounds), then arr's D 64 backward against
    # cuDNN in turns (issue 12's cells)
    need .devbin/new2/addon.xz; need .devbin/arr/addon.xz
    mkdir -p "$OUT/ar2"
    use_addon new2
    AB_DIR=bwd AB_TAG=ar2-ab AB_ROUNDS=3 AB_TORCH=0 AB_TIMEOUT=40 AB_ARGS="--dtype fp16,bf16 --hdim 64,128 --seqlen 1024,4096" \
      AB_ADDON=".devbin/arr/addon.xz" OUT=$OUT/ar2 timeout 150 bash scripts/gpu-run.sh fwd-ab > "$OUT/ar2/ab-step.log" 2>&1
    log "arr ab rc=$?"
    use_addon arr
    bwd_turns ar2 64 300
    pack_case ar2 ;;
  rc)
    # forty-fifth session: the row split's racecheck hazards (case rs: the same 16 with the consumers also
    # arriving on the stage's empty barrier, so not the writer's hop): per-hazard detail (threads, blocks) on
    # HEAD's build; the key split (D 128) and a short walk (N 320) on the same script; .devbin/allarr
    # (bwd-rowsplit-allarrive.patch: every consumer thread arrives on the empty barrier, count 257)
    need .devbin/new2/addon.xz; need .devbin/allarr/addon.xz
    mkdir -p "$OUT/rc"
    use_addon new2
    RACE_DTYPES=float16 timeout 90 compute-sanitizer --tool racecheck --racecheck-report hazard --print-limit 40 \
      node scripts/rowsplit-race.js > "$OUT/rc/race-detail.log" 2>&1
    log "racecheck detail rc=$? $(grep -E 'RACECHECK SUMMARY' "$OUT/rc/race-detail.log" | tail -1)"
    for c in "RACE_D=128" "RACE_N=320" "RACE_N=200"; do
      env $c timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 node scripts/rowsplit-race.js > "$OUT/rc/race-$c.log" 2>&1
      log "racecheck new2 $c rc=$? $(grep -E 'RACECHECK SUMMARY' "$OUT/rc/race-$c.log" | tail -1)"
    done
    use_addon allarr
    timeout 90 compute-sanitizer --tool racecheck --error-exitcode 9 node scripts/rowsplit-race.js > "$OUT/rc/race-allarr.log" 2>&1
    log "racecheck allarr rc=$? $(grep -E 'RACECHECK SUMMARY' "$OUT/rc/race-allarr.log" | tail -1)"
    pack_case rc ;;
  rs)
    # forty-fourth session, prepared for the next: (1) the row split's racecheck hazards (NOTES-bwd.md,
    # forty-fourth session): scripts/rowsplit-race.js under racecheck on this tree's build (.devbin/new2 =
    # HEAD's 90a build, all head dims) and on .devbin/rsempty (bwd-rowsplit-empty.patch: the consumers also
    # arrive on the stage's empty barrier; `bash scripts/ab-builds.sh
    # rsempty=patch:bench/patches/bwd-rowsplit-empty.patch,FA_HEAD_DIMS=256`); (2) the patch A/B'd at D 256;
    # (3) the deterministic grid with 150 ms rounds. The GPU suite with the sanitizers on HEAD (the rotated
    # deterministic walk, 79689f9, ran only the backward test files) is case g with ST=400 (330 s was too
    # short on the H200 for the last file)
    need .devbin/new2/addon.xz; need .devbin/rsempty/addon.xz
    mkdir -p "$OUT/rs"
    for v in new2 rsempty; do
      use_addon $v
      timeout 60 compute-sanitizer --tool racecheck --error-exitcode 9 node scripts/rowsplit-race.js > "$OUT/rs/race-$v.log" 2>&1
      log "racecheck $v rc=$? $(grep -E 'RACECHECK SUMMARY' "$OUT/rs/race-$v.log" | tail -1)"
    done
    use_addon new2
    AB_DIR=bwd AB_TAG=rs-ab AB_ROUNDS=2 AB_TORCH=0 AB_TIMEOUT=40 AB_ARGS="--dtype fp16,bf16 --hdim 256 --seqlen 1024,4096" \
      AB_ADDON=".devbin/rsempty/addon.xz" OUT=$OUT/rs timeout 120 bash scripts/gpu-run.sh fwd-ab > "$OUT/rs/ab-step.log" 2>&1
    log "rsempty ab rc=$?"
    timeout $(( ${YEND:-580} - 10 - $(el) )) node dist/bench/cli.js --dir bwd --dtype fp16,bf16 --hdim 64,128,256 \
      --seqlen 1024,4096 --causal both --api-ms 150 --deterministic --out "$OUT/rs/det" > "$OUT/rs/det.log" 2>&1
    log "deterministic rc=$?"
    pack_case rs ;;
  s)
    # forty-second session, call 1: the cp.async Hopper backward (packed batches; FA_BWD_SM90=cpasync on dense
    # calls) with its dK / dV through shared memory, as the warp-specialised kernel's (.devbin/new), against
    # the previous build's (.devbin/f36, f36dab0) in turns, the warp-specialised kernel as side a; then the GPU
    # suite with the sanitizers on the new build (ST: the parallel step's seconds)
    need .devbin/new/addon.xz; need .devbin/f36/addon.xz
    use_addon new
    mkdir -p "$OUT/s"
    AB_DIR=bwd AB_TAG=cp-ab AB_ROUNDS=2 AB_TORCH=0 AB_TIMEOUT=30 AB_ARGS="--hdim 64,128,256 --seqlen 512,2048" \
      AB_ADDON="env:FA_BWD_SM90=cpasync env:FA_BWD_SM90=cpasync@.devbin/f36/addon.xz" OUT=$OUT/s \
      timeout 170 bash scripts/gpu-run.sh fwd-ab > "$OUT/s/ab-step.log" 2>&1
    log "cp ab rc=$?"
    use_addon new
    TEST_TIMEOUT=${ST:-330} OUT=$OUT/s bash scripts/gpu-run.sh tests-san > "$OUT/s/tests-san-step.log" 2>&1
    log "tests-san rc=$? $(grep -aE 'Test Files|Tests ' "$OUT/s/gpu-tests.log" | tr -d '\033' | tr '\n' ' ')"
    pack_case s ;;
  p)
    # forty-second session, call 3: where the D 128 backward's energy goes. Two probe builds (dQ wrong by design,
    # timing / power only; D 128 only): .devbin/noreduce (bwd-dq-probe-noreduce.patch: the dQ writer issues no
    # reduce-add) and .devbin/nostage (bwd-dq-probe-nostage.patch: no dQ image staged either), against this build
    # in turns with 200 ms rounds, where the 700 W cap sets the clock: at the cap, time per call ~ energy per
    # call. Then the backward block timelines (.devbin/htrace) with what is left.
    need .devbin/new/addon.xz; need .devbin/noreduce/addon.xz; need .devbin/nostage/addon.xz
    use_addon new
    mkdir -p "$OUT/p"
    AB_DIR=bwd AB_TAG=probe AB_ROUNDS=2 AB_TORCH=0 AB_TIMEOUT=45 AB_ARGS="--hdim 128 --seqlen 4096,16384 --api-ms 200" \
      AB_ADDON=".devbin/noreduce/addon.xz .devbin/nostage/addon.xz" OUT=$OUT/p timeout 200 bash scripts/gpu-run.sh fwd-ab \
      > "$OUT/p/ab-step.log" 2>&1
    log "probe ab rc=$?"
    use_addon new
    if [ -f .devbin/htrace/addon.xz ]; then
      TRACE_ADDON=.devbin/htrace/addon.xz TRACE_DIR=bwd TRACE_CELLS="128:512:0 128:4096:0 64:512:0 128:1024:1" \
        OUT=$OUT/p timeout $(( ${YEND:-250} - 10 - $(el) )) bash scripts/gpu-run.sh trace > "$OUT/p/trace-step.log" 2>&1
      log "trace rc=$?"
    fi
    use_addon new
    pack_case p ;;
  d)
    # forty-second session, call 4: dQ added by the consumers themselves (.devbin/direct,
    # bwd-dq-probe-direct.patch: red.global.add.v4 from the accumulators, no image in shared memory; dQ right in
    # the dense atomic mode at D 128) against this build and .devbin/nostage in turns, 200 ms rounds
    need .devbin/new/addon.xz; need .devbin/direct/addon.xz; need .devbin/nostage/addon.xz
    use_addon new
    mkdir -p "$OUT/d"
    AB_DIR=bwd AB_TAG=direct AB_ROUNDS=2 AB_TORCH=0 AB_TIMEOUT=45 AB_ARGS="--hdim 128 --seqlen 512,4096,16384 --api-ms 200" \
      AB_ADDON=".devbin/direct/addon.xz .devbin/nostage/addon.xz" OUT=$OUT/d timeout ${YEND:-110} bash scripts/gpu-run.sh fwd-ab \
      > "$OUT/d/ab-step.log" 2>&1
    log "direct ab rc=$?"
    use_addon new
    pack_case d ;;
  f)
    # forty-third session, call 2: FA_BWD_WS_DQ_FIRST (.devbin/dqfirst: the W 128 key split issues the dQ product
    # before dK and stages the dQ image while dK runs, FA3's order) against this build in turns, 200 ms rounds, then
    # the backward test files on it
    need .devbin/new/addon.xz; need .devbin/dqfirst/addon.xz
    use_addon new
    mkdir -p "$OUT/f"
    AB_DIR=bwd AB_TAG=dqfirst AB_ROUNDS=2 AB_TORCH=0 AB_TIMEOUT=45 \
      AB_ARGS="--dtype fp16,bf16 --hdim 128,256 --seqlen 512,2048,16384 --api-ms 150" \
      AB_ADDON=".devbin/dqfirst/addon.xz" OUT=$OUT/f timeout ${YAB:-150} bash scripts/gpu-run.sh fwd-ab \
      > "$OUT/f/ab-step.log" 2>&1
    log "dqfirst ab rc=$?"
    use_addon dqfirst
    FA_REQUIRE_GPU=1 timeout $(( ${YEND:-330} - 10 - $(el) )) npx vitest run test/cuda/backward.test.ts \
      test/cuda/bwd-walks.test.ts > "$OUT/f/tests-dqfirst.log" 2>&1
    log "dqfirst tests rc=$? $(grep -aE 'Tests ' "$OUT/f/tests-dqfirst.log" | tail -1)"
    use_addon new
    pack_case f ;;
  g)
    # forty-third session, call 3: this tree's build with FA_BWD_WS_DQ_FIRST on (.devbin/new2, all head dims)
    # through the GPU suite with the sanitizers, then the D 128 backward cells against cuDNN in turns
    GB=${GB:-new2}  # the build (forty-sixth session: GB=new3, 4ecc611's)
    need .devbin/$GB/addon.xz
    use_addon $GB
    mkdir -p "$OUT/g"
    TEST_TIMEOUT=${ST:-330} OUT=$OUT/g bash scripts/gpu-run.sh tests-san > "$OUT/g/tests-san-step.log" 2>&1
    log "tests-san rc=$? $(grep -aE 'Test Files|Tests ' "$OUT/g/gpu-tests.log" | tr -d '\033' | tr '\n' ' ')"
    bwd_turns g 128 590
    pack_case g ;;
  tb)
    # forty-sixth session: the backward against cuDNN in turns at the head dims given (TB_D, default 64 and 256;
    # g reads D 128), fp16 / bf16, full / causal, N 512..16k, on the build GB
    GB=${GB:-new3}
    need .devbin/$GB/addon.xz
    use_addon $GB
    mkdir -p "$OUT/tb"
    bwd_turns tb "${TB_D:-64 256}" 300
    pack_case tb ;;
  w6)
    # forty-third session, call 5 (0.994-1.001x; the switch and its patch were removed after, see ab14e56):
    # FA_BWD_WS_DQ_FIRST_W64 (.devbin/w64first, bwd-dqfirst-w64.patch: the W 64 turn's
    # warpgroup issues dK behind its dQ product) against .devbin/new2 (01fa2e8) in turns, then the backward test files
    need .devbin/new2/addon.xz; need .devbin/w64first/addon.xz
    use_addon new2
    mkdir -p "$OUT/w6"
    AB_DIR=bwd AB_TAG=w64first AB_ROUNDS=2 AB_TORCH=0 AB_TIMEOUT=45 \
      AB_ARGS="--dtype fp16,bf16 --hdim 64 --seqlen 512,2048,8192 --api-ms 150" \
      AB_ADDON=".devbin/w64first/addon.xz" OUT=$OUT/w6 timeout ${YAB:-110} bash scripts/gpu-run.sh fwd-ab \
      > "$OUT/w6/ab-step.log" 2>&1
    log "w64first ab rc=$?"
    use_addon w64first
    FA_REQUIRE_GPU=1 timeout $(( ${YEND:-300} - 10 - $(el) )) npx vitest run test/cuda/backward.test.ts \
      test/cuda/bwd-walks.test.ts > "$OUT/w6/tests-w64first.log" 2>&1
    log "w64first tests rc=$? $(grep -aE 'Tests ' "$OUT/w6/tests-w64first.log" | tail -1)"
    use_addon new2
    pack_case w6 ;;
  cp)
    # forty-third session, call 6: FA_BWD_CP_DQ_FIRST (.devbin/cpfirst, bwd-cp-dqfirst.patch: the cp.async kernel's
    # key split issues dK behind the dQ product and adds dQ while dK runs) against .devbin/new2 in turns, on dense
    # calls through the cp.async kernel (FA_BWD_SM90=cpasync), then the backward tests on it (dense through the
    # cp.async kernel, and the packed backward cases)
    need .devbin/new2/addon.xz; need .devbin/cpfirst/addon.xz
    use_addon new2
    mkdir -p "$OUT/cp"
    snap() { cp "$OUT/calls.log" "$OUT/cp/" 2>/dev/null; tar -C "$OUT" -cJf "$OUT/cp.tar.xz" cp; }  # (a cut call keeps what ran)
    AB_DIR=bwd AB_TAG=cpfirst AB_ROUNDS=2 AB_TORCH=0 AB_TIMEOUT=30 AB_ARGS="--hdim 64,128 --seqlen 512,2048" \
      AB_ADDON="env:FA_BWD_SM90=cpasync env:FA_BWD_SM90=cpasync@.devbin/cpfirst/addon.xz" OUT=$OUT/cp \
      timeout ${YAB:-70} bash scripts/gpu-run.sh fwd-ab > "$OUT/cp/ab-step.log" 2>&1
    log "cpfirst ab rc=$?"; snap
    use_addon cpfirst
    FA_REQUIRE_GPU=1 FA_BWD_SM90=cpasync timeout $(( (${YEND:-190} - 10 - $(el)) / 2 )) npx vitest run \
      test/cuda/backward.test.ts > "$OUT/cp/tests-cpfirst-dense.log" 2>&1
    log "cpfirst dense tests rc=$? $(grep -aE 'Tests ' "$OUT/cp/tests-cpfirst-dense.log" | tail -1)"; snap
    FA_REQUIRE_GPU=1 timeout $(( ${YEND:-190} - 10 - $(el) )) npx vitest run test/cuda/inference.test.ts \
      -t backward > "$OUT/cp/tests-cpfirst-packed.log" 2>&1
    log "cpfirst packed tests rc=$? $(grep -aE 'Tests ' "$OUT/cp/tests-cpfirst-packed.log" | tail -1)"; snap
    for tool in memcheck racecheck; do  # the smoke workload's packed backward runs the cp.async kernel
      timeout 60 compute-sanitizer --tool $tool --error-exitcode 9 node scripts/gpu-smoke.js > "$OUT/cp/san-$tool.log" 2>&1
      log "cpfirst $tool rc=$? $(grep -aE 'SUMMARY' "$OUT/cp/san-$tool.log" | tail -1)"
    done
    use_addon new2
    pack_case cp ;;
  t)
    # the backward's block timelines (.devbin/htrace: HEAD with FA_TRACE, rebuilt in the forty-first session with
    # the staged epilogue): where a tile's time goes now
    need .devbin/htrace/addon.xz; need .devbin/new/addon.xz
    use_addon new
    TRACE_ADDON=.devbin/htrace/addon.xz TRACE_DIR=bwd TRACE_CELLS="128:512:0 128:4096:0 64:512:0 64:4096:0 128:1024:1" \
      OUT=$OUT timeout 200 bash scripts/gpu-run.sh trace > "$OUT/trace-step.log" 2>&1
    log "trace HEAD rc=$?" ;;
  c)
    use_addon base
    FA_NO_WGMMA=1 timeout 300 node dist/bench/cli.js --dir fwd,bwd --dtype fp16,bf16 --hdim 64,128 --seqlen 1024,4096 \
      --causal both --api-ms 40 --compare torch --out "$OUT/fa2" > "$OUT/fa2.log" 2>&1
    log "fa2 path rc=$?" ;;
  *) echo "usage: device-calls.sh w|v|q|hp|s|p|d|f|g|w6|cp|t|c"; exit 2 ;;
esac
