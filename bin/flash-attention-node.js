#!/usr/bin/env node
// flash-attention-node command line: `npx flash-attention-node doctor [--json] [--no-selftest]`.
'use strict';
const path = require('path');

const usage = `usage: flash-attention-node <command>

commands:
  doctor [--json] [--no-selftest]   report Node, the platform, which addon binary loaded and why, the build,
                                    the CUDA driver and runtime and each GPU, then run a short self-test on
                                    the CPU and on each GPU; exit status 0 when all is well
  version                           print the package version
`;

const [cmd, ...rest] = process.argv.slice(2);
if (cmd === 'doctor') {
  require(path.join(__dirname, '..', 'dist', 'lib', 'cli', 'doctor.js')).main(rest).then(
    (code) => { process.exitCode = code; },
    (e) => { console.error('doctor: unexpected error:', e); process.exitCode = 1; });
} else if (cmd === 'version' || cmd === '--version' || cmd === '-v') {
  console.log(require(path.join(__dirname, '..', 'package.json')).version);
} else if (cmd === undefined || cmd === 'help' || cmd === '--help' || cmd === '-h') {
  process.stdout.write(usage);
} else {
  process.stderr.write(`flash-attention-node: unknown command '${cmd}'\n\n${usage}`);
  process.exitCode = 2;
}
