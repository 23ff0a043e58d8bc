#!/usr/bin/env bash
# One GPU run for the small-M configurations of the cuda backend (from the repository root):
#   bash scripts/gpu-smallm-perf.sh            (logs under $OUT, or ./smallm-perf-out without it)
#   FULL=1 bash scripts/gpu-smallm-perf.sh     (every timing shape and M in {1,4,16,32,64}; longer)
# Builds only what it needs for sm_90a with warnings (and ptxas spills) as errors, runs test_cuda
# (every configuration against the double reference, NaN-prefilled outputs), then times every
# configuration side by side against the same-run copy bandwidth and cuBLAS BF16 and prints the
# fastest configuration per (kernel, format, shape, M).
set -u
cd "$(dirname "$0")/.."
OUT=${OUT:-$PWD/smallm-perf-out}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
git rev-parse HEAD >"$OUT/commit.txt" 2>/dev/null || echo "(no git)" >"$OUT/commit.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv >"$OUT/device.txt" 2>&1
cmake -S . -B $BUILD -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real >"$OUT/configure.log" 2>&1 &&
  cmake --build $BUILD -j "$(nproc)" --target fp4kit test_cuda >"$OUT/build.log" 2>&1 ||
  { echo "BUILD FAILED"; tail -40 "$OUT/build.log"; exit 1; }
t0=$SECONDS
$BUILD/tests/test_cuda >"$OUT/test_cuda.log" 2>&1
rc=$?
echo "==== test_cuda: exit $rc ($((SECONDS - t0)) s) ===="
grep -E "^(quantize|\+ GEMM|  config|pdl stress|test_cuda|FAIL)" "$OUT/test_cuda.log" | head -40
nvcc -O2 -std=c++17 -Iinclude -o $BUILD/cuda_small_m_timing scripts/cuda_small_m_timing.cu \
  -L$BUILD -lfp4kit -Xlinker -rpath -Xlinker "$PWD/$BUILD" -lcublas >"$OUT/timing-build.log" 2>&1 ||
  { echo "TIMING BUILD FAILED"; cat "$OUT/timing-build.log"; exit 1; }
t0=$SECONDS
$BUILD/cuda_small_m_timing "$OUT/cuda-small-m.csv" $([ -n "${FULL:-}" ] || echo --quick) >"$OUT/timing.log" 2>&1
echo "==== timing: exit $? ($((SECONDS - t0)) s); full table in timing.log / cuda-small-m.csv ===="
head -1 "$OUT/timing.log"
sed -n '/^==== fastest/,$p' "$OUT/timing.log"
exit $rc
