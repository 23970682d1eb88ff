// Typed view of the native binding (csrc/binding/addon.cpp). Internal: the public API is index.ts.
import { loadAddon } from './loader';

/** Handle of one device allocation; frees it on dispose() or when garbage-collected. */
export interface NativeDeviceBuffer {
  readonly bytes: number;
  readonly device: number;
  dispose(): void;
}

/** [B, Nq, Nk, H, Hkv, D, dtype, causal, layout(0 bshd, 1 bhsd), blockM, blockN, threads, deterministic] */
export type Dims = [number, number, number, number, number, number, number, number, number, number,
  number, number, number];

export type HostArray = Float32Array | Uint16Array;

export interface NativeBinding {
  cpuForward(q: HostArray, k: HostArray, v: HostArray, out: HostArray, lse: Float32Array, dims: Dims,
    scale: number): Promise<void>;
  cpuBackward(dout: HostArray, q: HostArray, k: HostArray, v: HostArray, out: HostArray,
    lse: Float32Array, dq: HostArray, dk: HostArray, dv: HostArray, softmaxD: Float32Array | null,
    dims: Dims, scale: number): Promise<void>;
  convertFromF32(src: Float32Array, dst: Uint16Array, dtype: number): void;
  convertToF32(src: Uint16Array, dst: Float32Array, dtype: number): void;
  devices(): Array<{ index: number; name: string; computeCapability: string; totalMemory: number;
    multiProcessorCount: number }>;
  buildInfo(): Record<string, unknown>;
  cudaSupports(dtype: number, headDim: number): boolean;
  cudaUpload(device: number, data: HostArray): Promise<NativeDeviceBuffer>;
  cudaZeros(device: number, bytes: number): Promise<NativeDeviceBuffer>;
  cudaDownload(buf: NativeDeviceBuffer, dst: HostArray): Promise<void>;
  cudaForward(q: NativeDeviceBuffer, k: NativeDeviceBuffer, v: NativeDeviceBuffer, dims: Dims,
    scale: number): Promise<[NativeDeviceBuffer, NativeDeviceBuffer]>;
  cudaBenchForward(q: NativeDeviceBuffer, k: NativeDeviceBuffer, v: NativeDeviceBuffer, dims: Dims,
    scale: number, warmup: number, reps: number): Promise<Float64Array>;
  cudaBenchBackward(dout: NativeDeviceBuffer, q: NativeDeviceBuffer, k: NativeDeviceBuffer,
    v: NativeDeviceBuffer, out: NativeDeviceBuffer, lse: NativeDeviceBuffer, dims: Dims, scale: number,
    warmup: number, reps: number): Promise<Float64Array>;
  cudaBackward(dout: NativeDeviceBuffer, q: NativeDeviceBuffer, k: NativeDeviceBuffer,
    v: NativeDeviceBuffer, out: NativeDeviceBuffer, lse: NativeDeviceBuffer, dims: Dims, scale: number,
    wantD: boolean): Promise<NativeDeviceBuffer[]>;
}

export const native: NativeBinding = loadAddon<NativeBinding>();
