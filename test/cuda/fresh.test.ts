// CUDA: shapes this suite has not seen before. Every other GPU file draws its random cases from fixed
// seeds, so a release that passes them has, in a sense, been fitted to them. The two fresh-shapes
// files draw new sizes and new cases on every run (seed from FA_FRESH_SEED, else from the clock; it
// is in every test's name, so a failure can be run again with FA_FRESH_SEED=<seed>): sequence lengths
// anywhere in 1..2100 (not only near the tile sizes), any head dim the kernels take (multiples of 8
// up to 256), every feature of the public API, checked against float64 by the same rules as the rest
// of the suite. This file: dense forward and backward with masks and softcap, deterministic
// backward; test/cuda/fresh-inference.test.ts: packed batches, paged prefill / decode / mixed with
// rotary, split-KV and any page size, mergeAttention (two files, so that the suite runs them side by
// side: one took more than 400 s of the GPU suite's time beside the other files).
// Skipped (visibly) without a CUDA device; fails under FA_REQUIRE_GPU=1 when there is none.
import { it } from 'vitest';
import { caseName, checkBackwardCase, checkForwardCase, randomCases } from '../helpers/harness';
import { maskedDenseCases } from '../helpers/inference-cases';
import { describeGpu } from '../helpers/reference';
import { freshDraws } from './fresh-shapes';

const { NS, BIG_NS, DS, seedOf, title } = freshDraws();

describeGpu(title('dense'), () => {
  const fwd = randomCases({
    seed: seedOf(1), count: 60, Ns: NS, Ds: DS, budget: 8e6, bigEvery: 6, bigNs: BIG_NS, bigBudget: 8e7,
    heads: [1, 2, 4], groups: [1, 2, 4, 8], batches: [1, 2, 3],
  });
  for (const c of fwd) it(`forward ${caseName(c)}`, () => checkForwardCase(c, 'cuda'));
  const bwd = randomCases({
    seed: seedOf(2), count: 30, Ns: NS, Ds: DS, budget: 3e6, bigEvery: 10, bigNs: BIG_NS, bigBudget: 3e7,
    heads: [1, 2], groups: [1, 2, 4], batches: [1, 2],
  });
  for (const c of bwd) it(`backward ${caseName(c)}`, () => checkBackwardCase({ ...c, returnSoftmaxD: true }, 'cuda'));
  for (const c of maskedDenseCases(seedOf(3), 30, { Ns: NS, Ds: DS, budget: 3e7, gpu: true })) {
    it(`masked forward ${caseName(c)}`, () => checkForwardCase(c, 'cuda'));
  }
  for (const c of maskedDenseCases(seedOf(4), 20, { Ns: NS.filter((n) => n <= 700), Ds: DS, budget: 1e7, gpu: true })) {
    it(`masked backward ${caseName(c)}`, () => checkBackwardCase(c, 'cuda'));
  }
});
