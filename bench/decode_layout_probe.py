# Read-bandwidth probe for the paged decode's access pattern (H200, Triton; no part of the library).
#
# Question (twenty-fifth session, NOTES-inference.md): our decode reads a page-16 cache laid out
# [pages, 16, Hkv, D] one kv head per block: each 16-row tile is 16 pieces of D * 2 bytes at a
# stride of Hkv * D * 2. cuDNN's decode reads a contiguous [B, Hkv, N, D] cache and streams up to
# 4.4 TB/s where ours holds 4.2. Is the difference the layout (DRAM locality), or the kernels?
# Three read-only kernels with the same bytes, each swept over its split count, warps and pipeline
# depth, best of the sweep reported:
#   head_paged:  grid (Hkv, splits, B), our layout and schedule (pages shuffled).
#   all_paged:   grid (splits, B), our layout, a program reads whole pages (all kv heads, contiguous).
#   head_contig: grid (Hkv, splits, B), the contiguous per-head layout that cuDNN reads.
# Usage: python3 bench/decode_layout_probe.py
import itertools
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def head_paged(K, V, PT, Out, pages_per_seq, pages_per_prog, HKV: tl.constexpr, D: tl.constexpr,
               PAGE: tl.constexpr, PPI: tl.constexpr, STAGES: tl.constexpr):
    hk = tl.program_id(0)
    sp = tl.program_id(1)
    b = tl.program_id(2)
    r = tl.arange(0, PPI * PAGE)
    d = tl.arange(0, D)
    acc = tl.zeros([PPI * PAGE, D], tl.float32)
    p0 = sp * pages_per_prog
    for i in tl.range(0, pages_per_prog // PPI, num_stages=STAGES):
        page = tl.load(PT + b * pages_per_seq + p0 + i * PPI + r // PAGE)
        off = (page.to(tl.int64) * PAGE + r % PAGE)[:, None] * (HKV * D) + hk * D + d[None, :]
        acc += tl.load(K + off).to(tl.float32) + tl.load(V + off).to(tl.float32)
    tl.store(Out + (b * tl.num_programs(1) + sp) * HKV + hk, tl.sum(acc))


@triton.jit
def head_paged_epi(K, V, PT, Part, Ctr, Out, pages_per_seq, pages_per_prog, HKV: tl.constexpr, D: tl.constexpr,
                   PAGE: tl.constexpr, PPI: tl.constexpr, STAGES: tl.constexpr, ROWS: tl.constexpr):
    # head_paged with our decode block's end: ROWS partial rows of D floats written, a count-in
    # (acq_rel at GPU scope) per (sequence, kv head), and the last split of the group reads every
    # split's partial rows back and writes the merged rows.
    hk = tl.program_id(0)
    sp = tl.program_id(1)
    b = tl.program_id(2)
    ns = tl.num_programs(1)
    r = tl.arange(0, PPI * PAGE)
    d = tl.arange(0, D)
    acc = tl.zeros([PPI * PAGE, D], tl.float32)
    p0 = sp * pages_per_prog
    for i in tl.range(0, pages_per_prog // PPI, num_stages=STAGES):
        page = tl.load(PT + b * pages_per_seq + p0 + i * PPI + r // PAGE)
        off = (page.to(tl.int64) * PAGE + r % PAGE)[:, None] * (HKV * D) + hk * D + d[None, :]
        acc += tl.load(K + off).to(tl.float32) + tl.load(V + off).to(tl.float32)
    row = tl.sum(acc, 0)
    g = b * HKV + hk
    rr = tl.arange(0, ROWS)
    pbase = ((g * ns + sp) * ROWS).to(tl.int64) * D
    tl.store(Part + pbase + rr[:, None] * D + d[None, :], row[None, :] + rr[:, None].to(tl.float32))
    old = tl.atomic_add(Ctr + g, 1, sem="acq_rel")
    if old == ns - 1:
        tl.atomic_xchg(Ctr + g, 0)
        tot = tl.zeros([ROWS, D], tl.float32)
        for j in range(0, ns):
            tot += tl.load(Part + ((g * ns + j) * ROWS).to(tl.int64) * D + rr[:, None] * D + d[None, :], cache_modifier=".cg")
        tl.store(Out + g.to(tl.int64) * ROWS * D + rr[:, None] * D + d[None, :], tot)


@triton.jit
def all_paged(K, V, PT, Out, pages_per_seq, pages_per_prog, HKV: tl.constexpr, D: tl.constexpr,
              PAGE: tl.constexpr, STAGES: tl.constexpr):
    sp = tl.program_id(0)
    b = tl.program_id(1)
    r = tl.arange(0, PAGE)
    c = tl.arange(0, HKV * D)
    acc = tl.zeros([PAGE, HKV * D], tl.float32)
    p0 = sp * pages_per_prog
    for i in tl.range(0, pages_per_prog, num_stages=STAGES):
        page = tl.load(PT + b * pages_per_seq + p0 + i)
        off = (page.to(tl.int64) * PAGE + r)[:, None] * (HKV * D) + c[None, :]
        acc += tl.load(K + off).to(tl.float32) + tl.load(V + off).to(tl.float32)
    tl.store(Out + b * tl.num_programs(0) + sp, tl.sum(acc))


@triton.jit
def head_contig(K, V, Out, n_keys, keys_per_prog, HKV: tl.constexpr, D: tl.constexpr, ROWS: tl.constexpr,
                STAGES: tl.constexpr):
    hk = tl.program_id(0)
    sp = tl.program_id(1)
    b = tl.program_id(2)
    r = tl.arange(0, ROWS)
    d = tl.arange(0, D)
    acc = tl.zeros([ROWS, D], tl.float32)
    base = (b * HKV + hk).to(tl.int64) * n_keys * D
    k0 = sp * keys_per_prog
    for i in tl.range(0, keys_per_prog // ROWS, num_stages=STAGES):
        off = base + (k0 + i * ROWS + r)[:, None] * D + d[None, :]
        acc += tl.load(K + off).to(tl.float32) + tl.load(V + off).to(tl.float32)
    tl.store(Out + (b * tl.num_programs(1) + sp) * HKV + hk, tl.sum(acc))


def time_us(fn, calls=20, rounds=5):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(rounds):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(calls):
            fn()
        e1.record()
        torch.cuda.synchronize()
        ts.append(e0.elapsed_time(e1) * 1000 / calls)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    dev = "cuda"
    HKV, D, PAGE = 8, 128, 16
    torch.manual_seed(0)
    cells = [(16, 4096), (16, 16384), (1, 16384)] if len(sys.argv) < 2 else [tuple(map(int, c.split('x'))) for c in sys.argv[1:]]
    print("cell | kernel | best us | TB/s | config (splits, warps, stages, pages or rows per iteration)")
    for B, N in cells:
        pps = N // PAGE
        P = B * pps
        k = torch.randn(P, PAGE, HKV, D, device=dev, dtype=torch.float16)
        v = torch.randn_like(k)
        pt = torch.randperm(P, device=dev, dtype=torch.int32).view(B, pps).contiguous()
        kc = torch.randn(B, HKV, N, D, device=dev, dtype=torch.float16)
        vc = torch.randn_like(kc)
        nbytes = 2 * k.numel() * 2
        out = torch.empty(1 << 16, device=dev, dtype=torch.float32)
        res = {}
        sweep = []
        for splits, warps, stages, ppi in itertools.product([1, 2, 4, 8, 16, 32], [4, 8], [2, 3, 4], [1, 2, 4]):
            if pps % (splits * ppi) or B * HKV * splits > 65535:
                continue
            ppp = pps // splits
            fn = lambda: head_paged[(HKV, splits, B)](k, v, pt, out, pps, ppp, HKV, D, PAGE, ppi, stages, num_warps=warps)
            try:
                t = time_us(fn)
            except Exception as e:  # resource limits of a config
                continue
            sweep.append(("head_paged", splits, warps, stages, ppi, t))
            if "head_paged" not in res or t < res["head_paged"][0]:
                res["head_paged"] = (t, (splits, warps, stages, ppi))
        ctr = torch.zeros(B * HKV, device=dev, dtype=torch.int32)
        part = torch.empty(B * HKV * 64 * 4 * D, device=dev, dtype=torch.float32)
        outm = torch.empty(B * HKV * 4 * D, device=dev, dtype=torch.float32)
        for splits, warps, stages, ppi in itertools.product([1, 2, 4, 8, 16, 32], [4, 8], [2, 3, 4], [1, 2, 4]):
            if pps % (splits * ppi) or B * HKV * splits > 65535:
                continue
            ppp = pps // splits
            fn = lambda: head_paged_epi[(HKV, splits, B)](k, v, pt, part, ctr, outm, pps, ppp, HKV, D, PAGE, ppi, stages, 4, num_warps=warps)
            try:
                t = time_us(fn)
            except Exception as e:
                print("epi failed", e)
                continue
            sweep.append(("head_paged_epi", splits, warps, stages, ppi, t))
            if "head_paged_epi" not in res or t < res["head_paged_epi"][0]:
                res["head_paged_epi"] = (t, (splits, warps, stages, ppi))
        for splits, warps, stages in itertools.product([1, 2, 4, 8, 16, 32, 64], [4, 8], [2, 3, 4]):
            if pps % splits:
                continue
            ppp = pps // splits
            fn = lambda: all_paged[(splits, B)](k, v, pt, out, pps, ppp, HKV, D, PAGE, stages, num_warps=warps)
            try:
                t = time_us(fn)
            except Exception:
                continue
            if "all_paged" not in res or t < res["all_paged"][0]:
                res["all_paged"] = (t, (splits, warps, stages, 1))
        for splits, warps, stages, rows in itertools.product([1, 2, 4, 8, 16, 32], [4, 8], [2, 3, 4], [16, 32, 64]):
            if N % (splits * rows):
                continue
            kpp = N // splits
            fn = lambda: head_contig[(HKV, splits, B)](kc, vc, out, N, kpp, HKV, D, rows, stages, num_warps=warps)
            try:
                t = time_us(fn)
            except Exception:
                continue
            if "head_contig" not in res or t < res["head_contig"][0]:
                res["head_contig"] = (t, (splits, warps, stages, rows))
        for name in ["head_paged", "head_paged_epi"]:
            # the best config per split count
            for sc in sorted(set(x[1] for x in sweep if x[0] == name)):
                best = min((x for x in sweep if x[0] == name and x[1] == sc), key=lambda x: x[5])
                print(f"  B{B} N{N} {name} splits {sc}: {best[5]:.1f} us {nbytes / best[5] / 1e6:.2f} TB/s (warps {best[2]}, stages {best[3]}, ppi {best[4]})")
        for name in ["head_paged", "head_paged_epi", "all_paged", "head_contig"]:
            if name in res:
                t, cfg = res[name]
                print(f"B{B} N{N} | {name} | {t:.1f} | {nbytes / t / 1e6:.2f} | {cfg}")
        sys.stdout.flush()
        del k, v, kc, vc
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
