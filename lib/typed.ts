// Typed arrays as the engine sees them, whatever the caller did to them.
//
// A caller's typed array can be a subclass, carry own properties that shadow `length`, `buffer` or
// `slice`, set `Symbol.species`, come from another realm (a `vm` context), or be a Proxy around one.
// The library reads its kind, length and memory through the intrinsic %TypedArray%.prototype getters
// (they read the array's internal slots, which none of that can change) and copies it through the
// base constructors' `set` (no species lookup), so that what was checked is what the native code gets.

const TYPED_ARRAY_PROTO = Object.getPrototypeOf(Uint8Array.prototype) as object;
const getter = (key: PropertyKey) => Object.getOwnPropertyDescriptor(TYPED_ARRAY_PROTO, key)!.get! as (this: unknown) => unknown;
const TAG = getter(Symbol.toStringTag);
const LENGTH = getter('length');
const BUFFER = getter('buffer');
const BYTE_OFFSET = getter('byteOffset');
// %TypedArray%.prototype.set, taken now (a later patch of Float32Array.prototype.set is not called)
const SET = (TYPED_ARRAY_PROTO as { set: (this: unknown, src: ArrayLike<number>) => void }).set;

/**
 * 'Float32Array', 'Int32Array', ... for a genuine typed array of any realm (subclasses included);
 * undefined for anything else (a Proxy around one, a DataView, a plain object).
 */
export function typedArrayKind(x: unknown): string | undefined {
  return x !== null && typeof x === 'object' ? (TAG.call(x) as string | undefined) : undefined;
}

/** The element count of a genuine typed array (its internal slot; 0 once its buffer is detached). */
export function typedArrayLength(x: ArrayBufferView): number {
  return LENGTH.call(x) as number;
}

/** The memory of a genuine typed array. */
export function typedArrayBuffer(x: ArrayBufferView): ArrayBufferLike {
  return BUFFER.call(x) as ArrayBufferLike;
}

export function typedArrayByteOffset(x: ArrayBufferView): number {
  return BYTE_OFFSET.call(x) as number;
}

/**
 * A typed array of this realm's class `Ctor` holding the elements of the genuine typed array `src`
 * (of the same element type), copied by the intrinsic `set` (which reads `src` by its internal
 * slots: no `length`, `slice` or species lookup).
 */
export function copyTyped<A extends Float32Array | Uint16Array | Int32Array>(Ctor: { new(n: number): A }, src: ArrayBufferView): A {
  const n = typedArrayLength(src);  // (0 once the buffer is detached: nothing to copy)
  const out = new Ctor(n);
  if (n > 0) SET.call(out, src as unknown as ArrayLike<number>);
  return out;
}
