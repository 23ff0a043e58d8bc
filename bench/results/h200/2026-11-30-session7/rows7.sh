#!/usr/bin/env bash
# Session 7 run 5: the MoE lean kernel with one or two 16-row tiles per CTA (FP4KIT_MOE_LEAN_ROWS),
# same binary: test_cuda_moe with 32 rows, then bench --moe alternating 16, 32, 16, 32.
set -u
R=$(mktemp -d /tmp/run7r.XXXXXX)/run; mkdir -p $R
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}" FP4KIT_COMMIT=$NEW_COMMIT
FP4KIT_MOE_LEAN_ROWS=64 FP4KIT_CTEST_ARGS='-R "test_cuda_moe"' FP4KIT_GPU_PARTS="build ctest" LOG=$R/new OUT=$R/gc \
  bash scripts/gpu-check.sh > $R/gpu-check.out 2>&1
tar -czf $OUT/run.tar.gz -C $(dirname $R) run
for v in 32 64 16 32b 64b; do
  FP4KIT_MOE_LEAN_ROWS=${v%b} timeout 120 build-gpu/tools/fp4kit bench --moe --m 1,8,64 --json $R/moe-r$v.json > $R/moe-r$v.log 2>&1
  tar -czf $OUT/run.tar.gz -C $(dirname $R) run
done
