#!/usr/bin/env node
// Racecheck workload for the warp-specialised Hopper backward (bench/NOTES-bwd.md, forty-fourth and
// forty-fifth sessions): dense calls whose walks reuse each Q / dO ring stage many times (N 1024: 16
// row blocks), without and with `deterministic`, full and causal; D 256 by default (the row split).
// Run it under `compute-sanitizer --tool racecheck` (gpu-run.sh's sanitize step does, at D 256 and
// 128); prints one line per call with the gradients' finiteness. RACE_D / RACE_N / RACE_DTYPES change
// the head dim (128 / 64: the key split), the sequence length and the dtypes (comma-separated).
'use strict';
const { Tensor, flashAttention, flashAttentionBackward } = require('..');

const rand = (n, seed) => {
  let s = seed >>> 0;
  return Float32Array.from({ length: n }, () => ((s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32 - 0.5) * 2);
};
(async () => {
  const B = 1, H = 2, N = Number(process.env.RACE_N || 1024), D = Number(process.env.RACE_D || 256);
  for (const dtype of (process.env.RACE_DTYPES || 'float16,bfloat16').split(',')) {
    const up = (seed) => Tensor.from(rand(B * N * H * D, seed), [B, N, H, D], { dtype }).to('cuda');
    const [q, k, v, dout] = await Promise.all([up(1), up(2), up(3), up(4)]);
    for (const causal of [false, true]) {
      const { out, lse } = await flashAttention(q, k, v, { causal });
      for (const deterministic of [false, true]) {
        const g = await flashAttentionBackward(dout, q, k, v, out, lse, { causal, deterministic });
        let ok = true;
        for (const t of [g.dq, g.dk, g.dv]) ok = ok && (await t.toFloat32Array()).every(Number.isFinite);
        console.log(`${dtype} D${D} N${N} causal=${causal} deterministic=${deterministic}: finite=${ok}`);
        g.dq.dispose(); g.dk.dispose(); g.dv.dispose();
      }
      out.dispose(); lse.dispose();
    }
    [q, k, v, dout].forEach((t) => t.dispose());
  }
})().catch((e) => { console.error(e); process.exit(1); });
