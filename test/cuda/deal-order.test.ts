// The Hopper forward's dealing order: packed and paged batches of 2..64 sequences have their tiles
// dealt the sequence with the most keys first (fwd_kernel_sm90_ws.cuh, ws_deal_order), which the
// library does by default only where the grid has eight tile indices per block or more (large
// calls). This file sets FA_WS_DEAL=2 before the first call, so that every packed or paged batch of
// 2..64 sequences is dealt in that order, and checks against float64: batches in every order, ties,
// empty sequences, decode sequences mixed into paged prefill, more keys than queries, windows and
// full masks, head dims 64 / 128 / 256 and others, host and device index arrays, 64 sequences (the
// most it orders) and 65 (batch order). The library reads the setting once per process; vitest
// runs each file in its own process (pool 'forks'). Skipped (visibly) without a CUDA device.
process.env.FA_WS_DEAL = '2';
import { it } from 'vitest';
import { checkPagedCase, checkVarlenCase, pagedName, varlenName, type PagedCase, type VarlenCase } from '../helpers/inference';
import { pagedCases, varlenCases } from '../helpers/inference-cases';
import { describeGpu } from '../helpers/reference';

const lensOf = (B: number, salt: number) => Array.from({ length: B }, (_, b) => (b % 11 === 3 ? 0 : ((b * 37 + 11 * salt) % 300) + 1));

describeGpu('CUDA forward, sequences dealt the most keys first (FA_WS_DEAL=2) vs float64', () => {
  const varlen: VarlenCase[] = [
    { seed: 70, lensQ: [3, 130, 0, 260, 700], lensK: [3, 130, 0, 260, 700], H: 4, Hkv: 2, D: 128, dtype: 'float16', causal: true },
    { seed: 71, lensQ: [200, 64, 640, 64, 1], lensK: [900, 64, 640, 64, 300], H: 6, Hkv: 3, D: 64, dtype: 'bfloat16', causal: true, deviceIndex: true },
    { seed: 72, lensQ: [50, 400, 400, 0, 513], lensK: [50, 400, 400, 0, 513], H: 2, Hkv: 1, D: 256, dtype: 'float16', window: [100, 0] },
    { seed: 73, lensQ: [17, 300, 129, 600], lensK: [17, 300, 129, 600], H: 4, Hkv: 4, D: 96, dtype: 'bfloat16' },
    { seed: 74, lensQ: [100, 100, 100, 100], lensK: [100, 100, 100, 100], H: 3, Hkv: 1, D: 128, dtype: 'float16', causal: true },
    ...[64, 65, 33].map((B, i): VarlenCase => {
      const lensQ = lensOf(B, i);
      return { seed: 75 + i, lensQ, lensK: lensQ.map((n, b) => (b % 5 === 0 ? n + (b % 7) * 13 : n)), H: 2, Hkv: 1, D: i === 1 ? 64 : 128,
        dtype: i === 2 ? 'bfloat16' : 'float16', causal: i !== 1, deviceIndex: i === 0 };
    }),
  ];
  for (const c of varlen) it(`varlen ${varlenName(c)}`, () => checkVarlenCase(c, 'cuda'));
  for (const c of varlenCases(7101, 20, { maxLen: 500, Ds: [64, 128, 256, 40, 200], maxB: 9, backward: false, gpu: true }).filter((x) => x.dtype !== 'float32')) {
    it(`varlen random ${varlenName(c)}`, () => checkVarlenCase(c, 'cuda'));
  }
  const paged: PagedCase[] = [
    { seed: 80, before: [0, 40, 300, 900], fresh: [200, 1, 150, 260], pageSize: 16, H: 8, Hkv: 2, D: 128, dtype: 'float16', causal: true },
    { seed: 81, before: [10, 700, 0, 64], fresh: [140, 300, 0, 2], pageSize: 64, H: 4, Hkv: 4, D: 256, dtype: 'bfloat16', causal: true, deviceIndex: true },
    { seed: 82, before: [5, 5, 500], fresh: [180, 180, 140], pageSize: 8, H: 6, Hkv: 2, D: 64, dtype: 'float16', window: [200, 0] },
    ...[64, 65].map((B, i): PagedCase => ({
      seed: 83 + i, before: Array.from({ length: B }, (_, b) => (b * 53) % 400),
      fresh: Array.from({ length: B }, (_, b) => (b % 9 === 4 ? 0 : b % 3 === 0 ? 1 : ((b * 29) % 170) + 2)),
      pageSize: i === 0 ? 16 : 32, H: 4, Hkv: 2, D: 128, dtype: i === 0 ? 'float16' : 'bfloat16', causal: true, deviceIndex: i === 1,
    })),
  ];
  for (const c of paged) it(`paged ${pagedName(c)}`, () => checkPagedCase(c, 'cuda'));
  const cost = (c: PagedCase) => c.H * c.D * c.before.reduce((acc, x, b) => acc + (c.nq ?? c.fresh)[b] * (x + c.fresh[b]), 0);
  const prefill = pagedCases(7102, 400, { maxBefore: 600, maxFresh: 300, Ds: [64, 128, 256, 96], maxB: 6, gpu: true, pageSizes: [8, 16, 64, 256] })
    .filter((c) => c.dtype !== 'float32' && c.before.length >= 2 && Math.max(...c.fresh) > 130 && cost(c) < 1e8).slice(0, 16);
  for (const c of prefill) it(`paged random ${pagedName(c)}`, () => checkPagedCase(c, 'cuda'));
});
