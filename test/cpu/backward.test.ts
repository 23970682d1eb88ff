// CPU backward (dq, dk, dv, softmaxD) against the float64 reference: 140 random shapes plus
// handpicked edge cases, the worked example with blocks of 2, D checked directly, finite-difference
// spot checks, bit-identity across thread counts, zero gradients for rows that see no key.
// Accuracy rules: test/helpers/harness.ts.
import { describe, expect, it } from 'vitest';
import { Tensor, flashAttention, flashAttentionBackward } from '../../lib/index';
import {
  AttnCase,
  Checker,
  caseName,
  checkBackwardCase,
  checkFp32,
  checkSoftmaxD,
  randomCases,
} from '../helpers/harness';
import {
  AttnDims,
  Rng,
  bytesEqual,
  defaultScale,
  disposeAll,
  fmt,
  randomTensor,
  rawBytes,
  refBackward,
  relL2,
  rowOffset,
  toF64,
} from '../helpers/reference';
import { CPU_BIG_NS, CPU_DS, CPU_NS } from './shapes';

function c(p: Partial<AttnCase> & Pick<AttnCase, 'Nq' | 'Nk' | 'D' | 'dtype'>, seed: number): AttnCase {
  return { B: 1, H: 1, Hkv: 1, causal: false, layout: 'bshd', seed, returnSoftmaxD: true, ...p };
}

const HANDPICKED: AttnCase[] = [
  c({ Nq: 1, Nk: 1, D: 1, dtype: 'float32' }, 101), // exact gradients dq = dk = 0 (P = 1)
  c({ Nq: 5, Nk: 1, D: 8, dtype: 'float16', H: 2, Hkv: 1 }, 102),
  c({ Nq: 129, Nk: 7, D: 32, dtype: 'float32', causal: true, H: 2, Hkv: 1 }, 103), // rows without keys
  c({ Nq: 129, Nk: 7, D: 24, dtype: 'bfloat16', causal: true, layout: 'bhsd' }, 104),
  c({ Nq: 7, Nk: 129, D: 64, dtype: 'float16', causal: true, H: 3, Hkv: 3 }, 105),
  c({ Nq: 33, Nk: 33, D: 64, dtype: 'bfloat16', H: 8, Hkv: 1 }, 106), // MQA: dk/dv sum 8 heads
  c({ Nq: 127, Nk: 127, D: 40, dtype: 'float16', causal: true, H: 6, Hkv: 2, B: 2 }, 107),
  c({ Nq: 65, Nk: 64, D: 256, dtype: 'float32', layout: 'bhsd', H: 2, Hkv: 2 }, 108),
  c({ Nq: 31, Nk: 17, D: 255, dtype: 'bfloat16', causal: true }, 109),
  c({ Nq: 129, Nk: 129, D: 129, dtype: 'float16', causal: true, cpu: { blockM: 2, blockN: 2 } }, 110),
  c({ Nq: 100, Nk: 100, D: 33, dtype: 'float32', scale: 0.3, cpu: { blockM: 7, blockN: 5 } }, 111),
  c({ Nq: 257, Nk: 300, D: 64, dtype: 'float32', causal: true, H: 2, Hkv: 1 }, 112),
  c({ Nq: 2, Nk: 3, D: 2, dtype: 'float32', returnSoftmaxD: false, cpu: { blockM: 1, blockN: 1, threads: 1 } }, 113),
  c({ Nq: 200, Nk: 100, D: 128, dtype: 'bfloat16', H: 4, Hkv: 2, layout: 'bhsd' }, 114),
];

const RANDOM = randomCases({
  seed: 2002,
  count: 140,
  Ns: CPU_NS,
  Ds: CPU_DS,
  budget: 1.5e6,
  bigEvery: 22,
  bigNs: CPU_BIG_NS,
  bigBudget: 1e7,
  cpuOptions: true,
});

describe('CPU backward: handpicked shapes vs float64', () => {
  for (const tc of HANDPICKED) it(caseName(tc), () => checkBackwardCase(tc, 'cpu'));
});

describe('CPU backward: 140 random shapes vs float64', () => {
  it('the random set covers the required features', () => {
    const has = (f: (x: AttnCase) => boolean) => RANDOM.some(f);
    expect(RANDOM.length).toBeGreaterThanOrEqual(100);
    for (const dt of ['float32', 'float16', 'bfloat16']) expect(has((x) => x.dtype === dt)).toBe(true);
    expect(has((x) => x.layout === 'bhsd')).toBe(true);
    expect(has((x) => x.causal && x.Nq > x.Nk)).toBe(true);
    expect(has((x) => x.causal && x.Nq < x.Nk)).toBe(true);
    expect(has((x) => x.Hkv === 1 && x.H > 1)).toBe(true);
    expect(has((x) => x.Hkv > 1 && x.H > x.Hkv)).toBe(true);
    expect(has((x) => x.D % 2 === 1 && x.D > 1)).toBe(true);
    expect(has((x) => x.D >= 200)).toBe(true);
    expect(has((x) => x.scale !== undefined)).toBe(true);
    expect(has((x) => !!x.returnSoftmaxD) && has((x) => !x.returnSoftmaxD)).toBe(true);
  });
  for (const tc of RANDOM) it(caseName(tc), () => checkBackwardCase(tc, 'cpu'));
});

interface Grads {
  dq: Float64Array;
  dk: Float64Array;
  dv: Float64Array;
  D?: Float64Array;
  out: Float64Array;
  bytes: Uint8Array[];
}

async function grads(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  dout: Tensor,
  opts: Record<string, unknown>,
  bopts: Record<string, unknown> = {},
): Promise<Grads> {
  const f = await flashAttention(q, k, v, opts);
  const g = await flashAttentionBackward(dout, q, k, v, f.out, f.lse, { ...opts, ...bopts });
  try {
    const r: Grads = {
      dq: await toF64(g.dq),
      dk: await toF64(g.dk),
      dv: await toF64(g.dv),
      out: await toF64(f.out),
      bytes: [await rawBytes(g.dq), await rawBytes(g.dk), await rawBytes(g.dv)],
    };
    if (g.softmaxD) {
      r.D = await toF64(g.softmaxD);
      r.bytes.push(await rawBytes(g.softmaxD));
    }
    return r;
  } finally {
    disposeAll(f.out, f.lse, g.dq, g.dk, g.dv, g.softmaxD);
  }
}

describe('worked example of the reference text (N=8, d=128, blocks of 2, one head)', () => {
  for (const causal of [false, true]) {
    it(`backward with blocks 2x2 equals the float64 reference and the default-block result${causal ? ' (causal)' : ''}`, async () => {
      const d: AttnDims = { B: 1, Nq: 8, Nk: 8, H: 1, Hkv: 1, D: 128, causal, scale: defaultScale(128), layout: 'bshd' };
      const rng = new Rng(8128);
      const q = randomTensor(rng, [1, 8, 1, 128], 'float32');
      const k = randomTensor(rng, [1, 8, 1, 128], 'float32');
      const v = randomTensor(rng, [1, 8, 1, 128], 'float32');
      const dout = randomTensor(rng, [1, 8, 1, 128], 'float32');
      try {
        const ref = refBackward(q.values, k.values, v.values, dout.values, d);
        const tiled = await grads(q.tensor, k.tensor, v.tensor, dout.tensor, { causal, cpu: { blockM: 2, blockN: 2 } }, { returnSoftmaxD: true });
        const dflt = await grads(q.tensor, k.tensor, v.tensor, dout.tensor, { causal }, { returnSoftmaxD: true });
        const ck = new Checker('worked example backward');
        for (const [name, g] of [['blocks 2x2', tiled], ['default blocks', dflt]] as const) {
          checkFp32(ck, `dq (${name})`, g.dq, ref.dq, { values: ref.dqMag, terms: 8 + 128 });
          checkFp32(ck, `dk (${name})`, g.dk, ref.dk, { values: ref.dkMag, terms: 8 + 128 });
          checkFp32(ck, `dv (${name})`, g.dv, ref.dv, { values: ref.dvMag, terms: 8 });
          checkFp32(ck, `softmaxD (${name})`, g.D as Float64Array, ref.softmaxD);
        }
        for (const n of ['dq', 'dk', 'dv'] as const) {
          ck.le(`${n}: blocks 2x2 vs default, relative L2`, relL2(tiled[n], dflt[n]), 2e-6);
        }
        ck.done();
      } finally {
        disposeAll(q.tensor, k.tensor, v.tensor, dout.tensor);
      }
    });
  }
});

describe('softmaxD (D = rowsum(dO * O)) checked directly', () => {
  for (const dtype of ['float32', 'float16', 'bfloat16'] as const) {
    it(`${dtype}: softmaxD equals rowsum(dout * out) of the given out, float32 [B,H,Nq]`, async () => {
      const d: AttnDims = { B: 2, Nq: 37, Nk: 23, H: 4, Hkv: 2, D: 48, causal: true, scale: defaultScale(48), layout: 'bshd' };
      const rng = new Rng(555);
      const q = randomTensor(rng, [2, 37, 4, 48], dtype);
      const k = randomTensor(rng, [2, 23, 2, 48], dtype);
      const v = randomTensor(rng, [2, 23, 2, 48], dtype);
      const dout = randomTensor(rng, [2, 37, 4, 48], dtype);
      try {
        const f = await flashAttention(q.tensor, k.tensor, v.tensor, { causal: true });
        const g = await flashAttentionBackward(dout.tensor, q.tensor, k.tensor, v.tensor, f.out, f.lse, { causal: true, returnSoftmaxD: true });
        try {
          expect(g.softmaxD).toBeInstanceOf(Tensor);
          const sd = g.softmaxD as Tensor;
          expect(sd.shape).toEqual([2, 4, 37]);
          expect(sd.dtype).toBe('float32');
          expect(sd.device).toBe('cpu');
          const D = await toF64(sd);
          const out = await toF64(f.out);
          const ck = new Checker(`softmaxD ${dtype}`);
          checkSoftmaxD(ck, d, D, dout.values, out);
          // rows that see no key (14 of 37): out = 0 so D = 0
          for (let b = 0; b < 2; b++)
            for (let h = 0; h < 4; h++) for (let i = 0; i < 14; i++) ck.ok(`D[${b},${h},${i}] must be 0`, D[(b * 4 + h) * 37 + i] === 0);
          if (dtype === 'float32') {
            const ref = refBackward(q.values, k.values, v.values, dout.values, d);
            checkFp32(ck, 'softmaxD vs exact D', D, ref.softmaxD);
          }
          ck.done();
        } finally {
          disposeAll(f.out, f.lse, g.dq, g.dk, g.dv, g.softmaxD);
        }
      } finally {
        disposeAll(q.tensor, k.tensor, v.tensor, dout.tensor);
      }
    });
  }

  it('softmaxD is absent unless returnSoftmaxD is true', async () => {
    const rng = new Rng(556);
    const q = randomTensor(rng, [1, 4, 1, 8], 'float32');
    try {
      const f = await flashAttention(q.tensor, q.tensor, q.tensor);
      for (const bopts of [{}, { returnSoftmaxD: false }]) {
        const g = await flashAttentionBackward(q.tensor, q.tensor, q.tensor, q.tensor, f.out, f.lse, bopts);
        expect(g.softmaxD).toBeUndefined();
        expect(g.dq.shape).toEqual([1, 4, 1, 8]);
        disposeAll(g.dq, g.dk, g.dv);
      }
      disposeAll(f.out, f.lse);
    } finally {
      q.tensor.dispose();
    }
  });
});

describe('finite-difference spot checks (float32)', () => {
  // loss(q, k, v) = sum(out * dout), evaluated in float64 from the library's float32 out.
  // Central differences with eps = 1e-2 (the actual float32 step xp - xm is used):
  //  - truncation error eps^2/6 * |d3 loss| ~ 1.7e-5 * |d3 loss|; with N(0,1) inputs, scale
  //    1/sqrt(8) and these sizes the third derivatives are O(1..10), so <~ 2e-4;
  //  - rounding: out carries ~6e-8 relative float32 error, so the loss (a sum of ~100 terms of
  //    size <~ 3) is off by <~ 100 * 6e-8 * 3 = 2e-5, divided by 2 eps = 0.02 -> <~ 1e-3.
  // Hence |fd - grad| <= 2e-3 + 1e-2 * |grad|. A wrong formula (missing scale, wrong D, a transposed
  // GQA map) moves gradients by O(|grad|) and fails this by orders of magnitude.
  for (const causal of [false, true]) {
    it(`dq, dk, dv of a GQA problem (H=2, Hkv=1, Nq=5, Nk=7, D=8)${causal ? ' causal' : ''}`, async () => {
      const B = 1, Nq = 5, Nk = 7, H = 2, Hkv = 1, D = 8;
      const rng = new Rng(causal ? 61 : 62);
      const raw = {
        q: Float32Array.from(rng.normals(B * Nq * H * D)),
        k: Float32Array.from(rng.normals(B * Nk * Hkv * D)),
        v: Float32Array.from(rng.normals(B * Nk * Hkv * D)),
      };
      const dout = Float32Array.from(rng.normals(B * Nq * H * D));
      const shapes = { q: [B, Nq, H, D], k: [B, Nk, Hkv, D], v: [B, Nk, Hkv, D] };
      const doutT = Tensor.from(dout, shapes.q);
      const loss = async (): Promise<number> => {
        const q = Tensor.from(raw.q, shapes.q);
        const k = Tensor.from(raw.k, shapes.k);
        const v = Tensor.from(raw.v, shapes.v);
        const r = await flashAttention(q, k, v, { causal });
        const out = await r.out.toFloat32Array();
        disposeAll(q, k, v, r.out, r.lse);
        let s = 0;
        for (let i = 0; i < out.length; i++) s += out[i] * dout[i];
        return s;
      };
      const q = Tensor.from(raw.q, shapes.q);
      const k = Tensor.from(raw.k, shapes.k);
      const v = Tensor.from(raw.v, shapes.v);
      const g = await grads(q, k, v, doutT, { causal });
      disposeAll(q, k, v, doutT);
      const failures: string[] = [];
      for (const name of ['q', 'k', 'v'] as const) {
        const arr = raw[name];
        const grad = name === 'q' ? g.dq : name === 'k' ? g.dk : g.dv;
        for (let t = 0; t < 4; t++) {
          const idx = rng.int(0, arr.length - 1);
          const x0 = arr[idx];
          arr[idx] = x0 + 1e-2;
          const xp = arr[idx];
          const lp = await loss();
          arr[idx] = x0 - 1e-2;
          const xm = arr[idx];
          const lm = await loss();
          arr[idx] = x0;
          const fd = (lp - lm) / (xp - xm);
          const err = Math.abs(fd - grad[idx]);
          if (!(err <= 2e-3 + 1e-2 * Math.abs(grad[idx]))) failures.push(`d${name}[${idx}]: fd ${fmt(fd)} vs library ${fmt(grad[idx])}`);
        }
      }
      expect(failures).toEqual([]);
    });
  }
});

describe('thread count, repetition and the deterministic flag do not change the gradients (bit-identical)', () => {
  for (const dtype of ['float32', 'float16'] as const) {
    it(`${dtype}: threads 1, 2, 3, default, deterministic true/false give identical dq, dk, dv, D bits`, async () => {
      const rng = new Rng(88);
      const q = randomTensor(rng, [2, 120, 4, 32], dtype);
      const k = randomTensor(rng, [2, 90, 2, 32], dtype);
      const v = randomTensor(rng, [2, 90, 2, 32], dtype);
      const dout = randomTensor(rng, [2, 120, 4, 32], dtype);
      try {
        const base = await grads(q.tensor, k.tensor, v.tensor, dout.tensor, { causal: true, cpu: { threads: 1 } }, { returnSoftmaxD: true });
        const variants: Array<[Record<string, unknown>, Record<string, unknown>]> = [
          [{ causal: true, cpu: { threads: 2 } }, {}],
          [{ causal: true, cpu: { threads: 3 } }, {}],
          [{ causal: true }, {}],
          [{ causal: true }, { deterministic: true }],
          [{ causal: true }, { deterministic: false }],
        ];
        for (const [o, b] of variants) {
          const r = await grads(q.tensor, k.tensor, v.tensor, dout.tensor, o, { ...b, returnSoftmaxD: true });
          const names = ['dq', 'dk', 'dv', 'softmaxD'];
          for (let i = 0; i < 4; i++) {
            expect(bytesEqual(r.bytes[i], base.bytes[i]), `${names[i]} bits differ for ${JSON.stringify([o, b])}`).toBe(true);
          }
        }
        const d: AttnDims = { B: 2, Nq: 120, Nk: 90, H: 4, Hkv: 2, D: 32, causal: true, scale: defaultScale(32), layout: 'bshd' };
        const ref = refBackward(q.values, k.values, v.values, dout.values, d);
        expect(relL2(base.dk, ref.dk)).toBeLessThan(dtype === 'float32' ? 1e-5 : 5e-3);
      } finally {
        disposeAll(q.tensor, k.tensor, v.tensor, dout.tensor);
      }
    });
  }
});

describe('rows that see no key', () => {
  for (const dtype of ['float32', 'float16', 'bfloat16'] as const) {
    it(`${dtype}: dq rows are exactly 0; dk, dv get nothing from them`, async () => {
      // causal, Nq = 40 > Nk = 9: rows 0..30 see no key (i + 9 - 40 < 0).
      const d: AttnDims = { B: 1, Nq: 40, Nk: 9, H: 2, Hkv: 1, D: 16, causal: true, scale: defaultScale(16), layout: 'bhsd' };
      const rng = new Rng(40 + dtype.length);
      const q = randomTensor(rng, [1, 2, 40, 16], dtype);
      const k = randomTensor(rng, [1, 1, 9, 16], dtype);
      const v = randomTensor(rng, [1, 1, 9, 16], dtype);
      const dout = randomTensor(rng, [1, 2, 40, 16], dtype);
      try {
        const g = await grads(q.tensor, k.tensor, v.tensor, dout.tensor, { causal: true, layout: 'bhsd' });
        let nonzero = 0;
        for (let h = 0; h < 2; h++)
          for (let i = 0; i < 31; i++) {
            const o = rowOffset('bhsd', 0, i, h, 40, 2, 16);
            for (let x = 0; x < 16; x++) if (g.dq[o + x] !== 0) nonzero++;
          }
        expect(nonzero).toBe(0);
        for (let h = 0; h < 2; h++) {
          // row 39 sees all 9 keys and must have a real gradient
          const o39 = rowOffset('bhsd', 0, 39, h, 40, 2, 16);
          let n39 = 0;
          for (let x = 0; x < 16; x++) n39 += Math.abs(g.dq[o39 + x]);
          expect(n39).toBeGreaterThan(0);
        }
        // dk/dv: changing dout on the keyless rows must not change anything.
        const dout2 = dout.values.slice();
        for (let h = 0; h < 2; h++)
          for (let i = 0; i < 31; i++) {
            const o = rowOffset('bhsd', 0, i, h, 40, 2, 16);
            for (let x = 0; x < 16; x++) dout2[o + x] = 1000 * (x + 1);
          }
        const dout2T = Tensor.from(Float32Array.from(dout2), [1, 2, 40, 16], dtype === 'float32' ? {} : { dtype });
        const g2 = await grads(q.tensor, k.tensor, v.tensor, dout2T, { causal: true, layout: 'bhsd' });
        dout2T.dispose();
        expect(bytesEqual(g2.bytes[0], g.bytes[0]) && bytesEqual(g2.bytes[1], g.bytes[1]) && bytesEqual(g2.bytes[2], g.bytes[2])).toBe(true);
        const ref = refBackward(q.values, k.values, v.values, dout.values, d);
        expect(relL2(g.dv, ref.dv)).toBeLessThan(dtype === 'float32' ? 1e-5 : dtype === 'float16' ? 3e-3 : 2e-2);
      } finally {
        disposeAll(q.tensor, k.tensor, v.tensor, dout.tensor);
      }
    });
  }
});
