// Wave quantization of the persistent forward (development probe): the dense full-mask call at tile
// counts that fill the last round of the 132 SMs' tiles or leave it partly empty, with the same tile
// shape and per-tile work (only the batch x heads count changes). Public-API time of back-to-back
// calls, in turns (5 rounds of >= PROBE_MS ms, the order turned each round, median); TFLOP/s and
// tiles per SM; beside it the GPU time of one call by events after a short idle (a burst of 9 calls,
// median), where the clock is not yet held down by the power limit. PROBE_CELLS=D:N:B:H;... (default below: D 128 N 4k and 16k, D 256 N 2k and 4k).
// Usage: node scripts/wave-probe.js
'use strict';
const fa = require('../dist/lib/index.js');
const { benchmarkForward } = require('../dist/lib/attention.js');
const { randomHalf: rnd } = require('./prefill-inputs.js');

const MS = Number(process.env.PROBE_MS || 60);
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[s.length >> 1]; };
const DEF = '128:4096:4:16;128:4096:2:33;128:4096:4:17;128:16384:1:16;128:16384:1:33;256:2048:8:16;256:2048:4:33;256:4096:4:16;256:4096:2:33';

async function main() {
  const cells = (process.env.PROBE_CELLS || DEF).split(';').map((s) => s.split(':').map(Number));
  const calls = [];
  for (const [D, N, B, H] of cells) {
    const q = await rnd([B, N, H, D], 1), k = await rnd([B, N, H, D], 2), v = await rnd([B, N, H, D], 3);
    const bm = 128;  // (row tile of the D 128 / 256 kernels)
    const tiles = B * H * Math.ceil(N / bm);
    const flops = 4 * B * H * N * N * D;
    calls.push({ name: `D${D} N${N} B${B} H${H} (${tiles} tiles, ${(tiles / 132).toFixed(2)} per SM)`, flops,
      f: async () => { const r = await fa.flashAttention(q, k, v); r.out.dispose(); r.lse.dispose(); },
      ev: async () => median(await benchmarkForward(q, k, v, {}, 2, 9)), rounds: [], evs: [] });
  }
  for (const c of calls) { for (let i = 0; i < 5; i++) await c.f(); }
  await fa.synchronize();
  for (const c of calls) {
    const t0 = performance.now();
    for (let i = 0; i < 5; i++) await c.f();
    await fa.synchronize();
    c.n = Math.max(5, Math.ceil(MS / ((performance.now() - t0) / 5)));
  }
  for (let r = 0; r < 5; r++) {
    for (let j = 0; j < calls.length; j++) {
      const c = calls[(j + r) % calls.length];
      const t = performance.now();
      for (let i = 0; i < c.n; i++) await c.f();
      await fa.synchronize();
      c.rounds.push((performance.now() - t) / c.n);
      await new Promise((r) => setTimeout(r, 150));  // a short idle: the next burst starts cooler
      c.evs.push(await c.ev());
    }
  }
  for (const c of calls) {
    const ms = median(c.rounds);
    const ev = median(c.evs);
    console.log(`${c.name.padEnd(48)} ${(c.flops / ms / 1e9).toFixed(1)} TFLOP/s  (${ms.toFixed(3)} ms; rounds ${c.rounds.map((x) => (c.flops / x / 1e9).toFixed(0)).join(' ')})` +
      `; burst by events ${(c.flops / ev / 1e9).toFixed(1)} (${c.evs.map((x) => (c.flops / x / 1e9).toFixed(0)).join(' ')})`);
  }
}

main().catch((e) => { console.error(e); process.exit(1); });
