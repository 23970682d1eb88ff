#!/usr/bin/env node
// Issue 12: ours against cuDNN with the two implementations' rounds in turns on the GPU, so that both
// are timed in the same power and clock state. (The grid's protocol, bench/cli.ts, times all of
// ours and then all of torch for a cell, each after its own load history: over the thirty-second
// session's forward grid the median SM clock of our rounds was 1654 MHz and of cuDNN's 1800, while
// at a steady 2.5 s load both ran at 1.58-1.79 GHz, tenth session.)
//
// Per PERF.md grid cell: our public-API rounds (back-to-back calls on device tensors, each awaited,
// outputs disposed, closed by synchronize(); wall time / calls) and cuDNN rounds through SDPA
// (bench/turns_torch.py in a second process: back-to-back calls, CUDA events around the round)
// alternate, each round at least TURNS_MS (100) ms, TURNS_ROUNDS (7) rounds, the order of the sides
// turned by one every round; the first round of each side is load only, the figure is the median
// of the others. cuDNN's backward = its forward + backward round less its forward round (PERF.md).
// One JSON line per cell and side (with the rounds' windows, for the SM clock log) to TURNS_JSONL,
// and a markdown table on stdout.
//
// Usage: node scripts/turns-probe.js  (env: TURNS_CELLS "dtype:D:N:causal ..." (default the fp16 /
// bf16 grid), TURNS_DIRS fwd|fwd,bwd, TURNS_MS, TURNS_ROUNDS, TURNS_JSONL)
'use strict';
const { spawn } = require('node:child_process');
const fs = require('node:fs');
const path = require('node:path');
const readline = require('node:readline');
const { flashAttention, flashAttentionBackward, attentionFlops, synchronize } = require('..');
const { randomDevice } = require('./prefill-inputs.js');

const dirs = (process.env.TURNS_DIRS || 'fwd,bwd').split(',');
const roundMs = Number(process.env.TURNS_MS || 100);
const rounds = Math.max(2, Number(process.env.TURNS_ROUNDS || 7));
const jsonl = process.env.TURNS_JSONL || '';

function defaultCells() {
  const out = [];
  for (const dt of ['float16', 'bfloat16'])
    for (const D of [64, 128, 256]) for (const c of [0, 1]) for (const N of [512, 1024, 2048, 4096, 8192, 16384]) out.push(`${dt}:${D}:${N}:${c}`);
  return out;
}
const cells = (process.env.TURNS_CELLS ? process.env.TURNS_CELLS.split(/\s+/).filter(Boolean) : defaultCells()).map((s) => {
  const [dtype, D, N, c] = s.split(':');
  return { dtype, D: Number(D), N: Number(N), causal: c === '1' };
});

const median = (xs) => {
  const v = [...xs].sort((a, b) => a - b), m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
};

const rand = (shape, dtype, seed) => randomDevice(shape, seed, dtype);

/** The torch process and a request function (one JSON line out, one back). */
function startTorch() {
  const py = spawn('python3', ['-u', path.join(__dirname, '..', 'bench', 'turns_torch.py')], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = readline.createInterface({ input: py.stdout });
  const waiting = [], arrived = [];
  let exited = null;
  lines.on('line', (l) => { const w = waiting.shift(); if (w) w(JSON.parse(l)); else arrived.push(JSON.parse(l)); });
  py.on('exit', (code) => {
    exited = { error: `torch process exited (${code})` };
    while (waiting.length) waiting.shift()(exited);
  });
  const ask = (obj) => new Promise((resolve) => {
    if (obj && !exited) py.stdin.write(JSON.stringify(obj) + '\n');
    if (arrived.length) resolve(arrived.shift());
    else if (exited) resolve(exited);
    else waiting.push(resolve);
  });
  return { py, ask };
}

async function ourRound(call, n) {
  const w0 = Date.now();
  const t0 = performance.now();
  for (let i = 0; i < n; i++) await call();
  await synchronize();
  return { ms: (performance.now() - t0) / n, win: [w0, Date.now()] };
}

(async () => {
  const torch = startTorch();
  const hello = await torch.ask(null);  // the process's first line: versions
  if (hello.error) throw new Error(hello.error);
  console.log(`turns probe: torch ${hello.torch}, cuDNN ${hello.cudnn}, ${hello.gpu}; rounds of >= ${roundMs} ms, ${rounds} per side (first dropped), order turned each round`);
  if (jsonl) fs.writeFileSync(jsonl, '');
  const rows = [];
  for (const c of cells) {
    const B = 16384 / c.N, H = c.D <= 128 ? 2048 / c.D : 16;
    const shape = [B, c.N, H, c.D];
    const name = `${c.dtype} D${c.D} ${c.causal ? 'causal' : 'full'} N${c.N}`;
    const q = await rand(shape, c.dtype, 1), k = await rand(shape, c.dtype, 2), v = await rand(shape, c.dtype, 3);
    const dout = await rand(shape, c.dtype, 4);
    const { out, lse } = await flashAttention(q, k, v, { causal: c.causal });
    try {
      const setup = await torch.ask({ op: 'setup', dtype: c.dtype, D: c.D, N: c.N, causal: c.causal, dirs: dirs.includes('bwd') ? ['fwd', 'bwd'] : ['fwd'] });
      if (setup.error) { console.log(`${name}: torch: ${setup.error}`); continue; }
      const ours = {
        fwd: async () => { const o = await flashAttention(q, k, v, { causal: c.causal }); o.out.dispose(); o.lse.dispose(); },
        bwd: async () => { const g = await flashAttentionBackward(dout, q, k, v, out, lse, { causal: c.causal }); g.dq.dispose(); g.dk.dispose(); g.dv.dispose(); },
      };
      // Sides: ours fwd / bwd, torch fwd / fwd+bwd; calls per round from a guess of the call's time.
      const sides = [];
      for (const d of dirs) {
        for (let i = 0; i < 3; i++) await ours[d]();
        await synchronize();
        const g = await ourRound(ours[d], 5);
        sides.push({ impl: 'ours', dir: d, n: Math.max(10, Math.ceil(roundMs / g.ms)) });
        sides.push({ impl: 'cudnn', dir: d, n: Math.max(10, Math.ceil(roundMs / setup.guess[d])) });
      }
      // cuDNN's backward is read as its forward + backward less its forward: TURNS_DIRS=bwd still times the latter
      if (!dirs.includes('fwd')) sides.push({ impl: 'cudnn', dir: 'fwd', n: Math.max(10, Math.ceil(roundMs / setup.guess.fwd)) });
      for (const s of sides) { s.ms = []; s.wins = []; }
      let failed = '';
      for (let r = 0; r < rounds && !failed; r++) {
        for (let j = 0; j < sides.length; j++) {
          const s = sides[(j + r) % sides.length];
          const res = s.impl === 'ours' ? await ourRound(ours[s.dir], s.n) : await torch.ask({ op: 'round', dir: s.dir, n: s.n });
          if (res.error) { failed = res.error; break; }
          if (r > 0) { s.ms.push(res.ms); s.wins.push(res.win); }
        }
      }
      if (failed) { console.log(`${name}: ${failed}`); continue; }
      const get = (impl, dir) => sides.find((s) => s.impl === impl && s.dir === dir);
      const fwdFlops = attentionFlops(B, H, c.N, c.N, c.D, c.causal);
      for (const d of dirs) {
        const o = median(get('ours', d).ms);
        // cuDNN's backward: its forward + backward less its forward, round by round medians
        const t = d === 'bwd' ? median(get('cudnn', 'bwd').ms) - median(get('cudnn', 'fwd').ms) : median(get('cudnn', d).ms);
        const flops = fwdFlops * (d === 'bwd' ? 2.5 : 1);
        const row = { cell: name, dir: d, ours_ms: o, cudnn_ms: t, ours_tflops: flops / o / 1e9, cudnn_tflops: flops / t / 1e9, ratio: t / o };
        rows.push(row);
        console.log(`${name} ${d}: ours ${row.ours_tflops.toFixed(1)} TFLOP/s, cuDNN ${row.cudnn_tflops.toFixed(1)}, ours / cuDNN ${row.ratio.toFixed(3)}`);
      }
      if (jsonl)
        for (const s of sides) {
          // a side's own rate: cuDNN's bwd side is its forward + backward (3.5x the forward's FLOPs)
          const both = s.dir === 'bwd' && s.impl === 'cudnn';
          const ms = median(s.ms), tflops = fwdFlops * (s.dir === 'bwd' ? (both ? 3.5 : 2.5) : 1) / ms / 1e9;
          fs.appendFileSync(jsonl, JSON.stringify({ impl: s.impl, dir: both ? 'fwd+bwd' : s.dir, dtype: c.dtype, D: c.D, N: c.N, causal: c.causal, ms, tflops, rounds: s.ms, wins: s.wins }) + '\n');
        }
      await torch.ask({ op: 'free' });
    } finally {
      [q, k, v, dout, out, lse].forEach((t) => t.dispose());
    }
  }
  await torch.ask({ op: 'quit' });
  console.log('\n| cell | dir | ours TFLOP/s | cuDNN TFLOP/s | ours / cuDNN |\n| --- | --- | --- | --- | --- |');
  for (const r of rows) console.log(`| ${r.cell} | ${r.dir} | ${r.ours_tflops.toFixed(1)} | ${r.cudnn_tflops.toFixed(1)} | ${r.ratio.toFixed(3)} |`);
  for (const d of dirs) {
    const rs = rows.filter((r) => r.dir === d);
    if (rs.length) console.log(`${d}: >= 1.0x cuDNN in ${rs.filter((r) => r.ratio >= 1).length} of ${rs.length} cells; lowest ${Math.min(...rs.map((r) => r.ratio)).toFixed(3)}`);
  }
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
