// Host-side cost of queueing calls on the GPU (development tool): the host's time per call for small
// problems whose GPU time is below it, for the dense call and pagedAttention in several forms, and
// the JavaScript part alone (the native call replaced by a no-op). Run it once per decode loader
// (FA_DECODE_LOADER=tma|cpasync) to see what encoding the tensor maps costs.
// Usage: node scripts/host-cost.js
'use strict';
const fa = require('../dist/lib/index.js');
const { native } = require('../dist/lib/native.js');

// Calls in rounds of 200 (fewer than the launch queue holds, so the host is never held up by a full
// queue), synchronize() between rounds; the median round.
async function hostUs(call) {
  const rounds = [];
  for (let r = 0; r < 40; r++) {
    await fa.synchronize();
    const t0 = performance.now();
    for (let i = 0; i < 200; i++) await call();
    rounds.push(((performance.now() - t0) / 200) * 1000);
  }
  await fa.synchronize();
  rounds.sort((a, b) => a - b);
  return rounds[rounds.length >> 1];
}

async function paged(B, N, page) {
  const H = 32, Hkv = 8, D = 128;
  const mp = Math.ceil(N / page), pages = B * mp;
  const e = (shape) => fa.Tensor.empty(shape, { dtype: 'float16', device: 'cuda' });
  const kc = await e([pages, page, Hkv, D]), vc = await e([pages, page, Hkv, D]), q = await e([B, H, D]);
  const opts = {
    pageTable: await fa.Tensor.from(Int32Array.from({ length: pages }, (_, i) => i), [B, mp]).to('cuda'),
    seqlensK: await fa.Tensor.from(new Int32Array(B).fill(N), [B]).to('cuda'),
    cuSeqlensQ: await fa.Tensor.from(Int32Array.from({ length: B + 1 }, (_, i) => i), [B + 1]).to('cuda'),
    maxSeqlenQ: 1, maxSeqlenK: N, causal: true,
  };
  const out = await e([B, H, D]);
  const lse = await fa.Tensor.empty([H, B], { dtype: 'float32', device: 'cuda' });
  return { q, kc, vc, opts, given: { ...opts, out, lse }, one: { ...opts, numSplits: 1 }, two: { ...opts, numSplits: 2 } };
}

async function main() {
  const e = (shape) => fa.Tensor.empty(shape, { dtype: 'float16', device: 'cuda' });
  const q1 = await e([1, 128, 4, 64]), k1 = await e([1, 128, 4, 64]), v1 = await e([1, 128, 4, 64]);
  const o1 = await e([1, 128, 4, 64]);
  const lse1 = await fa.Tensor.empty([1, 4, 128], { dtype: 'float32', device: 'cuda' });
  const s = await paged(16, 128, 16);  // 1 split by the rule: no workspace
  const rows = [];
  const add = async (name, f) => rows.push([name, await hostUs(f)]);
  const dispose = (r) => { r.out.dispose(); r.lse.dispose(); };
  await add('flashAttention [1,128,4,64]', async () => dispose(await fa.flashAttention(q1, k1, v1)));
  await add('flashAttention, out/lse given', async () => { await fa.flashAttention(q1, k1, v1, { out: o1, lse: lse1 }); });
  await add('pagedAttention B16 x 128 keys (1 split)', async () => dispose(await fa.pagedAttention(s.q, s.kc, s.vc, s.opts)));
  await add('pagedAttention, out/lse given', async () => { await fa.pagedAttention(s.q, s.kc, s.vc, s.given); });
  await add('pagedAttention, numSplits 2 (workspace)', async () => dispose(await fa.pagedAttention(s.q, s.kc, s.vc, s.two)));
  const realCall = native.call;
  native.call = () => [];
  await add('pagedAttention JS only (native call a no-op)', async () => { await fa.pagedAttention(s.q, s.kc, s.vc, s.given); });
  await add('flashAttention JS only', async () => { await fa.flashAttention(q1, k1, v1, { out: o1, lse: lse1 }); });
  native.call = realCall;
  console.log(`loader ${process.env.FA_DECODE_LOADER ?? 'default'}`);
  for (const [name, us] of rows) console.log(`  ${name.padEnd(46)} ${us.toFixed(1)} us`);
}
main().catch((e) => { console.error(e); process.exitCode = 1; });
