// Where a call plus a small host read spends its time (development tool for issue 10's round trip):
// the tiny call ([1, 128, 4, 64] fp16) then its lse read back, 3 x 2000 times, with the JavaScript
// side split into the call (until its Promise settles) and the read; run with FA_PROFILE_HOST=1 for
// the binding's queue profile. Usage: node scripts/roundtrip-probe.js [rt|b2b]
'use strict';
const fa = require('../dist/lib/index.js');

async function main() {
  const mode = process.argv[2] || 'rt';
  const e = async (seed) => {
    const t = await fa.Tensor.empty([1, 128, 4, 64], { dtype: 'float16', device: 'cuda' });
    return t;
  };
  const q = await e(), k = await e(), v = await e();
  let tCall = 0, tRead = 0, n = 0;
  const rt = async () => {
    const t0 = performance.now();
    const r = await fa.flashAttention(q, k, v);
    const t1 = performance.now();
    await r.lse.toTypedArray();
    const t2 = performance.now();
    r.out.dispose(); r.lse.dispose();
    tCall += t1 - t0; tRead += t2 - t1; n++;
  };
  const b2b = async () => { const r = await fa.flashAttention(q, k, v); r.out.dispose(); r.lse.dispose(); };
  const f = mode === 'rt' ? rt : b2b;
  for (let i = 0; i < 200; i++) await f();
  await fa.synchronize();
  tCall = tRead = n = 0;
  const rounds = [];
  for (let r = 0; r < 3; r++) {
    const t0 = performance.now();
    for (let i = 0; i < 2000; i++) await f();
    if (mode !== 'rt') await fa.synchronize();
    rounds.push(((performance.now() - t0) / 2000) * 1000);
  }
  rounds.sort((a, b) => a - b);
  const extra = n ? `; call ${(tCall / n * 1000).toFixed(1)} us, read ${(tRead / n * 1000).toFixed(1)} us` : '';
  console.log(`${mode} FA_LAUNCH_THREAD=${process.env.FA_LAUNCH_THREAD ?? '1'} FA_LAUNCH_SPIN_US=${process.env.FA_LAUNCH_SPIN_US ?? 'default'}: ` +
    `${rounds.map((x) => x.toFixed(1)).join(' / ')} us per iteration${extra}`);
}
main().catch((err) => { console.error(err); process.exitCode = 1; });
