#!/usr/bin/env bash
# Session 12, run 4: three fragment buffers in the register-A consumers (two K tiles of MMAs queued
# while the next is decoded; 128-192-token tiles), against main (9b546d9, exported to scratch/base)
# in the same run. ptxas reports (C7513) that it serializes the wgmma of the new form: it does not
# credit wgmma.wait_group 2 with retiring the buffer being rewritten. Build both; correctness of the
# new form (test_cuda_wgra, test_cuda_moe at the library's tiles); then the MoE layer at
# B = 1024 / 4096 (W4A16 and W4A4) with each build, alternating, two rounds.
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s12.XXXX)/run4; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run4; }
trap finish EXIT
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli test_cuda_moe test_cuda_wgra > $R/build.log 2>&1; echo "build rc=$?" | tee -a $R/build.log
cmake -S scratch/base -B /tmp/build-base -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure-base.log 2>&1 \
  && cmake --build /tmp/build-base -j 16 --target fp4kit_cli > $R/build-base.log 2>&1; echo "base build rc=$?" | tee -a $R/build-base.log
grep -c C7513 $R/build.log
timeout 60 build-gpu/tests/test_cuda_wgra > $R/test_cuda_wgra.log 2>&1; echo "test_cuda_wgra rc=$?"; tail -2 $R/test_cuda_wgra.log
( time timeout 200 build-gpu/tests/test_cuda_moe --library-tiles-only ) > $R/test_cuda_moe-library.log 2>&1
grep -E "checks|FAIL|real" $R/test_cuda_moe-library.log | tail -5
for round in 1 2; do
  peers="--no-peers"; [ $round = 1 ] && peers=""
  timeout 100 build-gpu/tools/fp4kit bench --moe --m 1024,4096 $peers --json $R/nb3-$round.json > $R/nb3-$round.log 2>&1
  timeout 100 /tmp/build-base/tools/fp4kit bench --moe --m 1024,4096 --no-peers --json $R/base-$round.json > $R/base-$round.log 2>&1
done
for f in $R/nb3-*.log $R/base-*.log; do echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s %s | ", $1, $2, $3, $5, $11} END {print ""}'; done
