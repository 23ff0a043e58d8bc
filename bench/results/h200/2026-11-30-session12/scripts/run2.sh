#!/usr/bin/env bash
# Session 12, run 2: main without the fused epilogue (run 1: the separate SiLU*up kernel was faster),
# with the single-precision bf16 SiLU*up and the output scale as one FMUL. Per-kernel times under
# ncu for the W4A16 and W4A4 layers at B = 4096 (DeepSeek-R1 and Qwen3.5; caches and clocks left
# alone, as session 11 run 5), then the MoE bench at B = 1024 / 4096 (both modes, with peers) and
# decode B = 1 / 8 / 64.
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s12.XXXX)/run2; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run2; }
trap finish EXIT
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli test_cuda_moe > $R/build.log 2>&1; echo "build rc=$?" | tee -a $R/build.log
F=build-gpu/tools/fp4kit
for mode in w4a16 w4a4; do
  timeout 120 ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv --print-units base \
    $F bench --moe --mode $mode --m 4096 --runs 10 --budget 0.001 --no-peers > $R/ncu-$mode-b4096.csv 2> $R/ncu-$mode-b4096.err
  echo "ncu $mode rc=$? lines=$(wc -l < $R/ncu-$mode-b4096.csv)"
done
timeout 150 $F bench --moe --m 1024,4096 --json $R/prefill.json > $R/prefill.log 2>&1
timeout 100 $F bench --moe --m 1,8,64 --json $R/decode.json > $R/decode.log 2>&1
for f in $R/prefill.log $R/decode.log; do echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s %s | ", $1, $2, $3, $5, $11} END {print ""}'; done
