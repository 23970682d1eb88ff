// Short prefill calls, where a fixed cost per call shows: the packed call (flashAttentionVarlen) and
// the paged one (page 16, shuffled) on a few short sequences, and the dense call on one of them;
// GPU time of one call by events (paged and dense: benchmarkPaged / benchmarkForward, median of 50) and public-API
// time back to back (5 rounds of >= PROBE_MS ms each, median). One line per call.
// Usage: PROBE_LENS=300,200,100,50 node scripts/short-probe.js
'use strict';
const fa = require('../dist/lib/index.js');
const { benchmarkPaged } = require('../dist/lib/inference.js');
const { benchmarkForward } = require('../dist/lib/attention.js');
const { randomHalf: rnd, shuffled } = require('./prefill-inputs.js');

const MS = Number(process.env.PROBE_MS || 100);
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[s.length >> 1]; };

async function main() {
  const H = 16, D = 128, page = 16;
  const lens = (process.env.PROBE_LENS || '300,200,100,50').split(',').map(Number);
  const B = lens.length, total = lens.reduce((a, b) => a + b, 0), maxL = Math.max(...lens);
  const cu = Int32Array.from({ length: B + 1 }, (_, i) => lens.slice(0, i).reduce((a, b) => a + b, 0));
  const q = await rnd([total, H, D], 31), k = await rnd([total, H, D], 32), v = await rnd([total, H, D], 33);
  const cuT = await fa.Tensor.from(cu, [cu.length]).to('cuda');
  const skT = await fa.Tensor.from(Int32Array.from(lens), [B]).to('cuda');
  const maxPages = Math.ceil(maxL / page);
  const kc = await rnd([B * maxPages, page, H, D], 34), vc = await rnd([B * maxPages, page, H, D], 35);
  const pt = await fa.Tensor.from(shuffled(B * maxPages, 7), [B, maxPages]).to('cuda');
  const popts = { pageTable: pt, seqlensK: skT, cuSeqlensQ: cuT, maxSeqlenQ: maxL, maxSeqlenK: maxL, causal: true };
  const dq = await rnd([1, lens[0], H, D], 36);
  const vopts = { cuSeqlensQ: cuT, cuSeqlensK: cuT, maxSeqlenQ: maxL, maxSeqlenK: maxL, causal: true };
  const calls = [
    ['varlen', async () => { const r = await fa.flashAttentionVarlen(q, k, v, vopts); r.out.dispose(); r.lse.dispose(); }, null],
    ['paged 16', async () => { const r = await fa.pagedAttention(q, kc, vc, popts); r.out.dispose(); r.lse.dispose(); },
      async () => median(await benchmarkPaged(q, kc, vc, popts, 5, 50))],
    [`dense N${lens[0]}`, async () => { const r = await fa.flashAttention(dq, dq, dq, { causal: true }); r.out.dispose(); r.lse.dispose(); },
      async () => median(await benchmarkForward(dq, dq, dq, { causal: true }, 5, 50))],
  ];
  for (const [name, call, events] of calls) {
    for (let i = 0; i < 50; i++) await call();
    await fa.synchronize();
    const t0 = performance.now();
    for (let i = 0; i < 50; i++) await call();
    await fa.synchronize();
    const n = Math.max(50, Math.ceil(MS / ((performance.now() - t0) / 50)));
    const rounds = [];
    for (let r = 0; r < 5; r++) {
      const t = performance.now();
      for (let i = 0; i < n; i++) await call();
      await fa.synchronize();
      rounds.push((performance.now() - t) / n * 1000);
    }
    const ev = events ? `, one call by events ${((await events()) * 1000).toFixed(1)} us` : '';
    console.log(`${name.padEnd(10)} API ${median(rounds).toFixed(1)} us (rounds ${rounds.map((x) => x.toFixed(1)).join(' ')})${ev}`);
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
