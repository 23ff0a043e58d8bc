#!/usr/bin/env bash
# builds and times every variant; then ncu of the base 128x256 kernel at M=4096
set -u
cd "$(dirname "$0")"
R=$OUT/diag; mkdir -p $R
for v in base nodec noact nomma noact_nodec noact_nomma; do
  (nvcc -std=c++17 -O3 -I../include -I../src --fmad=false --expt-relaxed-constexpr -gencode arch=compute_90a,code=sm_90a \
     -DWGRA_SRC="\"v_$v.cu\"" wgra_diag.cu -o /tmp/diag_$v -lcublas > $R/build_$v.log 2>&1; echo "rc=$?" >> $R/build_$v.log) &
done
wait
for v in base nodec noact nomma noact_nodec noact_nomma; do timeout 120 /tmp/diag_$v $v >> $R/times.txt 2>&1; done
cat $R/times.txt
