// Tensor: host (typed array) or CUDA (device allocation) storage with a shape and a dtype.
//
// CUDA tensors are stream-ordered (see the README): a device call queues its work on the device's
// stream and its Promise settles at once; reading to the host waits for the work that produced the
// tensor; dispose() frees the memory in stream order, so it is safe while queued work still reads it.
import { TENSOR_BRAND, checkOptions, describe, rangeError, setForeignTensorTest, typeError } from './errors';
import { native, type Handle, type HostArray } from './native';
import { copyTyped, typedArrayBuffer, typedArrayByteOffset, typedArrayKind, typedArrayLength } from './typed';

export type DType = 'float32' | 'float16' | 'bfloat16' | 'int32';
export type Device = 'cpu' | 'cuda' | `cuda:${number}`;

export const DTYPES: readonly DType[] = ['float32', 'float16', 'bfloat16', 'int32'];
/** dtype codes of the core API (fa_dtype); int32 is never an attention dtype. */
export const DTYPE_CODE: Record<DType, number> = { float32: 0, float16: 1, bfloat16: 2, int32: 3 };
export const ELEMENT_BYTES: Record<DType, number> = { float32: 4, float16: 2, bfloat16: 2, int32: 4 };
/** Largest element count of one tensor: kernels index with 32-bit row and column counts. */
export const MAX_ELEMENTS = 2 ** 31 - 1;

// The runtime's Float16Array, where it has one (Node >= 24, or behind a flag).
const Float16ArrayCtor = (globalThis as { Float16Array?: new (...args: unknown[]) => ArrayBufferView })
  .Float16Array;

export type Storage =
  | { kind: 'host'; data: HostArray }
  | { kind: 'device'; index: number; handle: Handle };

const INTERNAL = Symbol('Tensor.internal');
let readStorage: (t: Tensor, fn: string, arg: string) => Storage;

// Handles of disposed device tensors, for reuse: a CUDA call given one in an output slot returns
// its new output in that handle instead of making a new one (a native handle with a finalizer, and
// its collection later, cost more than the rest of the binding's part of a small call). A handle is
// referenced only by its tensor's storage, which dispose() has dropped, so nothing else can use it.
const spares: Handle[] = [];
const MAX_SPARES = 64;

/** @internal A spare handle for an output slot of a CUDA call, or null (the call makes a new one). */
export function spareHandle(): Handle | null {
  return spares.length > 0 ? spares.pop()! : null;
}

/**
 * Checks a shape and returns a frozen copy of it with its element count. Each dimension is read
 * once, into the copy, and only the copy is used afterwards: an array whose elements change
 * between reads (getters, a Proxy) cannot pass the check with one shape and be stored with another.
 */
export function checkShape(fn: string, shape: unknown, arg = 'shape'): { dims: readonly number[]; n: number } {
  if (!Array.isArray(shape)) throw typeError(fn, arg, 'must be an array of non-negative integers', shape);
  const length = shape.length;
  const dims: number[] = new Array(length);
  let n = 1;
  for (let i = 0; i < length; i++) {
    const d: unknown = shape[i];
    if (typeof d !== 'number') throw typeError(fn, `${arg}[${i}]`, 'must be a non-negative integer', d);
    if (!Number.isSafeInteger(d) || d < 0) throw rangeError(fn, `${arg}[${i}]`, 'must be a non-negative integer', d);
    // Every dimension reaches the native code as an int32, so an empty tensor (product 0) may not
    // carry a dimension of 2^31 or more either.
    if (d > MAX_ELEMENTS) throw rangeError(fn, `${arg}[${i}]`, 'must be at most 2^31-1', d);
    dims[i] = d;
    n *= d;
  }
  if (n > MAX_ELEMENTS) {
    throw rangeError(fn, arg, `must hold at most 2^31-1 elements (${describe(dims)} holds ${n})`, dims);
  }
  return { dims: Object.freeze(dims), n };
}

function checkDType(fn: string, dtype: unknown, arg = 'options.dtype'): DType {
  if (typeof dtype !== 'string' || !DTYPES.includes(dtype as DType)) {
    throw typeError(fn, arg, `must be one of 'float32', 'float16', 'bfloat16', 'int32'`, dtype);
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

const DEVICE_NAMES: Device[] = [];
function deviceName(index: number): Device {
  if (index < 0) return 'cpu';
  return DEVICE_NAMES[index] ??= `cuda:${index}`;
}

function newHostArray(dtype: DType, n: number): HostArray {
  return dtype === 'float32' ? new Float32Array(n) : dtype === 'int32' ? new Int32Array(n) : new Uint16Array(n);
}

export class Tensor {
  readonly shape: readonly number[];
  readonly dtype: DType;
  readonly device: Device;
  /** Element count (the product of the shape). */
  readonly size: number;
  #storage: Storage | null;

  /** @internal Use Tensor.from / Tensor.zeros / Tensor.empty. */
  constructor(token: symbol, storage: Storage, shape: readonly number[], dtype: DType) {
    if (token !== INTERNAL) throw new TypeError('Tensor: use Tensor.from(), Tensor.zeros() or Tensor.empty() to make a tensor');
    this.#storage = storage;
    // Shapes are frozen copies; a frozen one (another tensor's, e.g. an output shaped like its
    // input) is shared as it is.
    this.shape = Object.isFrozen(shape) ? shape : Object.freeze([...shape]);
    let n = 1;
    for (let i = 0; i < shape.length; i++) n *= shape[i];
    this.size = n;
    this.dtype = dtype;
    this.device = deviceName(storage.kind === 'host' ? -1 : storage.index);
    // Frozen: its shape, dtype, size and device cannot be redefined (a getter on `size` would run
    // caller code between a call's checks and its use of them); the storage is a private field.
    Object.freeze(this);
  }

  /** Host tensor from a typed array (copied). */
  static from(data: Float32Array | Uint16Array | Int32Array | ArrayBufferView, shape: readonly number[],
    options?: { dtype?: DType }): Tensor {
    const fn = 'Tensor.from';
    // The kind and length come from the array's internal slots and the copies go through the base
    // constructors (lib/typed.ts), not data.slice(): a subclass, a Symbol.species override or an own
    // `length` could otherwise hand the tensor the caller's own memory, or a length that is not the
    // array's, and the caller could resize or transfer that memory while a call reads it. Typed
    // arrays of another realm (a vm context) are accepted like this realm's.
    const kind = typedArrayKind(data);
    if (kind !== 'Float32Array' && kind !== 'Uint16Array' && kind !== 'Int32Array' && kind !== 'Float16Array') {
      throw typeError(fn, 'data', `must be a Float32Array, Uint16Array, Int32Array${Float16ArrayCtor ? ' or Float16Array' : ''}`, data);
    }
    const view = data as ArrayBufferView;
    const opts = checkOptions(fn, options, ['dtype']);
    const { dims, n } = checkShape(fn, shape);
    const length = typedArrayLength(view);
    if (length !== n) {
      throw rangeError(fn, 'data.length', `must equal the product of shape ${describe(dims)} = ${n}`, length);
    }
    let dtype: DType;
    let host: HostArray;
    if (kind === 'Int32Array') {
      if (opts.dtype !== undefined && opts.dtype !== 'int32') {
        throw typeError(fn, 'options.dtype', `for an Int32Array must be 'int32' (or absent)`, opts.dtype);
      }
      dtype = 'int32';
      host = copyTyped(Int32Array, view);
    } else if (kind === 'Float32Array') {
      dtype = opts.dtype === undefined ? 'float32' : checkDType(fn, opts.dtype);
      if (dtype === 'int32') throw typeError(fn, 'options.dtype', `for a Float32Array must be 'float32', 'float16' or 'bfloat16'`, dtype);
      if (dtype === 'float32') {
        host = copyTyped(Float32Array, view);
      } else {
        // (read by the addon through the array's own memory and length, at once)
        host = new Uint16Array(n);
        native.convertFromF32(view as Float32Array, host, DTYPE_CODE[dtype]);
      }
    } else if (kind === 'Uint16Array') {
      if (opts.dtype === undefined) {
        throw typeError(fn, 'options.dtype', `is required for a Uint16Array ('float16' or 'bfloat16' bits)`, undefined);
      }
      dtype = checkDType(fn, opts.dtype);
      if (dtype === 'float32' || dtype === 'int32') {
        throw typeError(fn, 'options.dtype', `for a Uint16Array must be 'float16' or 'bfloat16'`, dtype);
      }
      host = copyTyped(Uint16Array, view);
    } else {
      const bits = copyTyped(Uint16Array, new Uint16Array(typedArrayBuffer(view), typedArrayByteOffset(view), n));
      dtype = opts.dtype === undefined ? 'float16' : checkDType(fn, opts.dtype);
      if (dtype === 'int32') throw typeError(fn, 'options.dtype', `for a Float16Array must be 'float16', 'bfloat16' or 'float32'`, dtype);
      if (dtype === 'float16') {
        host = bits;
      } else {
        const f32 = new Float32Array(n);
        native.convertToF32(bits, f32, DTYPE_CODE.float16);
        host = dtype === 'float32' ? f32 : new Uint16Array(n);
        if (dtype === 'bfloat16') native.convertFromF32(f32, host as Uint16Array, DTYPE_CODE.bfloat16);
      }
    }
    return new Tensor(INTERNAL, { kind: 'host', data: host }, dims, dtype);
  }

  /** A zero-filled tensor on the host or a CUDA device (on a device: queued, settles at once). */
  static async zeros(shape: readonly number[], options?: { dtype?: DType; device?: Device }): Promise<Tensor> {
    return Tensor.make('Tensor.zeros', shape, options, true);
  }

  /** An uninitialised tensor (zero-filled on the host), e.g. for the `out` options of the attention calls. */
  static async empty(shape: readonly number[], options?: { dtype?: DType; device?: Device }): Promise<Tensor> {
    return Tensor.make('Tensor.empty', shape, options, false);
  }

  private static make(fn: string, shape: readonly number[], options: { dtype?: DType; device?: Device } | undefined,
    zero: boolean): Tensor {
    const opts = checkOptions(fn, options, ['dtype', 'device']);
    const { dims, n } = checkShape(fn, shape);
    const dtype = opts.dtype === undefined ? 'float32' : checkDType(fn, opts.dtype);
    const dev = opts.device === undefined ? -1 : parseDevice(fn, opts.device, 'options.device');
    if (dev < 0) return new Tensor(INTERNAL, { kind: 'host', data: newHostArray(dtype, n) }, dims, dtype);
    const handle = callNative(fn, () => native.alloc(dev, n * ELEMENT_BYTES[dtype], zero));
    return new Tensor(INTERNAL, { kind: 'device', index: dev, handle }, dims, dtype);
  }

  /**
   * @internal Whether `x` was made by this class (a brand check: an object that merely has
   * Tensor.prototype, Object.create(Tensor.prototype), is not one).
   */
  static isTensor(x: unknown): x is Tensor {
    return typeof x === 'object' && x !== null && #storage in x;
  }

  get disposed(): boolean {
    return this.#storage === null;
  }

  // The library's access to a tensor's memory (storageOf, below): not a method, so that it is not part
  // of the public object (a caller holding the memory of its tensor could detach or resize it while a
  // call reads it).
  static {
    Object.defineProperty(Tensor.prototype, TENSOR_BRAND, { value: true });
    setForeignTensorTest((x) => !(x instanceof Tensor));  // (an object made from this prototype is not another copy's)
    readStorage = (t, fn, arg) => {
      if (t.#storage === null) throw new TypeError(`${fn}: ${arg} is disposed, got a disposed Tensor`);
      return t.#storage;
    };
  }

  /**
   * Copies to another device ('cpu', 'cuda', 'cuda:N'). Always returns a new tensor. To a GPU the copy
   * is queued (the Promise settles at once for tensors up to a few MiB, else once the copy is
   * ordered on the device's stream); to the host it waits for the work that produced the tensor.
   */
  async to(device: Device): Promise<Tensor> {
    const fn = 'Tensor.to';
    const s = storageOf(this, fn, 'tensor');
    const dev = parseDevice(fn, device);
    if (dev < 0) return wrapHost(await this.toTypedArray(), this.shape, this.dtype);
    if (s.kind === 'device') {
      const handle = callNative(fn, () => native.copyDevice(s.handle, dev));
      return wrapDevice(dev, handle, this.shape, this.dtype);
    }
    const data = s.data;
    // behind the CPU calls made before it that write the tensor, and ahead of later ones that write it
    const handle = await inCpuOrder(cpuPlan([data]), () => callNativeAsync(fn, () => native.upload(dev, data)));
    return wrapDevice(dev, handle, this.shape, this.dtype);
  }

  /** The elements in the tensor's own dtype: Float32Array, Int32Array, or Uint16Array of float16/bfloat16 bits. */
  async toTypedArray(): Promise<Float32Array | Uint16Array | Int32Array> {
    const fn = 'Tensor.toTypedArray';
    const s = storageOf(this, fn, 'tensor');
    if (s.kind === 'host') {
      const data = s.data;
      // behind the CPU calls made before this read that write the tensor, and ahead of later ones that
      // write it; with none pending, read now (done before any later call starts: nothing to record)
      const plan = cpuPlan([data]);
      if (plan.deps.length === 0) return Promise.resolve(data.slice());
      return inCpuOrder(plan, async () => data.slice());
    }
    const out = newHostArray(this.dtype, this.size);
    await callNativeAsync(fn, () => native.download(s.handle, out));
    return out;
  }

  /** The elements widened to float32 (downloaded first when on a GPU). */
  async toFloat32Array(): Promise<Float32Array> {
    storageOf(this, 'Tensor.toFloat32Array', 'tensor');
    const raw = await this.toTypedArray();
    if (raw instanceof Float32Array) return raw;
    if (raw instanceof Int32Array) return Float32Array.from(raw);
    const out = new Float32Array(raw.length);
    native.convertToF32(raw, out, DTYPE_CODE[this.dtype]);
    return out;
  }

  /** Frees the storage now (device memory is released in stream order). Idempotent. */
  dispose(): void {
    const s = this.#storage;
    this.#storage = null;
    if (s?.kind === 'device') {
      native.free(s.handle);
      if (spares.length < MAX_SPARES) spares.push(s.handle);
    }
  }

  /** `using t = ...` (TypeScript 5.2+ explicit resource management): disposed at the end of the scope. */
  [Symbol.dispose](): void {
    this.dispose();
  }


  toString(): string {
    return `Tensor(shape=[${this.shape.join(', ')}], dtype=${this.dtype}, device=${this.device}${this.disposed ? ', disposed' : ''})`;
  }
}

/** Runs a native call, prefixing its error message with the function name. */
export function callNative<T>(fn: string, f: () => T): T {
  try {
    return f();
  } catch (e) {
    throw prefixError(fn, e);
  }
}

// CPU-backend calls of this thread that share host memory run in call order where one of them
// writes it, as a GPU stream runs its calls: a call that uses what an earlier one writes (appendKV's
// cache, an `out` tensor) finds it written whether or not the caller awaited the earlier call, a call
// that writes memory starts after the earlier calls that use it, and a host read or upload of a
// tensor waits for the calls made before it that write the tensor (and later writers wait for the
// read). Calls that only read the same memory (one K / V cache, one q) run side by side, as do calls
// on disjoint tensors, and a call with nothing to wait for starts at once (a small one on the calling
// thread). Memory is an ArrayBuffer: views of one buffer count as the same memory.
// A memory's record stays (a WeakMap: it goes with the memory) and is emptied rather than deleted
// when its calls have settled, so that a serving loop's calls on the same caches allocate none.
interface Uses {
  write?: Promise<void>;        // the latest pending call that writes it
  reads: Set<Promise<void>>;    // the pending calls made after that one that only read it
}
const uses = new WeakMap<ArrayBufferLike, Uses>();
const cpuAll = new Set<Promise<void>>();  // every pending call (settles, never rejects)
// Arrays that one call owns (the copies checkIndex takes of Int32Array index arrays): no other call
// can reach their memory, so they take no part in the order. Reading a small array's `buffer`
// would also make V8 move it off its heap (a new ArrayBuffer per call).
// The mark is an own property under a module-private symbol, defined (no setter on a prototype
// chain is consulted) and read as an own property (nothing on the chain is). A WeakSet did the same
// at ~10% of a one-token appendKV's time: its insertions take V8's ephemeron barrier and their
// collection a pass of their own.
const OWN = Symbol('flash-attention-node: a call\'s own copy');
const OWN_MARK: PropertyDescriptor = { value: true };
const hasOwn = Object.hasOwn, defineProperty = Object.defineProperty;
/** Marks `a` as one call's own copy and returns it. */
export function ownCopy<A extends ArrayBufferView>(a: A): A {
  defineProperty(a, OWN, OWN_MARK);
  return a;
}
function memories(arrays: readonly unknown[]): Set<ArrayBufferLike> {
  const out = new Set<ArrayBufferLike>();
  for (const a of arrays) {
    if (typedArrayKind(a) !== undefined && !hasOwn(a as object, OWN)) out.add(typedArrayBuffer(a as ArrayBufferView));
  }
  return out;
}
/**
 * A CPU call's place in the order: the memories it uses (`mems`), those of them it writes (`written`),
 * and the pending calls it must wait for (`deps`). It reads `arrays` (inputs, index arrays) and writes
 * `writes` (outputs; an array in both counts as written).
 */
export interface CpuPlan {
  mems: Set<ArrayBufferLike>;
  written: Set<ArrayBufferLike>;
  deps: Promise<void>[];
}
export function cpuPlan(arrays: readonly unknown[], writes: readonly unknown[] = []): CpuPlan {
  const written = memories(writes);
  const mems = memories(arrays);
  for (const m of written) mems.add(m);
  const deps = new Set<Promise<void>>();
  for (const m of mems) {
    const u = uses.get(m);
    if (u === undefined) continue;
    if (u.write !== undefined) deps.add(u.write);
    if (written.has(m)) for (const r of u.reads) deps.add(r);
  }
  return { mems, written, deps: [...deps] };
}

/**
 * Runs `start` (one CPU call, or a host read) once the pending calls of `plan.deps` have settled, at
 * once when there are none. The plan must be made just before (no CPU call in between).
 */
export function inCpuOrder<T>(plan: CpuPlan, start: () => Promise<T>): Promise<T> {
  const { mems, written, deps } = plan;
  const p = deps.length === 0 ? start() : (deps.length === 1 ? deps[0] : Promise.all(deps)).then(start);
  // `settled` resolves (never rejects) once the call has settled and left its memories' records
  const recs: Uses[] = [];
  const done = (): void => {
    cpuAll.delete(settled);
    for (const u of recs) {
      if (u.write === settled) u.write = undefined;
      u.reads.delete(settled);
    }
  };
  const settled: Promise<void> = p.then(done, done);
  for (const m of mems) {
    let u = uses.get(m);
    if (u === undefined) uses.set(m, u = { reads: new Set() });
    recs.push(u);
    // a writer waits for the readers before it, so later calls need wait only for the writer
    if (written.has(m)) {
      u.write = settled;
      u.reads.clear();
    } else {
      u.reads.add(settled);
    }
  }
  cpuAll.add(settled);
  return p;
}

/** Whether no CPU call (or host read) of this thread is pending: a call made now waits for nothing. */
export function cpuIdle(): boolean {
  return cpuAll.size === 0;
}

/** Settles once every CPU call made so far on this thread has settled. */
export async function cpuCallsDone(): Promise<void> {
  if (cpuAll.size > 0) await Promise.allSettled([...cpuAll]);
}

/** Like callNative for a call that may return a Promise. */
export async function callNativeAsync<T>(fn: string, f: () => T | Promise<T>): Promise<T> {
  try {
    return await f();
  } catch (e) {
    throw prefixError(fn, e);
  }
}

function prefixError(fn: string, e: unknown): unknown {
  if (e instanceof Error && !e.message.startsWith(fn)) {
    const msg = `${fn}: ${e.message.replace(/^internal: /, 'internal error: ')}`;
    const Ctor = e instanceof RangeError ? RangeError : e instanceof TypeError ? TypeError : Error;
    const err = new Ctor(msg);
    (err as Error & { cause?: unknown }).cause = e;
    return err;
  }
  return e;
}

/** The result of a forward call: out and lse, disposable together (`using r = await ...`). */
export class OutLse {
  constructor(public out: Tensor, public lse: Tensor) {}
  [Symbol.dispose](): void {
    this.out.dispose();
    this.lse.dispose();
  }
}

/** The result of a backward call: the gradients (and softmaxD when asked), disposable together. */
export class Grads {
  softmaxD?: Tensor;
  constructor(public dq: Tensor, public dk: Tensor, public dv: Tensor, softmaxD?: Tensor) {
    if (softmaxD !== undefined) this.softmaxD = softmaxD;
  }
  [Symbol.dispose](): void {
    this.dq.dispose();
    this.dk.dispose();
    this.dv.dispose();
    this.softmaxD?.dispose();
  }
}

/** @internal A tensor's storage, checked: throws TypeError naming `arg` when it is disposed. */
export function storageOf(t: Tensor, fn: string, arg: string): Storage {
  return readStorage(t, fn, arg);
}

/** @internal A host tensor on `data` (the library's own array: not a copy). */
export function wrapHost(data: HostArray, shape: readonly number[], dtype: DType): Tensor {
  return new Tensor(INTERNAL, { kind: 'host', data }, shape, dtype);
}

/** @internal A device tensor on `handle`. */
export function wrapDevice(index: number, handle: Handle, shape: readonly number[], dtype: DType): Tensor {
  return new Tensor(INTERNAL, { kind: 'device', index, handle }, shape, dtype);
}
