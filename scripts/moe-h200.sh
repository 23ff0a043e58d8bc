#!/usr/bin/env bash
# Builds fp4kit for the H200 (90a-real) and runs the MoE work: tests/test_cuda_moe (grouped GEMM and
# MoE layer on the cuda backend against the reference) and `fp4kit bench --moe` (Qwen3.5-397B and
# DeepSeek-R1 expert layers, B = 1..4096, copy and cuBLAS BF16 expert-loop peers). Meant to finish
# in about 4 minutes; everything lands in $OUT (default ./moe-out).
#
#   OUT=/some/dir scripts/moe-h200.sh [extra fp4kit bench --moe options, e.g. --mode w4a16]
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/moe-out}
mkdir -p "$OUT"
BUILD=${BUILD:-build-h200}
ARCH=${FP4KIT_CUDA_ARCH:-90a-real}
export FP4KIT_COMMIT=${FP4KIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}

nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem --format=csv >"$OUT/nvidia-smi.csv" 2>&1 || true
cmake -S . -B "$BUILD" -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES="$ARCH" >"$OUT/configure.log" 2>&1
cmake --build "$BUILD" -j"$(nproc)" --target test_cuda_moe fp4kit_cli >"$OUT/build.log" 2>&1 ||
  { tail -40 "$OUT/build.log"; exit 1; }

status=0
( time timeout 120 "$BUILD/tests/test_cuda_moe" ) >"$OUT/test_cuda_moe.txt" 2>&1 || status=$?
tail -6 "$OUT/test_cuda_moe.txt"
timeout 180 "$BUILD/tools/fp4kit" bench --moe --runs 20 --json "$OUT/moe.json" --csv "$OUT/moe.csv" "$@" \
  2>"$OUT/moe.err" | tee "$OUT/moe.txt" || status=$?
echo "results: $OUT/{test_cuda_moe.txt,moe.txt,moe.json,moe.csv} (commit $FP4KIT_COMMIT), status $status"
exit $status
