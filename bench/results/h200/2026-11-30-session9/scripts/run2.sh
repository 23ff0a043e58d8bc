#!/usr/bin/env bash
# session 9 run 2: decoupled wgra producer: diag A/B + output identity, ctest large-m/wgra, CLI bench, read floor
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/r2.XXXX)/run2; mkdir -p $R/diag $R/rf
( cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 12 --target fp4kit_cli test_cuda_large_m test_cuda_wgra > $R/build.log 2>&1; echo "build rc=$?" >> $R/build.log ) &
BPID=$!
cd scratch
PIDS=""
for v in base new; do nvcc -std=c++17 -O3 -I../include -I../src --fmad=false --expt-relaxed-constexpr -gencode arch=compute_90a,code=sm_90a \
     -DWGRA_SRC="\"v_$v.cu\"" wgra_diag.cu -o /tmp/diag_$v -lcublas > $R/diag/build_$v.log 2>&1 & PIDS="$PIDS $!"; done
wait $PIDS
for v in base new; do DIAG_DUMP=/tmp/out_$v timeout 120 /tmp/diag_$v $v >> $R/diag/times.txt 2>&1; done
for t in 0 1; do cmp /tmp/out_base.$t /tmp/out_new.$t > /dev/null && echo "tile $t outputs identical" || echo "tile $t outputs DIFFER"; done >> $R/diag/times.txt
cd ..
wait $BPID
( time build-gpu/tests/test_cuda_wgra ) > $R/test_cuda_wgra.log 2>&1
( time build-gpu/tests/test_cuda_large_m ) > $R/test_cuda_large_m.log 2>&1
F=build-gpu/tools/fp4kit
for c in large-m.wgra.128x256 large-m.wgra.128x128; do
  FP4KIT_COMMIT=s9r2 timeout 150 $F bench --backend cuda --config $c --shapes 8192x8192,20480x4096,8192x28672,57344x8192 --m 256,512,1024,4096 --op w4a16 --runs 30 --json $R/bench-$c.json > $R/bench-$c.log 2>&1
done
SH=57344x8192,8192x8192,20480x4096,8192x28672
FP4KIT_COMMIT=9864470 timeout 120 $F bench --backend cuda --shapes $SH --m 1,4,16 --op w4a16 --json $R/rf/w4a16.json --html $R/rf/w4a16.html > $R/rf/w4a16.log 2>&1
FP4KIT_COMMIT=9864470 timeout 60 $F bench --backend cuda --shapes 57344x8192,8192x8192 --m 1 --op w4a4 --json $R/rf/w4a4.json > $R/rf/w4a4.log 2>&1
tar -czf $OUT/run.tar.gz -C $(dirname $R) run2
cat $R/diag/times.txt; tail -3 $R/test_cuda_wgra.log $R/test_cuda_large_m.log; grep -h "wgra\|cublas" $R/bench-*.log | head -40; head -30 $R/rf/w4a16.log
