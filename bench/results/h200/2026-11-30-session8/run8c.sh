#!/usr/bin/env bash
# Session 8 run 4: the bulk-copy streaming kernel (small-m.tma.*). Build the tree for sm_90a (full,
# with tests), time the default configs (same-run peers) and both streaming configs on the dense
# weights >= 32 MB at M = 1 and 4, the 32-row one with 2, 3 and 6 stages too, then test_cuda.
set -u
R=$(mktemp -d /tmp/run8.XXXXXX)/run; mkdir -p $R
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $R/device.txt 2>&1
echo "new $NEW_COMMIT" > $R/commit.txt
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 > $R/build.log 2>&1; echo "build rc=$?" >> $R/build.log
tar -czf $OUT/run.tar.gz -C $(dirname $R) run
F=build-gpu/tools/fp4kit
SH=20480x4096,17408x4096,10240x8192,8192x8192,57344x8192,8192x28672,128256x8192,248320x4096
run() { local tag=$1; shift; FP4KIT_COMMIT=$NEW_COMMIT timeout 150 $F bench "$@" --json $R/$tag.json > $R/$tag.log 2>&1
        tar -czf $OUT/run.tar.gz -C $(dirname $R) run; }
run small-default --backend cuda --shapes $SH --m 1,4 --op w4a16
run tma-r32 --backend cuda --config small-m.tma.r32.w4 --shapes $SH --m 1,4 --op w4a16 --no-peers
run tma-w8 --backend cuda --config small-m.tma.w8 --shapes $SH --m 1,4 --op w4a16 --no-peers
for st in 2 3 6; do FP4KIT_TMA_STAGES=$st run tma-r32-s$st --backend cuda --config small-m.tma.r32.w4 --shapes $SH --m 1 --op w4a16 --no-peers; done
( cd build-gpu && timeout 280 ctest --output-on-failure -R "test_cuda$" ) > $R/ctest.log 2>&1
nvidia-smi > $R/nvidia-smi.txt 2>&1
tar -czf $OUT/run.tar.gz -C $(dirname $R) run
