// Test harness of the inference API (varlen, paged KV cache, appendKV, rotary, merge): random
// cases, running them on a device, and float64 references built from the dense reference of
// reference.ts, one sequence at a time. Accuracy rules: those of harness.ts (float32 relative L2
// <= 1e-5; float16/bfloat16 the 2x-naive rule). Index arrays go in as Int32Array or as int32 device
// tensors (then with maxSeqlen* given), both covered.
import {
  Tensor, appendKV, flashAttentionVarlen, flashAttentionVarlenBackward, mergeAttention, pagedAttention,
} from '../../lib/index';
import { Checker, type Device, checkFp32, checkLowp, checkLse, checkLseFp32Rule, onDevice } from './harness';
import {
  type AttnDims, type DType, Rng, buildTensor, defaultScale, disposeAll, fmt, maxAbs, maxAbsErr, naiveLowp, refBackward,
  refForward, roundArray, toF64, unitRoundoff, visibleKeys,
} from './reference';

export interface MaskSpec {
  causal?: boolean;
  window?: readonly [number, number];
  softcap?: number;
  scale?: number;
}

function maskName(m: MaskSpec): string {
  const p: string[] = [];
  if (m.causal) p.push('causal');
  if (m.window) p.push(`window=[${m.window.join(',')}]`);
  if (m.softcap) p.push(`softcap=${m.softcap}`);
  if (m.scale !== undefined) p.push(`scale=${m.scale.toPrecision(3)}`);
  return p.join(' ');
}

function maskOptions(m: MaskSpec): Record<string, unknown> {
  const o: Record<string, unknown> = {};
  if (m.causal !== undefined) o.causal = m.causal;
  if (m.window) o.window = m.window;
  if (m.softcap !== undefined) o.softcap = m.softcap;
  if (m.scale !== undefined) o.scale = m.scale;
  return o;
}

/** Dense dims of one sequence (B = 1, bshd) for the reference. */
function seqDims(nq: number, nk: number, H: number, Hkv: number, D: number, m: MaskSpec): AttnDims {
  return {
    B: 1, Nq: nq, Nk: nk, H, Hkv, D, causal: m.causal ?? false, scale: m.scale ?? defaultScale(D), layout: 'bshd',
    window: m.window, softcap: m.softcap,
  };
}

/** An index array as the call takes it: the Int32Array itself, or an int32 tensor on the device. */
async function indexArg(a: Int32Array, device: Device, asTensor: boolean, shape?: number[]): Promise<Int32Array | Tensor> {
  return asTensor ? onDevice(Tensor.from(a, shape ?? [a.length]), device) : a;
}

export function prefix(lens: readonly number[]): Int32Array {
  const cu = new Int32Array(lens.length + 1);
  for (let i = 0; i < lens.length; i++) cu[i + 1] = cu[i] + lens[i];
  return cu;
}

/** Rows [r0, r0 + n) of a packed [total, Hh, D] array. */
function rows(a: ArrayLike<number>, r0: number, n: number, Hh: number, D: number): Float64Array {
  return Float64Array.from({ length: n * Hh * D }, (_, i) => a[r0 * Hh * D + i]);
}

function put(dst: Float64Array, src: ArrayLike<number>, r0: number, Hh: number, D: number): void {
  for (let i = 0; i < src.length; i++) dst[r0 * Hh * D + i] = src[i];
}

/** lse of sequence b ([1, H, n] dense) into the packed [H, total] layout. */
function putLse(dst: Float64Array, src: ArrayLike<number>, r0: number, n: number, H: number, total: number): void {
  for (let h = 0; h < H; h++) for (let i = 0; i < n; i++) dst[h * total + r0 + i] = src[h * n + i];
}

// ------------------------------------------------------------------------------------------------
// Varlen.
// ------------------------------------------------------------------------------------------------

export interface VarlenCase extends MaskSpec {
  seed: number;
  lensQ: number[];
  lensK: number[];
  H: number;
  Hkv: number;
  D: number;
  dtype: DType;
  /** index arrays as device tensors (with maxSeqlen given) instead of Int32Arrays */
  deviceIndex?: boolean;
  backward?: boolean;
  deterministic?: boolean;
}

export function varlenName(c: VarlenCase): string {
  return `${c.dtype} seqs q[${c.lensQ.join(',')}] k[${c.lensK.join(',')}] H${c.H}/${c.Hkv} D${c.D} ${maskName(c)}` +
    `${c.deviceIndex ? ' index tensors' : ''}${c.deterministic ? ' deterministic' : ''} seed=${c.seed}`;
}

export async function checkVarlenCase(c: VarlenCase, device: Device): Promise<void> {
  const rng = new Rng(c.seed);
  const { H, Hkv, D, dtype } = c;
  const cuQ = prefix(c.lensQ), cuK = prefix(c.lensK);
  const tq = cuQ[cuQ.length - 1], tk = cuK[cuK.length - 1];
  const q = buildTensor(rng.normals(tq * H * D), [tq, H, D], dtype);
  const k = buildTensor(rng.normals(tk * Hkv * D), [tk, Hkv, D], dtype);
  const v = buildTensor(rng.normals(tk * Hkv * D), [tk, Hkv, D], dtype);
  const dout = buildTensor(rng.normals(tq * H * D), [tq, H, D], dtype);
  const ck = new Checker(`varlen ${device} ${varlenName(c)}`);
  const qt = await onDevice(q.tensor, device), kt = await onDevice(k.tensor, device), vt = await onDevice(v.tensor, device);
  const dt = await onDevice(dout.tensor, device);
  const idx = {
    cuSeqlensQ: await indexArg(cuQ, device, !!c.deviceIndex),
    cuSeqlensK: await indexArg(cuK, device, !!c.deviceIndex),
    ...(c.deviceIndex ? { maxSeqlenQ: Math.max(0, ...c.lensQ), maxSeqlenK: Math.max(0, ...c.lensK) } : {}),
  };
  const opts = { ...maskOptions(c), ...idx };
  const toDispose: Array<Tensor | undefined> = [qt, kt, vt, dt];
  for (const x of Object.values(idx)) if (x instanceof Tensor) toDispose.push(x);
  try {
    const r = await flashAttentionVarlen(qt, kt, vt, opts);
    toDispose.push(r.out, r.lse);
    ck.eq('out.shape', r.out.shape, [tq, H, D]);
    ck.eq('lse.shape', r.lse.shape, [H, tq]);
    const out = await toF64(r.out), lse = await toF64(r.lse);
    // References, one sequence at a time, packed back.
    const refO = new Float64Array(tq * H * D), refL = new Float64Array(H * tq);
    const nvO = new Float64Array(tq * H * D), nvL = new Float64Array(H * tq);
    const rdq = new Float64Array(tq * H * D), rdk = new Float64Array(tk * Hkv * D), rdv = new Float64Array(tk * Hkv * D);
    const mdq = new Float64Array(tq * H * D), mdk = new Float64Array(tk * Hkv * D), mdv = new Float64Array(tk * Hkv * D);
    const ndq = new Float64Array(tq * H * D), ndk = new Float64Array(tk * Hkv * D), ndv = new Float64Array(tk * Hkv * D);
    for (let b = 0; b < c.lensQ.length; b++) {
      const nq = c.lensQ[b], nk = c.lensK[b];
      if (nq === 0) continue;
      const d = seqDims(nq, nk, H, Hkv, D, c);
      const qs = rows(q.values, cuQ[b], nq, H, D), ks = rows(k.values, cuK[b], nk, Hkv, D), vs = rows(v.values, cuK[b], nk, Hkv, D);
      const ds = rows(dout.values, cuQ[b], nq, H, D);
      const ref = c.backward ? refBackward(qs, ks, vs, ds, d) : refForward(qs, ks, vs, d);
      put(refO, ref.out, cuQ[b], H, D);
      putLse(refL, ref.lse, cuQ[b], nq, H, tq);
      if (dtype !== 'float32') {
        const nv = naiveLowp(qs, ks, vs, c.backward ? ds : null, d, dtype);
        put(nvO, nv.out, cuQ[b], H, D);
        putLse(nvL, nv.lse, cuQ[b], nq, H, tq);
        if (c.backward) {
          put(ndq, nv.dq!, cuQ[b], H, D);
          put(ndk, nv.dk!, cuK[b], Hkv, D);
          put(ndv, nv.dv!, cuK[b], Hkv, D);
        }
      }
      if (c.backward) {
        const rb = ref as ReturnType<typeof refBackward>;
        put(rdq, rb.dq, cuQ[b], H, D);
        put(rdk, rb.dk, cuK[b], Hkv, D);
        put(rdv, rb.dv, cuK[b], Hkv, D);
        put(mdq, rb.dqMag, cuQ[b], H, D);
        put(mdk, rb.dkMag, cuK[b], Hkv, D);
        put(mdv, rb.dvMag, cuK[b], Hkv, D);
      }
    }
    if (dtype === 'float32') {
      checkFp32(ck, 'out', out, refO);
      checkLse(ck, dtype, lse, refL);
    } else {
      checkLowp(ck, 'out', dtype, out, refO, nvO);
      checkLse(ck, dtype, lse, refL, nvL);
    }
    if (c.backward) {
      const bo: Record<string, unknown> = { ...opts };
      if (c.deterministic !== undefined) bo.deterministic = c.deterministic;
      const g = await flashAttentionVarlenBackward(dt, qt, kt, vt, r.out, r.lse, bo as never);
      toDispose.push(g.dq, g.dk, g.dv);
      const dq = await toF64(g.dq), dk = await toF64(g.dk), dv = await toF64(g.dv);
      // Magnitudes of the summed terms: where an exact gradient is 0 (a window of one key: P = 1,
      // dS = 0) the bound is the rounding of that many terms instead of a relative error.
      const maxQ = Math.max(1, ...c.lensQ), maxK = Math.max(1, ...c.lensK), grp = H / Hkv;
      const mq = { values: mdq, terms: maxK + D }, mk = { values: mdk, terms: maxQ * grp + D }, mv = { values: mdv, terms: maxQ * grp };
      if (dtype === 'float32') {
        checkFp32(ck, 'dq', dq, rdq, mq);
        checkFp32(ck, 'dk', dk, rdk, mk);
        checkFp32(ck, 'dv', dv, rdv, mv);
      } else {
        checkLowp(ck, 'dq', dtype, dq, rdq, ndq, mq);
        checkLowp(ck, 'dk', dtype, dk, rdk, ndk, mk);
        checkLowp(ck, 'dv', dtype, dv, rdv, ndv, mv);
      }
    }
  } finally {
    disposeAll(...toDispose);
  }
  ck.done();
}

// ------------------------------------------------------------------------------------------------
// Paged KV cache: appendKV + pagedAttention.
// ------------------------------------------------------------------------------------------------

export interface PagedCase extends MaskSpec {
  seed: number;
  /** tokens already in the cache per sequence, and new tokens appended (and queried) this step */
  before: number[];
  fresh: number[];
  /** query count per sequence (<= before + fresh; default: fresh) */
  nq?: number[];
  pageSize: number;
  H: number;
  Hkv: number;
  D: number;
  dtype: DType;
  rotary?: { dim: number; interleaved: boolean };
  numSplits?: number;
  deviceIndex?: boolean;
  /** extra unused pages in the cache (filled with NaN: reading one shows) */
  spare?: number;
  /** float16 / bfloat16: lse also held to the fp32 rule (AttnCase.lseFp32Rule, checkLseFp32Rule); not with rotary */
  lseFp32Rule?: boolean;
}

export function pagedName(c: PagedCase): string {
  return `${c.dtype} P${c.pageSize} before[${c.before.join(',')}] new[${c.fresh.join(',')}]` +
    `${c.nq ? ` nq[${c.nq.join(',')}]` : ''} H${c.H}/${c.Hkv} D${c.D} ${maskName(c)}` +
    `${c.rotary ? ` rotary${c.rotary.dim}${c.rotary.interleaved ? 'i' : ''}` : ''}` +
    `${c.numSplits ? ` splits=${c.numSplits}` : ''}${c.deviceIndex ? ' index tensors' : ''} seed=${c.seed}`;
}

/** Rotates rows [n, Hh, D] at positions pos0 + i (float64), as fa_rotary defines it. */
export function rotateRef(x: Float64Array, n: number, Hh: number, D: number, pos0: number, cos: Float64Array,
  sin: Float64Array, rd: number, interleaved: boolean): Float64Array {
  const y = Float64Array.from(x);
  const half = rd / 2;
  for (let i = 0; i < n; i++) {
    const p = pos0 + i;
    for (let h = 0; h < Hh; h++) {
      const o = (i * Hh + h) * D;
      for (let j = 0; j < half; j++) {
        const i0 = interleaved ? 2 * j : j, i1 = interleaved ? 2 * j + 1 : j + half;
        const cs = cos[p * half + j], sn = sin[p * half + j];
        const a = x[o + i0], b = x[o + i1];
        y[o + i0] = a * cs - b * sn;
        y[o + i1] = a * sn + b * cs;
      }
    }
  }
  return y;
}

/**
 * A page table [B, maxPages] (row-major) for sequences of `lens` tokens in pages of P: the cache's numPages pages
 * in random order (Fisher-Yates on rng), each sequence's pages in turn; unused entries -1.
 */
export function shuffledPageTable(rng: Rng, lens: readonly number[], P: number, numPages: number, maxPages: number): Int32Array {
  const perm = Array.from({ length: numPages }, (_, i) => i);
  for (let i = perm.length - 1; i > 0; i--) {
    const j = Math.floor(rng.uniform() * (i + 1));
    [perm[i], perm[j]] = [perm[j], perm[i]];
  }
  const table = new Int32Array(lens.length * maxPages).fill(-1);
  let next = 0;
  for (let b = 0; b < lens.length; b++) for (let j = 0; j < Math.ceil(lens[b] / P); j++) table[b * maxPages + j] = perm[next++];
  return table;
}

export async function checkPagedCase(c: PagedCase, device: Device): Promise<void> {
  const rng = new Rng(c.seed);
  const { H, Hkv, D, dtype, pageSize: P } = c;
  const B = c.before.length;
  const total = c.before.map((x, b) => x + c.fresh[b]);
  const nqs = c.nq ?? c.fresh;
  const maxPages = Math.max(1, ...total.map((t) => Math.ceil(t / P)));
  const used = total.reduce((a, t) => a + Math.ceil(t / P), 0);
  const numPages = used + (c.spare ?? 3);
  const table = shuffledPageTable(rng, total, P, numPages, maxPages);
  // The cache: the 'before' tokens written directly (rounded to dtype); everything else NaN.
  const cacheN = numPages * P * Hkv * D;
  const kc = new Float64Array(cacheN).fill(NaN), vc = new Float64Array(cacheN).fill(NaN);
  const keys: Float64Array[] = [], vals: Float64Array[] = [];  // per sequence, all tokens, in order
  const slot = (b: number, t: number) => ((table[b * maxPages + Math.floor(t / P)] * P + (t % P)) * Hkv) * D;
  let rd = 0;
  const maxPos = Math.max(1, ...total) + 3;
  let cosT = new Float64Array(0), sinT = new Float64Array(0);
  if (c.rotary) {
    rd = c.rotary.dim;
    const half = rd / 2;
    cosT = new Float64Array(maxPos * half);
    sinT = new Float64Array(maxPos * half);
    for (let p = 0; p < maxPos; p++) {
      for (let j = 0; j < half; j++) {
        const ang = p / Math.pow(10000, (2 * j) / rd);
        cosT[p * half + j] = Math.fround(Math.cos(ang));
        sinT[p * half + j] = Math.fround(Math.sin(ang));
      }
    }
  }
  const R = (x: ArrayLike<number>) => (dtype === 'float32' ? Float64Array.from(Float32Array.from(x)) : roundArray(x, dtype));
  const newK: Float64Array[] = [], newV: Float64Array[] = [];
  for (let b = 0; b < B; b++) {
    const kb = new Float64Array(total[b] * Hkv * D), vb = new Float64Array(total[b] * Hkv * D);
    const old = R(rng.normals(c.before[b] * Hkv * D)), oldV = R(rng.normals(c.before[b] * Hkv * D));
    kb.set(old);
    vb.set(oldV);
    const nk = R(rng.normals(c.fresh[b] * Hkv * D)), nv = R(rng.normals(c.fresh[b] * Hkv * D));
    newK.push(nk);
    newV.push(nv);
    // What appendKV should store: k rotated at positions before + i (computed in float, rounded).
    const stored = c.rotary ? R(rotateRef(nk, c.fresh[b], Hkv, D, c.before[b], cosT, sinT, rd, c.rotary.interleaved)) : nk;
    kb.set(stored, c.before[b] * Hkv * D);
    vb.set(nv, c.before[b] * Hkv * D);
    keys.push(kb);
    vals.push(vb);
    for (let t = 0; t < c.before[b]; t++) {
      for (let x = 0; x < Hkv * D; x++) {
        kc[slot(b, t) + x] = kb[t * Hkv * D + x];
        vc[slot(b, t) + x] = vb[t * Hkv * D + x];
      }
    }
  }
  const shapeC = [numPages, P, Hkv, D];
  const kCache = await onDevice(buildTensor(kc, shapeC, dtype).tensor, device);
  const vCache = await onDevice(buildTensor(vc, shapeC, dtype).tensor, device);
  const cuNew = prefix(c.fresh);
  const totalNew = cuNew[B];
  const kNew = new Float64Array(totalNew * Hkv * D), vNew = new Float64Array(totalNew * Hkv * D);
  for (let b = 0; b < B; b++) {
    kNew.set(newK[b], cuNew[b] * Hkv * D);
    vNew.set(newV[b], cuNew[b] * Hkv * D);
  }
  const kt = await onDevice(buildTensor(kNew, [totalNew, Hkv, D], dtype).tensor, device);
  const vt = await onDevice(buildTensor(vNew, [totalNew, Hkv, D], dtype).tensor, device);
  const cuQ = prefix(nqs);
  const totalQ = cuQ[B];
  const q = buildTensor(rng.normals(totalQ * H * D), [totalQ, H, D], dtype);
  const qt = await onDevice(q.tensor, device);
  const ck = new Checker(`paged ${device} ${pagedName(c)}`);
  const toDispose: Array<Tensor | undefined> = [kCache, vCache, kt, vt, qt];
  const di = !!c.deviceIndex;
  try {
    let rotary: { cos: Tensor; sin: Tensor; interleaved: boolean } | undefined;
    if (c.rotary) {
      const half = rd / 2;
      rotary = {
        cos: await onDevice(Tensor.from(Float32Array.from(cosT), [maxPos, half]), device),
        sin: await onDevice(Tensor.from(Float32Array.from(sinT), [maxPos, half]), device),
        interleaved: c.rotary.interleaved,
      };
      toDispose.push(rotary.cos, rotary.sin);
    }
    const tableArg = await indexArg(table, device, di, di ? [B, maxPages] : undefined);
    const beforeArg = await indexArg(Int32Array.from(c.before), device, di);
    const cuNewArg = await indexArg(cuNew, device, di);
    for (const x of [tableArg, beforeArg, cuNewArg]) if (x instanceof Tensor) toDispose.push(x);
    await appendKV(kCache, vCache, kt, vt, { pageTable: tableArg, cuSeqlensNew: cuNewArg, seqlensBefore: beforeArg, rotary });
    // The cache now holds every token (bit-exact where no rotation; rotated keys within 1 ulp).
    const kGot = await toF64(kCache), vGot = await toF64(vCache);
    let badV = 0, worstK = 0;
    const u = dtype === 'float32' ? Math.pow(2, -23) : unitRoundoff(dtype) * 2;
    for (let b = 0; b < B; b++) {
      for (let t = 0; t < total[b]; t++) {
        for (let x = 0; x < Hkv * D; x++) {
          const want = keys[b][t * Hkv * D + x], got = kGot[slot(b, t) + x];
          if (!Object.is(vGot[slot(b, t) + x], vals[b][t * Hkv * D + x])) badV++;
          // Relative to the row's scale (inputs ~N(0, 1)): a x cos - b x sin can cancel.
          const e = Math.abs(got - want) / Math.max(Math.abs(want), 1);
          if (!(e <= worstK)) worstK = Number.isNaN(e) ? Infinity : Math.max(worstK, e);
        }
      }
    }
    ck.ok(`appendKV: ${badV} cached values differ from the values written`, badV === 0);
    ck.le('appendKV: cached keys, max relative difference (rotation rounding)', worstK, c.rotary ? 4 * u : 0);
    // Unused pages stay NaN (nothing written outside the sequences' tokens).
    let touched = 0;
    const usedSlots = new Set<number>();
    for (let b = 0; b < B; b++) for (let t = 0; t < total[b]; t++) usedSlots.add(slot(b, t));
    for (let s0 = 0; s0 < cacheN; s0 += Hkv * D) if (!usedSlots.has(s0) && !Number.isNaN(kGot[s0])) touched++;
    ck.ok(`appendKV: ${touched} token slots outside the sequences were written`, touched === 0);

    const cuQArg = await indexArg(cuQ, device, di);
    const skArg = await indexArg(Int32Array.from(total), device, di);
    for (const x of [cuQArg, skArg]) if (x instanceof Tensor) toDispose.push(x);
    const popts: Record<string, unknown> = {
      ...maskOptions(c), pageTable: tableArg, seqlensK: skArg, cuSeqlensQ: cuQArg, rotary,
    };
    if (c.numSplits !== undefined) popts.numSplits = c.numSplits;
    if (di) {
      popts.maxSeqlenQ = Math.max(0, ...nqs);
      popts.maxSeqlenK = Math.max(0, ...total);
    }
    const r = await pagedAttention(qt, kCache, vCache, popts as never);
    toDispose.push(r.out, r.lse);
    ck.eq('out.shape', r.out.shape, [totalQ, H, D]);
    ck.eq('lse.shape', r.lse.shape, [H, totalQ]);
    const out = await toF64(r.out), lse = await toF64(r.lse);
    const refO = new Float64Array(totalQ * H * D), refL = new Float64Array(H * totalQ);
    const nvO = new Float64Array(totalQ * H * D), nvL = new Float64Array(H * totalQ);
    for (let b = 0; b < B; b++) {
      const nq = nqs[b], nk = total[b];
      if (nq === 0) continue;
      let qs = rows(q.values, cuQ[b], nq, H, D);
      if (c.rotary) qs = R(rotateRef(qs, nq, H, D, nk - nq, cosT, sinT, rd, c.rotary.interleaved));
      const d = seqDims(nq, nk, H, Hkv, D, c);
      const ref = refForward(qs, keys[b], vals[b], d);
      put(refO, ref.out, cuQ[b], H, D);
      putLse(refL, ref.lse, cuQ[b], nq, H, totalQ);
      if (dtype !== 'float32') {
        const nv = naiveLowp(qs, keys[b], vals[b], null, d, dtype);
        put(nvO, nv.out, cuQ[b], H, D);
        putLse(nvL, nv.lse, cuQ[b], nq, H, totalQ);
      }
    }
    if (dtype === 'float32') {
      checkFp32(ck, 'out', out, refO);
      checkLse(ck, dtype, lse, refL);
    } else {
      // Rotated q is rounded to the dtype once more than the reference's: allow one extra unit of
      // rounding on top of the 2x-naive rule (the floor already covers it).
      checkLowp(ck, 'out', dtype, out, refO, nvO);
      checkLse(ck, dtype, lse, refL, nvL);
      if (c.lseFp32Rule) {
        // (not with rotary: the library and the reference each round the rotated q to the dtype, at times one unit
        // apart, which moves lse by far more than the fp32 rule allows)
        if (c.rotary) throw new Error('lseFp32Rule: not for a case with rotary');
        checkLseFp32Rule(ck, c, lse, refL, q.values, [Math.max(0, ...keys.map(maxAbs))]);
      }
    }
  } finally {
    disposeAll(...toDispose);
  }
  ck.done();
}

// ------------------------------------------------------------------------------------------------
// mergeAttention.
// ------------------------------------------------------------------------------------------------

export interface MergeCase {
  seed: number;
  parts: number;
  B: number;
  N: number;
  H: number;
  D: number;
  dtype: DType;
  packed: boolean;
}

/**
 * Splits the keys of a random attention problem into `parts` disjoint sets, computes each part's
 * out and lse with the library (flashAttention on the key subset), merges them, and compares with
 * the attention over all keys (float64 reference). Some rows of some parts see no key (lse = +inf).
 */
export async function checkMergeCase(c: MergeCase, device: Device): Promise<void> {
  const rng = new Rng(c.seed);
  const { B, N, H, D, dtype, parts } = c;
  const ck = new Checker(`merge ${device} ${dtype} parts=${parts} B${B} N${N} H${H} D${D} ${c.packed ? 'packed' : 'dense'} seed=${c.seed}`);
  // Random partial results: out_i random, lse_i random in [-5, 5], some +inf and -inf (partials that saw no key:
  // they contribute nothing) and a few NaN (which make their row NaN, out and lse).
  const rowsN = B * N * H;
  const outs: Float64Array[] = [], lses: Float64Array[] = [];
  const toDispose: Tensor[] = [];
  const outT: Tensor[] = [], lseT: Tensor[] = [];
  const lseShape = c.packed ? [H, N] : [B, H, N];
  const oShape = c.packed ? [N, H, D] : [B, N, H, D];
  for (let p = 0; p < parts; p++) {
    const o = buildTensor(rng.normals(rowsN * D), oShape, dtype);
    const l = new Float32Array(rowsN);
    for (let i = 0; i < rowsN; i++) {
      const r = rng.uniform();
      l[i] = r < 0.12 ? Infinity : r < 0.16 ? -Infinity : r < 0.175 ? NaN : (rng.uniform() - 0.5) * 10;
    }
    outs.push(o.values);
    lses.push(Float64Array.from(l));
    const ot = await onDevice(o.tensor, device);
    const lt = await onDevice(Tensor.from(l, lseShape), device);
    outT.push(ot);
    lseT.push(lt);
    toDispose.push(ot, lt);
  }
  try {
    const r = await mergeAttention(outT, lseT);
    toDispose.push(r.out, r.lse);
    const out = await toF64(r.out), lse = await toF64(r.lse);
    const refO = new Float64Array(rowsN * D), refL = new Float64Array(rowsN);
    // Row (b, i, h): out index ((b N + i) H + h) D; lse index (b H + h) N + i.
    for (let b = 0; b < B; b++) {
      for (let i = 0; i < N; i++) {
        for (let h = 0; h < H; h++) {
          const li = (b * H + h) * N + i, oi = ((b * N + i) * H + h) * D;
          const seen = (p: number) => Number.isFinite(lses[p][li]);
          let m = -Infinity, nan = false;
          for (let p = 0; p < parts; p++) {
            if (Number.isNaN(lses[p][li])) nan = true;
            else if (seen(p)) m = Math.max(m, lses[p][li]);
          }
          if (nan) {
            refL[li] = NaN;
            refO.fill(NaN, oi, oi + D);
            continue;
          }
          if (m === -Infinity) {
            refL[li] = Infinity;
            continue;
          }
          let s = 0;
          for (let p = 0; p < parts; p++) if (seen(p)) s += Math.exp(lses[p][li] - m);
          refL[li] = m + Math.log(s);
          for (let p = 0; p < parts; p++) {
            if (!seen(p)) continue;
            const w = Math.exp(lses[p][li] - refL[li]);
            for (let x = 0; x < D; x++) refO[oi + x] += w * outs[p][oi + x];
          }
        }
      }
    }
    // NaN exactly where the reference has it; elsewhere the errors below
    let nanMismatch = 0;
    const matchNaN = (got: Float64Array, ref: Float64Array) => {  // counts mismatches, then zeroes the NaN entries
      for (let i = 0; i < ref.length; i++) {
        if (Number.isNaN(ref[i]) !== Number.isNaN(got[i])) nanMismatch++;
        if (Number.isNaN(ref[i])) got[i] = ref[i] = 0;
      }
    };
    matchNaN(lse, refL);
    matchNaN(out, refO);
    ck.le('entries NaN in one of result and reference only', nanMismatch, 0);
    const lseErr = maxAbsErr(lse, refL);
    ck.le('lse max abs error', lseErr, 1e-5 * (1 + 10));
    const u = dtype === 'float32' ? 2e-6 : unitRoundoff(dtype) * 2;
    let worst = 0;
    for (let i = 0; i < out.length; i++) {
      const e = Math.abs(out[i] - refO[i]) / (1 + Math.abs(refO[i]));
      if (!(e <= worst)) worst = Number.isNaN(e) ? Infinity : e;
    }
    ck.le(`out max error / (1 + |ref|) (${fmt(worst)})`, worst, u * parts + 1e-6);
  } finally {
    disposeAll(...toDispose);
  }
  ck.done();
}

/** Every visible-key range in a sequence is non-empty somewhere (sanity helper for case generation). */
export function anyVisible(nq: number, nk: number, m: MaskSpec): boolean {
  for (let i = 0; i < nq; i++) {
    const [lo, hi] = visibleKeys(i, { Nq: nq, Nk: nk, causal: m.causal ?? false, window: m.window });
    if (lo <= hi) return true;
  }
  return false;
}
