'use strict';
// Loads an addon binary in a child process (a crash or hang there cannot take the caller down) and
// returns { info: buildInfo() } when it loads, else { error: why not }. Used by install.js and prepack.js.
const { spawnSync } = require('child_process');

function probeAddon(file, timeoutMs = 30_000) {
  const code = `console.log(JSON.stringify(require(${JSON.stringify(file)}).buildInfo()))`;
  const r = spawnSync(process.execPath, ['-e', code], { encoding: 'utf8', timeout: timeoutMs });
  if (r.error) return { error: `loading it failed: ${r.error.message}`, stderr: '' };
  if (r.status !== 0) {
    const line = r.stderr.split('\n').find((l) => /Error|GLIBC|cannot open/.test(l)) || r.stderr.trim();
    return { error: line || `exit status ${r.status}, signal ${r.signal}`, stderr: r.stderr };
  }
  try {
    return { info: JSON.parse(r.stdout.trim().split('\n').pop()) };
  } catch {
    return { error: `it loaded but buildInfo() printed ${JSON.stringify(r.stdout.slice(0, 200))}`, stderr: r.stderr };
  }
}

module.exports = { probeAddon };
