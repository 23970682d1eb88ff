// Int32Array index arrays queued many calls deep: the checks shared by index-stream.test.ts
// (FA_INDEX_STREAM=1: copies on the index stream into a ring of device slots, csrc/binding/context.h
// TakeIndexSlot; the default) and index-staged.test.ts (FA_INDEX_STREAM=0, the opt-out: the staged copy on the
// call's stream).
// Many more calls than there are slots are queued behind a long call, with no wait between them and
// different index arrays each, so that a slot rewritten while an earlier kernel still reads it would
// show: every result must equal, bit for bit, the same call made with device index tensors (which
// never take either path). A page table larger than a slot takes the staged copy in either mode.
// The context counts the uploads each path took (native memoryStats), so each test also checks
// that its calls went the way the mode says.
import { expect, it } from 'vitest';
import {
  Tensor, appendKV, flashAttention, flashAttentionVarlen, flashAttentionVarlenBackward, pagedAttention, synchronize,
} from '../../lib/index';
import { native } from '../../lib/native';
import { Rng, bytesEqual, describeGpu, randomTensor, rawBytes } from '../helpers/reference';

/** 'stream': FA_INDEX_STREAM=1 (index slots); 'staged': FA_INDEX_STREAM=0. */
export type IndexMode = 'stream' | 'staged';

// Host index uploads so far, by path.
function uploads(): { slot: number; staged: number } {
  const s = native.memoryStats(0);
  return { slot: s.indexSlotUploads, staged: s.indexStagedUploads };
}
// Expects `calls` uploads since `before`: `inSlot` of them through a slot when the mode is 'stream'.
function expectUploads(mode: IndexMode, before: { slot: number; staged: number }, calls: number, inSlot: number): void {
  const now = uploads();
  const slot = now.slot - before.slot, staged = now.staged - before.staged;
  expect({ slot, staged }).toEqual(mode === 'stream' ? { slot: inSlot, staged: calls - inSlot } : { slot: 0, staged: calls });
}

async function dev(t: Tensor): Promise<Tensor> {
  const d = await t.to('cuda');
  t.dispose();
  return d;
}
const devIndex = (a: Int32Array) => Tensor.from(a, [a.length]).to('cuda');
// Packed q, k, v of T tokens on the GPU.
async function packedQkv(rng: Rng, T: number, H: number, Hkv: number, D: number, dtype: 'float16' | 'bfloat16') {
  return {
    q: await dev(randomTensor(rng, [T, H, D], dtype).tensor),
    k: await dev(randomTensor(rng, [T, Hkv, D], dtype).tensor),
    v: await dev(randomTensor(rng, [T, Hkv, D], dtype).tensor),
  };
}

// `parts` sequence lengths summing to `total` (each >= 1), drawn from rng.
function split(rng: Rng, total: number, parts: number): number[] {
  const cuts = new Set<number>();
  while (cuts.size < parts - 1) cuts.add(rng.int(1, total - 1));
  const c = [0, ...[...cuts].sort((a, b) => a - b), total];
  return c.slice(1).map((x, i) => x - c[i]);
}
const prefix = (lens: number[]) => Int32Array.from({ length: lens.length + 1 }, (_, i) => lens.slice(0, i).reduce((a, b) => a + b, 0));

// A long call queued first, so that the calls after it pile up behind it on the stream while their
// index copies (on the index stream) run ahead: the ninth call's copy must wait for the first call's
// kernels, which run only after this one (without the slots' `done` waits it would overwrite the
// first call's indices before they are read).
// About 4 ms on an H200, so that tens of calls queue behind it.
async function blocker(): Promise<void> {
  const x = await Tensor.zeros([4, 8192, 16, 128], { dtype: 'float16', device: 'cuda' });
  const r = await flashAttention(x, x, x);
  for (const t of [x, r.out, r.lse]) t.dispose();  // (safe while queued work still uses them)
}

// Pages 0..n-1 in a random order (a page table over every page).
function shuffledTable(rng: Rng, n: number): Int32Array {
  const perm = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) { const j = rng.int(0, i); [perm[i], perm[j]] = [perm[j], perm[i]]; }
  return Int32Array.from(perm);
}

// One paged chain run twice on two caches that start equal, behind the blocker, with no wait between
// calls: first with Int32Array index arrays, then with device index tensors. Each step appends its
// k / v (`fresh[b]` tokens of sequence b after `before[b]` in the cache) and runs pagedAttention on
// its q over the cache so far. The host side must take two uploads per step (by the mode's path), and
// every output and both caches must agree bit for bit.
interface PagedStep { fresh: number[]; before: number[]; k: Tensor; v: Tensor; q: Tensor }
async function pagedChainBothWays(mode: IndexMode, table: Int32Array, caches: Tensor[][], steps: PagedStep[],
  opts: { causal?: boolean; rotary?: { cos: Tensor; sin: Tensor; interleaved: boolean } } = {}): Promise<void> {
  const rot = opts.rotary ? { rotary: opts.rotary } : {};
  const mask = opts.causal ? { causal: true } : {};
  const outs: Uint8Array[][] = [[], []];
  for (const side of [0, 1]) {
    const [kc, vc] = caches[side];
    const res = [];
    const before = uploads();
    await blocker();
    for (const st of steps) {
      const cuNew = prefix(st.fresh);
      const lensBefore = Int32Array.from(st.before);
      const lensAfter = Int32Array.from(st.before, (n, b) => n + st.fresh[b]);
      if (side === 0) {
        await appendKV(kc, vc, st.k, st.v, { pageTable: table, cuSeqlensNew: cuNew, seqlensBefore: lensBefore, ...rot });
        res.push(await pagedAttention(st.q, kc, vc, { pageTable: table, seqlensK: lensAfter, cuSeqlensQ: cuNew, ...mask, ...rot }));
      } else {
        const idx = await Promise.all([devIndex(table), devIndex(cuNew), devIndex(lensBefore), devIndex(lensAfter)]);
        const [pt, cu, sb, sk] = idx;
        await appendKV(kc, vc, st.k, st.v, { pageTable: pt, cuSeqlensNew: cu, seqlensBefore: sb, ...rot });
        res.push(await pagedAttention(st.q, kc, vc, {
          pageTable: pt, seqlensK: sk, cuSeqlensQ: cu, ...mask, ...rot,
          maxSeqlenQ: Math.max(...st.fresh), maxSeqlenK: Math.max(...lensAfter),
        }));
        idx.forEach((t) => t.dispose());
      }
    }
    // (the host side: two calls per step, each with its own upload)
    if (side === 0) expectUploads(mode, before, 2 * steps.length, 2 * steps.length);
    await synchronize();
    for (const r of res) { outs[side].push(await rawBytes(r.out)); r.out.dispose(); r.lse.dispose(); }
  }
  for (let i = 0; i < steps.length; i++) expect(bytesEqual(outs[0][i], outs[1][i]), `step ${i}`).toBe(true);
  expect(bytesEqual(await rawBytes(caches[0][0]), await rawBytes(caches[1][0]))).toBe(true);
  expect(bytesEqual(await rawBytes(caches[0][1]), await rawBytes(caches[1][1]))).toBe(true);
}

export function indexArrayTests(title: string, mode: IndexMode): void {
  describeGpu(title, () => {
    it('40 packed calls queued back to back, each with its own cuSeqlens, equal the device-index calls bit for bit', async () => {
      const rng = new Rng(7001);
      const T = 900, H = 4, Hkv = 2, D = 64;
      const { q, k, v } = await packedQkv(rng, T, H, Hkv, D, 'float16');
      const cus = Array.from({ length: 40 }, () => prefix(split(rng, T, rng.int(2, 12))));
      // One call first, so that the slots' set-up (a stream, device buffers, events) and the first
      // staging buffer are not what the blocker's time is spent on.
      const warm = await flashAttentionVarlen(q, k, v, { cuSeqlensQ: cus[0], cuSeqlensK: cus[0], causal: true });
      await synchronize();
      warm.out.dispose();
      warm.lse.dispose();
      const before = uploads();
      const host = [];
      await blocker();
      for (const cu of cus) host.push(await flashAttentionVarlen(q, k, v, { cuSeqlensQ: cu, cuSeqlensK: cu, causal: true }));
      expectUploads(mode, before, cus.length, cus.length);
      // (the maximum lengths as the host path works them out: they choose the kernel and the grid)
      const ref = [];
      for (const cu of cus) {
        const t = await devIndex(cu);
        const maxL = Math.max(...Array.from({ length: cu.length - 1 }, (_, b) => cu[b + 1] - cu[b]));
        ref.push(await flashAttentionVarlen(q, k, v, { cuSeqlensQ: t, cuSeqlensK: t, causal: true, maxSeqlenQ: maxL, maxSeqlenK: maxL }));
        t.dispose();
      }
      await synchronize();
      for (let i = 0; i < cus.length; i++) {
        expect(bytesEqual(await rawBytes(host[i].out), await rawBytes(ref[i].out)), `call ${i}`).toBe(true);
        expect(bytesEqual(await rawBytes(host[i].lse), await rawBytes(ref[i].lse)), `call ${i} lse`).toBe(true);
      }
      for (const r of [...host, ...ref]) { r.out.dispose(); r.lse.dispose(); }
      for (const t of [q, k, v]) t.dispose();
    });

    it('appendKV and pagedAttention chained with Int32Array indices (24 steps, no wait) give the same cache and outputs as with device indices', async () => {
      const rng = new Rng(7002);
      const B = 3, H = 8, Hkv = 2, D = 128, page = 16, maxLen = 320;
      const maxPages = maxLen / page, numPages = B * maxPages;
      const table = shuffledTable(rng, numPages);
      const zeros = () => Tensor.zeros([numPages, page, Hkv, D], { dtype: 'float16', device: 'cuda' });
      // Rotary on the keys written and the queries (its kernels read the index arrays too).
      const half = D / 4;  // partial rotary: the first D / 2 features
      const cos = await Tensor.from(Float32Array.from({ length: maxLen * half }, (_, i) => Math.cos(i * 0.37)), [maxLen, half]).to('cuda');
      const sin = await Tensor.from(Float32Array.from({ length: maxLen * half }, (_, i) => Math.sin(i * 0.37)), [maxLen, half]).to('cuda');
      const rotary = { cos, sin, interleaved: true };
      const caches = [[await zeros(), await zeros()], [await zeros(), await zeros()]];
      // The steps: each appends 1..12 tokens per sequence and queries them (prefill chunks and decode).
      const steps: PagedStep[] = [];
      const lens = [0, 0, 0];
      for (let s = 0; s < 24; s++) {
        const fresh = lens.map((n) => Math.min(maxLen - n, rng.int(1, 12)));
        const total = fresh.reduce((a, b) => a + b, 0);
        steps.push({
          fresh, before: [...lens],
          k: await dev(randomTensor(rng, [total, Hkv, D], 'float16').tensor),
          v: await dev(randomTensor(rng, [total, Hkv, D], 'float16').tensor),
          q: await dev(randomTensor(rng, [total, H, D], 'float16').tensor),
        });
        fresh.forEach((f, b) => { lens[b] += f; });
      }
      await pagedChainBothWays(mode, table, caches, steps, { causal: true, rotary });
      for (const st of steps) for (const t of [st.k, st.v, st.q]) t.dispose();
      for (const c of caches) for (const t of c) t.dispose();
      cos.dispose();
      sin.dispose();
    });

    it('64 decode steps (appendKV of one token per sequence, then pagedAttention) with Int32Array indices, queued back to back, equal the device-index calls bit for bit', async () => {
      // The decode kernel and appendKV, each with its own small host index arrays per call, many calls
      // deep (the serving loop's shape), through each path.
      const rng = new Rng(7005);
      const B = 5, H = 16, Hkv = 4, D = 128, page = 16, maxLen = 200;
      const maxPages = Math.ceil(maxLen / page), numPages = B * maxPages;
      const table = shuffledTable(rng, numPages);
      const start = Array.from({ length: B }, () => rng.int(0, 120));
      const steps = 64;
      const caches = [];
      for (let side = 0; side < 2; side++) {
        // the same random prefix in both caches
        const r2 = new Rng(7006);
        caches.push([await dev(randomTensor(r2, [numPages, page, Hkv, D], 'bfloat16').tensor),
          await dev(randomTensor(r2, [numPages, page, Hkv, D], 'bfloat16').tensor)]);
      }
      const toks: PagedStep[] = [];
      for (let s = 0; s < steps; s++) {
        toks.push({
          fresh: Array(B).fill(1), before: start.map((n) => n + s),
          k: await dev(randomTensor(rng, [B, Hkv, D], 'bfloat16').tensor),
          v: await dev(randomTensor(rng, [B, Hkv, D], 'bfloat16').tensor),
          q: await dev(randomTensor(rng, [B, H, D], 'bfloat16').tensor),
        });
      }
      await pagedChainBothWays(mode, table, caches, toks);
      for (const t of toks) for (const x of [t.k, t.v, t.q]) x.dispose();
      for (const c of caches) for (const t of c) t.dispose();
    });

    it('paged calls with page tables of 0.5 MiB (a slot) and 1.03 MiB (larger than a slot: the staged copy) in turns, queued back to back, equal the device-index calls bit for bit', async () => {
      const rng = new Rng(7003);
      const B = 64, H = 4, Hkv = 1, D = 64, page = 4, numPages = 2000;
      // 64 x 2000 entries: 0.49 MiB with the other arrays; 64 x 4200: 1.03 MiB.
      const pagesOf = (i: number) => (i % 2 === 0 ? 2000 : 4200);
      const kc = await dev(randomTensor(rng, [numPages, page, Hkv, D], 'float16').tensor);
      const vc = await dev(randomTensor(rng, [numPages, page, Hkv, D], 'float16').tensor);
      const calls = Array.from({ length: 12 }, (_, i) => {
        const maxPages = pagesOf(i);
        const table = Int32Array.from({ length: B * maxPages }, () => rng.int(0, numPages - 1));
        const fresh = Array.from({ length: B }, () => rng.int(1, 3));
        const sk = Int32Array.from(fresh, (f) => f + rng.int(0, 300));
        return { table, maxPages, cu: prefix(fresh), sk, maxQ: Math.max(...fresh), maxK: Math.max(...sk) };
      });
      const qs = [];
      for (const c of calls) qs.push(await dev(randomTensor(rng, [c.cu[B], H, D], 'float16').tensor));
      const host = [];
      const before = uploads();
      await blocker();
      for (const [i, c] of calls.entries()) {
        host.push(await pagedAttention(qs[i], kc, vc, { pageTable: c.table, seqlensK: c.sk, cuSeqlensQ: c.cu, causal: true }));
      }
      expectUploads(mode, before, calls.length, calls.length / 2);
      const ref = [];
      for (const [i, c] of calls.entries()) {
        const pt = await Tensor.from(c.table, [B, c.maxPages]).to('cuda');
        const idx = await Promise.all([devIndex(c.cu), devIndex(c.sk)]);
        ref.push(await pagedAttention(qs[i], kc, vc, { pageTable: pt, seqlensK: idx[1], cuSeqlensQ: idx[0], causal: true, maxSeqlenQ: c.maxQ, maxSeqlenK: c.maxK }));
        for (const t of [pt, ...idx]) t.dispose();
      }
      await synchronize();
      for (let i = 0; i < calls.length; i++) {
        expect(bytesEqual(await rawBytes(host[i].out), await rawBytes(ref[i].out)), `call ${i}`).toBe(true);
        expect(bytesEqual(await rawBytes(host[i].lse), await rawBytes(ref[i].lse)), `call ${i} lse`).toBe(true);
      }
      for (const r of [...host, ...ref]) { r.out.dispose(); r.lse.dispose(); }
      for (const t of [kc, vc, ...qs]) t.dispose();
    });

    it('16 deterministic packed backward calls queued back to back, each with its own cuSeqlens, equal the device-index calls bit for bit', async () => {
      const rng = new Rng(7004);
      const T = 700, H = 4, Hkv = 2, D = 64;
      const { q, k, v } = await packedQkv(rng, T, H, Hkv, D, 'bfloat16');
      const dout = await dev(randomTensor(rng, [T, H, D], 'bfloat16').tensor);
      const cases = [];
      for (let i = 0; i < 16; i++) {
        const cu = prefix(split(rng, T, rng.int(2, 9)));
        const t = await devIndex(cu);
        const maxL = Math.max(...Array.from({ length: cu.length - 1 }, (_, b) => cu[b + 1] - cu[b]));
        const idx = { cuSeqlensQ: t, cuSeqlensK: t, maxSeqlenQ: maxL, maxSeqlenK: maxL };
        const fwd = await flashAttentionVarlen(q, k, v, { ...idx, causal: true });
        cases.push({ cu, t, idx, fwd });
      }
      await synchronize();
      const before = uploads();
      const host = [];
      await blocker();
      for (const c of cases) {
        host.push(await flashAttentionVarlenBackward(dout, q, k, v, c.fwd.out, c.fwd.lse,
          { cuSeqlensQ: c.cu, cuSeqlensK: c.cu, causal: true, deterministic: true }));
      }
      expectUploads(mode, before, cases.length, cases.length);
      const ref = [];
      for (const c of cases) {
        ref.push(await flashAttentionVarlenBackward(dout, q, k, v, c.fwd.out, c.fwd.lse, { ...c.idx, causal: true, deterministic: true }));
      }
      await synchronize();
      for (let i = 0; i < cases.length; i++) {
        for (const g of ['dq', 'dk', 'dv'] as const) {
          expect(bytesEqual(await rawBytes(host[i][g]), await rawBytes(ref[i][g])), `call ${i} ${g}`).toBe(true);
        }
      }
      for (const r of [...host, ...ref]) { r.dq.dispose(); r.dk.dispose(); r.dv.dispose(); }
      for (const c of cases) { c.t.dispose(); c.fwd.out.dispose(); c.fwd.lse.dispose(); }
      for (const t of [q, k, v, dout]) t.dispose();
    });
  });
}
