#!/usr/bin/env node
// `npm run bench`: times our CUDA kernels on PERF.md's grid with CUDA events (warm-up, median of
// many launches, random normal inputs), optionally next to PyTorch SDPA in the same run, and writes
// a table, JSON and an SVG chart.
//
//   npm run bench -- [--dtype fp16,bf16] [--hdim 64,128,256] [--causal both|on|off]
//                    [--seqlen 512,1024,...] [--dir fwd,bwd] [--compare torch] [--reps 30]
//                    [--warmup 5] [--out bench/out] [--fp32] [--overhead] [--quick] [--deterministic]
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { benchmarkBackward, benchmarkForward } from '../lib/attention';
import { attentionFlops, buildInfo, devices, flashAttention, Tensor, type DType } from '../lib/index';
import { randn } from '../lib/random';

interface Case { B: number; H: number; Hkv: number; N: number; D: number; dtype: DType; causal: boolean }
interface Row { case: Case; dir: 'fwd' | 'bwd'; impl: string; ms: number; tflops: number; note?: string }

const DT: Record<string, DType> = { fp16: 'float16', float16: 'float16', bf16: 'bfloat16', bfloat16: 'bfloat16', fp32: 'float32', float32: 'float32' };

function parseArgs(argv: string[]) {
  const a: Record<string, string | boolean> = {};
  for (let i = 0; i < argv.length; i++) {
    const m = /^--([\w-]+)(?:=(.*))?$/.exec(argv[i]);
    if (!m) throw new Error(`bench: unexpected argument ${argv[i]}`);
    if (m[2] !== undefined) a[m[1]] = m[2];
    else if (i + 1 < argv.length && !argv[i + 1].startsWith('--')) a[m[1]] = argv[++i];
    else a[m[1]] = true;
  }
  return a;
}
const list = (v: string | boolean | undefined, def: string) => String(typeof v === 'string' ? v : def).split(',').map((s) => s.trim()).filter(Boolean);

/** PERF.md's grid: batch*seqlen = 16k, hidden 2048 (H = 2048/D; 16 for D = 256). */
function grid(args: Record<string, string | boolean>): Case[] {
  const dtypes = list(args.dtype, 'fp16,bf16').map((d) => DT[d] ?? (() => { throw new Error(`bench: unknown dtype ${d}`); })());
  const hdims = list(args.hdim, '64,128,256').map(Number);
  const seqlens = list(args.seqlen, args.quick ? '1024,4096' : '512,1024,2048,4096,8192,16384').map(Number);
  const causal = String(args.causal ?? 'both');
  const cs = causal === 'both' ? [false, true] : [causal === 'on' || causal === 'true'];
  const out: Case[] = [];
  for (const dtype of dtypes) for (const D of hdims) for (const c of cs) for (const N of seqlens) {
    const H = D <= 128 ? 2048 / D : 16;
    out.push({ B: Math.max(1, 16384 / N), H, Hkv: H, N, D, dtype, causal: c });
  }
  return out;
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const key = (c: Case) => `${c.dtype} D${c.D} ${c.causal ? 'causal' : 'full'} N${c.N}`;

async function timeOurs(c: Case, dirs: string[], pool: Map<number, Float32Array>, warmup: number, reps: number,
  deterministic = false): Promise<{ fwd?: number; bwd?: number }> {
  const get = (n: number, seed: number) => {
    const k = n * 10 + seed;
    if (!pool.has(k)) pool.set(k, randn(n, seed));
    return pool.get(k)!;
  };
  const qn = c.B * c.N * c.H * c.D, kn = c.B * c.N * c.Hkv * c.D;
  const host = [get(qn, 1), get(kn, 2), get(kn, 3), get(qn, 4)].map((a, i) =>
    Tensor.from(a, [c.B, c.N, i === 1 || i === 2 ? c.Hkv : c.H, c.D], { dtype: c.dtype }));
  const [q, k, v, dout] = await Promise.all(host.map((t) => t.to('cuda')));
  host.forEach((t) => t.dispose());
  const r: { fwd?: number; bwd?: number } = {};
  try {
    if (dirs.includes('fwd')) r.fwd = median(await benchmarkForward(q, k, v, { causal: c.causal }, warmup, reps));
    if (dirs.includes('bwd')) {
      const { out, lse } = await flashAttention(q, k, v, { causal: c.causal });
      try {
        r.bwd = median(await benchmarkBackward(dout, q, k, v, out, lse, { causal: c.causal, deterministic }, warmup, reps));
      } finally {
        out.dispose(); lse.dispose();
      }
    }
    return r;
  } finally {
    [q, k, v, dout].forEach((t) => t.dispose());
  }
}

function runTorch(cases: Case[], dirs: string[], backends: string[], warmup: number, reps: number) {
  const req = { warmup, reps, cases: cases.map((c) => ({ ...c, dirs, backends })) };
  const r = spawnSync('python3', [path.join(__dirname, '..', '..', 'bench', 'torch_sdpa.py')], {
    input: JSON.stringify(req), encoding: 'utf8', stdio: ['pipe', 'pipe', 'inherit'], maxBuffer: 1 << 26,
  });
  if (r.status !== 0) {
    console.error(`bench: torch comparison failed (exit ${r.status}); is python3 with PyTorch installed?`);
    return null;
  }
  return JSON.parse(r.stdout) as { torch: string; cudnn: number; gpu: string;
    cases: Array<{ case: Case; results: Array<{ backend: string; fwd_ms?: number; bwd_ms?: number; error?: string }> }> };
}

function svgChart(rows: Row[], file: string) {
  const panels = [...new Set(rows.map((r) => `${r.dir} ${r.case.dtype} D${r.case.D} ${r.case.causal ? 'causal' : 'non-causal'}`))];
  const impls = [...new Set(rows.map((r) => r.impl))];
  const colors = ['#d62728', '#1f77b4', '#2ca02c', '#ff7f0e', '#9467bd', '#8c564b'];
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
  // Per-call cost from JS on tiny device-resident inputs: the GPU work is negligible, so the time
  // is the binding, the queue hand-offs and the Promise.
  const mk = async (seed: number) => Tensor.from(randn(1 * 16 * 1 * 64, seed), [1, 16, 1, 64], { dtype: 'float16' }).to('cuda');
  const [q, k, v] = await Promise.all([mk(1), mk(2), mk(3)]);
  for (let i = 0; i < 50; i++) { const r = await flashAttention(q, k, v); r.out.dispose(); r.lse.dispose(); }
  const n = 500;
  let t0 = performance.now();
  for (let i = 0; i < n; i++) { const r = await flashAttention(q, k, v); r.out.dispose(); r.lse.dispose(); }
  const seq = ((performance.now() - t0) / n) * 1000;
  t0 = performance.now();
  const rs = await Promise.all(Array.from({ length: n }, () => flashAttention(q, k, v)));
  const pipe = ((performance.now() - t0) / n) * 1000;
  rs.forEach((r) => { r.out.dispose(); r.lse.dispose(); });
  [q, k, v].forEach((t) => t.dispose());
  return `JS-call overhead (B1 N16 H1 D64 fp16, device-resident): ${seq.toFixed(1)} us per awaited call, ${pipe.toFixed(1)} us per call when ${n} are in flight`;
}

async function main() {
  const args = parseArgs(process.argv.slice(2));
  const gpus = devices();
  if (gpus.length === 0) {
    console.error(`bench: no CUDA device (buildInfo: ${JSON.stringify(buildInfo())}); the benchmark needs a GPU`);
    process.exit(2);
  }
  const warmup = Number(args.warmup ?? 5), reps = Number(args.reps ?? 30);
  const dirs = list(args.dir, 'fwd').filter((d) => d === 'fwd' || d === 'bwd');
  const outDir = String(args.out ?? path.join('bench', 'out'));
  fs.mkdirSync(outDir, { recursive: true });
  const cases = grid(args);
  if (args.fp32) {
    for (const N of args.quick ? [1024] : [1024, 4096]) for (const causal of [false, true]) {
      cases.push({ B: 16384 / N, H: 16, Hkv: 16, N, D: 64, dtype: 'float32', causal });
    }
  }
  const rows: Row[] = [];
  const pool = new Map<number, Float32Array>();
  let done = 0;
  for (const c of cases) {
    process.stderr.write(`\rbench: ${++done}/${cases.length} ${key(c)}        `);
    const f = attentionFlops(c.B, c.H, c.N, c.N, c.D, c.causal);
    try {
      const t = await timeOurs(c, dirs, pool, warmup, reps);
      if (t.fwd !== undefined) rows.push({ case: c, dir: 'fwd', impl: 'ours', ms: t.fwd, tflops: f / t.fwd / 1e9 });
      if (t.bwd !== undefined) rows.push({ case: c, dir: 'bwd', impl: 'ours', ms: t.bwd, tflops: 2.5 * f / t.bwd / 1e9 });
      // Deterministic-mode cost: measured on the D = 128 cells only (keeps the run short).
      if (args.deterministic && dirs.includes('bwd') && c.D === 128) {
        const d = await timeOurs(c, ['bwd'], pool, warmup, reps, true);
        rows.push({ case: c, dir: 'bwd', impl: 'ours deterministic', ms: d.bwd!, tflops: 2.5 * f / d.bwd! / 1e9 });
      }
    } catch (e) {
      console.error(`\nbench: ${key(c)}: ${(e as Error).message}`);
    }
  }
  process.stderr.write('\n');
  let torchInfo = '';
  if (args.compare === 'torch') {
    const lowp = cases.filter((c) => c.dtype !== 'float32');
    const fp32 = cases.filter((c) => c.dtype === 'float32');
    const res = [
      ...(lowp.length ? runTorch(lowp, dirs, ['flash', 'cudnn'], warmup, reps)?.cases ?? [] : []),
      ...(fp32.length ? runTorch(fp32, dirs, ['efficient'], warmup, reps)?.cases ?? [] : []),
    ];
    for (const r of res) {
      for (const b of r.results) {
        for (const dir of dirs as Array<'fwd' | 'bwd'>) {
          const ms = dir === 'fwd' ? b.fwd_ms : b.bwd_ms;
          if (ms === undefined) continue;
          const f = attentionFlops(r.case.B, r.case.H, r.case.N, r.case.N, r.case.D, r.case.causal) * (dir === 'bwd' ? 2.5 : 1);
          rows.push({ case: r.case, dir, impl: `torch ${b.backend}`, ms, tflops: f / ms / 1e9, note: b.error });
        }
      }
    }
    const probe = spawnSync('python3', ['-c', 'import torch;print(torch.__version__, torch.backends.cudnn.version())'], { encoding: 'utf8' });
    torchInfo = probe.status === 0 ? `torch ${probe.stdout.trim()}` : '';
  }
  // Table: one line per case and direction, our TFLOP/s and the ratio to each peer.
  const impls = [...new Set(rows.map((r) => r.impl))];
  const peers = impls.filter((i) => i !== 'ours');
  const lines: string[] = [];
  lines.push(`| case | dir | ours TFLOP/s | ${peers.map((p) => `${p} TFLOP/s | ours / ${p}`).join(' | ')} |`);
  lines.push('|' + ' --- |'.repeat(3 + 2 * peers.length));
  for (const c of cases) {
    for (const dir of dirs) {
      const ours = rows.find((r) => r.case === c && r.dir === dir && r.impl === 'ours');
      if (!ours) continue;
      const cells = peers.map((p) => {
        const r = rows.find((x) => key(x.case) === key(c) && x.dir === dir && x.impl === p);
        return r ? `${r.tflops.toFixed(1)} | ${(ours.tflops / r.tflops).toFixed(2)}x` : '- | -';
      });
      lines.push(`| ${key(c)} B${c.B} H${c.H} | ${dir} | ${ours.tflops.toFixed(1)} | ${cells.join(' | ')} |`);
    }
  }
  const header = `GPU: ${gpus[0].name}; flash-attention-node ${buildInfo().version}; ${torchInfo}; ` +
    `${new Date().toISOString().slice(0, 10)}; warmup ${warmup}, median of ${reps}`;
  console.log(header);
  console.log(lines.join('\n'));
  if (args.overhead) console.log(await overhead());
  fs.writeFileSync(path.join(outDir, 'results.json'), JSON.stringify({ header, rows }, null, 1));
  fs.writeFileSync(path.join(outDir, 'table.md'), header + '\n\n' + lines.join('\n') + '\n');
  svgChart(rows, path.join(outDir, 'chart.svg'));
  console.log(`bench: wrote ${outDir}/results.json, table.md, chart.svg`);
}

main().catch((e) => { console.error(e); process.exitCode = 1; });
