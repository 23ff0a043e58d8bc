#!/usr/bin/env bash
# session 10 run 5: the whole MoE table (every B, W4A16 and W4A4, same-run peers), then a per-kernel
# breakdown of the layer under ncu (kernel durations only; caches and clocks left alone)
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=/tmp/r5/run; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C /tmp/r5 run; }
trap finish EXIT
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli > $R/build.log 2>&1; echo "build rc=$?" | tee -a $R/build.log
F=build-gpu/tools/fp4kit
timeout 200 $F bench --moe --json $R/moe-all.json > $R/moe-all.log 2>&1
grep -E "^(model|qwen|deepseek)" $R/moe-all.log
for pt in w4a16:1 w4a16:64 w4a16:4096 w4a4:1; do
  mode=${pt%:*} b=${pt#*:}
  {
    timeout 60 ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv --print-units base \
      $F bench --moe --mode $mode --m $b --runs 10 --budget 0.001 --no-peers > $R/ncu-$mode-b$b.csv 2> $R/ncu-$mode-b$b.err
    echo "ncu $mode B=$b rc=$? lines=$(wc -l < $R/ncu-$mode-b$b.csv)"
  }
done
