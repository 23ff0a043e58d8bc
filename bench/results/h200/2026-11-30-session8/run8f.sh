#!/usr/bin/env bash
# Session 8 run 8: the MoE layer's routing counts in shared memory and the combine's grouped loads.
# Builds the tree (new) and .old-src (main) for sm_90a side by side, times bench --moe four times
# alternating new, main, new, main, takes ncu durations of route_kernel and combine_kernel of both
# at B = 1, then runs test_cuda_moe on new.
set -u
R=$(mktemp -d /tmp/run8.XXXXXX)/run; mkdir -p $R
export LD_LIBRARY_PATH="$PWD/.deps/lib:${LD_LIBRARY_PATH:-}"
echo "new $NEW_COMMIT old $OLD_COMMIT" > $R/commit.txt
b() { cmake -S $1 -B $1/build-gpu -DFP4KIT_WERROR=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real -DCMAKE_PREFIX_PATH=$PWD/.deps > $R/$2-configure.log 2>&1 \
      && cmake --build $1/build-gpu -j 8 $3 > $R/$2-build.log 2>&1; echo "$2 build rc=$?" >> $R/$2-build.log; }
b . new "" & b .old-src old "--target fp4kit_cli" & wait
NEW=build-gpu/tools/fp4kit OLD=.old-src/build-gpu/tools/fp4kit
for v in new old new2 old2; do
  F=$NEW C=$NEW_COMMIT; case $v in old*) F=$OLD C=$OLD_COMMIT;; esac
  [ -x $F ] || { echo "no $F" >> $R/errors.txt; continue; }
  FP4KIT_COMMIT=$C timeout 120 $F bench --moe --m 1,8,64 --json $R/moe-$v.json > $R/moe-$v.log 2>&1
  tar -czf $OUT/run.tar.gz -C $(dirname $R) run
done
for v in new old; do
  F=$NEW; [ $v = old ] && F=$OLD
  timeout 90 ncu --clock-control none --metrics gpu__time_duration.sum -k regex:"route_kernel|combine_kernel" -c 8 \
    $F bench --moe --m 1 --mode w4a16 --runs 10 --no-peers > $R/ncu-small-kernels-$v.log 2>&1
done
tar -czf $OUT/run.tar.gz -C $(dirname $R) run
( cd build-gpu && timeout 240 ctest --output-on-failure -R "test_cuda_moe" ) > $R/ctest.log 2>&1
tar -czf $OUT/run.tar.gz -C $(dirname $R) run
