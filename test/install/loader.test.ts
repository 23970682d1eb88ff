// The addon loader (lib/loader.ts): which candidate loads, what it records, and the one Error that
// lists every candidate and the fixes when none loads.
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { loaderInfo, buildInfo } from '../../lib/index';
import { addonCandidates, loadAddon, packageRoot, platformTag } from '../../lib/loader';

const root = path.resolve(__dirname, '..', '..');
const saved = { FA_ADDON_PATH: process.env.FA_ADDON_PATH, FA_DEBUG: process.env.FA_DEBUG };
afterEach(() => {
  for (const [k, v] of Object.entries(saved)) if (v === undefined) delete process.env[k]; else process.env[k] = v;
  vi.restoreAllMocks();
});

describe('loader', () => {
  it('finds the package root and tries FA_ADDON_PATH, then build/Release, then prebuilds/<platform>-<arch>', () => {
    delete process.env.FA_ADDON_PATH;
    expect(packageRoot()).toBe(root);
    expect(addonCandidates(root)).toEqual([
      { source: 'build', path: path.join(root, 'build', 'Release', 'flash_attention_node.node') },
      { source: 'prebuilt', path: path.join(root, 'prebuilds', platformTag(), 'flash_attention_node.node') },
    ]);
    process.env.FA_ADDON_PATH = 'some/where.node';
    expect(addonCandidates(root)).toEqual([{ source: 'FA_ADDON_PATH', path: path.resolve('some/where.node') }]);
  });

  it('loaderInfo() says which binary loaded and why', () => {
    const info = loaderInfo();
    expect(fs.existsSync(info.path)).toBe(true);
    expect(info.attempts.find((a) => a.outcome === 'loaded')?.path).toBe(info.path);
    expect(info.reason.length).toBeGreaterThan(10);
    expect(info.platformTag).toBe(`${process.platform}-${process.arch}`);
    expect(Object.isFrozen(info)).toBe(true);
    expect(buildInfo().version).toBe(JSON.parse(fs.readFileSync(path.join(root, 'package.json'), 'utf8')).version);
  });

  it('throws one Error naming each candidate and the fixes when nothing loads', () => {
    process.env.FA_ADDON_PATH = path.join(os.tmpdir(), 'no-such-dir', 'flash_attention_node.node');
    expect(() => loadAddon()).toThrowError(/could not load the native addon[\s\S]*Tried:[\s\S]*FA_ADDON_PATH: .*no-such-dir.*no such file[\s\S]*Fixes:[\s\S]*npm rebuild flash-attention-node --build-from-source[\s\S]*unset FA_ADDON_PATH/);
  });

  it('reports the dlopen error of a file that is not an addon', () => {
    const bad = path.join(fs.mkdtempSync(path.join(os.tmpdir(), 'fa-loader-')), 'flash_attention_node.node');
    fs.writeFileSync(bad, 'not a shared object');
    process.env.FA_ADDON_PATH = bad;
    try {
      expect(() => loadAddon()).toThrowError(/FA_ADDON_PATH: .*flash_attention_node\.node: .*(ELF|too short|invalid)/i);
    } finally {
      fs.rmSync(path.dirname(bad), { recursive: true, force: true });
    }
  });

  it('refuses a file that is not the addon (FA_ADDON_PATH naming a .js or .json: not run), with the fixes', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fa-loader-'));
    try {
      for (const [name, body] of [['x.json', '{"layout": 1}'], ['x.js', 'globalThis.__faLoaderRan = true; module.exports = {};']]) {
        fs.writeFileSync(path.join(dir, name), body);
        process.env.FA_ADDON_PATH = path.join(dir, name);
        expect(() => loadAddon()).toThrowError(new RegExp(`FA_ADDON_PATH: .*${name.replace('.', '\\.')}: not a native addon ` +
          '\\(flash_attention_node\\.node or another \\.node file\\)[\\s\\S]*Fixes:[\\s\\S]*unset FA_ADDON_PATH'));
      }
      expect((globalThis as { __faLoaderRan?: boolean }).__faLoaderRan).toBeUndefined();
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  it('FA_DEBUG=1 logs each candidate and why it was passed over', () => {
    process.env.FA_DEBUG = '1';
    process.env.FA_ADDON_PATH = path.join(os.tmpdir(), 'no-such-dir', 'flash_attention_node.node');
    const lines: string[] = [];
    vi.spyOn(process.stderr, 'write').mockImplementation((chunk: string | Uint8Array) => { lines.push(String(chunk)); return true; });
    expect(() => loadAddon()).toThrow();
    expect(lines.join('')).toMatch(/\[flash-attention-node\] loader: package root[\s\S]*FA_ADDON_PATH .*no-such-dir.*not there/);
  });
});
