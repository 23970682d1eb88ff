// The black-box fuzz of the public API (scripts/fuzz-api.mjs: its own float64 reference written from
// API.md, independent of test/helpers) over a fixed set of cases: 250 cases of one seed, the same on
// every machine, on the GPU when there is one (else the CPU backend). It runs the built package
// (dist/, which `npm ci` and `npm run build:ts` produce), as a user's process would. A failing case
// prints its one-line reproducer (FUZZ_SEED / FUZZ_CASE) in the assertion message.
import { existsSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { runFuzz } from '../helpers/fuzz';

const root = path.resolve(__dirname, '../..');

describe('black-box fuzz of the public API (scripts/fuzz-api.mjs)', () => {
  it('250 fixed cases (seed 52052) against its float64 reference, bad arguments and un-awaited chains: no failure', async () => {
    expect(existsSync(path.join(root, 'dist/lib/index.js')), 'dist/ is missing: run `npm run build:ts`').toBe(true);
    const { code, stdout, summary } = await runFuzz({ FUZZ_SEED: '52052', FUZZ_CASES: '250' });
    const fails = stdout.split('\n').filter((l) => l.startsWith('{"fuzz":"FAIL"')).slice(0, 5).join('\n');
    expect(summary, `no summary line; output:\n${stdout.slice(-4000)}`).not.toBeNull();
    expect(summary!.cases, 'cases run').toBe(250);
    expect(summary!.failures, `failing cases:\n${fails}`).toBe(0);
    expect(code, `exit code; output:\n${stdout.slice(-2000)}`).toBe(0);
  }, 600_000);

  // Calls that once failed on the CPU backend (FUZZ_DEVICE=cpu draws the same calls on every machine). Seed 63002
  // case 1485 (sixty-third session): fp32 paged attention at scale 18 with keys x2.58, scores of ~1500, out's relative
  // L2 error 3.46e-5 against 2x the naive's 1.55e-5. Not the kernel: at such scores an fp32 implementation's error is
  // one draw of a few score roundings (the library's median is below the naive's; a naive in reverse order failed
  // the old rule in 2-6% of such calls); the rule now has the scores' rounding floor (scripts/fuzz-api.mjs).
  it('once-failing CPU cases (seed 63002: 1485) within the rule', async () => {
    const { code, stdout, summary } = await runFuzz({ FUZZ_SEED: '63002', FUZZ_CASE: '1485', FUZZ_DEVICE: 'cpu' });
    expect(summary, `no summary line; output:\n${stdout.slice(-4000)}`).not.toBeNull();
    expect(stdout, 'the case is still the fp32 paged call it was').toMatch(/pagedAttention +cases +1 /);
    expect(summary!.failures, `failing:\n${stdout.slice(-3000)}`).toBe(0);
    expect(code).toBe(0);
  }, 120_000);
});
