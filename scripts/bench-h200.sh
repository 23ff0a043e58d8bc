#!/usr/bin/env bash
# Builds fp4kit on the GPU machine and runs the default benchmark (the dense GEMMs of Qwen3.5-397B and
# Llama-3.3-70B, M = 1..64, W4A16 and W4A4, every available device backend, same-run peers), writing the
# table, JSON, CSV and the HTML roofline page into $OUT (default ./bench-out).
#
#   OUT=/some/dir scripts/bench-h200.sh [extra fp4kit bench options, e.g. --m 128,256,512]
#
# FP4KIT_COMMIT is taken from git when not set, so every record names the code it measured.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/bench-out}
mkdir -p "$OUT"
BUILD=${BUILD:-build-h200}
ARCH=${FP4KIT_CUDA_ARCH:-90a-real}
export FP4KIT_COMMIT=${FP4KIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv >"$OUT/nvidia-smi.csv" 2>&1 || true
cmake -S . -B "$BUILD" -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" >"$OUT/configure.log" 2>&1
cmake --build "$BUILD" -j"$(nproc)" >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }

stamp=$(date -u +%Y%m%dT%H%M%SZ)
"$BUILD/tools/fp4kit" bench --json "$OUT/bench-$stamp.json" --csv "$OUT/bench-$stamp.csv" \
  --html "$OUT/bench-$stamp.html" "$@" 2>"$OUT/bench-$stamp.err" | tee "$OUT/bench-$stamp.txt"
echo "results: $OUT/bench-$stamp.{txt,json,csv,html} (commit $FP4KIT_COMMIT)"
