// Test references for flash-attention-node.
//
// Everything here is independent of the library's numerics: a seeded PRNG, exact float16/bfloat16
// rounding written in JS, a float64 naive attention (forward and backward) that is the ground
// truth, a "naive low-precision" attention that defines the 2x-naive tolerance rule, error
// metrics, helpers that build Tensors whose elements are exactly the values the reference used,
// and the GPU-suite gate (describeGpu / hasGpu).
//
// Shapes follow the API: q is [B, Nq, H, D] and k, v are [B, Nk, Hkv, D] in the 'bshd' layout;
// 'bhsd' stores the same tensors as [B, H, N, D]. All reference functions take and return flat
// Float64Arrays in the layout given by dims.layout (lse and softmaxD are always [B, H, Nq]).
import { describe, it } from 'vitest';
import { Tensor, devices, buildInfo } from '../../lib/index';

export type DType = 'float32' | 'float16' | 'bfloat16';
export type Layout = 'bshd' | 'bhsd';
export const DTYPES: readonly DType[] = ['float32', 'float16', 'bfloat16'];

// ------------------------------------------------------------------------------------------------
// Seeded PRNG: mulberry32 for uniforms, Box-Muller for normals.
// ------------------------------------------------------------------------------------------------

export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

export class Rng {
  private readonly next: () => number;
  private spare: number | null = null;
  constructor(seed: number) {
    this.next = mulberry32(seed);
  }
  /** Uniform in [0, 1). */
  uniform(): number {
    return this.next();
  }
  /** Uniform in [lo, hi). */
  range(lo: number, hi: number): number {
    return lo + (hi - lo) * this.next();
  }
  /** Integer in [lo, hi] (inclusive). */
  int(lo: number, hi: number): number {
    return lo + Math.floor(this.next() * (hi - lo + 1));
  }
  bool(pTrue = 0.5): boolean {
    return this.next() < pTrue;
  }
  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.next() * items.length)];
  }
  /** Standard normal (Box-Muller, both values used). */
  normal(): number {
    if (this.spare !== null) {
      const s = this.spare;
      this.spare = null;
      return s;
    }
    const u1 = 1 - this.next(); // (0, 1]
    const u2 = this.next();
    const r = Math.sqrt(-2 * Math.log(u1));
    this.spare = r * Math.sin(2 * Math.PI * u2);
    return r * Math.cos(2 * Math.PI * u2);
  }
  normals(n: number, std = 1): Float64Array {
    const out = new Float64Array(n);
    for (let i = 0; i < n; i++) out[i] = std * this.normal();
    return out;
  }
  /** Random uint32 (two draws, so every bit pattern is reachable). */
  uint32(): number {
    const hi = Math.floor(this.next() * 65536);
    const lo = Math.floor(this.next() * 65536);
    return ((hi << 16) | lo) >>> 0;
  }
}

// ------------------------------------------------------------------------------------------------
// Exact float16 / bfloat16 rounding (round to nearest, ties to even) in JS.
// ------------------------------------------------------------------------------------------------

const scratchF64 = new Float64Array(1);
const scratchF64U32 = new Uint32Array(scratchF64.buffer); // little-endian: [lo, hi]
const scratchF32 = new Float32Array(1);
const scratchF32U32 = new Uint32Array(scratchF32.buffer);

// Exact powers of two 2^-1074 .. 2^1023 (built by repeated exact doubling / halving).
const POW2_BIAS = 1074;
const POW2 = (() => {
  const t = new Float64Array(1074 + 1024);
  t[POW2_BIAS] = 1;
  for (let e = 1; e <= 1023; e++) t[POW2_BIAS + e] = t[POW2_BIAS + e - 1] * 2;
  for (let e = -1; e >= -1074; e--) t[POW2_BIAS + e] = t[POW2_BIAS + e + 1] / 2;
  return t;
})();
export function pow2(e: number): number {
  return POW2[POW2_BIAS + e];
}

/** Unbiased binary exponent of a positive normal float64 (floor(log2(a)), exactly). */
function exponentOf(a: number): number {
  scratchF64[0] = a;
  return ((scratchF64U32[1] >>> 20) & 0x7ff) - 1023;
}

function isNegative(x: number): boolean {
  return x < 0 || (x === 0 && 1 / x < 0);
}

/**
 * Rounds any float64 x to the nearest value of a binary format with `p` significand bits (implicit
 * bit included), minimum normal exponent `emin` (gradual underflow below it), largest finite value
 * `maxFinite` and maximum exponent `emax`. Ties go to the even significand; values that round past
 * maxFinite become infinite; the sign of zero is kept. One rounding step, straight from float64.
 *
 * How: for a in [2^e, 2^(e+1)) the quantum is 2^(e-p+1); adding c = 2^(e-p+1+52) puts a + c in a
 * binade whose float64 ulp is exactly that quantum, so the hardware's own round-to-nearest-even
 * addition does the rounding, and subtracting c again is exact.
 */
function roundToFormat(x: number, p: number, emin: number, emax: number, maxFinite: number): number {
  if (x !== x) return NaN;
  const a = Math.abs(x);
  if (a === Infinity) return x;
  if (a === 0) return x;
  if (a >= pow2(emax + 1)) return isNegative(x) ? -Infinity : Infinity;
  const e = a >= pow2(emin) ? exponentOf(a) : emin;
  const c = pow2(e - p + 1 + 52);
  let r = a + c - c;
  if (r > maxFinite) r = Infinity;
  return isNegative(x) ? -r : r;
}

export const F16_MAX = 65504;
export const BF16_MAX = (2 - pow2(-7)) * pow2(127); // 3.3895313892515355e38

/** Nearest float16 value (RNE) of a float64, as a number. */
export function roundToF16(x: number): number {
  return roundToFormat(x, 11, -14, 15, F16_MAX);
}

/** Nearest bfloat16 value (RNE) of a float64, as a number. */
export function roundToBf16(x: number): number {
  return roundToFormat(x, 8, -126, 127, BF16_MAX);
}

/** Decodes float16 bits. */
export function f16BitsToF32(bits: number): number {
  const b = bits & 0xffff;
  const sign = b & 0x8000 ? -1 : 1;
  const exp = (b >>> 10) & 0x1f;
  const mant = b & 0x3ff;
  if (exp === 0) return sign * mant * pow2(-24);
  if (exp === 31) return mant === 0 ? sign * Infinity : NaN;
  return sign * (1024 + mant) * pow2(exp - 25);
}

/** Decodes bfloat16 bits (they are the top half of a float32). */
export function bf16BitsToF32(bits: number): number {
  scratchF32U32[0] = ((bits & 0xffff) << 16) >>> 0;
  return scratchF32[0];
}

/** float16 bits of the float32 value x (x is first taken as float32: Math.fround). NaN -> 0x7e00. */
export function f32ToF16Bits(x: number): number {
  const r = roundToF16(Math.fround(x));
  if (r !== r) return 0x7e00;
  const sign = isNegative(r) ? 0x8000 : 0;
  const a = Math.abs(r);
  if (a === Infinity) return sign | 0x7c00;
  if (a < pow2(-14)) return sign | (a * pow2(24)); // subnormal (or zero): exact integer 0..1023
  const e = exponentOf(a);
  const mant = a * pow2(-e) * 1024 - 1024; // exact integer 0..1023
  return sign | ((e + 15) << 10) | mant;
}

/** bfloat16 bits of the float32 value x (RNE on the float32 bit pattern; NaN stays a quiet NaN). */
export function f32ToBf16Bits(x: number): number {
  scratchF32[0] = x;
  const u = scratchF32U32[0];
  if ((u & 0x7f800000) === 0x7f800000 && (u & 0x007fffff) !== 0) return ((u >>> 16) | 0x40) & 0xffff;
  // Largest non-NaN pattern is 0xff800000 (-inf), so the sum never reaches 2^32.
  return Math.floor((u + 0x7fff + ((u >>> 16) & 1)) / 65536) & 0xffff;
}

/** Rounds a value to the given dtype (float32: Math.fround). */
export function roundTo(dtype: DType): (x: number) => number {
  switch (dtype) {
    case 'float32':
      return Math.fround;
    case 'float16':
      return roundToF16;
    case 'bfloat16':
      return roundToBf16;
  }
}

/** Unit roundoff of a dtype: 2^-p with p the significand bits. */
export function unitRoundoff(dtype: DType): number {
  return dtype === 'float32' ? pow2(-24) : dtype === 'float16' ? pow2(-11) : pow2(-8);
}

export function roundArray(x: ArrayLike<number>, dtype: DType): Float64Array {
  const r = roundTo(dtype);
  const out = new Float64Array(x.length);
  for (let i = 0; i < x.length; i++) out[i] = r(x[i]);
  return out;
}

/** Raw bits (float16/bfloat16) of values that are already exactly representable (or get RNE). */
export function toBits(x: ArrayLike<number>, dtype: 'float16' | 'bfloat16'): Uint16Array {
  const enc = dtype === 'float16' ? f32ToF16Bits : f32ToBf16Bits;
  const r = dtype === 'float16' ? roundToF16 : roundToBf16;
  const out = new Uint16Array(x.length);
  // Round from float64 first (one rounding), then encode (the value is exact in float32 then).
  for (let i = 0; i < x.length; i++) out[i] = enc(r(x[i]));
  return out;
}

export function fromBits(bits: ArrayLike<number>, dtype: 'float16' | 'bfloat16'): Float64Array {
  const dec = dtype === 'float16' ? f16BitsToF32 : bf16BitsToF32;
  const out = new Float64Array(bits.length);
  for (let i = 0; i < bits.length; i++) out[i] = dec(bits[i]);
  return out;
}

// ------------------------------------------------------------------------------------------------
// Attention references.
// ------------------------------------------------------------------------------------------------

export interface AttnDims {
  B: number;
  Nq: number;
  Nk: number;
  H: number;
  Hkv: number;
  D: number;
  causal: boolean;
  scale: number;
  layout: Layout;
  /** Sliding window [left, right] (-1: unbounded side), as the API's options.window. */
  window?: readonly [number, number];
  /** > 0: scores s become softcap * tanh(s / softcap). */
  softcap?: number;
}

export function defaultScale(D: number): number {
  return 1 / Math.sqrt(D);
}

/** Offset of element [b, n, h, 0] of a [B, N, Hh, D] tensor stored in `layout`. */
export function rowOffset(layout: Layout, b: number, n: number, h: number, N: number, Hh: number, D: number): number {
  return layout === 'bshd' ? ((b * N + n) * Hh + h) * D : ((b * Hh + h) * N + n) * D;
}

export function qShape(d: AttnDims): number[] {
  return d.layout === 'bshd' ? [d.B, d.Nq, d.H, d.D] : [d.B, d.H, d.Nq, d.D];
}
export function kvShape(d: AttnDims): number[] {
  return d.layout === 'bshd' ? [d.B, d.Nk, d.Hkv, d.D] : [d.B, d.Hkv, d.Nk, d.D];
}
export function lseShape(d: AttnDims): number[] {
  return [d.B, d.H, d.Nq];
}

/**
 * Keys row i sees, [first, last] inclusive (first > last: none): with p = i + Nk - Nq (bottom-right
 * alignment), keys j with p - left <= j <= p + right, 0 <= j < Nk; causal is right = 0, -1 or an
 * absent window side is unbounded.
 */
export function visibleKeys(i: number, d: Pick<AttnDims, 'Nq' | 'Nk' | 'causal' | 'window'>): [number, number] {
  const p = i + d.Nk - d.Nq;
  const wl = d.window ? d.window[0] : -1;
  const wr = d.window ? d.window[1] : -1;
  let right = wr < 0 ? Infinity : wr;
  if (d.causal) right = Math.min(right, 0);
  const left = wl < 0 ? Infinity : wl;
  return [Math.max(0, p - left), Math.min(d.Nk - 1, p + right)];
}

/** Last key index row i may see; -1 when it sees none. */
export function lastVisibleKey(i: number, d: AttnDims): number {
  const [lo, hi] = visibleKeys(i, d);
  return lo > hi ? -1 : hi;
}

/** Query rows (indices into [0, Nq)) that see no key at all. */
export function rowsWithoutKeys(d: AttnDims): number[] {
  const rows: number[] = [];
  for (let i = 0; i < d.Nq; i++) {
    const [lo, hi] = visibleKeys(i, d);
    if (lo > hi) rows.push(i);
  }
  return rows;
}

/** The score of a raw dot product: scale * dot, or softcap * tanh(scale * dot / softcap). */
export function scoreOf(dot: number, d: Pick<AttnDims, 'scale' | 'softcap'>): number {
  const s = dot * d.scale;
  return d.softcap && d.softcap > 0 ? d.softcap * Math.tanh(s / d.softcap) : s;
}
/** d score / d dot. */
export function scoreSlope(dot: number, d: Pick<AttnDims, 'scale' | 'softcap'>): number {
  if (!(d.softcap && d.softcap > 0)) return d.scale;
  const t = Math.tanh((dot * d.scale) / d.softcap);
  return d.scale * (1 - t * t);
}

export interface FwdResult {
  out: Float64Array;
  lse: Float64Array;
}

/**
 * float64 naive attention forward. Row i of head h (kv head h / (H / Hkv)) attends to keys
 * 0..lastVisibleKey(i); a row with no key gets out = 0 and lse = +Infinity.
 */
export function refForward(q: ArrayLike<number>, k: ArrayLike<number>, v: ArrayLike<number>, d: AttnDims): FwdResult {
  const { B, Nq, Nk, H, Hkv, D, layout } = d;
  const out = new Float64Array(B * Nq * H * D);
  const lse = new Float64Array(B * H * Nq);
  const group = H / Hkv;
  const s = new Float64Array(Nk);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const hk = Math.floor(h / group);
      for (let i = 0; i < Nq; i++) {
        const [first, last] = visibleKeys(i, d);
        const li = (b * H + h) * Nq + i;
        if (first > last) {
          lse[li] = Infinity;
          continue;
        }
        const qo = rowOffset(layout, b, i, h, Nq, H, D);
        let m = -Infinity;
        for (let j = first; j <= last; j++) {
          const ko = rowOffset(layout, b, j, hk, Nk, Hkv, D);
          let dot = 0;
          for (let x = 0; x < D; x++) dot += q[qo + x] * k[ko + x];
          const sj = scoreOf(dot, d);
          s[j] = sj;
          if (sj > m) m = sj;
        }
        let l = 0;
        for (let j = first; j <= last; j++) {
          const e = Math.exp(s[j] - m);
          s[j] = e;
          l += e;
        }
        const inv = 1 / l;
        for (let j = first; j <= last; j++) {
          const p = s[j] * inv;
          const vo = rowOffset(layout, b, j, hk, Nk, Hkv, D);
          for (let x = 0; x < D; x++) out[qo + x] += p * v[vo + x];
        }
        lse[li] = m + Math.log(l);
      }
    }
  }
  return { out, lse };
}

export interface BwdResult extends FwdResult {
  dq: Float64Array;
  dk: Float64Array;
  dv: Float64Array;
  /** D = rowsum(dO * O), [B, H, Nq] (0 for rows that see no key). */
  softmaxD: Float64Array;
  /**
   * Magnitudes of the terms each gradient element sums (|.| taken inside every sum, dS's two terms
   * separately): the scale of rounding errors any finite-precision implementation makes. Used only
   * where the exact gradient is (numerically) zero, e.g. Nk = 1, where relative error is undefined.
   */
  dqMag: Float64Array;
  dkMag: Float64Array;
  dvMag: Float64Array;
}

/**
 * float64 naive attention backward of loss = sum(out * dout), through the softmax Jacobian:
 * dP = dO V^T, D_i = sum_j P_ij dP_ij (= rowsum(dO * O)), dS = P * (dP - D), dQ = scale dS K,
 * dK = scale dS^T Q, dV = P^T dO; dK and dV are summed over each GQA group.
 */
export function refBackward(
  q: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  dout: ArrayLike<number>,
  d: AttnDims,
): BwdResult {
  const { B, Nq, Nk, H, Hkv, D, scale, layout } = d;
  const nq = B * Nq * H * D;
  const nk = B * Nk * Hkv * D;
  const out = new Float64Array(nq);
  const lse = new Float64Array(B * H * Nq);
  const dq = new Float64Array(nq);
  const dk = new Float64Array(nk);
  const dv = new Float64Array(nk);
  const dqMag = new Float64Array(nq);
  const dkMag = new Float64Array(nk);
  const dvMag = new Float64Array(nk);
  const softmaxD = new Float64Array(B * H * Nq);
  const group = H / Hkv;
  const absScale = Math.abs(scale);
  const p = new Float64Array(Nk);
  const dp = new Float64Array(Nk);
  const slope = new Float64Array(Nk);
  const kOff = new Int32Array(Nk);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const hk = Math.floor(h / group);
      for (let j = 0; j < Nk; j++) kOff[j] = rowOffset(layout, b, j, hk, Nk, Hkv, D);
      for (let i = 0; i < Nq; i++) {
        const [first, last] = visibleKeys(i, d);
        const li = (b * H + h) * Nq + i;
        if (first > last) {
          lse[li] = Infinity;
          continue;
        }
        const qo = rowOffset(layout, b, i, h, Nq, H, D);
        let m = -Infinity;
        for (let j = first; j <= last; j++) {
          const ko = kOff[j];
          let dot = 0;
          let dpj = 0;
          for (let x = 0; x < D; x++) {
            dot += q[qo + x] * k[ko + x];
            dpj += dout[qo + x] * v[ko + x];
          }
          p[j] = scoreOf(dot, d);
          slope[j] = scoreSlope(dot, d);
          dp[j] = dpj;
          if (p[j] > m) m = p[j];
        }
        let l = 0;
        for (let j = first; j <= last; j++) {
          p[j] = Math.exp(p[j] - m);
          l += p[j];
        }
        let Di = 0;
        for (let j = first; j <= last; j++) {
          p[j] /= l;
          Di += p[j] * dp[j];
        }
        lse[li] = m + Math.log(l);
        softmaxD[li] = Di;
        const absD = Math.abs(Di);
        for (let j = first; j <= last; j++) {
          const pj = p[j];
          const ds = pj * (dp[j] - Di) * slope[j];
          const dsMag = pj * (Math.abs(dp[j]) + absD) * Math.max(Math.abs(slope[j]), absScale * 1e-3);
          const ko = kOff[j];
          for (let x = 0; x < D; x++) {
            out[qo + x] += pj * v[ko + x];
            dq[qo + x] += ds * k[ko + x];
            dk[ko + x] += ds * q[qo + x];
            dv[ko + x] += pj * dout[qo + x];
            dqMag[qo + x] += dsMag * Math.abs(k[ko + x]);
            dkMag[ko + x] += dsMag * Math.abs(q[qo + x]);
            dvMag[ko + x] += pj * Math.abs(dout[qo + x]);
          }
        }
      }
    }
  }
  return { out, lse, dq, dk, dv, softmaxD, dqMag, dkMag, dvMag };
}

/**
 * Naive attention at low precision, the yardstick of the 2x-naive rule (as in flash-attn's tests:
 * an implementation's max error against float64 may be at most twice that of the naive computation
 * done at the same precision). Inputs must already be values of `dtype`.
 *   S = round_dtype(fp32(fp32-accumulated QK^T * scale)); softmax in fp32; P = round_dtype(P);
 *   O = round_dtype(fp32-accumulated P V); lse = fp32(m + log l).
 * Backward: dP = round_dtype(fp32-accumulated dO V^T); D = fp32-accumulated rowsum(dO * O) with
 *   the naive O (already rounded to dtype), as the FA2 algorithm defines D (dFromOut = false: the
 *   softmax-Jacobian form rowsum(P * dP) that autograd through a softmax would use instead);
 *   dS = round_dtype(fp32(P * (dP - D))); dQ = round_dtype(fp32(scale * sum dS K));
 *   dK = round_dtype(fp32(scale * sum dS^T Q)), dV = round_dtype(sum P^T dO), summed over the GQA
 *   group in fp32 before the single rounding.
 * fp32 accumulation: every partial sum is rounded to float32 (Math.fround / Float32Array stores).
 */
export function naiveLowp(
  q: ArrayLike<number>,
  k: ArrayLike<number>,
  v: ArrayLike<number>,
  dout: ArrayLike<number> | null,
  d: AttnDims,
  dtype: DType,
  dFromOut = true,
): FwdResult & { dq?: Float64Array; dk?: Float64Array; dv?: Float64Array } {
  const { B, Nq, Nk, H, Hkv, D, layout } = d;
  const R = roundTo(dtype);
  const fr = Math.fround;
  const scale32 = fr(d.scale);
  const out = new Float64Array(B * Nq * H * D);
  const lse = new Float64Array(B * H * Nq);
  const bwd = dout !== null;
  const dq = bwd ? new Float64Array(B * Nq * H * D) : undefined;
  const dkAcc = bwd ? new Float32Array(B * Nk * Hkv * D) : undefined;
  const dvAcc = bwd ? new Float32Array(B * Nk * Hkv * D) : undefined;
  const group = H / Hkv;
  const p = new Float64Array(Nk);
  const dp = new Float64Array(Nk);
  const tanhs = new Float64Array(Nk);
  const cap = d.softcap && d.softcap > 0 ? d.softcap : 0;
  const acc = new Float32Array(D);
  const kOff = new Int32Array(Nk);
  for (let b = 0; b < B; b++) {
    for (let h = 0; h < H; h++) {
      const hk = Math.floor(h / group);
      for (let j = 0; j < Nk; j++) kOff[j] = rowOffset(layout, b, j, hk, Nk, Hkv, D);
      for (let i = 0; i < Nq; i++) {
        const [first, last] = visibleKeys(i, d);
        const li = (b * H + h) * Nq + i;
        if (first > last) {
          lse[li] = Infinity;
          continue;
        }
        const qo = rowOffset(layout, b, i, h, Nq, H, D);
        let m = -Infinity;
        for (let j = first; j <= last; j++) {
          const ko = kOff[j];
          let dot = 0;
          for (let x = 0; x < D; x++) dot = fr(dot + q[qo + x] * k[ko + x]);
          let s = R(fr(dot * scale32));
          if (cap > 0) {
            const t = fr(Math.tanh(fr(s / cap)));
            tanhs[j] = t;
            s = R(fr(cap * t));
          }
          p[j] = s;
          if (s > m) m = s;
        }
        let l = 0;
        for (let j = first; j <= last; j++) {
          const e = fr(Math.exp(p[j] - m));
          p[j] = e;
          l = fr(l + e);
        }
        for (let j = first; j <= last; j++) p[j] = R(fr(p[j] / l));
        lse[li] = fr(m + fr(Math.log(l)));
        acc.fill(0);
        for (let j = first; j <= last; j++) {
          const pj = p[j];
          const ko = kOff[j];
          for (let x = 0; x < D; x++) acc[x] += pj * v[ko + x];
        }
        for (let x = 0; x < D; x++) out[qo + x] = R(acc[x]);
        if (!bwd) continue;
        const dO = dout as ArrayLike<number>;
        let Di = 0;
        if (dFromOut) for (let x = 0; x < D; x++) Di = fr(Di + dO[qo + x] * out[qo + x]);
        for (let j = first; j <= last; j++) {
          const ko = kOff[j];
          let dot = 0;
          for (let x = 0; x < D; x++) dot = fr(dot + dO[qo + x] * v[ko + x]);
          dp[j] = R(dot);
          if (!dFromOut) Di = fr(Di + p[j] * dp[j]);
        }
        acc.fill(0);
        for (let j = first; j <= last; j++) {
          let ds = R(fr(p[j] * fr(dp[j] - Di)));
          if (cap > 0) ds = R(fr(ds * fr(1 - fr(tanhs[j] * tanhs[j]))));
          const pj = p[j];
          const ko = kOff[j];
          for (let x = 0; x < D; x++) {
            acc[x] += ds * k[ko + x];
            (dkAcc as Float32Array)[ko + x] += ds * q[qo + x];
            (dvAcc as Float32Array)[ko + x] += pj * dO[qo + x];
          }
        }
        for (let x = 0; x < D; x++) (dq as Float64Array)[qo + x] = R(fr(scale32 * acc[x]));
      }
    }
  }
  if (!bwd) return { out, lse };
  const dk = new Float64Array(B * Nk * Hkv * D);
  const dv = new Float64Array(B * Nk * Hkv * D);
  for (let x = 0; x < dk.length; x++) {
    dk[x] = R(fr(scale32 * (dkAcc as Float32Array)[x]));
    dv[x] = R((dvAcc as Float32Array)[x]);
  }
  return { out, lse, dq, dk, dv };
}

// ------------------------------------------------------------------------------------------------
// Error metrics. Equal infinities count as no error; any NaN or an infinity against a finite value
// counts as an infinite error.
// ------------------------------------------------------------------------------------------------

export function maxAbs(a: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) {
    const x = Math.abs(a[i]);
    if (x !== Infinity && x > m) m = x;
    if (x !== x) return NaN;
  }
  return m;
}

export function maxAbsErr(got: ArrayLike<number>, ref: ArrayLike<number>): number {
  if (got.length !== ref.length) return Infinity;
  let m = 0;
  for (let i = 0; i < got.length; i++) {
    const g = got[i];
    const r = ref[i];
    if (g === r) continue; // also equal infinities
    const e = Math.abs(g - r);
    if (!(e <= m)) m = e === e ? e : Infinity; // NaN -> Infinity
  }
  return m;
}

/** ||got - ref||_2 / max(||ref||_2, floorNorm). */
export function relL2(got: ArrayLike<number>, ref: ArrayLike<number>, floorNorm = 0): number {
  if (got.length !== ref.length) return Infinity;
  let num = 0;
  let den = 0;
  for (let i = 0; i < got.length; i++) {
    const g = got[i];
    const r = ref[i];
    if (g === r) {
      if (Number.isFinite(r)) den += r * r;
      continue;
    }
    const e = g - r;
    if (!Number.isFinite(e)) return Infinity;
    num += e * e;
    den += r * r;
  }
  const d = Math.max(Math.sqrt(den), floorNorm);
  return num === 0 ? 0 : Math.sqrt(num) / d;
}

export function fmt(x: number): string {
  return Number.isFinite(x) ? x.toExponential(3) : String(x);
}

// ------------------------------------------------------------------------------------------------
// Tensor helpers.
// ------------------------------------------------------------------------------------------------

export interface Built {
  tensor: Tensor;
  /** The exact element values the tensor holds (float64 view). */
  values: Float64Array;
}

/** A host Tensor of `dtype` holding round_dtype(x) exactly (float16/bfloat16 are passed as bits). */
export function buildTensor(x: ArrayLike<number>, shape: readonly number[], dtype: DType): Built {
  if (dtype === 'float32') {
    const f = Float32Array.from(x as ArrayLike<number>);
    return { tensor: Tensor.from(f, shape), values: Float64Array.from(f) };
  }
  const values = roundArray(x, dtype);
  const bits = toBits(values, dtype);
  return { tensor: Tensor.from(bits, shape, { dtype }), values };
}

/** Random N(0, std^2) data rounded to dtype, as a Tensor plus its exact values. */
export function randomTensor(rng: Rng, shape: readonly number[], dtype: DType, std = 1): Built {
  const n = shape.reduce((a, b) => a * b, 1);
  return buildTensor(rng.normals(n, std), shape, dtype);
}

export async function toF64(t: Tensor): Promise<Float64Array> {
  return Float64Array.from(await t.toFloat32Array());
}

/** Byte-exact copy of a tensor's raw elements (for bit-identity comparisons). */
export async function rawBytes(t: Tensor): Promise<Uint8Array> {
  const a = await t.toTypedArray();
  return new Uint8Array(a.buffer.slice(a.byteOffset, a.byteOffset + a.byteLength));
}

export function bytesEqual(a: Uint8Array, b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}

export function disposeAll(...ts: Array<Tensor | undefined | null>): void {
  for (const t of ts) {
    try {
      if (t && !t.disposed) t.dispose();
    } catch {
      /* already gone */
    }
  }
}

// ------------------------------------------------------------------------------------------------
// GPU gate.
// ------------------------------------------------------------------------------------------------

export function hasGpu(): boolean {
  try {
    return devices().length > 0;
  } catch {
    return false;
  }
}

function buildInfoText(): string {
  try {
    return JSON.stringify(buildInfo());
  } catch (e) {
    return `buildInfo() threw: ${(e as Error).message}`;
  }
}

let warnedNoGpu = false;

/**
 * describe() for GPU suites. Without a CUDA device the suite is skipped (describe.skip) and one
 * clear line is printed; with FA_REQUIRE_GPU=1 and no device the suite fails instead.
 */
export function describeGpu(name: string, fn: () => void): void {
  if (hasGpu()) {
    describe(name, fn);
    return;
  }
  if (process.env.FA_REQUIRE_GPU === '1') {
    describe(name, () => {
      it('needs a CUDA device', () => {
        throw new Error(`FA_REQUIRE_GPU=1 but no CUDA device was found (buildInfo: ${buildInfoText()})`);
      });
    });
    return;
  }
  if (!warnedNoGpu) {
    warnedNoGpu = true;
    console.warn(`GPU tests skipped: no CUDA device (buildInfo: ${buildInfoText()})`);
  }
  describe.skip(`${name} [skipped: no CUDA device]`, fn);
}
