#!/usr/bin/env python3
"""Per-kernel times of one memra-bench --profile-range run under ncu.

Reads ncu's CSV (--metrics gpu__time_duration.sum --csv --print-units base)
and splits the kernels into forwards: a forward begins at each embed kernel.
For each forward it prints the kernel count and total time, and for the
forwards named by --show (default: the first and the last) the time per
kernel name (template arguments kept, parameters dropped), largest first.

  scripts/ncu-steps.py ncu.csv [--show 0,-1] [--top 25]
"""
import csv
import sys


def kernels(path):
    with open(path, newline="") as f:
        lines = [l for l in f if l.startswith('"')]
    for row in csv.DictReader(lines):
        if row.get("Metric Name") != "gpu__time_duration.sum":
            continue
        name = row["Kernel Name"].split("(")[0].replace("void ", "").replace("<unnamed>::", "").strip()
        yield name, float(row["Metric Value"].replace(",", "")) / 1000.0


def forwards(ks):
    cur = []
    for name, us in ks:
        if name.startswith("embed") and cur:
            yield cur
            cur = []
        cur.append((name, us))
    if cur:
        yield cur


def main():
    args = sys.argv[1:]
    if not args:
        sys.exit(__doc__)
    show, top = "0,-1", 25
    if "--show" in args:
        show = args[args.index("--show") + 1]
    if "--top" in args:
        top = int(args[args.index("--top") + 1])
    fw = list(forwards(kernels(args[0])))
    for i, f in enumerate(fw):
        print(f"forward {i}: {len(f)} kernels, {sum(u for _, u in f):.1f} us")
    for s in sorted({int(x) % len(fw) for x in show.split(",")} if fw else []):
        f = fw[s]
        tot = sum(u for _, u in f)
        by = {}
        for name, us in f:
            n, t = by.get(name, (0, 0.0))
            by[name] = (n + 1, t + us)
        print(f"\nforward {s}: {tot:.1f} us in {len(f)} kernels")
        for name, (n, t) in sorted(by.items(), key=lambda kv: -kv[1][1])[:top]:
            print(f"  {t:9.1f} us {100 * t / tot:5.1f}%  x{n:<4d} {t / n:8.2f} us  {name[:90]}")


main()
