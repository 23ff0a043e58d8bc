#!/usr/bin/env bash
# Session 8 run 10: fp4kit bench's per-shape read floor (the read peer over each point's weight +
# scale bytes, rotated past the L2). Builds the CLI for sm_90a and times four dense shapes, W4A16
# at M = 1, 4 and 16 and W4A4 at M = 1, with every same-run peer.
set -u
R=$(mktemp -d /tmp/run8.XXXXXX)/run; mkdir -p $R
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
echo "new $NEW_COMMIT" > $R/commit.txt
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli > $R/build.log 2>&1; echo "build rc=$?" >> $R/build.log
F=build-gpu/tools/fp4kit
SH=57344x8192,8192x8192,20480x4096,8192x28672
FP4KIT_COMMIT=$NEW_COMMIT timeout 120 $F bench --backend cuda --shapes $SH --m 1,4,16 --op w4a16 --json $R/w4a16.json --html $R/w4a16.html > $R/w4a16.log 2>&1
FP4KIT_COMMIT=$NEW_COMMIT timeout 60 $F bench --backend cuda --shapes 57344x8192,8192x8192 --m 1 --op w4a4 --json $R/w4a4.json > $R/w4a4.log 2>&1
tar -czf $OUT/run.tar.gz -C $(dirname $R) run
