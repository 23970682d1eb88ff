// CUDA forward (out and lse) against the float64 reference: handpicked shapes (last row tiles with
// idle warpgroups among them) and 330 random shapes across float16,
// bfloat16 and the float32 path, head dims that are multiples of 8 up to 256 (40, 80, 160
// included), causal, GQA/MQA, odd lengths up to 1000, Nq != Nk, both layouts. Inputs are uploaded
// with `await t.to('cuda')`, outputs must live on 'cuda:0' and are downloaded with toFloat32Array.
// Same accuracy rules as the CPU suites (test/helpers/harness.ts): float32 path relative L2 <= 1e-5,
// float16/bfloat16 by the 2x-naive rule. Skipped (visibly) without a CUDA device; fails under
// FA_REQUIRE_GPU=1 when there is none.
import { expect, it } from 'vitest';
import { flashAttention } from '../../lib/index';
import { AttnCase, caseName, checkForwardCase, randomCases } from '../helpers/harness';
import { Rng, bytesEqual, describeGpu, disposeAll, randomTensor, rawBytes } from '../helpers/reference';
import { GPU_BIG_NS, GPU_DS, GPU_NS } from './shapes';


function c(p: Partial<AttnCase> & Pick<AttnCase, 'Nq' | 'Nk' | 'D' | 'dtype'>, seed: number): AttnCase {
  return { B: 1, H: 1, Hkv: 1, causal: false, layout: 'bshd', seed, ...p };
}

const HANDPICKED: AttnCase[] = [];
{
  let seed = 50000;
  for (const dtype of ['float16', 'bfloat16', 'float32'] as const) {
    for (const D of [40, 80, 160, 8, 256]) {
      HANDPICKED.push(c({ Nq: 129, Nk: 127, D, dtype, H: 4, Hkv: 2, causal: true }, seed++));
    }
    HANDPICKED.push(c({ Nq: 1000, Nk: 1000, D: 64, dtype, H: 2, Hkv: 1, causal: true }, seed++));
    HANDPICKED.push(c({ Nq: 1, Nk: 1000, D: 128, dtype, H: 8, Hkv: 2 }, seed++)); // decode
    HANDPICKED.push(c({ Nq: 1000, Nk: 7, D: 64, dtype, causal: true, layout: 'bhsd' }, seed++)); // 993 rows see no key
    HANDPICKED.push(c({ Nq: 7, Nk: 1000, D: 96, dtype, causal: true }, seed++));
    HANDPICKED.push(c({ Nq: 1, Nk: 1, D: 32, dtype }, seed++));
    HANDPICKED.push(c({ Nq: 64, Nk: 64, D: 128, dtype, B: 4, H: 16, Hkv: 4, layout: 'bhsd' }, seed++));
    HANDPICKED.push(c({ Nq: 257, Nk: 257, D: 256, dtype, H: 2, Hkv: 1, causal: true }, seed++)); // MQA
    HANDPICKED.push(c({ Nq: 129, Nk: 65, D: 72, dtype, scale: 0.02 }, seed++));
    HANDPICKED.push(c({ Nq: 100, Nk: 100, D: 64, dtype, scale: 0.5 }, seed++));
    // Last row tiles whose last warpgroups hold no row (the Hopper kernel's idle walk): 192-row
    // tiles at D 64 (320 = 192 + 128, 200 = 192 + 8, 2000 = 10 * 192 + 80), 128-row tiles at D 128
    // / 256 (130 = 128 + 2, 300 = 256 + 44).
    HANDPICKED.push(c({ Nq: 320, Nk: 300, D: 64, dtype, H: 2, Hkv: 1 }, seed++));
    HANDPICKED.push(c({ Nq: 200, Nk: 517, D: 64, dtype, B: 2 }, seed++));
    HANDPICKED.push(c({ Nq: 2000, Nk: 2000, D: 64, dtype, causal: true }, seed++));
    HANDPICKED.push(c({ Nq: 130, Nk: 260, D: 128, dtype, H: 2, Hkv: 2 }, seed++));
    HANDPICKED.push(c({ Nq: 300, Nk: 300, D: 256, dtype, causal: true }, seed++));
  }
  // float32 under a softcap with scores far past it (scale * q.k ~ 5-20 softcaps): the softcap's tanh
  // must be fp32-accurate (the fast-math tanhf gave relative L2 1e-5 to 4e-5 here; tanh_precise in
  // csrc/cuda/attn_pieces.cuh). Shapes from the black-box fuzz's findings (scripts/fuzz-api.mjs).
  // The last two: a softcap ~30 standard deviations of scale * q.k above it, so every warp's tile takes the polynomial
  // (tanh_poly), and one where a tile's largest score sits near the polynomial's bound, 0.625 softcaps (about 3.2
  // standard deviations), so that some tiles take it and others libdevice's tanhf in the same call.
  for (const [D, scale, softcap, causal] of [[224, 1.36, 27.4, true], [208, 0.47, 34.2, true], [128, 0.5, 20.6, false], [88, 0.64, 8.1, true],
    [64, 0.125, 50, false], [136, 0.3, 18, true],
    // a negative scale: the polynomial's range test must read |scale| (it read the signed scale, so every tile took the
    // polynomial; the GPU fuzz found it, seed 56002 case 1451)
    [160, -1.36, 27.4, true], [64, -0.64, 8.1, false], [136, -0.3, 18, true]] as const) {
    HANDPICKED.push(c({ Nq: 96, Nk: 160, D, dtype: 'float32', H: 4, Hkv: 1, causal, scale, softcap }, seed++));
  }
  // float16 / bfloat16 under a softcap far above the scores (3e3-3e4: tanh barely bends them). The fp16 / bf16 kernels'
  // tanh, 1 - 2 / (e^2x + 1), cancels for small x to an absolute error ~1e-7 that the softcap multiplies: lse was off
  // by up to 1e-3 (the GPU fuzz found it, seed 57002, with softcaps up to 1e4). Now the polynomial where the tile's
  // scores are in its range (softcap_scores, csrc/cuda/attn_pieces.cuh). lse is held to the fp32 rule (lseFp32Rule).
  // The last two: softcap 4, where scores (sd ~4) put nearly every warp's tile past the polynomial's range (the
  // per-score form), and softcap 20, whose range (12.5, ~3.2 sd) some tiles of 1-2k scores keep and others do not
  // (both forms in one call).
  for (const dtype of ['float16', 'bfloat16'] as const) {
    for (const [D, scale, softcap, causal] of [[64, 0.125, 3e4, true], [128, -0.09, 12000, false], [96, 0.1, 3000, true],
      [256, 0.0625, 30000, false], [128, 0.35, 4, true], [128, 0.35, 20, true]] as const) {
      HANDPICKED.push(c({ Nq: 96, Nk: 160, D, dtype, H: 4, Hkv: 1, causal, scale, softcap, lseFp32Rule: true }, seed++));
    }
    // large scores over many key blocks: the Hopper forward's lazy softmax step (lazy_softmax_step, csrc/cuda/
    // fwd_common.cuh) keeps a row's reference max until a block's max passes it by more than 2^8; at these scales
    // (scale * q.k with a standard deviation of 4-35) blocks pass it often (the exact step) and others stay within
    // it with P up to 2^8 (the lazy step); at 0.25 nearly every block stays within it. D 192 / 256: the reference kept
    // per row (lazy_max_softmax_step).
    for (const [Nq, Nk, D, scale, causal] of [[300, 1500, 128, 1.0, false], [700, 700, 64, 0.6, true], [200, 2000, 128, 0.25, false],
      [129, 1000, 96, 3.0, false], [520, 1100, 128, 2.0, true], [300, 900, 256, 1.0, true], [200, 1000, 192, 0.3, false]] as const) {
      HANDPICKED.push(c({ Nq, Nk, D, dtype, H: 2, Hkv: 1, causal, scale }, seed++));
    }
    // square causal calls: the Hopper forward's first (diagonal) block of a warpgroup whose rows see only its lower
    // half, whose upper half the kernel does not compute
    for (const D of [64, 128]) {
      HANDPICKED.push(c({ Nq: 256, Nk: 256, D, dtype, H: 2, Hkv: 1, causal: true, softcap: 30000, lseFp32Rule: true }, seed++));
    }
  }
}

const RANDOM = randomCases({
  seed: 3003,
  count: 330,
  Ns: GPU_NS,
  Ds: GPU_DS,
  budget: 8e6,
  bigEvery: 15,
  bigNs: GPU_BIG_NS,
  bigBudget: 6e7,
  heads: [1, 1, 2, 4, 8],
  groups: [1, 1, 2, 4, 8],
  batches: [1, 1, 2, 3, 4],
});

describeGpu('CUDA forward: handpicked shapes vs float64', () => {
  for (const tc of HANDPICKED) it(caseName(tc), () => checkForwardCase(tc, 'cuda'));
});

describeGpu('CUDA forward: 330 random shapes vs float64', () => {
  it('the random set covers the required features', () => {
    const has = (f: (x: AttnCase) => boolean) => RANDOM.some(f);
    expect(RANDOM.length).toBeGreaterThanOrEqual(300);
    for (const dt of ['float32', 'float16', 'bfloat16']) expect(has((x) => x.dtype === dt)).toBe(true);
    for (const D of [40, 80, 160, 256]) expect(has((x) => x.D === D), `head dim ${D}`).toBe(true);
    expect(has((x) => x.layout === 'bhsd') && has((x) => x.layout === 'bshd')).toBe(true);
    expect(has((x) => x.causal && x.Nq > x.Nk) && has((x) => x.causal && x.Nq < x.Nk)).toBe(true);
    expect(has((x) => x.Hkv === 1 && x.H > 1) && has((x) => x.Hkv > 1 && x.H > x.Hkv)).toBe(true);
    for (const N of [1, 7, 127, 129, 1000]) expect(has((x) => x.Nq === N || x.Nk === N), `length ${N}`).toBe(true);
  });
  for (const tc of RANDOM) it(caseName(tc), () => checkForwardCase(tc, 'cuda'));
});

describeGpu('CUDA forward: repeatability', () => {
  for (const dtype of ['float16', 'bfloat16', 'float32'] as const) {
    it(`${dtype}: repeated runs give bit-identical out and lse`, async () => {
      const rng = new Rng(606);
      const host = [
        randomTensor(rng, [2, 333, 8, 128], dtype),
        randomTensor(rng, [2, 333, 2, 128], dtype),
        randomTensor(rng, [2, 333, 2, 128], dtype),
      ];
      const [q, k, v] = await Promise.all(host.map((h) => h.tensor.to('cuda')));
      host.forEach((h) => h.tensor.dispose());
      const runs: Uint8Array[][] = [];
      for (let i = 0; i < 3; i++) {
        const r = await flashAttention(q, k, v, { causal: true });
        runs.push([await rawBytes(r.out), await rawBytes(r.lse)]);
        disposeAll(r.out, r.lse);
      }
      for (const r of runs.slice(1)) {
        expect(bytesEqual(r[0], runs[0][0])).toBe(true);
        expect(bytesEqual(r[1], runs[0][1])).toBe(true);
      }
      disposeAll(q, k, v);
    });
  }
});

