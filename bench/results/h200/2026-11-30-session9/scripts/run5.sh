#!/usr/bin/env bash
# session 9 run 3: ncu of the decoupled wgra kernel (source-level stalls) + two variants
set -u
R=$(mktemp -d /tmp/r5.XXXX)/run5; mkdir -p $R
cd scratch
PIDS=""
for v in base new3; do nvcc -std=c++17 -O3 -lineinfo -I../include -I../src --fmad=false --expt-relaxed-constexpr -gencode arch=compute_90a,code=sm_90a \
     -DWGRA_SRC="\"v_$v.cu\"" wgra_diag.cu -o /tmp/diag_$v -lcublas > $R/build_$v.log 2>&1 & PIDS="$PIDS $!"; done
wait $PIDS
for v in base new3; do DIAG_DUMP=/tmp/out_$v timeout 120 /tmp/diag_$v $v >> $R/times.txt 2>&1; done
for t in 0 1; do cmp /tmp/out_base.$t /tmp/out_new3.$t > /dev/null && echo "tile $t identical" || echo "tile $t DIFFER"; done >> $R/times.txt
timeout 200 ncu --set full --import-source yes -k regex:gemm_wgra_kernel --launch-skip 23 --launch-count 1 -o $R/wgra_new3 -f /tmp/diag_new3 new3 > $R/ncu_run.log 2>&1
ncu --import $R/wgra_new3.ncu-rep --page details > $R/ncu_details.txt 2>&1
ncu --import $R/wgra_new3.ncu-rep --page source --csv --print-source sass > $R/ncu_source.csv 2>&1
ls -la $R >> $R/ncu_run.log
tar -czf $OUT/run.tar.gz -C $(dirname $R) run5
cat $R/times.txt; grep -E "Throughput|Hit Rate|Eligible|Issued Warp|No Eligible|Occupancy|Duration|Stall" $R/ncu_details.txt | head -40
