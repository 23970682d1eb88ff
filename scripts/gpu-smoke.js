#!/usr/bin/env node
// Small GPU workload for compute-sanitizer runs (memcheck, racecheck): forward and backward on a few
// small shapes covering every dtype, causal with Nq != Nk, GQA, odd lengths, both layouts and a
// head dim that rounds up to a wider tile. Prints one line per case; exits 1 on any failure.
'use strict';
const { Tensor, flashAttention, flashAttentionBackward, buildInfo, devices } = require('..');

if (devices().length === 0) {
  console.error('gpu-smoke: no CUDA device');
  process.exit(2);
}
const rand = (n, seed) => {
  let s = seed;
  return Float32Array.from({ length: n }, () => {
    s = (s * 1103515245 + 12345) >>> 0;
    return (s / 2 ** 32 - 0.5) * 2;
  });
};
const cases = [
  { B: 1, Nq: 7, Nk: 129, H: 2, Hkv: 1, D: 64, dtype: 'float16', causal: true, layout: 'bshd' },
  { B: 2, Nq: 130, Nk: 67, H: 4, Hkv: 2, D: 128, dtype: 'bfloat16', causal: true, layout: 'bhsd' },
  { B: 1, Nq: 65, Nk: 65, H: 2, Hkv: 2, D: 40, dtype: 'float16', causal: false, layout: 'bshd' },
  { B: 1, Nq: 33, Nk: 200, H: 3, Hkv: 3, D: 256, dtype: 'bfloat16', causal: false, layout: 'bshd' },
  { B: 1, Nq: 100, Nk: 100, H: 2, Hkv: 1, D: 64, dtype: 'float32', causal: true, layout: 'bshd' },
  { B: 1, Nq: 17, Nk: 50, H: 2, Hkv: 2, D: 96, dtype: 'float32', causal: false, layout: 'bhsd' },
];
(async () => {
  const bwd = buildInfo().cudaBackward === true;
  let bad = 0;
  for (const c of cases) {
    const shape = (N, H) => (c.layout === 'bhsd' ? [c.B, H, N, c.D] : [c.B, N, H, c.D]);
    const mk = (N, H, seed) => Tensor.from(rand(c.B * N * H * c.D, seed), shape(N, H), { dtype: c.dtype }).to('cuda');
    const [q, k, v, dout] = await Promise.all([mk(c.Nq, c.H, 1), mk(c.Nk, c.Hkv, 2), mk(c.Nk, c.Hkv, 3), mk(c.Nq, c.H, 4)]);
    const opts = { causal: c.causal, layout: c.layout };
    const { out, lse } = await flashAttention(q, k, v, opts);
    const o = await out.toFloat32Array();
    let ok = o.every(Number.isFinite);
    let msg = `fwd ok=${ok}`;
    if (bwd) {
      for (const deterministic of [false, true]) {
        const g = await flashAttentionBackward(dout, q, k, v, out, lse, { ...opts, deterministic });
        for (const t of [g.dq, g.dk, g.dv]) ok = ok && (await t.toFloat32Array()).every(Number.isFinite);
        msg += ` bwd${deterministic ? '(det)' : ''} ok=${ok}`;
      }
    }
    console.log(`${JSON.stringify(c)}: ${msg}`);
    if (!ok) bad++;
  }
  process.exit(bad ? 1 : 0);
})().catch((e) => { console.error(e); process.exit(1); });
