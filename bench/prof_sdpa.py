#!/usr/bin/env python3
"""One PERF.md grid cell through torch SDPA, for ncu to profile (`gpu-run.sh cudnn-prof`): a few
warm-up calls, then REPS calls inside an NVTX range "prof" (ncu --nvtx --nvtx-include prof/).
Usage: python3 bench/prof_sdpa.py cudnn|flash fwd|bwd float16|bfloat16 D N causal(0|1) [reps]"""
import sys

import torch

from sdpa_cell import sdpa_cell

be, d, dtype, D, N, cz = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), sys.argv[6] == "1"
reps = int(sys.argv[7]) if len(sys.argv) > 7 else 2
call = sdpa_cell(be, d, dtype, D, N, cz)
for _ in range(3):
    call()
torch.cuda.synchronize()
torch.cuda.nvtx.range_push("prof")
for _ in range(reps):
    call()
torch.cuda.synchronize()
torch.cuda.nvtx.range_pop()
print(f"{be} {d} {dtype} D{D} N{N} causal={int(cz)} x{reps}: ok")
