// Grid-limit checks: a 70000-row sequence (B=1, H=1, D=64 and D=128 (its 176-key tiles), float16;
// sampled rows compared with a float64 reference computed for those rows only) and batch*heads beyond 65535, the CUDA limit of
// gridDim.y / gridDim.z. Skipped (visibly) without a CUDA device.
import { expect, it } from 'vitest';
import { flashAttention } from '../../lib/index';
import { AttnCase, Checker, checkForwardCase, checkLowp } from '../helpers/harness';
import { AttnDims, Rng, describeGpu, disposeAll, fmt, maxAbsErr, naiveLowp, randomTensor, refForward } from '../helpers/reference';

describeGpu('CUDA long sequences and large grids', () => {
  for (const [D, causal] of [[64, false], [64, true], [128, false]] as const) {
    it(`N = 70000 rows, D = ${D}, float16${causal ? ', causal' : ''}: sampled rows match float64`, async () => {
      const N = 70000;
      const rng = new Rng((causal ? 70001 : 70000) + D);
      const host = [randomTensor(rng, [1, N, 1, D], 'float16'), randomTensor(rng, [1, N, 1, D], 'float16'), randomTensor(rng, [1, N, 1, D], 'float16')];
      const [q, k, v] = await Promise.all(host.map((h) => h.tensor.to('cuda')));
      host.forEach((h) => h.tensor.dispose());
      const r = await flashAttention(q, k, v, { causal });
      expect(r.out.shape).toEqual([1, N, 1, D]);
      expect(r.out.device).toBe('cuda:0');
      const out = await r.out.toFloat32Array();
      const lse = await r.lse.toFloat32Array();
      disposeAll(q, k, v, r.out, r.lse);
      const rows = [0, 1, 63, 64, 127, 128, 4095, 65534, 65535, 65536, 65537, 69871, 69999];
      for (let t = 0; t < 8; t++) rows.push(rng.int(0, N - 1));
      const ck = new Checker(`N=${N} D=${D}${causal ? ' causal' : ''}`);
      const [qv, kv, vv] = host.map((h) => h.values);
      for (const i of rows) {
        // Row i alone is the problem (1 query, keys 0..last) without a mask.
        const last = causal ? i : N - 1;
        const d: AttnDims = { B: 1, Nq: 1, Nk: last + 1, H: 1, Hkv: 1, D, causal: false, scale: 1 / Math.sqrt(D), layout: 'bshd' };
        const qi = qv.subarray(i * D, (i + 1) * D);
        const ks = kv.subarray(0, (last + 1) * D);
        const vs = vv.subarray(0, (last + 1) * D);
        const ref = refForward(qi, ks, vs, d);
        const naive = naiveLowp(qi, ks, vs, null, d, 'float16');
        checkLowp(ck, `row ${i} out`, 'float16', out.subarray(i * D, (i + 1) * D), ref.out, naive.out);
        const eLse = Math.abs(lse[i] - ref.lse[0]);
        const tol = Math.max(2 * maxAbsErr(naive.lse, ref.lse), 1e-4 * (1 + Math.abs(ref.lse[0])));
        ck.ok(`row ${i} lse error ${fmt(eLse)} > ${fmt(tol)}`, eLse <= tol);
      }
      ck.done();
    });
  }

  const grid: AttnCase[] = [
    { seed: 1, B: 70000, Nq: 2, Nk: 3, H: 1, Hkv: 1, D: 8, causal: false, layout: 'bshd', dtype: 'float16' },
    { seed: 2, B: 1, Nq: 3, Nk: 2, H: 70000, Hkv: 70000, D: 8, causal: true, layout: 'bhsd', dtype: 'bfloat16' },
    { seed: 3, B: 300, Nq: 5, Nk: 5, H: 256, Hkv: 64, D: 16, causal: true, layout: 'bshd', dtype: 'float16' },
    { seed: 4, B: 66000, Nq: 1, Nk: 4, H: 1, Hkv: 1, D: 32, causal: false, layout: 'bhsd', dtype: 'float32' },
  ];
  for (const c of grid) {
    it(`B*H = ${c.B * c.H} (> 65535): B=${c.B} H=${c.H}/${c.Hkv} Nq=${c.Nq} Nk=${c.Nk} D=${c.D} ${c.dtype}`, () => checkForwardCase(c, 'cuda'));
  }
});

