// Runs the black-box fuzz (scripts/fuzz-api.mjs) in a child process as a user's process would, with the settings
// `fuzz` in place of the caller's own FUZZ_* variables; its exit code and output (stderr after stdout on a failure).
import { execFile } from 'node:child_process';
import path from 'node:path';
import { promisify } from 'node:util';

const root = path.resolve(__dirname, '../..');
const run = promisify(execFile);

export async function runFuzz(fuzz: Record<string, string>): Promise<{ code: number; stdout: string }> {
  const env = { ...Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('FUZZ_'))), ...fuzz };
  try {
    const { stdout } = await run(process.execPath, [path.join(root, 'scripts/fuzz-api.mjs')], { cwd: root, env, maxBuffer: 64 * 1024 * 1024 });
    return { code: 0, stdout };
  } catch (e) {
    const x = e as { code?: number; stdout?: string; stderr?: string };
    return { code: x.code ?? 1, stdout: `${x.stdout ?? ''}\n${x.stderr ?? ''}` };
  }
}
