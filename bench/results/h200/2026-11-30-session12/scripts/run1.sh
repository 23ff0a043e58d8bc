#!/usr/bin/env bash
# Session 12, run 1: SiLU*up in the register-A gate_up epilogue (bf16 act, W4A16), the bf16 SiLU*up
# mostly in single precision (bit for bit the double formula's), and the output scale as one FMUL
# where it is a float. Build; the bf16 SiLU bits test and test_cuda_moe at the library's tiles;
# then the MoE layer at B = 1024 / 4096 fused (default) and with FP4KIT_MOE_SILU_FUSED=0, in
# alternation, two rounds (W4A16), W4A4 once, and decode B = 1 / 8 / 64 once.
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s12.XXXX)/run1; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run1; }
trap finish EXIT
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli test_cuda_moe test_cuda_wgra > $R/build.log 2>&1; echo "build rc=$?" | tee -a $R/build.log
( time timeout 200 build-gpu/tests/test_cuda_moe --library-tiles-only ) > $R/test_cuda_moe-library.log 2>&1
grep -E "cases|checks|FAIL|real" $R/test_cuda_moe-library.log | tail -14
F=build-gpu/tools/fp4kit
for round in 1 2; do
  peers=""; [ $round = 2 ] && peers="--no-peers"
  timeout 100 $F bench --moe --m 1024,4096 $peers --json $R/fused-$round.json > $R/fused-$round.log 2>&1
  FP4KIT_MOE_SILU_FUSED=0 timeout 100 $F bench --moe --m 1024,4096 --no-peers --json $R/separate-$round.json > $R/separate-$round.log 2>&1
done
timeout 100 $F bench --moe --mode w4a4 --m 1024,4096 --json $R/w4a4.json > $R/w4a4.log 2>&1
timeout 100 $F bench --moe --m 1,8,64 --json $R/decode.json > $R/decode.log 2>&1
for f in $R/fused-*.log $R/separate-*.log $R/w4a4.log $R/decode.log; do echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s %s | ", $1, $2, $3, $5, $11} END {print ""}'; done
