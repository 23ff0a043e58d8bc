#!/usr/bin/env bash
# Session 14, run 3: the lean loops' weight loads with the L2 fetch unit set to the bytes a row's
# K-sharing warps read together (256 B at 4 warps, 128 at 2, none at 1; MoE decode and the dense
# lean kernels) against main (scratch/base, 751a98b), alternating: MoE layer at B = 1, 8, 64 (three
# rounds), dense W4A16 GEMMs of the default models at M = 1, 4, 8, 16 (two rounds); then
# test_cuda_moe (library tiles) and test_cuda.
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s14.XXXX)/run3; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run3; }
trap finish EXIT
SECONDS=0
( cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 10 --target fp4kit_cli test_cuda_moe test_cuda > $R/build.log 2>&1; echo "build rc=$?" >> $R/build.log ) &
( cmake -S scratch/base -B /tmp/build-base -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure-base.log 2>&1 \
  && cmake --build /tmp/build-base -j 6 --target fp4kit_cli > $R/build-base.log 2>&1; echo "base build rc=$?" >> $R/build-base.log ) &
wait
tail -1 $R/build.log; tail -1 $R/build-base.log; echo "built at ${SECONDS}s"
F=build-gpu/tools/fp4kit; FB=/tmp/build-base/tools/fp4kit
B="bench --moe --m 1,8,64"
for round in 1 2 3; do
  peers="--no-peers"; [ $round = 1 ] && peers=""
  timeout 100 $F $B $peers --json $R/new-$round.json > $R/new-$round.log 2>&1
  timeout 100 $FB $B --no-peers --json $R/base-$round.json > $R/base-$round.log 2>&1
  echo "moe round $round at ${SECONDS}s"
done
D="bench --backend cuda --op w4a16 --m 1,4,8,16"
for round in 1 2; do
  peers="--no-peers"; [ $round = 1 ] && peers=""
  timeout 120 $F $D $peers --json $R/dense-new-$round.json > $R/dense-new-$round.log 2>&1
  timeout 120 $FB $D --no-peers --json $R/dense-base-$round.json > $R/dense-base-$round.log 2>&1
  echo "dense round $round at ${SECONDS}s"
done
for f in $R/new-*.log $R/base-*.log; do echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s %s | ", substr($1,1,4), $2, $3, $5, $8} END {print ""}'; done
( time timeout $((560 - SECONDS)) build-gpu/tests/test_cuda_moe --library-tiles-only ) > $R/test_cuda_moe.log 2>&1; echo "test_cuda_moe rc=$?"; grep -E "checks|cases|FAIL|real" $R/test_cuda_moe.log | tail -4
( time timeout $((590 - SECONDS)) build-gpu/tests/test_cuda ) > $R/test_cuda.log 2>&1; echo "test_cuda rc=$?"; grep -E "checks|cases|FAIL|real" $R/test_cuda.log | tail -4
