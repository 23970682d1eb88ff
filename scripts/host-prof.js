// Where the host's time to queue a decode call goes (development tool, needs a GPU): the bench's
// B 1 x 4k page-16 decode cell (GQA 32/8, D 128, fp16, shuffled pages, device index arrays) through
// pagedAttention, timed in rounds of 200 queued calls (as scripts/host-cost.js), with the native call
// and with it replaced by a no-op; then a V8 CPU profile of 20 000 queued calls, summarised by self
// time per function (the .cpuprofile is written too, for a closer look).
// Usage: node scripts/host-prof.js [outDir]   (FA_DIST=<dist folder> FA_ADDON_PATH=<its addon>: another build;
// FA_HOSTPROF_INDEX=host: Int32Array index arrays instead of device tensors)
'use strict';
const fs = require('fs');
const path = require('path');
const inspector = require('inspector');
// FA_DIST: another build's dist folder (A/B of two builds, each with its addon in FA_ADDON_PATH)
const dist = path.resolve(process.env.FA_DIST ?? path.join(__dirname, '..', 'dist'));
const fa = require(path.join(dist, 'lib', 'index.js'));
const { native } = require(path.join(dist, 'lib', 'native.js'));

async function hostUs(call, rounds = 30) {
  const r = [];
  for (let i = 0; i < rounds; i++) {
    await fa.synchronize();
    const t0 = performance.now();
    for (let j = 0; j < 200; j++) await call();
    r.push(((performance.now() - t0) / 200) * 1000);
  }
  await fa.synchronize();
  r.sort((a, b) => a - b);
  return r[r.length >> 1];
}

function post(session, method, params) {
  return new Promise((res, rej) => session.post(method, params ?? {}, (e, v) => (e ? rej(e) : res(v))));
}

/** Self time per function name (ms over the profile), the top n. */
function selfTimes(profile, n) {
  const byId = new Map(profile.nodes.map((x) => [x.id, x]));
  const self = new Map();
  const dt = profile.timeDeltas;
  for (let i = 0; i < profile.samples.length; i++) {
    const node = byId.get(profile.samples[i]);
    const cf = node.callFrame;
    const key = `${cf.functionName || '(anonymous)'} ${path.basename(cf.url || '')}:${cf.lineNumber + 1}`;
    self.set(key, (self.get(key) ?? 0) + (dt[i] ?? 0) / 1000);
  }
  const total = [...self.values()].reduce((a, b) => a + b, 0);
  return { total, top: [...self.entries()].sort((a, b) => b[1] - a[1]).slice(0, n) };
}

async function main() {
  const outDir = process.argv[2] ?? '.';
  fs.mkdirSync(outDir, { recursive: true });
  const B = 1, N = 4096, page = 16, H = 32, Hkv = 8, D = 128;
  const mp = N / page;
  const perm = Int32Array.from({ length: B * mp }, (_, i) => i);
  for (let i = perm.length - 1; i > 0; i--) { const j = (i * 7919) % (i + 1); [perm[i], perm[j]] = [perm[j], perm[i]]; }
  const e = (shape, dtype = 'float16') => fa.Tensor.empty(shape, { dtype, device: 'cuda' });
  const kc = await e([B * mp, page, Hkv, D]), vc = await e([B * mp, page, Hkv, D]), q = await e([B, H, D]);
  // FA_HOSTPROF_INDEX=host: the index arrays as Int32Arrays (checked and copied by every call)
  const hostIdx = process.env.FA_HOSTPROF_INDEX === 'host';
  const cuQ = Int32Array.from({ length: B + 1 }, (_, i) => i), seqK = new Int32Array(B).fill(N);
  const opts = hostIdx ? { pageTable: perm, seqlensK: seqK, cuSeqlensQ: cuQ, causal: true } : {
    pageTable: await fa.Tensor.from(perm, [B, mp]).to('cuda'),
    seqlensK: await fa.Tensor.from(seqK, [B]).to('cuda'),
    cuSeqlensQ: await fa.Tensor.from(cuQ, [B + 1]).to('cuda'),
    maxSeqlenQ: 1, maxSeqlenK: N, causal: true,
  };
  const given = { ...opts, out: await e([B, H, D]), lse: await e([H, B], 'float32') };
  const q1 = await e([1, 128, 4, 64]), k1 = await e([1, 128, 4, 64]), v1 = await e([1, 128, 4, 64]);
  const paged = async () => { const r = await fa.pagedAttention(q, kc, vc, opts); r.out.dispose(); r.lse.dispose(); };
  const pagedGiven = async () => { await fa.pagedAttention(q, kc, vc, given); };
  const dense = async () => { const r = await fa.flashAttention(q1, k1, v1); r.out.dispose(); r.lse.dispose(); };
  const lines = [];
  const row = (name, us) => { lines.push(`${name.padEnd(52)} ${us.toFixed(2)} us`); console.log(lines[lines.length - 1]); };
  for (let i = 0; i < 2000; i++) await paged();
  row('pagedAttention B1 x 4k page 16 (results disposed)', await hostUs(paged));
  row('pagedAttention, out / lse given', await hostUs(pagedGiven));
  row('flashAttention [1,128,4,64] (results disposed)', await hostUs(dense));
  const realCall = native.call;
  native.call = () => [];
  row('pagedAttention JS only (native call a no-op)', await hostUs(pagedGiven));
  // The time inside the native call itself (hrtime around each call, summed).
  let inNative = 0n;
  native.call = (...args) => { const t0 = process.hrtime.bigint(); try { return realCall(...args); } finally { inNative += process.hrtime.bigint() - t0; } };
  const wrapped = await hostUs(paged, 10);
  row('pagedAttention, native call timed (hrtime around it)', wrapped);
  row('  of which inside native.call', Number(inNative) / 1000 / (10 * 200));
  native.call = realCall;
  // The profile: 20 000 queued calls in rounds of 200 (synchronize between rounds).
  const session = new inspector.Session();
  session.connect();
  await post(session, 'Profiler.enable');
  await post(session, 'Profiler.setSamplingInterval', { interval: 50 });
  await post(session, 'Profiler.start');
  for (let i = 0; i < 100; i++) {
    await fa.synchronize();
    for (let j = 0; j < 200; j++) await paged();
  }
  const { profile } = await post(session, 'Profiler.stop');
  session.disconnect();
  fs.writeFileSync(path.join(outDir, 'paged.cpuprofile'), JSON.stringify(profile));
  const s = selfTimes(profile, 40);
  lines.push('', `profile: ${s.total.toFixed(1)} ms sampled over 20 000 calls; self time per function, ms (us per call):`);
  for (const [k, ms] of s.top) lines.push(`  ${(ms).toFixed(1).padStart(8)} (${(ms / 20).toFixed(2).padStart(6)})  ${k}`);
  fs.writeFileSync(path.join(outDir, 'host-prof.txt'), lines.join('\n') + '\n');
  console.log(lines.slice(-42).join('\n'));
}
main().catch((err) => { console.error(err); process.exitCode = 1; });
