#!/usr/bin/env bash
# Session 13, run 3: whole K per warp in the lean decode kernel (FP4KIT_MOE_LEAN_WHOLE_K=1: each warp
# streams all slabs of its own two 16-row tiles, a CTA covers 128 rows, no reduction) against the
# default (K split over the 4 warps, span rule of run 2) and main (scratch/base), alternating,
# three rounds, MoE layer at B = 1, 8, 64. Run 2's ncu had Qwen3.5's down GEMM at B = 8 streaming
# at 2.0 TB/s against gate_up's 2.7 (8 slabs of K = 1024 split over 4 warps). Per-kernel ncu
# times with whole K at B = 1 and 8; test_cuda_moe with whole K forced.
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s13.XXXX)/run3; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run3; }
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
  FP4KIT_MOE_LEAN_WHOLE_K=1 timeout 100 $F $B --no-peers --json $R/whole-$round.json > $R/whole-$round.log 2>&1
  timeout 100 $FB $B --no-peers --json $R/base-$round.json > $R/base-$round.log 2>&1
  echo "round $round at ${SECONDS}s"
done
for f in $R/*.log; do case $f in *build*|*configure*) continue;; esac; echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s | ", $1, $2, $3, $5} END {print ""}'; done
FP4KIT_MOE_LEAN_WHOLE_K=1 timeout 120 ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv --print-units base \
  $F bench --moe --m 1,8,64 --runs 10 --budget 0.001 --no-peers > $R/ncu-whole.csv 2> $R/ncu-whole.err
echo "ncu whole rc=$? at ${SECONDS}s"
( time FP4KIT_MOE_LEAN_WHOLE_K=1 timeout 200 build-gpu/tests/test_cuda_moe --library-tiles-only ) > $R/test_cuda_moe-whole.log 2>&1; echo "test_cuda_moe whole rc=$?"; grep -E "checks|FAIL|real" $R/test_cuda_moe-whole.log | tail -4
