// Runs the black-box fuzz (scripts/fuzz-api.mjs) in a child process as a user's process would, with the settings
// `fuzz` in place of the caller's own FUZZ_* variables; its exit code, output (stderr after stdout on a failure) and
// summary line's counts (null where the output has none).
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';

const root = path.resolve(__dirname, '../..');
const run = promisify(execFile);

export interface FuzzRun { code: number; stdout: string; summary: { cases: number; failures: number } | null }

export async function runFuzz(fuzz: Record<string, string>): Promise<FuzzRun> {
  const env = { ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('FUZZ_'))), ...fuzz };
  let code = 0;
  let stdout: string;
  try {
    ({ stdout } = await run(process.execPath, [path.join(root, 'scripts/fuzz-api.mjs')], { cwd: root, env, maxBuffer: 64 * 1024 * 1024 }));
  } catch (e) {
    const x = e as { code?: number; stdout?: string; stderr?: string };
    code = x.code ?? 1;
    stdout = `${x.stdout ?? ''}\n${x.stderr ?? ''}`;
  }
  const m = /fuzz-api summary: .*cases=(\d+) failures=(\d+)/.exec(stdout);
  return { code, stdout, summary: m ? { cases: Number(m[1]), failures: Number(m[2]) } : null };
}
