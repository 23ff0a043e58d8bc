#!/usr/bin/env bash
# Session 7 run 7: the final tree (two-tile MoE lean kernel by default): test_cuda and
# test_cuda_moe, then bench --moe with the default and with FP4KIT_MOE_LEAN_ROWS=16.
set -u
R=$(mktemp -d /tmp/run7f.XXXXXX)/run; mkdir -p $R
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}" FP4KIT_COMMIT=$NEW_COMMIT
FP4KIT_CTEST_ARGS='-R "test_cuda$|test_cuda_moe"' FP4KIT_GPU_PARTS="build ctest" LOG=$R/new OUT=$R/gc \
  bash scripts/gpu-check.sh > $R/gpu-check.out 2>&1
tar -czf $OUT/run.tar.gz -C $(dirname $R) run
timeout 120 build-gpu/tools/fp4kit bench --moe --m 1,8,64 --json $R/moe-default.json > $R/moe-default.log 2>&1
FP4KIT_MOE_LEAN_ROWS=16 timeout 120 build-gpu/tools/fp4kit bench --moe --m 1,8,64 --json $R/moe-r16.json > $R/moe-r16.log 2>&1
tar -czf $OUT/run.tar.gz -C $(dirname $R) run
