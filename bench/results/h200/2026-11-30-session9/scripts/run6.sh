#!/usr/bin/env bash
# session 9 run 6: warp-role producer (new4) vs new3 + identity; test_cuda_large_m; bench wgra vs cublas-dequant
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/r6.XXXX)/run6; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run6; }
trap finish EXIT
( cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 12 --target fp4kit_cli test_cuda_large_m > $R/build.log 2>&1; echo "build rc=$?" >> $R/build.log ) &
BPID=$!
cd scratch
PIDS=""
for v in base new3 new4; do nvcc -std=c++17 -O3 -I../include -I../src --fmad=false --expt-relaxed-constexpr -gencode arch=compute_90a,code=sm_90a \
     -DWGRA_SRC="\"v_$v.cu\"" wgra_diag.cu -o /tmp/diag_$v -lcublas > $R/build_$v.log 2>&1 & PIDS="$PIDS $!"; done
wait $PIDS
for v in base new3 new4; do DIAG_DUMP=/tmp/out_$v timeout 120 /tmp/diag_$v $v >> $R/times.txt 2>&1; done
for t in 0 1; do cmp /tmp/out_base.$t /tmp/out_new4.$t > /dev/null && echo "new4 tile $t identical to base" || echo "new4 tile $t DIFFERS"; done >> $R/times.txt
cd ..
wait $BPID
date +%T > $R/t.txt
( time timeout 280 build-gpu/tests/test_cuda_large_m ) > $R/test_cuda_large_m.log 2>&1
date +%T >> $R/t.txt
F=build-gpu/tools/fp4kit
SH=20480x4096,128x4096,4096x8192,17408x4096,512x4096,2048x4096,4096x1024,10240x8192,8192x8192,57344x8192,8192x28672
for c in large-m.wgra.128x256 large-m.wgra.128x128; do
  FP4KIT_COMMIT=s9r6 timeout 100 $F bench --backend cuda --config $c --shapes $SH --m 128,256,512,1024,4096 --op w4a16 --json $R/bench-w4a16-$c.json > $R/bench-w4a16-$c.log 2>&1
done
FP4KIT_COMMIT=s9r6 timeout 100 $F bench --backend cublas-dequant --shapes $SH --m 128,256,512,1024,4096 --op w4a16 --json $R/bench-w4a16-dequant.json > $R/bench-w4a16-dequant.log 2>&1
date +%T >> $R/t.txt
FP4KIT_COMMIT=s9r6 timeout 60 $F bench --backend cuda --config large-m.wgra.pro.128x256 --shapes $SH --m 256,512,4096 --op w4a4 --json $R/bench-w4a4-wgra.json > $R/bench-w4a4-wgra.log 2>&1
FP4KIT_COMMIT=s9r6 timeout 60 $F bench --backend cublas-dequant --shapes $SH --m 256,512,4096 --op w4a4 --json $R/bench-w4a4-dequant.json > $R/bench-w4a4-dequant.log 2>&1
date +%T >> $R/t.txt
cat $R/times.txt | grep -v "^base"; tail -n 3 $R/test_cuda_large_m.log; cat $R/t.txt; tail -n 2 $R/build.log
