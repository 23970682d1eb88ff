// The softcap's cost in paged prefill: GPU time (CUDA events, median of 30 after 5 warm-up launches) of pagedAttention
// (fp16, causal, a shuffled cache) with and without a softcap, on the addon this process loads (FA_ADDON_PATH picks
// another build, so two runs compare two builds). Sequence lengths are drawn off the page and key-block sizes, so that
// most row tiles read a sequence's end inside a page (the Hopper kernel's tail rows: zeroed in V always, in K too under
// a softcap). One line per cell: "paged D.. page P lengths ...: plain X ms, softcap C Y ms (Y/X)".
// Usage: FA_ADDON_PATH=build/Release/flash_attention_node.node node scripts/softcap-paged-cost.js
'use strict';
const fa = require('../dist/lib/index.js');
const { benchmarkPaged } = require('../dist/lib/inference.js');
const { randomDevice, shuffled } = require('./prefill-inputs.js');

const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[s.length >> 1]; };
const CAP = Number(process.env.SOFTCAP_CAP || 30);

// lengths: `count` of them from [lo, hi], none a multiple of 8 (an LCG from `seed`)
function lengths(count, lo, hi, seed) {
  const out = [];
  let s = seed >>> 0;
  while (out.length < count) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    const n = lo + (s % (hi - lo + 1));
    if (n % 8 !== 0) out.push(n);
  }
  return out;
}

async function main() {
  const Hkv = 8, group = 4, H = Hkv * group;
  const shapes = [
    { name: 'short', lens: lengths(64, 60, 700, 11) },
    { name: 'long', lens: lengths(6, 1500, 4000, 12) },
  ];
  for (const D of [64, 128]) for (const page of [16, 64]) for (const sh of shapes) {
    const lens = sh.lens, B = lens.length, total = lens.reduce((a, b) => a + b, 0), maxL = Math.max(...lens);
    const maxPages = Math.ceil(maxL / page), pages = B * maxPages;
    const perm = shuffled(pages, 7);
    const q = await randomDevice([total, H, D], 21, 'float16');
    const kc = await randomDevice([pages, page, Hkv, D], 22, 'float16');
    const vc = await randomDevice([pages, page, Hkv, D], 23, 'float16');
    const cu = Int32Array.from({ length: B + 1 }, (_, i) => lens.slice(0, i).reduce((a, b) => a + b, 0));
    const pt = await fa.Tensor.from(perm, [B, maxPages]).to('cuda');
    const sk = await fa.Tensor.from(Int32Array.from(lens), [B]).to('cuda');
    const cuT = await fa.Tensor.from(cu, [B + 1]).to('cuda');
    const base = { pageTable: pt, seqlensK: sk, cuSeqlensQ: cuT, maxSeqlenQ: maxL, maxSeqlenK: maxL, causal: true };
    const plain = median(await benchmarkPaged(q, kc, vc, base, 5, 30));
    const capped = median(await benchmarkPaged(q, kc, vc, { ...base, softcap: CAP }, 5, 30));
    console.log(`paged D${D} page ${page} ${sh.name} (B ${B}, ${total} tokens, H ${H}/${Hkv}): plain ${plain.toFixed(3)} ms, ` +
      `softcap ${CAP} ${capped.toFixed(3)} ms (${(capped / plain).toFixed(3)}x)`);
    for (const t of [q, kc, vc, pt, sk, cuT]) t.dispose();
  }
}
main().catch((e) => { console.error(e); process.exit(1); });
