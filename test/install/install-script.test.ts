// scripts/install.js (the package's install script): uses the prebuilt binary when it loads, builds
// from source when asked, in a git checkout, without a prebuilt, or when the prebuilt does not load.
// Runs the script in a scratch package whose build-native.js is a stub that only says it ran.
import { spawnSync } from 'node:child_process';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { loaderInfo } from '../../lib/index';

const root = path.resolve(__dirname, '..', '..');
const tag = `${process.platform}-${process.arch}`;
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'fa-install-'));
afterAll(() => fs.rmSync(scratch, { recursive: true, force: true }));

type Prebuilt = 'good' | 'broken' | 'none';
function install(prebuilt: Prebuilt, env: Record<string, string> = {}, git = false) {
  const dir = fs.mkdtempSync(path.join(scratch, 'pkg-'));
  fs.mkdirSync(path.join(dir, 'scripts'));
  for (const f of ['install.js', 'addon-probe.js']) fs.copyFileSync(path.join(root, 'scripts', f), path.join(dir, 'scripts', f));
  fs.writeFileSync(path.join(dir, 'scripts', 'build-native.js'), "console.log('STUB BUILD RAN');\n");
  if (git) fs.writeFileSync(path.join(dir, '.git'), 'gitdir: elsewhere\n');
  if (prebuilt !== 'none') {
    const file = path.join(dir, 'prebuilds', tag, 'flash_attention_node.node');
    fs.mkdirSync(path.dirname(file), { recursive: true });
    if (prebuilt === 'good') fs.symlinkSync(loaderInfo().path, file);
    else fs.writeFileSync(file, 'truncated download');
  }
  const clean = Object.fromEntries(Object.entries(process.env)
    .filter(([k]) => !/^(npm_config_build_from_source|FA_BUILD_FROM_SOURCE)$/i.test(k)));
  const r = spawnSync(process.execPath, [path.join(dir, 'scripts', 'install.js')],
    { cwd: dir, env: { ...clean, ...env }, encoding: 'utf8' });
  return { status: r.status, out: r.stdout + r.stderr, built: r.stdout.includes('STUB BUILD RAN') };
}

describe('install script', () => {
  it('uses a prebuilt binary that loads, building nothing', () => {
    const r = install('good');
    expect(r.out).toMatch(/using the prebuilt binary for/);
    expect(r.built).toBe(false);
    expect(r.status).toBe(0);
  });

  it.each([
    ['npm install --build-from-source', { npm_config_build_from_source: 'true' }],
    ['--build-from-source=flash-attention-node', { npm_config_build_from_source: 'flash-attention-node' }],
    ['FA_BUILD_FROM_SOURCE=1', { FA_BUILD_FROM_SOURCE: '1' }],
  ])('builds from source when asked (%s)', (_name, env) => {
    const r = install('good', env);
    expect(r.out).toMatch(/building from source: asked for/);
    expect(r.built).toBe(true);
  });

  it('does not build for --build-from-source=<another package>', () => {
    expect(install('good', { npm_config_build_from_source: 'sharp' }).built).toBe(false);
  });

  it('builds from source in a git checkout, unless FA_BUILD_FROM_SOURCE=0', () => {
    const r = install('good', {}, true);
    expect(r.out).toMatch(/git checkout/);
    expect(r.built).toBe(true);
    expect(install('good', { FA_BUILD_FROM_SOURCE: '0' }, true).built).toBe(false);
  });

  it('builds from source when there is no prebuilt binary for this platform', () => {
    const r = install('none');
    expect(r.out).toMatch(new RegExp(`no prebuilt binary for ${tag}`));
    expect(r.built).toBe(true);
  });

  it('builds from source when the prebuilt binary does not load, saying why', () => {
    const r = install('broken');
    expect(r.out).toMatch(/building from source: it does not load here: .*(ELF|too short|invalid)/i);
    expect(r.built).toBe(true);
  });

  it('fails with the reason when the prebuilt does not load and FA_BUILD_FROM_SOURCE=0', () => {
    const r = install('broken', { FA_BUILD_FROM_SOURCE: '0' });
    expect(r.status).toBe(1);
    expect(r.built).toBe(false);
    expect(r.out).toMatch(/FA_BUILD_FROM_SOURCE=0 but the prebuilt binary cannot be used/);
  });
});
