#!/usr/bin/env bash
# Session 11, run 1: the fused MoE decode kernel (moe_decode_fused.cu, one cooperative launch for
# the routed W4A16 layer in decode). Builds for sm_90a; test_cuda_moe without the forced prefill
# widths (the fused kernel against the separate kernels bit for bit, and the harness cases against
# the reference); then the MoE layer at B = 1, 8, 64, 256 with the fused kernel (default) and with
# FP4KIT_MOE_FUSED_DECODE=0 in the same run. Everything lands in $OUT/run.tar.gz.
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s11.XXXX)/run1; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run1; }
trap finish EXIT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw --format=csv > $R/gpu.txt 2>&1
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli test_cuda_moe > $R/build.log 2>&1; echo "build rc=$?" | tee -a $R/build.log
grep -E "error" $R/build.log | head -20
F=build-gpu/tools/fp4kit
( time timeout 240 build-gpu/tests/test_cuda_moe --library-tiles-only ) > $R/test_cuda_moe.log 2>&1
grep -E "cases|checks|FAIL|real" $R/test_cuda_moe.log | tail -14
timeout 150 $F bench --moe --m 1,8,64,256 --json $R/moe-fused.json > $R/moe-fused.log 2>&1; echo "fused rc=$?"
FP4KIT_MOE_FUSED_DECODE=0 timeout 150 $F bench --moe --m 1,8,64,256 --json $R/moe-separate.json > $R/moe-separate.log 2>&1; echo "separate rc=$?"
for f in $R/moe-*.log; do echo "== $f"; grep -E "^(qwen|deepseek)|config|fused" $f | head -30; done
