// Inputs shared by the paged-prefill development scripts (scripts/paged-prof.js, scripts/paged-probe.js):
// an fp16 CUDA tensor filled on the GPU, and the seeded page shuffle that `npm run bench -- --varlen`
// uses (bench/cli.ts, pageTable).
'use strict';
const fa = require('../dist/lib/index.js');
const { native } = require('../dist/lib/native.js');
const { DTYPE_CODE, storageOf } = require('../dist/lib/tensor.js');

/** An fp16 CUDA tensor of `shape`, filled with random normals from `seed`. */
async function randomHalf(shape, seed) {
  const t = await fa.Tensor.empty(shape, { dtype: 'float16', device: 'cuda' });
  native.fillRandom(storageOf(t, 'prefill-inputs', 'tensor').handle, DTYPE_CODE.float16, seed);
  return t;
}

/** 0 .. n-1 shuffled (Fisher-Yates with a 32-bit LCG from `seed`). */
function shuffled(n, seed) {
  const perm = new Int32Array(n);
  for (let i = 0; i < n; i++) perm[i] = i;
  let s = seed >>> 0;
  for (let i = n - 1; i > 0; i--) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    const j = s % (i + 1);
    const t = perm[i]; perm[i] = perm[j]; perm[j] = t;
  }
  return perm;
}

module.exports = { randomHalf, shuffled };
