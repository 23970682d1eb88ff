#!/usr/bin/env node
// `npm run bench`: times the library on PERF.md's grid, next to PyTorch SDPA in the same run, and
// writes a table, JSON and an SVG chart. Two figures per cell:
//   kernel  CUDA events around each call of the core entry point (all of its kernels), warm-up,
//           median of --reps launches taken in four groups: before, between and after the API
//           rounds (both figures then see the same clock state; nvidia-smi's SM clock is logged
//           alongside and listed for the cells whose two figures differ by more than 2%)
//   api     what a user gets: back-to-back public-API calls on device tensors, each awaited, outputs
//           disposed as they go, closed by synchronize(); wall time / calls (median of 3 rounds of
//           at least --api-ms milliseconds each)
// The torch comparison uses the api figure; torch is timed the same way (back-to-back calls, three
// rounds of at least --api-ms, the table's torch columns) and also per call in a burst from an idle
// GPU ("(burst)", the boost clock; --torch-burst-only times only that, the protocol before 2026-12-02).
//
// Options: bench/options.ts (`npm run bench -- --help`).
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { benchmarkBackward, benchmarkForward } from '../lib/attention';
import { benchmarkPaged } from '../lib/inference';
import {
  Tensor, appendKV, attentionFlops, buildInfo, devices, flashAttention, flashAttentionBackward, flashAttentionVarlen,
  pagedAttention, synchronize, type DType,
} from '../lib/index';
import { native } from '../lib/native';
import { randn } from '../lib/random';
import { DTYPE_CODE, storageOf } from '../lib/tensor';
import { DT, USAGE, UsageError, parseArgs } from './options';

interface Case { B: number; H: number; Hkv: number; N: number; D: number; dtype: DType; causal: boolean; Nq?: number }
interface Row { case: Case; dir: 'fwd' | 'bwd'; impl: string; ms: number; tflops: number; note?: string }

const list = (v: string | boolean | undefined, def: string) => String(typeof v === 'string' ? v : def).split(',').map((s) => s.trim()).filter(Boolean);

/** PERF.md's grid: batch*seqlen = 16k (B rounded to a whole batch for other lengths), hidden 2048 (H = 2048/D, rounded; 16 for D > 128). */
function grid(args: Record<string, string | boolean>): Case[] {
  const dtypes = list(args.dtype, 'fp16,bf16').map((d) => DT[d]);
  const hdims = list(args.hdim, '64,128,256').map(Number);
  const seqlens = list(args.seqlen, args.quick ? '1024,4096' : '512,1024,2048,4096,8192,16384').map(Number);
  const causal = String(args.causal ?? 'both');
  const cs = causal === 'both' ? [false, true] : [causal === 'on' || causal === 'true'];
  const out: Case[] = [];
  for (const dtype of dtypes) for (const D of hdims) for (const c of cs) for (const N of seqlens) {
    const H = D <= 128 ? Math.round(2048 / D) : 16;  // D 96: 21 heads
    out.push({ B: Math.max(1, Math.round(16384 / N)), H, Hkv: H, N, D, dtype, causal: c });
  }
  return out;
}

const median = (xs: number[]) => {
  const v = [...xs].sort((a, b) => a - b), m = v.length >> 1;
  return v.length % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
};
const key = (c: Case) => `${c.dtype} D${c.D} ${c.causal ? 'causal' : 'full'} N${c.N}`;

/** A device tensor of approximately standard-normal values generated on the GPU. */
async function randomDevice(shape: number[], dtype: DType, seed: number): Promise<Tensor> {
  const t = await Tensor.empty(shape, { dtype, device: 'cuda' });
  const s = storageOf(t, 'bench', 'tensor');
  if (s.kind === 'device') native.fillRandom(s.handle, DTYPE_CODE[dtype], seed);
  return t;
}

/**
 * Public-API time of back-to-back calls: `call` run repeatedly (each awaited, its outputs disposed),
 * closed by synchronize(); ms per call, median of 3 rounds of at least minMs each (the call's time
 * guessed as guessMs). `between`, when given, runs after each round (timePair's kernel samples).
 */
async function apiTime(call: () => Promise<void>, minMs: number, guessMs: number, between?: () => Promise<void>): Promise<number> {
  return (await apiTimesInTurns([call], minMs, guessMs, between))[0];
}

/**
 * apiTime of several calls in turns: each call's round of back-to-back calls (>= minMs) one after
 * the other, the order turned by one each round, three rounds, the median round per call; so that
 * calls compared with each other see the same load history (twenty-fourth session: timed one after
 * another, the paged prefill calls ran after more sustained load than the dense call they were
 * compared with).
 */
async function apiTimesInTurns(calls: Array<() => Promise<void>>, minMs: number, guessMs: number, between?: () => Promise<void>): Promise<number[]> {
  for (const call of calls) for (let i = 0; i < 3; i++) await call();
  await synchronize();
  const n = Math.max(10, Math.ceil(minMs / Math.max(guessMs, 1e-3)));
  const rounds = calls.map(() => [] as number[]);
  for (let r = 0; r < 3; r++) {
    for (let j = 0; j < calls.length; j++) {
      const i = (j + r) % calls.length;
      const t0 = performance.now();
      for (let c = 0; c < n; c++) await calls[i]();
      await synchronize();
      rounds[i].push((performance.now() - t0) / n);
    }
    if (between) await between();
  }
  return rounds.map(median);
}

/** Kernel samples per group in timePair (four groups). */
const kernelGroup = (reps: number) => Math.max(2, Math.ceil(reps / 4));

/**
 * Public-API time and kernel time of the same call, taken in turns: kernel samples (CUDA events
 * around each call, back to back) before, between and after the three API rounds, so that both
 * medians see the same clock and power state. (Run 2 of NOTES-inference.md: a kernel timed cold
 * beside API rounds timed after sustained load read 4% apart; kernel samples only before and after
 * the rounds still left the power-hungry D 256 backward 3-4% apart in both directions.) Each group
 * of kernel samples is as long as an API round (as many calls, up to 256): groups of `reps / 4`
 * calls (15 ms of a 1.8 ms call) ran at the clock of a GPU coming out of a pause while the 100 ms
 * rounds between them settled at the power limit (fourteenth session: the four cells over 3% had
 * their API rounds at 1380-1575 MHz, 3-8% below their kernel samples').
 */
async function timePair(call: () => Promise<void>, kernel: (warmup: number, reps: number) => Promise<number[]>,
  apiMs: number, warmup: number, reps: number): Promise<{ api: number; kernel: number }> {
  const per0 = kernelGroup(reps);
  const first = await kernel(warmup, per0);
  const guess = median(first);
  const n = Math.max(10, Math.ceil(apiMs / Math.max(guess, 1e-3)));  // apiTime's calls per round
  const per = Math.max(per0, Math.min(n, 256));
  const samples = per > per0 ? [...(await kernel(0, per))] : [...first];
  const api = await apiTime(call, apiMs, guess, async () => { samples.push(...(await kernel(1, per))); });
  return { api, kernel: median(samples) };
}

async function timeOurs(c: Case, dirs: string[], warmup: number, reps: number, apiMs: number, deterministic = false) {
  const q = await randomDevice([c.B, c.N, c.H, c.D], c.dtype, 1);
  const k = await randomDevice([c.B, c.N, c.Hkv, c.D], c.dtype, 2);
  const v = await randomDevice([c.B, c.N, c.Hkv, c.D], c.dtype, 3);
  const dout = await randomDevice([c.B, c.N, c.H, c.D], c.dtype, 4);
  // fwdWin / bwdWin: Date.now() at the start and end of each direction's timing (the clock log).
  const r: { fwd?: number; bwd?: number; fwdApi?: number; bwdApi?: number; fwdWin?: [number, number]; bwdWin?: [number, number] } = {};
  try {
    if (dirs.includes('fwd')) {
      const w0 = Date.now();
      const t = await timePair(async () => {
        const o = await flashAttention(q, k, v, { causal: c.causal });
        o.out.dispose();
        o.lse.dispose();
      }, (w, n) => benchmarkForward(q, k, v, { causal: c.causal }, w, n), apiMs, warmup, reps);
      r.fwdApi = t.api;
      r.fwd = t.kernel;
      r.fwdWin = [w0, Date.now()];
    }
    if (dirs.includes('bwd')) {
      const { out, lse } = await flashAttention(q, k, v, { causal: c.causal });
      try {
        const bopts = { causal: c.causal, deterministic };
        const w0 = Date.now();
        const t = await timePair(async () => {
          const g = await flashAttentionBackward(dout, q, k, v, out, lse, bopts);
          g.dq.dispose();
          g.dk.dispose();
          g.dv.dispose();
        }, (w, n) => benchmarkBackward(dout, q, k, v, out, lse, bopts, w, n), apiMs, warmup, reps);
        r.bwdApi = t.api;
        r.bwd = t.kernel;
        r.bwdWin = [w0, Date.now()];
      } finally {
        out.dispose(); lse.dispose();
      }
    }
    return r;
  } finally {
    [q, k, v, dout].forEach((t) => t.dispose());
  }
}

type Win = [number, number];
type TorchBackendResult = {
  backend: string; fwd_ms?: number; bwd_ms?: number; fwd_ms_sus?: number; bwd_ms_sus?: number;
  fwd_ms_sus_early?: number; bwd_ms_sus_early?: number;
  fwd_win?: Win; bwd_win?: Win; fwd_win_sus?: Win; bwd_win_sus?: Win; error?: string;
};
type TorchResult = { torch: string; cudnn: number; gpu: string; cases: Array<{ case: Case; results: TorchBackendResult[] }> };

/**
 * Torch SDPA in the same run (bench/torch_sdpa.py). apiMs > 0 also times each backend the way our
 * public-API figure is timed (back-to-back, three rounds of >= apiMs): the torch rows of the table
 * ('torch flash', 'torch cudnn') are then that sustained figure, and the per-call "burst" median
 * (each call waited for; a few tens of ms of work from an idle GPU, at the boost clock) is kept as
 * 'torch flash (burst)' / 'torch cudnn (burst)'. Why (tenth session, clock step): at the H200's
 * power limit the clock drops, and timing only the peer in bursts compared its boost clock with our
 * sustained one (fp16 D 128 full N 4k: cuDNN 626 TFLOP/s burst, 562 sustained). The sustained
 * figure is the median of the last three of five rounds, so that it follows as much load as our
 * median API round does (timePair); the median of the first three, the protocol until the
 * twenty-third session, is kept as 'torch cudnn (first rounds)'.
 */
function runTorch(cases: Case[], dirs: string[], backends: string[], warmup: number, reps: number, apiMs = 0): TorchResult | null {
  const req = { warmup, reps, api_ms: apiMs, cases: cases.map((c) => ({ ...c, dirs, backends })) };
  const r = spawnSync('python3', [path.join(__dirname, '..', '..', 'bench', 'torch_sdpa.py')], {
    input: JSON.stringify(req), encoding: 'utf8', stdio: ['pipe', 'pipe', 'inherit'], maxBuffer: 1 << 26,
  });
  if (r.status !== 0) {
    console.error(`bench: torch comparison failed (exit ${r.status}); is python3 with PyTorch installed?`);
    return null;
  }
  return JSON.parse(r.stdout) as TorchResult;
}

function svgChart(rows: Row[], file: string) {
  const panels = [...new Set(rows.map((r) => `${r.dir} ${r.case.dtype} D${r.case.D} ${r.case.causal ? 'causal' : 'non-causal'}`))];
  const impls = [...new Set(rows.map((r) => r.impl))];
  const colors = ['#d62728', '#ff9896', '#1f77b4', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b'];
  const W = 300, Hh = 200, cols = Math.min(4, panels.length), pad = 40;
  const rowsN = Math.ceil(panels.length / cols);
  const maxY = Math.max(...rows.map((r) => r.tflops)) * 1.1 || 1;
  const ns = [...new Set(rows.map((r) => r.case.N))].sort((a, b) => a - b);
  let s = `<svg xmlns="http://www.w3.org/2000/svg" width="${cols * W}" height="${rowsN * Hh + 30}" font-family="sans-serif" font-size="10">\n`;
  s += `<rect width="100%" height="100%" fill="white"/>\n`;
  impls.forEach((impl, i) => { s += `<text x="${10 + i * 140}" y="${rowsN * Hh + 20}" fill="${colors[i % colors.length]}">■ ${impl}</text>\n`; });
  panels.forEach((p, pi) => {
    const ox = (pi % cols) * W, oy = Math.floor(pi / cols) * Hh;
    const x = (n: number) => ox + pad + (ns.length > 1 ? (ns.indexOf(n) / (ns.length - 1)) : 0.5) * (W - pad - 10);
    const y = (t: number) => oy + Hh - 25 - (t / maxY) * (Hh - 45);
    s += `<text x="${ox + pad}" y="${oy + 12}" font-weight="bold">${p} (TFLOP/s)</text>\n`;
    s += `<line x1="${ox + pad}" y1="${y(0)}" x2="${ox + W - 10}" y2="${y(0)}" stroke="#888"/>\n`;
    s += `<line x1="${ox + pad}" y1="${y(0)}" x2="${ox + pad}" y2="${y(maxY)}" stroke="#888"/>\n`;
    for (let t = 0; t <= maxY; t += maxY > 400 ? 200 : 100) s += `<text x="${ox + 5}" y="${y(t) + 3}">${t}</text>\n`;
    ns.forEach((n) => { s += `<text x="${x(n) - 8}" y="${y(0) + 12}">${n >= 1024 ? n / 1024 + 'k' : n}</text>\n`; });
    impls.forEach((impl, i) => {
      const pts = rows.filter((r) => `${r.dir} ${r.case.dtype} D${r.case.D} ${r.case.causal ? 'causal' : 'non-causal'}` === p && r.impl === impl)
        .sort((a, b) => a.case.N - b.case.N).map((r) => `${x(r.case.N).toFixed(1)},${y(r.tflops).toFixed(1)}`);
      if (pts.length) s += `<polyline fill="none" stroke="${colors[i % colors.length]}" stroke-width="1.5" points="${pts.join(' ')}"/>\n`;
      for (const pt of pts) {
        const [cx, cy] = pt.split(',');
        s += `<circle cx="${cx}" cy="${cy}" r="2.5" fill="${colors[i % colors.length]}"/>\n`;
      }
    });
  });
  fs.writeFileSync(file, s + '</svg>\n');
}

async function overhead(): Promise<string> {
  // Per-call cost from JS on tiny device-resident inputs ([1, 128, 4, 64] fp16): the GPU work is a
  // few microseconds, so back-to-back the time is the library's own per-call cost.
  const q = await randomDevice([1, 128, 4, 64], 'float16', 11);
  const k = await randomDevice([1, 128, 4, 64], 'float16', 12);
  const v = await randomDevice([1, 128, 4, 64], 'float16', 13);
  const call = async () => { const r = await flashAttention(q, k, v); r.out.dispose(); r.lse.dispose(); };
  const perCall = await apiTime(call, 200, 0.005);
  const kernel = median(await benchmarkForward(q, k, v, {}, 20, 200));
  // Host side alone: the time to queue 400 calls (fewer than the launch queue holds).
  await synchronize();
  const t0 = performance.now();
  for (let i = 0; i < 400; i++) await call();
  const submit = (performance.now() - t0) / 400;
  await synchronize();
  // One call plus reading its (small) lse back, each iteration waiting for the read.
  const rt = async () => { const r = await flashAttention(q, k, v); await r.lse.toTypedArray(); r.out.dispose(); r.lse.dispose(); };
  for (let i = 0; i < 50; i++) await rt();
  const rounds: number[] = [];
  for (let r = 0; r < 3; r++) {
    const n = 2000;
    const t0 = performance.now();
    for (let i = 0; i < n; i++) await rt();
    rounds.push((performance.now() - t0) / n);
  }
  const round = median(rounds);
  [q, k, v].forEach((t) => t.dispose());
  return `Per-call cost ([1, 128, 4, 64] fp16, device-resident): ${(perCall * 1000).toFixed(1)} us per call back-to-back ` +
    `(closed by synchronize(); host time to queue a call ${(submit * 1000).toFixed(1)} us, kernel ${(kernel * 1000).toFixed(1)} us); ` +
    `${(round * 1000).toFixed(1)} us for a call plus reading its lse back`;
}

// ---- decode ------------------------------------------------------------------------------------

interface DecodeCell { B: number; N: number; page: number }
interface DecodeRow { cell: DecodeCell; impl: string; us: number; tbps: number; kernelUs?: number; hostUs?: number }

/** A shuffled page table for B sequences of N tokens each, pages of `page` tokens. */
function pageTable(B: number, N: number, page: number, seed: number): { table: Int32Array; pages: number; maxPages: number } {
  const maxPages = Math.ceil(N / page);
  const pages = B * maxPages;
  const perm = new Int32Array(pages);
  for (let i = 0; i < pages; i++) perm[i] = i;
  let s = seed >>> 0;
  for (let i = pages - 1; i > 0; i--) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    const j = s % (i + 1);
    const t = perm[i]; perm[i] = perm[j]; perm[j] = t;
  }
  return { table: perm, pages, maxPages };
}

async function decodeBench(apiMs: number, warmup: number, reps: number, compare: boolean, sweep: number[], only: string[]): Promise<DecodeRow[]> {
  const H = 32, Hkv = 8, D = 128;
  let cells: DecodeCell[] = [];
  for (const B of [1, 16, 64]) for (const N of [4096, 16384, 65536]) if (B * N <= 1 << 20) cells.push({ B, N, page: 16 });
  for (const B of [1, 16, 64]) cells.push({ B, N: 16384, page: 1 });
  // --decode-cells BxNxPAGE,...: only these cells (profiling one kernel)
  if (only.length) cells = only.map((c) => { const [B, N, page] = c.split('x').map(Number); return { B, N, page: page || 16 }; });
  const rows: DecodeRow[] = [];
  for (const cell of cells) {
    const { B, N, page } = cell;
    const { table, pages, maxPages } = pageTable(B, N, page, B * 31 + N);
    const kc = await randomDevice([pages, page, Hkv, D], 'float16', 21);
    const vc = await randomDevice([pages, page, Hkv, D], 'float16', 22);
    const q = await randomDevice([B, H, D], 'float16', 23);
    const cu = Int32Array.from({ length: B + 1 }, (_, i) => i);
    const idx = {
      pageTable: await Tensor.from(table, [B, maxPages]).to('cuda'),
      seqlensK: await Tensor.from(new Int32Array(B).fill(N), [B]).to('cuda'),
      cuSeqlensQ: await Tensor.from(cu, [B + 1]).to('cuda'),
    };
    const opts = { ...idx, maxSeqlenQ: 1, maxSeqlenK: N, causal: true };
    const bytes = 2 * B * N * Hkv * D * 2;
    const call = async () => { const r = await pagedAttention(q, kc, vc, opts); r.out.dispose(); r.lse.dispose(); };
    const ms = await apiTime(call, apiMs, 0.02);
    // GPU time of one call alone (CUDA events around it), and the host's time to queue one.
    const kernelMs = median(await benchmarkPaged(q, kc, vc, opts, 10, 50));
    await synchronize();
    const t0 = performance.now();
    for (let i = 0; i < 100; i++) await call();
    const hostMs = (performance.now() - t0) / 100;
    await synchronize();
    rows.push({ cell, impl: 'ours', us: ms * 1000, tbps: bytes / (ms / 1000) / 1e12, kernelUs: kernelMs * 1000, hostUs: hostMs * 1000 });
    // --decode-splits: the same cell at fixed split counts (tuning the automatic choice).
    if (page === 16) {
      for (const numSplits of sweep) {
        const t = await apiTime(async () => { const r = await pagedAttention(q, kc, vc, { ...opts, numSplits }); r.out.dispose(); r.lse.dispose(); }, apiMs, 0.02);
        rows.push({ cell, impl: `ours splits=${numSplits}`, us: t * 1000, tbps: bytes / (t / 1000) / 1e12 });
      }
    }
    process.stderr.write(`\rbench decode: B${B} N${N} page ${page}: ${(bytes / (ms / 1000) / 1e12).toFixed(2)} TB/s      `);
    [kc, vc, q, idx.pageTable, idx.seqlensK, idx.cuSeqlensQ].forEach((t) => t.dispose());
  }
  process.stderr.write('\n');
  if (compare) {
    const cases: Case[] = cells.filter((c) => c.page === 16).map((c) => ({ B: c.B, H, Hkv, N: c.N, Nq: 1, D, dtype: 'float16', causal: false }));
    const res = runTorch(cases, ['fwd'], ['cudnn', 'flash'], warmup, reps);
    for (const r of res?.cases ?? []) {
      for (const b of r.results) {
        if (b.fwd_ms === undefined) continue;
        const cell = { B: r.case.B, N: r.case.N, page: 0 };
        const bytes = 2 * cell.B * cell.N * Hkv * D * 2;
        rows.push({ cell, impl: `torch ${b.backend}`, us: b.fwd_ms * 1000, tbps: bytes / (b.fwd_ms / 1000) / 1e12 });
      }
    }
  }
  return rows;
}

// ---- varlen / paged prefill ---------------------------------------------------------------------

async function varlenBench(apiMs: number): Promise<string[]> {
  const H = 16, D = 128;
  // Mixed lengths 100..8k, 16k tokens in all.
  const lens = [8192, 3000, 1800, 1200, 700, 500, 300, 200, 150, 100, 242];
  const total = lens.reduce((a, b) => a + b, 0);
  const cu = Int32Array.from({ length: lens.length + 1 }, (_, i) => lens.slice(0, i).reduce((a, b) => a + b, 0));
  const flops = lens.reduce((a, n) => a + attentionFlops(1, H, n, n, D, true), 0);
  const q = await randomDevice([total, H, D], 'float16', 31);
  const k = await randomDevice([total, H, D], 'float16', 32);
  const v = await randomDevice([total, H, D], 'float16', 33);
  const cuT = await Tensor.from(cu, [cu.length]).to('cuda');
  const maxL = Math.max(...lens);
  const varlenCall = async () => {
    const r = await flashAttentionVarlen(q, k, v, { cuSeqlensQ: cuT, cuSeqlensK: cuT, maxSeqlenQ: maxL, maxSeqlenK: maxL, causal: true });
    r.out.dispose(); r.lse.dispose();
  };
  // Dense at equal work: each sequence as its own dense call, back to back.
  const dense = await Promise.all(lens.map(async (n, i) => ({
    q: await randomDevice([1, n, H, D], 'float16', 40 + i), k: await randomDevice([1, n, H, D], 'float16', 60 + i),
    v: await randomDevice([1, n, H, D], 'float16', 80 + i),
  })));
  const denseCall = async () => {
    for (const t of dense) { const r = await flashAttention(t.q, t.k, t.v, { causal: true }); r.out.dispose(); r.lse.dispose(); }
  };
  // Dense on one long sequence of the same total work (B = 1, N with N^2 = sum n^2).
  const Neq = Math.round(Math.sqrt(lens.reduce((a, n) => a + n * n, 0)) / 64) * 64;
  const dq = await randomDevice([1, Neq, H, D], 'float16', 90);
  const singleCall = async () => { const r = await flashAttention(dq, dq, dq, { causal: true }); r.out.dispose(); r.lse.dispose(); };
  const singleFlops = attentionFlops(1, H, Neq, Neq, D, true);
  // Paged prefill: the same sequences in a shuffled page-16 cache, queried whole; then pages of 64
  // and 256 tokens (fewer, larger K / V copies per key block).
  const pagedSetups = await Promise.all([16, 64, 256].map(async (page) => {
    const maxPages = Math.ceil(maxL / page);
    const { table: perm, pages } = pageTable(lens.length, maxL, page, 7);
    const kc = await randomDevice([pages, page, H, D], 'float16', 34);
    const vc = await randomDevice([pages, page, H, D], 'float16', 35);
    const pt = await Tensor.from(perm, [lens.length, maxPages]).to('cuda');
    const sk = await Tensor.from(Int32Array.from(lens), [lens.length]).to('cuda');
    const opts = { pageTable: pt, seqlensK: sk, cuSeqlensQ: cuT, maxSeqlenQ: maxL, maxSeqlenK: maxL, causal: true };
    const call = async () => { const r = await pagedAttention(q, kc, vc, opts); r.out.dispose(); r.lse.dispose(); };
    return { page, kc, vc, pt, sk, opts, call };
  }));
  // Public-API times in turns (apiTimesInTurns), so that the paged calls and the dense baseline
  // they are compared with see the same load history.
  const perCall = await apiTimesInTurns([varlenCall, denseCall, singleCall, ...pagedSetups.map((x) => x.call)], apiMs, 1);
  const [varlenMs, denseMs, singleMs] = perCall;
  // GPU time by events (each call alone, all of its kernels), next to the back-to-back API time: where
  // the two differ, the difference is between calls, not in them.
  const eventsReps = 20;
  const singleGpuMs = median(await benchmarkForward(dq, dq, dq, { causal: true }, 3, eventsReps));
  const pagedRows: [number, number, number][] = [];
  for (const [n, x] of pagedSetups.entries()) {
    const gpuMs = median(await benchmarkPaged(q, x.kc, x.vc, x.opts, 3, eventsReps));
    pagedRows.push([x.page, perCall[3 + n], gpuMs]);
    [x.kc, x.vc, x.pt, x.sk].forEach((t) => t.dispose());
  }
  const tf = (f: number, ms: number) => f / ms / 1e9;
  const lines = [
    `Packed prefill, fp16 D128 H16 causal, lengths [${lens.join(', ')}] (${total} tokens), public-API time:`,
    `  flashAttentionVarlen: ${varlenMs.toFixed(3)} ms, ${tf(flops, varlenMs).toFixed(1)} TFLOP/s`,
    `  dense, one call per sequence: ${denseMs.toFixed(3)} ms, ${tf(flops, denseMs).toFixed(1)} TFLOP/s (varlen / dense ${(denseMs / varlenMs).toFixed(2)}x)`,
    `  dense, one sequence of equal work (N ${Neq}): ${tf(singleFlops, singleMs).toFixed(1)} TFLOP/s (varlen / dense ${(tf(flops, varlenMs) / tf(singleFlops, singleMs)).toFixed(2)}x); ` +
      `GPU time of one call by events ${singleGpuMs.toFixed(3)} ms (${tf(singleFlops, singleGpuMs).toFixed(1)} TFLOP/s)`,
    ...pagedRows.map(([page, ms, gpu]) =>
      `  pagedAttention (page ${page}, shuffled): ${ms.toFixed(3)} ms, ${tf(flops, ms).toFixed(1)} TFLOP/s (paged / dense equal work ${(tf(flops, ms) / tf(singleFlops, singleMs)).toFixed(2)}x); ` +
      `GPU time of one call by events ${gpu.toFixed(3)} ms (${tf(flops, gpu).toFixed(1)} TFLOP/s)`),
  ];
  [q, k, v, cuT, dq].forEach((t) => t.dispose());
  dense.forEach((t) => { t.q.dispose(); t.k.dispose(); t.v.dispose(); });
  return lines;
}

// ---- serving loop -----------------------------------------------------------------------------------

async function serveBench(seqs: number): Promise<string[]> {
  const layers = 32, H = 32, Hkv = 8, D = 128, page = 16;
  const maxLen = 4096;
  const pagesPerLayer = Math.ceil((seqs * maxLen) / page) + seqs;
  const kc: Tensor[] = [], vc: Tensor[] = [];
  for (let l = 0; l < layers; l++) {
    kc.push(await randomDevice([pagesPerLayer, page, Hkv, D], 'float16', 100 + l));
    vc.push(await randomDevice([pagesPerLayer, page, Hkv, D], 'float16', 200 + l));
  }
  const q = await randomDevice([seqs, H, D], 'float16', 7);
  const kn = await randomDevice([seqs, Hkv, D], 'float16', 8);
  const vn = await randomDevice([seqs, Hkv, D], 'float16', 9);
  const cu = Int32Array.from({ length: seqs + 1 }, (_, i) => i);
  const cuD = await Tensor.from(cu, [seqs + 1]).to('cuda');
  const maxPages = Math.ceil(maxLen / page) + 1;
  interface Seq { len: number; target: number; pages: number[] }
  // One timed loop. hostIndices false: each step's index arrays uploaded once as device tensors and
  // shared by the 32 layers (what the README recommends); true: the Int32Arrays passed to every call
  // (each call copies them). The same sequence of steps either way (the state restarts from the seed).
  const loop = async (hostIndices: boolean) => {
    let seed = 12345;
    const rnd = () => { seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0; return seed / 2 ** 32; };
    const free: number[] = [];
    for (let p = pagesPerLayer - 1; p >= 0; p--) free.push(p);
    const start = (): Seq => ({ len: 0, target: 256 + Math.floor(rnd() * (maxLen - 512)), pages: [] });
    const active: Seq[] = Array.from({ length: seqs }, start);
    // Prefill each sequence's context to a random start length (pages assigned, contents random).
    for (const s of active) {
      s.len = Math.floor(rnd() * s.target);
      while (s.pages.length * page < s.len) s.pages.push(free.pop()!);
    }
    const step = async () => {
      const table = new Int32Array(seqs * maxPages);
      const before = new Int32Array(seqs), after = new Int32Array(seqs);
      active.forEach((s, b) => {
        if (s.len >= s.target) {  // finished: free its pages, start a new one
          for (const p of s.pages) free.push(p);
          active[b] = start();
        }
        const t = active[b];
        if (t.pages.length * page < t.len + 1) t.pages.push(free.pop()!);
        t.pages.forEach((p, j) => { table[b * maxPages + j] = p; });
        before[b] = t.len;
        after[b] = t.len + 1;
        t.len += 1;
      });
      // Device tensors: uploaded once per step, shared by the 32 layers (then maxSeqlenQ / K are given).
      const devIdx = hostIndices ? null : await Promise.all([Tensor.from(table, [seqs, maxPages]).to('cuda'),
        Tensor.from(before, [seqs]).to('cuda'), Tensor.from(after, [seqs]).to('cuda')]);
      const pageTable = devIdx ? devIdx[0] : table, seqlensBefore = devIdx ? devIdx[1] : before, seqlensK = devIdx ? devIdx[2] : after;
      const cuSeqlens = devIdx ? cuD : cu;
      const maxes = devIdx ? { maxSeqlenQ: 1, maxSeqlenK: Math.max(...after) } : {};
      for (let l = 0; l < layers; l++) {
        await appendKV(kc[l], vc[l], kn, vn, { pageTable, cuSeqlensNew: cuSeqlens, seqlensBefore });
        const r = await pagedAttention(q, kc[l], vc[l], { pageTable, seqlensK, cuSeqlensQ: cuSeqlens, ...maxes });
        r.out.dispose(); r.lse.dispose();
      }
      devIdx?.forEach((t) => t.dispose());
    };
    for (let i = 0; i < 8; i++) await step();
    await synchronize();
    const steps = 64;
    const t0 = performance.now();
    for (let i = 0; i < steps; i++) await step();
    await synchronize();
    const ms = (performance.now() - t0) / steps;
    return { ms, avgCtx: active.reduce((a, s) => a + s.len, 0) / seqs };
  };
  const dev = await loop(false);
  const host = await loop(true);
  [...kc, ...vc, q, kn, vn, cuD].forEach((t) => t.dispose());
  const line = (r: { ms: number }) => `${((r.ms * 1000) / layers).toFixed(1)} us per layer-step (appendKV + pagedAttention), ${(seqs / (r.ms / 1000)).toFixed(0)} tokens/s`;
  return [`Serving loop (${seqs} sequence${seqs === 1 ? '' : 's'}, 32 layers, GQA 32/8 D128 fp16, page 16; mean context ${dev.avgCtx.toFixed(0)} tokens): ` + line(dev),
    `  the same loop with Int32Array index arrays passed to every call (each call copies them): ` + line(host)];
}

/**
 * The GPU's SM clock and power while the grid runs, from `nvidia-smi -lms` in the background (when
 * it is on the PATH), so that a cell whose API and kernel figures differ can be read against the
 * clock state it was timed in. On a host with several GPUs the one under load is read (the highest
 * median power over the log): CUDA's ordinals need not be nvidia-smi's indices.
 */
class ClockLog {
  private proc: ChildProcess | null = null;
  private closed: Promise<void> = Promise.resolve();
  private text = '';
  constructor() {
    if (spawnSync('nvidia-smi', ['-L'], { encoding: 'utf8' }).status !== 0) return;
    const proc = spawn('nvidia-smi', ['--query-gpu=index,timestamp,clocks.sm,power.draw', '--format=csv,noheader,nounits', '-lms', '200'],
      { stdio: ['ignore', 'pipe', 'ignore'] });
    this.proc = proc;
    proc.stdout!.setEncoding('utf8');
    proc.stdout!.on('data', (d: string) => { this.text += d; });
    this.closed = new Promise((resolve) => { proc.on('close', () => resolve()); proc.on('error', () => resolve()); });
    proc.on('error', () => { this.proc = null; });
    // Never what keeps the process alive (a failed run still exits).
    proc.unref();
    (proc.stdout as unknown as { unref?: () => void }).unref?.();
    process.once('exit', () => proc.kill());
  }
  /** Stops the log and waits for its last lines. */
  async stop(): Promise<void> {
    if (!this.proc) return;
    this.proc.kill();
    this.proc = null;
    await Promise.race([this.closed, new Promise((r) => setTimeout(r, 2000))]);
  }
  private samples(): Array<{ gpu: string; t: number; mhz: number; watts: number }> {
    const out: Array<{ gpu: string; t: number; mhz: number; watts: number }> = [];
    for (const line of this.text.split('\n')) {
      const [gpu, ts, clk, pw] = line.split(',').map((x) => x.trim());
      if (!ts || clk === undefined) continue;
      const t = Date.parse(ts.replace(/\//g, '-').replace(' ', 'T'));  // nvidia-smi's local time, as Date.now()
      if (Number.isFinite(t) && Number.isFinite(Number(clk))) out.push({ gpu, t, mhz: Number(clk), watts: Number(pw) });
    }
    return out;
  }
  /** SM MHz (min / median / max) and median watts of the loaded GPU between two Date.now() times. */
  range(t0: number, t1: number): { mhz: [number, number, number]; watts: number; n: number } | null {
    const all = this.samples();
    const power = new Map<string, number[]>();
    for (const x of all) if (Number.isFinite(x.watts)) power.set(x.gpu, [...(power.get(x.gpu) ?? []), x.watts]);
    let busy = all[0]?.gpu, best = -Infinity;
    for (const [gpu, w] of power) if (median(w) > best) best = median(w), busy = gpu;
    const mine = all.filter((x) => x.gpu === busy && x.t >= t0 && x.t <= t1);
    if (!mine.length) return null;
    const mhz = mine.map((x) => x.mhz).sort((a, b) => a - b);
    const watts = mine.map((x) => x.watts).filter(Number.isFinite);
    return { mhz: [mhz[0], median(mhz), mhz[mhz.length - 1]], watts: watts.length ? median(watts) : NaN, n: mhz.length };
  }
}

async function main() {
  let args: Record<string, string | boolean>;
  try {
    args = parseArgs(process.argv.slice(2));
  } catch (e) {
    if (!(e instanceof UsageError)) throw e;
    console.error(`bench: ${e.message}\n\n${USAGE}`);
    process.exit(2);
  }
  if (args.help) {
    console.log(USAGE);
    return;
  }
  const gpus = devices();
  if (gpus.length === 0) {
    const b = buildInfo();
    console.error(`bench: no CUDA device (this build: CUDA ${b.cuda ? `yes, architectures ${b.cudaArchs.join(', ')}` : 'no'}); ` +
      'the benchmark needs a GPU (`npm start` runs the main job on the CPU backend)');
    process.exit(2);
  }
  const warmup = Number(args.warmup ?? 5), reps = Number(args.reps ?? 30), apiMs = Number(args['api-ms'] ?? 150);
  const dirs = list(args.dir, 'fwd');
  const outDir = String(args.out ?? path.join('bench', 'out'));
  fs.mkdirSync(outDir, { recursive: true });
  const cases = args.grid === 'off' ? [] : grid(args);
  if (args.fp32 && args.grid !== 'off') {
    for (const N of args.quick ? [1024] : [1024, 4096]) for (const causal of [false, true]) {
      cases.push({ B: 16384 / N, H: 16, Hkv: 16, N, D: 64, dtype: 'float32', causal });
    }
  }
  const rows: Row[] = [];
  const clocks = cases.length ? new ClockLog() : null;
  const windows = new Map<string, [number, number]>();
  const failed: string[] = [];  // the cells whose run threw
  let done = 0;
  for (const c of cases) {
    process.stderr.write(`\rbench: ${++done}/${cases.length} ${key(c)}        `);
    const f = attentionFlops(c.B, c.H, c.N, c.N, c.D, c.causal);
    try {
      const t = await timeOurs(c, dirs, warmup, reps, apiMs);
      if (t.fwdWin) windows.set(`${key(c)} fwd`, t.fwdWin);
      if (t.bwdWin) windows.set(`${key(c)} bwd`, t.bwdWin);
      if (t.fwd !== undefined) rows.push({ case: c, dir: 'fwd', impl: 'ours kernel', ms: t.fwd, tflops: f / t.fwd / 1e9 });
      if (t.fwdApi !== undefined) rows.push({ case: c, dir: 'fwd', impl: 'ours', ms: t.fwdApi, tflops: f / t.fwdApi / 1e9 });
      if (t.bwd !== undefined) rows.push({ case: c, dir: 'bwd', impl: 'ours kernel', ms: t.bwd, tflops: 2.5 * f / t.bwd / 1e9 });
      if (t.bwdApi !== undefined) rows.push({ case: c, dir: 'bwd', impl: 'ours', ms: t.bwdApi, tflops: 2.5 * f / t.bwdApi / 1e9 });
      // Deterministic-mode cost (fp16 / bf16 cells).
      if (args.deterministic && dirs.includes('bwd') && c.dtype !== 'float32') {
        const d = await timeOurs(c, ['bwd'], warmup, reps, apiMs, true);
        rows.push({ case: c, dir: 'bwd', impl: 'ours deterministic', ms: d.bwdApi!, tflops: 2.5 * f / d.bwdApi! / 1e9 });
      }
    } catch (e) {
      failed.push(key(c));
      console.error(`\nbench: ${key(c)}: ${(e as Error).message}`);
    }
  }
  process.stderr.write('\n');
  let torchInfo = '';
  // Clock windows of the torch rows, by impl and direction (the clock summary below).
  const torchWins: Array<{ impl: string; dir: string; win: Win }> = [];
  if (args.compare === 'torch' && cases.length) {
    const lowp = cases.filter((c) => c.dtype !== 'float32');
    const fp32 = cases.filter((c) => c.dtype === 'float32');
    const sus = args['torch-burst-only'] ? 0 : apiMs;
    const res = [
      ...(lowp.length ? runTorch(lowp, dirs, ['flash', 'cudnn'], warmup, reps, sus)?.cases ?? [] : []),
      ...(fp32.length ? runTorch(fp32, dirs, ['efficient'], warmup, reps, sus)?.cases ?? [] : []),
    ];
    for (const r of res) {
      for (const b of r.results) {
        for (const dir of dirs as Array<'fwd' | 'bwd'>) {
          const burst = dir === 'fwd' ? b.fwd_ms : b.bwd_ms;
          const sustained = dir === 'fwd' ? b.fwd_ms_sus : b.bwd_ms_sus;
          const f = attentionFlops(r.case.B, r.case.H, r.case.N, r.case.N, r.case.D, r.case.causal) * (dir === 'bwd' ? 2.5 : 1);
          const win = dir === 'fwd' ? b.fwd_win : b.bwd_win, winSus = dir === 'fwd' ? b.fwd_win_sus : b.bwd_win_sus;
          if (sustained !== undefined) {
            rows.push({ case: r.case, dir, impl: `torch ${b.backend}`, ms: sustained, tflops: f / sustained / 1e9, note: b.error });
            if (burst !== undefined) rows.push({ case: r.case, dir, impl: `torch ${b.backend} (burst)`, ms: burst, tflops: f / burst / 1e9 });
            const early = dir === 'fwd' ? b.fwd_ms_sus_early : b.bwd_ms_sus_early;
            if (early !== undefined) rows.push({ case: r.case, dir, impl: `torch ${b.backend} (first rounds)`, ms: early, tflops: f / early / 1e9 });
            if (winSus) torchWins.push({ impl: `torch ${b.backend}`, dir, win: winSus });
            if (win) torchWins.push({ impl: `torch ${b.backend} (burst)`, dir, win });
          } else if (burst !== undefined) {
            rows.push({ case: r.case, dir, impl: `torch ${b.backend}`, ms: burst, tflops: f / burst / 1e9, note: b.error });
            if (win) torchWins.push({ impl: `torch ${b.backend}`, dir, win });
          }
        }
      }
    }
  }
  await clocks?.stop();
  if (args.compare === 'torch') {
    const probe = spawnSync('python3', ['-c', 'import torch;print(torch.__version__, torch.backends.cudnn.version())'], { encoding: 'utf8' });
    torchInfo = probe.status === 0 ? `torch ${probe.stdout.trim()}` : '';
  }
  // Table: one line per case and direction: our public-API TFLOP/s, our kernel TFLOP/s, api/kernel
  // time, and the ratio (public-API) to each peer.
  // (torch flash's burst figure stays in results.json; the table shows cuDNN's beside its sustained one)
  const peers = [...new Set(rows.map((r) => r.impl))].filter((i) => i !== 'ours' && i !== 'ours kernel' && i !== 'torch flash (burst)' && i !== 'torch flash (first rounds)');
  const lines: string[] = [];
  lines.push(`| case | dir | ours (API) TFLOP/s | ours kernel TFLOP/s | API time / kernel time | ${peers.map((p) => `${p} TFLOP/s | ours / ${p}`).join(' | ')} |`);
  lines.push('|' + ' --- |'.repeat(5 + 2 * peers.length));
  for (const c of cases) {
    for (const dir of dirs) {
      const ours = rows.find((r) => r.case === c && r.dir === dir && r.impl === 'ours');
      const kern = rows.find((r) => r.case === c && r.dir === dir && r.impl === 'ours kernel');
      if (!ours || !kern) continue;
      const cells = peers.map((p) => {
        const r = rows.find((x) => key(x.case) === key(c) && x.dir === dir && x.impl === p);
        return r ? `${r.tflops.toFixed(1)} | ${(ours.tflops / r.tflops).toFixed(2)}x` : '- | -';
      });
      lines.push(`| ${key(c)} B${c.B} H${c.H} | ${dir} | ${ours.tflops.toFixed(1)} | ${kern.tflops.toFixed(1)} | ${(ours.ms / kern.ms).toFixed(3)} | ${cells.join(' | ')} |`);
    }
  }
  // Clock state per cell; listed in the table for the cells whose API / kernel ratio is off by > 2%.
  const clockRows: Array<{ cell: string; mhz: [number, number, number]; watts: number; n: number }> = [];
  const clockLines: string[] = [];
  if (clocks) {
    for (const [cell, w] of windows) {
      const r = clocks.range(w[0], w[1]);
      if (r) clockRows.push({ cell, ...r });
    }
    if (clockRows.length) {
      const all = clockRows.flatMap((r) => r.mhz).sort((a, b) => a - b);
      clockLines.push('', `SM clock while the cells were timed (nvidia-smi every 200 ms): ${all[0]}-${all[all.length - 1]} MHz over the grid.`);
      // Median over cells of each cell's median SM clock, ours against each torch protocol.
      const med = (xs: number[]) => (xs.length ? median(xs).toFixed(0) : '-');
      const parts: string[] = [];
      for (const dir of dirs) {
        const ours = clockRows.filter((r) => r.cell.endsWith(` ${dir}`)).map((r) => r.mhz[1]);
        const peersClk = [...new Set(torchWins.map((w) => w.impl))].map((impl) => {
          const xs = torchWins.filter((w) => w.impl === impl && w.dir === dir).map((w) => clocks.range(w.win[0], w.win[1])?.mhz[1])
            .filter((x): x is number => x !== undefined);
          return `${impl} ${med(xs)}`;
        });
        parts.push(`${dir}: ours ${med(ours)}, ${peersClk.join(', ')}`);
      }
      clockLines.push(`- Median SM clock (MHz, median over cells of each cell's median): ${parts.join('; ')}.`);
      const off = cases.flatMap((c) => dirs.map((dir) => ({ c, dir })).filter(({ c, dir }) => {
        const o = rows.find((r) => r.case === c && r.dir === dir && r.impl === 'ours');
        const k = rows.find((r) => r.case === c && r.dir === dir && r.impl === 'ours kernel');
        return o && k && Math.abs(o.ms / k.ms - 1) > 0.02;
      }));
      for (const { c, dir } of off) {
        const r = clockRows.find((x) => x.cell === `${key(c)} ${dir}`);
        const o = rows.find((x) => x.case === c && x.dir === dir && x.impl === 'ours')!;
        const k = rows.find((x) => x.case === c && x.dir === dir && x.impl === 'ours kernel')!;
        if (r) clockLines.push(`- ${key(c)} ${dir}: API / kernel ${(o.ms / k.ms).toFixed(3)}; SM clock ${r.mhz[0]} / ${r.mhz[1]} / ${r.mhz[2]} MHz (min / median / max of ${r.n}), ${r.watts.toFixed(0)} W median`);
      }
    }
  }
  const header = `GPU: ${gpus[0].name}; flash-attention-node ${buildInfo().version}; ${torchInfo}; ` +
    `${new Date().toISOString().slice(0, 10)}; warmup ${warmup}, kernel: median of 4 groups of back-to-back calls (each as long as an API round, >= ${kernelGroup(reps)} and <= 256 calls) before, between and after the API rounds; API: median of 3 rounds >= ${apiMs} ms`;
  console.log(header);
  if (cases.length) console.log([...lines, ...clockLines].join('\n'));
  const extra: string[] = [];
  if (args.overhead) extra.push(await overhead());
  let decodeRows: DecodeRow[] = [];
  if (args.decode) {
    const sweep = list(args['decode-splits'], '').map(Number).filter((x) => x > 0);
    decodeRows = await decodeBench(apiMs, warmup, reps, args.compare === 'torch', sweep, list(args['decode-cells'], ''));
    extra.push('', '| decode cell | impl | us | K/V TB/s | ours / torch cudnn | GPU us (one call, events) | host us to queue a call |',
      '| --- | --- | --- | --- | --- | --- | --- |');
    for (const r of decodeRows) {
      const peer = decodeRows.find((x) => x.impl === 'torch cudnn' && x.cell.B === r.cell.B && x.cell.N === r.cell.N);
      const ratio = r.impl === 'ours' && peer ? `${(r.tbps / peer.tbps).toFixed(2)}x` : '';
      const k = r.kernelUs !== undefined ? r.kernelUs.toFixed(1) : '';
      const hq = r.hostUs !== undefined ? r.hostUs.toFixed(1) : '';
      extra.push(`| B${r.cell.B} N${r.cell.N}${r.cell.page ? ` page ${r.cell.page}` : ''} | ${r.impl} | ${r.us.toFixed(1)} | ${r.tbps.toFixed(2)} | ${ratio} | ${k} | ${hq} |`);
    }
  }
  if (args.varlen) extra.push('', ...(await varlenBench(apiMs)));
  if (args.serve || args['serve-seqs']) for (const seqs of list(args['serve-seqs'], '64').map(Number)) extra.push('', ...(await serveBench(seqs)));
  for (const l of extra) console.log(l);
  fs.writeFileSync(path.join(outDir, 'results.json'), JSON.stringify({ header, rows, decode: decodeRows, extra, clocks: clockRows }, null, 1));
  fs.writeFileSync(path.join(outDir, 'table.md'), header + '\n\n' + [...lines, ...clockLines].join('\n') + '\n' + extra.join('\n') + '\n');
  if (rows.length) svgChart(rows.filter((r) => r.impl !== 'ours kernel'), path.join(outDir, 'chart.svg'));
  console.log(`bench: wrote ${outDir}/results.json, table.md${rows.length ? ', chart.svg' : ''}`);
  if (failed.length) {
    console.error(`bench: ${failed.length} of ${cases.length} cells failed (${failed.join('; ')})`);
    process.exitCode = 1;
  }
}

main().catch((e) => { console.error(e); process.exitCode = 1; });
