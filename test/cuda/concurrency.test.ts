// Many overlapping CUDA calls from one process: 64 flashAttention calls with different inputs in
// flight at once (uploads, launches and downloads interleaved), every result checked against the
// float64 reference; and the JS thread stays responsive while the GPU works.
// Skipped (visibly) without a CUDA device; fails under FA_REQUIRE_GPU=1 when there is none.
import { expect, it } from 'vitest';
import { flashAttention } from '../../lib/index';
import { AttnCase, checkForwardCase } from '../helpers/harness';
import { Rng, describeGpu, disposeAll, randomTensor } from '../helpers/reference';
import { GPU_DS } from './shapes';

describeGpu('CUDA concurrency', () => {
  it('64 overlapping flashAttention calls with different inputs are all correct (Promise.all)', async () => {
    const rng = new Rng(6464);
    const cases: AttnCase[] = [];
    for (let i = 0; i < 64; i++) {
      const Hkv = rng.pick([1, 2, 4]);
      cases.push({
        seed: 64000 + i,
        B: rng.pick([1, 2]),
        Nq: rng.pick([1, 7, 64, 129, 300]),
        Nk: rng.pick([1, 31, 128, 257, 300]),
        H: Hkv * rng.pick([1, 2]),
        Hkv,
        D: rng.pick(GPU_DS),
        causal: rng.bool(),
        layout: rng.bool() ? 'bshd' : 'bhsd',
        dtype: (['float16', 'bfloat16', 'float32'] as const)[i % 3],
      });
    }
    const results = await Promise.allSettled(cases.map((c) => checkForwardCase(c, 'cuda')));
    const failures = results
      .map((r, i) => (r.status === 'rejected' ? `#${i}: ${String((r.reason as Error)?.message ?? r.reason).split('\n').slice(0, 3).join(' | ')}` : ''))
      .filter(Boolean);
    expect(failures).toEqual([]);
  });

  it('the same inputs in 32 concurrent calls give identical results', async () => {
    const rng = new Rng(3232);
    const host = [randomTensor(rng, [2, 500, 8, 128], 'float16'), randomTensor(rng, [2, 500, 2, 128], 'float16')];
    const [q, kv] = await Promise.all(host.map((h) => h.tensor.to('cuda')));
    const rs = await Promise.all(Array.from({ length: 32 }, () => flashAttention(q, kv, kv, { causal: true })));
    const first = (await rs[0].out.toTypedArray()) as Uint16Array;
    for (const r of rs) {
      const o = (await r.out.toTypedArray()) as Uint16Array;
      let diff = 0;
      for (let i = 0; i < o.length; i++) if (o[i] !== first[i]) diff++;
      expect(diff).toBe(0);
      disposeAll(r.out, r.lse);
    }
    disposeAll(q, kv, ...host.map((h) => h.tensor));
  });

  it('the JS thread keeps running while GPU work is in flight', async () => {
    const rng = new Rng(77);
    const host = randomTensor(rng, [4, 4096, 16, 128], 'float16');
    const q = await host.tensor.to('cuda');
    const kv = q;
    host.tensor.dispose();
    let immediates = 0;
    let stop = false;
    const spin = () => {
      immediates++;
      if (!stop) setImmediate(spin);
    };
    setImmediate(spin);
    // The calls are queued at once (stream-ordered); reading the last result waits for all eight
    // on the GPU, and the event loop keeps turning meanwhile.
    let settled = false;
    const p = Promise.all(Array.from({ length: 8 }, () => flashAttention(q, kv, kv)));
    void p.then(() => (settled = true));
    expect(settled).toBe(false);
    const rs = await p;
    const read = rs[7].out.toFloat32Array();
    let readDone = false;
    void read.then(() => (readDone = true));
    expect(readDone).toBe(false);
    expect((await read).length).toBe(4 * 4096 * 16 * 128);
    stop = true;
    expect(immediates).toBeGreaterThan(1);
    for (const r of rs) disposeAll(r.out, r.lse);
    disposeAll(q);
  });
});
