#!/usr/bin/env python3
"""Issue 12's clock probe, torch side: one PERF.md grid cell through SDPA with the cuDNN backend,
back to back for CLOCK_SECONDS (default 2.5), and one JSON line like scripts/clock-probe.js's (the
window in ms since the epoch, calls, ms per call, TFLOP/s). `gemm` instead of a direction: an
8192^3 fp16 matrix product (the clock under a plain GEMM load).
Usage: python3 bench/clock_probe_torch.py fwd|bwd|gemm float16|bfloat16 D N causal(0|1)"""
import json
import os
import sys
import time

import torch

from sdpa_cell import grid_shape, sdpa_cell

d, dtype, D, N, cz = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
dt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
secs = float(os.environ.get("CLOCK_SECONDS", "2.5"))
if d == "gemm":
    a = torch.randn(8192, 8192, device="cuda", dtype=dt)
    b = torch.randn(8192, 8192, device="cuda", dtype=dt)
    call = lambda: a @ b
    flops = 2 * 8192 ** 3
else:
    B, H = grid_shape(D, N)
    call = sdpa_cell("cudnn", d, dtype, D, N, cz)
    flops = 4 * B * H * N * N * D / (2 if cz else 1) * (3.5 if d == "bwd" else 1)  # bwd: fwd + bwd
for _ in range(5):
    call()
torch.cuda.synchronize()
t = time.perf_counter()
for _ in range(10):
    call()
torch.cuda.synchronize()
per = (time.perf_counter() - t) / 10
n = max(20, round(secs / per))
w0 = time.time() * 1000
t = time.perf_counter()
for _ in range(n):
    call()
torch.cuda.synchronize()
ms = (time.perf_counter() - t) / n * 1000
print(json.dumps({"impl": "cudnn" if d != "gemm" else "gemm", "dir": d, "dtype": dtype, "D": D, "N": N, "causal": cz,
                  "win": [w0, time.time() * 1000], "calls": n, "ms": ms, "tflops": flops / ms / 1e9}))
