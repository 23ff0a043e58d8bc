#!/usr/bin/env bash
# Call 2 of the next-moe-prefill driver: reuse $ROOT/build-prefill from call 1, then test_cuda_moe and
# the register-A section of test_cuda_large_m. Logs also land loose under $OUT/r2 in case of a hard kill.
set -u
: "${ROOT:?}"
B=$ROOT/build-prefill
export LD_LIBRARY_PATH="$ROOT/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$OUT/r2; mkdir -p $R
finish() { tar -czf $OUT/run2.tar.gz -C $OUT r2; }
trap finish EXIT
# If the carried sources came back with new mtimes, a rebuild would recompile everything (same sources
# as call 1): then keep the call-1 binaries rather than spend minutes rebuilding.
if cmake --build $B --target fp4kit_cli test_cuda_moe test_cuda_large_m -- -n 2>&1 | grep -qE "Building|nvcc"; then
  echo "build: stale mtimes seen, rebuild skipped, using call-1 binaries" | tee $R/build.log
else
  timeout 60 cmake --build $B -j 16 --target fp4kit_cli test_cuda_moe test_cuda_large_m > $R/build.log 2>&1; echo "build rc=$?" | tee -a $R/build.log
fi
ls -la $B/tests/test_cuda_moe $B/tests/test_cuda_large_m | tee -a $R/build.log
( time timeout 330 $B/tests/test_cuda_moe ) > $R/test_cuda_moe.log 2>&1
grep -E "cases|checks|FAIL|real" $R/test_cuda_moe.log | tail -20
finish
( time timeout 120 $B/tests/test_cuda_large_m register-A ) > $R/test_cuda_large_m_register_A.log 2>&1
tail -n 8 $R/test_cuda_large_m_register_A.log
