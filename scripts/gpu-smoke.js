#!/usr/bin/env node
// Small GPU workload for compute-sanitizer runs (memcheck, racecheck): many calls queued back to
// back with inputs disposed while the work that reads them is still queued, covering every dtype,
// causal with Nq != Nk, sliding windows and softcap, GQA, odd lengths, both layouts, a head dim that
// rounds up to a wider tile, forward and backward (atomic and deterministic), packed (varlen)
// forward and backward, appendKV with rotary into a paged cache (page sizes 1 and 16) and
// pagedAttention (decode with split-KV, a mixed prefill/decode batch), and mergeAttention. Checks
// every result is finite; exits 1 on any failure. Each line carries the seconds since the start.
// FA_SMOKE_CASES=0,2 (development): only those dense cases (0-based), and no varlen / paged part;
// bisecting a sanitizer run.
'use strict';
const {
  Tensor, flashAttention, flashAttentionBackward, flashAttentionVarlen, flashAttentionVarlenBackward, appendKV,
  pagedAttention, mergeAttention, synchronize, buildInfo, devices,
} = require('..');

if (devices().length === 0) {
  console.error('gpu-smoke: no CUDA device');
  process.exit(2);
}
const rand = (n, seed) => {
  let s = seed;
  return Float32Array.from({ length: n }, () => {
    s = (s * 1103515245 + 12345) >>> 0;
    return (s / 2 ** 32 - 0.5) * 2;
  });
};
const up = (data, shape, dtype) => Tensor.from(data, shape, { dtype }).to('cuda');
const finite = async (t) => (await t.toFloat32Array()).every(Number.isFinite);

const cases = [
  { B: 1, Nq: 7, Nk: 129, H: 2, Hkv: 1, D: 64, dtype: 'float16', causal: true, layout: 'bshd' },
  { B: 2, Nq: 130, Nk: 67, H: 4, Hkv: 2, D: 128, dtype: 'bfloat16', causal: true, layout: 'bhsd' },
  { B: 1, Nq: 65, Nk: 65, H: 2, Hkv: 2, D: 40, dtype: 'float16', causal: false, layout: 'bshd', window: [16, 3] },
  { B: 1, Nq: 33, Nk: 200, H: 3, Hkv: 3, D: 256, dtype: 'bfloat16', causal: false, layout: 'bshd', softcap: 30 },
  { B: 1, Nq: 100, Nk: 100, H: 2, Hkv: 1, D: 64, dtype: 'float32', causal: true, layout: 'bshd', window: [20, -1] },
  { B: 1, Nq: 17, Nk: 50, H: 2, Hkv: 2, D: 96, dtype: 'float32', causal: false, layout: 'bhsd', softcap: 10 },
  // Head dims whose Hopper forward runs a wider wgmma tile (96 -> 128, 160 -> 192) or the W 192 one.
  { B: 1, Nq: 131, Nk: 77, H: 2, Hkv: 1, D: 192, dtype: 'float16', causal: true, layout: 'bshd' },
  { B: 2, Nq: 45, Nk: 260, H: 2, Hkv: 2, D: 160, dtype: 'bfloat16', causal: false, layout: 'bhsd', window: [40, 8] },
  { B: 1, Nq: 70, Nk: 70, H: 3, Hkv: 1, D: 96, dtype: 'float16', causal: false, layout: 'bshd', softcap: 20 },
  // Longer walks of the warp-specialised backward (the Q / dO ring wraps several times, GQA groups
  // of 4 and 3, a ragged last row block and key block).
  { B: 2, Nq: 333, Nk: 290, H: 4, Hkv: 1, D: 128, dtype: 'float16', causal: false, layout: 'bshd' },
  { B: 1, Nq: 300, Nk: 400, H: 3, Hkv: 1, D: 64, dtype: 'bfloat16', causal: true, layout: 'bhsd', softcap: 15 },
  // The W 256 backward's deterministic turns over several key blocks (causal, more keys than queries).
  { B: 1, Nq: 260, Nk: 330, H: 2, Hkv: 1, D: 256, dtype: 'float16', causal: true, layout: 'bshd' },
  // The W 256 forward's 80-key tiles (from 2048 keys): 26 key blocks, the last one ragged.
  { B: 1, Nq: 130, Nk: 2050, H: 2, Hkv: 1, D: 256, dtype: 'bfloat16', causal: false, layout: 'bshd' },
  // More tiles than SMs (160-240): each block of the persistent forward walks several tiles, so the
  // consumers' turn ring, the Q hand-over and the K / V ring run on across tile boundaries.
  { B: 2, Nq: 520, Nk: 520, H: 16, Hkv: 4, D: 128, dtype: 'float16', causal: true, layout: 'bshd' },
  { B: 2, Nq: 700, Nk: 700, H: 20, Hkv: 5, D: 64, dtype: 'bfloat16', causal: false, layout: 'bshd' },
];

(async () => {
  const bwd = buildInfo().cudaBackward === true;
  let bad = 0;
  const t0 = Date.now();
  const report = (name, ok) => {
    console.log(`${name}: ok=${ok} (${((Date.now() - t0) / 1000).toFixed(1)} s)`);
    if (!ok) bad++;
  };
  const only = process.env.FA_SMOKE_CASES ? new Set(process.env.FA_SMOKE_CASES.split(',').map(Number)) : null;
  // Dense forward / backward, every input disposed right after the last call that reads it.
  for (const [ci, c] of cases.entries()) {
    if (only && !only.has(ci)) continue;
    const shape = (N, H) => (c.layout === 'bhsd' ? [c.B, H, N, c.D] : [c.B, N, H, c.D]);
    const mk = (N, H, seed) => up(rand(c.B * N * H * c.D, seed), shape(N, H), c.dtype);
    const [q, k, v, dout] = await Promise.all([mk(c.Nq, c.H, 1), mk(c.Nk, c.Hkv, 2), mk(c.Nk, c.Hkv, 3), mk(c.Nq, c.H, 4)]);
    const opts = { causal: c.causal, layout: c.layout, window: c.window, softcap: c.softcap };
    const { out, lse } = await flashAttention(q, k, v, opts);
    const grads = [];
    if (bwd) {
      for (const deterministic of [false, true]) grads.push(await flashAttentionBackward(dout, q, k, v, out, lse, { ...opts, deterministic }));
    }
    q.dispose(); k.dispose(); v.dispose(); dout.dispose(); lse.dispose();
    let ok = await finite(out);
    for (const g of grads) for (const t of [g.dq, g.dk, g.dv]) ok = ok && (await finite(t));
    report(JSON.stringify(c), ok);
  }
  // Varlen forward + backward (an empty sequence included), at head dims of the Hopper backward's
  // two splits (64, 96: key split in tiles 64 / 128; 192: row split in 256).
  for (const D of only ? [] : [64, 96, 192]) {
    const lens = [5, 0, 130, 64], H = 4, Hkv = 2;
    const cu = Int32Array.from([0, 5, 5, 135, 199]);
    const T = 199;
    const [q, k, v, dout] = await Promise.all([up(rand(T * H * D, 5), [T, H, D], 'float16'), up(rand(T * Hkv * D, 6), [T, Hkv, D], 'float16'),
      up(rand(T * Hkv * D, 7), [T, Hkv, D], 'float16'), up(rand(T * H * D, 8), [T, H, D], 'float16')]);
    const opts = { cuSeqlensQ: cu, cuSeqlensK: cu, causal: true, window: [40, 0] };
    const r = await flashAttentionVarlen(q, k, v, opts);
    const g = bwd ? await flashAttentionVarlenBackward(dout, q, k, v, r.out, r.lse, opts) : null;
    q.dispose(); k.dispose(); v.dispose(); dout.dispose();
    let ok = await finite(r.out);
    if (g) for (const t of [g.dq, g.dk, g.dv]) ok = ok && (await finite(t));
    report(`varlen lens=${lens} D=${D}`, ok);
  }
  // Paged cache: appendKV with rotary, then decode (split-KV) and a mixed batch.
  for (const page of only ? [] : [1, 16, 24]) {  // 24: the warp-specialised kernel's boxes of 8 rows
    const B = 3, Hkv = 2, H = 8, D = 128, before = [300, 7, 1000], fresh = [1, 300, 1];
    const total = before.map((x, i) => x + fresh[i]);
    const maxPages = Math.ceil(Math.max(...total) / page);
    const numPages = B * maxPages + 2;
    const table = new Int32Array(B * maxPages);
    for (let i = 0; i < table.length; i++) table[i] = (i * 7 + 3) % numPages;  // a permutation: 7 is coprime to numPages? kept unique below
    const used = new Set();
    for (let i = 0; i < table.length; i++) { let p = table[i]; while (used.has(p)) p = (p + 1) % numPages; used.add(p); table[i] = p; }
    const kc = await up(rand(numPages * page * Hkv * D, 9), [numPages, page, Hkv, D], 'bfloat16');
    const vc = await up(rand(numPages * page * Hkv * D, 10), [numPages, page, Hkv, D], 'bfloat16');
    const cuNew = Int32Array.from([0, 1, 301, 302]);
    const [kn, vn] = await Promise.all([up(rand(302 * Hkv * D, 11), [302, Hkv, D], 'bfloat16'), up(rand(302 * Hkv * D, 12), [302, Hkv, D], 'bfloat16')]);
    const maxPos = 2048, half = 32;
    const cos = await Tensor.from(Float32Array.from({ length: maxPos * half }, (_, i) => Math.cos(i * 0.001)), [maxPos, half]).to('cuda');
    const sin = await Tensor.from(Float32Array.from({ length: maxPos * half }, (_, i) => Math.sin(i * 0.001)), [maxPos, half]).to('cuda');
    await appendKV(kc, vc, kn, vn, { pageTable: table, cuSeqlensNew: cuNew, seqlensBefore: Int32Array.from(before), rotary: { cos, sin } });
    kn.dispose(); vn.dispose();
    const q = await up(rand(302 * H * D, 13), [302, H, D], 'bfloat16');
    const mixed = await pagedAttention(q, kc, vc, { pageTable: table, seqlensK: Int32Array.from(total), cuSeqlensQ: cuNew, causal: true, rotary: { cos, sin, interleaved: true } });
    const q1 = await up(rand(3 * H * D, 14), [3, H, D], 'bfloat16');
    const decode = await pagedAttention(q1, kc, vc, { pageTable: table, seqlensK: Int32Array.from(total), cuSeqlensQ: Int32Array.from([0, 1, 2, 3]), numSplits: 5, softcap: 20 });
    q.dispose(); q1.dispose(); kc.dispose(); vc.dispose(); cos.dispose(); sin.dispose();
    report(`paged page=${page}`, (await finite(mixed.out)) && (await finite(decode.out)));
    // Merge the two decode halves of one problem: any two partials will do here.
    const m = await mergeAttention([decode.out, decode.out], [decode.lse, decode.lse]);
    report(`merge page=${page}`, await finite(m.out));
  }
  await synchronize();
  process.exit(bad ? 1 : 0);
})().catch((e) => { console.error(e); process.exit(1); });
