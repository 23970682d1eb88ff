// An ES module consumer of the published typings. Compiled with --noEmit only (never run).
import {
  Tensor, flashAttention, flashAttentionBackward, devices, buildInfo, loaderInfo,
  type AttentionResult, type DType, type Device, type LoaderInfo,
} from 'flash-attention-node';
import * as fa from 'flash-attention-node';

const dtype: DType = 'float16';
const device: Device = devices().length ? 'cuda' : 'cpu';
const q = await Tensor.from(new Float32Array(2 * 8 * 2 * 64), [2, 8, 2, 64], { dtype }).to(device);
const res: AttentionResult = await flashAttention(q, q, q, { causal: true, layout: 'bshd' });
const out: Float32Array = await res.out.toFloat32Array();
const grads = await flashAttentionBackward(res.out, q, q, q, res.out, res.lse, { deterministic: true });
grads.dq.dispose();
const shape: readonly number[] = res.lse.shape;
const b = buildInfo();
const cuda: boolean = b.cuda;
const archs: string[] = b.cudaArchs;
const info: LoaderInfo = loaderInfo();
const source: 'FA_ADDON_PATH' | 'build' | 'prebuilt' = info.source;
const same: typeof flashAttention = fa.flashAttention;
void [out, shape, cuda, archs, source, same];

// @ts-expect-error: v is missing
await flashAttention(q, q);
// @ts-expect-error: causal is a boolean
await flashAttention(q, q, q, { causal: 'yes' });
// @ts-expect-error: no such layout
await flashAttention(q, q, q, { layout: 'sbhd' });
// @ts-expect-error: the result is a Promise and must be awaited
const notAwaited: AttentionResult = flashAttention(q, q, q);
// @ts-expect-error: not a dtype
Tensor.from(new Float32Array(4), [4], { dtype: 'float64' });
// @ts-expect-error: not a device
await q.to('gpu');
// @ts-expect-error: shape is read-only
res.out.shape.push(1);
void notAwaited;
