#!/usr/bin/env bash
# session 10 run 4: grouped register-A tiles of 160 and 192 tokens, the refitted width rule; MoE layer per width, then test_cuda_moe
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=/tmp/r4/run; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C /tmp/r4 run; }
trap finish EXIT
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli test_cuda_moe > $R/build.log 2>&1; echo "build rc=$?" | tee -a $R/build.log
F=build-gpu/tools/fp4kit
timeout 150 $F bench --moe --mode w4a16 --m 1024,4096 --json $R/moe-default.json > $R/moe-default.log 2>&1
for t in wgra128 wgra160 wgra192 wgra256; do
  FP4KIT_MOE_PREFILL_TILES=$t timeout 100 $F bench --moe --mode w4a16 --m 4096 --no-peers --json $R/moe-$t.json > $R/moe-$t.log 2>&1
done
timeout 100 $F bench --moe --mode w4a4 --m 1024,4096 --json $R/moe-w4a4-default.json > $R/moe-w4a4-default.log 2>&1
for f in $R/moe-*.log; do echo "== $f"; grep -E "^(qwen|deepseek)" $f; done
( time timeout 400 build-gpu/tests/test_cuda_moe ) > $R/test_cuda_moe.log 2>&1
grep -E "cases|checks|FAIL" $R/test_cuda_moe.log | tail -12
