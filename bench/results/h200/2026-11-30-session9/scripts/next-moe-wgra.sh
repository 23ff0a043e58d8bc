#!/usr/bin/env bash
# For the next session (branch next-moe-wgra, written in session 9 and never run): the register-A
# grouped MoE prefill tiles and the refactored dense register-A kernel. Builds for sm_90a, runs the
# register-A section of test_cuda_large_m (about 60 s) and test_cuda_moe (about 150-200 s: its
# large-M sections run twice, the second time with FP4KIT_MOE_PREFILL_TILES=mma), then the MoE
# layer at B = 1024 and 4096 on both prefill forms in the same run. Everything lands in $OUT/run.tar.gz.
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/moe-wgra.XXXX)/run; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run; }
trap finish EXIT
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli test_cuda_large_m test_cuda_moe > $R/build.log 2>&1; echo "build rc=$?" >> $R/build.log
( time timeout 120 build-gpu/tests/test_cuda_large_m register-A ) > $R/test_cuda_large_m_register_A.log 2>&1
( time timeout 300 build-gpu/tests/test_cuda_moe ) > $R/test_cuda_moe.log 2>&1
F=build-gpu/tools/fp4kit
timeout 120 $F bench --moe --m 1024,4096 --json $R/moe-wgra.json > $R/moe-wgra.log 2>&1
FP4KIT_MOE_PREFILL_TILES=mma timeout 120 $F bench --moe --m 1024,4096 --json $R/moe-mma.json > $R/moe-mma.log 2>&1
tail -n 2 $R/test_cuda_large_m_register_A.log $R/test_cuda_moe.log 2>&1 | grep -v "^$"
