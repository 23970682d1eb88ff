// The softcap's cost: kernel time (CUDA events, median of 30 after 5 warm-up launches) of the forward and backward
// (fp32 unless SOFTCAP_DTYPE says otherwise) with and without a softcap, on the addon this process loads (FA_ADDON_PATH
// picks another build, so two runs compare two builds). One line per cell and softcap:
// "fwd|bwd dtype D B N causal: plain X ms, softcap C Y ms (Y/X)".
// SOFTCAP_DTYPE (default float32) times the fp16 / bf16 kernels instead; SOFTCAP_CAPS (default 30) the softcaps, comma
// separated (at 30 every tile of these N(0, 1) inputs takes the polynomial; at 4 most take the per-score form).
// Usage: FA_ADDON_PATH=build/Release/flash_attention_node.node node scripts/softcap-cost.js
'use strict';
const fa = require('../dist/lib/index.js');
const { benchmarkForward, benchmarkBackward } = require('../dist/lib/attention.js');
const { randomDevice } = require('./prefill-inputs.js');

const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[s.length >> 1]; };
const DTYPE = process.env.SOFTCAP_DTYPE || 'float32';
const CAPS = (process.env.SOFTCAP_CAPS || '30').split(',').map(Number);
const randomInput = (shape, seed) => randomDevice(shape, seed, DTYPE);

async function main() {
  const H = 16;
  for (const D of [64, 128]) for (const N of [1024, 4096]) for (const causal of [false, true]) {
    const B = Math.max(1, 8192 / N);
    const q = await randomInput([B, N, H, D], 1), k = await randomInput([B, N, H, D], 2), v = await randomInput([B, N, H, D], 3);
    const dout = await randomInput([B, N, H, D], 4);
    const t = {};
    for (const softcap of [0, ...CAPS]) {
      const opts = softcap ? { causal, softcap } : { causal };
      const f = median(await benchmarkForward(q, k, v, opts, 5, 30));
      const { out, lse } = await fa.flashAttention(q, k, v, opts);
      const b = median(await benchmarkBackward(dout, q, k, v, out, lse, opts, 5, 30));
      out.dispose(); lse.dispose();
      t[softcap] = { f, b };
    }
    for (const dir of ['f', 'b']) for (const cap of CAPS) {
      const x = t[0][dir], y = t[cap][dir];
      console.log(`${dir === 'f' ? 'fwd' : 'bwd'} ${DTYPE} D${D} B${B} N${N} ${causal ? 'causal' : 'full  '}: plain ${x.toFixed(3)} ms, ` +
        `softcap ${cap} ${y.toFixed(3)} ms (${(y / x).toFixed(3)}x)`);
    }
    for (const x of [q, k, v, dout]) x.dispose();
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
