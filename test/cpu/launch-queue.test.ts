// The launcher thread's queue (csrc/binding/launch_queue.h: the part of the GPU execution model that
// needs no GPU) under ThreadSanitizer: csrc/tools/launch_queue_stress.cpp drives it from a producer
// that queues, issues in place when nothing is queued, flushes, pauses until the queue's thread
// sleeps, and injects failures and exceptions; the closures must run in submission order, flushes
// must leave nothing behind, failures must be reported once, and TSan must report no race.
// Skipped (visibly) without a C++ compiler.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const root = path.resolve(__dirname, '../..');
const haveGxx = spawnSync('g++', ['--version'], { encoding: 'utf8' }).status === 0;

describe.skipIf(!haveGxx)('launch queue (ThreadSanitizer)', () => {
  it('issues closures in submission order, from either thread, with no data race', () => {
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'fa-lq-'));
    const exe = path.join(dir, 'launch_queue_stress');
    const build = spawnSync('g++', ['-std=c++17', '-O1', '-g', '-fsanitize=thread', '-pthread', '-Wno-tsan',
      `-I${path.join(root, 'csrc')}`, path.join(root, 'csrc/tools/launch_queue_stress.cpp'), '-o', exe],
    { encoding: 'utf8', timeout: 120_000 });
    expect(build.status, build.stderr).toBe(0);
    for (const seed of ['1', '2']) {
      const run = spawnSync(exe, ['90000', seed], { encoding: 'utf8', timeout: 120_000, env: { ...process.env, TSAN_OPTIONS: 'exitcode=66' } });
      expect(run.stderr).not.toMatch(/ThreadSanitizer|launch_queue_stress:/);
      expect(run.status, run.stderr).toBe(0);
      expect(run.stdout).toMatch(/^ok 90000 closures \(\d+ issued in place\), \d+ flushes, \d+ pauses/);
    }
    fs.rmSync(dir, { recursive: true, force: true });
  }, 240_000);
});
if (!haveGxx) console.log('launch queue test skipped: no g++');
