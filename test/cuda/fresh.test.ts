// CUDA: shapes this suite has not seen before. Every other GPU file draws its random cases from fixed
// seeds, so a release that passes them has, in a sense, been fitted to them. This file draws new
// sizes and new cases on every run (seed from FA_FRESH_SEED, else from the clock; it is in every
// test's name, so a failure can be run again with FA_FRESH_SEED=<seed>): sequence lengths anywhere
// in 1..2100 (not only near the tile sizes), any head dim the kernels take (multiples of 8 up to
// 256), every feature of the public API (dense forward and backward with masks and softcap,
// deterministic backward, packed batches forward and backward, paged prefill / decode / mixed with
// rotary, split-KV and any page size, mergeAttention), checked against float64 by the same rules as
// the rest of the suite.
// Skipped (visibly) without a CUDA device; fails under FA_REQUIRE_GPU=1 when there is none.
import { it } from 'vitest';
import { caseName, checkBackwardCase, checkForwardCase, randomCases } from '../helpers/harness';
import { checkMergeCase, checkPagedCase, checkVarlenCase, pagedName, varlenName, type PagedCase } from '../helpers/inference';
import { maskedDenseCases, mergeCases, pagedCases, varlenCases } from '../helpers/inference-cases';
import { Rng, describeGpu } from '../helpers/reference';
import { GPU_DS } from './shapes';

const SEED = Number(process.env.FA_FRESH_SEED ?? (Date.now() % 1_000_000_007));
const rng = new Rng(SEED);

// Lengths: small ones, ones just off the tile sizes (64 / 80 / 128 / 176 keys, 64-row warpgroups),
// and any length up to 2100.
function freshLengths(count: number, max: number): number[] {
  const out = new Set<number>();
  while (out.size < count) {
    const kind = rng.int(0, 3);
    if (kind === 0) out.add(rng.int(1, 40));
    else if (kind === 1) out.add(Math.max(1, Math.min(max, rng.pick([64, 80, 128, 176, 192, 256]) * rng.int(1, 6) + rng.int(-2, 2))));
    else out.add(rng.int(1, max));
  }
  return [...out];
}
const NS = freshLengths(14, 1200);
const BIG_NS = freshLengths(5, 2100);
// Head dims: those the build must take, a fresh subset of them each run (all of 64 / 128 / 256, the
// Hopper tiles, always in).
const DS = [...new Set([64, 128, 256, ...GPU_DS.filter(() => rng.bool(0.4))])];
const seedOf = (k: number) => (SEED * 31 + k) % 2_147_483_647;

describeGpu(`CUDA, fresh shapes (FA_FRESH_SEED=${SEED}; lengths ${NS.join(',')} / ${BIG_NS.join(',')}; head dims ${DS.join(',')})`, () => {
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
  for (const c of varlenCases(seedOf(5), 24, { maxLen: 1500, Ds: DS, maxB: 7, backward: false, gpu: true })) {
    it(`varlen forward ${varlenName(c)}`, () => checkVarlenCase(c, 'cuda'));
  }
  for (const c of varlenCases(seedOf(6), 14, { maxLen: 400, Ds: DS, maxB: 5, backward: true, gpu: true })) {
    it(`varlen backward ${varlenName(c)}`, () => checkVarlenCase(c, 'cuda'));
  }
  const cost = (c: PagedCase) => c.H * c.D * c.before.reduce((acc, x, b) => acc + (c.nq ?? c.fresh)[b] * (x + c.fresh[b]), 0);
  const pageSizes = [...new Set([1, 16, rng.int(2, 40), rng.int(41, 300), 8 * rng.int(1, 64)])];
  const paged = pagedCases(seedOf(7), 200, { maxBefore: 3000, maxFresh: 600, Ds: DS, maxB: 6, gpu: true, pageSizes })
    .filter((c) => cost(c) < 2e8).slice(0, 30);
  for (const c of paged) it(`paged ${pagedName(c)}`, () => checkPagedCase(c, 'cuda'));
  for (const c of mergeCases(seedOf(8), 6, { Ds: DS, maxParts: 9 })) {
    it(`merge ${c.dtype} parts=${c.parts} B${c.B} N${c.N} H${c.H} D${c.D} ${c.packed ? 'packed' : 'dense'}`, () => checkMergeCase(c, 'cuda'));
  }
});
