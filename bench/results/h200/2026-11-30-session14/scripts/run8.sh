#!/usr/bin/env bash
# Session 14, run 8: the dense classic small-M kernel's weight loads with the L2 fetch unit of the
# lean loops (256 B at 4 or 8 warps splitting K) against the tree before it (scratch/base, the
# run-7 tree), alternating: dense W4A16 GEMMs of the default models at M = 1, 4, 8, 16, two rounds;
# then test_cuda.
set -u
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
R=$(mktemp -d /tmp/s14.XXXX)/run8; mkdir -p $R
finish() { tar -czf $OUT/run.tar.gz -C $(dirname $R) run8; }
trap finish EXIT
SECONDS=0
( cmake -S . -B build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure.log 2>&1 \
  && cmake --build build-gpu -j 10 --target fp4kit_cli test_cuda > $R/build.log 2>&1; echo "build rc=$?" >> $R/build.log ) &
( cmake -S scratch/base -B /tmp/build-base -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/configure-base.log 2>&1 \
  && cmake --build /tmp/build-base -j 6 --target fp4kit_cli > $R/build-base.log 2>&1; echo "base build rc=$?" >> $R/build-base.log ) &
wait
tail -1 $R/build.log; tail -1 $R/build-base.log; echo "built at ${SECONDS}s"
F=build-gpu/tools/fp4kit; FB=/tmp/build-base/tools/fp4kit
D="bench --backend cuda --op w4a16 --m 1,4,8,16"
for round in 1 2; do
  peers="--no-peers"; [ $round = 1 ] && peers=""
  timeout 120 $F $D $peers --json $R/dense-new-$round.json > $R/dense-new-$round.log 2>&1
  timeout 120 $FB $D --no-peers --json $R/dense-base-$round.json > $R/dense-base-$round.log 2>&1
  echo "dense round $round at ${SECONDS}s"
done
python3 - $R <<'PY'
import json, sys, statistics
R = sys.argv[1]
def ld(f): return {(r['n'], r['k'], r['m']): (r['median_us'], r['config']) for r in json.load(open(f)) if r['status'] == 'ok'}
n = [ld(f'{R}/dense-new-{i}.json') for i in (1, 2)]; b = [ld(f'{R}/dense-base-{i}.json') for i in (1, 2)]
for k in sorted(n[0]):
    if 'b6' in n[0][k][1]: continue
    new = min(x[k][0] for x in n); base = min(x[k][0] for x in b)
    print(k, n[0][k][1], f'new {new:.2f} base {base:.2f} ratio {new / base:.3f}')
PY
( time timeout $((330 - SECONDS)) build-gpu/tests/test_cuda ) > $R/test_cuda.log 2>&1; echo "test_cuda rc=$?"; grep -E "checks|cases|FAIL|real" $R/test_cuda.log | tail -4
