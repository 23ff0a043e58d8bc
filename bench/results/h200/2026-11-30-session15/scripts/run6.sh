#!/usr/bin/env bash
# Session 15, run 6: the W4A4 decode layer's hidden rows quantized by the routing launch (fp4_cuda_moe_route_quantize_bf16,
# one dependent launch fewer) against the committed tree (scratch/base, the run-5 rules), MoE layer at
# B = 1, 8, 64, three rounds alternating (peers in round 1); ncu of the new tree (W4A16 and W4A4);
# test_cuda_moe (library tiles).
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s15.XXXX)/run6; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run6; }
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
NCU="ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv --print-units base"
for mode in w4a16 w4a4; do
  timeout 100 $NCU $F bench --moe --mode $mode --m 1,8,64 --runs 10 --budget 0.001 --no-peers > $R/ncu-new-$mode.csv 2> $R/ncu-new-$mode.err
done
echo "ncu at ${SECONDS}s"
for f in $R/new-*.log $R/base-*.log; do echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s %s | ", substr($1,1,4), $2, $3, $5, $8} END {print ""}'; done
grep -E "copy" $R/new-1.log | head -2
python3 scripts/ncu_breakdown.py --moe-layers $R/ncu-new-w4a4.csv 2>&1 | head -24
( time timeout $((570 - SECONDS)) build-gpu/tests/test_cuda_moe --library-tiles-only ) > $R/test_cuda_moe.log 2>&1; echo "test_cuda_moe rc=$?"; grep -E "FAIL|checks|real" $R/test_cuda_moe.log | tail -6
