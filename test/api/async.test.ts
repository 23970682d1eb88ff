// Every API call returns a Promise and the work runs off the JS thread: timers and immediates keep
// firing while a CPU attention runs (calls of a few microseconds of work run on the calling thread). No timing thresholds on the attention itself: the checks count
// event-loop callbacks that ran before the Promise settled. Also: concurrent calls, inputs disposed
// while a call is in flight, and the shape of buildInfo() / devices().
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { Tensor, buildInfo, devices, flashAttention, flashAttentionBackward } from '../../lib/index';
import { AttnCase, checkBackwardCase, checkForwardCase } from '../helpers/harness';
import { AttnDims, Rng, defaultScale, disposeAll, randomTensor, refForward, relL2, rowOffset, toF64 } from '../helpers/reference';

interface LoopCounts {
  intervals: number;
  immediates: number;
  timeouts: number;
}

/**
 * Starts a setInterval(5 ms), a self-rescheduling setImmediate and a self-rescheduling
 * setTimeout(0); returns a function that stops them and reports how often each ran.
 */
function watchEventLoop(): () => LoopCounts {
  const c: LoopCounts = { intervals: 0, immediates: 0, timeouts: 0 };
  let stopped = false;
  const iv = setInterval(() => c.intervals++, 5);
  const imm = () => {
    c.immediates++;
    if (!stopped) setImmediate(imm);
  };
  const tmo = () => {
    c.timeouts++;
    if (!stopped) setTimeout(tmo, 0);
  };
  setImmediate(imm);
  setTimeout(tmo, 0);
  return () => {
    stopped = true;
    clearInterval(iv);
    return { ...c };
  };
}

/** float64 reference of a few rows only (cheap even for long sequences). */
function refRows(q: Float64Array, k: Float64Array, v: Float64Array, d: AttnDims, rows: Array<[number, number, number]>): Float64Array[] {
  return rows.map(([b, h, i]) => {
    const hk = Math.floor(h / (d.H / d.Hkv));
    const last = d.causal ? Math.min(d.Nk - 1, i + d.Nk - d.Nq) : d.Nk - 1;
    const out = new Float64Array(d.D);
    if (last < 0) return out;
    const qo = rowOffset(d.layout, b, i, h, d.Nq, d.H, d.D);
    const s = new Float64Array(last + 1);
    let m = -Infinity;
    for (let j = 0; j <= last; j++) {
      const ko = rowOffset(d.layout, b, j, hk, d.Nk, d.Hkv, d.D);
      let dot = 0;
      for (let x = 0; x < d.D; x++) dot += q[qo + x] * k[ko + x];
      s[j] = dot * d.scale;
      m = Math.max(m, s[j]);
    }
    let l = 0;
    for (let j = 0; j <= last; j++) l += s[j] = Math.exp(s[j] - m);
    for (let j = 0; j <= last; j++) {
      const vo = rowOffset(d.layout, b, j, hk, d.Nk, d.Hkv, d.D);
      for (let x = 0; x < d.D; x++) out[x] += (s[j] / l) * v[vo + x];
    }
    return out;
  });
}

describe('event loop stays responsive during CPU attention', () => {
  it('forward (B=1, H=8, N=2048, D=64, float32): a Promise comes back at once and timers run while it works', async () => {
    const d: AttnDims = { B: 1, Nq: 2048, Nk: 2048, H: 8, Hkv: 8, D: 64, causal: false, scale: defaultScale(64), layout: 'bshd' };
    const rng = new Rng(2048);
    const q = randomTensor(rng, [1, 2048, 8, 64], 'float32');
    const k = randomTensor(rng, [1, 2048, 8, 64], 'float32');
    const v = randomTensor(rng, [1, 2048, 8, 64], 'float32');
    const stop = watchEventLoop();
    let settled = false;
    // One worker thread: long enough for timers to fire on a many-core machine too (16 cores finish
    // the call in ~5 ms, inside one setInterval(5) period).
    const p = flashAttention(q.tensor, k.tensor, v.tensor, { cpu: { threads: 1 } });
    expect(p).toBeInstanceOf(Promise);
    void p.then(
      () => (settled = true),
      () => (settled = true),
    );
    expect(settled).toBe(false);
    const r = await p;
    const counts = stop();
    expect(counts.intervals, `setInterval(5) ran ${counts.intervals} times before the result`).toBeGreaterThan(1);
    expect(counts.immediates, `setImmediate ran ${counts.immediates} times before the result`).toBeGreaterThan(1);
    expect(counts.timeouts, `setTimeout(0) ran ${counts.timeouts} times before the result`).toBeGreaterThan(1);
    // and the answer is right (sampled rows)
    const out = await toF64(r.out);
    const rows: Array<[number, number, number]> = [[0, 0, 0], [0, 3, 1000], [0, 7, 2047], [0, 5, 1]];
    const want = refRows(q.values, k.values, v.values, d, rows);
    rows.forEach(([b, h, i], n) => {
      const o = rowOffset('bshd', b, i, h, 2048, 8, 64);
      let e = 0;
      let w = 0;
      for (let x = 0; x < 64; x++) {
        e += (out[o + x] - want[n][x]) ** 2;
        w += want[n][x] ** 2;
      }
      expect(Math.sqrt(e / w), `row ${i} head ${h}`).toBeLessThan(1e-5);
    });
    disposeAll(r.out, r.lse, q.tensor, k.tensor, v.tensor);
  });

  it('backward (B=1, H=4, N=1024, D=64, float32): timers run while it works', async () => {
    const rng = new Rng(1024);
    const q = randomTensor(rng, [1, 1024, 4, 64], 'float32');
    const k = randomTensor(rng, [1, 1024, 4, 64], 'float32');
    const v = randomTensor(rng, [1, 1024, 4, 64], 'float32');
    const dout = randomTensor(rng, [1, 1024, 4, 64], 'float32');
    const f = await flashAttention(q.tensor, k.tensor, v.tensor);
    const stop = watchEventLoop();
    let settled = false;
    const p = flashAttentionBackward(dout.tensor, q.tensor, k.tensor, v.tensor, f.out, f.lse, { cpu: { threads: 1 } });
    expect(p).toBeInstanceOf(Promise);
    void p.then(
      () => (settled = true),
      () => (settled = true),
    );
    expect(settled).toBe(false);
    const g = await p;
    const counts = stop();
    expect(counts.intervals).toBeGreaterThan(1);
    expect(counts.immediates).toBeGreaterThan(1);
    expect(counts.timeouts).toBeGreaterThan(1);
    const dq = await toF64(g.dq);
    expect(dq.every(Number.isFinite)).toBe(true);
    expect(dq.some((x) => x !== 0)).toBe(true);
    disposeAll(g.dq, g.dk, g.dv, f.out, f.lse, q.tensor, k.tensor, v.tensor, dout.tensor);
  });

  it('Tensor.zeros and tensor.to("cpu") return Promises', async () => {
    const pz = Tensor.zeros([4, 4]);
    expect(pz).toBeInstanceOf(Promise);
    const t = await pz;
    const pc = t.to('cpu');
    expect(pc).toBeInstanceOf(Promise);
    const c = await pc;
    const pf = c.toFloat32Array();
    expect(pf).toBeInstanceOf(Promise);
    expect((await pf).length).toBe(16);
    disposeAll(t, c);
  });
});

describe('concurrent CPU calls', () => {
  it('twelve overlapping forward and backward calls with different inputs all resolve correctly', async () => {
    const base = (i: number): AttnCase => ({
      seed: 9000 + i,
      B: 1 + (i % 2),
      Nq: [7, 33, 64, 129, 20, 50][i % 6],
      Nk: [9, 33, 100, 64, 129, 1][i % 6],
      H: [2, 4, 6][i % 3],
      Hkv: [1, 2, 3][i % 3],
      D: [16, 32, 40, 64, 8, 24][i % 6],
      causal: i % 2 === 1,
      layout: i % 4 < 2 ? 'bshd' : 'bhsd',
      dtype: (['float32', 'float16', 'bfloat16'] as const)[i % 3],
      returnSoftmaxD: i % 2 === 0,
      cpu: i % 5 === 0 ? { threads: 1 } : undefined,
    });
    const jobs: Array<Promise<void>> = [];
    for (let i = 0; i < 8; i++) jobs.push(checkForwardCase(base(i), 'cpu'));
    for (let i = 8; i < 12; i++) jobs.push(checkBackwardCase(base(i), 'cpu'));
    await Promise.all(jobs);
  });

  it('the same inputs used by many concurrent calls give bit-identical results', async () => {
    const rng = new Rng(4242);
    const q = randomTensor(rng, [2, 64, 4, 32], 'float16');
    const k = randomTensor(rng, [2, 80, 2, 32], 'float16');
    const v = randomTensor(rng, [2, 80, 2, 32], 'float16');
    const results = await Promise.all(Array.from({ length: 8 }, () => flashAttention(q.tensor, k.tensor, v.tensor, { causal: true })));
    const first = (await results[0].out.toTypedArray()) as Uint16Array;
    for (const r of results) {
      const o = (await r.out.toTypedArray()) as Uint16Array;
      expect(Array.from(o)).toEqual(Array.from(first));
      disposeAll(r.out, r.lse);
    }
    disposeAll(q.tensor, k.tensor, v.tensor);
  });
});

describe('small CPU calls run on the calling thread', () => {
  // A call of at most ~1M multiply-adds skips the hand-off to a libuv worker (about 30 us there and
  // back): it is done before its Promise is returned, so awaiting it takes no turn of the event loop.
  // FA_CPU_INLINE=0 (read per call) sends every call to a worker; both give the same bits.
  it('a decode-sized call settles before the next macrotask and matches the worker path bit for bit', async () => {
    const rng = new Rng(5151);
    const q = randomTensor(rng, [2, 1, 8, 64], 'float16');
    const k = randomTensor(rng, [2, 100, 2, 64], 'float16');
    const v = randomTensor(rng, [2, 100, 2, 64], 'float16');
    const dout = randomTensor(rng, [2, 1, 8, 64], 'float16');
    const saved = process.env.FA_CPU_INLINE;
    try {
      const run = async () => {
        let ticked = false;
        setImmediate(() => { ticked = true; });
        const f = await flashAttention(q.tensor, k.tensor, v.tensor, { causal: true });
        const g = await flashAttentionBackward(dout.tensor, q.tensor, k.tensor, v.tensor, f.out, f.lse, { causal: true });
        const settled = ticked;
        const bits = await Promise.all([f.out, f.lse, g.dq, g.dk, g.dv].map(async (t) => Array.from(new Uint8Array((await t.toTypedArray()).buffer))));
        disposeAll(f.out, f.lse, g.dq, g.dk, g.dv);
        return { ticked: settled, bits };
      };
      delete process.env.FA_CPU_INLINE;
      const inline = await run();
      process.env.FA_CPU_INLINE = '0';
      const worker = await run();
      expect(inline.ticked, 'the inline calls took a turn of the event loop').toBe(false);
      expect(worker.ticked, 'the worker calls did not leave the JS thread').toBe(true);
      inline.bits.forEach((b, i) => expect(b, `output ${i}`).toEqual(worker.bits[i]));
      const ref = refForward(q.values, k.values, v.values, { B: 2, Nq: 1, Nk: 100, H: 8, Hkv: 2, D: 64, causal: true, scale: defaultScale(64), layout: 'bshd' });
      const again = await flashAttention(q.tensor, k.tensor, v.tensor, { causal: true });
      expect(relL2(await toF64(again.out), ref.out)).toBeLessThan(2e-3);
      disposeAll(again.out, again.lse);
    } finally {
      if (saved === undefined) delete process.env.FA_CPU_INLINE;
      else process.env.FA_CPU_INLINE = saved;
      disposeAll(q.tensor, k.tensor, v.tensor, dout.tensor);
    }
  });
});

describe('inputs disposed while a call is in flight', () => {
  it('the call either completes with the right answer or rejects cleanly (never garbage, never a crash)', async () => {
    const d: AttnDims = { B: 1, Nq: 512, Nk: 512, H: 4, Hkv: 2, D: 64, causal: true, scale: defaultScale(64), layout: 'bshd' };
    const rng = new Rng(777);
    const q = randomTensor(rng, [1, 512, 4, 64], 'float32');
    const k = randomTensor(rng, [1, 512, 2, 64], 'float32');
    const v = randomTensor(rng, [1, 512, 2, 64], 'float32');
    const p = flashAttention(q.tensor, k.tensor, v.tensor, { causal: true });
    q.tensor.dispose();
    k.tensor.dispose();
    v.tensor.dispose();
    let result: Awaited<typeof p> | undefined;
    let err: unknown;
    try {
      result = await p;
    } catch (e) {
      err = e;
    }
    if (result) {
      const out = await toF64(result.out);
      const ref = refForward(q.values, k.values, v.values, d);
      let e = 0;
      let w = 0;
      for (let i = 0; i < out.length; i++) {
        e += (out[i] - ref.out[i]) ** 2;
        w += ref.out[i] ** 2;
      }
      expect(Math.sqrt(e / w)).toBeLessThan(1e-5);
      disposeAll(result.out, result.lse);
    } else {
      expect(err).toBeInstanceOf(Error);
    }
    // and the next call works
    const a = randomTensor(rng, [1, 8, 1, 8], 'float32');
    const r2 = await flashAttention(a.tensor, a.tensor, a.tensor);
    expect(r2.out.shape).toEqual([1, 8, 1, 8]);
    disposeAll(r2.out, r2.lse, a.tensor);
  });
});

describe('buildInfo() and devices()', () => {
  it('buildInfo() has cuda: boolean, cudaArchs: string[], version: the package version', () => {
    const info = buildInfo();
    expect(typeof info).toBe('object');
    expect(typeof info.cuda).toBe('boolean');
    expect(Array.isArray(info.cudaArchs)).toBe(true);
    for (const a of info.cudaArchs) expect(typeof a).toBe('string');
    if (info.cuda) expect(info.cudaArchs.length).toBeGreaterThan(0);
    const pkg = JSON.parse(readFileSync(join(__dirname, '..', '..', 'package.json'), 'utf8')) as { version: string };
    expect(info.version).toBe(pkg.version);
    // stable across calls
    expect(buildInfo()).toEqual(info);
  });

  it('devices() is an array of {index, name, computeCapability, totalMemory}; [] without a CUDA build', () => {
    const list = devices();
    expect(Array.isArray(list)).toBe(true);
    if (!buildInfo().cuda) expect(list).toEqual([]);
    list.forEach((dev, i) => {
      expect(dev.index).toBe(i);
      expect(typeof dev.name).toBe('string');
      expect(dev.name.length).toBeGreaterThan(0);
      expect(dev.computeCapability).toMatch(/^\d+\.\d+$/);
      expect(Number.isFinite(dev.totalMemory) && dev.totalMemory > 0).toBe(true);
    });
    expect(devices()).toEqual(list);
  });
});
