#!/usr/bin/env bash
# Session 14, run 1: the lean MoE decode kernel's weight loads with an L2 prefetch size
# (FP4KIT_MOE_LEAN_PF = 0 / 128 / 256: ld.global.nc.L2::128B / ::256B) and with each warp's
# slabs as one contiguous chunk of K (FP4KIT_MOE_LEAN_CHUNK=1) instead of interleaved with the
# other warps of its group; both measuring switches of this build. Three rounds, alternating,
# MoE layer at B = 1, 8, 64 (peers in round 1 of the default).
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s14.XXXX)/run1; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run1; }
trap finish EXIT
SECONDS=0
( cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli > $R/build.log 2>&1; echo "build rc=$?" >> $R/build.log )
tail -1 $R/build.log; echo "built at ${SECONDS}s"
F=build-gpu/tools/fp4kit
B="bench --moe --m 1,8,64"
for round in 1 2 3; do
  for v in 0-0 128-0 256-0 0-1 128-1 256-1; do
    peers="--no-peers"; [ $round = 1 ] && [ $v = 0-0 ] && peers=""
    FP4KIT_MOE_LEAN_PF=${v%-*} FP4KIT_MOE_LEAN_CHUNK=${v#*-} timeout 100 $F $B $peers --json $R/v$v-$round.json > $R/v$v-$round.log 2>&1
  done
  echo "round $round at ${SECONDS}s"
done
for f in $R/v*.log; do echo "== $(basename $f .log)"; grep -E "^(qwen|deepseek)" $f | awk '{printf "%s %s %s %s %s | ", substr($1,1,4), $2, $3, $5, $8} END {print ""}'; done
