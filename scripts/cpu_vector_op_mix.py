#!/usr/bin/env python3
"""Throughput of mixes of independent 256-bit vector instructions on this x86 core.

Each mix is a loop body of the named instructions, interleaved, with no dependencies between
them except the FMAs' own accumulators (ten of them, more than latency x pipes), repeated 10^7
times. The core clock comes from a chain of dependent integer adds (one a cycle). The output (CSV:
mix, cycles an iteration, instructions, instructions a cycle) shows which instructions share
execution pipes: two kinds that together run at the sum of their separate rates use different
pipes. Used for bench/results/cpu/2026-12-04-avx2-m1-op-bound/ (the AVX2 M = 1 loop's op mix).

Usage: scripts/cpu_vector_op_mix.py [--cc gcc] [--keep DIR]
"""
import argparse
import os
import subprocess
import sys
import tempfile

# name: {instruction: count}. "mem" FMAs read A from an L1-resident buffer, as the kernel's do.
MIXES = {
    "pshufb16": {"vpshufb": 16},
    "unpcklbw16": {"vpunpcklbw": 16},
    "unpcklwd16": {"vpunpcklwd": 16},
    "pslld16": {"vpslld": 16},
    "psrlw16": {"vpsrlw": 16},
    "pand16": {"vpand": 16},
    "permilps16": {"vpermilps": 16},
    "pmulhuw16": {"vpmulhuw": 16},
    "pmulld16": {"vpmulld": 16},
    "haddps16": {"vhaddps": 16},
    "addps16": {"vaddps": 16},
    "fma20": {"vfmadd231ps": 20},
    "fma20_mem": {"vfmadd231ps_mem": 20},
    "fma8+pshufb8": {"vfmadd231ps": 8, "vpshufb": 8},
    "fma8+pslld8": {"vfmadd231ps": 8, "vpslld": 8},
    "fma8+pand8": {"vfmadd231ps": 8, "vpand": 8},
    "fma8+unpcklbw8": {"vfmadd231ps": 8, "vpunpcklbw": 8},
    "fma8+permilps8": {"vfmadd231ps": 8, "vpermilps": 8},
    "fma8+pmulhuw8": {"vfmadd231ps": 8, "vpmulhuw": 8},
    "fma8+addps8": {"vfmadd231ps": 8, "vaddps": 8},
    "pshufb8+pslld8": {"vpshufb": 8, "vpslld": 8},
    "pshufb8+unpcklbw8": {"vpshufb": 8, "vpunpcklbw": 8},
    # the committed loop's vector operations per 128 weights (objdump, without loads and scalars)
    "avx2_m1_loop": {"vfmadd231ps_mem": 20, "vpshufb": 8, "vpunpcklbw": 10, "vpslld": 8, "vpand": 13,
                     "vpsrlw": 2, "vpermilps": 4, "vpmaxub": 1, "vpaddb": 1},
}

IMMEDIATE = {"vpslld": "$4,%%ymm15", "vpsrlw": "$4,%%ymm15", "vpermilps": "$0x55,%%ymm15"}

PROLOGUE = r"""
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdint.h>
#include <time.h>
#define N 100000000L
static float buf[1024] __attribute__((aligned(64)));
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
__attribute__((noinline)) static uint64_t clk(void) {
  uint64_t x = 0;
  for (long i = 0; i < N; i++) __asm__ volatile("add $1,%0\n\tadd $1,%0\n\tadd $1,%0\n\tadd $1,%0" : "+r"(x));
  return x;
}
"""


def body(mix):
    """Interleaved asm lines: FMAs into ymm4-13, everything else into ymm0-3 from ymm14/15."""
    left = dict(mix)
    seq = []
    while any(left.values()):
        for op in mix:
            if left[op]:
                seq.append(op)
                left[op] -= 1
    lines, fi, oi = [], 0, 0
    for op in seq:
        if op.startswith("vfmadd231ps"):  # accumulators ymm4-13; "_mem" reads an L1 operand
            src = f"{(fi % 16) * 32}(%0)" if op.endswith("_mem") else "%%ymm15"
            lines.append(f"vfmadd231ps {src},%%ymm14,%%ymm{4 + fi % 10}")
            fi += 1
        else:  # immediate forms take one register source
            srcs = IMMEDIATE.get(op, "%%ymm15,%%ymm14")
            lines.append(f"{op} {srcs},%%ymm{oi % 4}")
            oi += 1
    return "".join(f'"{line}\\n\\t"' for line in lines), len(seq)


def source():
    parts, table = [PROLOGUE], []
    for i, (name, mix) in enumerate(MIXES.items()):
        text, count = body(mix)
        clobbers = ",".join(f'"xmm{r}"' for r in range(14))
        parts.append(f'__attribute__((noinline)) static void mix{i}(void) {{ for (long i = 0; i < N / 10; i++) '
                     f'__asm__ volatile({text} :: "r"(buf) : {clobbers}, "memory"); }}\n')
        table.append(f'{{"{name}", mix{i}, {count}}}')
    parts.append("int main(void) {\n  double t0 = now(); clk(); double ghz = 4.0 * N / (now() - t0) / 1e9;\n"
                 '  fprintf(stderr, "clock %.2f GHz\\n", ghz);\n'
                 "  struct { const char *name; void (*f)(void); int ops; } m[] = {" + ", ".join(table) + "};\n"
                 '  printf("mix,cycles_per_iteration,instructions,instructions_per_cycle\\n");\n'
                 "  for (unsigned i = 0; i < sizeof m / sizeof *m; i++) {\n"
                 "    double t = now(); m[i].f(); t = now() - t;\n"
                 "    double cyc = t * ghz * 1e9 / (N / 10);\n"
                 '    printf("%s,%.2f,%d,%.2f\\n", m[i].name, cyc, m[i].ops, m[i].ops / cyc);\n'
                 "  }\n  return 0;\n}\n")
    return "".join(parts)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cc", default="gcc")
    ap.add_argument("--keep", help="write the C source and binary into this folder")
    args = ap.parse_args()
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line.split(":", 1)[1].split() for line in f if line.startswith("flags")), [])
    except OSError:
        flags = []
    if not {"avx2", "fma"} <= set(flags):
        sys.stderr.write("cpu_vector_op_mix: needs an x86 CPU with AVX2 and FMA (read from /proc/cpuinfo)\n")
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or tmp
        os.makedirs(folder, exist_ok=True)
        src, exe = os.path.join(folder, "op_mix.c"), os.path.join(folder, "op_mix")
        with open(src, "w") as f:
            f.write(source())
        built = subprocess.run([args.cc, "-O2", "-mavx2", "-mfma", src, "-o", exe], capture_output=True, text=True)
        if built.returncode:
            sys.stderr.write(built.stderr)
            return 1
        return subprocess.run([exe]).returncode


if __name__ == "__main__":
    sys.exit(main())
