// CPU forward (out and lse) against the float64 reference: 160 random shapes plus handpicked edge
// cases, the worked example of the reference text, lse checked directly as a logsumexp, bit-identity
// across thread counts, and numerically awkward inputs. Accuracy rules: test/helpers/harness.ts.
import { describe, expect, it } from 'vitest';
import { Tensor, flashAttention } from '../../lib/index';
import {
  AttnCase,
  Checker,
  caseName,
  checkFp32,
  checkForwardCase,
  checkLse,
  checkMaskedRows,
  randomCases,
} from '../helpers/harness';
import {
  AttnDims,
  DType,
  Rng,
  buildTensor,
  bytesEqual,
  defaultScale,
  disposeAll,
  maxAbsErr,
  randomTensor,
  rawBytes,
  refForward,
  relL2,
  rowOffset,
  toF64,
} from '../helpers/reference';
import { CPU_BIG_NS, CPU_DS, CPU_NS } from './shapes';


function c(p: Partial<AttnCase> & Pick<AttnCase, 'Nq' | 'Nk' | 'D' | 'dtype'>, seed: number): AttnCase {
  return { B: 1, H: 1, Hkv: 1, causal: false, layout: 'bshd', seed, ...p };
}

const HANDPICKED: AttnCase[] = [
  c({ Nq: 1, Nk: 1, D: 1, dtype: 'float32' }, 1),
  c({ Nq: 1, Nk: 1, D: 1, dtype: 'float16', causal: true }, 2),
  c({ Nq: 129, Nk: 7, D: 32, dtype: 'float32', causal: true, H: 2, Hkv: 1 }, 3), // 122 rows see no key
  c({ Nq: 129, Nk: 7, D: 24, dtype: 'float16', causal: true, layout: 'bhsd' }, 4),
  c({ Nq: 65, Nk: 1, D: 16, dtype: 'bfloat16', causal: true }, 5), // only the last row sees a key
  c({ Nq: 7, Nk: 129, D: 64, dtype: 'float16', causal: true, layout: 'bhsd', H: 3, Hkv: 3 }, 6),
  c({ Nq: 33, Nk: 33, D: 64, dtype: 'bfloat16', H: 8, Hkv: 1 }, 7), // MQA
  c({ Nq: 127, Nk: 127, D: 40, dtype: 'float16', causal: true, H: 6, Hkv: 2, B: 2 }, 8), // GQA
  c({ Nq: 65, Nk: 64, D: 256, dtype: 'float32', layout: 'bhsd', H: 2, Hkv: 2 }, 9),
  c({ Nq: 31, Nk: 17, D: 255, dtype: 'bfloat16', causal: true }, 10),
  c({ Nq: 129, Nk: 129, D: 129, dtype: 'float16', causal: true, cpu: { blockM: 2, blockN: 2 } }, 11),
  c({ Nq: 100, Nk: 100, D: 33, dtype: 'float32', scale: 0.3, cpu: { blockM: 7, blockN: 5 } }, 12),
  c({ Nq: 128, Nk: 1, D: 8, dtype: 'float32', causal: true, B: 3, H: 2, Hkv: 2 }, 13),
  c({ Nq: 50, Nk: 60, D: 100, dtype: 'float16', scale: 0.02, cpu: { blockM: 128, blockN: 128 } }, 14),
  c({ Nq: 513, Nk: 513, D: 64, dtype: 'float32', causal: true, H: 2, Hkv: 1 }, 15),
  c({ Nq: 300, Nk: 257, D: 128, dtype: 'bfloat16', causal: true, layout: 'bhsd' }, 16),
  c({ Nq: 64, Nk: 1000, D: 32, dtype: 'float32', H: 2, Hkv: 2 }, 17),
  c({ Nq: 2, Nk: 3, D: 2, dtype: 'float32', cpu: { blockM: 1, blockN: 1, threads: 1 } }, 18),
  // a negative scale under a softcap, scores past it (the CUDA fp32 kernels' polynomial range test once read the sign)
  c({ Nq: 96, Nk: 160, D: 160, dtype: 'float32', H: 4, Hkv: 1, causal: true, scale: -1.36, softcap: 27.4 }, 19),
  // softcaps far above the scores, fp16 / bf16 (the CUDA kernels' tanh once cancelled there: lse off by 1e-3), lse held
  // to the fp32 rule (the harness's default lowp bound let that through)
  c({ Nq: 96, Nk: 160, D: 64, dtype: 'float16', H: 4, Hkv: 1, causal: true, scale: 0.125, softcap: 3e4, lseFp32Rule: true }, 20),
  c({ Nq: 96, Nk: 160, D: 128, dtype: 'bfloat16', H: 4, Hkv: 1, scale: -0.09, softcap: 12000, lseFp32Rule: true }, 21),
];

const RANDOM = randomCases({
  seed: 1001,
  count: 160,
  Ns: CPU_NS,
  Ds: CPU_DS,
  budget: 2.5e6,
  bigEvery: 20,
  bigNs: CPU_BIG_NS,
  bigBudget: 2e7,
  cpuOptions: true,
});

describe('CPU forward: handpicked shapes vs float64', () => {
  for (const tc of HANDPICKED) it(caseName(tc), () => checkForwardCase(tc, 'cpu'));
});

describe('CPU forward: 160 random shapes vs float64', () => {
  it('the random set covers the required features', () => {
    const has = (f: (x: AttnCase) => boolean) => RANDOM.some(f);
    expect(RANDOM.length).toBeGreaterThanOrEqual(100);
    for (const dt of ['float32', 'float16', 'bfloat16']) expect(has((x) => x.dtype === dt)).toBe(true);
    expect(has((x) => x.layout === 'bhsd') && has((x) => x.layout === 'bshd')).toBe(true);
    expect(has((x) => x.causal && x.Nq > x.Nk)).toBe(true);
    expect(has((x) => x.causal && x.Nq < x.Nk)).toBe(true);
    expect(has((x) => !x.causal && x.Nq !== x.Nk)).toBe(true);
    expect(has((x) => x.Hkv === 1 && x.H > 1)).toBe(true);
    expect(has((x) => x.Hkv > 1 && x.H > x.Hkv)).toBe(true);
    expect(has((x) => x.D % 2 === 1 && x.D > 1)).toBe(true);
    expect(has((x) => x.D >= 200)).toBe(true);
    expect(has((x) => x.scale !== undefined)).toBe(true);
    expect(has((x) => x.cpu?.blockM !== undefined)).toBe(true);
    expect(has((x) => x.Nq === 1 || x.Nk === 1)).toBe(true);
    expect(has((x) => x.Nq > 128 || x.Nk > 128)).toBe(true);
  });
  for (const tc of RANDOM) it(caseName(tc), () => checkForwardCase(tc, 'cpu'));
});

async function forwardValues(
  q: Tensor,
  k: Tensor,
  v: Tensor,
  opts: Record<string, unknown>,
): Promise<{ out: Float64Array; lse: Float64Array; outBytes: Uint8Array; lseBytes: Uint8Array }> {
  const r = await flashAttention(q, k, v, opts);
  try {
    return { out: await toF64(r.out), lse: await toF64(r.lse), outBytes: await rawBytes(r.out), lseBytes: await rawBytes(r.lse) };
  } finally {
    disposeAll(r.out, r.lse);
  }
}

describe('worked example of the reference text (N=8, d=128, blocks of 2, one head)', () => {
  for (const causal of [false, true]) {
    it(`blocks 2x2 equal the float64 reference and the default-block result${causal ? ' (causal)' : ''}`, async () => {
      const d: AttnDims = { B: 1, Nq: 8, Nk: 8, H: 1, Hkv: 1, D: 128, causal, scale: defaultScale(128), layout: 'bshd' };
      const rng = new Rng(8128);
      const q = randomTensor(rng, [1, 8, 1, 128], 'float32');
      const k = randomTensor(rng, [1, 8, 1, 128], 'float32');
      const v = randomTensor(rng, [1, 8, 1, 128], 'float32');
      try {
        const ref = refForward(q.values, k.values, v.values, d);
        const tiled = await forwardValues(q.tensor, k.tensor, v.tensor, { causal, cpu: { blockM: 2, blockN: 2 } });
        const dflt = await forwardValues(q.tensor, k.tensor, v.tensor, { causal });
        const ck = new Checker('worked example');
        checkFp32(ck, 'out (blocks 2x2)', tiled.out, ref.out);
        checkLse(ck, 'float32', tiled.lse, ref.lse);
        checkFp32(ck, 'out (default blocks)', dflt.out, ref.out);
        // Same math, only the order of float32 rescaling differs: agree to a few float32 ulps.
        ck.le('out: blocks 2x2 vs default blocks, relative L2', relL2(tiled.out, dflt.out), 1e-6);
        ck.le('lse: blocks 2x2 vs default blocks, max abs', maxAbsErr(tiled.lse, dflt.lse), 1e-6 * 8);
        ck.done();
      } finally {
        disposeAll(q.tensor, k.tensor, v.tensor);
      }
    });
  }
});

describe('lse is the float64 logsumexp of each row', () => {
  // Computed here without the max-subtraction trick (the scores are small), independently of refForward.
  for (const dtype of ['float32', 'float16', 'bfloat16'] as const) {
    for (const [Nq, Nk, causal] of [
      [33, 47, false],
      [33, 47, true],
      [47, 20, true],
    ] as const) {
      it(`${dtype} Nq=${Nq} Nk=${Nk}${causal ? ' causal' : ''}, scale 0.4, bhsd, GQA 4/2`, async () => {
        const B = 2;
        const H = 4;
        const Hkv = 2;
        const D = 24;
        const scale = 0.4;
        const rng = new Rng(4000 + Nq + Nk);
        const q = randomTensor(rng, [B, H, Nq, D], dtype, 0.5);
        const k = randomTensor(rng, [B, Hkv, Nk, D], dtype, 0.5);
        const v = randomTensor(rng, [B, Hkv, Nk, D], dtype);
        try {
          const { lse } = await forwardValues(q.tensor, k.tensor, v.tensor, { causal, scale, layout: 'bhsd' });
          let worst = 0;
          let infOk = true;
          for (let b = 0; b < B; b++)
            for (let h = 0; h < H; h++)
              for (let i = 0; i < Nq; i++) {
                const hk = Math.floor(h / (H / Hkv));
                const last = causal ? Math.min(Nk - 1, i + Nk - Nq) : Nk - 1;
                let z = 0;
                for (let j = 0; j <= last; j++) {
                  let s = 0;
                  const qo = rowOffset('bhsd', b, i, h, Nq, H, D);
                  const ko = rowOffset('bhsd', b, j, hk, Nk, Hkv, D);
                  for (let x = 0; x < D; x++) s += q.values[qo + x] * k.values[ko + x];
                  z += Math.exp(scale * s);
                }
                const want = last < 0 ? Infinity : Math.log(z);
                const got = lse[(b * H + h) * Nq + i];
                if (want === Infinity) infOk &&= got === Infinity;
                else worst = Math.max(worst, Math.abs(got - want) / (1 + Math.abs(want)));
              }
          expect(infOk, 'rows without keys must have lse = +Infinity').toBe(true);
          // float32 evaluation of exactly representable inputs: ~1e-6; 1e-5 (fp32) / 1e-4 (fp16, bf16).
          expect(worst).toBeLessThanOrEqual(dtype === 'float32' ? 1e-5 : 1e-4);
        } finally {
          disposeAll(q.tensor, k.tensor, v.tensor);
        }
      });
    }
  }
});

describe('thread count and repetition do not change the result (bit-identical)', () => {
  // Decode steps and short chunks: the query heads of a GQA group share a task (one query: the
  // narrow kernels; five queries x six heads: the GEMMs over packed rows); with 2500 keys the six
  // tasks also split their keys (fwd_splits) and a combine pass merges the pieces.
  for (const [Nq, Nk, D, dtype] of [[1, 300, 64, 'float16'], [5, 300, 40, 'float32'], [1, 2500, 64, 'bfloat16'], [5, 2500, 40, 'float32']] as const) {
    it(`${dtype} Nq ${Nq} Nk ${Nk}, GQA 12/2: threads 1, 2, 3 and default give identical out and lse bits`, async () => {
      const rng = new Rng(78 + Nq + Nk);
      const q = randomTensor(rng, [3, Nq, 12, D], dtype);
      const k = randomTensor(rng, [3, Nk, 2, D], dtype);
      const v = randomTensor(rng, [3, Nk, 2, D], dtype);
      try {
        const opts = { causal: true, window: [200, 0] as [number, number] };
        const base = await forwardValues(q.tensor, k.tensor, v.tensor, { ...opts, cpu: { threads: 1 } });
        for (const cpu of [{ threads: 2 }, { threads: 3 }, undefined]) {
          const r = await forwardValues(q.tensor, k.tensor, v.tensor, cpu ? { ...opts, cpu } : opts);
          expect(bytesEqual(r.outBytes, base.outBytes), `out bits differ with cpu=${JSON.stringify(cpu)}`).toBe(true);
          expect(bytesEqual(r.lseBytes, base.lseBytes), `lse bits differ with cpu=${JSON.stringify(cpu)}`).toBe(true);
        }
      } finally {
        disposeAll(q.tensor, k.tensor, v.tensor);
      }
    });
  }
  for (const dtype of ['float32', 'bfloat16'] as const) {
    it(`${dtype}: threads 1, 2, 3 and default give identical out and lse bits`, async () => {
      const rng = new Rng(77);
      const q = randomTensor(rng, [2, 150, 4, 64], dtype);
      const k = randomTensor(rng, [2, 150, 2, 64], dtype);
      const v = randomTensor(rng, [2, 150, 2, 64], dtype);
      try {
        const base = await forwardValues(q.tensor, k.tensor, v.tensor, { causal: true, cpu: { threads: 1 } });
        for (const cpu of [{ threads: 2 }, { threads: 3 }, undefined, undefined]) {
          const r = await forwardValues(q.tensor, k.tensor, v.tensor, cpu ? { causal: true, cpu } : { causal: true });
          expect(bytesEqual(r.outBytes, base.outBytes), `out bits differ with cpu=${JSON.stringify(cpu)}`).toBe(true);
          expect(bytesEqual(r.lseBytes, base.lseBytes), `lse bits differ with cpu=${JSON.stringify(cpu)}`).toBe(true);
        }
        // and the result is right, not merely repeatable
        const ref = refForward(q.values, k.values, v.values, {
          B: 2, Nq: 150, Nk: 150, H: 4, Hkv: 2, D: 64, causal: true, scale: 1 / 8, layout: 'bshd',
        });
        expect(relL2(base.out, ref.out)).toBeLessThan(dtype === 'float32' ? 1e-5 : 1e-2);
      } finally {
        disposeAll(q.tensor, k.tensor, v.tensor);
      }
    });
  }
});

describe('awkward inputs', () => {
  it('large scores (|S| ~ 100) neither overflow nor lose the softmax (online max subtraction)', async () => {
    // q, k ~ N(0, 10^2), D = 64: scores have std 100, far beyond exp's float32 range (88).
    const rng = new Rng(31337);
    const q = randomTensor(rng, [1, 40, 2, 64], 'float32', 10);
    const k = randomTensor(rng, [1, 70, 2, 64], 'float32', 10);
    const v = randomTensor(rng, [1, 70, 2, 64], 'float32');
    try {
      const d: AttnDims = { B: 1, Nq: 40, Nk: 70, H: 2, Hkv: 2, D: 64, causal: false, scale: 1 / 8, layout: 'bshd' };
      const { out, lse } = await forwardValues(q.tensor, k.tensor, v.tensor, {});
      const ref = refForward(q.values, k.values, v.values, d);
      expect(out.every(Number.isFinite) && lse.every(Number.isFinite)).toBe(true);
      // Scores this large carry float32 rounding of ~u * sum|q k| * scale ~ 5e-5 absolute, which
      // exp() turns into ~5e-5 relative error of P: tolerances are set from that, not from 1e-5.
      expect(relL2(out, ref.out)).toBeLessThan(1e-3);
      expect(maxAbsErr(lse, ref.lse)).toBeLessThan(1e-4 * (1 + Math.max(...ref.lse.map(Math.abs))));
    } finally {
      disposeAll(q.tensor, k.tensor, v.tensor);
    }
  });

  it('an infinite value stays infinite when the keys are split and a piece weighs nothing next to the largest score', async () => {
    // One query, 2048 keys: the call splits its keys in two (fwd_splits). Key 0 (score 0) carries
    // V = +inf in feature 0; keys 1024 and 1088 score ~69 and ~139, so the first piece's weight is
    // 2^-200, which rounds to 0 in float32. The exact answer in feature 0 is +inf (inf times a
    // positive weight), which the unsplit walk keeps; the combine must not turn it into inf * 0.
    const N = 2048, D = 8;
    const q = new Float32Array(D);
    q[0] = 1;
    const k = new Float32Array(N * D), v = new Float32Array(N * D);
    for (let j = 0; j < N; j++) v[j * D + 1] = 1;
    k[1024 * D] = 100 / Math.LOG2E;
    k[1088 * D] = 200 / Math.LOG2E;
    v[0] = Infinity;
    const t = [Tensor.from(q, [1, 1, 1, D]), Tensor.from(k, [1, N, 1, D]), Tensor.from(v, [1, N, 1, D])];
    try {
      const { out, lse } = await forwardValues(t[0], t[1], t[2], { scale: 1 });
      expect(out[0]).toBe(Infinity);
      expect(Math.abs(out[1] - 1)).toBeLessThan(1e-6);
      expect(Number.isFinite(lse[0])).toBe(true);
    } finally {
      disposeAll(...t);
    }
  });

  it('scale 0 gives the plain average of the visible values; a negative scale is honoured', async () => {
    const rng = new Rng(5);
    const q = randomTensor(rng, [1, 9, 1, 16], 'float32');
    const k = randomTensor(rng, [1, 6, 1, 16], 'float32');
    const v = randomTensor(rng, [1, 6, 1, 16], 'float32');
    try {
      for (const scale of [0, -0.7]) {
        for (const causal of [false, true]) {
          const d: AttnDims = { B: 1, Nq: 9, Nk: 6, H: 1, Hkv: 1, D: 16, causal, scale, layout: 'bshd' };
          const { out, lse } = await forwardValues(q.tensor, k.tensor, v.tensor, { scale, causal });
          const ref = refForward(q.values, k.values, v.values, d);
          const ck = new Checker(`scale ${scale}${causal ? ' causal' : ''}`);
          checkMaskedRows(ck, d, { out }, { lse: { values: lse, want: Infinity } });
          checkFp32(ck, 'out', out, ref.out);
          checkLse(ck, 'float32', lse, ref.lse);
          ck.done();
          if (scale === 0 && !causal) {
            // every row: mean of v; lse = log(Nk)
            for (let x = 0; x < 16; x++) {
              let m = 0;
              for (let j = 0; j < 6; j++) m += v.values[j * 16 + x] / 6;
              expect(Math.abs(out[x] - m)).toBeLessThan(1e-6);
            }
            expect(Math.abs(lse[0] - Math.log(6))).toBeLessThan(1e-6);
          }
        }
      }
    } finally {
      disposeAll(q.tensor, k.tensor, v.tensor);
    }
  });

  it('the same tensor may be passed as q, k and v', async () => {
    const rng = new Rng(6);
    const x = randomTensor(rng, [2, 20, 3, 8], 'float16');
    try {
      const d: AttnDims = { B: 2, Nq: 20, Nk: 20, H: 3, Hkv: 3, D: 8, causal: true, scale: defaultScale(8), layout: 'bshd' };
      const { out, lse } = await forwardValues(x.tensor, x.tensor, x.tensor, { causal: true });
      const ref = refForward(x.values, x.values, x.values, d);
      expect(relL2(out, ref.out)).toBeLessThan(2e-3);
      expect(maxAbsErr(lse, ref.lse)).toBeLessThan(1e-4 * 10);
    } finally {
      x.tensor.dispose();
    }
  });

  it('float16/bfloat16 inputs made by native conversion from Float32Array give the same result as bit inputs', async () => {
    const rng = new Rng(9);
    for (const dtype of ['float16', 'bfloat16'] as DType[]) {
      const raw = rng.normals(1 * 12 * 2 * 16);
      const viaBits = buildTensor(raw, [1, 12, 2, 16], dtype);
      const viaF32 = Tensor.from(Float32Array.from(viaBits.values), [1, 12, 2, 16], { dtype });
      const kv = buildTensor(rng.normals(1 * 10 * 2 * 16), [1, 10, 2, 16], dtype);
      try {
        const a = await forwardValues(viaBits.tensor, kv.tensor, kv.tensor, {});
        const b = await forwardValues(viaF32, kv.tensor, kv.tensor, {});
        expect(bytesEqual(a.outBytes, b.outBytes)).toBe(true);
        expect(bytesEqual(a.lseBytes, b.lseBytes)).toBe(true);
      } finally {
        disposeAll(viaBits.tensor, viaF32, kv.tensor);
      }
    }
  });
});

