// Tensor: host (typed array) or CUDA (device buffer) storage with a shape and a dtype.
import { checkOptions, describe, rangeError, typeError } from './errors';
import { native, type HostArray, type NativeDeviceBuffer } from './native';

export type DType = 'float32' | 'float16' | 'bfloat16';
export type Device = 'cpu' | 'cuda' | `cuda:${number}`;

export const DTYPES: readonly DType[] = ['float32', 'float16', 'bfloat16'];
/** dtype codes of the core API (fa_dtype). */
export const DTYPE_CODE: Record<DType, number> = { float32: 0, float16: 1, bfloat16: 2 };
export const ELEMENT_BYTES: Record<DType, number> = { float32: 4, float16: 2, bfloat16: 2 };
/** Largest element count of one tensor: kernels index with 32-bit row and column counts. */
export const MAX_ELEMENTS = 2 ** 31 - 1;

// The runtime's Float16Array, where it has one (Node >= 24, or behind a flag).
const Float16ArrayCtor = (globalThis as { Float16Array?: new (...args: unknown[]) => ArrayBufferView })
  .Float16Array;

type Storage =
  | { kind: 'host'; data: HostArray }
  | { kind: 'device'; index: number; buf: NativeDeviceBuffer };

const INTERNAL = Symbol('Tensor.internal');

/** Checks a shape and returns its element count. */
export function checkShape(fn: string, shape: unknown, arg = 'shape'): number {
  if (!Array.isArray(shape)) throw typeError(fn, arg, 'must be an array of non-negative integers', shape);
  let n = 1;
  shape.forEach((d: unknown, i: number) => {
    if (typeof d !== 'number') throw typeError(fn, `${arg}[${i}]`, 'must be a non-negative integer', d);
    if (!Number.isSafeInteger(d) || d < 0) throw rangeError(fn, `${arg}[${i}]`, 'must be a non-negative integer', d);
    n *= d;
  });
  if (n > MAX_ELEMENTS) {
    throw rangeError(fn, arg, `must hold at most 2^31-1 elements (${describe(shape)} holds ${n})`, shape);
  }
  return n;
}

function checkDType(fn: string, dtype: unknown, arg = 'options.dtype'): DType {
  if (typeof dtype !== 'string' || !DTYPES.includes(dtype as DType)) {
    throw typeError(fn, arg, `must be one of 'float32', 'float16', 'bfloat16'`, dtype);
  }
  return dtype as DType;
}

/** Parses 'cpu' | 'cuda' | 'cuda:N' into -1 (cpu) or the device index, checking that it exists. */
export function parseDevice(fn: string, device: unknown, arg = 'device'): number {
  if (typeof device !== 'string') throw typeError(fn, arg, `must be 'cpu', 'cuda' or 'cuda:N'`, device);
  if (device === 'cpu') return -1;
  const m = /^cuda(?::(\d+))?$/.exec(device);
  if (!m) throw rangeError(fn, arg, `must be 'cpu', 'cuda' or 'cuda:N'`, device);
  const index = m[1] === undefined ? 0 : Number(m[1]);
  const count = native.devices().length;
  if (index >= count) {
    throw rangeError(fn, arg, count === 0 ? 'must be \'cpu\': no CUDA device is available'
      : `must name one of the ${count} CUDA devices (cuda:0..cuda:${count - 1})`, device);
  }
  return index;
}

function deviceName(index: number): Device {
  return index < 0 ? 'cpu' : `cuda:${index}`;
}

function newHostArray(dtype: DType, n: number): HostArray {
  return dtype === 'float32' ? new Float32Array(n) : new Uint16Array(n);
}

export class Tensor {
  readonly shape: readonly number[];
  readonly dtype: DType;
  readonly device: Device;
  #storage: Storage | null;

  /** @internal Use Tensor.from / Tensor.zeros. */
  constructor(token: symbol, storage: Storage, shape: readonly number[], dtype: DType) {
    if (token !== INTERNAL) throw new TypeError('Tensor: use Tensor.from() or Tensor.zeros() to make a tensor');
    this.#storage = storage;
    this.shape = Object.freeze([...shape]);
    this.dtype = dtype;
    this.device = deviceName(storage.kind === 'host' ? -1 : storage.index);
  }

  /** Host tensor from a typed array (copied). */
  static from(data: Float32Array | Uint16Array | ArrayBufferView, shape: readonly number[],
    options?: { dtype?: DType }): Tensor {
    const fn = 'Tensor.from';
    const isF16 = Float16ArrayCtor !== undefined && data instanceof Float16ArrayCtor;
    if (!(data instanceof Float32Array) && !(data instanceof Uint16Array) && !isF16) {
      throw typeError(fn, 'data', `must be a Float32Array, Uint16Array${Float16ArrayCtor ? ' or Float16Array' : ''}`, data);
    }
    const opts = checkOptions(fn, options, ['dtype']);
    const n = checkShape(fn, shape);
    const length = (data as { length: number }).length;
    if (length !== n) {
      throw rangeError(fn, 'data.length', `must equal the product of shape ${describe(shape)} = ${n}`, length);
    }
    let dtype: DType;
    let host: HostArray;
    if (data instanceof Float32Array) {
      dtype = opts.dtype === undefined ? 'float32' : checkDType(fn, opts.dtype);
      if (dtype === 'float32') {
        host = data.slice();
      } else {
        host = new Uint16Array(n);
        native.convertFromF32(data, host, DTYPE_CODE[dtype]);
      }
    } else if (data instanceof Uint16Array) {
      if (opts.dtype === undefined) {
        throw typeError(fn, 'options.dtype', `is required for a Uint16Array ('float16' or 'bfloat16' bits)`, undefined);
      }
      dtype = checkDType(fn, opts.dtype);
      if (dtype === 'float32') {
        throw typeError(fn, 'options.dtype', `for a Uint16Array must be 'float16' or 'bfloat16'`, dtype);
      }
      host = data.slice();
    } else {
      const view = data as unknown as { buffer: ArrayBuffer; byteOffset: number; length: number };
      const bits = new Uint16Array(view.buffer, view.byteOffset, view.length).slice();
      dtype = opts.dtype === undefined ? 'float16' : checkDType(fn, opts.dtype);
      if (dtype === 'float16') {
        host = bits;
      } else {
        const f32 = new Float32Array(n);
        native.convertToF32(bits, f32, DTYPE_CODE.float16);
        host = dtype === 'float32' ? f32 : new Uint16Array(n);
        if (dtype === 'bfloat16') native.convertFromF32(f32, host as Uint16Array, DTYPE_CODE.bfloat16);
      }
    }
    return new Tensor(INTERNAL, { kind: 'host', data: host }, shape, dtype);
  }

  /** A zero-filled tensor on the host or a CUDA device. */
  static async zeros(shape: readonly number[], options?: { dtype?: DType; device?: Device }): Promise<Tensor> {
    const fn = 'Tensor.zeros';
    const opts = checkOptions(fn, options, ['dtype', 'device']);
    const n = checkShape(fn, shape);
    const dtype = opts.dtype === undefined ? 'float32' : checkDType(fn, opts.dtype);
    const dev = opts.device === undefined ? -1 : parseDevice(fn, opts.device, 'options.device');
    if (dev < 0) return new Tensor(INTERNAL, { kind: 'host', data: newHostArray(dtype, n) }, shape, dtype);
    const buf = await native.cudaZeros(dev, n * ELEMENT_BYTES[dtype]);
    return new Tensor(INTERNAL, { kind: 'device', index: dev, buf }, shape, dtype);
  }

  /** @internal */
  static wrapHost(data: HostArray, shape: readonly number[], dtype: DType): Tensor {
    return new Tensor(INTERNAL, { kind: 'host', data }, shape, dtype);
  }

  /** @internal */
  static wrapDevice(index: number, buf: NativeDeviceBuffer, shape: readonly number[], dtype: DType): Tensor {
    return new Tensor(INTERNAL, { kind: 'device', index, buf }, shape, dtype);
  }

  get disposed(): boolean {
    return this.#storage === null;
  }

  get size(): number {
    return this.shape.reduce((a, b) => a * b, 1);
  }

  /** @internal The storage, checked: throws TypeError naming `arg` when disposed. */
  storage(fn: string, arg: string): Storage {
    if (this.#storage === null) throw new TypeError(`${fn}: ${arg} is disposed, got a disposed Tensor`);
    return this.#storage;
  }

  /** Copies to another device ('cpu', 'cuda', 'cuda:N'). Always returns a new tensor. */
  async to(device: Device): Promise<Tensor> {
    const fn = 'Tensor.to';
    const s = this.storage(fn, 'tensor');
    const dev = parseDevice(fn, device);
    if (dev < 0) return Tensor.wrapHost(await this.toTypedArray(), this.shape, this.dtype);
    const host = s.kind === 'host' ? s.data : await this.toTypedArray();
    const buf = await native.cudaUpload(dev, host);
    return Tensor.wrapDevice(dev, buf, this.shape, this.dtype);
  }

  /** The elements in the tensor's own dtype: Float32Array, or Uint16Array of float16/bfloat16 bits. */
  async toTypedArray(): Promise<Float32Array | Uint16Array> {
    const s = this.storage('Tensor.toTypedArray', 'tensor');
    if (s.kind === 'host') return s.data.slice();
    const out = newHostArray(this.dtype, this.size);
    await native.cudaDownload(s.buf, out);
    return out;
  }

  /** The elements widened to float32 (downloaded first when on a GPU). */
  async toFloat32Array(): Promise<Float32Array> {
    this.storage('Tensor.toFloat32Array', 'tensor');
    const raw = await this.toTypedArray();
    if (raw instanceof Float32Array) return raw;
    const out = new Float32Array(raw.length);
    native.convertToF32(raw, out, DTYPE_CODE[this.dtype]);
    return out;
  }

  /** Frees the storage now (device memory is released in stream order). Idempotent. */
  dispose(): void {
    const s = this.#storage;
    this.#storage = null;
    if (s?.kind === 'device') s.buf.dispose();
  }

  toString(): string {
    return `Tensor(shape=[${this.shape.join(', ')}], dtype=${this.dtype}, device=${this.device}${this.disposed ? ', disposed' : ''})`;
  }
}

// `using t = ...` support where the runtime has Symbol.dispose.
const disposeSymbol = (Symbol as unknown as { dispose?: symbol }).dispose;
if (typeof disposeSymbol === 'symbol') {
  Object.defineProperty(Tensor.prototype, disposeSymbol, {
    value: function (this: Tensor) { this.dispose(); },
  });
}
