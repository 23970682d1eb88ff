// Inputs shared by the development scripts (scripts/paged-prof.js, scripts/paged-probe.js, scripts/softcap-cost.js, ...):
// a CUDA tensor filled on the GPU, and the seeded page shuffle that `npm run bench -- --varlen`
// uses (bench/cli.ts, pageTable).
'use strict';
const fa = require('../dist/lib/index.js');
const { native } = require('../dist/lib/native.js');
const { DTYPE_CODE, storageOf } = require('../dist/lib/tensor.js');

/** A CUDA tensor of `shape` and `dtype`, filled with random normals from `seed`. */
async function randomDevice(shape, seed, dtype) {
  const t = await fa.Tensor.empty(shape, { dtype, device: 'cuda' });
  native.fillRandom(storageOf(t, 'prefill-inputs', 'tensor').handle, DTYPE_CODE[dtype], seed);
  return t;
}
/** The same in fp16. */
const randomHalf = (shape, seed) => randomDevice(shape, seed, 'float16');

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

module.exports = { randomDevice, randomHalf, shuffled };
