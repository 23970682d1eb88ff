// CUDA device tensors: upload/download round trips (raw bits), GPU-to-GPU copies, zeros on the
// device, dispose semantics, memory actually freed by dispose, out-of-memory handling (the Promise
// rejects with the CUDA error name and the next call works), and the CUDA-specific argument errors
// (head dims that are not multiples of 8, inputs on different devices).
// Skipped (visibly) without a CUDA device; fails under FA_REQUIRE_GPU=1 when there is none.
import { expect, it } from 'vitest';
import { Tensor, devices, flashAttention, flashAttentionBackward } from '../../lib/index';
import {
  AttnDims,
  DType,
  Rng,
  bytesEqual,
  defaultScale,
  describeGpu,
  disposeAll,
  randomTensor,
  rawBytes,
  refForward,
  relL2,
  toF64,
} from '../helpers/reference';

async function expectRejection(p: Promise<unknown>, cls: typeof Error, ...patterns: Array<RegExp | string>): Promise<Error> {
  let err: unknown;
  try {
    await p;
  } catch (e) {
    err = e;
  }
  expect(err, 'expected a rejection').toBeInstanceOf(cls);
  for (const pat of patterns) {
    if (typeof pat === 'string') expect((err as Error).message).toContain(pat);
    else expect((err as Error).message).toMatch(pat);
  }
  return err as Error;
}

describeGpu('CUDA device tensors', () => {
  it('devices() describes at least one GPU', () => {
    const list = devices();
    expect(list.length).toBeGreaterThan(0);
    expect(list[0].index).toBe(0);
    expect(list[0].totalMemory).toBeGreaterThan(1e9);
  });

  for (const dtype of ['float32', 'float16', 'bfloat16'] as DType[]) {
    it(`${dtype}: to('cuda') and back preserves every bit; cuda -> cuda copies too`, async () => {
      const rng = new Rng(dtype.length);
      const n = 3 * 1001 * 7;
      let host: Tensor;
      if (dtype === 'float32') {
        const bits = new Uint32Array(n);
        for (let i = 0; i < n; i++) bits[i] = rng.uint32();
        host = Tensor.from(new Float32Array(bits.buffer), [3, 1001, 7]);
      } else {
        const bits = new Uint16Array(n);
        for (let i = 0; i < n; i++) bits[i] = rng.int(0, 65535);
        host = Tensor.from(bits, [3, 1001, 7], { dtype });
      }
      const want = await rawBytes(host);
      const d = await host.to('cuda');
      expect(d.device).toBe('cuda:0');
      expect(d.shape).toEqual([3, 1001, 7]);
      expect(d.dtype).toBe(dtype);
      expect(bytesEqual(await rawBytes(d), want)).toBe(true);
      const d2 = await d.to('cuda:0');
      expect(d2).not.toBe(d);
      expect(d2.device).toBe('cuda:0');
      expect(bytesEqual(await rawBytes(d2), want)).toBe(true);
      const back = await d2.to('cpu');
      expect(back.device).toBe('cpu');
      expect(bytesEqual(await rawBytes(back), want)).toBe(true);
      // toFloat32Array of the device tensor equals the host widening
      const a = await d.toFloat32Array();
      const b = await host.toFloat32Array();
      expect(bytesEqual(new Uint8Array(a.buffer, a.byteOffset, a.byteLength), new Uint8Array(b.buffer, b.byteOffset, b.byteLength))).toBe(true);
      // the copies are independent
      d.dispose();
      expect(bytesEqual(await rawBytes(d2), want)).toBe(true);
      disposeAll(host, d2, back);
    });
  }

  it("'cuda' means 'cuda:0'", async () => {
    const t = Tensor.from(new Float32Array([1, 2, 3]), [3]);
    const a = await t.to('cuda');
    const b = await t.to('cuda:0');
    expect(a.device).toBe('cuda:0');
    expect(b.device).toBe('cuda:0');
    disposeAll(t, a, b);
  });

  for (const dtype of ['float32', 'float16', 'bfloat16'] as DType[]) {
    it(`${dtype}: Tensor.zeros on the device`, async () => {
      const z = await Tensor.zeros([4, 33, 3, 8], { dtype, device: 'cuda' });
      expect(z.device).toBe('cuda:0');
      expect(z.shape).toEqual([4, 33, 3, 8]);
      expect(z.dtype).toBe(dtype);
      const raw = await rawBytes(z);
      expect(raw.length).toBe(4 * 33 * 3 * 8 * (dtype === 'float32' ? 4 : 2));
      expect(raw.every((b) => b === 0)).toBe(true);
      z.dispose();
    });
  }

  it('dispose: disposed is set, later use throws/rejects TypeError, double dispose is harmless', async () => {
    const d = await Tensor.from(new Float32Array(64), [1, 8, 1, 8]).to('cuda');
    expect(d.disposed).toBe(false);
    d.dispose();
    expect(d.disposed).toBe(true);
    expect(() => d.dispose()).not.toThrow();
    for (const use of [() => d.toFloat32Array(), () => d.toTypedArray(), () => d.to('cpu'), () => d.to('cuda')]) {
      let err: unknown;
      try {
        await use();
      } catch (e) {
        err = e;
      }
      expect(err).toBeInstanceOf(TypeError);
      expect((err as Error).message).toMatch(/disposed/);
    }
    const k = await Tensor.from(new Float32Array(64), [1, 8, 1, 8]).to('cuda');
    await expectRejection(flashAttention(d, k, k), TypeError, /^flashAttention\b/, /\bq is disposed/);
    k.dispose();
  });

  it('dispose frees device memory: 40 x 4 GiB allocations in turn (160 GiB, more than the GPU) succeed', async () => {
    for (let i = 0; i < 40; i++) {
      const t = await Tensor.zeros([2 ** 30], { dtype: 'float32', device: 'cuda' });
      expect(t.device).toBe('cuda:0');
      t.dispose();
    }
  });

  it('absurd sizes on the device are rejected before allocating (RangeError naming shape)', async () => {
    await expectRejection(Tensor.zeros([65536, 65536, 1, 1], { device: 'cuda' }), RangeError, /^Tensor\.zeros\b/, 'shape');
    await expectRejection(Tensor.zeros([2 ** 20, 2 ** 14, 16, 1], { dtype: 'float32', device: 'cuda' }), RangeError, 'shape');
  });

  it('out of memory: the allocation rejects with cudaErrorMemoryAllocation and the next call works', async () => {
    // Largest single tensor is 2^31-1 elements (8 GiB in float32), so exhaust the GPU with 4 GiB
    // tensors: up to 64 of them (256 GiB) - far more than any single GPU has.
    const held: Tensor[] = [];
    let err: unknown;
    try {
      for (let i = 0; i < 64 && err === undefined; i++) {
        try {
          held.push(await Tensor.zeros([2 ** 30], { dtype: 'float32', device: 'cuda' }));
        } catch (e) {
          err = e;
        }
      }
    } finally {
      disposeAll(...held);
    }
    expect(err, `no allocation failed after ${held.length} x 4 GiB`).toBeInstanceOf(Error);
    expect(err).not.toBeInstanceOf(TypeError);
    expect(err).not.toBeInstanceOf(RangeError);
    expect((err as Error).message).toContain('cudaErrorMemoryAllocation');
    // The process survives, memory comes back, and work continues correctly.
    const again = await Tensor.zeros([2 ** 30], { dtype: 'float32', device: 'cuda' });
    again.dispose();
    const rng = new Rng(99);
    const d: AttnDims = { B: 1, Nq: 37, Nk: 53, H: 2, Hkv: 1, D: 64, causal: true, scale: defaultScale(64), layout: 'bshd' };
    const q = randomTensor(rng, [1, 37, 2, 64], 'float32');
    const k = randomTensor(rng, [1, 53, 1, 64], 'float32');
    const v = randomTensor(rng, [1, 53, 1, 64], 'float32');
    const [qd, kd, vd] = await Promise.all([q.tensor.to('cuda'), k.tensor.to('cuda'), v.tensor.to('cuda')]);
    const r = await flashAttention(qd, kd, vd, { causal: true });
    const ref = refForward(q.values, k.values, v.values, d);
    expect(relL2(await toF64(r.out), ref.out)).toBeLessThan(1e-5);
    disposeAll(qd, kd, vd, r.out, r.lse, q.tensor, k.tensor, v.tensor);
  });
});

describeGpu('CUDA argument errors', () => {
  it('head dims that are not multiples of 8 are rejected for CUDA inputs (RangeError naming headDim)', async () => {
    for (const D of [4, 12, 36, 100, 129, 255]) {
      for (const dtype of ['float16', 'bfloat16', 'float32'] as DType[]) {
        const rng = new Rng(D);
        const q = await randomTensor(rng, [1, 16, 2, D], dtype).tensor.to('cuda');
        const k = await randomTensor(rng, [1, 16, 2, D], dtype).tensor.to('cuda');
        const err = await expectRejection(flashAttention(q, k, k), RangeError, /^flashAttention\b/, /headDim/, new RegExp(`(^|[^0-9])${D}(?![0-9])`));
        expect(err.message).toContain('q.shape[3]');
        disposeAll(q, k);
      }
    }
  });

  it('inputs on different devices -> TypeError naming the argument and both devices', async () => {
    const rng = new Rng(5);
    const hq = randomTensor(rng, [1, 8, 2, 64], 'float16').tensor;
    const hk = randomTensor(rng, [1, 8, 1, 64], 'float16').tensor;
    const [dq, dk] = await Promise.all([hq.to('cuda'), hk.to('cuda')]);
    await expectRejection(flashAttention(dq, hk, dk), TypeError, /^flashAttention\b/, 'k', 'cuda:0', 'cpu');
    await expectRejection(flashAttention(dq, dk, hk), TypeError, /^flashAttention\b/, 'v', 'cuda:0', 'cpu');
    await expectRejection(flashAttention(hq, dk, dk), TypeError, /^flashAttention\b/, 'k', 'cuda:0', 'cpu');
    const f = await flashAttention(dq, dk, dk);
    const hlse = await f.lse.to('cpu');
    const hout = await f.out.to('cpu');
    await expectRejection(flashAttentionBackward(hq, dq, dk, dk, f.out, f.lse), TypeError, /^flashAttentionBackward\b/, 'dout', 'cuda:0', 'cpu');
    await expectRejection(flashAttentionBackward(dq, dq, dk, dk, hout, f.lse), TypeError, /^flashAttentionBackward\b/, 'out', 'cuda:0', 'cpu');
    await expectRejection(flashAttentionBackward(dq, dq, dk, dk, f.out, hlse), TypeError, /^flashAttentionBackward\b/, 'lse', 'cuda:0', 'cpu');
    disposeAll(hq, hk, dq, dk, f.out, f.lse, hlse, hout);
  });

  it('an index past the last device is a RangeError naming device', async () => {
    const t = Tensor.from(new Float32Array(4), [4]);
    const bad = `cuda:${devices().length}`;
    await expectRejection(t.to(bad as 'cuda'), RangeError, 'device', bad);
    await expectRejection(Tensor.zeros([4], { device: bad as 'cuda' }), RangeError, 'device', bad);
    t.dispose();
  });
});
