#!/usr/bin/env python3
"""One line per profiled kernel from an `ncu --csv --metrics ...` log (gpu-check.sh's ncu part):
time (ns), DRAM bytes read and written, DRAM and SM throughput (% of peak), registers per thread,
the register occupancy limit (CTAs per SM), active warps (% of peak) and warp instructions
executed ("?" where the log lacks a metric).

    python3 scripts/ncu_breakdown.py LOG [LOG ...]

With --moe-layers, logs of `fp4kit bench --moe` under ncu (gpu__time_duration.sum) are cut into
layer calls at each routing kernel instead (route_kernel, or route_quantize_kernel in W4A4
decode), and each distinct layer (its kernels and grids) is printed once: the median time (us) of
every kernel over the calls, one column per log (logs of the same layers, e.g. one per setting).

    python3 scripts/ncu_breakdown.py --moe-layers LOG [LOG ...]
"""
import collections
import csv
import statistics
import sys

COLUMNS = [
    ("gpu__time_duration.sum", "time_ns"),
    ("dram__bytes_read.sum", "dram_read"),
    ("dram__bytes_write.sum", "dram_write"),
    ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram%"),
    ("sm__throughput.avg.pct_of_peak_sustained_elapsed", "sm%"),
    ("launch__registers_per_thread", "regs"),
    ("launch__occupancy_limit_registers", "ctas/sm(regs)"),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "warps%"),
    ("smsp__inst_executed.sum", "warp_insts"),
]


def load(path):
    kernels = collections.OrderedDict()
    with open(path, errors="replace") as f:
        for line in f:
            if not line.startswith('"') or line.startswith('"ID"'):
                continue
            row = next(csv.reader([line]))
            if len(row) < 15:
                continue
            kernels.setdefault((int(row[0]), row[4], row[8]), {})[row[12]] = row[14]
    return kernels


def short_name(name):
    for noise in ("void ", "<unnamed>::", "(anonymous namespace)::"):
        name = name.replace(noise, "")
    return name.split("(")[0]


def moe_layers(paths):
    """Median kernel times per distinct layer call, one column per log."""
    tables = []
    for path in paths:
        calls = []
        for (_, name, grid), metrics in load(path).items():
            if "route_kernel" in name or "route_quantize_kernel" in name or not calls:  # a layer's first launch
                calls.append([])
            calls[-1].append((short_name(name), grid, float(metrics.get("gpu__time_duration.sum", "nan").replace(",", "")) / 1000))
        layers = collections.OrderedDict()
        for call in calls:
            layers.setdefault(tuple((k, g) for k, g, _ in call), []).append([t for _, _, t in call])
        tables.append([(key, [statistics.median(c[i] for c in times) for i in range(len(key))])
                       for key, times in layers.items()])
    print("== " + " | ".join(paths))
    for li, (key, _) in enumerate(tables[0]):
        print(f"layer {li}")
        for ki, (name, grid) in enumerate(key):
            cols = " ".join(f"{t[li][1][ki]:9.1f}" if li < len(t) and ki < len(t[li][1]) else "        ?" for t in tables)
            print(f"  {name[:60]:60s} {grid:>14s} {cols}")


def breakdown(path):
    kernels = load(path)
    print(f"== {path}")
    print("id | kernel | grid | " + " | ".join(name for _, name in COLUMNS))
    for (kid, name, grid), metrics in kernels.items():
        values = " | ".join(metrics.get(metric, "?") for metric, _ in COLUMNS)
        print(f"{kid} | {name[:90]} | {grid} | {values}")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1:] == ["--moe-layers"]:
        sys.exit(__doc__)
    if sys.argv[1] in ("-h", "--help"):
        print(__doc__)
        sys.exit(0)
    if sys.argv[1] == "--moe-layers":
        moe_layers(sys.argv[2:])
    else:
        for log in sys.argv[1:]:
            breakdown(log)
