#!/usr/bin/env bash
# Session 11, run 5: where the prefill layer's time goes now (dense tile numbering, session 10's
# rewritten small kernels): per-kernel durations under ncu (caches and clocks left alone) for the
# W4A16 and W4A4 layers at B = 4096, as session 10 run 5 did before those changes.
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s11.XXXX)/run5; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run5; }
trap finish EXIT
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli > $R/build.log 2>&1; echo "build rc=$?" | tee -a $R/build.log
F=build-gpu/tools/fp4kit
for mode in w4a16 w4a4; do
  timeout 120 ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv --print-units base \
    $F bench --moe --mode $mode --m 4096 --runs 10 --budget 0.001 --no-peers > $R/ncu-$mode-b4096.csv 2> $R/ncu-$mode-b4096.err
  echo "ncu $mode rc=$? lines=$(wc -l < $R/ncu-$mode-b4096.csv)"
done
