// The CPU backend's decode step: pagedAttention with one query per sequence against a paged cache
// (D 128, page 16, pages shuffled, causal; GQA 32/8 in fp16 / bf16 / fp32, GQA 32/4, an MHA cache,
// H 8 / Hkv 8, where no heads pack, and MQA 8/1 at B 1, one task unless its keys are split), then
// a dense one-query call in both layouts (flashAttention; kv heads sit a token row apart in bshd,
// N rows apart in bhsd).
// Public-API time of awaited calls (the CPU backend settles when done), median of PROBE_IT calls
// (default 9) after one warm-up, and the K/V bytes read per second. Usage: node scripts/cpu-decode-probe.js
// [B x N cells, e.g. 16x4096 1x16384] (default the cells below). FA_ADDON_PATH picks another
// build of the addon, for before / after comparisons.
'use strict';
const fa = require('../dist/lib/index.js');

const IT = Number(process.env.PROBE_IT || 9);
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[s.length >> 1]; };

/** n deterministic inputs in [-0.5, 0.5) from a 32-bit LCG (also used by cpu-prefill-probe.js). */
function uniform(n, seed) {
  const a = new Float32Array(n);
  let x = seed >>> 0;
  for (let i = 0; i < n; i++) {
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    a[i] = x / 4294967296 - 0.5;
  }
  return a;
}

async function cell(B, N, H, Hkv, dtype) {
  const D = 128, page = 16;
  const perSeq = Math.ceil(N / page), pages = B * perSeq;
  const kc = fa.Tensor.from(uniform(pages * page * Hkv * D, 1), [pages, page, Hkv, D], { dtype });
  const vc = fa.Tensor.from(uniform(pages * page * Hkv * D, 2), [pages, page, Hkv, D], { dtype });
  const q = fa.Tensor.from(uniform(B * H * D, 3), [B, H, D], { dtype });
  const order = Array.from({ length: pages }, (_, i) => i);
  let x = 7;
  for (let i = pages - 1; i > 0; i--) {  // a fixed shuffle
    x = (Math.imul(x, 1664525) + 1013904223) >>> 0;
    const j = x % (i + 1);
    [order[i], order[j]] = [order[j], order[i]];
  }
  const opts = {
    pageTable: Int32Array.from(order), seqlensK: new Int32Array(B).fill(N),
    cuSeqlensQ: Int32Array.from({ length: B + 1 }, (_, i) => i), causal: true,
  };
  await fa.pagedAttention(q, kc, vc, opts);
  const ms = [];
  for (let i = 0; i < IT; i++) {
    const t0 = process.hrtime.bigint();
    await fa.pagedAttention(q, kc, vc, opts);
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  const t = median(ms);
  const bytes = 2 * B * N * Hkv * D * (dtype === 'float32' ? 4 : 2);
  return `| ${dtype} | ${B} x ${N} | ${H}/${Hkv} | ${t.toFixed(2)} | ${(bytes / t / 1e6).toFixed(2)} |`;
}

/** A dense one-query call (flashAttention, the kv heads of a task packed) in either layout. */
async function dense(B, N, H, Hkv, dtype, layout) {
  const D = 128;
  const shape = (n, h) => (layout === 'bhsd' ? [B, h, n, D] : [B, n, h, D]);
  const k = fa.Tensor.from(uniform(B * N * Hkv * D, 1), shape(N, Hkv), { dtype });
  const v = fa.Tensor.from(uniform(B * N * Hkv * D, 2), shape(N, Hkv), { dtype });
  const q = fa.Tensor.from(uniform(B * H * D, 3), shape(1, H), { dtype });
  await fa.flashAttention(q, k, v, { layout });
  const ms = [];
  for (let i = 0; i < IT; i++) {
    const t0 = process.hrtime.bigint();
    await fa.flashAttention(q, k, v, { layout });
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  const t = median(ms);
  const bytes = 2 * B * N * Hkv * D * (dtype === 'float32' ? 4 : 2);
  return `| ${dtype}, dense ${layout} | ${B} x ${N} | ${H}/${Hkv} | ${t.toFixed(2)} | ${(bytes / t / 1e6).toFixed(2)} |`;
}

async function main() {
  const args = process.argv.slice(2).map((s) => s.split('x').map(Number)).filter((c) => c.length === 2 && c[0] > 0 && c[1] > 0);
  const cells = args.length
    ? args.map(([B, N]) => [B, N, 32, 8, 'float16'])
    : [[16, 4096, 32, 8, 'float16'], [1, 16384, 32, 8, 'bfloat16'], [4, 4096, 32, 8, 'float32'], [16, 4096, 8, 8, 'float16'], [8, 4096, 32, 4, 'float16'], [1, 65536, 8, 1, 'float16']];
  console.log(`CPU decode through pagedAttention (D 128, page 16, shuffled; ${IT} calls, median), ${require('os').cpus().length} cores`);
  console.log('| dtype | B x cached tokens | H/Hkv | ms per call | K/V GB/s |');
  console.log('| --- | --- | --- | --- | --- |');
  for (const [B, N, H, Hkv, dtype] of cells) console.log(await cell(B, N, H, Hkv, dtype));
  if (!args.length) for (const layout of ['bshd', 'bhsd']) console.log(await dense(4, 4096, 32, 8, 'float16', layout));
}

module.exports = { uniform };
if (require.main === module) main().catch((e) => { console.error(e); process.exit(1); });
