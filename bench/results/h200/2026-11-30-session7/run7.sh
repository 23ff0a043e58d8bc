#!/usr/bin/env bash
# Session 7 device run: build new (tree) and old (.old-src = 3442677) for sm_90a, GPU tests on new,
# then same-run benches of both. Everything logs under $OUT/run.
set -u
R=$(mktemp -d /tmp/run7.XXXXXX)/run; mkdir -p $R
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
( cd .old-src && cmake -S . -B build-gpu -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/../.deps >$R/old-configure.log 2>&1 \
  && cmake --build build-gpu -j 6 >$R/old-build.log 2>&1; echo "old build rc=$?" >>$R/old-build.log ) &
export FP4KIT_COMMIT=${NEW_COMMIT} LOG=$R/new FP4KIT_STEP_TIMEOUT=300
FP4KIT_CTEST_ARGS='-R "test_cuda$|test_cuda_moe"' FP4KIT_GPU_PARTS="${PARTS:-build ctest}" OUT=$R/gc bash scripts/gpu-check.sh > $R/gpu-check.out 2>&1
wait
NEW=build-gpu/tools/fp4kit OLD=.old-src/build-gpu/tools/fp4kit
for v in new old new2 old2; do
  F=$NEW; export FP4KIT_COMMIT=$NEW_COMMIT; case $v in old*) F=$OLD; export FP4KIT_COMMIT=3442677;; esac
  [ -x $F ] || { echo "no $F" >> $R/errors.txt; continue; }
  tar -czf $OUT/run.tar.gz -C $(dirname $R) run
  timeout 120 $F bench --moe --m 1,8,64 --json $R/moe-$v.json > $R/moe-$v.log 2>&1
done
if [ "${SMALL:-1}" = 1 ]; then
for v in new old; do
  F=$NEW; export FP4KIT_COMMIT=$NEW_COMMIT; [ $v = old ] && F=$OLD && export FP4KIT_COMMIT=3442677
  [ -x $F ] || continue
  OPS=w4a16,w4a4; [ $v = old ] && OPS=w4a16
  timeout 150 $F bench --backend cuda --m 1,4,16 --op $OPS --json $R/small-$v.json > $R/small-$v.log 2>&1
done
fi
nvidia-smi > $R/nvidia-smi.txt 2>&1
tar -czf $OUT/run.tar.gz -C $(dirname $R) run
