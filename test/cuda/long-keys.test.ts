// The W 128 forward's 176-key tiles (dense and packed calls without a window or causal mask), which the
// library takes only from FA_WS_BN176_MIN keys on (8192 by default): this file lowers the bound to 0
// before the first call, so that the tile runs on random shapes of every size (ragged last key
// blocks, Nk < 176, GQA, both layouts, head dims 72..128 on the W 128 kernel) and on varlen batches,
// against float64. The library reads the setting once per process; vitest runs each file in its
// own process (pool 'forks'). Skipped (visibly) without a CUDA device.
process.env.FA_WS_BN176_MIN = '0';
import { it } from 'vitest';
import { caseName, checkForwardCase, randomCases } from '../helpers/harness';
import { checkVarlenCase, varlenName } from '../helpers/inference';
import { varlenCases } from '../helpers/inference-cases';
import { describeGpu } from '../helpers/reference';

const CASES = randomCases({
  seed: 1760,
  count: 60,
  Ns: [1, 7, 64, 175, 176, 177, 300, 351, 352, 353, 500, 1000],
  Ds: [72, 96, 104, 120, 128],
  budget: 2e7,
  heads: [1, 2, 4],
  groups: [1, 2, 4],
  batches: [1, 2, 3],
  dtypes: ['float16', 'bfloat16'],
}).filter((c) => !c.causal);

describeGpu('CUDA forward, 176-key tiles (W 128, no right bound) vs float64', () => {
  for (const tc of CASES) it(caseName(tc), () => checkForwardCase(tc, 'cuda'));
  for (const c of varlenCases(1761, 24, { maxLen: 600, Ds: [96, 128], maxB: 5, backward: false, gpu: true }).filter((x) => !x.causal && !x.window && x.dtype !== 'float32')) {
    it(`varlen ${varlenName(c)}`, () => checkVarlenCase(c, 'cuda'));
  }
});
