#!/usr/bin/env bash
# Builds the development variants of the addon for an A/B on the GPU host, each in its own clone of
# this checkout's HEAD (so the main build stays as it is), for the H200 only and the grid's head
# dims, and leaves each as .devbin/<name>/addon.xz (ignored by git; carried to the device).
# Usage: bash scripts/ab-builds.sh [name=SWITCH[=VALUE][,SWITCH[=VALUE]...] ...] (a switch alone is =1;
#   patch:FILE applies FILE, a path in this checkout, e.g. bench/patches/bwd-persistent.patch, to the clone)
#   default: lpt=FA_WS_LPT nosplit=FA_WS_SPLIT_O=0 noqreg=FA_WS_QREG=0
# Then, on the GPU host: AB_ADDON=.devbin/split/addon.xz bash scripts/gpu-run.sh fwd-ab
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
specs=${*:-lpt=FA_WS_LPT nosplit=FA_WS_SPLIT_O=0 noqreg=FA_WS_QREG=0}
for spec in $specs; do
  name=${spec%%=*}; switches=${spec#*=}
  dir=/tmp/fa-ab-$name
  rm -rf "$dir" && git clone -q "$root" "$dir"
  (cd "$dir" && npm ci --ignore-scripts > /dev/null 2>&1)
  envs=(FA_CUDA_ARCHS=90a FA_HEAD_DIMS=64,128,256)
  for sw in ${switches//,/ }; do
    case "$sw" in
      patch:*) (cd "$dir" && git apply "$root/${sw#patch:}") || { echo "ab-builds: $name: ${sw#patch:} does not apply"; exit 1; } ;;
      *=*) envs+=("$sw") ;;
      *) envs+=("$sw=1") ;;
    esac
  done
  echo "ab-builds: $name (${envs[*]})"
  (cd "$dir" && env "${envs[@]}" npm run build:native > "$dir/build.log" 2>&1) || { tail -20 "$dir/build.log"; exit 1; }
  mkdir -p "$root/.devbin/$name"
  # stripped and xz -9 (~5.6 MiB at 90a with three head dims), for the device call's 64 MiB carry
  strip --strip-unneeded "$dir/build/Release/flash_attention_node.node"
  xz -T0 -9 -c "$dir/build/Release/flash_attention_node.node" > "$root/.devbin/$name/addon.xz"
  echo "ab-builds: $name -> .devbin/$name/addon.xz ($(du -h "$root/.devbin/$name/addon.xz" | cut -f1))"
done
