// Issue 11's "page size 1 within 15% of page size 16", read in turns: the decode bench's cells (GQA 32 / 8,
// D 128, fp16, one query per sequence, pages shuffled as `npm run bench -- --decode` shuffles them) at page 1 and
// page 16 for each batch size, their public-API rounds of back-to-back calls alternating, so that both page
// sizes see the same load history and clock (the bench times them minutes apart).
// Rounds of >= PROBE_MS ms (default 100), PROBE_ROUNDS per call (default 5, the first dropped as load only),
// the order turned by one each round; medians. Usage: node scripts/decode-page-turns.js [B...] (default 1 16 64),
// PROBE_N (default 16384), PROBE_PAGES (default 1,16).
'use strict';
const fa = require('../dist/lib/index.js');
const { randomHalf: rnd, shuffled } = require('./prefill-inputs.js');

const MS = Number(process.env.PROBE_MS || 100);
const ROUNDS = Number(process.env.PROBE_ROUNDS || 5);
const N = Number(process.env.PROBE_N || 16384);
const PAGES = (process.env.PROBE_PAGES || '1,16').split(',').map(Number);
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[s.length >> 1]; };

async function cell(B) {
  const H = 32, Hkv = 8, D = 128;
  const q = await rnd([B, H, D], 23);
  const cuT = await fa.Tensor.from(Int32Array.from({ length: B + 1 }, (_, i) => i), [B + 1]).to('cuda');
  const skT = await fa.Tensor.from(new Int32Array(B).fill(N), [B]).to('cuda');
  const setups = [];
  for (const page of PAGES) {
    const maxPages = Math.ceil(N / page), pages = B * maxPages;
    const kc = await rnd([pages, page, Hkv, D], 21), vc = await rnd([pages, page, Hkv, D], 22);
    const pt = await fa.Tensor.from(shuffled(pages, B * 31 + N), [B, maxPages]).to('cuda');
    const opts = { pageTable: pt, seqlensK: skT, cuSeqlensQ: cuT, maxSeqlenQ: 1, maxSeqlenK: N, causal: true };
    const call = async () => { const r = await fa.pagedAttention(q, kc, vc, opts); r.out.dispose(); r.lse.dispose(); };
    setups.push({ page, call, dispose: () => [kc, vc, pt].forEach((t) => t.dispose()) });
  }
  for (const s of setups) for (let i = 0; i < 20; i++) await s.call();
  await fa.synchronize();
  const t0 = performance.now();
  for (let i = 0; i < 20; i++) await setups[0].call();
  await fa.synchronize();
  const n = Math.max(20, Math.ceil(MS / ((performance.now() - t0) / 20)));
  const rounds = setups.map(() => []);
  for (let r = 0; r < ROUNDS; r++) {
    for (let j = 0; j < setups.length; j++) {
      const i = (j + r) % setups.length;
      const t1 = performance.now();
      for (let c = 0; c < n; c++) await setups[i].call();
      await fa.synchronize();
      if (r > 0) rounds[i].push((performance.now() - t1) / n);
    }
  }
  const bytes = 2 * B * N * Hkv * D * 2;
  const us = rounds.map((x) => median(x) * 1000);
  const ref = us[PAGES.indexOf(16)] ?? us[us.length - 1];
  for (const [i, s] of setups.entries()) {
    const tb = bytes / (us[i] / 1e6) / 1e12;
    console.log(`B${B} N${N} page ${String(s.page).padStart(3)}: ${us[i].toFixed(1)} us per call, ${tb.toFixed(2)} TB/s, ` +
      `time / page 16 ${(us[i] / ref).toFixed(3)} (rounds ${rounds[i].map((x) => (x * 1000).toFixed(1)).join(' ')})`);
  }
  setups.forEach((s) => s.dispose());
  [q, cuT, skT].forEach((t) => t.dispose());
}

async function main() {
  const bs = process.argv.slice(2).map(Number).filter((x) => x > 0);
  for (const B of bs.length ? bs : [1, 16, 64]) await cell(B);
}

main().catch((e) => { console.error(e); process.exit(1); });
