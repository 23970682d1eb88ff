// Host-side cost of queueing calls on the GPU (development tool): the time the host spends per call
// when the GPU is not the limit, for the dense call and pagedAttention in several forms, and the
// JavaScript part alone (the native call replaced by a no-op). Usage: node scripts/host-cost.js
'use strict';
const fa = require('../dist/lib/index.js');
const { native } = require('../dist/lib/native.js');

async function hostUs(call, n = 3000) {
  for (let i = 0; i < 3000; i++) await call();
  await fa.synchronize();
  const t0 = performance.now();
  for (let i = 0; i < n; i++) await call();
  const us = ((performance.now() - t0) / n) * 1000;
  await fa.synchronize();
  return us;
}

async function main() {
  const dev = 'cuda';
  const rnd = async (shape) => { const t = await fa.Tensor.empty(shape, { dtype: 'float16', device: dev }); return t; };
  const q1 = await rnd([1, 128, 4, 64]), k1 = await rnd([1, 128, 4, 64]), v1 = await rnd([1, 128, 4, 64]), o1 = await rnd([1, 128, 4, 64]);
  const lse1 = await fa.Tensor.empty([1, 4, 128], { dtype: 'float32', device: dev });
  const B = 1, N = 4096, page = 16, H = 32, Hkv = 8, D = 128;
  const pages = (B * N) / page;
  const kc = await rnd([pages, page, Hkv, D]), vc = await rnd([pages, page, Hkv, D]);
  const q = await rnd([B, H, D]);
  const idx = {
    pageTable: await fa.Tensor.from(Int32Array.from({ length: pages }, (_, i) => i), [B, pages]).to(dev),
    seqlensK: await fa.Tensor.from(new Int32Array(B).fill(N), [B]).to(dev),
    cuSeqlensQ: await fa.Tensor.from(Int32Array.from([0, 1]), [2]).to(dev),
  };
  const opts = { ...idx, maxSeqlenQ: 1, maxSeqlenK: N, causal: true };
  const out = await rnd([B, H, D]);
  const lse = await fa.Tensor.empty([H, B], { dtype: 'float32', device: dev });
  const rows = [];
  const add = async (name, f) => rows.push([name, await hostUs(f)]);
  await add('flashAttention [1,128,4,64]', async () => { const r = await fa.flashAttention(q1, k1, v1); r.out.dispose(); r.lse.dispose(); });
  await add('pagedAttention B1 4k (auto splits)', async () => { const r = await fa.pagedAttention(q, kc, vc, opts); r.out.dispose(); r.lse.dispose(); });
  await add('pagedAttention numSplits 1', async () => { const r = await fa.pagedAttention(q, kc, vc, { ...opts, numSplits: 1 }); r.out.dispose(); r.lse.dispose(); });
  await add('pagedAttention out/lse given', async () => { await fa.pagedAttention(q, kc, vc, { ...opts, out, lse }); });
  await add('pagedAttention out/lse given, numSplits 1', async () => { await fa.pagedAttention(q, kc, vc, { ...opts, out, lse, numSplits: 1 }); });
  const realCall = native.call;
  native.call = () => [];
  await add('pagedAttention JS only (native call a no-op)', async () => { await fa.pagedAttention(q, kc, vc, { ...opts, out, lse }); });
  await add('flashAttention JS only', async () => { await fa.flashAttention(q1, k1, v1, { out: o1, lse: lse1 }); });
  native.call = realCall;
  for (const [name, us] of rows) console.log(`${name.padEnd(48)} ${us.toFixed(1)} us`);
}
main().catch((e) => { console.error(e); process.exitCode = 1; });
