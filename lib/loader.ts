// Finds and loads the native addon. Candidates, in order:
//   1. FA_ADDON_PATH            an explicit path (when set, the only candidate)
//   2. build/Release/...        a source build (`npm ci` in a checkout, `--build-from-source`)
//   3. prebuilds/<platform>-<arch>/...   the prebuilt binary shipped in the npm package
// The first that loads wins; loaderInfo() tells which and why the others were passed over.
// FA_DEBUG=1 logs each step to stderr. When nothing loads, one Error lists every candidate's
// failure and the fixes.
import * as fs from 'node:fs';
import * as path from 'node:path';

export const ADDON_FILE = 'flash_attention_node.node';

export type AddonSource = 'FA_ADDON_PATH' | 'build' | 'prebuilt';

export interface LoadAttempt {
  source: AddonSource;
  path: string;
  /** 'loaded'; 'missing' (no such file); 'failed' (there but did not load); 'skipped' (an earlier one loaded). */
  outcome: 'loaded' | 'missing' | 'failed' | 'skipped';
  /** Why it was passed over (the dlopen error for 'failed'); for 'loaded', why it was chosen. */
  detail: string;
}

export interface LoaderInfo {
  /** The file that loaded. */
  path: string;
  source: AddonSource;
  /** Why this one: the first candidate that loaded, and what was passed over before it. */
  reason: string;
  /** Every candidate looked at, in order. */
  attempts: LoadAttempt[];
  /** The package folder the candidates were resolved against. */
  packageRoot: string;
  /** `${process.platform}-${process.arch}`, the prebuilds/ subfolder this runtime uses. */
  platformTag: string;
  /** The contents of prebuilds/<tag>/build-info.json when the prebuilt loaded (how it was built). */
  prebuilt?: Record<string, unknown>;
}

const debugOn = (): boolean => /^(1|true|yes|on)$/i.test(process.env.FA_DEBUG ?? '');
function debug(msg: string): void {
  if (debugOn()) process.stderr.write(`[flash-attention-node] ${msg}\n`);
}

/** The folder holding this package's package.json (dist/lib/.. /.. when compiled, lib/.. in source). */
export function packageRoot(from = __dirname): string {
  for (let dir = from; ; dir = path.dirname(dir)) {
    try {
      const pkg = JSON.parse(fs.readFileSync(path.join(dir, 'package.json'), 'utf8')) as { name?: string };
      if (pkg.name === 'flash-attention-node') return dir;
    } catch { /* keep looking */ }
    if (path.dirname(dir) === dir) return path.resolve(__dirname, '..', '..');
  }
}

export function platformTag(): string {
  return `${process.platform}-${process.arch}`;
}

/** The candidates in the order they are tried. */
export function addonCandidates(root = packageRoot()): Array<{ source: AddonSource; path: string }> {
  const override = process.env.FA_ADDON_PATH;
  if (override) return [{ source: 'FA_ADDON_PATH', path: path.resolve(override) }];
  return [
    { source: 'build', path: path.join(root, 'build', 'Release', ADDON_FILE) },
    { source: 'prebuilt', path: path.join(root, 'prebuilds', platformTag(), ADDON_FILE) },
  ];
}

/** The glibc version of this process ('2.36'), or null on musl and non-Linux systems. */
export function glibcVersion(): string | null {
  if (process.platform !== 'linux') return null;
  const header = (process.report?.getReport() as { header?: { glibcVersionRuntime?: string } } | undefined)?.header;
  return header?.glibcVersionRuntime ?? null;
}

let info: LoaderInfo | null = null;

/** Loads the addon (once; later calls return the same module). Throws one Error when none loads. */
export function loadAddon<T>(): T {
  const root = packageRoot();
  const attempts: LoadAttempt[] = [];
  const candidates = addonCandidates(root);
  // glibcVersion() costs a process report (~20 ms): only when logging.
  if (debugOn()) debug(`loader: package root ${root}, platform ${platformTag()}, glibc ${glibcVersion() ?? 'none'}`);
  for (const c of candidates) {
    if (!fs.existsSync(c.path)) {
      attempts.push({ ...c, outcome: 'missing', detail: 'no such file' });
      debug(`loader: ${c.source} ${c.path}: not there`);
      continue;
    }
    if (!c.path.endsWith('.node')) {  // (FA_ADDON_PATH naming a .js or .json: not run or read)
      attempts.push({ ...c, outcome: 'failed', detail: `not a native addon (${ADDON_FILE} or another .node file)` });
      debug(`loader: ${c.source} ${c.path}: rejected: not a .node file`);
      continue;
    }
    let mod: T;
    try {
      mod = require(c.path) as T;
    } catch (e) {
      const detail = (e instanceof Error ? e.message : String(e)).split('\n')[0];
      attempts.push({ ...c, outcome: 'failed', detail });
      debug(`loader: ${c.source} ${c.path}: rejected, it did not load: ${detail}`);
      continue;
    }
    if (typeof (mod as { layout?: unknown } | null)?.layout !== 'function') {  // (another project's addon)
      const detail = `it loaded, but it is not ${ADDON_FILE} (no layout() in its exports)`;
      attempts.push({ ...c, outcome: 'failed', detail });
      debug(`loader: ${c.source} ${c.path}: rejected: ${detail}`);
      continue;
    }
    const passed = attempts.map((a) => `${a.source} ${a.outcome === 'missing' ? 'not there' : 'did not load'}`);
    const why = c.source === 'FA_ADDON_PATH' ? 'FA_ADDON_PATH names it'
      : c.source === 'build' ? 'a source build is there and it comes first'
        : 'no source build loaded, so the prebuilt binary shipped in the package is used';
    const detail = passed.length ? `${why} (${passed.join('; ')})` : why;
    attempts.push({ ...c, outcome: 'loaded', detail });
    for (const rest of candidates.slice(attempts.length)) {
      attempts.push({ ...rest, outcome: 'skipped', detail: 'not tried: an earlier candidate loaded' });
    }
    info = { path: c.path, source: c.source, reason: detail, attempts, packageRoot: root, platformTag: platformTag() };
    if (c.source === 'prebuilt') {
      try {
        info.prebuilt = JSON.parse(fs.readFileSync(path.join(path.dirname(c.path), 'build-info.json'), 'utf8'));
      } catch { /* optional */ }
    }
    deepFreeze(info);
    debug(`loader: loaded ${c.source} ${c.path}: ${detail}`);
    return mod;
  }
  throw new Error(loadFailureMessage(attempts));
}

function deepFreeze(o: object): void {
  for (const v of Object.values(o)) if (v && typeof v === 'object') deepFreeze(v);
  Object.freeze(o);
}

function loadFailureMessage(attempts: LoadAttempt[]): string {
  const lines = [
    `flash-attention-node: could not load the native addon (${platformTag()}, Node ${process.version}, ` +
      `glibc ${glibcVersion() ?? 'none'}). Tried:`,
    ...attempts.map((a) => `  - ${a.source}: ${a.path}: ${a.outcome === 'missing' ? 'no such file' : a.detail}`),
    'Fixes:',
    '  - build it from source: `npm rebuild flash-attention-node --build-from-source` (needs CMake >= 3.18,',
    '    a C++17 compiler and, for the GPU backend, nvcc from CUDA 12.x/13.x; without nvcc it builds the CPU backend)',
    '  - in a git checkout: `npm ci` or `npm run build:native`',
  ];
  if (attempts.some((a) => /GLIBC|GLIBCXX|CXXABI/.test(a.detail))) {
    lines.push('  - the prebuilt binary needs a newer glibc / libstdc++ than this system has: build from source (above)' +
      ' or use a newer distribution (see prebuilds/*/build-info.json for what it needs)');
  }
  if (process.platform !== 'linux' || process.arch !== 'x64' || glibcVersion() === null) {
    lines.push(`  - prebuilt binaries exist for linux-x64 with glibc only; ${platformTag()}` +
      `${glibcVersion() === null && process.platform === 'linux' ? ' (musl)' : ''} needs a source build`);
  }
  if (process.env.FA_ADDON_PATH) lines.push('  - unset FA_ADDON_PATH, or point it at a flash_attention_node.node that exists');
  lines.push('  - run `npx flash-attention-node doctor` for a report; FA_DEBUG=1 logs what the loader tries');
  return lines.join('\n');
}

/** Which addon binary loaded, from where and why (the package loads it on import). */
export function loaderInfo(): LoaderInfo {
  if (!info) throw new Error('flash-attention-node: the native addon is not loaded');
  return info;
}
