#!/usr/bin/env bash
# Session 8 run 6: the streaming kernel with the weight scales loaded a chunk ahead. Times the
# default configs (same-run peers) and small-m.tma.r32.w4 with 2, 3 and 4 stages on the weights
# >= 32 MB at M = 1, then test_cuda.
set -u
R=$(mktemp -d /tmp/run8.XXXXXX)/run; mkdir -p $R
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
echo "new $NEW_COMMIT" > $R/commit.txt
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 > $R/build.log 2>&1; echo "build rc=$?" >> $R/build.log
F=build-gpu/tools/fp4kit
SH=20480x4096,17408x4096,10240x8192,8192x8192,57344x8192,8192x28672,128256x8192,248320x4096
run() { local tag=$1; shift; FP4KIT_COMMIT=$NEW_COMMIT timeout 150 $F bench "$@" --json $R/$tag.json > $R/$tag.log 2>&1
        tar -czf $OUT/run.tar.gz -C $(dirname $R) run; }
run small-default --backend cuda --shapes $SH --m 1 --op w4a16
for st in 2 3 4; do FP4KIT_TMA_STAGES=$st run tma-r32-s$st --backend cuda --config small-m.tma.r32.w4 --shapes $SH --m 1 --op w4a16 --no-peers; done
( cd build-gpu && timeout 280 ctest --output-on-failure -R "test_cuda$" ) > $R/ctest.log 2>&1
tar -czf $OUT/run.tar.gz -C $(dirname $R) run
