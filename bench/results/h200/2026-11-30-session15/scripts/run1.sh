#!/usr/bin/env bash
# Session 15, run 1: the compile-time-K lean walk (lean_stream_fixed_k, merged from next-lean-fixed-k)
# against the generic walk in the same build (FP4KIT_MOE_LEAN_FIXED_K=0), MoE layer at B = 1, 8, 64,
# three rounds alternating (peers in round 1); ncu per kernel of both; test_cuda_moe (library tiles);
# scripts/moe_decode_read_bound.cu for Qwen3.5 and DeepSeek-R1 (the B = 1 read bound).
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s15.XXXX)/run1; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run1; }
trap finish EXIT
SECONDS=0
( cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 14 --target fp4kit_cli test_cuda_moe > $R/build.log 2>&1; echo "build rc=$?" >> $R/build.log ) &
( nvcc -O3 -std=c++17 -arch=sm_90a -o /tmp/mdrb scripts/moe_decode_read_bound.cu > $R/bound-build.log 2>&1; echo "bound build rc=$?" >> $R/bound-build.log ) &
wait
tail -1 $R/build.log; tail -1 $R/bound-build.log; echo "built at ${SECONDS}s"
timeout 60 /tmp/mdrb > $R/bound-qwen.log 2>&1; cat $R/bound-qwen.log
timeout 60 /tmp/mdrb 7168 2048 256 8 > $R/bound-deepseek.log 2>&1; cat $R/bound-deepseek.log
echo "bound at ${SECONDS}s"
F=build-gpu/tools/fp4kit
B="bench --moe --m 1,8,64"
for round in 1 2 3; do
  peers="--no-peers"; [ $round = 1 ] && peers=""
  timeout 100 $F $B $peers --json $R/fixed-$round.json > $R/fixed-$round.log 2>&1
  FP4KIT_MOE_LEAN_FIXED_K=0 timeout 100 $F $B --no-peers --json $R/generic-$round.json > $R/generic-$round.log 2>&1
  echo "moe round $round at ${SECONDS}s"
done
NCU="ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv --print-units base"
timeout 100 $NCU $F bench --moe --mode w4a16 --m 1,8,64 --runs 10 --budget 0.001 --no-peers > $R/ncu-fixed-w4a16.csv 2> $R/ncu-fixed-w4a16.err
FP4KIT_MOE_LEAN_FIXED_K=0 timeout 100 $NCU $F bench --moe --mode w4a16 --m 1,8,64 --runs 10 --budget 0.001 --no-peers > $R/ncu-generic-w4a16.csv 2> $R/ncu-generic-w4a16.err
echo "ncu at ${SECONDS}s"
for f in $R/fixed-*.log $R/generic-*.log; do echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s %s | ", substr($1,1,4), $2, $3, $5, $8} END {print ""}'; done
python3 scripts/ncu_breakdown.py --moe-layers $R/ncu-fixed-w4a16.csv $R/ncu-generic-w4a16.csv 2>&1 | tail -40
( time timeout $((570 - SECONDS)) build-gpu/tests/test_cuda_moe --library-tiles-only ) > $R/test_cuda_moe.log 2>&1; echo "test_cuda_moe rc=$?"; grep -E "checks|cases|FAIL|real" $R/test_cuda_moe.log | tail -6
