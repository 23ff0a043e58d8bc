#!/usr/bin/env bash
# session 9 run 3: ncu of the decoupled wgra kernel (source-level stalls) + two variants
set -u
R=$(mktemp -d /tmp/r3.XXXX)/run3; mkdir -p $R
cd scratch
PIDS=""
for v in new new_noact new_nomma; do nvcc -std=c++17 -O3 -lineinfo -I../include -I../src --fmad=false --expt-relaxed-constexpr -gencode arch=compute_90a,code=sm_90a \
     -DWGRA_SRC="\"v_$v.cu\"" wgra_diag.cu -o /tmp/diag_$v -lcublas > $R/build_$v.log 2>&1 & PIDS="$PIDS $!"; done
wait $PIDS
for v in new new_noact new_nomma; do timeout 120 /tmp/diag_$v $v >> $R/times.txt 2>&1; done
timeout 200 ncu --set full --import-source yes -k regex:gemm_wgra_kernel --launch-skip 23 --launch-count 1 -o $R/wgra_new -f /tmp/diag_new new > $R/ncu_run.log 2>&1
ncu --import $R/wgra_new.ncu-rep --page details > $R/ncu_details.txt 2>&1
ncu --import $R/wgra_new.ncu-rep --page source --csv --print-source sass > $R/ncu_source.csv 2>&1
ls -la $R >> $R/ncu_run.log
tar -czf $OUT/run.tar.gz -C $(dirname $R) run3
cat $R/times.txt; grep -E "Throughput|Hit Rate|Eligible|Issued Warp|No Eligible|Occupancy|Duration|Stall" $R/ncu_details.txt | head -40
