#!/usr/bin/env bash
# Session 11, run 7 (branch next-small-m-shared-act): the dense small-M shared-activation kernel
# ("small-m.sa.r64.w8": two K groups of four warps, each group staging its slab's activations once in
# shared memory for its four N warps). test_cuda (every config against the reference, incl. the new
# one and its W4A4 prologue twin, and its refusal), then fp4kit bench W4A16 at M = 8, 16, 32 on the
# default shapes: the default configs (with peers) and the new config, in the same run.
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s11.XXXX)/run7; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run7; }
trap finish EXIT
cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 16 --target fp4kit_cli test_cuda > $R/build.log 2>&1; echo "build rc=$?" | tee -a $R/build.log
grep -E "error" $R/build.log | head
F=build-gpu/tools/fp4kit
timeout 60 $F bench --backend cuda --op w4a16 --m 8,16,32 --json $R/default.json > $R/default.log 2>&1; echo "default rc=$?"
timeout 60 $F bench --backend cuda --op w4a16 --m 8,16,32 --no-peers --config small-m.sa.r64.w8 --json $R/sa.json > $R/sa.log 2>&1; echo "sa rc=$?"
python3 - $R <<'PY'
import json, sys
R = sys.argv[1]
d = {(r['shape'], r['m']): r for r in json.load(open(R + '/default.json'))}
for r in json.load(open(R + '/sa.json')):
    b = d.get((r['shape'], r['m']))
    if b and r.get('median_us') and b.get('median_us'):
        print(f"{r['shape']:>12} M={r['m']:>2} default {b['median_us']:8.2f} us ({b['config']}, {100*b['frac_of_bw_peer']:.0f}% copy)  sa {r['median_us']:8.2f} us ({100*r['median_us'] and 100*b['frac_of_bw_peer']*b['median_us']/r['median_us']:.0f}% copy)  {b['median_us']/r['median_us']:.2f}x")
    else:
        print(r['shape'], r['m'], r.get('status'), r.get('reason'))
PY
( time timeout 200 build-gpu/tests/test_cuda ) > $R/test_cuda.log 2>&1
grep -E "FAIL|checks|failures|real|sa.r64" $R/test_cuda.log | tail -12
