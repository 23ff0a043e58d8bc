#!/usr/bin/env bash
# Session 14, run 2: ncu per kernel of the W4A16 MoE layers at B = 1, 8, 64 with the lean
# kernel's weight loads at L2 prefetch 0 / 128 / 256 bytes (FP4KIT_MOE_LEAN_PF, one value for every
# K split, or three: KW = 1, 2, 4), then layer timings of mixed settings, three rounds, alternating.
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s14.XXXX)/run2; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run2; }
trap finish EXIT
SECONDS=0
( cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli > $R/build.log 2>&1; echo "build rc=$?" >> $R/build.log )
tail -1 $R/build.log; echo "built at ${SECONDS}s"
F=build-gpu/tools/fp4kit
for pf in 0 128 256; do
  FP4KIT_MOE_LEAN_PF=$pf timeout 150 ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv --print-units base \
    $F bench --moe --mode w4a16 --m 1,8,64 --runs 10 --budget 0.001 --no-peers > $R/ncu-pf$pf.csv 2> $R/ncu-pf$pf.err
  echo "ncu pf $pf rc=$? at ${SECONDS}s"
done
B="bench --moe --m 1,8,64"
for round in 1 2 3; do
  for v in 0 128 256,256,256 128,256,256 0,256,256 128,128,256 0,128,256 256,128,128; do
    FP4KIT_MOE_LEAN_PF=$v timeout 100 $F $B --no-peers --json $R/v$v-$round.json > $R/v$v-$round.log 2>&1
  done
  echo "round $round at ${SECONDS}s"
done
for f in $R/v*.log; do echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s | ", substr($1,1,4), $2, $3, $5} END {print ""}'; done
