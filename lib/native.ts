// Typed view of the native binding (csrc/binding/*.cpp). Internal: the public API is index.ts.
//
// Calls pass named fields: a Float64Array whose element F.<name> holds field <name>, and a slot
// array whose element S.<name> holds tensor <name>. The index of each name comes from the addon
// itself (native.layout(), generated from csrc/binding/fields.h), and loading fails loudly when a
// name used here is missing there, so the two sides cannot drift apart silently.
import { loadAddon } from './loader';

/** Opaque handle of one device allocation (a napi External); freed by free() or by the GC. */
export interface Handle { readonly __faHandle: never }

export type HostArray = Float32Array | Uint16Array | Int32Array;
export type SlotValue = Handle | HostArray | boolean | null | undefined;

export interface NativeStats {
  allocated: number; reserved: number; peakAllocated: number; free: number; total: number;
  /** calls whose host index arrays went through an index slot (FA_INDEX_STREAM) / the staged copy (tests) */
  indexSlotUploads: number; indexStagedUploads: number;
}

interface RawBinding {
  layout(): { fields: string[]; slots: string[]; ops: string[]; features?: string[] };
  /**
   * CPU (params.device < 0): undefined when the call ran on the calling thread and is done (it throws
   * its error), else a Promise settled when done. CUDA: the new output handles, queued. The slots come
   * as arguments (feature slot_args; callSlots below).
   */
  call(op: number, params: Float64Array, ...slots: SlotValue[]): Promise<void> | Handle[] | undefined;
  merge(params: Float64Array, outs: Array<Handle | HostArray>, lses: Array<Handle | Float32Array>,
    out: Handle | HostArray | null, lse: Handle | Float32Array | null): Promise<void> | Handle[] | undefined;
  bench(op: number, params: Float64Array, slots: SlotValue[], warmup: number, reps: number): Promise<Float64Array>;
  alloc(device: number, bytes: number, zero: boolean): Handle;
  free(h: Handle): void;
  upload(device: number, data: HostArray): Handle | Promise<Handle>;
  download(h: Handle, dst: HostArray): Promise<void>;
  copyDevice(h: Handle, device: number): Handle;
  synchronize(device: number): Promise<void>;
  memoryStats(device: number): NativeStats;
  emptyCache(device: number): Promise<void>;
  resetPeakMemoryStats(device: number): void;
  debugFault(device: number): void;
  fillRandom(h: Handle, dtype: number, seed: number): void;
  convertFromF32(src: Float32Array, dst: Uint16Array, dtype: number): void;
  convertToF32(src: Uint16Array, dst: Float32Array, dtype: number): void;
  devices(): Array<{ index: number; name: string; computeCapability: string; totalMemory: number;
    multiProcessorCount: number }>;
  buildInfo(): Record<string, unknown>;
  cudaSupports(dtype: number, headDim: number): boolean;
}

export const native: RawBinding = loadAddon<RawBinding>();

const FIELD_NAMES = ['device', 'batch', 'seqlen_q', 'seqlen_k', 'heads', 'heads_k', 'head_dim', 'dtype', 'causal',
  'bhsd', 'scale', 'softcap', 'has_window', 'window_left', 'window_right', 'block_m', 'block_n', 'threads',
  'deterministic', 'total_q', 'total_k', 'page_size', 'max_pages', 'num_pages', 'num_splits', 'rotary_dim',
  'rotary_interleaved', 'rotary_max_position', 'merge_count', 'slot_count', 'min_seqlen_q'] as const;
const SLOT_NAMES = ['q', 'k', 'v', 'out', 'lse', 'dout', 'dq', 'dk', 'dv', 'softmax_d', 'cu_seqlens_q',
  'cu_seqlens_k', 'page_table', 'seqlens_k', 'rotary_cos', 'rotary_sin', 'k_cache', 'v_cache', 'cu_seqlens_new',
  'seqlens_before'] as const;
const OP_NAMES = ['forward', 'backward', 'paged', 'append_kv'] as const;

export type FieldName = typeof FIELD_NAMES[number];
export type SlotName = typeof SLOT_NAMES[number];
export type OpName = typeof OP_NAMES[number];

function indexMap<N extends string>(what: string, wanted: readonly N[], have: string[]): Record<N, number> {
  const m = {} as Record<N, number>;
  for (const name of wanted) {
    const i = have.indexOf(name);
    if (i < 0) {
      throw new Error(`flash-attention-node: the native addon has no ${what} '${name}': it was built from other ` +
        `sources than this JavaScript; rebuild it (npm run build:native)`);
    }
    m[name] = i;
  }
  return m;
}

const layout = native.layout();
/** Field indices. */
export const F = indexMap('field', FIELD_NAMES, layout.fields);
/** Slot indices. */
export const S = indexMap('slot', SLOT_NAMES, layout.slots);
/** Operation codes. */
export const OP = indexMap('op', OP_NAMES, layout.ops);
// Call conventions the JavaScript relies on: spare_outputs, an output slot may hold the handle of a
// disposed tensor for the call to fill (tensor.ts, spareHandle).
// slot_args, call() takes the slots as arguments rather than as one array (callSlots).
indexMap('feature', ['spare_outputs', 'slot_args'] as const, layout.features ?? []);
if (layout.slots.length > 20) {
  throw new Error(`flash-attention-node: the native addon has ${layout.slots.length} slots, callSlots passes 20: extend callSlots`);
}
const NUM_FIELDS = layout.fields.length;
const NUM_SLOTS = layout.slots.length;

// One params record serves every call: the binding copies what it needs before it returns (CPU
// work gets its own copy of the fields before it is queued), so the record can be reused; a typed
// array allocation per call costs more than the rest of a small call's JavaScript.
const scratch = new Float64Array(NUM_FIELDS);

/** A zeroed params record (shared: fill it and pass it to one native call right away). */
export function newParams(): Float64Array {
  return scratch.fill(0);
}

/**
 * native.call with the slots of `a` (indexed by S) as its arguments. The addon gets every argument
 * of a call in one Node-API request, where reading an array's elements from C++ costs 60-90 ns
 * apiece (a decode call's slot reads had cost ~1.5 us of its ~10 us on the host).
 */
export function callSlots(op: number, params: Float64Array, a: SlotValue[]): Promise<void> | Handle[] | undefined {
  return native.call(op, params, a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13],
    a[14], a[15], a[16], a[17], a[18], a[19]);
}

/**
 * A slot array with `slots` (own keys) set; slot_count set in `params` to cover the highest one. Dense,
 * null where a slot is not given: a hole would read through the prototype chain (a polluted
 * Array.prototype[i] taken for slot i).
 */
export function slotArray(params: Float64Array, slots: Partial<Record<SlotName, SlotValue>>): SlotValue[] {
  const arr: SlotValue[] = new Array<SlotValue>(NUM_SLOTS).fill(null);
  let n = 0;
  for (const name of Object.keys(slots)) {
    const v = slots[name as SlotName];
    if (v === undefined || v === null) continue;
    const i = S[name as SlotName];
    arr[i] = v;
    if (i + 1 > n) n = i + 1;
  }
  params[F.slot_count] = n;
  return arr;
}
