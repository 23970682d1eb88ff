"""One PERF.md grid cell through torch SDPA, shared by bench/clock_probe_torch.py and
bench/prof_sdpa.py: the grid's shape (B * N = 16384, H = 2048 / D, 16 for D > 128), random
[B, H, N, D] inputs on the GPU and a call that runs the forward (no grad) or forward + backward
under one SDPA backend."""
import os

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16}
KEEP_GRAD = os.environ.get("SDPA_KEEP_GRAD") == "1"


def grid_shape(D, N):
    """(B, H) of the PERF.md grid cell at head dim D and sequence length N."""
    return 16384 // N, (2048 // D if D <= 128 else 16)


def sdpa_cell(backend, direction, dtype, D, N, causal):
    """A no-argument call running the cell once (direction "fwd" or "bwd": forward + backward)."""
    B, H = grid_shape(D, N)
    dt = DTYPES[dtype]
    q, k, v, do = (torch.randn(B, H, N, D, device="cuda", dtype=dt, requires_grad=(i < 3)) for i in range(4))

    def call():
        with sdpa_kernel(BACKENDS[backend]):
            if direction == "fwd":
                with torch.no_grad():
                    F.scaled_dot_product_attention(q, k, v, is_causal=causal)
            else:
                # fresh gradients each call, as our backward returns new dq / dk / dv: gradients
                # left on q / k / v would add an accumulation kernel per input to every call
                # (SDPA_KEEP_GRAD=1: accumulate, the protocol before the thirty-seventh session, for
                # comparisons)
                if not KEEP_GRAD:
                    q.grad = k.grad = v.grad = None
                o = F.scaled_dot_product_attention(q, k, v, is_causal=causal)
                o.backward(do)

    return call


def cell_from_argv(argv, default_reps):
    """The cell of a script's command line `backend fwd|bwd dtype D N causal(0|1) [reps]`, warmed up
    (three calls, synchronized): (call, a line naming it, reps)."""
    be, d, dtype, D, N, cz = argv[1], argv[2], argv[3], int(argv[4]), int(argv[5]), argv[6] == "1"
    reps = int(argv[7]) if len(argv) > 7 else default_reps
    call = sdpa_cell(be, d, dtype, D, N, cz)
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    return call, f"{be} {d} {dtype} D{D} N{N} causal={int(cz)}", reps
