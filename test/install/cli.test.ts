// The command lines: the bench's options (bench/options.ts, checked before anything runs, on any
// machine), the doctor's and the main job's (--help, a bad option: exit status 2 with the usage).
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { USAGE, UsageError, parseArgs } from '../../bench/options';
import { diagnose, main as doctorMain, renderReport } from '../../lib/cli/doctor';

afterEach(() => { vi.restoreAllMocks(); });

const root = path.resolve(__dirname, '..', '..');

describe('bench options', () => {
  it('takes the documented options, values in either form', () => {
    expect(parseArgs(['--dtype', 'fp16,bf16', '--hdim=64,128', '--causal', 'on', '--seqlen', '512, 1024', '--dir', 'fwd,bwd',
      '--compare', 'torch', '--reps', '30', '--warmup', '0', '--api-ms', '150', '--out', '/tmp/x', '--grid', 'off',
      '--decode', '--decode-splits', '1,2,4', '--decode-cells', '16x4096x16,1x16384', '--varlen', '--serve', '--serve-seqs', '1,64', '--fp32', '--quick',
      '--overhead', '--deterministic', '--torch-burst-only'])).toEqual({
      dtype: 'fp16,bf16', hdim: '64,128', causal: 'on', seqlen: '512, 1024', dir: 'fwd,bwd', compare: 'torch', reps: '30',
      warmup: '0', 'api-ms': '150', out: '/tmp/x', grid: 'off', decode: true, 'decode-splits': '1,2,4',
      'decode-cells': '16x4096x16,1x16384', varlen: true, serve: true, 'serve-seqs': '1,64', fp32: true, quick: true, overhead: true,
      deterministic: true, 'torch-burst-only': true,
    });
    expect(parseArgs([])).toEqual({});
    expect(parseArgs(['-h'])).toEqual({ help: true });
  });

  it('names an unknown option (with the one meant), a bad value, a missing value and a value given to a switch', () => {
    const bad: Array<[string[], RegExp]> = [
      [['--rep', '5'], /^unknown option --rep \(did you mean --reps\?\)$/],
      [['--decod'], /^unknown option --decod \(did you mean --decode\?\)$/],
      [['--frobnicate'], /^unknown option --frobnicate$/],
      [['foo'], /^unexpected argument 'foo' \(options start with --\)$/],
      [['--seqlen', 'abc'], /^--seqlen must be a list of positive integers, got 'abc'$/],
      [['--seqlen', '512,0'], /^--seqlen must be a list of positive integers, got '512,0'$/],
      [['--serve-seqs', '0'], /^--serve-seqs must be a list of positive integers \(sequences per step\), got '0'$/],
      [['--reps', '-1'], /^--reps must be a positive integer, got '-1'$/],
      [['--reps', '2.5'], /^--reps must be a positive integer, got '2.5'$/],
      [['--warmup', 'NaN'], /^--warmup must be an integer >= 0, got 'NaN'$/],
      [['--causal', 'maybe'], /^--causal must be both, on, off, true, false, got 'maybe'$/],
      [['--dir', 'bwdd'], /^--dir must be fwd, bwd or fwd,bwd, got 'bwdd'$/],
      [['--dtype', 'fp8'], /^--dtype must be a list of fp16 .* got 'fp8'$/],
      [['--hdim', '300'], /^--hdim must be a list of head dims in 1\.\.256, got '300'$/],
      [['--compare', 'jax'], /^--compare must be torch, got 'jax'$/],
      [['--decode-cells', '16x'], /^--decode-cells must be a list of BxN or BxNxPAGE cells .* got '16x'$/],
      [['--reps'], /^--reps needs a value$/],
      [['--reps', '--quick'], /^--reps needs a value$/],
      [['--decode=1'], /^--decode takes no value, got '1'$/],
    ];
    for (const [argv, why] of bad) {
      let err: unknown;
      try {
        parseArgs(argv);
      } catch (e) {
        err = e;
      }
      expect(err, argv.join(' ')).toBeInstanceOf(UsageError);
      expect((err as Error).message, argv.join(' ')).toMatch(why);
    }
  });

  it('its usage lists every option it takes', () => {
    for (const o of ['dtype', 'hdim', 'causal', 'seqlen', 'dir', 'compare', 'reps', 'warmup', 'api-ms', 'out', 'fp32', 'overhead',
      'quick', 'deterministic', 'decode', 'decode-splits', 'decode-cells', 'varlen', 'serve', 'serve-seqs', 'grid', 'torch-burst-only', 'help']) {
      expect(USAGE, o).toContain(`--${o}`);
    }
  });
});

describe('doctor and main job command lines', () => {
  it('doctor --help prints its usage (exit 0); a bad option prints it to stderr (exit 2)', async () => {
    const out: string[] = [], err: string[] = [];
    vi.spyOn(process.stdout, 'write').mockImplementation((s) => { out.push(String(s)); return true; });
    vi.spyOn(process.stderr, 'write').mockImplementation((s) => { err.push(String(s)); return true; });
    expect(await doctorMain(['--help'])).toBe(0);
    expect(out.join('')).toMatch(/^usage: flash-attention-node doctor \[--json\] \[--no-selftest\][\s\S]*--no-selftest/);
    expect(await doctorMain(['--jsn'])).toBe(2);
    expect(err.join('')).toMatch(/^doctor: unknown option --jsn\n\nusage: flash-attention-node doctor/);
  });

  it('a report without the self-test does not claim one', async () => {
    const text = renderReport(await diagnose({ selfTest: false }));
    expect(text).toMatch(/result: OK \((no GPU|\d+ GPU\(s\)); no self-test run\)$/);
    expect(text).not.toMatch(/backend checked/);
  });

  it('npm start --help prints its usage; an unknown option exits 2 before any work (dist/, built by npm ci)', () => {
    const main = path.join(root, 'dist', 'lib', 'cli', 'main.js');
    const help = spawnSync(process.execPath, [main, '--help'], { encoding: 'utf8' });
    expect(help.status).toBe(0);
    expect(help.stdout).toMatch(/^usage: npm start[\s\S]*--quick/);
    const bad = spawnSync(process.execPath, [main, '--quik'], { encoding: 'utf8' });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/^flash-attention-node: unknown option --quik\n\nusage: npm start/);
    expect(bad.stdout).toBe('');
  });
});
