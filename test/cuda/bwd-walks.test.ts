// The Hopper backward's walks at W 64 / 128 (bwd_kernel_sm90_ws.cuh: the plain one and the
// overlapped one): the library picks one per tile width (W 128: the overlapped one unless a softcap
// is set), and this file forces one for every call (FA_BWD_WS_OVERLAP, read once per process;
// vitest runs each file in its own process, pool 'forks'), so that the other also runs on random
// shapes (ragged key and row blocks, GQA, both layouts, head dims 8..128 on the W 64 and W 128
// kernels), causal masks, windows, softcap and deterministic mode, against float64, and gives
// bit-identical gradients in deterministic mode. The walk forced: FA_BWD_WS_OVERLAP when set
// outside (0 or 1), else 0 (the plain walk, which W 128 takes only with a softcap). A score
// modifier always takes the plain walk. Skipped (visibly) without a CUDA device.
process.env.FA_BWD_WS_OVERLAP ??= '0';
import { it } from 'vitest';
import { type AttnCase, caseName, checkBackwardCase, checkDeterministicBackward, randomCases } from '../helpers/harness';
import { maskedDenseCases } from '../helpers/inference-cases';
import { describeGpu } from '../helpers/reference';

const WALK = process.env.FA_BWD_WS_OVERLAP;

const RANDOM = randomCases({
  seed: 6464,
  count: 40,
  Ns: [1, 7, 63, 64, 65, 127, 128, 129, 255, 257, 500, 1000],
  Ds: [8, 24, 40, 56, 64, 72, 96, 120, 128],
  budget: 1.5e7,
  heads: [1, 2, 4],
  groups: [1, 2, 4],
  batches: [1, 2, 3],
  dtypes: ['float16', 'bfloat16'],
});

// Long walks: many row blocks per key block (the dQ buffers and the Q / dO ring wrap many times).
const LONG: AttnCase[] = [
  { seed: 64001, B: 1, Nq: 2000, Nk: 300, H: 4, Hkv: 1, D: 64, causal: false, layout: 'bshd', dtype: 'float16', returnSoftmaxD: true },
  { seed: 64002, B: 2, Nq: 1500, Nk: 1500, H: 2, Hkv: 2, D: 64, causal: true, layout: 'bhsd', dtype: 'bfloat16' },
  { seed: 64003, B: 1, Nq: 1100, Nk: 900, H: 8, Hkv: 2, D: 48, causal: true, layout: 'bshd', dtype: 'float16', deterministic: true },
  { seed: 64004, B: 1, Nq: 1300, Nk: 700, H: 4, Hkv: 2, D: 128, causal: true, layout: 'bshd', dtype: 'bfloat16' },
  { seed: 64005, B: 2, Nq: 900, Nk: 1000, H: 2, Hkv: 1, D: 112, causal: false, layout: 'bhsd', dtype: 'float16', deterministic: true },
];

describeGpu(`CUDA backward, walk ${WALK} at W 64 / 128 vs float64`, () => {
  for (const tc of RANDOM) it(caseName(tc), () => checkBackwardCase(tc, 'cuda'));
  for (const tc of RANDOM.slice(0, 10)) {
    const det: AttnCase = { ...tc, seed: tc.seed + 1, deterministic: true };
    it(caseName(det), () => checkBackwardCase(det, 'cuda'));
  }
  for (const tc of LONG) it(`long ${caseName(tc)}`, () => checkBackwardCase(tc, 'cuda'));
  const masked = maskedDenseCases(6465, 30, { Ns: [1, 7, 64, 65, 129, 300, 700], Ds: [32, 64, 128], budget: 2e7, gpu: true });
  for (const c of masked.filter((x) => x.dtype !== 'float32')) it(`window / softcap ${caseName(c)}`, () => checkBackwardCase(c, 'cuda'));

  for (const [dtype, D] of [['float16', 64], ['bfloat16', 64], ['float16', 128], ['bfloat16', 128]] as const) {
    const cs = { B: 2, Nq: 700, Nk: 900, H: 4, Hkv: 2, D, opts: { causal: true, window: [400, 0] as [number, number] } };
    it(`${dtype} D ${D} GQA causal window: deterministic: true gives bit-identical dq, dk, dv across runs`, () =>
      checkDeterministicBackward(cs, dtype, 6466));
  }
});
