// Argument checks that throw TypeError/RangeError naming the argument, what was expected and what
// was given: `<fn>: <argument> <expectation>, got <given>`.
import { types } from 'node:util';
import { typedArrayKind, typedArrayLength } from './typed';

// Every copy of the library loaded in a process (two installs, a cleared require cache) has its own
// Tensor class, and each refuses the others' tensors. Their prototypes all carry this brand, so
// that the refusal can say where the tensor came from; tensor.ts tells another copy's from its own.
export const TENSOR_BRAND = Symbol.for('flash-attention-node.Tensor');
let foreignTensor: (x: object) => boolean = () => false;
export function setForeignTensorTest(test: (x: object) => boolean): void {
  foreignTensor = test;
}

/** A short, readable rendering of any value for error messages (never throws). */
export function describe(value: unknown): string {
  try {
    return describeValue(value);
  } catch {
    return 'an object';  // (a revoked Proxy, a throwing getter)
  }
}

function describeValue(value: unknown): string {
  if (value === null) return 'null';
  if (value === undefined) return 'undefined';
  if (typeof value === 'string') return `'${value.length > 40 ? value.slice(0, 40) + '…' : value}'`;
  if (typeof value === 'number' || typeof value === 'boolean' || typeof value === 'bigint') return String(value);
  if (typeof value === 'function') return 'a function';
  if (typeof value === 'symbol') return value.toString();
  if (Array.isArray(value)) {
    const items = value.slice(0, 8).map((v) => (typeof v === 'number' ? String(v) : describeValue(v)));
    return `[${items.join(', ')}${value.length > 8 ? ', …' : ''}]`;
  }
  if (types.isProxy(value)) return 'a Proxy';
  if (typeof value === 'object' && TENSOR_BRAND in value && foreignTensor(value)) {
    return 'a Tensor of another copy of flash-attention-node (each copy loaded has its own Tensor class: load the library once)';
  }
  const kind = typedArrayKind(value);
  if (kind !== undefined) {
    // the array's own kind (with a subclass's name beside it), and whether it is another realm's
    const ctor = (value as object).constructor?.name;
    const here = (globalThis as Record<string, unknown>)[kind];
    const realm = typeof here === 'function' && !(value instanceof (here as new () => object)) ? ' from another realm' : '';
    return `${article(kind)} ${ctor && ctor !== kind ? `${ctor} (${article(kind)} ${kind})` : kind}${realm} of length ${typedArrayLength(value as ArrayBufferView)}`;
  }
  const ctor = (value as object).constructor?.name;
  return ctor && ctor !== 'Object' ? `${article(ctor)} ${ctor}` : 'an object';
}

const article = (word: string) => (/^[AEIOUaeiou]/.test(word) ? 'an' : 'a');

export function typeError(fn: string, arg: string, expected: string, given: unknown, raw = false): TypeError {
  return new TypeError(`${fn}: ${arg} ${expected}, got ${raw ? String(given) : describe(given)}`);
}

export function rangeError(fn: string, arg: string, expected: string, given: unknown, raw = false): RangeError {
  return new RangeError(`${fn}: ${arg} ${expected}, got ${raw ? String(given) : describe(given)}`);
}

/** An attention tensor's dtype must be a float type: an int32 one (an index array passed by mistake) is named. */
export function checkFloatDtype(fn: string, arg: string, dtype: string): void {
  if (dtype === 'int32') throw typeError(fn, arg, `must be 'float32', 'float16' or 'bfloat16'`, dtype);
}

/** The known name that `name` was probably meant to be (a misspelt option), or undefined. */
export function suggest(name: string, known: readonly string[]): string | undefined {
  const lower = name.toLowerCase().replace(/^is/, '');
  return known.find((k) => k.toLowerCase() === lower || lower.includes(k.toLowerCase())) ??
    known.find((k) => k.length >= 4 && editDistance(lower, k.toLowerCase()) <= 2);
}

/** Levenshtein distance of two short strings (option-name suggestions). */
function editDistance(a: string, b: string): number {
  let prev = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i++) {
    const cur = [i];
    for (let j = 1; j <= b.length; j++) cur[j] = Math.min(prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] === b[j - 1] ? 0 : 1));
    prev = cur;
  }
  return prev[b.length];
}

// What checkOptions returns for absent options: one shared frozen object, not one per call.
const NO_OPTIONS: Readonly<Record<string, unknown>> = Object.freeze({});

type OptionsReader = (src: Record<string, unknown>) => Record<string, unknown> | null;
const readers = new WeakMap<readonly string[], OptionsReader>();

/**
 * Marks `known` (a module-level list of option names, passed to checkOptions on every call of a hot
 * function) for a compiled snapshot reader: the same reads in the same order, each by its own name
 * at its own site, into an object of one shape whose absent options are undefined. The loop's reads
 * by a computed key cost ~12 ns apiece whatever the options' shape (pagedAttention reads 14 names: a
 * fifth of its JavaScript); a site of its own sees one shape and reads in ~1-2 ns. Where code cannot
 * be generated (node --disallow-code-generation-from-strings) the list keeps the loop.
 */
export function optionList<T extends readonly string[]>(known: T): T {
  // (a name that every object inherits would count as given on every call, in the loop too)
  const inherited = known.find((k) => k in Object.prototype);
  if (inherited !== undefined) throw new Error(`flash-attention-node: internal: option name '${inherited}' is an Object.prototype member`);
  if (known.every((k) => /^[A-Za-z_$][\w$]*$/.test(k) && k !== '__proto__')) {
    try {
      const fields = known.map((k) => `this.${k} = undefined;`).join(' ');
      const reads = known.map((k) => `v = src.${k}; if (v !== undefined) { if (s === null) s = new Snapshot(); s.${k} = v; }`).join('\n');
      const make = new Function(`function Snapshot() { ${fields} }\nreturn function read(src) {\nlet s = null, v;\n${reads}\nreturn s;\n};`);
      readers.set(known, make() as OptionsReader);
    } catch {
      // (code generation disallowed: the loop)
    }
  }
  return known;
}

/**
 * Throws unless `options` is undefined or an object whose keys are all known, and returns a snapshot
 * of it: each option read once (getters run once), into a new object that the checks and the call
 * then use. An options object whose values change between reads (getters, a Proxy) cannot pass a
 * check with one value and reach the native code with another. `name` is the argument's name in
 * messages: 'options', or a nested object's path such as 'options.rotary'.
 */
export function checkOptions(fn: string, options: unknown, known: readonly string[], name = 'options'): Readonly<Record<string, unknown>> {
  if (options === undefined) return NO_OPTIONS;
  if (options === null || typeof options !== 'object' || Array.isArray(options) || options instanceof Number ||
    options instanceof String || options instanceof Boolean) {
    throw typeError(fn, name, 'must be an object or undefined', options);
  }
  const keys = Object.keys(options);
  for (const key of keys) {
    if (!known.includes(key)) {
      const guess = suggest(key, known);
      throw new TypeError(`${fn}: ${name}.${key} is not an option${guess ? ` (did you mean ${name}.${guess}?)` : ''}; ` +
        `expected one of ${known.join(', ')}, got '${key}'`);
    }
  }
  // Every known option read once, own or inherited, enumerable or not (as the checks read them
  // before the snapshot), into a new object: a list's compiled reader where it has one (optionList),
  // else the loop below, whose snapshot holds only the options given.
  const src = options as Record<string, unknown>;
  const read = readers.get(known);
  if (read !== undefined) return read(src) ?? NO_OPTIONS;
  const snap: Record<string, unknown> = {};
  let any = false;
  for (const key of known) {
    const v = src[key];
    if (v !== undefined) { snap[key] = v; any = true; }
  }
  if (!any) return NO_OPTIONS;
  return snap;
}

export function checkBoolean(fn: string, name: string, v: unknown, def: boolean): boolean {
  if (v === undefined) return def;
  if (typeof v !== 'boolean') throw typeError(fn, name, 'must be a boolean', v);
  return v;
}

/** Integer in [min, max], or `def` when undefined. */
export function checkInt(fn: string, name: string, v: unknown, min: number, max: number, def: number): number {
  if (v === undefined) return def;
  if (typeof v !== 'number') throw typeError(fn, name, `must be an integer between ${min} and ${max}`, v);
  if (!Number.isInteger(v) || v < min || v > max) {
    throw rangeError(fn, name, `must be an integer between ${min} and ${max}`, v);
  }
  return v;
}
