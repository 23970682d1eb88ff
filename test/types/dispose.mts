// `using` disposal (TypeScript >= 5.2, lib ESNext.Disposable): tensors and the results of a call
// (all their tensors together) are disposed at the end of the block.
import { Tensor, flashAttention, flashAttentionBackward } from 'flash-attention-node';

{
  using q = Tensor.from(new Float32Array(8 * 64), [1, 8, 1, 64], { dtype: 'float16' });
  using r = await flashAttention(q, q, q);
  using g = await flashAttentionBackward(r.out, q, q, q, r.out, r.lse);
  void g.dq;
}
