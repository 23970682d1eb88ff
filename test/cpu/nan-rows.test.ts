// A NaN in one key row on the CPU backend: the rows that see it are NaN (out and lse), every other row
// finite, for dense, packed and paged calls (decode with numSplits 1..4 and automatic), and a merge
// keeps them NaN (test/helpers/nan-rows.ts; the CUDA side is test/cuda/nan-rows.test.ts).
import { describe, it } from 'vitest';
import { checkNanKeyDense, checkNanKeyPaged, checkNanKeyVarlen } from '../helpers/nan-rows';

describe('CPU: a NaN key reaches exactly the rows that see it', () => {
  let seed = 8100;
  for (const dtype of ['float32', 'float16'] as const) {
    for (const [D, N, causal] of [[16, 50, true], [40, 37, false], [64, 130, true]] as const) {
      const s = seed++;
      it(`dense ${dtype} forward + backward D ${D} N ${N}${causal ? ' causal' : ''}`, () => checkNanKeyDense('cpu', dtype, D, N, causal, s, true));
    }
    const s1 = seed++;
    it(`varlen ${dtype} forward + backward`, () => checkNanKeyVarlen('cpu', dtype, 32, [20, 75, 9], s1, true));
    for (const [page, nq] of [[16, [1, 1, 1]], [1, [1, 1, 1]], [16, [3, 5, 2]]] as const) {
      const s2 = seed++;
      it(`paged ${dtype} page ${page} nq [${nq}]`, () => checkNanKeyPaged('cpu', dtype, 32, page, [70, 300, 9], [...nq], [1, 2, 4, 0], s2));
    }
  }
});
