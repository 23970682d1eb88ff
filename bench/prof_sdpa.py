#!/usr/bin/env python3
"""One PERF.md grid cell through torch SDPA, for ncu to profile (`gpu-run.sh cudnn-prof`): a few
warm-up calls, then REPS calls inside an NVTX range "prof" (ncu --nvtx --nvtx-include prof/).
Usage: python3 bench/prof_sdpa.py cudnn|flash fwd|bwd float16|bfloat16 D N causal(0|1) [reps]"""
import sys

import torch

from sdpa_cell import cell_from_argv

call, name, reps = cell_from_argv(sys.argv, 2)
torch.cuda.nvtx.range_push("prof")
for _ in range(reps):
    call()
torch.cuda.synchronize()
torch.cuda.nvtx.range_pop()
print(f"{name} x{reps}: ok")
