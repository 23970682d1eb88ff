// The doctor (lib/cli/doctor.ts): architecture coverage, the self-test and the report.
import { spawnSync } from 'node:child_process';
import * as path from 'node:path';
import { afterEach, describe, expect, it, vi } from 'vitest';
import { cudaVersion, diagnose, kernelsFor, naiveAttention, renderReport, scaledError, selfTest } from '../../lib/cli/doctor';
import * as api from '../../lib/index';
import { devices, Tensor } from '../../lib/index';

afterEach(() => { vi.restoreAllMocks(); });

const DEFAULT_ARCHS = ['80-real', '90a-real', '90-virtual'];

describe('doctor', () => {
  it('knows which devices the default architectures cover', () => {
    expect(kernelsFor('8.0', DEFAULT_ARCHS)).toMatch(/^sm_80 machine code/);
    expect(kernelsFor('8.6', DEFAULT_ARCHS)).toMatch(/^sm_80 machine code/);
    expect(kernelsFor('8.9', DEFAULT_ARCHS)).toMatch(/^sm_80 machine code/);
    expect(kernelsFor('9.0', DEFAULT_ARCHS)).toMatch(/^sm_90a machine code \(with the wgmma kernels\)/);
    expect(kernelsFor('10.0', DEFAULT_ARCHS)).toMatch(/^compute_90 PTX/);
    expect(kernelsFor('12.0', DEFAULT_ARCHS)).toMatch(/^compute_90 PTX/);
    expect(kernelsFor('7.5', DEFAULT_ARCHS)).toBeNull();
    // A development build for the H200 alone: machine code and PTX for 9.0a, nothing elsewhere.
    expect(kernelsFor('9.0', ['90a'])).toMatch(/^sm_90a/);
    expect(kernelsFor('10.0', ['90a'])).toBeNull();
    expect(kernelsFor('8.6', ['90a'])).toBeNull();
    expect(kernelsFor('9.0', ['80-real'])).toBeNull();
    expect(kernelsFor('9.0', [])).toBeNull();
  });

  it('formats CUDA versions', () => {
    expect(cudaVersion(13000)).toBe('13.0');
    expect(cudaVersion(12080)).toBe('12.8');
    expect(cudaVersion(0)).toBeNull();
    expect(cudaVersion(undefined)).toBeNull();
  });

  it('its reference and error measure catch a wrong result', () => {
    const c = { B: 1, Nq: 3, Nk: 4, H: 1, Hkv: 1, D: 2, dtype: 'float32' as const, causal: true };
    const q = new Float32Array([1, 0, 0, 1, 1, 1]), k = new Float32Array([1, 0, 0, 1, 1, 1, -1, 0]);
    const v = new Float32Array([1, 2, 3, 4, 5, 6, 7, 8]);
    const { out, lse } = naiveAttention(c, q, k, v);
    // Bottom-right causal: query 0 sees keys 0..1.
    const w = [Math.exp(1 / Math.SQRT2), 1];
    expect(out[0]).toBeCloseTo((w[0] * 1 + w[1] * 3) / (w[0] + w[1]), 12);
    expect(lse[0]).toBeCloseTo(Math.log(w[0] + w[1]), 12);
    const tol = { atol: 1e-4, rtol: 1e-4 };
    expect(scaledError(out, out, tol)).toBe(0);
    const off = Float64Array.from(out); off[3] += 1e-2;
    expect(scaledError(off, out, tol)).toBeGreaterThan(1);
    const nan = Float64Array.from(out); nan[0] = NaN;
    expect(scaledError(nan, out, tol)).toBe(Infinity);
  });

  it('passes here: the CPU backend (and each GPU) agree with the reference', async () => {
    const report = await diagnose();
    expect(report.problems).toEqual([]);
    expect(report.ok).toBe(true);
    const cpu = report.selfTest.filter((r) => r.target === 'cpu');
    expect(cpu.length).toBeGreaterThanOrEqual(4);
    expect(new Set(cpu.map((r) => r.case.split(' ')[0]))).toEqual(new Set(['float16', 'float32', 'bfloat16']));
    expect(cpu.every((r) => r.ok && r.maxErrOut <= 1 && r.maxErrLse <= 1)).toBe(true);
    expect(report.devices?.length).toBe(devices().length);
    const text = renderReport(report);
    expect(text).toMatch(/^flash-attention-node doctor/);
    expect(text).toMatch(/result: OK/);
    if (devices().length === 0) expect(text).toMatch(/no GPU/);
  }, 120_000);

  it('checks a device against the CPU backend, skips head dims it has no kernels for, flags wrong results', async () => {
    // A pretend cuda:0 that is the CPU: to() copies the tensor.
    const onDevice = new WeakSet<Tensor>();
    vi.spyOn(Tensor.prototype, 'to').mockImplementation(async function (this: Tensor) {
      const t = Tensor.from(await this.toTypedArray(), this.shape, { dtype: this.dtype });
      onDevice.add(t);
      return t;
    });
    const fake = { ...api, buildInfo: () => ({ ...api.buildInfo(), cudaHeadDims: [64] }) };
    const good = (await selfTest(fake, [0])).filter((r) => r.target === 'cuda:0');
    expect(good.length).toBe(4);
    expect(good.every((r) => r.ok)).toBe(true);
    expect(good.filter((r) => r.case.includes(' D64')).every((r) => r.against === 'cpu backend' && r.maxErrOut === 0)).toBe(true);
    expect(good.filter((r) => r.case.includes(' D128')).map((r) => r.error))
      .toEqual(Array(2).fill('skipped: this build has no CUDA kernels for head dim 128'));
    // The pretend device returns a slightly wrong out.
    const wrong = { ...fake, flashAttention: async (...args: Parameters<typeof api.flashAttention>) => {
      const r = await api.flashAttention(...args);
      if (!onDevice.has(args[0])) return r;
      const o = await r.out.toFloat32Array();
      o[o.length - 1] += 0.05;
      return { out: Tensor.from(o, r.out.shape), lse: r.lse, [Symbol.dispose]: () => undefined };
    } };
    const bad = (await selfTest(wrong, [0])).filter((r) => r.target === 'cuda:0' && !r.error);
    expect(bad.length).toBe(2);
    expect(bad.every((r) => !r.ok && r.maxErrOut > 1 && r.maxErrLse === 0)).toBe(true);
  });

  it('the command line rejects unknown commands and prints its version', () => {
    const bin = path.resolve(__dirname, '..', '..', 'bin', 'flash-attention-node.js');
    const bad = spawnSync(process.execPath, [bin, 'doctr'], { encoding: 'utf8' });
    expect(bad.status).toBe(2);
    expect(bad.stderr).toMatch(/unknown command 'doctr'[\s\S]*doctor/);
    const v = spawnSync(process.execPath, [bin, 'version'], { encoding: 'utf8' });
    expect(v.stdout.trim()).toMatch(/^\d+\.\d+\.\d+/);
  });
});
