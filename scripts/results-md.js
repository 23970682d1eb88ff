#!/usr/bin/env node
// Turns a bench run's output folder (results.json, table.md, chart.svg) into bench/RESULTS.md and
// bench/chart.svg. Usage: node scripts/results-md.js OUT_DIR COMMIT [extra-notes.md]
'use strict';
const fs = require('fs');
const path = require('path');
const [dir, commit, notes] = process.argv.slice(2);
if (!dir || !commit) {
  console.error('usage: node scripts/results-md.js OUT_DIR COMMIT [notes.md]');
  process.exit(2);
}
const res = JSON.parse(fs.readFileSync(path.join(dir, 'results.json'), 'utf8'));
// table.md, or the table lines of bench.log when the run could not bring table.md back.
const tableFile = fs.existsSync(path.join(dir, 'table.md')) ? 'table.md' : 'bench.log';
const table = fs.readFileSync(path.join(dir, tableFile), 'utf8').split('\n').filter((l) => l.startsWith('|')).join('\n');
const bench = path.resolve(__dirname, '..', 'bench');
fs.copyFileSync(path.join(dir, 'chart.svg'), path.join(bench, 'chart.svg'));

// The cells closest to the targets: ours / torch flash (fp16/bf16) and ours / torch efficient (fp32).
const rows = res.rows;
const key = (r) => `${r.case.dtype} D${r.case.D} ${r.case.causal ? 'causal' : 'full'} N${r.case.N} ${r.dir}`;
const ratios = [];
for (const r of rows.filter((x) => x.impl === 'ours')) {
  const peer = r.case.dtype === 'float32' ? 'torch efficient' : 'torch flash';
  const p = rows.find((x) => x.impl === peer && key(x) === key(r));
  if (p) ratios.push({ cell: key(r), ratio: r.tflops / p.tflops, target: r.case.dtype === 'float32' ? 1.0 : r.case.D === 256 ? 0.9 : 1.0 });
}
ratios.sort((a, b) => a.ratio / a.target - b.ratio / b.target);
const closest = ratios.slice(0, 12).map((x) => `| ${x.cell} | ${x.ratio.toFixed(3)}x | ${x.target.toFixed(1)}x | ${x.ratio >= x.target ? 'met' : 'MISSED'} |`);
const missed = ratios.filter((x) => x.ratio < x.target).length;

const md = `# Benchmark results

${res.header}; commit ${commit}.

Measured with \`npm run bench -- --compare torch --dir fwd,bwd --fp32 --overhead --deterministic\` (see
\`scripts/gpu-run.sh\`): our kernels timed natively with CUDA events around each call of the core
entry point (all of its kernels), warm-up then the median; PyTorch SDPA (flash = FlashAttention-2
code, cuDNN, mem-efficient for fp32) timed with CUDA events in the same run on the same GPU, its
backward as (forward + backward) - forward. FLOPs: forward 4·B·H·N²·D (halved when causal), backward
2.5x forward. Random normal inputs.

## Targets (PERF.md) against torch flash: ${ratios.length - missed} of ${ratios.length} cells met

Cells closest to failing (or failing), ours / peer:

| cell | ratio | target | |
| --- | --- | --- | --- |
${closest.join('\n')}

## Full table (TFLOP/s)

${table}

![TFLOP/s against sequence length](chart.svg)
${notes ? '\n' + fs.readFileSync(notes, 'utf8') : ''}`;
fs.writeFileSync(path.join(bench, 'RESULTS.md'), md);
console.log(`wrote bench/RESULTS.md (${ratios.length - missed}/${ratios.length} cells met)`);
