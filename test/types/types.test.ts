// The published typings, as an ES module consumer (esm.mts) and a CommonJS consumer (cjs.cts) see
// them through the package name: builds dist/ (npm run build:ts), then `tsc -p test/types`.
// A wrong call marked `// @ts-expect-error` that compiles fails the check.
import { execFileSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { beforeAll, describe, expect, it } from 'vitest';

const root = path.resolve(__dirname, '..', '..');
const tsc = path.join(root, 'node_modules', 'typescript', 'bin', 'tsc');

function run(file: string, args: string[]): { code: number; output: string } {
  try {
    return { code: 0, output: execFileSync(process.execPath, [file, ...args], { cwd: root, encoding: 'utf8', stdio: 'pipe' }) };
  } catch (e) {
    const err = e as { status?: number; stdout?: string; stderr?: string };
    return { code: err.status ?? 1, output: `${err.stdout ?? ''}${err.stderr ?? ''}` };
  }
}

describe('typings for consumers', () => {
  beforeAll(() => {
    const build = run(tsc, ['-p', 'tsconfig.build.json']);
    expect(build.output, 'tsc -p tsconfig.build.json').toBe('');
    const esm = run(path.join(root, 'scripts', 'write-esm.js'), []);
    expect(esm.code, esm.output).toBe(0);
  }, 180_000);

  it('ESM (.mts) and CommonJS (.cts) consumers compile, and the marked wrong calls do not', () => {
    const r = run(tsc, ['-p', 'test/types/tsconfig.json']);
    expect(r.output).toBe('');
    expect(r.code).toBe(0);
  }, 120_000);

  it('a wrong call without @ts-expect-error is an error (the check is not vacuous)', () => {
    const dir = fs.mkdtempSync(path.join(root, 'test', 'types', '.tmp-'));
    try {
      fs.writeFileSync(path.join(dir, 'wrong.mts'),
        "import { flashAttention, Tensor } from 'flash-attention-node';\n" +
        "const q = Tensor.from(new Float32Array(64), [1, 1, 1, 64]);\n" +
        "await flashAttention(q, q, q, { causal: 'yes' });\n");
      fs.writeFileSync(path.join(dir, 'tsconfig.json'), JSON.stringify({ extends: '../tsconfig.json', files: ['wrong.mts'] }));
      const r = run(tsc, ['-p', path.join(dir, 'tsconfig.json')]);
      expect(r.code).not.toBe(0);
      expect(r.output).toMatch(/wrong\.mts\(3,\d+\): error TS/);
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  }, 120_000);

  it('`using` of tensors and of call results compiles (TypeScript 5.2+, lib ESNext.Disposable)', () => {
    const r = run(tsc, ['-p', 'test/types/tsconfig.dispose.json']);
    expect(r.output).toBe('');
  }, 120_000);
});
