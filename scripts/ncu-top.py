#!/usr/bin/env python3
"""Top SASS instructions of an ncu source page (CSV from `ncu -i R --page source --csv --print-source sass`)
by warp stall samples, with their share of all samples. Usage: ncu-top.py FILE [N=30]"""
import csv
import sys


def main():
    path = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 30
    with open(path, newline='') as f:
        lines = [l for l in f if l.count(',') > 2]  # skip ncu's banner lines
    rows = list(csv.reader(lines))
    if not rows:
        print(f'{path}: no CSV rows')
        return
    at = next((i for i, r in enumerate(rows) if any(h.strip() == 'Source' for h in r)), 0)  # the header row
    head, rows = rows[at], rows[at:]
    def col(*names):
        for name in names:
            for i, h in enumerate(head):
                if name.lower() in h.lower():
                    return i
        return None
    src = col('Source')
    samp = col('Warp Stall Sampling (All', 'Sampling Data (All', 'stall_sampling')
    addr = col('Address', '#')
    if src is None or samp is None:
        print(f'{path}: columns not found; header: {head[:12]}')
        return
    def num(x):
        try:
            return float(x.replace(',', ''))
        except ValueError:
            return 0.0
    body = [r for r in rows[1:] if len(r) > max(src, samp)]
    total = sum(num(r[samp]) for r in body) or 1.0
    print(f'{path}: {len(body)} instructions, {total:.0f} stall samples')
    for r in sorted(body, key=lambda r: -num(r[samp]))[:n]:
        a = r[addr] if addr is not None else ''
        print(f'{100 * num(r[samp]) / total:5.1f}%  {a:>8}  {r[src].strip()[:110]}')


if __name__ == '__main__':
    main()
