// Coverage audit of issue 11 on the CPU backend: what test/cpu/inference.test.ts and
// test/api/errors.test.ts leave out.
//   numerics: window / softcap on small CPU tiles (window edges on tile edges, skipped tiles) in
//     forward and in both backward schemes (fused / two-pass, forced with FA_CPU_BWD); head dims
//     above 64 (the CPU build takes 1..256) for masks, varlen and the paged cache; page sizes
//     larger than a key tile (tiles capped at page ends) with numSplits on the CPU; sequences with
//     an empty cache but queries; B = 0; caller-owned outputs (stale contents) with empty sequences.
//   errors: every new function and option (window, softcap, cuSeqlens*, maxSeqlen*, pageTable,
//     seqlensK / seqlensBefore, cuSeqlensNew, numSplits, rotary, merge's outs / lses) rejected with
//     a TypeError / RangeError naming the argument and the given value; host-checked index arrays
//     (Int32Array or host int32 Tensor) reject before anything is written; malformed calls at the
//     new entry points never crash the process.
// Accuracy rules: those of harness.ts, through its checkers and the float64 references.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import {
  Tensor, appendKV, flashAttention, flashAttentionBackward, flashAttentionVarlen, flashAttentionVarlenBackward,
  mergeAttention, pagedAttention,
} from '../../lib/index';
import { type AttnCase, Checker, caseName, checkBackwardCase, checkFp32, checkForwardCase } from '../helpers/harness';
import { type PagedCase, checkPagedCase, checkVarlenCase, pagedName, prefix, varlenName } from '../helpers/inference';
import { maskedDenseCases, pagedCases, varlenCases } from '../helpers/inference-cases';
import {
  Rng, bytesEqual, defaultScale, disposeAll, randomTensor, rawBytes, refBackward, refForward, toF64,
} from '../helpers/reference';

// ------------------------------------------------------------------------------------------------
// Numerics.
// ------------------------------------------------------------------------------------------------

const SMALL_BLOCKS = [1, 2, 3, 5, 8, 16];

describe('CPU audit: window and softcap on small CPU tiles (window edges on tile edges)', () => {
  const rng = new Rng(7911);
  const fwd = maskedDenseCases(7911, 24, { Ns: [1, 5, 17, 33, 64, 100], Ds: [3, 8, 16, 33], budget: 1e6, gpu: false });
  for (const c of fwd) {
    c.cpu = { blockM: rng.pick(SMALL_BLOCKS), blockN: rng.pick(SMALL_BLOCKS) };
    it(`forward ${caseName(c)}`, () => checkForwardCase(c, 'cpu'));
  }
  const bwd = maskedDenseCases(7912, 16, { Ns: [1, 5, 17, 33, 64], Ds: [4, 8, 16, 40], budget: 5e5, gpu: false });
  for (const c of bwd) {
    c.cpu = { blockM: rng.pick(SMALL_BLOCKS), blockN: rng.pick(SMALL_BLOCKS) };
    it(`backward ${caseName(c)}`, () => checkBackwardCase(c, 'cpu'));
  }
});

// The masked backward cases of inference.test.ts (Nk <= 64, default 64-key tiles) only ever take the
// two-pass scheme; the fused one (dense batches) never saw a window or a softcap.
for (const [scheme, slab] of [['fused', '2'], ['fused', undefined], ['twopass', undefined]] as const) {
  describe(`CPU audit: masked backward, FA_CPU_BWD=${scheme}${slab ? ` FA_CPU_FUSED_SLAB=${slab}` : ''}`, () => {
    const saved = { bwd: process.env.FA_CPU_BWD, slab: process.env.FA_CPU_FUSED_SLAB };
    beforeAll(() => {
      process.env.FA_CPU_BWD = scheme;
      if (slab) process.env.FA_CPU_FUSED_SLAB = slab;
    });
    afterAll(() => {
      for (const [k, v] of [['FA_CPU_BWD', saved.bwd], ['FA_CPU_FUSED_SLAB', saved.slab]] as const) {
        if (v === undefined) delete process.env[k];
        else process.env[k] = v;
      }
    });
    const rng = new Rng(7913 + (slab ? 7 : 0) + (scheme === 'fused' ? 0 : 1));
    const cases = maskedDenseCases(7913 + (slab ? 7 : 0) + (scheme === 'fused' ? 0 : 1), 6,
      { Ns: [5, 17, 33, 64], Ds: [4, 8, 16], budget: 4e5, gpu: false });
    for (const c of cases) {
      if (rng.bool(0.7)) c.cpu = { blockM: rng.pick([4, 8, 16]), blockN: rng.pick([3, 4, 8, 16]) };
      it(caseName(c), () => checkBackwardCase(c, 'cpu'));
    }
  });
}

describe('CPU audit: head dims above 64 (the CPU build takes 1..256) with the new features', () => {
  for (const c of maskedDenseCases(7921, 6, { Ns: [1, 5, 17, 40], Ds: [65, 96, 128, 200, 256], budget: 2e6, gpu: false })) {
    it(`forward ${caseName(c)}`, () => checkForwardCase(c, 'cpu'));
  }
  for (const c of maskedDenseCases(7922, 4, { Ns: [1, 5, 17, 33], Ds: [72, 128, 256], budget: 1e6, gpu: false })) {
    it(`backward ${caseName(c)}`, () => checkBackwardCase(c, 'cpu'));
  }
  for (const c of varlenCases(7923, 4, { maxLen: 30, Ds: [96, 128, 256], maxB: 3, backward: false, gpu: false })) {
    it(`varlen forward ${varlenName(c)}`, () => checkVarlenCase(c, 'cpu'));
  }
  for (const c of varlenCases(7924, 3, { maxLen: 24, Ds: [80, 128, 256], maxB: 3, backward: true, gpu: false })) {
    it(`varlen backward ${varlenName(c)}`, () => checkVarlenCase(c, 'cpu'));
  }
  for (const c of pagedCases(7925, 6, { maxBefore: 40, maxFresh: 10, Ds: [80, 128, 256], maxB: 3, gpu: false, pageSizes: [1, 5, 16] })) {
    it(`paged ${pagedName(c)}`, () => checkPagedCase(c, 'cpu'));
  }
});

function pagedWork(c: PagedCase): number {
  const nq = c.nq ?? c.fresh;
  return c.before.reduce((a, x, b) => a + c.H * nq[b] * (x + c.fresh[b]) * c.D, 0);
}

// Page sizes above the 64-key tile (float32 with D % 8 == 0 reads pages in place and ends key tiles
// at page boundaries: a path the page sizes 1..16 of inference.test.ts never take), and numSplits,
// which the CPU suite never passes.
describe('CPU audit: paged cache with large pages, numSplits on the CPU', () => {
  const all = pagedCases(7931, 40, { maxBefore: 200, maxFresh: 24, Ds: [16, 64, 128], maxB: 3, gpu: false, pageSizes: [32, 64, 100, 256] });
  const cases = all.filter((c) => pagedWork(c) <= 2.5e7).slice(0, 12);
  const splits = [1, 2, 7, 32, 0, undefined];
  cases.forEach((c, i) => {
    c.numSplits = splits[i % splits.length];
    it(pagedName(c), () => checkPagedCase(c, 'cpu'));
  });

  // float32, D % 8 == 0, pages >= the key tile and sequences over several pages: key tiles read in
  // place and cut at page ends (64-key tiles over 100-token pages end at 64, 100, 164, 200, ...).
  const capped: PagedCase[] = [
    { seed: 7933, before: [150, 37], fresh: [1, 3], nq: [1, 3], pageSize: 100, H: 4, Hkv: 2, D: 16, dtype: 'float32', spare: 2 },
    { seed: 7934, before: [130], fresh: [6], nq: [8], pageSize: 64, H: 8, Hkv: 2, D: 32, dtype: 'float32', causal: true },
    { seed: 7935, before: [220, 90], fresh: [2, 1], nq: [2, 1], pageSize: 100, H: 2, Hkv: 1, D: 16, dtype: 'float32', softcap: 1,
      rotary: { dim: 8, interleaved: false }, numSplits: 3 },
    { seed: 7936, before: [170, 0], fresh: [30, 70], nq: [30, 70], pageSize: 64, H: 4, Hkv: 4, D: 8, dtype: 'float32',
      causal: true, window: [70, 0], rotary: { dim: 8, interleaved: true } },
  ];
  for (const c of capped) it(`page-capped tiles: ${pagedName(c)}`, () => checkPagedCase(c, 'cpu'));

  it('numSplits 1, 3, 32 and 0 give the bits of the call without it (CPU)', async () => {
    const rng = new Rng(7932);
    const P = 8, Hkv = 2, H = 4, D = 16, numPages = 12;
    const kc = randomTensor(rng, [numPages, P, Hkv, D], 'float16').tensor;
    const vc = randomTensor(rng, [numPages, P, Hkv, D], 'float16').tensor;
    const q = randomTensor(rng, [4, H, D], 'float16').tensor;
    const opts = { pageTable: Int32Array.from([3, 7, 1, 0, 11, 5, 2, 9, 4, 6, 8, 10]), seqlensK: Int32Array.from([45, 17]),
      cuSeqlensQ: Int32Array.from([0, 1, 4]), causal: true };
    const base = await pagedAttention(q, kc, vc, opts);
    const want = [await rawBytes(base.out), await rawBytes(base.lse)];
    for (const numSplits of [1, 3, 32, 0]) {
      const r = await pagedAttention(q, kc, vc, { ...opts, numSplits });
      expect(bytesEqual(await rawBytes(r.out), want[0]), `out, numSplits ${numSplits}`).toBe(true);
      expect(bytesEqual(await rawBytes(r.lse), want[1]), `lse, numSplits ${numSplits}`).toBe(true);
      disposeAll(r.out, r.lse);
    }
    disposeAll(base.out, base.lse, kc, vc, q);
  });
});

describe('CPU audit: paged sequences with an empty cache but queries (rows see no key)', () => {
  const cases: PagedCase[] = [
    { seed: 7941, before: [0, 5], fresh: [0, 2], nq: [3, 2], pageSize: 3, H: 4, Hkv: 2, D: 16, dtype: 'float32' },
    { seed: 7942, before: [0, 0, 9], fresh: [0, 0, 1], nq: [1, 2, 1], pageSize: 1, H: 8, Hkv: 1, D: 8, dtype: 'float16', causal: true },
    { seed: 7943, before: [6, 0], fresh: [4, 0], nq: [4, 5], pageSize: 4, H: 2, Hkv: 2, D: 40, dtype: 'bfloat16', window: [2, 0] },
  ];
  for (const c of cases) it(pagedName(c), () => checkPagedCase(c, 'cpu'));
});

/** Packs rows [r0, r0 + n) of a [total, Hh, D] array. */
function rowsOf(a: ArrayLike<number>, r0: number, n: number, Hh: number, D: number): Float64Array {
  return Float64Array.from({ length: n * Hh * D }, (_, i) => a[r0 * Hh * D + i]);
}

describe('CPU audit: caller-owned outputs with stale contents and empty sequences', () => {
  // lensQ / lensK: a sequence with no keys (its rows: out 0, lse +inf, dq 0) and one with no queries
  // (its keys: dk = dv = 0). Outputs start as NaN: every element must be written.
  const lensQ = [3, 0, 4, 2], lensK = [5, 6, 0, 3];
  const H = 4, Hkv = 2, D = 16;
  const cuQ = prefix(lensQ), cuK = prefix(lensK), tq = cuQ[4], tk = cuK[4];
  const nan = (shape: number[]) => Tensor.from(new Float32Array(shape.reduce((a, b) => a * b, 1)).fill(NaN), shape);

  for (const mask of [{}, { causal: true }, { window: [1, 2] as [number, number], softcap: 2 }]) {
    it(`varlen forward and backward (float32) ${JSON.stringify(mask)}`, async () => {
      const rng = new Rng(7951);
      const q = randomTensor(rng, [tq, H, D], 'float32'), k = randomTensor(rng, [tk, Hkv, D], 'float32');
      const v = randomTensor(rng, [tk, Hkv, D], 'float32'), dout = randomTensor(rng, [tq, H, D], 'float32');
      const opts = { ...mask, cuSeqlensQ: cuQ, cuSeqlensK: cuK };
      const out = nan([tq, H, D]), lse = nan([H, tq]);
      const dq = nan([tq, H, D]), dk = nan([tk, Hkv, D]), dv = nan([tk, Hkv, D]);
      const r = await flashAttentionVarlen(q.tensor, k.tensor, v.tensor, { ...opts, out, lse });
      expect(r.out).toBe(out);
      expect(r.lse).toBe(lse);
      const g = await flashAttentionVarlenBackward(dout.tensor, q.tensor, k.tensor, v.tensor, out, lse, { ...opts, dq, dk, dv });
      expect(g.dq).toBe(dq);
      const ck = new Checker(`varlen caller-owned ${JSON.stringify(mask)}`);
      const [o, l, gq, gk, gv] = await Promise.all([out, lse, dq, dk, dv].map(toF64));
      const ro = new Float64Array(tq * H * D), rl = new Float64Array(H * tq);
      const rq = new Float64Array(tq * H * D), rk = new Float64Array(tk * Hkv * D), rv = new Float64Array(tk * Hkv * D);
      for (let b = 0; b < 4; b++) {
        const nq = lensQ[b], nk = lensK[b];
        if (nq === 0) continue;
        const d = { B: 1, Nq: nq, Nk: nk, H, Hkv, D, causal: !!(mask as { causal?: boolean }).causal, scale: defaultScale(D),
          layout: 'bshd' as const, window: (mask as { window?: [number, number] }).window, softcap: (mask as { softcap?: number }).softcap };
        const ref = refBackward(rowsOf(q.values, cuQ[b], nq, H, D), rowsOf(k.values, cuK[b], nk, Hkv, D),
          rowsOf(v.values, cuK[b], nk, Hkv, D), rowsOf(dout.values, cuQ[b], nq, H, D), d);
        ro.set(ref.out, cuQ[b] * H * D);
        rq.set(ref.dq, cuQ[b] * H * D);
        rk.set(ref.dk, cuK[b] * Hkv * D);
        rv.set(ref.dv, cuK[b] * Hkv * D);
        for (let h = 0; h < H; h++) for (let i = 0; i < nq; i++) rl[h * tq + cuQ[b] + i] = ref.lse[h * nq + i];
      }
      for (let h = 0; h < H; h++) for (let i = 0; i < lensQ[2]; i++) rl[h * tq + cuQ[2] + i] = Infinity;
      checkFp32(ck, 'out', o, ro);
      ck.le('lse max abs error', Math.max(...Array.from(l, (x, i) => (x === rl[i] ? 0 : Math.abs(x - rl[i])))), 1e-5 * 10);
      checkFp32(ck, 'dq', gq, rq);
      checkFp32(ck, 'dk', gk, rk);
      checkFp32(ck, 'dv', gv, rv);
      // Exact values where the reference is exact: rows without keys, keys without queries.
      const slice = (a: Float64Array, r0: number, n: number, w: number) => Array.from(a.subarray(r0 * w, (r0 + n) * w));
      ck.ok('out rows of the sequence without keys are not exactly 0', slice(o, cuQ[2], 4, H * D).every((x) => x === 0));
      ck.ok('dq rows of the sequence without keys are not exactly 0', slice(gq, cuQ[2], 4, H * D).every((x) => x === 0));
      ck.ok('dk / dv rows of the sequence without queries are not exactly 0',
        [...slice(gk, cuK[1], 6, Hkv * D), ...slice(gv, cuK[1], 6, Hkv * D)].every((x) => x === 0));
      disposeAll(q.tensor, k.tensor, v.tensor, dout.tensor, out, lse, dq, dk, dv);
      ck.done();
    });
  }

  it('pagedAttention (float32): out / lse given, a sequence with an empty cache', async () => {
    const rng = new Rng(7952);
    const P = 4, numPages = 5;
    const kc = randomTensor(rng, [numPages, P, Hkv, D], 'float32'), vc = randomTensor(rng, [numPages, P, Hkv, D], 'float32');
    const q = randomTensor(rng, [5, H, D], 'float32');
    const table = Int32Array.from([-1, -1, -1, 4, 0, 2]);  // sequence 0: no pages, sequence 1: pages 4, 0, 2
    const out = nan([5, H, D]), lse = nan([H, 5]);
    const r = await pagedAttention(q.tensor, kc.tensor, vc.tensor, {
      pageTable: table, seqlensK: Int32Array.from([0, 10]), cuSeqlensQ: Int32Array.from([0, 2, 5]), causal: true, out, lse,
    });
    expect(r.out).toBe(out);
    const o = await toF64(out), l = await toF64(lse);
    const keys = new Float64Array(10 * Hkv * D), vals = new Float64Array(10 * Hkv * D);
    for (let t = 0; t < 10; t++) {
      const src = (table[3 + Math.floor(t / P)] * P + (t % P)) * Hkv * D;
      keys.set(kc.values.subarray(src, src + Hkv * D), t * Hkv * D);
      vals.set(vc.values.subarray(src, src + Hkv * D), t * Hkv * D);
    }
    const ref = refForward(rowsOf(q.values, 2, 3, H, D), keys, vals,
      { B: 1, Nq: 3, Nk: 10, H, Hkv, D, causal: true, scale: defaultScale(D), layout: 'bshd' });
    const ck = new Checker('paged caller-owned');
    ck.ok('out rows of the empty sequence are not exactly 0', Array.from(o.subarray(0, 2 * H * D)).every((x) => x === 0));
    for (let h = 0; h < H; h++) ck.ok(`lse[${h}] of the empty sequence is not +inf`, l[h * 5] === Infinity && l[h * 5 + 1] === Infinity);
    checkFp32(ck, 'out (sequence 1)', o.subarray(2 * H * D), ref.out);
    let lerr = 0;
    for (let h = 0; h < H; h++) for (let i = 0; i < 3; i++) lerr = Math.max(lerr, Math.abs(l[h * 5 + 2 + i] - ref.lse[h * 3 + i]));
    ck.le('lse max abs error (sequence 1)', lerr, 1e-5 * 10);
    disposeAll(kc.tensor, vc.tensor, q.tensor, out, lse);
    ck.done();
  });
});

describe('CPU audit: batches of zero sequences', () => {
  it('varlen forward / backward, pagedAttention and appendKV with B = 0 give empty results and write nothing', async () => {
    const q = Tensor.from(new Float32Array(0), [0, 2, 8]);
    const o = { cuSeqlensQ: Int32Array.from([0]), cuSeqlensK: Int32Array.from([0]) };
    const r = await flashAttentionVarlen(q, q, q, o);
    expect(r.out.shape).toEqual([0, 2, 8]);
    expect(r.lse.shape).toEqual([2, 0]);
    const g = await flashAttentionVarlenBackward(q, q, q, q, r.out, r.lse, o);
    expect([g.dq.shape, g.dk.shape, g.dv.shape]).toEqual([[0, 2, 8], [0, 2, 8], [0, 2, 8]]);
    const kc = Tensor.from(new Float32Array(2 * 4 * 2 * 8).fill(3), [2, 4, 2, 8]);
    const p = await pagedAttention(q, kc, kc, { pageTable: new Int32Array(0), seqlensK: new Int32Array(0), cuSeqlensQ: Int32Array.from([0]) });
    expect(p.out.shape).toEqual([0, 2, 8]);
    expect(p.lse.shape).toEqual([2, 0]);
    const before = await rawBytes(kc);
    const vc = Tensor.from(new Float32Array(2 * 4 * 2 * 8).fill(4), [2, 4, 2, 8]);
    const vBefore = await rawBytes(vc);
    await appendKV(kc, vc, q, q, { pageTable: new Int32Array(0), cuSeqlensNew: Int32Array.from([0]), seqlensBefore: new Int32Array(0) });
    expect(bytesEqual(await rawBytes(kc), before)).toBe(true);
    expect(bytesEqual(await rawBytes(vc), vBefore)).toBe(true);
    disposeAll(q, r.out, r.lse, g.dq, g.dk, g.dv, kc, vc, p.out, p.lse);
  });
});

describe('CPU audit: the cases API.md leaves open, as the README settles them', () => {
  for (const [scale, dtype] of [[0, 'float32'], [-0.7, 'float32'], [-0.3, 'float16']] as const) {
    const c: AttnCase = { seed: 5301, B: 2, Nq: 19, Nk: 23, H: 4, Hkv: 2, D: 16, dtype, causal: scale < 0, scale, layout: 'bshd' };
    it(`scale ${scale}: forward ${caseName(c)}`, () => checkForwardCase(c, 'cpu'));
    it(`scale ${scale}: backward ${caseName(c)}`, () => checkBackwardCase(c, 'cpu'));
  }

  it('mergeAttention: a -Infinity lse contributes nothing like +Infinity, a NaN lse makes its row NaN, a row no partial saw is 0 / +Infinity', async () => {
    const rows = 4, H = 1, D = 3;
    const outs = [0, 1, 2].map((i) => Tensor.from(Float32Array.from({ length: rows * H * D }, (_, j) => i * 10 + j), [rows, H, D]));
    // lse per row and partial: row 0 one finite partial among +-Infinity; row 1 two finite ones and -Infinity;
    // row 2 a NaN; row 3 none finite
    const L = [[0.5, Infinity, NaN, Infinity], [-Infinity, 0.25, 1, -Infinity], [Infinity, 1.5, 0, Infinity]];
    const lses = L.map((l) => Tensor.from(Float32Array.from(l), [H, rows]));
    const r = await mergeAttention(outs, lses);
    const out = await r.out.toFloat32Array(), lse = await r.lse.toFloat32Array();
    const x = await Promise.all(outs.map((o) => o.toFloat32Array()));
    expect(Array.from(out.subarray(0, D))).toEqual(Array.from(x[0].subarray(0, D)));  // row 0: partial 0 alone
    expect(lse[0]).toBeCloseTo(0.5, 6);
    const w1 = Math.exp(0.25), w2 = Math.exp(1.5), s = w1 + w2;  // row 1: partials 1 and 2 (lse as float32)
    for (let d = 0; d < D; d++) expect(out[D + d]).toBeCloseTo((w1 * x[1][D + d] + w2 * x[2][D + d]) / s, 5);
    expect(lse[1]).toBeCloseTo(Math.log(s), 6);
    expect(Array.from(out.subarray(2 * D, 3 * D)).every(Number.isNaN)).toBe(true);
    expect(Number.isNaN(lse[2])).toBe(true);
    expect(Array.from(out.subarray(3 * D))).toEqual([0, 0, 0]);
    expect(lse[3]).toBe(Infinity);
    expect([r.out.dtype, r.lse.dtype]).toEqual(['float32', 'float32']);
    const h = await mergeAttention(outs.map((o, i) => Tensor.from(new Float32Array(rows * H * D).fill(i), [rows, H, D], { dtype: 'bfloat16' })), lses);
    expect([h.out.dtype, h.lse.dtype]).toEqual(['bfloat16', 'float32']);
    disposeAll(...outs, ...lses, r.out, r.lse, h.out, h.lse);
  });

  it('maxSeqlenQ / maxSeqlenK above the longest sequence are accepted and change nothing', async () => {
    const rng = new Rng(5307);
    const q = randomTensor(rng, [9, 2, 8], 'float32').tensor, k = randomTensor(rng, [11, 1, 8], 'float32').tensor;
    const v = randomTensor(rng, [11, 1, 8], 'float32').tensor;
    const o = { cuSeqlensQ: Int32Array.from([0, 4, 9]), cuSeqlensK: Int32Array.from([0, 7, 11]), causal: true };
    const a = await flashAttentionVarlen(q, k, v, o);
    const b = await flashAttentionVarlen(q, k, v, { ...o, maxSeqlenQ: 1000, maxSeqlenK: 5000 });
    expect(bytesEqual(await rawBytes(a.out), await rawBytes(b.out))).toBe(true);
    expect(bytesEqual(await rawBytes(a.lse), await rawBytes(b.lse))).toBe(true);
    disposeAll(q, k, v, a.out, a.lse, b.out, b.lse);
  });
});

// ------------------------------------------------------------------------------------------------
// Errors (the checks of test/api/errors.test.ts, for the new functions and options).
// ------------------------------------------------------------------------------------------------

type ErrClass = typeof TypeError | typeof RangeError;

function esc(s: string): string {
  return s.replace(/[.*+?^${}()|[\]\\]/g, '\\$&');
}
/** A number standing alone in a message. */
function num(n: number | string): RegExp {
  return new RegExp(`(^|[^0-9.])${esc(String(n))}(?![0-9])`);
}

/** The call returns a Promise that rejects with `cls`; the message starts with `fn:`, names `arg`
 *  and shows what was given. */
async function expectRejects(thunk: () => unknown, cls: ErrClass, fn: string, arg: string, given?: string | RegExp): Promise<void> {
  let p: unknown;
  try {
    p = thunk();
  } catch (x) {
    throw new Error(`${fn} ${arg}: threw synchronously instead of returning a rejected Promise: ${String(x)}`);
  }
  expect(p, `${fn} ${arg}: must return a Promise`).toBeInstanceOf(Promise);
  let err: unknown;
  let settled = false;
  try {
    await p;
    settled = true;
  } catch (x) {
    err = x;
  }
  expect(settled, `${fn} ${arg}: expected a ${cls.name}, but the call succeeded`).toBe(false);
  expect(err instanceof cls, `${fn} ${arg}: expected ${cls.name}, got ${String(err)}`).toBe(true);
  const msg = (err as Error).message;
  expect(msg, `${fn} ${arg}: message must start with the function name`).toMatch(new RegExp(`^${esc(fn)}:`));
  expect(msg, `${fn} ${arg}: message must name the argument`).toContain(arg);
  if (typeof given === 'string') expect(msg, `${fn} ${arg}: message must show the given value`).toContain(given);
  else if (given) expect(msg, `${fn} ${arg}: message must show the given value`).toMatch(given);
}

const f32 = (shape: number[], seed = 1) => randomTensor(new Rng(seed), shape, 'float32').tensor;
const f16 = (shape: number[]) => randomTensor(new Rng(2), shape, 'float16').tensor;
const i32 = (a: number[], shape?: number[]) => Tensor.from(Int32Array.from(a), shape ?? [a.length]);

describe('CPU audit errors: an int32 tensor where a float one belongs is named itself', () => {
  it('an int32 q with float16 k / v names q.dtype; an int32 kCache with a float16 vCache names kCache.dtype', async () => {
    const qi = i32(Array.from({ length: 16 }, (_, i) => i), [1, 2, 1, 8]);
    const kh = f16([1, 2, 1, 8]), vh = f16([1, 2, 1, 8]);
    await expectRejects(() => flashAttention(qi, kh, vh), TypeError, 'flashAttention', 'q.dtype', /got 'int32'$/);
    const kci = i32(new Array(6 * 4 * 2 * 8).fill(0), [6, 4, 2, 8]);
    await expectRejects(() => appendKV(kci, f16([6, 4, 2, 8]), f16([1, 2, 8]), f16([1, 2, 8]), {
      pageTable: Int32Array.from([0]), cuSeqlensNew: Int32Array.from([0, 1]), seqlensBefore: Int32Array.from([0]),
    }), TypeError, 'appendKV', 'kCache.dtype', /got 'int32'$/);
  });
});

describe('CPU audit errors: window and softcap options of flashAttention / flashAttentionBackward', () => {
  const q = f32([1, 5, 2, 8]), k = f32([1, 6, 1, 8], 3);
  const BAD_WINDOWS: Array<[unknown, ErrClass, string, RegExp]> = [
    [[-2, 0], RangeError, 'options.window[0]', num(-2)],
    [[0, -3], RangeError, 'options.window[1]', num(-3)],
    [[1.5, 0], RangeError, 'options.window[0]', /1\.5/],
    [[0, NaN], RangeError, 'options.window[1]', /NaN/],
    [[0, Infinity], RangeError, 'options.window[1]', /Infinity/],
    [[3], TypeError, 'options.window', /\[\s*3\s*\]/],
    [[1, 2, 3], TypeError, 'options.window', /\[\s*1,\s*2,\s*3\s*\]/],
    [['1', 2], TypeError, 'options.window', /'1'|"1"/],
    [5, TypeError, 'options.window', num(5)],
    [null, TypeError, 'options.window', /null/],
  ];
  const BAD_SOFTCAPS: Array<[unknown, ErrClass, RegExp]> = [
    [-1, RangeError, num(-1)],
    [NaN, RangeError, /NaN/],
    [Infinity, RangeError, /Infinity/],
    ['30', TypeError, /'30'|"30"|string/],
    [null, TypeError, /null/],
    [true, TypeError, /true/],
  ];
  it('forward: bad windows and softcaps', async () => {
    for (const [window, cls, arg, given] of BAD_WINDOWS) {
      await expectRejects(() => flashAttention(q, k, k, { window } as never), cls, 'flashAttention', arg, given);
    }
    for (const [softcap, cls, given] of BAD_SOFTCAPS) {
      await expectRejects(() => flashAttention(q, k, k, { softcap } as never), cls, 'flashAttention', 'options.softcap', given);
    }
  });
  it('backward: bad windows and softcaps', async () => {
    const f = await flashAttention(q, k, k);
    for (const [window, cls, arg, given] of BAD_WINDOWS) {
      await expectRejects(() => flashAttentionBackward(q, q, k, k, f.out, f.lse, { window } as never), cls, 'flashAttentionBackward', arg, given);
    }
    for (const [softcap, cls, given] of BAD_SOFTCAPS) {
      await expectRejects(() => flashAttentionBackward(q, q, k, k, f.out, f.lse, { softcap } as never), cls, 'flashAttentionBackward', 'options.softcap', given);
    }
    disposeAll(f.out, f.lse);
  });
});

describe('CPU audit errors: flashAttentionVarlen / flashAttentionVarlenBackward', () => {
  const FV = 'flashAttentionVarlen', FVB = 'flashAttentionVarlenBackward';
  // q [7, 4, 8], k / v [9, 2, 8]; sequences q [3, 4], k [4, 5].
  const q = f32([7, 4, 8]), k = f32([9, 2, 8], 3), v = f32([9, 2, 8], 4);
  const cuQ = Int32Array.from([0, 3, 7]), cuK = Int32Array.from([0, 4, 9]);
  const ok = { cuSeqlensQ: cuQ, cuSeqlensK: cuK };

  it('tensors: kind, rank, heads, head dim, dtype, disposed', async () => {
    await expectRejects(() => flashAttentionVarlen(q, k, v, undefined as never), TypeError, FV, 'options', /undefined/);
    await expectRejects(() => flashAttentionVarlen(new Float32Array(8) as never, k, v, ok), TypeError, FV, 'q', /Float32Array/);
    await expectRejects(() => flashAttentionVarlen(f32([1, 7, 4, 8]), k, v, ok), RangeError, FV, 'q.shape', /\[1, 7, 4, 8\]/);
    await expectRejects(() => flashAttentionVarlen(q, f32([9, 2, 16]), f32([9, 2, 16]), ok), RangeError, FV, 'k.shape[2]', num(16));
    await expectRejects(() => flashAttentionVarlen(q, f32([9, 3, 8]), f32([9, 3, 8]), ok), RangeError, FV, 'k.shape[1]', num(3));
    await expectRejects(() => flashAttentionVarlen(q, k, f32([8, 2, 8]), ok), RangeError, FV, 'v.shape[0]', num(8));
    await expectRejects(() => flashAttentionVarlen(q, f16([9, 2, 8]), v, ok), TypeError, FV, 'k.dtype', 'float16');
    const gone = f32([9, 2, 8]);
    gone.dispose();
    await expectRejects(() => flashAttentionVarlen(q, k, gone, ok), TypeError, FV, 'v', /v is disposed/);
    await expectRejects(() => flashAttentionVarlen(q, k, v, { ...ok, layout: 'bhsd' } as never), TypeError, FV, 'options.layout', /layout/);
  });

  it('cuSeqlens: kind, dtype, length, cu[0], monotone, total; host int32 tensors are checked the same way', async () => {
    const bad: Array<[Record<string, unknown>, ErrClass, string, string | RegExp]> = [
      [{ cuSeqlensQ: [0, 3, 7] }, TypeError, 'options.cuSeqlensQ', /\[0, 3, 7\]/],
      [{ cuSeqlensQ: Float32Array.from([0, 3, 7]) }, TypeError, 'options.cuSeqlensQ', /Float32Array/],
      [{ cuSeqlensQ: undefined }, TypeError, 'options.cuSeqlensQ', /undefined/],
      [{ cuSeqlensQ: Tensor.from(Float32Array.from([0, 3, 7]), [3]) }, TypeError, 'options.cuSeqlensQ.dtype', 'float32'],
      [{ cuSeqlensQ: new Int32Array(0) }, RangeError, 'options.cuSeqlensQ.length', num(0)],
      [{ cuSeqlensK: Int32Array.from([0, 9]) }, RangeError, 'options.cuSeqlensK.length', num(2)],
      [{ cuSeqlensQ: Int32Array.from([1, 3, 7]) }, RangeError, 'options.cuSeqlensQ[0]', num(1)],
      [{ cuSeqlensQ: Int32Array.from([0, 5, 4]) }, RangeError, 'options.cuSeqlensQ[2]', num(4)],
      [{ cuSeqlensQ: Int32Array.from([0, 3, 6]) }, RangeError, 'options.cuSeqlensQ[2]', num(6)],
      [{ cuSeqlensK: Int32Array.from([0, 10, 9]) }, RangeError, 'options.cuSeqlensK[2]', num(9)],
      [{ cuSeqlensK: Int32Array.from([0, 4, 8]) }, RangeError, 'options.cuSeqlensK[2]', num(8)],
      [{ cuSeqlensQ: i32([0, 5, 4]) }, RangeError, 'options.cuSeqlensQ[2]', num(4)],
      [{ cuSeqlensK: i32([-1, 4, 9]) }, RangeError, 'options.cuSeqlensK[0]', num(-1)],
      [{ maxSeqlenQ: 3 }, RangeError, 'options.maxSeqlenQ', num(3)],
      [{ maxSeqlenK: -1 }, RangeError, 'options.maxSeqlenK', num(-1)],
      [{ maxSeqlenK: 4.5 }, RangeError, 'options.maxSeqlenK', /4\.5/],
      [{ maxSeqlenQ: '4' }, TypeError, 'options.maxSeqlenQ', /'4'/],
      [{ window: [0, -2] }, RangeError, 'options.window[1]', num(-2)],
      [{ softcap: -0.5 }, RangeError, 'options.softcap', /-0\.5/],
      [{ causal: 1 }, TypeError, 'options.causal', num(1)],
    ];
    for (const [o, cls, arg, given] of bad) await expectRejects(() => flashAttentionVarlen(q, k, v, { ...ok, ...o } as never), cls, FV, arg, given);
  });

  it('backward: dout / out / lse, options and the same index checks', async () => {
    const f = await flashAttentionVarlen(q, k, v, ok);
    const dout = f32([7, 4, 8], 9);
    const call = (o: Record<string, unknown>, a: Partial<Record<'dout' | 'out' | 'lse', unknown>> = {}) => () =>
      flashAttentionVarlenBackward((a.dout ?? dout) as Tensor, q, k, v, (a.out ?? f.out) as Tensor, (a.lse ?? f.lse) as Tensor,
        { ...ok, ...o } as never);
    await expectRejects(() => flashAttentionVarlenBackward(dout, q, k, v, f.out, f.lse, undefined as never), TypeError, FVB, 'options', /undefined/);
    await expectRejects(call({}, { dout: f32([7, 4, 16]) }), RangeError, FVB, 'dout.shape', /\[7, 4, 16\]/);
    await expectRejects(call({}, { out: f16([7, 4, 8]) }), TypeError, FVB, 'out.dtype', 'float16');
    await expectRejects(call({}, { lse: 42 }), TypeError, FVB, 'lse', num(42));
    await expectRejects(call({}, { lse: f32([1, 4, 7]) }), RangeError, FVB, 'lse.shape', /\[1, 4, 7\]/);
    await expectRejects(call({}, { lse: f32([7, 4]) }), RangeError, FVB, 'lse.shape', /\[7, 4\]/);
    await expectRejects(call({}, { lse: f16([4, 7]) }), TypeError, FVB, 'lse.dtype', 'float16');
    await expectRejects(call({ cuSeqlensQ: Int32Array.from([0, 4, 3]) }), RangeError, FVB, 'options.cuSeqlensQ[2]', num(3));
    await expectRejects(call({ cuSeqlensK: Int32Array.from([0, 4, 10]) }), RangeError, FVB, 'options.cuSeqlensK[2]', num(10));
    await expectRejects(call({ cuSeqlensK: [0, 4, 9] }), TypeError, FVB, 'options.cuSeqlensK', /\[0, 4, 9\]/);
    await expectRejects(call({ deterministic: 'yes' }), TypeError, FVB, 'options.deterministic', /'yes'/);
    await expectRejects(call({ window: [-5, 1] }), RangeError, FVB, 'options.window[0]', num(-5));
    await expectRejects(call({ softcap: NaN }), RangeError, FVB, 'options.softcap', /NaN/);
    await expectRejects(call({ dq: f32([7, 4, 4]) }), RangeError, FVB, 'options.dq.shape', /\[7, 4, 4\]/);
    await expectRejects(call({ out: f.out }), TypeError, FVB, 'options.out', /out/);
    disposeAll(f.out, f.lse, dout);
  });
});

/** The paged problem of the error tests: 6 pages of 4 tokens, 2 kv heads, D 8; two sequences. */
function pagedSetup() {
  const kc = f32([6, 4, 2, 8], 11), vc = f32([6, 4, 2, 8], 12);
  return {
    kc, vc,
    q: f32([3, 4, 8], 13),
    k: f32([3, 2, 8], 14), v: f32([3, 2, 8], 15),
    cos: Tensor.from(new Float32Array(16 * 2).fill(0.5), [16, 2]), sin: Tensor.from(new Float32Array(16 * 2).fill(0.25), [16, 2]),
    table: Int32Array.from([5, 1, 3, 0, 2, 4]),  // [2, 3]
  };
}

describe('CPU audit errors: appendKV (host-checked index arrays; nothing written on rejection)', () => {
  const FN = 'appendKV';
  it('bad tensors and options are rejected with the argument named', async () => {
    const s = pagedSetup();
    const ok = { pageTable: s.table, cuSeqlensNew: Int32Array.from([0, 1, 3]), seqlensBefore: Int32Array.from([9, 5]) };
    await expectRejects(() => appendKV(s.kc, s.vc, s.k, s.v, undefined as never), TypeError, FN, 'options', /undefined/);
    await expectRejects(() => appendKV(null as never, s.vc, s.k, s.v, ok), TypeError, FN, 'kCache', /null/);
    await expectRejects(() => appendKV(f32([6, 4, 16]), s.vc, s.k, s.v, ok), RangeError, FN, 'kCache.shape', /\[6, 4, 16\]/);
    await expectRejects(() => appendKV(s.kc, f32([6, 5, 2, 8]), s.k, s.v, ok), RangeError, FN, 'vCache.shape[1]', num(5));
    await expectRejects(() => appendKV(s.kc, f16([6, 4, 2, 8]), s.k, s.v, ok), TypeError, FN, 'vCache.dtype', 'float16');
    await expectRejects(() => appendKV(s.kc, s.vc, f32([3, 1, 8]), s.v, ok), RangeError, FN, 'k.shape[1]', num(1));
    await expectRejects(() => appendKV(s.kc, s.vc, s.k, f32([3, 2, 4]), ok), RangeError, FN, 'v.shape[2]', num(4));
    await expectRejects(() => appendKV(s.kc, s.vc, s.k, f32([2, 2, 8]), ok), RangeError, FN, 'v.shape[0]', num(2));
    await expectRejects(() => appendKV(s.kc, s.vc, f16([3, 2, 8]), s.v, ok), TypeError, FN, 'k.dtype', 'float16');
    const bad: Array<[Record<string, unknown>, ErrClass, string, string | RegExp]> = [
      [{ pageTable: [5, 1, 3, 0, 2, 4] }, TypeError, 'options.pageTable', /\[5, 1, 3/],
      [{ pageTable: Tensor.from(new Float32Array(6), [2, 3]) }, TypeError, 'options.pageTable.dtype', 'float32'],
      [{ pageTable: Int32Array.from([5, 1, 3, 0, 2]) }, RangeError, 'options.pageTable.length', num(5)],
      [{ pageTable: i32([5, 1, 3, 0, 2, 4, 1, 1, 1], [3, 3]) }, RangeError, 'options.pageTable.shape[0]', num(3)],
      [{ pageTable: i32([5, 1, 3, 0, 2, 4], [1, 2, 3]) }, RangeError, 'options.pageTable.shape', /\[B, maxPagesPerSeq\].*got \[1, 2, 3\]$/],
      [{ cuSeqlensNew: i32([0, 1, 3], [1, 3]) }, RangeError, 'options.cuSeqlensNew.shape', /one-dimensional, got \[1, 3\]$/],
      [{ seqlensBefore: i32([9, 5], [2, 1]) }, RangeError, 'options.seqlensBefore.shape', /got \[2, 1\]$/],
      [{ cuSeqlensNew: Int32Array.from([0, 2, 1]) }, RangeError, 'options.cuSeqlensNew[2]', num(1)],
      [{ cuSeqlensNew: Int32Array.from([1, 2, 3]) }, RangeError, 'options.cuSeqlensNew[0]', num(1)],
      [{ cuSeqlensNew: Int32Array.from([0, 1, 2]) }, RangeError, 'options.cuSeqlensNew[2]', num(2)],
      [{ cuSeqlensNew: new Int32Array(0) }, RangeError, 'options.cuSeqlensNew.length', num(0)],
      [{ seqlensBefore: Int32Array.from([9]) }, RangeError, 'options.seqlensBefore.length', num(1)],
      [{ seqlensBefore: Int32Array.from([-1, 5]) }, RangeError, 'options.seqlensBefore[0]', num(-1)],
      [{ seqlensBefore: Int32Array.from([12, 5]) }, RangeError, 'options.seqlensBefore[0]', num(12)],
      [{ seqlensBefore: i32([9, 11]) }, RangeError, 'options.seqlensBefore[1]', num(11)],
      [{ seqlensBefore: 'x' }, TypeError, 'options.seqlensBefore', /'x'/],
      [{ rotary: { cos: s.cos } }, TypeError, 'options.rotary.sin', /undefined/],
      [{ rotary: { cos: f16([16, 2]), sin: s.sin } }, TypeError, 'options.rotary.cos.dtype', 'float16'],
      [{ rotary: { cos: s.cos, sin: f32([16, 2, 1]) } }, RangeError, 'options.rotary.sin.shape', /\[16, 2, 1\]/],
      [{ rotary: { cos: s.cos, sin: f32([16, 3]) } }, RangeError, 'options.rotary.sin.shape', /\[16, 3\]/],
      [{ rotary: { cos: f32([16, 5]), sin: f32([16, 5]) } }, RangeError, 'options.rotary.cos.shape[1]', num(5)],
      [{ rotary: { cos: f32([16, 0]), sin: f32([16, 0]) } }, RangeError, 'options.rotary.cos.shape[1]', num(0)],
      [{ rotary: { cos: s.cos, sin: s.sin, interleaved: 1 } }, TypeError, 'options.rotary.interleaved', num(1)],
      [{ rotary: { cos: f32([8, 2]), sin: f32([8, 2]) } }, RangeError, 'options.seqlensBefore[0]', /got 9 \(ending at 10\)$/],
      [{ causal: true }, TypeError, 'options.causal', /causal/],
    ];
    for (const [o, cls, arg, given] of bad) await expectRejects(() => appendKV(s.kc, s.vc, s.k, s.v, { ...ok, ...o } as never), cls, FN, arg, given);
    disposeAll(s.kc, s.vc, s.q, s.k, s.v, s.cos, s.sin);
  });

  it('a page index out of range in a later sequence: RangeError naming the entry, and neither cache is touched', async () => {
    const s = pagedSetup();
    const kb = await rawBytes(s.kc), vb = await rawBytes(s.vc);
    // Sequence 0 (9 tokens, 1 new) is valid; sequence 1 writes tokens 5, 6 into its page 1.
    for (const [entry, arg] of [[6, 'options.pageTable[1][1]'], [-1, 'options.pageTable[1][1]'], [2 ** 31 - 1, 'options.pageTable[1][1]']] as const) {
      const table = Int32Array.from(s.table);
      table[4] = entry;
      for (const pageTable of [table, Tensor.from(table, [2, 3])]) {
        await expectRejects(() => appendKV(s.kc, s.vc, s.k, s.v, {
          pageTable, cuSeqlensNew: Int32Array.from([0, 1, 3]), seqlensBefore: Int32Array.from([9, 5]),
        }), RangeError, FN, arg, num(entry));
      }
    }
    // Tokens past the page table in sequence 1, and rotary positions past cos for sequence 1.
    await expectRejects(() => appendKV(s.kc, s.vc, s.k, s.v, {
      pageTable: s.table, cuSeqlensNew: Int32Array.from([0, 1, 3]), seqlensBefore: Int32Array.from([0, 11]),
    }), RangeError, FN, 'options.seqlensBefore[1]', num(11));
    await expectRejects(() => appendKV(s.kc, s.vc, s.k, s.v, {
      pageTable: s.table, cuSeqlensNew: Int32Array.from([0, 1, 3]), seqlensBefore: Int32Array.from([0, 9]),
      rotary: { cos: f32([10, 2]), sin: f32([10, 2]) },
    }), RangeError, FN, 'options.seqlensBefore[1]', /got 9 \(ending at 11\)$/);
    expect(bytesEqual(await rawBytes(s.kc), kb), 'kCache changed by rejected calls').toBe(true);
    expect(bytesEqual(await rawBytes(s.vc), vb), 'vCache changed by rejected calls').toBe(true);
    // Pages the new tokens do not land in may hold anything (sequence 0 writes only into its page 2).
    const table = Int32Array.from([-7, 99, 3, 0, 2, 4]);
    await appendKV(s.kc, s.vc, s.k, s.v, { pageTable: table, cuSeqlensNew: Int32Array.from([0, 1, 3]), seqlensBefore: Int32Array.from([9, 5]) });
    const kNew = await toF64(s.k), kGot = await toF64(s.kc);
    const row = 2 * 8;
    const want = (t: number, page: number, slot: number) => kNew.subarray(t * row, (t + 1) * row).every((x, i) => x === kGot[(page * 4 + slot) * row + i]);
    expect([want(0, 3, 1), want(1, 2, 1), want(2, 2, 2)]).toEqual([true, true, true]);
    disposeAll(s.kc, s.vc, s.q, s.k, s.v, s.cos, s.sin);
  });

  it('a cache row written twice in one call: RangeError naming the later entry, nothing written; shared pages that one side reads are fine', async () => {
    const s = pagedSetup();
    const kb = await rawBytes(s.kc), vb = await rawBytes(s.vc);
    const k5 = f32([5, 2, 8], 16), v5 = f32([5, 2, 8], 17);
    // the message names the row, the page and the other entry, then the given page index
    const rejected: Array<[Int32Array, Int32Array, Int32Array, Tensor, Tensor, string, RegExp]> = [
      // sequences 0 and 1 both write row 1 of page 5 (their page 0)
      [Int32Array.from([5, 1, 3, 5, 2, 4]), Int32Array.from([0, 1, 3]), Int32Array.from([1, 1]), s.k, s.v,
        'options.pageTable[1][0]', /row 1 of page 5 is also written through sequence 0's pageTable\[0\]\[0\]\), got 5$/],
      // sequence 1's five new tokens fill its page 0 and start its page 1: the same page 4
      [Int32Array.from([5, 1, 3, 4, 4, 0]), Int32Array.from([0, 0, 5]), Int32Array.from([0, 0]), k5, v5,
        'options.pageTable[1][1]', /row 0 of page 4 is also written through this sequence's pageTable\[1\]\[0\]\), got 4$/],
    ];
    for (const [table, cuSeqlensNew, seqlensBefore, k, v, arg, why] of rejected) {
      for (const pageTable of [table, Tensor.from(table, [2, 3])]) {
        await expectRejects(() => appendKV(s.kc, s.vc, k, v, { pageTable, cuSeqlensNew, seqlensBefore }), RangeError, FN, arg, why);
      }
    }
    expect(bytesEqual(await rawBytes(s.kc), kb), 'kCache changed by rejected calls').toBe(true);
    expect(bytesEqual(await rawBytes(s.vc), vb), 'vCache changed by rejected calls').toBe(true);
    const kNew = await toF64(s.k), row = 2 * 8;
    const holds = async (t: number, page: number, slot: number) => {
      const got = await toF64(s.kc);
      return kNew.subarray(t * row, (t + 1) * row).every((x, i) => x === got[(page * 4 + slot) * row + i]);
    };
    // a shared prefix page (5) that neither sequence writes into
    await appendKV(s.kc, s.vc, s.k, s.v, { pageTable: Int32Array.from([5, 1, 3, 5, 2, 4]), cuSeqlensNew: Int32Array.from([0, 1, 3]), seqlensBefore: Int32Array.from([9, 5]) });
    expect([await holds(0, 3, 1), await holds(1, 2, 1), await holds(2, 2, 2)]).toEqual([true, true, true]);
    // one page whose rows the two sequences share out: row 0 for sequence 0, rows 1-2 for sequence 1
    await appendKV(s.kc, s.vc, s.k, s.v, { pageTable: Int32Array.from([0, 1, 3, 0, 2, 4]), cuSeqlensNew: Int32Array.from([0, 1, 3]), seqlensBefore: Int32Array.from([0, 1]) });
    expect([await holds(0, 0, 0), await holds(1, 0, 1), await holds(2, 0, 2)]).toEqual([true, true, true]);
    disposeAll(s.kc, s.vc, s.q, s.k, s.v, s.cos, s.sin, k5, v5);
  });

  it('random page tables with repeated pages: refused exactly when two new tokens land on one cache row, else every token in its row', async () => {
    const rng = new Rng(90210);
    let refused = 0, accepted = 0;
    for (let c = 0; c < 300; c++) {
      const P = rng.int(1, 5), numPages = rng.int(1, 8), B = rng.int(1, 4), maxPages = rng.int(1, 4);
      const table = Int32Array.from({ length: B * maxPages }, () => rng.int(0, numPages - 1));
      const before = new Int32Array(B), cu = new Int32Array(B + 1);
      for (let b = 0; b < B; b++) {
        before[b] = rng.int(0, maxPages * P);
        cu[b + 1] = cu[b] + rng.int(0, Math.min(maxPages * P - before[b], 2 * P));
      }
      // the rows the new tokens land in (page * P + slot), in order, and whether one repeats
      const rows: number[] = [];
      for (let b = 0; b < B; b++) {
        for (let t = before[b]; t < before[b] + cu[b + 1] - cu[b]; t++) rows.push(table[b * maxPages + Math.floor(t / P)] * P + (t % P));
      }
      const twice = new Set(rows).size < rows.length;
      const kc = await Tensor.zeros([numPages, P, 1, 8]), vc = await Tensor.zeros([numPages, P, 1, 8]);
      const k = f32([rows.length, 1, 8], 100 + c), v = f32([rows.length, 1, 8], 400 + c);
      const call = appendKV(kc, vc, k, v, { pageTable: table, cuSeqlensNew: cu, seqlensBefore: before });
      const label = `P ${P} pages ${numPages} table [${table}] before [${before}] cu [${cu}]`;
      if (twice) {
        await expect(call, label).rejects.toThrow(/^appendKV: options\.pageTable\[\d\]\[\d\] must not name a page whose rows another new token writes too/);
        expect((await toF64(kc)).every((x) => x === 0), `${label}: kCache written by a refused call`).toBe(true);
        refused++;
      } else {
        await call;
        const kNew = await toF64(k), vNew = await toF64(v), kGot = await toF64(kc), vGot = await toF64(vc);
        rows.forEach((r, i) => {
          for (let d = 0; d < 8; d++) {
            expect(kGot[r * 8 + d], `${label}: token ${i} k`).toBe(kNew[i * 8 + d]);
            expect(vGot[r * 8 + d], `${label}: token ${i} v`).toBe(vNew[i * 8 + d]);
          }
        });
        accepted++;
      }
      disposeAll(kc, vc, k, v);
    }
    // both outcomes well represented
    expect(Math.min(refused, accepted)).toBeGreaterThan(50);
  });

  it('many sequences writing rows of one page (the sorted check): refused exactly when a row repeats', async () => {
    // Hundreds of one- to three-token ranges on each of two large pages pass checkWrittenRows' budget of
    // comparisons, so these calls are checked by sorting their ranges.
    const rng = new Rng(4242);
    const P = 1024, numPages = 2;
    const kc = await Tensor.zeros([numPages, P, 1, 8]), vc = await Tensor.zeros([numPages, P, 1, 8]);
    let refused = 0, accepted = 0;
    for (let c = 0; c < 40; c++) {
      const B = rng.int(200, 400);
      const clash = c % 2 === 0;  // half the cases: every sequence's rows its own; the others: one row twice
      const table = new Int32Array(B), before = new Int32Array(B), cu = new Int32Array(B + 1);
      const used = [new Set<number>(), new Set<number>()];
      for (let b = 0; b < B; b++) {
        const page = rng.int(0, 1), n = rng.int(0, 3);
        let start = rng.int(0, P - n);
        for (let tries = 0; tries < 50 && [...Array(n).keys()].some((i) => used[page].has(start + i)); tries++) start = rng.int(0, P - n);
        for (let i = 0; i < n; i++) used[page].add(start + i);
        table[b] = page;
        before[b] = start;
        cu[b + 1] = cu[b] + n;
      }
      const rows: number[] = [];
      for (let b = 0; b < B; b++) for (let t = before[b]; t < before[b] + cu[b + 1] - cu[b]; t++) rows.push(table[b] * P + t);
      if (clash) {  // one sequence's first new token moved onto a row another writes
        const b = Array.from({ length: B }, (_, i) => i).find((i) => cu[i + 1] > cu[i] && i > 0)!;
        const other = rows[rng.int(0, rows.length - 1)];
        table[b] = Math.floor(other / P);
        before[b] = Math.min(other % P, P - (cu[b + 1] - cu[b]));
      }
      const rowsNow: number[] = [];
      for (let b = 0; b < B; b++) for (let t = before[b]; t < before[b] + cu[b + 1] - cu[b]; t++) rowsNow.push(table[b] * P + t);
      const twice = new Set(rowsNow).size < rowsNow.length;
      const k = f32([rowsNow.length, 1, 8], 900 + c), v = f32([rowsNow.length, 1, 8], 950 + c);
      const call = appendKV(kc, vc, k, v, { pageTable: table, cuSeqlensNew: cu, seqlensBefore: before });
      if (twice) {
        await expect(call).rejects.toThrow(/^appendKV: options\.pageTable\[\d+\]\[0\] must not name a page whose rows another new token writes too \(row \d+ of page [01] is also written through/);
        refused++;
      } else {
        await call;
        accepted++;
      }
      disposeAll(k, v);
    }
    expect(Math.min(refused, accepted)).toBeGreaterThan(10);
    // 8192 one-token sequences on one page of 8192 rows, all rows distinct, then one row twice
    const big = 8192;
    const kb = await Tensor.zeros([1, big, 1, 8]), vb = await Tensor.zeros([1, big, 1, 8]);
    const kn = f32([big, 1, 8], 7), vn = f32([big, 1, 8], 8);
    const order = Int32Array.from({ length: big }, (_, i) => (i * 4099) % big);  // every row once, shuffled
    const opts = { pageTable: new Int32Array(big), cuSeqlensNew: Int32Array.from({ length: big + 1 }, (_, i) => i), seqlensBefore: order };
    await appendKV(kb, vb, kn, vn, opts);
    const got = await toF64(kb), want = await toF64(kn);
    expect(Array.from(order).every((row, b) => got[row * 8] === want[b * 8])).toBe(true);
    const twiceOrder = order.slice();
    twiceOrder[5000] = twiceOrder[17];
    await expect(appendKV(kb, vb, kn, vn, { ...opts, seqlensBefore: twiceOrder })).rejects.toThrow(
      new RegExp(`options\\.pageTable\\[5000\\]\\[0\\] must not name a page whose rows another new token writes too \\(row ${order[17]} of page 0 is also written through sequence 17's`));
    disposeAll(kc, vc, kb, vb, kn, vn);
  });
});

describe('CPU audit errors: pagedAttention', () => {
  const FN = 'pagedAttention';
  it('bad tensors and options are rejected with the argument named', async () => {
    const s = pagedSetup();
    const ok = { pageTable: s.table, seqlensK: Int32Array.from([10, 7]), cuSeqlensQ: Int32Array.from([0, 1, 3]) };
    await expectRejects(() => pagedAttention(s.q, s.kc, s.vc, undefined as never), TypeError, FN, 'options', /undefined/);
    await expectRejects(() => pagedAttention(f32([1, 3, 4, 8]), s.kc, s.vc, ok), RangeError, FN, 'q.shape', /\[1, 3, 4, 8\]/);
    await expectRejects(() => pagedAttention(f32([3, 4, 16]), s.kc, s.vc, ok), RangeError, FN, 'q.shape[2]', num(16));
    await expectRejects(() => pagedAttention(f32([3, 3, 8]), s.kc, s.vc, ok), RangeError, FN, 'kCache.shape[2]', num(2));
    await expectRejects(() => pagedAttention(f16([3, 4, 8]), s.kc, s.vc, ok), TypeError, FN, 'kCache.dtype', /float16/);
    await expectRejects(() => pagedAttention(s.q, s.kc, f32([6, 4, 2, 4]), ok), RangeError, FN, 'vCache.shape[3]', num(4));
    const gone = f32([6, 4, 2, 8]);
    gone.dispose();
    await expectRejects(() => pagedAttention(s.q, gone, s.vc, ok), TypeError, FN, 'kCache', /kCache is disposed/);
    const cos43 = f32([4, 3]);
    const bad: Array<[Record<string, unknown>, ErrClass, string, string | RegExp]> = [
      [{ pageTable: undefined }, TypeError, 'options.pageTable', /undefined/],
      [{ pageTable: Int32Array.from([5, 1, 3, 0, 2, 4, 1]) }, RangeError, 'options.pageTable.length', num(7)],
      [{ pageTable: Int32Array.from([5, 1, 3, 0, 6, 4]) }, RangeError, 'options.pageTable[1][1]', num(6)],
      [{ pageTable: Int32Array.from([5, -1, 3, 0, 2, 4]) }, RangeError, 'options.pageTable[0][1]', num(-1)],
      [{ pageTable: i32([5, 1, 3, 0, 2, 4], [1, 6]) }, RangeError, 'options.pageTable.shape[0]', num(1)],
      [{ pageTable: i32([5, 1, 3, 0, 2, 4], [2, 3]), seqlensK: Int32Array.from([10, 13]) }, RangeError, 'options.seqlensK[1]', num(13)],
      [{ seqlensK: Int32Array.from([10]) }, RangeError, 'options.seqlensK.length', num(1)],
      [{ seqlensK: Int32Array.from([-3, 7]) }, RangeError, 'options.seqlensK[0]', num(-3)],
      [{ seqlensK: Int32Array.from([13, 7]) }, RangeError, 'options.seqlensK[0]', num(13)],
      [{ seqlensK: new Float32Array(2) }, TypeError, 'options.seqlensK', /Float32Array/],
      [{ seqlensK: i32([10, 7]).to('cpu') }, TypeError, 'options.seqlensK', /Promise/],
      [{ cuSeqlensQ: Int32Array.from([0, 2, 1]) }, RangeError, 'options.cuSeqlensQ[2]', num(1)],
      [{ cuSeqlensQ: Int32Array.from([0, 1, 4]) }, RangeError, 'options.cuSeqlensQ[2]', num(4)],
      [{ cuSeqlensQ: new Int32Array(0) }, RangeError, 'options.cuSeqlensQ.length', num(0)],
      [{ numSplits: 33 }, RangeError, 'options.numSplits', num(33)],
      [{ numSplits: -1 }, RangeError, 'options.numSplits', num(-1)],
      [{ numSplits: 2.5 }, RangeError, 'options.numSplits', /2\.5/],
      [{ numSplits: '4' }, TypeError, 'options.numSplits', /'4'/],
      [{ maxSeqlenK: 9 }, RangeError, 'options.maxSeqlenK', num(9)],
      [{ maxSeqlenQ: 1 }, RangeError, 'options.maxSeqlenQ', num(1)],
      [{ window: [0.5, 0] }, RangeError, 'options.window[0]', /0\.5/],
      [{ softcap: -2 }, RangeError, 'options.softcap', num(-2)],
      [{ scale: NaN }, RangeError, 'options.scale', /NaN/],
      [{ layout: 'bshd' }, TypeError, 'options.layout', /layout/],
      [{ rotary: { cos: s.cos, sin: s.sin }, seqlensK: Int32Array.from([10, 1]) }, RangeError, 'options.seqlensK[1]', num(1)],
      [{ rotary: { cos: f32([9, 2]), sin: f32([9, 2]) } }, RangeError, 'options.seqlensK[0]', num(10)],
      [{ rotary: { cos: s.cos, sin: f16([16, 2]) } }, TypeError, 'options.rotary.sin.dtype', 'float16'],
      [{ rotary: { cos: f32([16, 6]), sin: f32([16, 6]) } }, RangeError, 'options.rotary.cos.shape[1]', num(6)],
      [{ out: f32([3, 4, 4]) }, RangeError, 'options.out.shape', /\[3, 4, 4\]/],
      [{ lse: f16([4, 3]) }, TypeError, 'options.lse.dtype', 'float16'],
      [{ out: s.q }, TypeError, 'options.out', /same Tensor/],
      // a rotary table of lse's shape [H, totalQ] (4 positions, rotary dim 6) given as lse too
      [{ rotary: { cos: cos43, sin: f32([4, 3]) }, seqlensK: Int32Array.from([4, 4]), lse: cos43 }, TypeError, 'options.lse', /same Tensor/],
    ];
    for (const [o, cls, arg, given] of bad) await expectRejects(() => pagedAttention(s.q, s.kc, s.vc, { ...ok, ...o } as never), cls, FN, arg, given);
    disposeAll(s.kc, s.vc, s.q, s.k, s.v, s.cos, s.sin);
  });

  it('a rejected call leaves a caller-owned out / lse untouched; pages past seqlensK may hold anything', async () => {
    const s = pagedSetup();
    const out = Tensor.from(new Float32Array(3 * 4 * 8).fill(7), [3, 4, 8]), lse = Tensor.from(new Float32Array(4 * 3).fill(7), [4, 3]);
    await expectRejects(() => pagedAttention(s.q, s.kc, s.vc, {
      pageTable: Int32Array.from([5, 1, 3, 0, 2, 6]), seqlensK: Int32Array.from([10, 9]), cuSeqlensQ: Int32Array.from([0, 1, 3]), out, lse,
    }), RangeError, FN, 'options.pageTable[1][2]', num(6));
    expect((await out.toFloat32Array()).every((x) => x === 7)).toBe(true);
    expect((await lse.toFloat32Array()).every((x) => x === 7)).toBe(true);
    // Sequence 1 uses 2 of its 3 pages: its last entry is never read, and the answer is the reference.
    const r = await pagedAttention(s.q, s.kc, s.vc, {
      pageTable: Int32Array.from([5, 1, 3, 0, 2, 1234]), seqlensK: Int32Array.from([10, 7]), cuSeqlensQ: Int32Array.from([0, 1, 3]), out, lse,
    });
    const kc = await toF64(s.kc), vc = await toF64(s.vc), q = await toF64(s.q), o = await toF64(r.out);
    const gather = (c: Float64Array, pages: number[], n: number) => {
      const x = new Float64Array(n * 16);
      for (let t = 0; t < n; t++) x.set(c.subarray((pages[t >> 2] * 4 + (t & 3)) * 16, (pages[t >> 2] * 4 + (t & 3) + 1) * 16), t * 16);
      return x;
    };
    const ck = new Checker('paged: unused table entry ignored');
    const d = (nq: number, nk: number) => ({ B: 1, Nq: nq, Nk: nk, H: 4, Hkv: 2, D: 8, causal: false, scale: defaultScale(8), layout: 'bshd' as const });
    checkFp32(ck, 'out seq 0', o.subarray(0, 32), refForward(q.subarray(0, 32), gather(kc, [5, 1, 3], 10), gather(vc, [5, 1, 3], 10), d(1, 10)).out);
    checkFp32(ck, 'out seq 1', o.subarray(32), refForward(q.subarray(32), gather(kc, [0, 2], 7), gather(vc, [0, 2], 7), d(2, 7)).out);
    ck.done();
    disposeAll(s.kc, s.vc, s.q, s.k, s.v, s.cos, s.sin, out, lse);
  });
});

describe('CPU audit errors: mergeAttention', () => {
  const FN = 'mergeAttention';
  it('bad outs / lses are rejected with the argument named', async () => {
    const o = [f32([5, 2, 8], 1), f32([5, 2, 8], 2)], l = [f32([2, 5], 3), f32([2, 5], 4)];
    const bad: Array<[unknown, unknown, ErrClass, string, string | RegExp]> = [
      [o[0], l, TypeError, 'outs', /Tensor/],
      [o, 'x', TypeError, 'lses', /'x'/],
      [[], [], RangeError, 'outs.length', num(0)],
      [o, [l[0]], RangeError, 'lses.length', num(1)],
      [[o[0], null], l, TypeError, 'outs[1]', /null/],
      [[o[0], f32([5, 2, 4])], l, RangeError, 'outs[1].shape', /\[5, 2, 4\]/],
      [[o[0], f16([5, 2, 8])], l, TypeError, 'outs[1].dtype', 'float16'],
      [[f32([5, 16]), f32([5, 16])], l, RangeError, 'outs[0].shape', /\[5, 16\]/],
      [[i32(new Array(80).fill(0), [5, 2, 8])], [l[0]], TypeError, 'outs[0].dtype', 'int32'],
      [o, [f32([1, 2, 5]), l[1]], RangeError, 'lses[0].shape', /\[1, 2, 5\]/],
      [o, [l[0], f32([5, 2])], RangeError, 'lses[1].shape', /\[5, 2\]/],
      [o, [l[0], f16([2, 5])], TypeError, 'lses[1].dtype', 'float16'],
      [o, [l[0], 3], TypeError, 'lses[1]', num(3)],
      [[f32([5, 2, 0]), f32([5, 2, 0])], l, RangeError, 'outs[0].shape[2] (headDim)', num(0)],
      [[f32([1, 5, 2, 0])], [f32([1, 2, 5])], RangeError, 'outs[0].shape[3] (headDim)', num(0)],
    ];
    for (const [outs, lses, cls, arg, given] of bad) await expectRejects(() => mergeAttention(outs as never, lses as never), cls, FN, arg, given);
    await expectRejects(() => mergeAttention(o, l, { out: f32([5, 2, 4]) }), RangeError, FN, 'options.out.shape', /\[5, 2, 4\]/);
    await expectRejects(() => mergeAttention(o, l, { out: o[1] }), TypeError, FN, 'options.out', /same Tensor/);
    const gone = f32([2, 5]);
    gone.dispose();
    await expectRejects(() => mergeAttention(o, [l[0], gone]), TypeError, FN, 'lses[1]', /lses\[1\] is disposed/);
    disposeAll(...o, ...l);
  });
});

describe('CPU audit: malformed calls at the new entry points never crash the process', () => {
  it('hostile values in every tensor / index argument give TypeError or RangeError; the addon is still right afterwards', async () => {
    const s = pagedSetup();
    const gone = f32([2, 2]);
    gone.dispose();
    const hostile: Array<[string, () => unknown]> = [
      ['undefined', () => undefined], ['null', () => null], ['0', () => 0], ['NaN', () => NaN], ['-1', () => -1],
      ['string', () => 'abc'], ['true', () => true], ['symbol', () => Symbol('x')], ['bigint', () => 5n], ['[]', () => []],
      ['[0, 1]', () => [0, 1]], ['{}', () => ({})], ['Float32Array', () => new Float32Array(6)], ['Uint32Array', () => new Uint32Array(3)],
      ['fake tensor', () => ({ shape: [3, 4, 8], dtype: 'int32', device: 'cpu', disposed: false })],
      ['Object.create(Tensor.prototype)', () => Object.create(Tensor.prototype)], ['disposed tensor', () => gone],
      ['function', () => () => 1], ['Proxy', () => new Proxy({}, {})],
    ];
    const cuQ = Int32Array.from([0, 1, 3]);
    const varlen = { cuSeqlensQ: cuQ, cuSeqlensK: cuQ };
    const paged = { pageTable: s.table, seqlensK: Int32Array.from([10, 7]), cuSeqlensQ: cuQ };
    const append = { pageTable: s.table, cuSeqlensNew: cuQ, seqlensBefore: Int32Array.from([9, 5]) };
    const kv = f32([3, 2, 8], 21);
    const fv = await flashAttentionVarlen(s.q, kv, kv, varlen);
    const lse2 = f32([2, 3], 22);
    const calls: Array<[string, () => unknown]> = [];
    for (const [name, mk] of hostile) {
      for (let i = 0; i < 3; i++) {
        calls.push([`flashAttentionVarlen(arg${i}=${name})`, () => {
          const a: unknown[] = [s.q, kv, kv];
          a[i] = mk();
          return flashAttentionVarlen(a[0] as Tensor, a[1] as Tensor, a[2] as Tensor, varlen);
        }]);
      }
      for (let i = 0; i < 6; i++) {
        calls.push([`flashAttentionVarlenBackward(arg${i}=${name})`, () => {
          const a: unknown[] = [s.q, s.q, kv, kv, fv.out, fv.lse];
          a[i] = mk();
          return flashAttentionVarlenBackward(a[0] as Tensor, a[1] as Tensor, a[2] as Tensor, a[3] as Tensor, a[4] as Tensor, a[5] as Tensor, varlen);
        }]);
      }
      for (let i = 0; i < 3; i++) {
        calls.push([`pagedAttention(arg${i}=${name})`, () => {
          const a: unknown[] = [s.q, s.kc, s.vc];
          a[i] = mk();
          return pagedAttention(a[0] as Tensor, a[1] as Tensor, a[2] as Tensor, paged);
        }]);
      }
      for (let i = 0; i < 4; i++) {
        calls.push([`appendKV(arg${i}=${name})`, () => {
          const a: unknown[] = [s.kc, s.vc, s.k, s.v];
          a[i] = mk();
          return appendKV(a[0] as Tensor, a[1] as Tensor, a[2] as Tensor, a[3] as Tensor, append);
        }]);
      }
      for (const key of ['cuSeqlensQ', 'cuSeqlensK'] as const) {
        calls.push([`flashAttentionVarlen(${key}=${name})`, () => flashAttentionVarlen(s.q, kv, kv, { ...varlen, [key]: mk() } as never)]);
      }
      for (const key of ['pageTable', 'seqlensK', 'cuSeqlensQ'] as const) {
        calls.push([`pagedAttention(${key}=${name})`, () => pagedAttention(s.q, s.kc, s.vc, { ...paged, [key]: mk() } as never)]);
      }
      for (const key of ['pageTable', 'cuSeqlensNew', 'seqlensBefore'] as const) {
        calls.push([`appendKV(${key}=${name})`, () => appendKV(s.kc, s.vc, s.k, s.v, { ...append, [key]: mk() } as never)]);
      }
      if (name !== 'undefined') {
        calls.push([`pagedAttention(rotary=${name})`, () => pagedAttention(s.q, s.kc, s.vc, { ...paged, rotary: mk() } as never)]);
        calls.push([`appendKV(rotary.cos=${name})`, () => appendKV(s.kc, s.vc, s.k, s.v, { ...append, rotary: { cos: mk(), sin: s.sin } } as never)]);
        if (name !== '[0, 1]') calls.push([`flashAttentionVarlen(window=${name})`, () => flashAttentionVarlen(s.q, kv, kv, { ...varlen, window: mk() } as never)]);
        calls.push([`pagedAttention(out=${name})`, () => pagedAttention(s.q, s.kc, s.vc, { ...paged, out: mk() } as never)]);
      }
      calls.push([`mergeAttention(outs[1]=${name})`, () => mergeAttention([fv.out, mk() as Tensor], [fv.lse, fv.lse])]);
      calls.push([`mergeAttention(lses[0]=${name})`, () => mergeAttention([fv.out], [mk() as Tensor])]);
      calls.push([`mergeAttention(outs=${name})`, () => mergeAttention(mk() as Tensor[], [lse2])]);
    }
    for (const fn of [flashAttentionVarlen, flashAttentionVarlenBackward, pagedAttention, appendKV, mergeAttention]) {
      calls.push([`${fn.name}()`, () => (fn as unknown as () => unknown)()]);
    }
    expect(calls.length).toBeGreaterThan(400);
    const problems: string[] = [];
    const kcBefore = await rawBytes(s.kc);
    for (const [label, thunk] of calls) {
      let p: unknown;
      try {
        p = thunk();
      } catch (e) {
        problems.push(`${label}: threw synchronously: ${String(e)}`);
        continue;
      }
      try {
        const v = await p;
        problems.push(`${label}: succeeded`);
        if (v && typeof v === 'object') for (const t of Object.values(v)) if (t instanceof Tensor) disposeAll(t);
      } catch (e) {
        if (!(e instanceof TypeError || e instanceof RangeError)) problems.push(`${label}: rejected with a non-TypeError/RangeError: ${String(e)}`);
        // (a forged Object.create(Tensor.prototype) too: Tensor.isTensor is a brand check)
        else if (!/^[A-Za-z]+: /.test(e.message)) problems.push(`${label}: message does not start with the function name: ${e.message}`);
      }
    }
    expect(problems).toEqual([]);
    expect(bytesEqual(await rawBytes(s.kc), kcBefore), 'kCache written by a rejected call').toBe(true);
    // Still right: a varlen call checked against the float64 reference.
    const r = await flashAttentionVarlen(s.q, kv, kv, { ...varlen, causal: true });
    const q = await toF64(s.q), k = await toF64(kv), o = await toF64(r.out);
    const ck = new Checker('after the fuzz');
    for (const [r0, n] of [[0, 1], [1, 2]]) {
      const ref = refForward(q.subarray(r0 * 32, (r0 + n) * 32), k.subarray(r0 * 16, (r0 + n) * 16), k.subarray(r0 * 16, (r0 + n) * 16),
        { B: 1, Nq: n, Nk: n, H: 4, Hkv: 2, D: 8, causal: true, scale: defaultScale(8), layout: 'bshd' });
      checkFp32(ck, `out rows ${r0}..${r0 + n - 1}`, o.subarray(r0 * 32, (r0 + n) * 32), ref.out);
    }
    ck.done();
    disposeAll(s.kc, s.vc, s.q, s.k, s.v, s.cos, s.sin, kv, fv.out, fv.lse, lse2, r.out, r.lse);
  });
});


describe('CPU audit errors: nested option objects and forged tensors are named', () => {
  const q = () => Tensor.from(new Float32Array(2 * 3 * 2 * 8).fill(0.5), [2, 3, 2, 8]);
  it('options.cpu and options.rotary name their own path', async () => {
    const t = q();
    await expect(flashAttention(t, t, t, { cpu: 42 } as never)).rejects.toThrow(
      new TypeError('flashAttention: options.cpu must be an object or undefined, got 42'));
    await expect(flashAttention(t, t, t, { cpu: { threds: 1 } } as never)).rejects.toThrow(
      /^flashAttention: options\.cpu\.threds is not an option \(did you mean options\.cpu\.threads\?\); expected one of blockM, blockN, threads, got 'threds'$/);
    await expect(flashAttentionBackward(t, t, t, t, t, Tensor.from(new Float32Array(12), [2, 2, 3]), { cpu: 'x' } as never)).rejects.toThrow(
      /^flashAttentionBackward: options\.cpu must be an object or undefined, got 'x'$/);
    const s = pagedSetup();
    const cu = Int32Array.from([0, 1, 3]);
    const paged = { pageTable: s.table, seqlensK: Int32Array.from([10, 7]), cuSeqlensQ: cu };
    await expect(pagedAttention(s.q, s.kc, s.vc, { ...paged, rotary: 5 } as never)).rejects.toThrow(
      /^pagedAttention: options\.rotary must be an object or undefined, got 5$/);
    await expect(appendKV(s.kc, s.vc, s.k, s.v, { pageTable: s.table, cuSeqlensNew: cu, seqlensBefore: Int32Array.from([9, 5]),
      rotary: { cos: s.cos, sin: s.sin, interleave: true } } as never)).rejects.toThrow(
      /^appendKV: options\.rotary\.interleave is not an option \(did you mean options\.rotary\.interleaved\?\)/);
    await expect(pagedAttention(s.q, s.kc, s.vc, { ...paged, cpu: { thread: 2 } } as never)).rejects.toThrow(
      /^pagedAttention: options\.cpu\.thread is not an option/);
    disposeAll(t, s.kc, s.vc, s.q, s.k, s.v, s.cos, s.sin);
  });
  it('an object that only has Tensor.prototype is not a Tensor: TypeError naming the function and argument', async () => {
    const t = q();
    const forged = Object.create(Tensor.prototype) as Tensor;
    await expect(flashAttention(t, forged, t)).rejects.toThrow(new TypeError('flashAttention: k must be a Tensor, got a Tensor'));
    await expect(flashAttentionVarlen(forged, t, t, { cuSeqlensQ: Int32Array.from([0, 2]), cuSeqlensK: Int32Array.from([0, 2]) } as never))
      .rejects.toThrow(/^flashAttentionVarlen: q must be a Tensor/);
    expect(Tensor.isTensor(t)).toBe(true);
    expect(Tensor.isTensor(forged)).toBe(false);
    expect(Tensor.isTensor(null)).toBe(false);
    disposeAll(t);
  });
});
