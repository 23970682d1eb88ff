// `using` disposal of tensors (TypeScript >= 5.2, lib ESNext.Disposable): t.dispose() runs at the
// end of the block. PENDING: compiles once lib/tensor.ts declares [Symbol.dispose]() on Tensor
// (today it adds the method at run time only); test/types/types.test.ts skips it until then.
import { Tensor, flashAttention } from 'flash-attention-node';

{
  using q = Tensor.from(new Float32Array(8 * 64), [1, 8, 1, 64], { dtype: 'float16' });
  const { out, lse } = await flashAttention(q, q, q);
  using o = out;
  using l = lse;
  void [o, l];
}
