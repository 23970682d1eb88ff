// Shared attention test harness: random case generation, running one forward or backward case on
// a device, and the accuracy rules.
//
// Accuracy rules (errors are measured against the float64 reference on the exact input values):
//   float32:  relative L2 error <= 1e-5 and max abs error <= 2e-5 * max|ref| for out, dq, dk, dv;
//             lse max abs error <= 1e-5 * (1 + max|lse|). Where an exact gradient is zero (e.g. Nk = 1:
//             P = 1 so dS = 0) relative error is undefined; there the max abs error must stay within
//             (D + Nk + 2) * 2^-23 * max|terms| (twice the classic worst-case bound of float32 sums of
//             that many terms), |terms| being the magnitudes that gradient element sums.
//   float16 / bfloat16: the 2x-naive rule of flash-attn's own tests: max abs error <= 2 x that of a
//             naive attention done at the same precision (reference.ts naiveLowp) + a floor equal to
//             the unavoidable error of rounding the output to the dtype (u * max|ref|); exact-zero
//             gradients use the float32 bound above. lse (float32) must be within
//             max(2 x naive lse error, 1e-4 * (1 + max|lse|)).
//   softmaxD: equal to rowsum(dout * out) (float64, from the library's own out) within
//             (D + 2) * 2^-23 * rowsum|dout * out| per row (float32 accumulation bound); for float32 it
//             is also compared with the exact D.
//   Rows that see no key (causal, Nq > Nk): out exactly 0, lse exactly +Infinity, dq exactly 0,
//   softmaxD 0.
import { expect } from 'vitest';
import { Tensor, flashAttention, flashAttentionBackward } from '../../lib/index';
import {
  AttnDims,
  Built,
  bytesEqual,
  defaultScale,
  disposeAll,
  DType,
  DTYPES,
  fmt,
  kvShape,
  Layout,
  lseShape,
  maxAbs,
  maxAbsErr,
  naiveLowp,
  pow2,
  qShape,
  randomTensor,
  rawBytes,
  refBackward,
  refForward,
  relL2,
  Rng,
  rowOffset,
  rowsWithoutKeys,
  toF64,
  unitRoundoff,
} from './reference';

export type Device = 'cpu' | 'cuda';

export interface CpuOpts {
  blockM?: number;
  blockN?: number;
  threads?: number;
}

export interface AttnCase {
  seed: number;
  B: number;
  Nq: number;
  Nk: number;
  H: number;
  Hkv: number;
  D: number;
  causal: boolean;
  /** undefined: use the library default (1/sqrt(D)) and do not pass the option. */
  scale?: number;
  layout: Layout;
  dtype: DType;
  cpu?: CpuOpts;
  /** backward: ask for softmaxD. */
  returnSoftmaxD?: boolean;
  /** backward: pass options.deterministic. */
  deterministic?: boolean;
  /** do not pass causal: false / layout: 'bshd' explicitly (exercises the defaults). */
  omitDefaults?: boolean;
  /** options.window */
  window?: readonly [number, number];
  /** options.softcap */
  softcap?: number;
  /** float16 / bfloat16: lse held to the fp32 rule as well (the black-box fuzz's, scripts/fuzz-api.mjs): at most
   * 4 eps32 (A + max|lse| + 1) + 1e-6, A = |scale| max|q| max|k| (+ 2 min(A, softcap) under a softcap). lse is float32
   * whatever the inputs; the default bound, 1e-4 (1 + max|lse|), lets a cancelling tanh through. */
  lseFp32Rule?: boolean;
}

export function dimsOf(c: AttnCase): AttnDims {
  return {
    B: c.B,
    Nq: c.Nq,
    Nk: c.Nk,
    H: c.H,
    Hkv: c.Hkv,
    D: c.D,
    causal: c.causal,
    scale: c.scale ?? defaultScale(c.D),
    layout: c.layout,
    window: c.window,
    softcap: c.softcap,
  };
}

export function caseName(c: AttnCase): string {
  const parts = [
    c.dtype,
    c.layout,
    `B${c.B} Nq${c.Nq} Nk${c.Nk} H${c.H}/${c.Hkv} D${c.D}`,
    c.causal ? 'causal' : 'full',
  ];
  if (c.scale !== undefined) parts.push(`scale=${c.scale.toPrecision(4)}`);
  if (c.window !== undefined) parts.push(`window=[${c.window.join(',')}]`);
  if (c.softcap !== undefined) parts.push(`softcap=${c.softcap}`);
  if (c.cpu?.blockM !== undefined || c.cpu?.blockN !== undefined) parts.push(`blocks=${c.cpu?.blockM ?? '-'}x${c.cpu?.blockN ?? '-'}`);
  if (c.cpu?.threads !== undefined) parts.push(`threads=${c.cpu.threads}`);
  if (c.deterministic !== undefined) parts.push(`deterministic=${c.deterministic}`);
  parts.push(`seed=${c.seed}`);
  return parts.join(' ');
}

export function attnOptions(c: AttnCase, device: Device): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  if (c.causal || !c.omitDefaults) o.causal = c.causal;
  if (c.layout === 'bhsd' || !c.omitDefaults) o.layout = c.layout;
  if (c.scale !== undefined) o.scale = c.scale;
  if (c.window !== undefined) o.window = c.window;
  if (c.softcap !== undefined) o.softcap = c.softcap;
  if (device === 'cpu' && c.cpu) o.cpu = { ...c.cpu };
  return o;
}

// ------------------------------------------------------------------------------------------------
// Random cases.
// ------------------------------------------------------------------------------------------------

export interface GenSpec {
  seed: number;
  count: number;
  Ns: readonly number[];
  Ds: readonly number[];
  /** max B * H * Nq * Nk * D of an ordinary case */
  budget: number;
  /** every bigEvery-th case draws from bigNs under bigBudget */
  bigEvery?: number;
  bigNs?: readonly number[];
  bigBudget?: number;
  dtypes?: readonly DType[];
  cpuOptions?: boolean;
  heads?: readonly number[]; // kv heads
  groups?: readonly number[]; // H / Hkv
  batches?: readonly number[];
}

export const CPU_BLOCKS = [1, 2, 3, 4, 8, 16, 32, 48, 64, 128] as const;

export function work(c: Pick<AttnCase, 'B' | 'H' | 'Nq' | 'Nk' | 'D'>): number {
  return c.B * c.H * c.Nq * c.Nk * c.D;
}

/**
 * Deterministic random cases. dtype, layout and causal cycle so every combination is covered evenly;
 * shapes are drawn (rejection-sampled under the work budget, then shrunk if needed).
 */
export function randomCases(spec: GenSpec): AttnCase[] {
  const rng = new Rng(spec.seed);
  const dtypes = spec.dtypes ?? DTYPES;
  const heads = spec.heads ?? [1, 1, 2, 3];
  const groups = spec.groups ?? [1, 1, 2, 3, 4, 8];
  const batches = spec.batches ?? [1, 1, 2, 3];
  const cases: AttnCase[] = [];
  for (let i = 0; i < spec.count; i++) {
    const dtype = dtypes[i % dtypes.length];
    const layout: Layout = Math.floor(i / dtypes.length) % 2 === 0 ? 'bshd' : 'bhsd';
    const causal = Math.floor(i / (2 * dtypes.length)) % 2 === 1;
    const big = spec.bigEvery !== undefined && i % spec.bigEvery === spec.bigEvery - 1;
    const Ns = big && spec.bigNs ? spec.bigNs : spec.Ns;
    const budget = big && spec.bigBudget ? spec.bigBudget : spec.budget;
    let c: AttnCase | null = null;
    for (let attempt = 0; attempt < 60; attempt++) {
      const Nq = rng.pick(Ns);
      const Nk = rng.bool(0.3) ? Nq : rng.pick(Ns);
      const D = rng.pick(spec.Ds);
      const Hkv = rng.pick(heads);
      const H = Hkv * rng.pick(groups);
      const B = rng.pick(batches);
      c = { seed: 0, B, Nq, Nk, H, Hkv, D, causal, layout, dtype };
      if (work(c) <= budget) break;
    }
    const cc = c as AttnCase;
    // Still too big after rejection sampling: shrink batch, then heads, then the longer sequence.
    while (work(cc) > budget) {
      if (cc.B > 1) cc.B = 1;
      else if (cc.H > cc.Hkv) cc.H = cc.Hkv;
      else if (cc.Nq >= cc.Nk && cc.Nq > 1) cc.Nq = Math.ceil(cc.Nq / 2);
      else if (cc.Nk > 1) cc.Nk = Math.ceil(cc.Nk / 2);
      else break;
    }
    if (rng.bool(0.3)) cc.scale = defaultScale(cc.D) * rng.range(0.25, 2);
    if (spec.cpuOptions) {
      if (rng.bool(0.7)) cc.cpu = { blockM: rng.pick(CPU_BLOCKS), blockN: rng.pick(CPU_BLOCKS) };
      if (rng.bool(0.3)) cc.cpu = { ...(cc.cpu ?? {}), threads: rng.pick([1, 2, 3]) };
    }
    cc.omitDefaults = rng.bool(0.5);
    cc.returnSoftmaxD = rng.bool(0.6);
    cc.seed = (spec.seed * 7919 + i * 104729) >>> 0;
    cases.push(cc);
  }
  return cases;
}

// ------------------------------------------------------------------------------------------------
// Checking.
// ------------------------------------------------------------------------------------------------

/** Collects every failed condition of a case and reports them together. */
export class Checker {
  readonly failures: string[] = [];
  constructor(readonly label: string) {}
  le(what: string, value: number, limit: number): void {
    if (!(value <= limit)) this.failures.push(`${what}: ${fmt(value)} > limit ${fmt(limit)}`);
  }
  ok(what: string, cond: boolean): void {
    if (!cond) this.failures.push(what);
  }
  eq(what: string, got: unknown, want: unknown): void {
    const g = JSON.stringify(got);
    const w = JSON.stringify(want);
    if (g !== w) this.failures.push(`${what}: got ${g}, expected ${w}`);
  }
  done(): void {
    expect(this.failures, `${this.label}:\n  ${this.failures.join('\n  ')}`).toEqual([]);
  }
}

function l2(a: ArrayLike<number>): number {
  let s = 0;
  for (let i = 0; i < a.length; i++) if (Number.isFinite(a[i])) s += a[i] * a[i];
  return Math.sqrt(s);
}

export const FP32_REL_L2 = 1e-5;
export const FP32_MAX_ABS_REL = 2e-5;

/** float32 rule (see the header). `mag`: term magnitudes, for the zero-gradient fallback. */
export function checkFp32(
  ck: Checker,
  name: string,
  got: ArrayLike<number>,
  ref: ArrayLike<number>,
  mag?: { values: ArrayLike<number>; terms: number },
): void {
  if (mag && l2(ref) <= 1e-3 * l2(mag.values)) {
    ck.le(
      `${name} max abs err (exact ${name} ~ 0; bound (terms+2)*2^-23*max|terms|)`,
      maxAbsErr(got, ref),
      (mag.terms + 2) * pow2(-23) * maxAbs(mag.values),
    );
    return;
  }
  ck.le(`${name} relative L2 error`, relL2(got, ref), FP32_REL_L2);
  ck.le(`${name} max abs error (limit 2e-5 * max|ref|)`, maxAbsErr(got, ref), FP32_MAX_ABS_REL * maxAbs(ref));
}

/** 2x-naive rule (see the header). */
export function checkLowp(
  ck: Checker,
  name: string,
  dtype: DType,
  got: ArrayLike<number>,
  ref: ArrayLike<number>,
  naive: ArrayLike<number>,
  mag?: { values: ArrayLike<number>; terms: number },
): void {
  const errImpl = maxAbsErr(got, ref);
  const errNaive = maxAbsErr(naive, ref);
  if (mag && l2(ref) <= 1e-3 * l2(mag.values)) {
    // The exact gradient is zero (the naive one usually is too, exactly): bound float32 rounding.
    ck.le(
      `${name} max abs err (exact ${name} ~ 0; bound (terms+2)*2^-23*max|terms|)`,
      errImpl,
      (mag.terms + 2) * pow2(-23) * maxAbs(mag.values),
    );
    return;
  }
  const floor = unitRoundoff(dtype) * maxAbs(ref);
  ck.le(
    `${name} max abs error vs 2x naive ${dtype} (naive ${fmt(errNaive)}, floor ${fmt(floor)}, rel L2 ${fmt(relL2(got, ref))})`,
    errImpl,
    2 * errNaive + floor,
  );
}

export function checkLse(ck: Checker, dtype: DType, got: ArrayLike<number>, ref: ArrayLike<number>, naive?: ArrayLike<number>): void {
  const scale = 1 + maxAbs(ref);
  if (dtype === 'float32' || !naive) {
    ck.le('lse max abs error (limit 1e-5 * (1 + max|lse|))', maxAbsErr(got, ref), 1e-5 * scale);
  } else {
    const errNaive = maxAbsErr(naive, ref);
    ck.le(
      `lse max abs error (limit max(2 x naive ${fmt(errNaive)}, 1e-4 * (1 + max|lse|)))`,
      maxAbsErr(got, ref),
      Math.max(2 * errNaive, 1e-4 * scale),
    );
  }
}

/** The fp32 rule for a float16 / bfloat16 call's lse (AttnCase.lseFp32Rule). */
export function checkLseFp32Rule(ck: Checker, c: Pick<AttnCase, 'D' | 'scale' | 'softcap'>, got: ArrayLike<number>,
  ref: ArrayLike<number>, q: ArrayLike<number>, k: ArrayLike<number>): void {
  const scale = Math.abs(c.scale ?? 1 / Math.sqrt(c.D));
  const a0 = scale * maxAbs(q) * maxAbs(k);
  const A = a0 + (c.softcap ? 2 * Math.min(a0, c.softcap) : 0);
  ck.le(`lse max abs error (fp32 rule: 4 eps32 (A ${fmt(A)} + max|lse| + 1) + 1e-6)`, maxAbsErr(got, ref),
    4 * pow2(-23) * (A + maxAbs(ref) + 1) + 1e-6);
}

/** Rows that see no key: out row exactly 0 and lse exactly +Infinity (and the same for dq, D). */
export function checkMaskedRows(
  ck: Checker,
  d: AttnDims,
  rowTensors: Record<string, ArrayLike<number>>,
  perRow: Record<string, { values: ArrayLike<number>; want: number }>,
): void {
  const rows = rowsWithoutKeys(d);
  if (rows.length === 0) return;
  for (const [name, a] of Object.entries(rowTensors)) {
    let bad = 0;
    for (let b = 0; b < d.B; b++)
      for (let h = 0; h < d.H; h++)
        for (const i of rows) {
          const o = rowOffset(d.layout, b, i, h, d.Nq, d.H, d.D);
          for (let x = 0; x < d.D; x++) if (a[o + x] !== 0) bad++;
        }
    ck.ok(`${name}: ${bad} elements of rows that see no key are not exactly 0`, bad === 0);
  }
  for (const [name, { values, want }] of Object.entries(perRow)) {
    let bad = 0;
    for (let b = 0; b < d.B; b++)
      for (let h = 0; h < d.H; h++) for (const i of rows) if (values[(b * d.H + h) * d.Nq + i] !== want) bad++;
    ck.ok(`${name}: ${bad} rows that see no key are not exactly ${want}`, bad === 0);
  }
}

/** The host tensor t itself on the CPU, else a copy on the GPU (t disposed). */
export async function onDevice(t: Tensor, device: Device): Promise<Tensor> {
  if (device === 'cpu') return t;
  const d = await t.to('cuda');
  t.dispose();
  return d;
}

export function place(b: Built, device: Device): Promise<Tensor> {
  return onDevice(b.tensor, device);
}

export function expectedDevice(device: Device): string {
  return device === 'cpu' ? 'cpu' : 'cuda:0';
}

async function checkUnchanged(ck: Checker, name: string, t: Tensor, values: Float64Array): Promise<void> {
  const now = await toF64(t);
  let same = now.length === values.length;
  for (let i = 0; same && i < now.length; i++) if (!Object.is(now[i], values[i])) same = false;
  ck.ok(`input ${name} was modified by the call`, same);
}

export interface Inputs {
  d: AttnDims;
  q: Built;
  k: Built;
  v: Built;
  dout: Built;
}

export function makeInputs(c: AttnCase): Inputs {
  const d = dimsOf(c);
  const rng = new Rng(c.seed);
  const q = randomTensor(rng, qShape(d), c.dtype);
  const k = randomTensor(rng, kvShape(d), c.dtype);
  const v = randomTensor(rng, kvShape(d), c.dtype);
  const dout = randomTensor(rng, qShape(d), c.dtype);
  return { d, q, k, v, dout };
}

/** Runs flashAttention on one case and checks out and lse against the float64 reference. */
export async function checkForwardCase(c: AttnCase, device: Device = 'cpu'): Promise<void> {
  const { d, q, k, v, dout } = makeInputs(c);
  dout.tensor.dispose();
  const qt = await place(q, device);
  const kt = await place(k, device);
  const vt = await place(v, device);
  const ck = new Checker(`forward ${device} ${caseName(c)}`);
  try {
    const res = await flashAttention(qt, kt, vt, attnOptions(c, device));
    try {
      ck.eq('out.shape', res.out.shape, qShape(d));
      ck.eq('out.dtype', res.out.dtype, c.dtype);
      ck.eq('out.device', res.out.device, expectedDevice(device));
      ck.eq('lse.shape', res.lse.shape, lseShape(d));
      ck.eq('lse.dtype', res.lse.dtype, 'float32');
      ck.eq('lse.device', res.lse.device, expectedDevice(device));
      const out = await toF64(res.out);
      const lse = await toF64(res.lse);
      const ref = refForward(q.values, k.values, v.values, d);
      checkMaskedRows(ck, d, { out }, { lse: { values: lse, want: Infinity } });
      if (c.dtype === 'float32') {
        checkFp32(ck, 'out', out, ref.out);
        checkLse(ck, c.dtype, lse, ref.lse);
      } else {
        const naive = naiveLowp(q.values, k.values, v.values, null, d, c.dtype);
        checkLowp(ck, 'out', c.dtype, out, ref.out, naive.out);
        checkLse(ck, c.dtype, lse, ref.lse, naive.lse);
        if (c.lseFp32Rule) checkLseFp32Rule(ck, c, lse, ref.lse, q.values, k.values);
      }
      await checkUnchanged(ck, 'q', qt, q.values);
      await checkUnchanged(ck, 'k', kt, k.values);
      await checkUnchanged(ck, 'v', vt, v.values);
    } finally {
      disposeAll(res.out, res.lse);
    }
  } finally {
    disposeAll(qt, kt, vt);
  }
  ck.done();
}

/** Runs forward then flashAttentionBackward on one case and checks dq, dk, dv (and D). */
export async function checkBackwardCase(c: AttnCase, device: Device = 'cpu'): Promise<void> {
  const { d, q, k, v, dout } = makeInputs(c);
  const qt = await place(q, device);
  const kt = await place(k, device);
  const vt = await place(v, device);
  const dot = await place(dout, device);
  const ck = new Checker(`backward ${device} ${caseName(c)}`);
  const opts = attnOptions(c, device);
  try {
    const fwd = await flashAttention(qt, kt, vt, opts);
    const bopts: Record<string, unknown> = c.returnSoftmaxD ? { ...opts, returnSoftmaxD: true } : { ...opts };
    if (c.deterministic !== undefined) bopts.deterministic = c.deterministic;
    const g = await flashAttentionBackward(dot, qt, kt, vt, fwd.out, fwd.lse, bopts);
    try {
      ck.eq('dq.shape', g.dq.shape, qShape(d));
      ck.eq('dk.shape', g.dk.shape, kvShape(d));
      ck.eq('dv.shape', g.dv.shape, kvShape(d));
      for (const [n, t] of [['dq', g.dq], ['dk', g.dk], ['dv', g.dv]] as const) {
        ck.eq(`${n}.dtype`, t.dtype, c.dtype);
        ck.eq(`${n}.device`, t.device, expectedDevice(device));
      }
      const dq = await toF64(g.dq);
      const dk = await toF64(g.dk);
      const dv = await toF64(g.dv);
      const out = await toF64(fwd.out);
      const ref = refBackward(q.values, k.values, v.values, dout.values, d);
      const perRow: Record<string, { values: ArrayLike<number>; want: number }> = {};
      if (c.returnSoftmaxD) {
        ck.ok('softmaxD missing although returnSoftmaxD: true', g.softmaxD !== undefined);
        if (g.softmaxD) {
          ck.eq('softmaxD.shape', g.softmaxD.shape, lseShape(d));
          ck.eq('softmaxD.dtype', g.softmaxD.dtype, 'float32');
          const D = await toF64(g.softmaxD);
          checkSoftmaxD(ck, d, D, dout.values, out);
          if (c.dtype === 'float32') checkFp32(ck, 'softmaxD vs exact D', D, ref.softmaxD);
          perRow.softmaxD = { values: D, want: 0 };
        }
      } else {
        ck.ok('softmaxD returned although returnSoftmaxD was not set', g.softmaxD === undefined);
      }
      checkMaskedRows(ck, d, { dq }, perRow);
      const termsQ = d.Nk;
      const termsK = d.Nq * (d.H / d.Hkv);
      if (c.dtype === 'float32') {
        checkFp32(ck, 'dq', dq, ref.dq, { values: ref.dqMag, terms: termsQ + d.D });
        checkFp32(ck, 'dk', dk, ref.dk, { values: ref.dkMag, terms: termsK + d.D });
        checkFp32(ck, 'dv', dv, ref.dv, { values: ref.dvMag, terms: termsK });
      } else {
        const naive = naiveLowp(q.values, k.values, v.values, dout.values, d, c.dtype);
        checkLowp(ck, 'dq', c.dtype, dq, ref.dq, naive.dq as Float64Array, { values: ref.dqMag, terms: termsQ + d.D });
        checkLowp(ck, 'dk', c.dtype, dk, ref.dk, naive.dk as Float64Array, { values: ref.dkMag, terms: termsK + d.D });
        checkLowp(ck, 'dv', c.dtype, dv, ref.dv, naive.dv as Float64Array, { values: ref.dvMag, terms: termsK });
      }
      await checkUnchanged(ck, 'dout', dot, dout.values);
      await checkUnchanged(ck, 'q', qt, q.values);
      await checkUnchanged(ck, 'k', kt, k.values);
      await checkUnchanged(ck, 'v', vt, v.values);
    } finally {
      disposeAll(fwd.out, fwd.lse, g.dq, g.dk, g.dv, g.softmaxD);
    }
  } finally {
    disposeAll(qt, kt, vt, dot);
  }
  ck.done();
}

/**
 * softmaxD must be rowsum(dout * out) of the out it was given: compared in float64 with a per-row
 * bound of (D + 2) * 2^-23 * rowsum|dout * out| (twice the worst-case error of a float32 sum of D
 * products).
 */
export function checkSoftmaxD(ck: Checker, d: AttnDims, got: ArrayLike<number>, dout: ArrayLike<number>, out: ArrayLike<number>): void {
  let worst = 0;
  let bad = 0;
  for (let b = 0; b < d.B; b++)
    for (let h = 0; h < d.H; h++)
      for (let i = 0; i < d.Nq; i++) {
        const o = rowOffset(d.layout, b, i, h, d.Nq, d.H, d.D);
        let s = 0;
        let a = 0;
        for (let x = 0; x < d.D; x++) {
          s += dout[o + x] * out[o + x];
          a += Math.abs(dout[o + x] * out[o + x]);
        }
        const e = Math.abs(got[(b * d.H + h) * d.Nq + i] - s);
        const tol = (d.D + 2) * pow2(-23) * a;
        if (!(e <= tol)) {
          bad++;
          worst = Math.max(worst, e / (a || 1));
        }
      }
  ck.ok(`softmaxD != rowsum(dout * out) in ${bad} rows (worst error / rowsum|dout*out| = ${fmt(worst)})`, bad === 0);
}

/** A shape for the deterministic-mode check: its forward runs once, its backward three times. */
export interface DetCase extends Pick<AttnDims, 'B' | 'Nq' | 'Nk' | 'H' | 'Hkv' | 'D'> {
  opts: { causal?: boolean; window?: [number, number] };
}

/** Three CUDA backward calls with deterministic: true give bit-identical dq, dk, dv (random inputs from seed). */
export async function checkDeterministicBackward(cs: DetCase, dtype: DType, seed: number): Promise<void> {
  const rng = new Rng(seed);
  const host = [
    randomTensor(rng, [cs.B, cs.Nq, cs.H, cs.D], dtype),
    randomTensor(rng, [cs.B, cs.Nk, cs.Hkv, cs.D], dtype),
    randomTensor(rng, [cs.B, cs.Nk, cs.Hkv, cs.D], dtype),
    randomTensor(rng, [cs.B, cs.Nq, cs.H, cs.D], dtype),
  ];
  const [q, k, v, dout] = await Promise.all(host.map((h) => h.tensor.to('cuda')));
  host.forEach((h) => h.tensor.dispose());
  const f = await flashAttention(q, k, v, cs.opts);
  const runs: Uint8Array[][] = [];
  for (let i = 0; i < 3; i++) {
    const g = await flashAttentionBackward(dout, q, k, v, f.out, f.lse, { ...cs.opts, deterministic: true });
    runs.push([await rawBytes(g.dq), await rawBytes(g.dk), await rawBytes(g.dv)]);
    disposeAll(g.dq, g.dk, g.dv);
  }
  for (const r of runs.slice(1)) for (let j = 0; j < 3; j++) expect(bytesEqual(r[j], runs[0][j]), ['dq', 'dk', 'dv'][j]).toBe(true);
  disposeAll(q, k, v, dout, f.out, f.lse);
}
