#!/usr/bin/env python3
"""Torch side of scripts/turns-probe.js: cuDNN SDPA rounds on request, so that ours and cuDNN's
rounds alternate on the GPU and both see the same power and clock state.

One JSON object per line on stdin, one reply per line on stdout:
  {"op": "setup", "dtype", "D", "N", "causal", "dirs": ["fwd", "bwd"]}
      builds the PERF.md grid cell (bench/sdpa_cell.py) for each direction ("bwd" = forward +
      backward, PyTorch's way of running a backward), warms it up, and replies {"guess": {dir: ms}}
  {"op": "round", "dir", "n"}
      n back-to-back calls with CUDA events around the round; replies {"ms": per call, "win":
      [start, end] in ms since the epoch}
  {"op": "free"}   drops the cell's tensors
  {"op": "quit"}
"""
import json
import sys
import time

import torch

from sdpa_cell import sdpa_cell


def reply(obj):
    sys.stdout.write(json.dumps(obj) + "\n")
    sys.stdout.flush()


def timed(call, n):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(n):
        call()
    e.record()
    e.synchronize()
    return s.elapsed_time(e) / n


def main():
    calls = {}
    reply({"torch": torch.__version__, "cudnn": torch.backends.cudnn.version(), "gpu": torch.cuda.get_device_name(0)})
    for line in sys.stdin:
        line = line.strip()
        if not line:
            continue
        req = json.loads(line)
        op = req["op"]
        try:
            if op == "setup":
                calls = {}
                guess = {}
                for d in req["dirs"]:
                    calls[d] = sdpa_cell("cudnn", d, req["dtype"], req["D"], req["N"], req["causal"])
                    for _ in range(3):
                        calls[d]()
                    guess[d] = timed(calls[d], 5)
                reply({"guess": guess})
            elif op == "round":
                w0 = time.time() * 1000
                ms = timed(calls[req["dir"]], req["n"])
                reply({"ms": ms, "win": [w0, time.time() * 1000]})
            elif op == "free":
                calls = {}
                torch.cuda.empty_cache()
                reply({})
            elif op == "quit":
                reply({})
                break
            else:
                reply({"error": f"unknown op {op}"})
        except Exception as e:  # reported to the probe, which records the cell as failed
            reply({"error": str(e).splitlines()[0][:200]})


if __name__ == "__main__":
    main()
