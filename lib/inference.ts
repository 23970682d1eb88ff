// Inference entry points: packed variable-length batches (flashAttentionVarlen and its backward),
// the paged KV cache (appendKV, pagedAttention) and mergeAttention. Argument checks here, work in
// the CPU backend or on the GPU (stream-ordered, like every CUDA call: see tensor.ts).
//
// Index arrays (cuSeqlens*, seqlens*, pageTable) are accepted as an Int32Array (or a host int32
// Tensor), checked here in full before anything runs (monotone prefix sums, lengths within the page
// table, page indices within the cache; a RangeError names the argument and the first bad entry),
// or as an int32 tensor on the inputs' GPU, used as it is with no host synchronisation: then their
// contents are the caller's responsibility (a bad value can give wrong results, never an
// out-of-bounds access: the kernels clamp every index), and maxSeqlenQ / maxSeqlenK must be given.
import {
  MAX_HEAD_DIM, checkCudaHeadDim, checkMask, checkOutput, checkTensorArg, deviceIndex, fillMask, hostArray, outSlot, runCall, runSlots,
  slotOf, type Mask, type MaskOptions,
} from './attention';
import { checkBoolean, checkFloatDtype, checkInt, checkOptions, describe, optionList, rangeError, typeError } from './errors';
import { F, OP, S, native, newParams, type Handle, type HostArray, type SlotValue } from './native';
import { copyTyped, typedArrayKind } from './typed';
import { DTYPE_CODE, MAX_ELEMENTS, Tensor, callNative, callNativeAsync, cpuPlan, inCpuOrder, ownCopy, OutLse, Grads, storageOf, wrapDevice, wrapHost, type DType } from './tensor';
import type { AttentionResult, BackwardResult } from './attention';

export type IndexArray = Int32Array | Tensor;

/** Rotary position embedding (RoPE) on the first 2 * cos.shape[1] features of each head. */
export interface Rotary {
  /** float32 [maxPosition, rotaryDim / 2] */
  cos: Tensor;
  sin: Tensor;
  /** false (default, GPT-NeoX / Llama): pairs (x[i], x[i + rotaryDim/2]); true (GPT-J): (x[2i], x[2i+1]). */
  interleaved?: boolean;
}

export interface VarlenOptions extends MaskOptions {
  /** int32 [B + 1] prefix sums of the query lengths (0, n0, n0 + n1, ...). */
  cuSeqlensQ: IndexArray;
  /** int32 [B + 1] prefix sums of the key lengths. */
  cuSeqlensK: IndexArray;
  /** Longest query / key sequence: required when the cuSeqlens are device tensors. */
  maxSeqlenQ?: number;
  maxSeqlenK?: number;
  /** Caller-owned outputs: out [totalQ, H, D] (q's dtype), lse float32 [H, totalQ]. */
  out?: Tensor;
  lse?: Tensor;
}

export interface VarlenBackwardOptions extends Omit<VarlenOptions, 'out' | 'lse'> {
  deterministic?: boolean;
  dq?: Tensor;
  dk?: Tensor;
  dv?: Tensor;
}

export interface PagedOptions extends MaskOptions {
  /** int32 [B, maxPagesPerSeq] (an Int32Array: the same table row-major). */
  pageTable: IndexArray;
  /** int32 [B]: tokens of sequence b in the cache (including any just appended). */
  seqlensK: IndexArray;
  /** int32 [B + 1] prefix sums of the query counts. */
  cuSeqlensQ: IndexArray;
  maxSeqlenQ?: number;
  maxSeqlenK?: number;
  /** Split-KV factor for long caches and small batches, 1..32 (0 or absent: chosen automatically). */
  numSplits?: number;
  /** q is rotated at positions seqlensK[b] - nq_b + i before the attention. */
  rotary?: Rotary;
  out?: Tensor;
  lse?: Tensor;
}

export interface AppendKVOptions {
  pageTable: IndexArray;
  /** int32 [B + 1] prefix sums of the new tokens per sequence. */
  cuSeqlensNew: IndexArray;
  /** int32 [B]: tokens each sequence already has; its new ones follow. */
  seqlensBefore: IndexArray;
  /** k is rotated at its positions seqlensBefore[b] + i before it is stored. */
  rotary?: Rotary;
  cpu?: { threads?: number };
}

const VARLEN_OPTIONS = optionList(['causal', 'scale', 'window', 'softcap', 'cpu', 'cuSeqlensQ', 'cuSeqlensK', 'maxSeqlenQ',
  'maxSeqlenK', 'out', 'lse'] as const);
const VARLEN_BWD_OPTIONS = optionList(['causal', 'scale', 'window', 'softcap', 'cpu', 'cuSeqlensQ', 'cuSeqlensK', 'maxSeqlenQ',
  'maxSeqlenK', 'deterministic', 'dq', 'dk', 'dv'] as const);
const PAGED_OPTIONS = optionList(['causal', 'scale', 'window', 'softcap', 'cpu', 'pageTable', 'seqlensK', 'cuSeqlensQ',
  'maxSeqlenQ', 'maxSeqlenK', 'numSplits', 'rotary', 'out', 'lse'] as const);
const APPEND_OPTIONS = optionList(['pageTable', 'cuSeqlensNew', 'seqlensBefore', 'rotary', 'cpu'] as const);
/** The slots a pagedAttention call passes: [0, PAGED_SLOT_COUNT). */
const PAGED_SLOT_COUNT = Math.max(S.q, S.k_cache, S.v_cache, S.out, S.lse, S.cu_seqlens_q, S.page_table, S.seqlens_k,
  S.rotary_cos, S.rotary_sin) + 1;
const MAX_SEQLEN = 2 ** 28;
/** Most partial results one mergeAttention call takes. */
const MAX_MERGE = 65536;

/** One index array, checked for kind, device and length; host contents returned for checks. */
interface Index {
  slot: Handle | Int32Array;
  host: Int32Array | null;
  length: number;
}

const ONE_DIM = { dims: [1], doc: 'one-dimensional' } as const;
const TABLE_DIMS = { dims: [1, 2], doc: '[B, maxPagesPerSeq] (or flat, [B * maxPagesPerSeq])' } as const;

/**
 * An index array: an Int32Array (the call's own copy) or an int32 Tensor of `dims` dimensions
 * (`shape` says which; pageTable takes [B, maxPages] or the flat [B * maxPages] of an Int32Array).
 */
function checkIndex(fn: string, name: string, v: unknown, device: number, length?: number,
  shape: { dims: readonly number[]; doc: string } = ONE_DIM): Index {
  let host: Int32Array | null = null;
  let len: number;
  let slot: Handle | Int32Array;
  if (typedArrayKind(v) === 'Int32Array') {
    // The call's own copy, taken before anything is checked (its length and elements are the
    // array's own: lib/typed.ts): the caller may change its array at any time after this, from
    // another thread (a SharedArrayBuffer) or from code of its own that runs during the checks (a
    // getter), and the checks and the kernel still see one set of values.
    host = copyTyped(Int32Array, v as Int32Array);
    if (device < 0) ownCopy(host);  // (no other CPU call reaches it: outside their order, lib/tensor.ts)
    len = host.length;
    slot = host;
  } else if (Tensor.isTensor(v)) {
    if (v.disposed) throw new TypeError(`${fn}: ${name} is disposed, got a disposed Tensor`);
    if (v.dtype !== 'int32') throw typeError(fn, `${name}.dtype`, `must be 'int32'`, v.dtype);
    if (!shape.dims.includes(v.shape.length)) throw rangeError(fn, `${name}.shape`, `must be ${shape.doc}`, `[${v.shape.join(', ')}]`, true);
    len = v.size;
    const s = storageOf(v, fn, name);
    if (s.kind === 'host') {
      host = s.data as Int32Array;
      slot = host;
    } else {
      if (deviceIndex(v) !== device) {
        throw typeError(fn, `${name}.device`, `must be '${device < 0 ? 'cpu' : `cuda:${device}`}' (the inputs' device) or an Int32Array`, v.device);
      }
      slot = s.handle;
    }
  } else {
    throw typeError(fn, name, 'must be an Int32Array or an int32 Tensor', v);
  }
  if (length !== undefined && len !== length) {
    throw rangeError(fn, `${name}.length`, `must be ${length}`, len);
  }
  return { slot, host, length: len };
}

/** Prefix sums: cu[0] = 0, non-decreasing, cu[B] = total. Returns the largest difference. */
function checkCuSeqlens(fn: string, name: string, idx: Index, total: number, totalName: string): number {
  const cu = idx.host!;
  if (cu[0] !== 0) throw rangeError(fn, `${name}[0]`, 'must be 0', cu[0]);
  let max = 0;
  for (let b = 1; b < cu.length; b++) {
    if (cu[b] < cu[b - 1]) {
      throw rangeError(fn, `${name}[${b}]`, `must be >= ${name}[${b - 1}] = ${cu[b - 1]} (prefix sums are non-decreasing)`, cu[b]);
    }
    max = Math.max(max, cu[b] - cu[b - 1]);
  }
  if (cu[cu.length - 1] !== total) {
    throw rangeError(fn, `${name}[${cu.length - 1}]`, `must equal ${totalName} = ${total}`, cu[cu.length - 1]);
  }
  return max;
}

/** The fewest rows of a non-empty sequence of checked prefix sums (0 when every one is empty). */
function minNonEmpty(cu: Int32Array): number {
  let min = 0;
  for (let b = 1; b < cu.length; b++) {
    const n = cu[b] - cu[b - 1];
    if (n > 0 && (min === 0 || n < min)) min = n;
  }
  return min;
}

/** maxSeqlen option: required for device index arrays; when given with host arrays, >= the actual. */
function checkMaxSeqlen(fn: string, name: string, v: unknown, actual: number | null): number {
  if (v === undefined) {
    if (actual === null) {
      throw typeError(fn, `options.${name}`, 'is required (a number) when the index arrays are device tensors', v);
    }
    return actual;
  }
  const n = checkInt(fn, `options.${name}`, v, 0, MAX_SEQLEN, 0);
  if (actual !== null && n < actual) {
    throw rangeError(fn, `options.${name}`, `must be at least the longest sequence (${actual})`, n);
  }
  return n;
}

/** cuSeqlensQ / cuSeqlensK and the maxSeqlen options of a varlen call. */
function checkVarlenIndex(fn: string, opts: Record<string, unknown>, device: number, totalQ: number, totalK: number) {
  const cq = checkIndex(fn, 'options.cuSeqlensQ', opts.cuSeqlensQ, device);
  const B = cq.length - 1;
  if (B < 0) throw rangeError(fn, 'options.cuSeqlensQ.length', 'must be at least 1 (B + 1 entries)', cq.length);
  const ck = checkIndex(fn, 'options.cuSeqlensK', opts.cuSeqlensK, device, B + 1);
  const maxQ = checkMaxSeqlen(fn, 'maxSeqlenQ', opts.maxSeqlenQ, cq.host ? checkCuSeqlens(fn, 'options.cuSeqlensQ', cq, totalQ, 'q.shape[0]') : null);
  const maxK = checkMaxSeqlen(fn, 'maxSeqlenK', opts.maxSeqlenK, ck.host ? checkCuSeqlens(fn, 'options.cuSeqlensK', ck, totalK, 'k.shape[0]') : null);
  return { cq, ck, B, maxQ, maxK };
}

function check3d(fn: string, name: string, t: Tensor, what: string): void {
  if (t.shape.length !== 3) throw rangeError(fn, `${name}.shape`, `must have 3 dimensions ${what}`, t.shape);
}

/** Packed q / k / v: [total, heads, D] each; returns the sizes. */
function checkPackedQKV(fn: string, q: unknown, k: unknown, v: unknown) {
  const tq = checkTensorArg(fn, 'q', q);
  const tk = checkTensorArg(fn, 'k', k);
  const tv = checkTensorArg(fn, 'v', v);
  check3d(fn, 'q', tq, '[totalQ, heads, headDim]');
  check3d(fn, 'k', tk, '[totalK, headsK, headDim]');
  check3d(fn, 'v', tv, '[totalK, headsK, headDim]');
  const [totalQ, H, D] = tq.shape;
  const [totalK, Hkv] = tk.shape;
  if (D < 1 || D > MAX_HEAD_DIM) throw rangeError(fn, 'q.shape[2] (headDim)', `must be between 1 and ${MAX_HEAD_DIM}`, D);
  if (H < 1) throw rangeError(fn, 'q.shape[1] (heads)', 'must be at least 1', H);
  if (tk.shape[2] !== D) throw rangeError(fn, 'k.shape[2] (headDim)', `must equal q.shape[2] = ${D}`, tk.shape[2]);
  if (Hkv < 1 || H % Hkv !== 0) {
    throw rangeError(fn, 'k.shape[1] (heads)', `must divide q.shape[1] = ${H} (query heads; MQA/GQA need H % Hkv == 0)`, Hkv);
  }
  for (let i = 0; i < 3; i++) {
    if (tv.shape[i] !== tk.shape[i]) throw rangeError(fn, `v.shape[${i}]`, `must equal k.shape[${i}] = ${tk.shape[i]}`, tv.shape[i]);
  }
  checkSameKind(fn, tq, 'k', tk, 'v', tv);
  const device = deviceIndex(tq);
  if (device >= 0) checkCudaHeadDim(fn, 'q.shape[2] (headDim)', tq.dtype, D);
  return { tq, tk, tv, totalQ, totalK, H, Hkv, D, dtype: tq.dtype, device };
}

/** q's dtype is a float type; `a` (and `b`) have q's dtype and device. */
function checkSameKind(fn: string, ref: Tensor, nameA: string, a: Tensor, nameB?: string, b?: Tensor): void {
  checkFloatDtype(fn, 'q.dtype', ref.dtype);
  sameKind(fn, ref, nameA, a);
  if (b !== undefined) sameKind(fn, ref, nameB!, b);
}
function sameKind(fn: string, ref: Tensor, name: string, t: Tensor): void {
  if (t.dtype !== ref.dtype) throw typeError(fn, `${name}.dtype`, `must equal q.dtype = '${ref.dtype}'`, t.dtype);
  if (t.device !== ref.device) throw typeError(fn, `${name}.device`, `must equal q.device = '${ref.device}'`, t.device);
}

function baseParams(device: number, B: number, H: number, Hkv: number, D: number, dtype: DType, mask: Mask | null): Float64Array {
  const P = newParams();
  P[F.device] = device;
  P[F.batch] = B;
  P[F.heads] = H;
  P[F.heads_k] = Hkv;
  P[F.head_dim] = D;
  P[F.dtype] = DTYPE_CODE[dtype];
  if (mask) fillMask(P, mask);
  return P;
}

/** The CPU backend's worker count of appendKV / mergeAttention (options.cpu.threads; 0: all cores). */
function cpuThreads(fn: string, cpu: unknown): number {
  if (cpu === undefined) return 0;
  return checkInt(fn, 'options.cpu.threads', checkOptions(fn, cpu, ['threads'], 'options.cpu').threads, 1, 1024, 0);
}

/** cos / sin of a rotary option: float32 [maxPosition, rotaryDim / 2], on `device`, rotaryDim <= D. */
function checkRotary(fn: string, r: unknown, D: number, device: number) {
  if (r === undefined) return null;
  const o = checkOptions(fn, r, ['cos', 'sin', 'interleaved'], 'options.rotary');
  const cos = checkTensorArg(fn, 'options.rotary.cos', o.cos);
  const sin = checkTensorArg(fn, 'options.rotary.sin', o.sin);
  for (const [name, t] of [['options.rotary.cos', cos], ['options.rotary.sin', sin]] as const) {
    if (t.dtype !== 'float32') throw typeError(fn, `${name}.dtype`, `must be 'float32'`, t.dtype);
    if (deviceIndex(t) !== device) {
      throw typeError(fn, `${name}.device`, `must be the inputs' device '${device < 0 ? 'cpu' : `cuda:${device}`}'`, t.device);
    }
    if (t.shape.length !== 2) throw rangeError(fn, `${name}.shape`, 'must be [maxPosition, rotaryDim / 2]', t.shape);
  }
  if (sin.shape[0] !== cos.shape[0] || sin.shape[1] !== cos.shape[1]) {
    throw rangeError(fn, 'options.rotary.sin.shape', `must equal options.rotary.cos.shape = ${describe(cos.shape)}`, sin.shape);
  }
  const rd = 2 * cos.shape[1];
  if (rd < 2 || rd > D) {
    throw rangeError(fn, 'options.rotary.cos.shape[1]', `must be between 1 and headDim / 2 = ${Math.floor(D / 2)} (rotaryDim = 2 * cos.shape[1])`, cos.shape[1]);
  }
  const interleaved = checkBoolean(fn, 'options.rotary.interleaved', o.interleaved, false);
  return { cos, sin, rd, maxPos: cos.shape[0], interleaved };
}

function fillRotary(P: Float64Array, r: NonNullable<ReturnType<typeof checkRotary>>): void {
  P[F.rotary_dim] = r.rd;
  P[F.rotary_interleaved] = r.interleaved ? 1 : 0;
  P[F.rotary_max_position] = r.maxPos;
}

/** The lse of a packed call: float32 [H, totalQ]. */
function packedResult(device: number, h: Handle[], q: Tensor, H: number, totalQ: number, dtype: DType,
  out: Tensor | undefined, lse: Tensor | undefined): AttentionResult {
  let i = 0;
  return new OutLse(
    out ?? wrapDevice(device, h[i++], q.shape, dtype),
    lse ?? wrapDevice(device, h[i++], Object.freeze([H, totalQ]), 'float32'),  // (frozen: the tensor takes it as it is)
  );
}

/**
 * Attention over packed sequences of different lengths: q [totalQ, H, D], k / v [totalK, Hkv, D];
 * sequence b is rows cuSeqlensQ[b]..cuSeqlensQ[b+1]-1 of q and the same of cuSeqlensK for k / v, and
 * attends only within itself (causal / window aligned bottom-right per sequence). out [totalQ, H, D],
 * lse float32 [H, totalQ]. Empty sequences are allowed.
 */
export async function flashAttentionVarlen(q: Tensor, k: Tensor, v: Tensor, options: VarlenOptions): Promise<AttentionResult> {
  const fn = 'flashAttentionVarlen';
  if (options === undefined) throw typeError(fn, 'options', 'must be an object with cuSeqlensQ and cuSeqlensK', options);
  const opts = checkOptions(fn, options, VARLEN_OPTIONS);
  const p = checkPackedQKV(fn, q, k, v);
  const mask = checkMask(fn, opts, p.D);
  const { cq, ck, B, maxQ, maxK } = checkVarlenIndex(fn, opts, p.device, p.totalQ, p.totalK);
  const lseShape = [p.H, p.totalQ];
  const inputs = [q, k, v];
  let out = checkOutput(fn, 'options.out', opts.out, q.shape, p.dtype, p.device, inputs);
  let lse = checkOutput(fn, 'options.lse', opts.lse, lseShape, 'float32', p.device, inputs);
  if (p.totalQ === 0 || B === 0) {
    return new OutLse(
      out ?? await Tensor.empty(q.shape, { dtype: p.dtype, device: q.device }),
      lse ?? await Tensor.empty(lseShape, { dtype: 'float32', device: q.device }),
    );
  }
  const P = baseParams(p.device, B, p.H, p.Hkv, p.D, p.dtype, mask);
  P[F.seqlen_q] = maxQ;
  P[F.seqlen_k] = maxK;
  P[F.total_q] = p.totalQ;
  P[F.total_k] = p.totalK;
  if (p.device < 0) {
    out ??= wrapHost(hostArray(p.dtype, q.size), q.shape, p.dtype);
    lse ??= wrapHost(new Float32Array(p.H * p.totalQ), lseShape, 'float32');
  }
  const h = await runCall(fn, OP.forward, P, p.device, {
    q: slotOf(q, fn, 'q'), k: slotOf(k, fn, 'k'), v: slotOf(v, fn, 'v'),
    out: outSlot(out, fn, 'options.out', p.device), lse: outSlot(lse, fn, 'options.lse', p.device),
    cu_seqlens_q: cq.slot, cu_seqlens_k: ck.slot,
  });
  return packedResult(p.device, h, q, p.H, p.totalQ, p.dtype, out, lse);
}

/** Gradients of flashAttentionVarlen (dk, dv summed over each GQA group), from its out and lse. */
export async function flashAttentionVarlenBackward(dout: Tensor, q: Tensor, k: Tensor, v: Tensor, out: Tensor,
  lse: Tensor, options: VarlenBackwardOptions): Promise<BackwardResult> {
  const fn = 'flashAttentionVarlenBackward';
  if (options === undefined) throw typeError(fn, 'options', 'must be an object with cuSeqlensQ and cuSeqlensK', options);
  const opts = checkOptions(fn, options, VARLEN_BWD_OPTIONS);
  const p = checkPackedQKV(fn, q, k, v);
  const mask = checkMask(fn, opts, p.D);
  const deterministic = checkBoolean(fn, 'options.deterministic', opts.deterministic, false);
  for (const [name, t] of [['dout', dout], ['out', out]] as const) {
    const tt = checkTensorArg(fn, name, t);
    if (tt.shape.length !== 3 || tt.shape.some((d, i) => d !== q.shape[i])) {
      throw rangeError(fn, `${name}.shape`, `must equal q.shape = ${describe(q.shape)}`, tt.shape);
    }
    checkSameKind(fn, q, name, tt);
  }
  const tl = checkTensorArg(fn, 'lse', lse);
  const lseShape = [p.H, p.totalQ];
  if (tl.shape.length !== 2 || tl.shape[0] !== p.H || tl.shape[1] !== p.totalQ) {
    throw rangeError(fn, 'lse.shape', `must be [heads, totalQ] = ${describe(lseShape)}`, tl.shape);
  }
  if (tl.dtype !== 'float32') throw typeError(fn, 'lse.dtype', `must be 'float32'`, tl.dtype);
  if (tl.device !== q.device) throw typeError(fn, 'lse.device', `must equal q.device = '${q.device}'`, tl.device);
  const { cq, ck, B, maxQ, maxK } = checkVarlenIndex(fn, opts, p.device, p.totalQ, p.totalK);
  const inputs = [dout, q, k, v, out, lse];
  let dq = checkOutput(fn, 'options.dq', opts.dq, q.shape, p.dtype, p.device, inputs);
  let dk = checkOutput(fn, 'options.dk', opts.dk, k.shape, p.dtype, p.device, inputs);
  let dv = checkOutput(fn, 'options.dv', opts.dv, v.shape, p.dtype, p.device, inputs);
  if ((dq && (dq === dk || dq === dv)) || (dk && dk === dv)) {
    throw typeError(fn, 'options.dq/dk/dv', 'must be three different tensors', 'the same Tensor twice', true);
  }
  if (p.device < 0) {
    dq ??= wrapHost(hostArray(p.dtype, q.size), q.shape, p.dtype);
    dk ??= wrapHost(hostArray(p.dtype, k.size), k.shape, p.dtype);
    dv ??= wrapHost(hostArray(p.dtype, v.size), v.shape, p.dtype);
  }
  if (B === 0 || (p.totalQ === 0 && p.totalK === 0)) {
    return new Grads(
      dq ?? await Tensor.zeros(q.shape, { dtype: p.dtype, device: q.device }),
      dk ?? await Tensor.zeros(k.shape, { dtype: p.dtype, device: q.device }),
      dv ?? await Tensor.zeros(v.shape, { dtype: p.dtype, device: q.device }),
    );
  }
  const P = baseParams(p.device, B, p.H, p.Hkv, p.D, p.dtype, mask);
  P[F.seqlen_q] = maxQ;
  P[F.seqlen_k] = maxK;
  P[F.total_q] = p.totalQ;
  P[F.total_k] = p.totalK;
  P[F.deterministic] = deterministic ? 1 : 0;
  const h = await runCall(fn, OP.backward, P, p.device, {
    dout: slotOf(dout, fn, 'dout'), q: slotOf(q, fn, 'q'), k: slotOf(k, fn, 'k'), v: slotOf(v, fn, 'v'),
    out: slotOf(out, fn, 'out'), lse: slotOf(lse, fn, 'lse'),
    dq: outSlot(dq, fn, 'options.dq', p.device), dk: outSlot(dk, fn, 'options.dk', p.device),
    dv: outSlot(dv, fn, 'options.dv', p.device),
    cu_seqlens_q: cq.slot, cu_seqlens_k: ck.slot,
  });
  let i = 0;
  return new Grads(
    dq ?? wrapDevice(p.device, h[i++], q.shape, p.dtype),
    dk ?? wrapDevice(p.device, h[i++], k.shape, p.dtype),
    dv ?? wrapDevice(p.device, h[i++], v.shape, p.dtype),
  );
}

/** kCache / vCache: [numPages, pageSize, Hkv, D], same dtype and device. */
function checkCaches(fn: string, kc: unknown, vc: unknown) {
  const tk = checkTensorArg(fn, 'kCache', kc);
  const tv = checkTensorArg(fn, 'vCache', vc);
  if (tk.shape.length !== 4) throw rangeError(fn, 'kCache.shape', 'must have 4 dimensions [numPages, pageSize, headsK, headDim]', tk.shape);
  if (tv.shape.length !== 4) throw rangeError(fn, 'vCache.shape', 'must have 4 dimensions [numPages, pageSize, headsK, headDim]', tv.shape);
  for (let i = 0; i < 4; i++) {
    if (tv.shape[i] !== tk.shape[i]) throw rangeError(fn, `vCache.shape[${i}]`, `must equal kCache.shape[${i}] = ${tk.shape[i]}`, tv.shape[i]);
  }
  const [numPages, pageSize, Hkv, D] = tk.shape;
  if (pageSize < 1) throw rangeError(fn, 'kCache.shape[1] (pageSize)', 'must be at least 1', pageSize);
  if (Hkv < 1) throw rangeError(fn, 'kCache.shape[2] (headsK)', 'must be at least 1', Hkv);
  if (D < 1 || D > MAX_HEAD_DIM) throw rangeError(fn, 'kCache.shape[3] (headDim)', `must be between 1 and ${MAX_HEAD_DIM}`, D);
  checkFloatDtype(fn, 'kCache.dtype', tk.dtype);
  if (tv.dtype !== tk.dtype) throw typeError(fn, 'vCache.dtype', `must equal kCache.dtype = '${tk.dtype}'`, tv.dtype);
  if (tv.device !== tk.device) throw typeError(fn, 'vCache.device', `must equal kCache.device = '${tk.device}'`, tv.device);
  return { tk, tv, numPages, pageSize, Hkv, D };
}

/** Page table [B, maxPages] (an Int32Array of B * maxPages entries, row-major). */
function checkPageTable(fn: string, v: unknown, device: number, B: number) {
  const idx = checkIndex(fn, 'options.pageTable', v, device, undefined, TABLE_DIMS);
  let maxPages: number;
  if (v instanceof Tensor && v.shape.length === 2) {
    if (v.shape[0] !== B) throw rangeError(fn, 'options.pageTable.shape[0]', `must equal the batch size ${B}`, v.shape[0]);
    maxPages = v.shape[1];
  } else {
    if (B === 0 ? idx.length !== 0 : idx.length % B !== 0) {
      throw rangeError(fn, 'options.pageTable.length', `must be a multiple of the batch size ${B} (B * maxPagesPerSeq)`, idx.length);
    }
    maxPages = B === 0 ? 0 : idx.length / B;
  }
  return { idx, maxPages };
}

/** Pages of tokens [0, upto) of sequence b are within [0, numPages). */
function checkPages(fn: string, table: Int32Array, b: number, maxPages: number, pageSize: number, upto: number,
  numPages: number): void {
  const last = Math.ceil(upto / pageSize);
  for (let j = 0; j < last; j++) {
    const pg = table[b * maxPages + j];
    if (!(pg >= 0 && pg < numPages)) {
      throw rangeError(fn, `options.pageTable[${b}][${j}]`, `must be a page index in [0, ${numPages}) (sequence ${b} uses ${last} pages)`, pg);
    }
  }
}

// checkWrittenRows' hash table of pages, kept from call to call up to kKeptSlots slots (a slot is
// in use when its mark is the call's stamp, so nothing is cleared between calls and nothing
// allocated once it is large enough; a larger call allocates its own), and its row ranges: RANGE
// numbers a range (b, j, first row, end row, page, the index of the same page's previous range or -1).
let slotMark = new Int32Array(0), slotPage = new Int32Array(0), slotNewest = new Int32Array(0), rowRanges = new Int32Array(0);
let rowsStamp = 0;
const kKeptSlots = 1 << 16;
const RANGE = 6;

/**
 * No cache row is written twice in one appendKV call. Two sequences whose tables share a page
 * where both write, or one sequence whose table repeats a page under its new tokens, would leave in
 * the row whichever write came last (on the GPU, an order that changes from run to run). The new
 * tokens of sequence b occupy positions [seqlensBefore[b], seqlensBefore[b] + n_b), so they write
 * one range of rows in each page they land in: at most 2 B + totalNew / pageSize ranges, listed
 * first, then found by page in a hash table at most half full (Fibonacci hashing: the product's
 * high bits, so that pages a fixed stride apart spread; linear probing). A decode step of 64
 * sequences costs < 1 us. A range is compared with the earlier ranges of its page, which are few
 * unless many sequences write rows of one page; where those comparisons pass 16 per range and 4096
 * in all, the ranges are sorted by page and first row instead (8192 sequences writing one large
 * page: 79 ms by comparisons, a few by the sort). Both report a row written twice; the sort may
 * name another such pair than the first in table order.
 */
function checkWrittenRows(fn: string, table: Int32Array, maxPages: number, pageSize: number, before: Int32Array,
  cu: Int32Array): void {
  const B = cu.length - 1;
  const most = 2 * B + Math.ceil((cu[B] - cu[0]) / pageSize);
  if (most === 0) return;
  const bits = Math.min(30, Math.max(4, 32 - Math.clz32(2 * most - 1)));  // 2^bits >= 2 most
  const size = 1 << bits;
  let mark = slotMark, pageOf = slotPage, newest = slotNewest, ranges = rowRanges, stamp = 1;
  if (size > kKeptSlots) {  // a large prefill: a table of its own, not kept
    mark = new Int32Array(size);
    pageOf = new Int32Array(size);
    newest = new Int32Array(size);
    ranges = new Int32Array(RANGE * most);
  } else {
    if (slotMark.length < size) {
      mark = slotMark = new Int32Array(size);
      pageOf = slotPage = new Int32Array(size);
      newest = slotNewest = new Int32Array(size);
      rowsStamp = 0;
    }
    if (rowRanges.length < RANGE * most) ranges = rowRanges = new Int32Array(RANGE * most);
    if (++rowsStamp === 2 ** 31 - 1) {
      slotMark.fill(0);
      rowsStamp = 1;
    }
    stamp = rowsStamp;
  }
  let end = 0;  // RANGE x the ranges listed
  for (let b = 0; b < B; b++) {
    const first = before[b], last = first + cu[b + 1] - cu[b];
    if (last === first) continue;
    for (let j = Math.floor(first / pageSize); j * pageSize < last; j++, end += RANGE) {
      ranges[end] = b;
      ranges[end + 1] = j;
      ranges[end + 2] = Math.max(first - j * pageSize, 0);
      ranges[end + 3] = Math.min(last - j * pageSize, pageSize);
      ranges[end + 4] = table[b * maxPages + j];
    }
  }
  let compared = 0;
  for (let n = 0; n < end; n += RANGE) {
    const lo = ranges[n + 2], hi = ranges[n + 3], pg = ranges[n + 4];
    let slot = Math.imul(pg, 0x9e3779b1) >>> (32 - bits);
    while (mark[slot] === stamp && pageOf[slot] !== pg) slot = (slot + 1) & (size - 1);
    let prev = -1;
    if (mark[slot] === stamp) {
      for (let r = newest[slot]; r >= 0; r = ranges[r + 5]) {
        if (lo < ranges[r + 3] && ranges[r + 2] < hi) rowWrittenTwice(fn, ranges, n, r, Math.max(lo, ranges[r + 2]));
        if (++compared > 4096 && compared > 16 * (n / RANGE + 1)) {
          checkRangesSorted(fn, ranges, end);
          return;
        }
      }
      prev = newest[slot];
    }
    mark[slot] = stamp;
    pageOf[slot] = pg;
    newest[slot] = n;
    ranges[n + 5] = prev;
  }
}

/** appendKV's new keys or values: [totalNew, headsK, headDim] of the cache's heads, dtype and device. */
function checkNewRows(fn: string, name: string, t: Tensor, cache: Tensor, Hkv: number, D: number): void {
  check3d(fn, name, t, '[totalNew, headsK, headDim]');
  if (t.shape[1] !== Hkv) throw rangeError(fn, `${name}.shape[1] (headsK)`, `must equal kCache.shape[2] = ${Hkv}`, t.shape[1]);
  if (t.shape[2] !== D) throw rangeError(fn, `${name}.shape[2] (headDim)`, `must equal kCache.shape[3] = ${D}`, t.shape[2]);
  if (t.dtype !== cache.dtype) throw typeError(fn, `${name}.dtype`, `must equal kCache.dtype = '${cache.dtype}'`, t.dtype);
  if (t.device !== cache.device) throw typeError(fn, `${name}.device`, `must equal kCache.device = '${cache.device}'`, t.device);
}

/** The RangeError of a cache row that two new tokens write: ranges at `late` and `early` (earlier in table order). */
function rowWrittenTwice(fn: string, ranges: Int32Array, late: number, early: number, row: number): never {
  const b = ranges[late], j = ranges[late + 1], b2 = ranges[early], j2 = ranges[early + 1];
  const whose = b2 === b ? `this sequence's pageTable[${b}][${j2}]` : `sequence ${b2}'s pageTable[${b2}][${j2}]`;
  throw rangeError(fn, `options.pageTable[${b}][${j}]`,
    `must not name a page whose rows another new token writes too (row ${row} of page ${ranges[late + 4]} is also written through ${whose})`,
    ranges[late + 4]);
}

/**
 * checkWrittenRows by sorting its listed ranges (ranges[0, end)) by page and first row: within a
 * page, a range that starts before the furthest end so far overlaps the range that reached it.
 * O(ranges log ranges) however many ranges share a page.
 */
function checkRangesSorted(fn: string, ranges: Int32Array, end: number): void {
  const order = Array.from({ length: end / RANGE }, (_, i) => i * RANGE)
    .sort((x, y) => ranges[x + 4] - ranges[y + 4] || ranges[x + 2] - ranges[y + 2] || x - y);
  for (let k = 1, reach = order[0]; k < order.length; k++) {
    const i = order[k];
    if (ranges[i + 4] !== ranges[reach + 4]) {
      reach = i;
      continue;
    }
    // name the range later in table order, as the comparisons do
    if (ranges[i + 2] < ranges[reach + 3]) rowWrittenTwice(fn, ranges, Math.max(i, reach), Math.min(i, reach), ranges[i + 2]);
    if (ranges[i + 3] > ranges[reach + 3]) reach = i;
  }
}

/**
 * Writes new keys / values of each sequence into a paged cache after its seqlensBefore[b] tokens:
 * k, v [totalNew, Hkv, D] packed by cuSeqlensNew. With rotary, k is rotated at its positions first.
 * Stream-ordered on a GPU (settles once queued); the caches are written in place.
 */
export async function appendKV(kCache: Tensor, vCache: Tensor, k: Tensor, v: Tensor, options: AppendKVOptions): Promise<void> {
  const fn = 'appendKV';
  if (options === undefined) throw typeError(fn, 'options', 'must be an object with pageTable, cuSeqlensNew and seqlensBefore', options);
  const opts = checkOptions(fn, options, APPEND_OPTIONS);
  const c = checkCaches(fn, kCache, vCache);
  // Both caches are written: one tensor for both would hold v over k.
  if (c.tv === c.tk) throw typeError(fn, 'vCache', 'must be a different tensor from kCache (appendKV writes both)', 'the same Tensor', true);
  const tk = checkTensorArg(fn, 'k', k);
  const tv = checkTensorArg(fn, 'v', v);
  checkNewRows(fn, 'k', tk, c.tk, c.Hkv, c.D);
  checkNewRows(fn, 'v', tv, c.tk, c.Hkv, c.D);
  if (tv.shape[0] !== tk.shape[0]) throw rangeError(fn, 'v.shape[0]', `must equal k.shape[0] = ${tk.shape[0]}`, tv.shape[0]);
  const totalNew = tk.shape[0];
  const device = deviceIndex(c.tk);
  if (device >= 0) checkCudaHeadDim(fn, 'kCache.shape[3] (headDim)', c.tk.dtype, c.D);
  const cn = checkIndex(fn, 'options.cuSeqlensNew', opts.cuSeqlensNew, device);
  const B = cn.length - 1;
  if (B < 0) throw rangeError(fn, 'options.cuSeqlensNew.length', 'must be at least 1 (B + 1 entries)', cn.length);
  const sb = checkIndex(fn, 'options.seqlensBefore', opts.seqlensBefore, device, B);
  const pt = checkPageTable(fn, opts.pageTable, device, B);
  const rot = checkRotary(fn, opts.rotary, c.D, device);
  const threads = cpuThreads(fn, opts.cpu);
  if (cn.host) checkCuSeqlens(fn, 'options.cuSeqlensNew', cn, totalNew, 'k.shape[0]');
  if (cn.host && sb.host && pt.idx.host) {
    for (let b = 0; b < B; b++) {
      const before = sb.host[b];
      const end = before + cn.host[b + 1] - cn.host[b];
      if (!(before >= 0)) throw rangeError(fn, `options.seqlensBefore[${b}]`, 'must be >= 0', before);
      if (end > pt.maxPages * c.pageSize) {
        throw rangeError(fn, `options.seqlensBefore[${b}]`, `plus the new tokens (${end - before}) must fit the page table (${pt.maxPages} pages of ${c.pageSize})`, `${before} (ending at ${end})`, true);
      }
      if (rot && end > rot.maxPos) {
        throw rangeError(fn, `options.seqlensBefore[${b}]`, `plus the new tokens (${end - before}) must be at most options.rotary.cos.shape[0] = ${rot.maxPos} (positions)`, `${before} (ending at ${end})`, true);
      }
      // Only the pages the new tokens land in must exist.
      const first = Math.floor(before / c.pageSize), last = Math.ceil(end / c.pageSize);
      for (let j = first; j < last; j++) {
        const pg = pt.idx.host[b * pt.maxPages + j];
        if (!(pg >= 0 && pg < c.numPages)) {
          throw rangeError(fn, `options.pageTable[${b}][${j}]`, `must be a page index in [0, ${c.numPages})`, pg);
        }
      }
    }
    checkWrittenRows(fn, pt.idx.host, pt.maxPages, c.pageSize, sb.host, cn.host);
  }
  if (totalNew === 0 || B === 0) return;
  const P = baseParams(device, B, 0, c.Hkv, c.D, c.tk.dtype, null);
  P[F.total_k] = totalNew;
  P[F.page_size] = c.pageSize;
  P[F.max_pages] = pt.maxPages;
  P[F.num_pages] = c.numPages;
  P[F.threads] = threads;
  if (rot) fillRotary(P, rot);
  await runCall(fn, OP.append_kv, P, device, {
    k_cache: slotOf(c.tk, fn, 'kCache'), v_cache: slotOf(c.tv, fn, 'vCache'), k: slotOf(tk, fn, 'k'), v: slotOf(tv, fn, 'v'),
    page_table: pt.idx.slot, cu_seqlens_new: cn.slot, seqlens_before: sb.slot,
    rotary_cos: rot ? slotOf(rot.cos, fn, 'options.rotary.cos') : null,
    rotary_sin: rot ? slotOf(rot.sin, fn, 'options.rotary.sin') : null,
  });
}

/**
 * Attention of packed queries against each sequence's paged cache: prefill chunks, decode (one query
 * per sequence) and both mixed in one call. q [totalQ, H, D] packed by cuSeqlensQ; sequence b has
 * seqlensK[b] cached tokens, its queries aligned with the last ones (causal / window bottom-right).
 * out [totalQ, H, D], lse float32 [H, totalQ].
 */
export async function pagedAttention(q: Tensor, kCache: Tensor, vCache: Tensor, options: PagedOptions): Promise<AttentionResult> {
  const fn = 'pagedAttention';
  const c = pagedCall(fn, q, kCache, vCache, options);
  const { tq, H, totalQ, device, P } = c;
  let { out, lse } = c;
  if (P === null) {
    return new OutLse(
      out ?? await Tensor.empty(q.shape, { dtype: tq.dtype, device: q.device }),
      lse ?? await Tensor.empty([H, totalQ], { dtype: 'float32', device: q.device }),
    );
  }
  if (device < 0) {
    out ??= wrapHost(hostArray(tq.dtype, tq.size), q.shape, tq.dtype);
    lse ??= wrapHost(new Float32Array(H * totalQ), [H, totalQ], 'float32');
  }
  const slots = c.slots;
  slots[S.out] = outSlot(out, fn, 'options.out', device);
  slots[S.lse] = outSlot(lse, fn, 'options.lse', device);
  const r = runSlots(fn, OP.paged, P, device, slots);
  const h = r instanceof Promise ? await r : r;
  return packedResult(device, h, tq, H, totalQ, tq.dtype, out, lse);
}

/**
 * Benchmark hook (used by bench/): the CUDA pagedAttention call run `warmup` times, then `reps`
 * times with CUDA events around each (all of its kernels); per-call milliseconds (GPU time).
 */
export async function benchmarkPaged(q: Tensor, kCache: Tensor, vCache: Tensor, options: PagedOptions,
  warmup: number, reps: number): Promise<number[]> {
  const fn = 'benchmarkPaged';
  const c = pagedCall(fn, q, kCache, vCache, options);
  if (c.device < 0) throw new TypeError(`${fn}: q must be a CUDA tensor, got device '${q.device}'`);
  if (c.P === null) return [];
  return Array.from(await native.bench(OP.paged, c.P, c.slots, warmup, reps));
}

/** pagedAttention's checks and parameter record (P null: nothing to compute). */
function pagedCall(fn: string, q: Tensor, kCache: Tensor, vCache: Tensor, options: PagedOptions) {
  if (options === undefined) throw typeError(fn, 'options', 'must be an object with pageTable, seqlensK and cuSeqlensQ', options);
  const opts = checkOptions(fn, options, PAGED_OPTIONS);
  const tq = checkTensorArg(fn, 'q', q);
  check3d(fn, 'q', tq, '[totalQ, heads, headDim]');
  const c = checkCaches(fn, kCache, vCache);
  const [totalQ, H, D] = tq.shape;
  if (H < 1) throw rangeError(fn, 'q.shape[1] (heads)', 'must be at least 1', H);
  if (D !== c.D) throw rangeError(fn, 'q.shape[2] (headDim)', `must equal kCache.shape[3] = ${c.D}`, D);
  if (H % c.Hkv !== 0) throw rangeError(fn, 'kCache.shape[2] (headsK)', `must divide q.shape[1] = ${H} (query heads)`, c.Hkv);
  checkSameKind(fn, tq, 'kCache', c.tk, 'vCache', c.tv);
  const device = deviceIndex(tq);
  if (device >= 0) checkCudaHeadDim(fn, 'q.shape[2] (headDim)', tq.dtype, D);
  const mask = checkMask(fn, opts, D);
  const cq = checkIndex(fn, 'options.cuSeqlensQ', opts.cuSeqlensQ, device);
  const B = cq.length - 1;
  if (B < 0) throw rangeError(fn, 'options.cuSeqlensQ.length', 'must be at least 1 (B + 1 entries)', cq.length);
  const sk = checkIndex(fn, 'options.seqlensK', opts.seqlensK, device, B);
  const pt = checkPageTable(fn, opts.pageTable, device, B);
  const rot = checkRotary(fn, opts.rotary, D, device);
  const numSplits = checkInt(fn, 'options.numSplits', opts.numSplits, 0, 32, 0);
  const maxQ = checkMaxSeqlen(fn, 'maxSeqlenQ', opts.maxSeqlenQ, cq.host ? checkCuSeqlens(fn, 'options.cuSeqlensQ', cq, totalQ, 'q.shape[0]') : null);
  let hostMaxK: number | null = null;
  if (sk.host) {
    hostMaxK = 0;
    for (let b = 0; b < B; b++) {
      const n = sk.host[b];
      if (!(n >= 0)) throw rangeError(fn, `options.seqlensK[${b}]`, 'must be >= 0', n);
      if (n > pt.maxPages * c.pageSize) {
        throw rangeError(fn, `options.seqlensK[${b}]`, `must fit the page table (${pt.maxPages} pages of ${c.pageSize} tokens)`, n);
      }
      if (rot) {
        if (cq.host && n < cq.host[b + 1] - cq.host[b]) {
          throw rangeError(fn, `options.seqlensK[${b}]`, `must be at least the sequence's query count ${cq.host[b + 1] - cq.host[b]} with rotary (positions seqlensK - nq + i)`, n);
        }
        if (n > rot.maxPos) throw rangeError(fn, `options.seqlensK[${b}]`, `must be at most options.rotary.cos.shape[0] = ${rot.maxPos} (positions)`, n);
      }
      if (pt.idx.host) checkPages(fn, pt.idx.host, b, pt.maxPages, c.pageSize, n, c.numPages);
      hostMaxK = Math.max(hostMaxK, n);
    }
  }
  const maxK = checkMaxSeqlen(fn, 'maxSeqlenK', opts.maxSeqlenK, hostMaxK);
  let out: Tensor | undefined, lse: Tensor | undefined;
  if (opts.out !== undefined || opts.lse !== undefined) {  // (no arrays to build for the usual call)
    const inputs = rot ? [q, kCache, vCache, rot.cos, rot.sin] : [q, kCache, vCache];
    out = checkOutput(fn, 'options.out', opts.out, q.shape, tq.dtype, device, inputs);
    lse = checkOutput(fn, 'options.lse', opts.lse, [H, totalQ], 'float32', device, inputs);
  }
  if (totalQ === 0 || B === 0) return { tq, H, totalQ, device, out, lse, P: null, slots: [] as SlotValue[] };
  const P = baseParams(device, B, H, c.Hkv, D, tq.dtype, mask);
  P[F.seqlen_q] = maxQ;
  P[F.seqlen_k] = maxK;
  P[F.total_q] = totalQ;
  P[F.page_size] = c.pageSize;
  P[F.max_pages] = pt.maxPages;
  P[F.num_pages] = c.numPages;
  P[F.num_splits] = numSplits;
  // With host prefix sums the fewest queries of a non-empty sequence: where every sequence is a
  // prefill chunk too long for the decode kernel, the CUDA backend then launches only the prefill
  // kernel (0: unknown, device arrays).
  P[F.min_seqlen_q] = cq.host ? minNonEmpty(cq.host) : 0;
  if (rot) fillRotary(P, rot);
  // The slot array itself (indexed by S; out / lse filled in by pagedAttention), not a record of
  // names for slotArray to turn into one.
  const slots: SlotValue[] = new Array<SlotValue>(PAGED_SLOT_COUNT).fill(null);  // (dense: see slotArray)
  slots[S.q] = slotOf(tq, fn, 'q');
  slots[S.k_cache] = slotOf(c.tk, fn, 'kCache');
  slots[S.v_cache] = slotOf(c.tv, fn, 'vCache');
  slots[S.cu_seqlens_q] = cq.slot;
  slots[S.page_table] = pt.idx.slot;
  slots[S.seqlens_k] = sk.slot;
  if (rot) {
    slots[S.rotary_cos] = slotOf(rot.cos, fn, 'options.rotary.cos');
    slots[S.rotary_sin] = slotOf(rot.sin, fn, 'options.rotary.sin');
  }
  P[F.slot_count] = PAGED_SLOT_COUNT;
  return { tq, H, totalQ, device, out, lse, P, slots };
}

/**
 * Combines attention computed over disjoint key sets (shared-prefix cascades, split caches, several
 * GPUs) by their lse: out = sum_i exp(lse_i - lse) * out_i, lse = log(sum_i exp(lse_i)).
 * outs: [totalQ, H, D] (lses [H, totalQ]) or [B, Nq, H, D] (lses [B, H, Nq]), all one dtype and
 * device. A partial whose lse is +inf (the library's "saw no key") contributes nothing.
 */
export async function mergeAttention(outs: Tensor[], lses: Tensor[], options?: { out?: Tensor; lse?: Tensor; cpu?: { threads?: number } }): Promise<AttentionResult> {
  const fn = 'mergeAttention';
  if (!Array.isArray(outs)) throw typeError(fn, 'outs', 'must be an array of Tensors', outs);
  if (!Array.isArray(lses)) throw typeError(fn, 'lses', 'must be an array of Tensors', lses);
  const count = outs.length;
  if (count < 1 || count > MAX_MERGE) throw rangeError(fn, 'outs.length', `must be between 1 and ${MAX_MERGE}`, count);
  if (lses.length !== count) throw rangeError(fn, 'lses.length', `must equal outs.length = ${count}`, lses.length);
  // Each element read once, into arrays of our own that the checks and the call use (holes are
  // checked like any other element; an array with getters cannot pass one tensor and give another).
  const outsA: unknown[] = new Array(count), lsesA: unknown[] = new Array(count);
  for (let i = 0; i < count; i++) { outsA[i] = outs[i]; lsesA[i] = lses[i]; }
  const opts = checkOptions(fn, options, ['out', 'lse', 'cpu']);
  const o0 = checkTensorArg(fn, 'outs[0]', outsA[0]);
  if (o0.shape.length !== 3 && o0.shape.length !== 4) {
    throw rangeError(fn, 'outs[0].shape', 'must be [totalQ, heads, headDim] or [batch, seqlenQ, heads, headDim]', o0.shape);
  }
  checkFloatDtype(fn, 'outs[0].dtype', o0.dtype);
  const packed = o0.shape.length === 3;
  const [B, N, H, D] = packed ? [1, o0.shape[0], o0.shape[1], o0.shape[2]] : o0.shape;
  const lseShape = packed ? [H, N] : [B, H, N];
  outsA.forEach((o, i) => {
    const t = checkTensorArg(fn, `outs[${i}]`, o);
    if (t.shape.length !== o0.shape.length || t.shape.some((d, j) => d !== o0.shape[j])) {
      throw rangeError(fn, `outs[${i}].shape`, `must equal outs[0].shape = ${describe(o0.shape)}`, t.shape);
    }
    if (t.dtype !== o0.dtype) throw typeError(fn, `outs[${i}].dtype`, `must equal outs[0].dtype = '${o0.dtype}'`, t.dtype);
    if (t.device !== o0.device) throw typeError(fn, `outs[${i}].device`, `must equal outs[0].device = '${o0.device}'`, t.device);
    const l = checkTensorArg(fn, `lses[${i}]`, lsesA[i]);
    if (l.shape.length !== lseShape.length || l.shape.some((d, j) => d !== lseShape[j])) {
      throw rangeError(fn, `lses[${i}].shape`, `must be ${describe(lseShape)}`, l.shape);
    }
    if (l.dtype !== 'float32') throw typeError(fn, `lses[${i}].dtype`, `must be 'float32'`, l.dtype);
    if (l.device !== o0.device) throw typeError(fn, `lses[${i}].device`, `must equal outs[0].device = '${o0.device}'`, l.device);
  });
  const device = deviceIndex(o0);
  if (!(D >= 1)) throw rangeError(fn, `outs[0].shape[${o0.shape.length - 1}] (headDim)`, 'must be >= 1', D);
  if (device >= 0 && D % 4 !== 0) throw rangeError(fn, `outs[0].shape[${o0.shape.length - 1}] (headDim)`, 'must be a multiple of 4 on CUDA', D);
  if (B * N * H > MAX_ELEMENTS) throw rangeError(fn, 'outs[0].shape', 'must have at most 2^31-1 rows', o0.shape);
  const inputs = [...outsA, ...lsesA] as Tensor[];
  let out = checkOutput(fn, 'options.out', opts.out, o0.shape, o0.dtype, device, inputs);
  let lse = checkOutput(fn, 'options.lse', opts.lse, lseShape, 'float32', device, inputs);
  const threads = cpuThreads(fn, opts.cpu);
  if (B * N * H === 0) {
    return new OutLse(
      out ?? await Tensor.empty(o0.shape, { dtype: o0.dtype, device: o0.device }),
      lse ?? await Tensor.empty(lseShape, { dtype: 'float32', device: o0.device }),
    );
  }
  const P = baseParams(device, B, H, H, D, o0.dtype, null);
  P[F.seqlen_q] = N;
  P[F.merge_count] = count;
  P[F.threads] = threads;
  const os = outsA.map((o, i) => slotOf(o as Tensor, fn, `outs[${i}]`)!);
  const ls = lsesA.map((l, i) => slotOf(l as Tensor, fn, `lses[${i}]`)!);
  if (device < 0) {
    out ??= wrapHost(hostArray(o0.dtype, o0.size), o0.shape, o0.dtype);
    lse ??= wrapHost(new Float32Array(B * N * H), lseShape, 'float32');
    const oSlot = slotOf(out, fn, 'options.out'), lSlot = slotOf(lse, fn, 'options.lse') as Float32Array;
    const plan = cpuPlan([...os, ...ls], [oSlot, lSlot]);
    const Pc = plan.deps.length > 0 ? P.slice() : P;  // (behind earlier CPU calls: the shared params record copied now)
    await inCpuOrder(plan, () => callNativeAsync(fn, () => native.merge(Pc, os, ls as Float32Array[], oSlot, lSlot) as Promise<void>));
    return new OutLse(out, lse);
  }
  const h = callNative(fn, () => native.merge(P, os, ls as Array<Handle | Float32Array>, outSlot(out, fn, 'options.out', device),
    outSlot(lse, fn, 'options.lse', device) as Handle | null) as Handle[]);
  let i = 0;
  return new OutLse(
    out ?? wrapDevice(device, h[i++], o0.shape, o0.dtype),
    lse ?? wrapDevice(device, h[i++], lseShape, 'float32'),
  );
}

export type { HostArray };
