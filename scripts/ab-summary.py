#!/usr/bin/env python3
"""Summary of a gpu-run.sh fwd-ab run: per cell and direction, side a's public-API TFLOP/s (mean of
its rounds, min-max) and each other side's mean over a's. Usage: ab-summary.py OUT TAG"""
import glob
import os
import re
import sys

out, tag = sys.argv[1], sys.argv[2]
sides = {}
cudnn = {}  # cell -> torch cudnn TFLOP/s (side a's run with --compare torch)
for f in sorted(glob.glob(os.path.join(out, f"{tag}-*.log"))):
    side = f[len(os.path.join(out, tag)) + 1:-4]
    cells = {}
    col = None
    for line in open(f):
        if line.startswith("| case |"):
            h = [x.strip() for x in line.strip().strip("|").split("|")]
            col = h.index("torch cudnn TFLOP/s") if "torch cudnn TFLOP/s" in h else None
            continue
        if not re.match(r"^\| (float|bfloat)", line):
            continue
        c = [x.strip() for x in line.strip().strip("|").split("|")]
        try:
            cells.setdefault((c[0], c[1]), []).append(float(c[2]))
            if col is not None and side == "a":
                cudnn[(c[0], c[1])] = float(c[col])
        except (ValueError, IndexError):
            continue
    sides[side] = cells
if "a" not in sides:
    sys.exit(f"ab-summary: no side a for {tag}")
others = [s for s in sides if s != "a"]
print(f"| cell | dir | a TFLOP/s (min-max) | " + " | ".join(f"{s} / a" for s in others) + " | a / cudnn | best / cudnn |")
print("| --- | --- | --- |" + " --- |" * (len(others) + 2))
for key, va in sides["a"].items():
    m = sum(va) / len(va)
    row = f"| {key[0]} | {key[1]} | {m:.1f} ({min(va):.0f}-{max(va):.0f}) |"
    best = m
    for s in others:
        vb = sides[s].get(key)
        row += f" {sum(vb) / len(vb) / m:.3f} |" if vb else " - |"
        if vb:
            best = max(best, sum(vb) / len(vb))
    cd = cudnn.get(key)
    row += f" {m / cd:.2f} | {best / cd:.2f} |" if cd else " - | - |"
    print(row)
