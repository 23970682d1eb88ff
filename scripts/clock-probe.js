#!/usr/bin/env node
// Issue 12: is the gap to cuDNN cycles or clock? Runs our forward (or backward) through the public
// API back to back for CLOCK_SECONDS (default 2.5) on one PERF.md grid cell and prints one JSON line:
// the window (Date.now() at start and end), calls, ms per call and TFLOP/s. scripts/gpu-run.sh's
// `clock` step runs it next to bench/clock_probe_torch.py (cuDNN on the same cell) with nvidia-smi
// sampling the SM clock and power, and prints each window's median clock and power.
// Usage: node scripts/clock-probe.js fwd|bwd float16|bfloat16 D N causal(0|1)
'use strict';
const { flashAttention, flashAttentionBackward, attentionFlops, synchronize } = require('..');
const { randomDevice } = require('./prefill-inputs.js');

const [dir, dtype, Ds, Ns, cz] = process.argv.slice(2);
const D = Number(Ds), N = Number(Ns), causal = cz === '1';
const B = 16384 / N, H = D <= 128 ? 2048 / D : 16;
const seconds = Number(process.env.CLOCK_SECONDS || 2.5);
const rand = (shape, seed) => randomDevice(shape, seed, dtype);

(async () => {
  const shape = [B, N, H, D];
  const q = await rand(shape, 1), k = await rand(shape, 2), v = await rand(shape, 3), dout = await rand(shape, 4);
  const { out, lse } = await flashAttention(q, k, v, { causal });
  const call = dir === 'bwd'
    ? async () => { const g = await flashAttentionBackward(dout, q, k, v, out, lse, { causal }); g.dq.dispose(); g.dk.dispose(); g.dv.dispose(); }
    : async () => { const o = await flashAttention(q, k, v, { causal }); o.out.dispose(); o.lse.dispose(); };
  for (let i = 0; i < 5; i++) await call();
  await synchronize();
  // A first short round sizes the window's call count (the queue is not to run far past it).
  let t0 = performance.now();
  for (let i = 0; i < 10; i++) await call();
  await synchronize();
  const per = (performance.now() - t0) / 10;
  const n = Math.max(20, Math.round((seconds * 1000) / per));
  const w0 = Date.now();
  t0 = performance.now();
  for (let i = 0; i < n; i++) await call();
  await synchronize();
  const ms = (performance.now() - t0) / n;
  const w1 = Date.now();
  const flops = attentionFlops(B, H, N, N, D, causal) * (dir === 'bwd' ? 2.5 : 1);
  console.log(JSON.stringify({ impl: 'ours', dir, dtype, D, N, causal, B, H, win: [w0, w1], calls: n, ms, tflops: flops / ms / 1e9 }));
  [q, k, v, dout, out, lse].forEach((t) => t.dispose());
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
