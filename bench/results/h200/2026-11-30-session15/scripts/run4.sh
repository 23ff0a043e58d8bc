#!/usr/bin/env bash
# Session 15, run 4 (the committed tree, 624eab8): the lean kernel's K split and span rules under the
# fixed-K walk. MoE layer at B = 1, 8, 64 with the K split forced to 2 and / or the span forced to 1
# against the rules, three rounds alternating; ncu per kernel (W4A16) with K split 1 / 2 / 4 forced
# and with span 1 / 2 forced.
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s15.XXXX)/run4; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run4; }
trap finish EXIT
SECONDS=0
( cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli > $R/build.log 2>&1; echo "build rc=$?" >> $R/build.log )
tail -1 $R/build.log; echo "built at ${SECONDS}s"
F=build-gpu/tools/fp4kit
B="bench --moe --m 1,8,64 --no-peers"
for round in 1 2 3; do
  timeout 60 $F $B > $R/rule-$round.log 2>&1
  FP4KIT_MOE_LEAN_KSPLIT=2 timeout 60 $F $B > $R/ksplit2-$round.log 2>&1
  FP4KIT_MOE_LEAN_SPAN=1 timeout 60 $F $B > $R/span1-$round.log 2>&1
  FP4KIT_MOE_LEAN_KSPLIT=2 FP4KIT_MOE_LEAN_SPAN=1 timeout 60 $F $B > $R/ksplit2-span1-$round.log 2>&1
  echo "moe round $round at ${SECONDS}s"
done
NCU="ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv --print-units base"
NB="bench --moe --mode w4a16 --m 1,8,64 --runs 10 --budget 0.001 --no-peers"
for kw in 1 2 4; do FP4KIT_MOE_LEAN_KSPLIT=$kw timeout 100 $NCU $F $NB > $R/ncu-kw$kw.csv 2> $R/ncu-kw$kw.err; done
for sp in 1 2; do FP4KIT_MOE_LEAN_SPAN=$sp timeout 100 $NCU $F $NB > $R/ncu-span$sp.csv 2> $R/ncu-span$sp.err; done
timeout 100 $NCU $F $NB > $R/ncu-rule.csv 2> $R/ncu-rule.err
echo "ncu at ${SECONDS}s"
for f in $R/rule-*.log $R/ksplit2-[0-9].log $R/span1-*.log $R/ksplit2-span1-*.log; do echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s %s | ", substr($1,1,4), $2, $3, $5, $8} END {print ""}'; done
grep -E "copy" $R/rule-1.log | head -2
python3 scripts/ncu_breakdown.py --moe-layers $R/ncu-rule.csv $R/ncu-kw1.csv $R/ncu-kw2.csv $R/ncu-kw4.csv $R/ncu-span1.csv $R/ncu-span2.csv 2>&1 | tail -40
