#!/usr/bin/env bash
# Session 7 run 4: ncu sections of the dense lean kernel, main (working tree) against the table
# decode (branch next-lut-decode, d237d94, in .lut-src), 57344 x 8192 at M = 1 (one-token path) and 4.
set -u
R=$(mktemp -d /tmp/run7n.XXXXXX)/run; mkdir -p $R
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
( cd .lut-src && cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/../.deps >$R/lut-configure.log 2>&1 \
  && cmake --build build-gpu -j 8 --target fp4kit_cli >$R/lut-build.log 2>&1; echo "rc=$?" >>$R/lut-build.log ) &
( cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps >$R/main-configure.log 2>&1 \
  && cmake --build build-gpu -j 8 --target fp4kit_cli >$R/main-build.log 2>&1; echo "rc=$?" >>$R/main-build.log ) &
wait
SEC="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section InstructionStats --section Occupancy --section LaunchStats"
NCU="ncu --clock-control none $SEC -k regex:gemm_small_m_lean -s 3 -c 1"
for v in main lut; do
  F=build-gpu/tools/fp4kit; [ $v = lut ] && F=.lut-src/build-gpu/tools/fp4kit
  for m in 1 4; do
    timeout 120 $NCU $F bench --backend cuda --shapes 57344x8192 --m $m --op w4a16 --runs 50 --no-peers > $R/ncu-$v-m$m.log 2>&1
    tar -czf $OUT/run.tar.gz -C $(dirname $R) run
  done
done
