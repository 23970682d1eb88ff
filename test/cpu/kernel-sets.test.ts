// The CPU backend's kernel sets. The CPU tile kernels are compiled once per instruction set
// (AVX-512, AVX2 + FMA + F16C, and a portable baseline) and the widest one the CPU has is picked at
// run time (buildInfo().cpuKernels); FA_CPU_ISA=avx2 / generic asks for a narrower one. The rest of
// the CPU suite runs the default set; this file runs every set this machine has over random dense
// forward and backward shapes (odd head dims, GQA, small and large tiles, masks and softcap), packed
// and paged calls (decode steps with packed GQA heads, key splits), against float64, and checks
// that each set gives bit-identical results across thread counts. Sets the CPU lacks are skipped,
// and the skip says why.
import { readFileSync } from 'node:fs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { Tensor, buildInfo, flashAttention, flashAttentionBackward } from '../../lib/index';
import { caseName, checkBackwardCase, checkForwardCase, randomCases } from '../helpers/harness';
import { checkPagedCase, checkVarlenCase, pagedName, varlenName } from '../helpers/inference';
import { maskedDenseCases, pagedCases, varlenCases } from '../helpers/inference-cases';
import { Rng, bytesEqual, disposeAll, randomTensor, rawBytes } from '../helpers/reference';
import { CPU_BIG_NS, CPU_DS, CPU_NS } from './shapes';

const SETS = ['avx512', 'avx2', 'generic'] as const;

/** The set the backend uses with FA_CPU_ISA=set (the default set when the CPU lacks that one). */
function kernelsWith(set: string | undefined): string {
  const saved = process.env.FA_CPU_ISA;
  if (set === undefined) delete process.env.FA_CPU_ISA;
  else process.env.FA_CPU_ISA = set;
  try {
    return String(buildInfo().cpuKernels);
  } finally {
    if (saved === undefined) delete process.env.FA_CPU_ISA;
    else process.env.FA_CPU_ISA = saved;
  }
}

/** The x86 features the AVX-512 and AVX2 sets need, from /proc/cpuinfo (null: not Linux x86-64). */
function cpuFlags(): Set<string> | null {
  if (process.platform !== 'linux' || process.arch !== 'x64') return null;
  try {
    const line = readFileSync('/proc/cpuinfo', 'utf8').split('\n').find((l) => l.startsWith('flags'));
    return line ? new Set(line.split(':')[1].trim().split(/\s+/)) : null;
  } catch {
    return null;
  }
}

describe('CPU kernel sets: dispatch', () => {
  const envSet = process.env.FA_CPU_ISA;
  it.skipIf(envSet !== undefined)(`the default is the widest set the CPU has${envSet !== undefined ? ` (skipped: FA_CPU_ISA=${envSet} is set)` : ''}`, () => {
    const flags = cpuFlags();
    const got = kernelsWith(undefined);
    expect(SETS as readonly string[]).toContain(got);
    if (flags === null) return;  // no /proc/cpuinfo to compare with: a known set is all that can be said
    const avx2 = ['avx2', 'fma', 'f16c'].every((f) => flags.has(f));
    const avx512 = avx2 && ['avx512f', 'avx512vl', 'avx512bw', 'avx512dq'].every((f) => flags.has(f));
    expect(got).toBe(avx512 ? 'avx512' : avx2 ? 'avx2' : 'generic');
  });
  it('FA_CPU_ISA=generic always gives the portable set, and a narrower request is honoured', () => {
    expect(kernelsWith('generic')).toBe('generic');
    const def = kernelsWith(undefined);
    const avx2 = kernelsWith('avx2');
    expect(avx2).toBe(def === 'generic' ? 'generic' : 'avx2');
    expect(kernelsWith('no-such-set')).toBe(def);
  });
});

for (const set of SETS) {
  const have = kernelsWith(set) === set;
  const title = `CPU kernel set ${set}${have ? '' : ' (skipped: this CPU does not have it)'}`;
  describe.skipIf(!have)(title, () => {
    const saved = process.env.FA_CPU_ISA;
    beforeAll(() => {
      process.env.FA_CPU_ISA = set;
    });
    afterAll(() => {
      if (saved === undefined) delete process.env.FA_CPU_ISA;
      else process.env.FA_CPU_ISA = saved;
    });
    const seed = 9100 + SETS.indexOf(set) * 10;
    it('is the set in use', () => expect(buildInfo().cpuKernels).toBe(set));
    const fwd = randomCases({ seed, count: 36, Ns: CPU_NS, Ds: CPU_DS, budget: 2e6, bigEvery: 6, bigNs: CPU_BIG_NS, bigBudget: 1.2e7, cpuOptions: true });
    for (const c of fwd) it(`forward ${caseName(c)}`, () => checkForwardCase(c, 'cpu'));
    const bwd = randomCases({ seed: seed + 1, count: 24, Ns: CPU_NS, Ds: CPU_DS, budget: 1.2e6, bigEvery: 6, bigNs: CPU_BIG_NS, bigBudget: 6e6, cpuOptions: true });
    for (const c of bwd) it(`backward ${caseName(c)}`, () => checkBackwardCase(c, 'cpu'));
    for (const c of maskedDenseCases(seed + 2, 8, { Ns: [1, 5, 17, 33, 64, 100], Ds: [3, 16, 33, 64, 128], budget: 2e6, gpu: false })) {
      it(`masked forward ${caseName(c)}`, () => checkForwardCase(c, 'cpu'));
    }
    for (const c of maskedDenseCases(seed + 3, 6, { Ns: [5, 17, 33, 64], Ds: [8, 40, 64], budget: 8e5, gpu: false })) {
      it(`masked backward ${caseName(c)}`, () => checkBackwardCase(c, 'cpu'));
    }
    for (const c of varlenCases(seed + 4, 6, { maxLen: 70, Ds: [16, 40, 64], maxB: 5, backward: true, gpu: false })) {
      it(`varlen ${varlenName(c)}`, () => checkVarlenCase(c, 'cpu'));
    }
    for (const c of pagedCases(seed + 5, 8, { maxBefore: 3000, maxFresh: 12, Ds: [16, 40, 64, 128], maxB: 3, gpu: false, pageSizes: [1, 7, 16], groups: [1, 3, 4, 8] })) {
      it(`paged ${pagedName(c)}`, () => checkPagedCase(c, 'cpu'));
    }
    it('GQA 8/2 causal prefill and decode: threads 1, 2, 3 and default give identical bits (forward and backward)', async () => {
      const rng = new Rng(seed + 6);
      for (const [Nq, Nk, D, dtype] of [[150, 150, 72, 'float16'], [1, 2500, 64, 'bfloat16'], [70, 90, 128, 'float32']] as const) {
        const q = randomTensor(rng, [2, Nq, 8, D], dtype);
        const k = randomTensor(rng, [2, Nk, 2, D], dtype);
        const v = randomTensor(rng, [2, Nk, 2, D], dtype);
        const dout = randomTensor(rng, [2, Nq, 8, D], dtype);
        const owned: Tensor[] = [q.tensor, k.tensor, v.tensor, dout.tensor];
        try {
          const run = async (threads?: number) => {
            const opts = { causal: true, ...(threads ? { cpu: { threads } } : {}) };
            const f = await flashAttention(q.tensor, k.tensor, v.tensor, opts);
            owned.push(f.out, f.lse);
            const bits = [await rawBytes(f.out), await rawBytes(f.lse)];
            if (Nq > 1) {
              const g = await flashAttentionBackward(dout.tensor, q.tensor, k.tensor, v.tensor, f.out, f.lse, opts);
              owned.push(g.dq, g.dk, g.dv);
              bits.push(await rawBytes(g.dq), await rawBytes(g.dk), await rawBytes(g.dv));
            }
            return bits;
          };
          const base = await run(1);
          for (const threads of [2, 3, undefined]) {
            const got = await run(threads);
            got.forEach((b, i) => expect(bytesEqual(b, base[i]), `${dtype} Nq ${Nq} Nk ${Nk}: output ${i} differs with threads=${threads}`).toBe(true));
          }
        } finally {
          disposeAll(...owned);
        }
      }
    });
  });
}
