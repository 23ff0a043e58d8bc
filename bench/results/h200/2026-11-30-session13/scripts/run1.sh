#!/usr/bin/env bash
# Session 13, run 1: the weight decode of the streaming (decode) kernels with one multiply per pair
# (decode8_raw, bf16: 375 instead of 399 instructions per loop of the MoE lean kernel, which covers
# two 16-row tiles x 128 K), against main (scratch/base) in the same run; and a measuring switch,
# FP4KIT_MOE_LEAN_SPAN = 2 / 4 (a lean CTA walks 2 / 4 consecutive 32-row groups of its expert, so the
# routing lookups, the scale table and the launch slot are paid once per 64 / 128 rows). MoE layer
# at B = 1, 8, 64 (W4A16 and W4A4, alternating, three rounds); then test_cuda_moe.
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s13.XXXX)/run1; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run1; }
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
  timeout 100 $FB $B --no-peers --json $R/base-$round.json > $R/base-$round.log 2>&1
  for j in 2 4; do
    FP4KIT_MOE_LEAN_SPAN=$j timeout 100 $F $B --no-peers --json $R/span$j-$round.json > $R/span$j-$round.log 2>&1
  done
  echo "round $round at ${SECONDS}s"
done
for f in $R/*.log; do case $f in *build*|*configure*) continue;; esac; echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s | ", $1, $2, $3, $5} END {print ""}'; done
( time timeout $((590 - SECONDS)) build-gpu/tests/test_cuda_moe --library-tiles-only ) > $R/test_cuda_moe.log 2>&1; echo "test_cuda_moe rc=$?"; grep -E "checks|FAIL|real" $R/test_cuda_moe.log | tail -5
