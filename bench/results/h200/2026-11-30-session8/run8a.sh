#!/usr/bin/env bash
# Session 8 run 1: build the tree (new) and .old-src (main) for sm_90a side by side, then time both
# in the same run: the dense small-M GEMMs on the weights >= 32 MB (default configs and the lean
# 32-row config forced), ring depths 2-5 of the new lean loop, and the MoE layer. Logs under $OUT.
set -u
R=$(mktemp -d /tmp/run8.XXXXXX)/run; mkdir -p $R
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $R/device.txt 2>&1
echo "new $NEW_COMMIT old $OLD_COMMIT" > $R/commit.txt
b() { cmake -S $1 -B $1/build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/$2-configure.log 2>&1 \
      && cmake --build $1/build-gpu -j 8 > $R/$2-build.log 2>&1; echo "$2 build rc=$?" >> $R/$2-build.log; }
b . new & b .old-src old & wait
NEW=build-gpu/tools/fp4kit OLD=.old-src/build-gpu/tools/fp4kit
SH=20480x4096,17408x4096,10240x8192,8192x8192,57344x8192,8192x28672,128256x8192,248320x4096
run() { # tag binary commit args...
  local tag=$1 f=$2 c=$3; shift 3
  [ -x $f ] || { echo "no $f" >> $R/errors.txt; return; }
  FP4KIT_COMMIT=$c timeout 150 $f bench "$@" --json $R/$tag.json > $R/$tag.log 2>&1
  tar -czf $OUT/run.tar.gz -C $(dirname $R) run
}
run small-new $NEW $NEW_COMMIT --backend cuda --shapes $SH --m 1,4,16 --op w4a16
run small-old $OLD $OLD_COMMIT --backend cuda --shapes $SH --m 1,4,16 --op w4a16
run lean-new $NEW $NEW_COMMIT --backend cuda --config small-m.r32.w4.b6 --shapes $SH --m 1,4 --op w4a16 --no-peers
run lean-old $OLD $OLD_COMMIT --backend cuda --config small-m.r32.w4.b6 --shapes $SH --m 1,4 --op w4a16 --no-peers
for st in 2 4 5; do
  FP4KIT_LEAN_STAGES=$st run lean-new-s$st $NEW $NEW_COMMIT --backend cuda --config small-m.r32.w4.b6 --shapes $SH --m 1 --op w4a16 --no-peers
done
run moe-new $NEW $NEW_COMMIT --moe --m 1,8,64
run moe-old $OLD $OLD_COMMIT --moe --m 1,8,64
for st in 2 4; do FP4KIT_LEAN_STAGES=$st run moe-new-s$st $NEW $NEW_COMMIT --moe --m 1,8,64; done
run moe-new2 $NEW $NEW_COMMIT --moe --m 1,8,64
run moe-old2 $OLD $OLD_COMMIT --moe --m 1,8,64
nvidia-smi > $R/nvidia-smi.txt 2>&1
tar -czf $OUT/run.tar.gz -C $(dirname $R) run
