#!/usr/bin/env node
// Deterministic-backward check (development): the same backward call repeated, dq / dk / dv compared
// bit for bit with the first run; prints the number of differing elements per run and tensor.
// For dq it also lists the 64-row blocks (head:block) that hold the differences of the first run
// that differs. DET_CASES=<substring> keeps the cases whose name contains it.
// Usage: node scripts/det-check.js [runs=8]
'use strict';
const { Tensor, flashAttention, flashAttentionBackward } = require('..');

const cases = [
  { name: 'D256 causal GQA 700x1000', B: 1, Nq: 700, Nk: 1000, H: 2, Hkv: 1, D: 256, opts: { causal: true } },
  { name: 'D256 window 650', B: 2, Nq: 650, Nk: 650, H: 2, Hkv: 2, D: 256, opts: { window: [200, 30] } },
  { name: 'D256 full 1024', B: 2, Nq: 1024, Nk: 1024, H: 4, Hkv: 4, D: 256, opts: {} },
  { name: 'D128 causal 2048', B: 2, Nq: 2048, Nk: 2048, H: 8, Hkv: 2, D: 128, opts: { causal: true } },
  { name: 'D128 full 1000', B: 2, Nq: 1000, Nk: 1000, H: 4, Hkv: 4, D: 128, opts: {} },
  { name: 'D64 full 2048', B: 2, Nq: 2048, Nk: 2048, H: 8, Hkv: 8, D: 64, opts: {} },
  { name: 'D64 causal 1500x1700', B: 2, Nq: 1500, Nk: 1700, H: 8, Hkv: 2, D: 64, opts: { causal: true } },
];
const rand = (n, seed) => {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32 - 0.5) * 2);
};
(async () => {
  const runs = Number(process.argv[2] || 8);
  for (const c of cases.filter((x) => !process.env.DET_CASES || x.name.includes(process.env.DET_CASES))) {
    for (const dtype of ['float16', 'bfloat16']) {
      const up = (shape, seed) => Tensor.from(rand(shape.reduce((a, b) => a * b), seed), shape, { dtype }).to('cuda');
      const q = await up([c.B, c.Nq, c.H, c.D], 1), k = await up([c.B, c.Nk, c.Hkv, c.D], 2);
      const v = await up([c.B, c.Nk, c.Hkv, c.D], 3), dout = await up([c.B, c.Nq, c.H, c.D], 4);
      const f = await flashAttention(q, k, v, c.opts);
      let first = null;
      const diffs = [];
      let where = '';
      for (let r = 0; r < runs; r++) {
        const g = await flashAttentionBackward(dout, q, k, v, f.out, f.lse, { ...c.opts, deterministic: true });
        const arrs = [await g.dq.toTypedArray(), await g.dk.toTypedArray(), await g.dv.toTypedArray()];
        [g.dq, g.dk, g.dv].forEach((t) => t.dispose());
        if (first === null) { first = arrs; continue; }
        diffs.push(arrs.map((a, i) => { let n = 0; for (let j = 0; j < a.length; j++) if (a[j] !== first[i][j]) n++; return n; }).join('/'));
        if (!where) {
          const blocks = new Map();
          arrs[0].forEach((x, j) => {
            if (x === first[0][j]) return;
            const h = Math.floor(j / c.D) % c.H, r = Math.floor(j / (c.D * c.H)) % c.Nq;
            const key = `${h}:${r >> 6}`;
            blocks.set(key, (blocks.get(key) || 0) + 1);
          });
          if (blocks.size) where = ' dq row blocks (head:block=count): ' + [...blocks].slice(0, 24).map(([k, n]) => `${k}=${n}`).join(' ');
        }
      }
      console.log(`${c.name} ${dtype}: differing elements dq/dk/dv per run: ${diffs.join(' ')}${where}`);
      [q, k, v, dout, f.out, f.lse].forEach((t) => t.dispose());
    }
  }
})().catch((e) => { console.error(e); process.exitCode = 1; });
