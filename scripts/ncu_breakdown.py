#!/usr/bin/env python3
"""One line per profiled kernel from an `ncu --csv --metrics ...` log (gpu-check.sh's ncu part):
time (ns), DRAM bytes read and written, DRAM and SM throughput (% of peak), registers per thread,
the register occupancy limit (CTAs per SM), active warps (% of peak) and warp instructions
executed ("?" where the log lacks a metric).

    python3 scripts/ncu_breakdown.py LOG [LOG ...]
"""
import collections
import csv
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


def breakdown(path):
    kernels = collections.OrderedDict()
    with open(path, errors="replace") as f:
        for line in f:
            if not line.startswith('"') or line.startswith('"ID"'):
                continue
            row = next(csv.reader([line]))
            if len(row) < 15:
                continue
            kernels.setdefault((int(row[0]), row[4], row[8]), {})[row[12]] = row[14]
    print(f"== {path}")
    print("id | kernel | grid | " + " | ".join(name for _, name in COLUMNS))
    for (kid, name, grid), metrics in kernels.items():
        values = " | ".join(metrics.get(metric, "?") for metric, _ in COLUMNS)
        print(f"{kid} | {name[:90]} | {grid} | {values}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    for log in sys.argv[1:]:
        breakdown(log)
