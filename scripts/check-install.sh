#!/usr/bin/env bash
# Pack-and-install check (run by .ci/run after the tests; by hand: bash scripts/check-install.sh).
#
# npm pack (prepack reuses build/Release when it was built with the default switches), then in a
# fresh directory, with a PATH that holds node, npm, npx and sh only (no nvcc, cmake, compiler, make):
# npm install <tarball> must finish within FA_INSTALL_MAX_S seconds (default 30) without building,
# require() and import must work and load the prebuilt binary, buildInfo() must report CUDA with
# architectures 80 and 90a (only when nvcc was there at pack time: without it the prebuilt is
# CPU-only and cuda: false is expected), and `npx flash-attention-node doctor` must exit 0.
# The tarball must be at most FA_PACK_MAX_MB MB (default 40). Prints what it checked.
set -euo pipefail
cd "$(dirname "$0")/.."
max_s=${FA_INSTALL_MAX_S:-30}
max_mb=${FA_PACK_MAX_MB:-40}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[[ -n ${FA_CHECK_KEEP:-} ]] && trap - EXIT
fail() { echo "install check: FAILED: $*"; exit 1; }
unset FA_ADDON_PATH FA_BUILD_FROM_SOURCE npm_config_build_from_source FA_CUDA FA_CUDA_ARCHS FA_HEAD_DIMS

nvcc=$(command -v nvcc || true)
[[ -z $nvcc && -x /usr/local/cuda/bin/nvcc ]] && nvcc=/usr/local/cuda/bin/nvcc   # as CMakeLists.txt looks
echo "== install check: npm pack (nvcc at pack time: ${nvcc:-none})"
npm pack --pack-destination "$work" --foreground-scripts 2>&1 | grep -v '^npm notice [0-9.]*[kMG]\?B ' || fail "npm pack"
tarball=$(ls "$work"/flash-attention-node-*.tgz)
bytes=$(stat -c %s "$tarball")
echo "   tarball $(basename "$tarball"): $(( bytes / 1048576 )) MB ($bytes bytes, limit $max_mb MB)"
(( bytes <= max_mb * 1048576 )) || fail "the tarball is larger than $max_mb MB"
tar tzf "$tarball" > "$work/contents"
grep -qx "package/prebuilds/linux-x64/flash_attention_node.node" "$work/contents" || fail "no prebuilt binary in the tarball"
grep -qx "package/dist/index.mjs" "$work/contents" || fail "no dist/ in the tarball"

# A PATH with node, npm and npx only (and sh, which npm runs scripts with).
mkdir -p "$work/bin" "$work/app"
for t in node npm npx sh; do ln -s "$(command -v $t)" "$work/bin/$t"; done
for t in nvcc cmake cc gcc g++ c++ make ninja; do
  env -i PATH="$work/bin" /bin/sh -c "command -v $t" >/dev/null && fail "$t is on the restricted PATH"
done
cd "$work/app"
echo '{ "name": "fa-install-check", "version": "1.0.0", "private": true }' > package.json
echo "== install check: npm install <tarball> with PATH=$work/bin"
t0=$(date +%s%N)
PATH="$work/bin" npm install --no-audit --no-fund --foreground-scripts "$tarball" > install.log 2>&1 \
  || { cat install.log; fail "npm install"; }
ms=$(( ($(date +%s%N) - t0) / 1000000 ))
grep "flash-attention-node:" install.log | sed 's/^/   /'
echo "   npm install took $(( ms / 1000 )).$(( ms % 1000 / 100 )) s (limit $max_s s)"
(( ms <= max_s * 1000 )) || fail "npm install took longer than $max_s s"
[[ -e node_modules/flash-attention-node/build ]] && fail "the install built from source"
grep -q "using the prebuilt binary" install.log || fail "the install did not use the prebuilt binary"

want_cuda=false; [[ -n $nvcc ]] && want_cuda=true
PATH="$work/bin" node -e '
const fa = require("flash-attention-node");
const b = fa.buildInfo(), l = fa.loaderInfo(), wantCuda = process.argv[1] === "true";
const fails = [];
if (l.source !== "prebuilt") fails.push(`loaded ${l.source} (${l.path}), not the prebuilt`);
if (b.cuda !== wantCuda) fails.push(`buildInfo().cuda is ${b.cuda}, expected ${wantCuda}`);
if (wantCuda && !["80-real", "90a-real"].every((a) => b.cudaArchs.includes(a))) fails.push(`cudaArchs ${b.cudaArchs}`);
if (typeof fa.flashAttention !== "function" || typeof fa.Tensor.from !== "function") fails.push("API missing");
console.log(`   require: loaded ${l.source}, cuda ${b.cuda}, architectures [${b.cudaArchs.join(", ")}], version ${b.version}`);
if (fails.length) { console.log("   " + fails.join("; ")); process.exit(1); }
' "$want_cuda" || fail "require('flash-attention-node')"
PATH="$work/bin" node --input-type=module -e '
import fa, { buildInfo, loaderInfo, flashAttention, Tensor } from "flash-attention-node";
if (fa.buildInfo !== buildInfo || typeof flashAttention !== "function" || typeof Tensor.from !== "function") process.exit(1);
console.log(`   import: loaded ${loaderInfo().source}, cuda ${buildInfo().cuda}`);
' || fail "import from 'flash-attention-node'"
# npm may be told not to run install scripts (--ignore-scripts; npm's allowScripts): the loader
# finds the prebuilt binary by itself.
mkdir "$work/noscripts" && cd "$work/noscripts" && cp ../app/package.json .
PATH="$work/bin" npm install --no-audit --no-fund --ignore-scripts "$tarball" > install.log 2>&1 \
  || { cat install.log; fail "npm install --ignore-scripts"; }
PATH="$work/bin" node -e 'const fa = require("flash-attention-node"); if (fa.loaderInfo().source !== "prebuilt") process.exit(1);
  console.log(`   with --ignore-scripts: require loads the ${fa.loaderInfo().source} binary`);' || fail "require after --ignore-scripts"
cd "$work/app"
echo "== install check: npx flash-attention-node doctor"
set +e
PATH="$work/bin" npx --no-install flash-attention-node doctor | sed 's/^/   /'
status=${PIPESTATUS[0]}
set -e
(( status == 0 )) || fail "doctor exited with $status"
echo "install check: ok (tarball $(( bytes / 1048576 )) MB, install $(( ms / 1000 )).$(( ms % 1000 / 100 )) s, cuda expected: $want_cuda)"
