#!/usr/bin/env node
// `npm start`: the main job. Runs attention on the best backend present (CUDA when a GPU is there,
// else the CPU backend) for a few realistic shapes, checks sampled rows against naive float64
// attention, and prints time, throughput and the extra memory next to naive attention's N x N.
//
//   npm start                 best backend, default shapes
//   npm start -- --cpu        force the CPU backend
//   npm start -- --quick      smaller shapes (a smoke run)
import { cpus } from 'node:os';
import { performance } from 'node:perf_hooks';
import { attentionFlops, buildInfo, devices, flashAttention, synchronize, Tensor, type DType } from '../index';
import { randn } from '../random';

interface Case { B: number; H: number; Hkv: number; N: number; D: number; dtype: DType; causal: boolean }

const GPU_CASES: Case[] = [
  { B: 4, H: 16, Hkv: 16, N: 4096, D: 128, dtype: 'float16', causal: false },
  { B: 4, H: 16, Hkv: 16, N: 4096, D: 128, dtype: 'float16', causal: true },
  { B: 2, H: 32, Hkv: 8, N: 4096, D: 128, dtype: 'bfloat16', causal: true },
  { B: 8, H: 32, Hkv: 32, N: 2048, D: 64, dtype: 'float16', causal: false },
  { B: 2, H: 16, Hkv: 16, N: 2048, D: 64, dtype: 'float32', causal: false },
];
const CPU_CASES: Case[] = [
  { B: 1, H: 8, Hkv: 8, N: 1024, D: 64, dtype: 'float32', causal: false },
  { B: 1, H: 8, Hkv: 8, N: 2048, D: 64, dtype: 'float32', causal: true },
  { B: 1, H: 8, Hkv: 2, N: 1024, D: 128, dtype: 'bfloat16', causal: true },
  { B: 2, H: 4, Hkv: 4, N: 512, D: 64, dtype: 'float16', causal: false },
];

// Naive float64 attention for one query row (bshd layout), on the inputs as the kernel saw them.
function naiveRow(c: Case, q: Float32Array, k: Float32Array, v: Float32Array, b: number, h: number, i: number): Float64Array {
  const { N, H, Hkv, D } = c;
  const hk = Math.floor(h / (H / Hkv));
  const scale = 1 / Math.sqrt(D);
  const last = c.causal ? i : N - 1;
  const s = new Float64Array(last + 1);
  let m = -Infinity;
  for (let j = 0; j <= last; j++) {
    let acc = 0;
    const qo = ((b * N + i) * H + h) * D, ko = ((b * N + j) * Hkv + hk) * D;
    for (let d = 0; d < D; d++) acc += q[qo + d] * k[ko + d];
    s[j] = acc * scale;
    if (s[j] > m) m = s[j];
  }
  let l = 0;
  for (let j = 0; j <= last; j++) { s[j] = Math.exp(s[j] - m); l += s[j]; }
  const o = new Float64Array(D);
  for (let j = 0; j <= last; j++) {
    const vo = ((b * N + j) * Hkv + hk) * D;
    for (let d = 0; d < D; d++) o[d] += (s[j] / l) * v[vo + d];
  }
  return o;
}

function fmtBytes(n: number): string {
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
  return `${n.toFixed(n < 10 ? 1 : 0)} ${u[i]}`;
}

async function runCase(c: Case, device: 'cpu' | 'cuda', reps: number) {
  const qn = c.B * c.N * c.H * c.D, kn = c.B * c.N * c.Hkv * c.D;
  const qf = randn(qn, 1), kf = randn(kn, 2), vf = randn(kn, 3);
  let q = Tensor.from(qf, [c.B, c.N, c.H, c.D], { dtype: c.dtype });
  let k = Tensor.from(kf, [c.B, c.N, c.Hkv, c.D], { dtype: c.dtype });
  let v = Tensor.from(vf, [c.B, c.N, c.Hkv, c.D], { dtype: c.dtype });
  // The reference sees the inputs rounded to the dtype, as the kernel does.
  const [qr, kr, vr] = await Promise.all([q.toFloat32Array(), k.toFloat32Array(), v.toFloat32Array()]);
  if (device === 'cuda') {
    const [qd, kd, vd] = await Promise.all([q.to('cuda'), k.to('cuda'), v.to('cuda')]);
    q.dispose(); k.dispose(); v.dispose();
    [q, k, v] = [qd, kd, vd];
  }
  const times: number[] = [];
  // Warm-up: module load, pool growth, GPU clocks.
  let result = await flashAttention(q, k, v, { causal: c.causal });
  for (let w = 0; w < (device === 'cuda' ? 10 : 0); w++) {
    result.out.dispose(); result.lse.dispose();
    result = await flashAttention(q, k, v, { causal: c.causal });
  }
  // GPU calls settle once queued (stream-ordered): time `reps` back-to-back calls closed by
  // synchronize(), the time a service sees per call; the median of 3 rounds. CPU calls settle
  // when done: each call is timed alone.
  const rounds = device === 'cuda' ? 3 : reps;
  const perRound = device === 'cuda' ? reps : 1;
  for (let r = 0; r < rounds; r++) {
    const t0 = performance.now();
    for (let i = 0; i < perRound; i++) {
      result.out.dispose(); result.lse.dispose();
      result = await flashAttention(q, k, v, { causal: c.causal });
    }
    await synchronize(device);
    times.push((performance.now() - t0) / perRound);
  }
  times.sort((a, b) => a - b);
  const ms = times[Math.floor(times.length / 2)];
  const out = await result.out.toFloat32Array();
  // Check 24 sampled rows against naive attention.
  let maxErr = 0;
  for (let t = 0; t < 24; t++) {
    const b = t % c.B, h = (t * 7) % c.H, i = Math.floor(((t * 2654435761) >>> 0) % c.N);
    const ref = naiveRow(c, qr, kr, vr, b, h, i);
    const o = ((b * c.N + i) * c.H + h) * c.D;
    for (let d = 0; d < c.D; d++) maxErr = Math.max(maxErr, Math.abs(out[o + d] - ref[d]));
  }
  for (const t of [q, k, v, result.out, result.lse]) t.dispose();
  const flops = attentionFlops(c.B, c.H, c.N, c.N, c.D, c.causal);
  const tol = c.dtype === 'float32' ? 1e-4 : c.dtype === 'float16' ? 1e-2 : 3e-2;
  return {
    ms, tflops: flops / (ms * 1e-3) / 1e12, maxErr, ok: maxErr <= tol,
    extra: c.B * c.H * c.N * 4, // lse
    naive: c.B * c.H * c.N * c.N * 4, // S (and then P) as float32
  };
}

const USAGE = `usage: npm start [-- [--cpu] [--quick]]

  Runs attention on the best backend present (CUDA when a GPU is there, else the CPU backend) for a
  few realistic shapes, checks sampled rows against naive float64 attention, and prints time,
  throughput and the extra memory next to naive attention's N x N. Exit status 1 when a result is
  off, 2 for a bad option.

  --cpu     the CPU backend even where there is a GPU
  --quick   smaller shapes (a smoke run)
`;

async function main() {
  const args = process.argv.slice(2);
  if (args.some((a) => a === '--help' || a === '-h')) {
    process.stdout.write(USAGE);
    return;
  }
  const unknown = args.find((a) => a !== '--cpu' && a !== '--quick');
  if (unknown !== undefined) {
    process.stderr.write(`flash-attention-node: unknown option ${unknown}\n\n${USAGE}`);
    process.exitCode = 2;
    return;
  }
  const gpus = devices();
  const useGpu = gpus.length > 0 && !args.includes('--cpu');
  const quick = args.includes('--quick');
  let cases = useGpu ? GPU_CASES : CPU_CASES;
  if (quick) cases = cases.map((c) => ({ ...c, N: Math.min(c.N, 512), B: Math.min(c.B, 1) }));
  const info = buildInfo();
  console.log(`flash-attention-node ${info.version}: ${useGpu ? `CUDA on ${gpus[0].name} (sm ${gpus[0].computeCapability})`
    : `CPU backend (${info.cuda ? 'CUDA build, no GPU found' : 'CPU-only build'}; ${String(info.cpuKernels)} kernels, ${cpus().length} threads)`}`);
  console.log(useGpu ? 'Times per call: back-to-back calls from JS closed by synchronize() (inputs resident on the device).'
    : 'Times per call: wall-clock medians of awaited calls from JS.');
  const head = ['shape (B, H/Hkv, N, D)', 'dtype', 'causal', 'time ms', useGpu ? 'TFLOP/s' : 'GFLOP/s', 'max |err| vs naive', 'extra memory', 'naive N x N'];
  const rows: string[][] = [];
  let failed = false;
  for (const c of cases) {
    if (process.stdout.isTTY) process.stdout.write(`  running B=${c.B} H=${c.H}/${c.Hkv} N=${c.N} D=${c.D} ${c.dtype}${c.causal ? ' causal' : ''}...\r`);
    const r = await runCase(c, useGpu ? 'cuda' : 'cpu', useGpu ? 20 : 3);
    failed ||= !r.ok;
    rows.push([`${c.B}, ${c.H}/${c.Hkv}, ${c.N}, ${c.D}`, c.dtype, c.causal ? 'yes' : 'no', r.ms.toFixed(2),
      (useGpu ? r.tflops : r.tflops * 1000).toFixed(1), `${r.maxErr.toExponential(1)} ${r.ok ? 'ok' : 'FAIL'}`,
      fmtBytes(r.extra), fmtBytes(r.naive)]);
  }
  if (process.stdout.isTTY) process.stdout.write(' '.repeat(80) + '\r');
  const widths = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (r: string[]) => '| ' + r.map((x, i) => x.padEnd(widths[i])).join(' | ') + ' |';
  console.log(line(head));
  console.log('|' + widths.map((w) => '-'.repeat(w + 2)).join('|') + '|');
  for (const r of rows) console.log(line(r));
  if (failed) {
    console.error('Some results differ from naive attention beyond tolerance.');
    process.exitCode = 1;
  }
}

main().catch((e) => {
  console.error(e);
  process.exitCode = 1;
});
