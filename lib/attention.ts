// flashAttention / flashAttentionBackward: argument checks, then the CPU or CUDA backend.
//
// CUDA calls are stream-ordered: the kernels are queued on the device's stream and the Promise
// settles at once with the output tensors (see tensor.ts and the README); CPU calls settle when
// their work is done.
import { checkBoolean, checkFloatDtype, checkInt, checkOptions, describe, optionList, rangeError, typeError } from './errors';
import { F, OP, S, callSlots, native, newParams, slotArray, type Handle, type HostArray, type SlotName, type SlotValue } from './native';
import {
  DTYPE_CODE, ELEMENT_BYTES, MAX_ELEMENTS, Tensor, callNative, callNativeAsync, cpuIdle, cpuPlan, inCpuOrder, spareHandle, storageOf, wrapDevice, wrapHost, OutLse, Grads, type DType,
} from './tensor';

export interface MaskOptions {
  /** Default false. Bottom-right aligned when seqlenQ != seqlenK: query i sees keys j <= i + Nk - Nq. */
  causal?: boolean;
  /** Multiplies QK^T; default 1 / sqrt(headDim). */
  scale?: number;
  /**
   * Sliding window [left, right]: query i, aligned bottom-right at key position p = i + Nk - Nq,
   * sees keys j with p - left <= j <= p + right; -1 means unbounded on that side. causal: true is
   * the same as [-1, 0]; both may be given.
   */
  window?: readonly [number, number];
  /** > 0: each score s = scale * q.k becomes softcap * tanh(s / softcap) (Gemma 2). 0 or absent: off. */
  softcap?: number;
  /** CPU backend tuning: tile rows/columns and worker threads (default: tuned tiles, all cores). */
  cpu?: { blockM?: number; blockN?: number; threads?: number };
}

export interface AttentionOptions extends MaskOptions {
  /** 'bshd' ([batch, seqlen, heads, headDim], default) or 'bhsd' ([batch, heads, seqlen, headDim]). */
  layout?: 'bshd' | 'bhsd';
  /** Caller-owned output to write into (q's shape, dtype and device) instead of allocating. */
  out?: Tensor;
  /** Caller-owned float32 lse to write into ([B, H, Nq], q's device) instead of allocating. */
  lse?: Tensor;
}

export interface BackwardOptions extends MaskOptions {
  layout?: 'bshd' | 'bhsd';
  /** CUDA: bit-identical gradients across runs (no float atomics). The CPU backend always is. */
  deterministic?: boolean;
  /** Also return softmaxD = rowsum(dout * out), float32 [B, H, Nq] (the D of the algorithm). */
  returnSoftmaxD?: boolean;
  /** Caller-owned gradients to write into (q's / k's / v's shape, dtype and device). */
  dq?: Tensor;
  dk?: Tensor;
  dv?: Tensor;
}

/** out and lse; `using r = await flashAttention(...)` disposes both. */
export type AttentionResult = OutLse;
/** dq, dk, dv (and softmaxD when asked); disposable together. */
export type BackwardResult = Grads;

const MASK_OPTIONS = ['causal', 'scale', 'window', 'softcap', 'cpu'] as const;
const FWD_OPTIONS = optionList([...MASK_OPTIONS, 'layout', 'out', 'lse'] as const);
const BWD_OPTIONS = optionList([...MASK_OPTIONS, 'layout', 'deterministic', 'returnSoftmaxD', 'dq', 'dk', 'dv'] as const);
export const MAX_HEAD_DIM = 256;

/** The mask, score and CPU options of a call, checked. */
export interface Mask {
  causal: boolean; scale: number; softcap: number; hasWindow: boolean; left: number; right: number;
  blockM: number; blockN: number; threads: number;
}

interface Problem extends Mask {
  B: number; Nq: number; Nk: number; H: number; Hkv: number; D: number;
  dtype: DType; device: number; bhsd: boolean;
}

/** Index of each logical dimension in a 4-D attention tensor, per layout. */
const AXES_BSHD = { batch: 0, seqlen: 1, heads: 2, headDim: 3 } as const;
const AXES_BHSD = { batch: 0, seqlen: 2, heads: 1, headDim: 3 } as const;
type Axes = typeof AXES_BSHD | typeof AXES_BHSD;
function axes(bhsd: boolean): Axes {
  return bhsd ? AXES_BHSD : AXES_BSHD;
}
function dimName(name: string, ax: Axes, key: keyof Axes): string {
  return `${name}.shape[${ax[key]}] (${key})`;
}

export function checkTensorArg(fn: string, name: string, t: unknown): Tensor {
  if (!Tensor.isTensor(t)) throw typeError(fn, name, 'must be a Tensor', t);
  if (t.disposed) throw new TypeError(`${fn}: ${name} is disposed, got a disposed Tensor`);
  return t;
}

export function deviceIndex(t: Tensor): number {
  const d = t.device;
  return d === 'cpu' ? -1 : d === 'cuda:0' ? 0 : Number(d.slice(5));
}

function check4d(fn: string, name: string, t: Tensor, bhsd: boolean): void {
  if (t.shape.length !== 4) {
    throw rangeError(fn, `${name}.shape`, `must have 4 dimensions ${bhsd ? '[batch, heads, seqlen, headDim] (layout bhsd)'
      : '[batch, seqlen, heads, headDim] (layout bshd)'}`, t.shape);
  }
}

// The mask record of a call that gives no mask option, one per head dim (frozen: shared).
const DEFAULT_MASKS: Array<Readonly<Mask>> = [];
const CAUSAL_MASKS: Array<Readonly<Mask>> = [];

const FLOAT32_MAX = 3.4028234663852886e38;
const FLOAT32_MIN_NORMAL = 1.1754943508222875e-38;

/** causal, scale, window, softcap and the CPU tuning options. */
export function checkMask(fn: string, opts: Readonly<Record<string, unknown>>, D: number): Readonly<Mask> {
  if ((opts.causal === undefined || opts.causal === true) && opts.scale === undefined && opts.window === undefined &&
    opts.softcap === undefined && opts.cpu === undefined && D > 0) {
    // No mask option given, or causal alone (most calls): one frozen record per head dim of each,
    // as the checks below would make it.
    const causal = opts.causal === true;
    return (causal ? CAUSAL_MASKS : DEFAULT_MASKS)[D] ??= Object.freeze({
      causal, scale: 1 / Math.sqrt(D), softcap: 0, hasWindow: causal, left: -1, right: causal ? 0 : -1, blockM: 0, blockN: 0, threads: 0,
    });
  }
  const causal = checkBoolean(fn, 'options.causal', opts.causal, false);
  let scale = 1 / Math.sqrt(D);
  // scale and softcap reach the kernels as float32: a value past float32's range would become
  // infinite there (every score NaN), and a positive softcap under its smallest normal value would
  // become 0 (softcap off) or make 1 / softcap infinite.
  const scaleOpt = opts.scale;
  if (scaleOpt !== undefined) {
    if (typeof scaleOpt !== 'number') throw typeError(fn, 'options.scale', 'must be a finite number', scaleOpt);
    if (!Number.isFinite(scaleOpt) || Math.abs(scaleOpt) > FLOAT32_MAX) {
      throw rangeError(fn, 'options.scale', 'must be a finite number within float32 range (|scale| <= 3.4e38)', scaleOpt);
    }
    scale = scaleOpt;
  }
  let softcap = 0;
  const softcapOpt = opts.softcap;
  if (softcapOpt !== undefined) {
    if (typeof softcapOpt !== 'number') throw typeError(fn, 'options.softcap', 'must be a finite number >= 0', softcapOpt);
    if (!Number.isFinite(softcapOpt) || softcapOpt < 0 || softcapOpt > FLOAT32_MAX || (softcapOpt > 0 && softcapOpt < FLOAT32_MIN_NORMAL)) {
      throw rangeError(fn, 'options.softcap', 'must be 0 (off) or a finite number within float32 range (1.2e-38 <= softcap <= 3.4e38)', softcapOpt);
    }
    softcap = softcapOpt;
  }
  let hasWindow = causal, left = -1, right = causal ? 0 : -1;
  if (opts.window !== undefined) {
    const w = opts.window;
    // each bound read once (an array with getters cannot pass with one value and be used with another)
    const w0: unknown = Array.isArray(w) && w.length === 2 ? w[0] : undefined;
    const w1: unknown = Array.isArray(w) && w.length === 2 ? w[1] : undefined;
    if (typeof w0 !== 'number' || typeof w1 !== 'number') {
      throw typeError(fn, 'options.window', 'must be [left, right], two integers >= -1', w);
    }
    for (const [i, side, x] of [[0, 'left', w0], [1, 'right', w1]] as const) {
      if (!Number.isInteger(x) || x < -1 || x > MAX_ELEMENTS) {
        throw rangeError(fn, `options.window[${i}] (${side})`, 'must be an integer >= -1 (-1: unbounded)', x);
      }
    }
    hasWindow = hasWindow || w0 >= 0 || w1 >= 0;
    left = w0;
    // causal is the same as [-1, 0]: the tighter right bound wins.
    right = causal ? (w1 < 0 ? 0 : Math.min(w1, 0)) : w1;
  }
  let blockM = 0, blockN = 0, threads = 0;
  if (opts.cpu !== undefined) {
    const c = checkOptions(fn, opts.cpu, ['blockM', 'blockN', 'threads'], 'options.cpu');
    blockM = checkInt(fn, 'options.cpu.blockM', c.blockM, 1, 1024, 0);
    blockN = checkInt(fn, 'options.cpu.blockN', c.blockN, 1, 1024, 0);
    threads = checkInt(fn, 'options.cpu.threads', c.threads, 1, 1024, 0);
  }
  return { causal, scale, softcap, hasWindow, left, right, blockM, blockN, threads };
}

/** CUDA head-dim support of this build (RangeError naming the argument). */
const cudaHeadDims = new Map<number, boolean>();
export function checkCudaHeadDim(fn: string, arg: string, dtype: DType, D: number): void {
  if (D % 8 !== 0) throw rangeError(fn, arg, 'must be a multiple of 8 on CUDA', D);
  const key = DTYPE_CODE[dtype] * 1024 + D;
  let ok = cudaHeadDims.get(key);
  if (ok === undefined) cudaHeadDims.set(key, ok = native.cudaSupports(DTYPE_CODE[dtype], D));
  if (!ok) {
    throw rangeError(fn, arg, `has no CUDA ${dtype} kernel in this build (${describe(native.buildInfo().cudaHeadDims)})`, D);
  }
}

/** Checks q, k, v and the options shared by forward and backward. */
function checkProblem(fn: string, q: unknown, k: unknown, v: unknown, opts: Record<string, unknown>): Problem {
  const tq = checkTensorArg(fn, 'q', q);
  const tk = checkTensorArg(fn, 'k', k);
  const tv = checkTensorArg(fn, 'v', v);
  const layout = opts.layout === undefined ? 'bshd' : opts.layout;
  if (typeof layout !== 'string') throw typeError(fn, 'options.layout', `must be 'bshd' or 'bhsd'`, layout);
  if (layout !== 'bshd' && layout !== 'bhsd') throw rangeError(fn, 'options.layout', `must be 'bshd' or 'bhsd'`, layout);
  const bhsd = layout === 'bhsd';
  const ax = axes(bhsd);
  check4d(fn, 'q', tq, bhsd);
  check4d(fn, 'k', tk, bhsd);
  check4d(fn, 'v', tv, bhsd);
  const qs = tq.shape, ks = tk.shape, vs = tv.shape;
  const B = qs[0], Nq = qs[ax.seqlen], H = qs[ax.heads], D = qs[3];
  if (D < 1 || D > MAX_HEAD_DIM) {
    throw rangeError(fn, dimName('q', ax, 'headDim'), `must be between 1 and ${MAX_HEAD_DIM}`, D);
  }
  if (H < 1) throw rangeError(fn, dimName('q', ax, 'heads'), 'must be at least 1', H);
  const Nk = ks[ax.seqlen];
  const Hkv = ks[ax.heads];
  if (ks[0] !== B) throw rangeError(fn, dimName('k', ax, 'batch'), `must equal q.shape[0] = ${B}`, ks[0]);
  if (ks[3] !== D) throw rangeError(fn, dimName('k', ax, 'headDim'), `must equal q.shape[3] = ${D}`, ks[3]);
  if (Hkv < 1 || H % Hkv !== 0) {
    throw rangeError(fn, dimName('k', ax, 'heads'), `must divide q.shape[${ax.heads}] = ${H} (query heads; MQA/GQA need H % Hkv == 0)`, Hkv);
  }
  for (let i = 0; i < 4; i++) {
    if (vs[i] !== ks[i]) {
      const key = (['batch', 'seqlen', 'heads', 'headDim'] as const).find((x) => ax[x] === i)!;
      throw rangeError(fn, dimName('v', ax, key), `must equal k.shape[${i}] = ${ks[i]}`, vs[i]);
    }
  }
  // q's own dtype first: with an int32 q, the message names q rather than a k or v that is right
  checkFloatDtype(fn, 'q.dtype', tq.dtype);
  if (tk.dtype !== tq.dtype) throw typeError(fn, 'k.dtype', `must equal q.dtype = '${tq.dtype}'`, tk.dtype);
  if (tv.dtype !== tq.dtype) throw typeError(fn, 'v.dtype', `must equal q.dtype = '${tq.dtype}'`, tv.dtype);
  if (tk.device !== tq.device) throw typeError(fn, 'k.device', `must equal q.device = '${tq.device}'`, tk.device);
  if (tv.device !== tq.device) throw typeError(fn, 'v.device', `must equal q.device = '${tq.device}'`, tv.device);
  if (tq.size > MAX_ELEMENTS) throw rangeError(fn, 'q.shape', 'must hold at most 2^31-1 elements', qs);
  if (tk.size > MAX_ELEMENTS) throw rangeError(fn, 'k.shape', 'must hold at most 2^31-1 elements', ks);
  if (B * H * Nq > MAX_ELEMENTS) throw rangeError(fn, 'q.shape', 'must have batch*heads*seqlen at most 2^31-1', qs);
  const m = checkMask(fn, opts, D);
  const device = deviceIndex(tq);
  if (device >= 0) checkCudaHeadDim(fn, dimName('q', ax, 'headDim'), tq.dtype, D);
  return {
    B, Nq, Nk, H, Hkv, D, dtype: tq.dtype, device, bhsd, causal: m.causal, scale: m.scale, softcap: m.softcap,
    hasWindow: m.hasWindow, left: m.left, right: m.right, blockM: m.blockM, blockN: m.blockN, threads: m.threads,
  };
}

/**
 * A caller-owned output tensor (the `out`, `lse`, `dq`, ... options): undefined when not given,
 * else checked for shape, dtype and device, and for not being one of the call's inputs.
 */
export function checkOutput(fn: string, name: string, t: unknown, shape: readonly number[], dtype: DType,
  device: number, inputs: readonly unknown[]): Tensor | undefined {
  if (t === undefined) return undefined;
  const tt = checkTensorArg(fn, name, t);
  if (tt.dtype !== dtype) throw typeError(fn, `${name}.dtype`, `must be '${dtype}'`, tt.dtype);
  const dev = deviceIndex(tt);
  if (dev !== device) {
    throw typeError(fn, `${name}.device`, `must be '${device < 0 ? 'cpu' : `cuda:${device}`}' (the inputs' device)`, tt.device);
  }
  if (tt.shape.length !== shape.length || tt.shape.some((d, i) => d !== shape[i])) {
    throw rangeError(fn, `${name}.shape`, `must be ${describe(shape)}`, tt.shape);
  }
  if (inputs.includes(tt)) throw typeError(fn, name, 'must not be one of the inputs of the call', `the same Tensor`, true);
  return tt;
}

/** The storage of a tensor as a slot value: its device handle or its host array. */
export function slotOf(t: Tensor | undefined, fn: string, name: string): Handle | HostArray | null {
  if (t === undefined) return null;
  const s = storageOf(t, fn, name);
  return s.kind === 'device' ? s.handle : s.data;
}

/**
 * An output slot: the caller's tensor, or (CUDA) a spare handle that the call fills with its new
 * output and returns, or null (the call makes a new handle).
 */
export function outSlot(t: Tensor | undefined, fn: string, name: string, device: number): Handle | HostArray | null {
  return t !== undefined ? slotOf(t, fn, name) : device >= 0 ? spareHandle() : null;
}

export function hostArray(dtype: DType, n: number): HostArray {
  return dtype === 'float32' ? new Float32Array(n) : dtype === 'int32' ? new Int32Array(n) : new Uint16Array(n);
}

/** The mask / score / CPU fields of a params record. */
export function fillMask(P: Float64Array, m: Mask): void {
  P[F.causal] = m.causal ? 1 : 0;
  P[F.scale] = m.scale;
  P[F.softcap] = m.softcap;
  P[F.has_window] = m.hasWindow ? 1 : 0;
  P[F.window_left] = m.left;
  P[F.window_right] = m.right;
  P[F.block_m] = m.blockM;
  P[F.block_n] = m.blockN;
  P[F.threads] = m.threads;
}

function params(p: Problem): Float64Array {
  const P = newParams();
  P[F.device] = p.device;
  P[F.batch] = p.B;
  P[F.seqlen_q] = p.Nq;
  P[F.seqlen_k] = p.Nk;
  P[F.heads] = p.H;
  P[F.heads_k] = p.Hkv;
  P[F.head_dim] = p.D;
  P[F.dtype] = DTYPE_CODE[p.dtype];
  P[F.bhsd] = p.bhsd ? 1 : 0;
  fillMask(P, p);
  return P;
}

/**
 * Runs one call on the backend of `device`. CPU: every output slot must hold a host array; the
 * Promise settles when the work is done. CUDA: output slots that are null are allocated by the call,
 * and their handles come back in slot order; the work is queued and the call returns at once.
 */
export function runCall(fn: string, op: number, P: Float64Array, device: number,
  slots: Partial<Record<SlotName, SlotValue>>): Handle[] | Promise<Handle[]> {
  return runSlots(fn, op, P, device, slotArray(P, slots));
}

let written: Map<number, number[]> | undefined;
/** The slots an operation writes on the CPU backend (every other slot it only reads). */
function writtenSlots(op: number): number[] {
  written ??= new Map([
    [OP.forward, [S.out, S.lse]],
    [OP.paged, [S.out, S.lse]],
    [OP.backward, [S.dq, S.dk, S.dv, S.softmax_d]],
    [OP.append_kv, [S.k_cache, S.v_cache]],
  ]);
  const w = written.get(op);
  if (w === undefined) throw new Error(`flash-attention-node: internal error: no written slots for op ${op}`);
  return w;
}

/** runCall with the slot array already made (slotArray, or indexed by S and slot_count set). */
export function runSlots(fn: string, op: number, P: Float64Array, device: number, arr: SlotValue[]): Handle[] | Promise<Handle[]> {
  if (device < 0) {
    let started: Promise<void> | undefined;
    if (cpuIdle()) {
      // Nothing pending on this thread, so nothing to wait for: the call starts now. Run on this
      // thread (a small one), it is done when the addon returns (undefined) and needs no place in
      // the order; handed to a worker (a Promise), it takes one, as below, so that later calls on
      // its tensors wait for it.
      let r: Promise<void> | Handle[] | undefined;
      try {
        r = callNative(fn, () => callSlots(op, P, arr));
      } catch (e) {
        return Promise.reject(e);
      }
      if (r === undefined) return Promise.resolve([]);
      started = r as Promise<void>;
    }
    // (behind earlier CPU calls on the same tensors: the shared params record is copied now; the
    // index arrays in the slots are already the call's own copies, made by checkIndex)
    const plan = cpuPlan(arr, writtenSlots(op).map((i) => arr[i]));
    const Pc = plan.deps.length > 0 ? P.slice() : P;
    return inCpuOrder(plan, () => callNativeAsync(fn, () => started ?? (callSlots(op, Pc, arr) as Promise<void>))).then(() => []);
  }
  // CUDA: queued; the handles come back at once (no await, so no extra turn of the event loop).
  return callNative(fn, () => callSlots(op, P, arr) as Handle[]);
}

/**
 * Attention forward: out = softmax(scale * q k^T [+ mask]) v, and the row log-sum-exp.
 * Runs on the inputs' device. CUDA: queued on the device's stream; the Promise settles at once.
 */
export async function flashAttention(q: Tensor, k: Tensor, v: Tensor, options?: AttentionOptions): Promise<AttentionResult> {
  const fn = 'flashAttention';
  const opts = checkOptions(fn, options, FWD_OPTIONS);
  const p = checkProblem(fn, q, k, v, opts);
  // Frozen: the lse tensor takes it as its shape without a copy.
  const lseShape = Object.freeze([p.B, p.H, p.Nq]);
  let out: Tensor | undefined, lse: Tensor | undefined;
  if (opts.out !== undefined || opts.lse !== undefined) {
    const inputs = [q, k, v];
    out = checkOutput(fn, 'options.out', opts.out, q.shape, p.dtype, p.device, inputs);
    lse = checkOutput(fn, 'options.lse', opts.lse, lseShape, 'float32', p.device, inputs);
    if (out !== undefined && out === lse) throw typeError(fn, 'options.lse', 'must not be options.out', 'the same Tensor', true);
  }
  if (p.B * p.Nq * p.H === 0) {  // nothing to write
    return new OutLse(
      out ?? await Tensor.empty(q.shape, { dtype: p.dtype, device: q.device }),
      lse ?? await Tensor.empty(lseShape, { dtype: 'float32', device: q.device }),
    );
  }
  const P = params(p);
  if (p.device < 0) {
    out ??= wrapHost(hostArray(p.dtype, q.size), q.shape, p.dtype);
    lse ??= wrapHost(new Float32Array(p.B * p.H * p.Nq), lseShape, 'float32');
  }
  // The slot array indexed directly (what slotArray makes from named slots, without its lookups).
  const arr: SlotValue[] = [];
  arr[S.q] = slotOf(q, fn, 'q');
  arr[S.k] = slotOf(k, fn, 'k');
  arr[S.v] = slotOf(v, fn, 'v');
  arr[S.out] = outSlot(out, fn, 'options.out', p.device);
  arr[S.lse] = outSlot(lse, fn, 'options.lse', p.device);
  P[F.slot_count] = arr.length;
  const r = runSlots(fn, OP.forward, P, p.device, arr);
  const h = r instanceof Promise ? await r : r;
  let i = 0;
  return new OutLse(
    out ?? wrapDevice(p.device, h[i++], q.shape, p.dtype),
    lse ?? wrapDevice(p.device, h[i++], lseShape, 'float32'),
  );
}

/**
 * Gradients of sum(out * dout) with respect to q, k and v, from the forward's out and lse.
 * dk and dv are summed over each GQA group.
 */
export async function flashAttentionBackward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
  lse: Tensor, options?: BackwardOptions): Promise<BackwardResult> {
  const fn = 'flashAttentionBackward';
  const opts = checkOptions(fn, options, BWD_OPTIONS);
  const p = checkProblem(fn, q, k, v, opts);
  const deterministic = checkBoolean(fn, 'options.deterministic', opts.deterministic, false);
  const wantD = checkBoolean(fn, 'options.returnSoftmaxD', opts.returnSoftmaxD, false);
  for (const [name, t] of [['dout', dout], ['out', out]] as const) {
    const tt = checkTensorArg(fn, name, t);
    check4d(fn, name, tt, p.bhsd);
    for (let i = 0; i < 4; i++) {
      if (tt.shape[i] !== q.shape[i]) throw rangeError(fn, `${name}.shape`, `must equal q.shape = ${describe(q.shape)}`, tt.shape);
    }
    if (tt.dtype !== p.dtype) throw typeError(fn, `${name}.dtype`, `must equal q.dtype = '${p.dtype}'`, tt.dtype);
    if (tt.device !== q.device) throw typeError(fn, `${name}.device`, `must equal q.device = '${q.device}'`, tt.device);
  }
  const tl = checkTensorArg(fn, 'lse', lse);
  const lseShape = [p.B, p.H, p.Nq];
  if (tl.shape.length !== 3 || tl.shape.some((d, i) => d !== lseShape[i])) {
    throw rangeError(fn, 'lse.shape', `must be [batch, heads, seqlenQ] = ${describe(lseShape)}`, tl.shape);
  }
  if (tl.dtype !== 'float32') throw typeError(fn, 'lse.dtype', `must be 'float32'`, tl.dtype);
  if (tl.device !== q.device) throw typeError(fn, 'lse.device', `must equal q.device = '${q.device}'`, tl.device);
  const inputs = [dout, q, k, v, out, lse];
  let dq = checkOutput(fn, 'options.dq', opts.dq, q.shape, p.dtype, p.device, inputs);
  let dk = checkOutput(fn, 'options.dk', opts.dk, k.shape, p.dtype, p.device, inputs);
  let dv = checkOutput(fn, 'options.dv', opts.dv, v.shape, p.dtype, p.device, inputs);
  if ((dq && (dq === dk || dq === dv)) || (dk && dk === dv)) {
    throw typeError(fn, 'options.dq/dk/dv', 'must be three different tensors', 'the same Tensor twice', true);
  }
  if (p.B * p.H * p.Nq === 0 && p.B * p.Hkv * p.Nk === 0) {
    return new Grads(
      dq ?? await Tensor.empty(q.shape, { dtype: p.dtype, device: q.device }),
      dk ?? await Tensor.empty(k.shape, { dtype: p.dtype, device: q.device }),
      dv ?? await Tensor.empty(v.shape, { dtype: p.dtype, device: q.device }),
      wantD ? await Tensor.empty(lseShape, { dtype: 'float32', device: q.device }) : undefined,
    );
  }
  const P = params(p);
  P[F.deterministic] = deterministic ? 1 : 0;
  let softmaxD: Tensor | undefined;
  if (p.device < 0) {
    dq ??= wrapHost(hostArray(p.dtype, q.size), q.shape, p.dtype);
    dk ??= wrapHost(hostArray(p.dtype, k.size), k.shape, p.dtype);
    dv ??= wrapHost(hostArray(p.dtype, v.size), v.shape, p.dtype);
    if (wantD) softmaxD = wrapHost(new Float32Array(p.B * p.H * p.Nq), lseShape, 'float32');
  }
  const h = await runCall(fn, OP.backward, P, p.device, {
    dout: slotOf(dout, fn, 'dout'), q: slotOf(q, fn, 'q'), k: slotOf(k, fn, 'k'), v: slotOf(v, fn, 'v'),
    out: slotOf(out, fn, 'out'), lse: slotOf(lse, fn, 'lse'),
    dq: outSlot(dq, fn, 'options.dq', p.device), dk: outSlot(dk, fn, 'options.dk', p.device),
    dv: outSlot(dv, fn, 'options.dv', p.device),
    softmax_d: p.device < 0 ? slotOf(softmaxD, fn, 'softmaxD') : wantD,
  });
  let i = 0;
  const tdq = dq ?? wrapDevice(p.device, h[i++], q.shape, p.dtype);
  const tdk = dk ?? wrapDevice(p.device, h[i++], k.shape, p.dtype);
  const tdv = dv ?? wrapDevice(p.device, h[i++], v.shape, p.dtype);
  return new Grads(tdq, tdk, tdv, wantD ? softmaxD ?? wrapDevice(p.device, h[i++], lseShape, 'float32') : undefined);
}

/**
 * Benchmark hook (used by bench/): runs the CUDA forward `warmup` times, then `reps` times with CUDA
 * events around each launch on the device's stream, and returns the per-launch milliseconds (kernel
 * time). Inputs must be CUDA tensors; the outputs are discarded.
 */
export async function benchmarkForward(q: Tensor, k: Tensor, v: Tensor, options: AttentionOptions | undefined,
  warmup: number, reps: number): Promise<number[]> {
  const fn = 'benchmarkForward';
  const p = checkProblem(fn, q, k, v, checkOptions(fn, options, FWD_OPTIONS));
  if (p.device < 0) throw new TypeError(`${fn}: q must be a CUDA tensor, got device '${q.device}'`);
  const P = params(p);
  const arr = slotArray(P, { q: slotOf(q, fn, 'q'), k: slotOf(k, fn, 'k'), v: slotOf(v, fn, 'v') });
  return Array.from(await native.bench(OP.forward, P, arr, warmup, reps));
}

/** Benchmark hook for the CUDA backward (all its kernels per launch), like benchmarkForward. */
export async function benchmarkBackward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
  options: BackwardOptions | undefined, warmup: number, reps: number): Promise<number[]> {
  const fn = 'benchmarkBackward';
  const opts = checkOptions(fn, options, BWD_OPTIONS);
  const p = checkProblem(fn, q, k, v, opts);
  if (p.device < 0) throw new TypeError(`${fn}: q must be a CUDA tensor, got device '${q.device}'`);
  const P = params(p);
  P[F.deterministic] = checkBoolean(fn, 'options.deterministic', opts.deterministic, false) ? 1 : 0;
  const arr = slotArray(P, {
    dout: slotOf(dout, fn, 'dout'), q: slotOf(q, fn, 'q'), k: slotOf(k, fn, 'k'), v: slotOf(v, fn, 'v'),
    out: slotOf(out, fn, 'out'), lse: slotOf(lse, fn, 'lse'),
  });
  return Array.from(await native.bench(OP.backward, P, arr, warmup, reps));
}

/** FLOPs of one forward the flash-attn way: 4*B*H*Nq*Nk*D, halved when causal. */
export function attentionFlops(B: number, H: number, Nq: number, Nk: number, D: number, causal: boolean): number {
  return (4 * B * H * Nq * Nk * D) / (causal ? 2 : 1);
}
export { ELEMENT_BYTES };
