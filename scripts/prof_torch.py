# One PyTorch SDPA (flash backend) forward + backward on a grid shape, repeated, for ncu to profile.
# Usage: python3 scripts/prof_torch.py D N causal [fwd|bwd] [reps]
import sys, torch
from torch.nn.attention import sdpa_kernel, SDPBackend
D, N, causal = int(sys.argv[1]), int(sys.argv[2]), bool(int(sys.argv[3]))
what = sys.argv[4] if len(sys.argv) > 4 else "bwd"
reps = int(sys.argv[5]) if len(sys.argv) > 5 else 3
B = 16384 // N; H = 16 if D == 256 else 2048 // D
q, k, v = (torch.randn(B, H, N, D, device="cuda", dtype=torch.float16, requires_grad=True) for _ in range(3))
g = torch.randn(B, H, N, D, device="cuda", dtype=torch.float16)
with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
    for _ in range(reps):
        o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        if what == "bwd":
            o.backward(g)
torch.cuda.synchronize()
print(f"torch flash fp16 D{D} N{N} causal={int(causal)} {what} x{reps}: ok")
