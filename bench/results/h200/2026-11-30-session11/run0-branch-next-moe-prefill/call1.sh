#!/usr/bin/env bash
# Call 1 of the next-moe-prefill driver (scratch/prefill/bench/results/h200/2026-11-30-session10/scripts/next-moe-prefill.sh),
# split in two for the 600 s per-call limit. Run from scratch/prefill with ROOT = the repo root on the device.
# Build dir is $ROOT/build-prefill (kept between calls); the tarball is refreshed after every step.
set -u
: "${ROOT:?}"
B=$ROOT/build-prefill
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/prefill.XXXX)/run1; mkdir -p $R
finish() { tar -czf $OUT/run1.tar.gz -C $(dirname $R) run1; }
trap finish EXIT
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv > $R/gpu.txt 2>&1; cat $R/gpu.txt
t0=$(date +%s)
cmake -S . -B $B -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && timeout 330 cmake --build $B -j 16 --target fp4kit_cli test_cuda_moe test_cuda_large_m > $R/build.log 2>&1; rc=$?
echo "build rc=$rc ($(( $(date +%s) - t0 )) s)" | tee -a $R/build.log
finish
if [ $rc -ne 0 ]; then grep -nE "error|Error" $R/configure.log $R/build.log | head -40; exit 1; fi
F=$B/tools/fp4kit
for t in wgra64 wgra128 wgra160 wgra192 wgra256; do
  s=$(date +%s.%N)
  FP4KIT_MOE_PREFILL_TILES=$t timeout 60 $F bench --moe --mode w4a16 --m 4096 --runs 10 --budget 0.2 --no-peers > $R/smoke-$t.log 2>&1; rc=$?
  echo "smoke $t rc=$rc $(awk -v a=$s -v b=$(date +%s.%N) 'BEGIN{printf "%.1f", b-a}') s" | tee -a $R/smoke.txt
  grep -E "^(qwen|deepseek)" $R/smoke-$t.log
  finish
done
s=$(date +%s); timeout 150 $F bench --moe --m 1024,4096 --json $R/moe-fused.json > $R/moe-fused.log 2>&1
echo "fused bench rc=$? $(( $(date +%s) - s )) s"; finish
s=$(date +%s); FP4KIT_MOE_SILU_FUSED=0 timeout 150 $F bench --moe --m 1024,4096 --no-peers --json $R/moe-separate.json > $R/moe-separate.log 2>&1
echo "separate bench rc=$? $(( $(date +%s) - s )) s"
for f in $R/moe-*.log; do echo "== $f"; grep -E "^(model|qwen|deepseek)" $f; done
