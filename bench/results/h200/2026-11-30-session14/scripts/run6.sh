#!/usr/bin/env bash
# Session 14, run 6: ncu per kernel of the W4A16 MoE layers at B = 1, 8, 64 with the warps sharing a
# group's K forced to 1, 2 and 4 (FP4KIT_MOE_LEAN_KSPLIT) under the L2 fetch unit of run 3, to
# re-fit the K-split rule (run 5: forcing 2 made Qwen3.5 B = 8 3% faster).
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s14.XXXX)/run6; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run6; }
trap finish EXIT
SECONDS=0
( cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli > $R/build.log 2>&1; echo "build rc=$?" >> $R/build.log )
tail -1 $R/build.log; echo "built at ${SECONDS}s"
F=build-gpu/tools/fp4kit
NCU="ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv --print-units base"
for kw in 1 2 4; do
  FP4KIT_MOE_LEAN_KSPLIT=$kw timeout 100 $NCU $F bench --moe --mode w4a16 --m 1,8,64 --runs 10 --budget 0.001 --no-peers > $R/ncu-kw$kw.csv 2> $R/ncu-kw$kw.err
  echo "ncu kw $kw rc=$? at ${SECONDS}s"
done
