// CPU backend: the masks and score modifiers (sliding window, causal + window, softcap with large
// scores) in forward and backward, packed variable-length batches (empty sequences included) forward
// and backward, the paged KV cache (appendKV with rotary in both layouts and partial dims, page sizes
// 1..16 with shuffled pages, pagedAttention for decode, prefill chunks and both mixed), and
// mergeAttention; all against float64 references, index arrays as Int32Array and as int32 tensors.
// GQA groups that are not powers of two (3, 5, 6, 7) with short query counts run the forward's
// head packing (several query heads of a group in one task) with packs of every size. Long caches
// with few tasks run the key splits and their combine. Decode steps pack the groups of several kv
// heads into one task.
import { describe, it } from 'vitest';
import { caseName, checkBackwardCase, checkForwardCase, type AttnCase } from '../helpers/harness';
import { checkMergeCase, checkPagedCase, checkVarlenCase, pagedName, varlenName, type PagedCase, type VarlenCase } from '../helpers/inference';
import { maskedDenseCases, mergeCases, pagedCases, randomMask, varlenCases } from '../helpers/inference-cases';
import { Rng } from '../helpers/reference';

const DS = [8, 16, 24, 40, 64];

describe('CPU: window and softcap (dense)', () => {
  for (const c of maskedDenseCases(7101, 24, { Ns: [1, 5, 17, 33, 64, 100], Ds: [3, 8, 16, 33, 64], budget: 2e6, gpu: false })) {
    it(`forward ${caseName(c)}`, () => checkForwardCase(c, 'cpu'));
  }
  for (const c of maskedDenseCases(7102, 16, { Ns: [1, 5, 17, 33, 64], Ds: [4, 8, 16, 40], budget: 8e5, gpu: false })) {
    it(`backward ${caseName(c)}`, () => checkBackwardCase(c, 'cpu'));
  }
});

describe('CPU: variable-length batches', () => {
  for (const c of varlenCases(7201, 16, { maxLen: 70, Ds: DS, maxB: 5, backward: false, gpu: false })) {
    it(`forward ${varlenName(c)}`, () => checkVarlenCase(c, 'cpu'));
  }
  for (const c of varlenCases(7202, 12, { maxLen: 50, Ds: DS, maxB: 4, backward: true, gpu: false })) {
    it(`backward ${varlenName(c)}`, () => checkVarlenCase(c, 'cpu'));
  }
});

describe('CPU: paged KV cache (appendKV + pagedAttention)', () => {
  for (const c of pagedCases(7301, 24, { maxBefore: 80, maxFresh: 24, Ds: DS, maxB: 4, gpu: false, pageSizes: [1, 2, 3, 7, 16] })) {
    it(pagedName(c), () => checkPagedCase(c, 'cpu'));
  }
});

describe('CPU: GQA groups 3, 5, 6, 7 with short queries (the forward packs the heads of a group)', () => {
  const groups = [3, 5, 6, 7];
  for (const c of maskedDenseCases(7501, 10, { Ns: [1, 2, 3, 9, 21, 40], Ds: [8, 24, 64], budget: 2e6, gpu: false, groups })) {
    it(`forward ${caseName(c)}`, () => checkForwardCase(c, 'cpu'));
  }
  for (const c of varlenCases(7502, 8, { maxLen: 24, Ds: DS, maxB: 5, backward: false, gpu: false, groups })) {
    it(`varlen ${varlenName(c)}`, () => checkVarlenCase(c, 'cpu'));
  }
  for (const c of pagedCases(7503, 12, { maxBefore: 80, maxFresh: 12, Ds: DS, maxB: 4, gpu: false, pageSizes: [1, 3, 16], groups })) {
    it(`paged ${pagedName(c)}`, () => checkPagedCase(c, 'cpu'));
  }
});

describe('CPU: long keys with few tasks (a decode step split over the keys, then combined)', () => {
  // Fewer than 32 tasks and 2048 or more keys: each task's keys are split into pieces (fwd_splits).
  const dense: AttnCase[] = [
    { seed: 7601, B: 1, Nq: 1, Nk: 4100, H: 8, Hkv: 1, D: 64, causal: true, layout: 'bshd', dtype: 'float16' },
    { seed: 7602, B: 2, Nq: 3, Nk: 2100, H: 6, Hkv: 2, D: 40, causal: true, layout: 'bhsd', dtype: 'float32', window: [700, 0] },
    { seed: 7603, B: 1, Nq: 2, Nk: 3000, H: 4, Hkv: 4, D: 16, causal: false, layout: 'bshd', dtype: 'bfloat16', softcap: 30, scale: 1.0 },
    { seed: 7604, B: 1, Nq: 40, Nk: 2500, H: 4, Hkv: 2, D: 64, causal: true, layout: 'bshd', dtype: 'float32', cpu: { threads: 3 } },
    { seed: 7605, B: 3, Nq: 1, Nk: 5000, H: 2, Hkv: 1, D: 8, causal: false, layout: 'bhsd', dtype: 'float16', window: [10, 10] },
  ];
  for (const c of dense) it(`forward ${caseName(c)}`, () => checkForwardCase(c, 'cpu'));
  const varlen: VarlenCase[] = [
    { seed: 7611, lensQ: [1, 3], lensK: [3000, 2200], H: 8, Hkv: 1, D: 64, dtype: 'float16', causal: true },
    { seed: 7612, lensQ: [2, 0, 1], lensK: [2600, 10, 0], H: 6, Hkv: 2, D: 40, dtype: 'float32', window: [1500, 0] },
    { seed: 7613, lensQ: [4], lensK: [4500], H: 4, Hkv: 4, D: 16, dtype: 'bfloat16', softcap: 30, scale: 1.0 },
  ];
  for (const c of varlen) it(`varlen ${varlenName(c)}`, () => checkVarlenCase(c, 'cpu'));
  // A caller's numSplits is taken as given (up to one split per key tile), short caches included.
  const split: PagedCase[] = [
    { seed: 7621, before: [300, 40], fresh: [1, 1], pageSize: 16, H: 8, Hkv: 2, D: 64, dtype: 'float16', causal: true, numSplits: 7 },
    { seed: 7622, before: [2000], fresh: [3], pageSize: 5, H: 4, Hkv: 1, D: 40, dtype: 'float32', window: [900, 0], numSplits: 3 },
    { seed: 7623, before: [10, 0, 900], fresh: [2, 1, 1], pageSize: 1, H: 6, Hkv: 3, D: 16, dtype: 'bfloat16', softcap: 30, numSplits: 32 },
    // fp32 with pages of at least a key tile: tiles read in place end at page boundaries.
    { seed: 7624, before: [3000, 2100], fresh: [1, 2], pageSize: 128, H: 4, Hkv: 2, D: 64, dtype: 'float32', causal: true },
    { seed: 7625, before: [2500], fresh: [1], pageSize: 96, H: 2, Hkv: 1, D: 32, dtype: 'float32', window: [1800, 0], numSplits: 5 },
    // softcaps far above the scores, lse held to the fp32 rule (lseFp32Rule; the GPU twins: test/cuda/inference.test.ts)
    { seed: 7626, before: [2000, 700], fresh: [1, 1], pageSize: 16, H: 8, Hkv: 2, D: 64, dtype: 'float16', softcap: 3e4,
      numSplits: 4, lseFp32Rule: true },
    { seed: 7627, before: [300], fresh: [60], pageSize: 16, H: 4, Hkv: 2, D: 64, dtype: 'bfloat16', causal: true, softcap: 12000,
      lseFp32Rule: true },
  ];
  for (const c of split) it(`paged numSplits ${c.numSplits}: ${pagedName(c)}`, () => checkPagedCase(c, 'cpu'));
  for (const c of pagedCases(7605, 12, { maxBefore: 5000, maxFresh: 3, Ds: [16, 40, 64], maxB: 2, gpu: false, pageSizes: [1, 7, 16] })) {
    it(`paged ${pagedName(c)}`, () => checkPagedCase(c, 'cpu'));
  }
});

describe('CPU: decode steps pack the groups of several kv heads into a task', () => {
  // Calls whose sequences have one query each (head dim a multiple of 8, group <= 8) give a task
  // the query heads of as many kv heads as divide Hkv and fit block_m rows: the narrow kernels then
  // walk one group of rows per kv head over the same key tiles (and rows of the tile padding).
  // Kv heads 2..8 (and 3, 6: odd counts and divisors), groups 1..8, head dims a multiple of 8 with
  // and without 16 | D, masks, blockM limits that pack fewer kv heads, long keys (splits).
  const rng = new Rng(7701);
  const dtypes = ['float16', 'bfloat16', 'float32'] as const;
  const dense: AttnCase[] = [];
  for (let i = 0; i < 18; i++) {
    const dtype = dtypes[i % 3];
    const Nk = rng.pick([1, 7, 16, 100, 300, 2500]);
    const m = randomMask(rng, Nk, dtype);
    const Hkv = rng.pick([2, 3, 4, 6, 8]);
    const c: AttnCase = {
      seed: 7701000 + i, B: rng.pick([1, 2, 3]), Nq: 1, Nk, H: Hkv * rng.pick([1, 2, 3, 4, 8]), Hkv,
      D: rng.pick([8, 24, 40, 64, 128]), causal: m.causal ?? false, scale: m.scale, window: m.window,
      softcap: m.softcap, layout: rng.bool() ? 'bshd' : 'bhsd', dtype,
    };
    if (rng.bool(0.4)) c.cpu = { blockM: rng.pick([2, 4, 8, 12, 16]), ...(rng.bool(0.5) ? { threads: rng.pick([1, 3]) } : {}) };
    dense.push(c);
  }
  for (const c of dense) it(`forward ${caseName(c)}`, () => checkForwardCase(c, 'cpu'));
  const paged: PagedCase[] = [];
  for (let i = 0; i < 12; i++) {
    const dtype = dtypes[i % 3];
    const B = rng.int(1, 4);
    const before = Array.from({ length: B }, () => (rng.bool(0.1) ? 0 : rng.int(1, rng.bool(0.3) ? 3000 : 200)));
    const m = randomMask(rng, Math.max(...before) + 1, dtype);
    const Hkv = rng.pick([2, 3, 4, 6, 8]);
    const D = rng.pick([16, 24, 64, 128]);
    paged.push({
      seed: 7702000 + i, before, fresh: before.map(() => 1), pageSize: rng.pick([1, 3, 16]), H: Hkv * rng.pick([1, 2, 4, 8]),
      Hkv, D, dtype, ...m, numSplits: rng.bool(0.3) ? rng.pick([2, 5]) : undefined,
      rotary: rng.bool(0.3) ? { dim: D, interleaved: rng.bool() } : undefined, deviceIndex: rng.bool(0.3), spare: rng.int(0, 3),
    });
  }
  for (const c of paged) it(`paged ${pagedName(c)}`, () => checkPagedCase(c, 'cpu'));
  const varlen: VarlenCase[] = [
    { seed: 7711, lensQ: [1, 1, 0, 1], lensK: [90, 2200, 5, 0], H: 24, Hkv: 6, D: 40, dtype: 'float16', causal: true },
    { seed: 7712, lensQ: [1, 1], lensK: [33, 17], H: 8, Hkv: 8, D: 64, dtype: 'float32', window: [8, 0] },
    { seed: 7713, lensQ: [1], lensK: [500], H: 12, Hkv: 3, D: 128, dtype: 'bfloat16', softcap: 30, scale: 1.0 },
  ];
  for (const c of varlen) it(`varlen ${varlenName(c)}`, () => checkVarlenCase(c, 'cpu'));
});

describe('CPU: mergeAttention', () => {
  for (const c of mergeCases(7401, 9, { Ds: [4, 8, 64], maxParts: 5 })) {
    it(`${c.dtype} parts=${c.parts} B${c.B} N${c.N} H${c.H} D${c.D} ${c.packed ? 'packed' : 'dense'}`, () => checkMergeCase(c, 'cpu'));
  }
});
