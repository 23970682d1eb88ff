// Cases of the black-box fuzz (scripts/fuzz-api.mjs) that once failed on a GPU, rerun one by one through the built
// package as a user's process would (the fuzz's own float64 reference, its fp32-naive rule for lse). GPU only: the fuzz
// draws a case from the build's capabilities on the device, so seed and case number name the same call only on a GPU
// of the same kind (sm90, the 90a build); elsewhere they are other random cases. A change to the fuzz's draws changes
// them too; the list then needs the new numbers of such calls (the fuzz's log names its reruns).
//
// Seed 57002 (H100, fifty-seventh session): 17 fp16 / bf16 calls under softcaps of 248-8851 (dense, varlen, paged
// prefill, split decode, forward and backward) whose lse was off by up to 23x what the rule allows: the kernels' tanh
// cancelled for small scores, and the softcap multiplied its error (softcap_scores, csrc/cuda/attn_pieces.cuh). Listed:
// the 11 that softcap_scores fixed on an H100 (fifty-eighth session), and 1102 / 5164, which the vote's first form sent
// to tanh_fast by reading the Hopper forward's unset trimmed half (left out of the vote since; passed on an H100, sixty-first
// session). Left out: 1231, 3139 and 5107 (the fuzz's scale draw changed after that run, c8257ee, so those numbers name
// other calls now). 3808 (listed since the sixty-second session): the garbage a page holds past its sequence's end sent
// the vote to tanh_fast; the kernels now zero those K rows in shared memory (the decode kernel's tensor-map tiles, the
// Hopper paged forward's last key block under a softcap).
//
// Seed 58001 (H100, the sixty-first session's c58 call): 432 and 1404, paged fp16 / bf16 prefill at softcaps 993 / 723,
// the same page garbage in the Hopper paged forward's last box (passed on an H100 with the fix, sixty-second session).
// And 151, an fp32 backward at softcap 0.013 whose dq / dk read 1.6x the rule: the rule's floor left out how the
// softcap's factor 1 - tanh^2 moves with the score's own rounding (scripts/fuzz-api.mjs, attnRef). With that term the
// H100's recorded error reads 0.08x the rule (checked on the CPU with FUZZ_DRAW_AS=cuda, the same inputs; sixty-second
// session); on an H100 it then read 0.081x the rule (sixty-third session, the whole list passing).
import { existsSync } from 'node:fs';
import path from 'node:path';
import { expect, it } from 'vitest';
import { devices } from '../../lib/index';
import { runFuzz } from '../helpers/fuzz';
import { describeGpu } from '../helpers/reference';

const root = path.resolve(__dirname, '../..');

const REGRESSIONS: { seed: number; cases: number[] }[] = [
  { seed: 57002, cases: [549, 612, 1102, 1999, 2868, 3079, 3674, 3808, 4182, 4240, 4244, 4789, 4871, 5164] },
  { seed: 58001, cases: [151, 432, 1404] },
];

describeGpu('CUDA: fuzz cases that once failed', () => {
  // the cases were drawn on an sm90 GPU (H100 / H200, the 90a build): elsewhere the numbers name other calls
  const cc = devices()[0]?.computeCapability ?? 'none';
  for (const { seed, cases } of REGRESSIONS) {
    it.skipIf(cc !== '9.0')(`seed ${seed}: ${cases.length} cases, each within the fuzz's rule (skipped unless the GPU is sm90; ` +
      `this one: ${cc})`, async () => {
      expect(existsSync(path.join(root, 'dist/lib/index.js')), 'dist/ is missing: run `npm run build:ts`').toBe(true);
      const bad: string[] = [];
      // four processes at a time (each loads the addon and starts a CUDA context)
      for (let i = 0; i < cases.length; i += 4) {
        const rs = await Promise.all(cases.slice(i, i + 4).map(async (n) => ({ n, ...(await runFuzz({ FUZZ_SEED: String(seed), FUZZ_CASE: String(n), FUZZ_DEVICE: 'cuda' })) })));
        for (const r of rs) {
          if (r.code !== 0 || r.summary?.cases !== 1 || r.summary.failures !== 0) {
            const fail = r.stdout.split('\n').find((l) => l.startsWith('{"fuzz":"FAIL"')) ?? r.stdout.slice(-1500);
            bad.push(`case ${r.n} (exit ${r.code}): ${fail.slice(0, 1500)}`);
          }
        }
      }
      expect(bad, bad.join('\n')).toEqual([]);
    }, 300_000);
  }
});
