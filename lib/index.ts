// flash-attention-node: FlashAttention forward and backward for Node.js.
import { native } from './native';
import { describe } from './errors';
import { callNative, callNativeAsync, cpuCallsDone, parseDevice, type Device } from './tensor';

export { Tensor, type DType, type Device } from './tensor';
export {
  flashAttention, flashAttentionBackward, attentionFlops,
  type AttentionOptions, type BackwardOptions, type MaskOptions, type AttentionResult, type BackwardResult,
} from './attention';
export {
  flashAttentionVarlen, flashAttentionVarlenBackward, appendKV, pagedAttention, mergeAttention,
  type IndexArray, type Rotary, type VarlenOptions, type VarlenBackwardOptions, type PagedOptions, type AppendKVOptions,
} from './inference';
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

/** Device memory figures in bytes (see memoryStats). */
export interface MemoryStats {
  /** Memory in use by live tensors and the workspaces of queued calls. */
  allocated: number;
  /** Memory the library's pool holds from the driver (allocated plus cached for reuse). */
  reserved: number;
  /** The largest `allocated` since the process started or resetPeakMemoryStats(). */
  peakAllocated: number;
  /** Free and total memory of the device, as the driver reports them (all processes). */
  free: number;
  total: number;
}

// Whether the process has a CUDA device (the count does not change while it runs).
let cudaCount: number | undefined;
const hasCuda = () => (cudaCount ??= native.devices().length) > 0;

function cudaIndex(fn: string, device: unknown): number {
  const d = parseDevice(fn, device === undefined ? 'cuda' : device, 'device');
  if (d < 0) throw new RangeError(`${fn}: device must be a CUDA device ('cuda' or 'cuda:N'), got 'cpu'`);
  return d;
}

/**
 * Resolves once all work queued so far on the device is done; rejects with the CUDA error name when
 * queued work failed (a failure inside a kernel makes the device unusable for the rest of the
 * process, as in every CUDA program). 'cpu': once every CPU call made so far on this thread has
 * settled (each call's own Promise carries its result or error; this one resolves either way).
 * Without an argument: 'cuda' where a CUDA device is available, else 'cpu' (so that code written
 * for either backend can end with `await synchronize()`).
 */
export async function synchronize(device?: Device): Promise<void> {
  const fn = 'synchronize';
  if (device === 'cpu' || (device === undefined && !hasCuda())) return cpuCallsDone();
  const d = cudaIndex(fn, device);
  await callNativeAsync(fn, () => native.synchronize(d));
}

// memoryStats / resetPeakMemoryStats: a CUDA device's pool; without one there is nothing to report
// (the CPU backend keeps no pool of tensors).
function statsDevice(fn: string, device: unknown): number {
  if (!hasCuda() && (device === undefined || typeof device === 'string')) {
    throw new RangeError(`${fn}: device must be a CUDA device ('cuda' or 'cuda:N'; the CPU backend keeps no memory pool), ` +
      `and this process has none, got ${device === undefined ? "undefined (the default, 'cuda')" : describe(device)}`);
  }
  return cudaIndex(fn, device);
}

/** The library's device memory figures for a CUDA device (default 'cuda'). */
export function memoryStats(device?: Device): MemoryStats {
  const fn = 'memoryStats';
  const d = statsDevice(fn, device);
  const s = callNative(fn, () => native.memoryStats(d));
  return { allocated: s.allocated, reserved: s.reserved, peakAllocated: s.peakAllocated, free: s.free, total: s.total };
}

/** Starts a new peak for memoryStats().peakAllocated. */
export function resetPeakMemoryStats(device?: Device): void {
  const fn = 'resetPeakMemoryStats';
  const d = statsDevice(fn, device);
  callNative(fn, () => native.resetPeakMemoryStats(d));
}

/**
 * Once the work queued on the device is done, hands the pooled memory that no tensor uses back to
 * the driver, so that other processes can have it. Live tensors are untouched.
 */
export async function emptyCache(device?: Device): Promise<void> {
  const fn = 'emptyCache';
  // the CPU backend pools nothing to hand back to a driver; no argument and no CUDA device: 'cpu'
  if (device === 'cpu' || (device === undefined && !hasCuda())) return cpuCallsDone();
  const d = cudaIndex(fn, device);
  await callNativeAsync(fn, () => native.emptyCache(d));
}
