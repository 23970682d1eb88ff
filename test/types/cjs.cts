// A CommonJS consumer of the published typings (compiles to require('flash-attention-node')).
// Compiled with --noEmit only (never run).
import fa = require('flash-attention-node');
import { Tensor, flashAttention } from 'flash-attention-node';

async function main(): Promise<number> {
  const q = Tensor.from(new Float32Array(8 * 64), [1, 8, 1, 64]);
  const { out, lse } = await fa.flashAttention(q, q, q, { causal: false, scale: 0.125 });
  const first: number = (await out.toFloat32Array())[0] + (await lse.toFloat32Array())[0];
  const devs: Array<{ name: string; computeCapability: string }> = fa.devices();
  const version: string = fa.buildInfo().version;
  const why: string = fa.loaderInfo().reason;
  void [devs, version, why];

  // @ts-expect-error: q must be a Tensor, not a typed array
  await flashAttention(new Float32Array(4), q, q);
  // @ts-expect-error: scale is a number
  await flashAttention(q, q, q, { scale: '0.1' });
  // @ts-expect-error: no such export
  fa.flashAttention3(q, q, q);
  return first;
}
void main;
