#!/usr/bin/env bash
# Session 11, run 4: the routing kernel numbers the prefill tiles densely (tile_starts), so the
# register-A grouped tiles find no empty M tile and the grid's spare CTAs exit after one load
# (session 10, ncu: 6528 of gate_up's 14720 CTAs and 11424 of down's 25760 found an empty tile at
# DeepSeek-R1 B = 4096, each after an expert search). test_cuda_moe in full (every forced width runs
# the dense numbering too), then the MoE layer at B = 1024 and 4096 with the dense numbering
# (default) and with FP4KIT_MOE_DENSE_TILES=0 (the bound numbering), in alternation, two rounds.
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s11.XXXX)/run4; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run4; }
trap finish EXIT
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli test_cuda_moe > $R/build.log 2>&1; echo "build rc=$?" | tee -a $R/build.log
F=build-gpu/tools/fp4kit
for round in 1 2; do
  peers=""; [ $round = 2 ] && peers="--no-peers"
  timeout 100 $F bench --moe --m 1024,4096 $peers --json $R/dense-$round.json > $R/dense-$round.log 2>&1
  FP4KIT_MOE_DENSE_TILES=0 timeout 100 $F bench --moe --m 1024,4096 --no-peers --json $R/bound-$round.json > $R/bound-$round.log 2>&1
done
for f in $R/dense-*.log $R/bound-*.log; do echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s %s | ", $1, $2, $3, $5, $11} END {print ""}'; done
( time timeout 330 build-gpu/tests/test_cuda_moe ) > $R/test_cuda_moe.log 2>&1
grep -E "cases|checks|FAIL|real" $R/test_cuda_moe.log | tail -16
