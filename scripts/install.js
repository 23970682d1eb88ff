#!/usr/bin/env node
// The package's `install` script (run by `npm install`, `npm ci`, `npm rebuild`).
//
// Uses the prebuilt addon in prebuilds/<platform>-<arch>/ when it loads on this machine (checked
// by loading it in a child process), so that an install needs no compiler, CMake or nvcc.
// Builds from source with scripts/build-native.js (cmake-js) instead when
//   - asked: `npm install --build-from-source` (npm_config_build_from_source), or FA_BUILD_FROM_SOURCE=1;
//   - this is a git checkout (a .git entry here) or there is no prebuilt for this platform;
//   - the prebuilt does not load here (old glibc/libstdc++, musl, ...).
// FA_BUILD_FROM_SOURCE=0 never builds: the install fails when the prebuilt does not load.
// FA_DEBUG=1 prints the prebuilt check in full.
'use strict';
const { spawnSync } = require('child_process');
const fs = require('fs');
const path = require('path');
const { probeAddon } = require('./addon-probe');

const root = path.resolve(__dirname, '..');
const tag = `${process.platform}-${process.arch}`;
const prebuilt = path.join(root, 'prebuilds', tag, 'flash_attention_node.node');
const say = (msg) => console.log(`flash-attention-node: ${msg}`);
const debugOn = /^(1|true|yes|on)$/i.test(process.env.FA_DEBUG || '');

// npm passes `--build-from-source` as npm_config_build_from_source=true; node-pre-gyp's form
// `--build-from-source=<package name>` counts too.
function buildFromSourceAsked() {
  const flag = process.env.npm_config_build_from_source;
  const env = process.env.FA_BUILD_FROM_SOURCE;
  if (env !== undefined && env !== '') return /^(1|true|yes|on)$/i.test(env);
  if (flag === undefined || flag === '' || /^(false|0)$/i.test(flag)) return null;
  return flag === 'true' || flag.split(',').includes('flash-attention-node');
}

// Returns null when the prebuilt loads here (checked in a child process), else why not.
function prebuiltProblem() {
  if (!fs.existsSync(prebuilt)) return `there is no prebuilt binary for ${tag}`;
  const r = probeAddon(prebuilt);
  if (debugOn) say(`prebuilt check of ${prebuilt}: ${JSON.stringify(r)}`);
  if (r.error) return `it does not load here: ${r.error}`;
  say(`using the prebuilt binary for ${tag} (version ${r.info.version}, ` +
    `${r.info.cuda ? `CUDA architectures ${r.info.cudaArchs.join(', ')}` : 'CPU backend only'})`);
  return null;
}

function buildFromSource(why) {
  say(`building from source: ${why}`);
  const r = spawnSync(process.execPath, [path.join(__dirname, 'build-native.js')], { cwd: root, stdio: 'inherit' });
  if (r.status !== 0) {
    console.error(`flash-attention-node: the source build failed (${why}).\n` +
      '  It needs CMake >= 3.18 and a C++17 compiler (and nvcc from CUDA 12.x/13.x for the GPU backend).\n' +
      '  Run `npx flash-attention-node doctor` after a successful install for a report.');
    process.exit(r.status ?? 1);
  }
}

const asked = buildFromSourceAsked();
if (asked === true) {
  buildFromSource('asked for (--build-from-source / FA_BUILD_FROM_SOURCE=1)');
} else if (asked === null && fs.existsSync(path.join(root, '.git'))) {
  buildFromSource('this is a git checkout (set FA_BUILD_FROM_SOURCE=0 to use a prebuilt instead)');
} else {
  const problem = prebuiltProblem();
  if (problem === null) {
    const switches = Object.keys(process.env).filter((k) => /^(FA_CUDA|FA_CUDA_ARCHS|FA_HEAD_DIMS)$/.test(k) ||
      /^npm_config_fa_(cuda|cuda_archs|head_dims)$/.test(k));
    if (switches.length) say(`note: ${switches.join(', ')} only apply to a source build (--build-from-source)`);
  } else if (asked === false) {
    console.error(`flash-attention-node: FA_BUILD_FROM_SOURCE=0 but the prebuilt binary cannot be used: ${problem}`);
    process.exit(1);
  } else {
    buildFromSource(problem);
  }
}
