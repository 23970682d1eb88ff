// CPU-backend calls that share tensors run in call order on their thread, as a GPU stream runs its
// calls (forty-fifth session): code written for the GPU's model (later calls made without awaiting
// earlier ones) gets the same results on the CPU backend; calls on disjoint tensors do not wait, nor
// do calls that only read the same tensors (forty-sixth session).
// Before, CPU calls ran concurrently and such code read half-written caches and outputs without an
// error. Each case compares the un-awaited chain with
// the same calls awaited one by one (the CPU backend is deterministic: bit for bit).
import { describe, expect, it } from 'vitest';
import {
  Tensor, appendKV, flashAttention, flashAttentionVarlen, pagedAttention, synchronize,
} from '../../lib/index';
import { Rng, randomTensor } from '../helpers/reference';

const tensor = (shape: number[], seed: number, dtype: 'float32' | 'float16' = 'float32') =>
  randomTensor(new Rng(seed), shape, dtype).tensor;
const bits = async (t: Tensor) => t.toTypedArray();
/** The number of elements in which two results differ (0: bit-identical), or -1 for different lengths. */
const differing = (a: ArrayLike<number>, b: ArrayLike<number>) => {
  if (a.length !== b.length) return -1;
  let n = 0;
  for (let i = 0; i < a.length; i++) if (!Object.is(a[i], b[i])) n++;
  return n;
};

// [1, 512, 8, 64]: ~270 M multiply-adds, far above the inline limit, so the call runs on a worker
// (before the change, 7 of 10 chained calls of this size read a half-written tensor).
const S = [1, 512, 8, 64];

describe('CPU calls in call order', () => {
  it('a call reading an `out` that an un-awaited call writes sees it written', async () => {
    const [q, k, v] = [tensor(S, 1), tensor(S, 2), tensor(S, 3)];
    // awaited
    const x1 = await Tensor.empty(S);
    await flashAttention(q, k, v, { out: x1 });
    const ref = await flashAttention(x1, k, v, { causal: true });
    // not awaited (three times)
    for (let i = 0; i < 3; i++) {
      const x2 = await Tensor.empty(S);
      const first = flashAttention(q, k, v, { out: x2 });
      const second = flashAttention(x2, k, v, { causal: true });
      const [, got] = await Promise.all([first, second]);
      expect(differing(await bits(got.out), await bits(ref.out))).toBe(0);
    }
  });

  it('appendKV followed by pagedAttention without awaiting reads the appended keys', async () => {
    // a prefill of 2560 tokens appended (on a worker), then a decode step over them
    const H = 8, Hkv = 4, D = 64, page = 16, pages = 170, T = 2560;
    const table = Int32Array.from({ length: 160 }, (_, i) => (i * 7) % pages);
    const kn = tensor([T, Hkv, D], 4), vn = tensor([T, Hkv, D], 5), q = tensor([1, H, D], 6);
    const append = { pageTable: table, cuSeqlensNew: Int32Array.from([0, T]), seqlensBefore: Int32Array.from([0]) };
    const decode = { pageTable: table, seqlensK: Int32Array.from([T]), cuSeqlensQ: Int32Array.from([0, 1]) };
    const run = async (awaitEach: boolean) => {
      const kc = await Tensor.zeros([pages, page, Hkv, D]), vc = await Tensor.zeros([pages, page, Hkv, D]);
      const a = appendKV(kc, vc, kn, vn, append);
      if (awaitEach) await a;
      const r = pagedAttention(q, kc, vc, decode);
      await a;
      return bits((await r).out);
    };
    const ref = await run(true);
    for (let i = 0; i < 3; i++) expect(differing(await run(false), ref)).toBe(0);
  });

  it('calls reading one cache run side by side; an appendKV into it waits for them, and a read after it sees it', async () => {
    const H = 8, Hkv = 4, D = 64, page = 16, pages = 170, T = 2048;
    const table = Int32Array.from({ length: 160 }, (_, i) => (i * 11) % pages);
    const kc = await Tensor.zeros([pages, page, Hkv, D]), vc = await Tensor.zeros([pages, page, Hkv, D]);
    const fill = { pageTable: table, cuSeqlensNew: Int32Array.from([0, T]), seqlensBefore: Int32Array.from([0]) };
    await appendKV(kc, vc, tensor([T, Hkv, D], 60), tensor([T, Hkv, D], 61), fill);
    // a prefill chunk of 512 queries (on a worker); a decode step of one query over the first 100
    // tokens (a page table of 8 pages: little enough work to run on this thread, so it settles
    // before the prefill can, unless it waited for it); then 16 more tokens appended and a decode
    // step over all of them (on a worker)
    const qp = tensor([512, H, D], 62), qd = tensor([1, H, D], 63);
    const kn = tensor([16, Hkv, D], 64), vn = tensor([16, Hkv, D], 65);
    const prefill = { pageTable: table, seqlensK: Int32Array.from([T]), cuSeqlensQ: Int32Array.from([0, 512]), causal: true };
    const decode = (n: number) => ({ pageTable: table, seqlensK: Int32Array.from([n]), cuSeqlensQ: Int32Array.from([0, 1]) });
    const short = { pageTable: table.slice(0, 8), seqlensK: Int32Array.from([100]), cuSeqlensQ: Int32Array.from([0, 1]) };
    const more = { pageTable: table, cuSeqlensNew: Int32Array.from([0, 16]), seqlensBefore: Int32Array.from([T]) };
    // awaited one by one
    const refP = await pagedAttention(qp, kc, vc, prefill);
    const refD = await pagedAttention(qd, kc, vc, short);
    const kc2 = await kc.to('cpu'), vc2 = await vc.to('cpu');
    await appendKV(kc2, vc2, kn, vn, more);
    const refAfter = await pagedAttention(qd, kc2, vc2, decode(T + 16));
    // not awaited
    const order: string[] = [];
    const p = pagedAttention(qp, kc, vc, prefill).then((r) => { order.push('prefill'); return r; });
    const d = pagedAttention(qd, kc, vc, short).then((r) => { order.push('decode'); return r; });
    const a = appendKV(kc, vc, kn, vn, more).then(() => order.push('append'));
    const d2 = pagedAttention(qd, kc, vc, decode(T + 16)).then((r) => { order.push('decode2'); return r; });
    const [rp, rd, , rd2] = await Promise.all([p, d, a, d2]);
    expect(order).toEqual(['decode', 'prefill', 'append', 'decode2']);
    expect(differing(await bits(rp.out), await bits(refP.out))).toBe(0);
    expect(differing(await bits(rd.out), await bits(refD.out))).toBe(0);
    expect(differing(await bits(rd2.out), await bits(refAfter.out))).toBe(0);
  });

  it('a host read during a call that writes the tensor returns the finished result', async () => {
    const [q, k, v] = [tensor(S, 7), tensor(S, 8), tensor(S, 9)];
    const ref = await flashAttention(q, k, v);
    const x = await Tensor.empty(S);
    const call = flashAttention(q, k, v, { out: x });
    const read = x.toTypedArray();   // made after the call: waits for it
    expect(differing(await read, await bits(ref.out))).toBe(0);
    await call;
    // Tensor.to from the host likewise waits (to 'cpu': a copy)
    const y = await Tensor.empty(S);
    const call2 = flashAttention(q, k, v, { out: y, causal: true });
    const copy = await y.to('cpu');
    await call2;
    expect(differing(await bits(copy), await bits(y))).toBe(0);
  });

  it('a host read made before a write returns the data from before it', async () => {
    const T = [1, 4, 2, 8];
    const mk = (seed: number) => Tensor.from(Float32Array.from({ length: 64 }, (_, i) => Math.sin(i * seed)), T);
    const [q, k, v, q2] = [mk(1), mk(2), mk(3), mk(5)];
    for (const read of ['to', 'toTypedArray'] as const) {
      const t = await Tensor.zeros(T);
      const busy = flashAttention(q, k, v);  // a call made before (small: it runs on this thread)
      const r = read === 'to' ? t.to('cpu').then((c) => c.toTypedArray()) : t.toTypedArray();  // made first
      // made second, after the queue may have drained (two microtasks on)
      const w = (async () => { await null; await null; await flashAttention(q2, k, v, { out: t }); })();
      const got = await r;
      await Promise.all([busy, w]);
      expect(Array.from(got).every((x) => x === 0)).toBe(true);
      expect(Array.from(await t.toTypedArray()).some((x) => x !== 0)).toBe(true);
    }
    [q, k, v, q2].forEach((x) => x.dispose());
  });

  it('two un-awaited calls writing the same `out` leave the second one\'s result', async () => {
    const [q, k, v] = [tensor(S, 10), tensor(S, 11), tensor(S, 12)];
    const refSecond = await flashAttention(q, k, v, { causal: true, window: [32, 0] });
    for (let i = 0; i < 3; i++) {
      const x = await Tensor.empty(S);
      const a = flashAttention(q, k, v, { out: x });
      const b = flashAttention(q, k, v, { out: x, causal: true, window: [32, 0] });
      await Promise.all([a, b]);
      expect(differing(await bits(x), await bits(refSecond.out))).toBe(0);
    }
  });

  it('a queued call uses its index arrays as they were when it was made', async () => {
    const H = 2, D = 32, lens = [200, 56];
    const total = 256;
    const [q, k, v] = [tensor([total, H, D], 13), tensor([total, H, D], 14), tensor([total, H, D], 15)];
    const cu = Int32Array.from([0, 200, 256]);
    const ref = await flashAttentionVarlen(q, k, v, { cuSeqlensQ: cu, cuSeqlensK: cu, maxSeqlenQ: 200, maxSeqlenK: 200, causal: true });
    // writing the same out: the next call waits behind it (and so takes its copies)
    const x = await Tensor.empty([total, H, D]);
    const busy = flashAttentionVarlen(q, k, v, { cuSeqlensQ: cu, cuSeqlensK: cu, maxSeqlenQ: 200, maxSeqlenK: 200, out: x });
    const mine = Int32Array.from(cu);
    const queued = flashAttentionVarlen(q, k, v, { cuSeqlensQ: mine, cuSeqlensK: mine, maxSeqlenQ: 200, maxSeqlenK: 200, causal: true, out: x });
    mine.set([0, 56, 256]);                   // the caller reuses its array at once
    await Promise.all([busy, queued]);
    expect(differing(await bits(x), await bits(ref.out))).toBe(0);
    expect(lens[0] + lens[1]).toBe(total);
  });

  it('calls on disjoint tensors, or only reading the same ones, do not wait for each other; a write waits for the reads before it', async () => {
    const [q, k, v] = [tensor(S, 40), tensor(S, 41), tensor(S, 42)];
    const small = [1, 4, 2, 8];
    const [a, b, c] = [tensor(small, 43), tensor(small, 44), tensor(small, 45)];
    const order: string[] = [];
    const large = flashAttention(q, k, v).then(() => order.push('large'));   // on a worker
    const tiny = flashAttention(a, b, c).then(() => order.push('small'));    // other tensors: starts at once
    await Promise.all([large, tiny]);
    expect(order).toEqual(['small', 'large']);
    // a decode-sized call (on this thread) reading the large call's k / v: both only read them, so it does not wait
    order.length = 0;
    const large2 = flashAttention(q, k, v).then(() => order.push('large'));
    const reader = flashAttention(tensor([1, 1, 8, 64], 46), k, v).then(() => order.push('small'));
    await Promise.all([large2, reader]);
    expect(order).toEqual(['small', 'large']);
    // a small call (one key: it runs on this thread) writing into the q that the large call reads
    // waits for it, and the large call reads q as it was
    const ref = await flashAttention(q, k, v);
    order.length = 0;
    const large3 = flashAttention(q, k, v).then((r) => { order.push('large'); return r; });
    const writer = flashAttention(tensor(S, 47), tensor([1, 1, 8, 64], 48), tensor([1, 1, 8, 64], 49), { out: q })
      .then(() => order.push('writer'));
    const [r3] = await Promise.all([large3, writer]);
    expect(order).toEqual(['large', 'writer']);
    expect(differing(await bits(r3.out), await bits(ref.out))).toBe(0);
  });

  it('calls settle in call order; a small call behind a large one waits for it; a refused call rejects alone', async () => {
    const [q, k, v] = [tensor(S, 19, 'float16'), tensor(S, 20, 'float16'), tensor(S, 21, 'float16')];
    const order: number[] = [];
    const x = await Tensor.empty(S, { dtype: 'float16' });
    const calls = [
      flashAttention(q, k, v, { out: x }).then((r) => { order.push(0); return r; }),
      // reading x: waits for call 0
      flashAttention(x, k, v).then((r) => { order.push(1); return r; }),
      // writing x: waits for call 1's read (and call 0's write)
      flashAttention(q, k, v, { causal: true, out: x }).then((r) => { order.push(2); return r; }),
    ];
    const [, r1] = await Promise.all(calls);
    expect(order).toEqual([0, 1, 2]);
    const ref1 = await flashAttention(await flashAttention(q, k, v).then((r) => r.out), k, v);
    expect(differing(await bits(r1.out), await bits(ref1.out))).toBe(0);
    const ref2 = await flashAttention(q, k, v, { causal: true });
    expect(differing(await bits(x), await bits(ref2.out))).toBe(0);

    // a call refused by its checks between two queued ones rejects alone; the queue goes on
    const good1 = flashAttention(q, k, v);
    const bad = flashAttention(q, k, v, { window: [-2, 0] });
    const good2 = flashAttention(q, k, v, { causal: true });
    await expect(bad).rejects.toBeInstanceOf(RangeError);
    const [g1, g2] = await Promise.all([good1, good2]);
    expect(differing(await bits(g1.out), await bits((await flashAttention(q, k, v)).out))).toBe(0);
    expect(g2.out.shape).toEqual(S);
    await synchronize('cpu');
  });
});
