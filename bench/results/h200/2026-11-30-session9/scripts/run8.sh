#!/usr/bin/env bash
# session 9 run 8: wgra split-K (branch wgra-splitk) — register-A tests, bench at M = 256/512, cuda default vs mma.sync
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/r8.XXXX)/run8; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run8; }
trap finish EXIT
C=$(cat scratch/commit.txt)
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli test_cuda_large_m > $R/build.log 2>&1; echo "build rc=$?" >> $R/build.log
date +%T > $R/t.txt
( time timeout 100 build-gpu/tests/test_cuda_large_m register-A ) > $R/test_cuda_large_m_register_A.log 2>&1
date +%T >> $R/t.txt
F=build-gpu/tools/fp4kit
SH=20480x4096,128x4096,4096x8192,17408x4096,512x4096,2048x4096,4096x1024,10240x8192,8192x8192,57344x8192,8192x28672
FP4KIT_COMMIT=$C timeout 45 $F bench --backend cuda --config large-m.wgra.128x256 --shapes $SH --m 256,512 --op w4a16 --json $R/bench-wgra-splitk.json > $R/bench-wgra-splitk.log 2>&1
date +%T >> $R/t.txt
FP4KIT_COMMIT=$C timeout 25 $F bench --backend cuda --shapes 8192x8192,8192x28672 --m 4096 --op w4a16 --json $R/bench-cuda-default.json > $R/bench-cuda-default.log 2>&1
date +%T >> $R/t.txt
tail -n 3 $R/test_cuda_large_m_register_A.log; cat $R/t.txt; tail -n 1 $R/build.log
