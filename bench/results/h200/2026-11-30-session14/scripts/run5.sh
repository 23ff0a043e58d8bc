#!/usr/bin/env bash
# Session 14, run 5: the session's tree (L2 fetch unit of the lean loops; W4A4 decode inputs
# quantized to bf16 in one kernel, four elements per thread) against the session-13 main
# (scratch/base, 751a98b), alternating, MoE layer at B = 1, 8, 64, three rounds (peers in round 1);
# the lean kernel's measuring switches re-checked under the new loads (span 1 / 2, K split 2 / 4,
# one-tile CTAs), two rounds; ncu of the new tree's W4A4 layers; test_cuda_moe (library tiles).
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s14.XXXX)/run5; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run5; }
trap finish EXIT
SECONDS=0
( cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 10 --target fp4kit_cli test_cuda_moe > $R/build.log 2>&1; echo "build rc=$?" >> $R/build.log ) &
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
for round in 1 2; do
  for v in FP4KIT_MOE_LEAN_SPAN=1 FP4KIT_MOE_LEAN_SPAN=2 FP4KIT_MOE_LEAN_KSPLIT=2 FP4KIT_MOE_LEAN_KSPLIT=4 FP4KIT_MOE_LEAN_ROWS=16; do
    env $v timeout 100 $F $B --mode w4a16 --no-peers --json $R/env-$v-$round.json > $R/env-$v-$round.log 2>&1
  done
  echo "env round $round at ${SECONDS}s"
done
NCU="ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv --print-units base"
timeout 100 $NCU $F bench --moe --mode w4a4 --m 1,8,64 --runs 10 --budget 0.001 --no-peers > $R/ncu-new.csv 2> $R/ncu-new.err
echo "ncu at ${SECONDS}s"
for f in $R/new-*.log $R/base-*.log $R/env-*.log; do echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s %s | ", substr($1,1,4), $2, $3, $5, $8} END {print ""}'; done
( time timeout $((570 - SECONDS)) build-gpu/tests/test_cuda_moe --library-tiles-only ) > $R/test_cuda_moe.log 2>&1; echo "test_cuda_moe rc=$?"; grep -E "checks|cases|FAIL|real" $R/test_cuda_moe.log | tail -6
