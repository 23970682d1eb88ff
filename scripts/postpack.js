#!/usr/bin/env node
// `npm pack` / `npm publish` (postpack): removes the prebuilds/ folder that prepack.js made, so
// that a checkout keeps loading its own source build (build/Release) and nothing stale lingers.
'use strict';
const fs = require('fs');
const path = require('path');

fs.rmSync(path.resolve(__dirname, '..', 'prebuilds'), { recursive: true, force: true });
