#!/usr/bin/env bash
# session 10 run 6: routing counters in shared memory, SiLU*up and combine without per-element 64-bit
# division; MoE layer at B = 1, 64, 4096 (same-run peers), then test_cuda_moe without the forced-width passes
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=/tmp/r6/run; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C /tmp/r6 run; }
trap finish EXIT
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli test_cuda_moe > $R/build.log 2>&1; echo "build rc=$?" | tee -a $R/build.log
F=build-gpu/tools/fp4kit
timeout 120 $F bench --moe --m 1,64,4096 --json $R/moe.json > $R/moe.log 2>&1
grep -E "^(model|qwen|deepseek)" $R/moe.log
( time timeout 200 build-gpu/tests/test_cuda_moe --library-tiles-only ) > $R/test_cuda_moe.log 2>&1
grep -E "cases|checks|FAIL|real" $R/test_cuda_moe.log | tail -12
