#!/usr/bin/env bash
# Session 11, run 3 (main + FP4KIT_MOE_DOWN_DECODE, a measuring switch): which kernel should run the
# down GEMM in decode. At Qwen3.5 B = 1 the down GEMM (K = I = 1024, 8 slabs per 16-row tile) ran at
# 1.6 TB/s against gate_up's 2.3 (ncu, session 10): on the lean kernel each of a CTA's 4 warps
# streams only 2 slab steps between its setup and the reduction. Variants, in alternation, two rounds:
# the default (lean), the 8-warp kernel for down (its own warps-per-tile rule, then 1, 2 and 4 warps
# per tile forced), and the lean kernel's one-tile CTAs for both GEMMs. MoE layer at B = 1, 8, 64.
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s11.XXXX)/run3; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run3; }
trap finish EXIT
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli > $R/build.log 2>&1; echo "build rc=$?" | tee -a $R/build.log
F=build-gpu/tools/fp4kit
B="bench --moe --m 1,8,64"
for round in 1 2; do
  peers=""; [ $round = 2 ] && peers="--no-peers"
  timeout 100 $F $B $peers --json $R/default-$round.json > $R/default-$round.log 2>&1
  FP4KIT_MOE_DOWN_DECODE=mma timeout 100 $F $B --no-peers --json $R/down-mma-$round.json > $R/down-mma-$round.log 2>&1
  for w in 1 2 4; do
    FP4KIT_MOE_DOWN_DECODE=mma FP4KIT_MOE_WARPS_PER_TILE=$w timeout 100 $F $B --no-peers --json $R/down-mma-w$w-$round.json > $R/down-mma-w$w-$round.log 2>&1
  done
  FP4KIT_MOE_LEAN_ROWS=16 timeout 100 $F $B --no-peers --json $R/lean16-$round.json > $R/lean16-$round.log 2>&1
done
for f in $R/*.log; do case $f in *build*|*configure*) continue;; esac; echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s | ", $1, $2, $3, $5} END {print ""}'; done
