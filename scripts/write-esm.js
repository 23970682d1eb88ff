#!/usr/bin/env node
// Writes dist/index.js (CommonJS entry), dist/index.mjs (ES module entry) and dist/index.d.ts, all
// forwarding to the compiled dist/lib/index.*. Export names are read from the compiled CommonJS
// (without loading it, so this works before the native addon exists).
'use strict';
const fs = require('fs');
const path = require('path');
const dist = path.resolve(__dirname, '..', 'dist');
const src = fs.readFileSync(path.join(dist, 'lib', 'index.js'), 'utf8');
const names = new Set();
for (const m of src.matchAll(/exports\.([A-Za-z_$][\w$]*)\s*=/g)) names.add(m[1]);
for (const m of src.matchAll(/Object\.defineProperty\(exports,\s*"([A-Za-z_$][\w$]*)"/g)) names.add(m[1]);
names.delete('__esModule');
names.delete('default');
fs.writeFileSync(path.join(dist, 'index.js'), "'use strict';\nmodule.exports = require('./lib/index.js');\n");
fs.writeFileSync(path.join(dist, 'index.d.ts'), "export * from './lib/index';\n");
fs.writeFileSync(path.join(dist, 'index.mjs'),
  "import lib from './lib/index.js';\n" +
  `export const { ${[...names].sort().join(', ')} } = lib;\n` +
  'export default lib;\n');
