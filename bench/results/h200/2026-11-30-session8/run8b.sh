#!/usr/bin/env bash
# Session 8 run 2: the L2 prefetch of the lean decode loop. Builds for sm_90a: the tree (prefetch
# distance 2, the default; full build with tests), the tree with distance 1 and 4 (fp4kit only,
# -DFP4KIT_LEAN_PREFETCH_GROUPS), and .old-src (main, no prefetch). Times the dense small-M GEMMs on
# the weights >= 32 MB and the MoE layer with each, in one run.
set -u
R=$(mktemp -d /tmp/run8.XXXXXX)/run; mkdir -p $R
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $R/device.txt 2>&1
echo "new $NEW_COMMIT old $OLD_COMMIT" > $R/commit.txt
b() { # src dir, build dir, tag, target, extra cuda flags
  cmake -S $1 -B $2 -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps \
    ${5:+-DCMAKE_CUDA_FLAGS=$5} > $R/$3-configure.log 2>&1 && cmake --build $2 -j 6 $4 > $R/$3-build.log 2>&1
  echo "$3 build rc=$?" >> $R/$3-build.log; }
b . build-gpu pf2 "" "" & b . build-pf1 pf1 "--target fp4kit" -DFP4KIT_LEAN_PREFETCH_GROUPS=1 &
b . build-pf4 pf4 "--target fp4kit" -DFP4KIT_LEAN_PREFETCH_GROUPS=4 & b .old-src .old-src/build-gpu old "--target fp4kit" "" &
wait
tar -czf $OUT/run.tar.gz -C $(dirname $R) run
SH=20480x4096,17408x4096,10240x8192,8192x8192,57344x8192,8192x28672,128256x8192,248320x4096
run() { # tag binary commit args...
  local tag=$1 f=$2 c=$3; shift 3
  [ -x $f ] || { echo "no $f" >> $R/errors.txt; return; }
  FP4KIT_COMMIT=$c timeout 150 $f bench "$@" --json $R/$tag.json > $R/$tag.log 2>&1
  tar -czf $OUT/run.tar.gz -C $(dirname $R) run
}
PF2=build-gpu/tools/fp4kit PF1=build-pf1/tools/fp4kit PF4=build-pf4/tools/fp4kit OLD=.old-src/build-gpu/tools/fp4kit
run small-pf2 $PF2 $NEW_COMMIT --backend cuda --shapes $SH --m 1,4,16 --op w4a16
run small-old $OLD $OLD_COMMIT --backend cuda --shapes $SH --m 1,4,16 --op w4a16
run small-pf1 $PF1 $NEW_COMMIT-pf1 --backend cuda --shapes $SH --m 1,4,16 --op w4a16 --no-peers
run small-pf4 $PF4 $NEW_COMMIT-pf4 --backend cuda --shapes $SH --m 1,4,16 --op w4a16 --no-peers
run w4a4-pf2 $PF2 $NEW_COMMIT --backend cuda --shapes 57344x8192,8192x8192 --m 1,4,16 --op w4a4
run moe-pf2 $PF2 $NEW_COMMIT --moe --m 1,8,64
run moe-old $OLD $OLD_COMMIT --moe --m 1,8,64
run moe-pf1 $PF1 $NEW_COMMIT-pf1 --moe --m 1,8,64
run moe-pf4 $PF4 $NEW_COMMIT-pf4 --moe --m 1,8,64
nvidia-smi > $R/nvidia-smi.txt 2>&1
tar -czf $OUT/run.tar.gz -C $(dirname $R) run
