// CPU backend: the masks and score modifiers (sliding window, causal + window, softcap with large
// scores) in forward and backward, packed variable-length batches (empty sequences included) forward
// and backward, the paged KV cache (appendKV with rotary in both layouts and partial dims, page sizes
// 1..16 with shuffled pages, pagedAttention for decode, prefill chunks and both mixed), and
// mergeAttention; all against float64 references, index arrays as Int32Array and as int32 tensors.
// GQA groups that are not powers of two (3, 5, 6, 7) with short query counts run the forward's
// head packing (several query heads of a group in one task) with packs of every size.
import { describe, it } from 'vitest';
import { caseName, checkBackwardCase, checkForwardCase } from '../helpers/harness';
import { checkMergeCase, checkPagedCase, checkVarlenCase, pagedName, varlenName } from '../helpers/inference';
import { maskedDenseCases, mergeCases, pagedCases, varlenCases } from '../helpers/inference-cases';

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

describe('CPU: mergeAttention', () => {
  for (const c of mergeCases(7401, 9, { Ds: [4, 8, 64], maxParts: 5 })) {
    it(`${c.dtype} parts=${c.parts} B${c.B} N${c.N} H${c.H} D${c.D} ${c.packed ? 'packed' : 'dense'}`, () => checkMergeCase(c, 'cpu'));
  }
});
