// Host index arrays (Int32Array cuSeqlens, seqlens, page tables) belong to the caller again as soon
// as a call returns: the CPU backend's worker reads its own copy, so a caller that reuses or
// overwrites its array while the call runs changes nothing (values changed to other valid ones are
// not picked up; values that would send the kernel out of bounds cannot crash the process). Also:
// an empty page table (maxPagesPerSeq 0) is a valid table; appendKV refuses one tensor as both
// caches; emptyCache('cpu') is a no-op as synchronize('cpu') is.
// Each call here is large enough to go to a libuv worker, and FA_CPU_INLINE=0 sends the small ones
// there too, so the caller's writes race the worker's reads as they would in a server.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Tensor, appendKV, emptyCache, flashAttentionVarlen, flashAttentionVarlenBackward, pagedAttention } from '../../lib/index';
import { prefix } from '../helpers/inference';
import { Rng, bytesEqual, disposeAll, randomTensor, rawBytes } from '../helpers/reference';

const saved = process.env.FA_CPU_INLINE;
beforeAll(() => { process.env.FA_CPU_INLINE = '0'; });
afterAll(() => {
  if (saved === undefined) delete process.env.FA_CPU_INLINE;
  else process.env.FA_CPU_INLINE = saved;
});

async function bytesOf(...ts: Tensor[]): Promise<Uint8Array[]> {
  return Promise.all(ts.map((t) => rawBytes(t)));
}

function expectSame(got: Uint8Array[], want: Uint8Array[], what: string) {
  expect(got.length).toBe(want.length);
  got.forEach((g, i) => expect(bytesEqual(g, want[i]), `${what}: output ${i} differs from the call on untouched arrays`).toBe(true));
}

// Overwrites: other valid values (a silent change of the problem), then values far out of range.
const scramblers: Array<[string, (a: Int32Array) => void]> = [
  ['reversed', (a) => a.reverse()],
  ['huge', (a) => a.fill(0x3fffffff)],
  ['negative', (a) => a.fill(-0x40000000)],
];

describe('host index arrays overwritten while a CPU call runs', () => {
  const rng = new Rng(9241);
  const H = 2, Hkv = 1, D = 32;
  const lens = [700, 0, 313, 1035];
  const total = lens.reduce((a, b) => a + b, 0);
  const cu = () => prefix(lens);
  const q = randomTensor(rng, [total, H, D], 'float16');
  const k = randomTensor(rng, [total, Hkv, D], 'float16');
  const v = randomTensor(rng, [total, Hkv, D], 'float16');
  afterAll(() => disposeAll(q.tensor, k.tensor, v.tensor));

  for (const [how, scramble] of scramblers) {
    it(`flashAttentionVarlen / its backward: cuSeqlens ${how} right after the call`, async () => {
      const opts = { causal: true, cuSeqlensQ: cu(), cuSeqlensK: cu() };
      const ref = await flashAttentionVarlen(q.tensor, k.tensor, v.tensor, { ...opts });
      const refG = await flashAttentionVarlenBackward(q.tensor, q.tensor, k.tensor, v.tensor, ref.out, ref.lse, { ...opts });
      const mine = { causal: true, cuSeqlensQ: cu(), cuSeqlensK: cu() };
      const p = flashAttentionVarlen(q.tensor, k.tensor, v.tensor, mine);
      scramble(mine.cuSeqlensQ);
      scramble(mine.cuSeqlensK);
      const got = await p;
      expectSame(await bytesOf(got.out, got.lse), await bytesOf(ref.out, ref.lse), 'forward');
      const mineB = { causal: true, cuSeqlensQ: cu(), cuSeqlensK: cu() };
      const pg = flashAttentionVarlenBackward(q.tensor, q.tensor, k.tensor, v.tensor, ref.out, ref.lse, mineB);
      scramble(mineB.cuSeqlensQ);
      scramble(mineB.cuSeqlensK);
      const g = await pg;
      expectSame(await bytesOf(g.dq, g.dk, g.dv), await bytesOf(refG.dq, refG.dk, refG.dv), 'backward');
      disposeAll(ref.out, ref.lse, refG.dq, refG.dk, refG.dv, got.out, got.lse, g.dq, g.dk, g.dv);
    });
  }

  const page = 16;
  const maxPages = Math.ceil(Math.max(...lens) / page);
  const numPages = lens.length * maxPages + 3;
  const table = () => {
    const order = Array.from({ length: numPages }, (_, i) => i);
    for (let i = numPages - 1; i > 0; i--) {
      const j = rng.int(0, i);
      [order[i], order[j]] = [order[j], order[i]];
    }
    return Int32Array.from({ length: lens.length * maxPages }, (_, i) => order[i]);
  };
  const t0 = table();

  for (const [how, scramble] of scramblers) {
    it(`appendKV then pagedAttention: pageTable, seqlens and cuSeqlens ${how} right after each call`, async () => {
      const zeros = () => Tensor.zeros([numPages, page, Hkv, D], { dtype: 'float16' });
      const [kc0, vc0, kc1, vc1] = await Promise.all([zeros(), zeros(), zeros(), zeros()]);
      const appendOpts = () => ({ pageTable: t0.slice(), cuSeqlensNew: cu(), seqlensBefore: new Int32Array(lens.length) });
      await appendKV(kc0, vc0, k.tensor, v.tensor, appendOpts());
      const mineA = appendOpts();
      const pa = appendKV(kc1, vc1, k.tensor, v.tensor, mineA);
      scramble(mineA.pageTable);
      scramble(mineA.cuSeqlensNew);
      scramble(mineA.seqlensBefore);
      await pa;
      expectSame(await bytesOf(kc1, vc1), await bytesOf(kc0, vc0), 'appendKV');
      // Decode rows and a prefill chunk in one call: the last 1, 0, 5, 64 tokens of each sequence query.
      const nq = [1, 0, 5, 64];
      const qTotal = nq.reduce((a, b) => a + b, 0);
      const qq = randomTensor(rng, [qTotal, H, D], 'float16');
      const pagedOpts = () => ({
        causal: true, pageTable: t0.slice(), seqlensK: Int32Array.from(lens),
        cuSeqlensQ: prefix(nq),
      });
      const ref = await pagedAttention(qq.tensor, kc0, vc0, pagedOpts());
      const mineP = pagedOpts();
      const pp = pagedAttention(qq.tensor, kc0, vc0, mineP);
      scramble(mineP.pageTable);
      scramble(mineP.seqlensK);
      scramble(mineP.cuSeqlensQ);
      const got = await pp;
      expectSame(await bytesOf(got.out, got.lse), await bytesOf(ref.out, ref.lse), 'pagedAttention');
      disposeAll(kc0, vc0, kc1, vc1, qq.tensor, ref.out, ref.lse, got.out, got.lse);
    });
  }
});

describe('an empty page table (maxPagesPerSeq 0) is a valid table', () => {
  it('pagedAttention with every seqlensK 0: out 0 and lse +Infinity, as Int32Array and as a [B, 0] tensor', async () => {
    const rng = new Rng(9242);
    const q = randomTensor(rng, [3, 2, 8], 'float32');
    const kc = Tensor.from(new Float32Array(2 * 4 * 1 * 8).fill(5), [2, 4, 1, 8]);
    const cuSeqlensQ = Int32Array.from([0, 2, 3]);
    const seqlensK = new Int32Array(2);
    for (const pageTable of [new Int32Array(0), Tensor.from(new Int32Array(0), [2, 0])]) {
      const r = await pagedAttention(q.tensor, kc, kc, { pageTable, seqlensK, cuSeqlensQ });
      expect(Array.from(await r.out.toFloat32Array())).toEqual(new Array(3 * 2 * 8).fill(0));
      expect(Array.from(await r.lse.toFloat32Array())).toEqual(new Array(2 * 3).fill(Infinity));
      disposeAll(r.out, r.lse, pageTable instanceof Tensor ? pageTable : null);
    }
    disposeAll(q.tensor, kc);
  });
});

describe('appendKV writes both caches: one tensor for both is refused', () => {
  it('kCache === vCache: TypeError naming vCache, nothing written', async () => {
    const kc = Tensor.from(new Float32Array(2 * 4 * 1 * 8).fill(3), [2, 4, 1, 8]);
    const k = Tensor.from(new Float32Array(8).fill(1), [1, 1, 8]);
    const before = await rawBytes(kc);
    const call = () => appendKV(kc, kc, k, k, { pageTable: Int32Array.from([0, 1]), cuSeqlensNew: Int32Array.from([0, 1]), seqlensBefore: Int32Array.from([0]) });
    await expect(call()).rejects.toThrow(TypeError);
    await expect(call()).rejects.toThrow(/appendKV: vCache must be a different tensor from kCache/);
    expect(bytesEqual(await rawBytes(kc), before)).toBe(true);
    disposeAll(kc, k);
  });
});

describe("emptyCache('cpu')", () => {
  it('resolves (the CPU backend pools nothing), as synchronize(\'cpu\') does', async () => {
    await expect(emptyCache('cpu')).resolves.toBeUndefined();
  });
});
