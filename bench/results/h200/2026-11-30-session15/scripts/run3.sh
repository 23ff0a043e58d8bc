#!/usr/bin/env bash
# Session 15, run 3: the fixed-K lean kernel at 6 CTAs per SM (FP4KIT_MOE_LEAN_BLOCKS6=1, a switch of
# this build only; 80 registers, no spills on sm_90a) against 5 (the default, 96 registers), MoE
# layer at B = 1, 8, 64, three rounds alternating (peers in round 1), ncu of both (W4A16); at B = 8
# the K split forced to 2 and the span forced to 1 and 3 (two rounds, W4A16 and W4A4).
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s15.XXXX)/run3; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run3; }
trap finish EXIT
SECONDS=0
( cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli > $R/build.log 2>&1; echo "build rc=$?" >> $R/build.log )
tail -1 $R/build.log; echo "built at ${SECONDS}s"
F=build-gpu/tools/fp4kit
B="bench --moe --m 1,8,64"
for round in 1 2 3; do
  peers="--no-peers"; [ $round = 1 ] && peers=""
  timeout 100 $F $B $peers --json $R/b5-$round.json > $R/b5-$round.log 2>&1
  FP4KIT_MOE_LEAN_BLOCKS6=1 timeout 100 $F $B --no-peers --json $R/b6-$round.json > $R/b6-$round.log 2>&1
  echo "moe round $round at ${SECONDS}s"
done
for round in 1 2; do
  timeout 60 $F bench --moe --m 8 --no-peers > $R/m8-default-$round.log 2>&1
  FP4KIT_MOE_LEAN_KSPLIT=2 timeout 60 $F bench --moe --m 8 --no-peers > $R/m8-ksplit2-$round.log 2>&1
  FP4KIT_MOE_LEAN_SPAN=1 timeout 60 $F bench --moe --m 8 --no-peers > $R/m8-span1-$round.log 2>&1
  FP4KIT_MOE_LEAN_SPAN=3 timeout 60 $F bench --moe --m 8 --no-peers > $R/m8-span3-$round.log 2>&1
  FP4KIT_MOE_LEAN_BLOCKS6=1 FP4KIT_MOE_LEAN_KSPLIT=2 timeout 60 $F bench --moe --m 8 --no-peers > $R/m8-b6-ksplit2-$round.log 2>&1
done
echo "knobs at ${SECONDS}s"
NCU="ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv --print-units base"
NB="bench --moe --mode w4a16 --m 1,8,64 --runs 10 --budget 0.001 --no-peers"
timeout 100 $NCU $F $NB > $R/ncu-b5-w4a16.csv 2> $R/ncu-b5-w4a16.err
FP4KIT_MOE_LEAN_BLOCKS6=1 timeout 100 $NCU $F $NB > $R/ncu-b6-w4a16.csv 2> $R/ncu-b6-w4a16.err
echo "ncu at ${SECONDS}s"
for f in $R/b5-*.log $R/b6-*.log $R/m8-*.log; do echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s %s | ", substr($1,1,4), $2, $3, $5, $8} END {print ""}'; done
grep -E "copy" $R/b5-1.log | head -2
python3 scripts/ncu_breakdown.py --moe-layers $R/ncu-b5-w4a16.csv $R/ncu-b6-w4a16.csv 2>&1 | tail -40
