// A failure inside queued work (a kernel that traps, queued through a test hook) surfaces at the next
// synchronize() and host read with the CUDA error name, never as a crash; CUDA makes such an error
// sticky, so every later call on the device rejects with it too. Its own test file: vitest runs each
// file in its own process (pool 'forks'), and a faulted device stays unusable for that process.
// Skipped (visibly) without a CUDA device; fails under FA_REQUIRE_GPU=1 when there is none.
import { expect, it } from 'vitest';
import { Tensor, flashAttention, synchronize } from '../../lib/index';
import { native } from '../../lib/native';
import { Rng, describeGpu, randomTensor } from '../helpers/reference';

describeGpu('CUDA failure inside queued work', () => {
  it('surfaces at synchronize() and at host reads with the CUDA error name; later calls reject, nothing crashes', async () => {
    const rng = new Rng(77);
    const q = await randomTensor(rng, [1, 64, 2, 64], 'float16').tensor.to('cuda');
    const ok = await flashAttention(q, q, q);   // queued before the fault: fine
    await synchronize();
    native.debugFault(0);                         // queued: a kernel that traps
    const after = await flashAttention(q, q, q).catch((e: Error) => e);  // queued behind it (or refused)
    let syncErr: unknown;
    try {
      await synchronize();
    } catch (e) {
      syncErr = e;
    }
    expect(syncErr).toBeInstanceOf(Error);
    expect((syncErr as Error).message).toMatch(/^synchronize: .*cudaError\w+/);
    // Reads reject with the error too, whichever tensor.
    await expect(ok.out.toFloat32Array()).rejects.toThrow(/cudaError\w+/);
    if (!(after instanceof Error)) await expect(after.out.toFloat32Array()).rejects.toThrow(/cudaError\w+/);
    // New calls on the device reject at once, naming the recorded error.
    await expect(flashAttention(q, q, q)).rejects.toThrow(/unusable after a failure in queued work: cudaError\w+/);
    await expect(Tensor.zeros([4], { device: 'cuda' })).rejects.toThrow(/cudaError\w+/);
    // The CPU backend is unaffected.
    const h = Tensor.from(new Float32Array(64 * 2 * 64).fill(0.5), [1, 64, 2, 64]);
    const r = await flashAttention(h, h, h);
    expect((await r.out.toFloat32Array()).every((x) => Math.abs(x - 0.5) < 1e-6)).toBe(true);
  });
});
