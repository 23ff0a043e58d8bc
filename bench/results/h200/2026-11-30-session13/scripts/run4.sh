#!/usr/bin/env bash
# Session 13, run 4: the final tree (one-multiply weight decode, the span rule, whole K per warp for
# short-K GEMMs once they fill 2 waves) against main (scratch/base), alternating, three rounds, MoE
# layer at B = 1, 8, 64 (with peers in round 1); per-kernel ncu times of the final tree at
# B = 1, 8, 64; then test_cuda_moe (all passes) and test_cuda (the dense decode kernels).
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s13.XXXX)/run4; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run4; }
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
  echo "round $round at ${SECONDS}s"
done
for f in $R/*.log; do case $f in *build*|*configure*) continue;; esac; echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s %s | ", $1, $2, $3, $5, $9} END {print ""}'; done
timeout 120 ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv --print-units base \
  $F bench --moe --m 1,8,64 --runs 10 --budget 0.001 --no-peers > $R/ncu-new.csv 2> $R/ncu-new.err
echo "ncu rc=$? at ${SECONDS}s"
( time timeout 250 build-gpu/tests/test_cuda_moe ) > $R/test_cuda_moe.log 2>&1; echo "test_cuda_moe rc=$?"; grep -E "checks|cases|FAIL|real" $R/test_cuda_moe.log | tail -6
( time timeout $((590 - SECONDS)) build-gpu/tests/test_cuda ) > $R/test_cuda.log 2>&1; echo "test_cuda rc=$?"; grep -E "test_cuda:|FAIL|real" $R/test_cuda.log | tail -4
