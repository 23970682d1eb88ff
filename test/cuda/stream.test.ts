// The stream-ordered execution model on the GPU: device calls are queued in call order and their
// Promises settle once queued; host reads wait for the work that produced the tensor; dispose()
// while queued work still uses a tensor is safe; out= / dq= write into caller tensors; memoryStats,
// emptyCache (another process can then have the memory) and synchronize.
// Skipped (visibly) without a CUDA device; fails under FA_REQUIRE_GPU=1 when there is none.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { expect, it } from 'vitest';
import {
  Tensor, emptyCache, flashAttention, flashAttentionBackward, memoryStats, pagedAttention, resetPeakMemoryStats, synchronize,
} from '../../lib/index';
import {
  type AttnDims, Rng, bytesEqual, defaultScale, describeGpu, disposeAll, randomTensor, rawBytes, refForward, relL2, toF64,
} from '../helpers/reference';

async function dev(t: Tensor): Promise<Tensor> {
  const d = await t.to('cuda');
  t.dispose();
  return d;
}

describeGpu('CUDA stream-ordered execution', () => {
  it('a chain of 12 dependent calls with no wait in between matches the step-by-step result bit for bit', async () => {
    const rng = new Rng(1201);
    const shape = [2, 300, 8, 64];
    const q0 = await dev(randomTensor(rng, shape, 'float16').tensor);
    const k = await dev(randomTensor(rng, [2, 300, 2, 64], 'float16').tensor);
    const v = await dev(randomTensor(rng, [2, 300, 2, 64], 'float16').tensor);
    // Step by step: each call's result read back (host sync) before the next call.
    let x = q0;
    const steps: Uint8Array[] = [];
    for (let i = 0; i < 12; i++) {
      const r = await flashAttention(x, k, v, { causal: i % 2 === 0 });
      steps.push(await rawBytes(r.out));
      if (x !== q0) x.dispose();
      r.lse.dispose();
      x = r.out;
    }
    x.dispose();
    // Chained: outputs feed the next call at once (the awaits return queued results), inputs of
    // finished steps disposed right away, one read at the end.
    let y = q0;
    const outs: Tensor[] = [];
    for (let i = 0; i < 12; i++) {
      const r = await flashAttention(y, k, v, { causal: i % 2 === 0 });
      if (y !== q0) y.dispose();
      r.lse.dispose();
      outs.push(r.out);
      y = r.out;
    }
    expect(bytesEqual(await rawBytes(y), steps[11])).toBe(true);
    // With caller-owned outputs the calls need not even be awaited: two buffers, ping-pong.
    const a = await Tensor.empty(shape, { dtype: 'float16', device: 'cuda' });
    const b = await Tensor.empty(shape, { dtype: 'float16', device: 'cuda' });
    const lse = await Tensor.empty([2, 8, 300], { dtype: 'float32', device: 'cuda' });
    const pending: Promise<unknown>[] = [];
    pending.push(flashAttention(q0, k, v, { causal: true, out: a, lse }));
    for (let i = 1; i < 12; i++) {
      const [src, dst] = i % 2 === 1 ? [a, b] : [b, a];
      pending.push(flashAttention(src, k, v, { causal: i % 2 === 0, out: dst, lse }));
    }
    const last = 11 % 2 === 1 ? b : a;
    expect(bytesEqual(await rawBytes(last), steps[11])).toBe(true);
    const results = await Promise.all(pending);
    expect((results[11] as { out: Tensor }).out).toBe(last);
    disposeAll(y, q0, k, v, a, b, lse);
  });

  it('inputs disposed while the work that reads them is queued: results unaffected', async () => {
    const rng = new Rng(1202);
    const d: AttnDims = { B: 2, Nq: 1000, Nk: 1000, H: 8, Hkv: 8, D: 128, causal: false, scale: defaultScale(128), layout: 'bshd' };
    const hq = randomTensor(rng, [2, 1000, 8, 128], 'float32');
    const hk = randomTensor(rng, [2, 1000, 8, 128], 'float32');
    const hv = randomTensor(rng, [2, 1000, 8, 128], 'float32');
    const ref = refForward(hq.values, hk.values, hv.values, d);
    const results: Tensor[] = [];
    for (let i = 0; i < 6; i++) {
      const [q, k, v] = await Promise.all([hq.tensor.to('cuda'), hk.tensor.to('cuda'), hv.tensor.to('cuda')]);
      const r = await flashAttention(q, k, v);
      disposeAll(q, k, v, r.lse);  // freed in stream order: the queued kernel still reads them
      // Fresh allocations that reuse the freed memory, filled at once: must not disturb the call.
      const junk = await Tensor.zeros([2, 1000, 8, 128], { dtype: 'float32', device: 'cuda' });
      junk.dispose();
      results.push(r.out);
    }
    for (const r of results) expect(relL2(await toF64(r), ref.out)).toBeLessThan(1e-5);
    disposeAll(...results, hq.tensor, hk.tensor, hv.tensor);
  });

  it('out / lse options: the results are the caller tensors; wrong shape, dtype, device or aliasing are rejected', async () => {
    const rng = new Rng(1203);
    const q = await dev(randomTensor(rng, [1, 77, 4, 64], 'bfloat16').tensor);
    const k = await dev(randomTensor(rng, [1, 90, 2, 64], 'bfloat16').tensor);
    const out = await Tensor.empty([1, 77, 4, 64], { dtype: 'bfloat16', device: 'cuda' });
    const lse = await Tensor.empty([1, 4, 77], { dtype: 'float32', device: 'cuda' });
    const r = await flashAttention(q, k, k, { causal: true, out, lse });
    expect(r.out).toBe(out);
    expect(r.lse).toBe(lse);
    const plain = await flashAttention(q, k, k, { causal: true });
    expect(bytesEqual(await rawBytes(out), await rawBytes(plain.out))).toBe(true);
    expect(bytesEqual(await rawBytes(lse), await rawBytes(plain.lse))).toBe(true);
    const wrongShape = await Tensor.empty([1, 77, 4, 32], { dtype: 'bfloat16', device: 'cuda' });
    const wrongType = await Tensor.empty([1, 77, 4, 64], { dtype: 'float16', device: 'cuda' });
    const onHost = await Tensor.empty([1, 77, 4, 64], { dtype: 'bfloat16' });
    await expect(flashAttention(q, k, k, { out: wrongShape })).rejects.toThrow(RangeError);
    await expect(flashAttention(q, k, k, { out: wrongShape })).rejects.toThrow(/options\.out\.shape/);
    await expect(flashAttention(q, k, k, { out: wrongType })).rejects.toThrow(/options\.out\.dtype.*bfloat16.*float16/);
    await expect(flashAttention(q, k, k, { out: onHost })).rejects.toThrow(/options\.out\.device.*cuda:0.*cpu/);
    await expect(flashAttention(q, k, k, { out: q })).rejects.toThrow(/options\.out must not be one of the inputs/);
    await expect(flashAttention(q, k, k, { lse: out })).rejects.toThrow(TypeError);
    // Backward into caller tensors.
    const dout = await dev(randomTensor(rng, [1, 77, 4, 64], 'bfloat16').tensor);
    const g0 = await flashAttentionBackward(dout, q, k, k, out, lse, { causal: true });
    const dq = await Tensor.empty(q.shape, { dtype: 'bfloat16', device: 'cuda' });
    const dk = await Tensor.empty(k.shape, { dtype: 'bfloat16', device: 'cuda' });
    const dv = await Tensor.empty(k.shape, { dtype: 'bfloat16', device: 'cuda' });
    const g = await flashAttentionBackward(dout, q, k, k, out, lse, { causal: true, dq, dk, dv, deterministic: true });
    expect(g.dq).toBe(dq);
    expect(g.dk).toBe(dk);
    expect(g.dv).toBe(dv);
    const gd = await flashAttentionBackward(dout, q, k, k, out, lse, { causal: true, deterministic: true });
    expect(bytesEqual(await rawBytes(dq), await rawBytes(gd.dq))).toBe(true);
    expect(bytesEqual(await rawBytes(dk), await rawBytes(gd.dk))).toBe(true);
    expect(bytesEqual(await rawBytes(dv), await rawBytes(gd.dv))).toBe(true);
    await expect(flashAttentionBackward(dout, q, k, k, out, lse, { dq: dk })).rejects.toThrow(/options\.dq\.shape/);
    disposeAll(q, k, out, lse, plain.out, plain.lse, wrongShape, wrongType, onHost, dout, g0.dq, g0.dk, g0.dv, dq, dk, dv,
      gd.dq, gd.dk, gd.dv);
  });

  it('results dispose together (Symbol.dispose on results and tensors)', async () => {
    const rng = new Rng(1204);
    const q = await dev(randomTensor(rng, [1, 16, 2, 64], 'float16').tensor);
    const r = await flashAttention(q, q, q);
    r[Symbol.dispose]();
    expect(r.out.disposed).toBe(true);
    expect(r.lse.disposed).toBe(true);
    q[Symbol.dispose]();
    expect(q.disposed).toBe(true);
  });

  it('handles of disposed results serve later results: those stay disposed, the new ones hold their own data', async () => {
    const rng = new Rng(1208);
    const shapes = [[1, 37, 3, 64], [2, 200, 4, 128]];
    const inputs = [];
    const refs: Uint8Array[] = [];
    for (const s of shapes) {
      const q = await dev(randomTensor(rng, s, 'float16').tensor);
      const k = await dev(randomTensor(rng, s, 'float16').tensor);
      const v = await dev(randomTensor(rng, s, 'float16').tensor);
      const r = await flashAttention(q, k, v);
      refs.push(await rawBytes(r.out));
      refs.push(await rawBytes(r.lse));
      disposeAll(r.out, r.lse);
      inputs.push([q, k, v] as const);
    }
    // Results of two sizes, disposed in a mixed order, so that each call's outputs land in handles
    // that held the other size's outputs; every kept result must still read back as its own call's.
    const kept: Array<{ i: number; out: Tensor; lse: Tensor }> = [];
    const gone: Tensor[] = [];
    for (let n = 0; n < 40; n++) {
      const i = n % 2;
      const [q, k, v] = inputs[i];
      const r = await flashAttention(q, k, v);
      if (n % 3 === 0) kept.push({ i, out: r.out, lse: r.lse });
      else {
        disposeAll(r.out, r.lse);
        gone.push(r.out, r.lse);
      }
    }
    for (const t of gone) {
      expect(t.disposed).toBe(true);
      await expect(t.toTypedArray()).rejects.toThrow(/disposed/);
    }
    for (const { i, out, lse } of kept) {
      expect(out.shape).toEqual(shapes[i]);
      expect(bytesEqual(await rawBytes(out), refs[2 * i])).toBe(true);
      expect(bytesEqual(await rawBytes(lse), refs[2 * i + 1])).toBe(true);
    }
    // Steady state: a call whose results are disposed right away allocates nothing that stays.
    await synchronize();
    const before = memoryStats().allocated;
    for (let n = 0; n < 200; n++) {
      const r = await flashAttention(...inputs[n % 2]);
      disposeAll(r.out, r.lse);
    }
    await synchronize();
    expect(memoryStats().allocated).toBeLessThanOrEqual(before);
    for (const { out, lse } of kept) disposeAll(out, lse);
    for (const t of inputs) disposeAll(...t);
  });

  it('synchronize(): resolves once queued work is done; the CPU form resolves at once', async () => {
    const rng = new Rng(1205);
    const q = await dev(randomTensor(rng, [4, 2048, 16, 128], 'float16').tensor);
    const rs = [];
    for (let i = 0; i < 8; i++) rs.push(await flashAttention(q, q, q));
    await synchronize();
    await synchronize('cuda:0');
    await synchronize('cpu');
    for (const r of rs) disposeAll(r.out, r.lse);
    disposeAll(q);
  });

  it('memoryStats follows allocations; emptyCache hands pooled memory back so that another process can use it', async () => {
    await synchronize();
    await emptyCache();
    resetPeakMemoryStats();
    const s0 = memoryStats();
    for (const key of ['allocated', 'reserved', 'peakAllocated', 'free', 'total'] as const) {
      expect(typeof s0[key]).toBe('number');
    }
    expect(s0.total).toBeGreaterThan(1e9);
    // Take 60% of what is free, give it back to the pool (not the driver).
    const bytes = Math.floor((0.6 * s0.free) / (2 ** 30)) * 2 ** 30;
    const n = bytes / 4;
    const parts: Tensor[] = [];
    for (let left = n; left > 0; left -= 2 ** 30) parts.push(await Tensor.zeros([Math.min(left, 2 ** 30)], { dtype: 'float32', device: 'cuda' }));
    await synchronize();
    const s1 = memoryStats();
    expect(s1.allocated - s0.allocated).toBeGreaterThanOrEqual(bytes);
    expect(s1.peakAllocated).toBeGreaterThanOrEqual(s1.allocated);
    disposeAll(...parts);
    await synchronize();
    const s2 = memoryStats();
    expect(s2.allocated).toBeLessThan(s1.allocated - bytes / 2);
    expect(s2.reserved).toBeGreaterThanOrEqual(bytes);  // still pooled
    // Another process asks for that much: it cannot have it while we hold it in the pool...
    const child = (gib: number) => spawnSync(process.execPath, ['-e', `
      const { Tensor, synchronize } = require(${JSON.stringify(path.resolve(__dirname, '../../dist/index.js'))});
      (async () => {
        const parts = [];
        try {
          for (let left = ${gib}; left > 0; left--) parts.push(await Tensor.zeros([2 ** 28], { dtype: 'float32', device: 'cuda' }));
          await synchronize();
          console.log('ok');
        } catch (e) { console.log('failed: ' + e.message); }
      })();`], { encoding: 'utf8', timeout: 120_000 });
    const gib = bytes / 2 ** 30;
    const before = child(gib);
    expect(before.stdout.trim(), before.stderr).toMatch(/^failed: .*cudaError/);
    // ... and can after emptyCache().
    await emptyCache();
    const s3 = memoryStats();
    console.log(`emptyCache released ${((s2.reserved - s3.reserved) / 2 ** 30).toFixed(2)} GiB ` +
      `(reserved ${(s2.reserved / 2 ** 30).toFixed(2)} -> ${(s3.reserved / 2 ** 30).toFixed(2)} GiB; device free ${(s2.free / 2 ** 30).toFixed(1)} -> ${(s3.free / 2 ** 30).toFixed(1)} GiB)`);
    expect(s3.reserved).toBeLessThan(s2.reserved - bytes / 2);
    expect(s3.free).toBeGreaterThan(s2.free + bytes / 2);
    const after = child(gib);
    expect(after.stdout.trim(), after.stderr).toBe('ok');
  });

  it('a small call plus a read of its result, many times: every read sees its own call', async () => {
    const rng = new Rng(1206);
    const q = await dev(randomTensor(rng, [1, 128, 4, 64], 'float16').tensor);
    const k = await dev(randomTensor(rng, [1, 128, 4, 64], 'float16').tensor);
    const first = await flashAttention(q, k, k);
    const want = await rawBytes(first.lse);
    for (let i = 0; i < 50; i++) {
      const r = await flashAttention(q, k, k);
      expect(bytesEqual(await rawBytes(r.lse), want)).toBe(true);
      disposeAll(r.out, r.lse);
    }
    disposeAll(q, k, first.out, first.lse);
  });

  // A decode kernel may request its first K / V tiles while the kernel before it still runs, but
  // only when that kernel writes no byte of its caches (DeviceContext::last_attention). Caches
  // written by the call right before (out=) must be read as that call left them; decode calls on
  // one cache back to back (the early path) must give what they give one at a time.
  it('paged decode right after calls that write its caches, and back to back: the step-by-step result bit for bit', async () => {
    const rng = new Rng(1207);
    const pages = 96, page = 16, Hkv = 2, H = 8, D = 64, B = 3, per = 32;
    const cacheShape = [pages, page, Hkv, D];
    const src = await Promise.all([0, 1, 2].map(() => dev(randomTensor(rng, cacheShape, 'float16').tensor)));
    const qd = await dev(randomTensor(rng, [B, H, D], 'float16').tensor);
    const order = Array.from({ length: pages }, (_, i) => i).sort(() => rng.uniform() - 0.5);
    const opts = {
      pageTable: await Tensor.from(Int32Array.from(order), [B, per]).to('cuda'),
      seqlensK: await Tensor.from(Int32Array.from([per * page, 301, 17]), [B]).to('cuda'),
      cuSeqlensQ: await Tensor.from(Int32Array.from([0, 1, 2, 3]), [B + 1]).to('cuda'),
      maxSeqlenQ: 1, maxSeqlenK: per * page,
    };
    const kc = await Tensor.empty(cacheShape, { dtype: 'float16', device: 'cuda' });
    const vc = await Tensor.empty(cacheShape, { dtype: 'float16', device: 'cuda' });
    const fill = async (x: Tensor[]) => {
      const r = [await flashAttention(x[0], x[1], x[2], { out: kc }), await flashAttention(x[2], x[0], x[1], { out: vc })];
      for (const t of r) t.lse.dispose();
    };
    // Step by step: the caches read back before the decode, each decode read back before the next.
    await fill(src);
    await rawBytes(kc);
    const want: Uint8Array[] = [];
    for (let i = 0; i < 3; i++) {
      const r = await pagedAttention(qd, kc, vc, opts);
      want.push(await rawBytes(r.out));
      disposeAll(r.out, r.lse);
    }
    // Queued: the caches rewritten (other inputs, then the first ones again) and decoded at once.
    const rot = [src[1], src[2], src[0]];
    await fill(rot);
    const other = await pagedAttention(qd, kc, vc, opts);
    await fill(src);
    const outs = [];
    for (let i = 0; i < 3; i++) outs.push(await pagedAttention(qd, kc, vc, opts));
    for (const r of outs) expect(bytesEqual(await rawBytes(r.out), want[0])).toBe(true);
    expect(bytesEqual(want[1], want[0]) && bytesEqual(want[2], want[0])).toBe(true);
    expect(bytesEqual(await rawBytes(other.out), want[0])).toBe(false);
    disposeAll(...src, qd, kc, vc, other.out, other.lse, ...outs.flatMap((r) => [r.out, r.lse]),
      opts.pageTable, opts.seqlensK, opts.cuSeqlensQ);
  });

  it('the JS thread keeps running while large downloads and long queues complete', async () => {
    const rng = new Rng(1207);
    const q = await dev(randomTensor(rng, [1, 8192, 16, 128], 'float16').tensor);
    let ticks = 0;
    let stop = false;
    const spin = () => {
      ticks++;
      if (!stop) setImmediate(spin);
    };
    setImmediate(spin);
    // 24 calls (~0.3 ms each on an H100): the queue must outlast an event-loop turn by a wide margin on
    // any card. With 6 an H100 once read ticks = 1 (fifty-eighth session): the work may simply have been
    // done by the time the read was issued; a read that blocked the JS thread would read 1 here too.
    const calls = 24;
    let last = await flashAttention(q, q, q, { causal: true });
    for (let i = 1; i < calls; i++) {
      const r = await flashAttention(q, q, q, { causal: true });
      disposeAll(last.out, last.lse);  // stream-ordered frees: the next call may reuse the memory
      last = r;
    }
    const t0 = performance.now();
    const big = await last.out.toFloat32Array();  // 32 MiB: the snapshot path
    stop = true;
    console.log(`stream: ${ticks} event-loop turns while ${calls} calls and a 32 MiB read completed (the read ${(performance.now() - t0).toFixed(1)} ms)`);
    expect(big.length).toBe(8192 * 16 * 128);
    expect(big.every(Number.isFinite)).toBe(true);
    expect(ticks).toBeGreaterThan(1);
    disposeAll(last.out, last.lse, q);
  });

  // The launcher thread (csrc/binding/context.h) issues queued launches in call order, interleaved
  // with what the JS thread puts on the stream itself (uploads, host index arrays, reads, frees).
  // The same mixed workload, in two processes, with launches on that thread and on the JS thread
  // (FA_LAUNCH_THREAD=0), must leave the same bytes (every kernel here is deterministic).
  it('launches through the launcher thread leave the same bytes as launches on the JS thread', () => {
    const script = `
      const fa = require(${JSON.stringify(path.resolve(__dirname, '../../dist/index.js'))});
      let seed = 7;
      const rand = (n) => { const a = new Float32Array(n); for (let i = 0; i < n; i++) { seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0; a[i] = seed / 2 ** 31 - 1; } return a; };
      const dev = (shape) => fa.Tensor.from(rand(shape.reduce((x, y) => x * y, 1)), shape, { dtype: 'float16' }).to('cuda');
      let hash = 2166136261;
      const add = async (t) => { const b = new Uint8Array((await t.toTypedArray()).buffer); for (const x of b) hash = Math.imul(hash ^ x, 16777619) >>> 0; };
      (async () => {
        const keep = [];
        let x = await dev([2, 200, 8, 64]);
        const k = await dev([2, 200, 2, 64]), v = await dev([2, 200, 2, 64]);
        for (let i = 0; i < 20; i++) {  // a chain, inputs disposed at once, an upload every 5th call
          const r = await fa.flashAttention(x, k, v, { causal: i % 2 === 0, window: i % 3 === 0 ? [64, 0] : undefined });
          if (i > 0) x.dispose();
          r.lse.dispose();
          x = r.out;
          if (i % 5 === 4) keep.push(await dev([1, 64, 8, 64]));
        }
        const pages = 40, page = 16, B = 3, per = 12;
        const kc = await dev([pages, page, 2, 64]), vc = await dev([pages, page, 2, 64]);
        const table = Int32Array.from({ length: B * per }, (_, i) => (i * 7) % pages);
        const newTok = [5, 0, 17];
        const cuNew = Int32Array.from([0, 5, 5, 22]);
        await fa.appendKV(kc, vc, await dev([22, 2, 64]), await dev([22, 2, 64]),
          { pageTable: table, cuSeqlensNew: cuNew, seqlensBefore: Int32Array.from([100, 3, 150]) });
        const seqlensK = Int32Array.from([105, 3, 167]);
        const outs = [];
        for (let i = 0; i < 4; i++) {  // decode with host index arrays (staged: the JS thread's own copy)
          const r = await fa.pagedAttention(await dev([B, 8, 64]), kc, vc, { pageTable: table, seqlensK,
            cuSeqlensQ: Int32Array.from([0, 1, 2, 3]), maxSeqlenQ: 1, maxSeqlenK: per * page, numSplits: 1 + (i % 3) });
          outs.push(r);
        }
        const m = await fa.mergeAttention([outs[0].out, outs[1].out], [outs[0].lse, outs[1].lse]);
        const g = await fa.flashAttentionBackward(x, x, k, v, x, await fa.Tensor.zeros([2, 8, 200], { device: 'cuda' }), { deterministic: true });
        for (const t of [x, ...keep, kc, vc, m.out, m.lse, g.dq, g.dk, g.dv, ...outs.flatMap((r) => [r.out, r.lse])]) await add(t);
        await fa.synchronize();
        console.log('hash ' + hash);
      })().catch((e) => console.log('failed: ' + e.message));`;
    const run = (launcher: string) => spawnSync(process.execPath, ['-e', script], {
      encoding: 'utf8', timeout: 120_000, env: { ...process.env, FA_LAUNCH_THREAD: launcher },
    });
    const on = run('1'), off = run('0');
    expect(on.stdout.trim(), on.stderr).toMatch(/^hash \d+$/);
    expect(off.stdout.trim(), off.stderr).toMatch(/^hash \d+$/);
    expect(on.stdout.trim()).toBe(off.stdout.trim());
  });

  // A launch that fails (here injected: FA_TEST_FAIL_LAUNCH=3 fails the third call's launch with a
  // non-sticky CUDA error) is reported with the CUDA error name: at once when the call issued it on
  // the JS thread, else at the next wait; either way once, and the device stays usable.
  it('a failed launch is reported once, with the CUDA error name, and the next calls work', () => {
    const script = `
      const fa = require(${JSON.stringify(path.resolve(__dirname, '../../dist/index.js'))});
      (async () => {
        const x = await fa.Tensor.from(Float32Array.from({ length: 128 * 4 * 64 }, (_, i) => Math.sin(i)), [1, 128, 4, 64], { dtype: 'float16' }).to('cuda');
        const r1 = await fa.flashAttention(x, x, x);
        const r2 = await fa.flashAttention(x, x, x, { causal: true });
        const seen = [];
        try { await fa.flashAttention(x, x, x); seen.push('queued'); } catch (e) { seen.push('threw ' + e.message); }
        try { await fa.synchronize(); seen.push('sync ok'); } catch (e) { seen.push('sync failed ' + e.message); }
        try { await fa.synchronize(); seen.push('sync ok'); } catch (e) { seen.push('sync failed ' + e.message); }
        const r4 = await fa.flashAttention(x, x, x);
        const a = await r4.lse.toFloat32Array(), b = await r1.lse.toFloat32Array();
        seen.push(a.length > 0 && a.every((v, i) => v === b[i]) ? 'after same' : 'after differ');
        console.log(JSON.stringify(seen));
      })().catch((e) => console.log(JSON.stringify(['failed ' + e.message])));`;
    const run = (launcher: string) => {
      const r = spawnSync(process.execPath, ['-e', script], {
        encoding: 'utf8', timeout: 120_000, env: { ...process.env, FA_LAUNCH_THREAD: launcher, FA_TEST_FAIL_LAUNCH: '3' },
      });
      expect(r.stdout.trim(), r.stderr).toMatch(/^\[/);
      return JSON.parse(r.stdout.trim()) as string[];
    };
    const atOnce = ['threw flashAttention: cudaErrorInvalidValue', 'sync ok', 'sync ok', 'after same'];
    const atWait = ['queued', 'sync failed synchronize: cudaErrorInvalidValue', 'sync ok', 'after same'];
    const shape = (seen: string[]) => seen.map((x) => x.replace(/(cudaErrorInvalidValue).*$/, '$1'));
    expect(shape(run('0'))).toEqual(atOnce);
    // Through the launcher the third call is queued, unless it found the GPU idle and issued it itself.
    expect([atOnce, atWait]).toContainEqual(shape(run('1')));
  });
});
