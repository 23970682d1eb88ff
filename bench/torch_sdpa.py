#!/usr/bin/env python3
"""PyTorch SDPA timings for `npm run bench -- --compare torch`.

Reads a JSON list of cases on stdin ({B, H, Hkv, N, D, dtype, causal, dirs, Nq?}) and prints a JSON list
of results: for each case and each backend (flash, cudnn, efficient, math where asked) the forward
time and, where asked, the backward time measured as (forward + backward) - forward, the way PERF.md
says. CUDA events, warm-up, median, random normal inputs. Two protocols, each with its wall-clock
window (ms since the epoch, for the bench's SM clock log):
  - burst (fwd_ms, bwd_ms): `reps` calls, each timed alone and waited for, median; a case's few tens
    of milliseconds of work start from an idle GPU, so they run at the boost clock;
  - sustained (fwd_ms_sus, bwd_ms_sus; when the request has api_ms > 0): back-to-back calls in
    rounds of at least api_ms each, events around a round, median of the per-call times of the
    last three of five: the protocol of our public-API figure, with the same load before its median
    round, where an H200 sits at its power limit and lowers its clock (tenth session: fp16 D 128
    full N 4k, cuDNN 626 TFLOP/s burst, 562 sustained at 1590 MHz). fwd_ms_sus_early /
    bwd_ms_sus_early: the median of the first three rounds (the protocol until the twenty-third
    session).
"""
import time
import json
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

BACKENDS = {
    "flash": SDPBackend.FLASH_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "math": SDPBackend.MATH,
}
DTYPES = {"float16": torch.float16, "bfloat16": torch.bfloat16, "float32": torch.float32}


def median_ms(fn, warmup, reps):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        fn()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e))
    times.sort()
    return times[len(times) // 2]


def sustained_ms(fn, min_ms, warm_rounds=2):
    """Per-call ms of back-to-back calls, rounds of >= min_ms each, events around a round: the median
    of the last three of warm_rounds + 3 rounds, and (the protocol before the twenty-third session)
    the median of the first three. Our public-API figure's median round runs after about three
    round-lengths of load (bench/cli.ts timePair: two groups of kernel samples, the first round and
    a third group); with warm_rounds = 2 torch's median round has the same load history, where the
    first three rounds' median had one, and the H200 was still at a higher clock for it (twenty-second
    session: ours 1639 MHz median over the grid's cells, cuDNN's rounds 1950)."""
    for _ in range(3):
        fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(3):
        fn()
    e.record()
    e.synchronize()
    n = max(10, int(min_ms / max(s.elapsed_time(e) / 3, 1e-3)) + 1)
    per = []
    for _ in range(warm_rounds + 3):
        s.record()
        for _ in range(n):
            fn()
        e.record()
        e.synchronize()
        per.append(s.elapsed_time(e) / n)
    return sorted(per[warm_rounds:])[1], sorted(per[:3])[1]


def windowed(f):
    """f() and its wall-clock window in ms since the epoch."""
    t0 = time.time() * 1000
    v = f()
    return v, [t0, time.time() * 1000]


def run_case(c, warmup, reps, api_ms):
    dt = DTYPES[c["dtype"]]
    B, H, Hkv, N, D = c["B"], c["H"], c["Hkv"], c["N"], c["D"]
    Nq = c.get("Nq") or N  # decode cells: one query against N keys
    # SDPA wants [B, H, N, D]; GQA via enable_gqa.
    q = torch.randn(B, H, Nq, D, device="cuda", dtype=dt, requires_grad=True)
    k = torch.randn(B, Hkv, N, D, device="cuda", dtype=dt, requires_grad=True)
    v = torch.randn(B, Hkv, N, D, device="cuda", dtype=dt, requires_grad=True)
    do = torch.randn(B, H, Nq, D, device="cuda", dtype=dt)
    out = []
    for be in c["backends"]:
        r = {"backend": be}
        try:
            with sdpa_kernel(BACKENDS[be]):
                kw = {"is_causal": c["causal"]}
                if Hkv != H:
                    kw["enable_gqa"] = True
                fwd = lambda: F.scaled_dot_product_attention(q, k, v, **kw)
                with torch.no_grad():
                    r["fwd_ms"], r["fwd_win"] = windowed(lambda: median_ms(fwd, warmup, reps))
                    if api_ms > 0:
                        (r["fwd_ms_sus"], r["fwd_ms_sus_early"]), r["fwd_win_sus"] = windowed(lambda: sustained_ms(fwd, api_ms))
                if "bwd" in c["dirs"]:
                    def fwd_bwd():
                        # fresh gradients each call (see bench/sdpa_cell.py): no accumulation kernels
                        q.grad = k.grad = v.grad = None
                        o = F.scaled_dot_product_attention(q, k, v, **kw)
                        o.backward(do)
                    fb, w = windowed(lambda: median_ms(fwd_bwd, warmup, reps))
                    fw = median_ms(fwd, warmup, reps)
                    r["bwd_ms"], r["bwd_win"] = max(fb - fw, 1e-6), w
                    if api_ms > 0:
                        (fb, fb0), w = windowed(lambda: sustained_ms(fwd_bwd, api_ms))
                        with torch.no_grad():
                            fw, fw0 = sustained_ms(fwd, api_ms)
                        r["bwd_ms_sus"], r["bwd_win_sus"] = max(fb - fw, 1e-6), w
                        r["bwd_ms_sus_early"] = max(fb0 - fw0, 1e-6)
        except Exception as e:  # a backend that does not support the case
            r["error"] = str(e).splitlines()[0][:160]
        out.append(r)
        torch.cuda.empty_cache()
    del q, k, v, do
    torch.cuda.empty_cache()
    return {"case": c, "results": out}


def main():
    req = json.load(sys.stdin)
    res = {"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
           "gpu": torch.cuda.get_device_name(0), "cases": []}
    for c in req["cases"]:
        res["cases"].append(run_case(c, req.get("warmup", 5), req.get("reps", 30), req.get("api_ms", 0)))
        print(f"torch: {len(res['cases'])}/{len(req['cases'])}", file=sys.stderr, flush=True)
    json.dump(res, sys.stdout)


if __name__ == "__main__":
    main()
