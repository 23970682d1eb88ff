// `npx flash-attention-node doctor`: what is installed and whether it works here.
//
// Reports Node and the platform, which addon binary loaded and why, how it was built, the CUDA
// driver and runtime, each device and whether this build has kernels for it, then runs a short
// self-test through the public API: a few small random shapes on the CPU backend against naive
// float64 attention, and on each GPU against the CPU backend. Exit status 0 when all is well (a
// machine without a GPU is well: the CPU backend is checked), 1 with the reasons otherwise.
//
//   npx flash-attention-node doctor            the report
//   npx flash-attention-node doctor --json     the same as one JSON object
//   npx flash-attention-node doctor --no-selftest
import * as fs from 'node:fs';
import { performance } from 'node:perf_hooks';
import type * as Api from '../index';
import { randn } from '../random';

type DType = Api.DType;

export interface Case { B: number; Nq: number; Nk: number; H: number; Hkv: number; D: number; dtype: DType; causal: boolean }

export interface CheckResult {
  target: string;           // 'cpu' or 'cuda:N'
  case: string;
  against: string;          // what it was compared with
  maxErrOut: number;        // largest |got - want| / (atol + rtol |want|) of out: <= 1 passes
  maxErrLse: number;        // the same for lse
  ok: boolean;
  ms: number;
  error?: string;
}

export interface DeviceReport extends Api.DeviceInfo {
  kernels: string | null;   // how this build runs on it ('sm_90a machine code', ...), null: it cannot
}

export interface DoctorReport {
  node: string;
  platform: string;
  glibc: string | null;
  addon: Api.LoaderInfo | { error: string };
  build?: Record<string, unknown>;
  cuda?: { driver: string | null; runtime: string | null; kernelDriver: string | null; gpusOnPciBus: number };
  devices?: DeviceReport[];
  selfTest: CheckResult[];
  problems: string[];
  warnings: string[];
  ok: boolean;
}

/** 13000 -> '13.0', 12080 -> '12.8'; 0 or missing -> null. */
export function cudaVersion(v: unknown): string | null {
  if (typeof v !== 'number' || v <= 0) return null;
  return `${Math.floor(v / 1000)}.${Math.floor((v % 1000) / 10)}`;
}

/**
 * How code built for `archs` (CMake CUDA_ARCHITECTURES entries: '80-real', '90a-real',
 * '90-virtual', '90' = both) runs on a device of compute capability `cc` ('9.0'), or null when it
 * cannot. Machine code sm_XY runs on X.y with y >= Y; sm_XYa only on X.Y itself; PTX compute_XY is
 * JIT-compiled by the driver on any cc >= X.Y (compute_XYa only on X.Y).
 */
export function kernelsFor(cc: string, archs: readonly string[]): string | null {
  const [maj, min] = cc.split('.').map(Number);
  const dev = maj * 10 + min;
  let ptx: string | null = null;
  for (const a of archs) {
    const m = /^(\d+)([af]?)(?:-(real|virtual))?$/.exec(a);
    if (!m) continue;
    const num = Number(m[1]), suffix = m[2], kind = m[3];
    const runs = suffix === 'a' ? dev === num : suffix === 'f' ? Math.floor(dev / 10) === Math.floor(num / 10) && dev >= num
      : dev >= num;
    if (!runs) continue;
    if (kind !== 'virtual' && (suffix === 'a' || Math.floor(dev / 10) === Math.floor(num / 10))) {
      return `sm_${num}${suffix} machine code${suffix === 'a' && num === 90 ? ' (with the wgmma kernels)' : ''}`;
    }
    if (kind !== 'real') ptx ??= `compute_${num}${suffix} PTX, JIT-compiled by the driver on first use`;
  }
  return ptx;
}

const DEFAULT_CASES: Case[] = [
  { B: 1, Nq: 37, Nk: 37, H: 2, Hkv: 2, D: 64, dtype: 'float16', causal: true },
  { B: 2, Nq: 65, Nk: 130, H: 4, Hkv: 2, D: 128, dtype: 'float32', causal: false },
  { B: 1, Nq: 1, Nk: 77, H: 4, Hkv: 1, D: 64, dtype: 'bfloat16', causal: true },
  { B: 1, Nq: 48, Nk: 100, H: 2, Hkv: 2, D: 128, dtype: 'float16', causal: true },
];

/** Tolerances per dtype: |got - want| <= atol + rtol |want|. */
const TOL: Record<string, { atol: number; rtol: number }> = {
  float32: { atol: 1e-4, rtol: 1e-4 },
  float16: { atol: 4e-3, rtol: 8e-3 },
  bfloat16: { atol: 2e-2, rtol: 3e-2 },
};
const LSE_TOL: Record<string, { atol: number; rtol: number }> = {
  float32: { atol: 1e-4, rtol: 1e-4 },
  float16: { atol: 1e-3, rtol: 1e-3 },
  bfloat16: { atol: 1e-3, rtol: 1e-3 },
};

function caseName(c: Case): string {
  return `${c.dtype} B${c.B} Nq${c.Nq} Nk${c.Nk} H${c.H}/${c.Hkv} D${c.D}${c.causal ? ' causal' : ''}`;
}

/** Naive float64 attention (bshd), causal aligned bottom-right: out [B, Nq, H, D], lse [B, H, Nq]. */
export function naiveAttention(c: Case, q: Float32Array, k: Float32Array, v: Float32Array): { out: Float64Array; lse: Float64Array } {
  const { B, Nq, Nk, H, Hkv, D } = c;
  const out = new Float64Array(B * Nq * H * D), lse = new Float64Array(B * H * Nq);
  const scale = 1 / Math.sqrt(D), s = new Float64Array(Nk);
  for (let b = 0; b < B; b++) for (let h = 0; h < H; h++) for (let i = 0; i < Nq; i++) {
    const hk = Math.floor(h / (H / Hkv));
    const last = c.causal ? Math.min(Nk - 1, i + Nk - Nq) : Nk - 1;
    let m = -Infinity;
    for (let j = 0; j <= last; j++) {
      let acc = 0;
      const qo = ((b * Nq + i) * H + h) * D, ko = ((b * Nk + j) * Hkv + hk) * D;
      for (let d = 0; d < D; d++) acc += q[qo + d] * k[ko + d];
      s[j] = acc * scale;
      m = Math.max(m, s[j]);
    }
    let sum = 0;
    for (let j = 0; j <= last; j++) { s[j] = Math.exp(s[j] - m); sum += s[j]; }
    lse[(b * H + h) * Nq + i] = m + Math.log(sum);
    const oo = ((b * Nq + i) * H + h) * D;
    for (let j = 0; j <= last; j++) {
      const vo = ((b * Nk + j) * Hkv + hk) * D, p = s[j] / sum;
      for (let d = 0; d < D; d++) out[oo + d] += p * v[vo + d];
    }
  }
  return { out, lse };
}

/** Largest |got - want| / (atol + rtol |want|); NaN anywhere counts as Infinity. */
export function scaledError(got: ArrayLike<number>, want: ArrayLike<number>, tol: { atol: number; rtol: number }): number {
  if (got.length !== want.length) return Infinity;
  let worst = 0;
  for (let i = 0; i < got.length; i++) {
    const e = Math.abs(got[i] - want[i]) / (tol.atol + tol.rtol * Math.abs(want[i]));
    if (!(e <= worst)) worst = Number.isNaN(e) ? Infinity : e;
  }
  return worst;
}

interface Inputs { c: Case; host: [Api.Tensor, Api.Tensor, Api.Tensor]; seen: [Float32Array, Float32Array, Float32Array] }

async function makeInputs(api: typeof Api, c: Case, seed: number): Promise<Inputs> {
  const shapes = [[c.B, c.Nq, c.H, c.D], [c.B, c.Nk, c.Hkv, c.D], [c.B, c.Nk, c.Hkv, c.D]];
  const host = shapes.map((s, i) => api.Tensor.from(randn(s.reduce((a, b) => a * b), seed * 3 + i), s,
    { dtype: c.dtype })) as Inputs['host'];
  // The values as the kernels see them (rounded to the dtype).
  const seen = await Promise.all(host.map((t) => t.toFloat32Array())) as Inputs['seen'];
  return { c, host, seen };
}

async function runOn(api: typeof Api, inp: Inputs, device: string): Promise<{ out: Float32Array; lse: Float32Array }> {
  const owned: Api.Tensor[] = [];
  try {
    const [q, k, v] = device === 'cpu' ? inp.host
      : await Promise.all(inp.host.map((t) => t.to(device as Api.Device)));
    if (device !== 'cpu') owned.push(q, k, v);
    const { out, lse } = await api.flashAttention(q, k, v, { causal: inp.c.causal });
    owned.push(out, lse);
    return { out: await out.toFloat32Array(), lse: await lse.toFloat32Array() };
  } finally {
    for (const t of owned) t.dispose();
  }
}

async function check(target: string, against: string, c: Case, run: () => Promise<{ out: Float32Array; lse: Float32Array }>,
  want: { out: ArrayLike<number>; lse: ArrayLike<number> }, slack: number): Promise<CheckResult> {
  const t0 = performance.now();
  const base = { target, case: caseName(c), against };
  try {
    const got = await run();
    const tol = TOL[c.dtype], ltol = LSE_TOL[c.dtype];
    const maxErrOut = scaledError(got.out, want.out, { atol: tol.atol * slack, rtol: tol.rtol * slack });
    const maxErrLse = scaledError(got.lse, want.lse, { atol: ltol.atol * slack, rtol: ltol.rtol * slack });
    return { ...base, maxErrOut, maxErrLse, ok: maxErrOut <= 1 && maxErrLse <= 1, ms: performance.now() - t0 };
  } catch (e) {
    return { ...base, maxErrOut: NaN, maxErrLse: NaN, ok: false, ms: performance.now() - t0,
      error: e instanceof Error ? `${e.name}: ${e.message}` : String(e) };
  }
}

/** The self-test: each case on the CPU against float64, then on each device against the CPU. */
export async function selfTest(api: typeof Api, deviceIndexes: number[], cases = DEFAULT_CASES): Promise<CheckResult[]> {
  const results: CheckResult[] = [];
  const headDims = (api.buildInfo().cudaHeadDims as number[] | undefined) ?? [];
  for (const [n, c] of cases.entries()) {
    const inp = await makeInputs(api, c, n + 1);
    const ref = naiveAttention(c, ...inp.seen);
    const cpuRes: { out: Float32Array; lse: Float32Array }[] = [];
    results.push(await check('cpu', 'float64 reference', c, async () => {
      const r = await runOn(api, inp, 'cpu');
      cpuRes.push(r);
      return r;
    }, ref, 1));
    for (const d of deviceIndexes) {
      const dev = `cuda:${d}`;
      if (!headDims.includes(c.D)) {
        results.push({ target: dev, case: caseName(c), against: 'cpu backend', maxErrOut: NaN, maxErrLse: NaN, ok: true,
          ms: 0, error: `skipped: this build has no CUDA kernels for head dim ${c.D}` });
        continue;
      }
      // Against the CPU backend (each within its tolerance of float64, so within twice of each other);
      // against float64 when the CPU backend failed.
      const want = cpuRes[0] ?? ref;
      results.push(await check(dev, cpuRes[0] ? 'cpu backend' : 'float64 reference', c, () => runOn(api, inp, dev),
        want, cpuRes[0] ? 2 : 1));
    }
    for (const t of inp.host) t.dispose();
  }
  return results;
}

function nvidiaKernelDriver(): { version: string | null; gpus: number } {
  let version: string | null = null, gpus = 0;
  try {
    const text = fs.readFileSync('/proc/driver/nvidia/version', 'utf8');
    version = /Kernel Module\s+(?:for \S+\s+)?([\d.]+)/.exec(text)?.[1] ?? text.split('\n')[0].trim();
  } catch { /* no driver */ }
  try { gpus = fs.readdirSync('/proc/driver/nvidia/gpus').length; } catch { /* none */ }
  return { version, gpus };
}

export async function diagnose(options: { selfTest?: boolean } = {}): Promise<DoctorReport> {
  const { glibcVersion, platformTag } = await import('../loader');
  const report: DoctorReport = {
    node: process.version, platform: platformTag(), glibc: glibcVersion(),
    addon: { error: '' }, selfTest: [], problems: [], warnings: [], ok: false,
  };
  let api: typeof Api;
  try {
    api = await import('../index');
  } catch (e) {
    const msg = e instanceof Error ? e.message : String(e);
    report.addon = { error: msg };
    report.problems.push('the native addon does not load (see above for the fixes)');
    return report;
  }
  report.addon = api.loaderInfo();
  const build = api.buildInfo();
  report.build = build;
  const kd = nvidiaKernelDriver();
  report.cuda = { driver: cudaVersion(build.cudaDriverVersion), runtime: cudaVersion(build.cudaRuntimeVersion),
    kernelDriver: kd.version, gpusOnPciBus: kd.gpus };
  const archs = build.cudaArchs;
  report.devices = api.devices().map((d) => ({ ...d, kernels: kernelsFor(d.computeCapability, archs) }));
  const visible = process.env.CUDA_VISIBLE_DEVICES;

  if (!build.cuda) {
    report.warnings.push('this build has no CUDA backend (nvcc was not found when it was built): CPU only');
    if (kd.gpus > 0) {
      report.warnings.push(`${kd.gpus} NVIDIA GPU(s) are present: rebuild with CUDA to use them ` +
        '(`npm rebuild flash-attention-node --build-from-source` with nvcc on PATH or in /usr/local/cuda)');
    }
  } else if (report.devices.length === 0) {
    if (kd.gpus > 0 && visible !== '' && visible !== '-1') {
      const drv = report.cuda.driver, rt = report.cuda.runtime;
      report.problems.push(`${kd.gpus} NVIDIA GPU(s) are present but CUDA sees none` +
        (drv && rt && Number(drv.split('.')[0]) < Number(rt.split('.')[0])
          ? `: the driver supports CUDA ${drv}, this build's runtime is CUDA ${rt}; update the driver`
          : ` (driver CUDA ${drv ?? 'unknown'}, runtime ${rt}; check CUDA_VISIBLE_DEVICES, /dev/nvidia* permissions)`));
    }
  }
  for (const d of report.devices) {
    if (!d.kernels) {
      report.problems.push(`cuda:${d.index} (${d.name}, compute capability ${d.computeCapability}) has no kernels in ` +
        `this build (architectures ${archs.join(', ')}): rebuild with FA_CUDA_ARCHS including ` +
        `${d.computeCapability.replace('.', '')}-real (\`npm rebuild flash-attention-node --build-from-source\`)`);
    }
  }
  if (options.selfTest !== false) {
    const runnable = report.devices.filter((d) => d.kernels).map((d) => d.index);
    report.selfTest = await selfTest(api, runnable);
    for (const r of report.selfTest.filter((x) => !x.ok)) {
      report.problems.push(`self-test failed on ${r.target}, ${r.case}: ` +
        (r.error ?? `error ${fmtErr(r.maxErrOut)} (out) / ${fmtErr(r.maxErrLse)} (lse) of the tolerance against the ${r.against}`));
    }
  }
  report.ok = report.problems.length === 0;
  return report;
}

function fmtErr(x: number): string {
  return Number.isNaN(x) ? '-' : x === Infinity ? 'inf (NaN or missing values)' : `${x.toFixed(3)}x`;
}

function gib(bytes: number): string {
  return `${(bytes / 2 ** 30).toFixed(1)} GiB`;
}

export function renderReport(r: DoctorReport): string {
  const L: string[] = [];
  L.push('flash-attention-node doctor');
  L.push(`  node ${r.node}, ${r.platform}, glibc ${r.glibc ?? 'none (musl or not Linux)'}`);
  L.push('addon');
  if ('error' in r.addon) {
    L.push('  NOT LOADED:', ...r.addon.error.split('\n').map((l) => `  ${l}`));
  } else {
    L.push(`  loaded ${r.addon.source}: ${r.addon.path}`);
    L.push(`  why: ${r.addon.reason}`);
    for (const a of r.addon.attempts.filter((x) => x.outcome !== 'loaded')) {
      L.push(`  ${a.outcome === 'skipped' ? 'not needed' : 'passed over'}: ${a.source} ${a.path}: ${a.detail}`);
    }
    const pb = r.addon.prebuilt as { builtOn?: { date?: string }; requires?: Record<string, string> } | undefined;
    if (pb?.requires) {
      L.push(`  prebuilt on ${pb.builtOn?.date ?? '?'}, needs glibc >= ${pb.requires.glibc}, libstdc++ GLIBCXX >= ${pb.requires.glibcxx}`);
    }
  }
  if (r.build) {
    const b = r.build as { version: string; cpuKernels?: string; cuda: boolean; cudaArchs: string[]; cudaHeadDims?: number[]; cudaBackward?: boolean };
    L.push('build');
    L.push(`  version ${b.version}, CPU backend: yes (${String(b.cpuKernels)} kernels), CUDA backend: ${b.cuda ? 'yes' : 'no'}`);
    if (b.cuda) {
      const dims = b.cudaHeadDims ?? [];
      L.push(`  architectures ${b.cudaArchs.join(', ')}; head dims ${dims.length ? `${dims[0]}..${dims[dims.length - 1]} (${dims.length})` : 'none'}; ` +
        `backward kernels: ${b.cudaBackward ? 'yes' : 'no'}`);
    }
  }
  if (r.cuda && r.build?.cuda) {
    L.push('CUDA');
    L.push(`  driver: ${r.cuda.driver ? `supports CUDA ${r.cuda.driver}` : 'none found'}` +
      `${r.cuda.kernelDriver ? ` (NVIDIA kernel module ${r.cuda.kernelDriver})` : ''}`);
    L.push(`  runtime: CUDA ${r.cuda.runtime ?? '?'} (linked statically into the addon)`);
  }
  if (r.devices) {
    L.push('devices');
    if (r.devices.length === 0) L.push('  no GPU: the CPU backend runs everything');
    for (const d of r.devices) {
      L.push(`  cuda:${d.index} ${d.name}, compute capability ${d.computeCapability}, ${gib(d.totalMemory)}, ` +
        `${d.multiProcessorCount} SMs: ${d.kernels ?? 'NO KERNELS in this build'}`);
    }
  }
  if (r.selfTest.length) {
    L.push('self-test (max error as a fraction of the tolerance; <= 1 passes)');
    for (const t of r.selfTest) {
      const what = t.error ? t.error : `out ${fmtErr(t.maxErrOut)}, lse ${fmtErr(t.maxErrLse)} vs ${t.against}`;
      L.push(`  ${t.ok ? 'ok  ' : 'FAIL'} ${t.target.padEnd(7)} ${t.case.padEnd(40)} ${what} (${t.ms.toFixed(0)} ms)`);
    }
  }
  for (const w of r.warnings) L.push(`warning: ${w}`);
  for (const p of r.problems) L.push(`problem: ${p}`);
  const gpus = r.devices?.length ?? 0;
  const checked = r.selfTest.length === 0 ? `${gpus ? `${gpus} GPU(s)` : 'no GPU'}; no self-test run`
    : gpus ? `${gpus} GPU(s) and the CPU backend checked` : 'no GPU; the CPU backend checked';
  L.push(r.ok ? `result: OK (${checked})` : `result: FAILED (${r.problems.length} problem${r.problems.length === 1 ? '' : 's'})`);
  return L.join('\n');
}

const USAGE = `usage: flash-attention-node doctor [--json] [--no-selftest]

  Reports Node and the platform, which addon binary loaded and why, how it was built, the CUDA
  driver and runtime and each GPU, then runs a short self-test on the CPU backend (against naive
  float64 attention) and on each GPU (against the CPU backend). Exit status 0 when all is well
  (no GPU is well: the CPU backend is checked), 1 with the reasons otherwise, 2 for a bad option.

  --json          the report as one JSON object
  --no-selftest   the report without the self-test
`;

export async function main(argv: string[]): Promise<number> {
  if (argv.some((a) => a === '--help' || a === '-h' || a === 'help')) {
    process.stdout.write(USAGE);
    return 0;
  }
  const unknown = argv.filter((a) => !['--json', '--no-selftest'].includes(a));
  if (unknown.length) {
    process.stderr.write(`doctor: unknown option ${unknown[0]}\n\n${USAGE}`);
    return 2;
  }
  const report = await diagnose({ selfTest: !argv.includes('--no-selftest') });
  process.stdout.write((argv.includes('--json') ? JSON.stringify(report, null, 2) : renderReport(report)) + '\n');
  return report.ok ? 0 : 1;
}
