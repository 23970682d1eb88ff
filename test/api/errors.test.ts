// The error contract: bad input is rejected before any work with a TypeError (wrong kind of value,
// dtype, disposed tensor) or a RangeError (shape, size, head dim, device index) whose message is
// `<fn>: <argument> <what was expected>, got <given>`. Tensor.from throws synchronously; the
// Promise-returning entry points reject. Each check asserts the class, that the message starts
// with the function name, names the argument, and contains the given value (regexes are tolerant
// of the wording in between). The last block throws dozens of malformed calls at every entry point
// and only asks for clean errors: the process must never crash.
import { describe, expect, it, vi } from 'vitest';
import { Tensor, buildInfo, devices, flashAttention, flashAttentionBackward, memoryStats, resetPeakMemoryStats } from '../../lib/index';
import { Rng, defaultScale, disposeAll, hasGpu, randomTensor, refForward, relL2, toF64 } from '../helpers/reference';

type ErrClass = typeof TypeError | typeof RangeError;
type Given = string | RegExp;

function esc(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
/** A number standing alone in a message (not part of a longer number). */
function num(n: number | string): RegExp {
  return new RegExp(`(^|[^0-9.])${esc(String(n))}(?![0-9])`);
}
/** A shape list like [2, 3, 4], any spacing. */
function shapeRe(s: number[]): RegExp {
  return new RegExp(`\\[\\s*${s.join('\\s*,\\s*')}\\s*\\]`);
}

interface Expect {
  cls: ErrClass | ErrClass[];
  fn: string | RegExp;
  arg: string;
  given?: Given | Given[];
}

function checkError(err: unknown, e: Expect, label: string): void {
  const classes = Array.isArray(e.cls) ? e.cls : [e.cls];
  expect(err, `${label}: expected ${classes.map((c) => c.name).join(' or ')}, got ${String(err)}`).toBeInstanceOf(Error);
  const ok = classes.some((c) => err instanceof c);
  expect(ok, `${label}: expected ${classes.map((c) => c.name).join(' or ')}, got ${(err as Error).name}: ${(err as Error).message}`).toBe(true);
  const msg = (err as Error).message;
  const fnRe = typeof e.fn === 'string' ? new RegExp(`^${esc(e.fn)}\\b`) : e.fn;
  expect(msg, `${label}: message must start with the function name`).toMatch(fnRe);
  expect(msg, `${label}: message must name the argument ${e.arg}`).toContain(e.arg);
  const givens = e.given === undefined ? [] : Array.isArray(e.given) ? e.given : [e.given];
  for (const g of givens) {
    if (typeof g === 'string') expect(msg, `${label}: message must contain the given value`).toContain(g);
    else expect(msg, `${label}: message must contain the given value`).toMatch(g);
  }
}

function expectThrows(thunk: () => unknown, e: Expect, label = ''): void {
  let err: unknown;
  let threw = false;
  try {
    thunk();
  } catch (x) {
    threw = true;
    err = x;
  }
  expect(threw, `${label}: expected a synchronous throw`).toBe(true);
  checkError(err, e, label);
}

/** The call must return a Promise (not throw synchronously) and that Promise must reject. */
async function expectRejects(thunk: () => unknown, e: Expect, label = ''): Promise<void> {
  let p: unknown;
  try {
    p = thunk();
  } catch (x) {
    throw new Error(`${label}: threw synchronously instead of returning a rejected Promise: ${String(x)}`);
  }
  expect(p, `${label}: must return a Promise`).toBeInstanceOf(Promise);
  await expect(p as Promise<unknown>, label).rejects.toBeInstanceOf(Error);
  let err: unknown;
  try {
    await p;
  } catch (x) {
    err = x;
  }
  checkError(err, e, label);
}

// Valid small inputs: q [2, 5, 6, 16], k/v [2, 7, 3, 16] (GQA 6/3), float32 on the CPU.
function valid(seed = 1, dtype: 'float32' | 'float16' | 'bfloat16' = 'float32') {
  const rng = new Rng(seed);
  return {
    q: randomTensor(rng, [2, 5, 6, 16], dtype).tensor,
    k: randomTensor(rng, [2, 7, 3, 16], dtype).tensor,
    v: randomTensor(rng, [2, 7, 3, 16], dtype).tensor,
    dout: randomTensor(rng, [2, 5, 6, 16], dtype).tensor,
  };
}
function zerosF32(shape: number[]): Tensor {
  return Tensor.from(new Float32Array(shape.reduce((a, b) => a * b, 1)), shape);
}
function zerosLow(shape: number[], dtype: 'float16' | 'bfloat16'): Tensor {
  return Tensor.from(new Uint16Array(shape.reduce((a, b) => a * b, 1)), shape, { dtype });
}

const FA = 'flashAttention';
const FB = 'flashAttentionBackward';

// Not-a-Tensor values and what the message must show of them (typeof / constructor / the value).
const NOT_TENSORS: Array<[string, unknown, RegExp]> = [
  ['null', null, /null/],
  ['undefined', undefined, /undefined/],
  ['a number', 42, /number|42/],
  ['a string', 'q', /string|'q'|"q"/],
  ['a plain object', {}, /object|Object/],
  ['an array', [], /Array|object|\[\]/],
  ['a Float32Array', new Float32Array(4), /Float32Array/],
  ['a tensor-like fake', { shape: [2, 5, 6, 16], dtype: 'float32', device: 'cpu', disposed: false }, /object|Object/],
];

describe('flashAttention argument errors', () => {
  for (const pos of ['q', 'k', 'v'] as const) {
    for (const [what, value, given] of NOT_TENSORS) {
      it(`${pos} = ${what} -> TypeError naming ${pos}`, async () => {
        const t = valid();
        const args = { ...t, [pos]: value } as Record<string, unknown>;
        await expectRejects(
          () => flashAttention(args.q as Tensor, args.k as Tensor, args.v as Tensor),
          { cls: TypeError, fn: FA, arg: pos, given: [/must be a Tensor/i, given] },
          `${pos}=${what}`,
        );
        disposeAll(t.q, t.k, t.v, t.dout);
      });
    }
  }

  it('q.shape not 4-D -> RangeError with the given shape', async () => {
    const t = valid();
    await expectRejects(() => flashAttention(zerosF32([2, 3, 4]), t.k, t.v), { cls: RangeError, fn: FA, arg: 'q.shape', given: shapeRe([2, 3, 4]) });
    await expectRejects(() => flashAttention(zerosF32([1, 2, 5, 6, 16]), t.k, t.v), { cls: RangeError, fn: FA, arg: 'q.shape', given: shapeRe([1, 2, 5, 6, 16]) });
    await expectRejects(() => flashAttention(t.q, zerosF32([2, 7, 48]), t.v), { cls: RangeError, fn: FA, arg: 'k.shape', given: shapeRe([2, 7, 48]) });
    await expectRejects(() => flashAttention(t.q, t.k, zerosF32([7, 3, 16])), { cls: RangeError, fn: FA, arg: 'v.shape', given: shapeRe([7, 3, 16]) });
  });

  it('k.shape[0] (batch) != q batch -> RangeError', async () => {
    const t = valid();
    await expectRejects(() => flashAttention(t.q, zerosF32([3, 7, 3, 16]), zerosF32([3, 7, 3, 16])), {
      cls: RangeError, fn: FA, arg: 'k.shape[0]', given: num(3),
    });
  });

  it('v.shape[1] (seqlen) != k seqlen -> RangeError', async () => {
    const t = valid();
    await expectRejects(() => flashAttention(t.q, t.k, zerosF32([2, 8, 3, 16])), { cls: RangeError, fn: FA, arg: 'v.shape[1]', given: num(8) });
  });

  it('v batch / heads / headDim != k -> RangeError naming the v dimension', async () => {
    const t = valid();
    await expectRejects(() => flashAttention(t.q, t.k, zerosF32([1, 7, 3, 16])), { cls: RangeError, fn: FA, arg: 'v.shape[0]', given: num(1) });
    await expectRejects(() => flashAttention(t.q, t.k, zerosF32([2, 7, 6, 16])), { cls: RangeError, fn: FA, arg: 'v.shape[2]', given: num(6) });
    await expectRejects(() => flashAttention(t.q, t.k, zerosF32([2, 7, 3, 24])), { cls: RangeError, fn: FA, arg: 'v.shape[3]', given: num(24) });
  });

  it('H % Hkv != 0 -> RangeError naming k.shape[2] (heads) and both head counts', async () => {
    const t = valid();
    await expectRejects(() => flashAttention(t.q, zerosF32([2, 7, 4, 16]), zerosF32([2, 7, 4, 16])), {
      cls: RangeError, fn: FA, arg: 'k.shape[2]', given: [num(4), num(6)],
    });
    // more kv heads than query heads
    await expectRejects(() => flashAttention(zerosF32([2, 5, 2, 16]), zerosF32([2, 7, 4, 16]), zerosF32([2, 7, 4, 16])), {
      cls: RangeError, fn: FA, arg: 'k.shape[2]', given: [num(4), num(2)],
    });
  });

  it('k.shape[3] (headDim) != q.shape[3] -> RangeError (the contract example: 128 vs 64)', async () => {
    const q = zerosF32([1, 4, 2, 128]);
    const k = zerosF32([1, 4, 2, 64]);
    await expectRejects(() => flashAttention(q, k, k), { cls: RangeError, fn: FA, arg: 'k.shape[3]', given: [num(64), num(128)] });
    await expect(flashAttention(q, k, k)).rejects.toThrow(/headDim/);
  });

  it('q.shape[3] (headDim) of 0 or > 256 -> RangeError', async () => {
    for (const D of [0, 257, 512]) {
      const q = zerosF32([1, 4, 2, D]);
      await expectRejects(() => flashAttention(q, q, q), { cls: RangeError, fn: FA, arg: 'q.shape[3]', given: num(D) }, `D=${D}`);
    }
  });

  it('dtype mismatch -> TypeError naming k.dtype / v.dtype and both dtypes', async () => {
    const t = valid();
    await expectRejects(() => flashAttention(t.q, zerosLow([2, 7, 3, 16], 'float16'), t.v), {
      cls: TypeError, fn: FA, arg: 'k.dtype', given: ['float16', 'float32'],
    });
    await expectRejects(() => flashAttention(t.q, t.k, zerosLow([2, 7, 3, 16], 'bfloat16')), {
      cls: TypeError, fn: FA, arg: 'v.dtype', given: ['bfloat16', 'float32'],
    });
    const h = valid(2, 'float16');
    await expectRejects(() => flashAttention(h.q, h.k, zerosLow([2, 7, 3, 16], 'bfloat16')), {
      cls: TypeError, fn: FA, arg: 'v.dtype', given: ['bfloat16', 'float16'],
    });
  });

  it('a disposed q, k or v -> TypeError "... <name> is disposed"', async () => {
    for (const pos of ['q', 'k', 'v'] as const) {
      const t = valid();
      t[pos].dispose();
      await expectRejects(() => flashAttention(t.q, t.k, t.v), { cls: TypeError, fn: FA, arg: pos, given: new RegExp(`\\b${pos} is disposed`) }, pos);
    }
  });

  it('options.scale: NaN / Infinity -> RangeError; not a number -> TypeError', async () => {
    const t = valid();
    for (const [scale, given] of [
      [NaN, /NaN/],
      [Infinity, /Infinity/],
      [-Infinity, /-Infinity/],
    ] as const) {
      await expectRejects(() => flashAttention(t.q, t.k, t.v, { scale }), { cls: RangeError, fn: FA, arg: 'options.scale', given }, String(scale));
    }
    for (const [scale, given] of [
      ['0.5', /0\.5|string/],
      [null, /null/],
      [true, /true|boolean/],
      [{}, /object|Object/],
    ] as Array<[unknown, RegExp]>) {
      await expectRejects(() => flashAttention(t.q, t.k, t.v, { scale } as never), { cls: TypeError, fn: FA, arg: 'options.scale', given }, String(scale));
    }
  });

  it('options.layout invalid -> RangeError/TypeError naming options.layout and the value', async () => {
    const t = valid();
    for (const [layout, given] of [
      ['bsdh', /bsdh/],
      ['BSHD', /BSHD/],
      ['', /''|""|got\s*$/],
      [42, num(42)],
      [null, /null/],
    ] as Array<[unknown, RegExp]>) {
      await expectRejects(
        () => flashAttention(t.q, t.k, t.v, { layout } as never),
        { cls: [RangeError, TypeError], fn: FA, arg: 'options.layout', given },
        `layout=${String(layout)}`,
      );
    }
  });

  it('options.causal not a boolean -> TypeError', async () => {
    const t = valid();
    for (const [causal, given] of [
      ['yes', /yes|string/],
      [1, num(1)],
      [null, /null/],
      ['false', /false|string/],
    ] as Array<[unknown, RegExp]>) {
      await expectRejects(() => flashAttention(t.q, t.k, t.v, { causal } as never), { cls: TypeError, fn: FA, arg: 'options.causal', given }, String(causal));
    }
  });

  it('nothing is computed for a rejected call, and a valid call right after works', async () => {
    const t = valid();
    await expect(flashAttention(t.q, t.k, t.v, { scale: NaN })).rejects.toBeInstanceOf(RangeError);
    const r = await flashAttention(t.q, t.k, t.v);
    expect(r.out.shape).toEqual([2, 5, 6, 16]);
    disposeAll(r.out, r.lse, t.q, t.k, t.v, t.dout);
  });
});

describe('flashAttentionBackward argument errors', () => {
  async function setup(dtype: 'float32' | 'float16' = 'float32') {
    const t = valid(3, dtype);
    const f = await flashAttention(t.q, t.k, t.v);
    return { ...t, out: f.out, lse: f.lse };
  }

  for (const pos of ['dout', 'q', 'k', 'v', 'out', 'lse'] as const) {
    it(`${pos} not a Tensor -> TypeError naming ${pos}`, async () => {
      const s = await setup();
      for (const [what, value, given] of NOT_TENSORS) {
        const a = { ...s, [pos]: value } as Record<string, unknown>;
        await expectRejects(
          () => flashAttentionBackward(a.dout as Tensor, a.q as Tensor, a.k as Tensor, a.v as Tensor, a.out as Tensor, a.lse as Tensor),
          { cls: TypeError, fn: FB, arg: pos, given },
          `${pos}=${what}`,
        );
      }
    });
  }

  it('dout.shape / out.shape different from q.shape -> RangeError', async () => {
    const s = await setup();
    const bad = zerosF32([2, 5, 6, 8]);
    await expectRejects(() => flashAttentionBackward(bad, s.q, s.k, s.v, s.out, s.lse), { cls: RangeError, fn: FB, arg: 'dout.shape', given: shapeRe([2, 5, 6, 8]) });
    await expectRejects(() => flashAttentionBackward(s.dout, s.q, s.k, s.v, bad, s.lse), { cls: RangeError, fn: FB, arg: 'out.shape', given: shapeRe([2, 5, 6, 8]) });
    const bad3 = zerosF32([2, 5, 96]);
    await expectRejects(() => flashAttentionBackward(bad3, s.q, s.k, s.v, s.out, s.lse), { cls: RangeError, fn: FB, arg: 'dout.shape', given: shapeRe([2, 5, 96]) });
  });

  it('dout / out of another dtype -> TypeError naming dout.dtype / out.dtype', async () => {
    const s = await setup();
    const h = zerosLow([2, 5, 6, 16], 'float16');
    await expectRejects(() => flashAttentionBackward(h, s.q, s.k, s.v, s.out, s.lse), { cls: TypeError, fn: FB, arg: 'dout.dtype', given: ['float16', 'float32'] });
    await expectRejects(() => flashAttentionBackward(s.dout, s.q, s.k, s.v, h, s.lse), { cls: TypeError, fn: FB, arg: 'out.dtype', given: ['float16', 'float32'] });
  });

  it('lse.shape wrong -> RangeError with expected [B,H,Nq] and the given shape', async () => {
    const s = await setup();
    for (const shape of [
      [2, 5, 6],
      [2, 6],
      [2, 6, 5, 1],
      [2, 6, 7],
      [2, 3, 5],
    ]) {
      await expectRejects(
        () => flashAttentionBackward(s.dout, s.q, s.k, s.v, s.out, zerosF32(shape)),
        { cls: RangeError, fn: FB, arg: 'lse.shape', given: [shapeRe(shape), shapeRe([2, 6, 5])] },
        JSON.stringify(shape),
      );
    }
  });

  it('lse.dtype not float32 -> TypeError', async () => {
    const s = await setup();
    for (const dtype of ['float16', 'bfloat16'] as const) {
      await expectRejects(() => flashAttentionBackward(s.dout, s.q, s.k, s.v, s.out, zerosLow([2, 6, 5], dtype)), {
        cls: TypeError, fn: FB, arg: 'lse.dtype', given: dtype,
      });
    }
  });

  it('the forward checks apply too (head dims, heads, dtypes, disposed, options)', async () => {
    const s = await setup();
    await expectRejects(() => flashAttentionBackward(s.dout, s.q, zerosF32([2, 7, 3, 8]), s.v, s.out, s.lse), { cls: RangeError, fn: FB, arg: 'k.shape[3]', given: num(8) });
    await expectRejects(() => flashAttentionBackward(s.dout, s.q, zerosF32([2, 7, 4, 16]), zerosF32([2, 7, 4, 16]), s.out, s.lse), { cls: RangeError, fn: FB, arg: 'k.shape[2]', given: num(4) });
    await expectRejects(() => flashAttentionBackward(s.dout, s.q, s.k, zerosLow([2, 7, 3, 16], 'float16'), s.out, s.lse), { cls: TypeError, fn: FB, arg: 'v.dtype', given: 'float16' });
    await expectRejects(() => flashAttentionBackward(s.dout, s.q, s.k, s.v, s.out, s.lse, { scale: NaN }), { cls: RangeError, fn: FB, arg: 'options.scale', given: /NaN/ });
    await expectRejects(() => flashAttentionBackward(s.dout, s.q, s.k, s.v, s.out, s.lse, { layout: 'sbhd' as never }), { cls: [RangeError, TypeError], fn: FB, arg: 'options.layout', given: /sbhd/ });
    await expectRejects(() => flashAttentionBackward(s.dout, s.q, s.k, s.v, s.out, s.lse, { causal: 'no' as never }), { cls: TypeError, fn: FB, arg: 'options.causal', given: /no|string/ });
    for (const pos of ['dout', 'q', 'k', 'v', 'out', 'lse'] as const) {
      const t = await setup();
      t[pos].dispose();
      await expectRejects(
        () => flashAttentionBackward(t.dout, t.q, t.k, t.v, t.out, t.lse),
        { cls: TypeError, fn: FB, arg: pos, given: new RegExp(`\\b${pos} is disposed`) },
        `${pos} disposed`,
      );
    }
  });
});

describe('Tensor.from errors (thrown synchronously)', () => {
  const FROM = 'Tensor.from';
  it('data of the wrong kind -> TypeError naming data', () => {
    for (const [data, given] of [
      [[1, 2, 3, 4], /\bArray\b|object|\[\s*1/],
      [null, /null/],
      [undefined, /undefined/],
      ['abcd', /abcd|string/],
      [new Float64Array(4), /Float64Array/],
      [new Int16Array(4), /Int16Array/],
      [new Uint8Array(4), /Uint8Array/],
      [new ArrayBuffer(16), /ArrayBuffer/],
      [42, num(42)],
      [{ length: 4 }, /object|Object/],
    ] as Array<[unknown, RegExp]>) {
      expectThrows(() => Tensor.from(data as Float32Array, [4]), { cls: TypeError, fn: FROM, arg: 'data', given }, String(data));
    }
  });

  it('non-integer or negative dims -> RangeError naming shape[i] and the value', () => {
    for (const [shape, arg, given] of [
      [[2, 1.5], 'shape[1]', /1\.5/],
      [[-1, 3], 'shape[0]', /-1/],
      [[3, -3], 'shape[1]', /-3/],
      [[NaN, 3], 'shape[0]', /NaN/],
      [[3, Infinity], 'shape[1]', /Infinity/],
      [[2 ** 53, 1], 'shape[0]', /9007199254740992|2\^53|e\+15/],
    ] as Array<[number[], string, RegExp]>) {
      expectThrows(() => Tensor.from(new Float32Array(3), shape), { cls: RangeError, fn: FROM, arg, given }, JSON.stringify(shape));
    }
  });

  it('a shape that is not an array of numbers -> TypeError/RangeError naming shape', () => {
    for (const [shape, given] of [
      [4, num(4)],
      [null, /null/],
      ['4', /4|string/],
      [{}, /object|Object/],
    ] as Array<[unknown, RegExp]>) {
      expectThrows(() => Tensor.from(new Float32Array(4), shape as number[]), { cls: [TypeError, RangeError], fn: FROM, arg: 'shape', given }, String(shape));
    }
    expectThrows(() => Tensor.from(new Float32Array(4), ['4'] as unknown as number[]), { cls: [TypeError, RangeError], fn: FROM, arg: 'shape[0]' });
    expectThrows(() => Tensor.from(new Float32Array(4), [null] as unknown as number[]), { cls: [TypeError, RangeError], fn: FROM, arg: 'shape[0]' });
  });

  it('data.length != product of shape -> RangeError naming data.length and the length', () => {
    expectThrows(() => Tensor.from(new Float32Array(5), [2, 3]), { cls: RangeError, fn: FROM, arg: 'data.length', given: num(5) });
    expectThrows(() => Tensor.from(new Float32Array(7), [2, 3]), { cls: RangeError, fn: FROM, arg: 'data.length', given: num(7) });
    expectThrows(() => Tensor.from(new Uint16Array(0), [1], { dtype: 'float16' }), { cls: RangeError, fn: FROM, arg: 'data.length', given: num(0) });
  });

  it('a shape with more than 2^31-1 elements -> RangeError (before any allocation)', () => {
    expectThrows(() => Tensor.from(new Float32Array(4), [65536, 65536, 1, 1]), { cls: RangeError, fn: FROM, arg: 'shape', given: /65536/ });
  });

  it('options.dtype invalid -> TypeError naming options.dtype and the value', () => {
    for (const [dtype, given] of [
      ['float64', /float64/],
      ['fp16', /fp16/],
      ['Float16', /Float16/],
      [42, num(42)],
      [null, /null/],
    ] as Array<[unknown, RegExp]>) {
      expectThrows(() => Tensor.from(new Float32Array(4), [4], { dtype } as never), { cls: TypeError, fn: FROM, arg: 'options.dtype', given }, String(dtype));
      expectThrows(() => Tensor.from(new Uint16Array(4), [4], { dtype } as never), { cls: TypeError, fn: FROM, arg: 'options.dtype', given }, `u16 ${String(dtype)}`);
    }
  });

  it('Uint16Array without a dtype, or with dtype float32 -> TypeError naming options.dtype', () => {
    expectThrows(() => Tensor.from(new Uint16Array(4), [4]), { cls: TypeError, fn: FROM, arg: 'options.dtype' });
    expectThrows(() => Tensor.from(new Uint16Array(4), [4], {}), { cls: TypeError, fn: FROM, arg: 'options.dtype' });
    expectThrows(() => Tensor.from(new Uint16Array(4), [4], { dtype: 'float32' }), { cls: TypeError, fn: FROM, arg: 'options.dtype', given: /float32/ });
  });
});

describe('Tensor.zeros and Tensor.to errors (rejected Promises)', () => {
  const Z = 'Tensor.zeros';
  const TO = /^(Tensor(\.prototype)?|tensor)\.to\b/;

  it('absurd sizes are rejected before allocating: [65536, 65536, 1, 1] -> RangeError naming shape', async () => {
    await expectRejects(() => Tensor.zeros([65536, 65536, 1, 1]), { cls: RangeError, fn: Z, arg: 'shape', given: /65536/ });
    await expectRejects(() => Tensor.zeros([2 ** 20, 2 ** 14, 16, 1], { dtype: 'float32' }), { cls: RangeError, fn: Z, arg: 'shape', given: /1048576|16384/ });
    await expectRejects(() => Tensor.zeros([2 ** 40, 2 ** 40]), { cls: RangeError, fn: Z, arg: 'shape' });
    await expectRejects(() => Tensor.zeros([2 ** 31, 1], { dtype: 'float16' }), { cls: RangeError, fn: Z, arg: 'shape', given: /2147483648|2\^31/ });
  });

  it('bad dims and dtype', async () => {
    await expectRejects(() => Tensor.zeros([-1]), { cls: RangeError, fn: Z, arg: 'shape[0]', given: /-1/ });
    await expectRejects(() => Tensor.zeros([2, 1.5]), { cls: RangeError, fn: Z, arg: 'shape[1]', given: /1\.5/ });
    await expectRejects(() => Tensor.zeros([2], { dtype: 'int8' } as never), { cls: TypeError, fn: Z, arg: 'options.dtype', given: /int8/ });
  });

  it('invalid device strings -> RangeError/TypeError naming device and the value', async () => {
    for (const [device, given] of [
      ['cuda:-1', /cuda:-1/],
      ['gpu', /gpu/],
      ['cuda:abc', /cuda:abc/],
      ['cuda:1.5', /cuda:1\.5/],
      ['cuda:', /cuda:/],
      [42, num(42)],
      [null, /null/],
    ] as Array<[unknown, RegExp]>) {
      await expectRejects(() => Tensor.zeros([2], { device } as never), { cls: [RangeError, TypeError], fn: Z, arg: 'device', given }, `zeros ${String(device)}`);
      const t = zerosF32([2]);
      await expectRejects(() => t.to(device as never), { cls: [RangeError, TypeError], fn: TO, arg: 'device', given }, `to ${String(device)}`);
      t.dispose();
    }
  });

  it.skipIf(hasGpu())('without a CUDA device, memoryStats / resetPeakMemoryStats say that there is none, with or without a device', () => {
    for (const f of [memoryStats, resetPeakMemoryStats]) {
      for (const [device, given] of [[undefined, "undefined \\(the default, 'cuda'\\)"], ['cpu', "'cpu'"], ['cuda', "'cuda'"], ['cuda:1', "'cuda:1'"]]) {
        const why = new RegExp(`must be a CUDA device .*, and this process has none, got ${given}$`);
        expectThrows(() => f(device as never), { cls: RangeError, fn: f.name, arg: 'device', given: why }, `${f.name}(${String(device)})`);
      }
    }
  });

  it.skipIf(hasGpu())('without a CUDA device, cuda / cuda:0 are rejected (RangeError naming device), not crashed on', async () => {
    for (const device of ['cuda', 'cuda:0', 'cuda:1']) {
      await expectRejects(() => Tensor.zeros([2], { device } as never), { cls: RangeError, fn: Z, arg: 'device', given: device }, `zeros ${device}`);
      const t = zerosF32([2]);
      await expectRejects(() => t.to(device as never), { cls: RangeError, fn: TO, arg: 'device', given: device }, `to ${device}`);
      t.dispose();
    }
  });

  it.skipIf(!hasGpu())('with CUDA devices, an index past the last one -> RangeError naming device', async () => {
    const bad = `cuda:${devices().length + 3}`;
    await expectRejects(() => Tensor.zeros([2], { device: bad } as never), { cls: RangeError, fn: Z, arg: 'device', given: bad });
    const t = zerosF32([2]);
    await expectRejects(() => t.to(bad as never), { cls: RangeError, fn: TO, arg: 'device', given: bad });
    t.dispose();
  });
});

// ------------------------------------------------------------------------------------------------
// Fuzz: malformed calls at every entry point. Each must end in a thrown/rejected Error (TypeError or
// RangeError for the `mustFail` set); nothing may crash the worker process or hang.
// ------------------------------------------------------------------------------------------------

interface Outcome {
  label: string;
  kind: 'resolved' | 'threw' | 'rejected';
  error?: unknown;
  value?: unknown;
}

async function settle(label: string, thunk: () => unknown): Promise<Outcome> {
  let r: unknown;
  try {
    r = thunk();
  } catch (e) {
    return { label, kind: 'threw', error: e };
  }
  if (r instanceof Promise) {
    try {
      return { label, kind: 'resolved', value: await r };
    } catch (e) {
      return { label, kind: 'rejected', error: e };
    }
  }
  return { label, kind: 'resolved', value: r };
}

function disposeDeep(v: unknown): void {
  if (v instanceof Tensor) {
    disposeAll(v);
    return;
  }
  if (v && typeof v === 'object') for (const x of Object.values(v)) if (x instanceof Tensor) disposeAll(x);
}

const HOSTILE_VALUES: Array<[string, () => unknown]> = [
  ['undefined', () => undefined],
  ['null', () => null],
  ['0', () => 0],
  ['-1', () => -1],
  ['NaN', () => NaN],
  ['Infinity', () => Infinity],
  ['1e308', () => 1e308],
  ['2^53', () => 2 ** 53],
  ['string', () => 'abc'],
  ['empty string', () => ''],
  ['true', () => true],
  ['symbol', () => Symbol('x')],
  ['bigint', () => 10n],
  ['[]', () => []],
  ['[1,2]', () => [1, 2]],
  ['{}', () => ({})],
  ['fake tensor', () => ({ shape: [1, 4, 1, 8], dtype: 'float32', device: 'cpu', disposed: false, toFloat32Array: async () => new Float32Array(32) })],
  ['fake with huge shape', () => ({ shape: [2 ** 31, 2 ** 31, 2 ** 31, 2 ** 31], dtype: 'float32', device: 'cpu' })],
  ['Object.create(Tensor.prototype)', () => Object.create(Tensor.prototype)],
  ['function', () => () => 1],
  ['Float32Array', () => new Float32Array(32)],
  ['Float64Array', () => new Float64Array(32)],
  ['ArrayBuffer', () => new ArrayBuffer(128)],
  ['Proxy', () => new Proxy({}, {})],
  ['Promise', () => Promise.resolve(1)],
  ['Date', () => new Date(0)],
  ['frozen object', () => Object.freeze({ shape: Object.freeze([1, 4, 1, 8]) })],
];

const BAD_SHAPES: Array<[string, () => unknown]> = [
  ['undefined', () => undefined],
  ['null', () => null],
  ['number', () => 4],
  ['string', () => '4'],
  ['{}', () => ({})],
  ['[NaN]', () => [NaN]],
  ['[-4]', () => [-4]],
  ['[4.5]', () => [4.5]],
  ['[1e308]', () => [1e308]],
  ['[2^53]', () => [2 ** 53]],
  ['[Infinity]', () => [Infinity]],
  ['[2, 2, 1e10]', () => [2, 2, 1e10]],
  ['["4"]', () => ['4']],
  ['[null]', () => [null]],
  ['[4n]', () => [4n]],
  ['[[4]]', () => [[4]]],
  ['[symbol]', () => [Symbol('d')]],
  ['[2^31, 2^31, 2^31, 2^31]', () => [2 ** 31, 2 ** 31, 2 ** 31, 2 ** 31]],
  ['[65536, 65536, 65536]', () => [65536, 65536, 65536]],
];

describe('a Tensor of another copy of the library', () => {
  it('is refused with a TypeError that says where it came from; each copy takes its own tensors', async () => {
    vi.resetModules();  // a second copy of lib/ (its own Tensor class), as a second install would load
    const other = await import('../../lib/index');
    expect(other.Tensor).not.toBe(Tensor);
    const data = Float32Array.from({ length: 2 * 3 * 2 * 8 }, (_, i) => Math.sin(i));
    const mine = Tensor.from(data, [2, 3, 2, 8]), theirs = other.Tensor.from(data, [2, 3, 2, 8]);
    const given = /got a Tensor of another copy of flash-attention-node \(each copy loaded has its own Tensor class: load the library once\)$/;
    await expectRejects(() => flashAttention(theirs as never, mine, mine), { cls: TypeError, fn: 'flashAttention', arg: 'q', given }, 'q from the other copy');
    await expectRejects(() => other.flashAttention(theirs, mine as never, theirs), { cls: TypeError, fn: 'flashAttention', arg: 'k', given }, 'k from this copy');
    // a plain Tensor of this copy where a Tensor is not expected is still just 'a Tensor'
    await expectRejects(() => flashAttention(mine, mine, mine, { scale: mine as never }), { cls: TypeError, fn: 'flashAttention', arg: 'options.scale', given: /got a Tensor$/ }, 'scale');
    const a = await flashAttention(mine, mine, mine), b = await other.flashAttention(theirs, theirs, theirs);
    expect(Array.from(await a.out.toTypedArray())).toEqual(Array.from(await b.out.toTypedArray()));
    disposeAll(mine, a.out, a.lse);
    theirs.dispose(); b.out.dispose(); b.lse.dispose();
  });
});

describe('fuzz: malformed calls never crash the process', () => {
  it('every entry point answers dozens of malformed calls with clean TypeError/RangeError', async () => {
    const rng = new Rng(12345);
    const good = () => ({
      q: randomTensor(rng, [1, 4, 2, 8], 'float32').tensor,
      k: randomTensor(rng, [1, 4, 1, 8], 'float32').tensor,
      v: randomTensor(rng, [1, 4, 1, 8], 'float32').tensor,
    });
    const g = good();
    const f = await flashAttention(g.q, g.k, g.v);
    const dout = randomTensor(rng, [1, 4, 2, 8], 'float32').tensor;
    const disposed = randomTensor(rng, [1, 4, 2, 8], 'float32').tensor;
    disposed.dispose();
    const calls: Array<[string, () => unknown]> = [];
    for (const [name, mk] of [...HOSTILE_VALUES, ['disposed tensor', () => disposed] as [string, () => unknown]]) {
      calls.push([`Tensor.from(data=${name})`, () => Tensor.from(mk() as Float32Array, [4])]);
      calls.push([`flashAttention(q=${name})`, () => flashAttention(mk() as Tensor, g.k, g.v)]);
      calls.push([`flashAttention(k=${name})`, () => flashAttention(g.q, mk() as Tensor, g.v)]);
      calls.push([`flashAttention(v=${name})`, () => flashAttention(g.q, g.k, mk() as Tensor)]);
      const bargs = [dout, g.q, g.k, g.v, f.out, f.lse];
      for (let i = 0; i < 6; i++) {
        calls.push([`flashAttentionBackward(arg${i}=${name})`, () => {
          const a = bargs.slice();
          a[i] = mk() as Tensor;
          return flashAttentionBackward(a[0], a[1], a[2], a[3], a[4], a[5]);
        }]);
      }
      if (name !== 'undefined') {
        calls.push([`Tensor.from(dtype=${name})`, () => Tensor.from(new Float32Array(4), [4], { dtype: mk() } as never)]);
        calls.push([`Tensor.zeros(dtype=${name})`, () => Tensor.zeros([4], { dtype: mk() } as never)]);
        calls.push([`Tensor.zeros(device=${name})`, () => Tensor.zeros([4], { device: mk() } as never)]);
        calls.push([`tensor.to(${name})`, () => g.q.to(mk() as never)]);
        const sample = mk();
        // finite numbers are valid scales, booleans valid causal flags: only the invalid ones here
        if (!(typeof sample === 'number' && Number.isFinite(sample))) {
          calls.push([`flashAttention(scale=${name})`, () => flashAttention(g.q, g.k, g.v, { scale: mk() } as never)]);
        }
        if (typeof sample !== 'boolean') {
          calls.push([`flashAttention(causal=${name})`, () => flashAttention(g.q, g.k, g.v, { causal: mk() } as never)]);
        }
        calls.push([`flashAttention(layout=${name})`, () => flashAttention(g.q, g.k, g.v, { layout: mk() } as never)]);
      }
    }
    for (const [name, mk] of BAD_SHAPES) {
      calls.push([`Tensor.from(shape=${name})`, () => Tensor.from(new Float32Array(4), mk() as number[])]);
      calls.push([`Tensor.from(u16, shape=${name})`, () => Tensor.from(new Uint16Array(4), mk() as number[], { dtype: 'float16' })]);
      calls.push([`Tensor.zeros(shape=${name})`, () => Tensor.zeros(mk() as number[])]);
    }
    calls.push(['flashAttention()', () => (flashAttention as unknown as () => unknown)()]);
    calls.push(['flashAttentionBackward()', () => (flashAttentionBackward as unknown as () => unknown)()]);
    calls.push(['Tensor.from()', () => (Tensor.from as unknown as () => unknown)()]);
    calls.push(['Tensor.zeros()', () => (Tensor.zeros as unknown as () => unknown)()]);
    calls.push(['to() no args', () => (g.q.to as unknown as () => unknown).call(g.q)]);
    calls.push(['toFloat32Array on a fake this', () => Tensor.prototype.toFloat32Array.call({} as Tensor)]);
    calls.push(['toTypedArray on a fake this', () => Tensor.prototype.toTypedArray.call(Object.create(Tensor.prototype))]);
    calls.push(['to on a fake this', () => Tensor.prototype.to.call({ shape: [1] } as unknown as Tensor, 'cpu')]);
    calls.push(['q as k with wrong rank', () => flashAttention(g.q, Tensor.from(new Float32Array(8), [8]), g.v)]);

    expect(calls.length).toBeGreaterThan(300);
    const outcomes: Outcome[] = [];
    for (const [label, thunk] of calls) outcomes.push(await settle(label, thunk));
    const problems: string[] = [];
    for (const o of outcomes) {
      if (o.kind === 'resolved') {
        problems.push(`${o.label}: succeeded`);
        disposeDeep(o.value);
      } else if (!(o.error instanceof TypeError || o.error instanceof RangeError)) {
        problems.push(`${o.label}: ${o.kind} a non-TypeError/RangeError: ${String(o.error)}`);
      } else if (!(o.error as Error).message) {
        problems.push(`${o.label}: error without a message`);
      }
    }
    expect(problems).toEqual([]);
    // The addon still works and is still right.
    const r = await flashAttention(g.q, g.k, g.v, { causal: true });
    const qv = await toF64(g.q);
    const kv = await toF64(g.k);
    const vv = await toF64(g.v);
    const ref = refForward(qv, kv, vv, { B: 1, Nq: 4, Nk: 4, H: 2, Hkv: 1, D: 8, causal: true, scale: defaultScale(8), layout: 'bshd' });
    expect(relL2(await toF64(r.out), ref.out)).toBeLessThan(1e-5);
    disposeAll(r.out, r.lse, g.q, g.k, g.v, f.out, f.lse, dout);
  });

  it('calls whose validity the contract leaves open end cleanly either way (success or Error)', async () => {
    const rng = new Rng(54321);
    const q = randomTensor(rng, [1, 4, 2, 8], 'float32').tensor;
    const k = randomTensor(rng, [1, 4, 1, 8], 'float32').tensor;
    const calls: Array<[string, () => unknown]> = [
      ['options = 42', () => flashAttention(q, k, k, 42 as never)],
      ['options = "causal"', () => flashAttention(q, k, k, 'causal' as never)],
      ['options = null', () => flashAttention(q, k, k, null as never)],
      ['unknown option key', () => flashAttention(q, k, k, { casual: true } as never)],
      ['cpu = 42', () => flashAttention(q, k, k, { cpu: 42 } as never)],
      ['cpu.blockM = 0', () => flashAttention(q, k, k, { cpu: { blockM: 0 } })],
      ['cpu.blockM = -3', () => flashAttention(q, k, k, { cpu: { blockM: -3 } })],
      ['cpu.blockN = 1.5', () => flashAttention(q, k, k, { cpu: { blockN: 1.5 } })],
      ['cpu.blockN = NaN', () => flashAttention(q, k, k, { cpu: { blockN: NaN } })],
      ['cpu.blockM = 1e9', () => flashAttention(q, k, k, { cpu: { blockM: 1e9 } })],
      ['cpu.threads = 0', () => flashAttention(q, k, k, { cpu: { threads: 0 } })],
      ['cpu.threads = -1', () => flashAttention(q, k, k, { cpu: { threads: -1 } })],
      ['cpu.threads = 2^31', () => flashAttention(q, k, k, { cpu: { threads: 2 ** 31 } })],
      ['cpu.threads = "4"', () => flashAttention(q, k, k, { cpu: { threads: '4' } } as never)],
      ['scale = 1e308', () => flashAttention(q, k, k, { scale: 1e308 })],
      ['scale = -1e308', () => flashAttention(q, k, k, { scale: -1e308 })],
      ['scale = 5e-324', () => flashAttention(q, k, k, { scale: 5e-324 })],
      ['deterministic = "yes"', () => flashAttention(q, k, k).then((f) => flashAttentionBackward(q, q, k, k, f.out, f.lse, { deterministic: 'yes' } as never))],
      ['returnSoftmaxD = 1', () => flashAttention(q, k, k).then((f) => flashAttentionBackward(q, q, k, k, f.out, f.lse, { returnSoftmaxD: 1 } as never))],
      ['options getter that throws', () => flashAttention(q, k, k, { get causal(): boolean { throw new Error('getter boom'); } })],
      ['shape Proxy that throws', () => Tensor.from(new Float32Array(2), new Proxy([1, 2], { get() { throw new Error('proxy boom'); } }))],
      ['empty seqlen q [1,0,2,8]', () => flashAttention(Tensor.from(new Float32Array(0), [1, 0, 2, 8]), k, k)],
      ['empty seqlen k [1,0,1,8]', () => flashAttention(q, Tensor.from(new Float32Array(0), [1, 0, 1, 8]), Tensor.from(new Float32Array(0), [1, 0, 1, 8]))],
      ['empty batch', () => flashAttention(Tensor.from(new Float32Array(0), [0, 4, 2, 8]), Tensor.from(new Float32Array(0), [0, 4, 1, 8]), Tensor.from(new Float32Array(0), [0, 4, 1, 8]))],
      ['zero heads', () => flashAttention(Tensor.from(new Float32Array(0), [1, 4, 0, 8]), Tensor.from(new Float32Array(0), [1, 4, 0, 8]), Tensor.from(new Float32Array(0), [1, 4, 0, 8]))],
      ['new Tensor()', () => new (Tensor as unknown as new (...a: unknown[]) => unknown)()],
      ['new Tensor(junk)', () => new (Tensor as unknown as new (...a: unknown[]) => unknown)(Symbol('x'), { kind: 'host', data: 5 }, [1], 'float32')],
      ['devices(junk)', () => (devices as unknown as (x: unknown) => unknown)('junk')],
      ['buildInfo(junk)', () => (buildInfo as unknown as (x: unknown) => unknown)(123)],
    ];
    const problems: string[] = [];
    for (const [label, thunk] of calls) {
      const o = await settle(label, thunk);
      if (o.kind === 'resolved') {
        disposeDeep(o.value);
        continue;
      }
      if (!(o.error instanceof Error)) problems.push(`${label}: ${o.kind} a non-Error: ${String(o.error)}`);
    }
    expect(problems).toEqual([]);
    const r = await flashAttention(q, k, k);
    expect(r.out.shape).toEqual([1, 4, 2, 8]);
    disposeAll(r.out, r.lse, q, k);
  });
});
