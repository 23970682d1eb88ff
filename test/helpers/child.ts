// Child Node processes for tests whose scenario may crash or end a process (worker threads,
// process.exit): the test asserts on the child's exit status, signal and output.
import { spawnSync } from 'node:child_process';
import path from 'node:path';

/** The built package's entry, JSON-quoted for a require() in a child's script. */
export const distEntry = JSON.stringify(path.resolve(__dirname, '../../dist/index.js'));

/**
 * Runs `script` (CommonJS) in a child `node -e`; with `requireFa` (default) it starts with
 * `const fa = require(<the built package>)`.
 */
export function runNodeChild(script: string, opts: { requireFa?: boolean; timeout?: number } = {}) {
  const prelude = opts.requireFa === false ? '' : `const fa = require(${distEntry});\n`;
  const r = spawnSync(process.execPath, ['-e', prelude + script], { encoding: 'utf8', timeout: opts.timeout ?? 90_000 });
  return { status: r.status, signal: r.signal, out: `${r.stdout}${r.stderr}` };
}
