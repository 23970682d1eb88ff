// CUDA: shapes this suite has not seen before, the inference calls: packed batches forward and
// backward, paged prefill / decode / mixed with rotary, split-KV and any page size, mergeAttention
// (the dense calls: test/cuda/fresh.test.ts, whose header says why; half of the packed forward cases:
// test/cuda/fresh-varlen.test.ts). Skipped (visibly) without a CUDA device; fails under
// FA_REQUIRE_GPU=1 when there is none.
import { it } from 'vitest';
import { checkMergeCase, checkPagedCase, checkVarlenCase, pagedName, varlenName, type PagedCase } from '../helpers/inference';
import { mergeCases, pagedCases, varlenCases } from '../helpers/inference-cases';
import { describeGpu } from '../helpers/reference';
import { FRESH_GROUPS as GROUPS, freshDraws, freshVarlenForward } from './fresh-shapes';

const { rng, DS, seedOf, title } = freshDraws();

describeGpu(title('inference'), () => {
  // Half of the packed forward cases; test/cuda/fresh-varlen.test.ts draws the other half from its own seed, so
  // that the two run side by side (their float64 references took ~230 s of this file's ~260 s alone).
  for (const c of varlenCases(seedOf(5), 12, freshVarlenForward(DS))) {
    it(`varlen forward ${varlenName(c)}`, () => checkVarlenCase(c, 'cuda'));
  }
  for (const c of varlenCases(seedOf(6), 14, { maxLen: 400, Ds: DS, maxB: 5, backward: true, gpu: true, groups: GROUPS })) {
    it(`varlen backward ${varlenName(c)}`, () => checkVarlenCase(c, 'cuda'));
  }
  const cost = (c: PagedCase) => c.H * c.D * c.before.reduce((acc, x, b) => acc + (c.nq ?? c.fresh)[b] * (x + c.fresh[b]), 0);
  const pageSizes = [...new Set([1, 16, rng.int(2, 40), rng.int(41, 300), 8 * rng.int(1, 64)])];
  const paged = pagedCases(seedOf(7), 200, { maxBefore: 3000, maxFresh: 600, Ds: DS, maxB: 6, gpu: true, pageSizes, groups: GROUPS })
    .filter((c) => cost(c) < 2e8).slice(0, 30);
  for (const c of paged) it(`paged ${pagedName(c)}`, () => checkPagedCase(c, 'cuda'));
  for (const c of mergeCases(seedOf(8), 6, { Ds: DS, maxParts: 9 })) {
    it(`merge ${c.dtype} parts=${c.parts} B${c.B} N${c.N} H${c.H} D${c.D} ${c.packed ? 'packed' : 'dense'}`, () => checkMergeCase(c, 'cuda'));
  }
});
