// The fresh-shapes GPU files' shared draws (test/cuda/fresh.test.ts: dense forward / backward;
// test/cuda/fresh-inference.test.ts: packed, paged, merge; test/cuda/fresh-varlen.test.ts: more packed forward). Each file draws its lengths, head dims
// and cases from the seed (FA_FRESH_SEED, else the clock: then each file has its own), which is in
// its suite's name, so that a failure can be run again with FA_FRESH_SEED=<seed>.
import { Rng } from '../helpers/reference';
import { GPU_DS } from './shapes';

export function freshDraws() {
  const SEED = Number(process.env.FA_FRESH_SEED ?? (Date.now() % 1_000_000_007));
  const rng = new Rng(SEED);
  // Lengths: small ones, ones just off the tile sizes (64 / 80 / 128 / 176 keys, 64-row warpgroups),
  // and any length up to 2100.
  const freshLengths = (count: number, max: number): number[] => {
    const out = new Set<number>();
    while (out.size < count) {
      const kind = rng.int(0, 3);
      if (kind === 0) out.add(rng.int(1, 40));
      else if (kind === 1) out.add(Math.max(1, Math.min(max, rng.pick([64, 80, 128, 176, 192, 256]) * rng.int(1, 6) + rng.int(-2, 2))));
      else out.add(rng.int(1, max));
    }
    return [...out];
  };
  const NS = freshLengths(14, 1200);
  const BIG_NS = freshLengths(5, 2100);
  // Head dims: those the build must take, a fresh subset of them each run (all of 64 / 128 / 256,
  // the Hopper tiles, always in).
  const DS = [...new Set([64, 128, 256, ...GPU_DS.filter(() => rng.bool(0.4))])];
  const seedOf = (k: number) => (SEED * 31 + k) % 2_147_483_647;
  const title = (what: string) => `CUDA, fresh shapes, ${what} (FA_FRESH_SEED=${SEED}; lengths ${NS.join(',')} / ${BIG_NS.join(',')}; head dims ${DS.join(',')})`;
  return { SEED, rng, NS, BIG_NS, DS, seedOf, title };
}

// Every GQA group size from 1 to 8, not only powers of two.
export const FRESH_GROUPS = [1, 2, 3, 4, 5, 6, 7, 8];

// The packed forward draws of the fresh-shapes files (test/helpers/inference-cases.ts, varlenCases), the
// float64 reference's work per case capped (varlenCases' maxWork: ~30 s of it on a loaded host).
export function freshVarlenForward(DS: number[]) {
  return { maxLen: 1500, Ds: DS, maxB: 7, backward: false, gpu: true, groups: FRESH_GROUPS, maxWork: 2.5e9 };
}
