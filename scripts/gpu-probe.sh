#!/usr/bin/env bash
# On a GPU machine: build, run the tests, then probe, probe --check, the architecture answers and a
# small tune; everything under $OUT (default ./gpu-out). Prints a short summary at the end.
set -u
OUT=${OUT:-$PWD/gpu-out}
mkdir -p "$OUT"
JOBS=$(nproc)
B=build-gpu
{
  # .deps (optional, not in git): a cJSON include/lib tree for machines without libcjson-dev.
  cmake -S . -B $B -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH="$PWD/.deps" &&
    cmake --build $B -j"$JOBS"
} > "$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
F=$B/tools/fp4kit
(cd $B && ctest --output-on-failure) > "$OUT/ctest.log" 2>&1; CTEST=$?
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
$F probe > "$OUT/probe.txt" 2>&1
$F probe --json > "$OUT/probe.json" 2>&1
FP4KIT_PROBE_VERBOSE=1 $F probe --check > "$OUT/probe-check.txt" 2>&1; CHECK=$?
for a in sm_80 sm_89 sm_90 sm_100 sm_103 sm_120 sm_121; do
  $F probe --arch $a > "$OUT/probe-arch-$a.txt" 2>&1
done
$F probe --arch all > "$OUT/probe-arch-all.txt" 2>&1
$F check > "$OUT/check.txt" 2>&1; CHECKALL=$?
timeout 120 compute-sanitizer --tool memcheck $F probe --check > "$OUT/sanitizer.txt" 2>&1; SAN=$?
export FP4KIT_TUNING_CACHE="$OUT/tuning.json"
$F tune --shape 4096x4096 --shape 28672x8192 --m 1,16,128,1024,4096 --runs 10 > "$OUT/tune-w4a4.txt" 2>&1; T1=$?
$F tune --op w4a16 --shape 4096x4096 --m 1,128,4096 --runs 10 > "$OUT/tune-w4a16.txt" 2>&1; T2=$?
FP4KIT_LOG=info $F probe --json > "$OUT/probe-after-tune.json" 2>&1
echo "== summary: ctest rc=$CTEST probe --check rc=$CHECK check rc=$CHECKALL sanitizer rc=$SAN tune rc=$T1/$T2"
tail -3 "$OUT/ctest.log"
sed -n '/^backends on/,/^reasons/p' "$OUT/probe-check.txt"
grep -E "cublaslt|cudnn|cublas-dequant" "$OUT/probe-check.txt" | grep -E "nvfp4 w4a4|mxfp4 w4a4|w4a16" | cut -c1-200
grep -E "ERROR SUMMARY" "$OUT/sanitizer.txt"
tail -15 "$OUT/tune-w4a4.txt"
tail -6 "$OUT/tune-w4a16.txt"
grep -c FAIL "$OUT/check.txt"
