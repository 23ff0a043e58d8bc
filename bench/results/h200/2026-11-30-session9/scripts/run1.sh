#!/usr/bin/env bash
# session 9 run 1: wgra diagnostics + the read-floor bench (merged next-read-floor)
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
mkdir -p $OUT/rf
( cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $OUT/rf/configure.log 2>&1 \
  && cmake --build build-gpu -j 12 --target fp4kit_cli > $OUT/rf/build.log 2>&1; echo "build rc=$?" >> $OUT/rf/build.log ) &
BPID=$!
date +%T > $OUT/t0
bash scratch/build_run.sh > $OUT/diag.log 2>&1
date +%T >> $OUT/t0
( cd scratch && timeout 150 ncu --set full -k regex:gemm_wgra_kernel --launch-skip 23 --launch-count 1 -o $OUT/diag/wgra_base -f /tmp/diag_base base > $OUT/diag/ncu_run.log 2>&1 )
ncu --import $OUT/diag/wgra_base.ncu-rep --page details > $OUT/diag/ncu_details.txt 2>&1
ncu --import $OUT/diag/wgra_base.ncu-rep --page source --csv --print-source sass > $OUT/diag/ncu_source.csv 2>&1
date +%T >> $OUT/t0
wait $BPID
date +%T >> $OUT/t0
F=build-gpu/tools/fp4kit; SH=57344x8192,8192x8192,20480x4096,8192x28672
FP4KIT_COMMIT=9864470 timeout 120 $F bench --backend cuda --shapes $SH --m 1,4,16 --op w4a16 --json $OUT/rf/w4a16.json --html $OUT/rf/w4a16.html > $OUT/rf/w4a16.log 2>&1
FP4KIT_COMMIT=9864470 timeout 60 $F bench --backend cuda --shapes 57344x8192,8192x8192 --m 1 --op w4a4 --json $OUT/rf/w4a4.json > $OUT/rf/w4a4.log 2>&1
date +%T >> $OUT/t0
rm -f $OUT/diag/wgra_base.ncu-rep
cat $OUT/diag/times.txt; tail -3 $OUT/rf/build.log; cat $OUT/t0
