#!/usr/bin/env bash
# Session 12, run 5: E4M3 scale bytes decoded without branches in the large-M tiles' scale
# conversion (chunk_factors; the register-A producer converts four per row and K tile, about 80 of
# its ~210 instructions per K tile in run 3's SASS), against main (9b546d9, scratch/base) in the
# same run. Correctness: test_cuda_wgra (every scale byte through the consumer path) and
# test_cuda_large_m; then the MoE layer at B = 1024 / 4096 with each build, alternating, two rounds.
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s12.XXXX)/run5; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run5; }
trap finish EXIT
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli test_cuda_wgra test_cuda_large_m > $R/build.log 2>&1; echo "build rc=$?" | tee -a $R/build.log
cmake -S scratch/base -B /tmp/build-base -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure-base.log 2>&1 \
  && cmake --build /tmp/build-base -j 16 --target fp4kit_cli > $R/build-base.log 2>&1; echo "base build rc=$?" | tee -a $R/build-base.log
for round in 1 2; do
  peers="--no-peers"; [ $round = 1 ] && peers=""
  timeout 100 build-gpu/tools/fp4kit bench --moe --m 1024,4096 $peers --json $R/e4m3-$round.json > $R/e4m3-$round.log 2>&1
  timeout 100 /tmp/build-base/tools/fp4kit bench --moe --m 1024,4096 --no-peers --json $R/base-$round.json > $R/base-$round.log 2>&1
done
for f in $R/e4m3-*.log $R/base-*.log; do echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s | ", $1, $2, $3, $5} END {print ""}'; done
timeout 60 build-gpu/tests/test_cuda_wgra > $R/test_cuda_wgra.log 2>&1; echo "test_cuda_wgra rc=$?"; tail -1 $R/test_cuda_wgra.log
( time timeout 200 build-gpu/tests/test_cuda_large_m ) > $R/test_cuda_large_m.log 2>&1; echo "test_cuda_large_m rc=$?"; grep -E "checks|FAIL|real" $R/test_cuda_large_m.log | tail -4
