#!/usr/bin/env bash
# Session 11, run 6 (main + measuring switches FP4KIT_MOE_GATE_UP_LEAN / FP4KIT_MOE_DOWN_LEAN): the
# lean decode kernel's shape per GEMM. At K = 1024 (Qwen3.5's down) each of a CTA's 4 warps has two
# slab steps and, with one slab in flight, pays two memory round trips; two slabs in flight (r32u2:
# two 16-row tiles, 4 CTAs per SM, 128 registers; r16: one tile, 6 CTAs per SM) pay one. Variants in
# alternation, two rounds, MoE layer at B = 1, 8, 64, both modes.
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s11.XXXX)/run6; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run6; }
trap finish EXIT
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli > $R/build.log 2>&1; echo "build rc=$?" | tee -a $R/build.log
F=build-gpu/tools/fp4kit
B="bench --moe --m 1,8,64 --no-peers"
for round in 1 2; do
  timeout 60 $F $B --json $R/default-$round.json > $R/default-$round.log 2>&1
  FP4KIT_MOE_DOWN_LEAN=r16 timeout 60 $F $B --json $R/down-r16-$round.json > $R/down-r16-$round.log 2>&1
  FP4KIT_MOE_DOWN_LEAN=r32u2 timeout 60 $F $B --json $R/down-r32u2-$round.json > $R/down-r32u2-$round.log 2>&1
  FP4KIT_MOE_GATE_UP_LEAN=r32u2 timeout 60 $F $B --json $R/gu-r32u2-$round.json > $R/gu-r32u2-$round.log 2>&1
  FP4KIT_MOE_GATE_UP_LEAN=r32u2 FP4KIT_MOE_DOWN_LEAN=r32u2 timeout 60 $F $B --json $R/both-r32u2-$round.json > $R/both-r32u2-$round.log 2>&1
done
for f in $R/*.log; do case $f in *build*|*configure*) continue;; esac; echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s | ", substr($1,1,4), $2, $3, $5} END {print ""}'; done
