// Inputs that change between the library's reads, or that are typed arrays in disguise (the
// forty-eighth session's black-box audit): each was a crash, a silent change of the problem or a
// message that broke the contract before. What is checked must be what the native code gets:
// - a shape array whose elements change after the check (a getter): the tensor keeps the checked
//   shape (before, it stored the second read: 8 elements claiming 2^60, and a paged call read
//   page 2^29 of them);
// - a typed array subclass whose slice() returns itself, or with an own `length`: the tensor
//   holds its own copy of the elements (before, it held the caller's memory, which a resize freed
//   under a running call);
// - typed arrays of another realm (a vm context) are accepted as this realm's are;
// - dimensions of 2^31 or more, also in an empty tensor, are refused (they reach the addon as int32);
// - scale / softcap outside float32's range are refused (they became infinite, or 0: softcap off);
// - window / options / index arrays / mergeAttention's arrays read once;
// - synchronize() / emptyCache() with no argument on a machine without a CUDA device are 'cpu';
// - tensors are frozen, and their memory is not reachable through them (storage(), wrapHost()).
import * as vm from 'node:vm';
import { describe, expect, it } from 'vitest';
import {
  Tensor, appendKV, emptyCache, flashAttention, flashAttentionBackward, flashAttentionVarlen, mergeAttention, pagedAttention, synchronize,
} from '../../lib/index';
import { F, OP, S, native } from '../../lib/native';
import { checkOptions, optionList } from '../../lib/errors';
import { checkMask } from '../../lib/attention';
import { disposeAll, Rng, randomTensor } from '../helpers/reference';

/** An array whose element i reads first[i] the first time and later[i] after that. */
function changing(first: number[], later: number[]): number[] {
  const a: number[] = new Array(first.length).fill(0);
  first.forEach((f, i) => {
    let reads = 0;
    Object.defineProperty(a, i, { get: () => (reads++ === 0 ? f : later[i]), enumerable: true });
  });
  return a;
}

const hasGpu = native.devices().length > 0;

describe('shapes are read once', () => {
  it('Tensor.from / zeros / empty keep the shape that was checked', async () => {
    const t = Tensor.from(new Float32Array(8), changing([1, 1, 1, 8], [2 ** 30, 2 ** 30, 1, 8]), { dtype: 'float16' });
    expect(t.shape).toEqual([1, 1, 1, 8]);
    expect(t.size).toBe(8);
    const z = await Tensor.zeros(changing([2, 4], [2 ** 30, 2 ** 30]));
    expect(z.shape).toEqual([2, 4]);
    expect(z.size).toBe(8);
    expect((await z.toFloat32Array()).length).toBe(8);
    const e = await Tensor.empty(changing([3], [2 ** 31]), { dtype: 'int32' });
    expect(e.shape).toEqual([3]);
    disposeAll(t, z, e);
  });

  it('a paged call on a cache made from such a shape reads only its own pages (RangeError, no crash)', async () => {
    const kc = Tensor.from(new Float32Array(8), changing([1, 1, 1, 8], [2 ** 30, 2 ** 30, 1, 8]), { dtype: 'float16' });
    const vc = Tensor.from(new Float32Array(8), changing([1, 1, 1, 8], [2 ** 30, 2 ** 30, 1, 8]), { dtype: 'float16' });
    const q = Tensor.from(new Float32Array(8).fill(1), [1, 1, 8], { dtype: 'float16' });
    await expect(pagedAttention(q, kc, vc, { pageTable: Int32Array.of(2 ** 29), seqlensK: Int32Array.of(4), cuSeqlensQ: Int32Array.of(0, 1) }))
      .rejects.toThrow(RangeError);
    disposeAll(kc, vc, q);
  });

  it('dimensions of 2^31 or more are refused, also where the product is 0', () => {
    expect(() => Tensor.from(new Float32Array(0), [1, 0, 2 ** 31, 8])).toThrow(/Tensor\.from: shape\[2\] must be at most 2\^31-1, got 2147483648/);
    expect(() => Tensor.from(new Float32Array(0), [0, 2 ** 31])).toThrow(RangeError);
    expect(Tensor.from(new Float32Array(0), [0, 2 ** 31 - 1]).shape).toEqual([0, 2 ** 31 - 1]);
  });
});

describe('typed arrays in disguise', () => {
  it("a subclass whose slice() returns itself: the tensor holds its own copy", async () => {
    class Aliased extends Float32Array { slice(): this { return this; } }
    const data = new Aliased(8).fill(1.5);
    const t = Tensor.from(data, [8]);
    data.fill(-3);  // the caller's array changes; the tensor's does not
    expect(Array.from(await t.toFloat32Array())).toEqual(new Array(8).fill(1.5));
    t.dispose();
  });

  it('a resizable buffer shrunk under a running call does not reach it', async () => {
    const n = 1 * 256 * 2 * 64;
    const buf = new (ArrayBuffer as unknown as new (n: number, o: { maxByteLength: number }) => ArrayBuffer & { resize(n: number): void })(n * 4, { maxByteLength: n * 4 });
    class Aliased extends Float32Array { slice(): this { return this; } }
    const data = new Aliased(buf).fill(0.01);
    const q = Tensor.from(data, [1, 256, 2, 64]);
    const p = flashAttention(q, q, q, { cpu: { threads: 2 } });
    buf.resize(0);
    const { out, lse } = await p;
    const o = await out.toFloat32Array();
    // uniform attention over equal rows: every output element is the value itself
    for (const x of o) expect(Math.abs(x - 0.01)).toBeLessThan(1e-6);
    disposeAll(q, out, lse);
  });

  it('an own `length` is not the length: the array\'s own is checked', () => {
    const a = new Float32Array(3);
    Object.defineProperty(a, 'length', { value: 8 });
    expect(() => Tensor.from(a, [8])).toThrow(/Tensor\.from: data\.length must equal the product of shape \[8\] = 8, got 3/);
    expect(Tensor.from(a, [3]).size).toBe(3);
  });

  it('typed arrays of another realm are accepted, as tensors and as index arrays', async () => {
    const other = vm.runInNewContext('({ f: new Float32Array(2 * 3 * 1 * 8).fill(0.5), cu: Int32Array.of(0, 2, 3) })') as { f: Float32Array; cu: Int32Array };
    const q = Tensor.from(other.f, [2, 3, 1, 8]);
    expect(q.dtype).toBe('float32');
    const packed = Tensor.from(new Float32Array(3 * 1 * 8).fill(0.25), [3, 1, 8]);
    const r = await flashAttentionVarlen(packed, packed, packed, { cuSeqlensQ: other.cu, cuSeqlensK: other.cu });
    for (const x of await r.out.toFloat32Array()) expect(x).toBeCloseTo(0.25, 6);
    disposeAll(q, packed, r.out, r.lse);
  });

  it('a Proxy around a typed array is refused with a TypeError that says so', async () => {
    const packed = Tensor.from(new Float32Array(8), [1, 1, 8]);
    await expect(flashAttentionVarlen(packed, packed, packed, { cuSeqlensQ: new Proxy(Int32Array.of(0, 1), {}) as Int32Array, cuSeqlensK: Int32Array.of(0, 1) }))
      .rejects.toThrow(/flashAttentionVarlen: options\.cuSeqlensQ must be an Int32Array or an int32 Tensor, got a Proxy/);
    expect(() => Tensor.from(new Proxy(new Float32Array(2), {}) as Float32Array, [2])).toThrow(TypeError);
    packed.dispose();
  });

  it('an index array subclass whose slice() returns itself: a queued call keeps the values it was checked with', async () => {
    class Aliased extends Int32Array { slice(): this { return this; } }
    const saved = process.env.FA_CPU_INLINE;
    process.env.FA_CPU_INLINE = '0';  // (every call on a worker: the second is queued behind the first)
    try {
      const rng = new Rng(48);
      const H = 2, D = 16, lens = [40, 24];
      const total = lens[0] + lens[1];
      const good = () => Int32Array.of(0, lens[0], total);
      const [q, k, v] = [0, 1, 2].map(() => randomTensor(rng, [total, H, D], 'float32').tensor);
      const want1 = await flashAttentionVarlen(q, k, v, { cuSeqlensQ: good(), cuSeqlensK: good() });
      const want2 = await flashAttentionVarlen(want1.out, k, v, { cuSeqlensQ: good(), cuSeqlensK: good() });
      // the first call writes o1; the second reads it as q, so it waits for the first and holds its
      // own copy of cu meanwhile (before: slice() was the caller's array, changed below)
      const o1 = await Tensor.empty([total, H, D]);
      const cu = new Aliased(3);
      cu.set(good());
      const first = flashAttentionVarlen(q, k, v, { cuSeqlensQ: good(), cuSeqlensK: good(), out: o1 });
      const second = flashAttentionVarlen(o1, k, v, { cuSeqlensQ: cu, cuSeqlensK: cu });
      cu.set([0, 2 ** 30, 2 ** 31 - 1]);  // out of range, after the call was made
      const r1 = await first, r2 = await second;
      expect(Array.from(await r2.out.toFloat32Array())).toEqual(Array.from(await want2.out.toFloat32Array()));
      disposeAll(q, k, v, want1.out, want1.lse, want2.out, want2.lse, o1, r1.lse, r2.out, r2.lse);
    } finally {
      if (saved === undefined) delete process.env.FA_CPU_INLINE;
      else process.env.FA_CPU_INLINE = saved;
    }
  });
});

describe('tensors are closed objects', () => {
  it('frozen: shape, dtype, size and device cannot be redefined (a getter would run caller code during a call)', () => {
    const t = Tensor.from(new Float32Array(8), [1, 1, 1, 8]);
    expect(Object.isFrozen(t)).toBe(true);
    expect(() => Object.defineProperty(t, 'size', { get: () => 8 })).toThrow(TypeError);
    expect(() => { (t as { shape: readonly number[] }).shape = [8]; }).toThrow(TypeError);
    t.dispose();
    expect(t.disposed).toBe(true);
  });
  it('the memory of a tensor is not handed out, and tensors on caller memory cannot be made', () => {
    const t = Tensor.from(new Float32Array(8), [8]);
    expect('storage' in t).toBe(false);
    expect('wrapHost' in Tensor).toBe(false);
    expect('wrapDevice' in Tensor).toBe(false);
    t.dispose();
  });
});

describe('float32 range of scale and softcap', () => {
  const t = () => Tensor.from(new Float32Array(4 * 8).fill(1), [1, 4, 1, 8]);
  it('scale past float32 is refused (it became infinite: NaN outputs)', async () => {
    const x = t();
    await expect(flashAttention(x, x, x, { scale: 1e39 })).rejects.toThrow(/flashAttention: options\.scale must be a finite number within float32 range/);
    await expect(flashAttention(x, x, x, { scale: -1e39 })).rejects.toThrow(RangeError);
    const ok = await flashAttention(x, x, x, { scale: 1e30 });  // (equal scores of 8e30: uniform)
    for (const y of await ok.out.toFloat32Array()) expect(y).toBe(1);
    disposeAll(x, ok.out, ok.lse);
  });
  it('softcap past float32, or under its smallest normal, is refused (it became infinite, or 0: off)', async () => {
    const x = t();
    for (const softcap of [1e39, 1e-46, 1e-39]) {
      await expect(flashAttention(x, x, x, { softcap })).rejects.toThrow(/flashAttention: options\.softcap must be 0 \(off\) or a finite number within float32 range/);
    }
    await expect(flashAttentionBackward(x, x, x, x, x, x, { softcap: 1e39 } as never)).rejects.toThrow(RangeError);
    const ok = await flashAttention(x, x, x, { softcap: 1.2e-38 });
    for (const y of await ok.out.toFloat32Array()) expect(y).toBe(1);
    disposeAll(x, ok.out, ok.lse);
  });
});

describe('options and arrays read once', () => {
  it('window: each bound read once; a hole is a TypeError', async () => {
    const x = Tensor.from(new Float32Array(4 * 8).fill(1), [1, 4, 1, 8]);
    await expect(flashAttention(x, x, x, { window: changing([1, 0], [-5, -5]) as unknown as [number, number] })).resolves.toBeDefined();
    // eslint-disable-next-line no-sparse-arrays
    await expect(flashAttention(x, x, x, { window: [, 1] as unknown as [number, number] })).rejects.toThrow(TypeError);
    x.dispose();
  });
  it('an option getter runs once, and its first value is the one used', async () => {
    const x = Tensor.from(new Float32Array(4 * 8).fill(1), [1, 4, 1, 8]);
    let reads = 0;
    const opts = { get softcap() { reads++; return reads === 1 ? 10 : NaN; } };
    const r = await flashAttention(x, x, x, opts);
    expect(reads).toBe(1);
    disposeAll(x, r.out, r.lse);
  });
  it('options inherited from a prototype are still options', async () => {
    const x = randomTensor(new Rng(3), [1, 6, 1, 8], 'float32').tensor;
    const plain = await flashAttention(x, x, x, { causal: true });
    const inherited = await flashAttention(x, x, x, Object.create({ causal: true }));
    expect(Array.from(await inherited.out.toFloat32Array())).toEqual(Array.from(await plain.out.toFloat32Array()));
    disposeAll(x, plain.out, plain.lse, inherited.out, inherited.lse);
  });
  it('boxed primitives are not options objects', async () => {
    const x = Tensor.from(new Float32Array(8), [1, 1, 1, 8]);
    await expect(flashAttention(x, x, x, new Number(1) as never)).rejects.toThrow(/flashAttention: options must be an object or undefined, got a Number/);
    x.dispose();
  });
  it('mergeAttention: a hole in outs is named; the tensors checked are the tensors merged', async () => {
    const o = Tensor.from(new Float32Array(8).fill(2), [1, 1, 8]), l = Tensor.from(new Float32Array(1), [1, 1]);
    // eslint-disable-next-line no-sparse-arrays
    await expect(mergeAttention([o, , ] as Tensor[], [l, l])).rejects.toThrow(/mergeAttention: outs\[1\] must be a Tensor, got undefined/);
    const wrong = Tensor.from(new Float32Array(1), [1, 1, 1]);
    const outs: Tensor[] = [o, o];
    let reads = 0;
    Object.defineProperty(outs, 1, { get: () => (reads++ === 0 ? o : wrong) });
    const r = await mergeAttention(outs, [l, l]);
    expect(Array.from(await r.out.toFloat32Array())).toEqual(new Array(8).fill(2));
    disposeAll(o, l, wrong, r.out, r.lse);
  });
});

describe('synchronize() / emptyCache() without an argument', () => {
  it.skipIf(hasGpu)("on a machine without a CUDA device they are 'cpu' (resolve once the CPU calls are done)", async () => {
    const x = randomTensor(new Rng(5), [1, 300, 2, 32], 'float32').tensor;
    let settled = false;
    const p = flashAttention(x, x, x).then((r) => { settled = true; return r; });
    await synchronize();
    expect(settled).toBe(true);
    await expect(emptyCache()).resolves.toBeUndefined();
    const r = await p;
    disposeAll(x, r.out, r.lse);
  });
});

// checkOptions reads a list marked by optionList through a compiled reader (one read site per name)
// and any other list through its loop: the two must read the same properties in the same order, once
// each, and hand the checks the same values.
describe('options lists: the compiled reader and the loop agree', () => {
  const names = ['causal', 'scale', 'window', 'softcap', 'cpu', 'out', 'lse'] as const;
  const compiled = optionList([...names] as const);
  const looped = [...names];
  // Every property read of `target` through a Proxy, in order.
  const logged = (target: object) => {
    const log: string[] = [];
    return { log, proxy: new Proxy(target, { get: (t, k, r) => { log.push(String(k)); return Reflect.get(t, k, r); } }) };
  };
  const cases: Array<[string, () => object]> = [
    ['plain', () => ({ causal: true, scale: 0.5 })],
    ['none given', () => ({})],
    ['all given', () => ({ causal: false, scale: 2, window: [1, 2], softcap: 3, cpu: { threads: 1 }, out: 1, lse: 2 })],
    ['inherited', () => Object.create({ causal: true, softcap: 5 })],
    ['non-enumerable own', () => Object.defineProperty({ scale: 1 }, 'softcap', { value: 7, enumerable: false })],
    ['undefined values', () => ({ causal: undefined, scale: 3 })],
    ['a getter', () => ({ get window() { return [4, 0]; } })],
  ];
  it.each(cases)('%s', (_, make) => {
    const a = logged(make()), b = logged(make());
    const fromCompiled = checkOptions('f', a.proxy, compiled);
    const fromLoop = checkOptions('f', b.proxy, looped);
    expect(a.log).toEqual(b.log);
    for (const n of names) expect(fromCompiled[n]).toEqual(fromLoop[n]);
    // nothing given: both hand back the one empty record
    if (names.every((n) => fromLoop[n] === undefined)) expect(fromCompiled).toBe(fromLoop);
  });
  it('an unknown option: the same TypeError from both', () => {
    const msg = (known: readonly string[]) => { try { checkOptions('f', { causel: true }, known); } catch (e) { return (e as Error).message; } return ''; };
    expect(msg(compiled)).toMatch(/f: options.causel is not an option \(did you mean options.causal\?\)/);
    expect(msg(compiled)).toBe(msg(looped));
  });
  it('the compiled reader is in use: its record has one shape, every name (undefined where absent)', () => {
    expect(Object.keys(checkOptions('f', { scale: 1 }, compiled))).toEqual([...names]);
    expect(Object.keys(checkOptions('f', { scale: 1 }, looped))).toEqual(['scale']);
  });
  it('a list with a name that is not an identifier keeps the loop', () => {
    const odd = optionList(['a-b', 'c'] as const);
    expect(checkOptions('f', { 'a-b': 1 }, odd)).toEqual({ 'a-b': 1 });
  });
});

// call() takes a call's slots as arguments (slot_args; bench alone passes one array). A recorded CPU
// call replayed through the binding computes the same result; an array where slot 0 belongs is a bad
// slot value, never read as the slot list.
describe('call() reads its slots from its arguments', () => {
  it('a recorded pagedAttention call, replayed; an array in slot 0 refused', async () => {
    const rng = new Rng(11);
    const q = randomTensor(rng, [3, 4, 16], 'float32').tensor;
    const kc = randomTensor(rng, [5, 4, 2, 16], 'float32').tensor, vc = randomTensor(rng, [5, 4, 2, 16], 'float32').tensor;
    const opts = { pageTable: Int32Array.from([4, 1, 3, 0]), seqlensK: Int32Array.from([7, 5]), cuSeqlensQ: Int32Array.from([0, 2, 3]) };
    const real = native.call;
    let seen: { op: number; P: Float64Array; slots: unknown[] } | undefined;
    native.call = ((op: number, P: Float64Array, ...slots: unknown[]) => {
      seen = { op, P: P.slice(), slots };
      return (real as (...a: unknown[]) => unknown)(op, P, ...slots);
    }) as typeof native.call;
    let r;
    try {
      r = await pagedAttention(q, kc, vc, opts);
    } finally {
      native.call = real;
    }
    expect(seen?.op).toBe(OP.paged);
    expect(seen!.slots.length).toBe(20);
    expect(seen!.slots.slice(0, seen!.P[F.slot_count]).every((v) => v !== undefined)).toBe(true);  // dense: null where absent
    const slots = [...seen!.slots];
    const out = new Float32Array(3 * 4 * 16), lse = new Float32Array(4 * 3);
    slots[S.out] = out;
    slots[S.lse] = lse;
    const replay = native.call as unknown as (...a: unknown[]) => Promise<void>;
    await replay(OP.paged, seen!.P, ...slots);
    expect(Array.from(out)).toEqual(Array.from(await r.out.toFloat32Array()));
    expect(Array.from(lse)).toEqual(Array.from(await r.lse.toFloat32Array()));
    expect(() => replay(OP.paged, seen!.P, slots)).toThrow(/internal: q must be a host typed array/);
    disposeAll(q, kc, vc, r.out, r.lse);
  });
  it('a name every object inherits cannot be an option list entry', () => {
    expect(() => optionList(['causal', 'toString'] as const)).toThrow(/'toString' is an Object.prototype member/);
  });
});

describe('the shared mask records equal the checked ones', () => {
  it.each([8, 64, 128, 256])('D %i: no mask option, causal alone', (D) => {
    const s = 1 / Math.sqrt(D);
    expect({ ...checkMask('f', {}, D) }).toEqual({ ...checkMask('f', { scale: s }, D) });
    expect({ ...checkMask('f', { causal: true }, D) }).toEqual({ ...checkMask('f', { causal: true, scale: s }, D) });
    expect({ ...checkMask('f', { causal: false }, D) }).toEqual({ ...checkMask('f', { scale: s }, D) });
    expect(checkMask('f', { causal: true }, D)).toBe(checkMask('f', { causal: true }, D));
  });
});

// The binding's own checks of what call() is given (lib/ never passes these: they are the second line,
// behind the TypeScript checks): recorded CPU calls replayed with slots of the wrong kind or size and
// with odd slot counts must throw or reject, never crash the process or write past an array.
describe('call(): slots of the wrong kind or size are refused by the binding', () => {
  it('400 mutated replays of recorded forward, pagedAttention and appendKV calls', async () => {
    const rng = new Rng(21);
    const rand = (n: number) => Math.floor(rng.uniform() * n);
    const q = randomTensor(rng, [1, 5, 2, 8], 'float32').tensor, kv = randomTensor(rng, [1, 5, 1, 8], 'float32').tensor;
    const pq = randomTensor(rng, [2, 2, 8], 'float32').tensor;
    const kc = randomTensor(rng, [3, 4, 1, 8], 'float32').tensor, vc = randomTensor(rng, [3, 4, 1, 8], 'float32').tensor;
    const nk = randomTensor(rng, [2, 1, 8], 'float32').tensor;
    const idx = { pageTable: Int32Array.from([2, 0]), cuSeqlensQ: Int32Array.from([0, 1, 2]) };
    const recorded: Array<{ op: number; P: Float64Array; slots: unknown[] }> = [];
    const real = native.call;
    native.call = ((op: number, P: Float64Array, ...slots: unknown[]) => {
      recorded.push({ op, P: P.slice(), slots });
      return (real as (...a: unknown[]) => unknown)(op, P, ...slots);
    }) as typeof native.call;
    const made: Tensor[] = [];
    try {
      const f = await flashAttention(q, kv, kv);
      const p = await pagedAttention(pq, kc, vc, { ...idx, seqlensK: Int32Array.from([3, 4]) });
      await appendKV(kc, vc, nk, nk, { pageTable: idx.pageTable, cuSeqlensNew: Int32Array.from([0, 1, 2]), seqlensBefore: Int32Array.from([2, 3]) });
      made.push(f.out, f.lse, p.out, p.lse);
    } finally {
      native.call = real;
    }
    expect(recorded.map((r) => r.op)).toEqual([OP.forward, OP.paged, OP.append_kv]);
    const junk: Array<() => unknown> = [
      () => undefined, () => null, () => 0, () => 'q', () => ({}), () => [], () => [new Float32Array(4)], () => () => 1,
      () => Symbol('s'), () => 1n, () => true, () => new Float32Array(1), () => new Int32Array(0), () => new Uint8Array(3),
      () => new Float64Array(2), () => new DataView(new ArrayBuffer(8)),
    ];
    const call = real as unknown as (...a: unknown[]) => unknown;
    let refused = 0, ran = 0;
    for (let it = 0; it < 400; it++) {
      const r = recorded[it % recorded.length];
      const P = r.P.slice();
      // fresh outputs of the recorded sizes (the recorded ones stay as computed)
      const slots = r.slots.map((v) => (v instanceof Float32Array ? new Float32Array(v.length) : v instanceof Int32Array ? Int32Array.from(v) : v));
      const m = 1 + rand(3);
      for (let j = 0; j < m; j++) slots[rand(20)] = junk[rand(junk.length)]();
      if (rand(8) === 0) P[F.slot_count] = [-5, 0, 3, 25, NaN, 1e10][rand(6)];
      try {
        await call(r.op, P, ...slots);
        ran++;
      } catch (e) {
        expect(e).toBeInstanceOf(Error);
        refused++;
      }
    }
    expect(refused).toBeGreaterThan(100);
    expect(ran).toBeGreaterThan(0);  // (junk in slots a call does not read, or nulls where a slot is optional)
    disposeAll(q, kv, pq, kc, vc, nk, ...made);
  });
});
