// worker_threads on the CUDA backend (forty-fifth session; test/api/workers.test.ts holds the CPU side):
// each thread has its own device context (stream, launcher, waiter). A worker that is terminated,
// or exits, with GPU work queued and a host read pending must end alone: no abort, no hang, and the
// main thread's calls on the same GPU keep working and stay correct. Each scenario runs in a child
// process. Skipped (visibly) without a CUDA device; fails under FA_REQUIRE_GPU=1 when there is none.
import { expect, it } from 'vitest';
import { distEntry as dist, runNodeChild } from '../helpers/child';
import { describeGpu } from '../helpers/reference';

const runChild = (script: string) => runNodeChild(script, { timeout: 120_000 });

// A worker that queues a few large GPU calls (fp16 D 128, N 4k, tens of milliseconds of work in all),
// starts a host read of the last output, tells the parent, then does `after`.
const workerBody = (after: string) => `
  const { parentPort } = require('node:worker_threads');
  const fa = require(${dist});
  (async () => {
    const s = [1, 4096, 16, 128];
    const x = await fa.Tensor.from(new Float32Array(s.reduce((a, b) => a * b)).fill(0.25), s, { dtype: 'float16' }).to('cuda');
    let r;
    for (let i = 0; i < 4; i++) r = await fa.flashAttention(x, x, x, { causal: i % 2 === 1 });
    r.out.toFloat32Array().catch(() => {});
    parentPort.postMessage('queued');
    ${after}
  })();
`;

// The main thread's check afterwards: a call on the GPU, read back (all ones in, all ones out).
const mainCheck = `
  const t = await fa.Tensor.from(new Float32Array(64 * 4 * 64).fill(1), [1, 64, 4, 64], { dtype: 'float16' }).to('cuda');
  const { out } = await fa.flashAttention(t, t, t, { causal: true });
  const o = await out.toFloat32Array();
  console.log('main ok', o.every((v) => v === 1));
`;

describeGpu('worker threads ending with GPU work queued', () => {
  it('terminate() of workers with queued calls and pending reads leaves the process and the GPU usable', () => {
    const r = runChild(`
      const { Worker } = require('node:worker_threads');
      (async () => {
        for (let i = 0; i < 4; i++) {
          const w = new Worker(${JSON.stringify(workerBody(''))}, { eval: true });
          await new Promise((res) => w.once('message', res));
          await w.terminate();
        }
        ${mainCheck}
        await fa.synchronize();
        console.log('survived');
      })();
    `);
    expect(r.signal, r.out).toBeNull();
    expect(r.status, r.out).toBe(0);
    expect(r.out).toMatch(/main ok true[\s\S]*survived/);
  });

  it('workers that throw or exit with queued work end alone; process.exit() with worker work queued exits', () => {
    const r = runChild(`
      const { Worker } = require('node:worker_threads');
      (async () => {
        for (const after of ['throw new Error("unrelated")', 'process.exit(3)']) {
          const w = new Worker(${JSON.stringify(workerBody('__AFTER__'))}.replace('__AFTER__', after), { eval: true });
          w.on('error', () => {});
          console.log('worker exit', await new Promise((res) => w.once('exit', res)));
        }
        ${mainCheck}
        const ws = [0, 1].map(() => new Worker(${JSON.stringify(workerBody(''))}, { eval: true }));
        await Promise.all(ws.map((w) => new Promise((res) => w.once('message', res))));
        process.exit(5);
      })();
    `);
    expect(r.signal, r.out).toBeNull();
    expect(r.status, r.out).toBe(5);
    expect(r.out).toMatch(/worker exit 1[\s\S]*worker exit 3[\s\S]*main ok true/);
  });
});
