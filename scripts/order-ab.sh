#!/usr/bin/env bash
# Device call: the packed and paged prefill with the batch's longest sequence first / in the middle /
# last, short batches, and 64 sequences, through two addons in turns (this tree's build/Release and
# AB_HEAD, an .xz or .node of the build before), AB_ROUNDS_ORDER rounds (default "1 2"). The dense
# forward's A/B is a separate step (gpu-run.sh fwd-ab). Logs in $OUT. Usage on the GPU host: OUT=... AB_HEAD=.devbin/head/x.xz bash scripts/order-ab.sh
set -uo pipefail
OUT=${OUT:-out}; mkdir -p "$OUT"
source .gpu/env.sh
head=/tmp/addon-head.node
case "$AB_HEAD" in *.xz) xz -dc "$AB_HEAD" > $head ;; *) cp "$AB_HEAD" $head ;; esac
L64=$(node -e 'console.log(Array.from({length:64},(_,i)=>((i*997)%700)+60).join(","))')
declare -A sets=(
  [first]=8192,3000,1800,1200,700,500,300,200,150,100,242
  [middle]=3000,1800,1200,700,500,8192,300,200,150,100,242
  [last]=3000,1800,1200,700,500,300,200,150,100,242,8192
  [short4]=300,200,100,50
  [b64]=$L64
)
for r in ${AB_ROUNDS_ORDER:-1 2}; do
  for side in new head; do
    addon=$PWD/build/Release/flash_attention_node.node; [ $side = head ] && addon=$head
    for s in first middle last short4 b64; do
      FA_ADDON_PATH=$addon PROBE_KINDS=${PROBE_KINDS:-sparse} PROBE_LENS=${sets[$s]} PROBE_MS=${PROBE_MS:-60} \
        timeout 60 node scripts/paged-probe.js 16 2>&1 | sed "s/^/r$r $side $s: /" | tee -a "$OUT/order-ab.log"
    done
  done
done
