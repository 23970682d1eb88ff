// The bench CLI's options (bench/cli.ts): the usage text, and a parser that checks every option and
// value before anything runs, so that a typo is named on any machine (with or without a GPU).
import { suggest } from '../lib/errors';
import type { DType } from '../lib/index';

export const DT: Record<string, DType> = { fp16: 'float16', float16: 'float16', bf16: 'bfloat16', bfloat16: 'bfloat16', fp32: 'float32', float32: 'float32' };

export const USAGE = `  npm run bench -- [--dtype fp16,bf16] [--hdim 64,128,256] [--causal both|on|off]
                   [--seqlen 512,1024,...] [--dir fwd,bwd] [--compare torch] [--reps 30]
                   [--warmup 5] [--api-ms 150] [--out bench/out] [--fp32] [--overhead] [--quick]
                   [--deterministic] [--decode] [--varlen] [--serve] [--grid off] [--torch-burst-only]
  --decode   paged decode bandwidth (--decode-splits 1,2,4,...: also at fixed split counts) (GQA 32/8, D 128, fp16, page 16 shuffled and page 1; B 1/16/64
             x 4k/16k/64k cached tokens) next to torch cuDNN / flash SDPA on contiguous K/V
             (--decode-cells 1x16384x16,...: only these B x N x page cells)
  --varlen   packed prefill (lengths 100..8k, 16k tokens, causal, D 128) against the dense kernel
             at equal work, and the same through a paged cache (pagedAttention)
  --serve    a serving loop: 64 sequences of random lengths, each step appends one token per
             sequence and runs pagedAttention for 32 layers; finished sequences free their pages
             (--serve-seqs 1,64: the loop once per batch size; one sequence is bound by the host's
             per-call cost, a token's 64 calls)
  --help     this text`;

// The options: those that take a value (each with its check, which returns what was expected, or ''
// when the value is fine) and the switches. All are checked before the GPU is looked for, so that a
// typo is named on any machine, and before anything runs.
const posInt = (what: string) => (v: string) => (/^\d+$/.test(v) && Number(v) > 0 ? '' : `must be ${what}`);
const posInts = (what: string) => (v: string) => (v.split(',').every((x) => /^\d+$/.test(x.trim()) && Number(x) > 0) ? '' : `must be ${what}`);
const oneOf = (...xs: string[]) => (v: string) => (xs.includes(v) ? '' : `must be ${xs.join(', ')}`);
const VALUE_OPTIONS: Record<string, (v: string) => string> = {
  dtype: (v) => (v.split(',').every((d) => DT[d.trim()] !== undefined) ? '' : `must be a list of ${Object.keys(DT).join(' / ')}`),
  hdim: (v) => (v.split(',').every((x) => /^\d+$/.test(x.trim()) && Number(x) >= 1 && Number(x) <= 256) ? '' : 'must be a list of head dims in 1..256'),
  causal: oneOf('both', 'on', 'off', 'true', 'false'),
  seqlen: posInts('a list of positive integers'),
  dir: (v) => (v.split(',').every((d) => d.trim() === 'fwd' || d.trim() === 'bwd') ? '' : 'must be fwd, bwd or fwd,bwd'),
  compare: oneOf('torch'),
  reps: posInt('a positive integer'),
  warmup: (v) => (/^\d+$/.test(v) ? '' : 'must be an integer >= 0'),
  'api-ms': posInt('a positive integer (milliseconds)'),
  out: (v) => (v.length ? '' : 'must be a directory'),
  grid: oneOf('on', 'off'),
  'decode-splits': posInts('a list of positive integers'),
  'serve-seqs': posInts('a list of positive integers (sequences per step)'),
  'decode-cells': (v) => (v.split(',').map((c) => c.trim()).every((c) => /^\d+x\d+(x\d+)?$/.test(c) && c.split('x').every((x) => Number(x) > 0))
    ? '' : 'must be a list of BxN or BxNxPAGE cells (positive integers), e.g. 16x4096x16'),
};
const SWITCHES = new Set(['fp32', 'overhead', 'quick', 'deterministic', 'decode', 'varlen', 'serve', 'torch-burst-only', 'help']);

/** A bad command line (the message says what was expected). */
export class UsageError extends Error {}

export function parseArgs(argv: string[]): Record<string, string | boolean> {
  const a: Record<string, string | boolean> = {};
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '-h') {
      a.help = true;
      continue;
    }
    const m = /^--([\w-]+)(?:=(.*))?$/.exec(argv[i]);
    if (!m) throw new UsageError(`unexpected argument '${argv[i]}' (options start with --)`);
    const name = m[1];
    if (SWITCHES.has(name)) {
      if (m[2] !== undefined) throw new UsageError(`--${name} takes no value, got '${m[2]}'`);
      a[name] = true;
    } else if (name in VALUE_OPTIONS) {
      const v = m[2] ?? (i + 1 < argv.length && !argv[i + 1].startsWith('--') ? argv[++i] : undefined);
      if (v === undefined) throw new UsageError(`--${name} needs a value`);
      const why = VALUE_OPTIONS[name](v.trim());
      if (why) throw new UsageError(`--${name} ${why}, got '${v}'`);
      a[name] = v.trim();
    } else {
      const guess = suggest(name, [...Object.keys(VALUE_OPTIONS), ...SWITCHES]);
      throw new UsageError(`unknown option --${name}${guess ? ` (did you mean --${guess}?)` : ''}`);
    }
  }
  return a;
}
