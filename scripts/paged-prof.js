// One call each of the packed (varlen) prefill and of the paged prefill at the given page sizes, on
// the sequences of `npm run bench -- --varlen` (fp16, D 128, H 16, causal, lengths 100..8k, 16k
// tokens, pages shuffled), for ncu (development tool for issue 11's paged prefill: what the paged
// kernel does that the packed one does not). Inputs are filled before the timed calls; every call
// is synchronized, so each kernel runs alone. Usage: node scripts/paged-prof.js [page ...]
'use strict';
const fa = require('../dist/lib/index.js');
const { randomHalf: rnd, shuffled } = require('./prefill-inputs.js');

async function main() {
  const pageSizes = process.argv.slice(2).map(Number).filter((x) => x > 0);
  const H = 16, D = 128;
  const lens = [8192, 3000, 1800, 1200, 700, 500, 300, 200, 150, 100, 242];
  const total = lens.reduce((a, b) => a + b, 0);
  const maxL = Math.max(...lens);
  const cu = Int32Array.from({ length: lens.length + 1 }, (_, i) => lens.slice(0, i).reduce((a, b) => a + b, 0));
  const q = await rnd([total, H, D], 31), k = await rnd([total, H, D], 32), v = await rnd([total, H, D], 33);
  const cuT = await fa.Tensor.from(cu, [cu.length]).to('cuda');
  const caches = [];
  for (const page of pageSizes.length ? pageSizes : [16, 256]) {
    const maxPages = Math.ceil(maxL / page), pages = lens.length * maxPages;
    caches.push({
      page,
      kc: await rnd([pages, page, H, D], 34), vc: await rnd([pages, page, H, D], 35),
      pt: await fa.Tensor.from(shuffled(pages, 7), [lens.length, maxPages]).to('cuda'),
      sk: await fa.Tensor.from(Int32Array.from(lens), [lens.length]).to('cuda'),
    });
  }
  await fa.synchronize();
  const t0 = performance.now();
  let r = await fa.flashAttentionVarlen(q, k, v, { cuSeqlensQ: cuT, cuSeqlensK: cuT, maxSeqlenQ: maxL, maxSeqlenK: maxL, causal: true });
  await fa.synchronize();
  console.log(`varlen: ${(performance.now() - t0).toFixed(3)} ms (first call)`);
  r.out.dispose(); r.lse.dispose();
  for (const c of caches) {
    const t1 = performance.now();
    r = await fa.pagedAttention(q, c.kc, c.vc, { pageTable: c.pt, seqlensK: c.sk, cuSeqlensQ: cuT, maxSeqlenQ: maxL, maxSeqlenK: maxL, causal: true });
    await fa.synchronize();
    console.log(`paged page ${c.page}: ${(performance.now() - t1).toFixed(3)} ms (first call)`);
    r.out.dispose(); r.lse.dispose();
  }
}


main().catch((e) => { console.error(e); process.exit(1); });
