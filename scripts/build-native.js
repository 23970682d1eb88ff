#!/usr/bin/env node
// Builds the native addon with cmake-js (run by `npm install` / `npm ci`).
//
// Switches, each as an environment variable or an npm config value
// (`npm install --fa-cuda-archs=90` sets npm_config_fa_cuda_archs):
//   FA_CUDA_ARCHS   CUDA architectures, CMake syntax: default "80-real;90a-real;90-virtual";
//                   "90a" builds for the H100/H200 only (fast development build; "90" leaves out
//                   the wgmma kernel). Commas work too.
//   FA_CUDA         AUTO (default), ON (fail without nvcc) or OFF (CPU backend only)
//   FA_HEAD_DIMS    head-dim tiles to compile, e.g. "64,128" (default: all)
//   FA_BUILD_TOOLS  1 to also build the standalone C++ check/bench binaries
//   FA_JOBS         parallel compile jobs (default: number of cores)
//   FA_TRACE        1: development build whose warp-specialised forward prints a per-tile clock
//                   split at exit (never for a release)
//   FA_WS_SPLIT_O   default 1: the D 256 and W 128 176-key warp-specialised forwards stage O through a
//                   half-width buffer of its own (Sm90WsTraits::kHalfO); 0 for comparisons
//   FA_WS_LPT       1: development build whose causal warp-specialised forward hands out its tiles
//                   longest first within L2-sized sections (ws_coord; FA_WS_LPT_MB=n at run time)
//   FA_WS_QREG      default 1: the D <= 128 warp-specialised forward holds Q in registers (kQReg); 0 for comparisons
//   FA_WS_SKIP_IDLE_WG default 1: in the dense / packed / paged warp-specialised forward a warpgroup whose rows all
//                   lie past the sequence's end walks the tile without products (kSkipIdle); 0 for comparisons
//   FA_WS_LAZY_RESCALE default 1: the warp-specialised forward keeps a reference max per row and rescales O only
//                   where a key block's max passes it by more than 2^8, at D <= 128 with the block's exponentials taken
//                   against it at once (csrc/cuda/fwd_common.cuh); 0 for comparisons
//   FA_BWD_WS_STAGED_DKDV default 1: the Hopper backward kernels (warp-specialised, both splits; cp.async, packed
//                   batches) write dK / dV through shared memory with 16-byte stores; 0 for comparisons (the 4-byte
//                   stores from registers)
//   FA_BWD_WS_TMA_DKDV 1: development build whose warp-specialised backward (key split only) writes dK / dV
//                   through shared memory by tensor-map stores (measured equal to the staged epilogue)
//   FA_BWD_WS_DQ_FIRST default 1: the Hopper backward kernels' key split (warp-specialised at W 128, cp.async at
//                   W 64 / 128) issues each row block's dQ product before dK and writes dQ out while dK runs; 0 for
//                   comparisons
// cmake-js `compile` keeps a configured cache and ignores new -D options, so when the switches
// differ from the last build's this script reconfigures from scratch.
'use strict';
const { spawnSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');

const root = path.resolve(__dirname, '..');
const opt = (name, def) => {
  const env = process.env[name] ?? process.env['npm_config_' + name.toLowerCase()];
  return env === undefined || env === '' ? def : env;
};
const pkg = require(path.join(root, 'package.json'));
const settings = {
  FA_CUDA: opt('FA_CUDA', 'AUTO').toUpperCase(),
  FA_CUDA_ARCHS: opt('FA_CUDA_ARCHS', '80-real;90a-real;90-virtual').replace(/,/g, ';'),
  FA_HEAD_DIMS: opt('FA_HEAD_DIMS', '').replace(/,/g, ';'),
  FA_BUILD_TOOLS: /^(1|on|true|yes)$/i.test(opt('FA_BUILD_TOOLS', '')) ? 'ON' : 'OFF',
  FA_TRACE: /^(1|on|true|yes)$/i.test(opt('FA_TRACE', '')) ? 'ON' : 'OFF',
  FA_WS_SPLIT_O: /^(0|off|false|no)$/i.test(opt('FA_WS_SPLIT_O', '')) ? 'OFF' : 'ON',
  FA_WS_LPT: /^(1|on|true|yes)$/i.test(opt('FA_WS_LPT', '')) ? 'ON' : 'OFF',
  FA_WS_QREG: /^(0|off|false|no)$/i.test(opt('FA_WS_QREG', '')) ? 'OFF' : 'ON',
  FA_WS_SKIP_IDLE_WG: /^(0|off|false|no)$/i.test(opt('FA_WS_SKIP_IDLE_WG', '')) ? 'OFF' : 'ON',
  FA_WS_LAZY_RESCALE: /^(0|off|false|no)$/i.test(opt('FA_WS_LAZY_RESCALE', '')) ? 'OFF' : 'ON',
  FA_BWD_WS_STAGED_DKDV: /^(0|off|false|no)$/i.test(opt('FA_BWD_WS_STAGED_DKDV', '')) ? 'OFF' : 'ON',
  FA_BWD_WS_TMA_DKDV: /^(1|on|true|yes)$/i.test(opt('FA_BWD_WS_TMA_DKDV', '')) ? 'ON' : 'OFF',
  FA_BWD_WS_DQ_FIRST: /^(0|off|false|no)$/i.test(opt('FA_BWD_WS_DQ_FIRST', '')) ? 'OFF' : 'ON',
  FA_VERSION: pkg.version,
};
const jobs = Number(opt('FA_JOBS', String(os.cpus().length))) || 2;

const stampFile = path.join(root, 'build', 'fa-settings.json');
let previous = null;
try { previous = fs.readFileSync(stampFile, 'utf8'); } catch { /* first build */ }
const wanted = JSON.stringify(settings);
const command = previous === wanted ? 'compile' : 'rebuild';

const cmakeJs = require.resolve('cmake-js/bin/cmake-js');
const args = [cmakeJs, command, '-p', String(jobs), '-B', 'Release'];
for (const [k, v] of Object.entries(settings)) args.push(`--CD${k}=${v}`);
console.log(`flash-attention-node: cmake-js ${command} (${Object.entries(settings).map(([k, v]) => `${k}=${v || '(all)'}`).join(' ')})`);
const t0 = Date.now();
const r = spawnSync(process.execPath, args, { cwd: root, stdio: 'inherit' });
if (r.status !== 0) process.exit(r.status ?? 1);
fs.mkdirSync(path.dirname(stampFile), { recursive: true });
fs.writeFileSync(stampFile, wanted);
console.log(`flash-attention-node: native build done in ${((Date.now() - t0) / 60000).toFixed(1)} min`);
