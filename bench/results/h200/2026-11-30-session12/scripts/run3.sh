#!/usr/bin/env bash
# Session 12, run 3: what bounds the register-A grouped tiles at DeepSeek-R1 B = 4096 (gate_up and
# down, 160-token tiles): ncu --set full on the first layer call's two GEMMs (tensor pipe, L2 and
# DRAM throughput, warp stall reasons, source counters).
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s12.XXXX)/run3; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run3; }
trap finish EXIT
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli > $R/build.log 2>&1; echo "build rc=$?" | tee -a $R/build.log
F=build-gpu/tools/fp4kit
timeout 400 ncu --set full --import-source yes --kernel-name-base demangled -k 'regex:wgra_kernel<.int.160' --launch-count 2 -o $R/deepseek-b4096 \
  $F bench --moe --m 4096 --runs 10 --budget 0.001 --no-peers > $R/ncu.log 2>&1
echo "ncu rc=$?"
ncu --import $R/deepseek-b4096.ncu-rep --page details --csv > $R/details.csv 2>&1
ncu --import $R/deepseek-b4096.ncu-rep --page raw --csv > $R/raw.csv 2>&1
grep -E "Duration|Compute \(SM\) Throughput|Memory Throughput|L2 Cache Throughput|DRAM Throughput|Executed Ipc Active|Issue Slots Busy|Registers Per|Achieved Occupancy|Eligible|No Eligible" $R/details.csv | head -40
