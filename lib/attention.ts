// flashAttention / flashAttentionBackward: argument checks, then the CPU or CUDA backend.
import { checkBoolean, checkInt, checkOptions, describe, rangeError, typeError } from './errors';
import { native, type Dims, type HostArray, type NativeDeviceBuffer } from './native';
import { DTYPE_CODE, ELEMENT_BYTES, MAX_ELEMENTS, Tensor, type DType } from './tensor';

export interface AttentionOptions {
  /** Default false. Bottom-right aligned when seqlenQ != seqlenK: query i sees keys j <= i + Nk - Nq. */
  causal?: boolean;
  /** Multiplies QK^T; default 1 / sqrt(headDim). */
  scale?: number;
  /** 'bshd' ([batch, seqlen, heads, headDim], default) or 'bhsd' ([batch, heads, seqlen, headDim]). */
  layout?: 'bshd' | 'bhsd';
  /** CPU backend tuning: tile rows/columns and worker threads (default: tuned tiles, all cores). */
  cpu?: { blockM?: number; blockN?: number; threads?: number };
}

export interface BackwardOptions extends AttentionOptions {
  /** CUDA: bit-identical gradients across runs (no float atomics). The CPU backend always is. */
  deterministic?: boolean;
  /** Also return softmaxD = rowsum(dout * out), float32 [B, H, Nq] (the D of the algorithm). */
  returnSoftmaxD?: boolean;
}

export interface AttentionResult { out: Tensor; lse: Tensor }
export interface BackwardResult { dq: Tensor; dk: Tensor; dv: Tensor; softmaxD?: Tensor }

const FWD_OPTIONS = ['causal', 'scale', 'layout', 'cpu'] as const;
const BWD_OPTIONS = [...FWD_OPTIONS, 'deterministic', 'returnSoftmaxD'] as const;
export const MAX_HEAD_DIM = 256;

interface Problem {
  B: number; Nq: number; Nk: number; H: number; Hkv: number; D: number;
  dtype: DType; device: number; bhsd: boolean; causal: boolean; scale: number;
  blockM: number; blockN: number; threads: number;
}

/** Index of each logical dimension in a 4-D attention tensor, per layout. */
function axes(bhsd: boolean) {
  return bhsd ? { batch: 0, seqlen: 2, heads: 1, headDim: 3 } : { batch: 0, seqlen: 1, heads: 2, headDim: 3 };
}

function checkTensorArg(fn: string, name: string, t: unknown): Tensor {
  if (!(t instanceof Tensor)) throw typeError(fn, name, 'must be a Tensor', t);
  if (t.disposed) throw new TypeError(`${fn}: ${name} is disposed, got a disposed Tensor`);
  return t;
}

function deviceIndex(t: Tensor): number {
  return t.device === 'cpu' ? -1 : Number(t.device.slice(5));
}

function check4d(fn: string, name: string, t: Tensor, bhsd: boolean): void {
  if (t.shape.length !== 4) {
    throw rangeError(fn, `${name}.shape`, `must have 4 dimensions ${bhsd ? '[batch, heads, seqlen, headDim] (layout bhsd)'
      : '[batch, seqlen, heads, headDim] (layout bshd)'}`, t.shape);
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
  for (const [name, t] of [['q', tq], ['k', tk], ['v', tv]] as const) check4d(fn, name, t, bhsd);
  const [B, Nq, H, D] = [tq.shape[ax.batch], tq.shape[ax.seqlen], tq.shape[ax.heads], tq.shape[ax.headDim]];
  const dimName = (name: string, key: keyof typeof ax) => `${name}.shape[${ax[key]}] (${key})`;
  if (D < 1 || D > MAX_HEAD_DIM) {
    throw rangeError(fn, dimName('q', 'headDim'), `must be between 1 and ${MAX_HEAD_DIM}`, D);
  }
  if (H < 1) throw rangeError(fn, dimName('q', 'heads'), 'must be at least 1', H);
  const Nk = tk.shape[ax.seqlen];
  const Hkv = tk.shape[ax.heads];
  if (tk.shape[ax.batch] !== B) throw rangeError(fn, dimName('k', 'batch'), `must equal q.shape[${ax.batch}] = ${B}`, tk.shape[ax.batch]);
  if (tk.shape[ax.headDim] !== D) throw rangeError(fn, dimName('k', 'headDim'), `must equal q.shape[${ax.headDim}] = ${D}`, tk.shape[ax.headDim]);
  if (Hkv < 1 || H % Hkv !== 0) {
    throw rangeError(fn, dimName('k', 'heads'), `must divide q.shape[${ax.heads}] = ${H} (query heads; MQA/GQA need H % Hkv == 0)`, Hkv);
  }
  for (const key of ['batch', 'seqlen', 'heads', 'headDim'] as const) {
    if (tv.shape[ax[key]] !== tk.shape[ax[key]]) {
      throw rangeError(fn, dimName('v', key), `must equal k.shape[${ax[key]}] = ${tk.shape[ax[key]]}`, tv.shape[ax[key]]);
    }
  }
  for (const [name, t] of [['k', tk], ['v', tv]] as const) {
    if (t.dtype !== tq.dtype) throw typeError(fn, `${name}.dtype`, `must equal q.dtype = '${tq.dtype}'`, t.dtype);
    if (t.device !== tq.device) throw typeError(fn, `${name}.device`, `must equal q.device = '${tq.device}'`, t.device);
  }
  for (const [name, t] of [['q', tq], ['k', tk]] as const) {
    if (t.size > MAX_ELEMENTS) throw rangeError(fn, `${name}.shape`, 'must hold at most 2^31-1 elements', t.shape);
  }
  if (B * H * Nq > MAX_ELEMENTS) throw rangeError(fn, 'q.shape', 'must have batch*heads*seqlen at most 2^31-1', tq.shape);
  const causal = checkBoolean(fn, 'options.causal', opts.causal, false);
  let scale = 1 / Math.sqrt(D);
  if (opts.scale !== undefined) {
    if (typeof opts.scale !== 'number') throw typeError(fn, 'options.scale', 'must be a finite number', opts.scale);
    if (!Number.isFinite(opts.scale)) throw rangeError(fn, 'options.scale', 'must be a finite number', opts.scale);
    scale = opts.scale;
  }
  let blockM = 0, blockN = 0, threads = 0;
  if (opts.cpu !== undefined) {
    const c = checkOptions(fn, opts.cpu, ['blockM', 'blockN', 'threads']);
    blockM = checkInt(fn, 'options.cpu.blockM', c.blockM, 1, 1024, 0);
    blockN = checkInt(fn, 'options.cpu.blockN', c.blockN, 1, 1024, 0);
    threads = checkInt(fn, 'options.cpu.threads', c.threads, 1, 1024, 0);
  }
  const device = deviceIndex(tq);
  if (device >= 0) {
    if (D % 8 !== 0) throw rangeError(fn, dimName('q', 'headDim'), 'must be a multiple of 8 on CUDA', D);
    if (!native.cudaSupports(DTYPE_CODE[tq.dtype], D)) {
      throw rangeError(fn, dimName('q', 'headDim'), `has no CUDA ${tq.dtype} kernel in this build (${describe(native.buildInfo().cudaHeadDims)})`, D);
    }
  }
  return { B, Nq, Nk, H, Hkv, D, dtype: tq.dtype, device, bhsd, causal, scale, blockM, blockN, threads };
}

function dims(p: Problem, deterministic = false): Dims {
  return [p.B, p.Nq, p.Nk, p.H, p.Hkv, p.D, DTYPE_CODE[p.dtype], p.causal ? 1 : 0, p.bhsd ? 1 : 0,
    p.blockM, p.blockN, p.threads, deterministic ? 1 : 0];
}

function hostArray(dtype: DType, n: number): HostArray {
  return dtype === 'float32' ? new Float32Array(n) : new Uint16Array(n);
}

function hostData(t: Tensor, fn: string, name: string): HostArray {
  const s = t.storage(fn, name);
  if (s.kind !== 'host') throw new TypeError(`${fn}: ${name} must be a host tensor`);
  return s.data;
}

function deviceBuf(t: Tensor, fn: string, name: string): NativeDeviceBuffer {
  const s = t.storage(fn, name);
  if (s.kind !== 'device') throw new TypeError(`${fn}: ${name} must be a CUDA tensor`);
  return s.buf;
}

/** A tensor of `shape` on p's device filled with `value` (used for empty problems). */
async function filled(p: Problem, shape: number[], dtype: DType, value: number): Promise<Tensor> {
  const n = shape.reduce((a, b) => a * b, 1);
  const data = hostArray(dtype, n);
  if (value !== 0) {
    if (dtype !== 'float32') throw new Error('internal: non-zero fill needs float32');
    data.fill(value);
  }
  const t = Tensor.wrapHost(data, shape, dtype);
  return p.device < 0 ? t : t.to(`cuda:${p.device}`);
}

/**
 * Attention forward: out = softmax(scale * q k^T [+ causal mask]) v, and the row log-sum-exp.
 * Runs on the inputs' device; the Promise resolves when the result is ready.
 */
export async function flashAttention(q: Tensor, k: Tensor, v: Tensor, options?: AttentionOptions): Promise<AttentionResult> {
  const fn = 'flashAttention';
  const opts = checkOptions(fn, options, FWD_OPTIONS);
  const p = checkProblem(fn, q, k, v, opts);
  const lseShape = [p.B, p.H, p.Nq];
  if (p.B === 0 || p.Nq === 0 || p.Nk === 0) {
    // Nothing to attend to: out = 0 and lse = +inf (rows that see no key).
    return { out: await filled(p, [...q.shape], p.dtype, 0), lse: await filled(p, lseShape, 'float32', Infinity) };
  }
  if (p.device < 0) {
    const out = hostArray(p.dtype, q.size);
    const lse = new Float32Array(p.B * p.H * p.Nq);
    await native.cpuForward(hostData(q, fn, 'q'), hostData(k, fn, 'k'), hostData(v, fn, 'v'), out, lse, dims(p), p.scale);
    return { out: Tensor.wrapHost(out, q.shape, p.dtype), lse: Tensor.wrapHost(lse, lseShape, 'float32') };
  }
  const [out, lse] = await native.cudaForward(deviceBuf(q, fn, 'q'), deviceBuf(k, fn, 'k'), deviceBuf(v, fn, 'v'), dims(p), p.scale);
  return { out: Tensor.wrapDevice(p.device, out, q.shape, p.dtype), lse: Tensor.wrapDevice(p.device, lse, lseShape, 'float32') };
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

  if (p.B === 0 || p.Nq === 0 || p.Nk === 0) {
    const r: BackwardResult = {
      dq: await filled(p, [...q.shape], p.dtype, 0),
      dk: await filled(p, [...k.shape], p.dtype, 0),
      dv: await filled(p, [...v.shape], p.dtype, 0),
    };
    if (wantD) r.softmaxD = await filled(p, lseShape, 'float32', 0);
    return r;
  }
  if (p.device < 0) {
    const dq = hostArray(p.dtype, q.size), dk = hostArray(p.dtype, k.size), dv = hostArray(p.dtype, v.size);
    const d = wantD ? new Float32Array(p.B * p.H * p.Nq) : null;
    await native.cpuBackward(hostData(dout, fn, 'dout'), hostData(q, fn, 'q'), hostData(k, fn, 'k'),
      hostData(v, fn, 'v'), hostData(out, fn, 'out'), hostData(lse, fn, 'lse') as Float32Array, dq, dk, dv, d,
      dims(p, deterministic), p.scale);
    const r: BackwardResult = {
      dq: Tensor.wrapHost(dq, q.shape, p.dtype), dk: Tensor.wrapHost(dk, k.shape, p.dtype),
      dv: Tensor.wrapHost(dv, v.shape, p.dtype),
    };
    if (d) r.softmaxD = Tensor.wrapHost(d, lseShape, 'float32');
    return r;
  }
  const bufs = await native.cudaBackward(deviceBuf(dout, fn, 'dout'), deviceBuf(q, fn, 'q'), deviceBuf(k, fn, 'k'),
    deviceBuf(v, fn, 'v'), deviceBuf(out, fn, 'out'), deviceBuf(lse, fn, 'lse'), dims(p, deterministic), p.scale, wantD);
  const r: BackwardResult = {
    dq: Tensor.wrapDevice(p.device, bufs[0], q.shape, p.dtype),
    dk: Tensor.wrapDevice(p.device, bufs[1], k.shape, p.dtype),
    dv: Tensor.wrapDevice(p.device, bufs[2], v.shape, p.dtype),
  };
  if (wantD) r.softmaxD = Tensor.wrapDevice(p.device, bufs[3], lseShape, 'float32');
  return r;
}

/**
 * Benchmark hook (used by bench/): runs the CUDA forward `warmup` times, then `reps` times with CUDA
 * events around each launch on the device's stream, and returns the per-launch milliseconds. Inputs
 * must be CUDA tensors; the outputs are discarded.
 */
export async function benchmarkForward(q: Tensor, k: Tensor, v: Tensor, options: AttentionOptions | undefined,
  warmup: number, reps: number): Promise<number[]> {
  const fn = 'benchmarkForward';
  const p = checkProblem(fn, q, k, v, checkOptions(fn, options, FWD_OPTIONS));
  if (p.device < 0) throw new TypeError(`${fn}: q must be a CUDA tensor, got device '${q.device}'`);
  const ms = await native.cudaBenchForward(deviceBuf(q, fn, 'q'), deviceBuf(k, fn, 'k'), deviceBuf(v, fn, 'v'),
    dims(p), p.scale, warmup, reps);
  return Array.from(ms);
}

/** Benchmark hook for the CUDA backward (all its kernels per launch), like benchmarkForward. */
export async function benchmarkBackward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor, lse: Tensor,
  options: BackwardOptions | undefined, warmup: number, reps: number): Promise<number[]> {
  const fn = 'benchmarkBackward';
  const opts = checkOptions(fn, options, BWD_OPTIONS);
  const p = checkProblem(fn, q, k, v, opts);
  if (p.device < 0) throw new TypeError(`${fn}: q must be a CUDA tensor, got device '${q.device}'`);
  const det = checkBoolean(fn, 'options.deterministic', opts.deterministic, false);
  const ms = await native.cudaBenchBackward(deviceBuf(dout, fn, 'dout'), deviceBuf(q, fn, 'q'), deviceBuf(k, fn, 'k'),
    deviceBuf(v, fn, 'v'), deviceBuf(out, fn, 'out'), deviceBuf(lse, fn, 'lse'), dims(p, det), p.scale, warmup, reps);
  return Array.from(ms);
}

/** FLOPs of one forward the flash-attn way: 4*B*H*Nq*Nk*D, halved when causal. */
export function attentionFlops(B: number, H: number, Nq: number, Nk: number, D: number, causal: boolean): number {
  return (4 * B * H * Nq * Nk * D) / (causal ? 2 : 1);
}
export { ELEMENT_BYTES };
