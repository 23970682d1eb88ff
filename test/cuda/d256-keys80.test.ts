// The W 256 forward's 80-key tiles (dense and packed calls), which the library takes only from 2048
// keys on: this file forces them (FA_WS_D256_BN=80) before the first call, so that the tile runs on
// random shapes of every size (ragged last key blocks, Nk < 80, causal and not, GQA, both layouts,
// head dims 200..256 on the W 256 kernel), windows and softcap, and varlen batches, against float64. The library reads
// the setting once per process; vitest runs each file in its own process (pool 'forks'). Skipped
// (visibly) without a CUDA device.
process.env.FA_WS_D256_BN = '80';
import { it } from 'vitest';
import { type AttnCase, caseName, checkForwardCase, randomCases } from '../helpers/harness';
import { checkVarlenCase, varlenName } from '../helpers/inference';
import { maskedDenseCases, varlenCases } from '../helpers/inference-cases';
import { describeGpu } from '../helpers/reference';

const CASES = randomCases({
  seed: 2560,
  count: 48,
  Ns: [1, 7, 64, 79, 80, 81, 159, 160, 161, 300, 500, 1000],
  Ds: [200, 232, 248, 256],
  budget: 2e7,
  heads: [1, 2, 4],
  groups: [1, 2, 4],
  batches: [1, 2, 3],
  dtypes: ['float16', 'bfloat16'],
});

// More tiles (128-row blocks x heads x batch) than a persistent grid of 132 blocks: blocks walk
// several tiles, so the K / V ring wraps across tiles and Q reloads after an epilogue that staged O
// through Q's buffer (the random cases above fit one wave).
const PERSISTENT: AttnCase[] = [
  { seed: 25601, B: 2, Nq: 1000, Nk: 100, H: 9, Hkv: 3, D: 256, causal: false, layout: 'bshd', dtype: 'float16' },
  { seed: 25602, B: 2, Nq: 1000, Nk: 170, H: 9, Hkv: 9, D: 240, causal: true, layout: 'bhsd', dtype: 'bfloat16' },
];

describeGpu('CUDA forward, 80-key tiles (W 256) vs float64', () => {
  for (const tc of CASES) it(caseName(tc), () => checkForwardCase(tc, 'cuda'));
  for (const tc of PERSISTENT) it(`persistent ${caseName(tc)}`, () => checkForwardCase(tc, 'cuda'));
  // (float32 cases among these run the fp32 kernel: a check that the setting leaves it alone)
  for (const c of maskedDenseCases(2562, 24, { Ns: [1, 7, 79, 80, 81, 161, 300, 511], Ds: [224, 256], budget: 3e7, gpu: true })) {
    it(`window / softcap ${caseName(c)}`, () => checkForwardCase(c, 'cuda'));
  }
  for (const c of varlenCases(2561, 16, { maxLen: 600, Ds: [256], maxB: 5, backward: false, gpu: true }).filter((x) => x.dtype !== 'float32')) {
    it(`varlen ${varlenName(c)}`, () => checkVarlenCase(c, 'cuda'));
  }
});
