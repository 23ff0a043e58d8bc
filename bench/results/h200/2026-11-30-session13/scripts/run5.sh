#!/usr/bin/env bash
# Session 13, run 5: the lean decode kernel with K split over 2 warps (FP4KIT_MOE_LEAN_KSPLIT=2: a CTA
# covers 64 rows, each warp half of K) for every GEMM, against the default of run 4 (4 warps, or
# whole K per warp for <= 8 slabs once 2 waves remain), alternating, three rounds, MoE layer at
# B = 1, 8, 64; per-kernel ncu times with the split of 2. Run 4's ncu had Qwen3.5's gate_up at
# B = 8 at 2.7 TB/s on the 4-warp split and run 3 slower with whole K (1.9 waves). Then
# test_cuda_moe (library tiles; its lean cases force each split).
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s13.XXXX)/run5; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run5; }
trap finish EXIT
SECONDS=0
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli test_cuda_moe > $R/build.log 2>&1; echo "build rc=$?" >> $R/build.log
tail -1 $R/build.log; echo "built at ${SECONDS}s"
F=build-gpu/tools/fp4kit
B="bench --moe --m 1,8,64"
for round in 1 2 3; do
  timeout 100 $F $B --no-peers --json $R/default-$round.json > $R/default-$round.log 2>&1
  FP4KIT_MOE_LEAN_KSPLIT=2 timeout 100 $F $B --no-peers --json $R/ksplit2-$round.json > $R/ksplit2-$round.log 2>&1
  echo "round $round at ${SECONDS}s"
done
for f in $R/*.log; do case $f in *build*|*configure*) continue;; esac; echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s %s | ", $1, $2, $3, $5, $8} END {print ""}'; done
FP4KIT_MOE_LEAN_KSPLIT=2 timeout 120 ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv --print-units base \
  $F bench --moe --m 1,8,64 --runs 10 --budget 0.001 --no-peers > $R/ncu-ksplit2.csv 2> $R/ncu-ksplit2.err
echo "ncu rc=$? at ${SECONDS}s"
( time timeout 200 build-gpu/tests/test_cuda_moe --library-tiles-only ) > $R/test_cuda_moe.log 2>&1; echo "test_cuda_moe rc=$?"; grep -E "checks|cases|FAIL|real" $R/test_cuda_moe.log | tail -4
