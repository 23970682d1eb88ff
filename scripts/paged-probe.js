// Issue 11's paged prefill: where its gap to the packed (varlen) call comes from. The varlen bench's
// sequences (fp16, D 128, H 16, causal, lengths 100..8k, 16k tokens) through flashAttentionVarlen and
// through pagedAttention on caches that differ in one thing at a time:
//   sparse   the bench's cache: B * ceil(8192 / page) pages (5.6x the rows in use), shuffled
//   compact  exactly the pages the sequences use, shuffled
//   ordered  exactly those pages, each sequence's in order and after the previous sequence's (at
//            page 256 nearly the packed layout)
//   host     sparse, with Int32Array index arrays (no decode launch: min_seqlen_q; the sequences
//            dealt the most keys first); also the packed call with Int32Array index arrays
// Public-API time of back-to-back calls, in turns (every call's round of >= MS ms, PROBE_MS, default
// 100; the order turned by one each round, 3 rounds, median). Usage: node scripts/paged-probe.js
// [pages...] (default 16 256).
'use strict';
const fa = require('../dist/lib/index.js');
const { randomHalf: rnd, shuffled } = require('./prefill-inputs.js');

const MS = Number(process.env.PROBE_MS || 100);
// PROBE_KINDS=sparse,ordered,...: only these caches (default all four)
const KINDS = (process.env.PROBE_KINDS || 'sparse,host,compact,ordered').split(',');

const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[s.length >> 1]; };

async function main() {
  const pageSizes = process.argv.slice(2).map(Number).filter((x) => x > 0);
  // PROBE_H / PROBE_D: other heads / head dim (default the bench's 16 / 128)
  const H = Number(process.env.PROBE_H || 16), D = Number(process.env.PROBE_D || 128);
  // PROBE_LENS=a,b,...: other sequence lengths (default the varlen bench's, longest first)
  const lens = process.env.PROBE_LENS ? process.env.PROBE_LENS.split(',').map(Number) : [8192, 3000, 1800, 1200, 700, 500, 300, 200, 150, 100, 242];
  const B = lens.length;
  const total = lens.reduce((a, b) => a + b, 0);
  const maxL = Math.max(...lens);
  const cu = Int32Array.from({ length: B + 1 }, (_, i) => lens.slice(0, i).reduce((a, b) => a + b, 0));
  const q = await rnd([total, H, D], 31), k = await rnd([total, H, D], 32), v = await rnd([total, H, D], 33);
  const cuT = await fa.Tensor.from(cu, [cu.length]).to('cuda');
  const skH = Int32Array.from(lens);
  const skT = await fa.Tensor.from(skH, [B]).to('cuda');
  const calls = [];
  const names = [];
  const add = (name, fn) => { names.push(name); calls.push(fn); };
  add('varlen', async () => {
    const r = await fa.flashAttentionVarlen(q, k, v, { cuSeqlensQ: cuT, cuSeqlensK: cuT, maxSeqlenQ: maxL, maxSeqlenK: maxL, causal: true });
    r.out.dispose(); r.lse.dispose();
  });
  if (KINDS.includes('host')) {
    add('varlen host', async () => {
      const r = await fa.flashAttentionVarlen(q, k, v, { cuSeqlensQ: cu, cuSeqlensK: cu, causal: true });
      r.out.dispose(); r.lse.dispose();
    });
  }
  for (const page of pageSizes.length ? pageSizes : [16, 256]) {
    const maxPages = Math.ceil(maxL / page);
    const used = lens.map((n) => Math.ceil(n / page));
    const nUsed = used.reduce((a, b) => a + b, 0);
    // sparse: the bench's table (pages B * maxPages, shuffled, row b = entries b * maxPages ..)
    const sparse = shuffled(B * maxPages, 7);
    // compact: nUsed pages shuffled, laid into the rows; ordered: 0, 1, 2, ... in row order
    const perm = shuffled(nUsed, 7);
    const compact = new Int32Array(B * maxPages), ordered = new Int32Array(B * maxPages);
    let next = 0;
    for (let b = 0; b < B; b++) for (let j = 0; j < used[b]; j++, next++) { compact[b * maxPages + j] = perm[next]; ordered[b * maxPages + j] = next; }
    const kind = [['sparse', B * maxPages, sparse], ['compact', nUsed, compact], ['ordered', nUsed, ordered]];
    for (const [name, pages, table] of kind) {
      if (!KINDS.includes(name)) continue;
      const kc = await rnd([pages, page, H, D], 34), vc = await rnd([pages, page, H, D], 35);
      const pt = await fa.Tensor.from(table, [B, maxPages]).to('cuda');
      const opts = { pageTable: pt, seqlensK: skT, cuSeqlensQ: cuT, maxSeqlenQ: maxL, maxSeqlenK: maxL, causal: true };
      add(`page ${page} ${name}`, async () => { const r = await fa.pagedAttention(q, kc, vc, opts); r.out.dispose(); r.lse.dispose(); });
      if (name === 'sparse' && KINDS.includes('host')) {
        const optsH = { pageTable: table, seqlensK: skH, cuSeqlensQ: cu, maxSeqlenQ: maxL, maxSeqlenK: maxL, causal: true };
        add(`page ${page} sparse host`, async () => { const r = await fa.pagedAttention(q, kc, vc, optsH); r.out.dispose(); r.lse.dispose(); });
      }
    }
  }
  for (const c of calls) for (let i = 0; i < 3; i++) await c();
  await fa.synchronize();
  // Calls per round: MS over the first call's time back to back (10 calls after the warm-up).
  const t0 = performance.now();
  for (let i = 0; i < 10; i++) await calls[0]();
  await fa.synchronize();
  const n = Math.max(10, Math.ceil(MS / ((performance.now() - t0) / 10)));
  const rounds = calls.map(() => []);
  const windows = [];  // [name, start, end] in ms since the epoch (to match a clock log)
  for (let r = 0; r < 3; r++) {
    for (let j = 0; j < calls.length; j++) {
      const i = (j + r) % calls.length;
      const t0 = performance.now(), w0 = Date.now();
      for (let c = 0; c < n; c++) await calls[i]();
      await fa.synchronize();
      rounds[i].push((performance.now() - t0) / n);
      windows.push([names[i], w0, Date.now()]);
    }
  }
  if (process.env.PROBE_WINDOWS) require('fs').writeFileSync(process.env.PROBE_WINDOWS, JSON.stringify(windows));
  const base = median(rounds[0]);
  for (let i = 0; i < calls.length; i++) {
    const m = median(rounds[i]);
    console.log(`${names[i].padEnd(26)} ${m.toFixed(3)} ms  (rounds ${rounds[i].map((x) => x.toFixed(3)).join(' ')})  / varlen ${(m / base).toFixed(3)}`);
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
