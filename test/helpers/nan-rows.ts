// A NaN in one key row: which results it reaches, on either backend. The rows that see that key
// (the query heads of its kv head, under the mask) come back NaN, out and lse; every other row is
// finite. The split-KV decode's combine must not take a NaN partial for one that saw no key (its
// lse was +inf there, the "no key" value, and the combine dropped it: a finite, wrong row), and a
// row's lse must be NaN rather than +inf, so that mergeAttention does not drop it either.
// Dense (flashAttention, causal or not), packed (flashAttentionVarlen) and paged calls (prefill
// chunks and decode rows, numSplits 1..8 and automatic) on inputs drawn by a seeded Rng.
import { expect } from 'vitest';
import {
  Tensor, flashAttention, flashAttentionBackward, flashAttentionVarlen, flashAttentionVarlenBackward, mergeAttention, pagedAttention,
} from '../../lib/index';
import { type Device, onDevice } from './harness';
import { prefix, shuffledPageTable } from './inference';
import { type DType, Rng, buildTensor, disposeAll } from './reference';

/** x (NaN kept) as a dtype tensor on the device; an Int32Array as an int32 index tensor. */
function put(x: ArrayLike<number> | Int32Array, shape: number[], device: Device, dtype: DType = 'float32'): Promise<Tensor> {
  return onDevice(x instanceof Int32Array ? Tensor.from(x, shape) : buildTensor(x, shape, dtype).tensor, device);
}

/**
 * Checks x [rows, heads, D] (row-major; out or a gradient) against where a NaN reaches it: `nan(row, h)` rows all NaN;
 * `near(row, h)` rows finite but possibly for column d0, the NaN key's NaN element (in the backward, a masked key's
 * zero weight times NaN is NaN in a tile's product); every other row finite.
 */
function expectNanIn(what: string, x: Float32Array, rows: number, heads: number, D: number, d0: number,
  nan: (row: number, h: number) => boolean, near: (row: number, h: number) => boolean = () => false): void {
  let nanRows = 0;
  for (let r = 0; r < rows; r++) {
    for (let h = 0; h < heads; h++) {
      const xr = x.subarray((r * heads + h) * D, (r * heads + h + 1) * D);
      if (nan(r, h)) {
        nanRows++;
        expect(xr.every(Number.isNaN), `${what}: row ${r} head ${h} all NaN`).toBe(true);
      } else if (near(r, h)) {
        expect(xr.every((y, d) => d === d0 || Number.isFinite(y)), `${what}: row ${r} head ${h} finite but for column ${d0}`).toBe(true);
      } else {
        expect(xr.every(Number.isFinite), `${what}: row ${r} head ${h} finite`).toBe(true);
      }
    }
  }
  expect(nanRows, `${what}: some rows NaN`).toBeGreaterThan(0);
}

/** Checks out [rows, H, D] (row-major) and lse (lse(h, row)) against `sees(row, h)`: NaN exactly where it sees the key. */
function expectNanRows(what: string, out: Float32Array, lse: Float32Array, rows: number, H: number, D: number,
  lseAt: (h: number, row: number) => number, sees: (row: number, h: number) => boolean): void {
  expectNanIn(`${what} out`, out, rows, H, D, -1, sees);
  for (let r = 0; r < rows; r++) {
    for (let h = 0; h < H; h++) {
      const l = lse[lseAt(h, r)];
      if (sees(r, h)) expect(Number.isNaN(l), `${what}: row ${r} head ${h} sees the NaN key: lse NaN, got ${l}`).toBe(true);
      else expect(Number.isFinite(l), `${what}: row ${r} head ${h} does not see it: lse finite, got ${l}`).toBe(true);
    }
  }
}

/**
 * flashAttention, [B, N, H, D], NaN in key j0 of batch 1, kv head 1. With `backward`, flashAttentionBackward too (both
 * deterministic settings): dq NaN in the rows that see the key, dk / dv NaN in all of batch 1's kv head 1 (its last
 * row sees every key and is NaN), every other gradient finite.
 */
export async function checkNanKeyDense(device: Device, dtype: DType, D: number, N: number, causal: boolean, seed: number,
  backward = false): Promise<void> {
  const rng = new Rng(seed);
  const B = 2, H = 4, Hkv = 2, g = H / Hkv;
  const j0 = rng.int(0, N - 1), d0 = rng.int(0, D - 1);
  const kd = rng.normals(B * N * Hkv * D);
  kd[((1 * N + j0) * Hkv + 1) * D + d0] = NaN;
  const q = await put(rng.normals(B * N * H * D), [B, N, H, D], device, dtype);
  const k = await put(kd, [B, N, Hkv, D], device, dtype);
  const v = await put(rng.normals(B * N * Hkv * D), [B, N, Hkv, D], device, dtype);
  const r = await flashAttention(q, k, v, { causal });
  const what = `dense ${dtype} D ${D} N ${N}${causal ? ' causal' : ''} (key ${j0})`;
  // rows of both batches as one list: row b * N + i
  const sees = (row: number, h: number) => Math.floor(row / N) === 1 && Math.floor(h / g) === 1 && (!causal || row % N >= j0);
  try {
    const out = await r.out.toFloat32Array(), lse = await r.lse.toFloat32Array();
    // lse [B, H, N]
    expectNanRows(what, out, lse, B * N, H, D, (h, row) => (Math.floor(row / N) * H + h) * N + (row % N), sees);
    if (!backward) return;
    const dout = await put(rng.normals(B * N * H * D), [B, N, H, D], device, dtype);
    try {
      for (const deterministic of [false, true]) {
        const gr = await flashAttentionBackward(dout, q, k, v, r.out, r.lse, { causal, deterministic });
        const w = `${what} backward${deterministic ? ' deterministic' : ''}`;
        const near = (row: number, h: number) => Math.floor(row / N) === 1 && Math.floor(h / g) === 1;
        expectNanIn(`${w} dq`, await gr.dq.toFloat32Array(), B * N, H, D, d0, sees, near);
        const held = (row: number, h: number) => Math.floor(row / N) === 1 && h === 1;
        expectNanIn(`${w} dk`, await gr.dk.toFloat32Array(), B * N, Hkv, D, d0, held);
        expectNanIn(`${w} dv`, await gr.dv.toFloat32Array(), B * N, Hkv, D, d0, held);
        disposeAll(gr.dq, gr.dk, gr.dv);
      }
    } finally {
      disposeAll(dout);
    }
  } finally {
    disposeAll(q, k, v, r.out, r.lse);
  }
}

/**
 * flashAttentionVarlen, three packed sequences, NaN in key j0 of the second, kv head 0. With `backward`,
 * flashAttentionVarlenBackward too (both deterministic settings): dq NaN in the rows that see the key, dk / dv NaN in
 * all of the second sequence's keys, every gradient of the other sequences finite.
 */
export async function checkNanKeyVarlen(device: Device, dtype: DType, D: number, lens: number[], seed: number,
  backward = false): Promise<void> {
  const rng = new Rng(seed);
  const H = 2, Hkv = 1;
  const cu = prefix(lens);
  const total = cu[lens.length];
  const j0 = rng.int(0, lens[1] - 1), d0 = rng.int(0, D - 1);
  const kd = rng.normals(total * Hkv * D);
  kd[(cu[1] + j0) * Hkv * D + d0] = NaN;
  const q = await put(rng.normals(total * H * D), [total, H, D], device, dtype);
  const k = await put(kd, [total, Hkv, D], device, dtype);
  const v = await put(rng.normals(total * Hkv * D), [total, Hkv, D], device, dtype);
  const cuT = await put(cu, [cu.length], device);
  const maxL = Math.max(...lens);
  const idx = { cuSeqlensQ: cuT, cuSeqlensK: cuT, maxSeqlenQ: maxL, maxSeqlenK: maxL, causal: true };
  const r = await flashAttentionVarlen(q, k, v, idx);
  const what = `varlen ${dtype} D ${D} [${lens}] (key ${j0} of sequence 1)`;
  const inSeq1 = (row: number) => row >= cu[1] && row < cu[2];
  const sees = (row: number) => inSeq1(row) && row >= cu[1] + j0;
  try {
    const out = await r.out.toFloat32Array(), lse = await r.lse.toFloat32Array();
    expectNanRows(what, out, lse, total, H, D, (h, row) => h * total + row, sees);
    if (!backward) return;
    const dout = await put(rng.normals(total * H * D), [total, H, D], device, dtype);
    try {
      for (const deterministic of [false, true]) {
        const gr = await flashAttentionVarlenBackward(dout, q, k, v, r.out, r.lse, { ...idx, deterministic });
        const w = `${what} backward${deterministic ? ' deterministic' : ''}`;
        expectNanIn(`${w} dq`, await gr.dq.toFloat32Array(), total, H, D, d0, sees, inSeq1);
        expectNanIn(`${w} dk`, await gr.dk.toFloat32Array(), total, Hkv, D, d0, inSeq1);
        expectNanIn(`${w} dv`, await gr.dv.toFloat32Array(), total, Hkv, D, d0, inSeq1);
        disposeAll(gr.dq, gr.dk, gr.dv);
      }
    } finally {
      disposeAll(dout);
    }
  } finally {
    disposeAll(q, k, v, cuT, r.out, r.lse);
  }
}

/**
 * pagedAttention on a shuffled page-`page` cache: sequences of `lens` cached tokens with `nq[b]`
 * queries each (1: decode), causal, GQA 4 / 1; a NaN in token t0 of sequence 1. Each numSplits of
 * `splits` in turn (0: automatic). Then the NaN rows through mergeAttention with a finite partial:
 * still NaN.
 */
export async function checkNanKeyPaged(device: Device, dtype: DType, D: number, page: number, lens: number[], nq: number[],
  splits: number[], seed: number): Promise<void> {
  const rng = new Rng(seed);
  const B = lens.length, H = 4, Hkv = 1;
  const maxPages = Math.max(...lens.map((n) => Math.ceil(n / page)));
  const pagesUsed = lens.reduce((a, n) => a + Math.ceil(n / page), 0);
  const table = shuffledPageTable(rng, lens, page, pagesUsed, maxPages);
  const t0 = rng.int(0, lens[1] - 1);
  const kc = rng.normals(pagesUsed * page * Hkv * D);
  kc[(table[maxPages + Math.floor(t0 / page)] * page + (t0 % page)) * Hkv * D + rng.int(0, D - 1)] = NaN;
  const cu = prefix(nq);
  const total = cu[B];
  const q = await put(rng.normals(total * H * D), [total, H, D], device, dtype);
  const k = await put(kc, [pagesUsed, page, Hkv, D], device, dtype);
  const v = await put(rng.normals(pagesUsed * page * Hkv * D), [pagesUsed, page, Hkv, D], device, dtype);
  const idx = { pageTable: await put(table, [B, maxPages], device), seqlensK: await put(Int32Array.from(lens), [B], device),
    cuSeqlensQ: await put(cu, [B + 1], device) };
  // query row r of sequence 1 sits at position lens[1] - nq[1] + (r - cu[1]) and sees keys up to it
  const sees = (row: number) => row >= cu[1] && row < cu[2] && lens[1] - nq[1] + (row - cu[1]) >= t0;
  try {
    for (const numSplits of splits) {
      const what = `paged ${dtype} D ${D} page ${page} lens [${lens}] nq [${nq}] numSplits ${numSplits} (token ${t0} of sequence 1)`;
      const r = await pagedAttention(q, k, v, { ...idx, maxSeqlenQ: Math.max(...nq), maxSeqlenK: Math.max(...lens), causal: true, numSplits });
      const out = await r.out.toFloat32Array(), lse = await r.lse.toFloat32Array();
      expectNanRows(what, out, lse, total, H, D, (h, row) => h * total + row, sees);
      // A merge with a finite partial keeps the NaN rows NaN (their lse is NaN, not the +inf of "no key").
      const other = await put(rng.normals(total * H * D), [total, H, D], device, dtype);
      const otherLse = await put(rng.normals(H * total), [H, total], device);
      const m = await mergeAttention([r.out, other], [r.lse, otherLse]);
      expectNanRows(`${what}, merged`, await m.out.toFloat32Array(), await m.lse.toFloat32Array(), total, H, D,
        (h, row) => h * total + row, sees);
      disposeAll(r.out, r.lse, other, otherLse, m.out, m.lse);
    }
  } finally {
    disposeAll(q, k, v, idx.pageTable, idx.seqlensK, idx.cuSeqlensQ);
  }
}
