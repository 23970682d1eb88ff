// A NaN in one key row on CUDA: the rows that see it are NaN (out and lse), every other row finite,
// as on the CPU backend (test/cpu/nan-rows.test.ts; helpers in test/helpers/nan-rows.ts). The kernels
// that write an lse: the warp-specialised forward (dense, packed, paged prefill), the fp32 forward,
// the decode kernel (one split, and split-KV through its combine: a NaN partial was taken for one that
// saw no key, dropped, and the row came back finite) and mergeAttention after each.
// Skipped (visibly) without a CUDA device; fails under FA_REQUIRE_GPU=1 when there is none.
import { it } from 'vitest';
import { describeGpu } from '../helpers/reference';
import { checkNanKeyDense, checkNanKeyPaged, checkNanKeyVarlen } from '../helpers/nan-rows';

describeGpu('CUDA: a NaN key reaches exactly the rows that see it', () => {
  let seed = 8200;
  for (const dtype of ['float16', 'bfloat16', 'float32'] as const) {
    for (const [D, N, causal] of [[64, 300, true], [128, 257, false], [128, 700, true], [256, 200, true], [40, 129, false]] as const) {
      const s = seed++;
      it(`dense ${dtype} forward + backward D ${D} N ${N}${causal ? ' causal' : ''}`, () => checkNanKeyDense('cuda', dtype, D, N, causal, s, true));
    }
    const s1 = seed++;
    it(`varlen ${dtype} forward + backward`, () => checkNanKeyVarlen('cuda', dtype, 128, [150, 400, 33], s1, true));
    for (const [D, page, lens, nq] of [
      [128, 16, [700, 3000, 90], [1, 1, 1]], [64, 1, [500, 2100, 40], [1, 1, 1]], [128, 64, [300, 5000, 17], [1, 1, 1]],
      [128, 16, [200, 600, 50], [7, 150, 3]], [256, 16, [100, 900, 20], [1, 1, 1]],
    ] as const) {
      const s2 = seed++;
      it(`paged ${dtype} D ${D} page ${page} lens [${lens}] nq [${nq}]`,
        () => checkNanKeyPaged('cuda', dtype, D, page, [...lens], [...nq], [1, 2, 4, 8, 0], s2));
    }
  }
});
