// CUDA: host index arrays belong to the caller again once a call has returned (they are staged at
// the call: overwriting them afterwards changes nothing), and an empty page table (maxPagesPerSeq 0,
// every seqlensK 0) is a valid table for both paged kernels (decode rows and prefill chunks).
// test/api/index-arrays.test.ts holds the same on the CPU backend, where a worker reads them later.
// Skipped (visibly) without a CUDA device; fails under FA_REQUIRE_GPU=1 when there is none.
import { it, expect } from 'vitest';
import { Tensor, appendKV, flashAttentionVarlen, pagedAttention } from '../../lib/index';
import { prefix } from '../helpers/inference';
import { Rng, bytesEqual, describeGpu, disposeAll, randomTensor, rawBytes } from '../helpers/reference';


describeGpu('CUDA: host index arrays overwritten after the call', () => {
  it('flashAttentionVarlen, appendKV and pagedAttention give the untouched arrays\' results', async () => {
    const rng = new Rng(9301);
    const H = 4, Hkv = 2, D = 128, page = 16;
    const lens = [700, 0, 313, 1035, 1];
    const total = lens.reduce((a, b) => a + b, 0);
    const [q, k, v] = await Promise.all([[total, H, D], [total, Hkv, D], [total, Hkv, D]].map(
      (s) => randomTensor(rng, s, 'float16').tensor.to('cuda')));
    const same = async (a: Tensor[], b: Tensor[], what: string) => {
      for (let i = 0; i < a.length; i++) {
        expect(bytesEqual(await rawBytes(a[i]), await rawBytes(b[i])), `${what}: output ${i}`).toBe(true);
      }
    };
    const ref = await flashAttentionVarlen(q, k, v, { causal: true, cuSeqlensQ: prefix(lens), cuSeqlensK: prefix(lens) });
    const o = { causal: true, cuSeqlensQ: prefix(lens), cuSeqlensK: prefix(lens) };
    const got = await flashAttentionVarlen(q, k, v, o);
    o.cuSeqlensQ.fill(0x3fffffff);
    o.cuSeqlensK.reverse();
    await same([got.out, got.lse], [ref.out, ref.lse], 'flashAttentionVarlen');

    const maxPages = Math.ceil(Math.max(...lens) / page);
    const numPages = lens.length * maxPages;
    const table = Int32Array.from({ length: numPages }, (_, i) => (i * 37) % numPages);
    const caches = await Promise.all([0, 1, 2, 3].map(() => Tensor.zeros([numPages, page, Hkv, D], { dtype: 'float16', device: 'cuda' })));
    await appendKV(caches[0], caches[1], k, v, { pageTable: table.slice(), cuSeqlensNew: prefix(lens), seqlensBefore: new Int32Array(lens.length) });
    const a = { pageTable: table.slice(), cuSeqlensNew: prefix(lens), seqlensBefore: new Int32Array(lens.length) };
    await appendKV(caches[2], caches[3], k, v, a);
    a.pageTable.fill(-5);
    a.cuSeqlensNew.reverse();
    a.seqlensBefore.fill(1 << 30);
    await same([caches[2], caches[3]], [caches[0], caches[1]], 'appendKV');

    const nq = [1, 0, 5, 64, 1];
    const qq = await randomTensor(rng, [nq.reduce((x, y) => x + y, 0), H, D], 'float16').tensor.to('cuda');
    const opts = () => ({ causal: true, pageTable: table.slice(), seqlensK: Int32Array.from(lens), cuSeqlensQ: prefix(nq) });
    const pref = await pagedAttention(qq, caches[0], caches[1], opts());
    const p = opts();
    const pgot = await pagedAttention(qq, caches[0], caches[1], p);
    p.pageTable.reverse();
    p.seqlensK.fill(0x7fffffff);
    p.cuSeqlensQ.fill(3);
    await same([pgot.out, pgot.lse], [pref.out, pref.lse], 'pagedAttention');
    disposeAll(q, k, v, ref.out, ref.lse, got.out, got.lse, ...caches, qq, pref.out, pref.lse, pgot.out, pgot.lse);
  });
});

describeGpu('CUDA: an empty page table (maxPagesPerSeq 0)', () => {
  for (const [what, nq] of [['decode rows', [1, 1, 1]], ['prefill chunks', [40, 0, 130]]] as Array<[string, number[]]>) {
    it(`pagedAttention, ${what}, every seqlensK 0: out 0, lse +Infinity (Int32Array and [B, 0] device tensor)`, async () => {
      const rng = new Rng(9302);
      const H = 4, Hkv = 2, D = 64;
      const totalQ = nq.reduce((a, b) => a + b, 0);
      const q = await randomTensor(rng, [totalQ, H, D], 'float16').tensor.to('cuda');
      const kc = await randomTensor(rng, [2, 16, Hkv, D], 'float16').tensor.to('cuda');
      const host = { pageTable: new Int32Array(0), seqlensK: new Int32Array(nq.length), cuSeqlensQ: prefix(nq) };
      const dev = {
        pageTable: await Tensor.from(new Int32Array(0), [nq.length, 0]).to('cuda'),
        seqlensK: await Tensor.from(host.seqlensK, [nq.length]).to('cuda'),
        cuSeqlensQ: await Tensor.from(host.cuSeqlensQ, [nq.length + 1]).to('cuda'),
        maxSeqlenQ: Math.max(...nq), maxSeqlenK: 0,
      };
      for (const idx of [host, dev]) {
        const r = await pagedAttention(q, kc, kc, { causal: true, ...idx });
        expect(Array.from(await r.out.toFloat32Array()).every((x) => x === 0), 'out is 0').toBe(true);
        expect(Array.from(await r.lse.toFloat32Array()).every((x) => x === Infinity), 'lse is +Infinity').toBe(true);
        disposeAll(r.out, r.lse);
      }
      disposeAll(q, kc, dev.pageTable, dev.seqlensK, dev.cuSeqlensQ);
    });
  }
});
