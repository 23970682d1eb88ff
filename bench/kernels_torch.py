#!/usr/bin/env python3
"""The GPU kernels one SDPA call of a PERF.md grid cell runs, with their durations (torch.profiler,
CUPTI): which kernels cuDNN's forward + backward is made of, next to ours (ncu on the bench CLI).
Usage: python3 bench/kernels_torch.py cudnn|flash fwd|bwd float16|bfloat16 D N causal(0|1) [calls]"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from sdpa_cell import cell_from_argv

call, name, calls = cell_from_argv(sys.argv, 3)
with profile(activities=[ProfilerActivity.CUDA]) as prof:
    for _ in range(calls):
        call()
    torch.cuda.synchronize()
print(f"{name}: kernels of {calls} calls (us per call)")
total = 0.0
for e in prof.key_averages():
    us = e.device_time_total / calls if hasattr(e, "device_time_total") else e.cuda_time_total / calls
    if us <= 0:
        continue
    total += us
    print(f"  {us:9.1f}  x{e.count // calls}  {e.key[:140]}")
print(f"  {total:9.1f}  all kernels")
