// flash-attention-node: FlashAttention-2 forward and backward for Node.js.
import { native } from './native';

export { Tensor, type DType, type Device } from './tensor';
export {
  flashAttention, flashAttentionBackward, attentionFlops,
  type AttentionOptions, type BackwardOptions, type AttentionResult, type BackwardResult,
} from './attention';
export { loaderInfo, type LoaderInfo, type LoadAttempt, type AddonSource } from './loader';

export interface DeviceInfo {
  index: number;
  name: string;
  computeCapability: string;
  totalMemory: number;
  multiProcessorCount: number;
}

/** CUDA devices visible to the addon; [] where there is no GPU, driver or CUDA build. */
export function devices(): DeviceInfo[] {
  return native.devices();
}

/** How the addon was built: { cuda, cudaArchs, cudaHeadDims, cudaBackward, version, ... }. */
export function buildInfo(): Record<string, unknown> & { cuda: boolean; cudaArchs: string[]; version: string } {
  return native.buildInfo() as Record<string, unknown> & { cuda: boolean; cudaArchs: string[]; version: string };
}
