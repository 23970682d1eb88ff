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
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

d, dtype, D, N, cz = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5] == "1"
dt = {"float16": torch.float16, "bfloat16": torch.bfloat16}[dtype]
secs = float(os.environ.get("CLOCK_SECONDS", "2.5"))
B, H = 16384 // N, (2048 // max(D, 1) if D <= 128 else 16)
if d == "gemm":
    a = torch.randn(8192, 8192, device="cuda", dtype=dt)
    b = torch.randn(8192, 8192, device="cuda", dtype=dt)
    call = lambda: a @ b
    flops = 2 * 8192 ** 3
else:
    q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=dt, requires_grad=(i < 3)) for i in range(4))
    def call():
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            if d == "fwd":
                with torch.no_grad():
                    F.scaled_dot_product_attention(q, k, v, is_causal=cz)
            else:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=cz)
                o.backward(do)
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
