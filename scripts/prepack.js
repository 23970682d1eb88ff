#!/usr/bin/env node
// `npm pack` / `npm publish` (prepack): puts the prebuilt addon for this platform into
// prebuilds/<platform>-<arch>/, so that installing the package needs no compiler.
//
// The prebuilt is the default build (FA_CUDA_ARCHS "80-real;90a-real;90-virtual", every head dim,
// CUDA runtime linked statically). build/Release is reused when build/fa-settings.json says it was
// built with the defaults (then build-native.js only recompiles what changed); otherwise it is
// rebuilt with the defaults. Without nvcc the prebuilt is CPU-only (said so loudly); with nvcc a
// CPU-only build is rebuilt with FA_CUDA=ON. The copy is stripped (strip --strip-unneeded) and
// described in prebuilds/<tag>/build-info.json (settings, buildInfo(), the glibc / libstdc++ symbol
// versions it needs). postpack.js removes prebuilds/ again.
'use strict';
const { spawnSync, execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');
const { probeAddon } = require('./addon-probe');

const root = path.resolve(__dirname, '..');
const pkg = require(path.join(root, 'package.json'));
const tag = `${process.platform}-${process.arch}`;
const built = path.join(root, 'build', 'Release', 'flash_attention_node.node');
const outDir = path.join(root, 'prebuilds', tag);
const out = path.join(outDir, 'flash_attention_node.node');
const say = (msg) => console.log(`flash-attention-node prepack: ${msg}`);
const DEFAULTS = { FA_CUDA: 'AUTO', FA_CUDA_ARCHS: '80-real;90a-real;90-virtual', FA_HEAD_DIMS: '', FA_BUILD_TOOLS: 'OFF' };

function nvccPath() {
  for (const dir of (process.env.PATH || '').split(path.delimiter)) {
    if (dir && fs.existsSync(path.join(dir, 'nvcc'))) return path.join(dir, 'nvcc');
  }
  return fs.existsSync('/usr/local/cuda/bin/nvcc') ? '/usr/local/cuda/bin/nvcc' : null; // as CMakeLists.txt
}

function stamp() {
  try { return JSON.parse(fs.readFileSync(path.join(root, 'build', 'fa-settings.json'), 'utf8')); } catch { return null; }
}

function isDefaultBuild(s) {
  return s !== null && fs.existsSync(built) && s.FA_VERSION === pkg.version &&
    Object.entries(DEFAULTS).every(([k, v]) => s[k] === v);
}

// build-native.js with the default switches (FA_* from the environment and npm config dropped).
function buildDefaults(extra = {}) {
  const env = { ...process.env, ...extra };
  for (const k of Object.keys(env)) {
    if (/^(npm_config_)?fa_(cuda|cuda_archs|head_dims|build_tools)$/i.test(k) && !(k in extra)) delete env[k];
  }
  const r = spawnSync(process.execPath, [path.join(__dirname, 'build-native.js')], { cwd: root, env, stdio: 'inherit' });
  if (r.status !== 0) throw new Error(`the native build failed (exit status ${r.status})`);
}

function buildInfoOf(file) {
  const r = probeAddon(file, 60_000);
  if (r.error) throw new Error(`${file} does not load: ${r.stderr || r.error}`);
  return r.info;
}

// Highest GLIBC_x.y / GLIBCXX_3.4.z / CXXABI_1.3.z symbol version named in the binary.
function maxSymbolVersion(buf, prefix) {
  const cmp = (a, b) => {
    for (let i = 0; i < Math.max(a.length, b.length); i++) if ((a[i] ?? 0) !== (b[i] ?? 0)) return (a[i] ?? 0) - (b[i] ?? 0);
    return 0;
  };
  let best = null;
  for (const m of buf.toString('latin1').matchAll(new RegExp(`\\b${prefix}_(\\d+(?:\\.\\d+)+)`, 'g'))) {
    const v = m[1].split('.').map(Number);
    if (!best || cmp(v, best) > 0) best = v;
  }
  return best ? best.join('.') : null;
}

function main() {
  const nvcc = nvccPath();
  const s = stamp();
  if (isDefaultBuild(s)) {
    say('build/Release was built with the default switches: bringing it up to date');
  } else {
    say(`build/Release ${s ? `was built with other switches (${JSON.stringify(s)})` : 'is missing'}: ` +
      'building with the defaults (minutes)');
  }
  buildDefaults();
  let info = buildInfoOf(built);
  if (!info.cuda && nvcc) {
    say(`the build has no CUDA although ${nvcc} exists: rebuilding with FA_CUDA=ON`);
    buildDefaults({ FA_CUDA: 'ON' });
    info = buildInfoOf(built);
  }
  if (!info.cuda) say('WARNING: no nvcc on this machine: the prebuilt binary is CPU-only');

  fs.rmSync(path.join(root, 'prebuilds'), { recursive: true, force: true });
  fs.mkdirSync(outDir, { recursive: true });
  fs.copyFileSync(built, out);
  let stripped = false;
  try {
    execFileSync('strip', ['--strip-unneeded', out], { stdio: 'inherit' });
    stripped = true;
  } catch (e) {
    say(`WARNING: strip failed (${e.message.split('\n')[0]}): the prebuilt keeps its symbols`);
  }
  const after = buildInfoOf(out);   // the stripped copy must still load
  const buf = fs.readFileSync(out);
  const meta = {
    package: `${pkg.name}@${pkg.version}`,
    platform: tag,
    settings: stamp(),
    buildInfo: { cuda: after.cuda, cudaArchs: after.cudaArchs, cudaHeadDims: after.cudaHeadDims,
      cudaBackward: after.cudaBackward, cudaRuntimeVersion: after.cudaRuntimeVersion, version: after.version },
    requires: { glibc: maxSymbolVersion(buf, 'GLIBC'), glibcxx: maxSymbolVersion(buf, 'GLIBCXX'),
      cxxabi: maxSymbolVersion(buf, 'CXXABI'), napi: after.napiVersion },
    builtOn: { node: process.version, date: new Date().toISOString().slice(0, 10) },
    stripped,
    bytes: buf.length,
  };
  fs.writeFileSync(path.join(outDir, 'build-info.json'), JSON.stringify(meta, null, 2) + '\n');
  say(`${path.relative(root, out)}: ${(buf.length / 2 ** 20).toFixed(1)} MiB` +
    `${stripped ? ' (stripped)' : ''}, ${after.cuda ? `CUDA ${after.cudaArchs.join(', ')}` : 'CPU only'}, ` +
    `needs glibc >= ${meta.requires.glibc}, libstdc++ GLIBCXX >= ${meta.requires.glibcxx}`);
}

try {
  main();
} catch (e) {
  console.error(`flash-attention-node prepack: ${e.message}`);
  process.exit(1);
}
