#!/usr/bin/env bash
# GPU check of the cuda backend, run on the GPU machine from the repository root:
#   bash scripts/gpu-check.sh            (logs under $OUT, or ./gpu-check-out without it)
# Builds for sm_90a with warnings as errors, runs every ctest (GPU tests included), `fp4kit check`,
# inspects registers/spills (ptxas -v) and the SASS for local-memory traffic, and times the small-M
# kernels against the same-run copy bandwidth and cuBLAS BF16. A short summary ends stdout.
set -u
OUT=${OUT:-$PWD/gpu-check-out}
ARCH=${FP4KIT_GPU_ARCH:-90a}
mkdir -p "$OUT"
BUILD=build-gpu
summary=()
step() { # name, command...: runs, logs to $OUT/<name>.log, records pass/fail
  local name=$1; shift
  local t0=$SECONDS
  if "$@" >"$OUT/$name.log" 2>&1; then summary+=("PASS $name ($((SECONDS - t0)) s)")
  else summary+=("FAIL $name ($((SECONDS - t0)) s): see $name.log"); fi
}

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv >"$OUT/device.txt" 2>&1
git rev-parse HEAD >"$OUT/commit.txt" 2>/dev/null || echo "(no git)" >"$OUT/commit.txt"

step configure cmake -S . -B $BUILD -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=${ARCH}-real
step build cmake --build $BUILD -j "$(nproc)"
step ctest bash -c "cd $BUILD && ctest --output-on-failure"
step fp4kit-check $BUILD/tools/fp4kit check

# Registers and spills of every kernel (ptxas), and local-memory instructions in the SASS.
step ptxas nvcc -std=c++17 -c -Iinclude -Isrc --fmad=false --expt-relaxed-constexpr -Xptxas -v \
  -gencode arch=compute_${ARCH},code=sm_${ARCH} src/backends/cuda/gemm_small_m.cu -o $BUILD/ptxas_probe.o
spills=$(grep -c "bytes spill stores" "$OUT/ptxas.log" 2>/dev/null || true)
nonzero=$(grep "bytes spill stores" "$OUT/ptxas.log" 2>/dev/null | grep -vc " 0 bytes spill stores" || true)
summary+=("ptxas: $spills kernels, $nonzero with spill stores")
if command -v cuobjdump >/dev/null; then
  cuobjdump --dump-sass $BUILD/libfp4kit.a >"$OUT/sass.txt" 2>&1
  summary+=("sass: $(grep -cE 'LDL|STL' "$OUT/sass.txt") local-memory instructions (LDL/STL) in libfp4kit.a")
fi

# Timing driver (same-run copy bandwidth and cuBLAS BF16 peers).
step timing-build nvcc -O2 -std=c++17 -Iinclude -o $BUILD/cuda_small_m_timing scripts/cuda_small_m_timing.cu \
  -L$BUILD -lfp4kit -Xlinker -rpath -Xlinker "$PWD/$BUILD" -lcublas
if [ -x $BUILD/cuda_small_m_timing ]; then
  step timing $BUILD/cuda_small_m_timing "$OUT/cuda-small-m.csv"
fi

echo "==== gpu-check summary ($(cat "$OUT/commit.txt")) ===="
head -2 "$OUT/device.txt"
printf '%s\n' "${summary[@]}"
grep -E "^(quantize|\+ GEMM|pdl stress|test_cuda|FAIL)" $BUILD/Testing/Temporary/LastTest.log 2>/dev/null | head -30
tail -3 "$OUT/fp4kit-check.log"
grep -E "^(device|kernel)|^w4a16-bf16 +nvfp4 +(1|4|16) |^w4a4\+quant +nvfp4 +(1|4|16) " "$OUT/timing.log" 2>/dev/null | head -60
