// CUDA: the masks and score modifiers in every forward and backward kernel (mma.sync, fp32, wgmma;
// atomic and deterministic backward), packed variable-length batches forward and backward (empty
// sequences, index arrays as Int32Array and as device tensors), the paged KV cache (appendKV with
// rotary, page sizes 1..512 in shuffled order, pagedAttention for decode with GQA packing and
// split-KV, prefill chunks, both mixed), and mergeAttention; against float64 references.
// Skipped (visibly) without a CUDA device; fails under FA_REQUIRE_GPU=1 when there is none.
import { it } from 'vitest';
import { caseName, checkBackwardCase, checkForwardCase } from '../helpers/harness';
import { checkMergeCase, checkPagedCase, checkVarlenCase, pagedName, varlenName, type PagedCase, type VarlenCase } from '../helpers/inference';
import { maskedDenseCases, mergeCases, pagedCases, varlenCases } from '../helpers/inference-cases';
import { describeGpu } from '../helpers/reference';

const DS = [8, 32, 64, 72, 128, 256];

describeGpu('CUDA: window and softcap (dense)', () => {
  for (const c of maskedDenseCases(8101, 60, { Ns: [1, 7, 64, 65, 127, 128, 129, 300, 511], Ds: DS, budget: 3e7, gpu: true })) {
    it(`forward ${caseName(c)}`, () => checkForwardCase(c, 'cuda'));
  }
  for (const c of maskedDenseCases(8102, 40, { Ns: [1, 7, 64, 65, 128, 129, 300], Ds: [8, 64, 96, 128, 256], budget: 1e7, gpu: true })) {
    it(`backward ${caseName(c)}`, () => checkBackwardCase(c, 'cuda'));
  }
});

describeGpu('CUDA: variable-length batches', () => {
  for (const c of varlenCases(8201, 30, { maxLen: 300, Ds: DS, maxB: 6, backward: false, gpu: true })) {
    it(`forward ${varlenName(c)}`, () => checkVarlenCase(c, 'cuda'));
  }
  for (const c of varlenCases(8202, 24, { maxLen: 200, Ds: [8, 64, 128, 256], maxB: 5, backward: true, gpu: true })) {
    it(`backward ${varlenName(c)}`, () => checkVarlenCase(c, 'cuda'));
  }
  // Batches whose longest sequence is last or in the middle, ties, empty sequences and more keys
  // than queries between them; host and device index arrays; 64 / 65 / 90 sequences. (The Hopper
  // kernel deals the sequences of a large call of 2..64 sequences longest first: the last case here;
  // test/cuda/deal-order.test.ts makes every call of 2..64 sequences do so.)
  const order: VarlenCase[] = [
    { seed: 40, lensQ: [3, 130, 0, 260, 700], lensK: [3, 130, 0, 260, 700], H: 4, Hkv: 2, D: 128, dtype: 'float16', causal: true },
    { seed: 41, lensQ: [200, 64, 640, 64, 1], lensK: [900, 64, 640, 64, 300], H: 6, Hkv: 3, D: 64, dtype: 'bfloat16', causal: true },
    { seed: 42, lensQ: [50, 400, 400, 0, 513], lensK: [50, 400, 400, 0, 513], H: 2, Hkv: 1, D: 256, dtype: 'float16', window: [100, 0] },
    { seed: 43, lensQ: [17, 300, 129, 600], lensK: [17, 300, 129, 600], H: 4, Hkv: 4, D: 96, dtype: 'bfloat16' },
    { seed: 40, lensQ: [3, 130, 0, 260, 700], lensK: [3, 130, 0, 260, 700], H: 4, Hkv: 2, D: 128, dtype: 'float16', causal: true, deviceIndex: true },
    ...[64, 65, 90].map((B, i): VarlenCase => {
      const lensQ = Array.from({ length: B }, (_, b) => (b % 11 === 3 ? 0 : ((b * 37 + 11 * i) % 190) + 1));
      return { seed: 44 + i, lensQ, lensK: lensQ.map((n, b) => (b % 5 === 0 ? n + (b % 7) * 13 : n)), H: 2, Hkv: 1, D: i === 1 ? 64 : 128,
        dtype: i === 2 ? 'bfloat16' : 'float16', causal: i !== 1, deviceIndex: i === 0 };
    }),
    // 12 sequences, one of 1100 tokens last, 12 heads: 9 row blocks x 12 x 12 tile indices, more
    // than eight per block of the grid on an H200 (132 SMs)
    { seed: 47, lensQ: [30, 50, 0, 70, 20, 9, 60, 5, 33, 1, 64, 1100], lensK: [30, 50, 0, 70, 20, 9, 60, 5, 33, 1, 64, 1100], H: 12, Hkv: 2, D: 128,
      dtype: 'float16', causal: true },
  ];
  for (const c of order) it(`forward, batch order: ${varlenName(c)}`, () => checkVarlenCase(c, 'cuda'));
  // Sequences whose last row tile holds 64 rows or fewer (the Hopper kernel's second warpgroup has
  // no row there and walks the tile without products), under a causal mask with no sequence past
  // 1024 tokens (D 64: the two-consumer kernel's packed instantiation) and beside longer ones (D 64
  // three consumers, D 128, D 256), more keys than queries in some.
  const idleWalk: VarlenCase[] = [
    { seed: 60, lensQ: [60, 130, 200, 1, 64, 65], lensK: [60, 130, 200, 1, 64, 65], H: 4, Hkv: 2, D: 64, dtype: 'float16', causal: true },
    { seed: 61, lensQ: [129, 20, 0, 1000], lensK: [300, 20, 0, 1000], H: 3, Hkv: 1, D: 64, dtype: 'bfloat16', causal: true, deviceIndex: true },
    { seed: 62, lensQ: [5, 33, 250], lensK: [5, 40, 250], H: 4, Hkv: 4, D: 64, dtype: 'float16', causal: true, window: [50, 0], softcap: 15 },
    { seed: 63, lensQ: [1100, 40, 200], lensK: [1100, 40, 200], H: 2, Hkv: 2, D: 64, dtype: 'bfloat16', causal: true },
    { seed: 64, lensQ: [140, 60, 130], lensK: [140, 60, 130], H: 4, Hkv: 2, D: 128, dtype: 'bfloat16', causal: true },
    { seed: 65, lensQ: [40, 300], lensK: [40, 300], H: 2, Hkv: 1, D: 256, dtype: 'float16' },
  ];
  for (const c of idleWalk) it(`forward, idle warpgroup: ${varlenName(c)}`, () => checkVarlenCase(c, 'cuda'));
  // The packed backward (on Hopper the cp.async kernel, whose dK / dV leave through K's and V's
  // shared-memory tiles in 16-byte row chunks): sequences ending inside a warp's 16 keys and inside
  // a key block, several key blocks, head dims below the tile (40 in 64, 96 in 128, 192 in the row
  // split's 256), more keys than queries, GQA, a window, a softcap, deterministic.
  const packedBwd: VarlenCase[] = [
    { seed: 70, lensQ: [300, 0, 129, 700], lensK: [300, 0, 129, 700], H: 4, Hkv: 2, D: 96, dtype: 'bfloat16', causal: true, backward: true },
    { seed: 71, lensQ: [17, 250, 77], lensK: [140, 250, 400], H: 2, Hkv: 1, D: 192, dtype: 'float16', backward: true },
    { seed: 72, lensQ: [513, 64, 3], lensK: [513, 64, 3], H: 3, Hkv: 3, D: 40, dtype: 'float16', causal: true, backward: true },
    { seed: 73, lensQ: [200, 450], lensK: [200, 450], H: 4, Hkv: 1, D: 128, dtype: 'float16', window: [90, 0], backward: true, deterministic: true },
    { seed: 74, lensQ: [129, 1, 380], lensK: [129, 1, 380], H: 2, Hkv: 2, D: 256, dtype: 'bfloat16', causal: true, softcap: 20, backward: true },
    { seed: 75, lensQ: [33, 0, 161], lensK: [33, 7, 161], H: 8, Hkv: 2, D: 64, dtype: 'bfloat16', backward: true },
  ];
  for (const c of packedBwd) it(`backward, packed epilogue: ${varlenName(c)}`, () => checkVarlenCase(c, 'cuda'));
});

describeGpu('CUDA: paged KV cache (appendKV + pagedAttention)', () => {
  for (const c of pagedCases(8301, 48, { maxBefore: 700, maxFresh: 90, Ds: [64, 128, 256, 8, 96], maxB: 5, gpu: true, pageSizes: [1, 3, 16, 64, 256] })) {
    it(pagedName(c), () => checkPagedCase(c, 'cuda'));
  }
  // GQA groups that are not powers of two: the decode kernel packs group x queries rows of a
  // sequence (up to 16) into one pass over its K / V; larger products go to the prefill kernel.
  for (const c of pagedCases(8304, 16, { maxBefore: 700, maxFresh: 6, Ds: [40, 64, 128], maxB: 5, gpu: true, pageSizes: [1, 16, 24], groups: [3, 5, 6, 7] })) {
    it(`odd group: ${pagedName(c)}`, () => checkPagedCase(c, 'cuda'));
  }
  // Long caches: the split-KV path with many splits, GQA 32/8 (one 16-row pass per kv head).
  const long: PagedCase[] = [
    { seed: 1, before: [6000], fresh: [1], pageSize: 16, H: 32, Hkv: 8, D: 128, dtype: 'float16' },
    { seed: 2, before: [5000, 17, 3000], fresh: [1, 1, 1], pageSize: 1, H: 32, Hkv: 8, D: 128, dtype: 'bfloat16', causal: true },
    { seed: 3, before: [4100, 900], fresh: [1, 40], pageSize: 16, H: 16, Hkv: 2, D: 64, dtype: 'float16', causal: true, window: [512, 0] },
    { seed: 4, before: [3000], fresh: [2], pageSize: 64, H: 8, Hkv: 8, D: 256, dtype: 'bfloat16', softcap: 30, scale: 0.5, numSplits: 9 },
    { seed: 5, before: [2500, 2600], fresh: [1, 1], pageSize: 16, H: 32, Hkv: 8, D: 128, dtype: 'float16', rotary: { dim: 128, interleaved: false }, deviceIndex: true },
    { seed: 6, before: [1500], fresh: [300], nq: [300], pageSize: 16, H: 8, Hkv: 2, D: 128, dtype: 'float32', causal: true },
    // 16 packed rows x 32 splits: more partial rows than the ring's shared memory holds, so the
    // split combine reads them from L2 instead of staging them (fwd_decode.cuh, split_combine);
    // beside it, 4 rows x 32 splits staged, with a sequence shorter than its split count.
    { seed: 7, before: [7000, 300], fresh: [1, 1], pageSize: 16, H: 32, Hkv: 2, D: 128, dtype: 'float16', numSplits: 32 },
    { seed: 8, before: [9000, 40], fresh: [1, 1], pageSize: 32, H: 16, Hkv: 4, D: 128, dtype: 'bfloat16', numSplits: 32, causal: true },
    // 16 sequences x 8 kv heads: on an H200 (132 SMs) the groups alone nearly fill the SMs, so the
    // decode runs in blocks of eight warps, one split (fwd_api.cu); sequence ends inside a tile, a
    // two-token sequence, a window and a softcap.
    { seed: 9, before: Array.from({ length: 16 }, (_, i) => 250 + 97 * i), fresh: Array.from({ length: 16 }, (_, i) => (i === 5 ? 2 : 1)),
      pageSize: 16, H: 32, Hkv: 8, D: 128, dtype: 'bfloat16', causal: true },
    { seed: 10, before: Array.from({ length: 16 }, (_, i) => 1200 - 61 * i), fresh: Array.from({ length: 16 }, () => 1),
      pageSize: 32, H: 32, Hkv: 8, D: 128, dtype: 'float16', window: [700, 0], softcap: 30 },
    // softcaps far above the scores (the decode kernel's tanh at fp32 accuracy where tanh_fast would cancel; see
    // forward.test.ts): split decode and a prefill chunk, lse held to the fp32 rule
    { seed: 11, before: [2000, 700], fresh: [1, 1], pageSize: 16, H: 32, Hkv: 8, D: 128, dtype: 'float16', softcap: 3e4,
      lseFp32Rule: true },
    { seed: 12, before: [300], fresh: [200], pageSize: 16, H: 8, Hkv: 2, D: 128, dtype: 'bfloat16', causal: true, softcap: 12000,
      lseFp32Rule: true },
  ];
  for (const c of long) it(`long: ${pagedName(c)}`, () => checkPagedCase(c, 'cuda'));
  // Prefill chunks of several query tiles and key blocks on the warp-specialised kernel (page sizes
  // that are multiples of 8: one K / V box per page or several per key block), sequence ends inside
  // a box (the NaN rows past the end of the last page), decode sequences mixed in. Head dims that
  // fill their tile (128, 256: K and V in one box per page, every column block of 8 rows after
  // another) and that do not (40, 96, 200: a box per page and column block, zeros past the head dim).
  const cost = (c: PagedCase) => c.H * c.D * c.before.reduce((acc, x, b) => acc + (c.nq ?? c.fresh)[b] * (x + c.fresh[b]), 0);
  const prefill = pagedCases(8303, 800, { maxBefore: 700, maxFresh: 420, Ds: [40, 64, 96, 128, 200, 256], maxB: 4, gpu: true, pageSizes: [8, 16, 24, 32, 48, 128, 256, 512] })
    .filter((c) => c.dtype !== 'float32' && Math.max(...c.fresh) > 130 && cost(c) < 2e8).slice(0, 36);
  for (const c of prefill) it(`prefill: ${pagedName(c)}`, () => checkPagedCase(c, 'cuda'));
  // Prefill sequences whose last row block holds 64 rows or fewer (the second consumer warpgroup
  // then has no row and walks the tile without products, taking its share of the V-tail zeros),
  // some ending inside a page (the NaN rows past the end): 1-4 key blocks per tile, both masks,
  // head dims 64 / 128 / 256, pages in random order.
  const idleWalk: PagedCase[] = [
    { seed: 70, before: [37, 300, 0, 5], fresh: [60, 130, 190, 17], pageSize: 16, H: 8, Hkv: 2, D: 128, dtype: 'float16', causal: true },
    { seed: 71, before: [200, 0, 91], fresh: [64, 129, 250], pageSize: 8, H: 4, Hkv: 4, D: 128, dtype: 'bfloat16' },
    { seed: 72, before: [11, 400], fresh: [40, 190], pageSize: 64, H: 4, Hkv: 2, D: 256, dtype: 'float16', causal: true },
    { seed: 73, before: [0, 130, 60], fresh: [65, 20, 130], pageSize: 32, H: 4, Hkv: 1, D: 256, dtype: 'bfloat16', window: [100, 0] },
    { seed: 74, before: [300, 7], fresh: [200, 390], pageSize: 16, H: 8, Hkv: 2, D: 64, dtype: 'float16' },
    { seed: 75, before: [0, 250], fresh: [320, 60], pageSize: 24, H: 6, Hkv: 3, D: 64, dtype: 'bfloat16', causal: true, softcap: 20 },
    // (a query count past 1024 under a causal mask: D 64 on three consumers)
    { seed: 78, before: [0, 30], fresh: [1100, 40], pageSize: 16, H: 2, Hkv: 1, D: 64, dtype: 'float16', causal: true },
    { seed: 76, before: [0, 50, 300], fresh: [60, 130, 200], pageSize: 16, H: 4, Hkv: 2, D: 64, dtype: 'float16', causal: true },
    { seed: 77, before: [9, 0, 400], fresh: [20, 190, 129], pageSize: 8, H: 8, Hkv: 2, D: 64, dtype: 'bfloat16', causal: true, window: [150, 0] },
  ];
  for (const c of idleWalk) it(`prefill, idle warpgroup: ${pagedName(c)}`, () => checkPagedCase(c, 'cuda'));
  // Host index arrays give the fewest queries of a non-empty sequence: where every such sequence
  // packs more rows (queries x GQA group) than the decode kernel takes (16), the prefill kernel
  // alone runs and takes them all; at 16 rows both kernels run. Empty sequences beside them; the
  // same calls with device index arrays (both kernels launched, the decode one finding nothing).
  const bounds: PagedCase[] = [
    { seed: 30, before: [100, 0, 50], fresh: [3, 0, 5], pageSize: 16, H: 16, Hkv: 2, D: 128, dtype: 'float16', causal: true },
    { seed: 30, before: [100, 0, 50], fresh: [3, 0, 5], pageSize: 16, H: 16, Hkv: 2, D: 128, dtype: 'float16', causal: true, deviceIndex: true },
    { seed: 31, before: [100, 60, 7], fresh: [2, 9, 0], pageSize: 16, H: 16, Hkv: 2, D: 128, dtype: 'bfloat16' },
    { seed: 32, before: [0, 33, 250], fresh: [0, 17, 40], pageSize: 8, H: 8, Hkv: 8, D: 96, dtype: 'float16', causal: true },
    { seed: 33, before: [20, 500], fresh: [5, 1], nq: [5, 3], pageSize: 1, H: 12, Hkv: 3, D: 64, dtype: 'bfloat16', window: [64, 0] },
  ];
  for (const c of bounds) it(`decode / prefill bound: ${pagedName(c)}`, () => checkPagedCase(c, 'cuda'));
  // Prefill with the longest cache last or in the middle, decode sequences and an empty one between
  // them.
  const batchOrder: PagedCase[] = [
    { seed: 50, before: [0, 40, 300, 900], fresh: [200, 1, 150, 260], pageSize: 16, H: 8, Hkv: 2, D: 128, dtype: 'float16', causal: true },
    { seed: 51, before: [10, 700, 0, 64], fresh: [140, 300, 0, 2], pageSize: 64, H: 4, Hkv: 4, D: 256, dtype: 'bfloat16', causal: true },
    { seed: 52, before: [5, 5, 500], fresh: [180, 180, 140], pageSize: 8, H: 6, Hkv: 2, D: 64, dtype: 'float16', window: [200, 0] },
    // 64 sequences (the most the kernel orders) and 70 (batch order): prefill chunks, decode tokens
    // and empty sequences mixed.
    ...[64, 70].map((B, i): PagedCase => ({
      seed: 53 + i, before: Array.from({ length: B }, (_, b) => (b * 53) % 400), fresh: Array.from({ length: B }, (_, b) => (b % 9 === 4 ? 0 : b % 3 === 0 ? 1 : ((b * 29) % 170) + 2)),
      pageSize: i === 0 ? 16 : 32, H: 4, Hkv: 2, D: 128, dtype: i === 0 ? 'float16' : 'bfloat16', causal: true, deviceIndex: i === 1,
    })),
  ];
  for (const c of batchOrder) it(`prefill, batch order: ${pagedName(c)}`, () => checkPagedCase(c, 'cuda'));
  // Split-KV calls of different split counts queued together on the stream: the last block of each
  // (sequence, kv head) combines and resets its counter for the next call.
  it('split-KV calls queued together (split counters reset by each call)', () => Promise.all([3, 7, 32, 1, 12, 2].map((numSplits, i) =>
    checkPagedCase({ seed: 20 + i, before: [2000, 1500 + 100 * i, 64 * i], fresh: [1, 1, 1], pageSize: 16 * (1 + (i % 2)), H: 16, Hkv: 4, D: 128,
      dtype: i % 3 === 2 ? 'bfloat16' : 'float16', numSplits, causal: i % 2 === 0 }, 'cuda'))));
});

describeGpu('CUDA: mergeAttention', () => {
  for (const c of mergeCases(8401, 12, { Ds: [8, 64, 128], maxParts: 6 })) {
    it(`${c.dtype} parts=${c.parts} B${c.B} N${c.N} H${c.H} D${c.D} ${c.packed ? 'packed' : 'dense'}`, () => checkMergeCase(c, 'cuda'));
  }
  it('float16, 40 parts (more than one combine launch)', () => checkMergeCase({ seed: 9, parts: 40, B: 1, N: 33, H: 3, D: 64, dtype: 'float16', packed: true }, 'cuda'));
});
