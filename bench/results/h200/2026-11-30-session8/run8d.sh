#!/usr/bin/env bash
# Session 8 run 5: test_cuda (with the streaming configs and the prologue-identity fix) and
# test_cuda_moe (incl. session 7's unrun cases, commit 1fc0a14: the MoE code is main's), then Nsight
# Compute sections of the streaming kernel (2 and 6 stages) and of the default lean kernel on
# 57344 x 8192, M = 1.
set -u
R=$(mktemp -d /tmp/run8.XXXXXX)/run; mkdir -p $R
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.mem,temperature.gpu --format=csv > $R/device.txt 2>&1
echo "new $NEW_COMMIT" > $R/commit.txt
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 > $R/build.log 2>&1; echo "build rc=$?" >> $R/build.log
tar -czf $OUT/run.tar.gz -C $(dirname $R) run
( cd build-gpu && timeout 300 ctest --output-on-failure -j 2 -R "test_cuda$|test_cuda_moe" ) > $R/ctest.log 2>&1
tar -czf $OUT/run.tar.gz -C $(dirname $R) run
F=build-gpu/tools/fp4kit
SEC="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section MemoryWorkloadAnalysis --section Occupancy --section LaunchStats"
n() { local tag=$1 k=$2; shift 2
  timeout 90 ncu --clock-control none $SEC -k regex:$k -s 3 -c 1 $F bench --backend cuda --shapes 57344x8192 --m 1 --op w4a16 --runs 50 --no-peers "$@" > $R/ncu-$tag.log 2>&1
  tar -czf $OUT/run.tar.gz -C $(dirname $R) run; }
FP4KIT_TMA_STAGES=2 n tma-s2 gemm_small_m_tma --config small-m.tma.r32.w4
FP4KIT_TMA_STAGES=6 n tma-s6 gemm_small_m_tma --config small-m.tma.r32.w4
n lean gemm_small_m_lean
