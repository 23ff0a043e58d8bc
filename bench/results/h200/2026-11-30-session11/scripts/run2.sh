#!/usr/bin/env bash
# Session 11, run 2 (branch next-moe-fused-decode): the fused decode kernel's variants, measurement
# only. Built with FP4KIT_WERROR=OFF because two variants spill registers (FP4KIT_MOE_FUSED_VARIANT
# = 5x1: five CTAs per SM, 12-48 bytes spilled on sm_90a; 4x2: two slabs in flight, 4-8 bytes). The
# default (4x1) spills nothing. test_cuda_moe --fused-decode-only (bit for bit against the separate
# kernels, now with the MXFP4 cases' multipliers fixed), then the W4A16 layer at B = 1, 8, 64 per
# variant and with the separate kernels (FP4KIT_MOE_FUSED_DECODE=0), twice in alternation.
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s11.XXXX)/run2; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run2; }
trap finish EXIT
cmake -S . -B build-gpu -DFP4KIT_WERROR=OFF -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli test_cuda_moe > $R/build.log 2>&1; echo "build rc=$?" | tee -a $R/build.log
grep -E "error" $R/build.log | head -20
F=build-gpu/tools/fp4kit
( time timeout 120 build-gpu/tests/test_cuda_moe --fused-decode-only ) > $R/test_fused.log 2>&1
tail -n 12 $R/test_fused.log
for round in 1 2; do
  FP4KIT_MOE_FUSED_DECODE=0 timeout 100 $F bench --moe --mode w4a16 --m 1,8,64 --json $R/sep-$round.json > $R/sep-$round.log 2>&1
  for v in 4x1 5x1 4x2; do
    FP4KIT_MOE_FUSED_VARIANT=$v timeout 100 $F bench --moe --mode w4a16 --m 1,8,64 --no-peers --json $R/fused-$v-$round.json > $R/fused-$v-$round.log 2>&1
  done
done
for f in $R/sep-*.log $R/fused-*.log; do echo "== $(basename $f)"; grep -E "^(qwen|deepseek)" $f | awk '{print $1, $3, $5, $8}'; done
