#!/usr/bin/env python3
"""Issue 12's clock probe: for each JSON line of scripts/clock-probe.js / bench/clock_probe_torch.py
(argv[2]), the median SM clock and power that nvidia-smi logged (argv[1]: lines "epoch_ms index,
clock MHz, power W", the loaded GPU = the one with the highest median power) inside its window, the
first 300 ms left out; a table, and cycles per call at that clock."""
import json
import statistics
import sys

log = []
for line in open(sys.argv[1]):
    try:
        t, rest = line.split(" ", 1)
        idx, clk, pw = [x.strip() for x in rest.split(",")]
        log.append((int(t), idx, float(clk), float(pw)))
    except ValueError:
        continue
if not log:
    sys.exit("clock-summary: empty nvidia-smi log")
gpus = {}
for t, i, c, p in log:
    gpus.setdefault(i, []).append(p)
gpu = max(gpus, key=lambda i: statistics.median(gpus[i]))
print(f"| impl | dir | cell | TFLOP/s | ms | SM clock MHz (median, min-max) | power W | Mcycles per call |")
print("| --- | --- | --- | --- | --- | --- | --- | --- |")
for line in open(sys.argv[2]):
    line = line.strip()
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    if "wins" in r:  # scripts/turns-probe.js: the rounds' windows of one side, each taken whole
        s = [(c, p) for t, i, c, p in log if i == gpu and any(w0 <= t <= w1 for w0, w1 in r["wins"])]
    else:
        w0, w1 = r["win"]
        s = [(c, p) for t, i, c, p in log if i == gpu and w0 + 300 <= t <= w1]
    if not s:
        print(f"| {r['impl']} | {r['dir']} | no samples |")
        continue
    clk = statistics.median(c for c, _ in s)
    pw = statistics.median(p for _, p in s)
    cell = f"{r['dtype']} D{r['D']} {'causal' if r['causal'] else 'full'} N{r['N']}"
    print(f"| {r['impl']} | {r['dir']} | {cell} | {r.get('tflops', float('nan')):.1f} | {r['ms']:.3f} | {clk:.0f} ({min(c for c, _ in s):.0f}-{max(c for c, _ in s):.0f}) "
          f"| {pw:.0f} | {r['ms'] * clk / 1000:.3f} |")
