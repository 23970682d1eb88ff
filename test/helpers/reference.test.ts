// Unit tests of the test references themselves: the JS float16/bfloat16 rounding (exhaustively
// against brute-force nearest-value search), the PRNG, the float64 attention (properties and
// float64 finite differences) and the naive low-precision yardstick.
import { describe, expect, it } from 'vitest';
import {
  AttnDims,
  Rng,
  bf16BitsToF32,
  defaultScale,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  kvShape,
  maxAbsErr,
  mulberry32,
  naiveLowp,
  pow2,
  qShape,
  refBackward,
  refForward,
  relL2,
  roundArray,
  roundToBf16,
  roundToF16,
  rowOffset,
} from './reference';

const f64 = new Float64Array(1);
const u64 = new BigUint64Array(f64.buffer);
function nextUp(x: number): number {
  if (x === 0) return pow2(-1074);
  f64[0] = x;
  u64[0] = x > 0 ? u64[0] + 1n : u64[0] - 1n;
  return f64[0];
}
function nextDown(x: number): number {
  return -nextUp(-x);
}
const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
function f32FromBits(b: number): number {
  u32[0] = b >>> 0;
  return f32[0];
}

/** All finite non-negative values of a 16-bit format in increasing order, with their bits. */
function positiveTable(decode: (b: number) => number): { values: number[]; bits: number[] } {
  const values: number[] = [];
  const bits: number[] = [];
  for (let b = 0; b < 0x8000; b++) {
    const x = decode(b);
    if (Number.isFinite(x)) {
      values.push(x);
      bits.push(b);
    }
  }
  return { values, bits };
}

/** Brute-force RNE: the nearest table value, ties to the even bit pattern; beyond max: overflow rule. */
function bruteRound(x: number, table: { values: number[]; bits: number[] }): number {
  const a = Math.abs(x);
  const vals = table.values;
  const n = vals.length;
  const max = vals[n - 1];
  const ulpMax = max - vals[n - 2];
  if (a >= max + ulpMax / 2) return x < 0 ? -Infinity : Infinity; // tie at max+ulp/2 goes to the even (2^emax+1 = inf)
  let lo = 0;
  let hi = n - 1;
  while (hi - lo > 1) {
    const mid = (lo + hi) >> 1;
    if (vals[mid] <= a) lo = mid;
    else hi = mid;
  }
  let r: number;
  if (a >= vals[hi]) r = vals[hi];
  else {
    const dl = a - vals[lo];
    const dh = vals[hi] - a;
    r = dl < dh ? vals[lo] : dh < dl ? vals[hi] : table.bits[lo] % 2 === 0 ? vals[lo] : vals[hi];
  }
  return x < 0 || Object.is(x, -0) ? -r : r;
}

describe('float16 / bfloat16 JS conversions', () => {
  it('f16BitsToF32 decodes the format constants', () => {
    expect(f16BitsToF32(0x3c00)).toBe(1);
    expect(f16BitsToF32(0xc000)).toBe(-2);
    expect(f16BitsToF32(0x7bff)).toBe(65504);
    expect(f16BitsToF32(0x0400)).toBe(pow2(-14));
    expect(f16BitsToF32(0x0001)).toBe(pow2(-24));
    expect(f16BitsToF32(0x03ff)).toBe(1023 * pow2(-24));
    expect(f16BitsToF32(0x3555)).toBe(1365 * pow2(-12));
    expect(f16BitsToF32(0x7c00)).toBe(Infinity);
    expect(f16BitsToF32(0xfc00)).toBe(-Infinity);
    expect(Object.is(f16BitsToF32(0x8000), -0)).toBe(true);
    expect(f16BitsToF32(0x7e00)).toBeNaN();
    expect(f16BitsToF32(0xfc01)).toBeNaN();
  });

  it('bf16BitsToF32 decodes the format constants', () => {
    expect(bf16BitsToF32(0x3f80)).toBe(1);
    expect(bf16BitsToF32(0xc000)).toBe(-2);
    expect(bf16BitsToF32(0x7f7f)).toBe((2 - pow2(-7)) * pow2(127));
    expect(bf16BitsToF32(0x0080)).toBe(pow2(-126));
    expect(bf16BitsToF32(0x0001)).toBe(pow2(-133));
    expect(bf16BitsToF32(0x7f80)).toBe(Infinity);
    expect(bf16BitsToF32(0xff80)).toBe(-Infinity);
    expect(Object.is(bf16BitsToF32(0x8000), -0)).toBe(true);
    expect(bf16BitsToF32(0x7fc0)).toBeNaN();
  });

  for (const [name, decode, encode] of [
    ['float16', f16BitsToF32, f32ToF16Bits],
    ['bfloat16', bf16BitsToF32, f32ToBf16Bits],
  ] as const) {
    it(`${name}: every non-NaN bit pattern survives decode -> encode (exhaustive)`, () => {
      let bad = 0;
      for (let b = 0; b < 0x10000; b++) {
        const x = decode(b);
        if (Number.isNaN(x)) {
          if (!Number.isNaN(decode(encode(x)))) bad++;
          continue;
        }
        if (encode(x) !== b) bad++;
      }
      expect(bad).toBe(0);
    });
  }

  for (const [name, decode, round, encode] of [
    ['float16', f16BitsToF32, roundToF16, f32ToF16Bits],
    ['bfloat16', bf16BitsToF32, roundToBf16, f32ToBf16Bits],
  ] as const) {
    const table = positiveTable(decode);

    it(`${name}: every midpoint between neighbours rounds to the even one, and its float64 neighbours to the nearer one`, () => {
      let bad = 0;
      const vals = table.values;
      for (let i = 0; i + 1 < vals.length; i++) {
        const a = vals[i];
        const b = vals[i + 1];
        const mid = (a + b) / 2; // exact in float64 (and in float32: one extra bit)
        const even = table.bits[i] % 2 === 0 ? a : b;
        for (const s of [1, -1]) {
          if (round(s * mid) !== s * even) bad++;
          if (round(s * nextDown(mid)) !== s * a) bad++;
          if (round(s * nextUp(mid)) !== s * b) bad++;
          // The bit-level float32 path agrees on these (all are float32 values).
          if (decode(encode(s * mid)) !== s * even) bad++;
        }
      }
      expect(bad).toBe(0);
    });

    it(`${name}: overflow threshold (max + ulp/2 ties up to infinity)`, () => {
      const vals = table.values;
      const max = vals[vals.length - 1];
      const half = (max - vals[vals.length - 2]) / 2;
      expect(round(max + half)).toBe(Infinity);
      expect(round(-(max + half))).toBe(-Infinity);
      expect(round(nextDown(max + half))).toBe(max);
      expect(round(1e300)).toBe(Infinity);
      expect(round(Number.MAX_VALUE)).toBe(Infinity);
      expect(round(-Number.MAX_VALUE)).toBe(-Infinity);
    });

    it(`${name}: random float64 values match brute-force nearest search`, () => {
      const rng = new Rng(name === 'float16' ? 11 : 12);
      const [lo, hi] = name === 'float16' ? [-28, 17] : [-136, 129];
      let bad = 0;
      for (let t = 0; t < 20000; t++) {
        const x = (rng.bool() ? 1 : -1) * 2 ** rng.range(lo, hi);
        if (round(x) !== bruteRound(x, table)) bad++;
      }
      expect(bad).toBe(0);
    });

    it(`${name}: random float32 bit patterns: value path and bit path agree`, () => {
      const rng = new Rng(name === 'float16' ? 21 : 22);
      let bad = 0;
      for (let t = 0; t < 50000; t++) {
        const x = f32FromBits(rng.uint32());
        const viaBits = decode(encode(x));
        const viaValue = round(x);
        if (Number.isNaN(x)) {
          if (!Number.isNaN(viaBits) || !Number.isNaN(viaValue)) bad++;
        } else if (!Object.is(viaBits, viaValue)) bad++;
      }
      expect(bad).toBe(0);
    });

    it(`${name}: signed zero, infinities and NaN`, () => {
      expect(Object.is(round(-0), -0)).toBe(true);
      expect(Object.is(round(0), 0)).toBe(true);
      expect(round(Infinity)).toBe(Infinity);
      expect(round(-Infinity)).toBe(-Infinity);
      expect(round(NaN)).toBeNaN();
      expect(decode(encode(NaN))).toBeNaN();
      expect(encode(-0)).toBe(0x8000);
      // Far below the smallest subnormal: to zero, keeping the sign.
      expect(Object.is(round(-pow2(-200)), -0)).toBe(true);
    });
  }

  it('float16 tie cases around 1 and in the subnormal range', () => {
    expect(roundToF16(1 + pow2(-11))).toBe(1); // tie -> even (1.0)
    expect(roundToF16(1 + 3 * pow2(-11))).toBe(1 + pow2(-9)); // tie -> even (mantissa 2)
    expect(roundToF16(pow2(-25))).toBe(0); // half the smallest subnormal: tie -> 0
    expect(roundToF16(3 * pow2(-26))).toBe(pow2(-24));
    expect(roundToF16(3 * pow2(-25))).toBe(2 * pow2(-24)); // 1.5 quanta: tie -> 2
    expect(f32ToF16Bits(65519)).toBe(0x7bff);
    expect(f32ToF16Bits(65520)).toBe(0x7c00);
  });

  it('bfloat16 tie cases around 1', () => {
    expect(roundToBf16(1 + pow2(-8))).toBe(1);
    expect(roundToBf16(1 + 3 * pow2(-8))).toBe(1 + pow2(-6));
    expect(f32ToBf16Bits(f32FromBits(0x3f808000))).toBe(0x3f80); // exact tie, even stays
    expect(f32ToBf16Bits(f32FromBits(0x3f818000))).toBe(0x3f82); // exact tie, odd rounds up
    expect(f32ToBf16Bits(f32FromBits(0x7f7fffff))).toBe(0x7f80); // float32 max -> inf
    expect(f32ToBf16Bits(f32FromBits(0x00000001))).toBe(0x0000); // smallest float32 subnormal -> 0
    expect(f32ToBf16Bits(f32FromBits(0x00008000))).toBe(0x0000); // tie, even -> 0
    expect(f32ToBf16Bits(f32FromBits(0x00018000))).toBe(0x0002); // tie, odd -> up
  });
});

describe('PRNG', () => {
  it('is deterministic per seed and differs across seeds', () => {
    const a = mulberry32(42);
    const b = mulberry32(42);
    const c = mulberry32(43);
    const sa = Array.from({ length: 8 }, a);
    expect(Array.from({ length: 8 }, b)).toEqual(sa);
    expect(Array.from({ length: 8 }, c)).not.toEqual(sa);
    for (const x of sa) expect(x >= 0 && x < 1).toBe(true);
  });

  it('normals have mean ~0 and variance ~1', () => {
    const x = new Rng(7).normals(100000);
    let m = 0;
    for (const v of x) m += v;
    m /= x.length;
    let s = 0;
    for (const v of x) s += (v - m) ** 2;
    s /= x.length;
    // 5-sigma bands: sd(mean) = 1/sqrt(n) ~ 0.0032, sd(var) ~ sqrt(2/n) ~ 0.0045
    expect(Math.abs(m)).toBeLessThan(0.016);
    expect(Math.abs(s - 1)).toBeLessThan(0.023);
  });
});

function dims(p: Partial<AttnDims> & { D: number }): AttnDims {
  return { B: 1, Nq: 4, Nk: 4, H: 1, Hkv: 1, causal: false, layout: 'bshd', scale: defaultScale(p.D), ...p };
}

function repeatKvHeads(src: Float64Array, d: AttnDims): Float64Array {
  // [B, Nk, Hkv, D] -> [B, Nk, H, D], head h taking kv head h / (H / Hkv)
  const g = d.H / d.Hkv;
  const out = new Float64Array(d.B * d.Nk * d.H * d.D);
  for (let b = 0; b < d.B; b++)
    for (let j = 0; j < d.Nk; j++)
      for (let h = 0; h < d.H; h++) {
        const s = rowOffset('bshd', b, j, Math.floor(h / g), d.Nk, d.Hkv, d.D);
        const t = rowOffset('bshd', b, j, h, d.Nk, d.H, d.D);
        for (let i = 0; i < d.D; i++) out[t + i] = src[s + i];
      }
  return out;
}

function bshdToBhsd(x: Float64Array, B: number, N: number, H: number, D: number): Float64Array {
  const out = new Float64Array(x.length);
  for (let b = 0; b < B; b++)
    for (let n = 0; n < N; n++)
      for (let h = 0; h < H; h++) {
        const s = rowOffset('bshd', b, n, h, N, H, D);
        const t = rowOffset('bhsd', b, n, h, N, H, D);
        for (let i = 0; i < D; i++) out[t + i] = x[s + i];
      }
  return out;
}

describe('float64 reference attention', () => {
  it('forward matches a direct softmax formula (no max trick) and lse = log sum exp', () => {
    const d = dims({ Nq: 5, Nk: 6, D: 3, scale: 0.7 });
    const rng = new Rng(1);
    const q = rng.normals(15);
    const k = rng.normals(18);
    const v = rng.normals(18);
    const { out, lse } = refForward(q, k, v, d);
    for (let i = 0; i < 5; i++) {
      const e: number[] = [];
      for (let j = 0; j < 6; j++) {
        let s = 0;
        for (let x = 0; x < 3; x++) s += q[i * 3 + x] * k[j * 3 + x];
        e.push(Math.exp(0.7 * s));
      }
      const Z = e.reduce((a, b) => a + b, 0);
      expect(lse[i]).toBeCloseTo(Math.log(Z), 12);
      for (let x = 0; x < 3; x++) {
        let o = 0;
        for (let j = 0; j < 6; j++) o += (e[j] / Z) * v[j * 3 + x];
        expect(out[i * 3 + x]).toBeCloseTo(o, 12);
      }
    }
  });

  it('causal is bottom-right aligned; rows without keys get out 0 and lse +Infinity', () => {
    const d = dims({ Nq: 6, Nk: 3, D: 2, causal: true });
    const rng = new Rng(2);
    const q = rng.normals(12);
    const k = rng.normals(6);
    const v = rng.normals(6);
    const { out, lse } = refForward(q, k, v, d);
    // rows 0..2 see no key (i + Nk - Nq < 0), row 3 sees key 0 only, row 5 sees all.
    for (let i = 0; i < 3; i++) {
      expect(lse[i]).toBe(Infinity);
      expect(out[i * 2]).toBe(0);
      expect(out[i * 2 + 1]).toBe(0);
    }
    expect(out[3 * 2]).toBeCloseTo(v[0], 14);
    expect(out[3 * 2 + 1]).toBeCloseTo(v[1], 14);
    const full = refForward(q, k, v, { ...d, causal: false });
    expect(out[5 * 2]).toBeCloseTo(full.out[5 * 2], 14);
    // Nq < Nk: row 0 sees keys 0..Nk-Nq.
    const d2 = dims({ Nq: 2, Nk: 5, D: 2, causal: true });
    const r2 = refForward(q.subarray(0, 4), rng.normals(10), rng.normals(10), d2);
    expect(Number.isFinite(r2.lse[0])).toBe(true);
  });

  it('GQA equals plain attention on repeated K/V heads; bhsd equals bshd permuted', () => {
    const d = dims({ B: 2, Nq: 5, Nk: 7, H: 6, Hkv: 2, D: 4, causal: true });
    const rng = new Rng(3);
    const q = rng.normals(2 * 5 * 6 * 4);
    const k = rng.normals(2 * 7 * 2 * 4);
    const v = rng.normals(2 * 7 * 2 * 4);
    const g = refForward(q, k, v, d);
    const rep = refForward(q, repeatKvHeads(k, d), repeatKvHeads(v, d), { ...d, Hkv: 6 });
    expect(maxAbsErr(g.out, rep.out)).toBeLessThan(1e-14);
    expect(maxAbsErr(g.lse, rep.lse)).toBeLessThan(1e-14);
    const t = refForward(bshdToBhsd(q, 2, 5, 6, 4), bshdToBhsd(k, 2, 7, 2, 4), bshdToBhsd(v, 2, 7, 2, 4), { ...d, layout: 'bhsd' });
    expect(maxAbsErr(t.out, bshdToBhsd(g.out, 2, 5, 6, 4))).toBe(0);
    expect(maxAbsErr(t.lse, g.lse)).toBe(0);
    const gb = refBackward(q, k, v, q, d);
    const rb = refBackward(q, repeatKvHeads(k, d), repeatKvHeads(v, d), q, { ...d, Hkv: 6 });
    expect(maxAbsErr(gb.dq, rb.dq)).toBeLessThan(1e-13);
    // dk of the GQA problem = sum over each group of the repeated problem's dk
    const summed = new Float64Array(gb.dk.length);
    for (let b = 0; b < 2; b++)
      for (let j = 0; j < 7; j++)
        for (let h = 0; h < 6; h++)
          for (let x = 0; x < 4; x++) {
            summed[rowOffset('bshd', b, j, Math.floor(h / 3), 7, 2, 4) + x] += rb.dk[rowOffset('bshd', b, j, h, 7, 6, 4) + x];
          }
    expect(maxAbsErr(gb.dk, summed)).toBeLessThan(1e-13);
  });

  for (const [label, p] of [
    ['full', { B: 1, Nq: 4, Nk: 6, H: 2, Hkv: 1, D: 3 }],
    ['causal Nq > Nk, bhsd, custom scale', { B: 2, Nq: 6, Nk: 4, H: 3, Hkv: 3, D: 5, causal: true, layout: 'bhsd', scale: 0.9 }],
    ['causal Nq < Nk', { B: 1, Nq: 3, Nk: 7, H: 4, Hkv: 2, D: 2, causal: true }],
  ] as Array<[string, Partial<AttnDims> & { D: number }]>) {
    it(`backward matches float64 central differences (${label})`, () => {
      const d = dims(p);
      const rng = new Rng(99);
      const nq = d.B * d.Nq * d.H * d.D;
      const nk = d.B * d.Nk * d.Hkv * d.D;
      const q = rng.normals(nq);
      const k = rng.normals(nk);
      const v = rng.normals(nk);
      const dout = rng.normals(nq);
      const g = refBackward(q, k, v, dout, d);
      const fwd = refForward(q, k, v, d);
      expect(maxAbsErr(g.out, fwd.out)).toBeLessThan(1e-14);
      expect(maxAbsErr(g.lse, fwd.lse)).toBeLessThan(1e-14);
      const loss = (): number => {
        const o = refForward(q, k, v, d).out;
        let s = 0;
        for (let i = 0; i < o.length; i++) s += o[i] * dout[i];
        return s;
      };
      // eps = 1e-5: truncation ~eps^2 = 1e-10, cancellation ~1e-16/1e-5 = 1e-11.
      const eps = 1e-5;
      for (const [name, arr, grad] of [
        ['q', q, g.dq],
        ['k', k, g.dk],
        ['v', v, g.dv],
      ] as const) {
        for (let idx = 0; idx < arr.length; idx++) {
          const x0 = arr[idx];
          arr[idx] = x0 + eps;
          const lp = loss();
          arr[idx] = x0 - eps;
          const lm = loss();
          arr[idx] = x0;
          const fd = (lp - lm) / (2 * eps);
          expect(Math.abs(fd - grad[idx]), `${name}[${idx}] fd ${fd} vs ${grad[idx]}`).toBeLessThan(1e-7 * (1 + Math.abs(fd)));
        }
      }
      // D = rowsum(dO * O)
      for (let b = 0; b < d.B; b++)
        for (let h = 0; h < d.H; h++)
          for (let i = 0; i < d.Nq; i++) {
            const o = rowOffset(d.layout, b, i, h, d.Nq, d.H, d.D);
            let s = 0;
            for (let x = 0; x < d.D; x++) s += dout[o + x] * fwd.out[o + x];
            expect(g.softmaxD[(b * d.H + h) * d.Nq + i]).toBeCloseTo(s, 12);
          }
    });
  }
});

describe('naive low-precision yardstick', () => {
  const d = dims({ B: 1, Nq: 40, Nk: 50, H: 2, Hkv: 1, D: 32, causal: true });
  const rng = new Rng(5);
  const raw = {
    q: rng.normals(40 * 2 * 32),
    k: rng.normals(50 * 32),
    v: rng.normals(50 * 32),
    dout: rng.normals(40 * 2 * 32),
  };
  void qShape;
  void kvShape;
  // Sanity bands: the naive error must be real (> 0) yet of the dtype's order, else the 2x rule
  // would be either impossible or meaningless. Relative L2 of rounding-dominated errors is a small
  // multiple of the unit roundoff u (fp16 4.9e-4, bf16 3.9e-3, fp32 6e-8).
  for (const [dtype, lo, hi] of [
    ['float32', 0, 1e-6],
    ['float16', 5e-5, 5e-3],
    ['bfloat16', 4e-4, 4e-2],
  ] as const) {
    it(`${dtype}: errors are of the order of the dtype's rounding`, () => {
      const q = roundArray(raw.q, dtype);
      const k = roundArray(raw.k, dtype);
      const v = roundArray(raw.v, dtype);
      const dout = roundArray(raw.dout, dtype);
      const ref = refBackward(q, k, v, dout, d);
      const nv = naiveLowp(q, k, v, dout, d, dtype);
      for (const [name, a, b] of [
        ['out', nv.out, ref.out],
        ['dq', nv.dq as Float64Array, ref.dq],
        ['dk', nv.dk as Float64Array, ref.dk],
        ['dv', nv.dv as Float64Array, ref.dv],
      ] as const) {
        const e = relL2(a, b);
        expect(e, `${dtype} ${name} rel L2 ${e}`).toBeGreaterThanOrEqual(lo);
        expect(e, `${dtype} ${name} rel L2 ${e}`).toBeLessThanOrEqual(hi);
        if (dtype !== 'float32') expect(e).toBeGreaterThan(0);
      }
      // masked rows stay exactly zero / +inf in the naive version too
      expect(nv.lse.filter((x) => x === Infinity).length).toBe(ref.lse.filter((x) => x === Infinity).length);
    });
  }
});

describe('metrics', () => {
  it('maxAbsErr and relL2 treat equal infinities as equal and NaN as infinite error', () => {
    expect(maxAbsErr([1, Infinity], [1, Infinity])).toBe(0);
    expect(maxAbsErr([1, 5], [1, Infinity])).toBe(Infinity);
    expect(maxAbsErr([NaN], [0])).toBe(Infinity);
    expect(maxAbsErr([1, 2], [1.5, 2])).toBe(0.5);
    expect(relL2([3, 4], [3, 4])).toBe(0);
    expect(relL2([3, 5], [3, 4])).toBeCloseTo(1 / 5, 12);
    expect(relL2([NaN], [1])).toBe(Infinity);
    expect(relL2([1, Infinity], [1, Infinity])).toBe(0);
  });
});
