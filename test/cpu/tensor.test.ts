// Host Tensor behaviour: round trips for every dtype, the native float32 -> float16/bfloat16
// conversion (round to nearest even) against the JS reference on tie, NaN, infinity, subnormal and
// overflow cases and on random values, Float16Array input, dispose semantics, zeros.
import { describe, expect, it } from 'vitest';
import { Tensor } from '../../lib/index';
import {
  Rng,
  bf16BitsToF32,
  f16BitsToF32,
  f32ToBf16Bits,
  f32ToF16Bits,
  pow2,
} from '../helpers/reference';

const f32 = new Float32Array(1);
const u32 = new Uint32Array(f32.buffer);
function fromBits(b: number): number {
  u32[0] = b >>> 0;
  return f32[0];
}
function bitsOf(x: number): number {
  f32[0] = x;
  return u32[0];
}
const hex = (b: number, w = 4) => '0x' + (b >>> 0).toString(16).padStart(w, '0');

/** float32 values (as bit patterns) that stress float16 rounding. */
const F16_TRICKY_BITS: number[] = [
  ...[
    0, -0, 1, -1, 1 + pow2(-11), 1 + 3 * pow2(-11), 1 - pow2(-12), 1 + pow2(-11) + pow2(-23), 2049, 2051, 2050,
    65504, 65505, 65519, 65519.996, 65520, -65520, 65536, 1e5, 1e10, 3e38,
    pow2(-14), pow2(-14) - pow2(-25), pow2(-14) - pow2(-24), pow2(-24), pow2(-25), pow2(-25) + pow2(-40),
    3 * pow2(-25), 5 * pow2(-25), 3 * pow2(-26), pow2(-26), 1023.5 * pow2(-24), pow2(-149), -pow2(-149),
    0.1, -0.1, 1 / 3, Math.PI, 6.1e-5, Infinity, -Infinity,
  ].map(bitsOf),
  0x7f7fffff, // float32 max
  0x00800000, // float32 min normal
  0x007fffff, // float32 max subnormal
];
const NAN_BITS = [0x7fc00000, 0xffc00000, 0x7f800001, 0x7fbfffff, 0xff800001, 0x7f802000, 0x7fffffff];

/** float32 bit patterns that stress bfloat16 rounding. */
const BF16_TRICKY_BITS: number[] = [
  0x3f800000, 0x3f808000, 0x3f818000, 0x3f808001, 0x3f807fff, 0xbf808000, 0x7f7fffff, 0x7f7f7fff, 0x7f7f8000,
  0x7f7f8001, 0xff7f8000, 0x00000001, 0x00008000, 0x00018000, 0x00008001, 0x007fffff, 0x007f8000, 0x00800000,
  0x80008000, 0x80000000, 0x00000000, 0x7f800000, 0xff800000, 0x3dcccccd, 0x40490fdb,
];

function isF16NaN(b: number): boolean {
  return (b & 0x7c00) === 0x7c00 && (b & 0x03ff) !== 0;
}
function isBf16NaN(b: number): boolean {
  return (b & 0x7f80) === 0x7f80 && (b & 0x007f) !== 0;
}

async function convertNatively(bits: number[], dtype: 'float16' | 'bfloat16'): Promise<Uint16Array> {
  const src = new Float32Array(bits.length);
  new Uint32Array(src.buffer).set(bits.map((b) => b >>> 0));
  const t = Tensor.from(src, [bits.length], { dtype });
  expect(t.dtype).toBe(dtype);
  const raw = await t.toTypedArray();
  t.dispose();
  expect(raw).toBeInstanceOf(Uint16Array);
  return raw as Uint16Array;
}

describe('float32 tensors', () => {
  it('round-trip every float32 bit pattern class exactly (toTypedArray and toFloat32Array)', async () => {
    const rng = new Rng(1);
    const bits = [...F16_TRICKY_BITS, ...BF16_TRICKY_BITS, ...NAN_BITS];
    for (let i = 0; i < 2000; i++) bits.push(rng.uint32());
    const src = new Float32Array(bits.length);
    new Uint32Array(src.buffer).set(bits.map((b) => b >>> 0));
    const t = Tensor.from(src, [bits.length]);
    expect(t.dtype).toBe('float32');
    expect(t.device).toBe('cpu');
    expect(t.shape).toEqual([bits.length]);
    expect(t.disposed).toBe(false);
    const raw = await t.toTypedArray();
    expect(raw).toBeInstanceOf(Float32Array);
    const widened = await t.toFloat32Array();
    expect(widened).toBeInstanceOf(Float32Array);
    expect(Array.from(new Uint32Array(raw.buffer, raw.byteOffset, raw.length))).toEqual(bits.map((b) => b >>> 0));
    expect(Array.from(new Uint32Array(widened.buffer, widened.byteOffset, widened.length))).toEqual(bits.map((b) => b >>> 0));
    t.dispose();
  });

  it('copies its data: later writes to the source or to downloaded arrays do not change it', async () => {
    const src = new Float32Array([1, 2, 3, 4, 5, 6]);
    const shape = [2, 3];
    const t = Tensor.from(src, shape);
    src[0] = 100;
    shape[0] = 7;
    const a = await t.toFloat32Array();
    a[1] = 200;
    expect(Array.from(await t.toFloat32Array())).toEqual([1, 2, 3, 4, 5, 6]);
    expect(t.shape).toEqual([2, 3]);
    // shape cannot be changed through the tensor either
    try {
      (t.shape as number[]).push(9);
    } catch {
      /* frozen: fine */
    }
    expect(t.shape).toEqual([2, 3]);
    t.dispose();
  });

  it('4-D tensors keep row-major element order', async () => {
    const n = 2 * 3 * 4 * 5;
    const src = Float32Array.from({ length: n }, (_, i) => i * 0.5 - 7);
    const t = Tensor.from(src, [2, 3, 4, 5]);
    expect(t.shape).toEqual([2, 3, 4, 5]);
    expect(Array.from(await t.toFloat32Array())).toEqual(Array.from(src));
    t.dispose();
  });
});

describe('float16 and bfloat16 tensors from raw bits (Uint16Array)', () => {
  for (const [dtype, decode, isNaNBits] of [
    ['float16', f16BitsToF32, isF16NaN],
    ['bfloat16', bf16BitsToF32, isBf16NaN],
  ] as const) {
    it(`${dtype}: all 65536 bit patterns round-trip exactly and widen like the reference decoder`, async () => {
      const bits = Uint16Array.from({ length: 65536 }, (_, i) => i);
      const t = Tensor.from(bits, [256, 256], { dtype });
      expect(t.dtype).toBe(dtype);
      expect(t.shape).toEqual([256, 256]);
      const raw = await t.toTypedArray();
      expect(raw).toBeInstanceOf(Uint16Array);
      let rawBad = 0;
      for (let i = 0; i < 65536; i++) if (raw[i] !== i) rawBad++;
      expect(rawBad).toBe(0);
      const wide = await t.toFloat32Array();
      const bad: string[] = [];
      for (let i = 0; i < 65536; i++) {
        const want = decode(i);
        const got = wide[i];
        if (isNaNBits(i) ? !Number.isNaN(got) : !Object.is(got, want)) {
          if (bad.length < 10) bad.push(`${hex(i)}: got ${got}, expected ${want}`);
          else bad.push('');
        }
      }
      expect(bad.filter(Boolean), `${bad.length} mismatches`).toEqual([]);
      t.dispose();
    });
  }
});

describe('native float32 -> float16 / bfloat16 conversion (round to nearest even)', () => {
  for (const [dtype, encode, isNaNBits, tricky] of [
    ['float16', f32ToF16Bits, isF16NaN, F16_TRICKY_BITS],
    ['bfloat16', f32ToBf16Bits, isBf16NaN, BF16_TRICKY_BITS],
  ] as const) {
    it(`${dtype}: tie, subnormal, overflow, signed-zero and infinity cases`, async () => {
      const bits = [...tricky, ...(dtype === 'float16' ? BF16_TRICKY_BITS : F16_TRICKY_BITS)];
      const got = await convertNatively(bits, dtype);
      const bad: string[] = [];
      bits.forEach((b, i) => {
        const want = encode(fromBits(b));
        if (got[i] !== want) bad.push(`f32 ${hex(b, 8)} (${fromBits(b)}): got ${hex(got[i])}, expected ${hex(want)}`);
      });
      expect(bad).toEqual([]);
    });

    it(`${dtype}: NaN inputs (quiet, signalling, any payload, either sign) stay NaN`, async () => {
      const got = await convertNatively(NAN_BITS, dtype);
      const bad = NAN_BITS.filter((_b, i) => !isNaNBits(got[i])).map((b) => hex(b, 8));
      expect(bad, 'these NaNs did not convert to a NaN').toEqual([]);
    });

    it(`${dtype}: 60000 random float32 values (random bit patterns and N(0, s^2) for many scales)`, async () => {
      const rng = new Rng(dtype === 'float16' ? 101 : 102);
      const bits: number[] = [];
      for (let i = 0; i < 30000; i++) bits.push(rng.uint32());
      for (let i = 0; i < 30000; i++) bits.push(bitsOf(rng.normal() * 2 ** rng.int(-30, 20)));
      const got = await convertNatively(bits, dtype);
      const bad: string[] = [];
      bits.forEach((b, i) => {
        const x = fromBits(b);
        const ok = Number.isNaN(x) ? isNaNBits(got[i]) : got[i] === encode(x);
        if (!ok && bad.length < 10) bad.push(`f32 ${hex(b, 8)} (${x}): got ${hex(got[i])}, expected ${hex(encode(x))}`);
      });
      expect(bad).toEqual([]);
    });

    it(`${dtype}: toFloat32Array of a converted tensor is the correctly rounded value`, async () => {
      const src = Float32Array.from([0.1, -2.5, 1 / 3, 1000.7, 1e-6, 7e4]);
      const t = Tensor.from(src, [2, 3], { dtype });
      const wide = await t.toFloat32Array();
      const decode = dtype === 'float16' ? f16BitsToF32 : bf16BitsToF32;
      expect(Array.from(wide)).toEqual(Array.from(src, (x) => decode(encode(x))));
      t.dispose();
    });
  }
});

const Float16ArrayCtor = (globalThis as { Float16Array?: new (n: number | ArrayLike<number>) => ArrayBufferView & { length: number } }).Float16Array;
const f16Reason = Float16ArrayCtor
  ? ''
  : ` [skipped: globalThis.Float16Array is not available in Node ${process.version}]`;
if (!Float16ArrayCtor) console.warn(`Float16Array tests skipped: globalThis.Float16Array is not available in Node ${process.version}`);

describe.skipIf(!Float16ArrayCtor)(`Float16Array input${f16Reason}`, () => {
  it('is float16 by default, with the same bits', async () => {
    const Ctor = Float16ArrayCtor as NonNullable<typeof Float16ArrayCtor>;
    const a = new Ctor([1, -2.5, 65504, 0.1, -0, Infinity]);
    const bitsIn = new Uint16Array(a.buffer, a.byteOffset, a.length);
    const t = Tensor.from(a as unknown as Float32Array, [6]);
    expect(t.dtype).toBe('float16');
    const raw = (await t.toTypedArray()) as Uint16Array;
    expect(Array.from(raw)).toEqual(Array.from(bitsIn));
    t.dispose();
  });

  it('converts to float32 and bfloat16 on request', async () => {
    const Ctor = Float16ArrayCtor as NonNullable<typeof Float16ArrayCtor>;
    const a = new Ctor([1, -2.5, 65504, 0.1, 3.140625]);
    const bitsIn = new Uint16Array(a.buffer, a.byteOffset, a.length);
    const t32 = Tensor.from(a as unknown as Float32Array, [5], { dtype: 'float32' });
    expect(t32.dtype).toBe('float32');
    expect(Array.from(await t32.toFloat32Array())).toEqual(Array.from(bitsIn, (b) => f16BitsToF32(b)));
    const tb = Tensor.from(a as unknown as Float32Array, [5], { dtype: 'bfloat16' });
    expect(tb.dtype).toBe('bfloat16');
    expect(Array.from((await tb.toTypedArray()) as Uint16Array)).toEqual(Array.from(bitsIn, (b) => f32ToBf16Bits(f16BitsToF32(b))));
    t32.dispose();
    tb.dispose();
  });
});

describe('dispose', () => {
  it('sets disposed, is idempotent, and later use throws or rejects with TypeError', async () => {
    const t = Tensor.from(new Float32Array([1, 2, 3, 4]), [2, 2]);
    expect(t.disposed).toBe(false);
    t.dispose();
    expect(t.disposed).toBe(true);
    expect(() => t.dispose()).not.toThrow();
    expect(t.disposed).toBe(true);
    // metadata stays readable
    expect(t.shape).toEqual([2, 2]);
    expect(t.dtype).toBe('float32');
    for (const [name, use] of [
      ['toFloat32Array', () => t.toFloat32Array()],
      ['toTypedArray', () => t.toTypedArray()],
      ['to', () => t.to('cpu')],
    ] as const) {
      let err: unknown;
      try {
        await use();
      } catch (e) {
        err = e;
      }
      expect(err, `${name} after dispose must fail`).toBeInstanceOf(TypeError);
      expect((err as Error).message, name).toMatch(/disposed/);
    }
  });

  it('disposing a tensor does not affect a copy made with to("cpu") or results computed from it', async () => {
    const t = Tensor.from(new Float32Array([1, 2, 3]), [3]);
    const c = await t.to('cpu');
    expect(c).not.toBe(t);
    expect(c.device).toBe('cpu');
    expect(c.dtype).toBe('float32');
    t.dispose();
    expect(c.disposed).toBe(false);
    expect(Array.from(await c.toFloat32Array())).toEqual([1, 2, 3]);
    c.dispose();
  });
});

describe('Tensor.zeros', () => {
  for (const dtype of ['float32', 'float16', 'bfloat16'] as const) {
    it(`${dtype}: right shape, dtype, device and all-zero (positive zero) contents`, async () => {
      const t = await Tensor.zeros([2, 3, 4, 5], { dtype });
      expect(t.shape).toEqual([2, 3, 4, 5]);
      expect(t.dtype).toBe(dtype);
      expect(t.device).toBe('cpu');
      const raw = await t.toTypedArray();
      expect(raw.length).toBe(120);
      expect(raw).toBeInstanceOf(dtype === 'float32' ? Float32Array : Uint16Array);
      const view = dtype === 'float32' ? new Uint32Array(raw.buffer, raw.byteOffset, raw.length) : raw;
      expect(Array.from(view).every((b) => b === 0)).toBe(true);
      t.dispose();
    });
  }

  it('defaults to float32 on the cpu; device "cpu" is accepted', async () => {
    const a = await Tensor.zeros([3]);
    const b = await Tensor.zeros([3], { device: 'cpu' });
    for (const t of [a, b]) {
      expect(t.dtype).toBe('float32');
      expect(t.device).toBe('cpu');
      expect(Array.from(await t.toFloat32Array())).toEqual([0, 0, 0]);
      t.dispose();
    }
  });

  it('returns a Promise', () => {
    const p = Tensor.zeros([1]);
    expect(p).toBeInstanceOf(Promise);
    return p.then((t) => t.dispose());
  });
});
