#!/usr/bin/env python3
"""Compile time of every CUDA translation unit of libfp4kit, per GPU architecture.

Each unit is compiled with the build's own command line (from compile_commands.json) for one
architecture at a time, and its CPU time (user + system of nvcc and everything it starts) and wall
time are recorded. CPU time is the budget that matters on a shared machine: it does not depend on
what else runs, and on N free cores a build of the units takes about sum(CPU) / N.

  python3 scripts/cuda_compile_times.py                          # every unit, the five architectures
  python3 scripts/cuda_compile_times.py --arch 90a,80 --unit gemm_large_m_wgra,moe_grouped -j 2
  python3 scripts/cuda_compile_times.py --csv times.csv --build build-times

--build DIR reuses (or makes) a CUDA build tree configured with CMAKE_EXPORT_COMPILE_COMMANDS=ON;
nothing in it is built. Object files go to a temporary directory. Run it under `nice` on a shared
machine.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

ALL_ARCHS = ["80", "89", "90a", "100a", "120a"]
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def configure(build):
    """Configures a CUDA build tree that exports its compile commands (one architecture: the
    commands are rewritten per architecture anyway)."""
    db = os.path.join(build, "compile_commands.json")
    if not os.path.exists(db):
        subprocess.run(["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release",
                        "-DCMAKE_EXPORT_COMPILE_COMMANDS=ON", "-DFP4KIT_WERROR=ON",
                        "-DFP4KIT_CUDA_ARCHITECTURES=90a"],
                       check=True, stdout=subprocess.DEVNULL)
    with open(db) as f:
        entries = [e for e in json.load(f) if e["file"].endswith(".cu")]
    if not entries:
        sys.exit(f"cuda_compile_times: {db} lists no .cu file: the tree was configured without CUDA "
                 "(is nvcc on PATH?)")
    return entries


def command_for(entry, arch, obj):
    """The entry's command with its code generation replaced by one architecture, writing obj."""
    args = shlex.split(entry["command"]) if "command" in entry else list(entry["arguments"])
    out, skip = [], False
    for a in args:
        if skip:
            skip = False
            continue
        if a in ("-gencode", "-o", "--output-file"):
            skip = True
            continue
        if a.startswith(("--generate-code", "-gencode=", "-arch=", "--gpu-architecture", "-code=")):
            continue
        out.append(a)
    return out + [f"--generate-code=arch=compute_{arch},code=[sm_{arch}]", "-o", obj]


def run_all(jobs, parallel):
    """Runs (key, argv, cwd) jobs, at most `parallel` at once; returns {key: (cpu_s, wall_s, rc)}."""
    pending, running, results = list(jobs), {}, {}
    while pending or running:
        while pending and len(running) < parallel:
            key, argv, cwd = pending.pop(0)
            p = subprocess.Popen(argv, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            running[p.pid] = (key, p, time.perf_counter())
        pid, status, ru = os.wait4(-1, 0)
        if pid not in running:
            continue
        key, p, t0 = running.pop(pid)
        rc = os.waitstatus_to_exitcode(status)
        err = p.stderr.read().decode(errors="replace")
        p.stderr.close()
        p.returncode = rc
        results[key] = (ru.ru_utime + ru.ru_stime, time.perf_counter() - t0, rc)
        print(f"  {key[0]:<28} sm_{key[1]:<5} {ru.ru_utime + ru.ru_stime:7.1f} s CPU "
              f"{results[key][1]:7.1f} s wall{'' if rc == 0 else f'  FAILED (exit {rc})'}",
              file=sys.stderr, flush=True)
        if rc:
            print(err[-2000:], file=sys.stderr)
    return results


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build-compile-times"),
                    help="CUDA build tree with compile_commands.json (made when absent)")
    ap.add_argument("--arch", default=",".join(ALL_ARCHS), help="comma-separated, e.g. 90a,80")
    ap.add_argument("--unit", default="", help="comma-separated unit names (file stems); default all")
    ap.add_argument("-j", "--jobs", type=int, default=1, help="compiles at once (default 1)")
    ap.add_argument("--csv", help="also write unit,arch,cpu_s,wall_s rows here")
    a = ap.parse_args()

    archs = [x.strip().removeprefix("sm_") for x in a.arch.split(",") if x.strip()]
    entries = configure(os.path.abspath(a.build))
    names = {os.path.splitext(os.path.basename(e["file"]))[0]: e for e in entries}
    wanted = [u for u in a.unit.split(",") if u] or sorted(names)
    unknown = [u for u in wanted if u not in names]
    if unknown:
        sys.exit(f"cuda_compile_times: no unit {', '.join(unknown)}; units: {', '.join(sorted(names))}")
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [((u, arch), command_for(names[u], arch, os.path.join(tmp, f"{u}.{arch}.o")),
                 names[u]["directory"]) for u in wanted for arch in archs]
        print(f"cuda_compile_times: {len(wanted)} units x {len(archs)} architectures, "
              f"{a.jobs} at once", file=sys.stderr)
        res = run_all(jobs, max(1, a.jobs))

    def cell(u, arch):
        cpu, _, rc = res[(u, arch)]
        return f"{cpu:.1f}" if rc == 0 else "FAIL"

    rows = sorted(wanted, key=lambda u: -sum(res[(u, x)][0] for x in archs))
    head = ["unit (CPU s)"] + [f"sm_{x}" for x in archs] + ["total"]
    table = [[u] + [cell(u, x) for x in archs] + [f"{sum(res[(u, x)][0] for x in archs):.1f}"] for u in rows]
    col_tot = [sum(res[(u, x)][0] for u in rows) for x in archs]
    table.append(["all units"] + [f"{t:.1f}" for t in col_tot] + [f"{sum(col_tot):.1f}"])
    w = [max(len(r[i]) for r in [head] + table) for i in range(len(head))]
    print("| " + " | ".join(h.ljust(w[i]) for i, h in enumerate(head)) + " |")
    print("|" + "|".join("-" * (n + 2) for n in w) + "|")
    for r in table:
        print("| " + " | ".join(c.ljust(w[0]) if i == 0 else c.rjust(w[i]) for i, c in enumerate(r)) + " |")
    wall = sum(r[1] for r in res.values())
    print(f"sum of wall times {wall:.0f} s; a build on N free cores needs about {sum(col_tot):.0f} s / N "
          "for these units (host compiles and linking come on top)")
    if a.csv:
        with open(a.csv, "w") as f:
            f.write("unit,arch,cpu_s,wall_s,exit\n")
            for (u, x), (cpu, wl, rc) in sorted(res.items()):
                f.write(f"{u},{x},{cpu:.2f},{wl:.2f},{rc}\n")
    return 1 if any(r[2] for r in res.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
