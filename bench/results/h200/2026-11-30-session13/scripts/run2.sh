#!/usr/bin/env bash
# Session 13, run 2: the lean decode kernel's span rule (two 32-row groups per CTA once that leaves
# 4 waves) with the one-multiply weight decode, against main (scratch/base) and against the same
# build at span 1, alternating, three rounds, MoE layer at B = 1, 8, 64. Per-kernel times under ncu
# at B = 1 and 8 (both modes, caches and clocks left alone). Correctness: test_cuda_moe with the
# span forced to 3 (partial last walks), test_cuda (the dense decode kernels share the decode).
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s13.XXXX)/run2; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run2; }
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
  FP4KIT_MOE_LEAN_SPAN=1 timeout 100 $F $B --no-peers --json $R/span1-$round.json > $R/span1-$round.log 2>&1
  echo "round $round at ${SECONDS}s"
done
for f in $R/*.log; do case $f in *build*|*configure*) continue;; esac; echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s | ", $1, $2, $3, $5} END {print ""}'; done
for b in new base; do
  X=$F; [ $b = base ] && X=$FB
  timeout 120 ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv --print-units base \
    $X bench --moe --m 1,8 --runs 10 --budget 0.001 --no-peers > $R/ncu-$b.csv 2> $R/ncu-$b.err
  echo "ncu $b rc=$? lines=$(wc -l < $R/ncu-$b.csv) at ${SECONDS}s"
done
( time FP4KIT_MOE_LEAN_SPAN=3 timeout 200 build-gpu/tests/test_cuda_moe --library-tiles-only ) > $R/test_cuda_moe-span3.log 2>&1; echo "test_cuda_moe span 3 rc=$?"; grep -E "checks|FAIL|real" $R/test_cuda_moe-span3.log | tail -4
( time timeout $((590 - SECONDS)) build-gpu/tests/test_cuda ) > $R/test_cuda.log 2>&1; echo "test_cuda rc=$?"; grep -E "cases|checks|FAIL|real" $R/test_cuda.log | tail -8
