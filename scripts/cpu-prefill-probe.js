// The CPU backend's dense forward and backward through the public API: flashAttention and
// flashAttentionBackward on [B, N, H, D] tensors (uniform inputs in [-0.5, 0.5)), causal and not,
// fp16 / bf16 / fp32. Time of awaited calls (the CPU backend settles when done), median of PROBE_IT
// calls (default 5) after one warm-up; GFLOP/s counts 4 N^2 D per head forward and 10 N^2 D
// backward (2.5x), halved for causal. Usage: node scripts/cpu-prefill-probe.js [fwd|bwd|both].
// FA_ADDON_PATH picks another build of the addon (before / after comparisons), FA_CPU_ISA another
// kernel set.
'use strict';
const fa = require('../dist/lib/index.js');
const { uniform } = require('./cpu-decode-probe.js');

const IT = Number(process.env.PROBE_IT || 5);
const median = (a) => { const s = [...a].sort((x, y) => x - y); return s[s.length >> 1]; };

async function time(fn) {
  await fn();
  const ms = [];
  for (let i = 0; i < IT; i++) {
    const t0 = process.hrtime.bigint();
    await fn();
    ms.push(Number(process.hrtime.bigint() - t0) / 1e6);
  }
  return median(ms);
}

async function cell(B, N, H, D, dtype, causal, what) {
  const shape = [B, N, H, D], n = B * N * H * D;
  const q = fa.Tensor.from(uniform(n, 1), shape, { dtype });
  const k = fa.Tensor.from(uniform(n, 2), shape, { dtype });
  const v = fa.Tensor.from(uniform(n, 3), shape, { dtype });
  const dout = fa.Tensor.from(uniform(n, 4), shape, { dtype });
  const flops = 4 * B * H * N * N * D * (causal ? 0.5 : 1);
  const row = [`${dtype}`, `${B}x${N}x${H}x${D}`, causal ? 'yes' : 'no'];
  const { out, lse } = await fa.flashAttention(q, k, v, { causal });
  if (what !== 'bwd') {
    const t = await time(() => fa.flashAttention(q, k, v, { causal }));
    row.push(t.toFixed(1), (flops / t / 1e6).toFixed(1));
  } else row.push('', '');
  if (what !== 'fwd') {
    const t = await time(() => fa.flashAttentionBackward(dout, q, k, v, out, lse, { causal }));
    row.push(t.toFixed(1), (2.5 * flops / t / 1e6).toFixed(1));
  } else row.push('', '');
  return `| ${row.join(' | ')} |`;
}

async function main() {
  const what = process.argv[2] || 'both';
  console.log(`CPU dense attention (${IT} calls, median), ${require('os').cpus().length} cores, kernels ${process.env.FA_CPU_ISA || 'default'}`);
  console.log('| dtype | B x N x H x D | causal | fwd ms | fwd GFLOP/s | bwd ms | bwd GFLOP/s |');
  console.log('| --- | --- | --- | --- | --- | --- | --- |');
  const cells = [
    [1, 2048, 8, 64, 'float32', false], [1, 2048, 8, 64, 'float16', true], [1, 1024, 8, 128, 'bfloat16', false],
    [1, 2048, 8, 128, 'float16', true], [4, 512, 8, 64, 'float16', false], [1, 1024, 4, 256, 'float32', true],
    [1, 1024, 8, 80, 'float16', false],
  ];
  for (const [B, N, H, D, dtype, causal] of cells) console.log(await cell(B, N, H, D, dtype, causal, what));
}

main().catch((e) => { console.error(e); process.exit(1); });
