// Random case sets of the inference features, shared by the CPU suite (small) and the GPU suite
// (more and larger): masks (window edges, causal + window, softcap with large scores), varlen
// batches with empty sequences, paged caches of any page size with shuffled pages, rotary in both
// layouts and partial dims, GQA groups 1..8.
import type { AttnCase } from './harness';
import type { MaskSpec, MergeCase, PagedCase, VarlenCase } from './inference';
import { Rng, type DType } from './reference';

const DTYPES: DType[] = ['float16', 'bfloat16', 'float32'];
/** GQA groups (query heads per kv head) drawn unless a case set names its own. */
const GROUPS = [1, 2, 4, 8];

/**
 * A random mask: none, causal, a window (edges 0, 1, small, large, -1), causal + window, softcap.
 * Large scores under the cap (scale up to 2) for float16 / bfloat16; float32 keeps the default scale
 * (at scale 2 even a naive float32 computation misses the 1e-5 float32 rule) with small caps instead,
 * so that tanh saturates all the same.
 */
export function randomMask(rng: Rng, nk: number, dtype: DType = 'float16'): MaskSpec {
  const m: MaskSpec = {};
  const kind = rng.int(0, 5);
  const side = () => rng.pick([-1, 0, 1, 2, rng.int(3, Math.max(3, nk)), nk + 5]);
  if (kind === 1) m.causal = true;
  if (kind === 2 || kind === 4) m.window = [side(), side()];
  if (kind === 3) {
    m.causal = true;
    m.window = [side(), rng.pick([-1, 0, 3])];
  }
  if (kind === 4 || kind === 5 || rng.bool(0.2)) {
    if (dtype === 'float32') {
      m.softcap = rng.pick([0.5, 1, 3]);
    } else {
      m.softcap = rng.pick([5, 30, 50]);
      // Large scores under the cap: a scale that makes |scale * q.k| reach well past softcap.
      if (rng.bool(0.5)) m.scale = rng.pick([0.5, 1.0, 2.0]);
    }
  }
  return m;
}

/** Dense cases with windows / softcap for the existing forward / backward harness. */
export function maskedDenseCases(seed: number, count: number, opts: { Ns: number[]; Ds: number[]; budget: number; gpu: boolean; groups?: number[] }): AttnCase[] {
  const rng = new Rng(seed);
  const out: AttnCase[] = [];
  while (out.length < count) {
    const Nq = rng.pick(opts.Ns), Nk = rng.pick(opts.Ns);
    const D = rng.pick(opts.Ds);
    const Hkv = rng.pick([1, 2]);
    const H = Hkv * rng.pick(opts.groups ?? GROUPS);
    const B = rng.pick([1, 2]);
    if (B * H * Nq * Nk * D > opts.budget) continue;
    const dtype = DTYPES[out.length % 3];
    const m = randomMask(rng, Nk, dtype);
    out.push({
      seed: seed * 1000 + out.length, B, Nq, Nk, H, Hkv, D, causal: m.causal ?? false,
      scale: m.scale, window: m.window, softcap: m.softcap,
      layout: rng.bool() ? 'bshd' : 'bhsd', dtype,
      deterministic: opts.gpu && rng.bool(0.3) ? true : undefined,
    });
  }
  return out;
}

function lens(rng: Rng, B: number, maxLen: number, allowEmpty: boolean): number[] {
  return Array.from({ length: B }, () => (allowEmpty && rng.bool(0.15) ? 0 : rng.int(1, maxLen)));
}

// Lengths scaled down (all by one factor, each kept >= 1 where it was) until the float64 reference's work,
// sum over sequences of Nq * Nk * H * D, is at most maxWork: the reference runs at ~8e7 of those per second
// here, and one fresh draw of ~1e10 (five sequences near 1500 keys, H 7, D 256) outran the test's timeout
// on the H100 host (sixty-first session). The scaling draws nothing, so the other draws stay as they were.
function capWork(lensQ: number[], lensK: number[], HD: number, maxWork: number | undefined): void {
  if (maxWork === undefined) return;
  const work = lensQ.reduce((acc, q, b) => acc + q * lensK[b], 0) * HD;
  if (work <= maxWork) return;
  const f = Math.sqrt(maxWork / work);
  for (const a of [lensQ, lensK]) for (let b = 0; b < a.length; b++) if (a[b] > 0) a[b] = Math.max(1, Math.floor(a[b] * f));
}

export function varlenCases(seed: number, count: number, opts: { maxLen: number; Ds: number[]; maxB: number; backward: boolean; gpu: boolean; groups?: number[]; maxWork?: number }): VarlenCase[] {
  const rng = new Rng(seed);
  const out: VarlenCase[] = [];
  for (let i = 0; i < count; i++) {
    const B = rng.int(1, opts.maxB);
    const lensQ = lens(rng, B, opts.maxLen, true);
    const same = rng.bool(0.5);
    const lensK = same ? [...lensQ] : lens(rng, B, opts.maxLen, true);
    const Hkv = rng.pick([1, 2]);
    const m = randomMask(rng, opts.maxLen, DTYPES[i % 3]);
    const H = Hkv * rng.pick(opts.groups ?? GROUPS), D = rng.pick(opts.Ds);
    capWork(lensQ, lensK, H * D, opts.maxWork);
    out.push({
      seed: seed * 1000 + i, lensQ, lensK, H, Hkv, D,
      dtype: DTYPES[i % 3], ...m, deviceIndex: rng.bool(0.4), backward: opts.backward,
      deterministic: opts.gpu && opts.backward && rng.bool(0.3) ? true : undefined,
    });
  }
  return out;
}

export function pagedCases(seed: number, count: number, opts: { maxBefore: number; maxFresh: number; Ds: number[]; maxB: number; gpu: boolean; pageSizes: number[]; groups?: number[] }): PagedCase[] {
  const rng = new Rng(seed);
  const out: PagedCase[] = [];
  for (let i = 0; i < count; i++) {
    const B = rng.int(1, opts.maxB);
    const decode = rng.bool(0.5);
    const before = Array.from({ length: B }, () => (rng.bool(0.1) ? 0 : rng.int(1, opts.maxBefore)));
    const fresh = Array.from({ length: B }, () => (decode ? rng.pick([0, 1, 1, 1, 2]) : rng.int(0, opts.maxFresh)));
    const total = before.map((x, b) => x + fresh[b]);
    // Query counts: the fresh tokens, sometimes a few more of the cached ones (chunked prefill).
    const nq = fresh.map((f, b) => Math.min(total[b], f + (rng.bool(0.2) ? rng.int(0, 3) : 0)));
    const Hkv = rng.pick([1, 2, 4, 8]);
    const group = rng.pick(opts.groups ?? GROUPS);
    const D = rng.pick(opts.Ds);
    const m = randomMask(rng, Math.max(...total, 1), DTYPES[i % 3]);
    const rot = rng.bool(0.4) ? {
      dim: rng.pick([D, Math.max(2, 2 * Math.floor(D / 4)), 2 * Math.floor(D / 2)].filter((x) => x >= 2 && x <= D && x % 2 === 0)),
      interleaved: rng.bool(),
    } : undefined;
    out.push({
      seed: seed * 1000 + i, before, fresh, nq, pageSize: rng.pick(opts.pageSizes), H: Hkv * group, Hkv, D,
      dtype: DTYPES[i % 3], ...m, rotary: rot,
      numSplits: opts.gpu && rng.bool(0.3) ? rng.pick([1, 2, 3, 7]) : undefined,
      deviceIndex: rng.bool(0.4), spare: rng.int(0, 4),
    });
  }
  return out;
}

export function mergeCases(seed: number, count: number, opts: { Ds: number[]; maxParts: number }): MergeCase[] {
  const rng = new Rng(seed);
  const out: MergeCase[] = [];
  for (let i = 0; i < count; i++) {
    const packed = rng.bool();
    out.push({
      seed: seed * 1000 + i, parts: rng.int(1, opts.maxParts), B: packed ? 1 : rng.int(1, 3), N: rng.int(1, 40), H: rng.int(1, 4),
      D: rng.pick(opts.Ds), dtype: DTYPES[i % 3], packed,
    });
  }
  return out;
}
