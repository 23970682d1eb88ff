// CUDA: shapes this suite has not seen before, packed batches forward: the other half of
// test/cuda/fresh-inference.test.ts's packed forward cases, drawn from this file's own seed, in a file of
// its own so that the two files' float64 references run side by side. Skipped (visibly) without a CUDA
// device; fails under FA_REQUIRE_GPU=1 when there is none.
import { it } from 'vitest';
import { checkVarlenCase, varlenName } from '../helpers/inference';
import { varlenCases } from '../helpers/inference-cases';
import { describeGpu } from '../helpers/reference';
import { freshDraws, freshVarlenForward } from './fresh-shapes';

const { DS, seedOf, title } = freshDraws();

describeGpu(title('packed forward'), () => {
  for (const c of varlenCases(seedOf(9), 12, freshVarlenForward(DS))) {
    it(`varlen forward ${varlenName(c)}`, () => checkVarlenCase(c, 'cuda'));
  }
});
